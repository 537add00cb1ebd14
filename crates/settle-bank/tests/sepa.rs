//! SEPA pain.001.001.09 files: validated against the official XSD with xmllint, and
//! checked for the SEPA rules the XSD does not enforce by scanning the XML text.

mod common;

use chrono::{NaiveDate, NaiveDateTime};
use common::{assert_xsd_valid, iban, id, name, panic_message, schema, sepa_allowed, xmllint};
use settle_bank::{Bic, SepaBatch, SepaError, SepaPayment, file_sha256_hex, write_pain001};

fn date(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").expect("date")
}

fn created_at() -> NaiveDateTime {
    NaiveDateTime::parse_from_str("2026-11-30T06:00:00", "%Y-%m-%dT%H:%M:%S").expect("time")
}

fn bic(s: &str) -> Bic {
    Bic::parse(s).expect("bic")
}

fn payment(e2e: &str, day: &str, cents: i64, creditor: &str, to: &str) -> SepaPayment {
    SepaPayment {
        requested_execution_date: date(day),
        end_to_end_id: id(e2e),
        amount_eur_cents: cents,
        creditor_name: name(creditor),
        creditor_iban: iban(to),
        creditor_bic: None,
        remittance_info: "settle payout 2026-W48".to_owned(),
    }
}

fn batch(payments: Vec<SepaPayment>, debtor_bic: Option<Bic>) -> SepaBatch {
    SepaBatch {
        msg_id: id("SETTLE-2026-11-30-0001"),
        created_at: created_at(),
        initiating_party_name: name("Settle Compute Marketplace GmbH"),
        debtor_name: name("Settle Compute Marketplace GmbH"),
        debtor_iban: iban("DE89370400440532013000"),
        debtor_bic,
        payments,
    }
}

const CREDITOR_IBANS: &[&str] = &[
    "GB82WEST12345698765432",
    "NL91ABNA0417164300",
    "FR1420041010050500013M02606",
    "AT611904300234573201",
    "BE68539007547034",
    "ES9121000418450200051332",
    "IT60X0542811101000000123456",
    "CH9300762011623852957",
];

// ---------------------------------------------------------------------------------------
// An independent checker of the rules the XSD does not enforce.

/// Undoes the five predefined XML entities.
fn unescape(s: &str) -> String {
    s.replace("&apos;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Inner text of every `<tag>` / `<tag attr="...">` element, in document order (raw XML
/// for container elements).
fn elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = xml;
    loop {
        let open_plain = rest.find(&format!("<{tag}>"));
        let open_attr = rest.find(&format!("<{tag} "));
        let start = match (open_plain, open_attr) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => break,
        };
        let after_open = start + rest[start..].find('>').expect("tag end") + 1;
        let end = after_open + rest[after_open..].find(&close).expect("closing tag");
        out.push(&rest[after_open..end]);
        rest = &rest[end + close.len()..];
    }
    out
}

/// Parses an amount that must have exactly two decimals into cents.
fn cents(amount: &str) -> i64 {
    let (units, fraction) = amount
        .split_once('.')
        .unwrap_or_else(|| panic!("amount {amount:?} has no decimal point"));
    assert_eq!(
        fraction.len(),
        2,
        "amount {amount:?} must have exactly 2 decimals"
    );
    assert!(
        !units.is_empty()
            && units
                .chars()
                .chain(fraction.chars())
                .all(|c| c.is_ascii_digit()),
        "amount {amount:?} is not a plain decimal"
    );
    assert!(
        units == "0" || !units.starts_with('0'),
        "leading zero in {amount:?}"
    );
    units.parse::<i64>().expect("units") * 100 + fraction.parse::<i64>().expect("fraction")
}

