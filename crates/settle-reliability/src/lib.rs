//! Reliability score and availability schedule of GPUs and providers (SPEC §12, the
//! provider guide's "Zuverlässigkeitsbewertung" and "Verfügbarkeitsplan").
//!
//! A pure core: plain synchronous Rust, no clock (the caller passes `now_ms`), no I/O, no
//! serialization. Instants are UTC milliseconds (`i64`), intervals half-open
//! `[start, end)`, scores integer basis points (`_bps`, 10 000 = 100 %).
//!
//! # The formula
//!
//! Over the rolling window `W = [now − window_ms, now)` (30 days by default):
//!
//! * **Scheduled time** `S`: the instants of `W` inside the schedule in effect
//!   (schedules change over time, each version from its `effective_from_ms`; nothing is
//!   scheduled before the first), minus maintenance windows announced at least
//!   `maintenance_notice_min_ms` (24 h) before their start. Maintenance announced later
//!   stays in `S`.
//! * **Online time** `O`: the reported online intervals, merged, where a gap shorter than
//!   `grace_ms` (5 min) between two intervals counts as online (a restart costs nothing),
//!   and so does a gap shorter than `grace_ms` just before `now` (the agent's reporting
//!   delay).
//! * **uptime** `= |O ∩ S| / |S|`; no measurement when `|S| = 0`.
//! * **jobs** `= (jobs − jobs interrupted by the provider) / jobs`, over the jobs that
//!   ended in `W`; interruptions by the customer or the platform do not count against.
//!   No measurement without jobs.
//! * **benchmark** = for each metric (FP16, FP32, tensor TFLOPS, memory bandwidth,
//!   network, storage) `min(latest, first) / first`, where `first` is the GPU's first
//!   benchmark ever and `latest` its latest before `now`; the part is the **minimum** over
//!   the metrics (the weakest metric; metrics the first benchmark measured as 0 are
//!   skipped). No measurement with fewer than two benchmarks. Not limited to `W`.
//! * Each ratio is rounded to basis points, half to even.
//! * **Neutral prior**: each part is blended with [`PRIOR_BPS`] = 9000 (90 %):
//!   `value = (measured · e + 9000 · (10 000 − e)) / 10 000` with the evidence `e` in
//!   basis points: for uptime the share of `W` after the GPU joined (its first schedule
//!   version), for jobs `min(jobs, jobs_full_evidence) / jobs_full_evidence` (10 jobs),
//!   for the benchmark 10 000 once there is a benchmark after the first. Without a
//!   measurement the value is 9000. So a new GPU starts at 90 %, never at 0 or 100, and
//!   moves to its measurement as evidence grows; after 30 days, 10 jobs and one
//!   re-benchmark the prior is gone.
//! * **Combined** `= (5000 · uptime + 3000 · jobs + 2000 · benchmark) / 10 000`
//!   ([`WEIGHT_UPTIME_BPS`], [`WEIGHT_JOBS_BPS`], [`WEIGHT_BENCHMARK_BPS`]), from the
//!   rounded part values. All divisions round half to even.
//!
//! Each part carries what lowered it ([`Reason`]), rendered in English by [`render_en`].
//! A provider's score is the combination over its GPUs ([`provider_score`]: uptime
//! weighted by scheduled time, jobs by job count, benchmark a plain mean).
//!
//! # Worked example
//!
//! A GPU scheduled 24/7 for months; the window is the 30 days (720 h) up to
//! 2026-12-06 00:00 UTC. It was offline 3 h 10 min on 2 Dec, so online
//! 716 h 50 min: uptime `2 580 600 000 / 2 592 000 000` = 99.56018… % → **9956**. Of 40
//! jobs one was interrupted by the provider and two by customers: jobs `39 / 40` →
//! **9750**. The first benchmark measured FP16 100 TFLOPS, the latest 95.5 TFLOPS, the
//! rest unchanged: benchmark `95 500 / 100 000` → **9550**. Evidence is full everywhere.
//! Combined: `(5000 · 9956 + 3000 · 9750 + 2000 · 9550) / 10 000 = 98 130 000 / 10 000`
//! → **9813** (98.13 %).
//!
//! A GPU that joined 6 days ago, online all the time, with 3 completed jobs and one
//! benchmark: uptime `(10 000 · 2000 + 9000 · 8000) / 10 000` = 9200 (6 of 30 days
//! observed), jobs `(10 000 · 3000 + 9000 · 7000) / 10 000` = 9300, benchmark 9000 (the
//! prior), combined `(5000 · 9200 + 3000 · 9300 + 2000 · 9000) / 10 000` = **9190**.
//!
//! ```
//! use settle_reliability::*;
//!
//! const HOUR: i64 = 3_600_000;
//! let now = 1_796_515_200_000; // 2026-12-06T00:00:00Z
//! let schedule = Schedule::parse("UTC", "24/7").unwrap();
//! let offline_from = 1_796_169_600_000 + 10 * HOUR; // 2026-12-02T10:00:00Z
//! let mut events = GpuEvents {
//!     schedules: vec![ScheduleVersion::new(0, schedule).unwrap()],
//!     online: vec![
//!         Interval::new(now - 40 * 24 * HOUR, offline_from).unwrap(),
//!         Interval::new(offline_from + 3 * HOUR + 10 * 60_000, now).unwrap(),
//!     ],
//!     ..GpuEvents::default()
//! };
//! for i in 0..40 {
//!     let result = match i {
//!         0 => JobResult::Interrupted(InterruptionCause::Provider),
//!         1 | 2 => JobResult::Interrupted(InterruptionCause::Customer),
//!         _ => JobResult::Completed,
//!     };
//!     events.jobs.push(JobOutcome::new(now - (i + 1) * HOUR, result).unwrap());
//! }
//! let first = BenchmarkMetrics { fp16_milli_tflops: 100_000, ..BenchmarkMetrics::default() };
//! let latest = BenchmarkMetrics { fp16_milli_tflops: 95_500, ..first };
//! events.benchmarks.push(Benchmark::new(0, first).unwrap());
//! events.benchmarks.push(Benchmark::new(now - HOUR, latest).unwrap());
//! let gpu = GpuHistory::new(GpuId::parse("gpu-1").unwrap(), GpuModel::parse("H100").unwrap(), events).unwrap();
//!
//! let s = score(&gpu, &Config::default(), now).score;
//! assert_eq!((s.uptime.value_bps, s.jobs.value_bps, s.benchmark.value_bps), (9956, 9750, 9550));
//! assert_eq!(s.combined_bps, 9813);
//! assert_eq!(render_en(&s.uptime.reasons[0]), "offline 3 h 10 min inside your schedule on 2 Dec");
//! ```
//!
//! # Modules
//!
//! * `interval`: [`Interval`] and the linear set operations on sorted interval lists.
//! * `schedule`: [`Schedule`] (24/7 or [`WeeklyWindow`]s in an IANA zone, DST rules in
//!   its doc), [`ScheduleVersion`], [`ScheduleHistory`].
//! * `events`: [`GpuId`], [`GpuModel`], [`Maintenance`], [`JobOutcome`], [`Benchmark`],
//!   [`ModelMinimums`], and [`GpuHistory`], the normalized inputs of one GPU.
//! * `config`: [`Config`] (window, grace, maintenance notice, job evidence, look-ahead).
//! * `formula`: the published constants and the integer arithmetic.
//! * `score`: [`score`] of one GPU, [`Score`], [`PartScore`], [`Ratio`].
//! * `reasons`: [`Reason`], [`Part`], [`render_en`].
//! * `trend`: [`trend`], 30 daily points in one pass.
//! * `provider`: [`provider_score`], [`provider_trend`].
//! * `listing`: [`listing`], [`Listing`], [`NotListedReason`].
//!
//! # Cost
//!
//! Building a [`GpuHistory`] sorts its events once (`O(n log n)`); [`score`] and
//! [`trend`] are then linear in the intervals of their range (set operations with two
//! pointers, no per-minute loop) plus the local days of the range times the schedule's
//! windows.

