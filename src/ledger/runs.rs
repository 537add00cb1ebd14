//! Payout runs (SPEC §5): the weekly and the monthly run, each candidate decided once.
//!
//! A run is keyed by its [`RunKey`]. Candidates are decided in chunks of
//! `runs.candidates_per_tx` (on SQLite, which has one writer, of `candidates_in_flight`
//! times that), one transaction a chunk over the chunk's provider streams: the
//! chunk's state (decided keys, registry rows, the figures of `available`) is read with one
//! statement each, then every candidate is decided by the pure [`decide`] and its
//! `payout_run.decided` event, and for a held or paid decision the `payout.created`
//! (+ `payout.held`) events, are appended on its own stream, so a payout's amount leaves
//! `payable` in the transaction that creates it. The decision's idempotency key
//! (`run:{kind}:{key}:{provider}`) makes a second start, a concurrent start or a restart
//! after a crash skip the candidates already decided; `payout_run.completed` on the
//! platform stream closes the run once. Nothing depends on a chunk's atomicity: each
//! candidate's events are the same as if it had a transaction of its own.
//!
//! The decisions read exact aggregates: a chunk's streams are folded in committed steps
//! before its locks (`Store::catch_up_in_steps`, unless its state was read ahead), and what
//! is left under them (`WriteTx::fold_locked`). With one chunk in flight (always on
//! SQLite), the next chunk's state is read ahead in a snapshot of its own while the chunk
//! before commits ([`Ledger::read_ahead`], only where the projections hold every stream up
//! to its head); it decides only if every stream of the chunk is still at that head and no
//! `settle rebuild` ran since, else the chunk reads again under its lock. The rules in
//! force are the ledger's policy, not a process's; a provider touched by a gated event that
//! no verified approval ran is held (`control_unproven`), and a EUR payout without a fresh
//! FX rate too (`fx_stale`).
//!
//! Crash tests abort the process at named [failpoints](failpoint).

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{Datelike, NaiveDate, Weekday};
use futures::TryStreamExt;
use rust_decimal::Decimal;
use serde::Serialize;
use settle_calendar::{Calendar, CalendarError, RunKey};
use sha2::{Digest, Sha256};

use super::registry::ProviderRecord;
use super::{Actor, Ledger, LedgerError, content_hash, find_idem_in_stream, reject};
pub use crate::config::RunConfig;
use crate::domain::DomainError;
use crate::domain::decision::{Candidate, Decision, Figures, Outcome, RunPolicy, decide};
use crate::domain::event::*;
use crate::domain::ids::{PayoutId, ProviderId};
use crate::domain::time::{date_start_ms, day_number, format_ms, naive_ms};
use crate::store::keys::{KeyHashes, StreamKey};
use crate::store::{Dialect, NewEvent, Store, WriteTx};

pub(crate) const MS_PER_HOUR: i64 = 3_600_000;

pub use crate::failpoint::{FAILPOINT_ENV, failpoint};

/// The named failpoints of a run, in the order a run reaches them.
pub mod failpoints {
    /// After the cutoff check, before any candidate is read.
    pub const RUN_START: &str = "run.start";
    /// Before a candidate's transaction begins (reached once per candidate not decided
    /// before this start).
    pub const BEFORE_DECIDE: &str = "run.before_decide";
    /// Inside a candidate's transaction, its events appended but not committed.
    pub const DECIDE_BEFORE_COMMIT: &str = "run.decide_before_commit";
    /// After a candidate's transaction committed (once per candidate not decided before
    /// this start).
    pub const AFTER_DECIDE: &str = "run.after_decide";
    /// After every candidate is decided, before `payout_run.completed`.
    pub const BEFORE_COMPLETE: &str = "run.before_complete";
    /// After `payout_run.completed` committed, before the report is read.
    pub const AFTER_COMPLETE: &str = "run.after_complete";

    pub const ALL: [&str; 6] = [
        RUN_START,
        BEFORE_DECIDE,
        DECIDE_BEFORE_COMMIT,
        AFTER_DECIDE,
        BEFORE_COMPLETE,
        AFTER_COMPLETE,
    ];
}

use crate::store::runs as rows;
pub use crate::store::runs::{RunCandidate, RunSummary};

/// Count and amount of one decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DecisionTotal {
    pub count: i64,
    pub amount_micro_usdc: i64,
}

/// A run as recorded: every candidate with its decision, and the totals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunReport {
    pub run_kind: String,
    pub run_key: String,
    pub cutoff_ms: i64,
    /// `YYYY-MM-DD`.
    pub run_date: String,
    /// Whether `payout_run.completed` is on the ledger.
    pub completed: bool,
    pub completed_at_ms: Option<i64>,
    /// In provider id order.
    pub candidates: Vec<RunCandidate>,
    /// Per decision (every decision listed, zero when none).
    pub totals: BTreeMap<String, DecisionTotal>,
    /// Sum of the payouts created (held and paid).
    pub payouts_micro_usdc: i64,
    pub payouts: i64,
}

