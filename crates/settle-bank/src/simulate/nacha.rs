//! The NACHA half of the simulator: a return file (addenda 99) and notifications of change
//! (addenda 98) answering the engine's ACH file.

use super::*;

/// The ABA check digit for eight digits (weights 3, 7, 1).
fn aba_check_digit(first8: &str) -> u32 {
    let sum: u32 = first8
        .bytes()
        .zip([3, 7, 1].iter().cycle())
        .map(|(b, w)| u32::from(b - b'0') * w)
        .sum();
    (10 - sum % 10) % 10
}

/// The transaction code of a return or notification of change for an original code:
/// `22` → `21`, `32` → `31`, `27` → `26`.
fn return_transaction_code(original: &str) -> String {
    let b = original.as_bytes();
    match b {
        [a, b'2'..=b'4'] => format!("{}1", char::from(*a)),
        [a, b'7'..=b'9'] => format!("{}6", char::from(*a)),
        _ => original.to_owned(),
    }
}

/// The corrected data (29 characters) the simulator writes for a change.
fn corrected_data(code: &ChangeCode, e: &SentNachaEntry, draw: u64) -> String {
    let account = format!("{:012}", draw % 1_000_000_000_000);
    let prefix = format!("02{:06}", (draw >> 40) % 1_000_000);
    let routing = format!("{prefix}{}", aba_check_digit(&prefix));
    let other_code = match e.transaction_code.as_str() {
        "22" => "32",
        "32" => "22",
        c => c,
    };
    let data = match code.as_str() {
        "C01" => account,
        "C02" => routing,
        "C03" => format!("{routing}   {account}"),
        "C05" => other_code.to_owned(),
        _ => format!("{account:<17}   {other_code}"),
    };
    pad(&data, 29)
}

/// Writes records, counting what the controls need.
#[derive(Default)]
struct AchOut {
    records: Vec<String>,
    batches: u64,
    entries: u64,
    hash: u64,
    credit: u64,
    debit: u64,
    trace_seq: u64,
}

/// Answers a NACHA credit file: returns and notifications of change.
///
/// # Errors
/// [`SimulateError`] for a bad configuration.
pub fn simulate_nacha(
    file: &SentNachaFile,
    config: &SimulationConfig,
) -> Result<String, SimulateError> {
    config.check_ach()?;
    let mut out = AchOut::default();
    out.records.push(format!(
        "101{dest}{origin}{date}{time}A094101{dest_name}{origin_name}{reference}",
        dest = pad(&file.immediate_origin, 10),
        origin = pad(&file.immediate_destination, 10),
        date = config.created_at.format("%y%m%d"),
        time = config.created_at.format("%H%M"),
        dest_name = pad(&file.origin_name, 23),
        origin_name = pad(&file.destination_name, 23),
        reference = pad("", 8),
    ));
    for batch in &file.batches {
        let decided: Vec<(&SentNachaEntry, Outcome)> = batch
            .entries
            .iter()
            .map(|e| (e, config.ach_outcome(&e.trace)))
            .collect();
        let returns: Vec<_> = decided
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Returned(_)))
            .collect();
        let changes: Vec<_> = decided
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Changed(_)))
            .collect();
        for (sec, list) in [(batch.sec_code.as_str(), returns), ("COR", changes)] {
            if !list.is_empty() {
                ach_batch(&mut out, batch, sec, &list, config);
            }
        }
    }
    let blocks = (out.records.len() + 1).div_ceil(NACHA_BLOCKING_FACTOR);
    out.records.push(format!(
        "9{batches:06}{blocks:06}{entries:08}{hash:010}{debit:012}{credit:012}{reserved}",
        batches = out.batches,
        entries = out.entries,
        hash = out.hash % 10_000_000_000,
        debit = out.debit,
        credit = out.credit,
        reserved = pad("", 39),
    ));
    while !out.records.len().is_multiple_of(NACHA_BLOCKING_FACTOR) {
        out.records.push("9".repeat(NACHA_RECORD_CHARS));
    }
    let mut text = String::with_capacity(out.records.len() * (NACHA_RECORD_CHARS + 1));
    for r in &out.records {
        text.push_str(r);
        text.push('\n');
    }
    Ok(text)
}

