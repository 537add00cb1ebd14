//! Usage ingestion (SPEC §4): exactly-once booking of metered usage.
//!
//! A batch is validated event by event (one bad event never rejects the others: ids,
//! instants, the booking window, the content hash of the normalised event), grouped by
//! provider, and each provider's events are appended to that provider's stream inside a
//! transaction that holds the stream's write lock (on SQLite, the one writer); several
//! providers share one transaction, up to `ledger.ingest_streams_per_tx_max`, retried whole
//! on a conflict. The idempotency check, the overlap check and the append are atomic, so an
//! event is counted once even with concurrent senders, retries and crashes.
//!
//! Each new event is decided by the pure `domain::usage::decide` (its GPU's owner, overlap
//! with booked usage, the rate band, the price book and the tier; priced per UTC day by
//! `domain::pricing`) and appended with no projection op of its own: its segments and
//! aggregates are folded behind it by the projector (`store::fold`).
//!
//! What a batch reads (one statement each, in `store::usage` and `store::keys`), and what its
//! process keeps between batches so that the next one reads less:
//! - Heads: when the process kept a view of every stream of the batch, the transaction
//!   begins on the heads kept with them, unread (`Store::begin_usage`). An append claims
//!   `(stream, head + 1)`, which the primary key refuses if another writer moved the stream;
//!   at commit the streams left without an append are checked against their stored heads,
//!   except those whose answers relied on no view (`WriteTx::head_not_relied_on`: re-sends,
//!   answered from their booked keys, which stay booked with their content). A failed
//!   attempt has taken the views out, so its retry reads the heads.
//! - Keys: those the process knows booked (`RecentKeys`) answer their re-sends unread; on a
//!   first attempt the others may be taken for new (`WriteTx::assume_keys_new`), which the
//!   unique index on `events (idem_key, stream)` checks at the append, and the keys of the
//!   events then rejected are read after all (a re-send overlaps itself); a retry reads them.
//! - Facts: a stream's view keeps its GPUs with their latest booked end and its tier and
//!   rate history, valid only at the head it was read at and dropped when `settle rebuild`
//!   leaves a new `projections_rebuilt` marker. What a view lacks is read (`gpu_facts`,
//!   `pricing_contexts`); an event starting before its GPU's latest booked end is probed
//!   for overlap (`overlapping_segments`).
//! - Segments: before reading them, the batch folds the streams it locked up to their heads
//!   (`WriteTx::fold_locked_streams`), except a stream whose view is `segments_complete` (for
//!   a GPU read) or holds the segments booked since its last fold (for an overlap probe:
//!   `TakenViews::unfolded_overlap`). An overlap with usage the projector has not folded yet
//!   is rejected as it would be after a fold.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::{Actor, Ledger, LedgerError, content_hash};
use crate::domain::DomainError;
use crate::domain::bands::RateBand;
use crate::domain::event::*;
use crate::domain::ids::{EventId, GpuId, ProviderId, RentalId};
use crate::domain::money::Rate;
use crate::domain::pricing::FeeBook;
use crate::domain::time::{MS_PER_DAY, format_ms, parse_rfc3339_ms};
use crate::domain::usage::{self, RecordUsage, UsageState};
use crate::metrics::record_usage_step;
use crate::store::Head;
use crate::store::keys::{KeyHashes, StreamKey};
use crate::store::usage::{
    self as store_usage, GpuFacts, GpuOwner, OverlapProbe, PricingContext, StreamView, TakenViews,
};
use crate::store::{NewEvent, Store, WriteTx};

/// A usage event as received (SPEC §4 `usage.recorded` v1 input), fields still unparsed.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct UsageInput {
    pub event_id: Option<String>,
    pub provider_id: Option<String>,
    pub gpu_id: Option<String>,
    #[serde(default)]
    pub rental_id: Option<String>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    #[serde(default)]
    pub rate_usdc_per_hour: Option<String>,
}

