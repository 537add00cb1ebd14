//! The projector (SPEC §3): folds what a booking leaves behind its append.
//!
//! A usage booking writes only its events. The projection ops its events defer
//! (`ProjOp::is_deferred`: the additive [`AGGREGATES`], that is balances, earnings by day
//! and payable by booking day, and a usage event's `usage_segments`) are folded afterwards,
//! stream by stream in sequence order, by whoever comes first:
//! - the background projector of `settle serve` ([`Store::fold_dirty`], [`Store::catch_up_all`]),
//! - every other command, which folds its stream's tail when it begins
//!   ([`Store::begin`]) and its own events when it commits,
//! - every read of an aggregate, which folds the streams it reads ([`Store::catch_up`]):
//!   a payout decision, `verify`, `balance` and the dashboard all read exactly,
//! - a usage booking that reads segments (a GPU's latest booked end, the overlap probe of a
//!   late event), which folds the streams it locked up to their heads first
//!   (`WriteTx::fold_locked_streams`), unless its process's view of the stream already
//!   holds what the fold would give (`ledger::ingest`).
//!
//! Exactly once: a fold writes its rows and moves the stream's checkpoint
//! (`projection_checkpoints`) in one transaction, and moves it only from the value it read;
//! a concurrent fold of the same stream finds the checkpoint moved, fails with
//! [`StoreError::Conflict`] and rolls back. Crashes roll the whole fold back.
//!
//! How folders meet:
//! - on PostgreSQL a fold locks the checkpoint rows it reads, in stream name order (on
//!   Citus shard by shard), so a second folder of a stream waits for the first and then
//!   folds what is left, instead of losing the race at its end; it takes no stream write
//!   lock, so bookings never wait for it;
//! - on SQLite, which has one writer, a fold reads and decodes its tail in a read
//!   transaction beside the writer, then takes the writer and writes only if no checkpoint
//!   moved meanwhile (else it folds again from what it reads under the writer).
//!
//! Bounded: a process remembers at most `store.projector_dirty_streams_max` streams to fold
//! by name (`Dirty`); past that it remembers only that some stream waits, and its next
//! fold sweeps every stream behind its head. Booking waits for the projector of its
//! process while the oldest deferred change is older than
//! `ledger.usage_projection_lag_max_ms`, for a bounded time
//! ([`Store::wait_for_projector`]): a stalled projector slows ingestion without stopping it.
//!
//! [`AGGREGATES`]: crate::domain::projection::AGGREGATES

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::on;
use super::{
    Conn, Dialect, STREAMS_SKIP_SCAN, Store, StoreError, StreamSeq, classify, json_rows_param,
    project,
};
use crate::domain::event::EventBody;
use crate::domain::projection::{ProjOp, ops};

/// Events read per fold statement (bounds a fold's memory; a longer tail takes several).
pub const FOLD_EVENTS_MAX: i64 = 20_000;
/// Streams folded in one transaction.
pub const FOLD_STREAMS_MAX: usize = 512;
/// The failpoint inside a fold transaction, its rows written, before its commit (crash
/// tests: `SETTLE_FAILPOINT=fold.before_commit`).
pub const FOLD_BEFORE_COMMIT: &str = "fold.before_commit";
/// Attempts of one fold that lost the race for a checkpoint before giving up.
const FOLD_RETRIES_MAX: u32 = 20;

/// What one fold did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Folded {
    pub events: u64,
    /// Whether a stream's tail was longer than [`FOLD_EVENTS_MAX`] (fold again).
    pub more: bool,
}

/// Folds the committed tail (the events after the checkpoint) of each of `streams` inside
/// the caller's transaction, at most `events_max` events. A concurrent fold of one of the
/// streams makes one of the two fail with [`StoreError::Conflict`] (the checkpoint moved):
/// the caller retries. On SQLite the caller holds the writer, so folds never meet.
pub(crate) async fn fold_streams(
    conn: &mut Conn,
    dialect: Dialect,
    citus: bool,
    streams: &[&str],
    events_max: i64,
) -> Result<Folded, StoreError> {
    let tail = read_tail(conn, dialect, citus, streams, events_max).await?;
    write_tail(conn, dialect, citus, tail).await
}

