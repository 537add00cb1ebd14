//! The payout lifecycle (SPEC §3, §6) after a run created a payout: the commands that move
//! a payout along the one transition table of [`crate::domain::payout`].
//!
//! Each command is one transaction on the payout's provider stream and idempotent by an
//! idempotency key per payout and event kind (`payout:{id}:{kind}`): repeating it with the
//! same content is a `duplicate`, with other content a `conflict`. A command from a state
//! that does not allow it is `invalid_payout_state`; an unknown id is `unknown_payout`.
//! The rails (Solana, bank) and the admin commands call these.

use sqlx::AnyPool;

use super::corrections::check_text;
use super::{Actor, Applied, Idem, Ledger, LedgerError, book_decided, reject};
use crate::domain::event::provider_stream;
use crate::domain::payout::{self, PayoutCommand};

/// Longest rail reference (a Solana signature is 88 base58 characters; a batch id less).
pub const REFERENCE_LEN_MAX: usize = 128;
/// A SEPA EndToEndId holds at most 35 characters.
pub const END_TO_END_ID_LEN_MAX: usize = 35;

pub use crate::domain::payout::PayoutRecord;
use crate::store::payouts::load;

/// Reads one payout.
pub async fn payout(pool: &AnyPool, payout_id: &str) -> Result<Option<PayoutRecord>, LedgerError> {
    Ok(crate::store::payouts::payout(pool, payout_id).await?)
}

/// The payouts of a provider, oldest first.
pub async fn provider_payouts(
    pool: &AnyPool,
    provider_id: &str,
) -> Result<Vec<PayoutRecord>, LedgerError> {
    Ok(crate::store::payouts::provider_payouts(pool, provider_id).await?)
}

impl Ledger {
    /// Decides a lifecycle command on the payout's provider stream and books its event.
    /// `provider_id`: the payout's provider when the caller knows it (else it is read).
    async fn payout_command(
        &self,
        payout_id: &str,
        provider_id: Option<&str>,
        cmd: PayoutCommand,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let provider_id = match provider_id {
            Some(p) => p.to_owned(),
            None => match payout(self.store.pool(), payout_id).await? {
                Some(found) => found.provider_id,
                None => return reject("unknown_payout", format!("no payout {payout_id}")),
            },
        };
        let idem = Idem::new(
            cmd.key(payout_id),
            &format!("{}|{}", cmd.key(payout_id), cmd.content()),
            format!("{} of payout {payout_id}", cmd.name()),
        );
        let now = self.now_ms();
        crate::ledger::write_stream!(self, &provider_stream(&provider_id), |tx| {
            if let Some(answer) = idem.resent(tx).await? {
                return Ok(answer);
            }
            let Some(current) = load(tx.conn(), payout_id).await? else {
                return reject("unknown_payout", format!("no payout {payout_id}"));
            };
            let events = payout::decide(&current, &cmd)?.into_iter().collect();
            Ok(book_decided(tx, events, actor, now, Some(&idem)))
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
        let mut conn = self.store.pool().acquire().await?;
        let fresh_fx = super::runs::latest_fx_rate(&mut conn, now)
            .await?
            .filter(|(at, _)| now - at <= stale_ms)
            .map(|(_, rate)| rate);
        drop(conn);
        let cmd = PayoutCommand::Release {
            fresh_fx,
            fx_stale_hours: config.fx_stale_hours,
        };
        self.payout_command(payout_id, None, cmd, actor).await
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
        self.payout_command(payout_id, None, PayoutCommand::Cancel { reason }, actor)
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
        check_text(reference, "reference", REFERENCE_LEN_MAX)?;
        if let Some(e2e) = end_to_end_id {
            check_text(e2e, "end_to_end_id", END_TO_END_ID_LEN_MAX)?;
        }
        let cmd = PayoutCommand::Submit {
            reference: reference.trim().to_owned(),
            end_to_end_id: end_to_end_id.map(|e| e.trim().to_owned()),
        };
        self.payout_command(payout_id, None, cmd, actor).await
    }

    /// Records that the Solana rail signed attempt `attempt_id` for the payout, whose
    /// transaction has `signature`: created → submitted, or submitted → submitted when an
    /// expired transaction was signed again. Idempotent per attempt
    /// (`payout:{id}:submitted:{attempt_id}`). A payout its attempt already settled or
    /// failed (a repair after the outcome) is left alone: `duplicate`.
    pub async fn submit_payout_attempt(
        &self,
        payout_id: &str,
        provider_id: &str,
        attempt_id: &str,
        signature: &str,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let cmd = PayoutCommand::SubmitAttempt {
            attempt_id: attempt_id.to_owned(),
            signature: signature.to_owned(),
        };
        self.payout_command(payout_id, Some(provider_id), cmd, actor)
            .await
    }

    /// Records that the money arrived: created/submitted → settled (in transit → treasury).
    pub async fn settle_payout(
        &self,
        payout_id: &str,
        reference: &str,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        check_text(reference, "reference", REFERENCE_LEN_MAX)?;
        let reference = reference.trim().to_owned();
        self.payout_command(payout_id, None, PayoutCommand::Settle { reference }, actor)
            .await
    }

    /// Records that the rail failed before the money arrived: created/submitted → failed;
    /// the amount goes back to payable.
    pub async fn fail_payout(
        &self,
        payout_id: &str,
        reason: &str,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        check_text(reason, "reason", self.config.text_len_max)?;
        let reason = reason.trim().to_owned();
        self.payout_command(payout_id, None, PayoutCommand::Fail { reason }, actor)
            .await
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
        check_text(reason_code, "reason_code", 16)?;
        check_text(reason, "reason", self.config.text_len_max)?;
        let cmd = PayoutCommand::Return {
            reason_code: reason_code.trim().to_owned(),
            reason: reason.trim().to_owned(),
            method_invalid,
        };
        self.payout_command(payout_id, None, cmd, actor).await
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
