//! Payout run benchmark: a weekly run over N providers (default 100,000), each with one
//! usage event of the week, on SQLite or PostgreSQL. See `ops/bench/runs.md`.
//!
//! ```text
//! cargo bench --bench runs -- --db sqlite --providers 100000
//! cargo bench --bench runs -- --db postgres --providers 100000
//! cargo bench --bench runs -- --db citus --providers 100000   # ops/citus/cluster.sh
//! cargo bench --bench runs -- --db citus --providers 100000 --reuse   # after --db postgres
//! ```
//!
//! The parent process runs each phase in a child process of this same binary, so each
//! phase reports its own peak memory (VmHWM from /proc/self/status):
//! - `setup`: registers the providers (weekly, Solana wallet), one GPU each, and one
//!   usage event each (1 h at 40 USDC/h, net 32 USDC: above the weekly minimum), through
//!   the ledger's commands; timed apart.
//! - `run`: `Ledger::run_payouts` of the weekly run of 2026-11-23 (cutoff that Monday),
//!   which decides the providers in chunks and creates a payout each; then the raw limit of
//!   the same writes on this machine, in the same process (`raw_run`).
//! - `rerun`: the same run started again (idempotent: reads the completed report).
//! - `bank` (with `--rail ach` or `--rail sepa`: the providers are paid by ACH or SEPA): the
//!   bank outbox writes every payout into NACHA or pain.001 files of at most
//!   `--batch-payouts-max` payouts and submits them; then the raw limit of the same machine
//!   in the same process (the payout rows read by one plain statement, the files' bytes
//!   written and fsynced once).
//! - `answers` (after `bank`): the local bank simulator answers those files (a pain.002 and
//!   a camt.054 per pain.001, a returns file per NACHA file, `--returns-per-mille` of the
//!   payments returned) and each answer is imported and matched, timed, with its own peak
//!   memory; then the raw limit (the file read and parsed, a row per entry written once).
//!
//! The database after `setup` is kept as a snapshot (`<sqlite-path>.setup`, or the
//! PostgreSQL database `settle_bench_runs_setup`); `--reuse` restores it and measures
//! `run` and `rerun` again without loading. On Citus (`--db citus`, the cluster of
//! `--citus-url`) the database is made on every node and there is no snapshot: `--reuse`
//! there moves the PostgreSQL snapshot onto the cluster instead (`pg_dump`, then
//! `settle migrate` distributes it; the `move` line), as `ops/SCALING.md` moves a ledger.

#[path = "fixture.rs"]
mod fixture;
#[path = "peak.rs"]
mod peak;

#[path = "../../tests/it/common/tables.rs"]
mod tables;
use tables::Tables;

use std::time::Instant;

use settle::config::LedgerConfig;
use settle::domain::event::{PayoutMethod, Schedule, Tier};
use settle::domain::ids::{GpuId, GpuModel, ProviderId};
use settle::domain::time::{format_ms, parse_rfc3339_ms};
use settle::ledger::ingest::{SenderScope, UsageInput, UsageResult};
use settle::ledger::registry::{RegisterGpu, RegisterProvider};
use settle::ledger::runs::{RunConfig, weekly_key};
use settle::ledger::{Actor, Ledger, ManualClock};
use settle::store::Dialect;
use settle::store::{Store, StoreOptions};
use settle_calendar::Calendar;

const WALLET: &str = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";
const SETUP_AT: &str = "2026-11-20T00:00:00Z";
const USAGE_START: &str = "2026-11-19T10:00:00Z";
const RUN_MONDAY: &str = "2026-11-23";
const RUN_AT: &str = "2026-11-23T00:05:00Z";

struct Args {
    db: String,
    providers: usize,
    pg_url: String,
    /// `--db citus`: the admin URL of the cluster's coordinator.
    citus_url: String,
    sqlite_path: String,
    reuse: bool,
    loaders: usize,
    connections: u32,
    phase: Option<String>,
    /// `solana` (the default), `ach` or `sepa`: the providers' payout method.
    rail: String,
    /// Payments the simulated bank returns in the `answers` phase, per mille.
    returns_per_mille: u16,
    /// `bank.batch_payouts_max` of the `bank` phase.
    batch_payouts_max: usize,
    /// `store.sqlite_cache_kib` (0: the default).
    sqlite_cache_kib: u64,
    /// `runs.candidates_per_tx` (0: the default).
    candidates_per_tx: usize,
    /// `store.sqlite_checkpoint_interval_ms` (none: the default).
    sqlite_checkpoint_ms: Option<u64>,
}

