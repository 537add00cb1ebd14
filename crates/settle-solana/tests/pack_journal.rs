//! Packing by measured size, and the journal's invariants.

use std::collections::HashSet;

use settle_solana::{
    AttemptOutcome, FileJournal, Journal, JournalError, Keypair, LookupTables, MemoryJournal,
    Pubkey, SignedAttempt, Signer, Transfer,
    pack::{self, MemoKey, PACKET_DATA_SIZE, PackParams},
};
use spl_associated_token_account_interface::address::get_associated_token_address;

fn params(per_tx_max: usize) -> PackParams {
    PackParams {
        treasury: Keypair::new().pubkey(),
        mint: Keypair::new().pubkey(),
        priority_fee_micro_lamports: 10_000,
        transfers_per_tx_max: per_tx_max,
        memo_key: MemoKey::from_bytes([7; 32]),
    }
}

fn transfers(n: usize, id_len: usize) -> Vec<Transfer> {
    (0..n)
        .map(|i| Transfer {
            payout_id: format!("{i:0>id_len$}"),
            wallet: Keypair::new().pubkey(),
            amount_micro_usdc: 1 + i as u64,
            statement: None,
        })
        .collect()
}

fn ids() -> impl FnMut() -> String {
    let mut n = 0u64;
    move || {
        n += 1;
        format!("att-{n:016x}")
    }
}

#[test]
fn batches_fill_the_packet_and_no_more() {
    let p = params(1_000);
    let ts = transfers(100, 36);
    let mut next = ids();
    let batches = pack::pack(&p, &LookupTables::none(), &ts, &HashSet::new(), &mut next);
    let counts: Vec<usize> = batches.iter().map(|b| b.transfers.len()).collect();
    assert_eq!(counts.iter().sum::<usize>(), 100);
    for b in &batches {
        assert!(b.serialized_size(&p, &LookupTables::none()) <= PACKET_DATA_SIZE);
    }
    // Every full batch is full: one more transfer would not fit.
    let first = &batches[0];
    let mut bigger = first.adding(&p, &ts[99], false);
    bigger.memo = pack::attempt_memo(&bigger.attempt_id);
    assert!(bigger.serialized_size(&p, &LookupTables::none()) > PACKET_DATA_SIZE);
    println!("existing ATAs: transfers per transaction {counts:?}");
    assert_eq!(counts[0], 18);
}

#[test]
fn new_token_accounts_cost_room_and_are_created_once_per_batch() {
    let p = params(1_000);
    let ts = transfers(30, 8);
    let missing: HashSet<Pubkey> = ts
        .iter()
        .map(|t| get_associated_token_address(&t.wallet, &p.mint))
        .collect();
    let mut next = ids();
    let batches = pack::pack(&p, &LookupTables::none(), &ts, &missing, &mut next);
    let counts: Vec<usize> = batches.iter().map(|b| b.transfers.len()).collect();
    println!("new ATAs: transfers per transaction {counts:?}");
    assert_eq!(counts[0], 9);
    assert!(batches.iter().all(|b| b.create_ata.iter().all(|c| *c)));

    // Two payouts to the same new wallet in one batch: one CreateIdempotent.
    let wallet = Keypair::new().pubkey();
    let same = vec![
        Transfer {
            payout_id: "a".into(),
            wallet,
            amount_micro_usdc: 1,
            statement: None,
        },
        Transfer {
            payout_id: "b".into(),
            wallet,
            amount_micro_usdc: 2,
            statement: None,
        },
    ];
    let missing: HashSet<Pubkey> = [get_associated_token_address(&wallet, &p.mint)].into();
    let batches = pack::pack(&p, &LookupTables::none(), &same, &missing, &mut next);
    assert_eq!(batches[0].create_ata, vec![true, false]);
    // Instruction 3 is the create, 4 the first transfer, 5 the second.
    assert_eq!(batches[0].transfer_of_instruction(3), Some(0));
    assert_eq!(batches[0].transfer_of_instruction(4), Some(0));
    assert_eq!(batches[0].transfer_of_instruction(5), Some(1));
    assert_eq!(batches[0].transfer_of_instruction(2), None);
    assert_eq!(
        batches[0].memo,
        format!(
            "settle refs: {},{}",
            pack::memo_ref(&p.memo_key, "a"),
            pack::memo_ref(&p.memo_key, "b")
        )
    );
}

#[test]
fn the_memo_names_keyed_refs_when_they_fit_and_the_attempt_otherwise() {
    let p = params(1_000);
    let mut next = ids();
    let few_transfers = transfers(3, 36);
    let few = pack::pack(
        &p,
        &LookupTables::none(),
        &few_transfers,
        &HashSet::new(),
        &mut next,
    );
    assert!(few[0].memo.starts_with("settle refs: "), "{}", few[0].memo);
    assert_eq!(few[0].memo.matches(',').count(), 2);
    for t in &few_transfers {
        assert!(!few[0].memo.contains(&t.payout_id), "no payout id on chain");
        assert!(
            few[0]
                .memo
                .contains(&pack::memo_ref(&p.memo_key, &t.payout_id))
        );
    }
    let many = pack::pack(
        &p,
        &LookupTables::none(),
        &transfers(18, 36),
        &HashSet::new(),
        &mut next,
    );
    assert_eq!(many[0].memo, format!("settle {}", many[0].attempt_id));
}

