//! Shared test helpers: the XSD check with xmllint, building fixtures, and
//! independent check-digit arithmetic (not using the crate's own code).
#![allow(dead_code)] // each test binary uses a different subset

use std::io::Write as _;

use settle_bank::{AbaRouting, HolderName, Iban, SepaId};
use settle_prereq::Pain001Schema;

/// The official pain.001.001.09 XSD check with xmllint (located by `settle_prereq`), when
/// the machine has both; else `None`, reported skipped by `settle_prereq` (a failure in
/// CI). `step` names what the test skips: `None` when it is the whole test.
#[track_caller]
pub fn schema(step: Option<&str>) -> Option<Pain001Schema> {
    match step {
        Some(step) => settle_prereq::require_step(step, settle_prereq::pain001_schema()),
        None => settle_prereq::require(settle_prereq::pain001_schema()),
    }
}

/// The official camt.054.001.08 XSD (beside the pain.001.001.09 one in
/// `shared/schemas/iso20022/`) with xmllint, when the machine has both; else `None`,
/// reported skipped (a failure in CI).
#[track_caller]
pub fn camt054_schema(step: &str) -> Option<Pain001Schema> {
    let probe = settle_prereq::pain001_schema().and_then(|s| {
        let xsd = s.xsd.with_file_name("camt.054.001.08.xsd");
        if xsd.is_file() {
            Ok(Pain001Schema {
                xmllint: s.xmllint,
                xsd,
            })
        } else {
            Err(settle_prereq::Missing::new(
                format!("no camt.054.001.08 XSD at {}", xsd.display()),
                "put shared/ beside the clone (CI does); shared/schemas/iso20022/PROVENANCE.txt \
                 says where the XSD comes from",
            ))
        }
    });
    settle_prereq::require_step(step, probe)
}

/// Validates `xml` against the XSD with `xmllint --noout --schema`: `Ok`, or what
/// xmllint said.
pub fn xmllint(schema: &Pain001Schema, xml: &str) -> Result<(), String> {
    let mut file = tempfile::Builder::new()
        .suffix(".xml")
        .tempfile()
        .expect("create temp file");
    file.write_all(xml.as_bytes()).expect("write temp file");
    file.flush().expect("flush temp file");
    schema.validate(file.path())
}

/// Asserts that `xml` is valid against the official XSD; without xmllint or the XSD
/// (outside CI) the "XSD validation" step is reported skipped and the test goes on.
#[track_caller]
pub fn assert_xsd_valid(xml: &str) {
    if let Some(schema) = schema(Some("XSD validation"))
        && let Err(e) = xmllint(&schema, xml)
    {
        panic!("xmllint rejected the file: {e}\n--- file ---\n{xml}");
    }
}

/// ISO 7064 mod 97-10 of an alphanumeric string (letters as 10..=35), written
/// independently of the crate.
pub fn mod97(s: &str) -> u32 {
    let mut numeric = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            numeric.push(c);
        } else {
            numeric.push_str(&(c as u32 - 'A' as u32 + 10).to_string());
        }
    }
    numeric
        .bytes()
        .fold(0u32, |rem, b| (rem * 10 + u32::from(b - b'0')) % 97)
}

/// A valid IBAN for `country` and `bban` (upper case), check digits computed here.
pub fn make_iban(country: &str, bban: &str) -> String {
    let check = 98 - mod97(&format!("{bban}{country}00"));
    format!("{country}{check:02}{bban}")
}

/// The ABA check digit for 8 leading digits (weights 3, 7, 1).
pub fn aba_check_digit(first8: &str) -> u32 {
    let weights = [3, 7, 1, 3, 7, 1, 3, 7];
    let sum: u32 = first8
        .chars()
        .zip(weights)
        .map(|(c, w)| c.to_digit(10).expect("digit") * w)
        .sum();
    (10 - sum % 10) % 10
}

/// Whether a nine-digit routing number has a correct check digit (independent check).
pub fn aba_valid(routing: &str) -> bool {
    routing.len() == 9
        && routing.chars().all(|c| c.is_ascii_digit())
        && aba_check_digit(&routing[..8]) == routing[8..].parse::<u32>().unwrap_or(99)
}

pub fn iban(s: &str) -> Iban {
    Iban::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

pub fn name(s: &str) -> HolderName {
    HolderName::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

pub fn id(s: &str) -> SepaId {
    SepaId::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

pub fn aba(s: &str) -> AbaRouting {
    AbaRouting::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The SEPA Latin character set, spelled out independently of the crate.
pub fn sepa_allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || "/-?:().,'+ ".contains(c)
}

/// Runs a checker that should panic; `Some(what its panic said)`, or `None` if it passed.
pub fn panic_message(check: impl FnOnce() + std::panic::UnwindSafe) -> Option<String> {
    let payload = std::panic::catch_unwind(check).err()?;
    Some(
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default(),
    )
}
