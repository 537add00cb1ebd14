//! The ledger on a Citus cluster (`SETTLE_TEST_CITUS_URL`, started by
//! `ops/citus/cluster.sh`): how `settle migrate` lays the tables out, the append-only guarantee
//! on the shards themselves, and a worker added and the shards rebalanced while usage is
//! booked (`SETTLE_TEST_CITUS_SPARE_URL`, the node the cluster script keeps outside the
//! cluster). Without the cluster each test prints why it is skipped; the rest of the suite
//! runs on the cluster too (`.ci/run`).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::common::{TEST_RUNTIME_ROLE, TestDb, is_citus, pg_admin_url, run_cli};
use crate::ingest::{assert_verified, booked_usage_ids, provider, usage};
use settle::domain::time::{format_ms, parse_rfc3339_ms};
use settle::ledger::Actor;
use settle::ledger::ingest::{SenderScope, UsageResult};

const NOW: &str = "2026-12-01T00:00:00Z";

fn citus_or_skip(name: &str) -> bool {
    if !is_citus() {
        println!(
            "SKIPPED {name}: no Citus cluster; run ops/citus/cluster.sh and set SETTLE_TEST_CITUS_URL"
        );
    }
    is_citus()
}

/// A connection to `db`'s database on the cluster node `admin_url` names (`…/postgres`), as
/// `user` (`None`: the admin's user).
async fn on_node(admin_url: &str, db: &TestDb, user: Option<&str>) -> sqlx::PgPool {
    sqlx::PgPool::connect(&node_url(admin_url, db, user))
        .await
        .expect("a cluster node")
}

/// The URL of `db`'s database on the node `admin_url` names, as `user`.
fn node_url(admin_url: &str, db: &TestDb, user: Option<&str>) -> String {
    let name = db.url.rsplit_once('/').expect("a URL").1;
    let (scheme_user, rest) = admin_url.split_once('@').expect("a URL with a user");
    let host = rest.split_once('/').expect("a URL").0;
    match user {
        Some(user) => format!("postgres://{user}:settle-test-role@{host}/{name}"),
        None => format!("{scheme_user}@{host}/{name}"),
    }
}

/// The ports of the nodes that hold shards of `events`.
async fn event_nodes(coordinator: &sqlx::PgPool) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT DISTINCT nodeport FROM pg_dist_shard_placement JOIN pg_dist_shard USING (shardid) \
         WHERE logicalrelid = CAST('events' AS regclass) ORDER BY 1",
    )
    .fetch_all(coordinator)
    .await
    .unwrap()
}

/// A session on a worker that may write a shard directly, past Citus's own guard
/// (`citus.enable_manual_changes_to_shards`): what a person with a worker's credentials can
/// do, so that only the grants and the triggers stand in the way.
async fn shard_session(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.expect("a worker");
    sqlx::query("SET citus.enable_manual_changes_to_shards = on")
        .execute(&mut conn)
        .await
        .expect("the guard set aside");
    conn
}

/// `settle migrate` distributes the events and every per-provider table by stream in one
/// co-location group, copies the small shared tables to every node, and leaves the
/// platform's own tables on the coordinator.
#[tokio::test]
async fn migrate_lays_the_ledger_out_by_stream() {
    if !citus_or_skip("citus::migrate_lays_the_ledger_out_by_stream") {
        return;
    }
    let db = TestDb::new().await;
    let owner = db.owner_store().await;
    assert!(owner.is_citus());
    let coordinator = on_node(&pg_admin_url().unwrap(), &db, None).await;
    let layout: Vec<(String, String, i32)> = sqlx::query_as(
        "SELECT CAST(logicalrelid AS TEXT), CAST(partmethod AS TEXT), colocationid FROM pg_dist_partition",
    )
    .fetch_all(&coordinator)
    .await
    .unwrap();
    let group = |table: &str| layout.iter().find(|(t, _, _)| t == table).cloned();
    let (_, method, events_group) = group("events").expect("events distributed");
    assert_eq!(method, "h", "hash-distributed");
    for (table, _) in settle::store::citus::BY_STREAM {
        let (_, method, colocation) = group(table).unwrap_or_else(|| panic!("{table}"));
        assert_eq!(
            (method.as_str(), colocation),
            ("h", events_group),
            "{table}"
        );
    }
    for table in settle::store::citus::REFERENCE {
        assert_eq!(group(table).map(|g| g.1), Some("n".to_owned()), "{table}");
    }
    for local in [
        "approvals",
        "payout_runs",
        "bank_batches",
        "api_tokens",
        "anchors",
    ] {
        assert_eq!(group(local), None, "{local} stays on the coordinator");
    }
    // The shards lie on the workers, none on the coordinator.
    let nodes = event_nodes(&coordinator).await;
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    // Migrating again changes nothing, and `settle migrate` says how the ledger lies.
    let again = owner.migrate().await.unwrap().expect("a Citus layout");
    assert!(again.now.is_empty(), "{again:?}");
    let (code, out, err) = run_cli(db.owner_url(), &["migrate"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "citus: 13 tables distributed by stream and 5 reference tables across 2 workers"
        ),
        "{out}"
    );
    coordinator.close().await;
}

