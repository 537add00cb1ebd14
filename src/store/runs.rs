//! What payout runs read of the projections: the figures of SPEC §5's `available`, the FX
//! rate, the runs' decisions and completions, and the candidates. A run is named by its
//! kind and key (`weekly`, `2026-11-02`).

use std::collections::{BTreeMap, HashSet};

use futures::TryStreamExt;
use serde::Serialize;
use sqlx::{AnyConnection, AnyPool, Row};

use super::StoreError;
use crate::domain::event::{accounts, provider_stream};
use crate::domain::payout::PayoutStatus;

/// The sum of a provider's payable lines booked on days before `day` (a day number).
pub async fn payable_recorded_before(
    conn: &mut AnyConnection,
    provider_id: &str,
    day: i64,
) -> Result<i64, StoreError> {
    Ok(sqlx::query(
        "SELECT CAST(COALESCE(SUM(amount_micro_usdc), 0) AS BIGINT) FROM payable_recorded WHERE provider_id = $1 AND day < $2",
    )
    .bind(provider_id)
    .bind(day)
    .fetch_one(&mut *conn)
    .await?
    .try_get(0)?)
}

/// The sum of a provider's payouts that were not undone (failed, cancelled, returned).
pub async fn payouts_not_undone(
    conn: &mut AnyConnection,
    provider_id: &str,
) -> Result<i64, StoreError> {
    Ok(sqlx::query(&format!(
        "SELECT CAST(COALESCE(SUM(amount_micro_usdc), 0) AS BIGINT) FROM payouts WHERE provider_id = $1 AND status NOT IN ({})",
        PayoutStatus::sql_list(PayoutStatus::is_undone)
    ))
    .bind(provider_id)
    .fetch_one(&mut *conn)
    .await?
    .try_get(0)?)
}

/// The balance of a provider's payable account (0 before its first line).
pub async fn payable_balance(
    conn: &mut AnyConnection,
    provider_id: &str,
) -> Result<i64, StoreError> {
    let row = sqlx::query(
        "SELECT balance_micro_usdc FROM account_balances WHERE owner = $1 AND account = $2",
    )
    .bind(provider_stream(provider_id))
    .bind(accounts::payable(provider_id))
    .fetch_optional(&mut *conn)
    .await?;
    Ok(match row {
        Some(r) => r.try_get(0)?,
        None => 0,
    })
}

/// The latest FX rate recorded at or before `now_ms`: `(recorded_at_ms, eur_per_usd text)`.
pub async fn latest_fx_rate(
    conn: &mut AnyConnection,
    now_ms: i64,
) -> Result<Option<(i64, String)>, StoreError> {
    let row = sqlx::query(
        "SELECT recorded_at_ms, eur_per_usd FROM fx_rates WHERE recorded_at_ms <= $1 ORDER BY recorded_at_ms DESC LIMIT 1",
    )
    .bind(now_ms)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
}

/// The greatest key of a completed run of `kind`.
pub async fn latest_run_key(
    conn: &mut AnyConnection,
    kind: &str,
) -> Result<Option<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT MAX(run_key) FROM payout_runs WHERE run_kind = $1")
            .bind(kind)
            .fetch_one(&mut *conn)
            .await?,
    )
}

/// When the first provider registered.
pub async fn first_registration_ms(conn: &mut AnyConnection) -> Result<Option<i64>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT MIN(registered_at_ms) FROM providers")
            .fetch_one(&mut *conn)
            .await?,
    )
}

/// When a run completed, if it did.
pub async fn completed_at(
    conn: &mut AnyConnection,
    kind: &str,
    key: &str,
) -> Result<Option<i64>, StoreError> {
    let row =
        sqlx::query("SELECT completed_at_ms FROM payout_runs WHERE run_kind = $1 AND run_key = $2")
            .bind(kind)
            .bind(key)
            .fetch_optional(&mut *conn)
            .await?;
    Ok(match row {
        Some(r) => Some(r.try_get(0)?),
        None => None,
    })
}

/// One candidate of a run and its decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunCandidate {
    pub provider_id: String,
    pub decision: String,
    pub available_micro_usdc: i64,
    pub amount_micro_usdc: i64,
    pub payout_id: Option<String>,
    pub decided_at_ms: i64,
}

