//! The event store on SQLite (embedded default) and PostgreSQL (production).
//!
//! One SQL dialect serves both (`$n` placeholders, `ON CONFLICT`, integer milliseconds and
//! micro-USDC), each through its native sqlx driver ([`Db`], [`Conn`]; a statement is written
//! once and run on either with [`on!`]); [`Dialect`] covers the few differences: migrations,
//! the per-stream write lock and error classification.
//!
//! Invariant: the store knows no use case and no wire format. It appends events with their
//! hash chain and applies projection ops in the same transaction; it never decides anything.

pub mod anchors;
mod append;
pub mod bank_answers;
mod chain;
mod checkpoint;
pub mod citus;
mod fold;
pub mod keys;
pub mod payouts;
pub mod privacy;
mod project;
pub mod providers;
pub mod rails;
pub mod read;
pub mod reliability;
pub mod roles;
pub mod runs;
pub mod snapshot;
pub mod statements;
pub mod tokens;
pub mod usage;
mod values;

pub use chain::{GENESIS_HASH, canonical_bytes, event_hash};
pub use fold::{FOLD_BEFORE_COMMIT, FOLD_EVENTS_MAX, FOLD_STREAMS_MAX};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{AnyPool, Postgres, Sqlite};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::domain::event::{EventBody, lines_to_json};
use crate::domain::projection::{ProjOp, immediate_ops};
use crate::metrics::record_write_step;

/// Which database a store talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The dialect of an open connection.
    pub fn of(conn: &Conn) -> Dialect {
        match conn {
            Conn::Sqlite(_) => Dialect::Sqlite,
            Conn::Postgres(_) => Dialect::Postgres,
        }
    }

    /// `count` comma-separated bind placeholders for parameters `start + 1 ..= start + count`,
    /// bound in that order: `$n` on PostgreSQL, anonymous `?` on SQLite (binding numbered
    /// parameters costs SQLite time quadratic in their number, which dominated multi-row
    /// statements).
    pub fn placeholders(self, start: usize, count: usize) -> String {
        let mut out = String::with_capacity(count * 6);
        for i in 0..count {
            if i > 0 {
                out.push(',');
            }
            match self {
                Dialect::Sqlite => out.push('?'),
                Dialect::Postgres => {
                    use std::fmt::Write;
                    let _ = write!(out, "${}", start + i + 1);
                }
            }
        }
        out
    }

    /// The FROM item that unpacks parameter `$n`, a JSON array of arrays (see
    /// [`json_rows_param`]), into rows `j`; field `i` of a row is `j.value ->> i` (text, or
    /// a number: cast integers with `CAST(… AS BIGINT)`). One parameter carries any number of
    /// rows, so the statement text changes only with the size class of `rows` (below): it is
    /// parsed once per connection and size class, and there is no bind-parameter limit to
    /// chunk around.
    ///
    /// On PostgreSQL the parameter is parsed once into `jsonb`: each `->>` on a `json` value
    /// parses that row's text again, so a 12-column event insert read every row 12 times
    /// (1,000 event rows: 52–65 ms as `json`, 17–21 ms as `jsonb`, the same as `unnest` of
    /// arrays; `ops/bench/ingest.md`). Arrays keep their order either way.
    ///
    /// `rows` is how many rows the parameter holds (at most). PostgreSQL estimates 100 rows
    /// for any `jsonb_array_elements`, and so joined a single row with a table of 27,000
    /// by a hash join over a sequential scan (6–7 ms instead of 0.08 ms); a `LIMIT` of the
    /// next power of two at or above `rows` caps the estimate without cutting a row, and
    /// keeps the number of statement texts (prepared once per connection) small.
    pub fn json_rows(self, n: usize, rows: usize) -> String {
        match self {
            Dialect::Sqlite => format!("json_each(${n}) AS j"),
            Dialect::Postgres => format!(
                "(SELECT value FROM jsonb_array_elements(CAST(${n} AS jsonb)) LIMIT {}) AS j",
                rows.max(1).next_power_of_two()
            ),
        }
    }

    /// The statement that begins a transaction reading one snapshot of the database, taken
    /// at its first read on both (`verify`'s [`Store::snapshot`], a run's read ahead).
    pub fn begin_snapshot(self) -> &'static str {
        match self {
            Dialect::Sqlite => "BEGIN",
            Dialect::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ",
        }
    }

    /// The statement that begins a write transaction: `BEGIN IMMEDIATE` on SQLite (the write
    /// lock up front: a read-then-write transaction never fails to upgrade against a writer
    /// in another process), `BEGIN` on PostgreSQL.
    pub fn begin_write(self) -> &'static str {
        match self {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
        }
    }

    /// SQL turning hex text into bytes.
    pub fn bytes_from_hex(self, expr: &str) -> String {
        match self {
            Dialect::Sqlite => format!("unhex({expr})"),
            Dialect::Postgres => format!("decode({expr}, 'hex')"),
        }
    }
}

/// Rows for a [`Dialect::json_rows`] parameter: a JSON array of arrays (a tuple serialises
/// as an array).
pub fn json_rows_param<T: serde::Serialize>(rows: &[T]) -> String {
    serde_json::to_string(rows).expect("rows serialise to JSON")
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another writer appended to the stream, or a unique key was taken: retry the command.
    #[error("concurrent write conflict: {0}")]
    Conflict(String),
    #[error("database unavailable or failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("unsupported database url {0:?}: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    /// A stored value the code cannot read.
    #[error("corrupt ledger setting: {0}")]
    Corrupt(String),
    /// A projection row the code cannot read (`corrupt_projection`).
    #[error("corrupt projection row: {0}")]
    CorruptRow(String),
    /// A component between the caller and the database stopped (e.g. the usage booker).
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The schema is behind this binary and the connected role may not migrate it (the
    /// runtime role: [`roles`]).
    #[error(
        "schema_outdated: the database schema is at version {at}, this binary needs {needs}: run `settle migrate` as the owner role (--owner-database or SETTLE_DATABASE_OWNER_URL)"
    )]
    SchemaOutdated { at: i64, needs: i64 },
    /// The database records migrations this binary does not have or has otherwise, and the
    /// connected role may not run the migrator that would say which.
    #[error(
        "schema_foreign: the database records migrations this binary does not have or has otherwise (a newer or a changed release): run this release's `settle migrate` as the owner role to see which"
    )]
    SchemaForeign,
    /// `settle migrate --print-grants` on SQLite.
    #[error(
        "grants_need_postgres: the runtime role's grants are PostgreSQL's; a SQLite ledger is guarded by its file's owner and mode"
    )]
    GrantsNeedPostgres,
    /// A role name the grants cannot name.
    #[error(
        "invalid_role: {0:?} is not a plain role name (lower-case letters, digits and _, at most 63, not a reserved word)"
    )]
    InvalidRole(String),
    /// An operation only the owner of the tables may run, attempted as another role.
    #[error(
        "needs_owner: {0} needs the owner role of the tables: run it with --owner-database or SETTLE_DATABASE_OWNER_URL"
    )]
    NeedsOwner(&'static str),
}

