//! Readers for ISO 20022 `camt.054` debit/credit notifications and `camt.053` statements
//! (written for version `001.08`; other versions with the same element names read too).
//!
//! Each account report (`Ntfctn` or `Stmt`) holds entries (`Ntry`). The readers flatten
//! them into one list of [`CamtEntry`]s, each carrying its report's `Id`. What the engine
//! matches on:
//! - a booked debit for one payout: `NtryDtls/TxDtls/Refs/EndToEndId` and the amount;
//! - a debit booked for a whole batch (`BtchBookg`): `NtryDtls/Btch` with `PmtInfId`,
//!   `NbOfTxs` and `TtlAmt`, and the entry amount;
//! - a returned payout: a credit whose `TxDtls` has `RtrInf` (`Rsn/Cd`, `AddtlInf`) and the
//!   original `EndToEndId`;
//! - for idempotency: the message id, the entry's `NtryRef` and `AcctSvcrRef`.
//!
//! Banks vary, so: `Sts` is read as `Sts/Cd`, `Sts/Prtry` or plain text (versions before
//! 08); booking and value dates as `Dt` or `DtTm` (the date part is kept); the bank
//! transaction code as the ISO domain, the proprietary code, or both.

use chrono::NaiveDate;

use crate::answers::{ANSWER_ENTRIES_MAX, Amount, AnswerError, AnswerLocation, ReasonCode};
use crate::pain002::amount;
use crate::xml_read::{self, Cursor, Element, Item, Visitor};

/// Local name of the `camt.054` message element.
pub const CAMT_054_MESSAGE: &str = "BkToCstmrDbtCdtNtfctn";

/// Local name of the `camt.053` message element.
pub const CAMT_053_MESSAGE: &str = "BkToCstmrStmt";

/// The namespace of `camt.054.001.08`.
pub const CAMT_054_001_08_NAMESPACE: &str = "urn:iso:std:iso:20022:tech:xsd:camt.054.001.08";

/// Credit or debit (`CdtDbtInd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CreditDebit {
    /// `CRDT`: money in (a return of a payout is a credit).
    Credit,
    /// `DBIT`: money out (a payout booked).
    Debit,
}

impl CreditDebit {
    /// `CRDT` or `DBIT`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Credit => "CRDT",
            Self::Debit => "DBIT",
        }
    }
}

/// An entry's status (`Sts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryStatus {
    /// `BOOK`: booked on the account.
    Booked,
    /// `PDNG`: not yet booked.
    Pending,
    /// `INFO`: information only, not booked.
    Information,
    /// `FUTR`: to be booked in the future.
    Future,
}

/// Page of a paginated message or report (`MsgPgntn`, `NtfctnPgntn`, `StmtPgntn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pagination {
    /// `PgNb`, from 1.
    pub page_number: u32,
    /// `LastPgInd`.
    pub last_page: bool,
}

/// The ISO bank transaction code (`BkTxCd/Domn`), e.g. `PMNT` / `ICDT` / `ESCT`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DomainCode {
    /// `Domn/Cd`.
    pub domain: String,
    /// `Domn/Fmly/Cd`.
    pub family: Option<String>,
    /// `Domn/Fmly/SubFmlyCd`.
    pub sub_family: Option<String>,
}

/// A bank's own transaction code (`BkTxCd/Prtry`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProprietaryCode {
    /// `Prtry/Cd`.
    pub code: String,
    /// `Prtry/Issr`.
    pub issuer: Option<String>,
}

/// `BkTxCd`: whatever of the two forms the bank gave.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BankTxCode {
    /// The ISO code.
    pub domain: Option<DomainCode>,
    /// The bank's own code.
    pub proprietary: Option<ProprietaryCode>,
}

