//! Payout decisions (SPEC §5): each run candidate gets exactly one decision, the first
//! that applies, in a fixed order.

use super::event::{PayoutMethod, ProviderStatus, Rail};
use super::provider::ProviderRecord;

/// Micro-USDC in one cent.
pub const MICRO_USDC_PER_CENT: i64 = 10_000;

/// A run candidate's decision, spelled on the wire and in rows as its
/// [`as_str`](Decision::as_str).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
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

    pub fn parse(text: &str) -> Option<Decision> {
        Decision::ALL.into_iter().find(|d| d.as_str() == text)
    }

    /// Whether this decision creates a payout.
    pub fn creates_payout(self) -> bool {
        matches!(self, Decision::Held | Decision::Paid)
    }
}

/// A stored decision's text (`sqlx`'s `try_from` decodes a column through it).
impl TryFrom<String> for Decision {
    type Error = super::DomainError;

    fn try_from(text: String) -> Result<Decision, super::DomainError> {
        Decision::parse(&text).ok_or_else(|| {
            super::DomainError::new("invalid_decision", format!("unknown decision {text:?}"))
        })
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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

/// The sums the ledger keeps for one provider that a run's decision reads (SPEC §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// The balance of the payable account (whenever recorded).
    pub payable_balance_micro_usdc: i64,
    /// Payable lines booked on days before the cutoff's day.
    pub recorded_before_micro_usdc: i64,
    /// Payouts not failed, cancelled or returned.
    pub payouts_not_undone_micro_usdc: i64,
}

impl Candidate {
    /// What `decide` knows of a provider, from its registry record and its figures:
    /// `available(cutoff)` of SPEC §5 is the payable lines recorded before the cutoff minus
    /// every payout of the provider that has not failed, been cancelled or been returned.
    pub fn of(provider: &ProviderRecord, figures: Figures) -> Candidate {
        Candidate {
            rail: provider.payout_method.as_ref().map(PayoutMethod::rail),
            method_invalid: provider.method_invalid,
            method_set_at_ms: provider.method_set_at_ms,
            status: provider.status,
            payable_balance_micro_usdc: figures.payable_balance_micro_usdc,
            available_micro_usdc: figures.recorded_before_micro_usdc
                - figures.payouts_not_undone_micro_usdc,
            external_hold_reason: None,
        }
    }
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

    /// `available(cutoff)`: the payable recorded before the cutoff, less every payout that
    /// still stands; the provider's method and status come from its record.
    #[test]
    fn a_candidate_is_its_record_and_its_figures() {
        let provider = ProviderRecord {
            provider_id: "p".parse().unwrap(),
            name: "P".into(),
            email: "p@x".into(),
            tier: crate::event::Tier::Community,
            schedule: crate::event::Schedule::Weekly,
            status: ProviderStatus::OnHold,
            payout_method: Some(PayoutMethod::Solana { wallet: "w".into() }),
            method_set_at_ms: Some(7),
            method_invalid: true,
            registered_at_ms: 1,
        };
        let c = Candidate::of(
            &provider,
            Figures {
                payable_balance_micro_usdc: 90,
                recorded_before_micro_usdc: 70,
                payouts_not_undone_micro_usdc: 25,
            },
        );
        assert_eq!(
            (c.available_micro_usdc, c.payable_balance_micro_usdc),
            (45, 90)
        );
        assert_eq!(
            (c.rail, c.status, c.method_invalid, c.method_set_at_ms),
            (Some(Rail::Solana), ProviderStatus::OnHold, true, Some(7))
        );
    }

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
