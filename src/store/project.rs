//! Applying projection ops in SQL, and loading whole projection tables.
//!
//! The ops of one transaction become a few statements of fixed text ([`apply_ops`]): puts
//! are gathered per table into one multi-row upsert, adds to the additive tables are summed
//! per row first, and consecutive patches of one table that set the same columns are one
//! `UPDATE … FROM` over their rows. Inserted rows travel as one JSON parameter on
//! PostgreSQL (`Dialect::json_rows`) and as the bound parameters of a multi-row `VALUES` on
//! SQLite (`store::values`); patches as one JSON parameter on both. A statement's text so
//! depends only on its table and shape, and is prepared once per connection.
//!
//! Every table is typed by its declaration (`domain::projection::TableSpec`: the listed
//! integer columns `BIGINT`, every other one `TEXT`), which
//! `tests/it/ledger.rs::projection_tables_declare_the_schemas_columns_and_types` checks
//! against the migrated schema of both databases; rows are read back by column name
//! ([`row_vals`]). On PostgreSQL the tables updated in place (the aggregates and the
//! checkpoints) leave room in each page for their rows' next versions (`fillfactor`).

use std::collections::BTreeMap;

use sqlx::{Arguments, Row};

use crate::domain::projection::{
    ProjOp, Projections, STREAM_COLUMN, TABLES, TableSpec, Val, table,
};

use super::on;
use super::{Conn, Dialect, StoreError};

/// Rows per statement that carries its rows as one JSON parameter (PostgreSQL's inserts,
/// the patches on either database).
const ROWS_PER_STATEMENT_MAX: usize = 10_000;

/// Field `i` of a JSON row `j` (see [`Dialect::json_rows`]) as the SQL value of `column` of
/// `spec`, typed by the table's declaration.
fn json_cell(i: usize, spec: &TableSpec, column: &str) -> String {
    if spec.is_int(column) {
        format!("CAST(j.value ->> {i} AS BIGINT)")
    } else {
        format!("j.value ->> {i}")
    }
}

/// Inserts rows; with `upsert`, an existing key gets the new values (or, with `add`, the
/// sum of the old and new values in the `add` columns). On PostgreSQL the rows travel as one
/// JSON parameter (see [`Dialect::json_rows`]), on SQLite as bound values (`store::values`);
/// either way the statement texts depend only on the table and the conflict rule and are
/// prepared once per connection.
async fn insert_rows(
    conn: &mut Conn,
    spec: &TableSpec,
    rows: &[(&Vec<Val>, &Vec<Val>)],
    conflict: Conflict<'_>,
) -> Result<(), sqlx::Error> {
    insert_rows_into(conn, spec.name, spec, rows, conflict).await
}

