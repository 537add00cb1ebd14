//! `POST /v1/usage` and the admin correction endpoints against the real server.

use crate::common::Tables;
use crate::http_support;

use serde_json::{Value, json};
use settle::auth::Scope;
use sqlx::Row;

use http_support::{assert_problem, spawn_app};

const NOW: &str = "2026-11-25T12:00:00Z";

fn event(id: &str, provider: &str, gpu: &str, start: &str, end: &str) -> Value {
    json!({"event_id": id, "provider_id": provider, "gpu_id": gpu, "rental_id": "rnt_1",
           "started_at": start, "ended_at": end})
}

fn codes(body: &Value) -> Vec<(String, Option<String>)> {
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap().to_owned(),
                r["code"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn s(status: &str, code: Option<&str>) -> (String, Option<String>) {
    (status.to_owned(), code.map(str::to_owned))
}

#[tokio::test]
async fn a_mixed_batch_gets_one_result_per_event() {
    let app = spawn_app(NOW).await;
    let (token, token_id) = app.token_with(Scope::Ingest, Some("prv_a"), None).await;
    let mut with_rate = event(
        "e5",
        "prv_a",
        "gpu_a1",
        "2026-11-24T13:00:00Z",
        "2026-11-24T14:00:00Z",
    );
    with_rate["rate_usdc_per_hour"] = json!("2.0");
    let mut unknown_field = event(
        "e9",
        "prv_a",
        "gpu_a1",
        "2026-11-24T15:00:00Z",
        "2026-11-24T16:00:00Z",
    );
    unknown_field["rate"] = json!("1");
    let batch = json!({"events": [
        event("e1", "prv_a", "gpu_a0", "2026-11-24T10:00:00Z", "2026-11-24T11:00:00Z"),
        {"event_id": "e2", "provider_id": "prv_a", "gpu_id": "gpu_a0", "started_at": 12, "ended_at": "2026-11-24T11:00:00Z"},
        42,
        event("e3", "prv_a", "gpu_b0", "2026-11-24T10:00:00Z", "2026-11-24T11:00:00Z"),
        event("e4", "prv_b", "gpu_b0", "2026-11-24T10:00:00Z", "2026-11-24T11:00:00Z"),
        with_rate,
        event("e6", "prv_a", "gpu_a1", "2026-11-24T10:00:00Z", "2026-11-24T12:00:00Z"),
        event("e1", "prv_a", "gpu_a0", "2026-11-24T11:00:00.000+01:00", "2026-11-24T11:00:00Z"),
        unknown_field,
    ]});
    let r = app.post(Some(&token), "/v1/usage", batch.to_string()).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        codes(&body),
        vec![
            s("accepted", None),
            s("rejected", Some("malformed_event")),
            s("rejected", Some("malformed_event")),
            s("rejected", Some("gpu_provider_mismatch")),
            s("rejected", Some("forbidden_provider")),
            s("rejected", Some("rate_not_allowed")),
            s("accepted", None),
            s("duplicate", None),
            s("rejected", Some("malformed_event")),
        ]
    );
    assert_eq!(
        (
            body["accepted"].clone(),
            body["duplicate"].clone(),
            body["rejected"].clone()
        ),
        (json!(2), json!(1), json!(6))
    );
    for (i, r) in body["results"].as_array().unwrap().iter().enumerate() {
        assert_eq!(r["index"], i);
    }
    assert_eq!(body["results"][1]["event_id"], "e2");
    assert_eq!(body["results"][2]["event_id"], Value::Null);
    assert!(
        body["results"][3]["message"]
            .as_str()
            .unwrap()
            .contains("gpu_b0")
    );

    // Across batches: the same content is a duplicate, other content under the same id a
    // conflict, an overlapping interval and a future one are rejected.
    let again = json!({"events": [
        event("e1", "prv_a", "gpu_a0", "2026-11-24T10:00:00Z", "2026-11-24T11:00:00Z"),
        event("e1", "prv_a", "gpu_a0", "2026-11-24T10:00:00Z", "2026-11-24T11:30:00Z"),
        event("e7", "prv_a", "gpu_a0", "2026-11-24T10:30:00Z", "2026-11-24T11:30:00Z"),
        event("e8", "prv_a", "gpu_a0", "2026-11-25T12:00:00Z", "2026-11-25T12:30:00Z"),
        event("e10", "prv_a", "gpu_a0", "2026-11-24T11:00:00Z", "2026-11-24T12:00:00Z"),
    ]});
    let body: Value = app
        .post(Some(&token), "/v1/usage", again.to_string())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        codes(&body),
        vec![
            s("duplicate", None),
            s("rejected", Some("conflict")),
            s("rejected", Some("overlapping_usage")),
            s("rejected", Some("in_future")),
            s("accepted", None),
        ]
    );

    // The actor on the booked events is the token.
    let actor: String = sqlx::query("SELECT actor FROM events WHERE idem_key = $1")
        .bind("usage:e1")
        .fetch_one(app.ledger.store.pool())
        .await
        .unwrap()
        .get(0);
    // The actor on the booked events names the token: `token:{name}#{token_id}`.
    let name: String = sqlx::query("SELECT name FROM api_tokens WHERE token_id = $1")
        .bind(&token_id)
        .fetch_one(app.ledger.store.pool())
        .await
        .unwrap()
        .get(0);
    assert!(name.starts_with("test-ingest-"), "{name}");
    assert_eq!(actor, format!("token:{name}#{token_id}"));

    // Booked exactly once: 2 h at 2.49 + 2 h at 1.8 = 8.58 gross, 20 % fee.
    let admin = app.token(Scope::Admin, None).await;
    let summary = app.get_json(&admin, "/v1/providers/prv_a/summary").await;
    assert_eq!(summary["week_to_date"]["gross_usdc"], "8.580000");
    assert_eq!(summary["week_to_date"]["fee_usdc"], "1.716000");
    assert_eq!(summary["week_to_date"]["net_usdc"], "6.864000");
    assert_eq!(summary["week_to_date"]["gpu_hours"], "4.000000");
    assert_eq!(summary["balances"]["available_usdc"], "6.864000");
}

