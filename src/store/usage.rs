//! The reads of usage booking, inside the booking's transaction (it holds the write locks
//! of the streams it books on): each is one statement with the batch as one JSON parameter
//! (see [`super::Dialect::json_rows`]), so its text never changes and it is planned once
//! per connection; and what a process keeps of them between batches ([`StreamViews`]).

use std::collections::{BTreeMap, HashMap};

use super::keys::{KeyHashes, StreamKey};
use super::on;
use super::{Conn, Dialect, Head, Store, StoreError, WriteTx, json_rows_param};
use crate::domain::event::{Tier, provider_stream};
use crate::domain::money::{FeeBps, Rate};
use crate::domain::pricing::{FeeBook, PriceBook, TierHistory};

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptRow(e.to_string())
}

/// A registered GPU's owner and model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuOwner {
    pub provider_id: String,
    pub model: String,
}

/// The booked segment a probe overlaps.
#[derive(sqlx::FromRow)]
struct Overlap {
    probe: i64,
    started_at_ms: i64,
    ended_at_ms: i64,
}

/// A usage interval to test against the booked segments of its GPU.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OverlapProbe<'a> {
    /// The caller's name for the probe, returned with its overlap.
    pub index: usize,
    /// The stream of the GPU's owner.
    pub stream: &'a str,
    pub gpu_id: &'a str,
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
}

