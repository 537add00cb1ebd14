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

mod conn;
mod dialect;
mod error;
mod events;
mod tx;

pub use conn::*;
pub use dialect::*;
pub use error::*;
pub use events::*;
pub use tx::*;

pub use chain::{GENESIS_HASH, canonical_bytes, event_hash};
pub use fold::{FOLD_BEFORE_COMMIT, FOLD_EVENTS_MAX, FOLD_STREAMS_MAX};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{Postgres, Sqlite};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::domain::event::{EventBody, lines_to_json};
use crate::domain::projection::{ProjOp, immediate_ops};
use crate::metrics::record_write_step;

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

/// Connection settings with named limits: the `[store]` section of the configuration.
pub use crate::config::StoreConfig as StoreOptions;

/// A handle to the ledger database. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Db,
    /// The URL it was opened with (it may carry a password: never logged or shown).
    url: String,
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
            url: url.clone(),
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

    /// The URL this store was opened with (with `mode=rwc` added on SQLite): what another
    /// process, or a tool looking at the tables from outside, connects to. It may carry a
    /// password: never log or show it.
    pub fn url(&self) -> &str {
        &self.url
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
    }
}
