//! Readers of the payment files the engine sends, `pain.001` and NACHA credit files:
//! what the bank (or the [`crate::simulate`] bank) sees in them. Same tolerance and errors
//! as the answer readers ([`crate::answers`]).

use chrono::NaiveDate;

use crate::ach_answers::{TraceNumber, file_id};
use crate::answers::{ANSWER_ENTRIES_MAX, Amount, AnswerError};
use crate::camt::parse_date;
use crate::nacha_read::{self, RawBatch, Record};
use crate::pain002::amount;
use crate::xml_read::{self, Cursor, Element, Item, Visitor};

/// Local name of the `pain.001` message element.
pub const PAIN_001_MESSAGE: &str = "CstmrCdtTrfInitn";

/// One `CdtTrfTxInf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentSepaPayment {
    /// `PmtId/EndToEndId`.
    pub end_to_end_id: String,
    /// `Amt/InstdAmt`.
    pub amount: Amount,
    /// `CdtrAcct/Id/IBAN`.
    pub creditor_iban: Option<String>,
    /// `Cdtr/Nm`.
    pub creditor_name: Option<String>,
    /// Where in the file.
    pub path: String,
}

/// One `PmtInf` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentPaymentInfo {
    /// `PmtInfId`.
    pub pmt_inf_id: String,
    /// `ReqdExctnDt/Dt` (or `DtTm`, or the plain date of older versions).
    pub execution_date: Option<NaiveDate>,
    /// `DbtrAcct/Id/IBAN`.
    pub debtor_iban: Option<String>,
    /// Its transactions in file order.
    pub payments: Vec<SentSepaPayment>,
}

/// A `pain.001` credit transfer initiation, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentSepaFile {
    /// `GrpHdr/MsgId`.
    pub msg_id: String,
    /// The `PmtInf` blocks in file order.
    pub payment_infos: Vec<SentPaymentInfo>,
}

impl SentSepaFile {
    /// All payments, with their block's `PmtInfId`, in file order.
    pub fn payments(&self) -> impl Iterator<Item = (&SentPaymentInfo, &SentSepaPayment)> {
        self.payment_infos
            .iter()
            .flat_map(|b| b.payments.iter().map(move |p| (b, p)))
    }
}

/// Reads a `pain.001` file (any version with the `pain.001.001.09` element names).
///
/// # Errors
/// [`AnswerError`] saying what and where: malformed XML, no `CstmrCdtTrfInitn`, a missing
/// `MsgId`, `PmtInfId`, `EndToEndId` or amount, a bad amount, currency or date.
pub fn read_sent_pain001(xml: &str) -> Result<SentSepaFile, AnswerError> {
    let mut r = Pain001::default();
    xml_read::walk(xml, &[PAIN_001_MESSAGE], &mut r)?;
    let msg_id = r
        .msg_id
        .ok_or_else(|| AnswerError::missing(format!("{}/GrpHdr/MsgId", r.message_path)))?;
    Ok(SentSepaFile {
        msg_id,
        payment_infos: r.blocks,
    })
}

#[derive(Default)]
struct Pain001 {
    message_path: String,
    msg_id: Option<String>,
    blocks: Vec<SentPaymentInfo>,
    payments: usize,
}

impl Visitor for Pain001 {
    fn is_record(&self, parent: &Cursor<'_>, name: &str) -> bool {
        name == "CdtTrfTxInf" && parent.is(&["PmtInf"])
    }

    fn visit(&mut self, at: &Cursor<'_>, item: Item<'_>) -> Result<(), AnswerError> {
        match item {
            Item::Open if at.is(&[]) => self.message_path = at.path(),
            Item::Open if at.is(&["PmtInf"]) => self.blocks.push(SentPaymentInfo {
                pmt_inf_id: String::new(),
                execution_date: None,
                debtor_iban: None,
                payments: Vec::new(),
            }),
            Item::Leaf { text } => self.leaf(at, text)?,
            Item::Record(el) => self.payment(at, &el)?,
            Item::Close if at.is(&["PmtInf"]) => self.check_block(at)?,
            _ => {}
        }
        Ok(())
    }
}

impl Pain001 {
    fn leaf(&mut self, at: &Cursor<'_>, text: &str) -> Result<(), AnswerError> {
        let value = (!text.is_empty()).then(|| text.to_owned());
        if at.is(&["GrpHdr", "MsgId"]) {
            self.msg_id = value;
            return Ok(());
        }
        let Some(block) = self.blocks.last_mut() else {
            return Ok(());
        };
        let is_date = at.is(&["PmtInf", "ReqdExctnDt"])
            || at.is(&["PmtInf", "ReqdExctnDt", "Dt"])
            || at.is(&["PmtInf", "ReqdExctnDt", "DtTm"]);
        if at.is(&["PmtInf", "PmtInfId"]) {
            block.pmt_inf_id = text.to_owned();
        } else if at.is(&["PmtInf", "DbtrAcct", "Id", "IBAN"]) {
            block.debtor_iban = value;
        } else if is_date {
            let date = parse_date(text).ok_or_else(|| AnswerError::InvalidDate {
                at: at.at(),
                value: text.to_owned(),
            })?;
            block.execution_date = Some(date);
        }
        Ok(())
    }

