//! `GET /v1/providers/{id}/stream`: a provider's figures, live, as Server-Sent Events.
//!
//! The position of a provider's figures is the `seq` of its ledger stream: every event that
//! changes them (usage, voids, adjustments, payout state changes) is appended there, and
//! nowhere else. A stream sends
//! - `event: entry`, `id: <seq>`: one per ledger event of the provider, in order, with its
//!   type and ids (no amounts, no payout method details);
//! - `event: summary`, `id: <seq>`: the whole summary (`GET …/summary`) after the entries
//!   up to `seq`, and once on connect;
//! - `event: problem`: a read failed (problem+json as data); the stream ends, and the client
//!   reconnects with its last id;
//! - `event: reliability` (no id: it is no ledger position): the reports of the provider's
//!   GPUs moved (an online interval, a job, a benchmark, …; they are kept beside the chain,
//!   so no entry tells): [`ReliabilityMark`], with the score now. Sent when the reports'
//!   mark changes while the stream is open, and on connect when the client names a mark
//!   (`?reports_mark=`, the page's) other than the current one, so a page that missed a
//!   change while it was away catches up.
//!
//! A client that reconnects with `Last-Event-ID: n` (browsers do it by themselves) gets the
//! entries after `n` and then a summary, or nothing while the ledger has not moved: no gap
//! and no repeat, across server restarts too, since positions live in the ledger. Heartbeat
//! comments keep proxies from closing an idle stream; at most `http.streams_max` are open
//! (503 `streams_exhausted` past it), at most `http.streams_per_token_max` per token (429
//! `token_streams_exhausted`), and all of them end when the server shuts down. A stream
//! checks its token again every `http.stream_auth_recheck_ms` (at most 30 s): once the token
//! is revoked or expired, the stream sends a `problem` (`token_revoked`, `token_expired`) and
//! ends.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use utoipa::ToSchema;

use super::AppState;
use super::extract::Auth;
use super::problem::Problem;
use crate::config::HttpConfig;
use crate::domain::event::provider_stream;
use crate::domain::time::format_ms;
use crate::store::StoredEvent;

/// Entries read per query while a stream catches up.
const ENTRIES_PAGE: i64 = 500;
/// `Retry-After` of a refused stream, seconds.
const STREAMS_RETRY_AFTER_S: u64 = 5;

/// The open streams of a server: their bound (in all and per token), their timing, and the
/// signal that ends them.
pub struct StreamHub {
    slots: Arc<Semaphore>,
    streams_max: usize,
    /// Open streams per token id (entries removed at 0).
    per_token: Arc<Mutex<HashMap<String, usize>>>,
    per_token_max: usize,
    poll: Duration,
    heartbeat: Duration,
    auth_recheck: Duration,
    closing: watch::Sender<bool>,
}

/// One open stream of a token: counted in [`StreamHub::per_token`] until dropped.
struct TokenSlot {
    per_token: Arc<Mutex<HashMap<String, usize>>>,
    token_id: String,
}

impl Drop for TokenSlot {
    fn drop(&mut self) {
        let mut open = self.per_token.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.token_id) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.token_id);
            }
        }
    }
}

impl StreamHub {
    pub fn new(config: &HttpConfig) -> StreamHub {
        StreamHub {
            slots: Arc::new(Semaphore::new(config.streams_max)),
            streams_max: config.streams_max,
            per_token: Arc::default(),
            per_token_max: config.streams_per_token_max.max(1),
            poll: Duration::from_millis(config.stream_poll_interval_ms.max(1)),
            heartbeat: Duration::from_millis(config.stream_heartbeat_ms.max(1)),
            auth_recheck: Duration::from_millis(config.stream_auth_recheck_ms.max(1)),
            closing: watch::channel(false).0,
        }
    }

    /// A stream slot of `token_id`, unless it holds `streams_per_token_max` already (429
    /// `token_streams_exhausted`).
    fn token_slot(&self, token_id: &str) -> Result<TokenSlot, Problem> {
        let mut open = self.per_token.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(token_id.to_owned()).or_insert(0);
        if *n >= self.per_token_max {
            return Err(Problem::too_many_requests(
                "token_streams_exhausted",
                format!(
                    "this token holds {} live streams, the most one token may keep open \
                     (http.streams_per_token_max); close one or retry later",
                    self.per_token_max
                ),
                STREAMS_RETRY_AFTER_S,
            ));
        }
        *n += 1;
        Ok(TokenSlot {
            per_token: self.per_token.clone(),
            token_id: token_id.to_owned(),
        })
    }

    /// Ends every open stream and refuses new ones (the server is shutting down): a
    /// graceful shutdown would otherwise wait for them until its deadline.
    pub fn close(&self) {
        self.closing.send_replace(true);
        self.slots.close();
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.streams_max
            .saturating_sub(self.slots.available_permits())
    }

    fn gauge(&self) {
        crate::metrics::global().gauge(
            "settle_http_streams_open",
            "Live streams (GET /v1/providers/{id}/stream) open, at most http.streams_max.",
            &[],
            self.open() as i64,
        );
    }
}

