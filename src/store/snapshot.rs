//! One consistent view of the ledger for `verify` and `rebuild`, read a page at a time.
//!
//! A [`Snapshot`] is one read transaction (repeatable read on PostgreSQL; one read
//! transaction on SQLite's WAL): the streams, their events, their projector checkpoints and
//! the projection tables all as of one instant, however long the reading takes and whatever
//! commits meanwhile, so `verify` may run while `serve` books.
//!
//! Paging: the streams are read in name order, a page at a time, each with its head and
//! checkpoint ([`Snapshot::streams_after`], [`StreamPosition`]); a page's events are one
//! range of the primary key in `(stream, seq)` order, read a bounded number at a time
//! ([`Snapshot::events_between`]). What the caller folds of a page goes into copies of the
//! projection tables inside the same transaction ([`Snapshot::record_fold`]: temporary
//! tables, gone with it). Every projection row belongs to one stream, so the pages fold into
//! disjoint rows, and memory holds one page of streams, not the ledger.
//!
//! Then SQL does the rest:
//! - `verify` compares the copies with the tables ([`Snapshot::differences`]), a difference
//!   found in either direction;
//! - `rebuild` ends the read transaction and, in one short write transaction on the same
//!   connection that shuts writers out (SQLite's writer; `LOCK TABLE events IN SHARE MODE`
//!   on PostgreSQL, so it runs as the owner), checks that no event was booked since the
//!   snapshot (else a conflict that changes nothing), replaces the tables with the copies,
//!   moves every checkpoint to its stream's head and leaves a new `projections_rebuilt`
//!   marker, by which processes drop what they kept of the old tables
//!   ([`Snapshot::replace_tables`]).

use std::sync::Arc;

use tokio::sync::Mutex;

use crate::domain::projection::{Projections, TABLES, TableSpec, Val};

use super::on;
use super::project::{insert_copies, row_vals};
use super::{
    Dialect, EVENT_COLUMNS, Store, StoreError, StoredEvent, StreamSeq, TxConn, writer_lock,
};

/// The prefix of the copies of the projection tables that hold a fold.
const FOLD_PREFIX: &str = "verify_fold_";

/// A stream as the snapshot sees it.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct StreamPosition {
    pub stream: String,
    /// The seq of its last event.
    pub head: i64,
    /// The seq up to which the aggregates hold its events (0 without a checkpoint).
    pub checkpoint: i64,
}

/// How the projection table `table` differs from the fold written with
/// [`Snapshot::record_fold`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableDifference {
    pub table: &'static str,
    /// Rows of the fold the table does not hold as folded, plus rows of the table whose key
    /// the fold does not have.
    pub rows: i64,
    /// One of them, described.
    pub example: String,
}

/// See the module documentation. Dropping it closes its connection: the transaction rolls
/// back and the copies are gone.
pub struct Snapshot {
    tx: TxConn,
    dialect: Dialect,
    copies_created: bool,
    /// Whether the database is a Citus coordinator ([`Store::is_citus`]).
    citus: bool,
    /// The store's SQLite writer lock, for [`Snapshot::replace_tables`].
    sqlite_writer: Arc<Mutex<()>>,
}

impl Store {
    /// Opens a [`Snapshot`] of the ledger.
    pub async fn snapshot(&self) -> Result<Snapshot, StoreError> {
        // The fold is written to temporary tables, so the transaction is not read-only.
        let tx = TxConn::begin_with(&self.db, self.dialect().begin_snapshot()).await?;
        Ok(Snapshot {
            tx,
            dialect: self.dialect(),
            copies_created: false,
            citus: self.is_citus(),
            sqlite_writer: self.sqlite_writer.clone(),
        })
    }
}

