//! Payout run dates (SPEC §5) and the cron-driven catch-up of due runs.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use chrono::{
    Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Timelike, Utc, Weekday,
};

use crate::calendar::parse_iso_date;
use crate::{Calendar, CalendarError};

/// The catch-up window of [`due_runs`] used by the platform unless configured
/// otherwise, in days.
pub const DEFAULT_CATCH_UP_WINDOW_DAYS: u32 = 35;

/// The run date of the monthly run of `year`-`month`: the first business day of the
/// month.
///
/// Fails with [`CalendarError::InvalidMonth`] for a month outside `1..=12`,
/// [`CalendarError::NotCovered`] when the calendar has no data for the year, and
/// [`CalendarError::NoBusinessDay`] if every weekday of the month is a holiday.
pub fn monthly_run_date(cal: &Calendar, year: i32, month: u32) -> Result<NaiveDate, CalendarError> {
    let mut day = first_of_month(year, month)?;
    while day.month() == month {
        if cal.is_business_day(day)? {
            return Ok(day);
        }
        day = day.succ_opt().ok_or(CalendarError::DateOutOfRange)?;
    }
    Err(CalendarError::NoBusinessDay { year, month })
}

/// The key identifying a payout run; a run is idempotent by its key.
///
/// * `Weekly { monday }`: the weekly run of the week starting on `monday`. It is
///   keyed by, and runs on, that Monday, **even when the Monday is a holiday** (the
///   weekly run is a ledger cut, not a bank operation; bank batches created by it
///   are dated by the rail). Cutoff: `monday 00:00 UTC`.
/// * `Monthly { year, month }`: the monthly run of that month; it runs on the first
///   business day of the month ([`monthly_run_date`]). Cutoff: the 1st of the month
///   `00:00 UTC`.
///
/// Build keys with [`RunKey::weekly`] / [`RunKey::monthly`] / [`RunKey::parse`],
/// which validate them; methods given an invalid key (a `monday` that is not a
/// Monday, a month outside `1..=12`) return an error instead of panicking.
///
/// # Ordering
///
/// The execution order of runs depends on the calendar (a holiday can move a
/// monthly run past a Monday), so the exact order — by run date, the weekly run
/// first when both share a date — is the one of [`ScheduledRun`], which
/// [`next_runs`] and [`due_runs`] use. `RunKey`'s own `Ord` is the calendar-free
/// approximation of it: keys are ordered by their run date *under the weekday rule
/// alone* (the monthly run on the first Monday-to-Friday of the month), the weekly
/// run first on the same date. So `Weekly 2026-11-02 < Monthly 2026-11`, but with
/// the 1 January holiday the real order of `Weekly 2027-01-04` and `Monthly 2027-01`
/// (same run date) is only known from the calendar; sort [`ScheduledRun`]s when the
/// order of execution matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunKey {
    /// The weekly run keyed by its Monday.
    Weekly {
        /// The Monday starting the week (the run's date and cutoff date).
        monday: NaiveDate,
    },
    /// The monthly run keyed by its month.
    Monthly {
        /// The year.
        year: i32,
        /// The month, `1..=12`.
        month: u32,
    },
}

impl RunKey {
    /// The weekly run keyed by `monday`; fails with [`CalendarError::NotMonday`] if
    /// `monday` is another weekday.
    pub fn weekly(monday: NaiveDate) -> Result<RunKey, CalendarError> {
        let key = RunKey::Weekly { monday };
        key.validate()?;
        Ok(key)
    }

    /// The weekly run of the week (Monday to Sunday) containing `date`.
    pub fn week_of(date: NaiveDate) -> Result<RunKey, CalendarError> {
        let back = i64::from(date.weekday().num_days_from_monday());
        let monday = date
            .checked_sub_signed(TimeDelta::days(back))
            .ok_or(CalendarError::DateOutOfRange)?;
        Ok(RunKey::Weekly { monday })
    }

    /// The monthly run of `year`-`month`; fails with [`CalendarError::InvalidMonth`]
    /// for a month outside `1..=12`.
    pub fn monthly(year: i32, month: u32) -> Result<RunKey, CalendarError> {
        let key = RunKey::Monthly { year, month };
        key.validate()?;
        Ok(key)
    }

