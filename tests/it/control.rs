//! Trust and control: the ledger's clock cannot be forged by accident, and no one
//! moves money alone (dual control). Through the real `settle` binary and the HTTP API, on
//! SQLite and PostgreSQL (`SETTLE_TEST_PG_URL`).

use crate::common;
use crate::common::Tables;
use crate::http_support;

use serde_json::{Value, json};
use settle::auth::Scope;
use settle::domain::time::{format_ms, parse_rfc3339_ms};
use settle::store::ClockMode;

use common::{TestDb, run_cli};
use http_support::{assert_problem, spawn_app};

const DAY_MS: i64 = 86_400_000;

pub(super) fn real_now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Writes `lines` to a file in a temporary directory and returns both.
pub(super) fn ndjson(lines: &[Value]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.ndjson");
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    let p = path.display().to_string();
    (dir, p)
}

/// `settle import` of `lines` as `actor`, `--format json`; returns (exit code, report, stderr).
pub(super) fn import(
    url: &str,
    actor: &str,
    now: Option<&str>,
    lines: &[Value],
) -> (i32, Value, String) {
    let (_dir, path) = ndjson(lines);
    let key = key_file(url, actor);
    let mut args = vec!["--actor", actor, "--format", "json"];
    if let Some(key) = &key {
        args.extend(["--operator-key", key.as_str()]);
    }
    if let Some(now) = now {
        args.extend(["--now", now]);
    }
    args.extend(["import", path.as_str()]);
    let (code, stdout, stderr) = run_cli(url, &args);
    let report = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (code, report, stderr)
}

pub(super) fn provider(id: &str) -> Value {
    json!({"type":"provider.register","provider_id":id,"name":"Acme GPU","email":"ops@acme.test","tier":"community","schedule":"weekly"})
}

pub(super) fn adjustment(id: &str, provider: &str, usdc: &str) -> Value {
    json!({"type":"adjustment","adjustment_id":id,"provider_id":provider,"amount_usdc":usdc,"reason":"goodwill credit"})
}

/// Appends, behind the engine, a well-hashed, balanced 50,000 USDC adjustment `id` to
/// `provider`'s stream, naming `approval` (or none): what a database writer could insert.
pub(super) async fn forge_adjustment(
    db: &TestDb,
    provider: &str,
    id: &str,
    approval: Option<String>,
) {
    use settle::domain::event::{AdjustmentPosted, EventBody, lines_to_json};
    use settle::store::{canonical_bytes, event_hash};
    let store = db.store().await;
    let events = store
        .stream_events(&format!("provider:{provider}"), 0, 10_000)
        .await
        .unwrap();
    let mut e = events.last().unwrap().clone();
    let body = EventBody::AdjustmentPosted(AdjustmentPosted {
        adjustment_id: id.parse().unwrap(),
        provider_id: provider.parse().unwrap(),
        amount_micro_usdc: 50_000_000_000,
        reason: "goodwill credit".into(),
        reference: None,
        approval_id: approval,
    });
    e.seq += 1;
    e.event_type = "adjustment.posted".into();
    e.idem_key = Some(format!("adj:{id}"));
    e.content_hash = None;
    e.payload = body.to_json();
    e.lines = lines_to_json(&body.lines());
    e.prev_hash = e.hash.clone();
    e.hash = event_hash(&e.prev_hash, &canonical_bytes(&e)).to_vec();
    common::insert_raw_event(store.pool(), &e).await;
    store.close().await;
}

