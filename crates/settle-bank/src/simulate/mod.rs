//! A local bank that answers the files the engine sends, for the demo and the tests.
//!
//! Given a `pain.001` file it writes a `pain.002.001.10` status report (`ACCP` for each
//! accepted transaction, `RJCT` with a reason code for each rejected one, group and block
//! statuses `ACCP`, `PART` or `RJCT`) and a `camt.054.001.08` notification (one booked
//! `DBIT` per accepted payment, or one batch-booked `DBIT` per payment information block
//! with `NtryDtls/Btch`, and a booked `CRDT` with `RtrInf` for each returned payment).
//! Given a NACHA credit file it writes a NACHA file of returns (addenda `99`) and
//! notifications of change (addenda `98`, in `COR` batches). Rejections exist only for
//! SEPA (a NACHA file has no per-entry status report); notifications of change only for
//! NACHA.
//!
//! Which payments fail is decided per payment from the seed and the payment's key (its
//! end-to-end id, or its trace number): splitmix64 over the seed mixed with the key's
//! FNV-1a hash gives a roll in 0..1000 compared with the shares in per mille, and the
//! reason code is drawn from the configured list with the next splitmix64 output. No
//! clock and no other randomness: the same input and [`SimulationConfig`] give the same
//! bytes. Answer ids are derived from the original message id and the configuration.

use std::collections::BTreeSet;

use chrono::{NaiveDate, NaiveDateTime};
use sha2::{Digest, Sha256};

use crate::ach_answers::{ChangeCode, TraceNumber};
use crate::answers::{AnswerError, ReasonCode};
use crate::camt::CAMT_054_001_08_NAMESPACE;
use crate::nacha::{NACHA_BLOCKING_FACTOR, NACHA_RECORD_CHARS, pad};
use crate::pain002::PAIN_002_001_10_NAMESPACE;
use crate::sent::{
    PAIN_001_MESSAGE, SentNachaBatch, SentNachaEntry, SentNachaFile, SentPaymentInfo, SentSepaFile,
    SentSepaPayment, read_sent_nacha, read_sent_pain001,
};
use crate::sepa::{XmlWriter, format_cents};
use crate::xml_read;

/// How the simulated bank books accepted SEPA payments on the debtor's account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Booking {
    /// One debit entry per payment, with its end-to-end id.
    PerPayment,
    /// One debit entry per payment information block (`BtchBookg`), with `Btch`
    /// (`PmtInfId`, `NbOfTxs`, `TtlAmt`) and no transaction details.
    Batch,
}

/// What the simulated bank does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulationConfig {
    /// Drives which payments fail and with which code.
    pub seed: u64,
    /// SEPA payments rejected in the status report, per mille (0..=1000).
    pub rejections_per_mille: u16,
    /// Payments returned after booking, per mille; with the rejections at most 1000.
    pub returns_per_mille: u16,
    /// NACHA entries answered with a notification of change, per mille; with the returns
    /// at most 1000.
    pub changes_per_mille: u16,
    /// Reason codes of SEPA rejections (`StsRsnInf/Rsn/Cd`).
    pub rejection_codes: Vec<ReasonCode>,
    /// Reason codes of SEPA returns (`RtrInf/Rsn/Cd`).
    pub sepa_return_codes: Vec<ReasonCode>,
    /// NACHA return reason codes (`R` and two digits).
    pub ach_return_codes: Vec<ReasonCode>,
    /// NACHA change codes; supported: `C01`, `C02`, `C03`, `C05`, `C06`.
    pub ach_change_codes: Vec<ChangeCode>,
    /// Booking and value date of every entry.
    pub booking_date: NaiveDate,
    /// Creation time written into the answers.
    pub created_at: NaiveDateTime,
    /// How accepted SEPA payments are booked.
    pub booking: Booking,
}

impl SimulationConfig {
    /// A bank that accepts and books everything, one entry per payment, with the default
    /// codes: rejections `AC01`, `AC04`, `MS03`; SEPA returns `AC04`, `AC01`, `MD07`; ACH
    /// returns `R01`, `R03`; changes `C01`.
    pub fn new(seed: u64, booking_date: NaiveDate, created_at: NaiveDateTime) -> Self {
        let codes = |list: &[&str]| list.iter().filter_map(|c| ReasonCode::parse(c)).collect();
        Self {
            seed,
            rejections_per_mille: 0,
            returns_per_mille: 0,
            changes_per_mille: 0,
            rejection_codes: codes(&["AC01", "AC04", "MS03"]),
            sepa_return_codes: codes(&["AC04", "AC01", "MD07"]),
            ach_return_codes: codes(&["R01", "R03"]),
            ach_change_codes: ChangeCode::parse("C01").into_iter().collect(),
            booking_date,
            created_at,
            booking: Booking::PerPayment,
        }
    }
}

