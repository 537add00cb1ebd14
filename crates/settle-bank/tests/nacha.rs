//! NACHA files checked by an independent parser written here: record lengths, record order,
//! counts, entry hashes, totals, block count, blocking, routing check digits and trace
//! numbers.

mod common;

use chrono::{NaiveDate, NaiveDateTime};
use common::{aba, aba_check_digit, aba_valid, name, panic_message};
use settle_bank::{
    AchAccountNumber, AchAccountType, AchEntity, AchIndividualId, NachaEntry, NachaFile,
    write_nacha,
};

// ---------------------------------------------------------------------------------------
// Independent checker.

/// An entry detail record as read back.
#[derive(Debug)]
struct ParsedEntry {
    sec: String,
    transaction_code: String,
    routing: String,
    account: String,
    amount_usd_cents: i64,
    individual_id: String,
    name: String,
    trace: String,
}

fn field(line: &str, from: usize, to: usize) -> &str {
    // NACHA positions are 1-based and inclusive.
    &line[from - 1..to]
}

fn num(s: &str) -> i64 {
    assert!(s.chars().all(|c| c.is_ascii_digit()), "not numeric: {s:?}");
    s.parse().expect("number")
}

/// Parses and checks a whole NACHA file; panics with a message on the first violation.
#[expect(
    clippy::too_many_lines,
    reason = "the NACHA rules checked record by record, in the order the format lists them"
)]
fn check_nacha(content: &str) -> Vec<ParsedEntry> {
    assert!(content.is_ascii(), "file must be ASCII");
    assert!(!content.contains('\r'), "records are separated by \\n only");
    assert!(content.ends_with('\n'), "every record ends with \\n");
    let lines: Vec<&str> = content.split_terminator('\n').collect();
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l.len(), 94, "record {} has {} characters", i + 1, l.len());
    }
    assert_eq!(lines.len() % 10, 0, "blocking factor 10");

    // File header.
    let header = lines[0];
    assert_eq!(field(header, 1, 1), "1");
    assert_eq!(field(header, 2, 3), "01");
    assert_eq!(field(header, 4, 4), " ");
    assert!(aba_valid(field(header, 5, 13)), "immediate destination");
    assert_eq!(field(header, 35, 37), "094");
    assert_eq!(field(header, 38, 39), "10");
    assert_eq!(field(header, 40, 40), "1");
    let modifier = field(header, 34, 34).chars().next().expect("modifier");
    assert!(modifier.is_ascii_uppercase() || modifier.is_ascii_digit());

    let mut entries = Vec::new();
    let mut i = 1;
    let mut batch_count = 0i64;
    let mut file_hash = 0i64;
    let mut file_credit = 0i64;
    let mut trace_seq = 0i64;
    while field(lines[i], 1, 1) == "5" {
        let bh = lines[i];
        batch_count += 1;
        assert_eq!(field(bh, 2, 4), "220", "credits only");
        let sec = field(bh, 51, 53).to_owned();
        assert!(sec == "CCD" || sec == "PPD", "SEC {sec}");
        assert_eq!(field(bh, 79, 79), "1", "originator status");
        let odfi = field(bh, 80, 87);
        assert_eq!(num(field(bh, 88, 94)), batch_count, "batch number");
        assert_ne!(field(bh, 5, 20).trim(), "", "company name");
        i += 1;

        let mut count = 0i64;
        let mut hash = 0i64;
        let mut credit = 0i64;
        while field(lines[i], 1, 1) == "6" {
            let e = lines[i];
            let code = field(e, 2, 3);
            assert!(code == "22" || code == "32", "transaction code {code}");
            let routing = format!("{}{}", field(e, 4, 11), field(e, 12, 12));
            assert!(aba_valid(&routing), "RDFI routing {routing} check digit");
            let amount = num(field(e, 30, 39));
            assert!(amount > 0);
            assert_eq!(field(e, 79, 79), "0", "no addenda");
            let trace = field(e, 80, 94);
            assert_eq!(&trace[..8], odfi, "trace starts with the ODFI");
            trace_seq += 1;
            assert_eq!(num(&trace[8..]), trace_seq, "trace sequence");
            let name = field(e, 55, 76);
            assert!(!name.trim().is_empty());
            assert_eq!(name, name.to_ascii_uppercase(), "upper-case name");
            count += 1;
            hash += num(field(e, 4, 11));
            credit += amount;
            entries.push(ParsedEntry {
                sec: sec.clone(),
                transaction_code: code.to_owned(),
                routing,
                account: field(e, 13, 29).trim_end().to_owned(),
                amount_usd_cents: amount,
                individual_id: field(e, 40, 54).trim_end().to_owned(),
                name: name.trim_end().to_owned(),
                trace: trace.to_owned(),
            });
            i += 1;
        }
        assert!(count > 0, "batch without entries");

        let bc = lines[i];
        assert_eq!(field(bc, 1, 1), "8", "batch control after entries");
        assert_eq!(field(bc, 2, 4), field(bh, 2, 4), "service class");
        assert_eq!(num(field(bc, 5, 10)), count, "entry/addenda count");
        assert_eq!(num(field(bc, 11, 20)), hash % 10_000_000_000, "entry hash");
        assert_eq!(num(field(bc, 21, 32)), 0, "total debit");
        assert_eq!(num(field(bc, 33, 44)), credit, "total credit");
        assert_eq!(field(bc, 45, 54), field(bh, 41, 50), "company id");
        assert_eq!(field(bc, 80, 87), odfi, "ODFI");
        assert_eq!(field(bc, 88, 94), field(bh, 88, 94), "batch number");
        file_hash += hash;
        file_credit += credit;
        i += 1;
    }
    assert!(batch_count > 0, "no batches");

    let fc = lines[i];
    assert_eq!(field(fc, 1, 1), "9", "file control after batches");
    assert_eq!(num(field(fc, 2, 7)), batch_count, "batch count");
    assert_eq!(
        num(field(fc, 8, 13)),
        lines.len() as i64 / 10,
        "block count"
    );
    assert_eq!(num(field(fc, 14, 21)), entries.len() as i64, "entry count");
    assert_eq!(
        num(field(fc, 22, 31)),
        file_hash % 10_000_000_000,
        "file entry hash"
    );
    assert_eq!(num(field(fc, 32, 43)), 0, "file total debit");
    assert_eq!(num(field(fc, 44, 55)), file_credit, "file total credit");
    assert_eq!(field(fc, 56, 94).trim(), "", "reserved");
    i += 1;

    let fillers = &lines[i..];
    assert!(
        fillers.len() < 10,
        "only the filler needed for the last block"
    );
    for f in fillers {
        assert!(f.chars().all(|c| c == '9'), "filler record {f:?}");
    }
    entries
}

