//! The SEPA half of the simulator: a pain.002 status report and a camt.054 notification
//! answering the engine's pain.001.

use super::*;

/// Answers a `pain.001`: `(pain.002, camt.054)`.
///
/// # Errors
/// [`SimulateError`] for a bad configuration, a block mixing currencies or a total that
/// does not fit.
pub fn simulate_sepa(
    file: &SentSepaFile,
    config: &SimulationConfig,
) -> Result<(String, String), SimulateError> {
    config.check_sepa()?;
    let decided: Vec<(&SentPaymentInfo, Decided<'_>)> = file
        .payment_infos
        .iter()
        .map(|b| {
            let d = b
                .payments
                .iter()
                .map(|p| (p, config.sepa_outcome(&p.end_to_end_id)))
                .collect();
            (b, d)
        })
        .collect();
    let id = digest16(&[&file.msg_id, &config.fingerprint()]);
    let status = write_pain002(file, &decided, config, &id)?;
    let notification = write_camt054(file, &decided, config, &id)?;
    Ok((status, notification))
}

fn sum_cents<'a>(
    pmt_inf_id: &str,
    mut payments: impl Iterator<Item = &'a SentSepaPayment>,
) -> Result<i64, SimulateError> {
    payments
        .try_fold(0i64, |s, p| s.checked_add(p.amount.cents))
        .ok_or_else(|| SimulateError::TotalTooLarge {
            pmt_inf_id: pmt_inf_id.to_owned(),
        })
}

/// `ACCP` when none rejected, `RJCT` when all, `PART` otherwise.
fn group_status<'a>(outcomes: impl Iterator<Item = &'a Outcome>) -> &'static str {
    let (mut rejected, mut total) = (0usize, 0usize);
    for o in outcomes {
        total += 1;
        if matches!(o, Outcome::Rejected(_)) {
            rejected += 1;
        }
    }
    match rejected {
        0 => "ACCP",
        r if r == total => "RJCT",
        _ => "PART",
    }
}

