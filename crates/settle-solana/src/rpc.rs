//! [`RpcChain`]: the production [`Chain`] over `solana_client`'s nonblocking `RpcClient`.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use solana_account::Account;
use solana_client::{
    client_error::ClientError,
    nonblocking::rpc_client::RpcClient,
    rpc_config::{RpcAccountInfoConfig, RpcSendTransactionConfig, RpcSimulateTransactionConfig},
    rpc_request::RpcRequest,
    rpc_response::{TransactionConfirmationStatus, UiAccountEncoding, UiTransactionTokenBalance},
};
use solana_commitment_config::{CommitmentConfig, CommitmentLevel};
use solana_program_pack::Pack;
use solana_sdk::{hash::Hash, pubkey::Pubkey, signature::Signature};
use solana_transaction::versioned::VersionedTransaction;
use solana_transaction_error::TransactionError;
use solana_transaction_status_client_types::{
    EncodedConfirmedTransactionWithStatusMeta, UiTransactionEncoding,
    option_serializer::OptionSerializer,
};
use spl_token_interface::state::Account as TokenAccount;

use crate::chain::{
    Chain, ChainError, Confirmation, SigStatus, SignatureStatuses, Tip, TokenDelta, TxFailure,
    instruction_index_of,
};

/// Accounts per `getMultipleAccounts` request (node limit).
pub const ACCOUNTS_PER_REQUEST_MAX: usize = 100;
/// HTTP timeout of one RPC request.
pub const RPC_REQUEST_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// A [`Chain`] backed by a JSON-RPC node.
pub struct RpcChain {
    client: RpcClient,
    commitment: CommitmentConfig,
}

impl std::fmt::Debug for RpcChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcChain")
            .field("url", &self.client.url())
            .field("commitment", &self.commitment.commitment)
            .finish()
    }
}

impl RpcChain {
    /// Connect to `url`; `commitment` is used for reads (blockhash, accounts, balances).
    /// Settlement always waits for `finalized` regardless.
    pub fn new(url: impl Into<String>, commitment: Confirmation) -> Self {
        let commitment = commitment_config(commitment);
        Self {
            client: RpcClient::new_with_timeout_and_commitment(
                url.into(),
                Duration::from_millis(RPC_REQUEST_TIMEOUT_MS_DEFAULT),
                commitment,
            ),
            commitment,
        }
    }

    /// The underlying client.
    pub fn client(&self) -> &RpcClient {
        &self.client
    }
}

fn commitment_config(c: Confirmation) -> CommitmentConfig {
    CommitmentConfig {
        commitment: match c {
            Confirmation::Processed => CommitmentLevel::Processed,
            Confirmation::Confirmed => CommitmentLevel::Confirmed,
            Confirmation::Finalized => CommitmentLevel::Finalized,
        },
    }
}

fn rpc_err(e: ClientError) -> ChainError {
    ChainError::Rpc(e.to_string())
}

fn tx_failure(err: TransactionError) -> ChainError {
    ChainError::Transaction(TxFailure {
        message: err.to_string(),
        instruction_index: instruction_index_of(&err),
    })
}

fn parse_token_balances(
    balances: OptionSerializer<Vec<UiTransactionTokenBalance>>,
) -> Result<Vec<(u8, Pubkey, Pubkey, u64)>, ChainError> {
    let balances: Option<Vec<UiTransactionTokenBalance>> = balances.into();
    balances
        .unwrap_or_default()
        .into_iter()
        .map(|b| {
            let owner: Option<String> = b.owner.into();
            let owner = owner
                .ok_or_else(|| ChainError::Rpc("token balance without owner".into()))?
                .parse::<Pubkey>()
                .map_err(|e| ChainError::Rpc(format!("owner: {e}")))?;
            let mint = b
                .mint
                .parse::<Pubkey>()
                .map_err(|e| ChainError::Rpc(format!("mint: {e}")))?;
            let amount = b
                .ui_token_amount
                .amount
                .parse::<u64>()
                .map_err(|e| ChainError::Rpc(format!("amount: {e}")))?;
            Ok((b.account_index, owner, mint, amount))
        })
        .collect()
}

#[async_trait]
impl Chain for RpcChain {
    async fn latest_blockhash(&self) -> Result<(Hash, u64), ChainError> {
        self.client
            .get_latest_blockhash_with_commitment(self.commitment)
            .await
            .map_err(rpc_err)
    }

    async fn block_height(&self, commitment: Confirmation) -> Result<u64, ChainError> {
        self.client
            .get_block_height_with_commitment(commitment_config(commitment))
            .await
            .map_err(rpc_err)
    }

    async fn tip(&self, commitment: Confirmation) -> Result<Tip, ChainError> {
        let info = self
            .client
            .get_epoch_info_with_commitment(commitment_config(commitment))
            .await
            .map_err(rpc_err)?;
        Ok(Tip {
            slot: info.absolute_slot,
            block_height: info.block_height,
        })
    }

    async fn send_transaction(&self, tx: &VersionedTransaction) -> Result<Signature, ChainError> {
        self.client
            .send_transaction_with_config(
                tx,
                RpcSendTransactionConfig {
                    skip_preflight: true,
                    preflight_commitment: Some(self.commitment.commitment),
                    encoding: Some(UiTransactionEncoding::Base64),
                    // The payer rebroadcasts itself.
                    max_retries: Some(0),
                    min_context_slot: None,
                },
            )
            .await
            .map_err(rpc_err)
    }

