//! Transfers, wallet validation and packing transfers into transactions: legacy ones, or
//! v0 ones that load their accounts from the treasury's lookup tables ([`crate::lookup`]).
//!
//! # Transaction layout
//!
//! ```text
//! 0  ComputeBudget SetComputeUnitLimit   (from simulation, see `compute_unit_limit_for`)
//! 1  ComputeBudget SetComputeUnitPrice   (configured priority fee, micro-lamports per CU)
//! 2  Memo                                ("settle refs: <refs>" or "settle att-<16 hex>")
//! 3… per transfer: [ATA CreateIdempotent when the recipient ATA is missing] TransferChecked
//! ```
//!
//! The packer adds transfers while the *serialized* transaction (one signature)
//! stays within [`PACKET_DATA_SIZE`] bytes, its accounts within [`ACCOUNTS_PER_TX_MAX`] and
//! its instructions within [`INSTRUCTION_TRACE_MAX`], measuring each candidate. With lookup tables, the message is a v0 one compiled against
//! the tables that hold its accounts: a recipient's token account then costs one byte
//! instead of 32. The memo
//! names the payouts' keyed references when they fit; otherwise it carries only the
//! attempt id (`settle att-0123456789abcdef`, random), which the journal maps to its
//! payout ids, so that the memo does not reduce the number of transfers per transaction.
//!
//! # Memo references
//!
//! A payout id is derived from guessable inputs (run and provider), so it never goes on
//! chain. The memo carries its *reference* instead, `r-` and 24 hex digits of
//! `HMAC-SHA256(memo_key, "settle/solana/memo-ref/v1\0" || payout_id)`, where
//! `memo_key` is a server secret ([`MemoKey`], derived from the treasury key by
//! [`crate::Treasury::memo_key`]). Without that key nobody can tell which payout, and so
//! which provider, a transfer belongs to; with it (or with the ledger, which keeps each
//! signed transaction with its payout ids) the operator can.

use std::collections::HashSet;

use crate::lookup::LookupTables;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_instruction::Instruction;
use solana_message::{Message, VersionedMessage, v0};
use solana_sdk::{hash::Hash, pubkey::Pubkey};
use solana_transaction::versioned::VersionedTransaction;
use spl_associated_token_account_interface::{
    address::get_associated_token_address, instruction::create_associated_token_account_idempotent,
};

/// The SPL Memo program (v3).
pub const MEMO_PROGRAM_ID: Pubkey =
    Pubkey::from_str_const("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr");
/// Maximum size of a serialized transaction (IPv6 MTU minus headers).
pub const PACKET_DATA_SIZE: usize = 1232;
/// Accounts a transaction may lock (static and loaded from tables together): the runtime's
/// account-lock limit.
pub const ACCOUNTS_PER_TX_MAX: usize = 64;
/// Instructions a transaction may execute, its own and the programs' cross-program
/// invocations together (the runtime's instruction trace limit).
pub const INSTRUCTION_TRACE_MAX: usize = 64;
/// Trace entries of creating a missing token account (`CreateIdempotent`: itself and four
/// invocations of the system and token programs, as the ATA program executes it).
pub const ATA_CREATE_TRACE: usize = 5;
/// USDC has 6 decimals: 1 USDC = 1,000,000 µUSDC (token base units).
pub const USDC_DECIMALS: u8 = 6;
/// The largest compute unit limit a transaction may request; used for simulation.
pub const COMPUTE_UNIT_LIMIT_MAX: u32 = 1_400_000;
/// Margin added on top of simulated compute units: percent …
pub const COMPUTE_UNIT_MARGIN_PERCENT: u64 = 10;
/// … plus a fixed number of units.
pub const COMPUTE_UNIT_MARGIN_UNITS: u64 = 1_000;
/// Size of an SPL token account, whose rent the treasury pays for new ATAs.
pub const TOKEN_ACCOUNT_LEN: usize = 165;
/// Prefix of a memo that names payout references (see [`memo_ref`]). Memos of ledgers
/// written before references existed start with `settle payouts: ` and name payout ids.
pub const MEMO_REFS_PREFIX: &str = "settle refs: ";
/// Domain separator of a payout's memo reference.
pub const MEMO_REF_DOMAIN: &[u8] = b"settle/solana/memo-ref/v1\0";
/// Hex digits of a memo reference after `r-` (96 bits).
pub const MEMO_REF_HEX_DIGITS: usize = 24;
/// What follows a memo's payout references or attempt id: the root over the statements of
/// the transaction's payouts, 64 hex digits ([`settle_proof::statements_root`]).
pub const MEMO_STATEMENTS_PREFIX: &str = " st=";
/// Prefix of a memo that names an attempt (when the ids do not fit). Kept short:
/// every byte counts, and `settle att-<16 hex>` lets one more transfer fit.
pub const MEMO_ATTEMPT_PREFIX: &str = "settle ";

