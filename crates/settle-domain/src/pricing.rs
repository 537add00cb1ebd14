//! Pricing one usage interval (SPEC §2): split at UTC midnights, price each day segment
//! exactly in integers, round half-to-even once per line.

use std::collections::BTreeMap;

use super::event::Tier;
use super::money::{BPS_PER_WHOLE, FeeBps, MS_PER_HOUR, Rate, div_round_half_even};
use super::time::MS_PER_DAY;

/// One day segment of a usage interval, priced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PricedSegment {
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
    pub fee_bps: u16,
    pub gross_micro_usdc: i64,
    pub fee_micro_usdc: i64,
    pub net_micro_usdc: i64,
}

/// Splits `[start, end)` at every UTC midnight. Empty when `end <= start`.
pub fn split_at_midnights(started_at_ms: i64, ended_at_ms: i64) -> Vec<(i64, i64)> {
    let mut segments = Vec::new();
    let mut cursor = started_at_ms;
    while cursor < ended_at_ms {
        let next_midnight = (cursor.div_euclid(MS_PER_DAY) + 1) * MS_PER_DAY;
        let end = next_midnight.min(ended_at_ms);
        segments.push((cursor, end));
        cursor = end;
    }
    segments
}

/// Gross of `duration_ms` at `micro_usdc_per_hour`: `round_half_even(R × d / 3,600,000)`.
pub fn gross_micro_usdc(micro_usdc_per_hour: i64, duration_ms: i64) -> i64 {
    let exact = i128::from(micro_usdc_per_hour) * i128::from(duration_ms);
    i64::try_from(div_round_half_even(exact, MS_PER_HOUR)).expect("gross fits i64")
}

/// Fee of a gross amount: `round_half_even(gross × bps / 10000)`.
pub fn fee_micro_usdc(gross_micro_usdc: i64, fee: FeeBps) -> i64 {
    let exact = i128::from(gross_micro_usdc) * i128::from(fee.get());
    i64::try_from(div_round_half_even(exact, BPS_PER_WHOLE)).expect("fee fits i64")
}

/// Prices a usage interval: one segment per UTC day, the fee of each segment looked up at
/// the segment's start.
pub fn price_interval(
    started_at_ms: i64,
    ended_at_ms: i64,
    rate: Rate,
    fee_at: impl Fn(i64) -> FeeBps,
) -> Vec<PricedSegment> {
    let per_hour = rate.micro_usdc_per_hour();
    split_at_midnights(started_at_ms, ended_at_ms)
        .into_iter()
        .map(|(start, end)| {
            let fee_bps = fee_at(start);
            let gross = gross_micro_usdc(per_hour, end - start);
            let fee = fee_micro_usdc(gross, fee_bps);
            PricedSegment {
                started_at_ms: start,
                ended_at_ms: end,
                fee_bps: fee_bps.get(),
                gross_micro_usdc: gross,
                fee_micro_usdc: fee,
                net_micro_usdc: gross - fee,
            }
        })
        .collect()
}

/// The platform fee schedule: per tier, the fee in force from each effective instant.
/// The defaults (community 2000, enterprise 1500 bps) are in force from 1970-01-01.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeeBook {
    entries: BTreeMap<(Tier, i64), FeeBps>,
}

impl Default for FeeBook {
    fn default() -> Self {
        let mut entries = BTreeMap::new();
        entries.insert((Tier::Community, 0), FeeBps::new(2000).expect("valid"));
        entries.insert((Tier::Enterprise, 0), FeeBps::new(1500).expect("valid"));
        FeeBook { entries }
    }
}

impl FeeBook {
    /// Records a fee from `effective_from_ms`; a later call with the same instant wins.
    pub fn set(&mut self, tier: Tier, effective_from_ms: i64, fee: FeeBps) {
        self.entries.insert((tier, effective_from_ms), fee);
    }

    /// The fee in force for `tier` at `at_ms`.
    pub fn fee_at(&self, tier: Tier, at_ms: i64) -> FeeBps {
        self.entries
            .range((tier, i64::MIN)..=(tier, at_ms))
            .next_back()
            .map(|(_, fee)| *fee)
            .unwrap_or_else(|| FeeBps::new(tier.default_fee_bps()).expect("valid"))
    }
}

/// A provider's tier over time: each change takes effect at its `recorded_at`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TierHistory {
    /// `(from_ms, seq)` → tier: `seq` orders changes booked in the same millisecond.
    changes: BTreeMap<(i64, i64), Tier>,
}

