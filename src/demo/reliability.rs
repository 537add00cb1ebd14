//! The demo's week of reliability reports (SPEC §12): every sample GPU declares its
//! availability schedule, reports its online intervals day by day, its jobs' outcomes and a
//! benchmark. Borealis loses a GPU for 3 h 10 min inside its schedule on the Wednesday (and
//! the job running on it); Fjord's GPU benchmarks under its model's minimum on the Friday and
//! is delisted. The scores are read as a provider's dashboard shows them.

use chrono::NaiveDate;
use serde_json::{Value, json};

use super::{Arrival, PROVIDERS};
use crate::config::{BenchmarkMinimums, ReliabilityConfig};
use crate::domain::time::{date_start_ms, format_ms};
use crate::ledger::Ledger;

const HOUR: i64 = 3_600_000;
const MINUTE: i64 = 60_000;

/// Where the outage happens: Borealis's first GPU, Wednesday 11:00–14:10 UTC (inside its
/// Oslo business hours whatever the season).
const OUTAGE_GPU: &str = "prv_borealis_gpu0";
/// The GPU whose Friday benchmark falls under the model's minimum.
const DEGRADED_GPU: &str = "prv_fjord_gpu0";

/// Each provider's schedule: its IANA time zone and hours.
fn schedule_of(provider_id: &str) -> (&'static str, &'static str) {
    match provider_id {
        "prv_atlas" => ("America/Los_Angeles", "24/7"),
        "prv_borealis" => ("Europe/Oslo", "Mon-Fri 08:00-20:00"),
        "prv_cumulus" => ("Europe/Berlin", "daily 06:00-22:00"),
        "prv_delta" => ("America/Chicago", "24/7"),
        "prv_equinox" => ("Asia/Singapore", "24/7"),
        _ => ("Europe/Oslo", "Mon-Fri 17:00-23:00; Sat,Sun 09:00-23:00"),
    }
}

/// A model's benchmark: FP16, FP32 and tensor TFLOPS, memory GB/s, network Mbit/s,
/// storage MB/s.
fn benchmark_of(model: &str) -> (&'static str, &'static str, &'static str, u32, u32, u32) {
    match model {
        "H100-80GB" => ("989.4", "66.9", "989.4", 3350, 25_000, 6000),
        "A100-80GB" => ("312", "19.5", "312", 2039, 25_000, 4000),
        "A100-40GB" => ("312", "19.5", "312", 1555, 10_000, 3000),
        "L40S-48GB" => ("362.1", "91.6", "362.1", 864, 10_000, 3000),
        "RTXA6000-48GB" => ("154.8", "38.7", "154.8", 768, 10_000, 2000),
        "RTX4090-24GB" => ("165.2", "82.6", "330.3", 1008, 1000, 3000),
        _ => ("121", "30.3", "121", 300, 1000, 1500),
    }
}

/// The demo's minimums: an L4 under 100 FP16 TFLOPS is delisted until a benchmark passes.
pub fn minimums() -> ReliabilityConfig {
    let mut config = ReliabilityConfig::default();
    config.benchmark_minimums.insert(
        "L4-24GB".to_owned(),
        BenchmarkMinimums {
            fp16_tflops: Some("100".to_owned()),
            ..BenchmarkMinimums::default()
        },
    );
    config
}

fn benchmark_line(gpu: &str, id: &str, model: &str, at_ms: i64, fp16: Option<&str>) -> Value {
    let (f16, f32, tensor, memory, network, storage) = benchmark_of(model);
    json!({"type": "gpu.benchmark", "benchmark_id": id, "gpu_id": gpu, "measured_at": format_ms(at_ms),
        "fp16_tflops": fp16.unwrap_or(f16), "fp32_tflops": f32, "tensor_tflops": tensor,
        "memory_gb_s": memory, "network_mbit_s": network, "storage_mb_s": storage})
}

