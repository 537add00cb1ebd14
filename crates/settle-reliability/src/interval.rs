//! Half-open intervals of UTC milliseconds and the set operations the score needs.
//!
//! Every set operation takes and returns *normalized* lists: sorted by start, disjoint and
//! not touching (`[0, 5)` and `[5, 9)` are one interval `[0, 9)`). Each is one linear pass
//! (two pointers), so a GPU's computation is `O(n log n)` for the one sort of its reported
//! intervals and `O(n)` after that.

use crate::ReliabilityError;

/// The largest instant accepted: 9999-12-31T23:59:59.999Z in UTC milliseconds.
pub const INSTANT_MAX_MS: i64 = 253_402_300_799_999;

/// One day in milliseconds (the step of the [trend](crate::trend)).
pub const DAY_MS: i64 = 86_400_000;

/// A half-open interval `[start_ms, end_ms)` of UTC milliseconds, never empty.
///
/// Used for the online intervals the agent reports, maintenance windows and the
/// scheduled time the crate derives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Interval {
    start_ms: i64,
    end_ms: i64,
}

impl Interval {
    /// Parses `[start_ms, end_ms)`; both ends must be instants in
    /// `0..=INSTANT_MAX_MS` and `start_ms < end_ms`.
    pub fn new(start_ms: i64, end_ms: i64) -> Result<Interval, ReliabilityError> {
        check_instant(start_ms)?;
        check_instant(end_ms)?;
        if start_ms >= end_ms {
            return Err(ReliabilityError::InvalidInterval { start_ms, end_ms });
        }
        Ok(Interval { start_ms, end_ms })
    }

    /// An interval the crate computed itself (`start < end` holds by construction).
    pub(crate) fn raw(start_ms: i64, end_ms: i64) -> Interval {
        debug_assert!(start_ms < end_ms, "empty interval [{start_ms}, {end_ms})");
        Interval { start_ms, end_ms }
    }

    /// The first instant inside the interval.
    pub fn start_ms(&self) -> i64 {
        self.start_ms
    }

    /// The first instant after the interval.
    pub fn end_ms(&self) -> i64 {
        self.end_ms
    }

    /// The length in milliseconds (always positive).
    pub fn len_ms(&self) -> i64 {
        self.end_ms - self.start_ms
    }

    /// Whether `t_ms` lies inside `[start_ms, end_ms)`.
    pub fn contains(&self, t_ms: i64) -> bool {
        self.start_ms <= t_ms && t_ms < self.end_ms
    }
}

/// Fails unless `ms` is in `0..=INSTANT_MAX_MS`.
pub(crate) fn check_instant(ms: i64) -> Result<i64, ReliabilityError> {
    if (0..=INSTANT_MAX_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(ReliabilityError::InstantOutOfRange { ms })
    }
}

/// `ms` clamped into `0..=INSTANT_MAX_MS` (for the caller's `now`).
pub(crate) fn clamp_instant(ms: i64) -> i64 {
    ms.clamp(0, INSTANT_MAX_MS)
}

/// Sorts and merges overlapping, repeated and touching intervals.
pub(crate) fn normalize(mut intervals: Vec<Interval>) -> Vec<Interval> {
    intervals.sort_unstable();
    let mut out: Vec<Interval> = Vec::with_capacity(intervals.len());
    for iv in intervals {
        match out.last_mut() {
            Some(last) if iv.start_ms <= last.end_ms => last.end_ms = last.end_ms.max(iv.end_ms),
            _ => out.push(iv),
        }
    }
    out
}

/// The parts of a normalized list inside `[from_ms, to_ms)`, found by binary search.
pub(crate) fn clip(intervals: &[Interval], from_ms: i64, to_ms: i64) -> Vec<Interval> {
    let first = intervals.partition_point(|iv| iv.end_ms <= from_ms);
    intervals[first..]
        .iter()
        .take_while(|iv| iv.start_ms < to_ms)
        .filter_map(|iv| {
            let (s, e) = (iv.start_ms.max(from_ms), iv.end_ms.min(to_ms));
            (s < e).then(|| Interval::raw(s, e))
        })
        .collect()
}

