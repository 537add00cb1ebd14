//! The score of one GPU: its three parts, each with what lowered it, and the combination.

use std::collections::BTreeMap;

use chrono::NaiveDate;

use crate::formula::{
    BPS_FULL, PRIOR_BPS, REBENCHMARKS_FULL_EVIDENCE, blend, combine_parts, evidence_bps, ratio_bps,
};
use crate::interval::{clamp_instant, clip, fill_gaps, intersect, normalize, subtract, total_ms};
use crate::schedule::{local_date, resolve_local};
use crate::{Benchmark, Config, GpuHistory, GpuId, Interval, Metric, Reason, ScheduleHistory};

/// A measured fraction `numerator / denominator` (`numerator <= denominator`,
/// `denominator > 0`): online ms / scheduled ms, uncounted jobs / jobs, or the weakest
/// metric's `min(latest, first) / first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ratio {
    /// What counted for the GPU.
    pub numerator: u64,
    /// Out of.
    pub denominator: u64,
}

impl Ratio {
    /// The fraction in basis points, rounded half to even.
    pub fn bps(&self) -> u16 {
        ratio_bps(self.numerator, self.denominator)
    }
}

/// One part of the score.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartScore {
    /// The part's value, blended with the prior: `0..=10_000`.
    pub value_bps: u16,
    /// What was measured; `None` without data (then the value is the prior).
    pub measured: Option<Ratio>,
    /// How much the measurement counts against the prior (`0` without a measurement).
    pub evidence_bps: u16,
    /// What lowered the part (empty in [trend](crate::trend) points).
    pub reasons: Vec<Reason>,
}

impl PartScore {
    /// A part from its measurement and evidence (no reasons yet).
    pub(crate) fn new(measured: Option<Ratio>, evidence_bps: u16) -> PartScore {
        let evidence_bps = if measured.is_some() { evidence_bps } else { 0 };
        PartScore {
            value_bps: blend(measured.map(|r| r.bps()), evidence_bps),
            measured,
            evidence_bps,
            reasons: Vec::new(),
        }
    }

    /// The measurement in basis points.
    pub fn measured_bps(&self) -> Option<u16> {
        self.measured.map(|r| r.bps())
    }

    /// Adds [`Reason::LimitedHistory`] when the prior lowered the value.
    fn push_limited_history(&mut self) {
        if self.evidence_bps < BPS_FULL && self.value_bps < self.measured_bps().unwrap_or(BPS_FULL)
        {
            self.reasons.push(Reason::LimitedHistory {
                evidence_bps: self.evidence_bps,
                prior_bps: PRIOR_BPS,
            });
        }
    }
}

/// The three parts and the combined score.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Score {
    /// Online time inside the schedule.
    pub uptime: PartScore,
    /// Jobs not interrupted by the provider's side.
    pub jobs: PartScore,
    /// Latest benchmark against the first.
    pub benchmark: PartScore,
    /// `(5000 · uptime + 3000 · jobs + 2000 · benchmark) / 10 000`, `0..=10_000`.
    pub combined_bps: u16,
}

impl Score {
    /// Combines three parts with the published weights.
    pub fn from_parts(uptime: PartScore, jobs: PartScore, benchmark: PartScore) -> Score {
        let combined_bps = combine_parts(uptime.value_bps, jobs.value_bps, benchmark.value_bps);
        Score {
            uptime,
            jobs,
            benchmark,
            combined_bps,
        }
    }
}

/// A GPU's score at an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuScore {
    /// The GPU.
    pub gpu_id: GpuId,
    /// Its score.
    pub score: Score,
}

