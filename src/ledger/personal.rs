//! Personal data on the ledger (SPEC §11): a provider's record opened for the reads that
//! show it, payout methods opened for the rails that pay, the erasure of a provider and the
//! destruction of its key when the retention of its payment records ends.

use std::collections::HashMap;

use super::{Actor, Applied, Ledger, LedgerError, reject};
use crate::domain::event::{EventBody, PayoutMethod, ProviderErased, provider_stream};
use crate::domain::payout::PayoutRecord;
use crate::domain::provider::ProviderRecord;
use crate::privacy::DataKey;
use crate::privacy::fields::{open_method, open_record};
use crate::store::{NewEvent, privacy as rows};

/// What a provider's erasure changed, or why it was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Erasure {
    pub applied: Applied,
    /// When its data key is destroyed (or from when the scheduler may).
    pub destroy_after_ms: i64,
}

/// A payout method that cannot be used any more: its provider was erased.
pub const PROVIDER_ERASED: &str = "provider_erased";

impl Ledger {
    /// `provider_id`'s registry record with its personal values opened (`erased` once the
    /// provider is erased); `None` for an unknown provider.
    ///
    /// # Errors
    /// The store's; `no_master_key` when the values are sealed and no master key was read;
    /// `sealed_text_unreadable` for a value that does not open (changed).
    pub async fn provider_record(
        &self,
        provider_id: &str,
    ) -> Result<Option<ProviderRecord>, LedgerError> {
        let record = {
            let mut conn = self.store.acquire().await?;
            crate::store::providers::load_provider(&mut conn, provider_id).await?
        };
        let Some(mut record) = record else {
            return Ok(None);
        };
        let keys = self.privacy.read_keys(&[provider_id]).await?;
        open_record(keys.get(provider_id), &mut record)?;
        Ok(Some(record))
    }

