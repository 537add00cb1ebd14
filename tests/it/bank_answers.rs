//! The bank's answers (SPEC §10) on both stores: status reports, notifications, statements
//! and NACHA returns answered by the simulator, imported and matched: settled, rejected,
//! returned, batch-booked, a notification of change waiting for approval, the same file
//! twice, a statement repeating a notification, unknown and mismatched entries, a file for
//! a batch never sent.

use crate::bank_support::*;
use crate::common::Tables;

use chrono::NaiveDate;
use settle::config::ControlConfig;
use settle::control::Sign;
use settle::domain::event::Rail;
use settle::domain::payout::PayoutStatus;
use settle::rails::bank::answers::{ImportContext, ImportReport, import_answer};
use settle::rails::bank::{self, BatchOutcome, Originator};
use settle_bank::simulate::{Booking, SimulatedAnswers, SimulationConfig, simulate};

/// Two SEPA and two ACH providers paid by the December run; the files generated.
async fn sent_world() -> (World, Vec<BatchOutcome>) {
    let w = World::new("2026-11-02T00:00:00Z").await;
    w.provider("eu_de", SEPA_DE).await;
    w.provider("eu_fr", SEPA_FR).await;
    w.provider("us_biz", ACH_BUSINESS).await;
    w.provider("us_ind", ACH_INDIVIDUAL).await;
    w.at("2026-11-11T00:00:00Z");
    for (p, gross) in [
        ("eu_de", 62_500_000),
        ("eu_fr", 31_250_000),
        ("us_biz", 62_500_000),
        ("us_ind", 31_250_000),
    ] {
        w.earn(p, gross, "2026-11-10T01:00:00Z").await;
    }
    w.at("2026-11-30T12:00:00Z");
    w.fx("0.915").await;
    w.at("2026-12-01T00:05:00Z");
    w.monthly("2026-12").await;
    w.at("2026-12-01T06:30:00Z");
    let report = bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    assert_eq!(report.batches.len(), 2);
    (w, report.batches)
}

fn sim(seed: u64) -> SimulationConfig {
    let day = NaiveDate::from_ymd_opt(2026, 12, 2).unwrap();
    SimulationConfig::new(seed, day, day.and_hms_opt(9, 0, 0).unwrap())
}

fn answer_files(o: &BatchOutcome, config: &SimulationConfig) -> Vec<String> {
    let sent = std::fs::read(&o.path).unwrap();
    match simulate(&sent, config).unwrap() {
        SimulatedAnswers::Sepa {
            status_report,
            notification,
        } => vec![status_report, notification],
        SimulatedAnswers::Nacha { returns } => vec![returns],
    }
}

async fn import(w: &World, file: &str) -> ImportReport {
    import_as(w, file, None).await
}

/// The import of `file` by the world's operator, signing requests with `signer` if given.
async fn import_as(w: &World, file: &str, signer: Option<&dyn Sign>) -> ImportReport {
    let originator = Originator::parse(&w.bank).unwrap();
    let control = ControlConfig::default();
    let cx = ImportContext {
        originator: &originator,
        control: &control,
        signer,
        payouts_per_tx: w.bank.answer_payouts_per_tx,
    };
    import_answer(&w.ledger, file.as_bytes().to_vec(), &cx, &w.actor())
        .await
        .unwrap_or_else(|e| panic!("import: {e}"))
}

fn rail_batch(batches: &[BatchOutcome], rail: Rail) -> &BatchOutcome {
    batches.iter().find(|o| o.batch.rail == rail).unwrap()
}

async fn statuses(w: &World, o: &BatchOutcome) -> Vec<PayoutStatus> {
    let mut out = Vec::new();
    for id in w.batch_payout_ids(o).await {
        out.push(w.payout(&id).await.status);
    }
    out
}

