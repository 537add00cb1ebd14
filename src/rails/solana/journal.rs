//! [`LedgerJournal`]: the payer's durable journal ([`settle_solana::Journal`]) on the ledger.
//!
//! # Events and transactions
//!
//! - `record_signed`: `solana_tx.signed` (exact signed bytes, signature, blockhash, last
//!   valid block height, transfers) on the **platform** stream, idempotency key
//!   `solana_tx:{attempt_id}:signed`, in one transaction that first checks every payout:
//!   it exists, is on the Solana rail, is `created` or `submitted`, the transfer pays its
//!   amount to the wallet of its method snapshot, and no other attempt that is open or
//!   landed/failed holds it. The call returns only after that commit, so the payer never
//!   sends bytes the ledger does not hold. Then each payout is marked `submitted` (reference
//!   = signature) in its provider stream, one transaction each, idempotent per attempt
//!   (`payout:{payout_id}:submitted:{attempt_id}`).
//! - `record_outcome`: `solana_tx.resolved` (`landed`, `failed`, `expired`) on the platform
//!   stream (`solana_tx:{attempt_id}:resolved`), then per payout in its provider stream:
//!   landed → `payout.settled` (reference = signature), failed → `payout.failed` with the
//!   on-chain reason (funds back to payable), expired → nothing (the payer re-signs).
//! - [`LedgerJournal::repair`] closes the window between the platform event and the
//!   per-payout events after a crash: every landed/failed attempt whose payouts are still
//!   `created`/`submitted` is applied, and every payout of an open attempt still `created`
//!   is marked `submitted`.
//!
//! No transaction touches more than one stream. Crash tests abort the process at the
//! named [`failpoints`].

use std::collections::{BTreeMap, HashMap, HashSet};

use async_trait::async_trait;
use base64::Engine;
use sqlx::{AnyConnection, Row};

use settle_solana::{AttemptOutcome, Journal, JournalError, Pubkey, SignedAttempt, Transfer};

use crate::domain::event::{
    EventBody, PLATFORM_STREAM, PayoutMethod, Rail, SolanaTxResolved, SolanaTxSigned,
};
use crate::domain::payout::PayoutStatus;
use crate::failpoint::failpoint;
use crate::ledger::{
    Actor, Applied, Ledger, LedgerError, content_hash, duplicate_or_conflict, find_idem, reject,
};
use crate::store::NewEvent;

/// The named failpoints of the Solana rail (`SETTLE_FAILPOINT=<name>[:<n>]`), in the order
/// a payment reaches them.
pub mod failpoints {
    /// Signed, not yet persisted (entry of `record_signed`).
    pub const AFTER_SIGN: &str = "solana.after_sign";
    /// `solana_tx.signed` committed; the payouts are not yet marked `submitted`.
    pub const AFTER_PERSIST: &str = "solana.after_persist";
    /// The payouts are marked `submitted`; the payer sends next.
    pub const BEFORE_SEND: &str = "solana.before_send";
    /// The node accepted the transaction (reached in the chain adapter after the send).
    pub const AFTER_SEND: &str = "solana.after_send";
    /// The outcome is known, `solana_tx.resolved` not yet written.
    pub const BEFORE_CONFIRM: &str = "solana.before_confirm";
    /// `solana_tx.resolved` committed; no payout settled or failed yet.
    pub const AFTER_CONFIRM: &str = "solana.after_confirm";
    /// The first payout of a resolved attempt was settled or failed, not the others.
    pub const MID_APPLY: &str = "solana.mid_apply";

    pub const ALL: [&str; 7] = [
        AFTER_SIGN,
        AFTER_PERSIST,
        BEFORE_SEND,
        AFTER_SEND,
        BEFORE_CONFIRM,
        AFTER_CONFIRM,
        MID_APPLY,
    ];
}

