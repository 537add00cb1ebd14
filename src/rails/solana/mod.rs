//! The USDC payout rail on Solana (SPEC §6), over the `settle-solana` crate.
//!
//! [`SolanaRail::pay_pending`] is the outbox worker: it repairs what a crash left half
//! done, resumes open attempts, and pays every `created` Solana payout that no open attempt
//! holds, exactly once, through the crate's [`Payer`] and the [`LedgerJournal`] (the signed
//! transaction is on the ledger before it is sent). [`SolanaRail::reconcile`] compares
//! every settled Solana payout with the token balance change of its transaction on chain.
//!
//! The rail checks what it pays before it starts ([`SolanaRail::with_chain`]): the cluster
//! named in `solana.cluster` is the node's (genesis hash), the mint is that cluster's USDC
//! mint or explicitly allowed (`solana.allowed_mints`; any mint on `localnet`), and the mint
//! is an SPL Token mint of 6 decimals. Before each transaction it checks every recipient's
//! existing token account (owned by the recipient's wallet, of the pinned mint). Memos carry
//! keyed references of the payouts ([`settle_solana::memo_ref`]), never payout ids.
//!
//! Crash safety: the payer's journal is the ledger ([`LedgerJournal`]). Every signed
//! transaction, a lookup table's maintenance transaction too, is recorded on the platform
//! stream before it is sent, once the ledger has checked it (its payouts, or that it only
//! maintains a lookup table); its payouts are then marked submitted. An attempt is resolved
//! only by what the chain proves: landed or failed once finalized, expired once the
//! finalized block height is past its last valid one and its signature is unknown. Only an
//! expired attempt's transfers are signed again, so at most one live attempt holds a
//! payout; an RPC error or a timeout leaves the attempt open for the next pass, which
//! resumes it. [`LedgerJournal::repair`] applies what a crash left between a platform event
//! and its payouts' events. At most `solana.transactions_in_flight_max` attempts await
//! their outcome at once. `tests/it/crash_solana.rs` kills the payer at every failpoint and
//! at random instants.
//!
//! Invariant: money leaves only here (and never inside an HTTP request).

#[cfg(feature = "local-chain")]
pub mod dev;
pub mod journal;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;

use settle_solana::{
    Chain, ChainError, Cluster, ClusterError, Confirmation, Discrepancy, Journal, PayError,
    PayReport, Payer, PayerConfig, PayoutOutcome, Pubkey, RpcChain, SettledPayout,
    SignatureStatuses, Tip, TokenDelta, Transfer, Treasury, TreasuryError, check_cluster,
    check_mint, validate_wallet,
};

use crate::config::SolanaConfig;
use crate::failpoint::failpoint;
use crate::ledger::{Ledger, LedgerError};
use journal::{AttemptRow, PayoutFacts};
pub use journal::{LedgerJournal, RepairReport, failpoints};

/// The USDC mint on mainnet-beta (built in: see [`settle_solana::cluster`]).
pub const MAINNET_USDC_MINT: &str = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
/// The USDC mint on devnet (built in).
pub const DEVNET_USDC_MINT: &str = "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU";

/// The explorer link of a transaction: no `?cluster=` on mainnet-beta; `custom` points the
/// explorer at a local node.
pub fn explorer_url(signature: &str, cluster: &str) -> String {
    match cluster {
        "" | "mainnet" | "mainnet-beta" => format!("https://explorer.solana.com/tx/{signature}"),
        other => format!("https://explorer.solana.com/tx/{signature}?cluster={other}"),
    }
}

