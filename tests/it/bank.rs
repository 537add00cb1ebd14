//! The bank rail (SPEC §6) on both stores: SEPA pain.001.001.09 and NACHA files from a
//! monthly run, validated against the official XSD and an independent NACHA checker;
//! byte-identical regeneration; the batch lifecycle generated → submitted → settled;
//! returns that re-credit the provider and block its bank details until it enters new ones;
//! idempotent, concurrent and crash-interrupted generation; the CLI.

use crate::bank_support;
use crate::common;

use std::collections::BTreeSet;

use bank_support::*;
use settle::domain::event::Rail;
use settle::rails::bank::{self, Originator};

fn candidate_decision(report: &settle::ledger::runs::RunReport, provider: &str) -> String {
    report
        .candidates
        .iter()
        .find(|c| c.provider_id == provider)
        .unwrap_or_else(|| panic!("{provider} is no candidate"))
        .decision
        .as_str()
        .to_owned()
}

fn payout_id_of(report: &settle::ledger::runs::RunReport, provider: &str) -> String {
    report
        .candidates
        .iter()
        .find(|c| c.provider_id == provider)
        .and_then(|c| c.payout_id.clone())
        .unwrap_or_else(|| panic!("{provider} was not paid"))
}

/// Providers on every rail with sub-cent balances, paid by the December 2026 monthly run.
async fn mixed_world() -> World {
    let w = World::new("2026-11-02T00:00:00Z").await;
    w.provider("sol", SOLANA).await;
    w.provider("eu_de", SEPA_DE).await;
    w.provider("eu_fr", SEPA_FR).await;
    w.provider("us_biz", ACH_BUSINESS).await;
    w.provider("us_ind", ACH_INDIVIDUAL).await;
    w.at("2026-11-11T00:00:00Z");
    w.earn("sol", 10_000_000, "2026-11-10T01:00:00Z").await;
    assert_eq!(
        w.earn("eu_de", 62_500_000, "2026-11-10T01:00:00Z").await,
        50 * USDC
    );
    w.adjust("eu_de", "adj-de", 4_567).await;
    assert_eq!(
        w.earn("eu_fr", 31_250_000, "2026-11-10T01:00:00Z").await,
        25 * USDC
    );
    w.adjust("eu_fr", "adj-fr", 1_239_999).await;
    assert_eq!(
        w.earn("us_biz", 50_000_000, "2026-11-10T01:00:00Z").await,
        40 * USDC
    );
    w.adjust("us_biz", "adj-biz", 12_345).await;
    assert_eq!(
        w.earn("us_ind", 12_500_000, "2026-11-10T01:00:00Z").await,
        10 * USDC
    );
    w.at("2026-11-30T12:00:00Z");
    w.fx("0.915").await;
    w
}

