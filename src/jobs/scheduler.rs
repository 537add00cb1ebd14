//! The payout run scheduler of `settle serve` (SPEC §5): every day at the fire time
//! (default 00:05 UTC) it starts the runs due that day, weekly before monthly; after
//! downtime it catches up every missed run since the last completed one, in date order,
//! and says so loudly (log and metric) when that reaches further back than
//! `catch_up_warn_days`.
//!
//! Starting a run is idempotent ([`Ledger::run_payouts`]), so a run found due twice
//! (restart, several instances) is finished once. The clock is injected: tests drive
//! weeks in milliseconds with a [`crate::ledger::ManualClock`] and call [`Scheduler::tick`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{NaiveDateTime, TimeDelta};
use settle_calendar::{Calendar, DEFAULT_CATCH_UP_WINDOW_DAYS, RunKey, Schedule, due_runs};

/// No limit on how far back missed runs are caught up (SPEC §5).
const CATCH_UP_UNLIMITED_DAYS: u32 = u32::MAX;

use crate::config::RunConfig;
pub use crate::config::SchedulerConfig;
use crate::domain::DomainError;
use crate::ledger::runs::RunReport;
use crate::ledger::{Actor, Clock, Ledger, LedgerError};

/// The longest the loop sleeps before looking at the clock again (a suspended machine or
/// a clock step must not delay a run by a day).
pub const SLEEP_MAX: Duration = Duration::from_secs(60);
/// How long the loop waits before retrying a tick that failed (database unavailable).
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

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
    catch_up_warn_days: u32,
    run_config: RunConfig,
    actor: Actor,
    last_checked: Option<NaiveDateTime>,
    metrics: &'static crate::metrics::Metrics,
}

fn naive(ms: i64) -> Result<NaiveDateTime, LedgerError> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.naive_utc())
        .ok_or_else(|| {
            LedgerError::Rejected(DomainError::new("clock_out_of_range", format!("{ms} ms")))
        })
}

impl Scheduler {
    /// A scheduler with the default schedule (00:05 UTC) and catch-up warning (35 days).
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
            catch_up_warn_days: DEFAULT_CATCH_UP_WINDOW_DAYS,
            run_config,
            actor: Actor::system("scheduler"),
            last_checked: None,
            metrics: crate::metrics::global(),
        }
    }

    /// Reports its gauges to `metrics` instead of the process-wide registry (a test that
    /// shares its process with other schedulers reads its own).
    pub fn with_metrics(mut self, metrics: &'static crate::metrics::Metrics) -> Scheduler {
        self.metrics = metrics;
        self
    }

    pub(crate) fn with_schedule(mut self, schedule: Schedule) -> Scheduler {
        self.schedule = schedule;
        self
    }

    pub fn with_catch_up_warn_days(mut self, days: u32) -> Scheduler {
        self.catch_up_warn_days = days;
        self
    }

    /// Applies a [`SchedulerConfig`].
    pub fn with_config(self, config: &SchedulerConfig) -> Result<Scheduler, DomainError> {
        Ok(self
            .with_schedule(config.schedule()?)
            .with_catch_up_warn_days(config.catch_up_warn_days))
    }

    /// The `now` of the last successful tick (`None` before the first).
    pub fn last_checked(&self) -> Option<NaiveDateTime> {
        self.last_checked
    }

    /// Where the runs due now start: the last successful tick, or on the first tick what
    /// the ledger says ([`crate::ledger::runs::catch_up_start_ms`]).
    async fn since(&self, now: NaiveDateTime) -> Result<NaiveDateTime, LedgerError> {
        if let Some(checked) = self.last_checked {
            return Ok(checked);
        }
        match crate::ledger::runs::catch_up_start_ms(&self.ledger.store, &self.calendar).await? {
            // Just before that instant, so a fire instant at it is due.
            Some(ms) => Ok(naive(ms)? - TimeDelta::milliseconds(1)),
            None => Ok(now),
        }
    }

    /// The runs due now (every run whose fire instant passed since the last successful
    /// tick, or since the last completed run on the first), in execution order, without
    /// starting them.
    pub async fn due(&self) -> Result<Vec<RunKey>, LedgerError> {
        let now = naive(self.clock.now_ms())?;
        self.due_since(self.since(now).await?, now)
    }

    fn due_since(
        &self,
        since: NaiveDateTime,
        now: NaiveDateTime,
    ) -> Result<Vec<RunKey>, LedgerError> {
        let due = due_runs(
            &self.calendar,
            &self.schedule,
            Some(since),
            now,
            CATCH_UP_UNLIMITED_DAYS,
        )
        .map_err(|e| LedgerError::Rejected(DomainError::new(e.code(), e.to_string())))?;
        let behind_days = (now - since).num_days().max(0);
        let metrics = self.metrics;
        metrics.gauge(
            "settle_scheduler_catch_up_days",
            "Days back the scheduler's last check reached (missed runs are all caught up)",
            &[],
            behind_days,
        );
        metrics.gauge(
            "settle_scheduler_due_runs",
            "Payout runs due at the scheduler's last check",
            &[],
            due.len() as i64,
        );
        if behind_days > i64::from(self.catch_up_warn_days) {
            tracing::error!(
                behind_days,
                warn_days = self.catch_up_warn_days,
                runs = due.len(),
                first = due.first().map(|r| r.to_string()),
                "the scheduler is catching up missed payout runs from further back than scheduler.catch_up_warn_days; every one is run, in date order"
            );
        }
        Ok(due)
    }

    /// Starts every due run in order, each idempotently, then destroys the data keys whose
    /// retention ended (`Ledger::destroy_due_keys`). On success the check is
    /// remembered; if a run fails, the runs after it are not started and the next tick
    /// tries again from the same point (the runs already finished are no-ops then).
    pub async fn tick(&mut self) -> Result<Vec<Started>, LedgerError> {
        let now = naive(self.clock.now_ms())?;
        let due = self.due_since(self.since(now).await?, now)?;
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
        // Erased providers' data keys whose retention ended (SPEC §11): destroyed at every
        // tick, never while one of their payouts is open.
        match self.ledger.destroy_due_keys().await {
            Ok(destroyed) if !destroyed.is_empty() => {
                tracing::info!(
                    keys = destroyed.len(),
                    "data keys of erased providers destroyed"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "destroying due data keys failed; the next tick tries again")
            }
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
