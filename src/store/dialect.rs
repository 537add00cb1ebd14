//! The SQL that differs between SQLite and PostgreSQL: placeholders, JSON row
//! parameters, how a transaction begins, hex literals.

use super::*;

/// Which database a store talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The dialect of an open connection.
    pub fn of(conn: &Conn) -> Dialect {
        match conn {
            Conn::Sqlite(_) => Dialect::Sqlite,
            Conn::Postgres(_) => Dialect::Postgres,
        }
    }

    /// `count` comma-separated bind placeholders for parameters `start + 1 ..= start + count`,
    /// bound in that order: `$n` on PostgreSQL, anonymous `?` on SQLite (binding numbered
    /// parameters costs SQLite time quadratic in their number, which dominated multi-row
    /// statements).
    pub fn placeholders(self, start: usize, count: usize) -> String {
        let mut out = String::with_capacity(count * 6);
        for i in 0..count {
            if i > 0 {
                out.push(',');
            }
            match self {
                Dialect::Sqlite => out.push('?'),
                Dialect::Postgres => {
                    use std::fmt::Write;
                    let _ = write!(out, "${}", start + i + 1);
                }
            }
        }
        out
    }

    /// The FROM item that unpacks parameter `$n`, a JSON array of arrays (see
    /// [`json_rows_param`]), into rows `j`; field `i` of a row is `j.value ->> i` (text, or
    /// a number: cast integers with `CAST(… AS BIGINT)`). One parameter carries any number of
    /// rows, so the statement text changes only with the size class of `rows` (below): it is
    /// parsed once per connection and size class, and there is no bind-parameter limit to
    /// chunk around.
    ///
    /// On PostgreSQL the parameter is parsed once into `jsonb`: each `->>` on a `json` value
    /// parses that row's text again, so a 12-column event insert read every row 12 times
    /// (1,000 event rows: 52–65 ms as `json`, 17–21 ms as `jsonb`, the same as `unnest` of
    /// arrays; `ops/bench/ingest.md`). Arrays keep their order either way.
    ///
    /// `rows` is how many rows the parameter holds (at most). PostgreSQL estimates 100 rows
    /// for any `jsonb_array_elements`, and so joined a single row with a table of 27,000
    /// by a hash join over a sequential scan (6–7 ms instead of 0.08 ms); a `LIMIT` of the
    /// next power of two at or above `rows` caps the estimate without cutting a row, and
    /// keeps the number of statement texts (prepared once per connection) small.
    pub fn json_rows(self, n: usize, rows: usize) -> String {
        match self {
            Dialect::Sqlite => format!("json_each(${n}) AS j"),
            Dialect::Postgres => format!(
                "(SELECT value FROM jsonb_array_elements(CAST(${n} AS jsonb)) LIMIT {}) AS j",
                rows.max(1).next_power_of_two()
            ),
        }
    }

    /// The statement that begins a transaction reading one snapshot of the database, taken
    /// at its first read on both (`verify`'s [`Store::snapshot`], a run's read ahead).
    pub(crate) fn begin_snapshot(self) -> &'static str {
        match self {
            Dialect::Sqlite => "BEGIN",
            Dialect::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ",
        }
    }

    /// The statement that begins a write transaction: `BEGIN IMMEDIATE` on SQLite (the write
    /// lock up front: a read-then-write transaction never fails to upgrade against a writer
    /// in another process), `BEGIN` on PostgreSQL.
    pub(crate) fn begin_write(self) -> &'static str {
        match self {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
        }
    }
}

/// Rows for a [`Dialect::json_rows`] parameter: a JSON array of arrays (a tuple serialises
/// as an array).
pub fn json_rows_param<T: serde::Serialize>(rows: &[T]) -> String {
    serde_json::to_string(rows).expect("rows serialise to JSON")
}

/// `$first, $first+1, …`: `count` numbered placeholders (statements that mix them with
/// other numbered parameters: [`Dialect::placeholders`] is anonymous on SQLite).
pub(super) fn numbered(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}
