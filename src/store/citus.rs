//! The ledger on Citus, the PostgreSQL extension that shards tables across nodes.
//!
//! When the database has the `citus` extension, [`Store::migrate`] distributes the tables
//! after the schema migrations (`settle migrate` says so), on a new ledger and on one that
//! grew on a single PostgreSQL:
//!
//! - the events, the projector's checkpoints, the balances and every per-provider table are
//!   hash-distributed by their stream (`provider:{id}` for a provider's rows), all in one
//!   co-location group ([`BY_STREAM`]): a provider's events and every row they write lie on
//!   one shard, so a usage batch, its fold and a payout decision each touch one shard;
//! - the small tables every booking reads, and the platform's indexes of payouts by bank
//!   batch and Solana attempt, are reference tables, copied to every node ([`REFERENCE`]);
//! - the platform's own low-volume tables (runs, approvals, rail batches and attempts,
//!   tokens, anchors, bank answers) stay on the coordinator as ordinary tables.
//!
//! A unique key on a distributed table must contain its distribution column: the payout's
//! and the GPU's unique index on their id alone ([`SINGLE_NODE_UNIQUE`]) are dropped; there
//! the stream, a function of the provider, is part of every key (migration 0019).
//!
//! The append-only tables keep their refusing triggers on every shard (Citus creates a
//! table's triggers on each of its shards; it asks for `citus.enable_unsafe_triggers` to
//! distribute a table that has any), and the runtime role's grants (`roles`) hold on the
//! shards too.
//!
//! Where Citus cannot run a statement the store uses on one node (a recursive skip scan over
//! the streams, a correlated probe per stream), the store chooses a form it distributes
//! ([`Store::is_citus`]).

use super::{Conn, Db, Store, StoreError, on};

/// The tables hash-distributed by their stream, with their distribution column; the first
/// is the co-location group's anchor.
pub const BY_STREAM: &[(&str, &str)] = &[
    ("events", "stream"),
    ("projection_checkpoints", "stream"),
    ("account_balances", "owner"),
    ("earnings_daily", "stream"),
    ("usage_segments", "stream"),
    ("payable_recorded", "stream"),
    ("providers", "stream"),
    ("provider_tiers", "stream"),
    ("gpus", "stream"),
    ("rates", "stream"),
    ("payouts", "stream"),
    ("run_decisions", "stream"),
    ("stream_locks", "stream"),
];

/// Tables copied to every node: the small tables every booking or run reads, and the
/// platform's indexes of payouts by batch and by Solana attempt, which statements over the
/// payouts join (Citus joins a distributed table with a reference table on any column, but
/// not with a table of the coordinator in a correlated subquery).
pub const REFERENCE: &[&str] = &[
    "fee_schedules",
    "fx_rates",
    "ledger_settings",
    "bank_batch_payouts",
    "solana_attempt_payouts",
];

/// Unique indexes on one node that a distributed table cannot keep (their key lacks the
/// stream).
pub const SINGLE_NODE_UNIQUE: &[&str] = &["payouts_id_unique", "gpus_id_unique"];

/// How the tables lie on the cluster after [`Store::distribute`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Distribution {
    /// Tables distributed by stream ([`BY_STREAM`]).
    pub by_stream: usize,
    /// Reference tables ([`REFERENCE`]).
    pub reference: usize,
    /// The tables this call distributed (none when they all were already).
    pub now: Vec<String>,
    /// The worker nodes of the cluster.
    pub workers: i64,
}

impl Store {
    /// Whether the database is a Citus coordinator (has the `citus` extension).
    pub fn is_citus(&self) -> bool {
        self.citus
    }

