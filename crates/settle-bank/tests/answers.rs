//! Reading the bank's answers: fixtures in the layout of published samples (with settle's
//! ids), tolerant input, amounts, and one case for every error code with the place it
//! names.

use chrono::NaiveDate;
use settle_bank::{
    AchAnswerKind, AchCorrection, AnswerKind, BankAnswer, CreditDebit, EntryStatus, StatusClass,
    StatusTarget, read_ach_answers, read_answer, read_answer_each, read_camt_each, read_camt053,
    read_camt054, read_pain002,
};

const CAMT054_BATCH: &str = include_str!("fixtures/camt054_v08_batch.xml");
const CAMT053_RETURN: &str = include_str!("fixtures/camt053_v08_return.xml");
const PAIN002_PART: &str = include_str!("fixtures/pain002_v10_part.xml");
const PAIN002_VOP: &str = include_str!("fixtures/pain002_v10_vop.xml");
const NACHA_RETURNS: &str = include_str!("fixtures/nacha_returns.ach");
const NACHA_NOC: &str = include_str!("fixtures/nacha_noc.ach");

fn date(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").expect("date")
}

// ---------------------------------------------------------------------------------------
// Published layouts.

#[test]
fn camt054_batch_booking_in_a_published_layout() {
    let r = read_camt054(CAMT054_BATCH).expect("read");
    assert_eq!(r.msg_id, "BANK-NTF-20261201-0001");
    let page = r.pagination.expect("MsgPgntn");
    assert_eq!((page.page_number, page.last_page), (1, true));
    let [report] = r.reports.as_slice() else {
        panic!("one Ntfctn")
    };
    assert_eq!(report.id, "BANK-NTF-20261201-0001-1");
    assert_eq!(
        report.account_iban.as_deref(),
        Some("DE89370400440532013000")
    );
    assert_eq!(report.pagination.map(|p| p.page_number), Some(2));
    assert_eq!(report.entry_count, 1);
    let [e] = r.entries.as_slice() else {
        panic!("one Ntry")
    };
    assert_eq!(e.report_id, report.id);
    assert_eq!((e.amount.cents, e.amount.currency.as_str()), (630, "EUR"));
    assert_eq!(e.direction, CreditDebit::Debit);
    assert_eq!(e.status, EntryStatus::Booked);
    assert_eq!(e.booking_date, Some(date("2026-12-01")));
    assert_eq!(
        e.account_servicer_ref.as_deref(),
        Some("ACSR261201103200001")
    );
    let code = e.bank_tx_code.as_ref().expect("BkTxCd");
    let domain = code.domain.as_ref().expect("Domn");
    assert_eq!(
        (
            domain.domain.as_str(),
            domain.family.as_deref(),
            domain.sub_family.as_deref()
        ),
        ("PMNT", Some("ICDT"), Some("ESCT"))
    );
    assert_eq!(
        code.proprietary.as_ref().map(|p| p.code.as_str()),
        Some("Z24")
    );
    let [b] = e.batches.as_slice() else {
        panic!("one Btch")
    };
    assert_eq!(
        b.pmt_inf_id.as_deref(),
        Some("SETTLE-2026-11-30-0001-20261201")
    );
    assert_eq!(b.msg_id.as_deref(), Some("SETTLE-2026-11-30-0001"));
    assert_eq!((b.tx_count, b.total.map(|t| t.cents)), (Some(2), Some(630)));
    assert_eq!(b.direction, Some(CreditDebit::Debit));
    let txs: Vec<_> = e
        .transactions
        .iter()
        .map(|t| (t.end_to_end_id.as_deref().unwrap(), t.amount.unwrap().cents))
        .collect();
    assert_eq!(txs, [("PO-2026-000001", 310), ("PO-2026-000002", 320)]);
    assert!(e.transactions.iter().all(|t| t.return_info.is_none()));
    assert_eq!(
        e.path, "Document/BkToCstmrDbtCdtNtfctn/Ntfctn[1]/Ntry[1]",
        "the path names the entry"
    );

    let answer = read_answer(CAMT054_BATCH.as_bytes()).unwrap();
    assert_eq!(answer.kind(), AnswerKind::DebitCreditNotification);
    assert_eq!(answer.message_id(), "BANK-NTF-20261201-0001");
}

