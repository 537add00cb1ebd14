//! Which commands wait for a second operator, and the request each one books: its
//! canonical command line, and a summary that shows every value it changes beside the value
//! in force (SPEC §9). Judged by the ledger's policy in force (`super::effective`).

use serde_json::{Value, json};

use crate::config::ControlConfig;
use crate::domain::event::{EventBody, PayoutMethod};
use crate::domain::ids::{AdjustmentId, FxId, ProviderId};
use crate::domain::money::format_micro_usdc;
use crate::domain::time::format_ms;
use crate::ledger::approvals::NewRequest;
use crate::ledger::registry::{RegisterProvider, SetFee, SetRate, UpdateProvider};
use crate::ledger::{Ledger, LedgerError};
use crate::privacy::fields::{line_sets_personal_values, seal_request};
use crate::privacy::vault::Sealer;
use crate::wire::import::Command;

/// The request a command needs, `None` when it may run at once.
pub async fn request_for(
    ledger: &Ledger,
    config: &ControlConfig,
    command: &Command,
) -> Result<Option<NewRequest>, LedgerError> {
    Ok(match command {
        Command::Adjustment {
            adjustment_id,
            provider_id,
            amount_micro_usdc,
            reason,
            reference,
        } => adjustment_gate(
            ledger,
            config,
            adjustment_id,
            provider_id,
            *amount_micro_usdc,
        )
        .await?
        .map(|why| {
            adjustment_request(
                adjustment_id,
                provider_id,
                *amount_micro_usdc,
                reason,
                reference.as_deref(),
                &why,
            )
        }),
        Command::RegisterProvider(c) if c.payout_method.is_some() => {
            Some(sealed(ledger, register_request(c), c.payout_method.as_ref()).await?)
        }
        Command::UpdateProvider(c) if c.payout_method.is_some() || c.tier.is_some() => {
            let request = update_request(ledger, c).await?;
            Some(sealed(ledger, request, c.payout_method.as_ref()).await?)
        }
        Command::SetFee(c) => Some(fee_request(ledger, c).await?),
        Command::EraseProvider { provider_id } => Some(request(
            "erasure",
            json!({"type": "provider.erase", "provider_id": provider_id.as_str()}),
            format!(
                "erase the personal data of {provider_id}: its name, email and payout method \
                 read `erased` at once, its data key is destroyed when the retention of its \
                 payment records ends"
            ),
            Some(provider_id.clone()),
            None,
        )),
        Command::SetFx { fx_id, eur_per_usd } => {
            fx_request(ledger, config, fx_id.as_ref(), *eur_per_usd).await?
        }
        Command::SetRate(c) => rate_request(ledger, config, c).await?,
        Command::VoidUsage {
            event_id,
            provider_id,
            reason,
        } => void_request(ledger, config, event_id, provider_id.as_ref(), reason).await?,
        _ => None,
    })
}

/// `request` with its provider's personal values sealed (SPEC §11): the command's name,
/// email and bank details, and the summary that shows them, sealed with the provider's key
/// the same way each time (the same command finds its request). A request to set a personal
/// value of an erased provider is refused (`provider_erased`).
async fn sealed(
    ledger: &Ledger,
    mut request: NewRequest,
    method: Option<&PayoutMethod>,
) -> Result<NewRequest, LedgerError> {
    let Some(provider) = request.provider_id.clone() else {
        return Ok(request);
    };
    // A payout method already paying another provider is worth a second look.
    if let Some(method) = method {
        let others = ledger.providers_paid_to(&provider, method).await?;
        if !others.is_empty() {
            request.summary = format!(
                "{}; the same account is the payout method of {} too",
                request.summary,
                others.join(", ")
            );
        }
    }
    match ledger.privacy.sealer(&provider, ledger.now_ms()).await? {
        Sealer::Key(key) => {
            (request.command, request.summary) =
                seal_request(&key, &provider, &request.command, &request.summary);
        }
        Sealer::Erased if line_sets_personal_values(&request.command) => {
            return crate::ledger::reject(
                "provider_erased",
                format!(
                    "provider {provider} was erased: its name, email and payout method cannot \
                     be set again (register the provider anew under a new id)"
                ),
            );
        }
        Sealer::Erased | Sealer::Clear => {}
    }
    Ok(request)
}

