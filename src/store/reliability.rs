//! The reliability telemetry as stored (`gpu_reports`, append-only): one row per report,
//! idempotent by `(kind, report_id)`, recorded a batch per transaction; and, derived from
//! them in the same transaction, each GPU's online time as merged spans
//! (`gpu_online_spans`). `ledger::reliability` records and reads them.

use std::collections::{BTreeMap, HashMap, HashSet};

use sqlx::Arguments as _;

use super::{Conn, Dialect, Store, StoreError, TxConn, json_rows_param, on, values};

/// Ids of one lookup statement (a batch holds at most `ledger.batch_events_max` reports).
const IDS_PER_QUERY_MAX: usize = 1_000;

/// Attempts of [`record_many`] when a concurrent writer recorded one of its keys between
/// its read and its insert (PostgreSQL; on SQLite the process's writer lock and
/// `BEGIN IMMEDIATE` order the writers).
const RECORD_ATTEMPTS_MAX: usize = 3;

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

/// A stored report's body, by its key.
#[derive(sqlx::FromRow)]
struct StoredBody {
    kind: String,
    report_id: String,
    body: String,
}

/// A span of a GPU's online time (`gpu_online_spans`).
#[derive(sqlx::FromRow)]
struct SpanRow {
    gpu_id: String,
    start_ms: i64,
    end_ms: i64,
}

/// A registered GPU with its provider and model.
#[derive(sqlx::FromRow)]
struct GpuRow {
    gpu_id: String,
    provider_id: String,
    model: String,
}

/// Records `rows` together, in one transaction, each unless its `(kind, report_id)` is
/// taken; per row: `None` when recorded now, `Some(body)` with the stored body otherwise
/// (equal: a duplicate; other: a conflict; a row repeating an earlier row of the batch gets
/// that row's body).
pub(crate) async fn record_many(
    store: &Store,
    rows: &[ReportRow],
) -> Result<Vec<Option<String>>, StoreError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    for _ in 1..RECORD_ATTEMPTS_MAX {
        if let Some(out) = try_record_many(store, rows).await? {
            return Ok(out);
        }
    }
    try_record_many(store, rows)
        .await?
        .ok_or_else(|| StoreError::Conflict("reliability reports recorded concurrently".to_owned()))
}

/// One attempt of [`record_many`]: `None` when another writer took one of the keys meanwhile
/// (nothing written).
async fn try_record_many(
    store: &Store,
    rows: &[ReportRow],
) -> Result<Option<Vec<Option<String>>>, StoreError> {
    let (_writer, mut tx) = store.write_tx().await?;
    let mut stored = stored_bodies(&mut tx, rows).await?;
    let mut out = Vec::with_capacity(rows.len());
    let mut fresh: Vec<&ReportRow> = Vec::new();
    for row in rows {
        let key = (row.kind.clone(), row.report_id.clone());
        match stored.get(&key) {
            Some(body) => out.push(Some(body.clone())),
            None => {
                out.push(None);
                stored.insert(key, row.body.clone());
                fresh.push(row);
            }
        }
    }
    if insert_rows(&mut tx, &fresh).await? != fresh.len() as u64 {
        return Ok(None);
    }
    let online: Vec<(&str, i64, i64)> = fresh
        .iter()
        .filter(|r| r.kind == "online")
        .filter_map(|r| Some((r.gpu_id.as_str(), r.at_ms, r.end_ms?)))
        .collect();
    merge_online(&mut tx, &online).await?;
    tx.commit().await?;
    Ok(Some(out))
}

/// The stored bodies of the keys of `rows` already recorded.
async fn stored_bodies(
    tx: &mut TxConn,
    rows: &[ReportRow],
) -> Result<HashMap<(String, String), String>, StoreError> {
    let keys: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.kind.as_str(), r.report_id.as_str()))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let mut out = HashMap::new();
    for chunk in keys.chunks(IDS_PER_QUERY_MAX) {
        let sql = format!(
            "SELECT g.kind, g.report_id, g.body FROM {} JOIN gpu_reports AS g \
             ON g.kind = j.value ->> 0 AND g.report_id = j.value ->> 1",
            Dialect::of(tx).json_rows(1, chunk.len())
        );
        let found: Vec<StoredBody> = on!(&mut **tx, |c| sqlx::query_as(&sql)
            .bind(json_rows_param(chunk))
            .fetch_all(c)
            .await)?;
        out.extend(found.into_iter().map(|r| ((r.kind, r.report_id), r.body)));
    }
    Ok(out)
}

const REPORT_COLUMNS: &str =
    "kind, report_id, gpu_id, provider_id, at_ms, end_ms, body, recorded_at_ms";