/// The dashboard's "next payout": what the next run that can pay the provider would pay if
/// nothing else arrived.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProjectedPayout {
    pub run_kind: String,
    pub run_key: String,
    /// `YYYY-MM-DD`.
    pub run_date: String,
    pub amount_micro_usdc: i64,
    /// The decision that run would take (`paid`, `held`, or why it would not pay).
    pub decision: String,
}

fn calendar_error(e: CalendarError) -> LedgerError {
    LedgerError::Rejected(DomainError::new(e.code(), e.to_string()))
}

/// The idempotency key of a candidate's decision.
pub(crate) fn decision_key(run: &RunKey, provider_id: &str) -> String {
    format!("run:{}:{}:{provider_id}", run.kind(), run.key_string())
}

/// The idempotency key of the event `step` (`created`, `held`) a decision appends for its
/// payout: the decision's key, `/` and the step. `/` is outside the id grammar, so no provider
/// id makes it another candidate's decision key, and it sorts right after the decision's own
/// key: the keys of a chunk of candidates (in provider order) land side by side in the
/// `events (idem_key, stream)` index instead of at the random places of their payout ids (a
/// hash), which wrote a page of that index per payout (measured in `ops/bench/runs.md`).
fn payout_event_key(run: &RunKey, provider_id: &str, step: &str) -> String {
    format!("{}/{step}", decision_key(run, provider_id))
}

/// The idempotency key of a run's completion.
pub(crate) fn completion_key(run: &RunKey) -> String {
    format!("run:{}:{}:completed", run.kind(), run.key_string())
}

/// The deterministic payout id of a run's payout to a provider: `po-` and 24 hex digits
/// of SHA-256(`kind|key|provider`), 27 characters (a SEPA EndToEndId holds 35).
pub fn payout_id(run: &RunKey, provider_id: &str) -> PayoutId {
    let digest = Sha256::digest(format!("{}|{}|{provider_id}", run.kind(), run.key_string()));
    // `-`, not `_`: the id is the SEPA EndToEndId (Max35, SEPA character set).
    PayoutId::parse(&format!("po-{}", &hex::encode(digest)[..24]))
        .expect("po- and 24 hex digits are inside the id grammar")
}

/// The run's cutoff in milliseconds.
pub(crate) fn cutoff_ms(run: &RunKey) -> Result<i64, LedgerError> {
    Ok(naive_ms(run.cutoff().map_err(calendar_error)?))
}

/// The run's minimum payout under `config`.
pub(crate) fn minimum_micro_usdc(run: &RunKey, config: &RunConfig) -> i64 {
    match run {
        RunKey::Weekly { .. } => config.weekly_minimum_micro_usdc,
        RunKey::Monthly { .. } => config.monthly_minimum_micro_usdc,
    }
}

fn is_candidate(run: &RunKey, provider: &ProviderRecord) -> bool {
    provider.status != ProviderStatus::Suspended
        && match run {
            RunKey::Weekly { .. } => provider.schedule == Schedule::Weekly,
            RunKey::Monthly { .. } => true,
        }
}

/// The latest FX rate recorded at or before `now_ms`: `(recorded_at_ms, eur_per_usd)`.
pub async fn latest_fx_rate(
    conn: &mut crate::store::Conn,
    now_ms: i64,
) -> Result<Option<(i64, Decimal)>, LedgerError> {
    let Some((recorded_at_ms, text)) = rows::latest_fx_rate(conn, now_ms).await? else {
        return Ok(None);
    };
    let rate = text.parse::<Decimal>().map_err(|_| {
        DomainError::new(
            "corrupt_projection",
            format!("fx rate {text:?} is no decimal"),
        )
    })?;
    Ok(Some((recorded_at_ms, rate)))
}

/// EUR cents of a bank payout of `amount_micro_usdc` (whole cents):
/// `round_half_even(USD cents × eur_per_usd)`.
pub use crate::domain::payout::eur_cents;

