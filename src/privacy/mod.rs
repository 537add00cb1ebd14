//! Personal data that can be forgotten (SPEC §11): crypto-shredding.
//!
//! Each provider's personal values (names, emails, account holders, IBANs, account and
//! routing numbers, the wallet it is paid to) are sealed with a data key of its own:
//! XChaCha20-Poly1305, a fresh random 192-bit nonce per value, and as associated data the
//! provider, the kind of event or row the value was sealed for and the field
//! ([`Binding`]). A sealed value is text (`pd1:`, the event type it was sealed in, `:`, and
//! the URL-safe base64 of nonce and ciphertext), so it travels in the same JSON string
//! fields as clear text did and the hash chain covers it as it covers any other field. A
//! projection copies it as it is (a provider's row holds values of its `provider.registered`
//! and `provider.updated` events), so a read opens it under the event type it names, its
//! provider and its field: moved to another provider or field it does not open, and a
//! changed event type opens nothing either (it is part of the associated data). Destroying the data key makes every sealed
//! value of the provider unreadable for good while the chain over them still verifies.
//!
//! Data keys are kept wrapped ([`KeyWrap`]) by a master key ([`keys::MasterKey`], read from
//! a file only its owner can read, or from the environment); a KMS can stand in for it.
//! Uniqueness checks that need a personal value (the same IBAN on two providers) compare
//! [`BlindIndex`] digests: HMAC-SHA256 under an index key of its own (kept wrapped like a
//! data key), never the value.
//!
//! Sealing and opening are pure; `keys` reads the master key, `report` reads the chain for
//! the personal data an older ledger holds in clear. Where the wrapped keys are stored, and
//! which reads open which fields, is the ledger's.
//!
//! Erasure: an erased provider's data key is marked erased at once (every read of its
//! values shows `erased`, [`open_field`]) and destroyed when the retention of its payment
//! records ends (`vault`); its events, amounts and chain stay, and still verify. How a
//! ledger handle seals is its `vault::Privacy`: `Sealing` under a vault, `Missing` when no
//! master key could be read (booking or showing a personal value is refused, the rest
//! works), `Clear` for a library handle made without one; `vault::privacy_of` chooses by
//! the master key a process reads, or makes beside a SQLite ledger that has no data key
//! yet. `fields` says which values of which events and import lines are personal.

pub mod fields;
pub mod keys;
pub mod report;
pub mod vault;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use rand::rngs::OsRng;
use sha2::Sha256;
use zeroize::Zeroizing;

/// The start of every sealed value: the format's version.
pub const SEALED_PREFIX: &str = "pd1:";
/// What a read shows for a personal value whose provider was erased.
pub use crate::domain::provider::ERASED;

/// Bytes of a data key.
const KEY_LEN: usize = 32;
/// Bytes of an XChaCha20 nonce.
const NONCE_LEN: usize = 24;
/// Bytes of a Poly1305 tag.
const TAG_LEN: usize = 16;

/// A refusal of this module, with a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct PrivacyError {
    pub code: &'static str,
    pub message: String,
}

impl PrivacyError {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> PrivacyError {
        PrivacyError {
            code,
            message: message.into(),
        }
    }
}

/// What a sealed value is bound to: opened under any other binding, it fails as a tampered
/// value would. A value copied into another provider's event, another kind of event or
/// another field cannot be opened there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding<'a> {
    pub provider_id: &'a str,
    /// The event type (`provider.registered`) or the row kind the value was sealed for.
    pub event_type: &'a str,
    /// The field, as a path in the event (`payout_method.iban`).
    pub field: &'a str,
}

impl Binding<'_> {
    /// The associated data: each part length-prefixed, so no two bindings share bytes.
    fn associated_data(&self) -> Vec<u8> {
        let mut aad = b"settle/personal-data/v1".to_vec();
        for part in [self.provider_id, self.event_type, self.field] {
            aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
            aad.extend_from_slice(part.as_bytes());
        }
        aad
    }
}

/// A provider's data key: seals and opens its personal values. Zeroed when dropped.
pub struct DataKey(Zeroizing<[u8; KEY_LEN]>);

impl DataKey {
    /// A new random key (the operating system's generator).
    pub fn generate() -> DataKey {
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        OsRng.fill_bytes(key.as_mut());
        DataKey(key)
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<DataKey> {
        let bytes: [u8; KEY_LEN] = bytes.try_into().ok()?;
        Some(DataKey(Zeroizing::new(bytes)))
    }

    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(self.0.as_ref().into())
    }

