//! One fixed case for every error code, and transliteration examples.

mod common;

use chrono::{NaiveDate, NaiveDateTime};
use common::{aba, iban, id, make_iban, name};
use settle_bank::{
    AbaRouting, AchAccountNumber, AchAccountType, AchEntity, AchIndividualId, Bic, HolderName,
    Iban, NachaEntry, NachaError, NachaFile, ReturnReason, SepaBatch, SepaError, SepaId,
    SepaPayment, to_nacha_ascii, to_sepa_latin, write_nacha, write_pain001,
};

#[test]
fn iban_error_codes() {
    let cases = [
        ("DE89-3704-0044-0532-0130-00", "invalid_iban_characters"),
        ("DE89370400440532013ÄÖ", "invalid_iban_characters"),
        ("", "invalid_iban_format"),
        ("1289370400440532013000", "invalid_iban_format"),
        ("DEX9370400440532013000", "invalid_iban_format"),
        ("XX89370400440532013000", "unknown_iban_country"),
        ("US89370400440532013000", "unknown_iban_country"),
        ("DE8937040044053201300", "invalid_iban_length"),
        ("DE893704004405320130000", "invalid_iban_length"),
        (
            "DE89370400440532013000000000000000000000000000",
            "invalid_iban_length",
        ),
        ("DE88370400440532013000", "invalid_iban_checksum"),
        ("DE89370400440532013001", "invalid_iban_checksum"),
        ("GB82WEST12345698765433", "invalid_iban_checksum"),
    ];
    for (input, code) in cases {
        let err = Iban::parse(input).expect_err(input);
        assert_eq!(err.code(), code, "{input}: {err}");
    }
    for check in ["00", "01", "99"] {
        let s = format!("DE{check}370400440532013000");
        assert_eq!(
            Iban::parse(&s).map_err(|e| e.code()),
            Err("invalid_iban_checksum")
        );
    }
}

#[test]
fn iban_alias_check_digits_are_rejected() {
    // Find a BBAN whose correct check digits are 98, so that 01 also passes mod 97.
    let bban = (0u64..)
        .map(|n| format!("{n:018}"))
        .find(|b| make_iban("DE", b)[2..4] == *"98")
        .expect("some BBAN");
    assert!(Iban::parse(&format!("DE98{bban}")).is_ok());
    assert_eq!(
        common::mod97(&format!("{bban}DE01")),
        1,
        "01 is a mod-97 alias of 98"
    );
    assert_eq!(
        Iban::parse(&format!("DE01{bban}")).map_err(|e| e.code()),
        Err("invalid_iban_checksum")
    );
}

#[test]
fn bic_error_code() {
    for input in [
        "",
        "COBADEF",
        "COBADEFFX",
        "COBADEFFXXXX",
        "C0BADEFF",
        "COBAD3FF",
        "COBADEF_",
    ] {
        let err = Bic::parse(input).expect_err(input);
        assert_eq!(err.code(), "invalid_bic", "{input}");
    }
}

#[test]
fn aba_error_codes() {
    let cases = [
        ("", "invalid_aba_format"),
        ("02100002", "invalid_aba_format"),
        ("0210000210", "invalid_aba_format"),
        ("02100002a", "invalid_aba_format"),
        ("021 00021", "invalid_aba_format"),
        ("131000000", "invalid_aba_prefix"),
        ("990000000", "invalid_aba_prefix"),
        ("021000022", "invalid_aba_check_digit"),
        ("011000016", "invalid_aba_check_digit"),
    ];
    for (input, code) in cases {
        let err = AbaRouting::parse(input).expect_err(input);
        assert_eq!(err.code(), code, "{input}");
    }
}

#[test]
fn account_number_error_code() {
    for input in [
        "",
        "   ",
        "123456789012345678",
        "12 34",
        "12_34",
        "--",
        "１２３",
    ] {
        let err = AchAccountNumber::parse(input).expect_err(input);
        assert_eq!(err.code(), "invalid_ach_account_number", "{input}");
    }
}

