//! The bank's answers read back and booked (SPEC §10): `pain.002` status reports,
//! `camt.054` notifications, `camt.053` statements and NACHA returns and notifications of
//! change, read by `settle_bank::read_answer` and matched to the payouts the engine sent.
//!
//! - Matching: by end-to-end id (SEPA `EndToEndId`, the ACH identification number, both
//!   recorded on `payout.submitted`), an ACH answer also by its original trace number (the
//!   batch's file read back); a batch booked as one entry (`BtchBookg`) by its payment
//!   information id and total. Amounts agree to the cent, else the entry books nothing.
//! - Booking: accepted or booked → settled; rejected (`RJCT`, `CANC`) → failed with the
//!   bank's code; returned (a credit with `RtrInf`, addenda 99) → returned with its code;
//!   both mark the bank details invalid while they are the ones the payout went to. A
//!   notification of change (addenda 98) becomes a proposed `provider.update` of the payout
//!   method ([`crate::control::propose`]), never a change made at once.
//! - Idempotent: each booking is its payout's keyed lifecycle event (a second settle of a
//!   settled payout is a duplicate), the proposal is keyed by the change's trace number,
//!   and the file is recorded last (`bank_answer.imported`, by kind and message id) with
//!   its entries that booked nothing, keyed by their own references. Importing a file again,
//!   or after a crash half-way through, books what is missing and nothing twice.

use std::collections::{HashMap, HashSet};

use settle_bank::{
    AchAnswer, AchAnswerKind, AchCorrection, Amount, BankAnswer, CamtEntry, CreditDebit,
    EntryStatus, ReturnReason, StatusClass, StatusReport, StatusTarget, read_answer_each,
    read_sent_nacha,
};

use super::{BankError, Originator, batch_payouts, rejected};
use crate::config::ControlConfig;
use crate::control::{self, Sign, Submitted};
use crate::domain::DomainError;
use crate::domain::decision::MICRO_USDC_PER_CENT;
use crate::domain::event::{BankAnswerException, BankAnswerImported, PayoutMethod, Rail};
use crate::domain::ids::{ProviderId, UpdateId};
use crate::domain::payout::{PayoutRecord, PayoutStatus};
use crate::domain::provider::UpdateProvider;
use crate::ledger::{Actor, Applied, Ledger, LedgerError};
use crate::store::Dialect;
use crate::store::bank_answers as rows;
use crate::store::rails::{self as rail_rows, BankBatch};
use crate::wire::import::Command;

/// What an import needs besides the ledger: the originator (to read the engine's NACHA
/// files back for their trace numbers), dual control and the importer's signature.
pub struct ImportContext<'a> {
    pub originator: &'a Originator,
    pub control: &'a ControlConfig,
    /// The importing operator's key: signs the proposals of notifications of change.
    pub signer: Option<&'a dyn Sign>,
    /// `bank.answer_payouts_per_tx`.
    pub payouts_per_tx: usize,
}

/// What became of one entry.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EntryResult {
    /// The entry's identity (its bank reference, else its place in the file).
    pub entry: String,
    /// What it named: end-to-end id, payment information id, trace number.
    pub reference: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payout_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// `settled`, `rejected`, `returned`, `change_proposed`, `duplicate`, `ignored`, or a
    /// problem: `unmatched`, `amount_mismatch`, `unknown_batch`, `state_conflict`,
    /// `change_unrequested`.
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub detail: String,
}

/// What an import did with a file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ImportReport {
    pub kind: &'static str,
    pub message_id: String,
    pub sha256: String,
    /// `accepted` (booked now) or `duplicate` (booked before: nothing done).
    pub status: &'static str,
    pub entries: usize,
    pub settled: usize,
    pub rejected: usize,
    pub returned: usize,
    pub changes_proposed: usize,
    pub duplicates: usize,
    pub exceptions: usize,
    pub results: Vec<EntryResult>,
}

/// What an entry asks for.
#[derive(Clone, Debug)]
enum Action {
    Settle,
    Reject(String),
    Return(String),
    /// Boxed: an entry is most often a settlement, and every entry is this size.
    Change(Box<ChangeNotice>),
}

/// A notification of change: the bank's code, its correction read, the corrected data.
#[derive(Clone, Debug)]
struct ChangeNotice {
    code: String,
    correction: Option<AchCorrection>,
    data: String,
}

/// What an entry names.
#[derive(Clone, Debug)]
enum Target {
    /// One payment by end-to-end id; an ACH answer with its original trace number.
    Payment { e2e: String, trace: Option<String> },
    /// A whole batch: by `PmtInfId` (a batch booking) or the original message id (a
    /// status of the whole file), with the total the bank gave.
    Batch { reference: String },
}