/// Why the rail could not start or pay.
#[derive(Debug, thiserror::Error)]
pub enum SolanaRailError {
    /// A configuration value is missing or malformed.
    #[error("solana config: {0}")]
    Config(String),
    /// The rail refuses to start: the cluster or the mint is not the one it may pay in.
    /// `code` is stable: `invalid_cluster`, `invalid_mint`, `mint_not_allowed`,
    /// `cluster_mismatch`.
    #[error("{code}: {message}")]
    Refused { code: &'static str, message: String },
    /// The treasury keypair file was refused (unreadable, readable by others, malformed).
    #[error(transparent)]
    Treasury(#[from] TreasuryError),
    /// The mint is not an SPL Token mint with 6 decimals, or could not be read.
    #[error("mint check failed: {0}")]
    Mint(String),
    /// The treasury does not cover the outbox: nothing new was sent.
    #[error("preflight: nothing sent: {0}")]
    Preflight(String),
    /// The payer stopped (journal or chain trouble); what was journaled stays consistent
    /// and the next pass resumes it.
    #[error("payer stopped: {0}")]
    Payer(String),
    #[error("chain: {0}")]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// What happened to one payout in a pass of [`SolanaRail::pay_pending`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PayoutResult {
    pub payout_id: String,
    pub provider_id: String,
    pub amount_micro_usdc: i64,
    pub status: PassStatus,
    pub signature: Option<String>,
    pub reason: Option<String>,
}

/// Where a payout stands after a pass of the Solana rail (spelled in snake case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PassStatus {
    /// Its transaction finalized: the money arrived.
    Settled,
    /// Refused, rejected or failed on chain: its funds are payable again.
    Failed,
    /// An open attempt, settled by a later pass.
    Pending,
    /// Still in the outbox.
    NotSent,
}

impl PassStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PassStatus::Settled => "settled",
            PassStatus::Failed => "failed",
            PassStatus::Pending => "pending",
            PassStatus::NotSent => "not_sent",
        }
    }
}

/// The result of one pass of the outbox worker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PayPendingReport {
    /// What the repair step applied before paying.
    pub repaired: RepairReport,
    /// Payouts taken from the outbox, and their sum.
    pub outbox: usize,
    pub outbox_micro_usdc: i64,
    pub settled: usize,
    pub settled_micro_usdc: i64,
    pub failed: usize,
    pub pending: usize,
    pub not_sent: usize,
    /// Payment transactions that landed in this pass.
    pub transactions_landed: usize,
    /// Lookup-table transactions (creations, extensions) that landed in this pass.
    pub lookup_table_transactions_landed: usize,
    /// Per payout, in outbox order.
    pub payouts: Vec<PayoutResult>,
}

/// One difference between the ledger and the chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReconcileDifference {
    /// `amount_mismatch`, `transaction_not_found`, `bad_signature`, `bad_wallet`,
    /// `no_landed_attempt` (the ledger settled a payout with a signature its journal does not
    /// hold as landed) or `landed_not_settled` (a landed attempt whose payout is not settled).
    pub kind: &'static str,
    pub payout_ids: Vec<String>,
    pub signature: Option<String>,
    pub expected_micro_usdc: Option<i64>,
    pub actual_micro_usdc: Option<i64>,
}

/// The result of [`SolanaRail::reconcile`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SolanaReconcileReport {
    /// Settled Solana payouts checked, and those whose chain credit matches.
    pub checked: usize,
    pub matched: usize,
    /// Transactions read from the chain.
    pub transactions: usize,
    pub differences: Vec<ReconcileDifference>,
}

impl SolanaReconcileReport {
    pub fn ok(&self) -> bool {
        self.differences.is_empty() && self.checked == self.matched
    }
}

impl SolanaRailError {
    /// The stable code of a refusal at start (`None` for other errors).
    pub fn code(&self) -> Option<&'static str> {
        match self {
            SolanaRailError::Refused { code, .. } => Some(code),
            _ => None,
        }
    }
}

impl From<ClusterError> for SolanaRailError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::Chain(c) => SolanaRailError::Chain(c),
            other => SolanaRailError::Refused {
                code: other.code(),
                message: other.to_string(),
            },
        }
    }
}

