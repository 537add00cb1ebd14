//! Serve a [`LocalChain`] as a Solana JSON-RPC 2.0 HTTP endpoint, so that
//! [`crate::RpcChain`] (the production adapter over `RpcClient`) runs end to end
//! against the real SPL programs.
//!
//! Implemented methods (with the response shapes `solana_client` expects):
//! `getLatestBlockhash`, `getBlockHeight`, `getEpochInfo`, `getSlot`, `sendTransaction` (base64 and
//! base58), `simulateTransaction`, `getSignatureStatuses`, `getAccountInfo`,
//! `getMultipleAccounts`, `getBalance`, `getTokenAccountBalance`,
//! `getMinimumBalanceForRentExemption`, `getTransaction` (json or base64, with
//! `meta.preTokenBalances`/`postTokenBalances`), `isBlockhashValid`, `getVersion`,
//! `getGenesisHash`, `getHealth`. Unknown methods get JSON-RPC error -32601.

use std::net::SocketAddr;

use axum::{Json, Router, extract::State, routing::post};
use base64::{Engine, engine::general_purpose::STANDARD as BASE64};
use serde_json::{Value, json};
use solana_account::Account;
use solana_client::rpc_response::{
    RpcSimulateTransactionResult, TransactionConfirmationStatus, UiAccount, UiAccountData,
    UiAccountEncoding, UiTransactionTokenBalance,
};
use solana_message::VersionedMessage;
use solana_program_pack::Pack;
use solana_sdk::{pubkey::Pubkey, signature::Signature};
use solana_transaction::versioned::VersionedTransaction;
use solana_transaction_status_client_types::{
    EncodedConfirmedTransactionWithStatusMeta, EncodedTransaction,
    EncodedTransactionWithStatusMeta, TransactionBinaryEncoding, TransactionStatus,
    UiAddressTableLookup, UiCompiledInstruction, UiLoadedAddresses, UiMessage, UiRawMessage,
    UiTransaction, UiTransactionStatusMeta, option_serializer::OptionSerializer,
};
use spl_token_interface::state::Account as TokenAccount;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::chain::{Chain, ChainError, Confirmation};
use crate::local::{LandedTransaction, LocalChain, TokenBalanceRecord};

/// Largest request body accepted (a transaction is at most 1,232 bytes; lists of
/// signatures or accounts are small).
pub const REQUEST_BODY_BYTES_MAX: usize = 256 * 1024;

/// A running JSON-RPC endpoint. Dropping it shuts the server down.
pub struct RpcServer {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for RpcServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl RpcServer {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop accepting requests and wait for the server task.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Serve `chain` on `127.0.0.1:0` (an ephemeral port).
pub async fn serve_local_chain(chain: LocalChain) -> std::io::Result<RpcServer> {
    serve_local_chain_on(chain, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// Serve `chain` on the given address.
pub async fn serve_local_chain_on(
    chain: LocalChain,
    addr: SocketAddr,
) -> std::io::Result<RpcServer> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/", post(handle))
        .layer(axum::extract::DefaultBodyLimit::max(REQUEST_BODY_BYTES_MAX))
        .with_state(chain);
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "local JSON-RPC server stopped");
        }
    });
    Ok(RpcServer {
        addr,
        shutdown: Some(tx),
        task: Some(task),
    })
}

/// A JSON-RPC error (code, message).
struct RpcFault(i64, String);

impl From<ChainError> for RpcFault {
    fn from(e: ChainError) -> Self {
        match e {
            ChainError::Rpc(m) => RpcFault(-32005, m),
            ChainError::Transaction(f) => RpcFault(-32003, f.message),
        }
    }
}

fn invalid_params(message: impl Into<String>) -> RpcFault {
    RpcFault(-32602, message.into())
}

