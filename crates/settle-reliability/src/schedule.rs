//! The declared availability schedule: 24/7 or weekly hours in an IANA time zone, and its
//! versions over time.
//!
//! # Local times and daylight saving
//!
//! A window `09:00-18:00` on a local date runs from the instant the local clock shows
//! 09:00 to the instant it shows 18:00, so it is 9 real hours on the days clocks change
//! (the change happens at night). When a window's start or end is itself a local time
//! that the change makes special:
//!
//! * **does not exist** (02:30 on the spring-forward day in Europe/Berlin, where clocks
//!   jump from 02:00 to 03:00): it is the first instant whose local time is at or after
//!   it, the instant of the jump (03:00 CEST). So `02:30-05:00` is 2 real hours that day;
//!   `02:00-02:30` is empty that day.
//! * **occurs twice** (02:30 on the fall-back day, once in CEST and once in CET): it is
//!   the first occurrence. So `01:00-02:30` is 1 h 30 min that day, and `02:30-04:00` is
//!   2 h 30 min (from the first 02:30 through the repeated hour).
//!
//! A window whose end is not after its start (`22:00-06:00`) crosses midnight: it belongs
//! to the day it starts on and ends on the next day. `24:00` as an end means the next
//! midnight, so `00:00-24:00` is the whole local day.

use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, TimeZone, Utc, Weekday};
use chrono_tz::Tz;

use crate::interval::{DAY_MS, INSTANT_MAX_MS, check_instant, normalize};
use crate::{Interval, ReliabilityError};

/// The most windows one weekly schedule may have.
pub const SCHEDULE_WINDOWS_MAX: usize = 64;

/// A local clock time `HH:MM`, from `00:00` to `24:00` (`24:00` only as a window's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClockTime(u16);

impl ClockTime {
    /// Parses `HH:MM` (two digits each) in `00:00..=24:00`.
    pub fn parse(text: &str) -> Result<ClockTime, ReliabilityError> {
        let invalid = || ReliabilityError::InvalidClockTime {
            text: text.to_owned(),
        };
        let b = text.as_bytes();
        if b.len() != 5 || b[2] != b':' || !b[..2].iter().chain(&b[3..]).all(u8::is_ascii_digit) {
            return Err(invalid());
        }
        let hours: u16 = text[..2].parse().map_err(|_| invalid())?;
        let minutes: u16 = text[3..].parse().map_err(|_| invalid())?;
        let total = hours * 60 + minutes;
        if minutes >= 60 || total > 24 * 60 {
            return Err(invalid());
        }
        Ok(ClockTime(total))
    }

    /// Minutes after local midnight, `0..=1440`.
    pub fn minutes(self) -> u16 {
        self.0
    }
}

impl std::fmt::Display for ClockTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02}:{:02}", self.0 / 60, self.0 % 60)
    }
}

/// A set of weekdays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Days(u8);

impl Days {
    /// Every day of the week.
    pub const ALL: Days = Days(0b111_1111);

    /// The set of the given weekdays.
    pub fn of(days: &[Weekday]) -> Days {
        Days(days.iter().fold(0, |acc, d| acc | bit(*d)))
    }

    /// Parses `Mon-Fri`, `Sat,Sun`, `Mon-Wed,Fri` or `daily` (three-letter English
    /// names, any case; a range may wrap, `Fri-Mon`).
    pub fn parse(text: &str) -> Result<Days, ReliabilityError> {
        if text.eq_ignore_ascii_case("daily") {
            return Ok(Days::ALL);
        }
        let mut bits = 0u8;
        for item in text.split(',') {
            let (first, last) = match item.split_once('-') {
                Some((a, b)) => (parse_weekday(a)?, parse_weekday(b)?),
                None => (parse_weekday(item)?, parse_weekday(item)?),
            };
            let mut day = first;
            bits |= bit(day);
            while day != last {
                day = day.succ();
                bits |= bit(day);
            }
        }
        Ok(Days(bits))
    }

    /// Whether `day` is in the set.
    pub fn contains(self, day: Weekday) -> bool {
        self.0 & bit(day) != 0
    }

    /// Whether the set has no day.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

fn bit(day: Weekday) -> u8 {
    1 << day.num_days_from_monday()
}

fn parse_weekday(text: &str) -> Result<Weekday, ReliabilityError> {
    let text = text.trim();
    let ok = text.len() == 3 && text.is_ascii();
    ok.then(|| Weekday::from_str(text).ok())
        .flatten()
        .ok_or_else(|| ReliabilityError::InvalidSchedule {
            message: format!("unknown day {text:?} (expected Mon, Tue, ... Sun or daily)"),
        })
}

/// Weekly hours: on each of `days`, from local `start` to local `end` (crossing midnight
/// when `end <= start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WeeklyWindow {
    days: Days,
    start: ClockTime,
    end: ClockTime,
}

