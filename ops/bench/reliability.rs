//! Reliability benchmark (SPEC §12): GPUs reporting online intervals every few minutes for
//! a day, booked through the ledger beside usage events in the same run, then the scores of
//! every provider computed and `GET /v1/providers/{id}/reliability` measured over real HTTP.
//! See `ops/bench/reliability.md`.
//!
//! ```text
//! cargo bench --bench reliability -- --db sqlite --gpus 100000
//! cargo bench --bench reliability -- --db postgres --gpus 100000
//! ```
//!
//! Data: `--gpus` GPUs, `--gpus-per-provider` (8) to a provider, each with a 24/7 schedule
//! in Europe/Berlin; every GPU online all day of 2026-11-23 in intervals of
//! `--interval-minutes` (5), the intervals of a provider sent in time order in batches of
//! `--batch` (1000) as its agent would send them (`Ledger::record_gpu_reports_for`, what
//! `POST /v1/gpus/online` calls, each interval checked by the same line parser first).
//! Usage of the same run: `--usage-events` (1,000,000) usage events of 10-minute rentals
//! the same day, batches of `--batch` events of one provider (`Ledger::ingest_usage`, what
//! `POST /v1/usage` calls). Both with `--loaders` concurrent senders.

#[path = "fixture.rs"]
mod fixture;
#[path = "peak.rs"]
mod peak;

#[path = "../../tests/it/common/tables.rs"]
mod tables;
use tables::Tables;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use settle::auth::Scope;
use settle::config::{HttpConfig, LedgerConfig};
use settle::domain::event::{Schedule, Tier};
use settle::domain::ids::{GpuId, GpuModel, ProviderId};
use settle::domain::time::{format_ms, parse_rfc3339_ms};
use settle::http::Application;
use settle::ledger::ingest::{SenderScope, UsageInput, UsageResult};
use settle::ledger::registry::{RegisterGpu, RegisterProvider};
use settle::ledger::{Actor, Applied, Ledger, ManualClock};
use settle::store::{Store, StoreOptions};
use settle::wire::reliability::{GpuReport, parse};

const DAY: &str = "2026-11-23T00:00:00Z";
const MODEL: &str = "H100-80GB";
const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;
/// A usage rental: 10 minutes every 11 minutes, per GPU.
const RENTAL_MS: i64 = 10 * MINUTE_MS;
const RENTAL_SLOT_MS: i64 = 11 * MINUTE_MS;

struct Args {
    db: String,
    gpus: usize,
    gpus_per_provider: usize,
    interval_minutes: i64,
    usage_events: usize,
    batch: usize,
    loaders: usize,
    connections: u32,
    requests: usize,
    pg_url: String,
    sqlite_path: String,
}

fn parse_args() -> Args {
    let mut a = Args {
        db: "sqlite".into(),
        gpus: 100_000,
        gpus_per_provider: 8,
        interval_minutes: 5,
        usage_events: 1_000_000,
        batch: 1000,
        loaders: 0,
        connections: 16,
        requests: 2000,
        pg_url: std::env::var("SETTLE_BENCH_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        sqlite_path: "/tmp/settle-bench-reliability.db".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--db" => a.db = val(),
            "--gpus" => a.gpus = val().parse().expect("--gpus N"),
            "--gpus-per-provider" => {
                a.gpus_per_provider = val().parse().expect("--gpus-per-provider N");
            }
            "--interval-minutes" => {
                a.interval_minutes = val().parse().expect("--interval-minutes N");
            }
            "--usage-events" => a.usage_events = val().parse().expect("--usage-events N"),
            "--batch" => a.batch = val().parse().expect("--batch N"),
            "--loaders" => a.loaders = val().parse().expect("--loaders N"),
            "--connections" => a.connections = val().parse().expect("--connections N"),
            "--requests" => a.requests = val().parse().expect("--requests N"),
            "--pg-url" => a.pg_url = val(),
            "--sqlite-path" => a.sqlite_path = val(),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(a.gpus_per_provider > 0 && a.gpus >= a.gpus_per_provider);
    assert!(a.interval_minutes > 0 && a.batch > 0);
    if a.loaders == 0 {
        a.loaders = if a.db == "postgres" { 4 } else { 1 };
    }
    a
}

impl Args {
    fn providers(&self) -> usize {
        self.gpus / self.gpus_per_provider
    }
}

fn pid(p: usize) -> String {
    format!("prv_{p:06}")
}

fn gid(p: usize, g: usize) -> String {
    format!("gpu_{p:06}_{g}")
}

async fn open(args: &Args) -> Store {
    let options = StoreOptions {
        connections_max: args.connections,
        ..StoreOptions::default()
    };
    let url = if args.db == "postgres" {
        let name = "settle_bench_reliability";
        sqlx::any::install_default_drivers();
        let admin = sqlx::AnyPool::connect(&args.pg_url)
            .await
            .expect("connect --pg-url");
        for sql in [
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            format!("CREATE DATABASE {name}"),
        ] {
            sqlx::query(&sql).execute(&admin).await.expect(&sql);
        }
        admin.close().await;
        let base = args
            .pg_url
            .rsplit_once('/')
            .map(|(b, _)| b)
            .unwrap_or(&args.pg_url);
        format!("{base}/{name}")
    } else {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", args.sqlite_path));
        }
        format!("sqlite://{}", args.sqlite_path)
    };
    let store = Store::open(&url, &options).await.expect("open store");
    store.migrate().await.expect("migrate");
    store
}

/// Runs `work(item)` for items `0..n` on `loaders` concurrent tasks (each takes the next
/// item), and returns the seconds it took.
async fn spread<F, Fut>(n: usize, loaders: usize, work: F) -> f64
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..loaders {
        let (next, work) = (next.clone(), work.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    break;
                }
                work(i).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("loader");
    }
    started.elapsed().as_secs_f64()
}

