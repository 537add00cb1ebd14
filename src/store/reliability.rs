//! The reliability telemetry as stored (`gpu_reports`, append-only): one row per report,
//! idempotent by `(kind, report_id)`; `ledger::reliability` records and reads them.

use super::{Store, StoreError, on};

/// A report to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportRow {
    /// `schedule`, `maintenance`, `online`, `job` or `benchmark`.
    pub kind: String,
    pub report_id: String,
    pub gpu_id: String,
    pub provider_id: String,
    /// The report's instant (a schedule's start, a window's or an interval's start, a
    /// job's end, a benchmark's measurement).
    pub at_ms: i64,
    /// The end of a window or an interval.
    pub end_ms: Option<i64>,
    /// The report's canonical JSON (what a duplicate must equal).
    pub body: String,
    pub recorded_at_ms: i64,
}

/// Records `row` unless its `(kind, report_id)` is taken: `Ok(None)` when recorded now,
/// `Ok(Some(body))` with the stored body when it was there (equal: a duplicate; other: a
/// conflict).
pub async fn record(store: &Store, row: &ReportRow) -> Result<Option<String>, StoreError> {
    let inserted = on!(store.db(), |c| {
        sqlx::query(
        "INSERT INTO gpu_reports (kind, report_id, gpu_id, provider_id, at_ms, end_ms, body, recorded_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (kind, report_id) DO NOTHING",
    )
    .bind(&row.kind)
    .bind(&row.report_id)
    .bind(&row.gpu_id)
    .bind(&row.provider_id)
    .bind(row.at_ms)
    .bind(row.end_ms)
    .bind(&row.body)
    .bind(row.recorded_at_ms)
    .execute(c)
    .await
    .map(|r| r.rows_affected())
    })?;
    if inserted == 1 {
        return Ok(None);
    }
    let stored: String = on!(store.db(), |c| sqlx::query_scalar(
        "SELECT body FROM gpu_reports WHERE kind = $1 AND report_id = $2"
    )
    .bind(&row.kind)
    .bind(&row.report_id)
    .fetch_one(c)
    .await)?;
    Ok(Some(stored))
}

/// A GPU's reports that matter at `since_ms` and after: every schedule, maintenance window
/// and benchmark (a benchmark part compares with the first ever), and the online
/// intervals and jobs ending after `since_ms`; as `(kind, at_ms, end_ms, body,
/// recorded_at_ms)`, by kind and instant.
pub async fn gpu_reports(
    store: &Store,
    gpu_id: &str,
    since_ms: i64,
) -> Result<Vec<(String, i64, Option<i64>, String, i64)>, StoreError> {
    Ok(on!(store.db(), |c| sqlx::query_as(
        "SELECT kind, at_ms, end_ms, body, recorded_at_ms FROM gpu_reports WHERE gpu_id = $1 \
         AND (kind IN ('schedule', 'maintenance', 'benchmark') OR COALESCE(end_ms, at_ms) > $2) \
         ORDER BY kind, at_ms, report_id"
    )
    .bind(gpu_id)
    .bind(since_ms)
    .fetch_all(c)
    .await)?)
}

/// The GPUs of `provider_id` with their model, by id.
pub async fn provider_gpus(
    store: &Store,
    provider_id: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    Ok(on!(store.db(), |c| sqlx::query_as(
        "SELECT gpu_id, model FROM gpus WHERE provider_id = $1 ORDER BY gpu_id"
    )
    .bind(provider_id)
    .fetch_all(c)
    .await)?)
}

/// A GPU's provider and model, if it is registered.
pub async fn gpu(store: &Store, gpu_id: &str) -> Result<Option<(String, String)>, StoreError> {
    Ok(on!(store.db(), |c| sqlx::query_as(
        "SELECT provider_id, model FROM gpus WHERE gpu_id = $1"
    )
    .bind(gpu_id)
    .fetch_optional(c)
    .await)?)
}

/// Where the reports of a provider's GPUs stand (see [`provider_reports_mark`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct ReportsMark {
    /// The latest `recorded_at_ms` of the provider's reports.
    pub recorded_at_ms: i64,
    /// The reports recorded at that instant.
    pub reports: i64,
}

/// Where the reports of `provider_id`'s GPUs stand: the latest `recorded_at_ms` and how
/// many reports were recorded at that instant (zeros without reports). It changes with
/// every report recorded at or after the latest one (booking time moves forward), and
/// reads only that instant's rows on the index `gpu_reports_by_provider`: the live stream
/// polls it.
pub async fn provider_reports_mark(
    store: &Store,
    provider_id: &str,
) -> Result<ReportsMark, StoreError> {
    let mark: Option<ReportsMark> = on!(store.db(), |c| sqlx::query_as(
        "SELECT recorded_at_ms, CAST(COUNT(*) AS BIGINT) AS reports FROM gpu_reports \
         WHERE provider_id = $1 AND recorded_at_ms = \
         (SELECT MAX(recorded_at_ms) FROM gpu_reports WHERE provider_id = $1) \
         GROUP BY recorded_at_ms"
    )
    .bind(provider_id)
    .fetch_optional(c)
    .await)?;
    Ok(mark.unwrap_or_default())
}