/// Where the scheduler's catch-up starts on its first tick (SPEC §5: every missed run is
/// caught up): the start of the run date of the latest completed run (its date's runs are
/// looked at again; a completed one is a no-op), else the start of the day of the first
/// provider registration (no run before it has a candidate), else `None` (an empty ledger
/// has missed nothing).
pub(crate) async fn catch_up_start_ms(
    store: &Store,
    calendar: &Calendar,
) -> Result<Option<i64>, LedgerError> {
    let mut conn = store.acquire().await?;
    let mut latest: Option<NaiveDate> = None;
    for kind in ["weekly", "monthly"] {
        if let Some(key) = rows::latest_run_key(&mut conn, kind).await? {
            let run = RunKey::parse(kind, &key).map_err(calendar_error)?;
            let date = run.run_date(calendar).map_err(calendar_error)?;
            latest = latest.max(Some(date));
        }
    }
    if let Some(date) = latest {
        return Ok(Some(date_start_ms(date)));
    }
    let first = rows::first_registration_ms(&mut conn).await?;
    Ok(first.map(|ms| ms - ms.rem_euclid(crate::domain::time::MS_PER_DAY)))
}

async fn run_completed(
    conn: &mut crate::store::Conn,
    run: &RunKey,
) -> Result<Option<i64>, LedgerError> {
    Ok(rows::completed_at(conn, run.kind(), &run.key_string()).await?)
}

/// Reads a run from the projections (`run_decisions`, `payout_runs`); `None` when no
/// candidate of it was decided yet.
pub async fn run_report(
    store: &Store,
    calendar: &Calendar,
    run: RunKey,
) -> Result<Option<RunReport>, LedgerError> {
    let mut conn = store.acquire().await?;
    let cutoff_ms = cutoff_ms(&run)?;
    let run_date = run.run_date(calendar).map_err(calendar_error)?;
    let mut candidates = rows::decisions(&mut conn, run.kind(), &run.key_string()).await?;
    let completed_at_ms = run_completed(&mut conn, &run).await?;
    if candidates.is_empty() && completed_at_ms.is_none() {
        return Ok(None);
    }
    candidates.sort_by(|a, b| a.provider_id.cmp(&b.provider_id));
    let mut totals: BTreeMap<String, DecisionTotal> = Decision::ALL
        .iter()
        .map(|d| (d.as_str().to_owned(), DecisionTotal::default()))
        .collect();
    let (mut payouts, mut payouts_micro_usdc) = (0, 0);
    for c in &candidates {
        let t = totals.entry(c.decision.as_str().to_owned()).or_default();
        t.count += 1;
        t.amount_micro_usdc += c.amount_micro_usdc;
        if c.payout_id.is_some() {
            payouts += 1;
            payouts_micro_usdc += c.amount_micro_usdc;
        }
    }
    Ok(Some(RunReport {
        run_kind: run.kind().to_owned(),
        run_key: run.key_string(),
        cutoff_ms,
        run_date: run_date.format("%Y-%m-%d").to_string(),
        completed: completed_at_ms.is_some(),
        completed_at_ms,
        candidates,
        totals,
        payouts_micro_usdc,
        payouts,
    }))
}

/// Every completed run, newest first (at most `limit`).
pub async fn completed_runs(store: &Store, limit: i64) -> Result<Vec<RunSummary>, LedgerError> {
    Ok(rows::completed_runs(store, limit).await?)
}

/// The facts `decide` needs about one provider, read on `conn`.
async fn candidate_facts(
    conn: &mut crate::store::Conn,
    citus: bool,
    provider: &ProviderRecord,
    cutoff_ms: i64,
) -> Result<Candidate, LedgerError> {
    let id = provider.provider_id.as_str();
    let figures = rows::candidate_figures(conn, citus, &[id], day_number(cutoff_ms)).await?;
    Ok(Candidate::of(
        provider,
        figures.get(id).copied().unwrap_or_default(),
    ))
}

fn policy(run: &RunKey, config: &RunConfig, decided_at_ms: i64) -> RunPolicy {
    RunPolicy {
        minimum_micro_usdc: minimum_micro_usdc(run, config),
        payout_limit_micro_usdc: config.payout_limit_micro_usdc,
        cooling_off_ms: config.cooling_off_hours * MS_PER_HOUR,
        decided_at_ms,
    }
}

/// What a projection of the next payout reads: the runs on or after `now`'s date, in
/// execution order, that are not yet completed.
const PROJECTION_RUNS_MAX: usize = 8;