/// The intersection of two normalized lists.
pub(crate) fn intersect(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        let s = a[i].start_ms.max(b[j].start_ms);
        let e = a[i].end_ms.min(b[j].end_ms);
        if s < e {
            out.push(Interval::raw(s, e));
        }
        if a[i].end_ms < b[j].end_ms {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// `a` without `b`, both normalized.
pub(crate) fn subtract(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    let mut out = Vec::new();
    let mut j = 0;
    for iv in a {
        let mut cur = iv.start_ms;
        while j < b.len() && b[j].end_ms <= cur {
            j += 1;
        }
        let mut k = j;
        while k < b.len() && b[k].start_ms < iv.end_ms && cur < iv.end_ms {
            if b[k].start_ms > cur {
                out.push(Interval::raw(cur, b[k].start_ms));
            }
            cur = cur.max(b[k].end_ms);
            k += 1;
        }
        if cur < iv.end_ms {
            out.push(Interval::raw(cur, iv.end_ms));
        }
    }
    out
}

/// The grace buffer: joins online intervals (normalized) separated by a gap shorter than
/// `grace_ms`, and extends the last interval before `now` to `now` when the gap after it
/// is shorter than `grace_ms` (the agent reports with a delay). Intervals that end more
/// than `grace_ms` before `from` and those starting at or after `now` are left out.
pub(crate) fn fill_gaps(online: &[Interval], grace_ms: i64, from: i64, now: i64) -> Vec<Interval> {
    let first = online.partition_point(|iv| iv.end_ms < from - grace_ms);
    let mut out: Vec<Interval> = Vec::new();
    for iv in online[first..].iter().take_while(|iv| iv.start_ms < now) {
        match out.last_mut() {
            Some(last) if iv.start_ms - last.end_ms < grace_ms => last.end_ms = iv.end_ms,
            _ => out.push(*iv),
        }
    }
    if let Some(last) = out.last_mut()
        && last.end_ms < now
        && now - last.end_ms < grace_ms
    {
        last.end_ms = now;
    }
    out
}

/// The summed length of a normalized list.
pub(crate) fn total_ms(intervals: &[Interval]) -> i64 {
    intervals.iter().map(Interval::len_ms).sum()
}

/// For each of the sorted `bounds`, the length of `intervals` (normalized) before it:
/// `out[k] = |intervals ∩ (-∞, bounds[k])|`. One pass over both lists.
pub(crate) fn cumulative_ms(intervals: &[Interval], bounds: &[i64]) -> Vec<i64> {
    let mut out = Vec::with_capacity(bounds.len());
    let (mut i, mut done) = (0, 0);
    for &b in bounds {
        while i < intervals.len() && intervals[i].end_ms <= b {
            done += intervals[i].len_ms();
            i += 1;
        }
        let partial = match intervals.get(i) {
            Some(iv) if iv.start_ms < b => b - iv.start_ms,
            _ => 0,
        };
        out.push(done + partial);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ivs(pairs: &[(i64, i64)]) -> Vec<Interval> {
        pairs.iter().map(|&(s, e)| Interval::raw(s, e)).collect()
    }

    #[test]
    fn set_operations() {
        let a = normalize(ivs(&[(5, 9), (0, 5), (20, 30), (22, 25)]));
        assert_eq!(a, ivs(&[(0, 9), (20, 30)]));
        let b = ivs(&[(3, 4), (8, 21), (29, 40)]);
        assert_eq!(
            intersect(&a, &b),
            ivs(&[(3, 4), (8, 9), (20, 21), (29, 30)])
        );
        assert_eq!(subtract(&a, &b), ivs(&[(0, 3), (4, 8), (21, 29)]));
        assert_eq!(clip(&a, 4, 25), ivs(&[(4, 9), (20, 25)]));
        assert_eq!(total_ms(&a), 19);
        assert_eq!(
            cumulative_ms(&a, &[0, 4, 9, 25, 100]),
            vec![0, 4, 9, 14, 19]
        );
    }

    #[test]
    fn interval_parse() {
        assert_eq!(Interval::new(5, 5).unwrap_err().code(), "invalid_interval");
        assert_eq!(
            Interval::new(-1, 5).unwrap_err().code(),
            "instant_out_of_range"
        );
        assert_eq!(Interval::new(2, 5).unwrap().len_ms(), 3);
    }
}
