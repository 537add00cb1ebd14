//! Payout runs (SPEC §5) on both stores: minimums, sweeps, late events, negative balances,
//! bank rails with FX and sub-cent remainders, holds, cooling-off, every decision, the
//! shared run date, voids after a payout, idempotency and concurrency, the projected next
//! payout, and the CLI. Every scenario checks the money invariants after each run.

use crate::common;
use crate::common::Tables;
use crate::runs_support;

use runs_support::*;
use settle::ledger::Applied;
use settle::ledger::runs::{self, projected_next_payout};

const W: &str = "weekly";
const M: &str = "monthly";

#[tokio::test]
async fn minimums_just_below_and_just_above_and_the_monthly_sweep() {
    let w = World::new("2026-11-18T00:00:00Z").await;
    for p in ["w_below", "w_at", "w_above"] {
        w.provider(p, W, Some(SOLANA)).await;
    }
    for p in ["m_below", "m_at"] {
        w.provider(p, M, Some(SOLANA)).await;
    }
    w.at("2026-11-20T00:00:00Z");
    for p in ["w_below", "w_at", "w_above"] {
        let (_, net) = w.earn(p, 31_250_000, "2026-11-18T01:00:00Z").await;
        assert_eq!(net, 25 * USDC);
    }
    w.adjust("w_below", "adj-below", -1).await;
    w.adjust("w_above", "adj-above", 1).await;
    for p in ["m_below", "m_at"] {
        let (_, net) = w.earn(p, 1_250_000, "2026-11-18T01:00:00Z").await;
        assert_eq!(net, USDC);
    }
    w.adjust("m_below", "adj-m-below", -1).await;

    w.at("2026-11-23T00:05:00Z");
    let weekly = w.weekly("2026-11-23").await;
    assert!(weekly.completed);
    assert_eq!(
        weekly.candidates.len(),
        3,
        "monthly providers are no weekly candidates"
    );
    assert!(!is_candidate(&weekly, "m_at"));
    assert_eq!(decision(&weekly, "w_below"), "below_minimum");
    assert_eq!(
        candidate(&weekly, "w_below").available_micro_usdc,
        24_999_999
    );
    assert_eq!(decision(&weekly, "w_at"), "paid");
    assert_eq!(candidate(&weekly, "w_at").amount_micro_usdc, 25 * USDC);
    assert_eq!(decision(&weekly, "w_above"), "paid");
    assert_eq!(
        candidate(&weekly, "w_above").amount_micro_usdc,
        25 * USDC + 1
    );
    assert_eq!(weekly.payouts, 2);
    assert_eq!(weekly.payouts_micro_usdc, 50 * USDC + 1);
    assert_eq!(weekly.totals["paid"].count, 2);
    assert_eq!(weekly.totals["below_minimum"].count, 1);
    assert_eq!(w.balances("w_at").await, (0, 0, 25 * USDC, 0));
    assert_eq!(w.balances("w_below").await, (24_999_999, 0, 0, 0));

    w.at("2026-12-01T00:05:00Z");
    let monthly = w.monthly("2026-12").await;
    assert_eq!(
        monthly.candidates.len(),
        5,
        "the monthly run considers every provider"
    );
    assert_eq!(
        decision(&monthly, "w_below"),
        "paid",
        "a weekly provider below its threshold is swept"
    );
    assert_eq!(candidate(&monthly, "w_below").amount_micro_usdc, 24_999_999);
    assert_eq!(decision(&monthly, "w_at"), "nothing_due");
    assert_eq!(decision(&monthly, "w_above"), "nothing_due");
    assert_eq!(decision(&monthly, "m_below"), "below_minimum");
    assert_eq!(candidate(&monthly, "m_below").available_micro_usdc, 999_999);
    assert_eq!(decision(&monthly, "m_at"), "paid");
    assert_eq!(candidate(&monthly, "m_at").amount_micro_usdc, USDC);
    assert_eq!(w.payouts_of("w_below").await.len(), 1);
    assert_eq!(w.payouts_of("w_below").await[0].run_kind, "monthly");
}

#[tokio::test]
async fn a_late_event_recorded_after_the_cutoff_is_paid_the_week_after() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    w.provider("p", W, Some(SOLANA)).await;
    w.at("2026-11-22T00:00:00Z");
    let (_, on_time) = w.earn("p", 50_000_000, "2026-11-21T01:00:00Z").await;
    assert_eq!(on_time, 40 * USDC);
    // An agent that was offline reports Sunday's usage on Monday after 00:00.
    w.at("2026-11-23T00:00:01Z");
    let (_, late) = w.earn("p", 37_500_000, "2026-11-22T10:00:00Z").await;
    assert_eq!(late, 30 * USDC);
    w.at("2026-11-23T00:05:00Z");
    let first = w.weekly("2026-11-23").await;
    assert_eq!(decision(&first, "p"), "paid");
    assert_eq!(
        candidate(&first, "p").amount_micro_usdc,
        40 * USDC,
        "the late event is not in this run"
    );
    assert_eq!(w.balances("p").await, (30 * USDC, 0, 40 * USDC, 0));
    w.at("2026-11-30T00:05:00Z");
    let second = w.weekly("2026-11-30").await;
    assert_eq!(decision(&second, "p"), "paid");
    assert_eq!(
        candidate(&second, "p").amount_micro_usdc,
        30 * USDC,
        "paid the week after"
    );
    assert_eq!(w.balances("p").await, (0, 0, 70 * USDC, 0));
}

