//! Test harness shared by the integration tests: each test gets its own database.
//!
//! Without `SETTLE_TEST_PG_URL` a test runs on a fresh SQLite file in a temporary
//! directory; with it (e.g. `postgres://postgres@127.0.0.1:5432/test`) on a fresh
//! PostgreSQL database created for the test and dropped afterwards. `.ci/run` runs the
//! whole suite both ways.
//!
//! On PostgreSQL the database is migrated as the admin of `SETTLE_TEST_PG_URL` (the owner
//! of the tables) and the test gets a URL ([`TestDb::url`]) of the runtime role
//! [`TEST_RUNTIME_ROLE`], given the grants `settle migrate --print-grants` prints: the
//! suite runs as production's `settle serve` does. A test that changes the tables as an
//! outsider would (tampering, undoing a migration, installing a fault) does it through
//! [`TestDb::owner_url`] / [`TestDb::owner_store`]. `SETTLE_TEST_PG_AS_OWNER=1` hands tests
//! the owner's URL instead.
//!
//! With `SETTLE_TEST_CITUS_URL` (the coordinator of a Citus cluster, e.g.
//! `postgres://postgres@127.0.0.1:9700/postgres` from `ops/citus/cluster.sh`) a test runs on
//! a fresh database of the cluster instead: made on the coordinator and every worker, the
//! workers added to it, and distributed by `Store::migrate` as `settle migrate` does.

