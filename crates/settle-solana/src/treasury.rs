//! The treasury keypair (loaded safely, never printed) and the memo key derived from
//! it, the USDC mint check, the recipients' token account check and the preflight check
//! that a whole run is covered before anything is sent.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use solana_account::Account;
use solana_program_pack::Pack;
use solana_sdk::{
    pubkey::Pubkey,
    signature::{Keypair, Signer},
};
use spl_associated_token_account_interface::address::get_associated_token_address;
use spl_token_interface::state::{Account as TokenAccount, Mint};

use crate::chain::{Chain, ChainError};
use crate::lookup::{LookupTables, TableGrowth};
use crate::pack::{
    COMPUTE_UNIT_LIMIT_MAX, MemoKey, PackParams, TOKEN_ACCOUNT_LEN, Transfer, USDC_DECIMALS, pack,
};

/// The system program (owner of plain wallets and of lamports sent to a fresh address).
const SYSTEM_PROGRAM_ID: Pubkey = Pubkey::from_str_const("11111111111111111111111111111111");

/// The info string of the memo key's derivation (see [`Treasury::memo_key`]).
pub const MEMO_KEY_INFO: &[u8] = b"settle/solana/memo-key/v1";

/// Base fee per signature in lamports (one signature per payout transaction).
pub const LAMPORTS_PER_SIGNATURE: u64 = 5_000;

/// The treasury wallet. Holds the secret key; its `Debug` shows only the public key.
pub struct Treasury {
    keypair: Keypair,
    memo_key: MemoKey,
}

impl std::fmt::Debug for Treasury {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Treasury")
            .field("pubkey", &self.keypair.pubkey())
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Why the treasury keypair file was refused.
#[derive(Debug, thiserror::Error)]
pub enum TreasuryError {
    /// The file could not be read.
    #[error("cannot read treasury keypair file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Group or others may read or write the file.
    #[error(
        "treasury keypair file {path} has mode {mode:04o}: group/others must have no access \
         (run `chmod 600 {path}`)"
    )]
    InsecurePermissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Core dumps could not be disabled, so the key is not read into this process.
    #[error("cannot disable core dumps before loading the treasury keypair: {source}")]
    CoreDumps {
        /// The cause.
        source: std::io::Error,
    },
    /// Not a solana-keygen JSON array of 64 bytes forming a valid keypair.
    #[error("treasury keypair file {path} is not a valid keypair: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong (never contains key material).
        reason: String,
    },
}

