//! The payout lifecycle (SPEC §3, §6) after a run created a payout: the commands that move
//! a payout along the one transition table of [`crate::domain::payout`].
//!
//! Each command is one transaction on the payout's provider stream and idempotent by an
//! idempotency key per payout and event kind (`payout:{id}:{kind}`): repeating it with the
//! same content is a `duplicate`, with other content a `conflict`. A command from a state
//! that does not allow it is `invalid_payout_state`; an unknown id is `unknown_payout`.
//! The rails (Solana, bank) and the admin commands call these.

use std::collections::HashSet;

use super::corrections::check_text;
use super::{
    Actor, Applied, Idem, Ledger, LedgerError, book_decided, duplicate_or_conflict, reject,
};
use crate::domain::event::provider_stream;
use crate::domain::ids::ProviderId;
use crate::domain::payout::{self, PayoutCommand};

/// Longest rail reference (a Solana signature is 88 base58 characters; a batch id less).
pub const REFERENCE_LEN_MAX: usize = 128;
/// A SEPA EndToEndId holds at most 35 characters.
pub const END_TO_END_ID_LEN_MAX: usize = 35;

pub use crate::domain::payout::PayoutRecord;
use crate::store::keys::StreamKey;
use crate::store::payouts::load_many;
use crate::store::{Store, WriteTx};

/// Reads one payout.
pub async fn payout(store: &Store, payout_id: &str) -> Result<Option<PayoutRecord>, LedgerError> {
    Ok(crate::store::payouts::payout(store, payout_id).await?)
}

/// The payouts of `payout_ids` that exist, by id, in one statement.
pub async fn payouts(
    store: &Store,
    payout_ids: &[&str],
) -> Result<std::collections::HashMap<String, PayoutRecord>, LedgerError> {
    let mut conn = store.acquire().await?;
    Ok(load_many(&mut conn, payout_ids).await?)
}

/// The payouts of a provider, oldest first.
pub async fn provider_payouts(
    store: &Store,
    provider_id: &str,
) -> Result<Vec<PayoutRecord>, LedgerError> {
    Ok(crate::store::payouts::provider_payouts(store, provider_id).await?)
}

fn unknown(payout_id: &str) -> Result<Applied, LedgerError> {
    reject("unknown_payout", format!("no payout {payout_id}"))
}

/// Inside `tx`, which holds the write locks of the payouts' provider streams: reads their
/// states and booked keys at once, then answers a re-send, or decides the command and
/// books its event on the payout's stream.
async fn decide_payouts_in(
    tx: &mut WriteTx,
    commands: &[(&str, PayoutCommand)],
    idems: &[Idem],
    actor: &Actor,
    now: i64,
) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
    let ids: Vec<&str> = commands.iter().map(|(id, _)| *id).collect();
    let current = load_many(tx.conn(), &ids).await?;
    if let Some(p) = current
        .values()
        .find(|p| !tx.holds_stream(&provider_stream(&p.provider_id)))
    {
        // The caller named the providers (`payout_commands_of`) and missed this one: its
        // stream is not locked, so nothing may be booked on it.
        return reject(
            "invalid_batch",
            format!(
                "payout {} belongs to a provider the batch did not name",
                p.payout_id
            ),
        );
    }
    let keys: Vec<StreamKey> = idems
        .iter()
        .zip(&ids)
        .filter_map(|(idem, id)| {
            let p = current.get(*id)?;
            Some(StreamKey::new(provider_stream(&p.provider_id), &idem.key))
        })
        .collect();
    let booked = crate::store::keys::booked_keys(tx.conn(), &keys).await?;
    let mut answers = Vec::with_capacity(commands.len());
    for ((id, cmd), idem) in commands.iter().zip(idems) {
        let Some(payout) = current.get(*id) else {
            answers.push(unknown(id));
            continue;
        };
        let at = StreamKey::new(provider_stream(&payout.provider_id), &idem.key);
        if let Some(stored) = booked.get(&at) {
            answers.push(duplicate_or_conflict(stored, &idem.hash, &idem.what));
            continue;
        }
        answers.push(match payout::decide(payout, cmd) {
            Ok(events) => {
                tx.use_stream(&at.stream);
                Ok(book_decided(
                    tx,
                    events.into_iter().collect(),
                    actor,
                    now,
                    Some(idem),
                ))
            }
            Err(refused) => Err(refused.into()),
        });
    }
    Ok(answers)
}

