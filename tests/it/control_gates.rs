//! SPEC §9's control, tried as the bypasses an operator alone would try: the environment
//! and the configuration file, rate minting, a walk of the FX rate, a large void, a token
//! of scope admin, a clock mode rewritten by SQL, an approval racing a rejection, and a
//! forged event that a payout run must not pay. Each test was first run against the code
//! before control was provable (where it applies) and failed there.

use crate::common::Tables;
use serde_json::{Value, json};
use settle::config::{Config, Enforce};
use settle::control::{self, Submitted};
use settle::ledger::{Actor, Ledger, LedgerError};
use settle::wire::import::parse_line;

use super::common::{self, TestDb, run_cli};
use super::control::{
    adjustment, approve, as_operator, forge_adjustment, import, key_file, key_of, ndjson, payable,
    payouts_of, production, provider, replay_with_operators, verify,
};

/// `settle ARGS…` with `env` set, as a process whose environment an operator controls.
fn with_env(url: &str, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut cmd = common::settle_command();
    cmd.arg("--database").arg(url).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The value `name` of `settle control policy`.
fn policy_value(url: &str, name: &str) -> String {
    let (code, out, err) = run_cli(url, &["--format", "json", "control", "policy"]);
    assert_eq!(code, 0, "{err}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {rows}"))["value"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn status_of(report: &Value, line: usize) -> &str {
    report["lines"][line]["status"].as_str().unwrap_or("?")
}

#[tokio::test]
async fn the_environment_and_the_config_file_switch_nothing_off_on_a_real_clock_ledger() {
    let db = production().await;
    let alice = key_file(&db.url, "alice").unwrap();
    let (_dir, file) = ndjson(&[adjustment("adj-env", "prv_a", "5000.000000")]);
    // Before: SETTLE_CONTROL__ENFORCE=never booked this at once. Now the ledger's policy
    // decides, and the process says its configuration is not used.
    let env = [
        ("SETTLE_CONTROL__ENFORCE", "never"),
        (
            "SETTLE_CONTROL__ADJUSTMENT_APPROVAL_MICRO_USDC",
            "999999999999999",
        ),
        ("RUST_LOG", "warn"),
    ];
    let args = [
        "--actor",
        "alice",
        "--operator-key",
        alice.as_str(),
        "--format",
        "json",
        "import",
        file.as_str(),
    ];
    let (code, out, err) = with_env(&db.url, &env, &args);
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status_of(&report, 0), "pending", "{report}");
    assert!(
        err.contains("differs from the ledger's control policy"),
        "the process warns: {err}"
    );
    assert_eq!(payable(&db.url, "prv_a"), 0);

    // The same from a configuration file.
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("settle.toml");
    std::fs::write(
        &toml,
        "[control]\nenforce = \"never\"\nadjustment_approval_micro_usdc = 999999999999999\n",
    )
    .unwrap();
    let (_d, file) = ndjson(&[adjustment("adj-toml", "prv_a", "5000.000000")]);
    let toml = toml.to_str().unwrap();
    let (code, out, err) = run_cli(
        &db.url,
        &[
            "--config",
            toml,
            "--actor",
            "alice",
            "--operator-key",
            &alice,
            "--format",
            "json",
            "import",
            &file,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status_of(&report, 0), "pending", "{report}");
    assert_eq!(payable(&db.url, "prv_a"), 0);

    // The policy itself: never refused on a real-clock ledger, a change waits for bob.
    assert_eq!(policy_value(&db.url, "enforce"), "real_clock");
    assert_eq!(policy_value(&db.url, "version"), "1");
    let set = |value: &str| {
        run_cli(
            &db.url,
            &[
                "--actor",
                "alice",
                "--operator-key",
                &alice,
                "control",
                "set-policy",
                value,
            ],
        )
    };
    let (code, _, err) = set("enforce=never");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("control_required"), "{err}");
    let (code, out, err) = set("cooling_off_hours=0");
    assert_eq!(code, 0, "{err}");
    let id = out
        .trim()
        .trim_start_matches("pending_approval ")
        .to_owned();
    assert!(id.starts_with("apr_"), "{out}");
    assert_eq!(policy_value(&db.url, "cooling_off_hours"), "72");
    let (_, shown, _) = as_operator(&db.url, "x", None, &["approvals", "show", &id]);
    assert_eq!(
        shown[0]["summary"], "control policy version 2: cooling_off_hours 0 (in force: 72)",
        "the approver sees the value in force beside the new one: {shown}"
    );
    let (code, _, err) = approve(&db.url, "alice", &id);
    assert_eq!(code, 2, "{err}");
    let (code, decided, err) = approve(&db.url, "bob", &id);
    assert_eq!(code, 0, "{decided}{err}");
    assert_eq!(policy_value(&db.url, "cooling_off_hours"), "0");
    assert_eq!(policy_value(&db.url, "version"), "2");
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");
    common::assert_events_match_schemas(&db.store().await).await;
}

#[tokio::test]
async fn a_run_decides_under_the_ledgers_policy_and_records_its_version() {
    let db = TestDb::new().await;
    let t0 = "2026-11-02T09:00:00Z";
    let wallet = "4Nd1mYwTjT7JvAPP2Pb5ZsXWV8Xw6YwbVsyrAjc5d7Hk";
    let mut register = provider("prv_w");
    register["payout_method"] = json!({"kind": "solana", "wallet": wallet});
    // 150,000 USDC: above the default payout limit of 100,000, so the run holds it.
    let (code, report, err) = import(
        &db.url,
        "alice",
        Some(t0),
        &[register, adjustment("adj-w", "prv_w", "150000.000000")],
    );
    assert_eq!(code, 0, "{report}{err}");
    // A process that raises the limit and drops the cooling-off for itself changes nothing.
    let env = [
        ("SETTLE_RUNS__PAYOUT_LIMIT_MICRO_USDC", "1000000000000000"),
        ("SETTLE_RUNS__COOLING_OFF_HOURS", "0"),
    ];
    let (code, out, err) = with_env(
        &db.url,
        &env,
        &[
            "--now",
            "2026-11-09T00:05:00Z",
            "run",
            "weekly",
            "--date",
            "2026-11-09",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let payouts = payouts_of(&db.url, "prv_w");
    assert_eq!(payouts[0]["status"], "held", "{payouts}");
    let store = db.store().await;
    let completed = store
        .stream_events_of_types("platform", &["payout_run.completed"])
        .await
        .unwrap();
    let payload: Value = serde_json::from_str(&completed[0].payload).unwrap();
    assert_eq!(payload["policy_version"], 1, "{payload}");
}

#[tokio::test]
async fn a_rate_far_from_the_price_book_waits_for_a_second_operator() {
    let db = production().await;
    let rate = |provider: &str, usdc: &str, from: &str| json!({"type": "rate.set", "provider_id": provider, "model": "H100-80GB", "rate_usdc_per_hour": usdc, "effective_from": from});
    // Nobody prices the model yet: nothing bounds the first rate.
    let (code, report, err) = import(
        &db.url,
        "alice",
        None,
        &[rate("prv_a", "2.49", "2026-01-01T00:00:00Z")],
    );
    assert_eq!(code, 0, "{report}{err}");
    assert_eq!(status_of(&report, 0), "pending", "{report}");
    let id = report["lines"][0]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, _, err) = approve(&db.url, "bob", &id);
    assert_eq!(code, 0, "{err}");
    // 10,000 USDC/h: minted earnings. Waits. 3.00 is within 50–200 % of 2.49: at once.
    let (_, report, _) = import(
        &db.url,
        "alice",
        None,
        &[
            rate("prv_a", "10000", "2026-02-01T00:00:00Z"),
            rate("prv_a", "3.00", "2026-03-01T00:00:00Z"),
            provider("prv_b"),
            // prv_b's first rate: judged against the other providers' median (2.49).
            rate("prv_b", "2.60", "2026-01-01T00:00:00Z"),
            rate("prv_b", "1.00", "2026-02-01T00:00:00Z"),
        ],
    );
    let statuses: Vec<&str> = (0..5).map(|i| status_of(&report, i)).collect();
    assert_eq!(
        statuses,
        ["pending", "accepted", "accepted", "accepted", "pending"],
        "{report}"
    );
    let id = report["lines"][0]["approval_id"].as_str().unwrap();
    let (_, shown, _) = as_operator(&db.url, "x", None, &["approvals", "show", id]);
    let summary = shown[0]["summary"].as_str().unwrap();
    assert!(
        summary.contains("outside 50–200 % of the rate in force (2.490000 USDC/h)"),
        "{summary}"
    );
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");
}

#[tokio::test]
async fn an_fx_rate_walked_in_small_steps_waits_once_it_has_gone_far() {
    let db = production().await;
    let fx = |rate: &str| json!({"type": "fx.rate_set", "eur_per_usd": rate});
    let mut statuses = Vec::new();
    // Each step is within 10 % of the one before; the walk is not.
    for rate in ["0.92", "1.0", "1.09", "1.19"] {
        let (code, report, err) = import(&db.url, "alice", None, &[fx(rate)]);
        assert_eq!(code, 0, "{report}{err}");
        statuses.push(status_of(&report, 0).to_owned());
        if statuses.last().unwrap() == "pending" {
            break;
        }
    }
    assert_eq!(statuses, ["accepted", "accepted", "pending"]);
    let store = db.store().await;
    let latest =
        settle::ledger::runs::latest_fx_rate(&mut store.acquire().await.unwrap(), i64::MAX)
            .await
            .unwrap()
            .map(|(_, r)| r.to_string());
    assert_eq!(latest.as_deref(), Some("1"));
}

#[tokio::test]
async fn a_large_void_waits_and_verify_ties_it_to_its_approval() {
    let db = production().await;
    let yesterday = chrono::Utc::now() - chrono::Duration::days(1);
    let at = |h: i64| (yesterday + chrono::Duration::hours(h)).to_rfc3339();
    let (code, report, err) = import(
        &db.url,
        "alice",
        None,
        &[
            json!({"type": "gpu.register", "gpu_id": "g1", "provider_id": "prv_a", "model": "H100-80GB"}),
            json!({"type": "rate.set", "provider_id": "prv_a", "model": "H100-80GB", "rate_usdc_per_hour": "100", "effective_from": "2026-01-01T00:00:00Z"}),
        ],
    );
    assert_eq!(code, 0, "{report}{err}");
    let id = report["lines"][1]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, _, err) = approve(&db.url, "bob", &id);
    assert_eq!(code, 0, "{err}");
    // 12 hours at 100 USDC/h: 1,200 USDC gross, above the void threshold of 1,000.
    let usage = json!({"type": "usage", "event_id": "u-big", "provider_id": "prv_a", "gpu_id": "g1", "started_at": at(0), "ended_at": at(12)});
    let small = json!({"type": "usage", "event_id": "u-small", "provider_id": "prv_a", "gpu_id": "g1", "started_at": at(12), "ended_at": at(13)});
    let (code, report, err) = import(&db.url, "alice", None, &[usage, small]);
    assert_eq!(code, 0, "{report}{err}");
    let before = payable(&db.url, "prv_a");
    let void =
        |id: &str| json!({"type": "usage.void", "event_id": id, "reason": "customer refund"});
    let (_, report, _) = import(&db.url, "alice", None, &[void("u-small"), void("u-big")]);
    assert_eq!(status_of(&report, 0), "accepted", "{report}");
    assert_eq!(status_of(&report, 1), "pending", "{report}");
    let after_small = payable(&db.url, "prv_a");
    assert!(after_small < before);
    let id = report["lines"][1]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, decided, err) = approve(&db.url, "bob", &id);
    assert_eq!(code, 0, "{decided}{err}");
    assert!(payable(&db.url, "prv_a") < after_small);
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");
}