/// One entry of an answer, read.
#[derive(Clone, Debug)]
struct Item {
    key: String,
    /// `key` is still the entry's path in the file, not yet prefixed with the file's kind
    /// and message id ([`key_by_place`]).
    by_place: bool,
    target: Target,
    amount: Option<Amount>,
    action: Action,
}

/// The outcome of a notification of change no operator could request yet (an upload or
/// the inbox on a ledger with operators): an exception until one does.
pub const CHANGE_UNREQUESTED: &str = "change_unrequested";

/// Entries matched and booked in one pass of an import (the payouts they name loaded
/// together).
const ITEMS_PER_PASS: usize = 10_000;

/// An entry's result before it is reported.
struct Outcome {
    payout: Option<String>,
    batch: Option<String>,
    outcome: &'static str,
    code: Option<String>,
    detail: String,
    expected_cents: Option<i64>,
}

impl Outcome {
    fn of(p: &PayoutRecord, outcome: &'static str, detail: impl Into<String>) -> Outcome {
        Outcome {
            payout: Some(p.payout_id.to_string()),
            batch: p.reference.clone(),
            outcome,
            code: None,
            detail: detail.into(),
            expected_cents: None,
        }
    }

    fn problem(outcome: &'static str, detail: impl Into<String>) -> Outcome {
        Outcome {
            payout: None,
            batch: None,
            outcome,
            code: None,
            detail: detail.into(),
            expected_cents: None,
        }
    }

    fn is_exception(&self) -> bool {
        matches!(
            self.outcome,
            "unmatched"
                | "amount_mismatch"
                | "unknown_batch"
                | "state_conflict"
                | CHANGE_UNREQUESTED
        )
    }
}

/// The amount the engine sent for a payout: EUR cents (SEPA) or USD cents (ACH).
fn sent_amount(p: &PayoutRecord) -> Option<(i64, &'static str)> {
    match p.rail {
        Rail::Sepa => p.amount_eur_cents.map(|c| (c, "EUR")),
        Rail::Ach => Some((p.amount_micro_usdc / MICRO_USDC_PER_CENT, "USD")),
        Rail::Solana => None,
    }
}

/// `None` when `amount` (if given) is what the engine sent for `p`, else the sent cents.
fn amount_differs(p: &PayoutRecord, amount: Option<&Amount>) -> Option<i64> {
    let given = amount?;
    match sent_amount(p) {
        Some((cents, ccy)) if cents == given.cents && ccy == given.currency.as_str() => None,
        Some((cents, _)) => Some(cents),
        None => Some(0),
    }
}

fn status_items(r: &StatusReport) -> Vec<Item> {
    let has_transactions = r
        .entries
        .iter()
        .any(|e| matches!(e.target, StatusTarget::Transaction { .. }));
    let mut items = Vec::new();
    for e in &r.entries {
        let action = match e.status.class() {
            StatusClass::Accepted | StatusClass::Settled => Action::Settle,
            StatusClass::Rejected => Action::Reject(
                e.reason_code()
                    .map_or_else(|| e.status.as_str().to_owned(), |c| c.as_str().to_owned()),
            ),
            _ => continue,
        };
        let target = match &e.target {
            StatusTarget::Transaction { end_to_end_id, .. } => Target::Payment {
                e2e: end_to_end_id.clone(),
                trace: None,
            },
            // A status of the whole file or block answers its payments only when the report
            // names none of them one by one.
            StatusTarget::Message if !has_transactions => Target::Batch {
                reference: r.original_msg_id.clone(),
            },
            StatusTarget::PaymentInformation { pmt_inf_id } if !has_transactions => Target::Batch {
                reference: pmt_inf_id.clone(),
            },
            _ => continue,
        };
        items.push(Item {
            key: format!("pain.002:{}:{}", r.msg_id, e.path),
            by_place: false,
            target,
            amount: e.amount,
            action,
        });
    }
    items
}

