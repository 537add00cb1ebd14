//! The daily trend: the score at each of the last 30 days, in one pass.

use crate::interval::{DAY_MS, clamp_instant, cumulative_ms, intersect};
use crate::score::{
    availability, benchmark_values, benchmarks_before, jobs_before, jobs_values_from_counts,
    observed_ms, uptime_values,
};
use crate::{Config, GpuHistory, Score};

/// The number of points of a trend.
pub const TREND_POINTS: usize = 30;

/// The score at one instant of a trend (its parts carry no reasons).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrendPoint {
    /// The end of the point's window.
    pub at_ms: i64,
    /// The score over `[at_ms − window_ms, at_ms)`.
    pub score: Score,
}

/// The score at `now_ms − 29 days`, `now_ms − 28 days`, … `now_ms` (oldest first), each
/// over its own rolling window; the last point is [`score`](crate::score) at `now_ms`.
///
/// Each point is what the score would have been at that instant with the data known now
/// (maintenance announced by `now_ms`, the grace buffer applied to gaps whose end is known).
/// It needs the events of `window_ms + 29 days` before `now_ms`.
///
/// Cost: one availability pass over `[now − 29 days − window, now)`, prefix sums at the 60
/// window boundaries, and binary searches for jobs and benchmarks: `O(n + 60 log n)`,
/// not 30 separate scores.
pub fn trend(gpu: &GpuHistory, config: &Config, now_ms: i64) -> Vec<TrendPoint> {
    let now = clamp_instant(now_ms);
    let window = config.window_ms();
    let ends: Vec<i64> = (0..TREND_POINTS as i64)
        .map(|i| now - (TREND_POINTS as i64 - 1 - i) * DAY_MS)
        .collect();
    let from = ends[0] - window;
    let avail = availability(gpu, config, now, from, now);
    let online_in = intersect(&avail.scheduled, &avail.online);
    let mut bounds: Vec<i64> = ends.iter().flat_map(|&e| [e - window, e]).collect();
    bounds.sort_unstable();
    bounds.dedup();
    let scheduled_before = cumulative_ms(&avail.scheduled, &bounds);
    let online_before = cumulative_ms(&online_in, &bounds);
    let provider_before = provider_interruptions_prefix(gpu);
    let index = |t: i64| bounds.partition_point(|&b| b < t);
    ends.iter()
        .map(|&end| {
            let start = end - window;
            let (s, e) = (index(start), index(end));
            let scheduled = scheduled_before[e] - scheduled_before[s];
            let online = online_before[e] - online_before[s];
            let uptime = uptime_values(scheduled, online, observed_ms(gpu, start, end), config);
            let (lo, hi) = (jobs_before(gpu, start), jobs_before(gpu, end));
            let by_provider = provider_before[hi] - provider_before[lo];
            let jobs = jobs_values_from_counts(config, (hi - lo) as u64, by_provider);
            let mut benchmark = benchmark_values(&gpu.benchmarks()[..benchmarks_before(gpu, end)]);
            benchmark.reasons.clear();
            TrendPoint {
                at_ms: end,
                score: Score::from_parts(uptime, jobs, benchmark),
            }
        })
        .collect()
}

/// `out[k]` = provider interruptions among the first `k` jobs.
fn provider_interruptions_prefix(gpu: &GpuHistory) -> Vec<u64> {
    let mut out = Vec::with_capacity(gpu.jobs().len() + 1);
    out.push(0);
    let mut n = 0;
    for job in gpu.jobs() {
        n += u64::from(job.is_provider_interruption());
        out.push(n);
    }
    out
}
