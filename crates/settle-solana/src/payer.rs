//! The exactly-once payer.
//!
//! # Protocol
//!
//! 1. **Resume.** Every open attempt (signed, no outcome) in the [`Journal`] is
//!    driven to an outcome first (step 4).
//! 2. **Tables, pack and sign.** The treasury's lookup tables are read and, for a large
//!    enough call, created or extended first by maintenance transactions that follow
//!    steps 3 and 4 themselves ([`crate::lookup`]; no two live ones name the same table or
//!    share an address). Each table as the node describes it must hold exactly what the
//!    journaled maintenance transactions put in it ([`crate::lookup::TableHistory`]);
//!    otherwise the call stops with [`PayError::LookupTable`] and signs nothing. New
//!    transfers are packed ([`crate::pack`]) against the tables, at most
//!    `transactions_in_flight_max` transactions at a time, simulated unsigned to size
//!    the compute unit limit, then signed with a fresh blockhash.
//! 3. **Persist, then send.** [`Journal::record_signed`] stores the exact signed
//!    bytes, signature and last valid block height; only after it returned `Ok` is
//!    the transaction sent (without preflight).
//! 4. **Wait.** Statuses are polled (with history search) and the *same bytes* are
//!    rebroadcast every `rebroadcast_interval_ms` until:
//!    - the transaction is `finalized` without error → [`AttemptOutcome::Landed`];
//!    - it is `finalized` with an error → [`AttemptOutcome::Failed`] (the payouts
//!      fail and their funds return to payable);
//!    - it is **provably expired**: the finalized block height, read *before* the
//!      status query, is above the attempt's last valid block height and the
//!      signature is unknown even with history search → [`AttemptOutcome::Expired`],
//!      then its transfers are re-signed as a new attempt (back to step 2).
//!
//!    While transfers wait to be signed, the wait ends as soon as an attempt resolves
//!    and the freed places are signed (step 2): a sliding window of at most
//!    `transactions_in_flight_max` attempts, each tracked on its own.
//! 5. **Late attempts.** Open attempts that became visible during the call (the last
//!    record of a killed payer, committed late by its database session) are driven to
//!    an outcome at the end, like step 1.
//!
//! An RPC error proves nothing: it is retried with bounded backoff
//! (`rpc_retries_max` consecutive failures), after which the payer gives up and
//! leaves the attempt open for the next [`Payer::resume`]. It never re-signs
//! because of an RPC error, a send error or a timeout; only a provable expiry
//! leads to a new signature. Hence at most one live attempt exists per payout.
//!
//! # Caller contract
//!
//! Any payout that was handed to [`Payer::pay`] and has neither an open attempt nor
//! a `Landed`/`Failed` outcome may (and should) be handed to `pay` again: this
//! covers a crash before `record_signed` and a crash between recording
//! `Expired` and signing its replacement. `pay` skips payouts that have an open
//! attempt (resume settles them) or a `Landed`/`Failed` outcome
//! ([`Journal::resolved_payouts`]). Only one payer may work on a journal at a time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use solana_sdk::{hash::Hash, pubkey::Pubkey, signature::Signature};
use solana_transaction::versioned::VersionedTransaction;
use tokio::time::Instant;

use crate::chain::{Chain, ChainError, Confirmation, SigStatus, Tip};
use crate::lookup::{
    LookupTables, TableGrowth, TableHistory, TableRefusal, budget_for_sizing, budget_instructions,
    growth, maintained_table, maintenance_of, plan,
};
use crate::pack::{
    Batch, COMPUTE_UNIT_LIMIT_MAX, PackParams, Transfer, compute_unit_limit_for, lookup_addresses,
    pack, unsigned,
};
use crate::treasury::{PreflightError, Treasury, inspect_token_accounts, preflight};

/// Maximum signatures per `getSignatureStatuses` request.
pub const SIGNATURES_PER_STATUS_REQUEST_MAX: usize = 256;

// ----- journal --------------------------------------------------------------------

/// A signed transaction, persisted before it is sent. An attempt without transfers is a
/// maintenance transaction of a lookup table ([`crate::lookup`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedAttempt {
    /// Unique id (also in the memo when the payout ids do not fit).
    pub attempt_id: String,
    /// Payout ids in the transaction, in instruction order.
    pub payout_ids: Vec<String>,
    /// The transfers in the transaction.
    pub transfers: Vec<Transfer>,
    /// The exact signed transaction bytes (bincode, as sent on the wire).
    pub tx_bytes: Vec<u8>,
    /// Base58 signature (the transaction id).
    pub signature: String,
    /// Base58 blockhash the transaction was signed with.
    pub blockhash: String,
    /// Last block height at which the transaction can land.
    pub last_valid_block_height: u64,
}

impl SignedAttempt {
    /// Decode the stored transaction (legacy bytes decode as a legacy message).
    pub fn transaction(&self) -> Result<VersionedTransaction, PayError> {
        bincode::deserialize(&self.tx_bytes)
            .map_err(|e| PayError::CorruptAttempt(self.attempt_id.clone(), e.to_string()))
    }

    /// Decode the stored signature.
    pub fn parsed_signature(&self) -> Result<Signature, PayError> {
        self.signature
            .parse()
            .map_err(|_| PayError::CorruptAttempt(self.attempt_id.clone(), "signature".into()))
    }
}

/// Final outcome of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// Finalized without error in `slot`: the payouts are settled.
    Landed {
        /// Slot of the block.
        slot: u64,
    },
    /// Finalized with an on-chain error: the payouts failed, funds return to payable.
    Failed {
        /// The runtime error.
        reason: String,
    },
    /// Provably never landed and never will: the payouts are free to be re-signed.
    Expired,
}

impl AttemptOutcome {
    /// `landed`, `failed` or `expired`.
    pub fn kind(&self) -> &'static str {
        match self {
            AttemptOutcome::Landed { .. } => "landed",
            AttemptOutcome::Failed { .. } => "failed",
            AttemptOutcome::Expired => "expired",
        }
    }

    /// The slot of a landed attempt.
    pub fn slot(&self) -> Option<u64> {
        match self {
            AttemptOutcome::Landed { slot } => Some(*slot),
            _ => None,
        }
    }

    /// The runtime error of a failed attempt.
    pub fn reason(&self) -> Option<&str> {
        match self {
            AttemptOutcome::Failed { reason } => Some(reason),
            _ => None,
        }
    }
}

/// Journal failure. The payer stops; state stays consistent (open attempts are resumed).
#[derive(Debug, thiserror::Error)]
#[error("journal error: {0}")]
pub struct JournalError(pub String);