/// The projected next payout of a provider (SPEC §5, for the dashboard): what the next run
/// that can pay this provider would pay if nothing else arrived.
///
/// Looks at the runs from `now_ms`'s date on (a run of today that is not yet completed
/// counts), in execution order, for which the provider is a candidate (weekly runs only
/// for weekly providers), up to and including the next monthly run, which sweeps every
/// provider. Each is decided with `available` at its cutoff from the lines recorded so
/// far, as of `max(now, run date 00:00 UTC)`; the first that would create a payout
/// (`paid` or `held`) is returned. If none would, the first candidate run is returned
/// with the decision that keeps it from paying (`below_minimum`, `nothing_due`,
/// `no_method`, …). `None` for an unknown or suspended provider. A stale FX rate is not
/// anticipated (the amount is in USDC).
pub async fn projected_next_payout(
    store: &Store,
    calendar: &Calendar,
    config: &RunConfig,
    provider_id: &str,
    now_ms: i64,
) -> Result<Option<ProjectedPayout>, LedgerError> {
    // The projection reads the provider's aggregates exactly, like the run would.
    store
        .catch_up(&[&crate::domain::event::provider_stream(provider_id)])
        .await?;
    let mut conn = store.acquire().await?;
    let Some(provider) = crate::store::providers::load_provider(&mut conn, provider_id).await?
    else {
        return Ok(None);
    };
    if provider.status == ProviderStatus::Suspended {
        return Ok(None);
    }
    let today = crate::domain::time::date_of_ms(now_ms);
    let upcoming = settle_calendar::next_runs(
        calendar,
        today.and_time(chrono::NaiveTime::MIN),
        PROJECTION_RUNS_MAX,
    )
    .map_err(calendar_error)?;
    let mut first: Option<ProjectedPayout> = None;
    for scheduled in upcoming {
        let run = scheduled.key;
        if !is_candidate(&run, &provider) || run_completed(&mut conn, &run).await?.is_some() {
            continue;
        }
        let decided =
            rows::decision_of(&mut conn, run.kind(), &run.key_string(), provider_id).await?;
        if decided.is_some() {
            continue;
        }
        let cutoff = cutoff_ms(&run)?;
        let decided_at = now_ms.max(date_start_ms(scheduled.run_date));
        let facts = candidate_facts(&mut conn, store.is_citus(), &provider, cutoff).await?;
        let outcome = decide(&facts, &policy(&run, config, decided_at));
        let projected = ProjectedPayout {
            run_kind: run.kind().to_owned(),
            run_key: run.key_string(),
            run_date: scheduled.run_date.format("%Y-%m-%d").to_string(),
            amount_micro_usdc: outcome.amount_micro_usdc,
            decision: outcome.decision.as_str().to_owned(),
        };
        if outcome.decision.creates_payout() {
            return Ok(Some(projected));
        }
        first.get_or_insert(projected);
        if matches!(run, RunKey::Monthly { .. }) {
            break;
        }
    }
    Ok(first)
}

impl Ledger {
    /// Runs (or finishes) the payout run `run`, idempotently: a second start, a concurrent
    /// start or a restart after a crash decides only the candidates not yet decided and
    /// creates no second payout. Returns the run's report.
    ///
    /// Refused before the run's cutoff (`run_before_cutoff`). A monthly run whose run
    /// date is a Monday first completes that Monday's weekly run (the weekly run is
    /// decided first on a shared date); if that weekly run cannot start yet, the monthly
    /// run is refused (`weekly_run_pending`).
    pub async fn run_payouts(
        &self,
        run: RunKey,
        calendar: &Calendar,
        config: &RunConfig,
        actor: &Actor,
    ) -> Result<RunReport, LedgerError> {
        run.validate().map_err(calendar_error)?;
        let (config, policy_version) = self.run_config(config).await?;
        let config = &config;
        let cutoff = cutoff_ms(&run)?;
        let run_date = run.run_date(calendar).map_err(calendar_error)?;
        let now = self.now_ms();
        if now < cutoff {
            return reject(
                "run_before_cutoff",
                format!(
                    "the {run} run cannot start before its cutoff {} (now {})",
                    format_ms(cutoff),
                    format_ms(now)
                ),
            );
        }
        {
            let mut conn = self.store.acquire().await?;
            if run_completed(&mut conn, &run).await?.is_some() {
                drop(conn);
                return self.report_of(calendar, run).await;
            }
        }
        if matches!(run, RunKey::Monthly { .. }) && run_date.weekday() == Weekday::Mon {
            let weekly = RunKey::weekly(run_date).map_err(calendar_error)?;
            if now < cutoff_ms(&weekly)? {
                return reject(
                    "weekly_run_pending",
                    format!(
                        "the {run} run shares its run date {run_date} with the {weekly} run, which is decided first and cannot start before {}",
                        format_ms(cutoff_ms(&weekly)?)
                    ),
                );
            }
            Box::pin(self.run_payouts(weekly, calendar, config, actor)).await?;
        }
        failpoint(failpoints::RUN_START);
        let candidates = self.candidate_ids(&run).await?;
        // A restart skips the candidates decided before without a transaction each; the
        // decision's idempotency key still guards against a concurrent start.
        let decided = self.decided_ids(&run).await?;
        tracing::info!(run = %run, candidates = candidates.len(), decided = decided.len(), "payout run started");
        let (in_flight, per_tx) = match self.store.dialect() {
            Dialect::Postgres => (
                config.candidates_in_flight.max(1),
                config.candidates_per_tx.max(1),
            ),
            // One writer: the candidates PostgreSQL decides in parallel transactions go
            // into one, so a run holds as many streams at once on either database and
            // SQLite commits (and fsyncs) once for all of them.
            Dialect::Sqlite => (
                1,
                config
                    .candidates_per_tx
                    .max(1)
                    .saturating_mul(config.candidates_in_flight.max(1)),
            ),
        };
        let todo: Vec<&str> = candidates
            .iter()
            .filter(|p| !decided.contains(*p))
            .map(String::as_str)
            .collect();
        if in_flight == 1 {
            self.decide_read_ahead(&run, &todo, per_tx, config, actor)
                .await?;
        } else {
            let run_ref = &run;
            futures::stream::iter(todo.chunks(per_tx).map(Ok::<&[&str], LedgerError>))
                .try_for_each_concurrent(in_flight, |chunk| async move {
                    self.decide_candidates(run_ref, chunk, config, actor, None)
                        .await
                        .map(drop)
                })
                .await?;
        }
        failpoint(failpoints::BEFORE_COMPLETE);
        self.complete_run(&run, cutoff, policy_version, actor)
            .await?;
        failpoint(failpoints::AFTER_COMPLETE);
        let report = self.report_of(calendar, run).await?;
        tracing::info!(run = %run, payouts = report.payouts, amount_micro_usdc = report.payouts_micro_usdc, "payout run completed");
        Ok(report)
    }