/// Inserts `rows` (distinct keys) in the transaction, skipping keys taken meanwhile; the
/// rows inserted.
async fn insert_rows(tx: &mut TxConn, rows: &[&ReportRow]) -> Result<u64, StoreError> {
    if rows.is_empty() {
        return Ok(0);
    }
    let head = format!("INSERT INTO gpu_reports ({REPORT_COLUMNS})");
    let tail = "ON CONFLICT (kind, report_id) DO NOTHING";
    let conn: &mut Conn = tx;
    match conn {
        // Bound values (`store::values`); the writer lock makes the read above exact, so
        // every row is inserted.
        Conn::Sqlite(c) => {
            values::write(c, &head, tail, 8, rows, |args, r| {
                args.add(&r.kind)?;
                args.add(&r.report_id)?;
                args.add(&r.gpu_id)?;
                args.add(&r.provider_id)?;
                args.add(r.at_ms)?;
                args.add(r.end_ms)?;
                args.add(&r.body)?;
                args.add(r.recorded_at_ms)
            })
            .await?;
            Ok(rows.len() as u64)
        }
        Conn::Postgres(c) => {
            let json: Vec<_> = rows
                .iter()
                .map(|r| {
                    (
                        &r.kind,
                        &r.report_id,
                        &r.gpu_id,
                        &r.provider_id,
                        r.at_ms,
                        r.end_ms,
                        &r.body,
                        r.recorded_at_ms,
                    )
                })
                .collect();
            let sql = format!(
                "{head} SELECT j.value ->> 0, j.value ->> 1, j.value ->> 2, j.value ->> 3, \
                 CAST(j.value ->> 4 AS BIGINT), CAST(j.value ->> 5 AS BIGINT), j.value ->> 6, \
                 CAST(j.value ->> 7 AS BIGINT) FROM {} {tail}",
                Dialect::Postgres.json_rows(1, rows.len())
            );
            Ok(sqlx::query(&sql)
                .bind(json_rows_param(&json))
                .execute(&mut **c)
                .await?
                .rows_affected())
        }
    }
}

/// Merges new online intervals `(gpu_id, start_ms, end_ms)` into their GPUs' spans
/// (`gpu_online_spans`), in the transaction that records them: per GPU, the spans that
/// overlap or touch the range of its new intervals are read, replaced by their union with
/// the new intervals.
///
/// Concurrent writers (PostgreSQL) keep the union: each deletes only spans it read and
/// inserts spans covering them and its intervals; two inserting the same start keep the
/// later end (both spans run on from that start). Spans left overlapping that way are
/// merged by the next write and by the reader ([`online_spans`] feeds the core, which
/// merges them).
async fn merge_online(tx: &mut TxConn, intervals: &[(&str, i64, i64)]) -> Result<(), StoreError> {
    let mut by_gpu: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    for (gpu, start, end) in intervals {
        by_gpu.entry(gpu).or_default().push((*start, *end));
    }
    if by_gpu.is_empty() {
        return Ok(());
    }
    let ranges: Vec<(&str, i64, i64)> = by_gpu
        .iter()
        .map(|(gpu, list)| {
            let lo = list.iter().map(|i| i.0).min().unwrap_or_default();
            let hi = list.iter().map(|i| i.1).max().unwrap_or_default();
            (*gpu, lo, hi)
        })
        .collect();
    let mut old: Vec<(String, i64, i64)> = Vec::new();
    for chunk in ranges.chunks(IDS_PER_QUERY_MAX) {
        let sql = format!(
            "SELECT s.gpu_id, s.start_ms, s.end_ms FROM {} JOIN gpu_online_spans AS s \
             ON s.gpu_id = j.value ->> 0 AND s.start_ms <= CAST(j.value ->> 2 AS BIGINT) \
             AND s.end_ms >= CAST(j.value ->> 1 AS BIGINT)",
            Dialect::of(tx).json_rows(1, chunk.len())
        );
        let found: Vec<SpanRow> = on!(&mut **tx, |c| sqlx::query_as(&sql)
            .bind(json_rows_param(chunk))
            .fetch_all(c)
            .await)?;
        old.extend(found.into_iter().map(|r| (r.gpu_id, r.start_ms, r.end_ms)));
    }
    for (gpu, start, _) in &old {
        on!(&mut **tx, |c| sqlx::query(
            "DELETE FROM gpu_online_spans WHERE gpu_id = $1 AND start_ms = $2"
        )
        .bind(gpu)
        .bind(start)
        .execute(c)
        .await
        .map(|_| ()))?;
    }
    for (gpu, start, end) in &old {
        if let Some(list) = by_gpu.get_mut(gpu.as_str()) {
            list.push((*start, *end));
        }
    }
    let merged: Vec<(&str, i64, i64)> = by_gpu
        .into_iter()
        .flat_map(|(gpu, list)| union(list).into_iter().map(move |(s, e)| (gpu, s, e)))
        .collect();
    insert_spans(tx, &merged).await
}