/// Registers provider `p` with its GPUs, its price, and each GPU's 24/7 schedule.
async fn register(ledger: &Ledger, p: usize, gpus: usize, day_ms: i64) {
    let operator = Actor::operator("bench");
    let provider_id = ProviderId::parse(&pid(p)).unwrap();
    ledger
        .register_provider(
            &RegisterProvider {
                provider_id: provider_id.clone(),
                name: format!("Provider {p}"),
                email: format!("ops@{p}.test"),
                tier: Tier::Community,
                schedule: Schedule::Weekly,
                payout_method: None,
            },
            &operator,
        )
        .await
        .expect("register provider");
    fixture::price(
        ledger,
        &provider_id,
        MODEL,
        "2.49",
        day_ms - 30 * DAY_MS,
        &operator,
    )
    .await;
    let mut schedules = Vec::with_capacity(gpus);
    for g in 0..gpus {
        ledger
            .register_gpu(
                &RegisterGpu {
                    gpu_id: GpuId::parse(&gid(p, g)).unwrap(),
                    provider_id: provider_id.clone(),
                    model: GpuModel::parse(MODEL).unwrap(),
                },
                &operator,
            )
            .await
            .expect("register gpu");
        schedules.push(
            parse(
                "gpu.schedule",
                serde_json::json!({
                    "type": "gpu.schedule",
                    "schedule_id": format!("sch:{}", gid(p, g)),
                    "gpu_id": gid(p, g),
                    "effective_from": format_ms(day_ms),
                    "time_zone": "Europe/Berlin",
                    "hours": "24/7",
                }),
            )
            .expect("schedule line"),
        );
    }
    let results = ledger
        .record_gpu_reports_for(&schedules, None, &operator)
        .await
        .expect("record schedules");
    assert!(results.iter().all(|r| matches!(r, Ok(Applied::Accepted))));
}

/// Usage batch `b`: `batch` events of provider `b`, 10-minute rentals round its GPUs.
fn usage_batch(args: &Args, b: usize, day_ms: i64) -> Vec<UsageInput> {
    let p = b % args.providers();
    let round = b / args.providers();
    (0..args.batch)
        .map(|i| {
            let k = round * args.batch + i;
            let (g, slot) = (
                k % args.gpus_per_provider,
                (k / args.gpus_per_provider) as i64,
            );
            let start = day_ms + slot * RENTAL_SLOT_MS;
            UsageInput {
                event_id: Some(format!("u:{p}:{k}")),
                provider_id: Some(pid(p)),
                gpu_id: Some(gid(p, g)),
                rental_id: Some(format!("r:{p}:{k}")),
                started_at: Some(format_ms(start)),
                ended_at: Some(format_ms(start + RENTAL_MS)),
                rate_usdc_per_hour: None,
            }
        })
        .collect()
}

