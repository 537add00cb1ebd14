//! Admin endpoints: corrections (void, adjustment) and the NDJSON import (registry, rates,
//! fees, usage, corrections), all through the ledger's commands. Admin tokens only.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::extract::{Auth, Page, Q, RawBody, page_of};
use super::problem::Problem;
use crate::auth::Scope;
use crate::domain::ids::{AdjustmentId, EventId, ProviderId};
use crate::domain::money::parse_micro_usdc;
use crate::wire::import::{Importer, Totals, parse_line};

fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Problem> {
    serde_json::from_slice(body).map_err(|e| Problem::bad_request("invalid_body", e.to_string()))
}

fn domain(e: crate::domain::DomainError) -> Problem {
    Problem::new(
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        e.code,
        e.message,
    )
}

/// `POST /v1/admin/usage/{event_id}/void` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VoidRequest {
    /// Why the usage is voided (1..=500 characters).
    pub reason: String,
    /// Whose event: an event_id is unique per provider. Needed only when the id is booked
    /// under more than one provider (else `ambiguous_event_id`).
    #[serde(default)]
    pub provider_id: Option<String>,
}

/// The outcome of an idempotent command.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct CommandResult {
    /// The voided event id or the adjustment id.
    pub id: String,
    /// `accepted` (booked now) or `duplicate` (booked before, identical).
    #[schema(example = "accepted")]
    pub status: String,
}

/// Void a usage event: its exact reversal, with the same business time.
#[utoipa::path(
    post,
    path = "/v1/admin/usage/{event_id}/void",
    tag = "admin",
    params(("event_id" = String, Path, description = "The usage event to void")),
    request_body = VoidRequest,
    responses(
        (status = 200, body = CommandResult),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_event"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn void_usage(
    State(state): State<AppState>,
    auth: Auth,
    Path(event_id): Path<String>,
    RawBody(body): RawBody,
) -> Result<Json<CommandResult>, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let request: VoidRequest = parse_json(&body)?;
    let event_id = EventId::parse(&event_id).map_err(domain)?;
    let provider_id = request
        .provider_id
        .as_deref()
        .map(ProviderId::parse)
        .transpose()
        .map_err(domain)?;
    let applied = state
        .ledger
        .void_usage(
            &event_id,
            provider_id.as_ref(),
            &request.reason,
            &principal.actor(),
        )
        .await?;
    Ok(Json(CommandResult {
        id: event_id.to_string(),
        status: applied.as_str().to_owned(),
    }))
}

/// `POST /v1/admin/adjustments` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"adjustment_id": "adj-2026-001", "provider_id": "prv_42",
    "amount_usdc": "-12.500000", "reason": "chargeback", "reference": "case-77"}))]
pub struct AdjustmentRequest {
    /// The idempotency key.
    pub adjustment_id: String,
    pub provider_id: String,
    /// Signed USDC decimal string, at most 6 fractional digits, not zero.
    pub amount_usdc: String,
    pub reason: String,
    pub reference: Option<String>,
}

/// Post an adjustment to a provider's payable balance.
#[utoipa::path(
    post,
    path = "/v1/admin/adjustments",
    tag = "admin",
    request_body = AdjustmentRequest,
    responses(
        (status = 200, body = CommandResult),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_provider"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "adjustment_id reused with other content"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn post_adjustment(
    State(state): State<AppState>,
    auth: Auth,
    RawBody(body): RawBody,
) -> Result<Json<CommandResult>, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let r: AdjustmentRequest = parse_json(&body)?;
    let adjustment_id = AdjustmentId::parse(&r.adjustment_id).map_err(domain)?;
    let provider_id = ProviderId::parse(&r.provider_id).map_err(domain)?;
    let amount = parse_micro_usdc(&r.amount_usdc).map_err(domain)?;
    let applied = state
        .ledger
        .post_adjustment(
            &adjustment_id,
            &provider_id,
            amount,
            &r.reason,
            r.reference.as_deref(),
            &principal.actor(),
        )
        .await?;
    Ok(Json(CommandResult {
        id: adjustment_id.to_string(),
        status: applied.as_str().to_owned(),
    }))
}

/// The result of one import line.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ImportLine {
    /// 1-based line number.
    pub line: usize,
    /// The line's `type` (empty when unreadable).
    #[serde(rename = "type")]
    pub kind: String,
    pub id: Option<String>,
    /// `accepted`, `duplicate` or `rejected`.
    pub status: String,
    pub code: Option<String>,
    pub message: Option<String>,
}

/// Counts by status.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct ImportTotals {
    pub accepted: usize,
    pub duplicate: usize,
    pub rejected: usize,
}

/// `POST /v1/admin/import` response (the same shape as `settle import --format json`).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ImportResponse {
    pub lines: Vec<ImportLine>,
    pub totals: ImportTotals,
}

