//! Corrections: voiding a usage event (its exact reversal) and posting adjustments.
//! Both are admin commands, idempotent by the voided `event_id` and by `adjustment_id`.

use super::{
    Actor, Applied, Ledger, LedgerError, content_hash, duplicate_or_conflict, find_idem,
    find_idem_in_stream, reject,
};
use crate::domain::event::*;
use crate::domain::ids::{AdjustmentId, EventId, ProviderId};
use crate::store::NewEvent;

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
        crate::write_stream!(self, &stream, |tx| {
            if let Some(stored) = find_idem_in_stream(tx, &key).await? {
                return duplicate_or_conflict(&stored, &hash, &format!("void of {event_id}"));
            }
            tx.append(NewEvent {
                body: EventBody::UsageVoided(UsageVoided {
                    event_id: usage.event_id.clone(),
                    provider_id: usage.provider_id.clone(),
                    gpu_id: usage.gpu_id.clone(),
                    model: usage.model.clone(),
                    reason: reason.trim().to_owned(),
                    segments: usage.segments.clone(),
                }),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: Some(key.clone()),
                content_hash: Some(hash.clone()),
            });
            Ok(Applied::Accepted)
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
        if amount_micro_usdc == 0 {
            return reject("invalid_amount", "an adjustment must not be zero");
        }
        let body = EventBody::AdjustmentPosted(AdjustmentPosted {
            adjustment_id: adjustment_id.to_string(),
            provider_id: provider_id.to_string(),
            amount_micro_usdc,
            reason: reason.trim().to_owned(),
            reference: reference.map(|r| r.trim().to_owned()),
        });
        let key = format!("adj:{adjustment_id}");
        let hash = content_hash(&body.to_json());
        let now = self.now_ms();
        crate::write_stream!(self, &provider_stream(provider_id.as_str()), |tx| {
            if let Some(stored) = find_idem(tx, &key).await? {
                return duplicate_or_conflict(
                    &stored,
                    &hash,
                    &format!("adjustment {adjustment_id}"),
                );
            }
            if super::registry::load_provider(tx, provider_id.as_str())
                .await?
                .is_none()
            {
                return reject("unknown_provider", format!("no provider {provider_id}"));
            }
            tx.append(NewEvent {
                body: body.clone(),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: Some(key.clone()),
                content_hash: Some(hash.clone()),
            });
            Ok(Applied::Accepted)
        })
    }
}