#[test]
fn camt053_statement_with_datetime_booking_and_a_return() {
    let r = read_camt053(CAMT053_RETURN).expect("read");
    assert_eq!(r.msg_id, "CAMT053-20261204-000001");
    assert_eq!(r.pagination.map(|p| p.last_page), Some(false));
    assert_eq!(r.reports[0].account_other_id.as_deref(), Some("0532013000"));
    assert_eq!(r.reports[0].account_iban, None);
    let [debit, credit] = r.entries.as_slice() else {
        panic!("two entries")
    };
    assert_eq!(debit.booking_date, Some(date("2026-12-04")), "from DtTm");
    assert_eq!(debit.direction, CreditDebit::Debit);
    assert_eq!(credit.direction, CreditDebit::Credit);
    assert_eq!(credit.entry_ref.as_deref(), Some("5"));
    let tx = &credit.transactions[0];
    assert_eq!(tx.end_to_end_id.as_deref(), Some("PO-2026-000003"));
    assert_eq!(tx.amount.map(|a| a.cents), Some(144_750));
    let ret = tx.return_info.as_ref().expect("RtrInf");
    let reason = ret.reason_code.as_ref().expect("Rsn/Cd");
    assert_eq!(reason.as_str(), "AC04");
    assert!(reason.known().unwrap().invalidates_account_details());
    assert_eq!(ret.additional_info, ["ACCOUNT CLOSED"]);
    let sub = credit.bank_tx_code.as_ref().and_then(|c| c.domain.as_ref());
    assert_eq!(sub.and_then(|d| d.sub_family.as_deref()), Some("RRTN"));

    let answer = read_answer(CAMT053_RETURN.as_bytes()).unwrap();
    assert_eq!(answer.kind(), AnswerKind::Statement);
    assert_eq!(answer.entry_count(), 2);
}

#[test]
fn entries_handed_over_as_read_are_the_entries_read_whole() {
    for (xml, statement) in [(CAMT054_BATCH, false), (CAMT053_RETURN, true)] {
        let whole = if statement {
            read_camt053(xml)
        } else {
            read_camt054(xml)
        }
        .expect("read whole");
        let mut seen = Vec::new();
        let head = read_camt_each(xml, statement, &mut |e| seen.push(e)).expect("read each");
        assert_eq!(seen, whole.entries, "the same entries in the same order");
        assert!(head.entries.is_empty(), "none kept in the report");
        assert_eq!((head.msg_id, head.reports), (whole.msg_id, whole.reports));

        let mut count = 0;
        let answer = read_answer_each(xml.as_bytes(), &mut |_| count += 1).unwrap();
        assert_eq!(answer.entry_count(), whole.entries.len(), "still counted");
        assert_eq!(count, whole.entries.len());
    }
    // A file that goes bad after an entry is still refused.
    let second = CAMT053_RETURN
        .match_indices("<Ntry>")
        .nth(1)
        .expect("two entries")
        .0;
    let broken = format!(
        "{}{}",
        &CAMT053_RETURN[..second],
        CAMT053_RETURN[second..].replacen("<CdtDbtInd>CRDT", "<CdtDbtInd>XX", 1)
    );
    let mut seen = 0;
    let err = read_camt_each(&broken, true, &mut |_| seen += 1).unwrap_err();
    assert_eq!(
        seen, 1,
        "the first entry was handed over before the second failed"
    );
    assert_eq!(err.code(), read_camt053(&broken).unwrap_err().code());
    // Other kinds come back whole.
    let mut count = 0;
    let answer = read_answer_each(PAIN002_PART.as_bytes(), &mut |_| count += 1).unwrap();
    assert_eq!(count, 0);
    assert_eq!(
        answer.entry_count(),
        read_pain002(PAIN002_PART).unwrap().entries.len()
    );
}

