//! Helpers of the HTTP tests: the real server on port 0 over a fresh test database, tokens,
//! seeding through the ledger's own commands, and a bearer-authenticated client.

use std::sync::Arc;

use serde_json::Value;
use settle::auth::{NewToken, Scope, create_token};
use settle::config::{AuthConfig, HttpConfig};
use settle::domain::ids::ProviderId;
use settle::domain::time::parse_rfc3339_ms;
use settle::http::Application;
use settle::ledger::ingest::{SenderScope, UsageInput, UsageResult};
use settle::ledger::{Actor, Ledger, ManualClock};
use settle::wire::import::{Command, apply, parse_line};

use crate::common::TestDb;

pub struct TestApp {
    pub db: TestDb,
    pub ledger: Ledger,
    pub clock: Arc<ManualClock>,
    pub base: String,
    pub client: reqwest::Client,
}

/// Two providers with GPUs and rates: `prv_a` (community, 20 % fee) with `gpu_a0`
/// (H100-80GB at 2.49) and `gpu_a1` (A100-80GB at 1.8); `prv_b` with `gpu_b0` (H100-80GB
/// at 3).
pub const REGISTRY: &str = r#"
{"type":"provider.register","provider_id":"prv_a","name":"Acme GPU","email":"ops@acme.test","tier":"community","schedule":"weekly"}
{"type":"provider.register","provider_id":"prv_b","name":"Bravo GPU","email":"ops@bravo.test","tier":"community","schedule":"monthly"}
{"type":"gpu.register","gpu_id":"gpu_a0","provider_id":"prv_a","model":"H100-80GB"}
{"type":"gpu.register","gpu_id":"gpu_a1","provider_id":"prv_a","model":"A100-80GB"}
{"type":"gpu.register","gpu_id":"gpu_b0","provider_id":"prv_b","model":"H100-80GB"}
{"type":"rate.set","provider_id":"prv_a","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2026-01-01T00:00:00Z"}
{"type":"rate.set","provider_id":"prv_a","model":"A100-80GB","rate_usdc_per_hour":"1.8","effective_from":"2026-01-01T00:00:00Z"}
{"type":"rate.set","provider_id":"prv_b","model":"H100-80GB","rate_usdc_per_hour":"3","effective_from":"2026-01-01T00:00:00Z"}
"#;

/// A server over a fresh database whose ledger clock stands at `now`, with [`REGISTRY`].
pub async fn spawn_app(now: &str) -> TestApp {
    spawn_app_with(now, HttpConfig::default()).await
}

pub async fn spawn_app_with(now: &str, config: HttpConfig) -> TestApp {
    let db = TestDb::new().await;
    let app = serve_db(db, now, config).await;
    seed(&app.ledger, REGISTRY).await;
    app
}

/// A server over `db` as it is, whose ledger clock stands at `now`.
pub async fn serve_db(db: TestDb, now: &str, mut config: HttpConfig) -> TestApp {
    let (ledger, clock) = db.ledger_at(now).await;
    config.bind = "127.0.0.1:0".into();
    let app = Application::build(config, ledger.clone())
        .await
        .expect("bind");
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    TestApp {
        db,
        ledger,
        clock,
        base,
        client: reqwest::Client::new(),
    }
}

/// Applies NDJSON command lines through the ledger; every line must be accepted.
pub async fn seed(ledger: &Ledger, lines: &str) {
    let actor = Actor::operator("test");
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        let command = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        if let Command::Usage(u) = &command {
            let r = ledger
                .ingest_usage(std::slice::from_ref(u), &SenderScope::Admin, &actor)
                .await
                .expect("ingest");
            assert!(
                matches!(r[0], UsageResult::Accepted { .. }),
                "{line}: {r:?}"
            );
        } else {
            apply(ledger, &command, &actor)
                .await
                .unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }
}

/// Books one usage event on `gpu` of `provider` over `[start, end)` at the price book rate.
pub async fn usage(
    ledger: &Ledger,
    event_id: &str,
    provider: &str,
    gpu: &str,
    start: &str,
    end: &str,
) {
    let r = ledger
        .ingest_usage(
            &[UsageInput {
                event_id: Some(event_id.into()),
                provider_id: Some(provider.into()),
                gpu_id: Some(gpu.into()),
                rental_id: None,
                started_at: Some(start.into()),
                ended_at: Some(end.into()),
                rate_usdc_per_hour: None,
            }],
            &SenderScope::Admin,
            &Actor::operator("test"),
        )
        .await
        .expect("ingest");
    assert!(matches!(r[0], UsageResult::Accepted { .. }), "{r:?}");
}

impl TestApp {
    /// A token of `scope` (bound to `provider` when given), created at the ledger clock.
    pub async fn token(&self, scope: Scope, provider: Option<&str>) -> String {
        self.token_with(scope, provider, None).await.0
    }

    /// A token and its id.
    pub async fn token_with(
        &self,
        scope: Scope,
        provider: Option<&str>,
        expires_in_days: Option<i64>,
    ) -> (String, String) {
        static NAMES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NAMES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let created = create_token(
            &self.ledger.store,
            &NewToken {
                scope,
                provider_id: provider.map(|p| ProviderId::parse(p).unwrap()),
                name: format!("test-{scope}-{n}"),
                label: "test".into(),
                expires_in_days,
                created_by: Actor::operator("test"),
                needs_approval: false,
            },
            &AuthConfig::default(),
            self.ledger.now_ms(),
        )
        .await
        .expect("create token");
        (created.token, created.info.token_id)
    }

    /// Revokes the token `token_id` now (as an operator would).
    pub async fn revoke(&self, token_id: &str) {
        settle::auth::revoke_token(
            &self.ledger.store,
            token_id,
            &Actor::operator("test"),
            self.ledger.now_ms(),
        )
        .await
        .expect("revoke");
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, token: Option<&str>, path: &str) -> reqwest::Response {
        let mut r = self.client.get(self.url(path));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send().await.expect("request")
    }

    /// GET expecting 200 JSON.
    pub async fn get_json(&self, token: &str, path: &str) -> Value {
        let r = self.get(Some(token), path).await;
        let status = r.status();
        let body = r.text().await.unwrap();
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    pub async fn post(
        &self,
        token: Option<&str>,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        let mut r = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send().await.expect("request")
    }

    pub fn set_now(&self, now: &str) {
        self.clock.set(parse_rfc3339_ms(now).unwrap());
    }
}

/// Asserts a problem+json response with `status` and `code`; returns the body.
pub async fn assert_problem(r: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(r.status().as_u16(), status);
    let content_type = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    assert_eq!(content_type, "application/problem+json");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status, "{body}");
    assert_eq!(body["type"], format!("urn:settle:problem:{code}"));
    assert!(body["title"].is_string() && body["detail"].is_string());
    body
}