/// What a fold read: the checkpoints it started from, the ops the projector folds of the
/// events after them (a prefix of each stream's tail), the last event read per stream, and
/// how many events were read (`Folded`).
#[derive(Default)]
struct Tail {
    checkpoints: BTreeMap<String, i64>,
    adds: Vec<ProjOp>,
    folded_to: BTreeMap<String, i64>,
    folded: Folded,
}

/// Reads the committed tail of `streams` after their checkpoints and decodes it into the
/// ops it folds (the first half of [`fold_streams`]). On PostgreSQL the checkpoint rows are
/// locked until the transaction ends.
async fn read_tail(
    conn: &mut Conn,
    dialect: Dialect,
    citus: bool,
    streams: &[&str],
    events_max: i64,
) -> Result<Tail, StoreError> {
    if streams.is_empty() {
        return Ok(Tail::default());
    }
    // On PostgreSQL the checkpoint rows are locked (in name order, as every folder locks
    // them, so folders cannot deadlock): a second fold of a stream waits for the first to
    // commit and then reads the checkpoint it moved, instead of folding the same events and
    // failing at the end. Before, the projector's fold of hundreds of streams lost that
    // race to any dashboard read that folded one of them, and was rolled back whole (lag
    // of seconds under load). A stream folded for the first time has no row to lock: two
    // such folds still meet at the row's insert, where one fails and retries. (Citus locks
    // rows only in a statement on one shard: there one statement per stream.)
    let lock = dialect == Dialect::Postgres;
    let checkpoints = read_checkpoints(conn, dialect, citus, streams, lock).await?;
    let after: Vec<(&str, i64)> = streams
        .iter()
        .map(|s| (*s, checkpoints.get(*s).copied().unwrap_or(0)))
        .collect();
    // Each stream's tail is one primary-key range. PostgreSQL estimates 100 rows for the
    // JSON rows and a third of `events` for `seq >`, and so planned a hash join over a
    // sequential scan of the whole ledger (21 ms at 200,000 events, for a tail of one
    // event; every command's `begin` folds): the lateral subquery keeps it on the index
    // (0.2 ms). SQLite always joins by nested loops over the index.
    let rows: Vec<FoldedEvent> = if citus {
        read_tails_per_shard(conn, &after, events_max).await?
    } else {
        read_tails(conn, dialect, &after, events_max).await?
    };
    decode_tail(rows, checkpoints, events_max)
}

/// The events after each `(stream, seq)` of `after`, in stream and sequence order, at most
/// `events_max`: one statement.
async fn read_tails(
    conn: &mut Conn,
    dialect: Dialect,
    after: &[(&str, i64)],
    events_max: i64,
) -> Result<Vec<FoldedEvent>, StoreError> {
    let from = dialect.json_rows(1, after.len());
    let sql = match dialect {
        Dialect::Postgres => format!(
            "SELECT e.stream, e.seq, e.event_type, e.version, e.recorded_at_ms, e.payload FROM {from} \
             CROSS JOIN LATERAL (SELECT x.stream, x.seq, x.event_type, x.version, x.recorded_at_ms, x.payload \
             FROM events AS x WHERE x.stream = j.value ->> 0 AND x.seq > CAST(j.value ->> 1 AS BIGINT) \
             ORDER BY x.seq LIMIT $2) AS e \
             ORDER BY e.stream, e.seq LIMIT $2"
        ),
        Dialect::Sqlite => format!(
            "SELECT e.stream, e.seq, e.event_type, e.version, e.recorded_at_ms, e.payload FROM {from} \
             JOIN events AS e ON e.stream = j.value ->> 0 AND e.seq > CAST(j.value ->> 1 AS BIGINT) \
             ORDER BY e.stream, e.seq LIMIT $2"
        ),
    };
    on!(&mut *conn, |c| sqlx::query_as(&sql)
        .bind(json_rows_param(after))
        .bind(events_max)
        .fetch_all(c)
        .await)
    .map_err(classify)
}