fn parse_args() -> Args {
    let mut a = Args {
        db: "sqlite".into(),
        providers: 100_000,
        citus_url: std::env::var("SETTLE_BENCH_CITUS_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:9700/postgres".into()),
        pg_url: std::env::var("SETTLE_BENCH_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        sqlite_path: "/tmp/settle-bench-runs.db".into(),
        reuse: false,
        loaders: 0,
        connections: 8,
        phase: None,
        rail: "solana".into(),
        batch_payouts_max: settle::config::BankConfig::default().batch_payouts_max,
        returns_per_mille: 10,
        sqlite_cache_kib: 0,
        candidates_per_tx: 0,
        sqlite_checkpoint_ms: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--db" => a.db = val(),
            "--providers" => a.providers = val().parse().expect("--providers N"),
            "--pg-url" => a.pg_url = val(),
            "--citus-url" => a.citus_url = val(),
            "--sqlite-path" => a.sqlite_path = val(),
            "--reuse" => a.reuse = true,
            "--loaders" => a.loaders = val().parse().expect("--loaders N"),
            "--connections" => a.connections = val().parse().expect("--connections N"),
            "--phase" => a.phase = Some(val()),
            "--rail" => a.rail = val(),
            "--returns-per-mille" => {
                a.returns_per_mille = val().parse().expect("--returns-per-mille N");
            }
            "--batch-payouts-max" => {
                a.batch_payouts_max = val().parse().expect("--batch-payouts-max N");
            }
            "--candidates-per-tx" => {
                a.candidates_per_tx = val().parse().expect("--candidates-per-tx N");
            }
            "--sqlite-cache-kib" => {
                a.sqlite_cache_kib = val().parse().expect("--sqlite-cache-kib K")
            }
            "--sqlite-checkpoint-ms" => {
                a.sqlite_checkpoint_ms = Some(val().parse().expect("--sqlite-checkpoint-ms N"))
            }
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(
        matches!(a.rail.as_str(), "solana" | "ach" | "sepa"),
        "--rail solana|ach|sepa"
    );
    if a.loaders == 0 {
        a.loaders = if a.db == "sqlite" { 1 } else { 8 };
    }
    a
}

const PG_DB: &str = "settle_bench_runs";
const PG_SNAPSHOT: &str = "settle_bench_runs_setup";

async fn pg_admin(args: &Args, sql: &str) {
    sqlx::any::install_default_drivers();
    let admin = sqlx::AnyPool::connect(&args.pg_url)
        .await
        .expect("connect --pg-url");
    sqlx::query(sql)
        .execute(&admin)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    admin.close().await;
}

fn sqlite_files(path: &str) -> [String; 3] {
    [
        path.to_owned(),
        format!("{path}-wal"),
        format!("{path}-shm"),
    ]
}

/// Copies the database after setup to the snapshot (given the open `store`, which is
/// closed), or back to the benchmark database (`None`: no connection open).
async fn snapshot(args: &Args, store: Option<&Store>) {
    if args.db == "citus" {
        // No template databases across the nodes: a setup on the cluster stays as it is,
        // and `--reuse` moves the PostgreSQL snapshot onto the cluster.
        if store.is_none() {
            move_onto_cluster(args).await;
        }
        return;
    }
    let to_snapshot = store.is_some();
    if args.db == "postgres" {
        if let Some(store) = store {
            store.close().await;
        }
        let (from, to) = if to_snapshot {
            (PG_DB, PG_SNAPSHOT)
        } else {
            (PG_SNAPSHOT, PG_DB)
        };
        pg_admin(args, &format!("DROP DATABASE IF EXISTS {to} WITH (FORCE)")).await;
        // A template must have no session: end the ones still closing.
        pg_admin(
            args,
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{from}' AND pid <> pg_backend_pid()"
            ),
        )
        .await;
        pg_admin(args, &format!("CREATE DATABASE {to} TEMPLATE {from}")).await;
    } else {
        let snap = format!("{}.setup", args.sqlite_path);
        if let Some(store) = store {
            // A consistent copy through SQLite itself (a file copy could race the
            // checkpoint of the closing connections).
            for f in sqlite_files(&snap) {
                let _ = std::fs::remove_file(f);
            }
            sqlx::query(&format!("VACUUM INTO '{snap}'"))
                .execute(store.pool())
                .await
                .expect("VACUUM INTO the snapshot");
            store.close().await;
        } else {
            for f in sqlite_files(&args.sqlite_path) {
                let _ = std::fs::remove_file(f);
            }
            std::fs::copy(&snap, &args.sqlite_path)
                .unwrap_or_else(|e| panic!("restore {snap}: {e}"));
        }
    }
}

/// `--db citus --reuse`: the ledger of a `--db postgres` setup (its snapshot database on
/// `--pg-url`) moved onto the cluster the way `ops/SCALING.md` moves a running ledger: the
/// dump restored into the coordinator's database, then `settle migrate` distributes it
/// (timed: the `move` line).
async fn move_onto_cluster(args: &Args) {
    fresh_database(args).await;
    let base = |u: &str| u.rsplit_once('/').map_or(u, |(b, _)| b).to_owned();
    let from = format!("{}/{PG_SNAPSHOT}", base(&args.pg_url));
    let t = Instant::now();
    let status = std::process::Command::new("sh")
        .args([
            "-c",
            "pg_dump --no-owner --no-privileges \"$1\" | psql -q -v ON_ERROR_STOP=1 \"$2\" >/dev/null",
            "move",
            &from,
            &url(args),
        ])
        .status()
        .expect("pg_dump | psql");
    assert!(
        status.success(),
        "restoring {from} on the cluster failed (run --db postgres with the same --providers first)"
    );
    let restore_seconds = t.elapsed().as_secs_f64();
    let store = Store::open(&url(args), &StoreOptions::default())
        .await
        .expect("open the cluster's database");
    let t = Instant::now();
    let placed = store.migrate().await.expect("migrate onto the cluster");
    let seconds = t.elapsed().as_secs_f64();
    let placed = placed.expect("a Citus coordinator (--citus-url)");
    let events = store.event_count().await.expect("events");
    store.close().await;
    println!(
        "{{\"phase\":\"move\",\"db\":\"citus\",\"providers\":{},\"events\":{events},\"tables_distributed\":{},\"restore_seconds\":{restore_seconds:.2},\"seconds\":{seconds:.2},\"vmhwm_kib\":{}}}",
        args.providers,
        placed.now.len(),
        peak::vmhwm_kib()
    );
}

fn url(args: &Args) -> String {
    if args.db == "citus" {
        let base = args
            .citus_url
            .rsplit_once('/')
            .map_or(&*args.citus_url, |(b, _)| b);
        return format!("{base}/{PG_DB}");
    }
    if args.db == "postgres" {
        let base = args
            .pg_url
            .rsplit_once('/')
            .map(|(b, _)| b)
            .unwrap_or(&args.pg_url);
        format!("{base}/{PG_DB}")
    } else {
        format!("sqlite://{}", args.sqlite_path)
    }
}

/// Drops and creates the benchmark database.
async fn fresh_database(args: &Args) {
    if args.db == "citus" {
        let _ = settle::store::citus::drop_database(&args.citus_url, PG_DB).await;
        settle::store::citus::create_database(&args.citus_url, PG_DB)
            .await
            .expect("a database on the cluster (--citus-url)");
        return;
    }
    if args.db == "postgres" {
        sqlx::any::install_default_drivers();
        let admin = sqlx::AnyPool::connect(&args.pg_url)
            .await
            .expect("connect --pg-url");
        sqlx::query(&format!("DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)"))
            .execute(&admin)
            .await
            .expect("drop bench database");
        sqlx::query(&format!("CREATE DATABASE {PG_DB}"))
            .execute(&admin)
            .await
            .expect("create bench database");
        admin.close().await;
    } else {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", args.sqlite_path));
        }
    }
}

