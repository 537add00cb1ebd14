//! `settle bank reconcile` and `GET /v1/admin/bank/reconciliation` (SPEC §10): per batch
//! what the bank confirmed (settled, returned, rejected) and what is still open after
//! `bank.answer_due_business_days` business days of the rail's calendar (TARGET2 for SEPA,
//! the Federal Reserve's for ACH), and the answers' entries that booked nothing: unmatched
//! ones and amount differences.

use chrono::{DateTime, NaiveDate};
use settle_calendar::Calendar;

use super::answers::CHANGE_UNREQUESTED;
use super::{BankError, batch_payouts};
use crate::config::BankConfig;
use crate::domain::event::Rail;
use crate::domain::payout::PayoutStatus;
use crate::ledger::{Ledger, LedgerError};
use crate::store::bank_answers::{self as rows, ExceptionRow};
use crate::store::rails as rail_rows;

/// Payout ids of a batch listed as open at most (the counts are always whole).
pub const OPEN_PAYOUTS_LISTED_MAX: usize = 100;

/// One batch, reconciled.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BatchReconciliation {
    pub batch_id: String,
    pub rail: Rail,
    pub currency: String,
    pub payouts: usize,
    pub total_cents: i64,
    /// Payouts the bank booked (settled and not returned).
    pub settled: usize,
    pub settled_cents: i64,
    /// Payouts the bank booked and sent back.
    pub returned: usize,
    pub returned_cents: i64,
    /// Payouts the bank refused (failed).
    pub rejected: usize,
    pub rejected_cents: i64,
    /// Payouts without an answer yet.
    pub open: usize,
    pub open_cents: i64,
    /// The business day by which the bank should have answered (`YYYY-MM-DD`).
    pub answer_due: String,
    /// Open payouts past `answer_due`.
    pub overdue: bool,
    /// The first open payouts (at most [`OPEN_PAYOUTS_LISTED_MAX`]).
    pub open_payouts: Vec<String>,
}

/// The whole reconciliation.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Reconciliation {
    /// Today (UTC) as the ledger's clock says.
    pub as_of: String,
    pub answer_due_business_days: u32,
    pub batches: Vec<BatchReconciliation>,
    /// Entries that matched nothing (no payout, no batch) or a payout in another state.
    pub unmatched: Vec<ExceptionRow>,
    /// Entries that matched with another amount.
    pub amount_differences: Vec<ExceptionRow>,
    /// Notifications of change that no operator has requested yet (imported by upload or
    /// inbox on a ledger with operators): import the file again with an operator key.
    pub changes_unrequested: Vec<ExceptionRow>,
    /// Open payouts past their due day, over all batches.
    pub overdue_payouts: usize,
}

impl Reconciliation {
    /// Every entry that booked nothing: unmatched, amount differences, changes unrequested.
    pub fn exceptions(&self) -> impl Iterator<Item = &ExceptionRow> {
        self.unmatched
            .iter()
            .chain(&self.amount_differences)
            .chain(&self.changes_unrequested)
    }

    /// Nothing overdue and no entry waiting for a person.
    pub fn is_clean(&self) -> bool {
        self.overdue_payouts == 0 && self.exceptions().next().is_none()
    }
}

fn date_of(ms: i64) -> NaiveDate {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.date_naive())
        .unwrap_or_default()
}

/// `days` business days of `rail`'s calendar after `from`.
fn due_date(rail: Rail, from: NaiveDate, days: u32) -> Result<NaiveDate, BankError> {
    let calendar = match rail {
        Rail::Ach => Calendar::us_federal_reserve(),
        _ => Calendar::target2(),
    };
    let mut day = from;
    for _ in 0..days {
        day = calendar
            .next_business_day_after(day)
            .map_err(|e| crate::domain::DomainError::new(e.code(), e.to_string()))?;
    }
    Ok(day)
}

/// The entries that booked nothing, by kind: unmatched, amount differences, and the
/// notifications of change not requested yet (one requested since is no longer listed).
async fn exceptions(
    ledger: &Ledger,
) -> Result<(Vec<ExceptionRow>, Vec<ExceptionRow>, Vec<ExceptionRow>), BankError> {
    let store = &ledger.store;
    let mut unmatched = Vec::new();
    let mut amount_differences = Vec::new();
    let mut changes_unrequested = Vec::new();
    for e in rows::exceptions(store).await.map_err(LedgerError::from)? {
        match e.problem.as_str() {
            "amount_mismatch" => amount_differences.push(e),
            CHANGE_UNREQUESTED => {
                // The request of a notification of change is update `noc-{trace}`.
                let update_id = format!("noc-{}", e.entry_key.trim_start_matches("ach:"));
                if !rows::update_requested(store, &update_id)
                    .await
                    .map_err(LedgerError::from)?
                {
                    changes_unrequested.push(e);
                }
            }
            _ => unmatched.push(e),
        }
    }
    Ok((unmatched, amount_differences, changes_unrequested))
}

/// Reconciles every batch against the answers booked, as of the ledger's clock.
pub async fn reconcile(ledger: &Ledger, config: &BankConfig) -> Result<Reconciliation, BankError> {
    let store = &ledger.store;
    let today = date_of(ledger.now_ms());
    let mut batches = Vec::new();
    let mut overdue_payouts = 0;
    for b in rail_rows::batches(store).await.map_err(LedgerError::from)? {
        let due = due_date(
            b.rail,
            date_of(b.generated_at_ms),
            config.answer_due_business_days,
        )?;
        let mut r = BatchReconciliation {
            batch_id: b.batch_id.clone(),
            rail: b.rail,
            currency: b.currency.clone(),
            payouts: b.payout_ids.len(),
            total_cents: b.total_cents,
            settled: 0,
            settled_cents: 0,
            returned: 0,
            returned_cents: 0,
            rejected: 0,
            rejected_cents: 0,
            open: 0,
            open_cents: 0,
            answer_due: due.format("%Y-%m-%d").to_string(),
            overdue: false,
            open_payouts: Vec::new(),
        };
        for p in batch_payouts(store, &b).await? {
            let cents = match b.rail {
                Rail::Sepa => p.amount_eur_cents.unwrap_or(0),
                _ => p.amount_micro_usdc / crate::domain::decision::MICRO_USDC_PER_CENT,
            };
            let (n, sum) = match p.status {
                PayoutStatus::Settled => (&mut r.settled, &mut r.settled_cents),
                PayoutStatus::Returned => (&mut r.returned, &mut r.returned_cents),
                PayoutStatus::Failed | PayoutStatus::Cancelled => {
                    (&mut r.rejected, &mut r.rejected_cents)
                }
                _ => {
                    if r.open_payouts.len() < OPEN_PAYOUTS_LISTED_MAX {
                        r.open_payouts.push(p.payout_id.to_string());
                    }
                    (&mut r.open, &mut r.open_cents)
                }
            };
            *n += 1;
            *sum += cents;
        }
        r.overdue = r.open > 0 && today > due;
        if r.overdue {
            overdue_payouts += r.open;
        }
        batches.push(r);
    }
    let (unmatched, amount_differences, changes_unrequested) = exceptions(ledger).await?;
    Ok(Reconciliation {
        as_of: today.format("%Y-%m-%d").to_string(),
        answer_due_business_days: config.answer_due_business_days,
        batches,
        unmatched,
        amount_differences,
        changes_unrequested,
        overdue_payouts,
    })
}