/// The same command for each of `payout_ids`.
fn each<'a>(payout_ids: &[&'a str], cmd: &PayoutCommand) -> Vec<(&'a str, PayoutCommand)> {
    payout_ids.iter().map(|id| (*id, cmd.clone())).collect()
}

/// Settlement under the rail's `reference` (checked).
fn settle_command(reference: &str) -> Result<PayoutCommand, LedgerError> {
    check_text(reference, "reference", REFERENCE_LEN_MAX)?;
    Ok(PayoutCommand::Settle {
        reference: reference.trim().to_owned(),
    })
}

/// The answer of a batch of one.
fn only_answer(mut answers: Vec<Result<Applied, LedgerError>>) -> Result<Applied, LedgerError> {
    answers.pop().expect("one answer per command")
}

impl Ledger {
    /// Decides one lifecycle command: [`Ledger::payout_commands`] with one payout.
    async fn payout_command(
        &self,
        payout_id: &str,
        cmd: PayoutCommand,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        only_answer(self.payout_commands(&[(payout_id, cmd)], actor).await?)
    }

    /// Decides lifecycle commands of distinct payouts together: one transaction over their
    /// providers' streams, one statement for their states and one for their idempotency
    /// keys, one commit (what the ~50 payouts of a Solana transaction, or the payouts of a
    /// bank batch, need at once), retried whole when another writer got there first. Each
    /// payout keeps its own stream, sequence and key, so the ledger holds exactly what one
    /// transaction per payout would have written. The answers come in the order of
    /// `commands`, one each: a refusal (unknown payout, a state that does not allow the
    /// command, a conflicting re-send) is that payout's answer and leaves the others alone.
    pub(crate) async fn payout_commands(
        &self,
        commands: &[(&str, PayoutCommand)],
        actor: &Actor,
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        let ids: Vec<&str> = commands.iter().map(|(id, _)| *id).collect();
        // A payout's provider never changes: its stream can be named before the locks.
        let mut conn = self.store.acquire().await?;
        let providers: Vec<ProviderId> = load_many(&mut conn, &ids)
            .await?
            .into_values()
            .map(|p| p.provider_id)
            .collect();
        drop(conn);
        let providers: Vec<&str> = providers.iter().map(|p| p.as_str()).collect();
        self.payout_commands_of(commands, &providers, actor).await
    }

    /// [`Ledger::payout_commands`] for a caller that read the payouts already and names
    /// their providers (any order, repeats allowed): the payouts are not read before the
    /// locks. A payout of a provider not named is refused (`invalid_batch`) inside the
    /// transaction, before anything is booked.
    pub(crate) async fn payout_commands_of(
        &self,
        commands: &[(&str, PayoutCommand)],
        providers: &[&str],
        actor: &Actor,
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        let ids: Vec<&str> = commands.iter().map(|(id, _)| *id).collect();
        if ids.iter().copied().collect::<HashSet<&str>>().len() != ids.len() {
            // A second command would decide against the state before the first one's event.
            return reject(
                "invalid_batch",
                "a payout appears twice in one batch of lifecycle commands",
            );
        }
        let mut streams: Vec<String> = providers.iter().map(|p| provider_stream(p)).collect();
        if streams.is_empty() {
            return Ok(ids.iter().map(|id| unknown(id)).collect());
        }
        streams.sort_unstable();
        streams.dedup();
        let names: Vec<&str> = streams.iter().map(String::as_str).collect();
        let idems: Vec<Idem> = commands
            .iter()
            .map(|(id, cmd)| {
                Idem::new(
                    cmd.key(id),
                    &format!("{}|{}", cmd.key(id), cmd.content()),
                    format!("{} of payout {id}", cmd.name()),
                )
            })
            .collect();
        let now = self.now_ms();
        crate::ledger::write_stream!(self, streams(&names), |tx| {
            decide_payouts_in(tx, commands, &idems, actor, now).await
        })
    }