impl Snapshot {
    /// Up to `limit` streams named after `after` (all of them from `""`), in name order:
    /// one primary-key probe per stream for its name, one for its head.
    pub async fn streams_after(
        &mut self,
        after: &str,
        limit: i64,
    ) -> Result<Vec<StreamPosition>, StoreError> {
        // On Citus each shard groups its own streams (a recursive scan does not distribute).
        let sql = if self.citus {
            "SELECT h.stream, h.head, COALESCE(c.seq, 0) AS checkpoint \
             FROM (SELECT stream, MAX(seq) AS head FROM events WHERE stream > $1 \
                   GROUP BY stream ORDER BY stream LIMIT $2) AS h \
             LEFT JOIN projection_checkpoints AS c ON c.stream = h.stream ORDER BY h.stream"
        } else {
            "WITH RECURSIVE s(stream, n) AS ( \
               SELECT (SELECT MIN(stream) FROM events WHERE stream > $1), 1 \
               UNION ALL \
               SELECT (SELECT MIN(e.stream) FROM events AS e WHERE e.stream > s.stream), s.n + 1 \
               FROM s WHERE s.stream IS NOT NULL AND s.n < $2) \
             SELECT s.stream, (SELECT MAX(h.seq) FROM events AS h WHERE h.stream = s.stream) AS head, \
               COALESCE(c.seq, 0) AS checkpoint \
             FROM s LEFT JOIN projection_checkpoints AS c ON c.stream = s.stream \
             WHERE s.stream IS NOT NULL ORDER BY s.stream"
        };
        Ok(on!(&mut *self.tx, |c| {
            sqlx::query_as(sql)
                .bind(after)
                .bind(limit)
                .fetch_all(c)
                .await
        })?)
    }

    /// The checkpoints beyond 0 of streams that have no event, with the seq they claim.
    pub(crate) async fn checkpoints_without_events(
        &mut self,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let rows: Vec<StreamSeq> = on!(&mut *self.tx, |c| {
            sqlx::query_as(
            "SELECT c.stream, c.seq FROM projection_checkpoints AS c \
             WHERE c.seq > 0 AND NOT EXISTS (SELECT 1 FROM events AS e WHERE e.stream = c.stream) ORDER BY c.stream",
        )
        .fetch_all(c)
        .await
        })?;
        Ok(rows.into_iter().map(|r| (r.stream, r.seq)).collect())
    }

    /// Up to `limit` events of the streams named after `after.0` up to and including
    /// `through`, past position `after` (`(stream, seq)`; `(name, i64::MAX)` skips the
    /// stream `name` whole), in stream and sequence order: one statement reads a page of
    /// streams' events, one range of the primary key.
    pub(crate) async fn events_between(
        &mut self,
        after: (&str, i64),
        through: &str,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        Ok(on!(&mut *self.tx, |c| sqlx::query_as(&format!(
            "SELECT {EVENT_COLUMNS} FROM events \
             WHERE stream >= $1 AND (stream > $1 OR seq > $2) AND stream <= $3 \
             ORDER BY stream, seq LIMIT $4"
        ))
        .bind(after.0)
        .bind(after.1)
        .bind(through)
        .bind(limit)
        .fetch_all(c)
        .await)?)
    }

    /// Adds the rows of `fold` to the fold compared by [`Snapshot::differences`]. Each call
    /// brings the rows of other streams: every projection row belongs to one stream.
    pub(crate) async fn record_fold(&mut self, fold: &Projections) -> Result<(), StoreError> {
        self.create_copies().await?;
        insert_copies(&mut self.tx, FOLD_PREFIX, fold).await?;
        Ok(())
    }

    /// Creates the empty copies of the projection tables, once, indexed by their keys.
    async fn create_copies(&mut self) -> Result<(), StoreError> {
        if self.copies_created {
            return Ok(());
        }
        for spec in TABLES {
            let copy = format!("{FOLD_PREFIX}{}", spec.name);
            on!(&mut *self.tx, |c| sqlx::query(&format!(
                "CREATE TEMPORARY TABLE {copy} AS SELECT {} FROM {} WHERE 1 = 0",
                spec.column_list(),
                spec.name
            ))
            .execute(c)
            .await
            .map(|r| r.rows_affected()))?;
            on!(&mut *self.tx, |c| sqlx::query(&format!(
                "CREATE INDEX {copy}_key ON {copy} ({})",
                spec.key.join(", ")
            ))
            .execute(c)
            .await
            .map(|r| r.rows_affected()))?;
        }
        self.copies_created = true;
        Ok(())
    }