/// Where a ledger's booking time comes from, fixed once per ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockMode {
    /// Production: bookings carry the real clock; `--now` off the clock is refused.
    Real,
    /// Replays, demos, tests: any `--now` (never earlier than the latest booking).
    Simulated,
}

/// `$first, $first+1, …`: `count` numbered placeholders (statements that mix them with
/// other numbered parameters: [`Dialect::placeholders`] is anonymous on SQLite).
fn numbered(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The idempotency key of the ledger's `ledger.clock_set` event on the platform stream.
pub const CLOCK_KEY: &str = "ledger:clock";

/// The mode a booked `ledger.clock_set` payload names.
fn clock_of_payload(payload: &str) -> Result<ClockMode, StoreError> {
    match EventBody::from_json("ledger.clock_set", 1, payload) {
        Ok(EventBody::ClockSet(c)) => ClockMode::parse(&c.mode),
        _ => None,
    }
    .ok_or_else(|| StoreError::Corrupt("ledger.clock_set names no clock mode".into()))
}

impl ClockMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ClockMode::Real => "real",
            ClockMode::Simulated => "simulated",
        }
    }
    pub fn parse(text: &str) -> Option<ClockMode> {
        match text {
            "real" => Some(ClockMode::Real),
            "simulated" => Some(ClockMode::Simulated),
            _ => None,
        }
    }
}

impl StoreError {
    /// Whether retrying the whole transaction may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Conflict(_) => true,
            StoreError::Database(e) => is_transient(e),
            _ => false,
        }
    }
}

/// Classifies a database error as a conflict the writer should retry.
fn classify(e: sqlx::Error) -> StoreError {
    if let sqlx::Error::Database(db) = &e
        && is_unique_violation(db.as_ref())
    {
        return StoreError::Conflict(db.message().to_owned());
    }
    if is_transient(&e) {
        return StoreError::Conflict(e.to_string());
    }
    StoreError::Database(e)
}

/// Whether `e` is the unique index on `events (idem_key, stream)` refusing a key booked
/// already (PostgreSQL names the index, SQLite the columns).
fn is_key_taken(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db)
        if is_unique_violation(db.as_ref()) && db.message().contains("idem_key"))
}

/// Whether a unique index refused a row. Citus reports a refusal met by a multi-row `COPY`
/// into a shard as an internal error (`XX000`) with PostgreSQL's message.
fn is_unique_violation(db: &dyn sqlx::error::DatabaseError) -> bool {
    db.kind() == sqlx::error::ErrorKind::UniqueViolation
        || (db.code().as_deref() == Some("XX000")
            && db
                .message()
                .starts_with("duplicate key value violates unique constraint"))
}

fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.to_string()).unwrap_or_default();
            // SQLite BUSY (5), BUSY_SNAPSHOT (517), LOCKED (6); PostgreSQL serialization
            // failure, deadlock, and a full lock table (advisory stream locks of concurrent
            // ingest transactions: retrying after they commit succeeds).
            matches!(
                code.as_str(),
                "5" | "517" | "6" | "262" | "40001" | "40P01" | "53200"
            )
        }
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) => true,
        _ => false,
    }
}

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
    fn dialect(&self) -> Dialect {
        match self {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(_) => Dialect::Postgres,
        }
    }

    async fn acquire(&self) -> Result<Conn, sqlx::Error> {
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

impl<'a> From<&'a Db> for Exec<'a> {
    fn from(db: &'a Db) -> Exec<'a> {
        Exec::Db(db)
    }
}

impl<'a> From<&'a mut Conn> for Exec<'a> {
    fn from(conn: &'a mut Conn) -> Exec<'a> {
        Exec::Conn(conn)
    }
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

/// Connection settings with named limits: the `[store]` section of the configuration.
pub use crate::config::StoreConfig as StoreOptions;

/// A handle to the ledger database. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Db,
    /// A pool of sqlx's `Any` driver on the same database, connected on first use, for tests
    /// and benchmarks that inspect or tamper with the tables ([`Store::pool`]); the program
    /// never uses it.
    any: AnyPool,
    /// SQLite has one writer: writers of this process queue here instead of spinning on BUSY.
    sqlite_writer: Arc<Mutex<()>>,
    /// Streams booked on by this process whose aggregates wait for the projector.
    dirty: Arc<std::sync::Mutex<fold::Dirty>>,
    /// The projector of this process, as booking's backpressure sees it.
    follower: Arc<fold::Follower>,
    /// SQLite's background WAL checkpoints, stopped with the last handle.
    checkpointer: Option<Arc<checkpoint::Checkpointer>>,
    /// What usage booking read of each provider's stream, kept for the next batch at the
    /// same head (`usage::StreamViews`).
    usage_views: Arc<std::sync::Mutex<usage::StreamViews>>,
    /// The usage keys this process booked or found booked lately (`usage::RecentKeys`).
    pub(crate) recent_keys: Arc<usage::RecentKeys>,
    /// Whether the database is a Citus coordinator (`citus`): the few statements Citus
    /// cannot distribute take another form.
    citus: bool,
}

/// An event to append: its body, who caused it, when it was booked, and its idempotency key
/// with the hash of the normalised command (to tell a duplicate from a conflict).
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub body: EventBody,
    pub actor: String,
    pub recorded_at_ms: i64,
    pub idem_key: Option<String>,
    pub content_hash: Option<Vec<u8>>,
}

impl NewEvent {
    /// An event booked at `recorded_at_ms` by `actor` under idempotency key `key`, whose
    /// command normalises to content hash `hash`.
    pub fn keyed(
        body: EventBody,
        actor: &str,
        recorded_at_ms: i64,
        key: &str,
        hash: &[u8],
    ) -> NewEvent {
        NewEvent {
            body,
            actor: actor.to_owned(),
            recorded_at_ms,
            idem_key: Some(key.to_owned()),
            content_hash: Some(hash.to_vec()),
        }
    }
}

