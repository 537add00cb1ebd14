//! Earnings API benchmark: load N usage events through `Ledger::ingest_usage` (batches of
//! 1000, one provider per batch as an agent sends them), then measure the dashboard over
//! real HTTP against the in-process server. See `ops/bench/earnings.md`.
//!
//! ```text
//! cargo bench --bench earnings -- --db postgres --events 10000000
//! cargo bench --bench earnings -- --db sqlite --events 1000000
//! ```
//!
//! Data shape: `events / 10_000` providers (override with `--providers`), 8 GPUs each,
//! 10,000 events per provider: per GPU back-to-back 2 h 45 min rentals every 3 h (some
//! cross midnight and book two day segments), about 156 days of history. The loaded
//! database is kept (`--reuse` measures it again without loading).
//!
//! Measured, for one provider (`prv_00000`), sequentially: `GET …/summary` and
//! `GET …/earnings?from=D-90&to=D&group_by=day` (the last 90 days of its data), median and
//! p99 over `--requests`; then requests/s of both, alternating, over random providers,
//! from `--concurrency` clients for `--seconds`.

#[path = "../../tests/it/common/tables.rs"]
mod tables;
use tables::Tables;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use settle::auth::Scope;
use settle::config::{HttpConfig, LedgerConfig};
use settle::domain::event::{PayoutMethod, Schedule, Tier};
use settle::domain::ids::{GpuId, GpuModel, ProviderId};
use settle::domain::time::{MS_PER_DAY, format_ms, parse_rfc3339_ms};
use settle::http::Application;
use settle::ledger::ingest::{SenderScope, UsageInput, UsageResult};
use settle::ledger::registry::{RegisterGpu, RegisterProvider, UpdateProvider};
use settle::ledger::{Actor, Ledger, ManualClock};
use settle::store::{Store, StoreOptions};
use sqlx::Row;

#[path = "fixture.rs"]
mod fixture;

const BASE: &str = "2026-03-02T00:00:00Z";
const SLOT_MS: i64 = 3 * 3_600_000;
const DURATION_MS: i64 = 2 * 3_600_000 + 45 * 60_000;
const EVENTS_PER_PROVIDER: usize = 10_000;
const GPUS: usize = 8;
const BATCH: usize = 1000;
const MODEL: &str = "H100-80GB";

struct Args {
    db: String,
    events: usize,
    providers: usize,
    pg_url: String,
    sqlite_path: String,
    reuse: bool,
    requests: usize,
    concurrency: usize,
    seconds: u64,
    loaders: usize,
    connections: u32,
}

