//! Scenario helpers of the payout run tests: a ledger on a fresh database with a clock
//! the test moves, import lines, exact earnings, runs, and the money invariants.

use crate::common::Tables;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use settle::domain::event::{EventBody, accounts};
use settle::domain::money::{div_round_half_even, format_micro_usdc};
use settle::domain::time::{format_ms, parse_rfc3339_ms};
use settle::ledger::payouts::PayoutRecord;
use settle::ledger::runs::{self, RunConfig, RunReport};
use settle::ledger::{Actor, Ledger, LedgerError, ManualClock};
use settle::wire::import::{apply, parse_line};
use settle_calendar::{Calendar, RunKey};
use sqlx::Row;

use crate::common::TestDb;

pub const SOLANA: &str =
    r#"{"kind":"solana","wallet":"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}"#;
/// The ed25519 base point: a valid, on-curve wallet.
pub const SOLANA_2: &str =
    r#"{"kind":"solana","wallet":"6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH"}"#;
pub const SEPA: &str = r#"{"kind":"sepa","iban":"DE89370400440532013000","holder":"Bee GmbH"}"#;
pub const ACH: &str = r#"{"kind":"ach","routing":"021000021","account":"123456789","account_type":"checking","holder":"Jane Doe","entity":"individual"}"#;

/// µUSDC in one USDC.
pub const USDC: i64 = 1_000_000;

pub struct World {
    pub db: TestDb,
    pub ledger: Ledger,
    pub clock: Arc<ManualClock>,
    pub calendar: Calendar,
    pub config: RunConfig,
    next_event: AtomicU64,
}

/// The net of a usage event of `gross` at the community fee (2000 bps), as the engine
/// prices it.
pub fn community_net(gross_micro_usdc: i64) -> i64 {
    gross_micro_usdc - div_round_half_even(i128::from(gross_micro_usdc) * 2000, 10_000) as i64
}

