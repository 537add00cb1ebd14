//! Weekly schedules in IANA zones: DST changes, midnight crossing, gaps and repeated hours,
//! versions, parse errors.

use settle_reliability::{Interval, ScheduleHistory, ScheduleVersion};

use crate::support::{HOUR, MIN, at, iv, ivs, schedule};

fn lengths(intervals: &[Interval]) -> Vec<i64> {
    intervals.iter().map(Interval::len_ms).collect()
}

#[test]
fn berlin_spring_forward_nine_real_hours() {
    // Europe/Berlin, 2026-03-29 (Sunday): 02:00 CET becomes 03:00 CEST.
    // Sat 28: 09:00 CET = 08:00Z .. 18:00 CET = 17:00Z.
    // Sun 29: 09:00 CEST = 07:00Z .. 18:00 CEST = 16:00Z (9 real hours).
    // Mon 30: 07:00Z .. 16:00Z.
    let s = schedule("Europe/Berlin", "daily 09:00-18:00");
    let got = s.expand(at("2026-03-28T00:00:00Z"), at("2026-03-31T00:00:00Z"));
    let want = ivs(&[
        ("2026-03-28T08:00:00Z", "2026-03-28T17:00:00Z"),
        ("2026-03-29T07:00:00Z", "2026-03-29T16:00:00Z"),
        ("2026-03-30T07:00:00Z", "2026-03-30T16:00:00Z"),
    ]);
    assert_eq!(got, want);
    assert_eq!(lengths(&got), vec![9 * HOUR; 3]);
}

#[test]
fn berlin_fall_back_nine_real_hours() {
    // 2026-10-25 (Sunday): 03:00 CEST becomes 02:00 CET.
    // Sat 24: 09:00 CEST = 07:00Z .. 16:00Z; Sun 25: 09:00 CET = 08:00Z .. 17:00Z.
    let s = schedule("Europe/Berlin", "Sat,Sun 09:00-18:00");
    let got = s.expand(at("2026-10-24T00:00:00Z"), at("2026-10-26T00:00:00Z"));
    let want = ivs(&[
        ("2026-10-24T07:00:00Z", "2026-10-24T16:00:00Z"),
        ("2026-10-25T08:00:00Z", "2026-10-25T17:00:00Z"),
    ]);
    assert_eq!(got, want);
}

#[test]
fn night_window_across_the_change() {
    // Sat 22:00 to Sun 06:00 in Berlin.
    // March: 22:00 CET = 21:00Z Sat .. 06:00 CEST = 04:00Z Sun: 7 real hours (8 on the clock, one skipped).
    // October: 22:00 CEST = 20:00Z Sat .. 06:00 CET = 05:00Z Sun: 9 real hours (one repeated).
    let s = schedule("Europe/Berlin", "Sat 22:00-06:00");
    let march = s.expand(at("2026-03-28T00:00:00Z"), at("2026-03-30T00:00:00Z"));
    assert_eq!(
        march,
        ivs(&[("2026-03-28T21:00:00Z", "2026-03-29T04:00:00Z")])
    );
    let october = s.expand(at("2026-10-24T00:00:00Z"), at("2026-10-26T00:00:00Z"));
    assert_eq!(
        october,
        ivs(&[("2026-10-24T20:00:00Z", "2026-10-25T05:00:00Z")])
    );
    assert_eq!(lengths(&march), vec![7 * HOUR]);
    assert_eq!(lengths(&october), vec![9 * HOUR]);
}

#[test]
fn nonexistent_local_time_starts_at_the_jump() {
    // 02:30 does not exist on 2026-03-29 in Berlin: the window starts at the jump,
    // 03:00 CEST = 01:00Z; 05:00 CEST = 03:00Z: 2 real hours.
    let s = schedule("Europe/Berlin", "Sun 02:30-05:00");
    let got = s.expand(at("2026-03-29T00:00:00Z"), at("2026-03-30T00:00:00Z"));
    assert_eq!(
        got,
        ivs(&[("2026-03-29T01:00:00Z", "2026-03-29T03:00:00Z")])
    );
    // 02:00-02:30 lies wholly in the gap: both ends map to 01:00Z, empty that day.
    let s = schedule("Europe/Berlin", "Sun 02:00-02:30");
    assert_eq!(
        s.expand(at("2026-03-29T00:00:00Z"), at("2026-03-30T00:00:00Z")),
        vec![]
    );
    // A week later it is half an hour again: 02:00 CEST = 00:00Z .. 00:30Z.
    let got = s.expand(at("2026-04-05T00:00:00Z"), at("2026-04-06T00:00:00Z"));
    assert_eq!(
        got,
        ivs(&[("2026-04-05T00:00:00Z", "2026-04-05T00:30:00Z")])
    );
}

