//! A local, deterministic chain for tests and the demo: litesvm executing the
//! real SPL Token, Associated Token Account and Memo programs, wrapped in a
//! small model of what the exactly-once protocol depends on.
//!
//! # Model
//!
//! - **Blocks.** The chain has a block height (equal to its slot; no skipped slots).
//!   With `auto_advance` (the default), every [`Chain::send_transaction`] and every
//!   [`Chain::signature_statuses`] call first produces one new block, so time passes
//!   while a client polls. [`LocalChain::advance`] produces blocks explicitly.
//! - **Blockhashes.** Each block has its own blockhash; a transaction using it can land
//!   up to and including block height `blockhash height + blockhash_validity_blocks`
//!   (150 by default, as on mainnet). That height is what
//!   [`Chain::latest_blockhash`] returns as `last_valid_block_height`.
//! - **Landing.** A sent transaction is executed immediately, in the current block,
//!   unless a test hook drops or delays it. Included transactions (success or on-chain
//!   error, fee charged) are kept in the history forever; sending an already included
//!   transaction again is accepted and ignored, as a leader would deduplicate it.
//! - **Finality.** A transaction in block `h` is `confirmed` from height `h + 1` and
//!   `finalized` from height `h + finality_depth_blocks` (2 by default);
//!   `block_height(Finalized)` is `height - finality_depth_blocks`.
//! - **Status cache.** Without `search_history`, only transactions from the last 300
//!   blocks are reported, as on a real node.
//!
//! # Test hooks
//!
//! [`drop_next_sends`](LocalChain::drop_next_sends) (lost in flight),
//! [`blackhole_next_transactions`](LocalChain::blackhole_next_transactions) (a
//! transaction never lands, however often it is rebroadcast),
//! [`fail_next_sends_after_landing`](LocalChain::fail_next_sends_after_landing),
//! [`delay_next_transactions`](LocalChain::delay_next_transactions) (e.g. land in the
//! last valid block), [`fail_next_calls`](LocalChain::fail_next_calls) (RPC errors),
//! [`lag_status_node`](LocalChain::lag_status_node) (statuses from a node behind the tip),
//! [`freeze_token_account`](LocalChain::freeze_token_account) and
//! [`freeze_before_next_landing`](LocalChain::freeze_before_next_landing).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use litesvm::LiteSVM;
use solana_account::Account;
use solana_address_lookup_table_interface::state::AddressLookupTable;
use solana_instruction::Instruction;
use solana_message::Message;
use solana_message::VersionedMessage;
use solana_program_pack::Pack;
use solana_sdk::{clock::Clock, sysvar::clock::ID as CLOCK_ID};
use solana_sdk::{
    hash::{Hash, hashv},
    pubkey::Pubkey,
    signature::{Keypair, Signature, Signer},
};
use solana_slot_hashes::SlotHashes;
use solana_transaction::{Transaction, versioned::VersionedTransaction};
use solana_transaction_error::TransactionError;
use spl_associated_token_account_interface::{
    address::get_associated_token_address, instruction::create_associated_token_account_idempotent,
};
use spl_token_interface::state::{Account as TokenAccount, Mint};

use crate::chain::{
    Chain, ChainError, Confirmation, SigStatus, SignatureStatuses, Tip, TokenDelta, TxFailure,
    instruction_index_of,
};

/// Blocks a blockhash stays usable on mainnet.
pub const BLOCKHASH_VALIDITY_BLOCKS_DEFAULT: u64 = 150;
/// Blocks after which the local chain treats a block as finalized.
pub const FINALITY_DEPTH_BLOCKS_DEFAULT: u64 = 2;
/// Blocks a node keeps in its recent status cache (without history search).
pub const STATUS_CACHE_BLOCKS: u64 = 300;

/// Tunables of a [`LocalChain`].
#[derive(Debug, Clone)]
pub struct LocalChainConfig {
    /// Blocks a blockhash stays valid (`last_valid_block_height = height + this`).
    pub blockhash_validity_blocks: u64,
    /// Depth at which a block counts as finalized.
    pub finality_depth_blocks: u64,
    /// Produce one block on every send and every status poll.
    pub auto_advance: bool,
    /// The genesis hash the chain reports ([`local_genesis_hash`] by default). Tests set a
    /// public cluster's to model a node of that cluster.
    pub genesis_hash: Hash,
}

impl Default for LocalChainConfig {
    fn default() -> Self {
        Self {
            blockhash_validity_blocks: BLOCKHASH_VALIDITY_BLOCKS_DEFAULT,
            finality_depth_blocks: FINALITY_DEPTH_BLOCKS_DEFAULT,
            auto_advance: true,
            genesis_hash: local_genesis_hash(),
        }
    }
}

