//! Admin endpoints of the bank rail (SPEC §6): generate the SEPA and NACHA files, list and
//! show batches, download a batch's file (regenerated and checked against the SHA-256 on
//! the ledger), record submitted and settled, and book returns. Admin tokens only.
//!
//! Generating writes files into the outbox; no money moves inside a request: the files go
//! to the bank outside the engine.
//!
//! The bank configuration is the state's (`AppState::bank`): `settle serve` gives it the
//! `[bank]` section of its `--config` file with the `SETTLE_BANK__*` overrides, and refuses
//! to start while it holds the built-in example originator (`example_originator`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, OpenApi, ToSchema};

use super::AppState;
use super::extract::{Auth, Page, Q, RawBody, page_of};
use super::problem::Problem;
use crate::auth::Scope;
use crate::config::BankConfig;
use crate::domain::money::{format_cents, format_micro_usdc};
use crate::domain::time::format_ms;
use crate::ledger::LedgerError;
use crate::rails::bank::{self, BankBatch, BankError, Originator};

/// The bank routes, to merge into the API router (state `AppState`).
pub fn routes(answer_bytes_max: usize) -> Router<AppState> {
    Router::new()
        .route(
            "/v1/admin/bank/files",
            post(post_answer_file).layer(axum::extract::DefaultBodyLimit::max(answer_bytes_max)),
        )
        .route("/v1/admin/bank/reconciliation", get(reconciliation))
        .route("/v1/admin/bank/batches", get(list_batches))
        .route("/v1/admin/bank/batches/generate", post(generate))
        .route("/v1/admin/bank/batches/{id}", get(show_batch))
        .route("/v1/admin/bank/batches/{id}/file", get(batch_file))
        .route("/v1/admin/bank/batches/{id}/submitted", post(submitted))
        .route("/v1/admin/bank/batches/{id}/settled", post(settled))
        .route("/v1/admin/bank/returns", post(post_return))
}

/// The OpenAPI paths of the bank routes (merge into the API document).
#[derive(OpenApi)]
#[openapi(paths(
    list_batches,
    generate,
    show_batch,
    batch_file,
    submitted,
    settled,
    post_return,
    post_answer_file,
    reconciliation
))]
pub struct BankApiDoc;

/// The served bank configuration.
fn bank_config(state: &AppState) -> Arc<BankConfig> {
    state.bank.clone()
}

impl From<BankError> for Problem {
    fn from(e: BankError) -> Problem {
        match e {
            BankError::Ledger(LedgerError::Rejected(d)) if d.code == "unknown_bank_batch" => {
                Problem::new(StatusCode::NOT_FOUND, d.code, d.message)
            }
            BankError::Ledger(LedgerError::Rejected(d))
                if matches!(d.code, "invalid_bank_config" | "bank_file_mismatch") =>
            {
                // The operator's configuration, not the request, is wrong: say so.
                tracing::error!(code = d.code, message = %d.message, "bank rail misconfigured");
                Problem::new(StatusCode::INTERNAL_SERVER_ERROR, d.code, d.message)
            }
            BankError::Ledger(l) => l.into(),
            e @ BankError::Io { .. } => Problem::internal(&e),
        }
    }
}

/// A bank batch; money as a decimal string of its currency.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct BatchView {
    pub batch_id: String,
    /// `sepa` or `ach`.
    pub rail: String,
    /// `generated`, `submitted` or `settled`.
    pub status: String,
    pub payout_ids: Vec<String>,
    /// Total of the file, two fractional digits.
    #[schema(example = "1234.56")]
    pub total: String,
    /// `EUR` or `USD`.
    pub currency: String,
    pub file_name: String,
    /// SHA-256 of the file's bytes, lower-case hex.
    pub sha256: String,
    pub generated_at: String,
    pub updated_at: String,
}

fn view(b: &BankBatch) -> BatchView {
    BatchView {
        batch_id: b.batch_id.clone(),
        rail: b.rail.as_str().to_owned(),
        status: b.status.to_string(),
        payout_ids: b.payout_ids.clone(),
        total: format_cents(b.total_cents),
        currency: b.currency.clone(),
        file_name: b.file_name.clone(),
        sha256: b.sha256.clone(),
        generated_at: format_ms(b.generated_at_ms),
        updated_at: format_ms(b.updated_at_ms),
    }
}

/// `GET /v1/admin/bank/batches` query.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct BatchesQuery {
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

/// A page of batches, oldest first.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct BatchPage {
    pub items: Vec<BatchView>,
    pub next_cursor: Option<String>,
}