/// Every payout of `provider` (`settle payouts --status all --format json`).
pub(super) fn payouts_of(url: &str, provider: &str) -> Value {
    let (code, stdout, stderr) = run_cli(
        url,
        &[
            "--format",
            "json",
            "payouts",
            "--provider",
            provider,
            "--status",
            "all",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

/// The payable balance of `provider` in µUSDC (`settle balance --format json`).
pub(super) fn payable(url: &str, provider: &str) -> i64 {
    let (code, stdout, stderr) = run_cli(
        url,
        &["--format", "json", "balance", "--provider", provider],
    );
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let row = &v.as_array().map_or(&v, |a| &a[0]);
    let text = row["available_usdc"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"));
    settle::domain::money::parse_micro_usdc(text).unwrap()
}

pub(super) fn verify(url: &str) -> (i32, Value) {
    let (code, stdout, stderr) = run_cli(url, &["--format", "json", "verify"]);
    (
        code,
        serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("{stdout}{stderr}")),
    )
}

pub(super) async fn actors_of(db: &TestDb, event_type: &str) -> Vec<String> {
    let store = db.store().await;
    let mut actors = Vec::new();
    for stream in store.streams().await.unwrap() {
        for e in store.stream_events(&stream, 0, 10_000).await.unwrap() {
            if e.event_type == event_type {
                actors.push(e.actor.clone());
            }
        }
    }
    actors
}

// ----- time ---------------------------------------------------------------------------

#[tokio::test]
async fn a_real_clock_ledger_refuses_a_now_ahead_of_the_clock_and_books_at_the_real_time() {
    let db = TestDb::new().await;
    // The first booking without --now fixes the real clock.
    let (code, report, stderr) = import(&db.url, "alice", None, &[provider("prv_a")]);
    assert_eq!(code, 0, "{report}{stderr}");
    assert_eq!(
        db.store().await.clock_mode().await.unwrap(),
        Some(ClockMode::Real)
    );

    // A week ahead: refused, nothing booked.
    let ahead = format_ms(real_now_ms() + 7 * DAY_MS);
    let before = db.store().await.event_count().await.unwrap();
    let (code, _, stderr) = import(
        &db.url,
        "alice",
        Some(&ahead),
        &[adjustment("adj-1", "prv_a", "5.000000")],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("now_off_clock"), "{stderr}");
    assert_eq!(db.store().await.event_count().await.unwrap(), before);
    // A read command a week ahead too.
    let (code, _, stderr) = run_cli(&db.url, &["--now", &ahead, "balance"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("now_off_clock"), "{stderr}");

    // A booking command a day in the past is refused too: bookings carry their real time.
    let behind = format_ms(real_now_ms() - DAY_MS);
    let (code, _, stderr) = import(
        &db.url,
        "alice",
        Some(&behind),
        &[adjustment("adj-1", "prv_a", "5.000000")],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("now_off_clock"), "{stderr}");

    // Within the skew (1 s ahead) it runs, and the booking carries the real clock.
    let near = format_ms(real_now_ms() + 1_000);
    let started = real_now_ms();
    let (code, report, stderr) = import(
        &db.url,
        "alice",
        Some(&near),
        &[adjustment("adj-1", "prv_a", "5.000000")],
    );
    assert_eq!(code, 0, "{report}{stderr}");
    let latest = db
        .store()
        .await
        .max_recorded_at_ms()
        .await
        .unwrap()
        .unwrap();
    assert!(
        latest >= started && latest <= real_now_ms(),
        "booked at {} (real clock {}..{})",
        format_ms(latest),
        format_ms(started),
        format_ms(real_now_ms())
    );
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["clock"], "real");
}

#[tokio::test]
async fn a_simulated_clock_ledger_accepts_any_now_and_its_mode_is_fixed() {
    let db = TestDb::new().await;
    let (code, stdout, stderr) = run_cli(&db.url, &["migrate", "--simulated-clock"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("clock: simulated"), "{stdout}");
    let far = "2031-05-04T12:00:00Z";
    let (code, report, stderr) = import(&db.url, "alice", Some(far), &[provider("prv_a")]);
    assert_eq!(code, 0, "{report}{stderr}");
    assert_eq!(
        db.store().await.max_recorded_at_ms().await.unwrap(),
        Some(parse_rfc3339_ms(far).unwrap())
    );
    // Fixed once: neither flipped to real nor asked again.
    let (code, _, stderr) = run_cli(&db.url, &["migrate", "--real-clock"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("clock_mode_fixed"), "{stderr}");
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["clock"], "simulated");

    // A ledger that holds events cannot become a simulated one.
    let other = TestDb::new().await;
    let (ledger, _) = other.ledger_at("2026-11-02T00:00:00Z").await;
    http_support::seed(&ledger, &provider("prv_b").to_string()).await;
    let (code, _, stderr) = run_cli(&other.url, &["migrate", "--simulated-clock"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("ledger_not_empty"), "{stderr}");

    // A new ledger whose first booking runs with --now (a replay) is a simulated one.
    let replay = TestDb::new().await;
    let (code, report, stderr) = import(&replay.url, "alice", Some(far), &[provider("prv_c")]);
    assert_eq!(code, 0, "{report}{stderr}");
    assert_eq!(
        replay.store().await.clock_mode().await.unwrap(),
        Some(ClockMode::Simulated)
    );
}

#[tokio::test]
async fn verify_reports_events_booked_ahead_of_the_clock_on_a_real_clock_ledger() {
    let db = TestDb::new().await;
    let (code, _, stderr) = run_cli(&db.url, &["migrate", "--real-clock"]);
    assert_eq!(code, 0, "{stderr}");
    // Booked by a process whose clock ran a week ahead (what an older release allowed).
    let (ledger, _) = db.ledger_at(&format_ms(real_now_ms() + 7 * DAY_MS)).await;
    http_support::seed(&ledger, &provider("prv_a").to_string()).await;
    let (code, v) = verify(&db.url);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["problems"][0]["kind"], "booked_ahead_of_clock", "{v}");
    assert_eq!(v["problems"][0]["stream"], "provider:prv_a", "{v}");
}

// ----- dual control ---------------------------------------------------------------------

/// A real-clock ledger with one provider.
pub(super) async fn production() -> TestDb {
    let db = TestDb::new().await;
    let (code, _, stderr) = run_cli(&db.url, &["migrate", "--real-clock"]);
    assert_eq!(code, 0, "{stderr}");
    // A real-clock ledger tells people apart by their keys only: alice and bob are its
    // first operators, their key files in `keys_path(url)` (the helpers sign with them).
    let keys = keys_path(&db.url);
    let _ = std::fs::remove_dir_all(&keys);
    std::fs::create_dir_all(&keys).unwrap();
    let mut bootstrap = vec!["operator".to_owned(), "bootstrap".to_owned()];
    for name in ["alice", "bob"] {
        let path = keys.join(format!("{name}.json"));
        let (code, public, stderr) = run_cli(
            &db.url,
            &["operator", "keygen", "--out", path.to_str().unwrap()],
        );
        assert_eq!(code, 0, "{stderr}");
        bootstrap.extend(["--operator".to_owned(), format!("{name}={}", public.trim())]);
    }
    let args: Vec<&str> = bootstrap.iter().map(String::as_str).collect();
    let (code, listed, stderr) = run_cli(&db.url, &args);
    assert_eq!(code, 0, "{listed}{stderr}");
    let (code, report, stderr) = import(&db.url, "alice", None, &[provider("prv_a")]);
    assert_eq!(code, 0, "{report}{stderr}");
    db
}

/// Where the operator key files of the test ledger at `url` lie (one directory per ledger).
pub(super) fn keys_path(url: &str) -> std::path::PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    url.hash(&mut h);
    std::env::temp_dir()
        .join("settle-test-keys")
        .join(format!("{:016x}", h.finish()))
}

/// The key file of `actor` on the ledger at `url`, when it is one of its operators'.
pub(super) fn key_file(url: &str, actor: &str) -> Option<String> {
    let path = keys_path(url).join(format!("{actor}.json"));
    path.exists().then(|| path.display().to_string())
}

pub(super) fn approve(url: &str, actor: &str, id: &str) -> (i32, Value, String) {
    let key = key_file(url, actor);
    let mut args = vec!["--actor", actor, "--format", "json"];
    if let Some(key) = &key {
        args.extend(["--operator-key", key.as_str()]);
    }
    args.extend(["approvals", "approve", id]);
    let (code, stdout, stderr) = run_cli(url, &args);
    (
        code,
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        stderr,
    )
}

#[tokio::test]
async fn an_adjustment_above_the_threshold_waits_for_a_different_actor() {
    let db = production().await;
    // 5,000 USDC: at or above the default threshold (1,000 USDC).
    let big = adjustment("adj-big", "prv_a", "5000.000000");
    let (code, report, stderr) = import(&db.url, "alice", None, std::slice::from_ref(&big));
    assert_eq!(code, 0, "{report}{stderr}");
    let line = &report["lines"][0];
    assert_eq!(line["status"], "pending", "{report}");
    assert_eq!(line["code"], "pending_approval", "{report}");
    assert_eq!(report["totals"]["pending"], 1);
    let id = line["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(
        payable(&db.url, "prv_a"),
        0,
        "nothing booked before approval"
    );

    // Sent again: the same request, still nothing booked.
    let (_, again, _) = import(&db.url, "alice", None, std::slice::from_ref(&big));
    assert_eq!(again["lines"][0]["approval_id"], id.as_str());
    assert_eq!(payable(&db.url, "prv_a"), 0);

    // The requester cannot approve their own request.
    let (code, _, stderr) = approve(&db.url, "alice", &id);
    assert_eq!(code, 2);
    assert!(stderr.contains("approver_is_requester"), "{stderr}");
    assert_eq!(payable(&db.url, "prv_a"), 0);

    // A different actor can: booked once, both actors named.
    let (code, decided, stderr) = approve(&db.url, "bob", &id);
    assert_eq!(code, 0, "{decided}{stderr}");
    assert_eq!(decided[0]["status"], "approved");
    assert_eq!(decided[0]["decided_by"], "operator:bob");
    assert_eq!(decided[0]["result"], "accepted");
    assert_eq!(payable(&db.url, "prv_a"), 5_000_000_000);
    assert_eq!(
        actors_of(&db, "adjustment.posted").await,
        vec!["operator:alice approved by operator:bob".to_owned()]
    );
    // Approving again, or re-sending the line, books nothing twice.
    let (code, _, stderr) = approve(&db.url, "carol", &id);
    assert_eq!(code, 2);
    assert!(stderr.contains("approval_decided"), "{stderr}");
    let (_, replay, _) = import(&db.url, "alice", None, &[big]);
    assert_eq!(replay["lines"][0]["status"], "duplicate", "{replay}");
    assert_eq!(payable(&db.url, "prv_a"), 5_000_000_000);

    // Below the threshold, for a provider without other adjustments in the last 24 hours:
    // booked at once. For prv_a, whose 5,000 USDC were booked minutes ago, the same small
    // amount brings the day's adjustments over the threshold: it waits too (one large
    // adjustment is not split into small ones).
    let (_, small, _) = import(
        &db.url,
        "alice",
        None,
        &[
            provider("prv_b"),
            adjustment("adj-small-b", "prv_b", "999.999999"),
            adjustment("adj-small", "prv_a", "999.999999"),
        ],
    );
    assert_eq!(small["lines"][1]["status"], "accepted", "{small}");
    assert_eq!(payable(&db.url, "prv_b"), 999_999_999);
    assert_eq!(small["lines"][2]["status"], "pending", "{small}");
    assert_eq!(payable(&db.url, "prv_a"), 5_000_000_000);
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");
    common::assert_events_match_schemas(&db.store().await).await;
}

#[tokio::test]
async fn payout_method_fee_and_fx_changes_wait_and_a_rejection_sticks() {
    let db = production().await;
    let wallet = "4Nd1mYwTjT7JvAPP2Pb5ZsXWV8Xw6YwbVsyrAjc5d7Hk";
    let lines = [
        json!({"type":"provider.update","provider_id":"prv_a","payout_method":{"kind":"solana","wallet":wallet}}),
        json!({"type":"fee_schedule.set","tier":"community","fee_bps":1800,"effective_from":"2027-01-01T00:00:00Z"}),
        json!({"type":"fx.rate_set","fx_id":"fx-1","eur_per_usd":"0.92"}),
        json!({"type":"fx.rate_set","fx_id":"fx-2","eur_per_usd":"92"}),
        json!({"type":"fx.rate_set","fx_id":"fx-3","eur_per_usd":"0.93"}),
        json!({"type":"fx.rate_set","fx_id":"fx-4","eur_per_usd":"1.20"}),
        provider("prv_b")
            .as_object()
            .map(|o| {
                let mut o = o.clone();
                o.insert(
                    "payout_method".into(),
                    json!({"kind":"solana","wallet":wallet}),
                );
                Value::Object(o)
            })
            .unwrap(),
    ];
    let (code, report, stderr) = import(&db.url, "alice", None, &lines);
    assert_eq!(code, 0, "{report}{stderr}");
    let statuses: Vec<&str> = report["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["status"].as_str().unwrap())
        .collect();
    // The method change, the fee schedule, 92 (outside the band), 1.20 (a 29 % step) and
    // a registration with a method wait; 0.92 and 0.93 (a 1 % step) are booked.
    assert_eq!(
        statuses,
        vec![
            "pending", "pending", "accepted", "pending", "accepted", "pending", "pending"
        ],
        "{report}"
    );
    let (code, stdout, stderr) = run_cli(&db.url, &["--format", "json", "approvals", "list"]);
    assert_eq!(code, 0, "{stderr}");
    let pending: Value = serde_json::from_str(&stdout).unwrap();
    let kinds: Vec<&str> = pending
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "fx_rate").count(),
        2,
        "{pending}"
    );
    assert!(kinds.contains(&"payout_method") && kinds.contains(&"fee_schedule"));

    // Approve the method change: the method is set, keyed by the approval.
    let method_id = report["lines"][0]["approval_id"].as_str().unwrap();
    let (code, decided, stderr) = approve(&db.url, "bob", method_id);
    assert_eq!(code, 0, "{decided}{stderr}");
    let actors = actors_of(&db, "provider.updated").await;
    assert_eq!(
        actors,
        vec!["operator:alice approved by operator:bob".to_owned()]
    );

    // Reject the 92: nothing booked, and the same line is refused from then on.
    let fx_id = report["lines"][3]["approval_id"].as_str().unwrap();
    let bob_key = key_file(&db.url, "bob").unwrap();
    let (code, stdout, stderr) = run_cli(
        &db.url,
        &[
            "--actor",
            "bob",
            "--operator-key",
            &bob_key,
            "--format",
            "json",
            "approvals",
            "reject",
            fx_id,
            "--reason",
            "typo: 0.92",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (_, again, _) = import(&db.url, "alice", None, &[lines[3].clone()]);
    assert_eq!(again["lines"][0]["code"], "approval_rejected", "{again}");
    let fx = actors_of(&db, "fx.rate_set").await;
    assert_eq!(fx.len(), 2, "only 0.92 and 0.93 are booked: {fx:?}");
    // Approved, the 1.20 (outside the step) is booked: the approver lifted its band.
    let step_id = report["lines"][5]["approval_id"].as_str().unwrap();
    let (code, decided, stderr) = approve(&db.url, "bob", step_id);
    assert_eq!(code, 0, "{decided}{stderr}");
    assert_eq!(decided[0]["result"], "accepted", "{decided}");
    assert_eq!(actors_of(&db, "fx.rate_set").await.len(), 3);
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");
}

#[tokio::test]
async fn a_simulated_ledger_replays_without_approvals_unless_enforced() {
    let db = TestDb::new().await;
    let now = "2026-11-02T00:00:00Z";
    let (code, report, stderr) = import(
        &db.url,
        "alice",
        Some(now),
        &[
            provider("prv_a"),
            adjustment("adj-big", "prv_a", "5000.000000"),
        ],
    );
    assert_eq!(code, 0, "{report}{stderr}");
    assert_eq!(report["lines"][1]["status"], "accepted", "{report}");
    assert_eq!(payable(&db.url, "prv_a"), 5_000_000_000);

    // The environment changes nothing: the ledger's policy (seeded by its first command)
    // decides, here and on a real-clock ledger alike.
    let import_with_env = |id: &str| {
        let (_dir, path) = ndjson(&[adjustment(id, "prv_a", "5000.000000")]);
        let out = common::settle_command()
            .env("SETTLE_CONTROL__ENFORCE", "always")
            .args([
                "--database",
                &db.url,
                "--format",
                "json",
                "--now",
                now,
                "import",
                &path,
            ])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["lines"][0]["status"].as_str().unwrap().to_owned()
    };
    assert_eq!(import_with_env("adj-big-2"), "accepted");
    assert_eq!(payable(&db.url, "prv_a"), 10_000_000_000);

    // `enforce = "always"` in the ledger's policy applies control there too.
    let (code, out, stderr) = run_cli(
        &db.url,
        &["--now", now, "control", "set-policy", "enforce=always"],
    );
    assert_eq!(code, 0, "{out}{stderr}");
    assert_eq!(import_with_env("adj-big-3"), "pending");
    assert_eq!(payable(&db.url, "prv_a"), 10_000_000_000);
}

#[tokio::test]
async fn over_http_a_real_clock_ledger_without_operators_books_nothing_gated() {
    let app = spawn_app("2026-11-02T00:00:00Z").await;
    settle::ledger::policy::fix_clock_mode(&app.ledger.store, ClockMode::Real, real_now_ms())
        .await
        .unwrap();
    let admin = app.token(Scope::Admin, None).await;
    let before = app.get_json(&admin, "/v1/providers/prv_a/summary").await;
    let body = json!({"adjustment_id":"adj-h0","provider_id":"prv_a","amount_usdc":"2500.000000","reason":"SLA credit"});
    let r = app
        .post(Some(&admin), "/v1/admin/adjustments", body.to_string())
        .await;
    assert_problem(r, 422, "no_operators").await;
    let after = app.get_json(&admin, "/v1/providers/prv_a/summary").await;
    assert_eq!(
        before["balances"]["available_usdc"],
        after["balances"]["available_usdc"]
    );
    let list = app.get_json(&admin, "/v1/admin/approvals").await;
    assert_eq!(list["approvals"], json!([]), "{list}");
}

/// On a simulated-clock ledger without operators whose policy enforces control (a replay,
/// a test), actors are told apart by their labels: another admin token approves.
#[tokio::test]
async fn over_http_an_adjustment_waits_and_only_another_admin_token_approves_it() {
    let app = spawn_app("2026-11-02T00:00:00Z").await;
    let mut policy = settle::config::Config::default().seed_policy();
    policy.enforce = settle::config::Enforce::Always;
    app.ledger.policy_or_seed(&policy, 0).await.unwrap();
    let (maker, maker_id) = app.token_with(Scope::Admin, None, None).await;
    let checker = app.token(Scope::Admin, None).await;
    let body = json!({"adjustment_id":"adj-h1","provider_id":"prv_a","amount_usdc":"2500.000000","reason":"SLA credit"});
    let r = app
        .post(Some(&maker), "/v1/admin/adjustments", body.to_string())
        .await;
    assert_eq!(r.status(), 202);
    let pending: Value = r.json().await.unwrap();
    assert_eq!(pending["status"], "pending_approval");
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(pending["approval"]["amount_usdc"], "2500.000000");
    assert!(
        pending["approval"]["requested_by"]
            .as_str()
            .unwrap()
            .contains(&maker_id),
        "{pending}"
    );
    let balance = |v: &Value| v["balances"]["available_usdc"].clone();
    let before = app.get_json(&checker, "/v1/providers/prv_a/summary").await;

    let approve = format!("/v1/admin/approvals/{id}/approve");
    let r = app.post(Some(&maker), &approve, "").await;
    assert_problem(r, 422, "approver_is_requester").await;
    let list = app
        .get_json(&checker, "/v1/admin/approvals?status=pending")
        .await;
    assert_eq!(list["approvals"][0]["approval_id"], id.as_str(), "{list}");

    let r = app.post(Some(&checker), &approve, "").await;
    assert_eq!(r.status(), 200);
    let decided: Value = r.json().await.unwrap();
    assert_eq!(decided["approval"]["status"], "approved", "{decided}");
    assert_eq!(decided["result"], "accepted");
    let after = app.get_json(&checker, "/v1/providers/prv_a/summary").await;
    assert_ne!(balance(&before), balance(&after), "{before} {after}");
    let r = app.post(Some(&checker), &approve, "").await;
    assert_problem(r, 422, "approval_decided").await;
    let r = app
        .get(
            Some(&checker),
            "/v1/admin/approvals/apr_000000000000000000000000",
        )
        .await;
    assert_problem(r, 404, "unknown_approval").await;
}

#[tokio::test]
async fn the_release_of_a_held_payout_waits_for_a_second_actor() {
    let db = TestDb::new().await;
    let wallet = "4Nd1mYwTjT7JvAPP2Pb5ZsXWV8Xw6YwbVsyrAjc5d7Hk";
    let mut register = provider("prv_h");
    register["payout_method"] = json!({"kind":"solana","wallet":wallet});
    // A replay (simulated clock) books the history; the held payout comes from the run.
    let (code, report, stderr) = import(
        &db.url,
        "alice",
        Some("2026-11-01T00:00:00Z"),
        &[
            register,
            json!({"type":"provider.update","provider_id":"prv_h","status":"on_hold"}),
            adjustment("adj-earned", "prv_h", "250.000000"),
        ],
    );
    assert_eq!(code, 0, "{report}{stderr}");
    let (code, stdout, stderr) = run_cli(
        &db.url,
        &[
            "--now",
            "2026-11-09T00:05:00Z",
            "--format",
            "json",
            "run",
            "weekly",
            "--date",
            "2026-11-09",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let payouts = payouts_of(&db.url, "prv_h");
    let payout = payouts.as_array().unwrap()[0].clone();
    assert_eq!(payout["status"], "held", "{payouts}");
    let id = payout["payout_id"].as_str().unwrap().to_owned();

    // With dual control enforced by the ledger's policy, alice's release waits; bob's
    // approval releases it.
    let (code, out, stderr) = run_cli(
        &db.url,
        &[
            "--now",
            "2026-11-09T10:00:00Z",
            "control",
            "set-policy",
            "enforce=always",
        ],
    );
    assert_eq!(code, 0, "{out}{stderr}");
    let release = |actor: &str| {
        let out = common::settle_command()
            .args([
                "--database",
                &db.url,
                "--actor",
                actor,
                "--now",
                "2026-11-09T10:00:00Z",
                "--format",
                "json",
                "payout",
                "release",
                &id,
            ])
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, stdout) = release("alice");
    assert_eq!(code, 0, "{stdout}");
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(shown[0]["status"], "held", "{shown}");
    let result = shown[0]["result"].as_str().unwrap();
    assert!(result.starts_with("pending_approval apr_"), "{result}");
    let approval = result.trim_start_matches("pending_approval ").to_owned();
    assert_eq!(release("alice").1, stdout, "the same request again");

    let (code, stdout, stderr) = run_cli(
        &db.url,
        &[
            "--actor",
            "bob",
            "--now",
            "2026-11-09T10:05:00Z",
            "--format",
            "json",
            "approvals",
            "approve",
            &approval,
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (_, stdout, _) = run_cli(
        &db.url,
        &[
            "--format",
            "json",
            "payouts",
            "--provider",
            "prv_h",
            "--status",
            "all",
        ],
    );
    let payouts: Value = serde_json::from_str(&stdout).unwrap();
    assert_ne!(payouts[0]["status"], "held", "{payouts}");
    assert_eq!(
        actors_of(&db, "payout.released").await,
        vec!["operator:alice approved by operator:bob".to_owned()]
    );
}

// ----- operators with keys (SPEC §9) ----------------------------------------------------

/// A real-clock ledger with one provider and two operators, `alice` and `bob`, whose key
/// files (mode 0600) lie in the returned directory.
async fn with_operators() -> (TestDb, std::path::PathBuf) {
    let db = production().await;
    let (code, listed, stderr) = run_cli(&db.url, &["operator", "list"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        listed.contains("alice") && listed.contains("bob"),
        "{listed}"
    );
    let keys = keys_path(&db.url);
    (db, keys)
}

pub(super) fn key_of(keys: impl AsRef<std::path::Path>, name: &str) -> String {
    keys.as_ref()
        .join(format!("{name}.json"))
        .display()
        .to_string()
}

/// `settle --actor ACTOR [--operator-key KEY] --format json ARGS…`.
pub(super) fn as_operator(
    url: &str,
    actor: &str,
    key: Option<&str>,
    args: &[&str],
) -> (i32, Value, String) {
    let mut all = vec!["--actor", actor, "--format", "json"];
    if let Some(key) = key {
        all.extend(["--operator-key", key]);
    }
    all.extend(args);
    let (code, stdout, stderr) = run_cli(url, &all);
    (
        code,
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        stderr,
    )
}

#[tokio::test]
async fn an_operator_cannot_approve_their_own_request_under_any_name() {
    let (db, keys) = with_operators().await;
    let (alice, bob) = (key_of(&keys, "alice"), key_of(&keys, "bob"));
    let (_dir, file) = ndjson(&[adjustment("adj-op", "prv_a", "5000.000000")]);

    // No key: the request cannot be booked on a ledger with operators.
    let (code, report, _) = as_operator(&db.url, "alice", None, &["import", &file]);
    assert_eq!(code, 2, "{report}");
    assert_eq!(
        report["lines"][0]["code"], "operator_signature_required",
        "{report}"
    );

    let (code, report, stderr) = as_operator(&db.url, "alice", Some(&alice), &["import", &file]);
    assert_eq!(code, 0, "{report}{stderr}");
    assert_eq!(report["lines"][0]["status"], "pending", "{report}");
    let id = report["lines"][0]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Alice's key under another spelling of her name, or under another name: refused.
    for actor in ["ALICE", "carol"] {
        let (code, _, stderr) =
            as_operator(&db.url, actor, Some(&alice), &["approvals", "approve", &id]);
        assert_eq!(code, 2, "{actor}: {stderr}");
        assert!(
            stderr.contains("approver_is_requester"),
            "{actor}: {stderr}"
        );
    }
    // Another name without a key: refused too.
    let (code, _, stderr) = as_operator(&db.url, "bob", None, &["approvals", "approve", &id]);
    assert_eq!(code, 2);
    assert!(stderr.contains("operator_signature_required"), "{stderr}");
    assert_eq!(payable(&db.url, "prv_a"), 0, "nothing booked by one person");

    // Bob's key approves: booked once, both operators on the ledger.
    let (code, decided, stderr) =
        as_operator(&db.url, "bob", Some(&bob), &["approvals", "approve", &id]);
    assert_eq!(code, 0, "{decided}{stderr}");
    assert_eq!(decided[0]["requester_operator"], "alice", "{decided}");
    assert_eq!(decided[0]["decider_operator"], "bob", "{decided}");
    assert_eq!(payable(&db.url, "prv_a"), 5_000_000_000);
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");
    common::assert_events_match_schemas(&db.store().await).await;
}

#[tokio::test]
async fn an_operator_key_is_refused_when_others_may_read_it_or_it_is_nobody_s() {
    use std::os::unix::fs::PermissionsExt;
    let (db, keys) = with_operators().await;
    let alice = key_of(&keys, "alice");
    let (_dir, file) = ndjson(&[adjustment("adj-k", "prv_a", "5000.000000")]);
    std::fs::set_permissions(&alice, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, stderr) = as_operator(&db.url, "alice", Some(&alice), &["import", &file]);
    assert_ne!(code, 0);
    assert!(stderr.contains("insecure_operator_key"), "{stderr}");

    // A key of no operator of this ledger.
    let stranger = keys.join("stranger.json");
    let (code, _, _) = run_cli(
        &db.url,
        &["operator", "keygen", "--out", stranger.to_str().unwrap()],
    );
    assert_eq!(code, 0);
    let (code, _, stderr) = as_operator(
        &db.url,
        "mallory",
        Some(stranger.to_str().unwrap()),
        &["import", &file],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("unknown_operator"), "{stderr}");
    // Keygen never overwrites a key.
    let (code, _, stderr) = run_cli(
        &db.url,
        &["operator", "keygen", "--out", stranger.to_str().unwrap()],
    );
    assert_ne!(code, 0, "{stderr}");
    // A second bootstrap is refused.
    let (code, _, stderr) = run_cli(
        &db.url,
        &[
            "operator",
            "bootstrap",
            "--operator",
            "x=4Nd1mYwTjT7JvAPP2Pb5ZsXWV8Xw6YwbVsyrAjc5d7Hk",
            "--operator",
            "y=9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin",
        ],
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("operators_exist"), "{stderr}");
    assert_eq!(payable(&db.url, "prv_a"), 0);
}

/// The operator key of `path` (a key file `settle operator keygen` wrote).
fn signing_key(path: &str) -> ed25519_dalek::SigningKey {
    let bytes: Vec<u8> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    ed25519_dalek::SigningKey::from_keypair_bytes(&bytes.try_into().unwrap()).unwrap()
}

fn signature(key: &ed25519_dalek::SigningKey, message: &str) -> String {
    use ed25519_dalek::Signer;
    bs58::encode(key.sign(message.as_bytes()).to_bytes()).into_string()
}

/// `POST path` with `token` and, when given, an operator's name and signature headers.
async fn send_signed(
    app: &http_support::TestApp,
    token: &str,
    path: &str,
    body: &str,
    who: Option<(&str, String)>,
) -> reqwest::Response {
    let mut r = app
        .client
        .post(app.url(path))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some((operator, sig)) = who {
        r = r
            .header("settle-operator", operator)
            .header("settle-operator-signature", sig);
    }
    r.send().await.unwrap()
}

#[tokio::test]
async fn over_http_two_tokens_of_one_operator_are_one_person() {
    let (db, keys) = with_operators().await;
    let alice = signing_key(&key_of(&keys, "alice"));
    let bob = signing_key(&key_of(&keys, "bob"));
    let app = http_support::serve_db(
        db,
        &format_ms(real_now_ms()),
        settle::config::HttpConfig::default(),
    )
    .await;
    // Two admin tokens, both alice's.
    let first = app.token(Scope::Admin, None).await;
    let second = app.token(Scope::Admin, None).await;
    let body = json!({"adjustment_id":"adj-h2","provider_id":"prv_a","amount_usdc":"2500.000000","reason":"SLA credit"}).to_string();

    // Unsigned: 428 with what to sign.
    let r = app
        .post(Some(&first), "/v1/admin/adjustments", body.clone())
        .await;
    let problem = assert_problem(r, 428, "operator_signature_required").await;
    let detail = problem["detail"].as_str().unwrap();
    let start = detail.find("settle/control/v1/request:").unwrap();
    let message: String = detail[start..].chars().take_while(|c| *c != '`').collect();

    let r = send_signed(
        &app,
        &first,
        "/v1/admin/adjustments",
        &body,
        Some(("alice", signature(&alice, &message))),
    )
    .await;
    assert_eq!(r.status(), 202);
    let pending: Value = r.json().await.unwrap();
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    let hash = pending["approval"]["content_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(message, format!("settle/control/v1/request:{hash}"));
    let decision = format!("settle/control/v1/approve:{id}:{hash}");
    let approve = format!("/v1/admin/approvals/{id}/approve");

    // The second token with alice's signature: the same person. Alice's signature under
    // bob's name, or a signature of another message: forged. No signature: asked for.
    let refusals = [
        (
            Some(("alice", signature(&alice, &decision))),
            422,
            "approver_is_requester",
        ),
        (
            Some(("bob", signature(&alice, &decision))),
            403,
            "invalid_signature",
        ),
        (
            Some(("bob", signature(&bob, &message))),
            403,
            "invalid_signature",
        ),
        (None, 428, "operator_signature_required"),
    ];
    for (who, status, code) in refusals {
        let r = send_signed(&app, &second, &approve, "", who).await;
        assert_problem(r, status, code).await;
    }

    // Bob's signature of the decision: approved and booked.
    let r = send_signed(
        &app,
        &second,
        &approve,
        "",
        Some(("bob", signature(&bob, &decision))),
    )
    .await;
    assert_eq!(r.status(), 200);
    let decided: Value = r.json().await.unwrap();
    assert_eq!(decided["approval"]["decider_operator"], "bob", "{decided}");
    assert_eq!(decided["result"], "accepted");
}

/// Appends an event to the tail of the platform stream as a database writer could: a copy
/// of the stream's last event with `event_type` and `payload`, correctly chained and hashed.
pub(super) async fn append_forged(db: &TestDb, event_type: &str, payload: Value) {
    use settle::store::{canonical_bytes, event_hash};
    let store = db.store().await;
    let events = store.stream_events("platform", 0, 10_000).await.unwrap();
    let mut e = events.last().expect("a platform event").clone();
    e.seq += 1;
    e.event_type = event_type.to_owned();
    e.idem_key = None;
    e.content_hash = None;
    e.actor = "operator:bob".to_owned();
    e.payload = payload.to_string();
    e.prev_hash = e.hash.clone();
    e.hash = event_hash(&e.prev_hash, &canonical_bytes(&e)).to_vec();
    common::insert_raw_event(store.pool(), &e).await;
    store.close().await;
}

#[tokio::test]
async fn verify_names_a_decision_a_database_writer_inserted_without_a_second_operator() {
    let (db, keys) = with_operators().await;
    let alice_file = key_of(&keys, "alice");
    let (_dir, file) = ndjson(&[adjustment("adj-forged", "prv_a", "5000.000000")]);
    let (code, report, stderr) =
        as_operator(&db.url, "alice", Some(&alice_file), &["import", &file]);
    assert_eq!(code, 0, "{report}{stderr}");
    let id = report["lines"][0]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "a signed request verifies: {v}");

    // A well-hashed decision with no signature, in bob's name.
    append_forged(
        &db,
        "approval.decided",
        json!({"approval_id": id, "decision": "approved", "decided_by": "operator:bob"}),
    )
    .await;
    let (code, v) = verify(&db.url);
    assert_eq!(code, 1, "{v}");
    assert!(problem_kinds(&v).contains(&"unsigned_decision"), "{v}");

    // Alice's own valid signature of the approval, under her name or bob's.
    let alice = signing_key(&alice_file);
    let (_, shown, _) = as_operator(&db.url, "x", None, &["approvals", "show", &id]);
    let hash = shown[0]["content_hash"].as_str().unwrap().to_owned();
    let sig = signature(&alice, &format!("settle/control/v1/approve:{id}:{hash}"));
    for (who, kind) in [
        ("alice", "self_approved"),
        ("bob", "invalid_decision_signature"),
    ] {
        append_forged(
            &db,
            "approval.decided",
            json!({"approval_id": id, "decision": "approved", "decided_by": "operator:bob",
                   "decider_operator": who, "decider_signature": sig}),
        )
        .await;
        let (_, v) = verify(&db.url);
        assert!(problem_kinds(&v).contains(&kind), "{who}: {v}");
    }
}

/// The kinds of the problems a `verify --format json` report lists.
pub(super) fn problem_kinds(report: &Value) -> Vec<&str> {
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn operators_are_added_rotated_and_removed_only_by_an_approved_request() {
    let (db, keys) = with_operators().await;
    let (alice, bob) = (key_of(&keys, "alice"), key_of(&keys, "bob"));
    let keygen = |name: &str| {
        let path = key_of(&keys, name);
        let (code, public, stderr) = run_cli(&db.url, &["operator", "keygen", "--out", &path]);
        assert_eq!(code, 0, "{stderr}");
        (path, public.trim().to_owned())
    };
    let request = |key: &str, args: &[&str]| {
        let mut all = vec!["--operator-key", key, "operator"];
        all.extend(args);
        let (code, out, stderr) = run_cli(&db.url, &all);
        assert_eq!(code, 0, "{stderr}");
        out.trim()
            .strip_prefix("pending_approval ")
            .unwrap_or_else(|| panic!("{out}"))
            .to_owned()
    };
    let approve = |key: &str, id: &str| {
        as_operator(
            &db.url,
            "approver",
            Some(key),
            &["approvals", "approve", id],
        )
    };
    let names = || {
        let (_, listed, _) = as_operator(&db.url, "x", None, &["operator", "list"]);
        let mut names: Vec<String> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["operator"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };

    // Carol joins: requested by alice, approved by bob. Until then her key is no one's.
    let (carol, carol_public) = keygen("carol");
    let id = request(
        &alice,
        &["add", "--name", "carol", "--public-key", &carol_public],
    );
    let (code, _, stderr) = approve(&carol, &id);
    assert!(code != 0 && stderr.contains("unknown_operator"), "{stderr}");
    let (code, _, stderr) = approve(&alice, &id);
    assert!(
        code == 2 && stderr.contains("approver_is_requester"),
        "{stderr}"
    );
    let (code, decided, stderr) = approve(&bob, &id);
    assert_eq!(code, 0, "{decided}{stderr}");
    assert_eq!(names(), ["alice", "bob", "carol"]);

    // Bob's key leaks: replaced on alice's request with carol's approval.
    let (bob2, bob2_public) = keygen("bob2");
    let id = request(
        &alice,
        &["rotate-key", "--name", "bob", "--public-key", &bob2_public],
    );
    let (code, _, stderr) = approve(&carol, &id);
    assert_eq!(code, 0, "{stderr}");
    let (_dir, file) = ndjson(&[adjustment("adj-rot", "prv_a", "5000.000000")]);
    let (code, report, _) = as_operator(&db.url, "bob", Some(&bob), &["import", &file]);
    assert_ne!(code, 0, "bob's old key still signs: {report}");
    let (code, report, stderr) = as_operator(&db.url, "bob", Some(&bob2), &["import", &file]);
    assert_eq!(code, 0, "{report}{stderr}");
    let adj = report["lines"][0]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, _, stderr) = approve(&carol, &adj);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(payable(&db.url, "prv_a"), 5_000_000_000);

    // Carol leaves; then no removal may leave fewer than two.
    let id = request(&alice, &["remove", "--name", "carol"]);
    let (code, _, stderr) = approve(&bob2, &id);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(names(), ["alice", "bob"]);
    let id = request(&alice, &["remove", "--name", "bob"]);
    let (code, _, stderr) = approve(&bob2, &id);
    assert!(
        code == 2 && stderr.contains("operators_too_few"),
        "{stderr}"
    );
    assert_eq!(names(), ["alice", "bob"]);

    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");
    common::assert_events_match_schemas(&db.store().await).await;
}

/// A simulated-clock ledger whose configuration (the returned file) enforces control, with
/// `prv_a` and the operators `alice` and `bob` (key files in the returned directory).
pub(super) async fn replay_with_operators(now: &str) -> (TestDb, tempfile::TempDir, String) {
    let db = TestDb::new().await;
    let keys = tempfile::tempdir().unwrap();
    let config = keys.path().join("settle.toml");
    std::fs::write(&config, "[control]\nenforce = \"always\"\n").unwrap();
    let config = config.display().to_string();
    let (code, _, stderr) = run_cli(
        &db.url,
        &["--config", &config, "migrate", "--simulated-clock"],
    );
    assert_eq!(code, 0, "{stderr}");
    let mut bootstrap = vec![
        "--now".to_owned(),
        now.to_owned(),
        "operator".into(),
        "bootstrap".into(),
    ];
    for name in ["alice", "bob"] {
        let path = key_of(&keys, name);
        let (code, public, stderr) = run_cli(&db.url, &["operator", "keygen", "--out", &path]);
        assert_eq!(code, 0, "{stderr}");
        bootstrap.extend(["--operator".to_owned(), format!("{name}={}", public.trim())]);
    }
    let args: Vec<&str> = bootstrap.iter().map(String::as_str).collect();
    let (code, _, stderr) = run_cli(&db.url, &args);
    assert_eq!(code, 0, "{stderr}");
    let (_dir, file) = ndjson(&[provider("prv_a")]);
    let (code, _, stderr) = run_cli(
        &db.url,
        &["--config", &config, "--now", now, "import", &file],
    );
    assert_eq!(code, 0, "{stderr}");
    (db, keys, config)
}

#[tokio::test]
async fn a_request_expires_and_an_approval_is_used_once() {
    let t0 = "2026-11-02T09:00:00Z";
    let (db, keys, config) = replay_with_operators(t0).await;
    let (alice, bob) = (key_of(&keys, "alice"), key_of(&keys, "bob"));
    let at = |hours: i64| format_ms(parse_rfc3339_ms(t0).unwrap() + hours * 3_600_000);
    let send = |key: &str, now: &str, args: &[&str]| {
        let mut all = vec!["--config", config.as_str(), "--now", now];
        all.extend(args);
        let actor = std::path::Path::new(key)
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap();
        as_operator(&db.url, actor, Some(key), &all)
    };
    let wallet = |w: &str| json!({"type":"provider.update","provider_id":"prv_a","payout_method":{"kind":"solana","wallet":w}});
    let (w2, w3) = (
        "4Nd1mYwTjT7JvAPP2Pb5ZsXWV8Xw6YwbVsyrAjc5d7Hk",
        "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin",
    );
    let request = |now: &str, line: Value| {
        let (_dir, file) = ndjson(&[line]);
        let (code, report, stderr) = send(&alice, now, &["import", &file]);
        assert_eq!(code, 0, "{report}{stderr}");
        assert_eq!(report["lines"][0]["status"], "pending", "{report}");
        report["lines"][0]["approval_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    // Not decided within 72 hours: expired; the same command again is a new request.
    let first = request(&at(0), wallet(w2));
    let (code, _, stderr) = send(&bob, &at(72), &["approvals", "approve", &first]);
    assert!(code == 2 && stderr.contains("approval_expired"), "{stderr}");
    let second = request(&at(72), wallet(w2));
    assert_ne!(first, second, "an expired request is not reopened");
    let (code, _, stderr) = send(&bob, &at(73), &["approvals", "approve", &second]);
    assert_eq!(code, 0, "{stderr}");

    // W2 → W3 → W2 again: the last is a new request (the approval of the first W2 was used),
    // not a silent duplicate.
    let third = request(&at(74), wallet(w3));
    let (code, _, stderr) = send(&bob, &at(74), &["approvals", "approve", &third]);
    assert_eq!(code, 0, "{stderr}");
    let fourth = request(&at(75), wallet(w2));
    assert!(![&first, &second, &third].contains(&&fourth), "{fourth}");
    let (code, _, stderr) = send(&bob, &at(75), &["approvals", "approve", &fourth]);
    assert_eq!(code, 0, "{stderr}");
    let updates = actors_of(&db, "provider.updated").await;
    assert_eq!(updates.len(), 3, "{updates:?}");
    // A keyed command replayed after its approval is a duplicate, not a new request.
    let big = adjustment("adj-once", "prv_a", "5000.000000");
    let id = request(&at(76), big.clone());
    let (code, _, stderr) = send(&bob, &at(76), &["approvals", "approve", &id]);
    assert_eq!(code, 0, "{stderr}");
    let (_dir, file) = ndjson(&[big]);
    let (_, replay, _) = send(&alice, &at(77), &["import", &file]);
    assert_eq!(replay["lines"][0]["status"], "duplicate", "{replay}");
    assert_eq!(payable(&db.url, "prv_a"), 5_000_000_000);
}

#[tokio::test]
async fn verify_names_an_adjustment_a_database_writer_inserted_without_an_approval() {
    let (db, keys) = with_operators().await;
    let (alice, bob) = (key_of(&keys, "alice"), key_of(&keys, "bob"));
    // An approved adjustment names its approval, and verifies.
    let (_dir, file) = ndjson(&[adjustment("adj-real", "prv_a", "5000.000000")]);
    let (_, report, _) = as_operator(&db.url, "alice", Some(&alice), &["import", &file]);
    let id = report["lines"][0]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, _, stderr) = as_operator(&db.url, "bob", Some(&bob), &["approvals", "approve", &id]);
    assert_eq!(code, 0, "{stderr}");
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");

    // A database writer appends a 50,000 USDC adjustment to prv_a's stream, well hashed and
    // balanced: with no approval, then naming the approval of another adjustment.
    for (n, approval) in [(1, None), (2, Some(id.clone()))] {
        forge_adjustment(&db, "prv_a", &format!("adj-forged-{n}"), approval).await;
        let (code, v) = verify(&db.url);
        assert_eq!(code, 1, "{v}");
        let named: Vec<&Value> = v["problems"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] == "unapproved_gated_event")
            .collect();
        assert_eq!(named.len(), n, "{v}");
        assert_eq!(named[n - 1]["stream"], "provider:prv_a", "{v}");
    }
}

#[tokio::test]
async fn a_tier_change_waits_for_a_second_actor() {
    let db = production().await;
    // Enterprise pays a lower fee: the tier decides money, so it waits like a payout method.
    let line = json!({"type":"provider.update","provider_id":"prv_a","tier":"enterprise"});
    let (code, report, stderr) = import(&db.url, "alice", None, std::slice::from_ref(&line));
    assert_eq!(code, 0, "{report}{stderr}");
    assert_eq!(report["lines"][0]["status"], "pending", "{report}");
    let id = report["lines"][0]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(actors_of(&db, "provider.updated").await.is_empty());
    let (_, shown, _) = as_operator(&db.url, "x", None, &["approvals", "show", &id]);
    assert_eq!(shown[0]["kind"], "tier", "{shown}");
    assert_eq!(
        shown[0]["summary"], "change the tier of prv_a to enterprise (in force: community)",
        "{shown}"
    );
    let (code, decided, stderr) = approve(&db.url, "bob", &id);
    assert_eq!(code, 0, "{decided}{stderr}");
    assert_eq!(
        actors_of(&db, "provider.updated").await,
        vec!["operator:alice approved by operator:bob".to_owned()]
    );
    common::assert_events_match_schemas(&db.store().await).await;
}

/// A `settle operator keygen` killed after writing the key, before it appears under its
/// name, leaves no key file (never an empty or partial one that every later start would
/// refuse), and the next keygen makes the key.
#[tokio::test]
async fn a_keygen_killed_half_way_leaves_no_partial_key() {
    if !common::failpoints_or_skip("control::a_keygen_killed_half_way_leaves_no_partial_key") {
        return;
    }
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alice.json");
    let out = common::settle_command()
        .env(
            settle::failpoint::FAILPOINT_ENV,
            settle::operator_key::KEY_FILE_BEFORE_PUBLISH,
        )
        .args(["--database", &db.url, "operator", "keygen", "--out"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the failpoint aborts keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!path.exists(), "no key file after the crash");

    let (code, public, stderr) = run_cli(
        &db.url,
        &["operator", "keygen", "--out", path.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{stderr}");
    let key: Vec<u8> = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(key.len(), 64, "a whole key file");
    assert_eq!(
        public.trim(),
        bs58::encode(&key[32..]).into_string(),
        "the key file holds the key keygen printed"
    );
}
