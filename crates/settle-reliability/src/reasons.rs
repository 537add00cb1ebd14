//! What lowered a part, as data, and its plain English rendering.

use chrono::NaiveDate;

use crate::formula::{BPS_FULL, ratio_bps};
use crate::schedule::utc;
use crate::{GpuId, Metric};

/// The three parts of the score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    /// Online time inside the schedule.
    Uptime,
    /// Jobs not interrupted by the provider's side.
    Jobs,
    /// Latest benchmark against the first.
    Benchmark,
}

impl Part {
    /// The stable code: `uptime`, `jobs`, `benchmark`.
    pub fn code(self) -> &'static str {
        match self {
            Part::Uptime => "uptime",
            Part::Jobs => "jobs",
            Part::Benchmark => "benchmark",
        }
    }
}

/// One thing that lowered a part of the score.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Offline inside the schedule on a local day (in the schedule's time zone); includes
    /// offline time in maintenance announced too late.
    OfflineInSchedule {
        /// The local date.
        day: NaiveDate,
        /// Offline milliseconds inside the schedule that day.
        offline_ms: i64,
    },
    /// A maintenance window announced with less than the required notice, during which
    /// the GPU was offline inside its schedule: that time counted.
    MaintenanceAnnouncedLate {
        /// The window's start.
        start_ms: i64,
        /// The window's end.
        end_ms: i64,
        /// How long before the start it was announced (negative: after).
        notice_ms: i64,
        /// The notice that would have excluded it.
        notice_min_ms: i64,
        /// Offline milliseconds inside the schedule during the window (in the window).
        offline_ms: i64,
    },
    /// Jobs interrupted by the provider's side at one instant.
    InterruptedByProvider {
        /// When.
        at_ms: i64,
        /// How many jobs ended at that instant.
        count: u32,
    },
    /// A metric of the latest benchmark under the GPU's first benchmark.
    BenchmarkDegraded {
        /// The metric.
        metric: Metric,
        /// The first benchmark's value.
        first: u64,
        /// The latest benchmark's value.
        latest: u64,
    },
    /// Too little history: the part is blended with the neutral prior.
    LimitedHistory {
        /// How much the measurement counts, in basis points of full evidence.
        evidence_bps: u16,
        /// The prior the rest counts at.
        prior_bps: u16,
    },
}

/// A reason of one GPU, in a provider's list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GpuReason {
    /// The GPU.
    pub gpu_id: GpuId,
    /// The part it lowered.
    pub part: Part,
    /// What lowered it.
    pub reason: Reason,
}

/// The reason in plain English, for example "offline 3 h 10 min inside your schedule on
/// 2 Dec". Instants are shown in UTC.
pub fn render_en(reason: &Reason) -> String {
    match *reason {
        Reason::OfflineInSchedule { day, offline_ms } => format!(
            "offline {} inside your schedule on {}",
            duration_en(offline_ms),
            day.format("%-d %b")
        ),
        Reason::MaintenanceAnnouncedLate {
            start_ms,
            end_ms,
            notice_ms,
            notice_min_ms,
            offline_ms,
        } => {
            let notice = if notice_ms <= 0 {
                "only after it started".to_owned()
            } else {
                format!("only {} ahead", duration_en(notice_ms))
            };
            format!(
                "maintenance {} to {} was announced {notice} ({} needed), so {} offline in it counted",
                instant_en(start_ms),
                instant_en(end_ms),
                duration_en(notice_min_ms),
                duration_en(offline_ms)
            )
        }
        Reason::InterruptedByProvider { at_ms, count } => {
            let jobs = if count == 1 {
                "1 job".to_owned()
            } else {
                format!("{count} jobs")
            };
            format!(
                "{jobs} interrupted by the provider's side at {}",
                instant_en(at_ms)
            )
        }
        Reason::BenchmarkDegraded {
            metric,
            first,
            latest,
        } => format!(
            "{} at {}, {} of the first benchmark's {}",
            metric_name_en(metric),
            value_en(metric, latest),
            percent_en(if first == 0 {
                BPS_FULL
            } else {
                ratio_bps(latest.min(first), first)
            }),
            value_en(metric, first)
        ),
        Reason::LimitedHistory {
            evidence_bps,
            prior_bps,
        } => format!(
            "little history yet: measurements count {}, the rest counts at the neutral {}",
            percent_en(evidence_bps),
            percent_en(prior_bps)
        ),
    }
}

/// `3 h 10 min`, `45 min`, `2 h`, `40 s` (whole minutes, seconds under a minute).
pub fn duration_en(ms: i64) -> String {
    let (hours, minutes) = (ms / 3_600_000, ms % 3_600_000 / 60_000);
    match (hours, minutes) {
        (0, 0) => format!("{} s", ms / 1000),
        (0, m) => format!("{m} min"),
        (h, 0) => format!("{h} h"),
        (h, m) => format!("{h} h {m} min"),
    }
}

/// `2026-12-02 14:05 UTC`.
pub fn instant_en(ms: i64) -> String {
    utc(ms).format("%Y-%m-%d %H:%M UTC").to_string()
}

/// Basis points as a percentage with up to two decimals: `93.4%`, `100%`, `0.05%`.
pub fn percent_en(bps: u16) -> String {
    trim_decimals(u64::from(bps), 100, "%")
}

/// A metric's English name.
pub fn metric_name_en(metric: Metric) -> &'static str {
    match metric {
        Metric::Fp16 => "FP16",
        Metric::Fp32 => "FP32",
        Metric::Tensor => "tensor",
        Metric::MemoryBandwidth => "memory bandwidth",
        Metric::Network => "network",
        Metric::Storage => "storage",
    }
}

/// A metric value with its unit: `95.5 TFLOPS`, `3350 GB/s`, `940 Mbit/s`, `2100 MB/s`.
pub fn value_en(metric: Metric, value: u64) -> String {
    match metric {
        Metric::Fp16 | Metric::Fp32 | Metric::Tensor => trim_decimals(value, 1000, " TFLOPS"),
        Metric::MemoryBandwidth => format!("{value} GB/s"),
        Metric::Network => format!("{value} Mbit/s"),
        Metric::Storage => format!("{value} MB/s"),
    }
}

/// `value / scale` with the decimals it needs (none for a whole number).
fn trim_decimals(value: u64, scale: u64, unit: &str) -> String {
    let (whole, frac) = (value / scale, value % scale);
    if frac == 0 {
        return format!("{whole}{unit}");
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}{unit}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english() {
        assert_eq!(duration_en(3 * 3_600_000 + 10 * 60_000), "3 h 10 min");
        assert_eq!(duration_en(40_000), "40 s");
        assert_eq!(percent_en(9_340), "93.4%");
        assert_eq!(percent_en(5), "0.05%");
        assert_eq!(value_en(Metric::Fp16, 95_500), "95.5 TFLOPS");
        let day = NaiveDate::from_ymd_opt(2026, 12, 2).unwrap();
        let r = Reason::OfflineInSchedule {
            day,
            offline_ms: 11_400_000,
        };
        assert_eq!(
            render_en(&r),
            "offline 3 h 10 min inside your schedule on 2 Dec"
        );
    }
}