/// The append-only tables refuse to change on the shards themselves, where the
/// coordinator's rules cannot reach: the runtime role has no right to update or delete a
/// shard's rows, and the owner meets the refusing triggers Citus created on every shard.
#[tokio::test]
async fn the_ledger_is_append_only_on_every_shard() {
    if !citus_or_skip("citus::the_ledger_is_append_only_on_every_shard") {
        return;
    }
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    provider(&ledger, "prv_a", 1).await;
    let admin = pg_admin_url().unwrap();
    let coordinator = on_node(&admin, &db, None).await;
    let placements: Vec<(String, i32)> = sqlx::query_as(
        "SELECT shard_name(logicalrelid, shardid), nodeport FROM pg_dist_shard \
         JOIN pg_dist_shard_placement USING (shardid) \
         WHERE logicalrelid = CAST('events' AS regclass) ORDER BY shardid",
    )
    .fetch_all(&coordinator)
    .await
    .unwrap();
    assert!(placements.len() >= 2, "{placements:?}");
    let mut refused = 0;
    for (shard, port) in &placements {
        let node = admin.replace(":9700/", &format!(":{port}/"));
        let mut as_owner = shard_session(&node_url(&node, &db, None)).await;
        let mut as_runtime = shard_session(&node_url(&node, &db, Some(TEST_RUNTIME_ROLE))).await;
        let rows: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {shard}"))
            .fetch_one(&mut as_owner)
            .await
            .unwrap();
        // Row triggers fire on rows: an empty shard is tried with `TRUNCATE` alone.
        let mut statements = vec![format!("TRUNCATE {shard}")];
        if rows > 0 {
            statements.push(format!("UPDATE {shard} SET actor = 'forger'"));
            statements.push(format!("DELETE FROM {shard}"));
        }
        for statement in statements {
            let err = sqlx::query(&statement)
                .execute(&mut as_owner)
                .await
                .expect_err("the owner is refused by the shard's trigger");
            assert!(
                err.to_string().contains("append-only"),
                "{statement}: {err}"
            );
            // The runtime role has no such right on the shard.
            let err = sqlx::query(&statement)
                .execute(&mut as_runtime)
                .await
                .expect_err("the runtime role has no such right");
            assert!(
                err.to_string().contains("permission denied"),
                "{statement}: {err}"
            );
        }
        refused += usize::from(rows > 0);
    }
    assert!(refused >= 1, "a shard with events was tried");
    coordinator.close().await;
    assert_verified(&ledger).await;
}

