//! SQLite bulk writes: rows bound as the anonymous `?` parameters of a multi-row `VALUES`.
//!
//! The rows of a bulk write used to travel to SQLite as one JSON parameter, unpacked with
//! `json_each` and one `->>` per column. SQLite 3.46 (the one sqlx bundles) hands each row of
//! `json_each` back as text and parses it again for every `->>`, so unpacking cost more than
//! writing: 16 columns of 1,000 payout rows took 18 ms to unpack and 8 ms to insert
//! (`ops/bench/runs.md`). Bound values reach SQLite as they are, blobs included (no
//! hex text either way).
//!
//! Anonymous parameters only: sqlx looks a named parameter (`$N`, `?NNN`) up by its number in
//! SQLite's list of names, a linear search per parameter, so a statement of thousands of
//! named parameters binds in quadratic time; anonymous ones are bound in order.
//!
//! Statement texts are few and cached: full chunks of [`ROWS_PER_STATEMENT`] rows, and the
//! rest as chunks of decreasing powers of two (64, 32, …, 1), so a table has at most eight
//! statement texts whatever the number of rows, each prepared once per connection.

use sqlx::Arguments;
use sqlx::error::BoxDynError;
use sqlx::sqlite::{Sqlite, SqliteArguments, SqliteConnection};

/// Rows per statement (a power of two). At 16 columns that is 2,048 parameters, well under
/// SQLite's limit of 32,766.
pub(super) const ROWS_PER_STATEMENT: usize = 128;

/// A statement of `rows` rows of `columns` parameters: `{head} VALUES (?, …), … {tail}`.
/// `head` is `INSERT INTO t (c1, …)`, `tail` an optional `ON CONFLICT …` clause.
pub(super) fn statement(head: &str, columns: usize, rows: usize, tail: &str) -> String {
    assert!(
        columns > 0 && rows > 0,
        "a VALUES statement needs a row and a column"
    );
    let row = format!("({})", vec!["?"; columns].join(", "));
    let mut sql = String::with_capacity(head.len() + tail.len() + 16 + rows * (row.len() + 2));
    sql.push_str(head);
    sql.push_str(" VALUES ");
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&row);
    }
    if !tail.is_empty() {
        sql.push(' ');
        sql.push_str(tail);
    }
    sql
}

/// The sizes of the statements that write `n` rows: full chunks, then powers of two.
pub(super) fn chunk_sizes(n: usize) -> Vec<usize> {
    let mut sizes = vec![ROWS_PER_STATEMENT; n / ROWS_PER_STATEMENT];
    let mut rest = n % ROWS_PER_STATEMENT;
    let mut size = ROWS_PER_STATEMENT / 2;
    while rest > 0 {
        if rest >= size {
            sizes.push(size);
            rest -= size;
        }
        size /= 2;
    }
    sizes
}

/// Writes `items`, `columns` values each, with `bind` adding one item's values (exactly
/// `columns` of them, in column order) to the statement's arguments.
pub(super) async fn write<'a, T: Sync>(
    conn: &mut SqliteConnection,
    head: &str,
    tail: &str,
    columns: usize,
    items: &'a [T],
    bind: impl Fn(&mut SqliteArguments<'a>, &'a T) -> Result<(), BoxDynError>,
) -> Result<(), sqlx::Error> {
    let mut start = 0;
    // The sizes never grow, so a text is built once per size, not once per chunk.
    let mut sql = (0, String::new());
    for size in chunk_sizes(items.len()) {
        if sql.0 != size {
            sql = (size, statement(head, columns, size, tail));
        }
        let mut args = SqliteArguments::default();
        args.reserve(size * columns, 0);
        for item in &items[start..start + size] {
            bind(&mut args, item).map_err(sqlx::Error::Encode)?;
        }
        debug_assert_eq!(args.len(), size * columns, "{columns} values a row: {head}");
        start += size;
        sqlx::query_with::<Sqlite, _>(&sql.1, args)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_row_with_few_statement_texts() {
        for n in [0, 1, 2, 63, 64, 127, 128, 129, 1_000, 2_000, 5_555] {
            let sizes = chunk_sizes(n);
            assert_eq!(sizes.iter().sum::<usize>(), n, "{n} rows");
            let distinct: std::collections::BTreeSet<_> = sizes.iter().collect();
            assert!(distinct.len() <= 8, "{n} rows: {sizes:?}");
            assert!(
                sizes
                    .iter()
                    .all(|s| s.is_power_of_two() && *s <= ROWS_PER_STATEMENT)
            );
        }
    }

    #[test]
    fn statement_has_one_anonymous_parameter_per_value() {
        let sql = statement("INSERT INTO t (a, b)", 2, 3, "ON CONFLICT (a) DO NOTHING");
        assert_eq!(
            sql,
            "INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?) ON CONFLICT (a) DO NOTHING"
        );
    }
}
