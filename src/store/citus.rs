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
//!
//! A statement over many streams goes once per shard (`per_shard`): the streams grouped by
//! the shard that holds them and bound as a native `TEXT[]` (`on_pg!`, `fetch_pinned!`), so
//! Citus routes it whole to that shard, where every PostgreSQL form (a lateral subquery, a
//! row lock) runs as on one node. A writer takes the coordinator's advisory lock of each of
//! its streams, in name order, and then the stream's row lock in `stream_locks` on its shard
//! (`lock_on_shards`): a transaction over several nodes commits on them after the
//! coordinator, and the shard lock keeps the next writer of a stream from reading its head
//! before the previous writer's events committed there.
//!
//! `ops/citus/cluster.sh` starts the cluster the tests (`tests/it/citus.rs`) and the
//! benchmarks run on; `ops/SCALING.md` tells how the ledger grows on it.

use super::{Conn, Db, Store, StoreError, on};
use std::time::Duration;

/// Runs `body` on the PostgreSQL connection under a [`Conn`] (`|c| …`, as [`on!`] does):
/// the statements of a Citus coordinator bind their streams as a native `TEXT[]`
/// (`stream = ANY($n)`), which Citus prunes to the shards that hold them when it plans; a
/// text parameter cast to an array in the statement is not folded before Citus plans, and
/// the statement would go to every shard. Yields `Result<_, sqlx::Error>`.
macro_rules! on_pg {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::store::Conn::Postgres($c) => {
                let $c = &mut **$c;
                $crate::store::sendable(async { $body }).await
            }
            $crate::store::Conn::Sqlite(_) => Err(sqlx::Error::Protocol(
                "a Citus statement on a SQLite connection".into(),
            )),
        }
    };
}
pub(crate) use on_pg;

/// `sqlx::query_as($sql)` with the JSON rows `$rows` bound as `$1`, all rows fetched on
/// `$conn`; with `$pin` `Some(streams)` (Citus) the streams are bound after it as a native
/// `TEXT[]` ([`on_pg`]) for the statement's `stream = ANY(…)`, with `None` it runs as on
/// one database ([`on!`]). Yields `Result<Vec<_>, sqlx::Error>`.
macro_rules! fetch_pinned {
    ($conn:expr, $sql:expr, $rows:expr, $pin:expr) => {
        match $pin {
            Some(pin) => $crate::store::citus::on_pg!($conn, |c| sqlx::query_as($sql)
                .bind($rows)
                .bind(pin)
                .fetch_all(c)
                .await),
            None => $crate::store::on!($conn, |c| sqlx::query_as($sql)
                .bind($rows)
                .fetch_all(c)
                .await),
        }
    };
}
pub(crate) use fetch_pinned;

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
    pub(crate) async fn distribute(&self) -> Result<Option<Distribution>, StoreError> {
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

/// The shard of `events` (and of every table co-located with it) that holds a stream.
#[derive(sqlx::FromRow)]
struct StreamShard {
    stream: String,
    shard: i64,
}

/// `items` grouped by the shard that holds their stream (`stream_of`), read with one
/// statement that the coordinator answers from its own metadata: each group with its
/// streams (distinct, in name order) and its items, the groups in shard order. A statement
/// over one group's streams, filtered by `stream = ANY($n)` on its distributed tables (the
/// streams bound as an array: [`on_pg`]), is routed whole to that shard, where every PostgreSQL form
/// (a lateral subquery, a row lock) runs as on one node: a batch over a thousand providers
/// costs a statement per shard instead of one per stream. Locks taken group by group are
/// taken in one order by every writer: shard, then name.
pub(crate) async fn per_shard<'a, T>(
    conn: &mut Conn,
    items: &'a [T],
    stream_of: impl for<'x> Fn(&'x T) -> &'x str,
) -> Result<Vec<(Vec<&'a str>, Vec<&'a T>)>, StoreError> {
    let streams: Vec<&str> = items
        .iter()
        .map(&stream_of)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if streams.is_empty() {
        return Ok(Vec::new());
    }
    let placed: Vec<StreamShard> = on_pg!(&mut *conn, |c| sqlx::query_as(
        "SELECT s AS stream, get_shard_id_for_distribution_column('events', s) AS shard \
         FROM unnest(CAST($1 AS TEXT[])) AS s"
    )
    .bind(&streams)
    .fetch_all(c)
    .await)?;
    let shard_of: std::collections::HashMap<&str, i64> = placed
        .iter()
        .map(|p| (p.stream.as_str(), p.shard))
        .collect();
    let mut groups: std::collections::BTreeMap<i64, (Vec<&'a str>, Vec<&'a T>)> =
        std::collections::BTreeMap::new();
    for item in items {
        let stream = stream_of(item);
        let shard = *shard_of.get(stream).ok_or_else(|| {
            StoreError::Corrupt(format!("Citus placed no shard for stream {stream}"))
        })?;
        let (names, members) = groups.entry(shard).or_default();
        if let Err(at) = names.binary_search(&stream) {
            names.insert(at, stream);
        }
        members.push(item);
    }
    Ok(groups.into_values().collect())
}