/// The rail: a chain, the treasury and the USDC mint.
pub struct SolanaRail {
    config: SolanaConfig,
    chain: Arc<dyn Chain>,
    treasury: Arc<Treasury>,
    mint: Pubkey,
    cluster: Cluster,
}

impl std::fmt::Debug for SolanaRail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SolanaRail")
            .field("rpc_url", &self.config.rpc_url)
            .field("cluster", &self.cluster)
            .field("mint", &self.mint)
            .field("treasury", &self.treasury.pubkey())
            .finish_non_exhaustive()
    }
}

/// The cluster and mint of the configuration, if the cluster allows that mint (see
/// [`SolanaRail::with_chain`]). Needs no chain.
pub fn mint_policy(config: &SolanaConfig) -> Result<(Cluster, Pubkey), SolanaRailError> {
    let cluster: Cluster = config.cluster.parse()?;
    let address = |text: &str, key: &str| {
        text.trim()
            .parse::<Pubkey>()
            .map_err(|e| SolanaRailError::Refused {
                code: "invalid_mint",
                message: format!("solana.{key} {text:?} is not a base58 address: {e}"),
            })
    };
    let mint = address(&config.mint, "mint")?;
    let allowed = config
        .allowed_mints
        .iter()
        .map(|m| address(m, "allowed_mints"))
        .collect::<Result<Vec<_>, _>>()?;
    cluster.check_mint_allowed(&mint, &allowed)?;
    Ok((cluster, mint))
}

/// Parses a commitment name.
pub(crate) fn parse_commitment(text: &str) -> Result<Confirmation, SolanaRailError> {
    match text {
        "processed" => Ok(Confirmation::Processed),
        "confirmed" => Ok(Confirmation::Confirmed),
        "finalized" => Ok(Confirmation::Finalized),
        other => Err(SolanaRailError::Config(format!(
            "commitment must be processed, confirmed or finalized, got {other:?}"
        ))),
    }
}

impl SolanaRail {
    /// Checks the configuration's cluster and mint policy (no chain needed), connects to
    /// `config.rpc_url` through the production `RpcClient` adapter, loads the treasury keypair
    /// (refused when group or others may read it; the key is never logged), and checks the
    /// node's cluster and the mint on chain (see [`SolanaRail::with_chain`]).
    pub async fn connect(config: &SolanaConfig) -> Result<SolanaRail, SolanaRailError> {
        if config.rpc_url.trim().is_empty() {
            return Err(SolanaRailError::Config("rpc_url is empty".into()));
        }
        let commitment = parse_commitment(&config.commitment)?;
        // A mint the cluster does not allow is refused before the key is read.
        mint_policy(config)?;
        if config.treasury_keypair_path.trim().is_empty() {
            return Err(SolanaRailError::Config(
                "no treasury keypair file configured (treasury_keypair_path)".into(),
            ));
        }
        let treasury = Treasury::load(&config.treasury_keypair_path)?;
        let chain: Arc<dyn Chain> = Arc::new(RpcChain::new(config.rpc_url.clone(), commitment));
        SolanaRail::with_chain(config, chain, Arc::new(treasury)).await
    }

