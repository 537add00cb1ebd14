//! A provider statement's shape and its offline check: nothing but the statement and a
//! public root (given by hand, or read from the chain by the caller). Pure.
//!
//! The check recomputes, from the statement alone:
//! 1. the hash chain of the provider's stream from `proof.prev_hash` through every listed
//!    event and the tail to the anchored head (an event changed, removed, inserted or
//!    reordered breaks it);
//! 2. the totals from the listed events' ledger lines;
//! 3. for a payout statement, its hash ([`settle_proof::statement_hash`]) from the
//!    `payout.created` event that ends it;
//! 4. the Merkle path of the head to the anchor's heads root, the anchor's root and its
//!    signature, and the links from it to the final root;
//! 5. the payment's path from the statement hash to the root its Solana memo carries (or
//!    the statement hash in its SEPA remittance).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use settle_proof::{Digest32, Step, chain_root, digest32, fold_path, head_leaf};

use crate::store::{StoredEvent, canonical_bytes, event_hash};

/// The format name every statement carries.
pub const FORMAT: &str = "settle-statement/v1";

/// A provider statement (per payout or per period).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    pub format: String,
    /// `payout` or `period`.
    pub kind: String,
    pub provider_id: String,
    pub stream: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payout: Option<PayoutPart>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<PeriodPart>,
    /// The events it covers, a contiguous run of the stream.
    pub events: Vec<EventEntry>,
    pub totals: Totals,
    pub proof: Proof,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment: Option<Payment>,
}

/// The payout a statement accounts for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutPart {
    pub payout_id: String,
    pub amount_micro_usdc: i64,
    /// Position of its `payout.created` event (the last listed event).
    pub seq: i64,
    /// What the payment committed to (hex).
    pub statement_hash: String,
}

/// The booking window of a period statement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeriodPart {
    pub from: String,
    pub to: String,
}

/// One event exactly as the ledger holds it (payload and lines are the stored texts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventEntry {
    pub seq: i64,
    pub event_type: String,
    pub version: i64,
    pub idem_key: Option<String>,
    /// Hex.
    pub content_hash: Option<String>,
    pub actor: String,
    pub recorded_at_ms: i64,
    pub payload: String,
    pub lines: String,
}

impl EventEntry {
    /// The entry of a stored event.
    pub fn of(e: &StoredEvent) -> EventEntry {
        EventEntry {
            seq: e.seq,
            event_type: e.event_type.clone(),
            version: e.version,
            idem_key: e.idem_key.clone(),
            content_hash: e.content_hash.as_ref().map(hex::encode),
            actor: e.actor.clone(),
            recorded_at_ms: e.recorded_at_ms,
            payload: e.payload.clone(),
            lines: e.lines.clone(),
        }
    }

    fn stored(&self, stream: &str) -> Result<StoredEvent, String> {
        let content_hash = match &self.content_hash {
            Some(h) => Some(
                hex::decode(h).map_err(|_| format!("seq {}: content_hash is not hex", self.seq))?,
            ),
            None => None,
        };
        Ok(StoredEvent {
            stream: stream.to_owned(),
            seq: self.seq,
            event_type: self.event_type.clone(),
            version: self.version,
            idem_key: self.idem_key.clone(),
            content_hash,
            actor: self.actor.clone(),
            recorded_at_ms: self.recorded_at_ms,
            payload: self.payload.clone(),
            lines: self.lines.clone(),
            prev_hash: Vec::new(),
            hash: Vec::new(),
        })
    }
}

/// Sums of the listed events' ledger lines, in µUSDC.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Totals {
    pub events: usize,
    /// What the usage cost the customers (`platform:receivable` debited).
    pub gross_micro_usdc: i64,
    /// The platform's fees (`platform:fees` credited).
    pub fee_micro_usdc: i64,
    /// What the provider earned, usage and adjustments (its `payable` credited or debited
    /// by events other than payouts).
    pub earned_micro_usdc: i64,
    /// What payouts took from `payable` (created) or gave back (failed, cancelled, returned).
    pub paid_out_micro_usdc: i64,
    /// Every account the lines touch, summed.
    pub accounts: BTreeMap<String, i64>,
}

