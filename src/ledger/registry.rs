//! Registry commands: providers, GPUs, rates, fee schedules, FX rates.
//!
//! Idempotent like usage events: a repeated identical command is a `duplicate`; a
//! registration reusing an id with other content is a `conflict`; an update or a rate that
//! changes nothing is a `duplicate`.

use super::{
    Actor, Applied, Ledger, LedgerError, book_decided, content_hash, duplicate_or_conflict,
    find_idem,
};
use crate::domain::event::*;
use crate::domain::ids::FxId;
use crate::domain::platform::{self, PlatformCommand, PlatformState, SetFxRate};
use crate::domain::provider::{self, ProviderCommand, ProviderState};
use crate::store::WriteTx;

pub use crate::domain::platform::SetFee;
pub use crate::domain::provider::{
    ProviderRecord, RegisterGpu, RegisterProvider, SetRate, UpdateProvider,
};

/// Reads a provider inside a write transaction.
pub async fn load_provider(
    tx: &mut WriteTx,
    provider_id: &str,
) -> Result<Option<ProviderRecord>, LedgerError> {
    Ok(crate::store::providers::load_provider(tx.conn(), provider_id).await?)
}

/// The part of a provider's state a registry command reads, from the projections under
/// the stream's lock: its registry row, and the price book's rate for `rate` (model,
/// effective from) when the command sets one.
pub(super) async fn provider_state(
    tx: &mut WriteTx,
    provider_id: &str,
    rate: Option<(&str, i64)>,
) -> Result<ProviderState, LedgerError> {
    let mut state = ProviderState {
        provider: load_provider(tx, provider_id).await?,
        ..ProviderState::default()
    };
    if let Some((model, from)) = rate
        && let Some(text) =
            crate::store::providers::rate_from(tx.conn(), provider_id, model, from).await?
    {
        state.rates.insert((model.to_owned(), from), text);
    }
    Ok(state)
}

impl Ledger {
    /// Decides a registry command on its provider's stream and books what it decided.
    /// `idem`: the command's idempotency key and content hash; a re-send is answered from
    /// it before the decision.
    pub(super) async fn provider_command(
        &self,
        provider_id: &str,
        cmd: ProviderCommand<'_>,
        idem: Option<(String, Vec<u8>, String)>,
        rate: Option<(&str, i64)>,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let now = self.now_ms();
        crate::ledger::write_stream!(self, &provider_stream(provider_id), |tx| {
            if let Some((key, hash, what)) = &idem
                && let Some(stored) = find_idem(tx, key).await?
            {
                return duplicate_or_conflict(&stored, hash, what);
            }
            let state = provider_state(tx, provider_id, rate).await?;
            let events = provider::decide(&state, cmd)?;
            Ok(book_decided(
                tx,
                events,
                actor,
                now,
                idem.as_ref().map(|(k, h, _)| (k, h)),
            ))
        })
    }

    pub async fn register_provider(
        &self,
        cmd: &RegisterProvider,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let key = format!("provider:{}", cmd.provider_id);
        let hash = content_hash(&EventBody::ProviderRegistered(cmd.event()).to_json());
        let what = format!("provider {}", cmd.provider_id);
        self.provider_command(
            cmd.provider_id.as_str(),
            ProviderCommand::Register(cmd),
            Some((key, hash, what)),
            None,
            actor,
        )
        .await
    }

    /// Updates a provider: only what changes is booked (see `domain::provider::decide`).
    pub async fn update_provider(
        &self,
        cmd: &UpdateProvider,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let idem = cmd.update_id.as_ref().map(|id| {
            let key = format!("update:{id}");
            let what = format!("update {key}");
            (key, content_hash(&cmd.content()), what)
        });
        self.provider_command(
            cmd.provider_id.as_str(),
            ProviderCommand::Update(cmd),
            idem,
            None,
            actor,
        )
        .await
    }

    pub async fn register_gpu(
        &self,
        cmd: &RegisterGpu,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let key = format!("gpu:{}", cmd.gpu_id);
        let hash = content_hash(&EventBody::GpuRegistered(cmd.event()).to_json());
        let what = format!("gpu {}", cmd.gpu_id);
        self.provider_command(
            cmd.provider_id.as_str(),
            ProviderCommand::RegisterGpu(cmd),
            Some((key, hash, what)),
            None,
            actor,
        )
        .await
    }

    pub async fn set_rate(&self, cmd: &SetRate, actor: &Actor) -> Result<Applied, LedgerError> {
        self.provider_command(
            cmd.provider_id.as_str(),
            ProviderCommand::SetRate(cmd),
            None,
            Some((cmd.model.as_str(), cmd.effective_from_ms)),
            actor,
        )
        .await
    }

    pub async fn set_fee(&self, cmd: &SetFee, actor: &Actor) -> Result<Applied, LedgerError> {
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            let mut state = PlatformState::default();
            if let Some(bps) =
                crate::store::providers::fee_from(tx.conn(), cmd.tier, cmd.effective_from_ms)
                    .await?
            {
                // A stored fee outside u16 cannot equal the command's: it never matches.
                if let Ok(bps) = u16::try_from(bps) {
                    state.fees.insert((cmd.tier, cmd.effective_from_ms), bps);
                }
            }
            let events = platform::decide(&state, PlatformCommand::SetFee(cmd))?;
            Ok(book_decided(tx, events, actor, now, None))
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
        let cmd = SetFxRate {
            eur_per_usd,
            fx_id: fx_id.cloned(),
            band: self.config.control.fx_band(),
        };
        let idem = fx_id.map(|id| {
            let key = format!("fx:{id}");
            (key, content_hash(&format!("fx|{}", cmd.rate_text())))
        });
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            if let Some((key, hash)) = &idem
                && let Some(stored) = find_idem(tx, key).await?
            {
                return duplicate_or_conflict(&stored, hash, &format!("FX rate {key}"));
            }
            // The rate in force, read under the platform stream's lock.
            let state = PlatformState {
                fx_latest: super::runs::latest_fx_rate(tx.conn(), i64::MAX)
                    .await?
                    .map(|(_, l)| l),
                ..PlatformState::default()
            };
            let events = platform::decide(&state, PlatformCommand::SetFxRate(&cmd))?;
            Ok(book_decided(
                tx,
                events,
                actor,
                now,
                idem.as_ref().map(|(k, h)| (k, h)),
            ))
        })
    }
}