/// The items of one `camt.054` or `camt.053` entry, appended to `items`. An item without
/// a bank reference is keyed by its place in the file ([`Item::by_place`]) until the
/// message id is known.
fn camt_entry_items(e: &CamtEntry, items: &mut Vec<Item>) {
    if e.status != EntryStatus::Booked {
        return;
    }
    let entry_key =
        |tx_ref: Option<&String>, path: &str| match tx_ref.or(e.account_servicer_ref.as_ref()) {
            Some(r) => (format!("camt:{r}"), false),
            None => (path.to_owned(), true),
        };
    let returning = e.direction == CreditDebit::Credit || e.reversal;
    for tx in &e.transactions {
        let Some(e2e) = &tx.end_to_end_id else {
            continue;
        };
        let action = if returning {
            let code = tx
                .return_info
                .as_ref()
                .and_then(|ri| ri.reason_code.as_ref().map(|c| c.as_str().to_owned()))
                .unwrap_or_default();
            Action::Return(code)
        } else {
            Action::Settle
        };
        let amount = tx
            .amount
            .or_else(|| (e.transactions.len() == 1).then_some(e.amount));
        let (key, by_place) = entry_key(tx.account_servicer_ref.as_ref(), &tx.path);
        items.push(Item {
            key,
            by_place,
            target: Target::Payment {
                e2e: e2e.clone(),
                trace: None,
            },
            amount,
            action,
        });
    }
    if returning || e.transactions.iter().any(|t| t.end_to_end_id.is_some()) {
        return;
    }
    for b in &e.batches {
        if let Some(pmt_inf_id) = &b.pmt_inf_id {
            let (key, by_place) = entry_key(None, &e.path);
            items.push(Item {
                key,
                by_place,
                target: Target::Batch {
                    reference: pmt_inf_id.clone(),
                },
                amount: b.total.or(Some(e.amount)),
                action: Action::Settle,
            });
        }
    }
}

/// The keys of items keyed by their place in a file of `kind` with `message_id`:
/// `camt.054:MSGID:PATH`.
fn key_by_place(items: &mut [Item], kind: &str, message_id: &str) {
    for item in items.iter_mut().filter(|i| i.by_place) {
        item.key = format!("{kind}:{message_id}:{}", item.key);
        item.by_place = false;
    }
}

fn ach_items(answers: &[AchAnswer]) -> Vec<Item> {
    answers
        .iter()
        .map(|a| {
            let action = match &a.kind {
                AchAnswerKind::Return { reason, .. } => Action::Return(reason.as_str().to_owned()),
                AchAnswerKind::ChangeNotice {
                    change,
                    corrected_data,
                    correction,
                } => Action::Change(Box::new(ChangeNotice {
                    code: change.as_str().to_owned(),
                    correction: correction.clone(),
                    data: corrected_data.clone(),
                })),
            };
            let amount = matches!(action, Action::Return(_)).then(|| Amount {
                cents: a.amount_usd_cents,
                currency: settle_bank::CurrencyCode::USD,
            });
            Item {
                key: format!("ach:{}", a.trace.as_str()),
                by_place: false,
                target: Target::Payment {
                    e2e: a.individual_id.clone(),
                    trace: Some(a.original_trace.as_str().to_owned()),
                },
                amount,
                action,
            }
        })
        .collect()
}

/// The items of an answer read whole (a camt message's entries read as they streamed by
/// are not in it: see [`import_answer`]).
fn items_of(answer: &BankAnswer) -> Vec<Item> {
    let mut items = match answer {
        BankAnswer::PaymentStatusReport(r) => status_items(r),
        BankAnswer::DebitCreditNotification(r) | BankAnswer::Statement(r) => {
            let mut items = Vec::new();
            for e in &r.entries {
                camt_entry_items(e, &mut items);
            }
            items
        }
        BankAnswer::AchReturns(f) => ach_items(&f.entries),
    };
    key_by_place(&mut items, answer.kind().as_str(), answer.message_id());
    items
}

/// The items of a file, [`ITEMS_PER_PASS`] to a pass, in file order.
#[derive(Default)]
struct Passes(Vec<Vec<Item>>);

impl Extend<Item> for Passes {
    fn extend<I: IntoIterator<Item = Item>>(&mut self, items: I) {
        for item in items {
            match self.0.last_mut() {
                Some(pass) if pass.len() < ITEMS_PER_PASS => pass.push(item),
                _ => {
                    let mut pass = Vec::with_capacity(ITEMS_PER_PASS);
                    pass.push(item);
                    self.0.push(pass);
                }
            }
        }
    }
}

/// The state an import works on: the payouts it matched (kept current as it books), the
/// batches, and the traces of the ACH batches read back.
struct Matcher<'a> {
    ledger: &'a Ledger,
    cx: &'a ImportContext<'a>,
    actor: &'a Actor,
    by_e2e: HashMap<String, Vec<PayoutRecord>>,
    /// Read when an entry first names a whole batch (each holds its payout ids: most
    /// answers never need them).
    batches: Option<Vec<BankBatch>>,
    traces: HashMap<String, HashMap<String, String>>,
}