/// The online intervals of provider `p` for the day, in time order, as its agent's lines.
fn online_lines(args: &Args, p: usize, day_ms: i64) -> Vec<serde_json::Value> {
    let step = args.interval_minutes * MINUTE_MS;
    let per_gpu = DAY_MS / step;
    let mut out = Vec::with_capacity(per_gpu as usize * args.gpus_per_provider);
    for k in 0..per_gpu {
        for g in 0..args.gpus_per_provider {
            let start = day_ms + k * step;
            out.push(serde_json::json!({
                "type": "gpu.online",
                "report_id": format!("agt:{}:{k}", gid(p, g)),
                "gpu_id": gid(p, g),
                "started_at": format_ms(start),
                "ended_at": format_ms(start + step),
            }));
        }
    }
    out
}

async fn load_usage(args: &Arc<Args>, ledger: &Ledger, day_ms: i64) -> (usize, f64) {
    let batches = args.usage_events / args.batch;
    let capacity = (DAY_MS / RENTAL_SLOT_MS) as usize * args.gpus_per_provider * args.providers();
    assert!(
        batches * args.batch <= capacity,
        "--usage-events above {capacity}: the rentals would not fit the day"
    );
    let (a, l) = (args.clone(), ledger.clone());
    let seconds = spread(batches, args.loaders, move |b| {
        let (args, ledger) = (a.clone(), l.clone());
        async move {
            let inputs = usage_batch(&args, b, day_ms);
            let results = ledger
                .ingest_usage(
                    &inputs,
                    &SenderScope::Metering,
                    &Actor::operator("bench-metering"),
                )
                .await
                .expect("ingest");
            let ok = results
                .iter()
                .filter(|r| matches!(r, UsageResult::Accepted { .. }))
                .count();
            assert_eq!(ok, inputs.len(), "{:?}", results.first());
        }
    })
    .await;
    (batches * args.batch, seconds)
}

async fn load_online(args: &Arc<Args>, ledger: &Ledger, day_ms: i64) -> (usize, f64) {
    let booked = Arc::new(AtomicUsize::new(0));
    let (a, l, b) = (args.clone(), ledger.clone(), booked.clone());
    let seconds = spread(args.providers(), args.loaders, move |p| {
        let (args, ledger, booked) = (a.clone(), l.clone(), b.clone());
        async move {
            let agent = Actor::operator(&format!("agent-{}", pid(p)));
            for lines in online_lines(&args, p, day_ms).chunks(args.batch) {
                let reports: Vec<GpuReport> = lines
                    .iter()
                    .map(|l| parse("gpu.online", l.clone()).expect("online line"))
                    .collect();
                let results = ledger
                    .record_gpu_reports_for(&reports, Some(&pid(p)), &agent)
                    .await
                    .expect("record online");
                assert!(
                    results.iter().all(|r| matches!(r, Ok(Applied::Accepted))),
                    "{:?}",
                    results.iter().find(|r| !matches!(r, Ok(Applied::Accepted)))
                );
                booked.fetch_add(reports.len(), Ordering::SeqCst);
            }
        }
    })
    .await;
    (booked.load(Ordering::SeqCst), seconds)
}

fn percentile(sorted: &[Duration], pct: usize) -> f64 {
    let rank = (sorted.len() * pct).div_ceil(100).max(1);
    sorted[rank - 1].as_secs_f64() * 1000.0
}

/// Median and p99 (ms) of `n` sequential `GET …/reliability` of random providers, after a
/// warm-up of a tenth as many.
async fn latency(client: &reqwest::Client, base: &str, token: &str, args: &Args) -> (f64, f64) {
    let mut samples = Vec::with_capacity(args.requests);
    for i in 0..(args.requests + args.requests / 10) {
        let p = rand::thread_rng().gen_range(0..args.providers());
        let url = format!("{base}/v1/providers/{}/reliability", pid(p));
        let t = Instant::now();
        let r = client.get(&url).bearer_auth(token).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}");
        let body: serde_json::Value = r.json().await.unwrap();
        let elapsed = t.elapsed();
        assert_eq!(
            body["gpus"].as_array().map(Vec::len),
            Some(args.gpus_per_provider),
            "{url}"
        );
        if i >= args.requests / 10 {
            samples.push(elapsed);
        }
    }
    samples.sort();
    (percentile(&samples, 50), percentile(&samples, 99))
}

