//! Read queries over the projections, shared by the CLI, the HTTP API and the jobs.
//! Reads never scan the ledger.

use super::on;
use super::{Db, Store, StoreError};

use crate::domain::event::{ApprovalStatus, Rail, accounts, provider_stream};
use crate::domain::payout::PayoutStatus;

/// A provider's balances, in micro-USDC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Balances {
    pub provider_id: String,
    /// The payable account: earned minus everything paid out or on its way.
    pub payable_micro_usdc: i64,
    pub held_micro_usdc: i64,
    pub in_transit_micro_usdc: i64,
    /// Settled minus returned payouts, lifetime.
    pub paid_micro_usdc: i64,
}

/// Balances of one provider, or of every provider in id order, exact: the aggregates are
/// folded up to the ledger head first.
pub async fn balances(
    store: &Store,
    provider_id: Option<&str>,
) -> Result<Vec<Balances>, StoreError> {
    match provider_id {
        Some(p) => store.catch_up(&[&provider_stream(p)]).await?,
        None => store.catch_up_all().await?,
    };
    let pool = store.db();
    let ids: Vec<String> = match provider_id {
        Some(p) => on!(pool, |c| sqlx::query_scalar(
            "SELECT provider_id FROM providers WHERE provider_id = $1"
        )
        .bind(p)
        .fetch_all(c)
        .await)?,
        None => on!(pool, |c| sqlx::query_scalar(
            "SELECT provider_id FROM providers ORDER BY provider_id"
        )
        .fetch_all(c)
        .await)?,
    };
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(folded_balances(pool, &id).await?);
    }
    Ok(out)
}

/// Balances of one provider from the account projection of its stream, folded up to the
/// stream's head first.
pub async fn provider_balances(store: &Store, provider_id: &str) -> Result<Balances, StoreError> {
    store.catch_up(&[&provider_stream(provider_id)]).await?;
    Ok(folded_balances(store.db(), provider_id).await?)
}

async fn folded_balances(pool: &Db, provider_id: &str) -> Result<Balances, sqlx::Error> {
    let rows: Vec<AccountBalance> = on!(pool, |c| sqlx::query_as(
        "SELECT account, balance_micro_usdc FROM account_balances WHERE owner = $1"
    )
    .bind(provider_stream(provider_id))
    .fetch_all(c)
    .await)?;
    let mut b = Balances {
        provider_id: provider_id.to_owned(),
        ..Default::default()
    };
    let (payable, held, in_transit) = (
        accounts::payable(provider_id),
        accounts::held(provider_id),
        accounts::in_transit(provider_id),
    );
    for AccountBalance {
        account,
        balance_micro_usdc: balance,
    } in rows
    {
        if account == payable {
            b.payable_micro_usdc = balance;
        } else if account == held {
            b.held_micro_usdc = balance;
        } else if account == in_transit {
            b.in_transit_micro_usdc = balance;
        } else if account == accounts::TREASURY_USDC || account == accounts::TREASURY_BANK {
            b.paid_micro_usdc += balance;
        }
    }
    Ok(b)
}

#[derive(sqlx::FromRow)]
struct AccountBalance {
    account: String,
    balance_micro_usdc: i64,
}

/// The payouts of one status and rail: how many, how much.
#[derive(sqlx::FromRow)]
struct PayoutTotal {
    status: String,
    rail: String,
    count: i64,
    amount_micro_usdc: i64,
}

/// The figures of the projections the metrics show at scrape time.
pub(crate) async fn ledger_figures(
    store: &Store,
) -> Result<crate::metrics::LedgerFigures, sqlx::Error> {
    let pool = store.db();
    let payouts = on!(pool, |c| sqlx::query_as::<_, PayoutTotal>("SELECT status, rail, COUNT(*) AS count, CAST(COALESCE(SUM(amount_micro_usdc), 0) AS BIGINT) AS amount_micro_usdc FROM payouts GROUP BY status, rail")
        .fetch_all(c)
        .await)?
        .into_iter()
        .map(|t| (t.status, t.rail, t.count, t.amount_micro_usdc))
        .collect();
    let latest_recorded_at_ms = on!(pool, |c| sqlx::query_scalar(
        "SELECT MAX(recorded_at_ms) FROM events"
    )
    .fetch_one(c)
    .await)?;
    let oldest_created_payout_ms = on!(pool, |c| sqlx::query_scalar(&format!(
        "SELECT MIN(updated_at_ms) FROM payouts WHERE status = '{}'",
        PayoutStatus::Created
    ))
    .fetch_one(c)
    .await)?;
    Ok(crate::metrics::LedgerFigures {
        payouts,
        latest_recorded_at_ms,
        oldest_created_payout_ms,
    })
}

