//! Exactly-once payouts on the local chain (litesvm + the real SPL programs).

#![cfg(feature = "local-chain")]

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{Env, SOL, USDC, total, transfers, wallets};
use settle_solana::{
    AttemptOutcome, Delay, Journal, LocalChainConfig, MemoryJournal, PayoutOutcome, Signature,
    pack, payer::JournalRecord, reconcile,
};

fn outcomes(journal: &MemoryJournal) -> Vec<AttemptOutcome> {
    journal
        .records()
        .into_iter()
        .filter_map(|r| match r {
            JournalRecord::Outcome { outcome, .. } => Some(outcome),
            JournalRecord::Signed(_) => None,
        })
        .collect()
}

fn signed_count(journal: &MemoryJournal) -> usize {
    journal
        .records()
        .iter()
        .filter(|r| matches!(r, JournalRecord::Signed(_)))
        .count()
}

#[tokio::test]
async fn a_batch_of_250_transfers_lands_exactly() {
    let env = Env::new(1_000_000 * USDC, 100 * SOL);
    let recipients = wallets(250);
    // The first 150 recipients already hold a USDC account, the last 100 are new.
    for w in &recipients[..150] {
        env.chain.create_token_account(&env.mint, w);
    }
    let batch = transfers("p250", &recipients);
    let treasury_before = env.treasury_usdc();
    let lamports_before = env.chain.lamports_of(&env.treasury.pubkey());

    let journal = Arc::new(MemoryJournal::new());
    let report = env.payer(journal.clone()).pay(batch.clone()).await.unwrap();

    assert_eq!(report.settled(), 250, "{report:?}");
    for t in &batch {
        assert_eq!(
            env.balance(&t.wallet),
            t.amount_micro_usdc,
            "{}",
            t.payout_id
        );
    }
    assert_eq!(env.treasury_usdc(), treasury_before - total(&batch));

    // Every transaction fits the packet limit; none was re-signed.
    let landed: Vec<_> = report.landed_attempts().collect();
    assert_eq!(signed_count(&journal), landed.len());
    let mut fees = 0;
    let mut per_tx = Vec::new();
    for attempt in &landed {
        let sig: Signature = attempt.signature.parse().unwrap();
        let tx = env.chain.landed_transaction(&sig).unwrap();
        assert!(pack::serialized_size(&tx.transaction) <= pack::PACKET_DATA_SIZE);
        fees += tx.fee;
        per_tx.push(attempt.payout_ids.len());
    }
    let lamports_spent = lamports_before - env.chain.lamports_of(&env.treasury.pubkey());
    println!(
        "250 transfers (150 existing ATAs, 100 new): {} transactions, payouts per transaction {:?}, \
         fees {} lamports ({:.0} per payout), total SOL spent incl. ATA rent {} lamports",
        landed.len(),
        per_tx,
        fees,
        fees as f64 / 250.0,
        lamports_spent
    );

    // Reconciliation agrees with the ledger.
    let rec = reconcile(&env.chain, &env.mint, &common::settled(&report, &batch))
        .await
        .unwrap();
    assert_eq!(rec.matched, 250);
    assert!(rec.discrepancies.is_empty(), "{:?}", rec.discrepancies);
}

#[tokio::test]
async fn a_frozen_recipient_is_rejected_before_signing_and_the_others_land() {
    let env = Env::new(10_000 * USDC, 10 * SOL);
    let recipients = wallets(30);
    let frozen = recipients[7];
    env.chain.create_token_account(&env.mint, &frozen);
    env.chain.freeze_token_account(&env.mint, &frozen);
    let batch = transfers("frz", &recipients);

    let journal = Arc::new(MemoryJournal::new());
    let report = env.payer(journal.clone()).pay(batch.clone()).await.unwrap();

    match &report.payouts["frz-0007"] {
        PayoutOutcome::Rejected { reason } => assert!(reason.contains("0x11"), "{reason}"),
        other => panic!("expected rejection, got {other:?}"),
    }
    assert_eq!(report.settled(), 29);
    for t in &batch {
        let expected = if t.wallet == frozen {
            0
        } else {
            t.amount_micro_usdc
        };
        assert_eq!(env.balance(&t.wallet), expected);
    }
    // The rejected payout was never part of a signed transaction.
    for record in journal.records() {
        if let JournalRecord::Signed(_) = record {
            let open = journal.open_attempts().await.unwrap();
            assert!(open.is_empty());
        }
    }
}