/// What a sender may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SenderScope {
    /// An agent's token: only this provider's GPUs, never a rate.
    Ingest { provider_id: String },
    /// The platform's metering pipeline: any GPU, may send the agreed rate.
    Metering,
    /// An operator.
    Admin,
}

impl SenderScope {
    /// Whether this sender may report usage of `provider_id`, with a rate when `with_rate`.
    fn allows(&self, provider_id: &str, with_rate: bool) -> Result<(), DomainError> {
        match self {
            SenderScope::Ingest { provider_id: own } => {
                if own != provider_id {
                    return Err(DomainError::new(
                        "forbidden_provider",
                        format!("this token reports for provider {own} only"),
                    ));
                }
                if with_rate {
                    return Err(DomainError::new(
                        "rate_not_allowed",
                        "an ingest token may not send rate_usdc_per_hour; only metering and admin tokens may",
                    ));
                }
            }
            SenderScope::Metering | SenderScope::Admin => {}
        }
        Ok(())
    }
}

/// Per-event result of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UsageResult {
    Accepted {
        event_id: String,
    },
    Duplicate {
        event_id: String,
    },
    Rejected {
        event_id: Option<String>,
        code: &'static str,
        message: String,
    },
}

impl UsageResult {
    pub fn status(&self) -> &'static str {
        match self {
            UsageResult::Accepted { .. } => "accepted",
            UsageResult::Duplicate { .. } => "duplicate",
            UsageResult::Rejected { .. } => "rejected",
        }
    }
    pub fn event_id(&self) -> Option<&str> {
        match self {
            UsageResult::Accepted { event_id } | UsageResult::Duplicate { event_id } => {
                Some(event_id)
            }
            UsageResult::Rejected { event_id, .. } => event_id.as_deref(),
        }
    }
    fn rejected(event_id: Option<String>, e: DomainError) -> UsageResult {
        UsageResult::Rejected {
            event_id,
            code: e.code,
            message: e.message,
        }
    }
}

/// A usage event after stateless validation.
#[derive(Clone, Debug)]
struct Parsed {
    /// Position among all the events of the group (requests one after the other).
    index: usize,
    /// Which request of the group sent it (its actor).
    request: usize,
    event_id: EventId,
    provider_id: ProviderId,
    /// The provider's stream and the event's idempotency key on it, built once: the batch
    /// looks them up several times per event.
    at: StreamKey,
    gpu_id: GpuId,
    rental_id: Option<RentalId>,
    started_at_ms: i64,
    ended_at_ms: i64,
    rate: Option<Rate>,
    hash: Vec<u8>,
    /// Outside the booking window (`in_future`, `too_late`): rejected unless it turns out
    /// to be a re-send of a booked event.
    window_error: Option<DomainError>,
}

impl Parsed {
    /// The command the usage aggregate decides.
    fn command(&self) -> RecordUsage<'_> {
        RecordUsage {
            event_id: &self.event_id,
            provider_id: &self.provider_id,
            gpu_id: &self.gpu_id,
            rental_id: self.rental_id.as_ref(),
            started_at_ms: self.started_at_ms,
            ended_at_ms: self.ended_at_ms,
            rate: self.rate,
        }
    }
}

/// Why an event falls outside the booking window at `now_ms` (`in_future`, `too_late`).
///
/// An agent's (`ingest`) token reports what its machine saw lately: its window reaches back
/// `agent_lateness_days_max` days, the metering pipeline's and an operator's
/// `lateness_days_max` (an agent token that leaked cannot book months of past usage).
fn window_error(
    c: &crate::config::LedgerConfig,
    scope: &SenderScope,
    started_at_ms: i64,
    ended_at_ms: i64,
    now_ms: i64,
) -> Option<DomainError> {
    let (lateness_days_max, whose) = match scope {
        SenderScope::Ingest { .. } => (
            c.agent_lateness_days_max.min(c.lateness_days_max),
            "an agent token's maximum lateness",
        ),
        SenderScope::Metering | SenderScope::Admin => (c.lateness_days_max, "the maximum lateness"),
    };
    if ended_at_ms > now_ms + c.future_tolerance_ms {
        Some(DomainError::new(
            "in_future",
            format!(
                "ended_at {} is more than {} ms ahead of now {}",
                format_ms(ended_at_ms),
                c.future_tolerance_ms,
                format_ms(now_ms)
            ),
        ))
    } else if started_at_ms < now_ms - lateness_days_max * MS_PER_DAY {
        Some(DomainError::new(
            "too_late",
            format!("started_at is older than {whose} of {lateness_days_max} days"),
        ))
    } else {
        None
    }
}