#[tokio::test]
async fn a_monthly_run_pays_through_sepa_and_nacha_files_with_lifecycle_returns_and_repayment() {
    let w = mixed_world().await;
    w.at("2026-12-01T00:05:00Z");
    let run = w.monthly("2026-12").await;
    for p in ["sol", "eu_de", "eu_fr", "us_biz", "us_ind"] {
        assert_eq!(candidate_decision(&run, p), "paid", "{p}");
    }
    let po_de = payout_id_of(&run, "eu_de");
    let po_fr = payout_id_of(&run, "eu_fr");
    let po_biz = payout_id_of(&run, "us_biz");
    let po_ind = payout_id_of(&run, "us_ind");
    let po_sol = payout_id_of(&run, "sol");
    assert_eq!(
        w.payout(&po_de).await.amount_eur_cents,
        Some(4575),
        "5000 × 0.915"
    );
    assert_eq!(
        w.payout(&po_fr).await.amount_eur_cents,
        Some(2400),
        "2623 × 0.915 = 2400.045"
    );

    // Generate: one SEPA file and one NACHA file.
    w.at("2026-12-01T06:30:00Z");
    let report = bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.batches.len(), 2, "one file per rail");
    let sepa = report
        .batches
        .iter()
        .find(|o| o.batch.rail == Rail::Sepa)
        .unwrap();
    let ach = report
        .batches
        .iter()
        .find(|o| o.batch.rail == Rail::Ach)
        .unwrap();
    assert!(sepa.new && ach.new);
    assert!(sepa.problems.is_empty() && ach.problems.is_empty());
    assert_eq!(sepa.submitted, 2);
    assert_eq!(ach.submitted, 2);

    // The SEPA file: valid against the XSD, the SEPA rules, and exactly the ledger's amounts.
    assert_valid_pain001(&sepa.path);
    let xml = std::fs::read_to_string(&sepa.path).unwrap();
    assert_eq!(
        sha256_file(&sepa.path),
        sepa.batch.sha256,
        "the ledger holds the file's hash"
    );
    let (msg_id, ctrl_sum, txs) = check_sepa_rules(&xml);
    assert_eq!(msg_id, sepa.batch.batch_id);
    assert!(xml.contains("<CreDtTm>2026-12-01T06:30:00</CreDtTm>"));
    let mut stored_eur = 0;
    for id in [&po_de, &po_fr] {
        stored_eur += w.payout(id).await.amount_eur_cents.unwrap();
    }
    assert_eq!(
        ctrl_sum, stored_eur,
        "CtrlSum = the EUR cents stored on the payouts"
    );
    assert_eq!(ctrl_sum, 6975);
    assert_eq!(sepa.batch.total_cents, 6975);
    assert_eq!(sepa.batch.currency, "EUR");
    // EndToEndId = the payout id in the SEPA character set (`po_…` → `po-…`).
    let e2e_of = |id: &str| id.replace('_', "-");
    let mut e2e: Vec<String> = txs.iter().map(|t| t.end_to_end_id.clone()).collect();
    e2e.sort_unstable();
    let mut expected = vec![e2e_of(&po_de), e2e_of(&po_fr)];
    expected.sort_unstable();
    assert_eq!(e2e, expected, "EndToEndId = payout id");
    // The remittance names the run and carries the hash of the payout's statement (SPEC §13).
    let payouts = settle::ledger::payouts::payouts(&w.ledger.store, &[&po_de, &po_fr])
        .await
        .unwrap();
    let pairs: Vec<(&str, &str)> = payouts
        .values()
        .map(|p| (p.payout_id.as_str(), p.provider_id.as_str()))
        .collect();
    let statements = settle::statement::statement_hashes(&w.ledger.store, &pairs)
        .await
        .unwrap();
    for t in &txs {
        assert_eq!(
            t.execution_date, "2026-12-01",
            "the TARGET2 business day on or after today"
        );
        let payout = if t.end_to_end_id == e2e_of(&po_de) {
            &po_de
        } else {
            &po_fr
        };
        assert_eq!(
            t.remittance.as_deref(),
            Some(
                format!(
                    "settle payout monthly 2026-12 st:{}",
                    hex::encode(statements[payout.as_str()])
                )
                .as_str()
            )
        );
    }
    let de = txs
        .iter()
        .find(|t| t.end_to_end_id == e2e_of(&po_de))
        .unwrap();
    assert_eq!(de.creditor_iban, "DE89370400440532013000");
    assert_eq!(de.creditor_bic.as_deref(), Some("COBADEFFXXX"));
    assert_eq!(de.amount_eur_cents, 4575);
    let fr = txs
        .iter()
        .find(|t| t.end_to_end_id == e2e_of(&po_fr))
        .unwrap();
    assert_eq!(fr.creditor_iban, "FR1420041010050500013M02606");
    assert_eq!(fr.creditor_bic, None);
    assert!(
        fr.creditor_name.starts_with("Zoe Mueller-Lukasiewicz"),
        "{}",
        fr.creditor_name
    );

    // The NACHA file: the independent checker, CCD for the business, PPD for the person.
    assert!(ach.path.extension().is_some_and(|e| e == "ach"));
    let nacha = std::fs::read_to_string(&ach.path).unwrap();
    assert_eq!(sha256_file(&ach.path), ach.batch.sha256);
    // Names and account numbers: both files readable by their owner only, whatever the umask.
    for path in [&sepa.path, &ach.path] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is {mode:o}", path.display());
    }
    let (entries, credit_total) = check_nacha(&nacha);
    let mut usd_cents = 0;
    for id in [&po_biz, &po_ind] {
        usd_cents += w.payout(id).await.amount_micro_usdc / 10_000;
    }
    assert_eq!(
        credit_total, usd_cents,
        "credit total = the payouts' USD cents"
    );
    assert_eq!(credit_total, 4001 + 1000);
    assert_eq!(ach.batch.total_cents, 5001);
    assert_eq!(ach.batch.currency, "USD");
    let biz = entries.iter().find(|e| e.amount_usd_cents == 4001).unwrap();
    assert_eq!(
        (biz.sec.as_str(), biz.transaction_code.as_str()),
        ("CCD", "22")
    );
    assert_eq!(
        (biz.routing.as_str(), biz.account.as_str()),
        ("021000021", "123456789")
    );
    assert_eq!(biz.name, "ACME COMPUTE LLC");
    let ind = entries.iter().find(|e| e.amount_usd_cents == 1000).unwrap();
    assert_eq!(
        (ind.sec.as_str(), ind.transaction_code.as_str()),
        ("PPD", "32")
    );
    assert_eq!(ind.account, "9876-5432");
    for e in &entries {
        assert_eq!(
            e.effective_date, "261202",
            "the first Fed business day after today"
        );
    }
    assert_eq!(
        &nacha[23..33],
        "2612010630",
        "file creation = the batch's recorded time"
    );

    // Payouts submitted with the batch id and the end-to-end id.
    for (id, batch) in [
        (&po_de, sepa),
        (&po_fr, sepa),
        (&po_biz, ach),
        (&po_ind, ach),
    ] {
        let p = w.payout(id).await;
        assert_eq!(p.status.as_str(), "submitted", "{id}");
        assert_eq!(p.reference.as_deref(), Some(batch.batch.batch_id.as_str()));
        assert!(p.end_to_end_id.is_some());
        // Once in a file, a bank payout cannot be failed by hand: only a return undoes it.
        let err = w
            .ledger
            .fail_payout(id, "operator mistake", &w.actor())
            .await
            .unwrap_err();
        assert_eq!(err.code(), "invalid_payout_state", "{id}");
    }
    assert_eq!(
        w.payout(&po_de).await.end_to_end_id,
        Some(e2e_of(&po_de)),
        "recorded for returns"
    );
    assert_eq!(
        w.payout(&po_ind).await.end_to_end_id.as_deref(),
        Some(ind.individual_id.as_str()),
        "ACH end-to-end id = the entry's identification number"
    );
    assert_eq!(
        w.payout(&po_sol).await.status.as_str(),
        "created",
        "Solana payouts are not the bank's"
    );
    w.check().await;

    // Idempotent: nothing new; a lost file is regenerated byte for byte on request.
    w.at("2026-12-01T07:00:00Z");
    let again = bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    assert!(again.batches.is_empty(), "{:?}", again.batches);
    assert_eq!(bank::batches(&w.ledger.store).await.unwrap().len(), 2);
    std::fs::remove_file(&sepa.path).unwrap();
    let (_, regenerated) = bank::regenerate(
        &w.ledger,
        &Originator::parse(&w.bank).unwrap(),
        &sepa.batch.batch_id,
    )
    .await
    .unwrap();
    assert_eq!(
        regenerated.contents, xml,
        "regenerate gives identical bytes"
    );
    let (_, regenerated) = bank::regenerate(
        &w.ledger,
        &Originator::parse(&w.bank).unwrap(),
        &ach.batch.batch_id,
    )
    .await
    .unwrap();
    assert_eq!(regenerated.contents, nacha);
    // The uploader moved the handed-off file away: the worker never writes it again (it
    // would be uploaded twice); only an operator's `bank regenerate` brings it back.
    w.at("2026-12-01T08:00:00Z");
    let again = bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    assert!(again.batches.is_empty(), "{:?}", again.batches);
    assert!(
        !sepa.path.exists(),
        "the worker rewrote a file that was handed off: {}",
        sepa.path.display()
    );
    // Another originator would change the bytes: refused, never silently rewritten.
    let other = settle::config::BankConfig {
        sepa_debtor_name: "Somebody Else".into(),
        ..w.bank.clone()
    };
    let err = bank::regenerate(
        &w.ledger,
        &Originator::parse(&other).unwrap(),
        &sepa.batch.batch_id,
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "bank_file_mismatch");

    // Lifecycle: generated → submitted → settled.
    let err = bank::mark_settled(&w.ledger, &sepa.batch.batch_id, &w.actor())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_batch_state");
    let err = bank::mark_submitted(&w.ledger, "sepa-nope", &w.actor())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "unknown_bank_batch");
    for b in [sepa, ach] {
        let o = bank::mark_submitted(&w.ledger, &b.batch.batch_id, &w.actor())
            .await
            .unwrap();
        assert_eq!(
            (o.status_change, o.batch.status.as_str()),
            ("accepted", "submitted")
        );
        let o = bank::mark_submitted(&w.ledger, &b.batch.batch_id, &w.actor())
            .await
            .unwrap();
        assert_eq!(o.status_change, "duplicate");
    }
    w.at("2026-12-02T16:00:00Z");
    for b in [sepa, ach] {
        let o = bank::mark_settled(&w.ledger, &b.batch.batch_id, &w.actor())
            .await
            .unwrap();
        assert_eq!((o.status_change, o.payouts_changed), ("accepted", 2));
        assert_eq!(o.batch.status.as_str(), "settled");
        let o = bank::mark_settled(&w.ledger, &b.batch.batch_id, &w.actor())
            .await
            .unwrap();
        assert_eq!((o.status_change, o.payouts_changed), ("duplicate", 0));
    }
    let de_amount = w.payout(&po_de).await.amount_micro_usdc;
    assert_eq!(de_amount, 50 * USDC);
    for (provider, id) in [
        ("eu_de", &po_de),
        ("eu_fr", &po_fr),
        ("us_biz", &po_biz),
        ("us_ind", &po_ind),
    ] {
        let p = w.payout(id).await;
        assert_eq!(p.status.as_str(), "settled");
        assert_eq!(
            w.treasury_bank(provider).await,
            p.amount_micro_usdc,
            "{provider}: paid from the bank treasury"
        );
        assert_eq!(w.in_transit(provider).await, 0);
    }
    assert_eq!(
        w.payable("eu_de").await,
        4_567,
        "the sub-cent remainder stays payable"
    );
    w.check().await;

    // A return that proves the account wrong: re-credit, block the details.
    w.at("2026-12-03T09:00:00Z");
    let r = bank::return_payout(&w.ledger, &po_de, "ac04", &w.actor())
        .await
        .unwrap();
    assert_eq!(
        (r.code.as_str(), r.method_invalid, r.status),
        ("AC04", true, "accepted")
    );
    assert_eq!(r.batch_id, sepa.batch.batch_id);
    assert_eq!(w.payout(&po_de).await.status.as_str(), "returned");
    assert_eq!(w.payable("eu_de").await, 4_567 + de_amount, "payable +");
    assert_eq!(w.treasury_bank("eu_de").await, 0, "treasury bank −");
    let again = bank::return_payout(&w.ledger, &po_de, "AC04", &w.actor())
        .await
        .unwrap();
    assert_eq!(again.status, "duplicate");
    let err = bank::return_payout(&w.ledger, &po_de, "AC01", &w.actor())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "conflict");
    // Every return blocks the details, whatever its code (SPEC §6; R01 is "insufficient
    // funds"): the provider confirms them again and the next run pays it.
    let r = bank::return_payout(&w.ledger, &po_ind, "R01", &w.actor())
        .await
        .unwrap();
    assert!(r.method_invalid);
    w.update_method("us_ind", ACH_INDIVIDUAL).await;
    w.check().await;

    // The next run: the blocked details decide no_method; the other provider is paid again.
    w.at("2026-12-11T00:00:00Z");
    w.earn("eu_de", 62_500_000, "2026-12-10T01:00:00Z").await;
    w.earn("us_ind", 12_500_000, "2026-12-10T01:00:00Z").await;
    w.at("2027-01-03T12:00:00Z");
    w.fx("0.92").await;
    w.at("2027-01-04T00:05:00Z");
    let jan = w.monthly("2027-01").await;
    assert_eq!(
        candidate_decision(&jan, "eu_de"),
        "no_method",
        "bank details invalid after AC04"
    );
    assert_eq!(candidate_decision(&jan, "us_ind"), "paid");
    let po_ind_jan = payout_id_of(&jan, "us_ind");
    assert_eq!(
        w.payout(&po_ind_jan).await.amount_micro_usdc,
        20 * USDC,
        "returned 10 + earned 10"
    );
    w.at("2027-01-04T06:00:00Z");
    let jan_files = bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    assert_eq!(jan_files.batches.len(), 1, "only an ACH file in January");
    let jan_ach = &jan_files.batches[0];
    assert_eq!(w.batch_payout_ids(jan_ach).await, vec![po_ind_jan.clone()]);
    let (entries, total) = check_nacha(&std::fs::read_to_string(&jan_ach.path).unwrap());
    assert_eq!((entries.len(), total), (1, 2000));
    assert_eq!(entries[0].effective_date, "270105");

    // New details, then the cooling-off, then paid again to the new account.
    w.at("2027-01-04T08:00:00Z");
    w.update_method("eu_de", SEPA_DE_NEW).await;
    w.at("2027-01-31T12:00:00Z");
    w.fx("0.9").await;
    w.at("2027-02-01T00:05:00Z");
    let feb = w.monthly("2027-02").await;
    assert_eq!(
        candidate_decision(&feb, "eu_de"),
        "paid",
        "new details past the cooling-off"
    );
    let po_de_feb = payout_id_of(&feb, "eu_de");
    let p = w.payout(&po_de_feb).await;
    assert_eq!(
        p.amount_micro_usdc,
        100 * USDC,
        "the returned 50 and December's 50"
    );
    assert_eq!(p.amount_eur_cents, Some(9000));
    w.at("2027-02-01T07:00:00Z");
    let feb_files = bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    let feb_sepa = feb_files
        .batches
        .iter()
        .find(|o| o.batch.rail == Rail::Sepa)
        .unwrap();
    assert_valid_pain001(&feb_sepa.path);
    let (_, sum, txs) = check_sepa_rules(&std::fs::read_to_string(&feb_sepa.path).unwrap());
    assert_eq!(sum, 9000);
    assert_eq!(txs.len(), 1);
    assert_eq!(
        txs[0].creditor_iban, "DE02120300000000202051",
        "paid to the new account"
    );
    assert_eq!(txs[0].end_to_end_id, po_de_feb.replace('_', "-"));
    assert_eq!(txs[0].execution_date, "2027-02-01");
    w.check().await;
    let seen = common::assert_events_match_schemas(&w.ledger.store).await;
    for t in [
        "bank_batch.generated",
        "bank_batch.status_changed",
        "payout.submitted",
        "payout.settled",
        "payout.returned",
    ] {
        assert!(seen.contains(t), "{t} emitted");
    }
}

