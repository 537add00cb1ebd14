//! The application layer and the only writer of the ledger:
//! command → validate → decide → append, in one transaction per stream.
//!
//! A command runs inside `write_stream!`, private to this module tree: it begins the store's
//! write transaction on its stream, reads the state the command decides on under the
//! stream's lock, answers a re-sent idempotency key, books what the pure decision of
//! `domain` returned (`book_decided`) with an approval's decision when one runs it, and
//! commits, retrying the whole body, reads included, when another writer got there first.
//! Usage batches and a payout run's chunks share one transaction over many provider streams
//! (`Store::begin_streams`, `Store::begin_usage`), each stream keeping its own sequence,
//! chain and lock; booking each provider on its own would give the same ledger.
//!
//! Idempotency keys (`usage:{event_id}`, `void:{event_id}`, `adj:{adjustment_id}`,
//! `run:{kind}:{key}:{provider}`, …) are unique per stream in the database. Usage and void
//! keys are scoped to their provider's stream ([`find_idem_in_stream`]), as are a run's;
//! the others are looked up across streams ([`find_idem`]), so an id reused under another
//! provider is still a `conflict`.
//!
//! Invariant: `http`, `jobs`, `rails` and `cli` change the ledger only through here.

pub mod approvals;
pub mod corrections;
pub mod group;
pub mod ingest;
pub mod methods;
pub mod operators;
pub mod payouts;
pub mod personal;
pub mod policy;
pub mod proof;
pub mod rails;
pub mod registry;
pub mod reliability;
pub mod runs;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::config::LedgerConfig;
use crate::domain::DomainError;
use crate::store::{Store, StoreError, WriteTx};

/// Where "now" comes from: the system clock, or a fixed/driven instant (`--now`, tests).
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> i64;
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A clock that stands still until moved (simulation, replay, tests).
#[derive(Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(now_ms: i64) -> ManualClock {
        ManualClock(AtomicI64::new(now_ms))
    }
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Who caused a change: recorded on every event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Actor(pub String);

impl Actor {
    pub fn operator(name: &str) -> Actor {
        Actor(format!("operator:{name}"))
    }
    pub fn token(token_id: &str) -> Actor {
        Actor(format!("token:{token_id}"))
    }
    pub fn system(job: &str) -> Actor {
        Actor(format!("system:{job}"))
    }
}

/// The result of an idempotent command that did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Booked now.
    Accepted,
    /// Already booked with the same content: nothing booked twice.
    Duplicate,
}

impl Applied {
    pub fn as_str(self) -> &'static str {
        match self {
            Applied::Accepted => "accepted",
            Applied::Duplicate => "duplicate",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The command was rejected; nothing was written.
    #[error(transparent)]
    Rejected(#[from] DomainError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<crate::privacy::PrivacyError> for LedgerError {
    fn from(e: crate::privacy::PrivacyError) -> Self {
        LedgerError::Rejected(DomainError::new(e.code, e.message))
    }
}

impl From<crate::privacy::vault::VaultError> for LedgerError {
    fn from(e: crate::privacy::vault::VaultError) -> Self {
        match e {
            crate::privacy::vault::VaultError::Privacy(e) => {
                LedgerError::Rejected(DomainError::new(e.code, e.message))
            }
            crate::privacy::vault::VaultError::Store(e) => LedgerError::Store(e),
        }
    }
}

impl From<sqlx::Error> for LedgerError {
    fn from(e: sqlx::Error) -> Self {
        LedgerError::Store(StoreError::Database(e))
    }
}

impl LedgerError {
    /// The stable error code (`internal` for store failures, which never leak details).
    pub fn code(&self) -> &'static str {
        match self {
            LedgerError::Rejected(e) => e.code,
            LedgerError::Store(StoreError::CorruptRow(_)) => "corrupt_projection",
            LedgerError::Store(_) => "storage_unavailable",
        }
    }
}

pub fn reject<T>(code: &'static str, message: impl Into<String>) -> Result<T, LedgerError> {
    Err(LedgerError::Rejected(DomainError::new(code, message)))
}

/// A command's idempotency key, the hash of its normalised content, and what the command
/// is called in a `conflict`'s message.
pub(crate) struct Idem {
    pub key: String,
    pub hash: Vec<u8>,
    pub what: String,
}

impl Idem {
    pub fn new(key: String, content: &str, what: String) -> Idem {
        Idem {
            key,
            hash: content_hash(content),
            what,
        }
    }

