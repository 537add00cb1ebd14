//! Keypair file handling, the mint check, preflight and wallet validation.

#![cfg(feature = "local-chain")]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use common::{Env, SOL, USDC, transfers, wallets};
use settle_solana::lookup::TableGrowth;
use settle_solana::{
    Keypair, MemoryJournal, PayError, PreflightError, Pubkey, Signer, Treasury, TreasuryError,
    WalletError, check_mint,
    pack::{MemoKey, PackParams},
    preflight,
    treasury::MintError,
    validate_wallet,
};

fn write_keypair(dir: &std::path::Path, mode: u32) -> (std::path::PathBuf, Keypair) {
    let keypair = Keypair::new();
    let path = dir.join(format!("treasury-{mode:o}.json"));
    let bytes: Vec<u8> = keypair.to_bytes().to_vec();
    std::fs::write(&path, serde_json::to_string(&bytes).unwrap()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    (path, keypair)
}

#[test]
fn a_keypair_file_readable_by_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for mode in [0o644, 0o640, 0o604, 0o660] {
        let (path, _) = write_keypair(dir.path(), mode);
        let err = Treasury::load(&path).unwrap_err();
        assert!(
            matches!(err, TreasuryError::InsecurePermissions { mode: m, .. } if m == mode),
            "{err}"
        );
        assert!(err.to_string().contains("chmod 600"));
    }
}

#[test]
fn a_private_keypair_file_is_accepted_and_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let (path, keypair) = write_keypair(dir.path(), 0o600);
    let treasury = Treasury::load(&path).unwrap();
    assert_eq!(treasury.pubkey(), keypair.pubkey());

    let debug = format!("{treasury:?}");
    assert!(debug.contains(&keypair.pubkey().to_string()));
    assert!(debug.contains("redacted"));
    let secret = keypair.to_bytes();
    assert!(!debug.contains(&bs58::encode(&secret).into_string()));
    assert!(!debug.contains(&bs58::encode(&secret[..32]).into_string()));
    assert!(!debug.contains(&format!("{:?}", &secret[..32])));
}

#[test]
fn the_memo_key_is_derived_from_the_treasury_seed_with_a_domain_separator() {
    use hmac::{Hmac, Mac};
    // Known answer: HKDF-Expand(seed, "settle/solana/memo-key/v1", 32) = HMAC(seed, info || 1).
    let seed = [9u8; 32];
    let treasury = Treasury::from_keypair(Keypair::new_from_array(seed));
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&seed).unwrap();
    mac.update(b"settle/solana/memo-key/v1\x01");
    let expected: [u8; 32] = mac.finalize().into_bytes().into();
    assert_eq!(treasury.memo_key(), MemoKey::from_bytes(expected));
    assert_ne!(
        treasury.memo_key(),
        MemoKey::from_bytes(seed),
        "never the signing seed itself"
    );
    // The same key file gives the same key; another treasury another key.
    let dir = tempfile::tempdir().unwrap();
    let (path, keypair) = write_keypair(dir.path(), 0o600);
    let loaded = Treasury::load(&path).unwrap();
    assert_eq!(
        loaded.memo_key(),
        Treasury::from_keypair(keypair).memo_key()
    );
    assert_ne!(loaded.memo_key(), treasury.memo_key());
    assert!(!format!("{loaded:?}").contains(&format!("{expected:?}")));
}

#[test]
fn malformed_keypair_files_are_refused_without_echoing_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(&path, "[1,2,3]").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = Treasury::load(&path).unwrap_err();
    assert!(matches!(err, TreasuryError::Invalid { .. }), "{err}");
    assert!(!err.to_string().contains("1,2,3"));
    assert!(matches!(
        Treasury::load(dir.path().join("missing.json")),
        Err(TreasuryError::Io { .. })
    ));
}