/// One GPU's week: schedule, daily online intervals, jobs, benchmarks.
fn gpu_week(out: &mut Vec<Arrival>, provider_id: &str, gpu: &str, model: &str, week_ms: i64) {
    let (time_zone, hours) = schedule_of(provider_id);
    out.push(Arrival {
        at_ms: week_ms - 8 * 24 * HOUR,
        line: json!({"type": "gpu.schedule", "schedule_id": format!("{gpu}-sched"), "gpu_id": gpu,
            "effective_from": format_ms(week_ms), "time_zone": time_zone, "hours": hours}),
    });
    out.push(Arrival {
        at_ms: week_ms + 40 * MINUTE,
        line: benchmark_line(
            gpu,
            &format!("{gpu}-bench1"),
            model,
            week_ms + 30 * MINUTE,
            None,
        ),
    });
    for day in 0..7 {
        let start = week_ms + day * 24 * HOUR;
        let end = start + 24 * HOUR;
        // The agent reports each day's online time a few minutes after midnight; the last
        // report reaches the Monday run's instant (00:05), when the scores are read.
        let end = if day == 6 { end + 5 * MINUTE } else { end };
        let mut online = vec![(start, end)];
        if gpu == OUTAGE_GPU && day == 2 {
            let down = start + 11 * HOUR;
            online = vec![(start, down), (down + 3 * HOUR + 10 * MINUTE, end)];
        }
        for (n, (from, to)) in online.into_iter().enumerate() {
            out.push(Arrival {
                at_ms: start + 24 * HOUR + 5 * MINUTE,
                line: json!({"type": "gpu.online", "report_id": format!("{gpu}-on-{day}-{n}"), "gpu_id": gpu,
                    "started_at": format_ms(from), "ended_at": format_ms(to)}),
            });
        }
        // A job ends every other day; the one on the outage's GPU that day was cut by it.
        if day % 2 == 0 {
            let ended = start + 11 * HOUR;
            let (result, cause) = match (gpu, day) {
                (OUTAGE_GPU, 2) => ("interrupted", Some("provider")),
                ("prv_atlas_gpu1", 4) => ("interrupted", Some("customer")),
                _ => ("completed", None),
            };
            let mut line = json!({"type": "job.outcome", "job_id": format!("{gpu}-job-{day}"), "gpu_id": gpu,
                "ended_at": format_ms(ended), "result": result});
            if let Some(cause) = cause {
                line["cause"] = json!(cause);
            }
            out.push(Arrival {
                at_ms: ended + MINUTE,
                line,
            });
        }
    }
    if gpu == DEGRADED_GPU {
        let friday = week_ms + 4 * 24 * HOUR + 12 * HOUR;
        out.push(Arrival {
            at_ms: friday + 10 * MINUTE,
            line: benchmark_line(gpu, &format!("{gpu}-bench2"), model, friday, Some("88")),
        });
    }
}

/// The week's reliability reports of every sample GPU, starting Monday `week`.
pub(crate) fn week_reports(week: NaiveDate) -> Vec<Arrival> {
    let week_ms = date_start_ms(week);
    let mut out = Vec::new();
    for p in PROVIDERS {
        for (g, model) in p.gpus.iter().enumerate() {
            gpu_week(&mut out, p.id, &format!("{}_gpu{g}", p.id), model, week_ms);
        }
    }
    out
}

/// Basis points as a percentage with two decimals.
fn percent(bps: u16) -> String {
    format!("{}.{:02} %", bps / 100, bps % 100)
}

/// Every sample provider's reliability now: score, parts, listed GPUs and what lowered it.
pub async fn scores(ledger: &Ledger) -> anyhow::Result<Vec<Value>> {
    let mut rows = Vec::new();
    for p in PROVIDERS {
        let r = ledger.provider_reliability(p.id).await?;
        // What lowered each GPU's parts. The note that a new GPU has little history (every
        // GPU of a one-week demo has it, the same for all) stays in `settle reliability`.
        let lowered: Vec<String> = r
            .gpus
            .iter()
            .flat_map(|g| {
                [&g.score.uptime, &g.score.jobs, &g.score.benchmark]
                    .into_iter()
                    .flat_map(|part| part.reasons.iter())
                    .filter(|why| !why.starts_with("little history yet"))
                    .map(move |why| format!("{}: {why}", g.gpu_id))
            })
            .collect();
        rows.push(json!({
            "provider_id": p.id, "score": percent(r.score.score_bps), "score_bps": r.score.score_bps,
            "uptime": percent(r.score.uptime.value_bps), "jobs": percent(r.score.jobs.value_bps),
            "benchmark": percent(r.score.benchmark.value_bps),
            "gpus_listed": r.gpus.iter().filter(|g| g.listed).count(), "gpus": r.gpus.len(),
            "not_listed": r.gpus.iter().filter(|g| !g.listed).map(|g| json!({"gpu_id": g.gpu_id, "why": g.not_listed})).collect::<Vec<_>>(),
            "lowered_by": lowered,
        }));
    }
    Ok(rows)
}

/// The scores for a terminal, and what lowered them.
pub fn render(out: &mut String, scores: &[Value]) {
    use crate::report::output::{Format, Rows};
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "\nReliability over the last 30 days (50 % uptime, 30 % jobs, 20 % benchmark; a new GPU starts at 90 %):"
    );
    let mut rows = Rows::new(vec![
        "provider_id",
        "score",
        "uptime",
        "jobs",
        "benchmark",
        "gpus_listed",
        "gpus",
    ]);
    for s in scores {
        rows.push(rows.columns.iter().map(|c| s[*c].clone()).collect());
    }
    out.push_str(&rows.render(Format::Table));
    for s in scores {
        for why in s["lowered_by"].as_array().into_iter().flatten() {
            // Each reason names its GPU, and the GPU its provider.
            let _ = writeln!(out, "  {}", why.as_str().unwrap_or(""));
        }
        for g in s["not_listed"].as_array().into_iter().flatten() {
            let why: Vec<&str> = g["why"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let _ = writeln!(
                out,
                "  {} not listed now: {}",
                g["gpu_id"].as_str().unwrap_or(""),
                why.join("; ")
            );
        }
    }
}