    /// `clear` sealed under `binding`: `pd1:`, the event type, `:` and base64 of a fresh
    /// nonce and the ciphertext with its tag. Sealing the same value twice gives two
    /// different texts.
    pub fn seal(&self, binding: &Binding<'_>, clear: &str) -> String {
        let bytes = encrypt(self, &binding.associated_data(), clear.as_bytes());
        format!(
            "{SEALED_PREFIX}{}:{}",
            binding.event_type,
            URL_SAFE_NO_PAD.encode(bytes)
        )
    }

    /// `clear` sealed under `binding` with a nonce derived from the key, the binding and the
    /// value (a synthetic IV): the same value sealed twice gives the same text. For an
    /// approval request only, whose text must be the same when the same command is sent
    /// again (it finds its request, and an operator signs the digest of the text before
    /// sending it); equal values of one provider's requests show as equal, nothing else.
    pub(crate) fn seal_fixed(&self, binding: &Binding<'_>, clear: &str) -> String {
        let aad = binding.associated_data();
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.bytes())
            .expect("HMAC takes a key of any length");
        mac.update(b"settle/synthetic-nonce/v1");
        mac.update(&(aad.len() as u64).to_be_bytes());
        mac.update(&aad);
        mac.update(clear.as_bytes());
        let digest = mac.finalize().into_bytes();
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&digest[..NONCE_LEN]);
        let bytes = encrypt_with(self, &nonce, &aad, clear.as_bytes());
        format!(
            "{SEALED_PREFIX}{}:{}",
            binding.event_type,
            URL_SAFE_NO_PAD.encode(bytes)
        )
    }

    /// The clear text of `sealed`, sealed by this key for `provider_id`'s `field` in the
    /// event type the value names.
    ///
    /// # Errors
    /// `sealed_text_invalid` for text that is not a sealed value; `sealed_text_unreadable`
    /// when it does not open: another key, another provider or field, or a changed byte.
    pub fn open(
        &self,
        provider_id: &str,
        field: &str,
        sealed: &str,
    ) -> Result<String, PrivacyError> {
        let (event_type, bytes) = sealed_parts(sealed)?;
        let binding = Binding {
            provider_id,
            event_type,
            field,
        };
        decrypt(self, &binding.associated_data(), &bytes)
            .and_then(|clear| String::from_utf8(clear).ok())
            .ok_or_else(|| unreadable(&binding))
    }
}

/// `msg` encrypted under `key` with `aad`: a fresh random nonce, then the ciphertext and
/// its tag.
pub(crate) fn encrypt(key: &DataKey, aad: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut nonce = [0u8; NONCE_LEN];
    OsRng.fill_bytes(&mut nonce);
    encrypt_with(key, &nonce, aad, msg)
}

/// `msg` encrypted under `key` with `nonce` and `aad`: the nonce, then the ciphertext and
/// its tag.
fn encrypt_with(key: &DataKey, nonce: &[u8; NONCE_LEN], aad: &[u8], msg: &[u8]) -> Vec<u8> {
    let sealed = key
        .cipher()
        .encrypt(XNonce::from_slice(nonce), Payload { msg, aad })
        .expect("XChaCha20-Poly1305 encrypts any message shorter than 256 GiB");
    let mut bytes = nonce.to_vec();
    bytes.extend_from_slice(&sealed);
    bytes
}

/// What [`encrypt`] sealed under `key` with `aad`; `None` when it does not open.
pub(crate) fn decrypt(key: &DataKey, aad: &[u8], bytes: &[u8]) -> Option<Vec<u8>> {
    if bytes.len() < NONCE_LEN + TAG_LEN {
        return None;
    }
    let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
    key.cipher()
        .decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: ciphertext,
                aad,
            },
        )
        .ok()
}

fn unreadable(binding: &Binding<'_>) -> PrivacyError {
    PrivacyError::new(
        "sealed_text_unreadable",
        format!(
            "the sealed {} of provider {} ({}) does not open with its key: changed, or sealed for another provider, event or field",
            binding.field, binding.provider_id, binding.event_type
        ),
    )
}

/// Whether `text` is a sealed value (not clear text written before values were sealed).
pub(crate) fn is_sealed(text: &str) -> bool {
    text.starts_with(SEALED_PREFIX)
}