    /// What a run decides by: the hold limit and the cooling-off of the ledger's policy (not
    /// a process's), with its version; and the providers whose balance includes a gated
    /// event no verified approval ran, held (SPEC §9: a well-hashed row inserted behind the
    /// engine pays nobody).
    async fn run_config(
        &self,
        config: &RunConfig,
    ) -> Result<(RunConfig, Option<i64>), LedgerError> {
        let in_force = self.policy().await?;
        let mut config = config.clone();
        if let Some(p) = &in_force {
            config.payout_limit_micro_usdc = p.policy.payout_limit_micro_usdc;
            config.cooling_off_hours = p.policy.cooling_off_hours;
        }
        let findings = super::proof::control_findings(&self.store).await?;
        if findings.enforced {
            config.control_unproven = findings.unproven_providers();
        }
        Ok((config, in_force.map(|p| p.version)))
    }

    /// Decides `todo` in chunks of `per_tx`, one after another (SQLite's one writer), each
    /// chunk's state read ahead while the chunk before is decided and committed: those reads
    /// leave the writer's critical path, and the decisions still use them only where they
    /// hold under the lock ([`CandidatesAhead`]).
    async fn decide_read_ahead(
        &self,
        run: &RunKey,
        todo: &[&str],
        per_tx: usize,
        config: &RunConfig,
        actor: &Actor,
    ) -> Result<(), LedgerError> {
        let chunks: Vec<&[&str]> = todo.chunks(per_tx).collect();
        let mut ahead = None;
        for (i, chunk) in chunks.iter().enumerate() {
            let next = async {
                match chunks.get(i + 1) {
                    // A read that fails costs only the chunk's reads under its lock.
                    Some(next) => self.read_ahead(run, next).await.unwrap_or_else(|e| {
                        tracing::warn!(run = %run, error = %e, "reading a chunk ahead failed");
                        None
                    }),
                    None => None,
                }
            };
            let (decided, next) = tokio::join!(
                self.decide_candidates(run, chunk, config, actor, ahead.take()),
                next
            );
            decided?;
            ahead = next;
        }
        Ok(())
    }

    async fn report_of(&self, calendar: &Calendar, run: RunKey) -> Result<RunReport, LedgerError> {
        match run_report(&self.store, calendar, run).await? {
            Some(r) => Ok(r),
            None => reject("unknown_run", format!("no {run} run on the ledger")),
        }
    }

    /// The run's candidates, in provider id order (byte order, the same on every database).
    async fn candidate_ids(&self, run: &RunKey) -> Result<Vec<String>, LedgerError> {
        let weekly = matches!(run, RunKey::Weekly { .. });
        Ok(rows::candidate_ids(&self.store, weekly).await?)
    }

    /// The providers already decided in the run.
    async fn decided_ids(&self, run: &RunKey) -> Result<HashSet<String>, LedgerError> {
        Ok(rows::decided_ids(&self.store, run.kind(), &run.key_string()).await?)
    }

