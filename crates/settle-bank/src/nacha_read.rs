//! Reading NACHA files back: records, their order, and the control totals. Shared by the
//! return reader ([`crate::ach_answers`]) and the reader of the engine's own credit
//! files ([`crate::sent`]).
//!
//! Tolerant of how files travel: CRLF or LF line ends, blank lines, trailing blanks cut
//! from a record (a short record reads as if padded with spaces), a file without line
//! breaks (split every 94 characters), characters outside ASCII (read as `?`), and the
//! `9…9` filler records. Strict about what carries meaning: record order, numeric fields,
//! and every batch and file control (entry/addenda count, entry hash, debit and credit
//! totals, batch count) must match the records.

use std::borrow::Cow;

use chrono::NaiveDate;

use crate::answers::{ANSWER_ENTRIES_MAX, AnswerError, AnswerLocation};
use crate::nacha::NACHA_RECORD_CHARS;

/// One record: its 1-based line and its text (ASCII, at most 94 characters).
#[derive(Debug, Clone)]
pub(crate) struct Record<'a> {
    pub(crate) line: usize,
    pub(crate) text: Cow<'a, str>,
}

impl Record<'_> {
    /// Positions `from..=to` (1-based, as in the NACHA rules); positions past a short
    /// record read as spaces, so the result can be shorter than the field.
    pub(crate) fn field(&self, from: usize, to: usize) -> &str {
        let len = self.text.len();
        &self.text[(from - 1).min(len)..to.min(len)]
    }

    /// The record type (position 1).
    pub(crate) fn kind(&self) -> u8 {
        self.text.as_bytes().first().copied().unwrap_or(b' ')
    }

    pub(crate) fn at(&self) -> AnswerLocation {
        AnswerLocation::Line(self.line)
    }

    pub(crate) fn invalid(&self, field: &'static str, value: &str) -> AnswerError {
        AnswerError::InvalidField {
            at: self.at(),
            field,
            value: value.to_owned(),
        }
    }

    /// A numeric field: all digits, the full width.
    pub(crate) fn number(
        &self,
        from: usize,
        to: usize,
        name: &'static str,
    ) -> Result<u64, AnswerError> {
        let s = self.field(from, to);
        let ok = s.len() == to + 1 - from && s.bytes().all(|b| b.is_ascii_digit());
        ok.then(|| s.parse().ok())
            .flatten()
            .ok_or_else(|| self.invalid(name, s))
    }

    /// A digits-only field, kept as text (routing numbers, trace numbers).
    pub(crate) fn digits(
        &self,
        from: usize,
        to: usize,
        name: &'static str,
    ) -> Result<String, AnswerError> {
        self.number(from, to, name)?;
        Ok(self.field(from, to).to_owned())
    }

    /// A text field, trimmed.
    pub(crate) fn text(&self, from: usize, to: usize) -> String {
        self.field(from, to).trim().to_owned()
    }

    /// A `YYMMDD` date; `None` when blank or all zeros.
    pub(crate) fn date(
        &self,
        from: usize,
        to: usize,
        name: &'static str,
    ) -> Result<Option<NaiveDate>, AnswerError> {
        let s = self.field(from, to);
        if s.trim().is_empty() || s.bytes().all(|b| b == b'0') {
            return Ok(None);
        }
        NaiveDate::parse_from_str(s, "%y%m%d")
            .map(Some)
            .map_err(|_| self.invalid(name, s))
    }
}

/// An entry detail record and the addenda records after it.
#[derive(Debug)]
pub(crate) struct RawEntry<'a> {
    pub(crate) record: Record<'a>,
    pub(crate) addenda: Vec<Record<'a>>,
}

/// A batch: header, entries, control.
#[derive(Debug)]
pub(crate) struct RawBatch<'a> {
    pub(crate) header: Record<'a>,
    pub(crate) entries: Vec<RawEntry<'a>>,
    pub(crate) control: Record<'a>,
}

/// A whole file, checked.
#[derive(Debug)]
pub(crate) struct RawFile<'a> {
    pub(crate) header: Record<'a>,
    pub(crate) batches: Vec<RawBatch<'a>>,
}

