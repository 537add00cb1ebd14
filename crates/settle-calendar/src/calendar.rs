//! Holiday calendars and business days.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::path::Path;
use std::sync::OnceLock;

use chrono::{Datelike, NaiveDate, Weekday};

use crate::CalendarError;

/// The TARGET2 closing days file shipped with the crate (the default TARGET2 data).
pub const TARGET2_DATA: &str = include_str!("../calendars/target2.txt");

/// The US Federal Reserve holidays file shipped with the crate (observed dates).
pub const US_FEDERAL_RESERVE_DATA: &str = include_str!("../calendars/us-federal-reserve.txt");

/// Smallest year a calendar may cover.
const MIN_YEAR: i32 = 1;
/// Largest year a calendar may cover.
const MAX_YEAR: i32 = 9999;

/// A holiday calendar: a set of dated holidays plus the range of years for which
/// that set is known to be complete.
///
/// A business day is a Monday to Friday that is not a holiday. Outside the covered
/// years the calendar does not know the holidays, so asking whether a *weekday* is a
/// business day there is an error ([`CalendarError::NotCovered`]) rather than a
/// guess: paying out on a bank holiday (or skipping a business day) is a money bug.
/// Weekends need no holiday data and are always answered.
///
/// # File format
///
/// ```text
/// # comment lines start with '#'; blank lines are ignored
/// covers: 2020-2040
/// 2026-01-01  New Year's Day
/// 2026-04-03  Good Friday
/// ```
///
/// * exactly one `covers: FIRST-LAST` line: the (inclusive) years the file lists
///   every holiday of; every dated line must fall within them;
/// * one holiday per line: a `YYYY-MM-DD` date, whitespace, then its name
///   (required, free text); a date may appear only once.
///
/// Parse errors name the 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    name: String,
    first_year: i32,
    last_year: i32,
    holidays: BTreeMap<NaiveDate, String>,
}

impl Calendar {
    /// Builds a calendar from explicit data.
    ///
    /// Fails with [`CalendarError::InvalidCalendar`] if `first_year > last_year`, a
    /// year is outside `1..=9999`, a holiday lies outside the covered years, or a
    /// date is given twice.
    pub fn new(
        name: impl Into<String>,
        first_year: i32,
        last_year: i32,
        holidays: impl IntoIterator<Item = (NaiveDate, String)>,
    ) -> Result<Calendar, CalendarError> {
        let name = name.into();
        check_coverage(first_year, last_year).map_err(|message| {
            CalendarError::InvalidCalendar {
                message: format!("{name}: {message}"),
            }
        })?;
        let mut map = BTreeMap::new();
        for (date, holiday) in holidays {
            if !(first_year..=last_year).contains(&date.year()) {
                return Err(CalendarError::InvalidCalendar {
                    message: format!(
                        "{name}: holiday {date} is outside the covered years {first_year}-{last_year}"
                    ),
                });
            }
            if map.insert(date, holiday).is_some() {
                return Err(CalendarError::InvalidCalendar {
                    message: format!("{name}: date {date} is listed twice"),
                });
            }
        }
        Ok(Calendar {
            name,
            first_year,
            last_year,
            holidays: map,
        })
    }

    /// Parses a calendar file (see the [type documentation](Calendar) for the
    /// format). `name` identifies the calendar in errors and in [`Calendar::name`].
    pub fn parse(name: impl Into<String>, text: &str) -> Result<Calendar, CalendarError> {
        let name = name.into();
        let err = |line: usize, message: String| CalendarError::Parse {
            calendar: name.clone(),
            line,
            message,
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);

        let mut covers: Option<(usize, i32, i32)> = None;
        // date -> (line number, holiday name)
        let mut entries: BTreeMap<NaiveDate, (usize, String)> = BTreeMap::new();

        for (index, raw) in text.lines().enumerate() {
            let line_no = index + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(rest) = line.strip_prefix("covers:") {
                if let Some((first_line, _, _)) = covers {
                    return Err(err(
                        line_no,
                        format!("second `covers:` line (the first is on line {first_line})"),
                    ));
                }
                let (first, last) = parse_year_range(rest.trim()).ok_or_else(|| {
                    err(
                        line_no,
                        format!("expected `covers: FIRST-LAST` (e.g. `covers: 2020-2040`), found {line:?}"),
                    )
                })?;
                check_coverage(first, last).map_err(|message| err(line_no, message))?;
                covers = Some((line_no, first, last));
                continue;
            }

            let (date, holiday) =
                parse_holiday_line(line).map_err(|message| err(line_no, message))?;
            match entries.entry(date) {
                Entry::Occupied(previous) => {
                    return Err(err(
                        line_no,
                        format!("{date} is already listed on line {}", previous.get().0),
                    ));
                }
                Entry::Vacant(slot) => {
                    slot.insert((line_no, holiday.to_owned()));
                }
            }
        }

        let Some((_, first_year, last_year)) = covers else {
            return Err(err(
                0,
                "missing `covers: FIRST-LAST` line stating the years the file is complete for"
                    .to_owned(),
            ));
        };
        if let Some((date, (line_no, _))) = entries
            .iter()
            .find(|(date, _)| !(first_year..=last_year).contains(&date.year()))
        {
            return Err(err(
                *line_no,
                format!("{date} is outside the covered years {first_year}-{last_year}"),
            ));
        }
        Ok(Calendar {
            name,
            first_year,
            last_year,
            holidays: entries
                .into_iter()
                .map(|(date, (_, holiday))| (date, holiday))
                .collect(),
        })
    }

