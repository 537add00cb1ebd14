//! International Bank Account Numbers (ISO 13616) and Business Identifier Codes (ISO 9362).
//!
//! [`Iban::parse`] normalises (removes whitespace, upper-cases ASCII letters) and checks, in
//! this order: characters, the `CCdd` prefix, the country against a length table, the
//! length, and the ISO 7064 mod-97-10 checksum. [`Bic::parse`] checks the 8/11 character
//! structure.

use std::fmt;

/// The longest IBAN of any country (ISO 13616).
pub const IBAN_CHARS_MAX: usize = 34;

/// IBAN length per country code, from the SWIFT IBAN registry.
///
/// Covers every country of the SEPA scheme plus the other common IBAN countries. A country
/// missing here is rejected with `unknown_iban_country` rather than guessed.
const IBAN_LENGTHS: &[(&str, usize)] = &[
    ("AD", 24),
    ("AE", 23),
    ("AL", 28),
    ("AT", 20),
    ("AZ", 28),
    ("BA", 20),
    ("BE", 16),
    ("BG", 22),
    ("BH", 22),
    ("BR", 29),
    ("BY", 28),
    ("CH", 21),
    ("CR", 22),
    ("CY", 28),
    ("CZ", 24),
    ("DE", 22),
    ("DK", 18),
    ("DO", 28),
    ("EE", 20),
    ("EG", 29),
    ("ES", 24),
    ("FI", 18),
    ("FO", 18),
    ("FR", 27),
    ("GB", 22),
    ("GE", 22),
    ("GI", 23),
    ("GL", 18),
    ("GR", 27),
    ("GT", 28),
    ("HR", 21),
    ("HU", 28),
    ("IE", 22),
    ("IL", 23),
    ("IQ", 23),
    ("IS", 26),
    ("IT", 27),
    ("JO", 30),
    ("KW", 30),
    ("KZ", 20),
    ("LB", 28),
    ("LC", 32),
    ("LI", 21),
    ("LT", 20),
    ("LU", 20),
    ("LV", 21),
    ("MC", 27),
    ("MD", 24),
    ("ME", 22),
    ("MK", 19),
    ("MR", 27),
    ("MT", 31),
    ("MU", 30),
    ("NL", 18),
    ("NO", 15),
    ("PK", 24),
    ("PL", 28),
    ("PS", 29),
    ("PT", 25),
    ("QA", 29),
    ("RO", 24),
    ("RS", 22),
    ("SA", 24),
    ("SC", 31),
    ("SE", 24),
    ("SI", 19),
    ("SK", 24),
    ("SM", 27),
    ("ST", 25),
    ("SV", 28),
    ("TL", 23),
    ("TN", 24),
    ("TR", 26),
    ("UA", 29),
    ("VA", 22),
    ("VG", 24),
    ("XK", 20),
];

/// Countries whose IBANs can be reached by a SEPA credit transfer (EPC list of SEPA scheme
/// countries: EU and EEA members, Switzerland, the United Kingdom, Gibraltar, Monaco,
/// San Marino, Vatican City, Andorra, and the 2024/2025 accessions Albania, Moldova,
/// Montenegro, North Macedonia and Serbia). Territories such as Jersey or Åland use the
/// IBAN prefix of GB or FI and are therefore covered.
const SEPA_COUNTRIES: &[&str] = &[
    "AD", "AL", "AT", "BE", "BG", "CH", "CY", "CZ", "DE", "DK", "EE", "ES", "FI", "FR", "GB", "GI",
    "GR", "HR", "HU", "IE", "IS", "IT", "LI", "LT", "LU", "LV", "MC", "MD", "ME", "MK", "MT", "NL",
    "NO", "PL", "PT", "RO", "RS", "SE", "SI", "SK", "SM", "VA",
];