    /// Releases a held payout (admin): held → in transit; the rail pays it.
    ///
    /// A EUR payout held without an EUR amount (created while the FX rate was stale) is
    /// converted at release with the latest rate, which must be fresh (`runs.fx_stale_hours`);
    /// without one the release is refused (`fx_rate_stale`, naming the commands that fix
    /// it). Cancelling always works.
    pub async fn release_payout(
        &self,
        payout_id: &str,
        config: &crate::config::RunConfig,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let now = self.now_ms();
        let stale_ms = config.fx_stale_hours * super::runs::MS_PER_HOUR;
        let mut conn = self.store.acquire().await?;
        let fresh_fx = super::runs::latest_fx_rate(&mut conn, now)
            .await?
            .filter(|(at, _)| now - at <= stale_ms)
            .map(|(_, rate)| rate);
        drop(conn);
        let cmd = PayoutCommand::Release {
            fresh_fx,
            fx_stale_hours: config.fx_stale_hours,
        };
        self.payout_command(payout_id, cmd, actor).await
    }

    /// Cancels a held payout (admin): held → payable; the next run sees the money again.
    pub async fn cancel_payout(
        &self,
        payout_id: &str,
        reason: &str,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        check_text(reason, "reason", self.config.text_len_max)?;
        let reason = reason.trim().to_owned();
        self.payout_command(payout_id, PayoutCommand::Cancel { reason }, actor)
            .await
    }

    /// Records that a rail sent the payout: created → submitted, with the rail's reference
    /// (Solana: the transaction signature; bank: the batch id) and the end-to-end id.
    pub async fn submit_payout(
        &self,
        payout_id: &str,
        reference: &str,
        end_to_end_id: Option<&str>,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        only_answer(
            self.submit_payouts(&[(payout_id, end_to_end_id)], reference, actor)
                .await?,
        )
    }

    /// [`Ledger::submit_payout`] for several payouts sent under one reference (a bank
    /// batch), each with its end-to-end id, together ([`Ledger::payout_commands`]).
    pub(crate) async fn submit_payouts(
        &self,
        payouts: &[(&str, Option<&str>)],
        reference: &str,
        actor: &Actor,
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        check_text(reference, "reference", REFERENCE_LEN_MAX)?;
        let mut commands = Vec::with_capacity(payouts.len());
        for (payout_id, end_to_end_id) in payouts {
            if let Some(e2e) = end_to_end_id {
                check_text(e2e, "end_to_end_id", END_TO_END_ID_LEN_MAX)?;
            }
            let cmd = PayoutCommand::Submit {
                reference: reference.trim().to_owned(),
                end_to_end_id: end_to_end_id.map(|e| e.trim().to_owned()),
            };
            commands.push((*payout_id, cmd));
        }
        self.payout_commands(&commands, actor).await
    }

    /// Records that the Solana rail signed attempt `attempt_id`, whose transaction has
    /// `signature`, for its payouts, together ([`Ledger::payout_commands`]): created →
    /// submitted, or submitted → submitted when an expired transaction was signed again.
    /// Idempotent per attempt (`payout:{id}:submitted:{attempt_id}`). A payout its attempt
    /// already settled or failed (a repair after the outcome) is left alone: `duplicate`.
    pub(crate) async fn submit_payout_attempt(
        &self,
        payout_ids: &[&str],
        attempt_id: &str,
        signature: &str,
        actor: &Actor,
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        let cmd = PayoutCommand::SubmitAttempt {
            attempt_id: attempt_id.to_owned(),
            signature: signature.to_owned(),
        };
        self.payout_commands(&each(payout_ids, &cmd), actor).await
    }

    /// [`Ledger::settle_payout`] for several payouts together ([`Ledger::payout_commands`]).
    pub async fn settle_payouts(
        &self,
        payout_ids: &[&str],
        reference: &str,
        actor: &Actor,
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        let cmd = settle_command(reference)?;
        self.payout_commands(&each(payout_ids, &cmd), actor).await
    }