// ---------------------------------------------------------------------------------------
// Fixtures.

/// A valid routing number built from a prefix and a counter, check digit computed here.
fn routing(n: usize) -> String {
    let prefixes = ["80", "72", "61", "80", "72", "32", "12", "01"];
    let first8 = format!(
        "{}{:06}",
        prefixes[n % prefixes.len()],
        (n * 7919) % 1_000_000
    );
    format!("{first8}{}", aba_check_digit(&first8))
}

fn entry(n: usize, entity: AchEntity) -> NachaEntry {
    NachaEntry {
        routing: aba(&routing(n)),
        account: AchAccountNumber::parse(&format!("{:0>9}", n * 31 + 7)).expect("account"),
        account_type: if n % 4 == 1 {
            AchAccountType::Savings
        } else {
            AchAccountType::Checking
        },
        entity,
        amount_usd_cents: 1 + (n as i64 * 48_271) % 5_000_000,
        individual_id: AchIndividualId::parse(&format!("PO-{n:06}")).expect("id"),
        individual_name: name(&format!("Provider Nr {n}")),
    }
}

fn file(entries: Vec<NachaEntry>) -> NachaFile {
    NachaFile {
        immediate_destination: aba("021000021"),
        immediate_origin: "1123456789".to_owned(),
        destination_name: "JPMORGAN CHASE".to_owned(),
        origin_name: "Settle Compute Inc".to_owned(),
        file_creation: NaiveDateTime::parse_from_str("2026-11-30 06:05", "%Y-%m-%d %H:%M")
            .expect("time"),
        file_id_modifier: 'A',
        company_name: "Settle Compute".to_owned(),
        company_id: "1123456789".to_owned(),
        company_entry_description: "PAYOUT".to_owned(),
        effective_entry_date: NaiveDate::from_ymd_opt(2026, 12, 1).expect("date"),
        odfi_routing: aba("011000015"),
        entries,
    }
}

fn mixed(count: usize) -> Vec<NachaEntry> {
    (0..count)
        .map(|n| {
            let entity = if n % 3 == 0 {
                AchEntity::Business
            } else {
                AchEntity::Individual
            };
            entry(n, entity)
        })
        .collect()
}

