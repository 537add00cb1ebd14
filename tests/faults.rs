//! Faults: the disk of the SQLite file fills up, PostgreSQL drops every connection in the
//! middle of ingestion and of a payout run, the process is killed during `rebuild`. The
//! engine reports errors, recovers when the fault ends, books every acknowledged event
//! once and keeps a ledger that verifies.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{TestDb, minute_slices, register_fault_providers, run_cli, settle_bin};
use settle::config::{LedgerConfig, RunConfig};
use settle::domain::time::parse_rfc3339_ms;
use settle::ledger::ingest::{SenderScope, UsageResult};
use settle::ledger::{Actor, Ledger, ManualClock};
use settle::store::{Store, StoreOptions};

use sqlx::Row;

const NOW: &str = "2026-11-30T12:00:00Z";

fn acked(results: &[UsageResult]) -> impl Iterator<Item = String> + '_ {
    results
        .iter()
        .filter(|r| r.status() != "rejected")
        .filter_map(|r| r.event_id().map(str::to_owned))
}

async fn booked_usage(store: &Store) -> Vec<String> {
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
        .collect()
}

async fn assert_exactly_once(store: &Store, acknowledged: &HashSet<String>, expected_total: usize) {
    let booked = booked_usage(store).await;
    let set: HashSet<String> = booked.iter().cloned().collect();
    assert_eq!(booked.len(), set.len(), "no event booked twice");
    let missing: Vec<&String> = acknowledged.difference(&set).collect();
    assert!(
        missing.is_empty(),
        "every acknowledged event is booked; missing {} of {}: {:?}",
        missing.len(),
        acknowledged.len(),
        &missing[..missing.len().min(5)]
    );
    assert_eq!(set.len(), expected_total);
    let report = settle::verify::verify(store, &|_| {}).await.unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

/// The SQLite file on a 32 MiB tmpfs, filled to 400 KiB free: ingestion fails with a storage error when the disk is
/// full, books nothing partially, and carries on once space is freed.
#[tokio::test]
async fn sqlite_disk_full_is_reported_and_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("small");
    std::fs::create_dir_all(&mount).unwrap();
    // Needs root (CI runs as root): skipped elsewhere, with the reason.
    let Some(_tmpfs) = settle_prereq::require(settle_prereq::tmpfs(&mount, "32m")) else {
        return;
    };

    let url = format!("sqlite://{}", mount.join("settle.db").display());
    let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
    store.migrate().await.unwrap();
    let clock = Arc::new(ManualClock::new(parse_rfc3339_ms(NOW).unwrap()));
    let ledger = Ledger::new(store.clone(), clock, LedgerConfig::default());
    register_fault_providers(&ledger, 1).await;
    // Leave about 400 KiB free.
    let free = fs_free_bytes(&mount);
    let filler = mount.join("filler");
    std::fs::write(
        &filler,
        vec![0u8; (free.saturating_sub(400 * 1024)) as usize],
    )
    .unwrap();

    let mut acknowledged = HashSet::new();
    let mut failures = 0;
    let batches = 40;
    for b in 0..batches {
        match ledger
            .ingest_usage(
                &minute_slices(0, b * 100, 100),
                &SenderScope::Metering,
                &Actor::operator("t"),
            )
            .await
        {
            Ok(results) => acknowledged.extend(acked(&results)),
            Err(e) => {
                eprintln!("batch {b}: {e}");
                assert_eq!(e.code(), "storage_unavailable", "{e}");
                failures += 1;
            }
        }
    }
    assert!(failures > 0, "the disk filled up");
    // Space comes back; the senders retry everything.
    std::fs::remove_file(&filler).unwrap();
    for b in 0..batches {
        let results = ledger
            .ingest_usage(
                &minute_slices(0, b * 100, 100),
                &SenderScope::Metering,
                &Actor::operator("t"),
            )
            .await
            .unwrap();
        assert!(results.iter().all(|r| r.status() != "rejected"));
    }
    assert_exactly_once(&store, &acknowledged, batches * 100).await;
    store.close().await;
}

