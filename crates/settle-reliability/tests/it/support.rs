//! Helpers shared by the tests.

use chrono::{DateTime, NaiveDate};
use settle_reliability::{
    Benchmark, BenchmarkMetrics, Config, GpuEvents, GpuHistory, GpuId, GpuModel, InterruptionCause,
    Interval, JobOutcome, JobResult, Maintenance, Schedule, ScheduleVersion,
};

pub const MIN: i64 = 60_000;
pub const HOUR: i64 = 3_600_000;
pub const DAY: i64 = 86_400_000;

/// UTC milliseconds of an RFC 3339 instant (`2026-03-29T07:00:00Z`, offsets allowed).
pub fn at(text: &str) -> i64 {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .timestamp_millis()
}

pub fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).unwrap()
}

pub fn iv(start: i64, end: i64) -> Interval {
    Interval::new(start, end).unwrap()
}

/// Intervals from `(start, end)` RFC 3339 pairs.
pub fn ivs(pairs: &[(&str, &str)]) -> Vec<Interval> {
    pairs.iter().map(|(s, e)| iv(at(s), at(e))).collect()
}

pub fn schedule(tz: &str, spec: &str) -> Schedule {
    Schedule::parse(tz, spec).unwrap()
}

/// A config with a rolling window of `window_ms`.
pub fn config_window(window_ms: i64) -> Config {
    Config::default().with_window_ms(window_ms).unwrap()
}

pub fn job(at_ms: i64, result: JobResult) -> JobOutcome {
    JobOutcome::new(at_ms, result).unwrap()
}

pub fn completed(at_ms: i64) -> JobOutcome {
    job(at_ms, JobResult::Completed)
}

pub fn interrupted(at_ms: i64, cause: InterruptionCause) -> JobOutcome {
    job(at_ms, JobResult::Interrupted(cause))
}

pub fn maintenance(announced: i64, start: i64, end: i64) -> Maintenance {
    Maintenance::new(announced, start, end).unwrap()
}

/// Benchmark metrics of a healthy H100-like GPU.
pub fn metrics() -> BenchmarkMetrics {
    BenchmarkMetrics {
        fp16_milli_tflops: 100_000,
        fp32_milli_tflops: 50_000,
        tensor_milli_tflops: 600_000,
        memory_gb_s: 3_350,
        network_mbit_s: 1_000,
        storage_mb_s: 2_000,
    }
}

pub fn bench(at_ms: i64, metrics: BenchmarkMetrics) -> Benchmark {
    Benchmark::new(at_ms, metrics).unwrap()
}

/// Builds a GPU step by step.
pub struct Gpu {
    id: String,
    model: String,
    pub events: GpuEvents,
}

impl Gpu {
    /// A GPU `id` of model `H100` with `schedule` in effect from `joined_ms`.
    pub fn new(id: &str, joined_ms: i64, schedule: Schedule) -> Gpu {
        let events = GpuEvents {
            schedules: vec![ScheduleVersion::new(joined_ms, schedule).unwrap()],
            ..GpuEvents::default()
        };
        Gpu {
            id: id.to_owned(),
            model: "H100".to_owned(),
            events,
        }
    }

    pub fn model(mut self, model: &str) -> Gpu {
        self.model = model.to_owned();
        self
    }

    pub fn online(mut self, intervals: Vec<Interval>) -> Gpu {
        self.events.online.extend(intervals);
        self
    }

    pub fn jobs(mut self, jobs: Vec<JobOutcome>) -> Gpu {
        self.events.jobs.extend(jobs);
        self
    }

    pub fn benchmarks(mut self, benchmarks: Vec<Benchmark>) -> Gpu {
        self.events.benchmarks.extend(benchmarks);
        self
    }

    pub fn maintenance(mut self, maintenance: Vec<Maintenance>) -> Gpu {
        self.events.maintenance.extend(maintenance);
        self
    }

    pub fn build(self) -> GpuHistory {
        GpuHistory::new(
            GpuId::parse(&self.id).unwrap(),
            GpuModel::parse(&self.model).unwrap(),
            self.events,
        )
        .unwrap()
    }
}

/// A GPU on a 24/7 UTC schedule since 2026-01-01.
pub fn always_gpu(id: &str) -> Gpu {
    Gpu::new(id, at("2026-01-01T00:00:00Z"), schedule("UTC", "24/7"))
}