async fn open(args: &Args, now: &str) -> (Ledger, std::sync::Arc<ManualClock>) {
    let defaults = StoreOptions::default();
    let options = StoreOptions {
        connections_max: args.connections,
        sqlite_cache_kib: match args.sqlite_cache_kib {
            0 => defaults.sqlite_cache_kib,
            k => k,
        },
        sqlite_checkpoint_interval_ms: args
            .sqlite_checkpoint_ms
            .unwrap_or(defaults.sqlite_checkpoint_interval_ms),
        ..defaults
    };
    let store = Store::open(&url(args), &options).await.expect("open store");
    store.migrate().await.expect("migrate");
    let clock = std::sync::Arc::new(ManualClock::new(parse_rfc3339_ms(now).unwrap()));
    let sealing = fixture::sealing(&store);
    (
        Ledger::new(store, clock.clone(), LedgerConfig::default()).with_privacy(sealing),
        clock,
    )
}

fn run_config(args: &Args) -> RunConfig {
    let defaults = RunConfig::default();
    RunConfig {
        candidates_per_tx: match args.candidates_per_tx {
            0 => defaults.candidates_per_tx,
            n => n,
        },
        ..defaults
    }
}

fn pid(p: usize) -> String {
    format!("prv_{p:06}")
}

/// The payout method of every provider of the bench.
fn method(rail: &str) -> PayoutMethod {
    match rail {
        "sepa" => PayoutMethod::Sepa {
            iban: "DE89370400440532013000".into(),
            bic: None,
            holder: "Acme Compute GmbH".into(),
        },
        "ach" => PayoutMethod::Ach {
            routing: "021000021".into(),
            account: "123456789".into(),
            account_type: "checking".into(),
            holder: "Acme Compute LLC".into(),
            entity: "business".into(),
        },
        _ => PayoutMethod::Solana {
            wallet: WALLET.into(),
        },
    }
}