#[tokio::test]
async fn an_on_chain_failure_fails_only_its_transactions_transfers() {
    let env = Env::new(10_000 * USDC, 10 * SOL);
    let recipients = wallets(45);
    for w in &recipients {
        env.chain.create_token_account(&env.mint, w);
    }
    let batch = transfers("onch", &recipients);
    let before = env.treasury_usdc();
    // Frozen after simulation, just before the first transaction lands.
    env.chain
        .freeze_before_next_landing(&env.mint, &recipients[3]);

    let journal = Arc::new(MemoryJournal::new());
    let report = env.payer(journal.clone()).pay(batch.clone()).await.unwrap();

    let failed_attempt = report
        .attempts
        .iter()
        .find(|a| matches!(a.outcome, Some(AttemptOutcome::Failed { .. })))
        .expect("one failed attempt");
    assert!(failed_attempt.payout_ids.contains(&"onch-0003".to_string()));
    let failed: Vec<&String> = report
        .payouts
        .iter()
        .filter(|(_, o)| matches!(o, PayoutOutcome::Failed { .. }))
        .map(|(id, _)| id)
        .collect();
    assert_eq!(failed.len(), failed_attempt.payout_ids.len());
    assert_eq!(report.settled(), 45 - failed.len());
    assert!(report.settled() > 0);

    let mut paid = 0;
    for t in &batch {
        if failed_attempt.payout_ids.contains(&t.payout_id) {
            assert_eq!(env.balance(&t.wallet), 0, "{}", t.payout_id);
        } else {
            assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
            paid += t.amount_micro_usdc;
        }
    }
    assert_eq!(env.treasury_usdc(), before - paid);
    // No re-sign of failed payouts.
    assert_eq!(signed_count(&journal), report.attempts.len());
}

#[tokio::test]
async fn a_lost_transaction_expires_provably_and_is_paid_once_after_re_signing() {
    let env = Env::with_config(
        LocalChainConfig {
            blockhash_validity_blocks: 40,
            ..LocalChainConfig::default()
        },
        1_000 * USDC,
        SOL,
    );
    let recipients = wallets(3);
    let batch = transfers("exp", &recipients);
    env.chain.blackhole_next_transactions(1);

    let journal = Arc::new(MemoryJournal::new());
    let report = env.payer(journal.clone()).pay(batch.clone()).await.unwrap();

    assert_eq!(report.settled(), 3);
    assert_eq!(
        outcomes(&journal),
        vec![
            AttemptOutcome::Expired,
            AttemptOutcome::Landed {
                slot: match report.attempts[1].outcome {
                    Some(AttemptOutcome::Landed { slot }) => slot,
                    _ => panic!("second attempt should land"),
                }
            }
        ]
    );
    assert_eq!(signed_count(&journal), 2);
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
    assert_eq!(env.chain.stats().landed, 1);
    // The expired attempt is provably absent from the chain.
    let first: Signature = report.attempts[0].signature.parse().unwrap();
    assert!(env.chain.status_of(&first).is_none());
}

#[tokio::test]
async fn the_same_transaction_broadcast_many_times_pays_once() {
    let env = Env::new(1_000 * USDC, SOL);
    let recipients = wallets(2);
    let batch = transfers("rb", &recipients);
    // The first broadcasts are lost; the transaction then sits in flight while the
    // payer keeps rebroadcasting the same bytes.
    env.chain.drop_next_sends(2);
    env.chain.delay_next_transactions(1, Delay::Blocks(15));

    let journal = Arc::new(MemoryJournal::new());
    let report = env.payer(journal.clone()).pay(batch.clone()).await.unwrap();

    assert_eq!(report.settled(), 2);
    let stats = env.chain.stats();
    assert!(stats.send_calls >= 4, "{stats:?}");
    assert!(stats.duplicate_sends >= 1, "{stats:?}");
    assert_eq!(stats.landed, 1);
    assert_eq!(signed_count(&journal), 1);

    // Replaying the stored bytes by hand changes nothing either.
    let attempt = &report.attempts[0];
    let sig: Signature = attempt.signature.parse().unwrap();
    let tx = env.chain.landed_transaction(&sig).unwrap().transaction;
    for _ in 0..5 {
        settle_solana::Chain::send_transaction(&env.chain, &tx)
            .await
            .unwrap();
    }
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
}

#[tokio::test]
async fn a_transaction_landing_in_its_last_valid_block_is_settled_not_re_signed() {
    let env = Env::with_config(
        LocalChainConfig {
            blockhash_validity_blocks: 30,
            ..LocalChainConfig::default()
        },
        1_000 * USDC,
        SOL,
    );
    let recipients = wallets(4);
    let batch = transfers("lvb", &recipients);
    env.chain.delay_next_transactions(1, Delay::LastValidBlock);

    let journal = Arc::new(MemoryJournal::new());
    let report = env.payer(journal.clone()).pay(batch.clone()).await.unwrap();

    assert_eq!(report.settled(), 4);
    assert_eq!(signed_count(&journal), 1);
    let attempt = &journal.attempts()[0];
    let sig: Signature = attempt.signature.parse().unwrap();
    let landed = env.chain.landed_transaction(&sig).unwrap();
    assert_eq!(landed.slot, attempt.last_valid_block_height);
    assert!(matches!(
        outcomes(&journal)[..],
        [AttemptOutcome::Landed { .. }]
    ));
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
}

