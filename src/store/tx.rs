//! The write transaction ([`WriteTx`]): stream write locks in name order, the heads, the
//! appends with their hash chain, and the commit that lands events and their projection
//! changes together or not at all.

use super::*;

use crate::domain::event::PROVIDER_STREAM_PREFIX;
use crate::domain::projection::TypedFold;

impl Store {
    /// A transaction that may write, begun on a connection of its own; on SQLite with this
    /// process's writer held (returned: it is released when dropped, after the
    /// transaction ends).
    pub(super) async fn write_tx(
        &self,
    ) -> Result<(Option<OwnedMutexGuard<()>>, TxConn), StoreError> {
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

    pub(super) async fn begin_inner(
        &self,
        stream: &str,
        defer: bool,
    ) -> Result<WriteTx, StoreError> {
        let (guard, tx) = self.timed_write_tx().await?;
        self.lock_head(guard, tx, stream, defer).await
    }

    /// [`Store::write_tx`], its wait counted as the `begin` step.
    pub(super) async fn timed_write_tx(
        &self,
    ) -> Result<(Option<OwnedMutexGuard<()>>, TxConn), StoreError> {
        let started = Instant::now();
        let begun = self.write_tx().await?;
        record_write_step("begin", started);
        Ok(begun)
    }

    /// Takes `stream`'s write lock in the transaction `tx` and reads its head.
    pub(super) async fn lock_head(
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
            typed: Vec::new(),
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
    pub(crate) async fn begin_streams(&self, streams: &[&str]) -> Result<WriteTx, StoreError> {
        let names = lock_order(streams);
        let (guard, tx) = self.timed_write_tx().await?;
        self.lock_heads(guard, tx, &names).await
    }

    /// Takes the write locks of `names` (sorted, distinct, at least one) in the transaction
    /// `tx` and reads their heads.
    pub(super) async fn lock_heads(
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
    pub(crate) async fn begin_usage(&self, streams: &[&str]) -> Result<WriteTx, StoreError> {
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
    pub(super) fn booking_tx(
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
            typed: Vec::new(),
            others: heads,
            defer_aggregates: true,
            unverified,
            dirty: self.dirty.clone(),
            assumed: None,
        }
    }
}

/// `streams` in the order their locks are taken, each once: by name (every writer does
/// the same, so writers of overlapping stream sets cannot deadlock).
pub(super) fn lock_order<'s>(streams: &[&'s str]) -> Vec<&'s str> {
    let mut names = streams.to_vec();
    names.sort_unstable();
    names.dedup();
    assert!(!names.is_empty(), "a write transaction needs a stream");
    names
}

/// A stream's stored head sequence (`None`: no event).
#[derive(sqlx::FromRow)]
pub(super) struct StoredHead {
    pub(super) stream: String,
    pub(super) seq: Option<i64>,
}