pub mod tables;
pub use tables::Tables;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use settle::config::LedgerConfig;
use settle::domain::time::parse_rfc3339_ms;
use settle::ledger::{Ledger, ManualClock};
use settle::store::{Store, StoreOptions};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The runtime role the suite runs as on PostgreSQL: one for the cluster (roles are
/// cluster-wide), created by the first test that needs it, given its grants in each test's
/// database.
pub const TEST_RUNTIME_ROLE: &str = "settle_test_runtime";

/// The password of the test roles (ignored under `trust` authentication).
const TEST_ROLE_PASSWORD: &str = "settle-test-role";

pub struct TestDb {
    /// The URL the engine runs on: the runtime role's on PostgreSQL.
    pub url: String,
    /// The URL of the tables' owner (the admin of `SETTLE_TEST_PG_URL`; on SQLite `url`).
    owner_url: String,
    _dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
    /// Roles made for this test alone, dropped after its database.
    own_roles: Vec<String>,
    /// The runtime role of [`TestDb::url`], when the test runs as one.
    runtime: Option<String>,
}

impl TestDb {
    /// A fresh, migrated database for one test: on PostgreSQL migrated by its owner and
    /// handed to the test as [`TEST_RUNTIME_ROLE`] (unless `SETTLE_TEST_PG_AS_OWNER`).
    pub async fn new() -> TestDb {
        let mut db = TestDb::unmigrated().await;
        db.migrate().await;
        let as_owner = std::env::var("SETTLE_TEST_PG_AS_OWNER").is_ok_and(|v| !v.is_empty());
        if db.is_postgres() && !as_owner {
            db.url = db.grant_runtime(TEST_RUNTIME_ROLE).await;
            db.runtime = Some(TEST_RUNTIME_ROLE.to_owned());
        }
        db
    }

    /// The owner's URL: for what only an outsider with the owner's rights does (tampering
    /// with the append-only tables, undoing migrations, installing faults).
    pub fn owner_url(&self) -> &str {
        &self.owner_url
    }

    /// A store opened as the owner ([`TestDb::owner_url`]).
    pub async fn owner_store(&self) -> Store {
        Store::open(&self.owner_url, &StoreOptions::default())
            .await
            .expect("open store as the owner")
    }

    /// Creates the login role `role` when the cluster has none of that name (tests race
    /// to create it: a duplicate is no error), gives it the grants `settle migrate
    /// --print-grants` prints on this (migrated) database, run as the owner, and returns
    /// its URL for this database.
    pub async fn grant_runtime(&self, role: &str) -> String {
        self.create_login_role(role).await;
        let owner = self.owner_store().await;
        let statements = owner.runtime_grants(role).await.expect("the grants");
        self.run_as_owner(&statements).await;
        self.url_as(role)
    }

    /// Runs each of `statements` as the owner of the tables, in order.
    pub async fn run_as_owner(&self, statements: &[String]) {
        let owner = self.owner_store().await;
        for statement in statements {
            sqlx::query(statement)
                .execute(owner.pool())
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        owner.close().await;
    }

    /// Creates the login role `role` (no rights) unless the cluster has one of that name.
    pub async fn create_login_role(&self, role: &str) {
        let owner = self.owner_store().await;
        sqlx::query(&format!(
            "DO $$ BEGIN CREATE ROLE {role} LOGIN PASSWORD '{TEST_ROLE_PASSWORD}'; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
        ))
        .execute(owner.pool())
        .await
        .unwrap_or_else(|e| panic!("create role {role}: {e}"));
        owner.close().await;
    }

    /// A role of this test alone (a random name), dropped after the test's database.
    pub fn own_role(&mut self, prefix: &str) -> String {
        let role = format!("{prefix}_{}", rand::random::<u32>());
        self.own_roles.push(role.clone());
        role
    }

    /// This database's URL as the login role `role`.
    pub fn url_as(&self, role: &str) -> String {
        let (scheme, rest) = self.owner_url.split_once("://").expect("a URL");
        let host = match (rest.find('@'), rest.find('/')) {
            (Some(at), Some(slash)) if at < slash => &rest[at + 1..],
            (Some(at), None) => &rest[at + 1..],
            _ => rest,
        };
        format!("{scheme}://{role}:{TEST_ROLE_PASSWORD}@{host}")
    }

    /// A fresh, empty database (no schema): for tests of the migrations themselves.
    pub async fn unmigrated() -> TestDb {
        match pg_admin_url() {
            Some(admin_url) => {
                let name = format!(
                    "settle_t_{}_{}_{}",
                    std::process::id(),
                    COUNTER.fetch_add(1, Ordering::SeqCst),
                    rand::random::<u32>()
                );
                sqlx::any::install_default_drivers();
                let admin = sqlx::AnyPool::connect(&admin_url)
                    .await
                    .expect("connect to SETTLE_TEST_PG_URL");
                if is_citus() {
                    // On every node of the cluster (Citus does not propagate it).
                    settle::store::citus::create_database(&admin_url, &name)
                        .await
                        .expect("a database on the cluster");
                } else {
                    sqlx::query(&format!("CREATE DATABASE {name}"))
                        .execute(&admin)
                        .await
                        .expect("create test database");
                }
                admin.close().await;
                let base = admin_url
                    .rsplit_once('/')
                    .map(|(b, _)| b)
                    .unwrap_or(&admin_url);
                TestDb {
                    url: format!("{base}/{name}"),
                    owner_url: format!("{base}/{name}"),
                    _dir: None,
                    pg: Some((admin_url.clone(), name)),
                    own_roles: Vec::new(),
                    runtime: None,
                }
            }
            _ => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}", dir.path().join("settle.db").display());
                TestDb {
                    owner_url: url.clone(),
                    url,
                    _dir: Some(dir),
                    pg: None,
                    own_roles: Vec::new(),
                    runtime: None,
                }
            }
        }
    }

    pub fn is_postgres(&self) -> bool {
        self.pg.is_some()
    }

    async fn migrate(&self) {
        let store = self.owner_store().await;
        store.migrate().await.expect("migrate");
        store.close().await;
    }

    pub async fn store(&self) -> Store {
        Store::open(&self.url, &StoreOptions::default())
            .await
            .expect("open store")
    }

    /// A ledger on this database whose clock stands at `now` (RFC 3339) until moved.
    pub async fn ledger_at(&self, now: &str) -> (Ledger, Arc<ManualClock>) {
        self.ledger_with(&StoreOptions::default(), now).await
    }

    /// [`TestDb::ledger_at`] on a store opened with `options` (a limit under test).
    pub async fn ledger_with(
        &self,
        options: &StoreOptions,
        now: &str,
    ) -> (Ledger, Arc<ManualClock>) {
        let store = Store::open(&self.url, options).await.expect("open store");
        let clock = Arc::new(ManualClock::new(parse_rfc3339_ms(now).expect("valid now")));
        let sealing = sealing(&store);
        let ledger =
            Ledger::new(store, clock.clone(), LedgerConfig::default()).with_privacy(sealing);
        (ledger, clock)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((admin_url, name)) = self.pg.take() {
            let citus = is_citus();
            let roles = std::mem::take(&mut self.own_roles);
            // Drop the test database, then its own roles (whose rights lived in it), from a
            // helper thread with its own runtime.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async {
                    if citus {
                        let _ = settle::store::citus::drop_database(&admin_url, &name).await;
                    }
                    if let Ok(admin) = sqlx::AnyPool::connect(&admin_url).await {
                        let _ =
                            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                                .execute(&admin)
                                .await;
                        for role in roles {
                            let _ = sqlx::query(&format!("DROP ROLE IF EXISTS {role}"))
                                .execute(&admin)
                                .await;
                        }
                        admin.close().await;
                    }
                });
            })
            .join();
        }
    }
}

