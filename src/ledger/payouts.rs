//! The payout lifecycle (SPEC §3, §6) after a run created a payout: the commands that move
//! a payout along the one transition table of [`crate::domain::payout`].
//!
//! Each command is one transaction on the payout's provider stream and idempotent by an
//! idempotency key per payout and event kind (`payout:{id}:{kind}`): repeating it with the
//! same content is a `duplicate`, with other content a `conflict`. A command from a state
//! that does not allow it is `invalid_payout_state`; an unknown id is `unknown_payout`.
//! The rails (Solana, bank) and the admin commands call these.

use sqlx::AnyPool;

use super::{
    Actor, Applied, Ledger, LedgerError, content_hash, duplicate_or_conflict, find_idem, reject,
};
use crate::domain::event::*;
use crate::domain::payout::{PayoutStatus, PayoutStep};
use crate::store::NewEvent;

/// Longest rail reference (a Solana signature is 88 base58 characters; a batch id less).
pub const REFERENCE_LEN_MAX: usize = 128;
/// A SEPA EndToEndId holds at most 35 characters.
pub const END_TO_END_ID_LEN_MAX: usize = 35;

pub use crate::store::payouts::PayoutRecord;
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

fn check_text(text: &str, what: &str, max: usize) -> Result<(), LedgerError> {
    if text.trim().is_empty() || text.chars().count() > max || text.chars().any(char::is_control) {
        return reject(
            "invalid_text",
            format!("{what} must be 1..={max} characters without control characters"),
        );
    }
    Ok(())
}

/// One lifecycle step: the transition, and its event.
struct Step<'a> {
    step: PayoutStep,
    /// The command's normalised content (to tell a duplicate from a conflict).
    content: String,
    make: &'a (dyn Fn(&PayoutRecord) -> EventBody + Sync),
}

