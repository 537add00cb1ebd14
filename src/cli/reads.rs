//! Read commands (`earnings`, `payouts`, `balance`) and token commands (`token create |
//! revoke | list`), over the same read functions as the HTTP API.
//!
//! The rows they print come from [`crate::report`], which also renders the API's CSV
//! exports, so the CLI's `--format csv` and `GET …/earnings.csv` are the same file.

use std::io::Write;

use anyhow::bail;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::auth::{self, NewToken, Scope};
use crate::domain::ids::ProviderId;
use crate::domain::money::format_micro_usdc;
use crate::domain::time::format_ms;
use crate::ledger::Ledger;
use crate::report::output::{Format, Rows};
use crate::report::{earnings_rows, parse_range, payout_rows};
use crate::store::Store;
use crate::store::read::{self, EarningsBy, PayoutFilter, PayoutRow};

/// `settle earnings`
#[derive(Args, Debug)]
pub struct EarningsArgs {
    #[arg(long)]
    pub provider: String,
    /// Start, inclusive: YYYY-MM-DD (00:00 UTC) or RFC 3339. Default: the 1st of this month.
    #[arg(long)]
    pub from: Option<String>,
    /// End, exclusive: YYYY-MM-DD or RFC 3339. Default: the 1st of next month.
    #[arg(long)]
    pub to: Option<String>,
    /// day, week, month, gpu or model.
    #[arg(long, default_value = "day")]
    pub group_by: String,
}

/// `settle payouts`
#[derive(Args, Debug)]
pub struct PayoutsArgs {
    /// One provider's payouts (default: every provider's).
    #[arg(long)]
    pub provider: Option<String>,
    /// pending (created, held, submitted), history (settled, failed, cancelled, returned) or all.
    #[arg(long, default_value = "all")]
    pub status: String,
}

/// `settle token …`
#[derive(Subcommand, Debug)]
pub enum TokenCmd {
    /// Create an API token; the token is printed once and never stored. The creator
    /// (`--actor`) is recorded with it.
    Create {
        /// admin, provider, ingest or metering.
        #[arg(long)]
        scope: String,
        /// The token's name, on every event it causes (`token:NAME#ID`): 1 to 64 letters,
        /// digits or . _ - @, unique among live tokens.
        #[arg(long)]
        name: String,
        /// The provider a provider or ingest token is bound to.
        #[arg(long)]
        provider: Option<String>,
        #[arg(long, default_value = "")]
        label: String,
        /// Lifetime, 1 to 3650 days. Default: `[auth] {scope}_token_days_default`.
        #[arg(long)]
        expires_in_days: Option<i64>,
    },
    /// Revoke a token by its id (from `token list`): refused from this moment on.
    Revoke { token_id: String },
    /// List tokens (never their secrets).
    List,
}

/// `settle earnings`
pub async fn earnings(
    ledger: &Ledger,
    args: &EarningsArgs,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let store = &ledger.store;
    let provider = ProviderId::parse(&args.provider)?;
    if !read::provider_exists(store, provider.as_str()).await? {
        bail!("no provider {provider}");
    }
    let by = EarningsBy::parse(&args.group_by)?;
    let (from_ms, to_ms) = parse_range(args.from.as_deref(), args.to.as_deref(), ledger.now_ms())?;
    let report = read::earnings(&ledger.store, provider.as_str(), from_ms, to_ms, by).await?;
    write!(out, "{}", earnings_rows(&report).render(format))?;
    if format == Format::Table {
        let t = &report.totals;
        writeln!(
            out,
            "{provider} [{}, {}) by {}: gross {}, fee {}, net {}, {} GPU-hours",
            format_ms(from_ms),
            format_ms(to_ms),
            by.as_str(),
            format_micro_usdc(t.gross_micro_usdc),
            format_micro_usdc(t.fee_micro_usdc),
            format_micro_usdc(t.net_micro_usdc),
            t.gpu_hours()
        )?;
    }
    Ok(0)
}

