//! The rails' projections as typed rows: `bank_batches` (the bank rail's files),
//! `solana_attempts` (the Solana payer's signed transactions) and the payout facts both
//! rails and their ledger commands check against. The only SQL of the rails.

use std::collections::HashMap;

use sqlx::{AnyConnection, AnyPool, Row};

use super::{Dialect, StoreError, json_rows_param};
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

fn batch_from_row(r: &sqlx::any::AnyRow) -> Result<BankBatch, StoreError> {
    let ids: String = r.try_get(4)?;
    Ok(BankBatch {
        batch_id: r.try_get(0)?,
        rail: Rail::parse(&r.try_get::<String, _>(1)?).map_err(corrupt)?,
        file_name: r.try_get(2)?,
        sha256: r.try_get(3)?,
        payout_ids: serde_json::from_str(&ids).map_err(corrupt)?,
        total_cents: r.try_get(5)?,
        currency: r.try_get(6)?,
        status: BatchStatus::parse(&r.try_get::<String, _>(7)?).map_err(corrupt)?,
        generated_at_ms: r.try_get(8)?,
        updated_at_ms: r.try_get(9)?,
    })
}

/// Every bank batch, oldest first.
pub async fn load_batches(conn: &mut AnyConnection) -> Result<Vec<BankBatch>, StoreError> {
    let rows = sqlx::query(&format!("SELECT {BATCH_COLUMNS} FROM bank_batches"))
        .fetch_all(&mut *conn)
        .await?;
    let mut out = rows
        .iter()
        .map(batch_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    oldest_first(&mut out);
    Ok(out)
}

/// One bank batch.
pub async fn load_batch(
    conn: &mut AnyConnection,
    batch_id: &str,
) -> Result<Option<BankBatch>, StoreError> {
    let row = sqlx::query(&format!(
        "SELECT {BATCH_COLUMNS} FROM bank_batches WHERE batch_id = $1"
    ))
    .bind(batch_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(batch_from_row).transpose()
}

/// Every bank batch, oldest first.
pub async fn batches(pool: &AnyPool) -> Result<Vec<BankBatch>, StoreError> {
    let mut conn = pool.acquire().await?;
    load_batches(&mut conn).await
}

/// One bank batch.
pub async fn batch(pool: &AnyPool, batch_id: &str) -> Result<Option<BankBatch>, StoreError> {
    let mut conn = pool.acquire().await?;
    load_batch(&mut conn, batch_id).await
}

/// The bank batches that may not have been handed off yet: one of their payouts is still
/// `created` (found through `bank_batch_payouts` and the index of payouts by status), oldest
/// first.
pub async fn unfinished_batches(pool: &AnyPool) -> Result<Vec<BankBatch>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT {BATCH_COLUMNS} FROM bank_batches WHERE batch_id IN (\
         SELECT bp.batch_id FROM payouts AS p JOIN bank_batch_payouts AS bp ON bp.payout_id = p.payout_id \
         WHERE p.status = '{}' AND p.rail IN ('sepa', 'ach'))",
        PayoutStatus::Created
    ))
    .fetch_all(pool)
    .await?;
    let mut out = rows
        .iter()
        .map(batch_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    oldest_first(&mut out);
    Ok(out)
}

fn oldest_first(batches: &mut [BankBatch]) {
    batches.sort_by(|a, b| (a.generated_at_ms, &a.batch_id).cmp(&(b.generated_at_ms, &b.batch_id)));
}

/// One page of the `created` payouts of `rail` in no bank batch yet: at most `limit`, with
/// ids after `after`, sorted by id as bytes (the batch id is derived from this order, not
/// from a collation). A keyset read through `payouts_by_status_and_id`, so a generation
/// holds one page and one batch in memory, whatever the number of payouts.
pub async fn unbatched_created(
    pool: &AnyPool,
    rail: Rail,
    after: &str,
    limit: usize,
) -> Result<Vec<super::payouts::PayoutRecord>, StoreError> {
    let mut conn = pool.acquire().await?;
    let bytes = match Dialect::of(&conn) {
        Dialect::Postgres => " COLLATE \"C\"",
        Dialect::Sqlite => "",
    };
    let columns = super::payouts::payout_columns_of("p");
    let rows = sqlx::query(&format!(
        "SELECT {columns} FROM payouts AS p WHERE p.status = '{}' AND p.rail = $1 \
         AND p.payout_id{bytes} > $2 \
         AND NOT EXISTS (SELECT 1 FROM bank_batch_payouts AS bp WHERE bp.payout_id = p.payout_id) \
         ORDER BY p.payout_id{bytes} LIMIT $3",
        PayoutStatus::Created
    ))
    .bind(rail.as_str())
    .bind(after)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(super::payouts::payout_from_row).collect()
}