/// When a delayed transaction lands (see [`LocalChain::delay_next_transactions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delay {
    /// Land exactly in the last block in which its blockhash is still valid.
    LastValidBlock,
    /// Land this many blocks after it was first sent (never after its blockhash expired).
    Blocks(u64),
}

/// One token balance of an account touched by a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBalanceRecord {
    /// Index of the account in the transaction's account keys.
    pub account_index: u8,
    /// The token account.
    pub account: Pubkey,
    /// Its mint.
    pub mint: Pubkey,
    /// Its owner.
    pub owner: Pubkey,
    /// Balance in base units.
    pub amount: u64,
}

/// A transaction included in a block (successful or failed on chain).
#[derive(Debug, Clone)]
pub struct LandedTransaction {
    /// The transaction as executed (legacy or v0).
    pub transaction: VersionedTransaction,
    /// Its account keys as the runtime loaded them: the static keys, then the addresses
    /// loaded from lookup tables (writable, then read-only). Balances are indexed by it.
    pub account_keys: Vec<Pubkey>,
    /// How many of `account_keys` came from lookup tables as writable, then read-only.
    pub loaded_counts: (usize, usize),
    /// Slot (= block height) of its block.
    pub slot: u64,
    /// On-chain error, if it failed.
    pub err: Option<TransactionError>,
    /// Fee charged in lamports.
    pub fee: u64,
    /// Compute units consumed.
    pub compute_units_consumed: u64,
    /// Program logs.
    pub logs: Vec<String>,
    /// Lamports of every account key before execution.
    pub pre_balances: Vec<u64>,
    /// Lamports of every account key after execution.
    pub post_balances: Vec<u64>,
    /// Token balances before execution (accounts that were token accounts).
    pub pre_token_balances: Vec<TokenBalanceRecord>,
    /// Token balances after execution.
    pub post_token_balances: Vec<TokenBalanceRecord>,
}

/// Counters for tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalChainStats {
    /// `send_transaction` calls received.
    pub send_calls: u64,
    /// Transactions included in a block through `send_transaction`.
    pub landed: u64,
    /// Sends of a transaction that was already included (ignored).
    pub duplicate_sends: u64,
    /// Sends dropped by a hook.
    pub dropped_sends: u64,
    /// Simulations run.
    pub simulations: u64,
}

struct PendingTx {
    tx: VersionedTransaction,
    land_at_height: u64,
}

#[derive(Default)]
struct Hooks {
    drop_sends: u64,
    blackhole_budget: u64,
    blackholed: HashSet<Signature>,
    fail_after_landing: u64,
    delay: Option<(u64, Delay)>,
    fail_calls: u64,
    status_lag_blocks: u64,
    freeze_before_landing: Vec<(Pubkey, Pubkey)>,
}

struct Inner {
    svm: LiteSVM,
    config: LocalChainConfig,
    height: u64,
    blockhash: Hash,
    blockhashes: HashMap<Hash, u64>,
    history: HashMap<Signature, LandedTransaction>,
    pending: Vec<PendingTx>,
    hooks: Hooks,
    stats: LocalChainStats,
    authority: Keypair,
}

/// The local chain. Cheap to clone: clones share the same state.
#[derive(Clone)]
pub struct LocalChain {
    inner: Arc<Mutex<Inner>>,
}

impl Default for LocalChain {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for LocalChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("LocalChain")
            .field("height", &inner.height)
            .field("stats", &inner.stats)
            .finish_non_exhaustive()
    }
}

/// The local authority's SOL (100,000 of the million litesvm's airdrops draw from): it pays
/// the rent of every token account [`LocalChain::create_token_account`] creates (2,039,280
/// lamports each), so about 49 million of them; 1,000 SOL ran out after about 490,000.
const AUTHORITY_LAMPORTS: u64 = 100_000 * 1_000_000_000;

impl LocalChain {
    /// A chain with the default model (150-block blockhashes, finality after 2 blocks,
    /// auto-advance).
    pub fn new() -> Self {
        Self::with_config(LocalChainConfig::default())
    }