/// Durable, append-only record of attempts. Implemented by the main crate on its
/// database; [`MemoryJournal`] and [`FileJournal`] are provided.
#[async_trait]
pub trait Journal: Send + Sync {
    /// Persist a signed attempt. Must be durable when it returns `Ok`: the
    /// transaction is sent right after.
    async fn record_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError>;
    /// Persist the final outcome of an attempt (at most one per attempt).
    async fn record_outcome(
        &self,
        attempt_id: &str,
        outcome: &AttemptOutcome,
    ) -> Result<(), JournalError>;
    /// Signed attempts without an outcome.
    async fn open_attempts(&self) -> Result<Vec<SignedAttempt>, JournalError>;
    /// Those of `payout_ids` that belong to an attempt with a `Landed` or `Failed` outcome.
    async fn resolved_payouts(&self, payout_ids: &[String]) -> Result<Vec<String>, JournalError>;
    /// `(payout_id, attempt_id)` for those of `payout_ids` that an attempt holds: open,
    /// landed or failed (an `Expired` attempt frees its payouts). Asked when
    /// `record_signed` refused an attempt, to tell payouts that another payer got to
    /// first (an attempt that became visible after this call looked, e.g. the late commit
    /// of a killed process's last transaction) from a failing journal.
    async fn holders(&self, payout_ids: &[String]) -> Result<Vec<(String, String)>, JournalError>;
    /// The lookup tables of landed maintenance attempts (attempts without transfers whose
    /// transaction [`maintained_table`] names), each once, in the order of their attempts.
    async fn lookup_tables(&self) -> Result<Vec<Pubkey>, JournalError>;
    /// The landed maintenance attempts themselves (those [`Journal::lookup_tables`] takes its
    /// tables from), in the order they were signed: what the treasury put in its tables.
    /// The payer checks every table a node describes against them before it packs a
    /// transaction against it ([`TableHistory`]).
    ///
    /// The default answers `lookup_table_history_unavailable`: a journal that cannot list
    /// them cannot tell what the tables hold, so a payer with
    /// [`PayerConfig::lookup_tables`] on stops there (with it off, nothing asks).
    async fn landed_maintenance(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        Err(JournalError(
            "lookup_table_history_unavailable: this journal does not list its landed \
             lookup-table transactions (Journal::landed_maintenance); the treasury's tables \
             cannot be checked, so none is used"
                .into(),
        ))
    }
}

/// The tables of the landed maintenance attempts among `attempts` (see
/// [`Journal::lookup_tables`]); journals built on their own storage use it too.
pub fn landed_tables<'a>(attempts: impl IntoIterator<Item = &'a SignedAttempt>) -> Vec<Pubkey> {
    let mut seen = HashSet::new();
    attempts
        .into_iter()
        .filter(|a| a.transfers.is_empty())
        .filter_map(|a| a.transaction().ok())
        .filter_map(|tx| maintained_table(&tx))
        .filter(|t| seen.insert(*t))
        .collect()
}

/// One journal entry (the JSON line of [`FileJournal`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum JournalRecord {
    /// See [`Journal::record_signed`].
    Signed(AttemptRecord),
    /// See [`Journal::record_outcome`].
    Outcome {
        /// The attempt.
        attempt_id: String,
        /// Its outcome.
        outcome: AttemptOutcome,
    },
}

/// Serialized form of a [`SignedAttempt`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    attempt_id: String,
    transfers: Vec<TransferRecord>,
    tx_base64: String,
    signature: String,
    blockhash: String,
    last_valid_block_height: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TransferRecord {
    payout_id: String,
    wallet: String,
    amount_micro_usdc: u64,
}

impl From<&SignedAttempt> for AttemptRecord {
    fn from(a: &SignedAttempt) -> Self {
        use base64::Engine;
        Self {
            attempt_id: a.attempt_id.clone(),
            transfers: a
                .transfers
                .iter()
                .map(|t| TransferRecord {
                    payout_id: t.payout_id.clone(),
                    wallet: t.wallet.to_string(),
                    amount_micro_usdc: t.amount_micro_usdc,
                })
                .collect(),
            tx_base64: base64::engine::general_purpose::STANDARD.encode(&a.tx_bytes),
            signature: a.signature.clone(),
            blockhash: a.blockhash.clone(),
            last_valid_block_height: a.last_valid_block_height,
        }
    }
}

impl TryFrom<&AttemptRecord> for SignedAttempt {
    type Error = JournalError;
    fn try_from(r: &AttemptRecord) -> Result<Self, JournalError> {
        use base64::Engine;
        let transfers = r
            .transfers
            .iter()
            .map(|t| {
                Ok(Transfer {
                    payout_id: t.payout_id.clone(),
                    wallet: t
                        .wallet
                        .parse::<Pubkey>()
                        .map_err(|e| JournalError(format!("wallet {}: {e}", t.wallet)))?,
                    amount_micro_usdc: t.amount_micro_usdc,
                    statement: None,
                })
            })
            .collect::<Result<Vec<_>, JournalError>>()?;
        Ok(SignedAttempt {
            attempt_id: r.attempt_id.clone(),
            payout_ids: transfers.iter().map(|t| t.payout_id.clone()).collect(),
            transfers,
            tx_bytes: base64::engine::general_purpose::STANDARD
                .decode(&r.tx_base64)
                .map_err(|e| JournalError(format!("tx of {}: {e}", r.attempt_id)))?,
            signature: r.signature.clone(),
            blockhash: r.blockhash.clone(),
            last_valid_block_height: r.last_valid_block_height,
        })
    }
}

/// Fold of journal records: attempts in order, outcomes by attempt.
#[derive(Debug, Default)]
struct JournalState {
    attempts: Vec<SignedAttempt>,
    outcomes: HashMap<String, AttemptOutcome>,
}

impl JournalState {
    /// Check that `attempt` may be recorded: new id, and none of its payouts open.
    fn check_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError> {
        if self
            .attempts
            .iter()
            .any(|a| a.attempt_id == attempt.attempt_id)
        {
            return Err(JournalError(format!(
                "attempt {} recorded twice",
                attempt.attempt_id
            )));
        }
        // Invariant: at most one open attempt per payout.
        let open: HashSet<&String> = self.open().flat_map(|a| a.payout_ids.iter()).collect();
        if let Some(id) = attempt.payout_ids.iter().find(|id| open.contains(id)) {
            return Err(JournalError(format!(
                "payout {id} already has an open attempt"
            )));
        }
        // Invariant: no two live lookup-table transactions name the same table or touch the
        // same address.
        if attempt.transfers.is_empty() {
            let work = crate::lookup::maintenance_of_bytes(&attempt.tx_bytes).ok_or_else(|| {
                JournalError(format!(
                    "attempt {} has no transfers and is no lookup-table transaction",
                    attempt.attempt_id
                ))
            })?;
            if let Some(other) = self.open().find(|a| {
                a.transfers.is_empty()
                    && crate::lookup::maintenance_of_bytes(&a.tx_bytes)
                        .is_some_and(|w| crate::lookup::maintenance_conflicts(&w, &work))
            }) {
                return Err(JournalError(format!(
                    "maintenance_conflict: lookup-table transaction {} is in flight with the same table or addresses",
                    other.attempt_id
                )));
            }
        }
        Ok(())
    }

    fn apply_signed(&mut self, attempt: SignedAttempt) -> Result<(), JournalError> {
        self.check_signed(&attempt)?;
        self.attempts.push(attempt);
        Ok(())
    }

    /// Check that `attempt_id` exists and has no outcome yet.
    fn check_outcome(&self, attempt_id: &str) -> Result<(), JournalError> {
        if !self.attempts.iter().any(|a| a.attempt_id == attempt_id) {
            return Err(JournalError(format!("unknown attempt {attempt_id}")));
        }
        if self.outcomes.contains_key(attempt_id) {
            return Err(JournalError(format!(
                "attempt {attempt_id} already has an outcome"
            )));
        }
        Ok(())
    }

    fn apply_outcome(
        &mut self,
        attempt_id: &str,
        outcome: AttemptOutcome,
    ) -> Result<(), JournalError> {
        self.check_outcome(attempt_id)?;
        self.outcomes.insert(attempt_id.to_string(), outcome);
        Ok(())
    }

