//! The rails' projections as typed rows: `bank_batches` (the bank rail's files),
//! `solana_attempts` (the Solana payer's signed transactions) and the payout facts both
//! rails and their ledger commands check against. The only SQL of the rails.

use std::collections::HashMap;

use super::on;
use super::{Conn, Dialect, Store, StoreError, json_rows_param};
use crate::domain::batch::BatchStatus;
use crate::domain::event::{PayoutMethod, Rail};
use crate::domain::payout::PayoutStatus;

/// Payout ids per `IN (…)` query.
const IDS_PER_QUERY_MAX: usize = 500;

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptRow(e.to_string())
}

/// A bank batch as the `bank_batches` projection holds it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BankBatch {
    pub batch_id: String,
    pub rail: Rail,
    pub file_name: String,
    pub sha256: String,
    /// Sorted, the order of the file.
    pub payout_ids: Vec<String>,
    /// Total of the file in cents of `currency`.
    pub total_cents: i64,
    /// `EUR` (SEPA) or `USD` (ACH).
    pub currency: String,
    pub status: BatchStatus,
    /// The batch event's `recorded_at`: the file's creation time.
    pub generated_at_ms: i64,
    pub updated_at_ms: i64,
}

const BATCH_COLUMNS: &str = "batch_id, rail, file_name, sha256, payout_ids, total_cents, currency, status, generated_at_ms, updated_at_ms";

/// A `bank_batches` row as stored ([`BATCH_COLUMNS`], read by name).
#[derive(sqlx::FromRow)]
struct BatchRow {
    batch_id: String,
    rail: String,
    file_name: String,
    sha256: String,
    payout_ids: String,
    total_cents: i64,
    currency: String,
    status: String,
    generated_at_ms: i64,
    updated_at_ms: i64,
}

impl TryFrom<BatchRow> for BankBatch {
    type Error = StoreError;

    fn try_from(r: BatchRow) -> Result<BankBatch, StoreError> {
        Ok(BankBatch {
            rail: Rail::parse(&r.rail).map_err(corrupt)?,
            payout_ids: serde_json::from_str(&r.payout_ids).map_err(corrupt)?,
            status: BatchStatus::parse(&r.status).map_err(corrupt)?,
            batch_id: r.batch_id,
            file_name: r.file_name,
            sha256: r.sha256,
            total_cents: r.total_cents,
            currency: r.currency,
            generated_at_ms: r.generated_at_ms,
            updated_at_ms: r.updated_at_ms,
        })
    }
}

/// Batch rows as batches, oldest first.
fn batches_oldest_first(rows: Vec<BatchRow>) -> Result<Vec<BankBatch>, StoreError> {
    let mut out = rows
        .into_iter()
        .map(BankBatch::try_from)
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_by(|a, b| (a.generated_at_ms, &a.batch_id).cmp(&(b.generated_at_ms, &b.batch_id)));
    Ok(out)
}

/// Every bank batch, oldest first.
pub(crate) async fn load_batches(conn: &mut Conn) -> Result<Vec<BankBatch>, StoreError> {
    let rows: Vec<BatchRow> = on!(&mut *conn, |c| sqlx::query_as(&format!(
        "SELECT {BATCH_COLUMNS} FROM bank_batches"
    ))
    .fetch_all(c)
    .await)?;
    batches_oldest_first(rows)
}

/// One bank batch.
pub(crate) async fn load_batch(
    conn: &mut Conn,
    batch_id: &str,
) -> Result<Option<BankBatch>, StoreError> {
    let row: Option<BatchRow> = on!(&mut *conn, |c| sqlx::query_as(&format!(
        "SELECT {BATCH_COLUMNS} FROM bank_batches WHERE batch_id = $1"
    ))
    .bind(batch_id)
    .fetch_optional(c)
    .await)?;
    row.map(BankBatch::try_from).transpose()
}

/// Every bank batch, oldest first.
pub async fn batches(store: &Store) -> Result<Vec<BankBatch>, StoreError> {
    let pool = store.db();
    let mut conn = pool.acquire().await?;
    load_batches(&mut conn).await
}

