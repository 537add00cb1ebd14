//! SQLite's WAL is checkpointed beside the writers (`store.sqlite_checkpoint_interval_ms`):
//! what commits reaches the database file without a commit doing the copying. SQLite only
//! (PostgreSQL has no such file).

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TestDb, register_fault_providers};
use settle::config::LedgerConfig;
use settle::domain::time::parse_rfc3339_ms;
use settle::ledger::{Ledger, ManualClock};
use settle::store::{Store, StoreOptions};

/// The providers the database file alone holds: a copy of the main file without its WAL,
/// opened as a database of its own, sees only the pages checkpointed into it.
async fn providers_in_main_file(db_path: &str, copy_dir: &std::path::Path) -> i64 {
    let copy = copy_dir.join("main-only.db");
    std::fs::copy(db_path, &copy).expect("copy the database file");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", copy.display()))
        .await
        .expect("open the copy");
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM providers")
        .fetch_one(&pool)
        .await
        .expect("count providers");
    pool.close().await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", copy.display()));
    }
    n
}

/// Registers three providers on a store whose commits never checkpoint (the WAL page limit
/// out of reach), with background checkpoints every `interval_ms` (0: none), and returns
/// how many of them the database file alone holds after waiting up to `wait`.
async fn providers_checkpointed(interval_ms: u64, wait: Duration) -> Option<i64> {
    let db = TestDb::new().await;
    if db.is_postgres() {
        return None;
    }
    let options = StoreOptions {
        sqlite_wal_autocheckpoint_pages: 1_000_000,
        sqlite_checkpoint_interval_ms: interval_ms,
        ..Default::default()
    };
    let store = Store::open(&db.url, &options).await.unwrap();
    let clock = Arc::new(ManualClock::new(
        parse_rfc3339_ms("2026-11-03T00:00:00Z").unwrap(),
    ));
    let ledger = Ledger::new(store.clone(), clock, LedgerConfig::default());
    register_fault_providers(&ledger, 3).await;
    let path = db.url.trim_start_matches("sqlite://").to_owned();
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    loop {
        let n = providers_in_main_file(&path, dir.path()).await;
        if n == 3 || started.elapsed() >= wait {
            // The store stays open until here: closing it would checkpoint the WAL.
            store.close().await;
            return Some(n);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_pages_reach_the_database_file_only_through_background_checkpoints() {
    // The control first: without background checkpoints the copy of the main file does
    // not see what the WAL holds.
    let Some(without) = providers_checkpointed(0, Duration::from_millis(500)).await else {
        return;
    };
    assert_eq!(
        without, 0,
        "no checkpoint ran, so the database file has no provider"
    );
    let with = providers_checkpointed(20, Duration::from_secs(10)).await;
    assert_eq!(
        with,
        Some(3),
        "the background checkpoint copied every committed page"
    );
}