#[tokio::test]
async fn generation_is_idempotent_concurrent_safe_and_numbers_files_of_a_day() {
    let w = mixed_world().await;
    w.provider("us_hold", ACH_BUSINESS).await;
    w.import(&[
        r#"{"type":"provider.update","provider_id":"us_hold","status":"on_hold"}"#.to_owned(),
    ])
    .await;
    w.earn("us_hold", 12_500_000, "2026-11-30T01:00:00Z").await;
    w.at("2026-12-01T00:05:00Z");
    let run = w.monthly("2026-12").await;
    assert_eq!(candidate_decision(&run, "us_hold"), "held");
    let held = payout_id_of(&run, "us_hold");

    // Two generations at once: each payout lands in exactly one batch.
    w.at("2026-12-01T06:30:00Z");
    let actor = w.actor();
    let (a, b) = tokio::join!(
        bank::generate_batches(&w.ledger, &w.bank, &actor),
        bank::generate_batches(&w.ledger, &w.bank, &actor)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let new: Vec<_> = a
        .batches
        .iter()
        .chain(&b.batches)
        .filter(|o| o.new)
        .collect();
    assert_eq!(
        new.len(),
        2,
        "one new batch per rail across both generations"
    );
    let all = bank::batches(&w.ledger.store).await.unwrap();
    assert_eq!(all.len(), 2);
    let mut seen = BTreeSet::new();
    for batch in &all {
        for id in &batch.payout_ids {
            assert!(seen.insert(id.clone()), "{id} is in two batches");
            assert_eq!(w.payout(id).await.status.as_str(), "submitted");
        }
        assert_eq!(
            sha256_file(&bank::outbox_path(&w.bank, batch).unwrap()),
            batch.sha256
        );
    }
    assert_eq!(seen.len(), 4);
    assert!(!seen.contains(&held), "a held payout waits");

    // Released the same day: a second NACHA file, with the next file id modifier.
    w.ledger
        .release_payout(&held, &w.runs, &w.actor())
        .await
        .unwrap();
    w.at("2026-12-01T09:15:00Z");
    let second = bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    assert_eq!(second.batches.len(), 1);
    let ach2 = &second.batches[0];
    assert_eq!(w.batch_payout_ids(ach2).await, vec![held.clone()]);
    assert!(
        ach2.batch.file_name.ends_with("-B.ach"),
        "{}",
        ach2.batch.file_name
    );
    let text = std::fs::read_to_string(&ach2.path).unwrap();
    check_nacha(&text);
    assert_eq!(
        &text[33..34],
        "B",
        "file id modifier B: the day's second NACHA file"
    );
    let first_ach = all.iter().find(|b| b.rail == Rail::Ach).unwrap();
    assert!(first_ach.file_name.ends_with("-A.ach"));
    let (_, file) = bank::regenerate(
        &w.ledger,
        &Originator::parse(&w.bank).unwrap(),
        &ach2.batch.batch_id,
    )
    .await
    .unwrap();
    assert_eq!(file.contents, text);
    w.check().await;
}

/// `settle bank generate` at 06:30 on 2026-12-01 into `outbox`.
fn generate_args(outbox: &str) -> [&str; 6] {
    [
        "--now",
        "2026-12-01T06:30:00Z",
        "bank",
        "--outbox",
        outbox,
        "generate",
    ]
}

/// `settle bank generate` in a process that aborts at `failpoint`.
fn generation_crashed_at(w: &World, failpoint: &str) {
    let crashed = common::settle_command()
        .arg("--database")
        .arg(&w.db.url)
        .args(generate_args(&w.bank.outbox_dir))
        .env("SETTLE_FAILPOINT", failpoint)
        .output()
        .unwrap();
    assert!(
        !crashed.status.success(),
        "{failpoint}: the process must abort"
    );
    assert!(
        String::from_utf8_lossy(&crashed.stderr).contains("failpoint"),
        "{failpoint}: {}",
        String::from_utf8_lossy(&crashed.stderr)
    );
}

#[tokio::test]
async fn a_crash_anywhere_in_generation_is_finished_by_the_next_run() {
    if !crate::common::failpoints_or_skip(
        "a_crash_anywhere_in_generation_is_finished_by_the_next_run",
    ) {
        return;
    }
    use settle::rails::bank::failpoints::*;
    for failpoint in [
        GENERATE_BEFORE_COMMIT,
        AFTER_GENERATED,
        AFTER_FILE,
        "bank.after_submit:1",
        "bank.after_submit:3",
    ] {
        let w = mixed_world().await;
        w.at("2026-12-01T00:05:00Z");
        w.monthly("2026-12").await;
        let outbox = w.bank.outbox_dir.clone();
        generation_crashed_at(&w, failpoint);
        let (code, stdout, stderr) = common::run_cli(&w.db.url, &generate_args(&outbox));
        assert_eq!(code, 0, "{failpoint}: {stdout}{stderr}");

        let all = bank::batches(&w.ledger.store).await.unwrap();
        assert_eq!(
            all.len(),
            2,
            "{failpoint}: one batch per rail, no second batch"
        );
        let mut seen = BTreeSet::new();
        for b in &all {
            for id in &b.payout_ids {
                assert!(seen.insert(id.clone()), "{failpoint}: {id} in two batches");
                let p = w.payout(id).await;
                assert_eq!(p.status.as_str(), "submitted", "{failpoint}: {id}");
                assert_eq!(p.reference.as_deref(), Some(b.batch_id.as_str()));
            }
            let path = bank::outbox_path(&w.bank, b).unwrap();
            assert_eq!(
                sha256_file(&path),
                b.sha256,
                "{failpoint}: the file matches the ledger"
            );
            if b.rail == Rail::Sepa {
                assert_valid_pain001(&path);
                check_sepa_rules(&std::fs::read_to_string(&path).unwrap());
            } else {
                check_nacha(&std::fs::read_to_string(&path).unwrap());
            }
        }
        assert_eq!(seen.len(), 4, "{failpoint}");
        let leftovers: Vec<_> = std::fs::read_dir(&outbox)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(
            leftovers.is_empty(),
            "{failpoint}: temporary files {leftovers:?}"
        );
        w.check().await;
    }
}

#[tokio::test]
async fn names_beyond_the_sepa_set_and_limits_are_written_within_them() {
    let w = World::new("2026-11-02T00:00:00Z").await;
    // 70 characters as entered, longer once transliterated (ä → ae).
    let long = format!("Ä{} Gmbh & Co", "ä".repeat(59));
    assert_eq!(long.chars().count(), 70, "the longest holder name accepted");
    let method = format!(r#"{{"kind":"sepa","iban":"AT611904300234573201","holder":"{long}"}}"#);
    w.provider("eu_long", &method).await;
    w.provider(
        "eu_quote",
        r#"{"kind":"sepa","iban":"BE68539007547034","holder":"O'Brien <Ltd> \"Ω\""}"#,
    )
    .await;
    w.at("2026-11-11T00:00:00Z");
    w.earn("eu_long", 1_250_001, "2026-11-10T01:00:00Z").await;
    w.earn("eu_quote", 80_000_000, "2026-11-10T01:00:00Z").await;
    w.at("2027-01-03T12:00:00Z");
    w.fx("1.07").await;
    // New Year's Day is a TARGET2 closing day and Saturday-Sunday follow: executes Monday.
    w.at("2027-01-04T00:05:00Z");
    w.monthly("2027-01").await;
    w.at("2027-01-04T05:00:00Z");
    let report = bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    assert_eq!(report.batches.len(), 1);
    let path = &report.batches[0].path;
    assert_valid_pain001(path);
    let xml = std::fs::read_to_string(path).unwrap();
    let (_, sum, txs) = check_sepa_rules(&xml);
    // 1.000000 net → 100 cents × 1.07 = 107; 64.000000 → 6400 × 1.07 = 6848.
    assert_eq!(sum, 107 + 6848);
    let long_tx = txs
        .iter()
        .find(|t| t.creditor_iban.starts_with("AT"))
        .unwrap();
    assert_eq!(
        long_tx.creditor_name.chars().count(),
        70,
        "cut to 70 after transliteration"
    );
    assert!(
        long_tx.creditor_name.starts_with("Aeaeae"),
        "{}",
        long_tx.creditor_name
    );
    let quote_tx = txs
        .iter()
        .find(|t| t.creditor_iban.starts_with("BE"))
        .unwrap();
    assert!(
        quote_tx.creditor_name.starts_with("O'Brien"),
        "{}",
        quote_tx.creditor_name
    );
    assert!(xml.contains("O&apos;Brien"), "XML-escaped apostrophe");
    assert!(!xml.contains('Ω') && !xml.contains('Ä'));
    for t in &txs {
        assert_eq!(t.execution_date, "2027-01-04");
    }
    w.check().await;
}

#[tokio::test]
async fn returns_are_checked_before_anything_is_booked() {
    let w = mixed_world().await;
    w.at("2026-12-01T00:05:00Z");
    let run = w.monthly("2026-12").await;
    let po_de = payout_id_of(&run, "eu_de");
    let po_biz = payout_id_of(&run, "us_biz");
    let po_sol = payout_id_of(&run, "sol");
    let err = bank::return_payout(&w.ledger, &po_de, "AC04", &w.actor())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_payout_state", "not sent in a file yet");
    let err = bank::return_payout(&w.ledger, &po_sol, "R03", &w.actor())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "return_code_rail_mismatch");
    let err = bank::return_payout(&w.ledger, "po_nope", "R03", &w.actor())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "unknown_payout");
    let err = bank::return_payout(&w.ledger, &po_de, "XX99", &w.actor())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "unknown_return_code");
    w.at("2026-12-01T06:30:00Z");
    bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    let err = bank::return_payout(&w.ledger, &po_de, "R03", &w.actor())
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        "return_code_rail_mismatch",
        "an ACH code for a SEPA payout"
    );

    // A return that arrives before the batch is marked settled: the money left and came
    // back. The details entered meanwhile are blocked too: the funds back to payable go
    // nowhere until someone confirms the details again (a gated command, SPEC §9).
    w.at("2026-12-02T10:00:00Z");
    w.update_method("us_biz", ACH_INDIVIDUAL).await;
    let r = bank::return_payout(&w.ledger, &po_biz, "R03", &w.actor())
        .await
        .unwrap();
    assert_eq!(r.status, "accepted");
    assert!(
        r.method_invalid,
        "details entered after the payout are blocked by its return as well"
    );
    assert!(w.provider_record("us_biz").await.method_invalid);
    assert_eq!(w.payout(&po_biz).await.status.as_str(), "returned");
    assert_eq!(w.treasury_bank("us_biz").await, 0);
    assert_eq!(w.payable("us_biz").await, 40 * USDC + 12_345);
    let batch_id = w.payout(&po_de).await.reference.unwrap();
    let ach_batch = w.payout(&po_biz).await.reference.unwrap();
    bank::mark_submitted(&w.ledger, &ach_batch, &w.actor())
        .await
        .unwrap();
    let settled = bank::mark_settled(&w.ledger, &ach_batch, &w.actor())
        .await
        .unwrap();
    assert_eq!(
        settled.payouts_changed, 1,
        "the returned payout stays returned"
    );
    assert!(settled.problems.is_empty());
    let err = bank::mark_settled(&w.ledger, &batch_id, &w.actor())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_batch_state");
    w.check().await;
}

