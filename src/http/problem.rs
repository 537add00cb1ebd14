//! Errors as `application/problem+json` (RFC 9457) with a stable machine-readable `code`.
//!
//! Invariant: a 5xx never carries internals (SQL, paths, driver messages); they go to the
//! log with the request, the client gets a generic detail.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::DomainError;
use crate::ledger::LedgerError;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An error response.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "type": "urn:settle:problem:invalid_limit",
    "title": "Bad Request",
    "status": 400,
    "detail": "limit must be 1..=1000",
    "code": "invalid_limit"
}))]
pub struct Problem {
    /// A URI naming the problem type: `urn:settle:problem:{code}`.
    #[serde(rename = "type")]
    pub problem_type: String,
    /// The HTTP status phrase.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong, for a human.
    pub detail: String,
    /// The stable machine-readable code (part of the API contract).
    pub code: String,
    /// Seconds to wait before retrying (sent as `Retry-After`).
    #[serde(skip)]
    pub retry_after_s: Option<u64>,
}

impl Problem {
    pub fn new(status: StatusCode, code: &str, detail: impl Into<String>) -> Problem {
        Problem {
            problem_type: format!("urn:settle:problem:{code}"),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            code: code.to_owned(),
            retry_after_s: None,
        }
    }

    /// 429, with the seconds after which the client may try again.
    pub(crate) fn too_many_requests(
        code: &str,
        detail: impl Into<String>,
        retry_after_s: u64,
    ) -> Problem {
        Problem {
            retry_after_s: Some(retry_after_s),
            ..Problem::new(StatusCode::TOO_MANY_REQUESTS, code, detail)
        }
    }

    pub(crate) fn bad_request(code: &str, detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, code, detail)
    }

    pub fn not_found(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::NOT_FOUND, "not_found", detail)
    }

    pub fn forbidden(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::FORBIDDEN, "forbidden_scope", detail)
    }

    pub(crate) fn unauthorized(code: &str, detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::UNAUTHORIZED, code, detail)
    }

    /// A failure of ours: logged in full, answered without details.
    pub(crate) fn internal(error: &dyn std::fmt::Display) -> Problem {
        tracing::error!(error = %error, "request failed");
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "an internal error occurred; it has been logged",
        )
    }

    /// The database could not be reached in time: worth retrying.
    pub(crate) fn unavailable(error: &dyn std::fmt::Display) -> Problem {
        tracing::warn!(error = %error, "storage unavailable");
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_unavailable",
            "the ledger database is unavailable; retry later",
        )
    }

    /// A rejected command, with a status from its code.
    pub fn rejected(e: &DomainError) -> Problem {
        let status = match e.code {
            "unknown_event" | "unknown_provider" | "unknown_gpu" | "unknown_token"
            | "unknown_payout" | "unknown_run" | "unknown_approval" => StatusCode::NOT_FOUND,
            "conflict" | "payout_in_flight" => StatusCode::CONFLICT,
            "no_master_key" | "key_unwrap_failed" => StatusCode::SERVICE_UNAVAILABLE,
            "operator_signature_required" => StatusCode::PRECONDITION_REQUIRED,
            "invalid_signature" | "unknown_operator" => StatusCode::FORBIDDEN,
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        };
        Problem::new(status, e.code, e.message.clone())
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = self.retry_after_s {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"settle\""),
            );
        }
        response
    }
}

impl From<sqlx::Error> for Problem {
    fn from(e: sqlx::Error) -> Problem {
        match &e {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                Problem::unavailable(&e)
            }
            _ => Problem::internal(&e),
        }
    }
}

impl From<crate::store::StoreError> for Problem {
    fn from(e: crate::store::StoreError) -> Problem {
        LedgerError::Store(e).into()
    }
}

impl From<LedgerError> for Problem {
    fn from(e: LedgerError) -> Problem {
        match &e {
            LedgerError::Rejected(d) => Problem::rejected(d),
            LedgerError::Store(s) if s.is_retryable() => Problem::unavailable(&e),
            LedgerError::Store(_) => Problem::internal(&e),
        }
    }
}

impl From<crate::auth::TokenError> for Problem {
    fn from(e: crate::auth::TokenError) -> Problem {
        match e {
            crate::auth::TokenError::Rejected(d) => Problem::rejected(&d),
            crate::auth::TokenError::Database(d) => d.into(),
        }
    }
}
