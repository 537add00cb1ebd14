//! Registry commands: providers, GPUs, rates, fee schedules, FX rates.
//!
//! Idempotent like usage events: a repeated identical command is a `duplicate`; a
//! registration reusing an id with other content is a `conflict`; an update or a rate that
//! changes nothing is a `duplicate`.

use super::{
    Actor, Applied, Ledger, LedgerError, content_hash, duplicate_or_conflict, find_idem, reject,
};
use crate::domain::event::*;
use crate::domain::ids::{FxId, GpuId, GpuModel, ProviderId, UpdateId};
use crate::domain::money::{FeeBps, Rate};
use crate::store::{NewEvent, WriteTx};

#[derive(Clone, Debug)]
pub struct RegisterProvider {
    pub provider_id: ProviderId,
    pub name: String,
    pub email: String,
    pub tier: Tier,
    pub schedule: Schedule,
    pub payout_method: Option<PayoutMethod>,
}

#[derive(Clone, Debug)]
pub struct UpdateProvider {
    /// The idempotency key: the same key with the same content again is a duplicate, with
    /// other content a conflict. Without it, an update that changes nothing is a duplicate.
    pub update_id: Option<UpdateId>,
    pub provider_id: ProviderId,
    pub name: Option<String>,
    pub email: Option<String>,
    pub tier: Option<Tier>,
    pub schedule: Option<Schedule>,
    pub status: Option<ProviderStatus>,
    pub payout_method: Option<PayoutMethod>,
}

#[derive(Clone, Debug)]
pub struct RegisterGpu {
    pub gpu_id: GpuId,
    pub provider_id: ProviderId,
    pub model: GpuModel,
}

#[derive(Clone, Debug)]
pub struct SetRate {
    pub provider_id: ProviderId,
    pub model: GpuModel,
    pub rate: Rate,
    pub effective_from_ms: i64,
}

#[derive(Clone, Debug)]
pub struct SetFee {
    pub tier: Tier,
    pub fee: FeeBps,
    pub effective_from_ms: i64,
}

pub use crate::store::providers::ProviderRecord;

/// Checks a display name or holder: 1..=200 characters, no control characters.
pub fn check_name(name: &str, what: &str) -> Result<(), LedgerError> {
    let n = name.trim();
    if n.is_empty() || n.chars().count() > 200 || n.chars().any(char::is_control) {
        return reject(
            "invalid_name",
            format!("{what} must be 1..=200 characters without control characters"),
        );
    }
    Ok(())
}

/// Checks an e-mail address loosely: one `@` with text on both sides, at most 254 bytes.
pub fn check_email(email: &str) -> Result<(), LedgerError> {
    let ok = email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && matches!(email.split_once('@'), Some((a, b)) if !a.is_empty() && b.contains('.') && !b.contains('@'));
    if !ok {
        return reject("invalid_email", format!("not an e-mail address: {email:?}"));
    }
    Ok(())
}

/// Reads a provider inside a write transaction.
pub async fn load_provider(
    tx: &mut WriteTx,
    provider_id: &str,
) -> Result<Option<ProviderRecord>, LedgerError> {
    Ok(crate::store::providers::load_provider(tx.conn(), provider_id).await?)
}