    /// A rail on any [`Chain`] (the demo may use a `LocalChain` directly). Refuses to start
    /// (nothing is paid or reconciled) when:
    /// - `cluster` is not a known cluster (`invalid_cluster`) or `mint` / an entry of
    ///   `allowed_mints` is not an address (`invalid_mint`);
    /// - the mint is not the cluster's USDC mint nor in `allowed_mints` on `mainnet-beta`,
    ///   `devnet` or `testnet` (`mint_not_allowed`);
    /// - the node is not on `cluster` by its genesis hash, or claims `localnet` while on a
    ///   public cluster (`cluster_mismatch`);
    /// - the mint is not an SPL Token mint of 6 decimals on chain ([`SolanaRailError::Mint`]).
    pub(crate) async fn with_chain(
        config: &SolanaConfig,
        chain: Arc<dyn Chain>,
        treasury: Arc<Treasury>,
    ) -> Result<SolanaRail, SolanaRailError> {
        let (cluster, mint) = mint_policy(config)?;
        if config.transactions_in_flight_max == 0 {
            return Err(SolanaRailError::Config(
                "transactions_in_flight_max must be at least 1".into(),
            ));
        }
        if config.transfers_per_tx_max == 0 {
            return Err(SolanaRailError::Config(
                "transfers_per_tx_max must be at least 1".into(),
            ));
        }
        if !config.explorer_cluster.trim().is_empty() {
            tracing::warn!(
                explorer_cluster = %config.explorer_cluster,
                %cluster,
                "solana.explorer_cluster is deprecated and ignored: the cluster is solana.cluster, explorer links use http.explorer_cluster"
            );
        }
        if cluster.usdc_mint() != Some(mint) && cluster != Cluster::Localnet {
            tracing::warn!(%cluster, %mint, "solana: paying in a mint other than the cluster's USDC (listed in solana.allowed_mints)");
        }
        check_cluster(chain.as_ref(), cluster).await?;
        check_mint(chain.as_ref(), &mint)
            .await
            .map_err(|e| SolanaRailError::Mint(e.to_string()))?;
        tracing::info!(%cluster, %mint, "solana rail: cluster and mint checked");
        Ok(SolanaRail {
            config: config.clone(),
            chain: Arc::new(FailpointChain(chain)),
            treasury,
            mint,
            cluster,
        })
    }

    /// The cluster the rail pays on.
    pub fn cluster(&self) -> Cluster {
        self.cluster
    }

    /// The on-chain reference of a payout in the memos of its transactions (keyed with the
    /// treasury's memo key): what an operator looks for in an explorer.
    pub fn memo_ref(&self, payout_id: &str) -> String {
        settle_solana::memo_ref(&self.treasury.memo_key(), payout_id)
    }

    pub fn mint(&self) -> Pubkey {
        self.mint
    }

    pub fn treasury(&self) -> Pubkey {
        self.treasury.pubkey()
    }

    pub fn chain(&self) -> &Arc<dyn Chain> {
        &self.chain
    }

    pub fn config(&self) -> &SolanaConfig {
        &self.config
    }

    /// The treasury's USDC (µUSDC, 0 without a token account) and SOL (lamports).
    pub(crate) async fn treasury_balances(&self) -> Result<(u64, u64), SolanaRailError> {
        let usdc = self
            .chain
            .token_balance(&self.treasury.token_account(&self.mint))
            .await?
            .unwrap_or(0);
        let lamports = self.chain.sol_balance(&self.treasury.pubkey()).await?;
        Ok((usdc, lamports))
    }

    fn payer_config(&self) -> PayerConfig {
        let mut c = PayerConfig::new(self.mint);
        c.priority_fee_micro_lamports = self.config.priority_fee_micro_lamports;
        c.transfers_per_tx_max = self.config.transfers_per_tx_max;
        c.poll_interval_ms = self.config.poll_interval_ms;
        c.rebroadcast_interval_ms = self.config.rebroadcast_interval_ms;
        c.wait_timeout_ms = self.config.wait_timeout_ms;
        c.rpc_retries_max = self.config.rpc_retries_max;
        c.rpc_backoff_ms_max = self.config.rpc_backoff_ms_max;
        c.preflight = true;
        c.lookup_tables = self.config.lookup_tables;
        c.lookup_tables_min_transfers = self.config.lookup_tables_min_payouts;
        c.lookup_table_rounds_max = self.config.lookup_table_rounds_max;
        c.transactions_in_flight_max = self.config.transactions_in_flight_max;
        c
    }

