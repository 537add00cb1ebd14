//! The bank simulator closes the loop: the engine's own files (written with the crate's
//! writers) are answered, the answers read back with `read_answer`, and every payment is
//! accounted for exactly once with its amount and status. The camt.054 it writes is
//! validated against the official XSD with xmllint.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{NaiveDate, NaiveDateTime};
use common::{aba, aba_check_digit, camt054_schema, iban, id, name, xmllint};
use settle_bank::{
    AchAccountNumber, AchAccountType, AchAnswerKind, AchCorrection, AchEntity, AchIndividualId,
    BankAnswer, Booking, ChangeCode, CreditDebit, EntryStatus, NachaEntry, NachaFile, ReasonCode,
    SepaBatch, SepaPayment, SimulateError, SimulatedAnswers, SimulationConfig, StatusClass,
    StatusTarget, read_answer, simulate::simulate, write_nacha, write_pain001,
};

fn date(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").expect("date")
}

fn at(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").expect("time")
}

const CREDITORS: &[&str] = &[
    "NL91ABNA0417164300",
    "FR1420041010050500013M02606",
    "AT611904300234573201",
    "BE68539007547034",
    "ES9121000418450200051332",
];

/// `count` payments over two execution dates (two `PmtInf` blocks).
fn sepa_batch(count: usize) -> SepaBatch {
    let payments = (0..count)
        .map(|n| SepaPayment {
            requested_execution_date: date(if n % 3 == 0 {
                "2026-12-02"
            } else {
                "2026-12-01"
            }),
            end_to_end_id: id(&format!("PO-2026-{n:06}")),
            amount_eur_cents: 1 + (n as i64 * 48_271) % 2_500_000,
            creditor_name: name(&format!("Provider {n}")),
            creditor_iban: iban(CREDITORS[n % CREDITORS.len()]),
            creditor_bic: None,
            remittance_info: "settle payout 2026-W48".to_owned(),
        })
        .collect();
    SepaBatch {
        msg_id: id("SETTLE-2026-11-30-0001"),
        created_at: at("2026-11-30T06:00:00"),
        initiating_party_name: name("Settle Compute Marketplace GmbH"),
        debtor_name: name("Settle Compute Marketplace GmbH"),
        debtor_iban: iban("DE89370400440532013000"),
        debtor_bic: None,
        payments,
    }
}

fn routing(n: usize) -> String {
    let first8 = format!(
        "{}{:06}",
        ["80", "72", "61", "32"][n % 4],
        (n * 7919) % 1_000_000
    );
    format!("{first8}{}", aba_check_digit(&first8))
}

fn nacha_file(count: usize) -> NachaFile {
    let entries = (0..count)
        .map(|n| NachaEntry {
            routing: aba(&routing(n)),
            account: AchAccountNumber::parse(&format!("{:0>9}", n * 31 + 7)).expect("account"),
            account_type: if n % 4 == 1 {
                AchAccountType::Savings
            } else {
                AchAccountType::Checking
            },
            entity: if n % 3 == 0 {
                AchEntity::Business
            } else {
                AchEntity::Individual
            },
            amount_usd_cents: 1 + (n as i64 * 48_271) % 5_000_000,
            individual_id: AchIndividualId::parse(&format!("PO-{n:06}")).expect("id"),
            individual_name: name(&format!("Provider Nr {n}")),
        })
        .collect();
    NachaFile {
        immediate_destination: aba("021000021"),
        immediate_origin: "1123456789".to_owned(),
        destination_name: "JPMORGAN CHASE".to_owned(),
        origin_name: "Settle Compute Inc".to_owned(),
        file_creation: at("2026-11-30T06:05:00"),
        file_id_modifier: 'A',
        company_name: "Settle Compute".to_owned(),
        company_id: "1123456789".to_owned(),
        company_entry_description: "PAYOUT".to_owned(),
        effective_entry_date: date("2026-12-01"),
        odfi_routing: aba("011000015"),
        entries,
    }
}

fn config(seed: u64) -> SimulationConfig {
    SimulationConfig::new(seed, date("2026-12-01"), at("2026-12-01T10:30:00"))
}

fn code(c: &str) -> ReasonCode {
    ReasonCode::parse(c).expect("code")
}

