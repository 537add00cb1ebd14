//! The inbox folder `settle serve` watches for the bank's answers (`bank.inbox_dir`, SPEC
//! §10), through the real binary on both stores: files dropped there are imported and moved
//! to `processed/` or `rejected/` beside their result; files still being written wait. And
//! `serve` killed while it imports (SIGKILL at random instants, and at the failpoint between
//! the booking and the move): after a restart, each payout's state is the one a single
//! import of the same files gives a ledger that never crashed, nothing is booked twice,
//! and each file lies in `processed/` exactly once.

use crate::bank_support::*;
use crate::common::Tables;
use crate::common::free_port;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use chrono::{Datelike, NaiveDate};
use rand::{Rng, SeedableRng};
use settle::config::ControlConfig;
use settle::domain::payout::PayoutStatus;
use settle::rails::bank::answers::{ImportContext, import_answer};
use settle::rails::bank::inbox::{INBOX_BEFORE_MOVE, PROCESSED_DIR, REJECTED_DIR};
use settle::rails::bank::{self, Originator};
use settle_bank::simulate::{SimulatedAnswers, SimulationConfig, simulate};

/// SEPA providers paid each month: enough that a random kill lands inside an import.
const PROVIDERS: usize = 40;
/// Trials of the kill test: one bank batch, and its answers, each.
const TRIALS: usize = 20;
/// Of them, the first ones are killed at the failpoint after booking, before the move.
const FAILPOINT_TRIALS: usize = 4;
/// How often the inbox is looked at by the served process.
const INBOX_INTERVAL_MS: u64 = 20;
/// The random kills' seed unless `SETTLE_CRASH_SEED` sets one (printed either way).
const DEFAULT_SEED: u64 = 20_261_206;
const WAIT_MAX: Duration = Duration::from_secs(60);

fn pid(i: usize) -> String {
    format!("eu_{i:03}")
}

/// The month `n` months after December 2026, as `YYYY-MM`.
fn month(n: usize) -> NaiveDate {
    let m0 = 2026 * 12 + 11 + n as i32;
    NaiveDate::from_ymd_opt(m0 / 12, (m0 % 12) as u32 + 1, 1).unwrap()
}

/// A batch file written, and its batch.
struct Sent {
    path: PathBuf,
    batch_id: String,
}

/// A world of [`PROVIDERS`] SEPA providers paid by `months` monthly runs, each run's batch
/// generated; the batch files, in month order.
async fn paid_world(months: usize) -> (World, Vec<Sent>) {
    let w = World::new("2026-11-02T00:00:00Z").await;
    for i in 0..PROVIDERS {
        let method = if i % 2 == 0 { SEPA_DE } else { SEPA_FR };
        w.provider(&pid(i), method).await;
    }
    let mut files = Vec::new();
    for n in 0..months {
        let first = month(n);
        let before = first.pred_opt().unwrap();
        let earned = before.with_day(10).unwrap();
        w.at(&format!("{before}T00:00:00Z"));
        for i in 0..PROVIDERS {
            let gross = 30_000_000 + 1_000_000 * i as i64 + n as i64;
            w.earn(&pid(i), gross, &format!("{earned}T01:00:00Z")).await;
        }
        // The run's date: the first business day (a holiday on the 1st moves it); the FX
        // rate fresh for it (SEPA payouts are paid in EUR).
        let run_day =
            settle_calendar::monthly_run_date(&w.calendar, first.year(), first.month()).unwrap();
        w.at(&format!("{run_day}T00:01:00Z"));
        w.fx("0.915").await;
        w.at(&format!("{run_day}T00:05:00Z"));
        w.monthly(&first.format("%Y-%m").to_string()).await;
        w.at(&format!("{run_day}T06:30:00Z"));
        let report = bank::generate_batches(&w.ledger, &w.bank, &w.actor())
            .await
            .unwrap();
        assert_eq!(report.batches.len(), 1, "one SEPA batch a month");
        let b = &report.batches[0];
        files.push(Sent {
            path: b.path.clone(),
            batch_id: b.batch.batch_id.clone(),
        });
    }
    (w, files)
}

/// The bank's answers to one batch file: its status report and its notification, a few
/// rejected and a few returned.
fn answers(batch_file: &Path, seed: u64) -> Vec<(String, String)> {
    let day = NaiveDate::from_ymd_opt(2028, 9, 1).unwrap();
    let mut config = SimulationConfig::new(seed, day, day.and_hms_opt(9, 0, 0).unwrap());
    config.rejections_per_mille = 100;
    config.returns_per_mille = 150;
    let sent = std::fs::read(batch_file).unwrap();
    let stem = batch_file
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    match simulate(&sent, &config).unwrap() {
        SimulatedAnswers::Sepa {
            status_report,
            notification,
        } => vec![
            (format!("{stem}.1.pain002.xml"), status_report),
            (format!("{stem}.2.camt054.xml"), notification),
        ],
        SimulatedAnswers::Nacha { .. } => panic!("a SEPA batch"),
    }
}

