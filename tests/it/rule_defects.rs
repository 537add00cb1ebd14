//! Regression tests of eight rule defects found in review, each named after the behaviour
//! it proves, on SQLite and (with `SETTLE_TEST_PG_URL`) PostgreSQL; `verify` is clean
//! after each.

use crate::bank_support;
use crate::common;
use crate::common::Tables;
use crate::runs_support;

use std::sync::Arc;

use runs_support::{SEPA, SOLANA, SOLANA_2, USDC, candidate, decision, due_keys};
use settle::domain::ids::EventId;
use settle::domain::time::parse_rfc3339_ms;
use settle::jobs::scheduler::Scheduler;
use settle::ledger::ingest::{SenderScope, UsageInput, UsageResult};
use settle::ledger::{Actor, Applied, Clock, LedgerError};
use settle::rails::bank;
use settle::wire::import::{apply, parse_line};
use sqlx::Row;

/// Applies one import line; the outcome as `accepted`, `duplicate` or the rejection code.
async fn import_line(ledger: &settle::ledger::Ledger, line: &str) -> String {
    let command = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    match apply(ledger, &command, &Actor::operator("test")).await {
        Ok(applied) => applied.as_str().to_owned(),
        Err(LedgerError::Rejected(e)) => e.code.to_owned(),
        Err(e) => panic!("{line}: {e}"),
    }
}

fn usage(
    event_id: &str,
    provider: &str,
    gpu: &str,
    started_at: &str,
    ended_at: &str,
) -> UsageInput {
    UsageInput {
        event_id: Some(event_id.into()),
        provider_id: Some(provider.into()),
        gpu_id: Some(gpu.into()),
        rental_id: None,
        started_at: Some(started_at.into()),
        ended_at: Some(ended_at.into()),
        rate_usdc_per_hour: Some("3.6".into()),
    }
}

fn outcome(r: &UsageResult) -> String {
    match r {
        UsageResult::Rejected { code, .. } => (*code).to_owned(),
        other => other.status().to_owned(),
    }
}

/// The fee and net of the one usage event booked under `event_id` (on any provider), from
/// its segment (folded behind the append first, as any read does).
async fn fee_and_net(store: &settle::store::Store, event_id: &str) -> (i64, i64) {
    store.catch_up_all().await.unwrap();
    let row = sqlx::query(
        "SELECT fee_micro_usdc, net_micro_usdc FROM usage_segments WHERE event_id = $1",
    )
    .bind(event_id)
    .fetch_one(store.pool())
    .await
    .unwrap();
    (row.get(0), row.get(1))
}

// 1. ------------------------------------------------------------------------------------

/// The issue's example: registration (community), a tier update and usage, all booked in
/// the same millisecond. Usage that started before that instant pays the registration's
/// tier (2000 bps: fee 0.498000 of 2.49); usage from then on pays the new tier.
#[tokio::test]
async fn a_tier_change_in_the_registration_millisecond_keeps_the_registration_tier_before_it() {
    let db = common::TestDb::new().await;
    let (ledger, clock) = db.ledger_at("2026-12-01T00:00:00Z").await;
    for line in [
        r#"{"type":"provider.register","provider_id":"prv_t","name":"T","email":"t@x.test","tier":"community","schedule":"weekly"}"#,
        r#"{"type":"provider.update","provider_id":"prv_t","tier":"enterprise"}"#,
        r#"{"type":"gpu.register","gpu_id":"gpu_t","provider_id":"prv_t","model":"H100-80GB"}"#,
        r#"{"type":"rate.set","provider_id":"prv_t","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2026-01-01T00:00:00Z"}"#,
        r#"{"type":"usage","event_id":"before","provider_id":"prv_t","gpu_id":"gpu_t","started_at":"2026-11-23T10:00:00Z","ended_at":"2026-11-23T11:00:00Z","rate_usdc_per_hour":"2.49"}"#,
    ] {
        assert_eq!(import_line(&ledger, line).await, "accepted", "{line}");
    }
    assert_eq!(
        fee_and_net(&ledger.store, "before").await,
        (498_000, 1_992_000),
        "the tier in force before the registration instant is the registration's"
    );
    clock.set(parse_rfc3339_ms("2026-12-01T02:00:00Z").unwrap());
    let after = r#"{"type":"usage","event_id":"after","provider_id":"prv_t","gpu_id":"gpu_t","started_at":"2026-12-01T00:00:00Z","ended_at":"2026-12-01T01:00:00Z","rate_usdc_per_hour":"2.49"}"#;
    assert_eq!(import_line(&ledger, after).await, "accepted");
    assert_eq!(
        fee_and_net(&ledger.store, "after").await,
        (373_500, 2_116_500),
        "from the update's instant on, the enterprise fee (1500 bps)"
    );
    runs_support::check_invariants(&ledger).await;
}