impl Totals {
    /// The totals of `events` of `provider_id`.
    pub fn of(provider_id: &str, events: &[EventEntry]) -> Result<Totals, String> {
        let payable = format!("provider:{provider_id}:payable");
        let mut t = Totals {
            events: events.len(),
            ..Totals::default()
        };
        for e in events {
            let lines = crate::domain::event::lines_from_json(&e.lines)
                .map_err(|err| format!("seq {}: the lines do not read: {err}", e.seq))?;
            for l in lines {
                *t.accounts.entry(l.account.clone()).or_default() += l.amount_micro_usdc;
                match l.account.as_str() {
                    "platform:receivable" => t.gross_micro_usdc -= l.amount_micro_usdc,
                    "platform:fees" => t.fee_micro_usdc += l.amount_micro_usdc,
                    a if a == payable && e.event_type.starts_with("payout.") => {
                        t.paid_out_micro_usdc -= l.amount_micro_usdc;
                    }
                    a if a == payable => t.earned_micro_usdc += l.amount_micro_usdc,
                    _ => {}
                }
            }
        }
        Ok(t)
    }
}

/// What ties the events to a published root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proof {
    /// The hash before the first listed event (64 zeros at the stream's start).
    pub prev_hash: String,
    /// The stream's events after the listed ones, up to the anchored head.
    pub tail: Vec<EventEntry>,
    /// The anchored head: its position and hash.
    pub head_seq: i64,
    pub head_hash: String,
    pub anchor: AnchorPart,
    /// The anchors after it, up to the final one.
    pub links: Vec<Link>,
    /// The root the links end at: the one to compare with the public anchor.
    pub final_root: String,
    /// The publication of the final root on Solana, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published: Option<PublishedPart>,
}

/// The anchor that covers the statement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnchorPart {
    pub n: i64,
    pub at: String,
    /// The root of anchor `n - 1`.
    pub prev_root: String,
    pub heads_root: String,
    /// The head's Merkle path to `heads_root` (`L:<hex>` / `R:<hex>`).
    pub path: Vec<String>,
    pub root: String,
    /// The anchor key (base58) and its signature of `root` (base58).
    pub key: String,
    pub sig: String,
}

/// An anchor after the covering one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    pub n: i64,
    pub at: String,
    pub heads_root: String,
}

/// Where the final root was published.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedPart {
    pub n: i64,
    /// The memo transaction.
    pub signature: String,
}

/// How the payout's payment committed to the statement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payment {
    /// `solana`, `sepa` or `ach`.
    pub rail: String,
    /// Solana: the transaction that paid it, the root its memo carries and the statement
    /// hash's path to that root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statements_root: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<String>,
    /// SEPA: the remittance text the credit transfer carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remittance: Option<String>,
}

/// What [`check`] established.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Checked {
    pub provider_id: String,
    pub events: usize,
    pub head_seq: i64,
    pub anchor_n: i64,
    pub final_n: i64,
    /// The root the statement leads to (hex): equal to the public one when checked.
    pub final_root: String,
    pub anchor_key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statement_hash: Option<String>,
}

fn hex32(what: &str, text: &str) -> Result<Digest32, String> {
    digest32(text).ok_or_else(|| format!("{what} is not 64 hexadecimal digits"))
}

fn steps(what: &str, path: &[String]) -> Result<Vec<Step>, String> {
    path.iter()
        .map(|s| Step::from_text(s).ok_or_else(|| format!("{what}: {s:?} is not a path step")))
        .collect()
}

/// Checks `s` on its own; then the caller compares [`Checked::final_root`] with the public
/// root. Errors name the first thing that does not hold.
pub fn check(s: &Statement) -> Result<Checked, String> {
    if s.format != FORMAT {
        return Err(format!("not a {FORMAT} statement"));
    }
    let chain = check_chain(s)?;
    let totals = Totals::of(&s.provider_id, &s.events)?;
    if totals != s.totals {
        return Err("the totals are not the sums of the listed events' lines".into());
    }
    let statement_hash = match (&s.kind[..], &s.payout) {
        ("payout", Some(p)) => Some(check_payout(s, p, &chain.last_listed)?),
        ("period", None) if s.period.is_some() => None,
        _ => return Err(format!("kind {:?} does not match its parts", s.kind)),
    };
    let final_root = check_anchor(s, &chain.head)?;
    if let (Some(hash), Some(payment)) = (&statement_hash, &s.payment) {
        check_payment(hash, payment)?;
    }
    Ok(Checked {
        provider_id: s.provider_id.clone(),
        events: s.events.len(),
        head_seq: s.proof.head_seq,
        anchor_n: s.proof.anchor.n,
        final_n: s.proof.links.last().map_or(s.proof.anchor.n, |l| l.n),
        final_root: hex::encode(final_root),
        anchor_key: s.proof.anchor.key.clone(),
        statement_hash: statement_hash.map(hex::encode),
    })
}

/// The hashes [`check_chain`] recomputed.
struct Chain {
    /// At the last listed event (a payout's `payout.created`).
    last_listed: Digest32,
    /// At the anchored head.
    head: Digest32,
}

