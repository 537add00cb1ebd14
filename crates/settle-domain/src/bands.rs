//! Bands that keep an input near what the books already say, so that one mistaken or
//! malicious number cannot mint money: the rate sent with a usage event against the
//! provider's price book (SPEC §2), and an FX rate against absolute bounds and the rate
//! before it. Pure functions over exact decimals and integers, never floats.

use rust_decimal::Decimal;

use super::DomainError;
use super::money::Rate;

/// What to do with a usage event's own rate when the provider's price book has no rate for
/// the GPU's model at the event's `started_at` (nothing to compare it with).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WithoutPriceBook {
    /// Book it at the sent rate (only `Rate`'s own bounds apply).
    Accept,
    /// Reject it with `rate_without_price_book`.
    Reject,
}

/// The accepted interval of a usage event's own rate, in percent of the price-book rate in
/// force at its `started_at`, both ends inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateBand {
    pub min_pct: u32,
    pub max_pct: u32,
    pub without_price_book: WithoutPriceBook,
}

/// Checks a usage event's own rate `sent` against `book`, the price-book rate of the GPU's
/// model at the event's `started_at` (if any): `book × min_pct / 100 <= sent <= book ×
/// max_pct / 100`, computed exactly in integers (micro-USDC per hour × 100).
pub fn rate_check(sent: Rate, book: Option<Rate>, band: &RateBand) -> Result<(), DomainError> {
    let Some(book) = book else {
        return match band.without_price_book {
            WithoutPriceBook::Accept => Ok(()),
            WithoutPriceBook::Reject => Err(DomainError::new(
                "rate_without_price_book",
                format!(
                    "rate_usdc_per_hour {sent} cannot be checked: the price book has no rate for this GPU's model at started_at (ledger.usage_rate_without_price_book = \"reject\")"
                ),
            )),
        };
    };
    let sent_x100 = i128::from(sent.micro_usdc_per_hour()) * 100;
    let book_micro = i128::from(book.micro_usdc_per_hour());
    let low = book_micro * i128::from(band.min_pct);
    let high = book_micro * i128::from(band.max_pct);
    if sent_x100 < low || sent_x100 > high {
        return Err(DomainError::new(
            "rate_out_of_band",
            format!(
                "rate_usdc_per_hour {sent} is outside {}% to {}% of the price-book rate {book} in force at started_at",
                band.min_pct, band.max_pct
            ),
        ));
    }
    Ok(())
}

/// The accepted EUR per USD rates: absolute bounds (inclusive) and the largest change from
/// the rate in force, in percent of it (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FxBand {
    pub min: Decimal,
    pub max: Decimal,
    pub step_max_pct: u32,
}

/// Whether `new` lies more than `pct` percent away from `reference` (a positive reference;
/// an overflow counts as away).
pub fn moves_more_than(reference: Decimal, new: Decimal, pct: u32) -> bool {
    match (
        (new - reference).abs().checked_mul(Decimal::ONE_HUNDRED),
        reference.checked_mul(Decimal::from(pct)),
    ) {
        (Some(change_x100), Some(limit)) => change_x100 > limit,
        _ => true,
    }
}

/// Whether `new` lies within `min_pct..=max_pct` percent of `reference` (an overflow
/// counts as outside).
pub fn within_pct(reference: Decimal, new: Decimal, min_pct: u32, max_pct: u32) -> bool {
    match (
        new.checked_mul(Decimal::ONE_HUNDRED),
        reference.checked_mul(Decimal::from(min_pct)),
        reference.checked_mul(Decimal::from(max_pct)),
    ) {
        (Some(new_x100), Some(low), Some(high)) => new_x100 >= low && new_x100 <= high,
        _ => false,
    }
}

/// The median of `values` (the lower middle one of an even count); `None` for none.
pub fn median(mut values: Vec<Decimal>) -> Option<Decimal> {
    values.sort();
    values.get(values.len().saturating_sub(1) / 2).copied()
}

