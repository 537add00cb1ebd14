//! Property tests of the pricing (SPEC §2) against an exact integer oracle written here,
//! independent of the engine's arithmetic helpers.

use proptest::prelude::*;
use settle::domain::event::Tier;
use settle::domain::money::{FeeBps, Rate};
use settle::domain::pricing::{FeeBook, gross_micro_usdc, price_interval, split_at_midnights};

const DAY: i64 = 86_400_000;

/// Half-to-even rounding of `n / d` for `n >= 0`, `d > 0`, by comparing the remainder.
fn oracle_div(n: u128, d: u128) -> u128 {
    let (q, r) = (n / d, n % d);
    match (2 * r).cmp(&d) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal => q + (q & 1),
    }
}

/// The oracle: walk the interval day by day through calendar dates (chrono), price each
/// piece as R × d / 3.6e6 and the fee as gross × bps / 1e4, each rounded half-to-even.
fn oracle(
    start: i64,
    end: i64,
    rate_micros: u128,
    fees: &[(i64, u16)],
) -> Vec<(i64, i64, u128, u128)> {
    let mut out = Vec::new();
    let mut t = start;
    while t < end {
        let date = chrono::DateTime::from_timestamp_millis(t)
            .unwrap()
            .date_naive();
        let next = (date + chrono::Days::new(1))
            .and_hms_opt(0, 0, 0)
            .unwrap()
            .and_utc()
            .timestamp_millis();
        let e = next.min(end);
        let gross = oracle_div(rate_micros * (e - t) as u128, 3_600_000);
        let bps = fees
            .iter()
            .filter(|(from, _)| *from <= t)
            .map(|(_, b)| *b)
            .next_back()
            .unwrap_or(2000);
        let fee = oracle_div(gross * bps as u128, 10_000);
        out.push((t, e, gross, fee));
        t = e;
    }
    out
}

fn rate_text(micros: u64) -> String {
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

#[test]
fn fixed_cases() {
    let r = Rate::parse("1.8").unwrap();
    assert_eq!(gross_micro_usdc(r.micro_usdc_per_hour(), 1), 0);
    let r = Rate::parse("6770.501250").unwrap();
    assert_eq!(gross_micro_usdc(r.micro_usdc_per_hour(), 480), 902_734);
    // One hour at 2.49 with the 20% community fee: 2.490000 gross, 0.498000 fee.
    let s = price_interval(0, 3_600_000, Rate::parse("2.49").unwrap(), |_| {
        FeeBps::new(2000).unwrap()
    });
    assert_eq!(
        (
            s[0].gross_micro_usdc,
            s[0].fee_micro_usdc,
            s[0].net_micro_usdc
        ),
        (2_490_000, 498_000, 1_992_000)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn pricing_matches_the_integer_oracle(
        rate_micros in 1u64..=10_000_000_000,
        start in 1_700_000_000_000i64..1_900_000_000_000,
        duration in 1i64..=7 * DAY,
        fee_changes in proptest::collection::vec((-3 * DAY..10 * DAY, 0u16..=10_000), 0..4),
    ) {
        let end = start + duration;
        let mut book = FeeBook::default();
        let mut fees: Vec<(i64, u16)> = vec![(0, 2000)];
        for (offset, bps) in &fee_changes {
            book.set(Tier::Community, start + offset, FeeBps::new(i64::from(*bps)).unwrap());
            fees.push((start + offset, *bps));
        }
        // Later records win for equal instants: keep the last per instant, in time order.
        fees.sort_by_key(|(t, _)| *t);
        let mut dedup: Vec<(i64, u16)> = Vec::new();
        for (t, b) in fees {
            match dedup.last_mut() {
                Some(last) if last.0 == t => last.1 = b,
                _ => dedup.push((t, b)),
            }
        }
        let rate = Rate::parse(&rate_text(rate_micros)).unwrap();
        let segments = price_interval(start, end, rate, |at| book.fee_at(Tier::Community, at));
        let expected = oracle(start, end, u128::from(rate_micros), &dedup);
        prop_assert_eq!(segments.len(), expected.len());
        for (s, (t0, t1, gross, fee)) in segments.iter().zip(expected) {
            prop_assert_eq!((s.started_at_ms, s.ended_at_ms), (t0, t1));
            prop_assert_eq!(s.gross_micro_usdc as u128, gross);
            prop_assert_eq!(s.fee_micro_usdc as u128, fee);
            // Net against the oracle's own gross and fee, not the engine's.
            prop_assert_eq!(s.net_micro_usdc as u128, gross - fee);
        }
    }

    #[test]
    fn split_segments_tile_the_interval(start in -10 * DAY..10_000 * DAY, duration in 0i64..=30 * DAY) {
        let segments = split_at_midnights(start, start + duration);
        let total: i64 = segments.iter().map(|(a, b)| b - a).sum();
        prop_assert_eq!(total, duration);
        for w in segments.windows(2) {
            prop_assert_eq!(w[0].1, w[1].0);
            prop_assert_eq!(w[0].1.rem_euclid(DAY), 0);
        }
        for (a, b) in &segments {
            prop_assert!(a < b);
            prop_assert_eq!(a.div_euclid(DAY), (b - 1).div_euclid(DAY), "a segment stays within one day");
        }
    }

    #[test]
    fn any_amount_text_round_trips(micros in i64::MIN / 2..i64::MAX / 2) {
        let text = settle::domain::money::format_micro_usdc(micros);
        prop_assert_eq!(settle::domain::money::parse_micro_usdc(&text).unwrap(), micros);
    }
}