/// For each probe overlapping booked, not voided usage of its GPU: that segment
/// `[started, ended)`, by the probe's index.
///
/// Booked segments of one GPU never overlap each other, so one backward index step answers
/// it: the latest segment starting before the probe ends overlaps it iff it ends after the
/// probe starts (any overlapping segment is that one, or starts after it and then that one
/// starts inside the probe). One primary-key seek per probe, however many segments the GPU
/// has booked that day.
pub(crate) async fn overlapping_segments(
    tx: &mut WriteTx,
    probes: &[OverlapProbe<'_>],
) -> Result<HashMap<usize, (i64, i64)>, StoreError> {
    let mut overlaps = HashMap::new();
    if probes.is_empty() {
        return Ok(overlaps);
    }
    let dialect = tx.dialect();
    if tx.is_citus() {
        // Per shard: the same backward step, pinned to the probe's stream and to the
        // shard's streams (`citus::per_shard`).
        for (streams, group) in super::citus::per_shard(tx.conn(), probes, |p| p.stream).await? {
            let rows: Vec<(usize, &str, i64, i64, &str)> = group
                .iter()
                .map(|p| (p.index, p.gpu_id, p.ended_at_ms, p.started_at_ms, p.stream))
                .collect();
            let sql = format!(
                "SELECT CAST(j.value ->> 0 AS BIGINT) AS probe, s.started_at_ms, s.ended_at_ms FROM {} \
                 CROSS JOIN LATERAL (SELECT p.started_at_ms, p.ended_at_ms FROM usage_segments AS p \
                 WHERE p.gpu_id = j.value ->> 1 AND p.stream = j.value ->> 4 \
                 AND p.stream = ANY($2) \
                 AND p.started_at_ms < CAST(j.value ->> 2 AS BIGINT) \
                 ORDER BY p.started_at_ms DESC LIMIT 1) AS s \
                 WHERE s.ended_at_ms > CAST(j.value ->> 3 AS BIGINT)",
                dialect.json_rows(1, rows.len())
            );
            let found: Vec<Overlap> = super::citus::on_pg!(tx.conn(), |c| sqlx::query_as(&sql)
                .bind(json_rows_param(&rows))
                .bind(&streams)
                .fetch_all(c)
                .await)?;
            record_overlaps(&mut overlaps, found)?;
        }
        return Ok(overlaps);
    }
    let rows: Vec<(usize, &str, i64, i64)> = probes
        .iter()
        .map(|p| (p.index, p.gpu_id, p.ended_at_ms, p.started_at_ms))
        .collect();
    let from = dialect.json_rows(1, probes.len());
    let sql = match dialect {
        // One backward index step per probe, its row read in the same step.
        Dialect::Postgres => format!(
            "SELECT CAST(j.value ->> 0 AS BIGINT) AS probe, s.started_at_ms, s.ended_at_ms FROM {from} \
             CROSS JOIN LATERAL (SELECT p.started_at_ms, p.ended_at_ms FROM usage_segments AS p \
             WHERE p.gpu_id = j.value ->> 1 AND p.started_at_ms < CAST(j.value ->> 2 AS BIGINT) \
             ORDER BY p.started_at_ms DESC LIMIT 1) AS s \
             WHERE s.ended_at_ms > CAST(j.value ->> 3 AS BIGINT)"
        ),
        // SQLite has no LATERAL: the step finds the start, a primary-key probe its row.
        Dialect::Sqlite => format!(
            "SELECT CAST(j.value ->> 0 AS BIGINT) AS probe, s.started_at_ms, s.ended_at_ms FROM {from} \
             JOIN usage_segments AS s ON s.gpu_id = j.value ->> 1 \
             AND s.started_at_ms = (SELECT p.started_at_ms FROM usage_segments AS p \
             WHERE p.gpu_id = j.value ->> 1 AND p.started_at_ms < CAST(j.value ->> 2 AS BIGINT) \
             ORDER BY p.started_at_ms DESC LIMIT 1) \
             WHERE s.ended_at_ms > CAST(j.value ->> 3 AS BIGINT)"
        ),
    };
    let found: Vec<Overlap> = on!(tx.conn(), |c| sqlx::query_as(&sql)
        .bind(json_rows_param(&rows))
        .fetch_all(c)
        .await)?;
    record_overlaps(&mut overlaps, found)?;
    Ok(overlaps)
}

/// Keeps the first overlap found of each probe.
fn record_overlaps(
    overlaps: &mut HashMap<usize, (i64, i64)>,
    found: Vec<Overlap>,
) -> Result<(), StoreError> {
    for o in found {
        let index = usize::try_from(o.probe).map_err(corrupt)?;
        overlaps
            .entry(index)
            .or_insert((o.started_at_ms, o.ended_at_ms));
    }
    Ok(())
}

/// The platform's fee schedules.
pub(crate) async fn fee_book(tx: &mut WriteTx) -> Result<FeeBook, StoreError> {
    let mut fees = FeeBook::default();
    let rows: Vec<FeeRow> = on!(tx.conn(), |c| sqlx::query_as(
        "SELECT tier, effective_from_ms, fee_bps FROM fee_schedules"
    )
    .fetch_all(c)
    .await)?;
    for r in rows {
        let tier = Tier::parse(&r.tier).map_err(corrupt)?;
        let fee = FeeBps::new(r.fee_bps).map_err(corrupt)?;
        fees.set(tier, r.effective_from_ms, fee);
    }
    Ok(fees)
}

#[derive(sqlx::FromRow)]
struct FeeRow {
    tier: String,
    effective_from_ms: i64,
    fee_bps: i64,
}

#[derive(sqlx::FromRow)]
struct TierRow {
    provider_id: String,
    from_ms: i64,
    seq: i64,
    tier: String,
}

#[derive(sqlx::FromRow)]
struct RateRow {
    provider_id: String,
    model: String,
    effective_from_ms: i64,
    rate_usdc_per_hour: String,
}

/// What pricing a provider's usage needs: its tier history and its price book.
#[derive(Clone, Debug, Default)]
pub struct PricingContext {
    pub tiers: TierHistory,
    pub prices: PriceBook,
}

/// The pricing contexts of `providers` (every one named gets one, empty when unknown).
pub(crate) async fn pricing_contexts(
    tx: &mut WriteTx,
    providers: &[&str],
) -> Result<HashMap<String, PricingContext>, StoreError> {
    let mut out: HashMap<String, PricingContext> = providers
        .iter()
        .map(|p| (p.to_string(), PricingContext::default()))
        .collect();
    let rows = json_rows_param(&providers.iter().map(|p| (*p,)).collect::<Vec<_>>());
    let from = tx.dialect().json_rows(1, providers.len());
    // On Citus, only the shards that hold the providers' streams.
    let citus = tx.is_citus();
    let streams: Vec<String> = if citus {
        providers.iter().map(|p| provider_stream(p)).collect()
    } else {
        Vec::new()
    };
    let pin = |alias: &str| {
        if citus {
            format!(" WHERE {alias}.stream = ANY($2)")
        } else {
            String::new()
        }
    };
    let sql = format!(
        "SELECT t.provider_id, t.from_ms, t.seq, t.tier FROM {from} JOIN provider_tiers AS t ON t.provider_id = j.value ->> 0{}",
        pin("t")
    );
    let tiers: Vec<TierRow> =
        super::citus::fetch_pinned!(tx.conn(), &sql, &rows, citus.then_some(&streams))?;
    for t in tiers {
        if let Some(c) = out.get_mut(&t.provider_id) {
            let tier = Tier::parse(&t.tier).map_err(corrupt)?;
            c.tiers.set(t.from_ms, t.seq, tier);
        }
    }
    let sql = format!(
        "SELECT r.provider_id, r.model, r.effective_from_ms, r.rate_usdc_per_hour FROM {from} JOIN rates AS r ON r.provider_id = j.value ->> 0{}",
        pin("r")
    );
    let rates: Vec<RateRow> =
        super::citus::fetch_pinned!(tx.conn(), &sql, &rows, citus.then_some(&streams))?;
    for r in rates {
        if let Some(c) = out.get_mut(&r.provider_id) {
            let rate = Rate::parse(&r.rate_usdc_per_hour).map_err(corrupt)?;
            c.prices.set(&r.model, r.effective_from_ms, rate);
        }
    }
    Ok(out)
}

/// One of a provider's GPUs as usage booking knows it, at a head of the provider's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuFacts {
    pub model: String,
    /// The latest end of the GPU's booked usage (`None`: none booked). Booked segments of
    /// one GPU never overlap, so an interval starting at or after it overlaps none of them.
    pub latest_end_ms: Option<i64>,
}

