//! Rendering read results as a table (default), JSON or CSV.

use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Format {
    #[default]
    Table,
    Json,
    Csv,
}

/// Rows with named columns, in column order.
pub struct Rows {
    pub columns: Vec<&'static str>,
    pub rows: Vec<Vec<Value>>,
}

impl Rows {
    pub fn new(columns: Vec<&'static str>) -> Rows {
        Rows {
            columns,
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<Value>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    /// The rows as JSON objects.
    pub fn to_json(&self) -> Value {
        Value::Array(
            self.rows
                .iter()
                .map(|r| {
                    Value::Object(
                        self.columns
                            .iter()
                            .zip(r.iter())
                            .map(|(c, v)| (c.to_string(), v.clone()))
                            .collect(),
                    )
                })
                .collect(),
        )
    }

    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Json => serde_json::to_string_pretty(&self.to_json()).expect("json"),
            Format::Csv => {
                let mut out = csv_line(self.columns.iter().map(|c| c.to_string()));
                for r in &self.rows {
                    out.push_str(&csv_line(r.iter().map(cell)));
                }
                out
            }
            Format::Table => {
                let cells: Vec<Vec<String>> = self
                    .rows
                    .iter()
                    .map(|r| r.iter().map(cell).collect())
                    .collect();
                let widths = table_widths(&self.columns, &cells);
                let mut out = table_head(&self.columns, &widths);
                for r in &cells {
                    out.push_str(&table_line(r, &widths));
                }
                out
            }
        }
    }
}

/// The width of each column of a table: its name's, or its widest cell's.
pub(crate) fn table_widths(columns: &[&str], rows: &[Vec<String>]) -> Vec<usize> {
    let mut widths: Vec<usize> = columns.iter().map(|c| c.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    widths
}

/// A table's header: the column names, then a rule under each.
pub(crate) fn table_head(columns: &[&str], widths: &[usize]) -> String {
    let names: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    let rules: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    table_line(&names, widths) + &table_line(&rules, widths)
}

/// One table row, each cell padded to its column's width, newline-terminated.
pub(crate) fn table_line(cells: &[String], widths: &[usize]) -> String {
    let padded: Vec<String> = cells
        .iter()
        .zip(widths)
        .map(|(c, w)| format!("{c:<w$}"))
        .collect();
    format!("{}\n", padded.join("  ").trim_end())
}

/// A JSON value as a table or CSV cell.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One CSV record (RFC 4180 quoting), newline-terminated. A text cell that a spreadsheet
/// would run as a formula is neutralised first ([`neutralise_formula`]).
pub(crate) fn csv_line(fields: impl Iterator<Item = String>) -> String {
    let quoted: Vec<String> = fields
        .map(neutralise_formula)
        .map(|f| {
            if f.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", f.replace('"', "\"\""))
            } else {
                f
            }
        })
        .collect();
    format!("{}\n", quoted.join(","))
}

/// CSV injection: a cell starting with `=`, `+`, `-`, `@`, a tab or a carriage return is
/// read as a formula by spreadsheets, so such a text cell gets a leading `'` (shown as
/// text, the value intact after it). Numbers (`-12.500000`) are left as they are.
pub(crate) fn neutralise_formula(field: String) -> String {
    if field.starts_with(['=', '+', '-', '@', '\t', '\r']) && !is_decimal(&field) {
        format!("'{field}")
    } else {
        field
    }
}

/// `-?digits(.digits)?`: an amount or a count as this program writes them.
fn is_decimal(text: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    match unsigned.split_once('.') {
        Some((whole, fraction)) => digits(whole) && digits(fraction),
        None => digits(unsigned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn csv_cells_that_a_spreadsheet_would_run_are_neutralised_numbers_are_not() {
        let mut rows = Rows::new(vec!["name", "amount", "reason"]);
        rows.push(vec![
            json!("=HYPERLINK(\"http://x.test\",\"click\")"),
            json!("-12.500000"),
            json!("@SUM(A1:A9)"),
        ]);
        rows.push(vec![json!("+1 555"), json!("3"), json!("-")]);
        rows.push(vec![json!("\tcmd"), json!("-0.000001"), json!("-1-2")]);
        rows.push(vec![json!("Jane"), json!(null), json!("a=b")]);
        assert_eq!(
            rows.render(Format::Csv),
            "name,amount,reason\n\
             \"'=HYPERLINK(\"\"http://x.test\"\",\"\"click\"\")\",-12.500000,'@SUM(A1:A9)\n\
             '+1 555,3,'-\n\
             '\tcmd,-0.000001,'-1-2\n\
             Jane,,a=b\n"
        );
    }
}