impl WeeklyWindow {
    /// Builds a window; fails if `days` is empty, `start` is `24:00`, or `start == end`
    /// (write `00:00-24:00` for a whole day).
    pub fn new(
        days: Days,
        start: ClockTime,
        end: ClockTime,
    ) -> Result<WeeklyWindow, ReliabilityError> {
        let message = if days.is_empty() {
            "a window needs at least one day"
        } else if start.0 == 24 * 60 {
            "a window cannot start at 24:00"
        } else if start == end {
            "a window cannot start and end at the same time (write 00:00-24:00 for a whole day)"
        } else {
            return Ok(WeeklyWindow { days, start, end });
        };
        Err(ReliabilityError::InvalidSchedule {
            message: message.to_owned(),
        })
    }

    /// The days the window starts on.
    pub fn days(&self) -> Days {
        self.days
    }

    /// The local start time.
    pub fn start(&self) -> ClockTime {
        self.start
    }

    /// The local end time (on the next day when not after the start).
    pub fn end(&self) -> ClockTime {
        self.end
    }

    /// The real instants `[start, end)` of the window that starts on local `date`, if any.
    fn on(&self, tz: Tz, date: NaiveDate) -> Option<(i64, i64)> {
        let start = resolve_local(tz, date, self.start.0)?;
        let (end_date, end_min) = match self.end.0 {
            1440 => (date.succ_opt()?, 0),
            m if m <= self.start.0 => (date.succ_opt()?, m),
            m => (date, m),
        };
        let end = resolve_local(tz, end_date, end_min)?;
        (start < end).then_some((start, end))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Always,
    Weekly(Vec<WeeklyWindow>),
}

/// A declared availability schedule: always (24/7) or weekly windows, in a time zone
/// (which also decides the local days offline time is reported on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    tz: Tz,
    kind: Kind,
}

impl Schedule {
    /// Available around the clock; `tz` is used for the local days of the reasons.
    pub fn always(tz: Tz) -> Schedule {
        Schedule {
            tz,
            kind: Kind::Always,
        }
    }

    /// Weekly windows in `tz`; at least one and at most [`SCHEDULE_WINDOWS_MAX`].
    pub fn weekly(tz: Tz, windows: Vec<WeeklyWindow>) -> Result<Schedule, ReliabilityError> {
        if windows.is_empty() || windows.len() > SCHEDULE_WINDOWS_MAX {
            return Err(ReliabilityError::InvalidSchedule {
                message: format!("a weekly schedule needs 1 to {SCHEDULE_WINDOWS_MAX} windows"),
            });
        }
        Ok(Schedule {
            tz,
            kind: Kind::Weekly(windows),
        })
    }

    /// Parses the text form: the IANA zone name, and either `24/7` or entries separated by
    /// `;`, each a day set ([`Days::parse`]), whitespace, then comma-separated
    /// `HH:MM-HH:MM` ranges. Example: `("Europe/Berlin", "Mon-Fri 09:00-12:00, 13:00-18:00;
    /// Sat 22:00-06:00")`.
    pub fn parse(tz_name: &str, spec: &str) -> Result<Schedule, ReliabilityError> {
        let tz = parse_tz(tz_name)?;
        if spec.trim() == "24/7" {
            return Ok(Schedule::always(tz));
        }
        let mut windows = Vec::new();
        for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let (days, ranges) = entry.split_once(char::is_whitespace).ok_or_else(|| {
                ReliabilityError::InvalidSchedule {
                    message: format!("entry {entry:?} needs days, a space and hours"),
                }
            })?;
            let days = Days::parse(days)?;
            for range in ranges.split(',').map(str::trim) {
                let (start, end) =
                    range
                        .split_once('-')
                        .ok_or_else(|| ReliabilityError::InvalidSchedule {
                            message: format!("range {range:?} is not HH:MM-HH:MM"),
                        })?;
                let (start, end) = (
                    ClockTime::parse(start.trim())?,
                    ClockTime::parse(end.trim())?,
                );
                windows.push(WeeklyWindow::new(days, start, end)?);
            }
        }
        Schedule::weekly(tz, windows)
    }

    /// The time zone.
    pub fn tz(&self) -> Tz {
        self.tz
    }

    /// Whether the schedule is 24/7.
    pub fn is_always(&self) -> bool {
        self.kind == Kind::Always
    }

    /// The weekly windows (empty for 24/7).
    pub fn windows(&self) -> &[WeeklyWindow] {
        match &self.kind {
            Kind::Always => &[],
            Kind::Weekly(windows) => windows,
        }
    }

    /// The scheduled instants inside `[from_ms, to_ms)`, normalized. Linear in the number
    /// of local days of the range times the number of windows.
    pub fn expand(&self, from_ms: i64, to_ms: i64) -> Vec<Interval> {
        let windows = match &self.kind {
            _ if from_ms >= to_ms => return Vec::new(),
            Kind::Always => return vec![Interval::raw(from_ms, to_ms)],
            Kind::Weekly(windows) => windows,
        };
        let (first, last) = (
            local_date(self.tz, from_ms).pred_opt(),
            local_date(self.tz, to_ms),
        );
        let mut out = Vec::new();
        let mut day = first.unwrap_or(NaiveDate::MIN);
        while day <= last {
            for w in windows.iter().filter(|w| w.days.contains(day.weekday())) {
                if let Some((s, e)) = w.on(self.tz, day) {
                    let (s, e) = (s.max(from_ms), e.min(to_ms));
                    if s < e {
                        out.push(Interval::raw(s, e));
                    }
                }
            }
            let Some(next) = day.succ_opt() else { break };
            day = next;
        }
        normalize(out)
    }
}