    fn open(&self) -> impl Iterator<Item = &SignedAttempt> {
        self.attempts
            .iter()
            .filter(|a| !self.outcomes.contains_key(&a.attempt_id))
    }

    fn holders(&self, payout_ids: &[String]) -> Vec<(String, String)> {
        let wanted: HashSet<&String> = payout_ids.iter().collect();
        let mut held = Vec::new();
        for a in &self.attempts {
            if matches!(
                self.outcomes.get(&a.attempt_id),
                None | Some(AttemptOutcome::Landed { .. } | AttemptOutcome::Failed { .. })
            ) {
                held.extend(
                    a.payout_ids
                        .iter()
                        .filter(|id| wanted.contains(id))
                        .map(|id| (id.clone(), a.attempt_id.clone())),
                );
            }
        }
        held
    }

    fn lookup_tables(&self) -> Vec<Pubkey> {
        landed_tables(self.landed_maintenance())
    }

    fn landed_maintenance(&self) -> impl Iterator<Item = &SignedAttempt> {
        self.attempts.iter().filter(|a| {
            a.transfers.is_empty()
                && matches!(
                    self.outcomes.get(&a.attempt_id),
                    Some(AttemptOutcome::Landed { .. })
                )
        })
    }

    fn resolved(&self, payout_ids: &[String]) -> Vec<String> {
        let wanted: HashSet<&String> = payout_ids.iter().collect();
        let mut found = Vec::new();
        for a in &self.attempts {
            if matches!(
                self.outcomes.get(&a.attempt_id),
                Some(AttemptOutcome::Landed { .. } | AttemptOutcome::Failed { .. })
            ) {
                found.extend(
                    a.payout_ids
                        .iter()
                        .filter(|id| wanted.contains(id))
                        .cloned(),
                );
            }
        }
        found
    }
}

/// An in-memory journal (tests). Enforces the same invariants as the file journal.
#[derive(Debug, Default)]
pub struct MemoryJournal {
    state: Mutex<(JournalState, Vec<JournalRecord>)>,
}

impl MemoryJournal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    /// All records so far, in order.
    pub fn records(&self) -> Vec<JournalRecord> {
        self.state.lock().expect("journal lock").1.clone()
    }

    /// Every signed attempt, in order.
    pub fn attempts(&self) -> Vec<SignedAttempt> {
        self.state.lock().expect("journal lock").0.attempts.clone()
    }

    /// Outcome of an attempt, if any.
    pub fn outcome(&self, attempt_id: &str) -> Option<AttemptOutcome> {
        self.state
            .lock()
            .expect("journal lock")
            .0
            .outcomes
            .get(attempt_id)
            .cloned()
    }
}

#[async_trait]
impl Journal for MemoryJournal {
    async fn record_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError> {
        let mut state = self.state.lock().expect("journal lock");
        state.0.apply_signed(attempt.clone())?;
        state.1.push(JournalRecord::Signed(attempt.into()));
        Ok(())
    }

    async fn record_outcome(
        &self,
        attempt_id: &str,
        outcome: &AttemptOutcome,
    ) -> Result<(), JournalError> {
        let mut state = self.state.lock().expect("journal lock");
        state.0.apply_outcome(attempt_id, outcome.clone())?;
        state.1.push(JournalRecord::Outcome {
            attempt_id: attempt_id.to_string(),
            outcome: outcome.clone(),
        });
        Ok(())
    }

    async fn open_attempts(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        Ok(self
            .state
            .lock()
            .expect("journal lock")
            .0
            .open()
            .cloned()
            .collect())
    }

    async fn resolved_payouts(&self, payout_ids: &[String]) -> Result<Vec<String>, JournalError> {
        Ok(self
            .state
            .lock()
            .expect("journal lock")
            .0
            .resolved(payout_ids))
    }

    async fn holders(&self, payout_ids: &[String]) -> Result<Vec<(String, String)>, JournalError> {
        Ok(self
            .state
            .lock()
            .expect("journal lock")
            .0
            .holders(payout_ids))
    }

    async fn lookup_tables(&self) -> Result<Vec<Pubkey>, JournalError> {
        Ok(self.state.lock().expect("journal lock").0.lookup_tables())
    }

    async fn landed_maintenance(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        Ok(self
            .state
            .lock()
            .expect("journal lock")
            .0
            .landed_maintenance()
            .cloned()
            .collect())
    }
}

/// An append-only JSON-lines journal; every record is fsynced before the call returns.
///
/// A torn last record (crash while writing) is cut off on open: its call never
/// returned, so the transaction it describes was never sent.
#[derive(Debug)]
pub struct FileJournal {
    path: PathBuf,
    inner: Mutex<(JournalState, File)>,
}

impl FileJournal {
    /// Open (or create) the journal at `path` and fold its records.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        let path = path.as_ref().to_path_buf();
        let io = |e: std::io::Error| JournalError(format!("{}: {e}", path.display()));
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)
            .map_err(io)?;
        let mut content = Vec::new();
        file.read_to_end(&mut content).map_err(io)?;

        // Records are newline-terminated. A trailing fragment without its newline is
        // a record whose write never completed (its call never returned, so nothing
        // was sent on its basis): cut it off.
        let complete = content
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        if complete < content.len() {
            tracing::warn!(path = %path.display(), bytes = content.len() - complete, "truncating torn last journal record");
            file.set_len(complete as u64)
                .and_then(|()| file.sync_all())
                .map_err(io)?;
        }
        let mut state = JournalState::default();
        for (index, line) in content[..complete].split(|b| *b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let record: JournalRecord = serde_json::from_slice(line)
                .map_err(|e| JournalError(format!("{} line {}: {e}", path.display(), index + 1)))?;
            match record {
                JournalRecord::Signed(r) => state.apply_signed(SignedAttempt::try_from(&r)?)?,
                JournalRecord::Outcome {
                    attempt_id,
                    outcome,
                } => state.apply_outcome(&attempt_id, outcome)?,
            }
        }
        if !existed {
            // Make the new directory entry durable too.
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
            }
        }
        Ok(Self {
            path,
            inner: Mutex::new((state, file)),
        })
    }

    /// Where the journal lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(file: &mut File, record: &JournalRecord) -> Result<(), JournalError> {
        let mut line = serde_json::to_vec(record).map_err(|e| JournalError(e.to_string()))?;
        line.push(b'\n');
        file.write_all(&line)
            .and_then(|()| file.sync_data())
            .map_err(|e| JournalError(format!("append: {e}")))
    }
}

#[async_trait]
impl Journal for FileJournal {
    async fn record_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError> {
        let mut inner = self.inner.lock().expect("journal lock");
        let (state, file) = &mut *inner;
        // Validate against the fold, make it durable, then apply.
        state.check_signed(attempt)?;
        Self::append(file, &JournalRecord::Signed(attempt.into()))?;
        state.apply_signed(attempt.clone())
    }

    async fn record_outcome(
        &self,
        attempt_id: &str,
        outcome: &AttemptOutcome,
    ) -> Result<(), JournalError> {
        let mut inner = self.inner.lock().expect("journal lock");
        let (state, file) = &mut *inner;
        state.check_outcome(attempt_id)?;
        Self::append(
            file,
            &JournalRecord::Outcome {
                attempt_id: attempt_id.to_string(),
                outcome: outcome.clone(),
            },
        )?;
        state.apply_outcome(attempt_id, outcome.clone())
    }

    async fn open_attempts(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        Ok(self
            .inner
            .lock()
            .expect("journal lock")
            .0
            .open()
            .cloned()
            .collect())
    }

