//! Writer for NACHA ACH files carrying payout credits (CCD to businesses, PPD to
//! individuals).
//!
//! File layout:
//! - file header (`1`);
//! - one batch per Standard Entry Class present, CCD (businesses) first, then PPD
//!   (individuals), numbered from 1; each is a batch header (`5`, service class 220,
//!   credits only), its entry details (`6`) in input order, and a batch control (`8`);
//! - file control (`9`);
//! - filler records of 94 `9`s up to a multiple of 10 records (blocking factor 10).
//!
//! Every record is exactly 94 ASCII characters and is followed by a line feed (`\n`),
//! including the last one. Transaction codes: 22 (checking credit), 32 (savings credit).
//! Trace numbers: the first 8 digits of the ODFI routing number followed by a 7-digit
//! sequence number starting at `0000001` and running through the whole file in output
//! order. The entry hash is the sum of the receiving banks' 8-digit DFI identifications,
//! keeping the last 10 digits. Company descriptive date, settlement date (filled in by the
//! ACH operator), discretionary data and reference code are left blank; no addenda.
//!
//! The output is deterministic: the same [`NachaFile`] always gives the same bytes.

use std::fmt;

use chrono::{NaiveDate, NaiveDateTime};
use sha2::{Digest, Sha256};

use crate::aba::{AbaRouting, AchAccountNumber, AchAccountType, AchEntity};
use crate::translit::{HolderName, to_nacha_ascii};

/// Most entries in one file (the trace sequence and batch counts must fit their fields).
pub const NACHA_FILE_ENTRIES_MAX: usize = 999_999;

/// Largest amount of one entry: the 10-digit amount field, $99,999,999.99.
pub const NACHA_AMOUNT_USD_CENTS_MAX: i64 = 9_999_999_999;

/// Largest file total: the 12-digit total field, $9,999,999,999.99.
pub const NACHA_TOTAL_USD_CENTS_MAX: i64 = 999_999_999_999;

/// Length of every record.
pub const NACHA_RECORD_CHARS: usize = 94;

/// Records per block.
pub const NACHA_BLOCKING_FACTOR: usize = 10;

/// Longest individual identification number (entry field 40–54).
pub const ACH_INDIVIDUAL_ID_CHARS_MAX: usize = 15;

/// Width of the receiver name field (entry field 55–76); longer names are cut.
pub const ACH_INDIVIDUAL_NAME_CHARS: usize = 22;

/// Why a string is not an ACH individual identification number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AchIndividualIdError {
    /// Empty, longer than 15 characters, or not letters, digits and hyphens.
    #[error("ACH individual id must be 1 to 15 letters, digits or hyphens")]
    Invalid,
}

impl AchIndividualIdError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid => "invalid_individual_id",
        }
    }
}

/// The identification number of an entry (PPD "Individual Identification Number", CCD
/// "Identification Number"): 1 to 15 ASCII letters, digits or hyphens, stored upper case.
/// It travels back with returns, so it identifies the payout.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AchIndividualId(String);

impl AchIndividualId {
    /// Parses an id; letters are upper-cased.
    ///
    /// # Errors
    /// [`AchIndividualIdError::Invalid`].
    pub fn parse(input: &str) -> Result<Self, AchIndividualIdError> {
        let ok = !input.is_empty()
            && input.len() <= ACH_INDIVIDUAL_ID_CHARS_MAX
            && input.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if ok {
            Ok(Self(input.to_ascii_uppercase()))
        } else {
            Err(AchIndividualIdError::Invalid)
        }
    }

