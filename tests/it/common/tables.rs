//! The tables as an outsider sees them: a pool of sqlx's `Any` driver on a store's database,
//! for tests and benchmarks that inspect or tamper with rows directly. The program never
//! has one (`architecture::the_store_runs_on_the_native_drivers`); it lives here, one per
//! database URL, made on first use and kept for the process (a test database is dropped
//! `WITH (FORCE)`, which ends its connections).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use settle::store::Store;
use sqlx::AnyPool;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};

/// Connections an outside pool holds at most: tests read and write a few rows at a time.
const CONNECTIONS_MAX: u32 = 4;

/// A store's tables, seen from outside.
pub trait Tables {
    /// The `Any` pool on this store's database (connected on first use).
    fn pool(&self) -> &'static AnyPool;
}

impl Tables for Store {
    fn pool(&self) -> &'static AnyPool {
        any_pool(self.url())
    }
}

/// The process's `Any` pool on `url`, whose SQLite connections wait for the writer as long
/// as the engine's own do.
pub fn any_pool(url: &str) -> &'static AnyPool {
    any_pool_waiting(
        url,
        settle::config::StoreConfig::default().sqlite_busy_timeout_ms,
    )
}

/// The process's `Any` pool on `url` whose SQLite connections wait `busy_ms` for the writer
/// (0: a write transaction that cannot start fails at once, "database is locked").
pub fn any_pool_waiting(url: &str, busy_ms: u64) -> &'static AnyPool {
    static POOLS: LazyLock<Mutex<HashMap<(String, u64), &'static AnyPool>>> =
        LazyLock::new(Mutex::default);
    let mut pools = POOLS.lock().unwrap();
    if let Some(pool) = pools.get(&(url.to_owned(), busy_ms)) {
        return pool;
    }
    sqlx::any::install_default_drivers();
    let sqlite = url.starts_with("sqlite:");
    let options: AnyConnectOptions = url.parse().expect("a database URL");
    let pool = AnyPoolOptions::new()
        .max_connections(CONNECTIONS_MAX)
        .idle_timeout(Duration::from_secs(1))
        .after_connect(move |conn, _| {
            Box::pin(async move {
                if sqlite {
                    sqlx::query(&format!("PRAGMA busy_timeout = {busy_ms}"))
                        .execute(&mut *conn)
                        .await?;
                }
                Ok(())
            })
        })
        .connect_lazy_with(options);
    let pool: &'static AnyPool = Box::leak(Box::new(pool));
    pools.insert((url.to_owned(), busy_ms), pool);
    pool
}