/// [`insert_rows`] into the table `into`, which has `spec`'s columns (the table itself, or
/// the copy `verify` fills with its fold).
async fn insert_rows_into(
    conn: &mut Conn,
    into: &str,
    spec: &TableSpec,
    rows: &[(&Vec<Val>, &Vec<Val>)],
    conflict: Conflict<'_>,
) -> Result<(), sqlx::Error> {
    let cols: Vec<&str> = spec.columns().collect();
    let unique = conflict_key(Dialect::of(conn), spec);
    let tail = match conflict {
        Conflict::Fail => String::new(),
        Conflict::Replace => format!(
            "ON CONFLICT ({unique}) DO UPDATE SET {}",
            spec.vals
                .iter()
                .map(|c| format!("{c} = excluded.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Conflict::Add(add_cols) => format!(
            "ON CONFLICT ({unique}) DO UPDATE SET {}",
            add_cols
                .iter()
                .map(|&i| {
                    let c = spec.vals[i];
                    format!("{c} = {}.{c} + excluded.{c}", spec.name)
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let head = format!("INSERT INTO {} ({})", into, cols.join(","));
    if let Conn::Sqlite(c) = conn {
        // Bound values (`store::values`): no JSON to unpack per column.
        super::values::write(c, &head, &tail, cols.len(), rows, |args, (key, vals)| {
            key.iter().chain(vals.iter()).try_for_each(|v| match v {
                Val::Null => args.add(None::<i64>),
                Val::Int(i) => args.add(*i),
                Val::Text(t) => args.add(t.as_str()),
            })
        })
        .await?;
        return Ok(());
    }
    let select: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| json_cell(i, spec, c))
        .collect();
    // `WHERE true`: SQLite reads `ON CONFLICT` after a bare `FROM` as a join constraint.
    let sql = format!(
        "{head} SELECT {} FROM {} WHERE true {tail}",
        select.join(", "),
        Dialect::of(conn).json_rows(1, ROWS_PER_STATEMENT_MAX)
    );
    for chunk in rows.chunks(ROWS_PER_STATEMENT_MAX) {
        let cells: Vec<Vec<&Val>> = chunk
            .iter()
            .map(|(key, vals)| key.iter().chain(vals.iter()).collect())
            .collect();
        on!(&mut *conn, |c| sqlx::query(&sql)
            .bind(super::json_rows_param(&cells))
            .execute(c)
            .await
            .map(|r| r.rows_affected()))?;
    }
    Ok(())
}

/// The columns of `spec`'s unique key as an `ON CONFLICT` target. A per-provider table
/// (keyed by its `stream`, the distribution column on Citus, `store::citus`) is unique by
/// its key with the stream on PostgreSQL, where the stream is part of the primary key, and
/// by its key without it on SQLite, whose tables keep their first primary key (the stream is
/// a function of the other key columns either way).
fn conflict_key(dialect: Dialect, spec: &TableSpec) -> String {
    let key = spec.key.iter().copied();
    match dialect {
        Dialect::Postgres => key.collect::<Vec<_>>().join(","),
        Dialect::Sqlite => key
            .filter(|c| *c != STREAM_COLUMN)
            .collect::<Vec<_>>()
            .join(","),
    }
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
    async fn flush(&mut self, conn: &mut Conn, t: &str) -> Result<(), sqlx::Error> {
        if let Some(pending) = self.tables.remove(t) {
            insert_rows(conn, table(t), &pending.rows, Conflict::Replace).await?;
        }
        Ok(())
    }

    /// Writes every pending put, one multi-row statement per table.
    async fn flush_all(&mut self, conn: &mut Conn) -> Result<(), sqlx::Error> {
        for (t, pending) in std::mem::take(&mut self.tables) {
            insert_rows(conn, table(t), &pending.rows, Conflict::Replace).await?;
        }
        Ok(())
    }
}

/// Applies the ops of one transaction. Adds (to the additive tables) are summed per row
/// and puts are gathered per table, each written with one multi-row statement; a patch or
/// a removal first writes the pending puts of its own table, so it applies in order to the
/// rows before it, and a put the pending patches of its table. Consecutive patches of one
/// table that set the same columns of distinct rows are written with one statement.
/// Projection tables have no foreign keys or triggers: statements on different tables
/// commute. A command that appends many events (a payout run's chunk:
/// `payout_run.decided` and `payout.created` alternate) writes two statements, not one per
/// event.
pub(crate) async fn apply_ops(conn: &mut Conn, ops: &[ProjOp]) -> Result<(), sqlx::Error> {
    let mut adds: BTreeMap<&'static str, BTreeMap<Vec<Val>, AddRow>> = BTreeMap::new();
    let mut puts = PendingPuts::default();
    let mut patches = PendingPatches::default();
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
                // A put after patches of its table overwrites what they set.
                patches.flush(conn, Some(t)).await?;
                puts.put(t, key, vals);
            }
            ProjOp::Patch { table: t, key, set } => {
                puts.flush(conn, t).await?;
                if set.is_empty() {
                    continue;
                }
                if !patches.joins(t, key, set) {
                    patches.flush(conn, None).await?;
                }
                patches.push(t, key, set);
            }
            ProjOp::RemoveSegments {
                stream,
                gpu_id,
                event_id,
            } => {
                puts.flush(conn, "usage_segments").await?;
                patches.flush(conn, Some("usage_segments")).await?;
                on!(&mut *conn, |c| sqlx::query(
                    "DELETE FROM usage_segments WHERE stream = $1 AND gpu_id = $2 AND event_id = $3"
                )
                .bind(stream)
                .bind(gpu_id)
                .bind(event_id)
                .execute(c)
                .await
                .map(|r| r.rows_affected()))?;
            }
        }
    }
    // A table never has both pending: a put flushes its table's patches, a patch its puts.
    patches.flush(conn, None).await?;
    puts.flush_all(conn).await?;
    add_rows(conn, &adds).await
}

/// A patched row: its key and the `(value column, value)` pairs it sets.
type PatchRow<'a> = (&'a [Val], &'a [(usize, Val)]);

/// Patches not yet written: consecutive patches of one table that set the same columns of
/// distinct rows, written with one statement ([`patch_rows`]). A bank batch's or a Solana
/// attempt's payouts move together: before, each made a statement of its own.
#[derive(Default)]
struct PendingPatches<'a> {
    table: &'static str,
    columns: Vec<usize>,
    keys: std::collections::BTreeSet<&'a [Val]>,
    rows: Vec<PatchRow<'a>>,
}

impl<'a> PendingPatches<'a> {
    /// Whether the patch of `key` setting `set` of table `t` joins the pending ones.
    fn joins(&self, t: &str, key: &[Val], set: &[(usize, Val)]) -> bool {
        self.table == t
            && self.columns.len() == set.len()
            && self.columns.iter().zip(set).all(|(c, (i, _))| c == i)
            && !self.keys.contains(key)
    }

    fn push(&mut self, t: &'static str, key: &'a [Val], set: &'a [(usize, Val)]) {
        if self.rows.is_empty() {
            self.table = t;
            self.columns = set.iter().map(|(i, _)| *i).collect();
        }
        self.keys.insert(key);
        self.rows.push((key, set));
    }

    /// Writes the pending patches of table `t` (`None`: of any table).
    async fn flush(&mut self, conn: &mut Conn, t: Option<&str>) -> Result<(), sqlx::Error> {
        if self.rows.is_empty() || t.is_some_and(|t| t != self.table) {
            return Ok(());
        }
        let pending = std::mem::take(self);
        for chunk in pending.rows.chunks(ROWS_PER_STATEMENT_MAX) {
            patch_rows(conn, pending.table, &pending.columns, chunk).await?;
        }
        Ok(())
    }
}

/// One `UPDATE` of the value columns `columns` of the rows `rows` (each its key and the
/// values it sets, in `columns` order) of table `t`, the rows as one JSON parameter.
async fn patch_rows(
    conn: &mut Conn,
    t: &str,
    columns: &[usize],
    rows: &[PatchRow<'_>],
) -> Result<(), sqlx::Error> {
    let spec = table(t);
    let assignments: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(n, i)| format!("{} = {}", spec.vals[*i], json_cell(n, spec, spec.vals[*i])))
        .collect();
    let conditions: Vec<String> = spec
        .key
        .iter()
        .enumerate()
        .map(|(n, k)| {
            format!(
                "{}.{k} = {}",
                spec.name,
                json_cell(columns.len() + n, spec, k)
            )
        })
        .collect();
    let sql = format!(
        "UPDATE {} SET {} FROM {} WHERE {}",
        spec.name,
        assignments.join(", "),
        Dialect::of(conn).json_rows(1, rows.len()),
        conditions.join(" AND ")
    );
    let cells: Vec<Vec<&Val>> = rows
        .iter()
        .map(|(key, set)| set.iter().map(|(_, v)| v).chain(key.iter()).collect())
        .collect();
    on!(&mut *conn, |c| sqlx::query(&sql)
        .bind(super::json_rows_param(&cells))
        .execute(c)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(())
}

/// Writes the summed adds, one multi-row upsert per table.
async fn add_rows(
    conn: &mut Conn,
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
pub(crate) async fn load_table(
    conn: &mut Conn,
    spec: &'static TableSpec,
) -> Result<BTreeMap<Vec<Val>, Vec<Val>>, StoreError> {
    let cols: Vec<&str> = spec.columns().collect();
    let sql = format!("SELECT {} FROM {}", spec.column_list(), spec.name);
    let rows = on!(&mut *conn, |c| sqlx::query(&sql)
        .fetch_all(c)
        .await
        .and_then(|rows| rows_vals(&rows, spec, &cols)))?;
    let mut out = BTreeMap::new();
    for mut cells in rows {
        let vals = cells.split_off(spec.key.len());
        out.insert(cells, vals);
    }
    Ok(out)
}

/// The cells `cols` of a row of `spec` (read by column name), typed by the table's
/// declaration.
pub(super) fn row_vals<R>(row: &R, spec: &TableSpec, cols: &[&str]) -> Result<Vec<Val>, sqlx::Error>
where
    R: Row,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let mut cells = Vec::with_capacity(cols.len());
    for c in cols {
        let v = if spec.is_int(c) {
            row.try_get::<Option<i64>, _>(*c)?.map(Val::Int)
        } else {
            row.try_get::<Option<String>, _>(*c)?.map(Val::Text)
        };
        cells.push(v.unwrap_or(Val::Null));
    }
    Ok(cells)
}

/// [`row_vals`] of every row.
pub(super) fn rows_vals<R>(
    rows: &[R],
    spec: &TableSpec,
    cols: &[&str],
) -> Result<Vec<Vec<Val>>, sqlx::Error>
where
    R: Row,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    rows.iter().map(|row| row_vals(row, spec, cols)).collect()
}

/// Writes every row of `projections` into copies of the projection tables named
/// `{prefix}{table}` (see [`super::snapshot`]).
pub(super) async fn insert_copies(
    conn: &mut Conn,
    prefix: &str,
    projections: &Projections,
) -> Result<(), sqlx::Error> {
    for spec in TABLES {
        let rows: Vec<(&Vec<Val>, &Vec<Val>)> = projections.rows(spec.name).collect();
        if !rows.is_empty() {
            let into = format!("{prefix}{}", spec.name);
            insert_rows_into(conn, &into, spec, &rows, Conflict::Fail).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Store, StoreOptions};

    /// A fresh migrated store: PostgreSQL when `SETTLE_TEST_PG_URL` names a server (a
    /// database of its own, returned as (admin url, name) for the caller to drop), else
    /// SQLite in `dir`.
    async fn fresh_store(dir: &std::path::Path) -> (Store, Option<(String, String)>) {
        let (url, drop) = match std::env::var("SETTLE_TEST_PG_URL") {
            Ok(admin_url) if !admin_url.is_empty() => {
                let name = format!("settle_project_{}", rand::random::<u32>());
                let admin = sqlx::PgPool::connect(&admin_url).await.unwrap();
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&admin)
                    .await
                    .unwrap();
                admin.close().await;
                let base = admin_url.rsplit_once('/').map_or(&*admin_url, |(b, _)| b);
                (format!("{base}/{name}"), Some((admin_url.clone(), name)))
            }
            _ => (format!("sqlite://{}", dir.join("p.db").display()), None),
        };
        let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
        store.migrate().await.unwrap();
        (store, drop)
    }

    fn payout(id: &str, status: &str) -> ProjOp {
        let spec = table("payouts");
        let vals = spec
            .vals
            .iter()
            .map(|c| match *c {
                "status" => Val::Text(status.into()),
                c if spec.is_int(c) => Val::Int(7),
                "reference" | "hold_reason" | "failure_reason" | "end_to_end_id" => Val::Null,
                c => Val::Text(format!("{c}-{id}")),
            })
            .collect();
        ProjOp::Put {
            table: "payouts",
            key: vec![Val::Text(id.into()), Val::Text("provider:p".into())],
            vals,
        }
    }

    fn set(id: &str, columns: &[(&str, Val)]) -> ProjOp {
        let spec = table("payouts");
        ProjOp::Patch {
            table: "payouts",
            key: vec![Val::Text(id.into()), Val::Text("provider:p".into())],
            set: columns
                .iter()
                .map(|(c, v)| (spec.vals.iter().position(|x| x == c).unwrap(), v.clone()))
                .collect(),
        }
    }

    /// Patches written together (consecutive, same columns, distinct rows) and apart (a
    /// row patched twice, other columns, a put after a patch) leave the table exactly as
    /// the ops applied one by one in memory.
    #[tokio::test]
    async fn grouped_patches_apply_in_order() {
        let text = |t: &str| Val::Text(t.into());
        let ops = vec![
            payout("p1", "created"),
            payout("p2", "created"),
            payout("p3", "created"),
            set(
                "p1",
                &[("status", text("submitted")), ("reference", text("b1"))],
            ),
            set(
                "p2",
                &[("status", text("submitted")), ("reference", text("b1"))],
            ),
            set(
                "p1",
                &[("status", text("settled")), ("reference", text("b1"))],
            ),
            set("p3", &[("failure_reason", text("closed"))]),
            payout("p3", "created"),
            set("p1", &[("failure_reason", text("late"))]),
            set("p3", &[("updated_at_ms", Val::Int(99))]),
            payout("p2", "failed"),
            set(
                "p2",
                &[("reference", Val::Null), ("status", text("cancelled"))],
            ),
            set(
                "p4",
                &[("status", text("settled")), ("reference", text("b2"))],
            ),
        ];
        let dir = tempfile::tempdir().unwrap();
        let (store, pg_db) = fresh_store(dir.path()).await;
        let mut conn = store.acquire().await.unwrap();
        apply_ops(&mut conn, &ops).await.unwrap();
        let stored = load_table(&mut conn, table("payouts")).await.unwrap();
        drop(conn);
        store.close().await;
        if let Some((admin_url, name)) = pg_db {
            let admin = sqlx::PgPool::connect(&admin_url).await.unwrap();
            sqlx::query(&format!("DROP DATABASE {name}"))
                .execute(&admin)
                .await
                .unwrap();
        }
        let mut memory = Projections::default();
        for op in &ops {
            memory.apply(op);
        }
        assert_eq!(stored, memory.tables["payouts"]);
        assert_eq!(stored.len(), 3);
    }
}
