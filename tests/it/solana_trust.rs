//! The Solana rail checks what it pays: the mint is pinned to the cluster named
//! in `solana.cluster` (a wrong mint is refused at start by `pay solana`, `reconcile solana`
//! and `serve`'s Solana worker, and reconcile never agrees with another mint); an existing
//! recipient token account that is not the recipient wallet's is never paid into; memos
//! carry keyed references, never payout ids. On the local chain (litesvm + the real SPL
//! programs) through the production `RpcClient` adapter. Runs on SQLite, and on PostgreSQL
//! when `SETTLE_TEST_PG_URL` is set.

use crate::common;
use crate::solana_support;

use std::time::Duration;

use settle::rails::solana::{
    DEVNET_USDC_MINT, LedgerJournal, MAINNET_USDC_MINT, SolanaRail, SolanaRailError,
};
use settle_solana::{Keypair, Signature, Signer, pack};
use solana_support::*;

const TREASURY_USDC: u64 = 1_000_000 * USDC;

/// The refusal of `SolanaRail::connect`, with its stable code.
async fn refusal(
    w: &World,
    change: impl FnOnce(&mut settle::config::SolanaConfig),
) -> (String, String) {
    let mut config = w.config();
    change(&mut config);
    match SolanaRail::connect(&config).await {
        Ok(_) => panic!("the rail started"),
        Err(e) => (
            e.code()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{e:?}")),
            e.to_string(),
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_mint_is_refused_at_start_naming_the_mint_and_the_cluster() {
    let w = World::new(TREASURY_USDC, 10 * SOL).await;
    let local = w.dev.mint.to_string();

    // The local chain's mint on mainnet-beta or devnet: refused before anything else.
    for cluster in ["mainnet-beta", "devnet", "testnet"] {
        let (code, message) = refusal(&w, |c| c.cluster = cluster.into()).await;
        assert_eq!(code, "mint_not_allowed", "{message}");
        assert!(
            message.contains(&local) && message.contains(cluster),
            "{message}"
        );
    }
    // Devnet's USDC on mainnet-beta and the reverse.
    let (code, message) = refusal(&w, |c| {
        c.cluster = "mainnet-beta".into();
        c.mint = DEVNET_USDC_MINT.into();
    })
    .await;
    assert_eq!(code, "mint_not_allowed", "{message}");
    assert!(
        message.contains(MAINNET_USDC_MINT),
        "names the USDC mint: {message}"
    );
    let (code, _) = refusal(&w, |c| {
        c.cluster = "devnet".into();
        c.mint = MAINNET_USDC_MINT.into();
    })
    .await;
    assert_eq!(code, "mint_not_allowed");
    // Malformed names.
    let (code, _) = refusal(&w, |c| c.cluster = "mainnet".into()).await;
    assert_eq!(code, "invalid_cluster");
    let (code, _) = refusal(&w, |c| c.mint = "not-a-mint".into()).await;
    assert_eq!(code, "invalid_mint");
    let (code, _) = refusal(&w, |c| c.allowed_mints = vec!["0OIl".into()]).await;
    assert_eq!(code, "invalid_mint");

    // Explicitly allowed, the mint passes the policy; the node is then not mainnet-beta.
    let (code, message) = refusal(&w, |c| {
        c.cluster = "mainnet-beta".into();
        c.allowed_mints = vec![local.clone()];
    })
    .await;
    assert_eq!(code, "cluster_mismatch", "{message}");
    assert!(message.contains("mainnet-beta"), "{message}");
    // The built-in USDC mint on mainnet-beta against the local node: not that cluster.
    let (code, _) = refusal(&w, |c| {
        c.cluster = "mainnet-beta".into();
        c.mint = MAINNET_USDC_MINT.into();
    })
    .await;
    assert_eq!(code, "cluster_mismatch");

    // localnet accepts any mint, but it must exist with 6 decimals.
    let rail = w.rail().await;
    assert_eq!(rail.cluster().name(), "localnet");
    let nine = w.dev.chain.create_mint(9).to_string();
    let err = SolanaRail::connect(&settle::config::SolanaConfig {
        mint: nine.clone(),
        ..w.config()
    })
    .await
    .expect_err("a 9-decimal mint is refused");
    assert!(
        matches!(&err, SolanaRailError::Mint(m) if m.contains("9 decimals") && m.contains(&nine)),
        "{err}"
    );
    let nothing = Keypair::new().pubkey().to_string();
    let err = SolanaRail::connect(&settle::config::SolanaConfig {
        mint: nothing.clone(),
        ..w.config()
    })
    .await
    .expect_err("a missing mint is refused");
    assert!(
        matches!(&err, SolanaRailError::Mint(m) if m.contains("does not exist")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_reconcile_and_serve_do_not_start_with_a_wrong_mint() {
    let w = World::new(TREASURY_USDC, 10 * SOL).await;
    let providers = w.providers("wm", 2).await;
    w.weekly(MONDAY, RUN_AT).await;
    let mint = w.dev.mint.to_string();
    let keypair = w.dev.treasury_path.display().to_string();
    let rail_args = [
        "--cluster",
        "mainnet-beta",
        "--rpc-url",
        w.dev.url.as_str(),
        "--mint",
        mint.as_str(),
        "--treasury-keypair",
        keypair.as_str(),
    ];
    let sends = w.dev.chain.stats().send_calls;
    for command in ["pay", "reconcile"] {
        let mut args = vec!["--now", "2026-11-23T07:00:00Z", command, "solana"];
        args.extend(rail_args);
        let (code, out, err) = common::run_cli(&w.db.url, &args);
        assert_eq!(code, 1, "{command}: {out}{err}");
        assert!(
            err.contains("mint_not_allowed") && err.contains(&mint) && err.contains("mainnet-beta"),
            "{command}: {err}"
        );
    }
    // `settle serve` with the Solana worker exits instead of serving.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let mut serve = tokio::process::Command::from(common::settle_command())
        .args(["--database", &w.db.url, "serve", "--no-scheduler"])
        .env("SETTLE_HTTP__BIND", "127.0.0.1:0")
        .env("SETTLE_HTTP__METRICS_BIND", "127.0.0.1:0")
        .env("SETTLE_WORKERS__SOLANA_ENABLED", "true")
        .env("SETTLE_BANK__ALLOW_EXAMPLE_ORIGINATOR", "true")
        .env("SETTLE_WORKERS__SOLANA_INTERVAL_MS", "50")
        .env("SETTLE_SOLANA__RPC_URL", &w.dev.url)
        .env("SETTLE_SOLANA__MINT", &mint)
        .env("SETTLE_SOLANA__TREASURY_KEYPAIR_PATH", &keypair)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("start settle serve");
    let status = tokio::time::timeout(Duration::from_secs(60), serve.wait())
        .await
        .expect("serve exits")
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains("mint_not_allowed") && text.contains(&mint) && text.contains("mainnet-beta"),
        "{text}"
    );
    // Nothing was paid.
    assert_eq!(w.dev.chain.stats().send_calls, sends);
    assert_eq!(w.count_events("solana_tx.signed").await, 0);
    for p in &providers {
        assert_eq!(w.payouts_of(&p.id).await[0].status.as_str(), "created");
        assert_eq!(w.usdc_of(&p.wallet), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_never_agrees_with_another_mint() {
    let w = World::new(TREASURY_USDC, 10 * SOL).await;
    let providers = w.providers("rm", 3).await;
    w.weekly(MONDAY, RUN_AT).await;
    let rail = w.rail().await;
    w.at("2026-11-23T07:00:00Z");
    assert_eq!(rail.pay_pending(&w.ledger).await.unwrap().settled, 3);
    w.assert_clean(&rail).await;

    // Another 6-decimal mint (accepted on localnet): the chain credited none of it.
    let other = w.dev.chain.create_usdc_mint().to_string();
    let wrong = w.rail_with(|c| c.mint = other.clone()).await;
    let report = wrong.reconcile(&w.ledger).await.unwrap();
    assert!(!report.ok());
    assert_eq!((report.checked, report.matched), (3, 0));
    let mut mismatched: Vec<String> = report
        .differences
        .iter()
        .filter(|d| d.kind == "amount_mismatch" && d.actual_micro_usdc == Some(0))
        .flat_map(|d| d.payout_ids.clone())
        .collect();
    mismatched.sort();
    let mut expected: Vec<String> = w
        .run_payouts(MONDAY)
        .await
        .into_iter()
        .map(|p| p.payout_id.into())
        .collect();
    expected.sort();
    assert_eq!(mismatched, expected, "{report:?}");
    // And on a public cluster that mint does not even start.
    let (code, _) = refusal(&w, |c| {
        c.cluster = "devnet".into();
        c.mint = other.clone();
    })
    .await;
    assert_eq!(code, "mint_not_allowed");
    drop(providers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_account_of_another_owner_is_never_paid_and_the_payout_fails_with_a_code() {
    let w = World::new(TREASURY_USDC, 10 * SOL).await;
    let providers = w.providers("ow", 4).await;
    for p in &providers {
        w.dev.chain.create_token_account(&w.dev.mint, &p.wallet);
    }
    // Provider 1's USDC address holds a token account that belongs to someone else.
    let victim = providers[1].clone();
    let thief = Keypair::new().pubkey();
    let account = pack::token_account_of(&victim.wallet, &w.dev.mint);
    w.dev
        .chain
        .plant_token_account(&account, &w.dev.mint, &thief, 0);
    w.weekly(MONDAY, RUN_AT).await;
    let rail = w.rail().await;
    w.at("2026-11-23T07:00:00Z");
    let report = rail.pay_pending(&w.ledger).await.unwrap();
    assert_eq!((report.settled, report.failed), (3, 1), "{report:?}");
    let result = report
        .payouts
        .iter()
        .find(|r| r.provider_id == victim.id)
        .unwrap();
    assert_eq!(result.status, settle::rails::solana::PassStatus::Failed);
    assert!(result.signature.is_none(), "never signed");
    let payout = w.payouts_of(&victim.id).await.remove(0);
    assert_eq!(payout.status.as_str(), "failed");
    let reason = payout.failure_reason.clone().unwrap();
    assert!(
        reason.starts_with("token_account_owner_mismatch: ") && reason.contains(&thief.to_string()),
        "{reason}"
    );
    // No signed transaction holds it; the foreign account received nothing.
    let journal = LedgerJournal::new(w.ledger.clone());
    assert!(
        journal
            .attempts()
            .await
            .unwrap()
            .iter()
            .all(|a| !a.payout_ids.contains(&payout.payout_id.to_string()))
    );
    assert_eq!(w.dev.chain.token_balance_of(&w.dev.mint, &victim.wallet), 0);
    for p in providers.iter().filter(|p| p.id != victim.id) {
        assert_eq!(w.usdc_of(&p.wallet), p.net_micro_usdc as u64);
    }
    w.assert_clean(&rail).await;

    // The amount went back to payable: once the account is the wallet's again, the next
    // run pays it, into the wallet's own account.
    w.dev
        .chain
        .plant_token_account(&account, &w.dev.mint, &victim.wallet, 0);
    let next = w.weekly(NEXT_MONDAY, NEXT_RUN_AT).await;
    assert_eq!(next.payouts, 1, "{next:?}");
    w.at("2026-11-30T07:00:00Z");
    let report = rail.pay_pending(&w.ledger).await.unwrap();
    assert_eq!((report.settled, report.failed), (1, 0), "{report:?}");
    assert_eq!(w.usdc_of(&victim.wallet), victim.net_micro_usdc as u64);
    w.assert_clean(&rail).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memos_on_chain_name_keyed_references_not_payouts_or_providers() {
    let w = World::new(TREASURY_USDC, 10 * SOL).await;
    let providers = w.providers("mm", 3).await;
    w.weekly(MONDAY, RUN_AT).await;
    let rail = w.rail().await;
    w.at("2026-11-23T07:00:00Z");
    let report = rail.pay_pending(&w.ledger).await.unwrap();
    assert_eq!(report.settled, 3);
    let payouts = w.run_payouts(MONDAY).await;
    for p in &payouts {
        let signature: Signature = p.reference.as_deref().unwrap().parse().unwrap();
        let landed = w.dev.chain.landed_transaction(&signature).unwrap();
        let message = &landed.transaction.message;
        let memo = message
            .instructions()
            .iter()
            .find(|ix| {
                message.static_account_keys()[ix.program_id_index as usize] == pack::MEMO_PROGRAM_ID
            })
            .map(|ix| String::from_utf8(ix.data.clone()).unwrap())
            .expect("a memo");
        assert!(memo.starts_with("settle refs: "), "{memo}");
        assert!(memo.contains(&rail.memo_ref(&p.payout_id)), "{memo}");
        // Neither the payout id (a hash of run and provider, guessable) nor any provider id
        // is on chain.
        let bytes = landed.transaction.message.serialize();
        for needle in payouts
            .iter()
            .map(|q| q.payout_id.as_str())
            .chain(providers.iter().map(|q| q.id.as_str()))
        {
            assert!(
                !bytes.windows(needle.len()).any(|x| x == needle.as_bytes()),
                "{needle} is on chain"
            );
        }
    }
    // The reference depends on the treasury's secret: another treasury, other references.
    let other = tempfile::tempdir().unwrap();
    let other_path = other.path().join("other.json");
    settle::rails::solana::dev::write_keypair(&other_path, &Keypair::new()).unwrap();
    let other_rail = w
        .rail_with(|c| c.treasury_keypair_path = other_path.display().to_string())
        .await;
    assert_ne!(
        other_rail.memo_ref(&payouts[0].payout_id),
        rail.memo_ref(&payouts[0].payout_id)
    );
    w.assert_clean(&rail).await;
}

#[test]
fn the_cluster_and_allowed_mints_load_from_file_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("settle.toml");
    // An older file with the (now ignored) explorer_cluster still loads.
    std::fs::write(
        &path,
        "[solana]\ncluster = \"devnet\"\nexplorer_cluster = \"devnet\"\n",
    )
    .unwrap();
    let env = vec![(
        "SETTLE_SOLANA__ALLOWED_MINTS".to_owned(),
        format!(r#"["{MAINNET_USDC_MINT}"]"#),
    )];
    let c = settle::config::Config::load(Some(&path), env.into_iter())
        .unwrap()
        .solana;
    assert_eq!(c.cluster, "devnet");
    assert_eq!(c.allowed_mints, vec![MAINNET_USDC_MINT.to_owned()]);
    // Mainnet's USDC on devnet passes the policy only because it is listed.
    let (cluster, mint) = settle::rails::solana::mint_policy(&c).unwrap();
    assert_eq!(
        (cluster.name(), mint.to_string()),
        ("devnet", MAINNET_USDC_MINT.to_owned())
    );
    let unlisted = settle::config::SolanaConfig {
        allowed_mints: Vec::new(),
        ..c
    };
    let err = settle::rails::solana::mint_policy(&unlisted).unwrap_err();
    assert_eq!(err.code(), Some("mint_not_allowed"), "{err}");
    // The defaults are mainnet-beta's USDC on mainnet-beta.
    let defaults = settle::config::SolanaConfig::default();
    let (cluster, mint) = settle::rails::solana::mint_policy(&defaults).unwrap();
    assert_eq!(
        (cluster.name(), mint.to_string()),
        ("mainnet-beta", MAINNET_USDC_MINT.to_owned())
    );
}