/// The decided candidates of a run, in no order. Streamed, not fetched whole: a run of
/// 100,000 candidates holds only its rows once.
pub async fn decisions(
    conn: &mut AnyConnection,
    kind: &str,
    key: &str,
) -> Result<Vec<RunCandidate>, StoreError> {
    let mut candidates = Vec::new();
    let mut rows = sqlx::query_as::<_, (String, String, i64, i64, Option<String>, i64)>(
        "SELECT provider_id, decision, available_micro_usdc, amount_micro_usdc, payout_id, decided_at_ms FROM run_decisions WHERE run_kind = $1 AND run_key = $2",
    )
    .bind(kind)
    .bind(key)
    .fetch(&mut *conn);
    while let Some((provider_id, decision, available, amount, payout_id, decided_at_ms)) =
        rows.try_next().await?
    {
        candidates.push(RunCandidate {
            provider_id,
            decision,
            available_micro_usdc: available,
            amount_micro_usdc: amount,
            payout_id,
            decided_at_ms,
        });
    }
    Ok(candidates)
}

/// A provider's decision in a run, if decided.
pub async fn decision_of(
    conn: &mut AnyConnection,
    kind: &str,
    key: &str,
    provider_id: &str,
) -> Result<Option<String>, StoreError> {
    let row = sqlx::query(
        "SELECT decision FROM run_decisions WHERE run_kind = $1 AND run_key = $2 AND provider_id = $3",
    )
    .bind(kind)
    .bind(key)
    .bind(provider_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|r| r.try_get(0)).transpose().map_err(Into::into)
}

/// Per decision of a run: `(decision, count, sum of amounts)`.
pub async fn decision_totals(
    conn: &mut AnyConnection,
    kind: &str,
    key: &str,
) -> Result<Vec<(String, i64, i64)>, StoreError> {
    let rows = sqlx::query(
        "SELECT decision, CAST(COUNT(*) AS BIGINT), CAST(COALESCE(SUM(amount_micro_usdc), 0) AS BIGINT) FROM run_decisions WHERE run_kind = $1 AND run_key = $2 GROUP BY decision",
    )
    .bind(kind)
    .bind(key)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect()
}

/// The providers a run may pay, in provider id order (byte order, the same on every
/// database): every provider not suspended, on the weekly schedule only for a weekly run.
pub async fn candidate_ids(pool: &AnyPool, weekly: bool) -> Result<Vec<String>, StoreError> {
    let sql = if weekly {
        "SELECT provider_id FROM providers WHERE schedule = 'weekly' AND status <> 'suspended'"
    } else {
        "SELECT provider_id FROM providers WHERE status <> 'suspended'"
    };
    let mut ids: Vec<String> = sqlx::query_scalar(sql).fetch(pool).try_collect().await?;
    ids.sort_unstable();
    Ok(ids)
}

/// The providers already decided in a run.
pub async fn decided_ids(
    pool: &AnyPool,
    kind: &str,
    key: &str,
) -> Result<HashSet<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT provider_id FROM run_decisions WHERE run_kind = $1 AND run_key = $2",
    )
    .bind(kind)
    .bind(key)
    .fetch(pool)
    .try_collect()
    .await?)
}

/// A completed run's summary as `payout_run.completed` recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    pub run_kind: String,
    pub run_key: String,
    pub cutoff_ms: i64,
    pub candidates: i64,
    pub totals: BTreeMap<String, (i64, i64)>,
    pub completed_at_ms: i64,
}

/// Every completed run, newest first (at most `limit`).
pub async fn completed_runs(pool: &AnyPool, limit: i64) -> Result<Vec<RunSummary>, StoreError> {
    let rows = sqlx::query(
        "SELECT run_kind, run_key, cutoff_ms, candidates, totals, completed_at_ms FROM payout_runs ORDER BY cutoff_ms DESC, run_kind DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            let totals: String = r.try_get(4)?;
            Ok(RunSummary {
                run_kind: r.try_get(0)?,
                run_key: r.try_get(1)?,
                cutoff_ms: r.try_get(2)?,
                candidates: r.try_get(3)?,
                totals: serde_json::from_str(&totals)
                    .map_err(|e| StoreError::CorruptRow(format!("payout_runs.totals: {e}")))?,
                completed_at_ms: r.try_get(5)?,
            })
        })
        .collect()
}
