//! The providers' data keys, kept wrapped in `provider_keys` beside the ledger but outside
//! its chain (SPEC §11): made on first use, erased (every read of the provider's sealed
//! values shows `erased` from then on), destroyed when the retention period ends (the
//! wrapped bytes emptied: nothing can open the values again), and re-wrapped when the
//! master key rotates.

use std::sync::Arc;

use std::path::PathBuf;

use super::keys::{KeyWrap, MasterKey};
use super::{DataKey, PrivacyError};
use crate::config::PrivacyConfig;
use crate::store::{Store, StoreError, privacy as rows};

/// Keys re-wrapped per statement in a rotation.
const REWRAP_PAGE: i64 = 500;

/// A refusal or a storage failure.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error(transparent)]
    Privacy(#[from] PrivacyError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The data keys of a ledger, under one master key.
#[derive(Clone)]
pub struct Vault {
    store: Store,
    wrap: Arc<dyn KeyWrap>,
    retention_days: i64,
}

/// The owner of the blind index key in `provider_keys`: `#` is in no provider id.
const BLIND_INDEX_OWNER: &str = "#blind-index";

/// `privacy.retention_days`'s default: payment records are kept ten years.
pub const RETENTION_DAYS_DEFAULT: i64 = 3_650;

impl Vault {
    pub fn new(store: Store, wrap: Arc<dyn KeyWrap>) -> Vault {
        Vault {
            store,
            wrap,
            retention_days: RETENTION_DAYS_DEFAULT,
        }
    }

    /// This vault keeping an erased provider's key `days` after its last payout (0: none).
    #[must_use]
    pub(crate) fn with_retention_days(mut self, days: i64) -> Vault {
        self.retention_days = days.max(0);
        self
    }

    /// How long an erased provider's key is kept after its last payout, in milliseconds.
    pub(crate) fn retention_ms(&self) -> i64 {
        self.retention_days.saturating_mul(86_400_000)
    }

    /// The data key of `owner`, made and stored wrapped on its first use; `None` once the
    /// owner is erased (its values read `erased`, whether or not the key is destroyed yet).
    ///
    /// # Errors
    /// `key_unwrap_failed` when the stored key is wrapped under another master key (never
    /// a new key in its place: values sealed under the old one would be lost).
    pub async fn key(&self, owner: &str, now_ms: i64) -> Result<Option<DataKey>, VaultError> {
        let row = match rows::key_row(&self.store, owner).await? {
            Some(row) => row,
            None => {
                let wrapped = hex::encode(self.wrap.wrap(owner, &DataKey::generate())?);
                rows::insert_key(&self.store, owner, self.wrap.key_id(), &wrapped, now_ms).await?;
                // A concurrent first use may have stored its key first: that one is the key.
                rows::key_row(&self.store, owner)
                    .await?
                    .ok_or_else(|| StoreError::Corrupt(format!("the key of {owner} vanished")))?
            }
        };
        if row.erased_at_ms.is_some() {
            return Ok(None);
        }
        let Some(wrapped) = row.wrapped else {
            return Ok(None);
        };
        Ok(Some(self.wrap.unwrap(owner, &unhex(owner, &wrapped)?)?))
    }

    /// Erases `owner` now: its values read `erased` at once; its key is destroyed by
    /// [`Vault::destroy_due`] from `destroy_after_ms` on (now, or when the retention of its
    /// payment records ends). Erasing again keeps the first erasure's time and moves the
    /// destruction to the new instant.
    ///
    /// # Errors
    /// The store's.
    pub async fn erase(
        &self,
        owner: &str,
        now_ms: i64,
        destroy_after_ms: i64,
    ) -> Result<(), VaultError> {
        rows::mark_erased(&self.store, owner, now_ms, destroy_after_ms).await?;
        Ok(())
    }

    /// Destroys every erased owner's key whose time has come at `now_ms`; their owners.
    ///
    /// # Errors
    /// The store's.
    pub async fn destroy_due(&self, now_ms: i64) -> Result<Vec<String>, VaultError> {
        let mut destroyed = Vec::new();
        for owner in self.due(now_ms).await? {
            if self.destroy(&owner, now_ms).await? {
                destroyed.push(owner);
            }
        }
        Ok(destroyed)
    }

    /// Re-wraps every key still wrapped under another master key with this vault's, after
    /// `previous` opens it: a master key rotation. Returns how many were re-wrapped. Run
    /// again after an interruption, it goes on where it stopped.
    ///
    /// # Errors
    /// `key_unwrap_failed` for a key `previous` cannot open (wrapped under a third key).
    pub async fn rotate_from(&self, previous: &dyn KeyWrap) -> Result<usize, VaultError> {
        let mut done = 0;
        loop {
            let page = rows::keys_not_under(&self.store, self.wrap.key_id(), REWRAP_PAGE).await?;
            if page.is_empty() {
                return Ok(done);
            }
            for row in page {
                let Some(wrapped) = row.wrapped else { continue };
                let key = previous.unwrap(&row.owner, &unhex(&row.owner, &wrapped)?)?;
                let rewrapped = hex::encode(self.wrap.wrap(&row.owner, &key)?);
                if rows::rewrap_key(
                    &self.store,
                    &row.owner,
                    &wrapped,
                    self.wrap.key_id(),
                    &rewrapped,
                )
                .await?
                {
                    done += 1;
                }
            }
        }
    }
}

/// The bytes of a wrapped key as stored (hexadecimal).
fn unhex(owner: &str, wrapped: &str) -> Result<Vec<u8>, PrivacyError> {
    hex::decode(wrapped).map_err(|_| {
        PrivacyError::new(
            "key_unwrap_failed",
            format!("the stored key of {owner} is not hexadecimal"),
        )
    })
}

impl Vault {
    /// The data keys of `owners` as reads need them, never made here: an owner without a
    /// key row, erased, or whose key is destroyed has none (its sealed values read
    /// `erased`).
    ///
    /// # Errors
    /// The store's, and `key_unwrap_failed` as [`Vault::key`].
    pub(crate) async fn read_keys(
        &self,
        owners: &[&str],
    ) -> Result<std::collections::HashMap<String, DataKey>, VaultError> {
        let mut keys = std::collections::HashMap::with_capacity(owners.len());
        for row in rows::key_rows(&self.store, owners).await? {
            if row.erased_at_ms.is_some() {
                continue;
            }
            let Some(wrapped) = &row.wrapped else {
                continue;
            };
            let key = self.wrap.unwrap(&row.owner, &unhex(&row.owner, wrapped)?)?;
            keys.insert(row.owner, key);
        }
        Ok(keys)
    }

    /// Whether `owner` is erased (its values read `erased`, its key withdrawn or destroyed).
    ///
    /// # Errors
    /// The store's.
    pub(crate) async fn is_erased(&self, owner: &str) -> Result<bool, VaultError> {
        Ok(rows::key_row(&self.store, owner)
            .await?
            .is_some_and(|r| r.erased_at_ms.is_some()))
    }

    /// The erased owners whose keys are due for destruction at `now_ms`.
    ///
    /// # Errors
    /// The store's.
    pub async fn due(&self, now_ms: i64) -> Result<Vec<String>, VaultError> {
        Ok(rows::keys_due(&self.store, now_ms).await?)
    }

    /// Destroys `owner`'s key if it is erased and due at `now_ms`: whether it was.
    ///
    /// # Errors
    /// The store's.
    pub(crate) async fn destroy(&self, owner: &str, now_ms: i64) -> Result<bool, VaultError> {
        Ok(rows::destroy_key(&self.store, owner, now_ms).await?)
    }

    /// The blind index of payout method digests (SPEC §11: uniqueness checks use a keyed
    /// hash): its key is a data key of its own owner, made on first use, wrapped and
    /// rotated like the providers' keys and never erased.
    ///
    /// # Errors
    /// As [`Vault::key`].
    pub(crate) async fn blind_index(&self, now_ms: i64) -> Result<super::BlindIndex, VaultError> {
        let key = self.key(BLIND_INDEX_OWNER, now_ms).await?.ok_or_else(|| {
            PrivacyError::new("key_unwrap_failed", "the blind index key was destroyed")
        })?;
        Ok(super::BlindIndex::new(key))
    }

    /// The master key's id.
    pub(crate) fn master_key_id(&self) -> &str {
        self.wrap.key_id()
    }
}

/// How a ledger handle treats personal data (SPEC §11).
#[derive(Clone)]
pub enum Privacy {
    /// Values are sealed with each provider's data key in this vault.
    Sealing(Vault),
    /// No master key could be read: booking or reading a personal value is refused with
    /// this error (everything else works).
    Missing(PrivacyError),
    /// Values are booked and read as they come, in clear: a ledger handle of the library
    /// made without a vault (the tests of an older ledger). Every `settle` command seals.
    Clear,
}

/// The key a booking seals a provider's values with.
pub enum Sealer {
    Key(DataKey),
    /// The provider is erased: a personal value cannot be set again.
    Erased,
    /// In clear ([`Privacy::Clear`]).
    Clear,
}

impl Privacy {
    /// The key `owner`'s new personal values are sealed with (made on first use).
    ///
    /// # Errors
    /// [`Privacy::Missing`]'s error, and the vault's.
    pub(crate) async fn sealer(&self, owner: &str, now_ms: i64) -> Result<Sealer, VaultError> {
        match self {
            Privacy::Sealing(vault) => Ok(match vault.key(owner, now_ms).await? {
                Some(key) => Sealer::Key(key),
                None => Sealer::Erased,
            }),
            Privacy::Missing(e) => Err(e.clone().into()),
            Privacy::Clear => Ok(Sealer::Clear),
        }
    }

    /// The keys reads open `owners`' values with (see [`Vault::read_keys`]); with
    /// [`Privacy::Clear`] none (values in clear need none).
    ///
    /// # Errors
    /// [`Privacy::Missing`]'s error, and the vault's.
    pub(crate) async fn read_keys(
        &self,
        owners: &[&str],
    ) -> Result<std::collections::HashMap<String, DataKey>, VaultError> {
        match self {
            Privacy::Sealing(vault) => vault.read_keys(owners).await,
            Privacy::Missing(e) => Err(e.clone().into()),
            Privacy::Clear => Ok(std::collections::HashMap::new()),
        }
    }

    /// How long an erased provider's key is kept after its last payout, in milliseconds.
    pub(crate) fn retention_ms(&self) -> i64 {
        match self {
            Privacy::Sealing(vault) => vault.retention_ms(),
            _ => RETENTION_DAYS_DEFAULT * 86_400_000,
        }
    }

    /// The vault, when values are sealed.
    pub fn vault(&self) -> Option<&Vault> {
        match self {
            Privacy::Sealing(vault) => Some(vault),
            _ => None,
        }
    }
}

/// The master key file of a SQLite ledger when `privacy.master_key_file` is empty: beside
/// the database (`settle.db.master-key`).
fn beside_database(database: &str) -> Option<PathBuf> {
    crate::config::beside_sqlite_database(database, "master-key")
}

/// How this process seals personal values (SPEC §11): under the master key `config` names
/// (the environment variable, else the file; on SQLite by default the file beside the
/// database). A command that books on a SQLite ledger without any data key yet, and
/// without a master key, makes one there (mode 0600) and says so: back it up with the
/// database; a command that books nothing there reads what it holds in clear. Without a
/// master key otherwise, commands that book or show a personal value are refused with
/// `no_master_key`; the others run.
///
/// # Errors
/// A master key file others may read (`insecure_master_key`) or that holds no key
/// (`invalid_master_key`); a new key that cannot be written.
pub(crate) async fn privacy_of(
    config: &PrivacyConfig,
    database: &str,
    store: &Store,
    may_book: bool,
) -> Result<Privacy, VaultError> {
    let mut config = config.clone();
    let beside = beside_database(database);
    if config.master_key_file.trim().is_empty()
        && let Some(path) = &beside
    {
        config.master_key_file = path.display().to_string();
    }
    let vault = |key: MasterKey| {
        Privacy::Sealing(
            Vault::new(store.clone(), Arc::new(key)).with_retention_days(config.retention_days),
        )
    };
    match MasterKey::load(&config) {
        Ok(key) => Ok(vault(key)),
        Err(e) if e.code == "no_master_key" => {
            let path = PathBuf::from(&config.master_key_file);
            let keyless = !rows::any_key(store).await?;
            if keyless && !may_book {
                // Nothing is sealed on this ledger and this command books nothing.
                return Ok(Privacy::Clear);
            }
            if !(keyless && beside.as_ref() == Some(&path) && !path.exists()) {
                return Ok(Privacy::Missing(e));
            }
            let key = MasterKey::generate();
            key.write_file(&path).map_err(|e| {
                PrivacyError::new(
                    "no_master_key",
                    format!("writing the new master key {}: {e}", path.display()),
                )
            })?;
            tracing::warn!(
                file = %path.display(),
                key_id = key.key_id(),
                "made this ledger's master key for personal data: back it up apart from the database (without it no name, email or bank detail can be read again)"
            );
            Ok(vault(key))
        }
        Err(e) => Err(e.into()),
    }
}