/// Why a string is not an IBAN.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IbanError {
    /// Something other than ASCII letters and digits (after removing whitespace).
    #[error("IBAN may contain only ASCII letters and digits")]
    InvalidCharacters,
    /// Does not start with a two-letter country code followed by two check digits.
    #[error("IBAN must start with a two-letter country code and two check digits")]
    InvalidFormat,
    /// The country code is not in the IBAN registry table.
    #[error("IBAN country code {country} is not supported")]
    UnknownCountry {
        /// The two-letter prefix found.
        country: String,
    },
    /// The length does not match the country's IBAN length.
    #[error("IBAN for {country} must have {expected} characters, got {actual}")]
    InvalidLength {
        /// Two-letter country code.
        country: String,
        /// Length required by the registry.
        expected: usize,
        /// Length found.
        actual: usize,
    },
    /// The mod-97 checksum does not hold (or the check digits are 00, 01 or 99).
    #[error("IBAN checksum is wrong (mistyped digit?)")]
    InvalidChecksum,
}

impl IbanError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidCharacters => "invalid_iban_characters",
            Self::InvalidFormat => "invalid_iban_format",
            Self::UnknownCountry { .. } => "unknown_iban_country",
            Self::InvalidLength { .. } => "invalid_iban_length",
            Self::InvalidChecksum => "invalid_iban_checksum",
        }
    }
}

/// A checked IBAN in electronic format (no spaces, upper case), e.g. `DE89370400440532013000`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Iban(String);

impl Iban {
    /// Parses an IBAN, accepting spaces (and other whitespace) anywhere and lower-case letters.
    ///
    /// # Errors
    /// [`IbanError`] naming the first rule that fails.
    pub fn parse(input: &str) -> Result<Self, IbanError> {
        // Look at one character more than any IBAN has: enough to reject over-long input
        // without copying all of it.
        let normalized: String = input
            .chars()
            .filter(|c| !c.is_whitespace())
            .take(IBAN_CHARS_MAX + 1)
            .map(|c| c.to_ascii_uppercase())
            .collect();
        if !normalized.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(IbanError::InvalidCharacters);
        }
        // From here on the string is pure ASCII, so byte indices are character indices.
        let bytes = normalized.as_bytes();
        if bytes.len() < 4
            || !bytes[..2].iter().all(u8::is_ascii_uppercase)
            || !bytes[2..4].iter().all(u8::is_ascii_digit)
        {
            return Err(IbanError::InvalidFormat);
        }
        let country = &normalized[..2];
        let expected = country_iban_length(country).ok_or_else(|| IbanError::UnknownCountry {
            country: country.to_owned(),
        })?;
        if normalized.len() != expected {
            return Err(IbanError::InvalidLength {
                country: country.to_owned(),
                expected,
                actual: input.chars().filter(|c| !c.is_whitespace()).count(),
            });
        }
        // Check digits 00, 01 and 99 are never issued (ECBS TR201); 01 and 99 would
        // otherwise pass mod 97 as aliases of 98 and 02.
        if matches!(&normalized[2..4], "00" | "01" | "99") || mod97(&normalized) != 1 {
            return Err(IbanError::InvalidChecksum);
        }
        Ok(Self(normalized))
    }

    /// The IBAN in electronic format.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The two-letter ISO 3166 country code.
    pub fn country(&self) -> &str {
        &self.0[..2]
    }

    /// The two check digits.
    pub fn check_digits(&self) -> &str {
        &self.0[2..4]
    }

    /// The country-specific Basic Bank Account Number.
    pub fn bban(&self) -> &str {
        &self.0[4..]
    }

    /// Whether the IBAN's country belongs to the SEPA scheme (reachable by SEPA credit transfer).
    pub fn is_sepa(&self) -> bool {
        SEPA_COUNTRIES.contains(&self.country())
    }
}