impl<'a> Matcher<'a> {
    /// A matcher of `items`: the payouts their end-to-end ids name.
    async fn new(
        ledger: &'a Ledger,
        cx: &'a ImportContext<'a>,
        actor: &'a Actor,
        items: &[Item],
    ) -> Result<Matcher<'a>, BankError> {
        let e2es: Vec<&str> = items
            .iter()
            .filter_map(|i| match &i.target {
                Target::Payment { e2e, .. } => Some(e2e.as_str()),
                Target::Batch { .. } => None,
            })
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        Ok(Matcher {
            ledger,
            cx,
            actor,
            by_e2e: rows::payouts_by_end_to_end_ids(&ledger.store, &e2es)
                .await
                .map_err(LedgerError::from)?,
            batches: None,
            traces: HashMap::new(),
        })
    }

    async fn batch_named(&mut self, reference: &str) -> Result<Option<BankBatch>, BankError> {
        if self.batches.is_none() {
            self.batches = Some(
                rail_rows::batches(&self.ledger.store)
                    .await
                    .map_err(LedgerError::from)?,
            );
        }
        // The original message id is the batch id; a `PmtInfId` is the first 26 characters
        // of it, `-` and the execution date.
        Ok(self
            .batches
            .iter()
            .flatten()
            .find(|b| {
                b.batch_id == reference
                    || reference
                        .rsplit_once('-')
                        .is_some_and(|(head, _)| head.len() >= 26 && b.batch_id.starts_with(head))
            })
            .cloned())
    }

    /// The trace number → identification number of an ACH batch's entries, read back from
    /// its file (rebuilt from the ledger).
    async fn traces_of(&mut self, batch_id: &str) -> Result<&HashMap<String, String>, BankError> {
        if !self.traces.contains_key(batch_id) {
            let (_, file) = super::regenerate(self.ledger, self.cx.originator, batch_id).await?;
            let sent = read_sent_nacha(&file.contents)
                .map_err(|e| DomainError::new(e.code(), e.to_string()))?;
            let map = sent
                .batches
                .iter()
                .flat_map(|b| b.entries.iter())
                .map(|e| (e.trace.as_str().to_owned(), e.individual_id.clone()))
                .collect();
            self.traces.insert(batch_id.to_owned(), map);
        }
        Ok(&self.traces[batch_id])
    }

    /// The payout an entry names, or why none.
    async fn payout_of(
        &mut self,
        e2e: &str,
        trace: Option<&str>,
    ) -> Result<Result<PayoutRecord, Outcome>, BankError> {
        let found: Vec<PayoutRecord> = self
            .by_e2e
            .get(e2e)
            .map(|v| {
                v.iter()
                    .filter(|p| p.rail != Rail::Solana)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let [p] = found.as_slice() else {
            return Ok(Err(Outcome::problem(
                "unmatched",
                format!("no bank payout travelled with end-to-end id {e2e}"),
            )));
        };
        if let Some(trace) = trace {
            let batch = p.reference.clone().unwrap_or_default();
            let traces = self.traces_of(&batch).await?;
            if traces.get(trace).map(String::as_str) != Some(e2e) {
                let mut o = Outcome::problem(
                    "unmatched",
                    format!(
                        "trace number {trace} is not payout {}'s in batch {batch}",
                        p.payout_id
                    ),
                );
                o.batch = Some(batch);
                return Ok(Err(o));
            }
        }
        Ok(Ok(p.clone()))
    }

    fn remember(&mut self, p: &PayoutRecord, status: PayoutStatus) {
        if let Some(list) = p
            .end_to_end_id
            .as_ref()
            .and_then(|e| self.by_e2e.get_mut(e))
        {
            for q in list.iter_mut().filter(|q| q.payout_id == p.payout_id) {
                q.status = status;
            }
        }
    }
}

/// Reads and books one answer file. A file booked before with the same bytes is a
/// duplicate (nothing done); a different file under a booked message id is refused
/// (`conflict`); an unreadable one is refused with the reader's code and element path.
///
/// The bytes are taken, and released once read: what an import of a large notification
/// holds while it books is its entries, not the file too.
pub async fn import_answer(
    ledger: &Ledger,
    bytes: Vec<u8>,
    cx: &ImportContext<'_>,
    actor: &Actor,
) -> Result<ImportReport, BankError> {
    // A camt message's entries become items as they are read: the file is never held as
    // entries too (a notification of 100,000 entries is ~100 MB of XML).
    let mut passes = Passes::default();
    let mut entry_items = Vec::new();
    let answer = read_answer_each(&bytes, &mut |e| {
        camt_entry_items(&e, &mut entry_items);
        passes.extend(entry_items.drain(..));
    })
    .map_err(|e| DomainError::new(e.code(), e.to_string()))?;
    let kind = answer.kind().as_str();
    let message_id = answer.message_id().to_owned();
    let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    drop(bytes);
    let mut report = ImportReport {
        kind,
        message_id: message_id.clone(),
        sha256: sha256.clone(),
        status: "duplicate",
        entries: answer.entry_count(),
        settled: 0,
        rejected: 0,
        returned: 0,
        changes_proposed: 0,
        duplicates: 0,
        exceptions: 0,
        results: Vec::new(),
    };
    if let Some(known) = rows::answer_file(&ledger.store, kind, &message_id)
        .await
        .map_err(LedgerError::from)?
    {
        if known.sha256 == sha256 {
            if cx.signer.is_some() {
                request_changes(ledger, &answer, cx, actor, &mut report).await?;
            }
            return Ok(report);
        }
        return rejected(
            "conflict",
            format!("another {kind} file with message id {message_id} was booked"),
        );
    }
    // A camt message's items were read as it streamed by; the other kinds are read whole.
    passes.extend(items_of(&answer));
    drop(answer);
    // A pass at a time, each with the payouts its entries name and reported (its items
    // released) before the next: what a pass holds stays bounded whatever the file's size (a
    // pass reads the ledger as the ones before left it).
    report.results.reserve(passes.0.iter().map(Vec::len).sum());
    let mut exceptions = Vec::new();
    for mut pass in passes.0 {
        key_by_place(&mut pass, kind, &message_id);
        let mut m = Matcher::new(ledger, cx, actor, &pass).await?;
        let outcomes = book_items(&mut m, &pass).await?;
        exceptions.extend(report_items(&mut report, pass, outcomes));
    }
    let matched = report.results.len() - exceptions.len();
    report.exceptions = exceptions.len();
    let imported = BankAnswerImported {
        kind: kind.to_owned(),
        message_id,
        sha256,
        entries: i64::try_from(report.entries).unwrap_or(i64::MAX),
        matched: i64::try_from(matched).unwrap_or(i64::MAX),
        exceptions,
    };
    report.status = ledger.record_bank_answer(imported, actor).await?.as_str();
    Ok(report)
}

/// A file booked before, imported again by an operator with their key: its notifications
/// of change are requested now (each once: a request is keyed by its trace number); the
/// rest was booked the first time and is not read again.
async fn request_changes(
    ledger: &Ledger,
    answer: &BankAnswer,
    cx: &ImportContext<'_>,
    actor: &Actor,
    report: &mut ImportReport,
) -> Result<(), BankError> {
    let changes: Vec<Item> = items_of(answer)
        .into_iter()
        .filter(|i| matches!(i.action, Action::Change(_)))
        .collect();
    if changes.is_empty() {
        return Ok(());
    }
    let mut m = Matcher::new(ledger, cx, actor, &changes).await?;
    let outcomes = book_items(&mut m, &changes).await?;
    report.exceptions = report_items(report, changes, outcomes).len();
    Ok(())
}

/// The results of the items into the report; the entries that booked nothing.
fn report_items(
    report: &mut ImportReport,
    items: Vec<Item>,
    outcomes: Vec<Outcome>,
) -> Vec<BankAnswerException> {
    let mut exceptions = Vec::new();
    for (item, o) in items.into_iter().zip(outcomes) {
        tally(report, &o);
        let reference = match item.target {
            Target::Payment { e2e, trace } => trace.unwrap_or(e2e),
            Target::Batch { reference } => reference,
        };
        if o.is_exception() {
            exceptions.push(BankAnswerException {
                entry_key: item.key.clone(),
                problem: o.outcome.to_owned(),
                reference: reference.clone(),
                batch_id: o.batch.clone(),
                amount_cents: item.amount.as_ref().map_or(0, |a| a.cents),
                currency: item
                    .amount
                    .as_ref()
                    .map_or("XXX", |a| a.currency.as_str())
                    .to_owned(),
                expected_cents: o.expected_cents,
                detail: o.detail.clone(),
            });
        }
        report.results.push(EntryResult {
            entry: item.key,
            reference,
            payout_id: o.payout,
            batch_id: o.batch,
            outcome: o.outcome.to_owned(),
            code: o.code,
            detail: o.detail,
        });
    }
    exceptions
}

fn tally(report: &mut ImportReport, o: &Outcome) {
    match o.outcome {
        "settled" => report.settled += 1,
        "rejected" => report.rejected += 1,
        "returned" => report.returned += 1,
        "change_proposed" => report.changes_proposed += 1,
        "duplicate" => report.duplicates += 1,
        _ => {}
    }
}

/// Books the items in file order, the settlements of consecutive payment items together
/// and their returns together (settlements first; a payout already waiting in either is
/// booked before its next item is taken).
async fn book_items(m: &mut Matcher<'_>, items: &[Item]) -> Result<Vec<Outcome>, BankError> {
    let mut out: Vec<Option<Outcome>> = (0..items.len()).map(|_| None).collect();
    let mut pending = Pending::default();
    for (i, item) in items.iter().enumerate() {
        let gathered = matches!(item.target, Target::Payment { .. })
            && matches!(item.action, Action::Settle | Action::Return(_));
        if !gathered {
            pending.flush(m, &mut out).await?;
        }
        match (&item.target, &item.action) {
            (Target::Batch { reference }, action) => {
                let o = book_batch(m, reference, item.amount.as_ref(), action).await?;
                out[i] = Some(o);
            }
            (Target::Payment { e2e, trace }, action) => {
                let mut p = match m.payout_of(e2e, trace.as_deref()).await? {
                    Ok(p) => p,
                    Err(o) => {
                        out[i] = Some(o);
                        continue;
                    }
                };
                if let Some(expected) = amount_differs(&p, item.amount.as_ref()) {
                    let mut o = Outcome::of(
                        &p,
                        "amount_mismatch",
                        format!("the bank's amount differs from the {expected} cents sent"),
                    );
                    o.expected_cents = Some(expected);
                    out[i] = Some(o);
                    continue;
                }
                let in_settles = pending.settling.contains(p.payout_id.as_str());
                let in_returns = pending.returning.contains(p.payout_id.as_str());
                if in_returns || (in_settles && matches!(action, Action::Return(_))) {
                    pending.flush(m, &mut out).await?;
                    // The payout as those bookings left it.
                    p = match m.payout_of(e2e, trace.as_deref()).await? {
                        Ok(p) => p,
                        Err(o) => {
                            out[i] = Some(o);
                            continue;
                        }
                    };
                }
                match action {
                    Action::Settle => {
                        pending.settling.insert(p.payout_id.to_string());
                        pending.settles.push((i, p));
                    }
                    Action::Reject(code) => out[i] = Some(reject_one(m, &p, code).await?),
                    Action::Return(code) => {
                        pending.returning.insert(p.payout_id.to_string());
                        pending.returns.push((i, p, code.clone()));
                    }
                    Action::Change(change) => {
                        let ChangeNotice {
                            code,
                            correction,
                            data,
                        } = &**change;
                        out[i] = Some(
                            propose_change(m, &p, item, code, correction.as_ref(), data).await?,
                        );
                    }
                }
            }
        }
    }
    pending.flush(m, &mut out).await?;
    Ok(out
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Outcome::problem("ignored", "")))
        .collect())
}

