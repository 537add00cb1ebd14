//! A provider's statements over the API (SPEC §13): per payout and per booking window, the
//! JSON that `settle statement verify` checks offline. The dashboard serves the same as a
//! page (`/dashboard/statements/…`, src/http/page/).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::AppState;
use super::extract::{Auth, Q};
use super::problem::Problem;
use crate::statement::check::Statement;
use crate::statement::{StatementError, Subject};

impl From<StatementError> for Problem {
    fn from(e: StatementError) -> Problem {
        match e {
            StatementError::NotFound(_) => {
                Problem::new(StatusCode::NOT_FOUND, e.code(), e.to_string())
            }
            StatementError::NotAnchored { .. } => {
                Problem::new(StatusCode::CONFLICT, e.code(), e.to_string())
            }
            StatementError::Store(s) => s.into(),
            other => Problem::internal(&other),
        }
    }
}

/// The statement of `provider_id` for `subject`, proven against the served anchor log
/// (`anchor.file`; none: `statement_not_anchored`).
pub(crate) async fn statement_of(
    state: &AppState,
    provider_id: &str,
    subject: &Subject,
) -> Result<Statement, Problem> {
    if state.anchor.file.is_empty() {
        return Err(StatementError::NotAnchored {
            stream: crate::domain::event::provider_stream(provider_id),
            seq: 0,
        }
        .into());
    }
    Ok(crate::statement::build(
        &state.ledger.store,
        std::path::Path::new(&state.anchor.file),
        provider_id,
        subject,
    )
    .await?)
}

/// A payout's statement: the provider's events up to its payout, their totals, the proof
/// that ties them to the published anchor and how the payment committed to it. The shape
/// is in the README ("Statements a provider can check").
#[utoipa::path(
    get,
    path = "/v1/providers/{id}/statements/{payout_id}",
    tag = "dashboard",
    params(
        ("id" = String, Path, description = "Provider id"),
        ("payout_id" = String, Path, description = "One of its payouts"),
    ),
    responses(
        (status = 200, body = Object, description = "The statement (settle-statement/v1)"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "statement_not_found: no such payout of this provider"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "statement_not_anchored: its events are not anchored yet (the next anchor is at most anchor.interval_s away)"),
    ),
    security(("bearer" = []))
)]
pub async fn payout(
    State(state): State<AppState>,
    auth: Auth,
    Path((id, payout_id)): Path<(String, String)>,
) -> Result<Json<Statement>, Problem> {
    auth.read_provider(&state, &id).await?;
    Ok(Json(
        statement_of(&state, &id, &Subject::Payout(payout_id)).await?,
    ))
}

/// The window of a period statement.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct PeriodQuery {
    /// RFC 3339 instant or `YYYY-MM-DD` (inclusive); required.
    pub from: Option<String>,
    /// RFC 3339 instant or `YYYY-MM-DD` (exclusive); required.
    pub to: Option<String>,
}

impl PeriodQuery {
    /// The window as a subject.
    pub fn subject(&self) -> Result<Subject, Problem> {
        let parse = |text: &str| {
            crate::domain::time::parse_instant_or_date_ms(text)
                .map_err(|e| Problem::bad_request("invalid_time", format!("{text}: {e}")))
        };
        let (Some(from), Some(to)) = (&self.from, &self.to) else {
            return Err(Problem::bad_request(
                "invalid_range",
                "a period statement needs `from` and `to`",
            ));
        };
        let (from_ms, to_ms) = (parse(from)?, parse(to)?);
        if from_ms >= to_ms {
            return Err(Problem::bad_request(
                "invalid_range",
                "`from` must be before `to`",
            ));
        }
        Ok(Subject::Period { from_ms, to_ms })
    }
}

/// A period's statement: the provider's events booked in `[from, to)`, their totals and
/// the proof that ties them to the published anchor.
#[utoipa::path(
    get,
    path = "/v1/providers/{id}/statement",
    tag = "dashboard",
    params(("id" = String, Path, description = "Provider id"), PeriodQuery),
    responses(
        (status = 200, body = Object, description = "The statement (settle-statement/v1)"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "statement_not_found: nothing booked in the window"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "statement_not_anchored"),
    ),
    security(("bearer" = []))
)]
pub async fn period(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    Q(q): Q<PeriodQuery>,
) -> Result<Json<Statement>, Problem> {
    auth.read_provider(&state, &id).await?;
    let subject = q.subject()?;
    Ok(Json(statement_of(&state, &id, &subject).await?))
}
