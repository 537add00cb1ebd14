//! `settle import FILE` and `settle ingest FILE`: the lines read and applied as they come,
//! their results printed as they are decided, and the bookings folded behind the import
//! while it runs.

use super::*;

/// Imports (or, with `usage_only`, ingests) an NDJSON file. Consecutive usage lines are
/// booked in batches; every line gets a result. Exit code 0 when no line was rejected.
pub(super) async fn import(
    ledger: &Ledger,
    cli: &Cli,
    file: &str,
    usage_only: bool,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let format = cli.format;
    let config = super::config_of(cli.config.as_deref())?;
    let control = config.control;
    let reader: Box<dyn BufRead> = if file == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file).with_context(|| format!("opening {file}"))?,
        ))
    };
    let actor = cli_actor();
    let signer = cli_signer(ledger).await?;
    let mut importer = Importer::new(ledger, &control, &actor)
        .signed_by(signer.as_ref().map(|s| s as &dyn crate::control::Sign));
    let progress = progress_bar(file);
    let mut printer = ImportPrinter::new(format);
    let projector = ImportProjector::spawn(ledger, config.workers.projector_interval_ms);
    for (n, line) in reader.lines().enumerate() {
        let number = n + 1;
        let parsed = match line {
            Err(e) => Err(crate::domain::DomainError::new(
                "unreadable_line",
                e.to_string(),
            )),
            Ok(l) if l.trim().is_empty() => continue,
            Ok(l) if usage_only => serde_json::from_str::<UsageInput>(&l)
                .map(Command::Usage)
                .map_err(|e| crate::domain::DomainError::new("malformed_json", e.to_string())),
            Ok(l) => parse_line(&l),
        };
        importer.line(number, parsed).await?;
        printer.print(&importer.take_ready(), out)?;
        if let Some(p) = &progress {
            p.set_position(number as u64);
        }
    }
    projector.stop().await;
    let rest = importer.finish().await?;
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    printer.print(&rest, out)?;
    let totals = printer.finish(out)?;
    Ok(if totals.rejected == 0 { 0 } else { 2 })
}

/// Folds the aggregates of what an import books behind it while it runs, every
/// `workers.projector_interval_ms`, with the passes of `settle serve`'s projector
/// (`serve::projector_pass` without sweeps: the streams this process booked on), instead of
/// all of them after its last line: the folding overlaps the booking. `Importer::finish`
/// folds what is left. A failed pass is only logged: the fold is transactional, and the
/// final one reports its error.
struct ImportProjector {
    /// Dropped to stop it.
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl ImportProjector {
    fn spawn(ledger: &Ledger, interval_ms: u64) -> ImportProjector {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let ledger = ledger.clone();
        let interval = std::time::Duration::from_millis(interval_ms.max(1));
        let task = tokio::spawn(serve::every(
            interval,
            async move {
                let _ = stopped.await;
            },
            move || {
                let ledger = ledger.clone();
                async move { serve::projector_pass(&ledger, false).await }
            },
        ));
        ImportProjector { stop, task }
    }

    /// Stops it after its current pass.
    async fn stop(self) {
        drop(self.stop);
        let _ = self.task.await;
    }
}

/// Prints the result of every line of an import as it is decided, then the totals: the
/// output streams, so an import of any length holds at most one batch of results.
///
/// JSON is one document `{"lines": [...], "totals": {...}}`, one line object per text line;
/// CSV has its header first; the table's columns are as wide as the widest cell of its
/// first [`ImportPrinter::TABLE_SIZED_BY`] rows (all of a shorter import), longer cells
/// after them overflow their column.
struct ImportPrinter {
    format: Format,
    totals: Totals,
    /// Lines printed so far.
    printed: usize,
    /// Table: the rows held until the column widths are known, then the widths.
    held: Vec<Vec<String>>,
    widths: Option<Vec<usize>>,
}

impl ImportPrinter {
    const TABLE_SIZED_BY: usize = 1000;
    const COLUMNS: [&str; 6] = ["line", "type", "id", "status", "code", "message"];