    /// The same key with its content hash keyed by a provider's data key: a command that
    /// carries personal values leaves no plain digest of them on the chain (it is
    /// destroyed with the key).
    #[must_use]
    pub fn keyed(self, key: &crate::privacy::DataKey) -> Idem {
        Idem {
            hash: crate::privacy::keyed_digest(key, &self.hash),
            ..self
        }
    }

    /// The answer to a re-send: `None` when the key is unused (on any stream), else
    /// `duplicate` for the same content or the `conflict` refusal.
    pub(crate) async fn resent(&self, tx: &mut WriteTx) -> Result<Option<Applied>, LedgerError> {
        match find_idem(tx, &self.key).await? {
            None => Ok(None),
            Some(stored) => duplicate_or_conflict(&stored, &self.hash, &self.what).map(Some),
        }
    }
}

/// Books the events a decision returned, at `now` by `actor`, the first under the
/// command's idempotency key: none is a `duplicate` (the command changes nothing).
pub(crate) fn book_decided(
    tx: &mut WriteTx,
    events: Vec<crate::domain::event::EventBody>,
    actor: &Actor,
    now: i64,
    idem: Option<&Idem>,
) -> Applied {
    if events.is_empty() {
        return Applied::Duplicate;
    }
    let mut idem = idem;
    for body in events {
        let key = idem.take();
        tx.append(crate::store::NewEvent {
            body,
            actor: actor.0.clone(),
            recorded_at_ms: now,
            idem_key: key.map(|i| i.key.clone()),
            content_hash: key.map(|i| i.hash.clone()),
        });
    }
    Applied::Accepted
}

/// SHA-256 of a normalised command, to tell a duplicate from a conflicting reuse of an id.
pub fn content_hash(normalised: &str) -> Vec<u8> {
    Sha256::digest(normalised.as_bytes()).to_vec()
}

/// The ledger service.
#[derive(Clone)]
pub struct Ledger {
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    pub config: LedgerConfig,
    /// The approval decision the next write of this handle books in its own transaction
    /// (`control::approve` on its own copy): the approved command and its decision commit
    /// together or not at all.
    pub(crate) decision: Option<Arc<approvals::DecisionToBook>>,
    /// How personal values are sealed and opened (SPEC §11): every `settle` command seals;
    /// [`Ledger::new`] starts in clear until [`Ledger::with_privacy`].
    pub privacy: crate::privacy::vault::Privacy,
}

impl Ledger {
    pub fn new(store: Store, clock: Arc<dyn Clock>, config: LedgerConfig) -> Ledger {
        Ledger {
            store,
            clock,
            config,
            decision: None,
            privacy: crate::privacy::vault::Privacy::Clear,
        }
    }

