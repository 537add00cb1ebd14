//! Writer for ISO 20022 `pain.001.001.09` customer credit transfer initiation files
//! (SEPA credit transfers in EUR).
//!
//! The output is valid against the official `pain.001.001.09` XSD and follows the SEPA
//! rules the XSD does not check: EUR amounts with exactly two decimals, the SEPA Latin
//! character set for every text, names of at most 70 characters, references of at most 35
//! characters, `CtrlSum` equal to the sum of the amounts.
//!
//! Layout of a file:
//! - `GrpHdr`: `MsgId`, `CreDtTm`, `NbOfTxs`, `CtrlSum`, `InitgPty/Nm`;
//! - one `PmtInf` per distinct requested execution date, in ascending date order, with
//!   `PmtInfId` = first 26 characters of the message id + `-` + `YYYYMMDD`, `PmtMtd` `TRF`,
//!   `NbOfTxs`, `CtrlSum`, service level `SEPA`, `ReqdExctnDt/Dt`, the debtor, the debtor
//!   account, the debtor agent (`BICFI`, or `Othr/Id` `NOTPROVIDED` when no BIC is known),
//!   `ChrgBr` `SLEV`;
//! - inside each, one `CdtTrfTxInf` per payment, in input order: `PmtId/EndToEndId`,
//!   `Amt/InstdAmt Ccy="EUR"`, `CdtrAgt` (only when a BIC is given), `Cdtr/Nm`,
//!   `CdtrAcct/Id/IBAN`, `RmtInf/Ustrd` (omitted when the remittance text is empty after
//!   transliteration).
//!
//! The output is deterministic: the same [`SepaBatch`] always gives the same bytes (UTF-8,
//! two-space indentation, `\n` line ends, final newline).

use std::collections::{BTreeMap, HashSet};
use std::fmt::{self, Write as _};

use chrono::{NaiveDate, NaiveDateTime};

use crate::iban::{Bic, Iban};
use crate::translit::{HolderName, is_sepa_char, to_sepa_latin};

/// The XML namespace of `pain.001.001.09`.
pub const PAIN_001_001_09_NAMESPACE: &str = "urn:iso:std:iso:20022:tech:xsd:pain.001.001.09";

/// Most payments accepted in one file.
pub const SEPA_BATCH_PAYMENTS_MAX: usize = 100_000;

/// Largest amount of one SEPA credit transfer: EUR 999,999,999.99 (EPC rulebook).
pub const SEPA_AMOUNT_EUR_CENTS_MAX: i64 = 99_999_999_999;

/// Longest SEPA reference (`Max35Text`).
pub const SEPA_ID_CHARS_MAX: usize = 35;

/// Longest name written (EPC: 70 characters).
pub const SEPA_NAME_CHARS_MAX: usize = 70;

/// Longest unstructured remittance text (`Max140Text`).
pub const SEPA_REMITTANCE_CHARS_MAX: usize = 140;

/// Characters of the message id kept in a `PmtInfId` (26 + `-` + 8-digit date = 35).
const PMT_INF_ID_PREFIX_CHARS: usize = 26;

/// Why a string is not a SEPA reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SepaIdError {
    /// Empty, or longer than 35 characters.
    #[error("SEPA reference must have 1 to 35 characters, got {chars}")]
    InvalidLength {
        /// Characters found.
        chars: usize,
    },
    /// Contains a character outside the SEPA set (or a space), starts or ends with `/`,
    /// or contains `//`.
    #[error(
        "SEPA reference may only use a-z A-Z 0-9 / - ? : ( ) . , ' + (no spaces), must not start or end with '/' nor contain '//'"
    )]
    InvalidCharacters,
}

impl SepaIdError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidLength { .. } => "invalid_sepa_id_length",
            Self::InvalidCharacters => "invalid_sepa_id_characters",
        }
    }
}

/// A SEPA reference (message id, end-to-end id): 1 to 35 characters of the SEPA Latin set
/// without spaces, not starting or ending with `/` and without `//` (EPC rules for
/// references). Taken verbatim, never transliterated: a reference must come back unchanged
/// in returns and statements.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SepaId(String);

impl SepaId {
    /// Parses a reference.
    ///
    /// # Errors
    /// [`SepaIdError`] naming the rule that fails.
    pub fn parse(input: &str) -> Result<Self, SepaIdError> {
        let chars = input.chars().count();
        if chars == 0 || chars > SEPA_ID_CHARS_MAX {
            return Err(SepaIdError::InvalidLength { chars });
        }
        let ok = input.chars().all(|c| c != ' ' && is_sepa_char(c))
            && !input.starts_with('/')
            && !input.ends_with('/')
            && !input.contains("//");
        if ok {
            Ok(Self(input.to_owned()))
        } else {
            Err(SepaIdError::InvalidCharacters)
        }
    }