#[tokio::test]
async fn an_admin_token_works_only_once_a_second_operator_approves_it() {
    let db = production().await;
    let alice = key_file(&db.url, "alice").unwrap();
    let create = |name: &str, key: Option<&str>| {
        let mut args = vec!["--actor", "alice", "--format", "json"];
        if let Some(k) = key {
            args.extend(["--operator-key", k]);
        }
        args.extend(["token", "create", "--scope", "admin", "--name", name]);
        run_cli(&db.url, &args)
    };
    // Unsigned: refused, and no token is made.
    let (code, _, err) = create("ops", None);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("operator_signature_required"), "{err}");
    let (code, out, err) = create("ops", Some(&alice));
    assert_eq!(code, 0, "{err}");
    let created: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(created["status"], "pending_approval", "{created}");
    let token = created["token"].as_str().unwrap().to_owned();
    let id = created["approval_id"].as_str().unwrap().to_owned();
    let store = db.store().await;
    let now = chrono::Utc::now().timestamp_millis();
    assert!(matches!(
        settle::auth::verify(&store, &token, now).await,
        Err(settle::auth::AuthError::PendingApproval)
    ));
    let (code, _, err) = approve(&db.url, "alice", &id);
    assert_eq!(code, 2, "{err}");
    assert!(settle::auth::verify(&store, &token, now).await.is_err());
    let (code, _, err) = approve(&db.url, "bob", &id);
    assert_eq!(code, 0, "{err}");
    let principal = settle::auth::verify(&store, &token, now).await.unwrap();
    assert_eq!(principal.name, "ops");
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");
}