#[tokio::test]
async fn a_negative_balance_is_carried_and_netted_against_later_earnings() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    w.provider("p", W, Some(SOLANA)).await;
    w.at("2026-11-18T00:00:00Z");
    let (_, net) = w.earn("p", 10_000_000, "2026-11-17T01:00:00Z").await;
    assert_eq!(net, 8 * USDC);
    w.adjust("p", "chargeback-1", -20 * USDC).await;
    w.at("2026-11-23T00:05:00Z");
    let first = w.weekly("2026-11-23").await;
    assert_eq!(decision(&first, "p"), "negative");
    assert_eq!(candidate(&first, "p").available_micro_usdc, -12 * USDC);
    assert_eq!(first.payouts, 0);
    w.at("2026-11-26T00:00:00Z");
    w.earn("p", 50_000_000, "2026-11-25T01:00:00Z").await;
    w.at("2026-11-30T00:05:00Z");
    let second = w.weekly("2026-11-30").await;
    assert_eq!(decision(&second, "p"), "paid");
    assert_eq!(
        candidate(&second, "p").amount_micro_usdc,
        28 * USDC,
        "40 earned − 12 owed"
    );
    assert_eq!(w.balances("p").await, (0, 0, 28 * USDC, 0));
}

#[tokio::test]
async fn bank_payouts_floor_to_cents_carry_the_remainder_and_convert_to_eur_half_even() {
    let w = World::new("2026-11-09T00:00:00Z").await;
    w.provider("b_sepa", M, Some(SEPA)).await;
    w.provider("c_ach", M, Some(ACH)).await;
    w.at("2026-11-10T12:00:00Z");
    w.earn("b_sepa", 3_750_000, "2026-11-10T01:00:00Z").await; // net 3.000000
    w.adjust("b_sepa", "adj-b", 567).await;
    w.earn("c_ach", 6_250_000, "2026-11-10T01:00:00Z").await; // net 5.000000
    w.adjust("c_ach", "adj-c", 9_999).await;
    w.at("2026-11-30T12:00:00Z");
    w.fx("0.915").await;
    w.at("2026-12-01T00:05:00Z");
    let dec = w.monthly("2026-12").await;
    let b = candidate(&dec, "b_sepa");
    assert_eq!(
        (
            b.decision.as_str(),
            b.available_micro_usdc,
            b.amount_micro_usdc
        ),
        ("paid", 3_000_567, 3_000_000)
    );
    let pb = w.payout(b.payout_id.as_deref().unwrap()).await;
    assert_eq!(pb.rail.as_str(), "sepa");
    assert_eq!(
        pb.amount_eur_cents,
        Some(274),
        "300 cents × 0.915 = 274.5 → 274 (half to even)"
    );
    assert_eq!(pb.eur_per_usd.as_deref(), Some("0.915"));
    assert_eq!(pb.status.as_str(), "created");
    let c = candidate(&dec, "c_ach");
    assert_eq!(
        (c.decision.as_str(), c.amount_micro_usdc),
        ("paid", 5_000_000)
    );
    let pc = w.payout(c.payout_id.as_deref().unwrap()).await;
    assert_eq!(
        (pc.amount_eur_cents, pc.eur_per_usd.clone()),
        (None, None),
        "USD payouts carry no EUR"
    );
    assert_eq!(
        w.balances("b_sepa").await.0,
        567,
        "the sub-cent remainder stays payable"
    );
    assert_eq!(w.balances("c_ach").await.0, 9_999);

    w.at("2026-12-15T00:00:00Z");
    w.earn("b_sepa", 1_250_000, "2026-12-14T01:00:00Z").await; // net 1.000000
    w.at("2027-01-03T12:00:00Z");
    w.fx("0.92").await;
    // January 2027 runs on Monday 2027-01-04 (the 1st is a holiday).
    w.at("2027-01-04T00:05:00Z");
    let jan = w.monthly("2027-01").await;
    assert_eq!(jan.run_date, "2027-01-04");
    let b = candidate(&jan, "b_sepa");
    assert_eq!(
        (
            b.decision.as_str(),
            b.available_micro_usdc,
            b.amount_micro_usdc
        ),
        ("paid", 1_000_567, 1_000_000)
    );
    assert_eq!(
        w.payout(b.payout_id.as_deref().unwrap())
            .await
            .amount_eur_cents,
        Some(92)
    );
    let c = candidate(&jan, "c_ach");
    assert_eq!(
        (
            c.decision.as_str(),
            c.available_micro_usdc,
            c.amount_micro_usdc
        ),
        ("nothing_due", 9_999, 0)
    );
    assert_eq!(w.balances("b_sepa").await.0, 567);
}

