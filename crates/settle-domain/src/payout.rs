//! The payout state machine (SPEC §3, §5, §6): the one table of where a payout may go from
//! where it is. Runs create payouts; releases, cancels, both rails and bank returns move
//! them, each through [`PayoutStep::apply`]; the projection writes [`PayoutStep::to`].
//!
//! ```text
//!   a run decides paid                a run decides held
//!          │                                  │
//!          ▼                                  ▼
//!       created ◀──────────release─────────  held ──cancel──▶ cancelled
//!        │    │                               ↺ hold (records its reason)
//!   submit    └────────settle────────┐
//!        ▼                           ▼
//!     submitted ───────settle──────▶ settled ──return──▶ returned
//!        ↺ resubmit (Solana re-signed)
//!   created or submitted ──fail──▶ failed
//! ```
//!
//! The payout aggregate ([`PayoutRecord`], folded by its `apply`) answers the lifecycle
//! commands ([`PayoutCommand`]) through the pure [`decide`]: the event to book, nothing (a
//! `duplicate`), or `invalid_payout_state` from the table. The table is tested pair by pair
//! (`every_status_and_step`), and the statuses are spelled nowhere else in the program: the
//! sets SQL selects come from here ([`PayoutStatus::sql_list`], `is_pending`, …), which a
//! scan in `tests/it/architecture.rs` holds.

use std::fmt;

use rust_decimal::Decimal;

use super::DomainError;
use super::event::{
    EventBody, PayoutCreated, PayoutFailed, PayoutHoldResolved, PayoutMethod, PayoutReturned,
    PayoutSettled, PayoutSubmitted, Rail,
};
use super::ids::{PayoutId, ProviderId};

/// Where a payout is in its life. Stored and shown as its [`as_str`](PayoutStatus::as_str).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PayoutStatus {
    /// Decided `paid` (or released): in transit, waiting for its rail.
    Created,
    /// Decided `held`: waits for an admin release or cancel.
    Held,
    /// Sent by its rail (a signed Solana transaction, or a bank file).
    Submitted,
    /// The money arrived (Solana: finalized; bank: the batch settled).
    Settled,
    /// The rail failed before the money arrived; the amount is payable again.
    Failed,
    /// A held payout an admin cancelled; the amount is payable again.
    Cancelled,
    /// A bank returned it after settlement; the amount is payable again.
    Returned,
}

/// A stored status's text (`sqlx`'s `try_from` decodes a column through it).
impl TryFrom<String> for PayoutStatus {
    type Error = DomainError;

    fn try_from(text: String) -> Result<PayoutStatus, DomainError> {
        PayoutStatus::parse(&text)
    }
}

