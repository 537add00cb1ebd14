//! What payout runs read of the projections: the figures of SPEC §5's `available`, the FX
//! rate, the runs' decisions and completions, and the candidates. A run is named by its
//! kind and key (`weekly`, `2026-11-02`).

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::TryStreamExt;
use serde::Serialize;

use super::on;
use super::{Conn, Dialect, Store, StoreError, json_rows_param};
use crate::domain::decision::{Decision, Figures};
use crate::domain::event::{accounts, provider_stream};
use crate::domain::payout::PayoutStatus;

/// A read of the ledger in one snapshot and without a write lock: a payout run reads its
/// next chunk's candidates with it while the chunk before commits. Nothing read here decides
/// money unless the write transaction finds it still valid (see `ledger::runs`).
pub struct ReadAhead {
    tx: super::TxConn,
}

impl Store {
    /// Opens a [`ReadAhead`]: both databases take the snapshot at its first read.
    pub async fn read_ahead(&self) -> Result<ReadAhead, StoreError> {
        let begin = self.dialect().begin_snapshot();
        Ok(ReadAhead {
            tx: super::TxConn::begin_with(self.db(), begin).await?,
        })
    }
}

impl ReadAhead {
    pub fn conn(&mut self) -> &mut Conn {
        &mut self.tx
    }

    /// Ends the snapshot; the connection goes back to the pool.
    pub async fn close(self) -> Result<(), StoreError> {
        Ok(self.tx.commit().await?)
    }
}

/// Of `streams`, the ones whose projections hold every event (checkpoint = head), with that
/// head: one statement, primary-key probes only.
pub(crate) async fn folded_heads(
    conn: &mut Conn,
    citus: bool,
    streams: &[&str],
) -> Result<HashMap<String, i64>, StoreError> {
    if streams.is_empty() {
        return Ok(HashMap::new());
    }
    if citus {
        // Each shard answers for its streams: a checkpoint with no event after it.
        let found: Vec<super::StreamSeq> = super::citus::on_pg!(&mut *conn, |c| sqlx::query_as(
            "SELECT c.stream, c.seq FROM projection_checkpoints AS c \
             WHERE c.stream = ANY($1) \
             AND EXISTS (SELECT 1 FROM events AS e WHERE e.stream = c.stream AND e.seq = c.seq) \
             AND NOT EXISTS (SELECT 1 FROM events AS e WHERE e.stream = c.stream AND e.seq > c.seq)"
        )
        .bind(streams)
        .fetch_all(c)
        .await)?;
        return Ok(found.into_iter().map(|h| (h.stream, h.seq)).collect());
    }
    let rows: Vec<(&str,)> = streams.iter().map(|s| (*s,)).collect();
    let sql = format!(
        "SELECT h.stream, h.seq FROM (SELECT j.value ->> 0 AS stream, \
         (SELECT MAX(e.seq) FROM events AS e WHERE e.stream = j.value ->> 0) AS seq FROM {}) AS h \
         JOIN projection_checkpoints AS c ON c.stream = h.stream AND c.seq = h.seq",
        Dialect::of(conn).json_rows(1, streams.len())
    );
    let found: Vec<super::StreamSeq> = on!(&mut *conn, |c| sqlx::query_as(&sql)
        .bind(json_rows_param(&rows))
        .fetch_all(c)
        .await)?;
    Ok(found.into_iter().map(|h| (h.stream, h.seq)).collect())
}

/// The three figures of SPEC §5 a candidate's decision reads, for one provider, as read
/// (by name) into the domain's [`Figures`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, sqlx::FromRow)]
struct CandidateFigures {
    /// The balance of the payable account (whenever recorded).
    pub payable_balance_micro_usdc: i64,
    /// Payable lines booked on days before the cutoff's day.
    pub recorded_before_micro_usdc: i64,
    /// Payouts not failed, cancelled or returned.
    pub payouts_not_undone_micro_usdc: i64,
}