/// `NtryDtls/Btch`: the entry books a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchBooking {
    /// `MsgId` of the original message.
    pub msg_id: Option<String>,
    /// `PmtInfId` of the original payment information block.
    pub pmt_inf_id: Option<String>,
    /// `NbOfTxs`.
    pub tx_count: Option<u64>,
    /// `TtlAmt`.
    pub total: Option<Amount>,
    /// `CdtDbtInd`.
    pub direction: Option<CreditDebit>,
}

/// `RtrInf`: why a payment came back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReturnInfo {
    /// `Rsn/Cd`, e.g. `AC04`.
    pub reason_code: Option<ReasonCode>,
    /// `Rsn/Prtry`.
    pub proprietary_reason: Option<String>,
    /// `AddtlInf` lines.
    pub additional_info: Vec<String>,
}

/// `NtryDtls/TxDtls`: one transaction inside an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CamtTransaction {
    /// `Refs/MsgId`.
    pub msg_id: Option<String>,
    /// `Refs/AcctSvcrRef`.
    pub account_servicer_ref: Option<String>,
    /// `Refs/PmtInfId`.
    pub pmt_inf_id: Option<String>,
    /// `Refs/EndToEndId`: the payout's reference.
    pub end_to_end_id: Option<String>,
    /// `Amt`, else `AmtDtls/TxAmt/Amt`, else `AmtDtls/InstdAmt/Amt`.
    pub amount: Option<Amount>,
    /// `CdtDbtInd`.
    pub direction: Option<CreditDebit>,
    /// `RtrInf`: present when this is a returned payment.
    pub return_info: Option<ReturnInfo>,
    /// Where in the file.
    pub path: String,
}

/// One `Ntry`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CamtEntry {
    /// `Id` of the notification or statement it is in.
    pub report_id: String,
    /// `NtryRef`.
    pub entry_ref: Option<String>,
    /// `Amt`.
    pub amount: Amount,
    /// `CdtDbtInd`.
    pub direction: CreditDebit,
    /// `RvslInd`: the entry reverses an earlier one.
    pub reversal: bool,
    /// `Sts`.
    pub status: EntryStatus,
    /// `BookgDt` (date part of `DtTm` when the bank gave a time).
    pub booking_date: Option<NaiveDate>,
    /// `ValDt`.
    pub value_date: Option<NaiveDate>,
    /// `AcctSvcrRef`: the bank's reference of the booking.
    pub account_servicer_ref: Option<String>,
    /// `BkTxCd`, when it has a code.
    pub bank_tx_code: Option<BankTxCode>,
    /// `NtryDtls/Btch`, one per `NtryDtls` that has it.
    pub batches: Vec<BatchBooking>,
    /// `NtryDtls/TxDtls`.
    pub transactions: Vec<CamtTransaction>,
    /// `AddtlNtryInf`.
    pub additional_info: Option<String>,
    /// Where in the file.
    pub path: String,
}

/// One notification or statement (`Ntfctn` / `Stmt`) of the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CamtAccountReport {
    /// `Id`.
    pub id: String,
    /// `NtfctnPgntn` / `StmtPgntn`.
    pub pagination: Option<Pagination>,
    /// `Acct/Id/IBAN`.
    pub account_iban: Option<String>,
    /// `Acct/Id/Othr/Id`.
    pub account_other_id: Option<String>,
    /// Its entries in [`CamtReport::entries`].
    pub entry_count: usize,
}

/// A `camt.054` or `camt.053` message, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CamtReport {
    /// `GrpHdr/MsgId`.
    pub msg_id: String,
    /// `GrpHdr/MsgPgntn`.
    pub pagination: Option<Pagination>,
    /// The notifications or statements, in file order.
    pub reports: Vec<CamtAccountReport>,
    /// All their entries, in file order.
    pub entries: Vec<CamtEntry>,
}

