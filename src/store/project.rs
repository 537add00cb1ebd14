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
        dialect.json_rows(1)
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

/// Applies the ops of one transaction. Adds (to the additive tables) are summed per row
/// first; puts, patches and removals apply in order, consecutive puts to one table as one
/// multi-row statement.
pub async fn apply_ops(conn: &mut AnyConnection, ops: &[ProjOp]) -> Result<(), sqlx::Error> {
    type AddRow = (Vec<Val>, Vec<usize>);
    let mut adds: BTreeMap<&'static str, BTreeMap<Vec<Val>, AddRow>> = BTreeMap::new();
    let mut puts: Vec<(Vec<Val>, Vec<Val>)> = Vec::new();
    let mut put_table: Option<&'static str> = None;
    // The keys in `puts` (a linear scan made large batches quadratic).
    let mut put_keys: std::collections::BTreeSet<&Vec<Val>> = std::collections::BTreeSet::new();

    async fn flush(
        conn: &mut AnyConnection,
        table_name: Option<&'static str>,
        puts: &mut Vec<(Vec<Val>, Vec<Val>)>,
    ) -> Result<(), sqlx::Error> {
        if let Some(name) = table_name
            && !puts.is_empty()
        {
            let rows: Vec<(&Vec<Val>, &Vec<Val>)> = puts.iter().map(|(k, v)| (k, v)).collect();
            insert_rows(conn, table(name), &rows, Conflict::Replace).await?;
        }
        puts.clear();
        Ok(())
    }

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
            } => {
                if puts.is_empty() {
                    put_keys.clear();
                }
                let same_table = put_table == Some(*t);
                let duplicate_key = same_table && put_keys.contains(key);
                if !same_table || duplicate_key {
                    flush(conn, put_table, &mut puts).await?;
                    put_keys.clear();
                }
                put_table = Some(t);
                put_keys.insert(key);
                puts.push((key.clone(), vals.clone()));
            }
            ProjOp::Patch { table: t, key, set } => {
                flush(conn, put_table, &mut puts).await?;
                if set.is_empty() {
                    continue;
                }
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
            }
            ProjOp::RemoveSegments { gpu_id, event_id } => {
                flush(conn, put_table, &mut puts).await?;
                sqlx::query("DELETE FROM usage_segments WHERE gpu_id = $1 AND event_id = $2")
                    .bind(gpu_id)
                    .bind(event_id)
                    .execute(&mut *conn)
                    .await?;
            }
        }
    }
    flush(conn, put_table, &mut puts).await?;
    for (name, rows) in &adds {
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