/// Checks the SEPA rules on the XML text and against the batch it was written from.
#[expect(
    clippy::too_many_lines,
    reason = "the SEPA rules checked in the order the rulebook lists them"
)]
fn check_sepa_rules(xml: &str, batch: &SepaBatch) {
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"));

    // Every text node is in the SEPA character set (after undoing XML escapes).
    for segment in xml.split('>').skip(1) {
        let text = segment.split('<').next().unwrap_or("");
        if text.trim().is_empty() {
            continue;
        }
        let text = unescape(text);
        assert!(
            text.chars().all(sepa_allowed),
            "text {text:?} has characters outside the SEPA set"
        );
    }

    // Amounts: exactly two decimals, EUR, sums match.
    let amounts: Vec<i64> = elements(xml, "InstdAmt").into_iter().map(cents).collect();
    assert_eq!(amounts.len(), batch.payments.len());
    assert_eq!(
        xml.matches("<InstdAmt Ccy=\"EUR\">").count(),
        batch.payments.len()
    );
    assert_eq!(xml.matches("Ccy=").count(), batch.payments.len());
    let expected_total: i64 = batch.payments.iter().map(|p| p.amount_eur_cents).sum();
    assert_eq!(amounts.iter().sum::<i64>(), expected_total);

    let grp_hdr = elements(xml, "GrpHdr");
    assert_eq!(grp_hdr.len(), 1);
    assert_eq!(
        cents(elements(grp_hdr[0], "CtrlSum")[0]),
        expected_total,
        "GrpHdr CtrlSum = sum of the amounts"
    );
    assert_eq!(
        elements(grp_hdr[0], "NbOfTxs")[0],
        batch.payments.len().to_string()
    );

    let pmt_infs = elements(xml, "PmtInf");
    let mut dates: Vec<&str> = Vec::new();
    let mut seen_txs = 0;
    for pmt_inf in &pmt_infs {
        let txs: Vec<i64> = elements(pmt_inf, "InstdAmt")
            .into_iter()
            .map(cents)
            .collect();
        assert_eq!(elements(pmt_inf, "NbOfTxs")[0], txs.len().to_string());
        assert_eq!(
            cents(elements(pmt_inf, "CtrlSum")[0]),
            txs.iter().sum::<i64>()
        );
        let day = elements(elements(pmt_inf, "ReqdExctnDt")[0], "Dt")[0];
        // Every payment in this block has this execution date.
        for e2e in elements(pmt_inf, "EndToEndId") {
            let p = batch
                .payments
                .iter()
                .find(|p| p.end_to_end_id.as_str() == unescape(e2e))
                .expect("payment for EndToEndId");
            assert_eq!(p.requested_execution_date.to_string(), day);
        }
        dates.push(day);
        seen_txs += txs.len();
        assert_eq!(elements(pmt_inf, "PmtMtd"), ["TRF"]);
        assert_eq!(elements(pmt_inf, "ChrgBr"), ["SLEV"]);
    }
    assert_eq!(seen_txs, batch.payments.len());
    let mut sorted = dates.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(dates, sorted, "one PmtInf per date, ascending");

    // Lengths.
    for nm in elements(xml, "Nm") {
        let nm = unescape(nm);
        assert!(!nm.is_empty() && nm.chars().count() <= 70, "name {nm:?}");
    }
    for ustrd in elements(xml, "Ustrd") {
        assert!(unescape(ustrd).chars().count() <= 140);
    }
    for tag in ["MsgId", "PmtInfId", "EndToEndId"] {
        for v in elements(xml, tag) {
            let v = unescape(v);
            assert!(!v.is_empty() && v.chars().count() <= 35, "{tag} {v:?}");
        }
    }
    let mut e2e: Vec<String> = elements(xml, "EndToEndId")
        .into_iter()
        .map(unescape)
        .collect();
    let n = e2e.len();
    e2e.sort();
    e2e.dedup();
    assert_eq!(e2e.len(), n, "EndToEndIds are unique");
}

/// Writes, validates against the XSD, checks the SEPA rules; returns the XML.
fn write_and_check(batch: &SepaBatch) -> String {
    let xml = write_pain001(batch).expect("write");
    assert_xsd_valid(&xml);
    check_sepa_rules(&xml, batch);
    xml
}

// ---------------------------------------------------------------------------------------