#[tokio::test]
async fn a_send_error_after_landing_does_not_cause_a_re_sign() {
    let env = Env::new(1_000 * USDC, SOL);
    let recipients = wallets(5);
    let batch = transfers("serr", &recipients);
    env.chain.fail_next_sends_after_landing(1);

    let journal = Arc::new(MemoryJournal::new());
    let report = env.payer(journal.clone()).pay(batch.clone()).await.unwrap();

    assert_eq!(report.settled(), 5);
    assert_eq!(signed_count(&journal), 1);
    assert_eq!(env.chain.stats().landed, 1);
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
}

#[tokio::test]
async fn rpc_errors_prove_nothing_and_exhausted_retries_leave_the_attempt_open() {
    let env = Env::new(1_000 * USDC, SOL);
    let recipients = wallets(3);
    let batch = transfers("rpc", &recipients);
    // Lost in flight, then the node is unreachable for longer than the retry limit.
    env.chain.blackhole_next_transactions(1);
    let mut config = common::fast_config(env.mint);
    config.rpc_retries_max = 3;
    let journal = Arc::new(MemoryJournal::new());
    let payer = env.payer_with(journal.clone(), config);

    // Arm the failures after signing: fail every call from the first poll on.
    let chain = env.chain.clone();
    let armed = tokio::spawn(async move {
        loop {
            if chain.stats().send_calls > 0 {
                chain.fail_next_calls(1_000);
                break;
            }
            tokio::task::yield_now().await;
        }
    });
    let report = payer.pay(batch.clone()).await.unwrap();
    armed.await.unwrap();

    for t in &batch {
        assert!(
            matches!(report.payouts[&t.payout_id], PayoutOutcome::Pending { .. }),
            "{report:?}"
        );
    }
    assert_eq!(journal.open_attempts().await.unwrap().len(), 1);
    assert_eq!(signed_count(&journal), 1, "never re-signed on RPC errors");

    // The node comes back; the lost transaction expires provably and is re-signed.
    env.chain.clear_call_failures();
    let report = payer.resume().await.unwrap();
    assert_eq!(report.settled(), 3);
    assert_eq!(signed_count(&journal), 2);
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
}

#[tokio::test]
async fn paying_the_same_payouts_again_is_refused_or_skipped() {
    let env = Env::new(1_000 * USDC, SOL);
    let batch = transfers("dup", &wallets(3));
    let journal = Arc::new(MemoryJournal::new());
    let payer = env.payer(journal.clone());
    assert_eq!(payer.pay(batch.clone()).await.unwrap().settled(), 3);

    let again = payer.pay(batch.clone()).await.unwrap();
    assert!(
        again
            .payouts
            .values()
            .all(|o| *o == PayoutOutcome::AlreadyResolved)
    );
    let mut twice = batch.clone();
    twice.push(batch[0].clone());
    assert!(matches!(
        payer.pay(twice).await,
        Err(settle_solana::PayError::DuplicatePayout(_))
    ));
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
    let by_id: HashMap<_, _> = batch.iter().map(|t| (&t.payout_id, t)).collect();
    assert_eq!(by_id.len(), 3);
}

#[tokio::test]
async fn a_lagging_status_node_never_proves_an_expiry() {
    // The transaction lands in its last valid block while statuses come from a node
    // 6 blocks behind: "not found" from that node must not count as proof.
    let env = Env::with_config(
        LocalChainConfig {
            blockhash_validity_blocks: 20,
            ..LocalChainConfig::default()
        },
        1_000 * USDC,
        SOL,
    );
    let batch = transfers("lag", &wallets(3));
    env.chain.delay_next_transactions(1, Delay::LastValidBlock);
    env.chain.lag_status_node(6);

    let journal = Arc::new(MemoryJournal::new());
    let report = env.payer(journal.clone()).pay(batch.clone()).await.unwrap();

    assert_eq!(report.settled(), 3, "{report:?}");
    assert_eq!(signed_count(&journal), 1, "no re-sign");
    assert!(matches!(
        outcomes(&journal)[..],
        [AttemptOutcome::Landed { .. }]
    ));
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
}

#[tokio::test]
async fn a_lagging_status_node_through_rpc_client_never_proves_an_expiry() {
    let env = Env::with_config(
        LocalChainConfig {
            blockhash_validity_blocks: 20,
            ..LocalChainConfig::default()
        },
        1_000 * USDC,
        SOL,
    );
    let server = settle_solana::serve_local_chain(env.chain.clone())
        .await
        .unwrap();
    let batch = transfers("lagrpc", &wallets(3));
    env.chain.delay_next_transactions(1, Delay::LastValidBlock);
    env.chain.lag_status_node(6);

    let journal = Arc::new(MemoryJournal::new());
    let rpc = Arc::new(settle_solana::RpcChain::new(
        server.url(),
        settle_solana::Confirmation::Confirmed,
    ));
    let payer = settle_solana::Payer::new(
        rpc,
        journal.clone(),
        env.treasury.clone(),
        common::fast_config(env.mint),
    );
    let report = payer.pay(batch.clone()).await.unwrap();
    assert_eq!(report.settled(), 3, "{report:?}");
    assert_eq!(signed_count(&journal), 1, "no re-sign");
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
}