/// Parses an IANA time zone name (`Europe/Berlin`, `America/New_York`, `UTC`).
pub fn parse_tz(name: &str) -> Result<Tz, ReliabilityError> {
    Tz::from_str(name).map_err(|_| ReliabilityError::UnknownTimeZone {
        name: name.to_owned(),
    })
}

/// A schedule and the instant from which it is in effect (until the next version's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleVersion {
    effective_from_ms: i64,
    schedule: Schedule,
}

impl ScheduleVersion {
    /// A version in effect from `effective_from_ms` (an instant in range).
    pub fn new(
        effective_from_ms: i64,
        schedule: Schedule,
    ) -> Result<ScheduleVersion, ReliabilityError> {
        check_instant(effective_from_ms)?;
        Ok(ScheduleVersion {
            effective_from_ms,
            schedule,
        })
    }

    /// When the version takes effect.
    pub fn effective_from_ms(&self) -> i64 {
        self.effective_from_ms
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }
}

/// A GPU's schedule versions, sorted. Before the first version nothing is scheduled (the
/// GPU had not joined); the first version's instant is the GPU's `joined_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleHistory {
    versions: Vec<ScheduleVersion>,
}

impl ScheduleHistory {
    /// Sorts the versions; of versions with the same `effective_from_ms` the last given
    /// wins. Fails with [`ReliabilityError::NoSchedule`] when there is none.
    pub fn new(mut versions: Vec<ScheduleVersion>) -> Result<ScheduleHistory, ReliabilityError> {
        if versions.is_empty() {
            return Err(ReliabilityError::NoSchedule);
        }
        versions.reverse();
        versions.sort_by_key(|v| v.effective_from_ms); // stable: the last given comes first
        versions.dedup_by_key(|v| v.effective_from_ms);
        Ok(ScheduleHistory { versions })
    }

    /// The versions, sorted by `effective_from_ms`.
    pub fn versions(&self) -> &[ScheduleVersion] {
        &self.versions
    }

    /// When the first version took effect.
    pub fn joined_ms(&self) -> i64 {
        self.versions[0].effective_from_ms
    }

    /// The schedule in effect at `t_ms`, or the first one before the GPU joined.
    pub fn at(&self, t_ms: i64) -> &Schedule {
        let idx = self
            .versions
            .partition_point(|v| v.effective_from_ms <= t_ms);
        &self.versions[idx.saturating_sub(1)].schedule
    }

    /// The scheduled instants inside `[from_ms, to_ms)`, each version over its own span,
    /// normalized.
    pub fn scheduled(&self, from_ms: i64, to_ms: i64) -> Vec<Interval> {
        let mut out = Vec::new();
        for (i, v) in self.versions.iter().enumerate() {
            let until = self
                .versions
                .get(i + 1)
                .map_or(INSTANT_MAX_MS, |n| n.effective_from_ms);
            let (s, e) = (from_ms.max(v.effective_from_ms), to_ms.min(until));
            if s < e {
                out.extend(v.schedule.expand(s, e));
            }
        }
        normalize(out)
    }
}

/// The UTC date-time of an instant, clamped into the accepted range.
pub(crate) fn utc(t_ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t_ms.clamp(0, INSTANT_MAX_MS)).unwrap_or(DateTime::UNIX_EPOCH)
}

/// The local date of an instant in `tz`.
pub(crate) fn local_date(tz: Tz, t_ms: i64) -> NaiveDate {
    utc(t_ms).with_timezone(&tz).date_naive()
}

/// The instant of local `date` at `minutes` after midnight (`< 1440`), by the rules in the
/// module doc; `None` only outside chrono's range.
pub(crate) fn resolve_local(tz: Tz, date: NaiveDate, minutes: u16) -> Option<i64> {
    let local = date.and_hms_opt(u32::from(minutes / 60), u32::from(minutes % 60), 0)?;
    match tz.from_local_datetime(&local) {
        chrono::LocalResult::Single(t) => Some(t.timestamp_millis()),
        chrono::LocalResult::Ambiguous(first, _) => Some(first.timestamp_millis()),
        chrono::LocalResult::None => Some(first_instant_at_or_after(tz, local)),
    }
}

/// The first instant whose local time is at or after `local` (which falls in a gap):
/// binary search between one day before and one day after, where the local time is
/// surely before, respectively after (no zone is more than 14 h from UTC).
fn first_instant_at_or_after(tz: Tz, local: NaiveDateTime) -> i64 {
    let base = local.and_utc().timestamp_millis();
    let (mut before, mut after) = (base - DAY_MS, base + DAY_MS);
    while after - before > 1 {
        let mid = before + (after - before) / 2;
        let mid_local =
            DateTime::from_timestamp_millis(mid).map(|t| t.with_timezone(&tz).naive_local());
        if mid_local.is_some_and(|m| m >= local) {
            after = mid;
        } else {
            before = mid;
        }
    }
    after
}
