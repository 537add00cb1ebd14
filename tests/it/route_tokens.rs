//! Every route of the OpenAPI document, with every kind of bearer, against a real `settle
//! serve` on the real clock.
//!
//! The server's own `/openapi.json` is read and each of its operations is called with no
//! token, an expired and a revoked token, an admin, a metering and an ingest token, and a
//! provider token on its own provider's routes and on another provider's. [`ROUTES`] states
//! the expected answer of each pair explicitly: a route whose scoping changes, an operation
//! the document gains without a row here, or a row the document lost, fails the test.
//!
//! To add a route (the approval routes, `/v1/admin/approvals…`): add a [`Route`] row with its
//! [`Rule`] and a request body that the allowed bearer sends; a path parameter that is not a
//! provider id gets [`UNKNOWN_ID`].
//!
//! Also here: a revocation recorded with `--now` a week ahead of the real clock refuses the
//! token at once (`settle token revoke` against a running `settle serve`).

use crate::common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{TestDb, free_port, run_cli};
use serde_json::Value;

/// Who calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    NoToken,
    /// An admin token past its expiry.
    Expired,
    /// An admin token revoked.
    Revoked,
    Admin,
    Metering,
    /// An ingest token of provider A.
    Ingest,
    /// A provider token of A, on A's routes.
    ProviderOwn,
    /// The same provider token of A, on B's routes (`{id}` = B).
    ProviderOther,
}

const EVERYONE: [Who; 8] = [
    Who::NoToken,
    Who::Expired,
    Who::Revoked,
    Who::Admin,
    Who::Metering,
    Who::Ingest,
    Who::ProviderOwn,
    Who::ProviderOther,
];

/// An expected answer: the status and, for a problem+json answer, its code.
type Expect = (u16, Option<&'static str>);

const OK: Expect = (200, None);

/// How a route is scoped.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// No token needed: every caller gets this.
    Open(Expect),
    /// Usage ingestion: ingest, metering and admin tokens get this.
    Usage(Expect),
    /// A provider's data: admin and the provider's own token get this; another provider's
    /// id answers 404 exactly like an unknown one.
    ProviderRead(Expect),
    /// Admin tokens only get this.
    AdminOnly(Expect),
}

/// One operation of the OpenAPI document and the body its allowed callers send.
struct Route {
    method: &'static str,
    path: &'static str,
    body: &'static str,
    rule: Rule,
}

const fn route(method: &'static str, path: &'static str, body: &'static str, rule: Rule) -> Route {
    Route {
        method,
        path,
        body,
        rule,
    }
}

/// The id put in a path parameter that is not a provider id: names nothing.
const UNKNOWN_ID: &str = "rt-unknown";

