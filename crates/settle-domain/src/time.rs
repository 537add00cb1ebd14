//! Instants as integer milliseconds since the Unix epoch, UTC.

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, TimeZone, Utc};

use super::DomainError;

pub const MS_PER_DAY: i64 = 86_400_000;

/// Parses an RFC 3339 timestamp, converts it to UTC and truncates it to whole milliseconds.
pub fn parse_rfc3339_ms(text: &str) -> Result<i64, DomainError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc).timestamp_millis())
        .map_err(|e| {
            DomainError::new(
                "invalid_timestamp",
                format!("not an RFC 3339 timestamp: {text:?} ({e})"),
            )
        })
}

/// Parses a timestamp or a date (`2026-11-23` means its 00:00 UTC).
pub fn parse_instant_or_date_ms(text: &str) -> Result<i64, DomainError> {
    if text.len() == 10 {
        let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|_| {
            DomainError::new("invalid_date", format!("not a date YYYY-MM-DD: {text:?}"))
        })?;
        return Ok(date_start_ms(date));
    }
    parse_rfc3339_ms(text)
}

/// Formats milliseconds as RFC 3339 UTC with millisecond precision (`…T10:00:00.000Z`).
pub fn format_ms(ms: i64) -> String {
    match Utc.timestamp_millis_opt(ms).single() {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => format!("invalid-time({ms})"),
    }
}

/// The UTC date containing the instant.
pub fn date_of_ms(ms: i64) -> NaiveDate {
    let days = ms.div_euclid(MS_PER_DAY);
    NaiveDate::from_ymd_opt(1970, 1, 1).expect("epoch") + Duration::days(days)
}

/// 00:00 UTC of a date, in milliseconds.
pub fn date_start_ms(date: NaiveDate) -> i64 {
    date.and_hms_opt(0, 0, 0)
        .expect("midnight exists")
        .and_utc()
        .timestamp_millis()
}

/// Milliseconds of a naive UTC date-time.
pub fn naive_ms(t: NaiveDateTime) -> i64 {
    t.and_utc().timestamp_millis()
}

/// Days since the epoch of the UTC date containing `ms` (the key of daily projections).
pub fn day_number(ms: i64) -> i64 {
    ms.div_euclid(MS_PER_DAY)
}

/// The date of a day number.
pub fn day_date(day: i64) -> NaiveDate {
    date_of_ms(day * MS_PER_DAY)
}

/// The Monday starting the week (Monday 00:00 UTC) that contains `ms`.
pub fn week_start_ms(ms: i64) -> i64 {
    let date = date_of_ms(ms);
    let back = date.weekday().num_days_from_monday() as i64;
    date_start_ms(date - Duration::days(back))
}

/// The first of the month (00:00 UTC) containing `ms`.
pub fn month_start_ms(ms: i64) -> i64 {
    let date = date_of_ms(ms);
    date_start_ms(NaiveDate::from_ymd_opt(date.year(), date.month(), 1).expect("first of month"))
}

/// The first of the following month (00:00 UTC).
pub fn next_month_start_ms(ms: i64) -> i64 {
    let date = date_of_ms(ms);
    let (y, m) = if date.month() == 12 {
        (date.year() + 1, 1)
    } else {
        (date.year(), date.month() + 1)
    };
    date_start_ms(NaiveDate::from_ymd_opt(y, m, 1).expect("first of month"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_truncates() {
        let a = parse_rfc3339_ms("2026-11-23T10:00:00Z").unwrap();
        let b = parse_rfc3339_ms("2026-11-23T10:00:00.000+00:00").unwrap();
        let c = parse_rfc3339_ms("2026-11-23T11:00:00.0009+01:00").unwrap();
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(format_ms(a), "2026-11-23T10:00:00.000Z");
        assert!(parse_rfc3339_ms("2026-11-23 10:00").is_err());
    }

    #[test]
    fn periods() {
        let t = parse_rfc3339_ms("2026-11-25T13:00:00Z").unwrap();
        assert_eq!(format_ms(week_start_ms(t)), "2026-11-23T00:00:00.000Z");
        assert_eq!(format_ms(month_start_ms(t)), "2026-11-01T00:00:00.000Z");
        assert_eq!(
            format_ms(next_month_start_ms(t)),
            "2026-12-01T00:00:00.000Z"
        );
    }

    #[test]
    fn dates_days_and_their_edges() {
        let d = |y, m, day| NaiveDate::from_ymd_opt(y, m, day).unwrap();
        // A date is its 00:00 UTC; an instant keeps its milliseconds; the codes are stable.
        assert_eq!(
            parse_instant_or_date_ms("2026-11-23").unwrap(),
            1_795_392_000_000
        );
        assert_eq!(
            parse_instant_or_date_ms("2026-11-23T00:00:00.001Z").unwrap(),
            1_795_392_000_001
        );
        assert_eq!(
            parse_instant_or_date_ms("2026-13-01").unwrap_err().code,
            "invalid_date"
        );
        assert_eq!(
            parse_rfc3339_ms("yesterday").unwrap_err().code,
            "invalid_timestamp"
        );
        assert_eq!(
            parse_instant_or_date_ms("2026-11-2").unwrap_err().code,
            "invalid_timestamp"
        );
        assert_eq!(format_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_ms(i64::MAX), format!("invalid-time({})", i64::MAX));

        // Days: before the epoch too (floor, not truncation).
        assert_eq!(date_of_ms(0), d(1970, 1, 1));
        assert_eq!(date_of_ms(-1), d(1969, 12, 31));
        assert_eq!(
            date_of_ms(1_795_392_000_000 + MS_PER_DAY - 1),
            d(2026, 11, 23)
        );
        assert_eq!(date_start_ms(d(2026, 11, 23)), 1_795_392_000_000);
        assert_eq!(date_start_ms(d(1970, 1, 2)), MS_PER_DAY);
        let noon = d(2026, 11, 23).and_hms_milli_opt(12, 0, 0, 5).unwrap();
        assert_eq!(naive_ms(noon), 1_795_392_000_000 + 12 * 3_600_000 + 5);
        assert_eq!(day_number(1_795_392_000_000), 20_780);
        assert_eq!(day_number(-1), -1);
        assert_eq!(day_date(20_780), d(2026, 11, 23));
        assert_eq!(day_date(-1), d(1969, 12, 31));

        // Weeks start on Monday 00:00: a Monday is its own start, a Sunday the Monday before.
        let monday = date_start_ms(d(2026, 11, 23));
        assert_eq!(week_start_ms(monday), monday);
        assert_eq!(week_start_ms(monday - 1), date_start_ms(d(2026, 11, 16)));
        assert_eq!(week_start_ms(date_start_ms(d(2026, 11, 29)) + 1), monday);
        // Months, across the year's end.
        let dec = date_start_ms(d(2026, 12, 31)) + 5;
        assert_eq!(month_start_ms(dec), date_start_ms(d(2026, 12, 1)));
        assert_eq!(next_month_start_ms(dec), date_start_ms(d(2027, 1, 1)));
        assert_eq!(
            next_month_start_ms(date_start_ms(d(2026, 1, 31))),
            date_start_ms(d(2026, 2, 1))
        );
        assert_eq!(
            month_start_ms(date_start_ms(d(2026, 3, 1)) - 1),
            date_start_ms(d(2026, 2, 1))
        );
    }
}
