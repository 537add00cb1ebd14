//! The HTTP API (axum): auth, usage, earnings, payouts, admin, problem+json errors, OpenAPI.
//!
//! Invariant: handlers never write SQL for changes. Writes go through `ledger::Ledger`,
//! reads through `store::read` over the projections; tokens through `auth`.

pub mod admin;
pub mod bank;
pub mod dashboard;
pub mod extract;
pub mod limit;
pub mod load;
pub mod openapi;
pub mod page;
pub mod problem;
pub mod profile;
pub mod reliability;
pub mod server;
pub mod statement;
pub mod stream;
pub mod usage;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use tokio::net::TcpListener;
use tower_http::trace::TraceLayer;
use utoipa::{OpenApi, ToSchema};

use settle_calendar::Calendar;

use crate::config::{BankConfig, HttpConfig, RunConfig};
use crate::ledger::Ledger;
use problem::Problem;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub ledger: Ledger,
    /// `POST /v1/usage`'s group commit over `ledger`.
    pub usage: crate::ledger::group::UsageGroups,
    pub config: Arc<HttpConfig>,
    /// The run calendar and rules, for the projected next payout and run reports.
    pub calendar: Arc<Calendar>,
    pub runs: Arc<RunConfig>,
    /// Dual control (`[control]`): which admin commands wait for a second actor.
    pub control: Arc<crate::config::ControlConfig>,
    /// The bank rail's originator and outbox, for the bank routes (`[bank]` of the served
    /// configuration).
    pub bank: Arc<BankConfig>,
    /// The live streams (`/v1/providers/{id}/stream`) open on this server.
    pub streams: Arc<stream::StreamHub>,
    /// Failed authentications by client address (`limit`), this server's own.
    pub auth_failures: Arc<limit::AuthFailures>,
    /// The anchors statements are proven against (`anchor.file` resolved by `serve`, its
    /// `rpc_url` resolved to the served chain's when empty).
    pub anchor: Arc<crate::config::AnchorConfig>,
}

impl AppState {
    /// The state of a server over `ledger` with the served configuration.
    pub fn new(ledger: Ledger, config: &crate::config::Config) -> AppState {
        AppState {
            usage: crate::ledger::group::UsageGroups::new(ledger.clone()),
            ledger,
            config: Arc::new(config.http.clone()),
            calendar: Arc::new(Calendar::platform_default()),
            runs: Arc::new(config.runs.clone()),
            control: Arc::new(config.control.clone()),
            bank: Arc::new(config.bank.clone()),
            anchor: Arc::new(crate::config::AnchorConfig {
                rpc_url: config.anchor.rpc(&config.solana).to_owned(),
                ..config.anchor.clone()
            }),
            streams: Arc::new(stream::StreamHub::new(&config.http)),
            auth_failures: Arc::new(limit::AuthFailures::default()),
        }
    }
}

/// The API's routes on `state` (without the listener): `settle serve` may merge more.
///
/// Every route has the request timeout (`http.request_timeout_ms`, 503 `request_timeout`);
/// every route but `/healthz` and `/readyz` passes the gate of `http.concurrency_max` and
/// `http.queue_max` (503 `overloaded`), so probes still answer under load.
pub(crate) fn router(state: AppState) -> Router {
    let usage_bytes_max = state.ledger.config.batch_bytes_max;
    let body_bytes_max = state.config.body_bytes_max;
    let request_timeout = Duration::from_millis(state.config.request_timeout_ms.max(1));
    let gate = load::Gate::new(&state.config);
    Router::new()
        .route(
            "/v1/usage",
            post(usage::post_usage).layer(DefaultBodyLimit::max(usage_bytes_max)),
        )
        .route(
            "/v1/gpus/online",
            post(reliability::post_online).layer(DefaultBodyLimit::max(usage_bytes_max)),
        )
        .route("/v1/providers/{id}", get(profile::show))
        .route("/v1/providers/{id}/summary", get(dashboard::summary))
        .route(
            "/v1/providers/{id}/reliability",
            get(dashboard::reliability),
        )
        .route("/v1/providers/{id}/earnings", get(dashboard::earnings))
        .route(
            "/v1/providers/{id}/earnings.csv",
            get(dashboard::earnings_csv),
        )
        .route("/v1/providers/{id}/gpus", get(dashboard::gpus))
        .route("/v1/providers/{id}/stream", get(stream::stream))
        .route("/v1/providers/{id}/payouts", get(dashboard::payouts))
        .route(
            "/v1/providers/{id}/statements/{payout_id}",
            get(statement::payout),
        )
        .route("/v1/providers/{id}/statement", get(statement::period))
        .route(
            "/v1/providers/{id}/payouts.csv",
            get(dashboard::payouts_csv),
        )
        .route("/v1/admin/usage/{event_id}/void", post(admin::void_usage))
        .route("/v1/admin/adjustments", post(admin::post_adjustment))
        .route("/v1/admin/providers/{id}/erase", post(profile::erase))
        .route("/v1/admin/import", post(admin::import))
        .route("/v1/admin/runs/{kind}/{key}", get(admin::run_report))
        .route("/v1/admin/approvals", get(admin::list_approvals))
        .route("/v1/admin/approvals/{id}", get(admin::show_approval))
        .route("/v1/admin/approvals/{id}/approve", post(admin::approve))
        .route("/v1/admin/approvals/{id}/reject", post(admin::reject))
        .merge(bank::routes(state.bank.answer_file_bytes_max))
        .merge(page::routes())
        .route("/openapi.json", get(openapi_json))
        .route_layer(axum::middleware::from_fn_with_state(gate, load::gate))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_bytes_max))
        .layer(axum::middleware::from_fn_with_state(
            request_timeout,
            load::request_timeout,
        ))
        // A bug that panics in a handler answers 500 problem+json (logged), never a dropped
        // connection; nothing was committed by the panicking request.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                axum::response::IntoResponse::into_response(Problem::internal(
                    &"a handler panicked",
                ))
            },
        ))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &axum::extract::Request| {
                // The path only: query strings may carry cursors, not worth logging.
                tracing::info_span!(
                    "http",
                    method = %request.method(),
                    path = %request.uri().path(),
                    token_id = tracing::field::Empty,
                )
            }),
        )
        .with_state(state)
}