#[tokio::test]
async fn metering_may_send_rates_for_any_gpu_and_other_scopes_may_not_send() {
    let app = spawn_app(NOW).await;
    let metering = app.token(Scope::Metering, None).await;
    let mut e = event(
        "m1",
        "prv_b",
        "gpu_b0",
        "2026-11-24T10:00:00Z",
        "2026-11-24T11:00:00Z",
    );
    // An agreed rate within the band around prv_b's price book (3 USDC/h: 1.5 to 6).
    e["rate_usdc_per_hour"] = json!("5.000000");
    let body: Value = app
        .post(
            Some(&metering),
            "/v1/usage",
            json!({"events": [e]}).to_string(),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(codes(&body), vec![s("accepted", None)]);
    let admin = app.token(Scope::Admin, None).await;
    let earnings = app
        .get_json(
            &admin,
            "/v1/providers/prv_b/earnings?from=2026-11-24&to=2026-11-25",
        )
        .await;
    assert_eq!(earnings["totals"]["gross_usdc"], "5.000000");

    let provider = app.token(Scope::Provider, Some("prv_b")).await;
    let batch = json!({"events": []}).to_string();
    assert_problem(
        app.post(Some(&provider), "/v1/usage", batch.clone()).await,
        403,
        "forbidden_scope",
    )
    .await;
    assert_problem(
        app.post(None, "/v1/usage", batch.clone()).await,
        401,
        "unauthenticated",
    )
    .await;
    assert_problem(
        app.post(Some("stl_tok_00.zz"), "/v1/usage", batch).await,
        401,
        "invalid_token",
    )
    .await;
}

#[tokio::test]
async fn oversized_and_unparseable_bodies_are_problems() {
    let app = spawn_app(NOW).await;
    let token = app.token(Scope::Ingest, Some("prv_a")).await;
    let events: Vec<Value> = (0..1001)
        .map(|i| {
            event(
                &format!("x{i}"),
                "prv_a",
                "gpu_a0",
                "2026-11-24T10:00:00Z",
                "2026-11-24T10:00:01Z",
            )
        })
        .collect();
    let r = app
        .post(
            Some(&token),
            "/v1/usage",
            json!({"events": events}).to_string(),
        )
        .await;
    assert_problem(r, 413, "too_many_events").await;
    // Nothing of the refused batch was booked.
    let n: i64 = sqlx::query("SELECT COUNT(*) FROM events WHERE event_type = 'usage.recorded'")
        .fetch_one(app.ledger.store.pool())
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    // Exactly 1000 events is a batch.
    let events: Vec<Value> = (0..1000)
        .map(|i| {
            let start = 1_795_514_400_000i64 + i * 1000; // 2026-11-24T10:00:00Z
            event(
                &format!("x{i}"),
                "prv_a",
                "gpu_a0",
                &settle::domain::time::format_ms(start),
                &settle::domain::time::format_ms(start + 1000),
            )
        })
        .collect();
    let body: Value = app
        .post(
            Some(&token),
            "/v1/usage",
            json!({"events": events}).to_string(),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["accepted"], 1000, "{}", body["results"][0]);

    let padding = "x".repeat(1024 * 1024 + 1);
    let r = app
        .post(
            Some(&token),
            "/v1/usage",
            json!({"events": [], "pad": padding}).to_string(),
        )
        .await;
    assert_problem(r, 413, "body_too_large").await;
    assert_problem(
        app.post(Some(&token), "/v1/usage", "not json").await,
        400,
        "malformed_json",
    )
    .await;
    assert_problem(
        app.post(Some(&token), "/v1/usage", r#"{"events": 5}"#)
            .await,
        400,
        "invalid_body",
    )
    .await;
    assert_problem(
        app.post(Some(&token), "/v1/usage", "[]").await,
        400,
        "invalid_body",
    )
    .await;
}

#[tokio::test]
async fn admin_corrections_and_import() {
    let app = spawn_app(NOW).await;
    let admin = app.token(Scope::Admin, None).await;
    let metering = app.token(Scope::Metering, None).await;
    http_support::usage(
        &app.ledger,
        "u1",
        "prv_a",
        "gpu_a0",
        "2026-11-24T10:00:00Z",
        "2026-11-24T11:00:00Z",
    )
    .await;
    http_support::usage(
        &app.ledger,
        "u2",
        "prv_a",
        "gpu_a0",
        "2026-11-24T11:00:00Z",
        "2026-11-24T12:00:00Z",
    )
    .await;

    let void = json!({"reason": "customer refund"}).to_string();
    assert_problem(
        app.post(Some(&metering), "/v1/admin/usage/u1/void", void.clone())
            .await,
        403,
        "forbidden_scope",
    )
    .await;
    let r: Value = app
        .post(Some(&admin), "/v1/admin/usage/u1/void", void.clone())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r, json!({"id": "u1", "status": "accepted"}));
    let r: Value = app
        .post(Some(&admin), "/v1/admin/usage/u1/void", void.clone())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["status"], "duplicate");
    assert_problem(
        app.post(Some(&admin), "/v1/admin/usage/nope/void", void.clone())
            .await,
        404,
        "unknown_event",
    )
    .await;
    assert_problem(
        app.post(Some(&admin), "/v1/admin/usage/u2/void", "{}")
            .await,
        400,
        "invalid_body",
    )
    .await;
    assert_problem(
        app.post(
            Some(&admin),
            "/v1/admin/usage/u2/void",
            r#"{"reason":"  "}"#,
        )
        .await,
        422,
        "invalid_text",
    )
    .await;

    let adj = json!({"adjustment_id": "adj-1", "provider_id": "prv_a", "amount_usdc": "-0.500000", "reason": "chargeback", "reference": "case-77"});
    let r: Value = app
        .post(Some(&admin), "/v1/admin/adjustments", adj.to_string())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r, json!({"id": "adj-1", "status": "accepted"}));
    let r: Value = app
        .post(Some(&admin), "/v1/admin/adjustments", adj.to_string())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["status"], "duplicate");
    let mut other = adj.clone();
    other["amount_usdc"] = json!("-0.6");
    assert_problem(
        app.post(Some(&admin), "/v1/admin/adjustments", other.to_string())
            .await,
        409,
        "conflict",
    )
    .await;
    let mut unknown = adj.clone();
    unknown["adjustment_id"] = json!("adj-2");
    unknown["provider_id"] = json!("prv_zz");
    assert_problem(
        app.post(Some(&admin), "/v1/admin/adjustments", unknown.to_string())
            .await,
        404,
        "unknown_provider",
    )
    .await;
    let mut float = adj.clone();
    float["adjustment_id"] = json!("adj-3");
    float["amount_usdc"] = json!(1.5);
    assert_problem(
        app.post(Some(&admin), "/v1/admin/adjustments", float.to_string())
            .await,
        400,
        "invalid_body",
    )
    .await;
    float["amount_usdc"] = json!("1.0000001");
    assert_problem(
        app.post(Some(&admin), "/v1/admin/adjustments", float.to_string())
            .await,
        422,
        "amount_precision",
    )
    .await;

    // u1 voided, u2 stands (1 h at 2.49: net 1.992), minus the 0.5 adjustment.
    let summary = app.get_json(&admin, "/v1/providers/prv_a/summary").await;
    assert_eq!(summary["week_to_date"]["gross_usdc"], "2.490000");
    assert_eq!(summary["balances"]["available_usdc"], "1.492000");

    let ndjson = [
        r#"{"type":"provider.register","provider_id":"prv_c","name":"Charlie","email":"c@c.test","tier":"enterprise","schedule":"weekly"}"#,
        r#"{"type":"gpu.register","gpu_id":"gpu_c0","provider_id":"prv_c","model":"L4-24GB"}"#,
        r#"{"type":"rate.set","provider_id":"prv_c","model":"L4-24GB","rate_usdc_per_hour":"0.5","effective_from":"2026-01-01T00:00:00Z"}"#,
        "",
        r#"{"type":"usage","event_id":"c1","provider_id":"prv_c","gpu_id":"gpu_c0","started_at":"2026-11-24T00:00:00Z","ended_at":"2026-11-24T02:00:00Z"}"#,
        r#"{"type":"usage","event_id":"c2","provider_id":"prv_c","gpu_id":"gpu_c0","started_at":"2026-11-24T01:00:00Z","ended_at":"2026-11-24T03:00:00Z"}"#,
        r#"{"type":"nonsense"}"#,
        r#"{"type":"gpu.register","gpu_id":"gpu_c0","provider_id":"prv_c","model":"L4-24GB"}"#,
    ]
    .join("\n");
    let r = app
        .client
        .post(app.url("/v1/admin/import"))
        .bearer_auth(&admin)
        .header("content-type", "application/x-ndjson")
        .body(ndjson.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        crate::ingest::line_answers(&body),
        vec![
            (1, "accepted", None),
            (2, "accepted", None),
            (3, "accepted", None),
            (5, "accepted", None),
            (6, "rejected", Some("overlapping_usage")),
            (7, "rejected", Some("unknown_type")),
            (8, "duplicate", None),
        ]
    );
    assert_eq!(
        body["totals"],
        json!({"accepted": 4, "duplicate": 1, "rejected": 2})
    );
    assert_problem(
        app.post(Some(&metering), "/v1/admin/import", ndjson).await,
        403,
        "forbidden_scope",
    )
    .await;
    // Enterprise fee 15 %: 2 h at 0.5 = 1.0 gross, 0.85 net.
    let summary = app.get_json(&admin, "/v1/providers/prv_c/summary").await;
    assert_eq!(summary["week_to_date"]["net_usdc"], "0.850000");
}

