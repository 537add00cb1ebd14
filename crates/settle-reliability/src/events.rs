//! The inputs: a GPU's identity and the events the agent, orchestrator and benchmark runner
//! report, parsed into [`GpuHistory`].

use std::collections::BTreeMap;

use crate::interval::{check_instant, normalize};
use crate::{Interval, ReliabilityError, ScheduleHistory, ScheduleVersion};

/// The longest GPU id and GPU model name, in bytes.
pub const NAME_LEN_MAX: usize = 128;

fn check_name(text: &str) -> bool {
    !text.is_empty() && text.len() <= NAME_LEN_MAX && !text.chars().any(char::is_control)
}

/// A GPU's id as the engine knows it: 1 to 128 bytes, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuId(String);

impl GpuId {
    /// Parses a GPU id.
    pub fn parse(text: &str) -> Result<GpuId, ReliabilityError> {
        check_name(text)
            .then(|| GpuId(text.to_owned()))
            .ok_or_else(|| ReliabilityError::InvalidGpuId {
                text: text.to_owned(),
            })
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A GPU model name (`H100-SXM`, `RTX 4090`): 1 to 128 bytes, no control characters,
/// compared exactly.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuModel(String);

impl GpuModel {
    /// Parses a model name.
    pub fn parse(text: &str) -> Result<GpuModel, ReliabilityError> {
        check_name(text)
            .then(|| GpuModel(text.to_owned()))
            .ok_or_else(|| ReliabilityError::InvalidGpuModel {
                text: text.to_owned(),
            })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A maintenance window the provider announced at `announced_at_ms`.
///
/// It is *excluded* from the scheduled time when announced at least
/// `maintenance_notice_min_ms` before it starts; otherwise it is scheduled time like any
/// other (offline time inside it counts against the GPU). Either way the GPU is not
/// listed during it (once announced).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Maintenance {
    interval: Interval,
    announced_at_ms: i64,
}

impl Maintenance {
    /// A window `[start_ms, end_ms)` announced at `announced_at_ms` (any instant, also
    /// after the start).
    pub fn new(
        announced_at_ms: i64,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Maintenance, ReliabilityError> {
        check_instant(announced_at_ms)?;
        Ok(Maintenance {
            interval: Interval::new(start_ms, end_ms)?,
            announced_at_ms,
        })
    }

    /// When it was announced.
    pub fn announced_at_ms(&self) -> i64 {
        self.announced_at_ms
    }

    /// The window.
    pub fn interval(&self) -> Interval {
        self.interval
    }

    /// How long before the start it was announced (negative when announced after).
    pub fn notice_ms(&self) -> i64 {
        self.interval.start_ms() - self.announced_at_ms
    }
}

/// Who caused a job's interruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InterruptionCause {
    /// The provider's side (hardware, network, shutdown): counts against the GPU.
    Provider,
    /// The customer (cancelled, crashed their own code): does not count.
    Customer,
    /// The platform: does not count.
    Platform,
}

impl InterruptionCause {
    /// Parses `provider`, `customer` or `platform`.
    pub fn parse(text: &str) -> Result<InterruptionCause, ReliabilityError> {
        match text {
            "provider" => Ok(InterruptionCause::Provider),
            "customer" => Ok(InterruptionCause::Customer),
            "platform" => Ok(InterruptionCause::Platform),
            _ => Err(ReliabilityError::InvalidCause {
                text: text.to_owned(),
            }),
        }
    }

    /// The stable code: `provider`, `customer` or `platform`.
    pub fn code(self) -> &'static str {
        match self {
            InterruptionCause::Provider => "provider",
            InterruptionCause::Customer => "customer",
            InterruptionCause::Platform => "platform",
        }
    }
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobResult {
    /// It ran to completion.
    Completed,
    /// It was interrupted.
    Interrupted(InterruptionCause),
}

/// A job's outcome at the instant it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JobOutcome {
    at_ms: i64,
    result: JobResult,
}

impl JobOutcome {
    /// A job that ended at `at_ms` with `result`.
    pub fn new(at_ms: i64, result: JobResult) -> Result<JobOutcome, ReliabilityError> {
        Ok(JobOutcome {
            at_ms: check_instant(at_ms)?,
            result,
        })
    }

    /// When it ended.
    pub fn at_ms(&self) -> i64 {
        self.at_ms
    }

    /// How it ended.
    pub fn result(&self) -> JobResult {
        self.result
    }

    /// Whether it counts against the GPU (interrupted by the provider's side).
    pub fn is_provider_interruption(&self) -> bool {
        self.result == JobResult::Interrupted(InterruptionCause::Provider)
    }
}

/// A benchmark metric, with its fixed integer unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    /// FP16 throughput, milli-TFLOPS.
    Fp16,
    /// FP32 throughput, milli-TFLOPS.
    Fp32,
    /// Tensor-core throughput, milli-TFLOPS.
    Tensor,
    /// GPU memory bandwidth, GB/s.
    MemoryBandwidth,
    /// Network throughput, Mbit/s.
    Network,
    /// Storage throughput, MB/s.
    Storage,
}

impl Metric {
    /// Every metric, in a fixed order.
    pub const ALL: [Metric; 6] = [
        Metric::Fp16,
        Metric::Fp32,
        Metric::Tensor,
        Metric::MemoryBandwidth,
        Metric::Network,
        Metric::Storage,
    ];