impl Ledger {
    async fn payout_step(
        &self,
        payout_id: &str,
        step: Step<'_>,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let Some(found) = payout(self.store.pool(), payout_id).await? else {
            return reject("unknown_payout", format!("no payout {payout_id}"));
        };
        let kind = step.step.name();
        let key = format!("payout:{payout_id}:{kind}");
        let hash = content_hash(&format!("{key}|{}", step.content));
        let now = self.now_ms();
        crate::write_stream!(self, &provider_stream(&found.provider_id), |tx| {
            if let Some(stored) = find_idem(tx, &key).await? {
                return duplicate_or_conflict(
                    &stored,
                    &hash,
                    &format!("{kind} of payout {payout_id}"),
                );
            }
            let Some(current) = load(tx.conn(), payout_id).await? else {
                return reject("unknown_payout", format!("no payout {payout_id}"));
            };
            step.step.apply(payout_id, current.status)?;
            if step.step == PayoutStep::Fail
                && current.rail.is_bank()
                && let Some(batch) = &current.reference
            {
                // The file may already be at the bank: the money can only come back
                // through the bank, as a return.
                return reject(
                    "invalid_payout_state",
                    format!(
                        "payout {payout_id} is in bank batch {batch}; once the file is written only a bank return undoes it"
                    ),
                );
            }
            tx.append(NewEvent {
                body: (step.make)(&current),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: Some(key.clone()),
                content_hash: Some(hash.clone()),
            });
            Ok(Applied::Accepted)
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
        let mut conversion: Option<(i64, String)> = None;
        if let Some(p) = payout(self.store.pool(), payout_id).await?
            && p.status == PayoutStatus::Held
            && p.rail == Rail::Sepa
            && p.amount_eur_cents.is_none()
        {
            let now = self.now_ms();
            let mut conn = self.store.pool().acquire().await?;
            let latest = super::runs::latest_fx_rate(&mut conn, now).await?;
            drop(conn);
            let stale_ms = config.fx_stale_hours * super::runs::MS_PER_HOUR;
            let Some((_, rate)) = latest.filter(|(at, _)| now - at <= stale_ms) else {
                return reject(
                    "fx_rate_stale",
                    format!(
                        "EUR payout {payout_id} has no EUR amount and no FX rate was recorded in the last {} hours: record one (`settle import` a line {{\"type\":\"fx.rate_set\",\"fx_id\":\"…\",\"eur_per_usd\":\"…\"}}) and release again, or cancel it (`settle payout cancel {payout_id} --reason …`)",
                        config.fx_stale_hours
                    ),
                );
            };
            let Some(cents) = super::runs::eur_cents(p.amount_micro_usdc, rate) else {
                return reject(
                    "amount_out_of_range",
                    format!("the EUR amount of payout {payout_id} overflows"),
                );
            };
            conversion = Some((cents, rate.normalize().to_string()));
        }
        self.payout_step(
            payout_id,
            Step {
                step: PayoutStep::Release,
                content: String::new(),
                make: &|p| {
                    EventBody::PayoutReleased(PayoutHoldResolved {
                        payout_id: p.payout_id.clone(),
                        provider_id: p.provider_id.clone(),
                        amount_micro_usdc: p.amount_micro_usdc,
                        reason: None,
                        amount_eur_cents: conversion.as_ref().map(|(c, _)| *c),
                        eur_per_usd: conversion.as_ref().map(|(_, r)| r.clone()),
                    })
                },
            },
            actor,
        )
        .await
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
        self.payout_step(
            payout_id,
            Step {
                step: PayoutStep::Cancel,
                content: reason.clone(),
                make: &|p| {
                    EventBody::PayoutCancelled(PayoutHoldResolved {
                        payout_id: p.payout_id.clone(),
                        provider_id: p.provider_id.clone(),
                        amount_micro_usdc: p.amount_micro_usdc,
                        reason: Some(reason.clone()),
                        amount_eur_cents: None,
                        eur_per_usd: None,
                    })
                },
            },
            actor,
        )
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
        let reference = reference.trim().to_owned();
        let e2e = end_to_end_id.map(|e| e.trim().to_owned());
        self.payout_step(
            payout_id,
            Step {
                step: PayoutStep::Submit,
                content: format!("{reference}|{}", e2e.as_deref().unwrap_or("")),
                make: &|p| {
                    EventBody::PayoutSubmitted(PayoutSubmitted {
                        payout_id: p.payout_id.clone(),
                        provider_id: p.provider_id.clone(),
                        rail: p.rail,
                        reference: reference.clone(),
                        end_to_end_id: e2e.clone(),
                    })
                },
            },
            actor,
        )
        .await
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
        let key = format!("payout:{payout_id}:submitted:{attempt_id}");
        let hash = content_hash(&format!("{key}|{signature}"));
        let now = self.now_ms();
        crate::write_stream!(self, &provider_stream(provider_id), |tx| {
            if let Some(stored) = find_idem(tx, &key).await? {
                return duplicate_or_conflict(
                    &stored,
                    &hash,
                    &format!("submission of {payout_id}"),
                );
            }
            let Some(current) = load(tx.conn(), payout_id).await? else {
                return reject("unknown_payout", format!("no payout {payout_id}"));
            };
            if matches!(current.status, PayoutStatus::Settled | PayoutStatus::Failed) {
                return Ok(Applied::Duplicate);
            }
            let step = if current.status == PayoutStatus::Submitted {
                PayoutStep::Resubmit
            } else {
                PayoutStep::Submit
            };
            step.apply(payout_id, current.status)?;
            tx.append(NewEvent {
                body: EventBody::PayoutSubmitted(PayoutSubmitted {
                    payout_id: payout_id.to_owned(),
                    provider_id: current.provider_id.clone(),
                    rail: current.rail,
                    reference: signature.to_owned(),
                    end_to_end_id: None,
                }),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: Some(key.clone()),
                content_hash: Some(hash.clone()),
            });
            Ok(Applied::Accepted)
        })
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
        self.payout_step(
            payout_id,
            Step {
                step: PayoutStep::Settle,
                content: reference.clone(),
                make: &|p| {
                    EventBody::PayoutSettled(PayoutSettled {
                        payout_id: p.payout_id.clone(),
                        provider_id: p.provider_id.clone(),
                        rail: p.rail,
                        amount_micro_usdc: p.amount_micro_usdc,
                        reference: reference.clone(),
                    })
                },
            },
            actor,
        )
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
        self.payout_step(
            payout_id,
            Step {
                step: PayoutStep::Fail,
                content: reason.clone(),
                make: &|p| {
                    EventBody::PayoutFailed(PayoutFailed {
                        payout_id: p.payout_id.clone(),
                        provider_id: p.provider_id.clone(),
                        rail: p.rail,
                        amount_micro_usdc: p.amount_micro_usdc,
                        reason: reason.clone(),
                    })
                },
            },
            actor,
        )
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
        let reason_code = reason_code.trim().to_owned();
        let reason = reason.trim().to_owned();
        self.payout_step(
            payout_id,
            Step {
                step: PayoutStep::Return,
                content: format!("{reason_code}|{reason}|{method_invalid}"),
                make: &|p| {
                    EventBody::PayoutReturned(PayoutReturned {
                        payout_id: p.payout_id.clone(),
                        provider_id: p.provider_id.clone(),
                        rail: p.rail,
                        amount_micro_usdc: p.amount_micro_usdc,
                        reason_code: reason_code.clone(),
                        reason: reason.clone(),
                        method_invalid,
                    })
                },
            },
            actor,
        )
        .await
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