impl TierHistory {
    /// Records the tier held from `from_ms`, set by the provider stream's `seq`-th event.
    pub fn set(&mut self, from_ms: i64, seq: i64, tier: Tier) {
        self.changes.insert((from_ms, seq), tier);
    }

    /// The tier held at `at_ms` (of changes in one millisecond, the last booked); before
    /// the first record, the first tier (the registration's).
    pub fn tier_at(&self, at_ms: i64) -> Option<Tier> {
        self.changes
            .range(..=(at_ms, i64::MAX))
            .next_back()
            .or_else(|| self.changes.iter().next())
            .map(|(_, tier)| *tier)
    }
}

/// A provider's price book: per GPU model, the rate in force from each effective instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PriceBook {
    entries: BTreeMap<(String, i64), Rate>,
}

impl PriceBook {
    /// Records a rate from `effective_from_ms`; a later call with the same instant wins.
    pub fn set(&mut self, model: &str, effective_from_ms: i64, rate: Rate) {
        self.entries
            .insert((model.to_owned(), effective_from_ms), rate);
    }

    /// The rate in force for `model` at `at_ms`, if any.
    pub fn rate_at(&self, model: &str, at_ms: i64) -> Option<Rate> {
        self.entries
            .range((model.to_owned(), i64::MIN)..=(model.to_owned(), at_ms))
            .next_back()
            .map(|(_, rate)| *rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_examples() {
        let r = Rate::parse("6770.501250").unwrap();
        assert_eq!(gross_micro_usdc(r.micro_usdc_per_hour(), 480), 902_734);
        let r = Rate::parse("1.8").unwrap();
        assert_eq!(gross_micro_usdc(r.micro_usdc_per_hour(), 1), 0);
    }

    #[test]
    fn splits_at_midnight() {
        let day = MS_PER_DAY;
        assert_eq!(
            split_at_midnights(day - 10, 2 * day + 5),
            vec![(day - 10, day), (day, 2 * day), (2 * day, 2 * day + 5)]
        );
        assert!(split_at_midnights(5, 5).is_empty());
    }

    #[test]
    fn books() {
        let mut fees = FeeBook::default();
        assert_eq!(fees.fee_at(Tier::Community, 5).get(), 2000);
        fees.set(Tier::Community, 100, FeeBps::new(1800).unwrap());
        fees.set(Tier::Community, 100, FeeBps::new(1700).unwrap());
        assert_eq!(fees.fee_at(Tier::Community, 99).get(), 2000);
        assert_eq!(fees.fee_at(Tier::Community, 100).get(), 1700);
        assert_eq!(fees.fee_at(Tier::Enterprise, 100).get(), 1500);
        let mut tiers = TierHistory::default();
        tiers.set(10, 1, Tier::Community);
        tiers.set(20, 2, Tier::Enterprise);
        assert_eq!(tiers.tier_at(5), Some(Tier::Community));
        assert_eq!(tiers.tier_at(20), Some(Tier::Enterprise));
        let mut prices = PriceBook::default();
        assert_eq!(prices.rate_at("H100-80GB", 100), None);
        prices.set("H100-80GB", 100, Rate::parse("2.49").unwrap());
        prices.set("H100-80GB", 200, Rate::parse("2.10").unwrap());
        prices.set("H100-80GB", 200, Rate::parse("2.20").unwrap());
        prices.set("A100-80GB", 50, Rate::parse("1.50").unwrap());
        assert_eq!(
            prices.rate_at("H100-80GB", 99),
            None,
            "before the first rate"
        );
        assert_eq!(prices.rate_at("H100-80GB", 199), Rate::parse("2.49").ok());
        assert_eq!(
            prices.rate_at("H100-80GB", 200),
            Rate::parse("2.2").ok(),
            "the later record of one instant wins"
        );
        assert_eq!(prices.rate_at("A100-80GB", 60), Rate::parse("1.5").ok());
        assert_eq!(
            prices.rate_at("L4-24GB", 500),
            None,
            "another model's rates never apply"
        );
    }

    #[test]
    fn tier_changes_in_one_millisecond_keep_the_registration_tier_before_it() {
        let mut tiers = TierHistory::default();
        tiers.set(100, 1, Tier::Community);
        tiers.set(100, 2, Tier::Enterprise);
        assert_eq!(tiers.tier_at(50), Some(Tier::Community));
        assert_eq!(tiers.tier_at(100), Some(Tier::Enterprise));
        assert_eq!(tiers.tier_at(150), Some(Tier::Enterprise));
    }
}
