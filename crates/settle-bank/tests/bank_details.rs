//! IBAN, BIC, ABA and account number parsing: known values and property tests with
//! check digits computed independently of the crate.

mod common;

use common::{aba_check_digit, make_iban, mod97};
use proptest::prelude::*;
use settle_bank::{AbaRouting, AchAccountNumber, Bic, Iban};

#[test]
fn known_valid_values() {
    for s in [
        "DE89370400440532013000",
        "GB82WEST12345698765432",
        "GB82 WEST 1234 5698 7654 32",
        "de89 3704 0044 0532 0130 00",
        "NL91ABNA0417164300",
        "FR1420041010050500013M02606",
        "NO9386011117947",
        "MT84MALT011000012345MTLCAST001S",
    ] {
        let iban = Iban::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(mod97(&format!("{}{}", iban.bban(), &iban.as_str()[..4])), 1);
    }
    assert_eq!(
        Iban::parse("GB82 WEST 1234 5698 7654 32").map(|i| format!("{i:#}")),
        Ok("GB82 WEST 1234 5698 7654 32".to_owned())
    );
    for s in ["021000021", "011000015", "011000028", "026009593"] {
        assert!(AbaRouting::parse(s).is_ok(), "{s}");
    }
    for s in [
        "COBADEFF",
        "COBADEFFXXX",
        "DEUTDEDB101",
        "BNPAFRPP",
        "ABNANL2A",
    ] {
        assert_eq!(
            Bic::parse(s).map(|b| b.as_str().to_owned()),
            Ok(s.to_owned())
        );
    }
    assert!(AchAccountNumber::parse("4099999992").is_ok());
}

/// Countries with their BBAN shapes (regex for the generator) and lengths.
const SHAPES: &[(&str, &str)] = &[
    ("DE", "[0-9]{18}"),
    ("GB", "[A-Z]{4}[0-9]{14}"),
    ("FR", "[0-9]{10}[A-Z0-9]{11}[0-9]{2}"),
    ("NL", "[A-Z]{4}[0-9]{10}"),
    ("NO", "[0-9]{11}"),
    ("MT", "[A-Z]{4}[0-9]{5}[A-Z0-9]{18}"),
    ("IT", "[A-Z][0-9]{10}[A-Z0-9]{12}"),
    ("CH", "[0-9]{5}[A-Z0-9]{12}"),
];

fn valid_iban() -> impl Strategy<Value = String> {
    proptest::sample::select(SHAPES).prop_flat_map(|(country, shape)| {
        proptest::string::string_regex(shape)
            .expect("regex")
            .prop_map(move |bban| make_iban(country, &bban))
    })
}

/// Positions of ASCII digits from index 2 on (check digits and BBAN).
fn digit_positions(s: &str) -> Vec<usize> {
    s.char_indices()
        .filter(|(i, c)| *i >= 2 && c.is_ascii_digit())
        .map(|(i, _)| i)
        .collect()
}

fn valid_routing() -> impl Strategy<Value = String> {
    let prefixes: Vec<u32> = (0..=12).chain(21..=32).chain(61..=72).chain([80]).collect();
    (proptest::sample::select(prefixes), 0u32..1_000_000).prop_map(|(p, rest)| {
        let first8 = format!("{p:02}{rest:06}");
        format!("{first8}{}", aba_check_digit(&first8))
    })
}