/// Whether a provider is registered.
pub(crate) async fn provider_exists(store: &Store, provider_id: &str) -> Result<bool, sqlx::Error> {
    super::row_exists(
        store.db(),
        "SELECT 1 FROM providers WHERE provider_id = $1",
        provider_id,
    )
    .await
}

/// Gross, fee, net and usage time of a set of usage segments (voids already netted); read
/// from the columns of [`SUMS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct EarningsTotals {
    pub gross_micro_usdc: i64,
    pub fee_micro_usdc: i64,
    pub net_micro_usdc: i64,
    /// GPU time, in milliseconds.
    pub duration_ms: i64,
}

impl EarningsTotals {
    pub fn add(&mut self, other: &EarningsTotals) {
        self.gross_micro_usdc += other.gross_micro_usdc;
        self.fee_micro_usdc += other.fee_micro_usdc;
        self.net_micro_usdc += other.net_micro_usdc;
        self.duration_ms += other.duration_ms;
    }

    pub(crate) fn is_zero(&self) -> bool {
        *self == EarningsTotals::default()
    }

    /// GPU-hours as a decimal string with six fractional digits, rounded half to even once,
    /// exactly from the milliseconds (1 hour = 3,600,000 ms).
    pub fn gpu_hours(&self) -> String {
        let micro_hours = crate::domain::money::div_round_half_even(
            i128::from(self.duration_ms) * 1_000_000,
            crate::domain::money::MS_PER_HOUR,
        );
        crate::domain::money::format_micro_usdc(micro_hours as i64)
    }
}

/// How an earnings report groups its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarningsBy {
    /// UTC day of the segment start (`2026-11-23`).
    Day,
    /// Week from Monday 00:00 UTC, keyed by its Monday (`2026-11-23`).
    Week,
    /// Calendar month, UTC (`2026-11`).
    Month,
    /// GPU id (with its model).
    Gpu,
    /// GPU model.
    Model,
}

impl EarningsBy {
    pub const ALL: [EarningsBy; 5] = [
        EarningsBy::Day,
        EarningsBy::Week,
        EarningsBy::Month,
        EarningsBy::Gpu,
        EarningsBy::Model,
    ];

    pub fn parse(text: &str) -> Result<EarningsBy, crate::domain::DomainError> {
        EarningsBy::ALL
            .into_iter()
            .find(|b| b.as_str() == text)
            .ok_or_else(|| {
                crate::domain::DomainError::new(
                    "invalid_group_by",
                    format!("group_by must be day, week, month, gpu or model, got {text:?}"),
                )
            })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EarningsBy::Day => "day",
            EarningsBy::Week => "week",
            EarningsBy::Month => "month",
            EarningsBy::Gpu => "gpu",
            EarningsBy::Model => "model",
        }
    }
}

/// One group of an earnings report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EarningsGroup {
    /// The day (`YYYY-MM-DD`), the week's Monday, the month (`YYYY-MM`), the GPU id or the
    /// model. Groups sort by key, which for periods is chronological.
    pub key: String,
    /// The GPU's model (`group_by = gpu` only).
    pub model: Option<String>,
    /// For periods: the period's bounds clipped to the report's range.
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    pub totals: EarningsTotals,
}

/// Earnings of one provider over `[from, to)` by business time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EarningsReport {
    pub provider_id: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub by: EarningsBy,
    /// Groups with any usage, by key. Fully voided groups are left out.
    pub groups: Vec<EarningsGroup>,
    pub totals: EarningsTotals,
}

/// The projection key an aggregate is read by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Base {
    Day,
    Gpu,
    Model,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum BaseKey {
    Day(i64),
    Gpu(String, String),
    Model(String),
}

