//! Inputs that cannot mint money, on both stores: a rate sent with usage stays
//! in a configurable band around the provider's price book at `started_at`, per event, in
//! the ledger, the HTTP usage route and NDJSON import; an FX rate stays in its band and
//! moves by small steps; `--config` reaches the ledger of `settle ingest/import` and of
//! `settle serve`, whose bank routes write with the served `[bank]` section; `serve`
//! refuses the built-in example originator. ops/SECURITY.md lists the breach tried for each.

use crate::bank_support;
use crate::common;
use crate::common::Tables;
use crate::http_support;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::{TestDb, free_port, run_cli};
use serde_json::{Value, json};
use settle::auth::Scope;
use settle::config::LedgerConfig;
use settle::domain::bands::WithoutPriceBook;
use settle::ledger::ingest::{SenderScope, UsageInput, UsageResult};
use settle::ledger::{Actor, Ledger};
use settle::wire::import::{apply, parse_line};
use sqlx::Row;

const NOW: &str = "2026-11-23T12:00:00Z";

async fn import(ledger: &Ledger, lines: &[&str]) {
    for line in lines {
        let command = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        apply(ledger, &command, &Actor::operator("test"))
            .await
            .unwrap_or_else(|e| panic!("{line}: {e}"));
    }
}

/// Provider `prv_p`: `prv_p-h100` (H100-80GB: 2.00 USDC/h from 2026-01-01, 4.00 from
/// 2026-11-20) and `prv_p-l4` (L4-24GB, no price-book rate).
async fn priced_provider(ledger: &Ledger) {
    import(
        ledger,
        &[
            r#"{"type":"provider.register","provider_id":"prv_p","name":"P","email":"ops@p.test","tier":"community","schedule":"weekly"}"#,
            r#"{"type":"gpu.register","gpu_id":"prv_p-h100","provider_id":"prv_p","model":"H100-80GB"}"#,
            r#"{"type":"gpu.register","gpu_id":"prv_p-l4","provider_id":"prv_p","model":"L4-24GB"}"#,
            r#"{"type":"rate.set","provider_id":"prv_p","model":"H100-80GB","rate_usdc_per_hour":"2.00","effective_from":"2026-01-01T00:00:00Z"}"#,
            r#"{"type":"rate.set","provider_id":"prv_p","model":"H100-80GB","rate_usdc_per_hour":"4.00","effective_from":"2026-11-20T00:00:00Z"}"#,
        ],
    )
    .await;
}

/// A one-hour event of `prv_p` on `gpu` from `start` at `rate`.
fn hour(id: &str, gpu: &str, start: &str, rate: &str) -> UsageInput {
    let start_ms = settle::domain::time::parse_rfc3339_ms(start).unwrap();
    UsageInput {
        event_id: Some(id.into()),
        provider_id: Some("prv_p".into()),
        gpu_id: Some(gpu.into()),
        rental_id: None,
        started_at: Some(start.into()),
        ended_at: Some(settle::domain::time::format_ms(start_ms + 3_600_000)),
        rate_usdc_per_hour: Some(rate.into()),
    }
}

fn outcome(r: &UsageResult) -> String {
    match r {
        UsageResult::Rejected { code, .. } => (*code).to_owned(),
        other => other.status().to_owned(),
    }
}

