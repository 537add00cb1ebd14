//! A real PostgreSQL restart, not just dropped connections: the test starts a private,
//! throwaway cluster (`initdb` + `pg_ctl start` on a free port, never the machine's shared
//! server) and restarts it with `pg_ctl restart -m fast` and `-m immediate` (a crash
//! restart with WAL recovery)
//!
//! - A, ingestion: 4 concurrent senders retry each batch until it is answered while the
//!   cluster restarts 3 times. Every acknowledged (accepted or duplicate) event is booked
//!   once, nothing else is booked, the provider balances equal the sum computed here, and
//!   `settle verify` is clean.
//! - B, a payout run: `settle run weekly` is interrupted by a restart (fast, then immediate) while
//!   it decides 440 candidates; the attempts may fail, the run started again after the
//!   fault completes, every provider has exactly one payout of the run, balances add up and
//!   `settle verify` is clean.
//!
//! Needs the PostgreSQL server binaries (`pg_config --bindir`, `/usr/lib/postgresql/*/bin`
//! or `SETTLE_TEST_PG_BINDIR`, found by `settle_prereq::postgres_server`); without them the
//! test is reported skipped with the reason, and fails in CI. As root, `initdb`/`pg_ctl`
//! run as the `postgres` user through `runuser`.

use crate::common;
use crate::common::Tables;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{free_port, minute_slices, register_fault_providers, run_cli};
use settle::domain::time::{format_ms, parse_rfc3339_ms};
use settle::ledger::ingest::{SenderScope, UsageInput};
use settle::ledger::{Actor, Ledger, ManualClock};
use settle::store::{Store, StoreOptions};

use sqlx::Row;

const NOW: &str = "2026-11-30T12:00:00Z";
const RUN_NOW: &str = "2026-12-07T00:10:00Z";
const MONDAY: &str = "2026-12-07";

/// Providers with usage from the concurrent senders (scenario A).
const SENDER_PROVIDERS: usize = 40;
/// All providers, each a candidate of the payout run (scenario B).
const PROVIDERS: usize = 440;
const SENDERS: usize = 4;
const BATCHES_PER_SENDER: usize = 60;
const BATCH: usize = 50;

/// One one-minute slice at 2.49 USDC/h, community tier (20 % fee), computed by hand:
/// gross = 2,490,000 µUSDC/h × 60,000 ms / 3,600,000 ms/h = 41,500 µUSDC,
/// fee = 41,500 × 2,000 / 10,000 = 8,300, net = 33,200.
const NET_PER_MINUTE_MICRO: i64 = 33_200;
/// The 20-hour interval every provider gets before the run:
/// gross = 2,490,000 × 20 = 49,800,000, fee 20 % = 9,960,000, net = 39,840,000.
const NET_LONG_MICRO: i64 = 39_840_000;

// ---------------------------------------------------------------------------------------
// The private cluster.

/// How to drive the private cluster's `pg_ctl`.
#[derive(Clone, Debug)]
struct PgCtl {
    bindir: PathBuf,
    /// The temp dir: data directory, unix socket and logs.
    root: PathBuf,
    port: u16,
    /// `Some("postgres")` when running as root (initdb refuses root).
    run_as: Option<String>,
}

impl PgCtl {
    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    fn log(&self) -> PathBuf {
        self.root.join("server.log")
    }

    fn command(&self, program: &str) -> Command {
        let bin = self.bindir.join(program);
        let mut c = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        // Output to files, never to pipes: the postmaster must not inherit our pipes.
        let out = self.root.join("pg_ctl.out");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .unwrap();
        c.stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        c
    }