/// Longest on-chain error kept in a failure reason (the rest is cut).
const CHAIN_REASON_CHARS_MAX: usize = 300;
/// Payout ids per `IN (…)` query.
const IDS_PER_QUERY_MAX: usize = 500;
/// Per-payout transactions (on distinct provider streams) in flight at once.
const PAYOUT_WRITES_CONCURRENCY: usize = 8;

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
    /// `landed`, `failed`, `expired`, or `None` while open.
    pub outcome: Option<String>,
    pub slot: Option<i64>,
    pub reason: Option<String>,
    pub signed_at_ms: i64,
    pub resolved_at_ms: Option<i64>,
}

impl AttemptRow {
    /// Whether this attempt settles or fails its payouts (`landed` or `failed`).
    pub fn is_final(&self) -> bool {
        matches!(self.outcome.as_deref(), Some("landed" | "failed"))
    }

    /// The attempt as the payer needs it.
    pub fn to_signed(&self) -> Result<SignedAttempt, JournalError> {
        let transfers = self
            .transfers
            .iter()
            .map(|(payout_id, wallet, amount)| {
                Ok(Transfer {
                    payout_id: payout_id.clone(),
                    wallet: wallet
                        .parse::<Pubkey>()
                        .map_err(|e| JournalError(format!("wallet {wallet}: {e}")))?,
                    amount_micro_usdc: *amount,
                })
            })
            .collect::<Result<Vec<_>, JournalError>>()?;
        let tx_bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.tx_base64)
            .map_err(|e| JournalError(format!("tx of {}: {e}", self.attempt_id)))?;
        Ok(SignedAttempt {
            attempt_id: self.attempt_id.clone(),
            payout_ids: self.payout_ids.clone(),
            transfers,
            tx_bytes,
            signature: self.signature.clone(),
            blockhash: self.blockhash.clone(),
            last_valid_block_height: self.last_valid_block_height,
        })
    }
}

const ATTEMPT_COLUMNS: &str = "attempt_id, payout_ids, signature, blockhash, last_valid_block_height, tx_base64, transfers, outcome, slot, reason, signed_at_ms, resolved_at_ms";

fn corrupt(e: impl std::fmt::Display) -> LedgerError {
    LedgerError::Rejected(crate::domain::DomainError::new(
        "corrupt_projection",
        e.to_string(),
    ))
}

fn attempt_from_row(r: &sqlx::any::AnyRow) -> Result<AttemptRow, LedgerError> {
    let payout_ids: String = r.try_get(1)?;
    let transfers: String = r.try_get(6)?;
    let lvbh: i64 = r.try_get(4)?;
    Ok(AttemptRow {
        attempt_id: r.try_get(0)?,
        payout_ids: serde_json::from_str(&payout_ids).map_err(corrupt)?,
        signature: r.try_get(2)?,
        blockhash: r.try_get(3)?,
        last_valid_block_height: u64::try_from(lvbh).map_err(corrupt)?,
        tx_base64: r.try_get(5)?,
        transfers: serde_json::from_str(&transfers).map_err(corrupt)?,
        outcome: r.try_get(7)?,
        slot: r.try_get(8)?,
        reason: r.try_get(9)?,
        signed_at_ms: r.try_get(10)?,
        resolved_at_ms: r.try_get(11)?,
    })
}

/// Attempts matching a `WHERE` clause without parameters, oldest first.
async fn attempts_where(
    conn: &mut AnyConnection,
    condition: &str,
) -> Result<Vec<AttemptRow>, LedgerError> {
    let rows = sqlx::query(&format!(
        "SELECT {ATTEMPT_COLUMNS} FROM solana_attempts WHERE {condition} ORDER BY signed_at_ms, attempt_id"
    ))
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(attempt_from_row).collect()
}

/// One attempt by id.
async fn attempt_by_id(
    conn: &mut AnyConnection,
    attempt_id: &str,
) -> Result<Option<AttemptRow>, LedgerError> {
    let row = sqlx::query(&format!(
        "SELECT {ATTEMPT_COLUMNS} FROM solana_attempts WHERE attempt_id = $1"
    ))
    .bind(attempt_id)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(attempt_from_row).transpose()
}