/// One payment: `amount_micro_usdc` µUSDC to `wallet`'s USDC associated token account.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Transfer {
    /// The payout this transfer settles (unique per transfer).
    pub payout_id: String,
    /// Owner wallet (on-curve address); the tokens go to its associated token account.
    pub wallet: Pubkey,
    /// Amount in µUSDC (token base units), > 0.
    pub amount_micro_usdc: u64,
    /// The hash of the payout's statement ([`settle_proof::statement_hash`]): the memo
    /// carries one root over those of its transaction's transfers. `None` when unknown (a
    /// transfer read back from a journal); a batch with one such transfer carries no root.
    pub statement: Option<[u8; 32]>,
}

/// Why a wallet address was refused. [`WalletError::code`] is a stable API code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalletError {
    /// Not valid base58.
    #[error("wallet address is not valid base58")]
    InvalidBase58,
    /// Decodes to something other than 32 bytes.
    #[error("wallet address decodes to {0} bytes, expected 32")]
    InvalidLength(usize),
    /// Off the ed25519 curve (a program-derived address): no one can sign for it,
    /// and its ATA would not be the provider's.
    #[error("wallet address is not on the ed25519 curve (program-derived address)")]
    OffCurve,
}

impl WalletError {
    /// Stable error code for APIs.
    pub fn code(&self) -> &'static str {
        match self {
            WalletError::InvalidBase58 => "wallet_invalid_base58",
            WalletError::InvalidLength(_) => "wallet_invalid_length",
            WalletError::OffCurve => "wallet_off_curve",
        }
    }
}

/// Parse a provider wallet: base58, 32 bytes, on the ed25519 curve.
pub fn validate_wallet(address: &str) -> Result<Pubkey, WalletError> {
    // A 32-byte value is at most 44 base58 characters; refuse huge inputs early.
    if address.len() > 64 {
        return Err(WalletError::InvalidLength(address.len()));
    }
    let bytes = bs58::decode(address.trim())
        .into_vec()
        .map_err(|_| WalletError::InvalidBase58)?;
    let array: [u8; 32] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| WalletError::InvalidLength(bytes.len()))?;
    let pubkey = Pubkey::new_from_array(array);
    if !pubkey.is_on_curve() {
        return Err(WalletError::OffCurve);
    }
    Ok(pubkey)
}

/// The secret key of memo references (32 bytes). Its `Debug` never shows the key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct MemoKey([u8; 32]);

impl MemoKey {
    /// A key from its bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Debug for MemoKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoKey(<redacted>)")
    }
}

/// The on-chain reference of a payout: `r-` and 24 hex digits of
/// `HMAC-SHA256(key, MEMO_REF_DOMAIN || payout_id)`. Unlinkable to the payout id (and so
/// to its provider) without the key.
pub fn memo_ref(key: &MemoKey, payout_id: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key.bytes())
        .expect("HMAC accepts a key of any length");
    mac.update(MEMO_REF_DOMAIN);
    mac.update(payout_id.as_bytes());
    let tag = mac.finalize().into_bytes();
    let mut out = String::with_capacity(2 + MEMO_REF_HEX_DIGITS);
    out.push_str("r-");
    for byte in &tag[..MEMO_REF_HEX_DIGITS / 2] {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// `wallet`'s associated token account of `mint` (where its payouts go).
pub fn token_account_of(wallet: &Pubkey, mint: &Pubkey) -> Pubkey {
    get_associated_token_address(wallet, mint)
}

/// Static inputs of packing: who pays, which token, which fee, which memo key.
#[derive(Debug, Clone, Copy)]
pub struct PackParams {
    /// Treasury wallet: fee payer, transfer authority, ATA rent payer.
    pub treasury: Pubkey,
    /// USDC mint.
    pub mint: Pubkey,
    /// Priority fee in micro-lamports per compute unit.
    pub priority_fee_micro_lamports: u64,
    /// Upper bound on transfers per transaction (the size limit usually binds first).
    pub transfers_per_tx_max: usize,
    /// Key of the payouts' memo references.
    pub memo_key: MemoKey,
}

impl PackParams {
    /// The treasury's USDC associated token account (source of all transfers).
    pub fn treasury_token_account(&self) -> Pubkey {
        get_associated_token_address(&self.treasury, &self.mint)
    }
}

/// A group of transfers that goes into one transaction. Its fields are to be read: a batch
/// grows only through [`pack`] and [`Batch::adding`], which keep its instructions in step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The attempt this batch becomes.
    pub attempt_id: String,
    /// The transfers, in instruction order.
    pub transfers: Vec<Transfer>,
    /// For each transfer: whether its instructions include ATA creation.
    pub create_ata: Vec<bool>,
    /// The memo text.
    pub memo: String,
    /// Each transfer's instructions (token account creation, then the transfer), built
    /// once when it joined: a derivation of a token account's address costs a curve check,
    /// and packing sizes a batch after every transfer it adds.
    transfer_ixs: Vec<Vec<Instruction>>,
}

