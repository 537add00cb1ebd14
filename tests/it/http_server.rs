//! The server that holds, against a real `settle serve` process on real sockets:
//! a client sending its headers one byte at a time is cut off while others are served;
//! SIGTERM finishes within the shutdown deadline whatever the clients do; past the
//! concurrency limit and its queue, 503 `overloaded` with Retry-After; a request that times
//! out inside its booking transaction books nothing, and re-sent it books once; `/metrics`
//! is not on the API listener; the failed-auth limiter never refuses a valid token and
//! believes X-Forwarded-For only from configured proxies.
//!
//! The waits are for states (a gauge on the metrics listener, a closed socket), with bounds
//! far above what a working server needs; every bound that matters is the server's own
//! configured timeout. ops/SECURITY.md lists what each test guards and how it fails when the
//! guard is removed.

use crate::common;
use crate::common::Tables;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use common::{TestDb, free_port, run_cli};
use serde_json::{Value, json};
use sqlx::Row;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A test database with provider `srv_a` (GPU `srv_a-g0`) and a metering and an admin token.
struct World {
    db: TestDb,
    metering: String,
    admin: String,
    /// Start of the usage slices: each event takes the next free minute of `srv_a-g0`.
    base_ms: i64,
    slot: AtomicI64,
    dir: tempfile::TempDir,
}

