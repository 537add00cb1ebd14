//! Dense v0 transactions against the treasury's address lookup tables, on the real
//! Address Lookup Table, SPL Token and ATA programs (litesvm): how many payouts one
//! transaction carries, what a payout costs in fees, the tables' maintenance
//! transactions exactly once through crashes, and nothing signed against a table that a
//! node describes otherwise than the treasury filled it.
//!
//! `cargo test -p settle-solana --test lookup_tables -- --nocapture` prints the figures.

#![cfg(feature = "local-chain")]

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use common::{Env, SOL, USDC, fast_config, total, transfers, wallets};
use settle_solana::lookup::{
    self, ADDRESSES_PER_TABLE_MAX, LookupTables, TableGrowth, TableRefusal,
};
use settle_solana::pack::{self, token_account_of};
use settle_solana::{
    Account, AttemptOutcome, Chain, ChainError, Confirmation, FileJournal, Hash, Journal,
    JournalError, LocalChain, MemoryJournal, PayError, PayReport, Payer, PreflightError, Pubkey,
    Signature, SignatureStatuses, SignedAttempt, Tip, TokenDelta, Transfer, VersionedTransaction,
    maintained_table, preflight, reconcile,
};
use solana_address_lookup_table_interface::state::{AddressLookupTable, LookupTableMeta};
use solana_message::VersionedMessage;

/// The priority fee of the default configuration (what the figures compare at).
const PRIORITY_FEE: u64 = 10_000;

/// One landed transaction of a pay call.
struct Landed {
    payouts: usize,
    fee: u64,
    v0: bool,
    size: usize,
}

/// Landed payment transactions and landed maintenance transactions of a report.
fn landed(env: &Env, report: &PayReport) -> (Vec<Landed>, Vec<Landed>) {
    let mut payments = Vec::new();
    let mut maintenance = Vec::new();
    for attempt in report.landed_attempts() {
        let signature: Signature = attempt.signature.parse().unwrap();
        let tx = env.chain.landed_transaction(&signature).unwrap();
        let row = Landed {
            payouts: attempt.payout_ids.len(),
            fee: tx.fee,
            v0: matches!(tx.transaction.message, VersionedMessage::V0(_)),
            size: pack::serialized_size(&tx.transaction),
        };
        if attempt.payout_ids.is_empty() {
            maintenance.push(row);
        } else {
            payments.push(row);
        }
    }
    (payments, maintenance)
}

fn payer_config(env: &Env, lookup_tables: bool) -> settle_solana::PayerConfig {
    let mut config = fast_config(env.mint);
    config.priority_fee_micro_lamports = PRIORITY_FEE;
    config.lookup_tables = lookup_tables;
    config
}

/// A treasury holding 1,000,000 USDC and 100 SOL.
fn rich_env() -> Env {
    Env::new(1_000_000 * USDC, 100 * SOL)
}

/// `n` recipients that already hold a USDC account.
fn with_accounts(env: &Env, n: usize) -> Vec<Pubkey> {
    let recipients = wallets(n);
    for w in &recipients {
        env.chain.create_token_account(&env.mint, w);
    }
    recipients
}

/// One pass with lookup tables on, journaled in `journal`.
async fn pay_with_tables(env: &Env, journal: Arc<dyn Journal>, batch: &[Transfer]) -> PayReport {
    env.payer_with(journal, payer_config(env, true))
        .pay(batch.to_vec())
        .await
        .unwrap()
}

/// Every address of the treasury's tables, as the chain holds them.
async fn table_addresses(env: &Env, journal: &dyn Journal) -> Vec<Pubkey> {
    let keys = journal.lookup_tables().await.unwrap();
    let tables = LookupTables::load(&env.chain, &env.treasury.pubkey(), &keys)
        .await
        .unwrap();
    assert_eq!(
        tables.tables().len(),
        keys.len(),
        "every journaled table exists"
    );
    tables
        .tables()
        .iter()
        .flat_map(|t| t.addresses.clone())
        .collect()
}

/// Each recipient's token account is in exactly one table, and no address twice.
async fn assert_tables_hold_each_once(env: &Env, journal: &dyn Journal, batch: &[Transfer]) {
    let addresses = table_addresses(env, journal).await;
    let distinct: HashSet<&Pubkey> = addresses.iter().collect();
    assert_eq!(
        distinct.len(),
        addresses.len(),
        "an address is in two tables"
    );
    for t in batch {
        assert!(
            distinct.contains(&token_account_of(&t.wallet, &env.mint)),
            "{} is in no table",
            t.payout_id
        );
    }
}

fn assert_paid(env: &Env, report: &PayReport, batch: &[Transfer]) {
    assert_eq!(report.settled(), batch.len(), "{report:?}");
    for t in batch {
        assert_eq!(
            env.balance(&t.wallet),
            t.amount_micro_usdc,
            "{}",
            t.payout_id
        );
    }
}

fn summary(label: &str, payments: &[Landed], payouts: usize) -> f64 {
    let fees: u64 = payments.iter().map(|l| l.fee).sum();
    let per_tx: Vec<usize> = payments.iter().map(|l| l.payouts).collect();
    let fee_per_payout = fees as f64 / payouts as f64;
    println!(
        "{label}: {payouts} payouts in {} transactions, payouts per transaction max {} min {}, \
         largest transaction {} bytes, fees {fees} lamports = {fee_per_payout:.0} per payout",
        payments.len(),
        per_tx.iter().max().unwrap(),
        per_tx.iter().min().unwrap(),
        payments.iter().map(|l| l.size).max().unwrap(),
    );
    fee_per_payout
}

