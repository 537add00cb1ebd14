//! `settle run …`, `settle payout …` and `settle calendar …`: payout runs by hand, the
//! admin decisions on held payouts, and the run calendar.

use std::io::Write;

use anyhow::Context;
use clap::Subcommand;
use serde_json::json;
use settle_calendar::{Calendar, RunKey};

use crate::config::RunConfig;
use crate::domain::money::{format_cents, format_micro_usdc};
use crate::domain::time::format_ms;
use crate::ledger::runs::{self, RunReport};
use crate::ledger::{Ledger, LedgerError};
use crate::report::output::{Format, Rows};

use super::EXIT_REJECTED;

#[derive(Subcommand, Debug)]
pub enum RunCmd {
    /// Run (or finish) the weekly payout run of a Monday.
    Weekly {
        /// The run's Monday, YYYY-MM-DD (its cutoff is that day 00:00 UTC).
        #[arg(long)]
        date: String,
    },
    /// Run (or finish) the monthly payout run of a month.
    Monthly {
        /// The month, YYYY-MM (its cutoff is the 1st 00:00 UTC).
        #[arg(long)]
        month: String,
    },
    /// Show a run: every candidate with its decision, and the totals.
    Show {
        /// weekly or monthly.
        #[arg(long)]
        kind: String,
        /// The run key: YYYY-MM-DD (weekly) or YYYY-MM (monthly).
        #[arg(long)]
        key: String,
    },
    /// List the completed runs, newest first.
    List {
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
}

#[derive(Subcommand, Debug)]
pub enum PayoutCmd {
    /// Release a held payout (it goes to its rail).
    Release { payout_id: String },
    /// Cancel a held payout (its amount goes back to payable).
    Cancel {
        payout_id: String,
        #[arg(long)]
        reason: String,
    },
    /// Show one payout.
    Show { payout_id: String },
}

#[derive(Subcommand, Debug)]
pub enum CalendarCmd {
    /// The next payout runs from now (or --now), in execution order.
    NextRuns {
        #[arg(long, default_value_t = 10)]
        count: usize,
    },
}

use super::cli_actor;
use crate::control::Submitted;

use super::rejected;

/// `settle run …`: the run rules come from the `[runs]` section of `--config` and the
/// `SETTLE_RUNS__*` environment (defaults otherwise).
pub async fn run_cmd(
    ledger: &Ledger,
    cmd: &RunCmd,
    config_path: Option<&std::path::Path>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let calendar = Calendar::platform_default();
    let config: RunConfig = super::config_of(config_path)?.runs;
    let key = match cmd {
        RunCmd::Weekly { date } => runs::weekly_key(date),
        RunCmd::Monthly { month } => runs::monthly_key(month),
        RunCmd::Show { kind, key } => RunKey::parse(kind, key).map_err(|e| {
            LedgerError::Rejected(crate::domain::DomainError::new(e.code(), e.to_string()))
        }),
        RunCmd::List { limit } => {
            let list = runs::completed_runs(&ledger.store, *limit).await?;
            let mut rows = Rows::new(vec![
                "run_kind",
                "run_key",
                "cutoff",
                "candidates",
                "paid",
                "paid_usdc",
                "held",
                "held_usdc",
                "completed_at",
            ]);
            for r in list {
                let t = |d: &str| r.totals.get(d).copied().unwrap_or((0, 0));
                rows.push(vec![
                    json!(r.run_kind),
                    json!(r.run_key),
                    json!(format_ms(r.cutoff_ms)),
                    json!(r.candidates),
                    json!(t("paid").0),
                    json!(format_micro_usdc(t("paid").1)),
                    json!(t("held").0),
                    json!(format_micro_usdc(t("held").1)),
                    json!(format_ms(r.completed_at_ms)),
                ]);
            }
            write!(out, "{}", rows.render(format))?;
            return Ok(0);
        }
    };
    let key = match key {
        Ok(k) => k,
        Err(e) => return rejected(e),
    };
    let report = match cmd {
        RunCmd::Show { .. } => match runs::run_report(&ledger.store, &calendar, key).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                eprintln!("rejected: unknown_run: no {key} run on the ledger");
                return Ok(EXIT_REJECTED);
            }
            Err(e) => return rejected(e),
        },
        _ => match ledger
            .run_payouts(key, &calendar, &config, &cli_actor())
            .await
        {
            Ok(r) => r,
            Err(e) => return rejected(e),
        },
    };
    print_report(&report, format, out)?;
    Ok(0)
}

