//! Operator key files (SPEC §9): a solana-keygen JSON array of 64 bytes (the Ed25519 secret,
//! then its public half), readable by its owner only, kept by its operator. Written by
//! `settle operator keygen` (and the demo), read by `--operator-key FILE` to sign requests
//! and decisions as the operator of the ledger that holds its public key.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use ed25519_dalek::{Signer, SigningKey};

use crate::control::Sign;
use crate::domain::operator::OperatorKey;
use crate::ledger::Ledger;

/// A new Ed25519 key from the operating system's random source.
pub(crate) fn random_key() -> SigningKey {
    use rand::RngCore;
    let mut seed = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut seed);
    let key = SigningKey::from_bytes(&seed);
    seed.fill(0);
    key
}

/// The failpoint after a new key file is written under its temporary name, before it
/// appears under its own.
pub const KEY_FILE_BEFORE_PUBLISH: &str = "key_file.before_publish";

/// Writes `key` as a new key file at `path` (mode 0600; an existing file is never
/// overwritten); returns its public key.
///
/// The file appears whole or not at all: the key is written and synced under a temporary
/// name beside `path`, then linked to `path` (which fails when `path` exists) and the
/// directory synced. A process killed half-way leaves at most a stray temporary file, never
/// an empty or partial key that every later start would refuse.
pub fn write_key_file(path: &Path, key: &SigningKey) -> anyhow::Result<OperatorKey> {
    use std::os::unix::fs::OpenOptionsExt;
    let bytes: Vec<u8> = key.to_keypair_bytes().to_vec();
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "key".into(), |n| n.to_string_lossy().into_owned());
    let temp = dir.join(format!(
        ".{name}.{}.{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    ));
    let written = (|| -> anyhow::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .with_context(|| format!("creating {}", temp.display()))?;
        file.write_all(serde_json::to_string(&bytes)?.as_bytes())?;
        file.sync_all()?;
        crate::failpoint::failpoint(KEY_FILE_BEFORE_PUBLISH);
        std::fs::hard_link(&temp, path).with_context(|| {
            format!(
                "creating {} (an existing key is never overwritten)",
                path.display()
            )
        })?;
        Ok(())
    })();
    // The temporary name goes either way; the key, when linked, stays under `path`.
    let _ = std::fs::remove_file(&temp);
    written?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))?;
    Ok(OperatorKey::from_verifying_key(key.verifying_key()))
}

/// The operator key of this process, with the name of the operator that holds it on the
/// ledger.
pub struct OperatorSigner {
    name: String,
    key: SigningKey,
}

impl Sign for OperatorSigner {
    fn operator(&self) -> &str {
        &self.name
    }

    fn sign(&self, message: &[u8]) -> String {
        bs58::encode(self.key.sign(message).to_bytes()).into_string()
    }
}

/// The key file at `path`, as the operator of `ledger` that holds its public key
/// (`unknown_operator` when none does).
pub async fn load_signer(ledger: &Ledger, path: &Path) -> anyhow::Result<OperatorSigner> {
    let key = read_key_file(path, "operator")?;
    let public = OperatorKey::from_verifying_key(key.verifying_key());
    let operators = ledger.operators().await?;
    let Some(operator) = operators.iter().find(|o| o.key == public) else {
        bail!(
            "unknown_operator: the key in {} ({}) is no operator's key on this ledger",
            path.display(),
            public.to_base58()
        );
    };
    Ok(OperatorSigner {
        name: operator.name.as_str().to_owned(),
        key,
    })
}

/// The Ed25519 key in the solana-keygen file at `path`, refused (`insecure_<kind>_key`)
/// when group or others may access it, or unreadable as a key (`invalid_<kind>_key`).
pub(crate) fn read_key_file(path: &Path, kind: &str) -> anyhow::Result<SigningKey> {
    use std::os::unix::fs::PermissionsExt;
    let metadata =
        std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "insecure_{kind}_key: {} has mode {mode:04o}: group and others must have no \
             access (chmod 600 {})",
            path.display(),
            path.display()
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let invalid = || {
        anyhow::anyhow!(
            "invalid_{kind}_key: {} is not a JSON array of 64 bytes holding an Ed25519 key",
            path.display()
        )
    };
    let bytes: Vec<u8> = serde_json::from_str(&text).map_err(|_| invalid())?;
    let bytes: [u8; 64] = bytes.try_into().map_err(|_| invalid())?;
    SigningKey::from_keypair_bytes(&bytes).map_err(|_| invalid())
}
