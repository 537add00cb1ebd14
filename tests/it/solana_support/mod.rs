//! Scenario helpers of the Solana rail tests: a ledger on a fresh database, a local chain
//! (litesvm with the real SPL programs) served as JSON-RPC, providers paid in USDC, weekly
//! runs, and the checks every scenario ends with.

use crate::common::Tables;
use std::sync::Arc;

use settle::config::{RunConfig, SolanaConfig};
use settle::domain::money::div_round_half_even;
use settle::domain::time::{format_ms, parse_rfc3339_ms};
use settle::ledger::ingest::{SenderScope, UsageInput, UsageResult};
use settle::ledger::payouts::PayoutRecord;
use settle::ledger::runs::{self, RunReport};
use settle::ledger::{Actor, Ledger, ManualClock};
use settle::rails::solana::dev::{self, DevChain};
use settle::rails::solana::{SolanaRail, SolanaReconcileReport};
use settle::wire::import::{apply, parse_line};
use settle_calendar::Calendar;
use settle_solana::{Keypair, Pubkey, Signer};

use crate::common::TestDb;

/// µUSDC in one USDC.
pub const USDC: u64 = 1_000_000;
/// Lamports in one SOL.
pub const SOL: u64 = 1_000_000_000;
/// When providers register and earn (usage lies on 2026-11-18, before this instant).
pub const SETUP_AT: &str = "2026-11-20T00:00:00Z";
/// The first weekly run (a Monday) and when it is started.
pub const MONDAY: &str = "2026-11-23";
pub const RUN_AT: &str = "2026-11-23T06:00:00Z";
/// The following weekly run.
pub const NEXT_MONDAY: &str = "2026-11-30";
pub const NEXT_RUN_AT: &str = "2026-11-30T06:00:00Z";

/// A provider paid in USDC and what it earned (net, at the community fee).
#[derive(Clone, Debug)]
pub struct Provider {
    pub id: String,
    pub wallet: Pubkey,
    pub net_micro_usdc: i64,
}

pub struct World {
    pub db: TestDb,
    pub ledger: Ledger,
    pub clock: Arc<ManualClock>,
    pub dev: DevChain,
    _state: tempfile::TempDir,
}

/// Net of a usage event of `gross` at the community fee (2000 bps).
pub fn community_net(gross_micro_usdc: i64) -> i64 {
    gross_micro_usdc - div_round_half_even(i128::from(gross_micro_usdc) * 2000, 10_000) as i64
}

impl World {
    /// A fresh database and a local chain whose treasury holds `usdc_micro` and `lamports`.
    pub async fn new(usdc_micro: u64, lamports: u64) -> World {
        let db = TestDb::new().await;
        let (ledger, clock) = db.ledger_at(SETUP_AT).await;
        let state = tempfile::tempdir().expect("state dir");
        let dev = dev::start_local_chain(state.path(), usdc_micro, lamports)
            .await
            .expect("local chain");
        World {
            db,
            ledger,
            clock,
            dev,
            _state: state,
        }
    }

    /// The rail configuration for the local chain.
    pub fn config(&self) -> SolanaConfig {
        self.dev.solana_config()
    }

    /// The rail through the production `RpcClient` adapter against the local endpoint.
    pub async fn rail(&self) -> SolanaRail {
        self.rail_with(|_| {}).await
    }

    pub async fn rail_with(&self, change: impl FnOnce(&mut SolanaConfig)) -> SolanaRail {
        let mut config = self.config();
        change(&mut config);
        SolanaRail::connect(&config).await.expect("rail connects")
    }

    pub fn at(&self, now: &str) {
        let t = parse_rfc3339_ms(now).expect("valid instant");
        assert!(
            t >= self.ledger.now_ms(),
            "the clock only moves forward: {now}"
        );
        self.clock.set(t);
    }

