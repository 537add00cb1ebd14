//! Which booked events needed a second operator, and whether each ran under one (SPEC §9,
//! "proof, not trust"): the rules of `control::request_for` read back from the chain, with
//! the policy in force when each event was booked.
//!
//! An event is **gated** when its command would have waited for approval: an adjustment at
//! or above the threshold, or bringing its provider's adjustments of the window to it; a
//! payout method or tier set on a provider; a fee schedule; a void at or above its
//! threshold; the release of a held payout at or above its threshold; an FX rate outside
//! the band's bounds; an operator change after the first operators; a policy after the
//! seed. (`rate.set` and the FX steps depend on the price book and the rate history: they
//! are gated at the command, and an approval that ran them is listed, but `verify` does
//! not recompute their bands.)
//!
//! A gated event booked once the ledger had operators is **proven** when a verified
//! approval's decision lists it (`approval.decided.executed`, booked in the same
//! transaction, with its hash) for a request of the matching kind. One booked before the
//! first operator is reported apart: control was not provable then.

use std::collections::{BTreeMap, VecDeque};

use super::event::EventBody;
use super::ids::ProviderId;
use super::operator::ControlProof;
use super::policy::Policy;

/// The event types a gated command books (read by type across streams).
pub const GATED_EVENT_TYPES: [&str; 12] = [
    "adjustment.posted",
    "provider.registered",
    "provider.updated",
    "provider.erased",
    "fee_schedule.set",
    "usage.voided",
    "payout.released",
    "fx.rate_set",
    "operator.added",
    "operator.key_rotated",
    "operator.removed",
    "control.policy_set",
];

/// A booked event of one of [`GATED_EVENT_TYPES`].
pub struct Booked<'a> {
    pub stream: &'a str,
    pub seq: i64,
    pub recorded_at_ms: i64,
    pub hash_hex: String,
    pub body: &'a EventBody,
}

/// A gated event without the proof it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unproven {
    pub stream: String,
    pub seq: i64,
    pub event_type: &'static str,
    /// The provider whose balance or payouts it touches, if any.
    pub provider_id: Option<ProviderId>,
    /// Booked before the ledger had operators: not a break of control, but not provable.
    pub before_control: bool,
    pub detail: String,
}

/// The gated events of `events` that no verified approval ran. `policies` are the policies
/// booked, `(recorded_at_ms, policy)` in order; an event is judged by the last one booked
/// at or before it (the first one before any). `bootstrap` holds the `(stream, seq)` of the
/// first operators' events.
pub fn unproven<'a>(
    proof: &ControlProof,
    policies: &[(i64, Policy)],
    bootstrap: &[(String, i64)],
    mut events: Vec<Booked<'a>>,
) -> Vec<Unproven> {
    events.sort_by_key(|e| (e.recorded_at_ms, e.stream.to_owned(), e.seq));
    let mut windows: BTreeMap<ProviderId, VecDeque<(i64, u64)>> = BTreeMap::new();
    let mut out = Vec::new();
    for e in &events {
        let Some(policy) = policy_at(policies, e.recorded_at_ms) else {
            continue;
        };
        let Some((kind, provider_id, why)) = gate_of(e, policy, &mut windows, bootstrap) else {
            continue;
        };
        let proven = proof
            .executed
            .get(&(e.stream.to_owned(), e.seq))
            .is_some_and(|(hash, k, _)| *hash == e.hash_hex && k == kind);
        // An adjustment that names its approval (`approval_id`) and is exactly its command.
        let named = matches!(e.body, EventBody::AdjustmentPosted(a)
            if a.approval_id.is_some()
                && proof.operators_since_ms.is_some_and(|t| e.recorded_at_ms >= t)
                && proof.unapproved_adjustment(e.recorded_at_ms, a, 0).is_none());
        if proven || named {
            continue;
        }
        let before_control = match (proof.operators_since_ms, proof.operators_since_seq) {
            (Some(_), Some(first)) if e.stream == super::event::PLATFORM_STREAM => e.seq < first,
            (Some(t), _) => e.recorded_at_ms < t,
            (None, _) => true,
        };
        out.push(Unproven {
            stream: e.stream.to_owned(),
            seq: e.seq,
            event_type: e.body.event_type(),
            provider_id,
            before_control,
            detail: format!("{why}: no verified approval of a `{kind}` request ran it"),
        });
    }
    out
}

fn policy_at(policies: &[(i64, Policy)], at_ms: i64) -> Option<&Policy> {
    policies
        .iter()
        .rev()
        .find(|(t, _)| *t <= at_ms)
        .or(policies.first())
        .map(|(_, p)| p)
}

