//! The provider dashboard as a web page (`/dashboard`), served from the binary: HTML
//! rendered here in the provider's language, charts as server-side SVG, one small script
//! that follows the live stream (`/v1/providers/{id}/stream`) and swaps in the fresh panel.
//!
//! Sign-in: a provider token, posted once, kept in the `settle_session` cookie (HttpOnly,
//! SameSite=Strict, `Secure` per `http.cookie_secure`); the token is never in a page or an
//! address, and it is verified on every request (revoking it signs the browser out). The
//! cookie authorises reads only (`GET`): every change still needs `Authorization: Bearer`.

pub mod chart;
pub mod i18n;
pub mod reliability;
pub mod render;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use super::AppState;
use super::extract::Q;
use super::problem::Problem;
use crate::auth::{self, AuthError, Scope};
use crate::store::read::{self, EarningsBy, PayoutFilter};
use i18n::Lang;

/// The sign-in cookie.
pub const SESSION_COOKIE: &str = "settle_session";
/// The language cookie (set by the language switch).
pub const LANG_COOKIE: &str = "settle_lang";
/// GPUs the page lists (the CSV export has all).
pub const PAGE_GPUS_MAX: i64 = 200;
/// Payouts per list on the page (the CSV export has all).
pub const PAGE_PAYOUTS_MAX: i64 = 50;
/// Periods of the earnings history's table, the last ones of the range (a year of days;
/// the CSV export has all). The chart draws the last `chart::BARS_MAX` of them.
pub const PAGE_PERIODS_MAX: usize = 366;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/dashboard", get(page))
        .route("/dashboard/panel", get(panel))
        .route("/dashboard/login", post(login))
        .route("/dashboard/logout", post(logout))
        .route("/dashboard/assets/{name}", get(asset))
        .route("/dashboard/statements/{payout_id}", get(payout_statement))
        .route(
            "/dashboard/statements/{payout_id}/statement.json",
            get(payout_statement_json),
        )
}

/// The signed-in provider's statement of `subject` (401 when not signed in).
async fn own_statement(
    state: &AppState,
    headers: &HeaderMap,
    subject: &crate::statement::Subject,
) -> Result<crate::statement::check::Statement, Problem> {
    match signed_in(state, headers).await {
        Ok(Some(provider_id)) => super::statement::statement_of(state, &provider_id, subject).await,
        Ok(None) | Err(_) => Err(Problem::unauthorized(
            "unauthenticated",
            "sign in to the dashboard",
        )),
    }
}

/// `GET /dashboard/statements/{payout_id}`: the statement of one of the signed-in
/// provider's payouts as a page, with its JSON to download and the command that checks it.
async fn payout_statement(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(payout_id): Path<String>,
) -> Response {
    let json_href = format!("/dashboard/statements/{payout_id}/statement.json");
    let subject = crate::statement::Subject::Payout(payout_id);
    match own_statement(&state, &headers, &subject).await {
        Ok(statement) => {
            let rpc = &state.anchor.rpc_url;
            html(
                StatusCode::OK,
                crate::report::statement::page(&statement, &json_href, rpc),
            )
        }
        Err(problem) => problem.into_response(),
    }
}

/// `GET /dashboard/statements/{payout_id}/statement.json`: the same statement's JSON.
async fn payout_statement_json(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(payout_id): Path<String>,
) -> Response {
    let subject = crate::statement::Subject::Payout(payout_id);
    match own_statement(&state, &headers, &subject).await {
        Ok(statement) => {
            let mut response = axum::Json(statement).into_response();
            response.headers_mut().insert(
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment; filename=\"statement.json\""),
            );
            response
        }
        Err(problem) => problem.into_response(),
    }
}

/// The query of the page and its panel: the range and grouping of the history, and a
/// language choice.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PageQuery {
    /// `YYYY-MM-DD`, inclusive; default: the 1st of the current month.
    pub from: Option<String>,
    /// `YYYY-MM-DD`, exclusive; default: the 1st of the month after `from`.
    pub to: Option<String>,
    /// `day` (default), `week` or `month`.
    pub by: Option<String>,
    /// `en`, `de` or `zh-CN`: switches the language (and remembers it in a cookie).
    pub lang: Option<String>,
}

