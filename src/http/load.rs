//! What the API takes on at once: a request timeout (`http.request_timeout_ms`) and a
//! concurrency limit (`http.concurrency_max`) with a bounded queue (`http.queue_max`).
//! Past the queue a request is answered at once with 503 `overloaded` and `Retry-After`,
//! before anything of it is read or done.
//!
//! A request that times out is dropped where it stands: a booking in progress is a database
//! transaction that was not committed, so dropping it rolls it back. Re-sending the request
//! books it once (or answers `duplicate` when its commit had happened before the timeout).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::problem::Problem;
use crate::config::HttpConfig;

/// `Retry-After` of `overloaded` and `request_timeout`, in seconds.
pub const RETRY_AFTER_S: u64 = 1;

fn shed(reason: &'static str) {
    crate::metrics::global().count(
        "settle_http_requests_shed_total",
        "Requests answered 503 before their end: overloaded (queue full) or request_timeout.",
        &[("reason", reason)],
        1,
    );
}

/// The request timeout, as a middleware (`from_fn_with_state`).
pub async fn request_timeout(
    State(timeout): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_owned();
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            shed("request_timeout");
            tracing::warn!(
                path,
                timeout_ms = timeout.as_millis() as u64,
                "request timed out: dropped, its uncommitted work rolled back"
            );
            Problem {
                retry_after_s: Some(RETRY_AFTER_S),
                ..Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "request_timeout",
                    format!(
                        "the request was not done within {} ms and was abandoned; nothing it \
                         had not committed was kept: send it again (a part already booked \
                         answers duplicate)",
                        timeout.as_millis()
                    ),
                )
            }
            .into_response()
        }
    }
}

/// Admission of requests: at most `concurrency_max` run, at most `queue_max` wait.
pub struct Gate {
    permits: Semaphore,
    counts: Mutex<Counts>,
    concurrency_max: usize,
    queue_max: usize,
}

#[derive(Default)]
struct Counts {
    /// Running and queued.
    admitted: usize,
    running: usize,
}

impl Gate {
    pub fn new(config: &HttpConfig) -> Arc<Gate> {
        Arc::new(Gate {
            permits: Semaphore::new(config.concurrency_max.max(1)),
            counts: Mutex::new(Counts::default()),
            concurrency_max: config.concurrency_max.max(1),
            queue_max: config.queue_max,
        })
    }

    /// Updates the counts and the gauges under one lock, so the gauges never go backwards
    /// in time.
    fn update(&self, f: impl FnOnce(&mut Counts)) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut counts);
        let m = crate::metrics::global();
        m.gauge(
            "settle_http_requests_running",
            "API requests being handled (at most http.concurrency_max).",
            &[],
            counts.running as i64,
        );
        m.gauge(
            "settle_http_requests_queued",
            "API requests waiting for a slot (at most http.queue_max).",
            &[],
            (counts.admitted - counts.running) as i64,
        );
    }

    /// Admits a request to the queue, or refuses it when running and queued are full.
    fn admit(self: &Arc<Gate>) -> Option<Admitted> {
        let mut admitted = false;
        self.update(|c| {
            if c.admitted < self.concurrency_max + self.queue_max {
                c.admitted += 1;
                admitted = true;
            }
        });
        admitted.then(|| Admitted {
            gate: self.clone(),
            running: false,
        })
    }
}

/// A request inside the gate; leaving (also by being dropped) frees its place.
struct Admitted {
    gate: Arc<Gate>,
    running: bool,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let running = self.running;
        self.gate.update(|c| {
            c.admitted -= 1;
            if running {
                c.running -= 1;
            }
        });
    }
}

/// The gate, as a middleware (`from_fn_with_state`).
pub async fn gate(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    let Some(mut admitted) = gate.admit() else {
        shed("overloaded");
        return Problem {
            retry_after_s: Some(RETRY_AFTER_S),
            ..Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                format!(
                    "the server is handling {} requests and {} more are waiting; retry later",
                    gate.concurrency_max, gate.queue_max
                ),
            )
        }
        .into_response();
    };
    // An error only when the semaphore is closed, which it never is.
    let _permit = gate.permits.acquire().await;
    gate.update(|c| c.running += 1);
    admitted.running = true;
    let response = next.run(request).await;
    drop(admitted);
    response
}
