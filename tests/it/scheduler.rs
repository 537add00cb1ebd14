//! The payout run scheduler on both stores, driven through weeks with a manual clock:
//! runs start at their fire time in date order (weekly first on a shared date), every
//! missed run is caught up after downtime, and the loop stops on shutdown.

use crate::runs_support;

use std::sync::Arc;

use chrono::NaiveTime;
use runs_support::*;
use settle::domain::time::{format_ms, parse_rfc3339_ms};
use settle::jobs::scheduler::{Scheduler, SchedulerConfig};
use settle::ledger::Clock;
use settle_calendar::Schedule;

const HOUR_MS: i64 = 3_600_000;

fn scheduler(w: &World) -> Scheduler {
    let clock: Arc<dyn Clock> = w.clock.clone();
    Scheduler::new(
        w.ledger.clone(),
        clock,
        w.calendar.clone(),
        w.config.clone(),
    )
}

fn keys(started: &[settle::jobs::scheduler::Started]) -> Vec<String> {
    started.iter().map(|s| s.run.to_string()).collect()
}

#[tokio::test]
async fn ten_weeks_hour_by_hour_start_every_run_once_at_its_fire_time_in_order() {
    let w = World::new("2026-10-20T00:00:00Z").await;
    w.provider("wk", "weekly", Some(SOLANA)).await;
    w.provider("mo", "monthly", Some(SOLANA)).await;
    let mut s = scheduler(&w);
    // First start: no run completed yet, so the catch-up starts on the day of the first
    // registration (2026-10-20, a Tuesday): nothing was missed.
    let first = s.tick().await.unwrap();
    assert!(first.is_empty(), "{:?}", keys(&first));

    let mut log: Vec<(String, String)> = Vec::new();
    let end = parse_rfc3339_ms("2027-01-12T00:00:00Z").unwrap();
    while w.now_ms() < end {
        w.clock.advance(HOUR_MS);
        let now = w.now_ms();
        // Some earnings every day at noon, recorded as they happen.
        if now % (24 * HOUR_MS) == 12 * HOUR_MS {
            let start = format_ms(now - 11 * HOUR_MS);
            w.earn("wk", 7_500_000, &start).await; // net 6 USDC a day
            w.earn("mo", 1_250_000, &start).await; // net 1 USDC a day
        }
        for started in s.tick().await.unwrap() {
            log.push((started.run.to_string(), format_ms(now)));
        }
    }
    let expected = [
        ("weekly 2026-10-26", "2026-10-26T01:00:00.000Z"),
        ("weekly 2026-11-02", "2026-11-02T01:00:00.000Z"),
        ("monthly 2026-11", "2026-11-02T01:00:00.000Z"),
        ("weekly 2026-11-09", "2026-11-09T01:00:00.000Z"),
        ("weekly 2026-11-16", "2026-11-16T01:00:00.000Z"),
        ("weekly 2026-11-23", "2026-11-23T01:00:00.000Z"),
        ("weekly 2026-11-30", "2026-11-30T01:00:00.000Z"),
        ("monthly 2026-12", "2026-12-01T01:00:00.000Z"),
        ("weekly 2026-12-07", "2026-12-07T01:00:00.000Z"),
        ("weekly 2026-12-14", "2026-12-14T01:00:00.000Z"),
        ("weekly 2026-12-21", "2026-12-21T01:00:00.000Z"),
        ("weekly 2026-12-28", "2026-12-28T01:00:00.000Z"),
        ("weekly 2027-01-04", "2027-01-04T01:00:00.000Z"),
        ("monthly 2027-01", "2027-01-04T01:00:00.000Z"),
        ("weekly 2027-01-11", "2027-01-11T01:00:00.000Z"),
    ];
    let got: Vec<(&str, &str)> = log.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(got, expected);
    // Each weekly run paid the weekly provider its week (6 USDC a day ≥ 25 after 5 days).
    let payouts = w.payouts_of("wk").await;
    let weekly_paid = payouts.iter().filter(|p| p.run_kind == "weekly").count();
    assert_eq!(
        weekly_paid, 12,
        "every weekly run from 2026-10-26 on paid it"
    );
    // Monday's cutoff leaves the Monday earnings of 2026-11-30 to the monthly run of
    // 2026-12-01 (cutoff the 1st), which sweeps them; on 2026-11-02 and 2027-01-04 the
    // weekly run went first and left the monthly run nothing.
    let swept: Vec<(&str, i64)> = payouts
        .iter()
        .filter(|p| p.run_kind == "monthly")
        .map(|p| (p.run_key.as_str(), p.amount_micro_usdc))
        .collect();
    assert_eq!(swept, [("2026-12", 6 * USDC)]);
    let mo = w.payouts_of("mo").await;
    assert_eq!(
        mo.iter().map(|p| p.run_key.as_str()).collect::<Vec<_>>(),
        ["2026-11", "2026-12", "2027-01"]
    );
    w.check_invariants().await;
    // Nothing more is due until the next fire time.
    assert!(s.tick().await.unwrap().is_empty());
}

