//! Business-day calendars and payout run dates for settle (SPEC §5).
//!
//! * [`Calendar`]: holidays loaded from data files. The crate ships
//!   `calendars/target2.txt` (TARGET2 closing days) and
//!   `calendars/us-federal-reserve.txt` (US Federal Reserve holidays, observed dates)
//!   for 2020–2040, embedded as the defaults; the platform can load its own files with
//!   [`Calendar::parse`] / [`Calendar::from_file`]. The default platform calendar is
//!   their union ([`Calendar::platform_default`]).
//! * [`RunKey`], [`monthly_run_date`], [`runs_on`], [`next_runs`]: the weekly run
//!   (every Monday) and the monthly run (first business day of the month).
//! * [`Schedule`], [`due_runs`]: which runs are due at a given instant, catching up
//!   after downtime.
//!
//! Everything is pure: no clock is read, the only I/O is [`Calendar::from_file`].
//! Questions the holiday data cannot answer (a weekday of a year outside the data)
//! are errors ([`CalendarError::NotCovered`]), never guesses, and no input panics.
//!
//! ```
//! use chrono::NaiveDate;
//! use settle_calendar::{Calendar, RunKey, monthly_run_date};
//!
//! let cal = Calendar::platform_default();
//! let date = |y, m, d| NaiveDate::from_ymd_opt(y, m, d).unwrap();
//! assert_eq!(cal.is_business_day(date(2027, 1, 1)), Ok(false));
//! assert_eq!(monthly_run_date(&cal, 2027, 1), Ok(date(2027, 1, 4)));
//! let key = RunKey::monthly(2027, 1).unwrap();
//! assert_eq!((key.kind(), key.key_string().as_str()), ("monthly", "2027-01"));
//! ```

mod calendar;
mod error;
mod schedule;

pub use calendar::{Calendar, TARGET2_DATA, US_FEDERAL_RESERVE_DATA};
pub use error::CalendarError;
pub use schedule::{
    DEFAULT_CATCH_UP_WINDOW_DAYS, RunKey, Schedule, ScheduledRun, due_runs, monthly_run_date,
    next_runs, runs_on,
};