/// [`read_tails`] on Citus: one statement per shard, its tails pinned to the shard's
/// streams ([`super::citus::per_shard`]), at most `events_max` events in all.
async fn read_tails_per_shard(
    conn: &mut Conn,
    after: &[(&str, i64)],
    events_max: i64,
) -> Result<Vec<FoldedEvent>, StoreError> {
    let mut rows: Vec<FoldedEvent> = Vec::new();
    for (streams, group) in super::citus::per_shard(conn, after, |(s, _)| *s).await? {
        let left = events_max - rows.len() as i64;
        if left <= 0 {
            break;
        }
        let after: Vec<(&str, i64)> = group.into_iter().copied().collect();
        let sql = format!(
            "SELECT e.stream, e.seq, e.event_type, e.version, e.recorded_at_ms, e.payload FROM {} \
             CROSS JOIN LATERAL (SELECT x.stream, x.seq, x.event_type, x.version, x.recorded_at_ms, x.payload \
             FROM events AS x WHERE x.stream = j.value ->> 0 AND x.stream = ANY($3) \
             AND x.seq > CAST(j.value ->> 1 AS BIGINT) ORDER BY x.seq LIMIT $2) AS e \
             ORDER BY e.stream, e.seq LIMIT $2",
            Dialect::Postgres.json_rows(1, after.len())
        );
        let tail: Vec<FoldedEvent> = super::citus::on_pg!(&mut *conn, |c| sqlx::query_as(&sql)
            .bind(json_rows_param(&after))
            .bind(left)
            .bind(&streams)
            .fetch_all(c)
            .await)
        .map_err(classify)?;
        rows.extend(tail);
    }
    Ok(rows)
}

/// The ops the projector folds of `rows` (read after `checkpoints`), and where each stream's
/// fold ends.
fn decode_tail(
    rows: Vec<FoldedEvent>,
    checkpoints: BTreeMap<String, i64>,
    events_max: i64,
) -> Result<Tail, StoreError> {
    let event_count = rows.len();
    let mut adds = Vec::new();
    let mut folded_to: BTreeMap<String, i64> = BTreeMap::new();
    for FoldedEvent {
        stream,
        seq,
        event_type,
        version,
        recorded_at_ms,
        payload,
    } in rows
    {
        let body = EventBody::from_json(&event_type, version as u32, &payload).map_err(|e| {
            StoreError::Corrupt(format!(
                "event {stream}#{seq} does not decode for folding: {}",
                e.message
            ))
        })?;
        adds.extend(
            ops(&stream, seq, recorded_at_ms, &body)
                .into_iter()
                .filter(|op| op.is_deferred()),
        );
        folded_to.insert(stream, seq);
    }
    Ok(Tail {
        checkpoints,
        adds,
        folded_to,
        folded: Folded {
            events: event_count as u64,
            more: event_count as i64 >= events_max,
        },
    })
}

/// Writes what [`read_tail`] read: the ops, and each stream's checkpoint moved from the value
/// read, or [`StoreError::Conflict`] when another fold moved it first.
async fn write_tail(
    conn: &mut Conn,
    dialect: Dialect,
    citus: bool,
    tail: Tail,
) -> Result<Folded, StoreError> {
    if tail.folded.events == 0 {
        return Ok(Folded::default());
    }
    project::apply_ops(conn, &tail.adds)
        .await
        .map_err(classify)?;
    move_checkpoints(conn, dialect, citus, &tail.checkpoints, &tail.folded_to).await?;
    Ok(tail.folded)
}

/// What folding reads of an event.
#[derive(sqlx::FromRow)]
struct FoldedEvent {
    stream: String,
    seq: i64,
    event_type: String,
    version: i64,
    recorded_at_ms: i64,
    payload: String,
}

