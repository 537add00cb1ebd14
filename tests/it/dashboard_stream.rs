//! The live stream of the dashboard (`GET /v1/providers/{id}/stream`, Server-Sent Events),
//! against the real server: the summary on connect, an entry and a fresh summary after each
//! booking, resumption by `Last-Event-ID` with no gap and no repeat across a restart, the
//! provider scope, the open-stream limit, and shutdown with streams open.

use crate::http_support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use settle::auth::Scope;
use settle::config::HttpConfig;
use settle::http::Application;
use settle::ledger::Ledger;

use http_support::{assert_problem, spawn_app_with, usage};

const NOW: &str = "2026-11-25T12:00:00Z";

/// One server event (comments skipped).
#[derive(Debug)]
struct Sse {
    event: String,
    id: Option<String>,
    data: Value,
}

/// Reads the events of one stream.
struct Reader {
    response: reqwest::Response,
    buffer: String,
}

impl Reader {
    /// The next event within `wait`, or `None`.
    async fn next(&mut self, wait: Duration) -> Option<Sse> {
        let deadline = Instant::now() + wait;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut event, mut id, mut data) = (String::from("message"), None, String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue; // a heartbeat comment
                }
                return Some(Sse {
                    event,
                    id,
                    data: serde_json::from_str(&data).expect("JSON data"),
                });
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            match tokio::time::timeout(left, self.response.chunk()).await {
                Ok(Ok(Some(bytes))) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Ok(Ok(None)) | Ok(Err(_)) | Err(_) => return None,
            }
        }
    }

    async fn expect(&mut self, event: &str) -> Sse {
        let e = self
            .next(Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("no {event} event within 5 s"));
        assert_eq!(e.event, event, "{e:?}");
        e
    }

    /// Asserts that nothing but heartbeats arrives for `wait`.
    async fn quiet(&mut self, wait: Duration) {
        if let Some(e) = self.next(wait).await {
            panic!("unexpected event: {e:?}");
        }
    }
}

async fn open(base: &str, provider: &str, token: &str, last: Option<i64>) -> reqwest::Response {
    let mut r = reqwest::Client::new()
        .get(format!("{base}/v1/providers/{provider}/stream"))
        .bearer_auth(token);
    if let Some(n) = last {
        r = r.header("Last-Event-ID", n.to_string());
    }
    r.send().await.expect("request")
}

async fn reader(base: &str, provider: &str, token: &str, last: Option<i64>) -> Reader {
    let response = open(base, provider, token, last).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    Reader {
        response,
        buffer: String::new(),
    }
}

/// A server over `ledger` that stops when the returned sender fires.
async fn serve(
    ledger: &Ledger,
    config: HttpConfig,
) -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let app = Application::build(config, ledger.clone()).await.unwrap();
    let base = format!("http://127.0.0.1:{}", app.port());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        app.run_until_stopped(async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    (base, stop, task)
}

fn config() -> HttpConfig {
    HttpConfig {
        bind: "127.0.0.1:0".into(),
        stream_poll_interval_ms: 100,
        // Far beyond the test: a shutdown that waited for the streams would show.
        shutdown_deadline_ms: 60_000,
        ..HttpConfig::default()
    }
}

fn id_of(e: &Sse) -> i64 {
    e.id.as_deref().expect("an id").parse().unwrap()
}