/// An event as stored (the columns of [`EVENT_COLUMNS`], read by name).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct StoredEvent {
    pub stream: String,
    pub seq: i64,
    pub event_type: String,
    pub version: i64,
    pub idem_key: Option<String>,
    pub content_hash: Option<Vec<u8>>,
    pub actor: String,
    pub recorded_at_ms: i64,
    pub payload: String,
    pub lines: String,
    pub prev_hash: Vec<u8>,
    pub hash: Vec<u8>,
}

/// Every stream name, one primary-key probe per stream (a skip scan, no scan of the events):
/// the common table `s(stream)`, ending in one NULL row.
pub(crate) const STREAMS_SKIP_SCAN: &str = "WITH RECURSIVE s(stream) AS ( \
    SELECT MIN(stream) FROM events \
    UNION ALL \
    SELECT (SELECT MIN(e.stream) FROM events AS e WHERE e.stream > s.stream) FROM s WHERE s.stream IS NOT NULL)";

pub(crate) const EVENT_COLUMNS: &str = "stream, seq, event_type, version, idem_key, content_hash, actor, recorded_at_ms, payload, lines, prev_hash, hash";

/// A stream's head as a writer reads it: its last event's position, hash and booking time.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct Head {
    pub seq: i64,
    pub hash: Vec<u8>,
    pub recorded_at_ms: i64,
}

impl Head {
    /// The head of a stream with no event: sequence 0, the genesis hash, no booking time.
    fn genesis() -> Head {
        Head {
            seq: 0,
            hash: GENESIS_HASH.to_vec(),
            recorded_at_ms: i64::MIN,
        }
    }
}

/// [`Head`] with its stream's name.
#[derive(sqlx::FromRow)]
pub(super) struct NamedHead {
    pub(super) stream: String,
    #[sqlx(flatten)]
    pub(super) head: Head,
}

/// A stream's head and its hash.
#[derive(sqlx::FromRow)]
struct HashedHead {
    #[sqlx(flatten)]
    at: StreamSeq,
    hash: Vec<u8>,
}

/// An event's place and booking time.
#[derive(sqlx::FromRow)]
struct BookedAt {
    stream: String,
    seq: i64,
    recorded_at_ms: i64,
}

/// A stream and a position in it (a head, a checkpoint).
#[derive(sqlx::FromRow)]
pub(crate) struct StreamSeq {
    pub stream: String,
    pub seq: i64,
}