#[tokio::test]
async fn the_cli_generates_lists_shows_settles_returns_and_regenerates() {
    let w = mixed_world().await;
    w.at("2026-12-01T00:05:00Z");
    let run = w.monthly("2026-12").await;
    let po_fr = payout_id_of(&run, "eu_fr");
    let url = w.db.url.clone();
    let outbox = w.bank.outbox_dir.clone();
    let cli = |now: &str, rest: &[&str]| {
        let mut args = vec!["--now", now, "bank", "--outbox", outbox.as_str()];
        args.extend_from_slice(rest);
        common::run_cli(&url, &args)
    };
    let t = "2026-12-01T06:30:00Z";
    let (code, out, err) = cli(t, &["generate"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 batches"), "{out}");
    let (code, out, _) = cli(t, &["--format", "json", "list"]);
    assert_eq!(code, 0);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2);
    let sepa = list.iter().find(|b| b["rail"] == "sepa").unwrap();
    assert_eq!(sepa["total"], "69.75");
    assert_eq!(sepa["currency"], "EUR");
    assert_eq!(sepa["status"], "generated");
    let sepa_id = sepa["batch_id"].as_str().unwrap().to_owned();
    let (code, out, _) = cli(t, &["--format", "csv", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("batch_id,rail,status,payouts,total,currency,"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 3);
    let (code, out, _) = cli(t, &["show", &sepa_id]);
    assert_eq!(code, 0);
    assert!(out.contains(&po_fr) && out.contains("submitted"), "{out}");

    let copy = w.outbox.path().join("copy.xml");
    let (code, out, err) = cli(
        t,
        &["regenerate", &sepa_id, "--out", copy.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}{err}");
    let original = bank::outbox_path(
        &w.bank,
        &bank::batch(&w.ledger.store, &sepa_id)
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        std::fs::read(&copy).unwrap(),
        std::fs::read(&original).unwrap(),
        "identical bytes"
    );
    assert_valid_pain001(&copy);

    let (code, _, err) = cli(t, &["settled", &sepa_id]);
    assert_eq!(code, 2, "settled before submitted is rejected");
    assert!(err.contains("invalid_batch_state"), "{err}");
    let (code, out, _) = cli(t, &["submitted", &sepa_id]);
    assert_eq!(code, 0);
    assert!(
        out.contains("submitted") && out.contains("accepted"),
        "{out}"
    );
    let (code, out, _) = cli(
        "2026-12-02T12:00:00Z",
        &["--format", "json", "settled", &sepa_id],
    );
    assert_eq!(code, 0);
    let settled: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(settled[0]["status"], "settled");
    assert_eq!(settled[0]["payouts_changed"], 2);
    let (code, out, err) = cli(
        "2026-12-03T12:00:00Z",
        &["return", "--payout", &po_fr, "--code", "MD07"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("MD07") && out.contains("true"), "{out}");
    let (code, _, err) = cli(
        "2026-12-03T12:00:00Z",
        &["return", "--payout", &po_fr, "--code", "NOPE"],
    );
    assert_eq!(code, 2);
    assert!(err.contains("unknown_return_code"), "{err}");
    let (code, _, err) = cli("2026-12-03T12:00:00Z", &["show", "sepa-unknown"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown_bank_batch"));
    w.check().await;
}

/// The checkers are not vacuous: a corrupted file fails them.
#[test]
fn the_file_checkers_reject_broken_files() {
    use settle_bank::*;
    let t = chrono::NaiveDate::from_ymd_opt(2026, 12, 1)
        .unwrap()
        .and_hms_opt(6, 30, 0)
        .unwrap();
    let sepa = write_pain001(&SepaBatch {
        msg_id: SepaId::parse("sepa-test").unwrap(),
        created_at: t,
        initiating_party_name: HolderName::parse("Settle").unwrap(),
        debtor_name: HolderName::parse("Settle").unwrap(),
        debtor_iban: Iban::parse("DE02120300000000202051").unwrap(),
        debtor_bic: None,
        payments: vec![SepaPayment {
            requested_execution_date: t.date(),
            end_to_end_id: SepaId::parse("po-1").unwrap(),
            amount_eur_cents: 1234,
            creditor_name: HolderName::parse("Bee GmbH").unwrap(),
            creditor_iban: Iban::parse("DE89370400440532013000").unwrap(),
            creditor_bic: None,
            remittance_info: "settle payout monthly 2026-12".into(),
        }],
    })
    .unwrap();
    check_sepa_rules(&sepa);
    // The XSD check accepts the good file and rejects one without PmtMtd (when the machine
    // has xmllint and the XSD; the rule checks below run either way).
    if let Some(schema) = pain001_schema() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.xml");
        std::fs::write(&good, &sepa).unwrap();
        schema.assert_valid(&good);
        let bad = dir.path().join("bad.xml");
        std::fs::write(&bad, sepa.replace("<PmtMtd>TRF</PmtMtd>", "")).unwrap();
        let err = schema
            .validate(&bad)
            .expect_err("the XSD accepted a file without PmtMtd");
        assert!(
            err.contains("Schemas validity error") && err.contains("PmtMtd"),
            "the XSD rejects the file for the missing PmtMtd: {err}"
        );
    }
    // Each edit with what the checker's panic must say it caught.
    for (from, to, caught) in [
        (
            "<CtrlSum>12.34</CtrlSum>\n      <InitgPty>",
            "<CtrlSum>12.35</CtrlSum>\n      <InitgPty>",
            "GrpHdr CtrlSum = sum of InstdAmt",
        ),
        (
            ">12.34</InstdAmt>",
            ">12.3</InstdAmt>",
            "must have exactly two decimals",
        ),
        (
            "<Nm>Bee GmbH</Nm>",
            "<Nm>Bee GmbH_</Nm>",
            "leaves the SEPA character set",
        ),
    ] {
        let broken = sepa.replacen(from, to, 1);
        assert_ne!(broken, sepa, "{from}");
        let said = panic_message(|| {
            check_sepa_rules(&broken);
        })
        .unwrap_or_else(|| panic!("{to} passes"));
        assert!(
            said.contains(caught),
            "{to}: caught {said:?}, not {caught:?}"
        );
    }

    let nacha = write_nacha(&NachaFile {
        immediate_destination: AbaRouting::parse("091000019").unwrap(),
        immediate_origin: "1123456789".into(),
        destination_name: "ODFI".into(),
        origin_name: "Settle".into(),
        file_creation: t,
        file_id_modifier: 'A',
        company_name: "SETTLE".into(),
        company_id: "1123456789".into(),
        company_entry_description: "PAYOUT".into(),
        effective_entry_date: t.date(),
        odfi_routing: AbaRouting::parse("091000019").unwrap(),
        entries: vec![NachaEntry {
            routing: AbaRouting::parse("021000021").unwrap(),
            account: AchAccountNumber::parse("123456789").unwrap(),
            account_type: AchAccountType::Checking,
            entity: AchEntity::Individual,
            amount_usd_cents: 1992,
            individual_id: AchIndividualId::parse("PO-1").unwrap(),
            individual_name: HolderName::parse("Jane Doe").unwrap(),
        }],
    })
    .unwrap();
    let (entries, total) = check_nacha(&nacha);
    assert_eq!((entries.len(), total), (1, 1992));
    let lines: Vec<&str> = nacha.lines().collect();
    let corrupt = |i: usize, at: usize, c: &str| {
        let mut l: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
        l[i].replace_range(at..at + 1, c);
        l.join("\n") + "\n"
    };
    for (broken, caught) in [
        // entry amount: totals no longer match
        (corrupt(2, 38, "3"), "batch credit total"),
        (corrupt(2, 11, "2"), "RDFI routing 021000022 check digit"),
        (corrupt(3, 19, "9"), "batch entry hash"),
        (nacha.replacen("\n", " \n", 1), "record 1 has 95 characters"),
        (
            lines[..lines.len() - 1].join("\n") + "\n",
            "blocking factor 10",
        ),
    ] {
        let said = panic_message(|| {
            check_nacha(&broken);
        })
        .unwrap_or_else(|| panic!("the checker passes:\n{broken}"));
        assert!(said.contains(caught), "caught {said:?}, not {caught:?}");
    }
}

#[tokio::test]
async fn files_hold_at_most_batch_payouts_max_payouts_and_each_is_valid_on_its_own() {
    let w = World::new("2026-11-02T00:00:00Z").await;
    let sepa = ["eu1", "eu2", "eu3", "eu4", "eu5"];
    let ach = ["us1", "us2", "us3", "us4", "us5"];
    for (i, id) in sepa.iter().enumerate() {
        w.provider(id, if i % 2 == 0 { SEPA_DE } else { SEPA_FR })
            .await;
    }
    for (i, id) in ach.iter().enumerate() {
        w.provider(
            id,
            if i % 2 == 0 {
                ACH_BUSINESS
            } else {
                ACH_INDIVIDUAL
            },
        )
        .await;
    }
    w.at("2026-11-11T00:00:00Z");
    for (i, id) in sepa.iter().chain(&ach).enumerate() {
        w.earn(
            id,
            62_500_000 + 1_250_000 * i as i64,
            "2026-11-10T01:00:00Z",
        )
        .await;
    }
    w.at("2026-11-30T12:00:00Z");
    w.fx("0.915").await;
    w.at("2026-12-01T00:05:00Z");
    w.monthly("2026-12").await;

    // At most two payouts per file: three files per rail (2 + 2 + 1).
    w.at("2026-12-01T06:30:00Z");
    let config = settle::config::BankConfig {
        batch_payouts_max: 2,
        ..w.bank.clone()
    };
    bank::generate_batches(&w.ledger, &config, &w.actor())
        .await
        .unwrap();
    let all = bank::batches(&w.ledger.store).await.unwrap();
    let mut seen = BTreeSet::new();
    let mut ach_modifiers = Vec::new();
    for rail in [Rail::Sepa, Rail::Ach] {
        let mut sizes: Vec<usize> = all
            .iter()
            .filter(|b| b.rail == rail)
            .map(|b| b.payout_ids.len())
            .collect();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![1, 2, 2], "{rail:?}");
    }
    for batch in &all {
        let mut amounts = Vec::new();
        for id in &batch.payout_ids {
            assert!(seen.insert(id.clone()), "{id} is in two files");
            let payout = w.payout(id).await;
            assert_eq!(payout.status.as_str(), "submitted");
            amounts.push(payout.amount_micro_usdc);
        }
        // Each file on its own: the XSD and the rules of its format, its own totals.
        let path = bank::outbox_path(&config, batch).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        match batch.rail {
            Rail::Sepa => {
                assert_valid_pain001(&path);
                let (_, ctrl_sum, txs) = check_sepa_rules(&text);
                assert_eq!(txs.len(), batch.payout_ids.len());
                assert_eq!(
                    ctrl_sum,
                    txs.iter().map(|t| t.amount_eur_cents).sum::<i64>()
                );
            }
            Rail::Ach => {
                let (entries, total_cents) = check_nacha(&text);
                assert_eq!(entries.len(), batch.payout_ids.len());
                let usd_cents: i64 = amounts.iter().map(|a| a / 10_000).sum();
                assert_eq!(total_cents, usd_cents, "{}", batch.file_name);
                ach_modifiers.push(text[33..34].to_owned());
            }
            other => panic!("a {other:?} batch"),
        }
    }
    assert_eq!(seen.len(), 10, "every payout in exactly one file");
    ach_modifiers.sort();
    assert_eq!(
        ach_modifiers,
        ["A", "B", "C"],
        "the day's NACHA files are numbered in turn"
    );
    w.check().await;
}

/// Batches generated before the per-payout index of batches existed (migration 0008), one
/// of them cut off before its payouts were submitted: the migration fills the index from
/// the batches, so `verify` is clean after the upgrade and the next generation finishes
/// that batch instead of putting its payouts into a second file.
#[tokio::test]
async fn batches_generated_before_0008_are_indexed_by_the_migration() {
    if !crate::common::failpoints_or_skip(
        "batches_generated_before_0008_are_indexed_by_the_migration",
    ) {
        return;
    }
    use settle::rails::bank::failpoints::AFTER_GENERATED;
    let w = mixed_world().await;
    w.at("2026-12-01T00:05:00Z");
    w.monthly("2026-12").await;
    generation_crashed_at(&w, AFTER_GENERATED);
    let before = bank::batches(&w.ledger.store).await.unwrap();
    assert_eq!(
        before.len(),
        1,
        "the crash left one batch with its payouts created"
    );
    common::upgrade_through(
        &w.db,
        8,
        &[
            "DROP TABLE bank_batch_payouts",
            "DROP INDEX payouts_by_status_and_id",
            "CREATE INDEX payouts_by_status ON payouts (status, rail)",
        ],
    )
    .await;
    w.check().await;

    bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    let all = bank::batches(&w.ledger.store).await.unwrap();
    assert_eq!(all.len(), 2, "one batch per rail");
    assert!(
        all.iter().any(|b| b == &before[0]),
        "the cut-off batch is kept"
    );
    let mut seen = BTreeSet::new();
    for b in &all {
        for id in &b.payout_ids {
            assert!(seen.insert(id.clone()), "{id} is in two batches");
            assert_eq!(w.payout(id).await.status.as_str(), "submitted", "{id}");
        }
    }
    assert_eq!(seen.len(), 4);
    w.check().await;
}
