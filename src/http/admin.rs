//! Admin endpoints: corrections (void, adjustment) and the NDJSON import (registry, rates,
//! fees, usage, corrections), all through the ledger's commands. Admin tokens only.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use axum::http::HeaderMap;

use super::AppState;
use super::extract::{Auth, Page, Q, RawBody, page_of};
use super::problem::Problem;
use crate::auth::Scope;
use crate::control::Importer;
use crate::domain::event::ApprovalStatus;
use crate::domain::ids::{AdjustmentId, EventId, ProviderId};
use crate::domain::money::parse_micro_usdc;
use crate::wire::import::{Totals, parse_line};

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
    params(
        ("Settle-Operator" = Option<String>, Header, description = "The operator whose signature comes with the request (a ledger with operators; with Settle-Operator-Signature)"),
        ("Settle-Operator-Signature" = Option<String>, Header, description = "Base58 Ed25519 signature of the text a 428 operator_signature_required names"),
    ),
    responses(
        (status = 428, body = Problem, content_type = "application/problem+json", description = "operator_signature_required: a ledger with operators; the detail holds the text to sign"),
        (status = 200, body = CommandResult),
        (status = 202, body = PendingApproval, description = "at or above control.adjustment_approval_micro_usdc: booked as a request that waits for a second actor"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_provider"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "adjustment_id reused with other content"),
        (status = 422, body = Problem, content_type = "application/problem+json", description = "invalid input, or approval_rejected (the same adjustment was rejected by an approver)"),
    ),
    security(("bearer" = []))
)]
pub async fn post_adjustment(
    State(state): State<AppState>,
    auth: Auth,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<axum::response::Response, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let r: AdjustmentRequest = parse_json(&body)?;
    let adjustment_id = AdjustmentId::parse(&r.adjustment_id).map_err(domain)?;
    let provider_id = ProviderId::parse(&r.provider_id).map_err(domain)?;
    let amount = parse_micro_usdc(&r.amount_usdc).map_err(domain)?;
    let command = crate::wire::import::Command::Adjustment {
        adjustment_id: adjustment_id.clone(),
        provider_id,
        amount_micro_usdc: amount,
        reason: r.reason,
        reference: r.reference,
    };
    let signature = operator_signature(&headers)?;
    let submitted = crate::control::submit(
        &state.ledger,
        &state.control,
        &command,
        &principal.actor(),
        signature.as_ref().map(|s| s as &dyn crate::control::Sign),
    )
    .await?;
    submitted_response(&state.ledger, adjustment_id.to_string(), submitted).await
}

/// The header naming the operator whose signature comes with a request (SPEC §9).
pub const OPERATOR_HEADER: &str = "settle-operator";
/// The header with that operator's base58 Ed25519 signature of what the request needs
/// signed: `settle/control/v1/request:{content_hash}` for a gated command,
/// `settle/control/v1/approve:` (or `reject:`) `{approval_id}:{content_hash}` for a decision.
pub const OPERATOR_SIGNATURE_HEADER: &str = "settle-operator-signature";

/// The operator's signature sent with a request: both headers, or neither (400
/// `invalid_operator_headers` for one alone).
pub(super) fn operator_signature(
    headers: &HeaderMap,
) -> Result<Option<crate::control::GivenSignature>, Problem> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    match (text(OPERATOR_HEADER), text(OPERATOR_SIGNATURE_HEADER)) {
        (Some(operator), Some(signature)) => Ok(Some(crate::control::GivenSignature(
            crate::domain::operator::Signed {
                operator,
                signature,
            },
        ))),
        (None, None) => Ok(None),
        _ => Err(Problem::bad_request(
            "invalid_operator_headers",
            "Settle-Operator and Settle-Operator-Signature come together",
        )),
    }
}

/// A command's answer: 200 with its result, or 202 with the request it waits on.
pub(super) async fn submitted_response(
    ledger: &crate::ledger::Ledger,
    id: String,
    submitted: crate::control::Submitted,
) -> Result<axum::response::Response, Problem> {
    use axum::response::IntoResponse;
    Ok(match submitted {
        crate::control::Submitted::Applied(applied) => Json(CommandResult {
            id,
            status: applied.as_str().to_owned(),
        })
        .into_response(),
        crate::control::Submitted::Pending(row) => (
            axum::http::StatusCode::ACCEPTED,
            Json(PendingApproval {
                status: "pending_approval".into(),
                approval_id: row.approval_id.clone(),
                approval: opened(ledger, *row).await?,
            }),
        )
            .into_response(),
    })
}

/// A request as an operator reads it: its personal values opened (SPEC §11).
async fn opened(
    ledger: &crate::ledger::Ledger,
    row: crate::store::read::ApprovalRow,
) -> Result<ApprovalView, Problem> {
    let mut rows = [row];
    ledger.open_approvals(&mut rows).await?;
    let [row] = rows;
    Ok(ApprovalView::of(row))
}