    /// Decides the candidates `chunk` (provider ids) in one transaction over their
    /// streams, retrying the whole chunk (its reads included) when another writer got there
    /// first. Each candidate keeps its own stream, sequence and idempotency key, so the
    /// ledger is the same as with one transaction per candidate; the chunk only shares the
    /// reads (one statement each for all its providers) and the commit.
    ///
    /// With `ahead` (the chunk's state read before its lock, [`Ledger::read_ahead`]), the
    /// decisions use what it read when it is still valid under the lock, and read again
    /// otherwise; returns whether it was used.
    pub async fn decide_candidates(
        &self,
        run: &RunKey,
        chunk: &[&str],
        config: &RunConfig,
        actor: &Actor,
        ahead: Option<CandidatesAhead>,
    ) -> Result<bool, LedgerError> {
        for _ in chunk {
            failpoint(failpoints::BEFORE_DECIDE);
        }
        let streams: Vec<String> = chunk.iter().map(|p| provider_stream(p)).collect();
        let names: Vec<&str> = streams.iter().map(String::as_str).collect();
        let ahead = ahead.as_ref();
        if ahead.is_none() {
            // Most of what the chunk's streams have not folded (a burst of usage booked
            // just before the run) is folded before their locks, in transactions that
            // commit as they go (`runs.catch_up_events_per_tx`): under the locks only the
            // rest is. Nothing lags when a read ahead was made (`Ledger::read_ahead`).
            let step = i64::try_from(config.catch_up_events_per_tx).unwrap_or(i64::MAX);
            self.store.catch_up_in_steps(&names, step).await?;
        }
        let used = crate::ledger::write_stream!(self, streams(&names), |tx| {
            // The decisions read every candidate's aggregates exactly (SPEC §3).
            tx.fold_locked().await?;
            let fresh;
            let (reads, used) = match ahead {
                Some(a) if a.valid_in(tx, &names).await? => (&a.reads, true),
                _ => {
                    fresh = read_candidates(tx.conn(), self.store.is_citus(), run, chunk).await?;
                    (&fresh, false)
                }
            };
            self.decide_in(tx, run, chunk, config, actor, reads).await?;
            Ok(used)
        })?;
        for _ in chunk {
            failpoint(failpoints::AFTER_DECIDE);
        }
        Ok(used)
    }

    /// Reads the state of the candidates `chunk` in one snapshot, without a lock, for
    /// [`Ledger::decide_candidates`]: `None` when any of their streams has events its
    /// projections do not hold yet (the decisions then read under the lock, after folding).
    pub async fn read_ahead(
        &self,
        run: &RunKey,
        chunk: &[&str],
    ) -> Result<Option<CandidatesAhead>, LedgerError> {
        let mut snap = self.store.read_ahead().await?;
        let streams: Vec<String> = chunk.iter().map(|p| provider_stream(p)).collect();
        let names: Vec<&str> = streams.iter().map(String::as_str).collect();
        let citus = self.store.is_citus();
        let heads = rows::folded_heads(snap.conn(), citus, &names).await?;
        let ahead = if heads.len() == names.len() {
            Some(CandidatesAhead {
                rebuilt: crate::store::usage::rebuild_marker(snap.conn()).await?,
                reads: read_candidates(snap.conn(), citus, run, chunk).await?,
                heads,
            })
        } else {
            None
        };
        snap.close().await?;
        Ok(ahead)
    }

    /// Inside `tx`, which holds the write locks of every stream of `chunk`: reads the
    /// candidates' state at once, decides each one not decided before ([`decide`], the pure
    /// rule of SPEC §5) and appends its events on its stream. A provider suspended or moved
    /// to another schedule since the candidate list was read is no longer part of the run.
    async fn decide_in(
        &self,
        tx: &mut WriteTx,
        run: &RunKey,
        chunk: &[&str],
        config: &RunConfig,
        actor: &Actor,
        reads: &CandidateReads,
    ) -> Result<(), LedgerError> {
        let fx_stale_ms = config.fx_stale_hours * MS_PER_HOUR;
        let now = self.now_ms();
        let CandidateReads {
            keys,
            decided,
            providers,
            figures,
        } = reads;
        let pays_in_eur = providers
            .values()
            .any(|p| p.payout_method.as_ref().map(PayoutMethod::rail) == Some(Rail::Sepa));
        let fx = if pays_in_eur {
            latest_fx_rate(tx.conn(), now).await?
        } else {
            None
        };
        for (decision, provider_id) in keys.iter().zip(chunk) {
            if decided.contains_key(decision) {
                continue;
            }
            let Some(provider) = providers.get(*provider_id) else {
                continue;
            };
            if !is_candidate(run, provider) {
                continue;
            }
            let mut facts = Candidate::of(
                provider,
                figures.get(*provider_id).copied().unwrap_or_default(),
            );
            let mut rate: Option<Decimal> = None;
            if config.control_unproven.contains(*provider_id) {
                facts.external_hold_reason = Some("control_unproven".to_owned());
            } else if provider.payout_method.as_ref().map(PayoutMethod::rail) == Some(Rail::Sepa) {
                match fx {
                    Some((at, r)) if now - at <= fx_stale_ms => rate = Some(r),
                    _ => facts.external_hold_reason = Some("fx_stale".to_owned()),
                }
            }
            let outcome = decide(&facts, &policy(run, config, now));
            tx.use_stream(&decision.stream);
            let decision = DecisionFacts {
                run,
                provider,
                key: &decision.key,
                available_micro_usdc: facts.available_micro_usdc,
                outcome,
                eur_per_usd: rate,
                at_ms: now,
            };
            decision.append(tx, actor)?;
            failpoint(failpoints::DECIDE_BEFORE_COMMIT);
        }
        Ok(())
    }

