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
                let mut widths: Vec<usize> = self.columns.iter().map(|c| c.len()).collect();
                for r in &cells {
                    for (i, c) in r.iter().enumerate() {
                        widths[i] = widths[i].max(c.chars().count());
                    }
                }
                let line = |r: Vec<String>| {
                    let padded: Vec<String> = r
                        .iter()
                        .enumerate()
                        .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
                        .collect();
                    format!("{}\n", padded.join("  ").trim_end())
                };
                let mut out = line(self.columns.iter().map(|c| c.to_string()).collect());
                out.push_str(&line(widths.iter().map(|w| "-".repeat(*w)).collect()));
                for r in cells {
                    out.push_str(&line(r));
                }
                out
            }
        }
    }
}

/// A JSON value as a table or CSV cell.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One CSV record (RFC 4180 quoting), newline-terminated.
pub fn csv_line(fields: impl Iterator<Item = String>) -> String {
    let quoted: Vec<String> = fields
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