/// The money sums of [`EarningsTotals`], named as its fields (the query adds `duration_ms`).
const SUMS: &str = "CAST(COALESCE(SUM(gross_micro_usdc), 0) AS BIGINT) AS gross_micro_usdc, CAST(COALESCE(SUM(fee_micro_usdc), 0) AS BIGINT) AS fee_micro_usdc, CAST(COALESCE(SUM(net_micro_usdc), 0) AS BIGINT) AS net_micro_usdc";

/// A group of [`aggregate`]: its key columns (those of its base; a partial day's sums have
/// none) and its totals.
#[derive(sqlx::FromRow)]
struct AggregateRow {
    #[sqlx(default)]
    day: Option<i64>,
    #[sqlx(default)]
    gpu_id: Option<String>,
    #[sqlx(default)]
    model: Option<String>,
    #[sqlx(flatten)]
    totals: EarningsTotals,
}

impl AggregateRow {
    /// The group's key under `base`; `day` for a row without a day column.
    fn key(&mut self, base: Base, day: i64) -> Result<BaseKey, sqlx::Error> {
        let missing = |c: &str| sqlx::Error::ColumnNotFound(c.to_owned());
        Ok(match base {
            Base::Day => BaseKey::Day(self.day.unwrap_or(day)),
            Base::Gpu => BaseKey::Gpu(
                self.gpu_id.take().ok_or_else(|| missing("gpu_id"))?,
                self.model.take().ok_or_else(|| missing("model"))?,
            ),
            Base::Model => BaseKey::Model(self.model.take().ok_or_else(|| missing("model"))?),
        })
    }
}

fn ceil_to_day(ms: i64) -> i64 {
    let day = crate::domain::time::day_number(ms);
    let start = day * crate::domain::time::MS_PER_DAY;
    if start == ms {
        ms
    } else {
        start + crate::domain::time::MS_PER_DAY
    }
}

fn floor_to_day(ms: i64) -> i64 {
    crate::domain::time::day_number(ms) * crate::domain::time::MS_PER_DAY
}

/// Aggregates `[from_ms, to_ms)` by `base`: whole days from `earnings_daily`, the partial
/// days at either end from `usage_segments` (a segment never crosses midnight, and counts
/// on the day it starts), read GPU by GPU through its primary key.
async fn aggregate(
    pool: &Db,
    provider_id: &str,
    from_ms: i64,
    to_ms: i64,
    base: Base,
) -> Result<std::collections::BTreeMap<BaseKey, EarningsTotals>, sqlx::Error> {
    use crate::domain::time::{MS_PER_DAY, day_number};
    let mut out: std::collections::BTreeMap<BaseKey, EarningsTotals> = Default::default();
    if from_ms >= to_ms {
        return Ok(out);
    }
    let (a, b) = (ceil_to_day(from_ms), floor_to_day(to_ms));
    // Whole days `[day_from, day_to)`, and partial ranges `[start, end)` within one day.
    type Ranges = (Option<(i64, i64)>, Vec<(i64, i64)>);
    let (days, partials): Ranges = if a <= b {
        let mut partials = Vec::new();
        if from_ms < a {
            partials.push((from_ms, a));
        }
        if b < to_ms {
            partials.push((b, to_ms));
        }
        (
            (a < b).then_some((a / MS_PER_DAY, b / MS_PER_DAY)),
            partials,
        )
    } else {
        (None, vec![(from_ms, to_ms)])
    };
    let mut merge = |key: BaseKey, t: EarningsTotals| {
        if !t.is_zero() {
            out.entry(key).or_default().add(&t);
        }
    };
    let group_cols = match base {
        Base::Day => "day",
        Base::Gpu => "gpu_id, model",
        Base::Model => "model",
    };
    if let Some((day_from, day_to)) = days {
        let rows: Vec<AggregateRow> = on!(pool, |c| {
            sqlx::query_as(&format!(
            "SELECT {group_cols}, {SUMS}, CAST(COALESCE(SUM(duration_ms), 0) AS BIGINT) AS duration_ms FROM earnings_daily WHERE provider_id = $1 AND day >= $2 AND day < $3 GROUP BY {group_cols}"
        ))
        .bind(provider_id)
        .bind(day_from)
        .bind(day_to)
        .fetch_all(c)
        .await
        })?;
        for mut r in rows {
            let key = r.key(base, day_from)?;
            merge(key, r.totals);
        }
    }
    for (start, end) in partials {
        // Every segment of a partial range starts on the same UTC day.
        let (cols, group) = match base {
            Base::Day => ("", String::new()),
            Base::Gpu => ("gpu_id, model, ", " GROUP BY gpu_id, model".to_owned()),
            Base::Model => ("model, ", " GROUP BY model".to_owned()),
        };
        let rows: Vec<AggregateRow> = on!(pool, |c| {
            sqlx::query_as(&format!(
            "SELECT {cols}{SUMS}, CAST(COALESCE(SUM(ended_at_ms - started_at_ms), 0) AS BIGINT) AS duration_ms FROM usage_segments WHERE gpu_id IN (SELECT gpu_id FROM gpus WHERE provider_id = $1) AND provider_id = $1 AND started_at_ms >= $2 AND started_at_ms < $3{group}"
        ))
        .bind(provider_id)
        .bind(start)
        .bind(end)
        .fetch_all(c)
        .await
        })?;
        for mut r in rows {
            let key = r.key(base, day_number(start))?;
            merge(key, r.totals);
        }
    }
    Ok(out)
}

