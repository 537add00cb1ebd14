//! The provider aggregate (SPEC §1, §3, §4): what one provider's stream holds that its
//! registry commands decide on, the commands, and their pure decision.
//!
//! [`ProviderState::apply`] folds the stream's events into the state; [`decide`] answers a
//! command with the events it books (none: it changes nothing, a `duplicate`) or the
//! refusal. The ledger loads the state a command reads from the projections inside the
//! command's transaction (the same fold, kept in SQL: `settle verify` checks that both
//! agree, `aggregate_mismatch`), decides, and appends. Re-sent commands (the same
//! idempotency key) are answered by the ledger before [`decide`], as for usage.

use std::collections::BTreeMap;

use super::DomainError;
use super::event::{
    AdjustmentPosted, EventBody, GpuRegistered, PayoutFailed, PayoutMethod, PayoutReturned,
    ProviderRegistered, ProviderStatus, ProviderUpdated, RateSet, Schedule, Tier,
};
use super::ids::{AdjustmentId, GpuId, GpuModel, ProviderId, UpdateId};
use super::money::Rate;

/// What a read shows for a personal value of an erased provider (SPEC §11).
pub const ERASED: &str = "erased";

/// A provider's registry facts: the `providers` projection's row, and the state of the
/// registry commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderRecord {
    pub provider_id: ProviderId,
    pub name: String,
    pub email: String,
    pub tier: Tier,
    pub schedule: Schedule,
    pub status: ProviderStatus,
    pub payout_method: Option<PayoutMethod>,
    /// When the payout method was last changed (`None`: as registered).
    pub method_set_at_ms: Option<i64>,
    /// A bank return said the method's account is unusable; cleared by a new method.
    pub method_invalid: bool,
    pub registered_at_ms: i64,
}

impl ProviderRecord {
    /// The record a `provider.registered` event starts, recorded at `at_ms`.
    pub fn registered(p: &ProviderRegistered, at_ms: i64) -> ProviderRecord {
        ProviderRecord {
            provider_id: p.provider_id.clone(),
            name: p.name.clone(),
            email: p.email.clone(),
            tier: p.tier,
            schedule: p.schedule,
            status: p.status,
            payout_method: p.payout_method.clone(),
            method_set_at_ms: None,
            method_invalid: false,
            registered_at_ms: at_ms,
        }
    }
}

/// One provider's stream as its registry commands see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderState {
    /// `None`: no such provider is registered.
    pub provider: Option<ProviderRecord>,
    /// The provider's price book: the canonical rate text by (model, effective from).
    pub rates: BTreeMap<(String, i64), String>,
}

impl ProviderState {
    /// Folds one event of the provider's stream, recorded at `recorded_at_ms`. Events that
    /// do not change the registry (usage, payout runs, …) leave the state as it is.
    pub fn apply(&mut self, recorded_at_ms: i64, body: &EventBody) {
        if let EventBody::RateSet(r) = body {
            self.rates.insert(
                (r.model.clone(), r.effective_from_ms),
                r.rate_usdc_per_hour.clone(),
            );
        }
        apply_to_record(&mut self.provider, recorded_at_ms, body);
    }
}

/// Whether `body` changes a provider's registry record (the `providers` row): its
/// registration, an update, bank details proven wrong by a rail, an erasure.
pub fn changes_record(body: &EventBody) -> bool {
    matches!(
        body,
        EventBody::ProviderRegistered(_)
            | EventBody::ProviderUpdated(_)
            | EventBody::ProviderErased(_)
            | EventBody::PayoutReturned(PayoutReturned {
                method_invalid: true,
                ..
            })
            | EventBody::PayoutFailed(PayoutFailed {
                method_invalid: true,
                ..
            })
    )
}