/// Renders a run report: JSON (the whole report, money as decimal strings), CSV (one row
/// per candidate) or a table with the totals.
pub(crate) fn print_report(
    report: &RunReport,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut rows = Rows::new(vec![
        "provider_id",
        "decision",
        "available_usdc",
        "amount_usdc",
        "payout_id",
    ]);
    for c in &report.candidates {
        rows.push(vec![
            json!(c.provider_id),
            json!(c.decision),
            json!(format_micro_usdc(c.available_micro_usdc)),
            json!(format_micro_usdc(c.amount_micro_usdc)),
            json!(c.payout_id),
        ]);
    }
    let totals: serde_json::Map<String, serde_json::Value> = report
        .totals
        .iter()
        .map(|(d, t)| {
            (
                d.clone(),
                json!({"count": t.count, "amount_usdc": format_micro_usdc(t.amount_micro_usdc)}),
            )
        })
        .collect();
    match format {
        Format::Json => {
            let doc = json!({
                "run_kind": report.run_kind,
                "run_key": report.run_key,
                "cutoff": format_ms(report.cutoff_ms),
                "run_date": report.run_date,
                "completed": report.completed,
                "completed_at": report.completed_at_ms.map(format_ms),
                "candidates": rows.to_json(),
                "totals": totals,
                "payouts": report.payouts,
                "payouts_usdc": format_micro_usdc(report.payouts_micro_usdc),
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        }
        Format::Csv => write!(out, "{}", rows.render(format))?,
        Format::Table => {
            writeln!(
                out,
                "{} run {}: cutoff {}, run date {}, {}",
                report.run_kind,
                report.run_key,
                format_ms(report.cutoff_ms),
                report.run_date,
                if report.completed {
                    "completed"
                } else {
                    "in progress"
                }
            )?;
            write!(out, "{}", rows.render(format))?;
            let mut t = Rows::new(vec!["decision", "count", "amount_usdc"]);
            for (d, total) in &report.totals {
                t.push(vec![
                    json!(d),
                    json!(total.count),
                    json!(format_micro_usdc(total.amount_micro_usdc)),
                ]);
            }
            writeln!(out)?;
            write!(out, "{}", t.render(format))?;
            writeln!(
                out,
                "{} candidates, {} payouts totalling {} USDC",
                report.candidates.len(),
                report.payouts,
                format_micro_usdc(report.payouts_micro_usdc)
            )?;
        }
    }
    Ok(())
}

pub(crate) async fn payout_cmd(
    ledger: &Ledger,
    cmd: &PayoutCmd,
    config_path: Option<&std::path::Path>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let (payout_id, result) = match cmd {
        PayoutCmd::Release { payout_id } => {
            let config = super::config_of(config_path)?;
            let signer = super::cli_signer(ledger).await?;
            let submitted = crate::control::submit_release(
                ledger,
                &config.control,
                &config.runs,
                payout_id,
                &cli_actor(),
                signer.as_ref().map(|s| s as &dyn crate::control::Sign),
            )
            .await;
            (
                payout_id,
                submitted.map(|s| match s {
                    Submitted::Applied(a) => a.as_str().to_owned(),
                    Submitted::Pending(r) => format!("pending_approval {}", r.approval_id),
                }),
            )
        }
        PayoutCmd::Cancel { payout_id, reason } => (
            payout_id,
            ledger
                .cancel_payout(payout_id, reason, &cli_actor())
                .await
                .map(|a| a.as_str().to_owned()),
        ),
        PayoutCmd::Show { payout_id } => (payout_id, Ok(String::new())),
    };
    let status = match result {
        Ok(status) => status,
        Err(e) => return rejected(e),
    };
    let Some(p) = crate::ledger::payouts::payout(&ledger.store, payout_id).await? else {
        eprintln!("rejected: unknown_payout: no payout {payout_id}");
        return Ok(EXIT_REJECTED);
    };
    let mut rows = Rows::new(vec![
        "payout_id",
        "provider_id",
        "run",
        "rail",
        "amount_usdc",
        "amount_eur",
        "status",
        "hold_reason",
        "failure_reason",
        "reference",
        "result",
    ]);
    rows.push(vec![
        json!(p.payout_id),
        json!(p.provider_id),
        json!(format!("{} {}", p.run_kind, p.run_key)),
        json!(p.rail.as_str()),
        json!(format_micro_usdc(p.amount_micro_usdc)),
        json!(p.amount_eur_cents.map(format_cents)),
        json!(p.status),
        json!(p.hold_reason),
        json!(p.failure_reason),
        json!(p.reference),
        json!(status),
    ]);
    write!(out, "{}", rows.render(format))?;
    Ok(0)
}

pub(crate) async fn calendar_cmd(
    ledger: &Ledger,
    cmd: &CalendarCmd,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let calendar = Calendar::platform_default();
    match cmd {
        CalendarCmd::NextRuns { count } => {
            let now = chrono::DateTime::from_timestamp_millis(ledger.now_ms())
                .context("the clock is out of range")?
                .naive_utc();
            let next = settle_calendar::next_runs(&calendar, now, *count)
                .map_err(|e| anyhow::anyhow!("{}: {e}", e.code()))?;
            let mut rows = Rows::new(vec!["run_date", "run_kind", "run_key", "cutoff"]);
            for r in next {
                rows.push(vec![
                    json!(r.run_date.format("%Y-%m-%d").to_string()),
                    json!(r.key.kind()),
                    json!(r.key.key_string()),
                    json!(format_ms(runs::cutoff_ms(&r.key)?)),
                ]);
            }
            write!(out, "{}", rows.render(format))?;
            Ok(0)
        }
    }
}
