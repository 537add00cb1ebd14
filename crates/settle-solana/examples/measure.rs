//! Measure payouts per transaction and fees per payout on the local chain with the
//! real SPL programs: `cargo run -p settle-solana --example measure`.
//!
//! Two scenarios: every recipient already has a USDC account, and none has (each
//! transfer then carries a `CreateIdempotent` and the treasury pays the rent); each with
//! the memo's statement root (what the engine sends) and without it (the packing before
//! payments committed to statements), side by side.

use std::sync::Arc;

use settle_solana::{
    Chain, Keypair, LocalChain, MemoryJournal, Payer, PayerConfig, Signature, Signer, Transfer,
    Treasury, pack,
};

const PAYOUTS: usize = 200;
const PRIORITY_FEE_MICRO_LAMPORTS: u64 = 10_000;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    for existing_atas in [true, false] {
        for statements in [false, true] {
            measure(existing_atas, statements).await?;
        }
    }
    Ok(())
}

#[expect(
    clippy::too_many_lines,
    reason = "one measurement read top to bottom: a chain, a treasury, a packed call and the sizes it reports"
)]
async fn measure(existing_atas: bool, statements: bool) -> anyhow::Result<()> {
    let chain = LocalChain::new();
    let mint = chain.create_usdc_mint();
    let keypair = Keypair::new();
    let treasury_key = keypair.pubkey();
    chain.airdrop_sol(&treasury_key, 100_000_000_000);
    chain.mint_to(&mint, &treasury_key, 1_000_000_000_000);

    let transfers: Vec<Transfer> = (0..PAYOUTS)
        .map(|i| {
            let wallet = Keypair::new().pubkey();
            if existing_atas {
                chain.create_token_account(&mint, &wallet);
            }
            Transfer {
                // Realistic ids: a UUID is 36 characters.
                payout_id: format!("0190c1f8-7b2e-7c3a-9d41-{i:012x}"),
                wallet,
                amount_micro_usdc: 25_000_000 + i as u64,
                statement: statements.then_some([i as u8; 32]),
            }
        })
        .collect();

    let mut config = PayerConfig::new(mint);
    config.priority_fee_micro_lamports = PRIORITY_FEE_MICRO_LAMPORTS;
    config.poll_interval_ms = 1;
    config.rebroadcast_interval_ms = 5;
    let payer = Payer::new(
        Arc::new(chain.clone()) as Arc<dyn Chain>,
        Arc::new(MemoryJournal::new()),
        Arc::new(Treasury::from_keypair(keypair)),
        config,
    );
    let lamports_before = chain.lamports_of(&treasury_key);
    let report = payer.pay(transfers).await?;
    let lamports_spent = lamports_before - chain.lamports_of(&treasury_key);
    anyhow::ensure!(report.settled() == PAYOUTS, "not all settled: {report:?}");

    let mut fees = 0u64;
    let mut rows = Vec::new();
    for attempt in report.landed_attempts() {
        let signature: Signature = attempt.signature.parse()?;
        let landed = chain
            .landed_transaction(&signature)
            .ok_or_else(|| anyhow::anyhow!("missing transaction"))?;
        fees += landed.fee;
        rows.push((
            attempt.payout_ids.len(),
            pack::serialized_size(&landed.transaction),
            landed.compute_units_consumed,
            landed.fee,
        ));
    }
    let rent = chain
        .minimum_balance_for_rent_exemption(pack::TOKEN_ACCOUNT_LEN)
        .await?;
    let label = if existing_atas {
        "existing ATAs"
    } else {
        "all new ATAs"
    };
    let root = if statements {
        "memo with the statement root"
    } else {
        "memo without a statement root"
    };
    println!(
        "== {PAYOUTS} payouts, {label}, {root}, priority fee {PRIORITY_FEE_MICRO_LAMPORTS} µlamports/CU"
    );
    println!("transactions: {}", rows.len());
    let full = rows.iter().map(|r| r.0).max().unwrap_or(0);
    println!("payouts per full transaction: {full}");
    for (payouts, bytes, units, fee) in rows.iter().take(2) {
        println!(
            "  e.g. {payouts} payouts: {bytes} bytes, {units} CU consumed, fee {fee} lamports"
        );
    }
    println!(
        "fees: {fees} lamports total, {:.0} lamports per payout",
        fees as f64 / PAYOUTS as f64
    );
    if !existing_atas {
        println!("ATA rent: {rent} lamports per new recipient (paid once by the treasury)");
    }
    println!(
        "treasury SOL spent: {lamports_spent} lamports ({:.0} per payout)\n",
        lamports_spent as f64 / PAYOUTS as f64
    );
    Ok(())
}