impl Batch {
    /// The payout ids, in order.
    pub fn payout_ids(&self) -> Vec<String> {
        self.transfers.iter().map(|t| t.payout_id.clone()).collect()
    }

    /// The instructions of this batch with the given compute unit limit.
    pub fn instructions(&self, params: &PackParams, compute_unit_limit: u32) -> Vec<Instruction> {
        let mut ixs = Vec::with_capacity(3 + 2 * self.transfers.len());
        ixs.push(ComputeBudgetInstruction::set_compute_unit_limit(
            compute_unit_limit,
        ));
        ixs.push(ComputeBudgetInstruction::set_compute_unit_price(
            params.priority_fee_micro_lamports,
        ));
        ixs.push(memo_instruction(&self.memo));
        ixs.extend(self.transfer_ixs.iter().flatten().cloned());
        ixs
    }

    /// This batch with `transfer` added (its token account created first when
    /// `ata_missing`), the memo left as it is.
    pub fn adding(&self, params: &PackParams, transfer: &Transfer, ata_missing: bool) -> Batch {
        let ata = get_associated_token_address(&transfer.wallet, &params.mint);
        let source = params.treasury_token_account();
        with_transfer(params, &source, self, transfer, (&ata, ata_missing))
    }

    /// The transfer that instruction `index` belongs to, if any.
    pub fn transfer_of_instruction(&self, index: u8) -> Option<usize> {
        let mut next = 3usize;
        for (position, create) in self.create_ata.iter().enumerate() {
            let width = if *create { 2 } else { 1 };
            if (next..next + width).contains(&usize::from(index)) {
                return Some(position);
            }
            next += width;
        }
        None
    }

    /// An unsigned transaction of this batch: a v0 one against the tables that hold its
    /// accounts, or a legacy one when no table holds any.
    pub fn unsigned_transaction(
        &self,
        params: &PackParams,
        tables: &LookupTables,
        compute_unit_limit: u32,
        blockhash: Hash,
    ) -> VersionedTransaction {
        let ixs = self.instructions(params, compute_unit_limit);
        unsigned(&params.treasury, &ixs, tables, blockhash)
    }

    /// Serialized size in bytes of this batch's transaction (signatures included).
    pub fn serialized_size(&self, params: &PackParams, tables: &LookupTables) -> usize {
        serialized_size(&self.unsigned_transaction(
            params,
            tables,
            COMPUTE_UNIT_LIMIT_MAX,
            Hash::default(),
        ))
    }

    /// Instructions the transaction executes, invocations included: the three in front,
    /// one per transfer, [`ATA_CREATE_TRACE`] per token account created.
    pub fn trace_length(&self) -> usize {
        3 + self
            .create_ata
            .iter()
            .map(|create| 1 + if *create { ATA_CREATE_TRACE } else { 0 })
            .sum::<usize>()
    }

    /// Accounts the transaction locks (static and loaded).
    pub fn account_count(&self, params: &PackParams) -> usize {
        let ixs = self.instructions(params, COMPUTE_UNIT_LIMIT_MAX);
        let mut keys: HashSet<Pubkey> = HashSet::from([params.treasury]);
        for ix in &ixs {
            keys.insert(ix.program_id);
            keys.extend(ix.accounts.iter().map(|a| a.pubkey));
        }
        keys.len()
    }
}

