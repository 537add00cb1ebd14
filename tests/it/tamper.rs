//! A smart tamperer: somebody with write access to the database who rewrites events *and*
//! recomputes every hash after them (then rebuilds the projections), so that the chains are
//! consistent again and plain `settle verify` is clean. The anchor file (`settle anchor`,
//! src/anchor.rs), kept outside the database, still catches each attack: edit, delete,
//! insert, reorder, truncate the tail. On SQLite, and on PostgreSQL when
//! `SETTLE_TEST_PG_URL` is set.

use crate::common;
use crate::common::Tables;

use std::path::Path;

use common::{TestDb, run_cli};
use serde_json::Value;
use settle::ledger::{Actor, Ledger};
use settle::store::{GENESIS_HASH, StoredEvent, canonical_bytes, event_hash};
use settle::wire::import::{apply, parse_line};
use sqlx::Row;

const NOW: &str = "2026-11-30T12:00:00Z";
const STREAM: &str = "provider:prv_a";

async fn import_lines(ledger: &Ledger, lines: &[&str]) {
    for line in lines {
        let command = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        apply(ledger, &command, &Actor::operator("test"))
            .await
            .unwrap_or_else(|e| panic!("{line}: {e}"));
    }
}

/// A ledger of two providers, anchored, then two more events of `prv_a` booked after the
/// anchor. Returns the database, the anchor file's directory and `prv_a`'s anchored seq.
async fn anchored_world() -> (TestDb, tempfile::TempDir, i64) {
    let db = TestDb::new().await;
    let (ledger, _) = db.ledger_at(NOW).await;
    import_lines(&ledger, &[
        r#"{"type":"provider.register","provider_id":"prv_a","name":"Provider A","email":"ops@a.test","tier":"community","schedule":"weekly","payout_method":{"kind":"solana","wallet":"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}}"#,
        r#"{"type":"gpu.register","gpu_id":"prv_a-g0","provider_id":"prv_a","model":"H100-80GB"}"#,
        r#"{"type":"gpu.register","gpu_id":"prv_a-g1","provider_id":"prv_a","model":"H100-80GB"}"#,
        r#"{"type":"rate.set","provider_id":"prv_a","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2026-01-01T00:00:00Z"}"#,
        r#"{"type":"usage","event_id":"u1","provider_id":"prv_a","gpu_id":"prv_a-g0","started_at":"2026-11-24T22:00:00Z","ended_at":"2026-11-25T02:00:00Z"}"#,
        r#"{"type":"usage","event_id":"u2","provider_id":"prv_a","gpu_id":"prv_a-g1","started_at":"2026-11-25T10:00:00Z","ended_at":"2026-11-25T12:00:00Z"}"#,
        r#"{"type":"adjustment","adjustment_id":"adj-1","provider_id":"prv_a","amount_usdc":"-1.250000","reason":"chargeback","reference":"case-77"}"#,
        r#"{"type":"provider.register","provider_id":"prv_b","name":"Provider B","email":"ops@b.test","tier":"community","schedule":"weekly","payout_method":{"kind":"solana","wallet":"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}}"#,
        r#"{"type":"fx.rate_set","fx_id":"fx-1","eur_per_usd":"0.92"}"#,
    ])
    .await;
    let anchored = max_seq(&ledger, STREAM).await;
    ledger.store.close().await;
    let dir = tempfile::tempdir().unwrap();
    let file = anchor_file(dir.path());
    let (code, out, err) = run_cli(&db.url, &["anchor", "--file", &file]);
    assert_eq!(code, 0, "settle anchor: {out}{err}");
    assert!(
        out.contains("anchored the heads of 3 of 3 streams"),
        "{out}"
    );

    // Booked after the anchor.
    let (ledger, _) = db.ledger_at(NOW).await;
    import_lines(&ledger, &[
        r#"{"type":"usage","event_id":"u3","provider_id":"prv_a","gpu_id":"prv_a-g0","started_at":"2026-11-26T10:00:00Z","ended_at":"2026-11-26T11:00:00Z"}"#,
        r#"{"type":"adjustment","adjustment_id":"adj-2","provider_id":"prv_a","amount_usdc":"2.000000","reason":"bonus","reference":"case-78"}"#,
    ])
    .await;
    assert_eq!(max_seq(&ledger, STREAM).await, anchored + 2);
    ledger.store.close().await;
    (db, dir, anchored)
}