/// One bank batch.
pub async fn batch(store: &Store, batch_id: &str) -> Result<Option<BankBatch>, StoreError> {
    let pool = store.db();
    let mut conn = pool.acquire().await?;
    load_batch(&mut conn, batch_id).await
}

/// The bank batches that may not have been handed off yet: one of their payouts is still
/// `created` (found through `bank_batch_payouts` and the index of payouts by status), oldest
/// first.
pub(crate) async fn unfinished_batches(store: &Store) -> Result<Vec<BankBatch>, StoreError> {
    let pool = store.db();
    let rows: Vec<BatchRow> = on!(pool, |c| {
        sqlx::query_as(&format!(
        "SELECT {BATCH_COLUMNS} FROM bank_batches WHERE batch_id IN (\
         SELECT bp.batch_id FROM payouts AS p JOIN bank_batch_payouts AS bp ON bp.payout_id = p.payout_id \
         WHERE p.status = '{}' AND p.rail IN ('sepa', 'ach'))",
        PayoutStatus::Created
    ))
    .fetch_all(c)
    .await
    })?;
    batches_oldest_first(rows)
}

/// One page of the `created` payouts of `rail` in no bank batch yet: at most `limit`, with
/// ids after `after`, sorted by id as bytes (the batch id is derived from this order, not
/// from a locale: ids compare as bytes on both databases, migration 0009). A keyset read
/// through `payouts_by_status_and_id`, so a generation holds one page and one batch in
/// memory, whatever the number of payouts.
pub(crate) async fn unbatched_created(
    store: &Store,
    rail: Rail,
    after: &str,
    limit: usize,
) -> Result<Vec<super::payouts::PayoutRecord>, StoreError> {
    let pool = store.db();
    let columns = super::payouts::payout_columns_of("p");
    let rows: Vec<super::payouts::PayoutRow> = on!(pool, |c| sqlx::query_as(&format!(
        "SELECT {columns} FROM payouts AS p WHERE p.status = '{}' AND p.rail = $1 \
         AND p.payout_id > $2 \
         AND NOT EXISTS (SELECT 1 FROM bank_batch_payouts AS bp WHERE bp.payout_id = p.payout_id) \
         ORDER BY p.payout_id LIMIT $3",
        PayoutStatus::Created
    ))
    .bind(rail.as_str())
    .bind(after)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .fetch_all(c)
    .await)?;
    super::payouts::records(rows)
}

/// Whether any of `payout_ids` is in a bank batch already.
pub(crate) async fn any_batched(conn: &mut Conn, payout_ids: &[&str]) -> Result<bool, StoreError> {
    if payout_ids.is_empty() {
        return Ok(false);
    }
    let rows: Vec<(&str,)> = payout_ids.iter().map(|p| (*p,)).collect();
    let sql = format!(
        "SELECT 1 FROM {} JOIN bank_batch_payouts AS bp ON bp.payout_id = j.value ->> 0 LIMIT 1",
        Dialect::of(conn).json_rows(1, payout_ids.len())
    );
    let found = on!(&mut *conn, |c| sqlx::query(&sql)
        .bind(json_rows_param(&rows))
        .fetch_optional(c)
        .await
        .map(|row| row.is_some()))?;
    Ok(found)
}

/// How many ACH batches were generated on UTC day `day` (days since the epoch).
pub(crate) async fn ach_batches_on_day(conn: &mut Conn, day: i64) -> Result<usize, StoreError> {
    let start = day * crate::domain::time::MS_PER_DAY;
    let count: i64 = on!(&mut *conn, |c| {
        sqlx::query_scalar(
        "SELECT COUNT(*) FROM bank_batches WHERE rail = 'ach' AND generated_at_ms >= $1 AND generated_at_ms < $2",
    )
    .bind(start)
    .bind(start + crate::domain::time::MS_PER_DAY)
    .fetch_one(c)
    .await
    })?;
    usize::try_from(count).map_err(corrupt)
}