/// The ids of the booked usage events, from their segments (folded behind the append
/// first, as any read does).
async fn booked_ids(ledger: &Ledger) -> Vec<String> {
    ledger.store.catch_up_all().await.unwrap();
    sqlx::query("SELECT DISTINCT event_id FROM usage_segments ORDER BY event_id")
        .fetch_all(ledger.store.pool())
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn payable(ledger: &Ledger, provider: &str) -> i64 {
    settle::store::read::balances(&ledger.store, Some(provider))
        .await
        .unwrap()
        .first()
        .map_or(0, |b| b.payable_micro_usdc)
}

#[tokio::test]
async fn a_rate_sent_with_usage_stays_between_half_and_twice_the_price_book_at_started_at() {
    let db = TestDb::new().await;
    let (ledger, _clock) = db.ledger_at(NOW).await;
    priced_provider(&ledger).await;
    let h100 = "prv_p-h100";
    let batch = [
        hour("low-edge", h100, "2026-11-19T00:00:00Z", "1"),
        hour("below", h100, "2026-11-19T01:00:00Z", "0.999999"),
        hour("high-edge", h100, "2026-11-19T02:00:00Z", "4"),
        hour("above", h100, "2026-11-19T03:00:00Z", "4.000001"),
        // From 2026-11-20 the book says 4.00: twice is 8.
        hour("new-book", h100, "2026-11-20T01:00:00Z", "8"),
        // Crosses into the new book, but priced at started_at: twice 2.00 is 4.
        hour("started-before", h100, "2026-11-19T23:30:00Z", "8"),
        hour("mint", h100, "2026-11-21T00:00:00Z", "10000"),
        hour("no-book", "prv_p-l4", "2026-11-19T00:00:00Z", "0.44"),
    ];
    let results = ledger
        .ingest_usage(&batch, &SenderScope::Metering, &Actor::operator("test"))
        .await
        .unwrap();
    assert_eq!(
        results.iter().map(outcome).collect::<Vec<_>>(),
        [
            "accepted",
            "rate_out_of_band",
            "accepted",
            "rate_out_of_band",
            "accepted",
            "rate_out_of_band",
            "rate_out_of_band",
            "rate_without_price_book",
        ]
    );
    match &results[6] {
        UsageResult::Rejected { message, .. } => {
            assert!(message.contains("50% to 200%"), "{message}");
            assert!(
                message.contains("4.000000"),
                "names the book rate: {message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // An admin (and so an NDJSON import) is held to the same band.
    let admin = ledger
        .ingest_usage(
            &[hour("admin-mint", h100, "2026-11-21T01:00:00Z", "9")],
            &SenderScope::Admin,
            &Actor::operator("test"),
        )
        .await
        .unwrap();
    assert_eq!(outcome(&admin[0]), "rate_out_of_band");
    // Nothing rejected is booked: 1 h at 1 + 4 + 8 USDC, less the 20 % community fee.
    assert_eq!(
        booked_ids(&ledger).await,
        ["high-edge", "low-edge", "new-book"]
    );
    assert_eq!(payable(&ledger, "prv_p").await, 10_400_000);
    // A re-send of a booked event is still a duplicate; the price book without a rate for
    // the event's own rate still prices events that carry none.
    let again = ledger
        .ingest_usage(
            &[
                hour("low-edge", h100, "2026-11-19T00:00:00Z", "1"),
                UsageInput {
                    rate_usdc_per_hour: None,
                    ..hour("book", h100, "2026-11-21T02:00:00Z", "1")
                },
            ],
            &SenderScope::Metering,
            &Actor::operator("test"),
        )
        .await
        .unwrap();
    assert_eq!(
        again.iter().map(outcome).collect::<Vec<_>>(),
        ["duplicate", "accepted"]
    );
    let report = settle::verify::verify(&ledger.store, &|_| {})
        .await
        .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[tokio::test]
async fn the_band_and_the_missing_price_book_rule_are_configurable() {
    let db = TestDb::new().await;
    let (ledger, _clock) = db.ledger_at(NOW).await;
    priced_provider(&ledger).await;
    let mut narrow = ledger.clone();
    narrow.config = LedgerConfig {
        usage_rate_band_min_pct: 90,
        usage_rate_band_max_pct: 110,
        usage_rate_without_price_book: WithoutPriceBook::Accept,
        ..LedgerConfig::default()
    };
    let results = narrow
        .ingest_usage(
            &[
                hour("a", "prv_p-h100", "2026-11-19T00:00:00Z", "2.2"),
                hour("b", "prv_p-h100", "2026-11-19T01:00:00Z", "2.200001"),
                hour("c", "prv_p-h100", "2026-11-19T02:00:00Z", "1.799999"),
                hour("d", "prv_p-l4", "2026-11-19T00:00:00Z", "0.44"),
            ],
            &SenderScope::Metering,
            &Actor::operator("test"),
        )
        .await
        .unwrap();
    assert_eq!(
        results.iter().map(outcome).collect::<Vec<_>>(),
        [
            "accepted",
            "rate_out_of_band",
            "rate_out_of_band",
            "accepted"
        ]
    );
    let rate_source: String = sqlx::query(
        "SELECT payload FROM events WHERE event_type = 'usage.recorded' AND idem_key = 'usage:d'",
    )
    .fetch_one(ledger.store.pool())
    .await
    .map(|r| r.get::<String, _>(0))
    .map(|p| serde_json::from_str::<Value>(&p).unwrap()["rate_source"].to_string())
    .unwrap();
    assert_eq!(rate_source, "\"event\"");
}

#[tokio::test]
async fn the_usage_route_rejects_an_out_of_band_rate_per_event() {
    // prv_b's GPU gpu_b0 is priced 3 USDC/h (http_support::REGISTRY).
    let app = http_support::spawn_app("2026-11-25T00:00:00Z").await;
    let metering = app.token(Scope::Metering, None).await;
    let event = |id: &str, start: &str, end: &str, rate: &str| json!({"event_id": id, "provider_id": "prv_b", "gpu_id": "gpu_b0", "started_at": start, "ended_at": end, "rate_usdc_per_hour": rate});
    let body = json!({"events": [
        event("in", "2026-11-24T10:00:00Z", "2026-11-24T11:00:00Z", "6"),
        event("out", "2026-11-24T11:00:00Z", "2026-11-24T12:00:00Z", "6.000001"),
        event("mint", "2026-11-24T12:00:00Z", "2026-11-24T13:00:00Z", "10000"),
    ]});
    let r = app
        .post(Some(&metering), "/v1/usage", body.to_string())
        .await;
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    let results: Vec<(String, Value)> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["status"].as_str().unwrap().to_owned(), r["code"].clone()))
        .collect();
    assert_eq!(
        results,
        [
            ("accepted".to_owned(), Value::Null),
            ("rejected".to_owned(), json!("rate_out_of_band")),
            ("rejected".to_owned(), json!("rate_out_of_band")),
        ]
    );
    assert_eq!(
        (answer["accepted"].clone(), answer["rejected"].clone()),
        (json!(1), json!(2))
    );
    // 1 h at 6 USDC less 20 %: nothing of the rejected two.
    assert_eq!(payable(&app.ledger, "prv_b").await, 4_800_000);
}

/// `settle ingest --config F` and `settle import --config F` book with F's `[ledger]` and
/// `[control]`, not the defaults.
#[tokio::test]
async fn the_ledgers_policy_decides_cli_ingest_and_import_not_the_process_config() {
    let db = TestDb::new().await;
    {
        let (ledger, _clock) = db.ledger_at(NOW).await;
        priced_provider(&ledger).await;
        ledger.store.close().await;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("settle.toml");
    std::fs::write(
        &config,
        "[ledger]\nusage_rate_band_max_pct = 150\n\n[control]\nenforce = \"never\"\nfx_step_max_pct = 20\nfx_eur_per_usd_max = \"1.5\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let file = |name: &str, lines: &[Value]| {
        let path = dir.path().join(name);
        let text: Vec<String> = lines.iter().map(Value::to_string).collect();
        std::fs::write(&path, text.join("\n")).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let usage = |id: &str, start: &str, end: &str| json!({"event_id": id, "provider_id": "prv_p", "gpu_id": "prv_p-h100", "started_at": start, "ended_at": end, "rate_usdc_per_hour": "3.5"});
    // 3.5 is 175 % of the book's 2.00: in the default band, outside the configured one.
    let defaults = file(
        "default.ndjson",
        &[usage("d1", "2026-11-19T00:00:00Z", "2026-11-19T01:00:00Z")],
    );
    let configured = file(
        "configured.ndjson",
        &[usage("c1", "2026-11-19T01:00:00Z", "2026-11-19T02:00:00Z")],
    );
    let lines = |out: &str| -> Vec<(String, Value)> {
        let report: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
        report["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| (l["status"].as_str().unwrap().to_owned(), l["code"].clone()))
            .collect()
    };
    // The bands hold on this simulated-clock ledger (it replays from NOW) because
    // control.enforce = "never" (no approvals, bands everywhere).
    let base = dir.path().join("base.toml");
    std::fs::write(&base, "[control]\nenforce = \"never\"\n").unwrap();
    let base = base.to_str().unwrap().to_owned();
    let cli = |args: &[&str]| {
        let mut all = vec!["--now", NOW, "--format", "json"];
        if !args.contains(&"--config") {
            all.extend(["--config", base.as_str()]);
        }
        all.extend_from_slice(args);
        run_cli(&db.url, &all)
    };
    let (code, out, err) = cli(&["ingest", &defaults]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(lines(&out), [("accepted".to_owned(), Value::Null)]);
    // A process configured otherwise does not move the ledger's policy: its configuration
    // seeded the ledger at the first command and decides nothing since (SPEC §9).
    let (code, out, err) = cli(&["--config", config, "ingest", &configured]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(lines(&out), [("accepted".to_owned(), Value::Null)]);
    // The policy changes on the ledger: at once on this simulated-clock ledger that does
    // not enforce approvals (a real-clock one waits for a second operator).
    let (code, out, err) = cli(&["control", "set-policy", "usage_rate_band_max_pct=150"]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, out, _) = cli(&["control", "policy"]);
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert!(
        shown
            .as_array()
            .unwrap()
            .contains(&json!({"name": "usage_rate_band_max_pct", "value": "150"})),
        "{out}"
    );
    let configured = file(
        "configured2.ndjson",
        &[usage("c2", "2026-11-19T02:00:00Z", "2026-11-19T03:00:00Z")],
    );
    let (code, out, err) = cli(&["ingest", &configured]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(
        lines(&out),
        [("rejected".to_owned(), json!("rate_out_of_band"))]
    );

    // FX: "92" for "0.92" is refused; a 14 % step needs the configured 20 %.
    let fx = |rate: &str| json!({"type": "fx.rate_set", "eur_per_usd": rate});
    let first = file("fx1.ndjson", &[fx("92"), fx("0.92"), fx("1.05")]);
    let (code, out, err) = cli(&["import", &first]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(
        lines(&out),
        [
            ("rejected".to_owned(), json!("fx_rate_out_of_band")),
            ("accepted".to_owned(), Value::Null),
            ("rejected".to_owned(), json!("fx_rate_out_of_band")),
        ]
    );
    let second = file("fx2.ndjson", &[fx("1.05"), fx("1.6")]);
    let (code, out, err) = cli(&[
        "control",
        "set-policy",
        "fx_step_max_pct=20",
        "fx_eur_per_usd_max=1.5",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    // A minute later: one FX rate per instant.
    let (code, out, err) = run_cli(
        &db.url,
        &[
            "--now",
            "2026-11-23T12:01:00Z",
            "--format",
            "json",
            "--config",
            config,
            "import",
            &second,
        ],
    );
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(
        lines(&out),
        [
            ("accepted".to_owned(), Value::Null),
            ("rejected".to_owned(), json!("fx_rate_out_of_band")),
        ]
    );
    let store = db.store().await;
    let rates: Vec<String> =
        sqlx::query("SELECT eur_per_usd FROM fx_rates ORDER BY recorded_at_ms")
            .fetch_all(store.pool())
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
    assert_eq!(
        rates,
        ["0.92", "1.05"],
        "only the accepted rates are recorded"
    );
    store.close().await;
}

#[tokio::test]
async fn an_fx_rate_stays_in_its_band_and_near_the_rate_in_force() {
    let db = TestDb::new().await;
    let (ledger, clock) = db.ledger_at(NOW).await;
    let set = |rate: &str, id: Option<&str>| {
        let line = match id {
            Some(id) => json!({"type": "fx.rate_set", "fx_id": id, "eur_per_usd": rate}),
            None => json!({"type": "fx.rate_set", "eur_per_usd": rate}),
        }
        .to_string();
        let (ledger, clock) = (ledger.clone(), clock.clone());
        async move {
            // One FX rate per instant (the projection keys them by booking time).
            clock.advance(60_000);
            let command = parse_line(&line).unwrap();
            match apply(&ledger, &command, &Actor::operator("test")).await {
                Ok(applied) => applied.as_str().to_owned(),
                Err(settle::ledger::LedgerError::Rejected(e)) => e.code.to_owned(),
                Err(e) => panic!("{line}: {e}"),
            }
        }
    };
    assert_eq!(set("92", None).await, "fx_rate_out_of_band", "the typo");
    assert_eq!(set("0.4999", None).await, "fx_rate_out_of_band");
    assert_eq!(set("2.0001", None).await, "fx_rate_out_of_band");
    assert_eq!(set("0.92", Some("fx-1")).await, "accepted");
    assert_eq!(set("92", None).await, "fx_rate_out_of_band");
    // 10 % of 0.92 is 0.092: 1.012 and 0.828 are the edges.
    assert_eq!(set("1.0121", None).await, "fx_rate_out_of_band");
    assert_eq!(set("0.8279", None).await, "fx_rate_out_of_band");
    assert_eq!(set("1.012", Some("fx-2")).await, "accepted");
    // Replays stay what they were: a duplicate, a conflict.
    assert_eq!(set("1.012", Some("fx-2")).await, "duplicate");
    assert_eq!(set("0.5", Some("fx-1")).await, "conflict");
    assert_eq!(set("0.92", None).await, "accepted", "within 10 % of 1.012");
    let latest =
        settle::ledger::runs::latest_fx_rate(&mut ledger.store.acquire().await.unwrap(), i64::MAX)
            .await
            .unwrap()
            .map(|(_, r)| r.to_string());
    assert_eq!(latest.as_deref(), Some("0.92"));
}

// ---------------------------------------------------------------------------------------
// settle serve

struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `settle serve --no-scheduler --config CONFIG` in `cwd`, ready on `port`.
async fn serve(
    url: &str,
    now: &str,
    config: &std::path::Path,
    cwd: &std::path::Path,
    port: u16,
) -> Served {
    let log = cwd.join("serve.log");
    let child = crate::common::settle_command()
        .args(["--database", url, "--now", now, "--config"])
        .arg(config)
        .args(["serve", "--no-scheduler"])
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start settle serve");
    let mut served = Served(child);
    let client = reqwest::Client::new();
    for _ in 0..600 {
        if let Ok(r) = client
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
            && r.status().is_success()
        {
            return served;
        }
        if let Some(status) = served.0.try_wait().unwrap() {
            panic!(
                "settle serve exited with {status}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("settle serve did not become ready");
}

async fn token(ledger: &Ledger, scope: Scope) -> String {
    crate::common::api_token(ledger, scope, None).await
}

/// A real originator, none of whose identifiers is the built-in example's.
const OWN_ORIGINATOR: &str = r#"sepa_debtor_iban = "NL91ABNA0417164300"
sepa_debtor_bic = "ABNANL2A"
sepa_debtor_name = "Own Marketplace BV"
sepa_initiating_party_name = "Own Marketplace BV"
nacha_immediate_origin = "1987654320"
nacha_company_id = "1987654320"
"#;

/// `settle serve --config F`: the usage route books with F's `[ledger]` band, and the bank
/// routes write with F's `[bank]` (its outbox and originator), not the environment's
/// defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_uses_its_config_file_for_the_usage_band_and_the_bank_routes() {
    use bank_support::*;
    let w = World::new("2026-11-02T00:00:00Z").await;
    w.provider("eu_de", SEPA_DE).await;
    w.at("2026-11-11T00:00:00Z");
    w.earn("eu_de", 62_500_000, "2026-11-10T01:00:00Z").await;
    w.at("2026-11-30T12:00:00Z");
    w.fx("0.915").await;
    w.at("2026-12-01T00:05:00Z");
    w.monthly("2026-12").await;
    w.at("2026-12-01T06:30:00Z");
    let (admin, metering) = (
        token(&w.ledger, Scope::Admin).await,
        token(&w.ledger, Scope::Metering).await,
    );

    let dir = tempfile::tempdir().unwrap();
    let outbox = dir.path().join("served-outbox");
    let port = free_port();
    let config = dir.path().join("settle.toml");
    std::fs::write(
        &config,
        format!(
            "[http]\nbind = \"127.0.0.1:{port}\"\nmetrics_bind = \"\"\n\n[ledger]\nusage_rate_band_max_pct = 120\n\n[control]\nenforce = \"never\"\n\n[bank]\noutbox_dir = {:?}\n{OWN_ORIGINATOR}",
            outbox.display().to_string()
        ),
    )
    .unwrap();
    let _served = serve(&w.db.url, "2026-12-01T07:00:00Z", &config, dir.path(), port).await;
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");

    // eu_de's H100 is priced 3.6 (bank_support): 4.32 is 120 %, 4.320001 above.
    let event = |id: &str, start: &str, end: &str, rate: &str| json!({"event_id": id, "provider_id": "eu_de", "gpu_id": "eu_de-g0", "started_at": start, "ended_at": end, "rate_usdc_per_hour": rate});
    let answer: Value = client
        .post(format!("{base}/v1/usage"))
        .bearer_auth(&metering)
        .json(&json!({"events": [
            event("s1", "2026-11-30T01:00:00Z", "2026-11-30T02:00:00Z", "4.32"),
            event("s2", "2026-11-30T02:00:00Z", "2026-11-30T03:00:00Z", "4.320001"),
        ]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let codes: Vec<Value> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].clone())
        .collect();
    assert_eq!(codes, [Value::Null, json!("rate_out_of_band")], "{answer}");

    let r = client
        .post(format!("{base}/v1/admin/bank/batches/generate"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let generated: Value = r.json().await.unwrap();
    let sepa = generated["batches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["batch"]["rail"] == "sepa")
        .unwrap_or_else(|| panic!("{generated}"));
    let file_name = sepa["batch"]["file_name"].as_str().unwrap();
    let written: Vec<std::path::PathBuf> = walk(&outbox);
    let file = written
        .iter()
        .find(|p| p.file_name().is_some_and(|n| n == file_name))
        .unwrap_or_else(|| panic!("{file_name} not in the configured outbox: {written:?}"));
    let xml = std::fs::read_to_string(file).unwrap();
    assert!(xml.contains("<IBAN>NL91ABNA0417164300</IBAN>"), "{xml}");
    assert!(!xml.contains("DE02120300000000202051"), "{xml}");
    assert!(
        !dir.path().join("outbox").exists(),
        "nothing in the default outbox"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// `settle serve` refuses to start while `[bank]` holds the built-in example originator,
/// naming the keys; `bank.allow_example_originator = true` lets a demo or a test start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_the_example_originator_unless_allowed() {
    let db = TestDb::new().await;
    // The allowed server runs at a --now of the past: a simulated-clock ledger.
    let (code, out, err) = run_cli(&db.url, &["migrate", "--simulated-clock"]);
    assert_eq!(code, 0, "{out}{err}");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let http = format!("[http]\nbind = \"127.0.0.1:{port}\"\nmetrics_bind = \"\"\n");
    let refused = |config: &str| {
        let path = dir.path().join("refused.toml");
        std::fs::write(&path, config).unwrap();
        let err_path = dir.path().join("refused.err");
        let mut child = crate::common::settle_command()
            .args(["--database", &db.url, "--config"])
            .arg(&path)
            .args(["serve", "--no-scheduler"])
            .env_remove("SETTLE_BANK__ALLOW_EXAMPLE_ORIGINATOR")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap();
        // A refusal is immediate; a server that started is stopped and fails the test.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("settle serve started with the example originator: {config}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        (
            status.code(),
            std::fs::read_to_string(&err_path).unwrap_or_default(),
        )
    };
    // The defaults (as ops/config.example.toml ships them).
    let (code, err) = refused(&http);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("example_originator"), "{err}");
    assert!(
        err.contains("bank.sepa_debtor_iban")
            && err.contains("bank.nacha_immediate_origin")
            && err.contains("bank.nacha_company_id"),
        "{err}"
    );
    // Half configured: the SEPA account is the operator's, the NACHA ids still the example.
    let (code, err) = refused(&format!(
        "{http}\n[bank]\nsepa_debtor_iban = \"NL91ABNA0417164300\"\n"
    ));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("example_originator"), "{err}");
    assert!(!err.contains("bank.sepa_debtor_iban"), "{err}");
    assert!(err.contains("bank.nacha_company_id"), "{err}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens"
    );

    // Allowed explicitly (a demo, a test): it starts.
    let allowed = dir.path().join("allowed.toml");
    std::fs::write(
        &allowed,
        format!("{http}\n[bank]\nallow_example_originator = true\n"),
    )
    .unwrap();
    let served = serve(&db.url, NOW, &allowed, dir.path(), port).await;
    drop(served);
}

/// `--config`'s `[store]` section reaches the connections of the CLI: an invalid pool size
/// is refused naming its key, and on SQLite a command meets another process's write lock
/// with the configured busy timeout (it gives up while the lock is held with a short one,
/// and books once the lock is released with a long one).
#[tokio::test]
async fn the_store_section_reaches_the_cli() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let one = write("one.toml", "[store]\nconnections_max = 1\n");
    let (code, out, err) = run_cli(&db.url, &["--config", &one, "balance"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("store.connections_max"), "{err}");
    if db.is_postgres() {
        return;
    }
    let fx = write(
        "fx.ndjson",
        "{\"type\":\"fx.rate_set\",\"fx_id\":\"fx-1\",\"eur_per_usd\":\"0.92\"}\n",
    );
    let short = write("short.toml", "[store]\nsqlite_busy_timeout_ms = 50\n");
    let long = write("long.toml", "[store]\nsqlite_busy_timeout_ms = 60000\n");
    // Another process's writer: a connection of the test holding SQLite's write lock.
    let hold = || async {
        let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&db.url)
            .await
            .unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut conn)
            .await
            .unwrap();
        conn
    };
    // `settle import` under `config` while the lock is held for `held`, then released.
    let import_under_lock = |config: String, held: Duration| {
        let url = db.url.clone();
        let fx = fx.clone();
        let hold = hold();
        async move {
            let conn = hold.await;
            let child = std::thread::spawn(move || {
                let args = ["--now", NOW, "--format", "json", "--config", &config];
                run_cli(&url, &[&args[..], &["import", &fx]].concat())
            });
            tokio::time::sleep(held).await;
            drop(conn);
            child.join().unwrap()
        }
    };
    // Held for 5 s: a 50 ms busy timeout gives up while it is held (the default 10 s one
    // would wait it out and book).
    let (code, out, err) = import_under_lock(short, Duration::from_secs(5)).await;
    assert_ne!(
        code, 0,
        "a 50 ms busy timeout gives up on a held lock: {out}{err}"
    );
    // Held for 0.5 s: a 60 s busy timeout waits for it.
    let (code, out, err) = import_under_lock(long, Duration::from_millis(500)).await;
    assert_eq!(
        code, 0,
        "a 60 s busy timeout waits for the lock: {out}{err}"
    );
    let (ledger, _clock) = db.ledger_at(NOW).await;
    let rates: i64 = sqlx::query("SELECT COUNT(*) FROM events WHERE event_type = 'fx.rate_set'")
        .fetch_one(ledger.store.pool())
        .await
        .unwrap()
        .get(0);
    assert_eq!(rates, 1, "the rate is booked once, by the patient command");
}
