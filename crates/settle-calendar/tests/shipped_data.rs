//! The shipped calendar files: they equal what the holiday rules produce, they parse,
//! and the parser reports errors with line numbers.

#[path = "support/holiday_rules.rs"]
mod holiday_rules;

use chrono::NaiveDate;
use settle_calendar::{Calendar, CalendarError, TARGET2_DATA, US_FEDERAL_RESERVE_DATA};

fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).unwrap()
}

const REGENERATE: &str = "the shipped file differs from the rules: run `cargo run -p settle-calendar --example generate_calendars`";

#[test]
fn shipped_target2_file_equals_the_rules() {
    assert_eq!(TARGET2_DATA, holiday_rules::target2_file(), "{REGENERATE}");
}

#[test]
fn shipped_us_federal_reserve_file_equals_the_rules() {
    assert_eq!(
        US_FEDERAL_RESERVE_DATA,
        holiday_rules::us_federal_reserve_file(),
        "{REGENERATE}"
    );
}

#[test]
fn easter_algorithm_matches_known_dates() {
    for (year, month, day) in [
        (1818, 3, 22),
        (1943, 4, 25),
        (2000, 4, 23),
        (2019, 4, 21),
        (2024, 3, 31),
        (2025, 4, 20),
        (2026, 4, 5),
        (2027, 3, 28),
        (2028, 4, 16),
        (2038, 4, 25),
    ] {
        assert_eq!(
            holiday_rules::easter_sunday(year),
            date(year, month, day),
            "{year}"
        );
    }
}

#[test]
fn shipped_calendars_parse_and_cover_2020_to_2040() {
    for cal in [
        Calendar::target2(),
        Calendar::us_federal_reserve(),
        Calendar::platform_default(),
    ] {
        assert_eq!(
            (cal.first_year(), cal.last_year()),
            (2020, 2040),
            "{}",
            cal.name()
        );
        assert!(cal.covers(date(2020, 1, 1)) && cal.covers(date(2040, 12, 31)));
        assert!(!cal.covers(date(2019, 12, 31)) && !cal.covers(date(2041, 1, 1)));
    }
    assert_eq!(Calendar::target2().holidays().count(), 21 * 6);
    // 21 years * 11 holidays, minus Juneteenth 2020 (not yet a holiday) and the
    // 18 holidays falling on a Saturday in 2020-2040 (not observed).
    let fed = Calendar::us_federal_reserve();
    assert_eq!(fed.holidays().count(), 212);
    assert!(
        fed.holidays()
            .all(|(d, _)| d.format("%a").to_string() != "Sat")
    );
    assert_eq!(
        Calendar::platform_default().name(),
        "target2+us-federal-reserve"
    );
}

#[test]
fn shipped_holidays_have_names() {
    let cal = Calendar::platform_default();
    assert_eq!(cal.holiday_name(date(2026, 4, 3)), Some("Good Friday"));
    assert_eq!(
        cal.holiday_name(date(2027, 7, 5)),
        Some("Independence Day (observed; falls on Sunday 2027-07-04)")
    );
    assert_eq!(
        cal.holiday_name(date(2027, 1, 1)),
        Some("New Year's Day"),
        "same name in both calendars is not repeated"
    );
    assert_eq!(cal.holiday_name(date(2026, 12, 25)), Some("Christmas Day"));
    assert_eq!(cal.holiday_name(date(2026, 7, 3)), None);
}