/// The chain from `prev_hash` through the events and the tail.
fn check_chain(s: &Statement) -> Result<Chain, String> {
    let first = s.events.first().ok_or("the statement lists no event")?.seq;
    let mut hash = hex32("proof.prev_hash", &s.proof.prev_hash)?.to_vec();
    let mut last_listed = Vec::new();
    for (i, e) in s.events.iter().chain(&s.proof.tail).enumerate() {
        if e.seq != first + i as i64 {
            return Err(format!(
                "seq {} follows seq {}: an event was removed, inserted or reordered",
                e.seq,
                first + i as i64 - 1
            ));
        }
        hash = event_hash(&hash, &canonical_bytes(&e.stored(&s.stream)?)).to_vec();
        if i + 1 == s.events.len() {
            last_listed.clone_from(&hash);
        }
    }
    let last = first + (s.events.len() + s.proof.tail.len()) as i64 - 1;
    if last != s.proof.head_seq || hash != hex32("proof.head_hash", &s.proof.head_hash)? {
        return Err(
            "the events do not chain to the anchored head: an event was changed, removed, \
             inserted or reordered"
                .into(),
        );
    }
    let digest = |h: Vec<u8>| Digest32::try_from(h).expect("32 bytes");
    Ok(Chain {
        last_listed: digest(last_listed),
        head: digest(hash),
    })
}

/// The payout's `payout.created` event, whose chained hash is `hash`, ends the listed
/// events; answers the statement hash.
fn check_payout(s: &Statement, p: &PayoutPart, hash: &Digest32) -> Result<Digest32, String> {
    let last = s.events.last().ok_or("no event")?;
    let payload: serde_json::Value =
        serde_json::from_str(&last.payload).map_err(|e| format!("seq {}: {e}", last.seq))?;
    let holds = last.event_type == "payout.created"
        && last.seq == p.seq
        && payload["payout_id"] == p.payout_id.as_str()
        && payload["provider_id"] == s.provider_id.as_str()
        && payload["amount_micro_usdc"] == p.amount_micro_usdc;
    if !holds {
        return Err(format!(
            "the last listed event is not the payout.created of {} for {} µUSDC",
            p.payout_id, p.amount_micro_usdc
        ));
    }
    let computed = settle_proof::statement_hash(
        &s.provider_id,
        &p.payout_id,
        &s.stream,
        p.seq,
        hash,
        p.amount_micro_usdc,
    );
    if hex::encode(computed) != p.statement_hash {
        return Err("payout.statement_hash is not the hash of this payout's statement".into());
    }
    Ok(computed)
}

/// The head's path to the anchor, its root, signature and links: answers the final root.
fn check_anchor(s: &Statement, head: &Digest32) -> Result<Digest32, String> {
    let a = &s.proof.anchor;
    let heads_root = hex32("anchor.heads_root", &a.heads_root)?;
    let leaf = head_leaf(&s.stream, s.proof.head_seq, head);
    if fold_path(leaf, &steps("anchor.path", &a.path)?) != heads_root {
        return Err("the anchored head's path does not lead to the anchor's heads root".into());
    }
    let root = chain_root(
        &hex32("anchor.prev_root", &a.prev_root)?,
        a.n,
        &a.at,
        &heads_root,
    );
    if hex::encode(root) != a.root {
        return Err("anchor.root is not the root of its heads chained to the anchor before".into());
    }
    if !crate::anchor::key::signature_valid(&a.key, &root, &a.sig) {
        return Err(format!(
            "the anchor's signature by {} does not verify",
            a.key
        ));
    }
    let mut current = root;
    let mut n = a.n;
    for link in &s.proof.links {
        if link.n != n + 1 {
            return Err(format!("link {} does not follow anchor {n}", link.n));
        }
        current = chain_root(
            &current,
            link.n,
            &link.at,
            &hex32("link", &link.heads_root)?,
        );
        n = link.n;
    }
    if hex::encode(current) != s.proof.final_root {
        return Err("proof.final_root is not where the links lead".into());
    }
    Ok(current)
}

fn check_payment(statement_hash: &Digest32, p: &Payment) -> Result<(), String> {
    match p.rail.as_str() {
        "solana" => {
            let root = hex32(
                "payment.statements_root",
                p.statements_root.as_deref().unwrap_or_default(),
            )?;
            let leaf = settle_proof::statement_leaf(statement_hash);
            if fold_path(leaf, &steps("payment.path", &p.path)?) != root {
                return Err(
                    "the statement hash's path does not lead to the root the payment's memo carries"
                        .into(),
                );
            }
            Ok(())
        }
        _ => match &p.remittance {
            Some(text) if text.contains(&hex::encode(statement_hash)) => Ok(()),
            Some(_) => Err("the payment's remittance does not carry the statement hash".into()),
            None => Ok(()),
        },
    }
}