async fn handle(State(chain): State<LocalChain>, Json(request): Json<Value>) -> Json<Value> {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = request.get("method").and_then(Value::as_str).unwrap_or("");
    let params = request.get("params").cloned().unwrap_or(Value::Null);
    let params = match params {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        other => vec![other],
    };
    let response = match dispatch(&chain, method, &params).await {
        Ok(result) => json!({"jsonrpc": "2.0", "result": result, "id": id}),
        Err(RpcFault(code, message)) => {
            json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": id})
        }
    };
    Json(response)
}

fn context(chain: &LocalChain, value: Value) -> Value {
    json!({"context": {"slot": chain.height(), "apiVersion": "3.1.14"}, "value": value})
}

fn commitment_of(config: Option<&Value>) -> Confirmation {
    match config
        .and_then(|c| c.get("commitment"))
        .and_then(Value::as_str)
    {
        Some("processed") => Confirmation::Processed,
        Some("confirmed") => Confirmation::Confirmed,
        _ => Confirmation::Finalized,
    }
}

fn param_str<'a>(params: &'a [Value], index: usize, what: &str) -> Result<&'a str, RpcFault> {
    params
        .get(index)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_params(format!("missing {what}")))
}

fn param_pubkey(params: &[Value], index: usize) -> Result<Pubkey, RpcFault> {
    param_str(params, index, "pubkey")?
        .parse()
        .map_err(|_| invalid_params("Invalid param: Invalid"))
}

fn decode_transaction(params: &[Value]) -> Result<VersionedTransaction, RpcFault> {
    let encoded = param_str(params, 0, "transaction")?;
    let encoding = params
        .get(1)
        .and_then(|c| c.get("encoding"))
        .and_then(Value::as_str)
        .unwrap_or("base58");
    let bytes = match encoding {
        "base64" => BASE64
            .decode(encoded)
            .map_err(|e| invalid_params(format!("invalid base64 encoding: {e}")))?,
        "base58" | "binary" => bs58::decode(encoded)
            .into_vec()
            .map_err(|e| invalid_params(format!("invalid base58 encoding: {e}")))?,
        other => return Err(invalid_params(format!("unsupported encoding: {other}"))),
    };
    bincode::deserialize::<VersionedTransaction>(&bytes)
        .map_err(|e| invalid_params(format!("failed to deserialize transaction: {e}")))
}