    /// The stable code: `fp16`, `fp32`, `tensor`, `memory_bandwidth`, `network`, `storage`.
    pub fn code(self) -> &'static str {
        match self {
            Metric::Fp16 => "fp16",
            Metric::Fp32 => "fp32",
            Metric::Tensor => "tensor",
            Metric::MemoryBandwidth => "memory_bandwidth",
            Metric::Network => "network",
            Metric::Storage => "storage",
        }
    }
}

/// A benchmark's measured values, in the units of [`Metric`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BenchmarkMetrics {
    /// FP16, milli-TFLOPS (989.5 TFLOPS is `989_500`).
    pub fp16_milli_tflops: u64,
    /// FP32, milli-TFLOPS.
    pub fp32_milli_tflops: u64,
    /// Tensor cores, milli-TFLOPS.
    pub tensor_milli_tflops: u64,
    /// Memory bandwidth, GB/s.
    pub memory_gb_s: u64,
    /// Network, Mbit/s.
    pub network_mbit_s: u64,
    /// Storage, MB/s.
    pub storage_mb_s: u64,
}

impl BenchmarkMetrics {
    /// The value of one metric.
    pub fn get(&self, metric: Metric) -> u64 {
        match metric {
            Metric::Fp16 => self.fp16_milli_tflops,
            Metric::Fp32 => self.fp32_milli_tflops,
            Metric::Tensor => self.tensor_milli_tflops,
            Metric::MemoryBandwidth => self.memory_gb_s,
            Metric::Network => self.network_mbit_s,
            Metric::Storage => self.storage_mb_s,
        }
    }
}

/// A benchmark result at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Benchmark {
    at_ms: i64,
    metrics: BenchmarkMetrics,
}

impl Benchmark {
    /// A benchmark run at `at_ms`.
    pub fn new(at_ms: i64, metrics: BenchmarkMetrics) -> Result<Benchmark, ReliabilityError> {
        Ok(Benchmark {
            at_ms: check_instant(at_ms)?,
            metrics,
        })
    }

    /// When it ran.
    pub fn at_ms(&self) -> i64 {
        self.at_ms
    }

    /// What it measured.
    pub fn metrics(&self) -> &BenchmarkMetrics {
        &self.metrics
    }
}

/// The minimum a model's benchmark must reach to be listed, per metric (a metric without
/// a minimum is not checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BenchmarkMinimum {
    minimums: [Option<u64>; 6],
}

impl BenchmarkMinimum {
    /// Sets the minimum of `metric`.
    pub fn with(mut self, metric: Metric, minimum: u64) -> BenchmarkMinimum {
        self.minimums[metric as usize] = Some(minimum);
        self
    }

    /// The minimum of `metric`, if any.
    pub fn get(&self, metric: Metric) -> Option<u64> {
        self.minimums[metric as usize]
    }

    /// The metrics under their minimum: `(metric, minimum, measured)`.
    pub fn failures(&self, metrics: &BenchmarkMetrics) -> Vec<(Metric, u64, u64)> {
        Metric::ALL
            .iter()
            .filter_map(|&m| self.get(m).map(|min| (m, min, metrics.get(m))))
            .filter(|&(_, min, measured)| measured < min)
            .collect()
    }
}

