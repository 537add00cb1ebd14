//! The lifecycle of a bank batch (SPEC §6): `generated` when its file is recorded,
//! `submitted` when the file went to the bank, `settled` when the bank executed it. One
//! table of steps, [`BatchStatus::previous`]; anything else is `invalid_batch_state`.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::DomainError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    Generated,
    Submitted,
    Settled,
}

impl BatchStatus {
    pub const ALL: [BatchStatus; 3] = [
        BatchStatus::Generated,
        BatchStatus::Submitted,
        BatchStatus::Settled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BatchStatus::Generated => "generated",
            BatchStatus::Submitted => "submitted",
            BatchStatus::Settled => "settled",
        }
    }

    /// A stored or requested status; `invalid_batch_status` for anything else.
    pub fn parse(text: &str) -> Result<BatchStatus, DomainError> {
        BatchStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| {
                DomainError::new(
                    "invalid_batch_status",
                    format!("{text:?} is not a bank batch status (generated, submitted, settled)"),
                )
            })
    }

    /// The one status a batch moves to `self` from; `None` for `generated`, which only a
    /// new batch has.
    pub fn previous(self) -> Option<BatchStatus> {
        match self {
            BatchStatus::Generated => None,
            BatchStatus::Submitted => Some(BatchStatus::Generated),
            BatchStatus::Settled => Some(BatchStatus::Submitted),
        }
    }

    /// Checks that batch `batch_id`, now `current`, may be marked `self`.
    pub fn step_from(self, batch_id: &str, current: BatchStatus) -> Result<(), DomainError> {
        if self.previous() == Some(current) {
            return Ok(());
        }
        let needs = match self.previous() {
            Some(p) => format!("needs it {p}"),
            None => "is only a new batch's status".to_owned(),
        };
        Err(DomainError::new(
            "invalid_batch_state",
            format!("bank batch {batch_id} is {current}; marking it {self} {needs}"),
        ))
    }
}

impl fmt::Display for BatchStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (from, to) pair: only generated → submitted → settled is a step.
    #[test]
    fn the_lifecycle_table_allows_exactly_the_two_forward_steps() {
        use BatchStatus::*;
        let allowed = [(Generated, Submitted), (Submitted, Settled)];
        for from in BatchStatus::ALL {
            for to in BatchStatus::ALL {
                let got = to.step_from("b1", from);
                if allowed.contains(&(from, to)) {
                    assert_eq!(got, Ok(()), "{from} → {to}");
                } else {
                    let e = got.expect_err(&format!("{from} → {to} is no step"));
                    assert_eq!(e.code, "invalid_batch_state", "{from} → {to}");
                    assert!(e.message.contains(&format!("is {from}")), "{}", e.message);
                }
            }
        }
    }

    #[test]
    fn statuses_round_trip_through_their_names_and_json() {
        for s in BatchStatus::ALL {
            assert_eq!(BatchStatus::parse(s.as_str()), Ok(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert_eq!(
            BatchStatus::parse("returned").unwrap_err().code,
            "invalid_batch_status"
        );
    }
}
