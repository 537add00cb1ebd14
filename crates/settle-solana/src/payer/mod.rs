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

mod journal;
mod report;
mod send;
mod wait;

pub use journal::*;
pub use report::*;

pub use wait::*;

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

/// An attempt being waited for.
struct InFlight {
    attempt: SignedAttempt,
    tx: VersionedTransaction,
    signature: Signature,
    last_broadcast: Option<Instant>,
    /// How many times these transfers were already re-signed in this call.
    round: u32,
}

/// Refuses a call that names a payout twice, pays nothing, or pays an off-curve wallet.
fn check_transfers(transfers: &[Transfer]) -> Result<(), PayError> {
    let mut seen = HashSet::new();
    for t in transfers {
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
    Ok(())
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
        check_transfers(&transfers)?;
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
            self.check_preflight(&fresh).await?;
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

    /// The treasury holds what paying `fresh` needs (USDC, SOL for fees, rent and tables).
    async fn check_preflight(&self, fresh: &[Transfer]) -> Result<(), PayError> {
        let params = self.pack_params();
        let tables = self.table_growth(fresh).await?;
        let summary = self
            .with_rpc_retries(|| preflight(self.chain.as_ref(), &params, fresh, tables))
            .await
            .map_err(PayError::Preflight)?;
        tracing::info!(
            usdc_needed_micro = summary.usdc_needed_micro,
            usdc_available_micro = summary.usdc_available_micro,
            transactions = summary.transactions,
            atas_to_create = summary.atas_to_create,
            tables_created = summary.tables.tables_created,
            table_addresses = summary.tables.addresses,
            lamports_needed = summary.lamports_needed,
            lamports_available = summary.lamports_available,
            "preflight passed"
        );
        Ok(())
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

/// [`not_sent`] for transfers that carry their re-sign round.
fn not_sent_rounds(report: &mut PayReport, transfers: Vec<(Transfer, u32)>, reason: &str) {
    let transfers: Vec<Transfer> = transfers.into_iter().map(|(t, _)| t).collect();
    not_sent(report, &transfers, reason);
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