    /// Runs `pg_ctl <args>`; panics with its output and the server log on failure.
    fn pg_ctl(&self, args: &[&str]) {
        let status = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.log())
            .args(["-w", "-t", "120"])
            .args(args)
            .status()
            .expect("run pg_ctl");
        assert!(
            status.success(),
            "pg_ctl {args:?}: {status}\n{}\n{}",
            std::fs::read_to_string(self.root.join("pg_ctl.out")).unwrap_or_default(),
            std::fs::read_to_string(self.log()).unwrap_or_default()
        );
    }

    fn start(&self) {
        let options = format!(
            // fsync off: a process crash (`-m immediate`) keeps what the OS has; only a
            // power loss would need the fsyncs, and this is not that test.
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.root.display()
        );
        self.pg_ctl(&["-o", &options, "start"]);
    }

    /// `pg_ctl restart -m <mode>` (the options of the last start are kept).
    fn restart(&self, mode: &str) {
        self.pg_ctl(&["-m", mode, "restart"]);
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

/// The cluster; stopped (immediately) and deleted on drop, also when the test panics.
struct PgCluster {
    ctl: PgCtl,
    _dir: tempfile::TempDir,
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self
            .ctl
            .command("pg_ctl")
            .arg("-D")
            .arg(self.ctl.data())
            .args(["-m", "immediate", "-w", "stop"])
            .status();
    }
}

/// initdb + start a private cluster with `server`'s binaries (a failure here, with the
/// binaries present, fails the test).
fn start_cluster(server: settle_prereq::PgServer) -> PgCluster {
    let dir = tempfile::Builder::new()
        .prefix("settle-pg-")
        .tempdir()
        .expect("temp dir");
    if let Some(user) = &server.run_as {
        std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid))
            .unwrap_or_else(|e| panic!("chown {} to {}: {e}", dir.path().display(), user.name));
    }
    let bindir = server.bindir;
    let run_as = server.run_as.map(|u| u.name);
    let ctl = PgCtl {
        bindir,
        root: dir.path().to_path_buf(),
        port: free_port(),
        run_as,
    };
    let status = ctl
        .command("initdb")
        .arg("-D")
        .arg(ctl.data())
        .args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ])
        .status()
        .expect("run initdb");
    assert!(
        status.success(),
        "initdb failed ({status}): {}",
        std::fs::read_to_string(ctl.root.join("pg_ctl.out")).unwrap_or_default()
    );
    ctl.start();
    PgCluster { ctl, _dir: dir }
}

// ---------------------------------------------------------------------------------------
// The ledger.

fn provider(p: usize) -> String {
    format!("f{p}")
}

/// Sender `s`'s batch `b`: provider `s × 10 + b mod 10`, its slices `(b / 10) × 50 …`.
fn sender_batch(s: usize, b: usize) -> Vec<UsageInput> {
    let per_sender = SENDER_PROVIDERS / SENDERS;
    minute_slices(
        s * per_sender + b % per_sender,
        (b / per_sender) * BATCH,
        BATCH,
    )
}

async fn ledger_at(url: &str, now: &str) -> Ledger {
    let store = Store::open(url, &StoreOptions::default()).await.unwrap();
    let clock = Arc::new(ManualClock::new(parse_rfc3339_ms(now).unwrap()));
    Ledger::new(store, clock, settle::config::LedgerConfig::default())
}

async fn count(store: &Store, sql: &str) -> i64 {
    sqlx::query(sql)
        .fetch_one(store.pool())
        .await
        .unwrap()
        .get::<i64, _>(0)
}