impl Ledger {
    pub async fn register_provider(
        &self,
        cmd: &RegisterProvider,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        check_name(&cmd.name, "name")?;
        check_email(&cmd.email)?;
        let key = format!("provider:{}", cmd.provider_id);
        let body = EventBody::ProviderRegistered(ProviderRegistered {
            provider_id: cmd.provider_id.to_string(),
            name: cmd.name.trim().to_owned(),
            email: cmd.email.clone(),
            tier: cmd.tier,
            schedule: cmd.schedule,
            status: ProviderStatus::Active,
            payout_method: cmd.payout_method.clone(),
        });
        let hash = content_hash(&body.to_json());
        let now = self.now_ms();
        crate::write_stream!(self, &provider_stream(cmd.provider_id.as_str()), |tx| {
            if let Some(stored) = find_idem(tx, &key).await? {
                return duplicate_or_conflict(
                    &stored,
                    &hash,
                    &format!("provider {}", cmd.provider_id),
                );
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

    pub async fn update_provider(
        &self,
        cmd: &UpdateProvider,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        if let Some(name) = &cmd.name {
            check_name(name, "name")?;
        }
        if let Some(email) = &cmd.email {
            check_email(email)?;
        }
        let key = cmd.update_id.as_ref().map(|id| format!("update:{id}"));
        let hash = content_hash(
            &serde_json::json!({
                "provider_id": cmd.provider_id.as_str(),
                "name": cmd.name.as_deref().map(str::trim),
                "email": cmd.email,
                "tier": cmd.tier.map(|t| t.as_str()),
                "schedule": cmd.schedule.map(|s| s.as_str()),
                "status": cmd.status.map(|s| s.as_str()),
                "payout_method": cmd.payout_method,
            })
            .to_string(),
        );
        let now = self.now_ms();
        crate::write_stream!(self, &provider_stream(cmd.provider_id.as_str()), |tx| {
            if let Some(key) = &key
                && let Some(stored) = find_idem(tx, key).await?
            {
                return duplicate_or_conflict(&stored, &hash, &format!("update {key}"));
            }
            let Some(current) = load_provider(tx, cmd.provider_id.as_str()).await? else {
                return reject(
                    "unknown_provider",
                    format!("no provider {}", cmd.provider_id),
                );
            };
            // Only what actually changes is recorded: re-sending an update is a duplicate,
            // and re-sending the same payout method does not restart the cooling-off.
            let method_changes = cmd.payout_method.is_some()
                && (cmd.payout_method != current.payout_method || current.method_invalid);
            let update = ProviderUpdated {
                provider_id: cmd.provider_id.to_string(),
                name: cmd.name.clone().filter(|n| n.trim() != current.name),
                email: cmd.email.clone().filter(|e| *e != current.email),
                tier: cmd.tier.filter(|t| *t != current.tier),
                schedule: cmd.schedule.filter(|s| *s != current.schedule),
                status: cmd.status.filter(|s| *s != current.status),
                payout_method: if method_changes {
                    cmd.payout_method.clone()
                } else {
                    None
                },
            };
            // Without a key, an update that changes nothing is a duplicate; with one, it is
            // booked (changing nothing) so that the key is taken.
            if key.is_none()
                && update
                    == (ProviderUpdated {
                        provider_id: update.provider_id.clone(),
                        ..Default::default()
                    })
            {
                return Ok(Applied::Duplicate);
            }
            tx.append(NewEvent {
                body: EventBody::ProviderUpdated(update),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: key.clone(),
                content_hash: key.as_ref().map(|_| hash.clone()),
            });
            Ok(Applied::Accepted)
        })
    }

    pub async fn register_gpu(
        &self,
        cmd: &RegisterGpu,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let key = format!("gpu:{}", cmd.gpu_id);
        let body = EventBody::GpuRegistered(GpuRegistered {
            gpu_id: cmd.gpu_id.to_string(),
            provider_id: cmd.provider_id.to_string(),
            model: cmd.model.as_str().to_owned(),
        });
        let hash = content_hash(&body.to_json());
        let now = self.now_ms();
        crate::write_stream!(self, &provider_stream(cmd.provider_id.as_str()), |tx| {
            if let Some(stored) = find_idem(tx, &key).await? {
                return duplicate_or_conflict(&stored, &hash, &format!("gpu {}", cmd.gpu_id));
            }
            if load_provider(tx, cmd.provider_id.as_str()).await?.is_none() {
                return reject(
                    "unknown_provider",
                    format!("no provider {}", cmd.provider_id),
                );
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

    pub async fn set_rate(&self, cmd: &SetRate, actor: &Actor) -> Result<Applied, LedgerError> {
        let rate_text = cmd.rate.to_canonical();
        let now = self.now_ms();
        crate::write_stream!(self, &provider_stream(cmd.provider_id.as_str()), |tx| {
            if load_provider(tx, cmd.provider_id.as_str()).await?.is_none() {
                return reject(
                    "unknown_provider",
                    format!("no provider {}", cmd.provider_id),
                );
            }
            let current = crate::store::providers::rate_from(
                tx.conn(),
                cmd.provider_id.as_str(),
                cmd.model.as_str(),
                cmd.effective_from_ms,
            )
            .await?;
            if current.as_deref() == Some(rate_text.as_str()) {
                return Ok(Applied::Duplicate);
            }
            tx.append(NewEvent {
                body: EventBody::RateSet(RateSet {
                    provider_id: cmd.provider_id.to_string(),
                    model: cmd.model.as_str().to_owned(),
                    rate_usdc_per_hour: rate_text.clone(),
                    effective_from_ms: cmd.effective_from_ms,
                }),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: None,
                content_hash: None,
            });
            Ok(Applied::Accepted)
        })
    }

    pub async fn set_fee(&self, cmd: &SetFee, actor: &Actor) -> Result<Applied, LedgerError> {
        let now = self.now_ms();
        crate::write_stream!(self, PLATFORM_STREAM, |tx| {
            let current =
                crate::store::providers::fee_from(tx.conn(), cmd.tier, cmd.effective_from_ms)
                    .await?;
            if current == Some(i64::from(cmd.fee.get())) {
                return Ok(Applied::Duplicate);
            }
            tx.append(NewEvent {
                body: EventBody::FeeScheduleSet(FeeScheduleSet {
                    tier: cmd.tier,
                    fee_bps: cmd.fee.get(),
                    effective_from_ms: cmd.effective_from_ms,
                }),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: None,
                content_hash: None,
            });
            Ok(Applied::Accepted)
        })
    }

    /// Records the EUR per USD rate used for EUR payouts created from now on.
    ///
    /// `fx_id` is the idempotency key (same key and rate again: a duplicate; same key,
    /// other rate: a conflict). Without a key, the rate already in force is a duplicate, so
    /// replaying an old line never makes a stale rate fresh again; to re-confirm an
    /// unchanged rate, give the line a new `fx_id`.
    ///
    /// A rate outside `[control]` `fx_eur_per_usd_min..=fx_eur_per_usd_max`, or more than
    /// `fx_step_max_pct` percent away from the rate in force, is rejected with
    /// `fx_rate_out_of_band` (see `domain::bands::fx_check`).
    pub async fn set_fx_rate(
        &self,
        eur_per_usd: rust_decimal::Decimal,
        fx_id: Option<&FxId>,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        if eur_per_usd <= rust_decimal::Decimal::ZERO || eur_per_usd.scale() > 10 {
            return reject(
                "invalid_fx_rate",
                "eur_per_usd must be a positive decimal with at most 10 fractional digits",
            );
        }
        let rate_text = eur_per_usd.normalize().to_string();
        let key = fx_id.map(|id| format!("fx:{id}"));
        let hash = content_hash(&format!("fx|{rate_text}"));
        let now = self.now_ms();
        crate::write_stream!(self, PLATFORM_STREAM, |tx| {
            if let Some(key) = &key
                && let Some(stored) = find_idem(tx, key).await?
            {
                return duplicate_or_conflict(&stored, &hash, &format!("FX rate {key}"));
            }
            let latest = super::runs::latest_fx_rate(tx.conn(), i64::MAX)
                .await?
                .map(|(_, l)| l);
            if key.is_none() && latest.is_some_and(|l| l.normalize() == eur_per_usd.normalize()) {
                return Ok(Applied::Duplicate);
            }
            // A typo ("92" for "0.92") never pays: the rate stays in its band and near the
            // rate in force, read under the platform stream's lock.
            crate::domain::bands::fx_check(latest, eur_per_usd, &self.config.control.fx_band())?;
            tx.append(NewEvent {
                body: EventBody::FxRateSet(FxRateSet {
                    eur_per_usd: rate_text.clone(),
                }),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: key.clone(),
                content_hash: key.as_ref().map(|_| hash.clone()),
            });
            Ok(Applied::Accepted)
        })
    }
}