impl World {
    async fn new() -> World {
        let db = TestDb::new().await;
        let now = chrono::Utc::now();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("registry.ndjson");
        std::fs::write(
            &file,
            [
                r#"{"type":"provider.register","provider_id":"srv_a","name":"Provider A","email":"ops@a.test","tier":"community","schedule":"weekly","payout_method":{"kind":"solana","wallet":"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}}"#,
                r#"{"type":"gpu.register","gpu_id":"srv_a-g0","provider_id":"srv_a","model":"H100-80GB"}"#,
                r#"{"type":"rate.set","provider_id":"srv_a","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2020-01-01T00:00:00Z"}"#,
            ]
            .join("\n"),
        )
        .unwrap();
        let (code, out, err) = run_cli(
            &db.url,
            &["--now", &now.to_rfc3339(), "import", file.to_str().unwrap()],
        );
        assert_eq!(code, 0, "{out}{err}");
        let token = |scope: &str| {
            let (code, out, err) = run_cli(
                &db.url,
                &[
                    "--format", "json", "token", "create", "--scope", scope, "--name", scope,
                ],
            );
            assert_eq!(code, 0, "{out}{err}");
            serde_json::from_str::<Value>(&out).unwrap()["token"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let (metering, admin) = (token("metering"), token("admin"));
        World {
            db,
            metering,
            admin,
            base_ms: now.timestamp_millis() / 60_000 * 60_000 - 3 * 86_400_000,
            slot: AtomicI64::new(0),
            dir,
        }
    }

    /// A usage batch of `n` one-minute events `{prefix}-{i}` on fresh minutes.
    fn batch(&self, prefix: &str, n: usize) -> Value {
        let events: Vec<Value> = (0..n)
            .map(|i| {
                let start = self.base_ms + self.slot.fetch_add(1, Ordering::SeqCst) * 60_000;
                json!({"event_id": format!("{prefix}-{i}"), "provider_id": "srv_a", "gpu_id": "srv_a-g0",
                       "started_at": settle::domain::time::format_ms(start),
                       "ended_at": settle::domain::time::format_ms(start + 60_000)})
            })
            .collect();
        json!({ "events": events })
    }

    /// `settle serve --no-scheduler` with `env` on top of its own API and metrics ports.
    async fn serve(&self, env: &[(&str, &str)]) -> Server {
        let (port, metrics_port) = (free_port(), free_port());
        let log = self.dir.path().join(format!("serve-{port}.log"));
        let mut cmd = crate::common::settle_command();
        cmd.args(["--database", &self.db.url, "serve", "--no-scheduler"])
            .env("SETTLE_HTTP__BIND", format!("127.0.0.1:{port}"))
            .env(
                "SETTLE_HTTP__METRICS_BIND",
                format!("127.0.0.1:{metrics_port}"),
            )
            .env("RUST_LOG", "info")
            // The bank routes write files with the built-in example originator: a test.
            .env("SETTLE_BANK__ALLOW_EXAMPLE_ORIGINATOR", "true")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let server = Server {
            child: Some(cmd.spawn().expect("start settle serve")),
            port,
            metrics_port,
            log,
        };
        server.wait_ready().await;
        server
    }

    async fn usage_count(&self, prefix: &str) -> i64 {
        let store = self.db.store().await;
        let n: i64 = sqlx::query(
            "SELECT COUNT(*) FROM events WHERE event_type = 'usage.recorded' AND idem_key LIKE $1",
        )
        .bind(format!("usage:{prefix}-%"))
        .fetch_one(store.pool())
        .await
        .unwrap()
        .get(0);
        store.close().await;
        n
    }
}

struct Server {
    child: Option<Child>,
    port: u16,
    metrics_port: u16,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_ready(&self) {
        let client = reqwest::Client::new();
        for _ in 0..600 {
            if let Ok(r) = client.get(self.url("/readyz")).send().await
                && r.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("settle serve did not become ready:\n{}", self.log());
    }

    async fn metrics(&self) -> String {
        reqwest::get(format!("http://127.0.0.1:{}/metrics", self.metrics_port))
            .await
            .expect("the metrics listener answers")
            .text()
            .await
            .unwrap()
    }

    /// Waits until the metrics listener shows `line` (a sample such as
    /// `settle_http_requests_running 1`).
    async fn wait_metric(&self, line: &str) {
        let mut text = String::new();
        for _ in 0..500 {
            text = self.metrics().await;
            if text.lines().any(|l| l == line) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the metrics never showed {line:?}:\n{text}\n{}", self.log());
    }

    fn sigterm(&self) {
        let pid = self.child.as_ref().unwrap().id();
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The exit code, when the process exits within `bound`.
    fn exit_within(&mut self, bound: Duration) -> Option<i32> {
        let started = Instant::now();
        let child = self.child.as_mut().unwrap();
        while started.elapsed() < bound {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(("127.0.0.1", self.port)).await.unwrap()
    }
}

/// The head of `POST /v1/usage` with `body`'s length, closing after the answer.
fn usage_head(token: &str, body: &[u8]) -> String {
    format!(
        "POST /v1/usage HTTP/1.1\r\nHost: settle.test\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
}

/// Reads what the server sends until it closes (or resets) the connection.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// The status and JSON body of a raw HTTP/1.1 response.
fn parse_response(raw: &[u8]) -> (u16, Value) {
    let text = String::from_utf8_lossy(raw);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// Asserts a problem+json answer with `status`, `code` and a `Retry-After`.
async fn assert_problem(r: reqwest::Response, status: u16, code: &str, retry_after: bool) {
    let (got, headers, url) = (r.status().as_u16(), r.headers().clone(), r.url().clone());
    let text = r.text().await.unwrap();
    assert_eq!(got, status, "{url}: {text}");
    assert_eq!(
        headers.get("content-type").unwrap(),
        "application/problem+json"
    );
    assert_eq!(headers.get("retry-after").is_some(), retry_after, "{url}");
    if retry_after && status == 503 {
        assert_eq!(headers["retry-after"], "1");
    }
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status);
    assert_eq!(body["type"], format!("urn:settle:problem:{code}"));
}

fn statuses(body: &Value) -> Vec<String> {
    body["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {body}"))
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_headers_byte_by_byte_is_cut_off_while_others_are_served() {
    let w = World::new().await;
    let server = w
        .serve(&[("SETTLE_HTTP__HEADER_READ_TIMEOUT_MS", "1000")])
        .await;
    let client = reqwest::Client::new();
    let head = b"GET /healthz HTTP/1.1\r\nHost: settle.test\r\nUser-Agent: slowloris/1.0\r\n\
                 Accept: application/json\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let (mut read, mut write) = server.connect().await.into_split();
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let _ = read.read_to_end(&mut got).await;
        got
    });
    let mut sent = 0;
    let mut served_meanwhile = 0;
    while sent < head.len() && !reader.is_finished() {
        if write.write_all(&head[sent..=sent]).await.is_err() {
            break;
        }
        sent += 1;
        let tick = Instant::now();
        // Others are answered meanwhile, including a booking.
        let r = client
            .post(server.url("/v1/usage"))
            .bearer_auth(&w.metering)
            .json(&w.batch(&format!("fast{sent}"), 1))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(statuses(&r.json().await.unwrap()), ["accepted"]);
        served_meanwhile += 1;
        tokio::time::sleep(Duration::from_millis(200).saturating_sub(tick.elapsed())).await;
    }
    assert!(
        sent < head.len(),
        "the slow client sent its whole head ({sent} bytes, one every 200 ms) without being cut off"
    );
    let answer = reader.await.unwrap();
    assert!(
        answer.is_empty(),
        "closed without an answer: {:?}",
        String::from_utf8_lossy(&answer)
    );
    assert!(
        served_meanwhile >= 3,
        "{served_meanwhile} requests served meanwhile"
    );
    assert!(
        server
            .metrics()
            .await
            .contains("settle_http_connections_closed_total{reason=\"header_timeout\"} 1")
    );
    // The server still serves after cutting it off.
    let r = client.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_slow_clients_connected_exits_within_the_shutdown_deadline() {
    let w = World::new().await;
    // Timeouts far beyond the test, so only the shutdown deadline can end the slow clients.
    let mut server = w
        .serve(&[
            ("SETTLE_HTTP__HEADER_READ_TIMEOUT_MS", "120000"),
            ("SETTLE_HTTP__REQUEST_TIMEOUT_MS", "120000"),
            ("SETTLE_HTTP__SHUTDOWN_DEADLINE_MS", "1000"),
        ])
        .await;
    // One client in the middle of its headers, one in the middle of a usage body (its
    // handler running).
    let mut slow_head = server.connect().await;
    slow_head
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: set")
        .await
        .unwrap();
    let body = serde_json::to_vec(&w.batch("held", 5)).unwrap();
    let mut slow_body = server.connect().await;
    slow_body
        .write_all(usage_head(&w.metering, &body).as_bytes())
        .await
        .unwrap();
    slow_body.write_all(&body[..body.len() / 2]).await.unwrap();
    server.wait_metric("settle_http_requests_running 1").await;
    let r = reqwest::get(server.url("/healthz")).await.unwrap();
    assert_eq!(r.status(), 200, "others are served");

    let signalled = Instant::now();
    server.sigterm();
    // The deadline is 1 s; without it the slow clients would hold the server for 120 s.
    let code = server.exit_within(Duration::from_secs(15));
    assert_eq!(
        code,
        Some(0),
        "settle serve did not exit cleanly within the shutdown deadline (+ margin) after \
         SIGTERM ({:?} since):\n{}",
        signalled.elapsed(),
        server.log()
    );
    assert!(
        server
            .log()
            .contains("shutdown deadline passed: dropping the connections still open"),
        "{}",
        server.log()
    );
    assert!(read_until_closed(&mut slow_head).await.is_empty());
    assert!(
        read_until_closed(&mut slow_body).await.is_empty(),
        "the request in flight was dropped, not answered"
    );

    // Nothing of the dropped request was booked; sent again it is booked once.
    assert_eq!(w.usage_count("held").await, 0);
    let server = w.serve(&[]).await;
    let client = reqwest::Client::new();
    for expected in ["accepted", "duplicate"] {
        let r = client
            .post(server.url("/v1/usage"))
            .bearer_auth(&w.metering)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(statuses(&r.json().await.unwrap()), [expected; 5]);
    }
    assert_eq!(w.usage_count("held").await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_concurrency_limit_and_its_queue_the_answer_is_503_overloaded() {
    let w = World::new().await;
    let server = w
        .serve(&[
            ("SETTLE_HTTP__CONCURRENCY_MAX", "1"),
            ("SETTLE_HTTP__QUEUE_MAX", "1"),
            ("SETTLE_HTTP__REQUEST_TIMEOUT_MS", "120000"),
        ])
        .await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    // A holds the one slot: its handler waits for the rest of its body.
    let body_a = serde_json::to_vec(&w.batch("gate-a", 1)).unwrap();
    let mut a = server.connect().await;
    a.write_all(usage_head(&w.metering, &body_a).as_bytes())
        .await
        .unwrap();
    a.write_all(&body_a[..10]).await.unwrap();
    server.wait_metric("settle_http_requests_running 1").await;
    // B waits in the queue.
    let b = tokio::spawn({
        let (client, url, token) = (client.clone(), server.url("/v1/usage"), w.metering.clone());
        let body = w.batch("gate-b", 1);
        async move { client.post(url).bearer_auth(token).json(&body).send().await }
    });
    server.wait_metric("settle_http_requests_queued 1").await;
    // C finds both full: 503 overloaded at once, with Retry-After.
    let c = client
        .get(server.url("/v1/providers/srv_a/summary"))
        .bearer_auth(&w.admin)
        .send()
        .await
        .expect("answered at once, not queued");
    assert_problem(c, 503, "overloaded", true).await;
    let r = client
        .post(server.url("/v1/usage"))
        .bearer_auth(&w.metering)
        .json(&w.batch("gate-c", 1))
        .send()
        .await
        .unwrap();
    assert_problem(r, 503, "overloaded", true).await;
    // Probes are not held behind the queue.
    let r = client.get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        server
            .metrics()
            .await
            .contains("settle_http_requests_shed_total{reason=\"overloaded\"} 2")
    );

    // A finishes; then B runs; then there is room again.
    a.write_all(&body_a[10..]).await.unwrap();
    let (status, answer) = parse_response(&read_until_closed(&mut a).await);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(statuses(&answer), ["accepted"]);
    let b = b.await.unwrap().expect("B is answered once A is done");
    assert_eq!(b.status(), 200);
    assert_eq!(statuses(&b.json().await.unwrap()), ["accepted"]);
    let r = client
        .get(server.url("/v1/providers/srv_a/summary"))
        .bearer_auth(&w.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        w.usage_count("gate-c").await,
        0,
        "a refused request books nothing"
    );

    // The OpenAPI document tells clients about the 503.
    let doc: Value = client
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let documented = &doc["paths"]["/v1/usage"]["post"]["responses"]["503"];
    assert!(
        documented["headers"]["Retry-After"].is_object(),
        "{documented}"
    );
    assert_eq!(
        documented["content"]["application/problem+json"]["schema"]["$ref"],
        "#/components/schemas/Problem"
    );
}

/// Holds the write lock of `srv_a`'s stream from outside the server: on PostgreSQL its
/// advisory lock, on SQLite the database's write lock. A booking of `srv_a` then waits
/// inside its transaction.
struct StreamLock {
    conn: sqlx::pool::PoolConnection<sqlx::Any>,
    postgres: bool,
    _store: settle::store::Store,
}

impl StreamLock {
    async fn take(db: &TestDb) -> StreamLock {
        let store = db.store().await;
        let mut conn = store.pool().acquire().await.unwrap();
        let postgres = db.is_postgres();
        let sql = if postgres {
            "SELECT 1 FROM (SELECT pg_advisory_lock(hashtextextended('provider:srv_a', 0))) AS l"
        } else {
            "BEGIN IMMEDIATE"
        };
        sqlx::query(sql).execute(&mut *conn).await.unwrap();
        StreamLock {
            conn,
            postgres,
            _store: store,
        }
    }

    async fn release(mut self) {
        let sql = if self.postgres {
            "SELECT 1 FROM (SELECT pg_advisory_unlock(hashtextextended('provider:srv_a', 0))) AS l"
        } else {
            "ROLLBACK"
        };
        sqlx::query(sql).execute(&mut *self.conn).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_timed_out_inside_its_booking_books_nothing_and_once_when_resent() {
    let w = World::new().await;
    let server = w.serve(&[("SETTLE_HTTP__REQUEST_TIMEOUT_MS", "500")]).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let batch = w.batch("late", 50);
    let lock = StreamLock::take(&w.db).await;
    let r = client
        .post(server.url("/v1/usage"))
        .bearer_auth(&w.metering)
        .json(&batch)
        .send()
        .await
        .expect("answered by the request timeout");
    assert_problem(r, 503, "request_timeout", true).await;
    assert_eq!(w.usage_count("late").await, 0);
    lock.release().await;

    // The abandoned transaction was rolled back: the batch is booked once, all of it.
    for expected in ["accepted", "duplicate"] {
        let r = client
            .post(server.url("/v1/usage"))
            .bearer_auth(&w.metering)
            .json(&batch)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", server.log());
        assert_eq!(statuses(&r.json().await.unwrap()), [expected; 50]);
    }
    assert_eq!(w.usage_count("late").await, 50);
    assert!(
        server
            .metrics()
            .await
            .contains("settle_http_requests_shed_total{reason=\"request_timeout\"} 1")
    );
    let (code, out, err) = run_cli(&w.db.url, &["verify"]);
    assert_eq!(code, 0, "{out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_on_their_own_listener_or_behind_the_token() {
    assert_eq!(
        settle::config::HttpConfig::default().metrics_bind,
        "127.0.0.1:9090",
        "loopback by default"
    );
    let w = World::new().await;
    let client = reqwest::Client::new();
    // A metrics_bind (the default is one): not on the API listener, on metrics_bind.
    let server = w.serve(&[]).await;
    let r = client.get(server.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let text = server.metrics().await;
    assert!(text.contains("# TYPE "), "{text}");
    drop(server);

    // metrics_bind empty: on the API listener, to the token only.
    let token = "m".repeat(40);
    let server = w
        .serve(&[
            ("SETTLE_HTTP__METRICS_BIND", ""),
            ("SETTLE_HTTP__METRICS_TOKEN", &token),
        ])
        .await;
    let r = client.get(server.url("/metrics")).send().await.unwrap();
    assert_problem(r, 401, "unauthenticated", false).await;
    let r = client
        .get(server.url("/metrics"))
        .bearer_auth(&w.admin)
        .send()
        .await
        .unwrap();
    assert_problem(r, 401, "invalid_token", false).await;
    let r = client
        .get(server.url("/metrics"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("# TYPE "));
    drop(server);

    // Neither: no /metrics at all.
    let server = w.serve(&[("SETTLE_HTTP__METRICS_BIND", "")]).await;
    let r = client.get(server.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    drop(server);

    // A short token is refused at start.
    let (code, _, err) = {
        let out = crate::common::settle_command()
            .args(["--database", &w.db.url, "serve", "--no-scheduler"])
            .env("SETTLE_HTTP__BIND", "127.0.0.1:0")
            .env("SETTLE_HTTP__METRICS_BIND", "")
            .env("SETTLE_HTTP__METRICS_TOKEN", "short")
            .env("SETTLE_BANK__ALLOW_EXAMPLE_ORIGINATOR", "true")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_ne!(code, Some(0));
    assert!(err.contains("metrics_token must be at least 32"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_auth_never_locks_out_a_valid_token_and_forwarded_addresses_need_a_trusted_proxy() {
    let w = World::new().await;
    let client = reqwest::Client::new();
    let summary = "/v1/providers/srv_a/summary";
    let get = |server: &Server, token: &str, forwarded: Option<&str>| {
        let mut r = client.get(server.url(summary)).bearer_auth(token);
        if let Some(f) = forwarded {
            r = r.header("x-forwarded-for", f);
        }
        r.send()
    };
    let bad =
        "stl_tok_0011223344556677.00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    // Behind a trusted proxy (this test connects from 127.0.0.1): per forwarded client.
    let server = w
        .serve(&[("SETTLE_HTTP__TRUSTED_PROXIES", r#"["127.0.0.1"]"#)])
        .await;
    for i in 0..20 {
        let r = get(&server, bad, Some("203.0.113.9")).await.unwrap();
        assert_eq!(r.status(), 401, "failure {i}");
    }
    for _ in 0..5 {
        let r = get(&server, bad, Some("203.0.113.9")).await.unwrap();
        assert_problem(r, 429, "too_many_auth_failures", true).await;
    }
    // The locked-out client's own valid token still passes.
    let r = get(&server, &w.admin, Some("203.0.113.9")).await.unwrap();
    assert_eq!(r.status(), 200);
    // Others behind the same proxy are not locked out, even when they fail.
    let r = get(&server, &w.admin, None).await.unwrap();
    assert_eq!(r.status(), 200);
    let r = get(&server, bad, Some("198.51.100.4")).await.unwrap();
    assert_problem(r, 401, "invalid_token", false).await;
    // A value the client put in front of the header does not change its key.
    let r = get(&server, bad, Some("198.51.100.77, 203.0.113.9"))
        .await
        .unwrap();
    assert_problem(r, 429, "too_many_auth_failures", true).await;
    drop(server);

    // No trusted proxy: X-Forwarded-For is ignored, so a client cannot pick fresh keys.
    let server = w.serve(&[]).await;
    for i in 0..20 {
        let r = get(&server, bad, Some(&format!("192.0.2.{i}")))
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "failure {i}");
    }
    let r = get(&server, bad, Some("192.0.2.200")).await.unwrap();
    assert_problem(r, 429, "too_many_auth_failures", true).await;
    let r = get(&server, &w.admin, None).await.unwrap();
    assert_eq!(r.status(), 200, "a valid token is never refused");
}
