//! Business days on the platform default calendar (TARGET2 ∪ US Federal Reserve).

use chrono::NaiveDate;
use settle_calendar::{Calendar, CalendarError};

fn date(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
}

#[test]
fn closed_days_on_the_platform_default_calendar() {
    let cal = Calendar::platform_default();
    for day in [
        "2026-04-03", // Good Friday (TARGET2)
        "2026-04-06", // Easter Monday (TARGET2)
        "2027-03-26", // Good Friday
        "2027-03-29", // Easter Monday
        "2028-04-14", // Good Friday
        "2028-04-17", // Easter Monday
        "2027-07-05", // Independence Day observed (4 July 2027 is a Sunday)
        "2027-01-01", // New Year's Day
    ] {
        assert_eq!(
            cal.is_business_day(date(day)),
            Ok(false),
            "{day} must be closed"
        );
    }
}

#[test]
fn open_days_on_the_platform_default_calendar() {
    let cal = Calendar::platform_default();
    for day in [
        "2026-07-03", // 4 July 2026 is a Saturday: not observed by the Fed
        "2027-06-18", // Juneteenth 2027 is a Saturday: not observed
        "2027-12-24", // Christmas 2027 is a Saturday: not observed
        "2027-12-27", // 26 Dec 2027 (TARGET2) is a Sunday; the Fed does not observe Sat 25th
    ] {
        assert_eq!(
            cal.is_business_day(date(day)),
            Ok(true),
            "{day} must be open"
        );
    }
}

#[test]
fn weekends_are_never_business_days() {
    let cal = Calendar::platform_default();
    assert_eq!(cal.is_business_day(date("2026-11-07")), Ok(false));
    assert_eq!(cal.is_business_day(date("2026-11-08")), Ok(false));
    assert_eq!(cal.is_business_day(date("2026-11-09")), Ok(true));
    // Weekends need no holiday data, even far outside the covered years.
    assert_eq!(cal.is_business_day(date("2041-01-05")), Ok(false));
    assert_eq!(cal.is_business_day(date("1999-01-02")), Ok(false));
}

#[test]
fn weekdays_outside_the_data_are_an_error() {
    let cal = Calendar::platform_default();
    let err = cal.is_business_day(date("2041-01-02")).unwrap_err();
    assert_eq!(err, CalendarError::NotCovered { year: 2041 });
    assert_eq!(err.code(), "calendar_not_covered");
    assert_eq!(
        cal.is_business_day(date("2019-12-31")),
        Err(CalendarError::NotCovered { year: 2019 })
    );
    assert_eq!(
        cal.is_holiday(date("2041-01-05")),
        Err(CalendarError::NotCovered { year: 2041 })
    );
    assert_eq!(
        cal.next_business_day_after(date("2040-12-31")),
        Err(CalendarError::NotCovered { year: 2041 })
    );
}

#[test]
fn is_holiday_includes_weekend_closing_days() {
    let cal = Calendar::platform_default();
    assert_eq!(cal.is_holiday(date("2027-12-25")), Ok(true)); // TARGET2, a Saturday
    assert_eq!(cal.is_holiday(date("2027-12-24")), Ok(false));
    assert_eq!(cal.is_holiday(date("2026-04-03")), Ok(true));
}

#[test]
fn next_business_day() {
    let cal = Calendar::platform_default();
    let cases = [
        ("2027-12-24", "2027-12-24", "2027-12-27"),
        ("2027-12-25", "2027-12-27", "2027-12-27"),
        ("2026-04-02", "2026-04-02", "2026-04-07"),
        ("2026-04-03", "2026-04-07", "2026-04-07"),
        ("2026-12-24", "2026-12-24", "2026-12-28"),
        ("2026-12-31", "2026-12-31", "2027-01-04"),
        ("2027-07-02", "2027-07-02", "2027-07-06"),
    ];
    for (day, on_or_after, after) in cases {
        assert_eq!(
            cal.next_business_day_on_or_after(date(day)),
            Ok(date(on_or_after)),
            "{day}"
        );
        assert_eq!(
            cal.next_business_day_after(date(day)),
            Ok(date(after)),
            "{day}"
        );
    }
    // The last covered day is found; past it the data runs out.
    assert_eq!(
        cal.next_business_day_on_or_after(date("2040-12-31")),
        Ok(date("2040-12-31"))
    );
    // Each calendar alone.
    assert_eq!(
        Calendar::target2().next_business_day_after(date("2027-07-02")),
        Ok(date("2027-07-05"))
    );
    assert_eq!(
        Calendar::us_federal_reserve().next_business_day_after(date("2026-04-02")),
        Ok(date("2026-04-03"))
    );
}

#[test]
fn extreme_dates_do_not_panic() {
    let cal = Calendar::platform_default();
    assert_eq!(
        cal.next_business_day_after(NaiveDate::MAX),
        Err(CalendarError::DateOutOfRange)
    );
    assert_eq!(
        cal.next_business_day_on_or_after(NaiveDate::MIN)
            .unwrap_err()
            .code(),
        "calendar_not_covered"
    );
    assert_eq!(
        cal.is_business_day(NaiveDate::MAX).unwrap_err().code(),
        "calendar_not_covered"
    );
    let _ = cal.is_business_day(NaiveDate::MIN);
}
