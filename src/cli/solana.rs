//! `settle pay solana`, `settle reconcile solana` and `settle chain local`.
//!
//! The rail's configuration is the `[solana]` section of the `--config` file (when given),
//! then the `SETTLE_SOLANA__*` environment (`SETTLE_SOLANA__RPC_URL`,
//! `SETTLE_SOLANA__CLUSTER`, `SETTLE_SOLANA__MINT`, `SETTLE_SOLANA__TREASURY_KEYPAIR_PATH`, …),
//! then these flags.
//!
//! Both commands refuse to start, with a stable code naming the mint and the cluster, when
//! the mint is not the cluster's USDC mint nor in `solana.allowed_mints`
//! (`mint_not_allowed`) or the node is not on the named cluster (`cluster_mismatch`).
//!
//! Exit codes of `pay solana`: 0 every payout of the outbox is settled or failed; 3 the
//! preflight refused (nothing new sent; the message says what is missing); 4 some payouts
//! are still pending or not sent (run it again). `reconcile solana`: 0 clean, 1 differences.

use std::io::Write;
use std::path::Path;
#[cfg(feature = "local-chain")]
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::config::{Config, SolanaConfig};
use crate::domain::money::format_micro_usdc;
#[cfg(feature = "local-chain")]
use crate::domain::money::parse_micro_usdc;
use crate::ledger::Ledger;
#[cfg(feature = "local-chain")]
use crate::rails::solana::dev;
use crate::rails::solana::{SolanaRail, SolanaRailError};
use crate::report::output::{Format, Rows};

/// Exit code: the preflight refused, nothing new was sent.
pub const EXIT_PREFLIGHT: i32 = 3;
/// Exit code: payouts are still pending or not sent; run the pass again.
pub const EXIT_WORK_LEFT: i32 = 4;

#[derive(Subcommand, Debug)]
pub enum PayCmd {
    /// One pass of the Solana outbox worker: repair, resume open transactions, pay every
    /// created Solana payout, wait for finality.
    Solana(SolanaArgs),
}

#[derive(Subcommand, Debug)]
pub enum ReconcileCmd {
    /// Compare every settled Solana payout with its transaction's token balance change.
    Solana(SolanaArgs),
}

#[cfg(feature = "local-chain")]
#[derive(Subcommand, Debug)]
pub enum ChainCmd {
    /// A development chain (litesvm with the real SPL programs) served as JSON-RPC, with a
    /// USDC-like mint and a funded treasury; serves until SIGTERM or Ctrl-C.
    Local(LocalChainArgs),
}

/// Overrides of the `[solana]` configuration.
#[derive(Args, Debug, Clone, Default)]
pub struct SolanaArgs {
    /// JSON-RPC endpoint.
    #[arg(long)]
    pub rpc_url: Option<String>,
    /// The cluster of the endpoint: mainnet-beta, devnet, testnet or localnet (which mints
    /// may be paid in; checked against the node's genesis hash).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Commitment of reads: processed, confirmed, finalized.
    #[arg(long)]
    pub commitment: Option<String>,
    /// USDC mint address.
    #[arg(long)]
    pub mint: Option<String>,
    /// Treasury keypair file (solana-keygen JSON, mode 0600).
    #[arg(long)]
    pub treasury_keypair: Option<String>,
    /// Priority fee, micro-lamports per compute unit.
    #[arg(long)]
    pub priority_fee_micro_lamports: Option<u64>,
    /// Most transfers per transaction.
    #[arg(long)]
    pub transfers_per_tx: Option<usize>,
    /// Pause between status polls.
    #[arg(long)]
    pub poll_interval_ms: Option<u64>,
    /// Pause between rebroadcasts of an unresolved transaction.
    #[arg(long)]
    pub rebroadcast_interval_ms: Option<u64>,
    /// How long the pass waits for outcomes before leaving them to the next pass.
    #[arg(long)]
    pub wait_timeout_ms: Option<u64>,
}