/// The page size the CLI reads payouts in.
const CLI_PAGE_ROWS: i64 = 1000;

/// `settle payouts`
pub async fn payouts(
    ledger: &Ledger,
    args: &PayoutsArgs,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let store = &ledger.store;
    let filter = PayoutFilter::parse(&args.status)?;
    if let Some(p) = &args.provider {
        let p = ProviderId::parse(p)?;
        if !read::provider_exists(store, p.as_str()).await? {
            bail!("no provider {p}");
        }
    }
    let mut all: Vec<PayoutRow> = Vec::new();
    loop {
        let after = all.last().map(|p| (p.created_at_ms, p.payout_id.clone()));
        let page = read::payouts(
            store,
            args.provider.as_deref(),
            filter,
            after.as_ref().map(|(ms, id)| (*ms, id.as_str())),
            CLI_PAGE_ROWS,
        )
        .await?;
        let done = (page.len() as i64) < CLI_PAGE_ROWS;
        all.extend(page);
        if done {
            break;
        }
    }
    write!(out, "{}", payout_rows(&all, "mainnet-beta").render(format))?;
    Ok(0)
}

/// `settle balance`
pub async fn balance(
    ledger: &Ledger,
    provider: Option<&str>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let balances = read::balances(&ledger.store, provider).await?;
    let mut rows = Rows::new(vec![
        "provider_id",
        "available_usdc",
        "held_usdc",
        "in_transit_usdc",
        "paid_usdc",
    ]);
    for b in balances {
        rows.push(vec![
            json!(b.provider_id),
            json!(format_micro_usdc(b.payable_micro_usdc)),
            json!(format_micro_usdc(b.held_micro_usdc)),
            json!(format_micro_usdc(b.in_transit_micro_usdc)),
            json!(format_micro_usdc(b.paid_micro_usdc)),
        ]);
    }
    write!(out, "{}", rows.render(format))?;
    Ok(0)
}

/// `settle reliability --provider ID`: the provider's row, then one per GPU (JSON: the whole
/// `ledger::reliability::ProviderReliability`, trend included).
pub async fn reliability(
    ledger: &Ledger,
    provider: &str,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let r = match ledger.provider_reliability(provider).await {
        Ok(r) => r,
        Err(crate::ledger::LedgerError::Rejected(e)) => {
            eprintln!("rejected: {}: {}", e.code, e.message);
            return Ok(2);
        }
        Err(e) => return Err(e.into()),
    };
    if format == Format::Json {
        writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
        return Ok(0);
    }
    let pct = |bps: u16| format!("{}.{:02} %", bps / 100, bps % 100);
    let mut rows = Rows::new(vec![
        "gpu",
        "score",
        "uptime",
        "jobs",
        "benchmark",
        "listed",
        "why",
    ]);
    let mut push =
        |who: &str, s: &crate::ledger::reliability::ScoreView, listed: &str, why: String| {
            rows.push(vec![
                json!(who),
                json!(pct(s.score_bps)),
                json!(pct(s.uptime.value_bps)),
                json!(pct(s.jobs.value_bps)),
                json!(pct(s.benchmark.value_bps)),
                json!(listed),
                json!(why),
            ]);
        };
    push(&r.provider_id, &r.score, "", String::new());
    for g in &r.gpus {
        let lowered: Vec<&String> = [&g.score.uptime, &g.score.jobs, &g.score.benchmark]
            .iter()
            .flat_map(|p| p.reasons.iter())
            .chain(g.not_listed.iter())
            .collect();
        let why = lowered
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        push(
            &g.gpu_id,
            &g.score,
            if g.listed { "yes" } else { "no" },
            why,
        );
    }
    write!(out, "{}", rows.render(format))?;
    Ok(0)
}

