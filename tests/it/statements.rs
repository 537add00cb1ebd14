//! Provider statements (SPEC §13) through the real binary: a weekly run paid on the local
//! chain, anchored and published there by `settle anchor publish`; a provider's statement
//! written by `settle statement show` and checked by `settle statement verify` with nothing
//! but the file and the chain (or a root given by hand). A statement whose event, total or
//! root was altered fails; the untouched one passes. Runs on SQLite, and on PostgreSQL when
//! `SETTLE_TEST_PG_URL` is set.

use crate::common;
use crate::solana_support::*;

use serde_json::Value;
use settle_solana::Pubkey;

/// `settle` against the world's database; (exit code, stdout, stderr).
fn cli(w: &World, args: &[&str]) -> (i32, String, String) {
    common::run_cli(&w.db.url, args)
}

/// `settle statement verify` (no database); (exit code, stdout, stderr).
fn verify(args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["statement", "verify"];
    all.extend_from_slice(args);
    common::run_settle(&all)
}

/// A weekly run of three providers paid on the local chain; the ledger anchored and the
/// anchor published there. Answers the world, the anchor log and the published root.
async fn paid_and_published(dir: &std::path::Path) -> (World, String, String) {
    let w = World::new(1_000 * USDC, 10 * SOL).await;
    w.providers("st", 3).await;
    w.weekly(MONDAY, RUN_AT).await;
    w.at("2026-11-23T07:00:00Z");
    let report = w.rail().await.pay_pending(&w.ledger).await.expect("paid");
    assert_eq!(report.settled, 3, "{report:?}");
    let log = dir.join("anchors.ndjson").display().to_string();
    // The first anchor makes the anchor key; the chain's faucet funds its fees.
    let (code, out, err) = cli(&w, &["--format", "json", "anchor", "--file", &log]);
    assert_eq!(code, 0, "{out}{err}");
    let key_file = format!("{log}.key");
    let bytes: Vec<u8> =
        serde_json::from_str(&std::fs::read_to_string(&key_file).unwrap()).unwrap();
    let key = Pubkey::try_from(&bytes[32..]).unwrap();
    w.dev.chain.airdrop_sol(&key, SOL);
    let (code, out, err) = cli(
        &w,
        &[
            "--format", "json", "anchor", "--file", &log, "publish", "--rpc", &w.dev.url,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let published: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(published["published"]["sent"], true, "{out}");
    assert_eq!(published["published"]["key"], key.to_string(), "{out}");
    let root = published["published"]["root"].as_str().unwrap().to_owned();
    (w, log, root)
}

/// Writes `st0000`'s statement of its payout to `dir/statement.json`.
async fn payout_statement(w: &World, log: &str, dir: &std::path::Path) -> (String, Value) {
    let payout = &w.payouts_of("st0000").await[0];
    let file = dir.join("statement.json").display().to_string();
    let (code, out, err) = cli(
        w,
        &[
            "statement",
            "show",
            "--provider",
            "st0000",
            "--payout",
            &payout.payout_id,
            "--anchors",
            log,
            "--out",
            &file,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("settle statement verify"),
        "the command a provider runs: {out}"
    );
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    (file, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_provider_checks_its_statement_against_the_chain_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (w, log, root) = paid_and_published(dir.path()).await;
    let (file, statement) = payout_statement(&w, &log, dir.path()).await;
    let payout = &w.payouts_of("st0000").await[0];

    // What it says: the provider's events up to its payout, the totals of their lines.
    assert_eq!(statement["kind"], "payout");
    assert_eq!(
        statement["payout"]["amount_micro_usdc"],
        payout.amount_micro_usdc
    );
    assert_eq!(
        statement["totals"]["paid_out_micro_usdc"],
        payout.amount_micro_usdc
    );
    assert_eq!(
        statement["totals"]["earned_micro_usdc"],
        payout.amount_micro_usdc
    );
    assert_eq!(statement["proof"]["final_root"], root.as_str());
    // The payment committed to it: the memo root of the transaction that paid it.
    assert_eq!(statement["payment"]["rail"], "solana");
    assert_eq!(
        statement["payment"]["signature"].as_str(),
        payout.reference.as_deref()
    );

    // Checked against the chain alone: the publication and the payment's memo.
    let (code, out, err) = verify(&[&file, "--rpc", &w.dev.url]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("ok: "), "{out}");
    assert!(out.contains("the payment commits to statement"), "{out}");
    // And against the root by hand.
    let (code, out, err) = verify(&[&file, "--root", &root]);
    assert_eq!(code, 0, "{out}{err}");
    // Another root, or another anchor key, is refused.
    let (code, out, _) = verify(&[&file, "--root", &"0".repeat(64)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("statement_invalid"), "{out}");
    let other_key = settle_solana::Keypair::new();
    let (code, out, _) = verify(&[
        &file,
        "--root",
        &root,
        "--key",
        &settle_solana::Signer::pubkey(&other_key).to_string(),
    ]);
    assert_eq!(code, 1, "{out}");
    // No public root: the check refuses to call it proven.
    let (code, _, err) = verify(&[&file]);
    assert_ne!(code, 0);
    assert!(err.contains("public_root_required"), "{err}");
}

/// Writes `statement` changed by `edit` beside `file` and checks it against `root`.
fn altered(file: &str, statement: &Value, root: &str, edit: impl FnOnce(&mut Value)) -> String {
    let mut changed = statement.clone();
    edit(&mut changed);
    let path = format!("{file}.altered.json");
    std::fs::write(&path, serde_json::to_string(&changed).unwrap()).unwrap();
    let (code, out, err) = verify(&[&path, "--root", root]);
    assert_eq!(code, 1, "an altered statement fails: {out}{err}");
    assert!(out.starts_with("statement_invalid: "), "{out}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_event_total_or_order_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let (w, log, root) = paid_and_published(dir.path()).await;
    let (file, s) = payout_statement(&w, &log, dir.path()).await;
    let (code, out, err) = verify(&[&file, "--root", &root]);
    assert_eq!(code, 0, "untouched, it passes: {out}{err}");

    let usage = s["events"]
        .as_array()
        .unwrap()
        .iter()
        .position(|e| e["event_type"] == "usage.recorded")
        .expect("a usage event");
    // An event's amount raised.
    let out = altered(&file, &s, &root, |s| {
        let lines = s["events"][usage]["lines"].as_str().unwrap().to_owned();
        let mut lines: Vec<Value> = serde_json::from_str(&lines).unwrap();
        let amount = lines[0][1].as_i64().unwrap();
        lines[0][1] = Value::from(amount + 1_000_000);
        s["events"][usage]["lines"] = Value::String(serde_json::to_string(&lines).unwrap());
    });
    assert!(out.contains("chain") || out.contains("totals"), "{out}");
    // A total alone.
    let out = altered(&file, &s, &root, |s| {
        let earned = s["totals"]["earned_micro_usdc"].as_i64().unwrap();
        s["totals"]["earned_micro_usdc"] = Value::from(earned + 1);
    });
    assert!(out.contains("totals"), "{out}");
    // An event removed.
    let out = altered(&file, &s, &root, |s| {
        s["events"].as_array_mut().unwrap().remove(usage);
    });
    assert!(out.contains("removed"), "{out}");
    // Two events swapped (their positions kept in order).
    altered(&file, &s, &root, |s| {
        let events = s["events"].as_array_mut().unwrap();
        let (a, b) = (events[0].clone(), events[1].clone());
        events[0] = Value::Object(
            b.as_object()
                .unwrap()
                .clone()
                .into_iter()
                .map(|(k, v)| {
                    if k == "seq" {
                        (k, a["seq"].clone())
                    } else {
                        (k, v)
                    }
                })
                .collect(),
        );
        events[1] = Value::Object(
            a.as_object()
                .unwrap()
                .clone()
                .into_iter()
                .map(|(k, v)| {
                    if k == "seq" {
                        (k, b["seq"].clone())
                    } else {
                        (k, v)
                    }
                })
                .collect(),
        );
    });
    // The anchor claimed signed by another key.
    let out = altered(&file, &s, &root, |s| {
        let other = settle_solana::Signer::pubkey(&settle_solana::Keypair::new());
        s["proof"]["anchor"]["key"] = Value::from(other.to_string());
    });
    assert!(out.contains("signature"), "{out}");
    // The payment's path to its memo root bent.
    let out = altered(&file, &s, &root, |s| {
        s["payment"]["path"] = Value::from(vec![format!("L:{}", "0".repeat(64))]);
    });
    assert!(out.contains("memo"), "{out}");
    // Another payout amount claimed.
    altered(&file, &s, &root, |s| {
        let amount = s["payout"]["amount_micro_usdc"].as_i64().unwrap();
        s["payout"]["amount_micro_usdc"] = Value::from(amount * 2);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_period_statement_is_proven_against_the_same_root() {
    let dir = tempfile::tempdir().unwrap();
    let (w, log, root) = paid_and_published(dir.path()).await;
    let show = |extra: &[&str]| {
        let mut args = vec![
            "statement",
            "show",
            "--provider",
            "st0001",
            "--from",
            "2026-11-01",
            "--to",
            "2026-12-01",
            "--anchors",
            &log,
        ];
        args.extend_from_slice(extra);
        cli(&w, &args)
    };
    let file = dir.path().join("period.json").display().to_string();
    let (code, out, err) = show(&["--out", &file]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = verify(&[&file, "--root", &root]);
    assert_eq!(code, 0, "{out}{err}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(s["kind"], "period");
    assert_eq!(
        s["totals"]["paid_out_micro_usdc"],
        w.payouts_of("st0001").await[0].amount_micro_usdc
    );
    // The page shows it, escaped, with the check command.
    let html = dir.path().join("period.html").display().to_string();
    let (code, out, err) = show(&["--html", "--out", &html]);
    assert_eq!(code, 0, "{out}{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("settle statement verify statement.json --rpc"),
        "{page}"
    );
    assert!(page.contains("st0001") && page.contains(&root), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_waits_for_the_anchor_that_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let w = World::new(1_000 * USDC, 10 * SOL).await;
    w.providers("st", 1).await;
    let log = dir.path().join("anchors.ndjson").display().to_string();
    let show = |payout: &str| {
        cli(
            &w,
            &[
                "statement",
                "show",
                "--provider",
                "st0000",
                "--payout",
                payout,
                "--anchors",
                &log,
            ],
        )
    };
    let (code, out, err) = cli(&w, &["anchor", "--file", &log]);
    assert_eq!(code, 0, "{out}{err}");
    w.weekly(MONDAY, RUN_AT).await;
    let payout = w.payouts_of("st0000").await[0].payout_id.clone();
    // The payout was booked after the last anchor.
    let (code, _, err) = show(&payout);
    assert_ne!(code, 0);
    assert!(err.contains("statement_not_anchored"), "{err}");
    let (code, out, err) = cli(&w, &["anchor", "--file", &log]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = show(&payout);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = show("po_none");
    assert_ne!(code, 0);
    assert!(err.contains("statement_not_found"), "{err}");
}

/// Polls `done` every 100 ms for at most 30 s.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..300 {
        if done() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_anchors_by_default_and_publishes_on_its_interval() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let w = World::new(1_000 * USDC, 10 * SOL).await;
    w.providers("st", 2).await;
    // On SQLite the default log lies beside the database; on PostgreSQL the test names one.
    let log = if w.db.is_postgres() {
        dir.path().join("anchors").display().to_string()
    } else {
        format!("{}.anchors", w.db.url.trim_start_matches("sqlite://"))
    };
    let mut serve = common::settle_command();
    serve
        .args(["--database", &w.db.url, "serve", "--no-scheduler"])
        .env(
            "SETTLE_HTTP__BIND",
            format!("127.0.0.1:{}", common::free_port()),
        )
        .env("SETTLE_HTTP__METRICS_BIND", "127.0.0.1:0")
        .env("SETTLE_ANCHOR__ENABLED", "true")
        .env("SETTLE_ANCHOR__INTERVAL_S", "1")
        .env("SETTLE_ANCHOR__PUBLISH_INTERVAL_S", "1")
        .env("SETTLE_ANCHOR__RPC_URL", &w.dev.url)
        .env("SETTLE_BANK__ALLOW_EXAMPLE_ORIGINATOR", "true")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if w.db.is_postgres() {
        serve.env("SETTLE_ANCHOR__FILE", &log);
    }
    let mut child = serve.spawn().expect("start settle serve");
    let key_file = format!("{log}.key");
    eventually("the anchor key", || {
        std::path::Path::new(&key_file).exists()
    })
    .await;
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the anchor key is its owner's alone");
    eventually("an anchor", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() >= 1)
    })
    .await;
    // Funded, the key publishes at the next pass.
    let bytes: Vec<u8> =
        serde_json::from_str(&std::fs::read_to_string(&key_file).unwrap()).unwrap();
    w.dev
        .chain
        .airdrop_sol(&Pubkey::try_from(&bytes[32..]).unwrap(), SOL);
    let published = || {
        let (_, out, _) = cli(&w, &["verify", "--anchors", &log, "--format", "json"]);
        serde_json::from_str::<Value>(&out).is_ok_and(|r| r["anchor_log"]["published_n"].is_i64())
    };
    eventually("a publication", published).await;
    let _ = child.kill();
    let _ = child.wait();
    let (code, out, err) = cli(&w, &["verify", "--anchors", &log]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("published"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_reads_its_statement_from_the_api_and_the_dashboard() {
    let dir = tempfile::tempdir().unwrap();
    let (w, log, _) = paid_and_published(dir.path()).await;
    let (_, from_cli) = payout_statement(&w, &log, dir.path()).await;
    let payout = w.payouts_of("st0000").await[0].payout_id.clone();
    let mut config = settle::config::Config::default();
    config.http.bind = "127.0.0.1:0".into();
    config.anchor.file = log.clone();
    let app = settle::http::Application::build_from(&config, w.ledger.clone())
        .await
        .unwrap();
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    let provider = settle::auth::Scope::Provider;
    let own = common::api_token(&w.ledger, provider, Some("st0000")).await;
    let other = common::api_token(&w.ledger, provider, Some("st0001")).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let get = |path: String, token: &str| {
        client
            .get(format!("{base}{path}"))
            .bearer_auth(token)
            .send()
    };

    // The API answers the statement the CLI writes.
    let path = format!("/v1/providers/st0000/statements/{payout}");
    let r = get(path.clone(), &own).await.unwrap();
    assert_eq!(r.status(), 200);
    let from_api: Value = r.json().await.unwrap();
    assert_eq!(from_api, from_cli);
    // Another provider's token reads nothing of it; an unknown payout is named.
    assert_eq!(get(path.clone(), &other).await.unwrap().status(), 404);
    let r = get("/v1/providers/st0000/statements/po_none".into(), &own)
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.json::<Value>().await.unwrap()["code"],
        "statement_not_found"
    );
    let r = get(
        "/v1/providers/st0000/statement?from=2026-11-01&to=2026-12-01".into(),
        &own,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["kind"], "period");

    // The dashboard: signed in with the token, the page and its JSON; signed out, nothing.
    let page = format!("{base}/dashboard/statements/{payout}");
    assert_eq!(client.get(&page).send().await.unwrap().status(), 401);
    let login = client
        .post(format!("{base}/dashboard/login"))
        .form(&[("token", own.as_str()), ("lang", "en")])
        .send()
        .await
        .unwrap();
    let cookie = login
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned())
        .find(|c| c.starts_with("settle_session="))
        .expect("signed in");
    let html = client
        .get(&page)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        html.contains(&format!("Statement of payout {payout}")),
        "{html}"
    );
    assert!(
        html.contains("settle statement verify statement.json --rpc"),
        "{html}"
    );
    assert!(!html.contains(&own), "the token never in a page");
    let json = client
        .get(format!("{page}/statement.json"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(json.status(), 200);
    let downloaded = dir.path().join("downloaded.json");
    std::fs::write(&downloaded, json.bytes().await.unwrap()).unwrap();
    let (code, out, err) = verify(&[downloaded.to_str().unwrap(), "--rpc", &w.dev.url]);
    assert_eq!(code, 0, "{out}{err}");
}
