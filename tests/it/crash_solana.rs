//! Exactly-once USDC payouts through crashes, with the real binary: `settle pay solana`
//! (the production `RpcClient` adapter) against the test's local chain endpoint (litesvm
//! with the real SPL programs) is aborted at every named failpoint of the rail, and killed
//! by SIGKILL at random instants, then restarted until its pass completes. Sometimes the
//! chain moves 200 blocks on while the payer is down, so that a signed but unsent
//! transaction provably expires and is re-signed. After every scenario: each provider holds
//! exactly its payout on chain, the treasury shrank by the total, every transaction that
//! landed is a landed attempt on the ledger and vice versa, `settle verify` and the
//! reconciliation are clean. The payer uses lookup tables from the first payout on, so the
//! first transaction of a scenario creates the treasury's table and every failpoint and kill
//! also meets a table transaction; after every scenario the table holds each recipient's
//! account once and the payments were v0 transactions. Runs on SQLite, and on PostgreSQL when
//! `SETTLE_TEST_PG_URL` is set.

use crate::common;
use crate::solana_support;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use settle::rails::solana::{LedgerJournal, failpoints};
use settle_solana::Journal;
use solana_support::*;

/// Providers per scenario: two transactions of two transfers.
const PROVIDERS: usize = 4;
const TRANSFERS_PER_TX: &str = "2";
/// Restarts after the crash before the test gives up.
const RESTARTS_MAX: usize = 10;
/// Random kills per test function (two functions: 100 SIGKILLs at random instants, with
/// their seeds printed, besides the kills at every failpoint).
const RANDOM_KILLS: usize = 50;
/// The random kills' seed unless `SETTLE_CRASH_SEED` sets one (printed either way).
const DEFAULT_SEED: u64 = 20_261_201;
/// When the paying process runs (after the run at 06:00).
const PAY_AT: &str = "2026-11-23T07:00:00Z";

enum Crash {
    /// At a failpoint of a pass that packs legacy transactions (no lookup table): the
    /// windows of the payments themselves, state by state.
    Failpoint(String),
    /// At a failpoint of a pass that creates the treasury's lookup table first: the hits
    /// of the table's transaction.
    TableFailpoint(String),
    /// SIGKILL after a delay, lookup tables on.
    KillAfter(Duration),
}

impl Crash {
    /// Whether the payer uses lookup tables (from the first payout on) in this scenario.
    fn tables(&self) -> bool {
        !matches!(self, Crash::Failpoint(_))
    }
}

/// `settle pay solana` against the world's database and chain.
fn pay_command(w: &World, failpoint: Option<&str>, tables: bool) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::from(common::settle_command());
    cmd.arg("--database")
        .arg(&w.db.url)
        .args([
            "--now",
            PAY_AT,
            "pay",
            "solana",
            "--cluster",
            "localnet",
            "--rpc-url",
        ])
        .arg(&w.dev.url)
        .arg("--mint")
        .arg(w.dev.mint.to_string())
        .arg("--treasury-keypair")
        .arg(&w.dev.treasury_path)
        .args([
            "--transfers-per-tx",
            TRANSFERS_PER_TX,
            "--poll-interval-ms",
            "2",
            "--rebroadcast-interval-ms",
            "20",
            "--wait-timeout-ms",
            "60000",
        ])
        // With tables, from the first payout on: the table's creation is the first
        // transaction a scenario signs, so kills meet it too.
        .env(
            "SETTLE_SOLANA__LOOKUP_TABLES_MIN_PAYOUTS",
            if tables { "1" } else { "1000000" },
        )
        // With tables, one transaction in flight at a time: the payments go out in waves,
        // and kills land between them too.
        .env(
            "SETTLE_SOLANA__TRANSACTIONS_IN_FLIGHT_MAX",
            if tables { "1" } else { "256" },
        )
        .env("SETTLE_FAILPOINT", failpoint.unwrap_or(""))
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

