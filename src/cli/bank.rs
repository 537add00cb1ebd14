//! `settle bank …`: bank transfer batches (SPEC §6): generate the SEPA and NACHA files of
//! the created bank payouts, list and show batches, record their lifecycle (submitted,
//! settled), book returns, and regenerate a file byte for byte.
//!
//! The bank configuration is the `[bank]` section of the `--config` file (when given) with
//! `SETTLE_BANK__*` overrides; `--outbox` overrides the outbox directory.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::config::{BankConfig, Config};
use crate::domain::money::{format_cents, format_micro_usdc};
use crate::domain::time::format_ms;
use crate::ledger::{Ledger, LedgerError};
use crate::rails::bank::{self, BankBatch, BankError, Originator};
use crate::report::output::{Format, Rows};

/// Exit code of a command the ledger rejected, or of a batch with problems.
const EXIT_REJECTED: i32 = 2;

#[derive(Args, Debug)]
pub struct BankArgs {
    /// Outbox directory of the bank files (overrides `bank.outbox_dir`).
    #[arg(long)]
    pub outbox: Option<String>,
    #[command(subcommand)]
    pub cmd: BankCmd,
}

#[derive(Subcommand, Debug)]
pub enum BankCmd {
    /// Write one SEPA and one NACHA file of the created bank payouts and submit them
    /// (finishes an interrupted generation first).
    Generate,
    /// List the bank batches, oldest first.
    List,
    /// Show a batch and its payouts.
    Show { batch_id: String },
    /// Record that the batch's file was handed to the bank.
    Submitted { batch_id: String },
    /// Record that the bank executed the batch: its payouts are settled.
    Settled { batch_id: String },
    /// Book a bank return of one payout with its reason code (SEPA `AC04`, ACH `R03`, …).
    Return {
        #[arg(long)]
        payout: String,
        #[arg(long)]
        code: String,
    },
    /// Read the bank's answers (pain.002, camt.054, camt.053, NACHA returns and
    /// notifications of change) and book them: per file and per entry results.
    Import {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Per batch what the bank confirmed and what is still open after
    /// `bank.answer_due_business_days`; the entries that matched nothing or another amount.
    Reconcile,
    /// Answer the engine's batch files like a bank would (pain.002 + camt.054, or NACHA
    /// returns), deterministically from a seed.
    Simulate {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Directory the answers are written to.
        #[arg(long)]
        out: PathBuf,
        /// Per mille of SEPA payments rejected in the status report (0 to 1000).
        #[arg(long, default_value_t = 0)]
        reject_per_mille: u16,
        /// Per mille of payments returned after booking (0 to 1000).
        #[arg(long, default_value_t = 0)]
        return_per_mille: u16,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Rewrite a batch's file from the ledger (identical bytes, checked against the
    /// recorded SHA-256).
    Regenerate {
        batch_id: String,
        /// Write here instead of the outbox; `-` prints the file.
        #[arg(long)]
        out: Option<String>,
    },
}

/// The bank configuration: `--config` file, `SETTLE_*` environment, `--outbox`.
pub(crate) fn load_config(path: Option<&Path>, outbox: Option<&str>) -> anyhow::Result<BankConfig> {
    let mut config = Config::load(path, std::env::vars())
        .context("loading the configuration")?
        .bank;
    if let Some(dir) = outbox {
        config.outbox_dir = dir.to_owned();
    }
    Ok(config)
}

use super::cli_actor;

/// Prints a rejection on stderr and returns its exit code; other errors propagate.
fn rejected(err: BankError) -> anyhow::Result<i32> {
    match err {
        BankError::Ledger(LedgerError::Rejected(e)) => {
            eprintln!("rejected: {}: {}", e.code, e.message);
            Ok(EXIT_REJECTED)
        }
        other => Err(other.into()),
    }
}

fn batch_rows(batches: &[&BankBatch]) -> Rows {
    let mut rows = Rows::new(vec![
        "batch_id",
        "rail",
        "status",
        "payouts",
        "total",
        "currency",
        "file_name",
        "sha256",
        "generated_at",
        "updated_at",
    ]);
    for b in batches {
        rows.push(vec![
            json!(b.batch_id),
            json!(b.rail.as_str()),
            json!(b.status),
            json!(b.payout_ids.len()),
            json!(format_cents(b.total_cents)),
            json!(b.currency),
            json!(b.file_name),
            json!(b.sha256),
            json!(format_ms(b.generated_at_ms)),
            json!(format_ms(b.updated_at_ms)),
        ]);
    }
    rows
}

fn print_problems(problems: &[String]) -> i32 {
    for p in problems {
        eprintln!("warning: {p}");
    }
    if problems.is_empty() {
        0
    } else {
        EXIT_REJECTED
    }
}

/// Runs a `settle bank` subcommand; its exit code.
pub(crate) async fn bank_cmd(
    ledger: &Ledger,
    args: &BankArgs,
    config_path: Option<&Path>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let config = load_config(config_path, args.outbox.as_deref())?;
    let store = &ledger.store;
    match &args.cmd {
        BankCmd::Generate => generate(ledger, &config, format, out).await,
        BankCmd::List => {
            let all = bank::batches(store).await?;
            let refs: Vec<&BankBatch> = all.iter().collect();
            write!(out, "{}", batch_rows(&refs).render(format))?;
            Ok(0)
        }
        BankCmd::Show { batch_id } => show(ledger, batch_id, format, out).await,
        BankCmd::Submitted { batch_id } | BankCmd::Settled { batch_id } => {
            let settled = matches!(args.cmd, BankCmd::Settled { .. });
            lifecycle(ledger, batch_id, settled, format, out).await
        }
        BankCmd::Return { payout, code } => book_return(ledger, payout, code, format, out).await,
        BankCmd::Regenerate {
            batch_id,
            out: dest,
        } => regenerate(ledger, &config, batch_id, dest.as_deref(), format, out).await,
        BankCmd::Import { files } => {
            super::bank_answers::import(ledger, &config, config_path, files, format, out).await
        }
        BankCmd::Reconcile => {
            super::bank_answers::reconcile_cmd(ledger, &config, format, out).await
        }
        BankCmd::Simulate {
            files,
            out: dir,
            reject_per_mille,
            return_per_mille,
            seed,
        } => {
            let args = super::bank_answers::SimulateArgs {
                files,
                out_dir: dir,
                reject_per_mille: *reject_per_mille,
                return_per_mille: *return_per_mille,
                seed: *seed,
            };
            super::bank_answers::simulate_cmd(ledger, &config, &args, format, out).await
        }
    }
}

/// `settle bank generate`: writes and submits the files, lists them and the payouts that
/// failed as unbankable; exit code 2 when any batch has a problem.
async fn generate(
    ledger: &Ledger,
    config: &BankConfig,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    // `settle serve` refuses the example originator; here an operator is at the
    // keyboard, so it is a warning on stderr before any file is written.
    if let Err(e) = config.check_not_example() {
        eprintln!("warning: {e}");
    }
    let report = match bank::generate_batches(ledger, config, &cli_actor()).await {
        Ok(r) => r,
        Err(e) => return rejected(e),
    };
    let mut problems = Vec::new();
    let mut rows = Rows::new(vec![
        "batch_id",
        "rail",
        "new",
        "payouts",
        "submitted",
        "total",
        "currency",
        "path",
        "sha256",
    ]);
    for o in &report.batches {
        problems.extend(o.problems.iter().cloned());
        rows.push(vec![
            json!(o.batch.batch_id),
            json!(o.batch.rail.as_str()),
            json!(o.new),
            json!(o.batch.payouts),
            json!(o.submitted),
            json!(format_cents(o.batch.total_cents)),
            json!(o.batch.currency),
            json!(o.path.display().to_string()),
            json!(o.batch.sha256),
        ]);
    }
    for f in &report.failed {
        problems.push(format!("payout {} failed: {}", f.payout_id, f.reason));
    }
    match format {
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(
                &json!({"batches": rows.to_json(), "failed": report.failed})
            )?
        )?,
        _ => {
            write!(out, "{}", rows.render(format))?;
            if format == Format::Table {
                writeln!(
                    out,
                    "{} batches, {} payouts failed as unbankable",
                    report.batches.len(),
                    report.failed.len()
                )?;
            }
        }
    }
    Ok(print_problems(&problems))
}

/// `settle bank show`: a batch and its payouts.
async fn show(
    ledger: &Ledger,
    batch_id: &str,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let store = &ledger.store;
    let Some(b) = bank::batch(store, batch_id).await? else {
        eprintln!("rejected: unknown_bank_batch: no bank batch {batch_id}");
        return Ok(EXIT_REJECTED);
    };
    let payouts = match bank::batch_payouts(store, &b).await {
        Ok(p) => p,
        Err(e) => return rejected(e),
    };
    let mut rows = Rows::new(vec![
        "payout_id",
        "provider_id",
        "run",
        "status",
        "amount_usdc",
        "amount_eur",
        "end_to_end_id",
        "failure_reason",
    ]);
    for p in &payouts {
        rows.push(vec![
            json!(p.payout_id),
            json!(p.provider_id),
            json!(format!("{} {}", p.run_kind, p.run_key)),
            json!(p.status),
            json!(format_micro_usdc(p.amount_micro_usdc)),
            json!(p.amount_eur_cents.map(format_cents)),
            json!(p.end_to_end_id),
            json!(p.failure_reason),
        ]);
    }
    match format {
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({"batch": b, "payouts": rows.to_json()}))?
        )?,
        Format::Csv => write!(out, "{}", rows.render(format))?,
        Format::Table => {
            write!(out, "{}", batch_rows(&[&b]).render(format))?;
            writeln!(out)?;
            write!(out, "{}", rows.render(format))?;
        }
    }
    Ok(0)
}