/// Folds one event, recorded at `recorded_at_ms`, into a provider's registry record
/// (`None`: not registered): the one definition of what an event does to the `providers`
/// row, for the commands ([`ProviderState::apply`]) and the projector alike
/// (`projection::TypedFold`).
pub fn apply_to_record(
    provider: &mut Option<ProviderRecord>,
    recorded_at_ms: i64,
    body: &EventBody,
) {
    match body {
        EventBody::ProviderRegistered(p) => {
            *provider = Some(ProviderRecord::registered(p, recorded_at_ms));
        }
        EventBody::ProviderUpdated(u) => {
            let Some(p) = provider.as_mut() else { return };
            if let Some(name) = &u.name {
                p.name.clone_from(name);
            }
            if let Some(email) = &u.email {
                p.email.clone_from(email);
            }
            p.tier = u.tier.unwrap_or(p.tier);
            p.schedule = u.schedule.unwrap_or(p.schedule);
            p.status = u.status.unwrap_or(p.status);
            if let Some(method) = &u.payout_method {
                p.payout_method = Some(method.clone());
                p.method_set_at_ms = Some(recorded_at_ms);
                p.method_invalid = false;
            }
        }
        EventBody::PayoutReturned(PayoutReturned {
            method_invalid: true,
            ..
        })
        | EventBody::PayoutFailed(PayoutFailed {
            method_invalid: true,
            ..
        }) => {
            if let Some(p) = provider.as_mut() {
                p.method_invalid = true;
            }
        }
        EventBody::ProviderErased(_) => {
            if let Some(p) = provider.as_mut() {
                ERASED.clone_into(&mut p.name);
                ERASED.clone_into(&mut p.email);
                p.payout_method = None;
                p.method_set_at_ms = Some(recorded_at_ms);
                p.method_invalid = false;
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
pub struct RegisterProvider {
    pub provider_id: ProviderId,
    pub name: String,
    pub email: String,
    pub tier: Tier,
    pub schedule: Schedule,
    pub payout_method: Option<PayoutMethod>,
}

impl RegisterProvider {
    /// The event this registration books (its content is what a re-send is compared with).
    pub fn event(&self) -> ProviderRegistered {
        ProviderRegistered {
            provider_id: self.provider_id.clone(),
            name: self.name.trim().to_owned(),
            email: self.email.clone(),
            tier: self.tier,
            schedule: self.schedule,
            status: ProviderStatus::Active,
            payout_method: self.payout_method.clone(),
        }
    }
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

impl UpdateProvider {
    /// The update's normalised content (what a re-send under the same key is compared with).
    pub fn content(&self) -> String {
        serde_json::json!({
            "provider_id": self.provider_id.as_str(),
            "name": self.name.as_deref().map(str::trim),
            "email": self.email,
            "tier": self.tier.map(|t| t.as_str()),
            "schedule": self.schedule.map(|s| s.as_str()),
            "status": self.status.map(|s| s.as_str()),
            "payout_method": self.payout_method,
        })
        .to_string()
    }
}

#[derive(Clone, Debug)]
pub struct RegisterGpu {
    pub gpu_id: GpuId,
    pub provider_id: ProviderId,
    pub model: GpuModel,
}

impl RegisterGpu {
    pub fn event(&self) -> GpuRegistered {
        GpuRegistered {
            gpu_id: self.gpu_id.clone(),
            provider_id: self.provider_id.clone(),
            model: self.model.as_str().to_owned(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct SetRate {
    pub provider_id: ProviderId,
    pub model: GpuModel,
    pub rate: Rate,
    pub effective_from_ms: i64,
}

/// An adjustment: `payable ± amount`, `adjustments ∓ amount`. Its texts are checked
/// against the configured length by the ledger before.
#[derive(Clone, Debug)]
pub struct PostAdjustment {
    pub adjustment_id: AdjustmentId,
    pub provider_id: ProviderId,
    pub amount_micro_usdc: i64,
    pub reason: String,
    pub reference: Option<String>,
    /// The approval it runs under, when gated (not part of its content: a replay without
    /// it is the same adjustment).
    pub approval_id: Option<String>,
}

impl PostAdjustment {
    pub fn event(&self) -> AdjustmentPosted {
        AdjustmentPosted {
            adjustment_id: self.adjustment_id.clone(),
            provider_id: self.provider_id.clone(),
            amount_micro_usdc: self.amount_micro_usdc,
            reason: self.reason.trim().to_owned(),
            reference: self.reference.as_deref().map(|r| r.trim().to_owned()),
            approval_id: self.approval_id.clone(),
        }
    }
}

/// A registry command on one provider's stream.
#[derive(Clone, Copy, Debug)]
pub enum ProviderCommand<'a> {
    Register(&'a RegisterProvider),
    Update(&'a UpdateProvider),
    RegisterGpu(&'a RegisterGpu),
    SetRate(&'a SetRate),
    PostAdjustment(&'a PostAdjustment),
}

/// Checks a display name or holder: 1..=200 characters, no control characters.
pub fn check_name(name: &str, what: &str) -> Result<(), DomainError> {
    let n = name.trim();
    if n.is_empty() || n.chars().count() > 200 || n.chars().any(char::is_control) {
        return Err(DomainError::new(
            "invalid_name",
            format!("{what} must be 1..=200 characters without control characters"),
        ));
    }
    Ok(())
}

/// Checks an e-mail address loosely: one `@` with text on both sides, at most 254 bytes.
/// The refusal does not repeat the address (personal data stays out of errors and logs).
pub fn check_email(email: &str) -> Result<(), DomainError> {
    let ok = email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && matches!(email.split_once('@'), Some((a, b)) if !a.is_empty() && b.contains('.') && !b.contains('@'));
    if !ok {
        return Err(DomainError::new(
            "invalid_email",
            "email is not an e-mail address (one @ between a name and a domain with a dot, at most 254 bytes, no spaces)",
        ));
    }
    Ok(())
}

fn unknown_provider(provider_id: &ProviderId) -> DomainError {
    DomainError::new("unknown_provider", format!("no provider {provider_id}"))
}

/// Decides a registry command against the provider's state: the events to book (empty:
/// the command changes nothing and is a `duplicate`), or the refusal with its stable code.
pub fn decide(state: &ProviderState, cmd: ProviderCommand) -> Result<Vec<EventBody>, DomainError> {
    match cmd {
        ProviderCommand::Register(c) => {
            check_name(&c.name, "name")?;
            check_email(&c.email)?;
            let event = c.event();
            match &state.provider {
                None => Ok(vec![EventBody::ProviderRegistered(event)]),
                Some(_) => Err(DomainError::new(
                    "conflict",
                    format!("provider {} is already registered", c.provider_id),
                )),
            }
        }
        ProviderCommand::Update(c) => decide_update(state, c),
        ProviderCommand::RegisterGpu(c) => {
            state
                .provider
                .as_ref()
                .ok_or_else(|| unknown_provider(&c.provider_id))?;
            Ok(vec![EventBody::GpuRegistered(c.event())])
        }
        ProviderCommand::SetRate(c) => {
            state
                .provider
                .as_ref()
                .ok_or_else(|| unknown_provider(&c.provider_id))?;
            let rate = c.rate.to_canonical();
            let key = (c.model.as_str().to_owned(), c.effective_from_ms);
            if state.rates.get(&key) == Some(&rate) {
                return Ok(vec![]);
            }
            Ok(vec![EventBody::RateSet(RateSet {
                provider_id: c.provider_id.clone(),
                model: key.0,
                rate_usdc_per_hour: rate,
                effective_from_ms: c.effective_from_ms,
            })])
        }
        ProviderCommand::PostAdjustment(c) => {
            if c.amount_micro_usdc == 0 {
                return Err(DomainError::new(
                    "invalid_amount",
                    "an adjustment must not be zero",
                ));
            }
            state
                .provider
                .as_ref()
                .ok_or_else(|| unknown_provider(&c.provider_id))?;
            Ok(vec![EventBody::AdjustmentPosted(c.event())])
        }
    }
}

/// Only what actually changes is recorded: re-sending an update is a duplicate, and
/// re-sending the same payout method does not restart the cooling-off (SPEC §6). With an
/// idempotency key an update that changes nothing is still booked, so that the key is
/// taken.
fn decide_update(state: &ProviderState, c: &UpdateProvider) -> Result<Vec<EventBody>, DomainError> {
    if let Some(name) = &c.name {
        check_name(name, "name")?;
    }
    if let Some(email) = &c.email {
        check_email(email)?;
    }
    let current = state
        .provider
        .as_ref()
        .ok_or_else(|| unknown_provider(&c.provider_id))?;
    let method_changes = c.payout_method.is_some()
        && (c.payout_method != current.payout_method || current.method_invalid);
    let update = ProviderUpdated {
        provider_id: c.provider_id.clone(),
        name: c
            .name
            .as_deref()
            .map(str::trim)
            .filter(|n| *n != current.name)
            .map(str::to_owned),
        email: c.email.clone().filter(|e| *e != current.email),
        tier: c.tier.filter(|t| *t != current.tier),
        schedule: c.schedule.filter(|s| *s != current.schedule),
        status: c.status.filter(|s| *s != current.status),
        payout_method: c.payout_method.clone().filter(|_| method_changes),
    };
    let changes_nothing = update == ProviderUpdated::nothing(update.provider_id.clone());
    if changes_nothing && c.update_id.is_none() {
        return Ok(vec![]);
    }
    Ok(vec![EventBody::ProviderUpdated(update)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Rail;

    const AT: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    fn registered() -> EventBody {
        EventBody::ProviderRegistered(ProviderRegistered {
            provider_id: "prv_a".parse().unwrap(),
            name: "Ada".into(),
            email: "ada@example.com".into(),
            tier: Tier::Community,
            schedule: Schedule::Weekly,
            status: ProviderStatus::Active,
            payout_method: Some(wallet()),
        })
    }

    fn wallet() -> PayoutMethod {
        PayoutMethod::Solana {
            wallet: "7EcDhSYGxXyscszYEp35KHN8vvw3svAuLKTzXwCFLtV".into(),
        }
    }

    fn other_wallet() -> PayoutMethod {
        PayoutMethod::Solana {
            wallet: "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".into(),
        }
    }

    fn returned_method_invalid() -> EventBody {
        EventBody::PayoutReturned(PayoutReturned {
            payout_id: "po_1".parse().unwrap(),
            provider_id: "prv_a".parse().unwrap(),
            rail: Rail::Sepa,
            amount_micro_usdc: 1,
            reason_code: "AC04".into(),
            reason: "closed".into(),
            method_invalid: true,
        })
    }

    fn rate_set(rate: &str) -> EventBody {
        EventBody::RateSet(RateSet {
            provider_id: "prv_a".parse().unwrap(),
            model: "h100".into(),
            rate_usdc_per_hour: rate.into(),
            effective_from_ms: AT,
        })
    }

    fn update() -> UpdateProvider {
        UpdateProvider {
            update_id: None,
            provider_id: ProviderId::parse("prv_a").unwrap(),
            name: None,
            email: None,
            tier: None,
            schedule: None,
            status: None,
            payout_method: None,
        }
    }

    fn register(name: &str, email: &str) -> RegisterProvider {
        RegisterProvider {
            provider_id: ProviderId::parse("prv_a").unwrap(),
            name: name.into(),
            email: email.into(),
            tier: Tier::Community,
            schedule: Schedule::Weekly,
            payout_method: Some(wallet()),
        }
    }

    fn set_rate(rate: &str) -> SetRate {
        SetRate {
            provider_id: ProviderId::parse("prv_a").unwrap(),
            model: GpuModel::parse("h100").unwrap(),
            rate: Rate::parse(rate).unwrap(),
            effective_from_ms: AT,
        }
    }

    fn adjustment(amount: i64) -> PostAdjustment {
        PostAdjustment {
            adjustment_id: AdjustmentId::parse("adj_1").unwrap(),
            provider_id: ProviderId::parse("prv_a").unwrap(),
            amount_micro_usdc: amount,
            reason: " goodwill ".into(),
            reference: None,
            approval_id: None,
        }
    }

    fn gpu() -> RegisterGpu {
        RegisterGpu {
            gpu_id: GpuId::parse("gpu_1").unwrap(),
            provider_id: ProviderId::parse("prv_a").unwrap(),
            model: GpuModel::parse("h100").unwrap(),
        }
    }

    /// Then: the events booked, or the refusal's code.
    enum Then {
        Events(Vec<EventBody>),
        Refused(&'static str),
    }

    fn given(events: &[EventBody]) -> ProviderState {
        let mut state = ProviderState::default();
        for (i, e) in events.iter().enumerate() {
            state.apply(AT + i as i64, e);
        }
        state
    }

    fn check(name: &str, events: &[EventBody], when: ProviderCommand, then: Then) {
        let got = decide(&given(events), when);
        match (then, got) {
            (Then::Events(want), Ok(got)) => assert_eq!(got, want, "{name}"),
            (Then::Refused(code), Err(e)) => assert_eq!(e.code, code, "{name}: {e}"),
            (Then::Events(want), Err(e)) => panic!("{name}: wanted {want:?}, refused {e}"),
            (Then::Refused(code), Ok(got)) => panic!("{name}: wanted {code}, booked {got:?}"),
        }
    }

    fn updated(f: impl FnOnce(&mut ProviderUpdated)) -> Then {
        let mut u = ProviderUpdated::nothing("prv_a".parse().unwrap());
        f(&mut u);
        Then::Events(vec![EventBody::ProviderUpdated(u)])
    }

    /// Given the stream's events, when a command, then its events or its refusal.
    #[test]
    #[expect(clippy::too_many_lines, reason = "one given/when/then table")]
    fn registry_commands_given_when_then() {
        use ProviderCommand as C;
        let reg = [registered()];
        let invalidated = [registered(), returned_method_invalid()];

        let r = register(" Ada ", "ada@example.com");
        check(
            "register",
            &[],
            C::Register(&r),
            Then::Events(vec![reg[0].clone()]),
        );
        check(
            "register twice",
            &reg,
            C::Register(&r),
            Then::Refused("conflict"),
        );
        let r = register(" ", "ada@example.com");
        check(
            "blank name",
            &[],
            C::Register(&r),
            Then::Refused("invalid_name"),
        );
        let r = register(&"x".repeat(201), "ada@example.com");
        check(
            "name too long",
            &[],
            C::Register(&r),
            Then::Refused("invalid_name"),
        );
        let r = register("Ada", "ada@example");
        check(
            "email without domain",
            &[],
            C::Register(&r),
            Then::Refused("invalid_email"),
        );

        let u = update();
        check(
            "update unknown",
            &[],
            C::Update(&u),
            Then::Refused("unknown_provider"),
        );
        check(
            "update of nothing",
            &reg,
            C::Update(&u),
            Then::Events(vec![]),
        );
        let u = UpdateProvider {
            update_id: Some(UpdateId::parse("upd_1").unwrap()),
            ..update()
        };
        check(
            "keyed update of nothing",
            &reg,
            C::Update(&u),
            updated(|_| {}),
        );
        let u = UpdateProvider {
            name: Some(" Ada ".into()),
            tier: Some(Tier::Community),
            ..update()
        };
        check(
            "same name and tier",
            &reg,
            C::Update(&u),
            Then::Events(vec![]),
        );
        let u = UpdateProvider {
            name: Some(" Grace ".into()),
            tier: Some(Tier::Enterprise),
            ..update()
        };
        check(
            "name and tier",
            &reg,
            C::Update(&u),
            updated(|e| {
                e.name = Some("Grace".into());
                e.tier = Some(Tier::Enterprise);
            }),
        );
        let u = UpdateProvider {
            email: Some("no".into()),
            ..update()
        };
        check(
            "bad email",
            &reg,
            C::Update(&u),
            Then::Refused("invalid_email"),
        );
        let u = UpdateProvider {
            payout_method: Some(wallet()),
            ..update()
        };
        check("same method", &reg, C::Update(&u), Then::Events(vec![]));
        check(
            "same method after a return invalidated it",
            &invalidated,
            C::Update(&u),
            updated(|e| e.payout_method = Some(wallet())),
        );
        let u = UpdateProvider {
            payout_method: Some(other_wallet()),
            ..update()
        };
        check(
            "new method",
            &reg,
            C::Update(&u),
            updated(|e| e.payout_method = Some(other_wallet())),
        );
        let u = UpdateProvider {
            status: Some(ProviderStatus::Suspended),
            ..update()
        };
        check(
            "suspend",
            &reg,
            C::Update(&u),
            updated(|e| e.status = Some(ProviderStatus::Suspended)),
        );

        let g = gpu();
        check(
            "gpu of unknown",
            &[],
            C::RegisterGpu(&g),
            Then::Refused("unknown_provider"),
        );
        check(
            "gpu",
            &reg,
            C::RegisterGpu(&g),
            Then::Events(vec![EventBody::GpuRegistered(g.event())]),
        );

        let s = set_rate("2.5");
        check(
            "rate of unknown",
            &[],
            C::SetRate(&s),
            Then::Refused("unknown_provider"),
        );
        check(
            "rate",
            &reg,
            C::SetRate(&s),
            Then::Events(vec![rate_set("2.500000")]),
        );
        check(
            "same rate",
            &[reg[0].clone(), rate_set("2.500000")],
            C::SetRate(&s),
            Then::Events(vec![]),
        );
        check(
            "changed rate",
            &[reg[0].clone(), rate_set("2.000000")],
            C::SetRate(&s),
            Then::Events(vec![rate_set("2.500000")]),
        );

        let a = adjustment(-5);
        check(
            "adjustment of unknown",
            &[],
            C::PostAdjustment(&a),
            Then::Refused("unknown_provider"),
        );
        check(
            "adjustment",
            &reg,
            C::PostAdjustment(&a),
            Then::Events(vec![EventBody::AdjustmentPosted(AdjustmentPosted {
                adjustment_id: "adj_1".parse().unwrap(),
                provider_id: "prv_a".parse().unwrap(),
                amount_micro_usdc: -5,
                reason: "goodwill".into(),
                reference: None,
                approval_id: None,
            })]),
        );
        let a = adjustment(0);
        check(
            "zero adjustment",
            &reg,
            C::PostAdjustment(&a),
            Then::Refused("invalid_amount"),
        );
    }

    /// The fold: what each event does to the state the commands read.
    #[test]
    fn the_fold_tracks_method_changes_and_returns() {
        let mut state = given(&[registered()]);
        let p = state.provider.clone().unwrap();
        assert_eq!(
            (p.registered_at_ms, p.method_set_at_ms, p.method_invalid),
            (AT, None, false)
        );
        state.apply(AT + 10, &returned_method_invalid());
        assert!(state.provider.as_ref().unwrap().method_invalid);
        let change = EventBody::ProviderUpdated(ProviderUpdated {
            payout_method: Some(other_wallet()),
            ..ProviderUpdated::nothing("prv_a".parse().unwrap())
        });
        state.apply(AT + 20, &change);
        let p = state.provider.unwrap();
        assert_eq!(
            (p.payout_method, p.method_set_at_ms, p.method_invalid),
            (Some(other_wallet()), Some(AT + 20), false)
        );
    }
}
