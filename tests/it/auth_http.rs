//! API tokens: hashed storage, scopes, provider isolation, expiry, revocation, CLI.

use crate::common;
use crate::common::Tables;
use crate::http_support;

use serde_json::Value;
use settle::auth::{AuthError, NewToken, Scope, TokenError, create_token, revoke_token, verify};
use settle::config::AuthConfig;
use settle::domain::time::{MS_PER_DAY, parse_rfc3339_ms};
use settle::ledger::{Actor, Applied};
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
    // databases), even to the owner of the tables (the runtime role has no right to try).
    let owner = app.db.owner_store().await;
    let refused = sqlx::query("UPDATE api_tokens SET scope = 'admin'")
        .execute(owner.pool())
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
    assert_eq!(
        revoke_token(
            &app.ledger.store,
            &token_id,
            &Actor::operator("test"),
            app.ledger.now_ms()
        )
        .await
        .unwrap(),
        Applied::Accepted
    );
    assert_eq!(
        revoke_token(
            &app.ledger.store,
            &token_id,
            &Actor::operator("test"),
            app.ledger.now_ms()
        )
        .await
        .unwrap(),
        Applied::Duplicate
    );
    match revoke_token(
        &app.ledger.store,
        "tok_nope",
        &Actor::operator("test"),
        app.ledger.now_ms(),
    )
    .await
    {
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
            "--actor",
            "alice",
            "--format",
            "json",
            "token",
            "create",
            "--scope",
            "ingest",
            "--provider",
            "prv_a",
            "--name",
            "agent-19",
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
    assert_eq!(created["name"], "agent-19");
    assert_eq!(created["created_by"], "operator:alice");
    let r = app
        .post(Some(&token), "/v1/usage", r#"{"events":[]}"#)
        .await;
    assert_eq!(r.status(), 200);

    // The events the token causes name it: `token:{name}#{token_id}`.
    let usage = r#"{"events":[{"event_id":"cli-1","provider_id":"prv_a","gpu_id":"gpu_a0","started_at":"2026-11-24T10:00:00Z","ended_at":"2026-11-24T11:00:00Z"}]}"#;
    let r: Value = app
        .post(Some(&token), "/v1/usage", usage)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["accepted"], 1, "{r}");
    let actor: String = sqlx::query("SELECT actor FROM events WHERE idem_key = 'usage:cli-1'")
        .fetch_one(app.ledger.store.pool())
        .await
        .unwrap()
        .get(0);
    assert_eq!(actor, format!("token:agent-19#{token_id}"));

    let (code, out, _) = common::run_cli(&url, &["--now", NOW, "token", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&token_id)
            && out.contains("agent-19")
            && out.contains("agent 19")
            && out.contains("operator:alice")
            && out.contains("active"),
        "{out}"
    );
    let secret = token.rsplit_once('.').unwrap().1;
    assert!(!out.contains(secret));

    // The name is unique among live tokens.
    let create = |name: &'static str, actor: &'static str| {
        let url = url.clone();
        move || {
            common::run_cli(
                &url,
                &[
                    "--now", NOW, "--actor", actor, "--format", "json", "token", "create",
                    "--scope", "admin", "--name", name,
                ],
            )
        }
    };
    let (code, _, err) = create("agent-19", "carol")();
    assert_ne!(code, 0);
    assert!(err.contains("token_name_taken"), "{err}");

    let (code, out, err) = common::run_cli(
        &url,
        &["--now", NOW, "--actor", "bob", "token", "revoke", &token_id],
    );
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
    let (_, out, _) = common::run_cli(&url, &["--now", NOW, "--format", "json", "token", "list"]);
    let listed: Value = serde_json::from_str(&out).unwrap();
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["token_id"] == token_id.as_str())
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(row["name"], "agent-19");
    assert_eq!(row["created_by"], "operator:alice");
    assert_eq!(row["status"], "revoked");
    assert_eq!(row["revoked_by"], "operator:bob");

    // Revoked, the name is free again.
    let (code, out, err) = create("agent-19", "carol")();
    assert_eq!(code, 0, "{err}");
    let again: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(again["created_by"], "operator:carol");
    assert_ne!(again["token_id"], token_id.as_str());

    for (args, needle) in [
        (&["token", "create", "--scope", "admin"][..], "--name"),
        (
            &["token", "create", "--scope", "admin", "--name", "two words"][..],
            "invalid_token_name",
        ),
        (
            &["token", "create", "--scope", "admin", "--name", "a#b"][..],
            "invalid_token_name",
        ),
        (
            &["token", "create", "--scope", "provider", "--name", "p"][..],
            "provider_required",
        ),
        (
            &[
                "token",
                "create",
                "--scope",
                "admin",
                "--name",
                "p",
                "--provider",
                "prv_a",
            ][..],
            "provider_not_allowed",
        ),
        (
            &[
                "token",
                "create",
                "--scope",
                "ingest",
                "--name",
                "p",
                "--provider",
                "prv_zz",
            ][..],
            "unknown_provider",
        ),
        (
            &["token", "create", "--scope", "root", "--name", "p"][..],
            "invalid_scope",
        ),
        (
            &[
                "token",
                "create",
                "--scope",
                "admin",
                "--name",
                "p",
                "--expires-in-days",
                "0",
            ][..],
            "invalid_expiry",
        ),
        (&["token", "revoke", "tok_nope"][..], "unknown_token"),
    ] {
        let mut full = vec!["--now", NOW];
        full.extend_from_slice(args);
        let (code, _, err) = common::run_cli(&url, &full);
        assert_ne!(code, 0, "{args:?} succeeded");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// `settle token create` without `--expires-in-days`: the scope's default lifetime from
/// `[auth]`; the served API refuses the token once it is past (401 `token_expired`).
#[tokio::test]
async fn tokens_expire_by_default() {
    let app = spawn_app(NOW).await;
    let url = app.db.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let create = |config: Option<&std::path::Path>, scope: &str, name: &str| {
        let mut args = vec!["--now", NOW, "--format", "json"];
        if let Some(c) = config {
            args.extend(["--config", c.to_str().unwrap()]);
        }
        args.extend(["token", "create", "--scope", scope, "--name", name]);
        if matches!(scope, "provider" | "ingest") {
            args.extend(["--provider", "prv_a"]);
        }
        common::run_cli(&url, &args)
    };
    let now_ms = parse_rfc3339_ms(NOW).unwrap();
    let expiry = |out: &str| {
        let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
        (
            v["token"].as_str().unwrap().to_owned(),
            v["expires_at"]
                .as_str()
                .map(|t| (parse_rfc3339_ms(t).unwrap() - now_ms) / MS_PER_DAY),
        )
    };
    let mut provider_token = String::new();
    for (scope, days) in [
        ("provider", 90),
        ("ingest", 365),
        ("admin", 365),
        ("metering", 365),
    ] {
        let (code, out, err) = create(None, scope, &format!("default-{scope}"));
        assert_eq!(code, 0, "{err}");
        let (token, lifetime) = expiry(&out);
        assert_eq!(lifetime, Some(days), "{scope}: {out}");
        if scope == "provider" {
            provider_token = token;
        }
    }

    // Configured: a week for provider tokens, none for admin tokens.
    let config = dir.path().join("settle.toml");
    std::fs::write(
        &config,
        "[auth]\nprovider_token_days_default = 7\nadmin_token_days_default = 0\n",
    )
    .unwrap();
    let (code, out, err) = create(Some(&config), "provider", "weekly");
    assert_eq!(code, 0, "{err}");
    assert_eq!(expiry(&out).1, Some(7));
    let (code, out, err) = create(Some(&config), "admin", "forever");
    assert_eq!(code, 0, "{err}");
    assert_eq!(expiry(&out).1, None);
    // Provider and ingest tokens cannot be made to live for ever.
    std::fs::write(&config, "[auth]\ningest_token_days_default = 0\n").unwrap();
    let (code, _, err) = create(Some(&config), "ingest", "forever-agent");
    assert_ne!(code, 0);
    assert!(err.contains("invalid_auth_config"), "{err}");

    // The served API: the default provider token works until its 90th day, then 401.
    let path = "/v1/providers/prv_a/summary";
    app.clock.set(now_ms + 90 * MS_PER_DAY - 1);
    assert_eq!(app.get(Some(&provider_token), path).await.status(), 200);
    app.clock.set(now_ms + 90 * MS_PER_DAY);
    assert_problem(
        app.get(Some(&provider_token), path).await,
        401,
        "token_expired",
    )
    .await;
}

/// A revocation is effective at once, whatever the clock it was recorded with: dated in the
/// future (a `--now` ahead of the real clock), it is stored at the real clock and the token is
/// refused at once. (tests/it/route_tokens.rs: the same through the CLI and `settle serve`.)
#[tokio::test]
async fn a_revocation_dated_ahead_is_effective_at_once() {
    let app = spawn_app(NOW).await;
    let pool = app.ledger.store.pool();
    let (token, token_id) = app.token_with(Scope::Admin, None, None).await;
    let path = "/v1/providers/prv_a/summary";
    assert_eq!(app.get(Some(&token), path).await.status(), 200);
    let real_ms = chrono::Utc::now().timestamp_millis();
    let week_ahead = real_ms + 7 * MS_PER_DAY;
    assert_eq!(
        revoke_token(
            &app.ledger.store,
            &token_id,
            &Actor::operator("ops"),
            week_ahead
        )
        .await
        .unwrap(),
        Applied::Accepted
    );
    let revoked_at: i64 =
        sqlx::query("SELECT revoked_at_ms FROM api_token_revocations WHERE token_id = $1")
            .bind(&token_id)
            .fetch_one(pool)
            .await
            .unwrap()
            .get(0);
    assert!(
        (real_ms..=chrono::Utc::now().timestamp_millis()).contains(&revoked_at),
        "dated {revoked_at}, the real clock read {real_ms}"
    );
    // The server's clock (NOW) is before even the real clock: the token is refused anyway.
    assert_problem(app.get(Some(&token), path).await, 401, "token_revoked").await;
    assert!(matches!(
        verify(&app.ledger.store, &token, i64::MIN / 2).await,
        Err(AuthError::Revoked)
    ));
}

/// Tokens created before names and creators existed (migration 0004) keep working: each is
/// named like its id, its creator `unknown`; its actor is `token:{id}#{id}`.
#[tokio::test]
async fn tokens_of_before_0004_migrate_forward() {
    let db = common::TestDb::unmigrated().await;
    let store = db.store().await;
    let mut migrator = if db.is_postgres() {
        sqlx::migrate!("migrations/postgres")
    } else {
        sqlx::migrate!("migrations/sqlite")
    };
    migrator.migrations = migrator
        .migrations
        .iter()
        .filter(|m| m.version <= 3)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    migrator.run(store.pool()).await.expect("0001..0003");
    let old = ("tok_0123456789abcdef", "ab".repeat(32));
    let revoked = ("tok_fedcba9876543210", "cd".repeat(32));
    let now_ms = parse_rfc3339_ms(NOW).unwrap();
    for (id, secret) in [&old, &revoked] {
        sqlx::query(
            "INSERT INTO api_tokens (token_id, token_hash, scope, provider_id, label, created_at_ms, expires_at_ms) VALUES ($1, $2, 'admin', NULL, 'old', $3, NULL)",
        )
        .bind(*id)
        .bind(Sha256::digest(secret.as_bytes()).to_vec())
        .bind(now_ms)
        .execute(store.pool())
        .await
        .unwrap();
    }
    sqlx::query("INSERT INTO api_token_revocations (token_id, revoked_at_ms) VALUES ($1, $2)")
        .bind(revoked.0)
        .bind(now_ms)
        .execute(store.pool())
        .await
        .unwrap();

    store.migrate().await.expect("0004 on");
    let tokens = settle::auth::list_tokens(&store).await.unwrap();
    assert_eq!(tokens.len(), 2);
    for t in &tokens {
        assert_eq!(t.name, t.token_id);
        assert_eq!(t.created_by, "unknown");
    }
    let r = tokens.iter().find(|t| t.token_id == revoked.0).unwrap();
    assert_eq!(r.revoked_by.as_deref(), Some("unknown"));

    // The old token still authenticates, named by its id; the revoked one stays revoked.
    let p = verify(&store, &format!("stl_{}.{}", old.0, old.1), now_ms)
        .await
        .expect("the old token is valid");
    assert_eq!(p.name, old.0);
    assert_eq!(p.actor().0, format!("token:{0}#{0}", old.0));
    assert!(matches!(
        verify(&store, &format!("stl_{}.{}", revoked.0, revoked.1), now_ms).await,
        Err(AuthError::Revoked)
    ));
    // Its id-name is taken while it lives.
    let new = NewToken {
        scope: Scope::Admin,
        provider_id: None,
        name: old.0.to_owned(),
        label: String::new(),
        expires_in_days: None,
        created_by: Actor::operator("test"),
        needs_approval: false,
    };
    match create_token(&store, &new, &AuthConfig::default(), now_ms).await {
        Err(TokenError::Rejected(e)) => assert_eq!(e.code, "token_name_taken", "{e}"),
        other => panic!("{:?}", other.map(|c| c.info)),
    }
    store.close().await;
}
