//! Dual control (maker–checker): a command that moves or redirects money is booked as a
//! request (`approval.requested`) and takes effect only when an actor other than its
//! requester approves it (`approval.decided`). Which commands wait, and executing them,
//! is the control module's (above the ledger); this one books the requests and decisions.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{Actor, Applied, Ledger, LedgerError, find_idem, reject};
use crate::domain::event::{
    ApprovalDecided, ApprovalDecision, ApprovalRequested, ApprovalStatus, EventBody, ExecutedEvent,
    PLATFORM_STREAM,
};
use crate::domain::ids::ProviderId;
use crate::domain::operator::Signed;
use crate::store::NewEvent;
use crate::store::WriteTx;
use crate::store::read::{ApprovalRow, approval};

/// A request before it is booked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRequest {
    pub kind: &'static str,
    /// Canonical JSON of the command (an import line, or `payout.release`).
    pub command: String,
    pub summary: String,
    pub provider_id: Option<ProviderId>,
    pub amount_micro_usdc: Option<i64>,
}

impl NewRequest {
    /// The request's id: a digest of its kind and command, so the same command sent again
    /// finds its request instead of opening a second one.
    pub fn approval_id(&self) -> String {
        self.approval_id_at(0)
    }

    /// The id of the `generation`-th request of this command: the first (0) as before
    /// generations existed; a later one once the one before was used (approved) or expired,
    /// so an approval is used once.
    pub(crate) fn approval_id_at(&self, generation: u32) -> String {
        let text = match generation {
            0 => format!("approval|{}|{}", self.kind, self.command),
            g => format!("approval|{}|{}|{g}", self.kind, self.command),
        };
        let digest = super::content_hash(&text);
        format!("apr_{}", hex::encode(&digest[..12]))
    }

    /// What the operators' signatures cover (`domain::operator::content_hash`), in hex.
    pub(crate) fn content_hash_hex(&self) -> String {
        hex::encode(crate::domain::operator::content_hash(
            self.kind,
            &self.command,
        ))
    }
}

/// An approval to book with the first write of its command (`Ledger::decision`).
#[derive(Debug)]
pub struct DecisionToBook {
    pub approval_id: String,
    /// The approving actor and its operator's checked signature of the decision.
    pub actor: Actor,
    pub signed: Option<Signed>,
    committed: AtomicBool,
}

impl DecisionToBook {
    pub fn new(approval_id: String, actor: Actor, signed: Option<Signed>) -> DecisionToBook {
        DecisionToBook {
            approval_id,
            actor,
            signed,
            committed: AtomicBool::new(false),
        }
    }

    /// Whether a write committed the decision with its command.
    pub fn committed(&self) -> bool {
        self.committed.load(Ordering::SeqCst)
    }
}

impl Ledger {
    /// Inside a command's write transaction `tx`, before its commit: books the approval
    /// this handle carries (`Ledger::decision`) unless an earlier write committed it, under
    /// the platform stream's lock, after checking that the request is still pending, not
    /// expired and decided by someone else. The decision lists the events the command
    /// appended in `tx` (`executed`): `verify` ties each gated event to the approval that
    /// ran it. Returns whether it booked one.
    pub(crate) async fn book_decision_in(&self, tx: &mut WriteTx) -> Result<bool, LedgerError> {
        let Some(decision) = self.decision.as_ref().filter(|d| !d.committed()) else {
            return Ok(false);
        };
        let executed: Vec<ExecutedEvent> = tx
            .pending()
            .iter()
            .map(|e| ExecutedEvent {
                stream: e.stream.clone(),
                seq: e.seq,
                hash: hex::encode(&e.hash),
            })
            .collect();
        let back = tx.stream().to_owned();
        tx.lock_stream(PLATFORM_STREAM).await?;
        tx.use_stream(PLATFORM_STREAM);
        let approval_id = &decision.approval_id;
        let now = self.now_ms();
        self.check_decidable_in(
            tx,
            approval_id,
            &decision.actor,
            decision.signed.as_ref(),
            now,
        )
        .await?;
        tx.append(decided_event(
            approval_id,
            true,
            None,
            &decision.actor,
            decision.signed.as_ref(),
            executed,
            now,
        ));
        tx.use_stream(&back);
        Ok(true)
    }

    /// Inside `tx` (holding the platform stream's lock): the request exists, is pending, not
    /// expired at `now`, decided by someone other than its requester, and not decided yet.
    async fn check_decidable_in(
        &self,
        tx: &mut WriteTx,
        approval_id: &str,
        actor: &Actor,
        signed: Option<&Signed>,
        now: i64,
    ) -> Result<(), LedgerError> {
        let Some(row) = approval(tx.conn(), approval_id).await? else {
            return reject("unknown_approval", format!("no approval {approval_id}"));
        };
        Ledger::check_decider(&row, actor, signed)?;
        self.check_not_expired(&row, now)?;
        if find_idem(tx, &format!("approval:{approval_id}:decided"))
            .await?
            .is_some()
        {
            return reject(
                "approval_decided",
                format!("approval {approval_id} is already decided"),
            );
        }
        Ok(())
    }

    /// Notes that the decision this handle carries committed.
    pub(crate) fn decision_committed(&self) {
        if let Some(d) = &self.decision {
            d.committed.store(true, Ordering::SeqCst);
        }
    }

