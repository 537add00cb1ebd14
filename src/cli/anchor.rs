//! `settle anchor` and `settle anchor publish` (SPEC §13), and the anchor log `settle verify
//! --anchors` checks.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};

use super::Cli;
use crate::anchor::key::AnchorKey;
use crate::anchor::{AnchorError, Anchors};
use crate::config::Config;
use crate::ledger::Ledger;
use crate::report::output::Format;

#[derive(Args, Debug)]
pub struct AnchorArgs {
    /// The anchor log (default: `anchor.file`, else beside the database).
    #[arg(long)]
    pub file: Option<PathBuf>,
    #[command(subcommand)]
    pub action: Option<AnchorAction>,
}

#[derive(Subcommand, Debug)]
pub enum AnchorAction {
    /// Anchor what moved, then publish the newest root on Solana (a memo transaction
    /// signed by the anchor key), unless it was published before.
    Publish {
        /// Solana JSON-RPC endpoint (default: `anchor.rpc_url`, else `solana.rpc_url`).
        #[arg(long)]
        rpc: Option<String>,
    },
}

/// The anchor log of this ledger: `file`, else `anchor.file`, else beside the database.
pub(crate) fn log_path(cli: &Cli, config: &Config, file: Option<&Path>) -> PathBuf {
    file.map_or_else(|| config.anchor.log_path(&cli.database), Path::to_owned)
}

/// `config` with `anchor.file` resolved to this ledger's anchor log (what `serve` anchors).
pub fn resolved(cli: &Cli, mut config: Config) -> Config {
    config.anchor.file = log_path(cli, &config, None).display().to_string();
    config
}

/// The anchor key of `log` (made when missing).
pub(crate) fn anchor_key(config: &Config, log: &Path) -> anyhow::Result<AnchorKey> {
    AnchorKey::load_or_create(&config.anchor.key_path(log))
}

fn failed(e: AnchorError) -> anyhow::Error {
    anyhow::anyhow!("{}: {e}", e.code())
}

/// The anchor log `settle verify` checks, read, with the public anchor key when its file
/// exists: `--anchors FILE`; `--anchors` alone the configured log; no flag the configured
/// log only when `anchor.file` is set.
pub(crate) fn log_to_check(
    cli: &Cli,
    config: &Config,
    flag: Option<&Option<PathBuf>>,
) -> anyhow::Result<Option<(Anchors, Option<String>)>> {
    let (path, configured) = match flag {
        Some(Some(p)) => (p.clone(), false),
        Some(None) => (log_path(cli, config, None), true),
        None if !config.anchor.file.is_empty() => (PathBuf::from(&config.anchor.file), true),
        None => return Ok(None),
    };
    // The configured log not written yet reads as empty: a ledger that recorded anchors
    // then disagrees with it (`anchor_log_truncated`).
    let anchors = match crate::anchor::read(&path) {
        Err(AnchorError::Io { source, .. })
            if configured && source.kind() == std::io::ErrorKind::NotFound =>
        {
            Anchors::default()
        }
        read => read.map_err(failed)?,
    };
    let key_path = config.anchor.key_path(&path);
    let key = key_path
        .exists()
        .then(|| AnchorKey::load(&key_path).map(|k| k.public()))
        .transpose()?;
    Ok(Some((anchors, key)))
}

/// `settle anchor [publish]`.
pub(crate) async fn anchor_cmd(
    ledger: &Ledger,
    cli: &Cli,
    config: &Config,
    args: &AnchorArgs,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let path = log_path(cli, config, args.file.as_deref());
    let key = anchor_key(config, &path)?;
    let report = crate::anchor::write(&ledger.store, &path, &key, ledger.now_ms())
        .await
        .map_err(failed)?;
    let published = match &args.action {
        None => None,
        Some(AnchorAction::Publish { rpc }) => {
            let log = crate::anchor::read(&path).map_err(failed)?;
            let rpc = rpc
                .clone()
                .unwrap_or_else(|| config.anchor.rpc(&config.solana).to_owned());
            let wait = Duration::from_millis(config.anchor.publish_wait_ms);
            Some(
                crate::anchor::publish::publish(
                    &ledger.store,
                    &log,
                    &key,
                    &rpc,
                    wait,
                    ledger.now_ms(),
                )
                .await
                .map_err(failed)?,
            )
        }
    };
    if cli.format == Format::Json {
        let json = serde_json::json!({"anchor": report, "published": published});
        writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
        return Ok(0);
    }
    if report.written {
        writeln!(
            out,
            "anchored the heads of {} of {} streams in {}: anchor {} root {} signed by {}",
            report.anchored,
            report.streams,
            path.display(),
            report.n,
            report.root,
            key.public()
        )?;
    } else {
        writeln!(
            out,
            "nothing moved since the last anchor in {} ({} streams)",
            path.display(),
            report.streams
        )?;
    }
    if let Some(p) = published {
        writeln!(
            out,
            "{} anchor {} root {} on Solana: transaction {} signed by {}",
            if p.sent {
                "published"
            } else {
                "already published"
            },
            p.n,
            p.root,
            p.signature,
            p.key
        )?;
    }
    Ok(0)
}
