//! The rails' commands: what the Solana payer and the bank rail record on the platform
//! stream. The rails build the facts (signed bytes, a file's contents); these commands
//! check them against the payouts and the rail's projection and append, so only `ledger`
//! appends. Each is one transaction on the platform stream, idempotent by its key.
//!
//! A signed Solana attempt is recorded only if each payout it pays exists, is on the Solana
//! rail, is created or submitted, is paid its amount to the wallet of its method snapshot,
//! and is held by no other open, landed or failed attempt. An attempt without transfers must
//! be a lookup table's maintenance transaction (compute-budget and lookup-table instructions
//! on one table, nothing that can move money), and no two live maintenance attempts may
//! touch the same addresses (`maintenance_conflict`). A bank batch is recorded only if none
//! of its payouts is in a batch yet, before its file is written.

use std::collections::HashSet;

use crate::domain::DomainError;
use crate::domain::batch::BatchStatus;
use crate::domain::event::{
    BankAnswerImported, BankBatchGenerated, BankBatchStatus, EventBody, PLATFORM_STREAM, Rail,
    SolanaTxResolved, SolanaTxSigned,
};
use crate::domain::time::day_number;
use crate::failpoint::failpoint;
use crate::store::NewEvent;
use crate::store::rails::{self as rows, AttemptRow, BankBatch, PayoutFacts};

use super::{
    Actor, Applied, Ledger, LedgerError, content_hash, duplicate_or_conflict, find_idem, reject,
};

/// Inside the generation transaction of a bank batch: its event appended, not committed
/// (`rails::bank::failpoints::GENERATE_BEFORE_COMMIT`).
pub const BANK_GENERATE_BEFORE_COMMIT: &str = "bank.generate_before_commit";

/// When a new bank batch's file is written: the instant it is created at (its event's
/// `recorded_at`) and how many ACH batches that UTC day already has (NACHA's file id
/// modifier).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchSlot {
    pub created_ms: i64,
    pub same_day_ach: usize,
}

/// What a lookup table's maintenance transaction does, when the signed bytes are one
/// ([`settle_solana::lookup::maintenance_of`]).
fn maintenance(tx_base64: &str) -> Option<settle_solana::lookup::TableWork> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(tx_base64)
        .ok()
        .and_then(|bytes| settle_solana::lookup::maintenance_of_bytes(&bytes))
}

/// True when the signed bytes are a lookup table's maintenance transaction.
fn is_maintenance(tx_base64: &str) -> bool {
    maintenance(tx_base64).is_some()
}