// 2. ------------------------------------------------------------------------------------

/// SPEC §6: a return fails the payout, re-credits it and marks the bank details invalid,
/// whatever its reason code; the next run decides `no_method` until the provider sets or
/// re-confirms its details.
#[tokio::test]
async fn every_bank_return_blocks_the_bank_details_until_they_are_confirmed_again() {
    const ACH: &str = r#"{"kind":"ach","routing":"021000021","account":"123456789","account_type":"checking","holder":"Jane Doe","entity":"individual"}"#;
    let codes: [(&str, &str); 11] = [
        ("MS03", SEPA),
        ("FOCR", SEPA),
        ("FRAD", SEPA),
        ("AM05", SEPA),
        ("R01", ACH),
        ("R06", ACH),
        ("R07", ACH),
        ("R08", ACH),
        ("R09", ACH),
        ("R10", ACH),
        ("R11", ACH),
    ];
    let w = bank_support::World::new("2026-11-11T00:00:00Z").await;
    for (code, method) in codes {
        w.provider(&format!("p{code}"), method).await;
        w.earn(&format!("p{code}"), 50 * USDC, "2026-11-10T01:00:00Z")
            .await;
    }
    w.at("2026-11-30T12:00:00Z");
    w.fx("0.92").await;
    w.at("2026-12-01T00:05:00Z");
    let dec = w.monthly("2026-12").await;
    for (code, _) in codes {
        assert_eq!(decision(&dec, &format!("p{code}")), "paid");
    }
    let files = bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    assert!(files.failed.is_empty(), "{:?}", files.failed);
    w.at("2026-12-03T09:00:00Z");
    for (code, _) in codes {
        let provider = format!("p{code}");
        let payout_id = candidate(&dec, &provider).payout_id.clone().unwrap();
        let r = bank::return_payout(&w.ledger, &payout_id, code, &w.actor())
            .await
            .unwrap_or_else(|e| panic!("{code}: {e}"));
        assert_eq!((r.status, r.method_invalid), ("accepted", true), "{code}");
        assert_eq!(
            w.payout(&payout_id).await.status.as_str(),
            "returned",
            "{code}"
        );
        assert_eq!(w.payable(&provider).await, 50 * USDC * 8 / 10, "{code}");
    }
    w.check().await;

    // The next run: no_method for every one of them.
    w.at("2027-01-03T12:00:00Z");
    w.fx("0.92").await;
    w.at("2027-01-04T00:05:00Z");
    let jan = w.monthly("2027-01").await;
    for (code, _) in codes {
        let c = candidate(&jan, &format!("p{code}"));
        assert_eq!(
            (c.decision.as_str(), c.payout_id.is_none()),
            ("no_method", true),
            "{code}: the returned details are blocked"
        );
    }
    // Re-confirming the same details unblocks them (after the takeover guard).
    w.at("2027-01-05T00:00:00Z");
    w.update_method("pMS03", SEPA).await;
    w.update_method("pR01", ACH).await;
    w.at("2027-01-31T12:00:00Z");
    w.fx("0.92").await;
    w.at("2027-02-01T00:05:00Z");
    let feb = w.monthly("2027-02").await;
    assert_eq!(decision(&feb, "pMS03"), "paid");
    assert_eq!(decision(&feb, "pR01"), "paid");
    assert_eq!(decision(&feb, "pFRAD"), "no_method");
    w.check().await;
}

