//! Dual control proven from the chain (SPEC §9): the operators' signatures on every request
//! and decision (`domain::operator::check_control`) and a verified approval behind every
//! gated event (`domain::gated`). `verify` reports what this finds; a payout run holds a
//! provider touched by an unproven gated event (`control_unproven`).

use std::collections::BTreeSet;

use super::LedgerError;
use crate::domain::event::{EventBody, PLATFORM_STREAM};
use crate::domain::gated::{Booked, GATED_EVENT_TYPES, Unproven, unproven};
use crate::domain::ids::ProviderId;
use crate::domain::operator::{ControlProblem, OPERATOR_EVENTS, check_control};
use crate::domain::policy::Enforce;
use crate::store::{ClockMode, Store};

/// What the chain proves of its control.
#[derive(Clone, Debug, Default)]
pub struct ControlFindings {
    /// Breaks of the signatures on the platform stream (`unsigned_request`, …).
    pub problems: Vec<ControlProblem>,
    /// Gated events no verified approval ran, booked once the ledger had operators.
    pub unproven: Vec<Unproven>,
    /// Gated events booked before the first operator: not provable, not a break.
    pub before_control: Vec<Unproven>,
    /// Whether control is enforced on this ledger (real clock, or a policy of `always`):
    /// only then is a gated event without approval a break.
    pub enforced: bool,
}

impl ControlFindings {
    /// The providers an unproven gated event touches (a run holds them).
    pub(crate) fn unproven_providers(&self) -> BTreeSet<ProviderId> {
        self.unproven
            .iter()
            .filter_map(|u| u.provider_id.clone())
            .collect()
    }
}

/// Reads the chain's control events and gated events and checks them.
pub(crate) async fn control_findings(store: &Store) -> Result<ControlFindings, LedgerError> {
    let kinds: Vec<&str> = OPERATOR_EVENTS
        .into_iter()
        .chain([
            "approval.requested",
            "approval.decided",
            "control.policy_set",
        ])
        .collect();
    let platform = store
        .stream_events_of_types(PLATFORM_STREAM, &kinds)
        .await?;
    // An unreadable payload is `verify`'s walk's to report (`invalid_payload`).
    let parsed: Vec<(i64, i64, EventBody)> = platform
        .iter()
        .filter_map(|e| {
            EventBody::from_json(&e.event_type, e.version as u32, &e.payload)
                .ok()
                .map(|b| (e.seq, e.recorded_at_ms, b))
        })
        .collect();
    let proof = check_control(parsed.iter().map(|(s, t, b)| (*s, *t, b)));
    let policies: Vec<(i64, crate::domain::policy::Policy)> = parsed
        .iter()
        .filter_map(|(_, t, b)| match b {
            EventBody::PolicySet(p) => Some((*t, p.policy.clone())),
            _ => None,
        })
        .collect();
    let bootstrap = bootstrap_events(&parsed);
    let enforced = store.clock_mode().await? == Some(ClockMode::Real)
        || policies
            .last()
            .is_some_and(|(_, p)| p.enforce == Enforce::Always);
    let mut findings = ControlFindings {
        problems: proof.problems.clone(),
        enforced,
        ..ControlFindings::default()
    };
    // Without operators nothing is provable yet, and nothing is read: a run on such a
    // ledger costs no more than before.
    if !enforced || policies.is_empty() || proof.operators_since_ms.is_none() {
        return Ok(findings);
    }
    let events = store.events_of_types(&GATED_EVENT_TYPES).await?;
    let bodies: Vec<(usize, EventBody)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            EventBody::from_json(&e.event_type, e.version as u32, &e.payload)
                .ok()
                .map(|b| (i, b))
        })
        .collect();
    let booked: Vec<Booked<'_>> = bodies
        .iter()
        .map(|(i, body)| Booked {
            stream: &events[*i].stream,
            seq: events[*i].seq,
            recorded_at_ms: events[*i].recorded_at_ms,
            hash_hex: hex::encode(&events[*i].hash),
            body,
        })
        .collect();
    let bootstrap: Vec<(String, i64)> = bootstrap
        .into_iter()
        .map(|seq| (PLATFORM_STREAM.to_owned(), seq))
        .collect();
    for u in unproven(&proof, &policies, &bootstrap, booked) {
        if u.before_control {
            findings.before_control.push(u);
        } else {
            findings.unproven.push(u);
        }
    }
    Ok(findings)
}

/// The platform sequence numbers of the first operators' events: the run of consecutive
/// `operator.added` events without an approval that opens the operator history (one
/// bootstrap transaction). Nothing can be inserted into that run without breaking the chain.
fn bootstrap_events(parsed: &[(i64, i64, EventBody)]) -> Vec<i64> {
    let mut out = Vec::new();
    for (seq, _, body) in parsed {
        match body {
            EventBody::OperatorAdded(a)
                if a.approval_id.is_none() && out.last().is_none_or(|last| *seq == last + 1) =>
            {
                out.push(*seq);
            }
            EventBody::OperatorAdded(_)
            | EventBody::OperatorKeyRotated(_)
            | EventBody::OperatorRemoved(_) => break,
            _ if !out.is_empty() => break,
            _ => {}
        }
    }
    out
}
