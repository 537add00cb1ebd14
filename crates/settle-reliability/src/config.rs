//! The configuration of the score, each value checked against its limit.

use crate::ReliabilityError;
use crate::interval::DAY_MS;

const HOUR_MS: i64 = 3_600_000;

/// The longest rolling window: 366 days.
pub const WINDOW_MS_MAX: i64 = 366 * DAY_MS;
/// The longest grace buffer: 1 hour.
pub const GRACE_MS_MAX: i64 = HOUR_MS;
/// The longest notice a maintenance window can be required to have: 30 days.
pub const MAINTENANCE_NOTICE_MIN_MS_MAX: i64 = 30 * DAY_MS;
/// The most jobs that can be required for full job evidence.
pub const JOBS_FULL_EVIDENCE_MAX: u32 = 10_000;
/// The furthest [`listing`](crate::listing) looks ahead for the next listed instant: 366 days.
pub const LISTING_LOOKAHEAD_MS_MAX: i64 = 366 * DAY_MS;

/// The configuration of the score. Build it from [`Config::default`] and the `with_*`
/// setters, which refuse values outside their limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    window_ms: i64,
    grace_ms: i64,
    maintenance_notice_min_ms: i64,
    jobs_full_evidence: u32,
    listing_lookahead_ms: i64,
}

impl Default for Config {
    /// 30-day window, 5-minute grace, 24 h maintenance notice, 10 jobs for full job
    /// evidence, 14 days of listing look-ahead.
    fn default() -> Config {
        Config {
            window_ms: 30 * DAY_MS,
            grace_ms: 5 * 60_000,
            maintenance_notice_min_ms: 24 * HOUR_MS,
            jobs_full_evidence: 10,
            listing_lookahead_ms: 14 * DAY_MS,
        }
    }
}

fn check(field: &'static str, value: i64, min: i64, max: i64) -> Result<(), ReliabilityError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ReliabilityError::InvalidConfig {
            field,
            message: format!("{value} is outside {min}..={max}"),
        })
    }
}

impl Config {
    /// The rolling window ending at `now`, `1 h..=366 days`.
    pub fn with_window_ms(mut self, window_ms: i64) -> Result<Config, ReliabilityError> {
        check("window_ms", window_ms, HOUR_MS, WINDOW_MS_MAX)?;
        self.window_ms = window_ms;
        Ok(self)
    }

    /// Gaps between online intervals shorter than this count as online, `0..=1 h`.
    pub fn with_grace_ms(mut self, grace_ms: i64) -> Result<Config, ReliabilityError> {
        check("grace_ms", grace_ms, 0, GRACE_MS_MAX)?;
        self.grace_ms = grace_ms;
        Ok(self)
    }

    /// The notice that excludes a maintenance window, `0..=30 days`.
    pub fn with_maintenance_notice_min_ms(
        mut self,
        notice_ms: i64,
    ) -> Result<Config, ReliabilityError> {
        check(
            "maintenance_notice_min_ms",
            notice_ms,
            0,
            MAINTENANCE_NOTICE_MIN_MS_MAX,
        )?;
        self.maintenance_notice_min_ms = notice_ms;
        Ok(self)
    }

    /// Jobs in the window that give the job part full evidence, `1..=10 000`.
    pub fn with_jobs_full_evidence(mut self, jobs: u32) -> Result<Config, ReliabilityError> {
        let max = i64::from(JOBS_FULL_EVIDENCE_MAX);
        check("jobs_full_evidence", i64::from(jobs), 1, max)?;
        self.jobs_full_evidence = jobs;
        Ok(self)
    }

    /// How far [`listing`](crate::listing) looks for the next listed instant, `1 h..=366 days`.
    pub fn with_listing_lookahead_ms(
        mut self,
        lookahead_ms: i64,
    ) -> Result<Config, ReliabilityError> {
        check(
            "listing_lookahead_ms",
            lookahead_ms,
            HOUR_MS,
            LISTING_LOOKAHEAD_MS_MAX,
        )?;
        self.listing_lookahead_ms = lookahead_ms;
        Ok(self)
    }

    /// The rolling window.
    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    /// The grace buffer.
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }

    /// The notice that excludes a maintenance window.
    pub fn maintenance_notice_min_ms(&self) -> i64 {
        self.maintenance_notice_min_ms
    }

    /// Jobs for full job evidence.
    pub fn jobs_full_evidence(&self) -> u32 {
        self.jobs_full_evidence
    }

    /// The listing look-ahead.
    pub fn listing_lookahead_ms(&self) -> i64 {
        self.listing_lookahead_ms
    }
}