proptest! {
    #[test]
    fn generated_ibans_are_accepted(iban in valid_iban()) {
        let parsed = Iban::parse(&iban);
        prop_assert_eq!(parsed.as_ref().map(Iban::as_str), Ok(iban.as_str()));
        // Print format and lower case are accepted too.
        let printed = format!("{:#}", parsed.expect("parsed"));
        prop_assert_eq!(Iban::parse(&printed.to_lowercase()).map(|i| i.to_string()), Ok(iban));
    }

    #[test]
    fn one_wrong_digit_is_rejected(iban in valid_iban(), pick in any::<prop::sample::Index>(), delta in 1u8..10) {
        let positions = digit_positions(&iban);
        let pos = positions[pick.index(positions.len())];
        let mut bytes = iban.clone().into_bytes();
        bytes[pos] = b'0' + (bytes[pos] - b'0' + delta) % 10;
        let corrupted = String::from_utf8(bytes).expect("ascii");
        prop_assert_ne!(&corrupted, &iban);
        let err = Iban::parse(&corrupted).expect_err("corrupted IBAN accepted");
        prop_assert_eq!(err.code(), "invalid_iban_checksum");
    }

    #[test]
    fn swapped_adjacent_digits_are_rejected(iban in valid_iban(), pick in any::<prop::sample::Index>()) {
        // Adjacent digit pairs inside the check digits or inside the BBAN that differ.
        let bytes = iban.as_bytes();
        let pairs: Vec<usize> = (2..bytes.len() - 1)
            .filter(|&i| i != 3) // check digit / BBAN boundary is not adjacent after rearranging
            .filter(|&i| bytes[i].is_ascii_digit() && bytes[i + 1].is_ascii_digit() && bytes[i] != bytes[i + 1])
            .collect();
        prop_assume!(!pairs.is_empty());
        let i = pairs[pick.index(pairs.len())];
        let mut swapped = bytes.to_vec();
        swapped.swap(i, i + 1);
        let swapped = String::from_utf8(swapped).expect("ascii");
        // Same country, length and characters: only the mod-97 checksum can catch it.
        let err = Iban::parse(&swapped).expect_err("swapped digits accepted");
        prop_assert_eq!(err.code(), "invalid_iban_checksum", "{}", swapped);
    }

    #[test]
    fn generated_routing_numbers_are_accepted(routing in valid_routing()) {
        let parsed = AbaRouting::parse(&routing).map(|r| r.as_str().to_owned());
        prop_assert_eq!(parsed, Ok(routing));
    }

    #[test]
    fn routing_with_one_wrong_digit_is_rejected(routing in valid_routing(), pos in 0usize..9, delta in 1u8..10) {
        let mut bytes = routing.clone().into_bytes();
        bytes[pos] = b'0' + (bytes[pos] - b'0' + delta) % 10;
        let corrupted = String::from_utf8(bytes).expect("ascii");
        // A wrong digit in the first two can leave the Federal Reserve prefixes (caught
        // first); anywhere else, or to another valid prefix, the check digit catches it.
        let prefix: u32 = corrupted[..2].parse().expect("digits");
        let expected = if matches!(prefix, 0..=12 | 21..=32 | 61..=72 | 80) {
            "invalid_aba_check_digit"
        } else {
            "invalid_aba_prefix"
        };
        let err = AbaRouting::parse(&corrupted).expect_err("one wrong digit accepted");
        prop_assert_eq!(err.code(), expected, "{}", corrupted);
    }

    #[test]
    fn parsers_never_panic(s in "\\PC{0,40}") {
        let _ = Iban::parse(&s);
        let _ = Bic::parse(&s);
        let _ = AbaRouting::parse(&s);
        let _ = AchAccountNumber::parse(&s);
        let _ = settle_bank::HolderName::parse(&s);
        let _ = settle_bank::SepaId::parse(&s);
        let _ = settle_bank::ReturnReason::parse(&s);
        let latin = settle_bank::to_sepa_latin(&s, 35);
        prop_assert!(latin.chars().count() <= 35);
        prop_assert!(latin.chars().all(common::sepa_allowed));
        prop_assert_eq!(latin.trim(), latin.as_str());
        prop_assert!(!latin.contains("  "));
    }
}