    /// A chain with the given model.
    pub fn with_config(config: LocalChainConfig) -> Self {
        // Signatures, blockhash age and duplicates are checked by this wrapper, which
        // models block heights that litesvm does not have.
        let mut svm = LiteSVM::new()
            .with_sigverify(false)
            .with_blockhash_check(false)
            .with_transaction_history(0);
        let authority = Keypair::new();
        svm.airdrop(&authority.pubkey(), AUTHORITY_LAMPORTS)
            .expect("airdrop to the local mint authority");
        let genesis = local_genesis_hash();
        let mut inner = Inner {
            svm,
            config,
            height: 1,
            blockhash: genesis,
            blockhashes: HashMap::new(),
            history: HashMap::new(),
            pending: Vec::new(),
            hooks: Hooks::default(),
            stats: LocalChainStats::default(),
            authority,
        };
        let validity = inner.config.blockhash_validity_blocks;
        inner.blockhashes.insert(genesis, inner.height + validity);
        inner.svm.warp_to_slot(inner.height);
        // A cluster one connects to has a finalized history: produce the blocks that make
        // its first block final (and a recent slot for a lookup table's creation).
        for _ in 0..inner.config.finality_depth_blocks.max(1) {
            inner.next_block();
        }
        Self {
            inner: Arc::new(Mutex::new(inner)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock only happens in a failing test; keep going.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    // ----- time -------------------------------------------------------------------

    /// Produce `blocks` new blocks (landing delayed transactions that are due).
    pub fn advance(&self, blocks: u64) {
        let mut inner = self.lock();
        for _ in 0..blocks {
            inner.next_block();
        }
    }

    /// Turn automatic block production on sends and polls on or off.
    pub fn set_auto_advance(&self, on: bool) {
        self.lock().config.auto_advance = on;
    }

    /// Current block height (= slot).
    pub fn height(&self) -> u64 {
        self.lock().height
    }

    // ----- hooks ------------------------------------------------------------------

    /// The next `n` `send_transaction` calls are lost in flight (they return `Ok`).
    /// A later rebroadcast of the same transaction can still land.
    pub fn drop_next_sends(&self, n: u64) {
        self.lock().hooks.drop_sends += n;
    }

    /// The next `n` distinct transactions sent never land: every send of them,
    /// including rebroadcasts, is lost.
    pub fn blackhole_next_transactions(&self, n: u64) {
        self.lock().hooks.blackhole_budget += n;
    }

    /// The next `n` sends execute the transaction, then return an RPC error.
    pub fn fail_next_sends_after_landing(&self, n: u64) {
        self.lock().hooks.fail_after_landing += n;
    }

    /// The next `n` distinct transactions sent are held back and land later.
    pub fn delay_next_transactions(&self, n: u64, delay: Delay) {
        self.lock().hooks.delay = Some((n, delay));
    }

    /// The next `n` [`Chain`] calls of any kind fail with an RPC error before doing anything.
    pub fn fail_next_calls(&self, n: u64) {
        self.lock().hooks.fail_calls += n;
    }

    /// Signature statuses come from a node `blocks` behind the tip (as behind a load
    /// balancer): it reports `context_slot = height - blocks` and does not know
    /// transactions of the last `blocks` blocks. Other calls see the tip.
    pub fn lag_status_node(&self, blocks: u64) {
        self.lock().hooks.status_lag_blocks = blocks;
    }

    /// Freeze `owner`'s associated token account of `mint` just before the next
    /// transaction lands (after it was simulated), to produce an on-chain failure.
    pub fn freeze_before_next_landing(&self, mint: &Pubkey, owner: &Pubkey) {
        self.lock()
            .hooks
            .freeze_before_landing
            .push((*mint, *owner));
    }

    /// Disarm [`fail_next_calls`](Self::fail_next_calls) only.
    pub fn clear_call_failures(&self) {
        self.lock().hooks.fail_calls = 0;
    }

    /// Disarm every hook (a blackholed transaction may then land when rebroadcast).
    pub fn reset_hooks(&self) {
        self.lock().hooks = Hooks::default();
    }

    /// Counters.
    pub fn stats(&self) -> LocalChainStats {
        self.lock().stats.clone()
    }

    /// A landed transaction from the history.
    pub fn landed_transaction(&self, signature: &Signature) -> Option<LandedTransaction> {
        self.lock().history.get(signature).cloned()
    }

    /// Signatures of all transactions included through `send_transaction`, in no order.
    pub fn landed_signatures(&self) -> Vec<Signature> {
        self.lock().history.keys().copied().collect()
    }

    // ----- helpers for tests and the demo ------------------------------------------

    /// Create a USDC-like mint (6 decimals). The chain holds its mint and freeze authority.
    pub fn create_usdc_mint(&self) -> Pubkey {
        self.create_mint(6)
    }

    /// Create a mint with the given decimals through the real token program.
    pub fn create_mint(&self, decimals: u8) -> Pubkey {
        let mut inner = self.lock();
        let mint = Keypair::new().pubkey();
        let lamports = inner.svm.minimum_balance_for_rent_exemption(Mint::LEN);
        inner
            .svm
            .set_account(
                mint,
                Account {
                    lamports,
                    data: vec![0; Mint::LEN],
                    owner: spl_token_interface::id(),
                    executable: false,
                    rent_epoch: 0,
                },
            )
            .expect("mint account");
        let authority = inner.authority.pubkey();
        let ix = spl_token_interface::instruction::initialize_mint2(
            &spl_token_interface::id(),
            &mint,
            &authority,
            Some(&authority),
            decimals,
        )
        .expect("initialize_mint2 instruction");
        inner.admin_execute(&[ix]);
        mint
    }

    /// Give `to` lamports.
    pub fn airdrop_sol(&self, to: &Pubkey, lamports: u64) {
        let mut inner = self.lock();
        inner.svm.airdrop(to, lamports).expect("airdrop");
    }

    /// Create `owner`'s associated token account of `mint` (if missing) and return its address.
    pub fn create_token_account(&self, mint: &Pubkey, owner: &Pubkey) -> Pubkey {
        let mut inner = self.lock();
        let payer = inner.authority.pubkey();
        let ix = create_associated_token_account_idempotent(
            &payer,
            owner,
            mint,
            &spl_token_interface::id(),
        );
        inner.admin_execute(&[ix]);
        get_associated_token_address(owner, mint)
    }

    /// Mint `amount` base units to `owner`'s associated token account (created if missing).
    pub fn mint_to(&self, mint: &Pubkey, owner: &Pubkey, amount: u64) {
        let ata = self.create_token_account(mint, owner);
        let mut inner = self.lock();
        let authority = inner.authority.pubkey();
        let ix = spl_token_interface::instruction::mint_to(
            &spl_token_interface::id(),
            mint,
            &ata,
            &authority,
            &[],
            amount,
        )
        .expect("mint_to instruction");
        inner.admin_execute(&[ix]);
    }

    /// Write an initialized SPL token account of `mint` owned by `token_owner` holding
    /// `amount` at `address` (replacing whatever is there), owned by the real token
    /// program. Models what the real programs allow: an associated token account whose
    /// owner was changed by `SetAuthority(AccountOwner)`; or, with another mint, an
    /// account the token program would reject.
    pub fn plant_token_account(
        &self,
        address: &Pubkey,
        mint: &Pubkey,
        token_owner: &Pubkey,
        amount: u64,
    ) {
        let mut inner = self.lock();
        let state = TokenAccount {
            mint: *mint,
            owner: *token_owner,
            amount,
            state: spl_token_interface::state::AccountState::Initialized,
            ..TokenAccount::default()
        };
        let mut data = vec![0; TokenAccount::LEN];
        TokenAccount::pack(state, &mut data).expect("token account packs");
        let lamports = inner
            .svm
            .minimum_balance_for_rent_exemption(TokenAccount::LEN);
        inner
            .svm
            .set_account(
                *address,
                Account {
                    lamports,
                    data,
                    owner: spl_token_interface::id(),
                    executable: false,
                    rent_epoch: 0,
                },
            )
            .expect("planted token account");
    }

    /// Freeze `owner`'s associated token account of `mint` now.
    pub fn freeze_token_account(&self, mint: &Pubkey, owner: &Pubkey) {
        self.lock().freeze(mint, owner);
    }

    /// Balance of `owner`'s associated token account of `mint` (0 when missing).
    pub fn token_balance_of(&self, mint: &Pubkey, owner: &Pubkey) -> u64 {
        let inner = self.lock();
        let ata = get_associated_token_address(owner, mint);
        inner
            .svm
            .get_account(&ata)
            .and_then(|a| TokenAccount::unpack(&a.data).ok())
            .map(|a| a.amount)
            .unwrap_or(0)
    }

    /// Lamports of an account (0 when missing).
    pub fn lamports_of(&self, key: &Pubkey) -> u64 {
        self.lock().svm.get_balance(key).unwrap_or(0)
    }

    /// Statuses as seen at the current height, without producing a block.
    pub fn status_of(&self, signature: &Signature) -> Option<SigStatus> {
        self.lock().status(signature, true)
    }

    /// Run `f` with read access to the account database (for the RPC server).
    pub(crate) fn with_inner<R>(&self, f: impl FnOnce(&mut InnerView<'_>) -> R) -> R {
        let mut inner = self.lock();
        let mut view = InnerView { inner: &mut inner };
        f(&mut view)
    }
}

/// A status with the structured error, for the JSON-RPC server.
pub(crate) struct RawStatus {
    pub(crate) slot: u64,
    pub(crate) confirmation: Confirmation,
    /// Blocks on top of the transaction's block; `None` once finalized (rooted).
    pub(crate) confirmations: Option<usize>,
    pub(crate) err: Option<TransactionError>,
}

/// A simulation with the structured error, for the JSON-RPC server.
pub(crate) struct RawSimulation {
    pub(crate) units_consumed: u64,
    pub(crate) logs: Vec<String>,
    pub(crate) fee: u64,
    pub(crate) err: Option<TransactionError>,
}

impl LocalChain {
    /// Like [`Chain::signature_statuses`] but with structured errors.
    pub(crate) fn statuses_raw(
        &self,
        signatures: &[Signature],
        search_history: bool,
    ) -> Result<(u64, Vec<Option<RawStatus>>), ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        inner.tick();
        let context_slot = inner.status_node_slot();
        let statuses = signatures
            .iter()
            .map(|s| {
                let status = inner.status(s, search_history)?;
                let landed = inner.history.get(s)?;
                Some(RawStatus {
                    slot: status.slot,
                    confirmation: status.confirmation,
                    confirmations: match status.confirmation {
                        Confirmation::Finalized => None,
                        _ => Some((inner.height - status.slot) as usize),
                    },
                    err: landed.err.clone(),
                })
            })
            .collect();
        Ok((context_slot, statuses))
    }

    /// Like [`Chain::simulate_units`] but with structured errors and logs.
    pub(crate) fn simulate_raw(
        &self,
        tx: &VersionedTransaction,
    ) -> Result<RawSimulation, ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        inner.stats.simulations += 1;
        if !inner.blockhash_usable(tx.message.recent_blockhash()) {
            return Ok(RawSimulation {
                units_consumed: 0,
                logs: Vec::new(),
                fee: 0,
                err: Some(TransactionError::BlockhashNotFound),
            });
        }
        Ok(match inner.svm.simulate_transaction(tx.clone()) {
            Ok(info) => RawSimulation {
                units_consumed: info.meta.compute_units_consumed,
                logs: info.meta.logs,
                fee: info.meta.fee,
                err: None,
            },
            Err(failed) => RawSimulation {
                units_consumed: failed.meta.compute_units_consumed,
                logs: failed.meta.logs,
                fee: failed.meta.fee,
                err: Some(failed.err),
            },
        })
    }

    /// Fail the call if a `fail_next_calls` hook is armed (for server-only methods).
    pub(crate) fn injected_failure(&self) -> Result<(), ChainError> {
        self.lock().take_injected_failure()
    }
}

/// Borrowed access to the chain state used by the JSON-RPC server.
pub(crate) struct InnerView<'a> {
    inner: &'a mut Inner,
}

impl InnerView<'_> {
    pub(crate) fn genesis_hash(&self) -> Hash {
        self.inner.config.genesis_hash
    }
    pub(crate) fn landed(&self, signature: &Signature) -> Option<&LandedTransaction> {
        self.inner.history.get(signature)
    }
    pub(crate) fn account(&self, key: &Pubkey) -> Option<Account> {
        self.inner.svm.get_account(key)
    }
    pub(crate) fn blockhash_valid(&self, blockhash: &Hash) -> bool {
        self.inner.blockhash_usable(blockhash)
    }
    pub(crate) fn confirmation_of(&self, slot: u64) -> (Confirmation, Option<usize>) {
        let confirmation = self.inner.confirmation_of(slot);
        let confirmations = match confirmation {
            Confirmation::Finalized => None,
            _ => Some((self.inner.height - slot) as usize),
        };
        (confirmation, confirmations)
    }
}