    /// `rebuild`'s swap: replaces every projection table with the fold recorded (which
    /// must be the whole fold of the `events_folded` events this snapshot holds) and moves
    /// every stream's checkpoint to its head, in one write transaction on this connection
    /// that shuts writers out (SQLite's write lock; `LOCK TABLE events IN SHARE MODE` on
    /// PostgreSQL) for the copy only, not the fold. Refuses with a conflict, changing
    /// nothing, if events were booked since the snapshot was taken.
    pub async fn replace_tables(mut self, events_folded: i64) -> Result<(), StoreError> {
        self.create_copies().await?;
        // The read transaction ends; the copies live on with the connection.
        self.tx.run("COMMIT").await?;
        let _writer = writer_lock(&self.sqlite_writer, self.dialect).await;
        self.tx.run(self.dialect.begin_write()).await?;
        if self.dialect == Dialect::Postgres {
            // A mode that shuts inserts out needs more than the runtime role's rights on
            // `events` (`roles`): a rebuild runs as the owner.
            self.tx
                .run("LOCK TABLE events IN SHARE MODE")
                .await
                .map_err(|e| match &e {
                    sqlx::Error::Database(db) if db.code().as_deref() == Some("42501") => {
                        StoreError::NeedsOwner("rebuild")
                    }
                    _ => StoreError::Database(e),
                })?;
        }
        // The events are append-only: the same count means the same events.
        let count: i64 = on!(&mut *self.tx, |c| sqlx::query_scalar(
            "SELECT COUNT(*) FROM events"
        )
        .fetch_one(c)
        .await)?;
        if count != events_folded {
            return Err(StoreError::Conflict(format!(
                "the ledger grew from {events_folded} to {count} events during the rebuild; run it again"
            )));
        }
        for spec in TABLES {
            let copy = format!("{FOLD_PREFIX}{}", spec.name);
            let list = spec.column_list();
            self.tx.run(&format!("DELETE FROM {}", spec.name)).await?;
            self.tx
                .run(&format!(
                    "INSERT INTO {} ({list}) SELECT {list} FROM {copy}",
                    spec.name
                ))
                .await?;
            // The connection goes back to the pool: without the copies.
            self.tx.run(&format!("DROP TABLE {copy}")).await?;
        }
        // The fresh fold covers every event: every stream is folded to its head.
        on!(&mut *self.tx, |c| sqlx::query(
            "DELETE FROM projection_checkpoints"
        )
        .execute(c)
        .await
        .map(|r| r.rows_affected()))?;
        on!(&mut *self.tx, |c| {
            sqlx::query(
            "INSERT INTO projection_checkpoints (stream, seq) SELECT stream, MAX(seq) FROM events GROUP BY stream",
        )
        .execute(c)
        .await.map(|r| r.rows_affected())
        })?;
        // The tables may now say what no event changed (entries an earlier release lost):
        // processes drop what they kept of them (`usage::StreamViews`) when they see a new
        // marker.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let marker = format!("{}:{events_folded}", now.as_nanos());
        on!(&mut *self.tx, |c| {
            sqlx::query(
            "INSERT INTO ledger_settings (name, value, set_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value, set_at_ms = excluded.set_at_ms"
        )
        .bind(super::usage::REBUILT_SETTING)
        .bind(&marker)
        .bind(i64::try_from(now.as_millis()).unwrap_or(i64::MAX))
        .execute(c)
        .await
        .map(|_| ())
        })?;
        self.tx.commit().await?;
        Ok(())
    }