impl Treasury {
    /// Load a solana-keygen keypair file (JSON array of 64 bytes).
    ///
    /// Refuses a file that group or others can read or write (`mode & 0o077 != 0`).
    ///
    /// Before the secret is read, the process is made non-dumpable for good
    /// ([`forbid_core_dumps`]): a crash of a process holding the treasury key never
    /// writes the key into a core file. If that fails the key is not read.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, TreasuryError> {
        let path = path.as_ref();
        let io_err = |source| TreasuryError::Io {
            path: path.to_path_buf(),
            source,
        };
        let metadata = std::fs::metadata(path).map_err(io_err)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(TreasuryError::InsecurePermissions {
                    path: path.to_path_buf(),
                    mode,
                });
            }
        }
        #[cfg(not(unix))]
        let _ = metadata;
        forbid_core_dumps().map_err(|source| TreasuryError::CoreDumps { source })?;
        let mut text = std::fs::read_to_string(path).map_err(io_err)?;
        let invalid = |reason: &str| TreasuryError::Invalid {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        };
        let parsed: Result<Vec<u8>, _> = serde_json::from_str(&text);
        wipe_string(&mut text);
        let mut bytes = parsed.map_err(|_| invalid("expected a JSON array of 64 bytes"))?;
        if bytes.len() != 64 {
            wipe(&mut bytes);
            return Err(invalid("expected 64 bytes"));
        }
        let keypair = Keypair::try_from(bytes.as_slice());
        wipe(&mut bytes);
        let keypair =
            keypair.map_err(|_| invalid("the public half does not match the secret half"))?;
        Ok(Self::from_keypair(keypair))
    }

    /// Wrap an existing keypair (tests, demo).
    pub fn from_keypair(keypair: Keypair) -> Self {
        let memo_key = derive_memo_key(&keypair);
        Self { keypair, memo_key }
    }

    /// The key of the payouts' memo references ([`crate::pack::memo_ref`]), derived from
    /// the treasury's secret: `HKDF-Expand(PRK = the 32-byte ed25519 seed,
    /// info = "settle/solana/memo-key/v1", L = 32)`, i.e.
    /// `HMAC-SHA256(seed, info || 0x01)` (RFC 5869; the extract step is skipped because
    /// the seed is already uniformly random). No new secret to manage: whoever can compute
    /// references already holds the key that moves the money, and the domain separator
    /// keeps the derived key independent of the signing key.
    pub fn memo_key(&self) -> MemoKey {
        self.memo_key
    }

    /// The treasury wallet address.
    pub fn pubkey(&self) -> Pubkey {
        self.keypair.pubkey()
    }

    /// The treasury's associated token account of `mint`.
    pub fn token_account(&self, mint: &Pubkey) -> Pubkey {
        get_associated_token_address(&self.pubkey(), mint)
    }

    pub(crate) fn keypair(&self) -> &Keypair {
        &self.keypair
    }
}

fn derive_memo_key(keypair: &Keypair) -> MemoKey {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(keypair.secret_bytes())
        .expect("HMAC accepts a key of any length");
    mac.update(MEMO_KEY_INFO);
    mac.update(&[1]);
    MemoKey::from_bytes(mac.finalize().into_bytes().into())
}

/// Makes this process non-dumpable for the rest of its life, so that no core file (or
/// ptrace-based dump by an unprivileged user) can carry the treasury key: on Unix the
/// core file size limit, soft and hard, becomes 0 (an unprivileged process cannot raise
/// it again); on Linux the process is also marked non-dumpable
/// (`prctl(PR_SET_DUMPABLE, 0)`), which stops core dumps even if the limit is raised
/// from outside (`prlimit`) and makes `/proc/<pid>/` files root-owned. Idempotent; logs
/// once that core dumps are disabled. Called by [`Treasury::load`] before the key is read.
pub fn forbid_core_dumps() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let zero = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: setrlimit reads the struct we pass and touches no other memory.
        if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_DUMPABLE takes plain integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    static LOGGED: std::sync::Once = std::sync::Once::new();
    LOGGED.call_once(|| {
        tracing::info!(
            "core dumps disabled (RLIMIT_CORE 0, not dumpable): this process holds the treasury key"
        );
    });
    Ok(())
}

/// Best-effort overwrite of secret material before it is freed.
fn wipe(bytes: &mut [u8]) {
    bytes.fill(0);
    std::hint::black_box(bytes);
}

fn wipe_string(text: &mut String) {
    let len = text.len();
    text.clear();
    text.extend(std::iter::repeat_n('0', len));
    std::hint::black_box(text);
}

/// Why the mint is not acceptable as USDC.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    /// No such account.
    #[error("mint {0} does not exist")]
    Missing(Pubkey),
    /// Not owned by the SPL Token program.
    #[error("mint {mint} is owned by {owner}, not the SPL Token program")]
    WrongOwner {
        /// The mint.
        mint: Pubkey,
        /// Its owner program.
        owner: Pubkey,
    },
    /// Not an initialized mint.
    #[error("account {0} is not an initialized SPL mint")]
    NotAMint(Pubkey),
    /// Decimals other than 6.
    #[error("mint {mint} has {decimals} decimals, USDC has 6")]
    WrongDecimals {
        /// The mint.
        mint: Pubkey,
        /// Its decimals.
        decimals: u8,
    },
    /// The chain could not be asked.
    #[error(transparent)]
    Chain(#[from] ChainError),
}

