//! The error type of the crate.

use chrono::NaiveDate;

/// Everything that can go wrong in this crate.
///
/// Every variant has a stable machine-readable [`code`](CalendarError::code); the
/// `Display` text is for humans and may change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    /// A calendar file could not be parsed; `line` is 1-based.
    #[error("calendar {calendar:?}, line {line}: {message}")]
    Parse {
        /// The name given to the calendar being parsed.
        calendar: String,
        /// The 1-based line number of the offending line (0 when the problem is the
        /// file as a whole, for example a missing `covers:` line).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A calendar file could not be read.
    #[error("cannot read calendar file {path}: {message}")]
    Io {
        /// The path that was given.
        path: String,
        /// The operating system's error message.
        message: String,
    },
    /// The date's year is outside the years the calendar has holiday data for, so
    /// whether a weekday is a business day is unknown.
    #[error("no holiday data for year {year}")]
    NotCovered {
        /// The year that is not covered.
        year: i32,
    },
    /// A calendar was built from an invalid description (empty union, coverage
    /// ranges without common year, holiday outside the coverage...).
    #[error("invalid calendar: {message}")]
    InvalidCalendar {
        /// What is wrong.
        message: String,
    },
    /// A month number outside `1..=12`.
    #[error("invalid month {month} (expected 1..=12)")]
    InvalidMonth {
        /// The month number that was given.
        month: u32,
    },
    /// A weekly run keyed by a date that is not a Monday.
    #[error("weekly run key {date} is not a Monday")]
    NotMonday {
        /// The date that was given.
        date: NaiveDate,
    },
    /// A month with no business day at all (every weekday is a holiday).
    #[error("no business day in {year}-{month:02}")]
    NoBusinessDay {
        /// The year.
        year: i32,
        /// The month.
        month: u32,
    },
    /// Date arithmetic left the range chrono can represent.
    #[error("date out of the representable range")]
    DateOutOfRange,
    /// A run key string that cannot be parsed.
    #[error("invalid {kind} run key {key:?}")]
    InvalidRunKey {
        /// The run kind that was given (`weekly` / `monthly`, or what the caller passed).
        kind: String,
        /// The key string that was given.
        key: String,
    },
    /// The cron schedule could not be built or iterated over the requested range
    /// (cron only handles the years 1970 to 2099).
    #[error("schedule error: {message}")]
    Schedule {
        /// What is wrong.
        message: String,
    },
}

impl CalendarError {
    /// The stable, machine-readable code of the error (for logs, API bodies and
    /// tests): one of `calendar_parse`, `calendar_io`, `calendar_not_covered`,
    /// `calendar_invalid`, `invalid_month`, `not_monday`, `no_business_day`,
    /// `date_out_of_range`, `invalid_run_key`, `schedule_error`.
    pub fn code(&self) -> &'static str {
        match self {
            CalendarError::Parse { .. } => "calendar_parse",
            CalendarError::Io { .. } => "calendar_io",
            CalendarError::NotCovered { .. } => "calendar_not_covered",
            CalendarError::InvalidCalendar { .. } => "calendar_invalid",
            CalendarError::InvalidMonth { .. } => "invalid_month",
            CalendarError::NotMonday { .. } => "not_monday",
            CalendarError::NoBusinessDay { .. } => "no_business_day",
            CalendarError::DateOutOfRange => "date_out_of_range",
            CalendarError::InvalidRunKey { .. } => "invalid_run_key",
            CalendarError::Schedule { .. } => "schedule_error",
        }
    }
}