impl PayoutStatus {
    pub const ALL: [PayoutStatus; 7] = [
        PayoutStatus::Created,
        PayoutStatus::Held,
        PayoutStatus::Submitted,
        PayoutStatus::Settled,
        PayoutStatus::Failed,
        PayoutStatus::Cancelled,
        PayoutStatus::Returned,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PayoutStatus::Created => "created",
            PayoutStatus::Held => "held",
            PayoutStatus::Submitted => "submitted",
            PayoutStatus::Settled => "settled",
            PayoutStatus::Failed => "failed",
            PayoutStatus::Cancelled => "cancelled",
            PayoutStatus::Returned => "returned",
        }
    }

    pub fn parse(text: &str) -> Result<PayoutStatus, DomainError> {
        PayoutStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| {
                DomainError::new(
                    "invalid_payout_status",
                    format!(
                        "unknown payout status {text:?}; one of {}",
                        list(&PayoutStatus::ALL)
                    ),
                )
            })
    }

    /// The status of a payout a run just created.
    pub fn at_creation(held: bool) -> PayoutStatus {
        if held {
            PayoutStatus::Held
        } else {
            PayoutStatus::Created
        }
    }

    /// Still to be paid or decided: the dashboard's pending payouts.
    pub fn is_pending(self) -> bool {
        matches!(
            self,
            PayoutStatus::Created | PayoutStatus::Held | PayoutStatus::Submitted
        )
    }

    /// In transit on its rail: what a rail may send, settle or fail.
    pub fn is_in_transit(self) -> bool {
        matches!(self, PayoutStatus::Created | PayoutStatus::Submitted)
    }

    /// Its amount is back in payable (SPEC §5: `available` subtracts every payout that has
    /// not failed, been cancelled or been returned).
    pub fn is_undone(self) -> bool {
        matches!(
            self,
            PayoutStatus::Failed | PayoutStatus::Cancelled | PayoutStatus::Returned
        )
    }

    /// The statuses for which `pred` holds, as a SQL list of literals (`'a', 'b'`): for
    /// the statements that select payouts by status, so their sets come from here.
    pub fn sql_list(pred: impl Fn(PayoutStatus) -> bool) -> String {
        PayoutStatus::ALL
            .into_iter()
            .filter(|s| pred(*s))
            .map(|s| format!("'{}'", s.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for PayoutStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for PayoutStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One step of a payout's life after its creation: each is one `payout.*` event kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PayoutStep {
    /// `payout.held`: the reason of a payout created held.
    Hold,
    /// `payout.released`: an admin released a held payout to its rail.
    Release,
    /// `payout.cancelled`: an admin cancelled a held payout.
    Cancel,
    /// `payout.submitted`: a rail sent it.
    Submit,
    /// `payout.submitted` again: the Solana rail re-signed an expired transaction.
    Resubmit,
    /// `payout.settled`: the money arrived.
    Settle,
    /// `payout.failed`: the rail failed before the money arrived.
    Fail,
    /// `payout.returned`: a bank returned a settled payout.
    Return,
}

/// The transition table: each step, the statuses it may start from, and where it leads.
/// Every other (status, step) pair is refused with `invalid_payout_state`.
const TABLE: [(PayoutStep, &[PayoutStatus], PayoutStatus); 8] = {
    use PayoutStatus::*;
    [
        (PayoutStep::Hold, &[Held], Held),
        (PayoutStep::Release, &[Held], Created),
        (PayoutStep::Cancel, &[Held], Cancelled),
        (PayoutStep::Submit, &[Created], Submitted),
        (PayoutStep::Resubmit, &[Submitted], Submitted),
        (PayoutStep::Settle, &[Created, Submitted], Settled),
        (PayoutStep::Fail, &[Created, Submitted], Failed),
        (PayoutStep::Return, &[Settled], Returned),
    ]
};

impl PayoutStep {
    pub const ALL: [PayoutStep; 8] = [
        PayoutStep::Hold,
        PayoutStep::Release,
        PayoutStep::Cancel,
        PayoutStep::Submit,
        PayoutStep::Resubmit,
        PayoutStep::Settle,
        PayoutStep::Fail,
        PayoutStep::Return,
    ];

    fn row(self) -> &'static (PayoutStep, &'static [PayoutStatus], PayoutStatus) {
        TABLE
            .iter()
            .find(|(step, _, _)| *step == self)
            .expect("every step has a row in TABLE")
    }

    /// The statuses this step may start from.
    pub fn from(self) -> &'static [PayoutStatus] {
        self.row().1
    }

    /// The status this step leads to.
    pub fn to(self) -> PayoutStatus {
        self.row().2
    }

    /// What the step is called in messages and idempotency keys (`payout:{id}:{name}`).
    pub fn name(self) -> &'static str {
        match self {
            PayoutStep::Hold => "held",
            PayoutStep::Release => "released",
            PayoutStep::Cancel => "cancelled",
            PayoutStep::Submit | PayoutStep::Resubmit => "submitted",
            PayoutStep::Settle => "settled",
            PayoutStep::Fail => "failed",
            PayoutStep::Return => "returned",
        }
    }

    /// The status after this step from `current`, or `invalid_payout_state`.
    pub fn apply(
        self,
        payout_id: &str,
        current: PayoutStatus,
    ) -> Result<PayoutStatus, DomainError> {
        if self.from().contains(&current) {
            return Ok(self.to());
        }
        Err(DomainError::new(
            "invalid_payout_state",
            format!(
                "payout {payout_id} is {current}; {} needs it {}",
                self.name(),
                list(self.from()).replace(", ", " or ")
            ),
        ))
    }
}