/// An answer's opening: the XML declaration, `Document` in `namespace`, the `message`
/// element and its group header (`msg_id`, the configured creation time).
fn document_head(
    namespace: &str,
    message: &str,
    msg_id: &str,
    config: &SimulationConfig,
) -> XmlWriter {
    let mut w = XmlWriter::default();
    w.line(0, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    w.line(0, &format!(r#"<Document xmlns="{namespace}">"#));
    w.open(1, message);
    w.open(2, "GrpHdr");
    w.text(3, "MsgId", msg_id);
    w.text(3, "CreDtTm", &datetime(config.created_at));
    w.close(2, "GrpHdr");
    w
}

fn write_pain002(
    file: &SentSepaFile,
    decided: &[(&SentPaymentInfo, Decided<'_>)],
    config: &SimulationConfig,
    id: &str,
) -> Result<String, SimulateError> {
    let mut w = document_head(
        PAIN_002_001_10_NAMESPACE,
        "CstmrPmtStsRpt",
        &format!("PSR-{id}"),
        config,
    );
    w.open(2, "OrgnlGrpInfAndSts");
    w.text(3, "OrgnlMsgId", &file.msg_id);
    w.text(3, "OrgnlMsgNmId", "pain.001.001.09");
    let all = || decided.iter().flat_map(|(_, d)| d.iter());
    w.text(3, "OrgnlNbOfTxs", &all().count().to_string());
    let total = sum_cents(&file.msg_id, all().map(|(p, _)| *p))?;
    w.text(3, "OrgnlCtrlSum", &format_cents(total));
    w.text(3, "GrpSts", group_status(all().map(|(_, o)| o)));
    w.close(2, "OrgnlGrpInfAndSts");
    for (block, payments) in decided {
        w.open(2, "OrgnlPmtInfAndSts");
        w.text(3, "OrgnlPmtInfId", &block.pmt_inf_id);
        w.text(3, "OrgnlNbOfTxs", &payments.len().to_string());
        let sum = sum_cents(&block.pmt_inf_id, payments.iter().map(|(p, _)| *p))?;
        w.text(3, "OrgnlCtrlSum", &format_cents(sum));
        w.text(
            3,
            "PmtInfSts",
            group_status(payments.iter().map(|(_, o)| o)),
        );
        for (p, outcome) in payments {
            status_transaction(&mut w, block, p, outcome);
        }
        w.close(2, "OrgnlPmtInfAndSts");
    }
    w.close(1, "CstmrPmtStsRpt");
    w.line(0, "</Document>");
    Ok(w.out)
}

fn status_transaction(
    w: &mut XmlWriter,
    block: &SentPaymentInfo,
    p: &SentSepaPayment,
    o: &Outcome,
) {
    w.open(3, "TxInfAndSts");
    w.text(4, "OrgnlEndToEndId", &p.end_to_end_id);
    if let Outcome::Rejected(code) = o {
        w.text(4, "TxSts", "RJCT");
        w.open(4, "StsRsnInf");
        w.open(5, "Rsn");
        w.text(6, "Cd", code.as_str());
        w.close(5, "Rsn");
        w.close(4, "StsRsnInf");
    } else {
        w.text(4, "TxSts", "ACCP");
    }
    w.open(4, "OrgnlTxRef");
    w.open(5, "Amt");
    amount_line(w, 6, "InstdAmt", p);
    w.close(5, "Amt");
    if let Some(date) = block.execution_date {
        w.open(5, "ReqdExctnDt");
        w.text(6, "Dt", &date.format("%Y-%m-%d").to_string());
        w.close(5, "ReqdExctnDt");
    }
    if let Some(iban) = &p.creditor_iban {
        iban_account(w, 5, "CdtrAcct", iban);
    }
    w.close(4, "OrgnlTxRef");
    w.close(3, "TxInfAndSts");
}

fn amount_line(w: &mut XmlWriter, depth: usize, tag: &str, p: &SentSepaPayment) {
    amount_value(w, depth, tag, p.amount.currency.as_str(), p.amount.cents);
}

fn amount_value(w: &mut XmlWriter, depth: usize, tag: &str, currency: &str, cents: i64) {
    w.line(
        depth,
        &format!(r#"<{tag} Ccy="{currency}">{}</{tag}>"#, format_cents(cents)),
    );
}

fn iban_account(w: &mut XmlWriter, depth: usize, tag: &str, iban: &str) {
    w.open(depth, tag);
    w.open(depth + 1, "Id");
    w.text(depth + 2, "IBAN", iban);
    w.close(depth + 1, "Id");
    w.close(depth, tag);
}

fn datetime(t: NaiveDateTime) -> String {
    t.format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// The pieces of one `Ntry` the simulator writes.
struct NtryOut<'a> {
    number: usize,
    cents: i64,
    currency: &'a str,
    credit: bool,
    servicer_ref: String,
    sub_family: &'a str,
}

fn write_camt054(
    file: &SentSepaFile,
    decided: &[(&SentPaymentInfo, Decided<'_>)],
    config: &SimulationConfig,
    id: &str,
) -> Result<String, SimulateError> {
    let mut w = document_head(
        CAMT_054_001_08_NAMESPACE,
        "BkToCstmrDbtCdtNtfctn",
        &format!("NTF-{id}"),
        config,
    );
    let mut number = 0usize;
    for (i, (block, payments)) in decided.iter().enumerate() {
        w.open(2, "Ntfctn");
        w.text(3, "Id", &format!("NTF-{id}-{}", i + 1));
        w.text(3, "CreDtTm", &datetime(config.created_at));
        match &block.debtor_iban {
            Some(iban) => iban_account(&mut w, 3, "Acct", iban),
            None => other_account(&mut w, 3),
        }
        match config.booking {
            Booking::PerPayment => {
                let booked = payments
                    .iter()
                    .filter(|(_, o)| !matches!(o, Outcome::Rejected(_)));
                for (p, _) in booked {
                    number += 1;
                    payment_entry(&mut w, (file, block, p), None, number, config);
                }
            }
            Booking::Batch => batch_entry(&mut w, file, block, payments, &mut number, config)?,
        }
        for (p, o) in payments {
            if let Outcome::Returned(code) = o {
                number += 1;
                payment_entry(&mut w, (file, block, p), Some(code), number, config);
            }
        }
        w.close(2, "Ntfctn");
    }
    w.close(1, "BkToCstmrDbtCdtNtfctn");
    w.line(0, "</Document>");
    Ok(w.out)
}

fn other_account(w: &mut XmlWriter, depth: usize) {
    w.open(depth, "Acct");
    w.open(depth + 1, "Id");
    w.open(depth + 2, "Othr");
    w.text(depth + 3, "Id", "NOTPROVIDED");
    w.close(depth + 2, "Othr");
    w.close(depth + 1, "Id");
    w.close(depth, "Acct");
}

/// `Ntry` up to and including `BkTxCd`.
fn entry_head(w: &mut XmlWriter, e: &NtryOut<'_>, config: &SimulationConfig) {
    let date = config.booking_date.format("%Y-%m-%d").to_string();
    w.open(3, "Ntry");
    w.text(4, "NtryRef", &e.number.to_string());
    amount_value(w, 4, "Amt", e.currency, e.cents);
    w.text(4, "CdtDbtInd", if e.credit { "CRDT" } else { "DBIT" });
    w.open(4, "Sts");
    w.text(5, "Cd", "BOOK");
    w.close(4, "Sts");
    for tag in ["BookgDt", "ValDt"] {
        w.open(4, tag);
        w.text(5, "Dt", &date);
        w.close(4, tag);
    }
    w.text(4, "AcctSvcrRef", &e.servicer_ref);
    w.open(4, "BkTxCd");
    w.open(5, "Domn");
    w.text(6, "Cd", "PMNT");
    w.open(6, "Fmly");
    w.text(7, "Cd", "ICDT");
    w.text(7, "SubFmlyCd", e.sub_family);
    w.close(6, "Fmly");
    w.close(5, "Domn");
    w.close(4, "BkTxCd");
}

fn tx_refs(w: &mut XmlWriter, file: &SentSepaFile, block: &SentPaymentInfo, p: &SentSepaPayment) {
    w.open(6, "Refs");
    w.text(7, "MsgId", &file.msg_id);
    w.text(7, "PmtInfId", &block.pmt_inf_id);
    w.text(7, "EndToEndId", &p.end_to_end_id);
    w.close(6, "Refs");
}

/// One payment's entry: its debit (`return_code` `None`), or the credit that returns it with
/// the bank's reason.
fn payment_entry(
    w: &mut XmlWriter,
    (file, block, p): (&SentSepaFile, &SentPaymentInfo, &SentSepaPayment),
    return_code: Option<&ReasonCode>,
    number: usize,
    config: &SimulationConfig,
) {
    let (tag, direction, sub_family) = match return_code {
        None => ("DBIT", "DBIT", "ESCT"),
        Some(_) => ("RTRN", "CRDT", "RRTN"),
    };
    let e = NtryOut {
        number,
        cents: p.amount.cents,
        currency: p.amount.currency.as_str(),
        credit: return_code.is_some(),
        servicer_ref: format!("BK{}", digest16(&[tag, &file.msg_id, &p.end_to_end_id])),
        sub_family,
    };
    entry_head(w, &e, config);
    w.open(4, "NtryDtls");
    w.open(5, "TxDtls");
    tx_refs(w, file, block, p);
    amount_line(w, 6, "Amt", p);
    w.text(6, "CdtDbtInd", direction);
    if let Some(code) = return_code {
        w.open(6, "RtrInf");
        w.open(7, "Rsn");
        w.text(8, "Cd", code.as_str());
        w.close(7, "Rsn");
        if let Some(reason) = code.known() {
            w.text(
                7,
                "AddtlInf",
                &reason.description().chars().take(105).collect::<String>(),
            );
        }
        w.close(6, "RtrInf");
    }
    w.close(5, "TxDtls");
    w.close(4, "NtryDtls");
    w.close(3, "Ntry");
}

fn batch_entry(
    w: &mut XmlWriter,
    file: &SentSepaFile,
    block: &SentPaymentInfo,
    payments: &Decided<'_>,
    number: &mut usize,
    config: &SimulationConfig,
) -> Result<(), SimulateError> {
    let booked: Vec<&SentSepaPayment> = payments
        .iter()
        .filter(|(_, o)| !matches!(o, Outcome::Rejected(_)))
        .map(|(p, _)| *p)
        .collect();
    let Some(first) = booked.first() else {
        return Ok(());
    };
    let currencies: BTreeSet<_> = booked.iter().map(|p| p.amount.currency).collect();
    if currencies.len() > 1 {
        return Err(SimulateError::MixedCurrencies {
            pmt_inf_id: block.pmt_inf_id.clone(),
        });
    }
    let total = sum_cents(&block.pmt_inf_id, booked.iter().copied())?;
    let currency = first.amount.currency.as_str();
    *number += 1;
    let e = NtryOut {
        number: *number,
        cents: total,
        currency,
        credit: false,
        servicer_ref: format!("BK{}", digest16(&["BTCH", &file.msg_id, &block.pmt_inf_id])),
        sub_family: "ESCT",
    };
    entry_head(w, &e, config);
    w.open(4, "NtryDtls");
    w.open(5, "Btch");
    w.text(6, "MsgId", &file.msg_id);
    w.text(6, "PmtInfId", &block.pmt_inf_id);
    w.text(6, "NbOfTxs", &booked.len().to_string());
    amount_value(w, 6, "TtlAmt", currency, total);
    w.text(6, "CdtDbtInd", "DBIT");
    w.close(5, "Btch");
    w.close(4, "NtryDtls");
    w.close(3, "Ntry");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// NACHA returns and notifications of change.
