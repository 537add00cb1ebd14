//! Ingestion benchmark: sustained `Ledger::ingest_usage` against the raw insert rate of the
//! same database. See `ops/bench/ingest.md` for the command and the figures.
//!
//! The parent process runs each (database, phase) in a child process of this same binary so
//! that each phase reports its own peak memory (VmHWM) and starts from a fresh database.
//!
//! Phases:
//! - `raw`: multi-row `INSERT … ON CONFLICT DO NOTHING` of the same event ids and net amounts
//!   into a two-column table, one transaction per batch, with the engine's durability
//!   settings (SQLite WAL + synchronous=FULL, 16 MiB page cache; PostgreSQL defaults). No engine
//!   code.
//! - `engine`: the same batches through `Ledger::ingest_usage` (metering scope), after
//!   registering the providers, GPUs and rates (setup, timed apart).
//! - `http`: the same batches as `POST /v1/usage` to the real server on a loopback port
//!   (metering token), from `--clients` concurrent senders (default 1).
//! - `file`: the same batches as one NDJSON file (written before the clock starts), booked
//!   by the release `settle ingest FILE` process; its peak memory is the one reported.

#[path = "fixture.rs"]
mod fixture;
#[path = "peak.rs"]
mod peak;

#[path = "../../tests/it/common/tables.rs"]
mod tables;
use tables::Tables;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use settle::domain::event::{PayoutMethod, Schedule, Tier};
use settle::domain::ids::{GpuId, GpuModel, ProviderId};
use settle::domain::money::format_micro_usdc;
use settle::domain::time::{MS_PER_DAY, format_ms, parse_rfc3339_ms};
use settle::ledger::ingest::{SenderScope, UsageInput, UsageResult};
use settle::ledger::registry::{RegisterGpu, RegisterProvider};
use settle::ledger::{Actor, Ledger, ManualClock};
use settle::store::Store;
use sqlx::Row;

const START: &str = "2026-11-20T06:00:00Z";
const SLOT_MS: i64 = 600_000;
const MODEL: &str = "H100-80GB";
const BOOK_RATE_MICRO: i64 = 2_490_000;
const FEE_BPS: i64 = 2000;

#[derive(Clone, Debug)]
struct Args {
    /// Unique events booked (duplicates come on top).
    events: usize,
    batch: usize,
    dup_pct: usize,
    providers: usize,
    gpus: usize,
    /// `metering`: time-ordered, every batch spans hundreds of providers;
    /// `agent`: provider-ordered, a batch holds one or two providers' events.
    mix: String,
    dbs: Vec<String>,
    /// `behind`: the projector folds while the batches are booked (as `settle serve`);
    /// `at-end`: nothing is folded until the last batch (booking and folding timed apart).
    fold: String,
    pg_url: String,
    /// `--db citus`: the admin URL of the cluster's coordinator (`ops/citus/cluster.sh`).
    citus_url: String,
    dir: Option<String>,
    phases: Vec<String>,
    /// `http` phase: concurrent senders (each posts the next batch when answered).
    clients: usize,
    /// Child mode: run one (db, phase) and print one JSON line.
    child: bool,
}

fn parse_args() -> Args {
    let mut a = Args {
        events: 1_000_000,
        batch: 1000,
        dup_pct: 10,
        providers: 1000,
        gpus: 8,
        mix: "metering".into(),
        dbs: vec!["sqlite".into(), "postgres".into()],
        fold: "behind".into(),
        pg_url: std::env::var("SETTLE_BENCH_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        citus_url: std::env::var("SETTLE_BENCH_CITUS_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:9700/postgres".into()),
        dir: None,
        phases: vec!["raw".into(), "engine".into()],
        clients: 1,
        child: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--events" => a.events = val().parse().expect("--events N"),
            "--batch" => a.batch = val().parse().expect("--batch N"),
            "--dup-pct" => a.dup_pct = val().parse().expect("--dup-pct N"),
            "--providers" => a.providers = val().parse().expect("--providers N"),
            "--gpus" => a.gpus = val().parse().expect("--gpus N"),
            "--mix" => a.mix = val(),
            "--fold" => a.fold = val(),
            "--db" => a.dbs = val().split(',').map(str::to_owned).collect(),
            "--phase" => a.phases = val().split(',').map(str::to_owned).collect(),
            "--pg-url" => a.pg_url = val(),
            "--citus-url" => a.citus_url = val(),
            "--dir" => a.dir = Some(val()),
            "--clients" => a.clients = val().parse().expect("--clients N"),
            "--child" => a.child = true,
            // `cargo bench` passes `--bench`; ignore it and any libtest flag.
            _ => {}
        }
    }
    assert!(
        matches!(a.mix.as_str(), "metering" | "agent"),
        "--mix metering|agent"
    );
    assert!(
        matches!(a.fold.as_str(), "behind" | "at-end"),
        "--fold behind|at-end"
    );
    assert!(a.dup_pct < 100 && a.batch > 0 && a.providers > 0 && a.gpus > 0 && a.clients > 0);
    a
}