/// `settle bank submitted` (`settled` false) or `settle bank settled`: records the step
/// and prints the batch with what changed.
async fn lifecycle(
    ledger: &Ledger,
    batch_id: &str,
    settled: bool,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let result = if settled {
        bank::mark_settled(ledger, batch_id, &cli_actor()).await
    } else {
        bank::mark_submitted(ledger, batch_id, &cli_actor()).await
    };
    let outcome = match result {
        Ok(o) => o,
        Err(e) => return rejected(e),
    };
    let mut rows = batch_rows(&[&outcome.batch]);
    rows.columns.extend(["result", "payouts_changed"]);
    if let Some(r) = rows.rows.first_mut() {
        r.push(json!(outcome.status_change));
        r.push(json!(outcome.payouts_changed));
    }
    write!(out, "{}", rows.render(format))?;
    Ok(print_problems(&outcome.problems))
}

/// `settle bank return`: books the return of one payout.
async fn book_return(
    ledger: &Ledger,
    payout: &str,
    code: &str,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let outcome = match bank::return_payout(ledger, payout, code, &cli_actor()).await {
        Ok(o) => o,
        Err(e) => return rejected(e),
    };
    let mut rows = Rows::new(vec![
        "payout_id",
        "provider_id",
        "batch_id",
        "code",
        "reason",
        "method_invalid",
        "result",
    ]);
    rows.push(vec![
        json!(outcome.payout_id),
        json!(outcome.provider_id),
        json!(outcome.batch_id),
        json!(outcome.code),
        json!(outcome.reason),
        json!(outcome.method_invalid),
        json!(outcome.status),
    ]);
    write!(out, "{}", rows.render(format))?;
    Ok(0)
}

/// `settle bank regenerate`: rewrites a batch's file to `dest` (`-` prints it), else to
/// the outbox.
async fn regenerate(
    ledger: &Ledger,
    config: &BankConfig,
    batch_id: &str,
    dest: Option<&str>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let originator = match Originator::parse(config) {
        Ok(o) => o,
        Err(e) => return rejected(e.into()),
    };
    let (b, file) = match bank::regenerate(ledger, &originator, batch_id).await {
        Ok(r) => r,
        Err(e) => return rejected(e),
    };
    let path = match dest {
        Some("-") => {
            write!(out, "{}", file.contents)?;
            return Ok(0);
        }
        Some(p) => PathBuf::from(p),
        None => match bank::outbox_path(config, &b) {
            Ok(p) => p,
            Err(e) => return rejected(e),
        },
    };
    bank::write_atomic(&path, file.contents.as_bytes())?;
    let mut rows = Rows::new(vec!["batch_id", "path", "sha256"]);
    rows.push(vec![
        json!(b.batch_id),
        json!(path.display().to_string()),
        json!(b.sha256),
    ]);
    write!(out, "{}", rows.render(format))?;
    Ok(0)
}