#[tokio::test]
async fn existing_token_accounts_pack_at_least_40_payouts_per_v0_transaction() {
    const PAYOUTS: usize = 600;
    let env = rich_env();
    let recipients = with_accounts(&env, PAYOUTS);
    let batch = transfers("dense", &recipients);
    let treasury_before = env.treasury_usdc();
    let lamports_before = env.chain.lamports_of(&env.treasury.pubkey());
    let journal = Arc::new(MemoryJournal::new());
    let payer = env.payer_with(journal.clone(), payer_config(&env, true));
    let report = payer.pay(batch.clone()).await.unwrap();

    assert_paid(&env, &report, &batch);
    assert_eq!(env.treasury_usdc(), treasury_before - total(&batch));
    let (payments, maintenance) = landed(&env, &report);
    assert!(
        payments.iter().all(|l| l.v0),
        "every payment is a v0 transaction"
    );
    assert!(payments.iter().all(|l| l.size <= pack::PACKET_DATA_SIZE));
    let mut per_tx: Vec<usize> = payments.iter().map(|l| l.payouts).collect();
    per_tx.sort_unstable();
    // Only the last transaction of a run may carry the remainder.
    assert!(per_tx[1] >= 40, "payouts per transaction {per_tx:?}");
    let dense = summary("v0 + lookup tables, existing accounts", &payments, PAYOUTS);
    let tables = journal.lookup_tables().await.unwrap();
    // The mint, the treasury's account and 600 recipients' accounts: three full tables.
    assert_eq!(
        tables.len(),
        (PAYOUTS + 2).div_ceil(ADDRESSES_PER_TABLE_MAX)
    );
    let maintenance_fees: u64 = maintenance.iter().map(|l| l.fee).sum();
    let spent = lamports_before - env.chain.lamports_of(&env.treasury.pubkey());
    println!(
        "  tables: {} created, {} maintenance transactions, {maintenance_fees} lamports of fees \
         (once), {} lamports of rent (a deposit); treasury spent {spent} lamports in all",
        tables.len(),
        maintenance.len(),
        spent - maintenance_fees - payments.iter().map(|l| l.fee).sum::<u64>(),
    );
    assert_tables_hold_each_once(&env, journal.as_ref(), &batch).await;
    let settled = common::settled(&report, &batch);
    let rec = reconcile(&env.chain, &env.mint, &settled).await.unwrap();
    assert_eq!(rec.matched, PAYOUTS);
    assert!(rec.discrepancies.is_empty(), "{:?}", rec.discrepancies);

    // The same recipients next week: the tables are reused, nothing is extended.
    let next_week: Vec<Transfer> = transfers("dense-w2", &recipients);
    let signed_before = journal.attempts().len();
    let again = payer.pay(next_week.clone()).await.unwrap();
    assert_eq!(again.settled(), PAYOUTS);
    let (payments2, maintenance2) = landed(&env, &again);
    assert!(
        maintenance2.is_empty(),
        "no table transaction the second time"
    );
    assert_eq!(journal.attempts().len() - signed_before, payments2.len());
    assert!(payments2.iter().all(|l| l.v0));

    // The legacy packing of the same payouts, for comparison.
    let legacy_env = rich_env();
    let legacy_recipients = with_accounts(&legacy_env, PAYOUTS);
    let legacy_batch = transfers("legacy", &legacy_recipients);
    let legacy_payer = legacy_env.payer_with(
        Arc::new(MemoryJournal::new()),
        payer_config(&legacy_env, false),
    );
    let legacy_report = legacy_payer.pay(legacy_batch.clone()).await.unwrap();
    assert_paid(&legacy_env, &legacy_report, &legacy_batch);
    let (legacy, none) = landed(&legacy_env, &legacy_report);
    assert!(none.is_empty() && legacy.iter().all(|l| !l.v0));
    assert!(legacy.iter().all(|l| l.payouts <= 18));
    let legacy_fee = summary("legacy, existing accounts", &legacy, PAYOUTS);
    assert!(
        dense * 2.0 < legacy_fee,
        "a payout costs {dense:.0} lamports in v0 against {legacy_fee:.0} in legacy"
    );
}

#[tokio::test]
async fn new_token_accounts_are_created_alongside_in_v0_transactions() {
    const PAYOUTS: usize = 300;
    let env = rich_env();
    let batch = transfers("fresh", &wallets(PAYOUTS));
    let journal = Arc::new(MemoryJournal::new());
    let report = pay_with_tables(&env, journal.clone(), &batch).await;
    assert_paid(&env, &report, &batch);
    let (payments, _) = landed(&env, &report);
    assert!(payments.iter().all(|l| l.v0));
    let mut per_tx: Vec<usize> = payments.iter().map(|l| l.payouts).collect();
    per_tx.sort_unstable();
    // Bound by the runtime's instruction trace, not by size: 3 + 10 × (1 + 5) = 63 of 64.
    assert!(per_tx[1] >= 10, "payouts per transaction {per_tx:?}");
    summary("v0 + lookup tables, all accounts new", &payments, PAYOUTS);

    let legacy_env = rich_env();
    let legacy_batch = transfers("fresh-legacy", &wallets(PAYOUTS));
    let legacy_report = legacy_env
        .payer_with(
            Arc::new(MemoryJournal::new()),
            payer_config(&legacy_env, false),
        )
        .pay(legacy_batch.clone())
        .await
        .unwrap();
    assert_paid(&legacy_env, &legacy_report, &legacy_batch);
    let (legacy, _) = landed(&legacy_env, &legacy_report);
    summary("legacy, all accounts new", &legacy, PAYOUTS);
}