/// The checkpoints of `streams` that have one; with `lock`, their rows locked in name
/// order until the transaction ends (PostgreSQL).
async fn read_checkpoints(
    conn: &mut Conn,
    dialect: Dialect,
    citus: bool,
    streams: &[&str],
    lock: bool,
) -> Result<BTreeMap<String, i64>, StoreError> {
    if citus && lock {
        // A statement per shard, pinned to its streams (Citus locks rows only in a
        // statement on one shard), in shard and name order.
        let mut out = BTreeMap::new();
        for (names, _) in super::citus::per_shard(conn, streams, |s| *s).await? {
            let rows: Vec<(&str,)> = names.iter().map(|s| (*s,)).collect();
            let sql = format!(
                "SELECT c.stream, c.seq FROM {} JOIN projection_checkpoints AS c ON c.stream = j.value ->> 0 \
                 WHERE c.stream = ANY($2) ORDER BY c.stream FOR UPDATE OF c",
                dialect.json_rows(1, rows.len())
            );
            let found: Vec<StreamSeq> =
                super::citus::fetch_pinned!(&mut *conn, &sql, json_rows_param(&rows), Some(&names))
                    .map_err(classify)?;
            out.extend(found.into_iter().map(|r| (r.stream, r.seq)));
        }
        return Ok(out);
    }
    let names: Vec<(&str,)> = streams.iter().map(|s| (*s,)).collect();
    let sql = format!(
        "SELECT c.stream, c.seq FROM {} JOIN projection_checkpoints AS c ON c.stream = j.value ->> 0{}",
        dialect.json_rows(1, streams.len()),
        if lock {
            " ORDER BY c.stream FOR UPDATE OF c"
        } else if citus {
            // One statement on the shards that hold the streams (one for one stream).
            " WHERE c.stream = ANY($2)"
        } else {
            ""
        }
    );
    let rows: Vec<StreamSeq> = super::citus::fetch_pinned!(
        &mut *conn,
        &sql,
        json_rows_param(&names),
        citus.then_some(streams)
    )
    .map_err(classify)?;
    Ok(rows.into_iter().map(|r| (r.stream, r.seq)).collect())
}

/// [`fold_streams`] for streams whose heads (`(stream, seq)`) the caller read after taking
/// their write locks: only the streams whose checkpoint is behind their head are folded,
/// and no event is read when none is (a payout run deciding hundreds of providers that the
/// projector has folded already). A head may count events the caller appended and has not
/// committed: that stream is folded as far as the ledger goes, as [`fold_streams`] would.
pub(crate) async fn fold_behind(
    conn: &mut Conn,
    dialect: Dialect,
    citus: bool,
    heads: &[(&str, i64)],
) -> Result<Folded, StoreError> {
    if heads.is_empty() {
        return Ok(Folded::default());
    }
    let names: Vec<&str> = heads.iter().map(|(s, _)| *s).collect();
    let checkpoints = read_checkpoints(conn, dialect, citus, &names, false).await?;
    let mut behind: Vec<&str> = heads
        .iter()
        .filter(|(s, head)| checkpoints.get(*s).copied().unwrap_or(0) < *head)
        .map(|(s, _)| *s)
        .collect();
    behind.sort_unstable();
    fold_streams(conn, dialect, citus, &behind, i64::MAX).await
}

