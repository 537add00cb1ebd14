//! The payout run scheduler of `settle serve` (SPEC §5): every day at the fire time
//! (default 00:05 UTC) it starts the runs due that day, weekly before monthly; after
//! downtime it catches up the missed runs of the catch-up window in date order.
//!
//! Starting a run is idempotent ([`Ledger::run_payouts`]), so a run found due twice
//! (restart, several instances) is finished once. The clock is injected: tests drive
//! weeks in milliseconds with a [`crate::ledger::ManualClock`] and call [`Scheduler::tick`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{NaiveDateTime, NaiveTime, TimeDelta};
use serde::Deserialize;
use settle_calendar::{Calendar, DEFAULT_CATCH_UP_WINDOW_DAYS, RunKey, Schedule, due_runs};

use crate::config::RunConfig;
use crate::domain::DomainError;
use crate::ledger::runs::RunReport;
use crate::ledger::{Actor, Clock, Ledger, LedgerError};

/// The longest the loop sleeps before looking at the clock again (a suspended machine or
/// a clock step must not delay a run by a day).
pub const SLEEP_MAX: Duration = Duration::from_secs(60);
/// How long the loop waits before retrying a tick that failed (database unavailable).
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

/// When the scheduler fires and how far back it catches up.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Time of day (UTC) of the daily check, `HH:MM` or `HH:MM:SS` (default `00:05`).
    pub fire_time: String,
    /// Missed runs older than this many days are not caught up (default 35); start them
    /// by hand (`settle run weekly --date …`).
    pub catch_up_window_days: u32,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            fire_time: "00:05".to_owned(),
            catch_up_window_days: DEFAULT_CATCH_UP_WINDOW_DAYS,
        }
    }
}

impl SchedulerConfig {
    /// The calendar crate's schedule of this configuration.
    pub fn schedule(&self) -> Result<Schedule, DomainError> {
        NaiveTime::parse_from_str(&self.fire_time, "%H:%M:%S")
            .or_else(|_| NaiveTime::parse_from_str(&self.fire_time, "%H:%M"))
            .map(Schedule::new)
            .map_err(|_| {
                DomainError::new(
                    "invalid_fire_time",
                    format!(
                        "fire_time must be HH:MM or HH:MM:SS, got {:?}",
                        self.fire_time
                    ),
                )
            })
    }
}

/// One run a tick started, and how it ended.
#[derive(Debug)]
pub struct Started {
    pub run: RunKey,
    pub report: RunReport,
}

/// Starts the due payout runs.
pub struct Scheduler {
    ledger: Ledger,
    clock: Arc<dyn Clock>,
    calendar: Calendar,
    schedule: Schedule,
    catch_up_window_days: u32,
    run_config: RunConfig,
    actor: Actor,
    last_checked: Option<NaiveDateTime>,
}

fn naive(ms: i64) -> Result<NaiveDateTime, LedgerError> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.naive_utc())
        .ok_or_else(|| {
            LedgerError::Rejected(DomainError::new("clock_out_of_range", format!("{ms} ms")))
        })
}

impl Scheduler {
    /// A scheduler with the default schedule (00:05 UTC) and catch-up window (35 days).
    pub fn new(
        ledger: Ledger,
        clock: Arc<dyn Clock>,
        calendar: Calendar,
        run_config: RunConfig,
    ) -> Scheduler {
        Scheduler {
            ledger,
            clock,
            calendar,
            schedule: Schedule::default(),
            catch_up_window_days: DEFAULT_CATCH_UP_WINDOW_DAYS,
            run_config,
            actor: Actor::system("scheduler"),
            last_checked: None,
        }
    }

    pub fn with_schedule(mut self, schedule: Schedule) -> Scheduler {
        self.schedule = schedule;
        self
    }

    pub fn with_catch_up_window_days(mut self, days: u32) -> Scheduler {
        self.catch_up_window_days = days;
        self
    }

    /// Applies a [`SchedulerConfig`].
    pub fn with_config(self, config: &SchedulerConfig) -> Result<Scheduler, DomainError> {
        Ok(self
            .with_schedule(config.schedule()?)
            .with_catch_up_window_days(config.catch_up_window_days))
    }

    /// The `now` of the last successful tick (`None` before the first).
    pub fn last_checked(&self) -> Option<NaiveDateTime> {
        self.last_checked
    }

    /// The runs due now (since the last successful tick, within the catch-up window), in
    /// execution order, without starting them.
    pub fn due(&self) -> Result<Vec<RunKey>, LedgerError> {
        let now = naive(self.clock.now_ms())?;
        due_runs(
            &self.calendar,
            &self.schedule,
            self.last_checked,
            now,
            self.catch_up_window_days,
        )
        .map_err(|e| LedgerError::Rejected(DomainError::new(e.code(), e.to_string())))
    }

    /// Starts every due run in order, each idempotently. On success the check is
    /// remembered; if a run fails, the runs after it are not started and the next tick
    /// tries again from the same point (the runs already finished are no-ops then).
    pub async fn tick(&mut self) -> Result<Vec<Started>, LedgerError> {
        let now = naive(self.clock.now_ms())?;
        let due = self.due()?;
        let mut started = Vec::with_capacity(due.len());
        for run in due {
            tracing::info!(run = %run, "starting due payout run");
            let report = self
                .ledger
                .run_payouts(run, &self.calendar, &self.run_config, &self.actor)
                .await
                .inspect_err(|e| tracing::error!(run = %run, error = %e, "payout run failed"))?;
            started.push(Started { run, report });
        }
        self.last_checked = Some(now);
        Ok(started)
    }

    /// The next fire instant strictly after `now`.
    pub fn next_fire_after(&self, now: NaiveDateTime) -> NaiveDateTime {
        let today = self.schedule.fire_instant(now.date());
        if today > now {
            today
        } else {
            self.schedule.fire_instant(now.date() + TimeDelta::days(1))
        }
    }

    /// Ticks now and then at every fire time until `shutdown` resolves. A tick in progress
    /// when shutdown arrives is abandoned: every candidate's transaction either committed
    /// or rolls back, and the next start of the run finishes it.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Scheduler {
        tokio::pin!(shutdown);
        loop {
            let wait = tokio::select! {
                _ = &mut shutdown => return self,
                result = self.tick() => match result {
                    Ok(started) => {
                        if !started.is_empty() {
                            tracing::info!(runs = started.len(), "scheduler tick done");
                        }
                        match naive(self.clock.now_ms()) {
                            Ok(now) => (self.next_fire_after(now) - now)
                                .to_std()
                                .unwrap_or(Duration::ZERO)
                                .min(SLEEP_MAX),
                            Err(_) => RETRY_AFTER,
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "scheduler tick failed; retrying");
                        RETRY_AFTER
                    }
                },
            };
            tokio::select! {
                _ = &mut shutdown => return self,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}