    /// The id for a payout id: the payout id itself (upper-cased) when it is a valid id;
    /// otherwise (too long, e.g. a UUID, or other characters) the first 15 hex digits,
    /// upper case, of the SHA-256 of the payout id's UTF-8 bytes. The shortening is
    /// deterministic, so a returned entry is matched by recomputing it for the candidate
    /// payouts (or by its trace number).
    pub fn from_payout_id(payout_id: &str) -> Self {
        match Self::parse(payout_id) {
            Ok(id) => id,
            Err(_) => {
                let digest = hex::encode_upper(Sha256::digest(payout_id.as_bytes()));
                Self(digest.chars().take(ACH_INDIVIDUAL_ID_CHARS_MAX).collect())
            }
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AchIndividualId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One credit to a US bank account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NachaEntry {
    /// Receiving bank (RDFI).
    pub routing: AbaRouting,
    /// Receiver's account at the RDFI.
    pub account: AchAccountNumber,
    /// Checking (code 22) or savings (code 32).
    pub account_type: AchAccountType,
    /// Business (CCD batch) or individual (PPD batch).
    pub entity: AchEntity,
    /// Amount in US cents, 1 ..= [`NACHA_AMOUNT_USD_CENTS_MAX`].
    pub amount_usd_cents: i64,
    /// Identifies the payout (see [`AchIndividualId::from_payout_id`]).
    pub individual_id: AchIndividualId,
    /// Receiver (person or company); written as upper-case ASCII, cut to 22 characters.
    pub individual_name: HolderName,
}

/// A NACHA file: one originator (company) paying many receivers through one ODFI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NachaFile {
    /// The bank or ACH operator the file is sent to (file header positions 4–13, written
    /// as a space followed by the nine digits).
    pub immediate_destination: AbaRouting,
    /// Sender of the file, exactly 10 characters as agreed with the bank: usually `1`
    /// followed by the company's 9-digit tax id (EIN), or a space followed by a 9-digit
    /// routing number. Accepted: 10 digits/upper-case letters, or a space then 9 digits.
    pub immediate_origin: String,
    /// Name of the destination bank, at most 23 characters after transliteration (may be
    /// empty).
    pub destination_name: String,
    /// Name of the origin, at most 23 characters after transliteration (may be empty).
    pub origin_name: String,
    /// When the file was created (written as `YYMMDD` and `HHMM`).
    pub file_creation: NaiveDateTime,
    /// Distinguishes files created on the same day: `A`–`Z` or `0`–`9`.
    pub file_id_modifier: char,
    /// Originator name shown to receivers, 1 to 16 characters after transliteration.
    pub company_name: String,
    /// Originator identification assigned with the bank, 1 to 10 digits/upper-case letters
    /// (often `1` + EIN).
    pub company_id: String,
    /// Shown on the receiver's statement, 1 to 10 characters after transliteration, e.g.
    /// `PAYOUT`.
    pub company_entry_description: String,
    /// The date the credits should settle (`YYMMDD`).
    pub effective_entry_date: NaiveDate,
    /// The originating bank (ODFI); its first 8 digits start every trace number.
    pub odfi_routing: AbaRouting,
    /// The credits, at least one, at most [`NACHA_FILE_ENTRIES_MAX`].
    pub entries: Vec<NachaEntry>,
}

/// Why a NACHA file cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NachaError {
    /// No entries.
    #[error("a NACHA file needs at least one entry")]
    EmptyFile,
    /// More than [`NACHA_FILE_ENTRIES_MAX`] entries.
    #[error("a NACHA file holds at most {max} entries, got {count}", max = NACHA_FILE_ENTRIES_MAX)]
    TooManyEntries {
        /// Entries given.
        count: usize,
    },
    /// An amount of zero or less.
    #[error("entry {index}: amount must be positive, got {amount_usd_cents} cents")]
    NonPositiveAmount {
        /// Position in `entries`.
        index: usize,
        /// The amount given.
        amount_usd_cents: i64,
    },
    /// An amount that does not fit the 10-digit field.
    #[error("entry {index}: amount {amount_usd_cents} cents exceeds $99,999,999.99")]
    AmountTooLarge {
        /// Position in `entries`.
        index: usize,
        /// The amount given.
        amount_usd_cents: i64,
    },
    /// The file total does not fit the 12-digit field.
    #[error("file total exceeds $9,999,999,999.99")]
    TotalTooLarge,
    /// `immediate_origin` is not 10 characters of the accepted form.
    #[error("immediate origin must be 10 digits/upper-case letters, or a space and 9 digits")]
    InvalidImmediateOrigin,
    /// `file_id_modifier` is not `A`–`Z` or `0`–`9`.
    #[error("file id modifier must be A-Z or 0-9")]
    InvalidFileIdModifier,
    /// `destination_name` is longer than 23 characters after transliteration.
    #[error("destination name must have at most 23 characters")]
    InvalidDestinationName,
    /// `origin_name` is longer than 23 characters after transliteration.
    #[error("origin name must have at most 23 characters")]
    InvalidOriginName,
    /// `company_name` is empty or longer than 16 characters after transliteration.
    #[error("company name must have 1 to 16 characters")]
    InvalidCompanyName,
    /// `company_id` is not 1 to 10 digits/upper-case letters.
    #[error("company id must be 1 to 10 digits or upper-case letters")]
    InvalidCompanyId,
    /// `company_entry_description` is empty or longer than 10 characters after
    /// transliteration.
    #[error("company entry description must have 1 to 10 characters")]
    InvalidCompanyEntryDescription,
}

impl NachaError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::EmptyFile => "empty_file",
            Self::TooManyEntries { .. } => "too_many_entries",
            Self::NonPositiveAmount { .. } => "non_positive_amount",
            Self::AmountTooLarge { .. } => "amount_too_large",
            Self::TotalTooLarge => "total_too_large",
            Self::InvalidImmediateOrigin => "invalid_immediate_origin",
            Self::InvalidFileIdModifier => "invalid_file_id_modifier",
            Self::InvalidDestinationName => "invalid_destination_name",
            Self::InvalidOriginName => "invalid_origin_name",
            Self::InvalidCompanyName => "invalid_company_name",
            Self::InvalidCompanyId => "invalid_company_id",
            Self::InvalidCompanyEntryDescription => "invalid_company_entry_description",
        }
    }
}