// ---------------------------------------------------------------------------------------
// The workload: deterministic, generated batch by batch (the generator's memory stays small).

struct Workload {
    args: Args,
    slots: usize,
    gpus_total: usize,
    /// Per slot, the order of GPUs (metering mix).
    perms: Vec<Vec<u32>>,
    start_ms: i64,
}

/// One event: its index decides everything.
struct Ev {
    event_id: String,
    provider: usize,
    gpu: usize,
    started_ms: i64,
    ended_ms: i64,
    rate_micro: Option<i64>,
}

impl Workload {
    fn new(args: &Args) -> Workload {
        let gpus_total = args.providers * args.gpus;
        let slots = args.events.div_ceil(gpus_total);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let perms = if args.mix == "metering" {
            (0..slots)
                .map(|_| {
                    let mut p: Vec<u32> = (0..gpus_total as u32).collect();
                    p.shuffle(&mut rng);
                    p
                })
                .collect()
        } else {
            Vec::new()
        };
        Workload {
            args: args.clone(),
            slots,
            gpus_total,
            perms,
            start_ms: parse_rfc3339_ms(START).unwrap(),
        }
    }

    fn now_ms(&self) -> i64 {
        // Late enough for every interval, early enough for the lateness limit.
        self.start_ms + (self.slots as i64 + 1) * SLOT_MS + MS_PER_DAY
    }

    fn event(&self, k: usize) -> Ev {
        let (slot, gpu) = if self.args.mix == "metering" {
            let slot = k / self.gpus_total;
            (slot, self.perms[slot][k % self.gpus_total] as usize)
        } else {
            let per_provider = self.args.gpus * self.slots;
            let p = k / per_provider;
            let within = k % per_provider;
            (
                within / self.args.gpus,
                p * self.args.gpus + within % self.args.gpus,
            )
        };
        let provider = gpu / self.args.gpus;
        let started_ms = self.start_ms + slot as i64 * SLOT_MS;
        // Most intervals fill their slot; some end early (the agent went idle).
        let ended_ms = started_ms + SLOT_MS - if slot % 7 == 3 { 123_456 } else { 0 };
        let rate_micro =
            (slot % 2 == 1).then(|| 1_500_000 + ((gpu * 7919 + slot * 31) % 2_000_000) as i64);
        Ev {
            event_id: format!("agt-{provider:04}-{}:{slot:06}", gpu % self.args.gpus),
            provider,
            gpu,
            started_ms,
            ended_ms,
            rate_micro,
        }
    }

    /// Batches: each holds `batch × (1 − dup%)` new events and re-sends of recent ones.
    fn batches(&self) -> impl Iterator<Item = Vec<usize>> + '_ {
        let new_per_batch = self.args.batch - self.args.batch * self.args.dup_pct / 100;
        let dups_per_batch = self.args.batch - new_per_batch;
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut next = 0usize;
        std::iter::from_fn(move || {
            if next >= self.args.events {
                return None;
            }
            let end = (next + new_per_batch).min(self.args.events);
            let mut batch: Vec<usize> = (next..end).collect();
            let recent_from = next.saturating_sub(2 * self.args.batch);
            for _ in 0..dups_per_batch.min(next) {
                batch.push(rng.gen_range(recent_from..next));
            }
            batch.shuffle(&mut rng);
            next = end;
            Some(batch)
        })
    }
}

fn provider_id(p: usize) -> String {
    format!("bp{p:04}")
}

fn gpu_id(args: &Args, gpu: usize) -> String {
    format!("{}-g{}", provider_id(gpu / args.gpus), gpu % args.gpus)
}

/// Round half to even of `n / d` (n ≥ 0), independent of the engine's code.
fn half_even(n: i128, d: i128) -> i128 {
    let (q, r) = (n / d, n % d);
    match (2 * r).cmp(&d) {
        std::cmp::Ordering::Less => q,
        std::cmp::Ordering::Greater => q + 1,
        std::cmp::Ordering::Equal => q + (q & 1),
    }
}

