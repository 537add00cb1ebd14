//! Registry commands: providers, GPUs, rates, fee schedules, FX rates.
//!
//! Idempotent like usage events: a repeated identical command is a `duplicate`; a
//! registration reusing an id with other content is a `conflict`; an update or a rate that
//! changes nothing is a `duplicate`.

use super::{Actor, Applied, Idem, Ledger, LedgerError, book_decided};
use crate::domain::event::*;
use crate::domain::ids::FxId;
use crate::domain::platform::{self, PlatformCommand, PlatformState, SetFxRate};
use crate::domain::provider::{self, ProviderCommand, ProviderState};
use crate::privacy::fields::{method_digest, open_record, seal_event};
use crate::privacy::vault::Sealer;
use crate::store::WriteTx;

/// Whether `cmd` sets a payout method.
fn sets_method(cmd: ProviderCommand<'_>) -> bool {
    match cmd {
        ProviderCommand::Register(r) => r.payout_method.is_some(),
        ProviderCommand::Update(u) => u.payout_method.is_some(),
        _ => false,
    }
}

/// The payout method `events` set, in clear (before they are sealed).
fn method_set(events: &[EventBody]) -> Option<&PayoutMethod> {
    events.iter().find_map(|e| match e {
        EventBody::ProviderRegistered(r) => r.payout_method.as_ref(),
        EventBody::ProviderUpdated(u) => u.payout_method.as_ref(),
        _ => None,
    })
}

/// Whether `cmd` books a personal value: a registration, or an update of the name, email
/// or payout method.
fn sets_personal_values(cmd: ProviderCommand<'_>) -> bool {
    match cmd {
        ProviderCommand::Register(_) => true,
        ProviderCommand::Update(u) => {
            u.name.is_some() || u.email.is_some() || u.payout_method.is_some()
        }
        _ => false,
    }
}

pub use crate::domain::platform::SetFee;
pub use crate::domain::provider::{
    ProviderRecord, RegisterGpu, RegisterProvider, SetRate, UpdateProvider,
};

/// The part of a provider's state `cmd` reads, from the projections under the stream's
/// lock: the provider's registry row, and for a rate the price book's entry at its key.
async fn provider_state(
    tx: &mut WriteTx,
    provider_id: &str,
    cmd: ProviderCommand<'_>,
) -> Result<ProviderState, LedgerError> {
    let mut state = ProviderState {
        provider: crate::store::providers::load_provider(tx.conn(), provider_id).await?,
        ..ProviderState::default()
    };
    if let ProviderCommand::SetRate(c) = cmd {
        let (model, from) = (c.model.as_str(), c.effective_from_ms);
        if let Some(text) =
            crate::store::providers::rate_from(tx.conn(), provider_id, model, from).await?
        {
            state.rates.insert((model.to_owned(), from), text);
        }
    }
    Ok(state)
}

impl Ledger {
    /// Decides a registry command on its provider's stream and books what it decided; a
    /// re-send under `idem` is answered before the decision. A registration or an update
    /// that sets a personal value decides on the provider's values opened and books them
    /// sealed with its data key (SPEC §11), its re-send check keyed by the same key.
    pub(super) async fn provider_command(
        &self,
        provider_id: &str,
        cmd: ProviderCommand<'_>,
        idem: Option<Idem>,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let now = self.now_ms();
        let sealer = if sets_personal_values(cmd) {
            self.privacy.sealer(provider_id, now).await?
        } else {
            Sealer::Clear
        };
        let (key, idem) = match sealer {
            Sealer::Key(key) => {
                let idem = idem.map(|i| i.keyed(&key));
                (Some(key), idem)
            }
            Sealer::Erased => {
                return super::reject(
                    "provider_erased",
                    format!(
                        "provider {provider_id} was erased: its name, email and payout method \
                         cannot be set again (register the provider anew under a new id)"
                    ),
                );
            }
            Sealer::Clear => (None, idem),
        };
        // The blind index the account of a new payout method is digested under.
        let index = match (self.privacy.vault(), sets_method(cmd)) {
            (Some(vault), true) => Some(vault.blind_index(now).await?),
            _ => None,
        };
        crate::ledger::write_stream!(self, &provider_stream(provider_id), |tx| {
            if let Some(idem) = &idem
                && let Some(answer) = idem.resent(tx).await?
            {
                return Ok(answer);
            }
            let mut state = provider_state(tx, provider_id, cmd).await?;
            if let (Some(record), Some(key)) = (&mut state.provider, &key) {
                open_record(Some(key), record)?;
            }
            let mut events = provider::decide(&state, cmd)?;
            if let (Some(index), Some(method)) = (&index, method_set(&events)) {
                let digest = method_digest(index, method);
                crate::store::privacy::replace_method_digest(tx.conn(), provider_id, Some(&digest))
                    .await?;
            }
            if let Some(key) = &key {
                for body in &mut events {
                    seal_event(key, body);
                }
            }
            Ok(book_decided(tx, events, actor, now, idem.as_ref()))
        })
    }

    pub async fn register_provider(
        &self,
        cmd: &RegisterProvider,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let idem = Idem::new(
            format!("provider:{}", cmd.provider_id),
            &EventBody::ProviderRegistered(cmd.event()).to_json(),
            format!("provider {}", cmd.provider_id),
        );
        let id = cmd.provider_id.as_str();
        self.provider_command(id, ProviderCommand::Register(cmd), Some(idem), actor)
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
            Idem::new(key, &cmd.content(), what)
        });
        let id = cmd.provider_id.as_str();
        self.provider_command(id, ProviderCommand::Update(cmd), idem, actor)
            .await
    }

    pub async fn register_gpu(
        &self,
        cmd: &RegisterGpu,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
        let idem = Idem::new(
            format!("gpu:{}", cmd.gpu_id),
            &EventBody::GpuRegistered(cmd.event()).to_json(),
            format!("gpu {}", cmd.gpu_id),
        );
        let id = cmd.provider_id.as_str();
        self.provider_command(id, ProviderCommand::RegisterGpu(cmd), Some(idem), actor)
            .await
    }

    pub async fn set_rate(&self, cmd: &SetRate, actor: &Actor) -> Result<Applied, LedgerError> {
        let id = cmd.provider_id.as_str();
        self.provider_command(id, ProviderCommand::SetRate(cmd), None, actor)
            .await
    }

    pub(crate) async fn set_fee(
        &self,
        cmd: &SetFee,
        actor: &Actor,
    ) -> Result<Applied, LedgerError> {
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
            let what = format!("FX rate {key}");
            Idem::new(key, &format!("fx|{}", cmd.rate_text()), what)
        });
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            if let Some(idem) = &idem
                && let Some(answer) = idem.resent(tx).await?
            {
                return Ok(answer);
            }
            // The rate in force, read under the platform stream's lock.
            let state = PlatformState {
                fx_latest: super::runs::latest_fx_rate(tx.conn(), i64::MAX)
                    .await?
                    .map(|(_, l)| l),
                ..PlatformState::default()
            };
            let events = platform::decide(&state, PlatformCommand::SetFxRate(&cmd))?;
            Ok(book_decided(tx, events, actor, now, idem.as_ref()))
        })
    }
}
