//! [`LedgerJournal`]: the payer's durable journal ([`settle_solana::Journal`]) on the ledger.
//!
//! # Events and transactions
//!
//! - `record_signed`: `solana_tx.signed` (exact signed bytes, signature, blockhash, last
//!   valid block height, transfers) on the **platform** stream, idempotency key
//!   `solana_tx:{attempt_id}:signed`, by the ledger command
//!   [`Ledger::record_solana_signed`]: one transaction that first checks every payout:
//!   it exists, is on the Solana rail, is `created` or `submitted`, the transfer pays its
//!   amount to the wallet of its method snapshot, and no other attempt that is open or
//!   landed/failed holds it. The call returns only after that commit, so the payer never
//!   sends bytes the ledger does not hold. Then its payouts are marked `submitted`
//!   (reference = signature) in their provider streams, in one transaction over those
//!   streams ([`Ledger::payout_commands`]), idempotent per attempt
//!   (`payout:{payout_id}:submitted:{attempt_id}`).
//! - `record_outcome`: `solana_tx.resolved` (`landed`, `failed`, `expired`) on the platform
//!   stream (`solana_tx:{attempt_id}:resolved`, [`Ledger::record_solana_resolved`]), then
//!   in the payouts' provider streams (the first payout alone, then the others in one
//!   transaction over their streams):
//!   landed → `payout.settled` (reference = signature), failed → `payout.failed` with the
//!   on-chain reason (funds back to payable), expired → nothing (the payer re-signs).
//! - [`LedgerJournal::repair`] closes the window between the platform event and the
//!   per-payout events after a crash: every landed/failed attempt whose payouts are still
//!   `created`/`submitted` is applied, and every payout of an open attempt still `created`
//!   is marked `submitted`.
//!
//! No transaction writes the platform stream and a provider stream together, so each step
//! above commits on its own. Crash tests abort the process at the
//! named [`failpoints`].

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use base64::Engine;

use settle_solana::{AttemptOutcome, Journal, JournalError, Pubkey, SignedAttempt, Transfer};

use crate::domain::event::{SolanaTxResolved, SolanaTxSigned};
use crate::domain::payout::PayoutStatus;
use crate::failpoint::failpoint;
use crate::ledger::{Actor, Applied, Ledger, LedgerError};
use crate::store::rails::{self as rows, Attempts};
pub use crate::store::rails::{AttemptEnd, AttemptRow, PayoutFacts, method_wallet};

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

/// Payouts whose claims one statement reads.
const CLAIMS_PER_READ: usize = 1_000;
/// Longest on-chain error kept in a failure reason (the rest is cut).
const CHAIN_REASON_CHARS_MAX: usize = 300;

