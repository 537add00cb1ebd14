//! A provider's score: the combination over its GPUs.
//!
//! Each part is a weighted mean of the GPUs' part values (already blended with the
//! prior), rounded half to even:
//!
//! * uptime weighted by each GPU's scheduled time in the window (its measured
//!   denominator; a GPU without scheduled time weighs 0);
//! * jobs weighted by each GPU's number of jobs in the window (0 without jobs);
//! * benchmark: the plain mean over the GPUs.
//!
//! When every weight of a part is 0 (no GPU has data for it) the part is the plain mean,
//! so a provider of new GPUs sits at the prior. The combined score uses the same weights
//! as a GPU's ([`WEIGHT_UPTIME_BPS`](crate::WEIGHT_UPTIME_BPS) …) on the provider's parts.
//! A provider without GPUs has every part at the prior.

use crate::formula::{BPS_FULL, weighted_mean_bps};
use crate::{GpuReason, GpuScore, Part, PartScore, Ratio, Score, TrendPoint};

/// A provider's score with the reasons of its GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderScore {
    /// The combined parts; their `reasons` are empty (see `reasons`).
    pub score: Score,
    /// The number of GPUs combined.
    pub gpu_count: usize,
    /// Every GPU's reasons, tagged with the GPU and the part.
    pub reasons: Vec<GpuReason>,
}

/// Combines the scores of a provider's GPUs.
pub fn provider_score(gpus: &[GpuScore]) -> ProviderScore {
    let scores: Vec<&Score> = gpus.iter().map(|g| &g.score).collect();
    let mut reasons = Vec::new();
    for gpu in gpus {
        let parts = [
            (Part::Uptime, &gpu.score.uptime),
            (Part::Jobs, &gpu.score.jobs),
            (Part::Benchmark, &gpu.score.benchmark),
        ];
        for (part, p) in parts {
            reasons.extend(p.reasons.iter().map(|r| GpuReason {
                gpu_id: gpu.gpu_id.clone(),
                part,
                reason: r.clone(),
            }));
        }
    }
    ProviderScore {
        score: combine(&scores),
        gpu_count: gpus.len(),
        reasons,
    }
}

/// Combines the trends of a provider's GPUs point by point (all computed for the same
/// `now`; the shortest trend decides the length).
pub fn provider_trend(gpu_trends: &[Vec<TrendPoint>]) -> Vec<TrendPoint> {
    let len = gpu_trends.iter().map(Vec::len).min().unwrap_or(0);
    (0..len)
        .map(|i| {
            let scores: Vec<&Score> = gpu_trends.iter().map(|t| &t[i].score).collect();
            TrendPoint {
                at_ms: gpu_trends[0][i].at_ms,
                score: combine(&scores),
            }
        })
        .collect()
}

/// The combination described in the module doc.
pub(crate) fn combine(scores: &[&Score]) -> Score {
    let by_denominator = |p: &PartScore| p.measured.map_or(0, |r| u128::from(r.denominator));
    let uptime = combine_part(scores.iter().map(|s| &s.uptime), by_denominator, pooled);
    let jobs = combine_part(scores.iter().map(|s| &s.jobs), by_denominator, pooled);
    let benchmark = combine_part(scores.iter().map(|s| &s.benchmark), |_| 1, mean_of_measured);
    Score::from_parts(uptime, jobs, benchmark)
}

fn combine_part<'a>(
    parts: impl Iterator<Item = &'a PartScore> + Clone,
    weight: impl Fn(&PartScore) -> u128,
    measured: impl Fn(&[&PartScore]) -> Option<Ratio>,
) -> PartScore {
    let parts: Vec<&PartScore> = parts.collect();
    let values: Vec<(u128, u16)> = parts.iter().map(|p| (weight(p), p.value_bps)).collect();
    let evidence: Vec<(u128, u16)> = parts.iter().map(|p| (weight(p), p.evidence_bps)).collect();
    match weighted_mean_bps(&values) {
        None => PartScore::new(None, 0),
        Some(value_bps) => PartScore {
            value_bps,
            measured: measured(&parts),
            evidence_bps: weighted_mean_bps(&evidence).unwrap_or(0),
            reasons: Vec::new(),
        },
    }
}

/// Σ numerators / Σ denominators of the measured parts.
fn pooled(parts: &[&PartScore]) -> Option<Ratio> {
    parts
        .iter()
        .filter_map(|p| p.measured)
        .reduce(|a, b| Ratio {
            numerator: a.numerator + b.numerator,
            denominator: a.denominator + b.denominator,
        })
}

/// Σ measured bps / (10 000 · count) of the measured parts.
fn mean_of_measured(parts: &[&PartScore]) -> Option<Ratio> {
    let measured: Vec<u16> = parts.iter().filter_map(|p| p.measured_bps()).collect();
    (!measured.is_empty()).then(|| Ratio {
        numerator: measured.iter().map(|&b| u64::from(b)).sum(),
        denominator: u64::from(BPS_FULL) * measured.len() as u64,
    })
}