/// How a signed Solana attempt ended; `None` on [`AttemptRow`] while it is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptEnd {
    Landed,
    Failed,
    Expired,
}

impl AttemptEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptEnd::Landed => "landed",
            AttemptEnd::Failed => "failed",
            AttemptEnd::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Result<AttemptEnd, StoreError> {
        [AttemptEnd::Landed, AttemptEnd::Failed, AttemptEnd::Expired]
            .into_iter()
            .find(|e| e.as_str() == text)
            .ok_or_else(|| corrupt(format!("attempt outcome {text:?}")))
    }

    /// Whether the attempt settles or fails its payouts (`landed` or `failed`); an expired
    /// one never lands.
    pub(crate) fn is_final(self) -> bool {
        matches!(self, AttemptEnd::Landed | AttemptEnd::Failed)
    }
}

/// A signed attempt as the `solana_attempts` projection holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRow {
    pub attempt_id: String,
    pub payout_ids: Vec<String>,
    pub signature: String,
    pub blockhash: String,
    pub last_valid_block_height: u64,
    pub tx_base64: String,
    /// `[payout_id, wallet, amount_micro_usdc]`.
    pub transfers: Vec<(String, String, u64)>,
    /// `None` while open.
    pub outcome: Option<AttemptEnd>,
    pub slot: Option<i64>,
    pub reason: Option<String>,
    pub signed_at_ms: i64,
    pub resolved_at_ms: Option<i64>,
}

impl AttemptRow {
    /// Whether this attempt settles or fails its payouts (`landed` or `failed`).
    pub(crate) fn is_final(&self) -> bool {
        self.outcome.is_some_and(AttemptEnd::is_final)
    }
}

const ATTEMPT_COLUMNS: &str = "attempt_id, payout_ids, signature, blockhash, last_valid_block_height, tx_base64, transfers, outcome, slot, reason, signed_at_ms, resolved_at_ms";

/// A `solana_attempts` row as stored ([`ATTEMPT_COLUMNS`], read by name).
#[derive(sqlx::FromRow)]
struct StoredAttempt {
    attempt_id: String,
    payout_ids: String,
    signature: String,
    blockhash: String,
    last_valid_block_height: i64,
    tx_base64: String,
    transfers: String,
    outcome: Option<String>,
    slot: Option<i64>,
    reason: Option<String>,
    signed_at_ms: i64,
    resolved_at_ms: Option<i64>,
}

impl TryFrom<StoredAttempt> for AttemptRow {
    type Error = StoreError;

    fn try_from(r: StoredAttempt) -> Result<AttemptRow, StoreError> {
        Ok(AttemptRow {
            payout_ids: serde_json::from_str(&r.payout_ids).map_err(corrupt)?,
            last_valid_block_height: u64::try_from(r.last_valid_block_height).map_err(corrupt)?,
            transfers: serde_json::from_str(&r.transfers).map_err(corrupt)?,
            outcome: r.outcome.as_deref().map(AttemptEnd::parse).transpose()?,
            attempt_id: r.attempt_id,
            signature: r.signature,
            blockhash: r.blockhash,
            tx_base64: r.tx_base64,
            slot: r.slot,
            reason: r.reason,
            signed_at_ms: r.signed_at_ms,
            resolved_at_ms: r.resolved_at_ms,
        })
    }
}

/// Which attempts [`attempts`] lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempts {
    All,
    /// Not resolved yet.
    Open,
    /// Open, landed or failed: every attempt that holds its payouts.
    Holding,
    Landed,
    /// Landed attempts without payouts: the lookup-table maintenance transactions.
    LandedMaintenance,
}

impl Attempts {
    fn condition(self) -> &'static str {
        match self {
            Attempts::All => "1 = 1",
            Attempts::Open => "outcome IS NULL",
            Attempts::Holding => "outcome IS NULL OR outcome <> 'expired'",
            Attempts::Landed => "outcome = 'landed'",
            Attempts::LandedMaintenance => "outcome = 'landed' AND payout_ids = '[]'",
        }
    }
}

