//! Provider statements (SPEC §13): per payout or per period, the provider's events, their
//! totals and a proof that ties them to an anchored, published root, so that a provider
//! checks its figures with `settle statement verify` and no access to the database.
//!
//! - A **payout statement** lists the provider's events after its previous payout's
//!   `payout.created` up to and including this payout's. Its hash
//!   ([`settle_proof::statement_hash`]: the payout, its amount and the chained hash of its
//!   `payout.created` event, which commits to every event before it) is what the payment
//!   commits to: the Solana memo carries the root over the statement hashes of the payouts
//!   in its transaction ([`statement_hashes`]), a SEPA credit transfer's remittance the hash.
//! - A **period statement** lists the events booked in a window.
//!
//! The proof ([`check::Proof`]): the stream's events after the listed ones up to the head
//! of the first anchor that covers them, the head's Merkle path to that anchor's heads root,
//! the anchor's signed root, and the anchors after it up to the newest published one (or
//! the newest). [`check::check`] verifies it all offline.

pub mod check;
pub mod public;

use std::collections::{HashMap, HashSet};
use std::path::Path;

use settle_proof::{Digest32, merkle_path, statements_path};

use crate::anchor::{AnchorError, Heads, head_leaves};
use crate::domain::event::provider_stream;
use crate::domain::payout::PayoutRecord;
use crate::domain::time::format_ms;
use crate::store::{Store, StoreError, StoredEvent};
use check::{
    AnchorPart, EventEntry, Link, Payment, PayoutPart, PeriodPart, Proof, PublishedPart, Statement,
    Totals,
};

/// Why a statement could not be written.
#[derive(Debug, thiserror::Error)]
pub enum StatementError {
    #[error("{0}")]
    NotFound(String),
    #[error(
        "the events of this statement are not anchored yet (up to seq {seq} of {stream}): \
         the next anchor covers them (every anchor.interval_s, or `settle anchor`)"
    )]
    NotAnchored { stream: String, seq: i64 },
    #[error(transparent)]
    Anchor(#[from] AnchorError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the ledger is inconsistent: {0}")]
    Inconsistent(String),
}

impl StatementError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            StatementError::NotFound(_) => "statement_not_found",
            StatementError::NotAnchored { .. } => "statement_not_anchored",
            StatementError::Anchor(e) => e.code(),
            StatementError::Store(_) => "storage_unavailable",
            StatementError::Inconsistent(_) => "ledger_inconsistent",
        }
    }
}

/// What a statement accounts for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    Payout(String),
    /// Events booked in `[from_ms, to_ms)`.
    Period {
        from_ms: i64,
        to_ms: i64,
    },
}

fn created_payload(e: &StoredEvent) -> Option<(String, i64)> {
    let v: serde_json::Value = serde_json::from_str(&e.payload).ok()?;
    Some((
        v["payout_id"].as_str()?.to_owned(),
        v["amount_micro_usdc"].as_i64()?,
    ))
}

/// The statement hash of each payout of `payouts` (`(payout_id, provider_id)`) that has its
/// `payout.created` event, by payout id: what its payment commits to. One read of the
/// providers' `payout.created` events.
pub async fn statement_hashes(
    store: &Store,
    payouts: &[(&str, &str)],
) -> Result<HashMap<String, Digest32>, StoreError> {
    let provider_of: HashMap<&str, &str> = payouts.iter().copied().collect();
    let mut streams: Vec<String> = payouts
        .iter()
        .map(|(_, provider)| provider_stream(provider))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    streams.sort();
    let created = crate::store::statements::payouts_created(store, &streams).await?;
    Ok(created
        .iter()
        .filter_map(|e| {
            let (payout_id, amount) = created_payload(e)?;
            let provider = *provider_of.get(payout_id.as_str())?;
            (e.stream == provider_stream(provider)).then(|| {
                let hash = settle_proof::statement_hash(
                    provider, &payout_id, &e.stream, e.seq, &e.hash, amount,
                );
                (payout_id, hash)
            })
        })
        .collect())
}