/// The score of `gpu` over `[now_ms − window_ms, now_ms)`, with reasons. `now_ms` is
/// clamped into the accepted instants. Events at `now_ms` itself are outside the window.
pub fn score(gpu: &GpuHistory, config: &Config, now_ms: i64) -> GpuScore {
    let now = clamp_instant(now_ms);
    let start = now - config.window_ms();
    let mut uptime = uptime_score(gpu, config, now, start);
    uptime.push_limited_history();
    let (lo, hi) = (jobs_before(gpu, start), jobs_before(gpu, now));
    let mut jobs = jobs_values(config, &gpu.jobs()[lo..hi]);
    jobs.reasons = provider_interruptions(&gpu.jobs()[lo..hi]);
    jobs.push_limited_history();
    let mut benchmark = benchmark_values(&gpu.benchmarks()[..benchmarks_before(gpu, now)]);
    benchmark.push_limited_history();
    GpuScore {
        gpu_id: gpu.gpu_id().clone(),
        score: Score::from_parts(uptime, jobs, benchmark),
    }
}

/// Scheduled time without excluded maintenance, and online time with the grace buffer
/// applied, both inside `[from, to)`.
pub(crate) struct Availability {
    pub(crate) scheduled: Vec<Interval>,
    pub(crate) online: Vec<Interval>,
}

/// The availability of `gpu` in `[from, to)` as known at `now` (maintenance announced
/// at or before `now`; the trailing gap before `now` under the grace counts as online).
pub(crate) fn availability(
    gpu: &GpuHistory,
    config: &Config,
    now: i64,
    from: i64,
    to: i64,
) -> Availability {
    let excluded = gpu
        .maintenance()
        .iter()
        .filter(|m| {
            m.announced_at_ms() <= now && m.notice_ms() >= config.maintenance_notice_min_ms()
        })
        .map(|m| m.interval())
        .collect();
    let scheduled = subtract(&gpu.schedules().scheduled(from, to), &normalize(excluded));
    let online = clip(
        &fill_gaps(gpu.online(), config.grace_ms(), from, now),
        from,
        to,
    );
    Availability { scheduled, online }
}

fn uptime_score(gpu: &GpuHistory, config: &Config, now: i64, start: i64) -> PartScore {
    let avail = availability(gpu, config, now, start, now);
    let online_in = intersect(&avail.scheduled, &avail.online);
    let observed = observed_ms(gpu, start, now);
    let mut part = uptime_values(
        total_ms(&avail.scheduled),
        total_ms(&online_in),
        observed,
        config,
    );
    let offline = subtract(&avail.scheduled, &avail.online);
    part.reasons = offline_by_day(gpu.schedules(), &offline);
    part.reasons
        .extend(late_maintenance(gpu, config, now, &offline));
    part
}

/// The uptime part from its totals.
pub(crate) fn uptime_values(
    scheduled_ms: i64,
    online_ms: i64,
    observed_ms: i64,
    config: &Config,
) -> PartScore {
    let as_u64 = |ms: i64| u64::try_from(ms).unwrap_or(0);
    let measured = (scheduled_ms > 0).then(|| Ratio {
        numerator: as_u64(online_ms),
        denominator: as_u64(scheduled_ms),
    });
    PartScore::new(
        measured,
        evidence_bps(as_u64(observed_ms), as_u64(config.window_ms())),
    )
}

/// How much of `[start, end)` lies after the GPU joined (its first schedule version).
pub(crate) fn observed_ms(gpu: &GpuHistory, start: i64, end: i64) -> i64 {
    (end - start.max(gpu.schedules().joined_ms())).clamp(0, end - start)
}

/// Offline time split at local midnights (the zone of the schedule in effect), per day.
fn offline_by_day(schedules: &ScheduleHistory, offline: &[Interval]) -> Vec<Reason> {
    let mut days: BTreeMap<NaiveDate, i64> = BTreeMap::new();
    for iv in offline {
        let mut s = iv.start_ms();
        while s < iv.end_ms() {
            let tz = schedules.at(s).tz();
            let day = local_date(tz, s);
            let midnight = day.succ_opt().and_then(|d| resolve_local(tz, d, 0));
            let e = iv.end_ms().min(midnight.unwrap_or(i64::MAX).max(s + 1));
            *days.entry(day).or_default() += e - s;
            s = e;
        }
    }
    days.into_iter()
        .map(|(day, offline_ms)| Reason::OfflineInSchedule { day, offline_ms })
        .collect()
}

