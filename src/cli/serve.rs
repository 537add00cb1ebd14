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

/// Runs `pass` now and then every `interval` until `stop` resolves; a pass in progress
/// finishes first (each of its steps is its own transaction, so stopping between passes
/// loses nothing).
async fn every<F, Fut>(interval: Duration, stop: impl std::future::Future<Output = ()>, mut pass: F)
where
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

/// Runs the service until a shutdown signal.
pub async fn serve(ledger: Ledger, config: Config, scheduler_enabled: bool) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let app = Application::build(config.http.clone(), ledger.clone())
        .await
        .with_context(|| format!("binding {}", config.http.bind))?;
    let app = app.merge(
        Router::new()
            .route("/metrics", get(metrics))
            .with_state(ledger.clone()),
    );
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

    let mut workers = Vec::new();
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
        workers.push(tokio::spawn(every(interval, stopped(stop_rx.clone()), move || {
            let (ledger, bank) = (ledger.clone(), bank.clone());
            async move {
                match crate::rails::bank::generate_batches(&ledger, &bank, &crate::ledger::Actor::system("bank")).await {
                    Ok(r) => tracing::info!(batches = r.batches.len(), failed = r.failed.len(), "bank batches generated"),
                    Err(e) => tracing::error!(error = %e, "bank batch generation failed; retrying next pass"),
                }
            }
        })));
    }

    shutdown_signal().await;
    tracing::info!("shutdown requested: finishing requests in flight and stopping workers");
    let _ = stop_tx.send(true);
    if let Some(s) = scheduler {
        let _ = s.await;
    }
    for w in workers {
        let _ = w.await;
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
