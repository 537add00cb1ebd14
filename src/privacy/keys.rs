//! Data keys kept wrapped (SPEC §11): the master key, read from a file only its owner can
//! read or from an environment variable (`[privacy]`), and [`KeyWrap`], the seam where a
//! KMS stands in for it. A wrapped key is bound to its owner (a provider id, or the blind
//! index): moved to another owner's row it does not unwrap.

use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{DataKey, KEY_LEN, PrivacyError, decrypt, encrypt};
use crate::config::PrivacyConfig;

/// Wraps and unwraps data keys: the master key here, a KMS in its place.
pub trait KeyWrap: Send + Sync {
    /// Names the wrapping key; stored beside each wrapped key, so a rotation knows which
    /// are still wrapped under the old one.
    fn key_id(&self) -> &str;
    /// `key` wrapped for `owner`.
    ///
    /// # Errors
    /// A KMS that cannot be reached; the master key never fails.
    fn wrap(&self, owner: &str, key: &DataKey) -> Result<Vec<u8>, PrivacyError>;
    /// The key `wrapped` holds for `owner`.
    ///
    /// # Errors
    /// `key_unwrap_failed`: another wrapping key, another owner, or a changed byte.
    fn unwrap(&self, owner: &str, wrapped: &[u8]) -> Result<DataKey, PrivacyError>;
}

/// A data key wrapped under `from` re-wrapped under `to`: a master key rotation, one
/// wrapped key at a time (the data key, and so every sealed value, stays as it was).
///
/// # Errors
/// As [`KeyWrap::unwrap`] and [`KeyWrap::wrap`].
pub fn rewrap(
    from: &dyn KeyWrap,
    to: &dyn KeyWrap,
    owner: &str,
    wrapped: &[u8],
) -> Result<Vec<u8>, PrivacyError> {
    to.wrap(owner, &from.unwrap(owner, wrapped)?)
}

/// The master key: 32 bytes, written as 64 hexadecimal digits.
pub struct MasterKey {
    id: String,
    key: DataKey,
}

impl MasterKey {
    /// A new random master key.
    pub fn generate() -> MasterKey {
        MasterKey::of(DataKey::generate())
    }

    fn of(key: DataKey) -> MasterKey {
        let mut hash = Sha256::new();
        hash.update(b"settle/master-key-id/v1");
        hash.update(key.bytes());
        let id = hex::encode(&hash.finalize()[..8]);
        MasterKey { id, key }
    }

    /// The key written as 64 hexadecimal digits (surrounding white space ignored).
    ///
    /// # Errors
    /// `invalid_master_key`, naming `source` but never the text.
    pub fn from_hex(text: &str, source: &str) -> Result<MasterKey, PrivacyError> {
        let invalid = || {
            PrivacyError::new(
                "invalid_master_key",
                format!("{source} does not hold a master key: 64 hexadecimal digits (32 bytes)"),
            )
        };
        let bytes = zeroize::Zeroizing::new(hex::decode(text.trim()).map_err(|_| invalid())?);
        DataKey::from_bytes(&bytes)
            .map(MasterKey::of)
            .ok_or_else(invalid)
    }

    /// The master key `[privacy]` names: the environment variable `master_key_env` when it
    /// is set and not empty, else the file `master_key_file`, which group and others must
    /// not be able to read.
    ///
    /// # Errors
    /// `no_master_key` when neither holds one; `insecure_master_key` for a file others can
    /// read; `invalid_master_key` for anything but 64 hexadecimal digits.
    pub fn load(config: &PrivacyConfig) -> Result<MasterKey, PrivacyError> {
        let var = config.master_key_env.trim();
        if !var.is_empty()
            && let Ok(text) = std::env::var(var)
            && !text.trim().is_empty()
        {
            return MasterKey::from_hex(&text, &format!("the environment variable {var}"));
        }
        let file = config.master_key_file.trim();
        if file.is_empty() {
            return Err(PrivacyError::new(
                "no_master_key",
                "no master key: set privacy.master_key_file or the variable privacy.master_key_env names",
            ));
        }
        MasterKey::read_file(Path::new(file))
    }

    /// The master key in the file at `path`, which group and others must not be able to
    /// read (as the treasury's and the operators' keys).
    ///
    /// # Errors
    /// As [`MasterKey::load`].
    pub(crate) fn read_file(path: &Path) -> Result<MasterKey, PrivacyError> {
        use std::os::unix::fs::PermissionsExt;
        let shown = path.display();
        let metadata = std::fs::metadata(path)
            .map_err(|e| PrivacyError::new("no_master_key", format!("reading {shown}: {e}")))?;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(PrivacyError::new(
                "insecure_master_key",
                format!(
                    "{shown} has mode {mode:04o}: group and others must have no access (chmod 600 {shown})"
                ),
            ));
        }
        let text =
            zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
                PrivacyError::new("no_master_key", format!("reading {shown}: {e}"))
            })?);
        MasterKey::from_hex(&text, &shown.to_string())
    }

    /// Writes this key as a new file at `path`, mode 0600; an existing file is never
    /// overwritten.
    ///
    /// # Errors
    /// The file exists or cannot be written.
    pub fn write_file(&self, path: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let text = zeroize::Zeroizing::new(hex::encode(self.key.bytes()));
        file.write_all(text.as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()
    }
}