/// Writes `name` into the inbox as a bank's transfer would: under a `.tmp` name first
/// (which the inbox leaves alone), then renamed.
fn drop_file(inbox: &Path, name: &str, contents: &str) {
    let tmp = inbox.join(format!("{name}.tmp"));
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, inbox.join(name)).unwrap();
}

/// A `settle serve` process watching the inbox, with its configuration.
struct Served {
    child: Child,
    log: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Server {
    url: String,
    now: String,
    dir: tempfile::TempDir,
    inbox: PathBuf,
}

impl Server {
    fn new(w: &World, now: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let inbox = dir.path().join("inbox");
        std::fs::create_dir_all(&inbox).unwrap();
        let config = format!(
            "[http]\nbind = \"127.0.0.1:{}\"\nmetrics_bind = \"127.0.0.1:{}\"\n\n[bank]\noutbox_dir = {:?}\ninbox_dir = {:?}\ninbox_interval_ms = {INBOX_INTERVAL_MS}\nallow_example_originator = true\n",
            free_port(),
            free_port(),
            w.bank.outbox_dir,
            inbox.display().to_string(),
        );
        std::fs::write(dir.path().join("settle.toml"), config).unwrap();
        Server {
            url: w.db.url.clone(),
            now: now.to_owned(),
            dir,
            inbox,
        }
    }

    /// Starts `settle serve --no-scheduler`, with `failpoint` armed if given.
    fn start(&self, failpoint: Option<&str>) -> Served {
        let log = self.dir.path().join("serve.log");
        let mut cmd = crate::common::settle_command();
        cmd.args(["--database", &self.url, "--now", &self.now, "--config"])
            .arg(self.dir.path().join("settle.toml"))
            .args(["serve", "--no-scheduler"])
            .current_dir(self.dir.path())
            .env("RUST_LOG", "warn")
            .env_remove(settle::failpoint::FAILPOINT_ENV)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(name) = failpoint {
            cmd.env(settle::failpoint::FAILPOINT_ENV, name);
        }
        Served {
            child: cmd.spawn().expect("start settle serve"),
            log,
        }
    }

