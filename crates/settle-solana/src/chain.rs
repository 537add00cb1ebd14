//! The narrow view of a Solana cluster that the payer, the preflight checks and
//! reconciliation need.
//!
//! Two implementations exist: [`crate::rpc::RpcChain`] (production, over
//! `solana_client`'s nonblocking `RpcClient`) and [`crate::local::LocalChain`]
//! (tests and the demo, over litesvm with the real SPL programs).

use async_trait::async_trait;
use solana_account::Account;
use solana_sdk::{hash::Hash, pubkey::Pubkey, signature::Signature};
use solana_transaction::versioned::VersionedTransaction;

/// Commitment level of a block or of a transaction status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Confirmation {
    /// Seen in a block by the node; may still be rolled back.
    Processed,
    /// Voted on by a supermajority; very unlikely to be rolled back.
    Confirmed,
    /// Rooted: can no longer be rolled back. Money is only settled at this level.
    Finalized,
}

/// What the cluster knows about one signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigStatus {
    /// Slot of the block that contains the transaction.
    pub slot: u64,
    /// How final that block is.
    pub confirmation: Confirmation,
    /// The on-chain error when the transaction was included but failed.
    pub err: Option<String>,
}

/// A consistent view of the chain tip at one commitment: slot and block height
/// reported by the same node in the same response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tip {
    /// Slot of the tip block.
    pub slot: u64,
    /// Block height of the tip block.
    pub block_height: u64,
}

/// Statuses of several signatures, with the slot the answering node had reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureStatuses {
    /// Slot of the node's bank when it answered (`context.slot`). A "not found" is
    /// only meaningful from a node that has processed the slots in question.
    pub context_slot: u64,
    /// One entry per requested signature, in order; `None` when unknown.
    pub statuses: Vec<Option<SigStatus>>,
}

/// Change of one token account's balance in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenDelta {
    /// Owner (wallet) of the token account.
    pub owner: Pubkey,
    /// Mint of the token account.
    pub mint: Pubkey,
    /// `post - pre` in token base units (µUSDC for USDC).
    pub delta: i128,
}

/// A transaction failure reported by the runtime (simulation or execution).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxFailure {
    /// Human-readable error, e.g. `Error processing Instruction 3: custom program error: 0x11`.
    pub message: String,
    /// Index of the failing instruction, when the error names one.
    pub instruction_index: Option<u8>,
}

/// Errors of a [`Chain`] call.
///
/// Invariant: an [`ChainError::Rpc`] error is never evidence about the state of a
/// transaction: the request may or may not have reached the cluster.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChainError {
    /// Transport, node or decoding problem. Proves nothing.
    #[error("rpc error: {0}")]
    Rpc(String),
    /// The runtime rejected or failed the transaction (simulation or preflight).
    #[error("transaction error: {}", .0.message)]
    Transaction(TxFailure),
}

impl ChainError {
    /// True for transport errors, which prove nothing.
    pub fn is_rpc(&self) -> bool {
        matches!(self, ChainError::Rpc(_))
    }
}

/// The subset of a Solana JSON-RPC node used by the payer (object safe).
#[async_trait]
pub trait Chain: Send + Sync {
    /// Latest blockhash and the last block height at which a transaction using it can land.
    async fn latest_blockhash(&self) -> Result<(Hash, u64), ChainError>;

    /// Current block height at the given commitment.
    async fn block_height(&self, commitment: Confirmation) -> Result<u64, ChainError>;

    /// Slot and block height of the tip at the given commitment, from one response
    /// (`getEpochInfo`), so the two are consistent even behind a load balancer.
    async fn tip(&self, commitment: Confirmation) -> Result<Tip, ChainError>;

    /// Submit a signed transaction without preflight. `Ok` proves nothing either:
    /// the transaction may still be dropped.
    async fn send_transaction(&self, tx: &VersionedTransaction) -> Result<Signature, ChainError>;

    /// Simulate a transaction (signatures not verified, blockhash not replaced) and
    /// return the compute units it consumed, or the transaction error.
    async fn simulate_units(&self, tx: &VersionedTransaction) -> Result<u64, ChainError>;

    /// Statuses of the given signatures (at most 256), in the same order. With
    /// `search_history` the node also searches its ledger beyond the recent status cache.
    async fn signature_statuses(
        &self,
        signatures: &[Signature],
        search_history: bool,
    ) -> Result<SignatureStatuses, ChainError>;

    /// Several accounts at once (at most 100 keys per call on real nodes; the
    /// implementations split larger requests), in the same order.
    async fn accounts(&self, keys: &[Pubkey]) -> Result<Vec<Option<Account>>, ChainError>;

    /// One account, `None` when it does not exist.
    async fn account(&self, key: &Pubkey) -> Result<Option<Account>, ChainError> {
        Ok(self
            .accounts(std::slice::from_ref(key))
            .await?
            .pop()
            .flatten())
    }

    /// Balance in base units of an SPL token account, `None` when it does not exist.
    async fn token_balance(&self, token_account: &Pubkey) -> Result<Option<u64>, ChainError>;

    /// Lamports held by an account (0 when it does not exist).
    async fn sol_balance(&self, key: &Pubkey) -> Result<u64, ChainError>;

    /// Token balance changes of a landed transaction, `None` when the node does not
    /// know the transaction.
    async fn transaction_token_deltas(
        &self,
        signature: &Signature,
    ) -> Result<Option<Vec<TokenDelta>>, ChainError>;

    /// Lamports that make an account of `data_len` bytes rent exempt.
    async fn minimum_balance_for_rent_exemption(&self, data_len: usize) -> Result<u64, ChainError>;

    /// The cluster's genesis hash (`getGenesisHash`): which cluster the node is on.
    async fn genesis_hash(&self) -> Result<Hash, ChainError>;
}

/// Parse the instruction index out of a runtime error. Works on both the
/// `Debug` form (`InstructionError(3, Custom(17))`) and the `Display` form
/// (`Error processing Instruction 3: ...`).
pub(crate) fn instruction_index_of(err: &solana_transaction_error::TransactionError) -> Option<u8> {
    match err {
        solana_transaction_error::TransactionError::InstructionError(index, _) => Some(*index),
        _ => None,
    }
}