/// One ledger event of the provider, as a stream entry.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct StreamEntry {
    /// The event's `seq` in the provider's stream (also the SSE event id).
    pub position: i64,
    /// The event type, e.g. `usage.recorded`, `payout.settled`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// When the ledger booked it.
    pub recorded_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payout_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjustment_id: Option<String>,
}

impl StreamEntry {
    fn of(e: &StoredEvent) -> StreamEntry {
        let payload: serde_json::Value = serde_json::from_str(&e.payload).unwrap_or_default();
        let text = |key: &str| payload.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        StreamEntry {
            position: e.seq,
            event_type: e.event_type.clone(),
            recorded_at: format_ms(e.recorded_at_ms),
            event_id: text("event_id"),
            gpu_id: text("gpu_id"),
            payout_id: text("payout_id"),
            adjustment_id: text("adjustment_id"),
        }
    }
}

/// The data of a `reliability` event: the reports of the provider's GPUs moved.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ReliabilityMark {
    pub provider_id: String,
    /// The reports' mark now (`GET /v1/providers/{id}/reliability` has the same field):
    /// an opaque token, compared for equality only.
    #[schema(example = "1796083200000.3")]
    pub reports_mark: String,
    /// The provider's combined score now, basis points.
    #[schema(example = 9121)]
    pub score_bps: u16,
    /// The instant the score was computed at (the ledger clock).
    pub as_of: String,
}

/// The query of a stream.
#[derive(Clone, Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// The reports' mark the client shows: when it is not the current one, a
    /// `reliability` event is sent on connect.
    pub reports_mark: Option<String>,
}

/// `Last-Event-ID`: a ledger position this stream sent (400 `invalid_last_event_id` else).
fn last_event_id(headers: &HeaderMap) -> Result<Option<i64>, Problem> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .map(Some)
        .ok_or_else(|| {
            Problem::bad_request(
                "invalid_last_event_id",
                "Last-Event-ID must be a ledger position this stream sent (an integer)",
            )
        })
}

/// The live figures of a provider.
#[utoipa::path(
    get,
    path = "/v1/providers/{id}/stream",
    tag = "dashboard",
    params(
        ("id" = String, Path, description = "Provider id"),
        ("Last-Event-ID" = Option<i64>, Header,
         description = "The id of the last event received: resume after it"),
        StreamQuery,
    ),
    responses(
        (status = 200, content_type = "text/event-stream", body = String,
         description = "Server-Sent Events: `summary` (data: Summary), `entry` (data: \
                        StreamEntry), `problem` (data: Problem, then the stream ends); the id of \
                        each is its ledger position. `reliability` (data: ReliabilityMark, no \
                        id): the reports of the provider's GPUs moved. Comments are heartbeats."),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 429, body = Problem, content_type = "application/problem+json",
         description = "`token_streams_exhausted`: this token holds \
                        http.streams_per_token_max streams"),
        (status = 503, body = Problem, content_type = "application/problem+json",
         description = "`streams_exhausted`: http.streams_max streams are open"),
    ),
    security(("bearer" = []), ("session_cookie" = []))
)]
pub async fn stream(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    super::extract::Q(query): super::extract::Q<StreamQuery>,
    headers: HeaderMap,
) -> Result<Response, Problem> {
    auth.read_provider(&state, &id).await?;
    let last = last_event_id(&headers)?;
    let hub = state.streams.clone();
    let token_slot = hub.token_slot(&auth.0.token_id)?;
    let permit = hub.slots.clone().try_acquire_owned().map_err(|_| Problem {
        retry_after_s: Some(STREAMS_RETRY_AFTER_S),
        ..Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "streams_exhausted",
            format!(
                "{} live streams are open, the most this server keeps (http.streams_max); \
                 retry later",
                hub.streams_max
            ),
        )
    })?;
    let (tx, mut rx) = mpsc::channel::<Event>(16);
    let heartbeat = hub.heartbeat;
    let held = Held {
        _permit: permit,
        token_slot,
    };
    tokio::spawn(follow(state, id, last, query.reports_mark, held, tx));
    let events =
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|e| e.map(Ok::<_, Infallible>)));
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat"))
        .into_response())
}

type Sender = mpsc::Sender<Event>;

/// What an open stream holds until it ends: its slot among all streams and its token's.
struct Held {
    /// Returned to [`StreamHub::slots`] when dropped.
    _permit: OwnedSemaphorePermit,
    token_slot: TokenSlot,
}

