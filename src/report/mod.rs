//! What the CLI and the HTTP API both show of the reads (`store::read`): the range of a
//! report, explorer links, and reports as rows ([`output::Rows`]) rendered as a table, JSON
//! or CSV; [`shell`]: command lines printed for the user to paste; [`html`] and
//! [`statement`]: a provider statement as a page. Neither `cli` nor `http`
//! imports the other; both import this.

pub mod html;
pub mod output;
pub mod shell;
pub mod statement;

use serde_json::json;

use crate::domain::money::{format_cents, format_micro_usdc};
use crate::domain::time::{
    MS_PER_DAY, date_of_ms, format_ms, month_start_ms, next_month_start_ms,
    parse_instant_or_date_ms, week_start_ms,
};
use crate::store::read::{EarningsBy, EarningsGroup, EarningsReport, EarningsTotals, PayoutRow};
use output::Rows;

/// The range `[from, to)` from optional texts; defaults to the month containing `now_ms`.
pub(crate) fn parse_range(
    from: Option<&str>,
    to: Option<&str>,
    now_ms: i64,
) -> Result<(i64, i64), crate::domain::DomainError> {
    let from_ms = match from {
        Some(t) => parse_instant_or_date_ms(t)?,
        None => month_start_ms(now_ms),
    };
    let to_ms = match to {
        Some(t) => parse_instant_or_date_ms(t)?,
        None => next_month_start_ms(from_ms),
    };
    if from_ms >= to_ms {
        return Err(crate::domain::DomainError::new(
            "invalid_range",
            "from must be before to",
        ));
    }
    Ok((from_ms, to_ms))
}

/// The Solana explorer link of a transaction on `cluster` (`mainnet-beta`: no parameter).
pub fn explorer_url(signature: &str, cluster: &str) -> String {
    match cluster {
        "" | "mainnet" | "mainnet-beta" => format!("https://explorer.solana.com/tx/{signature}"),
        c => format!("https://explorer.solana.com/tx/{signature}?cluster={c}"),
    }
}

/// Columns of an earnings report.
pub const EARNINGS_COLUMNS: [&str; 9] = [
    "key",
    "model",
    "from",
    "to",
    "gross_usdc",
    "fee_usdc",
    "net_usdc",
    "gpu_hours",
    "usage_ms",
];

/// An earnings report as rows (one per group).
pub(crate) fn earnings_rows(report: &EarningsReport) -> Rows {
    let mut rows = Rows::new(EARNINGS_COLUMNS.to_vec());
    for g in &report.groups {
        let t = &g.totals;
        rows.push(vec![
            json!(g.key),
            json!(g.model),
            json!(g.from_ms.map(format_ms)),
            json!(g.to_ms.map(format_ms)),
            json!(format_micro_usdc(t.gross_micro_usdc)),
            json!(format_micro_usdc(t.fee_micro_usdc)),
            json!(format_micro_usdc(t.net_micro_usdc)),
            json!(t.gpu_hours()),
            json!(t.duration_ms),
        ]);
    }
    rows
}

/// Columns of a payout list.
pub const PAYOUT_COLUMNS: [&str; 16] = [
    "payout_id",
    "provider_id",
    "created_at",
    "updated_at",
    "run_kind",
    "run_key",
    "rail",
    "status",
    "amount_usdc",
    "amount_eur",
    "eur_per_usd",
    "reference",
    "end_to_end_id",
    "explorer_url",
    "hold_reason",
    "failure_reason",
];

/// Payouts as rows; Solana references get their explorer link on `cluster`.
pub(crate) fn payout_rows(payouts: &[PayoutRow], cluster: &str) -> Rows {
    let mut rows = Rows::new(PAYOUT_COLUMNS.to_vec());
    for p in payouts {
        let explorer = match (&p.reference, p.rail.as_str()) {
            (Some(sig), "solana") => Some(explorer_url(sig, cluster)),
            _ => None,
        };
        rows.push(vec![
            json!(p.payout_id),
            json!(p.provider_id),
            json!(format_ms(p.created_at_ms)),
            json!(format_ms(p.updated_at_ms)),
            json!(p.run_kind),
            json!(p.run_key),
            json!(p.rail),
            json!(p.status),
            json!(format_micro_usdc(p.amount_micro_usdc)),
            json!(p.amount_eur_cents.map(format_cents)),
            json!(p.eur_per_usd),
            json!(p.reference),
            json!(p.end_to_end_id),
            json!(explorer),
            json!(p.hold_reason),
            json!(p.failure_reason),
        ]);
    }
    rows
}

