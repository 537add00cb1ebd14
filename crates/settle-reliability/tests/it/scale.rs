//! The engine's size per GPU: 288 reports a day over the 60 days a trend needs.

use settle_reliability::{Config, Interval, score, trend};

use crate::support::{DAY, MIN, always_gpu, at, iv};

#[test]
fn sixty_days_of_five_minute_reports() {
    // Reports [t, t + 4 min) every 5 min for 60 days (17 280 intervals, shuffled by
    // reversing), 1 min gaps under the grace. The reports starting 2 Dec 10:00 to 10:25Z are
    // missing: the gap runs from 09:59 (end of the 09:55 report) to 10:30 = 31 min.
    // Uptime over 30 days: (43 200 - 31) / 43 200 min = 0.99928.. -> 9993.
    let now = at("2026-12-06T00:00:00Z");
    let (gap_from, gap_to) = (at("2026-12-02T10:00:00Z"), at("2026-12-02T10:30:00Z"));
    let mut online: Vec<Interval> = (0..60 * 288)
        .map(|k| now - 60 * DAY + k * 5 * MIN)
        .filter(|&t| !(gap_from..gap_to).contains(&t))
        .map(|t| iv(t, t + 4 * MIN))
        .collect();
    assert_eq!(online.len(), 60 * 288 - 6);
    online.reverse();
    let gpu = always_gpu("g").online(online).build();
    let s = score(&gpu, &Config::default(), now).score;
    assert_eq!(
        s.uptime.measured.map(|r| r.numerator),
        Some((43_169 * MIN) as u64)
    );
    assert_eq!(s.uptime.value_bps, 9_993);
    // The trend: the gap is in every window ending after 2 Dec 10:30Z, i.e. the last 4 points.
    let points = trend(&gpu, &Config::default(), now);
    let uptimes: Vec<u16> = points.iter().map(|p| p.score.uptime.value_bps).collect();
    let mut want = vec![10_000; 26];
    want.extend([9_993; 4]);
    assert_eq!(uptimes, want);
}