/// The payment items gathered for booking together, and their payouts' ids (a payout
/// already waiting is booked before its next item is taken).
#[derive(Default)]
struct Pending {
    settles: Vec<(usize, PayoutRecord)>,
    returns: Vec<(usize, PayoutRecord, String)>,
    settling: HashSet<String>,
    returning: HashSet<String>,
}

impl Pending {
    /// Books what waits: the settlements, then the returns.
    async fn flush(
        &mut self,
        m: &mut Matcher<'_>,
        out: &mut [Option<Outcome>],
    ) -> Result<(), BankError> {
        flush_settles(m, &mut self.settles, out).await?;
        flush_returns(m, &mut self.returns, out).await?;
        self.settling.clear();
        self.returning.clear();
        Ok(())
    }
}

/// Payouts settled in one transaction: `bank.answer_payouts_per_tx`, on PostgreSQL at most
/// `ledger.ingest_streams_per_tx_max` (a provider stream is an advisory lock there).
fn settle_chunk(m: &Matcher<'_>) -> usize {
    let chunk = m.cx.payouts_per_tx.max(1);
    match m.ledger.store.dialect() {
        Dialect::Postgres => chunk.min(m.ledger.config.ingest_streams_per_tx_max.max(1)),
        Dialect::Sqlite => chunk,
    }
}