fn sepa_answers(batch: &SepaBatch, cfg: &SimulationConfig) -> (String, String) {
    let xml = write_pain001(batch).expect("pain.001");
    match simulate(xml.as_bytes(), cfg).expect("simulate") {
        SimulatedAnswers::Sepa {
            status_report,
            notification,
        } => (status_report, notification),
        other => panic!("expected SEPA answers, got {other:?}"),
    }
}

/// Validates a camt.054 against the official XSD (skipped without xmllint or the XSD).
fn assert_camt054_valid(xml: &str) {
    if let Some(schema) = camt054_schema("camt.054 XSD validation")
        && let Err(e) = xmllint(&schema, xml)
    {
        panic!("xmllint rejected the camt.054: {e}\n--- file ---\n{xml}");
    }
}

/// What the answers say about one payment.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Seen {
    status: Vec<(String, Option<String>)>,
    debits: Vec<i64>,
    returns: Vec<(i64, Option<String>)>,
}

/// Collects, per end-to-end id, every status, debit and return in the answers.
fn collect(status: &str, notification: &str) -> BTreeMap<String, Seen> {
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let BankAnswer::PaymentStatusReport(report) = read_answer(status.as_bytes()).expect("pain.002")
    else {
        panic!("not a status report");
    };
    assert_eq!(report.original_msg_id, "SETTLE-2026-11-30-0001");
    for e in &report.entries {
        if let StatusTarget::Transaction { end_to_end_id, .. } = &e.target {
            let reason = e.reason_code().map(|r| r.as_str().to_owned());
            let s = seen.entry(end_to_end_id.clone()).or_default();
            s.status.push((e.status.as_str().to_owned(), reason));
        }
    }
    let BankAnswer::DebitCreditNotification(camt) =
        read_answer(notification.as_bytes()).expect("camt.054")
    else {
        panic!("not a notification");
    };
    for entry in &camt.entries {
        assert_eq!(entry.status, EntryStatus::Booked);
        for tx in &entry.transactions {
            let e2e = tx.end_to_end_id.clone().expect("end-to-end id");
            let cents = tx.amount.expect("amount").cents;
            assert_eq!(cents, entry.amount.cents, "one transaction per entry");
            let s = seen.entry(e2e).or_default();
            match entry.direction {
                CreditDebit::Debit => s.debits.push(cents),
                CreditDebit::Credit => {
                    let info = tx.return_info.as_ref().expect("a credit is a return");
                    let reason = info.reason_code.as_ref().map(|r| r.as_str().to_owned());
                    s.returns.push((cents, reason));
                }
            }
        }
    }
    seen
}

#[test]
fn sepa_round_trip_accounts_for_every_payment_once() {
    let batch = sepa_batch(120);
    let mut cfg = config(7);
    cfg.rejections_per_mille = 200;
    cfg.returns_per_mille = 200;
    let (status, notification) = sepa_answers(&batch, &cfg);
    assert_camt054_valid(&notification);
    let seen = collect(&status, &notification);
    assert_eq!(
        seen.len(),
        batch.payments.len(),
        "no unknown end-to-end ids"
    );
    let (mut rejected, mut returned, mut settled) = (0, 0, 0);
    for p in &batch.payments {
        let s = &seen[p.end_to_end_id.as_str()];
        assert_eq!(s.status.len(), 1, "{}: one status", p.end_to_end_id);
        let (sts, reason) = &s.status[0];
        match sts.as_str() {
            "RJCT" => {
                rejected += 1;
                let reason = reason.as_deref().expect("a rejection has a reason");
                assert!(["AC01", "AC04", "MS03"].contains(&reason), "{reason}");
                assert!(
                    s.debits.is_empty() && s.returns.is_empty(),
                    "rejected: never booked"
                );
            }
            "ACCP" => {
                assert_eq!(
                    s.debits,
                    [p.amount_eur_cents],
                    "{}: booked once",
                    p.end_to_end_id
                );
                match s.returns.as_slice() {
                    [] => settled += 1,
                    [(cents, reason)] => {
                        returned += 1;
                        assert_eq!(*cents, p.amount_eur_cents);
                        let reason = reason.as_deref().expect("return reason");
                        assert!(["AC04", "AC01", "MD07"].contains(&reason), "{reason}");
                    }
                    more => panic!("{}: returned {} times", p.end_to_end_id, more.len()),
                }
            }
            other => panic!("unexpected status {other}"),
        }
    }
    // 20 % each of 120, drawn per payment: all three outcomes occur.
    assert!(
        rejected > 5 && returned > 5 && settled > 40,
        "{rejected} {returned} {settled}"
    );
}