fn required<'a>(value: &'a Option<String>, field: &str) -> Result<&'a str, DomainError> {
    value
        .as_deref()
        .ok_or_else(|| DomainError::new("missing_field", format!("{field} is required")))
}

impl Ledger {
    fn parse_usage(
        &self,
        (index, request): (usize, usize),
        input: &UsageInput,
        scope: &SenderScope,
        now_ms: i64,
    ) -> Result<Parsed, DomainError> {
        let event_id = EventId::parse(required(&input.event_id, "event_id")?)?;
        let provider_id = ProviderId::parse(required(&input.provider_id, "provider_id")?)?;
        let gpu_id = GpuId::parse(required(&input.gpu_id, "gpu_id")?)?;
        let rental_id = input
            .rental_id
            .as_deref()
            .map(RentalId::parse)
            .transpose()?;
        let started_at_ms = parse_rfc3339_ms(required(&input.started_at, "started_at")?)?;
        let ended_at_ms = parse_rfc3339_ms(required(&input.ended_at, "ended_at")?)?;
        let rate = input
            .rate_usdc_per_hour
            .as_deref()
            .map(Rate::parse)
            .transpose()?;
        scope.allows(provider_id.as_str(), rate.is_some())?;
        let c = &self.config;
        if ended_at_ms <= started_at_ms {
            return Err(DomainError::new(
                "invalid_interval",
                "ended_at must be after started_at",
            ));
        }
        if ended_at_ms - started_at_ms > c.interval_ms_max {
            return Err(DomainError::new(
                "interval_too_long",
                format!("interval longer than {} ms", c.interval_ms_max),
            ));
        }
        // The time window depends on the clock, not on the event: an event booked before
        // with the same content is a `duplicate` whatever its age, so this is decided
        // after the idempotency look-up.
        let window_error = window_error(c, scope, started_at_ms, ended_at_ms, now_ms);
        let normalised = format!(
            "usage.v1|{}|{}|{}|{}|{}|{}|{}",
            event_id,
            provider_id,
            gpu_id,
            rental_id.as_ref().map(|r| r.as_str()).unwrap_or(""),
            started_at_ms,
            ended_at_ms,
            rate.map(|r| r.to_canonical()).unwrap_or_default()
        );
        Ok(Parsed {
            index,
            request,
            at: StreamKey::new(
                provider_stream(provider_id.as_str()),
                usage_key(event_id.as_str()),
            ),
            event_id,
            provider_id,
            gpu_id,
            rental_id,
            started_at_ms,
            ended_at_ms,
            rate,
            hash: content_hash(&normalised),
            window_error,
        })
    }

    /// Books a batch of usage events; returns one result per input, in input order.
    pub async fn ingest_usage(
        &self,
        inputs: &[UsageInput],
        scope: &SenderScope,
        actor: &Actor,
    ) -> Result<Vec<UsageResult>, LedgerError> {
        let request = UsageRequest {
            inputs,
            scope,
            actor,
        };
        let mut results = self.ingest_requests(&[request]).await?;
        Ok(results.pop().unwrap_or_default())
    }

