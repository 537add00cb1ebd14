//! The reliability lines of an import (SPEC §12), checked with the reliability core's own
//! types: a GPU's availability schedule (`gpu.schedule`), an announced maintenance window
//! (`gpu.maintenance`), an online interval (`gpu.online`), a job's outcome
//! (`job.outcome`) and a benchmark result (`gpu.benchmark`). Each is idempotent by its id.

use serde::Deserialize;
use serde_json::{Value, json};
use settle_reliability::{InterruptionCause, Interval, Schedule};

use crate::domain::DomainError;
use crate::domain::ids::GpuId;
use crate::domain::time::parse_rfc3339_ms;

pub use crate::ledger::reliability::GpuReport;

/// The line types this module reads.
pub const RELIABILITY_LINE_TYPES: [&str; 5] = [
    "gpu.schedule",
    "gpu.maintenance",
    "gpu.online",
    "job.outcome",
    "gpu.benchmark",
];

fn reliability_error(e: settle_reliability::ReliabilityError) -> DomainError {
    DomainError::new(e.code(), e.to_string())
}

fn at(text: &str, field: &str) -> Result<i64, DomainError> {
    parse_rfc3339_ms(text)
        .map_err(|e| DomainError::new("invalid_time", format!("{field}: {}", e.message)))
}