/// List the bank batches, oldest first.
#[utoipa::path(
    get,
    path = "/v1/admin/bank/batches",
    tag = "admin",
    params(BatchesQuery),
    responses(
        (status = 200, body = BatchPage),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list_batches(
    State(state): State<AppState>,
    auth: Auth,
    Q(q): Q<BatchesQuery>,
) -> Result<Json<BatchPage>, Problem> {
    auth.require(&[Scope::Admin])?;
    let page = Page::parse(&state, q.limit, q.cursor.as_deref(), "bank_batches")?;
    let all: Vec<(String, BankBatch)> = bank::batches(&state.ledger.store)
        .await?
        .into_iter()
        .map(|b| (format!("{:020}|{}", b.generated_at_ms, b.batch_id), b))
        .collect();
    let (items, next_cursor) = page_of(all, &page, "bank_batches", |(k, _)| k.as_str());
    Ok(Json(BatchPage {
        items: items.iter().map(|(_, b)| view(b)).collect(),
        next_cursor,
    }))
}

/// One batch of a generation.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct GeneratedView {
    pub batch: BatchView,
    /// Generated by this request (false: an interrupted earlier batch finished).
    pub new: bool,
    /// Payouts submitted by this request.
    pub submitted: usize,
    /// Payouts of the file that are no longer in transit: do not send it unchanged.
    pub problems: Vec<String>,
}

/// A payout failed because it can never be written into a bank file.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct UnbankableView {
    pub payout_id: String,
    pub reason: String,
}

/// `POST /v1/admin/bank/batches/generate` response.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct GenerateResponse {
    pub batches: Vec<GeneratedView>,
    pub failed: Vec<UnbankableView>,
}

/// Write the SEPA and NACHA files of every created bank payout into the outbox and submit
/// the payouts (finishes an interrupted generation first). Idempotent.
#[utoipa::path(
    post,
    path = "/v1/admin/bank/batches/generate",
    tag = "admin",
    responses(
        (status = 200, body = GenerateResponse),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 500, body = Problem, content_type = "application/problem+json", description = "invalid_bank_config, bank_file_mismatch"),
    ),
    security(("bearer" = []))
)]
pub async fn generate(
    State(state): State<AppState>,
    auth: Auth,
) -> Result<Json<GenerateResponse>, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let config = bank_config(&state);
    let report = bank::generate_batches(&state.ledger, &config, &principal.actor()).await?;
    // The answer lists each batch's payouts: read back one batch at a time.
    let mut batches = Vec::with_capacity(report.batches.len());
    for o in report.batches {
        let batch = bank::known_batch(&state.ledger.store, &o.batch.batch_id).await?;
        batches.push(GeneratedView {
            batch: view(&batch),
            new: o.new,
            submitted: o.submitted,
            problems: o.problems,
        });
    }
    Ok(Json(GenerateResponse {
        batches,
        failed: report
            .failed
            .into_iter()
            .map(|f| UnbankableView {
                payout_id: f.payout_id,
                reason: f.reason,
            })
            .collect(),
    }))
}

/// A payout of a batch.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct BatchPayoutView {
    pub payout_id: String,
    pub provider_id: String,
    pub status: String,
    pub amount_usdc: String,
    /// EUR payouts: the amount sent, two fractional digits.
    pub amount_eur: Option<String>,
    pub end_to_end_id: Option<String>,
    pub failure_reason: Option<String>,
}

/// A batch with its payouts.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct BatchDetail {
    pub batch: BatchView,
    pub payouts: Vec<BatchPayoutView>,
}

/// Show a batch and its payouts.
#[utoipa::path(
    get,
    path = "/v1/admin/bank/batches/{id}",
    tag = "admin",
    params(("id" = String, Path, description = "Batch id")),
    responses(
        (status = 200, body = BatchDetail),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_bank_batch"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn show_batch(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<BatchDetail>, Problem> {
    auth.require(&[Scope::Admin])?;
    let store = &state.ledger.store;
    let Some(b) = bank::batch(store, &id).await? else {
        return Err(unknown(&id));
    };
    let payouts = bank::batch_payouts(store, &b).await?;
    Ok(Json(BatchDetail {
        batch: view(&b),
        payouts: payouts
            .into_iter()
            .map(|p| BatchPayoutView {
                payout_id: p.payout_id.into(),
                provider_id: p.provider_id.into(),
                status: p.status.to_string(),
                amount_usdc: format_micro_usdc(p.amount_micro_usdc),
                amount_eur: p.amount_eur_cents.map(format_cents),
                end_to_end_id: p.end_to_end_id,
                failure_reason: p.failure_reason,
            })
            .collect(),
    }))
}