    /// Reads and parses a calendar file; the calendar is named after the file stem
    /// (`/etc/settle/target2.txt` → `target2`).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Calendar, CalendarError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| CalendarError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let name = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        Calendar::parse(name, &text)
    }

    /// The TARGET2 closing days shipped with the crate ([`TARGET2_DATA`]).
    pub fn target2() -> Calendar {
        static CELL: OnceLock<Calendar> = OnceLock::new();
        CELL.get_or_init(|| embedded("target2", TARGET2_DATA))
            .clone()
    }

    /// The US Federal Reserve holidays shipped with the crate
    /// ([`US_FEDERAL_RESERVE_DATA`]).
    pub fn us_federal_reserve() -> Calendar {
        static CELL: OnceLock<Calendar> = OnceLock::new();
        CELL.get_or_init(|| embedded("us-federal-reserve", US_FEDERAL_RESERVE_DATA))
            .clone()
    }

    /// The default platform calendar: the union of [`Calendar::target2`] and
    /// [`Calendar::us_federal_reserve`].
    pub fn platform_default() -> Calendar {
        static CELL: OnceLock<Calendar> = OnceLock::new();
        CELL.get_or_init(|| {
            Calendar::union(&[Calendar::target2(), Calendar::us_federal_reserve()])
                .expect("the shipped calendars cover the same years (checked by the tests)")
        })
        .clone()
    }

    /// The union of several calendars: a day is a holiday if it is one in any of
    /// them. The union covers only the years *all* of them cover (the intersection),
    /// since elsewhere at least one member's holidays are unknown.
    ///
    /// Fails with [`CalendarError::InvalidCalendar`] for an empty slice or when the
    /// covered year ranges have no year in common. Holidays on the same date keep
    /// both names, joined with `" / "`; the union is named `"a+b"`.
    pub fn union(calendars: &[Calendar]) -> Result<Calendar, CalendarError> {
        let Some(first) = calendars.first() else {
            return Err(CalendarError::InvalidCalendar {
                message: "union of no calendars".to_owned(),
            });
        };
        let first_year = calendars
            .iter()
            .map(|c| c.first_year)
            .max()
            .unwrap_or(first.first_year);
        let last_year = calendars
            .iter()
            .map(|c| c.last_year)
            .min()
            .unwrap_or(first.last_year);
        let name = calendars
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        if first_year > last_year {
            return Err(CalendarError::InvalidCalendar {
                message: format!("{name}: the calendars cover no common year"),
            });
        }
        let mut holidays: BTreeMap<NaiveDate, String> = BTreeMap::new();
        for calendar in calendars {
            for (date, holiday) in &calendar.holidays {
                if !(first_year..=last_year).contains(&date.year()) {
                    continue;
                }
                match holidays.entry(*date) {
                    Entry::Vacant(slot) => {
                        slot.insert(holiday.clone());
                    }
                    Entry::Occupied(mut slot) => {
                        if slot.get() != holiday {
                            let joined = format!("{} / {holiday}", slot.get());
                            slot.insert(joined);
                        }
                    }
                }
            }
        }
        Ok(Calendar {
            name,
            first_year,
            last_year,
            holidays,
        })
    }

    /// The calendar's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The first year the holiday data covers.
    pub fn first_year(&self) -> i32 {
        self.first_year
    }

    /// The last year (inclusive) the holiday data covers.
    pub fn last_year(&self) -> i32 {
        self.last_year
    }

    /// Whether `date`'s year is within the covered years.
    pub fn covers(&self, date: NaiveDate) -> bool {
        (self.first_year..=self.last_year).contains(&date.year())
    }

    /// All holidays, in date order.
    pub fn holidays(&self) -> impl Iterator<Item = (NaiveDate, &str)> + '_ {
        self.holidays
            .iter()
            .map(|(date, name)| (*date, name.as_str()))
    }

    /// The name of the holiday on `date`, if it is one (`None` also for uncovered
    /// years).
    pub fn holiday_name(&self, date: NaiveDate) -> Option<&str> {
        self.holidays.get(&date).map(String::as_str)
    }

    /// Whether `date` is a holiday (whatever its weekday).
    ///
    /// Fails with [`CalendarError::NotCovered`] if the year is not covered.
    pub fn is_holiday(&self, date: NaiveDate) -> Result<bool, CalendarError> {
        self.check_covered(date)?;
        Ok(self.holidays.contains_key(&date))
    }

    /// Whether `date` is a business day: Monday to Friday and not a holiday.
    ///
    /// Saturdays and Sundays are `Ok(false)` for any year; a weekday of a year the
    /// calendar does not cover fails with [`CalendarError::NotCovered`].
    pub fn is_business_day(&self, date: NaiveDate) -> Result<bool, CalendarError> {
        if is_weekend(date) {
            return Ok(false);
        }
        Ok(!self.is_holiday(date)?)
    }

    /// The first business day on or after `date` (`date` itself if it is one).
    ///
    /// Fails with [`CalendarError::NotCovered`] when the search reaches a weekday of
    /// an uncovered year.
    pub fn next_business_day_on_or_after(
        &self,
        date: NaiveDate,
    ) -> Result<NaiveDate, CalendarError> {
        let mut day = date;
        // Terminates: each step either returns, or moves one day forward within a
        // finite range of covered years (past it, the first weekday errors).
        loop {
            if self.is_business_day(day)? {
                return Ok(day);
            }
            day = day.succ_opt().ok_or(CalendarError::DateOutOfRange)?;
        }
    }

    /// The first business day strictly after `date`.
    ///
    /// Fails like [`Calendar::next_business_day_on_or_after`].
    pub fn next_business_day_after(&self, date: NaiveDate) -> Result<NaiveDate, CalendarError> {
        let next = date.succ_opt().ok_or(CalendarError::DateOutOfRange)?;
        self.next_business_day_on_or_after(next)
    }

    fn check_covered(&self, date: NaiveDate) -> Result<(), CalendarError> {
        if self.covers(date) {
            Ok(())
        } else {
            Err(CalendarError::NotCovered { year: date.year() })
        }
    }
}

