//! A development chain: a [`LocalChain`] (litesvm with the real SPL Token, Associated Token
//! Account and Memo programs) served as a Solana JSON-RPC endpoint, with a USDC-like mint
//! (6 decimals) and a treasury funded with SOL and USDC whose keypair is written `0600` to a
//! state directory. Used by `settle chain local`, the demo and the tests.
//!
//! The chain lives in memory: a restart is a new chain (new mint, new treasury).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use settle_solana::{Keypair, LocalChain, Pubkey, RpcServer, Signer, serve_local_chain_on};

use crate::config::SolanaConfig;

/// One SOL in lamports.
pub const LAMPORTS_PER_SOL: u64 = 1_000_000_000;
/// File name of the treasury keypair in the state directory.
pub const TREASURY_KEYPAIR_FILE: &str = "treasury.json";

/// A running development chain. Dropping it stops the JSON-RPC server.
pub struct DevChain {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    pub mint: Pubkey,
    pub treasury: Pubkey,
    /// The treasury keypair file (mode 0600).
    pub treasury_path: PathBuf,
    /// The chain itself (balances, test hooks).
    pub chain: LocalChain,
    pub server: RpcServer,
}

impl std::fmt::Debug for DevChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevChain")
            .field("url", &self.url)
            .field("mint", &self.mint)
            .field("treasury", &self.treasury)
            .field("treasury_path", &self.treasury_path)
            .finish_non_exhaustive()
    }
}

impl DevChain {
    /// A rail configuration for this chain (`cluster = localnet`: its freshly created mint
    /// is accepted) that polls fast (the local chain produces a block per send and per status
    /// poll, so nobody waits on a clock).
    pub fn solana_config(&self) -> SolanaConfig {
        SolanaConfig {
            rpc_url: self.url.clone(),
            mint: self.mint.to_string(),
            treasury_keypair_path: self.treasury_path.display().to_string(),
            ..SolanaConfig::local_fast()
        }
    }

    /// The treasury's USDC in µUSDC.
    pub fn treasury_usdc(&self) -> u64 {
        self.chain.token_balance_of(&self.mint, &self.treasury)
    }

    /// A wallet's USDC in µUSDC (0 without a token account).
    pub fn usdc_of(&self, wallet: &Pubkey) -> u64 {
        self.chain.token_balance_of(&self.mint, wallet)
    }
}

/// Starts a local chain on `addr` (port 0: any free port), creates the mint and a treasury
/// holding `usdc_micro` µUSDC and `sol_lamports` lamports, and writes the treasury keypair to
/// `state_dir/treasury.json` (0600).
pub(crate) async fn start_local_chain_on(
    state_dir: &Path,
    addr: SocketAddr,
    usdc_micro: u64,
    sol_lamports: u64,
) -> anyhow::Result<DevChain> {
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating state directory {}", state_dir.display()))?;
    let chain = LocalChain::new();
    let mint = chain.create_usdc_mint();
    let keypair = Keypair::new();
    let treasury = keypair.pubkey();
    chain.airdrop_sol(&treasury, sol_lamports);
    chain.create_token_account(&mint, &treasury);
    if usdc_micro > 0 {
        chain.mint_to(&mint, &treasury, usdc_micro);
    }
    let treasury_path = state_dir.join(TREASURY_KEYPAIR_FILE);
    write_keypair(&treasury_path, &keypair)?;
    let server = serve_local_chain_on(chain.clone(), addr)
        .await
        .with_context(|| format!("binding the JSON-RPC endpoint on {addr}"))?;
    Ok(DevChain {
        url: server.url(),
        mint,
        treasury,
        treasury_path,
        chain,
        server,
    })
}

/// [`start_local_chain_on`] on an ephemeral port of 127.0.0.1.
pub async fn start_local_chain(
    state_dir: &Path,
    usdc_micro: u64,
    sol_lamports: u64,
) -> anyhow::Result<DevChain> {
    start_local_chain_on(
        state_dir,
        SocketAddr::from(([127, 0, 0, 1], 0)),
        usdc_micro,
        sol_lamports,
    )
    .await
}

/// Writes a solana-keygen keypair file (a JSON array of 64 bytes) readable by its owner
/// only, replacing any previous file atomically.
pub fn write_keypair(path: &Path, keypair: &Keypair) -> anyhow::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    let bytes = keypair.to_bytes();
    let text = serde_json::to_string(&bytes.to_vec())?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
