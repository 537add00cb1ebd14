//! Job completion: only interruptions by the provider's side count.

use settle_reliability::InterruptionCause::{Customer, Platform, Provider};
use settle_reliability::{Config, Ratio, Reason, render_en, score};

use crate::support::{HOUR, always_gpu, at, completed, interrupted};

fn now() -> i64 {
    at("2026-12-06T00:00:00Z")
}

#[test]
fn customer_and_platform_interruptions_do_not_count() {
    // 10 jobs: 8 completed, 1 interrupted by the customer, 1 by the platform: 10/10.
    let mut jobs: Vec<_> = (1..=8).map(|i| completed(now() - i * HOUR)).collect();
    jobs.push(interrupted(now() - 9 * HOUR, Customer));
    jobs.push(interrupted(now() - 10 * HOUR, Platform));
    let gpu = always_gpu("g").jobs(jobs).build();
    let s = score(&gpu, &Config::default(), now()).score;
    assert_eq!(
        s.jobs.measured,
        Some(Ratio {
            numerator: 10,
            denominator: 10
        })
    );
    assert_eq!((s.jobs.value_bps, s.jobs.evidence_bps), (10_000, 10_000));
    assert_eq!(s.jobs.reasons, vec![]);
}

#[test]
fn provider_interruptions_count() {
    // 11 jobs, one interrupted by the provider: 10/11 = 0.90909.. -> 9091.
    // Two more at the same instant: 13 jobs, 3 by provider: 10/13 = 0.769230.. -> 7692.
    let t = at("2026-12-02T14:05:00Z");
    let mut jobs: Vec<_> = (1..=8).map(|i| completed(now() - i * HOUR)).collect();
    jobs.push(interrupted(now() - 9 * HOUR, Customer));
    jobs.push(interrupted(now() - 10 * HOUR, Platform));
    jobs.push(interrupted(t, Provider));
    let gpu = always_gpu("g").jobs(jobs.clone()).build();
    let s = score(&gpu, &Config::default(), now()).score;
    assert_eq!(s.jobs.value_bps, 9_091);
    assert_eq!(
        s.jobs.reasons,
        vec![Reason::InterruptedByProvider { at_ms: t, count: 1 }]
    );
    assert_eq!(
        render_en(&s.jobs.reasons[0]),
        "1 job interrupted by the provider's side at 2026-12-02 14:05 UTC"
    );
    jobs.push(interrupted(t, Provider));
    jobs.push(interrupted(t, Provider));
    let s = score(
        &always_gpu("g").jobs(jobs).build(),
        &Config::default(),
        now(),
    )
    .score;
    assert_eq!(s.jobs.value_bps, 7_692);
    assert_eq!(
        s.jobs.reasons,
        vec![Reason::InterruptedByProvider { at_ms: t, count: 3 }]
    );
}

#[test]
fn only_jobs_inside_the_window() {
    // Window [now - 30 d, now): a provider interruption exactly at the start counts; one
    // just before the start and a completed job exactly at `now` do not.
    // 10 completed + 1 counted: 10/11 = 0.90909.. -> 9091.
    let start = now() - 30 * 24 * HOUR;
    let mut jobs: Vec<_> = (1..=10).map(|i| completed(now() - i * HOUR)).collect();
    jobs.push(interrupted(start, Provider));
    jobs.push(interrupted(start - 1, Provider));
    jobs.push(completed(now()));
    let s = score(
        &always_gpu("g").jobs(jobs).build(),
        &Config::default(),
        now(),
    )
    .score;
    assert_eq!(
        s.jobs.measured,
        Some(Ratio {
            numerator: 10,
            denominator: 11
        })
    );
    assert_eq!(s.jobs.value_bps, 9_091);
}

#[test]
fn few_jobs_blend_with_the_prior() {
    // 4 jobs, 1 by the provider: measured 3/4 = 7500, evidence 4/10 = 4000 bps.
    // (7500 * 4000 + 9000 * 6000) / 10000 = (30 000 000 + 54 000 000) / 10 000 = 8400.
    // The prior raised the value above the measurement, so no LimitedHistory reason.
    let jobs = vec![
        completed(now() - HOUR),
        completed(now() - 2 * HOUR),
        completed(now() - 3 * HOUR),
        interrupted(now() - 4 * HOUR, Provider),
    ];
    let s = score(
        &always_gpu("g").jobs(jobs).build(),
        &Config::default(),
        now(),
    )
    .score;
    assert_eq!(
        (s.jobs.measured.map(|r| r.bps()), s.jobs.evidence_bps),
        (Some(7_500), 4_000)
    );
    assert_eq!(s.jobs.value_bps, 8_400);
    assert_eq!(s.jobs.reasons.len(), 1);
    assert!(matches!(
        s.jobs.reasons[0],
        Reason::InterruptedByProvider { count: 1, .. }
    ));
}