impl Store {
    /// Opens `sqlite://PATH` (created when missing) or `postgres://…`.
    pub async fn open(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let dialect = if url.starts_with("sqlite:") {
            Dialect::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Dialect::Postgres
        } else {
            return Err(StoreError::UnsupportedUrl(url.to_owned()));
        };
        let url = match dialect {
            Dialect::Sqlite if !url.contains("mode=") => {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}mode=rwc")
            }
            _ => url.to_owned(),
        };
        let db = connect(&url, dialect, options).await?;
        let any = connect_any(&url, dialect, options)?;
        let citus = citus::detect(&db).await?;
        let checkpointer = match &db {
            Db::Sqlite(_) if options.sqlite_checkpoint_interval_ms > 0 => {
                Some(Arc::new(checkpoint::Checkpointer::spawn(
                    url.parse()?,
                    Duration::from_millis(options.sqlite_checkpoint_interval_ms),
                )))
            }
            _ => None,
        };
        Ok(Store {
            checkpointer,
            db,
            any,
            sqlite_writer: Arc::new(Mutex::new(())),
            dirty: Arc::new(std::sync::Mutex::new(fold::Dirty::new(
                options.projector_dirty_streams_max,
            ))),
            follower: Arc::default(),
            usage_views: Arc::new(std::sync::Mutex::new(usage::StreamViews::new(
                options.usage_views_streams_max,
                options.usage_views_segments_max,
            ))),
            recent_keys: Arc::new(usage::RecentKeys::new(options.usage_recent_keys_max)),
            citus,
        })
    }

    /// A pool of sqlx's `Any` driver on the same database (connected on first use), for tests
    /// and benchmarks that inspect or tamper with the tables directly, as an outsider would.
    /// The program never calls it: it uses the store's functions, with [`Store::acquire`] when
    /// several reads share a connection.
    #[doc(hidden)]
    pub fn pool(&self) -> &AnyPool {
        &self.any
    }

    /// The store's own pool.
    pub(crate) fn db(&self) -> &Db {
        &self.db
    }

    /// A connection of the pool, for several of the store's reads on one connection.
    pub async fn acquire(&self) -> Result<Conn, sqlx::Error> {
        self.db.acquire().await
    }

    pub fn dialect(&self) -> Dialect {
        self.db.dialect()
    }

    pub async fn close(&self) {
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.stop();
        }
        match &self.db {
            Db::Sqlite(pool) => pool.close().await,
            Db::Postgres(pool) => pool.close().await,
        }
        self.any.close().await;
    }

    /// A transaction that may write, begun on a connection of its own; on SQLite with this
    /// process's writer held (returned: it is released when dropped, after the
    /// transaction ends).
    async fn write_tx(&self) -> Result<(Option<OwnedMutexGuard<()>>, TxConn), StoreError> {
        let guard = writer_lock(&self.sqlite_writer, self.dialect()).await;
        let tx = TxConn::begin(&self.db).await.map_err(classify)?;
        Ok((guard, tx))
    }

    /// Starts a write transaction on one stream: takes the stream's write lock and reads
    /// its head. Events are appended with [`WriteTx::append`] and land with
    /// [`WriteTx::commit`], together with their projection changes, or not at all.
    ///
    /// The stream's aggregates are brought up to its head first (a usage booking may have
    /// left them to the projector), so a command reads them exactly, and the command's own
    /// events are folded when it commits.
    pub async fn begin(&self, stream: &str) -> Result<WriteTx, StoreError> {
        let mut tx = self.begin_inner(stream, false).await?;
        tx.fold_locked().await?;
        Ok(tx)
    }

    async fn begin_inner(&self, stream: &str, defer: bool) -> Result<WriteTx, StoreError> {
        let (guard, tx) = self.timed_write_tx().await?;
        self.lock_head(guard, tx, stream, defer).await
    }

    /// [`Store::write_tx`], its wait counted as the `begin` step.
    async fn timed_write_tx(&self) -> Result<(Option<OwnedMutexGuard<()>>, TxConn), StoreError> {
        let started = Instant::now();
        let begun = self.write_tx().await?;
        record_write_step("begin", started);
        Ok(begun)
    }

    /// Takes `stream`'s write lock in the transaction `tx` and reads its head.
    async fn lock_head(
        &self,
        guard: Option<OwnedMutexGuard<()>>,
        mut tx: TxConn,
        stream: &str,
        defer: bool,
    ) -> Result<WriteTx, StoreError> {
        let started = Instant::now();
        if self.dialect() == Dialect::Postgres {
            // Serialise writers of one stream without blocking other streams.
            on!(&mut *tx, |c| sqlx::query(
                "SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtextextended($1, 0))) AS l",
            )
            .bind(stream)
            .execute(c)
            .await
            .map(|r| r.rows_affected()))
            .map_err(classify)?;
            if self.citus {
                citus::lock_on_shards(&mut tx, &[stream]).await?;
            }
        }
        let head = read_head(&mut tx, stream).await?;
        record_write_step("heads", started);
        Ok(WriteTx {
            tx,
            _writer: guard,
            dialect: self.dialect(),
            citus: self.citus,
            stream: stream.to_owned(),
            head,
            pending: Vec::new(),
            ops: Vec::new(),
            others: BTreeMap::new(),
            defer_aggregates: defer,
            unverified: None,
            dirty: self.dirty.clone(),
            assumed: None,
        })
    }

    /// Starts one booking transaction over several streams (a usage batch that spans
    /// providers, booked with one commit): takes every stream's write lock, in name order,
    /// and reads their heads, each with one statement whatever the number of streams.
    /// Appends go to the first stream in name order until [`WriteTx::use_stream`] switches.
    /// Each stream keeps its own sequence and hash chain; the caller bounds the number of
    /// streams (on PostgreSQL each is an advisory lock held until commit).
    ///
    /// The log-first write path: the transaction writes the events and the state
    /// tables their decisions read, and leaves the aggregates to the projector
    /// ([`Store::fold_dirty`]); every reader of an aggregate folds first.
    pub async fn begin_streams(&self, streams: &[&str]) -> Result<WriteTx, StoreError> {
        let names = lock_order(streams);
        let (guard, tx) = self.timed_write_tx().await?;
        self.lock_heads(guard, tx, &names).await
    }

    /// Takes the write locks of `names` (sorted, distinct, at least one) in the transaction
    /// `tx` and reads their heads.
    async fn lock_heads(
        &self,
        guard: Option<OwnedMutexGuard<()>>,
        mut tx: TxConn,
        names: &[&str],
    ) -> Result<WriteTx, StoreError> {
        if let [name] = names {
            return self.lock_head(guard, tx, name, true).await;
        }
        let started = Instant::now();
        if self.dialect() == Dialect::Postgres {
            // The array is unpacked in order: every writer locks in name order, so
            // writers of overlapping stream sets cannot deadlock.
            fold::lock_streams(&mut tx, self.dialect(), self.citus, names).await?;
        }
        let mut heads: BTreeMap<String, Head> = names
            .iter()
            .map(|s| (s.to_string(), Head::genesis()))
            .collect();
        let found = if self.citus {
            // A statement per shard, pinned to its streams (a lateral subquery does not
            // distribute; on one shard it runs as on one node).
            let mut found = Vec::new();
            for (group, _) in citus::per_shard(&mut tx, names, |n| *n).await? {
                found.extend(read_heads(&mut tx, self.dialect(), &group, true).await?);
            }
            found
        } else {
            read_heads(&mut tx, self.dialect(), names, false).await?
        };
        for NamedHead { stream, head } in found {
            heads.insert(stream, head);
        }
        record_write_step("heads", started);
        Ok(self.booking_tx(guard, tx, heads, false))
    }

    /// Starts a usage booking over `streams` ([`Store::begin_streams`]), on the heads this
    /// process kept with its views of them after its last batch on them, when it kept all:
    /// then without reading the heads (on PostgreSQL still under their locks, so a writer
    /// that holds one is waited for). Such heads are checked by the
    /// writes: an append claims `(stream, head + 1)`, which the primary key refuses when
    /// another writer moved the stream since, and at commit the streams left without an
    /// append are checked against their stored heads; either way the attempt fails with a
    /// conflict, having taken the kept views out (`usage::take_views`), so its retry reads
    /// the heads. The kept heads are claimed once the transaction has begun (on SQLite, with
    /// the one writer): a concurrent batch on the same streams finds them claimed and locks.
    pub async fn begin_usage(&self, streams: &[&str]) -> Result<WriteTx, StoreError> {
        let names = lock_order(streams);
        let (guard, mut tx) = self.timed_write_tx().await?;
        let Some(heads) = self.claim_kept_heads(&names) else {
            return self.lock_heads(guard, tx, &names).await;
        };
        if self.dialect() == Dialect::Postgres {
            // The streams' locks are still taken: a writer holding one (a payout run's
            // chunk) is waited for, not raced into a conflict at every attempt.
            let started = Instant::now();
            fold::lock_streams(&mut tx, self.dialect(), self.citus, &names).await?;
            record_write_step("heads", started);
        }
        Ok(self.booking_tx(guard, tx, heads, true))
    }

    /// A booking transaction over the streams of `heads` (at least one), appending to the
    /// first in name order; `unverified` when the heads were not read under its locks.
    fn booking_tx(
        &self,
        guard: Option<OwnedMutexGuard<()>>,
        tx: TxConn,
        mut heads: BTreeMap<String, Head>,
        unverified: bool,
    ) -> WriteTx {
        let unverified = unverified.then(|| {
            heads
                .iter()
                .map(|(s, head)| (s.clone(), head.seq))
                .collect()
        });
        let (first, head) = heads.pop_first().expect("a stream");
        WriteTx {
            tx,
            _writer: guard,
            dialect: self.dialect(),
            citus: self.citus,
            stream: first,
            head,
            pending: Vec::new(),
            ops: Vec::new(),
            others: heads,
            defer_aggregates: true,
            unverified,
            dirty: self.dirty.clone(),
            assumed: None,
        }
    }

    /// The latest `recorded_at` on the ledger: booking time never moves backwards past it.
    /// A stream's `recorded_at` never decreases, so this is the maximum over the streams'
    /// last events, found stream by stream through the primary key (a skip scan: one index
    /// probe per stream, no index on `recorded_at`).
    pub async fn max_recorded_at_ms(&self) -> Result<Option<i64>, StoreError> {
        // On Citus each shard reads its own maximum (a recursive scan does not distribute).
        let sql = if self.is_citus() {
            "SELECT MAX(recorded_at_ms) FROM events".to_owned()
        } else {
            format!(
                "{STREAMS_SKIP_SCAN} \
             SELECT MAX((SELECT h.recorded_at_ms FROM events AS h WHERE h.stream = s.stream ORDER BY h.seq DESC LIMIT 1)) \
             FROM s WHERE s.stream IS NOT NULL"
            )
        };
        Ok(on!(&self.db, |c| sqlx::query_scalar(&sql)
            .fetch_one(c)
            .await)?)
    }

    /// All streams, in name order.
    pub async fn streams(&self) -> Result<Vec<String>, StoreError> {
        Ok(on!(&self.db, |c| sqlx::query_scalar(
            "SELECT DISTINCT stream FROM events ORDER BY stream"
        )
        .fetch_all(c)
        .await)?)
    }

    /// The head `(seq, hash)` of every stream, as stored, in one statement (one snapshot).
    pub async fn stream_heads(
        &self,
    ) -> Result<std::collections::BTreeMap<String, (i64, Vec<u8>)>, StoreError> {
        let rows: Vec<HashedHead> = on!(&self.db, |c| sqlx::query_as(
            "SELECT e.stream, e.seq, e.hash FROM events e \
             JOIN (SELECT stream, MAX(seq) AS seq FROM events GROUP BY stream) m \
             ON m.stream = e.stream AND m.seq = e.seq",
        )
        .fetch_all(c)
        .await)?;
        Ok(rows
            .into_iter()
            .map(|h| (h.at.stream, (h.at.seq, h.hash)))
            .collect())
    }

    /// The database answers (readiness).
    pub async fn ping(&self) -> Result<(), StoreError> {
        on!(&self.db, |c| sqlx::query("SELECT 1")
            .execute(c)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// The `seq` of a stream's last event (0 for a stream without events): one probe of the
    /// primary key.
    pub async fn stream_head(&self, stream: &str) -> Result<i64, StoreError> {
        let head: Option<i64> = on!(&self.db, |c| sqlx::query_scalar(
            "SELECT MAX(seq) FROM events WHERE stream = $1"
        )
        .bind(stream)
        .fetch_one(c)
        .await)?;
        Ok(head.unwrap_or(0))
    }

    /// Events of one stream with `seq > after`, in order, at most `limit`.
    pub async fn stream_events(
        &self,
        stream: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        Ok(on!(&self.db, |c| {
            sqlx::query_as(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE stream = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        ))
        .bind(stream)
        .bind(after)
        .bind(limit)
        .fetch_all(c)
        .await
        })?)
    }

    /// Every event of one of `event_types` (never `usage.recorded`), on any stream, by
    /// stream and sequence: the index `events_control_types` leaves usage out, so this
    /// reads the ledger's rare kinds without a scan of its usage.
    pub async fn events_of_types(
        &self,
        event_types: &[&str],
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE event_type <> 'usage.recorded' AND event_type IN ({}) ORDER BY stream, seq",
            numbered(1, event_types.len())
        );
        Ok(on!(&self.db, |c| {
            event_types
                .iter()
                .fold(sqlx::query_as(&sql), |q, t| q.bind(*t))
                .fetch_all(c)
                .await
        })?)
    }

    /// The payloads of `stream`'s events of `event_type` booked after `after_ms` (a
    /// provider's adjustments within the control window).
    pub async fn payloads_since(
        &self,
        stream: &str,
        event_type: &str,
        after_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        Ok(on!(&self.db, |c| {
            sqlx::query_scalar(
            "SELECT payload FROM events WHERE event_type <> 'usage.recorded' AND event_type = $2 AND stream = $1 AND recorded_at_ms > $3 ORDER BY seq"
        )
        .bind(stream)
        .bind(event_type)
        .bind(after_ms)
        .fetch_all(c)
        .await
        })?)
    }

    /// The payload of the latest event of `event_type` on `stream` (the policy in force).
    pub async fn latest_payload_of_type(
        &self,
        stream: &str,
        event_type: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(on!(&self.db, |c| {
            sqlx::query_scalar(
            "SELECT payload FROM events WHERE stream = $1 AND event_type = $2 ORDER BY seq DESC LIMIT 1"
        )
        .bind(stream)
        .bind(event_type)
        .fetch_optional(c)
        .await
        })?)
    }

    /// The events of `stream` whose type is one of `event_types`, in stream order (one scan
    /// of the stream: for the platform stream's rare kinds, such as `operator.added`).
    pub async fn stream_events_of_types(
        &self,
        stream: &str,
        event_types: &[&str],
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE stream = $1 AND event_type IN ({}) ORDER BY seq",
            numbered(2, event_types.len())
        );
        Ok(on!(&self.db, |c| {
            event_types
                .iter()
                .fold(sqlx::query_as(&sql).bind(stream), |q, t| q.bind(*t))
                .fetch_all(c)
                .await
        })?)
    }

    /// The ledger's clock mode, as booked on the chain (`ledger.clock_set`, idempotency key
    /// [`CLOCK_KEY`] on the platform stream); `None` until fixed. A ledger created before
    /// the mode was booked keeps it in `ledger_settings` until `ledger::policy::fix_clock_mode`
    /// books it: a row changed by SQL after that changes nothing.
    ///
    /// The event is read with its neighbour and must hash to its stored hash, and the next
    /// platform event must chain from it: a mode rewritten by SQL (even with its hash
    /// recomputed) fails closed (`Corrupt`) instead of turning a real-clock ledger into a
    /// simulated one.
    pub async fn clock_mode(&self) -> Result<Option<ClockMode>, StoreError> {
        let platform = crate::domain::event::PLATFORM_STREAM;
        let booked: Option<StoredEvent> = on!(&self.db, |c| sqlx::query_as(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE idem_key = $1 AND stream = $2"
        ))
        .bind(CLOCK_KEY)
        .bind(platform)
        .fetch_optional(c)
        .await)?;
        let Some(e) = booked else {
            return self.legacy_clock_mode().await;
        };
        let next: Option<Vec<u8>> = on!(&self.db, |c| sqlx::query_scalar(
            "SELECT prev_hash FROM events WHERE stream = $1 AND seq = $2"
        )
        .bind(platform)
        .bind(e.seq + 1)
        .fetch_optional(c)
        .await)?;
        let hashes = event_hash(&e.prev_hash, &canonical_bytes(&e)).as_slice() == e.hash;
        if !hashes || next.is_some_and(|prev| prev != e.hash) {
            return Err(StoreError::Corrupt(format!(
                "the ledger's clock mode (platform event {}) does not verify against its chain: \
                 it was changed behind the engine",
                e.seq
            )));
        }
        clock_of_payload(&e.payload).map(Some)
    }

    /// The mode a ledger of an earlier release kept in `ledger_settings`.
    async fn legacy_clock_mode(&self) -> Result<Option<ClockMode>, StoreError> {
        let value: Option<String> = on!(&self.db, |c| sqlx::query_scalar(
            "SELECT value FROM ledger_settings WHERE name = 'clock'"
        )
        .fetch_optional(c)
        .await)?;
        Ok(match value {
            Some(value) => Some(ClockMode::parse(&value).ok_or_else(|| {
                StoreError::Corrupt("ledger_settings.clock is neither real nor simulated".into())
            })?),
            None => None,
        })
    }

    /// The mode of the booked `ledger.clock_set` event, read in the transaction `tx`
    /// (which holds the platform stream's lock).
    pub async fn booked_clock_mode_in(tx: &mut WriteTx) -> Result<Option<ClockMode>, StoreError> {
        let booked: Option<String> = on!(tx.conn(), |c| sqlx::query_scalar(
            "SELECT payload FROM events WHERE idem_key = $1 AND stream = $2"
        )
        .bind(CLOCK_KEY)
        .bind(crate::domain::event::PLATFORM_STREAM)
        .fetch_optional(c)
        .await)?;
        booked.as_deref().map(clock_of_payload).transpose()
    }

    /// The mode a ledger of an earlier release kept in `ledger_settings`, if any.
    pub async fn kept_clock_mode(&self) -> Result<Option<ClockMode>, StoreError> {
        self.legacy_clock_mode().await
    }

    /// Whether the clock mode is booked on the chain (a ledger of an earlier release keeps
    /// it in `ledger_settings` until `settle migrate` or its next booking books it).
    pub async fn clock_mode_booked(&self) -> Result<bool, StoreError> {
        row_exists(
            &self.db,
            "SELECT 1 FROM events WHERE idem_key = $1 AND stream = 'platform'",
            CLOCK_KEY,
        )
        .await
        .map_err(StoreError::from)
    }

    /// Events booked after `after_ms` (`recorded_at`): how many, and the first few by
    /// stream and sequence (for `verify` on a real-clock ledger).
    pub async fn booked_after(
        &self,
        after_ms: i64,
        listed_max: i64,
    ) -> Result<(i64, Vec<(String, i64, i64)>), StoreError> {
        let count: i64 = on!(&self.db, |c| sqlx::query_scalar(
            "SELECT COUNT(*) FROM events WHERE recorded_at_ms > $1"
        )
        .bind(after_ms)
        .fetch_one(c)
        .await)?;
        let rows: Vec<BookedAt> = on!(&self.db, |c| {
            sqlx::query_as(
            "SELECT stream, seq, recorded_at_ms FROM events WHERE recorded_at_ms > $1 ORDER BY stream, seq LIMIT $2",
        )
        .bind(after_ms)
        .bind(listed_max)
        .fetch_all(c)
        .await
        })?;
        let listed = rows
            .into_iter()
            .map(|r| (r.stream, r.seq, r.recorded_at_ms))
            .collect();
        Ok((count, listed))
    }

    /// Total number of events.
    pub async fn event_count(&self) -> Result<i64, StoreError> {
        Ok(on!(&self.db, |c| sqlx::query_scalar(
            "SELECT COUNT(*) FROM events"
        )
        .fetch_one(c)
        .await)?)
    }

    /// Reads every row of a projection table into memory (for `verify`).
    pub async fn load_projection(
        &self,
        table: &'static crate::domain::projection::TableSpec,
    ) -> Result<
        std::collections::BTreeMap<
            Vec<crate::domain::projection::Val>,
            Vec<crate::domain::projection::Val>,
        >,
        StoreError,
    > {
        let mut conn = self.db.acquire().await?;
        project::load_table(&mut conn, table).await
    }
}