#[test]
fn ambiguous_local_time_is_its_first_occurrence() {
    // 02:30 occurs twice on 2026-10-25 in Berlin; the first is 02:30 CEST = 00:30Z.
    // 02:30-04:00: 00:30Z .. 04:00 CET = 03:00Z: 2 h 30 min (through the repeated hour).
    let s = schedule("Europe/Berlin", "Sun 02:30-04:00");
    let got = s.expand(at("2026-10-25T00:00:00Z"), at("2026-10-26T00:00:00Z"));
    assert_eq!(
        got,
        ivs(&[("2026-10-25T00:30:00Z", "2026-10-25T03:00:00Z")])
    );
    // 01:00-02:30: 01:00 CEST = 23:00Z Sat .. 00:30Z: 1 h 30 min.
    let s = schedule("Europe/Berlin", "Sun 01:00-02:30");
    let got = s.expand(at("2026-10-24T00:00:00Z"), at("2026-10-26T00:00:00Z"));
    assert_eq!(
        got,
        ivs(&[("2026-10-24T23:00:00Z", "2026-10-25T00:30:00Z")])
    );
}

#[test]
fn new_york_both_changes() {
    // America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
    // Sun 1 Mar (EST, -5): 09:00 = 14:00Z .. 18:00 = 23:00Z.
    // Sun 8 Mar (EDT, -4): 09:00 = 13:00Z .. 22:00Z.   Sun 1 Nov (EST): 14:00Z .. 23:00Z.
    let s = schedule("America/New_York", "Sun 09:00-18:00");
    let got = s.expand(at("2026-03-01T00:00:00Z"), at("2026-03-09T00:00:00Z"));
    let want = ivs(&[
        ("2026-03-01T14:00:00Z", "2026-03-01T23:00:00Z"),
        ("2026-03-08T13:00:00Z", "2026-03-08T22:00:00Z"),
    ]);
    assert_eq!(got, want);
    let got = s.expand(at("2026-11-01T00:00:00Z"), at("2026-11-02T00:00:00Z"));
    assert_eq!(
        got,
        ivs(&[("2026-11-01T14:00:00Z", "2026-11-01T23:00:00Z")])
    );
    // Sat 31 Oct 20:00 EDT = 00:00Z Sun .. Sun 08:00 EST = 13:00Z: 13 real hours (12 + 1).
    let s = schedule("America/New_York", "Sat 20:00-08:00");
    let got = s.expand(at("2026-10-31T00:00:00Z"), at("2026-11-02T00:00:00Z"));
    assert_eq!(
        got,
        ivs(&[("2026-11-01T00:00:00Z", "2026-11-01T13:00:00Z")])
    );
    assert_eq!(lengths(&got), vec![13 * HOUR]);
}

#[test]
fn nonexistent_midnight() {
    // America/Santiago: on Sun 2026-09-06 clocks jump from 00:00 (-04) to 01:00 (-03), so
    // local midnight does not exist. Daily 00:00-02:00: from the jump, 01:00 -03 = 04:00Z,
    // to 02:00 -03 = 05:00Z: 1 hour. The day before: 00:00 -04 = 04:00Z .. 06:00Z.
    let s = schedule("America/Santiago", "daily 00:00-02:00");
    let got = s.expand(at("2026-09-05T00:00:00Z"), at("2026-09-07T00:00:00Z"));
    let want = ivs(&[
        ("2026-09-05T04:00:00Z", "2026-09-05T06:00:00Z"),
        ("2026-09-06T04:00:00Z", "2026-09-06T05:00:00Z"),
    ]);
    assert_eq!(got, want);
}

#[test]
fn midnight_crossing_and_whole_days() {
    // Sun 22:00-06:00 UTC crosses into Monday; 24:00 ends at the next midnight; windows
    // that touch are merged.
    let s = schedule("UTC", "Sun 22:00-06:00; Mon 06:00-24:00");
    let got = s.expand(at("2026-12-06T00:00:00Z"), at("2026-12-08T00:00:00Z"));
    assert_eq!(
        got,
        ivs(&[("2026-12-06T22:00:00Z", "2026-12-08T00:00:00Z")])
    );
    // The range clips: from Mon 03:00, the part of Sunday's window after it remains.
    let got = s.expand(at("2026-12-07T03:00:00Z"), at("2026-12-07T04:00:00Z"));
    assert_eq!(
        got,
        ivs(&[("2026-12-07T03:00:00Z", "2026-12-07T04:00:00Z")])
    );
    let whole = schedule("UTC", "Tue 00:00-24:00, 00:00-01:00");
    let got = whole.expand(at("2026-12-08T00:00:00Z"), at("2026-12-10T00:00:00Z"));
    assert_eq!(
        got,
        ivs(&[("2026-12-08T00:00:00Z", "2026-12-09T00:00:00Z")])
    );
}