#[tokio::test]
async fn a_small_pass_creates_no_table_and_stays_legacy() {
    let env = Env::new(1_000 * USDC, 10 * SOL);
    let batch = transfers("small", &wallets(10));
    let journal = Arc::new(MemoryJournal::new());
    let report = pay_with_tables(&env, journal.clone(), &batch).await;
    assert_paid(&env, &report, &batch);
    assert!(journal.lookup_tables().await.unwrap().is_empty());
    let (payments, maintenance) = landed(&env, &report);
    assert!(maintenance.is_empty());
    assert!(payments.iter().all(|l| !l.v0));
}

/// The preflight counts the tables a pass will create and extend first: a treasury that
/// holds what the payments need but not the tables' rent is refused before anything is
/// sent; once funded, the rent the tables hold is exactly what was predicted.
#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario read top to bottom: a preflight over calls that create and extend tables, with the rent and fees it must count"
)]
async fn the_preflight_counts_the_lookup_tables_rent_and_fees() {
    const PAYOUTS: usize = 600;
    /// Below the treasury's own rent-exempt reserve and one transaction's fee.
    const START_LAMPORTS: u64 = SOL / 1_000;
    let env = Env::new(1_000_000 * USDC, START_LAMPORTS);
    let recipients = with_accounts(&env, PAYOUTS);
    let batch = transfers("rent", &recipients);
    let config = payer_config(&env, true);
    let journal = Arc::new(MemoryJournal::new());
    let payer = env.payer_with(journal.clone(), config.clone());
    let params = payer.pack_params();
    let missing = LookupTables::none().missing(&pack::lookup_addresses(&params, &batch));
    let growth = lookup::growth(
        &LookupTables::none(),
        &params.treasury,
        &missing,
        &lookup::budget_for_sizing(config.priority_fee_micro_lamports),
    );
    // The mint, the treasury's account and 600 recipients' accounts: three tables.
    assert_eq!(growth.tables_created, 3);
    assert_eq!(growth.addresses, PAYOUTS + 2);
    let without_tables = preflight(&env.chain, &params, &batch, TableGrowth::default()).await;
    let Err(PreflightError::InsufficientSol {
        needed_lamports: payments_need,
        ..
    }) = without_tables
    else {
        panic!("{without_tables:?}");
    };
    // Enough for the payments (an upper bound), not for the tables.
    env.chain
        .airdrop_sol(&env.treasury.pubkey(), payments_need - START_LAMPORTS);
    let refused = payer.pay(batch.clone()).await;
    let Err(PayError::Preflight(PreflightError::InsufficientSol {
        needed_lamports,
        missing_lamports,
        ..
    })) = refused
    else {
        panic!("the pass should be refused: {refused:?}");
    };
    assert_eq!(env.chain.stats().send_calls, 0, "nothing sent");
    let predicted = preflight(&env.chain, &params, &batch, growth).await;
    let Err(PreflightError::InsufficientSol {
        needed_lamports: with_tables,
        ..
    }) = predicted
    else {
        panic!("{predicted:?}");
    };
    assert_eq!(needed_lamports, with_tables, "the payer counts the tables");
    assert!(needed_lamports > payments_need);

    env.chain
        .airdrop_sol(&env.treasury.pubkey(), missing_lamports);
    let report = payer.pay(batch.clone()).await.unwrap();
    assert_paid(&env, &report, &batch);
    let (_, maintenance) = landed(&env, &report);
    assert_eq!(
        maintenance.len(),
        growth.transactions,
        "as many as predicted"
    );
    let tables = LookupTables::load(
        &env.chain,
        &params.treasury,
        &journal.lookup_tables().await.unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(tables.tables().len(), growth.tables_created);
    let rent_held: u64 = tables
        .tables()
        .iter()
        .map(|t| env.chain.lamports_of(&t.key))
        .sum();
    let predicted_rent = lookup::rent(&env.chain, growth).await.unwrap();
    assert_eq!(
        rent_held, predicted_rent,
        "the rent the tables hold was predicted exactly"
    );
    let left = lookup::growth(
        &tables,
        &params.treasury,
        &tables.missing(&pack::lookup_addresses(&params, &batch)),
        &lookup::budget_for_sizing(config.priority_fee_micro_lamports),
    );
    assert_eq!(left, TableGrowth::default(), "nothing left to grow");
}

/// What a test journal does around the file or memory journal it wraps; every hook does
/// nothing unless a test says otherwise.
trait Hooks: Send + Sync {
    /// Before `attempt` is recorded.
    fn before_signed(&self, _attempt: &SignedAttempt) {}
    /// After `attempt` was recorded; an `Err` is what the payer sees.
    fn after_signed(&self, _attempt: &SignedAttempt) -> Result<(), JournalError> {
        Ok(())
    }
    /// Before an outcome is recorded (`maintenance`: the attempt carries no transfer).
    fn before_outcome(&self, _maintenance: bool) -> Result<(), JournalError> {
        Ok(())
    }
    /// After an outcome was recorded.
    fn after_outcome(&self) {}
    /// Whether reads of open attempts see `attempt`.
    fn visible(&self, _attempt: &SignedAttempt) -> bool {
        true
    }
}

/// A journal with [`Hooks`] around another one.
struct Hooked<H> {
    inner: Box<dyn Journal>,
    hooks: H,
}

impl<H> Hooked<H> {
    fn on_file(path: &std::path::Path, hooks: H) -> Self {
        Self {
            inner: Box::new(FileJournal::open(path).unwrap()),
            hooks,
        }
    }
}

#[async_trait]
impl<H: Hooks> Journal for Hooked<H> {
    async fn record_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError> {
        self.hooks.before_signed(attempt);
        self.inner.record_signed(attempt).await?;
        self.hooks.after_signed(attempt)
    }
    async fn record_outcome(
        &self,
        attempt_id: &str,
        outcome: &AttemptOutcome,
    ) -> Result<(), JournalError> {
        let maintenance = self
            .inner
            .open_attempts()
            .await?
            .iter()
            .any(|a| a.attempt_id == attempt_id && a.transfers.is_empty());
        self.hooks.before_outcome(maintenance)?;
        self.inner.record_outcome(attempt_id, outcome).await?;
        self.hooks.after_outcome();
        Ok(())
    }
    async fn open_attempts(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        let mut open = self.inner.open_attempts().await?;
        open.retain(|a| self.hooks.visible(a));
        Ok(open)
    }
    async fn resolved_payouts(&self, ids: &[String]) -> Result<Vec<String>, JournalError> {
        self.inner.resolved_payouts(ids).await
    }
    async fn holders(&self, ids: &[String]) -> Result<Vec<(String, String)>, JournalError> {
        self.inner.holders(ids).await
    }
    async fn lookup_tables(&self) -> Result<Vec<Pubkey>, JournalError> {
        self.inner.lookup_tables().await
    }
    async fn landed_maintenance(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        self.inner.landed_maintenance().await
    }
}

/// Makes the first maintenance record durable, then "crashes" (before it is sent), or
/// makes the first maintenance outcome fail (after it landed).
struct CrashOnTable {
    after_landing: bool,
    crashed: std::sync::atomic::AtomicBool,
}

impl CrashOnTable {
    fn new(after_landing: bool) -> Self {
        Self {
            after_landing,
            crashed: false.into(),
        }
    }

    fn crash_once(&self) -> Result<(), JournalError> {
        if self.crashed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        Err(JournalError(
            "simulated crash around a table transaction".into(),
        ))
    }
}

impl Hooks for CrashOnTable {
    fn after_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError> {
        if attempt.transfers.is_empty() && !self.after_landing {
            self.crash_once()?;
        }
        Ok(())
    }
    fn before_outcome(&self, maintenance: bool) -> Result<(), JournalError> {
        if maintenance && self.after_landing {
            self.crash_once()?;
        }
        Ok(())
    }
}

async fn crash_around_a_table_transaction(after_landing: bool) {
    const PAYOUTS: usize = 300;
    let env = rich_env();
    let recipients = with_accounts(&env, PAYOUTS);
    let batch = transfers("crash-table", &recipients);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    {
        let journal = Arc::new(Hooked::on_file(&path, CrashOnTable::new(after_landing)));
        let err = env
            .payer_with(journal, payer_config(&env, true))
            .pay(batch.clone())
            .await
            .unwrap_err();
        assert!(matches!(err, PayError::Journal(_)), "{err}");
    } // the process is gone, with a table transaction open in its journal
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), 0, "no payment before the crash");
    }
    let journal = Arc::new(FileJournal::open(&path).unwrap());
    let open = journal.open_attempts().await.unwrap();
    assert!(
        open.iter().any(|a| a.transfers.is_empty()),
        "the table transaction is journaled and open"
    );

    let report = pay_with_tables(&env, journal.clone(), &batch).await;
    assert_paid(&env, &report, &batch);
    assert!(journal.open_attempts().await.unwrap().is_empty());
    assert_tables_hold_each_once(&env, journal.as_ref(), &batch).await;
    let (payments, _) = landed(&env, &report);
    assert!(payments.iter().all(|l| l.v0));
}

