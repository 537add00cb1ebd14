//! Operators: the people who may request and approve the commands that move or redirect
//! money (SPEC §9). Each is a name and an Ed25519 public key booked on the ledger
//! (`operator.added`, `operator.key_rotated`, `operator.removed`, on the platform stream);
//! the private key never reaches the ledger: the operator's own client signs.
//!
//! What is signed (the bytes, domain-separated so no signature counts for another purpose):
//! - a **request**: `settle/control/v1/request:` + the hex [`content_hash`] of the command;
//! - a **decision**: `settle/control/v1/approve:` or `settle/control/v1/reject:` + the
//!   approval id + `:` + the hex content hash.
//!
//! The content hash is `SHA-256("settle/control/v1|" + kind + "|" + command)`, `command`
//! being the canonical JSON the request holds (what is executed on approval). Two operators
//! are one person when they share a name (case-insensitive) or a key: the approver must
//! differ from the requester in both.

use std::collections::BTreeMap;

use ed25519_dalek::{Signature, VerifyingKey};
use sha2::{Digest, Sha256};

use super::DomainError;
use super::event::ApprovalDecision;

/// The event types that change the operators in force (platform stream).
pub const OPERATOR_EVENTS: [&str; 3] =
    ["operator.added", "operator.key_rotated", "operator.removed"];

/// The longest operator name.
pub const OPERATOR_NAME_LEN_MAX: usize = 64;

/// An operator's name: 1 to 64 of `[a-z0-9._@-]`, written in lower case (so two spellings
/// are one name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OperatorName(String);

impl OperatorName {
    pub fn parse(text: &str) -> Result<OperatorName, DomainError> {
        let name = text.trim().to_ascii_lowercase();
        let valid = !name.is_empty()
            && name.len() <= OPERATOR_NAME_LEN_MAX
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
        if valid {
            Ok(OperatorName(name))
        } else {
            Err(DomainError::new(
                "invalid_operator_name",
                format!(
                    "an operator name is 1 to {OPERATOR_NAME_LEN_MAX} letters, digits or . _ - @"
                ),
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An operator's Ed25519 public key, written in base58 (as Solana writes keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperatorKey(VerifyingKey);

impl OperatorKey {
    pub fn parse(text: &str) -> Result<OperatorKey, DomainError> {
        let invalid = || {
            DomainError::new(
                "invalid_operator_key",
                "an operator key is an Ed25519 public key of 32 bytes in base58",
            )
        };
        let bytes = bs58::decode(text.trim())
            .into_vec()
            .map_err(|_| invalid())?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| invalid())?;
        let key = VerifyingKey::from_bytes(&bytes).map_err(|_| invalid())?;
        if key.is_weak() {
            return Err(invalid());
        }
        Ok(OperatorKey(key))
    }

    pub fn from_verifying_key(key: VerifyingKey) -> OperatorKey {
        OperatorKey(key)
    }

    pub fn to_base58(&self) -> String {
        bs58::encode(self.0.as_bytes()).into_string()
    }

    /// Whether `signature` (base58, 64 bytes) is this key's signature of `message`
    /// (strict verification: no malleable or small-order forms).
    pub fn verifies(&self, message: &[u8], signature: &str) -> bool {
        let Ok(bytes) = bs58::decode(signature.trim()).into_vec() else {
            return false;
        };
        let Ok(bytes) = <[u8; 64]>::try_from(bytes.as_slice()) else {
            return false;
        };
        let signature = Signature::from_bytes(&bytes);
        self.0.verify_strict(message, &signature).is_ok()
    }
}

/// The content hash a request and its decision sign (module docs).
pub fn content_hash(kind: &str, command: &str) -> [u8; 32] {
    Sha256::digest(format!("settle/control/v1|{kind}|{command}").as_bytes()).into()
}

/// The bytes a requester signs.
pub fn request_message(content_hash_hex: &str) -> Vec<u8> {
    format!("settle/control/v1/request:{content_hash_hex}").into_bytes()
}

/// The bytes an approver (`approved`) or rejecter signs.
pub fn decision_message(approved: bool, approval_id: &str, content_hash_hex: &str) -> Vec<u8> {
    let verb = if approved { "approve" } else { "reject" };
    format!("settle/control/v1/{verb}:{approval_id}:{content_hash_hex}").into_bytes()
}

/// An operator in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operator {
    pub name: OperatorName,
    pub key: OperatorKey,
    /// When it was added (`recorded_at` of `operator.added`).
    pub added_at_ms: i64,
}

/// A signature that a named operator gave, to be checked against the operators in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed {
    pub operator: String,
    pub signature: String,
}

/// The operators in force: the fold of the `operator.*` events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Operators {
    by_name: BTreeMap<OperatorName, Operator>,
}

impl Operators {
    /// No operator: control is not yet provable on this ledger (legacy labels decide).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn get(&self, name: &str) -> Option<&Operator> {
        OperatorName::parse(name)
            .ok()
            .and_then(|n| self.by_name.get(&n))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Operator> {
        self.by_name.values()
    }

