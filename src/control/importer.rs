//! `settle import` and `POST /v1/admin/import`: parsed lines applied in order, each through
//! dual control ([`super::submit`]), consecutive usage lines and consecutive reliability
//! lines each booked as one batch.

use super::{Sign, Submitted, submit};
use crate::config::ControlConfig;
use crate::domain::DomainError;
use crate::ledger::ingest::UsageInput;
use crate::ledger::reliability::GpuReport;
use crate::ledger::{Actor, Applied, Ledger, LedgerError};
use crate::wire::import::{Command, LineResult, describe, rejected};

/// Applies parsed import lines in order. Consecutive usage lines are booked as one batch,
/// and consecutive reliability lines recorded as one (each up to `batch_events_max`); every
/// line gets a result. Only a storage failure is an error.
pub struct Importer<'a> {
    ledger: &'a Ledger,
    control: &'a ControlConfig,
    actor: &'a Actor,
    signer: Option<&'a dyn Sign>,
    batch: Vec<(usize, UsageInput)>,
    reports: Vec<(usize, GpuReport)>,
    results: Vec<LineResult>,
}

impl<'a> Importer<'a> {
    pub fn new(ledger: &'a Ledger, control: &'a ControlConfig, actor: &'a Actor) -> Importer<'a> {
        Importer {
            ledger,
            control,
            actor,
            signer: None,
            batch: Vec::new(),
            reports: Vec::new(),
            results: Vec::new(),
        }
    }

    /// Signs the requests of gated lines as `signer`'s operator (a ledger with operators).
    pub(crate) fn signed_by(mut self, signer: Option<&'a dyn Sign>) -> Importer<'a> {
        self.signer = signer;
        self
    }

    /// Takes line `number`, parsed (or its parse error).
    pub async fn line(
        &mut self,
        number: usize,
        parsed: Result<Command, DomainError>,
    ) -> Result<(), LedgerError> {
        match parsed {
            Ok(Command::Usage(u)) => {
                self.flush_reports().await?;
                self.batch.push((number, u));
                if self.batch.len() >= self.ledger.config.batch_events_max {
                    self.flush_usage().await?;
                }
            }
            Ok(Command::Reliability(r)) => {
                self.flush_usage().await?;
                self.reports.push((number, r));
                if self.reports.len() >= self.ledger.config.batch_events_max {
                    self.flush_reports().await?;
                }
            }
            Ok(command) => {
                self.flush().await?;
                let (kind, id) = describe(&command);
                let submitted =
                    submit(self.ledger, self.control, &command, self.actor, self.signer).await;
                self.results.push(match submitted {
                    Ok(Submitted::Applied(applied)) => done(number, kind, id, applied),
                    Ok(Submitted::Pending(request)) => LineResult {
                        line: number,
                        kind,
                        id,
                        status: "pending",
                        code: Some("pending_approval".into()),
                        message: Some(format!(
                            "waits for a second actor to decide approval {} (its `approvals approve` or `approvals reject`)",
                            request.approval_id
                        )),
                        approval_id: Some(request.approval_id),
                    },
                    Err(LedgerError::Rejected(e)) => rejected(number, kind, id, e),
                    Err(e) => return Err(e),
                });
            }
            Err(e) => self.results.push(rejected(number, String::new(), None, e)),
        }
        Ok(())
    }

    /// The results decided so far that no waiting usage line precedes, in line order, taken
    /// out of the importer: a caller that prints them as they come (`settle ingest FILE`)
    /// holds no more than one batch of results, however long the file. Usage lines wait
    /// for their batch's booking, and what follows them waits with them.
    pub fn take_ready(&mut self) -> Vec<LineResult> {
        let first_waiting = self
            .batch
            .first()
            .map(|(line, _)| *line)
            .into_iter()
            .chain(self.reports.first().map(|(line, _)| *line))
            .min()
            .unwrap_or(usize::MAX);
        if self.results.first().is_none_or(|r| r.line > first_waiting) {
            return Vec::new();
        }
        self.results.sort_by_key(|r| r.line);
        let ready = self.results.partition_point(|r| r.line < first_waiting);
        self.results.drain(..ready).collect()
    }

    /// Books what is pending and returns the result of every line not taken by
    /// [`Importer::take_ready`], in line order.
    pub async fn finish(mut self) -> Result<Vec<LineResult>, LedgerError> {
        self.flush().await?;
        // What this import booked is folded into the aggregates before it reports: the
        // process leaves no work behind for the next reader.
        self.ledger.store.fold_dirty().await?;
        self.results.sort_by_key(|r| r.line);
        Ok(self.results)
    }

    async fn flush(&mut self) -> Result<(), LedgerError> {
        self.flush_usage().await?;
        self.flush_reports().await
    }

    /// Records the waiting reliability lines together.
    async fn flush_reports(&mut self) -> Result<(), LedgerError> {
        if self.reports.is_empty() {
            return Ok(());
        }
        let reports: Vec<_> = self.reports.iter().map(|(_, r)| r.clone()).collect();
        let recorded = self
            .ledger
            .record_gpu_reports_for(&reports, None, self.actor)
            .await?;
        for ((line, report), r) in self.reports.drain(..).zip(recorded) {
            let (kind, id) = describe(&Command::Reliability(report));
            self.results.push(match r {
                Ok(applied) => done(line, kind, id, applied),
                Err(LedgerError::Rejected(e)) => rejected(line, kind, id, e),
                Err(e) => return Err(e),
            });
        }
        Ok(())
    }

    /// Books the waiting usage lines as one batch.
    async fn flush_usage(&mut self) -> Result<(), LedgerError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let inputs: Vec<UsageInput> = self.batch.iter().map(|(_, u)| u.clone()).collect();
        let booked = self
            .ledger
            .ingest_usage(
                &inputs,
                &crate::ledger::ingest::SenderScope::Admin,
                self.actor,
            )
            .await?;
        for ((line, input), r) in self.batch.drain(..).zip(booked) {
            let (code, message) = match &r {
                crate::ledger::ingest::UsageResult::Rejected { code, message, .. } => {
                    (Some(code.to_string()), Some(message.clone()))
                }
                _ => (None, None),
            };
            self.results.push(LineResult {
                line,
                kind: "usage".into(),
                id: input.event_id,
                status: r.status(),
                code,
                message,
                approval_id: None,
            });
        }
        Ok(())
    }
}

/// The result of a line that was applied (or was a duplicate).
fn done(line: usize, kind: String, id: Option<String>, applied: Applied) -> LineResult {
    LineResult {
        line,
        kind,
        id,
        status: applied.as_str(),
        code: None,
        message: None,
        approval_id: None,
    }
}