/// Splits `input` into records (see the module documentation).
///
/// # Errors
/// [`AnswerError::InvalidRecordLength`] for a line longer than 94 characters.
pub(crate) fn records(input: &str) -> Result<Vec<Record<'_>>, AnswerError> {
    let input = input.strip_prefix('\u{feff}').unwrap_or(input);
    let unblocked = !input.contains(['\n', '\r'])
        && input.len() > NACHA_RECORD_CHARS
        && input.len().is_multiple_of(NACHA_RECORD_CHARS)
        && input.is_ascii();
    let lines: Vec<&str> = if unblocked {
        (0..input.len() / NACHA_RECORD_CHARS)
            .map(|i| &input[i * NACHA_RECORD_CHARS..(i + 1) * NACHA_RECORD_CHARS])
            .collect()
    } else {
        input.split('\n').collect()
    };
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.into_iter().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        let text: Cow<'_, str> = if line.is_ascii() {
            Cow::Borrowed(line)
        } else {
            Cow::Owned(
                line.chars()
                    .map(|c| if c.is_ascii() { c } else { '?' })
                    .collect(),
            )
        };
        let chars = text.len();
        if chars > NACHA_RECORD_CHARS {
            return Err(AnswerError::InvalidRecordLength {
                at: AnswerLocation::Line(i + 1),
                chars,
            });
        }
        out.push(Record { line: i + 1, text });
    }
    Ok(out)
}

/// A record of 94 `9`s that pads a file to whole blocks.
fn is_filler(r: &Record<'_>) -> bool {
    r.text.len() == NACHA_RECORD_CHARS && r.text.bytes().all(|b| b == b'9')
}

fn unexpected(r: &Record<'_>, detail: &str) -> AnswerError {
    AnswerError::UnexpectedRecord {
        at: r.at(),
        detail: format!("record type {:?}: {detail}", char::from(r.kind())),
    }
}

/// Reads `input` into a checked [`RawFile`].
///
/// # Errors
/// [`AnswerError`]: record lengths, order, filler, limits and control totals.
pub(crate) fn parse(input: &str) -> Result<RawFile<'_>, AnswerError> {
    let mut records = records(input)?.into_iter();
    let header = match records.next() {
        Some(r) if r.kind() == b'1' => r,
        Some(r) => {
            return Err(unexpected(
                &r,
                "a NACHA file starts with its file header (1)",
            ));
        }
        None => {
            return Err(AnswerError::Missing {
                at: AnswerLocation::File,
            });
        }
    };
    let mut batches: Vec<RawBatch<'_>> = Vec::new();
    let mut open: Option<(Record<'_>, Vec<RawEntry<'_>>)> = None;
    let mut entries_total = 0usize;
    let mut control = None;
    for r in records.by_ref() {
        match (r.kind(), &mut open) {
            (b'5', None) => open = Some((r, Vec::new())),
            (b'6', Some((_, entries))) => {
                entries_total += 1;
                if entries_total > ANSWER_ENTRIES_MAX {
                    return Err(AnswerError::TooManyEntries { at: r.at() });
                }
                entries.push(RawEntry {
                    record: r,
                    addenda: Vec::new(),
                });
            }
            (b'7', Some((_, entries))) => match entries.last_mut() {
                Some(e) => e.addenda.push(r),
                None => return Err(unexpected(&r, "an addenda record follows an entry (6)")),
            },
            (b'8', Some(_)) => {
                if let Some((header, entries)) = open.take() {
                    batches.push(RawBatch {
                        header,
                        entries,
                        control: r,
                    });
                }
            }
            (b'9', None) => {
                // A filler record (all 9s) is not a file control.
                if !is_filler(&r) {
                    control = Some(r);
                }
                break;
            }
            (_, Some(_)) => {
                return Err(unexpected(
                    &r,
                    "expected an entry (6), addenda (7) or batch control (8)",
                ));
            }
            (_, None) => {
                return Err(unexpected(
                    &r,
                    "expected a batch header (5) or the file control (9)",
                ));
            }
        }
    }
    let Some(control) = control else {
        return Err(AnswerError::UnexpectedRecord {
            at: AnswerLocation::File,
            detail: "the file ends without a file control record (9)".to_owned(),
        });
    };
    if let Some(r) = records.find(|r| !is_filler(r)) {
        return Err(unexpected(&r, "only 9-filler may follow the file control"));
    }
    for b in &batches {
        check_batch(b)?;
    }
    check_file(&batches, &control)?;
    Ok(RawFile { header, batches })
}