/// Writes, checks with the independent checker, and compares entries with the input.
fn write_and_check(f: &NachaFile) -> (String, Vec<ParsedEntry>) {
    let content = write_nacha(f).expect("write");
    let parsed = check_nacha(&content);
    assert_eq!(parsed.len(), f.entries.len());
    // CCD batch first, then PPD, each in input order.
    let expected = f
        .entries
        .iter()
        .filter(|e| e.entity == AchEntity::Business)
        .chain(
            f.entries
                .iter()
                .filter(|e| e.entity == AchEntity::Individual),
        );
    for (p, e) in parsed.iter().zip(expected) {
        let sec = match e.entity {
            AchEntity::Business => "CCD",
            AchEntity::Individual => "PPD",
        };
        assert_eq!(p.sec, sec);
        let code = match e.account_type {
            AchAccountType::Checking => "22",
            AchAccountType::Savings => "32",
        };
        assert_eq!(p.transaction_code, code);
        assert_eq!(p.routing, e.routing.as_str());
        assert_eq!(p.account, e.account.as_str());
        assert_eq!(p.amount_usd_cents, e.amount_usd_cents);
        assert_eq!(p.individual_id, e.individual_id.as_str());
        assert_eq!(p.name, e.individual_name.as_str().to_ascii_uppercase());
        assert!(p.trace.starts_with("01100001"));
    }
    (content, parsed)
}

fn line_count(content: &str) -> usize {
    content.split_terminator('\n').count()
}

// ---------------------------------------------------------------------------------------

#[test]
fn one_entry() {
    let f = file(vec![entry(1, AchEntity::Individual)]);
    let (content, parsed) = write_and_check(&f);
    assert_eq!(line_count(&content), 10); // 5 records + 5 fillers
    assert_eq!(parsed[0].trace, "011000010000001");
    let lines: Vec<&str> = content.lines().collect();
    let file_header = format!(
        "101 0210000211123456789{date}{time}A094101{dest:<23}{origin:<23}{reference:8}",
        date = "261130",
        time = "0605",
        dest = "JPMORGAN CHASE",
        origin = "SETTLE COMPUTE INC",
        reference = "",
    );
    assert_eq!(lines[0], file_header);
    let batch_header = format!(
        "5220{company:<16}{discretionary:20}1123456789PPD{description:<10}{descriptive:6}261201{settlement:3}1011000010000001",
        company = "SETTLE COMPUTE",
        discretionary = "",
        description = "PAYOUT",
        descriptive = "",
        settlement = "",
    );
    assert_eq!(lines[1], batch_header);
    let entry = format!(
        "632{rdfi}{account:<17}{amount:010}{id:<15}{name:<22}  0011000010000001",
        rdfi = routing(1),
        account = "000000038",
        amount = 48_272,
        id = "PO-000001",
        name = "PROVIDER NR 1",
    );
    assert_eq!(lines[2], entry);
}

#[test]
fn nine_ten_eleven_entries() {
    for (count, lines) in [(9, 20), (10, 20), (11, 20)] {
        let f = file(mixed(count));
        let (content, _) = write_and_check(&f);
        assert_eq!(line_count(&content), lines, "{count} entries");
    }
    // Only individuals: a single PPD batch.
    let only_ppd: Vec<NachaEntry> = (0..10).map(|n| entry(n, AchEntity::Individual)).collect();
    let (content, parsed) = write_and_check(&file(only_ppd));
    assert!(parsed.iter().all(|p| p.sec == "PPD"));
    assert_eq!(content.lines().filter(|l| l.starts_with('5')).count(), 1);
}

#[test]
fn exactly_one_block_needs_no_filler() {
    // 6 entries + file header + batch header + batch control + file control = 10.
    let f = file((0..6).map(|n| entry(n, AchEntity::Business)).collect());
    let (content, _) = write_and_check(&f);
    assert_eq!(line_count(&content), 10);
    assert!(!content.contains(&"9".repeat(94)));
}

#[test]
fn two_hundred_fifty_mixed_entries_with_hash_overflow() {
    let entries = mixed(250);
    let raw_hash: i64 = entries
        .iter()
        .map(|e| e.routing.as_str()[..8].parse::<i64>().expect("digits"))
        .sum();
    assert!(
        raw_hash > 10_000_000_000,
        "exercise the 10-digit truncation"
    );
    let f = file(entries);
    let (content, parsed) = write_and_check(&f);
    assert_eq!(line_count(&content), 260); // 250 + 2 batches × 2 + 2 = 256 → 260
    assert_eq!(parsed.iter().filter(|p| p.sec == "CCD").count(), 84);
    assert_eq!(parsed.iter().filter(|p| p.sec == "PPD").count(), 166);
    assert_eq!(
        parsed.last().map(|p| p.trace.as_str()),
        Some("011000010000250")
    );
}

