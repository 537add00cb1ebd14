//! Conformance of the ledger foundation on both stores (SQLite, and PostgreSQL when
//! `SETTLE_TEST_PG_URL` is set): append-only tables, tamper evidence, rebuild, concurrent
//! writers, event schemas, NDJSON import errors.

use crate::common;
use crate::common::Tables;

use std::collections::{BTreeMap, HashSet};

use common::{TestDb, run_cli};
use settle::domain::event::{EVENT_TYPES, provider_stream};
use settle::domain::ids::{AdjustmentId, ProviderId};
use settle::domain::projection::TABLES;
use settle::ledger::ingest::{SenderScope, UsageInput};
use settle::ledger::{Actor, Applied, Ledger};
use settle::wire::import::{apply, parse_line};
use sqlx::Row;

const NOW: &str = "2026-11-30T12:00:00Z";

async fn import_lines(ledger: &Ledger, lines: &[String]) {
    for line in lines {
        let command = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        apply(ledger, &command, &Actor::operator("test"))
            .await
            .unwrap_or_else(|e| panic!("{line}: {e}"));
    }
}

fn provider_lines(provider: &str, gpus: usize) -> Vec<String> {
    let mut lines = vec![format!(
        r#"{{"type":"provider.register","provider_id":"{provider}","name":"Provider {provider}","email":"ops@{provider}.test","tier":"community","schedule":"weekly","payout_method":{{"kind":"solana","wallet":"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}}}}"#
    )];
    for g in 0..gpus {
        lines.push(format!(r#"{{"type":"gpu.register","gpu_id":"{provider}-g{g}","provider_id":"{provider}","model":"H100-80GB"}}"#));
    }
    lines.push(format!(r#"{{"type":"rate.set","provider_id":"{provider}","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2026-01-01T00:00:00Z"}}"#));
    lines
}

/// A small ledger with every kind of event the foundation emits.
async fn seed(ledger: &Ledger) {
    import_lines(ledger, &provider_lines("prv_a", 2)).await;
    import_lines(ledger, &provider_lines("prv_b", 1)).await;
    import_lines(
        ledger,
        &[
            r#"{"type":"fee_schedule.set","tier":"community","fee_bps":1800,"effective_from":"2026-11-25T00:00:00Z"}"#.into(),
            r#"{"type":"provider.update","provider_id":"prv_b","tier":"enterprise","payout_method":{"kind":"sepa","iban":"DE89370400440532013000","holder":"Bee GmbH"}}"#.into(),
            r#"{"type":"usage","event_id":"u1","provider_id":"prv_a","gpu_id":"prv_a-g0","started_at":"2026-11-24T22:00:00Z","ended_at":"2026-11-25T02:00:00Z"}"#.into(),
            r#"{"type":"usage","event_id":"u2","provider_id":"prv_b","gpu_id":"prv_b-g0","started_at":"2026-11-26T10:00:00Z","ended_at":"2026-11-26T11:30:00Z","rate_usdc_per_hour":"3.1"}"#.into(),
            r#"{"type":"usage.void","event_id":"u2","reason":"customer refund"}"#.into(),
            r#"{"type":"adjustment","adjustment_id":"adj-1","provider_id":"prv_a","amount_usdc":"-1.250000","reason":"chargeback","reference":"case-77"}"#.into(),
            r#"{"type":"fx.rate_set","eur_per_usd":"0.92"}"#.into(),
        ],
    )
    .await;
}

#[tokio::test]
async fn append_only_tables_refuse_update_delete_and_truncate() {
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    seed(&ledger).await;
    // The triggers refuse even the owner, who holds every right on the tables (the runtime
    // role is refused by its grants before: `roles`).
    let owner = db.owner_store().await;
    let pool = owner.pool();
    sqlx::query("INSERT INTO api_tokens (token_id, token_hash, scope, provider_id, label, created_at_ms, expires_at_ms) VALUES ('t1', $1, 'admin', NULL, 'test', 0, NULL)")
        .bind(vec![1u8; 32])
        .execute(pool)
        .await
        .expect("inserts are allowed");
    sqlx::query("INSERT INTO api_token_revocations (token_id, revoked_at_ms) VALUES ('t1', 5)")
        .execute(pool)
        .await
        .expect("inserts are allowed");
    sqlx::query("INSERT INTO anchors (n, root, at_ms) VALUES (1, 'r1', 5)")
        .execute(pool)
        .await
        .expect("inserts are allowed");
    sqlx::query(
        "INSERT INTO anchor_publications (signature, n, root, at_ms) VALUES ('s1', 1, 'r1', 5)",
    )
    .execute(pool)
    .await
    .expect("inserts are allowed");
    let cases = [
        (
            "anchors",
            "UPDATE anchors SET root = 'forged'",
            "DELETE FROM anchors",
        ),
        (
            "anchor_publications",
            "UPDATE anchor_publications SET root = 'forged'",
            "DELETE FROM anchor_publications",
        ),
        (
            "events",
            "UPDATE events SET actor = 'mallory'",
            "DELETE FROM events",
        ),
        (
            "api_tokens",
            "UPDATE api_tokens SET scope = 'admin'",
            "DELETE FROM api_tokens",
        ),
        (
            "api_token_revocations",
            "UPDATE api_token_revocations SET revoked_at_ms = 0",
            "DELETE FROM api_token_revocations",
        ),
    ];
    for (table, update, delete) in cases {
        let before: i64 = sqlx::query(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(pool)
            .await
            .unwrap()
            .get(0);
        assert!(before > 0, "{table} has rows to protect");
        for sql in [update, delete] {
            let err = sqlx::query(sql)
                .execute(pool)
                .await
                .expect_err(&format!("{sql} must be refused"));
            assert!(err.to_string().contains("append-only"), "{sql}: {err}");
        }
        if db.is_postgres() {
            let err = sqlx::query(&format!("TRUNCATE {table}"))
                .execute(pool)
                .await
                .expect_err("TRUNCATE must be refused");
            assert!(
                err.to_string().contains("append-only"),
                "TRUNCATE {table}: {err}"
            );
        }
        let after: i64 = sqlx::query(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(pool)
            .await
            .unwrap()
            .get(0);
        assert_eq!(before, after, "{table} unchanged");
    }
    let report = settle::verify::verify(&ledger.store, &|_| {})
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[tokio::test]
async fn verify_names_the_stream_and_sequence_of_a_tampered_event() {
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    seed(&ledger).await;
    let (code, out, _) = run_cli(&db.url, &["verify"]);
    assert_eq!(code, 0, "clean ledger verifies: {out}");
    let seq: i64 = sqlx::query("SELECT seq FROM events WHERE idem_key = 'usage:u1'")
        .fetch_one(ledger.store.pool())
        .await
        .unwrap()
        .get(0);
    // Behind the engine's back, with the owner's rights: remove the guard, then make the
    // usage pay twice as much.
    let owner = db.owner_store().await;
    let drop_guard = if db.is_postgres() {
        "DROP TRIGGER events_refuse_update_delete ON events"
    } else {
        "DROP TRIGGER events_refuse_update"
    };
    sqlx::query(drop_guard).execute(owner.pool()).await.unwrap();
    sqlx::query("UPDATE events SET payload = REPLACE(payload, '\"net_micro_usdc\":', '\"net_micro_usdc\":1') WHERE idem_key = 'usage:u1'")
        .execute(owner.pool())
        .await
        .unwrap();
    let (code, out, _) = run_cli(&db.url, &["verify", "--format", "json"]);
    assert_eq!(code, 1, "tampering must fail verify: {out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let problems = report["problems"].as_array().unwrap();
    assert!(
        problems.iter().any(|p| p["stream"] == "provider:prv_a"
            && p["seq"] == seq
            && p["kind"] == "hash_mismatch"),
        "verify names provider:prv_a seq {seq}: {out}"
    );
}

#[tokio::test]
async fn rebuild_of_100k_events_equals_the_live_projections() {
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    let providers = 20;
    let gpus = 5;
    for p in 0..providers {
        import_lines(&ledger, &provider_lines(&format!("p{p}"), gpus)).await;
    }
    // 100,000 usage events: 20 providers x 5 GPUs x 1,000 consecutive 1-hour slices, some
    // of them crossing midnight, booked in batches of 1,000.
    let start = settle::domain::time::parse_rfc3339_ms("2026-09-15T07:30:00Z").unwrap();
    let per_gpu = 1_000;
    for p in 0..providers {
        let mut batch = Vec::new();
        for g in 0..gpus {
            for i in 0..per_gpu {
                let s = start + i as i64 * 3_600_000 + g as i64 * 60_000;
                batch.push(UsageInput {
                    event_id: Some(format!("p{p}-g{g}-{i}")),
                    provider_id: Some(format!("p{p}")),
                    gpu_id: Some(format!("p{p}-g{g}")),
                    rental_id: None,
                    started_at: Some(settle::domain::time::format_ms(s)),
                    ended_at: Some(settle::domain::time::format_ms(s + 3_600_000 - 1)),
                    rate_usdc_per_hour: None,
                });
            }
        }
        for chunk in batch.chunks(1000) {
            let results = ledger
                .ingest_usage(chunk, &SenderScope::Metering, &Actor::operator("test"))
                .await
                .unwrap();
            assert!(
                results.iter().all(|r| r.status() == "accepted"),
                "{:?}",
                results.iter().find(|r| r.status() != "accepted")
            );
        }
    }
    let events = ledger.store.event_count().await.unwrap();
    assert!(events >= 100_000, "{events} events");
    // The live projections, the projector's backlog folded (as every reader sees them).
    ledger.store.catch_up_all().await.unwrap();
    let live = all_projections(&ledger.store).await;
    // A rebuild runs as the owner (it locks `events` against writers).
    let owner = db.owner_store().await;
    let report = settle::verify::rebuild(
        &owner,
        settle::config::StoreConfig::default().verify_streams_per_page,
        &|_| {},
    )
    .await
    .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.events, events);
    let rebuilt_tables = all_projections(&ledger.store).await;
    for spec in TABLES {
        let rebuilt = &rebuilt_tables[spec.name];
        assert_eq!(
            live[spec.name].len(),
            rebuilt.len(),
            "{} row count",
            spec.name
        );
        assert!(
            &live[spec.name] == rebuilt,
            "{} differs after rebuild",
            spec.name
        );
    }
    assert!(!live["usage_segments"].is_empty());
}

/// Every projection table as stored, by name.
async fn all_projections(store: &settle::store::Store) -> BTreeMap<&'static str, Projection> {
    let mut tables = BTreeMap::new();
    for spec in TABLES {
        tables.insert(spec.name, store.load_projection(spec).await.unwrap());
    }
    tables
}

type Projection =
    BTreeMap<Vec<settle::domain::projection::Val>, Vec<settle::domain::projection::Val>>;

/// `rebuild` replaces the tables with the fold of its snapshot only if no event was booked
/// since that snapshot: events booked while it folded make the swap a conflict that changes
/// nothing, and the next rebuild takes them in.
#[tokio::test]
async fn a_rebuild_refuses_to_swap_in_a_fold_the_ledger_outgrew() {
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    import_lines(&ledger, &provider_lines("r1", 2)).await;
    let folded = ledger.store.event_count().await.unwrap();
    // A rebuild runs as the owner (it locks `events` against writers).
    let owner = db.owner_store().await;
    let mut snapshot = owner.snapshot().await.unwrap();
    // The snapshot is taken at its first read; its fold is recorded page by page.
    let streams = snapshot.streams_after("", 100).await.unwrap();
    assert_eq!(streams.len(), 1, "{streams:?}");
    // A booking commits while the rebuild folds: the snapshot does not hold writers back.
    import_lines(&ledger, &provider_lines("r2", 1)).await;
    let live = || all_projections(&ledger.store);
    let before = live().await;
    let refused = snapshot.replace_tables(folded).await.unwrap_err();
    assert!(
        matches!(&refused, settle::store::StoreError::Conflict(m) if m.contains("grew")),
        "{refused:?}"
    );
    assert!(
        live().await == before,
        "a refused swap changed the projections"
    );
    let report = settle::verify::rebuild(&owner, 1, &|_| {}).await.unwrap();
    assert_eq!(report.events, ledger.store.event_count().await.unwrap());
    assert!(report.ok(), "{:?}", report.problems);
    assert!(
        live().await == before,
        "the rebuild of the whole ledger differs"
    );
    let report = settle::verify::verify(&ledger.store, &|_| {})
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

/// Every projection table's declaration (`TableSpec`: its columns, and which hold integers)
/// is the migrated schema's, on both databases: the store writes and reads each cell by that
/// declaration and names every column it writes or reads, so a column declared with the
/// wrong type would be stored or read as something else. (A column added by a later
/// migration, such as the stream of the per-provider tables, comes last in the schema.)
#[tokio::test]
async fn projection_tables_declare_the_schemas_columns_and_types() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let sql = if db.is_postgres() {
        "SELECT CAST(column_name AS TEXT) AS name, LOWER(data_type) AS type \
         FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 \
         ORDER BY ordinal_position"
    } else {
        "SELECT name, LOWER(type) AS type FROM pragma_table_info($1) ORDER BY cid"
    };
    for spec in TABLES {
        let schema: Vec<(String, String)> = sqlx::query_as(sql)
            .bind(spec.name)
            .fetch_all(store.pool())
            .await
            .unwrap();
        let mut schema = schema;
        schema.sort();
        let mut declared: Vec<(String, String)> = spec
            .columns()
            .map(|c| {
                let ty = if spec.is_int(c) { "bigint" } else { "text" };
                (c.to_owned(), ty.to_owned())
            })
            .collect();
        declared.sort();
        assert_eq!(declared, schema, "table {}", spec.name);
        assert!(
            spec.ints.iter().all(|c| spec.columns().any(|x| x == *c)),
            "{}: an integer column that is not a column: {:?}",
            spec.name,
            spec.ints
        );
    }
}

/// The key columns of the schema's indexes (`table.column`) that do not compare as bytes:
/// on PostgreSQL those whose collation is not "C", on SQLite those not `BINARY`.
async fn keys_not_in_byte_order(db: &TestDb, store: &settle::store::Store) -> Vec<String> {
    let sql = if db.is_postgres() {
        "SELECT t.relname || '.' || a.attname || ' (' || coll.collname || ')' \
         FROM pg_index AS i \
         JOIN pg_class AS t ON t.oid = i.indrelid \
         JOIN pg_namespace AS n ON n.oid = t.relnamespace \
         CROSS JOIN LATERAL unnest(CAST(i.indkey AS int2[]), CAST(i.indcollation AS oid[])) AS k(attnum, collid) \
         JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
         JOIN pg_collation AS coll ON coll.oid = k.collid \
         WHERE n.nspname = current_schema() AND coll.collname <> 'C' ORDER BY 1"
    } else {
        "SELECT m.name || '.' || x.name || ' (' || x.coll || ')' \
         FROM sqlite_master AS m, pragma_index_list(m.name) AS l, pragma_index_xinfo(l.name) AS x \
         WHERE m.type = 'table' AND x.key = 1 AND x.cid >= 0 AND x.coll <> 'BINARY' ORDER BY 1"
    };
    sqlx::query_scalar(sql)
        .fetch_all(store.pool())
        .await
        .unwrap()
}

/// Every key the ledger and its projections index is an identifier, and compares as bytes
/// on both databases (migration 0009): the order the program and SQLite use, and a memcmp in
/// PostgreSQL's B-trees instead of the locale's `strcoll` for every row booked or folded and
/// every key looked up. A PostgreSQL ledger created before it upgrades and verifies.
#[tokio::test]
async fn indexed_identifiers_compare_as_bytes_after_an_upgrade() {
    let db = TestDb::new().await;
    let (ledger, _clock) = db.ledger_at(NOW).await;
    seed(&ledger).await;
    assert_eq!(
        keys_not_in_byte_order(&db, &ledger.store).await,
        Vec::<String>::new()
    );
    if !db.is_postgres() {
        return;
    }
    // The schema before 0009: every such column back on the database's default collation.
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(table_name AS TEXT), CAST(column_name AS TEXT) FROM information_schema.columns \
         WHERE table_schema = current_schema() AND collation_name = 'C'",
    )
    .fetch_all(ledger.store.pool())
    .await
    .unwrap();
    assert!(columns.len() > 20, "{columns:?}");
    let undo: Vec<String> = columns
        .iter()
        .map(|(t, c)| format!("ALTER TABLE {t} ALTER COLUMN {c} TYPE TEXT COLLATE \"default\""))
        .collect();
    let undo: Vec<&str> = undo.iter().map(String::as_str).collect();
    let before = all_projections(&ledger.store).await;
    common::upgrade_through(&db, 9, &undo).await;
    // A schema from before 0009 runs every later migration too: 0011 sets the columns it
    // indexes to byte order as well.
    common::upgrade_through(&db, 11, &[]).await;
    // 0012 sets the collation of the columns it creates and indexes again.
    common::upgrade_through(&db, 12, &[]).await;
    common::upgrade_through(&db, 13, &[]).await;
    common::upgrade_through(&db, 14, &[]).await;
    common::upgrade_through(&db, 15, &[]).await;
    common::upgrade_through(&db, 16, &[]).await;
    common::upgrade_through(&db, 17, &[]).await;
    common::upgrade_through(&db, 18, &[]).await;
    common::upgrade_through(&db, 19, &[]).await;
    assert_eq!(
        keys_not_in_byte_order(&db, &ledger.store).await,
        Vec::<String>::new()
    );
    assert_eq!(all_projections(&ledger.store).await, before);
    let report = settle::verify::verify(&ledger.store, &|_| {})
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_writers_leave_gapless_valid_chains() {
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    for p in ["c0", "c1", "c2"] {
        import_lines(&ledger, &provider_lines(p, 1)).await;
    }
    let writers = 8;
    let per_writer = 40;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (ledger, _) = db.ledger_at(NOW).await;
        tasks.push(tokio::spawn(async move {
            let mut applied = Vec::new();
            for i in 0..per_writer {
                let provider = format!("c{}", (w + i) % 3);
                let id = format!("adj-w{w}-{i}");
                let r = ledger
                    .post_adjustment(
                        &AdjustmentId::parse(&id).unwrap(),
                        &ProviderId::parse(&provider).unwrap(),
                        1_000 + i as i64,
                        "bonus",
                        None,
                        &Actor::operator("writer"),
                    )
                    .await
                    .unwrap();
                assert_eq!(r, Applied::Accepted);
                // Every writer also replays one of its earlier adjustments: a duplicate.
                let j = i / 2;
                let again = ledger
                    .post_adjustment(
                        &AdjustmentId::parse(&format!("adj-w{w}-{j}")).unwrap(),
                        &ProviderId::parse(&format!("c{}", (w + j) % 3)).unwrap(),
                        1_000 + j as i64,
                        "bonus",
                        None,
                        &Actor::operator("writer"),
                    )
                    .await
                    .unwrap();
                assert_eq!(again, Applied::Duplicate);
                applied.push(id);
            }
            ledger.store.close().await;
            applied
        }));
    }
    let mut expected = HashSet::new();
    for t in tasks {
        expected.extend(t.await.unwrap());
    }
    let rows = sqlx::query(
        "SELECT idem_key, stream, seq FROM events WHERE event_type = 'adjustment.posted'",
    )
    .fetch_all(ledger.store.pool())
    .await
    .unwrap();
    let booked: Vec<String> = rows
        .iter()
        .map(|r| r.get::<String, _>(0).trim_start_matches("adj:").to_owned())
        .collect();
    assert_eq!(booked.len(), writers * per_writer, "each adjustment once");
    assert_eq!(booked.iter().cloned().collect::<HashSet<_>>(), expected);
    for p in ["c0", "c1", "c2"] {
        let seqs: Vec<i64> = sqlx::query("SELECT seq FROM events WHERE stream = $1 ORDER BY seq")
            .bind(provider_stream(p))
            .fetch_all(ledger.store.pool())
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as i64).collect::<Vec<_>>(),
            "gapless {p}"
        );
    }
    let balances = settle::store::read::balances(&ledger.store, None)
        .await
        .unwrap();
    let total: i64 = balances.iter().map(|b| b.payable_micro_usdc).sum();
    let expected_total: i64 = (0..writers)
        .map(|_| (0..per_writer).map(|i| 1_000 + i as i64).sum::<i64>())
        .sum();
    assert_eq!(total, expected_total);
    let report = settle::verify::verify(&ledger.store, &|_| {})
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[tokio::test]
async fn every_emitted_event_matches_its_json_schema() {
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    seed(&ledger).await;
    let checked = common::assert_events_match_schemas(&ledger.store).await;
    for t in [
        "provider.registered",
        "provider.updated",
        "gpu.registered",
        "rate.set",
        "fee_schedule.set",
        "usage.recorded",
        "usage.voided",
        "adjustment.posted",
        "fx.rate_set",
    ] {
        assert!(checked.contains(t), "the seed emits {t}");
    }
    // Every known type has a schema file.
    for (t, v) in EVENT_TYPES {
        let path = format!(
            "{}/ledger-schemas/{t}.v{v}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        assert!(
            std::path::Path::new(&path).exists(),
            "missing schema {path}"
        );
    }
}

#[tokio::test]
async fn import_reports_bad_lines_by_number_and_applies_the_good_ones() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("import.ndjson");
    let mut lines = provider_lines("prv_x", 1);
    lines.insert(1, "{not json".into());
    lines.push(r#"{"type":"teleport","provider_id":"prv_x"}"#.into());
    lines.push(
        r#"{"type":"gpu.register","gpu_id":"bad id!","provider_id":"prv_x","model":"H100-80GB"}"#
            .into(),
    );
    lines.push(r#"{"type":"usage","event_id":"x1","provider_id":"prv_x","gpu_id":"prv_x-g0","started_at":"2026-11-23T10:00:00Z","ended_at":"2026-11-23T11:00:00Z"}"#.into());
    lines.push(
        r#"{"type":"gpu.register","gpu_id":"prv_x-g0","provider_id":"prv_x","model":"H100-80GB"}"#
            .into(),
    );
    std::fs::write(&file, lines.join("\n")).unwrap();
    let (code, out, err) = run_cli(
        &db.url,
        &[
            "--now",
            NOW,
            "--format",
            "json",
            "import",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "rejected lines make a non-zero exit: {err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let by_line = |n: u64| {
        report["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["line"] == n)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_line(1)["status"], "accepted");
    assert_eq!(by_line(2)["code"], "malformed_json");
    assert_eq!(by_line(3)["status"], "accepted");
    assert_eq!(by_line(5)["code"], "unknown_type");
    assert_eq!(by_line(6)["code"], "invalid_gpu_id");
    assert_eq!(by_line(7)["status"], "accepted");
    assert_eq!(by_line(8)["status"], "duplicate");
    assert_eq!(report["totals"]["rejected"], 3);
    // The good lines took effect: 1 hour at 2.49 minus the 20% community fee.
    let (_, out, _) = run_cli(
        &db.url,
        &["--format", "json", "balance", "--provider", "prv_x"],
    );
    let balances: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(balances[0]["available_usdc"], "1.992000");
    // Replaying the file books nothing twice.
    let (_, out, _) = run_cli(
        &db.url,
        &[
            "--now",
            NOW,
            "--format",
            "json",
            "import",
            file.to_str().unwrap(),
        ],
    );
    let replay: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(replay["totals"]["accepted"], 0, "{out}");
    let (_, out, _) = run_cli(
        &db.url,
        &["--format", "json", "balance", "--provider", "prv_x"],
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()[0]["available_usdc"],
        "1.992000"
    );
}

#[tokio::test]
async fn now_may_not_move_booking_time_backwards() {
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    seed(&ledger).await;
    let (code, _, err) = run_cli(&db.url, &["--now", "2026-11-01T00:00:00Z", "balance"]);
    assert_eq!(code, 1);
    assert!(err.contains("booking time only moves forward"), "{err}");
    let (code, _, _) = run_cli(&db.url, &["--now", "2026-12-01T00:00:00Z", "balance"]);
    assert_eq!(code, 0);
}