/// For each payout: the attempts that hold it and are open or landed/failed (a payout in
/// none of them may be signed; expired attempts never land).
///
/// Scans the attempts that are not expired: the `solana_attempts` projection has no
/// per-payout index.
async fn claims(
    conn: &mut AnyConnection,
) -> Result<HashMap<String, Vec<(String, Option<String>)>>, LedgerError> {
    let rows = sqlx::query(
        "SELECT attempt_id, payout_ids, outcome FROM solana_attempts WHERE outcome IS NULL OR outcome <> 'expired'",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut out: HashMap<String, Vec<(String, Option<String>)>> = HashMap::new();
    for r in rows {
        let attempt_id: String = r.try_get(0)?;
        let ids: String = r.try_get(1)?;
        let outcome: Option<String> = r.try_get(2)?;
        let ids: Vec<String> = serde_json::from_str(&ids).map_err(corrupt)?;
        for id in ids {
            out.entry(id)
                .or_default()
                .push((attempt_id.clone(), outcome.clone()));
        }
    }
    Ok(out)
}

/// What the ledger knows about a payout, for the checks of `record_signed`.
#[derive(Clone, Debug)]
pub(crate) struct PayoutFacts {
    pub payout_id: String,
    pub provider_id: String,
    pub rail: String,
    pub status: PayoutStatus,
    pub amount_micro_usdc: i64,
    pub method: String,
}

/// The columns [`PayoutFacts::from_row`] reads, in order.
const FACTS_COLUMNS: &str = "payout_id, provider_id, rail, status, amount_micro_usdc, method";

impl PayoutFacts {
    fn from_row(r: &sqlx::any::AnyRow) -> Result<PayoutFacts, LedgerError> {
        Ok(PayoutFacts {
            payout_id: r.try_get(0)?,
            provider_id: r.try_get(1)?,
            rail: r.try_get(2)?,
            status: PayoutStatus::parse(&r.try_get::<String, _>(3)?)?,
            amount_micro_usdc: r.try_get(4)?,
            method: r.try_get(5)?,
        })
    }
}

async fn payout_facts(
    conn: &mut AnyConnection,
    payout_ids: &[String],
) -> Result<HashMap<String, PayoutFacts>, LedgerError> {
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

/// The wallet of a payout's method snapshot, if it is a Solana method.
pub(crate) fn method_wallet(method_json: &str) -> Option<String> {
    match serde_json::from_str::<PayoutMethod>(method_json) {
        Ok(PayoutMethod::Solana { wallet }) => Some(wallet),
        _ => None,
    }
}

/// An id as the event schemas accept it: 1..=128 of `[A-Za-z0-9._:-]`.
fn is_schema_id(text: &str) -> bool {
    (1..=128).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// An on-chain error as a single line of bounded length (never empty).
pub(crate) fn clean_reason(reason: &str) -> String {
    let text: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let mut text: String = text.chars().take(CHAIN_REASON_CHARS_MAX).collect();
    if text.is_empty() {
        text = "unknown error".to_owned();
    }
    text
}

fn journal_error(e: LedgerError) -> JournalError {
    JournalError(e.to_string())
}

/// What [`LedgerJournal::repair`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RepairReport {
    /// Payouts settled from landed attempts.
    pub settled: usize,
    /// Payouts failed from failed attempts.
    pub failed: usize,
    /// Payouts of open attempts marked `submitted`.
    pub submitted: usize,
}

/// The payer's journal on the ledger. See the module docs.
#[derive(Clone)]
pub struct LedgerJournal {
    ledger: Ledger,
    actor: Actor,
}

impl LedgerJournal {
    /// The attempts that hold each payout: open, landed or failed (see [`claims`]).
    async fn claimed(
        &self,
    ) -> Result<HashMap<String, Vec<(String, Option<String>)>>, JournalError> {
        let mut conn = self
            .ledger
            .store
            .pool()
            .acquire()
            .await
            .map_err(|e| JournalError(e.to_string()))?;
        claims(&mut conn).await.map_err(journal_error)
    }

    pub fn new(ledger: Ledger) -> LedgerJournal {
        LedgerJournal {
            ledger,
            actor: Actor::system("solana"),
        }
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Every attempt, oldest first.
    pub async fn attempts(&self) -> Result<Vec<AttemptRow>, LedgerError> {
        let mut conn = self.ledger.store.pool().acquire().await?;
        attempts_where(&mut conn, "1 = 1").await
    }

    /// Applies what a crash left half done: landed/failed attempts whose payouts are still
    /// `created`/`submitted` settle/fail them; payouts of open attempts still `created`
    /// are marked `submitted`. Idempotent.
    pub async fn repair(&self) -> Result<RepairReport, LedgerError> {
        let mut report = RepairReport::default();
        let mut conn = self.ledger.store.pool().acquire().await?;
        let unfinished: HashMap<String, PayoutStatus> = sqlx::query(&format!(
            "SELECT payout_id, status FROM payouts WHERE rail = 'solana' AND status IN ({})",
            PayoutStatus::sql_list(PayoutStatus::is_in_transit)
        ))
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| {
            let status = PayoutStatus::parse(&r.try_get::<String, _>(1)?)?;
            Ok((r.try_get(0)?, status))
        })
        .collect::<Result<_, LedgerError>>()?;
        if unfinished.is_empty() {
            return Ok(report);
        }
        let attempts = attempts_where(&mut conn, "outcome IS NULL OR outcome <> 'expired'").await?;
        drop(conn);
        for attempt in attempts {
            let pending: Vec<&String> = attempt
                .payout_ids
                .iter()
                .filter(|id| unfinished.contains_key(*id))
                .collect();
            if pending.is_empty() {
                continue;
            }
            if attempt.is_final() {
                tracing::warn!(attempt_id = %attempt.attempt_id, payouts = pending.len(), outcome = ?attempt.outcome, "repair: applying a resolved attempt");
                let applied = self.apply_resolved(&attempt).await?;
                if attempt.outcome.as_deref() == Some("landed") {
                    report.settled += applied;
                } else {
                    report.failed += applied;
                }
            } else if attempt.outcome.is_none() {
                for id in pending {
                    if unfinished.get(id) == Some(&PayoutStatus::Created) {
                        let facts = self.facts_of(id).await?;
                        if self
                            .mark_submitted(&facts, &attempt.attempt_id, &attempt.signature)
                            .await?
                            == Applied::Accepted
                        {
                            report.submitted += 1;
                        }
                    }
                }
            }
        }
        Ok(report)
    }

    async fn facts_of(&self, payout_id: &str) -> Result<PayoutFacts, LedgerError> {
        let mut conn = self.ledger.store.pool().acquire().await?;
        let mut facts = payout_facts(&mut conn, &[payout_id.to_owned()]).await?;
        match facts.remove(payout_id) {
            Some(f) => Ok(f),
            None => reject("unknown_payout", format!("no payout {payout_id}")),
        }
    }

    /// Marks a payout `submitted` with the attempt's signature (a ledger command on its
    /// provider stream, idempotent per attempt). A payout already settled or failed is
    /// left alone.
    async fn mark_submitted(
        &self,
        facts: &PayoutFacts,
        attempt_id: &str,
        signature: &str,
    ) -> Result<Applied, LedgerError> {
        self.ledger
            .submit_payout_attempt(
                &facts.payout_id,
                &facts.provider_id,
                attempt_id,
                signature,
                &self.actor,
            )
            .await
    }

    /// Applies a landed/failed attempt to its payouts (one transaction per payout, on its
    /// provider stream; the first alone, then the others concurrently); returns how many
    /// changed now.
    async fn apply_resolved(&self, attempt: &AttemptRow) -> Result<usize, LedgerError> {
        let Some((first, rest)) = attempt.payout_ids.split_first() else {
            return Ok(0);
        };
        let mut changed = 0;
        if self.apply_one(attempt, first).await? == Applied::Accepted {
            changed += 1;
        }
        failpoint(failpoints::MID_APPLY);
        let mut applied: Vec<Result<Applied, LedgerError>> = Vec::with_capacity(rest.len());
        for chunk in rest.chunks(PAYOUT_WRITES_CONCURRENCY) {
            let mut writes = Vec::with_capacity(chunk.len());
            for payout_id in chunk {
                writes.push(self.apply_one(attempt, payout_id));
            }
            applied.extend(futures::future::join_all(writes).await);
        }
        for a in applied {
            if a? == Applied::Accepted {
                changed += 1;
            }
        }
        Ok(changed)
    }

    async fn apply_one(
        &self,
        attempt: &AttemptRow,
        payout_id: &str,
    ) -> Result<Applied, LedgerError> {
        match attempt.outcome.as_deref() {
            Some("landed") => {
                self.ledger
                    .settle_payout(payout_id, &attempt.signature, &self.actor)
                    .await
            }
            Some("failed") => {
                let reason = format!(
                    "solana transaction {} failed on chain: {}",
                    attempt.signature,
                    attempt.reason.as_deref().unwrap_or("unknown error")
                );
                self.ledger
                    .fail_payout(payout_id, &reason, &self.actor)
                    .await
            }
            _ => Ok(Applied::Duplicate),
        }
    }

    /// Fails a payout the payer never signed (e.g. its simulation proved the transfer
    /// cannot succeed): its amount goes back to payable and the next run pays it again.
    pub async fn fail_unsent(&self, payout_id: &str, reason: &str) -> Result<Applied, LedgerError> {
        self.ledger
            .fail_payout(payout_id, &clean_reason(reason), &self.actor)
            .await
    }

    async fn persist_signed(
        &self,
        attempt: &SignedAttempt,
    ) -> Result<Vec<PayoutFacts>, LedgerError> {
        if !is_schema_id(&attempt.attempt_id) {
            return reject(
                "invalid_attempt",
                format!("attempt id {:?} is not a valid id", attempt.attempt_id),
            );
        }
        if attempt.transfers.is_empty()
            || attempt.payout_ids
                != attempt
                    .transfers
                    .iter()
                    .map(|t| t.payout_id.clone())
                    .collect::<Vec<_>>()
        {
            return reject(
                "invalid_attempt",
                format!(
                    "attempt {} must list its transfers' payouts in order",
                    attempt.attempt_id
                ),
            );
        }
        let body = SolanaTxSigned {
            attempt_id: attempt.attempt_id.clone(),
            payout_ids: attempt.payout_ids.clone(),
            signature: attempt.signature.clone(),
            blockhash: attempt.blockhash.clone(),
            last_valid_block_height: attempt.last_valid_block_height,
            tx_base64: base64::engine::general_purpose::STANDARD.encode(&attempt.tx_bytes),
            transfers: attempt
                .transfers
                .iter()
                .map(|t| {
                    (
                        t.payout_id.clone(),
                        t.wallet.to_string(),
                        t.amount_micro_usdc,
                    )
                })
                .collect(),
        };
        let body = EventBody::SolanaTxSigned(body);
        let key = format!("solana_tx:{}:signed", attempt.attempt_id);
        let hash = content_hash(&body.to_json());
        let now = self.ledger.now_ms();
        crate::write_stream!(&self.ledger, PLATFORM_STREAM, |tx| {
            if let Some(stored) = find_idem(tx, &key).await? {
                duplicate_or_conflict(&stored, &hash, &format!("attempt {}", attempt.attempt_id))?;
                let facts = payout_facts(tx.conn(), &attempt.payout_ids).await?;
                return Ok(attempt
                    .payout_ids
                    .iter()
                    .filter_map(|id| facts.get(id).cloned())
                    .collect());
            }
            let facts = payout_facts(tx.conn(), &attempt.payout_ids).await?;
            let claimed = claims(tx.conn()).await?;
            let mut seen = HashSet::new();
            let mut ordered = Vec::with_capacity(attempt.transfers.len());
            for t in &attempt.transfers {
                let id = &t.payout_id;
                if !is_schema_id(id) || !seen.insert(id.as_str()) {
                    return reject(
                        "invalid_attempt",
                        format!("payout id {id:?} is invalid or repeated"),
                    );
                }
                let Some(p) = facts.get(id) else {
                    return reject("unknown_payout", format!("no payout {id}"));
                };
                if p.rail != Rail::Solana.as_str() {
                    return reject(
                        "invalid_rail",
                        format!("payout {id} travels on {}, not solana", p.rail),
                    );
                }
                if !p.status.is_in_transit() {
                    return reject(
                        "invalid_payout_state",
                        format!(
                            "payout {id} is {}; only created or submitted payouts are signed",
                            p.status
                        ),
                    );
                }
                if i64::try_from(t.amount_micro_usdc).ok() != Some(p.amount_micro_usdc) {
                    return reject(
                        "amount_mismatch",
                        format!(
                            "attempt {} pays {} µUSDC for payout {id} of {} µUSDC",
                            attempt.attempt_id, t.amount_micro_usdc, p.amount_micro_usdc
                        ),
                    );
                }
                if method_wallet(&p.method).as_deref() != Some(t.wallet.to_string().as_str()) {
                    return reject(
                        "wallet_mismatch",
                        format!(
                            "attempt {} pays payout {id} to a wallet other than its method's",
                            attempt.attempt_id
                        ),
                    );
                }
                if let Some((other, outcome)) = claimed.get(id).and_then(|held| held.first()) {
                    return reject(
                        "payout_in_flight",
                        format!(
                            "payout {id} already belongs to attempt {other} ({})",
                            outcome.as_deref().unwrap_or("open")
                        ),
                    );
                }
                ordered.push(p.clone());
            }
            tx.append(NewEvent {
                body: body.clone(),
                actor: self.actor.0.clone(),
                recorded_at_ms: now,
                idem_key: Some(key.clone()),
                content_hash: Some(hash.clone()),
            });
            Ok(ordered)
        })
    }

    async fn persist_outcome(
        &self,
        attempt_id: &str,
        outcome: &AttemptOutcome,
    ) -> Result<AttemptRow, LedgerError> {
        let (kind, slot, reason) = match outcome {
            AttemptOutcome::Landed { slot } => ("landed", Some(*slot), None),
            AttemptOutcome::Failed { reason } => ("failed", None, Some(clean_reason(reason))),
            AttemptOutcome::Expired => ("expired", None, None),
        };
        let body = EventBody::SolanaTxResolved(SolanaTxResolved {
            attempt_id: attempt_id.to_owned(),
            outcome: kind.to_owned(),
            slot,
            reason,
        });
        let key = format!("solana_tx:{attempt_id}:resolved");
        let hash = content_hash(&body.to_json());
        let now = self.ledger.now_ms();
        crate::write_stream!(&self.ledger, PLATFORM_STREAM, |tx| {
            if let Some(stored) = find_idem(tx, &key).await? {
                duplicate_or_conflict(&stored, &hash, &format!("outcome of attempt {attempt_id}"))?;
            } else {
                let Some(found) = attempt_by_id(tx.conn(), attempt_id).await? else {
                    return reject("unknown_attempt", format!("no attempt {attempt_id}"));
                };
                if found.outcome.is_some() {
                    return reject(
                        "attempt_resolved",
                        format!("attempt {attempt_id} already has an outcome"),
                    );
                }
                tx.append(NewEvent {
                    body: body.clone(),
                    actor: self.actor.0.clone(),
                    recorded_at_ms: now,
                    idem_key: Some(key.clone()),
                    content_hash: Some(hash.clone()),
                });
            }
            Ok(())
        })?;
        let mut conn = self.ledger.store.pool().acquire().await?;
        match attempt_by_id(&mut conn, attempt_id).await? {
            Some(row) => Ok(row),
            None => reject("unknown_attempt", format!("no attempt {attempt_id}")),
        }
    }
}

#[async_trait]
impl Journal for LedgerJournal {
    async fn record_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError> {
        failpoint(failpoints::AFTER_SIGN);
        let facts = self.persist_signed(attempt).await.map_err(journal_error)?;
        failpoint(failpoints::AFTER_PERSIST);
        let mut marked: Vec<Result<Applied, LedgerError>> = Vec::with_capacity(facts.len());
        for chunk in facts.chunks(PAYOUT_WRITES_CONCURRENCY) {
            let mut writes = Vec::with_capacity(chunk.len());
            for p in chunk {
                writes.push(self.mark_submitted(p, &attempt.attempt_id, &attempt.signature));
            }
            marked.extend(futures::future::join_all(writes).await);
        }
        for m in marked {
            m.map_err(journal_error)?;
        }
        failpoint(failpoints::BEFORE_SEND);
        Ok(())
    }

    async fn record_outcome(
        &self,
        attempt_id: &str,
        outcome: &AttemptOutcome,
    ) -> Result<(), JournalError> {
        failpoint(failpoints::BEFORE_CONFIRM);
        let row = self
            .persist_outcome(attempt_id, outcome)
            .await
            .map_err(journal_error)?;
        failpoint(failpoints::AFTER_CONFIRM);
        self.apply_resolved(&row).await.map_err(journal_error)?;
        Ok(())
    }

    async fn open_attempts(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        let mut conn = self
            .ledger
            .store
            .pool()
            .acquire()
            .await
            .map_err(|e| JournalError(e.to_string()))?;
        attempts_where(&mut conn, "outcome IS NULL")
            .await
            .map_err(journal_error)?
            .iter()
            .map(AttemptRow::to_signed)
            .collect()
    }

    async fn resolved_payouts(&self, payout_ids: &[String]) -> Result<Vec<String>, JournalError> {
        let claimed = self.claimed().await?;
        Ok(payout_ids
            .iter()
            .filter(|id| {
                claimed.get(*id).is_some_and(|held| {
                    held.iter()
                        .any(|(_, o)| matches!(o.as_deref(), Some("landed" | "failed")))
                })
            })
            .cloned()
            .collect())
    }

    async fn holders(&self, payout_ids: &[String]) -> Result<Vec<(String, String)>, JournalError> {
        let claimed = self.claimed().await?;
        Ok(payout_ids
            .iter()
            .flat_map(|id| {
                claimed
                    .get(id)
                    .into_iter()
                    .flatten()
                    .map(move |(attempt, _)| (id.clone(), attempt.clone()))
            })
            .collect())
    }
}

/// Payouts on the Solana rail that the rail still has to pay: `created` or `submitted`
/// (a `submitted` payout whose attempts all expired is paid again), with the attempts
/// that hold them.
pub(crate) async fn outbox(ledger: &Ledger) -> Result<Vec<PayoutFacts>, LedgerError> {
    let rows = sqlx::query(&format!(
        "SELECT {FACTS_COLUMNS} FROM payouts WHERE rail = 'solana' AND status IN ({}) ORDER BY created_at_ms, payout_id",
        PayoutStatus::sql_list(PayoutStatus::is_in_transit)
    ))
    .fetch_all(ledger.store.pool())
    .await?;
    rows.iter().map(PayoutFacts::from_row).collect()
}

/// Landed attempts by signature (for reconciliation).
pub(crate) async fn landed_by_signature(
    ledger: &Ledger,
) -> Result<BTreeMap<String, AttemptRow>, LedgerError> {
    let mut conn = ledger.store.pool().acquire().await?;
    Ok(attempts_where(&mut conn, "outcome = 'landed'")
        .await?
        .into_iter()
        .map(|a| (a.signature.clone(), a))
        .collect())
}
