//! Anchors (SPEC §13): the ledger's hash chains pinned where no writer of the database can
//! rewrite them.
//!
//! `settle verify` proves that each stream's chain is consistent with the events' contents,
//! but somebody with write access to the database can rewrite an event *and* recompute every
//! hash after it; the chain is then consistent again. An anchor pins every stream's head:
//!
//! - `settle serve` (every `anchor.interval_s`) and `settle anchor` append a line to the
//!   **anchor log** (NDJSON, kept apart from the database) naming the heads — `(seq, hash)`
//!   — of the streams that moved since the line before, with the anchor's number `n`, its
//!   **root** ([`root`]: a Merkle root over every stream's head, chained to the root before
//!   it) and the root's Ed25519 signature by the anchor key ([`key`]);
//! - the database records each root too (`anchors`): a log cut short is seen;
//! - once a day (`anchor.publish_interval_s`) and on demand (`settle anchor publish`) the
//!   newest root goes on Solana in a memo transaction signed by the anchor key
//!   ([`publish`]), where nobody here can rewrite it; a provider's statement proves its
//!   events against such a root (`src/statement/`).
//!
//! `settle verify --anchors` recomputes each chain from the events' contents alone and
//! checks that it passes through every anchored head (an edit, insertion, deletion or
//! reordering at or before it: `anchor_mismatch`; a stream cut below it: `anchor_truncated`),
//! that the log holds every root the ledger recorded (`anchor_log_truncated`), and reports
//! the tail not yet anchored.
//!
//! A line: `{"at":"2026-12-01T10:00:00.000Z","prev":"<hex SHA-256 of the previous line>",
//! "heads":[["provider:prv_a",42,"<hex hash>"],…],"n":7,"root":"<hex>","key":"<base58>",
//! "sig":"<base58>"}` (`prev` of the first line: 64 zeros). A line removed from the middle
//! of the log or changed in place breaks that chain (`anchor_file_corrupt`). Lines written
//! before roots existed carry no `n`, `root`, `key` or `sig`; their root is computed all the
//! same, and they count as unsigned.

pub mod key;
pub mod publish;
pub use settle_proof as root;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::domain::time::format_ms;
use crate::store::{Store, StoreError};

/// The anchored head of each stream: `stream → (seq, hash)`.
pub type Heads = BTreeMap<String, (i64, Vec<u8>)>;

/// An anchor log could not be read or written, or the ledger disagrees with it.
#[derive(Debug, thiserror::Error)]
pub enum AnchorError {
    #[error("anchor file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("anchor file {path}, line {line}: {detail}")]
    Corrupt {
        path: String,
        line: usize,
        detail: String,
    },
    /// Refused to anchor: streams are shorter than, or differ from, their anchored heads.
    #[error(
        "the ledger disagrees with its anchors on {count} streams (e.g. {example}): not \
         anchored; run `settle verify --anchors` and investigate"
    )]
    Diverged { count: usize, example: String },
    /// Refused to anchor: the ledger recorded roots the log does not hold (or holds others).
    #[error(
        "the anchor log {path} holds {lines} anchors but the ledger recorded anchor {n}: the \
         log was cut short or replaced; not anchored (restore the log, then `settle verify --anchors`)"
    )]
    LogTruncated { path: String, lines: usize, n: i64 },
    #[error("nothing to publish: the anchor log is empty (`settle anchor` first)")]
    NothingToPublish,
    #[error("publishing the anchor failed: {0}")]
    Publish(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl AnchorError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            AnchorError::Io { .. } => "anchor_io",
            AnchorError::Corrupt { .. } => "anchor_file_corrupt",
            AnchorError::Diverged { .. } => "ledger_diverged_from_anchor",
            AnchorError::LogTruncated { .. } => "anchor_log_truncated",
            AnchorError::NothingToPublish => "anchor_log_empty",
            AnchorError::Publish(_) => "anchor_publish_failed",
            AnchorError::Store(_) => "storage_unavailable",
        }
    }
}

/// One line of the anchor log.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    at: String,
    prev: String,
    heads: Vec<(String, i64, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    n: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    root: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sig: Option<String>,
}

/// One anchor of the log, its root recomputed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// 1 for the log's first line.
    pub n: i64,
    pub at: String,
    /// The Merkle root over every stream's head after this line.
    pub heads_root: root::Digest32,
    /// This anchor's root (chained to the one before).
    pub root: root::Digest32,
    /// The signing key (base58) and its signature (base58); `None` on an unsigned line.
    pub signed_by: Option<(String, String)>,
}

