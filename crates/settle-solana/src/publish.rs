//! Publishing a short text where nobody can rewrite it: a transaction holding one memo, paid
//! and signed by the publishing key, and read back by its signature.

use std::time::{Duration, Instant};

use solana_message::{Message, VersionedMessage};
use solana_sdk::{
    hash::Hash,
    pubkey::Pubkey,
    signature::{Keypair, Signature, Signer},
};
use solana_transaction::versioned::VersionedTransaction;

use crate::chain::{Chain, ChainError, Confirmation};
use crate::pack::{MEMO_PROGRAM_ID, memo_instruction};

/// A transaction of one memo, paid and signed by `payer`.
pub fn memo_transaction(payer: &Keypair, text: &str, blockhash: Hash) -> VersionedTransaction {
    let message =
        Message::new_with_blockhash(&[memo_instruction(text)], Some(&payer.pubkey()), &blockhash);
    VersionedTransaction::try_new(VersionedMessage::Legacy(message), &[payer])
        .expect("the payer signs its own memo transaction")
}

/// The texts of a transaction's memo instructions, in order (invalid UTF-8 skipped).
pub fn memo_texts(tx: &VersionedTransaction) -> Vec<String> {
    let keys = tx.message.static_account_keys();
    tx.message
        .instructions()
        .iter()
        .filter(|ix| keys.get(usize::from(ix.program_id_index)) == Some(&MEMO_PROGRAM_ID))
        .filter_map(|ix| String::from_utf8(ix.data.clone()).ok())
        .collect()
}

/// The memo texts of a transaction given as its wire bytes (none when they do not decode).
pub fn memo_texts_of_wire(bytes: &[u8]) -> Vec<String> {
    bincode::deserialize::<VersionedTransaction>(bytes)
        .map(|tx| memo_texts(&tx))
        .unwrap_or_default()
}

/// The account that paid for, and first signed, a transaction whose signatures verify;
/// `None` when a signature does not verify.
pub fn verified_fee_payer(tx: &VersionedTransaction) -> Option<Pubkey> {
    let verified = tx.verify_with_results().iter().all(|ok| *ok);
    verified
        .then(|| tx.message.static_account_keys().first().copied())
        .flatten()
}

/// Why a publication did not land.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error("the memo transaction {signature} failed on chain: {err}")]
    Failed { signature: Signature, err: String },
    #[error("the memo transaction was not confirmed within {waited_ms} ms (blockhash expired)")]
    NotConfirmed { waited_ms: u128 },
}

/// Sends a memo transaction signed by `payer` and waits until it is `confirmed`, sending it
/// again (same signature) while its blockhash is valid, and with a new blockhash after it
/// expired, for at most `wait`.
pub async fn publish_memo(
    chain: &dyn Chain,
    payer: &Keypair,
    text: &str,
    wait: Duration,
    poll: Duration,
) -> Result<Signature, PublishError> {
    let started = Instant::now();
    loop {
        let (blockhash, last_valid) = chain.latest_blockhash().await?;
        let tx = memo_transaction(payer, text, blockhash);
        let signature = tx.signatures[0];
        loop {
            chain.send_transaction(&tx).await?;
            let status = chain.signature_statuses(&[signature], false).await?;
            if let Some(Some(status)) = status.statuses.first() {
                if let Some(err) = &status.err {
                    return Err(PublishError::Failed {
                        signature,
                        err: err.clone(),
                    });
                }
                if status.confirmation >= Confirmation::Confirmed {
                    return Ok(signature);
                }
            }
            if started.elapsed() > wait {
                return Err(PublishError::NotConfirmed {
                    waited_ms: started.elapsed().as_millis(),
                });
            }
            if chain.block_height(Confirmation::Confirmed).await? > last_valid {
                break;
            }
            tokio::time::sleep(poll).await;
        }
    }
}

impl crate::rpc::RpcChain {
    /// The transaction of `signature` as the node holds it (`None` when unknown).
    pub async fn landed_transaction(
        &self,
        signature: &Signature,
    ) -> Result<Option<VersionedTransaction>, ChainError> {
        use solana_client::rpc_config::RpcTransactionConfig;
        use solana_transaction_status_client_types::UiTransactionEncoding;
        let config = RpcTransactionConfig {
            encoding: Some(UiTransactionEncoding::Base64),
            commitment: Some(solana_commitment_config::CommitmentConfig::confirmed()),
            max_supported_transaction_version: Some(0),
        };
        match self
            .client()
            .get_transaction_with_config(signature, config)
            .await
        {
            Ok(found) => Ok(found.transaction.transaction.decode()),
            Err(e) if e.to_string().contains("not found") || e.to_string().contains("null") => {
                Ok(None)
            }
            Err(e) => Err(ChainError::Rpc(e.to_string())),
        }
    }
}
