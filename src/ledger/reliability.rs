//! Reliability (SPEC §12): the reports the platform's agent, orchestrator and benchmark
//! runner send are recorded idempotently (`store::reliability`); a GPU's and a provider's
//! score, listing and trend are computed from them by the pure core (`settle_reliability`),
//! over the rolling window ending now. A benchmark that delists or relists a GPU books
//! `gpu.listing_changed` on its provider's stream.

use serde::Serialize;
use settle_reliability as rel;

use super::{Actor, Applied, Ledger, LedgerError, find_idem_in_stream, reject};
use crate::config::{BenchmarkMinimums, ReliabilityConfig};
use crate::domain::DomainError;
use crate::domain::event::{EventBody, GpuListingChanged, provider_stream};
use crate::domain::ids::ProviderId;
use crate::domain::time::format_ms;
use crate::store::NewEvent;
use crate::store::reliability::{self as rows, ReportRow};

/// A checked reliability report, ready to record (`wire::reliability` reads the lines).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuReport {
    /// `schedule`, `maintenance`, `online`, `job` or `benchmark`.
    pub kind: &'static str,
    pub report_id: String,
    pub gpu_id: crate::domain::ids::GpuId,
    pub at_ms: i64,
    pub end_ms: Option<i64>,
    /// Canonical JSON of the report's values (times in ms, TFLOPS in milli-TFLOPS).
    pub body: String,
}

/// A GPU's reliability now: its score with the parts and what lowered them, whether it is
/// listed and why not, and its 30 daily trend points.
#[derive(Clone, Debug, Serialize)]
pub struct GpuReliability {
    pub gpu_id: String,
    pub model: String,
    #[serde(flatten)]
    pub score: ScoreView,
    pub listed: bool,
    /// Why it is not listed (English), empty when listed.
    pub not_listed: Vec<String>,
    pub next_listed_at: Option<String>,
    pub trend: Vec<TrendView>,
    /// Whether it is listed and why not, as the core's data (the dashboard words it in
    /// the provider's language).
    #[serde(skip)]
    pub listing: rel::Listing,
}

/// A provider's reliability: the combination over its GPUs, and each GPU's.
#[derive(Clone, Debug, Serialize)]
pub struct ProviderReliability {
    pub provider_id: String,
    pub at: String,
    /// Where the reports of the provider's GPUs stood when this was computed (read first,
    /// so everything up to it is in the figures): an opaque token that changes when a
    /// report is recorded. The live stream's `reliability` events carry the same token.
    pub reports_mark: String,
    /// The parts' `reasons` are their GPUs', each prefixed by the GPU's id.
    #[serde(flatten)]
    pub score: ScoreView,
    pub trend: Vec<TrendView>,
    pub gpus: Vec<GpuReliability>,
    /// What lowered the provider's parts, as the core's data, GPU by GPU (the dashboard
    /// words it in the provider's language).
    #[serde(skip)]
    pub lowered: Vec<rel::GpuReason>,
}

/// A score in basis points, its parts each with what lowered it.
#[derive(Clone, Debug, Serialize)]
pub struct ScoreView {
    pub score_bps: u16,
    pub uptime: PartView,
    pub jobs: PartView,
    pub benchmark: PartView,
}

/// One part: its value in basis points (the neutral prior blended in), the measured ratio
/// when there is one, the evidence behind it, and what lowered it (English).
#[derive(Clone, Debug, Serialize)]
pub struct PartView {
    pub value_bps: u16,
    pub measured_bps: Option<u16>,
    pub evidence_bps: u16,
    pub reasons: Vec<String>,
}

/// A daily point of the trend.
#[derive(Clone, Debug, Serialize)]
pub struct TrendView {
    pub at: String,
    pub score_bps: u16,
    /// `at` in milliseconds.
    #[serde(skip)]
    pub at_ms: i64,
}

fn part(p: &rel::PartScore) -> PartView {
    PartView {
        value_bps: p.value_bps,
        measured_bps: p.measured.as_ref().map(|m| m.bps()),
        evidence_bps: p.evidence_bps,
        reasons: p.reasons.iter().map(rel::render_en).collect(),
    }
}

fn score_view(s: &rel::Score) -> ScoreView {
    ScoreView {
        score_bps: s.combined_bps,
        uptime: part(&s.uptime),
        jobs: part(&s.jobs),
        benchmark: part(&s.benchmark),
    }
}

fn trend_view(points: &[rel::TrendPoint]) -> Vec<TrendView> {
    points
        .iter()
        .map(|p| TrendView {
            at: format_ms(p.at_ms),
            score_bps: p.score.combined_bps,
            at_ms: p.at_ms,
        })
        .collect()
}