    /// Books several batches as one (group commit, `ledger::group`): the events of every
    /// batch, in batch order, at one instant, in one transaction per
    /// `ingest_streams_per_tx_max` providers; returns each batch's results in input order.
    /// An event is decided as if its batch had been booked alone after the batches before
    /// it: a key sent by two batches is booked for the first.
    pub async fn ingest_requests(
        &self,
        requests: &[UsageRequest<'_>],
    ) -> Result<Vec<Vec<UsageResult>>, LedgerError> {
        let now_ms = self.now_ms();
        let started = Instant::now();
        let total: usize = requests.iter().map(|r| r.inputs.len()).sum();
        let mut results: Vec<Option<UsageResult>> = vec![None; total];
        let mut by_provider: BTreeMap<String, Vec<Parsed>> = BTreeMap::new();
        let mut index = 0;
        for (request, r) in requests.iter().enumerate() {
            for input in r.inputs {
                match self.parse_usage((index, request), input, r.scope, now_ms) {
                    Ok(p) => by_provider
                        .entry(p.provider_id.as_str().to_owned())
                        .or_default()
                        .push(p),
                    Err(e) => {
                        results[index] = Some(UsageResult::rejected(input.event_id.clone(), e));
                    }
                }
                index += 1;
            }
        }
        let actors: Vec<&Actor> = requests.iter().map(|r| r.actor).collect();
        let groups: Vec<(String, Vec<Parsed>)> = by_provider.into_iter().collect();
        record_usage_step("validate", started);
        for chunk in groups.chunks(self.config.ingest_streams_per_tx_max.max(1)) {
            for (index, result) in self.book_usage(chunk, &actors, now_ms).await? {
                results[index] = Some(result);
            }
        }
        let mut results = results
            .into_iter()
            .map(|r| r.expect("every event has a result"));
        let mut out = Vec::with_capacity(requests.len());
        for r in requests {
            let batch: Vec<UsageResult> = results.by_ref().take(r.inputs.len()).collect();
            for result in &batch {
                let code = match result {
                    UsageResult::Rejected { code, .. } => Some(*code),
                    _ => None,
                };
                crate::metrics::record_usage(result.status(), code);
            }
            out.push(batch);
        }
        Ok(out)
    }
}

/// One batch of a group: its events, what its sender may send, and who sent it.
#[derive(Clone, Copy)]
pub struct UsageRequest<'a> {
    pub inputs: &'a [UsageInput],
    pub scope: &'a SenderScope,
    pub actor: &'a Actor,
}

impl Ledger {
    /// Books the events of some providers in one transaction over their streams, retrying
    /// the whole attempt (its reads included) when another writer got there first.
    async fn book_usage(
        &self,
        groups: &[(String, Vec<Parsed>)],
        actors: &[&Actor],
        now_ms: i64,
    ) -> Result<Vec<(usize, UsageResult)>, LedgerError> {
        let streams: Vec<String> = groups.iter().map(|(p, _)| provider_stream(p)).collect();
        let names: Vec<&str> = streams.iter().map(String::as_str).collect();
        let band = self.config.rate_band();
        let store = &self.store;
        // Only a first attempt may take the keys it does not know for new: a retry reads
        // them (the failure may have been that assumption).
        let first = AtomicBool::new(true);
        let (results, ((rebuilt, views), keys)) =
            crate::ledger::write_stream!(self, usage_streams(&names), |tx| {
                let assume = first.swap(false, Ordering::Relaxed);
                book_groups(tx, store, groups, &band, actors, now_ms, assume).await
            })?;
        // Committed: the next batch may decide on these views while the heads stay, and on
        // these keys for good.
        store.keep_usage_views(rebuilt, views);
        store.recent_keys.remember(keys);
        Ok(results)
    }
}

/// The views a batch read or kept, each with the head of its stream after the batch, and
/// the rebuild marker they were read under (`Store::keep_usage_views`).
type BatchViews = (Option<String>, Vec<(String, Head, StreamView)>);

/// The keys a batch found booked or booked, with their content hash.
type BatchKeys = Vec<(StreamKey, Option<Vec<u8>>)>;