/// Check that `mint` is an SPL Token mint with 6 decimals.
pub async fn check_mint(chain: &dyn Chain, mint: &Pubkey) -> Result<(), MintError> {
    let account = chain
        .account(mint)
        .await?
        .ok_or(MintError::Missing(*mint))?;
    if account.owner != spl_token_interface::id() {
        return Err(MintError::WrongOwner {
            mint: *mint,
            owner: account.owner,
        });
    }
    let state = Mint::unpack(&account.data).map_err(|_| MintError::NotAMint(*mint))?;
    if state.decimals != USDC_DECIMALS {
        return Err(MintError::WrongDecimals {
            mint: *mint,
            decimals: state.decimals,
        });
    }
    Ok(())
}

/// What a run needs and what the treasury holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreflightReport {
    /// Sum of all transfers (µUSDC).
    pub usdc_needed_micro: u64,
    /// Treasury USDC balance (µUSDC).
    pub usdc_available_micro: u64,
    /// Estimated transactions.
    pub transactions: usize,
    /// Recipient token accounts to create.
    pub atas_to_create: usize,
    /// The lookup tables' maintenance this pass needs first.
    pub tables: TableGrowth,
    /// The rent those tables' growth deposits (returned when a table is closed).
    pub table_rent_lamports: u64,
    /// Upper bound of lamports for fees (payments and table maintenance) + ATA rents +
    /// the tables' rent + the treasury's own rent-exempt reserve.
    pub lamports_needed: u64,
    /// Treasury lamports.
    pub lamports_available: u64,
}

/// Why a run cannot start. Nothing has been sent.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The treasury has no USDC token account.
    #[error("treasury USDC token account {0} does not exist")]
    TreasuryTokenAccountMissing(Pubkey),
    /// Not enough USDC.
    #[error(
        "treasury holds {available_micro} µUSDC but the run needs {needed_micro} µUSDC: \
         {missing_micro} µUSDC missing"
    )]
    InsufficientUsdc {
        /// Sum of the transfers.
        needed_micro: u64,
        /// Held.
        available_micro: u64,
        /// `needed - available`.
        missing_micro: u64,
    },
    /// Not enough SOL for fees and rents.
    #[error(
        "treasury holds {available_lamports} lamports but the run needs up to \
         {needed_lamports} lamports for fees and token account and lookup table rent: \
         {missing_lamports} missing"
    )]
    InsufficientSol {
        /// Estimated need (upper bound).
        needed_lamports: u64,
        /// Held.
        available_lamports: u64,
        /// `needed - available`.
        missing_lamports: u64,
    },
    /// A transfer of 0 or a sum that overflows.
    #[error("invalid transfer set: {0}")]
    InvalidTransfers(String),
    /// The chain could not be asked.
    #[error(transparent)]
    Chain(#[from] ChainError),
}

/// Why a recipient's existing token account is not paid into. [`TokenAccountRefusal::code`]
/// is a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenAccountRefusal {
    /// The token account at the wallet's associated address belongs to another wallet
    /// (e.g. its owner was changed with `SetAuthority`): paying it would pay someone else.
    #[error(
        "token account {account} at the USDC address of wallet {wallet} belongs to {owner}, \
         not to the wallet; nothing sent"
    )]
    OwnerMismatch {
        /// The recipient wallet.
        wallet: Pubkey,
        /// Its associated token account address.
        account: Pubkey,
        /// The token account's `owner` field.
        owner: Pubkey,
    },
    /// The token account at that address holds another mint than the pinned one.
    #[error(
        "token account {account} at the USDC address of wallet {wallet} holds mint {mint}, \
         not the configured mint; nothing sent"
    )]
    MintMismatch {
        /// The recipient wallet.
        wallet: Pubkey,
        /// Its associated token account address.
        account: Pubkey,
        /// The token account's mint.
        mint: Pubkey,
    },
    /// The account at that address is not an initialized SPL token account.
    #[error(
        "account {account} at the USDC address of wallet {wallet} is not a token account \
         ({reason}); nothing sent"
    )]
    Invalid {
        /// The recipient wallet.
        wallet: Pubkey,
        /// Its associated token account address.
        account: Pubkey,
        /// What it is instead.
        reason: String,
    },
}

