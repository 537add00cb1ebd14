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

/// Answers a `pain.001`: `(pain.002, camt.054)`.
///
/// # Errors
/// [`SimulateError`] for a bad configuration, a block mixing currencies or a total that
/// does not fit.
pub fn simulate_sepa(
    file: &SentSepaFile,
    config: &SimulationConfig,
) -> Result<(String, String), SimulateError> {
    config.check_sepa()?;
    let decided: Vec<(&SentPaymentInfo, Decided<'_>)> = file
        .payment_infos
        .iter()
        .map(|b| {
            let d = b
                .payments
                .iter()
                .map(|p| (p, config.sepa_outcome(&p.end_to_end_id)))
                .collect();
            (b, d)
        })
        .collect();
    let id = digest16(&[&file.msg_id, &config.fingerprint()]);
    let status = write_pain002(file, &decided, config, &id)?;
    let notification = write_camt054(file, &decided, config, &id)?;
    Ok((status, notification))
}

fn sum_cents<'a>(
    pmt_inf_id: &str,
    mut payments: impl Iterator<Item = &'a SentSepaPayment>,
) -> Result<i64, SimulateError> {
    payments
        .try_fold(0i64, |s, p| s.checked_add(p.amount.cents))
        .ok_or_else(|| SimulateError::TotalTooLarge {
            pmt_inf_id: pmt_inf_id.to_owned(),
        })
}

/// `ACCP` when none rejected, `RJCT` when all, `PART` otherwise.
fn group_status<'a>(outcomes: impl Iterator<Item = &'a Outcome>) -> &'static str {
    let (mut rejected, mut total) = (0usize, 0usize);
    for o in outcomes {
        total += 1;
        if matches!(o, Outcome::Rejected(_)) {
            rejected += 1;
        }
    }
    match rejected {
        0 => "ACCP",
        r if r == total => "RJCT",
        _ => "PART",
    }
}