impl From<CandidateFigures> for Figures {
    fn from(f: CandidateFigures) -> Figures {
        Figures {
            payable_balance_micro_usdc: f.payable_balance_micro_usdc,
            recorded_before_micro_usdc: f.recorded_before_micro_usdc,
            payouts_not_undone_micro_usdc: f.payouts_not_undone_micro_usdc,
        }
    }
}

/// The [`Figures`] of each of `provider_ids` (zero for a provider without lines or
/// payouts): one statement for a whole chunk of a run's candidates, each figure one
/// primary-key range (`account_balances`, `payable_recorded`) or index range
/// (`payouts_by_provider`) per provider.
pub(crate) async fn candidate_figures(
    conn: &mut Conn,
    citus: bool,
    provider_ids: &[&str],
    day: i64,
) -> Result<HashMap<String, Figures>, StoreError> {
    let mut out = HashMap::with_capacity(provider_ids.len());
    if provider_ids.is_empty() {
        return Ok(out);
    }
    if citus {
        // Citus runs no correlated subquery over a list of parameters: the figures are
        // grouped on each shard by stream, the providers' rows joined on it (all
        // co-located), for the streams of the chunk.
        let streams: Vec<String> = provider_ids.iter().map(|p| provider_stream(p)).collect();
        let streams: Vec<&str> = streams.iter().map(String::as_str).collect();
        let sql = format!(
            "SELECT p.provider_id, COALESCE(b.balance_micro_usdc, 0) AS payable_balance_micro_usdc, \
             CAST(COALESCE(r.total, 0) AS BIGINT) AS recorded_before_micro_usdc, \
             CAST(COALESCE(q.total, 0) AS BIGINT) AS payouts_not_undone_micro_usdc \
             FROM providers AS p \
             LEFT JOIN account_balances AS b ON b.owner = p.stream AND b.account = p.stream || ':payable' \
             LEFT JOIN (SELECT stream, SUM(amount_micro_usdc) AS total FROM payable_recorded \
               WHERE day < $2 GROUP BY stream) AS r ON r.stream = p.stream \
             LEFT JOIN (SELECT stream, SUM(amount_micro_usdc) AS total FROM payouts \
               WHERE status NOT IN ({}) GROUP BY stream) AS q ON q.stream = p.stream \
             WHERE p.stream = ANY($1)",
            PayoutStatus::sql_list(PayoutStatus::is_undone),
        );
        let found: Vec<ProviderFigures> =
            super::citus::on_pg!(&mut *conn, |c| sqlx::query_as(&sql)
                .bind(&streams)
                .bind(day)
                .fetch_all(c)
                .await)?;
        out.extend(found.into_iter().map(|f| (f.provider_id, f.figures.into())));
        return Ok(out);
    }
    let rows: Vec<(&str, String, String)> = provider_ids
        .iter()
        .map(|p| (*p, provider_stream(p), accounts::payable(p)))
        .collect();
    let sql = format!(
        "SELECT j.value ->> 0 AS provider_id, \
         COALESCE((SELECT b.balance_micro_usdc FROM account_balances AS b WHERE b.owner = j.value ->> 1 AND b.account = j.value ->> 2), 0) AS payable_balance_micro_usdc, \
         CAST(COALESCE((SELECT SUM(r.amount_micro_usdc) FROM payable_recorded AS r WHERE r.provider_id = j.value ->> 0 AND r.day < $2), 0) AS BIGINT) AS recorded_before_micro_usdc, \
         CAST(COALESCE((SELECT SUM(p.amount_micro_usdc) FROM payouts AS p WHERE p.provider_id = j.value ->> 0 AND p.status NOT IN ({})), 0) AS BIGINT) AS payouts_not_undone_micro_usdc \
         FROM {}",
        PayoutStatus::sql_list(PayoutStatus::is_undone),
        Dialect::of(conn).json_rows(1, provider_ids.len())
    );
    let found: Vec<ProviderFigures> = on!(&mut *conn, |c| sqlx::query_as(&sql)
        .bind(json_rows_param(&rows))
        .bind(day)
        .fetch_all(c)
        .await)?;
    out.extend(found.into_iter().map(|f| (f.provider_id, f.figures.into())));
    Ok(out)
}

