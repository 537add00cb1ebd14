//! What a bank says back: one entry point, [`read_answer`], that recognises the kind of
//! file and reads it into a [`BankAnswer`], and the types the readers share.
//!
//! Kinds read (each in its own module):
//! - ISO 20022 `pain.002` customer payment status reports ([`crate::pain002`]);
//! - ISO 20022 `camt.054` debit/credit notifications and `camt.053` statements
//!   ([`crate::camt`]);
//! - NACHA return and notification-of-change entries, addenda `99` and `98`
//!   ([`crate::ach_answers`]).
//!
//! Reading is tolerant where banks differ and strict where a wrong reading would move
//! money: a UTF-8 byte order mark, any namespace or prefix, unknown elements, `DtTm` where
//! the schema has `Dt`, lower-case codes, CRLF line ends and trailing blank lines are
//! accepted; an amount that is not an exact decimal with at most two fraction digits, a
//! missing reference, an unknown entry status or a NACHA control total that does not add
//! up is an [`AnswerError`] with a stable [`AnswerError::code`] and the place
//! ([`AnswerLocation`]: the element path or the line) where it was found. Amounts are
//! parsed from their decimal text into integer cents, never through a float.
//!
//! Nothing here does I/O: the caller hands over the bytes of a file.

use std::fmt;

use crate::ach_answers::{AchAnswerFile, read_ach_answers};
use crate::camt::{
    CAMT_053_MESSAGE, CAMT_054_MESSAGE, CamtReport, read_camt_each, read_camt053, read_camt054,
};
use crate::pain002::{PAIN_002_MESSAGE, StatusReport, read_pain002};
use crate::returns::ReturnReason;
use crate::xml_read;

/// Most entries read from one file (status entries, camt entries or NACHA entries).
pub const ANSWER_ENTRIES_MAX: usize = 1_000_000;

/// Deepest XML nesting accepted (ISO 20022 messages nest about 15 levels).
pub const ANSWER_XML_DEPTH_MAX: usize = 64;

/// Where in a file a problem was found.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AnswerLocation {
    /// The file as a whole.
    File,
    /// An XML element, or an attribute after `/@`: local names from the root, with the
    /// 1-based position among siblings of the same name for repeating elements, e.g.
    /// `Document/BkToCstmrDbtCdtNtfctn/Ntfctn[1]/Ntry[3]/Amt/@Ccy`.
    Path(String),
    /// A NACHA record, by its 1-based line number in the file.
    Line(usize),
}

impl fmt::Display for AnswerLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File => f.write_str("file"),
            Self::Path(path) => f.write_str(path),
            Self::Line(line) => write!(f, "line {line}"),
        }
    }
}

