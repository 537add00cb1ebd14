//! The commands that check the ledger or prove it to others: `verify`, `anchor`,
//! `statement` (SPEC §13) and `rebuild`, with their progress bars and reports.

use std::io::Write;

use serde_json::json;

use super::{Cli, Cmd, anchor, statement};
use crate::config::Config;
use crate::ledger::{Clock, Ledger, SystemClock};
use crate::report::output::{Format, Rows};

/// The commands that check the ledger or prove it to others: `verify`, `anchor`, `statement`
/// (SPEC §13) and `rebuild`.
pub(super) async fn integrity_cmds(
    ledger: &Ledger,
    cli: &Cli,
    config: &Config,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    match &cli.command {
        Cmd::Verify { anchors } => verify_cmd(ledger, cli, config, anchors.as_ref(), out).await,
        Cmd::Anchor(args) => anchor::anchor_cmd(ledger, cli, config, args, out).await,
        Cmd::Statement(cmd) => statement::statement_cmd(ledger, cli, config, cmd, out).await,
        Cmd::Rebuild => {
            let per_page = config.store.verify_streams_per_page;
            rebuild_cmd(ledger, cli.format, per_page, out).await
        }
        _ => unreachable!("called for the integrity commands only"),
    }
}

/// `settle verify`: checks the ledger (against an anchor log with `--anchors`, or when
/// `anchor.file` is set); exit code 1 when it finds a problem.
async fn verify_cmd(
    ledger: &Ledger,
    cli: &Cli,
    config: &Config,
    anchors: Option<&Option<std::path::PathBuf>>,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let log = anchor::log_to_check(cli, config, anchors)?;
    let total = ledger.store.event_count().await?;
    let bar = counter_bar("verify", total);
    let mut report = crate::verify::verify_anchored(
        &ledger.store,
        log.as_ref().map(|(anchors, _)| &anchors.heads),
        config.store.verify_streams_per_page,
        &|n| tick(&bar, n),
    )
    .await?;
    finish(bar);
    report
        .check_clock(
            &ledger.store,
            SystemClock.now_ms(),
            ledger.config.clock_skew_ms,
        )
        .await?;
    report.check_control(&ledger.store).await?;
    if let Some((anchors, key)) = &log {
        report
            .check_anchor_log(&ledger.store, anchors, key.as_deref(), SystemClock.now_ms())
            .await?;
    }
    print_report(&report, cli.format, out)?;
    Ok(if report.ok() { 0 } else { 1 })
}

/// `settle rebuild`: rewrites the projections from the events; exit code 1 on a problem.
async fn rebuild_cmd(
    ledger: &Ledger,
    format: Format,
    streams_per_page: usize,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let total = ledger.store.event_count().await?;
    let bar = counter_bar("rebuild", total);
    let report =
        crate::verify::rebuild(&ledger.store, streams_per_page, &|n| tick(&bar, n)).await?;
    finish(bar);
    print_report(&report, format, out)?;
    Ok(if report.ok() { 0 } else { 1 })
}

fn print_report(
    report: &crate::verify::VerifyReport,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(report)?)?,
        _ => {
            let mut rows = Rows::new(vec!["stream", "seq", "kind", "detail"]);
            for p in &report.problems {
                rows.push(vec![
                    json!(p.stream),
                    json!(p.seq),
                    json!(p.kind),
                    json!(p.detail),
                ]);
            }
            if report.ok() {
                let anchored = report.anchored_streams.map_or(String::new(), |n| {
                    format!("; every chain passes through its anchored head ({n} streams anchored)")
                });
                let anchored = match &report.anchor_log {
                    Some(log) => format!(
                        "{anchored}; {} anchors, {} events and {} s not anchored yet{}",
                        log.anchors,
                        log.unanchored_events,
                        log.unanchored_seconds.unwrap_or(0),
                        log.published_n
                            .map_or(String::new(), |n| format!(", anchor {n} published"))
                    ),
                    None => anchored,
                };
                let clock = report
                    .clock
                    .map_or(String::new(), |c| format!("; clock: {}", c.as_str()));
                writeln!(
                    out,
                    "ok: {} events in {} streams; chains intact, lines balanced, projections equal a fresh fold{anchored}{clock}",
                    report.events, report.streams
                )?;
            } else {
                write!(out, "{}", rows.render(format))?;
                writeln!(
                    out,
                    "FAILED: {} problems in {} events",
                    report.problems_total, report.events
                )?;
            }
            if !report.before_control.is_empty() {
                let listed: Vec<String> = report
                    .before_control
                    .iter()
                    .map(|b| format!("{} {}:{}", b.event_type, b.stream, b.seq))
                    .collect();
                writeln!(
                    out,
                    "before control: {} gated events were booked before the first operator \
                     (not provable by signature): {}",
                    report.before_control_total,
                    listed.join(", ")
                )?;
            }
        }
    }
    Ok(())
}

/// A progress bar over `total` events on stderr, when stderr is a terminal.
fn counter_bar(what: &str, total: i64) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total.max(0) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {pos}/{len} events ({per_sec}, eta {eta})",
        )
        .ok()?,
    );
    bar.set_message(what.to_owned());
    Some(bar)
}

fn tick(bar: &Option<indicatif::ProgressBar>, events: i64) {
    if let Some(b) = bar {
        b.set_position(events.max(0) as u64);
    }
}

fn finish(bar: Option<indicatif::ProgressBar>) {
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}