/// Every period of a report by day, week or month over its range, oldest first, zero where
/// nothing was earned (the report itself lists only the periods with usage), so a chart's
/// time axis has no gaps; at most the last `max` periods. Returns them and how many
/// earlier periods of the range were left out. A report by GPU or model is returned as it
/// is.
pub(crate) fn every_period(report: &EarningsReport, max: usize) -> (Vec<EarningsGroup>, usize) {
    let (from, to) = (report.from_ms, report.to_ms);
    if to <= from
        || !matches!(
            report.by,
            EarningsBy::Day | EarningsBy::Week | EarningsBy::Month
        )
    {
        return (report.groups.clone(), 0);
    }
    // Start of the period containing `ms`, the start of the one before, its key.
    let start = |ms: i64| match report.by {
        EarningsBy::Week => week_start_ms(ms),
        EarningsBy::Month => month_start_ms(ms),
        _ => ms.div_euclid(MS_PER_DAY) * MS_PER_DAY,
    };
    let next = |start_ms: i64| match report.by {
        EarningsBy::Week => start_ms + 7 * MS_PER_DAY,
        EarningsBy::Month => next_month_start_ms(start_ms),
        _ => start_ms + MS_PER_DAY,
    };
    let key = |start_ms: i64| {
        let format = if report.by == EarningsBy::Month {
            "%Y-%m"
        } else {
            "%Y-%m-%d"
        };
        date_of_ms(start_ms).format(format).to_string()
    };
    let (first, last) = (start(from), start(to - 1));
    let total = match report.by {
        EarningsBy::Month => {
            let months = |ms: i64| {
                let d = date_of_ms(ms);
                i64::from(chrono::Datelike::year(&d)) * 12 + i64::from(chrono::Datelike::month0(&d))
            };
            months(last) - months(first) + 1
        }
        EarningsBy::Week => (last - first) / (7 * MS_PER_DAY) + 1,
        _ => (last - first) / MS_PER_DAY + 1,
    };
    let total = usize::try_from(total).unwrap_or(usize::MAX);
    let earned: std::collections::BTreeMap<&str, &EarningsGroup> =
        report.groups.iter().map(|g| (g.key.as_str(), g)).collect();
    let mut out = Vec::with_capacity(total.min(max));
    let mut at = last;
    while out.len() < max.min(total) {
        let k = key(at);
        let group = earned
            .get(k.as_str())
            .map(|g| (*g).clone())
            .unwrap_or_else(|| EarningsGroup {
                key: k,
                model: None,
                from_ms: Some(at.max(from)),
                to_ms: Some(next(at).min(to)),
                totals: EarningsTotals::default(),
            });
        out.push(group);
        at = start(at - 1);
    }
    out.reverse();
    let left_out = total - out.len();
    (out, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::time::parse_instant_or_date_ms;

    fn report(by: EarningsBy, from: &str, to: &str, earned: &[(&str, i64)]) -> EarningsReport {
        let groups = earned
            .iter()
            .map(|(key, net)| EarningsGroup {
                key: (*key).to_owned(),
                model: None,
                from_ms: None,
                to_ms: None,
                totals: EarningsTotals {
                    net_micro_usdc: *net,
                    ..EarningsTotals::default()
                },
            })
            .collect();
        EarningsReport {
            provider_id: "prv".parse().unwrap(),
            from_ms: parse_instant_or_date_ms(from).unwrap(),
            to_ms: parse_instant_or_date_ms(to).unwrap(),
            by,
            groups,
            totals: EarningsTotals::default(),
        }
    }

    fn keys_and_nets(groups: &[EarningsGroup]) -> Vec<(String, i64)> {
        groups
            .iter()
            .map(|g| (g.key.clone(), g.totals.net_micro_usdc))
            .collect()
    }

    #[test]
    fn a_range_with_gaps_has_every_day_with_zero_where_nothing_was_earned() {
        // The issue: 3 Nov, 24 Nov and 25 Nov were neighbours on the time axis.
        let r = report(
            EarningsBy::Day,
            "2026-11-01",
            "2026-12-01",
            &[("2026-11-03", 5), ("2026-11-24", 7), ("2026-11-25", 9)],
        );
        let (all, left_out) = every_period(&r, 400);
        assert_eq!((all.len(), left_out), (30, 0));
        assert_eq!(all[0].key, "2026-11-01");
        assert_eq!(all[29].key, "2026-11-30");
        let nets = keys_and_nets(&all);
        assert_eq!(nets[2], ("2026-11-03".into(), 5));
        assert_eq!(nets[3], ("2026-11-04".into(), 0), "the empty day is there");
        assert_eq!(nets[23], ("2026-11-24".into(), 7));
        assert_eq!(
            all[3].from_ms,
            Some(parse_instant_or_date_ms("2026-11-04").unwrap())
        );
        // At most `max`: the last ones, and how many were left out.
        let (last, left_out) = every_period(&r, 7);
        assert_eq!((last.len(), left_out), (7, 23));
        assert_eq!(last[0].key, "2026-11-24");
    }

    #[test]
    fn weeks_and_months_are_every_one_the_range_touches() {
        // Monday 2 Nov to Wednesday 2 Dec 2026, clipped weeks at both ends.
        let r = report(
            EarningsBy::Week,
            "2026-11-04T12:00:00Z",
            "2026-12-02",
            &[("2026-11-02", 1), ("2026-11-30", 2)],
        );
        let (all, _) = every_period(&r, 400);
        assert_eq!(
            keys_and_nets(&all),
            [
                ("2026-11-02".into(), 1),
                ("2026-11-09".into(), 0),
                ("2026-11-16".into(), 0),
                ("2026-11-23".into(), 0),
                ("2026-11-30".into(), 2)
            ]
        );
        let r = report(
            EarningsBy::Month,
            "2025-11-15",
            "2026-03-01",
            &[("2026-02", 3)],
        );
        let (all, _) = every_period(&r, 400);
        let keys: Vec<String> = all.iter().map(|g| g.key.clone()).collect();
        assert_eq!(keys, ["2025-11", "2025-12", "2026-01", "2026-02"]);
        assert_eq!(all[0].from_ms, Some(r.from_ms), "clipped to the range");
        // A range of centuries by day stays within `max`.
        let r = report(EarningsBy::Day, "1900-01-01", "2100-01-01", &[]);
        let (all, left_out) = every_period(&r, 400);
        assert_eq!(all.len(), 400);
        assert_eq!(left_out, 73_049 - 400);
    }
}
