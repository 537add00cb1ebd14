//! Canonical bytes of an event and the SHA-256 hash chain over each stream.

use sha2::{Digest, Sha256};

use super::StoredEvent;

/// The `prev_hash` of a stream's first event.
pub const GENESIS_HASH: [u8; 32] = [0; 32];

fn field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn optional(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            out.push(1);
            field(out, b);
        }
        None => out.push(0),
    }
}

/// The canonical bytes of an event: every stored field except the hashes, each
/// length-prefixed, so no two different events share the same bytes.
pub fn canonical_bytes(e: &StoredEvent) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + e.payload.len() + e.lines.len());
    out.extend_from_slice(b"settle-event-v1");
    field(&mut out, e.stream.as_bytes());
    out.extend_from_slice(&e.seq.to_be_bytes());
    field(&mut out, e.event_type.as_bytes());
    out.extend_from_slice(&e.version.to_be_bytes());
    optional(&mut out, e.idem_key.as_deref().map(str::as_bytes));
    optional(&mut out, e.content_hash.as_deref());
    field(&mut out, e.actor.as_bytes());
    out.extend_from_slice(&e.recorded_at_ms.to_be_bytes());
    field(&mut out, e.payload.as_bytes());
    field(&mut out, e.lines.as_bytes());
    out
}

/// `SHA-256(prev_hash || canonical_bytes)`.
pub fn event_hash(prev_hash: &[u8], canonical: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(prev_hash);
    hasher.update(canonical);
    hasher.finalize().into()
}