/// The attempts of a kind, oldest first.
pub async fn attempts(store: &Store, which: Attempts) -> Result<Vec<AttemptRow>, StoreError> {
    let pool = store.db();
    let rows: Vec<StoredAttempt> = on!(pool, |c| {
        sqlx::query_as(&format!(
        "SELECT {ATTEMPT_COLUMNS} FROM solana_attempts WHERE {} ORDER BY signed_at_ms, signed_seq, attempt_id",
        which.condition()
    ))
    .fetch_all(c)
    .await
    })?;
    rows.into_iter().map(AttemptRow::try_from).collect()
}

/// One attempt by id.
pub(crate) async fn attempt_by_id(
    conn: &mut Conn,
    attempt_id: &str,
) -> Result<Option<AttemptRow>, StoreError> {
    let row: Option<StoredAttempt> = on!(&mut *conn, |c| sqlx::query_as(&format!(
        "SELECT {ATTEMPT_COLUMNS} FROM solana_attempts WHERE attempt_id = $1"
    ))
    .bind(attempt_id)
    .fetch_optional(c)
    .await)?;
    row.map(AttemptRow::try_from).transpose()
}

/// The landed attempt whose transaction has `signature` (a Solana payout's reference).
pub(crate) async fn landed_attempt_by_signature(
    store: &Store,
    signature: &str,
) -> Result<Option<AttemptRow>, StoreError> {
    let row: Option<StoredAttempt> = on!(store.db(), |c| {
        sqlx::query_as(&format!(
        "SELECT {ATTEMPT_COLUMNS} FROM solana_attempts WHERE signature = $1 AND outcome = 'landed'"
    ))
    .bind(signature)
    .fetch_optional(c)
    .await
    })?;
    row.map(AttemptRow::try_from).transpose()
}

/// The open lookup-table maintenance attempts (no payouts, no outcome yet), as (attempt id,
/// signed transaction in base64).
pub(crate) async fn open_maintenance(conn: &mut Conn) -> Result<Vec<(String, String)>, StoreError> {
    let rows: Vec<OpenMaintenance> = on!(&mut *conn, |c| {
        sqlx::query_as(
        "SELECT attempt_id, tx_base64 FROM solana_attempts WHERE outcome IS NULL AND payout_ids = '[]' ORDER BY attempt_id",
    )
    .fetch_all(c)
    .await
    })?;
    Ok(rows
        .into_iter()
        .map(|r| (r.attempt_id, r.tx_base64))
        .collect())
}

#[derive(sqlx::FromRow)]
struct OpenMaintenance {
    attempt_id: String,
    tx_base64: String,
}

/// An attempt that holds a payout.
#[derive(sqlx::FromRow)]
struct Claim {
    payout_id: String,
    attempt_id: String,
    outcome: Option<String>,
}

/// The attempts that hold a payout, open or landed/failed, as (attempt id, outcome).
pub type Claims = HashMap<String, Vec<(String, Option<AttemptEnd>)>>;

/// For each of `payout_ids`: the attempts that hold it and are open or landed/failed (a
/// payout in none of them may be signed; expired attempts never land). One statement,
/// through the per-payout index `solana_attempt_payouts`.
pub(crate) async fn claims(conn: &mut Conn, payout_ids: &[&str]) -> Result<Claims, StoreError> {
    let mut out: Claims = HashMap::new();
    if payout_ids.is_empty() {
        return Ok(out);
    }
    let rows: Vec<(&str,)> = payout_ids.iter().map(|p| (*p,)).collect();
    let sql = format!(
        "SELECT ap.payout_id, a.attempt_id, a.outcome FROM {} \
         JOIN solana_attempt_payouts AS ap ON ap.payout_id = j.value ->> 0 \
         JOIN solana_attempts AS a ON a.attempt_id = ap.attempt_id \
         WHERE ({}) ORDER BY a.signed_at_ms, a.attempt_id",
        Dialect::of(conn).json_rows(1, payout_ids.len()),
        Attempts::Holding.condition()
    );
    let claims: Vec<Claim> = on!(&mut *conn, |c| sqlx::query_as(&sql)
        .bind(json_rows_param(&rows))
        .fetch_all(c)
        .await)?;
    for c in claims {
        let outcome = c.outcome.as_deref().map(AttemptEnd::parse).transpose()?;
        out.entry(c.payout_id)
            .or_default()
            .push((c.attempt_id, outcome));
    }
    Ok(out)
}