#[tokio::test]
async fn the_stream_follows_the_ledger_and_resumes_without_gap_or_repeat_across_a_restart() {
    let app = spawn_app_with(NOW, config()).await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    let (base, stop, server) = serve(&app.ledger, config()).await;

    // On connect: the summary, with the ledger position as its id.
    let mut s = reader(&base, "prv_a", &token, None).await;
    let first = s.expect("summary").await;
    let h0 = id_of(&first);
    assert_eq!(first.data["ledger_position"], h0);
    assert_eq!(first.data["week_to_date"]["net_usdc"], "0.000000");
    let rest = app.get_json(&token, "/v1/providers/prv_a/summary").await;
    assert_eq!(rest["ledger_position"], h0);

    // A booking: its entry, then the summary with the new figures, within the poll.
    let booked = Instant::now();
    usage(
        &app.ledger,
        "k1",
        "prv_a",
        "gpu_a0",
        "2026-11-24T10:00:00Z",
        "2026-11-24T11:00:00Z",
    )
    .await;
    let entry = s.expect("entry").await;
    let latency = booked.elapsed();
    assert_eq!(id_of(&entry), h0 + 1);
    assert_eq!(entry.data["type"], "usage.recorded");
    assert_eq!(entry.data["event_id"], "k1");
    assert_eq!(entry.data["gpu_id"], "gpu_a0");
    let summary = s.expect("summary").await;
    assert_eq!(id_of(&summary), h0 + 1);
    // 1 h at 2.49 less the 20 % community fee.
    assert_eq!(summary.data["week_to_date"]["net_usdc"], "1.992000");
    assert_eq!(summary.data["balances"]["available_usdc"], "1.992000");
    assert!(
        latency < Duration::from_secs(3),
        "the update took {latency:?}"
    );
    s.quiet(Duration::from_millis(400)).await;

    // Shutdown with a stream open ends the stream instead of waiting for the deadline.
    let stopping = Instant::now();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(15), server)
        .await
        .expect("the server stops with a stream open")
        .unwrap();
    assert!(stopping.elapsed() < Duration::from_secs(15));
    assert!(
        s.next(Duration::from_secs(2)).await.is_none(),
        "the stream ended"
    );

    // Booked while no server runs.
    usage(
        &app.ledger,
        "k2",
        "prv_a",
        "gpu_a1",
        "2026-11-24T12:00:00Z",
        "2026-11-24T13:00:00Z",
    )
    .await;
    usage(
        &app.ledger,
        "k3",
        "prv_a",
        "gpu_a0",
        "2026-11-24T12:00:00Z",
        "2026-11-24T12:30:00Z",
    )
    .await;

    // A new server: resuming after h0 + 1 sends exactly k2 and k3, then the summary.
    let (base, stop, server) = serve(&app.ledger, config()).await;
    let mut s = reader(&base, "prv_a", &token, Some(h0 + 1)).await;
    let e2 = s.expect("entry").await;
    let e3 = s.expect("entry").await;
    assert_eq!((id_of(&e2), id_of(&e3)), (h0 + 2, h0 + 3));
    assert_eq!(
        (e2.data["event_id"].as_str(), e3.data["event_id"].as_str()),
        (Some("k2"), Some("k3"))
    );
    let summary = s.expect("summary").await;
    assert_eq!(id_of(&summary), h0 + 3);
    // + 1 h at 1.8 and 0.5 h at 2.49, each less 20 %: 1.992 + 1.44 + 0.996.
    assert_eq!(summary.data["week_to_date"]["net_usdc"], "4.428000");
    s.quiet(Duration::from_millis(400)).await;

    // Resuming at the head sends nothing until the ledger moves.
    let mut at_head = reader(&base, "prv_a", &token, Some(h0 + 3)).await;
    at_head.quiet(Duration::from_millis(500)).await;
    usage(
        &app.ledger,
        "k4",
        "prv_a",
        "gpu_a1",
        "2026-11-24T14:00:00Z",
        "2026-11-24T15:00:00Z",
    )
    .await;
    for r in [&mut s, &mut at_head] {
        let e = r.expect("entry").await;
        assert_eq!(
            (id_of(&e), e.data["event_id"].as_str()),
            (h0 + 4, Some("k4"))
        );
        assert_eq!(id_of(&r.expect("summary").await), h0 + 4);
    }

    // A position this ledger never reached starts afresh with the summary.
    let mut ahead = reader(&base, "prv_a", &token, Some(h0 + 1_000)).await;
    assert_eq!(id_of(&ahead.expect("summary").await), h0 + 4);

    // Voids and adjustments move the figures too: each an entry, then the summary.
    let admin = app.token(Scope::Admin, None).await;
    let void = json!({"reason": "customer refund"}).to_string();
    let r = app
        .post(Some(&admin), "/v1/admin/usage/k4/void", void)
        .await;
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let e = s.expect("entry").await;
    assert_eq!(
        (
            id_of(&e),
            e.data["type"].as_str(),
            e.data["event_id"].as_str()
        ),
        (h0 + 5, Some("usage.voided"), Some("k4"))
    );
    assert_eq!(
        s.expect("summary").await.data["week_to_date"]["net_usdc"],
        "4.428000"
    );
    let adjustment = json!({"adjustment_id": "adj-1", "provider_id": "prv_a",
        "amount_usdc": "1", "reason": "goodwill"});
    let r = app
        .post(
            Some(&admin),
            "/v1/admin/adjustments",
            adjustment.to_string(),
        )
        .await;
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let e = s.expect("entry").await;
    assert_eq!(
        (
            id_of(&e),
            e.data["type"].as_str(),
            e.data["adjustment_id"].as_str()
        ),
        (h0 + 6, Some("adjustment.posted"), Some("adj-1"))
    );
    let summary = s.expect("summary").await;
    assert_eq!(summary.data["balances"]["available_usdc"], "5.428000");
    // Entries name ids, never amounts or payout methods.
    assert!(e.data.get("amount_micro_usdc").is_none() && e.data.get("method").is_none());

    stop.send(()).unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn a_stream_is_scoped_like_the_other_provider_routes() {
    let app = spawn_app_with(NOW, config()).await;
    let a = app.token(Scope::Provider, Some("prv_a")).await;
    let b = app.token(Scope::Provider, Some("prv_b")).await;
    let admin = app.token(Scope::Admin, None).await;

    assert_problem(open(&app.base, "prv_a", &b, None).await, 404, "not_found").await;
    assert_problem(
        open(&app.base, "prv_zz", &admin, None).await,
        404,
        "not_found",
    )
    .await;
    let r = reqwest::get(app.url("/v1/providers/prv_a/stream"))
        .await
        .unwrap();
    assert_problem(r, 401, "unauthenticated").await;
    assert_problem(
        open(&app.base, "prv_a", "stl_bogus.bogus", None).await,
        401,
        "invalid_token",
    )
    .await;
    let r = reqwest::Client::new()
        .get(app.url("/v1/providers/prv_a/stream"))
        .bearer_auth(&a)
        .header("Last-Event-ID", "yesterday")
        .send()
        .await
        .unwrap();
    assert_problem(r, 400, "invalid_last_event_id").await;

    // The admin reads any provider's stream; the dashboard's cookie reads its own.
    let mut s = reader(&app.base, "prv_b", &admin, None).await;
    assert_eq!(s.expect("summary").await.data["provider_id"], "prv_b");
    let r = reqwest::Client::new()
        .get(app.url("/v1/providers/prv_a/stream"))
        .header("cookie", format!("settle_session={a}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The cookie never authorises a change.
    let r = reqwest::Client::new()
        .post(app.url("/v1/usage"))
        .header("cookie", format!("settle_session={a}"))
        .header("content-type", "application/json")
        .body("[]")
        .send()
        .await
        .unwrap();
    assert_problem(r, 401, "unauthenticated").await;
}

#[tokio::test]
async fn the_open_stream_limit_answers_503_and_frees_a_slot_when_a_client_leaves() {
    let app = spawn_app_with(
        NOW,
        HttpConfig {
            streams_max: 2,
            ..config()
        },
    )
    .await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    let mut one = reader(&app.base, "prv_a", &token, None).await;
    one.expect("summary").await;
    let mut two = reader(&app.base, "prv_a", &token, None).await;
    two.expect("summary").await;

    let refused = open(&app.base, "prv_a", &token, None).await;
    assert_eq!(refused.headers()["retry-after"], "5");
    assert_problem(refused, 503, "streams_exhausted").await;
    // Other routes still answer.
    app.get_json(&token, "/v1/providers/prv_a/summary").await;

    drop(one);
    opens_once_freed(&app.base, &token, 503).await;
    drop(two);
}

/// Waits until `token` gets a stream of `prv_a` again (answered `refused` meanwhile): the
/// slot of a gone client is freed within 5 s.
async fn opens_once_freed(base: &str, token: &str, refused: u16) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = open(base, "prv_a", token, None).await;
        if r.status() == 200 {
            return;
        }
        assert_eq!(r.status(), refused);
        assert!(
            Instant::now() < deadline,
            "the slot of a gone client was never freed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn one_token_holds_at_most_its_share_of_the_streams() {
    let app = spawn_app_with(
        NOW,
        HttpConfig {
            streams_max: 10,
            streams_per_token_max: 2,
            ..config()
        },
    )
    .await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    let other = app.token(Scope::Provider, Some("prv_a")).await;
    let mut one = reader(&app.base, "prv_a", &token, None).await;
    one.expect("summary").await;
    let mut two = reader(&app.base, "prv_a", &token, None).await;
    two.expect("summary").await;

    let refused = open(&app.base, "prv_a", &token, None).await;
    assert_eq!(refused.headers()["retry-after"], "5");
    assert_problem(refused, 429, "token_streams_exhausted").await;
    // The server's other slots stay for other tokens.
    let mut three = reader(&app.base, "prv_a", &other, None).await;
    three.expect("summary").await;

    drop(one);
    opens_once_freed(&app.base, &token, 429).await;
    drop((two, three));
}

#[tokio::test]
async fn a_stream_ends_once_its_token_is_revoked_or_has_expired() {
    let app = spawn_app_with(
        NOW,
        HttpConfig {
            stream_auth_recheck_ms: 300,
            ..config()
        },
    )
    .await;
    // Revoked while the stream is open: a `problem`, then the end.
    let (token, token_id) = app.token_with(Scope::Provider, Some("prv_a"), None).await;
    let mut revoked = reader(&app.base, "prv_a", &token, None).await;
    revoked.expect("summary").await;
    app.revoke(&token_id).await;
    let ended = revoked.expect("problem").await;
    assert_eq!(ended.data["code"], "token_revoked", "{ended:?}");
    assert!(
        revoked.next(Duration::from_secs(1)).await.is_none(),
        "the stream of a revoked token goes on"
    );

    // Expired while the stream is open (the ledger clock moves past its end).
    let (token, _) = app
        .token_with(Scope::Provider, Some("prv_a"), Some(1))
        .await;
    let mut expiring = reader(&app.base, "prv_a", &token, None).await;
    expiring.expect("summary").await;
    expiring.quiet(Duration::from_millis(700)).await;
    app.set_now("2026-11-27T12:00:00Z");
    let ended = expiring.expect("problem").await;
    assert_eq!(ended.data["code"], "token_expired", "{ended:?}");
}

/// The reports of a provider's GPUs (online intervals, jobs, benchmarks) are kept beside the
/// chain, so no entry tells of them: the stream sends `reliability` (no id) when their mark
/// moves, and on connect when the client's mark is not the current one.
#[tokio::test]
async fn the_stream_tells_when_the_gpus_reliability_reports_move() {
    let app = spawn_app_with(NOW, config()).await;
    http_support::seed(
        &app.ledger,
        r#"{"type":"gpu.schedule","schedule_id":"s-a0","gpu_id":"gpu_a0","effective_from":"2026-11-01T00:00:00Z","time_zone":"UTC","hours":"24/7"}"#,
    )
    .await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    let admin = app.token(Scope::Admin, None).await;
    let before = app
        .get_json(&token, "/v1/providers/prv_a/reliability")
        .await;
    let mark = before["reports_mark"].as_str().unwrap().to_owned();

    // The agent's report of one online interval (sent twice below).
    let post_online = || {
        app.post(
            Some(&admin),
            "/v1/gpus/online",
            json!({"intervals": [{"report_id": "o1", "gpu_id": "gpu_a0",
                "started_at": "2026-11-01T00:00:00Z", "ended_at": "2026-11-25T12:00:00Z"}]})
            .to_string(),
        )
    };
    let mut s = reader(&app.base, "prv_a", &token, None).await;
    let summary = s.expect("summary").await;
    s.quiet(Duration::from_millis(400)).await;
    // An agent's online interval: no ledger event, a `reliability` event with the new score.
    let r = post_online().await;
    assert_eq!(r.json::<Value>().await.unwrap()["accepted"], 1);
    let moved = s.expect("reliability").await;
    assert_eq!(moved.id, None, "not a ledger position");
    let after = app
        .get_json(&token, "/v1/providers/prv_a/reliability")
        .await;
    assert_eq!(moved.data["provider_id"], "prv_a");
    assert_eq!(moved.data["reports_mark"], after["reports_mark"]);
    assert_ne!(moved.data["reports_mark"], mark.as_str());
    assert_eq!(moved.data["score_bps"], after["score_bps"]);
    assert_ne!(
        after["score_bps"], before["score_bps"],
        "online time raised it"
    );
    s.quiet(Duration::from_millis(400)).await;
    // The same interval again is a duplicate: nothing moved, nothing sent.
    let r = post_online().await;
    assert_eq!(r.json::<Value>().await.unwrap()["duplicate"], 1);
    s.quiet(Duration::from_millis(400)).await;

    // A page that shows an older mark hears of the change on connect, even when resuming at
    // the ledger's head; one that shows the current mark hears nothing.
    let stale = format!("{}/v1/providers/prv_a/stream?reports_mark={mark}", app.base);
    let response = reqwest::Client::new()
        .get(&stale)
        .bearer_auth(&token)
        .header("Last-Event-ID", id_of(&summary).to_string())
        .send()
        .await
        .unwrap();
    let mut resumed = Reader {
        response,
        buffer: String::new(),
    };
    let caught_up = resumed.expect("reliability").await;
    assert_eq!(caught_up.data["reports_mark"], after["reports_mark"]);
    resumed.quiet(Duration::from_millis(400)).await;
    let current = format!(
        "{}/v1/providers/prv_a/stream?reports_mark={}",
        app.base,
        after["reports_mark"].as_str().unwrap()
    );
    let response = reqwest::Client::new()
        .get(&current)
        .bearer_auth(&token)
        .header("Last-Event-ID", id_of(&summary).to_string())
        .send()
        .await
        .unwrap();
    let mut shown = Reader {
        response,
        buffer: String::new(),
    };
    shown.quiet(Duration::from_millis(500)).await;
}