impl Inner {
    fn next_block(&mut self) {
        let parent = self.blockhash;
        self.height += 1;
        self.blockhash = hashv(&[self.blockhash.as_ref(), &self.height.to_le_bytes()]);
        let last_valid = self.height + self.config.blockhash_validity_blocks;
        self.blockhashes.insert(self.blockhash, last_valid);
        // Forget blockhashes that expired long ago.
        let height = self.height;
        self.blockhashes
            .retain(|_, last_valid| *last_valid + STATUS_CACHE_BLOCKS >= height);
        self.set_block_sysvars(parent);
        self.land_due_pending();
    }

    /// Sets the sysvars of the current block: the `Clock` at its slot, and its parent
    /// (`parent`, the block before) as a recent slot in `SlotHashes`, which a lookup
    /// table's creation names.
    ///
    /// litesvm 0.12.0 (the pinned version) copies its whole account map whenever the clock
    /// is written through `set_sysvar` or `warp_to_slot` (fixed upstream by litesvm pull
    /// request 391, in releases built on a later Solana set): 2 ms a block at 100,000
    /// accounts, and at 1.5 million the copy took most of a million-payout pass
    /// (measured in `ops/bench/solana.md`). So the clock's account is stored as it is, and the
    /// `SlotHashes` write after it refreshes the runtime's sysvar cache, which programs
    /// read: litesvm's hook for every sysvar but the clock re-reads all of them from the
    /// stored accounts without copying them. The order is what makes programs see this
    /// block's clock. The program cache keeps the slot of the chain's first block: that
    /// slot only delays programs deployed later, and this chain deploys none after its
    /// genesis.
    fn set_block_sysvars(&mut self, parent: Hash) {
        let mut account = self
            .svm
            .get_account(&CLOCK_ID)
            .expect("the clock sysvar exists from genesis");
        let mut clock: Clock = bincode::deserialize(&account.data).expect("the clock's layout");
        clock.slot = self.height;
        account.data = bincode::serialize(&clock).expect("a clock serializes");
        self.svm.set_account_no_checks(CLOCK_ID, account.into());
        let mut recent = self.svm.get_sysvar::<SlotHashes>();
        recent.add(self.height - 1, parent);
        self.svm.set_sysvar(&recent);
    }