fn unknown(id: &str) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "unknown_bank_batch",
        format!("no bank batch {id}"),
    )
}

/// Download a batch's file: regenerated from the ledger, byte for byte the file that was
/// generated (its SHA-256 is checked against the one recorded).
#[utoipa::path(
    get,
    path = "/v1/admin/bank/batches/{id}/file",
    tag = "admin",
    params(("id" = String, Path, description = "Batch id")),
    responses(
        (status = 200, content_type = "application/xml", body = String, description = "SEPA pain.001.001.09 (application/xml) or NACHA (text/plain)"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_bank_batch"),
        (status = 500, body = Problem, content_type = "application/problem+json", description = "bank_file_mismatch"),
    ),
    security(("bearer" = []))
)]
pub async fn batch_file(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    auth.require(&[Scope::Admin])?;
    let config = bank_config(&state);
    let originator = Originator::parse(&config).map_err(BankError::from)?;
    let (b, file) = bank::regenerate(&state.ledger, &originator, &id).await?;
    let content_type = match b.rail {
        crate::domain::event::Rail::Sepa => "application/xml",
        _ => "text/plain; charset=us-ascii",
    };
    let mut response = (StatusCode::OK, file.contents).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{}\"", b.file_name)) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&b.sha256) {
        headers.insert("x-content-sha256", v);
    }
    Ok(response)
}

/// The result of a lifecycle step.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct LifecycleView {
    pub batch: BatchView,
    /// `accepted` (changed now) or `duplicate` (already so).
    pub result: String,
    /// Payouts submitted or settled by this request.
    pub payouts_changed: usize,
    pub problems: Vec<String>,
}

fn lifecycle(o: bank::LifecycleOutcome) -> LifecycleView {
    LifecycleView {
        batch: view(&o.batch),
        result: o.status_change.to_owned(),
        payouts_changed: o.payouts_changed,
        problems: o.problems,
    }
}

/// Record that the batch's file was handed to the bank (generated → submitted).
#[utoipa::path(
    post,
    path = "/v1/admin/bank/batches/{id}/submitted",
    tag = "admin",
    params(("id" = String, Path, description = "Batch id")),
    responses(
        (status = 200, body = LifecycleView),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_bank_batch"),
        (status = 422, body = Problem, content_type = "application/problem+json", description = "invalid_batch_state"),
    ),
    security(("bearer" = []))
)]
pub async fn submitted(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<LifecycleView>, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let o = bank::mark_submitted(&state.ledger, &id, &principal.actor()).await?;
    Ok(Json(lifecycle(o)))
}

/// Record that the bank executed the batch (submitted → settled): its payouts settle
/// (in transit → `platform:treasury:bank`).
#[utoipa::path(
    post,
    path = "/v1/admin/bank/batches/{id}/settled",
    tag = "admin",
    params(("id" = String, Path, description = "Batch id")),
    responses(
        (status = 200, body = LifecycleView),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_bank_batch"),
        (status = 422, body = Problem, content_type = "application/problem+json", description = "invalid_batch_state"),
    ),
    security(("bearer" = []))
)]
pub async fn settled(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<LifecycleView>, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let o = bank::mark_settled(&state.ledger, &id, &principal.actor()).await?;
    Ok(Json(lifecycle(o)))
}

/// `POST /v1/admin/bank/returns` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"payout_id": "po-0123456789abcdef01234567", "code": "AC04"}))]
pub struct ReturnRequest {
    pub payout_id: String,
    /// SEPA (`AC04`, …) or ACH (`R03`, …) return reason code.
    pub code: String,
}

/// The booked return.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ReturnView {
    pub payout_id: String,
    pub provider_id: String,
    pub batch_id: String,
    pub code: String,
    pub reason: String,
    /// The provider's bank details are blocked until updated.
    pub method_invalid: bool,
    /// `accepted` or `duplicate`.
    pub status: String,
}