/// The statement of `provider_id` for `subject`, proven against the anchor log at `log`.
pub async fn build(
    store: &Store,
    log: &Path,
    provider_id: &str,
    subject: &Subject,
) -> Result<Statement, StatementError> {
    let stream = provider_stream(provider_id);
    let (first, last, payout) = match subject {
        Subject::Payout(payout_id) => {
            let (first, last, part, record) = payout_range(store, provider_id, payout_id).await?;
            (first, last, Some((part, record)))
        }
        Subject::Period { from_ms, to_ms } => {
            let w =
                crate::store::statements::booked_between(store, &stream, *from_ms, *to_ms).await?;
            match (w.first, w.last) {
                (Some(first), Some(last)) => (first, last, None),
                _ => {
                    return Err(StatementError::NotFound(format!(
                        "{provider_id} booked no event between {} and {}",
                        format_ms(*from_ms),
                        format_ms(*to_ms)
                    )));
                }
            }
        }
    };
    let stored = crate::store::statements::stream_range(store, &stream, first, last).await?;
    let events: Vec<EventEntry> = stored.iter().map(EventEntry::of).collect();
    let totals = Totals::of(provider_id, &events).map_err(StatementError::Inconsistent)?;
    let prev_hash = stored
        .first()
        .map(|e| hex::encode(&e.prev_hash))
        .unwrap_or_default();
    let proof = prove(store, log, &stream, last, prev_hash).await?;
    let (payout, payment, period) = match (payout, subject) {
        (Some((part, record)), _) => {
            let payment = payment_of(store, &record, &part).await?;
            (Some(part), payment, None)
        }
        (None, Subject::Period { from_ms, to_ms }) => (
            None,
            None,
            Some(PeriodPart {
                from: format_ms(*from_ms),
                to: format_ms(*to_ms),
            }),
        ),
        (None, Subject::Payout(_)) => unreachable!("a payout subject has its payout"),
    };
    Ok(Statement {
        format: check::FORMAT.to_owned(),
        kind: if payout.is_some() { "payout" } else { "period" }.to_owned(),
        provider_id: provider_id.to_owned(),
        stream,
        payout,
        period,
        events,
        totals,
        proof,
        payment,
    })
}

/// The positions of a payout's statement: after the previous payout's `payout.created` up
/// to its own.
async fn payout_range(
    store: &Store,
    provider_id: &str,
    payout_id: &str,
) -> Result<(i64, i64, PayoutPart, PayoutRecord), StatementError> {
    let not_found = || StatementError::NotFound(format!("{provider_id} has no payout {payout_id}"));
    let record = crate::store::payouts::payout(store, payout_id)
        .await?
        .filter(|p| p.provider_id == provider_id)
        .ok_or_else(not_found)?;
    let stream = provider_stream(provider_id);
    let created =
        crate::store::statements::payouts_created(store, std::slice::from_ref(&stream)).await?;
    let at = created
        .iter()
        .position(|e| created_payload(e).is_some_and(|(id, _)| id == payout_id))
        .ok_or_else(not_found)?;
    let first = if at == 0 { 1 } else { created[at - 1].seq + 1 };
    let e = &created[at];
    let hash = settle_proof::statement_hash(
        provider_id,
        payout_id,
        &stream,
        e.seq,
        &e.hash,
        record.amount_micro_usdc,
    );
    let part = PayoutPart {
        payout_id: payout_id.to_owned(),
        amount_micro_usdc: record.amount_micro_usdc,
        seq: e.seq,
        statement_hash: hex::encode(hash),
    };
    Ok((first, e.seq, part, record))
}

/// The proof that the stream's events up to `last` lie under a published (or the newest)
/// anchor.
async fn prove(
    store: &Store,
    log: &Path,
    stream: &str,
    last: i64,
    prev_hash: String,
) -> Result<Proof, StatementError> {
    let not_anchored = || StatementError::NotAnchored {
        stream: stream.to_owned(),
        seq: last,
    };
    let read = crate::anchor::read_finding(log, |heads: &Heads| {
        heads.get(stream).is_some_and(|(seq, _)| *seq >= last)
    });
    let (anchors, found) = match read {
        Err(AnchorError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(not_anchored());
        }
        read => read?,
    };
    let (n, heads) = found.ok_or_else(not_anchored)?;
    let (head_seq, head_hash) = heads.get(stream).cloned().ok_or_else(not_anchored)?;
    let index = heads
        .keys()
        .position(|s| s == stream)
        .ok_or_else(not_anchored)?;
    let path = merkle_path(&head_leaves(&heads), index);
    let entry = &anchors.entries[usize::try_from(n - 1).unwrap_or(0)];
    let prev_root = if n > 1 {
        anchors.entries[usize::try_from(n - 2).unwrap_or(0)].root
    } else {
        settle_proof::ROOT_ZERO
    };
    let Some((key, sig)) = entry.signed_by.clone() else {
        return Err(not_anchored());
    };
    let published = newest_publication(store, &anchors, n).await?;
    let final_n = published
        .as_ref()
        .map_or(anchors.entries.len() as i64, |p| p.n);
    let links: Vec<Link> = anchors.entries
        [usize::try_from(n).unwrap_or(0)..usize::try_from(final_n).unwrap_or(0)]
        .iter()
        .map(|e| Link {
            n: e.n,
            at: e.at.clone(),
            heads_root: hex::encode(e.heads_root),
        })
        .collect();
    let final_root = anchors.entries[usize::try_from(final_n - 1).unwrap_or(0)].root;
    let tail = if head_seq > last {
        crate::store::statements::stream_range(store, stream, last + 1, head_seq)
            .await?
            .iter()
            .map(EventEntry::of)
            .collect()
    } else {
        Vec::new()
    };
    Ok(Proof {
        prev_hash,
        tail,
        head_seq,
        head_hash: hex::encode(head_hash),
        anchor: AnchorPart {
            n,
            at: entry.at.clone(),
            prev_root: hex::encode(prev_root),
            heads_root: hex::encode(entry.heads_root),
            path: path.iter().map(settle_proof::Step::to_text).collect(),
            root: hex::encode(entry.root),
            key,
            sig,
        },
        links,
        final_root: hex::encode(final_root),
        published: published.map(|p| PublishedPart {
            n: p.n,
            signature: p.signature,
        }),
    })
}