    fn tick(&mut self) {
        if self.config.auto_advance {
            self.next_block();
        }
    }

    fn take_injected_failure(&mut self) -> Result<(), ChainError> {
        if self.hooks.fail_calls > 0 {
            self.hooks.fail_calls -= 1;
            return Err(ChainError::Rpc("injected RPC failure".into()));
        }
        Ok(())
    }

    fn finalized_height(&self) -> u64 {
        self.height
            .saturating_sub(self.config.finality_depth_blocks)
    }

    fn confirmation_of(&self, slot: u64) -> Confirmation {
        if slot <= self.finalized_height() {
            Confirmation::Finalized
        } else if slot < self.height {
            Confirmation::Confirmed
        } else {
            Confirmation::Processed
        }
    }

    /// Slot the (possibly lagging) status node has reached.
    fn status_node_slot(&self) -> u64 {
        self.height.saturating_sub(self.hooks.status_lag_blocks)
    }

    fn status(&self, signature: &Signature, search_history: bool) -> Option<SigStatus> {
        let landed = self.history.get(signature)?;
        if landed.slot > self.status_node_slot() {
            return None;
        }
        if !search_history && landed.slot + STATUS_CACHE_BLOCKS < self.height {
            return None;
        }
        Some(SigStatus {
            slot: landed.slot,
            confirmation: self.confirmation_of(landed.slot),
            err: landed.err.as_ref().map(ToString::to_string),
        })
    }