/// The head of `stream` as stored (its genesis when it has no event): one primary-key probe.
pub(super) async fn read_head(conn: &mut Conn, stream: &str) -> Result<Head, StoreError> {
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
pub(super) async fn check_heads(
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
    pub(super) tx: TxConn,
    pub(super) _writer: Option<OwnedMutexGuard<()>>,
    pub(super) dialect: Dialect,
    /// Whether the database is a Citus coordinator ([`Store::is_citus`]).
    pub(super) citus: bool,
    pub(super) stream: String,
    /// The head of `stream`, with the events appended to it so far.
    pub(super) head: Head,
    pub(super) pending: Vec<StoredEvent>,
    pub(super) ops: Vec<ProjOp>,
    /// The appended events that change a `providers` or `payouts` row, with their stream
    /// and booking time: folded through the typed records at commit ([`TypedFold`]).
    pub(super) typed: Vec<(String, i64, EventBody)>,
    /// The heads of the other streams locked by [`Store::begin_streams`].
    pub(super) others: BTreeMap<String, Head>,
    /// Whether the aggregates of the appended events are left to the projector (a usage
    /// booking) instead of folded at commit.
    pub(super) defer_aggregates: bool,
    /// For a booking begun on kept heads ([`Store::begin_usage`]), not read in it: each
    /// stream's head sequence as begun. The streams that get no append are checked at commit
    /// (an append is checked by the primary key), unless the booking relied on nothing of
    /// their heads ([`WriteTx::head_not_relied_on`]).
    pub(super) unverified: Option<BTreeMap<String, i64>>,
    pub(super) dirty: Arc<std::sync::Mutex<fold::Dirty>>,
    /// Set when the booking took idempotency keys it did not read for new
    /// ([`WriteTx::assume_keys_new`]): told whether the assumption held.
    pub(super) assumed: Option<Arc<usage::RecentKeys>>,
}

impl WriteTx {
    /// Whether this transaction holds the write lock of `stream`.
    pub(crate) fn holds_stream(&self, stream: &str) -> bool {
        stream == self.stream || self.others.contains_key(stream)
    }

    /// Makes `stream`, one of the streams this transaction locked, the one appends go to.
    /// Panics for a stream it did not lock: appending to it would race its other writers.
    pub(crate) fn use_stream(&mut self, stream: &str) {
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
    pub(crate) async fn lock_stream(&mut self, stream: &str) -> Result<(), StoreError> {
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
    pub(crate) async fn fold_locked(&mut self) -> Result<(), StoreError> {
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
    pub(crate) async fn fold_locked_streams<'s>(
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

    /// Tells the commit that nothing decided on `stream` depended on its head: each of its
    /// answers came from what was read under its lock or from the input alone. A booking
    /// begun on kept heads ([`Store::begin_usage`]) then does not check that head at commit
    /// when it appends nothing to the stream (an append is checked by the primary key).
    pub(crate) fn head_not_relied_on(&mut self, stream: &str) {
        if let Some(unverified) = &mut self.unverified {
            unverified.remove(stream);
        }
    }

    /// The head sequence of `stream`, one of the streams this transaction locked, with the
    /// events appended to it so far; `None` for a stream it did not lock.
    pub(crate) fn head_seq_of(&self, stream: &str) -> Option<i64> {
        self.head_of(stream).map(|head| head.seq)
    }

    /// The head of `stream`, one of the streams this transaction locked, with the events
    /// appended to it so far; `None` for a stream it did not lock.
    pub(crate) fn head_of(&self, stream: &str) -> Option<&Head> {
        if stream == self.stream {
            return Some(&self.head);
        }
        self.others.get(stream)
    }

    /// The latest `recorded_at` in this stream, including pending appends.
    pub(crate) fn head_recorded_at_ms(&self) -> i64 {
        self.head.recorded_at_ms
    }

    /// Notes that this booking took the idempotency keys of its appends for new without
    /// reading them (`usage::RecentKeys`): the unique index on `events (idem_key, stream)`
    /// checks it at the append, which fails the attempt as a conflict when a key was
    /// booked, and `recent` is told whether the assumption held.
    pub(crate) fn assume_keys_new(&mut self, recent: Arc<usage::RecentKeys>) {
        self.assumed = Some(recent);
    }

    /// The booking found that a key it took for new was booked, and answers it as such
    /// (`usage::RecentKeys::assumption_failed`).
    pub(crate) fn assumption_failed(&mut self) {
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
        if TypedFold::changes(&event.body) {
            self.typed
                .push((self.stream.clone(), recorded_at_ms, event.body));
        }
        self.head = Head {
            seq,
            hash: stored.hash.clone(),
            recorded_at_ms,
        };
        self.pending.push(stored);
        self.pending.last().expect("just pushed")
    }

    /// The `providers` and `payouts` rows the appended events change, each written whole
    /// from its typed record: the records they change without creating them are read as
    /// stored (before this transaction writes them), and every event is folded through the
    /// aggregates' own `apply`.
    async fn fold_typed(&mut self) -> Result<Vec<ProjOp>, StoreError> {
        if self.typed.is_empty() {
            return Ok(Vec::new());
        }
        let mut fold = TypedFold::default();
        let needs = fold.needs(self.typed.iter().map(|(s, _, b)| (s.as_str(), b)));
        if !needs.streams.is_empty() {
            let ids: Vec<&str> = needs
                .streams
                .iter()
                .filter_map(|s| s.strip_prefix(PROVIDER_STREAM_PREFIX))
                .collect();
            let mut found = super::providers::load_providers(&mut self.tx, &ids).await?;
            for stream in &needs.streams {
                let provider = stream
                    .strip_prefix(PROVIDER_STREAM_PREFIX)
                    .and_then(|id| found.remove(id));
                fold.hold_provider(stream, provider);
            }
        }
        if !needs.payouts.is_empty() {
            let ids: Vec<&str> = needs.payouts.iter().map(String::as_str).collect();
            for payout in super::payouts::load_many(&mut self.tx, &ids)
                .await?
                .into_values()
            {
                fold.hold_payout(payout);
            }
        }
        for (stream, recorded_at_ms, body) in &self.typed {
            fold.apply(stream, *recorded_at_ms, body);
        }
        Ok(fold.puts())
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
        let typed = self.fold_typed().await?;
        project::apply_ops(&mut self.tx, &self.ops)
            .await
            .map_err(classify)?;
        project::apply_ops(&mut self.tx, &typed)
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