/// What usage booking has read of one provider's stream, valid at one head of it: the
/// provider's GPUs read so far and its pricing context.
///
/// Every table it comes from (`gpus`, `usage_segments`, `provider_tiers`, `rates`) changes
/// only by events of that provider's stream, in their append's transaction, and a GPU
/// never changes owner. So at the same head the tables say the same, and a later batch
/// that finds the stream still at that head may decide on the view instead of reading
/// them again (checks in memory where they are safe). `settle rebuild` may
/// rewrite the tables without a new event: it leaves a new `projections_rebuilt` marker in
/// `ledger_settings`, and views read under another marker are dropped.
#[derive(Clone, Debug, Default)]
pub struct StreamView {
    pub gpus: HashMap<String, GpuFacts>,
    /// `None` until read.
    pub context: Option<PricingContext>,
    /// Every booked segment of a GPU of the provider that `gpus` does not hold is on the
    /// tables at the view's head, so such a GPU is read without folding the stream first.
    /// Set by the batch that folded the stream up to its head (the one that began the view:
    /// its every event names a GPU the empty view does not know), kept while every event
    /// booked on the view names a GPU in `gpus` ([`TakenViews::booked`] clears it otherwise).
    pub segments_complete: bool,
    /// The segments of every usage event booked on the view since a batch last folded the
    /// stream up to its head, by GPU: with the segments on the tables (all of them up to
    /// that fold, and whatever the projector folded since), every booked segment of the
    /// provider's GPUs, so a late event is checked for overlap without folding the stream
    /// first ([`TakenViews::unfolded_overlap`]). `None`: not known (no fold yet, or dropped
    /// past `store.usage_views_segments_max`), and a late event's stream is folded first.
    pub unfolded: Option<HashMap<String, Vec<(i64, i64)>>>,
}

impl StreamView {
    /// The number of segments in [`StreamView::unfolded`].
    fn unfolded_len(&self) -> usize {
        self.unfolded
            .as_ref()
            .map_or(0, |gpus| gpus.values().map(Vec::len).sum())
    }
}

/// The views a process keeps between batches, by stream, each with the head it is valid
/// at, and the rebuild marker they were read under. Bounded: past `streams_max` views it
/// forgets them all (the next batches read them again).
#[derive(Debug)]
pub struct StreamViews {
    rebuilt: Option<String>,
    views: HashMap<String, KeptView>,
    streams_max: usize,
    /// The most [`StreamView::unfolded`] segments kept in all views; past it the kept views
    /// forget theirs (`None`: each one's next late event folds its stream, as before).
    segments_max: usize,
    /// The unfolded segments the kept views hold.
    segments_kept: usize,
}

impl StreamViews {
    pub fn new(streams_max: usize, segments_max: usize) -> StreamViews {
        StreamViews {
            rebuilt: None,
            views: HashMap::new(),
            streams_max,
            segments_max,
            segments_kept: 0,
        }
    }

    /// Forgets every kept view.
    fn clear(&mut self) {
        self.views.clear();
        self.segments_kept = 0;
    }

    /// Takes `stream`'s kept view out of the keeping.
    fn take(&mut self, stream: &str) -> Option<KeptView> {
        let kept = self.views.remove(stream)?;
        self.segments_kept -= kept.view.unfolded_len();
        Some(kept)
    }

    /// Keeps `view` of `stream`, valid at `head`. Past `segments_max` unfolded segments in
    /// all, the views kept before forget theirs (the views of providers no longer sending
    /// would otherwise hold the limit for good), and `view` keeps its own if they fit alone.
    fn keep(&mut self, stream: String, head: Head, mut view: StreamView) {
        self.take(&stream);
        let len = view.unfolded_len();
        if self.segments_kept + len > self.segments_max {
            for kept in self.views.values_mut() {
                kept.view.unfolded = None;
            }
            self.segments_kept = 0;
        }
        if len > self.segments_max {
            view.unfolded = None;
        } else {
            self.segments_kept += len;
        }
        let kept = KeptView {
            head,
            view,
            claimed: false,
        };
        self.views.insert(stream, kept);
    }
}

/// A view kept between batches, with the head it is valid at.
#[derive(Debug)]
struct KeptView {
    head: Head,
    view: StreamView,
    /// A batch has begun on `head` without reading it (`Store::begin_usage`): no other may
    /// until the view is kept again.
    claimed: bool,
}

/// The views a batch decides on, taken out of the process's keeping; given back with
/// [`Store::keep_usage_views`] once the batch committed.
#[derive(Debug, Default)]
pub struct TakenViews {
    /// The rebuild marker they were read under.
    pub rebuilt: Option<String>,
    /// By stream.
    pub views: HashMap<String, StreamView>,
}

impl TakenViews {
    /// The pricing context of `stream`'s provider, when read.
    pub(crate) fn context(&self, stream: &str) -> Option<&PricingContext> {
        self.views.get(stream).and_then(|v| v.context.as_ref())
    }

    /// Notes `stream`'s pricing context, read in the batch's transaction.
    pub fn priced(&mut self, stream: &str, context: PricingContext) {
        if let Some(view) = self.views.get_mut(stream) {
            view.context = Some(context);
        }
    }