/// Why a bank's file cannot be read. Every variant says where ([`AnswerError::location`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// Neither XML nor a NACHA file (which starts with a `101` file header).
    #[error("{at}: neither ISO 20022 XML nor a NACHA file")]
    UnknownFormat {
        /// Always [`AnswerLocation::File`].
        at: AnswerLocation,
    },
    /// XML that is not UTF-8 (ISO 20022 messages are UTF-8), or a UTF-16 file.
    #[error("{at}: not UTF-8 text ({detail})")]
    UnsupportedEncoding {
        /// Where.
        at: AnswerLocation,
        /// What was found.
        detail: String,
    },
    /// XML that is not well-formed (unclosed element, undefined entity, …).
    #[error("{at}: not well-formed XML: {detail}")]
    MalformedXml {
        /// The innermost element open when the problem was found.
        at: AnswerLocation,
        /// What the parser said, with the line number.
        detail: String,
    },
    /// Well-formed XML, but not a message read here.
    #[error("{at}: {name} is not a message read here (pain.002, camt.053, camt.054)")]
    UnknownMessage {
        /// The element found instead.
        at: AnswerLocation,
        /// Its local name.
        name: String,
    },
    /// A mandatory element, attribute or field is missing or empty.
    #[error("{at}: missing")]
    Missing {
        /// Where it should be.
        at: AnswerLocation,
    },
    /// An amount that is not a plain non-negative decimal (`12`, `12.5`, `12.50`).
    #[error("{at}: {value:?} is not a decimal amount")]
    InvalidAmount {
        /// Where.
        at: AnswerLocation,
        /// The text found.
        value: String,
    },
    /// An amount with more than two fraction digits.
    #[error("{at}: {value:?} has more than two decimals")]
    AmountTooPrecise {
        /// Where.
        at: AnswerLocation,
        /// The text found.
        value: String,
    },
    /// An amount whose cents do not fit in 63 bits.
    #[error("{at}: {value:?} is too large")]
    AmountTooLarge {
        /// Where.
        at: AnswerLocation,
        /// The text found.
        value: String,
    },
    /// A currency that is not three letters.
    #[error("{at}: {value:?} is not a currency code")]
    InvalidCurrency {
        /// Where.
        at: AnswerLocation,
        /// The text found.
        value: String,
    },
    /// A code outside its list or form (status, credit/debit indicator, reason code).
    #[error("{at}: {value:?} is not a valid code here")]
    InvalidCode {
        /// Where.
        at: AnswerLocation,
        /// The text found.
        value: String,
    },
    /// A date that is not `YYYY-MM-DD` (optionally followed by a time or an offset), or
    /// a NACHA `YYMMDD` that is not a date.
    #[error("{at}: {value:?} is not a date")]
    InvalidDate {
        /// Where.
        at: AnswerLocation,
        /// The text found.
        value: String,
    },
    /// A count or page number that is not a non-negative integer.
    #[error("{at}: {value:?} is not a number")]
    InvalidNumber {
        /// Where.
        at: AnswerLocation,
        /// The text found.
        value: String,
    },
    /// More than [`ANSWER_ENTRIES_MAX`] entries.
    #[error("{at}: more than {max} entries", max = ANSWER_ENTRIES_MAX)]
    TooManyEntries {
        /// The entry past the limit.
        at: AnswerLocation,
    },
    /// XML nested deeper than [`ANSWER_XML_DEPTH_MAX`].
    #[error("{at}: elements nested deeper than {max}", max = ANSWER_XML_DEPTH_MAX)]
    TooDeep {
        /// The element past the limit.
        at: AnswerLocation,
    },
    /// A NACHA record longer than 94 characters.
    #[error("{at}: a NACHA record has 94 characters, this one {chars}")]
    InvalidRecordLength {
        /// The line.
        at: AnswerLocation,
        /// Characters found.
        chars: usize,
    },
    /// A NACHA record of an unknown type, or out of order (an entry outside a batch, a
    /// missing file header or control, …).
    #[error("{at}: {detail}")]
    UnexpectedRecord {
        /// The line.
        at: AnswerLocation,
        /// What was expected.
        detail: String,
    },
    /// A NACHA field that does not have its form (digits, a date, a code).
    #[error("{at}: field {field} {value:?} is invalid")]
    InvalidField {
        /// The line.
        at: AnswerLocation,
        /// The field's name.
        field: &'static str,
        /// The text found.
        value: String,
    },
    /// A NACHA entry without an addenda record `98` (notification of change) or `99`
    /// (return).
    #[error("{at}: entry has no return (99) or notification of change (98) addenda")]
    MissingAddenda {
        /// The entry's line.
        at: AnswerLocation,
    },
    /// A NACHA batch or file control whose count, entry hash or total does not match its
    /// records.
    #[error("{at}: {field} is {stated}, the records add up to {computed}")]
    ControlMismatch {
        /// The control record's line.
        at: AnswerLocation,
        /// The field.
        field: &'static str,
        /// The value in the control record.
        stated: u64,
        /// The value computed from the records.
        computed: u64,
    },
}