#[tokio::test]
async fn a_table_transaction_journaled_but_never_sent_is_resumed_not_duplicated() {
    crash_around_a_table_transaction(false).await;
}

#[tokio::test]
async fn a_table_transaction_that_landed_before_the_crash_is_resolved_not_duplicated() {
    crash_around_a_table_transaction(true).await;
}

#[tokio::test]
async fn only_lookup_table_transactions_count_as_maintenance() {
    let env = rich_env();
    let recipients = wallets(80);
    let batch = transfers("kinds", &recipients);
    let journal = Arc::new(MemoryJournal::new());
    env.payer_with(journal.clone(), payer_config(&env, true))
        .pay(batch)
        .await
        .unwrap();
    let attempts = journal.attempts();
    let mut tables = 0;
    for attempt in &attempts {
        let tx: VersionedTransaction = attempt.transaction().unwrap();
        match maintained_table(&tx) {
            Some(_) => {
                assert!(attempt.transfers.is_empty());
                tables += 1;
            }
            None => assert!(!attempt.transfers.is_empty()),
        }
    }
    assert!(tables >= 1);
}

#[tokio::test]
async fn a_table_transaction_that_never_lands_expires_and_its_addresses_go_to_another_table() {
    const PAYOUTS: usize = 100;
    let env = rich_env();
    let recipients = with_accounts(&env, PAYOUTS);
    let batch = transfers("lost-table", &recipients);
    // The first transaction sent, the table's creation, never lands.
    env.chain.blackhole_next_transactions(1);
    let journal = Arc::new(MemoryJournal::new());
    let report = pay_with_tables(&env, journal.clone(), &batch).await;
    assert_paid(&env, &report, &batch);
    let expired: Vec<_> = report
        .attempts
        .iter()
        .filter(|a| a.payout_ids.is_empty() && a.outcome == Some(AttemptOutcome::Expired))
        .collect();
    assert_eq!(expired.len(), 1, "the lost creation expired");
    let tables = journal.lookup_tables().await.unwrap();
    assert_eq!(tables.len(), 1, "one table, created by the second plan");
    assert_tables_hold_each_once(&env, journal.as_ref(), &batch).await;
    let (payments, _) = landed(&env, &report);
    assert!(payments.iter().all(|l| l.v0));
}