/// An attempt as the payer needs it.
fn signed_attempt(row: &AttemptRow) -> Result<SignedAttempt, JournalError> {
    let transfers = row
        .transfers
        .iter()
        .map(|(payout_id, wallet, amount)| {
            Ok(Transfer {
                payout_id: payout_id.clone(),
                wallet: wallet
                    .parse::<Pubkey>()
                    .map_err(|e| JournalError(format!("wallet {wallet}: {e}")))?,
                amount_micro_usdc: *amount,
                statement: None,
            })
        })
        .collect::<Result<Vec<_>, JournalError>>()?;
    let tx_bytes = base64::engine::general_purpose::STANDARD
        .decode(&row.tx_base64)
        .map_err(|e| JournalError(format!("tx of {}: {e}", row.attempt_id)))?;
    Ok(SignedAttempt {
        attempt_id: row.attempt_id.clone(),
        payout_ids: row.payout_ids.clone(),
        transfers,
        tx_bytes,
        signature: row.signature.clone(),
        blockhash: row.blockhash.clone(),
        last_valid_block_height: row.last_valid_block_height,
    })
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

/// How many of a batch's answers were accepted; the first refusal if any.
fn accepted(answers: Vec<Result<Applied, LedgerError>>) -> Result<usize, LedgerError> {
    let mut count = 0;
    for answer in answers {
        if answer? == Applied::Accepted {
            count += 1;
        }
    }
    Ok(count)
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
    /// The attempts that hold each of `payout_ids`: open, landed or failed (see
    /// [`rows::claims`]).
    async fn claimed(&self, payout_ids: &[String]) -> Result<rows::Claims, JournalError> {
        let mut conn = self
            .ledger
            .store
            .acquire()
            .await
            .map_err(|e| JournalError(e.to_string()))?;
        let ids: Vec<&str> = payout_ids.iter().map(String::as_str).collect();
        let mut claims = rows::Claims::new();
        for chunk in ids.chunks(CLAIMS_PER_READ) {
            claims.extend(
                rows::claims(&mut conn, chunk)
                    .await
                    .map_err(|e| journal_error(e.into()))?,
            );
        }
        Ok(claims)
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
        Ok(rows::attempts(&self.ledger.store, Attempts::All).await?)
    }

    /// Applies what a crash left half done: landed/failed attempts whose payouts are still
    /// `created`/`submitted` settle/fail them; payouts of open attempts still `created`
    /// are marked `submitted`. Idempotent.
    pub async fn repair(&self) -> Result<RepairReport, LedgerError> {
        let mut report = RepairReport::default();
        let store = &self.ledger.store;
        let unfinished: HashMap<String, PayoutFacts> =
            rows::solana_payouts(store, PayoutStatus::is_in_transit)
                .await?
                .into_iter()
                .map(|p| (p.payout_id.clone(), p))
                .collect();
        if unfinished.is_empty() {
            return Ok(report);
        }
        let attempts = rows::attempts(store, Attempts::Holding).await?;
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
                tracing::warn!(attempt_id = %attempt.attempt_id, payouts = pending.len(), outcome = attempt.outcome.map_or("open", |o| o.as_str()), "repair: applying a resolved attempt");
                let applied = self.apply_resolved(&attempt).await?;
                if attempt.outcome == Some(AttemptEnd::Landed) {
                    report.settled += applied;
                } else {
                    report.failed += applied;
                }
            } else if attempt.outcome.is_none() {
                let created: Vec<&str> = pending
                    .iter()
                    .filter(|id| unfinished[id.as_str()].status == PayoutStatus::Created)
                    .map(|id| id.as_str())
                    .collect();
                report.submitted += accepted(
                    self.mark_submitted(&created, &attempt.attempt_id, &attempt.signature)
                        .await?,
                )?;
            }
        }
        Ok(report)
    }

    /// Marks payouts `submitted` with the attempt's signature (one ledger transaction over
    /// their provider streams, idempotent per attempt). A payout already settled or failed
    /// is left alone.
    async fn mark_submitted(
        &self,
        payout_ids: &[&str],
        attempt_id: &str,
        signature: &str,
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        if payout_ids.is_empty() {
            return Ok(Vec::new());
        }
        self.ledger
            .submit_payout_attempt(payout_ids, attempt_id, signature, &self.actor)
            .await
    }

    /// Applies a landed/failed attempt to its payouts: the first alone, then the others
    /// together (one transaction over their provider streams); returns how many changed
    /// now.
    async fn apply_resolved(&self, attempt: &AttemptRow) -> Result<usize, LedgerError> {
        let Some((first, rest)) = attempt.payout_ids.split_first() else {
            return Ok(0);
        };
        let mut changed = accepted(self.apply_to(attempt, &[first.as_str()]).await?)?;
        failpoint(failpoints::MID_APPLY);
        let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
        changed += accepted(self.apply_to(attempt, &rest).await?)?;
        Ok(changed)
    }

    async fn apply_to(
        &self,
        attempt: &AttemptRow,
        payout_ids: &[&str],
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        if payout_ids.is_empty() {
            return Ok(Vec::new());
        }
        match attempt.outcome {
            Some(AttemptEnd::Landed) => {
                self.ledger
                    .settle_payouts(payout_ids, &attempt.signature, &self.actor)
                    .await
            }
            Some(AttemptEnd::Failed) => {
                let reason = format!(
                    "solana transaction {} failed on chain: {}",
                    attempt.signature,
                    attempt.reason.as_deref().unwrap_or("unknown error")
                );
                self.ledger
                    .fail_payouts(payout_ids, &reason, &self.actor)
                    .await
            }
            _ => Ok(payout_ids.iter().map(|_| Ok(Applied::Duplicate)).collect()),
        }
    }

    /// Fails a payout the payer never signed (e.g. its simulation proved the transfer
    /// cannot succeed): its amount goes back to payable and the next run pays it again.
    pub(crate) async fn fail_unsent(
        &self,
        payout_id: &str,
        reason: &str,
    ) -> Result<Applied, LedgerError> {
        self.ledger
            .fail_payout(payout_id, &clean_reason(reason), &self.actor)
            .await
    }

    async fn persist_signed(
        &self,
        attempt: &SignedAttempt,
    ) -> Result<Vec<PayoutFacts>, LedgerError> {
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
        self.ledger.record_solana_signed(body, &self.actor).await
    }

    async fn persist_outcome(
        &self,
        attempt_id: &str,
        outcome: &AttemptOutcome,
    ) -> Result<AttemptRow, LedgerError> {
        let (kind, slot, reason) = match outcome {
            AttemptOutcome::Landed { slot } => (AttemptEnd::Landed, Some(*slot), None),
            AttemptOutcome::Failed { reason } => {
                (AttemptEnd::Failed, None, Some(clean_reason(reason)))
            }
            AttemptOutcome::Expired => (AttemptEnd::Expired, None, None),
        };
        let body = SolanaTxResolved {
            attempt_id: attempt_id.to_owned(),
            outcome: kind.as_str().to_owned(),
            slot,
            reason,
        };
        self.ledger.record_solana_resolved(body, &self.actor).await
    }
}

