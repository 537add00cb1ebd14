//! The admin HTTP API of the bank rail on both stores: generate, list, show, download the
//! file (identical bytes), submitted, settled, returns; admin scope only; errors as
//! problem+json.

use crate::bank_support;

use bank_support::*;
use serde_json::{Value, json};
use settle::auth::Scope;
use settle::config::HttpConfig;
use settle::http::{AppState, Application};

async fn token(w: &World, scope: Scope, provider: Option<&str>) -> String {
    crate::common::api_token(&w.ledger, scope, provider).await
}

/// The bank routes with the world's outbox, served on a free port.
async fn serve(w: &World) -> String {
    let config = settle::config::Config {
        bank: w.bank.clone(),
        ..Default::default()
    };
    let state = AppState::new(w.ledger.clone(), &config);
    let app =
        settle::http::bank::routes(settle::config::BankConfig::default().answer_file_bytes_max)
            .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

async fn send(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> (u16, String, String) {
    let mut req = client.request(method, url).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, ct, resp.text().await.unwrap())
}

#[tokio::test]
async fn the_admin_api_runs_the_batch_lifecycle() {
    let w = World::new("2026-11-02T00:00:00Z").await;
    w.provider("eu_de", SEPA_DE).await;
    w.provider("us_ind", ACH_INDIVIDUAL).await;
    w.at("2026-11-11T00:00:00Z");
    w.earn("eu_de", 62_500_000, "2026-11-10T01:00:00Z").await;
    w.earn("us_ind", 12_500_000, "2026-11-10T01:00:00Z").await;
    w.at("2026-11-30T12:00:00Z");
    w.fx("0.915").await;
    w.at("2026-12-01T00:05:00Z");
    w.monthly("2026-12").await;
    w.at("2026-12-01T06:30:00Z");
    let admin = token(&w, Scope::Admin, None).await;
    let provider = token(&w, Scope::Provider, Some("eu_de")).await;
    let base = serve(&w).await;
    let c = reqwest::Client::new();
    use reqwest::Method as M;

    let (status, ct, body) = send(
        &c,
        M::POST,
        format!("{base}/v1/admin/bank/batches/generate"),
        &provider,
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(ct, "application/problem+json");
    let (status, _, _) = c
        .post(format!("{base}/v1/admin/bank/batches/generate"))
        .send()
        .await
        .map(|r| (r.status().as_u16(), (), ()))
        .unwrap();
    assert_eq!(status, 401);

    let (status, _, body) = send(
        &c,
        M::POST,
        format!("{base}/v1/admin/bank/batches/generate"),
        &admin,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let generated: Value = serde_json::from_str(&body).unwrap();
    let batches = generated["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 2);
    let sepa = batches
        .iter()
        .find(|b| b["batch"]["rail"] == "sepa")
        .unwrap();
    assert_eq!(sepa["batch"]["total"], "45.75");
    assert_eq!(sepa["batch"]["currency"], "EUR");
    assert_eq!(sepa["new"], true);
    let sepa_id = sepa["batch"]["batch_id"].as_str().unwrap().to_owned();
    let sepa_sha = sepa["batch"]["sha256"].as_str().unwrap().to_owned();

    let (status, _, body) = send(
        &c,
        M::GET,
        format!("{base}/v1/admin/bank/batches?limit=1"),
        &admin,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, _, body) = send(
        &c,
        M::GET,
        format!("{base}/v1/admin/bank/batches?limit=1&cursor={cursor}"),
        &admin,
        None,
    )
    .await;
    let page2: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page2["items"].as_array().unwrap().len(), 1);
    assert_ne!(page["items"][0]["batch_id"], page2["items"][0]["batch_id"]);
    assert!(page2["next_cursor"].is_null());

    let (status, _, body) = send(
        &c,
        M::GET,
        format!("{base}/v1/admin/bank/batches/{sepa_id}"),
        &admin,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let detail: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(detail["payouts"][0]["status"], "submitted");
    assert_eq!(detail["payouts"][0]["amount_eur"], "45.75");
    let payout_id = detail["payouts"][0]["payout_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The generation's answer listed the batch's payouts, as the ledger holds them.
    assert_eq!(sepa["batch"]["payout_ids"], serde_json::json!([payout_id]));

    // The file: the outbox's bytes, with the recorded SHA-256.
    let resp = c
        .get(format!("{base}/v1/admin/bank/batches/{sepa_id}/file"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "application/xml");
    assert_eq!(
        resp.headers()["x-content-sha256"].to_str().unwrap(),
        sepa_sha
    );
    let bytes = resp.bytes().await.unwrap();
    let b = settle::rails::bank::batch(&w.ledger.store, &sepa_id)
        .await
        .unwrap()
        .unwrap();
    let on_disk = std::fs::read(settle::rails::bank::outbox_path(&w.bank, &b).unwrap()).unwrap();
    assert_eq!(bytes.as_ref(), on_disk.as_slice());
    let copy = w.outbox.path().join("downloaded.xml");
    std::fs::write(&copy, &bytes).unwrap();
    assert_valid_pain001(&copy);

    let (status, ct, body) = send(
        &c,
        M::GET,
        format!("{base}/v1/admin/bank/batches/sepa-nope"),
        &admin,
        None,
    )
    .await;
    assert_eq!((status, ct.as_str()), (404, "application/problem+json"));
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["code"],
        "unknown_bank_batch"
    );
    let (status, _, body) = send(
        &c,
        M::POST,
        format!("{base}/v1/admin/bank/batches/{sepa_id}/settled"),
        &admin,
        None,
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["code"],
        "invalid_batch_state"
    );

    let (status, _, body) = send(
        &c,
        M::POST,
        format!("{base}/v1/admin/bank/batches/{sepa_id}/submitted"),
        &admin,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["batch"]["status"],
        "submitted"
    );
    w.at("2026-12-02T12:00:00Z");
    let (status, _, body) = send(
        &c,
        M::POST,
        format!("{base}/v1/admin/bank/batches/{sepa_id}/settled"),
        &admin,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let settled: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            settled["result"].as_str(),
            settled["payouts_changed"].as_u64()
        ),
        (Some("accepted"), Some(1))
    );

    let (status, _, body) = send(
        &c,
        M::POST,
        format!("{base}/v1/admin/bank/returns"),
        &admin,
        Some(json!({"payout_id": payout_id, "code": "R03"})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["code"],
        "return_code_rail_mismatch"
    );
    let (status, _, body) = send(
        &c,
        M::POST,
        format!("{base}/v1/admin/bank/returns"),
        &admin,
        Some(json!({"payout_id": payout_id, "code": "AC04"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (r["status"].as_str(), r["method_invalid"].as_bool()),
        (Some("accepted"), Some(true))
    );
    let (status, _, body) = send(
        &c,
        M::POST,
        format!("{base}/v1/admin/bank/returns"),
        &admin,
        Some(json!({"payout_id": payout_id, "code": "AC01"})),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(w.payable("eu_de").await, 50 * USDC);
    w.check().await;
}

#[tokio::test]
async fn the_api_router_serves_the_bank_routes() {
    let w = World::new("2026-11-02T00:00:00Z").await;
    let admin = token(&w, Scope::Admin, None).await;
    let config = HttpConfig {
        bind: "127.0.0.1:0".into(),
        ..HttpConfig::default()
    };
    let app = Application::build(config, w.ledger.clone()).await.unwrap();
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    let c = reqwest::Client::new();
    let (status, _, body) = send(
        &c,
        reqwest::Method::GET,
        format!("{base}/v1/admin/bank/batches"),
        &admin,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["items"], json!([]));
}
