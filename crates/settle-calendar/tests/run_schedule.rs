//! Run dates, run keys and their order (SPEC §5).

use chrono::{NaiveDate, NaiveDateTime};
use settle_calendar::{
    Calendar, CalendarError, RunKey, ScheduledRun, monthly_run_date, next_runs, runs_on,
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

/// First business day of each month, worked out by hand from the weekday of the 1st
/// and the holidays of the first days of the month (1 Jan, 1 May, Easter, Labor Day).
const MONTHLY_RUN_DATES: [(i32, u32, &str); 36] = [
    (2026, 1, "2026-01-02"),  // Thu 1st New Year's Day
    (2026, 2, "2026-02-02"),  // Sun 1st
    (2026, 3, "2026-03-02"),  // Sun 1st
    (2026, 4, "2026-04-01"),  // Wed (Good Friday is the 3rd)
    (2026, 5, "2026-05-04"),  // Fri 1st Labour Day (TARGET2)
    (2026, 6, "2026-06-01"),  // Mon
    (2026, 7, "2026-07-01"),  // Wed
    (2026, 8, "2026-08-03"),  // Sat 1st
    (2026, 9, "2026-09-01"),  // Tue (Labor Day is the 7th)
    (2026, 10, "2026-10-01"), // Thu
    (2026, 11, "2026-11-02"), // Sun 1st
    (2026, 12, "2026-12-01"), // Tue
    (2027, 1, "2027-01-04"),  // Fri 1st New Year's Day, then the weekend
    (2027, 2, "2027-02-01"),  // Mon
    (2027, 3, "2027-03-01"),  // Mon
    (2027, 4, "2027-04-01"),  // Thu (Easter was in March)
    (2027, 5, "2027-05-03"),  // Sat 1st
    (2027, 6, "2027-06-01"),  // Tue
    (2027, 7, "2027-07-01"),  // Thu
    (2027, 8, "2027-08-02"),  // Sun 1st
    (2027, 9, "2027-09-01"),  // Wed (Labor Day is the 6th)
    (2027, 10, "2027-10-01"), // Fri
    (2027, 11, "2027-11-01"), // Mon
    (2027, 12, "2027-12-01"), // Wed
    (2028, 1, "2028-01-03"),  // Sat 1st (not observed by the Fed; TARGET2 closed anyway)
    (2028, 2, "2028-02-01"),  // Tue
    (2028, 3, "2028-03-01"),  // Wed
    (2028, 4, "2028-04-03"),  // Sat 1st
    (2028, 5, "2028-05-02"),  // Mon 1st Labour Day (TARGET2)
    (2028, 6, "2028-06-01"),  // Thu
    (2028, 7, "2028-07-03"),  // Sat 1st
    (2028, 8, "2028-08-01"),  // Tue
    (2028, 9, "2028-09-01"),  // Fri (Labor Day is the 4th)
    (2028, 10, "2028-10-02"), // Sun 1st
    (2028, 11, "2028-11-01"), // Wed
    (2028, 12, "2028-12-01"), // Fri
];

#[test]
fn monthly_run_dates_2026_to_2028() {
    let cal = Calendar::platform_default();
    for (year, month, expected) in MONTHLY_RUN_DATES {
        assert_eq!(
            monthly_run_date(&cal, year, month),
            Ok(date(expected)),
            "{year}-{month:02}"
        );
        assert_eq!(monthly(year, month).run_date(&cal), Ok(date(expected)));
    }
}

#[test]
fn monthly_run_date_errors() {
    let cal = Calendar::platform_default();
    assert_eq!(
        monthly_run_date(&cal, 2026, 13),
        Err(CalendarError::InvalidMonth { month: 13 })
    );
    assert_eq!(
        monthly_run_date(&cal, 2026, 0),
        Err(CalendarError::InvalidMonth { month: 0 })
    );
    assert_eq!(
        monthly_run_date(&cal, 2041, 1),
        Err(CalendarError::NotCovered { year: 2041 })
    );
    // A (silly) calendar closing every weekday of February 2026.
    let mut text = String::from("covers: 2026-2026\n");
    for day in 1..=28 {
        text.push_str(&format!("2026-02-{day:02}  Closed\n"));
    }
    let closed = Calendar::parse("closed", &text).unwrap();
    assert_eq!(
        monthly_run_date(&closed, 2026, 2),
        Err(CalendarError::NoBusinessDay {
            year: 2026,
            month: 2
        })
    );
}

#[test]
fn shared_run_dates_put_the_weekly_run_first() {
    let cal = Calendar::platform_default();
    for (monday, year, month) in [("2026-11-02", 2026, 11), ("2027-01-04", 2027, 1)] {
        assert_eq!(weekly(monday).run_date(&cal), Ok(date(monday)));
        assert_eq!(monthly(year, month).run_date(&cal), Ok(date(monday)));
        assert_eq!(
            runs_on(&cal, date(monday)),
            Ok(vec![weekly(monday), monthly(year, month)])
        );
        let weekly_run = weekly(monday).scheduled(&cal).unwrap();
        let monthly_run = monthly(year, month).scheduled(&cal).unwrap();
        assert!(weekly_run < monthly_run, "{monday}");
        let mut runs = vec![monthly_run, weekly_run];
        runs.sort();
        assert_eq!(runs, vec![weekly_run, monthly_run]);
    }
    // The calendar-free order of the keys agrees when no holiday moves the run.
    assert!(weekly("2026-11-02") < monthly(2026, 11));
}

#[test]
fn scheduled_runs_sort_by_run_date() {
    let cal = Calendar::platform_default();
    let mut runs: Vec<ScheduledRun> = [
        monthly(2027, 1),
        weekly("2027-01-11"),
        weekly("2027-01-04"),
        weekly("2026-12-28"),
        monthly(2026, 12),
    ]
    .iter()
    .map(|key| key.scheduled(&cal).unwrap())
    .collect();
    runs.sort();
    let keys: Vec<RunKey> = runs.iter().map(|run| run.key).collect();
    assert_eq!(
        keys,
        vec![
            monthly(2026, 12),
            weekly("2026-12-28"),
            weekly("2027-01-04"),
            monthly(2027, 1),
            weekly("2027-01-11"),
        ]
    );
}

#[test]
fn run_key_basics() {
    let w = weekly("2026-11-23");
    assert_eq!(w.kind(), "weekly");
    assert_eq!(w.key_string(), "2026-11-23");
    assert_eq!(w.cutoff(), Ok(at("2026-11-23 00:00:00")));
    assert_eq!(w.to_string(), "weekly 2026-11-23");

    let m = monthly(2026, 11);
    assert_eq!(m.kind(), "monthly");
    assert_eq!(m.key_string(), "2026-11");
    assert_eq!(m.cutoff(), Ok(at("2026-11-01 00:00:00")));
    assert_eq!(m.to_string(), "monthly 2026-11");

    assert_eq!(RunKey::parse("weekly", "2026-11-23"), Ok(w));
    assert_eq!(RunKey::parse("monthly", "2026-11"), Ok(m));
    assert_eq!(RunKey::week_of(date("2026-11-29")), Ok(w));
    assert_eq!(RunKey::week_of(date("2026-11-23")), Ok(w));
}

#[test]
fn weekly_run_on_a_holiday_monday_still_runs_that_monday() {
    let cal = Calendar::platform_default();
    // Easter Monday 2026 (TARGET2) and Independence Day observed 2027.
    for monday in ["2026-04-06", "2027-07-05"] {
        assert_eq!(weekly(monday).run_date(&cal), Ok(date(monday)));
        assert_eq!(runs_on(&cal, date(monday)), Ok(vec![weekly(monday)]));
    }
}

#[test]
fn invalid_run_keys_are_errors() {
    let cal = Calendar::platform_default();
    assert_eq!(
        RunKey::weekly(date("2026-11-24")),
        Err(CalendarError::NotMonday {
            date: date("2026-11-24")
        })
    );
    assert_eq!(
        RunKey::monthly(2026, 13),
        Err(CalendarError::InvalidMonth { month: 13 })
    );
    let bad_weekly = RunKey::Weekly {
        monday: date("2026-11-24"),
    };
    assert_eq!(bad_weekly.cutoff().unwrap_err().code(), "not_monday");
    assert_eq!(bad_weekly.run_date(&cal).unwrap_err().code(), "not_monday");
    let bad_monthly = RunKey::Monthly {
        year: 2026,
        month: 0,
    };
    assert_eq!(bad_monthly.cutoff().unwrap_err().code(), "invalid_month");
    assert_eq!(bad_monthly.key_string(), "2026-00");
    // A Tuesday and month 13 are well-formed keys of an impossible run; the rest are not
    // keys at all.
    for (kind, key, code) in [
        ("weekly", "2026-11-24", "not_monday"),
        ("weekly", "2026-11", "invalid_run_key"),
        ("weekly", "26-11-23", "invalid_run_key"),
        ("monthly", "2026-13", "invalid_month"),
        ("monthly", "2026-1", "invalid_run_key"),
        ("monthly", "2026-11-23", "invalid_run_key"),
        ("monthly", "+202-11", "invalid_run_key"),
        ("monthly", "2026-é", "invalid_run_key"),
        ("daily", "2026-11-23", "invalid_run_key"),
    ] {
        let Err(err) = RunKey::parse(kind, key) else {
            panic!("{kind} {key} accepted");
        };
        assert_eq!(err.code(), code, "{kind} {key}: {err}");
    }
    assert_eq!(
        RunKey::parse("daily", "x").unwrap_err().code(),
        "invalid_run_key"
    );
}

#[test]
fn next_runs_lists_the_coming_runs_in_order() {
    let cal = Calendar::platform_default();
    let runs = next_runs(&cal, at("2026-12-28 00:00:00"), 5).unwrap();
    assert_eq!(
        runs.iter().map(|r| (r.key, r.run_date)).collect::<Vec<_>>(),
        vec![
            (weekly("2026-12-28"), date("2026-12-28")),
            (weekly("2027-01-04"), date("2027-01-04")),
            (monthly(2027, 1), date("2027-01-04")),
            (weekly("2027-01-11"), date("2027-01-11")),
            (weekly("2027-01-18"), date("2027-01-18")),
        ]
    );
    // A run that has started (its date at 00:00 is before `from`) is not "coming".
    let runs = next_runs(&cal, at("2026-12-28 00:00:01"), 1).unwrap();
    assert_eq!(runs[0].key, weekly("2027-01-04"));

    let runs = next_runs(&cal, at("2026-10-30 12:00:00"), 3).unwrap();
    assert_eq!(
        runs.iter().map(|r| r.key).collect::<Vec<_>>(),
        vec![
            weekly("2026-11-02"),
            monthly(2026, 11),
            weekly("2026-11-09")
        ]
    );
    assert_eq!(next_runs(&cal, at("2026-10-30 12:00:00"), 0), Ok(vec![]));
    assert_eq!(
        next_runs(&cal, at("2040-12-01 00:00:00"), 100),
        Err(CalendarError::NotCovered { year: 2041 })
    );
}

/// A monthly run whose 1st falls on a Saturday runs on the Monday after, the day of that
/// week's weekly run, and sorts after it; on a Sunday 1st likewise (a surviving mutant;
/// ops/MUTANTS.md).
#[test]
fn a_monthly_run_of_a_weekend_first_sorts_after_the_weekly_run_of_its_monday() {
    // 2026-08-01 is a Saturday, 2026-03-01 a Sunday; both months run on the Monday after.
    assert!(weekly("2026-08-03") < monthly(2026, 8));
    assert!(monthly(2026, 8) < weekly("2026-08-10"));
    assert!(weekly("2026-07-27") < monthly(2026, 8));
    assert!(weekly("2026-03-02") < monthly(2026, 3));
    assert!(monthly(2026, 3) < weekly("2026-03-09"));
    let mut keys = vec![weekly("2026-08-10"), monthly(2026, 8), weekly("2026-08-03")];
    keys.sort();
    assert_eq!(
        keys,
        [weekly("2026-08-03"), monthly(2026, 8), weekly("2026-08-10")]
    );
}