/// The event type, and the nonce and ciphertext, of a sealed value.
fn sealed_parts(sealed: &str) -> Result<(&str, Vec<u8>), PrivacyError> {
    let invalid = || {
        PrivacyError::new(
            "sealed_text_invalid",
            format!(
                "not a sealed value (`{SEALED_PREFIX}`, an event type, `:` and base64 of at least {} bytes)",
                NONCE_LEN + TAG_LEN
            ),
        )
    };
    let body = sealed.strip_prefix(SEALED_PREFIX).ok_or_else(invalid)?;
    let (event_type, body) = body.split_once(':').ok_or_else(invalid)?;
    if event_type.is_empty() {
        return Err(invalid());
    }
    let bytes = URL_SAFE_NO_PAD.decode(body).map_err(|_| invalid())?;
    if bytes.len() < NONCE_LEN + TAG_LEN {
        return Err(invalid());
    }
    Ok((event_type, bytes))
}

/// What a read shows of a personal field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// The value: opened, or clear text written before values were sealed.
    Clear(String),
    /// The provider was erased (its key withdrawn or destroyed): the value is gone.
    Erased,
}

impl Opened {
    /// The value, or [`ERASED`].
    pub fn into_text(self) -> String {
        match self {
            Opened::Clear(text) => text,
            Opened::Erased => ERASED.to_owned(),
        }
    }
}

/// `provider_id`'s personal `field` as a read shows it: clear text (a ledger written before
/// sealing) as it is, a sealed value opened with `key`, or [`Opened::Erased`] without a
/// key.
///
/// # Errors
/// As [`DataKey::open`]: a sealed value that does not open is an error, never `erased`
/// (tampering must not pass for an erasure).
pub fn open_field(
    key: Option<&DataKey>,
    provider_id: &str,
    field: &str,
    text: &str,
) -> Result<Opened, PrivacyError> {
    if !is_sealed(text) {
        return Ok(Opened::Clear(text.to_owned()));
    }
    match key {
        Some(key) => key.open(provider_id, field, text).map(Opened::Clear),
        None => {
            // Still a well-formed sealed value: a garbled one is reported as such.
            sealed_parts(text)?;
            Ok(Opened::Erased)
        }
    }
}

/// HMAC-SHA256 of `bytes` under a provider's data key: a digest of a command with personal
/// values (a re-send's check) that tells nothing once the key is destroyed.
pub(crate) fn keyed_digest(key: &DataKey, bytes: &[u8]) -> Vec<u8> {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key.bytes()).expect("HMAC takes a key of any length");
    mac.update(b"settle/keyed-content/v1");
    mac.update(bytes);
    mac.finalize().into_bytes().to_vec()
}

/// The keyed hash that stands for a personal value in uniqueness checks: HMAC-SHA256
/// under the index key, over the kind of value and its normalised text. Equal values of a
/// kind give equal digests; without the index key a digest tells nothing of the value.
pub struct BlindIndex(DataKey);

impl BlindIndex {
    /// The index over `key` (kept wrapped like a data key, so a master key rotation keeps
    /// every digest).
    pub fn new(key: DataKey) -> BlindIndex {
        BlindIndex(key)
    }

