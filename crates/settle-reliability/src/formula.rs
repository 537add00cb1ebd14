//! The published formula: its constants and its integer arithmetic, in one place.
//!
//! All values are basis points (`_bps`, `0..=10_000`, 10 000 = 100 %). Every division
//! rounds half to even ([`div_half_even`]), so a value on the dashboard can be recomputed
//! by hand from the figures shown beside it.

/// 100 % in basis points.
pub const BPS_FULL: u16 = 10_000;

/// The neutral prior (90 %) a part is blended with while the GPU has little history.
pub const PRIOR_BPS: u16 = 9_000;

/// Weight of uptime in the combined score (50 %).
pub const WEIGHT_UPTIME_BPS: u16 = 5_000;
/// Weight of job completion in the combined score (30 %).
pub const WEIGHT_JOBS_BPS: u16 = 3_000;
/// Weight of benchmark consistency in the combined score (20 %).
pub const WEIGHT_BENCHMARK_BPS: u16 = 2_000;

const _: () = assert!(
    WEIGHT_UPTIME_BPS as u32 + WEIGHT_JOBS_BPS as u32 + WEIGHT_BENCHMARK_BPS as u32
        == BPS_FULL as u32
);

/// Re-benchmarks (benchmarks after the first) that give the benchmark part full
/// evidence: with one, the latest is compared to the first and the prior drops out.
pub const REBENCHMARKS_FULL_EVIDENCE: u32 = 1;

/// `num / den` rounded to the nearest integer, ties to the even one; `den > 0`.
pub fn div_half_even(num: u128, den: u128) -> u128 {
    debug_assert!(den > 0, "division by zero");
    let (q, r) = (num / den, num % den);
    match (2 * r).cmp(&den) {
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal if q % 2 == 1 => q + 1,
        _ => q,
    }
}

/// `numerator / denominator` in basis points; `numerator <= denominator`, `denominator > 0`.
pub(crate) fn ratio_bps(numerator: u64, denominator: u64) -> u16 {
    debug_assert!(numerator <= denominator && denominator > 0);
    let bps = div_half_even(
        u128::from(numerator) * u128::from(BPS_FULL),
        u128::from(denominator),
    );
    to_bps(bps)
}

/// The evidence weight `min(observed, full) / full` in basis points; `full > 0`.
pub(crate) fn evidence_bps(observed: u64, full: u64) -> u16 {
    ratio_bps(observed.min(full), full)
}

/// A part's value: `(measured · evidence + prior · (10 000 − evidence)) / 10 000`.
/// Without a measurement the value is the prior.
pub(crate) fn blend(measured_bps: Option<u16>, evidence_bps: u16) -> u16 {
    let Some(measured) = measured_bps else {
        return PRIOR_BPS;
    };
    let e = u128::from(evidence_bps);
    let full = u128::from(BPS_FULL);
    let sum = u128::from(measured) * e + u128::from(PRIOR_BPS) * (full - e);
    to_bps(div_half_even(sum, full))
}

/// The combined score: `(5000 · uptime + 3000 · jobs + 2000 · benchmark) / 10 000`.
pub(crate) fn combine_parts(uptime_bps: u16, jobs_bps: u16, benchmark_bps: u16) -> u16 {
    let sum = u128::from(WEIGHT_UPTIME_BPS) * u128::from(uptime_bps)
        + u128::from(WEIGHT_JOBS_BPS) * u128::from(jobs_bps)
        + u128::from(WEIGHT_BENCHMARK_BPS) * u128::from(benchmark_bps);
    to_bps(div_half_even(sum, u128::from(BPS_FULL)))
}

/// A weighted mean `Σ wᵢ·vᵢ / Σ wᵢ` of basis points; the plain mean when every weight is
/// zero; `None` for no values.
pub(crate) fn weighted_mean_bps(values: &[(u128, u16)]) -> Option<u16> {
    if values.is_empty() {
        return None;
    }
    let total: u128 = values.iter().map(|&(w, _)| w).sum();
    let (sum, den) = if total == 0 {
        let sum: u128 = values.iter().map(|&(_, v)| u128::from(v)).sum();
        (sum, values.len() as u128)
    } else {
        let sum: u128 = values.iter().map(|&(w, v)| w * u128::from(v)).sum();
        (sum, total)
    };
    Some(to_bps(div_half_even(sum, den)))
}

/// Basis points computed from values that are each at most 10 000.
fn to_bps(value: u128) -> u16 {
    debug_assert!(value <= u128::from(BPS_FULL));
    u16::try_from(value.min(u128::from(BPS_FULL))).unwrap_or(BPS_FULL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_even() {
        assert_eq!(div_half_even(5, 2), 2); // 2.5 -> 2
        assert_eq!(div_half_even(7, 2), 4); // 3.5 -> 4
        assert_eq!(div_half_even(11, 4), 3); // 2.75 -> 3
        assert_eq!(div_half_even(9, 4), 2); // 2.25 -> 2
        assert_eq!(blend(Some(10_000), 2_000), 9_200);
        assert_eq!(blend(None, 10_000), PRIOR_BPS);
        assert_eq!(combine_parts(9_956, 9_750, 9_550), 9_813);
        assert_eq!(weighted_mean_bps(&[(0, 9_000), (0, 8_000)]), Some(8_500));
        assert_eq!(weighted_mean_bps(&[(3, 9_000), (1, 5_000)]), Some(8_000));
    }
}
