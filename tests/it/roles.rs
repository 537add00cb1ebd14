//! A role that cannot rewrite: on PostgreSQL the migrations run as the owner of
//! the tables, and `settle serve` and every booking command as a runtime role given the
//! grants `settle migrate --print-grants` prints. That role books and reads, and cannot
//! update, delete or truncate `events`, drop or disable its triggers, or change the schema;
//! a binary whose schema is behind reports `schema_outdated` instead of migrating as it.
//! (The whole suite runs as such a role on PostgreSQL: `common::TestDb`.)

use crate::common::Tables;
use crate::common::{self, TestDb, run_cli};

const NOW: &str = "2026-11-30T12:00:00Z";

/// A provider with a GPU and a rate, and an hour of its usage, as an NDJSON import.
const BOOKINGS: &str = r#"{"type":"provider.register","provider_id":"prv_r","name":"Role GPU","email":"ops@role.test","tier":"community","schedule":"weekly"}
{"type":"gpu.register","gpu_id":"prv_r-g0","provider_id":"prv_r","model":"H100-80GB"}
{"type":"rate.set","provider_id":"prv_r","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2026-01-01T00:00:00Z"}
{"type":"usage","event_id":"r1","provider_id":"prv_r","gpu_id":"prv_r-g0","started_at":"2026-11-29T10:00:00Z","ended_at":"2026-11-29T11:00:00Z"}
"#;

/// The statements `settle migrate --print-grants ROLE` prints, run as the owner of `db`.
async fn apply_printed_grants(db: &TestDb, role: &str) -> Vec<String> {
    let (code, out, err) = run_cli(db.owner_url(), &["migrate", "--print-grants", role]);
    assert_eq!(code, 0, "print-grants: {err}");
    let statements: Vec<String> = out
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("--"))
        .map(|l| l.trim_end_matches(';').to_owned())
        .collect();
    assert!(statements.len() > 5, "{out}");
    db.run_as_owner(&statements).await;
    statements
}