/// Earnings of a provider over `[from_ms, to_ms)` by business time (a day segment counts
/// where it starts), grouped by `by`. Voided usage is excluded: its reversal nets it out
/// with the same business time.
pub async fn earnings(
    store: &Store,
    provider_id: &str,
    from_ms: i64,
    to_ms: i64,
    by: EarningsBy,
) -> Result<EarningsReport, StoreError> {
    store.catch_up(&[&provider_stream(provider_id)]).await?;
    let pool = store.db();
    use crate::domain::time::{
        MS_PER_DAY, date_of_ms, day_date, month_start_ms, next_month_start_ms, week_start_ms,
    };
    let base = match by {
        EarningsBy::Day | EarningsBy::Week | EarningsBy::Month => Base::Day,
        EarningsBy::Gpu => Base::Gpu,
        EarningsBy::Model => Base::Model,
    };
    let rows = aggregate(pool, provider_id, from_ms, to_ms, base).await?;
    let mut groups: Vec<EarningsGroup> = Vec::new();
    let mut totals = EarningsTotals::default();
    for (key, t) in rows {
        totals.add(&t);
        let group = match key {
            BaseKey::Day(day) => {
                let day_ms = day * MS_PER_DAY;
                let (start, end, label) = match by {
                    EarningsBy::Week => {
                        let start = week_start_ms(day_ms);
                        let label = date_of_ms(start).format("%Y-%m-%d").to_string();
                        (start, start + 7 * MS_PER_DAY, label)
                    }
                    EarningsBy::Month => {
                        let start = month_start_ms(day_ms);
                        let label = date_of_ms(start).format("%Y-%m").to_string();
                        (start, next_month_start_ms(day_ms), label)
                    }
                    _ => (
                        day_ms,
                        day_ms + MS_PER_DAY,
                        day_date(day).format("%Y-%m-%d").to_string(),
                    ),
                };
                EarningsGroup {
                    key: label,
                    model: None,
                    from_ms: Some(start.max(from_ms)),
                    to_ms: Some(end.min(to_ms)),
                    totals: t,
                }
            }
            BaseKey::Gpu(gpu_id, model) => EarningsGroup {
                key: gpu_id,
                model: Some(model),
                from_ms: None,
                to_ms: None,
                totals: t,
            },
            BaseKey::Model(model) => EarningsGroup {
                key: model,
                model: None,
                from_ms: None,
                to_ms: None,
                totals: t,
            },
        };
        match groups.last_mut() {
            Some(last) if last.key == group.key => last.totals.add(&group.totals),
            _ => groups.push(group),
        }
    }
    groups.retain(|g| !g.totals.is_zero());
    Ok(EarningsReport {
        provider_id: provider_id.to_owned(),
        from_ms,
        to_ms,
        by,
        groups,
        totals,
    })
}

/// Earnings of the period containing `now_ms`: `[week_start, week_end)` and
/// `[month_start, month_end)` (periods are whole: usage of the current day counts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeriodTotals {
    pub week_from_ms: i64,
    pub week_to_ms: i64,
    pub week: EarningsTotals,
    pub month_from_ms: i64,
    pub month_to_ms: i64,
    pub month: EarningsTotals,
}