// 3. ------------------------------------------------------------------------------------

/// Inside one batch the first occurrence of an event_id wins, in input order; an event_id
/// is scoped to its provider, so the same id under two providers is two events (and one
/// provider cannot pre-book or probe another's ids).
#[tokio::test]
async fn a_repeated_event_id_in_one_batch_is_decided_in_input_order_per_provider() {
    let w = runs_support::World::new("2026-11-25T00:00:00Z").await;
    w.provider("prv_b", "weekly", Some(SOLANA)).await;
    w.provider("prv_a", "weekly", Some(SOLANA)).await;
    let batch = [
        // prv_b comes first in the batch and after prv_a in id order.
        usage(
            "x",
            "prv_b",
            "prv_b-g0",
            "2026-11-24T01:00:00Z",
            "2026-11-24T02:00:00Z",
        ),
        usage(
            "x",
            "prv_a",
            "prv_a-g0",
            "2026-11-24T03:00:00Z",
            "2026-11-24T04:00:00Z",
        ),
        // Same id and provider again, other content: a conflict with the first.
        usage(
            "x",
            "prv_b",
            "prv_b-g0",
            "2026-11-24T05:00:00Z",
            "2026-11-24T06:00:00Z",
        ),
        // Same id, provider and content as the second: a duplicate.
        usage(
            "x",
            "prv_a",
            "prv_a-g0",
            "2026-11-24T03:00:00Z",
            "2026-11-24T04:00:00Z",
        ),
    ];
    let results = w
        .ledger
        .ingest_usage(&batch, &SenderScope::Metering, &w.actor())
        .await
        .unwrap();
    assert_eq!(
        results.iter().map(outcome).collect::<Vec<_>>(),
        ["accepted", "accepted", "conflict", "duplicate"]
    );
    w.ledger.store.catch_up_all().await.unwrap();
    let booked: Vec<(String, i64)> = sqlx::query(
        "SELECT provider_id, started_at_ms FROM usage_segments WHERE event_id = 'x' ORDER BY provider_id",
    )
    .fetch_all(w.ledger.store.pool())
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    assert_eq!(
        booked,
        [
            (
                "prv_a".to_owned(),
                parse_rfc3339_ms("2026-11-24T03:00:00Z").unwrap()
            ),
            (
                "prv_b".to_owned(),
                parse_rfc3339_ms("2026-11-24T01:00:00Z").unwrap()
            ),
        ],
        "the first occurrence of each provider's id was booked"
    );
    // An agent of prv_a cannot probe prv_b's ids: its own id "y" is simply its own.
    let later = w
        .ledger
        .ingest_usage(
            &[usage(
                "y",
                "prv_b",
                "prv_b-g0",
                "2026-11-24T07:00:00Z",
                "2026-11-24T08:00:00Z",
            )],
            &SenderScope::Metering,
            &w.actor(),
        )
        .await
        .unwrap();
    assert_eq!(outcome(&later[0]), "accepted");
    let mut own = usage(
        "y",
        "prv_a",
        "prv_a-g0",
        "2026-11-24T07:00:00Z",
        "2026-11-24T08:00:00Z",
    );
    own.rate_usdc_per_hour = None;
    w.import(&[
        r#"{"type":"rate.set","provider_id":"prv_a","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2026-01-01T00:00:00Z"}"#.to_owned(),
    ])
    .await;
    let agent = SenderScope::Ingest {
        provider_id: "prv_a".parse().unwrap(),
    };
    let r = w
        .ledger
        .ingest_usage(std::slice::from_ref(&own), &agent, &w.actor())
        .await
        .unwrap();
    assert_eq!(outcome(&r[0]), "accepted");
    // A void names the provider when the id is booked under two.
    let x = EventId::parse("x").unwrap();
    let err = w
        .ledger
        .void_usage(&x, None, "refund", &w.actor())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "ambiguous_event_id");
    let voided = import_line(
        &w.ledger,
        r#"{"type":"usage.void","event_id":"x","provider_id":"prv_b","reason":"refund"}"#,
    )
    .await;
    assert_eq!(voided, "accepted");
    let again = import_line(
        &w.ledger,
        r#"{"type":"usage.void","event_id":"x","provider_id":"prv_a","reason":"refund"}"#,
    )
    .await;
    assert_eq!(again, "accepted", "prv_a's x is another event");
    w.check_invariants().await;
}