impl TokenAccountRefusal {
    /// Stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            TokenAccountRefusal::OwnerMismatch { .. } => "token_account_owner_mismatch",
            TokenAccountRefusal::MintMismatch { .. } => "token_account_mint_mismatch",
            TokenAccountRefusal::Invalid { .. } => "token_account_invalid",
        }
    }
}

/// What [`inspect_token_accounts`] found at the recipients' associated token addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecipientAccounts {
    /// Addresses to create (`CreateIdempotent`): no account, or only lamports someone sent
    /// there (a system account without data, which the ATA program takes over).
    pub missing: HashSet<Pubkey>,
    /// Wallets whose existing account must not be paid into, and why.
    pub refused: HashMap<Pubkey, TokenAccountRefusal>,
}

/// Inspect every recipient's associated token account of `mint`: missing (to create),
/// refused (not a token account of `mint` owned by the wallet), or fine.
pub async fn inspect_token_accounts(
    chain: &dyn Chain,
    mint: &Pubkey,
    transfers: &[Transfer],
) -> Result<RecipientAccounts, ChainError> {
    let mut wallets: Vec<Pubkey> = transfers
        .iter()
        .map(|t| t.wallet)
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    wallets.sort_unstable();
    let mut found = RecipientAccounts::default();
    for chunk in wallets.chunks(100) {
        let atas: Vec<Pubkey> = chunk
            .iter()
            .map(|w| get_associated_token_address(w, mint))
            .collect();
        let accounts = chain.accounts(&atas).await?;
        if accounts.len() != atas.len() {
            return Err(ChainError::Rpc(format!(
                "node returned {} accounts for {} keys",
                accounts.len(),
                atas.len()
            )));
        }
        for ((wallet, ata), account) in chunk.iter().zip(&atas).zip(accounts) {
            match classify(wallet, ata, mint, account.as_ref()) {
                Classified::Missing => {
                    found.missing.insert(*ata);
                }
                Classified::Refused(refusal) => {
                    found.refused.insert(*wallet, refusal);
                }
                Classified::Fine => {}
            }
        }
    }
    Ok(found)
}

enum Classified {
    Missing,
    Fine,
    Refused(TokenAccountRefusal),
}

fn classify(wallet: &Pubkey, ata: &Pubkey, mint: &Pubkey, account: Option<&Account>) -> Classified {
    let Some(account) = account else {
        return Classified::Missing;
    };
    let invalid = |reason: String| {
        Classified::Refused(TokenAccountRefusal::Invalid {
            wallet: *wallet,
            account: *ata,
            reason,
        })
    };
    if account.owner == SYSTEM_PROGRAM_ID && account.data.is_empty() {
        // Lamports sent to the address before the account was created: CreateIdempotent
        // allocates and assigns it (a dusting cannot block a provider's payouts).
        return Classified::Missing;
    }
    if account.owner != spl_token_interface::id() {
        return invalid(format!("owned by program {}", account.owner));
    }
    let Ok(token) = TokenAccount::unpack(&account.data) else {
        return invalid("not an initialized SPL token account".to_string());
    };
    if token.mint != *mint {
        return Classified::Refused(TokenAccountRefusal::MintMismatch {
            wallet: *wallet,
            account: *ata,
            mint: token.mint,
        });
    }
    if token.owner != *wallet {
        return Classified::Refused(TokenAccountRefusal::OwnerMismatch {
            wallet: *wallet,
            account: *ata,
            owner: token.owner,
        });
    }
    Classified::Fine
}

