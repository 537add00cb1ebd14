//! `settle serve` as operations meets it: SIGTERM in the middle of HTTP ingestion and in the
//! middle of a payout run (the scheduler's catch-up), then a restart. Every acknowledged
//! event is booked once, every candidate decided once, no payout twice, the ledger verifies.

use crate::common;
use crate::common::Tables;

use std::collections::HashSet;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{TestDb, free_port, run_cli};
use serde_json::{Value, json};
use sqlx::Row;

/// The instant every server of these tests runs at (a Monday, 07:00 UTC): no test depends
/// on the wall clock.
const NOW: &str = "2026-11-23T07:00:00Z";

fn start_serve(url: &str, port: u16, scheduler: bool) -> Child {
    let mut args = vec!["--database", url, "--now", NOW, "serve"];
    if !scheduler {
        args.push("--no-scheduler");
    }
    crate::common::settle_command()
        .args(args)
        .env("SETTLE_HTTP__BIND", format!("127.0.0.1:{port}"))
        // Several servers at once: each its own metrics port.
        .env("SETTLE_HTTP__METRICS_BIND", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        // The bank routes write files with the built-in example originator: a test.
        .env("SETTLE_BANK__ALLOW_EXAMPLE_ORIGINATOR", "true")
        // Runs commit in chunks far smaller than a test's 1,000 candidates (on SQLite 4 × 50
        // a transaction), so a SIGTERM lands between two of them.
        .env("SETTLE_RUNS__CANDIDATES_PER_TX", "50")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start settle serve")
}

async fn wait_ready(port: u16) {
    let client = reqwest::Client::new();
    for _ in 0..300 {
        if let Ok(r) = client
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
            && r.status().is_success()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("settle serve did not become ready");
}

fn sigterm(child: &Child) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
}

fn wait_exit(mut child: Child) -> i32 {
    for _ in 0..600 {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("settle serve did not stop after SIGTERM");
}

fn import(url: &str, now: &str, lines: &[String]) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lines.ndjson");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let (code, out, err) = run_cli(url, &["--now", now, "import", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}

fn provider_lines(id: &str) -> Vec<String> {
    vec![
        format!(
            r#"{{"type":"provider.register","provider_id":"{id}","name":"Provider {id}","email":"ops@{id}.test","tier":"community","schedule":"weekly","payout_method":{{"kind":"solana","wallet":"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}}}}"#
        ),
        format!(
            r#"{{"type":"gpu.register","gpu_id":"{id}-g0","provider_id":"{id}","model":"H100-80GB"}}"#
        ),
        format!(
            r#"{{"type":"rate.set","provider_id":"{id}","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2020-01-01T00:00:00Z"}}"#
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_ingestion_loses_no_acknowledged_event() {
    let db = TestDb::new().await;
    import(&db.url, "2026-11-16T00:00:00Z", &provider_lines("srv_a"));
    let (code, out, _) = run_cli(
        &db.url,
        &[
            "--format", "json", "token", "create", "--scope", "metering", "--name", "meter",
        ],
    );
    assert_eq!(code, 0);
    let token = serde_json::from_str::<Value>(&out).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();

    // 40 batches of 100 one-minute slices in the days before NOW.
    let base = settle::domain::time::parse_rfc3339_ms(NOW).unwrap() - 5 * 86_400_000;
    let batches: Vec<Vec<Value>> = (0..40)
        .map(|b| {
            (0..100)
                .map(|i| {
                    let n = b * 100 + i;
                    let start = base + n * 60_000;
                    json!({"event_id": format!("srv-{n}"), "provider_id": "srv_a", "gpu_id": "srv_a-g0",
                           "started_at": settle::domain::time::format_ms(start), "ended_at": settle::domain::time::format_ms(start + 60_000)})
                })
                .collect()
        })
        .collect();

    let port = free_port();
    let child = start_serve(&db.url, port, false);
    wait_ready(port).await;
    let client = reqwest::Client::new();
    // Four agents send their batches at once, so that requests are in flight when the
    // signal arrives; each request notes whether it was sent before the signal and answered
    // after it.
    const SENDERS: usize = 4;
    let signalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let mine: Vec<Vec<Value>> = batches.iter().skip(s).step_by(SENDERS).cloned().collect();
        let (client, token) = (client.clone(), token.clone());
        let (signalled, answered) = (signalled.clone(), answered.clone());
        senders.push(tokio::spawn(async move {
            use std::sync::atomic::Ordering::SeqCst;
            let (mut acknowledged, mut refused, mut drained) = (Vec::new(), 0, 0);
            for batch in mine {
                let sent_before = !signalled.load(SeqCst);
                let response = client
                    .post(format!("http://127.0.0.1:{port}/v1/usage"))
                    .bearer_auth(&token)
                    .json(&json!({"events": batch}))
                    .send()
                    .await;
                match response {
                    Ok(r) if r.status().is_success() => {
                        let body: Value = r.json().await.unwrap();
                        if sent_before && signalled.load(SeqCst) {
                            drained += 1;
                        }
                        for result in body["results"].as_array().unwrap() {
                            assert_ne!(result["status"], "rejected", "{result}");
                            acknowledged.push(result["event_id"].as_str().unwrap().to_owned());
                        }
                        answered.fetch_add(1, SeqCst);
                    }
                    _ => refused += 1,
                }
            }
            (acknowledged, refused, drained)
        }));
    }
    // SIGTERM once a quarter of the batches were answered, with the others in flight.
    while answered.load(std::sync::atomic::Ordering::SeqCst) < 10 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    sigterm(&child);
    signalled.store(true, std::sync::atomic::Ordering::SeqCst);
    let (mut acknowledged, mut refused, mut drained) = (HashSet::new(), 0, 0);
    for s in senders {
        let (a, r, d) = s.await.unwrap();
        acknowledged.extend(a);
        refused += r;
        drained += d;
    }
    assert_eq!(wait_exit(child), 0, "a clean exit after SIGTERM");
    eprintln!(
        "{} events acknowledged, {drained} requests in flight at SIGTERM answered, {refused} refused",
        acknowledged.len()
    );
    assert!(
        acknowledged.len() >= 1000,
        "the batches before SIGTERM were acknowledged"
    );
    assert!(
        drained > 0,
        "a request in flight when SIGTERM arrived was finished and answered"
    );
    assert!(
        refused > 0,
        "the server stopped taking requests after SIGTERM"
    );

    // Acknowledged means booked: each exactly once.
    let store = db.store().await;
    let booked: Vec<String> =
        sqlx::query("SELECT idem_key FROM events WHERE event_type = 'usage.recorded'")
            .fetch_all(store.pool())
            .await
            .unwrap()
            .iter()
            .map(|r| {
                r.get::<String, _>(0)
                    .trim_start_matches("usage:")
                    .to_owned()
            })
            .collect();
    let booked_set: HashSet<String> = booked.iter().cloned().collect();
    assert_eq!(booked.len(), booked_set.len(), "no event booked twice");
    assert!(
        acknowledged.is_subset(&booked_set),
        "every acknowledged event is booked"
    );

    // The agents retry everything after the restart: the rest is booked, nothing twice.
    let port = free_port();
    let child = start_serve(&db.url, port, false);
    wait_ready(port).await;
    for batch in &batches {
        let r = client
            .post(format!("http://127.0.0.1:{port}/v1/usage"))
            .bearer_auth(&token)
            .json(&json!({"events": batch}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }
    sigterm(&child);
    assert_eq!(wait_exit(child), 0);
    let count: i64 = sqlx::query("SELECT COUNT(*) FROM events WHERE event_type = 'usage.recorded'")
        .fetch_one(store.pool())
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 4000);
    let report = settle::verify::verify(&store, &|_| {}).await.unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_payout_run_decides_each_candidate_once() {
    let db = TestDb::new().await;
    // NOW is Monday 2026-11-23 07:00: the weekly run of that day is due (its catch-up, as
    // nothing ran before), over earnings booked on the Saturday before.
    let run_key = "2026-11-23";
    let providers = 1000;
    let mut lines = Vec::new();
    for p in 0..providers {
        let id = format!("run_{p:04}");
        lines.extend(provider_lines(&id));
        lines.push(format!(
            r#"{{"type":"usage","event_id":"{id}-u","provider_id":"{id}","gpu_id":"{id}-g0","started_at":"2026-11-21T00:00:00Z","ended_at":"2026-11-21T16:00:00Z"}}"#
        ));
    }
    import(&db.url, "2026-11-21T18:00:00Z", &lines);
    let store = db.store().await;
    let count = |sql: &'static str| {
        let pool = store.pool().clone();
        async move {
            sqlx::query(sql)
                .bind(run_key)
                .fetch_one(&pool)
                .await
                .unwrap()
                .get::<i64, _>(0)
        }
    };
    const DECIDED: &str =
        "SELECT COUNT(*) FROM run_decisions WHERE run_kind = 'weekly' AND run_key = $1";
    const COMPLETED: &str = "SELECT COUNT(*) FROM payout_runs WHERE run_kind = 'weekly' AND run_key = $1 AND completed_at_ms IS NOT NULL";

    // On start the scheduler catches the run up; SIGTERM once it has decided some
    // candidates, and it stops part-way.
    let port = free_port();
    let child = start_serve(&db.url, port, true);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while count(DECIDED).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the scheduler never started the run"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    sigterm(&child);
    assert_eq!(wait_exit(child), 0);
    let decided = count(DECIDED).await;
    eprintln!("SIGTERM during the run: {decided} of {providers} candidates decided");
    assert!(
        decided > 0 && decided < providers && count(COMPLETED).await == 0,
        "the run was stopped part-way ({decided} of {providers} decided)"
    );

    // Restarted, the scheduler finishes the run.
    let port = free_port();
    let child = start_serve(&db.url, port, true);
    wait_ready(port).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while count(COMPLETED).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the restarted scheduler never finished the run"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sigterm(&child);
    assert_eq!(wait_exit(child), 0);

    let decisions: i64 = sqlx::query(
        "SELECT COUNT(*) FROM events WHERE event_type = 'payout_run.decided' AND payload LIKE $1",
    )
    .bind(format!("%\"run_key\":\"{run_key}\"%"))
    .fetch_one(store.pool())
    .await
    .unwrap()
    .get(0);
    assert_eq!(decisions, providers, "each candidate decided exactly once");
    let payouts: i64 =
        sqlx::query("SELECT COUNT(*) FROM payouts WHERE run_kind = 'weekly' AND run_key = $1")
            .bind(run_key)
            .fetch_one(store.pool())
            .await
            .unwrap()
            .get(0);
    assert_eq!(
        payouts, providers,
        "16 h at 2.49 minus 20% (31.872 USDC) is above the minimum: one payout each"
    );
    let per_provider: i64 = sqlx::query("SELECT COUNT(*) FROM (SELECT provider_id FROM payouts GROUP BY provider_id HAVING COUNT(*) > 1) AS d").fetch_one(store.pool()).await.unwrap().get(0);
    assert_eq!(per_provider, 0, "no provider paid twice");
    let report = settle::verify::verify(&store, &|_| {}).await.unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}
