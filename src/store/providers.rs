//! The provider registry and the price and fee schedules as the projections hold them.

use std::collections::HashMap;

use sqlx::{AnyConnection, Row};

use super::{Dialect, StoreError, json_rows_param};
use crate::domain::event::{PayoutMethod, ProviderStatus, Schedule, Tier};

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptRow(e.to_string())
}

pub use crate::domain::provider::ProviderRecord;

fn provider_from_row(r: &sqlx::any::AnyRow) -> Result<ProviderRecord, StoreError> {
    let method: Option<String> = r.try_get(6)?;
    let payout_method = method
        .map(|m| serde_json::from_str::<PayoutMethod>(&m))
        .transpose()
        .map_err(corrupt)?;
    Ok(ProviderRecord {
        provider_id: r.try_get(0)?,
        name: r.try_get(1)?,
        email: r.try_get(2)?,
        tier: Tier::parse(&r.try_get::<String, _>(3)?).map_err(corrupt)?,
        schedule: Schedule::parse(&r.try_get::<String, _>(4)?).map_err(corrupt)?,
        status: ProviderStatus::parse(&r.try_get::<String, _>(5)?).map_err(corrupt)?,
        payout_method,
        method_set_at_ms: r.try_get(7)?,
        method_invalid: r.try_get::<i64, _>(8)? != 0,
        registered_at_ms: r.try_get(9)?,
    })
}

/// The registered providers among `provider_ids`, by id: one statement for a whole batch
/// (a payout run decides its candidates many per transaction).
pub async fn load_providers(
    conn: &mut AnyConnection,
    provider_ids: &[&str],
) -> Result<HashMap<String, ProviderRecord>, StoreError> {
    let mut out = HashMap::with_capacity(provider_ids.len());
    if provider_ids.is_empty() {
        return Ok(out);
    }
    let rows: Vec<(&str,)> = provider_ids.iter().map(|p| (*p,)).collect();
    let sql = format!(
        "SELECT p.provider_id, p.name, p.email, p.tier, p.schedule, p.status, p.payout_method, p.method_set_at_ms, p.method_invalid, p.registered_at_ms \
         FROM {} JOIN providers AS p ON p.provider_id = j.value ->> 0",
        Dialect::of(conn).json_rows(1, provider_ids.len())
    );
    for r in sqlx::query(&sql)
        .bind(json_rows_param(&rows))
        .fetch_all(&mut *conn)
        .await?
    {
        let provider = provider_from_row(&r)?;
        out.insert(provider.provider_id.clone(), provider);
    }
    Ok(out)
}

/// One provider (inside a write transaction, or on any connection).
pub async fn load_provider(
    conn: &mut AnyConnection,
    provider_id: &str,
) -> Result<Option<ProviderRecord>, StoreError> {
    let row = sqlx::query(
        "SELECT provider_id, name, email, tier, schedule, status, payout_method, method_set_at_ms, method_invalid, registered_at_ms FROM providers WHERE provider_id = $1",
    )
    .bind(provider_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|r| provider_from_row(&r)).transpose()
}

/// The rate text a provider's price book has for `model` from exactly `effective_from_ms`.
pub async fn rate_from(
    conn: &mut AnyConnection,
    provider_id: &str,
    model: &str,
    effective_from_ms: i64,
) -> Result<Option<String>, StoreError> {
    let row = sqlx::query(
        "SELECT rate_usdc_per_hour FROM rates WHERE provider_id = $1 AND model = $2 AND effective_from_ms = $3",
    )
    .bind(provider_id)
    .bind(model)
    .bind(effective_from_ms)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|r| r.try_get(0)).transpose()?)
}

/// The fee (bps) a tier's schedule has from exactly `effective_from_ms`.
pub async fn fee_from(
    conn: &mut AnyConnection,
    tier: Tier,
    effective_from_ms: i64,
) -> Result<Option<i64>, StoreError> {
    let row =
        sqlx::query("SELECT fee_bps FROM fee_schedules WHERE tier = $1 AND effective_from_ms = $2")
            .bind(tier.as_str())
            .bind(effective_from_ms)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(row.map(|r| r.try_get(0)).transpose()?)
}