    /// [`Ledger::settle_payouts`] of payouts the caller read (a bank answer's matcher): their
    /// providers named from the records ([`Ledger::payout_commands_of`]).
    pub async fn settle_payouts_read(
        &self,
        payouts: &[&PayoutRecord],
        reference: &str,
        actor: &Actor,
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        let cmd = settle_command(reference)?;
        let ids: Vec<&str> = payouts.iter().map(|p| p.payout_id.as_str()).collect();
        let providers: Vec<&str> = payouts.iter().map(|p| p.provider_id.as_str()).collect();
        self.payout_commands_of(&each(&ids, &cmd), &providers, actor)
            .await
    }

    /// [`Ledger::fail_payout`] for several payouts together ([`Ledger::payout_commands`]).
    pub async fn fail_payouts(
        &self,
        payout_ids: &[&str],
        reason: &str,
        actor: &Actor,
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        check_text(reason, "reason", self.config.text_len_max)?;
        let cmd = PayoutCommand::Fail {
            reason: reason.trim().to_owned(),
            method_invalid: false,
            by_bank: false,
        };
        self.payout_commands(&each(payout_ids, &cmd), actor).await
    }

    /// The bank rejected payouts before the money left (a `pain.002` `RJCT`): submitted →
    /// failed with `reason` (the bank's code and its meaning), the amount back to payable;
    /// with `method_invalid` the provider's bank details are blocked until updated. Each
    /// payout with its own reason, together ([`Ledger::payout_commands`]).
    pub(crate) async fn reject_payouts(
        &self,
        rejected: &[(&str, String, bool)],
        actor: &Actor,
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        let mut commands = Vec::with_capacity(rejected.len());
        for (payout_id, reason, method_invalid) in rejected {
            check_text(reason, "reason", self.config.text_len_max)?;
            let cmd = PayoutCommand::Fail {
                reason: reason.trim().to_owned(),
                method_invalid: *method_invalid,
                by_bank: true,
            };
            commands.push((*payout_id, cmd));
        }
        self.payout_commands(&commands, actor).await
    }

    /// Records that the money arrived: created/submitted → settled (in transit → treasury).
    pub async fn settle_payout(
        &self,
        payout_id: &str,
        reference: &str,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        only_answer(self.settle_payouts(&[payout_id], reference, actor).await?)
    }

    /// Records that the rail failed before the money arrived: created/submitted → failed;
    /// the amount goes back to payable.
    pub async fn fail_payout(
        &self,
        payout_id: &str,
        reason: &str,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        only_answer(self.fail_payouts(&[payout_id], reason, actor).await?)
    }

    /// Records a return after settlement (a bank return): settled → returned; treasury →
    /// payable. With `method_invalid`, the provider's bank details are blocked until updated.
    pub async fn return_payout(
        &self,
        payout_id: &str,
        reason_code: &str,
        reason: &str,
        method_invalid: bool,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        only_answer(
            self.return_payouts(&[(payout_id, reason_code, reason)], method_invalid, actor)
                .await?,
        )
    }

    /// [`Ledger::return_payout`] for several distinct payouts `(payout_id, reason_code,
    /// reason)` together ([`Ledger::payout_commands`]).
    pub(crate) async fn return_payouts(
        &self,
        returns: &[(&str, &str, &str)],
        method_invalid: bool,
        actor: &Actor,
    ) -> Result<Vec<Result<Applied, LedgerError>>, LedgerError> {
        let mut commands = Vec::with_capacity(returns.len());
        for (payout_id, reason_code, reason) in returns {
            check_text(reason_code, "reason_code", 16)?;
            check_text(reason, "reason", self.config.text_len_max)?;
            let cmd = PayoutCommand::Return {
                reason_code: reason_code.trim().to_owned(),
                reason: reason.trim().to_owned(),
                method_invalid,
            };
            commands.push((*payout_id, cmd));
        }
        self.payout_commands(&commands, actor).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_checked_at_their_edges() {
        let code = |text: &str| check_text(text, "reason", 4).err().map(|e| e.code());
        assert_eq!(code("abcd"), None, "exactly the limit");
        assert_eq!(code("äöüß"), None, "characters, not bytes");
        assert_eq!(code("abcde"), Some("invalid_text"), "one more");
        assert_eq!(code(""), Some("invalid_text"));
        assert_eq!(code("  "), Some("invalid_text"));
        assert_eq!(code("a\nb"), Some("invalid_text"));
    }
}
