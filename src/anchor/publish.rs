//! Publishing an anchor's root on Solana: a memo transaction signed (and paid) by the anchor
//! key, `settle anchor v1 n=<n> root=<64 hex>`, recorded in `anchor_publications`. Reading
//! one back checks that the anchor key signed it.

use std::time::Duration;

use settle_solana::{Pubkey, RpcChain, Signature};

use super::root::{Digest32, digest32};
use super::{AnchorError, Anchors, key::AnchorKey};
use crate::store::Store;
use crate::store::anchors::{PublicationRow, publications, record_publication};

/// The start of an anchor memo.
pub const MEMO_PREFIX: &str = "settle anchor v1 ";

/// The memo publishing anchor `n`'s root.
pub fn memo(n: i64, root: &Digest32) -> String {
    format!("{MEMO_PREFIX}n={n} root={}", hex::encode(root))
}

/// The anchor number and root of an anchor memo.
pub(crate) fn parse_memo(text: &str) -> Option<(i64, Digest32)> {
    let rest = text.strip_prefix(MEMO_PREFIX)?;
    let (n, root) = rest.split_once(' ')?;
    let n = n.strip_prefix("n=")?.parse().ok()?;
    let root = digest32(root.strip_prefix("root=")?)?;
    Some((n, root))
}

/// What [`publish`] did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Published {
    pub n: i64,
    pub root: String,
    pub signature: String,
    /// The anchor key (base58): the transaction's fee payer and signer.
    pub key: String,
    /// Whether this call sent it (false: it had been published before).
    pub sent: bool,
}

/// Publishes the newest anchor of `log` on the chain at `rpc_url` (unless it was
/// published before), waiting at most `wait` for it to be confirmed.
pub async fn publish(
    store: &Store,
    log: &Anchors,
    key: &AnchorKey,
    rpc_url: &str,
    wait: Duration,
    now_ms: i64,
) -> Result<Published, AnchorError> {
    let Some(newest) = log.entries.last() else {
        return Err(AnchorError::NothingToPublish);
    };
    let root = hex::encode(newest.root);
    if let Some(done) = publications(store)
        .await?
        .into_iter()
        .find(|p| p.n == newest.n && p.root == root)
    {
        return Ok(Published {
            n: done.n,
            root,
            signature: done.signature,
            key: key.public(),
            sent: false,
        });
    }
    let chain = RpcChain::new(rpc_url, settle_solana::Confirmation::Confirmed);
    let signature = settle_solana::publish_memo(
        &chain,
        &key.solana_keypair(),
        &memo(newest.n, &newest.root),
        wait,
        Duration::from_millis(200),
    )
    .await
    .map_err(|e| AnchorError::Publish(e.to_string()))?;
    record_publication(
        store,
        &PublicationRow {
            signature: signature.to_string(),
            n: newest.n,
            root: root.clone(),
            at_ms: now_ms,
        },
    )
    .await?;
    Ok(Published {
        n: newest.n,
        root,
        signature: signature.to_string(),
        key: key.public(),
        sent: true,
    })
}

/// An anchor read back from the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnChain {
    pub n: i64,
    pub root: Digest32,
    /// The key that signed and paid for the transaction (base58).
    pub key: String,
}

/// The transaction `signature` as the node at `rpc_url` holds it, its signatures verified;
/// answers it with its fee payer.
async fn verified_transaction(
    rpc_url: &str,
    signature: &str,
) -> Result<(settle_solana::VersionedTransaction, Pubkey), String> {
    let signature: Signature = signature
        .parse()
        .map_err(|_| format!("{signature} is not a transaction signature"))?;
    let chain = RpcChain::new(rpc_url, settle_solana::Confirmation::Confirmed);
    let tx = chain
        .landed_transaction(&signature)
        .await
        .map_err(|e| format!("reading {signature} from {rpc_url}: {e}"))?
        .ok_or_else(|| format!("{rpc_url} does not know the transaction {signature}"))?;
    let payer = settle_solana::verified_fee_payer(&tx)
        .ok_or_else(|| format!("the signatures of {signature} do not verify"))?;
    Ok((tx, payer))
}

/// The anchor the transaction `signature` published, read from the node at `rpc_url`: its
/// signatures must verify and one memo must be an anchor memo.
pub(crate) async fn read_published(rpc_url: &str, signature: &str) -> Result<OnChain, String> {
    let (tx, payer) = verified_transaction(rpc_url, signature).await?;
    let (n, root) = settle_solana::memo_texts(&tx)
        .iter()
        .find_map(|m| parse_memo(m))
        .ok_or_else(|| format!("{signature} carries no anchor memo"))?;
    Ok(OnChain {
        n,
        root,
        key: payer.to_string(),
    })
}

/// The statement root the memo of payment transaction `signature` carries.
pub(crate) async fn read_memo_statements_root(
    rpc_url: &str,
    signature: &str,
) -> Result<Digest32, String> {
    let (tx, _) = verified_transaction(rpc_url, signature).await?;
    settle_solana::memo_texts(&tx)
        .iter()
        .find_map(|m| settle_solana::pack::memo_statements_root(m))
        .ok_or_else(|| format!("the memo of {signature} carries no statement root"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anchor_memo_reads_back_and_nothing_else_does() {
        let text = memo(12, &[0xab; 32]);
        assert_eq!(parse_memo(&text), Some((12, [0xab; 32])));
        assert!(text.len() < 120, "{text}");
        assert_eq!(parse_memo("settle refs: r-00"), None);
        assert_eq!(parse_memo(&text.replace("root=ab", "root=zz")), None);
    }
}
