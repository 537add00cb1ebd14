//! Payout decisions (SPEC §5): each run candidate gets exactly one decision, the first
//! that applies, in a fixed order.

use super::event::{ProviderStatus, Rail};

/// Micro-USDC in one cent.
pub const MICRO_USDC_PER_CENT: i64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Decision {
    NoMethod,
    CoolingOff,
    Negative,
    NothingDue,
    BelowMinimum,
    Held,
    Paid,
}

impl Decision {
    pub const ALL: [Decision; 7] = [
        Decision::NoMethod,
        Decision::CoolingOff,
        Decision::Negative,
        Decision::NothingDue,
        Decision::BelowMinimum,
        Decision::Held,
        Decision::Paid,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::NoMethod => "no_method",
            Decision::CoolingOff => "cooling_off",
            Decision::Negative => "negative",
            Decision::NothingDue => "nothing_due",
            Decision::BelowMinimum => "below_minimum",
            Decision::Held => "held",
            Decision::Paid => "paid",
        }
    }

    /// Whether this decision creates a payout.
    pub fn creates_payout(self) -> bool {
        matches!(self, Decision::Held | Decision::Paid)
    }
}

/// What a run knows about one candidate when it decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The rail of the provider's payout method, `None` without a method.
    pub rail: Option<Rail>,
    /// Bank details marked invalid by a return.
    pub method_invalid: bool,
    /// When a `provider.update` last set the payout method (registration does not count).
    pub method_set_at_ms: Option<i64>,
    pub status: ProviderStatus,
    /// The provider's whole payable balance, whenever recorded.
    pub payable_balance_micro_usdc: i64,
    /// `available(cutoff)` of SPEC §5.
    pub available_micro_usdc: i64,
    /// A reason to hold that the caller found (`fx_stale` for a EUR payout without a fresh rate).
    pub external_hold_reason: Option<String>,
}

/// The run's policy: its minimum, the per-payout limit and the takeover guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunPolicy {
    pub minimum_micro_usdc: i64,
    pub payout_limit_micro_usdc: i64,
    pub cooling_off_ms: i64,
    /// The instant the candidate is decided.
    pub decided_at_ms: i64,
}

/// The outcome of deciding one candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    /// What is paid: `available`, floored to whole cents on bank rails, for `held` and
    /// `paid`; 0 for every decision that creates no payout.
    pub amount_micro_usdc: i64,
    pub hold_reason: Option<String>,
}

/// The amount a payout on `rail` would carry out of `available`.
pub fn payable_amount(rail: Option<Rail>, available_micro_usdc: i64) -> i64 {
    match rail {
        Some(r) if r.is_bank() => {
            available_micro_usdc.div_euclid(MICRO_USDC_PER_CENT) * MICRO_USDC_PER_CENT
        }
        _ => available_micro_usdc,
    }
}

/// Decides one candidate: the first rule that applies, in SPEC order.
pub fn decide(candidate: &Candidate, policy: &RunPolicy) -> Outcome {
    let amount = payable_amount(candidate.rail, candidate.available_micro_usdc);
    // A decision that creates no payout pays nothing: its amount is 0 (what the provider
    // had is `available`, recorded beside it).
    let outcome = |decision: Decision, hold_reason: Option<String>| Outcome {
        decision,
        amount_micro_usdc: if decision.creates_payout() { amount } else { 0 },
        hold_reason,
    };
    if candidate.rail.is_none() || candidate.method_invalid {
        return outcome(Decision::NoMethod, None);
    }
    if let Some(set_at) = candidate.method_set_at_ms
        && policy.decided_at_ms - set_at < policy.cooling_off_ms
    {
        return outcome(Decision::CoolingOff, None);
    }
    if candidate.payable_balance_micro_usdc < 0 {
        return outcome(Decision::Negative, None);
    }
    if amount <= 0 {
        return outcome(Decision::NothingDue, None);
    }
    if amount < policy.minimum_micro_usdc {
        return outcome(Decision::BelowMinimum, None);
    }
    let hold_reason = if candidate.status == ProviderStatus::OnHold {
        Some("provider_on_hold".to_owned())
    } else if amount > policy.payout_limit_micro_usdc {
        Some("above_payout_limit".to_owned())
    } else {
        candidate.external_hold_reason.clone()
    };
    match hold_reason {
        Some(reason) => outcome(Decision::Held, Some(reason)),
        None => outcome(Decision::Paid, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> (Candidate, RunPolicy) {
        (
            Candidate {
                rail: Some(Rail::Solana),
                method_invalid: false,
                method_set_at_ms: None,
                status: ProviderStatus::Active,
                payable_balance_micro_usdc: 30_000_000,
                available_micro_usdc: 30_000_000,
                external_hold_reason: None,
            },
            RunPolicy {
                minimum_micro_usdc: 25_000_000,
                payout_limit_micro_usdc: 100_000_000_000,
                cooling_off_ms: 72 * 3_600_000,
                decided_at_ms: 1_000_000_000_000,
            },
        )
    }

    #[test]
    fn each_decision_in_order() {
        let (c, p) = base();
        assert_eq!(decide(&c, &p).decision, Decision::Paid);
        let d = |f: &dyn Fn(&mut Candidate)| {
            let mut c = c.clone();
            f(&mut c);
            decide(&c, &p).decision
        };
        assert_eq!(d(&|c| c.rail = None), Decision::NoMethod);
        assert_eq!(d(&|c| c.method_invalid = true), Decision::NoMethod);
        assert_eq!(
            d(&|c| c.method_set_at_ms = Some(p.decided_at_ms - 3_600_000)),
            Decision::CoolingOff
        );
        assert_eq!(
            d(&|c| c.method_set_at_ms = Some(p.decided_at_ms - 72 * 3_600_000)),
            Decision::Paid
        );
        assert_eq!(
            d(&|c| c.payable_balance_micro_usdc = -1),
            Decision::Negative
        );
        assert_eq!(d(&|c| c.available_micro_usdc = 0), Decision::NothingDue);
        assert_eq!(
            d(&|c| c.available_micro_usdc = 24_999_999),
            Decision::BelowMinimum
        );
        assert_eq!(d(&|c| c.available_micro_usdc = 25_000_000), Decision::Paid);
        assert_eq!(d(&|c| c.status = ProviderStatus::OnHold), Decision::Held);
        assert_eq!(
            d(&|c| c.available_micro_usdc = 100_000_000_001),
            Decision::Held
        );
        // SPEC §5: held *above* the limit; exactly the limit is paid.
        assert_eq!(
            d(&|c| c.available_micro_usdc = 100_000_000_000),
            Decision::Paid
        );
    }

    #[test]
    fn bank_amounts_floor_to_cents() {
        let (mut c, p) = base();
        c.rail = Some(Rail::Sepa);
        c.available_micro_usdc = 30_009_999;
        let o = decide(&c, &p);
        assert_eq!(o.amount_micro_usdc, 30_000_000);
        assert_eq!(payable_amount(Some(Rail::Ach), 9_999), 0);
    }
}
