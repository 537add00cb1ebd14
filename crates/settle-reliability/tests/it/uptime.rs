//! Uptime: online time inside the schedule, maintenance, merging, the grace buffer, and the
//! reasons per local day.

use settle_reliability::{Config, Ratio, Reason, render_en, score};

use crate::support::{
    DAY, Gpu, HOUR, MIN, always_gpu, at, config_window, date, iv, ivs, maintenance, schedule,
};

#[test]
fn berlin_schedule_on_the_spring_forward_day() {
    // Daily 09:00-18:00 Europe/Berlin, window = the UTC day 2026-03-29.
    // Scheduled: 09:00 CEST = 07:00Z .. 18:00 CEST = 16:00Z = 9 h (DST day).
    // Online 07:00Z..15:00Z = 8 h. Uptime 8/9 = 0.8888.. -> 8889 bps.
    let gpu = Gpu::new(
        "g",
        at("2026-01-01T00:00:00Z"),
        schedule("Europe/Berlin", "daily 09:00-18:00"),
    )
    .online(ivs(&[("2026-03-29T06:00:00Z", "2026-03-29T15:00:00Z")]))
    .build();
    let s = score(&gpu, &config_window(DAY), at("2026-03-30T00:00:00Z")).score;
    assert_eq!(
        s.uptime.measured,
        Some(Ratio {
            numerator: (8 * HOUR) as u64,
            denominator: (9 * HOUR) as u64
        })
    );
    assert_eq!(s.uptime.value_bps, 8_889);
    assert_eq!(s.uptime.evidence_bps, 10_000);
    let offline = Reason::OfflineInSchedule {
        day: date(2026, 3, 29),
        offline_ms: HOUR,
    };
    assert_eq!(s.uptime.reasons, vec![offline]);
}

#[test]
fn night_window_offline_split_by_local_day() {
    // Fri 22:00-06:00 Europe/Berlin on Fri 4 Dec 2026 (CET, UTC+1): 21:00Z .. Sat 05:00Z = 8 h.
    // Offline 22:30Z..23:30Z = 23:30..00:30 local: 30 min on 4 Dec, 30 min on 5 Dec.
    // Uptime 7/8 = 8750.
    let gpu = Gpu::new(
        "g",
        at("2026-01-01T00:00:00Z"),
        schedule("Europe/Berlin", "Fri 22:00-06:00"),
    )
    .online(ivs(&[
        ("2026-12-04T12:00:00Z", "2026-12-04T22:30:00Z"),
        ("2026-12-04T23:30:00Z", "2026-12-05T12:00:00Z"),
    ]))
    .build();
    let s = score(&gpu, &config_window(DAY), at("2026-12-05T12:00:00Z")).score;
    assert_eq!(s.uptime.value_bps, 8_750);
    let want = vec![
        Reason::OfflineInSchedule {
            day: date(2026, 12, 4),
            offline_ms: 30 * MIN,
        },
        Reason::OfflineInSchedule {
            day: date(2026, 12, 5),
            offline_ms: 30 * MIN,
        },
    ];
    assert_eq!(s.uptime.reasons, want);
    assert_eq!(
        render_en(&s.uptime.reasons[0]),
        "offline 30 min inside your schedule on 4 Dec"
    );
}

/// 24/7 UTC, online all of 2 Dec except 10:00-12:00, with a maintenance window
/// 10:00-12:00 announced at `announced`; score at 3 Dec 00:00 over one day.
fn with_maintenance(announced: &str) -> settle_reliability::Score {
    let gpu = always_gpu("g")
        .online(ivs(&[
            ("2026-12-01T00:00:00Z", "2026-12-02T10:00:00Z"),
            ("2026-12-02T12:00:00Z", "2026-12-03T00:00:00Z"),
        ]))
        .maintenance(vec![maintenance(
            at(announced),
            at("2026-12-02T10:00:00Z"),
            at("2026-12-02T12:00:00Z"),
        )])
        .build();
    score(&gpu, &config_window(DAY), at("2026-12-03T00:00:00Z")).score
}

#[test]
fn maintenance_announced_in_time_is_excluded() {
    // Announced 25 h ahead (>= 24 h): scheduled 24 h - 2 h = 22 h, online 22 h -> 10000.
    let s = with_maintenance("2026-12-01T09:00:00Z");
    assert_eq!(
        s.uptime.measured,
        Some(Ratio {
            numerator: (22 * HOUR) as u64,
            denominator: (22 * HOUR) as u64
        })
    );
    assert_eq!(s.uptime.value_bps, 10_000);
    assert_eq!(s.uptime.reasons, vec![]);
    // Exactly 24 h ahead is in time.
    assert_eq!(
        with_maintenance("2026-12-01T10:00:00Z").uptime.value_bps,
        10_000
    );
}

