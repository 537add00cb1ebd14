//! The providers' data keys, kept wrapped in `provider_keys` beside the ledger but outside
//! its chain (SPEC §11): made on first use, erased (every read of the provider's sealed
//! values shows `erased` from then on), destroyed when the retention period ends (the
//! wrapped bytes emptied: nothing can open the values again), and re-wrapped when the
//! master key rotates.

use std::sync::Arc;

use super::keys::KeyWrap;
use super::{DataKey, PrivacyError};
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
}

impl Vault {
    pub fn new(store: Store, wrap: Arc<dyn KeyWrap>) -> Vault {
        Vault { store, wrap }
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
        Ok(rows::destroy_due(&self.store, now_ms).await?)
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
