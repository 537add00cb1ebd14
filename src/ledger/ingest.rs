//! Usage ingestion (SPEC §4): exactly-once booking of metered usage.
//!
//! A batch is validated event by event (one bad event never rejects the others), grouped by
//! provider, and each provider's events are booked in one transaction on that provider's
//! stream: the idempotency check, the overlap check and the append are atomic, so an event
//! is counted once even with concurrent senders, retries and crashes.

use std::collections::{BTreeMap, HashMap, HashSet};

use sqlx::Row;

use super::{Actor, Ledger, LedgerError, content_hash};
use crate::domain::DomainError;
use crate::domain::event::*;
use crate::domain::ids::{EventId, GpuId, ProviderId, RentalId};
use crate::domain::money::Rate;
use crate::domain::pricing::{FeeBook, PriceBook, TierHistory, price_interval};
use crate::domain::time::{MS_PER_DAY, format_ms, parse_rfc3339_ms};
use crate::store::{NewEvent, WriteTx};

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
    index: usize,
    event_id: String,
    provider_id: String,
    gpu_id: String,
    rental_id: Option<String>,
    started_at_ms: i64,
    ended_at_ms: i64,
    rate: Option<Rate>,
    hash: Vec<u8>,
}

fn required<'a>(value: &'a Option<String>, field: &str) -> Result<&'a str, DomainError> {
    value
        .as_deref()
        .ok_or_else(|| DomainError::new("missing_field", format!("{field} is required")))
}

impl Ledger {
    fn parse_usage(
        &self,
        index: usize,
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
        match scope {
            SenderScope::Ingest { provider_id: own } => {
                if own != provider_id.as_str() {
                    return Err(DomainError::new(
                        "forbidden_provider",
                        format!("this token reports for provider {own} only"),
                    ));
                }
                if rate.is_some() {
                    return Err(DomainError::new(
                        "rate_not_allowed",
                        "an ingest token may not send rate_usdc_per_hour; only metering and admin tokens may",
                    ));
                }
            }
            SenderScope::Metering | SenderScope::Admin => {}
        }
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
        if ended_at_ms > now_ms + c.future_tolerance_ms {
            return Err(DomainError::new(
                "in_future",
                format!(
                    "ended_at {} is more than {} ms ahead of now {}",
                    format_ms(ended_at_ms),
                    c.future_tolerance_ms,
                    format_ms(now_ms)
                ),
            ));
        }
        if started_at_ms < now_ms - c.lateness_days_max * MS_PER_DAY {
            return Err(DomainError::new(
                "too_late",
                format!(
                    "started_at is older than the maximum lateness of {} days",
                    c.lateness_days_max
                ),
            ));
        }
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
            event_id: event_id.to_string(),
            provider_id: provider_id.to_string(),
            gpu_id: gpu_id.to_string(),
            rental_id: rental_id.map(|r| r.to_string()),
            started_at_ms,
            ended_at_ms,
            rate,
            hash: content_hash(&normalised),
        })
    }

    /// Books a batch of usage events; returns one result per input, in input order.
    pub async fn ingest_usage(
        &self,
        inputs: &[UsageInput],
        scope: &SenderScope,
        actor: &Actor,
    ) -> Result<Vec<UsageResult>, LedgerError> {
        let now_ms = self.now_ms();
        let mut results: Vec<Option<UsageResult>> = vec![None; inputs.len()];
        let mut by_provider: BTreeMap<String, Vec<Parsed>> = BTreeMap::new();
        for (i, input) in inputs.iter().enumerate() {
            match self.parse_usage(i, input, scope, now_ms) {
                Ok(p) => by_provider
                    .entry(p.provider_id.clone())
                    .or_default()
                    .push(p),
                Err(e) => results[i] = Some(UsageResult::rejected(input.event_id.clone(), e)),
            }
        }
        for (provider_id, events) in by_provider {
            let booked = crate::write_stream!(self, &provider_stream(&provider_id), |tx| {
                    book_provider_usage(tx, &provider_id, &events, actor, now_ms).await
                })?;
            for (index, result) in booked {
                results[index] = Some(result);
            }
        }
        let results: Vec<UsageResult> = results
            .into_iter()
            .map(|r| r.expect("every event has a result"))
            .collect();
        crate::metrics::record_usage(&results);
        Ok(results)
    }
}

/// In-statement lists are chunked to stay far below bind-parameter limits.
const IN_LIST_MAX: usize = 900;

fn in_list(start: usize, count: usize) -> String {
    (start..start + count)
        .map(|i| format!("${}", i + 1))
        .collect::<Vec<_>>()
        .join(",")
}