#[tokio::test]
async fn after_downtime_every_missed_run_is_caught_up_in_date_order_once() {
    let w = World::new("2026-10-30T00:00:00Z").await;
    w.provider("wk", "weekly", Some(SOLANA)).await;
    w.at("2026-10-31T00:00:00Z");
    w.earn("wk", 50_000_000, "2026-10-30T01:00:00Z").await;
    let mut s = scheduler(&w).with_catch_up_warn_days(3);
    let first = s.tick().await.unwrap();
    assert!(
        first.is_empty(),
        "no fire instant since the registration had a run: {:?}",
        keys(&first)
    );
    assert_eq!(
        s.last_checked().map(|t| t.to_string()).as_deref(),
        Some("2026-10-31 00:00:00")
    );
    // Down from 2026-10-31 to 2026-11-20 12:00. A restarted scheduler (no memory of its
    // last check) finds the same missed runs from the ledger, although they reach back
    // further than its warning threshold of 3 days: every one is caught up.
    w.at("2026-11-20T12:00:00Z");
    let missed = [
        "weekly 2026-11-02",
        "monthly 2026-11",
        "weekly 2026-11-09",
        "weekly 2026-11-16",
    ];
    let mut restarted = scheduler(&w).with_catch_up_warn_days(3);
    let due = due_keys(&restarted).await;
    assert_eq!(due, missed);
    let caught = s.tick().await.unwrap();
    assert_eq!(keys(&caught), missed);
    let weekly = &caught[0].report;
    assert_eq!(
        (
            decision(weekly, "wk"),
            candidate(weekly, "wk").amount_micro_usdc
        ),
        ("paid".to_owned(), 40 * USDC)
    );
    assert_eq!(
        decision(&caught[1].report, "wk"),
        "nothing_due",
        "the weekly run of the shared date went first"
    );
    assert!(s.tick().await.unwrap().is_empty(), "caught up once");
    // A second scheduler (another instance, or after a restart) finds the same runs done.
    let again = restarted.tick().await.unwrap();
    assert!(again.iter().all(|s| s.report.completed));
    assert_eq!(w.payouts_of("wk").await.len(), 1);
    // Started again now, it looks back to the date of the last completed run only.
    let fresh = scheduler(&w);
    let due = due_keys(&fresh).await;
    assert_eq!(due, ["weekly 2026-11-16"], "already completed: a no-op");
    w.check_invariants().await;
}

#[tokio::test]
async fn the_fire_time_is_configurable_and_nothing_starts_before_it() {
    let w = World::new("2026-11-22T23:00:00Z").await;
    w.provider("wk", "weekly", Some(SOLANA)).await;
    let config = SchedulerConfig {
        fire_time: "06:30".into(),
        ..Default::default()
    };
    let mut s = scheduler(&w).with_config(&config).unwrap();
    assert!(s.tick().await.unwrap().is_empty());
    w.at("2026-11-23T06:29:59Z");
    assert!(s.tick().await.unwrap().is_empty(), "not before 06:30");
    w.at("2026-11-23T06:30:00Z");
    assert_eq!(keys(&s.tick().await.unwrap()), ["weekly 2026-11-23"]);
    assert_eq!(
        s.next_fire_after(
            chrono::NaiveDate::from_ymd_opt(2026, 11, 23)
                .unwrap()
                .and_hms_opt(6, 30, 0)
                .unwrap()
        )
        .to_string(),
        "2026-11-24 06:30:00"
    );
    let bad = SchedulerConfig {
        fire_time: "25:00".into(),
        ..Default::default()
    };
    assert_eq!(bad.schedule().unwrap_err().code, "invalid_fire_time");
    assert_eq!(
        Schedule::new(NaiveTime::from_hms_opt(0, 5, 0).unwrap()),
        Schedule::default()
    );
}

#[tokio::test]
async fn a_failed_tick_is_retried_from_the_same_point() {
    let w = World::new("2026-11-23T12:00:00Z").await;
    w.provider("wk", "weekly", Some(SOLANA)).await;
    // An engine whose database went away: the tick fails and remembers nothing.
    let broken = w.db.ledger_at("2026-11-23T12:00:00Z").await.0;
    broken.store.close().await;
    let clock: Arc<dyn Clock> = w.clock.clone();
    let mut s = Scheduler::new(broken, clock, w.calendar.clone(), w.config.clone());
    assert_eq!(s.tick().await.unwrap_err().code(), "storage_unavailable");
    assert_eq!(s.last_checked(), None);
    let mut healthy = scheduler(&w);
    assert_eq!(healthy.due().await.unwrap().len(), 1, "still due");
    assert_eq!(keys(&healthy.tick().await.unwrap()), ["weekly 2026-11-23"]);
}

#[tokio::test]
async fn the_loop_catches_up_on_start_and_stops_on_shutdown() {
    let w = World::new("2026-11-23T12:00:00Z").await;
    w.provider("wk", "weekly", Some(SOLANA)).await;
    let s = scheduler(&w);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(s.run(async move {
        let _ = stopped.await;
    }));
    // The first tick runs immediately; wait (bounded) until it completed the run.
    let key = settle::ledger::runs::weekly_key("2026-11-23").unwrap();
    let mut done = false;
    for _ in 0..600 {
        if let Some(r) = settle::ledger::runs::run_report(&w.ledger.store, &w.calendar, key)
            .await
            .unwrap()
            && r.completed
        {
            done = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(done, "the loop started the due run");
    stop.send(()).unwrap();
    let s = task.await.expect("the loop ends on shutdown");
    // The shutdown may come between the run's completion and the end of its tick, which it
    // then abandons (`Scheduler::run`), so `last_checked` may or may not be set; either way
    // the stopped scheduler finds nothing left to do.
    assert_eq!(
        s.due().await.unwrap(),
        Vec::new(),
        "nothing due after the loop's tick"
    );
}