/// The SQLSTATE of a refused statement.
fn sqlstate(err: &sqlx::Error) -> String {
    err.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_runtime_role_books_and_cannot_rewrite_the_ledger() {
    let mut db = TestDb::new().await;
    if !db.is_postgres() {
        return; // roles are PostgreSQL's
    }
    let role = db.own_role("settle_rt");
    db.create_login_role(&role).await;
    let printed = apply_printed_grants(&db, &role).await;
    // Re-runnable: a second run (as after the next migration) changes nothing and fails not.
    assert_eq!(apply_printed_grants(&db, &role).await, printed);
    let runtime = db.url_as(&role);

    // It books: an import through the binary, as the runtime role.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bookings.ndjson");
    std::fs::write(&file, BOOKINGS).unwrap();
    let (code, out, err) = run_cli(&runtime, &["--now", NOW, "import", file.to_str().unwrap()]);
    assert_eq!(code, 0, "import as the runtime role: {out}{err}");
    let (code, out, err) = run_cli(
        &runtime,
        &["--format", "json", "balance", "--provider", "prv_r"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("prv_r"), "{out}");
    // `settle migrate` on a current schema migrates nothing: it runs as the runtime role.
    let (code, _, err) = run_cli(&runtime, &["migrate"]);
    assert_eq!(code, 0, "migrate on a current schema: {err}");
    let (code, out, err) = run_cli(&runtime, &["verify"]);
    assert_eq!(code, 0, "verify as the runtime role: {out}{err}");

    // It cannot rewrite: refused by its rights (SQLSTATE 42501), before any trigger.
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&runtime).await.unwrap();
    let count = |pool: sqlx::AnyPool| async move {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM events")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let before = count(pool.clone()).await;
    assert!(before >= 4, "{before} events");
    for statement in [
        "UPDATE events SET actor = 'mallory'",
        "DELETE FROM events",
        "TRUNCATE events",
        "DROP TRIGGER events_refuse_update_delete ON events",
        "DROP TRIGGER events_refuse_truncate ON events",
        "ALTER TABLE events DISABLE TRIGGER ALL",
        "DROP TABLE events",
        "UPDATE api_tokens SET scope = 'admin'",
        "DELETE FROM api_token_revocations",
        "DELETE FROM gpu_reports",
        "TRUNCATE providers",
        "DELETE FROM _sqlx_migrations",
        "CREATE TABLE shadow (x BIGINT)",
    ] {
        let err = sqlx::query(statement)
            .execute(&pool)
            .await
            .expect_err(&format!("the runtime role ran {statement}"));
        assert_eq!(sqlstate(&err), "42501", "{statement}: {err}");
    }
    assert_eq!(count(pool.clone()).await, before, "events unchanged");
    // A projection, rewritten by the engine, it may rewrite.
    sqlx::query("UPDATE providers SET name = name WHERE provider_id = 'prv_r'")
        .execute(&pool)
        .await
        .expect("the projections are the engine's to rewrite");
    pool.close().await;
    let owner = db.owner_store().await;
    let triggers: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_trigger WHERE tgrelid = CAST('events' AS regclass) \
         AND NOT tgisinternal AND tgenabled <> 'D'",
    )
    .fetch_one(owner.pool())
    .await
    .unwrap();
    assert_eq!(triggers, 2, "both guards of events still stand, enabled");
    owner.close().await;
}

/// A binary one migration ahead of the schema, run as the runtime role, says so with a
/// stable code and tries nothing; `settle migrate --owner-database` brings the schema up as
/// the owner, and the runtime role runs again.
#[tokio::test]
async fn a_schema_behind_the_binary_is_schema_outdated_for_the_runtime_role() {
    let db = TestDb::new().await;
    if !db.is_postgres() {
        return;
    }
    let owner = db.owner_store().await;
    let last: i64 = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(owner.pool())
        .await
        .unwrap();
    // The database of the release before: the last migration not recorded (its statements
    // are re-runnable).
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = $1")
        .bind(last)
        .execute(owner.pool())
        .await
        .unwrap();
    let runtime = common::TEST_RUNTIME_ROLE;
    let runtime_url = db.grant_runtime(runtime).await;
    for args in [&["balance"][..], &["migrate"]] {
        let (code, out, err) = run_cli(&runtime_url, args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(
            err.contains(&format!(
                "schema_outdated: the database schema is at version {}, this binary needs {last}",
                last - 1
            )),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("permission denied"),
            "tried to migrate: {err}"
        );
    }
    let recorded: i64 = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(owner.pool())
        .await
        .unwrap();
    assert_eq!(recorded, last - 1, "nothing migrated as the runtime role");
    let (code, out, err) = run_cli(
        &runtime_url,
        &["migrate", "--owner-database", db.owner_url()],
    );
    assert_eq!(code, 0, "migrate as the owner: {out}{err}");
    let recorded: i64 = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(owner.pool())
        .await
        .unwrap();
    assert_eq!(recorded, last);
    // The clock mode is booked once (by the owner, who migrated).
    let clock_events: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE event_type = 'ledger.clock_set'")
            .fetch_one(owner.pool())
            .await
            .unwrap();
    assert_eq!(clock_events, 1);
    owner.close().await;
    let (code, _, err) = run_cli(&runtime_url, &["balance"]);
    assert_eq!(code, 0, "{err}");
}

/// `rebuild` locks `events` against writers, which only the owner may: as the runtime
/// role it says so (`needs_owner`), with `--owner-database` it runs.
#[tokio::test]
async fn a_rebuild_runs_as_the_owner() {
    let db = TestDb::new().await;
    if !db.is_postgres() {
        return;
    }
    let url = db.grant_runtime(common::TEST_RUNTIME_ROLE).await;
    let (code, out, err) = run_cli(&url, &["--now", NOW, "rebuild"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("needs_owner: rebuild"), "{err}");
    let (code, out, err) = run_cli(
        &url,
        &["--now", NOW, "--owner-database", db.owner_url(), "rebuild"],
    );
    assert_eq!(code, 0, "{out}{err}");
}

/// Production's first start (compose's `migrate` service, the systemd unit's
/// `ExecStartPre`): on an empty database `settle migrate --owner-database OWNER --grant ROLE`
/// creates the schema and books the clock as the owner, then gives the runtime role its
/// grants; `settle` then books as the runtime role.
#[tokio::test]
async fn a_new_database_is_migrated_and_granted_by_the_owner() {
    let mut db = TestDb::unmigrated().await;
    if !db.is_postgres() {
        return;
    }
    let role = db.own_role("settle_rt");
    db.create_login_role(&role).await;
    let runtime = db.url_as(&role);
    let (code, out, err) = run_cli(&runtime, &["migrate"]);
    assert_eq!(code, 1, "the runtime role cannot create the schema: {out}");
    assert!(err.contains("schema_outdated"), "{err}");
    let (code, out, err) = run_cli(
        &runtime,
        &[
            "migrate",
            "--owner-database",
            db.owner_url(),
            "--grant",
            &role,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("granted the runtime role {role}")),
        "{out}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bookings.ndjson");
    // A real-clock ledger without operators: the ungated commands (rates are gated).
    let ungated: Vec<&str> = BOOKINGS.lines().take(2).collect();
    std::fs::write(&file, ungated.join("\n")).unwrap();
    let (code, out, err) = run_cli(&runtime, &["import", file.to_str().unwrap()]);
    assert_eq!(code, 0, "import as the runtime role: {out}{err}");
}

#[tokio::test]
async fn print_grants_is_refused_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("settle.db").display());
    let (code, out, err) = run_cli(&url, &["migrate", "--print-grants"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("grants_need_postgres"), "{err}");
    assert!(out.is_empty(), "{out}");
    let (code, _, err) = run_cli(&url, &["migrate", "--grant", "settle_runtime"]);
    assert_eq!(code, 1);
    assert!(err.contains("grants_need_postgres"), "{err}");
}
