//! Reader for NACHA return and notification-of-change (NOC) entries: a NACHA file whose
//! entry detail records (`6`) are each followed by an addenda record (`7`) of type `99`
//! (return) or `98` (notification of change).
//!
//! Fields read (positions 1-based, as in the NACHA Operating Rules):
//! - entry detail: transaction code 2–3, receiving DFI 4–11 and check digit 12, account
//!   13–29, amount in cents 30–39, identification number 40–54, name 55–76, trace number
//!   80–94;
//! - addenda `99`: return reason code 4–6 (`R01`…), original entry trace number 7–21,
//!   date of death 22–27 (`YYMMDD`, blank or zeros when none), original receiving DFI
//!   28–35, addenda information 36–79, trace number 80–94;
//! - addenda `98`: change code 4–6 (`C01`…), original entry trace number 7–21, original
//!   receiving DFI 28–35, corrected data 36–64, trace number 80–94.
//!
//! A returned payout is matched by the original entry trace number, which is the trace
//! number of the entry the engine wrote. Other addenda (e.g. `05`) are skipped; an entry
//! with neither `98` nor `99` is an error, as is a control total that does not add up.
//! Tolerated: CRLF or LF line ends, blank lines, trailing blanks cut from a record, a file
//! without line breaks, characters outside ASCII (read as `?`), the `9…9` filler.

use std::fmt;

use chrono::NaiveDate;

use crate::aba::{AbaRouting, AchAccountNumber};
use crate::answers::{AnswerError, ReasonCode};
use crate::nacha_read::{self, RawEntry, Record};

/// A 15-digit NACHA trace number: the ODFI's 8-digit routing prefix and a 7-digit
/// sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceNumber(String);

impl TraceNumber {
    /// Parses exactly 15 ASCII digits (surrounding whitespace ignored); `None` otherwise.
    pub fn parse(input: &str) -> Option<Self> {
        let s = input.trim();
        (s.len() == 15 && s.bytes().all(|b| b.is_ascii_digit())).then(|| Self(s.to_owned()))
    }

    /// The 15 digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TraceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A NACHA change code of a notification of change: `C` and two digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChangeCode(String);

/// The change codes of the NACHA Operating Rules (Appendix Five) and what they correct.
const CHANGE_CODES: &[(&str, &str)] = &[
    ("C01", "Incorrect bank account number"),
    ("C02", "Incorrect transit/routing number"),
    (
        "C03",
        "Incorrect transit/routing number and bank account number",
    ),
    ("C04", "Bank account name change"),
    ("C05", "Incorrect payment code (transaction code)"),
    ("C06", "Incorrect bank account number and transit code"),
    (
        "C07",
        "Incorrect transit/routing number, bank account number and payment code",
    ),
    ("C08", "Incorrect receiving DFI identification (IAT only)"),
    ("C09", "Incorrect individual ID number"),
    ("C13", "Addenda format error"),
    (
        "C14",
        "Incorrect SEC code for outbound international payment",
    ),
];

impl ChangeCode {
    /// Parses `C` and two digits (any case); `None` otherwise.
    pub fn parse(input: &str) -> Option<Self> {
        let s = input.trim().to_ascii_uppercase();
        let ok = s.len() == 3 && s.starts_with('C') && s[1..].bytes().all(|b| b.is_ascii_digit());
        ok.then_some(Self(s))
    }

    /// The code, e.g. `C01`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What it corrects, for the known codes.
    pub fn description(&self) -> Option<&'static str> {
        CHANGE_CODES
            .iter()
            .find(|(c, _)| *c == self.0)
            .map(|(_, d)| *d)
    }
}

impl fmt::Display for ChangeCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The corrected bank details of a notification of change, as far as its change code
/// says how to read the corrected data. Transaction codes are the two NACHA digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AchCorrection {
    /// `C01`.
    Account(AchAccountNumber),
    /// `C02`.
    Routing(AbaRouting),
    /// `C03`.
    RoutingAndAccount(AbaRouting, AchAccountNumber),
    /// `C04`: the receiver's name.
    Name(String),
    /// `C05`.
    TransactionCode(String),
    /// `C06`.
    AccountAndTransactionCode(AchAccountNumber, String),
    /// `C07`.
    RoutingAccountAndTransactionCode(AbaRouting, AchAccountNumber, String),
    /// `C09`: the identification number.
    IndividualId(String),
}

