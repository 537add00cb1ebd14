//! Extractors that answer in problem+json: the bearer token, the raw body (with its size
//! limit), query strings; the cursor pagination shared by every list; and the guard of a
//! route behind one configured token (`/metrics` on the API listener).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::AppState;
use super::problem::Problem;
use crate::auth::{self, AuthError, Principal, Scope};
use crate::config::{HttpConfig, SecretString};

/// The verified bearer of the request (401 without a valid token).
///
/// A valid token is always accepted. A failure counts against the client address
/// ([`super::limit`]); once the address has failed `http.auth_failures_max` times in the
/// window, its failures answer 429 `too_many_auth_failures` instead of 401.
pub struct Auth(pub Principal);

impl FromRequestParts<AppState> for Auth {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Auth, Problem> {
        let client = super::limit::client_of(&parts.extensions, &parts.headers, &state.config);
        authenticate(parts, state)
            .await
            .map_err(|problem| limit_failure(client, problem, &state.config, &state.auth_failures))
    }
}

/// A failed authentication of `client`: counted, or 429 when the address is blocked.
pub(crate) fn limit_failure(
    client: Option<std::net::IpAddr>,
    problem: Problem,
    config: &HttpConfig,
    failures: &super::limit::AuthFailures,
) -> Problem {
    let Some(ip) = client.filter(|_| problem.status == 401) else {
        return problem;
    };
    if let Some(retry_after_s) = failures.blocked(ip, config) {
        return Problem::too_many_requests(
            "too_many_auth_failures",
            format!(
                "too many failed authentications from this address; retry in {retry_after_s} s \
                 (a valid token is still accepted)"
            ),
            retry_after_s,
        );
    }
    failures.failed(ip, config);
    problem
}

/// A route guarded by one configured token (the metrics token): `Authorization: Bearer
/// <token>`, compared in constant time; failures count like any failed authentication.
#[derive(Clone)]
pub struct StaticToken {
    token_sha256: [u8; 32],
    config: Arc<HttpConfig>,
    failures: Arc<super::limit::AuthFailures>,
}

impl StaticToken {
    /// A guard whose failures count in `failures` (the API's table, so `/metrics` gives a
    /// guesser no budget of its own).
    pub fn new(
        token: &SecretString,
        config: Arc<HttpConfig>,
        failures: Arc<super::limit::AuthFailures>,
    ) -> StaticToken {
        StaticToken {
            token_sha256: Sha256::digest(token.expose().as_bytes()).into(),
            config,
            failures,
        }
    }
}

/// [`StaticToken`] as a middleware (`from_fn_with_state`).
pub(crate) async fn require_static_token(
    State(guard): State<StaticToken>,
    request: Request,
    next: Next,
) -> Response {
    let presented = bearer(request.headers());
    let valid = presented.as_ref().is_ok_and(|token| {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        bool::from(digest.ct_eq(&guard.token_sha256))
    });
    if valid {
        return next.run(request).await;
    }
    let problem = presented
        .err()
        .unwrap_or_else(|| Problem::unauthorized("invalid_token", "the bearer token is not valid"));
    let client = super::limit::client_of(request.extensions(), request.headers(), &guard.config);
    limit_failure(client, problem, &guard.config, &guard.failures).into_response()
}

/// The token of `Authorization: Bearer <token>`.
fn bearer(headers: &axum::http::HeaderMap) -> Result<String, Problem> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(Problem::unauthorized(
            "unauthenticated",
            "an Authorization: Bearer token is required",
        ));
    };
    value
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|t| t.trim().to_owned())
        .ok_or_else(|| {
            Problem::unauthorized(
                "unauthenticated",
                "the Authorization header must read: Bearer <token>",
            )
        })
}

/// The token of the request: `Authorization: Bearer`, or, for a `GET` without that header,
/// the dashboard's sign-in cookie (reads only: a cookie never authorises a change, so a
/// forged cross-site request can change nothing).
fn request_token(parts: &Parts) -> Result<String, Problem> {
    match bearer(&parts.headers) {
        Ok(token) => Ok(token),
        Err(problem) => {
            if parts.method == axum::http::Method::GET
                && !parts.headers.contains_key(header::AUTHORIZATION)
                && let Some(token) = super::page::session_token(&parts.headers)
            {
                return Ok(token);
            }
            Err(problem)
        }
    }
}

async fn authenticate(parts: &mut Parts, state: &AppState) -> Result<Auth, Problem> {
    let token = request_token(parts)?;
    let now_ms = state.ledger.now_ms();
    let principal = auth::verify(&state.ledger.store, &token, now_ms)
        .await
        .map_err(auth_problem)?;
    tracing::Span::current().record("token_id", principal.token_id.as_str());
    Ok(Auth(principal))
}