/// Change codes whose corrected data the simulator can write.
const SUPPORTED_CHANGES: &[&str] = &["C01", "C02", "C03", "C05", "C06"];

/// Why the simulated bank cannot answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimulateError {
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] AnswerError),
    /// Neither a `pain.001` nor a NACHA file.
    #[error("not a payment file (pain.001 or NACHA)")]
    NotAPaymentFile,
    /// A share above 1000 per mille, or shares adding up to more.
    #[error("{what}: shares must add up to at most 1000 per mille, got {per_mille}")]
    ShareOutOfRange {
        /// Which shares.
        what: &'static str,
        /// Their sum.
        per_mille: u32,
    },
    /// A share above zero with no code to use.
    #[error("{what}: a share above zero needs at least one code")]
    NoCodes {
        /// Which codes.
        what: &'static str,
    },
    /// A NACHA return code that is not `R` and two digits.
    #[error("{code} is not a NACHA return code")]
    InvalidAchReturnCode {
        /// The code.
        code: String,
    },
    /// A change code whose corrected data the simulator cannot write.
    #[error("change code {code} is not supported by the simulator")]
    UnsupportedChangeCode {
        /// The code.
        code: String,
    },
    /// A payment information block with more than one currency (cannot be batch-booked).
    #[error("payment information {pmt_inf_id} mixes currencies")]
    MixedCurrencies {
        /// The block.
        pmt_inf_id: String,
    },
    /// A total that does not fit in 63 bits of cents.
    #[error("the total of {pmt_inf_id} is too large")]
    TotalTooLarge {
        /// The block.
        pmt_inf_id: String,
    },
}

impl SimulateError {
    /// Stable machine-readable code (for [`SimulateError::Read`], the reader's code).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Read(e) => e.code(),
            Self::NotAPaymentFile => "not_a_payment_file",
            Self::ShareOutOfRange { .. } => "share_out_of_range",
            Self::NoCodes { .. } => "no_codes",
            Self::InvalidAchReturnCode { .. } => "invalid_ach_return_code",
            Self::UnsupportedChangeCode { .. } => "unsupported_change_code",
            Self::MixedCurrencies { .. } => "mixed_currencies",
            Self::TotalTooLarge { .. } => "total_too_large",
        }
    }
}

/// The simulated bank's answer files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimulatedAnswers {
    /// For a `pain.001`.
    Sepa {
        /// `pain.002.001.10`.
        status_report: String,
        /// `camt.054.001.08`.
        notification: String,
    },
    /// For a NACHA credit file: returns and notifications of change (a file without
    /// batches when there are none).
    Nacha {
        /// The NACHA file.
        returns: String,
    },
}

/// Answers the engine's file `sent` (a `pain.001` or a NACHA credit file, found by its
/// first characters; a UTF-8 byte order mark is skipped).
///
/// # Errors
/// [`SimulateError`]: an unreadable file, a file of another kind, a bad configuration.
pub fn simulate(sent: &[u8], config: &SimulationConfig) -> Result<SimulatedAnswers, SimulateError> {
    let sent = sent.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(sent);
    let start = sent
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(sent.len());
    if sent[start..].starts_with(b"<") {
        let xml = crate::answers::utf8(sent)?;
        if xml_read::sniff(xml, &[PAIN_001_MESSAGE])?.is_err() {
            return Err(SimulateError::NotAPaymentFile);
        }
        let (status_report, notification) = simulate_sepa(&read_sent_pain001(xml)?, config)?;
        Ok(SimulatedAnswers::Sepa {
            status_report,
            notification,
        })
    } else if sent[start..].starts_with(b"101") {
        let file = read_sent_nacha(&String::from_utf8_lossy(sent))?;
        Ok(SimulatedAnswers::Nacha {
            returns: simulate_nacha(&file, config)?,
        })
    } else {
        Err(SimulateError::NotAPaymentFile)
    }
}

/// What happens to one payment.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Settled,
    Rejected(ReasonCode),
    Returned(ReasonCode),
    Changed(ChangeCode),
}