#[async_trait]
impl Journal for LedgerJournal {
    async fn record_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError> {
        failpoint(failpoints::AFTER_SIGN);
        let facts = self.persist_signed(attempt).await.map_err(journal_error)?;
        failpoint(failpoints::AFTER_PERSIST);
        let ids: Vec<&str> = facts.iter().map(|p| p.payout_id.as_str()).collect();
        accepted(
            self.mark_submitted(&ids, &attempt.attempt_id, &attempt.signature)
                .await
                .map_err(journal_error)?,
        )
        .map_err(journal_error)?;
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
        rows::attempts(&self.ledger.store, Attempts::Open)
            .await
            .map_err(|e| journal_error(e.into()))?
            .iter()
            .map(signed_attempt)
            .collect()
    }

    async fn resolved_payouts(&self, payout_ids: &[String]) -> Result<Vec<String>, JournalError> {
        let claimed = self.claimed(payout_ids).await?;
        Ok(payout_ids
            .iter()
            .filter(|id| {
                claimed.get(*id).is_some_and(|held| {
                    held.iter()
                        .any(|(_, o)| o.is_some_and(AttemptEnd::is_final))
                })
            })
            .cloned()
            .collect())
    }

    async fn lookup_tables(&self) -> Result<Vec<Pubkey>, JournalError> {
        let landed = rows::attempts(&self.ledger.store, Attempts::LandedMaintenance)
            .await
            .map_err(|e| journal_error(e.into()))?
            .iter()
            .map(signed_attempt)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(settle_solana::payer::landed_tables(&landed))
    }

    async fn landed_maintenance(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        rows::attempts(&self.ledger.store, Attempts::LandedMaintenance)
            .await
            .map_err(|e| journal_error(e.into()))?
            .iter()
            .map(signed_attempt)
            .collect()
    }

    async fn holders(&self, payout_ids: &[String]) -> Result<Vec<(String, String)>, JournalError> {
        let claimed = self.claimed(payout_ids).await?;
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
    let mut facts = rows::solana_payouts(&ledger.store, PayoutStatus::is_in_transit).await?;
    open_wallets(ledger, &mut facts).await?;
    Ok(facts)
}

/// Opens the wallets of `facts`' method snapshots in place (`erased` for an erased
/// provider's).
pub(crate) async fn open_wallets(
    ledger: &Ledger,
    facts: &mut [PayoutFacts],
) -> Result<(), LedgerError> {
    ledger.open_facts(facts.iter_mut()).await
}

/// Landed attempts by signature (for reconciliation).
pub(crate) async fn landed_by_signature(
    ledger: &Ledger,
) -> Result<BTreeMap<String, AttemptRow>, LedgerError> {
    Ok(rows::attempts(&ledger.store, Attempts::Landed)
        .await?
        .into_iter()
        .map(|a| (a.signature.clone(), a))
        .collect())
}
