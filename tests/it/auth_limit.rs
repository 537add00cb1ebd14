//! Failed authentications are limited per client address: 429 with Retry-After after
//! `auth_failures_max` failures in the window, as problem+json; a valid token still passes.
//! (tests/it/http_server.rs: the same behind a trusted proxy.)

use crate::http_support;

use http_support::spawn_app_with;
use settle::auth::Scope;
use settle::config::HttpConfig;

#[tokio::test]
async fn repeated_bad_tokens_get_429_but_a_valid_token_still_passes() {
    let config = HttpConfig {
        auth_failures_max: 3,
        auth_failure_window_ms: 60_000,
        ..HttpConfig::default()
    };
    let app = spawn_app_with("2026-11-30T12:00:00Z", config).await;
    let good = app.token(Scope::Admin, None).await;
    let url = format!("{}/v1/admin/bank/batches", app.base);
    // A valid token works before any failure.
    let r = app
        .client
        .get(&url)
        .bearer_auth(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for i in 0..3 {
        let r = app
            .client
            .get(&url)
            .bearer_auth(format!("stl_nope{i}.secret"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "failure {i}");
    }
    let r = app
        .client
        .get(&url)
        .bearer_auth("stl_nope.secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_some());
    assert_eq!(
        r.headers().get("content-type").unwrap(),
        "application/problem+json"
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["code"], "too_many_auth_failures");
    // A valid token from the same address is never refused (behind a proxy every
    // client shares one address); its failures stay refused for the window.
    let r = app
        .client
        .get(&url)
        .bearer_auth(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = app
        .client
        .get(&url)
        .bearer_auth("stl_nope.secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
}

/// The failure table belongs to its server: a client blocked by one server of the process
/// (here, the other tests' servers too) is a stranger to another.
#[tokio::test]
async fn each_server_counts_the_failures_of_its_own_clients() {
    let config = HttpConfig {
        auth_failures_max: 2,
        auth_failure_window_ms: 60_000,
        ..HttpConfig::default()
    };
    let first = spawn_app_with("2026-11-30T12:00:00Z", config.clone()).await;
    let second = spawn_app_with("2026-11-30T12:00:00Z", config).await;
    let status = |app: &http_support::TestApp| {
        let url = format!("{}/v1/admin/bank/batches", app.base);
        let client = app.client.clone();
        async move {
            client
                .get(&url)
                .bearer_auth("stl_nope.secret")
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(status(&first).await, 401);
    assert_eq!(status(&first).await, 401);
    assert_eq!(
        status(&first).await,
        429,
        "the first server blocks the address"
    );
    assert_eq!(
        status(&second).await,
        401,
        "the second server has seen no failure of it"
    );
}