fn parse_args() -> Args {
    let mut a = Args {
        db: "sqlite".into(),
        events: 1_000_000,
        providers: 0,
        pg_url: std::env::var("SETTLE_BENCH_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        sqlite_path: "/tmp/settle-bench-earnings.db".into(),
        reuse: false,
        requests: 2000,
        concurrency: 16,
        seconds: 10,
        loaders: 0,
        connections: 16,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--db" => a.db = val(),
            "--events" => a.events = val().parse().expect("--events N"),
            "--providers" => a.providers = val().parse().expect("--providers N"),
            "--pg-url" => a.pg_url = val(),
            "--sqlite-path" => a.sqlite_path = val(),
            "--reuse" => a.reuse = true,
            "--requests" => a.requests = val().parse().expect("--requests N"),
            "--concurrency" => a.concurrency = val().parse().expect("--concurrency N"),
            "--seconds" => a.seconds = val().parse().expect("--seconds N"),
            "--loaders" => a.loaders = val().parse().expect("--loaders N"),
            "--connections" => a.connections = val().parse().expect("--connections N"),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    if a.providers == 0 {
        a.providers = (a.events / EVENTS_PER_PROVIDER).max(1);
    }
    if a.loaders == 0 {
        a.loaders = if a.db == "postgres" { 4 } else { 1 };
    }
    a
}

/// Every bench provider is paid to this (valid, on-curve) wallet.
fn wallet() -> PayoutMethod {
    PayoutMethod::Solana {
        wallet: "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".into(),
    }
}

/// Gives providers loaded without a payout method one (databases loaded by an earlier
/// version of this bench), so the projected next payout is computed as in production.
async fn ensure_methods(ledger: &Ledger) {
    let rows = sqlx::query("SELECT provider_id FROM providers WHERE payout_method IS NULL")
        .fetch_all(ledger.store.pool())
        .await
        .unwrap();
    for r in &rows {
        let id: String = r.get(0);
        ledger
            .update_provider(
                &UpdateProvider {
                    update_id: None,
                    provider_id: ProviderId::parse(&id).unwrap(),
                    name: None,
                    email: None,
                    tier: None,
                    schedule: None,
                    status: None,
                    payout_method: Some(wallet()),
                },
                &Actor::operator("bench"),
            )
            .await
            .expect("update provider");
    }
    if !rows.is_empty() {
        eprintln!("set the payout method of {} providers", rows.len());
    }
}

fn pid(p: usize) -> String {
    format!("prv_{p:05}")
}

async fn open(args: &Args) -> Store {
    let options = StoreOptions {
        connections_max: args.connections,
        ..StoreOptions::default()
    };
    let url = if args.db == "postgres" {
        let base = args
            .pg_url
            .rsplit_once('/')
            .map(|(b, _)| b)
            .unwrap_or(&args.pg_url);
        let name = "settle_bench_earnings";
        if !args.reuse {
            sqlx::any::install_default_drivers();
            let admin = sqlx::AnyPool::connect(&args.pg_url)
                .await
                .expect("connect --pg-url");
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&admin)
                .await
                .expect("drop bench database");
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&admin)
                .await
                .expect("create bench database");
            admin.close().await;
        }
        format!("{base}/{name}")
    } else {
        if !args.reuse {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", args.sqlite_path));
            }
        }
        format!("sqlite://{}", args.sqlite_path)
    };
    let store = Store::open(&url, &options).await.expect("open store");
    store.migrate().await.expect("migrate");
    store
}

/// The instant after window `w` (every provider's batch `w` has ended by then).
fn window_end_ms(base_ms: i64, w: usize) -> i64 {
    let per_gpu = (BATCH / GPUS) as i64;
    base_ms + (w as i64 + 1) * per_gpu * SLOT_MS + 3_600_000
}

fn batch(base_ms: i64, p: usize, w: usize) -> Vec<UsageInput> {
    let per_gpu = BATCH / GPUS;
    let offset_ms = (p as i64 * 7 * 60_000) % SLOT_MS;
    let mut out = Vec::with_capacity(BATCH);
    for k in 0..per_gpu {
        for g in 0..GPUS {
            let slot = (w * per_gpu + k) as i64;
            let start = base_ms + offset_ms + slot * SLOT_MS - SLOT_MS;
            out.push(UsageInput {
                event_id: Some(format!("b:{p}:{g}:{slot}")),
                provider_id: Some(pid(p)),
                gpu_id: Some(format!("gpu_{p:05}_{g}")),
                rental_id: Some(format!("r:{p}:{g}:{slot}")),
                started_at: Some(format_ms(start)),
                ended_at: Some(format_ms(start + DURATION_MS)),
                rate_usdc_per_hour: None,
            });
        }
    }
    out
}