impl AnswerError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownFormat { .. } => "unknown_format",
            Self::UnsupportedEncoding { .. } => "unsupported_encoding",
            Self::MalformedXml { .. } => "malformed_xml",
            Self::UnknownMessage { .. } => "unknown_message",
            Self::Missing { .. } => "missing_element",
            Self::InvalidAmount { .. } => "invalid_amount",
            Self::AmountTooPrecise { .. } => "amount_too_precise",
            Self::AmountTooLarge { .. } => "amount_too_large",
            Self::InvalidCurrency { .. } => "invalid_currency",
            Self::InvalidCode { .. } => "invalid_code",
            Self::InvalidDate { .. } => "invalid_date",
            Self::InvalidNumber { .. } => "invalid_number",
            Self::TooManyEntries { .. } => "too_many_entries",
            Self::TooDeep { .. } => "too_deep",
            Self::InvalidRecordLength { .. } => "invalid_record_length",
            Self::UnexpectedRecord { .. } => "unexpected_record",
            Self::InvalidField { .. } => "invalid_field",
            Self::MissingAddenda { .. } => "missing_addenda",
            Self::ControlMismatch { .. } => "control_mismatch",
        }
    }

    /// Where the problem is.
    pub fn location(&self) -> &AnswerLocation {
        match self {
            Self::UnknownFormat { at }
            | Self::UnsupportedEncoding { at, .. }
            | Self::MalformedXml { at, .. }
            | Self::UnknownMessage { at, .. }
            | Self::Missing { at }
            | Self::InvalidAmount { at, .. }
            | Self::AmountTooPrecise { at, .. }
            | Self::AmountTooLarge { at, .. }
            | Self::InvalidCurrency { at, .. }
            | Self::InvalidCode { at, .. }
            | Self::InvalidDate { at, .. }
            | Self::InvalidNumber { at, .. }
            | Self::TooManyEntries { at }
            | Self::TooDeep { at }
            | Self::InvalidRecordLength { at, .. }
            | Self::UnexpectedRecord { at, .. }
            | Self::InvalidField { at, .. }
            | Self::MissingAddenda { at }
            | Self::ControlMismatch { at, .. } => at,
        }
    }

    /// [`AnswerError::Missing`] at an XML path.
    pub(crate) fn missing(path: impl Into<String>) -> Self {
        Self::Missing {
            at: AnswerLocation::Path(path.into()),
        }
    }
}

/// Why a decimal text is not an amount in cents (see [`parse_cents`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CentsError {
    /// Not digits with an optional `.` and fraction digits.
    #[error("not a plain non-negative decimal")]
    Invalid,
    /// More than two fraction digits.
    #[error("more than two decimals")]
    TooPrecise,
    /// Does not fit in an `i64` of cents.
    #[error("too large")]
    TooLarge,
}

impl CentsError {
    /// Stable machine-readable code (the same as the [`AnswerError`] it becomes).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid => "invalid_amount",
            Self::TooPrecise => "amount_too_precise",
            Self::TooLarge => "amount_too_large",
        }
    }

    /// The [`AnswerError`] for `value` found at `at`.
    pub(crate) fn at(self, at: AnswerLocation, value: &str) -> AnswerError {
        let value = value.to_owned();
        match self {
            Self::Invalid => AnswerError::InvalidAmount { at, value },
            Self::TooPrecise => AnswerError::AmountTooPrecise { at, value },
            Self::TooLarge => AnswerError::AmountTooLarge { at, value },
        }
    }
}

