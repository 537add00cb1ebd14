//! Applying projection ops in SQL, and loading/replacing whole projection tables.

use std::collections::BTreeMap;

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, Row};

use crate::domain::projection::{ProjOp, Projections, TABLES, TableSpec, Val, table};

use super::{Dialect, StoreError};

/// Rows per statement: each statement carries its rows as one JSON parameter.
const ROWS_PER_STATEMENT_MAX: usize = 10_000;

/// Whether a projection column holds integers (by the naming convention of the schema).
pub fn is_int_column(name: &str) -> bool {
    name.ends_with("_ms")
        || name.ends_with("_micro_usdc")
        || name.ends_with("_cents")
        || matches!(
            name,
            "day"
                | "seq"
                | "candidates"
                | "fee_bps"
                | "method_invalid"
                | "last_valid_block_height"
                | "slot"
        )
}

fn bind<'q>(
    query: Query<'q, Any, AnyArguments<'q>>,
    val: &Val,
    column: &str,
) -> Query<'q, Any, AnyArguments<'q>> {
    match val {
        Val::Int(v) => query.bind(*v),
        Val::Text(t) => query.bind(t.clone()),
        Val::Null if is_int_column(column) => query.bind(Option::<i64>::None),
        Val::Null => query.bind(Option::<String>::None),
    }
}

fn columns(spec: &TableSpec) -> Vec<&'static str> {
    spec.key.iter().chain(spec.vals.iter()).copied().collect()
}