/// Rows of `table`.
async fn count(store: &Store, table: &str) -> i64 {
    use sqlx::Row as _;
    sqlx::query(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(store.pool())
        .await
        .expect("count")
        .get(0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args = Arc::new(parse_args());
    let store = open(&args).await;
    let day_ms = parse_rfc3339_ms(DAY).unwrap();
    let clock = Arc::new(ManualClock::new(day_ms - DAY_MS));
    let ledger = Ledger::new(store.clone(), clock.clone(), LedgerConfig::default())
        .with_privacy(fixture::sealing(&store));

    let (a, l) = (args.clone(), ledger.clone());
    let setup_seconds = spread(args.providers(), args.loaders, move |p| {
        let (gpus, l) = (a.gpus_per_provider, l.clone());
        async move { register(&l, p, gpus, day_ms).await }
    })
    .await;
    eprintln!(
        "setup: {} providers, {} GPUs with schedules in {setup_seconds:.1}s",
        args.providers(),
        args.providers() * args.gpus_per_provider
    );

    // The day is over when its reports arrive.
    clock.set(day_ms + DAY_MS);
    let (usage, usage_seconds) = load_usage(&args, &ledger, day_ms).await;
    eprintln!(
        "usage: {usage} events in {usage_seconds:.1}s ({:.0}/s)",
        usage as f64 / usage_seconds
    );
    let (online, online_seconds) = load_online(&args, &ledger, day_ms).await;
    eprintln!(
        "online: {online} intervals in {online_seconds:.1}s ({:.0}/s)",
        online as f64 / online_seconds
    );
    let load_vmhwm = peak::vmhwm_kib();

    // Every provider's score, as the dashboard computes it.
    peak::reset_vmhwm();
    let (a, l) = (args.clone(), ledger.clone());
    let not_full = Arc::new(AtomicUsize::new(0));
    let n = not_full.clone();
    let scores_seconds = spread(args.providers(), args.loaders, move |p| {
        let (l, n) = (l.clone(), n.clone());
        let gpus = a.gpus_per_provider;
        async move {
            let r = l.provider_reliability(&pid(p)).await.expect("score");
            assert_eq!(r.gpus.len(), gpus);
            // Online all day of its schedule: a measured uptime of 100 %.
            if r.score.uptime.measured_bps != Some(10_000) {
                n.fetch_add(1, Ordering::SeqCst);
            }
        }
    })
    .await;
    let not_full = not_full.load(Ordering::SeqCst);
    let scores_vmhwm = peak::vmhwm_kib();
    eprintln!(
        "scores: {} providers in {scores_seconds:.1}s",
        args.providers()
    );

    let token = fixture::token(&store, Scope::Admin, None, "bench-admin", ledger.now_ms()).await;
    let config = HttpConfig {
        bind: "127.0.0.1:0".into(),
        ..HttpConfig::default()
    };
    let app = Application::build(config, ledger.clone()).await.unwrap();
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    let client = reqwest::Client::new();
    let (p50, p99) = latency(&client, &base, &token, &args).await;

    let reports = count(&store, "gpu_reports").await;
    let events = count(&store, "events").await;
    println!(
        "{{\"db\":\"{}\",\"providers\":{},\"gpus\":{},\"interval_minutes\":{},\"batch\":{},\"loaders\":{},\"setup_seconds\":{setup_seconds:.1},\"usage_events\":{usage},\"usage_seconds\":{usage_seconds:.1},\"usage_per_second\":{:.0},\"online_intervals\":{online},\"online_seconds\":{online_seconds:.1},\"online_per_second\":{:.0},\"online_over_usage\":{:.2},\"load_vmhwm_kib\":{load_vmhwm},\"scores_seconds\":{scores_seconds:.1},\"scores_per_second\":{:.0},\"scores_vmhwm_kib\":{scores_vmhwm},\"scores_uptime_not_full\":{not_full},\"reliability_requests\":{},\"reliability_p50_ms\":{p50:.2},\"reliability_p99_ms\":{p99:.2},\"gpu_reports\":{reports},\"events\":{events}}}",
        args.db,
        args.providers(),
        args.providers() * args.gpus_per_provider,
        args.interval_minutes,
        args.batch,
        args.loaders,
        usage as f64 / usage_seconds,
        online as f64 / online_seconds,
        (online as f64 / online_seconds) / (usage as f64 / usage_seconds),
        args.providers() as f64 / scores_seconds,
        args.requests,
    );
}
