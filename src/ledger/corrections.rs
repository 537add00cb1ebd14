//! Corrections: voiding a usage event (its exact reversal) and posting adjustments.
//! Both are admin commands, idempotent by the voided `event_id` and by `adjustment_id`.

use super::{
    Actor, Applied, Idem, Ledger, LedgerError, book_decided, duplicate_or_conflict,
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
    /// The usage event a void of `event_id` (of `provider_id`, when named) reverses, with
    /// its stream: `unknown_event`, or `ambiguous_event_id` when several providers booked
    /// that id and none is named.
    pub(crate) async fn usage_to_void(
        &self,
        event_id: &EventId,
        provider_id: Option<&ProviderId>,
    ) -> Result<(String, crate::domain::event::UsageRecorded), LedgerError> {
        let mut originals =
            crate::store::keys::payloads_by_key(&self.store, &format!("usage:{event_id}")).await?;
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
        Ok((stream, usage))
    }

    pub async fn void_usage(
        &self,
        event_id: &EventId,
        provider_id: Option<&ProviderId>,
        reason: &str,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        check_text(reason, "reason", self.config.text_len_max)?;
        let (stream, usage) = self.usage_to_void(event_id, provider_id).await?;
        let idem = Idem::new(
            format!("void:{event_id}"),
            &format!("void|{event_id}"),
            format!("void of {event_id}"),
        );
        let now = self.now_ms();
        crate::ledger::write_stream!(self, &stream, |tx| {
            // A usage event's id, and so its void's, is scoped to its provider (SPEC §4).
            if let Some(stored) = find_idem_in_stream(tx, &idem.key).await? {
                return duplicate_or_conflict(&stored, &idem.hash, &idem.what);
            }
            let voided = crate::domain::usage::void(&usage, reason);
            let events = vec![EventBody::UsageVoided(voided)];
            Ok(book_decided(tx, events, actor, now, Some(&idem)))
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
            approval_id: None,
        };
        // The content a replay is compared with leaves the approval out.
        let idem = Idem::new(
            format!("adj:{adjustment_id}"),
            &EventBody::AdjustmentPosted(cmd.event()).to_json(),
            format!("adjustment {adjustment_id}"),
        );
        let cmd = PostAdjustment {
            approval_id: self.config.approval_id.clone(),
            ..cmd
        };
        let command = ProviderCommand::PostAdjustment(&cmd);
        self.provider_command(provider_id.as_str(), command, Some(idem), actor)
            .await
    }
}