#[test]
fn holder_name_error_code() {
    for input in [
        "",
        "   ",
        "Jane\nDoe",
        "Jane\u{0000}Doe",
        "Jane\u{202E}eoD",
        "Jane\u{200B}Doe",
        &"x".repeat(71),
        "💸💸",
        "田中太郎",
        "---",
    ] {
        let err = HolderName::parse(input).expect_err(input);
        assert_eq!(err.code(), "invalid_holder_name", "{input:?}");
    }
    assert_eq!(name("  Jane Doe \n").as_str(), "Jane Doe");
    assert!(HolderName::parse(&"ä".repeat(70)).is_ok());
    assert!(HolderName::parse("田中 Taro").is_ok());
}

#[test]
fn sepa_id_error_codes() {
    let cases = [
        ("", "invalid_sepa_id_length"),
        ("A".repeat(36).leak() as &str, "invalid_sepa_id_length"),
        ("PO 1", "invalid_sepa_id_characters"),
        ("PO_1", "invalid_sepa_id_characters"),
        ("PÖ-1", "invalid_sepa_id_characters"),
        ("PO&1", "invalid_sepa_id_characters"),
        ("/PO1", "invalid_sepa_id_characters"),
        ("PO1/", "invalid_sepa_id_characters"),
        ("PO//1", "invalid_sepa_id_characters"),
    ];
    for (input, code) in cases {
        let err = SepaId::parse(input).expect_err(input);
        assert_eq!(err.code(), code, "{input}");
    }
}

fn sepa_payment(e2e: &str, cents: i64) -> SepaPayment {
    SepaPayment {
        requested_execution_date: NaiveDate::from_ymd_opt(2026, 12, 1).expect("date"),
        end_to_end_id: id(e2e),
        amount_eur_cents: cents,
        creditor_name: name("Jane Doe"),
        creditor_iban: iban("GB82WEST12345698765432"),
        creditor_bic: None,
        remittance_info: "settle payout".to_owned(),
    }
}

fn sepa_batch(payments: Vec<SepaPayment>) -> SepaBatch {
    SepaBatch {
        msg_id: id("MSG-1"),
        created_at: NaiveDateTime::default(),
        initiating_party_name: name("Settle"),
        debtor_name: name("Settle"),
        debtor_iban: iban("DE89370400440532013000"),
        debtor_bic: None,
        payments,
    }
}

fn sepa_code(b: &SepaBatch) -> &'static str {
    write_pain001(b).map(|_| "ok").unwrap_or_else(|e| e.code())
}

#[test]
fn sepa_error_codes() {
    assert_eq!(sepa_code(&sepa_batch(vec![])), "empty_batch");
    let too_many = vec![sepa_payment("PO-1", 1); settle_bank::sepa::SEPA_BATCH_PAYMENTS_MAX + 1];
    assert_eq!(sepa_code(&sepa_batch(too_many)), "too_many_payments");
    assert_eq!(
        sepa_code(&sepa_batch(vec![sepa_payment("PO-1", 0)])),
        "non_positive_amount"
    );
    assert_eq!(
        sepa_code(&sepa_batch(vec![sepa_payment("PO-1", -5)])),
        "non_positive_amount"
    );
    assert_eq!(
        sepa_code(&sepa_batch(vec![sepa_payment("PO-1", 100_000_000_000)])),
        "amount_too_large"
    );
    assert_eq!(
        sepa_code(&sepa_batch(vec![sepa_payment("PO-1", i64::MAX)])),
        "amount_too_large"
    );
    assert_eq!(
        sepa_code(&sepa_batch(vec![
            sepa_payment("PO-1", 1),
            sepa_payment("PO-1", 2)
        ])),
        "duplicate_end_to_end_id"
    );
    let brazil = iban(&make_iban("BR", "00360305000010009795493C1"));
    let mut to_brazil = sepa_batch(vec![sepa_payment("PO-1", 1)]);
    to_brazil.payments[0].creditor_iban = brazil.clone();
    assert_eq!(sepa_code(&to_brazil), "non_sepa_iban");
    let mut from_brazil = sepa_batch(vec![sepa_payment("PO-1", 1)]);
    from_brazil.debtor_iban = brazil;
    assert_eq!(sepa_code(&from_brazil), "non_sepa_iban");
    assert_eq!(sepa_code(&sepa_batch(vec![sepa_payment("PO-1", 1)])), "ok");
    let err = SepaError::EmptyBatch;
    assert!(!err.to_string().is_empty());
}