async fn not_found() -> Problem {
    Problem::not_found("no such route")
}

async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method",
    )
}

/// `GET /openapi.json`
async fn openapi_json() -> Response {
    Json(openapi::ApiDoc::openapi()).into_response()
}

/// Liveness and readiness.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `unavailable` (readiness only).
    pub status: String,
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "ops", responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// The process can serve: its database answers.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "ops",
    responses((status = 200, body = Health), (status = 503, body = Health))
)]
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Health>) {
    match state.ledger.store.ping().await {
        Ok(_) => (
            StatusCode::OK,
            Json(Health {
                status: "ok".into(),
            }),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(Health {
                    status: "unavailable".into(),
                }),
            )
        }
    }
}

/// The HTTP server, bound and ready to run.
pub struct Application {
    listener: TcpListener,
    addr: SocketAddr,
    router: Router,
    limits: server::ServeLimits,
    streams: Arc<stream::StreamHub>,
    auth_failures: Arc<limit::AuthFailures>,
}

impl Application {
    /// Binds `config.bind` (port 0: any free port) and builds the routes, with the default
    /// platform calendar, run rules and dual control.
    pub async fn build(config: HttpConfig, ledger: Ledger) -> std::io::Result<Application> {
        let whole = crate::config::Config {
            http: config,
            ..crate::config::Config::default()
        };
        Application::build_from(&whole, ledger).await
    }

    /// Binds `config.http.bind` and builds the routes with the served configuration's run
    /// rules (`[runs]`: the projected next payout) and dual control (`[control]`).
    pub async fn build_from(
        config: &crate::config::Config,
        ledger: Ledger,
    ) -> std::io::Result<Application> {
        server::check_config(&config.http)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let listener = TcpListener::bind(&config.http.bind).await?;
        let addr = listener.local_addr()?;
        let limits = server::ServeLimits::from_config(&config.http);
        let state = AppState::new(ledger, config);
        let streams = state.streams.clone();
        let auth_failures = state.auth_failures.clone();
        let router = router(state);
        Ok(Application {
            listener,
            addr,
            router,
            limits,
            streams,
            auth_failures,
        })
    }

    /// The failed authentications of this server's clients, for routes merged into it
    /// or guarded like it (`/metrics`).
    pub(crate) fn auth_failures(&self) -> Arc<limit::AuthFailures> {
        self.auth_failures.clone()
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Adds routes (e.g. `/metrics`) before serving.
    pub(crate) fn merge(mut self, routes: Router) -> Application {
        self.router = self.router.merge(routes);
        self
    }

    /// Serves until `shutdown` completes, then finishes the requests in flight within
    /// `http.shutdown_deadline_ms` and drops the connections still open.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        tracing::info!(addr = %self.addr, "HTTP API listening");
        let streams = self.streams.clone();
        let shutdown = async move {
            shutdown.await;
            // Live streams never finish by themselves: end them with the listener.
            streams.close();
        };
        server::serve(self.listener, self.router, self.limits, shutdown).await
    }
}
