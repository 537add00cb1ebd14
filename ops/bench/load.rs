//! Load test of `POST /v1/usage`: concurrent clients for a fixed time, a share of duplicate
//! re-sends, dashboard queries running alongside; afterwards `verify` and exactly-once checks.
//!
//!   cargo bench --bench load                       # 64 clients, 60 s, 20 % duplicates, PostgreSQL
//!   LOAD_CLIENTS=16 LOAD_SECONDS=10 LOAD_DATABASE=sqlite cargo bench --bench load
//!   LOAD_RATE=1 cargo bench --bench load   # open loop: each client one batch a second
//!   LOAD_BATCH=10 LOAD_GROUP_EVENTS_MAX=0 LOAD_GROUP_BOOKERS_MAX=64 …   # without group commit
//!
//! PostgreSQL: a fresh database on `LOAD_PG_URL` (default postgres://postgres@127.0.0.1:5432/test),
//! dropped afterwards. The server runs in this process on a loopback port; the clients speak
//! real HTTP to it. Every request loop is bounded in time and stops by itself.

#[path = "fixture.rs"]
mod fixture;

#[path = "../../tests/it/common/tables.rs"]
mod tables;
use tables::Tables;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use settle::auth::{NewToken, Scope, create_token};
use settle::config::{HttpConfig, LedgerConfig};
use settle::domain::time::format_ms;
use settle::http::Application;
use settle::ledger::{Actor, Ledger, SystemClock};
use settle::store::{Store, StoreOptions};
use settle::wire::import::{apply, parse_line};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let clients: usize = env("LOAD_CLIENTS", 64);
    let seconds: u64 = env("LOAD_SECONDS", 60);
    let dup_pct: u64 = env("LOAD_DUPLICATE_PERCENT", 20);
    let batch: usize = env("LOAD_BATCH", 100);
    let database: String = env("LOAD_DATABASE", "postgres".to_owned());
    // Open loop: each client sends a batch every `1000 / LOAD_RATE` ms on a fixed schedule
    // and a request's latency counts from its scheduled start (a late server delays the
    // schedule, never hides its own slowness). 0: closed loop, the next batch once answered.
    let rate_per_client: f64 = env("LOAD_RATE", 0.0);
    sqlx::any::install_default_drivers();

    let (url, drop_db, _dir) = if database == "postgres" {
        let admin_url: String = env(
            "LOAD_PG_URL",
            "postgres://postgres@127.0.0.1:5432/test".to_owned(),
        );
        let name = format!("settle_load_{}", std::process::id());
        let admin = sqlx::AnyPool::connect(&admin_url).await?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await?;
        let base = admin_url
            .rsplit_once('/')
            .map(|(b, _)| b.to_owned())
            .unwrap_or(admin_url.clone());
        (format!("{base}/{name}"), Some((admin, name)), None)
    } else {
        let dir = tempfile::tempdir()?;
        (
            format!("sqlite://{}", dir.path().join("load.db").display()),
            None,
            Some(dir),
        )
    };
    let store = Store::open(
        &url,
        &StoreOptions {
            connections_max: 32,
            ..StoreOptions::default()
        },
    )
    .await?;
    store.migrate().await?;
    // Group commit of POST /v1/usage (`[ledger] usage_group_*`); LOAD_GROUP_EVENTS_MAX=0 with
    // LOAD_GROUP_BOOKERS_MAX=64 books every request in its own transaction, as before it.
    let ledger_config = LedgerConfig {
        usage_group_events_max: env(
            "LOAD_GROUP_EVENTS_MAX",
            LedgerConfig::default().usage_group_events_max,
        ),
        usage_group_bookers_max: env(
            "LOAD_GROUP_BOOKERS_MAX",
            LedgerConfig::default().usage_group_bookers_max,
        ),
        ..LedgerConfig::default()
    };
    let ledger = Ledger::new(store.clone(), Arc::new(SystemClock), ledger_config.clone())
        .with_privacy(fixture::sealing(&store));
    for c in 0..clients {
        for line in [
            format!(
                r#"{{"type":"provider.register","provider_id":"load_{c}","name":"Load {c}","email":"l{c}@x.test","tier":"community","schedule":"weekly","payout_method":{{"kind":"solana","wallet":"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}}}}"#
            ),
            format!(
                r#"{{"type":"gpu.register","gpu_id":"load_{c}-g","provider_id":"load_{c}","model":"H100-80GB"}}"#
            ),
            format!(
                r#"{{"type":"rate.set","provider_id":"load_{c}","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2020-01-01T00:00:00Z"}}"#
            ),
        ] {
            apply(
                &ledger,
                &parse_line(&line).map_err(|e| anyhow::anyhow!("{e}"))?,
                &Actor::operator("load"),
            )
            .await?;
        }
    }
    let now = chrono::Utc::now().timestamp_millis();
    let token = create_token(
        &store,
        &NewToken {
            scope: Scope::Metering,
            provider_id: None,
            name: "load-metering".into(),
            label: "load".into(),
            expires_in_days: None,
            created_by: settle::ledger::Actor::operator("bench"),
            needs_approval: false,
        },
        &settle::config::AuthConfig::default(),
        now,
    )
    .await?
    .token;
    let admin = create_token(
        &store,
        &NewToken {
            scope: Scope::Admin,
            provider_id: None,
            name: "load-admin".into(),
            label: "load-admin".into(),
            expires_in_days: None,
            created_by: settle::ledger::Actor::operator("bench"),
            needs_approval: false,
        },
        &settle::config::AuthConfig::default(),
        now,
    )
    .await?
    .token;
    let app = Application::build(
        HttpConfig {
            bind: "127.0.0.1:0".into(),
            ..HttpConfig::default()
        },
        ledger.clone(),
    )
    .await?;
    let base = format!("http://127.0.0.1:{}", app.port());
    let server = tokio::spawn(app.run_until_stopped(std::future::pending()));

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let start = Instant::now();
    // The projector, as `settle serve` runs it (`[workers] projector_interval_ms` = 50): folds
    // the aggregates behind the bookings; its lag is sampled before each pass.
    let projector = {
        let store = ledger.store.clone();
        store.projector_follows();
        tokio::spawn(async move {
            let mut lags = Vec::new();
            loop {
                lags.push(store.projection_lag().as_micros() as u64);
                if let Err(e) = store.fold_dirty().await {
                    eprintln!("projector: {e}");
                }
                if lags.len() % 2 == 0 && Instant::now() > deadline {
                    return lags;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // Usage senders: each owns one GPU and walks forward through one-minute slices that
    // start 60 days ago; a share of each batch re-sends earlier events unchanged.
    let mut senders = Vec::new();
    for c in 0..clients {
        let (base, token) = (base.clone(), token.clone());
        senders.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let origin = now - 60 * 86_400_000;
            let mut next = 0u64;
            let mut sent: Vec<serde_json::Value> = Vec::new();
            let mut accepted = HashSet::new();
            let (mut latencies, mut duplicates, mut errors) = (Vec::new(), 0u64, 0u64);
            let interval = (rate_per_client > 0.0)
                .then(|| Duration::from_secs_f64(1.0 / rate_per_client));
            // Clients start spread over one interval, not all at once.
            let mut scheduled = Instant::now()
                + interval.map_or(Duration::ZERO, |i| i.mul_f64(c as f64 / clients as f64));
            while Instant::now() < deadline {
                if interval.is_some() {
                    tokio::time::sleep_until(scheduled.into()).await;
                }
                let mut events = Vec::with_capacity(batch);
                for i in 0..batch {
                    if !sent.is_empty() && (i as u64 * 100 / batch as u64) < dup_pct {
                        events.push(sent[(next as usize * 7 + i) % sent.len()].clone());
                    } else {
                        let s = origin + next as i64 * 60_000;
                        next += 1;
                        let e = serde_json::json!({"event_id": format!("load-{c}-{next}"), "provider_id": format!("load_{c}"), "gpu_id": format!("load_{c}-g"), "started_at": format_ms(s), "ended_at": format_ms(s + 60_000)});
                        sent.push(e.clone());
                        events.push(e);
                    }
                }
                let t = if interval.is_some() { scheduled } else { Instant::now() };
                scheduled += interval.unwrap_or_default();
                let r = client.post(format!("{base}/v1/usage")).bearer_auth(&token).json(&serde_json::json!({"events": events})).send().await;
                match r {
                    Ok(r) if r.status().is_success() => {
                        latencies.push(t.elapsed().as_micros() as u64);
                        let body: serde_json::Value = r.json().await.unwrap_or_default();
                        for res in body["results"].as_array().into_iter().flatten() {
                            match res["status"].as_str() {
                                Some("accepted") => {
                                    accepted.insert(res["event_id"].as_str().unwrap_or_default().to_owned());
                                }
                                Some("duplicate") => duplicates += 1,
                                _ => errors += 1,
                            }
                        }
                    }
                    _ => errors += 1,
                }
            }
            (accepted, latencies, duplicates, errors)
        }));
    }
    // Dashboard readers alongside.
    let mut readers = Vec::new();
    for r in 0..4 {
        let (base, admin) = (base.clone(), admin.clone());
        readers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut latencies = Vec::new();
            let mut i = r;
            while Instant::now() < deadline {
                let p = i % clients;
                i += 1;
                let path = if i % 2 == 0 {
                    format!("/v1/providers/load_{p}/summary")
                } else {
                    format!("/v1/providers/load_{p}/earnings?group_by=day")
                };
                let t = Instant::now();
                if let Ok(resp) = client
                    .get(format!("{base}{path}"))
                    .bearer_auth(&admin)
                    .send()
                    .await
                    && resp.status().is_success()
                {
                    let _ = resp.bytes().await;
                    latencies.push(t.elapsed().as_micros() as u64);
                }
            }
            latencies
        }));
    }
    let mut accepted = HashSet::new();
    let (mut usage_latencies, mut duplicates, mut errors) = (Vec::new(), 0, 0);
    for s in senders {
        let (a, l, d, e) = s.await?;
        accepted.extend(a);
        usage_latencies.extend(l);
        duplicates += d;
        errors += e;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut query_latencies = Vec::new();
    for r in readers {
        query_latencies.extend(r.await?);
    }
    server.abort();
    let mut lags = projector.await?;
    lags.sort_unstable();
    usage_latencies.sort_unstable();
    query_latencies.sort_unstable();

    let booked: HashSet<String> = sqlx::query_scalar::<_, String>(
        "SELECT idem_key FROM events WHERE event_type = 'usage.recorded'",
    )
    .fetch_all(store.pool())
    .await?
    .into_iter()
    .map(|k| k.trim_start_matches("usage:").to_owned())
    .collect();
    let count: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE event_type = 'usage.recorded'")
            .fetch_one(store.pool())
            .await?;
    let verify = settle::verify::verify(&store, &|_| {}).await?;
    println!(
        "load test: {database}, {clients} clients, {seconds} s, batches of {batch}, {dup_pct}% duplicates, group commit of at most {} events, {} bookers, {}",
        ledger_config.usage_group_events_max,
        ledger_config.usage_group_bookers_max,
        if rate_per_client > 0.0 {
            format!(
                "open loop: {rate_per_client} batches/s per client, {:.0} events/s offered",
                rate_per_client * clients as f64 * batch as f64
            )
        } else {
            "closed loop".to_owned()
        }
    );
    println!(
        "  requests            {} ({:.0}/s)",
        usage_latencies.len(),
        usage_latencies.len() as f64 / elapsed
    );
    println!(
        "  events accepted     {} ({:.0}/s), duplicates answered {duplicates}, errors {errors}",
        accepted.len(),
        accepted.len() as f64 / elapsed
    );
    println!(
        "  POST /v1/usage      p50 {:.1} ms, p99 {:.1} ms",
        percentile(&usage_latencies, 0.5) as f64 / 1000.0,
        percentile(&usage_latencies, 0.99) as f64 / 1000.0
    );
    let metrics = settle::metrics::global().render();
    let counter = |name: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(name) && l.contains("outcome=\"committed\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let (groups, grouped) = (
        counter("settle_usage_groups_total"),
        counter("settle_usage_group_batches_total"),
    );
    println!(
        "  group commit        {grouped:.0} batches in {groups:.0} booking transactions ({:.1} a transaction)",
        if groups > 0.0 { grouped / groups } else { 0.0 }
    );
    println!(
        "  dashboard queries   {} , p50 {:.1} ms, p99 {:.1} ms",
        query_latencies.len(),
        percentile(&query_latencies, 0.5) as f64 / 1000.0,
        percentile(&query_latencies, 0.99) as f64 / 1000.0
    );
    println!(
        "  projector lag       p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} passes)",
        percentile(&lags, 0.5) as f64 / 1000.0,
        percentile(&lags, 0.99) as f64 / 1000.0,
        lags.last().copied().unwrap_or(0) as f64 / 1000.0,
        lags.len()
    );
    println!(
        "  booked {count} usage events; acknowledged == booked: {}; none twice: {}",
        accepted == booked,
        count as usize == booked.len()
    );
    println!(
        "  settle verify: {}",
        if verify.ok() {
            "clean".to_owned()
        } else {
            format!("{} problems", verify.problems_total)
        }
    );
    store.close().await;
    if let Some((admin, name)) = drop_db {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&admin)
            .await;
    }
    anyhow::ensure!(
        accepted == booked && count as usize == booked.len() && verify.ok(),
        "exactly-once or verify failed"
    );
    Ok(())
}