fn anchor_file(dir: &Path) -> String {
    dir.join("anchors.ndjson").to_str().unwrap().to_owned()
}

async fn max_seq(ledger: &Ledger, stream: &str) -> i64 {
    sqlx::query("SELECT MAX(seq) FROM events WHERE stream = $1")
        .bind(stream)
        .fetch_one(ledger.store.pool())
        .await
        .unwrap()
        .get(0)
}

/// The attacker: drops the append-only guard, rewrites `STREAM` as `edit` says with every
/// sequence number and hash recomputed, and rebuilds the projections.
async fn tamper(db: &TestDb, edit: impl FnOnce(&mut Vec<StoredEvent>)) {
    // With the owner's rights: the runtime role can neither drop a trigger nor rebuild.
    let store = db.owner_store().await;
    let guards: &[&str] = if db.is_postgres() {
        &["DROP TRIGGER events_refuse_update_delete ON events"]
    } else {
        &[
            "DROP TRIGGER events_refuse_update",
            "DROP TRIGGER events_refuse_delete",
        ]
    };
    for guard in guards {
        sqlx::query(guard).execute(store.pool()).await.unwrap();
    }
    let mut events = store.stream_events(STREAM, 0, 1_000).await.unwrap();
    edit(&mut events);
    let mut prev = GENESIS_HASH.to_vec();
    for (i, e) in events.iter_mut().enumerate() {
        e.seq = i as i64 + 1;
        e.prev_hash = prev.clone();
        e.hash = event_hash(&prev, &canonical_bytes(e)).to_vec();
        prev = e.hash.clone();
    }
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::query("DELETE FROM events WHERE stream = $1")
        .bind(STREAM)
        .execute(&mut *tx)
        .await
        .unwrap();
    for e in &events {
        common::insert_raw_event(&mut *tx, e).await;
    }
    tx.commit().await.unwrap();
    store.close().await;
    let (code, out, err) = run_cli(&db.url, &["--owner-database", db.owner_url(), "rebuild"]);
    assert_eq!(code, 0, "the attacker's rebuild: {out}{err}");
}