impl AchCorrection {
    /// Reads `data` (the 29-character corrected data field) for `code`; `None` for other
    /// codes or data that is not of the code's form (kept as text in [`AchAnswerKind`]).
    pub fn parse(code: &ChangeCode, data: &str) -> Option<Self> {
        let first = |n: usize| {
            data.get(..n.min(data.len()))
                .unwrap_or("")
                .trim()
                .to_owned()
        };
        let words: Vec<&str> = data.split_whitespace().collect();
        let routing = |s: &str| AbaRouting::parse(s).ok();
        let account = |s: &str| AchAccountNumber::parse(s).ok();
        let tx_code =
            |s: &str| (s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.to_owned());
        match (code.as_str(), words.as_slice()) {
            ("C01", _) => account(&first(17)).map(Self::Account),
            ("C02", _) => routing(&first(9)).map(Self::Routing),
            ("C03", [r, a]) => Some(Self::RoutingAndAccount(routing(r)?, account(a)?)),
            ("C04", _) => Some(first(22)).filter(|n| !n.is_empty()).map(Self::Name),
            ("C05", _) => tx_code(&first(2)).map(Self::TransactionCode),
            ("C06", [a, t]) => Some(Self::AccountAndTransactionCode(account(a)?, tx_code(t)?)),
            ("C07", _) => {
                let (r, rest) = (data.get(..9)?, data.get(9..)?);
                match rest.split_whitespace().collect::<Vec<_>>().as_slice() {
                    [a, t] => Some(Self::RoutingAccountAndTransactionCode(
                        routing(r)?,
                        account(a)?,
                        tx_code(t)?,
                    )),
                    _ => None,
                }
            }
            ("C09", _) => Some(first(22))
                .filter(|n| !n.is_empty())
                .map(Self::IndividualId),
            _ => None,
        }
    }
}

/// What the bank says about one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AchAnswerKind {
    /// Addenda `99`: the entry was returned; the money comes back.
    Return {
        /// Return reason code, e.g. `R01`, `R03` (see [`ReasonCode::known`]).
        reason: ReasonCode,
        /// Date of death (`R14`, `R15`), when given.
        date_of_death: Option<NaiveDate>,
        /// Addenda information (positions 36–79), trimmed.
        addenda_information: String,
    },
    /// Addenda `98`: the entry was posted, but the bank details must be corrected.
    ChangeNotice {
        /// Change code, e.g. `C01`.
        change: ChangeCode,
        /// The corrected data field (positions 36–64), trimmed.
        corrected_data: String,
        /// The corrected data read for the change code, when it has that form.
        correction: Option<AchCorrection>,
    },
}

/// One return or notification of change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AchAnswer {
    /// Line of the entry detail record.
    pub line: usize,
    /// Trace number of the entry the engine sent (matches the payout).
    pub original_trace: TraceNumber,
    /// This entry's own trace number.
    pub trace: TraceNumber,
    /// Transaction code, e.g. `21` (return or NOC of a checking credit).
    pub transaction_code: String,
    /// Amount in cents (0 for a notification of change).
    pub amount_usd_cents: i64,
    /// The receiving DFI routing number of this entry (9 digits).
    pub routing: String,
    /// Original receiving DFI identification (8 digits).
    pub original_rdfi: String,
    /// DFI account number, trimmed.
    pub account: String,
    /// Identification number (the payout's [`crate::AchIndividualId`]), trimmed.
    pub individual_id: String,
    /// Receiver name, trimmed.
    pub individual_name: String,
    /// Standard Entry Class of the batch (`PPD`, `CCD`, `COR`…).
    pub sec_code: String,
    /// Return or change.
    pub kind: AchAnswerKind,
}

/// A NACHA file of returns and notifications of change, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AchAnswerFile {
    /// Identity of the file from its header: immediate destination, immediate origin,
    /// creation date and time and file id modifier, e.g.
    /// `1234567890-091000019-2612011030-A` (NACHA has no message id; these fields are what
    /// makes a file unique).
    pub file_id: String,
    /// Entries in file order.
    pub entries: Vec<AchAnswer>,
}

/// Reads a NACHA return / notification-of-change file.
///
/// # Errors
/// [`AnswerError`] with the line: record length or order, a non-numeric field, a trace
/// number that is not 15 digits, an entry without addenda `98`/`99`, a bad reason or
/// change code or date, a control total that does not match.
pub fn read_ach_answers(input: &str) -> Result<AchAnswerFile, AnswerError> {
    let file = nacha_read::parse(input)?;
    let mut entries = Vec::new();
    for batch in &file.batches {
        let sec_code = batch.header.text(51, 53);
        for e in &batch.entries {
            entries.push(answer(e, &sec_code)?);
        }
    }
    Ok(AchAnswerFile {
        file_id: file_id(&file.header),
        entries,
    })
}

