//! Solana payout benchmark: a weekly run of N providers paid in USDC on the local chain
//! (litesvm with the real SPL Token, ATA and Memo programs) through the production
//! `RpcClient` adapter and the ledger journal, as `settle pay solana` does it. Reports
//! payouts per transaction, lamports of fees per payout and the time to pay. See
//! `ops/bench/solana.md` for the command and the figures.
//!
//! `cargo bench --bench solana -- [--payouts 10000] [--existing-atas-pct 50]
//!  [--priority-fee 10000] [--database sqlite|postgres://…] [--legacy]`
//!
//! By default the rail packs v0 transactions against the treasury's lookup tables, which it
//! creates in the pass (their transactions, fees and rent are reported apart); `--legacy`
//! packs legacy transactions (`solana.lookup_tables = false`).

#[path = "fixture.rs"]
mod fixture;
#[path = "peak.rs"]
mod peak;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use settle::config::{LedgerConfig, RunConfig};
use settle::domain::time::{format_ms, parse_rfc3339_ms};
use settle::ledger::ingest::{SenderScope, UsageInput};
use settle::ledger::{Actor, Ledger, ManualClock, runs};
use settle::rails::solana::{SolanaRail, dev};
use settle::store::{Store, StoreOptions};
use settle::wire::import::{apply, parse_line};
use settle_calendar::Calendar;
use settle_solana::{Chain, Keypair, Signature, Signer};

struct Args {
    payouts: usize,
    existing_atas_pct: usize,
    priority_fee: u64,
    database: String,
    legacy: bool,
}

fn parse_args() -> Args {
    let mut a = Args {
        payouts: 10_000,
        existing_atas_pct: 50,
        priority_fee: 10_000,
        database: "sqlite".into(),
        legacy: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--payouts" => a.payouts = val().parse().expect("--payouts N"),
            "--existing-atas-pct" => {
                a.existing_atas_pct = val().parse().expect("--existing-atas-pct N")
            }
            "--priority-fee" => a.priority_fee = val().parse().expect("--priority-fee N"),
            "--database" => a.database = val(),
            "--legacy" => a.legacy = true,
            _ => {} // `cargo bench` passes `--bench`
        }
    }
    a
}

async fn import(ledger: &Ledger, lines: &[String]) {
    let actor = Actor::operator("bench");
    for line in lines {
        let command = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        apply(ledger, &command, &actor)
            .await
            .unwrap_or_else(|e| panic!("{line}: {e}"));
    }
}

fn main() {
    let args = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(bench(args));
}