/// An id as the event schemas accept it: 1..=128 of `[A-Za-z0-9._:-]`.
fn is_schema_id(text: &str) -> bool {
    (1..=128).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Whether a signed attempt's transfer may pay payout `p`; the refusal otherwise.
fn check_transfer(
    attempt_id: &str,
    transfer: &(String, String, u64),
    p: &PayoutFacts,
    claims: &rows::Claims,
) -> Result<(), LedgerError> {
    let (id, wallet, amount) = transfer;
    if p.rail != Rail::Solana {
        return reject(
            "invalid_rail",
            format!("payout {id} travels on {}, not solana", p.rail.as_str()),
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
    if i64::try_from(*amount).ok() != Some(p.amount_micro_usdc) {
        return reject(
            "amount_mismatch",
            format!(
                "attempt {attempt_id} pays {amount} µUSDC for payout {id} of {} µUSDC",
                p.amount_micro_usdc
            ),
        );
    }
    if p.wallet().as_deref() != Some(wallet.as_str()) {
        return reject(
            "wallet_mismatch",
            format!("attempt {attempt_id} pays payout {id} to a wallet other than its method's"),
        );
    }
    if let Some((other, outcome)) = claims.get(id).and_then(|held| held.first()) {
        return reject(
            "payout_in_flight",
            format!(
                "payout {id} already belongs to attempt {other} ({})",
                outcome.map_or("open", |o| o.as_str())
            ),
        );
    }
    Ok(())
}

impl Ledger {
    /// Records a signed Solana transaction (`solana_tx.signed`, key
    /// `solana_tx:{attempt_id}:signed`) after checking every payout it pays: it exists, is
    /// on the Solana rail, is `created` or `submitted`, the transfer pays its amount to the
    /// wallet of its method snapshot, and no other open or landed/failed attempt holds it.
    /// Returns the payouts' facts in transfer order (also on a duplicate).
    pub(crate) async fn record_solana_signed(
        &self,
        body: SolanaTxSigned,
        actor: &Actor,
    ) -> Result<Vec<PayoutFacts>, LedgerError> {
        let attempt_id = body.attempt_id.clone();
        if !is_schema_id(&attempt_id) {
            return reject(
                "invalid_attempt",
                format!("attempt id {attempt_id:?} is not a valid id"),
            );
        }
        let listed: Vec<&String> = body.transfers.iter().map(|t| &t.0).collect();
        if body.payout_ids.iter().collect::<Vec<_>>() != listed {
            return reject(
                "invalid_attempt",
                format!("attempt {attempt_id} must list its transfers' payouts in order"),
            );
        }
        // An attempt without transfers moves no money: it must be a lookup table's
        // maintenance transaction (compute budget and lookup-table instructions only).
        if body.transfers.is_empty() && !is_maintenance(&body.tx_base64) {
            return reject(
                "invalid_attempt",
                format!(
                    "attempt {attempt_id} has no transfers and is not a lookup table's maintenance transaction"
                ),
            );
        }
        let ids = &body.payout_ids;
        let event = EventBody::SolanaTxSigned(body.clone());
        let key = format!("solana_tx:{attempt_id}:signed");
        let hash = content_hash(&event.to_json());
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            let mut facts = rows::payout_facts(tx.conn(), ids).await?;
            // The wallets of the method snapshots, opened (an erased provider has none).
            self.open_facts(facts.values_mut()).await?;
            if let Some(stored) = find_idem(tx, &key).await? {
                duplicate_or_conflict(&stored, &hash, &format!("attempt {attempt_id}"))?;
                return Ok(ids.iter().filter_map(|id| facts.get(id).cloned()).collect());
            }
            if body.transfers.is_empty() {
                // No two live lookup-table transactions touch the same address: a second
                // one (a payer that started while a killed one's last record was still
                // committing) would add the same accounts to another table.
                let work = maintenance(&body.tx_base64);
                for (open, tx_base64) in rows::open_maintenance(tx.conn()).await? {
                    let conflict = match (&work, maintenance(&tx_base64)) {
                        (Some(new), Some(live)) => {
                            settle_solana::lookup::maintenance_conflicts(new, &live)
                        }
                        _ => false,
                    };
                    if conflict {
                        return reject(
                            "maintenance_conflict",
                            format!(
                                "lookup-table transaction {open} is in flight with the same addresses"
                            ),
                        );
                    }
                }
            }
            let listed: Vec<&str> = ids.iter().map(String::as_str).collect();
            let claimed = rows::claims(tx.conn(), &listed).await?;
            let mut seen = HashSet::new();
            let mut ordered = Vec::with_capacity(body.transfers.len());
            for t in &body.transfers {
                let id = &t.0;
                if !is_schema_id(id) || !seen.insert(id.as_str()) {
                    return reject(
                        "invalid_attempt",
                        format!("payout id {id:?} is invalid or repeated"),
                    );
                }
                let Some(p) = facts.get(id) else {
                    return reject("unknown_payout", format!("no payout {id}"));
                };
                check_transfer(&attempt_id, t, p, &claimed)?;
                ordered.push(p.clone());
            }
            tx.append(NewEvent::keyed(event.clone(), &actor.0, now, &key, &hash));
            Ok(ordered)
        })
    }

    /// Records how a signed attempt ended (`solana_tx.resolved`, key
    /// `solana_tx:{attempt_id}:resolved`); an attempt has one outcome. Returns the attempt
    /// as recorded.
    pub(crate) async fn record_solana_resolved(
        &self,
        body: SolanaTxResolved,
        actor: &Actor,
    ) -> Result<AttemptRow, LedgerError> {
        let attempt_id = body.attempt_id.clone();
        let body = EventBody::SolanaTxResolved(body);
        let key = format!("solana_tx:{attempt_id}:resolved");
        let hash = content_hash(&body.to_json());
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            if let Some(stored) = find_idem(tx, &key).await? {
                duplicate_or_conflict(&stored, &hash, &format!("outcome of attempt {attempt_id}"))?;
                return Ok(());
            }
            let Some(found) = rows::attempt_by_id(tx.conn(), &attempt_id).await? else {
                return reject("unknown_attempt", format!("no attempt {attempt_id}"));
            };
            if found.outcome.is_some() {
                return reject(
                    "attempt_resolved",
                    format!("attempt {attempt_id} already has an outcome"),
                );
            }
            tx.append(NewEvent::keyed(body.clone(), &actor.0, now, &key, &hash));
            Ok(())
        })?;
        let mut conn = self.store.acquire().await?;
        match rows::attempt_by_id(&mut conn, &attempt_id).await? {
            Some(row) => Ok(row),
            None => reject("unknown_attempt", format!("no attempt {attempt_id}")),
        }
    }

    /// Records a new bank batch (`bank_batch.generated`, key
    /// `bank_batch:{batch_id}:generated`) of the payouts `ids` (sorted), unless one of them
    /// is in a batch already: `file` builds the batch's event (its file's name, SHA-256 and
    /// total) for the slot it gets. `false` when the batch exists or another batch took one
    /// of its payouts first (the caller looks again).
    pub(crate) async fn record_bank_batch(
        &self,
        batch_id: &str,
        ids: &[String],
        actor: &Actor,
        file: &(dyn Fn(BatchSlot) -> Result<BankBatchGenerated, DomainError> + Sync),
    ) -> Result<bool, LedgerError> {
        let listed: Vec<&str> = ids.iter().map(String::as_str).collect();
        let key = format!("bank_batch:{batch_id}:generated");
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            if find_idem(tx, &key).await?.is_some() {
                return Ok(false);
            }
            if rows::any_batched(tx.conn(), &listed).await? {
                return Ok(false);
            }
            let created_ms = now.max(tx.head_recorded_at_ms());
            let same_day_ach = rows::ach_batches_on_day(tx.conn(), day_number(created_ms)).await?;
            let generated = file(BatchSlot {
                created_ms,
                same_day_ach,
            })?;
            if generated.batch_id != batch_id || generated.payout_ids != ids {
                return reject(
                    "invalid_bank_batch",
                    format!("the file built for batch {batch_id} describes another batch"),
                );
            }
            let hash = content_hash(&format!("{key}|{}|{}", generated.sha256, ids.join(",")));
            tx.append(NewEvent::keyed(
                EventBody::BankBatchGenerated(generated),
                &actor.0,
                created_ms,
                &key,
                &hash,
            ));
            failpoint(BANK_GENERATE_BEFORE_COMMIT);
            Ok(true)
        })
    }

    /// Moves bank batch `batch_id` one step of its lifecycle, to `status`
    /// (`bank_batch.status_changed`, key `bank_batch:{batch_id}:{status}`);
    /// `invalid_batch_state` off [`BatchStatus::previous`], a duplicate once it was done.
    pub(crate) async fn change_bank_batch_status(
        &self,
        batch_id: &str,
        status: BatchStatus,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let key = format!("bank_batch:{batch_id}:{status}");
        let hash = content_hash(&key);
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            if find_idem(tx, &key).await?.is_some() {
                return Ok(Applied::Duplicate);
            }
            let Some(current): Option<BankBatch> = rows::load_batch(tx.conn(), batch_id).await?
            else {
                return reject("unknown_bank_batch", format!("no bank batch {batch_id}"));
            };
            status.step_from(batch_id, current.status)?;
            let body = EventBody::BankBatchStatusChanged(BankBatchStatus {
                batch_id: batch_id.to_owned(),
                status,
            });
            tx.append(NewEvent::keyed(body, &actor.0, now, &key, &hash));
            Ok(Applied::Accepted)
        })
    }

    /// Records a bank answer file as booked (`bank_answer.imported`, key
    /// `bank_answer:{kind}:{message_id}`), after its entries were: a duplicate when it was
    /// recorded with the same bytes, `conflict` when with others.
    pub(crate) async fn record_bank_answer(
        &self,
        answer: BankAnswerImported,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let key = format!("bank_answer:{}:{}", answer.kind, answer.message_id);
        let hash = content_hash(&format!("{key}|{}", answer.sha256));
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            if let Some(found) = find_idem(tx, &key).await? {
                if found.as_deref() == Some(hash.as_slice()) {
                    return Ok(Applied::Duplicate);
                }
                return reject(
                    "conflict",
                    format!(
                        "another bank file with message id {} was booked",
                        answer.message_id
                    ),
                );
            }
            let body = EventBody::BankAnswerImported(answer.clone());
            tx.append(NewEvent::keyed(body, &actor.0, now, &key, &hash));
            Ok(Applied::Accepted)
        })
    }
}