/// Settles the payouts collected, as many per transaction as [`settle_chunk`] says.
async fn flush_settles(
    m: &mut Matcher<'_>,
    pending: &mut Vec<(usize, PayoutRecord)>,
    out: &mut [Option<Outcome>],
) -> Result<(), BankError> {
    let mut to_settle: Vec<(usize, PayoutRecord)> = Vec::new();
    let mut seen = HashSet::new();
    for (i, p) in pending.drain(..) {
        match p.status {
            PayoutStatus::Submitted | PayoutStatus::Created if seen.insert(p.payout_id.clone()) => {
                to_settle.push((i, p));
            }
            PayoutStatus::Submitted
            | PayoutStatus::Created
            | PayoutStatus::Settled
            | PayoutStatus::Returned => {
                out[i] = Some(Outcome::of(&p, "duplicate", "settled before"));
            }
            other => {
                out[i] = Some(Outcome::of(
                    &p,
                    "state_conflict",
                    format!("the bank booked payout {} that is {other}", p.payout_id),
                ));
            }
        }
    }
    let chunk_max = settle_chunk(m);
    for chunk in to_settle.chunks(chunk_max) {
        let read: Vec<&PayoutRecord> = chunk.iter().map(|(_, p)| p).collect();
        let reference = chunk[0].1.reference.clone().unwrap_or_default();
        let answers = m
            .ledger
            .settle_payouts_read(&read, &reference, m.actor)
            .await?;
        for ((i, p), answer) in chunk.iter().zip(answers) {
            out[*i] = Some(match answer {
                Ok(Applied::Accepted) => Outcome::of(p, "settled", "booked by the bank"),
                Ok(Applied::Duplicate) => Outcome::of(p, "duplicate", "settled before"),
                Err(e) => Outcome::of(p, "state_conflict", e.to_string()),
            });
        }
        for (_, p) in chunk {
            m.remember(p, PayoutStatus::Settled);
        }
    }
    Ok(())
}