/// Maintenance announced too late during which the GPU was offline inside its schedule.
fn late_maintenance(
    gpu: &GpuHistory,
    config: &Config,
    now: i64,
    offline: &[Interval],
) -> Vec<Reason> {
    let notice_min_ms = config.maintenance_notice_min_ms();
    gpu.maintenance()
        .iter()
        .filter(|m| m.announced_at_ms() <= now && m.notice_ms() < notice_min_ms)
        .filter_map(|m| {
            let iv = m.interval();
            let offline_ms = total_ms(&clip(offline, iv.start_ms(), iv.end_ms()));
            (offline_ms > 0).then_some(Reason::MaintenanceAnnouncedLate {
                start_ms: iv.start_ms(),
                end_ms: iv.end_ms(),
                notice_ms: m.notice_ms(),
                notice_min_ms,
                offline_ms,
            })
        })
        .collect()
}

/// The number of jobs before `t` (index into the sorted jobs).
pub(crate) fn jobs_before(gpu: &GpuHistory, t: i64) -> usize {
    gpu.jobs().partition_point(|j| j.at_ms() < t)
}

/// The number of benchmarks before `t`.
pub(crate) fn benchmarks_before(gpu: &GpuHistory, t: i64) -> usize {
    gpu.benchmarks().partition_point(|b| b.at_ms() < t)
}

/// The job part from the jobs of the window.
pub(crate) fn jobs_values(config: &Config, jobs: &[crate::JobOutcome]) -> PartScore {
    let total = jobs.len() as u64;
    let counted = jobs.iter().filter(|j| j.is_provider_interruption()).count() as u64;
    jobs_values_from_counts(config, total, counted)
}

/// The job part from the number of jobs and of provider interruptions among them.
pub(crate) fn jobs_values_from_counts(config: &Config, total: u64, by_provider: u64) -> PartScore {
    let measured = (total > 0).then_some(Ratio {
        numerator: total - by_provider,
        denominator: total,
    });
    PartScore::new(
        measured,
        evidence_bps(total, u64::from(config.jobs_full_evidence())),
    )
}

/// Provider interruptions grouped by instant (jobs are sorted).
fn provider_interruptions(jobs: &[crate::JobOutcome]) -> Vec<Reason> {
    let mut out: Vec<Reason> = Vec::new();
    for job in jobs.iter().filter(|j| j.is_provider_interruption()) {
        match out.last_mut() {
            Some(Reason::InterruptedByProvider { at_ms, count }) if *at_ms == job.at_ms() => {
                *count += 1
            }
            _ => out.push(Reason::InterruptedByProvider {
                at_ms: job.at_ms(),
                count: 1,
            }),
        }
    }
    out
}

/// The benchmark part from the benchmarks before the window's end (sorted): the latest
/// against the first, the weakest metric (metrics the first measured as 0 are skipped).
pub(crate) fn benchmark_values(benchmarks: &[Benchmark]) -> PartScore {
    let (Some(first), Some(latest)) = (benchmarks.first(), benchmarks.last()) else {
        return PartScore::new(None, 0);
    };
    let rebenchmarks = (benchmarks.len() - 1) as u64;
    if rebenchmarks == 0 {
        return PartScore::new(None, 0);
    }
    let mut weakest: Option<Ratio> = None;
    let mut reasons = Vec::new();
    for metric in Metric::ALL {
        let (f, l) = (first.metrics().get(metric), latest.metrics().get(metric));
        if f == 0 {
            continue;
        }
        if l < f {
            reasons.push(Reason::BenchmarkDegraded {
                metric,
                first: f,
                latest: l,
            });
        }
        let r = Ratio {
            numerator: l.min(f),
            denominator: f,
        };
        let lower = |w: &Ratio| {
            u128::from(r.numerator) * u128::from(w.denominator)
                < u128::from(w.numerator) * u128::from(r.denominator)
        };
        if weakest.as_ref().is_none_or(lower) {
            weakest = Some(r);
        }
    }
    let full = u64::from(REBENCHMARKS_FULL_EVIDENCE);
    let mut part = PartScore::new(weakest, evidence_bps(rebenchmarks, full));
    part.reasons = reasons;
    part
}
