//! The NDJSON import format (SPEC §8): one command per line, tagged by `"type"`.
//! Shared by `settle import` and the admin HTTP API.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::domain::DomainError;
use crate::domain::event::{PayoutMethod, ProviderStatus, Schedule, Tier};
use crate::domain::ids::{AdjustmentId, EventId, FxId, GpuId, GpuModel, ProviderId, UpdateId};
use crate::domain::money::{FeeBps, Rate, parse_micro_usdc};
use crate::domain::time::parse_rfc3339_ms;
use crate::ledger::ingest::UsageInput;
use crate::ledger::registry::{RegisterGpu, RegisterProvider, SetFee, SetRate, UpdateProvider};
use crate::ledger::{Actor, Applied, Ledger, LedgerError, methods};

/// One parsed import line.
#[derive(Clone, Debug)]
pub enum Command {
    RegisterProvider(RegisterProvider),
    UpdateProvider(UpdateProvider),
    RegisterGpu(RegisterGpu),
    SetRate(SetRate),
    SetFee(SetFee),
    Usage(UsageInput),
    VoidUsage {
        event_id: EventId,
        provider_id: Option<ProviderId>,
        reason: String,
    },
    Adjustment {
        adjustment_id: AdjustmentId,
        provider_id: ProviderId,
        amount_micro_usdc: i64,
        reason: String,
        reference: Option<String>,
    },
    SetFx {
        fx_id: Option<FxId>,
        eur_per_usd: rust_decimal::Decimal,
    },
    /// A reliability report (SPEC §12: `gpu.schedule`, `gpu.maintenance`, `gpu.online`,
    /// `job.outcome`, `gpu.benchmark`).
    Reliability(super::reliability::GpuReport),
    /// `provider.erase`: a provider's personal data erased (SPEC §11; always gated).
    EraseProvider {
        provider_id: ProviderId,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderEraseLine {
    provider_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderRegisterLine {
    provider_id: String,
    name: String,
    email: String,
    tier: String,
    schedule: String,
    #[serde(default)]
    payout_method: Option<PayoutMethod>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderUpdateLine {
    #[serde(default)]
    update_id: Option<String>,
    provider_id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    email: Option<String>,
    #[serde(default)]
    tier: Option<String>,
    #[serde(default)]
    schedule: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    payout_method: Option<PayoutMethod>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuRegisterLine {
    gpu_id: String,
    provider_id: String,
    model: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateSetLine {
    provider_id: String,
    model: String,
    rate_usdc_per_hour: String,
    effective_from: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FeeScheduleLine {
    tier: String,
    fee_bps: i64,
    effective_from: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageLine {
    event_id: Option<String>,
    provider_id: Option<String>,
    gpu_id: Option<String>,
    #[serde(default)]
    rental_id: Option<String>,
    started_at: Option<String>,
    ended_at: Option<String>,
    #[serde(default)]
    rate_usdc_per_hour: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VoidLine {
    event_id: String,
    #[serde(default)]
    provider_id: Option<String>,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdjustmentLine {
    adjustment_id: String,
    provider_id: String,
    amount_usdc: String,
    reason: String,
    #[serde(default)]
    reference: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FxLine {
    #[serde(default)]
    fx_id: Option<String>,
    eur_per_usd: String,
}

fn fields<T: DeserializeOwned>(
    mut object: serde_json::Map<String, Value>,
    kind: &str,
) -> Result<T, DomainError> {
    object.remove("type");
    serde_json::from_value(Value::Object(object))
        .map_err(|e| DomainError::new("invalid_fields", format!("{kind}: {e}")))
}

fn method(m: Option<PayoutMethod>) -> Result<Option<PayoutMethod>, DomainError> {
    m.as_ref().map(methods::validate).transpose()
}

/// The accepted line types.
pub const LINE_TYPES: &[&str] = &[
    "provider.register",
    "provider.update",
    "gpu.register",
    "rate.set",
    "fee_schedule.set",
    "usage",
    "usage.void",
    "adjustment",
    "fx.rate_set",
    "gpu.schedule",
    "gpu.maintenance",
    "gpu.online",
    "job.outcome",
    "gpu.benchmark",
    "provider.erase",
];

/// Parses one NDJSON line into a command.
pub fn parse_line(line: &str) -> Result<Command, DomainError> {
    let (kind, object) = typed_object(line)?;
    match kind.as_str() {
        "provider.register" => fields::<ProviderRegisterLine>(object, &kind)?.command(),
        "provider.update" => fields::<ProviderUpdateLine>(object, &kind)?.command(),
        "gpu.register" => fields::<GpuRegisterLine>(object, &kind)?.command(),
        "rate.set" => fields::<RateSetLine>(object, &kind)?.command(),
        "fee_schedule.set" => fields::<FeeScheduleLine>(object, &kind)?.command(),
        "usage" => fields::<UsageLine>(object, &kind)?.command(),
        "usage.void" => fields::<VoidLine>(object, &kind)?.command(),
        "adjustment" => fields::<AdjustmentLine>(object, &kind)?.command(),
        "fx.rate_set" => fields::<FxLine>(object, &kind)?.command(),
        "provider.erase" => Ok(Command::EraseProvider {
            provider_id: ProviderId::parse(
                &fields::<ProviderEraseLine>(object, &kind)?.provider_id,
            )?,
        }),
        k if super::reliability::RELIABILITY_LINE_TYPES.contains(&k) => Ok(Command::Reliability(
            super::reliability::parse(k, Value::Object(object))?,
        )),
        other => Err(DomainError::new(
            "unknown_type",
            format!(
                "unknown type {other:?}; expected one of {}",
                LINE_TYPES.join(", ")
            ),
        )),
    }
}

/// The `"type"` of a line and its JSON object (`"type"` still in it).
fn typed_object(line: &str) -> Result<(String, serde_json::Map<String, Value>), DomainError> {
    let value: Value = serde_json::from_str(line)
        .map_err(|e| DomainError::new("malformed_json", format!("not a JSON object: {e}")))?;
    let Value::Object(object) = value else {
        return Err(DomainError::new(
            "malformed_json",
            "a line must be a JSON object",
        ));
    };
    let kind = match object.get("type") {
        Some(Value::String(k)) => k.clone(),
        Some(_) => {
            return Err(DomainError::new(
                "invalid_type",
                "\"type\" must be a string",
            ));
        }
        None => return Err(DomainError::new("missing_type", "a line needs a \"type\"")),
    };
    Ok((kind, object))
}

impl ProviderRegisterLine {
    /// The `provider.register` command of the line, its fields checked.
    fn command(self) -> Result<Command, DomainError> {
        Ok(Command::RegisterProvider(RegisterProvider {
            provider_id: ProviderId::parse(&self.provider_id)?,
            name: self.name,
            email: self.email,
            tier: Tier::parse(&self.tier)?,
            schedule: Schedule::parse(&self.schedule)?,
            payout_method: method(self.payout_method)?,
        }))
    }
}

impl ProviderUpdateLine {
    /// The `provider.update` command of the line, its fields checked.
    fn command(self) -> Result<Command, DomainError> {
        Ok(Command::UpdateProvider(UpdateProvider {
            update_id: self.update_id.as_deref().map(UpdateId::parse).transpose()?,
            provider_id: ProviderId::parse(&self.provider_id)?,
            name: self.name,
            email: self.email,
            tier: self.tier.as_deref().map(Tier::parse).transpose()?,
            schedule: self.schedule.as_deref().map(Schedule::parse).transpose()?,
            status: self
                .status
                .as_deref()
                .map(ProviderStatus::parse)
                .transpose()?,
            payout_method: method(self.payout_method)?,
        }))
    }
}

impl GpuRegisterLine {
    /// The `gpu.register` command of the line, its fields checked.
    fn command(self) -> Result<Command, DomainError> {
        Ok(Command::RegisterGpu(RegisterGpu {
            gpu_id: GpuId::parse(&self.gpu_id)?,
            provider_id: ProviderId::parse(&self.provider_id)?,
            model: GpuModel::parse(&self.model)?,
        }))
    }
}

impl RateSetLine {
    /// The `rate.set` command of the line, its fields checked.
    fn command(self) -> Result<Command, DomainError> {
        Ok(Command::SetRate(SetRate {
            provider_id: ProviderId::parse(&self.provider_id)?,
            model: GpuModel::parse(&self.model)?,
            rate: Rate::parse(&self.rate_usdc_per_hour)?,
            effective_from_ms: parse_rfc3339_ms(&self.effective_from)?,
        }))
    }
}

impl FeeScheduleLine {
    /// The `fee_schedule.set` command of the line, its fields checked.
    fn command(self) -> Result<Command, DomainError> {
        Ok(Command::SetFee(SetFee {
            tier: Tier::parse(&self.tier)?,
            fee: FeeBps::new(self.fee_bps)?,
            effective_from_ms: parse_rfc3339_ms(&self.effective_from)?,
        }))
    }
}

impl UsageLine {
    /// The `usage` command of the line, its fields as given (the ledger checks them when
    /// it books the usage).
    fn command(self) -> Result<Command, DomainError> {
        Ok(Command::Usage(UsageInput {
            event_id: self.event_id,
            provider_id: self.provider_id,
            gpu_id: self.gpu_id,
            rental_id: self.rental_id,
            started_at: self.started_at,
            ended_at: self.ended_at,
            rate_usdc_per_hour: self.rate_usdc_per_hour,
        }))
    }
}

impl VoidLine {
    /// The `usage.void` command of the line, its fields checked.
    fn command(self) -> Result<Command, DomainError> {
        Ok(Command::VoidUsage {
            event_id: EventId::parse(&self.event_id)?,
            provider_id: self
                .provider_id
                .as_deref()
                .map(ProviderId::parse)
                .transpose()?,
            reason: self.reason,
        })
    }
}

impl AdjustmentLine {
    /// The `adjustment` command of the line, its fields checked.
    fn command(self) -> Result<Command, DomainError> {
        Ok(Command::Adjustment {
            adjustment_id: AdjustmentId::parse(&self.adjustment_id)?,
            provider_id: ProviderId::parse(&self.provider_id)?,
            amount_micro_usdc: parse_micro_usdc(&self.amount_usdc)?,
            reason: self.reason,
            reference: self.reference,
        })
    }
}

impl FxLine {
    /// The `fx.rate_set` command of the line, its fields checked.
    fn command(self) -> Result<Command, DomainError> {
        let rate = self
            .eur_per_usd
            .parse::<rust_decimal::Decimal>()
            .map_err(|_| {
                DomainError::new(
                    "invalid_fx_rate",
                    format!("not a decimal: {:?}", self.eur_per_usd),
                )
            })?;
        Ok(Command::SetFx {
            fx_id: self.fx_id.as_deref().map(FxId::parse).transpose()?,
            eur_per_usd: rate,
        })
    }
}

/// Applies a non-usage command (usage lines are batched by the caller).
pub async fn apply(
    ledger: &Ledger,
    command: &Command,
    actor: &Actor,
) -> Result<Applied, LedgerError> {
    match command {
        Command::RegisterProvider(c) => ledger.register_provider(c, actor).await,
        Command::UpdateProvider(c) => ledger.update_provider(c, actor).await,
        Command::RegisterGpu(c) => ledger.register_gpu(c, actor).await,
        Command::SetRate(c) => ledger.set_rate(c, actor).await,
        Command::SetFee(c) => ledger.set_fee(c, actor).await,
        Command::VoidUsage {
            event_id,
            provider_id,
            reason,
        } => {
            ledger
                .void_usage(event_id, provider_id.as_ref(), reason, actor)
                .await
        }
        Command::Adjustment {
            adjustment_id,
            provider_id,
            amount_micro_usdc,
            reason,
            reference,
        } => {
            ledger
                .post_adjustment(
                    adjustment_id,
                    provider_id,
                    *amount_micro_usdc,
                    reason,
                    reference.as_deref(),
                    actor,
                )
                .await
        }
        Command::SetFx { fx_id, eur_per_usd } => {
            ledger
                .set_fx_rate(*eur_per_usd, fx_id.as_ref(), actor)
                .await
        }
        Command::Reliability(r) => ledger.record_gpu_report(r, actor).await,
        Command::EraseProvider { provider_id } => ledger
            .erase_provider(provider_id.as_str(), actor)
            .await
            .map(|e| e.applied),
        Command::Usage(u) => {
            let results = ledger
                .ingest_usage(
                    std::slice::from_ref(u),
                    &crate::ledger::ingest::SenderScope::Admin,
                    actor,
                )
                .await?;
            match results.into_iter().next() {
                Some(crate::ledger::ingest::UsageResult::Accepted { .. }) => Ok(Applied::Accepted),
                Some(crate::ledger::ingest::UsageResult::Duplicate { .. }) => {
                    Ok(Applied::Duplicate)
                }
                Some(crate::ledger::ingest::UsageResult::Rejected { code, message, .. }) => {
                    crate::ledger::reject(code, message)
                }
                None => crate::ledger::reject("internal", "no result"),
            }
        }
    }
}

/// The result of one import line, as `settle import` and `POST /v1/admin/import` report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineResult {
    /// 1-based line number.
    pub line: usize,
    /// The line's `type` (empty when unreadable).
    pub kind: String,
    pub id: Option<String>,
    /// `accepted`, `duplicate`, `pending` (waiting for a second actor: dual control) or
    /// `rejected`.
    pub status: &'static str,
    pub code: Option<String>,
    pub message: Option<String>,
    /// The request a `pending` line waits on (`settle approvals approve ID`).
    pub approval_id: Option<String>,
}

/// Counts of an import by status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub accepted: usize,
    pub duplicate: usize,
    pub pending: usize,
    pub rejected: usize,
}

impl Totals {
    pub fn of(results: &[LineResult]) -> Totals {
        let mut t = Totals::default();
        for r in results {
            t.add(r);
        }
        t
    }

    /// Counts one more line's result.
    pub fn add(&mut self, r: &LineResult) {
        match r.status {
            "accepted" => self.accepted += 1,
            "duplicate" => self.duplicate += 1,
            "pending" => self.pending += 1,
            _ => self.rejected += 1,
        }
    }
}

/// The line's type and id, for its result.
pub(crate) fn describe(command: &Command) -> (String, Option<String>) {
    match command {
        Command::RegisterProvider(c) => {
            ("provider.register".into(), Some(c.provider_id.to_string()))
        }
        Command::UpdateProvider(c) => ("provider.update".into(), Some(c.provider_id.to_string())),
        Command::RegisterGpu(c) => ("gpu.register".into(), Some(c.gpu_id.to_string())),
        Command::SetRate(c) => (
            "rate.set".into(),
            Some(format!("{}/{}", c.provider_id, c.model.as_str())),
        ),
        Command::SetFee(c) => ("fee_schedule.set".into(), Some(c.tier.as_str().into())),
        Command::Usage(u) => ("usage".into(), u.event_id.clone()),
        Command::VoidUsage { event_id, .. } => ("usage.void".into(), Some(event_id.to_string())),
        Command::EraseProvider { provider_id } => {
            ("provider.erase".into(), Some(provider_id.to_string()))
        }
        Command::Adjustment { adjustment_id, .. } => {
            ("adjustment".into(), Some(adjustment_id.to_string()))
        }
        Command::SetFx { fx_id, .. } => {
            ("fx.rate_set".into(), fx_id.as_ref().map(|f| f.to_string()))
        }
        Command::Reliability(r) => (
            match r.kind {
                "schedule" => "gpu.schedule",
                "maintenance" => "gpu.maintenance",
                "online" => "gpu.online",
                "job" => "job.outcome",
                _ => "gpu.benchmark",
            }
            .into(),
            Some(r.report_id.clone()),
        ),
    }
}

pub fn rejected(line: usize, kind: String, id: Option<String>, e: DomainError) -> LineResult {
    LineResult {
        line,
        kind,
        id,
        status: "rejected",
        code: Some(e.code.to_owned()),
        message: Some(e.message),
        approval_id: None,
    }
}