/// Net µUSDC of an event: split at midnight, priced per segment, community fee.
fn net_micro(ev: &Ev) -> i64 {
    let rate = i128::from(ev.rate_micro.unwrap_or(BOOK_RATE_MICRO));
    let mut net = 0i64;
    let mut s = ev.started_ms;
    while s < ev.ended_ms {
        let e = ((s.div_euclid(MS_PER_DAY) + 1) * MS_PER_DAY).min(ev.ended_ms);
        let gross = half_even(rate * i128::from(e - s), 3_600_000);
        let fee = half_even(gross * i128::from(FEE_BPS), 10_000);
        net += (gross - fee) as i64;
        s = e;
    }
    net
}

// ---------------------------------------------------------------------------------------
// Databases

struct Db {
    url: String,
    pg: Option<(String, String)>,
    /// A database of the Citus cluster (made and dropped on every node).
    citus: bool,
    _dir: Option<tempfile::TempDir>,
}

async fn fresh_db(args: &Args, kind: &str, phase: &str) -> Db {
    sqlx::any::install_default_drivers();
    match kind {
        "sqlite" => {
            let dir = match &args.dir {
                Some(d) => tempfile::tempdir_in(d).expect("temp dir"),
                None => tempfile::tempdir().expect("temp dir"),
            };
            let url = format!("sqlite://{}", dir.path().join("bench.db").display());
            Db {
                url,
                pg: None,
                citus: false,
                _dir: Some(dir),
            }
        }
        "postgres" => {
            let name = format!("settle_bench_{}_{phase}", std::process::id());
            let admin = sqlx::AnyPool::connect(&args.pg_url)
                .await
                .expect("connect --pg-url");
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
                .execute(&admin)
                .await
                .unwrap();
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&admin)
                .await
                .unwrap();
            admin.close().await;
            let base = args
                .pg_url
                .rsplit_once('/')
                .map(|(b, _)| b)
                .unwrap_or(&args.pg_url);
            Db {
                url: format!("{base}/{name}"),
                pg: Some((args.pg_url.clone(), name)),
                citus: false,
                _dir: None,
            }
        }
        "citus" => {
            let name = format!("settle_bench_{}_{phase}", std::process::id());
            let _ = settle::store::citus::drop_database(&args.citus_url, &name).await;
            let url = settle::store::citus::create_database(&args.citus_url, &name)
                .await
                .expect("a database on the cluster (--citus-url)");
            Db {
                url,
                pg: Some((args.citus_url.clone(), name)),
                citus: true,
                _dir: None,
            }
        }
        other => panic!("--db sqlite|postgres|citus, got {other}"),
    }
}

async fn drop_db(db: Db) {
    if let (true, Some((admin_url, name))) = (db.citus, &db.pg) {
        let _ = settle::store::citus::drop_database(admin_url, name).await;
        return;
    }
    if let Some((admin_url, name)) = &db.pg {
        let admin = sqlx::AnyPool::connect(admin_url).await.unwrap();
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&admin)
            .await;
        admin.close().await;
    }
}

/// Latency percentiles of the batches, in milliseconds.
fn percentiles(mut lat: Vec<Duration>) -> (f64, f64, f64) {
    lat.sort();
    let at = |q: f64| {
        lat.get(((lat.len() as f64 - 1.0) * q) as usize)
            .map(|d| d.as_secs_f64() * 1e3)
            .unwrap_or(0.0)
    };
    (at(0.5), at(0.99), at(1.0))
}

// ---------------------------------------------------------------------------------------
// Phases

async fn run_raw(args: &Args, w: &Workload, db: &Db) -> serde_json::Value {
    use sqlx::postgres::PgPoolOptions;
    use sqlx::sqlite::SqlitePoolOptions;
    // The engine's native driver of each database (`Store::open`), one connection.
    if db.pg.is_some() {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&db.url)
            .await
            .expect("open raw database");
        if db.citus {
            // The cluster's raw limit: the table spread over the workers like the ledger.
            sqlx::query(RAW_TABLE).execute(&pool).await.unwrap();
            sqlx::query("SELECT create_distributed_table('raw_events', 'event_id')")
                .execute(&pool)
                .await
                .unwrap();
        }
        raw_inserts(args, w, &pool).await
    } else {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    // The engine's durability and cache settings (`Store::open`).
                    for pragma in [
                        "PRAGMA journal_mode = WAL",
                        "PRAGMA synchronous = FULL",
                        "PRAGMA cache_size = -16384",
                        "PRAGMA wal_autocheckpoint = 10000",
                    ] {
                        sqlx::query(pragma).execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            })
            .connect(&format!("{}?mode=rwc", db.url))
            .await
            .expect("open raw database");
        raw_inserts(args, w, &pool).await
    }
}