/// Parses a non-negative decimal amount exactly into integer cents: `"12"` → 1200,
/// `"12.5"` → 1250, `"12.50"` → 1250, `"0.07"` → 7. Surrounding whitespace is ignored.
/// No sign, no exponent, no thousands separator, at least one digit before and after the
/// point when there is one.
///
/// # Errors
/// [`CentsError::TooPrecise`] for three or more fraction digits (even `12.500`: the
/// rails settle in cents and a third digit means the amount is not what was sent),
/// [`CentsError::TooLarge`] past `i64::MAX` cents, [`CentsError::Invalid`] otherwise.
pub fn parse_cents(text: &str) -> Result<i64, CentsError> {
    let text = text.trim();
    let (units, fraction) = match text.split_once('.') {
        Some((u, f)) => (u, Some(f)),
        None => (text, None),
    };
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(units) || fraction.is_some_and(|f| !all_digits(f)) {
        return Err(CentsError::Invalid);
    }
    let fraction = fraction.unwrap_or("");
    if fraction.len() > 2 {
        return Err(CentsError::TooPrecise);
    }
    let fraction_cents = match fraction.len() {
        0 => 0,
        1 => i64::from(fraction.as_bytes()[0] - b'0') * 10,
        _ => fraction.parse::<i64>().map_err(|_| CentsError::Invalid)?,
    };
    let units = units.trim_start_matches('0');
    if units.len() > 18 {
        return Err(CentsError::TooLarge);
    }
    let units: i64 = if units.is_empty() {
        0
    } else {
        units.parse().map_err(|_| CentsError::TooLarge)?
    };
    units
        .checked_mul(100)
        .and_then(|c| c.checked_add(fraction_cents))
        .ok_or(CentsError::TooLarge)
}

/// An ISO 4217 currency code: three ASCII letters, stored upper case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CurrencyCode([u8; 3]);

impl CurrencyCode {
    /// Euro.
    pub const EUR: CurrencyCode = CurrencyCode(*b"EUR");
    /// US dollar.
    pub const USD: CurrencyCode = CurrencyCode(*b"USD");

    /// Parses three ASCII letters (any case; surrounding whitespace ignored); `None`
    /// otherwise.
    pub fn parse(input: &str) -> Option<Self> {
        let bytes = input.trim().as_bytes();
        match bytes {
            [a, b, c] if bytes.iter().all(u8::is_ascii_alphabetic) => Some(Self([
                a.to_ascii_uppercase(),
                b.to_ascii_uppercase(),
                c.to_ascii_uppercase(),
            ])),
            _ => None,
        }
    }

    /// The three letters.
    pub fn as_str(&self) -> &str {
        // Always ASCII letters (checked in `parse`).
        std::str::from_utf8(&self.0).unwrap_or("???")
    }
}

impl fmt::Display for CurrencyCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An amount of money as a bank reported it: integer cents and the currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Amount {
    /// Cents (minor units with two decimals), never negative; the direction is given
    /// separately (credit or debit).
    pub cents: i64,
    /// The currency (`Ccy`).
    pub currency: CurrencyCode,
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}",
            crate::sepa::format_cents(self.cents),
            self.currency
        )
    }
}

/// A bank's reason code: an ISO 20022 external code (`AC01`, `AM04`, `MS03`, 1 to 4
/// letters or digits) or a NACHA return code (`R01`). Stored upper case.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReasonCode(String);

impl ReasonCode {
    /// Parses 1 to 4 ASCII letters or digits (any case; surrounding whitespace ignored);
    /// `None` otherwise.
    pub fn parse(input: &str) -> Option<Self> {
        let s = input.trim();
        let ok = (1..=4).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric());
        ok.then(|| Self(s.to_ascii_uppercase()))
    }

    /// The code.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The return reason this code names, when it is one of the known SEPA or ACH return
    /// codes (its description and whether it invalidates the bank details).
    pub fn known(&self) -> Option<ReturnReason> {
        ReturnReason::parse(&self.0).ok()
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The kinds of bank answers read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnswerKind {
    /// ISO 20022 `pain.002` customer payment status report.
    PaymentStatusReport,
    /// ISO 20022 `camt.054` bank-to-customer debit/credit notification.
    DebitCreditNotification,
    /// ISO 20022 `camt.053` bank-to-customer statement.
    Statement,
    /// NACHA returns (addenda 99) and notifications of change (addenda 98).
    AchReturns,
}

impl AnswerKind {
    /// Stable name: `pain.002`, `camt.054`, `camt.053` or `nacha_returns`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::PaymentStatusReport => "pain.002",
            Self::DebitCreditNotification => "camt.054",
            Self::Statement => "camt.053",
            Self::AchReturns => "nacha_returns",
        }
    }
}

