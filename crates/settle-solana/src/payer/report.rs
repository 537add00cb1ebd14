//! What a payer is configured with and what it answers: each payout's outcome, each
//! attempt's report, and the errors that stop a call.

use super::*;

/// Named limits and settings of the payer.
#[derive(Debug, Clone)]
pub struct PayerConfig {
    /// USDC mint.
    pub mint: Pubkey,
    /// Priority fee, micro-lamports per compute unit.
    pub priority_fee_micro_lamports: u64,
    /// Upper bound of transfers per transaction (the 1,232-byte limit usually binds first).
    pub transfers_per_tx_max: usize,
    /// Pause between two status polls.
    pub poll_interval_ms: u64,
    /// Pause between two broadcasts of the same unresolved transaction.
    pub rebroadcast_interval_ms: u64,
    /// Consecutive RPC failures tolerated before giving up (attempts stay open).
    pub rpc_retries_max: u32,
    /// Cap of the exponential backoff between RPC retries.
    pub rpc_backoff_ms_max: u64,
    /// How long one `pay`/`resume` call waits for outcomes before leaving attempts open.
    pub wait_timeout_ms: u64,
    /// How many times the same transfer may be re-signed after provable expiries in
    /// one call before it is left for a later call.
    pub resign_rounds_max: u32,
    /// Run [`preflight`] on new transfers before sending anything.
    pub preflight: bool,
    /// Signed transactions awaiting their outcome at once (payments and table maintenance
    /// alike): the payer signs, journals and sends up to this many, waits until they are
    /// resolved, then signs the next ones.
    pub transactions_in_flight_max: usize,
    /// Rounds of lookup-table maintenance in one call (a round creates up to
    /// [`crate::lookup::TABLES_CREATED_PER_ROUND_MAX`] tables or extends existing ones).
    pub lookup_table_rounds_max: u32,
    /// Pack v0 transactions against the treasury's address lookup tables, creating and
    /// extending them as needed (see [`crate::lookup`]).
    pub lookup_tables: bool,
    /// Fewest new transfers in one call for which the tables are created or extended (the
    /// tables' rent is a deposit of the treasury; a handful of payouts packs in one or two
    /// legacy transactions anyway). Tables that already hold the accounts are used always.
    pub lookup_tables_min_transfers: usize,
}

impl PayerConfig {
    /// Mainnet-like defaults for `mint`.
    pub fn new(mint: Pubkey) -> Self {
        Self {
            mint,
            priority_fee_micro_lamports: 10_000,
            transfers_per_tx_max: 64,
            poll_interval_ms: 500,
            rebroadcast_interval_ms: 2_000,
            rpc_retries_max: 10,
            rpc_backoff_ms_max: 8_000,
            wait_timeout_ms: 180_000,
            resign_rounds_max: 5,
            preflight: true,
            transactions_in_flight_max: 256,
            lookup_table_rounds_max: 16,
            lookup_tables: true,
            lookup_tables_min_transfers: 64,
        }
    }
}

/// What happened to one payout in a `pay`/`resume` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayoutOutcome {
    /// Finalized on chain: settled.
    Settled {
        /// The attempt.
        attempt_id: String,
        /// Transaction signature.
        signature: String,
        /// Slot of the block.
        slot: u64,
    },
    /// Finalized with an on-chain error: the payout failed (funds return to payable).
    Failed {
        /// The attempt.
        attempt_id: String,
        /// Transaction signature.
        signature: String,
        /// The runtime error.
        reason: String,
    },
    /// Never signed: simulation showed this transfer cannot succeed (e.g. the
    /// recipient token account is frozen or not a token account). Nothing was sent.
    Rejected {
        /// The simulation error.
        reason: String,
    },
    /// Never signed: the recipient's existing token account is not a token account of the
    /// configured mint owned by the recipient's wallet (see
    /// [`crate::treasury::TokenAccountRefusal`]). Nothing was sent.
    Refused {
        /// Stable code: `token_account_owner_mismatch`, `token_account_mint_mismatch` or
        /// `token_account_invalid`.
        code: &'static str,
        /// What was found.
        reason: String,
    },
    /// Signed and possibly sent, outcome unknown yet (RPC trouble or timeout): the
    /// attempt stays open and a later `resume` settles it. Do not pay again.
    Pending {
        /// The open attempt.
        attempt_id: String,
        /// Transaction signature.
        signature: String,
    },
    /// Not signed because the chain could not be reached, or it expired more than
    /// `resign_rounds_max` times. No open attempt: pass it to `pay` again later.
    NotSent {
        /// Why.
        reason: String,
    },
    /// Skipped: the journal already holds a `Landed` or `Failed` outcome for it.
    AlreadyResolved,
}

/// Summary of one attempt resolved or left open in this call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptReport {
    /// The attempt.
    pub attempt_id: String,
    /// Its signature.
    pub signature: String,
    /// Its payouts.
    pub payout_ids: Vec<String>,
    /// Its outcome, `None` when left open.
    pub outcome: Option<AttemptOutcome>,
}

/// Result of `pay` or `resume`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PayReport {
    /// Final state of each payout handled, by payout id.
    pub payouts: HashMap<String, PayoutOutcome>,
    /// Attempts handled, in the order they were resolved.
    pub attempts: Vec<AttemptReport>,
}

impl PayReport {
    /// Payout ids with the given kind of outcome.
    pub fn count(&self, f: impl Fn(&PayoutOutcome) -> bool) -> usize {
        self.payouts.values().filter(|o| f(o)).count()
    }

    /// Number of settled payouts.
    pub fn settled(&self) -> usize {
        self.count(|o| matches!(o, PayoutOutcome::Settled { .. }))
    }

    /// Attempts that landed (transactions that moved money).
    pub fn landed_attempts(&self) -> impl Iterator<Item = &AttemptReport> {
        self.attempts
            .iter()
            .filter(|a| matches!(a.outcome, Some(AttemptOutcome::Landed { .. })))
    }
}

/// Errors that stop the payer. Whatever was journaled stays consistent.
#[derive(Debug, thiserror::Error)]
pub enum PayError {
    /// The journal failed; the payer stopped before sending anything unjournaled.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The run is not covered by the treasury; nothing new was sent.
    #[error("preflight: {0}")]
    Preflight(#[from] PreflightError),
    /// The same payout id appears twice in one call.
    #[error("payout {0} appears more than once")]
    DuplicatePayout(String),
    /// A transfer of 0 µUSDC.
    #[error("payout {0} has amount 0")]
    ZeroAmount(String),
    /// A wallet off the ed25519 curve (see [`crate::validate_wallet`]).
    #[error("payout {0} pays an off-curve address (wallet_off_curve)")]
    OffCurveWallet(String),
    /// A stored attempt cannot be decoded.
    #[error("attempt {0} is corrupt: {1}")]
    CorruptAttempt(String, String),
    /// Signing failed (wrong key for the stored transaction).
    #[error("signing failed: {0}")]
    Signing(String),
    /// A lookup table of the treasury, as the node describes it, is not what the treasury
    /// put in it (or is not the treasury's, or is frozen, deactivated or gone): nothing was
    /// signed against it and the call stopped before signing any new transaction. A node
    /// that lies about a table would otherwise have transfers pay the accounts really at
    /// the positions it named. [`TableRefusal::code`] is a stable code.
    #[error(transparent)]
    LookupTable(#[from] TableRefusal),
}
