//! Shared test helpers: locating the XSD, running xmllint, building fixtures, and
//! independent check-digit arithmetic (not using the crate's own code).
#![allow(dead_code)] // each test binary uses a different subset

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use settle_bank::{AbaRouting, HolderName, Iban, SepaId};

const XSD_RELATIVE: &str = "schemas/iso20022/pain.001.001.09.xsd";

/// The official pain.001.001.09 XSD: `$SETTLE_SHARED_DIR/schemas/...` if the variable is
/// set, else the first `shared/schemas/...` found walking up from the crate directory.
/// Panics (fails the test) with instructions when it cannot be found.
pub fn xsd_path() -> PathBuf {
    if let Some(dir) = std::env::var_os("SETTLE_SHARED_DIR") {
        let p = Path::new(&dir).join(XSD_RELATIVE);
        assert!(
            p.is_file(),
            "SETTLE_SHARED_DIR is set to {dir:?} but {p:?} does not exist. Point it at the \
             shared/ directory that holds schemas/iso20022/pain.001.001.09.xsd (see \
             PROVENANCE.txt there), or unset it to search upwards from the crate."
        );
        return p;
    }
    let start = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for dir in start.ancestors() {
        let p = dir.join("shared").join(XSD_RELATIVE);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "missing XSD: no shared/{XSD_RELATIVE} in any parent of {start:?}. Put the shared/ \
         directory beside the repository clone (CI does this) or set SETTLE_SHARED_DIR to \
         it; the schema is the ISO 20022 pain.001.001.09.xsd described in \
         shared/schemas/iso20022/PROVENANCE.txt."
    );
}

/// Validates `xml` against the XSD with `xmllint --noout --schema`; returns xmllint's
/// exit status and its stderr. Panics with instructions when xmllint is not installed.
pub fn xmllint(xml: &str) -> (std::process::ExitStatus, String) {
    let xsd = xsd_path();
    let mut file = tempfile::Builder::new()
        .suffix(".xml")
        .tempfile()
        .expect("create temp file");
    file.write_all(xml.as_bytes()).expect("write temp file");
    file.flush().expect("flush temp file");
    let output = match Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(&xsd)
        .arg(file.path())
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "missing tool: xmllint is not on PATH; install it (Debian/Ubuntu: `apt-get install \
             libxml2-utils`, macOS: ships with libxml2 / `brew install libxml2`) to validate \
             SEPA files against the XSD"
        ),
        Err(e) => panic!("could not run xmllint: {e}"),
    };
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Asserts that `xml` is valid against the official XSD.
pub fn assert_xsd_valid(xml: &str) {
    let (status, stderr) = xmllint(xml);
    assert!(
        status.success(),
        "xmllint rejected the file ({status}):\n{stderr}\n--- file ---\n{xml}"
    );
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