/// The newest publication of an anchor at or after `n` whose root the log holds.
async fn newest_publication(
    store: &Store,
    anchors: &crate::anchor::Anchors,
    n: i64,
) -> Result<Option<crate::store::anchors::PublicationRow>, StoreError> {
    Ok(crate::store::anchors::publications(store)
        .await?
        .into_iter()
        .filter(|p| {
            p.n >= n
                && usize::try_from(p.n - 1)
                    .ok()
                    .and_then(|i| anchors.entries.get(i))
                    .is_some_and(|e| hex::encode(e.root) == p.root)
        })
        .max_by_key(|p| p.n))
}

/// How the payout's payment committed to its statement, once paid: the Solana
/// transaction's memo root and the path to it, or the SEPA remittance.
async fn payment_of(
    store: &Store,
    record: &PayoutRecord,
    part: &PayoutPart,
) -> Result<Option<Payment>, StatementError> {
    use crate::domain::event::Rail;
    match record.rail {
        Rail::Solana => {
            let Some(signature) = record.reference.as_deref() else {
                return Ok(None);
            };
            let Some(attempt) =
                crate::store::rails::landed_attempt_by_signature(store, signature).await?
            else {
                return Ok(None);
            };
            let Some(memo_root) = memo_root_of(&attempt.tx_base64) else {
                return Ok(None); // paid before payments committed to statements
            };
            let ids: Vec<&str> = attempt.payout_ids.iter().map(String::as_str).collect();
            let mut conn = store.acquire().await.map_err(StoreError::from)?;
            let records = crate::store::payouts::load_many(&mut conn, &ids).await?;
            drop(conn);
            let pairs: Vec<(&str, &str)> = records
                .values()
                .map(|p| (p.payout_id.as_str(), p.provider_id.as_str()))
                .collect();
            let hashes = statement_hashes(store, &pairs).await?;
            let ordered: Option<Vec<Digest32>> = attempt
                .payout_ids
                .iter()
                .map(|id| hashes.get(id).copied())
                .collect();
            let ordered = ordered.ok_or_else(|| {
                StatementError::Inconsistent(format!(
                    "a payout of transaction {signature} has no payout.created event"
                ))
            })?;
            let index = attempt
                .payout_ids
                .iter()
                .position(|id| *id == part.payout_id)
                .ok_or_else(|| {
                    StatementError::Inconsistent("payout not in its transaction".into())
                })?;
            if settle_proof::statements_root(&ordered) != memo_root {
                return Err(StatementError::Inconsistent(format!(
                    "the memo of {signature} carries another statement root than its payouts'"
                )));
            }
            let path = statements_path(&ordered, index);
            Ok(Some(Payment {
                rail: "solana".into(),
                signature: Some(signature.to_owned()),
                statements_root: Some(hex::encode(memo_root)),
                path: path.iter().map(settle_proof::Step::to_text).collect(),
                remittance: None,
            }))
        }
        Rail::Sepa => {
            let hash = settle_proof::digest32(&part.statement_hash).unwrap_or_default();
            Ok(Some(Payment {
                rail: "sepa".into(),
                signature: None,
                statements_root: None,
                path: Vec::new(),
                remittance: Some(record.remittance(Some(&hash))),
            }))
        }
        _ => Ok(None),
    }
}

/// The statement root in the memo of a signed transaction (base64 of its wire bytes).
fn memo_root_of(tx_base64: &str) -> Option<Digest32> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(tx_base64)
        .ok()?;
    settle_solana::publish::memo_texts_of_wire(&bytes)
        .iter()
        .find_map(|m| settle_solana::pack::memo_statements_root(m))
}