/// Books the events of each provider of `groups` on its stream, all inside `tx`, which
/// holds the write locks of all their streams and commits only at the heads it began on
/// (`Store::begin_usage`): the idempotency check, the overlap check and the append are
/// atomic. The reads (`store::usage`) are done for all providers at
/// once, and only for what the process's kept views of their streams do not know at the
/// heads locked; each new event is then decided by [`usage::decide`] against them and the
/// events booked before it in this batch.
///
/// An event's own rate must lie in `band` around the price-book rate of its GPU's model at
/// its `started_at`: the price books come with the tier histories in each provider's view,
/// so the check costs one in-memory look-up per event.
async fn book_groups(
    tx: &mut WriteTx,
    store: &Store,
    groups: &[(String, Vec<Parsed>)],
    band: &RateBand,
    actors: &[&Actor],
    now_ms: i64,
    assume_keys: bool,
) -> Result<(Vec<(usize, UsageResult)>, (BatchViews, BatchKeys)), LedgerError> {
    let all: Vec<&Parsed> = groups.iter().flat_map(|(_, events)| events).collect();
    let started = Instant::now();
    let mut state = BatchState::read(tx, store, &all, assume_keys).await?;
    let mut keys: BatchKeys = state.booked.clone().into_iter().collect();
    // Events whose key was taken for new without a read, by their answer's position.
    let mut unconfirmed: Vec<(usize, &Parsed)> = Vec::new();
    record_usage_step("read", started);
    let started = Instant::now();
    let mut out = Vec::with_capacity(all.len());
    // The intervals this batch books, per GPU.
    let mut intervals: HashMap<&str, Vec<(i64, i64)>> = HashMap::new();
    for (provider_id, events) in groups {
        let stream = provider_stream(provider_id);
        tx.use_stream(&stream);
        // Keys booked by this batch on this stream; events keep their input order within
        // a provider, so the first occurrence wins.
        let mut in_batch: HashMap<String, Vec<u8>> = HashMap::new();
        // Whether an answer for this stream was decided on its view (kept at a head the
        // commit must then confirm, unless an append to the stream confirms it).
        let mut decided_on_view = false;
        for e in events {
            let key = &e.at.key;
            if let Some(stored) = state.booked_before(e, &in_batch) {
                out.push((e.index, resent(e, stored.as_deref())));
                continue;
            }
            if state.keys_assumed {
                // Taken for new unread: if rejected, its key is read after all (below).
                unconfirmed.push((out.len(), e));
            }
            if let Some(error) = &e.window_error {
                let result =
                    UsageResult::rejected(Some(e.event_id.as_str().to_owned()), error.clone());
                out.push((e.index, result));
                continue;
            }
            decided_on_view = true;
            let gpu_intervals = intervals.entry(e.gpu_id.as_str()).or_default();
            let overlap = state.overlaps.get(&e.index).copied().or_else(|| {
                gpu_intervals
                    .iter()
                    .find(|(s, t)| *s < e.ended_at_ms && *t > e.started_at_ms)
                    .copied()
            });
            let recorded = match state.decide(e, &stream, overlap, band) {
                Ok(recorded) => recorded,
                Err(error) => {
                    out.push((
                        e.index,
                        UsageResult::rejected(Some(e.event_id.as_str().to_owned()), error),
                    ));
                    continue;
                }
            };
            let segments = recorded.segments.iter();
            state.views.booked(
                &stream,
                &e.gpu_id,
                e.ended_at_ms,
                segments.map(|s| (s.started_at_ms, s.ended_at_ms)),
            );
            tx.append(NewEvent {
                body: EventBody::UsageRecorded(recorded),
                actor: actors[e.request].0.clone(),
                recorded_at_ms: now_ms,
                idem_key: Some(key.clone()),
                content_hash: Some(e.hash.clone()),
            });
            keys.push((e.at.clone(), Some(e.hash.clone())));
            gpu_intervals.push((e.started_at_ms, e.ended_at_ms));
            in_batch.insert(key.clone(), e.hash.clone());
            let accepted = UsageResult::Accepted {
                event_id: e.event_id.as_str().to_owned(),
            };
            out.push((e.index, accepted));
        }
        if !decided_on_view {
            // Every answer came from the keys read under the stream's lock (a key once
            // booked stays booked, with its content) or from the event alone.
            tx.head_not_relied_on(&stream);
        }
    }
    keys.extend(confirm_rejected(tx, &mut out, unconfirmed).await?);
    record_usage_step("decide", started);
    Ok((out, (state.views.at_heads(tx), keys)))
}

