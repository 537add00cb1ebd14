//! The native sqlx drivers behind the store: the pool (`Db`), a connection (`Conn`), the
//! `on!` macro that runs one statement on either, connection setup, and the transaction
//! that never returns a connection of unknown state to the pool (`TxConn`).

use super::*;

/// The store's pool: the native sqlx driver of its dialect.
#[derive(Clone, Debug)]
pub(crate) enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// A connection of the store, taken from its pool ([`Store::acquire`]) or held by a write
/// transaction; it goes back to the pool when dropped. The use cases above the store pass it
/// to the store's functions and never run SQL on it themselves
/// (`architecture::only_the_store_names_the_database_driver`).
#[derive(Debug)]
pub enum Conn {
    Sqlite(PoolConnection<Sqlite>),
    Postgres(PoolConnection<Postgres>),
}

impl Db {
    pub(super) fn dialect(&self) -> Dialect {
        match self {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(_) => Dialect::Postgres,
        }
    }

    pub(super) async fn acquire(&self) -> Result<Conn, sqlx::Error> {
        Ok(match self {
            Db::Sqlite(pool) => Conn::Sqlite(pool.acquire().await?),
            Db::Postgres(pool) => Conn::Postgres(pool.acquire().await?),
        })
    }
}

/// Where a statement runs: on a connection of the pool, or on a held one (see [`on!`]).
pub(crate) enum Exec<'a> {
    Db(&'a Db),
    Conn(&'a mut Conn),
}

/// Runs one statement, written once, on the native driver behind an executor (a `&Db` or a
/// `&mut Conn`): `on!(executor, |c| sqlx::query(…).bind(…).fetch_all(c).await)`. The body is
/// compiled once per driver (the statement's types are checked against both) and `c` is
/// that driver's pool or connection. The body's value must not depend on the driver: an
/// `execute` answers its `rows_affected()`.
macro_rules! on {
    ($exec:expr, |$c:ident| $body:expr) => {
        match $crate::store::Exec::from($exec) {
            $crate::store::Exec::Db($crate::store::Db::Sqlite($c)) => {
                $crate::store::sendable(async { $body }).await
            }
            $crate::store::Exec::Db($crate::store::Db::Postgres($c)) => {
                $crate::store::sendable(async { $body }).await
            }
            $crate::store::Exec::Conn($crate::store::Conn::Sqlite($c)) => {
                let $c = &mut **$c;
                $crate::store::sendable(async { $body }).await
            }
            $crate::store::Exec::Conn($crate::store::Conn::Postgres($c)) => {
                let $c = &mut **$c;
                $crate::store::sendable(async { $body }).await
            }
        }
    };
}

pub(crate) use on;

/// A statement's future, boxed as `Send` where it is made ([`on!`]): the native drivers'
/// executors are implemented for every lifetime of a connection borrow, which the compiler
/// cannot prove `Send` for through the callers' async functions (rust-lang/rust#110338); the
/// box states it once, with the lifetimes known.
pub(crate) fn sendable<'a, T>(
    f: impl std::future::Future<Output = T> + Send + 'a,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>> {
    Box::pin(f)
}