/// The raw phase on one driver: multi-row `INSERT … ON CONFLICT DO NOTHING`, a transaction
/// per batch.
/// The raw phase's table: an event's id and its net, nothing else.
const RAW_TABLE: &str = "CREATE TABLE IF NOT EXISTS raw_events (event_id TEXT PRIMARY KEY, net_micro_usdc BIGINT NOT NULL)";

async fn raw_inserts<D>(args: &Args, w: &Workload, pool: &sqlx::Pool<D>) -> serde_json::Value
where
    D: sqlx::Database,
    for<'c> &'c mut D::Connection: sqlx::Executor<'c, Database = D>,
    for<'c> &'c sqlx::Pool<D>: sqlx::Executor<'c, Database = D>,
    for<'q> D::Arguments<'q>: sqlx::IntoArguments<'q, D>,
    String: for<'q> sqlx::Encode<'q, D> + sqlx::Type<D>,
    i64: for<'q> sqlx::Encode<'q, D> + for<'r> sqlx::Decode<'r, D> + sqlx::Type<D>,
    usize: sqlx::ColumnIndex<D::Row>,
{
    sqlx::query(RAW_TABLE).execute(pool).await.unwrap();
    let mut sent = 0usize;
    let mut latencies = Vec::new();
    let started = Instant::now();
    for batch in w.batches() {
        let t = Instant::now();
        let events: Vec<Ev> = batch.iter().map(|&k| w.event(k)).collect();
        let mut sql = String::from("INSERT INTO raw_events (event_id, net_micro_usdc) VALUES ");
        for i in 0..events.len() {
            if i > 0 {
                sql.push(',');
            }
            // Anonymous parameters on SQLite: sqlx binds them in order, where it looks a
            // numbered one up in SQLite's list of names (quadratic in their number).
            if D::NAME == "SQLite" {
                sql.push_str("(?,?)");
            } else {
                sql.push_str(&format!("(${},${})", 2 * i + 1, 2 * i + 2));
            }
        }
        sql.push_str(" ON CONFLICT DO NOTHING");
        let mut tx = pool.begin().await.unwrap();
        let mut q = sqlx::query(&sql);
        for e in &events {
            q = q.bind(e.event_id.clone()).bind(net_micro(e));
        }
        q.execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        sent += events.len();
        latencies.push(t.elapsed());
    }
    let secs = started.elapsed().as_secs_f64();
    let hwm = peak::vmhwm_kib();
    let booked: i64 = sqlx::query("SELECT COUNT(*) FROM raw_events")
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        booked as usize, args.events,
        "raw: every unique event inserted once"
    );
    pool.close().await;
    let (p50, p99, max) = percentiles(latencies);
    serde_json::json!({"sent": sent, "booked": booked, "secs": secs, "events_per_s": sent as f64 / secs,
        "batch_ms_p50": p50, "batch_ms_p99": p99, "batch_ms_max": max, "vm_hwm_kb": hwm})
}

/// What a booking phase sent and was answered (`accepted` and `duplicates` are unknown to
/// the `file` phase, which reads the answers from the ledger afterwards).
struct Sent {
    sent: usize,
    accepted: Option<usize>,
    duplicates: Option<usize>,
    latencies: Vec<Duration>,
    /// The `file` phase: the peak memory of the `settle ingest` process, which booked.
    booker_hwm_kb: Option<u64>,
}

fn usage_input(args: &Args, w: &Workload, e: &Ev) -> UsageInput {
    UsageInput {
        event_id: Some(e.event_id.clone()),
        provider_id: Some(provider_id(e.provider)),
        gpu_id: Some(gpu_id(args, e.gpu)),
        rental_id: Some(format!(
            "rnt-{}-{}",
            e.gpu,
            (e.started_ms - w.start_ms) / SLOT_MS / 12
        )),
        started_at: Some(format_ms(e.started_ms)),
        ended_at: Some(format_ms(e.ended_ms)),
        rate_usdc_per_hour: e.rate_micro.map(format_micro_usdc),
    }
}