fn list(statuses: &[PayoutStatus]) -> String {
    statuses
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A payout: the `payouts` projection's row, and the state its lifecycle commands decide on.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PayoutRecord {
    pub payout_id: PayoutId,
    pub provider_id: ProviderId,
    pub run_kind: String,
    pub run_key: String,
    pub rail: Rail,
    pub amount_micro_usdc: i64,
    pub amount_eur_cents: Option<i64>,
    pub eur_per_usd: Option<String>,
    pub method: PayoutMethod,
    pub status: PayoutStatus,
    pub hold_reason: Option<String>,
    pub failure_reason: Option<String>,
    pub reference: Option<String>,
    pub end_to_end_id: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl PayoutRecord {
    /// The remittance text of its bank transfer, shown to the provider: `settle payout
    /// weekly 2026-11-23`, then ` st:` and the statement's hash (64 hex digits) it commits
    /// to (SPEC §13), when known. At most 140 characters (SEPA's `Max140Text`).
    pub fn remittance(&self, statement: Option<&[u8; 32]>) -> String {
        let base = format!("settle payout {} {}", self.run_kind, self.run_key);
        match statement {
            Some(hash) => format!("{base} st:{}", hex::encode(hash)),
            None => base,
        }
    }

    /// The payout a run's `payout.created` event starts, recorded at `at_ms`.
    pub fn created(p: &PayoutCreated, at_ms: i64) -> PayoutRecord {
        PayoutRecord {
            payout_id: p.payout_id.clone(),
            provider_id: p.provider_id.clone(),
            run_kind: p.run_kind.clone(),
            run_key: p.run_key.clone(),
            rail: p.method.rail(),
            amount_micro_usdc: p.amount_micro_usdc,
            amount_eur_cents: p.amount_eur_cents,
            eur_per_usd: p.eur_per_usd.clone(),
            method: p.method.clone(),
            status: PayoutStatus::at_creation(p.held),
            hold_reason: None,
            failure_reason: None,
            reference: None,
            end_to_end_id: None,
            created_at_ms: at_ms,
            updated_at_ms: at_ms,
        }
    }

    /// Folds one lifecycle event recorded at `at_ms`: the status its step leads to and the
    /// facts it carries. Events of other payouts, and other events, change nothing.
    pub fn apply(&mut self, at_ms: i64, body: &EventBody) {
        let Some((payout_id, step)) = lifecycle_step(body) else {
            return;
        };
        if payout_id != self.payout_id {
            return;
        }
        match body {
            EventBody::PayoutHeld(h) => self.hold_reason = Some(h.reason.clone()),
            EventBody::PayoutReleased(r) => {
                self.amount_eur_cents = r.amount_eur_cents.or(self.amount_eur_cents);
                if let Some(rate) = &r.eur_per_usd {
                    self.eur_per_usd = Some(rate.clone());
                }
            }
            EventBody::PayoutSubmitted(s) => {
                self.reference = Some(s.reference.clone());
                self.end_to_end_id.clone_from(&s.end_to_end_id);
            }
            EventBody::PayoutSettled(s) => self.reference = Some(s.reference.clone()),
            EventBody::PayoutFailed(f) => self.failure_reason = Some(f.reason.clone()),
            EventBody::PayoutReturned(r) => {
                self.failure_reason = Some(format!("{}: {}", r.reason_code, r.reason));
            }
            _ => {}
        }
        self.status = step.to();
        self.updated_at_ms = at_ms;
    }
}

/// The payout and the step of a lifecycle event (after creation); `None` for other events.
pub fn lifecycle_step(body: &EventBody) -> Option<(&str, PayoutStep)> {
    Some(match body {
        EventBody::PayoutHeld(e) => (&e.payout_id, PayoutStep::Hold),
        EventBody::PayoutReleased(e) => (&e.payout_id, PayoutStep::Release),
        EventBody::PayoutCancelled(e) => (&e.payout_id, PayoutStep::Cancel),
        EventBody::PayoutSubmitted(e) => (&e.payout_id, PayoutStep::Submit),
        EventBody::PayoutSettled(e) => (&e.payout_id, PayoutStep::Settle),
        EventBody::PayoutFailed(e) => (&e.payout_id, PayoutStep::Fail),
        EventBody::PayoutReturned(e) => (&e.payout_id, PayoutStep::Return),
        _ => return None,
    })
}

/// A lifecycle command on one payout. Texts arrive checked and trimmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PayoutCommand {
    /// An admin releases a held payout. A EUR payout held without an EUR amount (created
    /// while the FX rate was stale) is converted at `fresh_fx`, the latest rate if it was
    /// recorded within `fx_stale_hours`.
    Release {
        fresh_fx: Option<Decimal>,
        fx_stale_hours: i64,
    },
    Cancel {
        reason: String,
    },
    /// A rail sent the payout (Solana: the signature; bank: the batch id).
    Submit {
        reference: String,
        end_to_end_id: Option<String>,
    },
    /// The Solana rail signed attempt `attempt_id`: created → submitted, or submitted →
    /// submitted when an expired transaction was signed again; a payout an earlier attempt
    /// already settled or failed is left alone (a repair after the outcome).
    SubmitAttempt {
        attempt_id: String,
        signature: String,
    },
    Settle {
        reference: String,
    },
    Fail {
        reason: String,
        /// The bank refused the payment for its details: block them until updated.
        method_invalid: bool,
        /// The bank itself refused the payment (a status report's rejection): a payout in
        /// a bank file may fail only so, since the bank says the money never left.
        by_bank: bool,
    },
    Return {
        reason_code: String,
        reason: String,
        method_invalid: bool,
    },
}