/// Sends what the client misses, then follows the provider's stream (and the reports of
/// its GPUs: `reliability`) until the client leaves, the server shuts down, its token
/// stops being valid (checked every `http.stream_auth_recheck_ms`) or a read fails (a
/// `problem` event, then the end: the client reconnects with its last id).
async fn follow(
    state: AppState,
    id: String,
    last: Option<i64>,
    shown_mark: Option<String>,
    held: Held,
    tx: Sender,
) {
    state.streams.gauge();
    let mut closing = state.streams.closing.subscribe();
    let mut checked_at = tokio::time::Instant::now();
    let result = async {
        let stream = provider_stream(&id);
        let head = state.ledger.store.stream_head(&stream).await?;
        // A position past the head was not sent by this ledger: start afresh.
        let mut position = match last.filter(|n| *n <= head) {
            Some(n) => n,
            None => {
                let summary = super::dashboard::provider_summary(&state, &id).await?;
                let position = summary.ledger_position;
                send(&tx, summary_event(&summary, position)).await?;
                position
            }
        };
        let mut mark = reports_mark(&state, &id).await?;
        if shown_mark.is_some_and(|shown| shown != mark) {
            mark = send_reliability(&state, &id, &tx).await?;
        }
        loop {
            if *closing.borrow() {
                return Ok(());
            }
            if checked_at.elapsed() >= state.streams.auth_recheck {
                crate::auth::still_valid(
                    &state.ledger.store,
                    &held.token_slot.token_id,
                    state.ledger.now_ms(),
                )
                .await
                .map_err(super::extract::auth_problem)?;
                checked_at = tokio::time::Instant::now();
            }
            let head = state.ledger.store.stream_head(&stream).await?;
            if head > position {
                position = send_tail(&state, &id, position, head, &tx).await?;
            }
            if reports_mark(&state, &id).await? != mark {
                mark = send_reliability(&state, &id, &tx).await?;
            }
            tokio::select! {
                _ = tokio::time::sleep(state.streams.poll.min(state.streams.auth_recheck)) => {}
                _ = closing.changed() => return Ok(()),
                _ = tx.closed() => return Ok(()),
            }
        }
    }
    .await;
    drop(held);
    state.streams.gauge();
    match result {
        Ok(()) | Err(Ended::ClientGone) => {}
        Err(Ended::Failed(problem)) => {
            tracing::warn!(provider_id = %id, code = %problem.code, "live stream ended by an error");
            let data = serde_json::to_string(&problem).unwrap_or_default();
            let _ = tx.send(Event::default().event("problem").data(data)).await;
        }
    }
}

/// Why a stream ended early.
enum Ended {
    ClientGone,
    Failed(Problem),
}

impl From<Problem> for Ended {
    fn from(e: Problem) -> Ended {
        Ended::Failed(e)
    }
}

impl From<crate::store::StoreError> for Ended {
    fn from(e: crate::store::StoreError) -> Ended {
        Ended::Failed(e.into())
    }
}

async fn send(tx: &Sender, event: Event) -> Result<(), Ended> {
    tx.send(event).await.map_err(|_| Ended::ClientGone)
}

/// The summary, as of the entries up to `position` (its id; the figures may include later
/// events, whose entries follow).
fn summary_event(summary: &super::dashboard::Summary, position: i64) -> Event {
    Event::default()
        .event("summary")
        .id(position.to_string())
        .data(serde_json::to_string(summary).unwrap_or_default())
}

/// Sends the entries after `position` up to `head`, then the summary; returns the position
/// sent.
async fn send_tail(
    state: &AppState,
    id: &str,
    mut position: i64,
    head: i64,
    tx: &Sender,
) -> Result<i64, Ended> {
    let stream = provider_stream(id);
    while position < head {
        let events = state
            .ledger
            .store
            .stream_events(&stream, position, ENTRIES_PAGE)
            .await?;
        let Some(last) = events.last() else { break };
        let next = last.seq;
        for e in &events {
            send(tx, entry_event(&StreamEntry::of(e))).await?;
        }
        position = next;
    }
    let summary = super::dashboard::provider_summary(state, id).await?;
    // The summary was read after the entries: it includes at least `position`.
    send(tx, summary_event(&summary, position)).await?;
    Ok(position)
}

/// The mark of the reports of the provider's GPUs now.
async fn reports_mark(state: &AppState, id: &str) -> Result<String, Ended> {
    Ok(state.ledger.reports_mark(id).await.map_err(Problem::from)?)
}

/// Sends a `reliability` event with the provider's score now; returns the mark it carries
/// (read before the score, so the score includes every report up to it).
async fn send_reliability(state: &AppState, id: &str, tx: &Sender) -> Result<String, Ended> {
    let r = state
        .ledger
        .provider_reliability(id)
        .await
        .map_err(Problem::from)?;
    let data = ReliabilityMark {
        provider_id: r.provider_id,
        reports_mark: r.reports_mark.clone(),
        score_bps: r.score.score_bps,
        as_of: r.at,
    };
    send(
        tx,
        Event::default()
            .event("reliability")
            .data(serde_json::to_string(&data).unwrap_or_default()),
    )
    .await?;
    Ok(r.reports_mark)
}

fn entry_event(entry: &StreamEntry) -> Event {
    Event::default()
        .event("entry")
        .id(entry.position.to_string())
        .data(serde_json::to_string(entry).unwrap_or_default())
}
