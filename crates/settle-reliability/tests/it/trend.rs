//! The 30-point daily trend.

use settle_reliability::InterruptionCause::{Customer, Provider};
use settle_reliability::{BenchmarkMetrics, Config, Interval, Score, TREND_POINTS, score, trend};

use crate::support::{
    DAY, Gpu, HOUR, MIN, always_gpu, at, bench, completed, interrupted, iv, maintenance, metrics,
    schedule,
};

#[test]
fn an_outage_and_an_interruption_enter_the_trend() {
    // now = 6 Dec 00:00Z; point i (0..30) ends at now - (29 - i) days, window 30 days.
    // Outage 20 Nov 00:00-12:00Z = [now - 16 d, now - 15.5 d): inside the windows that end
    // at or after now - 15 d, i >= 14 (point 13 ends exactly at its start).
    // Provider interruption at now - 20 d: inside the windows ending after it, i >= 10.
    let now = at("2026-12-06T00:00:00Z");
    let outage = at("2026-11-20T00:00:00Z");
    let gpu = always_gpu("g")
        .online(vec![
            iv(now - 70 * DAY, outage),
            iv(outage + 12 * HOUR, now),
        ])
        .jobs(vec![interrupted(now - 20 * DAY, Provider)])
        .build();
    let points = trend(&gpu, &Config::default(), now);
    assert_eq!(points.len(), TREND_POINTS);
    assert_eq!((points[0].at_ms, points[29].at_ms), (now - 29 * DAY, now));
    // uptime: 10000 before, then (720 - 12) / 720 = 0.98333.. -> 9833.
    // jobs: 9000 (prior) before, then measured 0 with evidence 1/10: 9000 * 9000 / 10000 = 8100.
    // benchmark: no benchmark, 9000.
    // combined  i 0..=9:   (5000*10000 + 3000*9000 + 2000*9000)/10000 = 9500
    //           i 10..=13: (50.0M + 24.3M + 18.0M)/10000 = 9230
    //           i 14..=29: (5000*9833 = 49.165M + 24.3M + 18.0M)/10000 = 9146.5 -> even 9146.
    let combined: Vec<u16> = points.iter().map(|p| p.score.combined_bps).collect();
    let mut want = vec![9_500; 10];
    want.extend([9_230; 4]);
    want.extend([9_146; 16]);
    assert_eq!(combined, want);
    assert_eq!(points[14].score.uptime.value_bps, 9_833);
    assert_eq!(points[10].score.jobs.value_bps, 8_100);
    assert!(points.iter().all(|p| p.score.uptime.reasons.is_empty()));
}

fn without_reasons(mut s: Score) -> Score {
    s.uptime.reasons.clear();
    s.jobs.reasons.clear();
    s.benchmark.reasons.clear();
    s
}

/// Agent-style 5-minute reports, each 4 min long (1 min gaps, under the grace), from `from`
/// to `to`, except the ones starting inside `outages`.
fn reports(from: i64, to: i64, outages: &[Interval]) -> Vec<Interval> {
    (0..)
        .map(|k| from + k * 5 * MIN)
        .take_while(|&t| t < to)
        .filter(|&t| !outages.iter().any(|o| o.contains(t)))
        .map(|t| iv(t, t + 4 * MIN))
        .collect()
}

#[test]
fn each_point_equals_the_score_at_its_instant() {
    // A Berlin GPU across the spring-forward change, with outages, maintenance in time and
    // late, jobs of every cause and benchmarks: the one-pass trend equals 30 full scores.
    let now = at("2026-04-10T12:00:00Z");
    let from = now - 70 * DAY;
    let outages = vec![
        iv(at("2026-03-16T09:00:00Z"), at("2026-03-16T11:30:00Z")),
        iv(at("2026-03-29T07:00:00Z"), at("2026-03-29T08:00:00Z")),
        iv(at("2026-04-02T15:00:00Z"), at("2026-04-03T09:00:00Z")),
    ];
    let mut jobs: Vec<_> = (0..40).map(|i| completed(now - i * 37 * HOUR)).collect();
    jobs.extend((1..16).map(|i| interrupted(now - i * 101 * HOUR, Provider)));
    jobs.extend((1..4).map(|i| interrupted(now - i * 77 * HOUR, Customer)));
    let weaker = BenchmarkMetrics {
        memory_gb_s: 3_000,
        ..metrics()
    };
    let gpu = Gpu::new(
        "g",
        now - 45 * DAY,
        schedule("Europe/Berlin", "Mon-Fri 09:00-18:00; Sat 22:00-06:00"),
    )
    .online(reports(from, now, &outages))
    .maintenance(vec![
        maintenance(
            at("2026-03-01T00:00:00Z"),
            at("2026-03-20T08:00:00Z"),
            at("2026-03-20T14:00:00Z"),
        ),
        maintenance(
            at("2026-04-02T14:00:00Z"),
            at("2026-04-02T15:00:00Z"),
            at("2026-04-02T18:00:00Z"),
        ),
    ])
    .jobs(jobs)
    .benchmarks(vec![
        bench(from, metrics()),
        bench(at("2026-03-25T00:00:00Z"), weaker),
    ])
    .build();
    let cfg = Config::default();
    let points = trend(&gpu, &cfg, now);
    for p in &points {
        assert_eq!(
            p.score,
            without_reasons(score(&gpu, &cfg, p.at_ms).score),
            "point at {}",
            p.at_ms
        );
    }
    // Sanity: the GPU joined inside the early windows (partial evidence), and the trend moves.
    assert!(points[0].score.uptime.evidence_bps < 10_000);
    assert_eq!(points[29].score.uptime.evidence_bps, 10_000);
    assert!(
        points.first().unwrap().score.combined_bps != points.last().unwrap().score.combined_bps
    );
}
