//! The reads of the bank's answers: payouts by the end-to-end id they travelled with, the
//! answer files booked and the entries of them that booked nothing (projections of
//! `bank_answer.imported`).

use std::collections::HashMap;

use super::on;
use super::payouts::{PayoutRow, payout_columns_of, records};
use super::{Dialect, Store, StoreError, json_rows_param};
use crate::domain::payout::PayoutRecord;

/// End-to-end ids looked up in one statement.
const IDS_PER_QUERY_MAX: usize = 1_000;

/// The payouts that travelled with each of `end_to_end_ids` (SEPA `EndToEndId`, ACH
/// identification number), by end-to-end id: one statement per thousand ids. An id no
/// payout has is absent; an id several payouts share (never written by the engine) maps to
/// all of them.
pub(crate) async fn payouts_by_end_to_end_ids(
    store: &Store,
    end_to_end_ids: &[&str],
) -> Result<HashMap<String, Vec<PayoutRecord>>, StoreError> {
    let mut out: HashMap<String, Vec<PayoutRecord>> = HashMap::with_capacity(end_to_end_ids.len());
    let pool = store.db();
    let mut conn = pool.acquire().await?;
    for chunk in end_to_end_ids.chunks(IDS_PER_QUERY_MAX) {
        let rows: Vec<(&str,)> = chunk.iter().map(|p| (*p,)).collect();
        let sql = format!(
            "SELECT {} FROM {} JOIN payouts AS p ON p.end_to_end_id = j.value ->> 0",
            payout_columns_of("p"),
            Dialect::of(&conn).json_rows(1, chunk.len())
        );
        let rows: Vec<PayoutRow> = on!(&mut conn, |c| sqlx::query_as(&sql)
            .bind(json_rows_param(&rows))
            .fetch_all(c)
            .await)?;
        for p in records(rows)? {
            if let Some(e2e) = p.end_to_end_id.clone() {
                out.entry(e2e).or_default().push(p);
            }
        }
    }
    Ok(out)
}

/// A booked answer file (`bank_answer_files`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct AnswerFileRow {
    pub kind: String,
    pub message_id: String,
    pub sha256: String,
    pub entries: i64,
    pub matched: i64,
    pub exceptions: i64,
    pub imported_at_ms: i64,
}

/// An answer's entry that booked nothing (`bank_answer_exceptions`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct ExceptionRow {
    pub entry_key: String,
    /// `unmatched`, `amount_mismatch`, `unknown_batch` or `state_conflict`.
    pub problem: String,
    pub reference: String,
    pub batch_id: Option<String>,
    pub amount_cents: i64,
    pub currency: String,
    pub expected_cents: Option<i64>,
    pub detail: String,
    pub kind: String,
    pub message_id: String,
    pub recorded_at_ms: i64,
}

/// The answer file of `kind` with `message_id`, when it was booked.
pub(crate) async fn answer_file(
    store: &Store,
    kind: &str,
    message_id: &str,
) -> Result<Option<AnswerFileRow>, StoreError> {
    let pool = store.db();
    Ok(on!(pool, |c| {
        sqlx::query_as(
        "SELECT kind, message_id, sha256, entries, matched, exceptions, imported_at_ms FROM bank_answer_files WHERE kind = $1 AND message_id = $2"
    )
    .bind(kind)
    .bind(message_id)
    .fetch_optional(c)
    .await
    })?)
}

/// Every answer file booked, oldest first.
pub async fn answer_files(store: &Store) -> Result<Vec<AnswerFileRow>, StoreError> {
    let pool = store.db();
    Ok(on!(pool, |c| {
        sqlx::query_as(
        "SELECT kind, message_id, sha256, entries, matched, exceptions, imported_at_ms FROM bank_answer_files ORDER BY imported_at_ms, kind, message_id"
    )
    .fetch_all(c)
    .await
    })?)
}

/// Every entry of the answers that booked nothing, oldest first.
pub async fn exceptions(store: &Store) -> Result<Vec<ExceptionRow>, StoreError> {
    let pool = store.db();
    Ok(on!(pool, |c| {
        sqlx::query_as(
        "SELECT entry_key, problem, reference, batch_id, amount_cents, currency, expected_cents, detail, kind, message_id, recorded_at_ms FROM bank_answer_exceptions ORDER BY recorded_at_ms, entry_key"
    )
    .fetch_all(c)
    .await
    })?)
}

/// Whether a request of the provider update `update_id` was booked, pending or decided
/// (a notification of change is requested as update `noc-{trace}`). The command is the
/// request's canonical JSON line, so the id appears in it exactly as written here.
pub(crate) async fn update_requested(store: &Store, update_id: &str) -> Result<bool, StoreError> {
    let needle = format!("%\"update_id\":\"{update_id}\"%");
    let pool = store.db();
    let found: i64 = on!(pool, |c| {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM approvals WHERE kind = 'payout_method' AND command LIKE $1",
        )
        .bind(&needle)
        .fetch_one(c)
        .await
    })?;
    Ok(found > 0)
}