    fn payment(&mut self, at: &Cursor<'_>, el: &Element) -> Result<(), AnswerError> {
        let Some(block) = self.blocks.last_mut().filter(|b| !b.pmt_inf_id.is_empty()) else {
            return Err(AnswerError::missing(format!("{}/PmtInfId", at.path())));
        };
        if self.payments >= ANSWER_ENTRIES_MAX {
            return Err(AnswerError::TooManyEntries { at: el.at() });
        }
        let end_to_end_id = el
            .text_at(&["PmtId", "EndToEndId"])
            .ok_or_else(|| AnswerError::missing(el.path_of("PmtId/EndToEndId")))?;
        let amt = el
            .find(&["Amt", "InstdAmt"])
            .ok_or_else(|| AnswerError::missing(el.path_of("Amt/InstdAmt")))?;
        block.payments.push(SentSepaPayment {
            end_to_end_id: end_to_end_id.to_owned(),
            amount: amount(amt)?,
            creditor_iban: el.text_at(&["CdtrAcct", "Id", "IBAN"]).map(str::to_owned),
            creditor_name: el.text_at(&["Cdtr", "Nm"]).map(str::to_owned),
            path: el.path.clone(),
        });
        self.payments += 1;
        Ok(())
    }

    fn check_block(&self, at: &Cursor<'_>) -> Result<(), AnswerError> {
        match self.blocks.last() {
            Some(b) if !b.pmt_inf_id.is_empty() => Ok(()),
            _ => Err(AnswerError::missing(format!("{}/PmtInfId", at.path()))),
        }
    }
}

/// One entry detail record of a NACHA credit file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentNachaEntry {
    /// Line in the file.
    pub line: usize,
    /// Trace number (positions 80–94).
    pub trace: TraceNumber,
    /// Transaction code, e.g. `22` (checking credit) or `32` (savings credit).
    pub transaction_code: String,
    /// Receiving DFI routing number with its check digit (9 digits).
    pub routing: String,
    /// DFI account number, trimmed.
    pub account: String,
    /// Amount in cents.
    pub amount_usd_cents: i64,
    /// Identification number, trimmed.
    pub individual_id: String,
    /// Receiver name, trimmed.
    pub individual_name: String,
}

/// One batch of a NACHA credit file, with the header fields a return batch repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentNachaBatch {
    /// Service class code (`220` credits only, `200` mixed).
    pub service_class: String,
    /// Company name (positions 5–20), as written (padded to 16).
    pub company_name: String,
    /// Company discretionary data (21–40), as written (padded to 20).
    pub company_discretionary: String,
    /// Company identification (41–50), as written (padded to 10).
    pub company_id: String,
    /// Standard Entry Class (`CCD`, `PPD`).
    pub sec_code: String,
    /// Company entry description (54–63), as written (padded to 10).
    pub entry_description: String,
    /// Effective entry date (`YYMMDD`, 70–75).
    pub effective_entry_date: String,
    /// Originating DFI identification (80–87).
    pub odfi: String,
    /// The entries in file order.
    pub entries: Vec<SentNachaEntry>,
}

/// A NACHA credit file, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentNachaFile {
    /// The file's identity (see [`crate::AchAnswerFile::file_id`]).
    pub file_id: String,
    /// Immediate destination (positions 4–13), as written.
    pub immediate_destination: String,
    /// Immediate origin (positions 14–23), as written.
    pub immediate_origin: String,
    /// Immediate destination name (41–63), as written.
    pub destination_name: String,
    /// Immediate origin name (64–86), as written.
    pub origin_name: String,
    /// The batches in file order.
    pub batches: Vec<SentNachaBatch>,
}

/// Reads a NACHA file of credits (the engine's payout file).
///
/// # Errors
/// [`AnswerError`] with the line: record length or order, a non-numeric field, a trace
/// number that is not 15 digits, a control total that does not match.
pub fn read_sent_nacha(input: &str) -> Result<SentNachaFile, AnswerError> {
    let file = nacha_read::parse(input)?;
    let h = &file.header;
    Ok(SentNachaFile {
        file_id: file_id(h),
        immediate_destination: h.field(4, 13).to_owned(),
        immediate_origin: h.field(14, 23).to_owned(),
        destination_name: h.field(41, 63).to_owned(),
        origin_name: h.field(64, 86).to_owned(),
        batches: file.batches.iter().map(batch).collect::<Result<_, _>>()?,
    })
}

fn batch(b: &RawBatch<'_>) -> Result<SentNachaBatch, AnswerError> {
    let h = &b.header;
    Ok(SentNachaBatch {
        service_class: h.digits(2, 4, "service class code")?,
        company_name: h.field(5, 20).to_owned(),
        company_discretionary: h.field(21, 40).to_owned(),
        company_id: h.field(41, 50).to_owned(),
        sec_code: h.text(51, 53),
        entry_description: h.field(54, 63).to_owned(),
        effective_entry_date: h.field(70, 75).to_owned(),
        odfi: h.digits(80, 87, "originating DFI identification")?,
        entries: b
            .entries
            .iter()
            .map(|e| entry(&e.record))
            .collect::<Result<_, _>>()?,
    })
}

fn entry(r: &Record<'_>) -> Result<SentNachaEntry, AnswerError> {
    let trace = r.field(80, 94);
    let amount = r.number(30, 39, "amount")?;
    Ok(SentNachaEntry {
        line: r.line,
        trace: TraceNumber::parse(trace).ok_or_else(|| r.invalid("trace number", trace))?,
        transaction_code: r.digits(2, 3, "transaction code")?,
        routing: r.digits(4, 12, "receiving DFI identification")?,
        account: r.text(13, 29),
        amount_usd_cents: i64::try_from(amount)
            .map_err(|_| r.invalid("amount", r.field(30, 39)))?,
        individual_id: r.text(40, 54),
        individual_name: r.text(55, 76),
    })
}