    /// The treasury's address lookup tables: those of the maintenance attempts that
    /// landed, as journaled on the ledger.
    pub async fn lookup_tables(&self, ledger: &Ledger) -> Result<Vec<Pubkey>, SolanaRailError> {
        LedgerJournal::new(ledger.clone())
            .lookup_tables()
            .await
            .map_err(|e| SolanaRailError::Payer(e.to_string()))
    }

    /// One pass of the outbox worker: repair, resume open attempts, then pay every
    /// `created`/`submitted` Solana payout that no open, landed or failed attempt holds.
    ///
    /// Before anything new is signed the treasury must cover the whole set (USDC, and SOL
    /// for fees and new token accounts); otherwise nothing new is sent and
    /// [`SolanaRailError::Preflight`] says what is missing. A transfer that simulation
    /// proves impossible (e.g. a frozen token account) is never signed: its payout fails
    /// and its amount returns to payable. A transaction that fails on chain fails its
    /// payouts the same way.
    pub async fn pay_pending(&self, ledger: &Ledger) -> Result<PayPendingReport, SolanaRailError> {
        let journal = Arc::new(LedgerJournal::new(ledger.clone()));
        let mut report = PayPendingReport {
            repaired: journal.repair().await?,
            ..PayPendingReport::default()
        };
        let outbox = journal::outbox(ledger).await?;
        let pairs: Vec<(&str, &str)> = outbox
            .iter()
            .map(|p| (p.payout_id.as_str(), p.provider_id.as_str()))
            .collect();
        let statements = crate::statement::statement_hashes(&ledger.store, &pairs)
            .await
            .map_err(crate::ledger::LedgerError::from)?;
        let (transfers, mut results, invalid) = plan_transfers(&outbox, &statements, &mut report);
        report.outbox = outbox.len();
        tracing::info!(
            payouts = outbox.len(),
            amount_micro_usdc = report.outbox_micro_usdc,
            "solana outbox"
        );

        let payer = Payer::new(
            self.chain.clone(),
            journal.clone(),
            self.treasury.clone(),
            self.payer_config(),
        );
        let paid = match payer.pay(transfers).await {
            Ok(r) => r,
            Err(PayError::Preflight(e)) => return Err(SolanaRailError::Preflight(e.to_string())),
            Err(e) => return Err(SolanaRailError::Payer(e.to_string())),
        };
        let (payments, tables): (Vec<_>, Vec<_>) = paid
            .landed_attempts()
            .partition(|a| !a.payout_ids.is_empty());
        report.transactions_landed = payments.len();
        report.lookup_table_transactions_landed = tables.len();

        record_outcomes(&journal, &paid, &invalid, &mut results).await?;
        // Payouts of attempts resumed in this pass that were not in the outbox (none in
        // practice: the outbox holds every unfinished payout) are not reported.
        for r in &results {
            match r.status {
                PassStatus::Settled => {
                    report.settled += 1;
                    report.settled_micro_usdc += r.amount_micro_usdc;
                }
                PassStatus::Failed => report.failed += 1,
                PassStatus::Pending => report.pending += 1,
                PassStatus::NotSent => report.not_sent += 1,
            }
        }
        report.payouts = results;
        tracing::info!(
            settled = report.settled,
            failed = report.failed,
            pending = report.pending,
            not_sent = report.not_sent,
            transactions = report.transactions_landed,
            lookup_table_transactions = report.lookup_table_transactions_landed,
            "solana pay pass done"
        );
        Ok(report)
    }