    pub async fn import(&self, lines: &[String]) {
        let actor = Actor::operator("test");
        for line in lines {
            let command = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            apply(&self.ledger, &command, &actor)
                .await
                .unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }

    /// Registers `n` weekly providers `{prefix}{i}` with fresh wallets and one GPU each, and
    /// books one usage event each on 2026-11-18 (distinct amounts, net above the weekly
    /// minimum of 25 USDC).
    pub async fn providers(&self, prefix: &str, n: usize) -> Vec<Provider> {
        let mut out = Vec::with_capacity(n);
        let mut lines = Vec::with_capacity(2 * n);
        let mut usage = Vec::with_capacity(n);
        let day = parse_rfc3339_ms("2026-11-18T00:00:00Z").unwrap();
        for i in 0..n {
            let id = format!("{prefix}{i:04}");
            let wallet = Keypair::new().pubkey();
            lines.push(format!(
                r#"{{"type":"provider.register","provider_id":"{id}","name":"Provider {id}","email":"ops@{id}.test","tier":"community","schedule":"weekly","payout_method":{{"kind":"solana","wallet":"{wallet}"}}}}"#
            ));
            lines.push(format!(
                r#"{{"type":"gpu.register","gpu_id":"{id}-g0","provider_id":"{id}","model":"H100-80GB"}}"#
            ));
            // The price book the usage rate is checked against (SPEC §2).
            lines.push(format!(
                r#"{{"type":"rate.set","provider_id":"{id}","model":"H100-80GB","rate_usdc_per_hour":"3.6","effective_from":"2026-01-01T00:00:00Z"}}"#
            ));
            // 3.6 USDC/h = 1 µUSDC per millisecond.
            let gross = 40_000_000 + 7_919 * i as i64;
            usage.push(UsageInput {
                event_id: Some(format!("{id}-u0")),
                provider_id: Some(id.clone()),
                gpu_id: Some(format!("{id}-g0")),
                rental_id: None,
                started_at: Some(format_ms(day)),
                ended_at: Some(format_ms(day + gross)),
                rate_usdc_per_hour: Some("3.6".into()),
            });
            out.push(Provider {
                id,
                wallet,
                net_micro_usdc: community_net(gross),
            });
        }
        self.import(&lines).await;
        for chunk in usage.chunks(1000) {
            let results = self
                .ledger
                .ingest_usage(chunk, &SenderScope::Admin, &Actor::operator("test"))
                .await
                .expect("ingest");
            for r in results {
                assert!(matches!(r, UsageResult::Accepted { .. }), "{r:?}");
            }
        }
        out
    }

    /// Runs the weekly run of `monday` at `at`.
    pub async fn weekly(&self, monday: &str, at: &str) -> RunReport {
        self.at(at);
        self.ledger
            .run_payouts(
                runs::weekly_key(monday).unwrap(),
                &Calendar::platform_default(),
                &RunConfig::default(),
                &Actor::system("test-run"),
            )
            .await
            .unwrap_or_else(|e| panic!("weekly {monday}: {e}"))
    }

    /// The payouts of a weekly run, in payout id order.
    pub async fn run_payouts(&self, monday: &str) -> Vec<PayoutRecord> {
        let pool = self.ledger.store.pool();
        let ids = sqlx::query(
            "SELECT payout_id FROM payouts WHERE run_kind = 'weekly' AND run_key = $1 ORDER BY payout_id",
        )
        .bind(monday)
        .fetch_all(pool)
        .await
        .unwrap();
        let mut out = Vec::with_capacity(ids.len());
        for row in ids {
            let id: String = sqlx::Row::try_get(&row, 0).unwrap();
            out.push(
                settle::ledger::payouts::payout(&self.ledger.store, &id)
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        out
    }

    pub async fn payouts_of(&self, provider: &str) -> Vec<PayoutRecord> {
        settle::ledger::payouts::provider_payouts(&self.ledger.store, provider)
            .await
            .unwrap()
    }

    pub fn usdc_of(&self, wallet: &Pubkey) -> u64 {
        self.dev.usdc_of(wallet)
    }

    /// `settle::verify::verify` clean, the rail's reconciliation clean, every event valid
    /// against its schema.
    pub async fn assert_clean(&self, rail: &SolanaRail) -> SolanaReconcileReport {
        let report = settle::verify::verify(&self.ledger.store, &|_| {})
            .await
            .expect("verify runs");
        assert!(report.ok(), "verify: {:?}", report.problems);
        let rec = rail.reconcile(&self.ledger).await.expect("reconcile runs");
        assert!(rec.ok(), "reconcile: {rec:?}");
        crate::common::assert_events_match_schemas(&self.ledger.store).await;
        rec
    }

    /// Number of events of a type on the ledger.
    pub async fn count_events(&self, event_type: &str) -> i64 {
        use sqlx::Row;
        sqlx::query("SELECT COUNT(*) FROM events WHERE event_type = $1")
            .bind(event_type)
            .fetch_one(self.ledger.store.pool())
            .await
            .unwrap()
            .get::<i64, _>(0)
    }
}