/// Of the events whose key a batch took for new without a read (`unconfirmed`, by the
/// position of their answer in `out`), the rejected ones may be re-sends of booked events (a
/// re-send overlaps itself): their keys are read, and a booked one is answered as the re-send
/// it is. (An appended one is checked by the unique index.) Returns the keys found booked.
async fn confirm_rejected(
    tx: &mut WriteTx,
    out: &mut [(usize, UsageResult)],
    mut unconfirmed: Vec<(usize, &Parsed)>,
) -> Result<KeyHashes, LedgerError> {
    unconfirmed.retain(|(at, _)| matches!(out[*at].1, UsageResult::Rejected { .. }));
    if unconfirmed.is_empty() {
        return Ok(KeyHashes::new());
    }
    let keys: Vec<StreamKey> = unconfirmed.iter().map(|(_, e)| e.at.clone()).collect();
    let found = crate::store::keys::booked_keys(tx.conn(), &keys).await?;
    if !found.is_empty() {
        tx.assumption_failed();
    }
    for (at, e) in unconfirmed {
        if let Some(stored) = found.get(&e.at) {
            out[at].1 = resent(e, stored.as_deref());
        }
    }
    Ok(found)
}

/// The answer to an event whose key is booked already (with content hash `stored`): a
/// duplicate when the content is the same, else a `conflict`.
fn resent(e: &Parsed, stored: Option<&[u8]>) -> UsageResult {
    if stored == Some(e.hash.as_slice()) {
        return UsageResult::Duplicate {
            event_id: e.event_id.as_str().to_owned(),
        };
    }
    UsageResult::rejected(
        Some(e.event_id.as_str().to_owned()),
        DomainError::new(
            "conflict",
            format!(
                "event_id {} was already booked with different content",
                e.event_id
            ),
        ),
    )
}

/// What a batch's decisions read of the ledger, at the chain heads its transaction locked.
struct BatchState {
    /// The batch's keys booked already, with their content hash.
    booked: KeyHashes,
    /// The batch's registered GPUs: owner and model.
    gpus: HashMap<String, GpuOwner>,
    /// Booked usage overlapping a candidate, by the candidate's index.
    overlaps: HashMap<usize, (i64, i64)>,
    /// By provider stream: its GPUs and, for the providers with candidates, its pricing
    /// context; kept for the next batch once this one committed.
    views: TakenViews,
    fees: FeeBook,
    /// The keys not in `booked` were taken for new without a read
    /// (`WriteTx::assume_keys_new`).
    keys_assumed: bool,
}

impl BatchState {
    /// Decides new event `e` of `stream` on what the batch read; `overlap`: the booked or
    /// batch usage of its GPU it overlaps.
    fn decide(
        &self,
        e: &Parsed,
        stream: &str,
        overlap: Option<(i64, i64)>,
        band: &RateBand,
    ) -> Result<UsageRecorded, DomainError> {
        let no_context = PricingContext::default();
        let context = self.views.context(stream).unwrap_or(&no_context);
        let given = UsageState {
            gpu: self
                .gpus
                .get(e.gpu_id.as_str())
                .map(|g| (g.provider_id.as_str(), g.model.as_str())),
            overlap,
            tiers: &context.tiers,
            prices: &context.prices,
            fees: &self.fees,
            band,
        };
        usage::decide(&given, &e.command())
    }

    /// The content hash `e`'s key was booked with, on the ledger or earlier in this batch
    /// (`in_batch`, this stream's keys booked so far); `None` when it is new.
    fn booked_before(
        &self,
        e: &Parsed,
        in_batch: &HashMap<String, Vec<u8>>,
    ) -> Option<Option<Vec<u8>>> {
        self.booked
            .get(&e.at)
            .cloned()
            .or_else(|| in_batch.get(&e.at.key).cloned().map(Some))
    }