/// Why an adjustment of `amount` to `provider` waits (`None` when it does not): at or above
/// the threshold, or bringing the provider's adjustments of the window (absolute amounts,
/// this one included) to it, so one threshold is not split into many smaller ones.
async fn adjustment_gate(
    ledger: &Ledger,
    config: &ControlConfig,
    adjustment_id: &AdjustmentId,
    provider: &ProviderId,
    amount: i64,
) -> Result<Option<String>, LedgerError> {
    let threshold = config.adjustment_approval_micro_usdc.unsigned_abs();
    if amount.unsigned_abs() >= threshold {
        return Ok(Some(format!(
            "at or above the approval threshold of {} USDC",
            format_micro_usdc(config.adjustment_approval_micro_usdc)
        )));
    }
    let since = ledger.now_ms() - config.adjustment_window_hours * 3_600_000;
    let mut earlier: u64 = 0;
    for payload in ledger
        .store
        .payloads_since(
            &crate::domain::event::provider_stream(provider.as_str()),
            "adjustment.posted",
            since,
        )
        .await?
    {
        if let Ok(EventBody::AdjustmentPosted(a)) =
            EventBody::from_json("adjustment.posted", 1, &payload)
        {
            if a.adjustment_id == adjustment_id.as_str() {
                // Booked already: the command answers duplicate (or conflict) by itself.
                return Ok(None);
            }
            earlier += a.amount_micro_usdc.unsigned_abs();
        }
    }
    Ok((earlier + amount.unsigned_abs() >= threshold).then(|| {
        format!(
            "{provider}'s adjustments of the last {} hours would add up to {} USDC, at or above \
             the approval threshold of {} USDC",
            config.adjustment_window_hours,
            format_micro_usdc(i64::try_from(earlier + amount.unsigned_abs()).unwrap_or(i64::MAX)),
            format_micro_usdc(config.adjustment_approval_micro_usdc)
        )
    }))
}

/// The request of a `rate.set` outside the band around the price book: the provider's rate
/// for the model in force at its start, else the median of other providers' rates of the
/// model; a first rate of a model nobody prices has nothing to bound it and waits too.
async fn rate_request(
    ledger: &Ledger,
    config: &ControlConfig,
    c: &SetRate,
) -> Result<Option<NewRequest>, LedgerError> {
    let new: rust_decimal::Decimal = c.rate.to_string().parse().unwrap_or_default();
    let (own, others) = {
        let mut conn = ledger.store.acquire().await?;
        crate::store::providers::price_book(
            &mut conn,
            c.provider_id.as_str(),
            c.model.as_str(),
            c.effective_from_ms,
            PRICE_BOOK_SAMPLE_MAX,
        )
        .await?
    };
    let parse = |t: &String| t.parse::<rust_decimal::Decimal>().ok();
    let (reference, source) = match own.as_ref().and_then(parse) {
        Some(r) => (Some(r), "the rate in force"),
        None => (
            crate::domain::bands::median(others.iter().filter_map(parse).collect()),
            "the median rate of other providers",
        ),
    };
    let why = match reference {
        Some(r)
            if crate::domain::bands::within_pct(
                r,
                new,
                config.rate_set_band_min_pct,
                config.rate_set_band_max_pct,
            ) =>
        {
            return Ok(None);
        }
        Some(r) => format!(
            "outside {}–{} % of {source} ({r} USDC/h)",
            config.rate_set_band_min_pct, config.rate_set_band_max_pct
        ),
        None => "the first rate of this model: nothing in the price book bounds it".to_owned(),
    };
    Ok(Some(request(
        "rate",
        json!({
            "type": "rate.set",
            "provider_id": c.provider_id.as_str(),
            "model": c.model.as_str(),
            "rate_usdc_per_hour": c.rate.to_string(),
            "effective_from": format_ms(c.effective_from_ms),
        }),
        format!(
            "rate of {} for {} {} USDC/h from {}: {why}",
            c.provider_id,
            c.model.as_str(),
            c.rate,
            format_ms(c.effective_from_ms)
        ),
        Some(c.provider_id.clone()),
        None,
    )))
}

/// Other providers' rates a `rate.set` reads at most for the median of the price book.
const PRICE_BOOK_SAMPLE_MAX: i64 = 101;

/// The request of a void whose usage earned at least the void threshold (gross).
async fn void_request(
    ledger: &Ledger,
    config: &ControlConfig,
    event_id: &crate::domain::ids::EventId,
    provider_id: Option<&ProviderId>,
    reason: &str,
) -> Result<Option<NewRequest>, LedgerError> {
    let Ok((_, usage)) = ledger.usage_to_void(event_id, provider_id).await else {
        // The void itself answers (unknown_event, ambiguous_event_id).
        return Ok(None);
    };
    let gross: i64 = usage.segments.iter().map(|s| s.gross_micro_usdc).sum();
    if gross.unsigned_abs() < config.void_approval_micro_usdc.unsigned_abs() {
        return Ok(None);
    }
    let mut line = json!({"type": "usage.void", "event_id": event_id.as_str(), "reason": reason});
    if let Some(p) = provider_id {
        line["provider_id"] = json!(p.as_str());
    }
    Ok(Some(request(
        "void",
        line,
        format!(
            "void usage {event_id} of {} ({} USDC gross, at or above the void threshold of {} \
             USDC): {reason}",
            usage.provider_id,
            format_micro_usdc(gross),
            format_micro_usdc(config.void_approval_micro_usdc)
        ),
        Some(usage.provider_id.clone()),
        Some(-gross),
    )))
}

