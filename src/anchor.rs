//! Anchored chain heads: the ledger's hash chains pinned outside the database.
//!
//! `settle verify` proves that each stream's chain is consistent with the events' contents,
//! but somebody with write access to the database can rewrite an event *and* recompute every
//! hash after it; the chain is then consistent again. An anchor file, kept where the
//! database's writers cannot write (another volume or host, an object store with
//! retention), records the head — `(seq, hash)` — of every stream that moved since its
//! previous line. `settle verify --anchors FILE` recomputes each chain from the events'
//! contents alone and checks that it passes through every anchored head:
//!
//! - an edit, an insertion, a deletion or a reordering at or before an anchored position
//!   changes the hash at that position: `anchor_mismatch`;
//! - a stream cut below its anchored head, or gone: `anchor_truncated`.
//!
//! Events booked after the newest anchor are covered by the next one: `settle serve` writes
//! one every `ledger.anchor_interval_ms`, `settle anchor` on demand.
//!
//! The file is NDJSON, one line per anchor, each line chained to the one before it:
//! `{"at":"2026-12-01T10:00:00.000Z","prev":"<hex SHA-256 of the previous line>","heads":[["provider:prv_a",42,"<hex hash>"],…]}`
//! (`prev` of the first line: 64 zeros). A line removed from the middle of the file or
//! changed in place breaks that chain (`anchor_file_corrupt`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::domain::time::format_ms;
use crate::store::{Store, StoreError};

/// The anchored head of each stream: `stream → (seq, hash)`.
pub type Heads = BTreeMap<String, (i64, Vec<u8>)>;

/// An anchor file could not be read or written, or the ledger disagrees with it.
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
            AnchorError::Store(_) => "storage_unavailable",
        }
    }
}

/// One line of the anchor file.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    at: String,
    prev: String,
    heads: Vec<(String, i64, String)>,
}

/// An anchor file read back.
#[derive(Debug, Default)]
pub struct Anchors {
    /// The newest anchored head of each stream.
    pub heads: Heads,
    /// Lines in the file.
    pub lines: usize,
    /// `at` of the newest line.
    pub newest_at: Option<String>,
    /// SHA-256 of the newest line (the next line's `prev`).
    last_digest: [u8; 32],
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> AnchorError + '_ {
    move |source| AnchorError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Reads an anchor file and checks the chain of its lines.
pub fn read(path: &Path) -> Result<Anchors, AnchorError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let mut anchors = Anchors::default();
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
        anchors.lines += 1;
        anchors.newest_at = Some(line.at);
        anchors.last_digest = Sha256::digest(raw.as_bytes()).into();
    }
    Ok(anchors)
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
}

/// Appends the heads that moved since the file's newest line (creating the file). Refuses
/// when a stream is shorter than its anchored head, or has another hash at the same
/// position: that is for `verify --anchors` to explain, not for a new anchor to bless.
pub async fn write(store: &Store, path: &Path, now_ms: i64) -> Result<AnchorReport, AnchorError> {
    let previous = match read(path) {
        Ok(anchors) => anchors,
        Err(AnchorError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Anchors::default()
        }
        Err(e) => return Err(e),
    };
    let current = store.stream_heads().await?;
    let diverged: Vec<String> = previous
        .heads
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
    if let Some(example) = diverged.first() {
        return Err(AnchorError::Diverged {
            count: diverged.len(),
            example: example.clone(),
        });
    }
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
    };
    if heads.is_empty() && previous.lines > 0 {
        return Ok(report);
    }
    let line = serde_json::to_string(&Line {
        at: format_ms(now_ms),
        prev: hex::encode(previous.last_digest),
        heads,
    })
    .expect("an anchor line serialises");
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io(path))?;
    file.write_all(format!("{line}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io(path))?;
    report.written = true;
    Ok(report)
}
