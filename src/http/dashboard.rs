//! The provider dashboard (SPEC §7): summary, earnings, GPUs, payouts, CSV exports.
//! Readable by the provider's own token or an admin token; reads go through
//! `store::read` over the projections, never the event table.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::extract::{Auth, Page, Q, encode_cursor, page_of};
use super::problem::Problem;
use crate::domain::money::{format_cents, format_micro_usdc};
use crate::domain::time::format_ms;
use crate::report::{earnings_rows, explorer_url, parse_range, payout_rows};
use crate::store::read::{self, EarningsBy, EarningsTotals, PayoutFilter, PayoutRow};

/// Money and time of a set of usage. Money: USDC decimal strings, 6 fractional digits.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Amounts {
    #[schema(example = "12.450000")]
    pub gross_usdc: String,
    #[schema(example = "2.490000")]
    pub fee_usdc: String,
    #[schema(example = "9.960000")]
    pub net_usdc: String,
    /// GPU-hours, 6 fractional digits, rounded half to even from `usage_ms`.
    #[schema(example = "5.000000")]
    pub gpu_hours: String,
    /// GPU time in milliseconds (exact).
    pub usage_ms: i64,
}

impl From<&EarningsTotals> for Amounts {
    fn from(t: &EarningsTotals) -> Amounts {
        Amounts {
            gross_usdc: format_micro_usdc(t.gross_micro_usdc),
            fee_usdc: format_micro_usdc(t.fee_micro_usdc),
            net_usdc: format_micro_usdc(t.net_micro_usdc),
            gpu_hours: t.gpu_hours(),
            usage_ms: t.duration_ms,
        }
    }
}

/// Earnings of a period `[from, to)`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct PeriodEarnings {
    pub from: String,
    pub to: String,
    pub gross_usdc: String,
    pub fee_usdc: String,
    pub net_usdc: String,
    pub gpu_hours: String,
    pub usage_ms: i64,
}

impl PeriodEarnings {
    fn new(from_ms: i64, to_ms: i64, t: &EarningsTotals) -> PeriodEarnings {
        let a = Amounts::from(t);
        PeriodEarnings {
            from: format_ms(from_ms),
            to: format_ms(to_ms),
            gross_usdc: a.gross_usdc,
            fee_usdc: a.fee_usdc,
            net_usdc: a.net_usdc,
            gpu_hours: a.gpu_hours,
            usage_ms: a.usage_ms,
        }
    }
}

/// Balances, USDC.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct BalancesView {
    /// The payable balance: earned and not yet paid out (negative when the provider owes).
    pub available_usdc: String,
    /// Payouts created held, waiting for an admin release or cancel.
    pub held_usdc: String,
    /// Payouts on their way (created, submitted, not settled yet).
    pub in_transit_usdc: String,
    /// Settled payouts minus returns, lifetime.
    pub paid_lifetime_usdc: String,
}

/// The next run that can pay this provider and what it would pay if nothing else arrived.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct NextPayout {
    /// The run date, `YYYY-MM-DD`.
    pub date: String,
    /// `weekly` or `monthly`.
    pub run_kind: String,
    /// The run's Monday (`YYYY-MM-DD`) or month (`YYYY-MM`).
    pub run_key: String,
    /// The projected amount, USDC.
    pub projected_usdc: String,
    /// The decision that run would take: `paid` or `held` (a payout is created), else why
    /// the next run would not pay (`below_minimum`, `nothing_due`, `no_method`,
    /// `cooling_off`, `negative`); then `projected_usdc` is what it would have paid.
    pub decision: String,
}

/// `GET /v1/providers/{id}/summary`
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Summary {
    pub provider_id: String,
    /// The instant the summary was computed at (the ledger clock).
    pub as_of: String,
    /// The ledger position the figures include: the `seq` of the provider's stream read
    /// before the figures (every event up to it is in them). The live stream
    /// (`/v1/providers/{id}/stream`) carries the same number as its event id.
    pub ledger_position: i64,
    /// The current week (Monday 00:00 UTC to the next Monday), by business time.
    pub week_to_date: PeriodEarnings,
    /// The current calendar month (UTC), by business time.
    pub month_to_date: PeriodEarnings,
    pub balances: BalancesView,
    /// Null for a suspended provider (no run candidate).
    pub next_payout: Option<NextPayout>,
}