async fn run_to_end(
    w: &World,
    failpoint: Option<&str>,
    tables: bool,
) -> (ExitStatus, String, Duration) {
    let started = Instant::now();
    let out = pay_command(w, failpoint, tables)
        .output()
        .await
        .expect("run settle pay solana");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

/// One scenario: a weekly run of [`PROVIDERS`] providers, a crashed payer, restarts until
/// the pass completes, then the checks. Returns whether the crash hit a running process
/// and the duration of the last (complete) pass.
async fn scenario(crash: Crash, advance_while_down: bool) -> (bool, Duration, State) {
    let w = World::new(1_000_000 * USDC, 10 * SOL).await;
    let providers = w.providers("cr", PROVIDERS).await;
    for p in providers.iter().step_by(2) {
        w.dev.chain.create_token_account(&w.dev.mint, &p.wallet);
    }
    w.weekly(MONDAY, RUN_AT).await;
    let treasury_before = w.dev.treasury_usdc();
    let tables = crash.tables();

    let hit = match &crash {
        Crash::Failpoint(name) | Crash::TableFailpoint(name) => {
            let (status, stderr, _) = run_to_end(&w, Some(name), tables).await;
            // Aborted by that failpoint (SIGABRT after its line), not by anything else.
            let bare = name.split(':').next().unwrap_or(name);
            assert_eq!(
                status.signal(),
                Some(libc::SIGABRT),
                "failpoint {name} was not reached: {status} {stderr}"
            );
            assert!(
                stderr.contains(&format!("failpoint {bare} reached: aborting")),
                "aborted, but not at {name}: {stderr}"
            );
            true
        }
        Crash::KillAfter(delay) => {
            let mut child = pay_command(&w, None, tables).spawn().expect("spawn");
            tokio::time::sleep(*delay).await;
            let running = child.try_wait().expect("try_wait").is_none();
            let _ = child.start_kill();
            let status = child.wait().await.expect("wait");
            if running {
                // It ended by the kill (or, if it finished in between, successfully).
                assert!(
                    status.signal() == Some(libc::SIGKILL) || status.success(),
                    "the payer ended otherwise than by the kill: {status}"
                );
            }
            running && status.signal() == Some(libc::SIGKILL)
        }
    };
    let state = snapshot(&w).await;
    match &crash {
        Crash::Failpoint(name) => assert_state_at(name, &state),
        Crash::TableFailpoint(name) => assert_table_state_at(name, &state),
        Crash::KillAfter(_) => {}
    }
    if advance_while_down {
        w.dev.chain.advance(200);
    }
    let mut last = Duration::ZERO;
    let mut done = false;
    for _ in 0..RESTARTS_MAX {
        let (status, stderr, took) = run_to_end(&w, None, tables).await;
        last = took;
        match status.code() {
            Some(0) => {
                done = true;
                break;
            }
            Some(4) => continue, // payouts pending: run the pass again
            _ => panic!("settle pay solana failed: {status}\n{stderr}"),
        }
    }
    assert!(
        done,
        "the pass did not complete after {RESTARTS_MAX} restarts"
    );

    // Exactly once: every provider holds exactly its payout, the treasury paid the total.
    let total: i64 = providers.iter().map(|p| p.net_micro_usdc).sum();
    for p in &providers {
        let payouts = w.payouts_of(&p.id).await;
        assert_eq!(payouts.len(), 1);
        assert_eq!(payouts[0].status.as_str(), "settled", "{}", p.id);
        assert_eq!(w.usdc_of(&p.wallet), p.net_micro_usdc as u64, "{}", p.id);
    }
    assert_eq!(w.dev.treasury_usdc(), treasury_before - total as u64);
    // Every transaction on chain is a landed attempt on the ledger, and vice versa; no
    // attempt is left open.
    let attempts = LedgerJournal::new(w.ledger.clone())
        .attempts()
        .await
        .unwrap();
    assert!(attempts.iter().all(|a| a.outcome.is_some()), "{attempts:?}");
    let landed: BTreeSet<String> = attempts
        .iter()
        .filter(|a| a.outcome.map(|o| o.as_str()) == Some("landed"))
        .map(|a| a.signature.clone())
        .collect();
    let on_chain: BTreeSet<String> = w
        .dev
        .chain
        .landed_signatures()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(landed, on_chain);
    if tables {
        // After a SIGKILL, a killed payer's last record may commit after the next payer
        // looked; its table transaction then wins or expires and the payments may go out
        // as legacy transactions in that pass. After a failpoint (no late commit) the
        // payments are v0 against the table.
        let strict = matches!(crash, Crash::TableFailpoint(_));
        assert_tables_sound(&w, &providers, &attempts, strict).await;
    }
    let rail = w.rail().await;
    w.assert_clean(&rail).await;
    let (code, stdout, stderr) = common::run_cli(&w.db.url, &["verify"]);
    assert_eq!(code, 0, "settle verify: {stdout}{stderr}");
    (hit, last, state)
}

/// No address is in the treasury's lookup tables twice (a table transaction is never
/// applied twice, whatever the crash) and every journaled table exists; when `strict`, the
/// table holds each recipient's token account and every payment that landed is a v0
/// transaction.
async fn assert_tables_sound(
    w: &World,
    providers: &[Provider],
    attempts: &[settle::rails::solana::journal::AttemptRow],
    strict: bool,
) {
    let tables = LedgerJournal::new(w.ledger.clone())
        .lookup_tables()
        .await
        .unwrap();
    let loaded = settle_solana::LookupTables::load(&w.dev.chain, &w.dev.treasury, &tables)
        .await
        .unwrap();
    assert_eq!(
        loaded.tables().len(),
        tables.len(),
        "every journaled table exists"
    );
    let addresses: Vec<_> = loaded
        .tables()
        .iter()
        .flat_map(|t| t.addresses.clone())
        .collect();
    let distinct: BTreeSet<_> = addresses.iter().collect();
    assert_eq!(
        distinct.len(),
        addresses.len(),
        "an address was added twice"
    );
    if !strict {
        return;
    }
    assert!(!tables.is_empty(), "the treasury's table was created");
    for p in providers {
        let account = settle_solana::pack::token_account_of(&p.wallet, &w.dev.mint);
        assert!(distinct.contains(&account), "{} is in no table", p.id);
    }
    for a in attempts
        .iter()
        .filter(|a| !a.payout_ids.is_empty() && a.outcome.map(|o| o.as_str()) == Some("landed"))
    {
        let landed = w
            .dev
            .chain
            .landed_transaction(&a.signature.parse().unwrap())
            .unwrap();
        assert!(
            matches!(
                landed.transaction.message,
                settle_solana::VersionedMessage::V0(_)
            ),
            "{} is not a v0 transaction",
            a.attempt_id
        );
    }
}

/// What a crash left behind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct State {
    open: usize,
    landed: usize,
    expired: usize,
    /// Payouts by status: created, submitted, settled.
    created: usize,
    submitted: usize,
    settled: usize,
    /// Transactions sent to / landed on the chain.
    sends: u64,
    on_chain: usize,
}

