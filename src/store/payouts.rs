//! The `payouts` projection as typed rows.

use sqlx::{AnyConnection, AnyPool, Row};

use std::collections::HashMap;

use super::{Dialect, StoreError, json_rows_param};
use crate::domain::event::Rail;
use crate::domain::payout::PayoutStatus;

pub use crate::domain::payout::PayoutRecord;

pub(super) const PAYOUT_COLUMNS: &str = "payout_id, provider_id, run_kind, run_key, rail, amount_micro_usdc, amount_eur_cents, eur_per_usd, method, status, hold_reason, failure_reason, reference, end_to_end_id, created_at_ms, updated_at_ms";

/// [`PAYOUT_COLUMNS`] of the table aliased `alias`.
pub(super) fn payout_columns_of(alias: &str) -> String {
    PAYOUT_COLUMNS
        .split(", ")
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptRow(e.to_string())
}

pub(super) fn payout_from_row(r: &sqlx::any::AnyRow) -> Result<PayoutRecord, StoreError> {
    let method: String = r.try_get(8)?;
    Ok(PayoutRecord {
        payout_id: r.try_get(0)?,
        provider_id: r.try_get(1)?,
        run_kind: r.try_get(2)?,
        run_key: r.try_get(3)?,
        rail: Rail::parse(&r.try_get::<String, _>(4)?).map_err(corrupt)?,
        amount_micro_usdc: r.try_get(5)?,
        amount_eur_cents: r.try_get(6)?,
        eur_per_usd: r.try_get(7)?,
        method: serde_json::from_str(&method).map_err(corrupt)?,
        status: PayoutStatus::parse(&r.try_get::<String, _>(9)?).map_err(corrupt)?,
        hold_reason: r.try_get(10)?,
        failure_reason: r.try_get(11)?,
        reference: r.try_get(12)?,
        end_to_end_id: r.try_get(13)?,
        created_at_ms: r.try_get(14)?,
        updated_at_ms: r.try_get(15)?,
    })
}

pub async fn load(
    conn: &mut AnyConnection,
    payout_id: &str,
) -> Result<Option<PayoutRecord>, StoreError> {
    let row = sqlx::query(&format!(
        "SELECT {PAYOUT_COLUMNS} FROM payouts WHERE payout_id = $1"
    ))
    .bind(payout_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(payout_from_row).transpose()
}

/// The payouts of `payout_ids` that exist, by id: one statement for all of them.
pub async fn load_many(
    conn: &mut AnyConnection,
    payout_ids: &[&str],
) -> Result<HashMap<String, PayoutRecord>, StoreError> {
    let mut out = HashMap::with_capacity(payout_ids.len());
    if payout_ids.is_empty() {
        return Ok(out);
    }
    let rows: Vec<(&str,)> = payout_ids.iter().map(|p| (*p,)).collect();
    let sql = format!(
        "SELECT {} FROM {} JOIN payouts AS p ON p.payout_id = j.value ->> 0",
        payout_columns_of("p"),
        Dialect::of(conn).json_rows(1, payout_ids.len())
    );
    for r in sqlx::query(&sql)
        .bind(json_rows_param(&rows))
        .fetch_all(&mut *conn)
        .await?
    {
        let payout = payout_from_row(&r)?;
        out.insert(payout.payout_id.clone(), payout);
    }
    Ok(out)
}

/// Reads one payout.
pub async fn payout(pool: &AnyPool, payout_id: &str) -> Result<Option<PayoutRecord>, StoreError> {
    let mut conn = pool.acquire().await?;
    load(&mut conn, payout_id).await
}

/// The payouts of a provider, oldest first.
pub async fn provider_payouts(
    pool: &AnyPool,
    provider_id: &str,
) -> Result<Vec<PayoutRecord>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT {PAYOUT_COLUMNS} FROM payouts WHERE provider_id = $1 ORDER BY created_at_ms, payout_id"
    ))
    .bind(provider_id)
    .fetch_all(pool)
    .await?;
    rows.iter().map(payout_from_row).collect()
}