    /// Reads what the batch's decisions need. The keys the process knows booked
    /// (`RecentKeys`) are not read; with `assume_keys`, the others are taken for new
    /// without a read, as the database's unique index will check (`WriteTx::assume_keys_new`).
    async fn read(
        tx: &mut WriteTx,
        store: &Store,
        all: &[&Parsed],
        assume_keys: bool,
    ) -> Result<BatchState, LedgerError> {
        // Idempotency: a key is scoped to its provider's stream (SPEC §4): the same
        // event_id under two providers is two events.
        let keys: Vec<StreamKey> = all.iter().map(|e| e.at.clone()).collect();
        let recent = &store.recent_keys;
        let (mut booked, unknown) = recent.known(&keys);
        let mut keys_assumed = false;
        if !unknown.is_empty() {
            if assume_keys && recent.may_assume() {
                tx.assume_keys_new(recent.clone());
                crate::metrics::record_keys_assumed(unknown.len());
                keys_assumed = true;
            } else {
                let unread: Vec<StreamKey> = unknown.iter().map(|&at| keys[at].clone()).collect();
                booked.extend(crate::store::keys::booked_keys(tx.conn(), &unread).await?);
            }
        }
        let (mut views, gpus) = read_views(tx, store, all).await?;
        // New events on their provider's own GPUs: the ones that may be booked.
        let candidates: Vec<&Parsed> = all
            .iter()
            .copied()
            .filter(|e| {
                e.window_error.is_none()
                    && !booked.contains_key(&e.at)
                    && gpus
                        .get(e.gpu_id.as_str())
                        .is_some_and(|g| g.provider_id == e.provider_id)
            })
            .collect();
        // Only an event starting before its GPU's latest booked end may overlap booked
        // usage: those are looked up in the index, the others need no read.
        let late: Vec<&Parsed> = candidates
            .iter()
            .copied()
            .filter(|e| {
                view_gpu(&views, e)
                    .and_then(|g| g.latest_end_ms)
                    .is_some_and(|end| e.started_at_ms < end)
            })
            .collect();
        let overlaps = late_overlaps(tx, &mut views, &late).await?;
        let unpriced: Vec<&str> = distinct(
            candidates
                .iter()
                .filter(|e| views.context(&e.at.stream).is_none())
                .map(|e| e.provider_id.as_str()),
        );
        if !unpriced.is_empty() {
            for (provider_id, context) in store_usage::pricing_contexts(tx, &unpriced).await? {
                views.priced(&provider_stream(&provider_id), context);
            }
        }
        let fees = if candidates.is_empty() {
            FeeBook::default()
        } else {
            store_usage::fee_book(tx).await?
        };
        Ok(BatchState {
            booked,
            gpus,
            overlaps,
            views,
            fees,
            keys_assumed,
        })
    }
}

/// The booked usage each of the `late` events (starting before their GPU's latest booked
/// end) overlaps, by event index: the segment the backward probe finds
/// (`overlapping_segments`), on the tables and among the segments the views kept.
async fn late_overlaps(
    tx: &mut WriteTx,
    views: &mut TakenViews,
    late: &[&Parsed],
) -> Result<HashMap<usize, (i64, i64)>, LedgerError> {
    let probes: Vec<OverlapProbe> = late
        .iter()
        .map(|e| OverlapProbe {
            index: e.index,
            stream: &e.at.stream,
            gpu_id: &e.gpu_id,
            started_at_ms: e.started_at_ms,
            ended_at_ms: e.ended_at_ms,
        })
        .collect();
    // The segments the probes read are folded behind the append. A stream whose view
    // holds the segments booked since its last fold (`StreamView::unfolded`) is probed
    // on the tables and those; the others (a candidate's GPU is its own provider's) are
    // folded up to the heads locked first (one read of their checkpoints when
    // `read_views` folded them already).
    let unknown = distinct(
        late.iter()
            .map(|e| e.at.stream.as_str())
            .filter(|stream| !views.unfolded_known(stream)),
    );
    if !unknown.is_empty() {
        tx.fold_locked_streams(unknown.iter().copied()).await?;
        for stream in &unknown {
            views.folded(stream);
        }
    }
    let mut overlaps = store_usage::overlapping_segments(tx, &probes).await?;
    for e in late {
        let unfolded =
            views.unfolded_overlap(&e.at.stream, &e.gpu_id, e.started_at_ms, e.ended_at_ms);
        if let Some(segment) = unfolded {
            // The later-starting of the two is the segment the probe would find on the
            // tables had the stream been folded (booked segments never overlap).
            let found = overlaps.entry(e.index).or_insert(segment);
            if segment.0 > found.0 {
                *found = segment;
            }
        }
    }
    Ok(overlaps)
}