/// The store's pool on `url`: the native driver of `dialect`, each connection set up as the
/// ledger needs it.
async fn connect(url: &str, dialect: Dialect, options: &StoreOptions) -> Result<Db, StoreError> {
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

/// sqlx's `Any` driver on `url`, connected on first use ([`Store::pool`]).
fn connect_any(url: &str, dialect: Dialect, options: &StoreOptions) -> Result<AnyPool, StoreError> {
    let busy_ms = options.sqlite_busy_timeout_ms;
    let any_connect: AnyConnectOptions = url.parse()?;
    Ok(AnyPoolOptions::new()
        .max_connections(options.connections_max)
        .acquire_timeout(Duration::from_millis(options.acquire_timeout_ms))
        .after_connect(move |conn, _| {
            Box::pin(async move {
                if dialect == Dialect::Sqlite {
                    sqlx::query(&format!("PRAGMA busy_timeout = {busy_ms}"))
                        .execute(&mut *conn)
                        .await?;
                }
                Ok(())
            })
        })
        .connect_lazy_with(any_connect))
}

/// Whether `sql`, a `SELECT` of one parameter `key`, finds a row.
async fn row_exists(db: &Db, sql: &str, key: &str) -> Result<bool, sqlx::Error> {
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
    conn: Option<Conn>,
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

/// `streams` in the order their locks are taken, each once: by name (every writer does
/// the same, so writers of overlapping stream sets cannot deadlock).
fn lock_order<'s>(streams: &[&'s str]) -> Vec<&'s str> {
    let mut names = streams.to_vec();
    names.sort_unstable();
    names.dedup();
    assert!(!names.is_empty(), "a write transaction needs a stream");
    names
}