async fn load(args: &Args, ledger: &Ledger, clock: &ManualClock) {
    let base_ms = parse_rfc3339_ms(BASE).unwrap();
    let operator = Actor::operator("bench");
    clock.set(base_ms - MS_PER_DAY);
    let setup = Instant::now();
    for p in 0..args.providers {
        let provider_id = ProviderId::parse(&pid(p)).unwrap();
        ledger
            .register_provider(
                &RegisterProvider {
                    provider_id: provider_id.clone(),
                    name: format!("Provider {p}"),
                    email: format!("ops@{p}.test"),
                    tier: if p % 5 == 0 {
                        Tier::Enterprise
                    } else {
                        Tier::Community
                    },
                    schedule: if p % 2 == 0 {
                        Schedule::Weekly
                    } else {
                        Schedule::Monthly
                    },
                    payout_method: Some(wallet()),
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
            base_ms - 30 * MS_PER_DAY,
            &operator,
        )
        .await;
        for g in 0..GPUS {
            ledger
                .register_gpu(
                    &RegisterGpu {
                        gpu_id: GpuId::parse(&format!("gpu_{p:05}_{g}")).unwrap(),
                        provider_id: provider_id.clone(),
                        model: GpuModel::parse(MODEL).unwrap(),
                    },
                    &operator,
                )
                .await
                .expect("register gpu");
        }
    }
    eprintln!(
        "setup: {} providers x {GPUS} GPUs in {:.1}s",
        args.providers,
        setup.elapsed().as_secs_f64()
    );
    let windows = args.events.div_ceil(args.providers * BATCH);
    let started = Instant::now();
    let booked = Arc::new(AtomicU64::new(0));
    let actor = Actor::operator("bench-agent");
    for w in 0..windows {
        clock.set(window_end_ms(base_ms, w));
        let next = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..args.loaders {
            let (ledger, next, booked, actor) =
                (ledger.clone(), next.clone(), booked.clone(), actor.clone());
            let (providers, total) = (args.providers, args.events as u64);
            tasks.push(tokio::spawn(async move {
                loop {
                    let p = next.fetch_add(1, Ordering::SeqCst) as usize;
                    if p >= providers || booked.load(Ordering::SeqCst) >= total {
                        break;
                    }
                    let inputs = batch(base_ms, p, w);
                    let results = ledger
                        .ingest_usage(&inputs, &SenderScope::Metering, &actor)
                        .await
                        .expect("ingest");
                    let ok = results
                        .iter()
                        .filter(|r| matches!(r, UsageResult::Accepted { .. }))
                        .count();
                    assert_eq!(ok, inputs.len(), "{:?}", results.first());
                    booked.fetch_add(ok as u64, Ordering::SeqCst);
                }
            }));
        }
        for t in tasks {
            t.await.expect("loader");
        }
        let n = booked.load(Ordering::SeqCst);
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "window {}/{windows}: {n} events in {secs:.0}s ({:.0} events/s)",
            w + 1,
            n as f64 / secs
        );
    }
}

