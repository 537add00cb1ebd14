//! Identifiers: parsed newtypes. After `parse`, the value is proof of a valid id.
//!
//! Every id is 1..=128 characters of `[A-Za-z0-9._:-]`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::DomainError;

/// The longest accepted id, in characters.
pub const ID_LEN_MAX: usize = 128;

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

/// Checks the shared id grammar; `code` names the rejection.
pub fn check_id(text: &str, what: &str, code: &'static str) -> Result<(), DomainError> {
    if text.is_empty() || text.len() > ID_LEN_MAX || !text.chars().all(is_id_char) {
        return Err(DomainError::new(
            code,
            format!("{what} must be 1..={ID_LEN_MAX} characters of [A-Za-z0-9._:-], got {text:?}"),
        ));
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $what:literal, $code:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            pub fn parse(text: &str) -> Result<$name, DomainError> {
                check_id(text, $what, $code)?;
                Ok($name(text.to_owned()))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = DomainError;
            fn from_str(text: &str) -> Result<$name, DomainError> {
                $name::parse(text)
            }
        }

        /// Read-only: the text of a parsed id is the id (a `str` cannot be changed in place).
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        /// On the wire the id is its text, as the string it replaced was.
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        /// Read through [`Self::parse`]: a stored or sent id outside the grammar is refused
        /// with the grammar's message, never taken as proof.
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
                $name::parse(&text).map_err(|e| serde::de::Error::custom(e.message))
            }
        }
    };
}

id_type!(
    /// A provider (the owner of GPUs, the payee).
    ProviderId, "provider_id", "invalid_provider_id"
);
id_type!(
    /// A GPU, registered to exactly one provider for life.
    GpuId, "gpu_id", "invalid_gpu_id"
);
id_type!(
    /// A usage event's idempotency key, unique per provider (SPEC §4).
    EventId, "event_id", "invalid_event_id"
);
id_type!(
    /// The rental a usage event belongs to.
    RentalId, "rental_id", "invalid_rental_id"
);
id_type!(
    /// An adjustment's idempotency key.
    AdjustmentId, "adjustment_id", "invalid_adjustment_id"
);
id_type!(
    /// A payout.
    PayoutId, "payout_id", "invalid_payout_id"
);
id_type!(
    /// The optional idempotency key of a `provider.update` import line.
    UpdateId, "update_id", "invalid_update_id"
);
id_type!(
    /// The optional idempotency key of an `fx.rate_set` import line.
    FxId, "fx_id", "invalid_fx_id"
);

/// A GPU model name (free string, e.g. `H100-80GB`): 1..=64 printable ASCII without spaces.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuModel(String);

impl GpuModel {
    pub fn parse(text: &str) -> Result<GpuModel, DomainError> {
        if text.is_empty() || text.len() > 64 || !text.chars().all(|c| c.is_ascii_graphic()) {
            return Err(DomainError::new(
                "invalid_model",
                format!("model must be 1..=64 printable ASCII characters, got {text:?}"),
            ));
        }
        Ok(GpuModel(text.to_owned()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_grammar() {
        assert!(EventId::parse("agt-19:000123").is_ok());
        assert!(EventId::parse(&"a".repeat(128)).is_ok());
        assert_eq!(
            EventId::parse(&"a".repeat(129)).unwrap_err().code,
            "invalid_event_id"
        );
        assert!(EventId::parse("").is_err());
        assert!(EventId::parse("a b").is_err());
        assert!(ProviderId::parse("prv_42").is_ok());
        assert!(ProviderId::parse("prv/42").is_err());
        assert!(GpuModel::parse("H100-80GB").is_ok());
        assert!(GpuModel::parse("H100 80GB").is_err());
        assert_eq!(GpuModel::parse("").unwrap_err().code, "invalid_model");
        assert!(GpuModel::parse(&"A".repeat(64)).is_ok());
        assert_eq!(
            GpuModel::parse(&"A".repeat(65)).unwrap_err().code,
            "invalid_model"
        );
    }

    /// An event written when its provider id was a `String` reads back as the same text,
    /// byte for byte, and an id outside the grammar is refused on read, never taken.
    #[test]
    fn a_provider_id_in_an_event_keeps_its_wire_spelling_and_is_checked_on_read() {
        use crate::event::EventBody;
        let old = r#"{"payout_id":"po_1","provider_id":"prv_a:eu-1","reason":"manual"}"#;
        let body = EventBody::from_json("payout.held", 1, old).expect("an old event reads");
        let EventBody::PayoutHeld(held) = &body else {
            panic!("payout.held, got {body:?}");
        };
        assert_eq!(held.provider_id, "prv_a:eu-1");
        assert_eq!(body.to_json(), old);

        let bad = old.replace("prv_a:eu-1", "prv a");
        let refused = EventBody::from_json("payout.held", 1, &bad).unwrap_err();
        assert_eq!(refused.code, "invalid_event_payload");
        assert!(
            refused
                .message
                .contains("provider_id must be 1..=128 characters"),
            "{}",
            refused.message
        );
        assert!(serde_json::from_str::<ProviderId>("\"\"").is_err());
        assert_eq!("prv_7".parse::<ProviderId>().unwrap().as_str(), "prv_7");
    }
}