async fn setup_range(ledger: &Ledger, range: std::ops::Range<usize>, rail: &str) {
    let operator = Actor::operator("bench");
    let start = parse_rfc3339_ms(USAGE_START).unwrap();
    for p in range {
        let provider_id = ProviderId::parse(&pid(p)).unwrap();
        ledger
            .register_provider(
                &RegisterProvider {
                    provider_id: provider_id.clone(),
                    name: format!("Provider {p}"),
                    email: format!("ops@{p}.test"),
                    tier: Tier::Community,
                    schedule: Schedule::Weekly,
                    payout_method: Some(method(rail)),
                },
                &operator,
            )
            .await
            .expect("register provider");
        ledger
            .register_gpu(
                &RegisterGpu {
                    gpu_id: GpuId::parse(&format!("{}-g0", pid(p))).unwrap(),
                    provider_id: provider_id.clone(),
                    model: GpuModel::parse("H100-80GB").unwrap(),
                },
                &operator,
            )
            .await
            .expect("register gpu");
        // The price book the usage rate is checked against (SPEC §2).
        fixture::price(
            ledger,
            &provider_id,
            "H100-80GB",
            "40",
            parse_rfc3339_ms("2026-01-01T00:00:00Z").unwrap(),
            &operator,
        )
        .await;
        let results = ledger
            .ingest_usage(
                &[UsageInput {
                    event_id: Some(format!("bench:{p}")),
                    provider_id: Some(pid(p)),
                    gpu_id: Some(format!("{}-g0", pid(p))),
                    rental_id: None,
                    started_at: Some(format_ms(start)),
                    ended_at: Some(format_ms(start + 3_600_000)),
                    rate_usdc_per_hour: Some("40".into()),
                }],
                &SenderScope::Metering,
                &operator,
            )
            .await
            .expect("ingest");
        assert!(
            matches!(
                results[0],
                UsageResult::Accepted { .. } | UsageResult::Duplicate { .. }
            ),
            "{:?}",
            results[0]
        );
    }
}

async fn phase(args: &Args, phase: &str) {
    match phase {
        "setup" => {
            fresh_database(args).await;
            let (ledger, _) = open(args, SETUP_AT).await;
            let t = Instant::now();
            let per = args.providers.div_ceil(args.loaders);
            let mut tasks = Vec::new();
            for l in 0..args.loaders {
                let ledger = ledger.clone();
                let range = (l * per).min(args.providers)..((l + 1) * per).min(args.providers);
                let rail = args.rail.clone();
                tasks.push(tokio::spawn(async move {
                    setup_range(&ledger, range, &rail).await
                }));
            }
            for t in tasks {
                t.await.expect("loader");
            }
            let events = ledger.store.event_count().await.unwrap();
            let seconds = t.elapsed().as_secs_f64();
            // What `settle serve`'s projector has done long before a Monday: the usage
            // booked above folded into balances (timed apart).
            let t = Instant::now();
            let folded = ledger.store.catch_up_all().await.expect("fold");
            let fold_seconds = t.elapsed().as_secs_f64();
            snapshot(args, Some(&ledger.store)).await;
            println!(
                "{{\"phase\":\"setup\",\"db\":\"{}\",\"providers\":{},\"events\":{events},\"seconds\":{:.2},\"events_folded\":{folded},\"fold_seconds\":{fold_seconds:.2},\"vmhwm_kib\":{}}}",
                args.db,
                args.providers,
                seconds,
                peak::vmhwm_kib()
            );
        }
        "restore" => snapshot(args, None).await,
        "run" | "rerun" => {
            let (ledger, _) = open(args, RUN_AT).await;
            if args.rail == "sepa" {
                // The EUR rate the run converts SEPA payouts with, fresh that morning.
                ledger
                    .set_fx_rate(
                        "0.92".parse().unwrap(),
                        Some(&settle::domain::ids::FxId::parse("bench-fx-run").unwrap()),
                        &Actor::operator("bench"),
                    )
                    .await
                    .expect("fx rate");
            }
            let before = ledger.store.event_count().await.unwrap();
            let t = Instant::now();
            let report = ledger
                .run_payouts(
                    weekly_key(RUN_MONDAY).unwrap(),
                    &Calendar::platform_default(),
                    &run_config(args),
                    &Actor::system("bench"),
                )
                .await
                .expect("run");
            let seconds = t.elapsed().as_secs_f64();
            let after = ledger.store.event_count().await.unwrap();
            // The projector's share of the run, apart: the balances of the payouts created.
            let t = Instant::now();
            let folded = ledger.store.catch_up_all().await.expect("fold");
            let fold_seconds = t.elapsed().as_secs_f64();
            // The run's peak, before the raw limit reads its rows back.
            let vmhwm = peak::vmhwm_kib();
            let raw = if phase == "run" {
                let config = run_config(args);
                raw_run(
                    &ledger,
                    config.candidates_in_flight * config.candidates_per_tx,
                )
                .await
            } else {
                Raw::default()
            };
            println!(
                "{{\"phase\":\"{phase}\",\"db\":\"{}\",\"providers\":{},\"candidates\":{},\"payouts\":{},\"payouts_micro_usdc\":{},\"events_appended\":{},\"seconds\":{seconds:.2},\"candidates_per_second\":{:.0},\"events_folded_after\":{folded},\"fold_after_seconds\":{fold_seconds:.2},\"vmhwm_kib\":{},\"raw_events\":{},\"raw_payouts\":{},\"raw_values_seconds\":{:.2},\"raw_json_seconds\":{:.2},\"raw_seconds\":{:.2}}}",
                args.db,
                args.providers,
                report.candidates.len(),
                report.payouts,
                report.payouts_micro_usdc,
                after - before,
                report.candidates.len() as f64 / seconds,
                vmhwm,
                raw.events,
                raw.payouts,
                raw.values_seconds,
                raw.json_seconds,
                raw.seconds(),
            );
        }
        "bank" => bank_phase(args).await,
        "answers" => answers_phase(args).await,
        p if p.starts_with("import:") => import_phase(args, &p["import:".len()..]).await,
        "verify" => verify_phase(args).await,
        "rebuild" => rebuild_phase(args).await,
        other => panic!("unknown phase {other}"),
    }
}