    /// The digest of `value` of `kind` (`iban`, `ach_account`, `wallet`), hex.
    pub fn digest(&self, kind: &str, value: &str) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.0.bytes())
            .expect("HMAC takes a key of any length");
        mac.update(b"settle/blind-index/v1");
        mac.update(&(kind.len() as u64).to_be_bytes());
        mac.update(kind.as_bytes());
        mac.update(value.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IBAN: &str = "DE89370400440532013000";

    fn binding<'a>(provider_id: &'a str, field: &'a str) -> Binding<'a> {
        Binding {
            provider_id,
            event_type: "provider.registered",
            field,
        }
    }

    #[test]
    fn a_sealed_value_opens_with_its_key_and_binding_only() {
        let key = DataKey::generate();
        let at = binding("prv_1", "payout_method.iban");
        let sealed = key.seal(&at, IBAN);
        assert!(is_sealed(&sealed));
        assert!(!sealed.contains(IBAN), "no clear text in {sealed}");
        assert!(sealed.starts_with("pd1:provider.registered:"), "{sealed}");
        assert_eq!(
            key.open("prv_1", "payout_method.iban", &sealed).unwrap(),
            IBAN
        );
        assert_ne!(key.seal(&at, IBAN), sealed, "a fresh nonce per value");

        let other_key = DataKey::generate();
        assert_eq!(
            other_key
                .open("prv_1", "payout_method.iban", &sealed)
                .unwrap_err()
                .code,
            "sealed_text_unreadable"
        );
        for (provider, field) in [("prv_2", "payout_method.iban"), ("prv_1", "email")] {
            assert_eq!(
                key.open(provider, field, &sealed).unwrap_err().code,
                "sealed_text_unreadable",
                "{provider} {field}"
            );
        }
        // The event type it names is bound too: renamed, it does not open.
        let renamed = sealed.replacen("provider.registered", "provider.updated", 1);
        assert_eq!(
            key.open("prv_1", "payout_method.iban", &renamed)
                .unwrap_err()
                .code,
            "sealed_text_unreadable"
        );
    }

    #[test]
    fn a_fixed_seal_repeats_for_the_same_value_only() {
        let key = DataKey::generate();
        let at = Binding {
            event_type: "approval.requested",
            ..binding("prv_1", "payout_method.iban")
        };
        let sealed = key.seal_fixed(&at, IBAN);
        assert_eq!(key.seal_fixed(&at, IBAN), sealed);
        assert_ne!(key.seal_fixed(&at, "DE02120300000000202051"), sealed);
        assert_ne!(
            key.seal_fixed(&binding("prv_2", "payout_method.iban"), IBAN),
            sealed
        );
        assert_ne!(DataKey::generate().seal_fixed(&at, IBAN), sealed);
        assert!(!sealed.contains(IBAN));
        assert_eq!(
            key.open("prv_1", "payout_method.iban", &sealed).unwrap(),
            IBAN
        );
    }

    #[test]
    fn a_changed_byte_is_detected() {
        let key = DataKey::generate();
        let at = binding("prv_1", "name");
        let sealed = key.seal(&at, "Jürgen Groß");
        let mut bytes = sealed_parts(&sealed).unwrap().1;
        for i in [0, NONCE_LEN, bytes.len() - 1] {
            bytes[i] ^= 1;
            let changed = format!(
                "{SEALED_PREFIX}provider.registered:{}",
                URL_SAFE_NO_PAD.encode(&bytes)
            );
            assert_eq!(
                key.open("prv_1", "name", &changed).unwrap_err().code,
                "sealed_text_unreadable",
                "byte {i}"
            );
            bytes[i] ^= 1;
        }
        for garbled in ["pd1:", "pd1:x:!!", "pd1:x:AAAA", "pd1::AAAA", "DE89"] {
            assert_eq!(
                key.open("prv_1", "name", garbled).unwrap_err().code,
                "sealed_text_invalid",
                "{garbled}"
            );
        }
    }

    #[test]
    fn reads_show_clear_text_opened_values_or_erased() {
        let key = DataKey::generate();
        let sealed = key.seal(&binding("prv_1", "email"), "ops@example.com");
        let open = |key: Option<&DataKey>, text: &str| open_field(key, "prv_1", "email", text);
        assert_eq!(
            open(Some(&key), &sealed).unwrap(),
            Opened::Clear("ops@example.com".into())
        );
        assert_eq!(open(None, &sealed).unwrap(), Opened::Erased);
        assert_eq!(open(None, &sealed).unwrap().into_text(), ERASED);
        assert_eq!(
            open(None, "old@example.com").unwrap(),
            Opened::Clear("old@example.com".into()),
            "clear text of a ledger written before sealing"
        );
        assert_eq!(
            open(None, "pd1:provider.registered:AAAA").unwrap_err().code,
            "sealed_text_invalid",
            "a garbled value is not an erasure"
        );
        let other = DataKey::generate();
        assert_eq!(
            open(Some(&other), &sealed).unwrap_err().code,
            "sealed_text_unreadable"
        );
    }

    #[test]
    fn blind_indexes_match_equal_values_under_one_key_only() {
        let key = DataKey::generate();
        let copy = DataKey::from_bytes(key.bytes()).unwrap();
        let (a, b) = (BlindIndex::new(key), BlindIndex::new(copy));
        assert_eq!(a.digest("iban", IBAN), b.digest("iban", IBAN));
        assert_ne!(
            a.digest("iban", IBAN),
            a.digest("iban", "DE02120300000000202051")
        );
        assert_ne!(a.digest("iban", IBAN), a.digest("wallet", IBAN));
        let other = BlindIndex::new(DataKey::generate());
        assert_ne!(a.digest("iban", IBAN), other.digest("iban", IBAN));
        assert!(!a.digest("iban", IBAN).contains("3704"));
    }
}