    /// Notes one of `stream`'s GPUs, read in the batch's transaction (nothing when the
    /// stream is not the batch's).
    pub(crate) fn learned(&mut self, stream: &str, gpu_id: &str, facts: &GpuFacts) {
        if let Some(view) = self.views.get_mut(stream) {
            view.gpus.insert(gpu_id.to_owned(), facts.clone());
        }
    }

    /// Notes usage of `gpu_id` booked on `stream` as `segments` (`(started_at_ms,
    /// ended_at_ms)`, in order) up to `ended_at_ms`. Booked on a GPU the view does not hold,
    /// it leaves a segment the tables lack until folded: the view is no longer
    /// [`StreamView::segments_complete`].
    pub fn booked(
        &mut self,
        stream: &str,
        gpu_id: &str,
        ended_at_ms: i64,
        segments: impl IntoIterator<Item = (i64, i64)>,
    ) {
        let Some(view) = self.views.get_mut(stream) else {
            return;
        };
        if let Some(unfolded) = &mut view.unfolded {
            match unfolded.get_mut(gpu_id) {
                Some(booked) => booked.extend(segments),
                None => {
                    unfolded.insert(gpu_id.to_owned(), segments.into_iter().collect());
                }
            }
        }
        match view.gpus.get_mut(gpu_id) {
            Some(gpu) => {
                gpu.latest_end_ms = Some(
                    gpu.latest_end_ms
                        .map_or(ended_at_ms, |t| t.max(ended_at_ms)),
                );
            }
            None => view.segments_complete = false,
        }
    }

    /// Whether `stream`'s view is [`StreamView::segments_complete`].
    pub(crate) fn segments_complete(&self, stream: &str) -> bool {
        self.views.get(stream).is_some_and(|v| v.segments_complete)
    }

    /// Notes that `stream` was folded up to its locked head in the batch's transaction: the
    /// tables hold every segment booked on it so far.
    pub fn folded(&mut self, stream: &str) {
        if let Some(view) = self.views.get_mut(stream) {
            view.segments_complete = true;
            view.unfolded = Some(HashMap::new());
        }
    }

    /// Whether `stream`'s view holds its [`StreamView::unfolded`] segments: a late event of
    /// it is checked against those and the tables, without a fold.
    pub(crate) fn unfolded_known(&self, stream: &str) -> bool {
        self.views.get(stream).is_some_and(|v| v.unfolded.is_some())
    }

    /// Of the segments of `gpu_id` booked on `stream` since its last fold (none when not
    /// [`TakenViews::unfolded_known`]), the one the overlap probe of `[started_at_ms,
    /// ended_at_ms)` finds among them (`overlapping_segments`' backward step: the latest
    /// starting before the end, when it ends after the start).
    pub(crate) fn unfolded_overlap(
        &self,
        stream: &str,
        gpu_id: &str,
        started_at_ms: i64,
        ended_at_ms: i64,
    ) -> Option<(i64, i64)> {
        let unfolded = self.views.get(stream)?.unfolded.as_ref()?;
        unfolded
            .get(gpu_id)?
            .iter()
            .filter(|(s, _)| *s < ended_at_ms)
            .max_by_key(|(s, _)| *s)
            .filter(|(_, t)| *t > started_at_ms)
            .copied()
    }

    /// The views with the heads their streams have in `tx` (its appends counted), for
    /// [`Store::keep_usage_views`] once `tx` committed.
    pub(crate) fn at_heads(
        self,
        tx: &WriteTx,
    ) -> (Option<String>, Vec<(String, Head, StreamView)>) {
        let heads = self
            .views
            .into_iter()
            .filter_map(|(stream, view)| {
                let head = tx.head_of(&stream)?.clone();
                Some((stream, head, view))
            })
            .collect();
        (self.rebuilt, heads)
    }
}

/// The idempotency keys of usage events this process booked or found booked lately, by
/// [`StreamKey`], with their content hash; and whether a batch may assume that a key it
/// does not find here is new (checks in memory where they are safe).
///
/// What it holds is a fact for good: an event is never removed or changed, so a key once
/// booked stays booked with the same content, whoever booked it and whatever the heads. The
/// other direction is the assumption, and the database checks it: the unique index on
/// `events (idem_key, stream)` refuses the append of a key booked already, the attempt
/// fails as a conflict and its retry reads every key it does not find here
/// (`WriteTx::assume_keys_new`). Re-sends are mostly of what was just sent, so a batch
/// usually finds its duplicates here and reads no key. After a failed assumption (a client
/// re-sending an old file) the batches read their keys again for a while, twice as long
/// after each failure in a row (up to [`ASSUME_BACKOFF_MAX`] batches).
///
/// Bounded: at most `max` keys, in two generations; when the newer one holds `max / 2`
/// the older one is forgotten. 0: nothing is kept and every batch reads its keys.
#[derive(Debug)]
pub struct RecentKeys {
    max: usize,
    generations: std::sync::Mutex<[KeyHashes; 2]>,
    /// Batches still to read their keys after a failed assumption.
    backoff: std::sync::atomic::AtomicU32,
    /// Failed assumptions in a row.
    failures: std::sync::atomic::AtomicU32,
    /// Failed assumptions in all.
    failed_total: std::sync::atomic::AtomicU64,
}