    /// Distributes the tables that are not yet (see the module doc); a no-op on SQLite, on a
    /// PostgreSQL without Citus and on a ledger distributed already. Run by the tables' owner
    /// after the migrations.
    pub async fn distribute(&self) -> Result<Option<Distribution>, StoreError> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(None);
        };
        if !self.citus {
            return Ok(None);
        }
        // One session: the setting below holds for the statements after it.
        let mut conn = pool.acquire().await?;
        let placed: Vec<String> = sqlx::query_scalar(
            "SELECT CAST(logicalrelid AS TEXT) FROM pg_dist_partition \
             WHERE logicalrelid::oid IN (SELECT oid FROM pg_class WHERE relnamespace = \
             CAST(current_schema() AS regnamespace))",
        )
        .fetch_all(&mut *conn)
        .await?;
        let mut out = Distribution {
            workers: sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_dist_node WHERE noderole = 'primary' AND groupid > 0",
            )
            .fetch_one(&mut *conn)
            .await?,
            ..Distribution::default()
        };
        sqlx::query("SET citus.enable_unsafe_triggers = on")
            .execute(&mut *conn)
            .await?;
        let anchor = BY_STREAM[0].0;
        for (table, column) in BY_STREAM {
            out.by_stream += 1;
            if placed.iter().any(|p| p == table) {
                continue;
            }
            if *table == "payouts" || *table == "gpus" {
                for index in SINGLE_NODE_UNIQUE {
                    sqlx::query(&format!("DROP INDEX IF EXISTS {index}"))
                        .execute(&mut *conn)
                        .await?;
                }
            }
            let colocate = if table == &anchor { "none" } else { anchor };
            sqlx::query(
                "SELECT create_distributed_table(CAST($1 AS regclass), $2, colocate_with => $3)",
            )
            .bind(table)
            .bind(column)
            .bind(colocate)
            .execute(&mut *conn)
            .await?;
            drop_local_copy(&mut conn, table).await?;
            out.now.push((*table).to_owned());
        }
        for table in REFERENCE {
            out.reference += 1;
            if placed.iter().any(|p| p == table) {
                continue;
            }
            sqlx::query("SELECT create_reference_table(CAST($1 AS regclass))")
                .bind(table)
                .execute(&mut *conn)
                .await?;
            drop_local_copy(&mut conn, table).await?;
            out.now.push((*table).to_owned());
        }
        sqlx::query("RESET citus.enable_unsafe_triggers")
            .execute(&mut *conn)
            .await?;
        Ok(Some(out))
    }
}

/// Citus copies a table's rows into its shards when it distributes it and leaves the
/// original rows behind, unread, in the coordinator's table: removed here. The append-only
/// tables' triggers refuse a `TRUNCATE`, so theirs are set aside for it (the owner's
/// migration; the rows live on in the shards).
async fn drop_local_copy(
    conn: &mut sqlx::pool::PoolConnection<sqlx::Postgres>,
    table: &str,
) -> Result<(), StoreError> {
    let local: bool = sqlx::query_scalar(&format!("SELECT EXISTS (SELECT 1 FROM ONLY {table})"))
        .fetch_one(&mut **conn)
        .await?;
    if !local {
        return Ok(());
    }
    let guarded = super::roles::APPEND_ONLY_TABLES.contains(&table);
    if guarded {
        sqlx::query(&format!(
            "ALTER TABLE {table} DISABLE TRIGGER {table}_refuse_truncate"
        ))
        .execute(&mut **conn)
        .await?;
    }
    sqlx::query("SELECT truncate_local_data_after_distributing_table(CAST($1 AS regclass))")
        .bind(table)
        .execute(&mut **conn)
        .await?;
    if guarded {
        sqlx::query(&format!(
            "ALTER TABLE {table} ENABLE TRIGGER {table}_refuse_truncate"
        ))
        .execute(&mut **conn)
        .await?;
    }
    Ok(())
}

/// Whether the database behind `pool` has the `citus` extension.
pub(super) async fn detect(db: &Db) -> Result<bool, StoreError> {
    Ok(match db {
        Db::Sqlite(_) => false,
        Db::Postgres(_) => on!(db, |c| sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"
        )
        .fetch_one(c)
        .await)?,
    })
}

/// `items` grouped by their stream (`stream_of`), in stream order: on Citus a statement
/// over several streams runs once per stream, with an equality on the distribution column
/// (`… AND x.stream = $n`) that lets Citus route it whole to the stream's shard, where every
/// PostgreSQL form (a lateral subquery, a row lock) runs as on one node.
pub(crate) fn per_stream<'a, T>(
    items: &'a [T],
    stream_of: impl for<'x> Fn(&'x T) -> &'x str,
) -> Vec<(&'a str, Vec<&'a T>)> {
    let mut groups: std::collections::BTreeMap<&'a str, Vec<&'a T>> =
        std::collections::BTreeMap::new();
    for item in items {
        groups.entry(stream_of(item)).or_default().push(item);
    }
    groups.into_iter().collect()
}

/// Takes the writers' lock of each of `streams` on its shard, as a row lock of
/// `stream_locks` held until the transaction ends there: one upsert of the streams' rows,
/// which Citus splits by shard. A transaction over streams on several nodes commits on them
/// after it commits on the coordinator (two-phase commit), so the coordinator's advisory
/// lock alone would let the next writer of a stream read its head before the previous
/// writer's events committed on the stream's node. Writers take the coordinator's locks
/// first, in name order, so two of them never wait for each other's shard locks.
pub(crate) async fn lock_on_shards(conn: &mut Conn, streams: &[&str]) -> Result<(), StoreError> {
    if streams.is_empty() {
        return Ok(());
    }
    let rows: Vec<(&str,)> = streams.iter().map(|s| (*s,)).collect();
    let sql = format!(
        "INSERT INTO stream_locks (stream) SELECT j.value ->> 0 FROM {} WHERE true \
         ON CONFLICT (stream) DO UPDATE SET stream = excluded.stream",
        super::Dialect::Postgres.json_rows(1, rows.len())
    );
    on!(&mut *conn, |c| sqlx::query(&sql)
        .bind(super::json_rows_param(&rows))
        .execute(c)
        .await
        .map(|r| r.rows_affected()))?;
    Ok(())
}