/// An unsigned transaction of `ixs` paid by `payer`: v0 against the tables that hold any
/// of its accounts, legacy when there are none (or the v0 message cannot be compiled).
pub fn unsigned(
    payer: &Pubkey,
    ixs: &[Instruction],
    tables: &LookupTables,
    blockhash: Hash,
) -> VersionedTransaction {
    let covering = tables.covering(
        ixs.iter()
            .flat_map(|ix| ix.accounts.iter().map(|a| &a.pubkey)),
    );
    let message = if covering.is_empty() {
        None
    } else {
        v0::Message::try_compile(payer, ixs, &covering, blockhash)
            .ok()
            .map(VersionedMessage::V0)
    };
    let message = message.unwrap_or_else(|| {
        VersionedMessage::Legacy(Message::new_with_blockhash(ixs, Some(payer), &blockhash))
    });
    let signatures = usize::from(message.header().num_required_signatures);
    VersionedTransaction {
        signatures: vec![Default::default(); signatures],
        message,
    }
}

/// What the treasury's lookup tables should hold for `transfers`: the mint, the
/// treasury's token account and each recipient's token account.
pub fn lookup_addresses(params: &PackParams, transfers: &[Transfer]) -> Vec<Pubkey> {
    let mut wanted = vec![params.mint, params.treasury_token_account()];
    wanted.extend(
        transfers
            .iter()
            .map(|t| get_associated_token_address(&t.wallet, &params.mint)),
    );
    wanted
}

/// The memo instruction (no signer accounts: the transaction's signer is the treasury).
pub fn memo_instruction(text: &str) -> Instruction {
    Instruction {
        program_id: MEMO_PROGRAM_ID,
        accounts: Vec::new(),
        data: text.as_bytes().to_vec(),
    }
}

/// A transaction's bytes as sent on the wire (what the journal stores).
pub fn wire_bytes(tx: &VersionedTransaction) -> Vec<u8> {
    bincode::serialize(tx).expect("a transaction serializes")
}

/// Serialized size of a transaction as sent on the wire.
pub fn serialized_size(tx: &VersionedTransaction) -> usize {
    bincode::serialized_size(tx).map_or(usize::MAX, |n| n as usize)
}

/// The memo naming the payouts by their keyed references ([`memo_ref`]), never by id.
pub fn refs_memo(key: &MemoKey, payout_ids: &[String]) -> String {
    let refs: Vec<String> = payout_ids.iter().map(|id| memo_ref(key, id)).collect();
    format!("{MEMO_REFS_PREFIX}{}", refs.join(","))
}

/// The root over the statements of `transfers` as a memo ends with it (empty when a
/// transfer's statement is unknown).
fn statements_suffix(transfers: &[Transfer]) -> String {
    let hashes: Option<Vec<[u8; 32]>> = transfers.iter().map(|t| t.statement).collect();
    match hashes {
        Some(hashes) if !hashes.is_empty() => format!(
            "{MEMO_STATEMENTS_PREFIX}{}",
            hex::encode(settle_proof::statements_root(&hashes))
        ),
        _ => String::new(),
    }
}

/// The statement root a memo carries, if any.
pub fn memo_statements_root(memo: &str) -> Option<[u8; 32]> {
    let (_, root) = memo.rsplit_once(MEMO_STATEMENTS_PREFIX)?;
    settle_proof::digest32(root)
}

/// The short memo naming only the attempt.
pub fn attempt_memo(attempt_id: &str) -> String {
    format!("{MEMO_ATTEMPT_PREFIX}{attempt_id}")
}

/// Compute unit limit for a transaction that consumed `units` in simulation:
/// `units × 1.1 + 1,000`, capped at [`COMPUTE_UNIT_LIMIT_MAX`].
pub fn compute_unit_limit_for(units: u64) -> u32 {
    let with_margin = units
        .saturating_mul(100 + COMPUTE_UNIT_MARGIN_PERCENT)
        .div_ceil(100)
        .saturating_add(COMPUTE_UNIT_MARGIN_UNITS);
    u32::try_from(with_margin.min(u64::from(COMPUTE_UNIT_LIMIT_MAX)))
        .unwrap_or(COMPUTE_UNIT_LIMIT_MAX)
}

