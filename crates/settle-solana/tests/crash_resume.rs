//! Crashes around the durable record: the file journal survives, a new payer resumes.

#![cfg(feature = "local-chain")]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::{Env, SOL, USDC, transfers, wallets};
use settle_solana::{
    AttemptOutcome, FileJournal, Journal, JournalError, PayError, PayoutOutcome, Pubkey,
    SignedAttempt,
};

/// A journal that makes the record durable and then "crashes": the call fails, so
/// the payer stops before sending, exactly like a process dying after the fsync.
struct CrashAfterRecord(FileJournal);

#[async_trait]
impl Journal for CrashAfterRecord {
    async fn record_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError> {
        self.0.record_signed(attempt).await?;
        Err(JournalError(
            "simulated crash after the durable write".into(),
        ))
    }
    async fn record_outcome(
        &self,
        attempt_id: &str,
        outcome: &AttemptOutcome,
    ) -> Result<(), JournalError> {
        self.0.record_outcome(attempt_id, outcome).await
    }
    async fn open_attempts(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        self.0.open_attempts().await
    }
    async fn resolved_payouts(&self, ids: &[String]) -> Result<Vec<String>, JournalError> {
        self.0.resolved_payouts(ids).await
    }
    async fn holders(&self, ids: &[String]) -> Result<Vec<(String, String)>, JournalError> {
        self.0.holders(ids).await
    }
    async fn lookup_tables(&self) -> Result<Vec<Pubkey>, JournalError> {
        self.0.lookup_tables().await
    }
    async fn landed_maintenance(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        self.0.landed_maintenance().await
    }
}

#[tokio::test]
async fn signed_and_persisted_but_never_sent_is_paid_once_after_resume() {
    let env = Env::new(1_000 * USDC, SOL);
    let batch = transfers("crash1", &wallets(4));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");

    {
        let journal = Arc::new(CrashAfterRecord(FileJournal::open(&path).unwrap()));
        let payer = env.payer(journal);
        let err = payer.pay(batch.clone()).await.unwrap_err();
        assert!(matches!(err, PayError::Journal(_)), "{err}");
    } // the process is gone
    assert_eq!(env.chain.stats().send_calls, 0, "nothing was sent");
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), 0);
    }

    let journal = Arc::new(FileJournal::open(&path).unwrap());
    assert_eq!(journal.open_attempts().await.unwrap().len(), 1);
    let report = env.payer(journal.clone()).resume().await.unwrap();
    assert_eq!(report.settled(), 4);
    assert!(journal.open_attempts().await.unwrap().is_empty());
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
    assert_eq!(env.chain.stats().landed, 1);

    // The outbox hands the same payouts over again: they are skipped.
    let again = env.payer(journal).pay(batch.clone()).await.unwrap();
    assert!(
        again
            .payouts
            .values()
            .all(|o| *o == PayoutOutcome::AlreadyResolved)
    );
    assert_eq!(env.chain.stats().landed, 1);
}

#[tokio::test]
async fn persisted_and_sent_then_crash_resume_settles_without_a_second_transfer() {
    let env = Env::new(1_000 * USDC, SOL);
    let batch = transfers("crash2", &wallets(6));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");

    {
        let journal = Arc::new(FileJournal::open(&path).unwrap());
        let mut config = common::fast_config(env.mint);
        config.wait_timeout_ms = 0; // sends, then stops waiting at once: a crash after send
        let report = env
            .payer_with(journal, config)
            .pay(batch.clone())
            .await
            .unwrap();
        assert!(
            report
                .payouts
                .values()
                .all(|o| matches!(o, PayoutOutcome::Pending { .. }))
        );
    }
    assert_eq!(
        env.chain.stats().landed,
        1,
        "the transaction landed before the crash"
    );

    let journal = Arc::new(FileJournal::open(&path).unwrap());
    let report = env.payer(journal.clone()).resume().await.unwrap();
    assert_eq!(report.settled(), 6);
    let landed = report.landed_attempts().count();
    assert_eq!(landed, 1);
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
    assert_eq!(env.chain.stats().landed, 1, "no second transfer");

    // The journal file holds one signed record and one outcome.
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches("\"type\":\"signed\"").count(), 1);
    assert_eq!(text.matches("\"type\":\"outcome\"").count(), 1);
}