/// What the views of `e`'s provider know of `e`'s GPU.
fn view_gpu<'v>(views: &'v TakenViews, e: &Parsed) -> Option<&'v GpuFacts> {
    views
        .views
        .get(&e.at.stream)
        .and_then(|v| v.gpus.get(e.gpu_id.as_str()))
}

/// The views of the batch's provider streams (kept ones where valid) completed with the
/// GPUs they did not know, read with their owner and latest booked end; and the owner and
/// model of every registered GPU the batch names.
async fn read_views(
    tx: &mut WriteTx,
    store: &Store,
    all: &[&Parsed],
) -> Result<(TakenViews, HashMap<String, GpuOwner>), LedgerError> {
    let mut names: Vec<&str> = all.iter().map(|e| e.at.stream.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut views = store_usage::take_views(tx, store, &names).await?;
    let unviewed: Vec<&Parsed> = all
        .iter()
        .copied()
        .filter(|e| view_gpu(&views, e).is_none())
        .collect();
    let mut unknown: Vec<(&str, &str)> = unviewed
        .iter()
        .map(|e| (e.gpu_id.as_str(), e.at.stream.as_str()))
        .collect();
    unknown.sort_unstable();
    unknown.dedup();
    let mut gpus: HashMap<String, GpuOwner> = HashMap::new();
    // A GPU's latest booked end is read from its segments, which the projector folds
    // behind the append (`ProjOp::is_deferred`): the streams of the events naming such a
    // GPU are folded up to their heads first, unless their view says the tables hold every
    // segment of the GPUs it does not know (`StreamView::segments_complete`: a provider
    // whose GPUs reach its view over several batches); the streams locked for other events, such
    // as re-sends alone, stay with the projector. Its owner's stream is locked, and complete
    // on the tables, when it matters: only then do the facts reach a view
    // (`TakenViews::learned`) or decide an event.
    let folded: HashSet<&str> = unviewed
        .iter()
        .map(|e| e.at.stream.as_str())
        .filter(|stream| !views.segments_complete(stream))
        .collect();
    if !folded.is_empty() {
        tx.fold_locked_streams(folded.iter().copied()).await?;
        for stream in &folded {
            views.folded(stream);
        }
    }
    for (gpu_id, (provider_id, facts)) in store_usage::gpu_facts(tx, &unknown).await? {
        // The owner's stream, when its view is complete (folded by this transaction or
        // kept so), is at its locked head: the facts are those of that head. (A GPU named
        // by another provider's event tells the owner's view nothing.)
        let owner_stream = provider_stream(&provider_id);
        if views.segments_complete(&owner_stream) {
            views.learned(&owner_stream, &gpu_id, &facts);
        }
        let owner = GpuOwner {
            provider_id,
            model: facts.model,
        };
        gpus.insert(gpu_id, owner);
    }
    for e in all {
        if let Some(facts) = view_gpu(&views, e) {
            let owner = GpuOwner {
                provider_id: e.provider_id.as_str().to_owned(),
                model: facts.model.clone(),
            };
            gpus.insert(e.gpu_id.as_str().to_owned(), owner);
        }
    }
    Ok((views, gpus))
}

/// The distinct values of `items`, in no particular order.
fn distinct<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    items.collect::<HashSet<_>>().into_iter().collect()
}

fn usage_key(event_id: &str) -> String {
    format!("usage:{event_id}")
}