/// Sums of a set of entries, as the controls state them.
#[derive(Default)]
struct Sums {
    records: u64,
    hash: u64,
    debit: u64,
    credit: u64,
}

fn sums(entries: &[RawEntry<'_>]) -> Result<Sums, AnswerError> {
    let mut s = Sums::default();
    for e in entries {
        let r = &e.record;
        s.records += 1 + e.addenda.len() as u64;
        s.hash += r.number(4, 11, "receiving DFI identification")?;
        let amount = r.number(30, 39, "amount")?;
        let code = r.number(2, 3, "transaction code")?;
        match code % 10 {
            1..=4 => s.credit += amount,
            5..=9 => s.debit += amount,
            _ => {}
        }
    }
    Ok(s)
}

fn compare(
    r: &Record<'_>,
    field: &'static str,
    from: usize,
    to: usize,
    computed: u64,
) -> Result<(), AnswerError> {
    let stated = r.number(from, to, field)?;
    if stated == computed {
        Ok(())
    } else {
        Err(AnswerError::ControlMismatch {
            at: r.at(),
            field,
            stated,
            computed,
        })
    }
}

fn check_batch(b: &RawBatch<'_>) -> Result<(), AnswerError> {
    let s = sums(&b.entries)?;
    let c = &b.control;
    compare(c, "entry/addenda count", 5, 10, s.records)?;
    compare(c, "entry hash", 11, 20, s.hash % 10_000_000_000)?;
    compare(c, "total debit amount", 21, 32, s.debit)?;
    compare(c, "total credit amount", 33, 44, s.credit)
}

fn check_file(batches: &[RawBatch<'_>], c: &Record<'_>) -> Result<(), AnswerError> {
    let mut all = Sums::default();
    for b in batches {
        let s = sums(&b.entries)?;
        all.records += s.records;
        all.hash += s.hash;
        all.debit += s.debit;
        all.credit += s.credit;
    }
    compare(c, "batch count", 2, 7, batches.len() as u64)?;
    compare(c, "entry/addenda count", 14, 21, all.records)?;
    compare(c, "entry hash", 22, 31, all.hash % 10_000_000_000)?;
    compare(c, "total debit amount", 32, 43, all.debit)?;
    compare(c, "total credit amount", 44, 55, all.credit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_short_records() {
        let r = Record {
            line: 3,
            text: Cow::Borrowed("6221234"),
        };
        assert_eq!(r.field(2, 3), "22");
        assert_eq!(r.field(5, 9), "234");
        assert_eq!(r.field(80, 94), "");
        assert_eq!(r.number(2, 3, "code").unwrap(), 22);
        assert_eq!(r.number(4, 11, "dfi").unwrap_err().code(), "invalid_field");
    }

    #[test]
    fn splits_lines() {
        let rec = "1".repeat(94);
        let unblocked = format!("{rec}{rec}");
        assert_eq!(records(&unblocked).unwrap().len(), 2);
        let crlf = format!("{rec}\r\n\r\n{rec}\r\n\n  \n");
        let lines: Vec<usize> = records(&crlf).unwrap().iter().map(|r| r.line).collect();
        assert_eq!(lines, [1, 3]);
        let long = format!("{rec}1\n");
        assert_eq!(records(&long).unwrap_err().code(), "invalid_record_length");
        let utf8 = format!("{}é\n", "1".repeat(93));
        assert_eq!(records(&utf8).unwrap()[0].text.len(), 94);
    }
}