    async fn simulate_units(&self, tx: &VersionedTransaction) -> Result<u64, ChainError> {
        let result = self
            .client
            .simulate_transaction_with_config(
                tx,
                RpcSimulateTransactionConfig {
                    sig_verify: false,
                    replace_recent_blockhash: false,
                    commitment: Some(self.commitment),
                    encoding: Some(UiTransactionEncoding::Base64),
                    ..RpcSimulateTransactionConfig::default()
                },
            )
            .await
            .map_err(rpc_err)?
            .value;
        if let Some(err) = result.err {
            return Err(tx_failure(err.into()));
        }
        result
            .units_consumed
            .ok_or_else(|| ChainError::Rpc("simulation returned no unitsConsumed".into()))
    }

    async fn signature_statuses(
        &self,
        signatures: &[Signature],
        search_history: bool,
    ) -> Result<SignatureStatuses, ChainError> {
        let response = if search_history {
            self.client
                .get_signature_statuses_with_history(signatures)
                .await
        } else {
            self.client.get_signature_statuses(signatures).await
        }
        .map_err(rpc_err)?;
        let context_slot = response.context.slot;
        let statuses = response
            .value
            .into_iter()
            .map(|status| {
                status.map(|s| {
                    let confirmation = match (s.confirmation_status, s.confirmations) {
                        (Some(TransactionConfirmationStatus::Finalized), _) | (None, None) => {
                            Confirmation::Finalized
                        }
                        (Some(TransactionConfirmationStatus::Confirmed), _) => {
                            Confirmation::Confirmed
                        }
                        _ => Confirmation::Processed,
                    };
                    SigStatus {
                        slot: s.slot,
                        confirmation,
                        err: s.err.map(|e| e.to_string()),
                    }
                })
            })
            .collect();
        Ok(SignatureStatuses {
            context_slot,
            statuses,
        })
    }

    async fn accounts(&self, keys: &[Pubkey]) -> Result<Vec<Option<Account>>, ChainError> {
        let mut all = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(ACCOUNTS_PER_REQUEST_MAX) {
            let response = self
                .client
                .get_multiple_ui_accounts_with_config(
                    chunk,
                    RpcAccountInfoConfig {
                        encoding: Some(UiAccountEncoding::Base64),
                        commitment: Some(self.commitment),
                        data_slice: None,
                        min_context_slot: None,
                    },
                )
                .await
                .map_err(rpc_err)?;
            if response.value.len() != chunk.len() {
                return Err(ChainError::Rpc("getMultipleAccounts: wrong length".into()));
            }
            for ui in response.value {
                all.push(match ui {
                    None => None,
                    Some(ui) => Some(
                        ui.decode::<Account>()
                            .ok_or_else(|| ChainError::Rpc("undecodable account".into()))?,
                    ),
                });
            }
        }
        Ok(all)
    }

    async fn token_balance(&self, token_account: &Pubkey) -> Result<Option<u64>, ChainError> {
        match self.account(token_account).await? {
            None => Ok(None),
            Some(account) => TokenAccount::unpack(&account.data)
                .map(|t| Some(t.amount))
                .map_err(|e| {
                    ChainError::Rpc(format!("{token_account} is not a token account: {e}"))
                }),
        }
    }

    async fn sol_balance(&self, key: &Pubkey) -> Result<u64, ChainError> {
        Ok(self
            .client
            .get_balance_with_commitment(key, self.commitment)
            .await
            .map_err(rpc_err)?
            .value)
    }

    async fn transaction_token_deltas(
        &self,
        signature: &Signature,
    ) -> Result<Option<Vec<TokenDelta>>, ChainError> {
        // `send` with an `Option` target distinguishes "not found" (null) from errors.
        let commitment = if self.commitment.commitment == CommitmentLevel::Processed {
            CommitmentConfig::confirmed()
        } else {
            self.commitment
        };
        let found: Option<EncodedConfirmedTransactionWithStatusMeta> = self
            .client
            .send(
                RpcRequest::GetTransaction,
                json!([signature.to_string(), {
                    "encoding": "json",
                    "commitment": commitment.commitment,
                    "maxSupportedTransactionVersion": 0,
                }]),
            )
            .await
            .map_err(rpc_err)?;
        let Some(found) = found else {
            return Ok(None);
        };
        let meta = found
            .transaction
            .meta
            .ok_or_else(|| ChainError::Rpc("transaction without meta".into()))?;
        let pre = parse_token_balances(meta.pre_token_balances)?;
        let post = parse_token_balances(meta.post_token_balances)?;
        let mut deltas = Vec::new();
        for (index, owner, mint, amount) in &post {
            let before = pre
                .iter()
                .find(|(i, ..)| i == index)
                .map_or(0, |(.., a)| *a);
            deltas.push(TokenDelta {
                owner: *owner,
                mint: *mint,
                delta: i128::from(*amount) - i128::from(before),
            });
        }
        for (index, owner, mint, amount) in &pre {
            if !post.iter().any(|(i, ..)| i == index) {
                deltas.push(TokenDelta {
                    owner: *owner,
                    mint: *mint,
                    delta: -i128::from(*amount),
                });
            }
        }
        Ok(Some(deltas))
    }

    async fn minimum_balance_for_rent_exemption(&self, data_len: usize) -> Result<u64, ChainError> {
        self.client
            .get_minimum_balance_for_rent_exemption(data_len)
            .await
            .map_err(rpc_err)
    }

    async fn genesis_hash(&self) -> Result<Hash, ChainError> {
        self.client.get_genesis_hash().await.map_err(rpc_err)
    }
}