/// `items` as a PostgreSQL array literal of text (`{"a","b"}`), bound as one text parameter
/// and cast in the statement (`CAST($1 AS TEXT[])`): a list of streams a statement filters by
/// with `= ANY(…)`, which Citus prunes to the shards that hold them.
pub(crate) fn text_array(items: &[&str]) -> String {
    let mut out = String::from("{");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for ch in item.chars() {
            if ch == '"' || ch == '\\' {
                out.push('\\');
            }
            out.push(ch);
        }
        out.push('"');
    }
    out.push('}');
    out
}

/// A node of the cluster.
#[derive(sqlx::FromRow)]
struct Node {
    host: String,
    port: i32,
}

/// The admin URLs (database `postgres`) of the workers of the cluster whose coordinator
/// `coordinator` names (an admin URL, `postgres://user@host:port/db`, whose database has the
/// workers in its node table: `ops/citus/cluster.sh` registers them in `postgres`).
pub async fn worker_urls(coordinator: &str) -> Result<Vec<String>, StoreError> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(coordinator).await?;
    let nodes: Vec<Node> = sqlx::query_as(
        "SELECT CAST(nodename AS TEXT) AS host, nodeport AS port FROM pg_dist_node \
         WHERE groupid > 0 ORDER BY nodeport",
    )
    .fetch_all(&mut conn)
    .await?;
    conn.close().await?;
    let (scheme_user, _) = coordinator
        .split_once('@')
        .ok_or_else(|| StoreError::UnsupportedUrl(coordinator.to_owned()))?;
    Ok(nodes
        .into_iter()
        .map(|Node { host, port }| format!("{scheme_user}@{host}:{port}/postgres"))
        .collect())
}

/// Creates the database `name` on the cluster whose coordinator `coordinator` names (see
/// [`worker_urls`]) and returns its URL on the coordinator: the database on every worker
/// and the coordinator, the extension in each, the workers added to its node table. Citus
/// does not propagate `CREATE DATABASE`. `settle migrate` on the URL then distributes the
/// ledger.
pub async fn create_database(coordinator: &str, name: &str) -> Result<String, StoreError> {
    use sqlx::Connection;
    let workers = worker_urls(coordinator).await?;
    let on = |url: &str| -> String {
        let base = url.rsplit_once('/').map_or(url, |(b, _)| b);
        format!("{base}/{name}")
    };
    for admin in workers.iter().map(String::as_str).chain([coordinator]) {
        let mut conn = sqlx::PgConnection::connect(admin).await?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        let mut conn = sqlx::PgConnection::connect(&on(admin)).await?;
        sqlx::query("CREATE EXTENSION IF NOT EXISTS citus")
            .execute(&mut conn)
            .await?;
        conn.close().await?;
    }
    let url = on(coordinator);
    let mut conn = sqlx::PgConnection::connect(&url).await?;
    let node = |url: &str| -> Result<(String, i32), StoreError> {
        let rest = url.split_once('@').map_or(url, |(_, r)| r);
        let host_port = rest.split_once('/').map_or(rest, |(h, _)| h);
        let (host, port) = host_port.rsplit_once(':').unwrap_or((host_port, "5432"));
        let port = port
            .parse()
            .map_err(|_| StoreError::UnsupportedUrl(url.to_owned()))?;
        Ok((host.to_owned(), port))
    };
    let (host, port) = node(coordinator)?;
    sqlx::query("SELECT citus_set_coordinator_host($1, $2)")
        .bind(&host)
        .bind(port)
        .execute(&mut conn)
        .await?;
    for worker in &workers {
        let (host, port) = node(worker)?;
        sqlx::query("SELECT citus_add_node($1, $2)")
            .bind(&host)
            .bind(port)
            .execute(&mut conn)
            .await?;
    }
    conn.close().await?;
    Ok(url)
}

/// Drops the database `name` on the coordinator and every worker (see [`create_database`]).
pub async fn drop_database(coordinator: &str, name: &str) -> Result<(), StoreError> {
    use sqlx::Connection;
    let workers = worker_urls(coordinator).await?;
    for admin in [coordinator]
        .into_iter()
        .chain(workers.iter().map(String::as_str))
    {
        let mut conn = sqlx::PgConnection::connect(admin).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_arrays_quote_every_element() {
        assert_eq!(text_array(&[]), "{}");
        assert_eq!(
            text_array(&["provider:a", "b\"c", "d\\e"]),
            r#"{"provider:a","b\"c","d\\e"}"#
        );
    }
}