/// Current-period totals, balances and the next payout of a provider.
#[utoipa::path(
    get,
    path = "/v1/providers/{id}/summary",
    tag = "dashboard",
    params(("id" = String, Path, description = "Provider id")),
    responses(
        (status = 200, body = Summary),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn summary(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Summary>, Problem> {
    auth.read_provider(&state, &id).await?;
    Ok(Json(provider_summary(&state, &id).await?))
}

/// A provider's current figures, unformatted: what the summary and the page show.
pub struct Figures {
    /// The provider stream's `seq`, read before the figures.
    pub ledger_position: i64,
    pub now_ms: i64,
    pub periods: read::PeriodTotals,
    pub balances: read::Balances,
    pub next_payout: Option<crate::ledger::runs::ProjectedPayout>,
}

/// A provider's reliability score (SPEC §12): the combined score and its three parts
/// (uptime within the declared schedule, jobs not interrupted by the provider, benchmark
/// consistency) in basis points, each with what lowered it; per GPU the same, whether it
/// is listed now and why not; 30 daily trend points. The JSON shape is in the README
/// ("Reliability score").
#[utoipa::path(
    get,
    path = "/v1/providers/{id}/reliability",
    tag = "dashboard",
    params(("id" = String, Path, description = "Provider id")),
    responses(
        (status = 200, body = Object, description = "The provider's reliability (README: Reliability score)"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn reliability(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<crate::ledger::reliability::ProviderReliability>, Problem> {
    auth.read_provider(&state, &id).await?;
    Ok(Json(state.ledger.provider_reliability(&id).await?))
}

/// The figures of a provider whose read was authorised (the summary route, the live stream
/// and the page share them).
pub(crate) async fn provider_figures(state: &AppState, id: &str) -> Result<Figures, Problem> {
    let ledger_position = state
        .ledger
        .store
        .stream_head(&crate::domain::event::provider_stream(id))
        .await?;
    let now_ms = state.ledger.now_ms();
    // Independent reads, on separate connections.
    let (periods, balances, next_payout) = tokio::try_join!(
        async { Ok::<_, Problem>(read::period_totals(&state.ledger.store, id, now_ms).await?) },
        async { Ok::<_, Problem>(read::provider_balances(&state.ledger.store, id).await?) },
        next_payout(state, id, now_ms),
    )?;
    Ok(Figures {
        ledger_position,
        now_ms,
        periods,
        balances,
        next_payout,
    })
}

/// The summary of a provider whose read was authorised.
pub(crate) async fn provider_summary(state: &AppState, id: &str) -> Result<Summary, Problem> {
    let f = provider_figures(state, id).await?;
    let (periods, b) = (&f.periods, &f.balances);
    Ok(Summary {
        provider_id: id.to_owned(),
        as_of: format_ms(f.now_ms),
        ledger_position: f.ledger_position,
        week_to_date: PeriodEarnings::new(periods.week_from_ms, periods.week_to_ms, &periods.week),
        month_to_date: PeriodEarnings::new(
            periods.month_from_ms,
            periods.month_to_ms,
            &periods.month,
        ),
        balances: BalancesView {
            available_usdc: format_micro_usdc(b.payable_micro_usdc),
            held_usdc: format_micro_usdc(b.held_micro_usdc),
            in_transit_usdc: format_micro_usdc(b.in_transit_micro_usdc),
            paid_lifetime_usdc: format_micro_usdc(b.paid_micro_usdc),
        },
        next_payout: f.next_payout.map(|p| NextPayout {
            date: p.run_date,
            run_kind: p.run_kind,
            run_key: p.run_key,
            projected_usdc: format_micro_usdc(p.amount_micro_usdc),
            decision: p.decision,
        }),
    })
}

/// The projected next payout (SPEC §5), from the payout-run module.
async fn next_payout(
    state: &AppState,
    provider_id: &str,
    now_ms: i64,
) -> Result<Option<crate::ledger::runs::ProjectedPayout>, Problem> {
    Ok(crate::ledger::runs::projected_next_payout(
        &state.ledger.store,
        &state.calendar,
        &state.runs,
        provider_id,
        now_ms,
    )
    .await?)
}

/// Query of an earnings report.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EarningsQuery {
    /// Start, inclusive: `YYYY-MM-DD` (00:00 UTC) or RFC 3339. Default: the 1st of the
    /// current month.
    pub from: Option<String>,
    /// End, exclusive: `YYYY-MM-DD` or RFC 3339. Default: the 1st of the month after `from`.
    pub to: Option<String>,
    /// `day` (default), `week` (from Monday), `month`, `gpu` or `model`.
    pub group_by: Option<String>,
    /// Page size, 1..=page_size_max (default page_size_default). Ignored by the CSV export.
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page. Ignored by the CSV export.
    pub cursor: Option<String>,
}

/// One group of an earnings report.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct EarningsItem {
    /// `YYYY-MM-DD` (day; the Monday for week), `YYYY-MM` (month), the GPU id or the model.
    pub key: String,
    /// The GPU's model (`group_by=gpu`), else null.
    pub model: Option<String>,
    /// For periods: the period's start, clipped to the range; else null.
    pub from: Option<String>,
    /// For periods: the period's end (exclusive), clipped to the range; else null.
    pub to: Option<String>,
    pub gross_usdc: String,
    pub fee_usdc: String,
    pub net_usdc: String,
    pub gpu_hours: String,
    pub usage_ms: i64,
}

/// `GET /v1/providers/{id}/earnings`
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct EarningsPage {
    pub provider_id: String,
    pub from: String,
    pub to: String,
    pub group_by: String,
    /// Totals of the whole range (every page).
    pub totals: Amounts,
    /// Groups with usage, by key (chronological for periods).
    pub items: Vec<EarningsItem>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

async fn earnings_report(
    state: &AppState,
    auth: &Auth,
    id: &str,
    q: &EarningsQuery,
) -> Result<read::EarningsReport, Problem> {
    auth.read_provider(state, id).await?;
    let by = EarningsBy::parse(q.group_by.as_deref().unwrap_or("day"))
        .map_err(|e| Problem::bad_request(e.code, e.message))?;
    let (from_ms, to_ms) = parse_range(q.from.as_deref(), q.to.as_deref(), state.ledger.now_ms())
        .map_err(|e| Problem::bad_request(e.code, e.message))?;
    Ok(read::earnings(&state.ledger.store, id, from_ms, to_ms, by).await?)
}

/// Earnings over `[from, to)` by business time, grouped; voided usage excluded.
#[utoipa::path(
    get,
    path = "/v1/providers/{id}/earnings",
    tag = "dashboard",
    params(("id" = String, Path, description = "Provider id"), EarningsQuery),
    responses(
        (status = 200, body = EarningsPage),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn earnings(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    Q(q): Q<EarningsQuery>,
) -> Result<Json<EarningsPage>, Problem> {
    let page = Page::parse(&state, q.limit, q.cursor.as_deref(), "earnings")?;
    let report = earnings_report(&state, &auth, &id, &q).await?;
    let (groups, next_cursor) = page_of(report.groups, &page, "earnings", |g| g.key.as_str());
    Ok(Json(EarningsPage {
        provider_id: id,
        from: format_ms(report.from_ms),
        to: format_ms(report.to_ms),
        group_by: report.by.as_str().to_owned(),
        totals: Amounts::from(&report.totals),
        items: groups
            .iter()
            .map(|g| {
                let a = Amounts::from(&g.totals);
                EarningsItem {
                    key: g.key.clone(),
                    model: g.model.clone(),
                    from: g.from_ms.map(format_ms),
                    to: g.to_ms.map(format_ms),
                    gross_usdc: a.gross_usdc,
                    fee_usdc: a.fee_usdc,
                    net_usdc: a.net_usdc,
                    gpu_hours: a.gpu_hours,
                    usage_ms: a.usage_ms,
                }
            })
            .collect(),
        next_cursor,
    }))
}

fn csv(body: String, name: &str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response()
}

/// The earnings report as CSV (all groups; columns as the JSON items).
#[utoipa::path(
    get,
    path = "/v1/providers/{id}/earnings.csv",
    tag = "dashboard",
    params(("id" = String, Path, description = "Provider id"), EarningsQuery),
    responses(
        (status = 200, content_type = "text/csv", body = String,
         description = "key,model,from,to,gross_usdc,fee_usdc,net_usdc,gpu_hours,usage_ms"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn earnings_csv(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    Q(q): Q<EarningsQuery>,
) -> Result<Response, Problem> {
    let report = earnings_report(&state, &auth, &id, &q).await?;
    Ok(csv(
        earnings_rows(&report).render(crate::report::output::Format::Csv),
        &format!("earnings-{id}.csv"),
    ))
}

/// Page query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Page size, 1..=page_size_max (default page_size_default).
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// A GPU with its earnings.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct GpuItem {
    pub gpu_id: String,
    pub model: String,
    pub registered_at: String,
    pub lifetime: Amounts,
    /// The current week (from Monday 00:00 UTC).
    pub week_to_date: Amounts,
    /// The current calendar month.
    pub month_to_date: Amounts,
}

/// `GET /v1/providers/{id}/gpus`
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct GpuPage {
    pub items: Vec<GpuItem>,
    pub next_cursor: Option<String>,
}

/// The provider's GPUs with lifetime and current-period earnings, by GPU id.
#[utoipa::path(
    get,
    path = "/v1/providers/{id}/gpus",
    tag = "dashboard",
    params(("id" = String, Path, description = "Provider id"), PageQuery),
    responses(
        (status = 200, body = GpuPage),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn gpus(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    Q(q): Q<PageQuery>,
) -> Result<Json<GpuPage>, Problem> {
    let page = Page::parse(&state, q.limit, q.cursor.as_deref(), "gpus")?;
    auth.read_provider(&state, &id).await?;
    let mut rows = read::provider_gpus(
        &state.ledger.store,
        &id,
        state.ledger.now_ms(),
        page.after.as_deref(),
        page.limit as i64 + 1,
    )
    .await?;
    let next_cursor = if rows.len() > page.limit {
        rows.truncate(page.limit);
        rows.last().map(|g| encode_cursor("gpus", &g.gpu_id))
    } else {
        None
    };
    Ok(Json(GpuPage {
        items: rows
            .iter()
            .map(|g| GpuItem {
                gpu_id: g.gpu_id.clone(),
                model: g.model.clone(),
                registered_at: format_ms(g.registered_at_ms),
                lifetime: Amounts::from(&g.lifetime),
                week_to_date: Amounts::from(&g.week),
                month_to_date: Amounts::from(&g.month),
            })
            .collect(),
        next_cursor,
    }))
}

/// Query of a payout list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PayoutsQuery {
    /// `pending` (created, held, submitted), `history` (settled, failed, cancelled,
    /// returned) or `all` (default).
    pub status: Option<String>,
    /// Page size, 1..=page_size_max (default page_size_default). Ignored by the CSV export.
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page. Ignored by the CSV export.
    pub cursor: Option<String>,
}

/// Where a Solana payout went.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct SolanaDetails {
    pub signature: String,
    /// `https://explorer.solana.com/tx/{signature}` (with `?cluster=` off mainnet).
    pub explorer_url: String,
}

/// Where a bank payout went.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct BankDetails {
    pub batch_id: String,
    pub end_to_end_id: Option<String>,
}

/// A payout with its rail details.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct PayoutItem {
    pub payout_id: String,
    pub provider_id: String,
    /// `weekly` or `monthly`.
    pub run_kind: String,
    pub run_key: String,
    /// `solana`, `sepa` or `ach`.
    pub rail: String,
    /// `created`, `held`, `submitted`, `settled`, `failed`, `cancelled` or `returned`.
    pub status: String,
    pub amount_usdc: String,
    /// EUR payouts: the amount in EUR, 2 fractional digits.
    pub amount_eur: Option<String>,
    pub eur_per_usd: Option<String>,
    pub hold_reason: Option<String>,
    pub failure_reason: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Solana payouts once submitted.
    pub solana: Option<SolanaDetails>,
    /// Bank payouts once in a batch.
    pub bank: Option<BankDetails>,
}

/// `GET /v1/providers/{id}/payouts`
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct PayoutPage {
    /// Newest first.
    pub items: Vec<PayoutItem>,
    pub next_cursor: Option<String>,
}

fn payout_item(p: &PayoutRow, cluster: &str) -> PayoutItem {
    let (solana, bank) = match (&p.reference, p.rail.as_str()) {
        (Some(sig), "solana") => (
            Some(SolanaDetails {
                signature: sig.clone(),
                explorer_url: explorer_url(sig, cluster),
            }),
            None,
        ),
        (Some(batch), _) => (
            None,
            Some(BankDetails {
                batch_id: batch.clone(),
                end_to_end_id: p.end_to_end_id.clone(),
            }),
        ),
        (None, _) => (None, None),
    };
    PayoutItem {
        payout_id: p.payout_id.clone(),
        provider_id: p.provider_id.clone(),
        run_kind: p.run_kind.clone(),
        run_key: p.run_key.clone(),
        rail: p.rail.as_str().to_owned(),
        status: p.status.to_string(),
        amount_usdc: format_micro_usdc(p.amount_micro_usdc),
        amount_eur: p.amount_eur_cents.map(format_cents),
        eur_per_usd: p.eur_per_usd.clone(),
        hold_reason: p.hold_reason.clone(),
        failure_reason: p.failure_reason.clone(),
        created_at: format_ms(p.created_at_ms),
        updated_at: format_ms(p.updated_at_ms),
        solana,
        bank,
    }
}

fn payout_cursor(p: &PayoutRow) -> String {
    encode_cursor("payouts", &format!("{}|{}", p.created_at_ms, p.payout_id))
}

fn parse_payout_position(after: &str) -> Result<(i64, &str), Problem> {
    after
        .split_once('|')
        .and_then(|(ms, id)| Some((ms.parse().ok()?, id)))
        .ok_or_else(|| Problem::bad_request("invalid_cursor", "cursor is not one this list issued"))
}

/// Pending and past payouts with rail details, newest first.
#[utoipa::path(
    get,
    path = "/v1/providers/{id}/payouts",
    tag = "dashboard",
    params(("id" = String, Path, description = "Provider id"), PayoutsQuery),
    responses(
        (status = 200, body = PayoutPage),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn payouts(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    Q(q): Q<PayoutsQuery>,
) -> Result<Json<PayoutPage>, Problem> {
    let page = Page::parse(&state, q.limit, q.cursor.as_deref(), "payouts")?;
    let filter = PayoutFilter::parse(q.status.as_deref().unwrap_or("all"))
        .map_err(|e| Problem::bad_request(e.code, e.message))?;
    auth.read_provider(&state, &id).await?;
    let after = page
        .after
        .as_deref()
        .map(parse_payout_position)
        .transpose()?;
    let mut rows = read::payouts(
        &state.ledger.store,
        Some(&id),
        filter,
        after,
        page.limit as i64 + 1,
    )
    .await?;
    let next_cursor = if rows.len() > page.limit {
        rows.truncate(page.limit);
        rows.last().map(payout_cursor)
    } else {
        None
    };
    let cluster = state.config.explorer_cluster.as_str();
    Ok(Json(PayoutPage {
        items: rows.iter().map(|p| payout_item(p, cluster)).collect(),
        next_cursor,
    }))
}

/// The most payouts one CSV export holds.
const CSV_PAYOUTS_MAX: i64 = 100_000;

/// Payouts as CSV (all matching payouts, newest first).
#[utoipa::path(
    get,
    path = "/v1/providers/{id}/payouts.csv",
    tag = "dashboard",
    params(("id" = String, Path, description = "Provider id"), PayoutsQuery),
    responses(
        (status = 200, content_type = "text/csv", body = String,
         description = "payout_id,provider_id,created_at,updated_at,run_kind,run_key,rail,status,amount_usdc,amount_eur,eur_per_usd,reference,end_to_end_id,explorer_url,hold_reason,failure_reason"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn payouts_csv(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    Q(q): Q<PayoutsQuery>,
) -> Result<Response, Problem> {
    let filter = PayoutFilter::parse(q.status.as_deref().unwrap_or("all"))
        .map_err(|e| Problem::bad_request(e.code, e.message))?;
    auth.read_provider(&state, &id).await?;
    let rows = read::payouts(
        &state.ledger.store,
        Some(&id),
        filter,
        None,
        CSV_PAYOUTS_MAX,
    )
    .await?;
    Ok(csv(
        payout_rows(&rows, &state.config.explorer_cluster)
            .render(crate::report::output::Format::Csv),
        &format!("payouts-{id}.csv"),
    ))
}