/// The admin URL of the PostgreSQL server the suite runs on: `SETTLE_TEST_CITUS_URL` (a
/// Citus coordinator), else `SETTLE_TEST_PG_URL`; none on SQLite.
pub fn pg_admin_url() -> Option<String> {
    ["SETTLE_TEST_CITUS_URL", "SETTLE_TEST_PG_URL"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
}

/// Whether the suite runs on a Citus cluster (`SETTLE_TEST_CITUS_URL`).
pub fn is_citus() -> bool {
    std::env::var("SETTLE_TEST_CITUS_URL").is_ok_and(|u| !u.is_empty())
}

/// Takes the database of `db` back to before migration `version` by running `undo`
/// (statements that reverse it) and forgetting the migration, then migrates forward again:
/// a database an older release created, upgraded as `settle migrate` upgrades it (as the
/// owner: the runtime role may do neither).
pub async fn upgrade_through(db: &TestDb, version: i64, undo: &[&str]) {
    let store = db.owner_store().await;
    for statement in undo {
        sqlx::query(statement).execute(store.pool()).await.unwrap();
    }
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = $1")
        .bind(version)
        .execute(store.pool())
        .await
        .unwrap();
    store
        .migrate()
        .await
        .unwrap_or_else(|e| panic!("migration {version}: {e}"));
    store.close().await;
    if let Some(role) = &db.runtime {
        // As after every `settle migrate`: the tables the migration made get their grants.
        db.grant_runtime(role).await;
    }
}

/// Inserts `e` into `events` as a database writer could, with no engine in between (the
/// tamper and forgery tests).
pub async fn insert_raw_event<'c, E>(conn: E, e: &settle::store::StoredEvent)
where
    E: sqlx::Executor<'c, Database = sqlx::Any>,
{
    sqlx::query(
        "INSERT INTO events (stream, seq, event_type, version, idem_key, content_hash, actor, \
         recorded_at_ms, payload, lines, prev_hash, hash) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(&e.stream)
    .bind(e.seq)
    .bind(&e.event_type)
    .bind(e.version)
    .bind(&e.idem_key)
    .bind(&e.content_hash)
    .bind(&e.actor)
    .bind(e.recorded_at_ms)
    .bind(&e.payload)
    .bind(&e.lines)
    .bind(&e.prev_hash)
    .bind(&e.hash)
    .execute(conn)
    .await
    .expect("insert an event behind the engine");
}

/// A ledger of its own on `url` (a pool of two connections, a clock standing at `now_ms`):
/// one of several concurrent senders.
pub async fn sender_ledger(url: &str, now_ms: i64) -> Ledger {
    let options = StoreOptions {
        connections_max: 2,
        ..StoreOptions::default()
    };
    let store = Store::open(url, &options).await.expect("open store");
    Ledger::new(
        store,
        Arc::new(ManualClock::new(now_ms)),
        LedgerConfig::default(),
    )
}

/// A TCP port on 127.0.0.1 that was free a moment ago (the OS picked it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn settle_bin() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_settle"))
}

/// The master key of every test ledger (SPEC §11): the in-process ledgers seal with it, and
/// every `settle` a test starts reads it from `SETTLE_PRIVACY_MASTER_KEY`
/// ([`settle_command`]), so both open the same providers' values.
pub const TEST_MASTER_KEY: &str =
    "5e771e5e771e5e771e5e771e5e771e5e771e5e771e5e771e5e771e5e771e5e77";

/// A ledger handle's sealing under [`TEST_MASTER_KEY`].
pub fn sealing(store: &Store) -> settle::privacy::vault::Privacy {
    let master = settle::privacy::keys::MasterKey::from_hex(TEST_MASTER_KEY, "the test key")
        .expect("a master key");
    settle::privacy::vault::Privacy::Sealing(settle::privacy::vault::Vault::new(
        store.clone(),
        Arc::new(master),
    ))
}

/// `settle` as a test starts it: with the test ledgers' master key in its environment.
pub fn settle_command() -> std::process::Command {
    let mut cmd = std::process::Command::new(settle_bin());
    cmd.env("SETTLE_PRIVACY_MASTER_KEY", TEST_MASTER_KEY);
    if pg_admin_url().is_some() {
        // On PostgreSQL the default anchor log lies in the working directory (the
        // repository's, in a test): a served test ledger anchors only where a test says.
        cmd.env("SETTLE_ANCHOR__ENABLED", "false");
    }
    cmd
}

/// Runs `settle` with args against `url`; returns (exit code, stdout, stderr).
pub fn run_cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["--database", url];
    all.extend_from_slice(args);
    run_settle(&all)
}