/// Whether any of `payout_ids` is in a bank batch already.
pub async fn any_batched(
    conn: &mut AnyConnection,
    payout_ids: &[&str],
) -> Result<bool, StoreError> {
    if payout_ids.is_empty() {
        return Ok(false);
    }
    let rows: Vec<(&str,)> = payout_ids.iter().map(|p| (*p,)).collect();
    let sql = format!(
        "SELECT 1 FROM {} JOIN bank_batch_payouts AS bp ON bp.payout_id = j.value ->> 0 LIMIT 1",
        Dialect::of(conn).json_rows(1, payout_ids.len())
    );
    let found = sqlx::query(&sql)
        .bind(json_rows_param(&rows))
        .fetch_optional(&mut *conn)
        .await?;
    Ok(found.is_some())
}

/// How many ACH batches were generated on UTC day `day` (days since the epoch).
pub async fn ach_batches_on_day(conn: &mut AnyConnection, day: i64) -> Result<usize, StoreError> {
    let start = day * crate::domain::time::MS_PER_DAY;
    let row = sqlx::query(
        "SELECT COUNT(*) FROM bank_batches WHERE rail = 'ach' AND generated_at_ms >= $1 AND generated_at_ms < $2",
    )
    .bind(start)
    .bind(start + crate::domain::time::MS_PER_DAY)
    .fetch_one(&mut *conn)
    .await?;
    let count: i64 = row.try_get(0)?;
    usize::try_from(count).map_err(corrupt)
}

/// The payout method a provider has now (`None`: no provider, or none set).
pub async fn provider_method(
    pool: &AnyPool,
    provider_id: &str,
) -> Result<Option<PayoutMethod>, StoreError> {
    let row = sqlx::query("SELECT payout_method FROM providers WHERE provider_id = $1")
        .bind(provider_id)
        .fetch_optional(pool)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let text: Option<String> = row.try_get(0)?;
    text.map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(corrupt)
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
    pub fn is_final(self) -> bool {
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
    pub fn is_final(&self) -> bool {
        self.outcome.is_some_and(AttemptEnd::is_final)
    }
}

const ATTEMPT_COLUMNS: &str = "attempt_id, payout_ids, signature, blockhash, last_valid_block_height, tx_base64, transfers, outcome, slot, reason, signed_at_ms, resolved_at_ms";

fn attempt_from_row(r: &sqlx::any::AnyRow) -> Result<AttemptRow, StoreError> {
    let payout_ids: String = r.try_get(1)?;
    let transfers: String = r.try_get(6)?;
    let lvbh: i64 = r.try_get(4)?;
    let outcome: Option<String> = r.try_get(7)?;
    Ok(AttemptRow {
        attempt_id: r.try_get(0)?,
        payout_ids: serde_json::from_str(&payout_ids).map_err(corrupt)?,
        signature: r.try_get(2)?,
        blockhash: r.try_get(3)?,
        last_valid_block_height: u64::try_from(lvbh).map_err(corrupt)?,
        tx_base64: r.try_get(5)?,
        transfers: serde_json::from_str(&transfers).map_err(corrupt)?,
        outcome: outcome.as_deref().map(AttemptEnd::parse).transpose()?,
        slot: r.try_get(8)?,
        reason: r.try_get(9)?,
        signed_at_ms: r.try_get(10)?,
        resolved_at_ms: r.try_get(11)?,
    })
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
pub async fn attempts(pool: &AnyPool, which: Attempts) -> Result<Vec<AttemptRow>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT {ATTEMPT_COLUMNS} FROM solana_attempts WHERE {} ORDER BY signed_at_ms, attempt_id",
        which.condition()
    ))
    .fetch_all(pool)
    .await?;
    rows.iter().map(attempt_from_row).collect()
}

