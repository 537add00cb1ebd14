//! The roots settle's anchors sign and publish, and the Merkle paths that lead to them. Pure:
//! `settle statement verify` runs this with nothing but a statement and a root.
//!
//! - A **heads root** is the Merkle root over every stream's head, streams in byte order:
//!   leaf `SHA-256(0x00 || "settle/anchor/head/v1" || len(stream) || stream || seq || hash)`,
//!   node `SHA-256(0x01 || left || right)`, an odd node carried up a level unchanged.
//! - An anchor's **root** chains it to the anchor before it:
//!   `SHA-256("settle/anchor/root/v1" || previous root || n || len(at) || at || heads root)`
//!   (the first anchor's previous root: 32 zero bytes). A published root so commits to every
//!   anchor before it, and a path of links leads from any older anchor to it.
//! - A **statement tree** is the same Merkle tree over statement hashes (leaf domain
//!   `settle/statement/leaf/v1`): the root a Solana payout transaction's memo carries.

use sha2::{Digest, Sha256};

/// A SHA-256 digest.
pub type Digest32 = [u8; 32];

/// The root before the first anchor.
pub const ROOT_ZERO: Digest32 = [0; 32];

const HEAD_LEAF: &[u8] = b"settle/anchor/head/v1";
const STATEMENT_LEAF: &[u8] = b"settle/statement/leaf/v1";
const ROOT_DOMAIN: &[u8] = b"settle/anchor/root/v1";
const SIGNED_DOMAIN: &[u8] = b"settle/anchor/signed/v1";
const EMPTY_TREE: &[u8] = b"settle/merkle/empty/v1";
const STATEMENT_DOMAIN: &[u8] = b"settle/statement/v1";

fn length_prefixed(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}

/// The leaf of a stream's head.
pub fn head_leaf(stream: &str, seq: i64, hash: &[u8]) -> Digest32 {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(HEAD_LEAF);
    length_prefixed(&mut h, stream.as_bytes());
    h.update(seq.to_be_bytes());
    length_prefixed(&mut h, hash);
    h.finalize().into()
}

/// The leaf of a statement's hash in a payout transaction's statement tree.
pub fn statement_leaf(statement_hash: &Digest32) -> Digest32 {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(STATEMENT_LEAF);
    h.update(statement_hash);
    h.finalize().into()
}

/// What a payout commits to when it is paid: its statement's hash. The statement's events
/// end at the payout's `payout.created` event, at `seq` on the provider's `stream`, whose
/// chained `event_hash` commits to every event before it; the hash adds whose payout it is
/// and its amount.
pub fn statement_hash(
    provider_id: &str,
    payout_id: &str,
    stream: &str,
    seq: i64,
    event_hash: &[u8],
    amount_micro_usdc: i64,
) -> Digest32 {
    let mut h = Sha256::new();
    h.update(STATEMENT_DOMAIN);
    length_prefixed(&mut h, provider_id.as_bytes());
    length_prefixed(&mut h, payout_id.as_bytes());
    length_prefixed(&mut h, stream.as_bytes());
    h.update(seq.to_be_bytes());
    length_prefixed(&mut h, event_hash);
    h.update(amount_micro_usdc.to_be_bytes());
    h.finalize().into()
}

/// The root of a payout transaction's statement tree (statement hashes in transfer order).
pub fn statements_root(statement_hashes: &[Digest32]) -> Digest32 {
    merkle_root(&statement_leaves(statement_hashes))
}

/// The path of statement `index` to [`statements_root`].
pub fn statements_path(statement_hashes: &[Digest32], index: usize) -> Vec<Step> {
    merkle_path(&statement_leaves(statement_hashes), index)
}

/// The leaves of [`statements_root`].
pub fn statement_leaves(statement_hashes: &[Digest32]) -> Vec<Digest32> {
    statement_hashes.iter().map(statement_leaf).collect()
}

fn node(left: &Digest32, right: &Digest32) -> Digest32 {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// One step of a Merkle path: the sibling's digest and which side it sits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The sibling is on the left: `node(sibling, current)`.
    Left(Digest32),
    /// The sibling is on the right: `node(current, sibling)`.
    Right(Digest32),
}

impl Step {
    /// `L:<hex>` or `R:<hex>`, as statements write it.
    pub fn to_text(&self) -> String {
        match self {
            Step::Left(d) => format!("L:{}", hex::encode(d)),
            Step::Right(d) => format!("R:{}", hex::encode(d)),
        }
    }