/// Moves each folded stream's checkpoint from the value the fold read (`checkpoints`; none
/// for a stream never folded) to the last event folded (`folded_to`), or fails with
/// [`StoreError::Conflict`] when a concurrent fold moved or created one first.
async fn move_checkpoints(
    conn: &mut Conn,
    dialect: Dialect,
    citus: bool,
    checkpoints: &BTreeMap<String, i64>,
    folded_to: &BTreeMap<String, i64>,
) -> Result<(), StoreError> {
    let from = dialect.json_rows(1, folded_to.len());
    let (moved, created): (Vec<_>, Vec<_>) = folded_to
        .iter()
        .map(|(s, to)| (s.as_str(), checkpoints.get(s).copied(), *to))
        .partition(|(_, old, _)| old.is_some());
    if !moved.is_empty() {
        let rows: Vec<(&str, i64, i64)> = moved
            .iter()
            .map(|(s, old, to)| (*s, old.unwrap_or(0), *to))
            .collect();
        let sql = format!(
            "UPDATE projection_checkpoints SET seq = CAST(j.value ->> 2 AS BIGINT) FROM {from} \
             WHERE projection_checkpoints.stream = j.value ->> 0 \
             AND projection_checkpoints.seq = CAST(j.value ->> 1 AS BIGINT){}",
            // On Citus, only the shards that hold the streams (one for one stream).
            if citus {
                " AND projection_checkpoints.stream = ANY($2)"
            } else {
                ""
            }
        );
        let updated = if citus {
            let streams: Vec<&str> = moved.iter().map(|(s, _, _)| *s).collect();
            super::citus::on_pg!(&mut *conn, |c| sqlx::query(&sql)
                .bind(json_rows_param(&rows))
                .bind(&streams)
                .execute(c)
                .await
                .map(|r| r.rows_affected()))
        } else {
            on!(&mut *conn, |c| sqlx::query(&sql)
                .bind(json_rows_param(&rows))
                .execute(c)
                .await
                .map(|r| r.rows_affected()))
        }
        .map_err(classify)?;
        if updated != rows.len() as u64 {
            return Err(StoreError::Conflict(format!(
                "{} of {} projection checkpoints moved during the fold",
                rows.len() as u64 - updated,
                rows.len()
            )));
        }
    }
    if !created.is_empty() {
        let rows: Vec<(&str, i64)> = created.iter().map(|(s, _, to)| (*s, *to)).collect();
        let inserted = on!(&mut *conn, |c| sqlx::query(&format!(
            "INSERT INTO projection_checkpoints (stream, seq) SELECT j.value ->> 0, CAST(j.value ->> 1 AS BIGINT) \
             FROM {from} WHERE true ON CONFLICT (stream) DO NOTHING"
        ))
        .bind(json_rows_param(&rows))
        .execute(c)
        .await.map(|r| r.rows_affected()))
        .map_err(classify)?;
        if inserted != rows.len() as u64 {
            return Err(StoreError::Conflict(
                "a projection checkpoint was created during the fold".into(),
            ));
        }
    }
    Ok(())
}

/// Streams that [`Store::fold_dirty`] should fold: appended to by this process with their
/// aggregates deferred. Each carries when it first fell behind (the lag) and the
/// generation of its latest append, so a fold that began before an append leaves it dirty.
/// At most `streams_max` are remembered by name; a stream marked past that is remembered
/// only as `unnamed` (since when, latest generation), and the next fold then sweeps every
/// stream behind its head: memory stays bounded however many streams a process books.
pub(crate) struct Dirty {
    generation: u64,
    streams: BTreeMap<String, (Instant, u64)>,
    streams_max: usize,
    unnamed: Option<(Instant, u64)>,
}

impl Dirty {
    pub(crate) fn new(streams_max: usize) -> Dirty {
        Dirty {
            generation: 0,
            streams: BTreeMap::new(),
            streams_max,
            unnamed: None,
        }
    }

    pub(crate) fn mark<'a>(&mut self, streams: impl IntoIterator<Item = &'a str>) {
        self.generation += 1;
        let generation = self.generation;
        let now = Instant::now();
        for s in streams {
            if let Some((_, g)) = self.streams.get_mut(s) {
                *g = generation;
            } else if self.streams.len() < self.streams_max {
                self.streams.insert(s.to_owned(), (now, generation));
            } else {
                let since = self.unnamed.map_or(now, |(since, _)| since);
                self.unnamed = Some((since, generation));
            }
        }
    }

    /// Forgets what a fold that began at `generation` (and `started`) brought up to date.
    fn folded(&mut self, generation: u64, started: Instant) {
        // A stream booked on again since the fold began stays dirty; what waits on it was
        // booked after `started`, so that bounds its lag.
        self.streams.retain(|_, (since, g)| {
            if *g <= generation {
                return false;
            }
            *since = (*since).max(started);
            true
        });
        self.unnamed = match self.unnamed {
            Some((since, g)) if g > generation => Some((since.max(started), g)),
            _ => None,
        };
    }
}

/// What booking knows of the projector of its process: whether one follows the ledger, and a
/// wake-up after each of its passes ([`Store::wait_for_projector`]).
#[derive(Default)]
pub(crate) struct Follower {
    following: std::sync::atomic::AtomicBool,
    passes: tokio::sync::Notify,
}