/// A request of `kind` to run the import line `line`.
fn request(
    kind: &'static str,
    line: Value,
    summary: String,
    provider: Option<ProviderId>,
    amount: Option<i64>,
) -> NewRequest {
    NewRequest {
        kind,
        command: line.to_string(),
        summary,
        provider_id: provider,
        amount_micro_usdc: amount,
    }
}

/// The request of an adjustment at or above the approval threshold.
fn adjustment_request(
    adjustment_id: &AdjustmentId,
    provider_id: &ProviderId,
    amount_micro_usdc: i64,
    reason: &str,
    reference: Option<&str>,
    why: &str,
) -> NewRequest {
    let mut line = json!({
        "type": "adjustment",
        "adjustment_id": adjustment_id.as_str(),
        "provider_id": provider_id.as_str(),
        "amount_usdc": format_micro_usdc(amount_micro_usdc),
        "reason": reason,
    });
    if let Some(r) = reference {
        line["reference"] = json!(r);
    }
    request(
        "adjustment",
        line,
        format!(
            "adjustment {adjustment_id} of {} USDC to {provider_id}: {reason} ({why})",
            format_micro_usdc(amount_micro_usdc)
        ),
        Some(provider_id.clone()),
        Some(amount_micro_usdc),
    )
}

/// The request of a provider registration that sets a payout method.
fn register_request(c: &RegisterProvider) -> NewRequest {
    request(
        "payout_method",
        json!({
            "type": "provider.register",
            "provider_id": c.provider_id.as_str(),
            "name": c.name,
            "email": c.email,
            "tier": c.tier.as_str(),
            "schedule": c.schedule.as_str(),
            "payout_method": c.payout_method,
        }),
        format!(
            "register {} with the payout method {}",
            c.provider_id,
            method_detail(c.payout_method.as_ref())
        ),
        Some(c.provider_id.clone()),
        None,
    )
}

/// The request of a provider update that sets a payout method (kind `payout_method`) or a
/// tier (kind `tier`: the tier decides the platform's fee): the line carries the fields the
/// update sets, and only those; the summary shows each beside the value in force.
async fn update_request(ledger: &Ledger, c: &UpdateProvider) -> Result<NewRequest, LedgerError> {
    let current = ledger.provider_record(c.provider_id.as_str()).await?;
    let mut line = json!({"type": "provider.update", "provider_id": c.provider_id.as_str()});
    let fields: [(&str, Option<Value>); 7] = [
        ("update_id", c.update_id.as_ref().map(|u| json!(u.as_str()))),
        ("name", c.name.as_ref().map(|v| json!(v))),
        ("email", c.email.as_ref().map(|v| json!(v))),
        ("tier", c.tier.map(|v| json!(v.as_str()))),
        ("schedule", c.schedule.map(|v| json!(v.as_str()))),
        ("status", c.status.map(|v| json!(v.as_str()))),
        ("payout_method", c.payout_method.as_ref().map(|v| json!(v))),
    ];
    for (name, value) in fields {
        if let Some(v) = value {
            line[name] = v;
        }
    }
    let changes = update_changes(c, current.as_ref());
    let kind = if c.payout_method.is_some() {
        "payout_method"
    } else {
        "tier"
    };
    Ok(request(
        kind,
        line,
        format!("change {}", changes.join(", ")),
        Some(c.provider_id.clone()),
        None,
    ))
}

/// Each field a provider update sets, beside the value in force (`current`).
fn update_changes(
    c: &UpdateProvider,
    current: Option<&crate::ledger::registry::ProviderRecord>,
) -> Vec<String> {
    let was = |f: &dyn Fn(&crate::ledger::registry::ProviderRecord) -> String| {
        current.map_or_else(|| "no such provider".to_owned(), f)
    };
    let mut changes = Vec::new();
    if c.payout_method.is_some() {
        changes.push(format!(
            "the payout method of {} to {} (in force: {})",
            c.provider_id,
            method_detail(c.payout_method.as_ref()),
            was(&|p| {
                let detail = method_detail(p.payout_method.as_ref());
                // The approver must know the details were blocked by a bank's return or
                // rejection: that booked money back to payable on one importer's word.
                if p.method_invalid {
                    format!("{detail}, blocked since the bank returned or rejected a payout")
                } else {
                    detail
                }
            })
        ));
    }
    if let Some(tier) = c.tier {
        changes.push(format!(
            "the tier of {} to {} (in force: {})",
            c.provider_id,
            tier.as_str(),
            was(&|p| p.tier.as_str().to_owned())
        ));
    }
    if let Some(name) = &c.name {
        changes.push(format!(
            "the name to {name:?} (in force: {})",
            was(&|p| format!("{:?}", p.name))
        ));
    }
    if let Some(email) = &c.email {
        changes.push(format!(
            "the email to {email} (in force: {})",
            was(&|p| p.email.clone())
        ));
    }
    if let Some(schedule) = c.schedule {
        changes.push(format!(
            "the schedule to {} (in force: {})",
            schedule.as_str(),
            was(&|p| p.schedule.as_str().to_owned())
        ));
    }
    if let Some(status) = c.status {
        changes.push(format!(
            "the status to {} (in force: {})",
            status.as_str(),
            was(&|p| p.status.as_str().to_owned())
        ));
    }
    changes
}