/// The `engine` phase: each batch through `Ledger::ingest_usage`, one after another.
async fn book_through_ledger(args: &Args, w: &Workload, ledger: &Ledger) -> Sent {
    let actor = Actor::token("bench-metering");
    let (mut sent, mut accepted, mut duplicates) = (0usize, 0usize, 0usize);
    let mut latencies = Vec::new();
    for batch in w.batches() {
        let t = Instant::now();
        let inputs: Vec<UsageInput> = batch
            .iter()
            .map(|&k| usage_input(args, w, &w.event(k)))
            .collect();
        let results = ledger
            .ingest_usage(&inputs, &SenderScope::Metering, &actor)
            .await
            .expect("ingest");
        latencies.push(t.elapsed());
        let (a, d) = tally(results.iter().map(|r| match r {
            UsageResult::Accepted { .. } => "accepted",
            UsageResult::Duplicate { .. } => "duplicate",
            UsageResult::Rejected { .. } => panic!("rejected: {r:?}"),
        }));
        accepted += a;
        duplicates += d;
        sent += inputs.len();
    }
    Sent {
        sent,
        accepted: Some(accepted),
        duplicates: Some(duplicates),
        latencies,
        booker_hwm_kb: None,
    }
}

/// Counts `accepted` and `duplicate` answers; anything else fails the run.
fn tally<'a>(statuses: impl Iterator<Item = &'a str>) -> (usize, usize) {
    let (mut accepted, mut duplicates) = (0, 0);
    for s in statuses {
        match s {
            "accepted" => accepted += 1,
            "duplicate" => duplicates += 1,
            other => panic!("an event was answered {other}"),
        }
    }
    (accepted, duplicates)
}

/// The `http` phase: the real server on a loopback port (`POST /v1/usage`, a metering
/// token, the group commit of `[ledger]`'s defaults); `--clients` senders each post the next
/// batch once answered.
async fn book_through_http(args: &Args, w: &Workload, ledger: &Ledger) -> Sent {
    let token = fixture::token(
        &ledger.store,
        settle::auth::Scope::Metering,
        None,
        "bench-metering",
        ledger.now_ms(),
    )
    .await;
    let app = settle::http::Application::build(
        settle::config::HttpConfig {
            bind: "127.0.0.1:0".into(),
            ..settle::config::HttpConfig::default()
        },
        ledger.clone(),
    )
    .await
    .expect("bind");
    let url = format!("http://127.0.0.1:{}/v1/usage", app.port());
    let server = tokio::spawn(app.run_until_stopped(std::future::pending()));
    let batches: Vec<Vec<usize>> = w.batches().collect();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let batches = Arc::new(batches);
    // The senders' own copy of the generator (the batches above came from `w`).
    let shared = Arc::new(Workload::new(args));
    let mut senders = Vec::new();
    for _ in 0..args.clients {
        let (next, batches, url, token) =
            (next.clone(), batches.clone(), url.clone(), token.clone());
        let (args, w) = (args.clone(), shared.clone());
        senders.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let (mut sent, mut accepted, mut duplicates) = (0usize, 0usize, 0usize);
            let mut latencies = Vec::new();
            loop {
                let b = next.fetch_add(1, Ordering::SeqCst);
                let Some(batch) = batches.get(b) else { break };
                let events: Vec<UsageInput> = batch
                    .iter()
                    .map(|&k| usage_input(&args, &w, &w.event(k)))
                    .collect();
                let body = serde_json::to_vec(&serde_json::json!({ "events": events })).unwrap();
                let t = Instant::now();
                let response = client
                    .post(&url)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .expect("POST /v1/usage");
                assert_eq!(response.status(), 200, "POST /v1/usage");
                let answer: serde_json::Value = response.json().await.expect("answer");
                latencies.push(t.elapsed());
                let (a, d) = tally(
                    answer["results"]
                        .as_array()
                        .expect("results")
                        .iter()
                        .map(|r| r["status"].as_str().unwrap_or("none")),
                );
                accepted += a;
                duplicates += d;
                sent += events.len();
            }
            (sent, accepted, duplicates, latencies)
        }));
    }
    let mut total = Sent {
        sent: 0,
        accepted: Some(0),
        duplicates: Some(0),
        latencies: Vec::new(),
        booker_hwm_kb: None,
    };
    for s in senders {
        let (sent, accepted, duplicates, latencies) = s.await.expect("sender");
        total.sent += sent;
        total.accepted = total.accepted.map(|n| n + accepted);
        total.duplicates = total.duplicates.map(|n| n + duplicates);
        total.latencies.extend(latencies);
    }
    server.abort();
    total
}