/// Week-to-date and month-to-date earnings of a provider, in one read.
pub(crate) async fn period_totals(
    store: &Store,
    provider_id: &str,
    now_ms: i64,
) -> Result<PeriodTotals, StoreError> {
    store.catch_up(&[&provider_stream(provider_id)]).await?;
    let pool = store.db();
    use crate::domain::time::{MS_PER_DAY, month_start_ms, next_month_start_ms, week_start_ms};
    let week_from_ms = week_start_ms(now_ms);
    let month_from_ms = month_start_ms(now_ms);
    let week_to_ms = week_from_ms + 7 * MS_PER_DAY;
    let month_to_ms = next_month_start_ms(now_ms);
    let (w0, w1) = (week_from_ms / MS_PER_DAY, week_to_ms / MS_PER_DAY);
    let (m0, m1) = (month_from_ms / MS_PER_DAY, month_to_ms / MS_PER_DAY);
    let sum = |period: &str, col: &str, lo: &str, hi: &str| {
        format!(
            "CAST(COALESCE(SUM(CASE WHEN day >= {lo} AND day < {hi} THEN {col} ELSE 0 END), 0) AS BIGINT) AS {period}_{col}"
        )
    };
    let cols: Vec<String> = [("week", "$2", "$3"), ("month", "$4", "$5")]
        .iter()
        .flat_map(|(period, lo, hi)| TOTALS_COLUMNS.map(|c| sum(period, c, lo, hi)))
        .collect();
    let row: PeriodsRow = on!(pool, |c| sqlx::query_as(&format!(
        "SELECT {} FROM earnings_daily WHERE provider_id = $1 AND day >= $6 AND day < $7",
        cols.join(", ")
    ))
    .bind(provider_id)
    .bind(w0)
    .bind(w1)
    .bind(m0)
    .bind(m1)
    .bind(w0.min(m0))
    .bind(w1.max(m1))
    .fetch_one(c)
    .await)?;
    Ok(PeriodTotals {
        week_from_ms,
        week_to_ms,
        week: row.week(),
        month_from_ms,
        month_to_ms,
        month: row.month(),
    })
}

/// The columns of [`EarningsTotals`].
const TOTALS_COLUMNS: [&str; 4] = [
    "gross_micro_usdc",
    "fee_micro_usdc",
    "net_micro_usdc",
    "duration_ms",
];

/// Week-to-date and month-to-date totals as one row: each column of [`TOTALS_COLUMNS`]
/// prefixed by its period.
#[derive(sqlx::FromRow)]
struct PeriodsRow {
    week_gross_micro_usdc: i64,
    week_fee_micro_usdc: i64,
    week_net_micro_usdc: i64,
    week_duration_ms: i64,
    month_gross_micro_usdc: i64,
    month_fee_micro_usdc: i64,
    month_net_micro_usdc: i64,
    month_duration_ms: i64,
}

impl PeriodsRow {
    fn week(&self) -> EarningsTotals {
        EarningsTotals {
            gross_micro_usdc: self.week_gross_micro_usdc,
            fee_micro_usdc: self.week_fee_micro_usdc,
            net_micro_usdc: self.week_net_micro_usdc,
            duration_ms: self.week_duration_ms,
        }
    }

    fn month(&self) -> EarningsTotals {
        EarningsTotals {
            gross_micro_usdc: self.month_gross_micro_usdc,
            fee_micro_usdc: self.month_fee_micro_usdc,
            net_micro_usdc: self.month_net_micro_usdc,
            duration_ms: self.month_duration_ms,
        }
    }
}

/// A provider's GPU with its lifetime and current-period earnings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuEarnings {
    pub gpu_id: String,
    pub model: String,
    pub registered_at_ms: i64,
    pub lifetime: EarningsTotals,
    pub week: EarningsTotals,
    pub month: EarningsTotals,
}

