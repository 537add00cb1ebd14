//! The inbox folder `settle serve` watches for the bank's answers (`bank.inbox_dir`): each
//! new file is imported ([`super::answers::import_answer`], idempotent), then its result is
//! written and the file moved to `processed/` (booked, or booked before) or `rejected/`
//! (unreadable, or refused), beside a `NAME.result.json`. Importing comes first and moving
//! after, so a process that dies mid-file leaves the file in the inbox, and the next pass
//! imports it again (booking only what is missing) and moves it once.

use std::path::{Path, PathBuf};

use settle_bank::simulate::{SimulatedAnswers, SimulationConfig, simulate};

use super::answers::{ImportContext, ImportReport, import_answer};
use super::{BankError, write_atomic};
use crate::config::BankConfig;
use crate::ledger::{Actor, Ledger, LedgerError};

/// Where the answers that were booked go, inside the inbox.
pub const PROCESSED_DIR: &str = "processed";
/// Where the answers that were refused go, inside the inbox.
pub const REJECTED_DIR: &str = "rejected";
/// Files taken from the inbox in one pass at most (the rest wait for the next).
pub const FILES_PER_PASS_MAX: usize = 1_000;

/// What became of one inbox file.
#[derive(Clone, Debug, serde::Serialize)]
pub struct InboxOutcome {
    pub file: String,
    /// Where it went: `processed/NAME` or `rejected/NAME`.
    pub moved_to: String,
    /// The import's report, or why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<ImportReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<serde_json::Value>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> BankError + '_ {
    move |source| BankError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Reads a file of at most `max` bytes; `answer_file_too_large` beyond.
pub fn read_limited(path: &Path, max: usize) -> Result<Vec<u8>, BankError> {
    let len = std::fs::metadata(path).map_err(io(path))?.len();
    if len > max as u64 {
        return Err(crate::domain::DomainError::new(
            "answer_file_too_large",
            format!(
                "{} has {len} bytes; bank.answer_file_bytes_max is {max}",
                path.display()
            ),
        )
        .into());
    }
    std::fs::read(path).map_err(io(path))
}

/// The files waiting in the inbox, by name (regular files; hidden and `.tmp` files are
/// being written by someone and wait).
pub fn waiting(dir: &Path) -> Result<Vec<PathBuf>, BankError> {
    let mut files = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name.ends_with(".tmp") {
            continue;
        }
        if entry.file_type().map_err(io(dir))?.is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    files.truncate(FILES_PER_PASS_MAX);
    Ok(files)
}

/// A name in `dir` not taken yet: `name`, else `name.1`, `name.2`, …
fn free_name(dir: &Path, name: &str) -> PathBuf {
    let first = dir.join(name);
    if !first.exists() {
        return first;
    }
    (1u32..)
        .map(|n| dir.join(format!("{name}.{n}")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

/// Removes what a process killed while it wrote `path` left beside it (`write_atomic`'s
/// `.NAME.PID.tmp`): the result written since replaces it. Best effort: a leftover that
/// cannot be removed is only clutter.
fn remove_stale_temps(dir: &Path, path: &Path) {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let prefix = format!(".{name}.");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let n = entry.file_name().to_string_lossy().into_owned();
        if n.starts_with(&prefix) && n.ends_with(".tmp") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Imports one inbox file and moves it with its result.
pub async fn take(
    ledger: &Ledger,
    config: &BankConfig,
    cx: &ImportContext<'_>,
    actor: &Actor,
    file: &Path,
) -> Result<InboxOutcome, BankError> {
    let inbox = file.parent().unwrap_or(Path::new("."));
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let result = match read_limited(file, config.answer_file_bytes_max) {
        Ok(bytes) => import_answer(ledger, bytes, cx, actor).await,
        Err(e) => Err(e),
    };
    let (sub, report, error) = match result {
        Ok(r) => (PROCESSED_DIR, Some(r), None),
        Err(BankError::Ledger(LedgerError::Rejected(e))) => (
            REJECTED_DIR,
            None,
            Some(serde_json::json!({"code": e.code, "message": e.message})),
        ),
        // The database or the disk: the file stays for the next pass.
        Err(e) => return Err(e),
    };
    let dir = inbox.join(sub);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let dest = free_name(&dir, &name);
    let moved_to = format!(
        "{sub}/{}",
        dest.file_name().unwrap_or_default().to_string_lossy()
    );
    let outcome = InboxOutcome {
        file: name,
        moved_to,
        report,
        error,
    };
    let result_path = dir.join(format!(
        "{}.result.json",
        dest.file_name().unwrap_or_default().to_string_lossy()
    ));
    let text = serde_json::to_vec_pretty(&outcome).unwrap_or_default();
    write_atomic(&result_path, &text)?;
    remove_stale_temps(&dir, &result_path);
    crate::failpoint::failpoint(INBOX_BEFORE_MOVE);
    std::fs::rename(file, &dest).map_err(io(file))?;
    Ok(outcome)
}

/// After a file's import and result, before it is moved.
pub const INBOX_BEFORE_MOVE: &str = "bank.inbox_before_move";

/// One pass over the inbox: every waiting file taken in name order.
pub async fn pass(
    ledger: &Ledger,
    config: &BankConfig,
    cx: &ImportContext<'_>,
    actor: &Actor,
) -> Result<Vec<InboxOutcome>, BankError> {
    let dir = Path::new(&config.inbox_dir);
    let mut out = Vec::new();
    for file in waiting(dir)? {
        out.push(take(ledger, config, cx, actor, &file).await?);
    }
    Ok(out)
}

/// Answers each of `files` with the simulator, writing the answers into `out_dir`; the
/// pairs (batch file, answer file) written.
pub fn simulate_files(
    config: &BankConfig,
    files: &[PathBuf],
    out_dir: &Path,
    sim: &SimulationConfig,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut written = Vec::new();
    for file in files {
        let bytes = read_limited(file, config.answer_file_bytes_max)?;
        let answers = simulate(&bytes, sim)
            .map_err(|e| anyhow::anyhow!("{}: {}: {e}", file.display(), e.code()))?;
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let outputs = match answers {
            SimulatedAnswers::Sepa {
                status_report,
                notification,
            } => vec![
                (format!("{stem}.pain002.xml"), status_report),
                (format!("{stem}.camt054.xml"), notification),
            ],
            SimulatedAnswers::Nacha { returns } => vec![(format!("{stem}.returns.ach"), returns)],
        };
        for (name, contents) in outputs {
            let path = out_dir.join(&name);
            write_atomic(&path, contents.as_bytes())?;
            written.push((file.display().to_string(), path.display().to_string()));
        }
    }
    Ok(written)
}