#[tokio::test]
async fn persisted_then_lost_then_crash_resume_proves_expiry_and_pays_once() {
    let env = Env::with_config(
        settle_solana::LocalChainConfig {
            blockhash_validity_blocks: 20,
            ..Default::default()
        },
        1_000 * USDC,
        SOL,
    );
    let batch = transfers("crash3", &wallets(2));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    env.chain.blackhole_next_transactions(1);
    {
        let journal = Arc::new(FileJournal::open(&path).unwrap());
        let mut config = common::fast_config(env.mint);
        config.wait_timeout_ms = 0;
        env.payer_with(journal, config)
            .pay(batch.clone())
            .await
            .unwrap();
    }
    assert_eq!(env.chain.stats().landed, 0);

    let journal = Arc::new(FileJournal::open(&path).unwrap());
    let report = env.payer(journal.clone()).resume().await.unwrap();
    assert_eq!(report.settled(), 2);
    let outcomes: Vec<_> = report.attempts.iter().map(|a| a.outcome.clone()).collect();
    assert!(matches!(
        outcomes[..],
        [
            Some(AttemptOutcome::Expired),
            Some(AttemptOutcome::Landed { .. })
        ]
    ));
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
    assert_eq!(env.chain.stats().landed, 1);

    // Reopening the file yields the same state: nothing open.
    let reopened = FileJournal::open(&path).unwrap();
    assert!(reopened.open_attempts().await.unwrap().is_empty());
    let ids: Vec<String> = batch.iter().map(|t| t.payout_id.clone()).collect();
    assert_eq!(reopened.resolved_payouts(&ids).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_torn_last_line_is_ignored_and_the_journal_stays_appendable() {
    let env = Env::new(1_000 * USDC, SOL);
    let batch = transfers("torn", &wallets(2));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    {
        let journal = Arc::new(FileJournal::open(&path).unwrap());
        env.payer(journal).pay(batch.clone()).await.unwrap();
    }
    // A crash in the middle of writing a record.
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(b"{\"type\":\"signed\",\"attempt_id\":\"att-tor")
        .unwrap();
    drop(file);

    let journal = Arc::new(FileJournal::open(&path).unwrap());
    assert!(journal.open_attempts().await.unwrap().is_empty());
    let more = transfers("torn2", &wallets(1));
    let report = env.payer(journal).pay(more).await.unwrap();
    assert_eq!(report.settled(), 1);
    let reopened = FileJournal::open(&path).unwrap();
    assert!(reopened.open_attempts().await.unwrap().is_empty());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("att-tor"));
    assert!(text.ends_with('\n'));
}

/// A journal whose reads do not see one attempt yet (another process's transaction that
/// commits after this payer looked: on PostgreSQL the backend of a killed payer can commit
/// its last statement after the next payer started), while its writes see everything.
struct LaggingReads {
    inner: FileJournal,
    hidden: String,
}

#[async_trait]
impl Journal for LaggingReads {
    async fn record_signed(&self, attempt: &SignedAttempt) -> Result<(), JournalError> {
        self.inner.record_signed(attempt).await
    }
    async fn record_outcome(
        &self,
        attempt_id: &str,
        outcome: &AttemptOutcome,
    ) -> Result<(), JournalError> {
        self.inner.record_outcome(attempt_id, outcome).await
    }
    async fn open_attempts(&self) -> Result<Vec<SignedAttempt>, JournalError> {
        let mut open = self.inner.open_attempts().await?;
        open.retain(|a| a.attempt_id != self.hidden);
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

#[tokio::test]
async fn payouts_of_an_attempt_committed_after_the_payer_looked_are_left_to_it_and_the_rest_are_paid()
 {
    let env = Env::new(1_000 * USDC, SOL);
    let batch = transfers("lag", &wallets(4));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");

    // A first payer journals an attempt for the first two payouts and dies before sending.
    {
        let journal = Arc::new(CrashAfterRecord(FileJournal::open(&path).unwrap()));
        let err = env
            .payer(journal)
            .pay(batch[..2].to_vec())
            .await
            .unwrap_err();
        assert!(matches!(err, PayError::Journal(_)), "{err}");
    }
    let first = FileJournal::open(&path)
        .unwrap()
        .open_attempts()
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    let first_id = first[0].attempt_id.clone();

    // The next payer does not see that attempt when it chooses what to sign.
    let journal = Arc::new(LaggingReads {
        inner: FileJournal::open(&path).unwrap(),
        hidden: first_id.clone(),
    });
    let report = env
        .payer(journal.clone())
        .pay(batch.clone())
        .await
        .expect("the pass goes on without the payouts another attempt holds");
    for t in &batch[..2] {
        assert!(
            matches!(
                report.payouts.get(&t.payout_id),
                Some(PayoutOutcome::NotSent { .. })
            ),
            "{}: {:?}",
            t.payout_id,
            report.payouts.get(&t.payout_id)
        );
        assert_eq!(env.balance(&t.wallet), 0, "not paid by a second attempt");
    }
    for t in &batch[2..] {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
    // No second live attempt holds the first two payouts.
    let attempts = journal.inner.open_attempts().await.unwrap();
    assert_eq!(
        attempts
            .iter()
            .map(|a| a.attempt_id.clone())
            .collect::<Vec<_>>(),
        vec![first_id]
    );

    // Once visible, the first attempt is resumed: every payout paid exactly once.
    let plain = Arc::new(FileJournal::open(&path).unwrap());
    env.payer(plain).pay(batch.clone()).await.unwrap();
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
    assert_eq!(env.chain.stats().landed, 2);
}
