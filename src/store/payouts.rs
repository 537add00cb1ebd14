//! The `payouts` projection as typed rows.

use std::collections::HashMap;

use super::on;
use super::{Conn, Dialect, Store, StoreError, json_rows_param};
use crate::domain::event::Rail;
use crate::domain::ids::{PayoutId, ProviderId};
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

/// A `payouts` row as stored ([`PAYOUT_COLUMNS`], read by name).
#[derive(sqlx::FromRow)]
pub(super) struct PayoutRow {
    payout_id: String,
    provider_id: String,
    run_kind: String,
    run_key: String,
    rail: String,
    amount_micro_usdc: i64,
    amount_eur_cents: Option<i64>,
    eur_per_usd: Option<String>,
    method: String,
    status: String,
    hold_reason: Option<String>,
    failure_reason: Option<String>,
    reference: Option<String>,
    end_to_end_id: Option<String>,
    created_at_ms: i64,
    updated_at_ms: i64,
}

impl TryFrom<PayoutRow> for PayoutRecord {
    type Error = StoreError;

    fn try_from(r: PayoutRow) -> Result<PayoutRecord, StoreError> {
        Ok(PayoutRecord {
            rail: Rail::parse(&r.rail).map_err(corrupt)?,
            method: serde_json::from_str(&r.method).map_err(corrupt)?,
            status: PayoutStatus::parse(&r.status).map_err(corrupt)?,
            payout_id: PayoutId::parse(&r.payout_id).map_err(corrupt)?,
            provider_id: ProviderId::parse(&r.provider_id).map_err(corrupt)?,
            run_kind: r.run_kind,
            run_key: r.run_key,
            amount_micro_usdc: r.amount_micro_usdc,
            amount_eur_cents: r.amount_eur_cents,
            eur_per_usd: r.eur_per_usd,
            hold_reason: r.hold_reason,
            failure_reason: r.failure_reason,
            reference: r.reference,
            end_to_end_id: r.end_to_end_id,
            created_at_ms: r.created_at_ms,
            updated_at_ms: r.updated_at_ms,
        })
    }
}

/// Payout rows as records.
pub(super) fn records(rows: Vec<PayoutRow>) -> Result<Vec<PayoutRecord>, StoreError> {
    rows.into_iter().map(PayoutRecord::try_from).collect()
}

pub async fn load(conn: &mut Conn, payout_id: &str) -> Result<Option<PayoutRecord>, StoreError> {
    let row: Option<PayoutRow> = on!(&mut *conn, |c| sqlx::query_as(&format!(
        "SELECT {PAYOUT_COLUMNS} FROM payouts WHERE payout_id = $1"
    ))
    .bind(payout_id)
    .fetch_optional(c)
    .await)?;
    row.map(PayoutRecord::try_from).transpose()
}

/// The payouts of `payout_ids` that exist, by id: one statement for all of them.
pub(crate) async fn load_many(
    conn: &mut Conn,
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
    let rows: Vec<PayoutRow> = on!(&mut *conn, |c| sqlx::query_as(&sql)
        .bind(json_rows_param(&rows))
        .fetch_all(c)
        .await)?;
    for payout in records(rows)? {
        out.insert(payout.payout_id.to_string(), payout);
    }
    Ok(out)
}

/// Reads one payout.
pub async fn payout(store: &Store, payout_id: &str) -> Result<Option<PayoutRecord>, StoreError> {
    let pool = store.db();
    let mut conn = pool.acquire().await?;
    load(&mut conn, payout_id).await
}

/// The payouts of a provider, oldest first.
pub async fn provider_payouts(
    store: &Store,
    provider_id: &str,
) -> Result<Vec<PayoutRecord>, StoreError> {
    let pool = store.db();
    let rows: Vec<PayoutRow> = on!(pool, |c| {
        sqlx::query_as(&format!(
        "SELECT {PAYOUT_COLUMNS} FROM payouts WHERE provider_id = $1 ORDER BY created_at_ms, payout_id"
    ))
    .bind(provider_id)
    .fetch_all(c)
    .await
    })?;
    records(rows)
}