impl fmt::Display for Iban {
    /// Writes the electronic format; the alternate form (`{:#}`) writes the print format,
    /// grouped in fours: `DE89 3704 0044 0532 0130 00`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !f.alternate() {
            return f.write_str(&self.0);
        }
        for (i, c) in self.0.chars().enumerate() {
            if i > 0 && i % 4 == 0 {
                f.write_str(" ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

/// The registry length for a country code, if the country is known.
pub fn country_iban_length(country: &str) -> Option<usize> {
    IBAN_LENGTHS
        .iter()
        .find(|(code, _)| *code == country)
        .map(|(_, len)| *len)
}

/// ISO 7064 mod 97-10 of an upper-case alphanumeric IBAN, rearranged (first four characters
/// moved to the end, letters as 10..=35).
fn mod97(iban: &str) -> u32 {
    let (head, tail) = iban.split_at(4.min(iban.len()));
    tail.chars().chain(head.chars()).fold(0u32, |rem, c| {
        match c.to_digit(36) {
            Some(v) if v < 10 => (rem * 10 + v) % 97,
            Some(v) => (rem * 100 + v) % 97,
            // Unreachable for validated input; treated as 0 so the function stays total.
            None => (rem * 10) % 97,
        }
    })
}

/// Why a string is not a BIC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BicError {
    /// Not 8 or 11 characters of the form `BBBBCCLL[XXX]`.
    #[error(
        "BIC must be 8 or 11 characters: 4 letters (bank), 2 letters (country), 2 letters/digits (location), optional 3 letters/digits (branch)"
    )]
    Invalid,
}

impl BicError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid => "invalid_bic",
        }
    }
}

/// A structurally valid BIC (ISO 9362), upper case, 8 or 11 characters, e.g. `COBADEFFXXX`.
///
/// The bank code is required to be four letters, as in every BIC issued so far (ISO
/// 9362:2014 would also allow digits there).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bic(String);

impl Bic {
    /// Parses a BIC; surrounding whitespace is ignored and letters are upper-cased.
    ///
    /// # Errors
    /// [`BicError::Invalid`] when the structure is wrong.
    pub fn parse(input: &str) -> Result<Self, BicError> {
        let s = input.trim().to_ascii_uppercase();
        let b = s.as_bytes();
        let ok = (b.len() == 8 || b.len() == 11)
            && b[..6].iter().all(u8::is_ascii_uppercase)
            && b[6..]
                .iter()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
        if ok {
            Ok(Self(s))
        } else {
            Err(BicError::Invalid)
        }
    }

    /// The BIC as given (8 or 11 characters).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The two-letter country code (characters 5 and 6).
    pub fn country(&self) -> &str {
        &self.0[4..6]
    }
}

impl fmt::Display for Bic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_ibans() {
        let iban = Iban::parse("de89 3704 0044 0532 0130 00").unwrap();
        assert_eq!(iban.as_str(), "DE89370400440532013000");
        assert_eq!(iban.country(), "DE");
        assert_eq!(format!("{iban:#}"), "DE89 3704 0044 0532 0130 00");
        assert_eq!(iban.to_string(), "DE89370400440532013000");
        assert!(iban.is_sepa());
        assert!(Iban::parse("GB82WEST12345698765432").is_ok());
    }

    #[test]
    fn table_has_no_duplicates() {
        for (i, (c, _)) in IBAN_LENGTHS.iter().enumerate() {
            assert!(IBAN_LENGTHS[i + 1..].iter().all(|(d, _)| d != c), "{c}");
        }
        for c in SEPA_COUNTRIES {
            assert!(country_iban_length(c).is_some(), "{c}");
        }
    }

    #[test]
    fn bic() {
        assert_eq!(Bic::parse("cobadeff").unwrap().as_str(), "COBADEFF");
        assert_eq!(Bic::parse("COBADEFFXXX").unwrap().country(), "DE");
        assert!(Bic::parse("COBADEF").is_err());
        assert!(Bic::parse("C0BADEFF").is_err());
        assert!(Bic::parse("ÄOBADEFF").is_err());
    }
}