/// What the ledger knows about a payout, for the checks of a signed attempt.
#[derive(Clone, Debug)]
pub struct PayoutFacts {
    pub payout_id: String,
    pub provider_id: String,
    pub rail: Rail,
    pub status: PayoutStatus,
    pub amount_micro_usdc: i64,
    /// The method snapshot, as JSON.
    pub method: String,
    /// The payment reference (a Solana signature or a bank batch id), once it has one.
    pub reference: Option<String>,
}

impl PayoutFacts {
    /// The wallet of the payout's method snapshot, if it is a Solana method.
    pub fn wallet(&self) -> Option<String> {
        method_wallet(&self.method)
    }
}

/// A payout's facts as stored ([`FACTS_COLUMNS`], read by name).
#[derive(sqlx::FromRow)]
struct FactsRow {
    payout_id: String,
    provider_id: String,
    rail: String,
    status: String,
    amount_micro_usdc: i64,
    method: String,
    reference: Option<String>,
}

impl TryFrom<FactsRow> for PayoutFacts {
    type Error = StoreError;

    fn try_from(r: FactsRow) -> Result<PayoutFacts, StoreError> {
        Ok(PayoutFacts {
            status: PayoutStatus::parse(&r.status).map_err(corrupt)?,
            payout_id: r.payout_id,
            provider_id: r.provider_id,
            rail: Rail::parse(&r.rail).map_err(corrupt)?,
            amount_micro_usdc: r.amount_micro_usdc,
            method: r.method,
            reference: r.reference,
        })
    }
}

/// The wallet of a payout method snapshot (JSON), if it is a Solana method.
pub fn method_wallet(method_json: &str) -> Option<String> {
    match serde_json::from_str::<PayoutMethod>(method_json) {
        Ok(PayoutMethod::Solana { wallet }) => Some(wallet),
        _ => None,
    }
}

/// The columns [`FactsRow`] reads.
const FACTS_COLUMNS: &str =
    "payout_id, provider_id, rail, status, amount_micro_usdc, method, reference";

/// The facts of the payouts named, by id (unknown ids are absent).
pub(crate) async fn payout_facts(
    conn: &mut Conn,
    payout_ids: &[String],
) -> Result<HashMap<String, PayoutFacts>, StoreError> {
    let mut out = HashMap::new();
    for chunk in payout_ids.chunks(IDS_PER_QUERY_MAX) {
        let placeholders: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT {FACTS_COLUMNS} FROM payouts WHERE payout_id IN ({})",
            placeholders.join(",")
        );
        let rows: Vec<FactsRow> = on!(&mut *conn, |c| {
            let mut query = sqlx::query_as(&sql);
            for id in chunk {
                query = query.bind(id);
            }
            query.fetch_all(c).await
        })?;
        for r in rows {
            let facts = PayoutFacts::try_from(r)?;
            out.insert(facts.payout_id.clone(), facts);
        }
    }
    Ok(out)
}

/// The Solana payouts in a set of statuses, oldest first.
pub(crate) async fn solana_payouts(
    store: &Store,
    status: fn(PayoutStatus) -> bool,
) -> Result<Vec<PayoutFacts>, StoreError> {
    let pool = store.db();
    let rows: Vec<FactsRow> = on!(pool, |c| {
        sqlx::query_as(&format!(
        "SELECT {FACTS_COLUMNS} FROM payouts WHERE rail = 'solana' AND status IN ({}) ORDER BY created_at_ms, payout_id",
        PayoutStatus::sql_list(status)
    ))
    .fetch_all(c)
    .await
    })?;
    rows.into_iter().map(PayoutFacts::try_from).collect()
}