/// A third worker joins and the shards are rebalanced onto it while eight senders book
/// usage: every event is booked exactly once, the ledger verifies, and the shards now lie
/// on three workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_added_and_shards_rebalanced_under_load_lose_nothing() {
    if !citus_or_skip("citus::a_worker_added_and_shards_rebalanced_under_load_lose_nothing") {
        return;
    }
    let Ok(spare) = std::env::var("SETTLE_TEST_CITUS_SPARE_URL") else {
        println!(
            "SKIPPED citus::a_worker_added_and_shards_rebalanced_under_load_lose_nothing: no spare node; set SETTLE_TEST_CITUS_SPARE_URL (ops/citus/cluster.sh starts one)"
        );
        return;
    };
    const SENDERS: u64 = 6;
    const PROVIDERS: usize = 12;
    const EVENTS_PER_PROVIDER: usize = 60;
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    for p in 0..PROVIDERS {
        provider(&ledger, &format!("prv_{p}"), 1).await;
    }
    let start = parse_rfc3339_ms("2026-11-20T00:00:00Z").unwrap();
    let mut events = Vec::new();
    for p in 0..PROVIDERS {
        for n in 0..EVENTS_PER_PROVIDER {
            let (s, e) = (start + n as i64 * 600_000, start + (n as i64 + 1) * 600_000);
            let provider = format!("prv_{p}");
            events.push(usage(
                &format!("rb-{p}:{n:04}"),
                &provider,
                &format!("{provider}-g0"),
                &format_ms(s),
                &format_ms(e),
                None,
            ));
        }
    }
    let events = Arc::new(events);
    let mut tasks = Vec::new();
    for sender in 0..SENDERS {
        let events = events.clone();
        let url = db.url.clone();
        tasks.push(tokio::spawn(async move {
            let ledger = crate::common::sender_ledger(&url, parse_rfc3339_ms(NOW).unwrap()).await;
            let mut accepted = Vec::new();
            // Each sender books every event, in batches of its own size, slowly enough
            // that the rebalance runs beside it.
            for batch in events.chunks(7 + sender as usize) {
                let results = ledger
                    .ingest_usage(
                        batch,
                        &SenderScope::Metering,
                        &Actor::token(&format!("sender-{sender}")),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("sender {sender}: {e}"));
                for r in results {
                    match r {
                        UsageResult::Accepted { event_id } => accepted.push(event_id),
                        UsageResult::Duplicate { .. } => {}
                        UsageResult::Rejected { code, message, .. } => {
                            panic!("sender {sender}: rejected: {code}: {message}")
                        }
                    }
                }
            }
            ledger.store.close().await;
            accepted
        }));
    }
    // Meanwhile: the spare node joins this database's cluster and takes shards.
    let name = db.url.rsplit_once('/').unwrap().1;
    let spare_admin = sqlx::PgPool::connect(&spare).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&spare_admin)
        .await
        .unwrap();
    spare_admin.close().await;
    let spare_db = sqlx::PgPool::connect(&format!("{}/{name}", spare.rsplit_once('/').unwrap().0))
        .await
        .unwrap();
    sqlx::query("CREATE EXTENSION IF NOT EXISTS citus")
        .execute(&spare_db)
        .await
        .unwrap();
    spare_db.close().await;
    let coordinator = on_node(&pg_admin_url().unwrap(), &db, None).await;
    let port: i32 = spare
        .split_once('@')
        .and_then(|(_, r)| r.split_once('/'))
        .and_then(|(h, _)| h.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .expect("the spare's port");
    sqlx::query("SELECT citus_add_node('127.0.0.1', $1)")
        .bind(port)
        .execute(&coordinator)
        .await
        .unwrap();
    sqlx::query("SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes')")
        .execute(&coordinator)
        .await
        .unwrap();
    sqlx::query("SELECT citus_rebalance_wait()")
        .execute(&coordinator)
        .await
        .unwrap();
    let mut accepted: Vec<String> = Vec::new();
    for task in tasks {
        accepted.extend(task.await.expect("sender"));
    }
    let nodes = event_nodes(&coordinator).await;
    assert_eq!(nodes.len(), 3, "the shards lie on three workers: {nodes:?}");
    let once: BTreeSet<&String> = accepted.iter().collect();
    assert_eq!(once.len(), accepted.len(), "no event accepted twice");
    assert_eq!(accepted.len(), PROVIDERS * EVENTS_PER_PROVIDER);
    let booked = booked_usage_ids(&ledger).await;
    assert_eq!(
        booked.len(),
        PROVIDERS * EVENTS_PER_PROVIDER,
        "booked once each"
    );
    assert_verified(&ledger).await;
    // The new node leaves with the test's database (its shards drop with it).
    let _ = sqlx::query("SELECT citus_remove_node('127.0.0.1', $1)")
        .bind(port)
        .execute(&coordinator)
        .await;
    coordinator.close().await;
    let spare_admin = sqlx::PgPool::connect(&spare).await.unwrap();
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&spare_admin)
        .await;
    spare_admin.close().await;
}