#[test]
fn sepa_status_report_groups_say_accp_part_or_rjct() {
    let batch = sepa_batch(30);
    let (status, _) = sepa_answers(&batch, &config(1));
    let BankAnswer::PaymentStatusReport(report) = read_answer(status.as_bytes()).unwrap() else {
        panic!()
    };
    assert_eq!(report.entries[0].target, StatusTarget::Message);
    assert_eq!(report.entries[0].status.as_str(), "ACCP");
    let blocks: Vec<_> = report
        .entries
        .iter()
        .filter(|e| matches!(e.target, StatusTarget::PaymentInformation { .. }))
        .collect();
    assert_eq!(blocks.len(), 2, "one per execution date");
    assert!(
        report
            .entries
            .iter()
            .all(|e| e.status.class() == StatusClass::Accepted)
    );

    let mut all = config(1);
    all.rejections_per_mille = 1000;
    let (status, notification) = sepa_answers(&batch, &all);
    let BankAnswer::PaymentStatusReport(report) = read_answer(status.as_bytes()).unwrap() else {
        panic!()
    };
    assert!(report.entries.iter().all(|e| e.status.as_str() == "RJCT"));
    assert_eq!(
        read_answer(notification.as_bytes()).unwrap().entry_count(),
        0
    );
    assert_camt054_valid(&notification);

    let mut half = config(1);
    half.rejections_per_mille = 500;
    let (status, _) = sepa_answers(&batch, &half);
    let BankAnswer::PaymentStatusReport(report) = read_answer(status.as_bytes()).unwrap() else {
        panic!()
    };
    assert_eq!(report.entries[0].status.as_str(), "PART");
}

#[test]
fn sepa_batch_booking_books_each_block_once_with_its_total() {
    let batch = sepa_batch(40);
    let mut cfg = config(11);
    cfg.booking = Booking::Batch;
    cfg.rejections_per_mille = 250;
    cfg.returns_per_mille = 100;
    let (status, notification) = sepa_answers(&batch, &cfg);
    assert_camt054_valid(&notification);
    let seen = collect(&status, &notification);
    let BankAnswer::DebitCreditNotification(camt) = read_answer(notification.as_bytes()).unwrap()
    else {
        panic!()
    };
    let debits: Vec<_> = camt
        .entries
        .iter()
        .filter(|e| e.direction == CreditDebit::Debit)
        .collect();
    assert_eq!(debits.len(), 2, "one booking per PmtInf");
    for d in debits {
        assert!(d.transactions.is_empty());
        let [b] = d.batches.as_slice() else {
            panic!("one Btch")
        };
        let pmt_inf_id = b.pmt_inf_id.as_deref().expect("PmtInfId");
        let day = &pmt_inf_id[pmt_inf_id.len() - 8..];
        let expected: Vec<&SepaPayment> = batch
            .payments
            .iter()
            .filter(|p| p.requested_execution_date.format("%Y%m%d").to_string() == day)
            .filter(|p| seen[p.end_to_end_id.as_str()].status[0].0 == "ACCP")
            .collect();
        let total: i64 = expected.iter().map(|p| p.amount_eur_cents).sum();
        assert_eq!(b.tx_count, Some(expected.len() as u64));
        assert_eq!(b.total.map(|t| t.cents), Some(total));
        assert_eq!(d.amount.cents, total);
        assert_eq!(b.msg_id.as_deref(), Some("SETTLE-2026-11-30-0001"));
    }
}

