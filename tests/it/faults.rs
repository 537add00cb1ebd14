//! Faults: the disk of the SQLite file fills up, PostgreSQL drops every connection in the
//! middle of ingestion and of a payout run, the process is killed during `rebuild`. The
//! engine reports errors, recovers when the fault ends, books every acknowledged event
//! once and keeps a ledger that verifies.

use crate::common;
use crate::common::Tables;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{TestDb, minute_slices, register_fault_providers, run_cli};
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
        // One connection of its own, so `pid <> pg_backend_pid()` spares exactly the killer
        // (not the shared outside pool of `common::tables`, whose other connections it would
        // end).
        sqlx::any::install_default_drivers();
        let admin = sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect(&db.url)
            .await
            .unwrap();
        let dbname = db.url.rsplit('/').next().unwrap().to_owned();
        let stop = stop.clone();
        Some(tokio::spawn(async move {
            // Only terminations that hit a backend of this test's database count.
            let mut kills = 0i64;
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(150)).await;
                // pg_terminate_backend in the aggregate's FILTER runs only on the rows the
                // WHERE kept (in the WHERE itself the planner may call it on any backend). The
                // engine's connections are the runtime role's: the owner's, kept open by the
                // tests' outside pool, are not the killer's to end.
                let hit: i64 = sqlx::query("SELECT COUNT(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND usename = current_user AND pid <> pg_backend_pid()")
                    .bind(&dbname)
                    .fetch_one(&admin)
                    .await
                    .expect("the killer's own connection is never dropped")
                    .get(0);
                kills += hit;
            }
            kills
        }))
    } else {
        None
    };
    // Each sender sends its 25 batches, and on PostgreSQL sends them again (re-sends,
    // answered `duplicate`) until a termination has met a sender's batch in flight: how
    // many batches one termination every 150 ms meets depends on how fast they book.
    let reached = Arc::new(AtomicBool::new(false));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut senders = Vec::new();
    for s in 0..4 {
        let (ledger, _) = db.ledger_at(NOW).await;
        let (reached, again) = (reached.clone(), db.is_postgres());
        senders.push(tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut errors = Vec::new();
            loop {
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
                        Err(e) => {
                            reached.store(true, Ordering::SeqCst);
                            errors.push((e.code(), e.to_string()));
                        }
                    }
                }
                if !again || reached.load(Ordering::SeqCst) || std::time::Instant::now() > deadline
                {
                    break;
                }
            }
            (acknowledged, errors)
        }));
    }
    let mut acknowledged = HashSet::new();
    let mut sender_errors = Vec::new();
    for s in senders {
        let (a, errors) = s.await.unwrap();
        acknowledged.extend(a);
        sender_errors.extend(errors);
    }
    eprintln!(
        "senders saw {} errors: {:?}",
        sender_errors.len(),
        &sender_errors[..sender_errors.len().min(3)]
    );
    // A dropped connection reaches the sender as the stable storage error, nothing else.
    for (code, message) in &sender_errors {
        assert_eq!(*code, "storage_unavailable", "{message}");
    }
    if db.is_postgres() {
        assert!(
            !sender_errors.is_empty(),
            "the fault reached the senders: at least one batch failed with storage_unavailable"
        );
    } else {
        assert!(sender_errors.is_empty(), "no fault on SQLite");
    }
    // A payout run under the same fault: retried until it completes.
    let (ledger, clock) = db.ledger_at(NOW).await;
    clock.set(parse_rfc3339_ms("2026-12-07T00:10:00Z").unwrap());
    let calendar = settle_calendar::Calendar::platform_default();
    let run = settle_calendar::RunKey::Weekly {
        monday: chrono::NaiveDate::from_ymd_opt(2026, 12, 7).unwrap(),
    };
    // Bounded by time, not by attempts: on a loaded machine an attempt may not fit between
    // two terminations (every 150 ms), and each one still keeps what it committed.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut attempts = 0;
    let report = loop {
        attempts += 1;
        let retry = std::time::Instant::now() < deadline;
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
            Err(e) if retry => {
                assert_eq!(e.code(), "storage_unavailable", "{e}");
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Ok(_) if retry => tokio::time::sleep(Duration::from_millis(20)).await,
            other => panic!("the run never completed in {attempts} attempts: {other:?}"),
        }
    };
    stop.store(true, Ordering::SeqCst);
    if let Some(k) = killer {
        let kills = k.await.unwrap();
        eprintln!("{kills} backends terminated");
        assert!(kills > 0, "connections were dropped");
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

/// `settle rebuild` killed (SIGKILL) while it runs: six times while it folds the ledger
/// (its progress output shows it part-way, never earlier than the kill before) and twice while it
/// replaces the projections (it holds the write lock: `LOCK TABLE events` on PostgreSQL,
/// the write transaction on SQLite). The projections are either the old ones or the rebuilt
/// ones, never half; `settle verify` is clean every time.
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
    let total = ledger.store.event_count().await.unwrap();
    ledger.store.close().await;
    let probe = Store::open(
        &db.url,
        &StoreOptions {
            connections_max: 1,
            sqlite_busy_timeout_ms: 0,
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    for i in 0..8i64 {
        let (mut child, progress) = spawn_with_progress(&[
            "--database",
            &db.url,
            "--owner-database",
            db.owner_url(),
            "rebuild",
        ]);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let seen = loop {
            assert!(
                std::time::Instant::now() < deadline,
                "rebuild {i}: never reached the point to kill it (progress {:?})",
                progress.lock().unwrap().last()
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "rebuild {i} finished before it was killed (progress {:?})",
                progress.lock().unwrap()
            );
            let folded = progress.lock().unwrap().last().copied();
            if i < 6 {
                // Part-way through the fold, at or past i/8 of the events: the progress
                // moves a page (5,000 events) at a time, and past 5/8 the next page may be
                // the last, done before the test looks again.
                if let Some((done, of)) = folded
                    && of == total
                    && done > 0
                    && done < total
                    && done >= i * total / 8
                {
                    break format!("folding, {done}/{of} events");
                }
            } else if folded.is_some()
                && rebuild_holds_the_write_lock(&probe, db.is_postgres()).await
            {
                break "replacing the projections".to_owned();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        child.kill().unwrap();
        let status = child.wait().unwrap();
        // Killed, not finished: the rebuild was running when the signal arrived.
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "rebuild {i} ({seen}): {status}");
        eprintln!("rebuild {i} killed while {seen}");
        let (code, out, err) = run_cli(&db.url, &["verify"]);
        assert_eq!(
            code, 0,
            "verify after a killed rebuild ({i}, {seen}): {out}{err}"
        );
    }
    probe.close().await;
    let (code, _, _) = run_cli(&db.url, &["--owner-database", db.owner_url(), "rebuild"]);
    assert_eq!(code, 0);
}

/// Whether another process holds the database's write lock for the projections' swap.
async fn rebuild_holds_the_write_lock(probe: &Store, postgres: bool) -> bool {
    if !postgres {
        // A write transaction of our own cannot start (busy timeout 0).
        let pool = crate::common::tables::any_pool_waiting(probe.url(), 0);
        let mut conn = pool.acquire().await.unwrap();
        match sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await {
            Ok(_) => {
                sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
                false
            }
            Err(e) => {
                assert!(e.to_string().contains("database is locked"), "{e}");
                true
            }
        }
    } else {
        let held: i64 = sqlx::query("SELECT COUNT(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'events' AND l.mode = 'ShareLock' AND l.granted AND l.pid <> pg_backend_pid() AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())")
            .fetch_one(probe.pool())
            .await
            .unwrap()
            .get(0);
        held > 0
    }
}

/// Progress so far: `(events folded, events in all)` in the order the bar drew them.
type Progress = Arc<std::sync::Mutex<Vec<(i64, i64)>>>;

/// Runs `settle ARGS` with stderr on a pseudo-terminal, so it draws its progress bar
/// (`… 5000/20044 events …`), which a thread reads back.
fn spawn_with_progress(args: &[&str]) -> (std::process::Child, Progress) {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (0, 0);
    let size = libc::winsize {
        ws_row: 24,
        ws_col: 160,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two new descriptors into `master` and `slave`; nothing else.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned by nobody else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let child = crate::common::settle_command()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(slave))
        .spawn()
        .unwrap();
    let progress: Progress = Arc::default();
    let seen = progress.clone();
    std::thread::spawn(move || {
        let mut master = std::fs::File::from(master);
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        // Ends when the child's side closes (EIO on Linux).
        while let Ok(n @ 1..) = master.read(&mut buf) {
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
            // Parse each complete `N/M events`; keep the unparsed tail.
            while let Some(at) = text.find(" events") {
                let head = &text[..at];
                let start = head
                    .rfind(|c: char| !(c.is_ascii_digit() || c == '/'))
                    .map_or(0, |k| k + 1);
                if let Some((done, of)) = head[start..].split_once('/')
                    && let (Ok(done), Ok(of)) = (done.parse(), of.parse())
                {
                    seen.lock().unwrap().push((done, of));
                }
                text.drain(..at + " events".len());
            }
        }
    });
    (child, progress)
}