/// Checks a new EUR per USD rate against the band and against `previous`, the rate in force
/// (none for the first rate): `min <= new <= max` and `|new − previous| × 100 <= previous ×
/// step_max_pct`, exactly in decimals. "92" typed for "0.92" fails both.
pub fn fx_check(previous: Option<Decimal>, new: Decimal, band: &FxBand) -> Result<(), DomainError> {
    if new < band.min || new > band.max {
        return Err(DomainError::new(
            "fx_rate_out_of_band",
            format!(
                "eur_per_usd {new} is outside [{}, {}] (control.fx_eur_per_usd_min, control.fx_eur_per_usd_max)",
                band.min, band.max
            ),
        ));
    }
    if let Some(previous) = previous.filter(|p| *p > Decimal::ZERO)
        && moves_more_than(previous, new, band.step_max_pct)
    {
        return Err(DomainError::new(
            "fx_rate_out_of_band",
            format!(
                "eur_per_usd {new} moves more than {}% from the rate in force {previous} (control.fx_step_max_pct)",
                band.step_max_pct
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(text: &str) -> Rate {
        Rate::parse(text).unwrap()
    }

    fn code(r: Result<(), DomainError>) -> &'static str {
        match r {
            Ok(()) => "ok",
            Err(e) => e.code,
        }
    }

    const HALF_TO_TWICE: RateBand = RateBand {
        min_pct: 50,
        max_pct: 200,
        without_price_book: WithoutPriceBook::Reject,
    };

    #[test]
    fn a_rate_is_checked_against_the_price_book_both_ends_inclusive() {
        let book = Some(rate("2.49"));
        for (sent, expected) in [
            ("1.245", "ok"),
            ("1.244999", "rate_out_of_band"),
            ("2.49", "ok"),
            ("4.98", "ok"),
            ("4.980001", "rate_out_of_band"),
            ("10000", "rate_out_of_band"),
            ("0.000001", "rate_out_of_band"),
        ] {
            assert_eq!(
                code(rate_check(rate(sent), book, &HALF_TO_TWICE)),
                expected,
                "{sent}"
            );
        }
    }

    #[test]
    fn without_a_price_book_rate_the_configuration_decides() {
        assert_eq!(
            code(rate_check(rate("3"), None, &HALF_TO_TWICE)),
            "rate_without_price_book"
        );
        let accept = RateBand {
            without_price_book: WithoutPriceBook::Accept,
            ..HALF_TO_TWICE
        };
        assert_eq!(code(rate_check(rate("3"), None, &accept)), "ok");
    }

    #[test]
    fn the_largest_rates_do_not_overflow() {
        let wide = RateBand {
            min_pct: 0,
            max_pct: u32::MAX,
            ..HALF_TO_TWICE
        };
        assert_eq!(
            code(rate_check(rate("10000"), Some(rate("10000")), &wide)),
            "ok"
        );
    }

    fn d(text: &str) -> Decimal {
        text.parse().unwrap()
    }

    fn fx() -> FxBand {
        FxBand {
            min: d("0.5"),
            max: d("2.0"),
            step_max_pct: 10,
        }
    }

    #[test]
    fn an_fx_rate_stays_in_its_band_and_moves_by_small_steps() {
        for (previous, new, expected) in [
            (None, "0.92", "ok"),
            (None, "92", "fx_rate_out_of_band"),
            (None, "0.5", "ok"),
            (None, "0.4999999999", "fx_rate_out_of_band"),
            (None, "2.0", "ok"),
            (None, "2.0000000001", "fx_rate_out_of_band"),
            (Some("0.92"), "92", "fx_rate_out_of_band"),
            (Some("0.92"), "1.012", "ok"),
            (Some("0.92"), "1.0120000001", "fx_rate_out_of_band"),
            (Some("0.92"), "0.828", "ok"),
            (Some("0.92"), "0.8279999999", "fx_rate_out_of_band"),
            (Some("0.92"), "0.92", "ok"),
        ] {
            assert_eq!(
                code(fx_check(previous.map(d), d(new), &fx())),
                expected,
                "{previous:?} -> {new}"
            );
        }
    }
}