impl PayoutCommand {
    fn step(&self) -> PayoutStep {
        match self {
            PayoutCommand::Release { .. } => PayoutStep::Release,
            PayoutCommand::Cancel { .. } => PayoutStep::Cancel,
            PayoutCommand::Submit { .. } | PayoutCommand::SubmitAttempt { .. } => {
                PayoutStep::Submit
            }
            PayoutCommand::Settle { .. } => PayoutStep::Settle,
            PayoutCommand::Fail { .. } => PayoutStep::Fail,
            PayoutCommand::Return { .. } => PayoutStep::Return,
        }
    }

    /// What the command is called in messages: its event kind.
    pub fn name(&self) -> &'static str {
        self.step().name()
    }

    /// The command's idempotency key: one per payout and event kind
    /// (`payout:{id}:{kind}`), and one per signed attempt.
    pub fn key(&self, payout_id: &str) -> String {
        match self {
            PayoutCommand::SubmitAttempt { attempt_id, .. } => {
                format!("payout:{payout_id}:submitted:{attempt_id}")
            }
            _ => format!("payout:{payout_id}:{}", self.step().name()),
        }
    }

    /// The command's content under its key: the same again is a `duplicate`, other
    /// content a `conflict`.
    pub fn content(&self) -> String {
        match self {
            PayoutCommand::Release { .. } => String::new(),
            PayoutCommand::Cancel { reason } => reason.clone(),
            PayoutCommand::Fail {
                reason,
                method_invalid,
                ..
            } => {
                if *method_invalid {
                    format!("{reason}|method_invalid")
                } else {
                    reason.clone()
                }
            }
            PayoutCommand::Submit {
                reference,
                end_to_end_id,
            } => format!("{reference}|{}", end_to_end_id.as_deref().unwrap_or("")),
            PayoutCommand::SubmitAttempt { signature, .. } => signature.clone(),
            PayoutCommand::Settle { reference } => reference.clone(),
            PayoutCommand::Return {
                reason_code,
                reason,
                method_invalid,
            } => format!("{reason_code}|{reason}|{method_invalid}"),
        }
    }
}

/// The EUR cents of an amount at `eur_per_usd`: whole US cents converted, half-to-even.
pub fn eur_cents(amount_micro_usdc: i64, eur_per_usd: Decimal) -> Option<i64> {
    use rust_decimal::prelude::ToPrimitive;
    let usd_cents = Decimal::from(amount_micro_usdc / super::decision::MICRO_USDC_PER_CENT);
    usd_cents
        .checked_mul(eur_per_usd)?
        .round_dp_with_strategy(0, rust_decimal::RoundingStrategy::MidpointNearestEven)
        .to_i64()
}

/// Decides a lifecycle command against the payout: the event it books (`None`: nothing to
/// do, a `duplicate`), or the refusal (`invalid_payout_state` from the transition table,
/// `fx_rate_stale`, `amount_out_of_range`).
pub fn decide(p: &PayoutRecord, cmd: &PayoutCommand) -> Result<Option<EventBody>, DomainError> {
    let id = &p.payout_id;
    let step = match cmd {
        PayoutCommand::SubmitAttempt { .. } => match p.status {
            PayoutStatus::Settled | PayoutStatus::Failed => return Ok(None),
            PayoutStatus::Submitted => PayoutStep::Resubmit,
            _ => PayoutStep::Submit,
        },
        _ => cmd.step(),
    };
    step.apply(id, p.status)?;
    // (A release the table allowed starts from held.)
    if let PayoutCommand::Release {
        fresh_fx,
        fx_stale_hours,
    } = cmd
        && p.rail == Rail::Sepa
        && p.amount_eur_cents.is_none()
    {
        let Some(rate) = fresh_fx else {
            return Err(DomainError::new(
                "fx_rate_stale",
                format!(
                    "EUR payout {id} has no EUR amount and no FX rate was recorded in the last {fx_stale_hours} hours: record one (`settle import` a line {{\"type\":\"fx.rate_set\",\"fx_id\":\"…\",\"eur_per_usd\":\"…\"}}) and release again, or cancel it (`settle payout cancel {id} --reason …`)"
                ),
            ));
        };
        let cents = eur_cents(p.amount_micro_usdc, *rate).ok_or_else(|| {
            DomainError::new(
                "amount_out_of_range",
                format!("the EUR amount of payout {id} overflows"),
            )
        })?;
        return Ok(Some(EventBody::PayoutReleased(PayoutHoldResolved {
            payout_id: id.clone(),
            provider_id: p.provider_id.clone(),
            amount_micro_usdc: p.amount_micro_usdc,
            reason: None,
            amount_eur_cents: Some(cents),
            eur_per_usd: Some(rate.normalize().to_string()),
        })));
    }
    if step == PayoutStep::Fail
        && p.rail.is_bank()
        && !matches!(cmd, PayoutCommand::Fail { by_bank: true, .. })
        && let Some(batch) = &p.reference
    {
        // The file may already be at the bank: the money can only come back through the
        // bank, as a return.
        return Err(DomainError::new(
            "invalid_payout_state",
            format!(
                "payout {id} is in bank batch {batch}; once the file is written only a bank return undoes it"
            ),
        ));
    }
    Ok(Some(event_of(p, cmd)))
}