/// Concurrent senders through the real server (whose batches the group commit books
/// together while others book): every batch is answered with its own events in its own
/// order, each event is booked once, and a key two batches send is accepted for one of them
/// and `duplicate` for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_are_answered_with_their_own_events_and_booked_once() {
    const SENDERS: usize = 24;
    const PER_BATCH: usize = 10;
    let app = std::sync::Arc::new(spawn_app(NOW).await);
    let token = app.token(Scope::Metering, None).await;
    // Sender n books ten-minute slices n*10.. of gpu_a0 or gpu_b0, and re-sends the first
    // slice of the sender two before it (same GPU).
    let slice = |n: usize, k: usize| {
        let (p, g) = [("prv_a", "gpu_a0"), ("prv_b", "gpu_b0")][n % 2];
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-24T00:00:00Z").unwrap()
            + chrono::Duration::minutes(((n / 2) * PER_BATCH + k) as i64 * 10);
        let end = at + chrono::Duration::minutes(10);
        event(
            &format!("c{n}-{k}"),
            p,
            g,
            &at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            &end.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
    };
    let mut tasks = Vec::new();
    for n in 0..SENDERS {
        let mut events: Vec<Value> = (0..PER_BATCH - 1).map(|k| slice(n, k)).collect();
        events.push(slice((n + SENDERS - 2) % SENDERS, 0));
        let (app, token) = (app.clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            let r = app
                .post(
                    Some(&token),
                    "/v1/usage",
                    json!({ "events": events }).to_string(),
                )
                .await;
            assert_eq!(r.status(), 200);
            let body: Value = r.json().await.unwrap();
            (events, body)
        }));
    }
    let mut accepted = Vec::new();
    let mut duplicates = 0;
    for task in tasks {
        let (events, body) = task.await.unwrap();
        let results = body["results"].as_array().unwrap();
        assert_eq!(results.len(), events.len());
        for (i, (sent, result)) in events.iter().zip(results).enumerate() {
            assert_eq!(result["index"], json!(i));
            assert_eq!(result["event_id"], sent["event_id"], "its own event");
            match result["status"].as_str().unwrap() {
                "accepted" => accepted.push(sent["event_id"].as_str().unwrap().to_owned()),
                "duplicate" => duplicates += 1,
                other => panic!("{other}: {result}"),
            }
        }
    }
    accepted.sort();
    let before = accepted.len();
    accepted.dedup();
    assert_eq!(before, accepted.len(), "no event accepted twice");
    assert_eq!(accepted.len(), SENDERS * (PER_BATCH - 1));
    assert_eq!(duplicates, SENDERS);
    let booked: i64 =
        sqlx::query("SELECT COUNT(*) FROM events WHERE event_type = 'usage.recorded'")
            .fetch_one(app.ledger.store.pool())
            .await
            .unwrap()
            .get(0);
    assert_eq!(booked as usize, accepted.len());
}