/// Header texts after checking and transliteration.
struct Header {
    destination_name: String,
    origin_name: String,
    company_name: String,
    company_entry_description: String,
}

/// Checks `file` and writes it in NACHA format.
///
/// # Errors
/// [`NachaError`] for an empty or oversized file, a bad amount or total, or a header
/// field that does not fit its format.
pub fn write_nacha(file: &NachaFile) -> Result<String, NachaError> {
    let header = check(file)?;
    let odfi = file.odfi_routing.dfi_identification();
    let mut records: Vec<String> = Vec::with_capacity(file.entries.len() + 8);

    records.push(format!(
        "101 {dest}{origin}{date}{time}{modifier}094101{dest_name}{origin_name}{reference}",
        dest = file.immediate_destination.as_str(),
        origin = file.immediate_origin,
        date = file.file_creation.format("%y%m%d"),
        time = file.file_creation.format("%H%M"),
        modifier = file.file_id_modifier,
        dest_name = pad(&header.destination_name, 23),
        origin_name = pad(&header.origin_name, 23),
        reference = pad("", 8),
    ));

    let mut trace_seq: u64 = 0;
    let mut batch_count: u64 = 0;
    let mut file_hash: u64 = 0;
    let mut file_credit_usd_cents: i64 = 0;
    for entity in [AchEntity::Business, AchEntity::Individual] {
        let entries: Vec<&NachaEntry> =
            file.entries.iter().filter(|e| e.entity == entity).collect();
        if entries.is_empty() {
            continue;
        }
        batch_count += 1;
        records.push(format!(
            "5220{name}{discretionary}{company_id}{sec}{description}{descriptive_date}{effective}{settlement}1{odfi}{batch:07}",
            name = pad(&header.company_name, 16),
            discretionary = pad("", 20),
            company_id = pad(&file.company_id, 10),
            sec = entity.sec_code(),
            description = pad(&header.company_entry_description, 10),
            descriptive_date = pad("", 6),
            effective = file.effective_entry_date.format("%y%m%d"),
            settlement = pad("", 3),
            batch = batch_count,
        ));
        let (hash, credit_usd_cents) = write_entries(&mut records, &entries, odfi, &mut trace_seq);
        file_hash += hash;
        file_credit_usd_cents += credit_usd_cents;
        records.push(format!(
            "8220{count:06}{hash:010}{debit:012}{credit:012}{company_id}{mac}{reserved}{odfi}{batch:07}",
            count = entries.len(),
            hash = hash % 10_000_000_000,
            debit = 0,
            credit = credit_usd_cents,
            company_id = pad(&file.company_id, 10),
            mac = pad("", 19),
            reserved = pad("", 6),
            batch = batch_count,
        ));
    }

    // Records so far plus the file control, rounded up to whole blocks.
    let blocks = (records.len() + 1).div_ceil(NACHA_BLOCKING_FACTOR);
    records.push(format!(
        "9{batches:06}{blocks:06}{entries:08}{hash:010}{debit:012}{credit:012}{reserved}",
        batches = batch_count,
        entries = file.entries.len(),
        hash = file_hash % 10_000_000_000,
        debit = 0,
        credit = file_credit_usd_cents,
        reserved = pad("", 39),
    ));
    while !records.len().is_multiple_of(NACHA_BLOCKING_FACTOR) {
        records.push("9".repeat(NACHA_RECORD_CHARS));
    }

    let mut out = String::with_capacity(records.len() * (NACHA_RECORD_CHARS + 1));
    for r in &records {
        out.push_str(r);
        out.push('\n');
    }
    Ok(out)
}