#[derive(sqlx::FromRow)]
struct ProviderFigures {
    provider_id: String,
    #[sqlx(flatten)]
    figures: CandidateFigures,
}

/// The latest FX rate recorded at or before `now_ms`: `(recorded_at_ms, eur_per_usd text)`.
pub async fn latest_fx_rate(
    conn: &mut Conn,
    now_ms: i64,
) -> Result<Option<(i64, String)>, StoreError> {
    let row: Option<FxRow> = on!(&mut *conn, |c| {
        sqlx::query_as(
        "SELECT recorded_at_ms, eur_per_usd FROM fx_rates WHERE recorded_at_ms <= $1 ORDER BY recorded_at_ms DESC LIMIT 1",
    )
    .bind(now_ms)
    .fetch_optional(c)
    .await
    })?;
    Ok(row.map(|r| (r.recorded_at_ms, r.eur_per_usd)))
}

/// The EUR per USD rates booked after `after_ms` (the control's week of FX history).
pub(crate) async fn fx_rates_after(
    conn: &mut Conn,
    after_ms: i64,
) -> Result<Vec<String>, StoreError> {
    Ok(on!(&mut *conn, |c| sqlx::query_scalar(
        "SELECT eur_per_usd FROM fx_rates WHERE recorded_at_ms > $1 ORDER BY recorded_at_ms",
    )
    .bind(after_ms)
    .fetch_all(c)
    .await)?)
}

#[derive(sqlx::FromRow)]
struct FxRow {
    recorded_at_ms: i64,
    eur_per_usd: String,
}

/// The greatest key of a completed run of `kind`.
pub(crate) async fn latest_run_key(
    conn: &mut Conn,
    kind: &str,
) -> Result<Option<String>, StoreError> {
    Ok(on!(&mut *conn, |c| sqlx::query_scalar(
        "SELECT MAX(run_key) FROM payout_runs WHERE run_kind = $1"
    )
    .bind(kind)
    .fetch_one(c)
    .await)?)
}

/// When the first provider registered.
pub(crate) async fn first_registration_ms(conn: &mut Conn) -> Result<Option<i64>, StoreError> {
    Ok(on!(&mut *conn, |c| sqlx::query_scalar(
        "SELECT MIN(registered_at_ms) FROM providers"
    )
    .fetch_one(c)
    .await)?)
}

/// When a run completed, if it did.
pub(crate) async fn completed_at(
    conn: &mut Conn,
    kind: &str,
    key: &str,
) -> Result<Option<i64>, StoreError> {
    Ok(on!(&mut *conn, |c| sqlx::query_scalar(
        "SELECT completed_at_ms FROM payout_runs WHERE run_kind = $1 AND run_key = $2",
    )
    .bind(kind)
    .bind(key)
    .fetch_optional(c)
    .await)?)
}

/// One candidate of a run and its decision (a `run_decisions` row, read by name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct RunCandidate {
    pub provider_id: String,
    #[sqlx(try_from = "String")]
    pub decision: Decision,
    pub available_micro_usdc: i64,
    pub amount_micro_usdc: i64,
    pub payout_id: Option<String>,
    pub decided_at_ms: i64,
}

/// The decided candidates of a run, in no order. Streamed, not fetched whole: a run of
/// 100,000 candidates holds only its rows once.
pub async fn decisions(
    conn: &mut Conn,
    kind: &str,
    key: &str,
) -> Result<Vec<RunCandidate>, StoreError> {
    Ok(on!(&mut *conn, |c| {
        sqlx::query_as::<_, RunCandidate>(
        "SELECT provider_id, decision, available_micro_usdc, amount_micro_usdc, payout_id, decided_at_ms FROM run_decisions WHERE run_kind = $1 AND run_key = $2",
    )
    .bind(kind)
    .bind(key)
    .fetch(c)
    .try_collect()
    .await
    })?)
}