    /// Compares every settled Solana payout with the token balance change of its
    /// transaction on chain, and the ledger's settled payouts with its landed attempts.
    pub async fn reconcile(
        &self,
        ledger: &Ledger,
    ) -> Result<SolanaReconcileReport, SolanaRailError> {
        let mut rows = crate::store::rails::solana_payouts(&ledger.store, |s| {
            s == crate::domain::payout::PayoutStatus::Settled
        })
        .await
        .map_err(LedgerError::from)?;
        rows.sort_by(|a, b| a.payout_id.cmp(&b.payout_id));
        journal::open_wallets(ledger, &mut rows).await?;
        let landed = journal::landed_by_signature(ledger).await?;
        let mut report = SolanaReconcileReport::default();
        let (settled, settled_ids) = check_settled(rows, &landed, &mut report);
        report_landed_not_settled(&landed, &settled_ids, &mut report);
        let amounts: BTreeMap<&str, i64> = settled
            .iter()
            .map(|p| (p.payout_id.as_str(), p.amount_micro_usdc as i64))
            .collect();
        report.transactions = settled
            .iter()
            .map(|p| p.signature.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let chain = settle_solana::reconcile(self.chain.as_ref(), &self.mint, &settled).await?;
        report.matched = chain.matched;
        for d in chain.discrepancies {
            report.differences.push(chain_difference(d, &amounts));
        }
        Ok(report)
    }
}

/// Turns the outbox into transfers, one result (`not_sent` so far) per payout, and the
/// payouts that cannot be paid at all with the reason; adds up the outbox's amount.
fn plan_transfers(
    outbox: &[PayoutFacts],
    statements: &HashMap<String, [u8; 32]>,
    report: &mut PayPendingReport,
) -> (Vec<Transfer>, Vec<PayoutResult>, HashMap<String, String>) {
    let mut transfers = Vec::with_capacity(outbox.len());
    let mut results: Vec<PayoutResult> = Vec::with_capacity(outbox.len());
    let mut invalid: HashMap<String, String> = HashMap::new();
    for p in outbox {
        report.outbox_micro_usdc += p.amount_micro_usdc;
        let wallet = journal::method_wallet(&p.method)
            .ok_or_else(|| "the payout method is not a Solana wallet".to_owned())
            .and_then(|w| {
                if w == crate::privacy::ERASED {
                    return Err(format!(
                        "{}: {}",
                        crate::ledger::personal::PROVIDER_ERASED,
                        crate::ledger::personal::erased_reason(&p.provider_id)
                    ));
                }
                validate_wallet(&w).map_err(|e| e.to_string())
            });
        let amount = u64::try_from(p.amount_micro_usdc)
            .ok()
            .filter(|a| *a > 0)
            .ok_or_else(|| format!("amount {} µUSDC cannot be paid", p.amount_micro_usdc));
        match (wallet, amount) {
            (Ok(wallet), Ok(amount_micro_usdc)) => transfers.push(Transfer {
                payout_id: p.payout_id.clone(),
                wallet,
                amount_micro_usdc,
                statement: statements.get(&p.payout_id).copied(),
            }),
            (Err(reason), _) | (_, Err(reason)) => {
                invalid.insert(p.payout_id.clone(), reason);
            }
        }
        results.push(PayoutResult {
            payout_id: p.payout_id.clone(),
            provider_id: p.provider_id.clone(),
            amount_micro_usdc: p.amount_micro_usdc,
            status: PassStatus::NotSent,
            signature: None,
            reason: None,
        });
    }
    (transfers, results, invalid)
}

/// Books what became of each payout of the pass into `results`: failing the ones that
/// could not be paid, that simulation rejected or that the rail refused.
async fn record_outcomes(
    journal: &LedgerJournal,
    paid: &PayReport,
    invalid: &HashMap<String, String>,
    results: &mut [PayoutResult],
) -> Result<(), SolanaRailError> {
    for r in results.iter_mut() {
        if let Some(reason) = invalid.get(&r.payout_id) {
            journal.fail_unsent(&r.payout_id, reason).await?;
            r.status = PassStatus::Failed;
            r.reason = Some(reason.clone());
            continue;
        }
        match paid.payouts.get(&r.payout_id) {
            Some(PayoutOutcome::Settled { signature, .. }) => {
                r.status = PassStatus::Settled;
                r.signature = Some(signature.clone());
            }
            Some(PayoutOutcome::Failed {
                signature, reason, ..
            }) => {
                r.status = PassStatus::Failed;
                r.signature = Some(signature.clone());
                r.reason = Some(reason.clone());
            }
            Some(PayoutOutcome::Rejected { reason }) => {
                let reason = format!("rejected by simulation, nothing sent: {reason}");
                journal.fail_unsent(&r.payout_id, &reason).await?;
                r.status = PassStatus::Failed;
                r.reason = Some(reason);
            }
            Some(PayoutOutcome::Refused { code, reason }) => {
                // The recipient's token account is not the wallet's USDC account.
                let reason = format!("{code}: {reason}");
                journal.fail_unsent(&r.payout_id, &reason).await?;
                r.status = PassStatus::Failed;
                r.reason = Some(reason);
            }
            Some(PayoutOutcome::Pending { signature, .. }) => {
                r.status = PassStatus::Pending;
                r.signature = Some(signature.clone());
            }
            Some(PayoutOutcome::NotSent { reason }) => {
                r.reason = Some(reason.clone());
            }
            Some(PayoutOutcome::AlreadyResolved) | None => {}
        }
    }
    Ok(())
}

/// Checks each settled payout against the landed attempts (`no_landed_attempt`) and its
/// wallet (`bad_wallet`); returns the payouts to check on chain, and each settled payout's
/// signature.
fn check_settled(
    rows: Vec<PayoutFacts>,
    landed: &BTreeMap<String, AttemptRow>,
    report: &mut SolanaReconcileReport,
) -> (Vec<SettledPayout>, HashMap<String, String>) {
    let mut settled = Vec::with_capacity(rows.len());
    let mut settled_ids: HashMap<String, String> = HashMap::new();
    for r in rows {
        let (payout_id, amount, reference) = (
            r.payout_id.clone(),
            r.amount_micro_usdc,
            r.reference.clone(),
        );
        report.checked += 1;
        let signature = reference.unwrap_or_default();
        // An erased provider's wallet is gone from its method: the landed transaction the
        // ledger recorded still names where the money went.
        let wallet = r
            .wallet()
            .and_then(|w| w.parse::<Pubkey>().ok())
            .or_else(|| {
                landed
                    .get(&signature)
                    .and_then(|a| a.transfers.iter().find(|t| t.0 == payout_id))
                    .and_then(|t| t.1.parse::<Pubkey>().ok())
            });
        settled_ids.insert(payout_id.clone(), signature.clone());
        let difference = |kind| ReconcileDifference {
            kind,
            payout_ids: vec![payout_id.clone()],
            signature: Some(signature.clone()),
            expected_micro_usdc: Some(amount),
            actual_micro_usdc: None,
        };
        if !landed
            .get(&signature)
            .is_some_and(|a| a.payout_ids.contains(&payout_id))
        {
            report.differences.push(difference("no_landed_attempt"));
        }
        match (wallet, u64::try_from(amount)) {
            (Some(wallet), Ok(amount_micro_usdc)) => settled.push(SettledPayout {
                payout_id,
                wallet,
                amount_micro_usdc,
                signature,
            }),
            _ => report.differences.push(difference("bad_wallet")),
        }
    }
    (settled, settled_ids)
}

/// Reports every payout of a landed attempt that the ledger did not settle with it.
fn report_landed_not_settled(
    landed: &BTreeMap<String, AttemptRow>,
    settled_ids: &HashMap<String, String>,
    report: &mut SolanaReconcileReport,
) {
    for attempt in landed.values() {
        for id in &attempt.payout_ids {
            if settled_ids.get(id) != Some(&attempt.signature) {
                report.differences.push(ReconcileDifference {
                    kind: "landed_not_settled",
                    payout_ids: vec![id.clone()],
                    signature: Some(attempt.signature.clone()),
                    expected_micro_usdc: None,
                    actual_micro_usdc: None,
                });
            }
        }
    }
}

/// The difference a discrepancy found on chain is, with the ledger's amount when known.
fn chain_difference(d: Discrepancy, amounts: &BTreeMap<&str, i64>) -> ReconcileDifference {
    match d {
        Discrepancy::BadSignature { payout_id } => ReconcileDifference {
            kind: "bad_signature",
            expected_micro_usdc: amounts.get(payout_id.as_str()).copied(),
            payout_ids: vec![payout_id],
            signature: None,
            actual_micro_usdc: None,
        },
        Discrepancy::TransactionNotFound {
            payout_id,
            signature,
        } => ReconcileDifference {
            kind: "transaction_not_found",
            expected_micro_usdc: amounts.get(payout_id.as_str()).copied(),
            payout_ids: vec![payout_id],
            signature: Some(signature),
            actual_micro_usdc: None,
        },
        Discrepancy::AmountMismatch {
            payout_ids,
            signature,
            expected_micro_usdc,
            actual_micro_usdc,
            ..
        } => ReconcileDifference {
            kind: "amount_mismatch",
            payout_ids,
            signature: Some(signature),
            expected_micro_usdc: i64::try_from(expected_micro_usdc).ok(),
            actual_micro_usdc: i64::try_from(actual_micro_usdc).ok(),
        },
    }
}

/// Delegates to a chain and reaches the [`failpoints::AFTER_SEND`] failpoint after a send.
struct FailpointChain(Arc<dyn Chain>);

#[async_trait]
impl Chain for FailpointChain {
    async fn latest_blockhash(&self) -> Result<(settle_solana::Hash, u64), ChainError> {
        self.0.latest_blockhash().await
    }
    async fn block_height(&self, commitment: Confirmation) -> Result<u64, ChainError> {
        self.0.block_height(commitment).await
    }
    async fn tip(&self, commitment: Confirmation) -> Result<Tip, ChainError> {
        self.0.tip(commitment).await
    }
    async fn send_transaction(
        &self,
        tx: &settle_solana::VersionedTransaction,
    ) -> Result<settle_solana::Signature, ChainError> {
        let sent = self.0.send_transaction(tx).await;
        failpoint(failpoints::AFTER_SEND);
        sent
    }
    async fn simulate_units(
        &self,
        tx: &settle_solana::VersionedTransaction,
    ) -> Result<u64, ChainError> {
        self.0.simulate_units(tx).await
    }
    async fn signature_statuses(
        &self,
        signatures: &[settle_solana::Signature],
        search_history: bool,
    ) -> Result<SignatureStatuses, ChainError> {
        self.0.signature_statuses(signatures, search_history).await
    }
    async fn accounts(
        &self,
        keys: &[Pubkey],
    ) -> Result<Vec<Option<settle_solana::Account>>, ChainError> {
        self.0.accounts(keys).await
    }
    async fn account(&self, key: &Pubkey) -> Result<Option<settle_solana::Account>, ChainError> {
        self.0.account(key).await
    }
    async fn token_balance(&self, token_account: &Pubkey) -> Result<Option<u64>, ChainError> {
        self.0.token_balance(token_account).await
    }
    async fn sol_balance(&self, key: &Pubkey) -> Result<u64, ChainError> {
        self.0.sol_balance(key).await
    }
    async fn transaction_token_deltas(
        &self,
        signature: &settle_solana::Signature,
    ) -> Result<Option<Vec<TokenDelta>>, ChainError> {
        self.0.transaction_token_deltas(signature).await
    }
    async fn minimum_balance_for_rent_exemption(&self, data_len: usize) -> Result<u64, ChainError> {
        self.0.minimum_balance_for_rent_exemption(data_len).await
    }
    async fn genesis_hash(&self) -> Result<settle_solana::Hash, ChainError> {
        self.0.genesis_hash().await
    }
}
