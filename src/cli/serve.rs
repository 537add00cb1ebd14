//! `settle serve`: the HTTP API, the payout-run scheduler and the rail workers in one
//! process, with `/metrics`, and a graceful shutdown on SIGTERM or Ctrl-C: requests in
//! flight finish, workers stop between transactions, nothing acknowledged is lost.

use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;

use crate::config::Config;
use crate::http::Application;
use crate::jobs::scheduler::Scheduler;
use crate::ledger::Ledger;

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
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

async fn metrics(State(ledger): State<Ledger>) -> impl IntoResponse {
    let mut text = crate::metrics::global().render();
    match crate::metrics::scrape_ledger(ledger.store.pool(), ledger.now_ms()).await {
        Ok(more) => text.push_str(&more),
        Err(e) => tracing::warn!(error = %e, "metrics: cannot read the projections"),
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}


/// Runs the service until a shutdown signal.
pub async fn serve(ledger: Ledger, config: Config, scheduler_enabled: bool) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let app = Application::build(config.http.clone(), ledger.clone())
        .await
        .with_context(|| format!("binding {}", config.http.bind))?;
    let app = app.merge(Router::new().route("/metrics", get(metrics)).with_state(ledger.clone()));
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

    shutdown_signal().await;
    tracing::info!("shutdown requested: finishing requests in flight and stopping workers");
    let _ = stop_tx.send(true);
    if let Some(s) = scheduler {
        let _ = s.await;
    }
    match tokio::time::timeout(Duration::from_secs(30), http).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::error!(error = %e, "HTTP server failed"),
        Ok(Err(e)) => tracing::error!(error = %e, "HTTP task failed"),
        Err(_) => tracing::warn!("requests still in flight after 30 s; closing"),
    }
    ledger.store.close().await;
    tracing::info!("stopped cleanly");
    Ok(())
}