    fn done(&self, sub: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.inbox.join(sub))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Waits until every name of `names` lies in `processed/` or `rejected/` with its
    /// result (or `served` exits, as a failpoint makes it).
    async fn wait_taken(&self, served: &mut Served, names: &[&str]) -> bool {
        let deadline = Instant::now() + WAIT_MAX;
        loop {
            let taken = [PROCESSED_DIR, REJECTED_DIR].map(|s| self.done(s)).concat();
            if names.iter().all(|n| {
                taken.contains(&n.to_string()) && taken.contains(&format!("{n}.result.json"))
            }) {
                return true;
            }
            if served.child.try_wait().unwrap().is_some() {
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "the inbox did not take {names:?}: {}",
                std::fs::read_to_string(&served.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn import_in_process(w: &World, contents: &str) {
    let originator = Originator::parse(&w.bank).unwrap();
    let control = ControlConfig::default();
    let cx = ImportContext {
        originator: &originator,
        control: &control,
        signer: None,
        payouts_per_tx: w.bank.answer_payouts_per_tx,
    };
    import_answer(&w.ledger, contents.as_bytes().to_vec(), &cx, &w.actor())
        .await
        .unwrap();
}

/// The status and the provider's payable balance of every payout of `batch`.
async fn states(w: &World, batch: &Sent) -> Vec<(String, PayoutStatus, i64)> {
    let batch_id = batch.batch_id.as_str();
    let mut out = Vec::new();
    for i in 0..PROVIDERS {
        for p in w.payouts_of(&pid(i)).await {
            if p.reference.as_deref() == Some(batch_id) {
                out.push((p.payout_id.to_string(), p.status, w.payable(&pid(i)).await));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Each payout's answer events at most once: the crash never booked one twice.
async fn assert_booked_once(w: &World) {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT event_type, COUNT(*) FROM events WHERE event_type IN ('payout.settled', 'payout.failed', 'payout.returned', 'bank_answer.imported') GROUP BY event_type, stream, idem_key HAVING COUNT(*) > 1",
    )
    .fetch_all(w.ledger.store.pool())
    .await
    .unwrap();
    assert!(rows.is_empty(), "booked twice: {rows:?}");
}

#[tokio::test]
async fn the_inbox_imports_new_files_and_moves_each_with_its_result() {
    let (w, batches) = paid_world(1).await;
    let server = Server::new(&w, "2028-09-01T10:00:00Z");
    let mut served = server.start(None);
    let files = answers(&batches[0].path, 1);
    drop_file(
        &server.inbox,
        "garbage.xml",
        "<Document>not a bank answer</Document>",
    );
    std::fs::write(server.inbox.join("half-written.xml.tmp"), &files[0].1).unwrap();
    for (name, contents) in &files {
        drop_file(&server.inbox, name, contents);
    }
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        server
            .wait_taken(&mut served, &[names.as_slice(), &["garbage.xml"]].concat())
            .await,
        "serve exited: {}",
        std::fs::read_to_string(&served.log).unwrap_or_default()
    );
    assert_eq!(
        server.done(REJECTED_DIR),
        vec!["garbage.xml", "garbage.xml.result.json"]
    );
    let refused: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            server
                .inbox
                .join(REJECTED_DIR)
                .join("garbage.xml.result.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(
        refused["error"]["code"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{refused}"
    );
    let result: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            server
                .inbox
                .join(PROCESSED_DIR)
                .join(format!("{}.result.json", names[1])),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(result["report"]["kind"], "camt.054", "{result}");
    assert_eq!(result["report"]["status"], "accepted", "{result}");
    assert!(
        server.inbox.join("half-written.xml.tmp").exists(),
        "a file still being written waits"
    );
    let settled = states(&w, &batches[0])
        .await
        .iter()
        .filter(|s| s.1 == PayoutStatus::Settled)
        .count();
    assert!(settled > PROVIDERS / 2, "{settled} settled");
    drop(served);
    w.check().await;
}

#[tokio::test]
async fn serve_killed_while_it_imports_books_each_answer_once() {
    if !crate::common::failpoints_or_skip("serve_killed_while_it_imports_books_each_answer_once") {
        return;
    }
    let seed = std::env::var("SETTLE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    eprintln!("inbox kill seed {seed} (SETTLE_CRASH_SEED)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (w, batches) = paid_world(TRIALS).await;
    let (reference, reference_batches) = paid_world(TRIALS).await;
    let server = Server::new(&w, "2028-09-01T10:00:00Z");
    let mut killed_inside = 0;
    for trial in 0..TRIALS {
        let files = answers(&batches[trial].path, trial as u64);
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        // The reference books the same answers in-process, never crashing; how long that
        // takes here is the span the random kills land in.
        let started = Instant::now();
        for (_, contents) in &files {
            import_in_process(&reference, contents).await;
        }
        let took = started.elapsed() + Duration::from_millis(2 * INBOX_INTERVAL_MS);
        let failpoint = (trial < FAILPOINT_TRIALS).then(|| {
            // The n-th move of this process: the status report's, or the notification's.
            format!("{INBOX_BEFORE_MOVE}:{}", 1 + trial % 2)
        });
        let mut served = server.start(failpoint.as_deref());
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = server.done(PROCESSED_DIR).len();
        for (name, contents) in &files {
            drop_file(&server.inbox, name, contents);
        }
        if failpoint.is_some() {
            let status = served.child.wait().unwrap();
            assert!(!status.success(), "the failpoint aborts the process");
            killed_inside += 1;
        } else {
            tokio::time::sleep(took.mul_f64(rng.gen_range(0.0..1.2))).await;
            served.child.kill().unwrap();
            served.child.wait().unwrap();
            killed_inside += usize::from(server.done(PROCESSED_DIR).len() < before + 4);
        }
        // Restarted, the inbox takes what is left; nothing armed.
        let mut again = server.start(None);
        assert!(
            server.wait_taken(&mut again, &names).await,
            "trial {trial}: the restarted serve exited: {}",
            std::fs::read_to_string(&again.log).unwrap_or_default()
        );
        drop(again);
        assert_eq!(
            states(&w, &batches[trial]).await,
            states(&reference, &reference_batches[trial]).await,
            "trial {trial} (seed {seed})"
        );
        assert_booked_once(&w).await;
        assert_eq!(
            server.done("."),
            vec![PROCESSED_DIR],
            "the inbox is empty after trial {trial}"
        );
    }
    let processed = server.done(PROCESSED_DIR);
    assert_eq!(
        processed.len(),
        TRIALS * 2 * 2,
        "each file and its result exactly once: {processed:?}"
    );
    assert!(
        processed
            .iter()
            .all(|n| n.ends_with(".xml") || n.ends_with(".xml.result.json")),
        "no second copy (NAME.1): {processed:?}"
    );
    eprintln!("{killed_inside} of {TRIALS} kills landed before the files were moved");
    w.check().await;
}
