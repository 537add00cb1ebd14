//! The provider dashboard: summary, earnings by range and grouping, GPUs, payouts, CSV,
//! pagination and the OpenAPI document, against the real server.

use crate::common;
use crate::http_support;

use serde_json::{Value, json};
use settle::auth::Scope;
use settle::config::HttpConfig;
use settle::domain::event::*;
use settle::ledger::Actor;
use settle::store::NewEvent;

use http_support::{TestApp, assert_problem, spawn_app, spawn_app_with, usage};

const NOW: &str = "2026-11-25T12:00:00Z";

/// prv_a: H100 (gpu_a0) at 2.49, A100 (gpu_a1) at 1.8; 20 % fee.
async fn book_history(app: &TestApp) {
    let l = &app.ledger;
    // Crosses midnight: 1 h on 11-20, 1 h on 11-21.
    usage(
        l,
        "k1",
        "prv_a",
        "gpu_a0",
        "2026-11-20T23:00:00Z",
        "2026-11-21T01:00:00Z",
    )
    .await;
    usage(
        l,
        "k2",
        "prv_a",
        "gpu_a1",
        "2026-11-21T10:00:00Z",
        "2026-11-21T12:00:00Z",
    )
    .await;
    usage(
        l,
        "k3",
        "prv_a",
        "gpu_a0",
        "2026-11-23T00:00:00Z",
        "2026-11-23T03:00:00Z",
    )
    .await;
    usage(
        l,
        "k4",
        "prv_a",
        "gpu_a0",
        "2026-11-02T05:00:00Z",
        "2026-11-02T06:00:00Z",
    )
    .await;
    // Crosses the month: 2 h on 10-31, 2 h on 11-01.
    usage(
        l,
        "k5",
        "prv_a",
        "gpu_a1",
        "2026-10-31T22:00:00Z",
        "2026-11-01T02:00:00Z",
    )
    .await;
    usage(
        l,
        "b1",
        "prv_b",
        "gpu_b0",
        "2026-11-24T10:00:00Z",
        "2026-11-24T11:00:00Z",
    )
    .await;
}