impl State {
    /// A short description, to see which windows the random kills hit.
    fn window(&self) -> &'static str {
        if self.open + self.landed + self.expired == 0 {
            "nothing signed"
        } else if self.settled == PROVIDERS {
            "all settled"
        } else if self.landed > 0 && self.settled < 2 * self.landed {
            "landed, payouts not yet settled"
        } else if self.open > 0 && self.sends == 0 {
            "signed and persisted, not sent"
        } else if self.open > 0 {
            "sent, outcome not recorded"
        } else {
            "partly settled"
        }
    }
}

async fn snapshot(w: &World) -> State {
    let attempts = LedgerJournal::new(w.ledger.clone())
        .attempts()
        .await
        .unwrap();
    let count = |o: Option<&str>| {
        attempts
            .iter()
            .filter(|a| a.outcome.map(|o| o.as_str()) == o)
            .count()
    };
    let mut state = State {
        open: count(None),
        landed: count(Some("landed")),
        expired: count(Some("expired")),
        sends: w.dev.chain.stats().send_calls,
        on_chain: w.dev.chain.landed_signatures().len(),
        ..State::default()
    };
    for p in w.run_payouts(MONDAY).await {
        match p.status.as_str() {
            "created" => state.created += 1,
            "submitted" => state.submitted += 1,
            "settled" => state.settled += 1,
            other => panic!("payout {} is {other}", p.payout_id),
        }
    }
    state
}