/// The request of a fee schedule change (always gated), beside the fee in force then.
async fn fee_request(ledger: &Ledger, c: &SetFee) -> Result<NewRequest, LedgerError> {
    let in_force = {
        let mut conn = ledger.store.acquire().await?;
        crate::store::providers::fee_in_force(&mut conn, c.tier, c.effective_from_ms).await?
    };
    Ok(request(
        "fee_schedule",
        json!({
            "type": "fee_schedule.set",
            "tier": c.tier.as_str(),
            "fee_bps": c.fee.get(),
            "effective_from": format_ms(c.effective_from_ms),
        }),
        format!(
            "{} fee {} bps from {} (in force then: {})",
            c.tier.as_str(),
            c.fee.get(),
            format_ms(c.effective_from_ms),
            in_force.map_or_else(|| "the default".to_owned(), |f| format!("{f} bps"))
        ),
        None,
        None,
    ))
}

/// The request of an FX rate outside the band (against the latest rate), `None` inside it.
async fn fx_request(
    ledger: &Ledger,
    config: &ControlConfig,
    fx_id: Option<&FxId>,
    eur_per_usd: rust_decimal::Decimal,
) -> Result<Option<NewRequest>, LedgerError> {
    let week_ago = ledger.now_ms() - WEEK_MS;
    let (latest, mut week) = {
        let mut conn = ledger.store.acquire().await?;
        let week: Vec<rust_decimal::Decimal> =
            crate::store::runs::fx_rates_after(&mut conn, week_ago)
                .await?
                .iter()
                .filter_map(|t| t.parse().ok())
                .collect();
        (
            crate::ledger::runs::latest_fx_rate(&mut conn, i64::MAX).await?,
            week,
        )
    };
    if let Some((_, before)) = {
        let mut conn = ledger.store.acquire().await?;
        crate::ledger::runs::latest_fx_rate(&mut conn, week_ago).await?
    } {
        week.push(before);
    }
    let why = match crate::domain::bands::fx_check(
        latest.map(|(_, r)| r),
        eur_per_usd,
        &config.fx_band(),
    ) {
        Err(why) => why.message,
        // A walk in steps each inside the band still waits once it has gone too far
        // from where the rate stood a week before.
        // (or any rate booked since).
        Ok(()) => match week.into_iter().find(|before| {
            *before > rust_decimal::Decimal::ZERO
                && crate::domain::bands::moves_more_than(
                    *before,
                    eur_per_usd,
                    config.fx_week_step_max_pct,
                )
        }) {
            Some(before) => format!(
                "eur_per_usd {} moves more than {}% from {before}, a rate in force within the \
                 last 7 days (control.fx_week_step_max_pct)",
                eur_per_usd.normalize(),
                config.fx_week_step_max_pct
            ),
            None => return Ok(None),
        },
    };
    let mut line =
        json!({"type": "fx.rate_set", "eur_per_usd": eur_per_usd.normalize().to_string()});
    if let Some(id) = fx_id {
        line["fx_id"] = json!(id.as_str());
    }
    Ok(Some(request(
        "fx_rate",
        line,
        format!("EUR per USD {}: {why}", eur_per_usd.normalize()),
        None,
        None,
    )))
}

const WEEK_MS: i64 = 7 * 24 * 3_600_000;

/// The payout method a request sets, in full (what the approver must see: SPEC §9).
fn method_detail(method: Option<&crate::domain::event::PayoutMethod>) -> String {
    use crate::domain::event::PayoutMethod;
    match method {
        Some(PayoutMethod::Solana { wallet }) => format!("solana wallet {wallet}"),
        Some(PayoutMethod::Sepa { iban, bic, holder }) => format!(
            "sepa IBAN {iban}{} held by {holder}",
            bic.as_deref()
                .map(|b| format!(" (BIC {b})"))
                .unwrap_or_default()
        ),
        Some(PayoutMethod::Ach {
            routing,
            account,
            account_type,
            holder,
            entity,
        }) => format!(
            "ach routing {routing} {account_type} account {account} held by {holder} ({entity})"
        ),
        None => "no payout method".to_owned(),
    }
}