#[test]
fn memo_refs_are_keyed_fixed_length_and_unlinkable_without_the_key() {
    let key = MemoKey::from_bytes([1; 32]);
    let other = MemoKey::from_bytes([2; 32]);
    // A payout id is guessable (run and provider); its reference is not without the key.
    let id = "po-0123456789abcdef01234567";
    let r = pack::memo_ref(&key, id);
    assert_eq!(r, pack::memo_ref(&key, id), "deterministic");
    assert_eq!(r.len(), 2 + pack::MEMO_REF_HEX_DIGITS);
    assert!(r.starts_with("r-") && r[2..].bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(!r.contains(&id[3..]), "{r}");
    assert_ne!(
        r,
        pack::memo_ref(&other, id),
        "another key, another reference"
    );
    assert_ne!(r, pack::memo_ref(&key, "po-0123456789abcdef01234568"));
    // The key never prints.
    assert_eq!(format!("{key:?}"), "MemoKey(<redacted>)");
    assert!(!format!("{:?}", params(1)).contains("[7, 7"));
}

#[test]
fn the_configured_limit_caps_transfers_per_transaction() {
    let p = params(5);
    let mut next = ids();
    let batches = pack::pack(
        &p,
        &LookupTables::none(),
        &transfers(12, 4),
        &HashSet::new(),
        &mut next,
    );
    let counts: Vec<usize> = batches.iter().map(|b| b.transfers.len()).collect();
    assert_eq!(counts, vec![5, 5, 2]);
}

#[test]
fn compute_unit_limits_come_from_simulation_with_a_margin() {
    assert_eq!(pack::compute_unit_limit_for(10_000), 12_000);
    assert_eq!(pack::compute_unit_limit_for(0), 1_000);
    assert_eq!(
        pack::compute_unit_limit_for(5_000_000),
        pack::COMPUTE_UNIT_LIMIT_MAX
    );
}

fn attempt(id: &str, payouts: &[&str]) -> SignedAttempt {
    SignedAttempt {
        attempt_id: id.into(),
        payout_ids: payouts.iter().map(|s| s.to_string()).collect(),
        transfers: payouts
            .iter()
            .map(|p| Transfer {
                payout_id: p.to_string(),
                wallet: Keypair::new().pubkey(),
                amount_micro_usdc: 5,
                statement: None,
            })
            .collect(),
        tx_bytes: vec![1, 2, 3],
        signature: "sig".into(),
        blockhash: "hash".into(),
        last_valid_block_height: 42,
    }
}

/// The journal refused, for the reason named (a [`JournalError`] is its message).
fn refused(result: Result<(), JournalError>, reason: &str) {
    match result {
        Err(JournalError(message)) => assert_eq!(message, reason),
        Ok(()) => panic!("accepted; expected the refusal {reason:?}"),
    }
}

async fn journal_invariants(journal: &dyn Journal) {
    journal
        .record_signed(&attempt("a1", &["p1", "p2"]))
        .await
        .unwrap();
    // A second live attempt for p2 is refused.
    refused(
        journal.record_signed(&attempt("a2", &["p2", "p3"])).await,
        "payout p2 already has an open attempt",
    );
    // The same attempt id twice is refused.
    refused(
        journal.record_signed(&attempt("a1", &["p9"])).await,
        "attempt a1 recorded twice",
    );
    assert_eq!(journal.open_attempts().await.unwrap().len(), 1);

    journal
        .record_outcome("a1", &AttemptOutcome::Expired)
        .await
        .unwrap();
    refused(
        journal.record_outcome("a1", &AttemptOutcome::Expired).await,
        "attempt a1 already has an outcome",
    );
    refused(
        journal
            .record_outcome("nope", &AttemptOutcome::Expired)
            .await,
        "unknown attempt nope",
    );
    // After a provable expiry the payouts may be re-signed.
    journal
        .record_signed(&attempt("a2", &["p2", "p3"]))
        .await
        .unwrap();
    journal
        .record_outcome("a2", &AttemptOutcome::Landed { slot: 7 })
        .await
        .unwrap();
    let ids: Vec<String> = ["p1", "p2", "p3"].iter().map(|s| s.to_string()).collect();
    let mut resolved = journal.resolved_payouts(&ids).await.unwrap();
    resolved.sort();
    assert_eq!(resolved, vec!["p2".to_string(), "p3".to_string()]);
    assert!(journal.open_attempts().await.unwrap().is_empty());
}

#[tokio::test]
async fn the_memory_journal_keeps_one_live_attempt_per_payout() {
    journal_invariants(&MemoryJournal::new()).await;
}

#[tokio::test]
async fn the_file_journal_keeps_one_live_attempt_per_payout_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.jsonl");
    journal_invariants(&FileJournal::open(&path).unwrap()).await;
    let reopened = FileJournal::open(&path).unwrap();
    assert!(reopened.open_attempts().await.unwrap().is_empty());
    let ids = vec!["p3".to_string()];
    assert_eq!(reopened.resolved_payouts(&ids).await.unwrap(), ids);
    // Refused records were never written.
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 4);
}