#[test]
fn one_payment_matches_expected_file() {
    let mut p = payment(
        "PO-000001",
        "2026-12-01",
        1234,
        "Jane Doe",
        CREDITOR_IBANS[0],
    );
    p.creditor_bic = Some(bic("WESTGB2L"));
    let b = batch(vec![p], Some(bic("COBADEFFXXX")));
    let xml = write_and_check(&b);
    let expected = r#"<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.001.001.09">
  <CstmrCdtTrfInitn>
    <GrpHdr>
      <MsgId>SETTLE-2026-11-30-0001</MsgId>
      <CreDtTm>2026-11-30T06:00:00</CreDtTm>
      <NbOfTxs>1</NbOfTxs>
      <CtrlSum>12.34</CtrlSum>
      <InitgPty>
        <Nm>Settle Compute Marketplace GmbH</Nm>
      </InitgPty>
    </GrpHdr>
    <PmtInf>
      <PmtInfId>SETTLE-2026-11-30-0001-20261201</PmtInfId>
      <PmtMtd>TRF</PmtMtd>
      <NbOfTxs>1</NbOfTxs>
      <CtrlSum>12.34</CtrlSum>
      <PmtTpInf>
        <SvcLvl>
          <Cd>SEPA</Cd>
        </SvcLvl>
      </PmtTpInf>
      <ReqdExctnDt>
        <Dt>2026-12-01</Dt>
      </ReqdExctnDt>
      <Dbtr>
        <Nm>Settle Compute Marketplace GmbH</Nm>
      </Dbtr>
      <DbtrAcct>
        <Id>
          <IBAN>DE89370400440532013000</IBAN>
        </Id>
      </DbtrAcct>
      <DbtrAgt>
        <FinInstnId>
          <BICFI>COBADEFFXXX</BICFI>
        </FinInstnId>
      </DbtrAgt>
      <ChrgBr>SLEV</ChrgBr>
      <CdtTrfTxInf>
        <PmtId>
          <EndToEndId>PO-000001</EndToEndId>
        </PmtId>
        <Amt>
          <InstdAmt Ccy="EUR">12.34</InstdAmt>
        </Amt>
        <CdtrAgt>
          <FinInstnId>
            <BICFI>WESTGB2L</BICFI>
          </FinInstnId>
        </CdtrAgt>
        <Cdtr>
          <Nm>Jane Doe</Nm>
        </Cdtr>
        <CdtrAcct>
          <Id>
            <IBAN>GB82WEST12345698765432</IBAN>
          </Id>
        </CdtrAcct>
        <RmtInf>
          <Ustrd>settle payout 2026-W48</Ustrd>
        </RmtInf>
      </CdtTrfTxInf>
    </PmtInf>
  </CstmrCdtTrfInitn>
</Document>
"#;
    assert_eq!(xml, expected);
}

#[test]
fn one_payment_without_any_bic_uses_notprovided() {
    let b = batch(
        vec![payment(
            "PO-1",
            "2026-12-01",
            5,
            "Jane Doe",
            CREDITOR_IBANS[1],
        )],
        None,
    );
    let xml = write_and_check(&b);
    let dbtr_agt = elements(&xml, "DbtrAgt");
    assert_eq!(elements(dbtr_agt[0], "Id"), ["NOTPROVIDED"]);
    assert!(!xml.contains("<CdtrAgt>"));
    assert!(!xml.contains("<BICFI>"));
    assert_eq!(elements(&xml, "InstdAmt"), ["0.05"]);
    assert_indented(&xml);
}

/// The writer indents two spaces per level: every line sits at its element's depth.
fn assert_indented(xml: &str) {
    let mut depth = 0usize;
    for line in xml.lines().filter(|l| !l.starts_with("<?")) {
        let text = line.trim_start_matches(' ');
        let closing = text.starts_with("</");
        if closing {
            depth -= 1;
        }
        assert_eq!(line.len() - text.len(), 2 * depth, "{line:?}");
        if !closing && !text.contains("</") && !text.ends_with("/>") {
            depth += 1;
        }
    }
    assert_eq!(depth, 0, "every element closed");
}

