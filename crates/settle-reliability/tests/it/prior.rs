//! A new GPU starts from the neutral prior (90 %), never 0 or 100.

use settle_reliability::{Config, PRIOR_BPS, Reason, score};

use crate::support::{DAY, Gpu, at, bench, completed, iv, metrics, schedule};

fn now() -> i64 {
    at("2026-12-06T00:00:00Z")
}

fn limited(evidence_bps: u16) -> Reason {
    Reason::LimitedHistory {
        evidence_bps,
        prior_bps: PRIOR_BPS,
    }
}

#[test]
fn a_gpu_without_any_data_is_at_the_prior() {
    // Joined at `now`: nothing scheduled yet, no jobs, no benchmark: 9000 everywhere.
    let gpu = Gpu::new("g", now(), schedule("UTC", "24/7")).build();
    let s = score(&gpu, &Config::default(), now()).score;
    let values = (
        s.uptime.value_bps,
        s.jobs.value_bps,
        s.benchmark.value_bps,
        s.combined_bps,
    );
    assert_eq!(values, (9_000, 9_000, 9_000, 9_000));
    assert_eq!(s.uptime.reasons, vec![limited(0)]);
}

#[test]
fn a_six_day_old_gpu_moves_toward_its_measurement() {
    // Joined 6 days ago, online ever since, 3 completed jobs, one benchmark.
    // uptime: measured 10000, evidence 6/30 days = 2000: (10000*2000 + 9000*8000)/10000 = 9200.
    // jobs: measured 10000, evidence 3/10 = 3000: (10000*3000 + 9000*7000)/10000 = 9300.
    // benchmark: no comparison yet: 9000.
    // combined: (5000*9200 + 3000*9300 + 2000*9000)/10000 = (46.0M + 27.9M + 18.0M)/10000 = 9190.
    let joined = now() - 6 * DAY;
    let gpu = Gpu::new("g", joined, schedule("UTC", "24/7"))
        .online(vec![iv(joined, now())])
        .jobs(vec![
            completed(now() - DAY),
            completed(now() - 2 * DAY),
            completed(now() - 3 * DAY),
        ])
        .benchmarks(vec![bench(joined, metrics())])
        .build();
    let s = score(&gpu, &Config::default(), now()).score;
    assert_eq!((s.uptime.evidence_bps, s.uptime.value_bps), (2_000, 9_200));
    assert_eq!((s.jobs.evidence_bps, s.jobs.value_bps), (3_000, 9_300));
    assert_eq!(s.benchmark.value_bps, 9_000);
    assert_eq!(s.combined_bps, 9_190);
    assert_eq!(s.uptime.reasons, vec![limited(2_000)]);
    assert_eq!(s.jobs.reasons, vec![limited(3_000)]);
    assert_eq!(s.benchmark.reasons, vec![limited(0)]);
}

#[test]
fn a_new_gpu_never_online_is_not_zero() {
    // Joined 10 days ago, never online: measured 0, evidence 10/30 = 3333.33.. -> 3333.
    // (0*3333 + 9000*6667)/10000 = 6000.3 -> 6000.
    // combined: (5000*6000 + 3000*9000 + 2000*9000)/10000 = (30M + 27M + 18M)/10000 = 7500.
    let gpu = Gpu::new("g", now() - 10 * DAY, schedule("UTC", "24/7")).build();
    let s = score(&gpu, &Config::default(), now()).score;
    assert_eq!(
        (s.uptime.measured.map(|r| r.bps()), s.uptime.evidence_bps),
        (Some(0), 3_333)
    );
    assert_eq!(s.uptime.value_bps, 6_000);
    assert_eq!(s.combined_bps, 7_500);
    assert_eq!(
        s.uptime.reasons[0],
        Reason::OfflineInSchedule {
            day: crate::support::date(2026, 11, 26),
            offline_ms: DAY
        }
    );
    // Ten UTC days offline; the prior raised the value above the measurement, so no
    // LimitedHistory reason.
    assert_eq!(s.uptime.reasons.len(), 10);
    assert!(
        !s.uptime
            .reasons
            .iter()
            .any(|r| matches!(r, Reason::LimitedHistory { .. }))
    );
}

#[test]
fn after_the_window_the_prior_is_gone() {
    // Joined exactly 30 days ago, online except 7 h 12 min: 712.8/720 h = 0.99 -> 9900, evidence full.
    let joined = now() - 30 * DAY;
    let gap = at("2026-11-20T00:00:00Z");
    let gpu = Gpu::new("g", joined, schedule("UTC", "24/7"))
        .online(vec![
            iv(joined, gap),
            iv(gap + 7 * 3_600_000 + 12 * 60_000, now()),
        ])
        .build();
    let s = score(&gpu, &Config::default(), now()).score;
    assert_eq!((s.uptime.evidence_bps, s.uptime.value_bps), (10_000, 9_900));
}
