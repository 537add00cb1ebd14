//! Fuzzing of every parser of outside input, as property tests that run in CI: arbitrary
//! bytes and structured mutations never panic and always yield a value or a coded error;
//! amounts, rates and instants are checked against oracles written here (value or code).
//! A longer run: `PROPTEST_CASES=200000 cargo test --release --test it fuzz_parsers::`.

use proptest::prelude::*;
use settle::domain::DomainError;
use settle::domain::event::PayoutMethod;
use settle::domain::ids::EventId;
use settle::domain::money::{Rate, parse_micro_usdc};
use settle::domain::time::{parse_instant_or_date_ms, parse_rfc3339_ms};
use settle::ledger::methods::validate;
use settle::wire::import::parse_line;

fn coded(e: &DomainError) -> bool {
    !e.code.is_empty()
        && e.code
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !e.message.is_empty()
}

/// JSON-ish text built from fragments that parsers care about.
fn jsonish() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("\"type\":".to_owned()),
        Just("\"usage\"".to_owned()),
        Just("\"provider.register\"".to_owned()),
        Just("\"adjustment\"".to_owned()),
        Just(",".to_owned()),
        Just("\"event_id\":".to_owned()),
        Just("\"started_at\":".to_owned()),
        Just("\"2026-11-23T10:00:00Z\"".to_owned()),
        Just("\"amount_usdc\":".to_owned()),
        Just("\"-12.5\"".to_owned()),
        Just("1e309".to_owned()),
        Just("null".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("\"\\u0000\"".to_owned()),
        "\\PC{0,8}".prop_map(|s| s),
    ];
    proptest::collection::vec(fragment, 0..24).prop_map(|v| v.concat())
}

const VALID_LINES: &[&str] = &[
    r#"{"type":"provider.register","provider_id":"prv_42","name":"Acme GPU","email":"ops@acme.test","tier":"community","schedule":"weekly","payout_method":{"kind":"sepa","iban":"DE89370400440532013000","holder":"Acme GPU GmbH"}}"#,
    r#"{"type":"usage","event_id":"agt-19:000123","provider_id":"prv_42","gpu_id":"gpu_42_0","rental_id":"rnt_9001","started_at":"2026-11-23T10:00:00Z","ended_at":"2026-11-23T11:00:00Z","rate_usdc_per_hour":"2.49"}"#,
    r#"{"type":"adjustment","adjustment_id":"adj-2026-001","provider_id":"prv_42","amount_usdc":"-12.500000","reason":"chargeback","reference":"case-77"}"#,
    r#"{"type":"provider.update","provider_id":"prv_7","payout_method":{"kind":"ach","routing":"021000021","account":"123456789","account_type":"checking","holder":"Jane Doe","entity":"individual"}}"#,
];

