//! Prometheus metrics in the text exposition format: process-wide counters and gauges
//! (lock-free on the hot path), plus gauges read from the projections at scrape time.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::OnceLock;

/// A labelled family of counters or gauges.
#[derive(Default)]
struct Family {
    help: &'static str,
    kind: &'static str,
    /// The values are microseconds, rendered as seconds (`add_seconds`).
    micros: bool,
    values: BTreeMap<Vec<(&'static str, String)>, i64>,
}

/// The process-wide registry.
#[derive(Default)]
pub struct Metrics {
    families: Mutex<BTreeMap<&'static str, Family>>,
}

pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::default)
}

impl Metrics {
    fn update(
        &self,
        (name, kind, micros): (&'static str, &'static str, bool),
        help: &'static str,
        labels: &[(&'static str, &str)],
        f: impl FnOnce(&mut i64),
    ) {
        let mut families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        let family = families.entry(name).or_insert_with(|| Family {
            help,
            kind,
            micros,
            ..Default::default()
        });
        let key: Vec<(&'static str, String)> =
            labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        f(family.values.entry(key).or_insert(0));
    }

    /// Adds to a counter.
    pub fn count(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        by: i64,
    ) {
        self.update((name, "counter", false), help, labels, |v| *v += by);
    }

    /// Adds `elapsed` to a counter of seconds (`name` ends in `_seconds_total`), kept in whole
    /// microseconds and rendered in seconds.
    pub(crate) fn add_seconds(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        elapsed: std::time::Duration,
    ) {
        let micros = i64::try_from(elapsed.as_micros()).unwrap_or(i64::MAX);
        self.update((name, "counter", true), help, labels, |v| {
            *v = v.saturating_add(micros);
        });
    }

    /// Sets a gauge.
    pub fn gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        value: i64,
    ) {
        self.update((name, "gauge", false), help, labels, |v| *v = value);
    }

    /// Renders every family in the text exposition format.
    pub fn render(&self) -> String {
        let families = self.families.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        for (name, family) in families.iter() {
            let _ = writeln!(out, "# HELP {name} {}", family.help);
            let _ = writeln!(out, "# TYPE {name} {}", family.kind);
            for (labels, value) in &family.values {
                let labels = render_labels(labels);
                if family.micros {
                    let (s, us) = (value / 1_000_000, value % 1_000_000);
                    let _ = writeln!(out, "{name}{labels} {s}.{us:06}");
                } else {
                    let _ = writeln!(out, "{name}{labels} {value}");
                }
            }
        }
        out
    }
}

fn render_labels(labels: &[(&'static str, String)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}=\"{}\"",
                v.replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n")
            )
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// `settle_projection_lag_seconds`: how long the oldest aggregate change this process left
/// to the projector has waited (fractional seconds, so it is rendered here).
pub fn projection_lag(lag: std::time::Duration) -> String {
    format!(
        "# HELP settle_projection_lag_seconds How long the oldest booked change not yet folded into the aggregates has waited.\n\
         # TYPE settle_projection_lag_seconds gauge\n\
         settle_projection_lag_seconds {:.3}\n",
        lag.as_secs_f64()
    )
}

/// What the projections say at scrape time, for [`ledger_gauges`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerFigures {
    /// `(status, rail, count, sum of micro-USDC)` of the payouts.
    pub payouts: Vec<(String, String, i64, i64)>,
    /// The latest booking's `recorded_at`.
    pub latest_recorded_at_ms: Option<i64>,
    /// The oldest payout waiting for its rail (`created`), by its last change.
    pub oldest_created_payout_ms: Option<i64>,
}

/// The gauges of the projections at scrape time: payouts by status and rail, how long ago
/// the ledger last booked something, and the oldest payout waiting for its rail.
pub(crate) fn ledger_gauges(figures: &LedgerFigures, now_ms: i64) -> String {
    let metrics = Metrics::default();
    for (status, rail, count, sum) in &figures.payouts {
        let labels = [("status", status.as_str()), ("rail", rail.as_str())];
        metrics.gauge(
            "settle_payouts",
            "Payouts by status and rail.",
            &labels,
            *count,
        );
        metrics.gauge(
            "settle_payouts_micro_usdc",
            "Payout amounts by status and rail, micro-USDC.",
            &labels,
            *sum,
        );
    }
    if let Some(latest) = figures.latest_recorded_at_ms {
        metrics.gauge(
            "settle_ledger_last_booking_age_seconds",
            "Seconds since the ledger last booked an event.",
            &[],
            (now_ms - latest).max(0) / 1000,
        );
    }
    metrics.gauge(
        "settle_outbox_oldest_created_payout_age_seconds",
        "Age of the oldest payout waiting for its rail (0 when none).",
        &[],
        figures
            .oldest_created_payout_ms
            .map(|t| (now_ms - t).max(0) / 1000)
            .unwrap_or(0),
    );
    metrics.render()
}

/// The bank's answers at scrape time (SPEC §10): payouts in sent bank batches still
/// without an answer, those past their answer due day, and the entries of bank files that
/// booked nothing, by problem (`unmatched`, `amount_mismatch`, `unknown_batch`,
/// `state_conflict`).
pub(crate) fn bank_gauges(open: i64, overdue: i64, unanswered: &[(String, i64)]) -> String {
    let metrics = Metrics::default();
    metrics.gauge(
        "settle_bank_open_payouts",
        "Payouts in sent bank batches the bank has not answered yet.",
        &[],
        open,
    );
    metrics.gauge(
        "settle_bank_overdue_payouts",
        "Open bank payouts past their answer due day (bank.answer_due_business_days).",
        &[],
        overdue,
    );
    for (problem, count) in unanswered {
        metrics.gauge(
            "settle_bank_unmatched_entries",
            "Entries of the bank's files that booked nothing, by problem.",
            &[("problem", problem.as_str())],
            *count,
        );
    }
    metrics.render()
}

/// Counts one usage event's result: `status` is `accepted`, `duplicate` or `rejected`,
/// with the rejection's `code`.
pub(crate) fn record_usage(status: &str, rejected_code: Option<&str>) {
    let metrics = global();
    metrics.count(
        "settle_usage_events_total",
        "Usage events received, by result.",
        &[("status", status)],
        1,
    );
    if let Some(code) = rejected_code {
        metrics.count(
            "settle_usage_rejected_total",
            "Usage events rejected, by code.",
            &[("code", code)],
            1,
        );
    }
}

/// Adds the time since `started` to one step of the write transactions that append events
/// (`store::WriteTx`): `begin` (waiting for a connection, and on SQLite for the one writer;
/// `BEGIN`), `heads` (the streams' locks and heads), `write` (the event rows and the changes
/// written with them), `commit`.
pub(crate) fn record_write_step(step: &'static str, started: std::time::Instant) {
    global().add_seconds(
        "settle_write_tx_seconds_total",
        "Time spent in the steps of the write transactions that append events (begin: waiting for a connection or the SQLite writer, and BEGIN; heads: stream locks and heads; write: rows; commit).",
        &[("step", step)],
        started.elapsed(),
    );
}

/// Adds the time since `started` to one step of booking usage batches (`ledger::ingest`)
/// outside the transaction's own steps: `validate` (each event on its own), `read` (what the
/// batch's decisions read: keys, views, prices), `decide` (the decisions and the appends in
/// memory: price, payload, hash).
pub(crate) fn record_usage_step(step: &'static str, started: std::time::Instant) {
    global().add_seconds(
        "settle_usage_booking_seconds_total",
        "Time spent booking usage batches, by step (validate, read, decide); the transaction's own steps are in settle_write_tx_seconds_total.",
        &[("step", step)],
        started.elapsed(),
    );
}

/// Counts the usage events of an attempt whose idempotency key was taken for new without a
/// read (`store::usage::RecentKeys`).
pub(crate) fn record_keys_assumed(events: usize) {
    global().count(
        "settle_usage_keys_assumed_total",
        "Usage events whose idempotency key a booking took for new without reading it (the unique index checks it).",
        &[],
        i64::try_from(events).unwrap_or(i64::MAX),
    );
}

/// Counts one booking attempt that took a booked idempotency key for new (retried reading
/// its keys).
pub(crate) fn record_key_assumption_failed() {
    global().count(
        "settle_usage_key_assumptions_failed_total",
        "Usage booking attempts that took a booked idempotency key for new and were retried reading their keys.",
        &[],
        1,
    );
}

/// Counts one wait of a usage booker for the projector (`Store::wait_for_projector`), and
/// its time.
pub(crate) fn record_projection_wait(waited: std::time::Duration) {
    let metrics = global();
    metrics.count(
        "settle_usage_projection_waits_total",
        "Times a booker of POST /v1/usage batches waited for the projector before booking (backpressure).",
        &[],
        1,
    );
    metrics.add_seconds(
        "settle_usage_projection_wait_seconds_total",
        "Time bookers of POST /v1/usage batches waited for the projector.",
        &[],
        waited,
    );
}

/// Counts one booking of usage batches (`ledger::group`): how many batches it booked together,
/// and whether it committed.
pub(crate) fn record_usage_group(batches: usize, committed: bool) {
    let metrics = global();
    let outcome = if committed { "committed" } else { "failed" };
    metrics.count(
        "settle_usage_groups_total",
        "Booking transactions of POST /v1/usage batches (one or more batches each), by outcome.",
        &[("outcome", outcome)],
        1,
    );
    metrics.count(
        "settle_usage_group_batches_total",
        "POST /v1/usage batches booked in those transactions, by outcome.",
        &[("outcome", outcome)],
        i64::try_from(batches).unwrap_or(i64::MAX),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bank_gauges_count_open_overdue_and_unmatched_items() {
        let text = bank_gauges(
            3,
            1,
            &[("unmatched".into(), 2), ("amount_mismatch".into(), 1)],
        );
        assert!(text.contains("settle_bank_open_payouts 3"), "{text}");
        assert!(text.contains("settle_bank_overdue_payouts 1"), "{text}");
        assert!(
            text.contains("settle_bank_unmatched_entries{problem=\"unmatched\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("settle_bank_unmatched_entries{problem=\"amount_mismatch\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn renders_the_text_format() {
        let m = Metrics::default();
        m.count(
            "settle_usage_events_total",
            "Usage events by result.",
            &[("status", "accepted")],
            3,
        );
        m.count(
            "settle_usage_events_total",
            "Usage events by result.",
            &[("status", "accepted")],
            2,
        );
        m.gauge("settle_treasury_usdc_micro", "Treasury balance.", &[], 7);
        let text = m.render();
        assert!(text.contains("# TYPE settle_usage_events_total counter"));
        assert!(text.contains("settle_usage_events_total{status=\"accepted\"} 5"));
        assert!(text.contains("settle_treasury_usdc_micro 7"));
    }
}