async fn bench(args: Args) {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = if args.database == "sqlite" {
        format!("sqlite://{}", dir.path().join("bench.db").display())
    } else {
        args.database.clone()
    };
    let store = Store::open(&url, &StoreOptions::default())
        .await
        .expect("open database");
    store.migrate().await.expect("migrate");
    let clock = Arc::new(ManualClock::new(
        parse_rfc3339_ms("2026-11-20T00:00:00Z").unwrap(),
    ));
    let sealing = fixture::sealing(&store);
    let ledger = Ledger::new(store, clock.clone(), LedgerConfig::default()).with_privacy(sealing);
    let total_usdc = 100 * args.payouts as u64 * 1_000_000;
    let chain = dev::start_local_chain(
        &dir.path().join("chain"),
        total_usdc,
        // The fees, and the rent of the token accounts the pass creates (2,039,280 lamports
        // each, up to one per payout), with room to spare.
        (1_000 + args.payouts as u64 / 200) * dev::LAMPORTS_PER_SOL,
    )
    .await
    .expect("local chain");
    eprintln!(
        "solana bench: {} payouts, {}% of recipients with a USDC account, priority fee {} µlamports/CU, {}",
        args.payouts,
        args.existing_atas_pct,
        args.priority_fee,
        if args.database == "sqlite" {
            "SQLite"
        } else {
            "PostgreSQL"
        }
    );

    // Setup (timed apart): providers, one usage event each, the weekly run. Built and
    // booked a slice of providers at a time, so a run of a million keeps no command text
    // in memory and prints its progress.
    let started = Instant::now();
    let day = parse_rfc3339_ms("2026-11-18T00:00:00Z").unwrap();
    const SLICE: usize = 10_000;
    for first in (0..args.payouts).step_by(SLICE) {
        let slice = first..(first + SLICE).min(args.payouts);
        let mut usage = Vec::with_capacity(slice.len());
        let mut lines = Vec::with_capacity(3 * slice.len());
        for i in slice.clone() {
            let id = format!("bp{i:06}");
            let wallet = Keypair::new().pubkey();
            if i * 100 < args.existing_atas_pct * args.payouts {
                chain.chain.create_token_account(&chain.mint, &wallet);
            }
            lines.push(format!(
                r#"{{"type":"provider.register","provider_id":"{id}","name":"Provider {id}","email":"ops@{id}.test","tier":"community","schedule":"weekly","payout_method":{{"kind":"solana","wallet":"{wallet}"}}}}"#
            ));
            lines.push(format!(
                r#"{{"type":"gpu.register","gpu_id":"{id}-g0","provider_id":"{id}","model":"H100-80GB"}}"#
            ));
            // The price book the usage rate is checked against (SPEC §2).
            lines.push(format!(
                r#"{{"type":"rate.set","provider_id":"{id}","model":"H100-80GB","rate_usdc_per_hour":"3.6","effective_from":"2026-01-01T00:00:00Z"}}"#
            ));
            let gross = 40_000_000 + (i as i64 % 1000) * 7_919;
            usage.push(UsageInput {
                event_id: Some(format!("{id}-u0")),
                provider_id: Some(id.clone()),
                gpu_id: Some(format!("{id}-g0")),
                rental_id: None,
                started_at: Some(format_ms(day)),
                ended_at: Some(format_ms(day + gross)),
                rate_usdc_per_hour: Some("3.6".into()),
            });
        }
        import(&ledger, &lines).await;
        for chunk in usage.chunks(1000) {
            ledger
                .ingest_usage(chunk, &SenderScope::Admin, &Actor::operator("bench"))
                .await
                .expect("ingest");
        }
        if slice.end % 100_000 == 0 && slice.end < args.payouts {
            eprintln!(
                "setup: {} providers in {:.1} s",
                slice.end,
                started.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!(
        "setup: {} providers registered and their usage booked in {:.1} s",
        args.payouts,
        started.elapsed().as_secs_f64()
    );
    // The weekly run's own peak: the high-water mark is reset after the setup, so it holds
    // what the run needs on top of what is resident already (the local chain's accounts,
    // SQLite's page caches).
    let resident_before_run_kib = peak::reset_vmhwm();
    clock.set(parse_rfc3339_ms("2026-11-23T06:00:00Z").unwrap());
    let started = Instant::now();
    let run = ledger
        .run_payouts(
            runs::weekly_key("2026-11-23").unwrap(),
            &Calendar::platform_default(),
            &RunConfig::default(),
            &Actor::system("bench"),
        )
        .await
        .expect("weekly run");
    assert_eq!(run.payouts as usize, args.payouts);
    let decide_secs = started.elapsed().as_secs_f64();
    let run_peak_kib = peak::vmhwm_kib();
    // Printed as soon as the run is decided, so a pass stopped part-way still leaves it.
    let peak_of = match resident_before_run_kib {
        0 => "the process so far (its high-water mark could not be reset)".to_owned(),
        kib => format!("the run ({} MiB resident before it)", kib / 1024),
    };
    println!(
        "weekly run: {} payouts decided in {decide_secs:.1} s; peak memory of {peak_of}: {} MiB",
        args.payouts,
        run_peak_kib / 1024,
    );

    // The measured part: one pass of the outbox worker.
    let mut config = chain.solana_config();
    config.priority_fee_micro_lamports = args.priority_fee;
    config.lookup_tables = !args.legacy;
    let rail = SolanaRail::connect(&config).await.expect("rail");
    let lamports_before = chain.chain.lamports_of(&chain.treasury);
    clock.set(parse_rfc3339_ms("2026-11-23T07:00:00Z").unwrap());
    let started = Instant::now();
    let report = rail.pay_pending(&ledger).await.expect("pay");
    let pay_secs = started.elapsed().as_secs_f64();
    assert_eq!(report.settled, args.payouts, "{report:?}");
    let lamports_spent = lamports_before - chain.chain.lamports_of(&chain.treasury);

    // Payouts per transaction, counted in one pass (a search of every payout per
    // transaction still ran after 12 minutes at a million payouts, and was stopped).
    let mut per_signature: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &report.payouts {
        if let Some(s) = p.signature.as_deref() {
            *per_signature.entry(s).or_default() += 1;
        }
    }
    let mut fees = 0u64;
    let mut sizes = Vec::new();
    for (s, payouts) in &per_signature {
        let signature: Signature = s.parse().unwrap();
        let landed = chain.chain.landed_transaction(&signature).expect("landed");
        fees += landed.fee;
        sizes.push(*payouts);
    }
    let rent = chain
        .chain
        .minimum_balance_for_rent_exemption(settle_solana::pack::TOKEN_ACCOUNT_LEN)
        .await
        .unwrap();
    // The lookup tables: their rent (a deposit) and the fees of their transactions.
    let tables = rail.lookup_tables(&ledger).await.expect("tables");
    let table_rent: u64 = tables.iter().map(|t| chain.chain.lamports_of(t)).sum();
    let table_fees: u64 = chain
        .chain
        .landed_signatures()
        .iter()
        .filter_map(|s| chain.chain.landed_transaction(s))
        .filter(|l| settle_solana::maintained_table(&l.transaction).is_some())
        .map(|l| l.fee)
        .sum();
    let started = Instant::now();
    let rec = rail.reconcile(&ledger).await.expect("reconcile");
    let reconcile_secs = started.elapsed().as_secs_f64();
    assert!(rec.ok(), "{rec:?}");
    let started = Instant::now();
    let verify = settle::verify::verify(&ledger.store, &|_| {})
        .await
        .expect("verify");
    assert!(verify.ok(), "{:?}", verify.problems);
    let verify_secs = started.elapsed().as_secs_f64();

    let n = args.payouts as f64;
    let max = sizes.iter().max().copied().unwrap_or(0);
    let min = sizes.iter().min().copied().unwrap_or(0);
    println!(
        "paid {} payouts ({} USDC) in {} transactions: {:.1} payouts per transaction (min {min}, max {max})",
        args.payouts,
        settle::domain::money::format_micro_usdc(report.settled_micro_usdc),
        per_signature.len(),
        n / per_signature.len() as f64
    );
    println!(
        "fees: {fees} lamports = {:.0} lamports per payout (priority fee {} µlamports/CU); \
         treasury SOL spent {lamports_spent} lamports incl. rent of {} new token accounts ({rent} each)",
        fees as f64 / n,
        args.priority_fee,
        (lamports_spent - fees - table_fees - table_rent) / rent.max(1)
    );
    println!(
        "lookup tables: {} tables, {} transactions, {table_fees} lamports of fees ({:.0} per payout, once), \
         {table_rent} lamports of rent (a deposit, {:.0} per payout)",
        tables.len(),
        report.lookup_table_transactions_landed,
        table_fees as f64 / n,
        table_rent as f64 / n,
    );
    println!(
        "time to pay: {pay_secs:.1} s ({:.0} payouts/s) through RpcClient → local JSON-RPC, journaled on the ledger; reconcile {reconcile_secs:.1} s; verify clean in {verify_secs:.1} s",
        n / pay_secs
    );
    println!(
        "end to end (decide, pack, sign, send, confirm, reconcile): {:.1} s; peak memory (VmHWM) {} MiB",
        decide_secs + pay_secs + reconcile_secs,
        peak::vmhwm_kib() / 1024
    );
    chain.server.shutdown().await;
}
