//! US bank details for ACH: ABA routing numbers, account numbers, account types and
//! receiver kinds.

use std::fmt;

/// Why a string is not an ABA routing transit number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AbaError {
    /// Not exactly nine ASCII digits.
    #[error("ABA routing number must be exactly 9 digits")]
    InvalidFormat,
    /// The first two digits are not a Federal Reserve routing symbol
    /// (00–12, 21–32, 61–72 or 80).
    #[error("ABA routing number must start with 00-12, 21-32, 61-72 or 80")]
    InvalidPrefix,
    /// The 3-7-1 weighted checksum is not a multiple of 10.
    #[error("ABA routing number check digit is wrong (mistyped digit?)")]
    InvalidCheckDigit,
}

impl AbaError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidFormat => "invalid_aba_format",
            Self::InvalidPrefix => "invalid_aba_prefix",
            Self::InvalidCheckDigit => "invalid_aba_check_digit",
        }
    }
}

/// A checked nine-digit ABA routing transit number, e.g. `021000021`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AbaRouting(String);

impl AbaRouting {
    /// Parses a routing number; surrounding whitespace is ignored.
    ///
    /// # Errors
    /// [`AbaError`] naming the rule that fails.
    pub fn parse(input: &str) -> Result<Self, AbaError> {
        let s = input.trim();
        let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
        if s.len() != 9 || digits.len() != 9 {
            return Err(AbaError::InvalidFormat);
        }
        let prefix = digits[0] * 10 + digits[1];
        if !matches!(prefix, 0..=12 | 21..=32 | 61..=72 | 80) {
            return Err(AbaError::InvalidPrefix);
        }
        let weighted: u32 = digits
            .iter()
            .zip([3, 7, 1].iter().cycle())
            .map(|(d, w)| d * w)
            .sum();
        if !weighted.is_multiple_of(10) {
            return Err(AbaError::InvalidCheckDigit);
        }
        Ok(Self(s.to_owned()))
    }

    /// The nine digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first eight digits: the DFI identification used in NACHA records, entry hashes
    /// and trace numbers.
    pub fn dfi_identification(&self) -> &str {
        &self.0[..8]
    }

    /// The ninth digit.
    pub fn check_digit(&self) -> &str {
        &self.0[8..]
    }
}

impl fmt::Display for AbaRouting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a string is not an ACH account number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AchAccountNumberError {
    /// Empty, longer than 17 characters, or containing something other than letters,
    /// digits and hyphens.
    #[error("ACH account number must be 1 to 17 characters of digits, letters and hyphens")]
    Invalid,
}

impl AchAccountNumberError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid => "invalid_ach_account_number",
        }
    }
}

/// The longest DFI account number a NACHA entry can carry.
pub const ACH_ACCOUNT_NUMBER_CHARS_MAX: usize = 17;

/// A receiver's DFI account number as written into a NACHA entry (field 13–29).
///
/// Accepted: 1 to 17 characters of ASCII digits, letters and hyphens (the NACHA field is
/// alphanumeric and banks do issue account numbers with letters or hyphens), with at least
/// one digit or letter. Letters are stored upper-case; surrounding whitespace is ignored;
/// inner spaces are rejected rather than silently removed, since their meaning is unclear.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AchAccountNumber(String);

impl AchAccountNumber {
    /// Parses an account number.
    ///
    /// # Errors
    /// [`AchAccountNumberError::Invalid`] when the rules above are not met.
    pub fn parse(input: &str) -> Result<Self, AchAccountNumberError> {
        let s = input.trim();
        let ok = !s.is_empty()
            && s.len() <= ACH_ACCOUNT_NUMBER_CHARS_MAX
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && s.chars().any(|c| c.is_ascii_alphanumeric());
        if ok {
            Ok(Self(s.to_ascii_uppercase()))
        } else {
            Err(AchAccountNumberError::Invalid)
        }
    }

    /// The account number (upper case).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AchAccountNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The kind of deposit account an ACH credit goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AchAccountType {
    /// Demand deposit account; credits use transaction code 22.
    Checking,
    /// Savings account; credits use transaction code 32.
    Savings,
}

impl AchAccountType {
    /// The NACHA transaction code of a live credit to this kind of account.
    pub fn credit_transaction_code(self) -> &'static str {
        match self {
            Self::Checking => "22",
            Self::Savings => "32",
        }
    }
}

/// Who receives an ACH payment; decides the Standard Entry Class of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AchEntity {
    /// A company: Corporate Credit or Debit (`CCD`).
    Business,
    /// A consumer: Prearranged Payment and Deposit (`PPD`).
    Individual,
}

impl AchEntity {
    /// The Standard Entry Class code for entries to this kind of receiver.
    pub fn sec_code(self) -> &'static str {
        match self {
            Self::Business => "CCD",
            Self::Individual => "PPD",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_routing_numbers() {
        let r = AbaRouting::parse("021000021").unwrap();
        assert_eq!(r.dfi_identification(), "02100002");
        assert_eq!(r.check_digit(), "1");
        assert!(AbaRouting::parse(" 011000015 ").is_ok());
        assert_eq!(
            AbaRouting::parse("021000022"),
            Err(AbaError::InvalidCheckDigit)
        );
        assert_eq!(
            AbaRouting::parse("２１000021"),
            Err(AbaError::InvalidFormat)
        );
        assert_eq!(AbaRouting::parse("02100002"), Err(AbaError::InvalidFormat));
    }

    #[test]
    fn account_numbers() {
        assert_eq!(AchAccountNumber::parse("12-ab").unwrap().as_str(), "12-AB");
        assert!(AchAccountNumber::parse("12345678901234567").is_ok());
        assert!(AchAccountNumber::parse("123456789012345678").is_err());
        assert!(AchAccountNumber::parse("---").is_err());
        assert!(AchAccountNumber::parse("12 34").is_err());
        assert!(AchAccountNumber::parse("").is_err());
    }
}