#[tokio::test]
async fn the_clock_mode_rewritten_by_sql_turns_no_real_clock_ledger_into_a_replay() {
    let db = production().await;
    let alice = key_file(&db.url, "alice").unwrap();
    let week_ahead = (chrono::Utc::now() + chrono::Duration::days(7)).to_rfc3339();
    let (_dir, file) = ndjson(&[provider("prv_late")]);
    let try_ahead = || {
        run_cli(
            &db.url,
            &[
                "--now",
                &week_ahead,
                "--actor",
                "alice",
                "--operator-key",
                &alice,
                "import",
                &file,
            ],
        )
    };
    // The table an earlier release kept the mode in: changing it changes nothing. (The
    // writer has the owner's rights: it rewrites the chain below.)
    let store = db.owner_store().await;
    sqlx::query(
        "INSERT INTO ledger_settings (name, value, set_at_ms) VALUES ('clock', 'simulated', 0) \
         ON CONFLICT (name) DO UPDATE SET value = 'simulated'",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let (code, _, err) = try_ahead();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("now_off_clock"), "{err}");
    // The booked mode itself, rewritten with its hash recomputed: refused to open at all.
    let events = store.stream_events("platform", 0, 10).await.unwrap();
    let mut clock = events
        .iter()
        .find(|e| e.event_type == "ledger.clock_set")
        .unwrap()
        .clone();
    clock.payload = r#"{"mode":"simulated"}"#.to_owned();
    // A writer with the database's owner rights lifts the append-only guard first.
    let guards: &[&str] = if db.is_postgres() {
        &["DROP TRIGGER events_refuse_update_delete ON events"]
    } else {
        &["DROP TRIGGER events_refuse_update"]
    };
    for guard in guards {
        sqlx::query(guard).execute(store.pool()).await.unwrap();
    }
    clock.hash =
        settle::store::event_hash(&clock.prev_hash, &settle::store::canonical_bytes(&clock))
            .to_vec();
    sqlx::query("UPDATE events SET payload = $1, hash = $2 WHERE stream = 'platform' AND seq = $3")
        .bind(&clock.payload)
        .bind(&clock.hash)
        .bind(clock.seq)
        .execute(store.pool())
        .await
        .unwrap();
    store.close().await;
    let (code, _, err) = try_ahead();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("clock mode"), "{err}");
    let (code, _, err) = run_cli(&db.url, &["balance"]);
    assert_ne!(code, 0, "{err}");
}