/// An anchor log read back.
#[derive(Debug, Default)]
pub struct Anchors {
    /// The newest anchored head of each stream.
    pub heads: Heads,
    /// Every anchor, in order.
    pub entries: Vec<Entry>,
    /// Lines in the file.
    pub lines: usize,
    /// `at` of the newest line.
    pub newest_at: Option<String>,
    /// SHA-256 of the newest line (the next line's `prev`).
    last_digest: [u8; 32],
}

impl Anchors {
    /// The newest anchor's root (zeros before the first).
    pub(crate) fn last_root(&self) -> root::Digest32 {
        self.entries.last().map_or(root::ROOT_ZERO, |e| e.root)
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> AnchorError + '_ {
    move |source| AnchorError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The Merkle root over `heads`, streams in byte order.
pub fn heads_root(heads: &Heads) -> root::Digest32 {
    root::merkle_root(&head_leaves(heads))
}

/// The leaves of [`heads_root`], in order.
pub(crate) fn head_leaves(heads: &Heads) -> Vec<root::Digest32> {
    heads
        .iter()
        .map(|(stream, (seq, hash))| root::head_leaf(stream, *seq, hash))
        .collect()
}

/// Reads an anchor log and checks the chain of its lines, each root and signature.
pub fn read(path: &Path) -> Result<Anchors, AnchorError> {
    Ok(read_finding(path, |_| false)?.0)
}

/// Reads an anchor log as [`read`] does; also answers the first anchor whose heads satisfy
/// `wanted`, with those heads.
pub(crate) fn read_finding(
    path: &Path,
    wanted: impl Fn(&Heads) -> bool,
) -> Result<(Anchors, Option<(i64, Heads)>), AnchorError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let mut anchors = Anchors::default();
    let mut found = None;
    for (i, raw) in text.lines().enumerate() {
        let corrupt = |detail: String| AnchorError::Corrupt {
            path: path.display().to_string(),
            line: i + 1,
            detail,
        };
        let line: Line =
            serde_json::from_str(raw).map_err(|e| corrupt(format!("not an anchor line: {e}")))?;
        if line.prev != hex::encode(anchors.last_digest) {
            return Err(corrupt(
                "`prev` is not the SHA-256 of the line before: a line was removed, inserted or \
                 changed"
                    .into(),
            ));
        }
        for (stream, seq, hash) in line.heads {
            let hash = hex::decode(&hash)
                .ok()
                .filter(|h| h.len() == 32)
                .ok_or_else(|| corrupt(format!("{stream}: the hash is not 32 bytes of hex")))?;
            anchors.heads.insert(stream, (seq, hash));
        }
        let entry = entry_of(
            &anchors,
            i,
            line.at.clone(),
            (line.n, line.root, line.key, line.sig),
        )
        .map_err(corrupt)?;
        anchors.entries.push(entry);
        anchors.lines += 1;
        anchors.newest_at = Some(line.at);
        anchors.last_digest = Sha256::digest(raw.as_bytes()).into();
        if found.is_none() && wanted(&anchors.heads) {
            found = Some((anchors.entries.len() as i64, anchors.heads.clone()));
        }
    }
    Ok((anchors, found))
}

type Claimed = (Option<i64>, Option<String>, Option<String>, Option<String>);

/// The entry of line `index` (heads already applied), checked against what it claims.
fn entry_of(
    anchors: &Anchors,
    index: usize,
    at: String,
    (n, claimed_root, key, sig): Claimed,
) -> Result<Entry, String> {
    let number = index as i64 + 1;
    if n.is_some_and(|n| n != number) {
        return Err(format!(
            "`n` is {}, the line is anchor {number}",
            n.unwrap_or(0)
        ));
    }
    let heads_root = heads_root(&anchors.heads);
    let root = root::chain_root(&anchors.last_root(), number, &at, &heads_root);
    if let Some(claimed) = claimed_root
        && claimed != hex::encode(root)
    {
        return Err("`root` is not the root of its heads chained to the anchor before".into());
    }
    let signed_by = match (key, sig) {
        (Some(key), Some(sig)) => {
            if !key::signature_valid(&key, &root, &sig) {
                return Err(format!(
                    "the signature of {key} over the root does not verify"
                ));
            }
            Some((key, sig))
        }
        (None, None) => None,
        _ => return Err("`key` and `sig` come together".into()),
    };
    Ok(Entry {
        n: number,
        at,
        heads_root,
        root,
        signed_by,
    })
}

/// What [`write`] did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AnchorReport {
    pub file: PathBuf,
    /// Streams on the ledger.
    pub streams: usize,
    /// Streams whose head was written (moved since the previous anchor).
    pub anchored: usize,
    /// Whether a line was appended (nothing moved: no line).
    pub written: bool,
    /// The newest anchor's number and root (hex), written now or before.
    pub n: i64,
    pub root: String,
}