fn nacha_entry(cents: i64) -> NachaEntry {
    NachaEntry {
        routing: aba("021000021"),
        account: AchAccountNumber::parse("123456789").expect("account"),
        account_type: AchAccountType::Checking,
        entity: AchEntity::Individual,
        amount_usd_cents: cents,
        individual_id: AchIndividualId::parse("PO-1").expect("id"),
        individual_name: name("Jane Doe"),
    }
}

fn nacha_file(entries: Vec<NachaEntry>) -> NachaFile {
    NachaFile {
        immediate_destination: aba("021000021"),
        immediate_origin: "1123456789".to_owned(),
        destination_name: "BANK".to_owned(),
        origin_name: "SETTLE".to_owned(),
        file_creation: NaiveDateTime::default(),
        file_id_modifier: 'A',
        company_name: "SETTLE".to_owned(),
        company_id: "1123456789".to_owned(),
        company_entry_description: "PAYOUT".to_owned(),
        effective_entry_date: NaiveDate::from_ymd_opt(2026, 12, 1).expect("date"),
        odfi_routing: aba("011000015"),
        entries,
    }
}

fn nacha_code(f: &NachaFile) -> &'static str {
    write_nacha(f).map(|_| "ok").unwrap_or_else(|e| e.code())
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one table of NACHA files, each with the stable error code it must give"
)]
fn nacha_error_codes() {
    let ok = || nacha_file(vec![nacha_entry(100)]);
    assert_eq!(nacha_code(&ok()), "ok");
    assert_eq!(nacha_code(&nacha_file(vec![])), "empty_file");
    let too_many = vec![nacha_entry(1); settle_bank::nacha::NACHA_FILE_ENTRIES_MAX + 1];
    assert_eq!(nacha_code(&nacha_file(too_many)), "too_many_entries");
    assert_eq!(
        nacha_code(&nacha_file(vec![nacha_entry(0)])),
        "non_positive_amount"
    );
    assert_eq!(
        nacha_code(&nacha_file(vec![nacha_entry(i64::MIN)])),
        "non_positive_amount"
    );
    assert_eq!(
        nacha_code(&nacha_file(vec![nacha_entry(10_000_000_000)])),
        "amount_too_large"
    );
    let max = settle_bank::nacha::NACHA_AMOUNT_USD_CENTS_MAX;
    assert_eq!(nacha_code(&nacha_file(vec![nacha_entry(max)])), "ok");
    assert_eq!(
        nacha_code(&nacha_file(vec![nacha_entry(max); 101])),
        "total_too_large"
    );
    assert_eq!(nacha_code(&nacha_file(vec![nacha_entry(max); 99])), "ok");

    let with = |edit: &dyn Fn(&mut NachaFile)| {
        let mut f = ok();
        edit(&mut f);
        nacha_code(&f)
    };
    for origin in [
        "123456789",
        "12345678901",
        " 12345678A",
        "1234-56789",
        "abcdefghij",
    ] {
        assert_eq!(
            with(&|f| f.immediate_origin = origin.to_owned()),
            "invalid_immediate_origin",
            "{origin:?}"
        );
    }
    assert_eq!(
        with(&|f| f.immediate_origin = " 021000021".to_owned()),
        "ok"
    );
    for m in ['a', '-', 'Ä', ' '] {
        assert_eq!(
            with(&|f| f.file_id_modifier = m),
            "invalid_file_id_modifier"
        );
    }
    assert_eq!(with(&|f| f.file_id_modifier = '7'), "ok");
    assert_eq!(
        with(&|f| f.destination_name = "X".repeat(24)),
        "invalid_destination_name"
    );
    assert_eq!(with(&|f| f.destination_name = String::new()), "ok");
    assert_eq!(
        with(&|f| f.origin_name = "Y".repeat(24)),
        "invalid_origin_name"
    );
    assert_eq!(
        with(&|f| f.company_name = String::new()),
        "invalid_company_name"
    );
    assert_eq!(
        with(&|f| f.company_name = "🚀".to_owned()),
        "invalid_company_name"
    );
    assert_eq!(
        with(&|f| f.company_name = "Settle Compute Inc".to_owned()),
        "invalid_company_name"
    );
    for company_id in ["", "12345678901", "1-23456789", "1abc"] {
        assert_eq!(
            with(&|f| f.company_id = company_id.to_owned()),
            "invalid_company_id",
            "{company_id:?}"
        );
    }
    assert_eq!(
        with(&|f| f.company_entry_description = "GPU PAYOUTS".to_owned()),
        "invalid_company_entry_description"
    );
    assert_eq!(
        with(&|f| f.company_entry_description = " ".to_owned()),
        "invalid_company_entry_description"
    );
    assert!(!NachaError::EmptyFile.to_string().is_empty());
}