/// Reads a `camt.054` notification (UTF-8, byte order mark allowed).
///
/// # Errors
/// [`AnswerError`] saying what and where: malformed XML, no `BkToCstmrDbtCdtNtfctn`, a
/// missing message or notification id, an entry without amount, currency, credit/debit
/// indicator or status, a bad amount, code, date or count, too many entries.
pub fn read_camt054(xml: &str) -> Result<CamtReport, AnswerError> {
    read(xml, CAMT_054_MESSAGE, "Ntfctn", "NtfctnPgntn", None)
}

/// Reads a `camt.053` statement (UTF-8, byte order mark allowed).
///
/// # Errors
/// As [`read_camt054`], for `BkToCstmrStmt` and `Stmt`.
pub fn read_camt053(xml: &str) -> Result<CamtReport, AnswerError> {
    read(xml, CAMT_053_MESSAGE, "Stmt", "StmtPgntn", None)
}

/// Where the entries of a message go as they are read, instead of into
/// [`CamtReport::entries`]: what a file holds then stays out of memory, one entry at a time.
pub type EntrySink<'a> = &'a mut dyn FnMut(CamtEntry);

/// [`read_camt054`] (or, with `statement`, [`read_camt053`]) that hands each entry to
/// `each` as soon as it is read: the report returned has no entries, its notifications or
/// statements count them. A file that turns out bad after some entries is still an error:
/// what `each` kept is the caller's to drop.
///
/// # Errors
/// As [`read_camt054`].
pub fn read_camt_each(
    xml: &str,
    statement: bool,
    each: EntrySink<'_>,
) -> Result<CamtReport, AnswerError> {
    if statement {
        read(xml, CAMT_053_MESSAGE, "Stmt", "StmtPgntn", Some(each))
    } else {
        read(xml, CAMT_054_MESSAGE, "Ntfctn", "NtfctnPgntn", Some(each))
    }
}

fn read(
    xml: &str,
    message: &str,
    report_tag: &'static str,
    paging_tag: &'static str,
    sink: Option<EntrySink<'_>>,
) -> Result<CamtReport, AnswerError> {
    let mut r = Camt {
        sink,
        read: 0,
        report_tag,
        paging_tag,
        message_path: String::new(),
        msg_id: None,
        pagination: None,
        paging: Paging::default(),
        current: None,
        reports: Vec::new(),
        entries: Vec::new(),
    };
    xml_read::walk(xml, &[message], &mut r)?;
    let msg_id = r
        .msg_id
        .ok_or_else(|| AnswerError::missing(format!("{}/GrpHdr/MsgId", r.message_path)))?;
    Ok(CamtReport {
        msg_id,
        pagination: r.pagination,
        reports: r.reports,
        entries: r.entries,
    })
}

/// `PgNb` and `LastPgInd` as read, with where they were.
#[derive(Default)]
struct Paging {
    page: Option<(String, AnswerLocation)>,
    last: Option<(String, AnswerLocation)>,
}

impl Paging {
    fn finish(&mut self, at: &Cursor<'_>) -> Result<Pagination, AnswerError> {
        let (page, page_at) = self
            .page
            .take()
            .ok_or_else(|| AnswerError::missing(format!("{}/PgNb", at.path())))?;
        let (last, last_at) = self
            .last
            .take()
            .ok_or_else(|| AnswerError::missing(format!("{}/LastPgInd", at.path())))?;
        let page_number = page.parse().map_err(|_| AnswerError::InvalidNumber {
            at: page_at,
            value: page.clone(),
        })?;
        let last_page = match last.to_ascii_lowercase().as_str() {
            "true" | "1" => true,
            "false" | "0" => false,
            _ => {
                return Err(AnswerError::InvalidCode {
                    at: last_at,
                    value: last,
                });
            }
        };
        Ok(Pagination {
            page_number,
            last_page,
        })
    }
}