    /// Parses a key from its kind (`"weekly"` / `"monthly"`) and its
    /// [`key_string`](RunKey::key_string) (`"2026-11-23"` / `"2026-11"`).
    pub fn parse(kind: &str, key: &str) -> Result<RunKey, CalendarError> {
        let invalid = || CalendarError::InvalidRunKey {
            kind: kind.to_owned(),
            key: key.to_owned(),
        };
        match kind {
            "weekly" => RunKey::weekly(parse_iso_date(key).ok_or_else(invalid)?),
            "monthly" => {
                let bytes = key.as_bytes();
                if bytes.len() != 7
                    || bytes[4] != b'-'
                    || !bytes[..4].iter().chain(&bytes[5..]).all(u8::is_ascii_digit)
                {
                    return Err(invalid());
                }
                let year = key[..4].parse().map_err(|_| invalid())?;
                let month = key[5..].parse().map_err(|_| invalid())?;
                RunKey::monthly(year, month)
            }
            _ => Err(invalid()),
        }
    }

    /// Checks the key: a weekly key must be a Monday, a monthly key a month in
    /// `1..=12` of a representable year.
    pub fn validate(&self) -> Result<(), CalendarError> {
        match *self {
            RunKey::Weekly { monday } => {
                if monday.weekday() == Weekday::Mon {
                    Ok(())
                } else {
                    Err(CalendarError::NotMonday { date: monday })
                }
            }
            RunKey::Monthly { year, month } => first_of_month(year, month).map(|_| ()),
        }
    }

    /// `"weekly"` or `"monthly"`.
    pub fn kind(&self) -> &'static str {
        match self {
            RunKey::Weekly { .. } => "weekly",
            RunKey::Monthly { .. } => "monthly",
        }
    }

    /// The key as stored and shown: `"2026-11-23"` (weekly) or `"2026-11"` (monthly).
    pub fn key_string(&self) -> String {
        match *self {
            RunKey::Weekly { monday } => monday.format("%Y-%m-%d").to_string(),
            RunKey::Monthly { year, month } => format!("{year:04}-{month:02}"),
        }
    }

    /// The date the run is executed on: the Monday itself for a weekly run (even a
    /// holiday), the first business day of the month for a monthly run.
    pub fn run_date(&self, cal: &Calendar) -> Result<NaiveDate, CalendarError> {
        self.validate()?;
        match *self {
            RunKey::Weekly { monday } => Ok(monday),
            RunKey::Monthly { year, month } => monthly_run_date(cal, year, month),
        }
    }

    /// The cutoff instant (UTC): ledger lines recorded before it count for the run.
    /// Weekly: the Monday `00:00`; monthly: the 1st of the month `00:00`.
    pub fn cutoff(&self) -> Result<NaiveDateTime, CalendarError> {
        self.validate()?;
        let date = match *self {
            RunKey::Weekly { monday } => monday,
            RunKey::Monthly { year, month } => first_of_month(year, month)?,
        };
        Ok(date.and_time(NaiveTime::MIN))
    }

    /// The key as a [`ScheduledRun`] with its run date under `cal`.
    pub fn scheduled(&self, cal: &Calendar) -> Result<ScheduledRun, CalendarError> {
        Ok(ScheduledRun {
            run_date: self.run_date(cal)?,
            key: *self,
        })
    }

    /// 0 for weekly, 1 for monthly: the weekly run goes first on a shared date.
    fn kind_rank(&self) -> u8 {
        match self {
            RunKey::Weekly { .. } => 0,
            RunKey::Monthly { .. } => 1,
        }
    }

    /// The calendar-free sort key (see the type documentation). Injective, so the
    /// resulting order agrees with `Eq`.
    fn nominal_sort_key(&self) -> (i32, u32, u32, u8) {
        match *self {
            RunKey::Weekly { monday } => (monday.year(), monday.month(), monday.day(), 0),
            RunKey::Monthly { year, month } => {
                let day = match NaiveDate::from_ymd_opt(year, month, 1).map(|d| d.weekday()) {
                    Some(Weekday::Sat) => 3,
                    Some(Weekday::Sun) => 2,
                    _ => 1,
                };
                (year, month, day, 1)
            }
        }
    }
}