/// Apply an NDJSON body of commands (SPEC §8 import format), one result per line.
#[utoipa::path(
    post,
    path = "/v1/admin/import",
    tag = "admin",
    request_body(content = String, content_type = "application/x-ndjson",
        description = "One command per line, tagged by \"type\": provider.register, provider.update, gpu.register, rate.set, fee_schedule.set, usage, usage.void, adjustment, fx.rate_set"),
    responses(
        (status = 200, body = ImportResponse),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 413, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn import(
    State(state): State<AppState>,
    auth: Auth,
    RawBody(body): RawBody,
) -> Result<Json<ImportResponse>, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| Problem::bad_request("invalid_body", "the body must be UTF-8 NDJSON"))?;
    let actor = principal.actor();
    let mut importer = Importer::new(&state.ledger, &actor);
    for (n, line) in text.lines().enumerate() {
        if !line.trim().is_empty() {
            importer.line(n + 1, parse_line(line)).await?;
        }
    }
    let results = importer.finish().await?;
    let t = Totals::of(&results);
    let lines = results
        .into_iter()
        .map(|r| ImportLine {
            line: r.line,
            kind: r.kind,
            id: r.id,
            status: r.status.to_owned(),
            code: r.code,
            message: r.message,
        })
        .collect();
    let totals = ImportTotals {
        accepted: t.accepted,
        duplicate: t.duplicate,
        rejected: t.rejected,
    };
    Ok(Json(ImportResponse { lines, totals }))
}

/// One candidate of a run.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct RunCandidateView {
    pub provider_id: String,
    /// `no_method`, `cooling_off`, `negative`, `nothing_due`, `below_minimum`, `held`, `paid`.
    pub decision: String,
    pub available_usdc: String,
    pub amount_usdc: String,
    pub payout_id: Option<String>,
    pub decided_at: String,
}

/// Count and amount of one decision.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct DecisionTotalView {
    pub count: i64,
    pub amount_usdc: String,
}

/// `GET /v1/admin/runs/{kind}/{key}`: a payout run as recorded.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct RunReportView {
    pub run_kind: String,
    pub run_key: String,
    pub cutoff: String,
    /// `YYYY-MM-DD`.
    pub run_date: String,
    /// Whether `payout_run.completed` is on the ledger.
    pub completed: bool,
    pub completed_at: Option<String>,
    /// One page of the candidates, in provider id order.
    pub candidates: Vec<RunCandidateView>,
    /// The cursor of the next page of candidates; null on the last page.
    pub next_cursor: Option<String>,
    /// Per decision over every candidate (every decision listed).
    pub totals: std::collections::BTreeMap<String, DecisionTotalView>,
    /// Payouts created (paid and held) and their sum.
    pub payouts: i64,
    pub payouts_usdc: String,
}

/// A payout run's report: every candidate with its decision, and the totals.
#[utoipa::path(
    get,
    path = "/v1/admin/runs/{kind}/{key}",
    tag = "admin",
    params(
        ("kind" = String, Path, description = "`weekly` or `monthly`"),
        ("key" = String, Path, description = "The run's Monday (`YYYY-MM-DD`) or month (`YYYY-MM`)"),
        super::dashboard::PageQuery,
    ),
    responses(
        (status = 200, body = RunReportView),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_run"),
        (status = 422, body = Problem, content_type = "application/problem+json", description = "invalid run key"),
    ),
    security(("bearer" = []))
)]
pub async fn run_report(
    State(state): State<AppState>,
    auth: Auth,
    Path((kind, key)): Path<(String, String)>,
    Q(q): Q<super::dashboard::PageQuery>,
) -> Result<Json<RunReportView>, Problem> {
    use crate::domain::money::format_micro_usdc;
    use crate::domain::time::format_ms;
    auth.require(&[Scope::Admin])?;
    let page = Page::parse(&state, q.limit, q.cursor.as_deref(), "run_candidates")?;
    let run = settle_calendar::RunKey::parse(&kind, &key)
        .map_err(|e| domain(crate::domain::DomainError::new(e.code(), e.to_string())))?;
    let Some(r) =
        crate::ledger::runs::run_report(state.ledger.store.pool(), &state.calendar, run).await?
    else {
        return Err(Problem::new(
            axum::http::StatusCode::NOT_FOUND,
            "unknown_run",
            format!("no {kind} run {key} on the ledger"),
        ));
    };
    let (candidates, next_cursor) = page_of(r.candidates, &page, "run_candidates", |c| {
        c.provider_id.as_str()
    });
    Ok(Json(RunReportView {
        next_cursor,
        run_kind: r.run_kind,
        run_key: r.run_key,
        cutoff: format_ms(r.cutoff_ms),
        run_date: r.run_date,
        completed: r.completed,
        completed_at: r.completed_at_ms.map(format_ms),
        candidates: candidates
            .into_iter()
            .map(|c| RunCandidateView {
                provider_id: c.provider_id,
                decision: c.decision,
                available_usdc: format_micro_usdc(c.available_micro_usdc),
                amount_usdc: format_micro_usdc(c.amount_micro_usdc),
                payout_id: c.payout_id,
                decided_at: format_ms(c.decided_at_ms),
            })
            .collect(),
        totals: r
            .totals
            .into_iter()
            .map(|(d, t)| {
                (
                    d,
                    DecisionTotalView {
                        count: t.count,
                        amount_usdc: format_micro_usdc(t.amount_micro_usdc),
                    },
                )
            })
            .collect(),
        payouts: r.payouts,
        payouts_usdc: format_micro_usdc(r.payouts_micro_usdc),
    }))
}