/// Approves and rejects one request at once, `ROUNDS` times: each request is decided once,
/// and its adjustment is booked exactly when the approval won.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approval_racing_a_rejection_decides_once() {
    const ROUNDS: usize = 24;
    let db = TestDb::new().await;
    let (ledger, _clock) = db.ledger_at("2026-11-02T09:00:00Z").await;
    ledger.store.migrate().await.unwrap();
    let mut policy = Config::default().seed_policy();
    policy.enforce = Enforce::Always;
    ledger.policy_or_seed(&policy, 0).await.unwrap();
    let config = Config::default().control;
    let submit = |line: Value| {
        let (ledger, config) = (ledger.clone(), config.clone());
        async move {
            let command = parse_line(&line.to_string()).unwrap();
            control::submit(&ledger, &config, &command, &Actor::operator("alice"), None).await
        }
    };
    submit(provider("prv_r")).await.unwrap();
    let runs = settle::config::RunConfig::default();
    let (mut approved, mut rejected) = (0, 0);
    for round in 0..ROUNDS {
        let line = adjustment(&format!("adj-race-{round}"), "prv_r", "2000.000000");
        let Submitted::Pending(row) = submit(line).await.unwrap() else {
            panic!("round {round}: the adjustment did not wait");
        };
        let id = row.approval_id.clone();
        let before = balance(&ledger).await;
        let (bob, carol) = (Actor::operator("bob"), Actor::operator("carol"));
        let (a, r) = tokio::join!(
            control::approve(&ledger, &runs, &id, &bob, None),
            control::reject_request(&ledger, &id, "no", &carol, None),
        );
        let status = ledger.approval(&id).await.unwrap().status;
        let moved = balance(&ledger).await - before;
        match (a.is_ok(), r.is_ok()) {
            (true, false) => {
                approved += 1;
                assert_eq!((status.as_str(), moved), ("approved", 2_000_000_000));
            }
            (false, true) => {
                rejected += 1;
                assert_eq!((status.as_str(), moved), ("rejected", 0));
                assert!(
                    matches!(a, Err(LedgerError::Rejected(ref e)) if e.code == "approval_decided")
                );
            }
            other => panic!("round {round}: both or neither decided: {other:?}"),
        }
        let decisions = ledger
            .store
            .stream_events_of_types("platform", &["approval.decided"])
            .await
            .unwrap()
            .iter()
            .filter(|e| e.payload.contains(&id))
            .count();
        assert_eq!(decisions, 1, "round {round}");
    }
    eprintln!("{approved} approved, {rejected} rejected of {ROUNDS}");
    assert_eq!(approved + rejected, ROUNDS);
}