impl Ord for RunKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nominal_sort_key().cmp(&other.nominal_sort_key())
    }
}

impl PartialOrd for RunKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for RunKey {
    /// `weekly 2026-11-23` / `monthly 2026-11`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind(), self.key_string())
    }
}

/// A run together with its run date under some calendar.
///
/// Ordered by run date, then the weekly run before the monthly run on a shared date
/// (SPEC §5: 2026-11-02 and 2027-01-04 carry both), which is the order runs must be
/// executed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScheduledRun {
    /// The run.
    pub key: RunKey,
    /// The date it runs on.
    pub run_date: NaiveDate,
}

impl Ord for ScheduledRun {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.run_date, self.key.kind_rank(), self.key).cmp(&(
            other.run_date,
            other.key.kind_rank(),
            other.key,
        ))
    }
}

impl PartialOrd for ScheduledRun {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The runs executed on `date`, weekly first: the weekly run if `date` is a Monday,
/// the monthly run if `date` is the first business day of its month.
///
/// Fails with [`CalendarError::NotCovered`] when the calendar has no data for the
/// year (needed to know whether `date` is the monthly run date).
pub fn runs_on(cal: &Calendar, date: NaiveDate) -> Result<Vec<RunKey>, CalendarError> {
    let mut runs = Vec::with_capacity(2);
    if date.weekday() == Weekday::Mon {
        runs.push(RunKey::Weekly { monday: date });
    }
    if monthly_run_date(cal, date.year(), date.month())? == date {
        runs.push(RunKey::Monthly {
            year: date.year(),
            month: date.month(),
        });
    }
    Ok(runs)
}

/// The next `count` runs whose run date (taken at `00:00 UTC`) is at or after
/// `from`, in execution order (see [`ScheduledRun`]).
///
/// So at `2026-11-02 00:00` the runs of 2026-11-02 are still listed, at
/// `2026-11-02 00:00:01` they are not. Fails with [`CalendarError::NotCovered`] when
/// the list would need holiday data the calendar does not have.
pub fn next_runs(
    cal: &Calendar,
    from: NaiveDateTime,
    count: usize,
) -> Result<Vec<ScheduledRun>, CalendarError> {
    let mut runs = Vec::new();
    if count == 0 {
        return Ok(runs);
    }
    let mut day = if from.time() == NaiveTime::MIN {
        from.date()
    } else {
        from.date()
            .succ_opt()
            .ok_or(CalendarError::DateOutOfRange)?
    };
    // Every Monday has a run, so this ends within ~7 * count days (or errors).
    loop {
        for key in runs_on(cal, day)? {
            runs.push(ScheduledRun { key, run_date: day });
            if runs.len() == count {
                return Ok(runs);
            }
        }
        day = day.succ_opt().ok_or(CalendarError::DateOutOfRange)?;
    }
}

/// When the scheduler fires each day: at `fire_time` UTC (default `00:05`), as the
/// daily cron expression [`Schedule::cron_expression`].
///
/// A run is due from its *fire instant*: its run date at `fire_time`. Sub-second
/// precision of `fire_time` is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// The time of day (UTC) the daily check fires.
    pub fire_time: NaiveTime,
}

impl Default for Schedule {
    /// Fires daily at `00:05:00` UTC.
    fn default() -> Self {
        Schedule {
            fire_time: NaiveTime::MIN + TimeDelta::minutes(5),
        }
    }
}

impl Schedule {
    /// A schedule firing daily at `fire_time` UTC (sub-seconds dropped).
    pub fn new(fire_time: NaiveTime) -> Schedule {
        Schedule {
            fire_time: truncate_subsec(fire_time),
        }
    }

    /// The daily cron expression (`sec min hour day-of-month month day-of-week`
    /// as the `cron` crate reads it), e.g. `"0 5 0 * * *"`.
    pub fn cron_expression(&self) -> String {
        let t = truncate_subsec(self.fire_time);
        format!("{} {} {} * * *", t.second(), t.minute(), t.hour())
    }

    /// The instant `date` at the fire time.
    pub fn fire_instant(&self, date: NaiveDate) -> NaiveDateTime {
        date.and_time(truncate_subsec(self.fire_time))
    }

