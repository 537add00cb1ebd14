//! The listener: hyper's HTTP/1 connections with a header-read timeout, at most
//! `connections_max` of them, and a graceful shutdown with a deadline.
//!
//! `axum::serve` runs hyper without a timer, so a client sending its headers one byte a
//! second could hold a connection (and a graceful shutdown) for ever. Here each connection
//! must send a request's headers within `http.header_read_timeout_ms` (hyper closes it
//! otherwise); on shutdown the listener closes, idle connections close, requests in flight
//! get `http.shutdown_deadline_ms` to finish, and then the connections still open are
//! dropped: their handlers are dropped with them, which rolls back whatever they had not
//! committed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::config::HttpConfig;

/// The connection-level limits of a listener.
#[derive(Clone, Copy, Debug)]
pub struct ServeLimits {
    pub header_read_timeout: Duration,
    pub connections_max: usize,
    pub shutdown_deadline: Duration,
}

impl ServeLimits {
    pub(crate) fn from_config(config: &HttpConfig) -> ServeLimits {
        ServeLimits {
            header_read_timeout: Duration::from_millis(config.header_read_timeout_ms),
            connections_max: config.connections_max,
            shutdown_deadline: Duration::from_millis(config.shutdown_deadline_ms),
        }
    }
}

/// Checks the limits that would stop the server from serving at all.
pub(crate) fn check_config(config: &HttpConfig) -> Result<(), String> {
    for (key, value) in [
        ("header_read_timeout_ms", config.header_read_timeout_ms),
        ("request_timeout_ms", config.request_timeout_ms),
        ("concurrency_max", config.concurrency_max as u64),
        ("connections_max", config.connections_max as u64),
        ("stream_poll_interval_ms", config.stream_poll_interval_ms),
        ("stream_heartbeat_ms", config.stream_heartbeat_ms),
    ] {
        if value == 0 {
            return Err(format!("http.{key} must be at least 1"));
        }
    }
    Ok(())
}

fn closed(reason: &'static str) {
    crate::metrics::global().count(
        "settle_http_connections_closed_total",
        "HTTP connections closed by the server: header_timeout (headers not sent in time), \
         shutdown_deadline (still open at the end of the shutdown deadline).",
        &[("reason", reason)],
        1,
    );
}

/// Serves `router` on `listener` until `shutdown` resolves, then shuts down within
/// `limits.shutdown_deadline`. Each request carries the peer address as
/// `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let slots = Arc::new(Semaphore::new(limits.connections_max.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);

    loop {
        let accept = async {
            let slot = slots.clone().acquire_owned().await;
            (slot, listener.accept().await)
        };
        let (slot, accepted) = tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = accept => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                accept_failed(&e).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = router
            .clone()
            .map_request(move |request: axum::http::Request<Incoming>| {
                let mut request = request.map(Body::new);
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            });
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let mut stop = stop_rx.clone();
        connections.spawn(async move {
            let _slot = slot;
            tokio::pin!(connection);
            let mut stopping = false;
            let result = loop {
                tokio::select! {
                    result = connection.as_mut() => break result,
                    _ = stop.wait_for(|stop| *stop), if !stopping => {
                        stopping = true;
                        // Closes it when idle, else after the response in flight.
                        connection.as_mut().graceful_shutdown();
                    }
                }
            };
            if let Err(e) = result {
                if e.is_timeout() {
                    closed("header_timeout");
                    tracing::debug!(%peer, "connection closed: headers not sent in time");
                } else {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            }
        });
    }

    drop(listener);
    let _ = stop_tx.send(true);
    drain(&mut connections, limits.shutdown_deadline).await;
    Ok(())
}

/// After a failed accept: a connection refused, aborted or reset is the client's doing and
/// is skipped; any other error is logged and waited out.
async fn accept_failed(e: &std::io::Error) {
    if !matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    ) {
        // Out of file descriptors, typically: wait for some to close.
        tracing::error!(error = %e, "accepting a connection failed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Gives the open connections `deadline` to finish the requests in flight (they were told
/// to stop), then drops the ones still open.
async fn drain(connections: &mut JoinSet<()>, deadline: Duration) {
    let open = connections.len();
    if open > 0 {
        tracing::info!(
            open,
            deadline_ms = deadline.as_millis() as u64,
            "shutting down: finishing the requests in flight"
        );
    }
    let drained = tokio::time::timeout(deadline, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        let open = connections.len();
        for _ in 0..open {
            closed("shutdown_deadline");
        }
        tracing::warn!(
            open,
            "shutdown deadline passed: dropping the connections still open (their uncommitted \
             work is rolled back)"
        );
        connections.shutdown().await;
    }
}