    /// The data keys that open the methods of `payouts`' providers.
    async fn keys_of<'a>(
        &self,
        providers: impl Iterator<Item = &'a str>,
    ) -> Result<HashMap<String, DataKey>, LedgerError> {
        let mut owners: Vec<&str> = providers.collect();
        owners.sort_unstable();
        owners.dedup();
        Ok(self.privacy.read_keys(&owners).await?)
    }

    /// Opens the method snapshots of `payouts` for a rail that pays them: per payout, `Ok`
    /// with its method opened, or the reason it cannot be used (its provider erased).
    ///
    /// # Errors
    /// As [`Ledger::provider_record`].
    pub async fn open_payout_methods(
        &self,
        payouts: &mut [PayoutRecord],
    ) -> Result<Vec<Result<(), String>>, LedgerError> {
        let keys = self
            .keys_of(payouts.iter().map(|p| p.provider_id.as_str()))
            .await?;
        let mut out = Vec::with_capacity(payouts.len());
        for p in payouts {
            let erased = open_method(
                keys.get(p.provider_id.as_str()),
                &p.provider_id,
                &mut p.method,
            )?;
            out.push(if erased {
                Err(erased_reason(&p.provider_id))
            } else {
                Ok(())
            });
        }
        Ok(out)
    }

    /// Opens method snapshots kept as JSON text (the Solana payer's facts), in place; a
    /// method of an erased provider reads `erased` and is no wallet.
    ///
    /// # Errors
    /// As [`Ledger::provider_record`].
    pub(crate) async fn open_method_texts<'a>(
        &self,
        methods: impl Iterator<Item = (&'a str, &'a mut String)>,
    ) -> Result<(), LedgerError> {
        let methods: Vec<(&str, &mut String)> = methods.collect();
        let keys = self.keys_of(methods.iter().map(|(p, _)| *p)).await?;
        for (provider_id, text) in methods {
            let Ok(mut method) = serde_json::from_str::<PayoutMethod>(text) else {
                continue;
            };
            open_method(keys.get(provider_id), provider_id, &mut method)?;
            *text = serde_json::to_string(&method).unwrap_or_default();
        }
        Ok(())
    }

    /// The other providers paid to the account `method` pays to (its keyed digest found in
    /// their payout methods'), sorted: what an approver of `provider_id`'s new method is
    /// told. None on a ledger handle that seals nothing.
    ///
    /// # Errors
    /// As [`Ledger::provider_record`].
    pub async fn providers_paid_to(
        &self,
        provider_id: &str,
        method: &PayoutMethod,
    ) -> Result<Vec<String>, LedgerError> {
        let Some(vault) = self.privacy.vault() else {
            return Ok(Vec::new());
        };
        let index = vault.blind_index(self.now_ms()).await?;
        let digest = crate::privacy::fields::method_digest(&index, method);
        let mut others = rows::providers_with_digest(&self.store, &digest).await?;
        others.retain(|p| p != provider_id);
        Ok(others)
    }

    /// Opens the personal values of approval requests (their commands and summaries, sealed
    /// with their providers' keys), in place, for the operators who read and decide them.
    ///
    /// # Errors
    /// As [`Ledger::provider_record`].
    pub async fn open_approvals(
        &self,
        rows: &mut [crate::store::read::ApprovalRow],
    ) -> Result<(), LedgerError> {
        let keys = self
            .keys_of(rows.iter().filter_map(|r| r.provider_id.as_deref()))
            .await?;
        for row in rows {
            let Some(provider_id) = &row.provider_id else {
                continue;
            };
            (row.command, row.summary) = crate::privacy::fields::open_request(
                keys.get(provider_id),
                provider_id,
                &row.command,
                &row.summary,
            )?;
        }
        Ok(())
    }

    /// [`Ledger::open_method_texts`] of payouts' facts.
    ///
    /// # Errors
    /// As [`Ledger::provider_record`].
    pub(crate) async fn open_facts<'a>(
        &self,
        facts: impl Iterator<Item = &'a mut crate::store::rails::PayoutFacts>,
    ) -> Result<(), LedgerError> {
        self.open_method_texts(facts.map(|f| (f.provider_id.as_str(), &mut f.method)))
            .await
    }

    /// Erases `provider_id`'s personal data (SPEC §11), a gated command: from its commit on
    /// every read shows `erased`, its payout method is gone, and its data key is destroyed
    /// once the retention of its payment records ends (`privacy.retention_days` after its
    /// last payout; 0: now), never while a payout is open. Refused with `payout_in_flight`
    /// while a payout was sent and not answered. Erasing again is a `duplicate`.
    ///
    /// # Errors
    /// `unknown_provider`, `payout_in_flight`, the store's.
    pub async fn erase_provider(
        &self,
        provider_id: &str,
        actor: &Actor,
    ) -> Result<Erasure, LedgerError> {
        let now = self.now_ms();
        let retention_ms = self.privacy.retention_ms();
        let approval_id = self.decision.as_ref().map(|d| d.approval_id.clone());
        let key = format!("erase:{provider_id}");
        let booked = crate::ledger::write_stream!(self, &provider_stream(provider_id), |tx| {
            let Some(provider) =
                crate::store::providers::load_provider(tx.conn(), provider_id).await?
            else {
                return reject("unknown_provider", format!("no provider {provider_id}"));
            };
            let span = rows::payout_span(tx.conn(), provider_id).await?;
            if super::find_idem(tx, &key).await?.is_some() {
                return Ok(None);
            }
            if span.submitted > 0 {
                return reject(
                    "payout_in_flight",
                    format!(
                        "provider {provider_id} has {} payout(s) sent and not yet answered by \
                         their rail: erase it once they settle or fail",
                        span.submitted
                    ),
                );
            }
            let destroy_after_ms = match retention_ms {
                0 => now,
                r => span
                    .last_payout_at_ms
                    .unwrap_or(now)
                    .max(now)
                    .saturating_add(r),
            };
            rows::mark_erased_on(tx.conn(), provider_id, now, destroy_after_ms).await?;
            rows::replace_method_digest(tx.conn(), provider_id, None).await?;
            tx.append(NewEvent {
                body: EventBody::ProviderErased(ProviderErased {
                    provider_id: provider.provider_id.clone(),
                    destroy_after_ms,
                    approval_id: approval_id.clone(),
                }),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: Some(key.clone()),
                content_hash: Some(super::content_hash(&key)),
            });
            Ok(Some(destroy_after_ms))
        });
        match booked? {
            Some(destroy_after_ms) => Ok(Erasure {
                applied: Applied::Accepted,
                destroy_after_ms,
            }),
            None => Ok(Erasure {
                applied: Applied::Duplicate,
                destroy_after_ms: rows::key_row(&self.store, provider_id)
                    .await?
                    .and_then(|r| r.destroy_after_ms)
                    .unwrap_or(now),
            }),
        }
    }

    /// Destroys the data keys of erased providers whose retention ended at the clock's now
    /// and who have no open payout (`created`, `held`, `submitted`: those wait); the
    /// providers whose keys were destroyed.
    ///
    /// # Errors
    /// The store's.
    pub async fn destroy_due_keys(&self) -> Result<Vec<String>, LedgerError> {
        let Some(vault) = self.privacy.vault() else {
            return Ok(Vec::new());
        };
        let now = self.now_ms();
        let retention_ms = self.privacy.retention_ms();
        let mut destroyed = Vec::new();
        for owner in vault.due(now).await? {
            let span = {
                let mut conn = self.store.acquire().await?;
                rows::payout_span(&mut conn, &owner).await?
            };
            // A payout that changed since the erasure moves the end of the retention.
            let retained_until = match (retention_ms, span.last_payout_at_ms) {
                (0, _) | (_, None) => i64::MIN,
                (r, Some(last)) => last.saturating_add(r),
            };
            if span.open > 0 || retained_until > now {
                continue;
            }
            if vault.destroy(&owner, now).await? {
                tracing::info!(provider = %owner, "data key destroyed: its personal data can never be read again");
                destroyed.push(owner);
            }
        }
        Ok(destroyed)
    }
}

/// Why a payout of an erased provider cannot be paid.
pub(crate) fn erased_reason(provider_id: &str) -> String {
    format!(
        "provider {provider_id} was erased; its payout method is gone (the amount returns to payable)"
    )
}
