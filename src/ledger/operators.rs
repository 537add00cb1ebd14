//! Operators on the ledger (`domain::operator`): the fold of their events, and the first
//! ones put in force on a ledger that has none (`settle operator bootstrap`).

use super::{Actor, Ledger, LedgerError, find_idem, reject};
use crate::domain::event::{
    EventBody, OperatorAdded, OperatorKeyRotated, OperatorRemoved, PLATFORM_STREAM,
};
use crate::domain::operator::{OPERATOR_EVENTS, Operator, OperatorKey, OperatorName, Operators};
use crate::store::NewEvent;

/// Operators a bootstrap puts in force at least: no one approves alone.
pub const BOOTSTRAP_OPERATORS_MIN: usize = 2;

/// The idempotency key of the bootstrap: a ledger is bootstrapped once.
const BOOTSTRAP_KEY: &str = "operator:bootstrap";

impl Ledger {
    /// The operators in force: a fold of the platform stream's `operator.*` events.
    pub async fn operators(&self) -> Result<Operators, LedgerError> {
        let events = self
            .store
            .stream_events_of_types(PLATFORM_STREAM, &OPERATOR_EVENTS)
            .await?;
        let mut operators = Operators::default();
        for e in events {
            let body = EventBody::from_json(&e.event_type, e.version as u32, &e.payload)
                .map_err(LedgerError::Rejected)?;
            operators
                .apply(e.recorded_at_ms, &body)
                .map_err(LedgerError::Rejected)?;
        }
        Ok(operators)
    }

    /// Puts the first operators in force on a ledger that has none (`operators_exist`
    /// otherwise): at least two, with distinct names and keys, in one transaction.
    pub async fn bootstrap_operators(
        &self,
        first: &[(OperatorName, OperatorKey)],
        actor: &Actor,
    ) -> Result<Operators, LedgerError> {
        let mut planned = Operators::default();
        for (name, key) in first {
            planned
                .add(Operator {
                    name: name.clone(),
                    key: *key,
                    added_at_ms: 0,
                })
                .map_err(LedgerError::Rejected)?;
        }
        if planned.len() < BOOTSTRAP_OPERATORS_MIN {
            return reject(
                "operators_too_few",
                format!(
                    "a ledger's first operators are at least {BOOTSTRAP_OPERATORS_MIN}: no one \
                     approves their own request"
                ),
            );
        }
        if !self.operators().await?.is_empty() {
            return reject(
                "operators_exist",
                "this ledger has operators: later changes are requests approved by them",
            );
        }
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            if find_idem(tx, BOOTSTRAP_KEY).await?.is_some() {
                return reject(
                    "operators_exist",
                    "this ledger has operators: later changes are requests approved by them",
                );
            }
            for (i, o) in planned.iter().enumerate() {
                tx.append(NewEvent {
                    body: EventBody::OperatorAdded(OperatorAdded {
                        operator: o.name.as_str().to_owned(),
                        public_key: o.key.to_base58(),
                        approval_id: None,
                    }),
                    actor: actor.0.clone(),
                    recorded_at_ms: now,
                    // The first event carries the bootstrap's key, the others their own.
                    idem_key: Some(if i == 0 {
                        BOOTSTRAP_KEY.to_owned()
                    } else {
                        format!("operator:{}:added", o.name.as_str())
                    }),
                    content_hash: None,
                });
            }
            Ok(())
        })?;
        self.operators().await
    }
}

/// A change of the operators in force, executed only by an approved request
/// (`control::submit_operator_change`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OperatorChange {
    Add {
        name: OperatorName,
        key: OperatorKey,
    },
    RotateKey {
        name: OperatorName,
        key: OperatorKey,
    },
    Remove {
        name: OperatorName,
    },
}

impl OperatorChange {
    /// The event that books it, for the approval `approval_id`.
    fn event(&self, approval_id: &str) -> EventBody {
        let approval_id = approval_id.to_owned();
        match self {
            OperatorChange::Add { name, key } => EventBody::OperatorAdded(OperatorAdded {
                operator: name.as_str().to_owned(),
                public_key: key.to_base58(),
                approval_id: Some(approval_id),
            }),
            OperatorChange::RotateKey { name, key } => {
                EventBody::OperatorKeyRotated(OperatorKeyRotated {
                    operator: name.as_str().to_owned(),
                    public_key: key.to_base58(),
                    approval_id,
                })
            }
            OperatorChange::Remove { name } => EventBody::OperatorRemoved(OperatorRemoved {
                operator: name.as_str().to_owned(),
                approval_id,
            }),
        }
    }
}

impl Ledger {
    /// Books an approved operator change (once per approval): refused when it names an
    /// operator that is not in force or a key already held, or would leave fewer than
    /// [`BOOTSTRAP_OPERATORS_MIN`] operators (no one could approve alone then).
    pub(crate) async fn change_operator(
        &self,
        change: &OperatorChange,
        approval_id: &str,
        actor: &Actor,
    ) -> Result<super::Applied, LedgerError> {
        let key = format!("operator:{approval_id}");
        let body = change.event(approval_id);
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            if find_idem(tx, &key).await?.is_some() {
                return Ok(super::Applied::Duplicate);
            }
            // Under the platform stream's lock: no other operator change interleaves.
            let mut after = self.operators().await?;
            after.apply(now, &body).map_err(LedgerError::Rejected)?;
            if after.len() < BOOTSTRAP_OPERATORS_MIN {
                return reject(
                    "operators_too_few",
                    format!(
                        "a ledger keeps at least {BOOTSTRAP_OPERATORS_MIN} operators: no one \
                         approves their own request"
                    ),
                );
            }
            tx.append(NewEvent {
                body: body.clone(),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: Some(key.clone()),
                content_hash: None,
            });
            Ok(super::Applied::Accepted)
        })
    }
}
