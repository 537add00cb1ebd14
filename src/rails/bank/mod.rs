//! The bank rail (SPEC §6): SEPA `pain.001.001.09` and NACHA files for the `created` payouts
//! on the `sepa` and `ach` rails, and the batch lifecycle generated → submitted → settled,
//! with returns.
//!
//! Generation is an outbox worker that is safe to run again at any point:
//!
//! 1. finish every batch on the ledger whose file may not have been handed off yet (one of
//!    its payouts is still `created`): (re)write its file when it is missing or differs,
//!    and submit those payouts. Once every payout of a batch is `submitted` its file was
//!    written, and the uploader may have moved it away: the worker never writes it again
//!    (only `settle bank regenerate`, an operator's decision, does), so a file cannot
//!    reappear and be uploaded twice;
//! 2. for each rail, take the `created` payouts in no batch yet (sorted by id, at most
//!    `batch_payouts_max`), derive the batch id from their ids, and in ONE transaction on
//!    the platform stream check that none of them is in a batch, write the file's bytes
//!    (creation time = the event's `recorded_at`) and record `bank_batch.generated` with
//!    the file's SHA-256;
//! 3. write the file to the outbox (temporary file, fsync, rename), then `payout.submitted`
//!    (reference = batch id) on each payout's own stream.
//!
//! A crash between any two steps leaves a state the next run finishes: the batch on the
//! ledger is the truth and its file is a pure function of it (`regenerate`), and a payout
//! of a recorded batch never goes into another one.
//!
//! Invariant: the bytes of a batch depend only on the ledger (its payouts as created and its
//! `recorded_at`) and the bank configuration; `regenerate` refuses to write a file whose
//! SHA-256 differs from the one recorded.

pub mod answers;
pub mod files;
pub mod inbox;
pub mod reconcile;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDateTime};
use settle_bank::{BankRail, ReturnReason, file_sha256_hex};

use crate::config::BankConfig;
use crate::domain::DomainError;
use crate::domain::batch::BatchStatus;
use crate::domain::event::{BankBatchGenerated, Rail};
use crate::domain::ids::ProviderId;
use crate::domain::payout::PayoutStatus;
use crate::failpoint::failpoint;
use crate::ledger::payouts::{self, PayoutRecord};
use crate::ledger::rails::BatchSlot;
use crate::ledger::{Actor, Applied, Ledger, LedgerError};
use crate::store::Store;
pub use crate::store::rails::BankBatch;
use crate::store::rails::{self as rows};
pub use files::{BankFile, Originator};

/// Named failpoints of the bank rail (see [`crate::failpoint::FAILPOINT_ENV`]).
pub mod failpoints {
    /// Inside the generation transaction: the batch event appended, not committed.
    pub const GENERATE_BEFORE_COMMIT: &str = crate::ledger::rails::BANK_GENERATE_BEFORE_COMMIT;
    /// After `bank_batch.generated` committed, before the file is written.
    pub const AFTER_GENERATED: &str = "bank.after_generated";
    /// After the file is written, before any payout is submitted.
    pub const AFTER_FILE: &str = "bank.after_file";
    /// After a batch's first payout, then after each group of the others, was submitted.
    pub const AFTER_SUBMIT: &str = "bank.after_submit";
    /// After `bank_batch.status_changed` settled, before the payouts are settled.
    pub const AFTER_BATCH_SETTLED: &str = "bank.after_batch_settled";

    pub const ALL: [&str; 5] = [
        GENERATE_BEFORE_COMMIT,
        AFTER_GENERATED,
        AFTER_FILE,
        AFTER_SUBMIT,
        AFTER_BATCH_SETTLED,
    ];
}

/// Most rounds of one generation (each makes at most one batch per rail).
const GENERATE_ROUNDS_MAX: usize = 10_000;

/// What can go wrong on the bank rail.
#[derive(Debug, thiserror::Error)]
pub enum BankError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The outbox could not be written.
    #[error("bank outbox {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl From<DomainError> for BankError {
    fn from(e: DomainError) -> Self {
        BankError::Ledger(LedgerError::Rejected(e))
    }
}