/// The largest batch is written; one payment more is refused (an edge found by mutation
/// testing; ops/MUTANTS.md).
#[test]
fn the_batch_size_limit_is_inclusive() {
    let max = settle_bank::sepa::SEPA_BATCH_PAYMENTS_MAX;
    let template = payment("PO-0", "2026-12-01", 1, "Jane Doe", CREDITOR_IBANS[1]);
    let mut payments: Vec<SepaPayment> = (0..max)
        .map(|i| SepaPayment {
            end_to_end_id: id(&format!("PO-{i}")),
            ..template.clone()
        })
        .collect();
    let b = batch(payments.clone(), None);
    let xml = write_pain001(&b).expect("the largest batch is written");
    assert_eq!(elements(&xml, "NbOfTxs")[0], max.to_string());
    payments.push(SepaPayment {
        end_to_end_id: id("PO-extra"),
        ..template
    });
    let err = write_pain001(&batch(payments, None)).unwrap_err();
    assert!(
        matches!(err, SepaError::TooManyPayments { count } if count == max + 1),
        "{err}"
    );
}

#[test]
fn many_payments_one_date() {
    let payments: Vec<SepaPayment> = (0..60)
        .map(|i| {
            let mut p = payment(
                &format!("PO-{i:06}"),
                "2026-12-01",
                1 + i * 997_331,
                &format!("Provider {i}"),
                CREDITOR_IBANS[i as usize % CREDITOR_IBANS.len()],
            );
            if i % 3 == 0 {
                p.creditor_bic = Some(bic("ABNANL2A"));
            }
            p
        })
        .collect();
    let b = batch(payments, Some(bic("COBADEFF")));
    let xml = write_and_check(&b);
    assert_eq!(elements(&xml, "PmtInf").len(), 1);
    assert_eq!(elements(&xml, "CdtTrfTxInf").len(), 60);
    assert_eq!(elements(&xml, "CdtrAgt").len(), 20);
    // Input order is kept inside a PmtInf.
    let ids = elements(&xml, "EndToEndId");
    assert_eq!(ids.first(), Some(&"PO-000000"));
    assert_eq!(ids.last(), Some(&"PO-000059"));
}

#[test]
fn two_execution_dates_give_two_sorted_payment_blocks() {
    let mut late = payment("PO-L1", "2026-12-03", 10_000, "Late One", CREDITOR_IBANS[2]);
    late.creditor_bic = Some(bic("BNPAFRPP"));
    let b = batch(
        vec![
            late,
            payment("PO-E1", "2026-12-01", 250, "Early One", CREDITOR_IBANS[3]),
            payment("PO-L2", "2026-12-03", 99, "Late Two", CREDITOR_IBANS[4]),
            payment("PO-E2", "2026-12-01", 1, "Early Two", CREDITOR_IBANS[5]),
        ],
        None,
    );
    let xml = write_and_check(&b);
    let blocks = elements(&xml, "PmtInf");
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        elements(blocks[0], "PmtInfId"),
        ["SETTLE-2026-11-30-0001-20261201"]
    );
    assert_eq!(
        elements(blocks[1], "PmtInfId"),
        ["SETTLE-2026-11-30-0001-20261203"]
    );
    assert_eq!(elements(blocks[0], "EndToEndId"), ["PO-E1", "PO-E2"]);
    assert_eq!(elements(blocks[1], "EndToEndId"), ["PO-L1", "PO-L2"]);
    assert_eq!(elements(blocks[0], "CtrlSum"), ["2.51"]);
    assert_eq!(elements(blocks[1], "CtrlSum"), ["100.99"]);
    assert_eq!(elements(elements(&xml, "GrpHdr")[0], "CtrlSum"), ["103.50"]);
}