/// The state each failpoint leaves on its first and second hit (the second transaction):
/// proves where it sits. Two transactions of two payouts: each is signed, persisted,
/// submitted and sent in turn; then each is confirmed, resolved and applied in turn. Once a
/// transaction was sent, the payer may rebroadcast it while it waits, so from then on the
/// number of sends is a minimum, checked as such; everything else is exact.
fn assert_state_at(failpoint: &str, s: &State) {
    let (expected, sends_min) = match failpoint {
        "solana.after_sign:1" => (
            State {
                created: 4,
                ..State::default()
            },
            0,
        ),
        "solana.after_persist:1" => (
            State {
                open: 1,
                created: 4,
                ..State::default()
            },
            0,
        ),
        "solana.before_send:1" => (
            State {
                open: 1,
                created: 2,
                submitted: 2,
                ..State::default()
            },
            0,
        ),
        "solana.after_send:1" | "solana.after_sign:2" => (
            State {
                open: 1,
                created: 2,
                submitted: 2,
                on_chain: 1,
                ..State::default()
            },
            1,
        ),
        "solana.after_persist:2" => (
            State {
                open: 2,
                created: 2,
                submitted: 2,
                on_chain: 1,
                ..State::default()
            },
            1,
        ),
        "solana.before_send:2" => (
            State {
                open: 2,
                submitted: 4,
                on_chain: 1,
                ..State::default()
            },
            1,
        ),
        "solana.after_send:2" | "solana.before_confirm:1" => (
            State {
                open: 2,
                submitted: 4,
                on_chain: 2,
                ..State::default()
            },
            2,
        ),
        "solana.after_confirm:1" => (
            State {
                open: 1,
                landed: 1,
                submitted: 4,
                on_chain: 2,
                ..State::default()
            },
            2,
        ),
        "solana.mid_apply:1" => (
            State {
                open: 1,
                landed: 1,
                submitted: 3,
                settled: 1,
                on_chain: 2,
                ..State::default()
            },
            2,
        ),
        "solana.before_confirm:2" => (
            State {
                open: 1,
                landed: 1,
                submitted: 2,
                settled: 2,
                on_chain: 2,
                ..State::default()
            },
            2,
        ),
        "solana.after_confirm:2" => (
            State {
                landed: 2,
                submitted: 2,
                settled: 2,
                on_chain: 2,
                ..State::default()
            },
            2,
        ),
        "solana.mid_apply:2" => (
            State {
                landed: 2,
                submitted: 1,
                settled: 3,
                on_chain: 2,
                ..State::default()
            },
            2,
        ),
        other => panic!("no expected state for failpoint {other}: add it"),
    };
    assert_state_is(failpoint, s, &expected, sends_min);
}

/// `s` equals `expected` in everything but the sends, of which there are `sends_min` or
/// more (a sent transaction may be rebroadcast while the payer waits).
fn assert_state_is(failpoint: &str, s: &State, expected: &State, sends_min: u64) {
    assert!(
        s.sends >= sends_min,
        "state left by {failpoint}: {} sends, at least {sends_min} expected",
        s.sends
    );
    assert_eq!(
        &State {
            sends: 0,
            ..s.clone()
        },
        expected,
        "state left by {failpoint}"
    );
}

