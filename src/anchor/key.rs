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
            match crate::operator_key::write_key_file(path, &key) {
                Ok(_) => {
                    tracing::info!(key = %bs58::encode(key.verifying_key().as_bytes()).into_string(), file = %path.display(), "made a new anchor key");
                }
                // Another process made it first: that key is the one.
                Err(_) if path.exists() => {}
                Err(e) => return Err(e),
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// `serve` processes started together never see a partial key: every start gets the
    /// same whole key, and no temporary file stays. (A start killed while making the key:
    /// `control::a_keygen_killed_half_way_leaves_no_partial_key`.)
    #[test]
    fn starts_at_once_agree_on_one_whole_anchor_key() {
        const STARTS: usize = 8;
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("settle.db.anchors.key");
            let barrier = std::sync::Barrier::new(STARTS);
            let keys: Vec<String> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..STARTS)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            AnchorKey::load_or_create(&path).map(|k| k.public())
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap().expect("every start gets the key"))
                    .collect()
            });
            assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
            assert_eq!(entries(dir.path()), ["settle.db.anchors.key"]);
            assert_eq!(AnchorKey::load(&path).unwrap().public(), keys[0]);
        }
    }

    #[test]
    fn a_key_file_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("operator.json");
        let first = crate::operator_key::random_key();
        crate::operator_key::write_key_file(&path, &first).unwrap();
        let before = std::fs::read(&path).unwrap();
        let refused =
            crate::operator_key::write_key_file(&path, &crate::operator_key::random_key())
                .unwrap_err();
        assert!(
            format!("{refused:#}").contains("an existing key is never overwritten"),
            "{refused:#}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert_eq!(entries(dir.path()), ["operator.json"]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