// 4. ------------------------------------------------------------------------------------

/// SPEC §8: replaying an import file books nothing twice. `provider.update` lines with an
/// `update_id` and `fx.rate_set` lines with an `fx_id` are duplicates on replay (conflicts
/// with other content); a keyless line that changes nothing is a duplicate.
#[tokio::test]
async fn replaying_an_import_file_reapplies_no_update_and_no_fx_rate() {
    let w = runs_support::World::new("2026-11-20T00:00:00Z").await;
    w.provider("prv_r", "weekly", Some(SOLANA)).await;
    w.earn("prv_r", 50 * USDC, "2026-11-19T01:00:00Z").await;
    let file = [
        format!(
            r#"{{"type":"provider.update","update_id":"u1","provider_id":"prv_r","payout_method":{SOLANA_2}}}"#
        ),
        format!(
            r#"{{"type":"provider.update","update_id":"u2","provider_id":"prv_r","payout_method":{SOLANA}}}"#
        ),
        r#"{"type":"fx.rate_set","fx_id":"fx-1","eur_per_usd":"0.90"}"#.to_owned(),
        r#"{"type":"fx.rate_set","fx_id":"fx-2","eur_per_usd":"0.92"}"#.to_owned(),
    ];
    for line in &file {
        assert_eq!(import_line(&w.ledger, line).await, "accepted", "{line}");
    }
    let fx_recorded_at = w.now_ms();
    // Eight days later, two before the run, the file is replayed: every line is a
    // duplicate (re-applied, the payout method would be "changed" two days before the run).
    w.at("2026-11-28T00:00:00Z");
    for line in &file {
        assert_eq!(import_line(&w.ledger, line).await, "duplicate", "{line}");
    }
    let latest: (i64, String) = {
        let r = sqlx::query(
            "SELECT recorded_at_ms, eur_per_usd FROM fx_rates ORDER BY recorded_at_ms DESC LIMIT 1",
        )
        .fetch_one(w.ledger.store.pool())
        .await
        .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(
        latest,
        (fx_recorded_at, "0.92".to_owned()),
        "the old rate stays old"
    );
    // The cooling-off of the last change (2026-11-20) is over at the 2026-11-30 run.
    w.at("2026-11-30T00:05:00Z");
    let run = w.weekly("2026-11-30").await;
    assert_eq!(
        decision(&run, "prv_r"),
        "paid",
        "the replay restarted nothing"
    );
    // Same key, other content: a conflict. Keyless lines that change nothing: duplicates.
    let other = format!(
        r#"{{"type":"provider.update","update_id":"u1","provider_id":"prv_r","payout_method":{SOLANA}}}"#
    );
    assert_eq!(import_line(&w.ledger, &other).await, "conflict");
    assert_eq!(
        import_line(
            &w.ledger,
            r#"{"type":"fx.rate_set","fx_id":"fx-1","eur_per_usd":"0.91"}"#
        )
        .await,
        "conflict"
    );
    let keyless =
        format!(r#"{{"type":"provider.update","provider_id":"prv_r","payout_method":{SOLANA}}}"#);
    assert_eq!(import_line(&w.ledger, &keyless).await, "duplicate");
    assert_eq!(
        import_line(&w.ledger, r#"{"type":"fx.rate_set","eur_per_usd":"0.920"}"#).await,
        "duplicate"
    );
    w.check_invariants().await;
}

// 5. ------------------------------------------------------------------------------------

/// A EUR payout held without an EUR amount (the FX rate was stale at the run, or it was
/// held for another reason then) is converted at release with the latest fresh rate; with
/// none, release is refused with `fx_rate_stale`; cancel always works.
#[tokio::test]
async fn a_held_eur_payout_without_eur_amount_is_released_at_the_fresh_rate() {
    let w = bank_support::World::new("2026-11-11T00:00:00Z").await;
    w.provider("eu_stale", SEPA).await;
    w.provider("eu_hold", SEPA).await;
    w.provider("eu_cancel", SEPA).await;
    for p in ["eu_stale", "eu_hold", "eu_cancel"] {
        w.earn(p, 62_500_000, "2026-11-10T01:00:00Z").await; // net 50 USDC
    }
    w.import(&[
        r#"{"type":"provider.update","provider_id":"eu_hold","status":"on_hold"}"#.to_owned(),
    ])
    .await;
    // A rate recorded now is 20 days old at the run: stale (fx_stale_hours = 48).
    w.fx("0.9137").await;
    // No fresh FX rate: every EUR payout is held without an EUR amount.
    w.at("2026-12-01T00:05:00Z");
    let dec = w.monthly("2026-12").await;
    let id = |p: &str| candidate(&dec, p).payout_id.clone().unwrap();
    for p in ["eu_stale", "eu_hold", "eu_cancel"] {
        let payout = w.payout(&id(p)).await;
        assert_eq!(
            (payout.status.as_str(), payout.amount_eur_cents),
            ("held", None),
            "{p}"
        );
    }
    let config = settle::ledger::runs::RunConfig::default();
    let err = w
        .ledger
        .release_payout(&id("eu_stale"), &config, &w.actor())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "fx_rate_stale");
    assert!(err.to_string().contains("fx.rate_set"), "{err}");
    // Cancel works without a rate.
    w.ledger
        .cancel_payout(&id("eu_cancel"), "wrong details", &w.actor())
        .await
        .unwrap();
    assert_eq!(
        w.payout(&id("eu_cancel")).await.status.as_str(),
        "cancelled"
    );
    // A fresh rate: both release at it, 47 hours later still (within the 48 hours).
    w.at("2026-12-02T09:00:00Z");
    w.fx("0.9137").await;
    w.at("2026-12-04T08:00:00Z");
    for p in ["eu_stale", "eu_hold"] {
        let applied = w
            .ledger
            .release_payout(&id(p), &config, &w.actor())
            .await
            .unwrap();
        assert_eq!(applied, Applied::Accepted);
        let payout = w.payout(&id(p)).await;
        // 5000 USD cents × 0.9137 = 4568.5 → 4568 (half to even).
        assert_eq!(
            (
                payout.status.as_str(),
                payout.amount_eur_cents,
                payout.eur_per_usd.as_deref()
            ),
            ("created", Some(4568), Some("0.9137")),
            "{p}"
        );
    }
    // The SEPA file carries the converted amounts.
    let files = bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    let sepa = &files.batches[0];
    assert_eq!(sepa.batch.total_cents, 2 * 4568);
    assert_eq!(w.payout(&id("eu_hold")).await.status.as_str(), "submitted");
    w.check().await;
}

// 6. ------------------------------------------------------------------------------------

/// SPEC §5: after downtime every missed run since the last completed one is caught up in
/// date order, however long ago; past the warning threshold it is said loudly (a metric),
/// never skipped.
#[tokio::test]
async fn catch_up_runs_every_missed_run_since_the_last_completed_one() {
    let w = runs_support::World::new("2026-07-02T00:00:00Z").await;
    w.provider("wk", "weekly", Some(SOLANA)).await;
    w.earn("wk", 50_000_000, "2026-07-01T00:00:00Z").await;
    w.at("2026-07-06T00:05:00Z");
    w.weekly("2026-07-06").await;
    w.at("2026-07-08T00:00:00Z");
    w.earn("wk", 50_000_000, "2026-07-07T01:00:00Z").await;
    // Down until 2026-10-01 12:00: 87 days.
    w.at("2026-10-01T12:00:00Z");
    let clock: Arc<dyn Clock> = w.clock.clone();
    // Its own registry: other tests of this binary run schedulers beside it.
    let metrics: &'static settle::metrics::Metrics = Box::leak(Box::default());
    let mut s = Scheduler::new(
        w.ledger.clone(),
        clock,
        w.calendar.clone(),
        w.config.clone(),
    )
    .with_catch_up_warn_days(35)
    .with_metrics(metrics);
    let due = due_keys(&s).await;
    let mut expected = vec!["weekly 2026-07-06".to_owned()];
    for monday in [
        "2026-07-13",
        "2026-07-20",
        "2026-07-27",
        "2026-08-03",
        "2026-08-10",
        "2026-08-17",
        "2026-08-24",
        "2026-08-31",
        "2026-09-07",
        "2026-09-14",
        "2026-09-21",
        "2026-09-28",
    ] {
        expected.push(format!("weekly {monday}"));
        if monday == "2026-08-03" {
            expected.push("monthly 2026-08".into());
        }
        if monday == "2026-08-31" {
            expected.push("monthly 2026-09".into());
        }
    }
    expected.push("monthly 2026-10".into());
    assert_eq!(due, expected);
    let metrics = metrics.render();
    assert!(
        metrics.contains("settle_scheduler_catch_up_days 87"),
        "{metrics}"
    );
    let started = s.tick().await.unwrap();
    assert_eq!(started.len(), expected.len());
    assert!(started.iter().all(|r| r.report.completed));
    let paid: Vec<String> = w
        .payouts_of("wk")
        .await
        .iter()
        .map(|p| format!("{} {}", p.run_kind, p.run_key))
        .collect();
    assert_eq!(paid, ["weekly 2026-07-06", "weekly 2026-07-13"]);
    assert!(s.tick().await.unwrap().is_empty(), "caught up once");
    w.check_invariants().await;
}

// 7. ------------------------------------------------------------------------------------

/// Decisions that create no payout pay nothing: their amount (and the run totals' amount)
/// is 0, while `available` still shows what the provider had.
#[tokio::test]
async fn decisions_that_pay_nothing_record_amount_zero() {
    let w = runs_support::World::new("2026-11-18T00:00:00Z").await;
    w.provider("below", "weekly", Some(SOLANA)).await;
    w.provider("cooling", "weekly", Some(SOLANA)).await;
    w.provider("negative", "weekly", Some(SOLANA)).await;
    w.provider("nomethod", "weekly", None).await;
    w.provider("paid", "weekly", Some(SOLANA)).await;
    let (_, below) = w.earn("below", 12_500_000, "2026-11-17T01:00:00Z").await;
    let (_, cooling) = w.earn("cooling", 50_000_000, "2026-11-17T01:00:00Z").await;
    let (_, nomethod) = w.earn("nomethod", 50_000_000, "2026-11-17T01:00:00Z").await;
    let (_, paid) = w.earn("paid", 50_000_000, "2026-11-17T01:00:00Z").await;
    w.earn("negative", 12_500_000, "2026-11-17T01:00:00Z").await;
    w.at("2026-11-21T00:00:00Z");
    w.adjust("negative", "chargeback-1", -20 * USDC).await;
    w.update("cooling", &format!(r#""payout_method":{SOLANA_2}"#))
        .await;
    w.at("2026-11-23T00:05:00Z");
    let run = w.weekly("2026-11-23").await;
    let expect = [
        ("below", "below_minimum", below),
        ("cooling", "cooling_off", cooling),
        ("negative", "negative", 10 * USDC - 20 * USDC),
        ("nomethod", "no_method", nomethod),
    ];
    for (p, d, available) in expect {
        let c = candidate(&run, p);
        assert_eq!(
            (
                c.decision.as_str(),
                c.available_micro_usdc,
                c.amount_micro_usdc
            ),
            (d, available, 0),
            "{p}"
        );
        assert_eq!(run.totals[d].amount_micro_usdc, 0, "{d} total");
    }
    assert_eq!(candidate(&run, "paid").amount_micro_usdc, paid);
    assert_eq!(run.totals["paid"].amount_micro_usdc, paid);
    // The completion event carries the same totals.
    let totals: String = sqlx::query_scalar(
        "SELECT totals FROM payout_runs WHERE run_kind = 'weekly' AND run_key = '2026-11-23'",
    )
    .fetch_one(w.ledger.store.pool())
    .await
    .unwrap();
    let totals: serde_json::Value = serde_json::from_str(&totals).unwrap();
    for d in [
        "below_minimum",
        "cooling_off",
        "negative",
        "no_method",
        "nothing_due",
    ] {
        assert_eq!(totals[d][1], 0, "{d}: {totals}");
    }
    assert_eq!(totals["paid"][1], paid, "{totals}");
    // A second run the same day: nothing due, amount 0.
    w.at("2026-12-01T00:05:00Z");
    let monthly = w.monthly("2026-12").await;
    let c = candidate(&monthly, "paid");
    assert_eq!(
        (c.decision.as_str(), c.amount_micro_usdc),
        ("nothing_due", 0)
    );
    w.check_invariants().await;
}

// 8. ------------------------------------------------------------------------------------

/// An exact re-send is a `duplicate` whatever its age: the idempotency key is looked up
/// before the time-window checks. New events outside the window are still rejected.
#[tokio::test]
async fn an_exact_resend_outside_the_lateness_window_is_a_duplicate() {
    let w = runs_support::World::new("2026-08-01T00:00:00Z").await;
    w.provider("prv_l", "monthly", Some(SOLANA)).await;
    let event = usage(
        "old-1",
        "prv_l",
        "prv_l-g0",
        "2026-07-31T01:00:00Z",
        "2026-07-31T02:00:00Z",
    );
    let send = |e: UsageInput| {
        let ledger = w.ledger.clone();
        async move {
            let r = ledger
                .ingest_usage(&[e], &SenderScope::Metering, &Actor::operator("test"))
                .await
                .unwrap();
            outcome(&r[0])
        }
    };
    assert_eq!(send(event.clone()).await, "accepted");
    // 120 days later: past the 90-day lateness.
    w.at("2026-11-28T00:00:00Z");
    assert_eq!(send(event.clone()).await, "duplicate");
    let mut changed = event.clone();
    changed.ended_at = Some("2026-07-31T03:00:00Z".into());
    assert_eq!(send(changed).await, "conflict");
    let mut new = event.clone();
    new.event_id = Some("old-2".into());
    new.started_at = Some("2026-07-31T05:00:00Z".into());
    new.ended_at = Some("2026-07-31T06:00:00Z".into());
    assert_eq!(send(new).await, "too_late");
    let count: i64 = sqlx::query_scalar(
        "SELECT CAST(COUNT(*) AS BIGINT) FROM events WHERE event_type = 'usage.recorded'",
    )
    .fetch_one(w.ledger.store.pool())
    .await
    .unwrap();
    assert_eq!(count, 1, "booked once");
    w.check_invariants().await;
}