fn ui_account(account: Account) -> Value {
    let ui = UiAccount {
        lamports: account.lamports,
        data: UiAccountData::Binary(BASE64.encode(&account.data), UiAccountEncoding::Base64),
        owner: account.owner.to_string(),
        executable: account.executable,
        rent_epoch: account.rent_epoch,
        space: Some(account.data.len() as u64),
    };
    serde_json::to_value(ui).unwrap_or(Value::Null)
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, RpcFault> {
    serde_json::to_value(value).map_err(|e| RpcFault(-32603, e.to_string()))
}

async fn dispatch(chain: &LocalChain, method: &str, params: &[Value]) -> Result<Value, RpcFault> {
    match method {
        "getHealth" => Ok(json!("ok")),
        "getVersion" => Ok(json!({"solana-core": "3.1.14", "feature-set": 0})),
        "getGenesisHash" => Ok(json!(chain.with_inner(|v| v.genesis_hash()).to_string())),
        "getSlot" => {
            let height = chain.block_height(commitment_of(params.first())).await?;
            Ok(json!(height))
        }
        "getEpochInfo" => {
            let tip = chain.tip(commitment_of(params.first())).await?;
            Ok(json!({
                "absoluteSlot": tip.slot,
                "blockHeight": tip.block_height,
                "epoch": 0,
                "slotIndex": tip.slot,
                "slotsInEpoch": 432_000,
                "transactionCount": null,
            }))
        }
        "getBlockHeight" => Ok(json!(
            chain.block_height(commitment_of(params.first())).await?
        )),
        "getLatestBlockhash" => {
            let (hash, last_valid) = chain.latest_blockhash().await?;
            Ok(context(
                chain,
                json!({"blockhash": hash.to_string(), "lastValidBlockHeight": last_valid}),
            ))
        }
        "isBlockhashValid" => {
            let hash: solana_sdk::hash::Hash = param_str(params, 0, "blockhash")?
                .parse()
                .map_err(|_| invalid_params("Invalid param: Invalid"))?;
            let valid = chain.with_inner(|view| view.blockhash_valid(&hash));
            Ok(context(chain, json!(valid)))
        }
        "sendTransaction" => {
            let tx = decode_transaction(params)?;
            let signature = chain.send_transaction(&tx).await?;
            Ok(json!(signature.to_string()))
        }
        "simulateTransaction" => simulate_transaction(chain, params),
        "getSignatureStatuses" => signature_statuses(chain, params),
        "getAccountInfo" => {
            let key = param_pubkey(params, 0)?;
            let account = chain.account(&key).await?;
            Ok(context(chain, account.map_or(Value::Null, ui_account)))
        }
        "getMultipleAccounts" => multiple_accounts(chain, params).await,
        "getBalance" => {
            let key = param_pubkey(params, 0)?;
            Ok(context(chain, json!(chain.sol_balance(&key).await?)))
        }
        "getTokenAccountBalance" => token_account_balance(chain, params).await,
        "getMinimumBalanceForRentExemption" => {
            let len = params
                .first()
                .and_then(Value::as_u64)
                .ok_or_else(|| invalid_params("missing data length"))?;
            let len = usize::try_from(len).map_err(|_| invalid_params("data length"))?;
            Ok(json!(chain.minimum_balance_for_rent_exemption(len).await?))
        }
        "getTransaction" => transaction(chain, params),
        _ => Err(RpcFault(-32601, "Method not found".into())),
    }
}

/// `simulateTransaction`: the transaction run without landing, its logs, units and fee.
fn simulate_transaction(chain: &LocalChain, params: &[Value]) -> Result<Value, RpcFault> {
    let tx = decode_transaction(params)?;
    let sim = chain.simulate_raw(&tx)?;
    let result = RpcSimulateTransactionResult {
        err: sim.err.map(Into::into),
        logs: Some(sim.logs),
        accounts: None,
        units_consumed: Some(sim.units_consumed),
        loaded_accounts_data_size: None,
        return_data: None,
        inner_instructions: None,
        replacement_blockhash: None,
        fee: Some(sim.fee),
        pre_balances: None,
        post_balances: None,
        pre_token_balances: None,
        post_token_balances: None,
        loaded_addresses: None,
    };
    Ok(context(chain, to_value(&result)?))
}

/// `getSignatureStatuses`: at most 256 signatures, with history search when asked.
fn signature_statuses(chain: &LocalChain, params: &[Value]) -> Result<Value, RpcFault> {
    let signatures: Vec<Signature> = param_list(params, "signatures")?;
    if signatures.len() > 256 {
        return Err(invalid_params("Too many inputs provided; max 256"));
    }
    let search_history = params
        .get(1)
        .and_then(|c| c.get("searchTransactionHistory"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (context_slot, statuses) = chain.statuses_raw(&signatures, search_history)?;
    let value: Vec<Option<TransactionStatus>> = statuses
        .into_iter()
        .map(|s| {
            s.map(|s| TransactionStatus {
                slot: s.slot,
                confirmations: s.confirmations,
                status: match &s.err {
                    None => Ok(()),
                    Some(e) => Err(e.clone()),
                },
                err: s.err,
                confirmation_status: Some(match s.confirmation {
                    Confirmation::Processed => TransactionConfirmationStatus::Processed,
                    Confirmation::Confirmed => TransactionConfirmationStatus::Confirmed,
                    Confirmation::Finalized => TransactionConfirmationStatus::Finalized,
                }),
            })
        })
        .collect();
    Ok(json!({"context": {"slot": context_slot}, "value": to_value(&value)?}))
}

/// `getMultipleAccounts`: at most 100 accounts, base64.
async fn multiple_accounts(chain: &LocalChain, params: &[Value]) -> Result<Value, RpcFault> {
    let keys: Vec<Pubkey> = param_list(params, "pubkeys")?;
    if keys.len() > 100 {
        return Err(invalid_params("Too many inputs provided; max 100"));
    }
    let accounts = chain.accounts(&keys).await?;
    let value: Vec<Value> = accounts
        .into_iter()
        .map(|a| a.map_or(Value::Null, ui_account))
        .collect();
    Ok(context(chain, Value::Array(value)))
}

/// `getTokenAccountBalance`: a token account's amount in its mint's decimals.
async fn token_account_balance(chain: &LocalChain, params: &[Value]) -> Result<Value, RpcFault> {
    let key = param_pubkey(params, 0)?;
    let account = chain
        .account(&key)
        .await?
        .ok_or_else(|| invalid_params("Invalid param: could not find account"))?;
    let token = TokenAccount::unpack(&account.data)
        .map_err(|_| invalid_params("Invalid param: not a Token account"))?;
    let decimals = chain
        .account(&token.mint)
        .await?
        .and_then(|m| spl_token_interface::state::Mint::unpack(&m.data).ok())
        .map_or(0, |m| m.decimals);
    Ok(context(chain, ui_token_amount(token.amount, decimals)))
}

/// `getTransaction`: a landed transaction, `null` below the commitment asked.
fn transaction(chain: &LocalChain, params: &[Value]) -> Result<Value, RpcFault> {
    chain.injected_failure()?;
    let signature: Signature = param_str(params, 0, "signature")?
        .parse()
        .map_err(|_| invalid_params("Invalid param: Invalid"))?;
    let config = params.get(1);
    let commitment = commitment_of(config);
    let encoding = config
        .and_then(|c| c.get("encoding"))
        .and_then(Value::as_str)
        .unwrap_or("json")
        .to_string();
    let value = chain.with_inner(|view| {
        let landed = view.landed(&signature)?;
        let (confirmation, _) = view.confirmation_of(landed.slot);
        if commitment == Confirmation::Finalized && confirmation != Confirmation::Finalized {
            return None;
        }
        let decimals_of = |mint: &Pubkey| {
            view.account(mint)
                .and_then(|m| spl_token_interface::state::Mint::unpack(&m.data).ok())
                .map_or(0, |m| m.decimals)
        };
        Some(encode_landed(landed, &encoding, &decimals_of))
    });
    match value {
        None => Ok(Value::Null),
        Some(encoded) => to_value(&encoded?),
    }
}

/// The first parameter, an array of strings each parsed as a `T` (signatures, keys).
fn param_list<T: std::str::FromStr>(params: &[Value], what: &str) -> Result<Vec<T>, RpcFault> {
    params
        .first()
        .and_then(Value::as_array)
        .ok_or_else(|| invalid_params(format!("missing {what}")))?
        .iter()
        .map(|s| {
            s.as_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| invalid_params("Invalid param: Invalid"))
        })
        .collect()
}

fn ui_token_amount(amount: u64, decimals: u8) -> Value {
    let ui = ui_amount_string(amount, decimals);
    json!({
        "amount": amount.to_string(),
        "decimals": decimals,
        "uiAmount": ui.parse::<f64>().ok(),
        "uiAmountString": ui,
    })
}

/// Decimal rendering of a base-unit amount without floats.
fn ui_amount_string(amount: u64, decimals: u8) -> String {
    let decimals = usize::from(decimals);
    if decimals == 0 {
        return amount.to_string();
    }
    let digits = format!("{amount:0>width$}", width = decimals + 1);
    let (int, frac) = digits.split_at(digits.len() - decimals);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        int.to_string()
    } else {
        format!("{int}.{frac}")
    }
}

fn token_balances(
    records: &[TokenBalanceRecord],
    decimals_of: &dyn Fn(&Pubkey) -> u8,
) -> Result<Vec<UiTransactionTokenBalance>, RpcFault> {
    records
        .iter()
        .map(|r| {
            let amount = ui_token_amount(r.amount, decimals_of(&r.mint));
            Ok(UiTransactionTokenBalance {
                account_index: r.account_index,
                mint: r.mint.to_string(),
                ui_token_amount: serde_json::from_value(amount)
                    .map_err(|e| RpcFault(-32603, e.to_string()))?,
                owner: OptionSerializer::Some(r.owner.to_string()),
                program_id: OptionSerializer::Some(spl_token_interface::id().to_string()),
            })
        })
        .collect()
}

fn encode_landed(
    landed: &LandedTransaction,
    encoding: &str,
    decimals_of: &dyn Fn(&Pubkey) -> u8,
) -> Result<EncodedConfirmedTransactionWithStatusMeta, RpcFault> {
    let tx = &landed.transaction;
    let transaction = match encoding {
        "base64" => EncodedTransaction::Binary(
            BASE64.encode(bincode::serialize(tx).map_err(|e| RpcFault(-32603, e.to_string()))?),
            TransactionBinaryEncoding::Base64,
        ),
        "base58" => EncodedTransaction::Binary(
            bs58::encode(bincode::serialize(tx).map_err(|e| RpcFault(-32603, e.to_string()))?)
                .into_string(),
            TransactionBinaryEncoding::Base58,
        ),
        _ => EncodedTransaction::Json(UiTransaction {
            signatures: tx.signatures.iter().map(ToString::to_string).collect(),
            message: UiMessage::Raw(UiRawMessage {
                header: *tx.message.header(),
                account_keys: tx
                    .message
                    .static_account_keys()
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                recent_blockhash: tx.message.recent_blockhash().to_string(),
                instructions: tx
                    .message
                    .instructions()
                    .iter()
                    .map(|ix| UiCompiledInstruction::from(ix, Some(1)))
                    .collect(),
                address_table_lookups: tx
                    .message
                    .address_table_lookups()
                    .map(|lookups| lookups.iter().map(UiAddressTableLookup::from).collect()),
            }),
        }),
    };
    let meta = UiTransactionStatusMeta {
        err: landed.err.clone().map(Into::into),
        status: match &landed.err {
            None => Ok(()),
            Some(e) => Err(e.clone().into()),
        },
        fee: landed.fee,
        pre_balances: landed.pre_balances.clone(),
        post_balances: landed.post_balances.clone(),
        inner_instructions: OptionSerializer::None,
        log_messages: OptionSerializer::Some(landed.logs.clone()),
        pre_token_balances: OptionSerializer::Some(token_balances(
            &landed.pre_token_balances,
            decimals_of,
        )?),
        post_token_balances: OptionSerializer::Some(token_balances(
            &landed.post_token_balances,
            decimals_of,
        )?),
        rewards: OptionSerializer::None,
        loaded_addresses: match &tx.message {
            VersionedMessage::Legacy(_) => OptionSerializer::Skip,
            VersionedMessage::V0(_) => {
                let statics = tx.message.static_account_keys().len();
                let (writable, _) = landed.loaded_counts;
                let names = |keys: &[Pubkey]| keys.iter().map(ToString::to_string).collect();
                OptionSerializer::Some(UiLoadedAddresses {
                    writable: names(&landed.account_keys[statics..statics + writable]),
                    readonly: names(&landed.account_keys[statics + writable..]),
                })
            }
        },
        return_data: OptionSerializer::Skip,
        compute_units_consumed: OptionSerializer::Some(landed.compute_units_consumed),
        cost_units: OptionSerializer::Skip,
    };
    Ok(EncodedConfirmedTransactionWithStatusMeta {
        slot: landed.slot,
        transaction: EncodedTransactionWithStatusMeta {
            transaction,
            meta: Some(meta),
            version: Some(tx.version()),
        },
        block_time: None,
    })
}

#[cfg(test)]
mod tests {
    use super::ui_amount_string;

    #[test]
    fn ui_amounts_render_without_floats() {
        assert_eq!(ui_amount_string(12_500_000, 6), "12.5");
        assert_eq!(ui_amount_string(1, 6), "0.000001");
        assert_eq!(ui_amount_string(3_000_000, 6), "3");
        assert_eq!(ui_amount_string(0, 6), "0");
        assert_eq!(ui_amount_string(42, 0), "42");
    }
}