#[test]
fn several_windows_a_day() {
    // Mon-Fri 09:00-12:00 and 13:00-18:00 UTC on Wed 2 Dec: 3 h + 5 h.
    let s = schedule("UTC", "Mon-Fri 09:00-12:00, 13:00-18:00");
    let got = s.expand(at("2026-12-02T00:00:00Z"), at("2026-12-03T00:00:00Z"));
    assert_eq!(lengths(&got), vec![3 * HOUR, 5 * HOUR]);
    // Saturday: nothing.
    assert_eq!(
        s.expand(at("2026-12-05T00:00:00Z"), at("2026-12-06T00:00:00Z")),
        vec![]
    );
}

#[test]
fn versions_apply_from_their_instant() {
    // 24/7 until Wed 2 Dec 12:00Z, then daily 09:00-18:00 UTC.
    // Wed: 00:00-12:00 (24/7) then 12:00-18:00 (new) = 00:00-18:00.
    // Thu: 09:00-18:00.
    let v1 = ScheduleVersion::new(at("2026-11-01T00:00:00Z"), schedule("UTC", "24/7")).unwrap();
    let v2 = ScheduleVersion::new(
        at("2026-12-02T12:00:00Z"),
        schedule("UTC", "daily 09:00-18:00"),
    )
    .unwrap();
    let history = ScheduleHistory::new(vec![v2, v1]).unwrap();
    assert_eq!(history.joined_ms(), at("2026-11-01T00:00:00Z"));
    let got = history.scheduled(at("2026-12-02T00:00:00Z"), at("2026-12-04T00:00:00Z"));
    let want = ivs(&[
        ("2026-12-02T00:00:00Z", "2026-12-02T18:00:00Z"),
        ("2026-12-03T09:00:00Z", "2026-12-03T18:00:00Z"),
    ]);
    assert_eq!(got, want);
    // Before the first version nothing is scheduled.
    assert_eq!(
        history.scheduled(at("2026-10-01T00:00:00Z"), at("2026-10-02T00:00:00Z")),
        vec![]
    );
}

#[test]
fn same_instant_last_version_wins() {
    let t = at("2026-12-01T00:00:00Z");
    let a = ScheduleVersion::new(t, schedule("UTC", "24/7")).unwrap();
    let b = ScheduleVersion::new(t, schedule("UTC", "daily 10:00-11:00")).unwrap();
    let history = ScheduleHistory::new(vec![a, b]).unwrap();
    assert_eq!(history.versions().len(), 1);
    let got = history.scheduled(t, t + 24 * HOUR);
    assert_eq!(got, vec![iv(t + 10 * HOUR, t + 11 * HOUR)]);
    assert_eq!(got[0].len_ms(), 60 * MIN);
}

#[test]
fn parse_errors_have_codes() {
    use settle_reliability::Schedule;
    let code = |tz: &str, spec: &str| Schedule::parse(tz, spec).unwrap_err().code();
    assert_eq!(code("Europe/Berlinn", "24/7"), "unknown_time_zone");
    assert_eq!(code("UTC", "Mon 25:00-26:00"), "invalid_clock_time");
    assert_eq!(code("UTC", "Mon 9:00-10:00"), "invalid_clock_time");
    assert_eq!(code("UTC", "Mon 09:00-09:00"), "invalid_schedule");
    assert_eq!(code("UTC", "Mon 24:00-09:00"), "invalid_schedule");
    assert_eq!(code("UTC", "Monday 09:00-10:00"), "invalid_schedule");
    assert_eq!(code("UTC", "Mon"), "invalid_schedule");
    assert_eq!(code("UTC", ""), "invalid_schedule");
    assert_eq!(
        ScheduleHistory::new(vec![]).unwrap_err().code(),
        "no_schedule"
    );
    let s = Schedule::parse("Asia/Shanghai", "Fri-Mon 08:00-20:00").unwrap();
    assert_eq!(s.windows().len(), 1);
    assert!(!s.windows()[0].days().contains(chrono::Weekday::Wed));
    assert!(s.windows()[0].days().contains(chrono::Weekday::Sun));
}
