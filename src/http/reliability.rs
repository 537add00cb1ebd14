//! `POST /v1/gpus/online`: the agent's online intervals of its GPUs (SPEC §12), a batch
//! with a result per interval, like usage. An `ingest` (agent) token reports its own
//! provider's GPUs only; `metering` and `admin` tokens any GPU's.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use super::extract::{Auth, RawBody};
use super::problem::Problem;
use crate::auth::Scope;
use crate::domain::DomainError;
use crate::ledger::LedgerError;

/// One online interval, as the agent saw it.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "report_id": "agt-19:online:000123", "gpu_id": "gpu_42_0",
    "started_at": "2026-11-23T10:00:00Z", "ended_at": "2026-11-23T10:05:00Z"
}))]
pub struct OnlineInterval {
    /// The idempotency key: the same interval again is a duplicate.
    pub report_id: String,
    pub gpu_id: String,
    /// RFC 3339.
    pub started_at: String,
    /// RFC 3339, after `started_at`.
    pub ended_at: String,
}

/// A batch of at most `ledger.batch_events_max` intervals.
#[derive(Debug, Deserialize, ToSchema)]
pub struct OnlineBatch {
    #[schema(value_type = Vec<OnlineInterval>)]
    pub intervals: Vec<Value>,
}

/// The result of one interval.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct OnlineResult {
    pub index: usize,
    pub report_id: Option<String>,
    /// `accepted`, `duplicate` or `rejected`.
    pub status: String,
    /// Rejections: `malformed_interval`, `invalid_interval`, `invalid_time`, `invalid_id`,
    /// `unknown_gpu`, `forbidden_gpu` (an agent's token for another provider's GPU),
    /// `conflict`.
    pub code: Option<String>,
    pub message: Option<String>,
}

/// `POST /v1/gpus/online` response.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct OnlineResponse {
    pub results: Vec<OnlineResult>,
    pub accepted: usize,
    pub duplicate: usize,
    pub rejected: usize,
}

/// Record a batch of online intervals.
#[utoipa::path(
    post,
    path = "/v1/gpus/online",
    tag = "usage",
    request_body = OnlineBatch,
    responses(
        (status = 200, body = OnlineResponse, description = "Per-interval results"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "Not JSON or no intervals array"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Needs an ingest, metering or admin token"),
        (status = 413, body = Problem, content_type = "application/problem+json", description = "More than batch_events_max intervals or batch_bytes_max bytes"),
    ),
    security(("bearer" = []))
)]
pub async fn post_online(
    State(state): State<AppState>,
    auth: Auth,
    RawBody(body): RawBody,
) -> Result<Json<OnlineResponse>, Problem> {
    let principal = auth.require(&[Scope::Ingest, Scope::Metering, Scope::Admin])?;
    let own = match principal.scope {
        Scope::Ingest => Some(
            principal
                .provider_id
                .clone()
                .ok_or_else(|| Problem::forbidden("this ingest token has no provider"))?,
        ),
        _ => None,
    };
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| Problem::bad_request("malformed_json", format!("body is not JSON: {e}")))?;
    let Some(Value::Array(intervals)) = value.get("intervals") else {
        return Err(Problem::bad_request(
            "invalid_body",
            "the body must be an object {\"intervals\": [...]}",
        ));
    };
    let max = state.ledger.config.batch_events_max;
    if intervals.len() > max {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_intervals",
            format!(
                "a batch holds at most {max} intervals, this one {}",
                intervals.len()
            ),
        ));
    }
    let actor = principal.actor();
    // Each interval checked alone; the valid ones recorded together.
    let mut parsed = Vec::with_capacity(intervals.len());
    let mut reports = Vec::with_capacity(intervals.len());
    for interval in intervals {
        let report_id = interval
            .get("report_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match parse(interval) {
            Ok(report) => {
                reports.push(report);
                parsed.push((report_id, None));
            }
            Err(e) => parsed.push((report_id, Some(e))),
        }
    }
    let recorded = state
        .ledger
        .record_gpu_reports_for(&reports, own.as_deref(), &actor)
        .await?
        .into_iter();
    let results = results_of(parsed, recorded)?;
    let count = |s: &str| results.iter().filter(|r| r.status == s).count();
    Ok(Json(OnlineResponse {
        accepted: count("accepted"),
        duplicate: count("duplicate"),
        rejected: count("rejected"),
        results,
    }))
}

/// The result of each interval, in order: its own rejection, or what recording it did
/// (`recorded` holds a result per interval that was not rejected, in order).
fn results_of(
    parsed: Vec<(Option<String>, Option<DomainError>)>,
    mut recorded: std::vec::IntoIter<Result<crate::ledger::Applied, LedgerError>>,
) -> Result<Vec<OnlineResult>, Problem> {
    let mut results = Vec::with_capacity(parsed.len());
    for (index, (report_id, rejected)) in parsed.into_iter().enumerate() {
        let outcome = match rejected {
            Some(e) => Err(e),
            None => match recorded.next() {
                Some(Ok(applied)) => Ok(applied),
                Some(Err(LedgerError::Rejected(e))) => Err(e),
                Some(Err(e)) => return Err(e.into()),
                None => {
                    return Err(LedgerError::from(DomainError::new("internal", "no result")).into());
                }
            },
        };
        results.push(match outcome {
            Ok(applied) => OnlineResult {
                index,
                report_id,
                status: applied.as_str().to_owned(),
                code: None,
                message: None,
            },
            Err(e) => OnlineResult {
                index,
                report_id,
                status: "rejected".to_owned(),
                code: Some(e.code.to_owned()),
                message: Some(e.message),
            },
        });
    }
    Ok(results)
}

/// Checks one interval of the batch: its report, or why it is rejected.
fn parse(interval: &Value) -> Result<crate::ledger::reliability::GpuReport, DomainError> {
    if let Err(e) = serde_json::from_value::<OnlineInterval>(interval.clone()) {
        return Err(DomainError::new("malformed_interval", e.to_string()));
    }
    let mut line = interval.clone();
    line["type"] = Value::from("gpu.online");
    crate::wire::reliability::parse("gpu.online", line)
}