    /// How each projection table differs from the fold recorded, one entry per table that
    /// differs.
    pub async fn differences(&mut self) -> Result<Vec<TableDifference>, StoreError> {
        self.create_copies().await?;
        let mut out = Vec::new();
        for spec in TABLES {
            if let Some(d) = self.table_difference(spec).await? {
                out.push(d);
            }
        }
        Ok(out)
    }

    async fn table_difference(
        &mut self,
        spec: &'static TableSpec,
    ) -> Result<Option<TableDifference>, StoreError> {
        let cols: Vec<&str> = spec.columns().collect();
        let list = spec.column_list();
        let (table, copy) = (spec.name, format!("{FOLD_PREFIX}{}", spec.name));
        let folded_not_stored =
            format!("SELECT {list} FROM {copy} EXCEPT SELECT {list} FROM {table}");
        let same_key = spec
            .key
            .iter()
            .map(|k| format!("f.{k} = t.{k}"))
            .collect::<Vec<_>>()
            .join(" AND ");
        let keys = spec
            .key
            .iter()
            .map(|k| format!("t.{k}"))
            .collect::<Vec<_>>()
            .join(", ");
        // The keys stored but not folded. Citus runs no correlated subquery over a
        // distributed table: there a set difference (the copy is a local table).
        let stored_not_folded = if self.citus {
            format!("SELECT {keys} FROM {table} AS t EXCEPT SELECT {keys} FROM {copy} AS t")
        } else {
            format!(
                "SELECT {keys} FROM {table} AS t WHERE NOT EXISTS (SELECT 1 FROM {copy} AS f WHERE {same_key})"
            )
        };
        let changed: i64 = on!(&mut *self.tx, |c| sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM ({folded_not_stored}) AS d"
        ))
        .fetch_one(c)
        .await)?;
        let extra: i64 = on!(&mut *self.tx, |c| sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM ({stored_not_folded}) AS d"
        ))
        .fetch_one(c)
        .await)?;
        if changed + extra == 0 {
            return Ok(None);
        }
        let example = if changed > 0 {
            let mut key = on!(&mut *self.tx, |c| sqlx::query(&format!(
                "{folded_not_stored} LIMIT 1"
            ))
            .fetch_one(c)
            .await
            .and_then(|row| row_vals(&row, spec, &cols)))?;
            let folded = key.split_off(spec.key.len());
            let stored = self.stored_row(spec, &key).await?;
            format!("key {key:?}: folded {folded:?}, stored {stored:?}")
        } else {
            let key = on!(&mut *self.tx, |c| sqlx::query(&format!(
                "{stored_not_folded} LIMIT 1"
            ))
            .fetch_one(c)
            .await
            .and_then(|row| row_vals(&row, spec, spec.key)))?;
            format!("key {key:?}: stored but not in the fold")
        };
        Ok(Some(TableDifference {
            table,
            rows: changed + extra,
            example,
        }))
    }

    /// The values the table holds under `key`, if any.
    async fn stored_row(
        &mut self,
        spec: &'static TableSpec,
        key: &[Val],
    ) -> Result<Option<Vec<Val>>, StoreError> {
        let filter = spec
            .key
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{k} = {}", self.dialect.placeholders(i, 1)))
            .collect::<Vec<_>>()
            .join(" AND ");
        let sql = format!(
            "SELECT {} FROM {} WHERE {filter}",
            spec.vals.join(", "),
            spec.name
        );
        Ok(on!(&mut *self.tx, |c| {
            let mut query = sqlx::query(&sql);
            for v in key {
                query = match v {
                    Val::Int(i) => query.bind(*i),
                    Val::Text(t) => query.bind(t.clone()),
                    Val::Null => query.bind(None::<String>),
                };
            }
            match query.fetch_optional(c).await? {
                Some(row) => row_vals(&row, spec, spec.vals).map(Some),
                None => Ok(None),
            }
        })?)
    }
}
