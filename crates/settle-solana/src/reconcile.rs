//! Compare settled payouts with the token balance changes recorded on chain.

use std::collections::HashMap;

use solana_sdk::{pubkey::Pubkey, signature::Signature};

use crate::chain::{Chain, ChainError, TokenDelta};

/// A payout the ledger considers settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettledPayout {
    /// Payout id.
    pub payout_id: String,
    /// Recipient wallet (owner of the credited token account).
    pub wallet: Pubkey,
    /// Amount the ledger says was paid (µUSDC).
    pub amount_micro_usdc: u64,
    /// Base58 signature of the transaction that paid it.
    pub signature: String,
}

/// A difference between the ledger and the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discrepancy {
    /// The signature is not a valid base58 signature.
    BadSignature {
        /// Payout id.
        payout_id: String,
    },
    /// The chain does not know the transaction.
    TransactionNotFound {
        /// Payout id.
        payout_id: String,
        /// Signature.
        signature: String,
    },
    /// The wallet's balance change in that transaction differs from the ledger.
    /// When several payouts of one wallet share a transaction, their sum is compared.
    AmountMismatch {
        /// Payout ids of this wallet in the transaction.
        payout_ids: Vec<String>,
        /// The wallet.
        wallet: Pubkey,
        /// Signature.
        signature: String,
        /// What the ledger says (µUSDC).
        expected_micro_usdc: i128,
        /// What the chain says (µUSDC).
        actual_micro_usdc: i128,
    },
}

/// Outcome of a reconciliation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Payouts checked.
    pub checked: usize,
    /// Payouts whose chain change matches.
    pub matched: usize,
    /// Differences found.
    pub discrepancies: Vec<Discrepancy>,
}

/// For each transaction, fetch its token balance changes of `mint` and compare each
/// recipient's credit with the sum of that wallet's settled payouts in it.
pub async fn reconcile(
    chain: &dyn Chain,
    mint: &Pubkey,
    payouts: &[SettledPayout],
) -> Result<ReconcileReport, ChainError> {
    let mut report = ReconcileReport {
        checked: payouts.len(),
        ..ReconcileReport::default()
    };
    // Group by transaction, then by wallet.
    let mut by_tx: HashMap<&str, Vec<&SettledPayout>> = HashMap::new();
    for p in payouts {
        by_tx.entry(p.signature.as_str()).or_default().push(p);
    }
    let mut signatures: Vec<&str> = by_tx.keys().copied().collect();
    signatures.sort_unstable();
    for signature in signatures {
        let group = &by_tx[signature];
        let Ok(parsed) = signature.parse::<Signature>() else {
            for p in group {
                report.discrepancies.push(Discrepancy::BadSignature {
                    payout_id: p.payout_id.clone(),
                });
            }
            continue;
        };
        let Some(deltas) = chain.transaction_token_deltas(&parsed).await? else {
            for p in group {
                report.discrepancies.push(Discrepancy::TransactionNotFound {
                    payout_id: p.payout_id.clone(),
                    signature: signature.to_string(),
                });
            }
            continue;
        };
        let mut by_wallet: HashMap<Pubkey, Vec<&SettledPayout>> = HashMap::new();
        for p in group {
            by_wallet.entry(p.wallet).or_default().push(p);
        }
        for (wallet, ps) in by_wallet {
            let expected: i128 = ps.iter().map(|p| i128::from(p.amount_micro_usdc)).sum();
            let actual = credited(&deltas, &wallet, mint);
            if expected == actual {
                report.matched += ps.len();
            } else {
                report.discrepancies.push(Discrepancy::AmountMismatch {
                    payout_ids: ps.iter().map(|p| p.payout_id.clone()).collect(),
                    wallet,
                    signature: signature.to_string(),
                    expected_micro_usdc: expected,
                    actual_micro_usdc: actual,
                });
            }
        }
    }
    Ok(report)
}

fn credited(deltas: &[TokenDelta], wallet: &Pubkey, mint: &Pubkey) -> i128 {
    deltas
        .iter()
        .filter(|d| d.owner == *wallet && d.mint == *mint)
        .map(|d| d.delta)
        .sum()
}