/// The reason text of a bank's code: `AC04: closed account number`.
fn reason_text(code: &str) -> String {
    match ReturnReason::parse(code) {
        Ok(r) => format!("{}: {}", r.code(), r.description()),
        Err(_) => format!("{code}: rejected by the bank"),
    }
}

async fn reject_one(
    m: &mut Matcher<'_>,
    p: &PayoutRecord,
    code: &str,
) -> Result<Outcome, BankError> {
    let mut o = match p.status {
        PayoutStatus::Failed => Outcome::of(p, "duplicate", "rejected before"),
        PayoutStatus::Submitted | PayoutStatus::Created => {
            // Every rejection blocks the details (SPEC §10), as a return does
            // (`super::return_payout`).
            let reason = reason_text(code);
            let answers = m
                .ledger
                .reject_payouts(&[(p.payout_id.as_str(), reason.clone(), true)], m.actor)
                .await?;
            m.remember(p, PayoutStatus::Failed);
            match answers.into_iter().next() {
                Some(Ok(Applied::Accepted)) => Outcome::of(p, "rejected", reason),
                Some(Ok(Applied::Duplicate)) => Outcome::of(p, "duplicate", reason),
                Some(Err(e)) => Outcome::of(p, "state_conflict", e.to_string()),
                None => Outcome::of(p, "state_conflict", "no answer"),
            }
        }
        other => Outcome::of(
            p,
            "state_conflict",
            format!("the bank rejected payout {} that is {other}", p.payout_id),
        ),
    };
    o.code = Some(code.to_owned());
    Ok(o)
}

/// Books the returns collected together ([`super::return_payouts`]).
async fn flush_returns(
    m: &mut Matcher<'_>,
    pending: &mut Vec<(usize, PayoutRecord, String)>,
    out: &mut [Option<Outcome>],
) -> Result<(), BankError> {
    if pending.is_empty() {
        return Ok(());
    }
    let answers = {
        let returns: Vec<(&str, &str)> = pending
            .iter()
            .map(|(_, p, code)| (p.payout_id.as_str(), code.as_str()))
            .collect();
        super::return_payouts(m.ledger, &returns, m.actor).await?
    };
    for ((i, p, code), answer) in pending.drain(..).zip(answers) {
        let mut o = match answer {
            Ok(r) if r.status == "accepted" => {
                m.remember(&p, PayoutStatus::Returned);
                Outcome::of(&p, "returned", format!("{}: {}", r.code, r.reason))
            }
            Ok(r) => Outcome::of(&p, "duplicate", format!("{}: {}", r.code, r.reason)),
            Err(BankError::Ledger(LedgerError::Rejected(e))) => {
                Outcome::of(&p, "state_conflict", format!("{}: {}", e.code, e.message))
            }
            Err(e) => return Err(e),
        };
        o.code = Some(code);
        out[i] = Some(o);
    }
    Ok(())
}

/// The bank details `p` went to, corrected as a notification of change says.
fn corrected(method: &PayoutMethod, c: &AchCorrection) -> Option<PayoutMethod> {
    let PayoutMethod::Ach {
        routing,
        account,
        account_type,
        holder,
        entity,
    } = method
    else {
        return None;
    };
    let type_of = |code: &str| match code.chars().next() {
        Some('2') => Some("checking".to_owned()),
        Some('3') => Some("savings".to_owned()),
        _ => None,
    };
    let (mut r, mut a, mut t) = (routing.clone(), account.clone(), account_type.clone());
    match c {
        AchCorrection::Account(acc) => a = acc.as_str().to_owned(),
        AchCorrection::Routing(rt) => r = rt.as_str().to_owned(),
        AchCorrection::RoutingAndAccount(rt, acc) => {
            r = rt.as_str().to_owned();
            a = acc.as_str().to_owned();
        }
        AchCorrection::TransactionCode(code) => t = type_of(code)?,
        AchCorrection::AccountAndTransactionCode(acc, code) => {
            a = acc.as_str().to_owned();
            t = type_of(code)?;
        }
        AchCorrection::RoutingAccountAndTransactionCode(rt, acc, code) => {
            r = rt.as_str().to_owned();
            a = acc.as_str().to_owned();
            t = type_of(code)?;
        }
        AchCorrection::Name(_) | AchCorrection::IndividualId(_) => return None,
    }
    Some(PayoutMethod::Ach {
        routing: r,
        account: a,
        account_type: t,
        holder: holder.clone(),
        entity: entity.clone(),
    })
}