#[tokio::test]
async fn a_held_payout_is_released_and_another_cancelled() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    for p in ["h1", "h2"] {
        w.provider(p, W, Some(SOLANA)).await;
        w.update(p, r#""status":"on_hold""#).await;
    }
    w.at("2026-11-18T00:00:00Z");
    w.earn("h1", 50_000_000, "2026-11-17T01:00:00Z").await;
    w.earn("h2", 50_000_000, "2026-11-17T01:00:00Z").await;
    w.at("2026-11-23T00:05:00Z");
    let run = w.weekly("2026-11-23").await;
    let id1 = candidate(&run, "h1").payout_id.clone().unwrap();
    let id2 = candidate(&run, "h2").payout_id.clone().unwrap();
    for (p, id) in [("h1", &id1), ("h2", &id2)] {
        assert_eq!(decision(&run, p), "held");
        let payout = w.payout(id).await;
        assert_eq!(
            (payout.status.as_str(), payout.hold_reason.as_deref()),
            ("held", Some("provider_on_hold"))
        );
        assert_eq!(w.balances(p).await, (0, 40 * USDC, 0, 0));
    }
    let admin = w.actor();
    assert_eq!(
        w.ledger
            .release_payout(&id1, &w.config, &admin)
            .await
            .unwrap(),
        Applied::Accepted
    );
    assert_eq!(
        w.ledger
            .release_payout(&id1, &w.config, &admin)
            .await
            .unwrap(),
        Applied::Duplicate
    );
    assert_eq!(w.payout(&id1).await.status.as_str(), "created");
    assert_eq!(w.balances("h1").await, (0, 0, 40 * USDC, 0));
    assert_eq!(
        w.ledger
            .cancel_payout(&id2, "KYC not complete", &admin)
            .await
            .unwrap(),
        Applied::Accepted
    );
    assert_eq!(
        w.ledger
            .cancel_payout(&id2, "KYC not complete", &admin)
            .await
            .unwrap(),
        Applied::Duplicate
    );
    assert_eq!(w.payout(&id2).await.status.as_str(), "cancelled");
    assert_eq!(w.balances("h2").await, (40 * USDC, 0, 0, 0));
    assert_eq!(
        w.ledger
            .cancel_payout(&id1, "too late", &admin)
            .await
            .unwrap_err()
            .code(),
        "invalid_payout_state"
    );
    assert_eq!(
        w.ledger
            .release_payout(&id2, &w.config, &admin)
            .await
            .unwrap_err()
            .code(),
        "invalid_payout_state"
    );
    assert_eq!(
        w.ledger
            .release_payout("po_nope", &w.config, &admin)
            .await
            .unwrap_err()
            .code(),
        "unknown_payout"
    );
    w.check_invariants().await;

    // The cancelled amount is available again; once the hold is lifted it is paid.
    w.update("h2", r#""status":"active""#).await;
    w.at("2026-11-30T00:05:00Z");
    let next = w.weekly("2026-11-30").await;
    assert_eq!(decision(&next, "h2"), "paid");
    assert_eq!(candidate(&next, "h2").amount_micro_usdc, 40 * USDC);
    assert_eq!(decision(&next, "h1"), "nothing_due");
}

#[tokio::test]
async fn no_method_is_skipped_then_paid_once_the_method_is_past_cooling_off() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    w.provider("n", W, None).await;
    w.provider("k", W, Some(SOLANA)).await;
    w.at("2026-11-18T00:00:00Z");
    w.earn("n", 37_500_000, "2026-11-17T01:00:00Z").await; // net 30
    w.earn("k", 37_500_000, "2026-11-17T01:00:00Z").await;
    w.at("2026-11-23T00:05:00Z");
    let first = w.weekly("2026-11-23").await;
    assert_eq!(decision(&first, "n"), "no_method");
    assert_eq!(candidate(&first, "n").available_micro_usdc, 30 * USDC);
    assert_eq!(
        decision(&first, "k"),
        "paid",
        "the method given at registration does not cool off"
    );
    w.at("2026-11-24T10:00:00Z");
    w.update("n", &format!(r#""payout_method":{SOLANA}"#)).await;
    w.at("2026-11-26T00:00:00Z");
    w.earn("k", 37_500_000, "2026-11-25T01:00:00Z").await;
    w.at("2026-11-28T12:00:00Z");
    w.update("k", &format!(r#""payout_method":{SOLANA_2}"#))
        .await;
    w.at("2026-11-30T00:05:00Z");
    let second = w.weekly("2026-11-30").await;
    assert_eq!(
        decision(&second, "n"),
        "paid",
        "method set 85 h before the run"
    );
    assert_eq!(candidate(&second, "n").amount_micro_usdc, 30 * USDC);
    assert_eq!(
        decision(&second, "k"),
        "cooling_off",
        "method changed 36 h before the run"
    );
    assert_eq!(
        w.balances("k").await.0,
        30 * USDC,
        "the balance carries forward"
    );
    w.at("2026-12-07T00:05:00Z");
    let third = w.weekly("2026-12-07").await;
    assert_eq!(decision(&third, "k"), "paid");
    let mut payouts = w.payouts_of("k").await;
    assert_eq!(payouts.len(), 2);
    w.ledger.open_payout_methods(&mut payouts).await.unwrap();
    assert!(
        matches!(&payouts[1].method, settle::domain::event::PayoutMethod::Solana { wallet } if wallet == "6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH")
    );
}

/// A marketplace with a candidate for each of the seven decisions of SPEC §5 (three of them
/// held for different reasons) and a suspended provider, up to the weekly run of
/// 2026-11-23, which it runs.
async fn seven_decisions(w: &World) -> runs::RunReport {
    w.provider("d1_no_method", W, None).await;
    w.provider("d2_cooling_off", W, Some(SOLANA)).await;
    w.provider("d3_negative", W, Some(SOLANA)).await;
    w.provider("d4_nothing_due", W, Some(SOLANA)).await;
    w.provider("d5_below_minimum", W, Some(SOLANA)).await;
    w.provider("d6_held_on_hold", W, Some(SOLANA)).await;
    w.provider("d6_held_limit", W, Some(SOLANA)).await;
    w.provider("d6_held_fx", W, Some(SEPA)).await;
    w.provider("d7_paid", W, Some(SOLANA)).await;
    w.provider("suspended", W, Some(SOLANA)).await;
    w.update("d6_held_on_hold", r#""status":"on_hold""#).await;
    w.update("suspended", r#""status":"suspended""#).await;
    w.at("2026-11-18T00:00:00Z");
    for p in [
        "d1_no_method",
        "d2_cooling_off",
        "d3_negative",
        "d6_held_on_hold",
        "d6_held_fx",
        "d7_paid",
        "suspended",
    ] {
        w.earn(p, 50_000_000, "2026-11-17T01:00:00Z").await; // net 40
    }
    w.earn("d5_below_minimum", 25_000_000, "2026-11-17T01:00:00Z")
        .await; // net 20
    w.adjust("d6_held_limit", "big", 100_000 * USDC + 1).await;
    w.at("2026-11-21T00:00:00Z");
    w.update("d2_cooling_off", &format!(r#""payout_method":{SOLANA_2}"#))
        .await;
    // After the cutoff: the whole balance goes negative although `available` is positive.
    w.at("2026-11-23T00:01:00Z");
    w.adjust("d3_negative", "chargeback", -50 * USDC).await;
    w.at("2026-11-23T00:05:00Z");
    w.weekly("2026-11-23").await
}

#[tokio::test]
async fn each_of_the_seven_decisions_in_one_run() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    let run = seven_decisions(&w).await;
    assert!(
        !is_candidate(&run, "suspended"),
        "a suspended provider is no candidate"
    );
    let expect = [
        ("d1_no_method", "no_method", 40 * USDC, None),
        ("d2_cooling_off", "cooling_off", 40 * USDC, None),
        ("d3_negative", "negative", 40 * USDC, None),
        ("d4_nothing_due", "nothing_due", 0, None),
        ("d5_below_minimum", "below_minimum", 20 * USDC, None),
        (
            "d6_held_on_hold",
            "held",
            40 * USDC,
            Some("provider_on_hold"),
        ),
        (
            "d6_held_limit",
            "held",
            100_000 * USDC + 1,
            Some("above_payout_limit"),
        ),
        ("d6_held_fx", "held", 40 * USDC, Some("fx_stale")),
        ("d7_paid", "paid", 40 * USDC, None),
    ];
    for (p, d, available, hold) in expect {
        let c = candidate(&run, p);
        assert_eq!(
            (c.decision.as_str(), c.available_micro_usdc),
            (d, available),
            "{p}"
        );
        assert_eq!(c.payout_id.is_some(), d == "held" || d == "paid", "{p}");
        if let Some(id) = &c.payout_id {
            let payout = w.payout(id).await;
            assert_eq!(payout.hold_reason.as_deref(), hold, "{p}");
            assert_eq!(payout.amount_micro_usdc, c.amount_micro_usdc);
            assert_eq!(
                payout.status.as_str(),
                if hold.is_some() { "held" } else { "created" }
            );
            assert_eq!(id.len(), 27);
        }
    }
    assert_eq!(run.totals["held"].count, 3);
    assert_eq!(run.totals.values().map(|t| t.count).sum::<i64>(), 9);
    // The held EUR payout has no EUR amount; without a fresh rate it cannot be released
    // (tests/it/rule_defects.rs releases one after a fresh rate), but it can be cancelled.
    let fx_id = candidate(&run, "d6_held_fx").payout_id.clone().unwrap();
    assert_eq!(
        w.ledger
            .release_payout(&fx_id, &w.config, &w.actor())
            .await
            .unwrap_err()
            .code(),
        "fx_rate_stale"
    );
    w.ledger
        .cancel_payout(&fx_id, "stale rate", &w.actor())
        .await
        .unwrap();
    // A fresh rate: the next run pays it in EUR.
    w.at("2026-11-29T00:00:00Z");
    w.fx("0.9").await;
    w.at("2026-11-30T00:05:00Z");
    let next = w.weekly("2026-11-30").await;
    let c = candidate(&next, "d6_held_fx");
    assert_eq!(
        (c.decision.as_str(), c.amount_micro_usdc),
        ("paid", 40 * USDC)
    );
    assert_eq!(
        w.payout(c.payout_id.as_deref().unwrap())
            .await
            .amount_eur_cents,
        Some(3600)
    );
}

/// A run decides its candidates in chunks, one transaction a chunk over their streams
/// (`runs.candidates_per_tx`): the ledger is the same, event for event and hash for hash,
/// as with a transaction per candidate, whatever the chunk size, and a second start
/// finds every chunk decided.
#[tokio::test]
async fn chunks_of_candidates_book_the_same_ledger_as_one_transaction_each() {
    let mut ledgers = Vec::new();
    for per_tx in [1, 4, 250] {
        let mut w = World::new("2026-11-16T00:00:00Z").await;
        // Sealed values differ by their random nonces: compared in clear, event for event.
        w.ledger.privacy = settle::privacy::vault::Privacy::Clear;
        w.config.candidates_per_tx = per_tx;
        // One transaction in flight: SQLite's chunks are the size named too.
        w.config.candidates_in_flight = 1;
        let report = seven_decisions(&w).await;
        assert_eq!(report.candidates.len(), 9, "chunks of {per_tx}");
        let events_before = event_count(&w.ledger).await;
        let again = w.weekly("2026-11-23").await;
        assert_eq!(again, report, "chunks of {per_tx}: a second start");
        assert_eq!(event_count(&w.ledger).await, events_before);
        let store = &w.ledger.store;
        let mut streams = Vec::new();
        for stream in store.streams().await.unwrap() {
            let events: Vec<(i64, String, String, Vec<u8>)> = store
                .stream_events(&stream, 0, 10_000)
                .await
                .unwrap()
                .into_iter()
                .map(|e| (e.seq, e.event_type, e.payload, e.hash))
                .collect();
            streams.push((stream, events));
        }
        let balances: Vec<_> = {
            let mut b = Vec::new();
            for c in &report.candidates {
                b.push((c.provider_id.clone(), w.balances(&c.provider_id).await));
            }
            b
        };
        ledgers.push((per_tx, report, streams, balances));
    }
    let (_, report, streams, balances) = &ledgers[0];
    assert!(
        streams
            .iter()
            .any(|(_, e)| e.iter().any(|e| e.1 == "payout.held"))
    );
    for (per_tx, r, s, b) in &ledgers[1..] {
        assert_eq!(r, report, "chunks of {per_tx}: the report");
        assert_eq!(b, balances, "chunks of {per_tx}: the balances");
        assert_eq!(s.len(), streams.len(), "chunks of {per_tx}: the streams");
        for ((name, events), (expected_name, expected)) in s.iter().zip(streams) {
            assert_eq!(name, expected_name);
            assert_eq!(events, expected, "chunks of {per_tx}: stream {name}");
        }
    }
}

#[tokio::test]
async fn on_the_shared_date_the_weekly_run_is_decided_first() {
    let w = World::new("2026-10-26T00:00:00Z").await;
    w.provider("weekly_p", W, Some(SOLANA)).await;
    w.provider("monthly_p", M, Some(SOLANA)).await;
    w.at("2026-10-29T00:00:00Z");
    w.earn("weekly_p", 37_500_000, "2026-10-28T01:00:00Z").await; // 30
    w.earn("monthly_p", 6_250_000, "2026-10-28T01:00:00Z").await; // 5
    w.at("2026-11-01T12:00:00Z");
    w.earn("weekly_p", 12_500_000, "2026-11-01T01:00:00Z").await; // 10
    w.at("2026-11-02T00:05:00Z");
    // Starting the monthly run first still decides the weekly run of the same date first.
    let monthly = w.monthly("2026-11").await;
    assert_eq!(monthly.run_date, "2026-11-02");
    let weekly = runs::run_report(
        &w.ledger.store,
        &w.calendar,
        runs::weekly_key("2026-11-02").unwrap(),
    )
    .await
    .unwrap()
    .expect("the weekly run happened");
    assert!(weekly.completed);
    let wp = candidate(&weekly, "weekly_p");
    assert_eq!(
        (wp.decision.as_str(), wp.amount_micro_usdc),
        ("paid", 40 * USDC),
        "one weekly payout of Oct 28 and Nov 1"
    );
    assert_eq!(decision(&monthly, "weekly_p"), "nothing_due");
    assert_eq!(decision(&monthly, "monthly_p"), "paid");
    assert!(wp.decided_at_ms <= candidate(&monthly, "weekly_p").decided_at_ms);
    assert_eq!(w.payouts_of("weekly_p").await.len(), 1);
    assert_eq!(
        w.weekly("2026-11-02").await,
        weekly,
        "starting the weekly run again changes nothing"
    );

    // 2027-01-04 carries both runs too: the monthly run cannot jump ahead of the weekly one.
    w.at("2027-01-02T12:00:00Z");
    let err = w
        .try_run(runs::monthly_key("2027-01").unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "weekly_run_pending");
    let err = w
        .try_run(runs::weekly_key("2027-01-04").unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "run_before_cutoff");
}

/// SPEC §5: a run is never started before its cutoff, and may start at it: the instant
/// itself belongs to the run (one millisecond earlier is refused).
#[tokio::test]
async fn a_run_starts_at_its_cutoff_exactly_and_not_a_millisecond_before() {
    let w = World::new("2026-10-26T00:00:00Z").await;
    w.provider("weekly_p", W, Some(SOLANA)).await;
    w.provider("monthly_p", M, Some(SOLANA)).await;
    w.at("2026-10-29T00:00:00Z");
    w.earn("weekly_p", 37_500_000, "2026-10-28T01:00:00Z").await; // 30 net
    w.earn("monthly_p", 6_250_000, "2026-10-28T01:00:00Z").await; // 5 net
    // 2026-11-02 carries both runs; the weekly one (cutoff 2026-11-02 00:00) is decided
    // first, so the monthly run waits for that cutoff too.
    w.at("2026-11-01T23:59:59.999Z");
    let err = w
        .try_run(runs::monthly_key("2026-11").unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "weekly_run_pending");
    w.at("2026-11-02T00:00:00Z");
    let monthly = w.monthly("2026-11").await;
    assert_eq!(decision(&monthly, "monthly_p"), "paid");
    let weekly = runs::run_report(
        &w.ledger.store,
        &w.calendar,
        runs::weekly_key("2026-11-02").unwrap(),
    )
    .await
    .unwrap()
    .expect("the weekly run of the shared date ran at its cutoff");
    assert_eq!(decision(&weekly, "weekly_p"), "paid");

    w.at("2026-11-05T00:00:00Z");
    w.earn("weekly_p", 37_500_000, "2026-11-04T01:00:00Z").await;
    w.at("2026-11-08T23:59:59.999Z");
    let err = w
        .try_run(runs::weekly_key("2026-11-09").unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "run_before_cutoff");
    w.at("2026-11-09T00:00:00Z");
    let next = w.weekly("2026-11-09").await;
    let c = candidate(&next, "weekly_p");
    assert_eq!(
        (c.decision.as_str(), c.amount_micro_usdc),
        ("paid", 30 * USDC)
    );
}

#[tokio::test]
async fn a_void_after_a_payout_is_netted_in_the_next_run() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    w.provider("p", W, Some(SOLANA)).await;
    w.at("2026-11-18T00:00:00Z");
    w.earn("p", 25_000_000, "2026-11-17T01:00:00Z").await; // 20
    let (voided, _) = w.earn("p", 25_000_000, "2026-11-17T10:00:00Z").await; // 20
    w.at("2026-11-23T00:05:00Z");
    let first = w.weekly("2026-11-23").await;
    assert_eq!(candidate(&first, "p").amount_micro_usdc, 40 * USDC);
    w.at("2026-11-24T09:00:00Z");
    w.void(&voided).await;
    assert_eq!(w.balances("p").await, (-20 * USDC, 0, 40 * USDC, 0));
    w.check_invariants().await;
    w.at("2026-11-26T00:00:00Z");
    w.earn("p", 62_500_000, "2026-11-25T01:00:00Z").await; // 50
    w.at("2026-11-30T00:05:00Z");
    let second = w.weekly("2026-11-30").await;
    let c = candidate(&second, "p");
    assert_eq!(
        (c.decision.as_str(), c.amount_micro_usdc),
        ("paid", 30 * USDC),
        "50 earned − 20 voided"
    );
    assert_eq!(w.balances("p").await, (0, 0, 70 * USDC, 0));
}

#[tokio::test]
async fn running_twice_gives_the_same_report_and_no_second_payout() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    for i in 0..5 {
        w.provider(&format!("p{i}"), W, Some(SOLANA)).await;
    }
    w.at("2026-11-18T00:00:00Z");
    for i in 0..5 {
        w.earn(
            &format!("p{i}"),
            40_000_000 + i * 5_000_000,
            "2026-11-17T01:00:00Z",
        )
        .await;
    }
    w.at("2026-11-23T00:05:00Z");
    let first = w.weekly("2026-11-23").await;
    let events = event_count(&w.ledger).await;
    w.at("2026-11-23T08:00:00Z");
    let second = w.weekly("2026-11-23").await;
    assert_eq!(first, second);
    assert_eq!(event_count(&w.ledger).await, events, "nothing booked twice");
    assert_eq!(first.payouts, 5);
    let summaries = runs::completed_runs(&w.ledger.store, 10).await.unwrap();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].candidates, 5);
    assert_eq!(summaries[0].totals["paid"], (5, first.payouts_micro_usdc));
    let err = w
        .try_run(runs::weekly_key("2026-11-30").unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "run_before_cutoff");
}

/// Provider ids are free text of `[A-Za-z0-9._:-]`, so a provider may be called like the
/// tail of the run's own keys: `completed` (its decision key is the run's completion key,
/// on another stream) or `p:created`. Each is decided and paid once, the run completes, and
/// it is complete on a second start.
#[tokio::test]
async fn providers_named_like_the_runs_keys_are_paid_and_the_run_completes() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    let ids = ["completed", "p", "p:created", "p:held"];
    for p in ids {
        w.provider(p, W, Some(SOLANA)).await;
    }
    w.at("2026-11-18T00:00:00Z");
    for p in ids {
        w.earn(p, 40_000_000, "2026-11-17T01:00:00Z").await;
    }
    w.at("2026-11-23T00:05:00Z");
    let first = w.weekly("2026-11-23").await;
    assert!(first.completed, "the run completes");
    assert_eq!(first.payouts, 4);
    for p in ids {
        assert_eq!(decision(&first, p), "paid", "{p}");
        assert_eq!(w.payouts_of(p).await.len(), 1, "{p} paid once");
    }
    let summaries = runs::completed_runs(&w.ledger.store, 10).await.unwrap();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].candidates, 4);
    let events = event_count(&w.ledger).await;
    w.at("2026-11-23T08:00:00Z");
    assert_eq!(w.weekly("2026-11-23").await, first);
    assert_eq!(event_count(&w.ledger).await, events, "nothing booked twice");
}