/// The most batches that read their keys after failed assumptions in a row.
pub const ASSUME_BACKOFF_MAX: u32 = 1024;

impl RecentKeys {
    pub fn new(max: usize) -> RecentKeys {
        RecentKeys {
            max,
            generations: std::sync::Mutex::new([HashMap::new(), HashMap::new()]),
            backoff: std::sync::atomic::AtomicU32::new(0),
            failures: std::sync::atomic::AtomicU32::new(0),
            failed_total: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether a batch may assume the keys it does not find here are new; counts the
    /// batch against the backoff when not.
    pub(crate) fn may_assume(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.max > 0
            && self
                .backoff
                .fetch_update(Relaxed, Relaxed, |left| left.checked_sub(1))
                .is_err()
    }

    /// Of `keys`, the ones known booked, with their content hash; and the
    /// positions in `keys` of the others (copied only by a caller that reads them).
    pub fn known(&self, keys: &[StreamKey]) -> (KeyHashes, Vec<usize>) {
        let generations = self.generations.lock().expect("recent keys lock");
        let mut known = HashMap::new();
        let mut unknown = Vec::new();
        for (at, k) in keys.iter().enumerate() {
            match generations.iter().find_map(|g| g.get(k)) {
                Some(hash) => {
                    known.insert(k.clone(), hash.clone());
                }
                None => unknown.push(at),
            }
        }
        (known, unknown)
    }

    /// Notes keys booked (by a transaction that committed) with their content hash.
    pub(crate) fn remember(&self, keys: impl IntoIterator<Item = (StreamKey, Option<Vec<u8>>)>) {
        if self.max == 0 {
            return;
        }
        let mut generations = self.generations.lock().expect("recent keys lock");
        for (k, hash) in keys {
            if generations[0].len() >= self.max / 2 {
                let newer = std::mem::take(&mut generations[0]);
                generations[1] = newer;
            }
            generations[0].insert(k, hash);
        }
    }

    /// A batch's assumption held: its transaction committed.
    pub(crate) fn assumption_held(&self) {
        self.failures.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    /// A batch's assumption failed: a key it took for new was booked. The next batches read
    /// their keys, twice as many as after the previous failure in a row.
    pub(crate) fn assumption_failed(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let failures = self.failures.fetch_add(1, Relaxed).saturating_add(1);
        let batches = 1u32
            .checked_shl(failures.min(10))
            .unwrap_or(ASSUME_BACKOFF_MAX)
            .min(ASSUME_BACKOFF_MAX);
        self.backoff.store(batches, Relaxed);
        self.failed_total.fetch_add(1, Relaxed);
        crate::metrics::record_key_assumption_failed();
    }

    /// Failed assumptions since the process started.
    pub(crate) fn failed_total(&self) -> u64 {
        self.failed_total.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The rebuild marker `settle rebuild` leaves when it swaps the projection tables.
pub(crate) const REBUILT_SETTING: &str = "projections_rebuilt";

/// The marker of the latest `settle rebuild` (`None`: never rebuilt). What was read of the
/// projections under one marker is stale under another, even where no stream moved.
pub(crate) async fn rebuild_marker(conn: &mut Conn) -> Result<Option<String>, StoreError> {
    Ok(on!(conn, |c| sqlx::query_scalar(
        "SELECT value FROM ledger_settings WHERE name = $1"
    )
    .bind(REBUILT_SETTING)
    .fetch_optional(c)
    .await)?)
}

/// Takes the kept views of `streams` (locked by `tx`) that are valid at their heads; an
/// empty view for every other stream.
pub(crate) async fn take_views(
    tx: &mut WriteTx,
    store: &Store,
    streams: &[&str],
) -> Result<TakenViews, StoreError> {
    let rebuilt = rebuild_marker(tx.conn()).await?;
    let mut kept = store.usage_views.lock().expect("usage views lock");
    if kept.rebuilt != rebuilt {
        kept.clear();
        kept.rebuilt = rebuilt.clone();
    }
    let mut views = HashMap::with_capacity(streams.len());
    for stream in streams {
        let head = tx.head_seq_of(stream);
        let view = match kept.take(stream) {
            Some(kept) if Some(kept.head.seq) == head => kept.view,
            _ => StreamView::default(),
        };
        views.insert(stream.to_string(), view);
    }
    Ok(TakenViews { rebuilt, views })
}

impl Store {
    /// Keeps the views of a committed batch, each valid at the head its stream has after
    /// that batch; dropped when a rebuild marker newer than theirs was seen meanwhile.
    pub(crate) fn keep_usage_views(
        &self,
        rebuilt: Option<String>,
        views: Vec<(String, Head, StreamView)>,
    ) {
        let mut kept = self.usage_views.lock().expect("usage views lock");
        if kept.rebuilt != rebuilt || kept.streams_max == 0 {
            return;
        }
        if kept.views.len() + views.len() > kept.streams_max {
            kept.clear();
        }
        for (stream, head, view) in views.into_iter().take(kept.streams_max) {
            kept.keep(stream, head, view);
        }
    }
}

impl Store {
    /// Usage booking attempts of this process that took a booked key for new and were
    /// retried (`RecentKeys`; the metric `settle_usage_key_assumptions_failed_total`).
    pub fn usage_key_assumptions_failed(&self) -> u64 {
        self.recent_keys.failed_total()
    }

    /// Claims the heads this process kept with its views of `streams` (`keep_usage_views`),
    /// by stream; `None`, claiming nothing, unless it kept an unclaimed view of every one.
    /// Not checked against the ledger: see [`Store::begin_usage`].
    pub(crate) fn claim_kept_heads(&self, streams: &[&str]) -> Option<BTreeMap<String, Head>> {
        let mut kept = self.usage_views.lock().expect("usage views lock");
        let heads: BTreeMap<String, Head> = streams
            .iter()
            .map(|s| {
                let view = kept.views.get(*s).filter(|v| !v.claimed)?;
                Some((s.to_string(), view.head.clone()))
            })
            .collect::<Option<_>>()?;
        for stream in streams {
            if let Some(view) = kept.views.get_mut(*stream) {
                view.claimed = true;
            }
        }
        Some(heads)
    }
}

/// A registered GPU with its owner, model and the latest end of its booked usage.
#[derive(sqlx::FromRow)]
struct GpuFactsRow {
    gpu_id: String,
    provider_id: String,
    model: String,
    latest_end_ms: Option<i64>,
}

/// The registered GPUs among `gpus` (each a GPU's id and the stream of the event that names
/// it): owner, model, latest booked end (one backward primary-key step per GPU).
pub(crate) async fn gpu_facts(
    tx: &mut WriteTx,
    gpus: &[(&str, &str)],
) -> Result<HashMap<String, (String, GpuFacts)>, StoreError> {
    if gpus.is_empty() {
        return Ok(HashMap::new());
    }
    let found = if tx.is_citus() {
        gpu_facts_per_shard(tx, gpus).await?
    } else {
        let mut ids: Vec<&str> = gpus.iter().map(|(g, _)| *g).collect();
        ids.sort_unstable();
        ids.dedup();
        let from = tx.dialect().json_rows(1, ids.len());
        let sql = format!(
            "SELECT g.gpu_id, g.provider_id, g.model, \
             (SELECT s.ended_at_ms FROM usage_segments AS s WHERE s.gpu_id = g.gpu_id \
             ORDER BY s.started_at_ms DESC LIMIT 1) AS latest_end_ms \
             FROM {from} JOIN gpus AS g ON g.gpu_id = j.value ->> 0"
        );
        let rows: Vec<(&str,)> = ids.iter().map(|g| (*g,)).collect();
        on!(tx.conn(), |c| sqlx::query_as(&sql)
            .bind(json_rows_param(&rows))
            .fetch_all(c)
            .await)?
    };
    Ok(found
        .into_iter()
        .map(|g: GpuFactsRow| {
            let facts = GpuFacts {
                model: g.model,
                latest_end_ms: g.latest_end_ms,
            };
            (g.gpu_id, (g.provider_id, facts))
        })
        .collect())
}

/// A GPU and the stream of its owner.
#[derive(sqlx::FromRow)]
struct GpuStream {
    gpu_id: String,
    stream: String,
}

/// [`gpu_facts`] on Citus: per shard, the GPUs among `gpus` owned by the streams that name
/// them, on that shard (`citus::per_shard`); then a GPU found on none of the streams that
/// name it (another provider's, or unknown) is looked for on every shard, and its facts
/// read on its owner's.
async fn gpu_facts_per_shard(
    tx: &mut WriteTx,
    gpus: &[(&str, &str)],
) -> Result<Vec<GpuFactsRow>, StoreError> {
    let facts_sql = |n: usize| {
        format!(
            "SELECT g.gpu_id, g.provider_id, g.model, \
             (SELECT s.ended_at_ms FROM usage_segments AS s WHERE s.gpu_id = g.gpu_id AND s.stream = g.stream \
             AND s.stream = ANY($2) ORDER BY s.started_at_ms DESC LIMIT 1) AS latest_end_ms \
             FROM {} JOIN gpus AS g ON g.gpu_id = j.value ->> 0 AND g.stream = j.value ->> 1 \
             WHERE g.stream = ANY($2)",
            Dialect::Postgres.json_rows(1, n)
        )
    };
    let mut found: Vec<GpuFactsRow> = Vec::new();
    for (streams, group) in super::citus::per_shard(tx.conn(), gpus, |(_, s)| *s).await? {
        let mut rows: Vec<(&str, &str)> = group.iter().map(|(g, s)| (*g, *s)).collect();
        rows.sort_unstable();
        rows.dedup();
        let sql = facts_sql(rows.len());
        let on_shard: Vec<GpuFactsRow> = super::citus::on_pg!(tx.conn(), |c| sqlx::query_as(&sql)
            .bind(json_rows_param(&rows))
            .bind(&streams)
            .fetch_all(c)
            .await)?;
        found.extend(on_shard);
    }
    let mut missing: Vec<&str> = gpus
        .iter()
        .map(|(g, _)| *g)
        .filter(|g| !found.iter().any(|f| f.gpu_id == *g))
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if missing.is_empty() {
        return Ok(found);
    }
    let rows: Vec<(&str,)> = missing.iter().map(|g| (*g,)).collect();
    let owners: Vec<GpuStream> = on!(tx.conn(), |c| sqlx::query_as(&format!(
        "SELECT g.gpu_id, g.stream FROM {} JOIN gpus AS g ON g.gpu_id = j.value ->> 0",
        Dialect::Postgres.json_rows(1, rows.len())
    ))
    .bind(json_rows_param(&rows))
    .fetch_all(c)
    .await)?;
    for GpuStream { gpu_id, stream } in owners {
        let rows = [(gpu_id.as_str(), stream.as_str())];
        let sql = facts_sql(1);
        let owned: Vec<GpuFactsRow> = super::citus::on_pg!(tx.conn(), |c| sqlx::query_as(&sql)
            .bind(json_rows_param(&rows))
            .bind([stream.as_str()].as_slice())
            .fetch_all(c)
            .await)?;
        found.extend(owned);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOptions;

    fn key(n: usize) -> StreamKey {
        StreamKey::new("provider:p", format!("usage:e{n}"))
    }

    /// Recent keys are facts for good, held in two generations: at most `max` of them, the
    /// older half forgotten when the newer one is full; 0 keeps none.
    #[test]
    fn recent_keys_are_bounded_and_answer_with_their_content_hash() {
        let recent = RecentKeys::new(4);
        recent.remember((0..3).map(|n| (key(n), Some(vec![n as u8]))));
        let (known, unknown) = recent.known(&[key(0), key(2), key(9)]);
        assert_eq!(
            known,
            HashMap::from([(key(0), Some(vec![0])), (key(2), Some(vec![2]))])
        );
        assert_eq!(unknown, vec![2], "key(9), by its position");
        // e0, e1 went to the older generation when e2 came; e3 fills the newer one, and e4
        // forgets the older.
        recent.remember((3..5).map(|n| (key(n), None)));
        let (known, _) = recent.known(&(0..5).map(key).collect::<Vec<_>>());
        let mut kept: Vec<&str> = known.keys().map(|k| k.key.as_str()).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["usage:e2", "usage:e3", "usage:e4"]);
        let none = RecentKeys::new(0);
        none.remember([(key(0), None)]);
        assert_eq!(none.known(&[key(0)]).1.len(), 1, "0 keeps nothing");
        assert!(!none.may_assume(), "0: every batch reads its keys");
    }

    /// After a failed assumption the next batches read their keys: 2 after one failure, 4
    /// after two in a row, up to `ASSUME_BACKOFF_MAX`; an assumption that holds ends the run.
    #[test]
    fn failed_assumptions_back_off_twice_as_long_each_time_in_a_row() {
        let recent = RecentKeys::new(10);
        let reads_before_assuming = |recent: &RecentKeys| {
            let mut reads = 0;
            while !recent.may_assume() {
                reads += 1;
            }
            reads
        };
        assert!(recent.may_assume());
        recent.assumption_failed();
        assert_eq!(reads_before_assuming(&recent), 2);
        recent.assumption_failed();
        assert_eq!(reads_before_assuming(&recent), 4);
        recent.assumption_held();
        recent.assumption_failed();
        assert_eq!(reads_before_assuming(&recent), 2, "the run ended");
        for _ in 0..40 {
            recent.assumption_failed();
        }
        assert_eq!(reads_before_assuming(&recent), ASSUME_BACKOFF_MAX as usize);
        assert_eq!(recent.failed_total(), 43);
    }

    /// A view stays complete (a GPU it does not know has every segment on the tables) only
    /// while usage is booked on GPUs it holds: usage booked on another leaves an unfolded
    /// segment of a GPU the view does not know, and the next batch must fold before reading it.
    #[test]
    fn usage_booked_on_a_gpu_the_view_does_not_hold_makes_it_incomplete() {
        let facts = GpuFacts {
            model: "H100-80GB".into(),
            latest_end_ms: Some(10),
        };
        let mut view = StreamView::default();
        view.gpus.insert("g0".into(), facts);
        let mut views = TakenViews::default();
        views.views.insert("provider:p".into(), view);
        assert!(!views.segments_complete("provider:p"), "not folded yet");
        views.folded("provider:p");
        views.booked("provider:p", "g0", 20, [(10, 20)]);
        assert!(views.segments_complete("provider:p"));
        assert_eq!(views.views["provider:p"].gpus["g0"].latest_end_ms, Some(20));
        views.booked("provider:p", "g1", 30, [(25, 30)]);
        assert!(!views.segments_complete("provider:p"));
        assert!(!views.segments_complete("provider:other"), "no view");
    }

    /// The segments booked since a view's stream was last folded answer the overlap probe
    /// of a late event as the tables would after a fold: the latest segment of the GPU
    /// starting before the event ends, when it ends after the event starts; not known until
    /// the stream is folded.
    #[test]
    fn the_segments_booked_since_the_last_fold_answer_the_overlap_probe() {
        let mut views = TakenViews::default();
        views
            .views
            .insert("provider:p".into(), StreamView::default());
        views.booked("provider:p", "g0", 20, [(10, 20)]);
        assert!(!views.unfolded_known("provider:p"), "never folded");
        assert_eq!(
            views.unfolded_overlap("provider:p", "g0", 12, 14),
            None,
            "not known"
        );
        views.folded("provider:p");
        assert!(views.unfolded_known("provider:p"));
        // An event crossing midnight books two segments; another GPU's do not count.
        views.booked("provider:p", "g0", 100, [(40, 60), (60, 100)]);
        views.booked("provider:p", "g1", 50, [(0, 50)]);
        let probe = |s, t| views.unfolded_overlap("provider:p", "g0", s, t);
        assert_eq!(
            probe(50, 70),
            Some((60, 100)),
            "the later of two overlapping"
        );
        assert_eq!(probe(30, 45), Some((40, 60)));
        assert_eq!(probe(59, 60), Some((40, 60)), "ends where the next begins");
        assert_eq!(probe(20, 40), None, "a gap between segments");
        assert_eq!(probe(10, 20), None, "booked before the fold: on the tables");
        assert_eq!(probe(100, 110), None);
        assert_eq!(
            views.unfolded_overlap("provider:p", "g2", 50, 70),
            None,
            "no usage"
        );
        assert_eq!(
            views.unfolded_overlap("provider:other", "g0", 50, 70),
            None,
            "no view"
        );
        // A fold puts them on the tables.
        views.folded("provider:p");
        assert!(views.unfolded_known("provider:p"));
        assert_eq!(views.unfolded_overlap("provider:p", "g0", 50, 70), None);
    }

    /// The kept views hold at most `segments_max` unfolded segments in all: past it the views
    /// kept before forget theirs (their next late event folds), a view over it alone keeps
    /// none, and a view taken out frees its share.
    #[test]
    fn the_kept_views_hold_at_most_the_segment_limit() {
        let head = Head {
            seq: 1,
            hash: vec![1; 32],
            recorded_at_ms: 1_000,
        };
        let view = |segments: usize| {
            let booked = (0..segments as i64).map(|i| (i, i + 1)).collect();
            StreamView {
                unfolded: Some(HashMap::from([("g0".to_owned(), booked)])),
                ..StreamView::default()
            }
        };
        let mut kept = StreamViews::new(10, 5);
        let holds = |kept: &StreamViews, s: &str| kept.views[s].view.unfolded.is_some();
        kept.keep("a".into(), head.clone(), view(3));
        kept.keep("b".into(), head.clone(), view(3));
        assert!(!holds(&kept, "a"), "past the limit: forgotten");
        assert!(holds(&kept, "b"));
        assert_eq!(kept.segments_kept, 3);
        kept.keep("c".into(), head.clone(), view(2));
        assert!(holds(&kept, "b") && holds(&kept, "c"), "within it");
        assert_eq!(kept.segments_kept, 5);
        let b = kept.take("b").expect("kept");
        assert_eq!(kept.segments_kept, 2);
        kept.keep("b".into(), head.clone(), b.view);
        assert_eq!(kept.segments_kept, 5, "kept again");
        kept.keep("b".into(), head.clone(), view(1));
        assert_eq!(kept.segments_kept, 3, "replaced");
        kept.keep("d".into(), head, view(6));
        assert!(["a", "b", "c", "d"].iter().all(|s| !holds(&kept, s)));
        assert_eq!(kept.segments_kept, 0, "over the limit alone");
        kept.keep("a".into(), kept.views["a"].head.clone(), view(2));
        assert_eq!(kept.segments_kept, 2);
        kept.clear();
        assert_eq!(kept.segments_kept, 0);
    }

    /// A batch that begins on kept heads claims them (`Store::begin_usage`): a concurrent
    /// batch on any of the same streams finds one claimed and locks instead, until the
    /// views are kept again after a commit.
    #[tokio::test]
    async fn kept_heads_are_claimed_by_one_batch_until_kept_again() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("v.db").display());
        let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
        let head = |seq: i64| Head {
            seq,
            hash: vec![seq as u8; 32],
            recorded_at_ms: 1_000 + seq,
        };
        let view = |stream: &str, seq| (stream.to_owned(), head(seq), StreamView::default());
        store.keep_usage_views(None, vec![view("a", 3), view("b", 5)]);
        assert_eq!(store.claim_kept_heads(&["a", "c"]), None, "no view of c");
        let claimed = store.claim_kept_heads(&["a", "b"]).expect("both kept");
        assert_eq!(
            claimed,
            BTreeMap::from([("a".into(), head(3)), ("b".into(), head(5))])
        );
        assert_eq!(store.claim_kept_heads(&["b"]), None, "b is claimed");
        store.keep_usage_views(None, vec![view("b", 6)]);
        assert_eq!(
            store.claim_kept_heads(&["b"]),
            Some(BTreeMap::from([("b".into(), head(6))]))
        );
    }
}