/// The request kind a gated event needed, the provider it touches and why it was gated;
/// `None` when its command ran without approval.
fn gate_of(
    e: &Booked<'_>,
    policy: &Policy,
    windows: &mut BTreeMap<ProviderId, VecDeque<(i64, u64)>>,
    bootstrap: &[(String, i64)],
) -> Option<(&'static str, Option<ProviderId>, String)> {
    let provider = |p: &ProviderId| Some(p.clone());
    match e.body {
        EventBody::AdjustmentPosted(a) => adjustment_gate(a, e.recorded_at_ms, policy, windows),
        EventBody::ProviderRegistered(r) if r.payout_method.is_some() => Some((
            "payout_method",
            provider(&r.provider_id),
            format!("payout method of {} set at registration", r.provider_id),
        )),
        EventBody::ProviderUpdated(u) if u.payout_method.is_some() => Some((
            "payout_method",
            provider(&u.provider_id),
            format!("payout method of {} changed", u.provider_id),
        )),
        EventBody::ProviderUpdated(u) if u.tier.is_some() => Some((
            "tier",
            provider(&u.provider_id),
            format!("tier of {} changed", u.provider_id),
        )),
        EventBody::ProviderErased(x) => Some((
            "erasure",
            provider(&x.provider_id),
            format!("personal data of {} erased", x.provider_id),
        )),
        EventBody::FeeScheduleSet(f) => Some((
            "fee_schedule",
            None,
            format!("{} fee {} bps", f.tier.as_str(), f.fee_bps),
        )),
        EventBody::UsageVoided(v) => {
            let gross: i64 = v.segments.iter().map(|s| s.gross_micro_usdc).sum();
            (gross.unsigned_abs() >= policy.void_approval_micro_usdc.unsigned_abs()).then(|| {
                (
                    "void",
                    provider(&v.provider_id),
                    format!("void of {} ({gross} µUSDC gross)", v.event_id),
                )
            })
        }
        EventBody::PayoutReleased(r) => (r.amount_micro_usdc >= policy.release_approval_micro_usdc)
            .then(|| {
                (
                    "payout_release",
                    provider(&r.provider_id),
                    format!("release of {} ({} µUSDC)", r.payout_id, r.amount_micro_usdc),
                )
            }),
        EventBody::FxRateSet(f) => {
            let rate: rust_decimal::Decimal = f.eur_per_usd.parse().ok()?;
            (rate < policy.fx_eur_per_usd_min || rate > policy.fx_eur_per_usd_max).then(|| {
                (
                    "fx_rate",
                    None,
                    format!("EUR per USD {rate} outside the band"),
                )
            })
        }
        EventBody::OperatorAdded(_)
        | EventBody::OperatorKeyRotated(_)
        | EventBody::OperatorRemoved(_) => {
            (!bootstrap.iter().any(|(s, q)| s == e.stream && *q == e.seq)).then(|| {
                (
                    "operator",
                    None,
                    format!("{} after the first operators", e.body.event_type()),
                )
            })
        }
        EventBody::PolicySet(p) => (p.version > 1).then(|| {
            (
                "policy",
                None,
                format!("control policy version {}", p.version),
            )
        }),
        _ => None,
    }
}

/// Whether an adjustment booked at `at_ms` was gated: at or above the threshold, or bringing
/// its provider's adjustments of the window (`windows`, folded in booking order) to it.
fn adjustment_gate(
    a: &super::event::AdjustmentPosted,
    at_ms: i64,
    policy: &Policy,
    windows: &mut BTreeMap<ProviderId, VecDeque<(i64, u64)>>,
) -> Option<(&'static str, Option<ProviderId>, String)> {
    let amount = a.amount_micro_usdc.unsigned_abs();
    let window_ms = policy.adjustment_window_hours * 3_600_000;
    let seen = windows.entry(a.provider_id.clone()).or_default();
    while seen.front().is_some_and(|(t, _)| *t <= at_ms - window_ms) {
        seen.pop_front();
    }
    let earlier: u64 = seen.iter().map(|(_, v)| v).sum();
    seen.push_back((at_ms, amount));
    let threshold = policy.adjustment_approval_micro_usdc.unsigned_abs();
    let why = if amount >= threshold {
        format!(
            "adjustment {} of {} µUSDC",
            a.adjustment_id, a.amount_micro_usdc
        )
    } else if earlier + amount >= threshold {
        format!(
            "adjustment {} brings {}'s adjustments of {} h to {} µUSDC",
            a.adjustment_id,
            a.provider_id,
            policy.adjustment_window_hours,
            earlier + amount
        )
    } else {
        return None;
    };
    Some(("adjustment", Some(a.provider_id.clone()), why))
}