/// The state each failpoint leaves on its first hit when the pass creates the treasury's
/// lookup table first: that hit is the table's transaction, which holds no payout.
fn assert_table_state_at(failpoint: &str, s: &State) {
    let nothing_sent = State {
        created: PROVIDERS,
        ..State::default()
    };
    let (expected, sends_min) = match failpoint {
        "solana.after_sign:1" => (nothing_sent, 0),
        "solana.after_persist:1" | "solana.before_send:1" => (
            State {
                open: 1,
                ..nothing_sent
            },
            0,
        ),
        "solana.after_send:1" | "solana.before_confirm:1" => (
            State {
                open: 1,
                on_chain: 1,
                ..nothing_sent
            },
            1,
        ),
        "solana.after_confirm:1" => (
            State {
                landed: 1,
                on_chain: 1,
                ..nothing_sent
            },
            1,
        ),
        other => panic!("no expected state for failpoint {other}: add it"),
    };
    assert_state_is(failpoint, s, &expected, sends_min);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payer_killed_around_the_lookup_table_transaction_pays_each_provider_exactly_once() {
    if !crate::common::failpoints_or_skip(
        "the_payer_killed_around_the_lookup_table_transaction_pays_each_provider_exactly_once",
    ) {
        return;
    }
    let mut scenarios = 0;
    for name in failpoints::ALL
        .into_iter()
        .filter(|n| *n != failpoints::MID_APPLY)
    {
        for advance in [false, true] {
            let (_, _, state) = scenario(Crash::TableFailpoint(format!("{name}:1")), advance).await;
            println!("table {name}:1 left: {}", state.window());
            scenarios += 1;
        }
    }
    println!(
        "{scenarios} failpoint crashes around the table's transaction, each paid exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payer_killed_at_every_failpoint_pays_each_provider_exactly_once() {
    if !crate::common::failpoints_or_skip(
        "the_payer_killed_at_every_failpoint_pays_each_provider_exactly_once",
    ) {
        return;
    }
    let mut scenarios = 0;
    for name in failpoints::ALL {
        for hit in [1, 2] {
            for advance in [false, true] {
                let (_, _, state) =
                    scenario(Crash::Failpoint(format!("{name}:{hit}")), advance).await;
                println!("{name}:{hit} left: {}", state.window());
                scenarios += 1;
            }
        }
    }
    println!("{scenarios} failpoint crashes, each restarted until paid exactly once");
}

async fn random_kills(seed_offset: u64) {
    let seed = std::env::var("SETTLE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(DEFAULT_SEED)
        .wrapping_add(seed_offset);
    println!("random kills: seed {seed} (SETTLE_CRASH_SEED)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // The kill instant is drawn over the length of a whole pass, measured as we go.
    let mut pass = Duration::from_millis(400);
    let mut hits = 0;
    let mut windows: std::collections::BTreeMap<&str, usize> = Default::default();
    for i in 0..RANDOM_KILLS {
        let delay = Duration::from_millis(rng.gen_range(0..=pass.as_millis() as u64));
        let (hit, last, state) = scenario(Crash::KillAfter(delay), i % 2 == 1).await;
        if hit {
            hits += 1;
        }
        *windows.entry(state.window()).or_default() += 1;
        pass = (pass * 3 + last) / 4;
    }
    println!(
        "{RANDOM_KILLS} random SIGKILLs, {hits} of them while the payer ran; left: {windows:?}"
    );
    // The kills must land in the work, not before or after it, in a good share of trials,
    // and in more than one window of a payment.
    assert!(
        hits * 2 >= RANDOM_KILLS,
        "only {hits} of {RANDOM_KILLS} kills hit a running payer (seed {seed})"
    );
    let mid_work = windows
        .iter()
        .filter(|(w, _)| !matches!(**w, "nothing signed" | "all settled"))
        .map(|(_, n)| n)
        .sum::<usize>();
    assert!(
        mid_work * 4 >= RANDOM_KILLS,
        "only {mid_work} of {RANDOM_KILLS} kills left a payment part-way: {windows:?} (seed {seed})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payer_killed_at_random_instants_pays_each_provider_exactly_once() {
    random_kills(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payer_killed_at_more_random_instants_pays_each_provider_exactly_once() {
    random_kills(1).await;
}