/// The event of a command its state allows.
fn event_of(p: &PayoutRecord, cmd: &PayoutCommand) -> EventBody {
    let resolved = |reason: Option<&String>| PayoutHoldResolved {
        payout_id: p.payout_id.clone(),
        provider_id: p.provider_id.clone(),
        amount_micro_usdc: p.amount_micro_usdc,
        reason: reason.cloned(),
        amount_eur_cents: None,
        eur_per_usd: None,
    };
    let submitted = |reference: &String, end_to_end_id: &Option<String>| {
        EventBody::PayoutSubmitted(PayoutSubmitted {
            payout_id: p.payout_id.clone(),
            provider_id: p.provider_id.clone(),
            rail: p.rail,
            reference: reference.clone(),
            end_to_end_id: end_to_end_id.clone(),
        })
    };
    match cmd {
        PayoutCommand::Release { .. } => EventBody::PayoutReleased(resolved(None)),
        PayoutCommand::Cancel { reason } => EventBody::PayoutCancelled(resolved(Some(reason))),
        PayoutCommand::Submit {
            reference,
            end_to_end_id,
        } => submitted(reference, end_to_end_id),
        PayoutCommand::SubmitAttempt { signature, .. } => submitted(signature, &None),
        PayoutCommand::Settle { reference } => EventBody::PayoutSettled(PayoutSettled {
            payout_id: p.payout_id.clone(),
            provider_id: p.provider_id.clone(),
            rail: p.rail,
            amount_micro_usdc: p.amount_micro_usdc,
            reference: reference.clone(),
        }),
        PayoutCommand::Fail {
            reason,
            method_invalid,
            ..
        } => EventBody::PayoutFailed(PayoutFailed {
            payout_id: p.payout_id.clone(),
            provider_id: p.provider_id.clone(),
            rail: p.rail,
            amount_micro_usdc: p.amount_micro_usdc,
            reason: reason.clone(),
            method_invalid: *method_invalid,
        }),
        PayoutCommand::Return {
            reason_code,
            reason,
            method_invalid,
        } => EventBody::PayoutReturned(PayoutReturned {
            payout_id: p.payout_id.clone(),
            provider_id: p.provider_id.clone(),
            rail: p.rail,
            amount_micro_usdc: p.amount_micro_usdc,
            reason_code: reason_code.clone(),
            reason: reason.clone(),
            method_invalid: *method_invalid,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::PayoutStatus::*;
    use super::*;

    /// Every (status, step) pair, written out: the whole table, so a changed row fails here.
    #[test]
    fn every_status_and_step() {
        use PayoutStep as S;
        #[rustfmt::skip]
        let expected: [(PayoutStatus, [Option<PayoutStatus>; 8]); 7] = [
            //          Hold        Release        Cancel           Submit           Resubmit         Settle         Fail          Return
            (Created,   [None,       None,          None,            Some(Submitted), None,            Some(Settled), Some(Failed), None]),
            (Held,      [Some(Held), Some(Created), Some(Cancelled), None,            None,            None,          None,         None]),
            (Submitted, [None,       None,          None,            None,            Some(Submitted), Some(Settled), Some(Failed), None]),
            (Settled,   [None,       None,          None,            None,            None,            None,          None,         Some(Returned)]),
            (Failed,    [None; 8]),
            (Cancelled, [None; 8]),
            (Returned,  [None; 8]),
        ];
        let steps = [
            S::Hold,
            S::Release,
            S::Cancel,
            S::Submit,
            S::Resubmit,
            S::Settle,
            S::Fail,
            S::Return,
        ];
        assert_eq!(steps, PayoutStep::ALL);
        let mut pairs = 0;
        for (status, row) in expected {
            for (step, next) in steps.into_iter().zip(row) {
                let got = step.apply("p1", status);
                assert_eq!(got.as_ref().ok().copied(), next, "{status} --{step:?}-->");
                if let Err(e) = got {
                    assert_eq!(e.code, "invalid_payout_state");
                    assert!(
                        e.message.starts_with(&format!("payout p1 is {status}; ")),
                        "{e}"
                    );
                }
                pairs += 1;
            }
        }
        assert_eq!(pairs, PayoutStatus::ALL.len() * PayoutStep::ALL.len());
    }

    #[test]
    fn final_statuses_are_left_by_no_step() {
        for status in PayoutStatus::ALL {
            let leaves = PayoutStep::ALL
                .into_iter()
                .any(|step| step.apply("p", status).is_ok_and(|next| next != status));
            assert_eq!(
                leaves,
                !matches!(status, Failed | Cancelled | Returned),
                "{status}"
            );
        }
    }

    #[test]
    fn refusals_name_the_states_a_step_needs() {
        let e = PayoutStep::Settle.apply("p7", Held).unwrap_err();
        assert_eq!(
            e.message,
            "payout p7 is held; settled needs it created or submitted"
        );
        let e = PayoutStep::Return.apply("p7", Submitted).unwrap_err();
        assert_eq!(
            e.message,
            "payout p7 is submitted; returned needs it settled"
        );
    }

    #[test]
    fn names_round_trip_and_sets() {
        for status in PayoutStatus::ALL {
            assert_eq!(PayoutStatus::parse(status.as_str()), Ok(status));
            assert_eq!(status.to_string(), status.as_str());
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{status}\"")
            );
        }
        let e = PayoutStatus::parse("paid").unwrap_err();
        assert_eq!(e.code, "invalid_payout_status");
        assert_eq!(
            PayoutStatus::parse("Created").unwrap_err().code,
            "invalid_payout_status"
        );
        let names = |pred: fn(PayoutStatus) -> bool| {
            PayoutStatus::ALL
                .into_iter()
                .filter(|s| pred(*s))
                .map(PayoutStatus::as_str)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(PayoutStatus::is_pending),
            ["created", "held", "submitted"]
        );
        assert_eq!(names(PayoutStatus::is_in_transit), ["created", "submitted"]);
        assert_eq!(
            names(PayoutStatus::is_undone),
            ["failed", "cancelled", "returned"]
        );
        assert_eq!(
            PayoutStatus::sql_list(PayoutStatus::is_undone),
            "'failed', 'cancelled', 'returned'"
        );
        assert_eq!(PayoutStatus::at_creation(true), Held);
        assert_eq!(PayoutStatus::at_creation(false), Created);
        let steps: Vec<&str> = PayoutStep::ALL.into_iter().map(PayoutStep::name).collect();
        assert_eq!(
            steps,
            [
                "held",
                "released",
                "cancelled",
                "submitted",
                "submitted",
                "settled",
                "failed",
                "returned"
            ]
        );
    }

    mod aggregate {
        use super::super::*;
        use crate::event::PayoutHeld;

        const AT: i64 = 1_767_225_600_000;

        fn created(rail: Rail, held: bool, eur: Option<i64>) -> EventBody {
            let method = match rail {
                Rail::Solana => PayoutMethod::Solana {
                    wallet: "7EcDhSYGxXyscszYEp35KHN8vvw3svAuLKTzXwCFLtV".into(),
                },
                _ => PayoutMethod::Sepa {
                    iban: "DE89370400440532013000".into(),
                    bic: None,
                    holder: "Ada".into(),
                },
            };
            EventBody::PayoutCreated(PayoutCreated {
                payout_id: "po_1".parse().unwrap(),
                provider_id: "prv_a".parse().unwrap(),
                run_kind: "weekly".into(),
                run_key: "2026-01-05".into(),
                amount_micro_usdc: 123_456_789,
                method,
                held,
                amount_eur_cents: eur,
                eur_per_usd: eur.map(|_| "0.9".into()),
            })
        }

        fn given(events: &[EventBody]) -> PayoutRecord {
            let EventBody::PayoutCreated(c) = &events[0] else {
                panic!("a payout starts with payout.created")
            };
            let mut p = PayoutRecord::created(c, AT);
            for (i, e) in events[1..].iter().enumerate() {
                p.apply(AT + 1 + i as i64, e);
            }
            p
        }

        fn when(
            events: &[EventBody],
            cmd: PayoutCommand,
        ) -> Result<Option<EventBody>, &'static str> {
            decide(&given(events), &cmd).map_err(|e| e.code)
        }

        fn text(s: &str) -> String {
            s.to_owned()
        }

        fn submitted(reference: &str, e2e: Option<&str>, rail: Rail) -> EventBody {
            EventBody::PayoutSubmitted(PayoutSubmitted {
                payout_id: "po_1".parse().unwrap(),
                provider_id: "prv_a".parse().unwrap(),
                rail,
                reference: reference.into(),
                end_to_end_id: e2e.map(str::to_owned),
            })
        }

        fn settled(rail: Rail) -> EventBody {
            EventBody::PayoutSettled(PayoutSettled {
                payout_id: "po_1".parse().unwrap(),
                provider_id: "prv_a".parse().unwrap(),
                rail,
                amount_micro_usdc: 123_456_789,
                reference: "ref".into(),
            })
        }

        fn failed() -> EventBody {
            EventBody::PayoutFailed(PayoutFailed {
                payout_id: "po_1".parse().unwrap(),
                provider_id: "prv_a".parse().unwrap(),
                rail: Rail::Solana,
                amount_micro_usdc: 123_456_789,
                reason: "expired".into(),
                method_invalid: false,
            })
        }

        fn held() -> EventBody {
            EventBody::PayoutHeld(PayoutHeld {
                payout_id: "po_1".parse().unwrap(),
                provider_id: "prv_a".parse().unwrap(),
                reason: "new_payout_method".into(),
            })
        }

        fn resolved(reason: Option<&str>, eur: Option<(i64, &str)>) -> PayoutHoldResolved {
            PayoutHoldResolved {
                payout_id: "po_1".parse().unwrap(),
                provider_id: "prv_a".parse().unwrap(),
                amount_micro_usdc: 123_456_789,
                reason: reason.map(str::to_owned),
                amount_eur_cents: eur.map(|(c, _)| c),
                eur_per_usd: eur.map(|(_, r)| r.to_owned()),
            }
        }

        fn release(fx: Option<&str>) -> PayoutCommand {
            PayoutCommand::Release {
                fresh_fx: fx.map(|r| r.parse().unwrap()),
                fx_stale_hours: 48,
            }
        }

        /// Given a payout's events, when a lifecycle command, then its event, nothing, or
        /// the refusal's code.
        #[test]
        #[expect(clippy::too_many_lines, reason = "one given/when/then table")]
        fn lifecycle_commands_given_when_then() {
            use PayoutCommand as C;
            let sol = [created(Rail::Solana, false, None)];
            let sol_held = [created(Rail::Solana, true, None), held()];
            let sepa_held = [created(Rail::Sepa, true, None), held()];
            let sepa_held_eur = [created(Rail::Sepa, true, Some(11_111_111)), held()];
            let submit = C::Submit {
                reference: text("sig1"),
                end_to_end_id: None,
            };
            let attempt = C::SubmitAttempt {
                attempt_id: text("a2"),
                signature: text("sig2"),
            };
            let settle = C::Settle {
                reference: text("ref"),
            };
            let fail = C::Fail {
                reason: text("expired"),
                method_invalid: false,
                by_bank: false,
            };
            let cancel = C::Cancel {
                reason: text("fraud check"),
            };
            let ret = C::Return {
                reason_code: text("AC04"),
                reason: text("closed"),
                method_invalid: true,
            };
            let bad = Err("invalid_payout_state");

            assert_eq!(
                when(&sol, submit.clone()),
                Ok(Some(submitted("sig1", None, Rail::Solana)))
            );
            assert_eq!(
                when(&sol, attempt.clone()),
                Ok(Some(submitted("sig2", None, Rail::Solana)))
            );
            let sent = [sol[0].clone(), submitted("sig1", None, Rail::Solana)];
            assert_eq!(
                when(&sent, attempt.clone()),
                Ok(Some(submitted("sig2", None, Rail::Solana))),
                "re-signed"
            );
            assert_eq!(
                when(&sent, submit.clone()),
                bad,
                "submitted twice by a rail"
            );
            let done = [sol[0].clone(), settled(Rail::Solana)];
            assert_eq!(
                when(&done, attempt.clone()),
                Ok(None),
                "a repair after the outcome"
            );
            assert_eq!(when(&[sol[0].clone(), failed()], attempt.clone()), Ok(None));
            assert_eq!(when(&sol, settle.clone()), Ok(Some(settled(Rail::Solana))));
            assert_eq!(when(&sent, settle.clone()), Ok(Some(settled(Rail::Solana))));
            assert_eq!(when(&sent, fail.clone()), Ok(Some(failed())));
            assert_eq!(when(&done, fail.clone()), bad, "settled cannot fail");
            assert_eq!(when(&done, ret.clone()).map(|e| e.is_some()), Ok(true));
            assert_eq!(when(&sent, ret.clone()), bad, "only settled payouts return");

            assert_eq!(
                when(&sol_held, release(None)),
                Ok(Some(EventBody::PayoutReleased(resolved(None, None))))
            );
            assert_eq!(
                when(&sol_held, cancel.clone()),
                Ok(Some(EventBody::PayoutCancelled(resolved(
                    Some("fraud check"),
                    None
                ))))
            );
            assert_eq!(when(&sol_held, settle.clone()), bad, "held is not sent");
            assert_eq!(when(&sol, release(None)), bad, "release needs held");
            assert_eq!(when(&sol, cancel.clone()), bad, "cancel needs held");
            let cancelled = [
                sol_held[0].clone(),
                held(),
                EventBody::PayoutCancelled(resolved(Some("x"), None)),
            ];
            assert_eq!(when(&cancelled, release(None)), bad, "cancelled is final");

            assert_eq!(
                when(&sepa_held, release(None)),
                Err("fx_rate_stale"),
                "EUR without a fresh rate"
            );
            // 12,345 US cents at 0.9 = 11,110.5 EUR cents, half-to-even: 11,110.
            assert_eq!(
                when(&sepa_held, release(Some("0.90"))),
                Ok(Some(EventBody::PayoutReleased(resolved(
                    None,
                    Some((11_110, "0.9"))
                )))),
            );
            assert_eq!(
                when(&sepa_held_eur, release(None)),
                Ok(Some(EventBody::PayoutReleased(resolved(None, None)))),
                "converted at creation: no rate needed"
            );
            let in_file = [
                created(Rail::Sepa, false, Some(1)),
                submitted("batch_1", Some("E2E"), Rail::Sepa),
            ];
            assert_eq!(
                when(&in_file, fail.clone()),
                bad,
                "a written bank file only returns"
            );
            assert_eq!(
                when(&[created(Rail::Sepa, false, Some(1))], fail).map(|e| e.is_some()),
                Ok(true),
                "a bank payout not yet in a file may fail"
            );
        }

        #[test]
        fn the_fold_follows_the_table_and_keeps_the_facts() {
            let mut p = given(&[created(Rail::Sepa, true, None), held()]);
            assert_eq!(
                (p.status, p.hold_reason.as_deref()),
                (PayoutStatus::Held, Some("new_payout_method"))
            );
            p.apply(
                AT + 10,
                &EventBody::PayoutReleased(resolved(None, Some((5, "0.9")))),
            );
            assert_eq!(
                (p.status, p.amount_eur_cents, p.updated_at_ms),
                (PayoutStatus::Created, Some(5), AT + 10)
            );
            p.apply(AT + 20, &submitted("batch_1", Some("E2E-1"), Rail::Sepa));
            p.apply(AT + 30, &settled(Rail::Sepa));
            assert_eq!(
                (p.status, p.reference.as_deref(), p.end_to_end_id.as_deref()),
                (PayoutStatus::Settled, Some("ref"), Some("E2E-1"))
            );
            let mut other = failed();
            if let EventBody::PayoutFailed(f) = &mut other {
                f.payout_id = "po_2".parse().unwrap();
            }
            p.apply(AT + 40, &other);
            assert_eq!(p.status, PayoutStatus::Settled, "another payout's event");
            assert_eq!(p.created_at_ms, AT);
        }

        #[test]
        fn keys_and_contents() {
            let c = PayoutCommand::Submit {
                reference: "b1".into(),
                end_to_end_id: Some("E".into()),
            };
            assert_eq!(
                (c.key("po_1"), c.content()),
                ("payout:po_1:submitted".into(), "b1|E".into())
            );
            let c = PayoutCommand::SubmitAttempt {
                attempt_id: "a1".into(),
                signature: "s".into(),
            };
            assert_eq!(
                (c.key("po_1"), c.content()),
                ("payout:po_1:submitted:a1".into(), "s".into())
            );
            let c = PayoutCommand::Return {
                reason_code: "R01".into(),
                reason: "r".into(),
                method_invalid: false,
            };
            assert_eq!(
                (c.key("po_1"), c.content()),
                ("payout:po_1:returned".into(), "R01|r|false".into())
            );
            assert_eq!(release(None).key("po_1"), "payout:po_1:released");
        }
    }
}