/// The store's pool on `url`: the native driver of `dialect`, each connection set up as the
/// ledger needs it.
pub(super) async fn connect(
    url: &str,
    dialect: Dialect,
    options: &StoreOptions,
) -> Result<Db, StoreError> {
    let busy_ms = options.sqlite_busy_timeout_ms;
    let cache_kib = options.sqlite_cache_kib;
    let autocheckpoint = options.sqlite_wal_autocheckpoint_pages;
    let max = options.connections_max;
    let acquire_timeout = Duration::from_millis(options.acquire_timeout_ms);
    Ok(match dialect {
        Dialect::Sqlite => {
            // Durable commits (FULL): an acknowledged event survives power loss.
            let pragmas = [
                "PRAGMA journal_mode = WAL".to_owned(),
                "PRAGMA synchronous = FULL".to_owned(),
                format!("PRAGMA busy_timeout = {busy_ms}"),
                format!("PRAGMA cache_size = -{cache_kib}"),
                format!("PRAGMA wal_autocheckpoint = {autocheckpoint}"),
                "PRAGMA foreign_keys = ON".to_owned(),
            ];
            let connect: SqliteConnectOptions = url.parse()?;
            Db::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(max)
                    .acquire_timeout(acquire_timeout)
                    .after_connect(move |conn, _| {
                        let pragmas = pragmas.clone();
                        Box::pin(async move {
                            for pragma in &pragmas {
                                sqlx::query(pragma).execute(&mut *conn).await?;
                            }
                            Ok(())
                        })
                    })
                    .connect_with(connect)
                    .await?,
            )
        }
        Dialect::Postgres => {
            let connect: PgConnectOptions = url.parse()?;
            Db::Postgres(
                PgPoolOptions::new()
                    .max_connections(max)
                    .acquire_timeout(acquire_timeout)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            // Short OLTP statements: the cost estimate of a multi-row
                            // statement on a large table triggers JIT compilation, which
                            // took ~35 ms for an overlap check that runs in 0.5 ms.
                            sqlx::query("SET jit = off").execute(&mut *conn).await?;
                            // A guard: every statement is prepared once per connection,
                            // and after five executions PostgreSQL may switch to a generic
                            // plan that it keeps until the table's statistics change. On a
                            // ledger that starts empty, or a server with autovacuum off
                            // (this machine's), nothing changes them while the tables grow.
                            // A custom plan is made for each execution from the tables'
                            // current size, which the planner reads from the files even
                            // without statistics. (The 100-row estimate of the JSON rows
                            // is a different fault, mended by `json_rows`.)
                            sqlx::query("SET plan_cache_mode = force_custom_plan")
                                .execute(&mut *conn)
                                .await?;
                            Ok(())
                        })
                    })
                    .connect_with(connect)
                    .await?,
            )
        }
    })
}

/// Whether `sql`, a `SELECT` of one parameter `key`, finds a row.
pub(super) async fn row_exists(db: &Db, sql: &str, key: &str) -> Result<bool, sqlx::Error> {
    on!(db, |c| sqlx::query(sql)
        .bind(key)
        .fetch_optional(c)
        .await
        .map(|row| row.is_some()))
}

/// The process's SQLite writer lock, taken (SQLite has one writer; a writer of this process
/// waits here rather than on the database's busy timeout); nothing on PostgreSQL.
pub(crate) async fn writer_lock(
    lock: &Arc<Mutex<()>>,
    dialect: Dialect,
) -> Option<OwnedMutexGuard<()>> {
    match dialect {
        Dialect::Sqlite => Some(lock.clone().lock_owned().await),
        Dialect::Postgres => None,
    }
}

/// A database transaction on a connection of its own, begun and committed explicitly.
///
/// Unless it committed, its connection is closed (which rolls the transaction back) instead of
/// going back to the pool: after a failed `COMMIT` (disk full, lost connection) the driver's
/// idea of the transaction state cannot be trusted, and a pooled connection left inside a
/// transaction would silently swallow the "commits" of later writers. Found by the disk-full
/// fault test.
pub struct TxConn {
    pub(super) conn: Option<Conn>,
}

impl TxConn {
    /// A write transaction ([`Dialect::begin_write`]).
    pub(crate) async fn begin(db: &Db) -> Result<TxConn, sqlx::Error> {
        TxConn::begin_with(db, db.dialect().begin_write()).await
    }

    /// A transaction begun by the statement `begin` on a connection of `db`.
    pub(crate) async fn begin_with(db: &Db, begin: &str) -> Result<TxConn, sqlx::Error> {
        let mut tx = TxConn {
            conn: Some(db.acquire().await?),
        };
        tx.run(begin).await?;
        Ok(tx)
    }

    /// Runs one statement without parameters (`BEGIN`, `COMMIT`, a lock).
    pub(crate) async fn run(&mut self, statement: &str) -> Result<(), sqlx::Error> {
        on!(&mut **self, |c| sqlx::Executor::execute(c, statement)
            .await
            .map(|_| ()))
    }

    /// Commits; the connection goes back to the pool only when the commit succeeded.
    pub async fn commit(mut self) -> Result<(), sqlx::Error> {
        self.run("COMMIT").await?;
        drop(self.conn.take());
        Ok(())
    }
}

impl std::ops::Deref for TxConn {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("open transaction")
    }
}

impl std::ops::DerefMut for TxConn {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("open transaction")
    }
}

impl Drop for TxConn {
    fn drop(&mut self) {
        match self.conn.take() {
            Some(Conn::Sqlite(conn)) => drop(conn.detach()),
            Some(Conn::Postgres(conn)) => drop(conn.detach()),
            None => {}
        }
    }
}
