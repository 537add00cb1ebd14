//! Provider statement benchmark (SPEC §13): one provider with `--events` usage events and
//! its weekly payout, the ledger anchored and the anchor published on a local chain; then
//! the time to build the provider's payout statement (every event since its previous
//! payout, the proof, the payment's path) and to check it offline, beside the raw floor of
//! the same run: reading the same events and recomputing their hash chain, nothing else.
//! Also the lamports the publication cost. See `ops/bench/statement.md`.
//!
//! ```text
//! cargo bench --bench statement -- --db sqlite --events 100000
//! cargo bench --bench statement -- --db postgres --events 100000
//! ```

#[path = "fixture.rs"]
mod fixture;

use std::time::{Duration, Instant};

use settle::anchor::key::AnchorKey;
use settle::domain::ids::ProviderId;
use settle::domain::time::parse_rfc3339_ms;
use settle::ledger::ingest::{SenderScope, UsageInput};
use settle::ledger::{Actor, Ledger, ManualClock};
use settle::store::{Store, StoreOptions};
use settle::wire::import::{apply, parse_line};

const PG_DB: &str = "settle_bench_statement";
const PROVIDER: &str = "prv_bench";
const WEEK: &str = "2026-11-16T00:00:00Z";
const MINUTE_MS: i64 = 60_000;

struct Args {
    db: String,
    events: usize,
    batch: usize,
    pg_url: String,
    sqlite_path: String,
}