/// Every step of the booking's seconds counters on `/metrics`, keyed `family{step}`.
fn booking_step_seconds() -> std::collections::BTreeMap<String, String> {
    settle::metrics::global()
        .render()
        .lines()
        .filter(|l| {
            l.starts_with("settle_write_tx_seconds_total{")
                || l.starts_with("settle_usage_booking_seconds_total{")
        })
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').unwrap();
            (key.to_owned(), value.to_owned())
        })
        .collect()
}

/// Where the time of `POST /v1/usage` goes is on `/metrics`: a booked batch adds to each step
/// of its transaction (begin, heads, write, commit) and of the booking around it (validate,
/// read, decide), in seconds, whether it holds one provider's stream or several.
#[tokio::test]
async fn a_booked_batch_adds_to_the_seconds_of_every_booking_step() {
    let app = spawn_app(NOW).await;
    let token = app.token(Scope::Metering, None).await;
    let steps: Vec<String> = ["begin", "heads", "write", "commit"]
        .map(|s| format!("settle_write_tx_seconds_total{{step=\"{s}\"}}"))
        .into_iter()
        .chain(
            ["validate", "read", "decide"]
                .map(|s| format!("settle_usage_booking_seconds_total{{step=\"{s}\"}}")),
        )
        .collect();
    let seconds = |all: &std::collections::BTreeMap<String, String>, step: &str| -> i64 {
        let Some(value) = all.get(step) else {
            return -1;
        };
        let (s, us) = value.split_once('.').expect("seconds with a fraction");
        assert_eq!(us.len(), 6, "{step} {value}: microseconds");
        s.parse::<i64>().unwrap() * 1_000_000 + us.parse::<i64>().unwrap()
    };
    let one = json!({"events": [
        event("m1", "prv_a", "gpu_a0", "2026-11-24T10:00:00Z", "2026-11-24T11:00:00Z"),
    ]});
    let two = json!({"events": [
        event("m2", "prv_a", "gpu_a0", "2026-11-24T11:00:00Z", "2026-11-24T12:00:00Z"),
        event("m3", "prv_b", "gpu_b0", "2026-11-24T11:00:00Z", "2026-11-24T12:00:00Z"),
    ]});
    for batch in [one, two] {
        let before = booking_step_seconds();
        let r = app.post(Some(&token), "/v1/usage", batch.to_string()).await;
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["rejected"], json!(0), "{body}");
        let after = booking_step_seconds();
        for step in &steps {
            assert!(
                seconds(&after, step) > seconds(&before, step),
                "{step}: before {:?}, after {:?}",
                before.get(step),
                after.get(step)
            );
        }
    }
}