async fn event_count(w: &World) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(w.ledger.store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn accepted_and_booked_sepa_payouts_settle_once_whatever_repeats_them() {
    let (w, batches) = sent_world().await;
    let sepa = rail_batch(&batches, Rail::Sepa);
    let files = answer_files(sepa, &sim(1));
    let status = import(&w, &files[0]).await;
    assert_eq!((status.kind, status.status), ("pain.002", "accepted"));
    assert_eq!(status.settled, 2, "{:?}", status.results);
    assert_eq!(statuses(&w, sepa).await, vec![PayoutStatus::Settled; 2]);
    // The notification books the same payments: nothing twice.
    let booked = import(&w, &files[1]).await;
    assert_eq!(
        (booked.settled, booked.duplicates),
        (0, 2),
        "{:?}",
        booked.results
    );
    // The same file again: a duplicate, no event.
    let before = event_count(&w).await;
    let again = import(&w, &files[1]).await;
    assert_eq!(again.status, "duplicate");
    assert_eq!(event_count(&w).await, before);
    // A statement repeating the notification's entries (another message id): nothing twice.
    let statement = files[1]
        .replace("camt.054.001.08", "camt.053.001.08")
        .replace("BkToCstmrDbtCdtNtfctn", "BkToCstmrStmt")
        .replace("Ntfctn>", "Stmt>")
        .replace("NTF-", "STM-");
    let st = import(&w, &statement).await;
    assert_eq!(
        (st.kind, st.settled, st.exceptions),
        ("camt.053", 0, 0),
        "{:?}",
        st.results
    );
    assert_eq!(st.duplicates, 2);
    w.check().await;
}

#[tokio::test]
async fn a_rejected_sepa_payout_fails_with_the_banks_code_and_blocks_the_details() {
    let (w, batches) = sent_world().await;
    let sepa = rail_batch(&batches, Rail::Sepa);
    let ids = w.batch_payout_ids(sepa).await;
    let provider = w.payout(&ids[0]).await.provider_id;
    let payable_before = w.payable(&provider).await;
    let mut config = sim(2);
    config.rejections_per_mille = 1000;
    let files = answer_files(sepa, &config);
    let r = import(&w, &files[0]).await;
    assert_eq!(r.rejected, 2, "{:?}", r.results);
    let p = w.payout(&ids[0]).await;
    assert_eq!(p.status, PayoutStatus::Failed);
    let code = r.results[0].code.clone().unwrap();
    assert!(
        p.failure_reason
            .as_deref()
            .unwrap()
            .starts_with(&format!("{code}: ")),
        "{:?}",
        p.failure_reason
    );
    assert_eq!(
        w.payable(&provider).await,
        payable_before + p.amount_micro_usdc
    );
    let prov = w.provider_record(&provider).await;
    assert!(prov.method_invalid, "rejected details are blocked");
    // Confirming them again is a gated command whose approver is told why they are blocked.
    let confirm = settle::ledger::registry::UpdateProvider {
        update_id: None,
        provider_id: settle::domain::ids::ProviderId::parse(&provider).unwrap(),
        name: None,
        email: None,
        tier: None,
        schedule: None,
        status: None,
        payout_method: prov.payout_method.clone(),
    };
    let submitted = settle::control::propose(
        &w.ledger,
        &ControlConfig::default(),
        &settle::wire::import::Command::UpdateProvider(confirm),
        &w.actor(),
        None,
    )
    .await
    .unwrap();
    let settle::control::Submitted::Pending(row) = submitted else {
        panic!("confirming blocked details waits for a second operator");
    };
    // As the approver reads it: its bank details opened.
    let mut rows = [*row];
    w.ledger.open_approvals(&mut rows).await.unwrap();
    let [row] = rows;
    assert!(
        row.summary
            .contains("blocked since the bank returned or rejected a payout"),
        "{}",
        row.summary
    );
    w.check().await;
}

#[tokio::test]
async fn returned_payouts_by_camt_and_nacha_come_back_to_payable_with_their_codes() {
    let (w, batches) = sent_world().await;
    let mut config = sim(3);
    config.returns_per_mille = 1000;
    for rail in [Rail::Sepa, Rail::Ach] {
        let o = rail_batch(&batches, rail);
        let mut returned = 0;
        for file in answer_files(o, &config) {
            returned += import(&w, &file).await.returned;
        }
        assert_eq!(returned, 2, "{rail:?}");
        assert_eq!(statuses(&w, o).await, vec![PayoutStatus::Returned; 2]);
        for id in w.batch_payout_ids(o).await {
            let reason = w.payout(&id).await.failure_reason.unwrap();
            let codes: &[&str] = if rail == Rail::Ach {
                &["R01", "R03"]
            } else {
                &["AC04", "AC01", "MD07"]
            };
            assert!(codes.iter().any(|c| reason.starts_with(c)), "{reason}");
        }
    }
    w.check().await;
}

#[tokio::test]
async fn a_batch_booking_settles_the_batch_by_its_total_and_a_wrong_total_books_nothing() {
    let (w, batches) = sent_world().await;
    let sepa = rail_batch(&batches, Rail::Sepa);
    let mut config = sim(4);
    config.booking = Booking::Batch;
    let camt = answer_files(sepa, &config).remove(1);
    let total = settle::domain::money::format_cents(sepa.batch.total_cents);
    let wrong = camt
        .replace(&format!(">{total}<"), ">1.00<")
        .replace("NTF-", "BAD-");
    assert_ne!(
        wrong,
        camt.replace("NTF-", "BAD-"),
        "the total was replaced"
    );
    let bad = import(&w, &wrong).await;
    assert_eq!(bad.settled, 0);
    assert!(
        bad.results.iter().any(|e| e.outcome == "amount_mismatch"),
        "{:?}",
        bad.results
    );
    assert_eq!(statuses(&w, sepa).await, vec![PayoutStatus::Submitted; 2]);
    let good = import(&w, &camt).await;
    assert_eq!(good.settled, 1, "{:?}", good.results);
    assert_eq!(statuses(&w, sepa).await, vec![PayoutStatus::Settled; 2]);
    let rec = bank::reconcile::reconcile(&w.ledger, &w.bank)
        .await
        .unwrap();
    assert_eq!(rec.amount_differences.len(), 1);
    w.check().await;
}

#[tokio::test]
async fn unknown_ids_wrong_amounts_and_batches_never_sent_are_kept_and_reported() {
    let (w, batches) = sent_world().await;
    let sepa = rail_batch(&batches, Rail::Sepa);
    let ids = w.batch_payout_ids(sepa).await;
    let files = answer_files(sepa, &sim(5));
    let e2e = w.payout(&ids[0]).await.end_to_end_id.unwrap();
    let unknown = files[1].replace(&e2e, "po-never-sent");
    let r = import(&w, &unknown).await;
    assert_eq!(r.exceptions, 1, "{:?}", r.results);
    assert!(r.results.iter().any(|e| e.outcome == "unmatched"));
    // Another amount for the second payout.
    let amount = w.payout(&ids[1]).await.amount_eur_cents.unwrap();
    let text = settle::domain::money::format_cents(amount);
    let wrong = files[1]
        .replace(&format!(">{text}<"), ">9999.99<")
        .replace("NTF-", "WRG-");
    let r = import(&w, &wrong).await;
    assert!(
        r.results.iter().any(|e| e.outcome == "amount_mismatch"),
        "{:?}",
        r.results
    );
    // A status report for a batch never sent.
    let never = files[0]
        .replace(&sepa.batch.batch_id, "sepa-000000000000000000000000")
        .replace(&e2e, "po-x")
        .replace(&w.payout(&ids[1]).await.end_to_end_id.unwrap(), "po-y")
        .replace("PSR-", "NVR-");
    let r = import(&w, &never).await;
    assert_eq!(r.settled, 0, "{:?}", r.results);
    assert_eq!(r.exceptions, 2);
    // Kept once, reported by the reconciliation.
    let rec = bank::reconcile::reconcile(&w.ledger, &w.bank)
        .await
        .unwrap();
    assert_eq!(rec.unmatched.len(), 3, "{:?}", rec.unmatched);
    assert_eq!(rec.amount_differences.len(), 1);
    let again = import(&w, &unknown.replace("NTF-", "AGN-")).await;
    assert_eq!(again.exceptions, 1);
    let rec = bank::reconcile::reconcile(&w.ledger, &w.bank)
        .await
        .unwrap();
    assert_eq!(rec.unmatched.len(), 3, "the same entry is kept once");
    w.check().await;
}

#[tokio::test]
async fn a_notification_of_change_waits_for_a_second_operator() {
    let (w, batches) = sent_world().await;
    let ach = rail_batch(&batches, Rail::Ach);
    let mut config = sim(6);
    config.changes_per_mille = 1000;
    let file = answer_files(ach, &config).remove(0);
    let r = import(&w, &file).await;
    assert_eq!(r.changes_proposed, 2, "{:?}", r.results);
    let ids = w.batch_payout_ids(ach).await;
    let p = w.payout(&ids[0]).await;
    let before = w.provider_record(&p.provider_id).await;
    assert_eq!(
        before.payout_method.as_ref(),
        Some(&p.method),
        "never rewritten at once"
    );
    let pending: Vec<String> = r
        .results
        .iter()
        .filter_map(|e| {
            e.detail
                .rsplit_once("approval ")
                .map(|(_, id)| id.to_owned())
        })
        .collect();
    assert_eq!(pending.len(), 2);
    for id in &pending {
        let row = w.ledger.approval(id).await.unwrap();
        assert_eq!(
            (row.kind.as_str(), row.status.as_str()),
            ("payout_method", "pending")
        );
        assert_eq!(row.requested_by, w.actor().0);
    }
    // The same file again proposes nothing new.
    assert_eq!(import(&w, &file).await.status, "duplicate");
    // A different operator approves: the details change.
    for id in &pending {
        let (row, applied) = settle::control::approve(
            &w.ledger,
            &w.runs,
            id,
            &settle::ledger::Actor::operator("second"),
            None,
        )
        .await
        .unwrap();
        assert_eq!(applied, settle::ledger::Applied::Accepted, "{row:?}");
    }
    let after = w.provider_record(&p.provider_id).await;
    assert_ne!(
        after.payout_method.as_ref(),
        Some(&p.method),
        "changed once approved"
    );
    w.check().await;
}

/// On a ledger with operators, a notification of change uploaded or dropped in the inbox
/// has no operator to sign its request: the entry is kept (`change_unrequested`) and
/// reconciliation lists it until an operator imports the file again with their key, which
/// requests each change once and books nothing else twice.
#[tokio::test]
async fn a_change_imported_without_a_key_waits_until_an_operator_imports_it_again() {
    let (w, batches) = sent_world().await;
    let keys = tempfile::tempdir().unwrap();
    let mut first = Vec::new();
    let mut paths = Vec::new();
    for (seed, name) in [(7u8, "alice"), (9, "bob")] {
        let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
        let path = keys.path().join(format!("{name}.json"));
        let public = settle::operator_key::write_key_file(&path, &key).unwrap();
        first.push((
            settle::domain::operator::OperatorName::parse(name).unwrap(),
            public,
        ));
        paths.push(path);
    }
    w.ledger
        .bootstrap_operators(&first, &w.actor())
        .await
        .unwrap();
    let ach = rail_batch(&batches, Rail::Ach);
    let mut config = sim(6);
    config.changes_per_mille = 1000;
    let file = answer_files(ach, &config).remove(0);

    let r = import(&w, &file).await;
    assert_eq!(r.status, "accepted", "the file is booked: {:?}", r.results);
    assert_eq!(
        (r.changes_proposed, r.exceptions),
        (0, 2),
        "{:?}",
        r.results
    );
    assert!(
        r.results.iter().all(|e| e.outcome == "change_unrequested"),
        "{:?}",
        r.results
    );
    let open = bank::reconcile::reconcile(&w.ledger, &w.bank)
        .await
        .unwrap();
    assert_eq!(open.changes_unrequested.len(), 2, "{open:?}");
    assert!(!open.is_clean());

    let alice = settle::operator_key::load_signer(&w.ledger, &paths[0])
        .await
        .unwrap();
    let events = event_count(&w).await;
    let r = import_as(&w, &file, Some(&alice)).await;
    assert_eq!(r.status, "duplicate", "the file itself was booked before");
    assert_eq!(r.changes_proposed, 2, "{:?}", r.results);
    assert_eq!(
        event_count(&w).await,
        events + 2,
        "two requests booked, nothing else"
    );
    let done = bank::reconcile::reconcile(&w.ledger, &w.bank)
        .await
        .unwrap();
    assert!(done.changes_unrequested.is_empty(), "{done:?}");
    let events = event_count(&w).await;
    import_as(&w, &file, Some(&alice)).await;
    assert_eq!(
        event_count(&w).await,
        events,
        "each change is requested once"
    );
    let p = w.payout(&w.batch_payout_ids(ach).await[0]).await;
    assert_eq!(
        w.provider_record(&p.provider_id)
            .await
            .payout_method
            .as_ref(),
        Some(&p.method),
        "requested, not rewritten"
    );
    w.check().await;
}

/// The operator's loop through the CLI: `settle bank simulate` answers the batch files,
/// `settle bank import` books the answers (per-file and per-entry JSON), importing the same
/// files again books nothing twice, and `settle bank reconcile` shows the SEPA batch
/// answered and the ACH batch still open (NACHA answers with returns only).
#[tokio::test]
async fn the_cli_simulates_imports_and_reconciles_the_banks_answers() {
    let (w, batches) = sent_world().await;
    let now = "2026-12-02T10:00:00Z";
    let out = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = ["--now", now, "bank", "simulate"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(batches.iter().map(|o| o.path.display().to_string()));
    args.extend([
        "--out".into(),
        out.path().display().to_string(),
        "--seed".into(),
        "7".into(),
    ]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = crate::common::run_cli(&w.db.url, &refs);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let mut answers: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    answers.sort();
    assert!(answers.len() >= 3, "{answers:?}");
    let import = |files: &[String]| {
        let mut args = vec!["--now", now, "--format", "json", "bank", "import"];
        args.extend(files.iter().map(String::as_str));
        let (code, stdout, stderr) = crate::common::run_cli(&w.db.url, &args);
        let v: serde_json::Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
        (code, v)
    };
    let (code, first) = import(&answers);
    assert_eq!(code, 0, "{first}");
    let files = first["files"].as_array().unwrap();
    assert_eq!(files.len(), answers.len(), "{first}");
    let settled: u64 = files
        .iter()
        .map(|f| f["report"]["settled"].as_u64().unwrap_or(0))
        .sum();
    // The SEPA payouts settle (a NACHA file answers only with returns: none here).
    assert_eq!(settled, 2, "each SEPA payout settled once: {first}");
    let (code, again) = import(&answers);
    assert_eq!(code, 0, "{again}");
    for f in again["files"].as_array().unwrap() {
        assert_eq!(f["report"]["status"], "duplicate", "{again}");
    }
    let (code, stdout, stderr) = crate::common::run_cli(
        &w.db.url,
        &["--now", now, "--format", "json", "bank", "reconcile"],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let open = |rail: &str| {
        r["batches"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["rail"] == rail)
            .map(|b| b["open"].as_u64().unwrap())
    };
    assert_eq!(open("sepa"), Some(0), "{r}");
    assert_eq!(
        open("ach"),
        Some(2),
        "ACH stays open until its due day: {r}"
    );
    assert_eq!(r["unmatched"], serde_json::json!([]), "{r}");
}