/// Counts the attempts signed and not yet resolved, and the most there were at once; keeps
/// the signatures in the order they were signed.
#[derive(Default)]
struct InFlightGauge {
    open: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    signed: std::sync::Mutex<Vec<String>>,
}

impl Hooks for InFlightGauge {
    fn after_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.open.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        self.signed.lock().unwrap().push(attempt.signature.clone());
        Ok(())
    }
    fn after_outcome(&self) {
        self.open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// One pass with at most `limit` transactions in flight, through an [`InFlightGauge`];
/// every payout paid.
async fn pay_gauged(
    env: &Env,
    batch: &[Transfer],
    lookup_tables: bool,
    limit: usize,
) -> (PayReport, Arc<Hooked<InFlightGauge>>) {
    let gauge = Arc::new(Hooked {
        inner: Box::new(MemoryJournal::new()),
        hooks: InFlightGauge::default(),
    });
    let mut config = payer_config(env, lookup_tables);
    config.transactions_in_flight_max = limit;
    let report = env
        .payer_with(gauge.clone(), config)
        .pay(batch.to_vec())
        .await
        .unwrap();
    assert_paid(env, &report, batch);
    (report, gauge)
}

#[tokio::test]
async fn no_more_transactions_are_in_flight_than_the_limit() {
    const PAYOUTS: usize = 300;
    const LIMIT: usize = 3;
    let env = rich_env();
    let recipients = with_accounts(&env, PAYOUTS);
    let batch = transfers("wave", &recipients);
    let (report, gauge) = pay_gauged(&env, &batch, true, LIMIT).await;
    let most = gauge.hooks.most.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        most, LIMIT,
        "at most {LIMIT} transactions in flight, and that many"
    );
    let (payments, maintenance) = landed(&env, &report);
    assert!(
        payments.len() > 2 * LIMIT,
        "several waves: {}",
        payments.len()
    );
    assert!(maintenance.len() > LIMIT, "table transactions in waves too");
    assert!(payments.iter().all(|l| l.v0));
    assert_tables_hold_each_once(&env, gauge.as_ref(), &batch).await;
}

/// A slow transaction holds only its own place in the window: the ones signed after it
/// are signed, sent and settled while it waits (in waves, the next wave would wait for it).
#[tokio::test]
async fn the_window_slides_past_a_slow_transaction() {
    const PAYOUTS: usize = 180;
    const LIMIT: usize = 2;
    let env = rich_env();
    let recipients = with_accounts(&env, PAYOUTS);
    let batch = transfers("window", &recipients);
    // The first transaction sent lands only in the last block its blockhash allows.
    env.chain
        .delay_next_transactions(1, settle_solana::local::Delay::LastValidBlock);
    let (_, gauge) = pay_gauged(&env, &batch, false, LIMIT).await;
    let most = gauge.hooks.most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most <= LIMIT, "{most} in flight at once");
    let signed = gauge.hooks.signed.lock().unwrap().clone();
    assert!(signed.len() >= 10, "{} transactions", signed.len());
    let slot = |signature: &String| {
        env.chain
            .landed_transaction(&signature.parse().unwrap())
            .unwrap()
            .slot
    };
    let slow = slot(&signed[0]);
    let before_it = signed[1..].iter().filter(|s| slot(s) < slow).count();
    assert!(
        before_it >= 5,
        "only {before_it} of {} later transactions landed before the slow one",
        signed.len() - 1
    );
}

/// Reads miss one attempt until this payer records its own first attempt: a killed payer's
/// last record that its database session commits after the next payer looked.
struct LateCommit {
    hidden: std::sync::Mutex<Option<String>>,
}

