//! settle-solana: USDC payouts on Solana for the settle engine.
//!
//! - [`chain`]: the [`Chain`] trait, the narrow view of a cluster the payer needs.
//! - [`cluster`]: the named cluster, its built-in USDC mint and the mint policy.
//! - [`rpc`]: [`RpcChain`], the production adapter over `solana_client`'s `RpcClient`.
//! - [`local`]: [`LocalChain`], litesvm with the real SPL programs plus a block and
//!   finality model and failure hooks, for tests and the demo.
//! - [`rpc_server`]: serves a [`LocalChain`] as a JSON-RPC endpoint so that
//!   [`RpcChain`] can be exercised end to end.
//! - [`pack`]: transfers, wallet validation, packing into 1,232-byte transactions (legacy,
//!   or v0 against lookup tables), keyed memo references.
//! - [`lookup`]: the treasury's address lookup tables, the maintenance transactions
//!   that create and extend them, and the check of a node's tables against them.
//! - [`treasury`]: keypair loading (permission check, redacted), the memo key, mint check,
//!   recipient token account check, preflight.
//! - [`payer`]: the exactly-once protocol, the [`Journal`] trait and two journals.
//! - [`mod@reconcile`]: compare settled payouts with on-chain token balance changes.
//!
//! Invariant: a transaction is sent only after its signed bytes are durable in the
//! journal, and transfers are re-signed only after their previous attempt is
//! provably expired.

pub mod chain;
pub mod cluster;
#[cfg(feature = "local-chain")]
pub mod local;
pub mod lookup;
pub mod pack;
pub mod payer;
pub mod publish;
pub mod reconcile;
pub mod rpc;
#[cfg(feature = "local-chain")]
pub mod rpc_server;
pub mod treasury;

pub use chain::{
    Chain, ChainError, Confirmation, SigStatus, SignatureStatuses, Tip, TokenDelta, TxFailure,
};
pub use cluster::{Cluster, ClusterError, check_cluster};
#[cfg(feature = "local-chain")]
pub use local::{Delay, LocalChain, LocalChainConfig};
pub use lookup::{LookupTables, TableHistory, TableRefusal, maintained_table};
pub use pack::{MemoKey, Transfer, WalletError, memo_ref, validate_wallet};
pub use payer::{
    AttemptOutcome, FileJournal, Journal, JournalError, MemoryJournal, PayError, PayReport, Payer,
    PayerConfig, PayoutOutcome, SignedAttempt,
};
pub use publish::{PublishError, memo_texts, memo_transaction, publish_memo, verified_fee_payer};
pub use reconcile::{Discrepancy, ReconcileReport, SettledPayout, reconcile};
pub use rpc::RpcChain;
#[cfg(feature = "local-chain")]
pub use rpc_server::{RpcServer, serve_local_chain, serve_local_chain_on};
pub use treasury::{
    PreflightError, PreflightReport, RecipientAccounts, TokenAccountRefusal, Treasury,
    TreasuryError, check_mint, forbid_core_dumps, inspect_token_accounts, preflight,
};

/// Re-exports of the Solana types in the [`Chain`] trait.
pub use solana_account::Account;
pub use solana_message::VersionedMessage;
/// Re-exports of the Solana types in this crate's API.
pub use solana_sdk::{
    hash::Hash,
    pubkey::Pubkey,
    signature::{Keypair, Signature, Signer},
};
pub use solana_transaction::{Transaction, versioned::VersionedTransaction};