fn verify_clean(url: &str, when: &str) {
    let (code, out, err) = run_cli(url, &["verify"]);
    assert_eq!(code, 0, "settle verify after {when}: {out}{err}");
    println!("settle verify after {when}: clean");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarts_lose_and_double_nothing() {
    // Without the server binaries: skipped with the reason, a failure in CI.
    let Some(server) = settle_prereq::require(settle_prereq::postgres_server()) else {
        return;
    };
    let cluster = tokio::task::spawn_blocking(move || start_cluster(server))
        .await
        .unwrap();
    let ctl = cluster.ctl.clone();
    println!(
        "private cluster: {} on port {} (data {})",
        ctl.bindir.display(),
        ctl.port,
        ctl.data().display()
    );
    sqlx::any::install_default_drivers();
    let admin = sqlx::AnyPool::connect(&ctl.url("postgres")).await.unwrap();
    sqlx::query("CREATE DATABASE settle_restart")
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let url = ctl.url("settle_restart");
    let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
    store.migrate().await.unwrap();
    let setup = ledger_at(&url, NOW).await;
    register_fault_providers(&setup, PROVIDERS).await;
    setup.store.close().await;

    // ---- A: concurrent senders, three restarts. -------------------------------------
    let total_batches = SENDERS * BATCHES_PER_SENDER;
    let answered = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let ledger = ledger_at(&url, NOW).await;
        let answered = answered.clone();
        senders.push(tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut errors: BTreeMap<String, usize> = BTreeMap::new();
            for b in 0..BATCHES_PER_SENDER {
                let inputs = sender_batch(s, b);
                let started = Instant::now();
                // The same batch until it is answered.
                let results = loop {
                    match ledger
                        .ingest_usage(&inputs, &SenderScope::Metering, &Actor::operator("t"))
                        .await
                    {
                        Ok(results) => break results,
                        Err(e) => {
                            *errors.entry(e.code().to_owned()).or_default() += 1;
                            assert!(
                                started.elapsed() < Duration::from_secs(180),
                                "sender {s} batch {b} still failing after 180 s: {e}"
                            );
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                };
                assert_eq!(results.len(), inputs.len());
                for r in &results {
                    assert_ne!(r.status(), "rejected", "sender {s} batch {b}: {r:?}");
                    acknowledged.push(r.event_id().unwrap().to_owned());
                }
                answered.fetch_add(1, Ordering::SeqCst);
            }
            ledger.store.close().await;
            (acknowledged, errors)
        }));
    }
    // Restart when 15 %, 40 % and 65 % of the batches are answered.
    let plan_a = [(15, "fast"), (40, "immediate"), (65, "fast")];
    let mut restarts_a = Vec::new();
    for (percent, mode) in plan_a {
        while answered.load(Ordering::SeqCst) * 100 < total_batches * percent {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let at = answered.load(Ordering::SeqCst);
        let c = ctl.clone();
        let t = Instant::now();
        tokio::task::spawn_blocking(move || c.restart(mode))
            .await
            .unwrap();
        println!(
            "A: pg_ctl restart -m {mode} after {at}/{total_batches} batches answered ({} ms)",
            t.elapsed().as_millis()
        );
        restarts_a.push((mode, at));
    }
    let mut acknowledged: Vec<String> = Vec::new();
    let mut errors_a: BTreeMap<String, usize> = BTreeMap::new();
    for s in senders {
        let (a, e) = s.await.unwrap();
        acknowledged.extend(a);
        for (code, n) in e {
            *errors_a.entry(code).or_default() += n;
        }
    }
    let acknowledged_set: HashSet<String> = acknowledged.iter().cloned().collect();
    let expected_events = SENDERS * BATCHES_PER_SENDER * BATCH;
    assert_eq!(acknowledged_set.len(), expected_events);

    let booked: Vec<String> =
        sqlx::query("SELECT idem_key FROM events WHERE event_type = 'usage.recorded'")
            .fetch_all(store.pool())
            .await
            .unwrap()
            .iter()
            .map(|r| {
                r.get::<String, _>(0)
                    .trim_start_matches("usage:")
                    .to_owned()
            })
            .collect();
    let booked_set: HashSet<String> = booked.iter().cloned().collect();
    let doubled = count(
        &store,
        "SELECT COUNT(*) FROM (SELECT idem_key FROM events WHERE event_type = 'usage.recorded' \
         GROUP BY idem_key HAVING COUNT(*) > 1) d",
    )
    .await;
    let doubled_ids = count(
        &store,
        "SELECT COUNT(*) FROM (SELECT payload::json->>'event_id' FROM events \
         WHERE event_type = 'usage.recorded' GROUP BY 1 HAVING COUNT(*) > 1) d",
    )
    .await;
    assert_eq!(doubled, 0, "no usage event booked twice (by idem_key)");
    assert_eq!(
        doubled_ids, 0,
        "no usage event booked twice (by the event_id in its payload)"
    );
    assert_eq!(
        booked.len(),
        booked_set.len(),
        "no usage event booked twice"
    );
    let lost: Vec<&String> = acknowledged_set.difference(&booked_set).collect();
    let unacked: Vec<&String> = booked_set.difference(&acknowledged_set).collect();
    assert!(
        lost.is_empty(),
        "acknowledged but not booked: {} e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(
        unacked.is_empty(),
        "booked but never acknowledged: {} e.g. {:?}",
        unacked.len(),
        &unacked[..unacked.len().min(5)]
    );
    // Balances: the acknowledged minutes of each provider at 33,200 µUSDC net.
    let mut minutes: HashMap<String, i64> = HashMap::new();
    for id in &acknowledged_set {
        let p = id.rsplit_once('-').unwrap().0.to_owned();
        *minutes.entry(p).or_default() += 1;
    }
    let balances = settle::store::read::balances(&store, None).await.unwrap();
    assert_eq!(balances.len(), PROVIDERS);
    let mut payable_total = 0;
    for b in &balances {
        let expected = minutes.get(&b.provider_id).copied().unwrap_or(0) * NET_PER_MINUTE_MICRO;
        assert_eq!(
            b.payable_micro_usdc, expected,
            "payable of {}",
            b.provider_id
        );
        assert_eq!(
            (
                b.held_micro_usdc,
                b.in_transit_micro_usdc,
                b.paid_micro_usdc
            ),
            (0, 0, 0)
        );
        payable_total += b.payable_micro_usdc;
    }
    assert_eq!(payable_total, expected_events as i64 * NET_PER_MINUTE_MICRO);
    verify_clean(&url, "scenario A");
    let errors_a_total: usize = errors_a.values().sum();
    println!(
        "A: restarts injected {} ({:?}); sender errors {errors_a_total} {errors_a:?}; events \
         acknowledged {} / booked {} (distinct {}); doubled 0; lost 0; payable total {} µUSDC",
        restarts_a.len(),
        restarts_a,
        acknowledged_set.len(),
        booked.len(),
        booked_set.len(),
        payable_total
    );

    // ---- B: a payout run restarted under. --------------------------------------------
    // Every provider gets a 20-hour interval (49.8 USDC gross), above the weekly minimum.
    let ledger = ledger_at(&url, NOW).await;
    let start = parse_rfc3339_ms("2026-11-20T02:00:00Z").unwrap();
    let long: Vec<UsageInput> = (0..PROVIDERS)
        .map(|p| UsageInput {
            event_id: Some(format!("f{p}-long")),
            provider_id: Some(provider(p)),
            gpu_id: Some(format!("f{p}-g")),
            rental_id: None,
            started_at: Some(format_ms(start)),
            ended_at: Some(format_ms(start + 20 * 3_600_000)),
            rate_usdc_per_hour: None,
        })
        .collect();
    let results = ledger
        .ingest_usage(&long, &SenderScope::Metering, &Actor::operator("t"))
        .await
        .unwrap();
    assert!(
        results.iter().all(|r| r.status() == "accepted"),
        "{results:?}"
    );
    ledger.store.close().await;
    let earned =
        |p: &str| minutes.get(p).copied().unwrap_or(0) * NET_PER_MINUTE_MICRO + NET_LONG_MICRO;

    let decided_sql = format!(
        "SELECT COUNT(*) FROM run_decisions WHERE run_kind = 'weekly' AND run_key = '{MONDAY}'"
    );
    let run_cmd = || {
        let mut c = tokio::process::Command::from(crate::common::settle_command());
        c.args([
            "--database",
            &url,
            "--now",
            RUN_NOW,
            "run",
            "weekly",
            "--date",
            MONDAY,
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c
    };
    let mut restarts_b = Vec::new();
    let mut failed_attempts = Vec::new();
    for mode in ["fast", "immediate"] {
        let before = count(&store, &decided_sql).await;
        if before as usize >= PROVIDERS {
            println!("B: the run is already decided; no restart -m {mode}");
            break;
        }
        let child = run_cmd().spawn().unwrap();
        let output = tokio::spawn(child.wait_with_output());
        // Restart once this attempt has decided 30 more candidates (mid-run).
        let mut restarted = false;
        while !output.is_finished() {
            let now = count(&store, &decided_sql).await;
            if now >= before + 30 {
                let c = ctl.clone();
                tokio::task::spawn_blocking(move || c.restart(mode))
                    .await
                    .unwrap();
                println!(
                    "B: pg_ctl restart -m {mode} while the run was at {now}/{PROVIDERS} decisions"
                );
                restarts_b.push((mode, now));
                restarted = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let out = output.await.unwrap().unwrap();
        let code = out.status.code().unwrap_or(-1);
        let after = count(&store, &decided_sql).await;
        println!(
            "B: run attempt during restart -m {mode} (restart injected: {restarted}) exited {code}; \
             decisions {before} -> {after}"
        );
        if code != 0 {
            failed_attempts.push((
                mode,
                code,
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
                    .to_owned(),
            ));
        }
    }
    // The fault is over: the run again completes.
    let out = run_cmd().output().await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "the run after the restarts: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let payouts = sqlx::query(&format!(
        "SELECT provider_id, COUNT(*), MIN(amount_micro_usdc), MIN(status) FROM payouts \
         WHERE run_kind = 'weekly' AND run_key = '{MONDAY}' GROUP BY provider_id"
    ))
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        payouts.len(),
        PROVIDERS,
        "every provider has a payout of the run"
    );
    let mut by_provider: HashMap<String, i64> = HashMap::new();
    for r in &payouts {
        let (p, n, amount, status): (String, i64, i64, String) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        assert_eq!(n, 1, "exactly one payout of the run for {p}");
        assert_eq!(amount, earned(&p), "the payout of {p} is all it earned");
        assert_eq!(status, "created", "{p}");
        by_provider.insert(p, amount);
    }
    let decided_events = count(
        &store,
        "SELECT COUNT(*) FROM events WHERE event_type = 'payout_run.decided'",
    )
    .await;
    let decided_keys = count(
        &store,
        "SELECT COUNT(DISTINCT idem_key) FROM events WHERE event_type = 'payout_run.decided'",
    )
    .await;
    let completed = count(
        &store,
        "SELECT COUNT(*) FROM events WHERE event_type = 'payout_run.completed'",
    )
    .await;
    assert_eq!(
        decided_events, PROVIDERS as i64,
        "each candidate decided once"
    );
    assert_eq!(decided_keys, decided_events);
    assert_eq!(completed, 1, "the run completed once");
    assert_eq!(count(&store, &decided_sql).await, PROVIDERS as i64);
    let balances = settle::store::read::balances(&store, None).await.unwrap();
    for b in &balances {
        let e = earned(&b.provider_id);
        assert_eq!(
            b.payable_micro_usdc, 0,
            "{} paid out in full",
            b.provider_id
        );
        assert_eq!(
            b.payable_micro_usdc + b.held_micro_usdc + b.in_transit_micro_usdc + b.paid_micro_usdc,
            e,
            "balances of {} add up to what it earned",
            b.provider_id
        );
        assert_eq!(b.in_transit_micro_usdc, by_provider[&b.provider_id]);
    }
    verify_clean(&url, "scenario B");
    let usage_after = count(
        &store,
        "SELECT COUNT(*) FROM events WHERE event_type = 'usage.recorded'",
    )
    .await;
    assert_eq!(usage_after as usize, expected_events + PROVIDERS);
    println!(
        "B: restarts injected mid-run {} ({:?}); failed run attempts {} {:?}; final run exit 0; \
         payouts {} for {} providers, each exactly 1; payout_run.decided {decided_events}, \
         completed {completed}",
        restarts_b.len(),
        restarts_b,
        failed_attempts.len(),
        failed_attempts,
        payouts.len(),
        PROVIDERS
    );
    println!(
        "TOTAL: restarts injected {} (A {}, B {}); sender errors {errors_a_total}; events \
         acknowledged {} = booked {}",
        restarts_a.len() + restarts_b.len(),
        restarts_a.len(),
        restarts_b.len(),
        acknowledged_set.len(),
        booked_set.len()
    );
    store.close().await;
    drop(cluster);
}