    fn new(format: Format) -> ImportPrinter {
        ImportPrinter {
            format,
            totals: Totals::default(),
            printed: 0,
            held: Vec::new(),
            widths: None,
        }
    }

    fn print(&mut self, results: &[LineResult], out: &mut impl Write) -> anyhow::Result<()> {
        for r in results {
            self.totals.add(r);
            match self.format {
                Format::Json => {
                    let mut line = json!({"line": r.line, "type": r.kind, "id": r.id, "status": r.status, "code": r.code, "message": r.message});
                    if let Some(id) = &r.approval_id {
                        line["approval_id"] = json!(id);
                    }
                    let lead = if self.printed == 0 {
                        "{\n  \"lines\": [\n    "
                    } else {
                        ",\n    "
                    };
                    write!(out, "{lead}{line}")?;
                }
                Format::Csv => {
                    if self.printed == 0 {
                        Self::csv_header(out)?;
                    }
                    out.write_all(csv_line(Self::cells(r).into_iter()).as_bytes())?;
                }
                Format::Table => {
                    self.held.push(Self::cells(r));
                    if self.held.len() >= Self::TABLE_SIZED_BY {
                        self.flush_table(out)?;
                    }
                }
            }
            self.printed += 1;
        }
        Ok(())
    }

    fn csv_header(out: &mut impl Write) -> std::io::Result<()> {
        out.write_all(csv_line(Self::COLUMNS.iter().map(|c| c.to_string())).as_bytes())
    }

    fn cells(r: &LineResult) -> Vec<String> {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        vec![
            r.line.to_string(),
            r.kind.clone(),
            text(&r.id),
            r.status.to_owned(),
            text(&r.code),
            text(&r.message),
        ]
    }

    /// Table: fixes the widths from the rows held (once, with the header) and prints them.
    fn flush_table(&mut self, out: &mut impl Write) -> anyhow::Result<()> {
        let widths = match &self.widths {
            Some(widths) => widths,
            None => {
                let widths = table_widths(&Self::COLUMNS, &self.held);
                out.write_all(table_head(&Self::COLUMNS, &widths).as_bytes())?;
                self.widths.insert(widths)
            }
        };
        for row in self.held.drain(..) {
            out.write_all(table_line(&row, widths).as_bytes())?;
        }
        Ok(())
    }

    /// Prints what is held and the totals.
    fn finish(mut self, out: &mut impl Write) -> anyhow::Result<Totals> {
        let Totals {
            accepted,
            duplicate,
            pending,
            rejected,
        } = self.totals;
        match self.format {
            Format::Json => {
                let mut totals =
                    json!({"accepted": accepted, "duplicate": duplicate, "rejected": rejected});
                if pending > 0 {
                    totals["pending"] = json!(pending);
                }
                let lines_end = if self.printed == 0 {
                    "{\n  \"lines\": []"
                } else {
                    "\n  ]"
                };
                writeln!(out, "{lines_end},\n  \"totals\": {totals}\n}}")?;
            }
            Format::Csv => {
                if self.printed == 0 {
                    Self::csv_header(out)?;
                }
            }
            Format::Table => {
                self.flush_table(out)?;
                let waiting = if pending > 0 {
                    format!(", pending approval {pending}")
                } else {
                    String::new()
                };
                writeln!(
                    out,
                    "accepted {accepted}, duplicate {duplicate}, rejected {rejected}{waiting}"
                )?;
            }
        }
        Ok(self.totals)
    }
}

/// A progress bar on stderr for a file being read, when stderr is a terminal.
fn progress_bar(file: &str) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg}: {pos} lines ({per_sec})").ok()?,
    );
    bar.set_message(file.to_owned());
    Some(bar)
}