/// The associated data of a wrapped key: its owner, length-prefixed.
fn wrap_binding(owner: &str) -> Vec<u8> {
    let mut aad = b"settle/data-key/v1".to_vec();
    aad.extend_from_slice(&(owner.len() as u64).to_be_bytes());
    aad.extend_from_slice(owner.as_bytes());
    aad
}

impl KeyWrap for MasterKey {
    fn key_id(&self) -> &str {
        &self.id
    }

    fn wrap(&self, owner: &str, key: &DataKey) -> Result<Vec<u8>, PrivacyError> {
        Ok(encrypt(&self.key, &wrap_binding(owner), key.bytes()))
    }

    fn unwrap(&self, owner: &str, wrapped: &[u8]) -> Result<DataKey, PrivacyError> {
        decrypt(&self.key, &wrap_binding(owner), wrapped)
            .filter(|bytes| bytes.len() == KEY_LEN)
            .and_then(|bytes| DataKey::from_bytes(&bytes))
            .ok_or_else(|| {
                PrivacyError::new(
                    "key_unwrap_failed",
                    format!(
                        "the data key of {owner} does not unwrap under master key {}: wrapped under another, for another owner, or changed",
                        self.id
                    ),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::super::Binding;
    use super::*;

    fn config(file: &Path, env: &str) -> PrivacyConfig {
        PrivacyConfig {
            master_key_file: file.display().to_string(),
            master_key_env: env.to_owned(),
            ..PrivacyConfig::default()
        }
    }

    #[test]
    fn a_wrapped_key_unwraps_for_its_owner_under_its_master_key_only() {
        let master = MasterKey::generate();
        let key = DataKey::generate();
        let wrapped = master.wrap("prv_1", &key).unwrap();
        assert_eq!(
            master.unwrap("prv_1", &wrapped).unwrap().bytes(),
            key.bytes()
        );
        assert!(
            !wrapped
                .windows(KEY_LEN)
                .any(|w| w == key.bytes().as_slice()),
            "the key is not in clear"
        );
        let code = |r: Result<DataKey, PrivacyError>| r.err().map(|e| e.code);
        assert_eq!(
            code(master.unwrap("prv_2", &wrapped)),
            Some("key_unwrap_failed")
        );
        assert_eq!(
            code(MasterKey::generate().unwrap("prv_1", &wrapped)),
            Some("key_unwrap_failed")
        );
        let mut changed = wrapped.clone();
        changed[30] ^= 1;
        assert_eq!(
            code(master.unwrap("prv_1", &changed)),
            Some("key_unwrap_failed")
        );
        assert_eq!(
            code(master.unwrap("prv_1", &[1, 2, 3])),
            Some("key_unwrap_failed")
        );
    }

    #[test]
    fn a_rotation_rewraps_and_every_sealed_value_still_opens() {
        let (old, new) = (MasterKey::generate(), MasterKey::generate());
        assert_ne!(old.key_id(), new.key_id());
        let key = DataKey::generate();
        let at = Binding {
            provider_id: "prv_1",
            event_type: "provider.registered",
            field: "name",
        };
        let sealed = key.seal(&at, "Ada Lovelace");
        let wrapped = old.wrap("prv_1", &key).unwrap();
        let rewrapped = rewrap(&old, &new, "prv_1", &wrapped).unwrap();
        assert!(
            old.unwrap("prv_1", &rewrapped).is_err(),
            "the old key is out"
        );
        let key = new.unwrap("prv_1", &rewrapped).unwrap();
        assert_eq!(key.open("prv_1", "name", &sealed).unwrap(), "Ada Lovelace");
    }

    #[test]
    fn the_master_key_is_read_from_a_private_file_or_the_environment() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        let master = MasterKey::generate();
        master.write_file(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(master.write_file(&path).is_err(), "never overwritten");
        let loaded = MasterKey::load(&config(&path, "")).unwrap();
        assert_eq!(loaded.key_id(), master.key_id());

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let refused = MasterKey::load(&config(&path, "")).err().unwrap();
        assert_eq!(refused.code, "insecure_master_key");

        let other = dir.path().join("other.key");
        std::fs::write(&other, "not a key").unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
        let invalid = MasterKey::load(&config(&other, "")).err().unwrap();
        assert_eq!(invalid.code, "invalid_master_key");
        assert!(!invalid.message.contains("not a key"), "never the text");

        let missing = MasterKey::load(&config(Path::new(""), "")).err().unwrap();
        assert_eq!(missing.code, "no_master_key");

        // The variable is read first when it holds a key (a unique name: tests run in
        // threads of one process).
        let var = "SETTLE_TEST_PRIVACY_MASTER_KEY_A";
        let from_env = MasterKey::generate();
        // SAFETY: no other thread reads or writes this variable.
        unsafe { std::env::set_var(var, hex::encode(from_env.key.bytes())) };
        let loaded = MasterKey::load(&config(&other, var)).unwrap();
        assert_eq!(loaded.key_id(), from_env.key_id());
        // SAFETY: as above.
        unsafe { std::env::set_var(var, "") };
        assert_eq!(
            MasterKey::load(&config(&path, var)).err().unwrap().code,
            "insecure_master_key",
            "an empty variable falls back to the file"
        );
    }
}