fn parse_args() -> Args {
    let mut a = Args {
        db: "sqlite".into(),
        events: 100_000,
        batch: 1000,
        pg_url: std::env::var("SETTLE_BENCH_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        sqlite_path: "/tmp/settle-bench-statement.db".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--db" => a.db = value(),
            "--events" => a.events = value().parse().expect("--events"),
            "--batch" => a.batch = value().parse().expect("--batch"),
            "--pg-url" => a.pg_url = value(),
            "--sqlite-path" => a.sqlite_path = value(),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

async fn fresh_store(a: &Args) -> (Store, String) {
    let url = if a.db == "postgres" {
        sqlx::any::install_default_drivers();
        let admin = sqlx::AnyPool::connect(&a.pg_url).await.expect("--pg-url");
        for sql in [
            format!("DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)"),
            format!("CREATE DATABASE {PG_DB}"),
        ] {
            sqlx::query(&sql).execute(&admin).await.expect(&sql);
        }
        admin.close().await;
        let base = a
            .pg_url
            .rsplit_once('/')
            .map_or(a.pg_url.as_str(), |(b, _)| b);
        format!("{base}/{PG_DB}")
    } else {
        for suffix in ["", "-wal", "-shm", ".anchors", ".anchors.key"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", a.sqlite_path));
        }
        format!("sqlite://{}", a.sqlite_path)
    };
    let store = Store::open(&url, &StoreOptions::default())
        .await
        .expect("open");
    store.migrate().await.expect("migrate");
    (store, url)
}

/// The provider, its GPU and price, `events` one-minute rentals booked in batches, and the
/// weekly run that pays them.
async fn book(ledger: &Ledger, clock: &ManualClock, a: &Args, wallet: &str) -> Duration {
    let actor = Actor::operator("bench");
    for line in [
        format!(
            r#"{{"type":"provider.register","provider_id":"{PROVIDER}","name":"Bench","email":"ops@bench.test","tier":"community","schedule":"weekly","payout_method":{{"kind":"solana","wallet":"{wallet}"}}}}"#
        ),
        format!(
            r#"{{"type":"gpu.register","gpu_id":"{PROVIDER}-g0","provider_id":"{PROVIDER}","model":"H100-80GB"}}"#
        ),
    ] {
        apply(ledger, &parse_line(&line).expect("line"), &actor)
            .await
            .expect("registry");
    }
    let start = parse_rfc3339_ms(WEEK).unwrap();
    fixture::price(
        ledger,
        &ProviderId::parse(PROVIDER).unwrap(),
        "H100-80GB",
        "3.6",
        start - 86_400_000,
        &actor,
    )
    .await;
    let began = Instant::now();
    for (b, chunk) in (0..a.events)
        .collect::<Vec<_>>()
        .chunks(a.batch)
        .enumerate()
    {
        let batch: Vec<UsageInput> = chunk
            .iter()
            .map(|i| {
                let at = start + (*i as i64) * MINUTE_MS / 16;
                UsageInput {
                    event_id: Some(format!("u{i}")),
                    provider_id: Some(PROVIDER.into()),
                    gpu_id: Some(format!("{PROVIDER}-g0")),
                    rental_id: None,
                    started_at: Some(settle::domain::time::format_ms(at)),
                    ended_at: Some(settle::domain::time::format_ms(at + MINUTE_MS / 16)),
                    rate_usdc_per_hour: None,
                }
            })
            .collect();
        clock.set(start + 6 * 86_400_000 + b as i64);
        ledger
            .ingest_usage(&batch, &SenderScope::Admin, &actor)
            .await
            .expect("usage");
    }
    began.elapsed()
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a = parse_args();
    let (store, url) = fresh_store(&a).await;
    let clock = std::sync::Arc::new(ManualClock::new(parse_rfc3339_ms(WEEK).unwrap()));
    let ledger = Ledger::new(
        store,
        clock.clone(),
        settle::config::LedgerConfig::default(),
    )
    .with_privacy(fixture::sealing(
        &Store::open(&url, &StoreOptions::default()).await.unwrap(),
    ));
    let dir = tempfile::tempdir().expect("dir");
    let chain = settle::rails::solana::dev::start_local_chain(
        &dir.path().join("chain"),
        1_000_000 * 1_000_000,
        100 * settle::rails::solana::dev::LAMPORTS_PER_SOL,
    )
    .await
    .expect("local chain");
    let wallet = settle::demo::demo_wallet(PROVIDER);
    let booked = book(
        &ledger,
        &clock,
        &a,
        &settle_solana::Signer::pubkey(&wallet).to_string(),
    )
    .await;
    clock.set(parse_rfc3339_ms("2026-11-23T00:05:00Z").unwrap());
    ledger
        .run_payouts(
            settle::ledger::runs::weekly_key("2026-11-23").unwrap(),
            &settle_calendar::Calendar::platform_default(),
            &settle::config::RunConfig::default(),
            &Actor::system("bench"),
        )
        .await
        .expect("weekly run");
    clock.set(parse_rfc3339_ms("2026-11-23T00:10:00Z").unwrap());
    let rail = settle::rails::solana::SolanaRail::connect(&chain.solana_config())
        .await
        .expect("rail");
    let paid = rail.pay_pending(&ledger).await.expect("paid");
    assert_eq!(paid.settled, 1, "{paid:?}");

    // Anchored and published, the fee measured on the anchor key's balance.
    let log = dir.path().join("anchors");
    let key = AnchorKey::load_or_create(&dir.path().join("anchor.key")).expect("key");
    let payer: settle_solana::Pubkey = key.public().parse().unwrap();
    chain.chain.airdrop_sol(&payer, 1_000_000_000);
    let before = chain.chain.lamports_of(&payer);
    let t = Instant::now();
    settle::anchor::write(&ledger.store, &log, &key, ledger.now_ms())
        .await
        .expect("anchor");
    let anchored = t.elapsed();
    let t = Instant::now();
    let published = settle::anchor::publish::publish(
        &ledger.store,
        &settle::anchor::read(&log).unwrap(),
        &key,
        &chain.url,
        Duration::from_secs(30),
        ledger.now_ms(),
    )
    .await
    .expect("publish");
    let publishing = t.elapsed();
    let fee = before - chain.chain.lamports_of(&payer);

    // The raw floor: the same events read and their chain recomputed.
    let stream = settle::domain::event::provider_stream(PROVIDER);
    let head = ledger.store.stream_head(&stream).await.unwrap();
    let t = Instant::now();
    let events = settle::store::statements::stream_range(&ledger.store, &stream, 1, head)
        .await
        .unwrap();
    let mut hash = settle::store::GENESIS_HASH.to_vec();
    for e in &events {
        hash = settle::store::event_hash(&hash, &settle::store::canonical_bytes(e)).to_vec();
    }
    assert_eq!(hash, events.last().unwrap().hash);
    let raw = t.elapsed();

    let payout = settle::ledger::payouts::provider_payouts(&ledger.store, PROVIDER)
        .await
        .unwrap()
        .remove(0);
    let t = Instant::now();
    let statement = settle::statement::build(
        &ledger.store,
        &log,
        PROVIDER,
        &settle::statement::Subject::Payout(payout.payout_id.into()),
    )
    .await
    .expect("statement");
    let built = t.elapsed();
    let t = Instant::now();
    let json = serde_json::to_string(&statement).unwrap();
    let serialised = t.elapsed();
    let t = Instant::now();
    let read: settle::statement::check::Statement = serde_json::from_str(&json).unwrap();
    let checked = settle::statement::check::check(&read).expect("checks");
    let verified = t.elapsed();
    assert_eq!(checked.final_root, published.root);

    println!(
        "statement benchmark, {} ({} events booked in {})",
        a.db,
        a.events,
        ms(booked)
    );
    println!(
        "  anchor written: {}; published: {} ({fee} lamports)",
        ms(anchored),
        ms(publishing)
    );
    println!(
        "  raw floor (read {} events, recompute the chain): {}",
        events.len(),
        ms(raw)
    );
    println!(
        "  statement built: {} ({} events, {:.1} MiB of JSON in {}); checked offline: {}",
        ms(built),
        statement.events.len(),
        json.len() as f64 / 1_048_576.0,
        ms(serialised),
        ms(verified)
    );
    ledger.store.close().await;
}