/// The raw limit of a run's writes on this machine, measured in the run's process right
/// after it: the events the run appended (stream, seq, type, payload) and the payouts it
/// created (id, provider, amount, status), read back untimed, then inserted into fresh
/// tables with the same primary keys by one writer, one `INSERT` per table per transaction
/// of `candidates_per_commit` candidates (the run's transaction on SQLite), twice: rows as
/// bound `VALUES` ([`VALUES_ROWS_MAX`] rows a statement) and rows as one JSON parameter (how
/// the engine sends them); the faster is the limit.
#[derive(Default)]
struct Raw {
    events: usize,
    payouts: usize,
    values_seconds: f64,
    json_seconds: f64,
}

impl Raw {
    fn seconds(&self) -> f64 {
        self.values_seconds.min(self.json_seconds)
    }
}

/// A field of a row the raw limit writes: JSON rows carry it as a string or a number.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Cell {
    Text(String),
    Int(i64),
}

type RawRow = [Cell; 4];

/// A table of the raw limit: its name, its columns, its rows.
struct RawTable {
    name: &'static str,
    create: &'static str,
    columns: &'static str,
    rows: Vec<RawRow>,
}

/// Rows of one bound `VALUES` statement (on PostgreSQL numbered parameters; on SQLite
/// anonymous ones, since sqlx looks a numbered parameter's name up in SQLite's list of them,
/// and a statement of thousands of them spends its time there).
const VALUES_ROWS_MAX: usize = 100;

async fn raw_run(ledger: &Ledger, candidates_per_commit: usize) -> Raw {
    use sqlx::Row as _;
    let pool = ledger.store.pool();
    let read = |sql: &'static str, integer: usize| async move {
        sqlx::query(sql)
            .fetch_all(pool)
            .await
            .expect(sql)
            .iter()
            .map(|r| {
                std::array::from_fn(|i| match i == integer {
                    true => Cell::Int(r.get(i)),
                    false => Cell::Text(r.get(i)),
                })
            })
            .collect::<Vec<RawRow>>()
    };
    let tables = [
        RawTable {
            name: "bench_raw_events",
            create: "(stream TEXT NOT NULL, seq BIGINT NOT NULL, event_type TEXT NOT NULL, \
                     payload TEXT NOT NULL, PRIMARY KEY (stream, seq))",
            columns: "stream, seq, event_type, payload",
            rows: read(
                "SELECT stream, seq, event_type, payload FROM events WHERE event_type IN \
                 ('payout_run.decided', 'payout.created', 'payout_run.completed') ORDER BY stream, seq",
                1,
            )
            .await,
        },
        RawTable {
            name: "bench_raw_payouts",
            create: "(payout_id TEXT PRIMARY KEY, provider_id TEXT NOT NULL, \
                     amount_micro_usdc BIGINT NOT NULL, status TEXT NOT NULL)",
            columns: "payout_id, provider_id, amount_micro_usdc, status",
            rows: read(
                "SELECT payout_id, provider_id, amount_micro_usdc, status FROM payouts ORDER BY payout_id",
                2,
            )
            .await,
        },
    ];
    let commits = tables[1]
        .rows
        .len()
        .div_ceil(candidates_per_commit.max(1))
        .max(1);
    Raw {
        events: tables[0].rows.len(),
        payouts: tables[1].rows.len(),
        values_seconds: raw_insert(ledger, &tables, commits, false).await,
        json_seconds: raw_insert(ledger, &tables, commits, true).await,
    }
}