fn fs_free_bytes(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// PostgreSQL drops every connection of the database, again and again, while 4 senders
/// ingest and while a payout run decides: errors surface, the pool reconnects, nothing is
/// lost or doubled. (On SQLite there is no server to drop connections; the test runs the
/// same workload without the fault.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropped_database_connections_lose_nothing() {
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    register_fault_providers(&ledger, 40).await;
    let stop = Arc::new(AtomicBool::new(false));
    let killer = if db.is_postgres() {
        let admin = db.store().await;
        let dbname = db.url.rsplit('/').next().unwrap().to_owned();
        let stop = stop.clone();
        Some(tokio::spawn(async move {
            let mut kills = 0;
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(150)).await;
                let _ = sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()")
                    .bind(&dbname)
                    .execute(admin.pool())
                    .await;
                kills += 1;
            }
            kills
        }))
    } else {
        None
    };
    let mut senders = Vec::new();
    for s in 0..4 {
        let (ledger, _) = db.ledger_at(NOW).await;
        senders.push(tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut errors = 0;
            for b in 0..25 {
                let p = (s * 10) + (b % 10);
                match ledger
                    .ingest_usage(
                        &minute_slices(p, (b / 10) * 50, 50),
                        &SenderScope::Metering,
                        &Actor::operator("t"),
                    )
                    .await
                {
                    Ok(results) => acknowledged.extend(acked(&results)),
                    Err(_) => errors += 1,
                }
            }
            (acknowledged, errors)
        }));
    }
    let mut acknowledged = HashSet::new();
    for s in senders {
        let (a, _errors) = s.await.unwrap();
        acknowledged.extend(a);
    }
    // A payout run under the same fault: retried until it completes.
    let (ledger, clock) = db.ledger_at(NOW).await;
    clock.set(parse_rfc3339_ms("2026-12-07T00:10:00Z").unwrap());
    let calendar = settle_calendar::Calendar::platform_default();
    let run = settle_calendar::RunKey::Weekly {
        monday: chrono::NaiveDate::from_ymd_opt(2026, 12, 7).unwrap(),
    };
    let mut attempts = 0;
    let report = loop {
        attempts += 1;
        match ledger
            .run_payouts(
                run,
                &calendar,
                &RunConfig::default(),
                &Actor::system("test"),
            )
            .await
        {
            Ok(r) if r.completed => break r,
            Ok(_) | Err(_) if attempts < 200 => tokio::time::sleep(Duration::from_millis(20)).await,
            other => panic!("the run never completed: {other:?}"),
        }
    };
    stop.store(true, Ordering::SeqCst);
    if let Some(k) = killer {
        assert!(k.await.unwrap() > 0, "connections were dropped");
    }
    // The fault is over: the senders retry everything they sent.
    let (ledger, _) = db.ledger_at("2026-12-07T00:10:00Z").await;
    for s in 0..4 {
        for b in 0..25 {
            let p = (s * 10) + (b % 10);
            let results = ledger
                .ingest_usage(
                    &minute_slices(p, (b / 10) * 50, 50),
                    &SenderScope::Metering,
                    &Actor::operator("t"),
                )
                .await
                .unwrap();
            assert!(
                results.iter().all(|r| r.status() != "rejected"),
                "{results:?}"
            );
        }
    }
    let store = db.store().await;
    assert_exactly_once(&store, &acknowledged, 4 * 25 * 50).await;
    // The run decided each of the 40 providers once.
    let decided: i64 = sqlx::query(
        "SELECT COUNT(*) FROM run_decisions WHERE run_kind = 'weekly' AND run_key = '2026-12-07'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap()
    .get(0);
    assert_eq!(decided, 40);
    assert_eq!(report.candidates.len(), 40);
    let events: i64 =
        sqlx::query("SELECT COUNT(*) FROM events WHERE event_type = 'payout_run.decided'")
            .fetch_one(store.pool())
            .await
            .unwrap()
            .get(0);
    assert_eq!(events, 40, "no candidate decided twice");
}

/// `settle rebuild` killed (SIGKILL) at random points: the projections are either the old
/// ones or the rebuilt ones, never half; `settle verify` is clean every time.
#[tokio::test]
async fn killed_rebuild_leaves_consistent_projections() {
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    register_fault_providers(&ledger, 4).await;
    for p in 0..4 {
        for b in 0..10 {
            ledger
                .ingest_usage(
                    &minute_slices(p, b * 500, 500),
                    &SenderScope::Metering,
                    &Actor::operator("t"),
                )
                .await
                .unwrap();
        }
    }
    ledger.store.close().await;
    for i in 0..8u64 {
        let mut child = std::process::Command::new(settle_bin())
            .args(["--database", &db.url, "rebuild"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(40 + i * 90));
        let _ = child.kill();
        let _ = child.wait();
        let (code, out, err) = run_cli(&db.url, &["verify"]);
        assert_eq!(code, 0, "verify after a killed rebuild ({i}): {out}{err}");
    }
    let (code, _, _) = run_cli(&db.url, &["rebuild"]);
    assert_eq!(code, 0);
}