/// Edges that mutation testing found unchecked (ops/MUTANTS.md).
#[test]
fn iban_edges_and_the_display_of_every_identifier() {
    // Four characters are a format the length check refuses, not a malformed IBAN.
    assert_eq!(
        Iban::parse("DE89").unwrap_err().code(),
        "invalid_iban_length"
    );
    // The length reported is the input's, spaces not counted.
    match Iban::parse("DE89 3704 0044 0532 0130 001") {
        Err(settle_bank::IbanError::InvalidLength {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (22, 23)),
        other => panic!("{other:?}"),
    }
    // A character no IBAN may hold is found even after the longest IBAN's length.
    let long = format!("{}!", "A".repeat(34));
    assert_eq!(
        Iban::parse(&long).unwrap_err().code(),
        "invalid_iban_characters"
    );
    let iban = Iban::parse("DE89 3704 0044 0532 0130 00").unwrap();
    assert_eq!(iban.check_digits(), "89");
    assert_eq!(iban.to_string(), "DE89370400440532013000");
    // Every identifier displays as what was parsed (normalised).
    assert_eq!(
        AbaRouting::parse("021000021").unwrap().to_string(),
        "021000021"
    );
    assert_eq!(
        AchAccountNumber::parse("12345-6789").unwrap().to_string(),
        "12345-6789"
    );
    assert_eq!(
        Bic::parse("cobadeffxxx").unwrap().to_string(),
        "COBADEFFXXX"
    );
    assert_eq!(
        settle_bank::AchIndividualId::parse("prv-42")
            .unwrap()
            .to_string(),
        "PRV-42"
    );
    assert_eq!(
        settle_bank::SepaId::parse("PO-2026-1").unwrap().to_string(),
        "PO-2026-1"
    );
}

/// Latin letters with diacritics fold to their base letters, each one (the table rows that
/// mutation testing found untested; ops/MUTANTS.md).
#[test]
fn letters_with_diacritics_fold_to_their_base_letters() {
    for (input, folded) in [
        ("ÇĆĈĊČ", "CCCCC"),
        ("ÐĎĐ", "DDD"),
        ("ðďđ", "ddd"),
        ("ÈÉÊËĒĔĖĘĚ", "EEEEEEEEE"),
        ("ĜĞĠĢ", "GGGG"),
        ("ĤĦ", "HH"),
        ("ĥħ", "hh"),
        ("Ĳ", "IJ"),
        ("ĳ", "ij"),
        ("Ĵ", "J"),
        ("ĵ", "j"),
        ("Ķ", "K"),
        ("ķĸ", "kk"),
        ("ŔŖŘ", "RRR"),
        ("ẞ", "SS"),
        ("Þ", "Th"),
        ("þ", "th"),
        ("ÙÚÛŨŪŬŮŰŲǓǕǗǙǛ", "UUUUUUUUUUUUUU"),
        ("Ŵ", "W"),
        ("ŵ", "w"),
        ("ÝŶŸ", "YYY"),
        // Combining marks and zero-width characters vanish (no space in their place).
        ("Jo\u{0301}se\u{200B}fa\u{00AD}ne", "Josefane"),
    ] {
        assert_eq!(settle_bank::to_sepa_latin(input, 70), folded, "{input}");
        assert_eq!(
            settle_bank::to_nacha_ascii(input, 22),
            folded.to_ascii_uppercase(),
            "{input}"
        );
    }
}

/// A cut counts the spaces it keeps; a holder name displays as given (edges found by
/// mutation testing; ops/MUTANTS.md).
#[test]
fn cuts_count_kept_spaces_and_holder_names_display_as_given() {
    assert_eq!(settle_bank::to_sepa_latin("ab  cd ef", 5), "ab cd");
    assert_eq!(settle_bank::to_sepa_latin("ab cd ef", 6), "ab cd");
    assert_eq!(settle_bank::to_nacha_ascii("  ab   cd", 4), "AB C");
    let holder = settle_bank::HolderName::parse("Jane Doe").unwrap();
    assert_eq!(holder.to_string(), "Jane Doe");
}