/// The row recording `report` of `gpu` (its provider and model; `None`: not registered),
/// or why the sender may not record it.
fn report_row(
    report: &GpuReport,
    gpu: Option<&(String, String)>,
    own: Option<&str>,
    recorded_at_ms: i64,
) -> Result<ReportRow, LedgerError> {
    let Some((provider_id, _)) = gpu else {
        return reject("unknown_gpu", format!("no GPU {}", report.gpu_id));
    };
    if let Some(own) = own
        && (own != provider_id || report.kind != "online")
    {
        return reject(
            "forbidden_gpu",
            format!(
                "an agent's token reports its own provider's GPUs' online intervals only, not {}",
                report.gpu_id
            ),
        );
    }
    Ok(ReportRow {
        kind: report.kind.to_owned(),
        report_id: report.report_id.clone(),
        gpu_id: report.gpu_id.to_string(),
        provider_id: provider_id.clone(),
        at_ms: report.at_ms,
        end_ms: report.end_ms,
        body: report.body.clone(),
        recorded_at_ms,
    })
}

fn invalid(e: rel::ReliabilityError) -> LedgerError {
    LedgerError::Rejected(DomainError::new(e.code(), e.to_string()))
}

impl Ledger {
    /// Records a reliability report of a registered GPU (`unknown_gpu` otherwise): the
    /// same report again is a duplicate, other content under its id a conflict. A
    /// benchmark that changes whether the GPU passes its model's minimums books
    /// `gpu.listing_changed`.
    pub(crate) async fn record_gpu_report(
        &self,
        report: &GpuReport,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        self.record_gpu_report_for(report, None, actor).await
    }

    /// [`Ledger::record_gpu_report`] for a sender bound to `own` provider (an agent's
    /// token): only its GPUs' online intervals (`forbidden_gpu` otherwise).
    pub(crate) async fn record_gpu_report_for(
        &self,
        report: &GpuReport,
        own: Option<&str>,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let mut results = self
            .record_gpu_reports_for(std::slice::from_ref(report), own, actor)
            .await?;
        results
            .pop()
            .unwrap_or_else(|| reject("internal", "no result for the report"))
    }

