//! `settle serve` as operations meets it: SIGTERM in the middle of HTTP ingestion and in the
//! middle of a payout run (the scheduler's catch-up), then a restart. Every acknowledged
//! event is booked once, every candidate decided once, no payout twice, the ledger verifies.

mod common;

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{TestDb, run_cli, settle_bin};
use serde_json::{Value, json};
use sqlx::Row;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_serve(url: &str, port: u16) -> Child {
    Command::new(settle_bin())
        .args(["--database", url, "serve"])
        .env("SETTLE_HTTP__BIND", format!("127.0.0.1:{port}"))
        // Several servers at once: each its own metrics port.
        .env("SETTLE_HTTP__METRICS_BIND", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
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
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
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
    let now = chrono::Utc::now();
    import(&db.url, &now.to_rfc3339(), &provider_lines("srv_a"));
    let (code, out, _) = run_cli(
        &db.url,
        &["--format", "json", "token", "create", "--scope", "metering"],
    );
    assert_eq!(code, 0);
    let token = serde_json::from_str::<Value>(&out).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();

    // 40 batches of 100 one-minute slices in the last few days.
    let base = now.timestamp_millis() / 60_000 * 60_000 - 5 * 86_400_000;
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
    let child = start_serve(&db.url, port);
    wait_ready(port).await;
    let client = reqwest::Client::new();
    let mut acknowledged = HashSet::new();
    let mut refused = 0;
    for (b, batch) in batches.iter().enumerate() {
        if b == 10 {
            sigterm(&child); // in the middle of the stream of batches
        }
        let response = client
            .post(format!("http://127.0.0.1:{port}/v1/usage"))
            .bearer_auth(&token)
            .json(&json!({"events": batch}))
            .send()
            .await;
        match response {
            Ok(r) if r.status().is_success() => {
                let body: Value = r.json().await.unwrap();
                for result in body["results"].as_array().unwrap() {
                    assert_ne!(result["status"], "rejected", "{result}");
                    acknowledged.insert(result["event_id"].as_str().unwrap().to_owned());
                }
            }
            _ => refused += 1,
        }
    }
    assert_eq!(wait_exit(child), 0, "a clean exit after SIGTERM");
    assert!(
        acknowledged.len() >= 1000,
        "the batches before SIGTERM were acknowledged"
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
    let child = start_serve(&db.url, port);
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
    let now = chrono::Utc::now().naive_utc().date();
    // The last Monday strictly before today, and earnings booked two days before it.
    let mut monday = now - chrono::Duration::days(1);
    while chrono::Datelike::weekday(&monday) != chrono::Weekday::Mon {
        monday -= chrono::Duration::days(1);
    }
    let booked_at = format!("{}T18:00:00Z", monday - chrono::Duration::days(2));
    let providers = 300;
    let mut lines = Vec::new();
    for p in 0..providers {
        let id = format!("run_{p:03}");
        lines.extend(provider_lines(&id));
        lines.push(format!(
            r#"{{"type":"usage","event_id":"{id}-u","provider_id":"{id}","gpu_id":"{id}-g0","started_at":"{}T00:00:00Z","ended_at":"{}T16:00:00Z"}}"#,
            monday - chrono::Duration::days(2),
            monday - chrono::Duration::days(2)
        ));
    }
    import(&db.url, &booked_at, &lines);

    // On start the scheduler catches up the missed runs; stop it in the middle, restart.
    let port = free_port();
    let child = start_serve(&db.url, port);
    wait_ready(port).await;
    sigterm(&child);
    assert_eq!(wait_exit(child), 0);
    let port = free_port();
    let child = start_serve(&db.url, port);
    wait_ready(port).await;
    let store = db.store().await;
    let run_key = monday.to_string();
    for _ in 0..600 {
        let done: i64 = sqlx::query(
            "SELECT COUNT(*) FROM payout_runs WHERE run_kind = 'weekly' AND run_key = $1",
        )
        .bind(&run_key)
        .fetch_one(store.pool())
        .await
        .unwrap()
        .get(0);
        if done == 1 {
            break;
        }
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
            .bind(&run_key)
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