    /// Appends `payout_run.completed` on the platform stream once, with the totals of the
    /// decisions recorded for the run.
    async fn complete_run(
        &self,
        run: &RunKey,
        cutoff_ms: i64,
        policy_version: Option<i64>,
        actor: &Actor,
    ) -> Result<(), LedgerError> {
        let key = completion_key(run);
        let hash = content_hash(&key);
        let now = self.now_ms();
        crate::ledger::write_stream!(self, PLATFORM_STREAM, |tx| {
            // On the platform stream only: a provider called `completed` has this key as
            // its decision's, on its own stream.
            if find_idem_in_stream(tx, &key).await?.is_some() {
                return Ok(());
            }
            let counts = rows::decision_totals(tx.conn(), run.kind(), &run.key_string()).await?;
            let mut totals: BTreeMap<String, (i64, i64)> = Decision::ALL
                .iter()
                .map(|d| (d.as_str().to_owned(), (0, 0)))
                .collect();
            let mut candidates = 0;
            for (decision, count, amount) in counts {
                candidates += count;
                totals.insert(decision, (count, amount));
            }
            tx.append(NewEvent {
                body: EventBody::PayoutRunCompleted(PayoutRunCompleted {
                    run_kind: run.kind().to_owned(),
                    run_key: run.key_string(),
                    cutoff_ms,
                    candidates,
                    totals,
                    policy_version,
                }),
                actor: actor.0.clone(),
                recorded_at_ms: now,
                idem_key: Some(key.clone()),
                content_hash: Some(hash.clone()),
            });
            Ok(())
        })
    }
}

/// What the decisions of a chunk of candidates read of their state: each one's decision key
/// on its stream and whether it is booked, the providers and their figures at the cutoff.
pub struct CandidateReads {
    keys: Vec<StreamKey>,
    decided: KeyHashes,
    providers: HashMap<ProviderId, ProviderRecord>,
    figures: HashMap<String, Figures>,
}

/// Reads [`CandidateReads`] of `chunk` on `conn` (under the chunk's lock, or ahead of it).
async fn read_candidates(
    conn: &mut crate::store::Conn,
    citus: bool,
    run: &RunKey,
    chunk: &[&str],
) -> Result<CandidateReads, LedgerError> {
    let keys: Vec<StreamKey> = chunk
        .iter()
        .map(|p| StreamKey::new(provider_stream(p), decision_key(run, p)))
        .collect();
    Ok(CandidateReads {
        decided: crate::store::keys::booked_keys(conn, &keys).await?,
        providers: crate::store::providers::load_providers(conn, chunk).await?,
        figures: rows::candidate_figures(conn, citus, chunk, day_number(cutoff_ms(run)?)).await?,
        keys,
    })
}

/// [`CandidateReads`] taken before the chunk's write lock ([`Ledger::read_ahead`]), with the
/// heads its streams had, each folded into the projections up to its head, and the rebuild
/// marker. Everything a decision reads of a provider changes only by an event on the
/// provider's stream, folded into the projections (ARCHITECTURE.md), or by `settle rebuild`.
/// So the reads still hold under the lock when no stream moved and no rebuild happened.
pub struct CandidatesAhead {
    heads: HashMap<String, i64>,
    rebuilt: Option<String>,
    reads: CandidateReads,
}

impl CandidatesAhead {
    /// Whether the reads hold for the streams `names`, which `tx` locked.
    async fn valid_in(&self, tx: &mut WriteTx, names: &[&str]) -> Result<bool, LedgerError> {
        let unmoved = names
            .iter()
            .all(|s| self.heads.get(*s).copied() == tx.head_seq_of(s));
        Ok(unmoved && crate::store::usage::rebuild_marker(tx.conn()).await? == self.rebuilt)
    }
}