#[cfg(feature = "local-chain")]
#[derive(Args, Debug, Clone)]
pub struct LocalChainArgs {
    /// Port of the JSON-RPC endpoint on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 8899)]
    pub port: u16,
    /// Directory for the treasury keypair (`treasury.json`, 0600) and `chain.json`.
    #[arg(long, default_value = ".settle-chain")]
    pub state_dir: PathBuf,
    /// USDC minted to the treasury (decimal, 6 fractional digits at most).
    #[arg(long, default_value = "1000000")]
    pub usdc: String,
    /// SOL airdropped to the treasury (whole SOL).
    #[arg(long, default_value_t = 100)]
    pub sol: u64,
}

/// The rail configuration: file, environment, then flags.
pub(crate) fn load_config(path: Option<&Path>, args: &SolanaArgs) -> anyhow::Result<SolanaConfig> {
    let mut c = Config::load(path, std::env::vars())
        .context("loading the configuration")?
        .solana;
    if let Some(v) = &args.rpc_url {
        c.rpc_url = v.clone();
    }
    if let Some(v) = &args.cluster {
        c.cluster = v.clone();
    }
    if let Some(v) = &args.commitment {
        c.commitment = v.clone();
    }
    if let Some(v) = &args.mint {
        c.mint = v.clone();
    }
    if let Some(v) = &args.treasury_keypair {
        c.treasury_keypair_path = v.clone();
    }
    if let Some(v) = args.priority_fee_micro_lamports {
        c.priority_fee_micro_lamports = v;
    }
    if let Some(v) = args.transfers_per_tx {
        c.transfers_per_tx_max = v;
    }
    if let Some(v) = args.poll_interval_ms {
        c.poll_interval_ms = v;
    }
    if let Some(v) = args.rebroadcast_interval_ms {
        c.rebroadcast_interval_ms = v;
    }
    if let Some(v) = args.wait_timeout_ms {
        c.wait_timeout_ms = v;
    }
    Ok(c)
}

/// `settle pay solana`.
pub(crate) async fn pay_cmd(
    ledger: &Ledger,
    cmd: &PayCmd,
    config_path: Option<&Path>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let PayCmd::Solana(args) = cmd;
    let config = load_config(config_path, args)?;
    let rail = SolanaRail::connect(&config).await?;
    let report = match rail.pay_pending(ledger).await {
        Ok(r) => r,
        Err(SolanaRailError::Preflight(message)) => {
            eprintln!("preflight refused, nothing new sent: {message}");
            return Ok(EXIT_PREFLIGHT);
        }
        Err(e) => return Err(e.into()),
    };
    match format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
        _ => {
            let mut rows = Rows::new(vec![
                "payout_id",
                "provider_id",
                "amount_usdc",
                "status",
                "signature",
                "reason",
            ]);
            for p in &report.payouts {
                rows.push(vec![
                    json!(p.payout_id),
                    json!(p.provider_id),
                    json!(format_micro_usdc(p.amount_micro_usdc)),
                    json!(p.status),
                    json!(p.signature),
                    json!(p.reason),
                ]);
            }
            write!(out, "{}", rows.render(format))?;
            if format == Format::Table {
                writeln!(
                    out,
                    "outbox {} payouts ({} USDC): settled {} ({} USDC) in {} transactions, failed {}, pending {}, not sent {}; repaired: settled {}, failed {}, submitted {}",
                    report.outbox,
                    format_micro_usdc(report.outbox_micro_usdc),
                    report.settled,
                    format_micro_usdc(report.settled_micro_usdc),
                    report.transactions_landed,
                    report.failed,
                    report.pending,
                    report.not_sent,
                    report.repaired.settled,
                    report.repaired.failed,
                    report.repaired.submitted,
                )?;
            }
        }
    }
    Ok(if report.pending + report.not_sent > 0 {
        EXIT_WORK_LEFT
    } else {
        0
    })
}

