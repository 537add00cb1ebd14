//! What the payer checks about where it pays, and what it writes on chain, on the local
//! chain (litesvm + the real SPL programs): an existing recipient token account must be a
//! token account of the pinned mint owned by the recipient's wallet; lamports dusted onto a
//! recipient's token address do not block its payouts; the memo carries keyed references,
//! never payout ids.

#![cfg(feature = "local-chain")]

mod common;

use std::sync::Arc;

use common::{Env, SOL, USDC, transfers, wallets};
use settle_solana::{Chain, Keypair, MemoryJournal, PayoutOutcome, Signature, Signer, pack};
use spl_associated_token_account_interface::address::get_associated_token_address;

fn signed_payout_ids(journal: &MemoryJournal) -> Vec<String> {
    journal
        .attempts()
        .into_iter()
        .flat_map(|a| a.payout_ids)
        .collect()
}

#[tokio::test]
async fn an_existing_token_account_of_another_owner_or_mint_is_never_paid() {
    let env = Env::new(10_000 * USDC, 10 * SOL);
    let recipients = wallets(12);
    for w in &recipients {
        env.chain.create_token_account(&env.mint, w);
    }
    // Recipient 2's USDC address holds a token account that belongs to someone else (what
    // `SetAuthority(AccountOwner)` leaves behind).
    let thief = Keypair::new().pubkey();
    let stolen = get_associated_token_address(&recipients[2], &env.mint);
    env.chain.plant_token_account(&stolen, &env.mint, &thief, 5);
    // Recipient 5's USDC address holds a token account of another mint.
    let other_mint = env.chain.create_usdc_mint();
    let wrong = get_associated_token_address(&recipients[5], &env.mint);
    env.chain
        .plant_token_account(&wrong, &other_mint, &recipients[5], 0);
    let batch = transfers("own", &recipients);
    let treasury_before = env.treasury_usdc();

    let journal = Arc::new(MemoryJournal::new());
    let report = env.payer(journal.clone()).pay(batch.clone()).await.unwrap();

    match &report.payouts["own-0002"] {
        PayoutOutcome::Refused { code, reason } => {
            assert_eq!(*code, "token_account_owner_mismatch");
            assert!(reason.contains(&thief.to_string()), "{reason}");
            assert!(reason.contains(&recipients[2].to_string()), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    match &report.payouts["own-0005"] {
        PayoutOutcome::Refused { code, reason } => {
            assert_eq!(*code, "token_account_mint_mismatch");
            assert!(reason.contains(&other_mint.to_string()), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(report.settled(), 10, "{report:?}");
    // Never signed, nothing moved to the foreign accounts.
    let signed = signed_payout_ids(&journal);
    assert!(!signed.contains(&"own-0002".to_string()));
    assert!(!signed.contains(&"own-0005".to_string()));
    assert_eq!(env.chain.token_balance(&stolen).await.unwrap(), Some(5));
    assert_eq!(env.chain.token_balance(&wrong).await.unwrap(), Some(0));
    let paid: u64 = batch
        .iter()
        .filter(|t| t.payout_id != "own-0002" && t.payout_id != "own-0005")
        .map(|t| {
            assert_eq!(
                env.balance(&t.wallet),
                t.amount_micro_usdc,
                "{}",
                t.payout_id
            );
            t.amount_micro_usdc
        })
        .sum();
    assert_eq!(env.treasury_usdc(), treasury_before - paid);

    // Once the account is the wallet's again, the payout is paid.
    env.chain
        .plant_token_account(&stolen, &env.mint, &recipients[2], 5);
    let again = env
        .payer(journal.clone())
        .pay(vec![batch[2].clone()])
        .await
        .unwrap();
    assert!(
        matches!(again.payouts["own-0002"], PayoutOutcome::Settled { .. }),
        "{again:?}"
    );
    assert_eq!(
        env.chain.token_balance(&stolen).await.unwrap(),
        Some(5 + batch[2].amount_micro_usdc)
    );
}

#[tokio::test]
async fn lamports_dusted_onto_a_recipients_token_address_do_not_block_its_payout() {
    let env = Env::new(1_000 * USDC, 10 * SOL);
    let recipients = wallets(3);
    // Anyone may send lamports to the (not yet created) token account address.
    let dusted = get_associated_token_address(&recipients[1], &env.mint);
    env.chain.airdrop_sol(&dusted, 1_000_000);
    let batch = transfers("dust", &recipients);
    let journal = Arc::new(MemoryJournal::new());
    let report = env.payer(journal).pay(batch.clone()).await.unwrap();
    assert_eq!(report.settled(), 3, "{report:?}");
    for t in &batch {
        assert_eq!(env.balance(&t.wallet), t.amount_micro_usdc);
    }
}

#[tokio::test]
async fn the_memo_on_chain_names_keyed_references_never_payout_ids() {
    let env = Env::new(1_000 * USDC, 10 * SOL);
    let recipients = wallets(4);
    let batch = transfers("po-guessable", &recipients);
    let journal = Arc::new(MemoryJournal::new());
    let report = env.payer(journal.clone()).pay(batch.clone()).await.unwrap();
    assert_eq!(report.settled(), 4);
    let key = env.treasury.memo_key();
    assert!(!journal.attempts().is_empty());
    for attempt in report.landed_attempts() {
        let signature: Signature = attempt.signature.parse().unwrap();
        let landed = env.chain.landed_transaction(&signature).unwrap();
        let message = &landed.transaction.message;
        let memo = message
            .instructions()
            .iter()
            .find(|ix| {
                message.static_account_keys()[ix.program_id_index as usize] == pack::MEMO_PROGRAM_ID
            })
            .map(|ix| String::from_utf8(ix.data.clone()).unwrap())
            .expect("a memo instruction");
        assert_eq!(
            memo,
            pack::refs_memo(&key, &attempt.payout_ids),
            "the memo names the keyed references"
        );
        // Nothing in the transaction names a payout.
        let bytes = bincode::serialize(&landed.transaction).unwrap();
        for id in &attempt.payout_ids {
            assert!(
                !bytes.windows(id.len()).any(|w| w == id.as_bytes()),
                "{id} is on chain"
            );
        }
    }
    // Another treasury (another key) gives other references for the same payouts.
    let other = settle_solana::Treasury::from_keypair(Keypair::new());
    assert_ne!(
        pack::memo_ref(&key, "po-guessable-0000"),
        pack::memo_ref(&other.memo_key(), "po-guessable-0000")
    );
}
