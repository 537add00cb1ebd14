//! Property tests: business-day search, run ordering and "no input panics".

use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta};
use proptest::prelude::*;
use settle_calendar::{Calendar, CalendarError, RunKey, Schedule, due_runs, runs_on};

fn covered_date() -> impl Strategy<Value = NaiveDate> {
    let first = NaiveDate::from_ymd_opt(2020, 1, 1).unwrap();
    let last = NaiveDate::from_ymd_opt(2040, 12, 31).unwrap();
    (0..=(last - first).num_days()).prop_map(move |offset| first + TimeDelta::days(offset))
}

fn any_date() -> impl Strategy<Value = NaiveDate> {
    (NaiveDate::MIN.num_days_from_ce()..=NaiveDate::MAX.num_days_from_ce())
        .prop_map(|days| NaiveDate::from_num_days_from_ce_opt(days).unwrap())
}

/// Instants from 2020-01-01 to 2040-12-31, to the second.
fn covered_instant() -> impl Strategy<Value = NaiveDateTime> {
    (covered_date(), 0u32..86_400)
        .prop_map(|(d, s)| d.and_time(NaiveTime::from_num_seconds_from_midnight_opt(s, 0).unwrap()))
}

fn any_time() -> impl Strategy<Value = NaiveTime> {
    (0u32..86_400, 0u32..1_000_000_000)
        .prop_map(|(s, n)| NaiveTime::from_num_seconds_from_midnight_opt(s, n).unwrap())
}

proptest! {
    #[test]
    fn next_business_day_on_or_after_is_the_first_business_day(d in covered_date()) {
        let cal = Calendar::platform_default();
        match cal.next_business_day_on_or_after(d) {
            Ok(next) => {
                prop_assert!(next >= d);
                prop_assert_eq!(cal.is_business_day(next), Ok(true));
                let mut day = d;
                while day < next {
                    prop_assert_eq!(cal.is_business_day(day), Ok(false), "{} lies between", day);
                    day = day.succ_opt().unwrap();
                }
                prop_assert_eq!(cal.next_business_day_after(d), cal.next_business_day_on_or_after(d.succ_opt().unwrap()));
            }
            // Only possible when no business day is left in the data.
            Err(e) => {
                prop_assert_eq!(e, CalendarError::NotCovered { year: 2041 });
                prop_assert!(d > NaiveDate::from_ymd_opt(2040, 12, 24).unwrap());
            }
        }
    }

    #[test]
    fn calendar_queries_never_panic(d in any_date()) {
        let cal = Calendar::platform_default();
        let business = cal.is_business_day(d);
        if !cal.covers(d) && d.weekday().num_days_from_monday() < 5 {
            prop_assert_eq!(business, Err(CalendarError::NotCovered { year: d.year() }));
        }
        let _ = cal.is_holiday(d);
        let _ = cal.next_business_day_after(d);
        let _ = runs_on(&cal, d);
        let _ = RunKey::week_of(d).and_then(|k| k.run_date(&cal));
    }

    #[test]
    fn parsing_arbitrary_text_never_panics(text in "\\PC{0,200}", lines in prop::collection::vec("[0-9 :#a-z-]{0,20}", 0..10)) {
        let _ = Calendar::parse("fuzz", &text);
        let _ = Calendar::parse("fuzz", &format!("covers: 2026-2026\n{}", lines.join("\n")));
        let _ = RunKey::parse("weekly", &text);
        let _ = RunKey::parse("monthly", &text);
    }

    #[test]
    fn parse_errors_point_at_an_existing_line(lines in prop::collection::vec("[0-9 :#a-z-]{0,20}", 0..10)) {
        let text = format!("covers: 2026-2026\n{}", lines.join("\n"));
        if let Err(CalendarError::Parse { line, .. }) = Calendar::parse("fuzz", &text) {
            prop_assert!(line >= 1 && line <= lines.len() + 1);
        }
    }

    /// Checking at `a`, then `b`, then `c` returns exactly the runs of checking once
    /// at `a` then `c`: splitting the checks never skips or repeats a run.
    #[test]
    fn due_runs_split_never_skips_or_repeats(
        a in covered_instant(),
        step1 in 0i64..20 * 86_400,
        step2 in 0i64..20 * 86_400,
        fire in any_time(),
    ) {
        let cal = Calendar::platform_default();
        let schedule = Schedule::new(fire);
        let b = a + TimeDelta::seconds(step1);
        let c = b + TimeDelta::seconds(step2);
        let run = |from, to| due_runs(&cal, &schedule, Some(from), to, 60);
        match (run(a, b), run(b, c), run(a, c)) {
            (Ok(mut first), Ok(second), Ok(whole)) => {
                first.extend(second);
                prop_assert_eq!(&first, &whole);
                // In execution order, each due at its fire instant within (a, c].
                let scheduled: Vec<_> = whole.iter().map(|k| k.scheduled(&cal).unwrap()).collect();
                prop_assert!(scheduled.windows(2).all(|w| w[0] < w[1]));
                for run in &scheduled {
                    let fire_at = schedule.fire_instant(run.run_date);
                    prop_assert!(a < fire_at && fire_at <= c);
                }
            }
            (x, y, z) => {
                for r in [x, y, z] {
                    if let Err(e) = r {
                        prop_assert_eq!(e, CalendarError::NotCovered { year: 2041 });
                    }
                }
            }
        }
    }

    #[test]
    fn due_runs_never_panics(
        last in proptest::option::of(any::<i64>()),
        now in any::<i64>(),
        window in any::<u32>(),
        fire in any_time(),
    ) {
        let cal = Calendar::platform_default();
        // Mostly 1900-2200 (around and beyond cron's and the data's ranges), some extremes.
        let to_instant = |secs: i64| match secs % 50 {
            0 => NaiveDateTime::MIN,
            1 => NaiveDateTime::MAX,
            _ => chrono::DateTime::from_timestamp(secs.rem_euclid(9_500_000_000) - 2_200_000_000, 0)
                .map(|t| t.naive_utc())
                .unwrap_or(NaiveDateTime::MIN),
        };
        let window = window % 50_000;
        let _ = due_runs(&cal, &Schedule { fire_time: fire }, last.map(to_instant), to_instant(now), window);
    }
}