/// Cases per property: 3,000 in CI, `PROPTEST_CASES` for a long run.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn import_lines_never_panic(text in jsonish()) {
        if let Err(e) = parse_line(&text) {
            prop_assert!(coded(&e), "{e:?}");
        }
    }

    #[test]
    fn mutated_valid_lines_never_panic(which in 0..VALID_LINES.len(), at in 0usize..400, byte in any::<u8>(), cut in any::<bool>()) {
        let mut bytes = VALID_LINES[which].as_bytes().to_vec();
        let i = at % bytes.len();
        if cut { bytes.truncate(i) } else { bytes[i] = byte }
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e) = parse_line(&text) {
            prop_assert!(coded(&e), "{e:?}");
        }
    }

    #[test]
    fn scalar_parsers_never_panic(text in "\\PC{0,64}") {
        for r in [parse_micro_usdc(&text).map(|_| ()), Rate::parse(&text).map(|_| ()), parse_rfc3339_ms(&text).map(|_| ()),
                  parse_instant_or_date_ms(&text).map(|_| ()), EventId::parse(&text).map(|_| ())] {
            if let Err(e) = r {
                prop_assert!(coded(&e), "{e:?}");
            }
        }
    }

    #[test]
    fn payout_method_validation_never_panics(wallet in "\\PC{0,60}", iban in "[A-Z0-9 ]{0,40}", routing in "[0-9]{0,12}", holder in "\\PC{0,90}") {
        let methods = [
            PayoutMethod::Solana { wallet: wallet.clone() },
            PayoutMethod::Sepa { iban: iban.clone(), bic: Some(wallet.chars().take(11).collect()), holder: holder.clone() },
            PayoutMethod::Ach { routing, account: iban, account_type: "checking".into(), holder, entity: "business".into() },
        ];
        for m in methods {
            if let Err(e) = validate(&m) {
                prop_assert!(coded(&e), "{e:?}");
            }
        }
    }

    /// Amounts against an oracle written here: the exact value, or the code that says why not.
    #[test]
    fn amounts_parse_to_the_oracles_value_or_its_code(
        sign in prop_oneof![Just(""), Just("-"), Just("+")],
        whole in "[0-9]{1,14}",
        frac in proptest::option::of("[0-9]{0,8}"),
    ) {
        let text = match &frac {
            Some(f) => format!("{sign}{whole}.{f}"),
            None => format!("{sign}{whole}"),
        };
        let frac = frac.unwrap_or_default();
        let expected: Result<i64, &str> = if text.ends_with('.') {
            Err("invalid_amount")
        } else if frac.len() > 6 {
            Err("amount_precision")
        } else {
            let magnitude = whole.parse::<i128>().unwrap() * 1_000_000
                + format!("{frac:0<6}").parse::<i128>().unwrap();
            match i64::try_from(magnitude) {
                Ok(m) => Ok(if sign == "-" { -m } else { m }),
                Err(_) => Err("amount_out_of_range"),
            }
        };
        let got = parse_micro_usdc(&text).map_err(|e| e.code.to_string());
        prop_assert_eq!(&got, &expected.map_err(str::to_owned), "{}", text);
        if let Ok(v) = got {
            prop_assert_eq!(parse_micro_usdc(&settle::domain::money::format_micro_usdc(v)).unwrap(), v);
        }
    }

    /// Rates against an oracle: accepted exactly when 0 < rate <= 10000 with at most six
    /// significant decimals (trailing zeros do not count), at the oracle's micro-USDC.
    #[test]
    fn rates_parse_to_the_oracles_value_or_are_refused(
        whole in "[0-9]{1,12}",
        frac in proptest::option::of("[0-9]{1,9}"),
    ) {
        let text = match &frac {
            Some(f) => format!("{whole}.{f}"),
            None => whole.clone(),
        };
        let significant = frac.as_deref().unwrap_or("").trim_end_matches('0');
        let micros = whole.parse::<i128>().unwrap() * 1_000_000
            + format!("{:0<6}", significant.get(..6.min(significant.len())).unwrap_or(""))
                .parse::<i128>()
                .unwrap();
        let valid = significant.len() <= 6 && micros > 0 && micros <= 10_000 * 1_000_000;
        match Rate::parse(&text) {
            Ok(rate) => {
                prop_assert!(valid, "{} accepted", text);
                prop_assert_eq!(i128::from(rate.micro_usdc_per_hour()), micros, "{}", text);
            }
            Err(e) => {
                prop_assert!(!valid, "{} refused: {:?}", text, e);
                prop_assert_eq!(e.code, "invalid_rate");
            }
        }
    }

    /// Instants written by the engine read back to the same millisecond.
    #[test]
    fn instants_round_trip(ms in -62_000_000_000_000i64..250_000_000_000_000) {
        let text = settle::domain::time::format_ms(ms);
        prop_assert_eq!(parse_rfc3339_ms(&text).unwrap(), ms, "{}", text);
    }

    #[test]
    fn bank_return_codes_never_panic(code in "\\PC{0,8}") {
        let _ = settle_bank::ReturnReason::parse(&code);
    }
}

#[test]
fn valid_lines_parse() {
    for line in VALID_LINES {
        parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
}