/// splitmix64 (Steele, Lea, Flood 2014): one step of the generator.
fn splitmix64(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a, 64 bits.
fn fnv1a(key: &str) -> u64 {
    key.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// The roll in 0..1000 for `key` and the draw for its code.
fn roll(seed: u64, key: &str) -> (u32, u64) {
    let h = splitmix64(seed ^ fnv1a(key));
    ((h % 1000) as u32, splitmix64(h))
}

fn pick<T: Clone>(codes: &[T], draw: u64) -> Option<T> {
    let len = u64::try_from(codes.len()).ok().filter(|l| *l > 0)?;
    usize::try_from(draw % len)
        .ok()
        .and_then(|i| codes.get(i))
        .cloned()
}

fn check_shares(what: &'static str, a: u16, b: u16) -> Result<(), SimulateError> {
    let per_mille = u32::from(a) + u32::from(b);
    if per_mille > 1000 {
        return Err(SimulateError::ShareOutOfRange { what, per_mille });
    }
    Ok(())
}

fn check_codes<T>(what: &'static str, share: u16, codes: &[T]) -> Result<(), SimulateError> {
    if share > 0 && codes.is_empty() {
        return Err(SimulateError::NoCodes { what });
    }
    Ok(())
}

/// The first 16 hex digits of the SHA-256 of the parts.
fn digest16(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    hex::encode_upper(&h.finalize()[..8])
}

impl SimulationConfig {
    /// Identifies the configuration inside answer ids.
    fn fingerprint(&self) -> String {
        format!(
            "{}/{}/{}/{}/{:?}/{:?}/{:?}/{:?}/{}/{}/{:?}",
            self.seed,
            self.rejections_per_mille,
            self.returns_per_mille,
            self.changes_per_mille,
            self.rejection_codes,
            self.sepa_return_codes,
            self.ach_return_codes,
            self.ach_change_codes,
            self.booking_date,
            self.created_at,
            self.booking,
        )
    }

    fn sepa_outcome(&self, end_to_end_id: &str) -> Outcome {
        let (roll, draw) = roll(self.seed, end_to_end_id);
        let rejected = u32::from(self.rejections_per_mille);
        let returned = rejected + u32::from(self.returns_per_mille);
        let outcome = if roll < rejected {
            pick(&self.rejection_codes, draw).map(Outcome::Rejected)
        } else if roll < returned {
            pick(&self.sepa_return_codes, draw).map(Outcome::Returned)
        } else {
            None
        };
        outcome.unwrap_or(Outcome::Settled)
    }

    fn ach_outcome(&self, trace: &TraceNumber) -> Outcome {
        let (roll, draw) = roll(self.seed, trace.as_str());
        let returned = u32::from(self.returns_per_mille);
        let changed = returned + u32::from(self.changes_per_mille);
        let outcome = if roll < returned {
            pick(&self.ach_return_codes, draw).map(Outcome::Returned)
        } else if roll < changed {
            pick(&self.ach_change_codes, draw).map(Outcome::Changed)
        } else {
            None
        };
        outcome.unwrap_or(Outcome::Settled)
    }

    fn check_sepa(&self) -> Result<(), SimulateError> {
        check_shares(
            "rejections and returns",
            self.rejections_per_mille,
            self.returns_per_mille,
        )?;
        check_codes(
            "rejection codes",
            self.rejections_per_mille,
            &self.rejection_codes,
        )?;
        check_codes(
            "SEPA return codes",
            self.returns_per_mille,
            &self.sepa_return_codes,
        )
    }

    fn check_ach(&self) -> Result<(), SimulateError> {
        check_shares(
            "returns and changes",
            self.returns_per_mille,
            self.changes_per_mille,
        )?;
        check_codes(
            "ACH return codes",
            self.returns_per_mille,
            &self.ach_return_codes,
        )?;
        check_codes(
            "ACH change codes",
            self.changes_per_mille,
            &self.ach_change_codes,
        )?;
        for c in &self.ach_return_codes {
            let s = c.as_str();
            if !(s.len() == 3 && s.starts_with('R') && s[1..].bytes().all(|b| b.is_ascii_digit())) {
                return Err(SimulateError::InvalidAchReturnCode { code: s.to_owned() });
            }
        }
        match self
            .ach_change_codes
            .iter()
            .find(|c| !SUPPORTED_CHANGES.contains(&c.as_str()))
        {
            Some(c) => Err(SimulateError::UnsupportedChangeCode {
                code: c.as_str().to_owned(),
            }),
            None => Ok(()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// SEPA: pain.002 and camt.054.

/// Payments of a block with their outcomes.
type Decided<'a> = Vec<(&'a SentSepaPayment, Outcome)>;

mod nacha;
mod sepa;

pub use nacha::simulate_nacha;
pub use sepa::simulate_sepa;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prng_is_fixed() {
        // Reference values of splitmix64 seeded with 0 (Vigna's splitmix64.c).
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(fnv1a(""), 0xCBF2_9CE4_8422_2325);
        assert_eq!(fnv1a("a"), 0xAF63_DC4C_8601_EC8C);
    }
}