impl Hooks for LateCommit {
    fn before_signed(&self, _attempt: &SignedAttempt) {
        // The late record is committed by now.
        self.hidden.lock().unwrap().take();
    }
    fn visible(&self, attempt: &SignedAttempt) -> bool {
        self.hidden.lock().unwrap().as_deref() != Some(attempt.attempt_id.as_str())
    }
}

#[tokio::test]
async fn a_table_transaction_committed_late_by_a_killed_payer_is_not_doubled() {
    const PAYOUTS: usize = 100;
    // Blockhashes that outlive the pass: the late transaction can still land at its end.
    let env = Env::with_config(
        settle_solana::LocalChainConfig {
            blockhash_validity_blocks: 100_000,
            ..Default::default()
        },
        1_000_000 * USDC,
        100 * SOL,
    );
    let recipients = with_accounts(&env, PAYOUTS);
    let batch = transfers("late", &recipients);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    // A first payer journals the table's creation and dies before sending it.
    {
        let journal = Arc::new(Hooked::on_file(&path, CrashOnTable::new(false)));
        let payer = env.payer_with(journal, payer_config(&env, true));
        payer.pay(batch.clone()).await.unwrap_err();
    }
    let late = FileJournal::open(&path)
        .unwrap()
        .open_attempts()
        .await
        .unwrap();
    assert_eq!(late.len(), 1);
    // Blocks pass: the next payer's plan names another recent slot, so another table.
    env.chain.advance(3);
    // The next payer does not see it at first and plans the same accounts: its own table
    // transaction is refused, the late one is resumed at the end of the pass and lands.
    let journal = Arc::new(Hooked::on_file(
        &path,
        LateCommit {
            hidden: Some(late[0].attempt_id.clone()).into(),
        },
    ));
    let report = pay_with_tables(&env, journal.clone(), &batch).await;
    assert_paid(&env, &report, &batch);
    assert!(journal.open_attempts().await.unwrap().is_empty());
    let tables = journal.lookup_tables().await.unwrap();
    assert_eq!(tables.len(), 1, "only the late transaction's table");
    let addresses = table_addresses(&env, journal.as_ref()).await;
    let distinct: HashSet<&Pubkey> = addresses.iter().collect();
    assert_eq!(
        distinct.len(),
        addresses.len(),
        "an address is in two tables"
    );
}

/// What a lying node does to a lookup table account before it answers with it (`None`: it
/// says there is no account).
type Lie = Box<dyn Fn(Account) -> Option<Account> + Send + Sync>;

/// A node that lies about lookup tables: every lookup table account it returns goes
/// through [`Lie`] first. Everything else is the local chain's, which executes the real
/// programs against the real tables.
struct LyingNode {
    chain: LocalChain,
    lie: Lie,
}

/// `account`, a lookup table, with its metadata and addresses changed by `edit`.
fn rewritten(account: Account, edit: impl Fn(&mut LookupTableMeta, &mut Vec<Pubkey>)) -> Account {
    let table = AddressLookupTable::deserialize(&account.data).unwrap();
    let mut meta = table.meta.clone();
    let mut addresses = table.addresses.to_vec();
    edit(&mut meta, &mut addresses);
    let data = AddressLookupTable {
        meta,
        addresses: addresses.into(),
    }
    .serialize_for_tests()
    .unwrap();
    Account { data, ..account }
}

#[async_trait]
impl Chain for LyingNode {
    async fn latest_blockhash(&self) -> Result<(Hash, u64), ChainError> {
        self.chain.latest_blockhash().await
    }
    async fn block_height(&self, commitment: Confirmation) -> Result<u64, ChainError> {
        self.chain.block_height(commitment).await
    }
    async fn tip(&self, commitment: Confirmation) -> Result<Tip, ChainError> {
        self.chain.tip(commitment).await
    }
    async fn send_transaction(&self, tx: &VersionedTransaction) -> Result<Signature, ChainError> {
        self.chain.send_transaction(tx).await
    }
    async fn simulate_units(&self, tx: &VersionedTransaction) -> Result<u64, ChainError> {
        self.chain.simulate_units(tx).await
    }
    async fn signature_statuses(
        &self,
        signatures: &[Signature],
        search_history: bool,
    ) -> Result<SignatureStatuses, ChainError> {
        self.chain
            .signature_statuses(signatures, search_history)
            .await
    }
    async fn accounts(&self, keys: &[Pubkey]) -> Result<Vec<Option<Account>>, ChainError> {
        let accounts = self.chain.accounts(keys).await?;
        Ok(accounts
            .into_iter()
            .map(|account| match account {
                Some(a) if a.owner == lookup::LOOKUP_TABLE_PROGRAM_ID => (self.lie)(a),
                other => other,
            })
            .collect())
    }
    async fn token_balance(&self, token_account: &Pubkey) -> Result<Option<u64>, ChainError> {
        self.chain.token_balance(token_account).await
    }
    async fn sol_balance(&self, key: &Pubkey) -> Result<u64, ChainError> {
        self.chain.sol_balance(key).await
    }
    async fn transaction_token_deltas(
        &self,
        signature: &Signature,
    ) -> Result<Option<Vec<TokenDelta>>, ChainError> {
        self.chain.transaction_token_deltas(signature).await
    }
    async fn minimum_balance_for_rent_exemption(&self, data_len: usize) -> Result<u64, ChainError> {
        self.chain
            .minimum_balance_for_rent_exemption(data_len)
            .await
    }
    async fn genesis_hash(&self) -> Result<Hash, ChainError> {
        self.chain.genesis_hash().await
    }
}

