//! Step 4 of the protocol: statuses polled and the same bytes rebroadcast until an
//! attempt lands, fails or is provably expired.

use super::*;

/// Maximum signatures per `getSignatureStatuses` request.
pub const SIGNATURES_PER_STATUS_REQUEST_MAX: usize = 256;

impl Payer {
    /// Send (or resend) the exact stored bytes. Errors prove nothing and are only logged.
    pub(super) async fn broadcast(&self, flight: &mut InFlight) {
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
    pub(super) async fn wait(
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

            let polled = self.poll(&inflight).await;
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
            let polled = Polled {
                finalized,
                statuses,
                current: statuses_current,
            };
            let still = self
                .settle_polled(inflight, polled, rebroadcast_every, report, &mut expired)
                .await?;
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
        report_open(inflight, report);
        Ok(Waited {
            expired,
            left_open,
            in_flight: Vec::new(),
        })
    }

    /// The finalized tip, then the statuses of `inflight`'s signatures. Order matters: the
    /// tip is read before the statuses, so a signature unknown to a node that has reached
    /// that tip, with the tip's block height above the last valid one, is provably expired.
    async fn poll(
        &self,
        inflight: &[InFlight],
    ) -> Result<(Tip, (u64, Vec<Option<SigStatus>>)), ChainError> {
        let tip = self.chain.tip(Confirmation::Finalized).await?;
        let signatures: Vec<Signature> = inflight.iter().map(|f| f.signature).collect();
        self.statuses(&signatures).await.map(|s| (tip, s))
    }

    /// Resolves the attempts a poll found final or provably expired (the transfers of
    /// expired ones go to `expired`, a round later), rebroadcasts the unknown ones when due,
    /// and returns the attempts still open.
    async fn settle_polled(
        &self,
        inflight: Vec<InFlight>,
        polled: Polled,
        rebroadcast_every: Duration,
        report: &mut PayReport,
        expired: &mut Vec<(Transfer, u32)>,
    ) -> Result<Vec<InFlight>, PayError> {
        let mut still = Vec::with_capacity(inflight.len());
        for (mut flight, status) in inflight.into_iter().zip(polled.statuses) {
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
                None if polled.current
                    && is_expired(polled.finalized, flight.attempt.last_valid_block_height) =>
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
        Ok(still)
    }

    /// Statuses in chunks, with the lowest context slot of the answers.
    pub(super) async fn statuses(
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

    pub(super) async fn resolve(
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
pub(super) enum Until {
    /// Every attempt resolved (or the wait timed out or ran out of RPC retries).
    AllResolved,
    /// As soon as one attempt resolved: there is room to sign another.
    Room,
}

/// What [`Payer::wait`] ends with.
pub(super) struct Waited {
    /// The transfers of provably expired attempts, with their re-sign round.
    pub(super) expired: Vec<(Transfer, u32)>,
    /// Attempts still unresolved (timeout or RPC trouble): open for the next call.
    pub(super) left_open: usize,
    /// [`Until::Room`]: the attempts still in flight, to be waited for further.
    pub(super) in_flight: Vec<InFlight>,
}

/// The expiry rule: the finalized block height is past the last valid block height.
/// (Together with "signature unknown, searched in history, by a node at or past
/// that tip", this proves the transaction can never land.)
pub fn is_expired(finalized: Tip, last_valid_block_height: u64) -> bool {
    finalized.block_height > last_valid_block_height
}

/// One poll's answer: the finalized tip read first, the statuses in the order asked, and
/// whether the node that answered had reached that tip (a lagging node proves nothing by
/// "not found").
struct Polled {
    finalized: Tip,
    statuses: Vec<Option<SigStatus>>,
    current: bool,
}

/// Reports the attempts a wait left open: each payout pending on its attempt.
fn report_open(inflight: Vec<InFlight>, report: &mut PayReport) {
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
}