/// One candidate's decision, to be appended on its provider's stream.
struct DecisionFacts<'a> {
    run: &'a RunKey,
    provider: &'a ProviderRecord,
    /// The decision's idempotency key ([`decision_key`]).
    key: &'a str,
    available_micro_usdc: i64,
    outcome: Outcome,
    /// The FX rate of a EUR payout, fresh enough to pay with.
    eur_per_usd: Option<Decimal>,
    at_ms: i64,
}

impl DecisionFacts<'_> {
    /// Appends `payout_run.decided`, and for a held or paid decision `payout.created`
    /// (+ `payout.held`), so a payout's amount leaves `payable` with the decision.
    fn append(self, tx: &mut WriteTx, actor: &Actor) -> Result<(), LedgerError> {
        let DecisionFacts {
            run,
            provider,
            key,
            available_micro_usdc,
            outcome:
                Outcome {
                    decision,
                    amount_micro_usdc,
                    hold_reason,
                },
            eur_per_usd,
            at_ms,
        } = self;
        let provider_id = &provider.provider_id;
        let payout = decision
            .creates_payout()
            .then(|| payout_id(run, provider_id));
        tx.append(NewEvent::keyed(
            EventBody::PayoutRunDecided(PayoutRunDecided {
                run_kind: run.kind().to_owned(),
                run_key: run.key_string(),
                provider_id: provider_id.clone(),
                decision,
                available_micro_usdc,
                amount_micro_usdc,
                payout_id: payout.clone(),
            }),
            &actor.0,
            at_ms,
            key,
            &content_hash(key),
        ));
        match (payout, &provider.payout_method) {
            (Some(payout_id), Some(method)) => append_payout(
                tx,
                actor,
                NewPayout {
                    run,
                    provider_id,
                    payout_id,
                    method,
                    decision,
                    amount_micro_usdc,
                    hold_reason,
                    eur_per_usd,
                    at_ms,
                },
            ),
            _ => Ok(()),
        }
    }
}

/// A payout a decision creates.
struct NewPayout<'a> {
    run: &'a RunKey,
    provider_id: &'a ProviderId,
    payout_id: PayoutId,
    method: &'a PayoutMethod,
    decision: Decision,
    amount_micro_usdc: i64,
    hold_reason: Option<String>,
    eur_per_usd: Option<Decimal>,
    at_ms: i64,
}

/// Appends `payout.created` (+ `payout.held` for a held decision), with the EUR amount of a
/// bank payout in EUR.
fn append_payout(tx: &mut WriteTx, actor: &Actor, p: NewPayout<'_>) -> Result<(), LedgerError> {
    let (amount_eur_cents, eur_per_usd) = match p.eur_per_usd {
        Some(rate) => {
            let Some(cents) = eur_cents(p.amount_micro_usdc, rate) else {
                return reject(
                    "amount_out_of_range",
                    format!("the EUR amount of payout {} overflows", p.payout_id),
                );
            };
            (Some(cents), Some(rate.normalize().to_string()))
        }
        None => (None, None),
    };
    let held = p.decision == Decision::Held;
    let created_key = payout_event_key(p.run, p.provider_id, "created");
    tx.append(NewEvent::keyed(
        EventBody::PayoutCreated(PayoutCreated {
            payout_id: p.payout_id.clone(),
            provider_id: p.provider_id.clone(),
            run_kind: p.run.kind().to_owned(),
            run_key: p.run.key_string(),
            amount_micro_usdc: p.amount_micro_usdc,
            method: p.method.clone(),
            held,
            amount_eur_cents,
            eur_per_usd,
        }),
        &actor.0,
        p.at_ms,
        &created_key,
        &content_hash(&created_key),
    ));
    if held {
        let held_key = payout_event_key(p.run, p.provider_id, "held");
        tx.append(NewEvent::keyed(
            EventBody::PayoutHeld(PayoutHeld {
                payout_id: p.payout_id,
                provider_id: p.provider_id.clone(),
                reason: p.hold_reason.unwrap_or_else(|| "held".to_owned()),
            }),
            &actor.0,
            p.at_ms,
            &held_key,
            &content_hash(&held_key),
        ));
    }
    Ok(())
}

/// Parses a weekly run's date (`YYYY-MM-DD`, a Monday).
pub fn weekly_key(date: &str) -> Result<RunKey, LedgerError> {
    let d = NaiveDate::parse_from_str(date, "%Y-%m-%d").map_err(|_| {
        DomainError::new("invalid_date", format!("not a date YYYY-MM-DD: {date:?}"))
    })?;
    RunKey::weekly(d).map_err(calendar_error)
}

/// Parses a monthly run's month (`YYYY-MM`).
pub fn monthly_key(month: &str) -> Result<RunKey, LedgerError> {
    RunKey::parse("monthly", month).map_err(calendar_error)
}
