//! API tokens: hashed storage, scopes, provider isolation, expiry, revocation, CLI.

mod common;
mod http_support;

use serde_json::Value;
use settle::auth::{Scope, TokenError, revoke_token};
use settle::ledger::Applied;
use sha2::{Digest, Sha256};
use sqlx::Row;

use http_support::{assert_problem, spawn_app};

const NOW: &str = "2026-11-25T12:00:00Z";

const DASHBOARD: [&str; 6] = [
    "summary",
    "earnings",
    "earnings.csv",
    "gpus",
    "payouts",
    "payouts.csv",
];

#[tokio::test]
async fn tokens_authenticate_by_hash_and_scope() {
    let app = spawn_app(NOW).await;
    let (token, token_id) = app.token_with(Scope::Provider, Some("prv_a"), None).await;
    let summary = "/v1/providers/prv_a/summary";
    assert_eq!(app.get(Some(&token), summary).await.status(), 200);

    // Stored hashed: the row holds SHA-256 of the secret, never the token.
    let secret = token.rsplit_once('.').unwrap().1;
    let row =
        sqlx::query("SELECT token_hash, scope, provider_id FROM api_tokens WHERE token_id = $1")
            .bind(&token_id)
            .fetch_one(app.ledger.store.pool())
            .await
            .unwrap();
    let hash: Vec<u8> = row.get(0);
    assert_eq!(hash, Sha256::digest(secret.as_bytes()).to_vec());
    assert_eq!(row.get::<String, _>(1), "provider");
    assert_eq!(row.get::<Option<String>, _>(2).as_deref(), Some("prv_a"));
    // The table is append-only: its trigger refuses the UPDATE (same message on both
    // databases).
    let refused = sqlx::query("UPDATE api_tokens SET scope = 'admin'")
        .execute(app.ledger.store.pool())
        .await
        .expect_err("UPDATE of api_tokens accepted");
    assert!(
        refused
            .to_string()
            .contains("append-only table api_tokens: UPDATE refused"),
        "{refused}"
    );

    // No token, another scheme, a malformed token, a wrong secret: 401.
    assert_problem(app.get(None, summary).await, 401, "unauthenticated").await;
    let r = app
        .client
        .get(app.url(summary))
        .header("authorization", "Basic YTpi")
        .send()
        .await
        .unwrap();
    assert!(r.headers().contains_key("www-authenticate"));
    assert_problem(r, 401, "unauthenticated").await;
    assert_problem(
        app.get(Some("garbage"), summary).await,
        401,
        "invalid_token",
    )
    .await;
    let wrong_secret = format!("stl_{token_id}.{}", "0".repeat(64));
    assert_problem(
        app.get(Some(&wrong_secret), summary).await,
        401,
        "invalid_token",
    )
    .await;
    let unknown_id = format!("stl_tok_0000000000000000.{secret}");
    assert_problem(
        app.get(Some(&unknown_id), summary).await,
        401,
        "invalid_token",
    )
    .await;

    // Wrong scope: 403.
    let ingest = app.token(Scope::Ingest, Some("prv_a")).await;
    let metering = app.token(Scope::Metering, None).await;
    for t in [&ingest, &metering] {
        for route in DASHBOARD {
            let r = app
                .get(Some(t), &format!("/v1/providers/prv_a/{route}"))
                .await;
            assert_problem(r, 403, "forbidden_scope").await;
        }
    }
    let body = r#"{"adjustment_id":"a1","provider_id":"prv_a","amount_usdc":"1","reason":"x"}"#;
    for t in [&token, &ingest, &metering] {
        assert_problem(
            app.post(Some(t), "/v1/admin/adjustments", body).await,
            403,
            "forbidden_scope",
        )
        .await;
    }
}

#[tokio::test]
async fn a_provider_never_sees_another_provider() {
    let app = spawn_app(NOW).await;
    http_support::usage(
        &app.ledger,
        "b1",
        "prv_b",
        "gpu_b0",
        "2026-11-24T10:00:00Z",
        "2026-11-24T11:00:00Z",
    )
    .await;
    let a = app.token(Scope::Provider, Some("prv_a")).await;
    let admin = app.token(Scope::Admin, None).await;
    for route in DASHBOARD {
        // Another provider's id answers exactly like an id that does not exist.
        let other = assert_problem(
            app.get(Some(&a), &format!("/v1/providers/prv_b/{route}"))
                .await,
            404,
            "not_found",
        )
        .await;
        let none = assert_problem(
            app.get(Some(&a), &format!("/v1/providers/prv_zz/{route}"))
                .await,
            404,
            "not_found",
        )
        .await;
        assert_eq!(
            other["detail"].as_str().unwrap().replace("prv_b", "?"),
            none["detail"].as_str().unwrap().replace("prv_zz", "?")
        );
        assert_problem(
            app.get(Some(&admin), &format!("/v1/providers/prv_zz/{route}"))
                .await,
            404,
            "not_found",
        )
        .await;
        assert_eq!(
            app.get(Some(&admin), &format!("/v1/providers/prv_b/{route}"))
                .await
                .status(),
            200
        );
        assert_eq!(
            app.get(Some(&a), &format!("/v1/providers/prv_a/{route}"))
                .await
                .status(),
            200
        );
    }
    let own = app.get_json(&a, "/v1/providers/prv_a/summary").await;
    assert_eq!(own["week_to_date"]["gross_usdc"], "0.000000");
    let b = app.get_json(&admin, "/v1/providers/prv_b/summary").await;
    assert_eq!(b["week_to_date"]["gross_usdc"], "3.000000");
}