/// The most streams [`lock_on_shards`] names in one statement (a parameter each).
const LOCKS_PER_STATEMENT: usize = 4_096;

/// Takes the writers' lock of each of `streams` on its shard, as a row lock of
/// `stream_locks` held until the transaction ends there: one upsert of the streams' rows as
/// a multi-row `VALUES`, which Citus splits by shard and sends to the shards at once (an
/// `INSERT … SELECT` from a parameter goes through the coordinator instead: 200 ms against
/// 16 ms for a thousand streams here). A transaction over streams on several nodes commits
/// on them after it commits on the coordinator (two-phase commit), so the coordinator's
/// advisory lock alone would let the next writer of a stream read its head before the
/// previous writer's events committed on the stream's node. Writers take the coordinator's
/// locks first, in name order, so two of them never wait for each other's shard locks.
pub(crate) async fn lock_on_shards(conn: &mut Conn, streams: &[&str]) -> Result<(), StoreError> {
    for chunk in streams.chunks(LOCKS_PER_STATEMENT) {
        let values: Vec<String> = (1..=chunk.len()).map(|i| format!("(${i})")).collect();
        let sql = format!(
            "INSERT INTO stream_locks (stream) VALUES {} \
             ON CONFLICT (stream) DO UPDATE SET stream = excluded.stream",
            values.join(", ")
        );
        on!(&mut *conn, |c| {
            let mut query = sqlx::query(&sql);
            for stream in chunk {
                query = query.bind(*stream);
            }
            query.execute(c).await.map(|r| r.rows_affected())
        })?;
    }
    Ok(())
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
pub(crate) async fn worker_urls(coordinator: &str) -> Result<Vec<String>, StoreError> {
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
    conn.close().await?;
    for worker in &workers {
        let (host, port) = node(worker)?;
        add_node(&url, &host, port).await?;
    }
    Ok(url)
}

/// How many times [`create_database`] asks the coordinator to add a worker before it gives
/// up. Citus answers a metadata sync that failed on the worker's side with only "failure on
/// connection marked as essential", hiding the worker's own error; seen once on a freshly
/// started cluster, where a new session's second try succeeds.
pub const ADD_NODE_ATTEMPTS: u32 = 3;

/// The pause between two of those tries.
pub const ADD_NODE_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Adds the worker `host:port` to the node table of the database `url` names, in a new
/// session per try ([`ADD_NODE_ATTEMPTS`]). `citus_add_node` is idempotent: a try that
/// failed added nothing, and a node already added is answered with its id.
async fn add_node(url: &str, host: &str, port: i32) -> Result<(), StoreError> {
    use sqlx::Connection;
    let mut attempt = 1;
    loop {
        let tried = async {
            let mut conn = sqlx::PgConnection::connect(url).await?;
            sqlx::query("SELECT citus_add_node($1, $2)")
                .bind(host)
                .bind(port)
                .execute(&mut conn)
                .await?;
            conn.close().await
        };
        match tried.await {
            Ok(()) => return Ok(()),
            Err(e) if attempt < ADD_NODE_ATTEMPTS => {
                tracing::warn!(host, port, attempt, error = %e, "adding a worker failed; trying again");
                attempt += 1;
                tokio::time::sleep(ADD_NODE_RETRY_PAUSE).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
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
