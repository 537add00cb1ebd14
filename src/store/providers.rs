//! The provider registry and the price and fee schedules as the projections hold them.

use std::collections::HashMap;

use super::on;
use super::{Conn, Dialect, StoreError, json_rows_param};
use crate::domain::event::{PayoutMethod, ProviderStatus, Schedule, Tier};
use crate::domain::ids::ProviderId;

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptRow(e.to_string())
}

pub use crate::domain::provider::ProviderRecord;

/// The provider columns [`ProviderRow`] reads.
const PROVIDER_COLUMNS: &str = "provider_id, name, email, tier, schedule, status, payout_method, method_set_at_ms, method_invalid, registered_at_ms";

/// A `providers` row as stored (read by name).
#[derive(sqlx::FromRow)]
struct ProviderRow {
    provider_id: String,
    name: String,
    email: String,
    tier: String,
    schedule: String,
    status: String,
    payout_method: Option<String>,
    method_set_at_ms: Option<i64>,
    method_invalid: i64,
    registered_at_ms: i64,
}

impl TryFrom<ProviderRow> for ProviderRecord {
    type Error = StoreError;

    fn try_from(r: ProviderRow) -> Result<ProviderRecord, StoreError> {
        Ok(ProviderRecord {
            tier: Tier::parse(&r.tier).map_err(corrupt)?,
            schedule: Schedule::parse(&r.schedule).map_err(corrupt)?,
            status: ProviderStatus::parse(&r.status).map_err(corrupt)?,
            payout_method: r
                .payout_method
                .map(|m| serde_json::from_str::<PayoutMethod>(&m))
                .transpose()
                .map_err(corrupt)?,
            provider_id: ProviderId::parse(&r.provider_id).map_err(corrupt)?,
            name: r.name,
            email: r.email,
            method_set_at_ms: r.method_set_at_ms,
            method_invalid: r.method_invalid != 0,
            registered_at_ms: r.registered_at_ms,
        })
    }
}

/// The registered providers among `provider_ids`, by id: one statement for a whole batch
/// (a payout run decides its candidates many per transaction).
pub(crate) async fn load_providers(
    conn: &mut Conn,
    provider_ids: &[&str],
) -> Result<HashMap<ProviderId, ProviderRecord>, StoreError> {
    let mut out = HashMap::with_capacity(provider_ids.len());
    if provider_ids.is_empty() {
        return Ok(out);
    }
    let rows: Vec<(&str,)> = provider_ids.iter().map(|p| (*p,)).collect();
    let sql = format!(
        "SELECT {} FROM {} JOIN providers AS p ON p.provider_id = j.value ->> 0",
        PROVIDER_COLUMNS
            .split(", ")
            .map(|c| format!("p.{c}"))
            .collect::<Vec<_>>()
            .join(", "),
        Dialect::of(conn).json_rows(1, provider_ids.len())
    );
    let rows: Vec<ProviderRow> = on!(&mut *conn, |c| sqlx::query_as(&sql)
        .bind(json_rows_param(&rows))
        .fetch_all(c)
        .await)?;
    for row in rows {
        let provider = ProviderRecord::try_from(row)?;
        out.insert(provider.provider_id.clone(), provider);
    }
    Ok(out)
}

/// One provider (inside a write transaction, or on any connection).
pub(crate) async fn load_provider(
    conn: &mut Conn,
    provider_id: &str,
) -> Result<Option<ProviderRecord>, StoreError> {
    let row: Option<ProviderRow> = on!(&mut *conn, |c| sqlx::query_as(&format!(
        "SELECT {PROVIDER_COLUMNS} FROM providers WHERE provider_id = $1"
    ))
    .bind(provider_id)
    .fetch_optional(c)
    .await)?;
    row.map(ProviderRecord::try_from).transpose()
}

/// The rate text a provider's price book has for `model` from exactly `effective_from_ms`.
pub(crate) async fn rate_from(
    conn: &mut Conn,
    provider_id: &str,
    model: &str,
    effective_from_ms: i64,
) -> Result<Option<String>, StoreError> {
    Ok(on!(&mut *conn, |c| {
        sqlx::query_scalar(
        "SELECT rate_usdc_per_hour FROM rates WHERE provider_id = $1 AND model = $2 AND effective_from_ms = $3",
    )
    .bind(provider_id)
    .bind(model)
    .bind(effective_from_ms)
    .fetch_optional(c)
    .await
    })?)
}

/// The price book a `rate.set` is judged by (SPEC §9): the provider's own rate for `model`
/// in force at `at_ms`, and the rates of other providers for the model in force by then,
/// the latest `sample_max` of them (the index `rates_by_model` reads them).
pub async fn price_book(
    conn: &mut Conn,
    provider_id: &str,
    model: &str,
    at_ms: i64,
    sample_max: i64,
) -> Result<(Option<String>, Vec<String>), StoreError> {
    let own: Option<String> = on!(&mut *conn, |c| {
        sqlx::query_scalar(
        "SELECT rate_usdc_per_hour FROM rates WHERE provider_id = $1 AND model = $2 AND effective_from_ms <= $3 ORDER BY effective_from_ms DESC LIMIT 1",
    )
    .bind(provider_id)
    .bind(model)
    .bind(at_ms)
    .fetch_optional(c)
    .await
    })?;
    let others: Vec<String> = on!(&mut *conn, |c| {
        sqlx::query_scalar(
        "SELECT rate_usdc_per_hour FROM rates WHERE model = $1 AND effective_from_ms <= $2 AND provider_id <> $3 ORDER BY effective_from_ms DESC LIMIT $4",
    )
    .bind(model)
    .bind(at_ms)
    .bind(provider_id)
    .bind(sample_max)
    .fetch_all(c)
    .await
    })?;
    Ok((own, others))
}

/// The fee (bps) a tier's schedule has in force at `at_ms`, if the schedule sets one.
pub(crate) async fn fee_in_force(
    conn: &mut Conn,
    tier: Tier,
    at_ms: i64,
) -> Result<Option<i64>, StoreError> {
    Ok(on!(&mut *conn, |c| {
        sqlx::query_scalar(
        "SELECT fee_bps FROM fee_schedules WHERE tier = $1 AND effective_from_ms <= $2 ORDER BY effective_from_ms DESC LIMIT 1",
    )
    .bind(tier.as_str())
    .bind(at_ms)
    .fetch_optional(c)
    .await
    })?)
}

/// The fee (bps) a tier's schedule has from exactly `effective_from_ms`.
pub(crate) async fn fee_from(
    conn: &mut Conn,
    tier: Tier,
    effective_from_ms: i64,
) -> Result<Option<i64>, StoreError> {
    Ok(on!(&mut *conn, |c| sqlx::query_scalar(
        "SELECT fee_bps FROM fee_schedules WHERE tier = $1 AND effective_from_ms = $2",
    )
    .bind(tier.as_str())
    .bind(effective_from_ms)
    .fetch_optional(c)
    .await)?)
}