/// The union of `intervals` as disjoint spans in order (touching ones joined).
fn union(mut intervals: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    intervals.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(intervals.len());
    for (start, end) in intervals {
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

async fn insert_spans(tx: &mut TxConn, spans: &[(&str, i64, i64)]) -> Result<(), StoreError> {
    let head = "INSERT INTO gpu_online_spans (gpu_id, start_ms, end_ms)";
    let tail = "ON CONFLICT (gpu_id, start_ms) DO UPDATE SET end_ms = CASE \
                WHEN excluded.end_ms > gpu_online_spans.end_ms THEN excluded.end_ms \
                ELSE gpu_online_spans.end_ms END";
    let conn: &mut Conn = tx;
    match conn {
        Conn::Sqlite(c) => {
            values::write(c, head, tail, 3, spans, |args, (gpu, start, end)| {
                args.add(*gpu)?;
                args.add(*start)?;
                args.add(*end)
            })
            .await?;
        }
        Conn::Postgres(c) => {
            for chunk in spans.chunks(IDS_PER_QUERY_MAX) {
                let sql = format!(
                    "{head} SELECT j.value ->> 0, CAST(j.value ->> 1 AS BIGINT), \
                     CAST(j.value ->> 2 AS BIGINT) FROM {} {tail}",
                    Dialect::Postgres.json_rows(1, chunk.len())
                );
                sqlx::query(&sql)
                    .bind(json_rows_param(chunk))
                    .execute(&mut **c)
                    .await?;
            }
        }
    }
    Ok(())
}

/// The registered GPUs among `gpu_ids`, each with its provider and model.
pub async fn gpus(
    store: &Store,
    gpu_ids: &[&str],
) -> Result<HashMap<String, (String, String)>, StoreError> {
    let ids: Vec<(&str,)> = gpu_ids
        .iter()
        .copied()
        .collect::<HashSet<_>>()
        .into_iter()
        .map(|g| (g,))
        .collect();
    let mut out = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(IDS_PER_QUERY_MAX) {
        let sql = format!(
            "SELECT g.gpu_id, g.provider_id, g.model FROM {} JOIN gpus AS g ON g.gpu_id = j.value ->> 0",
            store.dialect().json_rows(1, chunk.len())
        );
        let found: Vec<GpuRow> = on!(store.db(), |c| sqlx::query_as(&sql)
            .bind(json_rows_param(chunk))
            .fetch_all(c)
            .await)?;
        out.extend(
            found
                .into_iter()
                .map(|r| (r.gpu_id, (r.provider_id, r.model))),
        );
    }
    Ok(out)
}

/// A GPU's reports that matter at `since_ms` and after, online intervals apart (see
/// [`online_spans`]): every schedule, maintenance window and benchmark (a benchmark part
/// compares with the first ever), and the jobs ending after `since_ms`; as `(kind, at_ms,
/// end_ms, body, recorded_at_ms)`, by kind and instant.
pub async fn gpu_reports(
    store: &Store,
    gpu_id: &str,
    since_ms: i64,
) -> Result<Vec<(String, i64, Option<i64>, String, i64)>, StoreError> {
    Ok(on!(store.db(), |c| sqlx::query_as(
        "SELECT kind, at_ms, end_ms, body, recorded_at_ms FROM gpu_reports WHERE gpu_id = $1 \
         AND (kind IN ('schedule', 'maintenance', 'benchmark') \
              OR (kind = 'job' AND COALESCE(end_ms, at_ms) > $2)) \
         ORDER BY kind, at_ms, report_id"
    )
    .bind(gpu_id)
    .bind(since_ms)
    .fetch_all(c)
    .await)?)
}

/// A GPU's online time ending after `since_ms`, as `(start_ms, end_ms)` spans by start: the
/// union of its online intervals, kept merged as they are recorded (an agent reporting
/// every five minutes sends 288 intervals a day; a GPU that stayed up is one span).
pub async fn online_spans(
    store: &Store,
    gpu_id: &str,
    since_ms: i64,
) -> Result<Vec<(i64, i64)>, StoreError> {
    let spans: Vec<SpanRow> = on!(store.db(), |c| {
        sqlx::query_as(
        "SELECT gpu_id, start_ms, end_ms FROM gpu_online_spans WHERE gpu_id = $1 AND end_ms > $2 \
         ORDER BY start_ms"
    )
    .bind(gpu_id)
    .bind(since_ms)
    .fetch_all(c)
    .await
    })?;
    Ok(spans.into_iter().map(|r| (r.start_ms, r.end_ms)).collect())
}

/// The GPUs of `provider_id` with their model, by id.
pub(crate) async fn provider_gpus(
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
pub(crate) async fn provider_reports_mark(
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