impl Store {
    /// Declares that a projector of this process follows the ledger (`settle serve`'s worker,
    /// as it starts): from then on [`Store::wait_for_projector`] waits for its passes.
    pub fn projector_follows(&self) {
        self.follower
            .following
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Backpressure on booking (`ledger.usage_projection_lag_max_ms`): while the aggregates
    /// this process deferred have waited longer than `lag_max` ([`Store::projection_lag`]) and
    /// a projector of this process follows the ledger, waits for its next pass, at most
    /// `wait_max` in all; then books anyway, so a stalled projector slows ingestion without
    /// stopping it. At the machine's limit the bookers then leave the projector the time it
    /// needs, and the lag stays near `lag_max` instead of growing with the backlog. Returns
    /// how long it waited (zero when it did not).
    pub(crate) async fn wait_for_projector(
        &self,
        lag_max: Duration,
        wait_max: Duration,
    ) -> Duration {
        let following = self
            .follower
            .following
            .load(std::sync::atomic::Ordering::Acquire);
        if !following || lag_max.is_zero() || wait_max.is_zero() {
            return Duration::ZERO;
        }
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + wait_max);
        loop {
            // Registered before the check: a pass that ends between the two still wakes it.
            let pass = self.follower.passes.notified();
            if self.projection_lag() <= lag_max {
                break;
            }
            if tokio::time::timeout_at(deadline, pass).await.is_err() {
                break;
            }
        }
        started.elapsed()
    }

    /// Brings the aggregates of `streams` up to their heads as of this call; returns the
    /// number of events folded. Cheap when they are up to date (one read, no lock).
    pub async fn catch_up(&self, streams: &[&str]) -> Result<u64, StoreError> {
        self.catch_up_in_steps(streams, FOLD_EVENTS_MAX).await
    }

    /// [`Store::catch_up`] in transactions of at most `events_per_tx` events, each
    /// committed: a long backlog makes progress even when no transaction of its whole
    /// length would commit (a payout run's chunk under dropped connections,
    /// `runs.catch_up_events_per_tx`).
    pub(crate) async fn catch_up_in_steps(
        &self,
        streams: &[&str],
        events_per_tx: i64,
    ) -> Result<u64, StoreError> {
        if streams.is_empty() {
            return Ok(0);
        }
        if self.is_citus() {
            // The heads a statement per shard, the checkpoints one statement on the shards
            // that hold the streams (a correlated subquery over the list does not
            // distribute).
            let mut conn = self.db.acquire().await?;
            let mut heads = Vec::new();
            for (group, _) in super::citus::per_shard(&mut conn, streams, |s| *s).await? {
                heads.extend(super::read_heads(&mut conn, Dialect::Postgres, &group, true).await?);
            }
            let checkpoints =
                read_checkpoints(&mut conn, Dialect::Postgres, true, streams, false).await?;
            drop(conn);
            let behind: Vec<String> = heads
                .into_iter()
                .filter(|h| checkpoints.get(&h.stream).copied().unwrap_or(0) < h.head.seq)
                .map(|h| h.stream)
                .collect();
            return self.fold_all_of(&behind, events_per_tx.max(1)).await;
        }
        let names: Vec<(&str,)> = streams.iter().map(|s| (*s,)).collect();
        let sql = format!(
            "SELECT j.value ->> 0 FROM {} WHERE \
             COALESCE((SELECT c.seq FROM projection_checkpoints AS c WHERE c.stream = j.value ->> 0), 0) \
             < COALESCE((SELECT e.seq FROM events AS e WHERE e.stream = j.value ->> 0 ORDER BY e.seq DESC LIMIT 1), 0)",
            self.dialect().json_rows(1, streams.len())
        );
        let behind: Vec<String> = on!(&self.db, |c| sqlx::query_scalar(&sql)
            .bind(json_rows_param(&names))
            .fetch_all(c)
            .await)?;
        self.fold_all_of(&behind, events_per_tx.max(1)).await
    }