/// The token of the sign-in cookie, if the request carries one.
pub(crate) fn session_token(headers: &HeaderMap) -> Option<String> {
    cookie(headers, SESSION_COOKIE).filter(|t| !t.is_empty())
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().to_owned())
}

/// The page's language: `?lang=`, else the cookie, else `Accept-Language`.
fn language(headers: &HeaderMap, q: &PageQuery) -> Lang {
    q.lang
        .as_deref()
        .and_then(Lang::parse)
        .or_else(|| {
            cookie(headers, LANG_COOKIE)
                .as_deref()
                .and_then(Lang::parse)
        })
        .unwrap_or_else(|| {
            Lang::negotiate(
                headers
                    .get(header::ACCEPT_LANGUAGE)
                    .and_then(|v| v.to_str().ok()),
            )
        })
}

/// Who is signed in: the provider of a valid provider token in the cookie. `Err` carries
/// the reason to show on the sign-in form (a token that stopped being valid).
async fn signed_in(state: &AppState, headers: &HeaderMap) -> Result<Option<String>, &'static str> {
    let Some(token) = session_token(headers) else {
        return Ok(None);
    };
    match auth::verify(&state.ledger.store, &token, state.ledger.now_ms()).await {
        Ok(p) if p.scope == Scope::Provider => Ok(p.provider_id),
        Ok(_) | Err(_) => Err("invalid_token"),
    }
}