impl World {
    pub async fn new(now: &str) -> World {
        let db = TestDb::new().await;
        let (ledger, clock) = db.ledger_at(now).await;
        World {
            db,
            ledger,
            clock,
            calendar: Calendar::platform_default(),
            config: RunConfig::default(),
            next_event: AtomicU64::new(1),
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.ledger.now_ms()
    }

    /// Moves the clock forward (never back: booking time only moves forward).
    pub fn at(&self, now: &str) {
        let t = parse_rfc3339_ms(now).expect("valid instant");
        assert!(t >= self.now_ms(), "the clock only moves forward: {now}");
        self.clock.set(t);
    }

    pub fn actor(&self) -> Actor {
        Actor::operator("test")
    }

    /// Applies NDJSON import lines; every line must be accepted or a duplicate.
    pub async fn import(&self, lines: &[String]) {
        for line in lines {
            let command = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            apply(&self.ledger, &command, &self.actor())
                .await
                .unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }

    /// Registers a provider (with one GPU `{id}-g0`) on `schedule` with a payout method
    /// given as JSON (or none).
    pub async fn provider(&self, id: &str, schedule: &str, method: Option<&str>) {
        let method = method
            .map(|m| format!(r#","payout_method":{m}"#))
            .unwrap_or_default();
        self.import(&[
            format!(
                r#"{{"type":"provider.register","provider_id":"{id}","name":"Provider {id}","email":"ops@{id}.test","tier":"community","schedule":"{schedule}"{method}}}"#
            ),
            format!(r#"{{"type":"gpu.register","gpu_id":"{id}-g0","provider_id":"{id}","model":"H100-80GB"}}"#),
            // The price book the usage rate of `earn` is checked against (SPEC §2).
            format!(r#"{{"type":"rate.set","provider_id":"{id}","model":"H100-80GB","rate_usdc_per_hour":"3.6","effective_from":"2026-01-01T00:00:00Z"}}"#),
        ])
        .await;
    }

    pub async fn update(&self, id: &str, fields: &str) {
        self.import(&[format!(
            r#"{{"type":"provider.update","provider_id":"{id}",{fields}}}"#
        )])
        .await;
    }

    /// Books a usage event of exactly `gross_micro_usdc` (rate 3.6 USDC/h = 1 µUSDC per ms)
    /// starting at `started_at` (within one UTC day); returns `(event_id, net)`.
    pub async fn earn(
        &self,
        provider: &str,
        gross_micro_usdc: i64,
        started_at: &str,
    ) -> (String, i64) {
        let start = parse_rfc3339_ms(started_at).expect("valid start");
        let end = start + gross_micro_usdc;
        assert_eq!(
            start / 86_400_000,
            (end - 1) / 86_400_000,
            "earn within one UTC day"
        );
        let event_id = format!("ev-{}", self.next_event.fetch_add(1, Ordering::SeqCst));
        self.import(&[format!(
            r#"{{"type":"usage","event_id":"{event_id}","provider_id":"{provider}","gpu_id":"{provider}-g0","started_at":"{}","ended_at":"{}","rate_usdc_per_hour":"3.6"}}"#,
            format_ms(start),
            format_ms(end)
        )])
        .await;
        (event_id, community_net(gross_micro_usdc))
    }

    pub async fn adjust(&self, provider: &str, adjustment_id: &str, amount_micro_usdc: i64) {
        self.import(&[format!(
            r#"{{"type":"adjustment","adjustment_id":"{adjustment_id}","provider_id":"{provider}","amount_usdc":"{}","reason":"test adjustment"}}"#,
            format_micro_usdc(amount_micro_usdc)
        )])
        .await;
    }

    pub async fn void(&self, event_id: &str) {
        self.import(&[format!(
            r#"{{"type":"usage.void","event_id":"{event_id}","reason":"refund"}}"#
        )])
        .await;
    }

    /// Records an FX rate under a new `fx_id`, so the same rate again refreshes it (a
    /// line without a key that repeats the rate in force is a duplicate).
    pub async fn fx(&self, eur_per_usd: &str) {
        let fx_id = format!("fx-{}", self.next_event.fetch_add(1, Ordering::SeqCst));
        self.import(&[format!(
            r#"{{"type":"fx.rate_set","fx_id":"{fx_id}","eur_per_usd":"{eur_per_usd}"}}"#
        )])
        .await;
    }

    pub async fn try_run(&self, run: RunKey) -> Result<RunReport, LedgerError> {
        self.ledger
            .run_payouts(
                run,
                &self.calendar,
                &self.config,
                &Actor::system("test-run"),
            )
            .await
    }

    /// Runs the weekly run of `monday`; checks the invariants afterwards.
    pub async fn weekly(&self, monday: &str) -> RunReport {
        let report = self
            .try_run(runs::weekly_key(monday).unwrap())
            .await
            .unwrap_or_else(|e| panic!("weekly {monday}: {e}"));
        self.check_invariants().await;
        report
    }

    /// Runs the monthly run of `month`; checks the invariants afterwards.
    pub async fn monthly(&self, month: &str) -> RunReport {
        let report = self
            .try_run(runs::monthly_key(month).unwrap())
            .await
            .unwrap_or_else(|e| panic!("monthly {month}: {e}"));
        self.check_invariants().await;
        report
    }

    pub async fn payout(&self, payout_id: &str) -> PayoutRecord {
        settle::ledger::payouts::payout(&self.ledger.store, payout_id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no payout {payout_id}"))
    }

    pub async fn payouts_of(&self, provider: &str) -> Vec<PayoutRecord> {
        settle::ledger::payouts::provider_payouts(&self.ledger.store, provider)
            .await
            .unwrap()
    }

    /// `(payable, held, in_transit, paid)` of a provider from the account projection.
    pub async fn balances(&self, provider: &str) -> (i64, i64, i64, i64) {
        // Payout commands leave the aggregates to the projector; a reader folds first.
        let stream = format!("provider:{provider}");
        self.ledger.store.catch_up(&[&stream]).await.unwrap();
        let rows = sqlx::query(
            "SELECT account, balance_micro_usdc FROM account_balances WHERE owner = $1",
        )
        .bind(format!("provider:{provider}"))
        .fetch_all(self.ledger.store.pool())
        .await
        .unwrap();
        let (mut payable, mut held, mut in_transit, mut paid) = (0, 0, 0, 0);
        for r in rows {
            let account: String = r.get(0);
            let balance: i64 = r.get(1);
            if account == accounts::payable(provider) {
                payable = balance;
            } else if account == accounts::held(provider) {
                held = balance;
            } else if account == accounts::in_transit(provider) {
                in_transit = balance;
            } else if account == accounts::TREASURY_USDC || account == accounts::TREASURY_BANK {
                paid += balance;
            }
        }
        (payable, held, in_transit, paid)
    }

    /// The money invariants, per provider, from the events alone:
    /// payable + held + in_transit + paid == net earnings + adjustments − voids; held and
    /// in-transit balances equal the payouts in those states; every run decided each
    /// provider at most once and created at most one payout per provider; `verify` clean;
    /// every event matches its schema.
    pub async fn check_invariants(&self) {
        check_invariants(&self.ledger).await;
    }
}

pub async fn check_invariants(ledger: &Ledger) {
    check_money(ledger).await;
    let report = settle::verify::verify(&ledger.store, &|_| {})
        .await
        .unwrap();
    assert!(report.ok(), "verify: {:?}", report.problems);
    crate::common::assert_events_match_schemas(&ledger.store).await;
}

/// The money invariants of [`World::check_invariants`] without `verify` and the schemas.
pub async fn check_money(ledger: &Ledger) {
    let store = &ledger.store;
    let mut booked: BTreeMap<String, i64> = BTreeMap::new();
    let mut decided: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for stream in store.streams().await.unwrap() {
        let Some(provider) = stream.strip_prefix("provider:") else {
            continue;
        };
        let mut after = 0;
        loop {
            let page = store.stream_events(&stream, after, 1000).await.unwrap();
            if page.is_empty() {
                break;
            }
            for e in &page {
                after = e.seq;
                let body =
                    EventBody::from_json(&e.event_type, e.version as u32, &e.payload).unwrap();
                let entry = booked.entry(provider.to_owned()).or_default();
                match body {
                    EventBody::UsageRecorded(u) => {
                        *entry += u.segments.iter().map(|s| s.net_micro_usdc).sum::<i64>()
                    }
                    EventBody::UsageVoided(v) => {
                        *entry -= v.segments.iter().map(|s| s.net_micro_usdc).sum::<i64>()
                    }
                    EventBody::AdjustmentPosted(a) => *entry += a.amount_micro_usdc,
                    EventBody::PayoutRunDecided(d) => {
                        *decided
                            .entry((d.run_kind, d.run_key, d.provider_id.into()))
                            .or_default() += 1;
                    }
                    _ => {}
                }
            }
        }
    }
    for (key, n) in &decided {
        assert_eq!(*n, 1, "{key:?} decided {n} times");
    }
    // The balances as every reader sees them: the projector's backlog folded first.
    store.catch_up_all().await.unwrap();
    let pool = store.pool();
    for (provider, net) in &booked {
        let rows = sqlx::query(
            "SELECT account, balance_micro_usdc FROM account_balances WHERE owner = $1",
        )
        .bind(format!("provider:{provider}"))
        .fetch_all(pool)
        .await
        .unwrap();
        let provider_accounts = [
            accounts::payable(provider),
            accounts::held(provider),
            accounts::in_transit(provider),
            accounts::TREASURY_USDC.to_owned(),
            accounts::TREASURY_BANK.to_owned(),
        ];
        let total: i64 = rows
            .iter()
            .filter(|r| provider_accounts.contains(&r.get::<String, _>(0)))
            .map(|r| r.get::<i64, _>(1))
            .sum();
        assert_eq!(
            total, *net,
            "{provider}: payable + held + in_transit + paid must equal net earnings + adjustments - voids"
        );
        let payouts = settle::ledger::payouts::provider_payouts(store, provider)
            .await
            .unwrap();
        let in_state = |states: &[&str]| -> i64 {
            payouts
                .iter()
                .filter(|p| states.contains(&p.status.as_str()))
                .map(|p| p.amount_micro_usdc)
                .sum()
        };
        let balance = |account: String| {
            rows.iter()
                .filter(|r| r.get::<String, _>(0) == account)
                .map(|r| r.get::<i64, _>(1))
                .sum::<i64>()
        };
        assert_eq!(
            balance(accounts::held(provider)),
            in_state(&["held"]),
            "{provider}: held"
        );
        assert_eq!(
            balance(accounts::in_transit(provider)),
            in_state(&["created", "submitted"]),
            "{provider}: in transit"
        );
        let mut runs_paid: BTreeMap<(String, String), usize> = BTreeMap::new();
        for p in &payouts {
            *runs_paid
                .entry((p.run_kind.clone(), p.run_key.clone()))
                .or_default() += 1;
            assert!(p.payout_id.len() <= 35, "payout id fits a SEPA EndToEndId");
        }
        assert!(
            runs_paid.values().all(|n| *n == 1),
            "{provider}: one payout per run: {runs_paid:?}"
        );
    }
}

/// The candidate of a report.
pub fn candidate<'a>(report: &'a RunReport, provider: &str) -> &'a runs::RunCandidate {
    report
        .candidates
        .iter()
        .find(|c| c.provider_id == provider)
        .unwrap_or_else(|| {
            panic!(
                "{provider} is no candidate of {} {}",
                report.run_kind, report.run_key
            )
        })
}

pub fn decision(report: &RunReport, provider: &str) -> String {
    candidate(report, provider).decision.as_str().to_owned()
}

pub fn is_candidate(report: &RunReport, provider: &str) -> bool {
    report.candidates.iter().any(|c| c.provider_id == provider)
}

/// Number of events on the ledger.
pub async fn event_count(ledger: &Ledger) -> i64 {
    ledger.store.event_count().await.unwrap()
}

/// The keys of the runs a scheduler finds due now, in execution order.
pub async fn due_keys(s: &settle::jobs::scheduler::Scheduler) -> Vec<String> {
    s.due()
        .await
        .expect("due runs")
        .iter()
        .map(|r| r.to_string())
        .collect()
}