fn parse_error(text: &str) -> (usize, String) {
    match Calendar::parse("test", text) {
        Err(CalendarError::Parse {
            calendar,
            line,
            message,
        }) => {
            assert_eq!(calendar, "test");
            (line, message)
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn parse_error_names_the_line_number() {
    let text = "# header\ncovers: 2026-2026\n\n2026-13-01  Bad month\n";
    let (line, message) = parse_error(text);
    assert_eq!(line, 4);
    assert!(message.contains("2026-13-01"), "{message}");
    let err = Calendar::parse("test", text).unwrap_err();
    assert_eq!(err.code(), "calendar_parse");
    assert!(err.to_string().contains("line 4"), "{err}");
}

#[test]
fn parse_rejects_malformed_lines() {
    let cases: &[(&str, usize)] = &[
        ("covers: 2026-2026\n2026-1-01  Not padded\n", 2),
        ("covers: 2026-2026\n2026-01-01\n", 2),
        ("covers: 2026-2026\n2026-01-01   \n", 2),
        ("covers: 2026-2026\n01.01.2026  New Year\n", 2),
        ("covers: 2026-2026\n2026-01-01  A\n\n2026-01-01  B\n", 4),
        ("covers: 2026-2026\n# c\ncovers: 2026-2027\n", 3),
        ("covers: 2026\n", 1),
        ("covers: 2027-2026\n", 1),
        ("covers: 2026-2026\n2026-01-01  A\n2027-01-01  B\n", 3),
        ("2027-01-01  B\ncovers: 2026-2026\n", 1),
        ("covers: 2026-2026\n2026-02-30  No such day\n", 2),
        ("covers: 2026-2026\n+2026-01-01  Sign\n", 2),
    ];
    for (text, expected_line) in cases {
        assert_eq!(parse_error(text).0, *expected_line, "{text:?}");
    }
    // No coverage line at all: the file as a whole is wrong (line 0).
    let (line, message) = parse_error("2026-01-01  New Year\n");
    assert_eq!(line, 0);
    assert!(message.contains("covers"), "{message}");
}

#[test]
fn parse_accepts_comments_blank_lines_crlf_and_bom() {
    let text = "\u{feff}# a calendar\r\n\r\ncovers: 2026-2027\r\n  2026-01-01\tNew Year  \r\n2027-12-24  Christmas Eve # not a comment\r\n";
    let cal = Calendar::parse("mine", text).unwrap();
    assert_eq!(cal.name(), "mine");
    assert_eq!(
        cal.holidays().collect::<Vec<_>>(),
        vec![
            (date(2026, 1, 1), "New Year"),
            (date(2027, 12, 24), "Christmas Eve # not a comment"),
        ]
    );
    assert_eq!(cal.is_business_day(date(2027, 12, 24)), Ok(false));
    // A calendar may list no holiday at all for its years.
    let empty = Calendar::parse("none", "covers: 2026-2026\n").unwrap();
    assert_eq!(empty.is_business_day(date(2026, 1, 1)), Ok(true));
}

#[test]
fn from_file_reads_and_names_the_calendar() {
    let dir = std::env::temp_dir().join(format!("settle-calendar-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("exchange.txt");
    std::fs::write(&path, "covers: 2030-2030\n2030-06-03  Exchange holiday\n").unwrap();
    let cal = Calendar::from_file(&path).unwrap();
    assert_eq!(cal.name(), "exchange");
    assert_eq!(cal.is_holiday(date(2030, 6, 3)), Ok(true));
    std::fs::remove_dir_all(&dir).unwrap();

    let err = Calendar::from_file(dir.join("missing.txt")).unwrap_err();
    assert_eq!(err.code(), "calendar_io");
}

#[test]
fn union_intersects_coverage_and_merges_holidays() {
    let a = Calendar::parse(
        "a",
        "covers: 2025-2028\n2026-03-02  A day\n2025-01-02  Early\n",
    )
    .unwrap();
    let b = Calendar::parse(
        "b",
        "covers: 2026-2030\n2026-03-02  B day\n2026-03-03  B only\n",
    )
    .unwrap();
    let u = Calendar::union(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(u.name(), "a+b");
    assert_eq!((u.first_year(), u.last_year()), (2026, 2028));
    assert_eq!(
        u.holidays().collect::<Vec<_>>(),
        vec![
            (date(2026, 3, 2), "A day / B day"),
            (date(2026, 3, 3), "B only"),
        ]
    );
    assert_eq!(
        u.is_business_day(date(2025, 1, 3)),
        Err(CalendarError::NotCovered { year: 2025 })
    );
    assert_eq!(Calendar::union(std::slice::from_ref(&a)).unwrap(), a);

    let empty = Calendar::union(&[]).unwrap_err();
    assert_eq!(empty.code(), "calendar_invalid");
    let c = Calendar::parse("c", "covers: 2031-2032\n").unwrap();
    assert_eq!(
        Calendar::union(&[b, c]).unwrap_err().code(),
        "calendar_invalid"
    );
}

#[test]
fn new_validates_its_data() {
    let ok = Calendar::new("x", 2026, 2026, [(date(2026, 5, 1), "May Day".to_owned())]).unwrap();
    assert_eq!(ok.is_holiday(date(2026, 5, 1)), Ok(true));
    // Coverage that ends before it starts, a holiday outside the coverage, a date twice.
    for bad in [
        Calendar::new("x", 2027, 2026, []),
        Calendar::new("x", 2026, 2026, [(date(2027, 5, 1), "Late".to_owned())]),
        Calendar::new(
            "x",
            2026,
            2026,
            [
                (date(2026, 5, 1), "A".to_owned()),
                (date(2026, 5, 1), "B".to_owned()),
            ],
        ),
    ] {
        assert_eq!(bad.unwrap_err().code(), "calendar_invalid");
    }
}

/// The edges of what a calendar may cover and how its file spells years and dates (each
/// case here was a surviving mutant; ops/MUTANTS.md).
#[test]
fn coverage_and_dates_are_checked_at_their_edges() {
    // Years 1 to 9999, both ends included; one outside either end is refused.
    let whole = Calendar::new("x", 1, 9999, []).unwrap();
    assert_eq!((whole.first_year(), whole.last_year()), (1, 9999));
    for (first, last) in [(0, 2026), (2026, 10_000), (-5, 10_000)] {
        let err = Calendar::new("x", first, last, []).unwrap_err();
        assert_eq!(err.code(), "calendar_invalid", "{first}-{last}: {err}");
        assert!(err.to_string().contains("outside 1-9999"), "{err}");
    }
    // A year is 1 to 4 digits: `1` is one, `02026` is not.
    let parsed = Calendar::parse("x", "covers: 1-9999\n").unwrap();
    assert_eq!((parsed.first_year(), parsed.last_year()), (1, 9999));
    for text in [
        "covers: 02026-2030\n",
        "covers: 2026-02030\n",
        "covers: -2030\n",
    ] {
        let err = Calendar::parse("x", text).unwrap_err();
        assert_eq!(err.code(), "calendar_parse", "{text:?}: {err}");
    }
    // A date is exactly YYYY-MM-DD: another separator in either place is refused.
    for line in [
        "2026/05-01 May Day",
        "2026-05/01 May Day",
        "2026/05/01 May Day",
    ] {
        let text = format!("covers: 2026-2026\n{line}\n");
        let err = Calendar::parse("x", &text).unwrap_err();
        assert_eq!(err.code(), "calendar_parse", "{line:?}: {err}");
        assert!(err.to_string().contains("YYYY-MM-DD"), "{err}");
    }
    let ok = Calendar::parse("x", "covers: 2026-2026\n2026-05-01 May Day\n").unwrap();
    assert_eq!(ok.holiday_name(date(2026, 5, 1)), Some("May Day"));
    // Calendars whose coverage meets in a single year unite to that year.
    let a = Calendar::new("a", 2020, 2027, []).unwrap();
    let b = Calendar::new("b", 2027, 2040, []).unwrap();
    let both = Calendar::union(&[a, b]).unwrap();
    assert_eq!((both.first_year(), both.last_year()), (2027, 2027));
}