    /// Books a request unless one for the same command exists; returns the request as
    /// it stands (pending, or already decided) and whether it was booked now.
    /// `signed`: the requesting operator's signature of the request (checked by the
    /// caller), on a ledger with operators.
    pub(crate) async fn request_approval(
        &self,
        request: &NewRequest,
        generation: u32,
        actor: &Actor,
        signed: Option<&Signed>,
    ) -> Result<(ApprovalRow, Applied), LedgerError> {
        let approval_id = request.approval_id_at(generation);
        let key = format!("approval:{approval_id}:requested");
        let now = self.now_ms();
        let applied = crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            if find_idem(tx, &key).await?.is_some() {
                return Ok(Applied::Duplicate);
            }
            tx.append(NewEvent {
                body: EventBody::ApprovalRequested(ApprovalRequested {
                    approval_id: approval_id.clone(),
                    kind: request.kind.to_owned(),
                    command: request.command.clone(),
                    summary: request.summary.clone(),
                    provider_id: request.provider_id.clone(),
                    amount_micro_usdc: request.amount_micro_usdc,
                    requested_by: actor.0.clone(),
                    content_hash: signed.map(|_| request.content_hash_hex()),
                    requester_operator: signed.map(|s| s.operator.clone()),
                    requester_signature: signed.map(|s| s.signature.clone()),
                }),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: Some(key.clone()),
                content_hash: None,
            });
            Ok(Applied::Accepted)
        })?;
        let row = self.approval(&approval_id).await?;
        Ok((row, applied))
    }

    /// A request by id, if there is one.
    pub(crate) async fn find_approval(
        &self,
        approval_id: &str,
    ) -> Result<Option<ApprovalRow>, LedgerError> {
        Ok(approval(&mut self.store.acquire().await?, approval_id).await?)
    }

    /// When a pending request expires (`control.approval_expiry_hours` after it was booked).
    pub(crate) fn approval_expires_at_ms(&self, row: &ApprovalRow) -> i64 {
        row.requested_at_ms + self.config.control.approval_expiry_hours * 3_600_000
    }

    /// Refuses a pending request whose time is up at `now_ms` (`approval_expired`).
    pub(crate) fn check_not_expired(
        &self,
        row: &ApprovalRow,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        let expires_at_ms = self.approval_expires_at_ms(row);
        if row.status == ApprovalStatus::Pending && now_ms >= expires_at_ms {
            return reject(
                "approval_expired",
                format!(
                    "approval {} expired at {}: send the command again for a new request",
                    row.approval_id,
                    crate::domain::time::format_ms(expires_at_ms)
                ),
            );
        }
        Ok(())
    }

    /// A request by id (`unknown_approval` when there is none).
    pub async fn approval(&self, approval_id: &str) -> Result<ApprovalRow, LedgerError> {
        match self.find_approval(approval_id).await? {
            Some(row) => Ok(row),
            None => reject("unknown_approval", format!("no approval {approval_id}")),
        }
    }

    /// Refuses a request decided already (`approval_decided`).
    pub(crate) fn check_pending(row: &ApprovalRow) -> Result<(), LedgerError> {
        if row.status != ApprovalStatus::Pending {
            return reject(
                "approval_decided",
                format!(
                    "approval {} is already {}",
                    row.approval_id,
                    row.status.as_str()
                ),
            );
        }
        Ok(())
    }

    /// Checks that `actor` (the operator of `signed`, on a ledger with operators) may
    /// decide the request: it is pending and neither the actor nor the operator is its
    /// requester (`approver_is_requester`).
    pub(crate) fn check_decider(
        row: &ApprovalRow,
        actor: &Actor,
        signed: Option<&Signed>,
    ) -> Result<(), LedgerError> {
        Ledger::check_pending(row)?;

        if let (Some(requester), Some(decider)) = (&row.requester_operator, signed)
            && *requester == decider.operator
        {
            return reject(
                "approver_is_requester",
                format!(
                    "operator {requester} requested approval {}; a different operator must \
                     decide it",
                    row.approval_id
                ),
            );
        }
        if row.requested_by == actor.0 {
            return reject(
                "approver_is_requester",
                format!(
                    "{} requested approval {}; a different actor must decide it",
                    actor.0, row.approval_id
                ),
            );
        }
        Ok(())
    }

    /// Books the decision on a pending request alone: a rejection, or an approval whose
    /// command wrote nothing (it was booked already). Deciding twice is refused
    /// (`approval_decided`).
    pub(crate) async fn decide_approval(
        &self,
        approval_id: &str,
        approved: bool,
        reason: Option<&str>,
        actor: &Actor,
        signed: Option<&Signed>,
    ) -> Result<ApprovalRow, LedgerError> {
        if let Some(r) = reason {
            super::corrections::check_text(r, "reason", self.config.text_len_max)?;
        }
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            self.check_decidable_in(tx, approval_id, actor, signed, now)
                .await?;
            tx.append(decided_event(
                approval_id,
                approved,
                reason,
                actor,
                signed,
                Vec::new(),
                now,
            ));
            Ok(())
        })?;
        self.approval(approval_id).await
    }
}

/// The `approval.decided` event of `approval_id`.
fn decided_event(
    approval_id: &str,
    approved: bool,
    reason: Option<&str>,
    actor: &Actor,
    signed: Option<&Signed>,
    executed: Vec<ExecutedEvent>,
    now: i64,
) -> NewEvent {
    NewEvent {
        body: EventBody::ApprovalDecided(ApprovalDecided {
            approval_id: approval_id.to_owned(),
            decision: if approved {
                ApprovalDecision::Approved
            } else {
                ApprovalDecision::Rejected
            },
            decided_by: actor.0.clone(),
            reason: reason.map(|r| r.trim().to_owned()),
            decider_operator: signed.map(|s| s.operator.clone()),
            decider_signature: signed.map(|s| s.signature.clone()),
            executed,
        }),
        actor: actor.0.clone(),
        recorded_at_ms: now,
        idem_key: Some(format!("approval:{approval_id}:decided")),
        content_hash: None,
    }
}