/// The answer to a token that is not (or no longer) valid.
pub(crate) fn auth_problem(e: AuthError) -> Problem {
    match e {
        AuthError::Malformed | AuthError::Invalid => {
            Problem::unauthorized("invalid_token", "the bearer token is not valid")
        }
        AuthError::Expired => {
            Problem::unauthorized("token_expired", "the bearer token has expired")
        }
        AuthError::Revoked => {
            Problem::unauthorized("token_revoked", "the bearer token has been revoked")
        }
        AuthError::PendingApproval => Problem::unauthorized(
            "token_pending_approval",
            "the bearer token waits for a second operator's approval (`settle approvals approve`)",
        ),
        AuthError::Database(e) => e.into(),
    }
}

impl Auth {
    /// 403 unless the token has one of `scopes`.
    pub fn require(&self, scopes: &[Scope]) -> Result<&Principal, Problem> {
        if scopes.contains(&self.0.scope) {
            Ok(&self.0)
        } else {
            let names: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
            Err(Problem::forbidden(format!(
                "this endpoint needs a token of scope {}; this token has scope {}",
                names.join(" or "),
                self.0.scope
            )))
        }
    }

    /// Authorises reading `provider_id`'s data: admin, or the provider's own token. Another
    /// provider's id answers 404 exactly like an unknown one, so ids do not leak.
    pub(crate) async fn read_provider(
        &self,
        state: &AppState,
        provider_id: &str,
    ) -> Result<(), Problem> {
        self.require(&[Scope::Admin, Scope::Provider])?;
        let not_found = || Problem::not_found(format!("no provider {provider_id}"));
        if !self.0.may_read_provider(provider_id) {
            return Err(not_found());
        }
        if !crate::store::read::provider_exists(&state.ledger.store, provider_id).await? {
            return Err(not_found());
        }
        Ok(())
    }
}

/// The request body as bytes, within the route's `DefaultBodyLimit` (413 beyond it).
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<RawBody, Problem> {
        match Bytes::from_request(req, state).await {
            Ok(bytes) => Ok(RawBody(bytes)),
            Err(rejection) => {
                let status = rejection.status();
                let code = if status == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    "body_too_large"
                } else {
                    "unreadable_body"
                };
                Err(Problem::new(status, code, rejection.body_text()))
            }
        }
    }
}

/// A query string parsed into `T` (400 problem when it does not fit).
pub struct Q<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Q<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Q<T>, Problem> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| Q(v))
            .map_err(|e| Problem::bad_request("invalid_query", e.body_text()))
    }
}

/// A page request: `limit` (1..=page_size_max) and an opaque `cursor`.
pub struct Page {
    pub limit: usize,
    /// The decoded position after which the page starts.
    pub after: Option<String>,
}

impl Page {
    /// Checks `limit` and decodes `cursor`, which must carry `kind` (a cursor of one list is
    /// no good for another).
    pub fn parse(
        state: &AppState,
        limit: Option<usize>,
        cursor: Option<&str>,
        kind: &str,
    ) -> Result<Page, Problem> {
        let max = state.config.page_size_max;
        let limit = limit.unwrap_or(state.config.page_size_default.min(max));
        if limit == 0 || limit > max {
            return Err(Problem::bad_request(
                "invalid_limit",
                format!("limit must be 1..={max}"),
            ));
        }
        let after = match cursor {
            None | Some("") => None,
            Some(c) => Some(decode_cursor(c, kind).ok_or_else(|| {
                Problem::bad_request("invalid_cursor", "cursor is not one this list issued")
            })?),
        };
        Ok(Page { limit, after })
    }
}

/// An opaque cursor: hex of `{kind}|{position}`.
pub(crate) fn encode_cursor(kind: &str, position: &str) -> String {
    hex::encode(format!("{kind}|{position}"))
}

fn decode_cursor(cursor: &str, kind: &str) -> Option<String> {
    let bytes = hex::decode(cursor).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (k, position) = text.split_once('|')?;
    (k == kind).then(|| position.to_owned())
}

/// Takes one page of `items` sorted by `key`: those after `page.after`, at most
/// `page.limit`, and the cursor of the next page when more remain.
pub(crate) fn page_of<T>(
    items: Vec<T>,
    page: &Page,
    kind: &str,
    key: impl Fn(&T) -> &str,
) -> (Vec<T>, Option<String>) {
    let mut rest: Vec<T> = match &page.after {
        Some(after) => items
            .into_iter()
            .filter(|i| key(i) > after.as_str())
            .collect(),
        None => items,
    };
    let next = if rest.len() > page.limit {
        rest.truncate(page.limit);
        rest.last().map(|i| encode_cursor(kind, key(i)))
    } else {
        None
    };
    (rest, next)
}