impl BankError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            BankError::Ledger(e) => e.code(),
            BankError::Io { .. } => "outbox_unavailable",
        }
    }
}

fn rejected<T>(code: &'static str, message: impl Into<String>) -> Result<T, BankError> {
    Err(DomainError::new(code, message).into())
}

/// Every bank batch, oldest first.
pub async fn batches(store: &Store) -> Result<Vec<BankBatch>, LedgerError> {
    Ok(rows::batches(store).await?)
}

/// One bank batch.
pub async fn batch(store: &Store, batch_id: &str) -> Result<Option<BankBatch>, LedgerError> {
    Ok(rows::batch(store, batch_id).await?)
}

/// One bank batch, or `unknown_bank_batch`.
pub(crate) async fn known_batch(store: &Store, batch_id: &str) -> Result<BankBatch, BankError> {
    match batch(store, batch_id).await? {
        Some(b) => Ok(b),
        None => rejected("unknown_bank_batch", format!("no bank batch {batch_id}")),
    }
}

/// Payouts read in one statement.
const PAYOUTS_PER_READ: usize = 1_000;

/// The payouts of a batch, in file order.
pub(crate) async fn batch_payouts(
    store: &Store,
    b: &BankBatch,
) -> Result<Vec<PayoutRecord>, BankError> {
    let mut out = Vec::with_capacity(b.payout_ids.len());
    for chunk in b.payout_ids.chunks(PAYOUTS_PER_READ) {
        let ids: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let mut found = payouts::payouts(store, &ids).await?;
        for id in chunk {
            match found.remove(id) {
                Some(p) => out.push(p),
                None => {
                    return rejected(
                        "corrupt_projection",
                        format!("batch {} names unknown payout {id}", b.batch_id),
                    );
                }
            }
        }
    }
    Ok(out)
}

/// The statement hash each payout's transfer commits to (SPEC §13).
async fn statements_of(
    store: &Store,
    payouts: &[PayoutRecord],
) -> Result<HashMap<String, [u8; 32]>, BankError> {
    let pairs: Vec<(&str, &str)> = payouts
        .iter()
        .map(|p| (p.payout_id.as_str(), p.provider_id.as_str()))
        .collect();
    Ok(crate::statement::statement_hashes(store, &pairs)
        .await
        .map_err(LedgerError::from)?)
}

fn naive(ms: i64) -> NaiveDateTime {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.naive_utc())
        .unwrap_or_default()
}

/// Rebuilds the bytes of a recorded batch and checks them against its recorded SHA-256.
pub async fn regenerate(
    ledger: &Ledger,
    originator: &Originator,
    batch_id: &str,
) -> Result<(BankBatch, BankFile), BankError> {
    let b = known_batch(&ledger.store, batch_id).await?;
    let file = rebuild(ledger, originator, &b).await?;
    Ok((b, file))
}

async fn rebuild(
    ledger: &Ledger,
    originator: &Originator,
    b: &BankBatch,
) -> Result<BankFile, BankError> {
    let mut payouts = batch_payouts(&ledger.store, b).await?;
    // The bank details as the file was written: opened with their providers' keys.
    if let Some(Err(reason)) = ledger
        .open_payout_methods(&mut payouts)
        .await?
        .into_iter()
        .find(Result::is_err)
    {
        return rejected(
            crate::ledger::personal::PROVIDER_ERASED,
            format!(
                "the file of batch {} cannot be written again: {reason}",
                b.batch_id
            ),
        );
    }
    let modifier = match b.rail {
        Rail::Ach => match files::modifier_of(&b.file_name) {
            Some(m) => m,
            None => {
                return rejected(
                    "corrupt_projection",
                    format!(
                        "batch {} has no file id modifier in {}",
                        b.batch_id, b.file_name
                    ),
                );
            }
        },
        _ => 'A',
    };
    let statements = statements_of(&ledger.store, &payouts).await?;
    let write = |statements: &HashMap<String, [u8; 32]>| {
        files::write_file(
            originator,
            b.rail,
            &b.batch_id,
            (naive(b.generated_at_ms), modifier),
            &payouts,
            statements,
        )
    };
    let mut file = write(&statements)?;
    let mut sha = file_sha256_hex(&file.contents);
    if sha != b.sha256 && !statements.is_empty() {
        // A batch written before payments committed to statements.
        let before = write(&HashMap::new())?;
        let before_sha = file_sha256_hex(&before.contents);
        if before_sha == b.sha256 {
            (file, sha) = (before, before_sha);
        }
    }
    if sha != b.sha256 {
        return rejected(
            "bank_file_mismatch",
            format!(
                "regenerating batch {} gives SHA-256 {sha}, but the ledger recorded {}: the bank configuration changed since the batch was generated; restore it to rewrite the file",
                b.batch_id, b.sha256
            ),
        );
    }
    Ok(file)
}