fn cookie_header(state: &AppState, name: &str, value: &str, max_age_s: u64) -> HeaderValue {
    let secure = if state.config.cookie_is_secure() {
        "; Secure"
    } else {
        ""
    };
    let http_only = if name == SESSION_COOKIE {
        "; HttpOnly"
    } else {
        ""
    };
    HeaderValue::from_str(&format!(
        "{name}={value}; Path=/; Max-Age={max_age_s}; SameSite=Strict{http_only}{secure}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// An HTML answer that no cache keeps and no other site frames.
fn html(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
             frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

fn with_lang_cookie(
    state: &AppState,
    mut response: Response,
    q: &PageQuery,
    lang: Lang,
) -> Response {
    if q.lang.as_deref().and_then(Lang::parse).is_some() {
        response.headers_mut().append(
            header::SET_COOKIE,
            cookie_header(state, LANG_COOKIE, lang.tag(), 365 * 24 * 3600),
        );
    }
    response
}

/// `GET /dashboard`: the dashboard of the signed-in provider, or the sign-in form.
async fn page(State(state): State<AppState>, headers: HeaderMap, Q(q): Q<PageQuery>) -> Response {
    let lang = language(&headers, &q);
    let response = match signed_in(&state, &headers).await {
        Ok(Some(provider_id)) => match panel_view(&state, &provider_id, &q, lang).await {
            Ok(view) => html(StatusCode::OK, render::page(&view, &q)),
            Err(problem) => problem.into_response(),
        },
        Ok(None) => html(StatusCode::OK, render::sign_in(lang, None)),
        Err(reason) => {
            let mut r = html(
                StatusCode::OK,
                render::sign_in(lang, Some(lang.t(reason).to_owned())),
            );
            r.headers_mut().append(
                header::SET_COOKIE,
                cookie_header(&state, SESSION_COOKIE, "", 0),
            );
            r
        }
    };
    with_lang_cookie(&state, response, &q, lang)
}

/// `GET /dashboard/panel`: the live part of the page (what the script swaps in on each
/// update of the stream); 401 when not signed in.
async fn panel(State(state): State<AppState>, headers: HeaderMap, Q(q): Q<PageQuery>) -> Response {
    let lang = language(&headers, &q);
    match signed_in(&state, &headers).await {
        Ok(Some(provider_id)) => match panel_view(&state, &provider_id, &q, lang).await {
            Ok(view) => html(StatusCode::OK, render::panel(&view)),
            Err(problem) => problem.into_response(),
        },
        Ok(None) | Err(_) => {
            Problem::unauthorized("unauthenticated", "sign in to the dashboard").into_response()
        }
    }
}

/// Everything the panel shows.
pub struct PanelView {
    pub lang: Lang,
    pub provider_id: String,
    pub figures: super::dashboard::Figures,
    /// The history range, grouping and their report; `Err` holds why the range is invalid.
    pub history: Result<History, String>,
    pub gpus: Vec<read::GpuEarnings>,
    pub pending: Vec<read::PayoutRow>,
    pub past: Vec<read::PayoutRow>,
    pub explorer_cluster: String,
    /// The reliability card's figures (SPEC §12).
    pub reliability: crate::ledger::reliability::ProviderReliability,
}

pub struct History {
    pub by: EarningsBy,
    pub periods: read::EarningsReport,
    pub by_gpu: read::EarningsReport,
    pub by_model: read::EarningsReport,
}

async fn history(
    state: &AppState,
    provider_id: &str,
    q: &PageQuery,
) -> Result<Result<History, String>, Problem> {
    let by = match q.by.as_deref().unwrap_or("day") {
        "day" => EarningsBy::Day,
        "week" => EarningsBy::Week,
        "month" => EarningsBy::Month,
        other => return Ok(Err(format!("by must be day, week or month, not {other:?}"))),
    };
    let nonempty = |s: &Option<String>| {
        s.as_deref()
            .filter(|t| !t.trim().is_empty())
            .map(str::to_owned)
    };
    let (from, to) = (nonempty(&q.from), nonempty(&q.to));
    let (from_ms, to_ms) =
        match crate::report::parse_range(from.as_deref(), to.as_deref(), state.ledger.now_ms()) {
            Ok(range) => range,
            Err(e) => return Ok(Err(e.message)),
        };
    let store = &state.ledger.store;
    let (periods, by_gpu, by_model) = tokio::try_join!(
        read::earnings(store, provider_id, from_ms, to_ms, by),
        read::earnings(store, provider_id, from_ms, to_ms, EarningsBy::Gpu),
        read::earnings(store, provider_id, from_ms, to_ms, EarningsBy::Model),
    )?;
    Ok(Ok(History {
        by,
        periods,
        by_gpu,
        by_model,
    }))
}

async fn panel_view(
    state: &AppState,
    provider_id: &str,
    q: &PageQuery,
    lang: Lang,
) -> Result<PanelView, Problem> {
    let store = &state.ledger.store;
    let now_ms = state.ledger.now_ms();
    let (figures, history, gpus, pending, past, reliability) = tokio::try_join!(
        super::dashboard::provider_figures(state, provider_id),
        history(state, provider_id, q),
        async {
            Ok::<_, Problem>(
                read::provider_gpus(store, provider_id, now_ms, None, PAGE_GPUS_MAX + 1).await?,
            )
        },
        async {
            Ok::<_, Problem>(
                read::payouts(
                    store,
                    Some(provider_id),
                    PayoutFilter::Pending,
                    None,
                    PAGE_PAYOUTS_MAX,
                )
                .await?,
            )
        },
        async {
            Ok::<_, Problem>(
                read::payouts(
                    store,
                    Some(provider_id),
                    PayoutFilter::History,
                    None,
                    PAGE_PAYOUTS_MAX,
                )
                .await?,
            )
        },
        async { Ok::<_, Problem>(state.ledger.provider_reliability(provider_id).await?) },
    )?;
    Ok(PanelView {
        lang,
        provider_id: provider_id.to_owned(),
        figures,
        history,
        gpus,
        pending,
        past,
        explorer_cluster: state.config.explorer_cluster.clone(),
        reliability,
    })
}

/// The client address of the request (`None` when served without connection info).
pub struct Client(Option<std::net::IpAddr>);

impl axum::extract::FromRequestParts<AppState> for Client {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Client, Self::Rejection> {
        Ok(Client(super::limit::client_of(
            &parts.extensions,
            &parts.headers,
            &state.config,
        )))
    }
}

/// The sign-in form's fields.
#[derive(Deserialize)]
pub struct SignIn {
    token: String,
    #[serde(default)]
    lang: Option<String>,
}

/// A form post from another site is refused: its `Origin` (sent by browsers with every
/// POST) must be this server's.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    origin
        .split_once("://")
        .is_some_and(|(_, authority)| authority == host)
}

fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    response.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(location).unwrap_or_else(|_| HeaderValue::from_static("/dashboard")),
    );
    response
}

/// `POST /dashboard/login` (form: `token`): a provider token signs in (303 to the page);
/// anything else shows the form again with the reason. Failures count against the client
/// address like any failed authentication.
async fn login(
    State(state): State<AppState>,
    Client(client): Client,
    headers: HeaderMap,
    form: Result<axum::Form<SignIn>, axum::extract::rejection::FormRejection>,
) -> Response {
    let q = PageQuery::default();
    let lang_of = |form_lang: Option<&str>| {
        form_lang
            .and_then(Lang::parse)
            .unwrap_or_else(|| language(&headers, &q))
    };
    if !same_origin(&headers) {
        return Problem::forbidden("a sign-in must come from this server's own page")
            .into_response();
    }
    let Ok(axum::Form(form)) = form else {
        return html(
            StatusCode::BAD_REQUEST,
            render::sign_in(
                lang_of(None),
                Some(lang_of(None).t("invalid_token").to_owned()),
            ),
        );
    };
    let lang = lang_of(form.lang.as_deref());
    if let Some(retry_after_s) =
        client.and_then(|ip| state.auth_failures.blocked(ip, &state.config))
    {
        let message = lang.tf(
            "too_many_attempts",
            &[("seconds", &retry_after_s.to_string())],
        );
        return html(
            StatusCode::TOO_MANY_REQUESTS,
            render::sign_in(lang, Some(message)),
        );
    }
    let token = form.token.trim();
    match auth::verify(&state.ledger.store, token, state.ledger.now_ms()).await {
        Ok(p) if p.scope == Scope::Provider && p.provider_id.is_some() => {
            tracing::info!(token_id = %p.token_id, "dashboard sign-in");
            let mut response = see_other("/dashboard");
            response.headers_mut().append(
                header::SET_COOKIE,
                cookie_header(
                    &state,
                    SESSION_COOKIE,
                    token,
                    state.config.session_max_age_s,
                ),
            );
            response
        }
        Ok(p) => {
            let message = lang.tf("not_provider_token", &[("scope", p.scope.as_str())]);
            html(StatusCode::FORBIDDEN, render::sign_in(lang, Some(message)))
        }
        Err(AuthError::Database(e)) => Problem::from(e).into_response(),
        Err(_) => {
            if let Some(ip) = client {
                state.auth_failures.failed(ip, &state.config);
            }
            html(
                StatusCode::UNAUTHORIZED,
                render::sign_in(lang, Some(lang.t("invalid_token").to_owned())),
            )
        }
    }
}

/// `POST /dashboard/logout`: forgets the cookie (303 to the sign-in form).
async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !same_origin(&headers) {
        return Problem::forbidden("a sign-out must come from this server's own page")
            .into_response();
    }
    let mut response = see_other("/dashboard");
    response.headers_mut().append(
        header::SET_COOKIE,
        cookie_header(&state, SESSION_COOKIE, "", 0),
    );
    response
}

/// The page's own files, built into the binary.
const ASSETS: [(&str, &str, &str); 2] = [
    (
        "dashboard.css",
        "text/css; charset=utf-8",
        include_str!("assets/dashboard.css"),
    ),
    (
        "dashboard.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/dashboard.js"),
    ),
];

/// `GET /dashboard/assets/{name}`
async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CACHE_CONTROL, "public, max-age=300"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            *body,
        )
            .into_response(),
        None => Problem::not_found("no such asset").into_response(),
    }
}