/// A stream's stored head sequence (`None`: no event).
#[derive(sqlx::FromRow)]
struct StoredHead {
    stream: String,
    seq: Option<i64>,
}

/// The head of `stream` as stored (its genesis when it has no event): one primary-key probe.
async fn read_head(conn: &mut Conn, stream: &str) -> Result<Head, StoreError> {
    let head: Option<Head> = on!(&mut *conn, |c| {
        sqlx::query_as(
        "SELECT seq, hash, recorded_at_ms FROM events WHERE stream = $1 ORDER BY seq DESC LIMIT 1",
    )
    .bind(stream)
    .fetch_optional(c)
    .await
    })
    .map_err(classify)?;
    Ok(head.unwrap_or_else(Head::genesis))
}

/// The stored heads of `names` that have events (one statement); `pinned` (Citus, all of
/// `names` on one shard): filtered by `stream = ANY(…)` as well, so Citus routes it there.
pub(super) async fn read_heads(
    conn: &mut Conn,
    dialect: Dialect,
    names: &[&str],
    pinned: bool,
) -> Result<Vec<NamedHead>, StoreError> {
    let rows: Vec<(&str,)> = names.iter().map(|n| (*n,)).collect();
    let filter = if pinned { " AND stream = ANY($2)" } else { "" };
    let sql = match dialect {
        Dialect::Postgres => format!(
            "SELECT j.value ->> 0 AS stream, h.seq, h.hash, h.recorded_at_ms FROM {} CROSS JOIN LATERAL \
             (SELECT seq, hash, recorded_at_ms FROM events WHERE stream = j.value ->> 0{filter} \
             ORDER BY seq DESC LIMIT 1) AS h",
            dialect.json_rows(1, names.len())
        ),
        Dialect::Sqlite => format!(
            "SELECT e.stream, e.seq, e.hash, e.recorded_at_ms FROM {} JOIN events AS e \
             ON e.stream = j.value ->> 0 AND e.seq = (SELECT MAX(x.seq) FROM events AS x WHERE x.stream = j.value ->> 0)",
            dialect.json_rows(1, names.len())
        ),
    };
    citus::fetch_pinned!(
        &mut *conn,
        &sql,
        json_rows_param(&rows),
        pinned.then_some(names)
    )
    .map_err(classify)
}