    /// The reference.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SepaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One credit transfer to a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SepaPayment {
    /// The day the debtor's bank should execute the transfer; payments are grouped into one
    /// `PmtInf` per date.
    pub requested_execution_date: NaiveDate,
    /// End-to-end reference travelling with the payment to the creditor and back in
    /// returns: the payout id. Unique within the batch.
    pub end_to_end_id: SepaId,
    /// Amount in euro cents, 1 ..= [`SEPA_AMOUNT_EUR_CENTS_MAX`].
    pub amount_eur_cents: i64,
    /// Account holder; written transliterated and cut to 70 characters.
    pub creditor_name: HolderName,
    /// Creditor account; must be in a SEPA country.
    pub creditor_iban: Iban,
    /// Creditor's bank, when known (optional for SEPA transfers).
    pub creditor_bic: Option<Bic>,
    /// Unstructured remittance information shown to the creditor, e.g.
    /// `settle payout 2026-W48`; written transliterated and cut to 140 characters, omitted
    /// when nothing is left.
    pub remittance_info: String,
}

/// A `pain.001.001.09` message: one debtor account paying many creditors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SepaBatch {
    /// Unique message id (`GrpHdr/MsgId`); banks reject a repeated one.
    pub msg_id: SepaId,
    /// Creation time, UTC, written with second precision and without an offset
    /// (`2026-11-30T06:00:00`), the form used in the EPC implementation guidelines.
    pub created_at: NaiveDateTime,
    /// Initiating party (`InitgPty/Nm`), usually the marketplace operator.
    pub initiating_party_name: HolderName,
    /// Debtor (`Dbtr/Nm`): the holder of the paying account.
    pub debtor_name: HolderName,
    /// Paying account; must be in a SEPA country.
    pub debtor_iban: Iban,
    /// Debtor's bank; when `None`, `NOTPROVIDED` is written as the XSD allows.
    pub debtor_bic: Option<Bic>,
    /// The transfers, at least one, at most [`SEPA_BATCH_PAYMENTS_MAX`].
    pub payments: Vec<SepaPayment>,
}

/// Why a batch cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SepaError {
    /// No payments.
    #[error("a SEPA batch needs at least one payment")]
    EmptyBatch,
    /// More than [`SEPA_BATCH_PAYMENTS_MAX`] payments.
    #[error("a SEPA batch holds at most {max} payments, got {count}", max = SEPA_BATCH_PAYMENTS_MAX)]
    TooManyPayments {
        /// Payments given.
        count: usize,
    },
    /// An amount of zero or less.
    #[error("payment {end_to_end_id}: amount must be positive, got {amount_eur_cents} cents")]
    NonPositiveAmount {
        /// The payment's reference.
        end_to_end_id: String,
        /// The amount given.
        amount_eur_cents: i64,
    },
    /// An amount above [`SEPA_AMOUNT_EUR_CENTS_MAX`].
    #[error("payment {end_to_end_id}: amount {amount_eur_cents} cents exceeds the SEPA maximum")]
    AmountTooLarge {
        /// The payment's reference.
        end_to_end_id: String,
        /// The amount given.
        amount_eur_cents: i64,
    },
    /// Two payments with the same end-to-end id.
    #[error("end-to-end id {end_to_end_id} appears more than once")]
    DuplicateEndToEndId {
        /// The repeated reference.
        end_to_end_id: String,
    },
    /// An IBAN of a country outside the SEPA scheme.
    #[error("IBAN country {country} is not reachable by SEPA credit transfer")]
    NonSepaIban {
        /// The IBAN's country code.
        country: String,
    },
}

impl SepaError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::EmptyBatch => "empty_batch",
            Self::TooManyPayments { .. } => "too_many_payments",
            Self::NonPositiveAmount { .. } => "non_positive_amount",
            Self::AmountTooLarge { .. } => "amount_too_large",
            Self::DuplicateEndToEndId { .. } => "duplicate_end_to_end_id",
            Self::NonSepaIban { .. } => "non_sepa_iban",
        }
    }
}