/// On one writer (SQLite) a run reads each chunk's candidates ahead of the chunk's lock,
/// while the chunk before commits. The decisions use those reads only while they hold: a
/// payout method changed after the read (the provider is then cooling off), or a
/// `settle rebuild` that corrected the projections after the read, sends the chunk back to
/// reading under its lock.
#[tokio::test]
async fn a_chunk_read_ahead_decides_only_while_nothing_moved_since() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    for p in ["a", "b", "c"] {
        w.provider(p, W, Some(SOLANA)).await;
    }
    w.at("2026-11-18T00:00:00Z");
    for p in ["a", "b", "c"] {
        w.earn(p, 37_500_000, "2026-11-17T01:00:00Z").await; // net 30
    }
    w.at("2026-11-23T00:05:00Z");
    w.ledger.store.catch_up_all().await.unwrap();
    let run = &runs::weekly_key("2026-11-23").unwrap();
    let (ledger, config, actor) = (&w.ledger, &w.config, &w.actor());
    let decide = |p: &'static str, ahead| async move {
        ledger
            .decide_candidates(run, &[p], config, actor, ahead)
            .await
            .unwrap()
    };
    let ahead = |p: &'static str| async move {
        let a = ledger.read_ahead(run, &[p]).await.unwrap();
        assert!(a.is_some(), "{p}'s projections hold all its events");
        a
    };

    // a: nothing moved between the read and the lock.
    let a = ahead("a").await;
    assert!(
        decide("a", a).await,
        "a is decided from what was read ahead"
    );

    // b: its payout method changes after the read.
    let b = ahead("b").await;
    w.update("b", &format!(r#""payout_method":{SOLANA_2}"#))
        .await;
    assert!(!decide("b", b).await, "b's stream moved: read again");

    // c: its projections say what no event said when read, and a rebuild corrects them
    // before the lock.
    sqlx::query("UPDATE payable_recorded SET amount_micro_usdc = 1 WHERE provider_id = 'c'")
        .execute(w.ledger.store.pool())
        .await
        .unwrap();
    let c = ahead("c").await;
    let rebuilt = settle::verify::rebuild(&w.db.owner_store().await, 1_000, &|_| {})
        .await
        .expect("rebuild");
    assert!(rebuilt.ok(), "{:?}", rebuilt.problems);
    assert!(
        !decide("c", c).await,
        "c's projections were rebuilt: read again"
    );

    // d: usage booked and not folded into the projections yet: nothing is read ahead.
    w.provider("d", W, Some(SOLANA)).await;
    w.earn("d", 37_500_000, "2026-11-22T01:00:00Z").await;
    assert!(ledger.read_ahead(run, &["a", "d"]).await.unwrap().is_none());

    let report = w.weekly("2026-11-23").await;
    assert!(report.completed);
    assert_eq!(decision(&report, "a"), "paid");
    assert_eq!(decision(&report, "b"), "cooling_off", "as the lock read it");
    assert_eq!(decision(&report, "c"), "paid", "as rebuilt");
    assert_eq!(candidate(&report, "c").amount_micro_usdc, 30 * USDC);
}

#[tokio::test]
async fn concurrent_starts_of_one_run_create_each_payout_once() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    let n = 24;
    for i in 0..n {
        w.provider(
            &format!("p{i:02}"),
            if i % 3 == 0 { M } else { W },
            Some(SOLANA),
        )
        .await;
    }
    w.at("2026-11-30T12:00:00Z");
    for i in 0..n {
        w.earn(&format!("p{i:02}"), 40_000_000, "2026-11-29T01:00:00Z")
            .await;
    }
    w.at("2026-12-01T00:05:00Z");
    // Four engines on their own connection pools start the monthly run (and with it
    // nothing else: 2026-12-01 is a Tuesday) at once.
    let mut ledgers = Vec::new();
    for _ in 0..4 {
        let (ledger, clock) = w.db.ledger_at("2026-12-01T00:05:00Z").await;
        ledgers.push((ledger, clock));
    }
    let key = runs::monthly_key("2026-12").unwrap();
    let reports = futures::future::join_all(ledgers.iter().map(|(l, _)| {
        let (cal, cfg) = (&w.calendar, &w.config);
        async move {
            l.run_payouts(key, cal, cfg, &settle::ledger::Actor::system("race"))
                .await
        }
    }))
    .await;
    let reports: Vec<_> = reports
        .into_iter()
        .map(|r| r.expect("every start finishes the run"))
        .collect();
    for r in &reports[1..] {
        assert_eq!(r, &reports[0]);
    }
    assert_eq!(reports[0].candidates.len(), n);
    assert_eq!(reports[0].payouts, n as i64);
    w.check_invariants().await;
    let created: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE event_type = 'payout.created'")
            .fetch_one(w.ledger.store.pool())
            .await
            .unwrap();
    assert_eq!(created, n as i64);
    let completed: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE event_type = 'payout_run.completed'")
            .fetch_one(w.ledger.store.pool())
            .await
            .unwrap();
    assert_eq!(completed, 1);
}

