//! Bank payout rails for settle.
//!
//! A pure library (no I/O, no clock): checked bank details and the files banks accept.
//!
//! - [`iban`]: [`Iban`] (country length table, mod 97) and [`Bic`].
//! - [`aba`]: US [`AbaRouting`] numbers (3-7-1 check digit), [`AchAccountNumber`],
//!   [`AchAccountType`] and [`AchEntity`].
//! - [`translit`]: the SEPA Latin character set, [`to_sepa_latin`], [`to_nacha_ascii`] and
//!   checked account [`HolderName`]s.
//! - [`sepa`]: [`write_pain001`] writes an ISO 20022 `pain.001.001.09` SEPA credit
//!   transfer file from a [`SepaBatch`].
//! - [`nacha`]: [`write_nacha`] writes a NACHA ACH credit file (CCD/PPD) from a
//!   [`NachaFile`].
//! - [`returns`]: [`ReturnReason`] for SEPA and ACH return codes.
//! - [`answers`]: [`read_answer`] recognises and reads a bank's answer file into a
//!   [`BankAnswer`]; the shared [`Amount`], [`ReasonCode`] and [`AnswerError`] (with the
//!   element path or line of every problem).
//! - [`pain002`]: [`read_pain002`] reads `pain.002` payment status reports.
//! - [`camt`]: [`read_camt054`] and [`read_camt053`] read `camt.054` notifications and
//!   `camt.053` statements.
//! - [`ach_answers`]: [`read_ach_answers`] reads NACHA returns (addenda 99) and
//!   notifications of change (addenda 98).
//! - [`sent`]: [`read_sent_pain001`] and [`read_sent_nacha`] read the engine's own payment
//!   files back.
//! - [`simulate`]: [`simulate`](simulate::simulate) answers the engine's files like a bank
//!   would, deterministically from a seed.
//!
//! Money is integer cents with the currency in the name (`amount_eur_cents`,
//! `amount_usd_cents`). Constructors parse into types that are proof of validity; every
//! error type has a `code()` with a stable snake_case code. Nothing here panics on input.
//! Both writers are deterministic: the same input gives the same bytes, so the SHA-256 of
//! a file (see [`file_sha256_hex`]) identifies it.

pub mod aba;
pub mod ach_answers;
pub mod answers;
pub mod camt;
pub mod iban;
pub mod nacha;
mod nacha_read;
pub mod pain002;
pub mod returns;
pub mod sent;
pub mod sepa;
pub mod simulate;
pub mod translit;
mod xml_read;

pub use aba::{
    AbaError, AbaRouting, AchAccountNumber, AchAccountNumberError, AchAccountType, AchEntity,
};
pub use ach_answers::{
    AchAnswer, AchAnswerFile, AchAnswerKind, AchCorrection, ChangeCode, TraceNumber,
    read_ach_answers,
};
pub use answers::{
    Amount, AnswerError, AnswerKind, AnswerLocation, BankAnswer, CentsError, CurrencyCode,
    ReasonCode, parse_cents, read_answer, read_answer_each,
};
pub use camt::{
    BankTxCode, BatchBooking, CamtAccountReport, CamtEntry, CamtReport, CamtTransaction,
    CreditDebit, DomainCode, EntrySink, EntryStatus, Pagination, ProprietaryCode, ReturnInfo,
    read_camt_each, read_camt053, read_camt054,
};
pub use iban::{Bic, BicError, Iban, IbanError};
pub use nacha::{
    AchIndividualId, AchIndividualIdError, NachaEntry, NachaError, NachaFile, write_nacha,
};
pub use pain002::{
    StatusClass, StatusCode, StatusEntry, StatusReason, StatusReport, StatusTarget, read_pain002,
};
pub use returns::{BankRail, ReturnCodeError, ReturnReason};
pub use sent::{
    SentNachaBatch, SentNachaEntry, SentNachaFile, SentPaymentInfo, SentSepaFile, SentSepaPayment,
    read_sent_nacha, read_sent_pain001,
};
pub use sepa::{
    SepaBatch, SepaError, SepaId, SepaIdError, SepaPayment, format_cents, write_pain001,
};
pub use simulate::{Booking, SimulateError, SimulatedAnswers, SimulationConfig};
pub use translit::{
    HolderName, HolderNameError, is_sepa_char, is_sepa_text, to_nacha_ascii, to_sepa_latin,
};

use sha2::{Digest, Sha256};

/// Lower-case hex SHA-256 of a generated file's bytes, as recorded on the ledger.
pub fn file_sha256_hex(contents: &str) -> String {
    hex::encode(Sha256::digest(contents.as_bytes()))
}