    /// Brings the aggregates of every stream up to its head as of this call (`verify`,
    /// platform-wide reads, the projector's start and its periodic sweep).
    pub async fn catch_up_all(&self) -> Result<u64, StoreError> {
        // One probe per stream through the primary key (a skip scan), like
        // `max_recorded_at_ms`: no scan of the events.
        // On Citus every shard groups its own streams' heads instead (a recursive scan does
        // not distribute); the checkpoints lie on the same shards.
        let sql = if self.is_citus() {
            "SELECT h.stream FROM (SELECT stream, MAX(seq) AS head FROM events GROUP BY stream) AS h \
             LEFT JOIN projection_checkpoints AS c ON c.stream = h.stream \
             WHERE COALESCE(c.seq, 0) < h.head"
                .to_owned()
        } else {
            format!(
                "{STREAMS_SKIP_SCAN} \
             SELECT s.stream FROM s WHERE s.stream IS NOT NULL AND \
             COALESCE((SELECT c.seq FROM projection_checkpoints AS c WHERE c.stream = s.stream), 0) \
             < (SELECT h.seq FROM events AS h WHERE h.stream = s.stream ORDER BY h.seq DESC LIMIT 1)"
            )
        };
        let behind: Vec<String> = on!(&self.db, |c| sqlx::query_scalar(&sql).fetch_all(c).await)?;
        self.fold_all_of(&behind, FOLD_EVENTS_MAX).await
    }

    /// The background projector's step: folds the streams this process booked usage on
    /// since their last fold. Returns the number of events folded.
    pub async fn fold_dirty(&self) -> Result<u64, StoreError> {
        let folded = self.fold_dirty_pass().await;
        // Bookers waiting for a pass look at the lag again, whatever this one did.
        self.follower.passes.notify_waiters();
        folded
    }

    async fn fold_dirty_pass(&self) -> Result<u64, StoreError> {
        let (generation, streams, sweep, started) = {
            let dirty = self.dirty.lock().expect("dirty set lock");
            let streams: Vec<String> = dirty.streams.keys().cloned().collect();
            (
                dirty.generation,
                streams,
                dirty.unnamed.is_some(),
                Instant::now(),
            )
        };
        // Every stream marked up to `generation` had committed before this fold began, so
        // the sweep of every stream behind its head takes the unnamed ones too.
        let folded = if sweep {
            self.catch_up_all().await?
        } else {
            self.fold_all_of(&streams, FOLD_EVENTS_MAX).await?
        };
        self.dirty
            .lock()
            .expect("dirty set lock")
            .folded(generation, started);
        Ok(folded)
    }

    /// How long the oldest aggregate change this process deferred has waited to be folded
    /// (`settle_projection_lag_seconds`); zero when nothing waits.
    pub fn projection_lag(&self) -> Duration {
        let dirty = self.dirty.lock().expect("dirty set lock");
        dirty
            .streams
            .values()
            .chain(dirty.unnamed.as_ref())
            .map(|(since, _)| since.elapsed())
            .max()
            .unwrap_or_default()
    }