#![warn(clippy::too_many_lines)]
#![warn(missing_docs)]

mod config;
mod error;
mod events;
mod formula;
mod interval;
mod listing;
mod provider;
mod reasons;
mod schedule;
mod score;
mod trend;

pub use chrono_tz::Tz;

pub use config::{
    Config, GRACE_MS_MAX, JOBS_FULL_EVIDENCE_MAX, LISTING_LOOKAHEAD_MS_MAX,
    MAINTENANCE_NOTICE_MIN_MS_MAX, WINDOW_MS_MAX,
};
pub use error::ReliabilityError;
pub use events::{
    Benchmark, BenchmarkMetrics, BenchmarkMinimum, GpuEvents, GpuHistory, GpuId, GpuModel,
    InterruptionCause, JobOutcome, JobResult, Maintenance, Metric, ModelMinimums, NAME_LEN_MAX,
};
pub use formula::{
    BPS_FULL, PRIOR_BPS, REBENCHMARKS_FULL_EVIDENCE, WEIGHT_BENCHMARK_BPS, WEIGHT_JOBS_BPS,
    WEIGHT_UPTIME_BPS, div_half_even,
};
pub use interval::{DAY_MS, INSTANT_MAX_MS, Interval};
pub use listing::{Listing, NotListedReason, listing, render_not_listed_en};
pub use provider::{ProviderScore, provider_score, provider_trend};
pub use reasons::{
    GpuReason, Part, Reason, duration_en, instant_en, metric_name_en, percent_en, render_en,
    value_en,
};
pub use schedule::{
    ClockTime, Days, SCHEDULE_WINDOWS_MAX, Schedule, ScheduleHistory, ScheduleVersion,
    WeeklyWindow, parse_tz,
};
pub use score::{GpuScore, PartScore, Ratio, Score, score};
pub use trend::{TREND_POINTS, TrendPoint, trend};