#[test]
fn pain002_partial_rejection_in_a_published_layout() {
    let r = read_pain002(PAIN002_PART).expect("read");
    assert_eq!(r.msg_id, "PSR-20261201-177326");
    assert_eq!(r.original_msg_id, "SETTLE-2026-11-30-0001");
    assert_eq!(r.original_msg_name_id.as_deref(), Some("pain.001"));
    let seen: Vec<_> = r
        .entries
        .iter()
        .map(|e| {
            let target = match &e.target {
                StatusTarget::Message => "message".to_owned(),
                StatusTarget::PaymentInformation { pmt_inf_id } => pmt_inf_id.clone(),
                StatusTarget::Transaction {
                    end_to_end_id,
                    pmt_inf_id,
                } => {
                    assert_eq!(
                        pmt_inf_id.as_deref(),
                        Some("SETTLE-2026-11-30-0001-20261201")
                    );
                    end_to_end_id.clone()
                }
            };
            (
                target,
                e.status.class(),
                e.reason_code().map(|c| c.as_str().to_owned()),
                e.amount.map(|a| a.cents),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("message".to_owned(), StatusClass::Partial, None, None),
            (
                "PO-2026-000001".to_owned(),
                StatusClass::Accepted,
                None,
                Some(20_284)
            ),
            (
                "PO-2026-000002".to_owned(),
                StatusClass::Accepted,
                None,
                Some(144_950)
            ),
            (
                "PO-2026-000003".to_owned(),
                StatusClass::Rejected,
                Some("AC04".to_owned()),
                Some(25_000)
            ),
        ]
    );
    assert_eq!(r.entries[3].reasons[0].additional_info, ["Account closed"]);
    assert_eq!(
        r.entries[3].path,
        "Document/CstmrPmtStsRpt/OrgnlPmtInfAndSts[1]/TxInfAndSts[3]"
    );
}

#[test]
fn pain002_without_namespace_and_with_payee_verification_codes() {
    let BankAnswer::PaymentStatusReport(r) = read_answer(PAIN002_VOP.as_bytes()).unwrap() else {
        panic!("pain.002")
    };
    assert_eq!(r.original_msg_id, "SETTLE-2026-11-30-0002");
    let targets: Vec<_> = r
        .entries
        .iter()
        .map(|e| (&e.target, e.status.as_str()))
        .collect();
    assert_eq!(
        targets,
        [
            (&StatusTarget::Message, "RVNM"),
            (
                &StatusTarget::PaymentInformation {
                    pmt_inf_id: "SETTLE-2026-11-30-0002-20261201".to_owned()
                },
                "RVNM"
            ),
            (
                &StatusTarget::Transaction {
                    pmt_inf_id: Some("SETTLE-2026-11-30-0002-20261201".to_owned()),
                    end_to_end_id: "PO-2026-000009".to_owned()
                },
                "RVNM"
            ),
        ]
    );
    assert!(
        r.entries
            .iter()
            .all(|e| e.status.class() == StatusClass::Other)
    );
    assert_eq!(r.entries[0].reasons[0].additional_info.len(), 2);
    assert_eq!(r.entries[0].reason_code(), None);
}

#[test]
fn nacha_returns_in_a_bank_layout() {
    let f = read_ach_answers(NACHA_RETURNS).expect("read");
    assert_eq!(f.file_id, "011000015-1123456789-2612031405-R");
    let seen: Vec<_> = f
        .entries
        .iter()
        .map(|a| {
            let AchAnswerKind::Return {
                reason,
                date_of_death,
                addenda_information,
            } = &a.kind
            else {
                panic!("a return")
            };
            (
                a.original_trace.as_str(),
                reason.as_str(),
                a.amount_usd_cents,
                a.transaction_code.as_str(),
                *date_of_death,
                addenda_information.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("011000010000004", "R01", 337_898, "21", None, ""),
            (
                "011000010000007",
                "R03",
                627_524,
                "31",
                None,
                "NO ACCOUNT UNABLE TO LOCATE"
            ),
            (
                "011000010000008",
                "R15",
                675_795,
                "21",
                Some(date("2026-11-28")),
                ""
            ),
            ("011000010000011", "R02", 820_608, "21", None, ""),
        ]
    );
    let first = &f.entries[0];
    assert_eq!(first.line, 3);
    assert_eq!(first.trace.as_str(), "091000012930258");
    assert_eq!(first.individual_id, "PO-000007");
    assert_eq!(first.original_rdfi, "32055433");
    assert_eq!(first.sec_code, "PPD");
    let BankAnswer::AchReturns(same) = read_answer(NACHA_RETURNS.as_bytes()).unwrap() else {
        panic!()
    };
    assert_eq!(same, f);
}

#[test]
fn nacha_notifications_of_change_in_a_published_layout() {
    let f = read_ach_answers(NACHA_NOC).expect("read");
    let seen: Vec<_> = f
        .entries
        .iter()
        .map(|a| {
            let AchAnswerKind::ChangeNotice {
                change,
                corrected_data,
                correction,
            } = &a.kind
            else {
                panic!("a change")
            };
            assert_eq!(a.amount_usd_cents, 0);
            assert_eq!(a.sec_code, "COR");
            (
                a.original_trace.as_str(),
                change.as_str(),
                corrected_data.as_str(),
                correction.clone(),
            )
        })
        .collect();
    let account = |s: &str| settle_bank::AchAccountNumber::parse(s).unwrap();
    let routing = || settle_bank::AbaRouting::parse("021000021").unwrap();
    assert_eq!(
        seen,
        [
            (
                "011000010000006",
                "C01",
                "1918171614",
                Some(AchCorrection::Account(account("1918171614")))
            ),
            (
                "011000010000001",
                "C02",
                "021000021",
                Some(AchCorrection::Routing(routing()))
            ),
            (
                "011000010000010",
                "C03",
                "021000021   55512345",
                Some(AchCorrection::RoutingAndAccount(
                    routing(),
                    account("55512345")
                ))
            ),
        ]
    );
    assert_eq!(f.entries[0].account, "744-5678-99");
    assert_eq!(
        f.entries[0].trace.as_str(),
        "121042880000001",
        "the entry's own trace"
    );
}

// ---------------------------------------------------------------------------------------
// Tolerance.

/// A camt.054 around `ntry` (raw XML of one or more entries).
fn camt054(ntry: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.054.001.08">
  <BkToCstmrDbtCdtNtfctn>
    <GrpHdr><MsgId>NTF-1</MsgId><CreDtTm>2026-12-01T10:00:00</CreDtTm></GrpHdr>
    <Ntfctn>
      <Id>NTF-1-1</Id>
      <Acct><Id><IBAN>DE89370400440532013000</IBAN></Id></Acct>
      {ntry}
    </Ntfctn>
  </BkToCstmrDbtCdtNtfctn>
</Document>
"#
    )
}

const RETURN_NTRY: &str = r#"<Ntry>
        <Amt Ccy="EUR">1447.50</Amt>
        <CdtDbtInd>CRDT</CdtDbtInd>
        <Sts><Cd>BOOK</Cd></Sts>
        <BookgDt><Dt>2026-12-04</Dt></BookgDt>
        <BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>RRTN</SubFmlyCd></Fmly></Domn></BkTxCd>
        <NtryDtls><TxDtls>
          <Refs><EndToEndId>PO-2026-000003</EndToEndId></Refs>
          <Amt Ccy="EUR">1447.50</Amt>
          <CdtDbtInd>CRDT</CdtDbtInd>
          <RtrInf><Rsn><Cd>AC04</Cd></Rsn></RtrInf>
        </TxDtls></NtryDtls>
      </Ntry>"#;

/// What matters of an entry: (e2e, cents, currency, direction, status, date, reason).
type Essence = (
    String,
    i64,
    String,
    CreditDebit,
    EntryStatus,
    Option<NaiveDate>,
    String,
);

/// What matters of a notification.
fn essence(xml: &[u8]) -> Vec<Essence> {
    let BankAnswer::DebitCreditNotification(r) = read_answer(xml).expect("read") else {
        panic!("camt.054")
    };
    assert_eq!(r.msg_id, "NTF-1");
    r.entries
        .iter()
        .map(|e| {
            let tx = &e.transactions[0];
            let reason = tx.return_info.as_ref().and_then(|r| r.reason_code.clone());
            (
                tx.end_to_end_id.clone().unwrap(),
                e.amount.cents,
                e.amount.currency.to_string(),
                e.direction,
                e.status,
                e.booking_date,
                reason.map(|r| r.to_string()).unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn xml_variants_banks_send_read_the_same() {
    let plain = camt054(RETURN_NTRY);
    let expected = essence(plain.as_bytes());
    assert_eq!(expected.len(), 1);
    assert_eq!(expected[0].6, "AC04");

    let prefixed = plain
        .replace("<Document xmlns=", "<c:Document xmlns:c=")
        .replace("<", "<c:")
        .replace("<c:/", "</c:")
        .replace("<c:?xml", "<?xml")
        .replace("<c:c:Document", "<c:Document");
    let variants = [
        format!("\u{feff}{plain}"),
        prefixed,
        plain.replace('\n', "\r\n"),
        plain.replace("xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.054.001.08\"", ""),
        plain.replace(
            "<CdtDbtInd>CRDT</CdtDbtInd>\n        <Sts>",
            "<CdtDbtInd>crdt</CdtDbtInd><RvslInd>false</RvslInd><Xtra><Deep>1</Deep></Xtra>\n        <Sts>",
        ),
        plain.replace("<Sts><Cd>BOOK</Cd></Sts>", "<Sts>book</Sts>"),
        plain.replace("<Sts><Cd>BOOK</Cd></Sts>", "<Sts><Prtry>BOOK</Prtry></Sts>"),
        plain.replace("<Dt>2026-12-04</Dt>", "<DtTm>2026-12-04T23:15:00+01:00</DtTm>"),
        plain.replace("<Dt>2026-12-04</Dt>", "<Dt>2026-12-04+01:00</Dt>"),
        plain.replace("Ccy=\"EUR\"", "Ccy=\"eur\""),
        plain.replace("<Amt Ccy=\"EUR\">1447.50</Amt>\n        <CdtDbtInd>", "<Amt Ccy='EUR'> 1447.5 </Amt><CdtDbtInd>"),
        plain.replace("<GrpHdr>", "<GrpHdr><!-- from the bank --><Xtra/>"),
        format!("<Envelope><AppHdr><MsgDefIdr>camt.054.001.08</MsgDefIdr></AppHdr>{}</Envelope>", &plain[39..]),
    ];
    for (i, v) in variants.iter().enumerate() {
        assert_eq!(essence(v.as_bytes()), expected, "variant {i}:\n{v}");
    }
}

#[test]
fn a_proprietary_bank_transaction_code_is_kept() {
    let xml = camt054(&RETURN_NTRY.replace(
        "<BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>RRTN</SubFmlyCd></Fmly></Domn></BkTxCd>",
        "<BkTxCd><Prtry><Cd>NRTI+159+00931</Cd><Issr>DK</Issr></Prtry></BkTxCd>",
    ));
    let r = read_camt054(&xml).unwrap();
    let code = r.entries[0].bank_tx_code.clone().expect("kept");
    assert!(code.domain.is_none());
    let p = code.proprietary.expect("Prtry");
    assert_eq!(
        (p.code.as_str(), p.issuer.as_deref()),
        ("NRTI+159+00931", Some("DK"))
    );
    let empty = camt054(&RETURN_NTRY.replace(
        "<BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>RRTN</SubFmlyCd></Fmly></Domn></BkTxCd>",
        "<BkTxCd />",
    ));
    assert_eq!(read_camt054(&empty).unwrap().entries[0].bank_tx_code, None);
}

#[test]
fn pagination_of_message_and_report() {
    let xml = camt054(RETURN_NTRY)
        .replace(
            "<CreDtTm>2026-12-01T10:00:00</CreDtTm></GrpHdr>",
            "<CreDtTm>2026-12-01T10:00:00</CreDtTm><MsgPgntn><PgNb>3</PgNb><LastPgInd>1</LastPgInd></MsgPgntn></GrpHdr>",
        )
        .replace(
            "<Id>NTF-1-1</Id>",
            "<Id>NTF-1-1</Id><NtfctnPgntn><PgNb>7</PgNb><LastPgInd>false</LastPgInd></NtfctnPgntn>",
        );
    let r = read_camt054(&xml).unwrap();
    let page = r.pagination.unwrap();
    assert_eq!((page.page_number, page.last_page), (3, true));
    let page = r.reports[0].pagination.unwrap();
    assert_eq!((page.page_number, page.last_page), (7, false));
}

#[test]
fn amounts_with_zero_to_three_decimals() {
    for (text, cents) in [("12", 1200), ("12.5", 1250), ("12.50", 1250), ("0.01", 1)] {
        let xml = camt054(&RETURN_NTRY.replace(
            "1447.50</Amt>\n        <CdtDbtInd>",
            &format!("{text}</Amt><CdtDbtInd>"),
        ));
        let r = read_camt054(&xml).unwrap();
        assert_eq!(r.entries[0].amount.cents, cents, "{text}");
    }
    let xml = camt054(&RETURN_NTRY.replace(
        "1447.50</Amt>\n        <CdtDbtInd>",
        "12.505</Amt><CdtDbtInd>",
    ));
    let err = read_camt054(&xml).unwrap_err();
    assert_eq!(err.code(), "amount_too_precise");
    assert_eq!(
        err.location().to_string(),
        "Document/BkToCstmrDbtCdtNtfctn/Ntfctn[1]/Ntry[1]/Amt"
    );
}

#[test]
fn nacha_line_ends_blank_lines_and_cut_blanks_are_tolerated() {
    let expected = read_ach_answers(NACHA_RETURNS).unwrap();
    let lf = NACHA_RETURNS.replace("\r\n", "\n");
    let trimmed: String = lf.lines().map(|l| format!("{}\n", l.trim_end())).collect();
    let variants = [
        lf.clone(),
        format!("{lf}\n\n   \n"),
        format!("\u{feff}{NACHA_RETURNS}\r\n\r\n"),
        trimmed,
        lf.replace('\n', ""),
    ];
    for (i, v) in variants.iter().enumerate() {
        let got = read_ach_answers(v).unwrap_or_else(|e| panic!("variant {i}: {e}"));
        let strip = |f: &settle_bank::AchAnswerFile| {
            f.entries
                .iter()
                .map(|a| (a.original_trace.clone(), a.kind.clone(), a.amount_usd_cents))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(&got), strip(&expected), "variant {i}");
        assert_eq!(got.file_id, expected.file_id);
    }
    // Line numbers count the lines as they are in the file.
    let spaced = lf.replacen('\n', "\n\n", 1);
    assert_eq!(read_ach_answers(&spaced).unwrap().entries[0].line, 4);
}

// ---------------------------------------------------------------------------------------
// Errors: every code, and where.

/// Replaces `from` (which must occur) by `to`.
fn edit(s: &str, from: &str, to: &str) -> String {
    assert!(s.contains(from), "{from:?} not in input");
    s.replacen(from, to, 1)
}

/// Replaces line `n` (1-based) of a NACHA file.
fn nacha_line(s: &str, n: usize, f: impl Fn(&str) -> String) -> String {
    s.split("\r\n")
        .enumerate()
        .map(|(i, l)| if i + 1 == n { f(l) } else { l.to_owned() })
        .collect::<Vec<_>>()
        .join("\r\n")
}

fn splice(line: &str, at: usize, text: &str) -> String {
    format!("{}{text}{}", &line[..at - 1], &line[at - 1 + text.len()..])
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one table of malformed answer files, each with the stable code and the place it must name"
)]
fn every_error_code_names_its_place() {
    let ntry = "Document/BkToCstmrDbtCdtNtfctn/Ntfctn[1]/Ntry[1]";
    let tx = format!("{ntry}/NtryDtls[1]/TxDtls[1]");
    let camt = camt054(RETURN_NTRY);
    let entry_amt = "<Amt Ccy=\"EUR\">1447.50</Amt>\n        <CdtDbtInd>";
    let tx_amt = "<Amt Ccy=\"EUR\">1447.50</Amt>\n          <CdtDbtInd>";
    let mut latin1 = camt.clone().into_bytes();
    latin1[camt.find("NTF-1-1").unwrap()] = 0xE9;
    let pain = PAIN002_PART;
    let tx3 = "Document/CstmrPmtStsRpt/OrgnlPmtInfAndSts[1]/TxInfAndSts[3]";
    let ach = NACHA_RETURNS;
    let cases: Vec<(Vec<u8>, &str, String)> = vec![
        (b"hello".to_vec(), "unknown_format", "file".into()),
        (
            b"\xFF\xFE<\x00".to_vec(),
            "unsupported_encoding",
            "file".into(),
        ),
        (latin1, "unsupported_encoding", "line 6".into()),
        (
            edit(&camt, "</Ntfctn>", "").into_bytes(),
            "malformed_xml",
            "Document/BkToCstmrDbtCdtNtfctn/Ntfctn[1]".into(),
        ),
        (
            edit(&camt, "NTF-1-1", "NTF&nbsp;1").into_bytes(),
            "malformed_xml",
            "Document/BkToCstmrDbtCdtNtfctn/Ntfctn[1]/Id".into(),
        ),
        (
            b"<Document><CstmrCdtTrfInitn/></Document>".to_vec(),
            "unknown_message",
            "Document/CstmrCdtTrfInitn".into(),
        ),
        (
            edit(&camt, "<MsgId>NTF-1</MsgId>", "").into_bytes(),
            "missing_element",
            "Document/BkToCstmrDbtCdtNtfctn/GrpHdr/MsgId".into(),
        ),
        (
            edit(&camt, "<Id>NTF-1-1</Id>", "").into_bytes(),
            "missing_element",
            "Document/BkToCstmrDbtCdtNtfctn/Ntfctn[1]/Id".into(),
        ),
        (
            edit(&camt, entry_amt, "<CdtDbtInd>").into_bytes(),
            "missing_element",
            format!("{ntry}/Amt"),
        ),
        (
            edit(&camt, entry_amt, "<Amt>1447.50</Amt><CdtDbtInd>").into_bytes(),
            "missing_element",
            format!("{ntry}/Amt/@Ccy"),
        ),
        (
            edit(&camt, "<Sts><Cd>BOOK</Cd></Sts>", "").into_bytes(),
            "missing_element",
            format!("{ntry}/Sts"),
        ),
        (
            edit(&camt, tx_amt, "<Amt Ccy=\"EUR\">1.447,50</Amt><CdtDbtInd>").into_bytes(),
            "invalid_amount",
            format!("{tx}/Amt"),
        ),
        (
            edit(
                &camt,
                entry_amt,
                "<Amt Ccy=\"EUR\">1447.501</Amt><CdtDbtInd>",
            )
            .into_bytes(),
            "amount_too_precise",
            format!("{ntry}/Amt"),
        ),
        (
            edit(
                &camt,
                entry_amt,
                &format!("<Amt Ccy=\"EUR\">{}</Amt><CdtDbtInd>", "9".repeat(30)),
            )
            .into_bytes(),
            "amount_too_large",
            format!("{ntry}/Amt"),
        ),
        (
            edit(
                &camt,
                entry_amt,
                "<Amt Ccy=\"EURO\">1447.50</Amt><CdtDbtInd>",
            )
            .into_bytes(),
            "invalid_currency",
            format!("{ntry}/Amt/@Ccy"),
        ),
        (
            edit(
                &camt,
                "<CdtDbtInd>CRDT</CdtDbtInd>",
                "<CdtDbtInd>BOTH</CdtDbtInd>",
            )
            .into_bytes(),
            "invalid_code",
            format!("{ntry}/CdtDbtInd"),
        ),
        (
            edit(
                &camt,
                "<Sts><Cd>BOOK</Cd></Sts>",
                "<Sts><Cd>DONE</Cd></Sts>",
            )
            .into_bytes(),
            "invalid_code",
            format!("{ntry}/Sts/Cd"),
        ),
        (
            edit(
                &camt,
                "<Rsn><Cd>AC04</Cd></Rsn>",
                "<Rsn><Cd>ACCOUNT</Cd></Rsn>",
            )
            .into_bytes(),
            "invalid_code",
            format!("{tx}/RtrInf/Rsn/Cd"),
        ),
        (
            edit(&camt, "<Dt>2026-12-04</Dt>", "<Dt>04.12.2026</Dt>").into_bytes(),
            "invalid_date",
            format!("{ntry}/BookgDt/Dt"),
        ),
        (
            edit(
                &camt,
                "<NtryDtls>",
                "<NtryDtls><Btch><NbOfTxs>two</NbOfTxs></Btch>",
            )
            .into_bytes(),
            "invalid_number",
            format!("{ntry}/NtryDtls[1]/Btch/NbOfTxs"),
        ),
        (
            edit(&camt, "<Acct>", &format!("{}<Acct>", "<X>".repeat(70))).into_bytes(),
            "too_deep",
            format!(
                "Document/BkToCstmrDbtCdtNtfctn/Ntfctn[1]{}",
                "/X".repeat(61)
            ),
        ),
        (
            edit(
                pain,
                "<OrgnlEndToEndId>PO-2026-000003</OrgnlEndToEndId>",
                "",
            )
            .into_bytes(),
            "missing_element",
            format!("{tx3}/OrgnlEndToEndId"),
        ),
        (
            edit(pain, "<TxSts>RJCT</TxSts>", "<TxSts>REJECTED</TxSts>").into_bytes(),
            "invalid_code",
            format!("{tx3}/TxSts"),
        ),
        (
            edit(pain, "<OrgnlMsgId>SETTLE-2026-11-30-0001</OrgnlMsgId>", "").into_bytes(),
            "missing_element",
            "Document/CstmrPmtStsRpt/OrgnlGrpInfAndSts/OrgnlMsgId".into(),
        ),
        (
            nacha_line(ach, 3, |l| format!("{l}X")).into_bytes(),
            "invalid_record_length",
            "line 3".into(),
        ),
        (
            nacha_line(ach, 2, |l| splice(l, 1, "6")).into_bytes(),
            "unexpected_record",
            "line 2".into(),
        ),
        (
            nacha_line(ach, 12, |_| String::new()).into_bytes(),
            "unexpected_record",
            "file".into(),
        ),
        (
            nacha_line(ach, 3, |l| splice(l, 35, "X")).into_bytes(),
            "invalid_field",
            "line 3".into(),
        ),
        (
            nacha_line(ach, 4, |l| splice(l, 4, "X01")).into_bytes(),
            "invalid_field",
            "line 4".into(),
        ),
        (
            nacha_line(ach, 8, |l| splice(l, 22, "261341")).into_bytes(),
            "invalid_field",
            "line 8".into(),
        ),
        (
            nacha_line(ach, 4, |l| splice(l, 7, "0110000100 0004")).into_bytes(),
            "invalid_field",
            "line 4".into(),
        ),
        (
            nacha_line(ach, 4, |l| splice(l, 2, "05")).into_bytes(),
            "missing_addenda",
            "line 3".into(),
        ),
        (
            nacha_line(ach, 3, |l| splice(l, 39, "9")).into_bytes(),
            "control_mismatch",
            "line 11".into(),
        ),
        (
            nacha_line(ach, 12, |l| splice(l, 7, "2")).into_bytes(),
            "control_mismatch",
            "line 12".into(),
        ),
    ];
    let mut codes = std::collections::BTreeSet::new();
    for (input, code, place) in cases {
        let err = read_answer(&input).expect_err(code);
        assert_eq!(
            (err.code(), err.location().to_string()),
            (code, place.clone()),
            "{err}"
        );
        assert!(
            err.to_string().starts_with(&place),
            "the message says where: {err}"
        );
        codes.insert(code);
    }
    // Every code but too_many_entries (a million entries) has a case here.
    assert_eq!(codes.len(), 18);
}

#[test]
fn a_transaction_without_status_takes_its_block_or_group_status() {
    let no_tx_status = edit(PAIN002_PART, "<TxSts>ACSP</TxSts>", "");
    let r = read_pain002(&no_tx_status).unwrap();
    assert_eq!(r.entries[1].status.as_str(), "PART", "from the group");
    let with_block = edit(
        &no_tx_status,
        "<OrgnlPmtInfId>SETTLE-2026-11-30-0001-20261201</OrgnlPmtInfId>",
        "<OrgnlPmtInfId>SETTLE-2026-11-30-0001-20261201</OrgnlPmtInfId><PmtInfSts>ACCP</PmtInfSts>",
    );
    let r = read_pain002(&with_block).unwrap();
    assert_eq!(
        r.entries[1].target,
        StatusTarget::PaymentInformation {
            pmt_inf_id: "SETTLE-2026-11-30-0001-20261201".to_owned()
        }
    );
    assert_eq!(r.entries[2].status.as_str(), "ACCP", "from the block");
}