#[test]
fn awkward_names_are_transliterated_escaped_and_cut() {
    let long_umlauts = "Ä".repeat(70); // 70 characters, 140 once transliterated
    let mut payments = vec![
        payment(
            "PO-A",
            "2026-12-01",
            100,
            "Müller & Söhne GmbH",
            CREDITOR_IBANS[0],
        ),
        payment(
            "PO-B",
            "2026-12-01",
            100,
            "Jürgen Straße",
            CREDITOR_IBANS[1],
        ),
        payment(
            "PO-C",
            "2026-12-01",
            100,
            "🚀 Łukasz Żółć 🚀",
            CREDITOR_IBANS[2],
        ),
        payment("PO-D", "2026-12-01", 100, &long_umlauts, CREDITOR_IBANS[3]),
        payment(
            "PO-E",
            "2026-12-01",
            100,
            "O'Brien <Ltd> \"quoted\"",
            CREDITOR_IBANS[4],
        ),
        payment(
            "PO-F",
            "2026-12-01",
            100,
            "François Ørsted-Æbelø",
            CREDITOR_IBANS[5],
        ),
    ];
    payments[0].remittance_info = "💸💸💸".to_owned(); // nothing left: no RmtInf
    payments[1].remittance_info = "Zahlung für Oktober & November ".repeat(10); // > 140
    payments[2].remittance_info = "a < b && c > d".to_owned();
    let initiating = "Ünïcödé Ärger Öl Überweisung Großhändler & Söhne Gesellschaft mbH Köln";
    assert!(initiating.chars().count() <= 70);
    let mut b = batch(payments, Some(bic("COBADEFFXXX")));
    b.initiating_party_name = name(initiating);
    let xml = write_and_check(&b);

    let names: Vec<String> = elements(&xml, "Cdtr")
        .into_iter()
        .map(|c| unescape(elements(c, "Nm")[0]))
        .collect();
    assert_eq!(names[0], "Mueller + Soehne GmbH");
    assert_eq!(names[1], "Juergen Strasse");
    assert_eq!(names[2], "Lukasz Zolc");
    assert_eq!(names[3], "Ae".repeat(35));
    assert_eq!(names[4], "O'Brien Ltd quoted");
    assert_eq!(names[5], "Francois Orsted-Aebelo");
    assert!(xml.contains("O&apos;Brien"));

    let remittances: Vec<String> = elements(&xml, "CdtTrfTxInf")
        .into_iter()
        .map(|tx| {
            elements(tx, "Ustrd")
                .into_iter()
                .map(unescape)
                .collect::<String>()
        })
        .collect();
    assert_eq!(remittances[0], "", "emoji-only remittance is omitted");
    assert_eq!(
        elements(elements(&xml, "CdtTrfTxInf")[0], "RmtInf").len(),
        0
    );
    assert_eq!(remittances[1].chars().count(), 140);
    assert!(remittances[1].starts_with("Zahlung fuer Oktober + November Zahlung"));
    assert_eq!(remittances[2], "a b ++ c d");

    let initgpty = unescape(elements(elements(&xml, "InitgPty")[0], "Nm")[0]);
    // Cut at 70 characters; the cut falls on a space, which is trimmed.
    assert_eq!(
        initgpty,
        "Uenicoede Aerger Oel Ueberweisung Grosshaendler + Soehne Gesellschaft"
    );
}

#[test]
fn extreme_amounts() {
    let b = batch(
        vec![
            payment("PO-MIN", "2026-12-01", 1, "Min", CREDITOR_IBANS[0]),
            payment(
                "PO-MAX",
                "2026-12-01",
                99_999_999_999,
                "Max",
                CREDITOR_IBANS[1],
            ),
            payment(
                "PO-MAX2",
                "2026-12-02",
                99_999_999_999,
                "Max",
                CREDITOR_IBANS[1],
            ),
            payment(
                "PO-ROUND",
                "2026-12-02",
                100_000,
                "Round",
                CREDITOR_IBANS[2],
            ),
        ],
        None,
    );
    let xml = write_and_check(&b);
    assert_eq!(
        elements(&xml, "InstdAmt"),
        ["0.01", "999999999.99", "999999999.99", "1000.00"]
    );
    assert_eq!(
        elements(elements(&xml, "GrpHdr")[0], "CtrlSum"),
        ["2000000999.99"]
    );
}

