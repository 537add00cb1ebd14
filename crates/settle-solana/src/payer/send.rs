//! Step 2 and 3 of the protocol: lookup tables, packing, simulation, signing, and the
//! journal record before the transaction is sent.

use super::*;

impl Payer {
    /// Pack, simulate, sign, journal and send up to `room` transactions. Transfers whose
    /// simulation fails on their own instructions are rejected (never signed); the rest are
    /// re-packed. Returns the transactions in flight and the transfers left for later.
    pub(super) async fn sign_and_send(
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
            refuse_accounts(&mut queue, &accounts.refused, report);
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
                        let signed = Signed {
                            tx,
                            blockhash,
                            last_valid_block_height,
                        };
                        if let Some(flight) = self
                            .journal_and_send(batch, signed, &rounds, &mut queue, report)
                            .await?
                        {
                            inflight.push(flight);
                        }
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

    /// Journals a signed batch and sends it (step 3): `None` when the journal refused it
    /// because another attempt holds some of its payouts (the others go back to `queue`).
    async fn journal_and_send(
        &self,
        batch: Batch,
        signed: Signed,
        rounds: &HashMap<String, u32>,
        queue: &mut Vec<Transfer>,
        report: &mut PayReport,
    ) -> Result<Option<InFlight>, PayError> {
        let Signed {
            tx,
            blockhash,
            last_valid_block_height,
        } = signed;
        let attempt = SignedAttempt {
            attempt_id: batch.attempt_id.clone(),
            payout_ids: batch.payout_ids(),
            transfers: batch.transfers.clone(),
            tx_bytes: bincode::serialize(&tx).map_err(|e| PayError::Signing(e.to_string()))?,
            signature: tx.signatures[0].to_string(),
            blockhash: blockhash.to_string(),
            last_valid_block_height,
        };
        // Durable before sending: the core of exactly-once.
        if let Err(refused) = self.journal.record_signed(&attempt).await {
            // Not journaled, so never sent: payouts another attempt holds are left to it,
            // the rest are packed again without them. If this attempt holds any, it was
            // journaled after all and the journal failed: stop (the next call resumes it).
            let holders = self.journal.holders(&attempt.payout_ids).await?;
            if holders.is_empty() || holders.iter().any(|(_, a)| *a == attempt.attempt_id) {
                return Err(refused.into());
            }
            let held: HashSet<String> = holders.into_iter().map(|(payout, _)| payout).collect();
            tracing::warn!(attempt_id = %attempt.attempt_id, held = held.len(), error = %refused, "payouts already held by another attempt; not signing them again");
            for t in batch.transfers {
                if held.contains(&t.payout_id) {
                    report.payouts.insert(
                        t.payout_id,
                        PayoutOutcome::NotSent {
                            reason: "another attempt holds this payout; the next pass settles it"
                                .into(),
                        },
                    );
                } else {
                    queue.push(t);
                }
            }
            return Ok(None);
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
        Ok(Some(flight))
    }

    /// Simulate a batch (unsigned, max compute limit) and sign the final transaction.
    pub(super) async fn prepare(
        &self,
        params: &PackParams,
        tables: &LookupTables,
        batch: &Batch,
    ) -> Prepared {
        self.prepare_with(
            &|units, blockhash| batch.unsigned_transaction(params, tables, units, blockhash),
            &|index| batch.transfer_of_instruction(index),
        )
        .await
    }

    /// Simulate the transaction `build` makes (unsigned, max compute limit), then sign it
    /// with the simulated units. `culprit` maps a failing instruction to the transfer it
    /// belongs to.
    pub(super) async fn prepare_with(
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
    pub(super) async fn lookup_tables_for(
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
    pub(super) async fn treasury_tables(
        &self,
        params: &PackParams,
    ) -> Result<Option<LookupTables>, PayError> {
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
    pub(super) async fn table_history(&self) -> Result<TableHistory, PayError> {
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
    pub(super) async fn table_growth(
        &self,
        transfers: &[Transfer],
    ) -> Result<TableGrowth, PayError> {
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
    pub(super) async fn send_maintenance(
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
}

pub(super) enum Prepared {
    Ready(VersionedTransaction, Hash, u64),
    Reject { index: usize, reason: String },
    RejectAll(String),
    Unreachable(String),
}

/// True for a simulation error that blames the transaction's size, not an instruction's
/// accounts: the instruction trace, the compute budget or the account locks.
pub(super) fn exceeds_transaction_limit(message: &str) -> bool {
    pub(super) const LIMITS: [&str; 4] = [
        "Max instruction trace length exceeded",
        "exceeded CUs meter",
        "Computational budget exceeded",
        "too many account locks",
    ];
    LIMITS.iter().any(|limit| message.contains(limit))
}

/// A batch's transaction as signed, with the blockhash it names and its expiry height.
pub(super) struct Signed {
    pub(super) tx: VersionedTransaction,
    pub(super) blockhash: Hash,
    pub(super) last_valid_block_height: u64,
}

/// Drops from `queue` the transfers whose recipient's token account was refused, each
/// reported as refused (never signed).
fn refuse_accounts(
    queue: &mut Vec<Transfer>,
    refused: &HashMap<Pubkey, crate::treasury::TokenAccountRefusal>,
    report: &mut PayReport,
) {
    queue.retain(|t| match refused.get(&t.wallet) {
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