/// The identity of a file from its header record.
pub(crate) fn file_id(header: &Record<'_>) -> String {
    format!(
        "{}-{}-{}{}-{}",
        header.text(4, 13),
        header.text(14, 23),
        header.field(24, 29),
        header.field(30, 33),
        header.field(34, 34),
    )
}

fn trace(
    r: &Record<'_>,
    from: usize,
    to: usize,
    name: &'static str,
) -> Result<TraceNumber, AnswerError> {
    let s = r.field(from, to);
    TraceNumber::parse(s).ok_or_else(|| r.invalid(name, s))
}

fn answer(e: &RawEntry<'_>, sec_code: &str) -> Result<AchAnswer, AnswerError> {
    let r = &e.record;
    let addenda = e
        .addenda
        .iter()
        .find(|a| matches!(a.field(2, 3), "98" | "99"))
        .ok_or(AnswerError::MissingAddenda { at: r.at() })?;
    let amount = r.number(30, 39, "amount")?;
    Ok(AchAnswer {
        line: r.line,
        original_trace: trace(addenda, 7, 21, "original entry trace number")?,
        trace: trace(r, 80, 94, "trace number")?,
        transaction_code: r.digits(2, 3, "transaction code")?,
        amount_usd_cents: i64::try_from(amount)
            .map_err(|_| r.invalid("amount", r.field(30, 39)))?,
        routing: r.digits(4, 12, "receiving DFI identification")?,
        original_rdfi: addenda.digits(28, 35, "original receiving DFI identification")?,
        account: r.text(13, 29),
        individual_id: r.text(40, 54),
        individual_name: r.text(55, 76),
        sec_code: sec_code.to_owned(),
        kind: kind(addenda)?,
    })
}

fn kind(a: &Record<'_>) -> Result<AchAnswerKind, AnswerError> {
    let code = a.field(4, 6);
    if a.field(2, 3) == "99" {
        let well_formed = code.len() == 3
            && code.as_bytes()[0].eq_ignore_ascii_case(&b'R')
            && code[1..].bytes().all(|b| b.is_ascii_digit());
        let reason = ReasonCode::parse(code)
            .filter(|_| well_formed)
            .ok_or_else(|| a.invalid("return reason code", code))?;
        Ok(AchAnswerKind::Return {
            reason,
            date_of_death: a.date(22, 27, "date of death")?,
            addenda_information: a.text(36, 79),
        })
    } else {
        let change = ChangeCode::parse(code).ok_or_else(|| a.invalid("change code", code))?;
        let data = a.field(36, 64);
        Ok(AchAnswerKind::ChangeNotice {
            correction: AchCorrection::parse(&change, data),
            corrected_data: data.trim().to_owned(),
            change,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(c: &str) -> ChangeCode {
        ChangeCode::parse(c).unwrap()
    }

    #[test]
    fn corrections() {
        let pad = |s: &str| format!("{s:<29}");
        assert_eq!(
            AchCorrection::parse(&code("C01"), &pad("1918171614")),
            Some(AchCorrection::Account(
                AchAccountNumber::parse("1918171614").unwrap()
            ))
        );
        assert_eq!(
            AchCorrection::parse(&code("C02"), &pad("021000021")),
            Some(AchCorrection::Routing(
                AbaRouting::parse("021000021").unwrap()
            ))
        );
        assert_eq!(AchCorrection::parse(&code("C02"), &pad("021000022")), None);
        assert!(matches!(
            AchCorrection::parse(&code("C03"), &pad("021000021   12345678")),
            Some(AchCorrection::RoutingAndAccount(_, _))
        ));
        assert!(matches!(
            AchCorrection::parse(&code("C06"), &pad("12345678         32")),
            Some(AchCorrection::AccountAndTransactionCode(_, t)) if t == "32"
        ));
        assert!(matches!(
            AchCorrection::parse(&code("C07"), &pad("02100002112345678  32")),
            Some(AchCorrection::RoutingAccountAndTransactionCode(_, _, t)) if t == "32"
        ));
        assert_eq!(
            AchCorrection::parse(&code("C05"), &pad("32")),
            Some(AchCorrection::TransactionCode("32".to_owned()))
        );
        assert_eq!(AchCorrection::parse(&code("C13"), &pad("x")), None);
        assert_eq!(
            code("c01").description(),
            Some("Incorrect bank account number")
        );
        assert!(ChangeCode::parse("R01").is_none());
        assert!(TraceNumber::parse("12345678901234").is_none());
    }
}
