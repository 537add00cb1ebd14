//! The control policy on the chain (`control.policy_set`, `domain::policy`): seeded once
//! from the creating process's configuration, changed afterwards only by an approved
//! request (`control::submit_policy`).

use super::{Actor, Applied, Ledger, LedgerError, find_idem, reject};
use crate::domain::DomainError;
use crate::domain::event::{EventBody, PLATFORM_STREAM, PolicySet};
use crate::domain::policy::{Enforce, Policy};
use crate::store::{CLOCK_KEY, ClockMode, NewEvent, Store};

/// Books the clock mode on the chain (`ledger.clock_set`) unless it is booked already;
/// returns the mode in force. A ledger of an earlier release has its mode booked as it kept
/// it. `at_ms` is the booking time: a simulated ledger's first `--now`, 0 for one made by
/// `migrate --simulated-clock` (its replay starts wherever it starts), else the real clock.
pub async fn fix_clock_mode(
    store: &Store,
    mode: ClockMode,
    at_ms: i64,
) -> Result<ClockMode, LedgerError> {
    let mut tx = store.begin(PLATFORM_STREAM).await?;
    if let Some(booked) = Store::booked_clock_mode_in(&mut tx).await? {
        return Ok(booked);
    }
    let mode = store.kept_clock_mode().await?.unwrap_or(mode);
    tx.append(NewEvent {
        body: EventBody::ClockSet(crate::domain::event::ClockSet {
            mode: mode.as_str().to_owned(),
        }),
        actor: "settle".to_owned(),
        recorded_at_ms: at_ms,
        idem_key: Some(CLOCK_KEY.to_owned()),
        content_hash: None,
    });
    tx.commit().await?;
    Ok(mode)
}

/// The policy in force and its version (1 for the seed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyInForce {
    pub version: i64,
    pub policy: Policy,
}

impl Ledger {
    /// The policy booked last, `None` on a ledger that has none yet.
    pub async fn policy(&self) -> Result<Option<PolicyInForce>, LedgerError> {
        let Some(payload) = self
            .store
            .latest_payload_of_type(PLATFORM_STREAM, "control.policy_set")
            .await?
        else {
            return Ok(None);
        };
        match EventBody::from_json("control.policy_set", 1, &payload) {
            Ok(EventBody::PolicySet(p)) => Ok(Some(PolicyInForce {
                version: p.version,
                policy: p.policy,
            })),
            Ok(_) => unreachable!("a control.policy_set payload reads as one"),
            Err(e) => Err(LedgerError::Rejected(e)),
        }
    }

    /// The policy in force, seeding it with `seed` (the process's configuration) when the
    /// ledger has none: a new ledger, or one of an earlier release.
    /// `at_ms` is the seed's booking time.
    pub async fn policy_or_seed(
        &self,
        seed: &Policy,
        at_ms: i64,
    ) -> Result<PolicyInForce, LedgerError> {
        if let Some(p) = self.policy().await? {
            return Ok(p);
        }
        seed.check().map_err(LedgerError::Rejected)?;
        let seed = self.controllable(seed.clone()).await;
        self.book_policy(&seed, 1, at_ms, &Actor::operator("settle"))
            .await?;
        Ok(self.policy().await?.expect("the seed was just booked"))
    }

    /// A policy a real-clock ledger may hold: `enforce = never` becomes `real_clock` there
    /// (nothing switches control off on a real-clock ledger).
    async fn controllable(&self, mut policy: Policy) -> Policy {
        if policy.enforce == Enforce::Never
            && matches!(self.store.clock_mode().await, Ok(Some(ClockMode::Real)))
        {
            policy.enforce = Enforce::RealClock;
        }
        policy
    }

    /// Puts `policy` in force as the next version (the command of an approved request, or
    /// run at once where control is not enforced). The same policy again is a duplicate;
    /// `enforce = never` on a real-clock ledger is refused (`control_required`).
    pub(crate) async fn set_policy(
        &self,
        policy: &Policy,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        self.check_policy(policy).await?;
        let current = self.policy().await?;
        if current.as_ref().is_some_and(|c| c.policy == *policy) {
            return Ok(Applied::Duplicate);
        }
        let version = current.map_or(1, |c| c.version + 1);
        self.book_policy(policy, version, self.now_ms(), actor)
            .await
    }

    /// Refuses a policy this ledger may not run under: an invalid one (`invalid_policy`),
    /// or `enforce = never` on a real-clock ledger (`control_required`).
    pub(crate) async fn check_policy(&self, policy: &Policy) -> Result<(), LedgerError> {
        policy.check().map_err(LedgerError::Rejected)?;
        if policy.enforce == Enforce::Never
            && self.store.clock_mode().await? == Some(ClockMode::Real)
        {
            return Err(LedgerError::Rejected(DomainError::new(
                "control_required",
                "a real-clock ledger is always under dual control: enforce is always or real_clock",
            )));
        }
        Ok(())
    }

    async fn book_policy(
        &self,
        policy: &Policy,
        version: i64,
        now: i64,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let key = format!("control:policy:{version}");
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            if find_idem(tx, &key).await?.is_some() {
                return reject(
                    "policy_changed",
                    format!("policy version {version} was booked meanwhile: read the policy again"),
                );
            }
            tx.append(NewEvent {
                body: EventBody::PolicySet(PolicySet {
                    version,
                    policy: policy.clone(),
                    approval_id: self.config.approval_id.clone(),
                }),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: Some(key.clone()),
                content_hash: None,
            });
            Ok(Applied::Accepted)
        })
    }
}

impl Ledger {
    /// Activates the token named `name` of `scope` that waits for approval (the command of
    /// an approved `token` request): recorded in a write transaction of the platform
    /// stream, so the approval's decision commits with it. `unknown_token` when no such
    /// token waits (revoked meanwhile), `ambiguous_token` when several do.
    pub(crate) async fn activate_token(
        &self,
        name: &str,
        scope: &str,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let Some(approval_id) = self.config.approval_id.clone() else {
            return reject(
                "approval_required",
                "a token waiting for approval is activated by approving its request",
            );
        };
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            let waiting = crate::store::tokens::pending_named_in(tx.conn(), name, scope).await?;
            let [token_id] = waiting.as_slice() else {
                return reject(
                    if waiting.is_empty() {
                        "unknown_token"
                    } else {
                        "ambiguous_token"
                    },
                    format!(
                        "{} {scope} tokens named {name:?} wait for approval",
                        waiting.len()
                    ),
                );
            };
            let activated =
                crate::store::tokens::activate_in(tx.conn(), token_id, &approval_id, now, &actor.0)
                    .await?;
            Ok(if activated {
                Applied::Accepted
            } else {
                Applied::Duplicate
            })
        })
    }
}
