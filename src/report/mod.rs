//! What the CLI and the HTTP API both show of the reads (`store::read`): the range of a
//! report, explorer links, and reports as rows ([`output::Rows`]) rendered as a table, JSON
//! or CSV; [`shell`]: command lines printed for the user to paste. Neither `cli` nor `http`
//! imports the other; both import this.

pub mod output;
pub mod shell;

use serde_json::json;

use crate::domain::money::{format_cents, format_micro_usdc};
use crate::domain::time::{
    format_ms, month_start_ms, next_month_start_ms, parse_instant_or_date_ms,
};
use crate::store::read::{EarningsReport, PayoutRow};
use output::Rows;

/// The range `[from, to)` from optional texts; defaults to the month containing `now_ms`.
pub fn parse_range(
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
pub fn earnings_rows(report: &EarningsReport) -> Rows {
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
pub fn payout_rows(payouts: &[PayoutRow], cluster: &str) -> Rows {
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