/// A batch's entry detail records (`6`), traced on from `trace_seq`: their entry hash and
/// credit total.
fn write_entries(
    records: &mut Vec<String>,
    entries: &[&NachaEntry],
    odfi: &str,
    trace_seq: &mut u64,
) -> (u64, i64) {
    let mut hash: u64 = 0;
    let mut credit_usd_cents: i64 = 0;
    for e in entries {
        *trace_seq += 1;
        hash += routing_prefix_value(&e.routing);
        credit_usd_cents += e.amount_usd_cents;
        records.push(format!(
            "6{code}{rdfi}{check}{account}{amount:010}{id}{name}  0{odfi}{trace:07}",
            code = e.account_type.credit_transaction_code(),
            rdfi = e.routing.dfi_identification(),
            check = e.routing.check_digit(),
            account = pad(e.account.as_str(), 17),
            amount = e.amount_usd_cents,
            id = pad(e.individual_id.as_str(), 15),
            name = pad(
                &to_nacha_ascii(e.individual_name.as_str(), ACH_INDIVIDUAL_NAME_CHARS),
                ACH_INDIVIDUAL_NAME_CHARS
            ),
            trace = *trace_seq,
        ));
    }
    (hash, credit_usd_cents)
}

/// The 8-digit DFI identification as a number (always parseable: a checked routing
/// number is nine ASCII digits).
fn routing_prefix_value(routing: &AbaRouting) -> u64 {
    routing.dfi_identification().parse().unwrap_or(0)
}

/// Left-justifies `s` in a field of `width` characters (callers ensure it fits; anything
/// longer is cut so a record never grows).
pub(crate) fn pad(s: &str, width: usize) -> String {
    let mut out: String = s.chars().take(width).collect();
    let len = out.chars().count();
    out.extend(std::iter::repeat_n(' ', width - len));
    out
}

/// Checks what the types do not guarantee and renders the header texts.
fn check(file: &NachaFile) -> Result<Header, NachaError> {
    let count = file.entries.len();
    if count == 0 {
        return Err(NachaError::EmptyFile);
    }
    if count > NACHA_FILE_ENTRIES_MAX {
        return Err(NachaError::TooManyEntries { count });
    }
    let mut total_usd_cents: i64 = 0;
    for (index, e) in file.entries.iter().enumerate() {
        if e.amount_usd_cents <= 0 {
            return Err(NachaError::NonPositiveAmount {
                index,
                amount_usd_cents: e.amount_usd_cents,
            });
        }
        if e.amount_usd_cents > NACHA_AMOUNT_USD_CENTS_MAX {
            return Err(NachaError::AmountTooLarge {
                index,
                amount_usd_cents: e.amount_usd_cents,
            });
        }
        total_usd_cents += e.amount_usd_cents;
        if total_usd_cents > NACHA_TOTAL_USD_CENTS_MAX {
            return Err(NachaError::TotalTooLarge);
        }
    }

    let origin = file.immediate_origin.as_bytes();
    let origin_ok = origin.len() == 10
        && (origin
            .iter()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
            || (origin[0] == b' ' && origin[1..].iter().all(u8::is_ascii_digit)));
    if !origin_ok {
        return Err(NachaError::InvalidImmediateOrigin);
    }
    if !(file.file_id_modifier.is_ascii_uppercase() || file.file_id_modifier.is_ascii_digit()) {
        return Err(NachaError::InvalidFileIdModifier);
    }
    let id = file.company_id.as_bytes();
    if id.is_empty()
        || id.len() > 10
        || !id
            .iter()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
    {
        return Err(NachaError::InvalidCompanyId);
    }

    let text = |s: &str, min: usize, max: usize, err: NachaError| {
        let t = to_nacha_ascii(s, usize::MAX);
        if (min..=max).contains(&t.chars().count()) {
            Ok(t)
        } else {
            Err(err)
        }
    };
    Ok(Header {
        destination_name: text(
            &file.destination_name,
            0,
            23,
            NachaError::InvalidDestinationName,
        )?,
        origin_name: text(&file.origin_name, 0, 23, NachaError::InvalidOriginName)?,
        company_name: text(&file.company_name, 1, 16, NachaError::InvalidCompanyName)?,
        company_entry_description: text(
            &file.company_entry_description,
            1,
            10,
            NachaError::InvalidCompanyEntryDescription,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads() {
        assert_eq!(pad("ab", 4), "ab  ");
        assert_eq!(pad("abcdef", 4), "abcd");
        assert_eq!(pad("", 0), "");
    }

    #[test]
    fn individual_ids() {
        assert_eq!(
            AchIndividualId::parse("po-12ab").unwrap().as_str(),
            "PO-12AB"
        );
        assert!(AchIndividualId::parse("").is_err());
        assert!(AchIndividualId::parse("po_1").is_err());
        let long = AchIndividualId::from_payout_id("0196f1c2-7a3b-7c4d-8e5f-a1b2c3d4e5f6");
        assert_eq!(long.as_str().len(), 15);
        assert!(long.as_str().chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            long,
            AchIndividualId::from_payout_id("0196f1c2-7a3b-7c4d-8e5f-a1b2c3d4e5f6")
        );
        assert_eq!(AchIndividualId::from_payout_id("po-7").as_str(), "PO-7");
    }
}