struct Camt<'s> {
    /// Where entries go instead of `entries`, if anywhere.
    sink: Option<EntrySink<'s>>,
    /// Entries read so far.
    read: usize,
    report_tag: &'static str,
    paging_tag: &'static str,
    message_path: String,
    msg_id: Option<String>,
    pagination: Option<Pagination>,
    paging: Paging,
    /// The report being read; its id is set once seen.
    current: Option<CamtAccountReport>,
    reports: Vec<CamtAccountReport>,
    entries: Vec<CamtEntry>,
}

impl Visitor for Camt<'_> {
    fn is_record(&self, parent: &Cursor<'_>, name: &str) -> bool {
        name == "Ntry" && parent.is(&[self.report_tag])
    }

    fn visit(&mut self, at: &Cursor<'_>, item: Item<'_>) -> Result<(), AnswerError> {
        let r = self.report_tag;
        match item {
            Item::Open if at.is(&[]) => self.message_path = at.path(),
            Item::Open if at.is(&[r]) => {
                self.current = Some(CamtAccountReport {
                    id: String::new(),
                    pagination: None,
                    account_iban: None,
                    account_other_id: None,
                    entry_count: 0,
                });
            }
            Item::Leaf { text } => self.leaf(at, text),
            Item::Record(el) => self.entry(at, &el)?,
            Item::Close if at.is(&["GrpHdr", "MsgPgntn"]) => {
                self.pagination = Some(self.paging.finish(at)?);
            }
            Item::Close if at.is(&[r, self.paging_tag]) => {
                let pagination = self.paging.finish(at)?;
                if let Some(c) = self.current.as_mut() {
                    c.pagination = Some(pagination);
                }
            }
            Item::Close if at.is(&[r]) => self.close_report(at)?,
            _ => {}
        }
        Ok(())
    }
}

impl Camt<'_> {
    fn leaf(&mut self, at: &Cursor<'_>, text: &str) {
        let (r, p) = (self.report_tag, self.paging_tag);
        let value = || (!text.is_empty()).then(|| text.to_owned());
        if at.is(&["GrpHdr", "MsgId"]) {
            self.msg_id = value();
        } else if at.is(&["GrpHdr", "MsgPgntn", "PgNb"]) || at.is(&[r, p, "PgNb"]) {
            self.paging.page = Some((text.to_owned(), at.at()));
        } else if at.is(&["GrpHdr", "MsgPgntn", "LastPgInd"]) || at.is(&[r, p, "LastPgInd"]) {
            self.paging.last = Some((text.to_owned(), at.at()));
        } else if let Some(c) = self.current.as_mut() {
            if at.is(&[r, "Id"]) {
                c.id = text.to_owned();
            } else if at.is(&[r, "Acct", "Id", "IBAN"]) {
                c.account_iban = value();
            } else if at.is(&[r, "Acct", "Id", "Othr", "Id"]) {
                c.account_other_id = value();
            }
        }
    }

    fn entry(&mut self, at: &Cursor<'_>, el: &Element) -> Result<(), AnswerError> {
        let report_id = match &self.current {
            Some(c) if !c.id.is_empty() => c.id.clone(),
            _ => return Err(AnswerError::missing(format!("{}/Id", at.path()))),
        };
        if self.read >= ANSWER_ENTRIES_MAX {
            return Err(AnswerError::TooManyEntries { at: el.at() });
        }
        let entry = entry(el, report_id)?;
        self.read += 1;
        match self.sink.as_mut() {
            Some(each) => each(entry),
            None => self.entries.push(entry),
        }
        if let Some(c) = self.current.as_mut() {
            c.entry_count += 1;
        }
        Ok(())
    }

    fn close_report(&mut self, at: &Cursor<'_>) -> Result<(), AnswerError> {
        match self.current.take() {
            Some(c) if !c.id.is_empty() => {
                self.reports.push(c);
                Ok(())
            }
            _ => Err(AnswerError::missing(format!("{}/Id", at.path()))),
        }
    }
}

