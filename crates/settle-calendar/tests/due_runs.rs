//! Which runs the scheduler must start, including catch-up after downtime.

use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
use settle_calendar::{
    Calendar, CalendarError, DEFAULT_CATCH_UP_WINDOW_DAYS, RunKey, Schedule, due_runs,
};

fn date(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
}

fn at(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap()
}

fn weekly(s: &str) -> RunKey {
    RunKey::weekly(date(s)).unwrap()
}

fn monthly(year: i32, month: u32) -> RunKey {
    RunKey::monthly(year, month).unwrap()
}

fn due(last_checked: Option<&str>, now: &str, window: u32) -> Result<Vec<RunKey>, CalendarError> {
    due_runs(
        &Calendar::platform_default(),
        &Schedule::default(),
        last_checked.map(at),
        at(now),
        window,
    )
}

#[test]
fn default_schedule() {
    let schedule = Schedule::default();
    assert_eq!(
        schedule.fire_time,
        NaiveTime::from_hms_opt(0, 5, 0).unwrap()
    );
    assert_eq!(schedule.cron_expression(), "0 5 0 * * *");
    assert_eq!(
        schedule.fire_instant(date("2026-11-02")),
        at("2026-11-02 00:05:00")
    );
    assert_eq!(DEFAULT_CATCH_UP_WINDOW_DAYS, 35);
    let custom = Schedule::new(NaiveTime::from_hms_milli_opt(6, 30, 15, 999).unwrap());
    assert_eq!(custom.cron_expression(), "15 30 6 * * *");
}

#[test]
fn catch_up_after_20_days_of_downtime_in_date_order() {
    // Last check on Tuesday 2026-10-20 just after the fire; back 20 days later.
    let runs = due(Some("2026-10-20 00:05:30"), "2026-11-09 09:00:00", 35).unwrap();
    assert_eq!(
        runs,
        vec![
            weekly("2026-10-26"),
            weekly("2026-11-02"),
            monthly(2026, 11),
            weekly("2026-11-09"),
        ]
    );
}

#[test]
fn catch_up_across_the_year_end() {
    let runs = due(Some("2026-12-20 10:00:00"), "2027-01-12 00:00:00", 35).unwrap();
    assert_eq!(
        runs,
        vec![
            weekly("2026-12-21"),
            weekly("2026-12-28"),
            weekly("2027-01-04"),
            monthly(2027, 1),
            weekly("2027-01-11"),
        ]
    );
}

#[test]
fn the_window_limits_the_catch_up() {
    let now = "2026-11-09 00:05:00";
    let expected_35 = vec![
        weekly("2026-10-12"),
        weekly("2026-10-19"),
        weekly("2026-10-26"),
        weekly("2026-11-02"),
        monthly(2026, 11),
        weekly("2026-11-09"),
    ];
    // First start: only the window counts (2026-10-05 00:05 exclusive).
    assert_eq!(due(None, now, 35).unwrap(), expected_35);
    // A last check older than the window is clamped to it.
    assert_eq!(
        due(Some("2026-08-01 00:00:00"), now, 35).unwrap(),
        expected_35
    );
    // A 36-day window reaches back to the weekly run of Monday 2026-10-05 ...
    assert_eq!(due(None, now, 36).unwrap()[0], weekly("2026-10-05"));
    // ... and a 40-day window to the monthly run of October (Thu 2026-10-01).
    assert_eq!(due(None, now, 40).unwrap()[0], monthly(2026, 10));
    // The lower bound is exclusive: 7 days back is exactly the fire of 2026-11-02.
    assert_eq!(due(None, now, 7).unwrap(), vec![weekly("2026-11-09")]);
    assert_eq!(
        due(None, now, 8).unwrap(),
        vec![
            weekly("2026-11-02"),
            monthly(2026, 11),
            weekly("2026-11-09")
        ]
    );
    assert_eq!(due(None, now, 0).unwrap(), vec![]);
}

#[test]
fn the_fire_time_is_respected() {
    let last = Some("2026-11-01 12:00:00");
    assert_eq!(due(last, "2026-11-02 00:04:00", 35).unwrap(), vec![]);
    assert_eq!(due(last, "2026-11-02 00:04:59", 35).unwrap(), vec![]);
    assert_eq!(
        due(last, "2026-11-02 00:05:00", 35).unwrap(),
        vec![weekly("2026-11-02"), monthly(2026, 11)]
    );
    // The next check does not return them again.
    assert_eq!(
        due(Some("2026-11-02 00:05:00"), "2026-11-02 00:06:00", 35).unwrap(),
        vec![]
    );

    let cal = Calendar::platform_default();
    let schedule = Schedule::new(NaiveTime::from_hms_opt(6, 30, 0).unwrap());
    let check = |now: &str| {
        due_runs(
            &cal,
            &schedule,
            Some(at("2026-12-01 00:00:00")),
            at(now),
            35,
        )
    };
    assert_eq!(check("2026-12-01 06:29:59").unwrap(), vec![]);
    assert_eq!(
        check("2026-12-01 06:30:00").unwrap(),
        vec![monthly(2026, 12)]
    );
}

#[test]
fn no_runs_on_quiet_days_or_when_the_clock_goes_back() {
    // Tuesday to Friday without a monthly run.
    assert_eq!(
        due(Some("2026-11-10 00:00:00"), "2026-11-13 23:00:00", 35).unwrap(),
        vec![]
    );
    assert_eq!(
        due(Some("2026-11-10 00:00:00"), "2026-11-09 00:00:00", 35).unwrap(),
        vec![]
    );
    assert_eq!(
        due(Some("2026-11-09 00:05:00"), "2026-11-09 00:05:00", 35).unwrap(),
        vec![]
    );
}

#[test]
fn uncovered_years_and_extreme_inputs_are_errors_not_panics() {
    assert_eq!(
        due(Some("2041-01-01 00:00:00"), "2041-01-08 00:00:00", 35),
        Err(CalendarError::NotCovered { year: 2041 })
    );
    let err = due(None, "2026-11-09 00:05:00", u32::MAX).unwrap_err();
    assert!(
        matches!(err.code(), "schedule_error" | "calendar_not_covered"),
        "{err:?}"
    );
    let cal = Calendar::platform_default();
    let schedule = Schedule::default();
    assert_eq!(
        due_runs(&cal, &schedule, None, NaiveDateTime::MAX, 35)
            .unwrap_err()
            .code(),
        "schedule_error"
    );
    assert!(due_runs(&cal, &schedule, None, NaiveDateTime::MIN, 35).is_ok());
}