/// The platform's table of minimum benchmarks per GPU model.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelMinimums {
    by_model: BTreeMap<GpuModel, BenchmarkMinimum>,
}

impl ModelMinimums {
    /// An empty table.
    pub fn new() -> ModelMinimums {
        ModelMinimums::default()
    }

    /// Sets the minimum of `model` (replacing any earlier one).
    pub fn with(mut self, model: GpuModel, minimum: BenchmarkMinimum) -> ModelMinimums {
        self.by_model.insert(model, minimum);
        self
    }

    /// The minimum of `model`; `None` for a model not in the table (then only a benchmark
    /// is needed, of any value).
    pub fn get(&self, model: &GpuModel) -> Option<&BenchmarkMinimum> {
        self.by_model.get(model)
    }
}

/// The events of one GPU as the caller gathered them, in any order. Give everything from
/// at least `window_ms` (twice that for the [trend](crate::trend)) before `now`, plus the
/// first benchmark and all schedule versions.
#[derive(Debug, Clone, Default)]
pub struct GpuEvents {
    /// Schedule versions (at least one).
    pub schedules: Vec<ScheduleVersion>,
    /// Announced maintenance windows.
    pub maintenance: Vec<Maintenance>,
    /// Online intervals as reported (overlapping and repeated intervals are merged).
    pub online: Vec<Interval>,
    /// Job outcomes.
    pub jobs: Vec<JobOutcome>,
    /// Benchmarks, including the GPU's first.
    pub benchmarks: Vec<Benchmark>,
}

/// One GPU's history, normalized: online intervals merged, events sorted. Building it is
/// the one `O(n log n)` step; everything after is linear or logarithmic.
#[derive(Debug, Clone)]
pub struct GpuHistory {
    gpu_id: GpuId,
    model: GpuModel,
    schedules: ScheduleHistory,
    maintenance: Vec<Maintenance>,
    online: Vec<Interval>,
    jobs: Vec<JobOutcome>,
    benchmarks: Vec<Benchmark>,
}

impl GpuHistory {
    /// Normalizes the events; fails with [`ReliabilityError::NoSchedule`] without a
    /// schedule version. Benchmarks at the same instant keep their given order (the last
    /// is the latest).
    pub fn new(
        gpu_id: GpuId,
        model: GpuModel,
        events: GpuEvents,
    ) -> Result<GpuHistory, ReliabilityError> {
        let GpuEvents {
            schedules,
            mut maintenance,
            online,
            mut jobs,
            mut benchmarks,
        } = events;
        maintenance.sort_unstable();
        jobs.sort_by_key(JobOutcome::at_ms);
        benchmarks.sort_by_key(Benchmark::at_ms);
        Ok(GpuHistory {
            gpu_id,
            model,
            schedules: ScheduleHistory::new(schedules)?,
            maintenance,
            online: normalize(online),
            jobs,
            benchmarks,
        })
    }

    /// The GPU's id.
    pub fn gpu_id(&self) -> &GpuId {
        &self.gpu_id
    }

    /// The GPU's model.
    pub fn model(&self) -> &GpuModel {
        &self.model
    }

    /// The schedule versions.
    pub fn schedules(&self) -> &ScheduleHistory {
        &self.schedules
    }

    /// Maintenance windows sorted by start.
    pub fn maintenance(&self) -> &[Maintenance] {
        &self.maintenance
    }

    /// Online intervals, merged (sorted, disjoint, not touching).
    pub fn online(&self) -> &[Interval] {
        &self.online
    }

    /// Job outcomes sorted by instant.
    pub fn jobs(&self) -> &[JobOutcome] {
        &self.jobs
    }

    /// Benchmarks sorted by instant.
    pub fn benchmarks(&self) -> &[Benchmark] {
        &self.benchmarks
    }

    /// The latest benchmark at or before `t_ms`.
    pub fn latest_benchmark(&self, t_ms: i64) -> Option<&Benchmark> {
        let n = self.benchmarks.partition_point(|b| b.at_ms <= t_ms);
        n.checked_sub(1).map(|i| &self.benchmarks[i])
    }
}