/// The path of a batch's file in the outbox (the name comes from the ledger; refused if it
/// could leave the directory).
pub fn outbox_path(config: &BankConfig, b: &BankBatch) -> Result<PathBuf, BankError> {
    let name = &b.file_name;
    if name.is_empty()
        || name.starts_with('.')
        || name.contains(['/', '\\'])
        || name.chars().any(char::is_control)
    {
        return rejected(
            "corrupt_projection",
            format!("batch {} has an unsafe file name {name:?}", b.batch_id),
        );
    }
    Ok(Path::new(&config.outbox_dir).join(name))
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> BankError + '_ {
    move |source| BankError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `contents` to `path` atomically, mode 0600: a temporary file in the same
/// directory, fsync, rename, fsync of the directory.
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), BankError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        // Bank files carry names and account numbers: readable by the owner only, whatever
        // the umask (created 0600, not widened afterwards).
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io_error(path))
}

/// Writes a batch's file to the outbox unless it is already there with the recorded
/// SHA-256. Returns its path.
pub(crate) async fn ensure_file(
    ledger: &Ledger,
    config: &BankConfig,
    originator: &Originator,
    b: &BankBatch,
) -> Result<PathBuf, BankError> {
    let path = outbox_path(config, b)?;
    if let Ok(bytes) = std::fs::read(&path) {
        if hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)) == b.sha256 {
            return Ok(path);
        }
        tracing::warn!(batch_id = %b.batch_id, path = %path.display(), "bank file differs from the ledger; rewriting it");
    }
    let file = rebuild(ledger, originator, b).await?;
    write_atomic(&path, file.contents.as_bytes())?;
    Ok(path)
}

/// A batch as a generation reports it: its payouts counted, not listed, so a generation
/// holds one batch's payout ids at a time however many it writes ([`batch`] lists them).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BatchSummary {
    pub batch_id: String,
    pub rail: Rail,
    pub file_name: String,
    pub sha256: String,
    pub payouts: usize,
    /// Total of the file in cents of `currency`.
    pub total_cents: i64,
    pub currency: String,
    pub status: BatchStatus,
    pub generated_at_ms: i64,
    pub updated_at_ms: i64,
}

impl From<BankBatch> for BatchSummary {
    fn from(b: BankBatch) -> BatchSummary {
        BatchSummary {
            batch_id: b.batch_id,
            rail: b.rail,
            file_name: b.file_name,
            sha256: b.sha256,
            payouts: b.payout_ids.len(),
            total_cents: b.total_cents,
            currency: b.currency,
            status: b.status,
            generated_at_ms: b.generated_at_ms,
            updated_at_ms: b.updated_at_ms,
        }
    }
}

/// What happened to one batch in a generation.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BatchOutcome {
    pub batch: BatchSummary,
    pub path: PathBuf,
    /// Generated by this call (false: an earlier batch finished).
    pub new: bool,
    /// Payouts submitted by this call.
    pub submitted: usize,
    /// Payouts of the batch that are not in transit (failed or cancelled meanwhile): do
    /// not send the file before the bank removes them.
    pub problems: Vec<String>,
}

/// A payout that could not go into any file: failed, its amount back in payable.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Unbankable {
    pub payout_id: String,
    pub reason: String,
}

/// The result of [`generate_batches`].
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct GenerateReport {
    pub batches: Vec<BatchOutcome>,
    pub failed: Vec<Unbankable>,
}