/// One attempt by id.
pub async fn attempt_by_id(
    conn: &mut AnyConnection,
    attempt_id: &str,
) -> Result<Option<AttemptRow>, StoreError> {
    let row = sqlx::query(&format!(
        "SELECT {ATTEMPT_COLUMNS} FROM solana_attempts WHERE attempt_id = $1"
    ))
    .bind(attempt_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(attempt_from_row).transpose()
}

/// The open lookup-table maintenance attempts (no payouts, no outcome yet), as (attempt id,
/// signed transaction in base64).
pub async fn open_maintenance(
    conn: &mut AnyConnection,
) -> Result<Vec<(String, String)>, StoreError> {
    let rows = sqlx::query(
        "SELECT attempt_id, tx_base64 FROM solana_attempts WHERE outcome IS NULL AND payout_ids = '[]' ORDER BY attempt_id",
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| Ok((r.try_get::<String, _>(0)?, r.try_get::<String, _>(1)?)))
        .collect()
}

/// The attempts that hold a payout, open or landed/failed, as (attempt id, outcome).
pub type Claims = HashMap<String, Vec<(String, Option<AttemptEnd>)>>;

/// For each of `payout_ids`: the attempts that hold it and are open or landed/failed (a
/// payout in none of them may be signed; expired attempts never land). One statement,
/// through the per-payout index `solana_attempt_payouts`.
pub async fn claims(conn: &mut AnyConnection, payout_ids: &[&str]) -> Result<Claims, StoreError> {
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
    for r in sqlx::query(&sql)
        .bind(json_rows_param(&rows))
        .fetch_all(&mut *conn)
        .await?
    {
        let payout_id: String = r.try_get(0)?;
        let attempt_id: String = r.try_get(1)?;
        let outcome: Option<String> = r.try_get(2)?;
        let outcome = outcome.as_deref().map(AttemptEnd::parse).transpose()?;
        out.entry(payout_id)
            .or_default()
            .push((attempt_id, outcome));
    }
    Ok(out)
}

/// What the ledger knows about a payout, for the checks of a signed attempt.
#[derive(Clone, Debug)]
pub struct PayoutFacts {
    pub payout_id: String,
    pub provider_id: String,
    pub rail: String,
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

    fn from_row(r: &sqlx::any::AnyRow) -> Result<PayoutFacts, StoreError> {
        Ok(PayoutFacts {
            payout_id: r.try_get(0)?,
            provider_id: r.try_get(1)?,
            rail: r.try_get(2)?,
            status: PayoutStatus::parse(&r.try_get::<String, _>(3)?).map_err(corrupt)?,
            amount_micro_usdc: r.try_get(4)?,
            method: r.try_get(5)?,
            reference: r.try_get(6)?,
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

/// The columns [`PayoutFacts::from_row`] reads, in order.
const FACTS_COLUMNS: &str =
    "payout_id, provider_id, rail, status, amount_micro_usdc, method, reference";

/// The facts of the payouts named, by id (unknown ids are absent).
pub async fn payout_facts(
    conn: &mut AnyConnection,
    payout_ids: &[String],
) -> Result<HashMap<String, PayoutFacts>, StoreError> {
    let mut out = HashMap::new();
    for chunk in payout_ids.chunks(IDS_PER_QUERY_MAX) {
        let placeholders: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT {FACTS_COLUMNS} FROM payouts WHERE payout_id IN ({})",
            placeholders.join(",")
        );
        let mut query = sqlx::query(&sql);
        for id in chunk {
            query = query.bind(id);
        }
        for r in query.fetch_all(&mut *conn).await? {
            let facts = PayoutFacts::from_row(&r)?;
            out.insert(facts.payout_id.clone(), facts);
        }
    }
    Ok(out)
}

/// The Solana payouts in a set of statuses, oldest first.
pub async fn solana_payouts(
    pool: &AnyPool,
    status: fn(PayoutStatus) -> bool,
) -> Result<Vec<PayoutFacts>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT {FACTS_COLUMNS} FROM payouts WHERE rail = 'solana' AND status IN ({}) ORDER BY created_at_ms, payout_id",
        PayoutStatus::sql_list(status)
    ))
    .fetch_all(pool)
    .await?;
    rows.iter().map(PayoutFacts::from_row).collect()
}