/// Pack transfers into batches that each fit in one transaction.
///
/// `missing_atas` holds the recipient token accounts that do not exist yet
/// (their transfer gets a `CreateIdempotent` first, once per batch and wallet).
/// `new_attempt_id` names each batch. Transfers keep their order.
pub fn pack(
    params: &PackParams,
    tables: &LookupTables,
    transfers: &[Transfer],
    missing_atas: &HashSet<Pubkey>,
    new_attempt_id: &mut dyn FnMut() -> String,
) -> Vec<Batch> {
    let per_tx_max = params.transfers_per_tx_max.max(1);
    let source = params.treasury_token_account();
    let mut batches = Vec::new();
    let mut current = empty_batch(new_attempt_id());
    for transfer in transfers {
        let ata = get_associated_token_address(&transfer.wallet, &params.mint);
        let destination = (&ata, missing_atas.contains(&ata));
        if current.transfers.len() < per_tx_max {
            let candidate = with_transfer(params, &source, &current, transfer, destination);
            if let Some(candidate) = fit(params, tables, candidate) {
                current = candidate;
                continue;
            }
        }
        // Close the current batch; a single transfer always fits in a fresh one.
        let next = empty_batch(new_attempt_id());
        batches.push(std::mem::replace(&mut current, next));
        let candidate = with_transfer(params, &source, &current, transfer, destination);
        current = fit(params, tables, candidate).expect("one transfer fits in a transaction");
    }
    if !current.transfers.is_empty() {
        batches.push(current);
    }
    batches
}

fn empty_batch(attempt_id: String) -> Batch {
    Batch {
        attempt_id,
        transfers: Vec::new(),
        create_ata: Vec::new(),
        memo: String::new(),
        transfer_ixs: Vec::new(),
    }
}

/// A transfer's instructions: `CreateIdempotent` of the recipient's token account `ata`
/// first when `create`, then `TransferChecked` from the treasury's token account `source`.
fn transfer_instructions(
    params: &PackParams,
    source: &Pubkey,
    transfer: &Transfer,
    ata: &Pubkey,
    create: bool,
) -> Vec<Instruction> {
    let mut ixs = Vec::with_capacity(2);
    if create {
        ixs.push(create_associated_token_account_idempotent(
            &params.treasury,
            &transfer.wallet,
            &params.mint,
            &spl_token_interface::id(),
        ));
    }
    ixs.push(
        spl_token_interface::instruction::transfer_checked(
            &spl_token_interface::id(),
            source,
            &params.mint,
            ata,
            &params.treasury,
            &[],
            transfer.amount_micro_usdc,
            USDC_DECIMALS,
        )
        .expect("the SPL token program id is valid"),
    );
    ixs
}

/// `batch` with `transfer` to the token account `ata` (missing: `ata_missing`) added.
fn with_transfer(
    params: &PackParams,
    source: &Pubkey,
    batch: &Batch,
    transfer: &Transfer,
    (ata, ata_missing): (&Pubkey, bool),
) -> Batch {
    let mut next = batch.clone();
    // Create each missing ATA once per batch (later transfers to the same wallet reuse it).
    let already_created = batch
        .transfers
        .iter()
        .zip(&batch.create_ata)
        .any(|(t, c)| *c && t.wallet == transfer.wallet);
    let create = ata_missing && !already_created;
    next.transfers.push(transfer.clone());
    next.create_ata.push(create);
    next.transfer_ixs
        .push(transfer_instructions(params, source, transfer, ata, create));
    next
}

/// Give the batch the longest memo that fits; `None` when even the short memo does not,
/// or when the batch locks more than [`ACCOUNTS_PER_TX_MAX`] accounts or executes more
/// than [`INSTRUCTION_TRACE_MAX`] instructions.
fn fit(params: &PackParams, tables: &LookupTables, mut batch: Batch) -> Option<Batch> {
    if batch.trace_length() > INSTRUCTION_TRACE_MAX
        || batch.account_count(params) > ACCOUNTS_PER_TX_MAX
    {
        return None;
    }
    let root = statements_suffix(&batch.transfers);
    batch.memo = refs_memo(&params.memo_key, &batch.payout_ids()) + &root;
    if batch.serialized_size(params, tables) <= PACKET_DATA_SIZE {
        return Some(batch);
    }
    batch.memo = attempt_memo(&batch.attempt_id) + &root;
    (batch.serialized_size(params, tables) <= PACKET_DATA_SIZE).then_some(batch)
}