#[test]
fn maintenance_announced_late_counts() {
    // Announced 23 h ahead (< 24 h): scheduled 24 h, online 22 h: 22/24 = 0.91666.. -> 9167.
    let s = with_maintenance("2026-12-01T11:00:00Z");
    assert_eq!(s.uptime.value_bps, 9_167);
    let want = vec![
        Reason::OfflineInSchedule {
            day: date(2026, 12, 2),
            offline_ms: 2 * HOUR,
        },
        Reason::MaintenanceAnnouncedLate {
            start_ms: at("2026-12-02T10:00:00Z"),
            end_ms: at("2026-12-02T12:00:00Z"),
            notice_ms: 23 * HOUR,
            notice_min_ms: 24 * HOUR,
            offline_ms: 2 * HOUR,
        },
    ];
    assert_eq!(s.uptime.reasons, want);
    assert_eq!(
        render_en(&s.uptime.reasons[1]),
        "maintenance 2026-12-02 10:00 UTC to 2026-12-02 12:00 UTC was announced only 23 h ahead \
         (24 h needed), so 2 h offline in it counted"
    );
    // Announced after it started: counts the same.
    assert_eq!(
        with_maintenance("2026-12-02T10:30:00Z").uptime.value_bps,
        9_167
    );
    // Announced after `now`: not known yet, counts the same.
    assert_eq!(
        with_maintenance("2026-12-03T06:00:00Z").uptime.value_bps,
        9_167
    );
}

#[test]
fn overlapping_and_repeated_intervals_merge() {
    // The agent reports [00:00,10:00), [05:00,12:00) twice, and [12:00,24:00) touching it.
    // Merged: one interval [00:00, 24:00): 24 h online of 24 h, even without grace.
    let cfg = config_window(DAY).with_grace_ms(0).unwrap();
    let gpu = always_gpu("g")
        .online(ivs(&[
            ("2026-12-02T05:00:00Z", "2026-12-02T12:00:00Z"),
            ("2026-12-02T00:00:00Z", "2026-12-02T10:00:00Z"),
            ("2026-12-02T05:00:00Z", "2026-12-02T12:00:00Z"),
            ("2026-12-02T12:00:00Z", "2026-12-03T00:00:00Z"),
        ]))
        .build();
    assert_eq!(
        gpu.online(),
        &[iv(at("2026-12-02T00:00:00Z"), at("2026-12-03T00:00:00Z"))]
    );
    let s = score(&gpu, &cfg, at("2026-12-03T00:00:00Z")).score;
    assert_eq!(
        s.uptime.measured.map(|r| r.numerator),
        Some((24 * HOUR) as u64)
    );
    assert_eq!(s.uptime.value_bps, 10_000);
}

/// 24/7 UTC on 2 Dec with gaps of 4 min (10:00), 5 min (12:00) and 10 min (14:00), the
/// last interval ending `tail_gap_ms` before `now` = 3 Dec 00:00.
fn gaps_gpu(tail_gap_ms: i64) -> settle_reliability::GpuHistory {
    let end = at("2026-12-03T00:00:00Z") - tail_gap_ms;
    always_gpu("g")
        .online(vec![
            iv(at("2026-12-01T23:00:00Z"), at("2026-12-02T10:00:00Z")),
            iv(at("2026-12-02T10:04:00Z"), at("2026-12-02T12:00:00Z")),
            iv(at("2026-12-02T12:05:00Z"), at("2026-12-02T14:00:00Z")),
            iv(at("2026-12-02T14:10:00Z"), end),
        ])
        .build()
}

#[test]
fn grace_buffer() {
    let now = at("2026-12-03T00:00:00Z");
    let cfg = config_window(DAY); // grace 5 min
    // 4 min gap < 5 min: online. 5 min gap is not shorter: offline. 10 min: offline.
    // Offline 15 min of 1440: 1425/1440 = 0.989583.. -> 9896.
    let s = score(&gaps_gpu(0), &cfg, now).score;
    assert_eq!(
        s.uptime.measured.map(|r| r.numerator),
        Some((1425 * MIN) as u64)
    );
    assert_eq!(s.uptime.value_bps, 9_896);
    assert_eq!(
        s.uptime.reasons,
        vec![Reason::OfflineInSchedule {
            day: date(2026, 12, 2),
            offline_ms: 15 * MIN
        }]
    );
    // The report lags 3 min behind `now` (< grace): counted online, same 9896.
    assert_eq!(
        score(&gaps_gpu(3 * MIN), &cfg, now).score.uptime.value_bps,
        9_896
    );
    // 5 min behind: offline too: 20 min off, 1420/1440 = 0.98611.. -> 9861.
    assert_eq!(
        score(&gaps_gpu(5 * MIN), &cfg, now).score.uptime.value_bps,
        9_861
    );
    // Without grace the 4 min gap counts: 19 min off, 1421/1440 = 0.986805.. -> 9868.
    let no_grace = cfg.with_grace_ms(0).unwrap();
    assert_eq!(
        score(&gaps_gpu(0), &no_grace, now).score.uptime.value_bps,
        9_868
    );
}

#[test]
fn a_restart_does_not_drop_a_month() {
    // 30 days 24/7 online with one 2 min restart: 100 % with the default config.
    let now = at("2026-12-06T00:00:00Z");
    let restart = at("2026-11-20T03:00:00Z");
    let gpu = always_gpu("g")
        .online(vec![
            iv(now - 31 * DAY, restart),
            iv(restart + 2 * MIN, now),
        ])
        .build();
    let s = score(&gpu, &Config::default(), now).score;
    assert_eq!((s.uptime.value_bps, s.uptime.reasons.len()), (10_000, 0));
}