    /// Adds an operator; refused when its name or key is already in force (one person, one
    /// operator).
    pub fn add(&mut self, operator: Operator) -> Result<(), DomainError> {
        if self.by_name.contains_key(&operator.name) {
            return Err(DomainError::new(
                "operator_exists",
                format!("operator {} exists", operator.name.as_str()),
            ));
        }
        if self.iter().any(|o| o.key == operator.key) {
            return Err(DomainError::new(
                "operator_key_in_use",
                "another operator holds this key: one person is one operator",
            ));
        }
        self.by_name.insert(operator.name.clone(), operator);
        Ok(())
    }

    /// Replaces an operator's key.
    pub fn rotate(&mut self, name: &OperatorName, key: OperatorKey) -> Result<(), DomainError> {
        if self.iter().any(|o| o.key == key) {
            return Err(DomainError::new(
                "operator_key_in_use",
                "an operator holds this key already",
            ));
        }
        match self.by_name.get_mut(name) {
            Some(o) => {
                o.key = key;
                Ok(())
            }
            None => Err(unknown(name.as_str())),
        }
    }

    /// Removes an operator.
    pub fn remove(&mut self, name: &OperatorName) -> Result<(), DomainError> {
        self.by_name
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| unknown(name.as_str()))
    }

    /// Folds an `operator.*` event booked at `recorded_at_ms` (other events change
    /// nothing); a refusal means the chain holds an impossible operator change.
    pub fn apply(
        &mut self,
        recorded_at_ms: i64,
        body: &super::event::EventBody,
    ) -> Result<(), DomainError> {
        use super::event::EventBody;
        match body {
            EventBody::OperatorAdded(a) => self.add(Operator {
                name: OperatorName::parse(&a.operator)?,
                key: OperatorKey::parse(&a.public_key)?,
                added_at_ms: recorded_at_ms,
            }),
            EventBody::OperatorKeyRotated(r) => self.rotate(
                &OperatorName::parse(&r.operator)?,
                OperatorKey::parse(&r.public_key)?,
            ),
            EventBody::OperatorRemoved(r) => self.remove(&OperatorName::parse(&r.operator)?),
            _ => Ok(()),
        }
    }

    /// The operator whose signature `signed` is of `message`: `unknown_operator` or
    /// `invalid_signature` otherwise.
    pub fn check(&self, signed: &Signed, message: &[u8]) -> Result<&Operator, DomainError> {
        let operator = self
            .get(&signed.operator)
            .ok_or_else(|| unknown(&signed.operator))?;
        if !operator.key.verifies(message, &signed.signature) {
            return Err(DomainError::new(
                "invalid_signature",
                format!(
                    "the signature is not operator {}'s signature of this command",
                    operator.name.as_str()
                ),
            ));
        }
        Ok(operator)
    }
}

/// A break of dual control found on the chain by [`check_control`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlProblem {
    /// The event's position on the platform stream.
    pub seq: i64,
    /// `unsigned_request`, `content_hash_mismatch`, `invalid_request_signature`,
    /// `unsigned_decision`, `invalid_decision_signature`, `self_approved`,
    /// `unknown_request` or `invalid_operator_event`.
    pub kind: &'static str,
    pub detail: String,
}

/// Checks the platform stream's `operator.*`, `approval.requested` and `approval.decided`
/// events (`(seq, recorded_at_ms, event)`), in stream order: once a ledger has operators,
/// every request carries its command's content hash and its requester's valid signature,
/// and every decision a different operator's valid signature of that hash, each against the
/// keys in force at that point of the chain. A row written behind the engine's back (a
/// decision without a signature, a command changed under its hash) is named. The proof it
/// returns also ties gated events to their approvals ([`ControlProof::unapproved_adjustment`]).
pub fn check_control<'a>(
    events: impl IntoIterator<Item = (i64, i64, &'a super::event::EventBody)>,
) -> ControlProof {
    use super::event::EventBody;
    let mut check = ControlCheck::default();
    for (seq, recorded_at_ms, body) in events {
        let found = match body {
            EventBody::OperatorAdded(_)
            | EventBody::OperatorKeyRotated(_)
            | EventBody::OperatorRemoved(_) => {
                check.proof.operators_since_ms.get_or_insert(recorded_at_ms);
                check.proof.operators_since_seq.get_or_insert(seq);
                check.operator_event(body)
            }
            EventBody::ApprovalRequested(r) => check.requested(r),
            EventBody::ApprovalDecided(d) => check.decided(d),
            _ => None,
        };
        if let Some((kind, detail)) = found {
            check
                .proof
                .problems
                .push(ControlProblem { seq, kind, detail });
        }
    }
    check.proof
}