#[test]
fn individual_id_error_code() {
    for input in ["", "PO 1", "PO_1", "1234567890123456", "PÖ"] {
        let err = AchIndividualId::parse(input).expect_err(input);
        assert_eq!(err.code(), "invalid_individual_id", "{input:?}");
    }
    // Too long payout ids are shortened deterministically instead.
    let uuid = "0196f1c2-7a3b-7c4d-8e5f-a1b2c3d4e5f6";
    let short = AchIndividualId::from_payout_id(uuid);
    assert_eq!(short.as_str().len(), 15);
    assert_ne!(
        short,
        AchIndividualId::from_payout_id("0196f1c2-7a3b-7c4d-8e5f-a1b2c3d4e5f7")
    );
}

#[test]
fn return_code_error() {
    for input in ["", "R00", "R99", "AC02", "XXXX", "R1"] {
        let err = ReturnReason::parse(input).expect_err(input);
        assert_eq!(err.code(), "unknown_return_code", "{input:?}");
    }
}

#[test]
fn transliteration_examples() {
    let cases = [
        ("Müller & Söhne GmbH", "Mueller + Soehne GmbH"),
        ("Straße", "Strasse"),
        ("ÄÖÜ äöü ß", "AeOeUe aeoeue ss"),
        ("Crème brûlée à la française", "Creme brulee a la francaise"),
        ("Niño Ñandú", "Nino Nandu"),
        ("Søren Ålborg Æble Œuvre", "Soren Alborg Aeble Oeuvre"),
        ("Łódź Wałęsa", "Lodz Walesa"),
        ("Dvořák Šťastný Žižek", "Dvorak Stastny Zizek"),
        ("Ștefan Țepeș", "Stefan Tepes"),
        ("Erdoğan İzmir", "Erdogan Izmir"),
        ("Jose\u{0301}", "Jose"),
        ("  lots   of\t\nspace  ", "lots of space"),
        ("a_b*c#d@e", "a b c d e"),
        ("it’s “quoted” – really", "it's quoted - really"),
        ("🚀 rocket 🚀", "rocket"),
        ("Ab/12-3?:().,'+", "Ab/12-3?:().,'+"),
        ("田中 Taro", "Taro"),
        ("", ""),
    ];
    for (input, expected) in cases {
        assert_eq!(to_sepa_latin(input, 140), expected, "{input:?}");
    }
    assert_eq!(to_sepa_latin("Müller & Söhne GmbH", 8), "Mueller");
    assert_eq!(to_sepa_latin("Müller & Söhne GmbH", 9), "Mueller +");
    assert_eq!(to_sepa_latin(&"ä".repeat(70), 70), "ae".repeat(35));
    assert_eq!(to_sepa_latin("Öl", 1), "O");
    assert_eq!(
        to_nacha_ascii("Müller & Söhne GmbH", 22),
        "MUELLER & SOEHNE GMBH"
    );
    assert_eq!(to_nacha_ascii("Straße", 4), "STRA");
    assert!(settle_bank::is_sepa_text("Mueller + Soehne"));
    assert!(!settle_bank::is_sepa_text("Müller"));
    assert!(!settle_bank::is_sepa_text("a&b"));
}