async fn balance(ledger: &Ledger) -> i64 {
    settle::store::read::provider_balances(&ledger.store, "prv_r")
        .await
        .unwrap()
        .payable_micro_usdc
}

/// A well-hashed adjustment a database writer inserts on an enforced ledger with
/// operators: `verify` names it, and the next run holds its provider (`control_unproven`)
/// while paying the others.
#[tokio::test]
async fn a_forged_adjustment_pays_nobody_the_next_run_holds_its_provider() {
    let t0 = "2026-11-02T09:00:00Z";
    let (db, keys, config) = replay_with_operators(t0).await;
    let (alice, bob) = (key_of(&keys, "alice"), key_of(&keys, "bob"));
    let wallet = "4Nd1mYwTjT7JvAPP2Pb5ZsXWV8Xw6YwbVsyrAjc5d7Hk";
    let send = |key: &str, actor: &str, args: &[&str]| {
        let mut all = vec![
            "--config",
            config.as_str(),
            "--now",
            t0,
            "--actor",
            actor,
            "--operator-key",
            key,
            "--format",
            "json",
        ];
        all.extend_from_slice(args);
        let (code, out, err) = run_cli(&db.url, &all);
        assert_eq!(code, 0, "{out}{err}");
        serde_json::from_str::<Value>(&out).unwrap_or(Value::Null)
    };
    for p in ["prv_ok", "prv_forged"] {
        let mut register = provider(p);
        register["payout_method"] = json!({"kind": "solana", "wallet": wallet});
        let (_dir, file) = ndjson(&[register]);
        let report = send(&alice, "alice", &["import", &file]);
        assert_eq!(status_of(&report, 0), "pending", "{report}");
        let id = report["lines"][0]["approval_id"]
            .as_str()
            .unwrap()
            .to_owned();
        send(&bob, "bob", &["approvals", "approve", &id]);
        let (_dir, file) = ndjson(&[adjustment(&format!("adj-{p}"), p, "50.000000")]);
        let report = send(&alice, "alice", &["import", &file]);
        assert_eq!(status_of(&report, 0), "accepted", "{report}");
    }
    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");

    forge_adjustment(&db, "prv_forged", "adj-forged", None).await;
    let (code, v) = verify(&db.url);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "unapproved_gated_event" && p["stream"] == "provider:prv_forged"),
        "{v}"
    );

    let (code, out, err) = run_cli(
        &db.url,
        &[
            "--config",
            &config,
            "--now",
            "2026-11-09T00:05:00Z",
            "run",
            "weekly",
            "--date",
            "2026-11-09",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let ok = payouts_of(&db.url, "prv_ok");
    assert_eq!(ok[0]["status"], "created", "{ok}");
    assert_eq!(ok[0]["amount_usdc"], "50.000000", "{ok}");
    let forged = payouts_of(&db.url, "prv_forged");
    assert_eq!(forged[0]["status"], "held", "{forged}");
    assert_eq!(forged[0]["hold_reason"], "control_unproven", "{forged}");
}

/// A ledger of an earlier release (its clock mode in `ledger_settings`, no policy, gated
/// events booked before control was provable) upgrades with `settle migrate`, gets its
/// operators with `settle operator bootstrap`, and verifies: what was booked before the
/// first operator is listed apart, not failed on; what comes after is controlled.
#[tokio::test]
async fn a_ledger_of_an_earlier_release_upgrades_and_names_what_came_before_control() {
    let db = TestDb::new().await;
    let now = chrono::Utc::now().to_rfc3339();
    let (ledger, _clock) = db.ledger_at(&now).await;
    ledger.store.migrate().await.unwrap();
    sqlx::query("INSERT INTO ledger_settings (name, value, set_at_ms) VALUES ('clock', 'real', 0)")
        .execute(ledger.store.pool())
        .await
        .unwrap();
    let wallet = "4Nd1mYwTjT7JvAPP2Pb5ZsXWV8Xw6YwbVsyrAjc5d7Hk";
    let mut register = provider("prv_old");
    register["payout_method"] = json!({"kind": "solana", "wallet": wallet});
    for line in [register, adjustment("adj-old", "prv_old", "5000.000000")] {
        let command = parse_line(&line.to_string()).unwrap();
        settle::wire::import::apply(&ledger, &command, &Actor::operator("legacy"))
            .await
            .unwrap();
    }
    ledger.store.close().await;

    let (code, out, err) = run_cli(&db.url, &["migrate"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("clock: real"), "{out}");
    let store = db.store().await;
    assert!(store.clock_mode_booked().await.unwrap());
    store.close().await;
    assert_eq!(policy_value(&db.url, "version"), "1");

    let keys = tempfile::tempdir().unwrap();
    let mut bootstrap = vec!["operator".to_owned(), "bootstrap".to_owned()];
    for name in ["alice", "bob"] {
        let path = key_of(&keys, name);
        let (code, public, err) = run_cli(&db.url, &["operator", "keygen", "--out", &path]);
        assert_eq!(code, 0, "{err}");
        bootstrap.extend(["--operator".to_owned(), format!("{name}={}", public.trim())]);
    }
    let args: Vec<&str> = bootstrap.iter().map(String::as_str).collect();
    let (code, out, err) = run_cli(&db.url, &args);
    assert_eq!(code, 0, "{out}{err}");

    let (code, v) = verify(&db.url);
    assert_eq!(code, 0, "{v}");
    let before: Vec<&str> = v["before_control"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|b| b["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(before, ["provider.registered", "adjustment.posted"], "{v}");
    let (code, table, _) = run_cli(&db.url, &["verify"]);
    assert_eq!(code, 0);
    assert!(table.contains("before control: 2 gated events"), "{table}");

    // From here on the same adjustment waits for a second operator.
    let alice = key_of(&keys, "alice");
    let (_dir, file) = ndjson(&[adjustment("adj-new", "prv_old", "5000.000000")]);
    let (code, report, err) = as_operator(&db.url, "alice", Some(&alice), &["import", &file]);
    assert_eq!(code, 0, "{report}{err}");
    assert_eq!(status_of(&report, 0), "pending", "{report}");
    assert_eq!(payable(&db.url, "prv_old"), 5_000_000_000);
}