    /// Last valid block height of a blockhash, if the chain knows it.
    fn last_valid_height(&self, blockhash: &Hash) -> Option<u64> {
        self.blockhashes.get(blockhash).copied()
    }

    fn blockhash_usable(&self, blockhash: &Hash) -> bool {
        self.last_valid_height(blockhash)
            .is_some_and(|last_valid| self.height <= last_valid)
    }

    fn land_due_pending(&mut self) {
        let height = self.height;
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.land_at_height <= height);
        self.pending = waiting;
        for pending in due {
            // A transaction whose blockhash expired is silently dropped, as on a real cluster.
            let _ = self.execute(&pending.tx);
        }
    }

    fn token_balances(&self, keys: &[Pubkey]) -> Vec<TokenBalanceRecord> {
        keys.iter()
            .enumerate()
            .filter_map(|(index, key)| {
                let account = self.svm.get_account(key)?;
                if account.owner != spl_token_interface::id()
                    || account.data.len() != TokenAccount::LEN
                {
                    return None;
                }
                let token = TokenAccount::unpack(&account.data).ok()?;
                Some(TokenBalanceRecord {
                    account_index: u8::try_from(index).ok()?,
                    account: *key,
                    mint: token.mint,
                    owner: token.owner,
                    amount: token.amount,
                })
            })
            .collect()
    }

    /// Execute a transaction in the current block if its blockhash is usable and it
    /// was not included before. Returns `Ok(true)` when included now.
    fn execute(&mut self, tx: &VersionedTransaction) -> Result<bool, ChainError> {
        let signature = tx.signatures[0];
        if self.history.contains_key(&signature) {
            self.stats.duplicate_sends += 1;
            return Ok(false);
        }
        if !self.blockhash_usable(tx.message.recent_blockhash()) {
            // Not includable: a real leader drops it.
            return Ok(false);
        }
        let freezes = std::mem::take(&mut self.hooks.freeze_before_landing);
        for (mint, owner) in freezes {
            self.freeze(&mint, &owner);
        }
        let (keys, loaded_counts) = self.loaded_keys(&tx.message);
        let pre_balances: Vec<u64> = keys
            .iter()
            .map(|k| self.svm.get_balance(k).unwrap_or(0))
            .collect();
        let pre_token_balances = self.token_balances(&keys);
        let result = self.svm.send_transaction(tx.clone());
        let (err, meta) = match result {
            Ok(meta) => (None, meta),
            Err(failed) => {
                // Included (fee charged) only when the fee payer was debited.
                let payer_after = self.svm.get_balance(&keys[0]).unwrap_or(0);
                let included = payer_after != pre_balances.first().copied().unwrap_or(0);
                if !included {
                    return Ok(false);
                }
                (Some(failed.err), failed.meta)
            }
        };
        let post_balances: Vec<u64> = keys
            .iter()
            .map(|k| self.svm.get_balance(k).unwrap_or(0))
            .collect();
        let post_token_balances = self.token_balances(&keys);
        self.history.insert(
            signature,
            LandedTransaction {
                transaction: tx.clone(),
                account_keys: keys,
                loaded_counts,
                slot: self.height,
                err,
                fee: meta.fee,
                compute_units_consumed: meta.compute_units_consumed,
                logs: meta.logs,
                pre_balances,
                post_balances,
                pre_token_balances,
                post_token_balances,
            },
        );
        self.stats.landed += 1;
        Ok(true)
    }

    /// The keys a message loads: its static keys, then each lookup's writable addresses,
    /// then each lookup's read-only ones (the runtime's order). A lookup the chain cannot
    /// resolve loads nothing here; the runtime refuses the transaction itself.
    fn loaded_keys(&self, message: &VersionedMessage) -> (Vec<Pubkey>, (usize, usize)) {
        let mut keys = message.static_account_keys().to_vec();
        let lookups = message.address_table_lookups().unwrap_or_default();
        let resolve = |table: &Pubkey, indexes: &[u8]| -> Vec<Pubkey> {
            let Some(account) = self.svm.get_account(table) else {
                return Vec::new();
            };
            let Ok(table) = AddressLookupTable::deserialize(&account.data) else {
                return Vec::new();
            };
            indexes
                .iter()
                .filter_map(|i| table.addresses.get(usize::from(*i)).copied())
                .collect()
        };
        let writable: Vec<Pubkey> = lookups
            .iter()
            .flat_map(|l| resolve(&l.account_key, &l.writable_indexes))
            .collect();
        let readonly: Vec<Pubkey> = lookups
            .iter()
            .flat_map(|l| resolve(&l.account_key, &l.readonly_indexes))
            .collect();
        let counts = (writable.len(), readonly.len());
        keys.extend(writable);
        keys.extend(readonly);
        (keys, counts)
    }

    /// Execute an administrative transaction (test setup) signed by the authority.
    fn admin_execute(&mut self, instructions: &[Instruction]) {
        let payer = self.authority.pubkey();
        let message = Message::new_with_blockhash(instructions, Some(&payer), &self.blockhash);
        let mut tx = Transaction::new_unsigned(message);
        tx.sign(&[&self.authority], self.blockhash);
        if let Err(failed) = self.svm.send_transaction(tx) {
            panic!(
                "local chain setup transaction failed: {} {:?}",
                failed.err, failed.meta.logs
            );
        }
    }

    fn freeze(&mut self, mint: &Pubkey, owner: &Pubkey) {
        let ata = get_associated_token_address(owner, mint);
        let authority = self.authority.pubkey();
        let ix = spl_token_interface::instruction::freeze_account(
            &spl_token_interface::id(),
            &ata,
            mint,
            &authority,
            &[],
        )
        .expect("freeze_account instruction");
        self.admin_execute(&[ix]);
    }

    fn send(&mut self, tx: &VersionedTransaction) -> Result<Signature, ChainError> {
        self.stats.send_calls += 1;
        let signature = *tx
            .signatures
            .first()
            .ok_or_else(|| ChainError::Rpc("transaction has no signature".into()))?;
        let signed = tx.verify_with_results();
        let required = usize::from(tx.message.header().num_required_signatures);
        if signed.len() != required || signed.iter().any(|ok| !ok) {
            return Err(ChainError::Transaction(TxFailure {
                message: "signature verification failed".into(),
                instruction_index: None,
            }));
        }
        if self.hooks.drop_sends > 0 {
            self.hooks.drop_sends -= 1;
            self.stats.dropped_sends += 1;
            return Ok(signature);
        }
        let known = self.history.contains_key(&signature)
            || self.pending.iter().any(|p| p.tx.signatures[0] == signature);
        if !known && self.hooks.blackhole_budget > 0 && !self.hooks.blackholed.contains(&signature)
        {
            self.hooks.blackhole_budget -= 1;
            self.hooks.blackholed.insert(signature);
        }
        if self.hooks.blackholed.contains(&signature) {
            self.stats.dropped_sends += 1;
            return Ok(signature);
        }
        if self.pending.iter().any(|p| p.tx.signatures[0] == signature) {
            self.stats.duplicate_sends += 1;
            return Ok(signature);
        }
        if !known && let Some((remaining, delay)) = self.hooks.delay {
            self.hooks.delay = (remaining > 1).then_some((remaining - 1, delay));
            let last_valid = self
                .last_valid_height(tx.message.recent_blockhash())
                .unwrap_or(self.height);
            let land_at_height = match delay {
                Delay::LastValidBlock => last_valid,
                Delay::Blocks(blocks) => (self.height + blocks).min(last_valid),
            };
            self.pending.push(PendingTx {
                tx: tx.clone(),
                land_at_height,
            });
            return Ok(signature);
        }
        self.execute(tx)?;
        if self.hooks.fail_after_landing > 0 {
            self.hooks.fail_after_landing -= 1;
            return Err(ChainError::Rpc(
                "injected: connection reset after the transaction was forwarded".into(),
            ));
        }
        Ok(signature)
    }
}

