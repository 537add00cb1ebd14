//! Signed attempts and the journal that holds them before they are sent: its records,
//! the checks a record must pass against what the journal holds, in memory and in a file.

use super::*;

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
    pub(super) attempt_id: String,
    pub(super) transfers: Vec<TransferRecord>,
    pub(super) tx_base64: String,
    pub(super) signature: String,
    pub(super) blockhash: String,
    pub(super) last_valid_block_height: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TransferRecord {
    pub(super) payout_id: String,
    pub(super) wallet: String,
    pub(super) amount_micro_usdc: u64,
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
pub(super) struct JournalState {
    pub(super) attempts: Vec<SignedAttempt>,
    pub(super) outcomes: HashMap<String, AttemptOutcome>,
}

impl JournalState {
    /// Check that `attempt` may be recorded: new id, and none of its payouts open.
    pub(super) fn check_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError> {
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

    pub(super) fn apply_signed(&mut self, attempt: SignedAttempt) -> Result<(), JournalError> {
        self.check_signed(&attempt)?;
        self.attempts.push(attempt);
        Ok(())
    }

    /// Check that `attempt_id` exists and has no outcome yet.
    pub(super) fn check_outcome(&self, attempt_id: &str) -> Result<(), JournalError> {
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

    pub(super) fn apply_outcome(
        &mut self,
        attempt_id: &str,
        outcome: AttemptOutcome,
    ) -> Result<(), JournalError> {
        self.check_outcome(attempt_id)?;
        self.outcomes.insert(attempt_id.to_string(), outcome);
        Ok(())
    }

    pub(super) fn open(&self) -> impl Iterator<Item = &SignedAttempt> {
        self.attempts
            .iter()
            .filter(|a| !self.outcomes.contains_key(&a.attempt_id))
    }

    pub(super) fn holders(&self, payout_ids: &[String]) -> Vec<(String, String)> {
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

    pub(super) fn lookup_tables(&self) -> Vec<Pubkey> {
        landed_tables(self.landed_maintenance())
    }

    pub(super) fn landed_maintenance(&self) -> impl Iterator<Item = &SignedAttempt> {
        self.attempts.iter().filter(|a| {
            a.transfers.is_empty()
                && matches!(
                    self.outcomes.get(&a.attempt_id),
                    Some(AttemptOutcome::Landed { .. })
                )
        })
    }

    pub(super) fn resolved(&self, payout_ids: &[String]) -> Vec<String> {
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
    pub(super) state: Mutex<(JournalState, Vec<JournalRecord>)>,
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
    pub(super) path: PathBuf,
    pub(super) inner: Mutex<(JournalState, File)>,
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

    pub(super) fn append(file: &mut File, record: &JournalRecord) -> Result<(), JournalError> {
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
