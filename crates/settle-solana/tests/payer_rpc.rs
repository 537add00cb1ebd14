//! The production adapter (`RpcChain` over `solana_client`'s `RpcClient`) against
//! the local chain served as JSON-RPC, with the real SPL programs behind it.

#![cfg(feature = "local-chain")]

mod common;

use std::sync::Arc;

use common::{Env, SOL, USDC, total, transfers, wallets};
use settle_solana::{
    AttemptOutcome, Chain, Confirmation, Journal, LocalChainConfig, MemoryJournal, Payer,
    PayoutOutcome, RpcChain, SettledPayout, check_mint, reconcile, serve_local_chain,
};

fn rpc_payer(env: &Env, url: &str, journal: Arc<MemoryJournal>) -> Payer {
    let chain = Arc::new(RpcChain::new(url, Confirmation::Confirmed));
    Payer::new(
        chain,
        journal,
        env.treasury.clone(),
        common::fast_config(env.mint),
    )
}

#[tokio::test]
async fn a_batch_of_50_lands_through_rpc_client_and_reconciles() {
    let env = Env::new(100_000 * USDC, 10 * SOL);
    let server = serve_local_chain(env.chain.clone()).await.unwrap();
    let rpc = RpcChain::new(server.url(), Confirmation::Confirmed);
    check_mint(&rpc, &env.mint).await.unwrap();

    let recipients = wallets(50);
    for w in &recipients[..20] {
        env.chain.create_token_account(&env.mint, w);
    }
    let batch = transfers("rpc50", &recipients);
    let before = env.treasury_usdc();
    let journal = Arc::new(MemoryJournal::new());
    let report = rpc_payer(&env, &server.url(), journal.clone())
        .pay(batch.clone())
        .await
        .unwrap();

    assert_eq!(report.settled(), 50, "{report:?}");
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
        // Balances read through the adapter agree.
        let ata = spl_associated_token_account_interface::address::get_associated_token_address(
            &t.wallet, &env.mint,
        );
        assert_eq!(
            rpc.token_balance(&ata).await.unwrap(),
            Some(t.amount_micro_usdc)
        );
    }
    assert_eq!(env.treasury_usdc(), before - total(&batch));
    let per_tx: Vec<usize> = report
        .landed_attempts()
        .map(|a| a.payout_ids.len())
        .collect();
    println!("50 transfers through RpcChain: payouts per transaction {per_tx:?}");

    let settled: Vec<SettledPayout> = batch
        .iter()
        .map(|t| match &report.payouts[&t.payout_id] {
            PayoutOutcome::Settled { signature, .. } => SettledPayout {
                payout_id: t.payout_id.clone(),
                wallet: t.wallet,
                amount_micro_usdc: t.amount_micro_usdc,
                signature: signature.clone(),
            },
            other => panic!("{other:?}"),
        })
        .collect();
    let rec = reconcile(&rpc, &env.mint, &settled).await.unwrap();
    assert_eq!(rec.matched, 50);
    assert!(rec.discrepancies.is_empty(), "{:?}", rec.discrepancies);

    // A ledger claiming a different amount is caught.
    let mut wrong = settled[..1].to_vec();
    wrong[0].amount_micro_usdc += 1;
    let rec = reconcile(&rpc, &env.mint, &wrong).await.unwrap();
    assert_eq!(rec.discrepancies.len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn a_lost_transaction_expires_and_is_paid_once_through_rpc_client() {
    let env = Env::with_config(
        LocalChainConfig {
            blockhash_validity_blocks: 25,
            ..LocalChainConfig::default()
        },
        1_000 * USDC,
        SOL,
    );
    let server = serve_local_chain(env.chain.clone()).await.unwrap();
    let batch = transfers("rpcexp", &wallets(3));
    env.chain.blackhole_next_transactions(1);

    let journal = Arc::new(MemoryJournal::new());
    let report = rpc_payer(&env, &server.url(), journal.clone())
        .pay(batch.clone())
        .await
        .unwrap();

    assert_eq!(report.settled(), 3);
    let outcomes: Vec<_> = report.attempts.iter().map(|a| a.outcome.clone()).collect();
    assert!(
        matches!(
            outcomes[..],
            [
                Some(AttemptOutcome::Expired),
                Some(AttemptOutcome::Landed { .. })
            ]
        ),
        "{outcomes:?}"
    );
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
    assert_eq!(env.chain.stats().landed, 1);
}

#[tokio::test]
async fn send_errors_and_frozen_accounts_through_rpc_client() {
    let env = Env::new(1_000 * USDC, SOL);
    let server = serve_local_chain(env.chain.clone()).await.unwrap();
    let recipients = wallets(6);
    env.chain.create_token_account(&env.mint, &recipients[2]);
    env.chain.freeze_token_account(&env.mint, &recipients[2]);
    let batch = transfers("rpcerr", &recipients);
    env.chain.fail_next_sends_after_landing(1);

    let journal = Arc::new(MemoryJournal::new());
    let report = rpc_payer(&env, &server.url(), journal.clone())
        .pay(batch.clone())
        .await
        .unwrap();

    // The simulation error names the failing instruction; only that payout is rejected.
    assert!(matches!(
        report.payouts["rpcerr-0002"],
        PayoutOutcome::Rejected { .. }
    ));
    assert_eq!(report.settled(), 5);
    assert_eq!(
        journal.attempts().len(),
        1,
        "no re-sign after the send error"
    );
    assert_eq!(env.chain.stats().landed, 1);
}

#[tokio::test]
async fn the_rpc_adapter_reads_what_the_chain_holds() {
    let env = Env::new(5 * USDC, 3 * SOL);
    let server = serve_local_chain(env.chain.clone()).await.unwrap();
    let rpc = RpcChain::new(server.url(), Confirmation::Processed);
    let treasury = env.treasury.pubkey();

    assert_eq!(
        rpc.sol_balance(&treasury).await.unwrap(),
        env.chain.lamports_of(&treasury)
    );
    let ata = env.treasury.token_account(&env.mint);
    assert_eq!(rpc.token_balance(&ata).await.unwrap(), Some(5 * USDC));
    let nobody = settle_solana::Keypair::new();
    let nobody_ata = spl_associated_token_account_interface::address::get_associated_token_address(
        &settle_solana::Signer::pubkey(&nobody),
        &env.mint,
    );
    assert_eq!(rpc.token_balance(&nobody_ata).await.unwrap(), None);
    assert_eq!(
        rpc.minimum_balance_for_rent_exemption(165).await.unwrap(),
        env.chain
            .minimum_balance_for_rent_exemption(165)
            .await
            .unwrap()
    );
    let (_, last_valid) = rpc.latest_blockhash().await.unwrap();
    let height = rpc.block_height(Confirmation::Processed).await.unwrap();
    assert_eq!(last_valid, height + 150);
    assert!(rpc.block_height(Confirmation::Finalized).await.unwrap() <= height);
    let unknown = settle_solana::Signature::from([9u8; 64]);
    let answer = rpc.signature_statuses(&[unknown], true).await.unwrap();
    assert_eq!(answer.statuses, vec![None]);
    assert!(answer.context_slot >= height);
    let tip = rpc.tip(Confirmation::Finalized).await.unwrap();
    assert_eq!(
        tip.block_height,
        rpc.block_height(Confirmation::Finalized).await.unwrap()
    );
    assert_eq!(rpc.transaction_token_deltas(&unknown).await.unwrap(), None);

    // RPC failures surface as `ChainError::Rpc`, never as a transaction error.
    env.chain.fail_next_calls(1);
    let err = rpc.block_height(Confirmation::Finalized).await.unwrap_err();
    assert!(err.is_rpc(), "{err}");
}

#[tokio::test]
async fn v0_transactions_against_lookup_tables_land_through_rpc_client_and_reconcile() {
    let env = Env::new(100_000 * USDC, 10 * SOL);
    let server = serve_local_chain(env.chain.clone()).await.unwrap();
    let rpc = RpcChain::new(server.url(), Confirmation::Confirmed);
    let recipients = wallets(120);
    for w in &recipients[..100] {
        env.chain.create_token_account(&env.mint, w);
    }
    let batch = transfers("rpc-v0", &recipients);
    let journal = Arc::new(MemoryJournal::new());
    let report = rpc_payer(&env, &server.url(), journal.clone())
        .pay(batch.clone())
        .await
        .unwrap();
    assert_eq!(report.settled(), 120, "{report:?}");
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
    // The tables were created through the endpoint, and the payments are v0 transactions.
    assert!(!journal.lookup_tables().await.unwrap().is_empty());
    for attempt in report
        .landed_attempts()
        .filter(|a| !a.payout_ids.is_empty())
    {
        let landed = env
            .chain
            .landed_transaction(&attempt.signature.parse().unwrap())
            .unwrap();
        assert!(matches!(
            landed.transaction.message,
            settle_solana::VersionedMessage::V0(_)
        ));
    }
    // Reconciliation reads the v0 transactions back (getTransaction with loaded addresses).
    let settled = common::settled(&report, &batch);
    let rec = reconcile(&rpc, &env.mint, &settled).await.unwrap();
    assert_eq!(rec.matched, 120);
    assert!(rec.discrepancies.is_empty(), "{:?}", rec.discrepancies);
}