/// `settle reconcile solana`.
pub(crate) async fn reconcile_cmd(
    ledger: &Ledger,
    cmd: &ReconcileCmd,
    config_path: Option<&Path>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let ReconcileCmd::Solana(args) = cmd;
    let config = load_config(config_path, args)?;
    let rail = SolanaRail::connect(&config).await?;
    let report = rail.reconcile(ledger).await?;
    match format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
        _ => {
            let mut rows = Rows::new(vec![
                "kind",
                "payout_ids",
                "signature",
                "expected_usdc",
                "actual_usdc",
            ]);
            for d in &report.differences {
                rows.push(vec![
                    json!(d.kind),
                    json!(d.payout_ids.join(" ")),
                    json!(d.signature),
                    json!(d.expected_micro_usdc.map(format_micro_usdc)),
                    json!(d.actual_micro_usdc.map(format_micro_usdc)),
                ]);
            }
            if !report.differences.is_empty() || format == Format::Csv {
                write!(out, "{}", rows.render(format))?;
            }
            if format == Format::Table {
                writeln!(
                    out,
                    "{}: {} settled Solana payouts in {} transactions checked, {} match the chain, {} differences",
                    if report.ok() { "ok" } else { "DIFFERENCES" },
                    report.checked,
                    report.transactions,
                    report.matched,
                    report.differences.len()
                )?;
            }
        }
    }
    Ok(if report.ok() { 0 } else { 1 })
}

/// `settle chain local`: needs no database.
#[cfg(feature = "local-chain")]
pub(crate) async fn chain_cmd(cmd: &ChainCmd, format: Format) -> anyhow::Result<i32> {
    let ChainCmd::Local(args) = cmd;
    let usdc_micro =
        parse_micro_usdc(&args.usdc).map_err(|e| anyhow::anyhow!("--usdc: {}", e.message))?;
    let usdc_micro = u64::try_from(usdc_micro).context("--usdc must not be negative")?;
    let lamports = args
        .sol
        .checked_mul(dev::LAMPORTS_PER_SOL)
        .context("--sol is too large")?;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], args.port));
    let chain = dev::start_local_chain_on(&args.state_dir, addr, usdc_micro, lamports).await?;
    let info = json!({
        "rpc_url": chain.url,
        "cluster": "localnet",
        "mint": chain.mint.to_string(),
        "treasury": chain.treasury.to_string(),
        "treasury_keypair": chain.treasury_path.display().to_string(),
        "treasury_usdc": format_micro_usdc(usdc_micro as i64),
        "treasury_sol": args.sol,
    });
    std::fs::write(
        args.state_dir.join("chain.json"),
        serde_json::to_string_pretty(&info)?,
    )
    .context("writing chain.json")?;
    {
        let mut out = std::io::stdout().lock();
        match format {
            Format::Json => writeln!(out, "{}", serde_json::to_string(&info)?)?,
            _ => {
                writeln!(
                    out,
                    "local chain serving (SPL Token, ATA and Memo programs)"
                )?;
                writeln!(out, "rpc_url:          {}", chain.url)?;
                writeln!(out, "cluster:          localnet")?;
                writeln!(out, "mint:             {}", chain.mint)?;
                writeln!(out, "treasury:         {}", chain.treasury)?;
                writeln!(out, "treasury_keypair: {}", chain.treasury_path.display())?;
                writeln!(
                    out,
                    "pay with: settle pay solana --cluster localnet --rpc-url {} --mint {} --treasury-keypair {}",
                    chain.url,
                    chain.mint,
                    chain.treasury_path.display()
                )?;
            }
        }
        out.flush()?;
    }
    shutdown_signal().await;
    tracing::info!("local chain stopping");
    chain.server.shutdown().await;
    Ok(0)
}

#[cfg(feature = "local-chain")]
/// SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