/// One timed pass of [`raw_run`]: `commits` transactions, each writing its share of every
/// table's rows into fresh tables, dropped after.
async fn raw_insert(ledger: &Ledger, tables: &[RawTable], commits: usize, json: bool) -> f64 {
    let pool = ledger.store.pool();
    let dialect = ledger.store.dialect();
    for t in tables {
        for sql in [
            format!("DROP TABLE IF EXISTS {}", t.name),
            format!("CREATE TABLE {} {}", t.name, t.create),
        ] {
            sqlx::query(&sql).execute(pool).await.expect(&sql);
        }
    }
    // Field `i` of a JSON row, integers cast; `$n` placeholders of `rows` bound rows.
    let json_field = |t: &RawTable, i: usize| match t.rows.first().map(|r| &r[i]) {
        Some(Cell::Int(_)) => format!("CAST(j.value ->> {i} AS BIGINT)"),
        _ => format!("j.value ->> {i}"),
    };
    // SQLite gets anonymous `?` parameters, which sqlx binds in order (the engine's bulk
    // writes, `store::values`); PostgreSQL numbered ones.
    let values = |rows: usize| {
        (0..rows)
            .map(|r| match dialect {
                Dialect::Sqlite => "(?,?,?,?)".to_owned(),
                Dialect::Postgres => format!(
                    "(${},${},${},${})",
                    4 * r + 1,
                    4 * r + 2,
                    4 * r + 3,
                    4 * r + 4
                ),
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let started = Instant::now();
    let mut conn = pool.acquire().await.expect("connection");
    for c in 0..commits {
        let mut tx = sqlx::Connection::begin(&mut *conn).await.expect("begin");
        for t in tables {
            let per = t.rows.len().div_ceil(commits).max(1);
            let share = &t.rows[(c * per).min(t.rows.len())..((c + 1) * per).min(t.rows.len())];
            if share.is_empty() {
                continue;
            }
            if json {
                let fields: Vec<String> = (0..4).map(|i| json_field(t, i)).collect();
                let sql = format!(
                    "INSERT INTO {} ({}) SELECT {} FROM {}",
                    t.name,
                    t.columns,
                    fields.join(", "),
                    dialect.json_rows(1, share.len())
                );
                sqlx::query(&sql)
                    .bind(settle::store::json_rows_param(share))
                    .execute(&mut *tx)
                    .await
                    .expect(&sql);
                continue;
            }
            for rows in share.chunks(VALUES_ROWS_MAX) {
                let sql = format!(
                    "INSERT INTO {} ({}) VALUES {}",
                    t.name,
                    t.columns,
                    values(rows.len())
                );
                let mut q = sqlx::query(&sql);
                for cell in rows.iter().flatten() {
                    q = match cell {
                        Cell::Text(v) => q.bind(v),
                        Cell::Int(v) => q.bind(v),
                    };
                }
                q.execute(&mut *tx).await.expect(&sql);
            }
        }
        tx.commit().await.expect("commit");
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(conn);
    for t in tables {
        let sql = format!("DROP TABLE {}", t.name);
        sqlx::query(&sql).execute(pool).await.expect(&sql);
    }
    seconds
}

/// Where the `bank` phase writes the bank files and the `answers` phase the bank's answers
/// (beside the SQLite file, kept until the next `bank` phase).
fn outbox_dir(args: &Args) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("{}.outbox", args.sqlite_path))
}

fn bank_config(args: &Args) -> settle::config::BankConfig {
    settle::config::BankConfig {
        outbox_dir: outbox_dir(args).display().to_string(),
        batch_payouts_max: args.batch_payouts_max,
        ..Default::default()
    }
}

/// The bank outbox after the run (`--rail ach|sepa`): every payout into NACHA or pain.001
/// files of at most `--batch-payouts-max` payouts, submitted; then, in the same process, the
/// raw limit of the same work on this machine: the payout rows read with one plain
/// statement and the same bytes written to one file with one fsync.
async fn bank_phase(args: &Args) {
    let (ledger, _) = open(args, "2026-11-23T06:30:00Z").await;
    let outbox = outbox_dir(args);
    let _ = std::fs::remove_dir_all(&outbox);
    std::fs::create_dir_all(&outbox).expect("outbox");
    let config = bank_config(args);
    let t = Instant::now();
    let report = settle::rails::bank::generate_batches(&ledger, &config, &Actor::system("bench"))
        .await
        .expect("generate");
    let seconds = t.elapsed().as_secs_f64();
    let vmhwm = peak::vmhwm_kib();
    let submitted: usize = report.batches.iter().map(|b| b.submitted).sum();
    let mut bytes = Vec::new();
    for b in &report.batches {
        bytes.extend(std::fs::read(&b.path).expect("bank file"));
    }

    let t = Instant::now();
    let rows = read_rows(ledger.store.pool(), "SELECT * FROM payouts").await;
    let raw_dir = tempfile::tempdir().expect("raw dir");
    let raw_file = raw_dir.path().join("raw");
    {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&raw_file).expect("raw file");
        f.write_all(&bytes).expect("write raw");
        f.sync_all().expect("fsync raw");
    }
    let raw_seconds = t.elapsed().as_secs_f64();
    println!(
        "{{\"phase\":\"bank\",\"db\":\"{}\",\"rail\":\"{}\",\"providers\":{},\"batch_payouts_max\":{},\"files\":{},\"payouts_submitted\":{submitted},\"file_bytes\":{},\"seconds\":{seconds:.2},\"payouts_per_second\":{:.0},\"vmhwm_kib\":{vmhwm},\"raw_rows_read\":{rows},\"raw_seconds\":{raw_seconds:.2}}}",
        args.db,
        args.rail,
        args.providers,
        args.batch_payouts_max,
        report.batches.len(),
        bytes.len(),
        submitted as f64 / seconds,
    );
}

/// The bank answers the files of the `bank` phase: the simulator (untimed) writes a
/// pain.002 and a camt.054 per pain.001, a returns file per NACHA file, with
/// `--returns-per-mille` of the payments returned; the `import` phases read them.
async fn answers_phase(args: &Args) {
    use settle_bank::SimulationConfig;
    let config = bank_config(args);
    let outbox = outbox_dir(args);
    let mut sent: Vec<std::path::PathBuf> = std::fs::read_dir(&outbox)
        .expect("outbox of the bank phase")
        .map(|e| e.expect("outbox entry").path())
        .filter(|p| p.is_file())
        .collect();
    sent.sort();
    let answers = outbox.join("answers");
    let _ = std::fs::remove_dir_all(&answers);
    std::fs::create_dir_all(&answers).expect("answers dir");
    let day = chrono::NaiveDate::from_ymd_opt(2026, 11, 24).unwrap();
    let mut sim = SimulationConfig::new(7, day, day.and_hms_opt(18, 0, 0).unwrap());
    sim.returns_per_mille = args.returns_per_mille;
    let written = settle::rails::bank::inbox::simulate_files(&config, &sent, &answers, &sim)
        .expect("simulate");
    println!(
        "{{\"phase\":\"answers\",\"db\":\"{}\",\"files\":{}}}",
        args.db,
        written.len()
    );
}

/// The kinds of answer file (their names' endings) the `import` phase imports, each in a
/// process of its own: the camt.054 notifications first (they book the payments; a status
/// report after them finds them settled already), then the status reports.
const ANSWER_KINDS: [&str; 3] = [".camt054.xml", ".pain002.xml", ".returns.ach"];

/// Imports the answers of one kind (`--phase import:KIND`, KIND an [`ANSWER_KINDS`] ending)
/// that the `answers` phase wrote, as `settle bank import` does, in a fresh process: timed,
/// with the process's peak memory; then the raw limit of the same work (see
/// [`raw_import`]).
async fn import_phase(args: &Args, kind: &str) {
    let (ledger, _) = open(args, "2026-11-25T10:00:00Z").await;
    let config = bank_config(args);
    let mut written: Vec<std::path::PathBuf> = std::fs::read_dir(outbox_dir(args).join("answers"))
        .expect("answers of the answers phase")
        .map(|e| e.expect("answer").path())
        .filter(|p| p.to_string_lossy().ends_with(kind))
        .collect();
    written.sort();
    let originator = settle::rails::bank::Originator::parse(&config).expect("originator");
    let control = settle::config::ControlConfig::default();
    let cx = settle::rails::bank::answers::ImportContext {
        originator: &originator,
        control: &control,
        signer: None,
        payouts_per_tx: config.answer_payouts_per_tx,
    };
    for path in written {
        let t = Instant::now();
        let bytes = settle::rails::bank::inbox::read_limited(&path, config.answer_file_bytes_max)
            .expect("read answer");
        let file_bytes = bytes.len();
        let report = settle::rails::bank::answers::import_answer(
            &ledger,
            bytes,
            &cx,
            &Actor::system("bench"),
        )
        .await
        .expect("import");
        let seconds = t.elapsed().as_secs_f64();
        let vmhwm = peak::vmhwm_kib();
        let (parse_seconds, raw_seconds) = raw_import(&ledger, &path, &report).await;
        println!(
            "{{\"phase\":\"import\",\"db\":\"{}\",\"file\":\"{}\",\"kind\":\"{}\",\"file_bytes\":{},\"entries\":{},\"settled\":{},\"rejected\":{},\"returned\":{},\"exceptions\":{},\"seconds\":{seconds:.2},\"entries_per_second\":{:.0},\"vmhwm_kib\":{vmhwm},\"raw_parse_seconds\":{parse_seconds:.2},\"raw_seconds\":{raw_seconds:.2}}}",
            args.db,
            path.file_name().unwrap_or_default().to_string_lossy(),
            report.kind,
            file_bytes,
            report.entries,
            report.settled,
            report.rejected,
            report.returned,
            report.exceptions,
            report.entries as f64 / seconds,
        );
        assert_eq!(report.exceptions, 0, "the simulator's answers all match");
    }
}

/// The raw limit of importing `path`: (seconds to read and parse it, seconds of the read,
/// the parse and one write of a row per entry in one transaction).
async fn raw_import(
    ledger: &Ledger,
    path: &std::path::Path,
    report: &settle::rails::bank::answers::ImportReport,
) -> (f64, f64) {
    let rows: Vec<RawRow> = report
        .results
        .iter()
        .zip(0i64..)
        .map(|(r, n)| {
            [
                Cell::Text(r.reference.clone()),
                Cell::Text(r.payout_id.clone().unwrap_or_default()),
                Cell::Int(n),
                Cell::Text(r.outcome.clone()),
            ]
        })
        .collect();
    let tables = [RawTable {
        name: "bench_raw_answers",
        create: "(reference TEXT NOT NULL, payout_id TEXT NOT NULL, \
                 entry BIGINT PRIMARY KEY, outcome TEXT NOT NULL)",
        columns: "reference, payout_id, entry, outcome",
        rows,
    }];
    let t = Instant::now();
    let bytes = std::fs::read(path).expect("read answer");
    let answer = settle_bank::read_answer(&bytes).expect("parse answer");
    assert_eq!(answer.entry_count(), report.entries);
    let parse_seconds = t.elapsed().as_secs_f64();
    drop(answer);
    let write_seconds = raw_insert(ledger, &tables, 1, true).await;
    (parse_seconds, parse_seconds + write_seconds)
}

/// Reads every row `sql` returns, one at a time (nothing kept), and counts them.
async fn read_rows(pool: &sqlx::AnyPool, sql: &str) -> usize {
    use futures::TryStreamExt as _;
    let mut rows = 0;
    let mut read = sqlx::query(sql).fetch(pool);
    while read.try_next().await.expect("read rows").is_some() {
        rows += 1;
    }
    rows
}

/// `settle verify` of the whole ledger the phases before left: chains, lines, and the
/// projections against a fresh fold, read `store.verify_streams_per_page` streams at a
/// time; its peak memory is taken before, in the same process, the raw limit of its reads:
/// every event and every projection row read once with a plain `SELECT` (`raw_seconds`).
async fn verify_phase(args: &Args) {
    let (ledger, _) = open(args, RUN_AT).await;
    let t = Instant::now();
    let report = settle::verify::verify(&ledger.store, &|_| {})
        .await
        .expect("verify");
    let seconds = t.elapsed().as_secs_f64();
    let vmhwm = peak::vmhwm_kib();
    assert!(report.ok(), "{:?}", report.problems);
    let t = Instant::now();
    let pool = ledger.store.pool();
    let mut raw_rows = read_rows(pool, "SELECT * FROM events").await;
    for spec in settle::domain::projection::TABLES {
        raw_rows += read_rows(pool, &format!("SELECT * FROM {}", spec.name)).await;
    }
    let raw_seconds = t.elapsed().as_secs_f64();
    println!(
        "{{\"phase\":\"verify\",\"db\":\"{}\",\"providers\":{},\"streams\":{},\"events\":{},\"seconds\":{seconds:.2},\"events_per_second\":{:.0},\"vmhwm_kib\":{vmhwm},\"raw_rows_read\":{raw_rows},\"raw_seconds\":{raw_seconds:.2}}}",
        args.db,
        args.providers,
        report.streams,
        report.events,
        report.events as f64 / seconds,
    );
}

/// `settle rebuild` of the whole ledger the phases before left (on request only:
/// `--phase rebuild`): every stream read, checked and folded a page at a time into the
/// snapshot's copies of the tables, which then replace the tables; its seconds and peak
/// memory. Then, in the same process, the raw limit of that work: every event read once
/// with a plain `SELECT`, and every projection table copied once by
/// `CREATE TEMPORARY TABLE … AS SELECT *` (`raw_seconds`).
async fn rebuild_phase(args: &Args) {
    let (ledger, _) = open(args, RUN_AT).await;
    let per_page = settle::config::StoreConfig::default().verify_streams_per_page;
    let t = Instant::now();
    let report = settle::verify::rebuild(&ledger.store, per_page, &|_| {})
        .await
        .expect("rebuild");
    let seconds = t.elapsed().as_secs_f64();
    let vmhwm = peak::vmhwm_kib();
    assert!(report.ok(), "{:?}", report.problems);
    let t = Instant::now();
    let pool = ledger.store.pool();
    let raw_rows = read_rows(pool, "SELECT * FROM events").await;
    let mut conn = pool.acquire().await.expect("connection");
    for spec in settle::domain::projection::TABLES {
        let copy = format!("raw_copy_{}", spec.name);
        sqlx::query(&format!(
            "CREATE TEMPORARY TABLE {copy} AS SELECT * FROM {}",
            spec.name
        ))
        .execute(&mut *conn)
        .await
        .expect("copy a table");
        sqlx::query(&format!("DROP TABLE {copy}"))
            .execute(&mut *conn)
            .await
            .expect("drop the copy");
    }
    let raw_seconds = t.elapsed().as_secs_f64();
    println!(
        "{{\"phase\":\"rebuild\",\"db\":\"{}\",\"providers\":{},\"streams\":{},\"events\":{},\"seconds\":{seconds:.2},\"vmhwm_kib\":{vmhwm},\"raw_events_read\":{raw_rows},\"raw_seconds\":{raw_seconds:.2}}}",
        args.db, args.providers, report.streams, report.events,
    );
}

fn main() {
    // `SETTLE_BENCH_LOG=sqlx=debug`: every statement with its time, on stderr.
    if let Ok(filter) = std::env::var("SETTLE_BENCH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
    }
    let args = parse_args();
    if let Some(p) = &args.phase {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(phase(&args, p));
        return;
    }
    // Parent: each phase in its own process, for its own peak memory.
    let exe = std::env::current_exe().expect("own path");
    let own: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut phases: Vec<&str> = if args.reuse {
        vec!["restore", "run", "rerun"]
    } else {
        vec!["setup", "run", "rerun"]
    };
    let imports: Vec<String> = ANSWER_KINDS.iter().map(|k| format!("import:{k}")).collect();
    if args.rail != "solana" {
        phases.extend(["bank", "answers"]);
        phases.extend(imports.iter().map(String::as_str));
    }
    phases.push("verify");
    for p in phases {
        let status = std::process::Command::new(&exe)
            .args(&own)
            .args(["--phase", p])
            .status()
            .expect("run phase");
        assert!(status.success(), "phase {p} failed");
    }
}