#[tokio::test]
async fn the_projected_next_payout_is_what_the_next_paying_run_would_pay() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    w.provider("big", W, Some(SOLANA)).await;
    w.provider("small", W, Some(SOLANA)).await;
    w.provider("monthly_p", M, Some(SEPA)).await;
    w.provider("monthly_big", M, Some(SOLANA)).await;
    w.provider("none", W, None).await;
    w.provider("gone", W, Some(SOLANA)).await;
    w.update("gone", r#""status":"suspended""#).await;
    w.at("2026-11-19T00:00:00Z");
    w.earn("big", 50_000_000, "2026-11-18T01:00:00Z").await; // 40
    w.earn("monthly_big", 50_000_000, "2026-11-18T01:00:00Z")
        .await; // 40
    w.earn("small", 12_500_000, "2026-11-18T01:00:00Z").await; // 10
    w.earn("monthly_p", 12_500_000, "2026-11-18T01:00:00Z")
        .await; // 10
    w.adjust("monthly_p", "odd", 4_321).await;
    let now = w.now_ms();
    let project = async |p: &str| {
        projected_next_payout(&w.ledger.store, &w.calendar, &w.config, p, now)
            .await
            .unwrap()
    };
    let big = project("big").await.unwrap();
    assert_eq!(
        (
            big.run_kind.as_str(),
            big.run_key.as_str(),
            big.run_date.as_str(),
            big.amount_micro_usdc,
            big.decision.as_str()
        ),
        ("weekly", "2026-11-23", "2026-11-23", 40 * USDC, "paid")
    );
    let small = project("small").await.unwrap();
    assert_eq!(
        (
            small.run_kind.as_str(),
            small.run_key.as_str(),
            small.run_date.as_str(),
            small.amount_micro_usdc,
            small.decision.as_str()
        ),
        ("monthly", "2026-12", "2026-12-01", 10 * USDC, "paid"),
        "below the weekly minimum: the monthly run sweeps it"
    );
    let monthly = project("monthly_p").await.unwrap();
    assert_eq!(
        (monthly.run_key.as_str(), monthly.amount_micro_usdc),
        ("2026-12", 10 * USDC),
        "bank rails pay whole cents"
    );
    // Above the weekly minimum, a monthly provider still waits for the monthly run.
    let monthly_big = project("monthly_big").await.unwrap();
    assert_eq!(
        (
            monthly_big.run_kind.as_str(),
            monthly_big.run_date.as_str(),
            monthly_big.amount_micro_usdc
        ),
        ("monthly", "2026-12-01", 40 * USDC)
    );
    let none = project("none").await.unwrap();
    assert_eq!(
        (none.run_key.as_str(), none.decision.as_str()),
        ("2026-11-23", "no_method")
    );
    assert_eq!(project("gone").await, None);
    assert_eq!(project("unknown").await, None);

    // After the weekly run paid "big", its next payout is nothing until more arrives.
    w.at("2026-11-23T00:05:00Z");
    w.weekly("2026-11-23").await;
    let now = w.now_ms();
    let big = projected_next_payout(&w.ledger.store, &w.calendar, &w.config, "big", now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            big.run_key.as_str(),
            big.decision.as_str(),
            big.amount_micro_usdc
        ),
        ("2026-11-30", "nothing_due", 0)
    );
}