fn percentile(sorted: &[Duration], pct: usize) -> Duration {
    let rank = (sorted.len() * pct).div_ceil(100).max(1);
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn latency(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    n: usize,
) -> (Duration, Duration) {
    // Warm-up.
    for _ in 0..(n / 10).max(10) {
        let r = client.get(url).bearer_auth(token).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}");
        r.bytes().await.unwrap();
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = client.get(url).bearer_auth(token).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
        samples.push(t.elapsed());
    }
    samples.sort();
    (percentile(&samples, 50), percentile(&samples, 99))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args = parse_args();
    let store = open(&args).await;
    let base_ms = parse_rfc3339_ms(BASE).unwrap();
    let clock = Arc::new(ManualClock::new(base_ms - MS_PER_DAY));
    let ledger = Ledger::new(store.clone(), clock.clone(), LedgerConfig::default())
        .with_privacy(fixture::sealing(&store));
    let existing: i64 =
        sqlx::query("SELECT COUNT(*) FROM events WHERE event_type = 'usage.recorded'")
            .fetch_one(store.pool())
            .await
            .unwrap()
            .get(0);
    if args.reuse && existing > 0 {
        eprintln!("reusing {existing} usage events");
    } else {
        load(&args, &ledger, &clock).await;
    }
    let usage_events: i64 =
        sqlx::query("SELECT COUNT(*) FROM events WHERE event_type = 'usage.recorded'")
            .fetch_one(store.pool())
            .await
            .unwrap()
            .get(0);
    let segments: i64 = sqlx::query("SELECT COUNT(*) FROM usage_segments")
        .fetch_one(store.pool())
        .await
        .unwrap()
        .get(0);
    let providers: i64 = sqlx::query("SELECT COUNT(*) FROM providers")
        .fetch_one(store.pool())
        .await
        .unwrap()
        .get(0);
    let last_ms: i64 = sqlx::query("SELECT MAX(ended_at_ms) FROM usage_segments")
        .fetch_one(store.pool())
        .await
        .unwrap()
        .get(0);
    let now_ms = last_ms + 3_600_000;
    clock.set(now_ms.max(store.max_recorded_at_ms().await.unwrap().unwrap_or(0)));
    ensure_methods(&ledger).await;
    let to_day = last_ms.div_euclid(MS_PER_DAY) + 1;
    let (from, to) = (
        format_ms(to_day * MS_PER_DAY - 90 * MS_PER_DAY)[..10].to_owned(),
        format_ms(to_day * MS_PER_DAY)[..10].to_owned(),
    );

    let admin = fixture::token(&store, Scope::Admin, None, "bench-admin", ledger.now_ms()).await;
    let target = pid(0);
    let provider_token = fixture::token(
        &store,
        Scope::Provider,
        Some(&target),
        "bench-provider",
        ledger.now_ms(),
    )
    .await;

    let config = HttpConfig {
        bind: "127.0.0.1:0".into(),
        ..HttpConfig::default()
    };
    let app = Application::build(config, ledger.clone()).await.unwrap();
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    let client = reqwest::Client::new();

    let summary_url = format!("{base}/v1/providers/{target}/summary");
    let earnings_url =
        format!("{base}/v1/providers/{target}/earnings?from={from}&to={to}&group_by=day");
    let body: serde_json::Value = client
        .get(&earnings_url)
        .bearer_auth(&provider_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let days = body["items"].as_array().map(Vec::len).unwrap_or(0);
    assert!(days > 0, "{body}");

    let (s50, s99) = latency(&client, &summary_url, &provider_token, args.requests).await;
    let (e50, e99) = latency(&client, &earnings_url, &provider_token, args.requests).await;

    // Throughput: `concurrency` clients, summary and 90-day earnings alternating, over
    // random providers (admin token).
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..args.concurrency {
        let (client, base, admin, done) =
            (client.clone(), base.clone(), admin.clone(), done.clone());
        let (from, to, providers) = (from.clone(), to.clone(), args.providers);
        tasks.push(tokio::spawn(async move {
            let mut i = c;
            while Instant::now() < deadline {
                let p = pid(rand::thread_rng().gen_range(0..providers));
                let url = if i % 2 == 0 {
                    format!("{base}/v1/providers/{p}/summary")
                } else {
                    format!("{base}/v1/providers/{p}/earnings?from={from}&to={to}&group_by=day")
                };
                let r = client.get(&url).bearer_auth(&admin).send().await.unwrap();
                assert_eq!(r.status(), 200);
                r.bytes().await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    let started = Instant::now();
    for t in tasks {
        t.await.unwrap();
    }
    let rps = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();

    println!(
        "db={} usage_events={usage_events} segments={segments} providers={providers} gpus_per_provider={GPUS}",
        args.db
    );
    println!(
        "summary ({target}):                 p50 {:.2} ms  p99 {:.2} ms  ({} sequential requests)",
        ms(s50),
        ms(s99),
        args.requests
    );
    println!(
        "earnings 90 days by day ({days} days): p50 {:.2} ms  p99 {:.2} ms  [{from}, {to})",
        ms(e50),
        ms(e99)
    );
    println!(
        "throughput: {rps:.0} requests/s with {} concurrent clients over {}s (summary and earnings alternating, random providers)",
        args.concurrency, args.seconds
    );
}