#[test]
fn same_input_gives_same_bytes() {
    let make = || {
        batch(
            vec![
                payment("PO-2", "2026-12-02", 700, "Zoë", CREDITOR_IBANS[6]),
                payment("PO-1", "2026-12-01", 300, "Åsa", CREDITOR_IBANS[7]),
            ],
            None,
        )
    };
    let a = write_and_check(&make());
    let b = write_pain001(&make()).expect("write");
    assert_eq!(a, b);
    let hash = file_sha256_hex(&a);
    assert_eq!(hash, file_sha256_hex(&b));
    assert_eq!(hash.len(), 64);
    assert!(
        hash.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
}

/// The harness itself must be able to fail: xmllint rejects a broken file.
#[test]
fn xmllint_rejects_files_that_break_the_schema() {
    let Some(schema) = schema(None) else {
        return;
    };
    let b = batch(
        vec![payment(
            "PO-1",
            "2026-12-01",
            100,
            "Jane",
            CREDITOR_IBANS[0],
        )],
        None,
    );
    let xml = write_pain001(&b).expect("write");
    // Each broken file with the element xmllint must name as invalid.
    let broken_files = [
        (
            xml.replace("<PmtMtd>TRF</PmtMtd>", "<PmtMtd>XXX</PmtMtd>"),
            "PmtMtd",
        ),
        (
            xml.replace("<DbtrAgt>", "<DbtrAgtX>")
                .replace("</DbtrAgt>", "</DbtrAgtX>"),
            "DbtrAgtX",
        ),
        (xml.replace("PO-1", &"X".repeat(36)), "EndToEndId"),
        (
            xml.replace("<CtrlSum>1.00</CtrlSum>", "<CtrlSum>one</CtrlSum>"),
            "CtrlSum",
        ),
    ];
    for (broken, element) in broken_files {
        assert_ne!(broken, xml, "the edit must change the file");
        let Err(err) = xmllint(&schema, &broken) else {
            panic!("xmllint accepted a broken file:\n{broken}");
        };
        assert!(
            err.contains(&format!("element {element}: Schemas validity error")),
            "xmllint refused the file, but not for {element}: {err}"
        );
    }
}

/// The rule checker catches what the XSD lets through (three decimals, characters outside
/// the SEPA set, a wrong control sum).
#[test]
fn rule_checker_catches_what_the_xsd_allows() {
    let b = batch(
        vec![payment(
            "PO-1",
            "2026-12-01",
            1234,
            "Jane",
            CREDITOR_IBANS[0],
        )],
        None,
    );
    let xml = write_pain001(&b).expect("write");
    // That the XSD accepts each variant is checked when the machine can (xmllint and the
    // XSD); that the rule checker catches it, always.
    let schema = schema(Some("XSD acceptance of the variants"));
    // Each variant with what the checker's panic must say it caught.
    let cases = [
        (
            xml.replace(">12.34</InstdAmt>", ">12.340</InstdAmt>"),
            "amount \"12.340\" must have exactly 2 decimals",
        ),
        (
            xml.replace("<Nm>Jane</Nm>", "<Nm>Jäne</Nm>"),
            "text \"Jäne\" has characters outside the SEPA set",
        ),
        (
            xml.replacen("<CtrlSum>12.34</CtrlSum>", "<CtrlSum>12.35</CtrlSum>", 1),
            "GrpHdr CtrlSum = sum of the amounts",
        ),
    ];
    for (bad, caught) in cases {
        assert_ne!(bad, xml);
        if let Some(schema) = &schema
            && let Err(e) = xmllint(schema, &bad)
        {
            panic!("the XSD accepts this variant: {e}");
        }
        let said = panic_message(|| check_sepa_rules(&bad, &b))
            .unwrap_or_else(|| panic!("rule checker missed:\n{bad}"));
        assert!(
            said.contains(caught),
            "caught something else than {caught:?}: {said}"
        );
    }
}