/// The `file` phase: the batches as one NDJSON file (written before the clock starts),
/// booked by the release `settle ingest FILE` process (its output discarded, its peak
/// memory reported apart), while this process's projector folds behind it as `settle serve`
/// would.
async fn book_through_file(args: &Args, w: &Workload, db: &Db) -> Sent {
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().display().to_string());
    let path =
        std::path::Path::new(&dir).join(format!("bench-usage-{}.ndjson", std::process::id()));
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).expect("ndjson file"));
    let mut sent = 0;
    for batch in w.batches() {
        for k in batch {
            serde_json::to_writer(&mut file, &usage_input(args, w, &w.event(k))).unwrap();
            file.write_all(b"\n").unwrap();
            sent += 1;
        }
    }
    file.flush().unwrap();
    drop(file);
    let t = Instant::now();
    let status = tokio::process::Command::new(env!("CARGO_BIN_EXE_settle"))
        .args([
            "--database",
            &db.url,
            "--now",
            &format_ms(w.now_ms()),
            "ingest",
        ])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .status()
        .await
        .expect("settle ingest");
    let elapsed = t.elapsed();
    // SAFETY: getrusage only writes the struct it is given.
    let child_hwm_kb = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage.ru_maxrss
    };
    eprintln!(
        "  settle ingest: {status}, {:.1} s, peak RSS {} MB",
        elapsed.as_secs_f64(),
        child_hwm_kb / 1024
    );
    assert!(status.success(), "settle ingest FILE");
    let _ = std::fs::remove_file(&path);
    Sent {
        sent,
        accepted: None,
        duplicates: None,
        latencies: vec![elapsed],
        booker_hwm_kb: Some(child_hwm_kb as u64),
    }
}

