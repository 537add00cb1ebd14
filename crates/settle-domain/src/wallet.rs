//! Solana wallet addresses: base58, 32 bytes, a point on the ed25519 curve (an owner that
//! can sign, not a program-derived address).

use crate::DomainError;

/// Validates a wallet address.
pub fn validate_wallet(text: &str) -> Result<[u8; 32], DomainError> {
    if text.is_empty() || text.len() > 44 {
        return Err(DomainError::new(
            "wallet_invalid_length",
            "a wallet is 32 bytes in base58 (32..=44 characters)",
        ));
    }
    let bytes = bs58::decode(text)
        .into_vec()
        .map_err(|_| DomainError::new("wallet_invalid_base58", "wallet is not valid base58"))?;
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| {
        DomainError::new(
            "wallet_invalid_length",
            "a wallet decodes to exactly 32 bytes",
        )
    })?;
    if !on_ed25519_curve(&bytes) {
        return Err(DomainError::new(
            "wallet_off_curve",
            "wallet is not on the ed25519 curve (a program-derived address cannot receive payouts)",
        ));
    }
    Ok(bytes)
}

fn on_ed25519_curve(bytes: &[u8; 32]) -> bool {
    curve25519_dalek::edwards::CompressedEdwardsY(*bytes)
        .decompress()
        .is_some()
}