fn id(text: &str, field: &str) -> Result<String, DomainError> {
    let ok = !text.is_empty()
        && text.len() <= 128
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@'));
    if ok {
        Ok(text.to_owned())
    } else {
        Err(DomainError::new(
            "invalid_id",
            format!("{field} must be 1 to 128 of [A-Za-z0-9-_.:@]"),
        ))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleLine {
    #[serde(rename = "type")]
    _type: String,
    schedule_id: String,
    gpu_id: String,
    effective_from: String,
    time_zone: String,
    hours: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MaintenanceLine {
    #[serde(rename = "type")]
    _type: String,
    maintenance_id: String,
    gpu_id: String,
    starts_at: String,
    ends_at: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OnlineLine {
    #[serde(rename = "type")]
    _type: String,
    report_id: String,
    gpu_id: String,
    started_at: String,
    ended_at: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobLine {
    #[serde(rename = "type")]
    _type: String,
    job_id: String,
    gpu_id: String,
    ended_at: String,
    /// `completed` or `interrupted`.
    result: String,
    /// With `interrupted`: `provider`, `customer` or `platform`.
    #[serde(default)]
    cause: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BenchmarkLine {
    #[serde(rename = "type")]
    _type: String,
    benchmark_id: String,
    gpu_id: String,
    measured_at: String,
    fp16_tflops: String,
    fp32_tflops: String,
    tensor_tflops: String,
    memory_gb_s: u64,
    network_mbit_s: u64,
    storage_mb_s: u64,
}

fn fields<T: for<'de> Deserialize<'de>>(object: Value, kind: &str) -> Result<T, DomainError> {
    serde_json::from_value(object)
        .map_err(|e| DomainError::new("invalid_fields", format!("{kind}: {e}")))
}

/// Parses a reliability line of type `kind` (one of [`RELIABILITY_LINE_TYPES`]).
pub fn parse(kind: &str, object: Value) -> Result<GpuReport, DomainError> {
    match kind {
        "gpu.schedule" => schedule(fields(object, kind)?),
        "gpu.maintenance" => maintenance(fields(object, kind)?),
        "gpu.online" => online(fields(object, kind)?),
        "job.outcome" => job(fields(object, kind)?),
        "gpu.benchmark" => benchmark(fields(object, kind)?),
        other => Err(DomainError::new(
            "unknown_type",
            format!("{other} is no reliability line"),
        )),
    }
}

fn schedule(l: ScheduleLine) -> Result<GpuReport, DomainError> {
    let from = at(&l.effective_from, "effective_from")?;
    Schedule::parse(l.time_zone.trim(), l.hours.trim()).map_err(reliability_error)?;
    Ok(GpuReport {
        kind: "schedule",
        report_id: id(&l.schedule_id, "schedule_id")?,
        gpu_id: GpuId::parse(&l.gpu_id)?,
        at_ms: from,
        end_ms: None,
        body: json!({"time_zone": l.time_zone.trim(), "hours": l.hours.trim(), "effective_from_ms": from})
            .to_string(),
    })
}

fn maintenance(l: MaintenanceLine) -> Result<GpuReport, DomainError> {
    let window = Interval::new(at(&l.starts_at, "starts_at")?, at(&l.ends_at, "ends_at")?)
        .map_err(reliability_error)?;
    Ok(GpuReport {
        kind: "maintenance",
        report_id: id(&l.maintenance_id, "maintenance_id")?,
        gpu_id: GpuId::parse(&l.gpu_id)?,
        at_ms: window.start_ms(),
        end_ms: Some(window.end_ms()),
        body: json!({"start_ms": window.start_ms(), "end_ms": window.end_ms()}).to_string(),
    })
}

fn online(l: OnlineLine) -> Result<GpuReport, DomainError> {
    let interval = Interval::new(
        at(&l.started_at, "started_at")?,
        at(&l.ended_at, "ended_at")?,
    )
    .map_err(reliability_error)?;
    Ok(GpuReport {
        kind: "online",
        report_id: id(&l.report_id, "report_id")?,
        gpu_id: GpuId::parse(&l.gpu_id)?,
        at_ms: interval.start_ms(),
        end_ms: Some(interval.end_ms()),
        body: json!({"start_ms": interval.start_ms(), "end_ms": interval.end_ms()}).to_string(),
    })
}

fn job(l: JobLine) -> Result<GpuReport, DomainError> {
    let ended = at(&l.ended_at, "ended_at")?;
    let cause = match (l.result.as_str(), l.cause.as_deref()) {
        ("completed", None) => None,
        ("interrupted", Some(c)) => Some(
            InterruptionCause::parse(c)
                .map_err(reliability_error)?
                .code(),
        ),
        ("completed", Some(_)) => {
            return Err(DomainError::new(
                "invalid_fields",
                "a completed job has no cause",
            ));
        }
        ("interrupted", None) => {
            return Err(DomainError::new(
                "invalid_fields",
                "an interrupted job needs its cause: provider, customer or platform",
            ));
        }
        (other, _) => {
            return Err(DomainError::new(
                "invalid_fields",
                format!("result {other:?}: completed or interrupted"),
            ));
        }
    };
    Ok(GpuReport {
        kind: "job",
        report_id: id(&l.job_id, "job_id")?,
        gpu_id: GpuId::parse(&l.gpu_id)?,
        at_ms: ended,
        end_ms: None,
        body: json!({"ended_at_ms": ended, "cause": cause}).to_string(),
    })
}

/// Milli-units of a decimal text with at most 3 fractional digits (`989.5` → 989 500).
fn milli(text: &str, field: &str) -> Result<u64, DomainError> {
    let bad = || {
        DomainError::new(
            "invalid_benchmark",
            format!("{field} must be a decimal with at most 3 fractional digits, as a string"),
        )
    };
    let value: rust_decimal::Decimal = text.trim().parse().map_err(|_| bad())?;
    if value.is_sign_negative() || value.scale() > 3 {
        return Err(bad());
    }
    u64::try_from(
        (value * rust_decimal::Decimal::from(1000))
            .trunc()
            .mantissa(),
    )
    .map_err(|_| bad())
}

fn benchmark(l: BenchmarkLine) -> Result<GpuReport, DomainError> {
    let measured = at(&l.measured_at, "measured_at")?;
    let metrics = json!({
        "fp16_milli_tflops": milli(&l.fp16_tflops, "fp16_tflops")?,
        "fp32_milli_tflops": milli(&l.fp32_tflops, "fp32_tflops")?,
        "tensor_milli_tflops": milli(&l.tensor_tflops, "tensor_tflops")?,
        "memory_gb_s": l.memory_gb_s,
        "network_mbit_s": l.network_mbit_s,
        "storage_mb_s": l.storage_mb_s,
    });
    Ok(GpuReport {
        kind: "benchmark",
        report_id: id(&l.benchmark_id, "benchmark_id")?,
        gpu_id: GpuId::parse(&l.gpu_id)?,
        at_ms: measured,
        end_ms: None,
        body: json!({"measured_at_ms": measured, "metrics": metrics}).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(v: Value) -> Result<GpuReport, DomainError> {
        let kind = v["type"].as_str().unwrap().to_owned();
        parse(&kind, v)
    }

    #[test]
    fn each_line_is_checked_with_a_stable_code() {
        let ok = line(json!({"type": "gpu.schedule", "schedule_id": "s1", "gpu_id": "g1", "effective_from": "2026-10-01T00:00:00Z", "time_zone": "Europe/Berlin", "hours": "Mon-Fri 09:00-18:00"})).unwrap();
        assert_eq!(ok.kind, "schedule");
        let code = |v: Value| line(v).unwrap_err().code;
        assert_eq!(
            code(
                json!({"type": "gpu.schedule", "schedule_id": "s1", "gpu_id": "g1", "effective_from": "2026-10-01T00:00:00Z", "time_zone": "Mars/Olympus", "hours": "24/7"})
            ),
            "unknown_time_zone"
        );
        assert_eq!(
            code(
                json!({"type": "gpu.online", "report_id": "o1", "gpu_id": "g1", "started_at": "2026-10-01T02:00:00Z", "ended_at": "2026-10-01T01:00:00Z"})
            ),
            "invalid_interval"
        );
        assert_eq!(
            code(
                json!({"type": "job.outcome", "job_id": "j1", "gpu_id": "g1", "ended_at": "2026-10-01T01:00:00Z", "result": "interrupted"})
            ),
            "invalid_fields"
        );
        assert_eq!(
            code(
                json!({"type": "gpu.benchmark", "benchmark_id": "b1", "gpu_id": "g1", "measured_at": "2026-10-01T01:00:00Z", "fp16_tflops": "1.2345", "fp32_tflops": "1", "tensor_tflops": "1", "memory_gb_s": 1, "network_mbit_s": 1, "storage_mb_s": 1})
            ),
            "invalid_benchmark"
        );
        assert_eq!(
            code(
                json!({"type": "gpu.online", "report_id": "o 1", "gpu_id": "g1", "started_at": "2026-10-01T00:00:00Z", "ended_at": "2026-10-01T01:00:00Z"})
            ),
            "invalid_id"
        );
        let b = line(json!({"type": "gpu.benchmark", "benchmark_id": "b1", "gpu_id": "g1", "measured_at": "2026-10-01T01:00:00Z", "fp16_tflops": "989.5", "fp32_tflops": "67", "tensor_tflops": "0.001", "memory_gb_s": 3350, "network_mbit_s": 1, "storage_mb_s": 1})).unwrap();
        assert!(
            b.body.contains("\"fp16_milli_tflops\":989500"),
            "{}",
            b.body
        );
        assert!(b.body.contains("\"tensor_milli_tflops\":1}"), "{}", b.body);
    }
}
