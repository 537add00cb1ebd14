//! Whether a GPU is listed on the marketplace now, and why not.

use crate::interval::{clamp_instant, normalize, subtract};
use crate::reasons::{instant_en, metric_name_en, value_en};
use crate::{Config, GpuHistory, Metric, ModelMinimums};

/// Why a GPU is not listed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NotListedReason {
    /// `now` is outside the GPU's declared schedule.
    OutsideSchedule,
    /// `now` is inside an announced maintenance window (announced in time or not).
    InMaintenance {
        /// The window's start.
        start_ms: i64,
        /// The window's end.
        end_ms: i64,
    },
    /// The GPU has no benchmark yet.
    NoBenchmark,
    /// The latest benchmark is under the model's minimum in this metric: delisted until a
    /// benchmark passes.
    BenchmarkBelowMinimum {
        /// The metric.
        metric: Metric,
        /// The model's minimum.
        minimum: u64,
        /// The latest benchmark's value.
        measured: u64,
        /// When the latest benchmark ran.
        at_ms: i64,
    },
}

/// Whether a GPU is listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// Listed now.
    Listed,
    /// Not listed now.
    NotListed {
        /// Every reason that applies (never empty): benchmark reasons first, then
        /// maintenance, then the schedule.
        reasons: Vec<NotListedReason>,
        /// The next instant inside the schedule and outside announced maintenance, within
        /// the configured look-ahead; `None` when a benchmark keeps the GPU delisted (no
        /// one knows when a passing one comes) or no such instant is within the look-ahead.
        next_listed_ms: Option<i64>,
    },
}

/// Whether `gpu` is listed at `now_ms`: it needs a latest benchmark (at or before `now`)
/// at or above its model's minimums (a model without minimums needs only a benchmark),
/// to be outside every maintenance window announced at or before `now`, and `now` inside
/// its schedule. Being online is not checked here.
pub fn listing(
    gpu: &GpuHistory,
    minimums: &ModelMinimums,
    config: &Config,
    now_ms: i64,
) -> Listing {
    let now = clamp_instant(now_ms);
    let mut reasons = benchmark_reasons(gpu, minimums, now);
    let blocked_by_benchmark = !reasons.is_empty();
    let announced: Vec<_> = gpu
        .maintenance()
        .iter()
        .filter(|m| m.announced_at_ms() <= now)
        .collect();
    reasons.extend(
        announced
            .iter()
            .map(|m| m.interval())
            .filter(|iv| iv.contains(now))
            .map(|iv| NotListedReason::InMaintenance {
                start_ms: iv.start_ms(),
                end_ms: iv.end_ms(),
            }),
    );
    if gpu.schedules().scheduled(now, now + 1).is_empty() {
        reasons.push(NotListedReason::OutsideSchedule);
    }
    if reasons.is_empty() {
        return Listing::Listed;
    }
    let next_listed_ms = if blocked_by_benchmark {
        None
    } else {
        let horizon = now + config.listing_lookahead_ms();
        let maintenance = normalize(announced.iter().map(|m| m.interval()).collect());
        let open = subtract(&gpu.schedules().scheduled(now, horizon), &maintenance);
        open.first().map(|iv| iv.start_ms())
    };
    Listing::NotListed {
        reasons,
        next_listed_ms,
    }
}

fn benchmark_reasons(gpu: &GpuHistory, minimums: &ModelMinimums, now: i64) -> Vec<NotListedReason> {
    let Some(latest) = gpu.latest_benchmark(now) else {
        return vec![NotListedReason::NoBenchmark];
    };
    let Some(minimum) = minimums.get(gpu.model()) else {
        return Vec::new();
    };
    minimum
        .failures(latest.metrics())
        .into_iter()
        .map(
            |(metric, minimum, measured)| NotListedReason::BenchmarkBelowMinimum {
                metric,
                minimum,
                measured,
                at_ms: latest.at_ms(),
            },
        )
        .collect()
}

/// The reason in plain English.
pub fn render_not_listed_en(reason: &NotListedReason) -> String {
    match *reason {
        NotListedReason::OutsideSchedule => "outside your availability schedule".to_owned(),
        NotListedReason::InMaintenance { start_ms, end_ms } => format!(
            "in announced maintenance from {} to {}",
            instant_en(start_ms),
            instant_en(end_ms)
        ),
        NotListedReason::NoBenchmark => "waiting for its first benchmark".to_owned(),
        NotListedReason::BenchmarkBelowMinimum {
            metric,
            minimum,
            measured,
            at_ms,
        } => format!(
            "delisted: the benchmark of {} measured {} {}, under the model's minimum of {}; \
             listed again after a benchmark that passes",
            instant_en(at_ms),
            metric_name_en(metric),
            value_en(metric, measured),
            value_en(metric, minimum)
        ),
    }
}