fn write_pain002(
    file: &SentSepaFile,
    decided: &[(&SentPaymentInfo, Decided<'_>)],
    config: &SimulationConfig,
    id: &str,
) -> Result<String, SimulateError> {
    let mut w = XmlWriter::default();
    w.line(0, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    w.line(
        0,
        &format!(r#"<Document xmlns="{PAIN_002_001_10_NAMESPACE}">"#),
    );
    w.open(1, "CstmrPmtStsRpt");
    w.open(2, "GrpHdr");
    w.text(3, "MsgId", &format!("PSR-{id}"));
    w.text(3, "CreDtTm", &datetime(config.created_at));
    w.close(2, "GrpHdr");
    w.open(2, "OrgnlGrpInfAndSts");
    w.text(3, "OrgnlMsgId", &file.msg_id);
    w.text(3, "OrgnlMsgNmId", "pain.001.001.09");
    let all = || decided.iter().flat_map(|(_, d)| d.iter());
    w.text(3, "OrgnlNbOfTxs", &all().count().to_string());
    let total = sum_cents(&file.msg_id, all().map(|(p, _)| *p))?;
    w.text(3, "OrgnlCtrlSum", &format_cents(total));
    w.text(3, "GrpSts", group_status(all().map(|(_, o)| o)));
    w.close(2, "OrgnlGrpInfAndSts");
    for (block, payments) in decided {
        w.open(2, "OrgnlPmtInfAndSts");
        w.text(3, "OrgnlPmtInfId", &block.pmt_inf_id);
        w.text(3, "OrgnlNbOfTxs", &payments.len().to_string());
        let sum = sum_cents(&block.pmt_inf_id, payments.iter().map(|(p, _)| *p))?;
        w.text(3, "OrgnlCtrlSum", &format_cents(sum));
        w.text(
            3,
            "PmtInfSts",
            group_status(payments.iter().map(|(_, o)| o)),
        );
        for (p, outcome) in payments {
            status_transaction(&mut w, block, p, outcome);
        }
        w.close(2, "OrgnlPmtInfAndSts");
    }
    w.close(1, "CstmrPmtStsRpt");
    w.line(0, "</Document>");
    Ok(w.out)
}

fn status_transaction(
    w: &mut XmlWriter,
    block: &SentPaymentInfo,
    p: &SentSepaPayment,
    o: &Outcome,
) {
    w.open(3, "TxInfAndSts");
    w.text(4, "OrgnlEndToEndId", &p.end_to_end_id);
    if let Outcome::Rejected(code) = o {
        w.text(4, "TxSts", "RJCT");
        w.open(4, "StsRsnInf");
        w.open(5, "Rsn");
        w.text(6, "Cd", code.as_str());
        w.close(5, "Rsn");
        w.close(4, "StsRsnInf");
    } else {
        w.text(4, "TxSts", "ACCP");
    }
    w.open(4, "OrgnlTxRef");
    w.open(5, "Amt");
    amount_line(w, 6, "InstdAmt", p);
    w.close(5, "Amt");
    if let Some(date) = block.execution_date {
        w.open(5, "ReqdExctnDt");
        w.text(6, "Dt", &date.format("%Y-%m-%d").to_string());
        w.close(5, "ReqdExctnDt");
    }
    if let Some(iban) = &p.creditor_iban {
        iban_account(w, 5, "CdtrAcct", iban);
    }
    w.close(4, "OrgnlTxRef");
    w.close(3, "TxInfAndSts");
}

fn amount_line(w: &mut XmlWriter, depth: usize, tag: &str, p: &SentSepaPayment) {
    amount_value(w, depth, tag, p.amount.currency.as_str(), p.amount.cents);
}

fn amount_value(w: &mut XmlWriter, depth: usize, tag: &str, currency: &str, cents: i64) {
    w.line(
        depth,
        &format!(r#"<{tag} Ccy="{currency}">{}</{tag}>"#, format_cents(cents)),
    );
}

fn iban_account(w: &mut XmlWriter, depth: usize, tag: &str, iban: &str) {
    w.open(depth, tag);
    w.open(depth + 1, "Id");
    w.text(depth + 2, "IBAN", iban);
    w.close(depth + 1, "Id");
    w.close(depth, tag);
}

fn datetime(t: NaiveDateTime) -> String {
    t.format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// The pieces of one `Ntry` the simulator writes.
struct NtryOut<'a> {
    number: usize,
    cents: i64,
    currency: &'a str,
    credit: bool,
    servicer_ref: String,
    sub_family: &'a str,
}

fn write_camt054(
    file: &SentSepaFile,
    decided: &[(&SentPaymentInfo, Decided<'_>)],
    config: &SimulationConfig,
    id: &str,
) -> Result<String, SimulateError> {
    let mut w = XmlWriter::default();
    w.line(0, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    w.line(
        0,
        &format!(r#"<Document xmlns="{CAMT_054_001_08_NAMESPACE}">"#),
    );
    w.open(1, "BkToCstmrDbtCdtNtfctn");
    w.open(2, "GrpHdr");
    w.text(3, "MsgId", &format!("NTF-{id}"));
    w.text(3, "CreDtTm", &datetime(config.created_at));
    w.close(2, "GrpHdr");
    let mut number = 0usize;
    for (i, (block, payments)) in decided.iter().enumerate() {
        w.open(2, "Ntfctn");
        w.text(3, "Id", &format!("NTF-{id}-{}", i + 1));
        w.text(3, "CreDtTm", &datetime(config.created_at));
        match &block.debtor_iban {
            Some(iban) => iban_account(&mut w, 3, "Acct", iban),
            None => other_account(&mut w, 3),
        }
        match config.booking {
            Booking::PerPayment => {
                let booked = payments
                    .iter()
                    .filter(|(_, o)| !matches!(o, Outcome::Rejected(_)));
                for (p, _) in booked {
                    number += 1;
                    debit_entry(&mut w, file, block, p, number, config);
                }
            }
            Booking::Batch => batch_entry(&mut w, file, block, payments, &mut number, config)?,
        }
        for (p, o) in payments {
            if let Outcome::Returned(code) = o {
                number += 1;
                return_entry(&mut w, file, block, p, code, number, config);
            }
        }
        w.close(2, "Ntfctn");
    }
    w.close(1, "BkToCstmrDbtCdtNtfctn");
    w.line(0, "</Document>");
    Ok(w.out)
}

fn other_account(w: &mut XmlWriter, depth: usize) {
    w.open(depth, "Acct");
    w.open(depth + 1, "Id");
    w.open(depth + 2, "Othr");
    w.text(depth + 3, "Id", "NOTPROVIDED");
    w.close(depth + 2, "Othr");
    w.close(depth + 1, "Id");
    w.close(depth, "Acct");
}

/// `Ntry` up to and including `BkTxCd`.
fn entry_head(w: &mut XmlWriter, e: &NtryOut<'_>, config: &SimulationConfig) {
    let date = config.booking_date.format("%Y-%m-%d").to_string();
    w.open(3, "Ntry");
    w.text(4, "NtryRef", &e.number.to_string());
    amount_value(w, 4, "Amt", e.currency, e.cents);
    w.text(4, "CdtDbtInd", if e.credit { "CRDT" } else { "DBIT" });
    w.open(4, "Sts");
    w.text(5, "Cd", "BOOK");
    w.close(4, "Sts");
    for tag in ["BookgDt", "ValDt"] {
        w.open(4, tag);
        w.text(5, "Dt", &date);
        w.close(4, tag);
    }
    w.text(4, "AcctSvcrRef", &e.servicer_ref);
    w.open(4, "BkTxCd");
    w.open(5, "Domn");
    w.text(6, "Cd", "PMNT");
    w.open(6, "Fmly");
    w.text(7, "Cd", "ICDT");
    w.text(7, "SubFmlyCd", e.sub_family);
    w.close(6, "Fmly");
    w.close(5, "Domn");
    w.close(4, "BkTxCd");
}

fn tx_refs(w: &mut XmlWriter, file: &SentSepaFile, block: &SentPaymentInfo, p: &SentSepaPayment) {
    w.open(6, "Refs");
    w.text(7, "MsgId", &file.msg_id);
    w.text(7, "PmtInfId", &block.pmt_inf_id);
    w.text(7, "EndToEndId", &p.end_to_end_id);
    w.close(6, "Refs");
}

fn debit_entry(
    w: &mut XmlWriter,
    file: &SentSepaFile,
    block: &SentPaymentInfo,
    p: &SentSepaPayment,
    number: usize,
    config: &SimulationConfig,
) {
    let e = NtryOut {
        number,
        cents: p.amount.cents,
        currency: p.amount.currency.as_str(),
        credit: false,
        servicer_ref: format!("BK{}", digest16(&["DBIT", &file.msg_id, &p.end_to_end_id])),
        sub_family: "ESCT",
    };
    entry_head(w, &e, config);
    w.open(4, "NtryDtls");
    w.open(5, "TxDtls");
    tx_refs(w, file, block, p);
    amount_line(w, 6, "Amt", p);
    w.text(6, "CdtDbtInd", "DBIT");
    w.close(5, "TxDtls");
    w.close(4, "NtryDtls");
    w.close(3, "Ntry");
}

fn batch_entry(
    w: &mut XmlWriter,
    file: &SentSepaFile,
    block: &SentPaymentInfo,
    payments: &Decided<'_>,
    number: &mut usize,
    config: &SimulationConfig,
) -> Result<(), SimulateError> {
    let booked: Vec<&SentSepaPayment> = payments
        .iter()
        .filter(|(_, o)| !matches!(o, Outcome::Rejected(_)))
        .map(|(p, _)| *p)
        .collect();
    let Some(first) = booked.first() else {
        return Ok(());
    };
    let currencies: BTreeSet<_> = booked.iter().map(|p| p.amount.currency).collect();
    if currencies.len() > 1 {
        return Err(SimulateError::MixedCurrencies {
            pmt_inf_id: block.pmt_inf_id.clone(),
        });
    }
    let total = sum_cents(&block.pmt_inf_id, booked.iter().copied())?;
    let currency = first.amount.currency.as_str();
    *number += 1;
    let e = NtryOut {
        number: *number,
        cents: total,
        currency,
        credit: false,
        servicer_ref: format!("BK{}", digest16(&["BTCH", &file.msg_id, &block.pmt_inf_id])),
        sub_family: "ESCT",
    };
    entry_head(w, &e, config);
    w.open(4, "NtryDtls");
    w.open(5, "Btch");
    w.text(6, "MsgId", &file.msg_id);
    w.text(6, "PmtInfId", &block.pmt_inf_id);
    w.text(6, "NbOfTxs", &booked.len().to_string());
    amount_value(w, 6, "TtlAmt", currency, total);
    w.text(6, "CdtDbtInd", "DBIT");
    w.close(5, "Btch");
    w.close(4, "NtryDtls");
    w.close(3, "Ntry");
    Ok(())
}

fn return_entry(
    w: &mut XmlWriter,
    file: &SentSepaFile,
    block: &SentPaymentInfo,
    p: &SentSepaPayment,
    code: &ReasonCode,
    number: usize,
    config: &SimulationConfig,
) {
    let e = NtryOut {
        number,
        cents: p.amount.cents,
        currency: p.amount.currency.as_str(),
        credit: true,
        servicer_ref: format!("BK{}", digest16(&["RTRN", &file.msg_id, &p.end_to_end_id])),
        sub_family: "RRTN",
    };
    entry_head(w, &e, config);
    w.open(4, "NtryDtls");
    w.open(5, "TxDtls");
    tx_refs(w, file, block, p);
    amount_line(w, 6, "Amt", p);
    w.text(6, "CdtDbtInd", "CRDT");
    w.open(6, "RtrInf");
    w.open(7, "Rsn");
    w.text(8, "Cd", code.as_str());
    w.close(7, "Rsn");
    if let Some(reason) = code.known() {
        w.text(
            7,
            "AddtlInf",
            &reason.description().chars().take(105).collect::<String>(),
        );
    }
    w.close(6, "RtrInf");
    w.close(5, "TxDtls");
    w.close(4, "NtryDtls");
    w.close(3, "Ntry");
}

// ---------------------------------------------------------------------------------------
// NACHA returns and notifications of change.

/// The ABA check digit for eight digits (weights 3, 7, 1).
fn aba_check_digit(first8: &str) -> u32 {
    let sum: u32 = first8
        .bytes()
        .zip([3, 7, 1].iter().cycle())
        .map(|(b, w)| u32::from(b - b'0') * w)
        .sum();
    (10 - sum % 10) % 10
}

/// The transaction code of a return or notification of change for an original code:
/// `22` → `21`, `32` → `31`, `27` → `26`.
fn return_transaction_code(original: &str) -> String {
    let b = original.as_bytes();
    match b {
        [a, b'2'..=b'4'] => format!("{}1", char::from(*a)),
        [a, b'7'..=b'9'] => format!("{}6", char::from(*a)),
        _ => original.to_owned(),
    }
}

/// The corrected data (29 characters) the simulator writes for a change.
fn corrected_data(code: &ChangeCode, e: &SentNachaEntry, draw: u64) -> String {
    let account = format!("{:012}", draw % 1_000_000_000_000);
    let prefix = format!("02{:06}", (draw >> 40) % 1_000_000);
    let routing = format!("{prefix}{}", aba_check_digit(&prefix));
    let other_code = match e.transaction_code.as_str() {
        "22" => "32",
        "32" => "22",
        c => c,
    };
    let data = match code.as_str() {
        "C01" => account,
        "C02" => routing,
        "C03" => format!("{routing}   {account}"),
        "C05" => other_code.to_owned(),
        _ => format!("{account:<17}   {other_code}"),
    };
    pad(&data, 29)
}

/// Writes records, counting what the controls need.
#[derive(Default)]
struct AchOut {
    records: Vec<String>,
    batches: u64,
    entries: u64,
    hash: u64,
    credit: u64,
    debit: u64,
    trace_seq: u64,
}

/// Answers a NACHA credit file: returns and notifications of change.
///
/// # Errors
/// [`SimulateError`] for a bad configuration.
pub fn simulate_nacha(
    file: &SentNachaFile,
    config: &SimulationConfig,
) -> Result<String, SimulateError> {
    config.check_ach()?;
    let mut out = AchOut::default();
    out.records.push(format!(
        "101{dest}{origin}{date}{time}A094101{dest_name}{origin_name}{reference}",
        dest = pad(&file.immediate_origin, 10),
        origin = pad(&file.immediate_destination, 10),
        date = config.created_at.format("%y%m%d"),
        time = config.created_at.format("%H%M"),
        dest_name = pad(&file.origin_name, 23),
        origin_name = pad(&file.destination_name, 23),
        reference = pad("", 8),
    ));
    for batch in &file.batches {
        let decided: Vec<(&SentNachaEntry, Outcome)> = batch
            .entries
            .iter()
            .map(|e| (e, config.ach_outcome(&e.trace)))
            .collect();
        let returns: Vec<_> = decided
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Returned(_)))
            .collect();
        let changes: Vec<_> = decided
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Changed(_)))
            .collect();
        for (sec, list) in [(batch.sec_code.as_str(), returns), ("COR", changes)] {
            if !list.is_empty() {
                ach_batch(&mut out, batch, sec, &list, config);
            }
        }
    }
    let blocks = (out.records.len() + 1).div_ceil(NACHA_BLOCKING_FACTOR);
    out.records.push(format!(
        "9{batches:06}{blocks:06}{entries:08}{hash:010}{debit:012}{credit:012}{reserved}",
        batches = out.batches,
        entries = out.entries,
        hash = out.hash % 10_000_000_000,
        debit = out.debit,
        credit = out.credit,
        reserved = pad("", 39),
    ));
    while !out.records.len().is_multiple_of(NACHA_BLOCKING_FACTOR) {
        out.records.push("9".repeat(NACHA_RECORD_CHARS));
    }
    let mut text = String::with_capacity(out.records.len() * (NACHA_RECORD_CHARS + 1));
    for r in &out.records {
        text.push_str(r);
        text.push('\n');
    }
    Ok(text)
}

fn ach_batch(
    out: &mut AchOut,
    batch: &SentNachaBatch,
    sec: &str,
    list: &[&(&SentNachaEntry, Outcome)],
    config: &SimulationConfig,
) {
    out.batches += 1;
    out.records.push(format!(
        "5220{name}{discretionary}{company_id}{sec}{description}{descriptive}{effective}   1{odfi}{number:07}",
        name = pad(&batch.company_name, 16),
        discretionary = pad(&batch.company_discretionary, 20),
        company_id = pad(&batch.company_id, 10),
        sec = pad(sec, 3),
        description = pad(&batch.entry_description, 10),
        descriptive = pad("", 6),
        effective = config.booking_date.format("%y%m%d"),
        odfi = batch.odfi,
        number = out.batches,
    ));
    let (mut count, mut hash, mut credit, mut debit) = (0u64, 0u64, 0u64, 0u64);
    for (e, outcome) in list {
        let Some((entry, addenda, cents)) = ach_answer(out, batch, e, outcome, config) else {
            continue;
        };
        let code = entry.get(1..3).unwrap_or("");
        match code.as_bytes().get(1) {
            Some(b'1'..=b'4') => credit += cents,
            Some(b'5'..=b'9') => debit += cents,
            _ => {}
        }
        hash += batch.odfi.parse::<u64>().unwrap_or(0);
        count += 2;
        out.records.push(entry);
        out.records.push(addenda);
    }
    out.records.push(format!(
        "8220{count:06}{hash:010}{debit:012}{credit:012}{company_id}{mac}{reserved}{odfi}{number:07}",
        hash = hash % 10_000_000_000,
        company_id = pad(&batch.company_id, 10),
        mac = pad("", 19),
        reserved = pad("", 6),
        odfi = batch.odfi,
        number = out.batches,
    ));
    out.entries += count;
    out.hash += hash;
    out.credit += credit;
    out.debit += debit;
}

/// One return or change: the entry record, its addenda and the amount it carries;
/// `None` for an entry that settled.
fn ach_answer(
    out: &mut AchOut,
    batch: &SentNachaBatch,
    e: &SentNachaEntry,
    outcome: &Outcome,
    config: &SimulationConfig,
) -> Option<(String, String, u64)> {
    if !matches!(outcome, Outcome::Returned(_) | Outcome::Changed(_)) {
        return None;
    }
    out.trace_seq += 1;
    let rdfi = e.routing.get(..8).unwrap_or("00000000");
    let trace = format!("{rdfi}{:07}", out.trace_seq);
    let cents = match outcome {
        Outcome::Returned(_) => u64::try_from(e.amount_usd_cents).unwrap_or(0),
        _ => 0,
    };
    let entry = format!(
        "6{code}{odfi}{check}{account}{cents:010}{id}{name}  1{trace}",
        code = return_transaction_code(&e.transaction_code),
        odfi = batch.odfi,
        check = aba_check_digit(&batch.odfi),
        account = pad(&e.account, 17),
        id = pad(&e.individual_id, 15),
        name = pad(&e.individual_name, 22),
    );
    let addenda = match outcome {
        Outcome::Changed(code) => {
            let (_, draw) = roll(config.seed, e.trace.as_str());
            format!(
                "798{code}{original}{reserved}{rdfi}{data}{reserved2}{trace}",
                original = e.trace,
                reserved = pad("", 6),
                data = corrected_data(code, e, draw),
                reserved2 = pad("", 15),
            )
        }
        Outcome::Returned(code) => {
            let death = match code.as_str() {
                "R14" | "R15" => config.booking_date.format("%y%m%d").to_string(),
                _ => pad("", 6),
            };
            format!(
                "799{code}{original}{death}{rdfi}{info}{trace}",
                original = e.trace,
                info = pad("", 44),
            )
        }
        Outcome::Settled | Outcome::Rejected(_) => return None,
    };
    Some((entry, addenda, cents))
}

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

    #[test]
    fn codes() {
        assert_eq!(aba_check_digit("02100002"), 1);
        assert_eq!(return_transaction_code("22"), "21");
        assert_eq!(return_transaction_code("32"), "31");
        assert_eq!(return_transaction_code("27"), "26");
    }
}
