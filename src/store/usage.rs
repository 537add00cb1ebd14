//! The reads of usage booking, inside the booking's transaction (it holds the write locks
//! of the streams it books on): each is one statement with the batch as one JSON parameter
//! (see [`super::Dialect::json_rows`]), so its text never changes and it is planned once
//! per connection.

use std::collections::HashMap;

use super::on;
use super::{Dialect, StoreError, WriteTx, json_rows_param};
use crate::domain::event::Tier;
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

/// The registered GPUs among `gpu_ids`, by id.
pub async fn gpu_owners(
    tx: &mut WriteTx,
    gpu_ids: &[&str],
) -> Result<HashMap<String, GpuOwner>, StoreError> {
    let from = tx.dialect().json_rows(1, gpu_ids.len());
    let sql = format!(
        "SELECT g.gpu_id, g.provider_id, g.model FROM {from} JOIN gpus AS g ON g.gpu_id = j.value ->> 0"
    );
    let rows: Vec<(&str,)> = gpu_ids.iter().map(|g| (*g,)).collect();
    let found: Vec<GpuRow> = on!(tx.conn(), |c| sqlx::query_as(&sql)
        .bind(json_rows_param(&rows))
        .fetch_all(c)
        .await)?;
    Ok(found
        .into_iter()
        .map(|g| {
            let owner = GpuOwner {
                provider_id: g.provider_id,
                model: g.model,
            };
            (g.gpu_id, owner)
        })
        .collect())
}

#[derive(sqlx::FromRow)]
struct GpuRow {
    gpu_id: String,
    provider_id: String,
    model: String,
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
pub async fn overlapping_segments(
    tx: &mut WriteTx,
    probes: &[OverlapProbe<'_>],
) -> Result<HashMap<usize, (i64, i64)>, StoreError> {
    let mut overlaps = HashMap::new();
    if probes.is_empty() {
        return Ok(overlaps);
    }
    let rows: Vec<(usize, &str, i64, i64)> = probes
        .iter()
        .map(|p| (p.index, p.gpu_id, p.ended_at_ms, p.started_at_ms))
        .collect();
    let dialect = tx.dialect();
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
    for o in found {
        let index = usize::try_from(o.probe).map_err(corrupt)?;
        overlaps
            .entry(index)
            .or_insert((o.started_at_ms, o.ended_at_ms));
    }
    Ok(overlaps)
}

/// The platform's fee schedules.
pub async fn fee_book(tx: &mut WriteTx) -> Result<FeeBook, StoreError> {
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
pub async fn pricing_contexts(
    tx: &mut WriteTx,
    providers: &[&str],
) -> Result<HashMap<String, PricingContext>, StoreError> {
    let mut out: HashMap<String, PricingContext> = providers
        .iter()
        .map(|p| (p.to_string(), PricingContext::default()))
        .collect();
    let rows = json_rows_param(&providers.iter().map(|p| (*p,)).collect::<Vec<_>>());
    let from = tx.dialect().json_rows(1, providers.len());
    let sql = format!(
        "SELECT t.provider_id, t.from_ms, t.seq, t.tier FROM {from} JOIN provider_tiers AS t ON t.provider_id = j.value ->> 0"
    );
    let tiers: Vec<TierRow> = on!(tx.conn(), |c| sqlx::query_as(&sql)
        .bind(&rows)
        .fetch_all(c)
        .await)?;
    for t in tiers {
        if let Some(c) = out.get_mut(&t.provider_id) {
            let tier = Tier::parse(&t.tier).map_err(corrupt)?;
            c.tiers.set(t.from_ms, t.seq, tier);
        }
    }
    let sql = format!(
        "SELECT r.provider_id, r.model, r.effective_from_ms, r.rate_usdc_per_hour FROM {from} JOIN rates AS r ON r.provider_id = j.value ->> 0"
    );
    let rates: Vec<RateRow> = on!(tx.conn(), |c| sqlx::query_as(&sql)
        .bind(&rows)
        .fetch_all(c)
        .await)?;
    for r in rates {
        if let Some(c) = out.get_mut(&r.provider_id) {
            let rate = Rate::parse(&r.rate_usdc_per_hour).map_err(corrupt)?;
            c.prices.set(&r.model, r.effective_from_ms, rate);
        }
    }
    Ok(out)
}
