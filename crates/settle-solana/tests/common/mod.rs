//! Shared set-up for the integration tests: a local chain with a USDC mint and a
//! funded treasury, wallets, transfers and a fast payer configuration.
#![allow(dead_code)]

use std::sync::Arc;

use settle_solana::{
    Chain, Journal, Keypair, LocalChain, LocalChainConfig, PayReport, Payer, PayerConfig,
    PayoutOutcome, Pubkey, SettledPayout, Signer, Transfer, Treasury,
};

/// One USDC in µUSDC.
pub const USDC: u64 = 1_000_000;
/// One SOL in lamports.
pub const SOL: u64 = 1_000_000_000;

/// A local chain with a mint and a funded treasury.
pub struct Env {
    pub chain: LocalChain,
    pub mint: Pubkey,
    pub treasury: Arc<Treasury>,
}

impl Env {
    /// Treasury with `usdc_micro` µUSDC and `lamports` SOL.
    pub fn new(usdc_micro: u64, lamports: u64) -> Self {
        Self::with_config(LocalChainConfig::default(), usdc_micro, lamports)
    }

    /// Same with a custom chain model.
    pub fn with_config(config: LocalChainConfig, usdc_micro: u64, lamports: u64) -> Self {
        let chain = LocalChain::with_config(config);
        let mint = chain.create_usdc_mint();
        let keypair = Keypair::new();
        chain.airdrop_sol(&keypair.pubkey(), lamports);
        chain.create_token_account(&mint, &keypair.pubkey());
        if usdc_micro > 0 {
            chain.mint_to(&mint, &keypair.pubkey(), usdc_micro);
        }
        Self {
            chain,
            mint,
            treasury: Arc::new(Treasury::from_keypair(keypair)),
        }
    }

    pub fn treasury_usdc(&self) -> u64 {
        self.chain
            .token_balance_of(&self.mint, &self.treasury.pubkey())
    }

    pub fn balance(&self, wallet: &Pubkey) -> u64 {
        self.chain.token_balance_of(&self.mint, wallet)
    }

    /// A payer on the local chain (directly, without JSON-RPC).
    pub fn payer(&self, journal: Arc<dyn Journal>) -> Payer {
        self.payer_with(journal, fast_config(self.mint))
    }

    pub fn payer_with(&self, journal: Arc<dyn Journal>, config: PayerConfig) -> Payer {
        Payer::new(
            Arc::new(self.chain.clone()) as Arc<dyn Chain>,
            journal,
            self.treasury.clone(),
            config,
        )
    }
}

/// Poll fast; the local chain produces a block per poll, so no test waits on a clock.
pub fn fast_config(mint: Pubkey) -> PayerConfig {
    let mut config = PayerConfig::new(mint);
    config.priority_fee_micro_lamports = 1_000;
    config.poll_interval_ms = 1;
    config.rebroadcast_interval_ms = 3;
    config.rpc_retries_max = 5;
    config.rpc_backoff_ms_max = 5;
    config.wait_timeout_ms = 120_000;
    config
}

/// `n` fresh wallets.
pub fn wallets(n: usize) -> Vec<Pubkey> {
    (0..n).map(|_| Keypair::new().pubkey()).collect()
}

/// One transfer per wallet; amounts differ so that mix-ups show.
pub fn transfers(prefix: &str, wallets: &[Pubkey]) -> Vec<Transfer> {
    wallets
        .iter()
        .enumerate()
        .map(|(i, w)| Transfer {
            payout_id: format!("{prefix}-{i:04}"),
            wallet: *w,
            amount_micro_usdc: 1_000_000 + 1_234 * i as u64 + 7,
            statement: None,
        })
        .collect()
}

pub fn total(transfers: &[Transfer]) -> u64 {
    transfers.iter().map(|t| t.amount_micro_usdc).sum()
}

/// The settled payouts of a report, as reconciliation takes them.
pub fn settled(report: &PayReport, batch: &[Transfer]) -> Vec<SettledPayout> {
    batch
        .iter()
        .filter_map(|t| match report.payouts.get(&t.payout_id) {
            Some(PayoutOutcome::Settled { signature, .. }) => Some(SettledPayout {
                payout_id: t.payout_id.clone(),
                wallet: t.wallet,
                amount_micro_usdc: t.amount_micro_usdc,
                signature: signature.clone(),
            }),
            _ => None,
        })
        .collect()
}