/// A bank's answer file, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BankAnswer {
    /// `pain.002`: accepted and rejected payments, matched by end-to-end id.
    PaymentStatusReport(StatusReport),
    /// `camt.054`: booked debits and returned credits, matched by end-to-end id or by
    /// payment information id and total.
    DebitCreditNotification(CamtReport),
    /// `camt.053`: the same entries in an end-of-day statement (it may repeat a
    /// notification's entries).
    Statement(CamtReport),
    /// NACHA returns and notifications of change, matched by original trace number.
    AchReturns(AchAnswerFile),
}

impl BankAnswer {
    /// Which kind of file it was.
    pub fn kind(&self) -> AnswerKind {
        match self {
            Self::PaymentStatusReport(_) => AnswerKind::PaymentStatusReport,
            Self::DebitCreditNotification(_) => AnswerKind::DebitCreditNotification,
            Self::Statement(_) => AnswerKind::Statement,
            Self::AchReturns(_) => AnswerKind::AchReturns,
        }
    }

    /// The file's own identifier, for importing it once: `GrpHdr/MsgId` for ISO 20022,
    /// the file header's identity for NACHA (see [`AchAnswerFile::file_id`]).
    pub fn message_id(&self) -> &str {
        match self {
            Self::PaymentStatusReport(r) => &r.msg_id,
            Self::DebitCreditNotification(r) | Self::Statement(r) => &r.msg_id,
            Self::AchReturns(f) => &f.file_id,
        }
    }

    /// Number of entries read.
    pub fn entry_count(&self) -> usize {
        match self {
            Self::PaymentStatusReport(r) => r.entries.len(),
            Self::DebitCreditNotification(r) | Self::Statement(r) => {
                r.reports.iter().map(|a| a.entry_count).sum()
            }
            Self::AchReturns(f) => f.entries.len(),
        }
    }
}

/// The UTF-8 byte order mark.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Recognises the kind of a bank's answer file and reads it: ISO 20022 XML (`pain.002`,
/// `camt.054`, `camt.053`, found by the message element's local name, inside any envelope
/// and namespace) or a NACHA file (first record `101`). A UTF-8 byte order mark and
/// leading whitespace are skipped.
///
/// # Errors
/// [`AnswerError`]: [`AnswerError::UnknownFormat`] for anything else, and whatever the
/// reader of the kind found.
pub fn read_answer(bytes: &[u8]) -> Result<BankAnswer, AnswerError> {
    read_answer_inner(bytes, None)
}

/// [`read_answer`] that hands the entries of a `camt.054` or `camt.053` to `each` as they
/// are read ([`crate::camt::read_camt_each`]): the answer returned holds none of them (its
/// [`BankAnswer::entry_count`] still counts them), so a file of 100,000 entries is never
/// held whole as entries. Other kinds are returned whole, `each` unused.
///
/// # Errors
/// As [`read_answer`].
pub fn read_answer_each(
    bytes: &[u8],
    each: crate::camt::EntrySink<'_>,
) -> Result<BankAnswer, AnswerError> {
    read_answer_inner(bytes, Some(each))
}