/// One `Ntry`.
fn entry(el: &Element, report_id: String) -> Result<CamtEntry, AnswerError> {
    let amt = el
        .child("Amt")
        .ok_or_else(|| AnswerError::missing(el.path_of("Amt")))?;
    let direction = credit_debit(el.child("CdtDbtInd"))?
        .ok_or_else(|| AnswerError::missing(el.path_of("CdtDbtInd")))?;
    let mut batches = Vec::new();
    let mut transactions = Vec::new();
    for details in el.children_named("NtryDtls") {
        for b in details.children_named("Btch") {
            batches.push(batch(b)?);
        }
        for t in details.children_named("TxDtls") {
            transactions.push(transaction(t)?);
        }
    }
    Ok(CamtEntry {
        report_id,
        entry_ref: el.text_at(&["NtryRef"]).map(str::to_owned),
        amount: amount(amt)?,
        direction,
        reversal: el
            .text_at(&["RvslInd"])
            .is_some_and(|t| t.eq_ignore_ascii_case("true") || t == "1"),
        status: entry_status(el)?,
        booking_date: date_choice(el.child("BookgDt"))?,
        value_date: date_choice(el.child("ValDt"))?,
        account_servicer_ref: el.text_at(&["AcctSvcrRef"]).map(str::to_owned),
        bank_tx_code: el.child("BkTxCd").and_then(bank_tx_code),
        batches,
        transactions,
        additional_info: el.text_at(&["AddtlNtryInf"]).map(str::to_owned),
        path: el.path.clone(),
    })
}

fn credit_debit(el: Option<&Element>) -> Result<Option<CreditDebit>, AnswerError> {
    let Some(el) = el else { return Ok(None) };
    match el.text.to_ascii_uppercase().as_str() {
        "CRDT" => Ok(Some(CreditDebit::Credit)),
        "DBIT" => Ok(Some(CreditDebit::Debit)),
        _ => Err(AnswerError::InvalidCode {
            at: el.at(),
            value: el.text.clone(),
        }),
    }
}

/// `Sts` as `Sts/Cd`, `Sts/Prtry` or plain text.
fn entry_status(entry: &Element) -> Result<EntryStatus, AnswerError> {
    let sts = entry
        .child("Sts")
        .ok_or_else(|| AnswerError::missing(entry.path_of("Sts")))?;
    let code = sts
        .child("Cd")
        .or_else(|| sts.child("Prtry"))
        .unwrap_or(sts);
    match code.text.to_ascii_uppercase().as_str() {
        "BOOK" => Ok(EntryStatus::Booked),
        "PDNG" => Ok(EntryStatus::Pending),
        "INFO" => Ok(EntryStatus::Information),
        "FUTR" => Ok(EntryStatus::Future),
        "" => Err(AnswerError::missing(sts.path_of("Cd"))),
        _ => Err(AnswerError::InvalidCode {
            at: code.at(),
            value: code.text.clone(),
        }),
    }
}

/// A `DateAndDateTime2Choice` (`Dt` or `DtTm`): its date.
fn date_choice(el: Option<&Element>) -> Result<Option<NaiveDate>, AnswerError> {
    let Some(el) = el else { return Ok(None) };
    let value = el
        .child("Dt")
        .or_else(|| el.child("DtTm"))
        .filter(|v| !v.text.is_empty())
        .ok_or_else(|| AnswerError::missing(el.path_of("Dt")))?;
    parse_date(&value.text)
        .map(Some)
        .ok_or_else(|| AnswerError::InvalidDate {
            at: value.at(),
            value: value.text.clone(),
        })
}

/// `YYYY-MM-DD`, alone or followed by a time (`T…`) or a time zone (`Z`, `+01:00`).
pub(crate) fn parse_date(text: &str) -> Option<NaiveDate> {
    let (date, rest) = (text.get(..10)?, &text[10..]);
    let tail_ok = rest.is_empty() || rest.starts_with(['T', 'Z', '+', '-']);
    tail_ok
        .then(|| NaiveDate::parse_from_str(date, "%Y-%m-%d").ok())
        .flatten()
}