    /// Records a batch of reports as [`Ledger::record_gpu_report_for`] records one, with
    /// one lookup of their GPUs and one transaction for all of them (an agent's batch of
    /// online intervals): a result per report, in order. The outer error is a storage
    /// failure (nothing recorded); a rejection is its report's alone.
    pub async fn record_gpu_reports_for(
        &self,
        reports: &[GpuReport],
        own: Option<&str>,
        actor: &Actor,
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        let ids: Vec<&str> = reports.iter().map(|r| r.gpu_id.as_str()).collect();
        let gpus = rows::gpus(&self.store, &ids).await?;
        let recorded_at_ms = self.now_ms();
        let mut results: Vec<Option<Result<Applied, LedgerError>>> = Vec::new();
        let mut rows_to_record = Vec::new();
        for report in reports {
            match report_row(
                report,
                gpus.get(report.gpu_id.as_str()),
                own,
                recorded_at_ms,
            ) {
                Ok(row) => {
                    results.push(None);
                    rows_to_record.push(row);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let mut stored = rows::record_many(&self.store, &rows_to_record)
            .await?
            .into_iter()
            .zip(&rows_to_record);
        let mut out = Vec::with_capacity(reports.len());
        for (report, result) in reports.iter().zip(results) {
            if let Some(rejected) = result {
                out.push(rejected);
                continue;
            }
            let Some((found, row)) = stored.next() else {
                return reject("internal", "a report was not recorded");
            };
            out.push(match found {
                Some(body) if body == row.body => Ok(Applied::Duplicate),
                Some(_) => reject(
                    "conflict",
                    format!(
                        "{} report {} was already recorded with different content",
                        report.kind, report.report_id
                    ),
                ),
                None if report.kind == "benchmark" => {
                    // Recorded, so its GPU is registered (`report_row`).
                    if let Some((provider_id, model)) = gpus.get(report.gpu_id.as_str()) {
                        self.relist_by_benchmark(report, provider_id, model, actor)
                            .await?;
                    }
                    Ok(Applied::Accepted)
                }
                None => Ok(Applied::Accepted),
            });
        }
        Ok(out)
    }

    /// Books `gpu.listing_changed` when this benchmark turns the GPU's benchmark verdict:
    /// under its model's minimums after passing (or after none: a first benchmark under
    /// them delists), or passing after being under them.
    async fn relist_by_benchmark(
        &self,
        report: &GpuReport,
        provider_id: &str,
        model: &str,
        actor: &Actor,
    ) -> Result<(), LedgerError> {
        let history = self.gpu_history(report.gpu_id.as_str(), model, 0).await?;
        let minimums = model_minimums(&self.config.reliability)?;
        let verdict = |at: i64| -> Option<Vec<String>> {
            let b = history.latest_benchmark(at)?;
            let failures = minimums
                .get(history.model())
                .map(|m| m.failures(b.metrics()))
                .unwrap_or_default();
            Some(
                failures
                    .iter()
                    .map(|(metric, minimum, measured)| {
                        format!("{} {measured} under the minimum {minimum}", metric.code())
                    })
                    .collect(),
            )
        };
        let now = verdict(report.at_ms).unwrap_or_default();
        let before = verdict(report.at_ms - 1);
        let listed = now.is_empty();
        let changed = match &before {
            None => !listed,
            Some(b) => b.is_empty() != listed,
        };
        if !changed {
            return Ok(());
        }
        let stream = provider_stream(provider_id);
        let key = format!("listing:{}:{}", report.gpu_id, report.report_id);
        let at = self.now_ms();
        crate::ledger::write_stream!(self, &stream, |tx| {
            if find_idem_in_stream(tx, &key).await?.is_some() {
                return Ok(());
            }
            tx.append(NewEvent {
                body: EventBody::GpuListingChanged(GpuListingChanged {
                    gpu_id: report.gpu_id.clone(),
                    provider_id: ProviderId::parse(provider_id)?,
                    listed,
                    benchmark_id: report.report_id.clone(),
                    reason: (!listed).then(|| now.join("; ")),
                }),
                actor: actor.0.clone(),
                recorded_at_ms: at,
                idem_key: Some(key.clone()),
                content_hash: None,
            });
            Ok(())
        })
    }

    /// The normalized history of a GPU from its reports (those that matter from
    /// `since_ms` on); `no_schedule` when it has declared none.
    pub(crate) async fn gpu_history(
        &self,
        gpu_id: &str,
        model: &str,
        since_ms: i64,
    ) -> Result<rel::GpuHistory, LedgerError> {
        let mut events = rel::GpuEvents::default();
        for (kind, at_ms, end_ms, body, recorded_at_ms) in
            rows::gpu_reports(&self.store, gpu_id, since_ms).await?
        {
            let end = end_ms.unwrap_or(at_ms);
            let v = || -> serde_json::Value { serde_json::from_str(&body).unwrap_or_default() };
            match kind.as_str() {
                "schedule" => {
                    let v = v();
                    let schedule = rel::Schedule::parse(
                        v["time_zone"].as_str().unwrap_or_default(),
                        v["hours"].as_str().unwrap_or_default(),
                    )
                    .map_err(invalid)?;
                    events
                        .schedules
                        .push(rel::ScheduleVersion::new(at_ms, schedule).map_err(invalid)?);
                }
                "maintenance" => events
                    .maintenance
                    .push(rel::Maintenance::new(recorded_at_ms, at_ms, end).map_err(invalid)?),
                "job" => {
                    let v = v();
                    let result = match v["cause"].as_str() {
                        None => rel::JobResult::Completed,
                        Some(c) => rel::JobResult::Interrupted(
                            rel::InterruptionCause::parse(c).map_err(invalid)?,
                        ),
                    };
                    events
                        .jobs
                        .push(rel::JobOutcome::new(at_ms, result).map_err(invalid)?);
                }
                _ => {
                    let v = v();
                    let m = &v["metrics"];
                    let get = |k: &str| m[k].as_u64().unwrap_or(0);
                    let metrics = rel::BenchmarkMetrics {
                        fp16_milli_tflops: get("fp16_milli_tflops"),
                        fp32_milli_tflops: get("fp32_milli_tflops"),
                        tensor_milli_tflops: get("tensor_milli_tflops"),
                        memory_gb_s: get("memory_gb_s"),
                        network_mbit_s: get("network_mbit_s"),
                        storage_mb_s: get("storage_mb_s"),
                    };
                    events
                        .benchmarks
                        .push(rel::Benchmark::new(at_ms, metrics).map_err(invalid)?);
                }
            }
        }
        for (start, end) in rows::online_spans(&self.store, gpu_id, since_ms).await? {
            events
                .online
                .push(rel::Interval::new(start, end).map_err(invalid)?);
        }
        let id = rel::GpuId::parse(gpu_id).map_err(invalid)?;
        let model = rel::GpuModel::parse(model).map_err(invalid)?;
        rel::GpuHistory::new(id, model, events).map_err(invalid)
    }

    /// Where the reports of a provider's GPUs stand: an opaque token that changes when
    /// one is recorded (`ProviderReliability::reports_mark`).
    pub async fn reports_mark(&self, provider_id: &str) -> Result<String, LedgerError> {
        let mark = rows::provider_reports_mark(&self.store, provider_id).await?;
        Ok(format!("{}.{}", mark.recorded_at_ms, mark.reports))
    }

    /// A provider's reliability now, over its GPUs that declared a schedule (none: the
    /// neutral figures and no GPU).
    pub async fn provider_reliability(
        &self,
        provider_id: &str,
    ) -> Result<ProviderReliability, LedgerError> {
        let reports_mark = self.reports_mark(provider_id).await?;
        let now = self.now_ms();
        let config = rel::Config::default();
        let since = now - config.window_ms() - rel::DAY_MS * rel::TREND_POINTS as i64;
        let minimums = model_minimums(&self.config.reliability)?;
        let (mut scores, mut trends, mut gpus) = (Vec::new(), Vec::new(), Vec::new());
        for (gpu_id, model) in rows::provider_gpus(&self.store, provider_id).await? {
            let history = match self.gpu_history(&gpu_id, &model, since).await {
                Ok(h) => h,
                // A GPU without a schedule is not on the marketplace yet: not scored.
                Err(LedgerError::Rejected(e)) if e.code == "no_schedule" => continue,
                Err(e) => return Err(e),
            };
            let score = rel::score(&history, &config, now);
            let trend = rel::trend(&history, &config, now);
            let listing = rel::listing(&history, &minimums, &config, now);
            let (listed, not_listed, next) = match &listing {
                rel::Listing::Listed => (true, Vec::new(), None),
                rel::Listing::NotListed {
                    reasons,
                    next_listed_ms,
                } => (
                    false,
                    reasons.iter().map(rel::render_not_listed_en).collect(),
                    next_listed_ms.map(format_ms),
                ),
            };
            gpus.push(GpuReliability {
                gpu_id,
                model,
                score: score_view(&score.score),
                listed,
                not_listed,
                next_listed_at: next,
                trend: trend_view(&trend),
                listing,
            });
            scores.push(score);
            trends.push(trend);
        }
        let combined = rel::provider_score(&scores);
        let mut score = score_view(&combined.score);
        for r in &combined.reasons {
            let part = match r.part {
                rel::Part::Uptime => &mut score.uptime,
                rel::Part::Jobs => &mut score.jobs,
                rel::Part::Benchmark => &mut score.benchmark,
            };
            part.reasons.push(format!(
                "{}: {}",
                r.gpu_id.as_str(),
                rel::render_en(&r.reason)
            ));
        }
        Ok(ProviderReliability {
            provider_id: provider_id.to_owned(),
            at: format_ms(now),
            reports_mark,
            score,
            trend: trend_view(&rel::provider_trend(&trends)),
            gpus,
            lowered: combined.reasons,
        })
    }
}

/// The configured minimums per model, in the core's units.
fn model_minimums(config: &ReliabilityConfig) -> Result<rel::ModelMinimums, LedgerError> {
    let mut out = rel::ModelMinimums::new();
    for (model, m) in &config.benchmark_minimums {
        out = out.with(rel::GpuModel::parse(model).map_err(invalid)?, minimum(m)?);
    }
    Ok(out)
}

fn minimum(m: &BenchmarkMinimums) -> Result<rel::BenchmarkMinimum, LedgerError> {
    let milli = |t: &Option<String>| -> Result<Option<u64>, LedgerError> {
        t.as_deref()
            .map(|t| {
                t.parse::<rust_decimal::Decimal>()
                    .ok()
                    .and_then(|d| {
                        u64::try_from((d * rust_decimal::Decimal::from(1000)).trunc().mantissa())
                            .ok()
                    })
                    .ok_or_else(|| {
                        LedgerError::Rejected(DomainError::new(
                            "invalid_config",
                            format!("benchmark minimum {t:?} is no decimal"),
                        ))
                    })
            })
            .transpose()
    };
    let mut out = rel::BenchmarkMinimum::default();
    let pairs = [
        (rel::Metric::Fp16, milli(&m.fp16_tflops)?),
        (rel::Metric::Fp32, milli(&m.fp32_tflops)?),
        (rel::Metric::Tensor, milli(&m.tensor_tflops)?),
        (rel::Metric::MemoryBandwidth, m.memory_gb_s),
        (rel::Metric::Network, m.network_mbit_s),
        (rel::Metric::Storage, m.storage_mb_s),
    ];
    for (metric, value) in pairs {
        if let Some(v) = value {
            out = out.with(metric, v);
        }
    }
    Ok(out)
}
