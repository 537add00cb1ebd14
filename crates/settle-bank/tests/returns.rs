//! Return reason codes.

use settle_bank::{BankRail, ReturnReason};

#[test]
fn required_sepa_codes_parse() {
    let codes = [
        ("AC01", true),
        ("AC04", true),
        ("AC06", true),
        ("AG01", true),
        ("AG02", false),
        ("AM04", false),
        ("AM05", false),
        ("BE04", true),
        ("MD07", true),
        ("MS02", false),
        ("MS03", false),
        ("RC01", true),
        ("RR01", false),
        ("RR02", false),
        ("RR03", true),
        ("RR04", false),
        ("FF01", false),
        ("DUPL", false),
        ("TECH", false),
        ("CUST", false),
    ];
    for (code, invalid) in codes {
        let r = ReturnReason::parse(code).unwrap_or_else(|e| panic!("{code}: {e}"));
        assert_eq!(r.code(), code);
        assert_eq!(r.rail(), BankRail::Sepa, "{code}");
        assert_eq!(r.invalidates_account_details(), invalid, "{code}");
        assert!(!r.description().is_empty());
    }
}

#[test]
fn ach_codes_r01_to_r33_parse_with_descriptions() {
    for n in 1..=33 {
        let code = format!("R{n:02}");
        let r = ReturnReason::parse(&code).unwrap_or_else(|e| panic!("{code}: {e}"));
        assert_eq!(r.code(), code);
        assert_eq!(r.rail(), BankRail::Ach);
        assert!(r.description().len() > 5, "{code}");
    }
    let described = [
        ("R01", "Insufficient Funds", false),
        ("R02", "Account Closed", true),
        ("R03", "No Account/Unable to Locate Account", true),
        ("R04", "Invalid Account Number Structure", true),
        ("R13", "Invalid ACH Routing Number", true),
        ("R24", "Duplicate Entry", false),
    ];
    for (code, description, invalid) in described {
        let r = ReturnReason::parse(code).expect("known");
        assert_eq!(r.description(), description);
        assert_eq!(r.invalidates_account_details(), invalid, "{code}");
    }
}

#[test]
fn parsing_is_lenient_about_case_and_whitespace() {
    let r = ReturnReason::parse(" ac04\n").expect("known");
    assert_eq!(r.code(), "AC04");
    assert_eq!(r, ReturnReason::parse("AC04").expect("known"));
    assert_eq!(ReturnReason::parse("r03").map(|r| r.code()), Ok("R03"));
    assert!(r.to_string().starts_with("AC04 "));
}

#[test]
fn every_listed_reason_round_trips() {
    let mut n = 0;
    for r in ReturnReason::all() {
        assert_eq!(ReturnReason::parse(r.code()), Ok(r));
        n += 1;
    }
    assert!(n >= 53);
}