    async fn resolved_payouts(&self, payout_ids: &[String]) -> Result<Vec<String>, JournalError> {
        Ok(self
            .inner
            .lock()
            .expect("journal lock")
            .0
            .resolved(payout_ids))
    }

    async fn holders(&self, payout_ids: &[String]) -> Result<Vec<(String, String)>, JournalError> {
        Ok(self
            .inner
            .lock()
            .expect("journal lock")
            .0
            .holders(payout_ids))
    }

    async fn lookup_tables(&self) -> Result<Vec<Pubkey>, JournalError> {
        Ok(self.inner.lock().expect("journal lock").0.lookup_tables())
    }

    async fn landed_maintenance(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        Ok(self
            .inner
            .lock()
            .expect("journal lock")
            .0
            .landed_maintenance()
            .cloned()
            .collect())
    }
}

// ----- payer ----------------------------------------------------------------------

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

/// An attempt being waited for.
struct InFlight {
    attempt: SignedAttempt,
    tx: VersionedTransaction,
    signature: Signature,
    last_broadcast: Option<Instant>,
    /// How many times these transfers were already re-signed in this call.
    round: u32,
}

/// The exactly-once USDC payer. See the module docs for the protocol.
pub struct Payer {
    chain: Arc<dyn Chain>,
    journal: Arc<dyn Journal>,
    treasury: Arc<Treasury>,
    config: PayerConfig,
    /// Serialises `pay`/`resume` calls of this payer.
    busy: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Payer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Payer")
            .field("treasury", &self.treasury)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Payer {
    /// A payer for `treasury` on `chain`, recording into `journal`.
    pub fn new(
        chain: Arc<dyn Chain>,
        journal: Arc<dyn Journal>,
        treasury: Arc<Treasury>,
        config: PayerConfig,
    ) -> Self {
        Self {
            chain,
            journal,
            treasury,
            config,
            busy: tokio::sync::Mutex::new(()),
        }
    }

    /// Packing parameters derived from the configuration.
    pub fn pack_params(&self) -> PackParams {
        PackParams {
            treasury: self.treasury.pubkey(),
            mint: self.config.mint,
            priority_fee_micro_lamports: self.config.priority_fee_micro_lamports,
            transfers_per_tx_max: self.config.transfers_per_tx_max,
            memo_key: self.treasury.memo_key(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PayerConfig {
        &self.config
    }

    /// Drive every open attempt of the journal to an outcome (re-signing the
    /// transfers of provably expired ones), within `wait_timeout_ms`.
    #[tracing::instrument(skip_all)]
    pub async fn resume(&self) -> Result<PayReport, PayError> {
        let _busy = self.busy.lock().await;
        self.resume_locked().await
    }

    async fn resume_locked(&self) -> Result<PayReport, PayError> {
        let mut report = PayReport::default();
        self.resume_unseen(&mut report).await?;
        Ok(report)
    }

    /// Drive the journal's open attempts that `report` does not name yet to an outcome, into
    /// `report`. At the start of a call that is every open attempt; at its end, those that
    /// became visible meanwhile (the last record of a killed payer, committed late).
    async fn resume_unseen(&self, report: &mut PayReport) -> Result<(), PayError> {
        let seen: HashSet<&str> = report
            .attempts
            .iter()
            .map(|a| a.attempt_id.as_str())
            .collect();
        let open: Vec<SignedAttempt> = self
            .journal
            .open_attempts()
            .await?
            .into_iter()
            .filter(|a| !seen.contains(a.attempt_id.as_str()))
            .collect();
        if open.is_empty() {
            return Ok(());
        }
        tracing::info!(open = open.len(), "resuming open attempts");
        let mut inflight = Vec::with_capacity(open.len());
        for attempt in open {
            let tx = attempt.transaction()?;
            let signature = attempt.parsed_signature()?;
            inflight.push(InFlight {
                attempt,
                tx,
                signature,
                last_broadcast: None,
                round: 0,
            });
        }
        self.drive(inflight, Vec::new(), report).await
    }

    /// Pay `transfers` exactly once: resume open attempts, then pack, sign, journal,
    /// send and wait for each new transaction. See the module docs.
    ///
    /// Payouts with a `Landed`/`Failed` outcome are reported `AlreadyResolved`, those
    /// with an open attempt `Pending`; neither is signed again. On `Err`, whatever
    /// was journaled stays consistent: open attempts are settled by the next call.
    #[tracing::instrument(skip_all, fields(transfers = transfers.len()))]
    pub async fn pay(&self, transfers: Vec<Transfer>) -> Result<PayReport, PayError> {
        let _busy = self.busy.lock().await;
        let mut seen = HashSet::new();
        for t in &transfers {
            if !seen.insert(t.payout_id.as_str()) {
                return Err(PayError::DuplicatePayout(t.payout_id.clone()));
            }
            if t.amount_micro_usdc == 0 {
                return Err(PayError::ZeroAmount(t.payout_id.clone()));
            }
            if !t.wallet.is_on_curve() {
                return Err(PayError::OffCurveWallet(t.payout_id.clone()));
            }
        }
        let mut report = self.resume_locked().await?;

        // Skip what is settled, failed or still in flight.
        let ids: Vec<String> = transfers.iter().map(|t| t.payout_id.clone()).collect();
        let resolved: HashSet<String> = self
            .journal
            .resolved_payouts(&ids)
            .await?
            .into_iter()
            .collect();
        let mut open: HashMap<String, (String, String)> = HashMap::new();
        for attempt in self.journal.open_attempts().await? {
            for id in attempt.payout_ids {
                open.insert(id, (attempt.attempt_id.clone(), attempt.signature.clone()));
            }
        }
        let mut fresh = Vec::with_capacity(transfers.len());
        for t in transfers {
            if resolved.contains(&t.payout_id) {
                report
                    .payouts
                    .entry(t.payout_id.clone())
                    .or_insert(PayoutOutcome::AlreadyResolved);
            } else if let Some((attempt_id, signature)) = open.get(&t.payout_id) {
                // Resume could not settle it yet: never sign a second live attempt.
                tracing::warn!(payout_id = %t.payout_id, %attempt_id, "payout has an open attempt; not signing again");
                report.payouts.insert(
                    t.payout_id.clone(),
                    PayoutOutcome::Pending {
                        attempt_id: attempt_id.clone(),
                        signature: signature.clone(),
                    },
                );
            } else {
                fresh.push(t);
            }
        }
        if fresh.is_empty() {
            return Ok(report);
        }
        if self.config.preflight {
            let params = self.pack_params();
            let tables = self.table_growth(&fresh).await?;
            let checked = self
                .with_rpc_retries(|| preflight(self.chain.as_ref(), &params, &fresh, tables))
                .await;
            match checked {
                Ok(summary) => tracing::info!(
                    usdc_needed_micro = summary.usdc_needed_micro,
                    usdc_available_micro = summary.usdc_available_micro,
                    transactions = summary.transactions,
                    atas_to_create = summary.atas_to_create,
                    tables_created = summary.tables.tables_created,
                    table_addresses = summary.tables.addresses,
                    lamports_needed = summary.lamports_needed,
                    lamports_available = summary.lamports_available,
                    "preflight passed"
                ),
                Err(e) => return Err(PayError::Preflight(e)),
            }
        }
        self.drive(
            Vec::new(),
            fresh.into_iter().map(|t| (t, 0)).collect(),
            &mut report,
        )
        .await?;
        self.resume_unseen(&mut report).await?;
        Ok(report)
    }

    /// Retry a fallible chain operation on RPC errors with bounded exponential backoff.
    async fn with_rpc_retries<T, E, F, Fut>(&self, mut op: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
        E: RpcErrorLike,
    {
        let mut failures = 0u32;
        loop {
            match op().await {
                Err(e) if e.is_rpc() && failures < self.config.rpc_retries_max => {
                    failures += 1;
                    tracing::warn!(failures, error = %e.describe(), "rpc error, retrying");
                    tokio::time::sleep(self.backoff(failures)).await;
                }
                other => return other,
            }
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        let base = self.config.poll_interval_ms.max(1);
        let ms = base
            .saturating_mul(1u64 << failures.min(16))
            .min(self.config.rpc_backoff_ms_max.max(base));
        Duration::from_millis(ms)
    }

    /// Sign `to_sign`, then wait for everything in flight; re-sign provably expired
    /// transfers until nothing is left or the limits are reached.
    async fn drive(
        &self,
        mut inflight: Vec<InFlight>,
        mut to_sign: Vec<(Transfer, u32)>,
        report: &mut PayReport,
    ) -> Result<(), PayError> {
        let tables = if to_sign.is_empty() {
            LookupTables::none()
        } else {
            let transfers: Vec<Transfer> = to_sign.iter().map(|(t, _)| t.clone()).collect();
            self.lookup_tables_for(&transfers, report).await?
        };
        if !tables.is_empty() {
            // Neighbours in a table share a transaction: each transaction loads from few tables.
            let mint = self.config.mint;
            to_sign.sort_by_cached_key(|(t, _)| {
                tables
                    .position(&crate::pack::token_account_of(&t.wallet, &mint))
                    .unwrap_or((usize::MAX, 0))
            });
        }
        let per_tx = self.config.transfers_per_tx_max.max(1);
        let mut queue: VecDeque<(Transfer, u32)> = to_sign.into();
        loop {
            if !queue.is_empty() {
                let room = self
                    .config
                    .transactions_in_flight_max
                    .max(1)
                    .saturating_sub(inflight.len());
                // What `room` transactions can carry at most is inspected and packed now;
                // the rest waits in the queue untouched.
                let take = queue.len().min(room.saturating_mul(per_tx));
                let (allowed, exhausted): (Vec<_>, Vec<_>) = queue
                    .drain(..take)
                    .partition(|(_, round)| *round <= self.config.resign_rounds_max);
                for (t, _) in exhausted {
                    report.payouts.insert(
                        t.payout_id,
                        PayoutOutcome::NotSent {
                            reason: "expired too many times in this call; pay again later".into(),
                        },
                    );
                }
                let offered = allowed.len();
                let (signed, deferred) = self.sign_and_send(allowed, &tables, room, report).await?;
                inflight.extend(signed);
                let progressed = deferred.len() < offered || take > offered;
                for left in deferred.into_iter().rev() {
                    queue.push_front(left);
                }
                if inflight.is_empty() && !queue.is_empty() {
                    if progressed {
                        // These signed nothing (rejected or unreachable); the next ones.
                        continue;
                    }
                    not_sent_rounds(report, queue.into(), "not signed in this call; pay again");
                    return Ok(());
                }
            }
            if inflight.is_empty() {
                return Ok(());
            }
            // A sliding window: while transfers wait to be signed, the wait ends as soon as
            // an attempt resolves and its place is filled at once.
            let until = if queue.is_empty() {
                Until::AllResolved
            } else {
                Until::Room
            };
            let waited = self
                .wait(std::mem::take(&mut inflight), report, until)
                .await?;
            inflight = waited.in_flight;
            queue.extend(waited.expired);
            if waited.left_open > 0 && !queue.is_empty() {
                // Earlier transactions are still unresolved: signing more could exceed the
                // in-flight limit. The next call resumes them and pays these.
                not_sent_rounds(
                    report,
                    queue.into(),
                    "earlier transactions are still in flight; the next pass pays it",
                );
                return Ok(());
            }
            if queue.is_empty() && inflight.is_empty() {
                return Ok(());
            }
        }
    }

    /// Pack, simulate, sign, journal and send up to `room` transactions. Transfers whose
    /// simulation fails on their own instructions are rejected (never signed); the rest are
    /// re-packed. Returns the transactions in flight and the transfers left for later.
    async fn sign_and_send(
        &self,
        transfers: Vec<(Transfer, u32)>,
        tables: &LookupTables,
        room: usize,
        report: &mut PayReport,
    ) -> Result<(Vec<InFlight>, Vec<(Transfer, u32)>), PayError> {
        let params = self.pack_params();
        let mut deferred = Vec::new();
        let rounds: HashMap<String, u32> = transfers
            .iter()
            .map(|(t, r)| (t.payout_id.clone(), *r))
            .collect();
        let mut queue: Vec<Transfer> = transfers.into_iter().map(|(t, _)| t).collect();
        let mut inflight = Vec::new();
        while !queue.is_empty() {
            // Every recipient's token account is inspected right before signing: an
            // existing one must be a token account of the mint owned by the wallet.
            let accounts = match self
                .with_rpc_retries(|| {
                    inspect_token_accounts(self.chain.as_ref(), &params.mint, &queue)
                })
                .await
            {
                Ok(a) => a,
                Err(e) => {
                    not_sent(report, &queue, &e.to_string());
                    return Ok((inflight, deferred));
                }
            };
            if !accounts.refused.is_empty() {
                queue.retain(|t| match accounts.refused.get(&t.wallet) {
                    Some(refusal) => {
                        tracing::warn!(payout_id = %t.payout_id, code = refusal.code(), %refusal, "recipient token account refused; not signed");
                        report.payouts.insert(
                            t.payout_id.clone(),
                            PayoutOutcome::Refused {
                                code: refusal.code(),
                                reason: refusal.to_string(),
                            },
                        );
                        false
                    }
                    None => true,
                });
            }
            let batches = pack(
                &params,
                tables,
                &queue,
                &accounts.missing,
                &mut new_attempt_id,
            );
            queue.clear();
            for batch in batches {
                if inflight.len() >= room {
                    deferred.extend(batch.transfers.into_iter().map(|t| {
                        let round = rounds.get(&t.payout_id).copied().unwrap_or(0);
                        (t, round)
                    }));
                    continue;
                }
                match self.prepare(&params, tables, &batch).await {
                    Prepared::Ready(tx, blockhash, last_valid_block_height) => {
                        let attempt = SignedAttempt {
                            attempt_id: batch.attempt_id.clone(),
                            payout_ids: batch.payout_ids(),
                            transfers: batch.transfers.clone(),
                            tx_bytes: bincode::serialize(&tx)
                                .map_err(|e| PayError::Signing(e.to_string()))?,
                            signature: tx.signatures[0].to_string(),
                            blockhash: blockhash.to_string(),
                            last_valid_block_height,
                        };
                        // Durable before sending: the core of exactly-once.
                        if let Err(refused) = self.journal.record_signed(&attempt).await {
                            // Not journaled, so never sent: payouts another attempt holds
                            // are left to it, the rest are packed again without them. If
                            // this attempt holds any, it was journaled after all and the
                            // journal failed: stop (the next call resumes it).
                            let holders = self.journal.holders(&attempt.payout_ids).await?;
                            if holders.is_empty()
                                || holders.iter().any(|(_, a)| *a == attempt.attempt_id)
                            {
                                return Err(refused.into());
                            }
                            let held: HashSet<String> =
                                holders.into_iter().map(|(payout, _)| payout).collect();
                            tracing::warn!(attempt_id = %attempt.attempt_id, held = held.len(), error = %refused, "payouts already held by another attempt; not signing them again");
                            for t in batch.transfers {
                                if held.contains(&t.payout_id) {
                                    report.payouts.insert(
                                        t.payout_id,
                                        PayoutOutcome::NotSent {
                                            reason: "another attempt holds this payout; the next pass settles it".into(),
                                        },
                                    );
                                } else {
                                    queue.push(t);
                                }
                            }
                            continue;
                        }
                        tracing::info!(
                            attempt_id = %attempt.attempt_id,
                            signature = %attempt.signature,
                            payouts = attempt.payout_ids.len(),
                            version = match tx.version() {
                                solana_transaction::versioned::TransactionVersion::Legacy(_) => "legacy".to_owned(),
                                solana_transaction::versioned::TransactionVersion::Number(n) => format!("v{n}"),
                            },
                            last_valid_block_height,
                            "signed and journaled"
                        );
                        let round = batch
                            .transfers
                            .iter()
                            .filter_map(|t| rounds.get(&t.payout_id))
                            .copied()
                            .max()
                            .unwrap_or(0);
                        let mut flight = InFlight {
                            signature: tx.signatures[0],
                            tx,
                            attempt,
                            last_broadcast: None,
                            round,
                        };
                        self.broadcast(&mut flight).await;
                        inflight.push(flight);
                    }
                    Prepared::Reject { index, reason } => {
                        let mut rest = batch.transfers;
                        let bad = rest.remove(index);
                        tracing::warn!(payout_id = %bad.payout_id, %reason, "transfer rejected by simulation");
                        report
                            .payouts
                            .insert(bad.payout_id, PayoutOutcome::Rejected { reason });
                        queue.extend(rest);
                    }
                    Prepared::RejectAll(reason) => {
                        for t in batch.transfers {
                            report.payouts.insert(
                                t.payout_id,
                                PayoutOutcome::Rejected {
                                    reason: reason.clone(),
                                },
                            );
                        }
                    }
                    Prepared::Unreachable(reason) => not_sent(report, &batch.transfers, &reason),
                }
            }
        }
        Ok((inflight, deferred))
    }

    /// Simulate a batch (unsigned, max compute limit) and sign the final transaction.
    async fn prepare(&self, params: &PackParams, tables: &LookupTables, batch: &Batch) -> Prepared {
        self.prepare_with(
            &|units, blockhash| batch.unsigned_transaction(params, tables, units, blockhash),
            &|index| batch.transfer_of_instruction(index),
        )
        .await
    }

    /// Simulate the transaction `build` makes (unsigned, max compute limit), then sign it
    /// with the simulated units. `culprit` maps a failing instruction to the transfer it
    /// belongs to.
    async fn prepare_with(
        &self,
        build: &(dyn Fn(u32, Hash) -> VersionedTransaction + Sync),
        culprit: &(dyn Fn(u8) -> Option<usize> + Sync),
    ) -> Prepared {
        const BLOCKHASH_REFRESHES_MAX: u32 = 3;
        let mut refreshes = 0;
        loop {
            let (blockhash, last_valid) = match self
                .with_rpc_retries(|| self.chain.latest_blockhash())
                .await
            {
                Ok(b) => b,
                Err(e) => return Prepared::Unreachable(e.to_string()),
            };
            // Unsigned: no signed bytes leave the process before they are journaled.
            let probe = build(COMPUTE_UNIT_LIMIT_MAX, blockhash);
            let units = match self
                .with_rpc_retries(|| self.chain.simulate_units(&probe))
                .await
            {
                Ok(units) => units,
                Err(ChainError::Rpc(reason)) => return Prepared::Unreachable(reason),
                Err(ChainError::Transaction(failure)) => {
                    if failure.message.contains("Blockhash not found")
                        && refreshes < BLOCKHASH_REFRESHES_MAX
                    {
                        refreshes += 1;
                        continue;
                    }
                    if exceeds_transaction_limit(&failure.message) {
                        // The transaction as a whole is too large for the runtime: no
                        // payout is at fault, so none is rejected; they stay unsent.
                        return Prepared::Unreachable(format!(
                            "transaction over a runtime limit (packing): {}",
                            failure.message
                        ));
                    }
                    return match failure.instruction_index.and_then(culprit) {
                        Some(index) => Prepared::Reject {
                            index,
                            reason: failure.message,
                        },
                        None => Prepared::RejectAll(failure.message),
                    };
                }
            };
            let unsigned = build(compute_unit_limit_for(units), blockhash);
            return match VersionedTransaction::try_new(unsigned.message, &[self.treasury.keypair()])
            {
                Ok(tx) => Prepared::Ready(tx, blockhash, last_valid),
                Err(e) => Prepared::RejectAll(format!("signing failed: {e}")),
            };
        }
    }

    /// The lookup tables to pack `transfers` against: the journal's tables as the chain
    /// has them, after creating or extending tables for the accounts they lack (when the
    /// call has at least `lookup_tables_min_transfers` transfers; at most
    /// `lookup_table_rounds_max` rounds of maintenance transactions, each awaited until
    /// final). Any trouble falls back to the tables there are, legacy packing at worst:
    /// tables make transactions denser, they never decide whether a payout is paid. The one
    /// exception is a table the node describes otherwise than the journal
    /// ([`PayError::LookupTable`]): that stops the call, before anything is signed.
    async fn lookup_tables_for(
        &self,
        transfers: &[Transfer],
        report: &mut PayReport,
    ) -> Result<LookupTables, PayError> {
        if !self.config.lookup_tables {
            return Ok(LookupTables::none());
        }
        let params = self.pack_params();
        let wanted = lookup_addresses(&params, transfers);
        let mut rounds = 0u32;
        loop {
            let Some(tables) = self.treasury_tables(&params).await? else {
                return Ok(LookupTables::none());
            };
            let missing = tables.missing(&wanted);
            if missing.is_empty()
                || transfers.len() < self.config.lookup_tables_min_transfers
                || rounds >= self.config.lookup_table_rounds_max
            {
                return Ok(tables);
            }
            // One live maintenance attempt at a time: one left open (RPC trouble) is
            // settled by the next resume before any table is planned again.
            let open = self.journal.open_attempts().await?;
            if open.iter().any(|a| a.transfers.is_empty()) {
                return Ok(tables);
            }
            let Ok(tip) = self
                .with_rpc_retries(|| self.chain.tip(Confirmation::Finalized))
                .await
            else {
                return Ok(tables);
            };
            let fee = self.config.priority_fee_micro_lamports;
            let mut work = plan(
                &tables,
                &params.treasury,
                &missing,
                tip.slot,
                &budget_for_sizing(fee),
            );
            // Within the in-flight limit; the rest is planned again in the next round.
            work.truncate(self.config.transactions_in_flight_max.max(1));
            tracing::info!(
                missing = missing.len(),
                transactions = work.len(),
                round = rounds,
                "extending lookup tables"
            );
            let inflight = self.send_maintenance(&work).await?;
            if inflight.is_empty() {
                return Ok(tables);
            }
            let waited = self.wait(inflight, report, Until::AllResolved).await?;
            debug_assert!(
                waited.expired.is_empty(),
                "maintenance attempts carry no transfers"
            );
            rounds += 1;
        }
    }

    /// The treasury's tables as the chain holds them, each checked against what the
    /// journaled maintenance transactions put in it; `None` when they cannot be read (the
    /// pass then packs legacy transactions). A table the node describes otherwise stops the
    /// call ([`PayError::LookupTable`]): no table is used, and nothing is signed.
    async fn treasury_tables(&self, params: &PackParams) -> Result<Option<LookupTables>, PayError> {
        let history = self.table_history().await?;
        if history.tables().is_empty() {
            return Ok(Some(LookupTables::none()));
        }
        let accounts = match self
            .with_rpc_retries(|| self.chain.accounts(history.tables()))
            .await
        {
            Ok(accounts) => accounts,
            Err(e) => {
                tracing::warn!(error = %e, "lookup tables unreadable; packing legacy transactions");
                return Ok(None);
            }
        };
        match LookupTables::verified(&params.treasury, &history, &accounts) {
            Ok(tables) => Ok(Some(tables)),
            Err(refused) => {
                tracing::error!(
                    code = refused.code(),
                    table = %refused.table(),
                    error = %refused,
                    "lookup table differs from what the treasury put in it; signing nothing"
                );
                Err(refused.into())
            }
        }
    }

    /// What the treasury put in its tables: the maintenance transactions of the journal,
    /// landed and open.
    async fn table_history(&self) -> Result<TableHistory, PayError> {
        let works = |attempts: Vec<SignedAttempt>| -> Result<Vec<_>, PayError> {
            let mut works = Vec::new();
            for attempt in attempts.iter().filter(|a| a.transfers.is_empty()) {
                works.extend(maintenance_of(&attempt.transaction()?));
            }
            Ok(works)
        };
        let landed = works(self.journal.landed_maintenance().await?)?;
        let open = works(self.journal.open_attempts().await?)?;
        Ok(TableHistory::new(landed, open))
    }

    /// The table maintenance a pass over `transfers` will send first (what the preflight
    /// counts): none without tables or below `lookup_tables_min_transfers`.
    async fn table_growth(&self, transfers: &[Transfer]) -> Result<TableGrowth, PayError> {
        if !self.config.lookup_tables || transfers.len() < self.config.lookup_tables_min_transfers {
            return Ok(TableGrowth::default());
        }
        let params = self.pack_params();
        let Some(tables) = self.treasury_tables(&params).await? else {
            return Ok(TableGrowth::default());
        };
        let missing = tables.missing(&lookup_addresses(&params, transfers));
        Ok(growth(
            &tables,
            &params.treasury,
            &missing,
            &budget_for_sizing(self.config.priority_fee_micro_lamports),
        ))
    }

    /// Sign, journal and send the maintenance transactions of `work`.
    async fn send_maintenance(
        &self,
        work: &[crate::lookup::TableWork],
    ) -> Result<Vec<InFlight>, PayError> {
        let treasury = self.treasury.pubkey();
        let fee = self.config.priority_fee_micro_lamports;
        let mut inflight = Vec::with_capacity(work.len());
        for w in work {
            let build = |units: u32, blockhash: Hash| {
                let mut ixs = budget_instructions(units, fee);
                ixs.extend(w.instructions(&treasury));
                unsigned(&treasury, &ixs, &LookupTables::none(), blockhash)
            };
            let (tx, blockhash, last_valid_block_height) = match self
                .prepare_with(&build, &|_| None)
                .await
            {
                Prepared::Ready(tx, blockhash, last_valid) => (tx, blockhash, last_valid),
                Prepared::Reject { reason, .. }
                | Prepared::RejectAll(reason)
                | Prepared::Unreachable(reason) => {
                    tracing::warn!(table = %w.table, %reason, "lookup table transaction not sent");
                    continue;
                }
            };
            let attempt = SignedAttempt {
                attempt_id: new_attempt_id(),
                payout_ids: Vec::new(),
                transfers: Vec::new(),
                tx_bytes: bincode::serialize(&tx).map_err(|e| PayError::Signing(e.to_string()))?,
                signature: tx.signatures[0].to_string(),
                blockhash: blockhash.to_string(),
                last_valid_block_height,
            };
            // Durable before sending, like a payment.
            if let Err(refused) = self.journal.record_signed(&attempt).await {
                // Another payer's table transaction with the same table or addresses became
                // visible (a killed payer's last record, committed late): it is resumed at
                // the end of this call; plan no more.
                let open = self.journal.open_attempts().await?;
                if open.iter().any(|a| {
                    a.transfers.is_empty()
                        && a.attempt_id != attempt.attempt_id
                        && !inflight
                            .iter()
                            .any(|f: &InFlight| f.attempt.attempt_id == a.attempt_id)
                }) {
                    tracing::warn!(error = %refused, "another lookup-table transaction is in flight; not extending the tables now");
                    break;
                }
                return Err(refused.into());
            }
            tracing::info!(attempt_id = %attempt.attempt_id, table = %w.table, created = w.create_slot.is_some(), addresses = w.addresses.len(), "lookup table transaction signed and journaled");
            let mut flight = InFlight {
                signature: tx.signatures[0],
                tx,
                attempt,
                last_broadcast: None,
                round: 0,
            };
            self.broadcast(&mut flight).await;
            inflight.push(flight);
        }
        Ok(inflight)
    }

    /// Send (or resend) the exact stored bytes. Errors prove nothing and are only logged.
    async fn broadcast(&self, flight: &mut InFlight) {
        flight.last_broadcast = Some(Instant::now());
        match self.chain.send_transaction(&flight.tx).await {
            Ok(_) => {}
            Err(e) => tracing::warn!(
                attempt_id = %flight.attempt.attempt_id,
                error = %e,
                "send failed; waiting for status (never re-signing on a send error)"
            ),
        }
    }

    /// Poll until every attempt has an outcome, the timeout passes or RPC fails
    /// `rpc_retries_max` times in a row. Returns the transfers of expired attempts.
    async fn wait(
        &self,
        mut inflight: Vec<InFlight>,
        report: &mut PayReport,
        until: Until,
    ) -> Result<Waited, PayError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.wait_timeout_ms);
        let rebroadcast_every = Duration::from_millis(self.config.rebroadcast_interval_ms);
        let mut failures = 0u32;
        let mut expired = Vec::new();
        while !inflight.is_empty() {
            if Instant::now() >= deadline {
                tracing::warn!(open = inflight.len(), "wait timeout; leaving attempts open");
                break;
            }
            tokio::time::sleep(Duration::from_millis(self.config.poll_interval_ms)).await;

            // Order matters: the finalized tip is read before the statuses, so a
            // signature unknown to a node that has reached that tip, with the tip's
            // block height above the last valid one, is provably expired.
            let polled = match self.chain.tip(Confirmation::Finalized).await {
                Ok(tip) => {
                    let signatures: Vec<Signature> = inflight.iter().map(|f| f.signature).collect();
                    self.statuses(&signatures).await.map(|s| (tip, s))
                }
                Err(e) => Err(e),
            };
            let (finalized, (context_slot, statuses)) = match polled {
                Ok(p) => {
                    failures = 0;
                    p
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(failures, error = %e, "status poll failed (proves nothing)");
                    if failures > self.config.rpc_retries_max {
                        tracing::error!("rpc retries exhausted; leaving attempts open");
                        break;
                    }
                    tokio::time::sleep(self.backoff(failures)).await;
                    continue;
                }
            };
            // A lagging node (e.g. behind a load balancer) proves nothing by "not found".
            let statuses_current = context_slot >= finalized.slot;

            let inflight_before = inflight.len();
            let mut still = Vec::with_capacity(inflight.len());
            for (mut flight, status) in inflight.into_iter().zip(statuses) {
                match status {
                    Some(SigStatus {
                        confirmation: Confirmation::Finalized,
                        slot,
                        err,
                    }) => {
                        let outcome = match err {
                            None => AttemptOutcome::Landed { slot },
                            Some(reason) => AttemptOutcome::Failed { reason },
                        };
                        self.resolve(&flight, outcome, report).await?;
                    }
                    Some(_) => still.push(flight), // landed, not final yet
                    None if statuses_current
                        && is_expired(finalized, flight.attempt.last_valid_block_height) =>
                    {
                        self.resolve(&flight, AttemptOutcome::Expired, report)
                            .await?;
                        let round = flight.round + 1;
                        expired.extend(flight.attempt.transfers.into_iter().map(|t| (t, round)));
                    }
                    None => {
                        let due = flight
                            .last_broadcast
                            .is_none_or(|at| at.elapsed() >= rebroadcast_every);
                        if due {
                            self.broadcast(&mut flight).await;
                        }
                        still.push(flight);
                    }
                }
            }
            let resolved = still.len() < inflight_before;
            inflight = still;
            if until == Until::Room && resolved && !inflight.is_empty() {
                return Ok(Waited {
                    expired,
                    left_open: 0,
                    in_flight: inflight,
                });
            }
        }
        let left_open = inflight.len();
        for flight in inflight {
            for id in &flight.attempt.payout_ids {
                report.payouts.insert(
                    id.clone(),
                    PayoutOutcome::Pending {
                        attempt_id: flight.attempt.attempt_id.clone(),
                        signature: flight.attempt.signature.clone(),
                    },
                );
            }
            report.attempts.push(AttemptReport {
                attempt_id: flight.attempt.attempt_id.clone(),
                signature: flight.attempt.signature.clone(),
                payout_ids: flight.attempt.payout_ids.clone(),
                outcome: None,
            });
        }
        Ok(Waited {
            expired,
            left_open,
            in_flight: Vec::new(),
        })
    }

    /// Statuses in chunks, with the lowest context slot of the answers.
    async fn statuses(
        &self,
        signatures: &[Signature],
    ) -> Result<(u64, Vec<Option<SigStatus>>), ChainError> {
        let mut all = Vec::with_capacity(signatures.len());
        let mut context_slot = u64::MAX;
        for chunk in signatures.chunks(SIGNATURES_PER_STATUS_REQUEST_MAX) {
            let answer = self.chain.signature_statuses(chunk, true).await?;
            if answer.statuses.len() != chunk.len() {
                return Err(ChainError::Rpc(format!(
                    "node returned {} statuses for {} signatures",
                    answer.statuses.len(),
                    chunk.len()
                )));
            }
            context_slot = context_slot.min(answer.context_slot);
            all.extend(answer.statuses);
        }
        Ok((context_slot, all))
    }

    async fn resolve(
        &self,
        flight: &InFlight,
        outcome: AttemptOutcome,
        report: &mut PayReport,
    ) -> Result<(), PayError> {
        self.journal
            .record_outcome(&flight.attempt.attempt_id, &outcome)
            .await?;
        tracing::info!(
            attempt_id = %flight.attempt.attempt_id,
            signature = %flight.attempt.signature,
            outcome = outcome.kind(),
            slot = outcome.slot(),
            reason = outcome.reason(),
            "attempt resolved"
        );
        for id in &flight.attempt.payout_ids {
            let payout = match &outcome {
                AttemptOutcome::Landed { slot } => PayoutOutcome::Settled {
                    attempt_id: flight.attempt.attempt_id.clone(),
                    signature: flight.attempt.signature.clone(),
                    slot: *slot,
                },
                AttemptOutcome::Failed { reason } => PayoutOutcome::Failed {
                    attempt_id: flight.attempt.attempt_id.clone(),
                    signature: flight.attempt.signature.clone(),
                    reason: reason.clone(),
                },
                // Re-signed next; the replacement's outcome overwrites this.
                AttemptOutcome::Expired => PayoutOutcome::NotSent {
                    reason: "expired; being re-signed".into(),
                },
            };
            report.payouts.insert(id.clone(), payout);
        }
        report.attempts.push(AttemptReport {
            attempt_id: flight.attempt.attempt_id.clone(),
            signature: flight.attempt.signature.clone(),
            payout_ids: flight.attempt.payout_ids.clone(),
            outcome: Some(outcome),
        });
        Ok(())
    }
}

/// When [`Payer::wait`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Until {
    /// Every attempt resolved (or the wait timed out or ran out of RPC retries).
    AllResolved,
    /// As soon as one attempt resolved: there is room to sign another.
    Room,
}

/// What [`Payer::wait`] ends with.
struct Waited {
    /// The transfers of provably expired attempts, with their re-sign round.
    expired: Vec<(Transfer, u32)>,
    /// Attempts still unresolved (timeout or RPC trouble): open for the next call.
    left_open: usize,
    /// [`Until::Room`]: the attempts still in flight, to be waited for further.
    in_flight: Vec<InFlight>,
}

enum Prepared {
    Ready(VersionedTransaction, Hash, u64),
    Reject { index: usize, reason: String },
    RejectAll(String),
    Unreachable(String),
}

fn not_sent(report: &mut PayReport, transfers: &[Transfer], reason: &str) {
    for t in transfers {
        report.payouts.insert(
            t.payout_id.clone(),
            PayoutOutcome::NotSent {
                reason: reason.to_string(),
            },
        );
    }
}

/// True for a simulation error that blames the transaction's size, not an instruction's
/// accounts: the instruction trace, the compute budget or the account locks.
fn exceeds_transaction_limit(message: &str) -> bool {
    const LIMITS: [&str; 4] = [
        "Max instruction trace length exceeded",
        "exceeded CUs meter",
        "Computational budget exceeded",
        "too many account locks",
    ];
    LIMITS.iter().any(|limit| message.contains(limit))
}

/// [`not_sent`] for transfers that carry their re-sign round.
fn not_sent_rounds(report: &mut PayReport, transfers: Vec<(Transfer, u32)>, reason: &str) {
    let transfers: Vec<Transfer> = transfers.into_iter().map(|(t, _)| t).collect();
    not_sent(report, &transfers, reason);
}

/// The expiry rule: the finalized block height is past the last valid block height.
/// (Together with "signature unknown, searched in history, by a node at or past
/// that tip", this proves the transaction can never land.)
pub fn is_expired(finalized: Tip, last_valid_block_height: u64) -> bool {
    finalized.block_height > last_valid_block_height
}

/// A fresh attempt id: `att-` and 16 random hex digits.
pub fn new_attempt_id() -> String {
    format!("att-{:016x}", rand::random::<u64>())
}

/// Errors that may be transport errors (retryable, proving nothing).
trait RpcErrorLike: std::fmt::Display {
    fn is_rpc(&self) -> bool;
    fn describe(&self) -> String {
        self.to_string()
    }
}

impl RpcErrorLike for ChainError {
    fn is_rpc(&self) -> bool {
        ChainError::is_rpc(self)
    }
}

impl RpcErrorLike for PreflightError {
    fn is_rpc(&self) -> bool {
        matches!(self, PreflightError::Chain(e) if e.is_rpc())
    }
}
