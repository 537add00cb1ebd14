//! `settle statement show` (from the ledger) and `settle statement verify` (offline: the
//! statement and a public root, no database), SPEC §13.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Subcommand;

use super::Cli;
use crate::config::Config;
use crate::ledger::Ledger;
use crate::report::output::Format;
use crate::statement::check::Statement;
use crate::statement::public::Public;
use crate::statement::{Subject, build};

#[derive(Subcommand, Debug)]
pub enum StatementCmd {
    /// Write a provider's statement for a payout (`--payout`) or the events booked in a
    /// window (`--from`, `--to`: RFC 3339 or YYYY-MM-DD), proven against the anchor log:
    /// JSON, or the page with `--html`.
    Show {
        #[arg(long)]
        provider: String,
        #[arg(long)]
        payout: Option<String>,
        #[arg(long)]
        from: Option<String>,
        #[arg(long)]
        to: Option<String>,
        /// Write to this file instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long)]
        html: bool,
        /// The anchor log (default: `anchor.file`, else beside the database).
        #[arg(long)]
        anchors: Option<PathBuf>,
    },
    /// Check a statement offline: its events chain to an anchored head, its totals are
    /// their lines' sums, the anchor's signature and links hold, its payment commits to
    /// it, and it leads to the public root: `--root` (given by hand) or the one the
    /// publication transaction carries on the chain at `--rpc`.
    Verify {
        file: PathBuf,
        /// The published root (64 hex digits), as read from an explorer.
        #[arg(long)]
        root: Option<String>,
        /// A Solana JSON-RPC endpoint to read the publication (and payment) transactions.
        #[arg(long)]
        rpc: Option<String>,
        /// The anchor key the platform publishes with (base58): refused when another
        /// signed.
        #[arg(long)]
        key: Option<String>,
    },
}

/// `settle statement show`.
pub(crate) async fn statement_cmd(
    ledger: &Ledger,
    cli: &Cli,
    config: &Config,
    cmd: &StatementCmd,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let StatementCmd::Show {
        provider,
        payout,
        from,
        to,
        out: file,
        html,
        anchors,
    } = cmd
    else {
        bail!("statement verify needs no database");
    };
    let subject = match (payout, from, to) {
        (Some(p), None, None) => Subject::Payout(p.clone()),
        (None, Some(from), Some(to)) => Subject::Period {
            from_ms: day_or_time(from)?,
            to_ms: day_or_time(to)?,
        },
        _ => bail!("invalid_arguments: give --payout, or --from and --to"),
    };
    let log = super::anchor::log_path(cli, config, anchors.as_deref());
    let statement = match build(&ledger.store, &log, provider, &subject).await {
        Ok(s) => s,
        Err(e) => bail!("{}: {e}", e.code()),
    };
    let text = if *html {
        crate::report::statement::page(
            &statement,
            "statement.json",
            config.anchor.rpc(&config.solana),
        )
    } else {
        serde_json::to_string_pretty(&statement)? + "\n"
    };
    match file {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?;
            writeln!(
                out,
                "wrote the statement of {provider} ({} events) to {}; a provider checks it with: \
                 settle statement verify {} --rpc {}",
                statement.events.len(),
                path.display(),
                path.display(),
                config.anchor.rpc(&config.solana)
            )?;
        }
        None => out.write_all(text.as_bytes())?,
    }
    Ok(0)
}

fn day_or_time(text: &str) -> anyhow::Result<i64> {
    crate::domain::time::parse_instant_or_date_ms(text).map_err(|e| anyhow::anyhow!("{text}: {e}"))
}

/// `settle statement verify FILE` (no database): exit 0 when it holds, 1 when not.
pub async fn verify(
    file: &Path,
    root: Option<&str>,
    rpc: Option<&str>,
    key: Option<&str>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let statement: Statement = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("statement_unreadable: {}: {e}", file.display()))?;
    let Some(public) = root.map(Public::Given).or(rpc.map(Public::Chain)) else {
        bail!(
            "public_root_required: give the published root (--root) or a Solana RPC endpoint \
             to read it from (--rpc)"
        );
    };
    let result = match crate::statement::public::verify(&statement, public, key).await {
        Ok(done) => done,
        Err(reason) => {
            writeln!(out, "statement_invalid: {reason}")?;
            return Ok(1);
        }
    };
    let (checked, public) = result;
    if format == Format::Json {
        let json = serde_json::json!({"ok": true, "checked": checked, "public": public});
        writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
    } else {
        writeln!(
            out,
            "{}",
            crate::statement::public::summary(&checked, &public)
        )?;
    }
    Ok(0)
}