/// The pricing context of one provider, read inside its stream's transaction.
struct ProviderContext {
    tiers: TierHistory,
    prices: PriceBook,
    fees: FeeBook,
}

pub(crate) async fn load_fee_book(tx: &mut WriteTx) -> Result<FeeBook, LedgerError> {
    let mut fees = FeeBook::default();
    let rows = sqlx::query("SELECT tier, effective_from_ms, fee_bps FROM fee_schedules")
        .fetch_all(tx.conn())
        .await?;
    for r in rows {
        let tier = Tier::parse(&r.try_get::<String, _>(0)?)?;
        let fee = crate::domain::money::FeeBps::new(r.try_get(2)?)?;
        fees.set(tier, r.try_get(1)?, fee);
    }
    Ok(fees)
}

async fn load_context(tx: &mut WriteTx, provider_id: &str) -> Result<ProviderContext, LedgerError> {
    let mut tiers = TierHistory::default();
    let rows = sqlx::query("SELECT from_ms, tier FROM provider_tiers WHERE provider_id = $1")
        .bind(provider_id)
        .fetch_all(tx.conn())
        .await?;
    for r in rows {
        tiers.set(r.try_get(0)?, Tier::parse(&r.try_get::<String, _>(1)?)?);
    }
    let mut prices = PriceBook::default();
    let rows = sqlx::query(
        "SELECT model, effective_from_ms, rate_usdc_per_hour FROM rates WHERE provider_id = $1",
    )
    .bind(provider_id)
    .fetch_all(tx.conn())
    .await?;
    for r in rows {
        prices.set(
            &r.try_get::<String, _>(0)?,
            r.try_get(1)?,
            Rate::parse(&r.try_get::<String, _>(2)?)?,
        );
    }
    let fees = load_fee_book(tx).await?;
    Ok(ProviderContext {
        tiers,
        prices,
        fees,
    })
}