fn rows(body: &Value) -> Vec<(String, String)> {
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["key"].as_str().unwrap().to_owned(),
                i["gross_usdc"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn earnings_by_each_grouping() {
    let app = spawn_app(NOW).await;
    book_history(&app).await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    let q = |by: &str| {
        format!("/v1/providers/prv_a/earnings?from=2026-10-01&to=2026-12-01&group_by={by}")
    };

    let day = app.get_json(&token, &q("day")).await;
    assert_eq!(
        rows(&day),
        kv(&[
            ("2026-10-31", "3.600000"),
            ("2026-11-01", "3.600000"),
            ("2026-11-02", "2.490000"),
            ("2026-11-20", "2.490000"),
            ("2026-11-21", "6.090000"),
            ("2026-11-23", "7.470000"),
        ])
    );
    assert_eq!(day["group_by"], "day");
    assert_eq!(day["from"], "2026-10-01T00:00:00.000Z");
    assert_eq!(day["to"], "2026-12-01T00:00:00.000Z");
    assert_eq!(day["next_cursor"], Value::Null);
    assert_eq!(
        day["totals"],
        json!({"gross_usdc": "25.740000", "fee_usdc": "5.148000", "net_usdc": "20.592000",
               "gpu_hours": "12.000000", "usage_ms": 43_200_000})
    );
    let d21 = &day["items"][4];
    assert_eq!(d21["fee_usdc"], "1.218000");
    assert_eq!(d21["net_usdc"], "4.872000");
    assert_eq!(d21["gpu_hours"], "3.000000");
    assert_eq!(d21["from"], "2026-11-21T00:00:00.000Z");
    assert_eq!(d21["to"], "2026-11-22T00:00:00.000Z");
    assert_eq!(d21["model"], Value::Null);

    let week = app.get_json(&token, &q("week")).await;
    assert_eq!(
        rows(&week),
        kv(&[
            ("2026-10-26", "7.200000"),
            ("2026-11-02", "2.490000"),
            ("2026-11-16", "8.580000"),
            ("2026-11-23", "7.470000"),
        ])
    );
    assert_eq!(week["items"][0]["from"], "2026-10-26T00:00:00.000Z");
    assert_eq!(week["items"][0]["to"], "2026-11-02T00:00:00.000Z");
    // The last week is clipped to the range.
    assert_eq!(week["items"][3]["to"], "2026-11-30T00:00:00.000Z");

    let month = app.get_json(&token, &q("month")).await;
    assert_eq!(
        rows(&month),
        kv(&[("2026-10", "3.600000"), ("2026-11", "22.140000")])
    );
    assert_eq!(month["items"][1]["gpu_hours"], "10.000000");

    let gpu = app.get_json(&token, &q("gpu")).await;
    assert_eq!(
        rows(&gpu),
        kv(&[("gpu_a0", "14.940000"), ("gpu_a1", "10.800000")])
    );
    assert_eq!(gpu["items"][0]["model"], "H100-80GB");
    assert_eq!(gpu["items"][1]["model"], "A100-80GB");
    assert_eq!(gpu["items"][0]["from"], Value::Null);

    let model = app.get_json(&token, &q("model")).await;
    assert_eq!(
        rows(&model),
        kv(&[("A100-80GB", "10.800000"), ("H100-80GB", "14.940000")])
    );
    for body in [&week, &month, &gpu, &model] {
        assert_eq!(body["totals"], day["totals"]);
    }

    let bad = app
        .get(Some(&token), "/v1/providers/prv_a/earnings?group_by=year")
        .await;
    assert_problem(bad, 400, "invalid_group_by").await;
}

#[tokio::test]
async fn range_edges_follow_segment_starts() {
    let app = spawn_app(NOW).await;
    book_history(&app).await;
    let token = app.token(Scope::Admin, None).await;
    let get = |q: &str| {
        let path = format!("/v1/providers/prv_a/earnings?{q}");
        let token = token.clone();
        let app = &app;
        async move { app.get_json(&token, &path).await }
    };
    // Dates: from inclusive, to exclusive; of k1 only the segment starting on 11-21 counts.
    let b = get("from=2026-11-21&to=2026-11-23").await;
    assert_eq!(rows(&b), kv(&[("2026-11-21", "6.090000")]));
    // Timestamps: a segment counts where it starts, whole.
    let b = get("from=2026-11-20T23:30:00Z&to=2026-11-21T00:30:00Z").await;
    assert_eq!(rows(&b), kv(&[("2026-11-21", "2.490000")]));
    assert_eq!(b["totals"]["gpu_hours"], "1.000000");
    assert_eq!(b["items"][0]["from"], "2026-11-21T00:00:00.000Z");
    assert_eq!(b["items"][0]["to"], "2026-11-21T00:30:00.000Z");
    let b = get("from=2026-11-20T23:00:00Z&to=2026-11-21T00:00:00Z").await;
    assert_eq!(rows(&b), kv(&[("2026-11-20", "2.490000")]));
    let b = get("from=2026-11-20T00:00:00Z&to=2026-11-20T23:00:00Z").await;
    assert_eq!(rows(&b), kv(&[]));
    assert_eq!(b["totals"]["gross_usdc"], "0.000000");
    // Offsets are converted to UTC: 00:00+01:00 is 23:00Z the day before.
    let b = get("from=2026-11-21T00:00:00%2B01:00&to=2026-11-21T00:00:00Z").await;
    assert_eq!(rows(&b), kv(&[("2026-11-20", "2.490000")]));
    // Partial days at both ends around whole days.
    let b = get("from=2026-11-20T12:00:00Z&to=2026-11-23T01:00:00Z").await;
    assert_eq!(
        rows(&b),
        kv(&[
            ("2026-11-20", "2.490000"),
            ("2026-11-21", "6.090000"),
            ("2026-11-23", "7.470000")
        ])
    );
    assert_eq!(b["items"][0]["from"], "2026-11-20T12:00:00.000Z");
    assert_eq!(b["items"][2]["to"], "2026-11-23T01:00:00.000Z");
    let b = get("from=2026-11-20T12:00:00Z&to=2026-11-23T01:00:00Z&group_by=gpu").await;
    assert_eq!(
        rows(&b),
        kv(&[("gpu_a0", "12.450000"), ("gpu_a1", "3.600000")])
    );
    let b = get("from=2026-11-20T12:00:00Z&to=2026-11-23T01:00:00Z&group_by=model").await;
    assert_eq!(
        rows(&b),
        kv(&[("A100-80GB", "3.600000"), ("H100-80GB", "12.450000")])
    );
    // The month boundary splits k5.
    let b = get("from=2026-11-01&to=2026-11-02&group_by=month").await;
    assert_eq!(rows(&b), kv(&[("2026-11", "3.600000")]));

    for (q, code) in [
        ("from=2026-11-23&to=2026-11-23", "invalid_range"),
        ("from=2026-11-24&to=2026-11-23", "invalid_range"),
        ("from=yesterday", "invalid_timestamp"),
        ("from=2026-13-01", "invalid_date"),
        ("limit=0", "invalid_limit"),
        ("limit=1001", "invalid_limit"),
        ("limit=ten", "invalid_query"),
        ("cursor=zz", "invalid_cursor"),
    ] {
        let r = app
            .get(Some(&token), &format!("/v1/providers/prv_a/earnings?{q}"))
            .await;
        assert_problem(r, 400, code).await;
    }
}

#[tokio::test]
async fn voided_usage_is_excluded_and_late_usage_lands_in_its_period() {
    let app = spawn_app(NOW).await;
    book_history(&app).await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    usage(
        &app.ledger,
        "k6",
        "prv_a",
        "gpu_a0",
        "2026-11-24T10:00:00Z",
        "2026-11-24T11:00:00Z",
    )
    .await;
    let path = "/v1/providers/prv_a/earnings?from=2026-11-24&to=2026-11-25";
    assert_eq!(
        rows(&app.get_json(&token, path).await),
        kv(&[("2026-11-24", "2.490000")])
    );
    let before = app.get_json(&token, "/v1/providers/prv_a/summary").await;
    assert_eq!(before["week_to_date"]["gross_usdc"], "9.960000");

    app.ledger
        .void_usage(
            &settle::domain::ids::EventId::parse("k6").unwrap(),
            None,
            "refund",
            &Actor::operator("test"),
        )
        .await
        .unwrap();
    let after = app.get_json(&token, path).await;
    assert_eq!(rows(&after), kv(&[]));
    let ts = app
        .get_json(&token, "/v1/providers/prv_a/earnings?from=2026-11-24T09:00:00Z&to=2026-11-24T12:00:00Z&group_by=gpu")
        .await;
    assert_eq!(rows(&ts), kv(&[]));
    let summary = app.get_json(&token, "/v1/providers/prv_a/summary").await;
    assert_eq!(summary["week_to_date"]["gross_usdc"], "7.470000");
    assert_eq!(summary["week_to_date"]["gpu_hours"], "3.000000");

    // A late event (an agent was offline) is booked now and lands in its business period:
    // in the month to date, not in the week to date.
    let month_before = summary["month_to_date"]["gross_usdc"].clone();
    assert_eq!(month_before, "22.140000");
    usage(
        &app.ledger,
        "late",
        "prv_a",
        "gpu_a1",
        "2026-11-10T08:00:00Z",
        "2026-11-10T09:00:00Z",
    )
    .await;
    let summary = app.get_json(&token, "/v1/providers/prv_a/summary").await;
    assert_eq!(summary["week_to_date"]["gross_usdc"], "7.470000");
    assert_eq!(summary["month_to_date"]["gross_usdc"], "23.940000");
    let day = app
        .get_json(
            &token,
            "/v1/providers/prv_a/earnings?from=2026-11-10&to=2026-11-11",
        )
        .await;
    assert_eq!(rows(&day), kv(&[("2026-11-10", "1.800000")]));
}

#[tokio::test]
async fn the_current_period_rolls_over_on_monday_and_on_the_first() {
    let app = spawn_app("2026-11-29T23:59:59.999Z").await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    usage(
        &app.ledger,
        "w1",
        "prv_a",
        "gpu_a0",
        "2026-11-29T10:00:00Z",
        "2026-11-29T11:00:00Z",
    )
    .await;
    let s = app.get_json(&token, "/v1/providers/prv_a/summary").await;
    assert_eq!(s["as_of"], "2026-11-29T23:59:59.999Z");
    assert_eq!(s["week_to_date"]["from"], "2026-11-23T00:00:00.000Z");
    assert_eq!(s["week_to_date"]["to"], "2026-11-30T00:00:00.000Z");
    assert_eq!(s["week_to_date"]["gross_usdc"], "2.490000");
    assert_eq!(s["month_to_date"]["from"], "2026-11-01T00:00:00.000Z");
    assert_eq!(s["month_to_date"]["gross_usdc"], "2.490000");
    assert_eq!(s["balances"]["available_usdc"], "1.992000");

    app.set_now("2026-11-30T00:00:00Z");
    let s = app.get_json(&token, "/v1/providers/prv_a/summary").await;
    assert_eq!(s["week_to_date"]["from"], "2026-11-30T00:00:00.000Z");
    assert_eq!(s["week_to_date"]["gross_usdc"], "0.000000");
    assert_eq!(s["month_to_date"]["gross_usdc"], "2.490000");
    assert_eq!(s["balances"]["available_usdc"], "1.992000");

    app.set_now("2026-12-01T00:00:00Z");
    let s = app.get_json(&token, "/v1/providers/prv_a/summary").await;
    assert_eq!(s["month_to_date"]["from"], "2026-12-01T00:00:00.000Z");
    assert_eq!(s["month_to_date"]["to"], "2027-01-01T00:00:00.000Z");
    assert_eq!(s["month_to_date"]["gross_usdc"], "0.000000");
    assert_eq!(s["week_to_date"]["from"], "2026-11-30T00:00:00.000Z");
    // Usage of Monday 11-30 booked on 12-01: this week, last month.
    usage(
        &app.ledger,
        "w2",
        "prv_a",
        "gpu_a0",
        "2026-11-30T10:00:00Z",
        "2026-11-30T11:00:00Z",
    )
    .await;
    let s = app.get_json(&token, "/v1/providers/prv_a/summary").await;
    assert_eq!(s["week_to_date"]["gross_usdc"], "2.490000");
    assert_eq!(s["month_to_date"]["gross_usdc"], "0.000000");
    assert_eq!(s["balances"]["available_usdc"], "3.984000");
    assert_eq!(s["balances"]["paid_lifetime_usdc"], "0.000000");
}

#[tokio::test]
async fn gpus_with_lifetime_and_current_period() {
    let app = spawn_app(NOW).await;
    book_history(&app).await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    let page = app
        .get_json(&token, "/v1/providers/prv_a/gpus?limit=1")
        .await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["gpu_id"], "gpu_a0");
    assert_eq!(items[0]["model"], "H100-80GB");
    assert_eq!(items[0]["lifetime"]["gross_usdc"], "14.940000");
    assert_eq!(items[0]["week_to_date"]["gross_usdc"], "7.470000");
    assert_eq!(items[0]["month_to_date"]["gross_usdc"], "14.940000");
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let page = app
        .get_json(
            &token,
            &format!("/v1/providers/prv_a/gpus?limit=1&cursor={cursor}"),
        )
        .await;
    assert_eq!(page["items"][0]["gpu_id"], "gpu_a1");
    assert_eq!(page["items"][0]["lifetime"]["gross_usdc"], "10.800000");
    assert_eq!(page["items"][0]["lifetime"]["gpu_hours"], "6.000000");
    assert_eq!(page["items"][0]["week_to_date"]["gross_usdc"], "0.000000");
    assert_eq!(page["items"][0]["month_to_date"]["gross_usdc"], "7.200000");
    assert_eq!(page["next_cursor"], Value::Null);
}

/// Appends payout events as the payout and rail modules would.
async fn append(app: &TestApp, provider: &str, bodies: Vec<EventBody>) {
    let stream = provider_stream(provider);
    let now_ms = app.ledger.now_ms();
    let mut tx = app.ledger.store.begin(&stream).await.unwrap();
    for body in bodies {
        tx.append(NewEvent {
            body,
            actor: "system:test".into(),
            recorded_at_ms: now_ms,
            idem_key: None,
            content_hash: None,
        });
    }
    tx.commit().await.unwrap();
}

fn created(id: &str, amount: i64, method: PayoutMethod, eur_cents: Option<i64>) -> EventBody {
    EventBody::PayoutCreated(PayoutCreated {
        payout_id: id.parse().unwrap(),
        provider_id: "prv_a".parse().unwrap(),
        run_kind: "weekly".into(),
        run_key: "2026-11-23".into(),
        amount_micro_usdc: amount,
        method,
        held: false,
        amount_eur_cents: eur_cents,
        eur_per_usd: eur_cents.map(|_| "0.920000".to_owned()),
    })
}

const SIG: &str =
    "5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnbJLgp8uirBgmQpjKhoR4tjF3ZpRzrFmBV6UjKdiSZkQUW";

async fn book_payouts(app: &TestApp) {
    let solana = PayoutMethod::Solana {
        wallet: "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM".into(),
    };
    let sepa = PayoutMethod::Sepa {
        iban: "DE89370400440532013000".into(),
        bic: None,
        holder: "Acme GPU GmbH".into(),
    };
    append(
        app,
        "prv_a",
        vec![created("po_1", 30_000_000, solana.clone(), None)],
    )
    .await;
    app.clock.advance(1000);
    append(
        app,
        "prv_a",
        vec![
            EventBody::PayoutSubmitted(PayoutSubmitted {
                payout_id: "po_1".parse().unwrap(),
                provider_id: "prv_a".parse().unwrap(),
                rail: Rail::Solana,
                reference: SIG.into(),
                end_to_end_id: None,
            }),
            EventBody::PayoutSettled(PayoutSettled {
                payout_id: "po_1".parse().unwrap(),
                provider_id: "prv_a".parse().unwrap(),
                rail: Rail::Solana,
                amount_micro_usdc: 30_000_000,
                reference: SIG.into(),
            }),
            created("po_2", 26_000_000, sepa.clone(), Some(2392)),
            EventBody::PayoutSubmitted(PayoutSubmitted {
                payout_id: "po_2".parse().unwrap(),
                provider_id: "prv_a".parse().unwrap(),
                rail: Rail::Sepa,
                reference: "bb_2026_11_23_sepa".into(),
                end_to_end_id: Some("E2E-po_2".into()),
            }),
            created("po_3", 27_000_000, solana.clone(), None),
            created("po_4", 28_000_000, solana.clone(), None),
            EventBody::PayoutFailed(PayoutFailed {
                payout_id: "po_4".parse().unwrap(),
                provider_id: "prv_a".parse().unwrap(),
                rail: Rail::Solana,
                amount_micro_usdc: 28_000_000,
                reason: "custom program error: 0x1".into(),
                method_invalid: false,
            }),
        ],
    )
    .await;
    app.clock.advance(1000);
    append(
        app,
        "prv_a",
        vec![created("po_5", 29_000_000, solana, None)],
    )
    .await;
}

#[tokio::test]
async fn payouts_with_rail_details_pages_and_csv() {
    let config = HttpConfig {
        explorer_cluster: "devnet".into(),
        ..HttpConfig::default()
    };
    let app = spawn_app_with(NOW, config).await;
    book_payouts(&app).await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;

    let all = app.get_json(&token, "/v1/providers/prv_a/payouts").await;
    let ids: Vec<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["payout_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["po_5", "po_4", "po_3", "po_2", "po_1"]);
    let po1 = &all["items"][4];
    assert_eq!(po1["status"], "settled");
    assert_eq!(po1["amount_usdc"], "30.000000");
    assert_eq!(po1["solana"]["signature"], SIG);
    assert_eq!(
        po1["solana"]["explorer_url"],
        format!("https://explorer.solana.com/tx/{SIG}?cluster=devnet")
    );
    assert_eq!(po1["bank"], Value::Null);
    let po2 = &all["items"][3];
    assert_eq!(po2["status"], "submitted");
    assert_eq!(po2["rail"], "sepa");
    assert_eq!(po2["amount_eur"], "23.92");
    assert_eq!(
        po2["bank"],
        json!({"batch_id": "bb_2026_11_23_sepa", "end_to_end_id": "E2E-po_2"})
    );
    assert_eq!(po2["solana"], Value::Null);
    let po4 = &all["items"][1];
    assert_eq!(po4["status"], "failed");
    assert_eq!(po4["failure_reason"], "custom program error: 0x1");

    let pending = app
        .get_json(&token, "/v1/providers/prv_a/payouts?status=pending")
        .await;
    let ids: Vec<&str> = pending["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["payout_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["po_5", "po_3", "po_2"]);
    let history = app
        .get_json(&token, "/v1/providers/prv_a/payouts?status=history")
        .await;
    let ids: Vec<&str> = history["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["payout_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["po_4", "po_1"]);
    assert_problem(
        app.get(Some(&token), "/v1/providers/prv_a/payouts?status=open")
            .await,
        400,
        "invalid_status_filter",
    )
    .await;

    // Pages of 2 walk every payout exactly once, in order.
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let path = match &cursor {
            Some(c) => format!("/v1/providers/prv_a/payouts?limit=2&cursor={c}"),
            None => "/v1/providers/prv_a/payouts?limit=2".to_owned(),
        };
        let page = app.get_json(&token, &path).await;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        seen.extend(
            items
                .iter()
                .map(|p| p["payout_id"].as_str().unwrap().to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ["po_5", "po_4", "po_3", "po_2", "po_1"]);
    // A payouts cursor is refused by another list.
    let first = app
        .get_json(&token, "/v1/providers/prv_a/payouts?limit=1")
        .await;
    let c = first["next_cursor"].as_str().unwrap();
    assert_problem(
        app.get(
            Some(&token),
            &format!("/v1/providers/prv_a/earnings?cursor={c}"),
        )
        .await,
        400,
        "invalid_cursor",
    )
    .await;

    // Balances follow the payouts: 30 settled, 26 + 27 + 29 in transit, 28 failed back.
    let s = app.get_json(&token, "/v1/providers/prv_a/summary").await;
    assert_eq!(s["balances"]["paid_lifetime_usdc"], "30.000000");
    assert_eq!(s["balances"]["in_transit_usdc"], "82.000000");
    assert_eq!(s["balances"]["available_usdc"], "-112.000000");

    let r = app
        .get(
            Some(&token),
            "/v1/providers/prv_a/payouts.csv?status=history",
        )
        .await;
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/csv")
    );
    let csv = r.text().await.unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "payout_id,provider_id,created_at,updated_at,run_kind,run_key,rail,status,amount_usdc,amount_eur,eur_per_usd,reference,end_to_end_id,explorer_url,hold_reason,failure_reason"
    );
    assert_eq!(lines.len(), 3);
    assert!(lines[1].starts_with("po_4,prv_a,"));
    assert!(lines[1].ends_with(",,custom program error: 0x1"));
    assert!(lines[2].contains(&format!(
        ",{SIG},,https://explorer.solana.com/tx/{SIG}?cluster=devnet,"
    )));

    // The CLI reads the same payouts (mainnet explorer links).
    let now = settle::domain::time::format_ms(app.ledger.now_ms());
    let (code, out, err) = common::run_cli(
        &app.db.url,
        &[
            "--now",
            &now,
            "--format",
            "json",
            "payouts",
            "--provider",
            "prv_a",
            "--status",
            "history",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let cli: Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = cli
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["payout_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["po_4", "po_1"]);
    assert_eq!(
        cli[1]["explorer_url"],
        format!("https://explorer.solana.com/tx/{SIG}")
    );
    let (code, out, _) =
        common::run_cli(&app.db.url, &["--now", &now, "--format", "csv", "payouts"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 6, "{out}");
}

#[tokio::test]
async fn earnings_csv_matches_the_cli_and_pages_walk_everything_once() {
    let app = spawn_app(NOW).await;
    book_history(&app).await;
    let token = app.token(Scope::Provider, Some("prv_a")).await;
    let r = app
        .get(
            Some(&token),
            "/v1/providers/prv_a/earnings.csv?from=2026-11-20&to=2026-11-24&limit=1",
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    let csv = r.text().await.unwrap();
    assert_eq!(
        csv,
        "key,model,from,to,gross_usdc,fee_usdc,net_usdc,gpu_hours,usage_ms\n\
         2026-11-20,,2026-11-20T00:00:00.000Z,2026-11-21T00:00:00.000Z,2.490000,0.498000,1.992000,1.000000,3600000\n\
         2026-11-21,,2026-11-21T00:00:00.000Z,2026-11-22T00:00:00.000Z,6.090000,1.218000,4.872000,3.000000,10800000\n\
         2026-11-23,,2026-11-23T00:00:00.000Z,2026-11-24T00:00:00.000Z,7.470000,1.494000,5.976000,3.000000,10800000\n"
    );
    let (code, out, err) = common::run_cli(
        &app.db.url,
        &[
            "--now",
            NOW,
            "--format",
            "csv",
            "earnings",
            "--provider",
            "prv_a",
            "--from",
            "2026-11-20",
            "--to",
            "2026-11-24",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, csv);
    let (code, out, err) = common::run_cli(
        &app.db.url,
        &[
            "--now",
            NOW,
            "--format",
            "json",
            "earnings",
            "--provider",
            "prv_a",
            "--from",
            "2026-10-01",
            "--to",
            "2026-12-01",
            "--group-by",
            "model",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let cli: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(cli[1]["key"], "H100-80GB");
    assert_eq!(cli[1]["gross_usdc"], "14.940000");
    let (code, out, _) = common::run_cli(
        &app.db.url,
        &["--now", NOW, "balance", "--provider", "prv_a"],
    );
    assert_eq!(code, 0);
    assert!(out.contains("prv_a") && out.contains("20.592000"), "{out}");
    let (code, _, err) = common::run_cli(
        &app.db.url,
        &["--now", NOW, "earnings", "--provider", "prv_zz"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("no provider prv_zz"), "{err}");

    // Every grouping, walked in pages of 1 and of 4, gives the unpaged list exactly once.
    for by in ["day", "week", "month", "gpu", "model"] {
        let base =
            format!("/v1/providers/prv_a/earnings?from=2026-10-01&to=2026-12-01&group_by={by}");
        let full = rows(&app.get_json(&token, &base).await);
        assert!(!full.is_empty());
        for limit in [1, 4] {
            let mut seen = Vec::new();
            let mut cursor: Option<String> = None;
            for _ in 0..20 {
                let path = match &cursor {
                    Some(c) => format!("{base}&limit={limit}&cursor={c}"),
                    None => format!("{base}&limit={limit}"),
                };
                let page = app.get_json(&token, &path).await;
                let items = rows(&page);
                assert!(items.len() <= limit);
                seen.extend(items);
                match page["next_cursor"].as_str() {
                    Some(c) => cursor = Some(c.to_owned()),
                    None => break,
                }
            }
            assert_eq!(seen, full, "{by} by {limit}");
        }
    }
}

#[tokio::test]
async fn openapi_document_lists_the_routes_and_health_answers() {
    let app = spawn_app(NOW).await;
    let r = app.get(None, "/openapi.json").await;
    assert_eq!(r.status(), 200);
    let doc: Value = r.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/v1/usage",
        "/v1/providers/{id}/summary",
        "/v1/providers/{id}/earnings",
        "/v1/providers/{id}/earnings.csv",
        "/v1/providers/{id}/gpus",
        "/v1/providers/{id}/payouts",
        "/v1/providers/{id}/payouts.csv",
        "/v1/admin/usage/{event_id}/void",
        "/v1/admin/adjustments",
        "/v1/admin/import",
        "/v1/admin/runs/{kind}/{key}",
        "/healthz",
        "/readyz",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing");
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for s in [
        "UsageBatch",
        "UsageEvent",
        "UsageResponse",
        "Summary",
        "EarningsPage",
        "PayoutPage",
        "GpuPage",
        "Problem",
        "ImportResponse",
        "AdjustmentRequest",
        "RunReportView",
        "NextPayout",
    ] {
        assert!(schemas.contains_key(s), "schema {s} missing");
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let params = doc["paths"]["/v1/providers/{id}/earnings"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = params.iter().map(|p| p["name"].as_str().unwrap()).collect();
    for n in ["id", "from", "to", "group_by", "limit", "cursor"] {
        assert!(names.contains(&n), "{n} missing in {names:?}");
    }

    let r = app.get(None, "/healthz").await;
    assert_eq!(r.status(), 200);
    let r = app.get(None, "/readyz").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "ok");
    assert_problem(app.get(None, "/v1/nothing-here").await, 404, "not_found").await;
    assert_problem(app.get(None, "/v1/usage").await, 405, "method_not_allowed").await;
    app.ledger.store.close().await;
    assert_eq!(app.get(None, "/readyz").await.status(), 503);
}

#[tokio::test]
async fn next_payout_projection_and_run_report() {
    let app = spawn_app(NOW).await;
    http_support::seed(
        &app.ledger,
        r#"
{"type":"provider.register","provider_id":"prv_w","name":"Wallet GPU","email":"w@w.test","tier":"community","schedule":"weekly","payout_method":{"kind":"solana","wallet":"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}}
{"type":"gpu.register","gpu_id":"gpu_w0","provider_id":"prv_w","model":"H100-80GB"}
{"type":"rate.set","provider_id":"prv_w","model":"H100-80GB","rate_usdc_per_hour":"10","effective_from":"2026-01-01T00:00:00Z"}
"#,
    )
    .await;
    usage(
        &app.ledger,
        "w1",
        "prv_w",
        "gpu_w0",
        "2026-11-24T00:00:00Z",
        "2026-11-24T04:00:00Z",
    )
    .await;
    let admin = app.token(Scope::Admin, None).await;
    let s = app.get_json(&admin, "/v1/providers/prv_w/summary").await;
    assert_eq!(
        s["next_payout"],
        json!({"date": "2026-11-30", "run_kind": "weekly", "run_key": "2026-11-30",
               "projected_usdc": "32.000000", "decision": "paid"})
    );
    // Without a payout method the next run would not pay, and says why.
    let s = app.get_json(&admin, "/v1/providers/prv_a/summary").await;
    assert_eq!(s["next_payout"]["decision"], "no_method");
    assert_eq!(s["next_payout"]["date"], "2026-11-30");

    assert_problem(
        app.get(Some(&admin), "/v1/admin/runs/weekly/2026-11-30")
            .await,
        404,
        "unknown_run",
    )
    .await;
    assert_problem(
        app.get(Some(&admin), "/v1/admin/runs/weekly/2026-11-24")
            .await,
        422,
        "not_monday",
    )
    .await;
    assert_problem(
        app.get(Some(&admin), "/v1/admin/runs/yearly/2026").await,
        422,
        "invalid_run_key",
    )
    .await;
    app.set_now("2026-11-30T01:00:00Z");
    let calendar = settle_calendar::Calendar::platform_default();
    app.ledger
        .run_payouts(
            settle::ledger::runs::weekly_key("2026-11-30").unwrap(),
            &calendar,
            &settle::config::RunConfig::default(),
            &Actor::operator("test"),
        )
        .await
        .unwrap();
    let report = app
        .get_json(&admin, "/v1/admin/runs/weekly/2026-11-30")
        .await;
    assert_eq!(report["completed"], true);
    assert_eq!(report["cutoff"], "2026-11-30T00:00:00.000Z");
    let w = report["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["provider_id"] == "prv_w")
        .unwrap();
    assert_eq!(w["decision"], "paid");
    assert_eq!(w["amount_usdc"], "32.000000");
    assert_eq!(
        report["totals"]["paid"],
        json!({"count": 1, "amount_usdc": "32.000000"})
    );
    let all: Vec<Value> = report["candidates"].as_array().unwrap().clone();
    assert_eq!(report["next_cursor"], Value::Null);
    assert!(all.len() >= 2);
    let mut walked: Vec<Value> = Vec::new();
    let mut path = "/v1/admin/runs/weekly/2026-11-30?limit=1".to_owned();
    loop {
        let page = app.get_json(&admin, &path).await;
        assert_eq!(page["totals"], report["totals"]);
        walked.extend(page["candidates"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => path = format!("/v1/admin/runs/weekly/2026-11-30?limit=1&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(walked, all);
    let provider = app.token(Scope::Provider, Some("prv_w")).await;
    assert_problem(
        app.get(Some(&provider), "/v1/admin/runs/weekly/2026-11-30")
            .await,
        403,
        "forbidden_scope",
    )
    .await;

    // The created payout is pending on the dashboard, in transit in the balances.
    let pending = app
        .get_json(&provider, "/v1/providers/prv_w/payouts?status=pending")
        .await;
    assert_eq!(pending["items"][0]["amount_usdc"], "32.000000");
    assert_eq!(pending["items"][0]["status"], "created");
    assert_eq!(pending["items"][0]["run_key"], "2026-11-30");
    let s = app.get_json(&provider, "/v1/providers/prv_w/summary").await;
    assert_eq!(s["balances"]["in_transit_usdc"], "32.000000");
    assert_eq!(s["balances"]["available_usdc"], "0.000000");
}