/// How many of a batch's lifecycle answers moved a payout now; a payout whose state did not
/// allow the step is reported in `problems`, any other refusal ends the step.
fn tally<'a>(
    payout_ids: impl Iterator<Item = &'a str>,
    answers: Vec<Result<Applied, LedgerError>>,
    problems: &mut Vec<String>,
) -> Result<usize, BankError> {
    let mut moved = 0;
    for (payout_id, answer) in payout_ids.zip(answers) {
        match answer {
            Ok(Applied::Accepted) => moved += 1,
            Ok(Applied::Duplicate) => {}
            Err(LedgerError::Rejected(e)) if e.code == "invalid_payout_state" => {
                problems.push(format!("payout {payout_id}: {}", e.message));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(moved)
}

/// Submits the batch's payouts that are still `created`; reports the ones that left the
/// in-transit states.
async fn submit_batch_payouts(
    ledger: &Ledger,
    b: &BankBatch,
    actor: &Actor,
) -> Result<(usize, Vec<String>), BankError> {
    let mut problems = Vec::new();
    let mut created: Vec<PayoutRecord> = Vec::new();
    for p in batch_payouts(&ledger.store, b).await? {
        match p.status {
            PayoutStatus::Created => created.push(p),
            PayoutStatus::Submitted | PayoutStatus::Settled | PayoutStatus::Returned => {}
            other => problems.push(format!(
                "payout {} is {other} but is in the file of batch {}",
                p.payout_id, b.batch_id
            )),
        }
    }
    submit_created(ledger, b, &created, problems, actor).await
}

/// Submits the payouts `created` of batch `b`, which were `created` when read, with their
/// end-to-end ids; one that moved on since is reported in `problems`.
async fn submit_created(
    ledger: &Ledger,
    b: &BankBatch,
    created: &[PayoutRecord],
    mut problems: Vec<String>,
    actor: &Actor,
) -> Result<(usize, Vec<String>), BankError> {
    let mut submitted = 0;
    let e2e: Vec<String> = created
        .iter()
        .map(|p| files::end_to_end_id(p.rail, &p.payout_id))
        .collect();
    let created: Vec<(&str, Option<&str>)> = created
        .iter()
        .zip(&e2e)
        .map(|(p, e2e)| (p.payout_id.as_str(), Some(e2e.as_str())))
        .collect();
    // The first payout alone, then the others together (as many per transaction as one
    // may lock streams): a crash in between leaves a batch partly submitted, which the
    // next run finishes.
    let (first, rest) = created.split_at(created.len().min(1));
    let per_tx = ledger.config.ingest_streams_per_tx_max.max(1);
    for group in std::iter::once(first).chain(rest.chunks(per_tx)) {
        if group.is_empty() {
            continue;
        }
        let answers = ledger.submit_payouts(group, &b.batch_id, actor).await?;
        let ids = group.iter().map(|(id, _)| *id);
        submitted += tally(ids, answers, &mut problems)?;
        failpoint(failpoints::AFTER_SUBMIT);
    }
    for problem in &problems {
        tracing::error!(batch_id = %b.batch_id, problem = %problem, "bank batch payout not in transit");
    }
    Ok((submitted, problems))
}

/// The bank outbox: finishes the batches on the ledger and puts every `created` SEPA and
/// ACH payout in no batch yet into a new file per rail (see the module documentation).
/// The creation time of new files is the ledger clock's now.
pub async fn generate_batches(
    ledger: &Ledger,
    config: &BankConfig,
    actor: &Actor,
) -> Result<GenerateReport, BankError> {
    let originator = Originator::parse(config)?;
    let store = &ledger.store;
    let mut report = GenerateReport::default();
    let mut finished: HashSet<String> = HashSet::new();

    for _round in 0..GENERATE_ROUNDS_MAX {
        // 1. Finish what an earlier (crashed or concurrent) generation left: the batches
        //    with a payout still `created` (handed off ones are never written again here).
        let unfinished = rows::unfinished_batches(store)
            .await
            .map_err(LedgerError::from)?;
        for b in unfinished {
            if finished.contains(&b.batch_id) {
                continue;
            }
            let path = ensure_file(ledger, config, &originator, &b).await?;
            let (submitted, problems) = submit_batch_payouts(ledger, &b, actor).await?;
            finished.insert(b.batch_id.clone());
            if submitted > 0 || !problems.is_empty() {
                report.batches.push(BatchOutcome {
                    batch: b.into(),
                    path,
                    new: false,
                    submitted,
                    problems,
                });
            }
        }

        // 2. New batches, one per rail and round.
        let mut progressed = false;
        for rail in [Rail::Sepa, Rail::Ach] {
            let (chosen, failed_any) =
                choose_bankable(ledger, config, rail, actor, &mut report).await?;
            progressed |= failed_any;
            if chosen.is_empty() {
                continue;
            }
            if let Some(outcome) =
                generate_one(ledger, config, &originator, rail, &chosen, actor).await?
            {
                finished.insert(outcome.batch.batch_id.clone());
                report.batches.push(outcome);
            }
            progressed = true;
        }
        if !progressed {
            return Ok(report);
        }
    }
    rejected(
        "bank_generation_incomplete",
        format!("stopped after {GENERATE_ROUNDS_MAX} rounds; run it again"),
    )
}

/// The created payouts of `rail` in no batch yet, sorted by id, at most
/// `batch_payouts_max` of them, read [`PAYOUTS_PER_READ`] at a time. An unbankable one met
/// on the way is failed (its money back in payable) and listed in `report`; the flag says
/// whether any was.
async fn choose_bankable(
    ledger: &Ledger,
    config: &BankConfig,
    rail: Rail,
    actor: &Actor,
    report: &mut GenerateReport,
) -> Result<(Vec<PayoutRecord>, bool), BankError> {
    let mut chosen: Vec<PayoutRecord> = Vec::new();
    let mut failed_any = false;
    let mut after = String::new();
    while chosen.len() < config.batch_payouts_max {
        let page = rows::unbatched_created(&ledger.store, rail, &after, PAYOUTS_PER_READ)
            .await
            .map_err(LedgerError::from)?;
        let last_page = page.len() < PAYOUTS_PER_READ;
        let mut page = page;
        // The bank details the file needs, opened; an erased provider's payout has none.
        let opened = ledger.open_payout_methods(&mut page).await?;
        for (p, opened) in page.into_iter().zip(opened) {
            if chosen.len() >= config.batch_payouts_max {
                break;
            }
            p.payout_id.as_str().clone_into(&mut after);
            let bankable = opened
                .map_err(|reason| {
                    crate::domain::DomainError::new(
                        crate::ledger::personal::PROVIDER_ERASED,
                        reason,
                    )
                })
                .and_then(|()| files::check_bankable(&p));
            match bankable {
                Ok(()) => chosen.push(p),
                Err(e) => {
                    // It can never be written: fail it, the money goes back to payable.
                    let reason = format!("{}: {}", e.code, e.message);
                    match ledger.fail_payout(&p.payout_id, &reason, actor).await {
                        Ok(_) => report.failed.push(Unbankable {
                            payout_id: p.payout_id.to_string(),
                            reason,
                        }),
                        Err(LedgerError::Rejected(e)) if e.code == "invalid_payout_state" => {}
                        Err(e) => return Err(e.into()),
                    }
                    failed_any = true;
                }
            }
        }
        if last_page {
            break;
        }
    }
    Ok((chosen, failed_any))
}

/// Records, writes and submits one new batch of `chosen` (sorted by id). `None` when
/// another generation batched some of them first (the caller looks again).
async fn generate_one(
    ledger: &Ledger,
    config: &BankConfig,
    originator: &Originator,
    rail: Rail,
    chosen: &[PayoutRecord],
    actor: &Actor,
) -> Result<Option<BatchOutcome>, BankError> {
    let ids: Vec<String> = chosen.iter().map(|p| p.payout_id.to_string()).collect();
    let batch_id = files::batch_id(rail, &ids);
    // The SHA-256 and bytes of the last file built: the recorded batch's, when it is.
    let built: std::sync::Mutex<Option<(String, String)>> = std::sync::Mutex::new(None);
    let statements = statements_of(&ledger.store, chosen).await?;
    let file = |slot: BatchSlot| {
        let created = naive(slot.created_ms);
        let modifier = files::modifier_for(slot.same_day_ach);
        let file = files::write_file(
            originator,
            rail,
            &batch_id,
            (created, modifier),
            chosen,
            &statements,
        )?;
        let sha256 = file_sha256_hex(&file.contents);
        let generated = BankBatchGenerated {
            batch_id: batch_id.clone(),
            rail,
            file_name: files::file_name(rail, &batch_id, created, modifier),
            sha256: sha256.clone(),
            payout_ids: ids.clone(),
            total_cents: file.total_cents,
            currency: file.currency.to_owned(),
        };
        *built.lock().expect("file lock") = Some((sha256, file.contents));
        Ok(generated)
    };
    let recorded = ledger
        .record_bank_batch(&batch_id, &ids, actor, &file)
        .await?;
    if !recorded {
        return Ok(None);
    }
    failpoint(failpoints::AFTER_GENERATED);
    let b = known_batch(&ledger.store, &batch_id).await?;
    tracing::info!(batch_id = %b.batch_id, rail = rail.as_str(), payouts = b.payout_ids.len(), total_cents = b.total_cents, "bank batch generated");
    // The bytes just built are the batch's when their SHA-256 is the one recorded; the
    // payouts were `created` when chosen (one that moved since is reported by its submit).
    let path = match built.into_inner().expect("file lock") {
        Some((sha256, contents)) if sha256 == b.sha256 => {
            let path = outbox_path(config, &b)?;
            write_atomic(&path, contents.as_bytes())?;
            path
        }
        _ => ensure_file(ledger, config, originator, &b).await?,
    };
    failpoint(failpoints::AFTER_FILE);
    let (submitted, problems) = submit_created(ledger, &b, chosen, Vec::new(), actor).await?;
    Ok(Some(BatchOutcome {
        batch: b.into(),
        path,
        new: true,
        submitted,
        problems,
    }))
}

/// The result of a lifecycle step of a batch.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LifecycleOutcome {
    pub batch: BankBatch,
    /// `accepted` when the status changed now, `duplicate` when it already had it.
    pub status_change: &'static str,
    /// Payouts moved by this call (submitted or settled).
    pub payouts_changed: usize,
    pub problems: Vec<String>,
}

/// The file of a batch went to the bank: generated → submitted. Submits any payout of the
/// batch still `created` first (an interrupted generation).
pub async fn mark_submitted(
    ledger: &Ledger,
    batch_id: &str,
    actor: &Actor,
) -> Result<LifecycleOutcome, BankError> {
    let store = &ledger.store;
    let b = known_batch(store, batch_id).await?;
    let (submitted, problems) = submit_batch_payouts(ledger, &b, actor).await?;
    let applied = ledger
        .change_bank_batch_status(batch_id, BatchStatus::Submitted, actor)
        .await?;
    Ok(LifecycleOutcome {
        batch: known_batch(store, batch_id).await?,
        status_change: applied.as_str(),
        payouts_changed: submitted,
        problems,
    })
}

/// The bank executed the batch: submitted → settled, and `payout.settled` (in transit →
/// `platform:treasury:bank`) for each of its payouts. Running it again finishes an
/// interrupted call.
pub async fn mark_settled(
    ledger: &Ledger,
    batch_id: &str,
    actor: &Actor,
) -> Result<LifecycleOutcome, BankError> {
    let store = &ledger.store;
    let b = known_batch(store, batch_id).await?;
    if b.status == BatchStatus::Generated {
        return rejected(
            "invalid_batch_state",
            format!("bank batch {batch_id} is generated; mark it submitted first"),
        );
    }
    let applied = ledger
        .change_bank_batch_status(batch_id, BatchStatus::Settled, actor)
        .await?;
    failpoint(failpoints::AFTER_BATCH_SETTLED);
    let mut settled = 0;
    let mut problems = Vec::new();
    let mut to_settle: Vec<String> = Vec::new();
    for p in batch_payouts(store, &b).await? {
        match p.status {
            PayoutStatus::Created | PayoutStatus::Submitted => to_settle.push(p.payout_id.into()),
            PayoutStatus::Settled | PayoutStatus::Returned => {}
            other => problems.push(format!(
                "payout {} is {other}; it was not settled with batch {batch_id}",
                p.payout_id
            )),
        }
    }
    // Settled together, as many payouts per transaction as one may lock streams.
    let ids: Vec<&str> = to_settle.iter().map(String::as_str).collect();
    for chunk in ids.chunks(ledger.config.ingest_streams_per_tx_max.max(1)) {
        let answers = ledger.settle_payouts(chunk, batch_id, actor).await?;
        settled += tally(chunk.iter().copied(), answers, &mut problems)?;
    }
    Ok(LifecycleOutcome {
        batch: known_batch(store, batch_id).await?,
        status_change: applied.as_str(),
        payouts_changed: settled,
        problems,
    })
}

/// The result of a bank return.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReturnOutcome {
    pub payout_id: String,
    pub provider_id: ProviderId,
    pub batch_id: String,
    pub code: String,
    pub reason: String,
    /// The provider's bank details are now blocked until a `provider.update` replaces them.
    pub method_invalid: bool,
    /// `accepted` or `duplicate`.
    pub status: &'static str,
}

/// The bank batch that payout `p` (`payout_id`), returned with `reason`, went in: the
/// code must be of the payout's rail, and the payout in a bank file. `batches` holds the
/// batches found so far (each looked up once for the returns of one file).
async fn returned_batch(
    store: &Store,
    payout_id: &str,
    p: &PayoutRecord,
    reason: &ReturnReason,
    batches: &mut HashSet<String>,
) -> Result<String, BankError> {
    let rail_of_code = match reason.rail() {
        BankRail::Sepa => Rail::Sepa,
        BankRail::Ach => Rail::Ach,
    };
    if p.rail != rail_of_code {
        return rejected(
            "return_code_rail_mismatch",
            format!(
                "{} is a {} return code; payout {payout_id} went by {}",
                reason.code(),
                rail_of_code.as_str(),
                p.rail.as_str()
            ),
        );
    }
    if let Some(r) = &p.reference
        && (batches.contains(r) || batch(store, r).await?.is_some())
    {
        batches.insert(r.clone());
        return Ok(r.clone());
    }
    rejected(
        "invalid_payout_state",
        format!(
            "payout {payout_id} is {} and in no bank batch; only a payout sent in a bank file can be returned",
            p.status
        ),
    )
}

/// A bank returned a payout with reason `code` (`AC04`, `R03`, …): the payout is returned
/// (`platform:treasury:bank` −, payable +) and the provider's bank details are marked
/// invalid (the next run decides `no_method` until a gated command sets or re-confirms
/// them). A return
/// that arrives before the batch was marked settled settles the payout first: the money
/// left and came back.
pub async fn return_payout(
    ledger: &Ledger,
    payout_id: &str,
    code: &str,
    actor: &Actor,
) -> Result<ReturnOutcome, BankError> {
    return_payouts(ledger, &[(payout_id, code)], actor)
        .await?
        .pop()
        .unwrap_or_else(|| rejected("unknown_payout", format!("no payout {payout_id}")))
}

/// A return checked, before it is booked.
enum ReturnCheck {
    /// Returned before with the same code: nothing to book.
    Done(ReturnOutcome),
    /// To book; `settle_first` when the payout is still `submitted`.
    Book {
        outcome: ReturnOutcome,
        description: &'static str,
        settle_first: bool,
    },
}

/// Checks the return of `payout_id` with `code` as [`return_payout`] books it.
async fn check_return(
    store: &Store,
    payout_id: &str,
    code: &str,
    batches: &mut HashSet<String>,
) -> Result<ReturnCheck, BankError> {
    let reason =
        ReturnReason::parse(code).map_err(|e| DomainError::new(e.code(), e.to_string()))?;
    let Some(p) = payouts::payout(store, payout_id).await? else {
        return rejected("unknown_payout", format!("no payout {payout_id}"));
    };
    let batch_id = returned_batch(store, payout_id, &p, &reason, batches).await?;
    let outcome = ReturnOutcome {
        payout_id: p.payout_id.to_string(),
        provider_id: p.provider_id.clone(),
        batch_id,
        code: reason.code().to_owned(),
        reason: reason.description().to_owned(),
        method_invalid: false,
        status: "duplicate",
    };
    let settle_first = match p.status {
        PayoutStatus::Returned => {
            // Same code again: a duplicate (nothing booked; `method_invalid` reports false).
            let prefix = format!("{}: ", reason.code());
            if p.failure_reason
                .as_deref()
                .is_some_and(|r| r.starts_with(&prefix))
            {
                return Ok(ReturnCheck::Done(outcome));
            }
            return rejected(
                "conflict",
                format!(
                    "payout {payout_id} was already returned ({})",
                    p.failure_reason.unwrap_or_default()
                ),
            );
        }
        PayoutStatus::Submitted => true,
        PayoutStatus::Settled => false,
        other => {
            return rejected(
                "invalid_payout_state",
                format!("payout {payout_id} is {other}; only a sent bank payout can be returned"),
            );
        }
    };
    Ok(ReturnCheck::Book {
        outcome,
        description: reason.description(),
        settle_first,
    })
}

/// [`return_payout`] for several distinct payouts `(payout_id, code)` together (the return
/// credits of a bank's notification): each checked alone; those still `submitted` settled
/// first, a batch at a time; then every return booked in one transaction of lifecycle
/// commands. A result per payout, in order; the outer error is a storage failure.
pub(crate) async fn return_payouts(
    ledger: &Ledger,
    returns: &[(&str, &str)],
    actor: &Actor,
) -> Result<Vec<Result<ReturnOutcome, BankError>>, BankError> {
    let mut out: Vec<Option<Result<ReturnOutcome, BankError>>> =
        returns.iter().map(|_| None).collect();
    let mut to_book: Vec<(usize, ReturnOutcome, &'static str)> = Vec::new();
    let mut to_settle: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut batches = HashSet::new();
    for (i, (payout_id, code)) in returns.iter().enumerate() {
        match check_return(&ledger.store, payout_id, code, &mut batches).await {
            Ok(ReturnCheck::Done(o)) => out[i] = Some(Ok(o)),
            Ok(ReturnCheck::Book {
                outcome,
                description,
                settle_first,
            }) => {
                if settle_first {
                    to_settle
                        .entry(outcome.batch_id.clone())
                        .or_default()
                        .push(i);
                }
                to_book.push((i, outcome, description));
            }
            Err(BankError::Ledger(LedgerError::Store(e))) => {
                return Err(LedgerError::Store(e).into());
            }
            Err(e) => out[i] = Some(Err(e)),
        }
    }
    // The money left before it came back: settled first, under its batch.
    for (batch_id, indexes) in &to_settle {
        let ids: Vec<&str> = indexes.iter().map(|i| returns[*i].0).collect();
        let answers = ledger.settle_payouts(&ids, batch_id, actor).await?;
        for (i, answer) in indexes.iter().zip(answers) {
            if let Err(e) = answer {
                out[*i] = Some(Err(e.into()));
            }
        }
    }
    // SPEC §6 and §10: every return marks the bank details invalid, whatever its reason
    // code and whatever details the provider entered since. A closed account, a fraud
    // suspicion and a refusal all mean: do not send there again until confirmed. And the
    // return puts money back to payable on one importer's word: re-confirming the details
    // is a gated command, so no payout follows it without a second operator.
    to_book.retain(|(i, _, _)| out[*i].is_none());
    let commands: Vec<(&str, &str, &str)> = to_book
        .iter()
        .map(|(i, o, description)| (returns[*i].0, o.code.as_str(), *description))
        .collect();
    let answers = ledger.return_payouts(&commands, true, actor).await?;
    for ((i, mut outcome, _), answer) in to_book.into_iter().zip(answers) {
        out[i] = Some(answer.map_err(BankError::from).map(|applied| {
            outcome.method_invalid = true;
            outcome.status = applied.as_str();
            outcome
        }));
    }
    Ok(out
        .into_iter()
        .map(|o| o.unwrap_or_else(|| rejected("unknown_payout", "no answer")))
        .collect())
}