/// Inserts rows; with `upsert`, an existing key gets the new values (or, with `add`, the
/// sum of the old and new values in the `add` columns). The rows travel as one JSON
/// parameter (see [`Dialect::json_rows`]), so the statement text depends only on the table
/// and the conflict rule and is prepared once per connection.
async fn insert_rows(
    conn: &mut AnyConnection,
    spec: &TableSpec,
    rows: &[(&Vec<Val>, &Vec<Val>)],
    conflict: Conflict<'_>,
) -> Result<(), sqlx::Error> {
    let cols = columns(spec);
    let dialect = Dialect::of(conn);
    let select: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if is_int_column(c) {
                format!("CAST(j.value ->> {i} AS BIGINT)")
            } else {
                format!("j.value ->> {i}")
            }
        })
        .collect();
    // `WHERE true`: SQLite reads `ON CONFLICT` after a bare `FROM` as a join constraint.
    let mut sql = format!(
        "INSERT INTO {} ({}) SELECT {} FROM {} WHERE true",
        spec.name,
        cols.join(","),
        select.join(", "),
        dialect.json_rows(1, ROWS_PER_STATEMENT_MAX)
    );
    match conflict {
        Conflict::Fail => {}
        Conflict::Replace => sql.push_str(&format!(
            " ON CONFLICT ({}) DO UPDATE SET {}",
            spec.key.join(","),
            spec.vals
                .iter()
                .map(|c| format!("{c} = excluded.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Conflict::Add(add_cols) => sql.push_str(&format!(
            " ON CONFLICT ({}) DO UPDATE SET {}",
            spec.key.join(","),
            add_cols
                .iter()
                .map(|&i| {
                    let c = spec.vals[i];
                    format!("{c} = {}.{c} + excluded.{c}", spec.name)
                })
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
    for chunk in rows.chunks(ROWS_PER_STATEMENT_MAX) {
        let cells: Vec<Vec<&Val>> = chunk
            .iter()
            .map(|(key, vals)| key.iter().chain(vals.iter()).collect())
            .collect();
        sqlx::query(&sql)
            .bind(super::json_rows_param(&cells))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Conflict<'a> {
    Fail,
    Replace,
    Add(&'a [usize]),
}

/// A summed add: the row's values and the indexes of the value columns it adds to.
type AddRow = (Vec<Val>, Vec<usize>);

/// Puts not yet written, per table, in arrival order. A put is an upsert of the whole row,
/// so a later put of a pending key replaces the pending one: one statement never holds a key
/// twice (PostgreSQL refuses to upsert a row twice in one statement).
#[derive(Default)]
struct PendingPuts<'a> {
    tables: BTreeMap<&'static str, PendingRows<'a>>,
}

/// The pending rows of one table and the position of each key among them.
#[derive(Default)]
struct PendingRows<'a> {
    rows: Vec<(&'a Vec<Val>, &'a Vec<Val>)>,
    at: BTreeMap<&'a Vec<Val>, usize>,
}

impl<'a> PendingPuts<'a> {
    fn put(&mut self, t: &'static str, key: &'a Vec<Val>, vals: &'a Vec<Val>) {
        let pending = self.tables.entry(t).or_default();
        match pending.at.get(key) {
            Some(&i) => pending.rows[i].1 = vals,
            None => {
                pending.at.insert(key, pending.rows.len());
                pending.rows.push((key, vals));
            }
        }
    }

    /// Writes the pending puts of table `t` (before a patch or removal reads its rows).
    async fn flush(&mut self, conn: &mut AnyConnection, t: &str) -> Result<(), sqlx::Error> {
        if let Some(pending) = self.tables.remove(t) {
            insert_rows(conn, table(t), &pending.rows, Conflict::Replace).await?;
        }
        Ok(())
    }

    /// Writes every pending put, one multi-row statement per table.
    async fn flush_all(&mut self, conn: &mut AnyConnection) -> Result<(), sqlx::Error> {
        for (t, pending) in std::mem::take(&mut self.tables) {
            insert_rows(conn, table(t), &pending.rows, Conflict::Replace).await?;
        }
        Ok(())
    }
}

/// Applies the ops of one transaction. Adds (to the additive tables) are summed per row
/// and puts are gathered per table, each written with one multi-row statement; a patch or
/// a removal first writes the pending puts of its own table, so it applies in order to the
/// rows before it. Projection tables have no foreign keys or triggers: statements on
/// different tables commute. A command that appends many events (a payout run's chunk:
/// `payout_run.decided` and `payout.created` alternate) writes two statements, not one per
/// event.
pub async fn apply_ops(conn: &mut AnyConnection, ops: &[ProjOp]) -> Result<(), sqlx::Error> {
    let mut adds: BTreeMap<&'static str, BTreeMap<Vec<Val>, AddRow>> = BTreeMap::new();
    let mut puts = PendingPuts::default();
    for op in ops {
        match op {
            ProjOp::Add {
                table: t,
                key,
                init,
                deltas,
            } => {
                let entry = adds
                    .entry(t)
                    .or_default()
                    .entry(key.clone())
                    .or_insert_with(|| (init.clone(), Vec::new()));
                for (i, d) in deltas {
                    entry.0[*i] = Val::Int(entry.0[*i].int() + d);
                    if !entry.1.contains(i) {
                        entry.1.push(*i);
                    }
                }
            }
            ProjOp::Put {
                table: t,
                key,
                vals,
            } => puts.put(t, key, vals),
            ProjOp::Patch { table: t, key, set } => {
                puts.flush(conn, t).await?;
                if set.is_empty() {
                    continue;
                }
                patch(conn, t, key, set).await?;
            }
            ProjOp::RemoveSegments { gpu_id, event_id } => {
                puts.flush(conn, "usage_segments").await?;
                sqlx::query("DELETE FROM usage_segments WHERE gpu_id = $1 AND event_id = $2")
                    .bind(gpu_id)
                    .bind(event_id)
                    .execute(&mut *conn)
                    .await?;
            }
        }
    }
    puts.flush_all(conn).await?;
    add_rows(conn, &adds).await
}

/// `UPDATE` of the columns `set` of the row `key` of table `t`.
async fn patch(
    conn: &mut AnyConnection,
    t: &str,
    key: &[Val],
    set: &[(usize, Val)],
) -> Result<(), sqlx::Error> {
    let spec = table(t);
    let assignments: Vec<String> = set
        .iter()
        .enumerate()
        .map(|(n, (i, _))| format!("{} = ${}", spec.vals[*i], n + 1))
        .collect();
    let conditions: Vec<String> = spec
        .key
        .iter()
        .enumerate()
        .map(|(n, k)| format!("{k} = ${}", set.len() + n + 1))
        .collect();
    let sql = format!(
        "UPDATE {} SET {} WHERE {}",
        spec.name,
        assignments.join(", "),
        conditions.join(" AND ")
    );
    let mut query = sqlx::query(&sql);
    for (i, v) in set {
        query = bind(query, v, spec.vals[*i]);
    }
    for (v, c) in key.iter().zip(spec.key.iter()) {
        query = bind(query, v, c);
    }
    query.execute(&mut *conn).await?;
    Ok(())
}

/// Writes the summed adds, one multi-row upsert per table.
async fn add_rows(
    conn: &mut AnyConnection,
    adds: &BTreeMap<&'static str, BTreeMap<Vec<Val>, AddRow>>,
) -> Result<(), sqlx::Error> {
    for (name, rows) in adds {
        let spec = table(name);
        // All adds of one table touch the same columns.
        let add_cols: Vec<usize> = rows
            .values()
            .next()
            .map(|(_, cols)| cols.clone())
            .unwrap_or_default();
        let rows: Vec<(&Vec<Val>, &Vec<Val>)> = rows.iter().map(|(k, (v, _))| (k, v)).collect();
        insert_rows(conn, spec, &rows, Conflict::Add(&add_cols)).await?;
    }
    Ok(())
}

/// Loads a whole projection table, keyed like [`Projections`].
pub async fn load_table(
    conn: &mut AnyConnection,
    spec: &'static TableSpec,
) -> Result<BTreeMap<Vec<Val>, Vec<Val>>, StoreError> {
    let cols = columns(spec);
    let sql = format!("SELECT {} FROM {}", cols.join(","), spec.name);
    let rows = sqlx::query(&sql).fetch_all(&mut *conn).await?;
    let mut out = BTreeMap::new();
    for row in rows {
        let mut cells = Vec::with_capacity(cols.len());
        for (i, c) in cols.iter().enumerate() {
            let v = if is_int_column(c) {
                row.try_get::<Option<i64>, _>(i)?.map(Val::Int)
            } else {
                row.try_get::<Option<String>, _>(i)?.map(Val::Text)
            };
            cells.push(v.unwrap_or(Val::Null));
        }
        let vals = cells.split_off(spec.key.len());
        out.insert(cells, vals);
    }
    Ok(out)
}

/// Deletes every projection row and writes `projections` instead.
pub async fn replace_all(
    conn: &mut AnyConnection,
    projections: &Projections,
) -> Result<(), StoreError> {
    for spec in TABLES {
        sqlx::query(&format!("DELETE FROM {}", spec.name))
            .execute(&mut *conn)
            .await?;
        let rows: Vec<(&Vec<Val>, &Vec<Val>)> = projections.rows(spec.name).collect();
        insert_rows(conn, spec, &rows, Conflict::Fail).await?;
    }
    Ok(())
}
