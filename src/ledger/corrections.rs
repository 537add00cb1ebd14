//! Corrections: voiding a usage event (its exact reversal) and posting adjustments.
//! Both are admin commands, idempotent by the voided `event_id` and by `adjustment_id`.

use super::{
    Actor, Applied, Ledger, LedgerError, book_decided, content_hash, duplicate_or_conflict,
    find_idem_in_stream, reject,
};
use crate::domain::event::*;
use crate::domain::ids::{AdjustmentId, EventId, ProviderId};
use crate::domain::provider::{PostAdjustment, ProviderCommand};

pub(crate) fn check_text(text: &str, what: &str, max: usize) -> Result<(), LedgerError> {
    if text.trim().is_empty() || text.chars().count() > max || text.chars().any(char::is_control) {
        return reject(
            "invalid_text",
            format!("{what} must be 1..={max} characters without control characters"),
        );
    }
    Ok(())
}

impl Ledger {
    /// Voids a booked usage event: reverses its lines exactly, with the same business time.
    ///
    /// An event_id is unique per provider (SPEC §4): `provider_id` names whose event is
    /// meant; without it the id must be booked under one provider only
    /// (`ambiguous_event_id` otherwise).
    pub async fn void_usage(
        &self,
        event_id: &EventId,
        provider_id: Option<&ProviderId>,
        reason: &str,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        check_text(reason, "reason", self.config.text_len_max)?;
        let mut originals =
            crate::store::keys::payloads_by_key(self.store.pool(), &format!("usage:{event_id}"))
                .await?;
        if let Some(p) = provider_id {
            let stream = provider_stream(p.as_str());
            originals.retain(|(s, _)| *s == stream);
        }
        if originals.len() > 1 {
            return reject(
                "ambiguous_event_id",
                format!(
                    "usage event {event_id} is booked under {} providers; name the provider (provider_id)",
                    originals.len()
                ),
            );
        }
        let Some((stream, payload)) = originals.pop() else {
            return reject("unknown_event", format!("no usage event {event_id}"));
        };
        let EventBody::UsageRecorded(usage) = EventBody::from_json("usage.recorded", 1, &payload)?
        else {
            return reject("unknown_event", format!("{event_id} is not a usage event"));
        };
        let key = format!("void:{event_id}");
        let hash = content_hash(&format!("void|{event_id}"));
        let now = self.now_ms();
        crate::ledger::write_stream!(self, &stream, |tx| {
            if let Some(stored) = find_idem_in_stream(tx, &key).await? {
                return duplicate_or_conflict(&stored, &hash, &format!("void of {event_id}"));
            }
            let voided = crate::domain::usage::void(&usage, reason);
            Ok(book_decided(
                tx,
                vec![EventBody::UsageVoided(voided)],
                actor,
                now,
                Some((&key, &hash)),
            ))
        })
    }

    /// Posts an adjustment: `payable ± amount`, `adjustments ∓ amount`.
    pub async fn post_adjustment(
        &self,
        adjustment_id: &AdjustmentId,
        provider_id: &ProviderId,
        amount_micro_usdc: i64,
        reason: &str,
        reference: Option<&str>,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        check_text(reason, "reason", self.config.text_len_max)?;
        if let Some(r) = reference {
            check_text(r, "reference", self.config.text_len_max)?;
        }
        let cmd = PostAdjustment {
            adjustment_id: adjustment_id.clone(),
            provider_id: provider_id.clone(),
            amount_micro_usdc,
            reason: reason.to_owned(),
            reference: reference.map(str::to_owned),
        };
        let key = format!("adj:{adjustment_id}");
        let hash = content_hash(&EventBody::AdjustmentPosted(cmd.event()).to_json());
        let what = format!("adjustment {adjustment_id}");
        self.provider_command(
            provider_id.as_str(),
            ProviderCommand::PostAdjustment(&cmd),
            Some((key, hash, what)),
            None,
            actor,
        )
        .await
    }
}