/// Fails with [`StoreError::Conflict`] unless each of `heads` (stream, sequence) is still
/// its stream's stored head (0: no event): one statement for all of them (on Citus one per
/// stream, on its shard).
async fn check_heads(
    conn: &mut Conn,
    dialect: Dialect,
    citus: bool,
    heads: &[(&str, i64)],
) -> Result<(), StoreError> {
    if heads.is_empty() {
        return Ok(());
    }
    let groups: Vec<(Vec<&str>, bool)> = if citus {
        // A statement per shard, pinned to its streams.
        citus::per_shard(conn, heads, |(s, _)| *s)
            .await?
            .into_iter()
            .map(|(names, _)| (names, true))
            .collect()
    } else {
        vec![(heads.iter().map(|(s, _)| *s).collect(), false)]
    };
    let mut stored: BTreeMap<String, i64> = BTreeMap::new();
    for (names, pinned) in groups {
        let sql = format!(
            "SELECT j.value ->> 0 AS stream, (SELECT MAX(e.seq) FROM events AS e WHERE e.stream = j.value ->> 0{}) AS seq FROM {}",
            if pinned {
                " AND e.stream = ANY($2)"
            } else {
                ""
            },
            dialect.json_rows(1, names.len())
        );
        let rows: Vec<(&str,)> = names.iter().map(|s| (*s,)).collect();
        let found: Vec<StoredHead> = citus::fetch_pinned!(
            &mut *conn,
            &sql,
            json_rows_param(&rows),
            pinned.then_some(&names)
        )
        .map_err(classify)?;
        stored.extend(found.into_iter().map(|h| (h.stream, h.seq.unwrap_or(0))));
    }
    match heads.iter().find(|(s, seq)| stored.get(*s) != Some(seq)) {
        None => Ok(()),
        Some((stream, seq)) => Err(StoreError::Conflict(format!(
            "stream {stream} moved past the kept head {seq}"
        ))),
    }
}

/// A write transaction on one stream. Dropping it without `commit` rolls everything back.
pub struct WriteTx {
    tx: TxConn,
    _writer: Option<OwnedMutexGuard<()>>,
    dialect: Dialect,
    /// Whether the database is a Citus coordinator ([`Store::is_citus`]).
    citus: bool,
    stream: String,
    /// The head of `stream`, with the events appended to it so far.
    head: Head,
    pending: Vec<StoredEvent>,
    ops: Vec<ProjOp>,
    /// The heads of the other streams locked by [`Store::begin_streams`].
    others: BTreeMap<String, Head>,
    /// Whether the aggregates of the appended events are left to the projector (a usage
    /// booking) instead of folded at commit.
    defer_aggregates: bool,
    /// For a booking begun on kept heads ([`Store::begin_usage`]), not read in it: each
    /// stream's head sequence as begun. The streams that get no append are checked at commit
    /// (an append is checked by the primary key), unless the booking relied on nothing of
    /// their heads ([`WriteTx::head_not_relied_on`]).
    unverified: Option<BTreeMap<String, i64>>,
    dirty: Arc<std::sync::Mutex<fold::Dirty>>,
    /// Set when the booking took idempotency keys it did not read for new
    /// ([`WriteTx::assume_keys_new`]): told whether the assumption held.
    assumed: Option<Arc<usage::RecentKeys>>,
}

impl WriteTx {
    /// Whether this transaction holds the write lock of `stream`.
    pub fn holds_stream(&self, stream: &str) -> bool {
        stream == self.stream || self.others.contains_key(stream)
    }

    /// Makes `stream`, one of the streams this transaction locked, the one appends go to.
    /// Panics for a stream it did not lock: appending to it would race its other writers.
    pub fn use_stream(&mut self, stream: &str) {
        if stream == self.stream {
            return;
        }
        let head = self
            .others
            .remove(stream)
            .unwrap_or_else(|| panic!("stream {stream} is not locked by this transaction"));
        let previous = std::mem::replace(&mut self.head, head);
        let previous_stream = std::mem::replace(&mut self.stream, stream.to_owned());
        self.others.insert(previous_stream, previous);
    }

    /// Takes the write lock of one more stream in this transaction and reads its head (a
    /// no-op for a stream it holds): for an approval's decision, booked on the platform
    /// stream with its command's events on another. Appends still go to the current stream
    /// until [`WriteTx::use_stream`].
    pub async fn lock_stream(&mut self, stream: &str) -> Result<(), StoreError> {
        if self.head_of(stream).is_some() {
            return Ok(());
        }
        if self.dialect == Dialect::Postgres {
            on!(&mut *self.tx, |c| sqlx::query(
                "SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtextextended($1, 0))) AS l",
            )
            .bind(stream)
            .execute(c)
            .await
            .map(|r| r.rows_affected()))
            .map_err(classify)?;
            if self.citus {
                citus::lock_on_shards(&mut self.tx, &[stream]).await?;
            }
        }
        let head: Option<Head> = on!(&mut *self.tx, |c| sqlx::query_as(
            "SELECT seq, hash, recorded_at_ms FROM events WHERE stream = $1 ORDER BY seq DESC LIMIT 1",
        )
        .bind(stream)
        .fetch_optional(c)
        .await)
        .map_err(classify)?;
        self.others
            .insert(stream.to_owned(), head.unwrap_or_else(Head::genesis));
        Ok(())
    }

    /// Folds the aggregates of every stream this transaction locked up to its head, so a
    /// decision reads them exactly (a usage booking may have left them to the projector).
    pub async fn fold_locked(&mut self) -> Result<(), StoreError> {
        let mut heads: Vec<(&str, i64)> = self
            .others
            .iter()
            .map(|(stream, head)| (stream.as_str(), head.seq))
            .collect();
        heads.push((&self.stream, self.head.seq));
        fold::fold_behind(&mut self.tx, self.dialect, self.citus, &heads).await?;
        Ok(())
    }