/// Runs `settle` with args (no database given); returns (exit code, stdout, stderr).
pub fn run_settle(args: &[&str]) -> (i32, String, String) {
    let out = settle_command().args(args).output().expect("run settle");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether the `settle` under test aborts at failpoints; when it does not (a release build
/// without the `failpoints` feature) the test `name` says it is skipped, and why, and
/// returns early: `cargo test --release --features failpoints` runs it.
pub fn failpoints_or_skip(name: &str) -> bool {
    if !settle::failpoint::COMPILED_IN {
        eprintln!(
            "{name}: skipped: failpoints are compiled out of this build (run it with \
             `cargo test --release --features failpoints`, or a debug build)"
        );
    }
    settle::failpoint::COMPILED_IN
}

/// A new API token of `scope` (bound to `provider` when given) on `ledger`, made by the
/// operator `test` at the ledger's clock: its secret.
pub async fn api_token(
    ledger: &Ledger,
    scope: settle::auth::Scope,
    provider: Option<&str>,
) -> String {
    use settle::auth::{NewToken, create_token};
    create_token(
        &ledger.store,
        &NewToken {
            scope,
            provider_id: provider.map(|p| settle::domain::ids::ProviderId::parse(p).unwrap()),
            name: format!("test-{scope}-{}", rand::random::<u32>()),
            label: "test".into(),
            expires_in_days: None,
            created_by: settle::ledger::Actor::operator("test"),
            needs_approval: false,
        },
        &settle::config::AuthConfig::default(),
        ledger.now_ms(),
    )
    .await
    .expect("create token")
    .token
}

/// Validates every event on the ledger against `ledger-schemas/{type}.v{version}.json`;
/// returns the event types seen. Panics naming the first event that does not match.
pub async fn assert_events_match_schemas(store: &Store) -> std::collections::BTreeSet<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut validators: BTreeMap<(String, i64), jsonschema::Validator> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for stream in store.streams().await.expect("streams") {
        let mut after = 0;
        loop {
            let page = store
                .stream_events(&stream, after, 1000)
                .await
                .expect("events");
            if page.is_empty() {
                break;
            }
            for e in &page {
                let validator = validators
                    .entry((e.event_type.clone(), e.version))
                    .or_insert_with(|| {
                        let path = format!(
                            "{}/ledger-schemas/{}.v{}.json",
                            env!("CARGO_MANIFEST_DIR"),
                            e.event_type,
                            e.version
                        );
                        let text = std::fs::read_to_string(&path)
                            .unwrap_or_else(|_| panic!("no schema {path}"));
                        let schema: serde_json::Value =
                            serde_json::from_str(&text).expect("schema is JSON");
                        jsonschema::validator_for(&schema).expect("schema compiles")
                    });
                let payload: serde_json::Value =
                    serde_json::from_str(&e.payload).expect("payload is JSON");
                if let Err(err) = validator.validate(&payload) {
                    panic!(
                        "{} seq {} ({} v{}) breaks its schema: {err}\n{}",
                        e.stream, e.seq, e.event_type, e.version, e.payload
                    );
                }
                seen.insert(e.event_type.clone());
                after = e.seq;
            }
        }
    }
    seen
}

/// Fault-test fixture: providers `f0 … f{n-1}` (weekly, Solana), each with one H100 GPU
/// `f{p}-g` at 2.49 USDC/h from 2026-01-01.
pub async fn register_fault_providers(ledger: &Ledger, providers: usize) {
    use settle::ledger::Actor;
    use settle::wire::import::{apply, parse_line};
    for p in 0..providers {
        for line in [
            format!(
                r#"{{"type":"provider.register","provider_id":"f{p}","name":"F {p}","email":"f{p}@x.test","tier":"community","schedule":"weekly","payout_method":{{"kind":"solana","wallet":"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}}}}"#
            ),
            format!(
                r#"{{"type":"gpu.register","gpu_id":"f{p}-g","provider_id":"f{p}","model":"H100-80GB"}}"#
            ),
            format!(
                r#"{{"type":"rate.set","provider_id":"f{p}","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2026-01-01T00:00:00Z"}}"#
            ),
        ] {
            apply(
                ledger,
                &parse_line(&line).unwrap(),
                &Actor::operator("test"),
            )
            .await
            .unwrap();
        }
    }
}

/// Fault-test fixture: `count` one-minute usage slices `f{p}-{n}` on provider `p`'s GPU,
/// from 2026-11-01 (see [`register_fault_providers`]).
pub fn minute_slices(
    p: usize,
    from: usize,
    count: usize,
) -> Vec<settle::ledger::ingest::UsageInput> {
    use settle::domain::time::format_ms;
    let base = parse_rfc3339_ms("2026-11-01T00:00:00Z").unwrap();
    (from..from + count)
        .map(|n| settle::ledger::ingest::UsageInput {
            event_id: Some(format!("f{p}-{n}")),
            provider_id: Some(format!("f{p}")),
            gpu_id: Some(format!("f{p}-g")),
            rental_id: None,
            started_at: Some(format_ms(base + n as i64 * 60_000)),
            ended_at: Some(format_ms(base + n as i64 * 60_000 + 60_000)),
            rate_usdc_per_hour: None,
        })
        .collect()
}

/// Faults of the real database under the engine (no mock): a table that refuses writes
/// while armed (a trigger per table reads the armed flag from `sim_faults`; on PostgreSQL
/// it raises SQLSTATE 53100 `disk_full`, on SQLite an aborting trigger), and on PostgreSQL
/// every other backend of the database terminated at a chosen instant.
pub struct DbFaults {
    /// One connection of the simulation's own (not the engine's pool).
    admin: sqlx::AnyPool,
    pub postgres: bool,
    /// The table whose writes are refused now.
    pub refusing: Option<&'static str>,
    /// A pending termination of the engine's connections: how many it terminated.
    dropping: Option<tokio::task::JoinHandle<u64>>,
}

impl DbFaults {
    /// Installs a refusing trigger on each of `tables` (disarmed).
    pub async fn install(url: &str, postgres: bool, tables: &[&str]) -> DbFaults {
        let admin = sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .expect("the simulation's own connection");
        let mut ddl = vec![
            "CREATE TABLE sim_faults (target TEXT PRIMARY KEY, armed BIGINT NOT NULL)".to_owned(),
        ];
        if postgres {
            ddl.push(
                "CREATE FUNCTION sim_fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 IF EXISTS (SELECT 1 FROM sim_faults WHERE target = TG_TABLE_NAME AND armed = 1) THEN \
                 RAISE EXCEPTION 'could not extend file: No space left on device (injected by the simulation)' \
                 USING ERRCODE = 'disk_full'; END IF; RETURN NEW; END $$"
                    .to_owned(),
            );
        }
        for t in tables {
            ddl.push(format!("INSERT INTO sim_faults VALUES ('{t}', 0)"));
            if postgres {
                ddl.push(format!(
                    "CREATE TRIGGER sim_fault_{t} BEFORE INSERT OR UPDATE ON {t} \
                     FOR EACH ROW EXECUTE FUNCTION sim_fault()"
                ));
            } else {
                for op in ["INSERT", "UPDATE"] {
                    ddl.push(format!(
                        "CREATE TRIGGER sim_fault_{t}_{op} BEFORE {op} ON {t} \
                         WHEN (SELECT armed FROM sim_faults WHERE target = '{t}') = 1 \
                         BEGIN SELECT RAISE(ABORT, 'database or disk is full (injected by the simulation)'); END"
                    ));
                }
            }
        }
        for statement in ddl {
            sqlx::query(&statement)
                .execute(&admin)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        DbFaults {
            admin,
            postgres,
            refusing: None,
            dropping: None,
        }
    }

    async fn set(&self, table: &str, armed: i64) {
        sqlx::query("UPDATE sim_faults SET armed = $1 WHERE target = $2")
            .bind(armed)
            .bind(table)
            .execute(&self.admin)
            .await
            .expect("arm or disarm a fault");
    }

    /// Writes to `table` fail until [`DbFaults::clear`].
    pub async fn refuse(&mut self, table: &'static str) {
        self.set(table, 1).await;
        self.refusing = Some(table);
    }

    /// Terminates every other backend of the database after `after`.
    pub fn drop_connections_after(&mut self, after: Duration) {
        let admin = self.admin.clone();
        self.dropping = Some(tokio::spawn(async move {
            tokio::time::sleep(after).await;
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
            .fetch_all(&admin)
            .await
            .map(|rows| rows.len() as u64)
            .expect("terminate the engine's connections")
        }));
    }

    pub fn armed(&self) -> bool {
        self.refusing.is_some() || self.dropping.is_some()
    }

    /// Ends the fault: the refused table accepts writes again; a pending drop has happened.
    /// Returns how many connections the drop terminated.
    pub async fn clear(&mut self) -> u64 {
        let dropped = match self.dropping.take() {
            Some(task) => task.await.expect("the drop task"),
            None => 0,
        };
        if let Some(table) = self.refusing.take() {
            self.set(table, 0).await;
        }
        dropped
    }
}