/// A provider's GPUs in id order after `after_gpu_id`, at most `limit`, with lifetime,
/// week-to-date and month-to-date earnings as of `now_ms`.
pub(crate) async fn provider_gpus(
    store: &Store,
    provider_id: &str,
    now_ms: i64,
    after_gpu_id: Option<&str>,
    limit: i64,
) -> Result<Vec<GpuEarnings>, StoreError> {
    store.catch_up(&[&provider_stream(provider_id)]).await?;
    let pool = store.db();
    use crate::domain::time::{MS_PER_DAY, month_start_ms, week_start_ms};
    let sum = |period: &str, col: &str, since: &str| {
        format!(
            "CAST(COALESCE(SUM(CASE WHEN e.day >= {since} THEN e.{col} ELSE 0 END), 0) AS BIGINT) AS {period}_{col}"
        )
    };
    let mut cols = Vec::new();
    for (period, since) in [
        ("lifetime", "-9223372036854775807"),
        ("week", "$2"),
        ("month", "$3"),
    ] {
        cols.extend(TOTALS_COLUMNS.map(|c| sum(period, c, since)));
    }
    let rows: Vec<GpuRow> = on!(pool, |c| {
        sqlx::query_as(&format!(
        "SELECT g.gpu_id, g.model, g.registered_at_ms, {} FROM gpus g LEFT JOIN earnings_daily e ON e.stream = g.stream AND e.provider_id = g.provider_id AND e.gpu_id = g.gpu_id WHERE g.stream = $6 AND g.provider_id = $1 AND g.gpu_id > $4 GROUP BY g.gpu_id, g.model, g.registered_at_ms ORDER BY g.gpu_id LIMIT $5",
        cols.join(", ")
    ))
    .bind(provider_id)
    .bind(week_start_ms(now_ms) / MS_PER_DAY)
    .bind(month_start_ms(now_ms) / MS_PER_DAY)
    .bind(after_gpu_id.unwrap_or(""))
    .bind(limit)
    // The provider's stream: the join and the filter on the distribution column keep the
    // statement on one shard on Citus (`store::citus`).
    .bind(provider_stream(provider_id))
    .fetch_all(c)
    .await
    })?;
    Ok(rows
        .into_iter()
        .map(|r| GpuEarnings {
            lifetime: EarningsTotals {
                gross_micro_usdc: r.lifetime_gross_micro_usdc,
                fee_micro_usdc: r.lifetime_fee_micro_usdc,
                net_micro_usdc: r.lifetime_net_micro_usdc,
                duration_ms: r.lifetime_duration_ms,
            },
            week: r.periods.week(),
            month: r.periods.month(),
            gpu_id: r.gpu_id,
            model: r.model,
            registered_at_ms: r.registered_at_ms,
        })
        .collect())
}

/// A GPU with its lifetime and period totals, each column of [`TOTALS_COLUMNS`] prefixed
/// by its period.
#[derive(sqlx::FromRow)]
struct GpuRow {
    gpu_id: String,
    model: String,
    registered_at_ms: i64,
    lifetime_gross_micro_usdc: i64,
    lifetime_fee_micro_usdc: i64,
    lifetime_net_micro_usdc: i64,
    lifetime_duration_ms: i64,
    #[sqlx(flatten)]
    periods: PeriodsRow,
}

/// Which payouts to list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayoutFilter {
    /// Not final yet: `created`, `held`, `submitted`.
    Pending,
    /// Final: `settled`, `failed`, `cancelled`, `returned`.
    History,
    All,
}

