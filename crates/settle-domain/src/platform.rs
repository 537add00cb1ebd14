//! The platform aggregate's registry commands (SPEC §2, §6): fee schedules per tier and the
//! EUR per USD rate, both on the `platform` stream.
//!
//! As for a provider ([`super::provider`]): [`PlatformState::apply`] folds the stream's
//! events, [`decide`] answers a command with the events it books (none: a `duplicate`) or
//! the refusal; the ledger loads the state from the projections under the stream's lock.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use super::DomainError;
use super::bands::{FxBand, fx_check};
use super::event::{EventBody, FeeScheduleSet, FxRateSet, Tier};
use super::ids::FxId;
use super::money::FeeBps;

/// What the platform stream holds that its registry commands read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlatformState {
    /// The fee schedules: basis points by (tier, effective from).
    pub fees: BTreeMap<(Tier, i64), u16>,
    /// The EUR per USD rate in force (the latest recorded).
    pub fx_latest: Option<Decimal>,
}

impl PlatformState {
    /// Folds one event of the platform stream.
    pub fn apply(&mut self, body: &EventBody) {
        match body {
            EventBody::FeeScheduleSet(f) => {
                self.fees.insert((f.tier, f.effective_from_ms), f.fee_bps);
            }
            EventBody::FxRateSet(f) => {
                // The ledger only books rates it parsed; an unreadable one changes nothing.
                if let Ok(rate) = f.eur_per_usd.parse::<Decimal>() {
                    self.fx_latest = Some(rate);
                }
            }
            _ => {}
        }
    }
}

#[derive(Clone, Debug)]
pub struct SetFee {
    pub tier: Tier,
    pub fee: FeeBps,
    pub effective_from_ms: i64,
}

/// Records the EUR per USD rate used for EUR payouts created from now on.
#[derive(Clone, Debug)]
pub struct SetFxRate {
    pub eur_per_usd: Decimal,
    /// The idempotency key. Without one, the rate already in force is a duplicate, so
    /// replaying an old line never makes a stale rate fresh again.
    pub fx_id: Option<FxId>,
    /// The operator's band (`[control]`), which the rate must stay inside and near the
    /// rate in force.
    pub band: FxBand,
}

impl SetFxRate {
    /// The rate as booked: normalised decimal text.
    pub fn rate_text(&self) -> String {
        self.eur_per_usd.normalize().to_string()
    }
}

#[derive(Clone, Copy, Debug)]
pub enum PlatformCommand<'a> {
    SetFee(&'a SetFee),
    SetFxRate(&'a SetFxRate),
}

/// Decides a platform command: the events to book (empty: a `duplicate`), or the refusal.
pub fn decide(state: &PlatformState, cmd: PlatformCommand) -> Result<Vec<EventBody>, DomainError> {
    match cmd {
        PlatformCommand::SetFee(c) => {
            let bps = c.fee.get();
            if state.fees.get(&(c.tier, c.effective_from_ms)) == Some(&bps) {
                return Ok(vec![]);
            }
            Ok(vec![EventBody::FeeScheduleSet(FeeScheduleSet {
                tier: c.tier,
                fee_bps: bps,
                effective_from_ms: c.effective_from_ms,
            })])
        }
        PlatformCommand::SetFxRate(c) => {
            let rate = c.eur_per_usd;
            if rate <= Decimal::ZERO || rate.scale() > 10 {
                return Err(DomainError::new(
                    "invalid_fx_rate",
                    "eur_per_usd must be a positive decimal with at most 10 fractional digits",
                ));
            }
            if c.fx_id.is_none()
                && state
                    .fx_latest
                    .is_some_and(|l| l.normalize() == rate.normalize())
            {
                return Ok(vec![]);
            }
            // A typo ("92" for "0.92") never pays: the rate stays in its band and near the
            // rate in force.
            fx_check(state.fx_latest, rate, &c.band)?;
            Ok(vec![EventBody::FxRateSet(FxRateSet {
                eur_per_usd: c.rate_text(),
            })])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fee_set(bps: u16) -> EventBody {
        EventBody::FeeScheduleSet(FeeScheduleSet {
            tier: Tier::Community,
            fee_bps: bps,
            effective_from_ms: 1_000,
        })
    }

    fn fx_set(rate: &str) -> EventBody {
        EventBody::FxRateSet(FxRateSet {
            eur_per_usd: rate.into(),
        })
    }

    fn fx(rate: &str, keyed: bool) -> SetFxRate {
        SetFxRate {
            eur_per_usd: rate.parse().unwrap(),
            fx_id: keyed.then(|| FxId::parse("fx_1").unwrap()),
            band: FxBand {
                min: "0.5".parse().unwrap(),
                max: "2".parse().unwrap(),
                step_max_pct: 10,
            },
        }
    }

    fn run(given: &[EventBody], when: PlatformCommand) -> Result<Vec<EventBody>, &'static str> {
        let mut state = PlatformState::default();
        for e in given {
            state.apply(e);
        }
        decide(&state, when).map_err(|e| e.code)
    }

    /// Given the platform stream's events, when a command, then its events or refusal.
    #[test]
    fn platform_commands_given_when_then() {
        use PlatformCommand as C;
        let fee = |bps: i64| SetFee {
            tier: Tier::Community,
            fee: FeeBps::new(bps).unwrap(),
            effective_from_ms: 1_000,
        };
        let f = fee(1500);
        assert_eq!(
            run(&[], C::SetFee(&f)),
            Ok(vec![fee_set(1500)]),
            "first fee"
        );
        assert_eq!(
            run(&[fee_set(1500)], C::SetFee(&f)),
            Ok(vec![]),
            "same fee again"
        );
        assert_eq!(
            run(&[fee_set(1000)], C::SetFee(&f)),
            Ok(vec![fee_set(1500)]),
            "changed"
        );
        let other_from = SetFee {
            effective_from_ms: 2_000,
            ..fee(1500)
        };
        assert_eq!(
            run(&[fee_set(1500)], C::SetFee(&other_from)).map(|e| e.len()),
            Ok(1),
            "same fee from another instant"
        );

        let c = fx("0.92", false);
        assert_eq!(
            run(&[], C::SetFxRate(&c)),
            Ok(vec![fx_set("0.92")]),
            "first rate"
        );
        assert_eq!(
            run(&[fx_set("0.920")], C::SetFxRate(&c)),
            Ok(vec![]),
            "rate in force, no key"
        );
        let c = fx("0.92", true);
        assert_eq!(
            run(&[fx_set("0.92")], C::SetFxRate(&c)),
            Ok(vec![fx_set("0.92")]),
            "rate in force re-confirmed under a key"
        );
        let c = fx("0.95", false);
        assert_eq!(
            run(&[fx_set("0.92")], C::SetFxRate(&c)),
            Ok(vec![fx_set("0.95")]),
            "a step"
        );
        let c = fx("92", false);
        assert_eq!(
            run(&[], C::SetFxRate(&c)),
            Err("fx_rate_out_of_band"),
            "outside the band"
        );
        let c = fx("1.2", false);
        assert_eq!(
            run(&[fx_set("0.92")], C::SetFxRate(&c)),
            Err("fx_rate_out_of_band"),
            "too far a step"
        );
        let c = fx("0", true);
        assert_eq!(run(&[], C::SetFxRate(&c)), Err("invalid_fx_rate"), "zero");
        let c = fx("0.12345678901", true);
        assert_eq!(
            run(&[], C::SetFxRate(&c)),
            Err("invalid_fx_rate"),
            "11 fractional digits"
        );
    }
}