/// `settle token create | revoke | list`; the operator (`--actor`) is recorded as the creator
/// or revoker; `[auth]` of the configuration gives the default lifetimes.
pub async fn token(
    ledger: &Ledger,
    command: &TokenCmd,
    config: Option<&std::path::Path>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let store = &ledger.store;
    let now_ms = ledger.now_ms();
    match command {
        TokenCmd::Create {
            scope,
            name,
            provider,
            label,
            expires_in_days,
        } => {
            let config = super::config_of(config)?;
            let new = NewToken {
                scope: Scope::parse(scope)?,
                provider_id: provider.as_deref().map(ProviderId::parse).transpose()?,
                name: name.clone(),
                label: label.clone(),
                expires_in_days: *expires_in_days,
                created_by: super::cli_actor(),
                needs_approval: false,
            };
            let signer = super::cli_signer(ledger).await?;
            let submitted = crate::control::submit_token(
                ledger,
                &config.control,
                &new,
                &config.auth,
                &super::cli_actor(),
                signer.as_ref().map(|s| s as &dyn crate::control::Sign),
            )
            .await;
            let (created, request) = match submitted {
                Ok(done) => done,
                Err(crate::ledger::LedgerError::Rejected(e)) => return Err(e.into()),
                Err(e) => return Err(e.into()),
            };
            print_created(&created, request.as_ref(), format, out)?;
            Ok(0)
        }
        TokenCmd::Revoke { token_id } => {
            let applied = auth::revoke_token(store, token_id, &super::cli_actor(), now_ms).await?;
            match format {
                Format::Json => writeln!(
                    out,
                    "{}",
                    json!({"token_id": token_id, "status": applied.as_str()})
                )?,
                _ => writeln!(out, "{token_id}: {}", applied.as_str())?,
            }
            Ok(0)
        }
        TokenCmd::List => list_tokens(store, now_ms, format, out).await,
    }
}

/// Prints a created token, its secret once, with the warning to store it.
fn print_created(
    created: &auth::CreatedToken,
    request: Option<&crate::store::read::ApprovalRow>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let i = &created.info;
    let approval_id = request.map(|r| r.approval_id.as_str());
    match format {
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "token_id": i.token_id,
                "token": created.token,
                "name": i.name,
                "scope": i.scope.as_str(),
                "provider_id": i.provider_id,
                "label": i.label,
                "created_at": format_ms(i.created_at_ms),
                "created_by": i.created_by,
                "expires_at": i.expires_at_ms.map(format_ms),
                "status": if approval_id.is_some() { "pending_approval" } else { "active" },
                "approval_id": approval_id,
            }))?
        )?,
        _ => {
            if let Some(id) = approval_id {
                writeln!(
                    out,
                    "pending_approval {id}: this {} token works once a different operator approves it",
                    i.scope.as_str()
                )?;
            }
            writeln!(out, "token_id: {}", i.token_id)?;
            writeln!(out, "name: {}", i.name)?;
            writeln!(
                out,
                "expires_at: {}",
                i.expires_at_ms
                    .map_or_else(|| "never".to_owned(), format_ms)
            )?;
            writeln!(out, "token: {}", created.token)?;
            writeln!(
                out,
                "Store the token now: it is shown once and cannot be recovered."
            )?;
        }
    }
    Ok(())
}

/// `settle token list`: every token with its status at `now_ms`, never its secret.
async fn list_tokens(
    store: &Store,
    now_ms: i64,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let tokens = auth::list_tokens(store).await?;
    let mut rows = Rows::new(vec![
        "token_id",
        "name",
        "scope",
        "provider_id",
        "label",
        "status",
        "created_at",
        "created_by",
        "expires_at",
        "revoked_at",
        "revoked_by",
    ]);
    for t in tokens {
        rows.push(vec![
            json!(t.token_id),
            json!(t.name),
            json!(t.scope.as_str()),
            json!(t.provider_id),
            json!(t.label),
            json!(t.status(now_ms)),
            json!(format_ms(t.created_at_ms)),
            json!(t.created_by),
            json!(t.expires_at_ms.map(format_ms)),
            json!(t.revoked_at_ms.map(format_ms)),
            json!(t.revoked_by),
        ]);
    }
    write!(out, "{}", rows.render(format))?;
    Ok(0)
}
