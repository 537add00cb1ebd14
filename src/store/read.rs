//! Read queries over the projections, shared by the CLI, the HTTP API and the jobs.
//! Reads never scan the ledger.

use sqlx::{AnyPool, Row};

use super::{Store, StoreError};

use crate::domain::event::{accounts, provider_stream};
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
    let pool = store.pool();
    let ids: Vec<String> = match provider_id {
        Some(p) => sqlx::query("SELECT provider_id FROM providers WHERE provider_id = $1")
            .bind(p)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?,
        None => sqlx::query("SELECT provider_id FROM providers ORDER BY provider_id")
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?,
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
    Ok(folded_balances(store.pool(), provider_id).await?)
}

async fn folded_balances(pool: &AnyPool, provider_id: &str) -> Result<Balances, sqlx::Error> {
    let rows =
        sqlx::query("SELECT account, balance_micro_usdc FROM account_balances WHERE owner = $1")
            .bind(provider_stream(provider_id))
            .fetch_all(pool)
            .await?;
    let mut b = Balances {
        provider_id: provider_id.to_owned(),
        ..Default::default()
    };
    let (payable, held, in_transit) = (
        accounts::payable(provider_id),
        accounts::held(provider_id),
        accounts::in_transit(provider_id),
    );
    for r in rows {
        let account: String = r.try_get(0)?;
        let balance: i64 = r.try_get(1)?;
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

/// The figures of the projections the metrics show at scrape time.
pub async fn ledger_figures(pool: &AnyPool) -> Result<crate::metrics::LedgerFigures, sqlx::Error> {
    let payouts = sqlx::query("SELECT status, rail, COUNT(*), CAST(COALESCE(SUM(amount_micro_usdc), 0) AS BIGINT) FROM payouts GROUP BY status, rail")
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
        .collect::<Result<_, sqlx::Error>>()?;
    let latest_recorded_at_ms = sqlx::query("SELECT MAX(recorded_at_ms) FROM events")
        .fetch_one(pool)
        .await?
        .try_get(0)?;
    let oldest_created_payout_ms = sqlx::query(&format!(
        "SELECT MIN(updated_at_ms) FROM payouts WHERE status = '{}'",
        PayoutStatus::Created
    ))
    .fetch_one(pool)
    .await?
    .try_get(0)?;
    Ok(crate::metrics::LedgerFigures {
        payouts,
        latest_recorded_at_ms,
        oldest_created_payout_ms,
    })
}

/// Whether a provider is registered.
pub async fn provider_exists(pool: &AnyPool, provider_id: &str) -> Result<bool, sqlx::Error> {
    Ok(
        sqlx::query("SELECT 1 FROM providers WHERE provider_id = $1")
            .bind(provider_id)
            .fetch_optional(pool)
            .await?
            .is_some(),
    )
}

/// Gross, fee, net and usage time of a set of usage segments (voids already netted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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

    pub fn is_zero(&self) -> bool {
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

    fn from_row(row: &sqlx::any::AnyRow, first: usize) -> Result<EarningsTotals, sqlx::Error> {
        Ok(EarningsTotals {
            gross_micro_usdc: row.try_get(first)?,
            fee_micro_usdc: row.try_get(first + 1)?,
            net_micro_usdc: row.try_get(first + 2)?,
            duration_ms: row.try_get(first + 3)?,
        })
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

const SUMS: &str = "CAST(COALESCE(SUM(gross_micro_usdc), 0) AS BIGINT), CAST(COALESCE(SUM(fee_micro_usdc), 0) AS BIGINT), CAST(COALESCE(SUM(net_micro_usdc), 0) AS BIGINT)";

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
    pool: &AnyPool,
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
        let rows = sqlx::query(&format!(
            "SELECT {group_cols}, {SUMS}, CAST(COALESCE(SUM(duration_ms), 0) AS BIGINT) FROM earnings_daily WHERE provider_id = $1 AND day >= $2 AND day < $3 GROUP BY {group_cols}"
        ))
        .bind(provider_id)
        .bind(day_from)
        .bind(day_to)
        .fetch_all(pool)
        .await?;
        for r in rows {
            let (key, first) = match base {
                Base::Day => (BaseKey::Day(r.try_get(0)?), 1),
                Base::Gpu => (BaseKey::Gpu(r.try_get(0)?, r.try_get(1)?), 2),
                Base::Model => (BaseKey::Model(r.try_get(0)?), 1),
            };
            merge(key, EarningsTotals::from_row(&r, first)?);
        }
    }
    for (start, end) in partials {
        // Every segment of a partial range starts on the same UTC day.
        let (cols, group) = match base {
            Base::Day => ("", String::new()),
            Base::Gpu => ("gpu_id, model, ", " GROUP BY gpu_id, model".to_owned()),
            Base::Model => ("model, ", " GROUP BY model".to_owned()),
        };
        let rows = sqlx::query(&format!(
            "SELECT {cols}{SUMS}, CAST(COALESCE(SUM(ended_at_ms - started_at_ms), 0) AS BIGINT) FROM usage_segments WHERE gpu_id IN (SELECT gpu_id FROM gpus WHERE provider_id = $1) AND provider_id = $1 AND started_at_ms >= $2 AND started_at_ms < $3{group}"
        ))
        .bind(provider_id)
        .bind(start)
        .bind(end)
        .fetch_all(pool)
        .await?;
        for r in rows {
            let (key, first) = match base {
                Base::Day => (BaseKey::Day(day_number(start)), 0),
                Base::Gpu => (BaseKey::Gpu(r.try_get(0)?, r.try_get(1)?), 2),
                Base::Model => (BaseKey::Model(r.try_get(0)?), 1),
            };
            merge(key, EarningsTotals::from_row(&r, first)?);
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
    let pool = store.pool();
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
pub async fn period_totals(
    store: &Store,
    provider_id: &str,
    now_ms: i64,
) -> Result<PeriodTotals, StoreError> {
    store.catch_up(&[&provider_stream(provider_id)]).await?;
    let pool = store.pool();
    use crate::domain::time::{MS_PER_DAY, month_start_ms, next_month_start_ms, week_start_ms};
    let week_from_ms = week_start_ms(now_ms);
    let month_from_ms = month_start_ms(now_ms);
    let week_to_ms = week_from_ms + 7 * MS_PER_DAY;
    let month_to_ms = next_month_start_ms(now_ms);
    let (w0, w1) = (week_from_ms / MS_PER_DAY, week_to_ms / MS_PER_DAY);
    let (m0, m1) = (month_from_ms / MS_PER_DAY, month_to_ms / MS_PER_DAY);
    let sum = |col: &str, lo: &str, hi: &str| {
        format!(
            "CAST(COALESCE(SUM(CASE WHEN day >= {lo} AND day < {hi} THEN {col} ELSE 0 END), 0) AS BIGINT)"
        )
    };
    let cols: Vec<String> = [("$2", "$3"), ("$4", "$5")]
        .iter()
        .flat_map(|(lo, hi)| {
            [
                "gross_micro_usdc",
                "fee_micro_usdc",
                "net_micro_usdc",
                "duration_ms",
            ]
            .map(|c| sum(c, lo, hi))
        })
        .collect();
    let row = sqlx::query(&format!(
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
    .fetch_one(pool)
    .await?;
    Ok(PeriodTotals {
        week_from_ms,
        week_to_ms,
        week: EarningsTotals::from_row(&row, 0)?,
        month_from_ms,
        month_to_ms,
        month: EarningsTotals::from_row(&row, 4)?,
    })
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
pub async fn provider_gpus(
    store: &Store,
    provider_id: &str,
    now_ms: i64,
    after_gpu_id: Option<&str>,
    limit: i64,
) -> Result<Vec<GpuEarnings>, StoreError> {
    store.catch_up(&[&provider_stream(provider_id)]).await?;
    let pool = store.pool();
    use crate::domain::time::{MS_PER_DAY, month_start_ms, week_start_ms};
    let sum = |col: &str, since: &str| {
        format!(
            "CAST(COALESCE(SUM(CASE WHEN e.day >= {since} THEN e.{col} ELSE 0 END), 0) AS BIGINT)"
        )
    };
    let mut cols = Vec::new();
    for since in ["-9223372036854775807", "$2", "$3"] {
        for c in [
            "gross_micro_usdc",
            "fee_micro_usdc",
            "net_micro_usdc",
            "duration_ms",
        ] {
            cols.push(sum(c, since));
        }
    }
    let rows = sqlx::query(&format!(
        "SELECT g.gpu_id, g.model, g.registered_at_ms, {} FROM gpus g LEFT JOIN earnings_daily e ON e.provider_id = g.provider_id AND e.gpu_id = g.gpu_id WHERE g.provider_id = $1 AND g.gpu_id > $4 GROUP BY g.gpu_id, g.model, g.registered_at_ms ORDER BY g.gpu_id LIMIT $5",
        cols.join(", ")
    ))
    .bind(provider_id)
    .bind(week_start_ms(now_ms) / MS_PER_DAY)
    .bind(month_start_ms(now_ms) / MS_PER_DAY)
    .bind(after_gpu_id.unwrap_or(""))
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(GpuEarnings {
                gpu_id: r.try_get(0)?,
                model: r.try_get(1)?,
                registered_at_ms: r.try_get(2)?,
                lifetime: EarningsTotals::from_row(r, 3)?,
                week: EarningsTotals::from_row(r, 7)?,
                month: EarningsTotals::from_row(r, 11)?,
            })
        })
        .collect()
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

/// A payout as the dashboard shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayoutRow {
    pub payout_id: String,
    pub provider_id: String,
    pub run_kind: String,
    pub run_key: String,
    pub rail: String,
    pub amount_micro_usdc: i64,
    pub amount_eur_cents: Option<i64>,
    pub eur_per_usd: Option<String>,
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
    pool: &AnyPool,
    provider_id: Option<&str>,
    filter: PayoutFilter,
    after: Option<(i64, &str)>,
    limit: i64,
) -> Result<Vec<PayoutRow>, sqlx::Error> {
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
    let mut q = sqlx::query(&sql)
        .bind(provider_id.unwrap_or(""))
        .bind(after_ms)
        .bind(after_id)
        .bind(limit);
    for s in &statuses {
        q = q.bind(s.as_str());
    }
    let rows = q.fetch_all(pool).await?;
    rows.iter()
        .map(|r| {
            Ok(PayoutRow {
                payout_id: r.try_get(0)?,
                provider_id: r.try_get(1)?,
                run_kind: r.try_get(2)?,
                run_key: r.try_get(3)?,
                rail: r.try_get(4)?,
                amount_micro_usdc: r.try_get(5)?,
                amount_eur_cents: r.try_get(6)?,
                eur_per_usd: r.try_get(7)?,
                status: PayoutStatus::parse(&r.try_get::<String, _>(8)?)
                    .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                hold_reason: r.try_get(9)?,
                failure_reason: r.try_get(10)?,
                reference: r.try_get(11)?,
                end_to_end_id: r.try_get(12)?,
                created_at_ms: r.try_get(13)?,
                updated_at_ms: r.try_get(14)?,
            })
        })
        .collect()
}

/// A dual-control request as the `approvals` projection holds it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
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
    /// `pending`, `approved` or `rejected`.
    pub status: String,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub reason: Option<String>,
}

const APPROVAL_COLUMNS: &str = "approval_id, kind, command, summary, provider_id, amount_micro_usdc, requested_by, requested_at_ms, status, decided_by, decided_at_ms, reason";

fn approval_row(r: &sqlx::any::AnyRow) -> Result<ApprovalRow, sqlx::Error> {
    Ok(ApprovalRow {
        approval_id: r.try_get(0)?,
        kind: r.try_get(1)?,
        command: r.try_get(2)?,
        summary: r.try_get(3)?,
        provider_id: r.try_get(4)?,
        amount_micro_usdc: r.try_get(5)?,
        requested_by: r.try_get(6)?,
        requested_at_ms: r.try_get(7)?,
        status: r.try_get(8)?,
        decided_by: r.try_get(9)?,
        decided_at_ms: r.try_get(10)?,
        reason: r.try_get(11)?,
    })
}

/// One request by id.
pub async fn approval(
    conn: impl sqlx::Executor<'_, Database = sqlx::Any>,
    approval_id: &str,
) -> Result<Option<ApprovalRow>, sqlx::Error> {
    sqlx::query(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE approval_id = $1"
    ))
    .bind(approval_id)
    .fetch_optional(conn)
    .await?
    .as_ref()
    .map(approval_row)
    .transpose()
}

/// Requests, oldest first, of one status or all, at most `limit`.
pub async fn approvals(
    pool: &AnyPool,
    status: Option<&str>,
    limit: i64,
) -> Result<Vec<ApprovalRow>, sqlx::Error> {
    let rows = match status {
        Some(s) => {
            sqlx::query(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = $1 ORDER BY requested_at_ms, approval_id LIMIT $2"
            ))
            .bind(s)
            .bind(limit)
            .fetch_all(pool)
            .await?
        }
        None => {
            sqlx::query(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals ORDER BY requested_at_ms, approval_id LIMIT $1"
            ))
            .bind(limit)
            .fetch_all(pool)
            .await?
        }
    };
    rows.iter().map(approval_row).collect()
}