fn ach_batch(
    out: &mut AchOut,
    batch: &SentNachaBatch,
    sec: &str,
    list: &[&(&SentNachaEntry, Outcome)],
    config: &SimulationConfig,
) {
    out.batches += 1;
    out.records.push(format!(
        "5220{name}{discretionary}{company_id}{sec}{description}{descriptive}{effective}   1{odfi}{number:07}",
        name = pad(&batch.company_name, 16),
        discretionary = pad(&batch.company_discretionary, 20),
        company_id = pad(&batch.company_id, 10),
        sec = pad(sec, 3),
        description = pad(&batch.entry_description, 10),
        descriptive = pad("", 6),
        effective = config.booking_date.format("%y%m%d"),
        odfi = batch.odfi,
        number = out.batches,
    ));
    let (mut count, mut hash, mut credit, mut debit) = (0u64, 0u64, 0u64, 0u64);
    for (e, outcome) in list {
        let Some((entry, addenda, cents)) = ach_answer(out, batch, e, outcome, config) else {
            continue;
        };
        let code = entry.get(1..3).unwrap_or("");
        match code.as_bytes().get(1) {
            Some(b'1'..=b'4') => credit += cents,
            Some(b'5'..=b'9') => debit += cents,
            _ => {}
        }
        hash += batch.odfi.parse::<u64>().unwrap_or(0);
        count += 2;
        out.records.push(entry);
        out.records.push(addenda);
    }
    out.records.push(format!(
        "8220{count:06}{hash:010}{debit:012}{credit:012}{company_id}{mac}{reserved}{odfi}{number:07}",
        hash = hash % 10_000_000_000,
        company_id = pad(&batch.company_id, 10),
        mac = pad("", 19),
        reserved = pad("", 6),
        odfi = batch.odfi,
        number = out.batches,
    ));
    out.entries += count;
    out.hash += hash;
    out.credit += credit;
    out.debit += debit;
}

/// One return or change: the entry record, its addenda and the amount it carries;
/// `None` for an entry that settled.
fn ach_answer(
    out: &mut AchOut,
    batch: &SentNachaBatch,
    e: &SentNachaEntry,
    outcome: &Outcome,
    config: &SimulationConfig,
) -> Option<(String, String, u64)> {
    if !matches!(outcome, Outcome::Returned(_) | Outcome::Changed(_)) {
        return None;
    }
    out.trace_seq += 1;
    let rdfi = e.routing.get(..8).unwrap_or("00000000");
    let trace = format!("{rdfi}{:07}", out.trace_seq);
    let cents = match outcome {
        Outcome::Returned(_) => u64::try_from(e.amount_usd_cents).unwrap_or(0),
        _ => 0,
    };
    let entry = format!(
        "6{code}{odfi}{check}{account}{cents:010}{id}{name}  1{trace}",
        code = return_transaction_code(&e.transaction_code),
        odfi = batch.odfi,
        check = aba_check_digit(&batch.odfi),
        account = pad(&e.account, 17),
        id = pad(&e.individual_id, 15),
        name = pad(&e.individual_name, 22),
    );
    let addenda = match outcome {
        Outcome::Changed(code) => {
            let (_, draw) = roll(config.seed, e.trace.as_str());
            format!(
                "798{code}{original}{reserved}{rdfi}{data}{reserved2}{trace}",
                original = e.trace,
                reserved = pad("", 6),
                data = corrected_data(code, e, draw),
                reserved2 = pad("", 15),
            )
        }
        Outcome::Returned(code) => {
            let death = match code.as_str() {
                "R14" | "R15" => config.booking_date.format("%y%m%d").to_string(),
                _ => pad("", 6),
            };
            format!(
                "799{code}{original}{death}{rdfi}{info}{trace}",
                original = e.trace,
                info = pad("", 44),
            )
        }
        Outcome::Settled | Outcome::Rejected(_) => return None,
    };
    Some((entry, addenda, cents))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(aba_check_digit("02100002"), 1);
        assert_eq!(return_transaction_code("22"), "21");
        assert_eq!(return_transaction_code("32"), "31");
        assert_eq!(return_transaction_code("27"), "26");
    }
}
