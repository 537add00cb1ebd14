//! The USDC rail end to end: weekly runs paid on a local chain that executes the real SPL
//! Token, Associated Token Account and Memo programs, through the production `RpcClient`
//! adapter against the chain's JSON-RPC endpoint; the ledger journal's guards; the
//! preflight. Runs on SQLite, and on PostgreSQL when `SETTLE_TEST_PG_URL` is set.

use crate::common;
use crate::solana_support;

use std::collections::{BTreeMap, BTreeSet};

use settle::domain::event::{EventBody, PLATFORM_STREAM, SolanaTxResolved};
use settle::ledger::{content_hash, find_idem};
use settle::rails::solana::{LedgerJournal, SolanaRailError};
use settle::store::NewEvent;
use settle_solana::lookup::{self, LookupTables, TableWork};
use settle_solana::{
    AttemptOutcome, Chain, Journal, JournalError, Keypair, Signature, SignedAttempt, Signer,
    Transfer,
};
use solana_support::*;

const TREASURY_USDC: u64 = 1_000_000 * USDC;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weekly_run_of_250_solana_providers_is_paid_exactly_once() {
    let w = World::new(TREASURY_USDC, 100 * SOL).await;
    let providers = w.providers("sp", 250).await;
    // Half the wallets already hold a USDC account; the rail creates the others'
    // (CreateIdempotent, rent paid by the treasury).
    for p in providers.iter().step_by(2) {
        w.dev.chain.create_token_account(&w.dev.mint, &p.wallet);
    }
    let run = w.weekly(MONDAY, RUN_AT).await;
    let total: i64 = providers.iter().map(|p| p.net_micro_usdc).sum();
    assert_eq!(run.payouts, 250);
    assert_eq!(run.payouts_micro_usdc, total);

    let rail = w.rail().await;
    let treasury_before = w.dev.treasury_usdc();
    let lamports_before = w.dev.chain.lamports_of(&w.dev.treasury);
    w.at("2026-11-23T07:00:00Z");
    let report = rail.pay_pending(&w.ledger).await.expect("pay");
    assert_eq!(report.outbox, 250);
    assert_eq!(report.outbox_micro_usdc, total);
    assert_eq!(
        (
            report.settled,
            report.failed,
            report.pending,
            report.not_sent
        ),
        (250, 0, 0, 0),
        "{report:?}"
    );
    assert_eq!(report.settled_micro_usdc, total);

    // Every provider holds exactly its payout; the treasury shrank by the total.
    let mut signatures = BTreeSet::new();
    for p in &providers {
        let payouts = w.payouts_of(&p.id).await;
        assert_eq!(payouts.len(), 1, "{}", p.id);
        let payout = &payouts[0];
        assert_eq!(payout.status.as_str(), "settled", "{}", p.id);
        assert_eq!(payout.amount_micro_usdc, p.net_micro_usdc);
        let signature = payout.reference.clone().expect("signature as reference");
        assert!(signature.parse::<Signature>().is_ok(), "{signature}");
        signatures.insert(signature);
        assert_eq!(w.usdc_of(&p.wallet), p.net_micro_usdc as u64, "{}", p.id);
    }
    assert_eq!(w.dev.treasury_usdc(), treasury_before - total as u64);
    assert_eq!(signatures.len(), report.transactions_landed);

    // Fees and rents: what the treasury's SOL paid.
    let mut fees = 0u64;
    let mut per_tx = Vec::new();
    for s in &signatures {
        let landed = w
            .dev
            .chain
            .landed_transaction(&s.parse().unwrap())
            .expect("landed on chain");
        assert!(landed.err.is_none());
        fees += landed.fee;
        per_tx.push(
            report
                .payouts
                .iter()
                .filter(|r| r.signature.as_deref() == Some(s.as_str()))
                .count(),
        );
    }
    // Every payment is a v0 transaction against the treasury's lookup tables, which the
    // rail created in this pass (journaled on the ledger as attempts without payouts).
    for s in &signatures {
        let landed = w.dev.chain.landed_transaction(&s.parse().unwrap()).unwrap();
        assert!(
            matches!(
                landed.transaction.message,
                settle_solana::VersionedMessage::V0(_)
            ),
            "{s} is not a v0 transaction"
        );
    }
    let tables = rail.lookup_tables(&w.ledger).await.expect("tables");
    assert!(!tables.is_empty());
    assert!(report.lookup_table_transactions_landed >= tables.len());
    let table_rent: u64 = tables.iter().map(|t| w.dev.chain.lamports_of(t)).sum();
    let table_fees: u64 = w
        .dev
        .chain
        .landed_signatures()
        .iter()
        .filter(|s| !signatures.contains(&s.to_string()))
        .map(|s| w.dev.chain.landed_transaction(s).unwrap())
        .filter(|l| settle_solana::maintained_table(&l.transaction).is_some())
        .map(|l| l.fee)
        .sum();
    let spent = lamports_before - w.dev.chain.lamports_of(&w.dev.treasury);
    let rent = w
        .dev
        .chain
        .minimum_balance_for_rent_exemption(settle_solana::pack::TOKEN_ACCOUNT_LEN)
        .await
        .unwrap();
    assert_eq!(
        spent,
        fees + 125 * rent + table_fees + table_rent,
        "fees plus the rent of 125 new accounts, plus the lookup tables' fees and rent"
    );
    println!(
        "250 payouts in {} transactions (payouts per transaction {:?}); fees {} lamports = {:.0} per payout; rent of 125 new token accounts {} lamports; {} lookup tables: {} transactions, {} lamports of fees, {} of rent",
        signatures.len(),
        per_tx,
        fees,
        fees as f64 / 250.0,
        125 * rent,
        tables.len(),
        report.lookup_table_transactions_landed,
        table_fees,
        table_rent,
    );

    // A second pass finds nothing to do and sends nothing.
    let sends = w.dev.chain.stats().send_calls;
    let again = rail.pay_pending(&w.ledger).await.expect("second pass");
    assert_eq!((again.outbox, again.settled), (0, 0));
    assert_eq!(w.dev.chain.stats().send_calls, sends);

    let rec = w.assert_clean(&rail).await;
    assert_eq!((rec.checked, rec.matched), (250, 250));
    let seen = common::assert_events_match_schemas(&w.ledger.store).await;
    for t in [
        "payout.created",
        "payout.submitted",
        "payout.settled",
        "solana_tx.signed",
        "solana_tx.resolved",
    ] {
        assert!(seen.contains(t), "{t} missing from {seen:?}");
    }
    assert_eq!(w.count_events("payout.settled").await, 250);
    assert_eq!(
        w.count_events("solana_tx.signed").await,
        (signatures.len() + report.lookup_table_transactions_landed) as i64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_recipient_fails_only_its_transaction_and_is_paid_in_the_next_run() {
    let w = World::new(TREASURY_USDC, 10 * SOL).await;
    let providers = w.providers("fz", 7).await;
    for p in &providers {
        w.dev.chain.create_token_account(&w.dev.mint, &p.wallet);
    }
    w.weekly(MONDAY, RUN_AT).await;
    let by_provider: BTreeMap<String, Provider> = providers
        .iter()
        .map(|p| (p.id.clone(), p.clone()))
        .collect();
    let payouts = w.run_payouts(MONDAY).await; // in payout id order = outbox order
    let wallet_of = |provider: &str| by_provider[provider].wallet;
    // Frozen before the run: simulation proves the transfer impossible; it is never signed.
    let rejected = payouts[6].clone();
    w.dev
        .chain
        .freeze_token_account(&w.dev.mint, &wallet_of(&rejected.provider_id));
    // Frozen after simulation, just before the first transaction lands: it fails on chain.
    let on_chain = payouts[0].clone();
    w.dev
        .chain
        .freeze_before_next_landing(&w.dev.mint, &wallet_of(&on_chain.provider_id));

    let rail = w.rail_with(|c| c.transfers_per_tx_max = 3).await;
    w.at("2026-11-23T07:00:00Z");
    let report = rail.pay_pending(&w.ledger).await.expect("pay");
    assert_eq!(report.outbox, 7);

    let journal = LedgerJournal::new(w.ledger.clone());
    let attempts = journal.attempts().await.unwrap();
    assert!(
        attempts
            .iter()
            .all(|a| !a.payout_ids.contains(&rejected.payout_id.to_string())),
        "a rejected transfer is never signed"
    );
    let failed_attempt = attempts
        .iter()
        .find(|a| a.payout_ids.contains(&on_chain.payout_id.to_string()))
        .expect("the frozen recipient's attempt");
    assert_eq!(failed_attempt.outcome.map(|o| o.as_str()), Some("failed"));
    assert_eq!(failed_attempt.payout_ids.len(), 3);
    let failed_ids: BTreeSet<String> = failed_attempt.payout_ids.iter().cloned().collect();
    assert_eq!((report.failed, report.settled), (4, 3), "{report:?}");
    for p in &payouts {
        let now = w.payouts_of(&p.provider_id).await.remove(0);
        let wallet = wallet_of(&p.provider_id);
        if p.payout_id == rejected.payout_id {
            assert_eq!(now.status.as_str(), "failed");
            let reason = now.failure_reason.unwrap();
            assert!(reason.contains("rejected by simulation"), "{reason}");
            assert_eq!(w.usdc_of(&wallet), 0);
        } else if failed_ids.contains(p.payout_id.as_str()) {
            assert_eq!(now.status.as_str(), "failed", "{}", p.payout_id);
            let reason = now.failure_reason.unwrap();
            assert!(reason.contains("failed on chain"), "{reason}");
            assert_eq!(
                w.usdc_of(&wallet),
                0,
                "the failed transaction moved nothing"
            );
        } else {
            assert_eq!(now.status.as_str(), "settled", "{}", p.payout_id);
            assert_eq!(w.usdc_of(&wallet), now.amount_micro_usdc as u64);
        }
    }
    w.assert_clean(&rail).await;

    // The two frozen providers give new wallets (cooling-off runs out before the next
    // run); the others of the failed transaction keep theirs. The next run pays all four.
    let mut new_wallets = BTreeMap::new();
    for p in [&rejected, &on_chain] {
        let wallet = Keypair::new().pubkey();
        w.import(&[format!(
            r#"{{"type":"provider.update","provider_id":"{}","payout_method":{{"kind":"solana","wallet":"{wallet}"}}}}"#,
            p.provider_id
        )])
        .await;
        new_wallets.insert(p.provider_id.clone(), wallet);
    }
    let next = w.weekly(NEXT_MONDAY, NEXT_RUN_AT).await;
    assert_eq!(next.payouts, 4, "{next:?}");
    w.at("2026-11-30T07:00:00Z");
    let report = rail.pay_pending(&w.ledger).await.expect("pay next");
    assert_eq!((report.settled, report.failed), (4, 0), "{report:?}");
    for p in &providers {
        let settled: Vec<_> = w
            .payouts_of(&p.id)
            .await
            .into_iter()
            .filter(|x| x.status.as_str() == "settled")
            .collect();
        assert_eq!(settled.len(), 1, "{} paid exactly once", p.id);
        assert_eq!(settled[0].amount_micro_usdc, p.net_micro_usdc);
        let paid_to = new_wallets.get(p.id.as_str()).copied().unwrap_or(p.wallet);
        assert_eq!(w.usdc_of(&paid_to), p.net_micro_usdc as u64, "{}", p.id);
    }
    w.assert_clean(&rail).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_refuses_what_the_treasury_cannot_cover_and_sends_nothing() {
    // Four payouts of about 32 USDC each; the treasury holds 50 USDC.
    let w = World::new(50 * USDC, 10 * SOL).await;
    let providers = w.providers("pf", 4).await;
    w.weekly(MONDAY, RUN_AT).await;
    let rail = w.rail().await;
    let sends = w.dev.chain.stats().send_calls;
    let err = rail.pay_pending(&w.ledger).await.unwrap_err();
    let SolanaRailError::Preflight(message) = &err else {
        panic!("{err}");
    };
    assert!(message.contains("µUSDC missing"), "{message}");
    assert_eq!(w.dev.chain.stats().send_calls, sends, "nothing sent");
    assert_eq!(w.count_events("solana_tx.signed").await, 0);
    for p in &providers {
        assert_eq!(w.payouts_of(&p.id).await[0].status.as_str(), "created");
        assert_eq!(w.usdc_of(&p.wallet), 0);
    }

    // Funded, the same outbox is paid.
    w.dev
        .chain
        .mint_to(&w.dev.mint, &w.dev.treasury, 1_000 * USDC);
    let report = rail.pay_pending(&w.ledger).await.expect("pay");
    assert_eq!(report.settled, 4);
    w.assert_clean(&rail).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_refuses_when_sol_for_fees_and_new_accounts_is_missing() {
    // Enough USDC, but 0.001 SOL cannot pay the rent of four new token accounts.
    let w = World::new(TREASURY_USDC, 1_000_000).await;
    let providers = w.providers("ps", 4).await;
    w.weekly(MONDAY, RUN_AT).await;
    let rail = w.rail().await;
    let sends = w.dev.chain.stats().send_calls;
    let err = rail.pay_pending(&w.ledger).await.unwrap_err();
    assert!(
        matches!(&err, SolanaRailError::Preflight(m) if m.contains("lamports") && m.contains("missing")),
        "{err}"
    );
    assert_eq!(w.dev.chain.stats().send_calls, sends, "nothing sent");
    w.dev.chain.airdrop_sol(&w.dev.treasury, SOL);
    let report = rail.pay_pending(&w.ledger).await.expect("pay");
    assert_eq!(report.settled, 4);
    for p in &providers {
        assert_eq!(w.usdc_of(&p.wallet), p.net_micro_usdc as u64);
    }
    w.assert_clean(&rail).await;
}

/// The stable code of the ledger's refusal: [`LedgerJournal`] reports a refused command as
/// `JournalError("{code}: {message}")`.
fn journal_code(result: Result<(), JournalError>) -> String {
    let err = result.expect_err("the journal accepted it");
    match err.0.split_once(": ") {
        Some((code, _)) => code.to_owned(),
        None => panic!("a refusal without a code: {}", err.0),
    }
}

fn attempt(id: &str, signature: &str, transfers: Vec<Transfer>) -> SignedAttempt {
    SignedAttempt {
        attempt_id: id.to_owned(),
        payout_ids: transfers.iter().map(|t| t.payout_id.clone()).collect(),
        transfers,
        tx_bytes: vec![1, 2, 3, 4],
        signature: signature.to_owned(),
        blockhash: "11111111111111111111111111111111".to_owned(),
        last_valid_block_height: 1_000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_allows_one_live_attempt_per_payout_and_applies_outcomes_once() {
    let w = World::new(TREASURY_USDC, 10 * SOL).await;
    let providers = w.providers("jn", 3).await;
    w.weekly(MONDAY, RUN_AT).await;
    let by_provider: BTreeMap<String, Provider> = providers
        .iter()
        .map(|p| (p.id.clone(), p.clone()))
        .collect();
    let payouts = w.run_payouts(MONDAY).await;
    let transfer = |i: usize| Transfer {
        payout_id: payouts[i].payout_id.to_string(),
        wallet: by_provider[payouts[i].provider_id.as_str()].wallet,
        amount_micro_usdc: payouts[i].amount_micro_usdc as u64,
        statement: None,
    };
    let journal = LedgerJournal::new(w.ledger.clone());
    let ids = |n: usize| -> Vec<String> {
        payouts[..n]
            .iter()
            .map(|p| p.payout_id.to_string())
            .collect()
    };

    let a1 = attempt("att-1", "sig-one", vec![transfer(0), transfer(1)]);
    journal.record_signed(&a1).await.unwrap();
    assert_eq!(journal.open_attempts().await.unwrap(), vec![a1.clone()]);
    for payout in &payouts[..2] {
        let p = w.payouts_of(&payout.provider_id).await.remove(0);
        assert_eq!(
            (p.status.as_str(), p.reference.as_deref()),
            ("submitted", Some("sig-one"))
        );
    }
    // Recording the same attempt again is a duplicate; a second live attempt is refused.
    journal.record_signed(&a1).await.unwrap();
    let err = journal
        .record_signed(&attempt("att-2", "sig-two", vec![transfer(1)]))
        .await
        .unwrap_err();
    assert!(
        err.0.contains("payout_in_flight") || err.0.contains("already belongs"),
        "{}",
        err.0
    );
    // Transfers that do not match the ledger are refused.
    let mut wrong_amount = transfer(2);
    wrong_amount.amount_micro_usdc += 1;
    assert_eq!(
        journal_code(
            journal
                .record_signed(&attempt("att-3", "s3", vec![wrong_amount]))
                .await
        ),
        "amount_mismatch"
    );
    let mut wrong_wallet = transfer(2);
    wrong_wallet.wallet = Keypair::new().pubkey();
    assert_eq!(
        journal_code(
            journal
                .record_signed(&attempt("att-4", "s4", vec![wrong_wallet]))
                .await
        ),
        "wallet_mismatch"
    );
    assert_eq!(journal.open_attempts().await.unwrap().len(), 1);

    // Expired: nothing happens to the payouts; they may be signed again.
    journal
        .record_outcome("att-1", &AttemptOutcome::Expired)
        .await
        .unwrap();
    assert!(journal.open_attempts().await.unwrap().is_empty());
    assert!(journal.resolved_payouts(&ids(3)).await.unwrap().is_empty());
    let a5 = attempt("att-5", "sig-five", vec![transfer(0), transfer(1)]);
    journal.record_signed(&a5).await.unwrap();
    assert_eq!(
        w.payouts_of(&payouts[0].provider_id).await[0]
            .reference
            .as_deref(),
        Some("sig-five")
    );
    // Landed: settled with the signature, once.
    journal
        .record_outcome("att-5", &AttemptOutcome::Landed { slot: 7 })
        .await
        .unwrap();
    journal
        .record_outcome("att-5", &AttemptOutcome::Landed { slot: 7 })
        .await
        .unwrap();
    assert_eq!(
        journal_code(
            journal
                .record_outcome("att-5", &AttemptOutcome::Failed { reason: "x".into() })
                .await
        ),
        "conflict",
        "a second, different outcome is refused"
    );
    for payout in &payouts[..2] {
        let p = w.payouts_of(&payout.provider_id).await.remove(0);
        assert_eq!(
            (p.status.as_str(), p.reference.as_deref()),
            ("settled", Some("sig-five"))
        );
    }
    let mut resolved = journal.resolved_payouts(&ids(3)).await.unwrap();
    resolved.sort();
    let mut expected = ids(2);
    expected.sort();
    assert_eq!(resolved, expected);
    // A settled payout is never signed again.
    assert_eq!(
        journal_code(
            journal
                .record_signed(&attempt("att-6", "s6", vec![transfer(0)]))
                .await
        ),
        "invalid_payout_state"
    );
    assert_eq!(w.count_events("payout.settled").await, 2);

    // A crash between `solana_tx.resolved` and the payout events: repair applies it.
    journal
        .record_signed(&attempt("att-7", "sig-seven", vec![transfer(2)]))
        .await
        .unwrap();
    let body = EventBody::SolanaTxResolved(SolanaTxResolved {
        attempt_id: "att-7".into(),
        outcome: "failed".into(),
        slot: None,
        reason: Some("custom program error: 0x11".into()),
    });
    let key = "solana_tx:att-7:resolved".to_owned();
    let hash = content_hash(&body.to_json());
    let now = w.ledger.now_ms();
    let mut tx = w.ledger.store.begin(PLATFORM_STREAM).await.unwrap();
    assert_eq!(
        find_idem(&mut tx, &key).await.unwrap(),
        None,
        "not yet resolved"
    );
    tx.append(NewEvent {
        body,
        actor: "system:test".into(),
        recorded_at_ms: now,
        idem_key: Some(key),
        content_hash: Some(hash),
    });
    tx.commit().await.unwrap();
    assert_eq!(
        w.payouts_of(&payouts[2].provider_id).await[0]
            .status
            .as_str(),
        "submitted"
    );
    let repaired = journal.repair().await.unwrap();
    assert_eq!((repaired.failed, repaired.settled), (1, 0));
    let p = w.payouts_of(&payouts[2].provider_id).await.remove(0);
    assert_eq!(p.status.as_str(), "failed");
    assert!(p.failure_reason.unwrap().contains("0x11"));
    assert_eq!(
        journal.repair().await.unwrap().failed,
        0,
        "repair is idempotent"
    );

    // An attempt without transfers moves no money: only a lookup table's maintenance
    // transaction may be journaled so, and its table counts once it landed.
    assert_eq!(
        journal_code(
            journal
                .record_signed(&attempt("att-empty", "s-empty", vec![]))
                .await
        ),
        "invalid_attempt"
    );
    let authority = Keypair::new().pubkey();
    let work = TableWork {
        table: lookup::table_address(&authority, 5),
        create_slot: Some(5),
        addresses: vec![authority],
    };
    let tx = settle_solana::pack::unsigned(
        &authority,
        &work.instructions(&authority),
        &LookupTables::none(),
        settle_solana::Hash::default(),
    );
    let mut table_attempt = attempt("att-table", "s-table", vec![]);
    table_attempt.tx_bytes = settle_solana::pack::wire_bytes(&tx);
    journal.record_signed(&table_attempt).await.unwrap();
    assert!(
        journal.lookup_tables().await.unwrap().is_empty(),
        "not landed yet"
    );
    // No second live table transaction with the same addresses (another table, same
    // account); one with other addresses is fine.
    let other_table = TableWork {
        table: lookup::table_address(&authority, 6),
        create_slot: Some(6),
        addresses: vec![authority],
    };
    let mut second = attempt("att-table-2", "s-table-2", vec![]);
    second.tx_bytes = settle_solana::pack::wire_bytes(&settle_solana::pack::unsigned(
        &authority,
        &other_table.instructions(&authority),
        &LookupTables::none(),
        settle_solana::Hash::default(),
    ));
    assert_eq!(
        journal_code(journal.record_signed(&second).await),
        "maintenance_conflict"
    );
    journal
        .record_outcome("att-table", &AttemptOutcome::Landed { slot: 9 })
        .await
        .unwrap();
    assert_eq!(journal.lookup_tables().await.unwrap(), vec![work.table]);

    let report = settle::verify::verify(&w.ledger.store, &|_| {})
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    common::assert_events_match_schemas(&w.ledger.store).await;
}

/// A ledger signed attempts before the per-payout index of attempts existed (migration
/// 0007): the migration fills it from the attempts, so `verify` is clean after the upgrade
/// and a payout an open attempt holds is still refused to another.
#[tokio::test]
async fn attempts_signed_before_0007_are_indexed_by_the_migration() {
    let w = World::new(TREASURY_USDC, 10 * SOL).await;
    let providers = w.providers("mg", 2).await;
    w.weekly(MONDAY, RUN_AT).await;
    let payouts = w.run_payouts(MONDAY).await;
    let wallet = |provider_id: &str| {
        providers
            .iter()
            .find(|p| p.id == provider_id)
            .unwrap()
            .wallet
    };
    let transfer = |i: usize| Transfer {
        payout_id: payouts[i].payout_id.to_string(),
        wallet: wallet(&payouts[i].provider_id),
        amount_micro_usdc: payouts[i].amount_micro_usdc as u64,
        statement: None,
    };
    let journal = LedgerJournal::new(w.ledger.clone());
    journal
        .record_signed(&attempt(
            "att-old",
            "sig-old",
            vec![transfer(0), transfer(1)],
        ))
        .await
        .unwrap();
    // The schema before 0007: no index, and the migration not yet applied.
    common::upgrade_through(&w.db, 7, &["DROP TABLE solana_attempt_payouts"]).await;
    let report = settle::verify::verify(&w.ledger.store, &|_| {})
        .await
        .unwrap();
    assert!(
        report.ok(),
        "verify after the upgrade: {:?}",
        report.problems
    );
    let err = journal
        .record_signed(&attempt("att-new", "sig-new", vec![transfer(1)]))
        .await
        .unwrap_err();
    assert!(err.0.contains("payout_in_flight"), "{}", err.0);
}
