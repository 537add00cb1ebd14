//! `POST /v1/usage`: a batch of metered usage events (SPEC §4), booked through
//! `Ledger::ingest_usage` with per-event results.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use super::extract::{Auth, RawBody};
use super::problem::Problem;
use crate::auth::{Principal, Scope};
use crate::ledger::ingest::{SenderScope, UsageInput, UsageResult};

/// A `usage.recorded` v1 input event.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "event_id": "agt-19:000123", "provider_id": "prv_42", "gpu_id": "gpu_42_0",
    "rental_id": "rnt_9001", "started_at": "2026-11-23T10:00:00Z",
    "ended_at": "2026-11-23T11:00:00Z", "rate_usdc_per_hour": "2.49"
}))]
pub struct UsageEvent {
    /// 1..=128 of `[A-Za-z0-9._:-]`, globally unique: the idempotency key.
    pub event_id: String,
    pub provider_id: String,
    pub gpu_id: String,
    pub rental_id: Option<String>,
    /// RFC 3339; truncated to milliseconds.
    pub started_at: String,
    /// RFC 3339, after `started_at`, at most 7 days later.
    pub ended_at: String,
    /// The agreed rate, USDC per GPU-hour (decimal string). `metering` and `admin` tokens
    /// only; without it the provider's price book applies. It must lie within the configured
    /// band around the price-book rate at `started_at` (default half to twice).
    pub rate_usdc_per_hour: Option<String>,
}

/// A batch of at most `batch_events_max` (1000) events.
#[derive(Debug, Deserialize, ToSchema)]
pub struct UsageBatch {
    /// Each element is judged on its own: a malformed one is rejected with
    /// `malformed_event`, the others are booked.
    #[schema(value_type = Vec<UsageEvent>)]
    pub events: Vec<Value>,
}

/// The result of one event.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct UsageEventResult {
    /// Position of the event in the batch.
    pub index: usize,
    pub event_id: Option<String>,
    /// `accepted` (booked now), `duplicate` (booked before with the same content: nothing
    /// booked twice) or `rejected`.
    #[schema(example = "accepted")]
    pub status: String,
    /// Rejections: `malformed_event`, `conflict`, `overlapping_usage`, `unknown_gpu`,
    /// `gpu_provider_mismatch`, `forbidden_provider`, `rate_not_allowed`, `invalid_interval`,
    /// `interval_too_long`, `in_future`, `too_late`, `no_rate`, `rate_out_of_band` (the
    /// event's rate outside `ledger.usage_rate_band_min_pct..=usage_rate_band_max_pct` of the
    /// price book at `started_at`), `rate_without_price_book`, `missing_field`, `invalid_*`, …
    pub code: Option<String>,
    pub message: Option<String>,
}

/// `POST /v1/usage` response.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct UsageResponse {
    pub results: Vec<UsageEventResult>,
    pub accepted: usize,
    pub duplicate: usize,
    pub rejected: usize,
}

/// Book a batch of usage events.
#[utoipa::path(
    post,
    path = "/v1/usage",
    tag = "usage",
    request_body = UsageBatch,
    responses(
        (status = 200, body = UsageResponse, description = "Per-event results"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "Not JSON or no events array"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Needs an ingest, metering or admin token"),
        (status = 413, body = Problem, content_type = "application/problem+json", description = "More than batch_events_max events or batch_bytes_max bytes"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_usage(
    State(state): State<AppState>,
    auth: Auth,
    RawBody(body): RawBody,
) -> Result<Json<UsageResponse>, Problem> {
    let principal = auth.require(&[Scope::Ingest, Scope::Metering, Scope::Admin])?;
    let scope = sender_scope(principal)?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| Problem::bad_request("malformed_json", format!("body is not JSON: {e}")))?;
    let Some(Value::Array(events)) = value.get("events") else {
        return Err(Problem::bad_request(
            "invalid_body",
            "the body must be an object {\"events\": [...]}",
        ));
    };
    let max = state.ledger.config.batch_events_max;
    if events.len() > max {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_events",
            format!(
                "a batch holds at most {max} events, this one {}",
                events.len()
            ),
        ));
    }
    let (mut results, inputs, positions) = decode_events(events);
    let actor = principal.actor();
    let booked = state.usage.ingest(inputs, scope, actor).await?;
    for (index, r) in positions.into_iter().zip(booked) {
        let (code, message) = match &r {
            UsageResult::Rejected { code, message, .. } => {
                (Some(code.to_string()), Some(message.clone()))
            }
            _ => (None, None),
        };
        results[index] = Some(UsageEventResult {
            index,
            event_id: r.event_id().map(str::to_owned),
            status: r.status().to_owned(),
            code,
            message,
        });
    }
    let results: Vec<UsageEventResult> = results
        .into_iter()
        .map(|r| r.expect("every event has a result"))
        .collect();
    let count = |s: &str| results.iter().filter(|r| r.status == s).count();
    Ok(Json(UsageResponse {
        accepted: count("accepted"),
        duplicate: count("duplicate"),
        rejected: count("rejected"),
        results,
    }))
}

/// What a token of `principal`'s scope may send: an ingest token only its provider's usage.
fn sender_scope(principal: &Principal) -> Result<SenderScope, Problem> {
    Ok(match principal.scope {
        Scope::Ingest => SenderScope::Ingest {
            provider_id: principal
                .provider_id
                .clone()
                .ok_or_else(|| Problem::forbidden("this ingest token has no provider"))?,
        },
        Scope::Metering => SenderScope::Metering,
        _ => SenderScope::Admin,
    })
}

/// Decodes each event of the batch on its own: the well-formed ones become inputs (with
/// their positions in the batch), a malformed one gets its `malformed_event` result now.
fn decode_events(events: &[Value]) -> (Vec<Option<UsageEventResult>>, Vec<UsageInput>, Vec<usize>) {
    let mut results: Vec<Option<UsageEventResult>> = vec![None; events.len()];
    let mut inputs: Vec<UsageInput> = Vec::with_capacity(events.len());
    let mut positions: Vec<usize> = Vec::with_capacity(events.len());
    for (index, event) in events.iter().enumerate() {
        match serde_json::from_value::<UsageEvent>(event.clone()) {
            Ok(e) => {
                positions.push(index);
                inputs.push(UsageInput {
                    event_id: Some(e.event_id),
                    provider_id: Some(e.provider_id),
                    gpu_id: Some(e.gpu_id),
                    rental_id: e.rental_id,
                    started_at: Some(e.started_at),
                    ended_at: Some(e.ended_at),
                    rate_usdc_per_hour: e.rate_usdc_per_hour,
                });
            }
            Err(err) => {
                results[index] = Some(UsageEventResult {
                    index,
                    event_id: event
                        .get("event_id")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    status: "rejected".into(),
                    code: Some("malformed_event".into()),
                    message: Some(if event.is_object() {
                        err.to_string()
                    } else {
                        "an event must be a JSON object".to_owned()
                    }),
                });
            }
        }
    }
    (results, inputs, positions)
}