/// Appends an anchor of the heads that moved since the log's newest line (creating the
/// log), signed by `key`, and records its root in the database. Refuses when a stream is
/// shorter than its anchored head, or has another hash at the same position, or when the
/// ledger recorded roots the log does not hold: that is for `verify --anchors` to explain,
/// not for a new anchor to bless. Writers of one log take turns (a lock on the log).
pub async fn write(
    store: &Store,
    path: &Path,
    key: &key::AnchorKey,
    now_ms: i64,
) -> Result<AnchorReport, AnchorError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io(path))?;
    file.lock().map_err(io(path))?;
    let previous = read(path)?;
    check_recorded(store, path, &previous).await?;
    let current = store.stream_heads().await?;
    refuse_divergence(&previous.heads, &current)?;
    let heads: Vec<(String, i64, String)> = current
        .iter()
        .filter(|(stream, head)| previous.heads.get(*stream) != Some(head))
        .map(|(stream, (seq, hash))| (stream.clone(), *seq, hex::encode(hash)))
        .collect();
    let mut report = AnchorReport {
        file: path.to_owned(),
        streams: current.len(),
        anchored: heads.len(),
        written: false,
        n: previous.entries.len() as i64,
        root: hex::encode(previous.last_root()),
    };
    if heads.is_empty() && previous.lines > 0 {
        return Ok(report);
    }
    let n = report.n + 1;
    let at = format_ms(now_ms);
    let root = root::chain_root(&previous.last_root(), n, &at, &heads_root(&current));
    let line = serde_json::to_string(&Line {
        at,
        prev: hex::encode(previous.last_digest),
        heads,
        n: Some(n),
        root: Some(hex::encode(root)),
        key: Some(key.public()),
        sig: Some(key.sign(&root)),
    })
    .expect("an anchor line serialises");
    file.write_all(format!("{line}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io(path))?;
    crate::store::anchors::record_anchor(
        store,
        &crate::store::anchors::AnchorRow {
            n,
            root: hex::encode(root),
            at_ms: now_ms,
        },
    )
    .await?;
    report.written = true;
    report.n = n;
    report.root = hex::encode(root);
    Ok(report)
}

/// Refuses when the ledger recorded an anchor the log does not hold, or another root.
async fn check_recorded(store: &Store, path: &Path, log: &Anchors) -> Result<(), AnchorError> {
    let recorded = crate::store::anchors::anchors(store).await?;
    let differs = recorded.iter().find(|row| {
        usize::try_from(row.n - 1)
            .ok()
            .and_then(|i| log.entries.get(i))
            .is_none_or(|e| hex::encode(e.root) != row.root)
    });
    match differs {
        Some(row) => Err(AnchorError::LogTruncated {
            path: path.display().to_string(),
            lines: log.lines,
            n: row.n,
        }),
        None => Ok(()),
    }
}

fn refuse_divergence(previous: &Heads, current: &Heads) -> Result<(), AnchorError> {
    let diverged: Vec<String> = previous
        .iter()
        .filter_map(|(stream, (seq, hash))| match current.get(stream) {
            None => Some(format!("{stream} is gone (anchored at seq {seq})")),
            Some((now, _)) if now < seq => {
                Some(format!("{stream} ends at seq {now}, anchored at {seq}"))
            }
            Some((now, h)) if now == seq && h != hash => {
                Some(format!("{stream} seq {seq} has another hash"))
            }
            _ => None,
        })
        .collect();
    match diverged.first() {
        Some(example) => Err(AnchorError::Diverged {
            count: diverged.len(),
            example: example.clone(),
        }),
        None => Ok(()),
    }
}