#[tokio::test]
async fn the_cli_runs_shows_releases_cancels_and_lists_the_calendar() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    for p in ["a", "h1", "h2"] {
        w.provider(p, W, Some(SOLANA)).await;
    }
    w.update("h1", r#""status":"on_hold""#).await;
    w.update("h2", r#""status":"on_hold""#).await;
    w.at("2026-11-18T00:00:00Z");
    for p in ["a", "h1", "h2"] {
        w.earn(p, 50_000_000, "2026-11-17T01:00:00Z").await;
    }
    let url = w.db.url.clone();
    let cli = |args: &[&str]| common::run_cli(&url, args);
    let (code, _, err) = cli(&[
        "--now",
        "2026-11-24T00:05:00Z",
        "run",
        "weekly",
        "--date",
        "2026-11-24",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not_monday"), "{err}");
    let (code, _, err) = cli(&[
        "--now",
        "2026-11-22T00:05:00Z",
        "run",
        "weekly",
        "--date",
        "2026-11-23",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("run_before_cutoff"), "{err}");
    let (code, out, err) = cli(&[
        "--now",
        "2026-11-23T00:05:00Z",
        "run",
        "weekly",
        "--date",
        "2026-11-23",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["completed"], true);
    assert_eq!(report["totals"]["paid"]["count"], 1);
    assert_eq!(report["totals"]["held"]["amount_usdc"], "80.000000");
    let held: Vec<String> = report["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["decision"] == "held")
        .map(|c| c["payout_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(held.len(), 2);
    let (code, out, _) = cli(&[
        "run",
        "show",
        "--kind",
        "weekly",
        "--key",
        "2026-11-23",
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().next(),
        Some("provider_id,decision,available_usdc,amount_usdc,payout_id")
    );
    assert!(out.contains("a,paid,40.000000,40.000000,po-"), "{out}");
    let (code, out, _) = cli(&["run", "show", "--kind", "weekly", "--key", "2026-11-23"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("completed")
            && out.contains("3 candidates, 3 payouts totalling 120.000000 USDC"),
        "{out}"
    );
    let (code, _, err) = cli(&["run", "show", "--kind", "weekly", "--key", "2026-11-30"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown_run"), "{err}");
    let (code, out, _) = cli(&[
        "--now",
        "2026-11-23T09:00:00Z",
        "payout",
        "release",
        &held[0],
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (rows[0]["status"].as_str(), rows[0]["result"].as_str()),
        (Some("created"), Some("accepted"))
    );
    let (code, out, _) = cli(&[
        "--now",
        "2026-11-23T09:00:00Z",
        "payout",
        "cancel",
        &held[1],
        "--reason",
        "fraud review",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("cancelled"), "{out}");
    let (code, _, err) = cli(&[
        "--now",
        "2026-11-23T09:00:00Z",
        "payout",
        "release",
        &held[1],
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("invalid_payout_state"), "{err}");
    let (code, out, _) = cli(&["run", "list", "--format", "json"]);
    assert_eq!(code, 0);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list[0]["run_key"], "2026-11-23");
    let (code, out, _) = cli(&[
        "--now",
        "2026-12-29T12:00:00Z",
        "calendar",
        "next-runs",
        "--count",
        "3",
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "run_date,run_kind,run_key,cutoff\n2027-01-04,weekly,2027-01-04,2027-01-04T00:00:00.000Z\n2027-01-04,monthly,2027-01,2027-01-01T00:00:00.000Z\n2027-01-11,weekly,2027-01-11,2027-01-11T00:00:00.000Z\n"
    );
    let (code, _, _) = cli(&["verify"]);
    assert_eq!(code, 0);
    w.check_invariants().await;
}

#[tokio::test]
async fn the_cli_run_takes_its_rules_from_the_runs_config() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    w.provider("p", W, Some(SOLANA)).await;
    w.at("2026-11-18T00:00:00Z");
    w.earn("p", 12_500_000, "2026-11-17T01:00:00Z").await; // net 10, below the default 25
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("settle.toml");
    std::fs::write(&config, "[runs]\nweekly_minimum_micro_usdc = 5000000\n").unwrap();
    let (code, out, err) = common::run_cli(
        &w.db.url,
        &[
            "--config",
            config.to_str().unwrap(),
            "--now",
            "2026-11-23T00:05:00Z",
            "run",
            "weekly",
            "--date",
            "2026-11-23",
            "--format",
            "csv",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("p,paid,10.000000,10.000000,po-"), "{out}");
    std::fs::write(&config, "[runs]\nweekly_minimum = 5\n").unwrap();
    let (code, _, err) = common::run_cli(
        &w.db.url,
        &[
            "--config",
            config.to_str().unwrap(),
            "run",
            "show",
            "--kind",
            "weekly",
            "--key",
            "2026-11-23",
        ],
    );
    assert_ne!(code, 0, "an unknown key is refused: {err}");
    w.check_invariants().await;
}