#[async_trait]
impl Chain for LocalChain {
    async fn latest_blockhash(&self) -> Result<(Hash, u64), ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        let last_valid = inner
            .last_valid_height(&inner.blockhash)
            .unwrap_or(inner.height);
        Ok((inner.blockhash, last_valid))
    }

    async fn block_height(&self, commitment: Confirmation) -> Result<u64, ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        Ok(match commitment {
            Confirmation::Finalized => inner.finalized_height(),
            Confirmation::Confirmed => inner.height.saturating_sub(1),
            Confirmation::Processed => inner.height,
        })
    }

    async fn tip(&self, commitment: Confirmation) -> Result<Tip, ChainError> {
        // Slot and block height coincide on the local chain.
        let height = self.block_height(commitment).await?;
        Ok(Tip {
            slot: height,
            block_height: height,
        })
    }

    async fn send_transaction(&self, tx: &VersionedTransaction) -> Result<Signature, ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        inner.tick();
        inner.send(tx)
    }

    async fn simulate_units(&self, tx: &VersionedTransaction) -> Result<u64, ChainError> {
        let simulation = self.simulate_raw(tx)?;
        match simulation.err {
            None => Ok(simulation.units_consumed),
            Some(err) => Err(ChainError::Transaction(TxFailure {
                message: err.to_string(),
                instruction_index: instruction_index_of(&err),
            })),
        }
    }

    async fn signature_statuses(
        &self,
        signatures: &[Signature],
        search_history: bool,
    ) -> Result<SignatureStatuses, ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        inner.tick();
        Ok(SignatureStatuses {
            context_slot: inner.status_node_slot(),
            statuses: signatures
                .iter()
                .map(|s| inner.status(s, search_history))
                .collect(),
        })
    }

    async fn accounts(&self, keys: &[Pubkey]) -> Result<Vec<Option<Account>>, ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        Ok(keys.iter().map(|k| inner.svm.get_account(k)).collect())
    }

    async fn token_balance(&self, token_account: &Pubkey) -> Result<Option<u64>, ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        match inner.svm.get_account(token_account) {
            None => Ok(None),
            Some(account) => TokenAccount::unpack(&account.data)
                .map(|t| Some(t.amount))
                .map_err(|e| ChainError::Rpc(format!("not a token account: {e}"))),
        }
    }

    async fn sol_balance(&self, key: &Pubkey) -> Result<u64, ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        Ok(inner.svm.get_balance(key).unwrap_or(0))
    }

    async fn transaction_token_deltas(
        &self,
        signature: &Signature,
    ) -> Result<Option<Vec<TokenDelta>>, ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        Ok(inner
            .history
            .get(signature)
            .map(|landed| token_deltas(&landed.pre_token_balances, &landed.post_token_balances)))
    }

    async fn minimum_balance_for_rent_exemption(&self, data_len: usize) -> Result<u64, ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        Ok(inner.svm.minimum_balance_for_rent_exemption(data_len))
    }

    async fn genesis_hash(&self) -> Result<Hash, ChainError> {
        let mut inner = self.lock();
        inner.take_injected_failure()?;
        Ok(inner.config.genesis_hash)
    }
}