    /// Folds every event of `streams` committed before this call, in transactions of at
    /// most [`FOLD_STREAMS_MAX`] streams and `events_max` events.
    async fn fold_all_of(&self, streams: &[String], events_max: i64) -> Result<u64, StoreError> {
        let mut names: Vec<&str> = streams.iter().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        let mut total = 0;
        for chunk in names.chunks(FOLD_STREAMS_MAX) {
            let mut attempt = 0;
            loop {
                match self.fold_once(chunk, events_max).await {
                    Ok(folded) => {
                        total += folded.events;
                        if !folded.more {
                            break;
                        }
                    }
                    Err(e) if e.is_retryable() && attempt < FOLD_RETRIES_MAX => {
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(u64::from(attempt) * 3)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(total)
    }

    /// One fold transaction over `streams` (sorted). On PostgreSQL it takes no stream lock:
    /// bookings never wait for the projector. A stream's committed events are a gapless
    /// prefix (its writers commit in sequence order under its lock), and two folds of one
    /// stream meet at its checkpoint row, where the later one finds the checkpoint moved
    /// and retries (`tests/it/projector.rs` races them). On SQLite it takes the writer.
    ///
    /// On SQLite the tail is read and decoded before the writer is taken, in a read
    /// transaction beside it (WAL readers never wait for the writer), so bookings wait only
    /// for the fold's writes: the writer then checks that no fold moved a checkpoint since
    /// (else it folds from what it reads under the lock, as PostgreSQL does). The booking's
    /// wait for the writer was a third of its time (`ops/bench/ingest.md`).
    async fn fold_once(&self, streams: &[&str], events_max: i64) -> Result<Folded, StoreError> {
        let dialect = self.dialect();
        let read = if dialect == Dialect::Sqlite {
            let mut read = super::TxConn::begin_with(&self.db, dialect.begin_snapshot()).await?;
            let tail = read_tail(&mut read, dialect, false, streams, events_max).await?;
            read.commit().await?;
            if tail.folded.events == 0 {
                return Ok(Folded::default());
            }
            Some(tail)
        } else {
            None
        };
        let (_guard, mut tx) = self.write_tx().await?;
        let folded = match read {
            Some(tail)
                if read_checkpoints(&mut tx, dialect, false, streams, false).await?
                    == tail.checkpoints =>
            {
                write_tail(&mut tx, dialect, false, tail).await?
            }
            _ => fold_streams(&mut tx, dialect, self.is_citus(), streams, events_max).await?,
        };
        crate::failpoint::failpoint(FOLD_BEFORE_COMMIT);
        tx.commit().await.map_err(classify)?;
        Ok(folded)
    }
}

/// Takes the PostgreSQL write locks of `streams`, in the order given (every writer passes
/// them in name order, so writers of overlapping sets cannot deadlock).
pub(crate) async fn lock_streams(
    conn: &mut Conn,
    dialect: Dialect,
    citus: bool,
    streams: &[&str],
) -> Result<(), StoreError> {
    let names: Vec<(&str,)> = streams.iter().map(|s| (*s,)).collect();
    on!(&mut *conn, |c| sqlx::query(&format!(
        "SELECT COUNT(pg_advisory_xact_lock(hashtextextended(j.value ->> 0, 0))) FROM {}",
        dialect.json_rows(1, streams.len())
    ))
    .bind(json_rows_param(&names))
    .fetch_one(c)
    .await
    .map(|_| ()))
    .map_err(classify)?;
    if citus {
        super::citus::lock_on_shards(conn, streams).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(dirty: &Dirty) -> Vec<&str> {
        dirty.streams.keys().map(String::as_str).collect()
    }

    /// Up to `streams_max` streams are remembered by name; past it, only that some stream
    /// waits (the projector then sweeps every stream).
    #[test]
    fn streams_past_the_limit_are_remembered_only_as_unnamed() {
        let mut dirty = Dirty::new(2);
        dirty.mark(["a", "b"]);
        assert_eq!(named(&dirty), ["a", "b"]);
        assert!(dirty.unnamed.is_none());
        dirty.mark(["a", "c"]);
        assert_eq!(named(&dirty), ["a", "b"]);
        assert!(dirty.unnamed.is_some());
    }

    /// A fold forgets only what was marked before it began: a stream (named or not) booked
    /// on while it ran stays dirty for the next fold.
    #[test]
    fn a_fold_leaves_dirty_what_was_booked_while_it_ran() {
        let mut dirty = Dirty::new(1);
        dirty.mark(["a", "b"]);
        let (began, started) = (dirty.generation, Instant::now());
        dirty.mark(["a"]);
        dirty.folded(began, started);
        assert_eq!(named(&dirty), ["a"]);
        assert!(dirty.unnamed.is_none(), "b was marked before the fold");
        dirty.mark(["c"]);
        let began = dirty.generation;
        dirty.mark(["c"]);
        dirty.folded(began, started);
        assert!(
            dirty.unnamed.is_some(),
            "c was marked again during the fold"
        );
        assert!(named(&dirty).is_empty(), "a was marked before this fold");
        let began = dirty.generation;
        dirty.folded(began, started);
        assert!(named(&dirty).is_empty());
        assert!(dirty.unnamed.is_none());
    }
}