    /// This ledger sealing personal values as `privacy` says.
    #[must_use]
    pub fn with_privacy(mut self, privacy: crate::privacy::vault::Privacy) -> Ledger {
        self.privacy = privacy;
        self
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// After a failed write attempt: whether to retry (then it has waited a short, jittered
    /// backoff) or give up.
    pub async fn retry_after(&self, error: &LedgerError, attempt: &mut u32) -> bool {
        match error {
            LedgerError::Store(e)
                if e.is_retryable() && *attempt < self.config.write_retries_max =>
            {
                *attempt += 1;
                let backoff_ms = u64::from((*attempt).min(10)) * 5 + rand::random::<u64>() % 10;
                tracing::debug!(attempt = *attempt, error = %e, "write conflict, retrying");
                tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
                true
            }
            _ => false,
        }
    }
}

/// Runs a command in a write transaction on one stream and commits it, retrying the whole
/// command (its reads included) when another writer got there first:
///
/// ```text
/// let applied = write_stream!(ledger, &stream, |tx| {
///     if find_idem(tx, &key).await?.is_some() { return Ok(Applied::Duplicate); }
///     tx.append(event);
///     Ok(Applied::Accepted)
/// })?;
/// ```
///
/// The body is an async block over `tx: &mut WriteTx` returning `Result<T, LedgerError>`
/// (`return` leaves the attempt). `write_stream!(ledger, streams(&names), |tx| …)` runs it
/// over several streams at once (a batch: each command keeps its own stream). A macro
/// rather than a closure-taking method because the futures of async closures are not
/// `Send` for all lifetimes, which axum and `tokio::spawn` require.
macro_rules! write_stream {
    (@begin $ledger:expr, $begin:ident($arg:expr), |$tx:ident| $body:block) => {{
        let ledger: &$crate::ledger::Ledger = $ledger;
        let mut attempt: u32 = 0;
        loop {
            let result = async {
                let mut tx = ledger.store.$begin($arg).await?;
                let value = $crate::ledger::attempt(async {
                    #[allow(unused_mut)]
                    let $tx = &mut tx;
                    $body
                })
                .await?;
                let decided = ledger.book_decision_in(&mut tx).await?;
                tx.commit().await?;
                if decided {
                    ledger.decision_committed();
                }
                Ok::<_, $crate::ledger::LedgerError>(value)
            }
            .await;
            match result {
                Err(e) if ledger.retry_after(&e, &mut attempt).await => continue,
                other => break other,
            }
        }
    }};
    // Several streams in one transaction (`Store::begin_streams`), for batches.
    ($ledger:expr, streams($streams:expr), |$tx:ident| $body:block) => {
        $crate::ledger::write_stream!(@begin $ledger, begin_streams($streams), |$tx| $body)
    };
    // A usage booking's streams, begun on the heads kept with their views when there are
    // (`Store::begin_usage`).
    ($ledger:expr, usage_streams($streams:expr), |$tx:ident| $body:block) => {
        $crate::ledger::write_stream!(@begin $ledger, begin_usage($streams), |$tx| $body)
    };
    ($ledger:expr, $stream:expr, |$tx:ident| $body:block) => {
        $crate::ledger::write_stream!(@begin $ledger, begin($stream), |$tx| $body)
    };
}

/// Private to the ledger, the only writer (ARCHITECTURE.md).
use write_stream;

/// Fixes the error type of a command body inside [`write_stream!`].
pub fn attempt<T, F: std::future::Future<Output = Result<T, LedgerError>>>(body: F) -> F {
    body
}

/// Looks up an idempotency key on any stream: `None` when unused, else the stored
/// content hash. For keys that are unique across the ledger (registrations, adjustments,
/// payouts, runs); the database's unique index is per stream, so this look-up is what
/// keeps them global.
pub async fn find_idem(
    tx: &mut WriteTx,
    key: &str,
) -> Result<Option<Option<Vec<u8>>>, LedgerError> {
    idem_lookup(tx, key, None).await
}

/// Looks up an idempotency key on the transaction's own stream only: for the keys SPEC §4
/// scopes to a provider (a usage event_id and its void), which another provider may use
/// too.
pub(crate) async fn find_idem_in_stream(
    tx: &mut WriteTx,
    key: &str,
) -> Result<Option<Option<Vec<u8>>>, LedgerError> {
    let stream = tx.stream().to_owned();
    idem_lookup(tx, key, Some(stream)).await
}

async fn idem_lookup(
    tx: &mut WriteTx,
    key: &str,
    stream: Option<String>,
) -> Result<Option<Option<Vec<u8>>>, LedgerError> {
    Ok(crate::store::keys::stored_hash(tx.conn(), key, stream.as_deref()).await?)
}

/// Decides duplicate vs conflict for a reused idempotency key.
pub(crate) fn duplicate_or_conflict(
    stored_hash: &Option<Vec<u8>>,
    hash: &[u8],
    what: &str,
) -> Result<Applied, LedgerError> {
    if stored_hash.as_deref() == Some(hash) {
        Ok(Applied::Duplicate)
    } else {
        reject(
            "conflict",
            format!("{what} was already booked with different content"),
        )
    }
}
