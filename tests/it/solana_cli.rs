//! `settle chain local`, `settle pay solana` and `settle reconcile solana` through the real
//! binary: the development chain prints its endpoint, mint and keypair path, writes the
//! keypair 0600, serves until SIGTERM; the rail pays a weekly run through it; a keypair file
//! readable by others is refused. Runs on SQLite, and on PostgreSQL when
//! `SETTLE_TEST_PG_URL` is set.

use crate::common;
use crate::solana_support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use settle_solana::{Keypair, Signer};
use solana_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_chain_command_serves_a_funded_treasury_until_sigterm() {
    let state = tempfile::tempdir().unwrap();
    let mut chain = common::settle_command()
        .args([
            "chain", "local", "--port", "0", "--usdc", "5000", "--sol", "2",
        ])
        .arg("--state-dir")
        .arg(state.path())
        .args(["--format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn settle chain local");
    let mut line = String::new();
    BufReader::new(chain.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let info: serde_json::Value = serde_json::from_str(&line).expect("one JSON line");
    let url = info["rpc_url"].as_str().unwrap().to_owned();
    let mint = info["mint"].as_str().unwrap().to_owned();
    let keypair = info["treasury_keypair"].as_str().unwrap().to_owned();
    assert_eq!(info["treasury_usdc"], "5000.000000");
    let mode = std::fs::metadata(&keypair).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the treasury keypair is private");
    assert!(state.path().join("chain.json").exists());

    // Pay a weekly run through the served chain with the CLI.
    let db = common::TestDb::new().await;
    let (ledger, clock) = db.ledger_at(SETUP_AT).await;
    let wallet = Keypair::new().pubkey();
    for line in [
        format!(
            r#"{{"type":"provider.register","provider_id":"cli1","name":"Provider cli1","email":"ops@cli1.test","tier":"community","schedule":"weekly","payout_method":{{"kind":"solana","wallet":"{wallet}"}}}}"#
        ),
        r#"{"type":"gpu.register","gpu_id":"cli1-g0","provider_id":"cli1","model":"H100-80GB"}"#
            .to_owned(),
        r#"{"type":"rate.set","provider_id":"cli1","model":"H100-80GB","rate_usdc_per_hour":"3.6","effective_from":"2026-01-01T00:00:00Z"}"#
            .to_owned(),
        r#"{"type":"usage","event_id":"cli1-u0","provider_id":"cli1","gpu_id":"cli1-g0","started_at":"2026-11-18T00:00:00Z","ended_at":"2026-11-18T12:00:00Z","rate_usdc_per_hour":"3.6"}"#
            .to_owned(),
    ] {
        let command = settle::wire::import::parse_line(&line).unwrap();
        match command {
            settle::wire::import::Command::Usage(u) => {
                ledger
                    .ingest_usage(
                        &[u],
                        &settle::ledger::ingest::SenderScope::Admin,
                        &settle::ledger::Actor::operator("test"),
                    )
                    .await
                    .unwrap();
            }
            other => {
                settle::wire::import::apply(
                    &ledger,
                    &other,
                    &settle::ledger::Actor::operator("test"),
                )
                .await
                .unwrap();
            }
        }
    }
    drop(clock);
    let (code, out, err) = common::run_cli(
        &db.url,
        &["--now", RUN_AT, "run", "weekly", "--date", MONDAY],
    );
    assert_eq!(code, 0, "{out}{err}");
    let rail_args = [
        "--cluster",
        "localnet",
        "--rpc-url",
        url.as_str(),
        "--mint",
        mint.as_str(),
        "--treasury-keypair",
        keypair.as_str(),
        "--poll-interval-ms",
        "2",
    ];
    let mut pay = vec!["--now", "2026-11-23T07:00:00Z", "pay", "solana"];
    pay.extend(rail_args);
    let (code, out, err) = common::run_cli(&db.url, &pay);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("settled 1 (34.560000 USDC)"), "{out}");
    let mut reconcile = vec!["reconcile", "solana"];
    reconcile.extend(rail_args);
    let (code, out, err) = common::run_cli(&db.url, &reconcile);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("ok: 1 settled Solana payouts"), "{out}");
    let (code, out, _) = common::run_cli(&db.url, &["verify"]);
    assert_eq!(code, 0, "{out}");

    // A keypair file others may read is refused, and its content never printed.
    std::fs::set_permissions(&keypair, std::fs::Permissions::from_mode(0o644)).unwrap();
    let secret = std::fs::read_to_string(&keypair).unwrap();
    let (code, out, err) = common::run_cli(&db.url, &pay);
    assert_ne!(code, 0);
    assert!(err.contains("chmod 600"), "{err}");
    assert!(!out.contains(&secret[1..20]) && !err.contains(&secret[1..20]));

    // SIGTERM stops the chain cleanly.
    let status = Command::new("kill")
        .args(["-TERM", &chain.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = chain.wait().unwrap();
    assert_eq!(exit.code(), Some(0), "{exit}");
    drop(ledger);
}