    fn cron(&self) -> Result<cron::Schedule, CalendarError> {
        cron::Schedule::from_str(&self.cron_expression()).map_err(|e| CalendarError::Schedule {
            message: format!("cron expression {:?}: {e}", self.cron_expression()),
        })
    }
}

/// The runs due at `now`: every run whose fire instant (its run date at
/// `schedule.fire_time`) lies in `(max(last_checked, now − window), now]`, in
/// execution order (by date, weekly before monthly on a shared date).
///
/// * `last_checked`: the `now` of the previous successful check (`None` on first
///   start); after downtime every missed run within the window is returned, in date
///   order, so a run is never skipped as long as the downtime is shorter than the
///   window.
/// * `catch_up_window_days`: how far back to look at most
///   ([`DEFAULT_CATCH_UP_WINDOW_DAYS`]); older runs must be started by hand.
/// * A `last_checked` at or after `now` (clock moved back) yields no run.
///
/// The caller starts each returned run idempotently; returning a run that is
/// already done is harmless. The daily fire instants are iterated with the `cron`
/// crate, and cross-checked day by day so that a gap can never go unnoticed (cron
/// only handles years 1970–2099: beyond, this fails with
/// [`CalendarError::Schedule`]). Fails with [`CalendarError::NotCovered`] if a fire
/// day's year has no holiday data.
pub fn due_runs(
    cal: &Calendar,
    schedule: &Schedule,
    last_checked: Option<NaiveDateTime>,
    now: NaiveDateTime,
    catch_up_window_days: u32,
) -> Result<Vec<RunKey>, CalendarError> {
    let fire_time = truncate_subsec(schedule.fire_time);
    let window_start = TimeDelta::try_days(i64::from(catch_up_window_days))
        .and_then(|window| now.checked_sub_signed(window))
        .unwrap_or(NaiveDateTime::MIN);
    let lower = last_checked.map_or(window_start, |checked| checked.max(window_start));
    if lower >= now {
        return Ok(Vec::new());
    }

    // The fire days the interval (lower, now] must contain, computed without cron.
    let first_day = if lower.time() < fire_time {
        lower.date()
    } else {
        lower
            .date()
            .succ_opt()
            .ok_or(CalendarError::DateOutOfRange)?
    };
    let last_day = if now.time() >= fire_time {
        now.date()
    } else {
        match now.date().pred_opt() {
            Some(day) => day,
            None => return Ok(Vec::new()),
        }
    };
    if first_day > last_day {
        return Ok(Vec::new());
    }

    let cron = schedule.cron()?;
    // Whole seconds: cron's "strictly after" works at second resolution; fire
    // instants are whole seconds, so this does not change which ones are after.
    let start = Utc.from_utc_datetime(&lower.with_nanosecond(0).unwrap_or(lower));
    let mut expected = first_day;
    let mut seen_last = false;
    let mut runs = Vec::new();
    for fire in cron.after(&start) {
        let fire = fire.naive_utc();
        if fire > now {
            break;
        }
        if fire.date() != expected || fire.time() != fire_time {
            return Err(CalendarError::Schedule {
                message: format!(
                    "cron fired at {fire}, expected {}",
                    expected.and_time(fire_time)
                ),
            });
        }
        runs.extend(runs_on(cal, expected)?);
        if expected == last_day {
            seen_last = true;
            break;
        }
        expected = expected.succ_opt().ok_or(CalendarError::DateOutOfRange)?;
    }
    if !seen_last {
        return Err(CalendarError::Schedule {
            message: format!(
                "cron stopped before the fire instant {} (it handles years 1970-2099)",
                expected.and_time(fire_time)
            ),
        });
    }
    Ok(runs)
}

fn first_of_month(year: i32, month: u32) -> Result<NaiveDate, CalendarError> {
    if !(1..=12).contains(&month) {
        return Err(CalendarError::InvalidMonth { month });
    }
    NaiveDate::from_ymd_opt(year, month, 1).ok_or(CalendarError::DateOutOfRange)
}

fn truncate_subsec(time: NaiveTime) -> NaiveTime {
    time.with_nanosecond(0).unwrap_or(time)
}