#[test]
fn nacha_round_trip_returns_and_changes_match_by_trace() {
    let file = nacha_file(200);
    let text = write_nacha(&file).expect("nacha");
    let mut cfg = config(3);
    cfg.returns_per_mille = 150;
    cfg.changes_per_mille = 150;
    cfg.ach_return_codes = vec![code("R01"), code("R03")];
    cfg.ach_change_codes = ["C01", "C02", "C05"]
        .iter()
        .map(|c| ChangeCode::parse(c).unwrap())
        .collect();
    let SimulatedAnswers::Nacha { returns } = simulate(text.as_bytes(), &cfg).unwrap() else {
        panic!("expected NACHA answers")
    };
    let BankAnswer::AchReturns(answers) = read_answer(returns.as_bytes()).expect("read returns")
    else {
        panic!()
    };
    // The engine's traces: ODFI prefix and the sequence in output order (CCD batch first).
    let sent = settle_bank::read_sent_nacha(&text).unwrap();
    let by_trace: BTreeMap<_, _> = sent
        .batches
        .iter()
        .flat_map(|b| b.entries.iter())
        .map(|e| (e.trace.clone(), e))
        .collect();
    assert_eq!(by_trace.len(), 200);
    let mut once = BTreeSet::new();
    let (mut returned, mut changed) = (0, 0);
    for a in &answers.entries {
        assert!(once.insert(a.original_trace.clone()), "answered twice");
        let original = by_trace[&a.original_trace];
        assert_eq!(a.individual_id, original.individual_id);
        assert_eq!(a.original_rdfi, original.routing[..8]);
        match &a.kind {
            AchAnswerKind::Return { reason, .. } => {
                returned += 1;
                assert!(["R01", "R03"].contains(&reason.as_str()));
                assert_eq!(a.amount_usd_cents, original.amount_usd_cents);
                assert!(a.transaction_code == "21" || a.transaction_code == "31");
            }
            AchAnswerKind::ChangeNotice {
                change, correction, ..
            } => {
                changed += 1;
                assert_eq!(a.amount_usd_cents, 0);
                assert_eq!(a.sec_code, "COR");
                let ok = matches!(
                    (change.as_str(), correction),
                    ("C01", Some(AchCorrection::Account(_)))
                        | ("C02", Some(AchCorrection::Routing(_)))
                        | ("C05", Some(AchCorrection::TransactionCode(_)))
                );
                assert!(ok, "{change}: {correction:?}");
            }
        }
    }
    assert!(returned > 10 && changed > 10, "{returned} {changed}");
}

#[test]
fn same_input_and_config_give_the_same_bytes() {
    let batch = sepa_batch(25);
    let mut cfg = config(42);
    cfg.rejections_per_mille = 300;
    cfg.returns_per_mille = 300;
    assert_eq!(sepa_answers(&batch, &cfg), sepa_answers(&batch, &cfg));
    let other = sepa_answers(&batch, &config(43));
    assert_ne!(sepa_answers(&batch, &cfg), other);

    let text = write_nacha(&nacha_file(30)).unwrap();
    let mut cfg = config(42);
    cfg.returns_per_mille = 500;
    let a = simulate(text.as_bytes(), &cfg).unwrap();
    assert_eq!(a, simulate(text.as_bytes(), &cfg).unwrap());
    cfg.seed = 9;
    assert_ne!(a, simulate(text.as_bytes(), &cfg).unwrap());
}

#[test]
fn nothing_failed_gives_no_returns() {
    let text = write_nacha(&nacha_file(12)).unwrap();
    let SimulatedAnswers::Nacha { returns } = simulate(text.as_bytes(), &config(5)).unwrap() else {
        panic!()
    };
    assert_eq!(read_answer(returns.as_bytes()).unwrap().entry_count(), 0);
    assert_eq!(returns.lines().count() % 10, 0, "blocked by 10");
}

#[test]
fn bad_configurations_and_inputs_are_refused_with_codes() {
    let xml = write_pain001(&sepa_batch(3)).unwrap();
    let ach = write_nacha(&nacha_file(3)).unwrap();
    let mut too_much = config(1);
    too_much.rejections_per_mille = 600;
    too_much.returns_per_mille = 500;
    let mut no_codes = config(1);
    no_codes.returns_per_mille = 10;
    no_codes.sepa_return_codes.clear();
    let mut bad_ach = config(1);
    bad_ach.ach_return_codes = vec![code("AC04")];
    let mut bad_change = config(1);
    bad_change.ach_change_codes = vec![ChangeCode::parse("C13").unwrap()];
    let cases: Vec<(&[u8], SimulationConfig, &str)> = vec![
        (xml.as_bytes(), too_much, "share_out_of_range"),
        (xml.as_bytes(), no_codes, "no_codes"),
        (ach.as_bytes(), bad_ach, "invalid_ach_return_code"),
        (ach.as_bytes(), bad_change, "unsupported_change_code"),
        (b"hello", config(1), "not_a_payment_file"),
        (
            b"<Document><BkToCstmrStmt/></Document>",
            config(1),
            "not_a_payment_file",
        ),
        (b"<Document><CstmrCdtTrfInitn>", config(1), "malformed_xml"),
    ];
    for (input, cfg, expected) in cases {
        let err: SimulateError = simulate(input, &cfg).expect_err(expected);
        assert_eq!(err.code(), expected, "{err}");
    }
}