#[tokio::test]
async fn expired_and_revoked_tokens_are_refused() {
    let app = spawn_app(NOW).await;
    let path = "/v1/providers/prv_a/summary";
    let (expiring, _) = app
        .token_with(Scope::Provider, Some("prv_a"), Some(1))
        .await;
    app.set_now("2026-11-26T11:59:59.999Z");
    assert_eq!(app.get(Some(&expiring), path).await.status(), 200);
    app.set_now("2026-11-26T12:00:00Z");
    assert_problem(app.get(Some(&expiring), path).await, 401, "token_expired").await;

    let (token, token_id) = app.token_with(Scope::Admin, None, None).await;
    assert_eq!(app.get(Some(&token), path).await.status(), 200);
    let pool = app.ledger.store.pool();
    assert_eq!(
        revoke_token(pool, &token_id, app.ledger.now_ms())
            .await
            .unwrap(),
        Applied::Accepted
    );
    assert_eq!(
        revoke_token(pool, &token_id, app.ledger.now_ms())
            .await
            .unwrap(),
        Applied::Duplicate
    );
    match revoke_token(pool, "tok_nope", app.ledger.now_ms()).await {
        Err(TokenError::Rejected(e)) => assert_eq!(e.code, "unknown_token", "{e}"),
        other => panic!("revoking an unknown token: {other:?}"),
    }
    assert_problem(app.get(Some(&token), path).await, 401, "token_revoked").await;
    let r = app
        .post(Some(&token), "/v1/usage", r#"{"events":[]}"#)
        .await;
    assert_problem(r, 401, "token_revoked").await;
}

#[tokio::test]
async fn token_commands_of_the_cli() {
    let app = spawn_app(NOW).await;
    let url = app.db.url.clone();
    let (code, out, err) = common::run_cli(
        &url,
        &[
            "--now",
            NOW,
            "--format",
            "json",
            "token",
            "create",
            "--scope",
            "ingest",
            "--provider",
            "prv_a",
            "--label",
            "agent 19",
            "--expires-in-days",
            "30",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let created: Value = serde_json::from_str(&out).unwrap();
    let token = created["token"].as_str().unwrap().to_owned();
    let token_id = created["token_id"].as_str().unwrap().to_owned();
    assert!(token.starts_with(&format!("stl_{token_id}.")));
    assert_eq!(created["expires_at"], "2026-12-25T12:00:00.000Z");
    let r = app
        .post(Some(&token), "/v1/usage", r#"{"events":[]}"#)
        .await;
    assert_eq!(r.status(), 200);

    let (code, out, _) = common::run_cli(&url, &["--now", NOW, "token", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&token_id) && out.contains("agent 19") && out.contains("active"),
        "{out}"
    );
    let secret = token.rsplit_once('.').unwrap().1;
    assert!(!out.contains(secret));

    let (code, out, err) = common::run_cli(&url, &["--now", NOW, "token", "revoke", &token_id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("accepted"));
    assert_problem(
        app.post(Some(&token), "/v1/usage", r#"{"events":[]}"#)
            .await,
        401,
        "token_revoked",
    )
    .await;
    let (_, out, _) = common::run_cli(&url, &["--now", NOW, "--format", "csv", "token", "list"]);
    assert!(out.lines().nth(1).unwrap().contains(",revoked,"), "{out}");

    for args in [
        &["token", "create", "--scope", "provider"][..],
        &["token", "create", "--scope", "admin", "--provider", "prv_a"][..],
        &[
            "token",
            "create",
            "--scope",
            "ingest",
            "--provider",
            "prv_zz",
        ][..],
        &["token", "create", "--scope", "root"][..],
        &["token", "revoke", "tok_nope"][..],
    ] {
        let mut full = vec!["--now", NOW];
        full.extend_from_slice(args);
        let (code, _, err) = common::run_cli(&url, &full);
        assert_ne!(code, 0, "{args:?} succeeded");
        assert!(!err.is_empty());
    }
}