/// A treasury whose table holds the token account of an attacker, and the people it pays.
struct Attacked {
    env: Env,
    journal: Arc<MemoryJournal>,
    /// Honest recipients, paid once already; their token accounts are in the table.
    recipients: Vec<Pubkey>,
    /// The attacker's wallet: a recipient of the first pass, its token account in the table.
    attacker: Pubkey,
}

impl Attacked {
    /// A first pass, on an honest node, pays 70 recipients (the attacker the 41st) through
    /// a table it creates; the attacker then empties its token account.
    async fn new() -> Self {
        let env = rich_env();
        let mut recipients = with_accounts(&env, 70);
        let journal = Arc::new(MemoryJournal::new());
        let report = pay_with_tables(&env, journal.clone(), &transfers("week1", &recipients)).await;
        assert_eq!(report.settled(), 70);
        assert_eq!(journal.lookup_tables().await.unwrap().len(), 1);
        let attacker = recipients.remove(40);
        env.chain.plant_token_account(
            &token_account_of(&attacker, &env.mint),
            &env.mint,
            &attacker,
            0,
        );
        Self {
            env,
            journal,
            recipients,
            attacker,
        }
    }

    fn account(&self, wallet: &Pubkey) -> Pubkey {
        token_account_of(wallet, &self.env.mint)
    }

    /// Where the treasury's table really holds `wallet`'s token account (read from the
    /// chain itself): the table and the position.
    async fn position(&self, wallet: &Pubkey) -> (Pubkey, usize) {
        let keys = self.journal.lookup_tables().await.unwrap();
        let tables = LookupTables::load(&self.env.chain, &self.env.treasury.pubkey(), &keys)
            .await
            .unwrap();
        let (table, index) = tables.position(&self.account(wallet)).unwrap();
        (tables.tables()[table].key, index)
    }

    /// A payer whose node lies with `lie`.
    fn payer_on(&self, lie: Lie, preflight: bool) -> Payer {
        let mut config = payer_config(&self.env, true);
        config.preflight = preflight;
        let node = LyingNode {
            chain: self.env.chain.clone(),
            lie,
        };
        Payer::new(
            Arc::new(node),
            self.journal.clone(),
            self.env.treasury.clone(),
            config,
        )
    }

    /// Pay `batch` through a node lying with `lie`: the call must stop with a
    /// [`TableRefusal`], having signed nothing, sent nothing and paid nothing.
    async fn refused(&self, batch: &[Transfer], lie: Lie, preflight: bool) -> TableRefusal {
        let signed = self.journal.attempts().len();
        let landed = self.env.chain.landed_signatures().len();
        let balances: Vec<u64> = batch.iter().map(|t| self.env.balance(&t.wallet)).collect();
        let refusal = match self.payer_on(lie, preflight).pay(batch.to_vec()).await {
            Err(PayError::LookupTable(refusal)) => refusal,
            Ok(report) => panic!(
                "the pass went on despite the lying node's table (the attacker's token account \
                 holds {} µUSDC): {report:?}",
                self.env.balance(&self.attacker)
            ),
            Err(other) => panic!("another error than a table refusal: {other}"),
        };
        assert_eq!(self.journal.attempts().len(), signed, "nothing signed");
        assert_eq!(
            self.env.chain.landed_signatures().len(),
            landed,
            "nothing landed"
        );
        assert_eq!(
            self.env.balance(&self.attacker),
            0,
            "the attacker got nothing"
        );
        let after: Vec<u64> = batch.iter().map(|t| self.env.balance(&t.wallet)).collect();
        assert_eq!(after, balances, "no recipient was paid");
        let ids: Vec<String> = batch.iter().map(|t| t.payout_id.clone()).collect();
        assert!(
            self.journal
                .resolved_payouts(&ids)
                .await
                .unwrap()
                .is_empty(),
            "no payout is recorded as paid"
        );
        assert!(self.journal.holders(&ids).await.unwrap().is_empty());
        refusal
    }

    /// The same payouts through the honest node: paid, through the table.
    async fn paid_honestly(&self, batch: &[Transfer]) {
        let before: Vec<u64> = batch.iter().map(|t| self.env.balance(&t.wallet)).collect();
        let report = pay_with_tables(&self.env, self.journal.clone(), batch).await;
        assert_eq!(report.settled(), batch.len(), "{report:?}");
        for (t, before) in batch.iter().zip(before) {
            assert_eq!(self.env.balance(&t.wallet), before + t.amount_micro_usdc);
        }
        assert_eq!(self.env.balance(&self.attacker), 0);
        let (payments, maintenance) = landed(&self.env, &report);
        assert!(maintenance.is_empty());
        assert!(payments.iter().all(|l| l.v0), "paid through the table");
    }
}