/// Formats integer cents as a decimal with exactly two fraction digits:
/// `1234` → `"12.34"`, `5` → `"0.05"`, `-5` → `"-0.05"`.
pub fn format_cents(amount_cents: i64) -> String {
    let sign = if amount_cents < 0 { "-" } else { "" };
    let abs = amount_cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// Checks `batch` and writes it as a `pain.001.001.09` XML document.
///
/// # Errors
/// [`SepaError`] for an empty or oversized batch, a non-positive or too large amount, a
/// repeated end-to-end id, or an IBAN outside SEPA.
pub fn write_pain001(batch: &SepaBatch) -> Result<String, SepaError> {
    check(batch)?;

    // Bounded by check(): at most 100,000 × 99,999,999,999 < i64::MAX.
    let total_eur_cents: i64 = batch.payments.iter().map(|p| p.amount_eur_cents).sum();

    let mut w = XmlWriter::default();
    w.line(0, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    w.line(
        0,
        &format!(r#"<Document xmlns="{PAIN_001_001_09_NAMESPACE}">"#),
    );
    w.open(1, "CstmrCdtTrfInitn");
    w.open(2, "GrpHdr");
    w.text(3, "MsgId", batch.msg_id.as_str());
    w.text(
        3,
        "CreDtTm",
        &batch.created_at.format("%Y-%m-%dT%H:%M:%S").to_string(),
    );
    w.text(3, "NbOfTxs", &batch.payments.len().to_string());
    w.text(3, "CtrlSum", &format_cents(total_eur_cents));
    w.open(3, "InitgPty");
    w.text(
        4,
        "Nm",
        &batch
            .initiating_party_name
            .to_sepa_latin(SEPA_NAME_CHARS_MAX),
    );
    w.close(3, "InitgPty");
    w.close(2, "GrpHdr");

    write_payment_infos(&mut w, batch);
    w.close(1, "CstmrCdtTrfInitn");
    w.line(0, "</Document>");
    Ok(w.out)
}

/// One `PmtInf` per requested execution date, each with its transfers.
fn write_payment_infos(w: &mut XmlWriter, batch: &SepaBatch) {
    let mut by_date: BTreeMap<NaiveDate, Vec<&SepaPayment>> = BTreeMap::new();
    for p in &batch.payments {
        by_date
            .entry(p.requested_execution_date)
            .or_default()
            .push(p);
    }
    let id_prefix: String = batch
        .msg_id
        .as_str()
        .chars()
        .take(PMT_INF_ID_PREFIX_CHARS)
        .collect();
    for (date, payments) in &by_date {
        let sum_eur_cents: i64 = payments.iter().map(|p| p.amount_eur_cents).sum();
        w.open(2, "PmtInf");
        w.text(
            3,
            "PmtInfId",
            &format!("{id_prefix}-{}", date.format("%Y%m%d")),
        );
        w.text(3, "PmtMtd", "TRF");
        w.text(3, "NbOfTxs", &payments.len().to_string());
        w.text(3, "CtrlSum", &format_cents(sum_eur_cents));
        w.open(3, "PmtTpInf");
        w.open(4, "SvcLvl");
        w.text(5, "Cd", "SEPA");
        w.close(4, "SvcLvl");
        w.close(3, "PmtTpInf");
        w.open(3, "ReqdExctnDt");
        w.text(4, "Dt", &date.format("%Y-%m-%d").to_string());
        w.close(3, "ReqdExctnDt");
        w.open(3, "Dbtr");
        w.text(
            4,
            "Nm",
            &batch.debtor_name.to_sepa_latin(SEPA_NAME_CHARS_MAX),
        );
        w.close(3, "Dbtr");
        w.account(3, "DbtrAcct", &batch.debtor_iban);
        w.agent(3, "DbtrAgt", batch.debtor_bic.as_ref());
        w.text(3, "ChrgBr", "SLEV");
        for p in payments {
            write_transfer(w, p);
        }
        w.close(2, "PmtInf");
    }
}

/// One credit transfer (`CdtTrfTxInf`).
fn write_transfer(w: &mut XmlWriter, p: &SepaPayment) {
    w.open(3, "CdtTrfTxInf");
    w.open(4, "PmtId");
    w.text(5, "EndToEndId", p.end_to_end_id.as_str());
    w.close(4, "PmtId");
    w.open(4, "Amt");
    w.line(
        5,
        &format!(
            r#"<InstdAmt Ccy="EUR">{}</InstdAmt>"#,
            format_cents(p.amount_eur_cents)
        ),
    );
    w.close(4, "Amt");
    if let Some(bic) = &p.creditor_bic {
        w.agent(4, "CdtrAgt", Some(bic));
    }
    w.open(4, "Cdtr");
    w.text(5, "Nm", &p.creditor_name.to_sepa_latin(SEPA_NAME_CHARS_MAX));
    w.close(4, "Cdtr");
    w.account(4, "CdtrAcct", &p.creditor_iban);
    let remittance = to_sepa_latin(&p.remittance_info, SEPA_REMITTANCE_CHARS_MAX);
    if !remittance.is_empty() {
        w.open(4, "RmtInf");
        w.text(5, "Ustrd", &remittance);
        w.close(4, "RmtInf");
    }
    w.close(3, "CdtTrfTxInf");
}

/// The rules the types do not already guarantee.
fn check(batch: &SepaBatch) -> Result<(), SepaError> {
    let count = batch.payments.len();
    if count == 0 {
        return Err(SepaError::EmptyBatch);
    }
    if count > SEPA_BATCH_PAYMENTS_MAX {
        return Err(SepaError::TooManyPayments { count });
    }
    check_sepa_iban(&batch.debtor_iban)?;
    let mut seen = HashSet::with_capacity(count);
    for p in &batch.payments {
        let id = || p.end_to_end_id.as_str().to_owned();
        if p.amount_eur_cents <= 0 {
            return Err(SepaError::NonPositiveAmount {
                end_to_end_id: id(),
                amount_eur_cents: p.amount_eur_cents,
            });
        }
        if p.amount_eur_cents > SEPA_AMOUNT_EUR_CENTS_MAX {
            return Err(SepaError::AmountTooLarge {
                end_to_end_id: id(),
                amount_eur_cents: p.amount_eur_cents,
            });
        }
        check_sepa_iban(&p.creditor_iban)?;
        if !seen.insert(p.end_to_end_id.as_str()) {
            return Err(SepaError::DuplicateEndToEndId {
                end_to_end_id: id(),
            });
        }
    }
    Ok(())
}

fn check_sepa_iban(iban: &Iban) -> Result<(), SepaError> {
    if iban.is_sepa() {
        Ok(())
    } else {
        Err(SepaError::NonSepaIban {
            country: iban.country().to_owned(),
        })
    }
}

/// A minimal indenting XML text builder; every text goes through [`escape`].
#[derive(Default)]
pub(crate) struct XmlWriter {
    pub(crate) out: String,
}

impl XmlWriter {
    pub(crate) fn line(&mut self, depth: usize, s: &str) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    pub(crate) fn open(&mut self, depth: usize, tag: &str) {
        self.line(depth, &format!("<{tag}>"));
    }

    pub(crate) fn close(&mut self, depth: usize, tag: &str) {
        self.line(depth, &format!("</{tag}>"));
    }

    pub(crate) fn text(&mut self, depth: usize, tag: &str, value: &str) {
        let mut s = String::with_capacity(value.len() + 2 * tag.len() + 5);
        // Writing into a String cannot fail.
        let _ = write!(s, "<{tag}>{}</{tag}>", escape(value));
        self.line(depth, &s);
    }

    pub(crate) fn account(&mut self, depth: usize, tag: &str, iban: &Iban) {
        self.open(depth, tag);
        self.open(depth + 1, "Id");
        self.text(depth + 2, "IBAN", iban.as_str());
        self.close(depth + 1, "Id");
        self.close(depth, tag);
    }

    pub(crate) fn agent(&mut self, depth: usize, tag: &str, bic: Option<&Bic>) {
        self.open(depth, tag);
        self.open(depth + 1, "FinInstnId");
        match bic {
            Some(bic) => self.text(depth + 2, "BICFI", bic.as_str()),
            None => {
                self.open(depth + 2, "Othr");
                self.text(depth + 3, "Id", "NOTPROVIDED");
                self.close(depth + 2, "Othr");
            }
        }
        self.close(depth + 1, "FinInstnId");
        self.close(depth, tag);
    }
}

/// Escapes the five XML special characters.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cents() {
        assert_eq!(format_cents(1234), "12.34");
        assert_eq!(format_cents(5), "0.05");
        assert_eq!(format_cents(100), "1.00");
        assert_eq!(format_cents(0), "0.00");
        assert_eq!(format_cents(-5), "-0.05");
        assert_eq!(format_cents(i64::MIN), "-92233720368547758.08");
    }

    #[test]
    fn escapes() {
        assert_eq!(escape(r#"a&b<c>d"e'f"#), "a&amp;b&lt;c&gt;d&quot;e&apos;f");
    }

    #[test]
    fn ids() {
        assert!(SepaId::parse("PO-2026-000001").is_ok());
        assert!(SepaId::parse("a/b").is_ok());
        assert!(SepaId::parse("/ab").is_err());
        assert!(SepaId::parse("ab/").is_err());
        assert!(SepaId::parse("a//b").is_err());
        assert!(SepaId::parse("a b").is_err());
        assert!(SepaId::parse(&"x".repeat(35)).is_ok());
        assert!(SepaId::parse(&"x".repeat(36)).is_err());
    }
}
