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
//!
//! Money is integer cents with the currency in the name (`amount_eur_cents`,
//! `amount_usd_cents`). Constructors parse into types that are proof of validity; every
//! error type has a `code()` with a stable snake_case code. Nothing here panics on input.
//! Both writers are deterministic: the same input gives the same bytes, so the SHA-256 of
//! a file (see [`file_sha256_hex`]) identifies it.

pub mod aba;
pub mod iban;
pub mod nacha;
pub mod returns;
pub mod sepa;
pub mod translit;

pub use aba::{
    AbaError, AbaRouting, AchAccountNumber, AchAccountNumberError, AchAccountType, AchEntity,
};
pub use iban::{Bic, BicError, Iban, IbanError};
pub use nacha::{
    AchIndividualId, AchIndividualIdError, NachaEntry, NachaError, NachaFile, write_nacha,
};
pub use returns::{BankRail, ReturnCodeError, ReturnReason};
pub use sepa::{
    SepaBatch, SepaError, SepaId, SepaIdError, SepaPayment, format_cents, write_pain001,
};
pub use translit::{
    HolderName, HolderNameError, is_sepa_char, is_sepa_text, to_nacha_ascii, to_sepa_latin,
};

use sha2::{Digest, Sha256};

/// Lower-case hex SHA-256 of a generated file's bytes, as recorded on the ledger.
pub fn file_sha256_hex(contents: &str) -> String {
    hex::encode(Sha256::digest(contents.as_bytes()))
}