/// A holiday line, `YYYY-MM-DD Name`: its date and name, or what is wrong with it.
fn parse_holiday_line(line: &str) -> Result<(NaiveDate, &str), String> {
    let (date_text, holiday) = match line.split_once(char::is_whitespace) {
        Some((date_text, holiday)) => (date_text, holiday.trim()),
        None => (line, ""),
    };
    let date = parse_iso_date(date_text)
        .ok_or_else(|| format!("expected a `YYYY-MM-DD` date, found {date_text:?}"))?;
    if holiday.is_empty() {
        return Err(format!("missing holiday name after {date}"));
    }
    Ok((date, holiday))
}

/// Parses one of the data files embedded in the crate.
fn embedded(name: &str, text: &str) -> Calendar {
    Calendar::parse(name, text).expect("the shipped calendar files parse (checked by the tests)")
}

fn is_weekend(date: NaiveDate) -> bool {
    matches!(date.weekday(), Weekday::Sat | Weekday::Sun)
}

fn check_coverage(first_year: i32, last_year: i32) -> Result<(), String> {
    if first_year > last_year {
        return Err(format!(
            "covered years {first_year}-{last_year} are reversed"
        ));
    }
    if first_year < MIN_YEAR || last_year > MAX_YEAR {
        return Err(format!(
            "covered years {first_year}-{last_year} are outside {MIN_YEAR}-{MAX_YEAR}"
        ));
    }
    Ok(())
}

/// Parses `FIRST-LAST` (two years of 1 to 4 digits).
fn parse_year_range(text: &str) -> Option<(i32, i32)> {
    let (first, last) = text.split_once('-')?;
    Some((parse_year(first.trim())?, parse_year(last.trim())?))
}

fn parse_year(text: &str) -> Option<i32> {
    if text.is_empty() || text.len() > 4 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Parses exactly `YYYY-MM-DD` (zero-padded, four-digit year).
pub(crate) fn parse_iso_date(text: &str) -> Option<NaiveDate> {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = &bytes[range];
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let year = i32::try_from(digits(0..4)?).ok()?;
    NaiveDate::from_ymd_opt(year, digits(5..7)?, digits(8..10)?)
}
