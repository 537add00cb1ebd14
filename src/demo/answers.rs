//! The demo's bank answering its files (SPEC §10): the local bank simulator writes what a
//! bank sends back for the week's SEPA and NACHA files (the SEPA payout accepted and
//! booked, the ACH payout returned), and the engine imports them as the inbox would.

use std::path::{Path, PathBuf};

use chrono::DateTime;
use serde_json::{Value, json};
use settle_bank::simulate::SimulationConfig;

use crate::config::{BankConfig, ControlConfig};
use crate::domain::event::Rail;
use crate::ledger::{Actor, Ledger};
use crate::rails::bank::answers::{ImportContext, import_answer};
use crate::rails::bank::inbox::simulate_files;
use crate::rails::bank::{GenerateReport, Originator};

/// The simulator's seed: the same answers every run.
const SEED: u64 = 20_261_207;

/// Answers every batch of `generated` into `DIR/bank-answers/` and imports the answers:
/// one row per answer file with what it booked.
pub(crate) async fn answer_batches(
    ledger: &Ledger,
    bank: &BankConfig,
    generated: &GenerateReport,
    dir: &Path,
) -> anyhow::Result<Vec<Value>> {
    let out_dir = dir.join("bank-answers");
    std::fs::create_dir_all(&out_dir)?;
    let now = DateTime::from_timestamp_millis(ledger.now_ms())
        .map(|t| t.naive_utc())
        .unwrap_or_default();
    let originator = Originator::parse(bank).map_err(|e| anyhow::anyhow!("{e}"))?;
    // The import reads the ledger's policy (`control::effective`); no change is proposed here.
    let control = ControlConfig::default();
    let cx = ImportContext {
        originator: &originator,
        control: &control,
        signer: None,
        payouts_per_tx: bank.answer_payouts_per_tx,
    };
    let mut rows = Vec::new();
    for b in &generated.batches {
        let mut sim = SimulationConfig::new(SEED, now.date(), now);
        // The bank books the SEPA payouts; the ACH receiver's bank sends its payout back.
        sim.returns_per_mille = if b.batch.rail == Rail::Ach { 1000 } else { 0 };
        let files: Vec<PathBuf> = vec![b.path.clone()];
        for (_, answer) in simulate_files(bank, &files, &out_dir, &sim)? {
            let bytes = std::fs::read(&answer)?;
            let report = import_answer(ledger, bytes, &cx, &Actor::system("bank-inbox"))
                .await
                .map_err(|e| anyhow::anyhow!("{answer}: {e}"))?;
            rows.push(json!({
                "file": answer, "kind": report.kind, "message_id": report.message_id,
                "settled": report.settled, "rejected": report.rejected, "returned": report.returned,
                "exceptions": report.exceptions,
                "entries": report.results.iter().map(|e| json!({
                    "payout_id": e.payout_id, "outcome": e.outcome, "code": e.code, "detail": e.detail,
                })).collect::<Vec<_>>(),
            }));
        }
    }
    Ok(rows)
}

/// The answers for a terminal: per file what it booked, then each returned payout's reason.
pub fn render(out: &mut String, answers: &[Value]) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "\nBank answers (local bank simulator, imported as the inbox would):"
    );
    for a in answers {
        let _ = writeln!(
            out,
            "  {} {}: {} settled, {} rejected, {} returned",
            a["kind"].as_str().unwrap_or(""),
            a["message_id"].as_str().unwrap_or(""),
            a["settled"],
            a["rejected"],
            a["returned"]
        );
        for e in a["entries"].as_array().into_iter().flatten() {
            if e["outcome"] == "returned" || e["outcome"] == "rejected" {
                let _ = writeln!(
                    out,
                    "    {} {}: {} (back to payable; the bank details wait for a confirmation)",
                    e["payout_id"].as_str().unwrap_or(""),
                    e["outcome"].as_str().unwrap_or(""),
                    e["detail"].as_str().unwrap_or("")
                );
            }
        }
    }
}