/// Book a bank return of a payout: the funds go back to the provider's payable balance and,
/// when the reason proves the account unusable, the bank details are marked invalid.
#[utoipa::path(
    post,
    path = "/v1/admin/bank/returns",
    tag = "admin",
    request_body = ReturnRequest,
    responses(
        (status = 200, body = ReturnView),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "unknown_payout"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "returned before with another code"),
        (status = 422, body = Problem, content_type = "application/problem+json", description = "unknown_return_code, return_code_rail_mismatch, invalid_payout_state"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_return(
    State(state): State<AppState>,
    auth: Auth,
    RawBody(body): RawBody,
) -> Result<Json<ReturnView>, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let r: ReturnRequest = serde_json::from_slice(&body)
        .map_err(|e| Problem::bad_request("invalid_body", e.to_string()))?;
    let o = bank::return_payout(&state.ledger, &r.payout_id, &r.code, &principal.actor()).await?;
    Ok(Json(ReturnView {
        payout_id: o.payout_id,
        provider_id: o.provider_id.into(),
        batch_id: o.batch_id,
        code: o.code,
        reason: o.reason,
        method_invalid: o.method_invalid,
        status: o.status.to_owned(),
    }))
}

/// What became of one entry of an answer file.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AnswerEntryView {
    /// The entry's identity (its bank reference, else its place in the file).
    pub entry: String,
    /// What it named: end-to-end id, payment information id, trace number.
    pub reference: String,
    pub payout_id: Option<String>,
    pub batch_id: Option<String>,
    /// `settled`, `rejected`, `returned`, `change_proposed`, `duplicate`, `ignored`,
    /// `unmatched`, `amount_mismatch`, `unknown_batch`, `state_conflict` or
    /// `change_unrequested`.
    pub outcome: String,
    pub code: Option<String>,
    pub detail: String,
}

/// What an import did with an answer file.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AnswerImportView {
    /// `pain.002`, `camt.054`, `camt.053` or `nacha_returns`.
    pub kind: String,
    pub message_id: String,
    pub sha256: String,
    /// `accepted` (booked now) or `duplicate` (booked before: nothing done).
    pub status: String,
    pub entries: usize,
    pub settled: usize,
    pub rejected: usize,
    pub returned: usize,
    pub changes_proposed: usize,
    pub duplicates: usize,
    pub exceptions: usize,
    pub results: Vec<AnswerEntryView>,
}

/// Upload a bank's answer file (pain.002, camt.054, camt.053, NACHA returns and
/// notifications of change; the body is the file) and book it: settled, rejected, returned
/// payouts, proposed corrections of bank details; entries that match nothing are kept.
/// Idempotent by the file's message id.
#[utoipa::path(
    post,
    path = "/v1/admin/bank/files",
    tag = "admin",
    request_body(content = String, content_type = "application/octet-stream", description = "The bank's file, as received"),
    responses(
        (status = 200, body = AnswerImportView),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "unknown_format and the other codes of an unreadable file"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "conflict: another file with this message id was booked"),
        (status = 413, body = Problem, content_type = "application/problem+json", description = "body_too_large"),
        (status = 422, body = Problem, content_type = "application/problem+json", description = "operator_signature_required and other refusals of a proposed correction"),
        (status = 500, body = Problem, content_type = "application/problem+json", description = "invalid_bank_config, bank_file_mismatch"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn post_answer_file(
    State(state): State<AppState>,
    auth: Auth,
    RawBody(body): RawBody,
) -> Result<Json<AnswerImportView>, Problem> {
    let principal = auth.require(&[Scope::Admin])?;
    let config = bank_config(&state);
    let originator = Originator::parse(&config).map_err(BankError::from)?;
    let cx = bank::answers::ImportContext {
        originator: &originator,
        control: &state.control,
        signer: None,
        payouts_per_tx: config.answer_payouts_per_tx,
    };
    let r = match bank::answers::import_answer(&state.ledger, body.into(), &cx, &principal.actor())
        .await
    {
        Ok(r) => r,
        // An unreadable file is the request's fault.
        Err(BankError::Ledger(LedgerError::Rejected(d)))
            if d.code != "conflict" && !is_ledger_code(d.code) =>
        {
            return Err(Problem::bad_request(d.code, d.message));
        }
        Err(e) => return Err(e.into()),
    };
    Ok(Json(AnswerImportView {
        kind: r.kind.to_owned(),
        message_id: r.message_id,
        sha256: r.sha256,
        status: r.status.to_owned(),
        entries: r.entries,
        settled: r.settled,
        rejected: r.rejected,
        returned: r.returned,
        changes_proposed: r.changes_proposed,
        duplicates: r.duplicates,
        exceptions: r.exceptions,
        results: r
            .results
            .into_iter()
            .map(|e| AnswerEntryView {
                entry: e.entry,
                reference: e.reference,
                payout_id: e.payout_id,
                batch_id: e.batch_id,
                outcome: e.outcome,
                code: e.code,
                detail: e.detail,
            })
            .collect(),
    }))
}

/// Refusals of the ledger and of dual control (answered by their own status), as opposed
/// to the codes of a file that cannot be read.
fn is_ledger_code(code: &str) -> bool {
    matches!(
        code,
        "operator_signature_required"
            | "unknown_operator"
            | "invalid_signature"
            | "no_operators"
            | "invalid_bank_config"
            | "bank_file_mismatch"
            | "corrupt_projection"
    )
}

/// One batch, reconciled.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct BatchReconciliationView {
    pub batch_id: String,
    pub rail: String,
    pub currency: String,
    pub payouts: usize,
    pub total_cents: i64,
    pub settled: usize,
    pub settled_cents: i64,
    pub returned: usize,
    pub returned_cents: i64,
    pub rejected: usize,
    pub rejected_cents: i64,
    pub open: usize,
    pub open_cents: i64,
    /// The business day by which the bank should have answered (`YYYY-MM-DD`).
    pub answer_due: String,
    pub overdue: bool,
    pub open_payouts: Vec<String>,
}