#[test]
fn names_are_upper_case_ascii_and_cut_to_22() {
    let mut e1 = entry(1, AchEntity::Individual);
    e1.individual_name = name("José Müller-Łukasiewicz & Söhne Holding");
    let mut e2 = entry(2, AchEntity::Business);
    e2.individual_name = name("🚀 Rocket GPU LLC 🚀");
    let f = file(vec![e1, e2]);
    let content = write_nacha(&f).expect("write");
    let parsed = check_nacha(&content);
    assert_eq!(parsed[0].name, "ROCKET GPU LLC");
    assert_eq!(parsed[1].name, "JOSE MUELLER-LUKASIEWI");
    assert_eq!(parsed[1].name.len(), 22);
}

#[test]
fn same_input_gives_same_bytes() {
    let a = write_nacha(&file(mixed(37))).expect("write");
    let b = write_nacha(&file(mixed(37))).expect("write");
    assert_eq!(a, b);
}

/// The checker itself must be able to fail.
#[test]
fn checker_rejects_corrupted_files() {
    let content = write_nacha(&file(mixed(11))).expect("write");
    let lines: Vec<String> = content.lines().map(str::to_owned).collect();
    let rebuild = |lines: &[String]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();

    // Each corruption with what the checker's panic must say it caught.
    let mut corruptions: Vec<(String, &str)> = Vec::new();
    // A changed amount (totals no longer match).
    let mut l = lines.clone();
    let entry_at = l.iter().position(|x| x.starts_with('6')).expect("entry");
    let digit = if &l[entry_at][38..39] == "1" {
        "2"
    } else {
        "1"
    };
    l[entry_at].replace_range(38..39, digit);
    corruptions.push((rebuild(&l), "total credit"));
    // A record one character short.
    let mut l = lines.clone();
    l[0].pop();
    corruptions.push((rebuild(&l), "record 1 has 93 characters"));
    // A missing filler record.
    let mut l = lines.clone();
    l.pop();
    corruptions.push((rebuild(&l), "blocking factor 10"));
    // Two entries swapped (trace sequence broken).
    let mut l = lines.clone();
    l.swap(entry_at, entry_at + 1);
    corruptions.push((rebuild(&l), "trace sequence"));
    // CRLF line ends.
    corruptions.push((
        content.replace('\n', "\r\n"),
        "records are separated by \\n only",
    ));

    for (bad, caught) in corruptions {
        assert_ne!(bad, content);
        let said = panic_message(|| {
            check_nacha(&bad);
        })
        .unwrap_or_else(|| panic!("checker accepted a corrupted file:\n{bad}"));
        assert!(
            said.contains(caught),
            "caught something else than {caught:?}: {said}"
        );
    }
}

/// Where the records before the file control are a multiple of ten, or one more, the file
/// control starts a new block (edges found by mutation testing; ops/MUTANTS.md).
#[test]
fn the_file_control_that_starts_a_new_block_is_counted() {
    // One CCD batch: entries + 3 records before the file control; mixed: entries + 5.
    let business = |count: usize| -> Vec<NachaEntry> {
        (0..count).map(|n| entry(n, AchEntity::Business)).collect()
    };
    for (entries, records_before_control) in [
        (business(7), 10usize),
        (business(8), 11),
        (mixed(5), 10),
        (mixed(6), 11),
        (business(17), 20),
    ] {
        let count = entries.len();
        let (content, _) = write_and_check(&file(entries));
        let expected_blocks = (records_before_control + 1).div_ceil(10);
        assert_eq!(
            line_count(&content),
            expected_blocks * 10,
            "{count} entries: {records_before_control} records and the file control"
        );
    }
}

/// The largest file total is accepted; one cent more is refused.
#[test]
fn the_file_total_limit_is_inclusive() {
    // 100 entries of the largest amount and one of 99 cents: exactly the largest total.
    let mut entries: Vec<NachaEntry> = (0..101).map(|n| entry(n, AchEntity::Business)).collect();
    for e in &mut entries[..100] {
        e.amount_usd_cents = settle_bank::nacha::NACHA_AMOUNT_USD_CENTS_MAX;
    }
    entries[100].amount_usd_cents = 99;
    let total: i64 = entries.iter().map(|e| e.amount_usd_cents).sum();
    assert_eq!(total, settle_bank::nacha::NACHA_TOTAL_USD_CENTS_MAX);
    let (_, parsed) = write_and_check(&file(entries.clone()));
    assert_eq!(parsed.len(), 101);
    entries[100].amount_usd_cents = 100;
    assert!(matches!(
        write_nacha(&file(entries)),
        Err(settle_bank::NachaError::TotalTooLarge)
    ));
}