/// The default genesis hash of a [`LocalChain`] (no public cluster's).
pub fn local_genesis_hash() -> Hash {
    hashv(&[b"settle-local-genesis"])
}

/// Per-account `post - pre` token balances (an account missing before counts as 0).
pub(crate) fn token_deltas(
    pre: &[TokenBalanceRecord],
    post: &[TokenBalanceRecord],
) -> Vec<TokenDelta> {
    let mut deltas: Vec<TokenDelta> = Vec::new();
    let mut seen = HashSet::new();
    for p in post {
        seen.insert(p.account_index);
        let before = pre
            .iter()
            .find(|q| q.account_index == p.account_index)
            .map_or(0, |q| q.amount);
        deltas.push(TokenDelta {
            owner: p.owner,
            mint: p.mint,
            delta: i128::from(p.amount) - i128::from(before),
        });
    }
    for q in pre.iter().filter(|q| !seen.contains(&q.account_index)) {
        deltas.push(TokenDelta {
            owner: q.owner,
            mint: q.mint,
            delta: -i128::from(q.amount),
        });
    }
    deltas
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slot a program reads as the current one: the runtime's sysvar cache.
    fn runtime_slot(chain: &LocalChain) -> u64 {
        chain
            .lock()
            .svm
            .accounts_db()
            .sysvar_cache
            .get_clock()
            .expect("the runtime has a clock")
            .slot
    }

    #[test]
    fn programs_read_the_slot_of_the_current_block() {
        let chain = LocalChain::new();
        assert_eq!(runtime_slot(&chain), chain.height());
        chain.advance(5);
        let height = chain.height();
        assert_eq!(runtime_slot(&chain), height);
        assert_eq!(chain.lock().svm.get_sysvar::<Clock>().slot, height);
        // The block before is a recent slot, as a lookup table's creation needs.
        let recent = chain.lock().svm.get_sysvar::<SlotHashes>();
        assert!(recent.get(&(height - 1)).is_some());
    }
}