/// 202: the command waits for a second actor.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct PendingApproval {
    /// Always `pending_approval`.
    #[schema(example = "pending_approval")]
    pub status: String,
    pub approval_id: String,
    pub approval: ApprovalView,
}

/// A dual-control request.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ApprovalView {
    #[schema(example = "apr_3f1c0a9b8e7d6c5b4a392817")]
    pub approval_id: String,
    /// `adjustment`, `payout_method`, `tier`, `fee_schedule`, `fx_rate`, `rate`, `void`,
    /// `payout_release`, `operator`, `policy` or `token`.
    pub kind: String,
    /// `pending`, `approved` or `rejected`.
    pub status: String,
    pub summary: String,
    /// The command executed on approval: a canonical JSON import line (SPEC §8), or
    /// `{"type":"payout.release","payout_id":…}`.
    pub command: String,
    pub provider_id: Option<String>,
    /// USDC decimal string, when the command moves an amount.
    pub amount_usdc: Option<String>,
    pub requested_by: String,
    pub requested_at: String,
    pub decided_by: Option<String>,
    pub decided_at: Option<String>,
    pub reason: Option<String>,
    /// Hex SHA-256 the operators' signatures cover, on a ledger with operators: a decision
    /// signs `settle/control/v1/approve:{approval_id}:{content_hash}` (or `reject:`).
    pub content_hash: Option<String>,
    /// The operator who requested it (signature on the ledger).
    pub requester_operator: Option<String>,
    /// The operator who decided it (signature on the ledger).
    pub decider_operator: Option<String>,
}

impl ApprovalView {
    pub fn of(r: crate::store::read::ApprovalRow) -> ApprovalView {
        use crate::domain::time::format_ms;
        ApprovalView {
            approval_id: r.approval_id,
            kind: r.kind,
            status: r.status.as_str().to_owned(),
            summary: r.summary,
            command: r.command,
            provider_id: r.provider_id,
            amount_usdc: r
                .amount_micro_usdc
                .map(crate::domain::money::format_micro_usdc),
            requested_by: r.requested_by,
            requested_at: format_ms(r.requested_at_ms),
            decided_by: r.decided_by,
            decided_at: r.decided_at_ms.map(format_ms),
            reason: r.reason,
            content_hash: r.content_hash,
            requester_operator: r.requester_operator,
            decider_operator: r.decider_operator,
        }
    }
}

/// `GET /v1/admin/approvals` response.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ApprovalList {
    pub approvals: Vec<ApprovalView>,
}

/// `?status=` of the approvals list.
#[derive(Clone, Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ApprovalListQuery {
    /// `pending` (default), `approved`, `rejected` or `all`.
    pub status: Option<String>,
}

/// Dual-control requests, oldest first (at most `control.list_max`).
#[utoipa::path(
    get,
    path = "/v1/admin/approvals",
    tag = "admin",
    params(ApprovalListQuery),
    responses(
        (status = 200, body = ApprovalList),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_status"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list_approvals(
    State(state): State<AppState>,
    auth: Auth,
    Q(q): Q<ApprovalListQuery>,
) -> Result<Json<ApprovalList>, Problem> {
    auth.require(&[Scope::Admin])?;
    let status = q.status.unwrap_or_else(|| "pending".into());
    let filter = match (status.as_str(), ApprovalStatus::parse(&status)) {
        ("all", _) => None,
        (_, Some(status)) => Some(status),
        (_, None) => {
            return Err(Problem::bad_request(
                "invalid_status",
                "status is pending, approved, rejected or all",
            ));
        }
    };
    let mut rows =
        crate::store::read::approvals(&state.ledger.store, filter, state.control.list_max).await?;
    state.ledger.open_approvals(&mut rows).await?;
    Ok(Json(ApprovalList {
        approvals: rows.into_iter().map(ApprovalView::of).collect(),
    }))
}

/// One dual-control request.
#[utoipa::path(
    get,
    path = "/v1/admin/approvals/{id}",
    tag = "admin",
    params(("id" = String, Path, description = "The approval id")),
    responses(
        (status = 200, body = ApprovalView),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_approval"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn show_approval(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<ApprovalView>, Problem> {
    auth.require(&[Scope::Admin])?;
    Ok(Json(
        opened(&state.ledger, state.ledger.approval(&id).await?).await?,
    ))
}

/// The answer to a decision.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct DecisionResult {
    pub approval: ApprovalView,
    /// For an approval: what the command did, `accepted` or `duplicate` (it ran before).
    pub result: Option<String>,
}