/// What [`check_control`] found: the problems, since when the ledger has operators, and
/// the commands of the approvals whose signatures verify.
#[derive(Clone, Debug, Default)]
pub struct ControlProof {
    pub problems: Vec<ControlProblem>,
    /// When the first operator was put in force: gated events booked from then on must
    /// run under a signed approval.
    pub operators_since_ms: Option<i64>,
    /// The platform-stream position of that first operator event: a platform event before
    /// it was booked before control, whatever its time.
    pub operators_since_seq: Option<i64>,
    /// Approval id → the command a verified approval executed.
    approved: BTreeMap<String, String>,
    /// `(stream, seq)` of each event a verified approval's command appended (listed on its
    /// decision) → (its hash in hex, the request's kind, the approval id).
    pub executed: BTreeMap<(String, i64), (String, String, String)>,
}

impl ControlProof {
    /// Why an adjustment of `amount ≥ threshold_micro_usdc` booked at `recorded_at_ms` is
    /// not proven: booked once the ledger had operators, it must name a verified approval
    /// of exactly this adjustment (`None` when it does, or when it was not gated).
    pub fn unapproved_adjustment(
        &self,
        recorded_at_ms: i64,
        a: &super::event::AdjustmentPosted,
        threshold_micro_usdc: i64,
    ) -> Option<String> {
        let gated = a.amount_micro_usdc.unsigned_abs() >= threshold_micro_usdc.unsigned_abs()
            && self.operators_since_ms.is_some_and(|t| recorded_at_ms >= t);
        if !gated {
            return None;
        }
        let Some(approval_id) = &a.approval_id else {
            return Some(format!(
                "adjustment {} of {} µUSDC names no approval",
                a.adjustment_id, a.amount_micro_usdc
            ));
        };
        let Some(command) = self.approved.get(approval_id) else {
            return Some(format!(
                "adjustment {} names {approval_id}, which is no approval with valid signatures",
                a.adjustment_id
            ));
        };
        let c: serde_json::Value = serde_json::from_str(command).unwrap_or_default();
        let same = c["type"] == "adjustment"
            && c["adjustment_id"] == a.adjustment_id.as_str()
            && c["provider_id"] == a.provider_id.as_str()
            && c["amount_usdc"] == super::money::format_micro_usdc(a.amount_micro_usdc).as_str();
        (!same).then(|| {
            format!(
                "adjustment {} is not the command approval {approval_id} approved",
                a.adjustment_id
            )
        })
    }
}

/// The state [`check_control`] folds: the operators in force and the requests seen.
#[derive(Default)]
struct ControlCheck {
    operators: Operators,
    /// Approval id → (the content hash its request recorded, its requesting operator, its
    /// command, its kind).
    requests: BTreeMap<String, (Option<String>, Option<String>, String, String)>,
    proof: ControlProof,
}