impl PayoutFilter {
    pub fn parse(text: &str) -> Result<PayoutFilter, crate::domain::DomainError> {
        match text {
            "pending" => Ok(PayoutFilter::Pending),
            "history" => Ok(PayoutFilter::History),
            "all" => Ok(PayoutFilter::All),
            _ => Err(crate::domain::DomainError::new(
                "invalid_status_filter",
                format!("status must be pending, history or all, got {text:?}"),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PayoutFilter::Pending => "pending",
            PayoutFilter::History => "history",
            PayoutFilter::All => "all",
        }
    }

    /// The statuses the filter selects.
    pub fn statuses(self) -> Vec<PayoutStatus> {
        PayoutStatus::ALL
            .into_iter()
            .filter(|s| match self {
                PayoutFilter::Pending => s.is_pending(),
                PayoutFilter::History => !s.is_pending(),
                PayoutFilter::All => true,
            })
            .collect()
    }
}

/// A payout as the dashboard shows it (a `payouts` row without the method, read by name).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct PayoutRow {
    pub payout_id: String,
    pub provider_id: String,
    pub run_kind: String,
    pub run_key: String,
    #[sqlx(try_from = "String")]
    pub rail: Rail,
    pub amount_micro_usdc: i64,
    pub amount_eur_cents: Option<i64>,
    pub eur_per_usd: Option<String>,
    #[sqlx(try_from = "String")]
    pub status: PayoutStatus,
    pub hold_reason: Option<String>,
    pub failure_reason: Option<String>,
    /// Solana: the transaction signature; bank rails: the batch id.
    pub reference: Option<String>,
    pub end_to_end_id: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// Payouts, newest first (`created_at`, then id, both descending), after the keyset
/// position `after` (exclusive), at most `limit`; of one provider or of all.
pub async fn payouts(
    store: &Store,
    provider_id: Option<&str>,
    filter: PayoutFilter,
    after: Option<(i64, &str)>,
    limit: i64,
) -> Result<Vec<PayoutRow>, sqlx::Error> {
    let pool = store.db();
    let statuses = filter.statuses();
    let status_list = (0..statuses.len())
        .map(|i| format!("${}", i + 5))
        .collect::<Vec<_>>()
        .join(",");
    let sql = format!(
        "SELECT payout_id, provider_id, run_kind, run_key, rail, amount_micro_usdc, amount_eur_cents, eur_per_usd, status, hold_reason, failure_reason, reference, end_to_end_id, created_at_ms, updated_at_ms FROM payouts WHERE ($1 = '' OR provider_id = $1) AND (created_at_ms < $2 OR (created_at_ms = $2 AND payout_id < $3)) AND status IN ({status_list}) ORDER BY created_at_ms DESC, payout_id DESC LIMIT $4"
    );
    // Without a position: every payout (no `created_at_ms` reaches i64::MAX).
    let (after_ms, after_id) = after.unwrap_or((i64::MAX, ""));
    on!(pool, |c| {
        let q = sqlx::query_as::<_, PayoutRow>(&sql)
            .bind(provider_id.unwrap_or(""))
            .bind(after_ms)
            .bind(after_id)
            .bind(limit);
        let q = statuses.iter().fold(q, |q, s| q.bind(s.as_str()));
        q.fetch_all(c).await
    })
}

/// A dual-control request as the `approvals` projection holds it (read by name).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct ApprovalRow {
    pub approval_id: String,
    pub kind: String,
    /// The command (canonical JSON import line) executed on approval.
    pub command: String,
    pub summary: String,
    pub provider_id: Option<String>,
    pub amount_micro_usdc: Option<i64>,
    pub requested_by: String,
    pub requested_at_ms: i64,
    #[sqlx(try_from = "String")]
    pub status: ApprovalStatus,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub reason: Option<String>,
    /// Hex content hash the signatures cover (`domain::operator`); set on a ledger with
    /// operators.
    pub content_hash: Option<String>,
    /// The operator who requested it (its signature is on `approval.requested`).
    pub requester_operator: Option<String>,
    /// The operator who decided it (its signature is on `approval.decided`).
    pub decider_operator: Option<String>,
}

const APPROVAL_COLUMNS: &str = "approval_id, kind, command, summary, provider_id, amount_micro_usdc, requested_by, requested_at_ms, status, decided_by, decided_at_ms, reason, content_hash, requester_operator, decider_operator";

/// One request by id.
pub async fn approval(
    conn: &mut super::Conn,
    approval_id: &str,
) -> Result<Option<ApprovalRow>, sqlx::Error> {
    on!(conn, |c| sqlx::query_as(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE approval_id = $1"
    ))
    .bind(approval_id)
    .fetch_optional(c)
    .await)
}

/// Requests, oldest first, of one status or all, at most `limit`.
pub async fn approvals(
    store: &Store,
    status: Option<ApprovalStatus>,
    limit: i64,
) -> Result<Vec<ApprovalRow>, sqlx::Error> {
    let pool = store.db();
    match status {
        Some(s) => {
            on!(pool, |c| {
                sqlx::query_as(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = $1 ORDER BY requested_at_ms, approval_id LIMIT $2"
            ))
            .bind(s.as_str())
            .bind(limit)
            .fetch_all(c)
            .await
            })
        }
        None => {
            on!(pool, |c| {
                sqlx::query_as(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals ORDER BY requested_at_ms, approval_id LIMIT $1"
            ))
            .bind(limit)
            .fetch_all(c)
            .await
            })
        }
    }
}