async fn book_provider_usage(
    tx: &mut WriteTx,
    provider_id: &str,
    events: &[Parsed],
    actor: &Actor,
    now_ms: i64,
) -> Result<Vec<(usize, UsageResult)>, LedgerError> {
    let mut out = Vec::with_capacity(events.len());
    // Idempotency: which keys are booked already, with what content.
    let mut booked: HashMap<String, Option<Vec<u8>>> = HashMap::new();
    for chunk in events.chunks(IN_LIST_MAX) {
        let sql = format!(
            "SELECT idem_key, content_hash FROM events WHERE idem_key IN ({})",
            in_list(0, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for e in chunk {
            q = q.bind(format!("usage:{}", e.event_id));
        }
        for r in q.fetch_all(tx.conn()).await? {
            booked.insert(r.try_get(0)?, r.try_get(1)?);
        }
    }
    // The GPUs named by the batch.
    let gpu_ids: Vec<&str> = events
        .iter()
        .map(|e| e.gpu_id.as_str())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let mut gpus: HashMap<String, (String, String)> = HashMap::new();
    for chunk in gpu_ids.chunks(IN_LIST_MAX) {
        let sql = format!(
            "SELECT gpu_id, provider_id, model FROM gpus WHERE gpu_id IN ({})",
            in_list(0, chunk.len())
        );
        let mut q = sqlx::query(&sql);
        for g in chunk {
            q = q.bind(*g);
        }
        for r in q.fetch_all(tx.conn()).await? {
            gpus.insert(r.try_get(0)?, (r.try_get(1)?, r.try_get(2)?));
        }
    }
    // Booked intervals of those GPUs in the batch's time window (overlap check).
    let window_start = events.iter().map(|e| e.started_at_ms).min().unwrap_or(0);
    let window_end = events.iter().map(|e| e.ended_at_ms).max().unwrap_or(0);
    let mut intervals: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
    let own_gpus: Vec<&str> = gpu_ids
        .iter()
        .copied()
        .filter(|g| gpus.get(*g).is_some_and(|(p, _)| p == provider_id))
        .collect();
    for chunk in own_gpus.chunks(IN_LIST_MAX) {
        let sql = format!(
            "SELECT gpu_id, started_at_ms, ended_at_ms FROM usage_segments WHERE gpu_id IN ({}) AND started_at_ms < ${} AND ended_at_ms > ${}",
            in_list(0, chunk.len()),
            chunk.len() + 1,
            chunk.len() + 2
        );
        let mut q = sqlx::query(&sql);
        for g in chunk {
            q = q.bind(*g);
        }
        for r in q
            .bind(window_end)
            .bind(window_start)
            .fetch_all(tx.conn())
            .await?
        {
            intervals
                .entry(r.try_get(0)?)
                .or_default()
                .push((r.try_get(1)?, r.try_get(2)?));
        }
    }
    let mut context: Option<ProviderContext> = None;
    let mut in_batch: HashMap<String, Vec<u8>> = HashMap::new();
    for e in events {
        let key = format!("usage:{}", e.event_id);
        let seen = booked
            .get(&key)
            .cloned()
            .or_else(|| in_batch.get(&key).cloned().map(Some));
        if let Some(stored) = seen {
            let result = if stored.as_deref() == Some(e.hash.as_slice()) {
                UsageResult::Duplicate {
                    event_id: e.event_id.clone(),
                }
            } else {
                UsageResult::rejected(
                    Some(e.event_id.clone()),
                    DomainError::new(
                        "conflict",
                        format!(
                            "event_id {} was already booked with different content",
                            e.event_id
                        ),
                    ),
                )
            };
            out.push((e.index, result));
            continue;
        }
        let reject = |code: &'static str, message: String| {
            (
                e.index,
                UsageResult::rejected(Some(e.event_id.clone()), DomainError::new(code, message)),
            )
        };
        let Some((gpu_provider, model)) = gpus.get(&e.gpu_id) else {
            out.push(reject("unknown_gpu", format!("no GPU {}", e.gpu_id)));
            continue;
        };
        if gpu_provider != provider_id {
            out.push(reject(
                "gpu_provider_mismatch",
                format!("GPU {} does not belong to provider {provider_id}", e.gpu_id),
            ));
            continue;
        }
        let gpu_intervals = intervals.entry(e.gpu_id.clone()).or_default();
        if let Some((s, t)) = gpu_intervals
            .iter()
            .find(|(s, t)| *s < e.ended_at_ms && *t > e.started_at_ms)
        {
            out.push(reject(
                "overlapping_usage",
                format!(
                    "GPU {} already has usage booked in [{}, {})",
                    e.gpu_id,
                    format_ms(*s),
                    format_ms(*t)
                ),
            ));
            continue;
        }
        if context.is_none() {
            context = Some(load_context(tx, provider_id).await?);
        }
        let ctx = context.as_ref().expect("loaded");
        let (rate, rate_source) = match e.rate {
            Some(rate) => (rate, "event"),
            None => match ctx.prices.rate_at(model, e.started_at_ms) {
                Some(rate) => (rate, "price_book"),
                None => {
                    out.push(reject(
                        "no_rate",
                        format!(
                            "no rate for model {model} of provider {provider_id} at {}",
                            format_ms(e.started_at_ms)
                        ),
                    ));
                    continue;
                }
            },
        };
        let Some(_) = ctx.tiers.tier_at(e.started_at_ms) else {
            out.push(reject(
                "unknown_provider",
                format!("no provider {provider_id}"),
            ));
            continue;
        };
        let segments = price_interval(e.started_at_ms, e.ended_at_ms, rate, |at| {
            let tier = ctx.tiers.tier_at(at).expect("provider has a tier");
            ctx.fees.fee_at(tier, at)
        });
        tx.append(NewEvent {
            body: EventBody::UsageRecorded(UsageRecorded {
                event_id: e.event_id.clone(),
                provider_id: provider_id.to_owned(),
                gpu_id: e.gpu_id.clone(),
                model: model.clone(),
                rental_id: e.rental_id.clone(),
                started_at_ms: e.started_at_ms,
                ended_at_ms: e.ended_at_ms,
                rate_usdc_per_hour: rate.to_canonical(),
                rate_source: rate_source.to_owned(),
                segments: segments
                    .iter()
                    .map(|s| Segment {
                        started_at_ms: s.started_at_ms,
                        ended_at_ms: s.ended_at_ms,
                        fee_bps: s.fee_bps,
                        gross_micro_usdc: s.gross_micro_usdc,
                        fee_micro_usdc: s.fee_micro_usdc,
                        net_micro_usdc: s.net_micro_usdc,
                    })
                    .collect(),
            }),
            actor: actor.0.clone(),
            recorded_at_ms: now_ms,
            idem_key: Some(key.clone()),
            content_hash: Some(e.hash.clone()),
        });
        gpu_intervals.push((e.started_at_ms, e.ended_at_ms));
        in_batch.insert(key, e.hash.clone());
        out.push((
            e.index,
            UsageResult::Accepted {
                event_id: e.event_id.clone(),
            },
        ));
    }
    Ok(out)
}