/// Recipient token accounts (of `mint`) to create (see [`inspect_token_accounts`]).
pub async fn missing_token_accounts(
    chain: &dyn Chain,
    mint: &Pubkey,
    transfers: &[Transfer],
) -> Result<HashSet<Pubkey>, ChainError> {
    Ok(inspect_token_accounts(chain, mint, transfers)
        .await?
        .missing)
}

/// Check that the treasury covers the whole set: the USDC sum, and SOL for the fees
/// (5,000 lamports per transaction plus the priority fee at the maximum compute
/// unit limit, an upper bound), the rent of every token account to create, the lookup
/// tables' growth (`tables`: their maintenance transactions' fees and the rent of the
/// tables created and the addresses appended) and its own rent-exempt reserve. On error
/// nothing may be sent.
pub async fn preflight(
    chain: &dyn Chain,
    params: &PackParams,
    transfers: &[Transfer],
    tables: TableGrowth,
) -> Result<PreflightReport, PreflightError> {
    let mut usdc_needed_micro: u64 = 0;
    for t in transfers {
        if t.amount_micro_usdc == 0 {
            return Err(PreflightError::InvalidTransfers(format!(
                "payout {} has amount 0",
                t.payout_id
            )));
        }
        usdc_needed_micro = usdc_needed_micro
            .checked_add(t.amount_micro_usdc)
            .ok_or_else(|| PreflightError::InvalidTransfers("sum overflows u64".into()))?;
    }
    let source = params.treasury_token_account();
    let usdc_available_micro = chain
        .token_balance(&source)
        .await?
        .ok_or(PreflightError::TreasuryTokenAccountMissing(source))?;
    if usdc_available_micro < usdc_needed_micro {
        return Err(PreflightError::InsufficientUsdc {
            needed_micro: usdc_needed_micro,
            available_micro: usdc_available_micro,
            missing_micro: usdc_needed_micro - usdc_available_micro,
        });
    }

    let missing = missing_token_accounts(chain, &params.mint, transfers).await?;
    let mut counter = 0u64;
    // Legacy packing: an upper bound of the transactions (lookup tables only lower it).
    let batches = pack(
        params,
        &LookupTables::none(),
        transfers,
        &missing,
        &mut || {
            counter += 1;
            format!("att-{counter:016x}")
        },
    );
    let transactions = batches.len();
    let priority_lamports_per_tx = (u128::from(params.priority_fee_micro_lamports)
        * u128::from(COMPUTE_UNIT_LIMIT_MAX))
    .div_ceil(1_000_000);
    let fee_per_tx = u128::from(LAMPORTS_PER_SIGNATURE) + priority_lamports_per_tx;
    let rent_per_ata = chain
        .minimum_balance_for_rent_exemption(TOKEN_ACCOUNT_LEN)
        .await?;
    let own_reserve = chain.minimum_balance_for_rent_exemption(0).await?;
    let table_rent = crate::lookup::rent(chain, tables).await?;
    let needed = fee_per_tx * (transactions + tables.transactions) as u128
        + u128::from(rent_per_ata) * missing.len() as u128
        + u128::from(table_rent)
        + u128::from(own_reserve);
    let lamports_needed = u64::try_from(needed).unwrap_or(u64::MAX);
    let lamports_available = chain.sol_balance(&params.treasury).await?;
    if lamports_available < lamports_needed {
        return Err(PreflightError::InsufficientSol {
            needed_lamports: lamports_needed,
            available_lamports: lamports_available,
            missing_lamports: lamports_needed - lamports_available,
        });
    }
    Ok(PreflightReport {
        usdc_needed_micro,
        usdc_available_micro,
        transactions,
        atas_to_create: missing.len(),
        tables,
        table_rent_lamports: table_rent,
        lamports_needed,
        lamports_available,
    })
}