async fn propose_change(
    m: &mut Matcher<'_>,
    p: &PayoutRecord,
    item: &Item,
    code: &str,
    correction: Option<&AchCorrection>,
    data: &str,
) -> Result<Outcome, BankError> {
    let mut o = Outcome::of(
        p,
        "ignored",
        format!("{code} {data}: no bank details to correct"),
    );
    o.code = Some(code.to_owned());
    // The details in force, opened: the correction changes some and keeps the others.
    let mut opened = [p.clone()];
    if m.ledger.open_payout_methods(&mut opened).await?[0].is_err() {
        o.detail = format!("{code} {data}: the provider was erased, no bank details to correct");
        return Ok(o);
    }
    let Some(method) = correction.and_then(|c| corrected(&opened[0].method, c)) else {
        return Ok(o);
    };
    let trace = item.key.trim_start_matches("ach:");
    let update = UpdateProvider {
        update_id: Some(UpdateId::parse(&format!("noc-{trace}"))?),
        provider_id: ProviderId::parse(&p.provider_id)?,
        name: None,
        email: None,
        tier: None,
        schedule: None,
        status: None,
        payout_method: Some(method),
    };
    let submitted = match control::propose(
        m.ledger,
        m.cx.control,
        &Command::UpdateProvider(update),
        m.actor,
        m.cx.signer,
    )
    .await
    {
        Ok(s) => s,
        // An upload or the inbox has no operator to sign the request: the entry waits,
        // reported, until an operator imports the file again with their key.
        Err(LedgerError::Rejected(e)) if e.code == "operator_signature_required" => {
            o.outcome = CHANGE_UNREQUESTED;
            o.detail = format!(
                "{code}: the bank's corrected details wait for an operator's request: import this file again with `settle bank import --operator-key KEY_FILE`"
            );
            return Ok(o);
        }
        Err(e) => return Err(e.into()),
    };
    let Submitted::Pending(row) = submitted else {
        o.outcome = "duplicate";
        o.detail = format!("{code}: the proposed correction was decided before");
        return Ok(o);
    };
    o.outcome = "change_proposed";
    o.detail = format!(
        "{code}: correction of the bank details waits for approval {}",
        row.approval_id
    );
    Ok(o)
}

/// A batch booked as one entry (or a status of a whole file): the total must be the
/// batch's; then every payout of it is settled or rejected.
async fn book_batch(
    m: &mut Matcher<'_>,
    reference: &str,
    amount: Option<&Amount>,
    action: &Action,
) -> Result<Outcome, BankError> {
    let Some(b) = m.batch_named(reference).await? else {
        return Ok(Outcome::problem(
            "unknown_batch",
            format!("no bank batch was sent as {reference}"),
        ));
    };
    let mut o = Outcome::problem("duplicate", "");
    o.batch = Some(b.batch_id.clone());
    if let Some(a) = amount
        && (a.cents != b.total_cents || a.currency.as_str() != b.currency)
    {
        o.outcome = "amount_mismatch";
        o.expected_cents = Some(b.total_cents);
        o.detail = format!(
            "batch {} was sent for {} cents {}",
            b.batch_id, b.total_cents, b.currency
        );
        return Ok(o);
    }
    let payouts = batch_payouts(&m.ledger.store, &b).await?;
    let open: Vec<&PayoutRecord> = payouts
        .iter()
        .filter(|p| matches!(p.status, PayoutStatus::Submitted | PayoutStatus::Created))
        .collect();
    match action {
        Action::Settle => {
            let chunk_max = settle_chunk(m);
            let ids: Vec<&str> = open.iter().map(|p| p.payout_id.as_str()).collect();
            for chunk in ids.chunks(chunk_max) {
                m.ledger.settle_payouts(chunk, &b.batch_id, m.actor).await?;
            }
            if !ids.is_empty() {
                o.outcome = "settled";
            }
            o.detail = format!(
                "{} payouts of batch {} booked together",
                ids.len(),
                b.batch_id
            );
        }
        Action::Reject(code) => {
            let reason = reason_text(code);
            for p in &open {
                reject_one(m, p, code).await?;
            }
            if !open.is_empty() {
                o.outcome = "rejected";
            }
            o.code = Some(code.clone());
            o.detail = format!("{} payouts of batch {}: {reason}", open.len(), b.batch_id);
        }
        Action::Return(_) | Action::Change(_) => {}
    }
    Ok(o)
}