    /// Folds the aggregates of `streams` (distinct, each locked by this transaction) up to
    /// their heads: for a decision that reads the projections of those streams only (a
    /// usage batch reads the segments of its own providers' GPUs; the streams it locked for
    /// re-sends alone stay with the projector).
    pub async fn fold_locked_streams<'s>(
        &mut self,
        streams: impl IntoIterator<Item = &'s str>,
    ) -> Result<(), StoreError> {
        let heads: Vec<(&str, i64)> = streams
            .into_iter()
            .map(|s| {
                let head = self
                    .head_of(s)
                    .unwrap_or_else(|| panic!("stream {s} is not locked by this transaction"));
                (s, head.seq)
            })
            .collect();
        fold::fold_behind(&mut self.tx, self.dialect, self.citus, &heads).await?;
        Ok(())
    }

    /// The connection, for the reads a command needs inside its transaction.
    /// Whether the database is a Citus coordinator ([`Store::is_citus`]).
    pub fn is_citus(&self) -> bool {
        self.citus
    }

    pub fn conn(&mut self) -> &mut Conn {
        &mut self.tx
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The sequence number of the stream's last event (0 for an empty stream), including
    /// events appended in this transaction.
    pub fn head_seq(&self) -> i64 {
        self.head.seq
    }

    /// Tells the commit that nothing decided on `stream` depended on its head: each of its
    /// answers came from what was read under its lock or from the input alone. A booking
    /// begun on kept heads ([`Store::begin_usage`]) then does not check that head at commit
    /// when it appends nothing to the stream (an append is checked by the primary key).
    pub fn head_not_relied_on(&mut self, stream: &str) {
        if let Some(unverified) = &mut self.unverified {
            unverified.remove(stream);
        }
    }

    /// The head sequence of `stream`, one of the streams this transaction locked, with the
    /// events appended to it so far; `None` for a stream it did not lock.
    pub fn head_seq_of(&self, stream: &str) -> Option<i64> {
        self.head_of(stream).map(|head| head.seq)
    }

    /// The head of `stream`, one of the streams this transaction locked, with the events
    /// appended to it so far; `None` for a stream it did not lock.
    pub fn head_of(&self, stream: &str) -> Option<&Head> {
        if stream == self.stream {
            return Some(&self.head);
        }
        self.others.get(stream)
    }

    /// The latest `recorded_at` in this stream, including pending appends.
    pub fn head_recorded_at_ms(&self) -> i64 {
        self.head.recorded_at_ms
    }

    /// Notes that this booking took the idempotency keys of its appends for new without
    /// reading them (`usage::RecentKeys`): the unique index on `events (idem_key, stream)`
    /// checks it at the append, which fails the attempt as a conflict when a key was
    /// booked, and `recent` is told whether the assumption held.
    pub fn assume_keys_new(&mut self, recent: Arc<usage::RecentKeys>) {
        self.assumed = Some(recent);
    }

    /// The booking found that a key it took for new was booked, and answers it as such
    /// (`usage::RecentKeys::assumption_failed`).
    pub fn assumption_failed(&mut self) {
        if let Some(recent) = self.assumed.take() {
            recent.assumption_failed();
        }
    }

    /// Events appended in this transaction so far.
    pub fn pending(&self) -> &[StoredEvent] {
        &self.pending
    }

    /// Appends an event: assigns the next sequence number, chains its hash and queues its
    /// projection changes. `recorded_at` never goes below the stream's latest.
    pub fn append(&mut self, event: NewEvent) -> &StoredEvent {
        let recorded_at_ms = event.recorded_at_ms.max(self.head.recorded_at_ms);
        let lines = event.body.lines();
        let seq = self.head.seq + 1;
        let mut stored = StoredEvent {
            stream: self.stream.clone(),
            seq,
            event_type: event.body.event_type().to_owned(),
            version: i64::from(event.body.version()),
            idem_key: event.idem_key,
            content_hash: event.content_hash,
            actor: event.actor,
            recorded_at_ms,
            payload: event.body.to_json(),
            lines: lines_to_json(&lines),
            prev_hash: self.head.hash.clone(),
            hash: Vec::new(),
        };
        stored.hash = event_hash(&stored.prev_hash, &canonical_bytes(&stored)).to_vec();
        // The aggregates are folded from the stored events (`fold`), at commit or later.
        self.ops.extend(immediate_ops(
            &self.stream,
            seq,
            recorded_at_ms,
            &event.body,
        ));
        self.head = Head {
            seq,
            hash: stored.hash.clone(),
            recorded_at_ms,
        };
        self.pending.push(stored);
        self.pending.last().expect("just pushed")
    }

    /// Writes the pending events and their projection changes and commits. A unique-key
    /// race (another writer took the sequence number or an idempotency key) surfaces as
    /// [`StoreError::Conflict`]: retry the command from the start.
    pub async fn commit(mut self) -> Result<Vec<StoredEvent>, StoreError> {
        if let Some(begun) = self.unverified.take() {
            let started = Instant::now();
            let unwritten: Vec<(&str, i64)> = begun
                .iter()
                .filter(|(stream, seq)| self.head_seq_of(stream) == Some(**seq))
                .map(|(stream, seq)| (stream.as_str(), *seq))
                .collect();
            check_heads(&mut self.tx, self.dialect, self.citus, &unwritten).await?;
            record_write_step("heads", started);
        }
        let started = Instant::now();
        if !self.pending.is_empty() {
            append::insert_events(&mut self.tx, &self.pending)
                .await
                .map_err(|e| {
                    if let Some(recent) = &self.assumed
                        && is_key_taken(&e)
                    {
                        recent.assumption_failed();
                    }
                    classify(e)
                })?;
        }
        project::apply_ops(&mut self.tx, &self.ops)
            .await
            .map_err(classify)?;
        let mut appended: Vec<&str> = self.pending.iter().map(|e| e.stream.as_str()).collect();
        appended.dedup();
        if !self.defer_aggregates {
            appended.sort_unstable();
            appended.dedup();
            fold::fold_streams(&mut self.tx, self.dialect, self.citus, &appended, i64::MAX).await?;
        }
        let appended: Vec<String> = appended.into_iter().map(str::to_owned).collect();
        record_write_step("write", started);
        let started = Instant::now();
        self.tx.commit().await.map_err(classify)?;
        record_write_step("commit", started);
        if let Some(recent) = self.assumed.take() {
            recent.assumption_held();
        }
        if self.defer_aggregates && !appended.is_empty() {
            self.dirty
                .lock()
                .expect("dirty set lock")
                .mark(appended.iter().map(String::as_str));
        }
        Ok(std::mem::take(&mut self.pending))
    }
}