async fn run_engine(args: &Args, w: &Workload, db: &Db, via: &str) -> serde_json::Value {
    // SQLite tuning under test: SETTLE_BENCH_SQLITE_CACHE_KIB, SETTLE_BENCH_SQLITE_WAL_PAGES,
    // SETTLE_BENCH_SQLITE_CHECKPOINT_MS; the projector's pause between passes:
    // SETTLE_BENCH_PROJECTOR_INTERVAL_MS (`workers.projector_interval_ms`, 50). The store's
    // and ledger settings as `settle` reads them (`SETTLE_STORE__…`, `SETTLE_LEDGER__…`, which
    // the `file` phase's `settle ingest` inherits), e.g. SETTLE_STORE__USAGE_RECENT_KEYS_MAX=0
    // or SETTLE_LEDGER__INGEST_STREAMS_PER_TX_MAX=100.
    let settle::config::Config {
        store: mut options,
        ledger: ledger_config,
        ..
    } = settle::config::Config::load(None, std::env::vars()).expect("SETTLE_* configuration");
    let projector_interval = Duration::from_millis(
        std::env::var("SETTLE_BENCH_PROJECTOR_INTERVAL_MS").map_or(50, |v| {
            v.parse().expect("SETTLE_BENCH_PROJECTOR_INTERVAL_MS")
        }),
    );
    if let Ok(v) = std::env::var("SETTLE_BENCH_SQLITE_CACHE_KIB") {
        options.sqlite_cache_kib = v.parse().expect("SETTLE_BENCH_SQLITE_CACHE_KIB");
    }
    if let Ok(v) = std::env::var("SETTLE_BENCH_SQLITE_WAL_PAGES") {
        options.sqlite_wal_autocheckpoint_pages = v.parse().expect("SETTLE_BENCH_SQLITE_WAL_PAGES");
    }
    if let Ok(v) = std::env::var("SETTLE_BENCH_SQLITE_CHECKPOINT_MS") {
        options.sqlite_checkpoint_interval_ms =
            v.parse().expect("SETTLE_BENCH_SQLITE_CHECKPOINT_MS");
    }
    let store = Store::open(&db.url, &options).await.expect("open store");
    store.migrate().await.expect("migrate");
    let clock = Arc::new(ManualClock::new(w.start_ms - MS_PER_DAY));
    let sealing = fixture::sealing(&store);
    let ledger = Ledger::new(store, clock.clone(), ledger_config).with_privacy(sealing);
    let admin = Actor::operator("bench");

    // Setup: providers, GPUs, price-book rates (not part of the measured rate).
    let setup_started = Instant::now();
    let wallet = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".to_owned();
    for p in 0..args.providers {
        let pid = ProviderId::parse(&provider_id(p)).unwrap();
        ledger
            .register_provider(
                &RegisterProvider {
                    provider_id: pid.clone(),
                    name: format!("Bench provider {p}"),
                    email: format!("ops@{}.test", provider_id(p)),
                    tier: Tier::Community,
                    schedule: Schedule::Weekly,
                    payout_method: Some(PayoutMethod::Solana {
                        wallet: wallet.clone(),
                    }),
                },
                &admin,
            )
            .await
            .expect("register provider");
        for g in 0..args.gpus {
            ledger
                .register_gpu(
                    &RegisterGpu {
                        gpu_id: GpuId::parse(&gpu_id(args, p * args.gpus + g)).unwrap(),
                        provider_id: pid.clone(),
                        model: GpuModel::parse(MODEL).unwrap(),
                    },
                    &admin,
                )
                .await
                .expect("register gpu");
        }
        fixture::price(
            &ledger,
            &pid,
            MODEL,
            &format_micro_usdc(BOOK_RATE_MICRO),
            parse_rfc3339_ms("2026-01-01T00:00:00Z").unwrap(),
            &admin,
        )
        .await;
    }
    let setup_secs = setup_started.elapsed().as_secs_f64();
    clock.set(w.now_ms());

    // The projector, as `settle serve` runs it: folds the aggregates behind the bookings,
    // sampling its lag (how long the oldest unfolded booking has waited) before each pass.
    let stop = Arc::new(AtomicBool::new(false));
    let fold_at_end = args.fold == "at-end";
    let projector = {
        let (store, stop) = (ledger.store.clone(), stop.clone());
        if !fold_at_end {
            store.projector_follows();
        }
        tokio::spawn(async move {
            let mut lags = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if fold_at_end {
                    tokio::time::sleep(projector_interval).await;
                    continue;
                }
                lags.push(store.projection_lag());
                store.fold_dirty().await.expect("fold");
                tokio::time::sleep(projector_interval).await;
            }
            lags
        })
    };
    let steps_before = booking_step_seconds();
    let started = Instant::now();
    let Sent {
        sent,
        accepted,
        duplicates,
        latencies,
        booker_hwm_kb,
    } = match via {
        "engine" => book_through_ledger(args, w, &ledger).await,
        "http" => book_through_http(args, w, &ledger).await,
        "file" => book_through_file(args, w, db).await,
        other => panic!("--phase raw|engine|http|file, got {other}"),
    };
    let booked_secs = started.elapsed().as_secs_f64();
    // Where the booking's time went (`/metrics`: `settle_write_tx_seconds_total` and
    // `settle_usage_booking_seconds_total`, which the projector does not add to); in this
    // process only, so not for the file phase.
    let steps: BTreeMap<String, f64> = booking_step_seconds()
        .into_iter()
        .map(|(step, secs)| {
            let before = steps_before.get(&step).copied().unwrap_or(0.0);
            (step, ((secs - before) * 1_000.0).round() / 1_000.0)
        })
        .collect();
    stop.store(true, Ordering::SeqCst);
    let lags = projector.await.expect("projector");
    // The rate counts the folding too: measured until every aggregate is folded.
    let tail_started = Instant::now();
    ledger.store.catch_up_all().await.expect("fold the tail");
    let fold_tail_secs = tail_started.elapsed().as_secs_f64();
    let secs = started.elapsed().as_secs_f64();
    let hwm = peak::vmhwm_kib();
    let (lag_p50, lag_p99, lag_max) = percentiles(lags);

    // Correctness of what was measured: each event booked once, balances exact (the nets
    // computed from the workload's unique events, independently of the engine).
    if let Some(accepted) = accepted {
        assert_eq!(accepted, args.events, "every unique event accepted once");
    }
    let mut expected_net: BTreeMap<usize, i64> = BTreeMap::new();
    for k in 0..args.events {
        let e = w.event(k);
        *expected_net.entry(e.provider).or_default() += net_micro(&e);
    }
    let booked: i64 =
        sqlx::query("SELECT COUNT(*) FROM events WHERE event_type = 'usage.recorded'")
            .fetch_one(ledger.store.pool())
            .await
            .unwrap()
            .get(0);
    assert_eq!(booked as usize, args.events, "usage.recorded events");
    let rows = sqlx::query(
        "SELECT owner, balance_micro_usdc FROM account_balances WHERE account LIKE '%:payable'",
    )
    .fetch_all(ledger.store.pool())
    .await
    .unwrap();
    let stored: BTreeMap<String, i64> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    for (p, net) in &expected_net {
        assert_eq!(
            stored.get(&format!("provider:{}", provider_id(*p))),
            Some(net),
            "payable of {}",
            provider_id(*p)
        );
    }
    ledger.store.close().await;
    let (p50, p99, max) = percentiles(latencies);
    serde_json::json!({"via": via, "clients": args.clients, "sent": sent, "booked": booked, "accepted": accepted, "duplicates": duplicates,
        "secs": secs, "events_per_s": sent as f64 / secs, "setup_secs": setup_secs,
        "booked_secs": booked_secs, "booking_step_secs": (via != "file").then_some(steps), "fold_tail_secs": fold_tail_secs,
        "projector_lag_ms_p50": lag_p50, "projector_lag_ms_p99": lag_p99, "projector_lag_ms_max": lag_max,
        "batch_ms_p50": p50, "batch_ms_p99": p99, "batch_ms_max": max,
        // The file phase books in the `settle ingest` process: its peak is the one that counts.
        "vm_hwm_kb": booker_hwm_kb.unwrap_or(hwm),
        "bench_process_vm_hwm_kb": hwm})
}