/// A node swaps, in its answer, the position of a victim's token account with the
/// attacker's (both in the treasury's table). Packed against that answer, the victim's
/// transfer would name the attacker's position and pay the attacker, and the journal would
/// record the victim paid. The payer compares the table with what its own landed
/// maintenance transactions put there and refuses the pass: nothing signed, nothing paid.
#[tokio::test]
async fn a_node_that_swaps_a_tables_addresses_gets_nothing_signed_and_the_attacker_nothing() {
    let attacked = Attacked::new().await;
    // Every honest recipient again: a pass large enough for the preflight to read the
    // tables too.
    let victims = &attacked.recipients[..];
    let batch = transfers("week2", victims);
    let (table, at_attacker) = attacked.position(&attacked.attacker).await;
    let (victim_table, at_victim) = attacked.position(&victims[0]).await;
    assert_eq!(table, victim_table, "one table holds both");
    let (attacker_account, victim_account) = (
        attacked.account(&attacked.attacker),
        attacked.account(&victims[0]),
    );
    let swap = move || -> Lie {
        Box::new(move |account| {
            Some(rewritten(account, |_, addresses| {
                addresses.swap(at_attacker, at_victim);
            }))
        })
    };
    // Refused by the preflight's reading of the tables, and without a preflight by the
    // reading before packing.
    for preflight in [true, false] {
        let refusal = attacked.refused(&batch, swap(), preflight).await;
        assert_eq!(refusal.code(), "lookup_table_mismatch");
        let (index, expected, reported) = if at_attacker < at_victim {
            (at_attacker, attacker_account, victim_account)
        } else {
            (at_victim, victim_account, attacker_account)
        };
        assert_eq!(
            refusal,
            TableRefusal::Mismatch {
                table,
                index,
                expected: Some(expected),
                reported: Some(reported),
            }
        );
        let text = PayError::LookupTable(refusal).to_string();
        for part in [
            "lookup_table_mismatch".to_owned(),
            table.to_string(),
            format!("index {index}"),
            expected.to_string(),
            reported.to_string(),
        ] {
            assert!(text.contains(&part), "{part} not in {text}");
        }
    }
    attacked.paid_honestly(&batch).await;
}

/// Any other difference between a table as the node describes it and what the treasury
/// put in it, or a table that is not the treasury's live table, refuses the pass the same
/// way; the honest node still pays through the table afterwards.
#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario read top to bottom: each way a table can differ from what the treasury put in it, and the refusal it must give"
)]
async fn every_other_difference_from_what_the_treasury_put_in_its_table_is_refused() {
    let attacked = Attacked::new().await;
    let victims = &attacked.recipients[..3];
    let batch = transfers("week2", victims);
    let (table, at_victim) = attacked.position(&victims[0]).await;
    let attacker_account = attacked.account(&attacked.attacker);
    let victim_account = attacked.account(&victims[0]);
    let held = LookupTables::load(
        &attacked.env.chain,
        &attacked.env.treasury.pubkey(),
        &[table],
    )
    .await
    .unwrap()
    .tables()[0]
        .addresses
        .len();
    let stranger = Pubkey::new_unique();
    let edit = |edit: fn(&mut LookupTableMeta, &mut Vec<Pubkey>, usize, Pubkey)| -> Lie {
        Box::new(move |account| {
            Some(rewritten(account, |meta, addresses| {
                edit(meta, addresses, at_victim, attacker_account)
            }))
        })
    };
    let lies: Vec<(&str, Lie, &str)> = vec![
        (
            "the victim's token account replaced by the attacker's",
            edit(|_, addresses, at, attacker| addresses[at] = attacker),
            "lookup_table_mismatch",
        ),
        (
            "an address the treasury never appended",
            edit(|_, addresses, _, attacker| addresses.push(attacker)),
            "lookup_table_mismatch",
        ),
        (
            "the last address left out",
            edit(|_, addresses, _, _| {
                addresses.pop();
            }),
            "lookup_table_mismatch",
        ),
        (
            "another authority",
            Box::new(move |account| {
                Some(rewritten(account, |meta, _| {
                    meta.authority = Some(stranger)
                }))
            }),
            "lookup_table_authority_mismatch",
        ),
        (
            "frozen",
            edit(|meta, _, _, _| meta.authority = None),
            "lookup_table_frozen",
        ),
        (
            "deactivated",
            edit(|meta, _, _, _| meta.deactivation_slot = 5),
            "lookup_table_deactivated",
        ),
        ("no table", Box::new(|_| None), "lookup_table_missing"),
    ];
    for (lie, how, code) in lies {
        let refusal = attacked.refused(&batch, how, true).await;
        assert_eq!(refusal.code(), code, "{lie}: {refusal}");
        assert_eq!(refusal.table(), table, "{lie}");
        match (lie, &refusal) {
            (
                "the victim's token account replaced by the attacker's",
                TableRefusal::Mismatch {
                    index,
                    expected,
                    reported,
                    ..
                },
            ) => {
                assert_eq!(*index, at_victim);
                assert_eq!(*expected, Some(victim_account));
                assert_eq!(*reported, Some(attacker_account));
            }
            (
                "an address the treasury never appended",
                TableRefusal::Mismatch {
                    index,
                    expected,
                    reported,
                    ..
                },
            ) => assert_eq!(
                (*index, *expected, *reported),
                (held, None, Some(attacker_account))
            ),
            (
                "the last address left out",
                TableRefusal::Mismatch {
                    index, reported, ..
                },
            ) => assert_eq!((*index, *reported), (held - 1, None)),
            _ => {}
        }
    }
    attacked.paid_honestly(&batch).await;
}
