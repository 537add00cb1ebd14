//! The anchor key: an Ed25519 key of `serve`'s own (a solana-keygen file, readable by its
//! owner only) that signs every anchor's root and pays for, and so signs, the Solana memo
//! transaction that publishes one. Its public half is what a provider trusts.

use std::path::Path;

use anyhow::Context;
use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};

use super::root::{Digest32, signed_message};

/// The key that signs and publishes anchors.
pub struct AnchorKey {
    key: SigningKey,
}

impl std::fmt::Debug for AnchorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AnchorKey({})", self.public())
    }
}

impl AnchorKey {
    /// The key at `path` (`insecure_anchor_key` when group or others may read it).
    pub fn load(path: &Path) -> anyhow::Result<AnchorKey> {
        Ok(AnchorKey {
            key: crate::operator_key::read_key_file(path, "anchor")?,
        })
    }

    /// The key at `path`, made (mode 0600) when there is none yet.
    pub fn load_or_create(path: &Path) -> anyhow::Result<AnchorKey> {
        if !path.exists() {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            let key = crate::operator_key::random_key();
            crate::operator_key::write_key_file(path, &key)?;
            tracing::info!(key = %bs58::encode(key.verifying_key().as_bytes()).into_string(), file = %path.display(), "made a new anchor key");
        }
        AnchorKey::load(path)
    }

    /// The public key, base58 (a Solana address).
    pub fn public(&self) -> String {
        bs58::encode(self.key.verifying_key().as_bytes()).into_string()
    }

    /// The signature of `root`, base58.
    pub fn sign(&self, root: &Digest32) -> String {
        bs58::encode(self.key.sign(&signed_message(root)).to_bytes()).into_string()
    }

    /// The same key as a Solana keypair (the fee payer of a publication).
    pub(crate) fn solana_keypair(&self) -> settle_solana::Keypair {
        settle_solana::Keypair::new_from_array(self.key.to_bytes())
    }
}

/// Whether `signature` (base58) is `public`'s (base58) signature of `root`.
pub(crate) fn signature_valid(public: &str, root: &Digest32, signature: &str) -> bool {
    let key = bs58::decode(public)
        .into_vec()
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .and_then(|b| VerifyingKey::from_bytes(&b).ok());
    let signature = bs58::decode(signature)
        .into_vec()
        .ok()
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .map(|b| ed25519_dalek::Signature::from_bytes(&b));
    match (key, signature) {
        (Some(key), Some(signature)) => key.verify(&signed_message(root), &signature).is_ok(),
        _ => false,
    }
}