/// A provider's decision in a run, if decided.
pub(crate) async fn decision_of(
    conn: &mut Conn,
    kind: &str,
    key: &str,
    provider_id: &str,
) -> Result<Option<String>, StoreError> {
    Ok(on!(&mut *conn, |c| {
        sqlx::query_scalar(
        "SELECT decision FROM run_decisions WHERE run_kind = $1 AND run_key = $2 AND provider_id = $3",
    )
    .bind(kind)
    .bind(key)
    .bind(provider_id)
    .fetch_optional(c)
    .await
    })?)
}

/// Per decision of a run: `(decision, count, sum of amounts)`.
pub(crate) async fn decision_totals(
    conn: &mut Conn,
    kind: &str,
    key: &str,
) -> Result<Vec<(String, i64, i64)>, StoreError> {
    let rows: Vec<DecisionTotal> = on!(&mut *conn, |c| {
        sqlx::query_as(
        "SELECT decision, CAST(COUNT(*) AS BIGINT) AS count, CAST(COALESCE(SUM(amount_micro_usdc), 0) AS BIGINT) AS amount_micro_usdc FROM run_decisions WHERE run_kind = $1 AND run_key = $2 GROUP BY decision",
    )
    .bind(kind)
    .bind(key)
    .fetch_all(c)
    .await
    })?;
    Ok(rows
        .into_iter()
        .map(|r| (r.decision, r.count, r.amount_micro_usdc))
        .collect())
}

#[derive(sqlx::FromRow)]
struct DecisionTotal {
    decision: String,
    count: i64,
    amount_micro_usdc: i64,
}

/// The providers a run may pay, in provider id order (byte order, the same on every
/// database): every provider not suspended, on the weekly schedule only for a weekly run.
pub(crate) async fn candidate_ids(store: &Store, weekly: bool) -> Result<Vec<String>, StoreError> {
    let pool = store.db();
    let sql = if weekly {
        "SELECT provider_id FROM providers WHERE schedule = 'weekly' AND status <> 'suspended'"
    } else {
        "SELECT provider_id FROM providers WHERE status <> 'suspended'"
    };
    let mut ids: Vec<String> = on!(pool, |c| sqlx::query_scalar(sql)
        .fetch(c)
        .try_collect()
        .await)?;
    ids.sort_unstable();
    Ok(ids)
}

/// The providers already decided in a run.
pub(crate) async fn decided_ids(
    store: &Store,
    kind: &str,
    key: &str,
) -> Result<HashSet<String>, StoreError> {
    let pool = store.db();
    Ok(on!(pool, |c| sqlx::query_scalar(
        "SELECT provider_id FROM run_decisions WHERE run_kind = $1 AND run_key = $2",
    )
    .bind(kind)
    .bind(key)
    .fetch(c)
    .try_collect()
    .await)?)
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
pub async fn completed_runs(store: &Store, limit: i64) -> Result<Vec<RunSummary>, StoreError> {
    let pool = store.db();
    let rows: Vec<RunRow> = on!(pool, |c| {
        sqlx::query_as(
        "SELECT run_kind, run_key, cutoff_ms, candidates, totals, completed_at_ms FROM payout_runs ORDER BY cutoff_ms DESC, run_kind DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(c)
    .await
    })?;
    rows.into_iter()
        .map(|r| {
            Ok(RunSummary {
                totals: serde_json::from_str(&r.totals)
                    .map_err(|e| StoreError::CorruptRow(format!("payout_runs.totals: {e}")))?,
                run_kind: r.run_kind,
                run_key: r.run_key,
                cutoff_ms: r.cutoff_ms,
                candidates: r.candidates,
                completed_at_ms: r.completed_at_ms,
            })
        })
        .collect()
}

/// A completed `payout_runs` row as stored.
#[derive(sqlx::FromRow)]
struct RunRow {
    run_kind: String,
    run_key: String,
    cutoff_ms: i64,
    candidates: i64,
    totals: String,
    completed_at_ms: i64,
}
