//! `settle bank import`, `bank reconcile` and `bank simulate`: the bank's answers read back
//! and booked, the reconciliation of every batch, and the local bank simulator answering
//! the engine's files (SPEC §10).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::DateTime;
use serde_json::json;
use settle_bank::simulate::SimulationConfig;

use super::cli_actor;
use crate::config::BankConfig;
use crate::domain::money::format_cents;
use crate::ledger::{Ledger, LedgerError};
use crate::rails::bank::answers::{ImportContext, ImportReport, import_answer};
use crate::rails::bank::inbox::read_limited;
use crate::rails::bank::reconcile::{Reconciliation, reconcile};
use crate::rails::bank::{BankError, Originator};
use crate::report::output::{Format, Rows};

/// Exit code when a file was refused or an entry booked nothing.
const EXIT_PROBLEMS: i32 = 2;

/// The result of one file of `bank import`.
#[derive(serde::Serialize)]
struct FileResult {
    file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<ImportReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<serde_json::Value>,
}

/// `settle bank import FILE…`: each file read and booked; per file and per entry results.
/// Exit code 2 when a file was refused or an entry booked nothing.
pub async fn import(
    ledger: &Ledger,
    config: &BankConfig,
    config_path: Option<&Path>,
    files: &[PathBuf],
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    // The ledger's control policy, not this process's (`cli::config_of`).
    let control = super::config_of(config_path)
        .context("loading the configuration")?
        .control;
    let originator = Originator::parse(config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let signer = super::cli_signer(ledger).await?;
    let cx = ImportContext {
        originator: &originator,
        control: &control,
        signer: signer.as_ref().map(|s| s as &dyn crate::control::Sign),
        payouts_per_tx: config.answer_payouts_per_tx,
    };
    let mut results = Vec::new();
    let mut problems = false;
    for file in files {
        let outcome = match read_limited(file, config.answer_file_bytes_max) {
            Ok(bytes) => import_answer(ledger, bytes, &cx, &cli_actor()).await,
            Err(e) => Err(e),
        };
        let name = file.display().to_string();
        match outcome {
            Ok(report) => {
                problems |= report.exceptions > 0;
                results.push(FileResult {
                    file: name,
                    report: Some(report),
                    error: None,
                });
            }
            Err(BankError::Ledger(LedgerError::Rejected(e))) => {
                problems = true;
                results.push(FileResult {
                    file: name,
                    report: None,
                    error: Some(json!({"code": e.code, "message": e.message})),
                });
            }
            Err(e @ BankError::Io { .. }) => {
                problems = true;
                results.push(FileResult {
                    file: name,
                    report: None,
                    error: Some(json!({"code": e.code(), "message": e.to_string()})),
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
    print_import(&results, format, out)?;
    Ok(if problems { EXIT_PROBLEMS } else { 0 })
}

fn print_import(
    results: &[FileResult],
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({"files": results}))?
        )?;
        return Ok(());
    }
    let mut rows = Rows::new(vec![
        "file",
        "kind",
        "message_id",
        "status",
        "entry",
        "reference",
        "payout_id",
        "outcome",
        "code",
        "detail",
    ]);
    for f in results {
        match (&f.report, &f.error) {
            (Some(r), _) => {
                for e in &r.results {
                    rows.push(vec![
                        json!(f.file),
                        json!(r.kind),
                        json!(r.message_id),
                        json!(r.status),
                        json!(e.entry),
                        json!(e.reference),
                        json!(e.payout_id),
                        json!(e.outcome),
                        json!(e.code),
                        json!(e.detail),
                    ]);
                }
            }
            (None, err) => rows.push(vec![
                json!(f.file),
                json!(null),
                json!(null),
                json!("refused"),
                json!(null),
                json!(null),
                json!(null),
                json!(err.as_ref().and_then(|e| e.get("code")).cloned()),
                json!(null),
                json!(err.as_ref().and_then(|e| e.get("message")).cloned()),
            ]),
        }
    }
    write!(out, "{}", rows.render(format))?;
    if format == Format::Table {
        for f in results {
            if let Some(r) = &f.report {
                writeln!(
                    out,
                    "{}: {} {} {}: {} entries, {} settled, {} rejected, {} returned, {} changes proposed, {} duplicates, {} exceptions",
                    f.file,
                    r.kind,
                    r.message_id,
                    r.status,
                    r.entries,
                    r.settled,
                    r.rejected,
                    r.returned,
                    r.changes_proposed,
                    r.duplicates,
                    r.exceptions
                )?;
            }
        }
    }
    Ok(())
}

/// `settle bank reconcile`: per batch what the bank confirmed and what is still open, then
/// the entries that booked nothing. Exit code 2 when anything is overdue or unmatched.
pub(crate) async fn reconcile_cmd(
    ledger: &Ledger,
    config: &BankConfig,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let r = match reconcile(ledger, config).await {
        Ok(r) => r,
        Err(BankError::Ledger(LedgerError::Rejected(e))) => {
            eprintln!("rejected: {}: {}", e.code, e.message);
            return Ok(EXIT_PROBLEMS);
        }
        Err(e) => return Err(e.into()),
    };
    if format == Format::Json {
        writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
    } else {
        write!(out, "{}", reconciliation_rows(&r).render(format))?;
        if format == Format::Table {
            writeln!(
                out,
                "as of {}: {} batches, {} payouts overdue (answer due after {} business days), {} unmatched entries, {} amount differences, {} changes to request",
                r.as_of,
                r.batches.len(),
                r.overdue_payouts,
                r.answer_due_business_days,
                r.unmatched.len(),
                r.amount_differences.len(),
                r.changes_unrequested.len()
            )?;
        }
    }
    Ok(if r.is_clean() { 0 } else { EXIT_PROBLEMS })
}

/// The reconciliation as rows: a row per batch, then a row per exception.
pub(crate) fn reconciliation_rows(r: &Reconciliation) -> Rows {
    let mut rows = Rows::new(vec![
        "item",
        "batch_id",
        "rail",
        "currency",
        "payouts",
        "total",
        "settled",
        "returned",
        "rejected",
        "open",
        "answer_due",
        "overdue",
        "reference",
        "amount",
        "expected",
        "detail",
    ]);
    for b in &r.batches {
        rows.push(vec![
            json!("batch"),
            json!(b.batch_id),
            json!(b.rail.as_str()),
            json!(b.currency),
            json!(b.payouts),
            json!(format_cents(b.total_cents)),
            json!(b.settled),
            json!(b.returned),
            json!(b.rejected),
            json!(b.open),
            json!(b.answer_due),
            json!(b.overdue),
            json!(null),
            json!(null),
            json!(null),
            json!(null),
        ]);
    }
    for e in r.exceptions() {
        rows.push(vec![
            json!(e.problem),
            json!(e.batch_id),
            json!(null),
            json!(e.currency),
            json!(null),
            json!(null),
            json!(null),
            json!(null),
            json!(null),
            json!(null),
            json!(null),
            json!(null),
            json!(e.reference),
            json!(format_cents(e.amount_cents)),
            json!(e.expected_cents.map(format_cents)),
            json!(e.detail),
        ]);
    }
    rows
}

/// A per mille `0..=1000`; `invalid_share` otherwise.
fn per_mille(value: u16, what: &str) -> anyhow::Result<u16> {
    anyhow::ensure!(
        value <= 1000,
        "invalid_share: --{what} must be between 0 and 1000, got {value}"
    );
    Ok(value)
}

/// The options of `bank simulate`.
pub struct SimulateArgs<'a> {
    pub files: &'a [PathBuf],
    pub out_dir: &'a Path,
    /// Per mille of SEPA payments rejected (0 to 1000).
    pub reject_per_mille: u16,
    /// Per mille of payments returned (0 to 1000).
    pub return_per_mille: u16,
    pub seed: u64,
}

/// `settle bank simulate BATCH_FILE… --out DIR`: the local bank's answers to the engine's
/// files, written as `NAME.pain002.xml` and `NAME.camt054.xml` (SEPA) or
/// `NAME.returns.ach` (NACHA), dated by the ledger's clock.
pub(crate) async fn simulate_cmd(
    ledger: &Ledger,
    config: &BankConfig,
    args: &SimulateArgs<'_>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let now = DateTime::from_timestamp_millis(ledger.now_ms())
        .map(|t| t.naive_utc())
        .unwrap_or_default();
    let mut sim = SimulationConfig::new(args.seed, now.date(), now);
    sim.rejections_per_mille = per_mille(args.reject_per_mille, "reject-per-mille")?;
    sim.returns_per_mille = per_mille(args.return_per_mille, "return-per-mille")?;
    let written =
        crate::rails::bank::inbox::simulate_files(config, args.files, args.out_dir, &sim)?;
    let mut rows = Rows::new(vec!["batch_file", "answer_file"]);
    for (from, to) in &written {
        rows.push(vec![json!(from), json!(to)]);
    }
    write!(out, "{}", rows.render(format))?;
    Ok(0)
}