    /// Reads [`Step::to_text`]'s form.
    pub fn from_text(text: &str) -> Option<Step> {
        let (side, digest) = text.split_once(':')?;
        let digest = digest32(digest)?;
        match side {
            "L" => Some(Step::Left(digest)),
            "R" => Some(Step::Right(digest)),
            _ => None,
        }
    }
}

/// 64 hexadecimal digits read as a digest.
pub fn digest32(text: &str) -> Option<Digest32> {
    hex::decode(text).ok()?.try_into().ok()
}

/// The level above `level`: each pair joined, an odd last node carried up.
fn next_level(level: &[Digest32]) -> Vec<Digest32> {
    level
        .chunks(2)
        .map(|pair| match pair {
            [left, right] => node(left, right),
            [single] => *single,
            _ => unreachable!("chunks of two"),
        })
        .collect()
}

/// The root of the tree over `leaves` (a fixed digest when there are none).
pub fn merkle_root(leaves: &[Digest32]) -> Digest32 {
    if leaves.is_empty() {
        return Sha256::digest(EMPTY_TREE).into();
    }
    let mut level = leaves.to_vec();
    while level.len() > 1 {
        level = next_level(&level);
    }
    level[0]
}

/// The path from leaf `index` to the root of the tree over `leaves`.
pub fn merkle_path(leaves: &[Digest32], mut index: usize) -> Vec<Step> {
    let mut path = Vec::new();
    let mut level = leaves.to_vec();
    while level.len() > 1 {
        let sibling = index ^ 1;
        if sibling < level.len() {
            path.push(if sibling < index {
                Step::Left(level[sibling])
            } else {
                Step::Right(level[sibling])
            });
        }
        level = next_level(&level);
        index /= 2;
    }
    path
}

/// The root a path leads to from `leaf`.
pub fn fold_path(leaf: Digest32, path: &[Step]) -> Digest32 {
    path.iter().fold(leaf, |current, step| match step {
        Step::Left(sibling) => node(sibling, &current),
        Step::Right(sibling) => node(&current, sibling),
    })
}

/// Anchor `n`'s root, chained to the root of anchor `n - 1`.
pub fn chain_root(previous: &Digest32, n: i64, at: &str, heads_root: &Digest32) -> Digest32 {
    let mut h = Sha256::new();
    h.update(ROOT_DOMAIN);
    h.update(previous);
    h.update(n.to_be_bytes());
    length_prefixed(&mut h, at.as_bytes());
    h.update(heads_root);
    h.finalize().into()
}

/// The bytes the anchor key signs for a root.
pub fn signed_message(root: &Digest32) -> Vec<u8> {
    [SIGNED_DOMAIN, root.as_slice()].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: usize) -> Vec<Digest32> {
        (0..n)
            .map(|i| head_leaf(&format!("s{i}"), i as i64, &[i as u8; 32]))
            .collect()
    }

    #[test]
    fn every_leaf_s_path_leads_to_the_root_and_no_other_leaf_does() {
        for n in 1..=9 {
            let leaves = leaves(n);
            let root = merkle_root(&leaves);
            for i in 0..n {
                let path = merkle_path(&leaves, i);
                assert_eq!(fold_path(leaves[i], &path), root, "n={n} i={i}");
                let other = leaves[(i + 1) % n];
                if n > 1 {
                    assert_ne!(fold_path(other, &path), root, "n={n} i={i}");
                }
            }
        }
    }

    #[test]
    fn a_step_reads_back_and_a_root_depends_on_every_input() {
        let step = Step::Left([7; 32]);
        assert_eq!(Step::from_text(&step.to_text()), Some(step));
        assert_eq!(Step::from_text("X:00"), None);
        let base = chain_root(&ROOT_ZERO, 1, "2026-12-01T00:00:00.000Z", &[1; 32]);
        assert_ne!(
            base,
            chain_root(&[1; 32], 1, "2026-12-01T00:00:00.000Z", &[1; 32])
        );
        assert_ne!(
            base,
            chain_root(&ROOT_ZERO, 2, "2026-12-01T00:00:00.000Z", &[1; 32])
        );
        assert_ne!(
            base,
            chain_root(&ROOT_ZERO, 1, "2026-12-01T00:00:01.000Z", &[1; 32])
        );
        assert_ne!(
            base,
            chain_root(&ROOT_ZERO, 1, "2026-12-01T00:00:00.000Z", &[2; 32])
        );
        assert_ne!(head_leaf("a", 1, &[0; 32]), head_leaf("a", 2, &[0; 32]));
    }
}