/// An entry of the bank's answers that booked nothing.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AnswerExceptionView {
    pub entry_key: String,
    /// `unmatched`, `amount_mismatch`, `unknown_batch`, `state_conflict` or
    /// `change_unrequested`.
    pub problem: String,
    pub reference: String,
    pub batch_id: Option<String>,
    pub amount_cents: i64,
    pub currency: String,
    pub expected_cents: Option<i64>,
    pub detail: String,
    pub kind: String,
    pub message_id: String,
    pub recorded_at_ms: i64,
}

/// The reconciliation of every batch against the bank's answers.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ReconciliationView {
    pub as_of: String,
    pub answer_due_business_days: u32,
    pub batches: Vec<BatchReconciliationView>,
    pub unmatched: Vec<AnswerExceptionView>,
    pub amount_differences: Vec<AnswerExceptionView>,
    /// Notifications of change no operator has requested yet (`change_unrequested`):
    /// import the file again with `settle bank import --operator-key`.
    pub changes_unrequested: Vec<AnswerExceptionView>,
    pub overdue_payouts: usize,
}

fn exception_view(e: crate::store::bank_answers::ExceptionRow) -> AnswerExceptionView {
    AnswerExceptionView {
        entry_key: e.entry_key,
        problem: e.problem,
        reference: e.reference,
        batch_id: e.batch_id,
        amount_cents: e.amount_cents,
        currency: e.currency,
        expected_cents: e.expected_cents,
        detail: e.detail,
        kind: e.kind,
        message_id: e.message_id,
        recorded_at_ms: e.recorded_at_ms,
    }
}

/// Per batch what the bank confirmed and what is still open after
/// `bank.answer_due_business_days`, the entries that matched nothing and the amount
/// differences.
#[utoipa::path(
    get,
    path = "/v1/admin/bank/reconciliation",
    tag = "admin",
    responses(
        (status = 200, body = ReconciliationView),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn reconciliation(
    State(state): State<AppState>,
    auth: Auth,
) -> Result<Json<ReconciliationView>, Problem> {
    auth.require(&[Scope::Admin])?;
    let config = bank_config(&state);
    let r = bank::reconcile::reconcile(&state.ledger, &config).await?;
    Ok(Json(ReconciliationView {
        as_of: r.as_of,
        answer_due_business_days: r.answer_due_business_days,
        batches: r
            .batches
            .into_iter()
            .map(|b| BatchReconciliationView {
                batch_id: b.batch_id,
                rail: b.rail.as_str().to_owned(),
                currency: b.currency,
                payouts: b.payouts,
                total_cents: b.total_cents,
                settled: b.settled,
                settled_cents: b.settled_cents,
                returned: b.returned,
                returned_cents: b.returned_cents,
                rejected: b.rejected,
                rejected_cents: b.rejected_cents,
                open: b.open,
                open_cents: b.open_cents,
                answer_due: b.answer_due,
                overdue: b.overdue,
                open_payouts: b.open_payouts,
            })
            .collect(),
        unmatched: r.unmatched.into_iter().map(exception_view).collect(),
        amount_differences: r
            .amount_differences
            .into_iter()
            .map(exception_view)
            .collect(),
        changes_unrequested: r
            .changes_unrequested
            .into_iter()
            .map(exception_view)
            .collect(),
        overdue_payouts: r.overdue_payouts,
    }))
}
