//! `settle serve`: the HTTP API, the payout-run scheduler and the rail workers in one
//! process, with `/metrics` on its own listener (`http.metrics_bind`, loopback by default) or
//! behind `http.metrics_token`, and a graceful shutdown on SIGTERM or Ctrl-C: requests in
//! flight get `http.shutdown_deadline_ms` to finish (then their connections are dropped and
//! their uncommitted work rolled back), workers stop between transactions, nothing
//! acknowledged is lost.

use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{BankConfig, Config, HttpConfig};
use crate::http::Application;
use crate::http::server::{ServeLimits, serve as serve_http};
use crate::jobs::scheduler::Scheduler;
use crate::ledger::Ledger;

/// Resolves on SIGTERM or Ctrl-C.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

async fn metrics(State((ledger, bank)): State<(Ledger, BankConfig)>) -> impl IntoResponse {
    let mut text = crate::metrics::global().render();
    match crate::store::read::ledger_figures(&ledger.store).await {
        Ok(figures) => text.push_str(&crate::metrics::ledger_gauges(&figures, ledger.now_ms())),
        Err(e) => tracing::warn!(error = %e, "metrics: cannot read the projections"),
    }
    match crate::rails::bank::reconcile::reconcile(&ledger, &bank).await {
        Ok(r) => {
            let open = r.batches.iter().map(|b| b.open as i64).sum();
            let mut unanswered: std::collections::BTreeMap<String, i64> = Default::default();
            for e in r.exceptions() {
                *unanswered.entry(e.problem.clone()).or_default() += 1;
            }
            let unanswered: Vec<(String, i64)> = unanswered.into_iter().collect();
            text.push_str(&crate::metrics::bank_gauges(
                open,
                r.overdue_payouts as i64,
                &unanswered,
            ));
        }
        Err(e) => tracing::warn!(error = %e, "metrics: cannot reconcile the bank's answers"),
    }
    text.push_str(&crate::metrics::projection_lag(
        ledger.store.projection_lag(),
    ));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// Shortest `http.metrics_token`.
pub const METRICS_TOKEN_LEN_MIN: usize = 32;

/// Where `/metrics` is served.
enum MetricsPlace {
    /// Its own listener.
    Listener(tokio::net::TcpListener),
    /// The API listener, behind the token.
    Api,
    /// Nowhere (no listener, no token).
    Nowhere,
}

/// The `/metrics` routes (behind `http.metrics_token` when one is set) and where they go.
async fn metrics_routes(
    ledger: &Ledger,
    bank: &BankConfig,
    http: &HttpConfig,
    failures: std::sync::Arc<crate::http::limit::AuthFailures>,
) -> anyhow::Result<(Router, MetricsPlace)> {
    let token = &http.metrics_token;
    if !token.is_empty() && token.expose().len() < METRICS_TOKEN_LEN_MIN {
        anyhow::bail!("http.metrics_token must be at least {METRICS_TOKEN_LEN_MIN} characters");
    }
    let mut routes = Router::new()
        .route("/metrics", get(metrics))
        .with_state((ledger.clone(), bank.clone()));
    if !token.is_empty() {
        let guard = crate::http::extract::StaticToken::new(
            token,
            std::sync::Arc::new(http.clone()),
            failures,
        );
        routes = routes.layer(axum::middleware::from_fn_with_state(
            guard,
            crate::http::extract::require_static_token,
        ));
    }
    let place = if !http.metrics_bind.is_empty() {
        let listener = tokio::net::TcpListener::bind(&http.metrics_bind)
            .await
            .with_context(|| format!("binding http.metrics_bind {}", http.metrics_bind))?;
        MetricsPlace::Listener(listener)
    } else if !token.is_empty() {
        MetricsPlace::Api
    } else {
        MetricsPlace::Nowhere
    };
    Ok((routes, place))
}

/// Runs `pass` now and then every `interval` until `stop` resolves; a pass in progress
/// finishes first (each of its steps is its own transaction, so stopping between passes
/// loses nothing).
pub(super) async fn every<F, Fut>(
    interval: Duration,
    stop: impl std::future::Future<Output = ()>,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    tokio::pin!(stop);
    loop {
        pass().await;
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// One pass of the projector: folds what this process booked; on a sweep, every stream
/// that is behind (events another process booked).
pub(super) async fn projector_pass(ledger: &Ledger, sweep: bool) {
    let folded = if sweep {
        ledger.store.catch_up_all().await
    } else {
        ledger.store.fold_dirty().await
    };
    match folded {
        Ok(events) => {
            crate::metrics::global().count(
                "settle_projector_folded_events_total",
                "Events whose aggregates the background projector folded.",
                &[],
                events as i64,
            );
        }
        Err(e) => tracing::error!(error = %e, "projector pass failed; retrying next pass"),
    }
}

/// One pass of the Solana outbox worker, with the treasury balances as metrics.
async fn solana_pass(rail: &crate::rails::solana::SolanaRail, ledger: &Ledger) {
    match rail.pay_pending(ledger).await {
        Ok(r) => {
            let m = crate::metrics::global();
            m.count(
                "settle_solana_payouts_total",
                "Solana payouts resolved by the worker, by outcome.",
                &[("outcome", "settled")],
                r.settled as i64,
            );
            m.count(
                "settle_solana_payouts_total",
                "Solana payouts resolved by the worker, by outcome.",
                &[("outcome", "failed")],
                r.failed as i64,
            );
            if r.outbox > 0 {
                tracing::info!(
                    outbox = r.outbox,
                    settled = r.settled,
                    failed = r.failed,
                    pending = r.pending,
                    "solana pass"
                );
            }
        }
        Err(e) => tracing::error!(error = %e, "solana pass failed; retrying next pass"),
    }
    if let Ok((usdc, lamports)) = rail.treasury_balances().await {
        let m = crate::metrics::global();
        m.gauge(
            "settle_treasury_usdc_micro",
            "Treasury USDC balance, micro-USDC.",
            &[],
            usdc as i64,
        );
        m.gauge(
            "settle_treasury_sol_lamports",
            "Treasury SOL balance, lamports.",
            &[],
            lamports as i64,
        );
    }
}

/// Starts the watch of the bank's inbox (`bank.inbox_dir`): every
/// `bank.inbox_interval_ms`, each new answer file is imported and moved
/// (`rails::bank::inbox`). Proposals of notifications of change are signed with the
/// process's `--operator-key` when given.
async fn spawn_inbox(
    ledger: &Ledger,
    config: &Config,
    stop_rx: &watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<()>> {
    let signer = super::cli_signer(ledger).await?.map(std::sync::Arc::new);
    let originator = std::sync::Arc::new(
        crate::rails::bank::Originator::parse(&config.bank)
            .map_err(|e| anyhow::anyhow!("{}: {}", e.code, e.message))?,
    );
    let (ledger, bank, control) = (ledger.clone(), config.bank.clone(), config.control.clone());
    let interval = Duration::from_millis(config.bank.inbox_interval_ms.max(1));
    Ok(tokio::spawn(every(
        interval,
        stopped(stop_rx.clone()),
        move || {
            let (ledger, bank, control) = (ledger.clone(), bank.clone(), control.clone());
            let (signer, originator) = (signer.clone(), originator.clone());
            async move {
                let cx = crate::rails::bank::answers::ImportContext {
                    originator: &originator,
                    control: &control,
                    signer: signer.as_deref().map(|s| s as &dyn crate::control::Sign),
                    payouts_per_tx: bank.answer_payouts_per_tx,
                };
                let actor = crate::ledger::Actor::system("bank-inbox");
                match crate::rails::bank::inbox::pass(&ledger, &bank, &cx, &actor).await {
                    Ok(done) if !done.is_empty() => {
                        tracing::info!(files = done.len(), "bank answers imported from the inbox");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::error!(error = %e, "bank inbox pass failed; retrying next pass");
                    }
                }
            }
        },
    )))
}

/// One pass of the bank worker: writes the files of the created bank payouts.
async fn bank_pass(ledger: &Ledger, bank: &crate::config::BankConfig) {
    match crate::rails::bank::generate_batches(ledger, bank, &crate::ledger::Actor::system("bank"))
        .await
    {
        Ok(r) => tracing::info!(
            batches = r.batches.len(),
            failed = r.failed.len(),
            "bank batches generated"
        ),
        Err(e) => {
            tracing::error!(error = %e, "bank batch generation failed; retrying next pass")
        }
    }
}

/// Anchors the chain heads every `anchor.interval_s` into `anchor.file` (the CLI resolves
/// its default before serving), signed by the anchor key (refused at start when others may
/// read it), and publishes the newest root on Solana once `anchor.publish_interval_s` has
/// passed since the last publication (a failure is retried at the next pass).
fn spawn_anchoring(
    ledger: &Ledger,
    config: &Config,
    stop_rx: &watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<()>> {
    let path = std::path::PathBuf::from(&config.anchor.file);
    let key = std::sync::Arc::new(
        crate::anchor::key::AnchorKey::load_or_create(&config.anchor.key_path(&path))
            .context("the anchor key")?,
    );
    tracing::info!(file = %path.display(), key = %key.public(), "settle serve: anchoring the chain heads");
    let interval = Duration::from_secs(config.anchor.interval_s.max(1));
    let publishing = Publishing {
        every_ms: i64::try_from(config.anchor.publish_interval_s.saturating_mul(1000))
            .unwrap_or(i64::MAX),
        rpc: config.anchor.rpc(&config.solana).to_owned(),
        wait: Duration::from_millis(config.anchor.publish_wait_ms),
    };
    let ledger = ledger.clone();
    Ok(tokio::spawn(every(
        interval,
        stopped(stop_rx.clone()),
        move || {
            let (ledger, path, key, publishing) = (
                ledger.clone(),
                path.clone(),
                key.clone(),
                publishing.clone(),
            );
            async move { anchor_pass(&ledger, &path, &key, &publishing).await }
        },
    )))
}

/// When and where `serve` publishes anchors.
#[derive(Clone)]
struct Publishing {
    /// 0: never.
    every_ms: i64,
    rpc: String,
    wait: Duration,
}

/// Anchors the heads that moved, then publishes when due; a failure is loud (and counted)
/// and retried next pass.
async fn anchor_pass(
    ledger: &Ledger,
    path: &std::path::Path,
    key: &crate::anchor::key::AnchorKey,
    publishing: &Publishing,
) {
    let result = async {
        let report = crate::anchor::write(&ledger.store, path, key, ledger.now_ms()).await?;
        if report.written {
            tracing::debug!(
                n = report.n,
                anchored = report.anchored,
                streams = report.streams,
                "chain heads anchored"
            );
        }
        let last = crate::store::anchors::publications(&ledger.store)
            .await?
            .iter()
            .map(|p| p.at_ms)
            .max();
        let due = publishing.every_ms > 0
            && last.is_none_or(|at| ledger.now_ms() - at >= publishing.every_ms);
        if due {
            let log = crate::anchor::read(path)?;
            let done = crate::anchor::publish::publish(
                &ledger.store,
                &log,
                key,
                &publishing.rpc,
                publishing.wait,
                ledger.now_ms(),
            )
            .await?;
            tracing::info!(n = done.n, root = %done.root, signature = %done.signature, "anchor published on Solana");
        }
        Ok::<(), crate::anchor::AnchorError>(())
    };
    if let Err(e) = result.await {
        crate::metrics::global().count(
            "settle_anchor_failures_total",
            "Anchor passes that failed (the anchor log unwritable, the ledger diverged from \
             it, or the publication on Solana failed).",
            &[("code", e.code())],
            1,
        );
        tracing::error!(code = e.code(), error = %e, "anchoring the chain heads failed");
    }
}

/// Runs the service until a shutdown signal.
///
/// Refuses to start (`example_originator`) while `[bank]` holds the built-in example
/// originator, unless `bank.allow_example_originator`: the bank routes are always served
/// and the bank worker may be on, so a served process can always write bank files, and a
/// file naming the example account must never reach a bank.
pub async fn serve(ledger: Ledger, config: Config, scheduler_enabled: bool) -> anyhow::Result<()> {
    config
        .bank
        .check_not_example()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let (stop_tx, stop_rx) = watch::channel(false);

    if ledger.store.clock_mode().await? == Some(crate::store::ClockMode::Simulated) {
        tracing::warn!(
            "this ledger has a simulated clock (replays, demos, tests): it accepts any --now and dual control is off unless its policy enforces it always; never serve production from it"
        );
    }
    if let Some(in_force) = ledger.policy().await? {
        let values: Vec<String> = in_force
            .policy
            .values()
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        tracing::info!(
            version = in_force.version,
            policy = %values.join(" "),
            "control policy in force (the ledger's: `settle control policy`)"
        );
    }
    let app = Application::build_from(&config, ledger.clone())
        .await
        .with_context(|| format!("binding {}", config.http.bind))?;
    let (metrics_routes, metrics_place) =
        metrics_routes(&ledger, &config.bank, &config.http, app.auth_failures()).await?;
    let (app, metrics_http) =
        place_metrics(app, metrics_routes, metrics_place, &config.http, &stop_rx)?;
    tracing::info!(addr = %app.local_addr(), "settle serve: HTTP API on http://{}", app.local_addr());
    let http = tokio::spawn(app.run_until_stopped(stopped(stop_rx.clone())));

    let scheduler = if scheduler_enabled {
        let scheduler = Scheduler::new(
            ledger.clone(),
            ledger.clock.clone(),
            settle_calendar::Calendar::platform_default(),
            config.runs.clone(),
        )
        .with_config(&config.scheduler)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        Some(tokio::spawn(scheduler.run(stopped(stop_rx.clone()))))
    } else {
        None
    };
    let workers = spawn_workers(&ledger, &config, &stop_rx).await?;

    shutdown_signal().await;
    tracing::info!("shutdown requested: finishing requests in flight and stopping workers");
    let _ = stop_tx.send(true);
    if let Some(s) = scheduler {
        let _ = s.await;
    }
    for w in workers {
        let _ = w.await;
    }
    // Each server finishes within http.shutdown_deadline_ms of the signal.
    for server in std::iter::once(http).chain(metrics_http) {
        match server.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "HTTP server failed"),
            Err(e) => tracing::error!(error = %e, "HTTP task failed"),
        }
    }
    // A connection dropped at the deadline may still wait on the database (a lock, say);
    // the process does not wait for it longer than the deadline: exiting closes the
    // connection and the database rolls its transaction back.
    let deadline = Duration::from_millis(config.http.shutdown_deadline_ms);
    if tokio::time::timeout(deadline, ledger.store.close())
        .await
        .is_err()
    {
        tracing::warn!("database connections still busy after the shutdown deadline; exiting");
    }
    tracing::info!("stopped cleanly");
    Ok(())
}

/// Resolves once `true` (stop) is sent on the channel, or its sender is gone.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Puts the `/metrics` routes where `place` says: a server of their own on its listener
/// (returned), or merged into the API; or says they are not served.
fn place_metrics(
    mut app: Application,
    routes: Router,
    place: MetricsPlace,
    http: &HttpConfig,
    stop_rx: &watch::Receiver<bool>,
) -> anyhow::Result<(Application, Option<JoinHandle<std::io::Result<()>>>)> {
    let server = match place {
        MetricsPlace::Listener(listener) => {
            let addr = listener.local_addr()?;
            tracing::info!(%addr, "settle serve: metrics on http://{addr}/metrics");
            Some(tokio::spawn(serve_http(
                listener,
                routes,
                ServeLimits::from_config(http),
                stopped(stop_rx.clone()),
            )))
        }
        MetricsPlace::Api => {
            app = app.merge(routes);
            tracing::info!("settle serve: metrics on the API listener, behind http.metrics_token");
            None
        }
        MetricsPlace::Nowhere => {
            tracing::warn!(
                "settle serve: /metrics is not served (http.metrics_bind and http.metrics_token are empty)"
            );
            None
        }
    };
    Ok((app, server))
}

/// Starts the background workers: the projector always; the Solana and bank workers and
/// the anchoring of the chain heads when configured.
async fn spawn_workers(
    ledger: &Ledger,
    config: &Config,
    stop_rx: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut workers = vec![spawn_projector(ledger, config, stop_rx)];
    if config.workers.solana_enabled {
        let rail = std::sync::Arc::new(
            crate::rails::solana::SolanaRail::connect(&config.solana)
                .await
                .context("starting the Solana rail (mint and treasury checks)")?,
        );
        let ledger = ledger.clone();
        let interval = Duration::from_millis(config.workers.solana_interval_ms);
        workers.push(tokio::spawn(every(
            interval,
            stopped(stop_rx.clone()),
            move || {
                let (rail, ledger) = (rail.clone(), ledger.clone());
                async move { solana_pass(&rail, &ledger).await }
            },
        )));
    }
    if config.workers.bank_enabled {
        let (ledger, bank) = (ledger.clone(), config.bank.clone());
        let interval = Duration::from_millis(config.workers.bank_interval_ms);
        workers.push(tokio::spawn(every(
            interval,
            stopped(stop_rx.clone()),
            move || {
                let (ledger, bank) = (ledger.clone(), bank.clone());
                async move { bank_pass(&ledger, &bank).await }
            },
        )));
    }
    if !config.bank.inbox_dir.is_empty() {
        workers.push(spawn_inbox(ledger, config, stop_rx).await?);
    }
    if config.anchor.enabled && !config.anchor.file.is_empty() {
        workers.push(spawn_anchoring(ledger, config, stop_rx)?);
    }
    Ok(workers)
}

/// Starts the projector, so that a usage booking writes only the ledger: it folds the aggregates of booked usage behind the
/// appends; a sweep at start and every `projector_sweep_interval_ms` finds what other
/// processes (`settle ingest FILE`) booked.
fn spawn_projector(
    ledger: &Ledger,
    config: &Config,
    stop_rx: &watch::Receiver<bool>,
) -> JoinHandle<()> {
    let ledger = ledger.clone();
    ledger.store.projector_follows();
    let interval = Duration::from_millis(config.workers.projector_interval_ms.max(1));
    let sweep_every = Duration::from_millis(config.workers.projector_sweep_interval_ms.max(1));
    let mut last_sweep: Option<std::time::Instant> = None;
    tokio::spawn(every(interval, stopped(stop_rx.clone()), move || {
        let sweep = last_sweep.is_none_or(|t| t.elapsed() >= sweep_every);
        if sweep {
            last_sweep = Some(std::time::Instant::now());
        }
        let ledger = ledger.clone();
        async move { projector_pass(&ledger, sweep).await }
    }))
}
