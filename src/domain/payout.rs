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

use std::fmt;

use super::DomainError;

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
}