/// Approve a request: its command runs now (its events name the requester and the
/// approver), then the decision is booked. The requester cannot approve.
#[utoipa::path(
    post,
    path = "/v1/admin/approvals/{id}/approve",
    tag = "admin",
    params(
        ("id" = String, Path, description = "The approval id"),
        ("Settle-Operator" = Option<String>, Header, description = "The operator whose signature comes with the request (a ledger with operators; with Settle-Operator-Signature)"),
        ("Settle-Operator-Signature" = Option<String>, Header, description = "Base58 Ed25519 signature of the text a 428 operator_signature_required names"),
    ),
    responses(
        (status = 200, body = DecisionResult),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_approval"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_operator_headers"),
        (status = 422, body = Problem, content_type = "application/problem+json", description = "approver_is_requester, approval_decided, request_not_signed, or the command's own rejection"),
        (status = 428, body = Problem, content_type = "application/problem+json", description = "operator_signature_required: a ledger with operators; the detail holds the text to sign"),
    ),
    security(("bearer" = []))
)]
pub async fn approve(
    State(state): State<AppState>,
    auth: Auth,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<DecisionResult>, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let signature = operator_signature(&headers)?;
    let (row, applied) = crate::control::approve(
        &state.ledger,
        &state.runs,
        &id,
        &principal.actor(),
        signature.as_ref().map(|s| s as &dyn crate::control::Sign),
    )
    .await?;
    Ok(Json(DecisionResult {
        approval: opened(&state.ledger, row).await?,
        result: Some(applied.as_str().to_owned()),
    }))
}

/// `POST /v1/admin/approvals/{id}/reject` body.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectRequest {
    pub reason: String,
}

/// Reject a request: nothing of its command happens. The requester cannot reject either
/// (a request is withdrawn by a second actor's rejection).
#[utoipa::path(
    post,
    path = "/v1/admin/approvals/{id}/reject",
    tag = "admin",
    params(
        ("id" = String, Path, description = "The approval id"),
        ("Settle-Operator" = Option<String>, Header, description = "The operator whose signature comes with the request (a ledger with operators; with Settle-Operator-Signature)"),
        ("Settle-Operator-Signature" = Option<String>, Header, description = "Base58 Ed25519 signature of the text a 428 operator_signature_required names"),
    ),
    request_body = RejectRequest,
    responses(
        (status = 200, body = DecisionResult),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_approval"),
        (status = 422, body = Problem, content_type = "application/problem+json", description = "approver_is_requester, approval_decided, request_not_signed, invalid_text"),
        (status = 428, body = Problem, content_type = "application/problem+json", description = "operator_signature_required: a ledger with operators; the detail holds the text to sign"),
    ),
    security(("bearer" = []))
)]
pub async fn reject(
    State(state): State<AppState>,
    auth: Auth,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawBody(body): RawBody,
) -> Result<Json<DecisionResult>, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let r: RejectRequest = parse_json(&body)?;
    let signature = operator_signature(&headers)?;
    let row = crate::control::reject_request(
        &state.ledger,
        &id,
        &r.reason,
        &principal.actor(),
        signature.as_ref().map(|s| s as &dyn crate::control::Sign),
    )
    .await?;
    Ok(Json(DecisionResult {
        approval: opened(&state.ledger, row).await?,
        result: None,
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
    /// `accepted`, `duplicate`, `pending` (waits for a second actor; code
    /// `pending_approval`) or `rejected`.
    pub status: String,
    pub code: Option<String>,
    pub message: Option<String>,
    /// The request a `pending` line waits on (`POST /v1/admin/approvals/{id}/approve`);
    /// absent on other lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

/// Counts by status.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct ImportTotals {
    pub accepted: usize,
    pub duplicate: usize,
    /// Lines waiting for a second actor; absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub pending: usize,
    pub rejected: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
    params(
        ("Settle-Operator" = Option<String>, Header, description = "The operator whose signature comes with the request (a ledger with operators; with Settle-Operator-Signature)"),
        ("Settle-Operator-Signature" = Option<String>, Header, description = "Base58 Ed25519 signature of the text a 428 operator_signature_required names"),
    ),
    responses(
        (status = 200, body = ImportResponse),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 428, body = Problem, content_type = "application/problem+json", description = "operator_signature_required: a ledger with operators; the detail holds the text to sign"),
    ),
    security(("bearer" = []))
)]
pub async fn import(
    State(state): State<AppState>,
    auth: Auth,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Json<ImportResponse>, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| Problem::bad_request("invalid_body", "the body must be UTF-8 NDJSON"))?;
    let actor = principal.actor();
    let signature = operator_signature(&headers)?;
    let mut importer = Importer::new(&state.ledger, &state.control, &actor)
        .signed_by(signature.as_ref().map(|s| s as &dyn crate::control::Sign));
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
            approval_id: r.approval_id,
        })
        .collect();
    let totals = ImportTotals {
        accepted: t.accepted,
        duplicate: t.duplicate,
        pending: t.pending,
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
        crate::ledger::runs::run_report(&state.ledger.store, &state.calendar, run).await?
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
                decision: c.decision.as_str().to_owned(),
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