/// The seconds counters of the booking's steps on `/metrics`, by `family{step}` shortened to
/// `tx.step` and `usage.step`.
fn booking_step_seconds() -> BTreeMap<String, f64> {
    settle::metrics::global()
        .render()
        .lines()
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let (family, step) = key.split_once("{step=\"")?;
            let family = match family {
                "settle_write_tx_seconds_total" => "tx",
                "settle_usage_booking_seconds_total" => "usage",
                _ => return None,
            };
            Some((
                format!("{family}.{}", step.trim_end_matches("\"}")),
                value.parse().ok()?,
            ))
        })
        .collect()
}

async fn child(args: Args) {
    let (kind, phase) = (args.dbs[0].clone(), args.phases[0].clone());
    let w = Workload::new(&args);
    let db = fresh_db(&args, &kind, &phase).await;
    let result = match phase.as_str() {
        "raw" => run_raw(&args, &w, &db).await,
        via @ ("engine" | "http" | "file") => run_engine(&args, &w, &db, via).await,
        other => panic!("--phase raw|engine|http|file, got {other}"),
    };
    drop_db(db).await;
    println!("{result}");
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if args.child {
        rt.block_on(child(args));
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    eprintln!(
        "ingest bench: {} unique events + {}% duplicates, batches of {}, {} providers × {} GPUs, mix {}",
        args.events, args.dup_pct, args.batch, args.providers, args.gpus, args.mix
    );
    let mut results: BTreeMap<(String, String), serde_json::Value> = BTreeMap::new();
    for kind in &args.dbs {
        for phase in &args.phases {
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(["--child", "--db", kind, "--phase", phase])
                .args([
                    "--events",
                    &args.events.to_string(),
                    "--batch",
                    &args.batch.to_string(),
                ])
                .args([
                    "--dup-pct",
                    &args.dup_pct.to_string(),
                    "--providers",
                    &args.providers.to_string(),
                ])
                .args([
                    "--gpus",
                    &args.gpus.to_string(),
                    "--mix",
                    &args.mix,
                    "--fold",
                    &args.fold,
                    "--pg-url",
                    &args.pg_url,
                    "--citus-url",
                    &args.citus_url,
                    "--clients",
                    &args.clients.to_string(),
                ]);
            if let Some(d) = &args.dir {
                cmd.args(["--dir", d]);
            }
            eprintln!("running {kind} {phase} …");
            let out = cmd
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("run child");
            assert!(out.status.success(), "{kind} {phase} failed");
            let line = String::from_utf8_lossy(&out.stdout);
            let v: serde_json::Value = serde_json::from_str(line.trim()).expect("child result");
            eprintln!("  {v}");
            results.insert((kind.clone(), phase.clone()), v);
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "\n{:<9} {:<7} {:>10} {:>9} {:>12} {:>9} {:>9} {:>10} {:>8}",
        "db", "phase", "sent", "secs", "events/s", "p50 ms", "p99 ms", "VmHWM MB", "ratio"
    )
    .unwrap();
    for ((kind, phase), v) in &results {
        let raw = results
            .get(&(kind.clone(), "raw".into()))
            .map(|r| r["events_per_s"].as_f64().unwrap());
        let rate = v["events_per_s"].as_f64().unwrap();
        let ratio = raw.map(|r| format!("{:.2}", rate / r)).unwrap_or_default();
        writeln!(
            out,
            "{:<9} {:<7} {:>10} {:>9.1} {:>12.0} {:>9.1} {:>9.1} {:>10.1} {:>8}",
            kind,
            phase,
            v["sent"],
            v["secs"].as_f64().unwrap(),
            rate,
            v["batch_ms_p50"].as_f64().unwrap(),
            v["batch_ms_p99"].as_f64().unwrap(),
            v["vm_hwm_kb"].as_f64().unwrap() / 1024.0,
            ratio
        )
        .unwrap();
    }
}
