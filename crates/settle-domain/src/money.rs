//! Money: integers of micro-USDC, rates as exact decimals, fees in basis points.
//!
//! Invariant: no binary float ever holds an amount. Amounts travel as `i64` micro-USDC
//! (`*_micro_usdc`), render as decimal strings with exactly six fractional digits and are
//! parsed from decimal strings only.

use rust_decimal::Decimal;
use std::fmt;
use std::str::FromStr;

use super::DomainError;

/// Micro-USDC per USDC (the token's six decimals).
pub const MICROS_PER_USDC: i64 = 1_000_000;
/// Milliseconds per hour, the denominator of every usage price.
pub const MS_PER_HOUR: i128 = 3_600_000;
/// Basis points in one whole.
pub const BPS_PER_WHOLE: i128 = 10_000;

/// Divides `numerator` by a positive `denominator`, rounding half to even, exactly.
pub fn div_round_half_even(numerator: i128, denominator: i128) -> i128 {
    assert!(denominator > 0, "denominator must be positive");
    let quotient = numerator.div_euclid(denominator);
    let remainder = numerator.rem_euclid(denominator);
    let twice = remainder * 2;
    if twice > denominator || (twice == denominator && quotient % 2 != 0) {
        quotient + 1
    } else {
        quotient
    }
}

/// Formats micro-USDC as a decimal string with exactly six fractional digits.
pub fn format_micro_usdc(micro_usdc: i64) -> String {
    let sign = if micro_usdc < 0 { "-" } else { "" };
    let abs = micro_usdc.unsigned_abs();
    format!(
        "{sign}{}.{:06}",
        abs / MICROS_PER_USDC as u64,
        abs % MICROS_PER_USDC as u64
    )
}

/// Formats cents (of EUR or USD) as a decimal string with two fractional digits.
pub fn format_cents(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// Parses a decimal string (`"12.5"`, `"-0.000001"`) into micro-USDC.
///
/// At most six fractional digits; no exponent, no float syntax, no surrounding spaces.
pub fn parse_micro_usdc(text: &str) -> Result<i64, DomainError> {
    let bad = || DomainError::new("invalid_amount", format!("not a USDC amount: {text:?}"));
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, frac) = match digits.split_once('.') {
        Some((w, f)) => (w, f),
        None => (digits, ""),
    };
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || (digits.contains('.') && frac.is_empty())
    {
        return Err(bad());
    }
    if frac.len() > 6 {
        return Err(DomainError::new(
            "amount_precision",
            format!("at most 6 fractional digits: {text:?}"),
        ));
    }
    let whole: i64 = whole.parse().map_err(|_| bad())?;
    let frac_value: i64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<6}").parse().map_err(|_| bad())?
    };
    let magnitude = whole
        .checked_mul(MICROS_PER_USDC)
        .and_then(|m| m.checked_add(frac_value))
        .ok_or_else(|| DomainError::new("amount_out_of_range", format!("too large: {text:?}")))?;
    Ok(if negative { -magnitude } else { magnitude })
}

/// A price in USDC per GPU-hour: `0 < rate <= 10000`, at most six fractional digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(Decimal);

impl Rate {
    /// The largest accepted rate, USDC per GPU-hour.
    pub const MAX_USDC_PER_HOUR: i64 = 10_000;

    pub fn parse(text: &str) -> Result<Rate, DomainError> {
        let bad = || {
            DomainError::new(
                "invalid_rate",
                format!(
                    "rate must be a decimal string of USDC per hour, 0 < rate <= 10000, at most 6 decimals: {text:?}"
                ),
            )
        };
        if text.is_empty()
            || !text.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            || text.starts_with('.')
            || text.ends_with('.')
        {
            return Err(bad());
        }
        let value = Decimal::from_str(text).map_err(|_| bad())?.normalize();
        if value <= Decimal::ZERO
            || value > Decimal::from(Self::MAX_USDC_PER_HOUR)
            || value.scale() > 6
        {
            return Err(bad());
        }
        Ok(Rate(value))
    }

    /// `rate × 10^6`: micro-USDC per hour, an exact integer.
    pub fn micro_usdc_per_hour(self) -> i64 {
        use rust_decimal::prelude::ToPrimitive;
        // Exact: scale <= 6 and rate <= 10000 make this an integer below 10^10.
        (self.0 * Decimal::from(MICROS_PER_USDC))
            .to_i64()
            .expect("a parsed rate fits i64 micro-USDC")
    }

    /// The canonical decimal text, six fractional digits (`"2.490000"`).
    pub fn to_canonical(self) -> String {
        format_micro_usdc(self.micro_usdc_per_hour())
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_canonical())
    }
}

/// A platform fee in basis points, `0..=10000`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FeeBps(u16);

impl FeeBps {
    pub fn new(bps: i64) -> Result<FeeBps, DomainError> {
        if (0..=10_000).contains(&bps) {
            Ok(FeeBps(bps as u16))
        } else {
            Err(DomainError::new(
                "invalid_fee_bps",
                format!("fee must be 0..=10000 basis points, got {bps}"),
            ))
        }
    }
    pub fn get(self) -> u16 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_even_division() {
        assert_eq!(div_round_half_even(5, 10), 0);
        assert_eq!(div_round_half_even(15, 10), 2);
        assert_eq!(div_round_half_even(25, 10), 2);
        assert_eq!(div_round_half_even(26, 10), 3);
        assert_eq!(div_round_half_even(-5, 10), 0);
        assert_eq!(div_round_half_even(-15, 10), -2);
        assert_eq!(div_round_half_even(-16, 10), -2);
    }

    #[test]
    fn parses_and_formats_amounts() {
        assert_eq!(parse_micro_usdc("12.5").unwrap(), 12_500_000);
        assert_eq!(parse_micro_usdc("-12.500000").unwrap(), -12_500_000);
        assert_eq!(parse_micro_usdc("0.000001").unwrap(), 1);
        assert_eq!(parse_micro_usdc("7").unwrap(), 7_000_000);
        for bad in [
            "",
            "1e3",
            "1.",
            ".5",
            "1.0000001",
            "abc",
            " 1",
            "--1",
            "NaN",
        ] {
            assert!(parse_micro_usdc(bad).is_err(), "{bad}");
        }
        assert_eq!(format_micro_usdc(12_500_000), "12.500000");
        assert_eq!(format_micro_usdc(-1), "-0.000001");
        assert_eq!(format_micro_usdc(0), "0.000000");
        assert_eq!(format_cents(1234), "12.34");
        assert_eq!(format_cents(5), "0.05");
        assert_eq!(format_cents(0), "0.00");
        assert_eq!(format_cents(-1234), "-12.34");
        assert_eq!(format_cents(-5), "-0.05");
    }

    #[test]
    fn rates() {
        assert_eq!(
            Rate::parse("2.49").unwrap(),
            Rate::parse("2.490000").unwrap()
        );
        assert_eq!(
            Rate::parse("6770.501250").unwrap().micro_usdc_per_hour(),
            6_770_501_250
        );
        assert_eq!(
            Rate::parse("10000").unwrap().micro_usdc_per_hour(),
            10_000_000_000
        );
        assert_eq!(Rate::parse("2.49").unwrap().to_canonical(), "2.490000");
        assert_eq!(Rate::parse("0.000001").unwrap().to_string(), "0.000001");
        for bad in [
            ".5",
            "5.",
            "0",
            "0.0",
            "10000.000001",
            "1.0000001",
            "-1",
            "1e2",
            "",
            "abc",
        ] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }
}