/// Every operation the document lists, with its expected answers.
const ROUTES: &[Route] = &[
    route("GET", "/healthz", "", Rule::Open(OK)),
    route("GET", "/readyz", "", Rule::Open(OK)),
    route("POST", "/v1/usage", r#"{"events":[]}"#, Rule::Usage(OK)),
    route(
        "POST",
        "/v1/gpus/online",
        r#"{"intervals":[]}"#,
        Rule::Usage(OK),
    ),
    route("GET", "/v1/providers/{id}", "", Rule::ProviderRead(OK)),
    route(
        "GET",
        "/v1/providers/{id}/summary",
        "",
        Rule::ProviderRead(OK),
    ),
    route(
        "GET",
        "/v1/providers/{id}/reliability",
        "",
        Rule::ProviderRead(OK),
    ),
    route(
        "GET",
        "/v1/providers/{id}/earnings",
        "",
        Rule::ProviderRead(OK),
    ),
    route(
        "GET",
        "/v1/providers/{id}/earnings.csv",
        "",
        Rule::ProviderRead(OK),
    ),
    route("GET", "/v1/providers/{id}/gpus", "", Rule::ProviderRead(OK)),
    route(
        "GET",
        "/v1/providers/{id}/stream",
        "",
        Rule::ProviderRead(OK),
    ),
    route(
        "GET",
        "/v1/providers/{id}/payouts",
        "",
        Rule::ProviderRead(OK),
    ),
    route(
        "GET",
        "/v1/providers/{id}/payouts.csv",
        "",
        Rule::ProviderRead(OK),
    ),
    route(
        "GET",
        "/v1/providers/{id}/statements/{payout_id}",
        "",
        Rule::ProviderRead((404, Some("statement_not_found"))),
    ),
    route(
        "GET",
        "/v1/providers/{id}/statement",
        "",
        Rule::ProviderRead((400, Some("invalid_range"))),
    ),
    route(
        "POST",
        "/v1/admin/usage/{event_id}/void",
        r#"{"reason":"route table"}"#,
        Rule::AdminOnly((404, Some("unknown_event"))),
    ),
    route(
        "POST",
        "/v1/admin/adjustments",
        r#"{"adjustment_id":"rt-adj-1","provider_id":"rt_a","amount_usdc":"1","reason":"route table"}"#,
        Rule::AdminOnly(OK),
    ),
    route(
        "POST",
        "/v1/admin/providers/{id}/erase",
        "",
        Rule::AdminOnly((404, Some("unknown_provider"))),
    ),
    route(
        "POST",
        "/v1/admin/import",
        r#"{"type":"gpu.register","gpu_id":"rt_a-g0","provider_id":"rt_a","model":"H100-80GB"}"#,
        Rule::AdminOnly(OK),
    ),
    route(
        "GET",
        "/v1/admin/runs/{kind}/{key}",
        "",
        Rule::AdminOnly((404, Some("unknown_run"))),
    ),
    route("GET", "/v1/admin/bank/batches", "", Rule::AdminOnly(OK)),
    route(
        "POST",
        "/v1/admin/bank/batches/generate",
        "",
        Rule::AdminOnly(OK),
    ),
    route(
        "GET",
        "/v1/admin/bank/batches/{id}",
        "",
        Rule::AdminOnly((404, Some("unknown_bank_batch"))),
    ),
    route(
        "GET",
        "/v1/admin/bank/batches/{id}/file",
        "",
        Rule::AdminOnly((404, Some("unknown_bank_batch"))),
    ),
    route(
        "POST",
        "/v1/admin/bank/batches/{id}/submitted",
        "",
        Rule::AdminOnly((404, Some("unknown_bank_batch"))),
    ),
    route(
        "POST",
        "/v1/admin/bank/batches/{id}/settled",
        "",
        Rule::AdminOnly((404, Some("unknown_bank_batch"))),
    ),
    route(
        "POST",
        "/v1/admin/bank/returns",
        r#"{"payout_id":"po-000000000000000000000000","code":"AC04"}"#,
        Rule::AdminOnly((404, Some("unknown_payout"))),
    ),
    route(
        "POST",
        "/v1/admin/bank/files",
        "not a bank file",
        Rule::AdminOnly((400, Some("unknown_format"))),
    ),
    route(
        "GET",
        "/v1/admin/bank/reconciliation",
        "",
        Rule::AdminOnly(OK),
    ),
    route("GET", "/v1/admin/approvals", "", Rule::AdminOnly(OK)),
    route(
        "GET",
        "/v1/admin/approvals/{id}",
        "",
        Rule::AdminOnly((404, Some("unknown_approval"))),
    ),
    route(
        "POST",
        "/v1/admin/approvals/{id}/approve",
        "",
        Rule::AdminOnly((404, Some("unknown_approval"))),
    ),
    route(
        "POST",
        "/v1/admin/approvals/{id}/reject",
        r#"{"reason":"route table"}"#,
        Rule::AdminOnly((404, Some("unknown_approval"))),
    ),
];

/// The expected answer of `who` on a route ruled by `rule`.
fn expected(rule: Rule, who: Who) -> Expect {
    use Who::*;
    let forbidden = (403, Some("forbidden_scope"));
    match (rule, who) {
        (Rule::Open(allowed), _) => allowed,
        (_, NoToken) => (401, Some("unauthenticated")),
        (_, Expired) => (401, Some("token_expired")),
        (_, Revoked) => (401, Some("token_revoked")),
        (Rule::Usage(allowed), Admin | Metering | Ingest) => allowed,
        (Rule::Usage(_), ProviderOwn | ProviderOther) => forbidden,
        (Rule::ProviderRead(allowed), Admin | ProviderOwn) => allowed,
        (Rule::ProviderRead(_), ProviderOther) => (404, Some("not_found")),
        (Rule::ProviderRead(_), Metering | Ingest) => forbidden,
        (Rule::AdminOnly(allowed), Admin) => allowed,
        (Rule::AdminOnly(_), Metering | Ingest | ProviderOwn | ProviderOther) => forbidden,
    }
}

/// The concrete path of `template` for `who`: `{id}` of a provider route is A (B for
/// [`Who::ProviderOther`]); other parameters name nothing that exists.
fn concrete(template: &str, who: Who) -> String {
    let provider = if who == Who::ProviderOther {
        "rt_b"
    } else {
        "rt_a"
    };
    let id = if template.starts_with("/v1/providers/") {
        provider
    } else {
        UNKNOWN_ID
    };
    template
        .replace("{id}", id)
        .replace("{event_id}", UNKNOWN_ID)
        .replace("{payout_id}", UNKNOWN_ID)
        .replace("{kind}", "weekly")
        .replace("{key}", "2026-11-23")
}

/// A `settle serve --no-scheduler` process on the real clock (killed on drop).
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    async fn start(db: &TestDb, dir: &std::path::Path) -> Server {
        let port = free_port();
        let log = dir.join(format!("serve-{port}.log"));
        let child = crate::common::settle_command()
            .args(["--database", &db.url, "serve", "--no-scheduler"])
            .env("SETTLE_HTTP__BIND", format!("127.0.0.1:{port}"))
            .env("SETTLE_HTTP__METRICS_BIND", "127.0.0.1:0")
            // Hundreds of deliberate 401s from one address: the limiter is not under test.
            .env("SETTLE_HTTP__AUTH_FAILURES_MAX", "1000000")
            .env("SETTLE_BANK__OUTBOX_DIR", dir.join("outbox"))
            .env("SETTLE_BANK__ALLOW_EXAMPLE_ORIGINATOR", "true")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start settle serve");
        let server = Server { child, port, log };
        let client = reqwest::Client::new();
        for _ in 0..600 {
            if let Ok(r) = client.get(server.url("/readyz")).send().await
                && r.status().is_success()
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "settle serve did not become ready:\n{}",
            std::fs::read_to_string(&server.log).unwrap_or_default()
        );
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

/// `settle token create` (extra args after the scope); returns (token, token_id).
fn create_token(db: &TestDb, args: &[&str]) -> (String, String) {
    let mut full = vec!["--format", "json"];
    full.extend_from_slice(args);
    let (code, out, err) = run_cli(&db.url, &full);
    assert_eq!(code, 0, "{args:?}: {out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    (
        v["token"].as_str().unwrap().to_owned(),
        v["token_id"].as_str().unwrap().to_owned(),
    )
}

/// Providers `rt_a` and `rt_b`, booked on the real clock.
fn registry(db: &TestDb, dir: &std::path::Path) {
    let file = dir.join("registry.ndjson");
    std::fs::write(
        &file,
        [
            r#"{"type":"provider.register","provider_id":"rt_a","name":"Provider A","email":"ops@a.test","tier":"community","schedule":"weekly"}"#,
            r#"{"type":"provider.register","provider_id":"rt_b","name":"Provider B","email":"ops@b.test","tier":"community","schedule":"weekly"}"#,
            r#"{"type":"rate.set","provider_id":"rt_a","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2020-01-01T00:00:00Z"}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let (code, out, err) = run_cli(&db.url, &["import", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}

/// The (method, path) operations of an OpenAPI document.
fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in [
            "get", "put", "post", "delete", "patch", "head", "options", "trace",
        ] {
            if item.get(method).is_some() {
                ops.insert((method.to_ascii_uppercase(), path.clone()));
            }
        }
    }
    ops
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_of_the_openapi_document_answers_each_bearer_as_scoped() {
    let db = TestDb::new().await;
    // A simulated-clock ledger: its admin and metering tokens work at once (on a real-clock
    // ledger each waits for a second operator: tests/it/control.rs).
    let (code, out, err) = run_cli(&db.url, &["migrate", "--simulated-clock"]);
    assert_eq!(code, 0, "{out}{err}");
    let dir = tempfile::tempdir().unwrap();
    // An admin token that expired yesterday: created two days ago on an empty ledger.
    let two_days_ago = (chrono::Utc::now() - chrono::Duration::days(2)).to_rfc3339();
    let (expired, _) = create_token(
        &db,
        &[
            "--now",
            &two_days_ago,
            "token",
            "create",
            "--scope",
            "admin",
            "--name",
            "expired",
            "--expires-in-days",
            "1",
        ],
    );
    registry(&db, dir.path());
    let scoped = |scope: &str, name: &str, provider: Option<&str>| {
        let mut args = vec!["token", "create", "--scope", scope, "--name", name];
        if let Some(p) = provider {
            args.extend(["--provider", p]);
        }
        create_token(&db, &args).0
    };
    let admin = scoped("admin", "admin", None);
    let metering = scoped("metering", "metering", None);
    let ingest = scoped("ingest", "agent-a", Some("rt_a"));
    let provider_a = scoped("provider", "dashboard-a", Some("rt_a"));
    let (revoked, revoked_id) = create_token(
        &db,
        &["token", "create", "--scope", "admin", "--name", "revoked"],
    );
    let (code, _, err) = run_cli(&db.url, &["token", "revoke", &revoked_id]);
    assert_eq!(code, 0, "{err}");
    let token_of = |who: Who| -> Option<&str> {
        match who {
            Who::NoToken => None,
            Who::Expired => Some(&expired),
            Who::Revoked => Some(&revoked),
            Who::Admin => Some(&admin),
            Who::Metering => Some(&metering),
            Who::Ingest => Some(&ingest),
            Who::ProviderOwn | Who::ProviderOther => Some(&provider_a),
        }
    };

    let server = Server::start(&db, dir.path()).await;
    let client = reqwest::Client::new();
    let doc: Value = client
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();

    // The document and the table list the same operations.
    let documented = operations(&doc);
    let tabled: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| (r.method.to_owned(), r.path.to_owned()))
        .collect();
    assert_eq!(tabled.len(), ROUTES.len(), "a route is listed twice");
    let untabled: Vec<_> = documented.difference(&tabled).collect();
    let undocumented: Vec<_> = tabled.difference(&documented).collect();
    assert!(
        untabled.is_empty() && undocumented.is_empty(),
        "documented without a row in ROUTES: {untabled:?}; in ROUTES but not documented: {undocumented:?}"
    );

    let mut failures = Vec::new();
    let mut calls = 0;
    for r in ROUTES {
        for who in EVERYONE {
            let path = concrete(r.path, who);
            let method = reqwest::Method::from_bytes(r.method.as_bytes()).unwrap();
            let mut request = client.request(method, server.url(&path));
            if r.method == "POST" {
                request = request
                    .header("content-type", "application/json")
                    .body(r.body);
            }
            if let Some(t) = token_of(who) {
                request = request.bearer_auth(t);
            }
            let response = request.send().await.unwrap();
            calls += 1;
            let status = response.status().as_u16();
            let problem = response
                .headers()
                .get("content-type")
                .is_some_and(|v| v.as_bytes() == b"application/problem+json");
            // A live stream never ends: its status is the answer (dropped unread).
            let streaming = response
                .headers()
                .get("content-type")
                .is_some_and(|v| v.as_bytes() == b"text/event-stream");
            let text = if streaming {
                String::new()
            } else {
                response.text().await.unwrap()
            };
            let code = if problem {
                serde_json::from_str::<Value>(&text).unwrap()["code"]
                    .as_str()
                    .map(str::to_owned)
            } else {
                None
            };
            let want = expected(r.rule, who);
            if (status, code.as_deref()) != want {
                failures.push(format!(
                    "{} {path} as {who:?}: got {status} {code:?}, want {} {:?}: {}",
                    r.method,
                    want.0,
                    want.1,
                    text.chars().take(200).collect::<String>()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {calls} answers differ from the table:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(calls, ROUTES.len() * EVERYONE.len());
}

/// A revocation recorded with `--now` a week ahead of the real clock takes effect at once:
/// `settle serve`, on the real clock, refuses the token right after `settle token revoke`,
/// and the revocation is dated at the real clock, not a week ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_recorded_a_week_ahead_refuses_the_token_at_once() {
    let db = TestDb::new().await;
    // A simulated-clock ledger accepts a `--now` a week ahead (a real-clock one refuses it:
    // tests/it/control.rs); the server still runs on the real clock.
    let (code, out, err) = run_cli(&db.url, &["migrate", "--simulated-clock"]);
    assert_eq!(code, 0, "{out}{err}");
    let dir = tempfile::tempdir().unwrap();
    let (token, token_id) = create_token(
        &db,
        &["token", "create", "--scope", "admin", "--name", "ops-bot"],
    );
    let server = Server::start(&db, dir.path()).await;
    let client = reqwest::Client::new();
    let get = || {
        client
            .get(server.url("/v1/admin/bank/batches"))
            .bearer_auth(&token)
            .send()
    };
    assert_eq!(get().await.unwrap().status(), 200);

    let before = chrono::Utc::now();
    let week_ahead = (before + chrono::Duration::days(7)).to_rfc3339();
    let (code, out, err) = run_cli(
        &db.url,
        &[
            "--now",
            &week_ahead,
            "--actor",
            "ops",
            "token",
            "revoke",
            &token_id,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let r = get().await.unwrap();
    assert_eq!(r.status(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "token_revoked", "{body}");

    let (code, out, err) = run_cli(&db.url, &["--format", "json", "token", "list"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let row = &listed[0];
    assert_eq!(row["token_id"], token_id.as_str());
    assert_eq!(row["status"], "revoked");
    assert_eq!(row["revoked_by"], "operator:ops");
    let revoked_at = chrono::DateTime::parse_from_rfc3339(row["revoked_at"].as_str().unwrap())
        .unwrap()
        .with_timezone(&chrono::Utc);
    assert!(
        revoked_at >= before - chrono::Duration::seconds(1) && revoked_at <= chrono::Utc::now(),
        "revoked_at {revoked_at} is not the real clock ({before})"
    );
}