fn read_answer_inner(
    bytes: &[u8],
    each: Option<crate::camt::EntrySink<'_>>,
) -> Result<BankAnswer, AnswerError> {
    let bytes = bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes);
    if bytes.starts_with(b"\xFF\xFE") || bytes.starts_with(b"\xFE\xFF") {
        return Err(AnswerError::UnsupportedEncoding {
            at: AnswerLocation::File,
            detail: "UTF-16 byte order mark".to_owned(),
        });
    }
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace());
    match start.map(|i| &bytes[i..]) {
        Some(rest) if rest.starts_with(b"<") => read_xml_answer(utf8(bytes)?, each),
        Some(rest) if rest.starts_with(b"101") => {
            read_ach_answers(&String::from_utf8_lossy(bytes)).map(BankAnswer::AchReturns)
        }
        _ => Err(AnswerError::UnknownFormat {
            at: AnswerLocation::File,
        }),
    }
}

/// The bytes as UTF-8, or where they stop being UTF-8.
pub(crate) fn utf8(bytes: &[u8]) -> Result<&str, AnswerError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        AnswerError::UnsupportedEncoding {
            at: AnswerLocation::Line(line),
            detail: format!("invalid UTF-8 at byte {}", e.valid_up_to()),
        }
    })
}

/// Reads an ISO 20022 answer after finding which message it holds.
fn read_xml_answer(
    xml: &str,
    each: Option<crate::camt::EntrySink<'_>>,
) -> Result<BankAnswer, AnswerError> {
    let names = [PAIN_002_MESSAGE, CAMT_054_MESSAGE, CAMT_053_MESSAGE];
    match xml_read::sniff(xml, &names)? {
        Ok(name) if name == PAIN_002_MESSAGE => {
            read_pain002(xml).map(BankAnswer::PaymentStatusReport)
        }
        Ok(name) if name == CAMT_054_MESSAGE => match each {
            Some(each) => read_camt_each(xml, false, each),
            None => read_camt054(xml),
        }
        .map(BankAnswer::DebitCreditNotification),
        Ok(_) => match each {
            Some(each) => read_camt_each(xml, true, each),
            None => read_camt053(xml),
        }
        .map(BankAnswer::Statement),
        Err((path, name)) => Err(AnswerError::UnknownMessage {
            at: AnswerLocation::Path(path),
            name,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cents() {
        assert_eq!(parse_cents("12"), Ok(1200));
        assert_eq!(parse_cents("12.5"), Ok(1250));
        assert_eq!(parse_cents("12.50"), Ok(1250));
        assert_eq!(parse_cents(" 0.07 "), Ok(7));
        assert_eq!(parse_cents("0"), Ok(0));
        assert_eq!(parse_cents("000000000000000000001.00"), Ok(100));
        assert_eq!(parse_cents("92233720368547758.07"), Ok(i64::MAX));
        assert_eq!(
            parse_cents("92233720368547758.08"),
            Err(CentsError::TooLarge)
        );
        assert_eq!(
            parse_cents("1000000000000000000"),
            Err(CentsError::TooLarge)
        );
        assert_eq!(parse_cents("12.345"), Err(CentsError::TooPrecise));
        assert_eq!(parse_cents("12.500"), Err(CentsError::TooPrecise));
        for bad in ["", ".5", "5.", "-1", "+1", "1,5", "1e3", "1.2.3", "١٢"] {
            assert_eq!(parse_cents(bad), Err(CentsError::Invalid), "{bad:?}");
        }
    }

    #[test]
    fn codes() {
        assert_eq!(CurrencyCode::parse("eur"), Some(CurrencyCode::EUR));
        assert_eq!(CurrencyCode::parse("EURO"), None);
        assert_eq!(CurrencyCode::parse("E1R"), None);
        assert_eq!(ReasonCode::parse(" ac04 ").unwrap().as_str(), "AC04");
        assert!(ReasonCode::parse("AC045").is_none());
        assert!(ReasonCode::parse("").is_none());
        assert!(ReasonCode::parse("r03").unwrap().known().is_some());
        assert!(ReasonCode::parse("ZZ99").unwrap().known().is_none());
    }
}