/// `BkTxCd`; `None` when it has neither a domain code nor a proprietary code.
fn bank_tx_code(el: &Element) -> Option<BankTxCode> {
    let domain = el.text_at(&["Domn", "Cd"]).map(|d| DomainCode {
        domain: d.to_owned(),
        family: el.text_at(&["Domn", "Fmly", "Cd"]).map(str::to_owned),
        sub_family: el
            .text_at(&["Domn", "Fmly", "SubFmlyCd"])
            .map(str::to_owned),
    });
    let proprietary = el.text_at(&["Prtry", "Cd"]).map(|c| ProprietaryCode {
        code: c.to_owned(),
        issuer: el.text_at(&["Prtry", "Issr"]).map(str::to_owned),
    });
    (domain.is_some() || proprietary.is_some()).then_some(BankTxCode {
        domain,
        proprietary,
    })
}

fn batch(el: &Element) -> Result<BatchBooking, AnswerError> {
    let tx_count = match el.child("NbOfTxs") {
        Some(n) => Some(n.text.parse().map_err(|_| AnswerError::InvalidNumber {
            at: n.at(),
            value: n.text.clone(),
        })?),
        None => None,
    };
    Ok(BatchBooking {
        msg_id: el.text_at(&["MsgId"]).map(str::to_owned),
        pmt_inf_id: el.text_at(&["PmtInfId"]).map(str::to_owned),
        tx_count,
        total: el.child("TtlAmt").map(amount).transpose()?,
        direction: credit_debit(el.child("CdtDbtInd"))?,
    })
}

fn transaction(el: &Element) -> Result<CamtTransaction, AnswerError> {
    let amount_el = el
        .child("Amt")
        .or_else(|| el.find(&["AmtDtls", "TxAmt", "Amt"]))
        .or_else(|| el.find(&["AmtDtls", "InstdAmt", "Amt"]));
    let refs = |name: &str| el.text_at(&["Refs", name]).map(str::to_owned);
    Ok(CamtTransaction {
        msg_id: refs("MsgId"),
        account_servicer_ref: refs("AcctSvcrRef"),
        pmt_inf_id: refs("PmtInfId"),
        end_to_end_id: refs("EndToEndId"),
        amount: amount_el.map(amount).transpose()?,
        direction: credit_debit(el.child("CdtDbtInd"))?,
        return_info: el.child("RtrInf").map(return_info).transpose()?,
        path: el.path.clone(),
    })
}

fn return_info(el: &Element) -> Result<ReturnInfo, AnswerError> {
    let reason_code = match el.find(&["Rsn", "Cd"]) {
        Some(c) => Some(
            ReasonCode::parse(&c.text).ok_or_else(|| AnswerError::InvalidCode {
                at: c.at(),
                value: c.text.clone(),
            })?,
        ),
        None => None,
    };
    Ok(ReturnInfo {
        reason_code,
        proprietary_reason: el.text_at(&["Rsn", "Prtry"]).map(str::to_owned),
        additional_info: el
            .children_named("AddtlInf")
            .map(|a| a.text.clone())
            .filter(|t| !t.is_empty())
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        let d = NaiveDate::from_ymd_opt(2026, 12, 1);
        assert_eq!(parse_date("2026-12-01"), d);
        assert_eq!(parse_date("2026-12-01T10:15:00+01:00"), d);
        assert_eq!(parse_date("2026-12-01+01:00"), d);
        assert_eq!(parse_date("2026-12-01Z"), d);
        assert_eq!(parse_date("2026-12-32"), None);
        assert_eq!(parse_date("01.12.2026"), None);
        assert_eq!(parse_date("2026-12-01X"), None);
        assert_eq!(parse_date("2026-12-0"), None);
    }
}