type Found = Option<(&'static str, String)>;

impl ControlCheck {
    fn operator_event(&mut self, body: &super::event::EventBody) -> Found {
        self.operators
            .apply(0, body)
            .err()
            .map(|e| ("invalid_operator_event", e.message))
    }

    fn requested(&mut self, r: &super::event::ApprovalRequested) -> Found {
        let hash = hex::encode(content_hash(&r.kind, &r.command));
        self.requests.insert(
            r.approval_id.clone(),
            (
                r.content_hash.clone(),
                r.requester_operator.clone(),
                r.command.clone(),
                r.kind.clone(),
            ),
        );
        if self.operators.is_empty() {
            return None;
        }
        let (Some(operator), Some(signature)) = (&r.requester_operator, &r.requester_signature)
        else {
            return Some((
                "unsigned_request",
                format!(
                    "request {} has no operator's signature on a ledger with operators",
                    r.approval_id
                ),
            ));
        };
        if r.content_hash.as_deref() != Some(hash.as_str()) {
            return Some((
                "content_hash_mismatch",
                format!(
                    "request {}'s command does not hash to the hash its signatures cover",
                    r.approval_id
                ),
            ));
        }
        let signed = Signed {
            operator: operator.clone(),
            signature: signature.clone(),
        };
        self.operators
            .check(&signed, &request_message(&hash))
            .err()
            .map(|e| {
                (
                    "invalid_request_signature",
                    format!("request {}: {}", r.approval_id, e.message),
                )
            })
    }

    fn decided(&mut self, d: &super::event::ApprovalDecided) -> Found {
        if self.operators.is_empty() {
            return None;
        }
        let (Some(operator), Some(signature)) = (&d.decider_operator, &d.decider_signature) else {
            return Some((
                "unsigned_decision",
                format!(
                    "approval {} was decided without an operator's signature on a ledger \
                     with operators",
                    d.approval_id
                ),
            ));
        };
        let Some((Some(hash), requester, command, kind)) = self.requests.get(&d.approval_id) else {
            return Some((
                "unknown_request",
                format!(
                    "approval {} decides no signed request before it",
                    d.approval_id
                ),
            ));
        };
        if requester.as_deref() == Some(operator.as_str()) {
            return Some((
                "self_approved",
                format!(
                    "operator {operator} decided their own request {}",
                    d.approval_id
                ),
            ));
        }
        let signed = Signed {
            operator: operator.clone(),
            signature: signature.clone(),
        };
        let approved = d.decision == ApprovalDecision::Approved;
        let message = decision_message(approved, &d.approval_id, hash);
        if let Err(e) = self.operators.check(&signed, &message) {
            return Some((
                "invalid_decision_signature",
                format!("approval {}: {}", d.approval_id, e.message),
            ));
        }
        if approved {
            self.proof
                .approved
                .insert(d.approval_id.clone(), command.clone());
            for e in &d.executed {
                self.proof.executed.insert(
                    (e.stream.clone(), e.seq),
                    (e.hash.clone(), kind.clone(), d.approval_id.clone()),
                );
            }
        }
        None
    }
}

fn unknown(name: &str) -> DomainError {
    DomainError::new(
        "unknown_operator",
        format!("no operator {name} is in force on this ledger"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn operator(name: &str, k: &SigningKey) -> Operator {
        Operator {
            name: OperatorName::parse(name).unwrap(),
            key: OperatorKey::from_verifying_key(k.verifying_key()),
            added_at_ms: 0,
        }
    }

    fn sign(k: &SigningKey, message: &[u8]) -> String {
        bs58::encode(k.sign(message).to_bytes()).into_string()
    }

    #[test]
    fn a_signature_counts_only_for_its_operator_and_its_purpose() {
        let (alice, bob) = (key(1), key(2));
        let mut ops = Operators::default();
        ops.add(operator("alice", &alice)).unwrap();
        ops.add(operator("bob", &bob)).unwrap();
        let hash = hex::encode(content_hash("adjustment", "{\"type\":\"adjustment\"}"));
        let request = request_message(&hash);
        let signed = Signed {
            operator: "ALICE".into(),
            signature: sign(&alice, &request),
        };
        assert_eq!(ops.check(&signed, &request).unwrap().name.as_str(), "alice");
        // Bob's name on Alice's signature, another command, or the request signature
        // offered as an approval: refused.
        let as_bob = Signed {
            operator: "bob".into(),
            ..signed.clone()
        };
        assert_eq!(
            ops.check(&as_bob, &request).unwrap_err().code,
            "invalid_signature"
        );
        let other = request_message(&hex::encode(content_hash("adjustment", "{}")));
        assert_eq!(
            ops.check(&signed, &other).unwrap_err().code,
            "invalid_signature"
        );
        let approval = decision_message(true, "apr_1", &hash);
        assert_eq!(
            ops.check(&signed, &approval).unwrap_err().code,
            "invalid_signature"
        );
        let nobody = Signed {
            operator: "carol".into(),
            ..signed
        };
        assert_eq!(
            ops.check(&nobody, &request).unwrap_err().code,
            "unknown_operator"
        );
    }

    #[test]
    fn one_person_is_one_operator() {
        let alice = key(1);
        let mut ops = Operators::default();
        ops.add(operator("alice", &alice)).unwrap();
        assert_eq!(
            ops.add(operator("Alice", &key(3))).unwrap_err().code,
            "operator_exists"
        );
        assert_eq!(
            ops.add(operator("alice2", &alice)).unwrap_err().code,
            "operator_key_in_use"
        );
        assert_eq!(
            OperatorName::parse("a b").unwrap_err().code,
            "invalid_operator_name"
        );
        assert_eq!(
            OperatorKey::parse("xyz").unwrap_err().code,
            "invalid_operator_key"
        );
        let printed = OperatorKey::from_verifying_key(alice.verifying_key()).to_base58();
        assert_eq!(
            OperatorKey::parse(&printed).unwrap(),
            ops.get("alice").unwrap().key
        );
    }
}