#[tokio::test]
async fn the_mint_must_be_an_spl_mint_with_6_decimals() {
    let env = Env::new(0, SOL);
    check_mint(&env.chain, &env.mint).await.unwrap();
    let nine = env.chain.create_mint(9);
    let err = check_mint(&env.chain, &nine).await.unwrap_err();
    assert!(
        matches!(err, MintError::WrongDecimals { mint, decimals: 9 } if mint == nine),
        "{err}"
    );
    let nothing = Keypair::new().pubkey();
    let err = check_mint(&env.chain, &nothing).await.unwrap_err();
    assert!(
        matches!(err, MintError::Missing(mint) if mint == nothing),
        "{err}"
    );
    // A wallet is not a mint: the system program owns it, not the SPL Token program.
    let wallet = env.treasury.pubkey();
    let err = check_mint(&env.chain, &wallet).await.unwrap_err();
    assert!(
        matches!(err, MintError::WrongOwner { mint, .. } if mint == wallet),
        "{err}"
    );
}

#[tokio::test]
async fn insufficient_usdc_sends_nothing_and_says_how_much_is_missing() {
    let env = Env::new(10 * USDC, SOL);
    let batch = transfers("poor", &wallets(12)); // ~12.08 USDC
    let payer = env.payer(Arc::new(MemoryJournal::new()));
    let err = payer.pay(batch.clone()).await.unwrap_err();
    match err {
        PayError::Preflight(PreflightError::InsufficientUsdc {
            needed_micro,
            available_micro,
            missing_micro,
        }) => {
            assert_eq!(needed_micro, common::total(&batch));
            assert_eq!(available_micro, 10 * USDC);
            assert_eq!(missing_micro, needed_micro - available_micro);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(env.chain.stats().send_calls, 0);
    assert_eq!(env.treasury_usdc(), 10 * USDC);
}

#[tokio::test]
async fn insufficient_sol_for_fees_and_rent_sends_nothing() {
    // Enough for a few fees but not for 20 new token accounts (~2 mSOL each).
    let env = Env::new(1_000 * USDC, 5_000_000);
    let batch = transfers("nosol", &wallets(20));
    let payer = env.payer(Arc::new(MemoryJournal::new()));
    let err = payer.pay(batch).await.unwrap_err();
    match &err {
        PayError::Preflight(PreflightError::InsufficientSol {
            needed_lamports,
            available_lamports,
            missing_lamports,
        }) => {
            assert_eq!(*available_lamports, 5_000_000);
            assert_eq!(*missing_lamports, needed_lamports - available_lamports);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("missing"));
    assert_eq!(env.chain.stats().send_calls, 0);
}

#[tokio::test]
async fn preflight_reports_what_the_run_needs() {
    let env = Env::new(1_000 * USDC, SOL);
    let recipients = wallets(25);
    let params = PackParams {
        treasury: env.treasury.pubkey(),
        mint: env.mint,
        priority_fee_micro_lamports: 1_000,
        transfers_per_tx_max: 64,
        memo_key: env.treasury.memo_key(),
    };
    let report = preflight(
        &env.chain,
        &params,
        &transfers("pf", &recipients),
        TableGrowth::default(),
    )
    .await
    .unwrap();
    assert_eq!(report.atas_to_create, 25);
    assert!(report.transactions >= 3);
    assert!(report.lamports_needed > 25 * 2_000_000);
}

#[test]
fn wallets_are_validated() {
    let wallet = Keypair::new().pubkey();
    assert_eq!(validate_wallet(&wallet.to_string()), Ok(wallet));

    // A program-derived address is off the curve.
    let (pda, _) = Pubkey::find_program_address(&[b"settle"], &spl_token_program());
    let err = validate_wallet(&pda.to_string()).unwrap_err();
    assert_eq!(err, WalletError::OffCurve);
    assert_eq!(err.code(), "wallet_off_curve");

    let err = validate_wallet("0OIl-not-base58").unwrap_err();
    assert_eq!(err.code(), "wallet_invalid_base58");

    let short = bs58::encode([7u8; 31]).into_string();
    assert_eq!(
        validate_wallet(&short).unwrap_err().code(),
        "wallet_invalid_length"
    );
    let long = bs58::encode([7u8; 33]).into_string();
    assert_eq!(
        validate_wallet(&long).unwrap_err().code(),
        "wallet_invalid_length"
    );
    assert_eq!(
        validate_wallet("").unwrap_err().code(),
        "wallet_invalid_length"
    );
}

fn spl_token_program() -> Pubkey {
    "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
        .parse()
        .unwrap()
}