/// Plain `verify` is fooled; `verify --anchors` names `STREAM` with `kind` at `seq`.
fn assert_caught(db: &TestDb, dir: &Path, kind: &str, seq: i64) {
    let (code, out, err) = run_cli(&db.url, &["verify"]);
    assert_eq!(
        code, 0,
        "the rewrite with recomputed hashes passes plain verify: {out}{err}"
    );
    let file = anchor_file(dir);
    let (code, out, err) = run_cli(&db.url, &["verify", "--anchors", &file, "--format", "json"]);
    assert_eq!(code, 1, "the anchors catch the rewrite: {out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let problems = report["problems"].as_array().unwrap();
    assert_eq!(
        problems
            .iter()
            .map(|p| (
                p["stream"].as_str().unwrap(),
                p["kind"].as_str().unwrap(),
                p["seq"].as_i64()
            ))
            .collect::<Vec<_>>(),
        vec![(STREAM, kind, Some(seq))],
        "{out}"
    );
}

fn position(events: &[StoredEvent], event_type: &str, idem_contains: &str) -> usize {
    events
        .iter()
        .position(|e| {
            e.event_type == event_type
                && e.idem_key
                    .as_deref()
                    .is_some_and(|k| k.contains(idem_contains))
        })
        .unwrap_or_else(|| panic!("no {event_type} {idem_contains}"))
}

#[tokio::test]
async fn an_honest_ledger_passes_its_anchors_and_anchors_only_what_moved() {
    let (db, dir, _) = anchored_world().await;
    let file = anchor_file(dir.path());
    let (code, out, err) = run_cli(&db.url, &["verify", "--anchors", &file, "--format", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["anchored_streams"], 3, "{out}");
    // Only prv_a moved since: the next line anchors it alone; then nothing moved.
    let (code, out, _) = run_cli(&db.url, &["--format", "json", "anchor", "--file", &file]);
    assert_eq!(code, 0, "{out}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (
            r["anchor"]["anchored"].as_i64(),
            r["anchor"]["written"].as_bool()
        ),
        (Some(1), Some(true))
    );
    let (code, out, _) = run_cli(&db.url, &["anchor", "--file", &file]);
    assert_eq!(code, 0);
    assert!(out.contains("nothing moved since the last anchor"), "{out}");
    let (code, out, err) = run_cli(&db.url, &["verify", "--anchors", &file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("(3 streams anchored)"), "{out}");

    // A line taken out of the anchor file breaks the file's own chain.
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    std::fs::write(&file, format!("{}\n", lines[1])).unwrap();
    let (code, out, err) = run_cli(&db.url, &["verify", "--anchors", &file]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("anchor_file_corrupt") && err.contains("line 1"),
        "{err}"
    );
}

#[tokio::test]
async fn an_edited_event_with_recomputed_hashes_is_caught_by_the_anchor() {
    let (db, dir, anchored) = anchored_world().await;
    // The chargeback's reason is rewritten (the audit trail lies); every hash recomputed.
    tamper(&db, |events| {
        let i = position(events, "adjustment.posted", "adj-1");
        events[i].payload = events[i].payload.replace("chargeback", "goodwill");
    })
    .await;
    assert_caught(&db, dir.path(), "anchor_mismatch", anchored);
}

#[tokio::test]
async fn a_deleted_event_with_recomputed_hashes_is_caught_by_the_anchor() {
    let (db, dir, anchored) = anchored_world().await;
    // The chargeback disappears; the later events move up one place.
    tamper(&db, |events| {
        let i = position(events, "adjustment.posted", "adj-1");
        events.remove(i);
    })
    .await;
    assert_caught(&db, dir.path(), "anchor_mismatch", anchored);
}

#[tokio::test]
async fn an_inserted_event_with_recomputed_hashes_is_caught_by_the_anchor() {
    let (db, dir, anchored) = anchored_world().await;
    // A second copy of a usage event, under its own key, slipped in early in the stream.
    tamper(&db, |events| {
        let i = position(events, "usage.recorded", "u1");
        let mut forged = events[i].clone();
        forged.idem_key = forged.idem_key.map(|k| k.replace("u1", "u9"));
        forged.payload = forged.payload.replace("\"u1\"", "\"u9\"");
        events.insert(2, forged);
    })
    .await;
    assert_caught(&db, dir.path(), "anchor_mismatch", anchored);
}

#[tokio::test]
async fn reordered_events_with_recomputed_hashes_are_caught_by_the_anchor() {
    let (db, dir, anchored) = anchored_world().await;
    tamper(&db, |events| events.swap(1, 2)).await;
    assert_caught(&db, dir.path(), "anchor_mismatch", anchored);
}

#[tokio::test]
async fn a_truncated_tail_is_caught_by_the_anchor_and_not_anchored_over() {
    let (db, dir, anchored) = anchored_world().await;
    // The last four events go: the two booked after the anchor and two anchored ones.
    tamper(&db, |events| events.truncate(events.len() - 4)).await;
    assert_caught(&db, dir.path(), "anchor_truncated", anchored);
    // A new anchor would bless the cut: refused.
    let file = anchor_file(dir.path());
    let (code, out, err) = run_cli(&db.url, &["anchor", "--file", &file]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("ledger_diverged_from_anchor"), "{err}");
}

#[tokio::test]
async fn a_log_cut_short_is_reported_and_not_anchored_over() {
    let (db, dir, _) = anchored_world().await;
    let file = anchor_file(dir.path());
    // A second anchor covers the two events booked after the first.
    let (code, out, err) = run_cli(&db.url, &["anchor", "--file", &file]);
    assert_eq!(code, 0, "{out}{err}");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    // Its last line cut: the log's own chain still reads, but the ledger recorded anchor 2.
    std::fs::write(&file, format!("{}\n", lines[0])).unwrap();
    let (code, out, err) = run_cli(&db.url, &["verify", "--anchors", &file, "--format", "json"]);
    assert_eq!(code, 1, "a log cut short is caught: {out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let kinds: Vec<(&str, i64)> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["kind"].as_str().unwrap(), p["seq"].as_i64().unwrap_or(0)))
        .collect();
    assert_eq!(kinds, vec![("anchor_log_truncated", 2)], "{out}");
    // A new anchor would hide the cut: refused.
    let (code, out, err) = run_cli(&db.url, &["anchor", "--file", &file]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("anchor_log_truncated"), "{err}");
    // The whole log gone is the same cut.
    std::fs::remove_file(&file).unwrap();
    let (code, out, err) = run_cli(&db.url, &["verify", "--anchors", &file]);
    assert_ne!(code, 0, "{out}{err}");
}

#[tokio::test]
async fn verify_reports_the_tail_no_anchor_covers_yet() {
    let (db, dir, _) = anchored_world().await;
    let file = anchor_file(dir.path());
    let (code, out, err) = run_cli(&db.url, &["verify", "--anchors", &file, "--format", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let log = &report["anchor_log"];
    assert_eq!(log["anchors"], 1, "{out}");
    assert_eq!(log["unsigned"], 0, "every anchor is signed: {out}");
    assert_eq!(
        log["unanchored_events"], 2,
        "booked after the anchor: {out}"
    );
    assert!(log["unanchored_seconds"].as_i64().unwrap() >= 0, "{out}");
    let (code, out, _) = run_cli(&db.url, &["anchor", "--file", &file]);
    assert_eq!(code, 0, "{out}");
    let (code, out, err) = run_cli(&db.url, &["verify", "--anchors", &file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 anchors, 0 events and"), "{out}");
}

#[tokio::test]
async fn an_anchor_line_re_signed_or_an_exposed_key_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let (db, dir, _) = anchored_world().await;
    let file = anchor_file(dir.path());
    // A forged line: its time changed and its root recomputed by someone without the key
    // fails the signature; with the old root kept, the root.
    let text = std::fs::read_to_string(&file).unwrap();
    let heads_root = settle::anchor::read(Path::new(&file)).unwrap().entries[0].heads_root;
    let mut line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let at = "2026-11-27T00:00:00.000Z";
    line["at"] = Value::from(at);
    for (root, why) in [
        (line["root"].clone(), "is not the root of its heads"),
        (
            Value::from(hex::encode(settle::anchor::root::chain_root(
                &settle::anchor::root::ROOT_ZERO,
                1,
                at,
                &heads_root,
            ))),
            "does not verify",
        ),
    ] {
        line["root"] = root;
        std::fs::write(&file, format!("{line}\n")).unwrap();
        let (code, _, err) = run_cli(&db.url, &["verify", "--anchors", &file]);
        assert_ne!(code, 0);
        assert!(
            err.contains("anchor_file_corrupt") && err.contains(why),
            "{err}"
        );
    }
    std::fs::write(&file, &text).unwrap();
    // The anchor key readable by others: refused, never used.
    let key = format!("{file}.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, err) = run_cli(&db.url, &["anchor", "--file", &file]);
    assert_ne!(code, 0);
    assert!(err.contains("insecure_anchor_key"), "{err}");
}
