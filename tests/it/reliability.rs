//! The reliability score of SPEC §12 through the engine: reports imported as NDJSON lines
//! (idempotent by their ids), a GPU's schedule across the change from summer to winter
//! time, maintenance announced in time and too late, a job interrupted by the customer,
//! benchmarks that delist and relist it, and the score read back with `settle
//! reliability`, against values worked out by hand below.

use serde_json::{Value, json};

use settle::auth::Scope;

use super::common::{TestDb, run_cli};

const GPU: &str = "gpu-b1";

fn import(url: &str, config: &str, now: &str, lines: &[Value]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lines.ndjson");
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&path, text.join("\n")).unwrap();
    let (code, out, err) = run_cli(
        url,
        &[
            "--config",
            config,
            "--now",
            now,
            "--format",
            "json",
            "import",
            path.to_str().unwrap(),
        ],
    );
    assert!(code == 0 || code == 2, "{out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"))
}

fn statuses(report: &Value) -> Vec<String> {
    report["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let code = l["code"]
                .as_str()
                .map(|c| format!(" {c}"))
                .unwrap_or_default();
            format!("{}{code}", l["status"].as_str().unwrap())
        })
        .collect()
}

/// `(status, code)` of each result of a `POST /v1/gpus/online` answer.
fn status_codes(answer: &Value) -> Vec<(String, Value)> {
    answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["status"].as_str().unwrap().to_owned(), r["code"].clone()))
        .collect()
}

fn benchmark(id: &str, at: &str, fp16: &str) -> Value {
    json!({"type": "gpu.benchmark", "benchmark_id": id, "gpu_id": GPU, "measured_at": at,
           "fp16_tflops": fp16, "fp32_tflops": "60", "tensor_tflops": "900", "memory_gb_s": 3350,
           "network_mbit_s": 10000, "storage_mb_s": 2000})
}

fn online(id: &str, from: &str, to: &str) -> Value {
    json!({"type": "gpu.online", "report_id": id, "gpu_id": GPU, "started_at": from, "ended_at": to})
}

fn job(id: &str, at: &str, cause: Option<&str>) -> Value {
    match cause {
        None => {
            json!({"type": "job.outcome", "job_id": id, "gpu_id": GPU, "ended_at": at, "result": "completed"})
        }
        Some(c) => {
            json!({"type": "job.outcome", "job_id": id, "gpu_id": GPU, "ended_at": at, "result": "interrupted", "cause": c})
        }
    }
}

/// The listing changes booked on the provider's stream, `(listed, benchmark_id)`.
async fn listing_changes(db: &TestDb) -> Vec<(bool, String)> {
    let store = db.store().await;
    store
        .stream_events_of_types("provider:prv_rel", &["gpu.listing_changed"])
        .await
        .unwrap()
        .iter()
        .map(|e| {
            let v: Value = serde_json::from_str(&e.payload).unwrap();
            (
                v["listed"].as_bool().unwrap(),
                v["benchmark_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_score_across_a_dst_change_with_maintenance_jobs_and_benchmarks_is_the_one_worked_out() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("settle.toml");
    std::fs::write(
        &config,
        "[reliability.benchmark_minimums.\"H100-80GB\"]\nfp16_tflops = \"950\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let url = db.url.clone();
    let import = |now: &str, lines: &[Value]| import(&url, config, now, lines);

    // 1 Oct: the GPU joins, 09:00–18:00 every day, Berlin time; first benchmark 1000 TFLOPS.
    let report = import(
        "2026-10-01T00:00:00Z",
        &[
            json!({"type": "provider.register", "provider_id": "prv_rel", "name": "Rel GPU", "email": "ops@rel.test", "tier": "community", "schedule": "weekly"}),
            json!({"type": "gpu.register", "gpu_id": GPU, "provider_id": "prv_rel", "model": "H100-80GB"}),
            json!({"type": "gpu.schedule", "schedule_id": "s1", "gpu_id": GPU, "effective_from": "2026-10-01T00:00:00Z", "time_zone": "Europe/Berlin", "hours": "daily 09:00-18:00"}),
            benchmark("b1", "2026-10-01T00:00:00Z", "1000"),
        ],
    );
    assert_eq!(statuses(&report), ["accepted"; 4], "{report}");
    // 10 Oct: maintenance on 20 Oct 10:00–12:00 Berlin (08:00–10:00 UTC), ten days ahead.
    let maintenance = |id: &str, from: &str, to: &str| json!({"type": "gpu.maintenance", "maintenance_id": id, "gpu_id": GPU, "starts_at": from, "ends_at": to});
    import(
        "2026-10-10T00:00:00Z",
        &[maintenance(
            "m1",
            "2026-10-20T08:00:00Z",
            "2026-10-20T10:00:00Z",
        )],
    );
    // 20 Oct: 900 TFLOPS, under the model's 950: delisted.
    import(
        "2026-10-20T12:00:00Z",
        &[benchmark("b2", "2026-10-20T11:00:00Z", "900")],
    );
    assert_eq!(listing_changes(&db).await, [(false, "b2".to_owned())]);
    // 22 Oct: maintenance of 21 Oct 10:00–12:00 Berlin announced after the fact: it counts.
    import(
        "2026-10-22T00:00:00Z",
        &[maintenance(
            "m2",
            "2026-10-21T08:00:00Z",
            "2026-10-21T10:00:00Z",
        )],
    );
    // 24 Oct: 960 TFLOPS passes: listed again.
    import(
        "2026-10-24T12:00:00Z",
        &[benchmark("b3", "2026-10-24T11:00:00Z", "960")],
    );
    assert_eq!(
        listing_changes(&db).await,
        [(false, "b2".to_owned()), (true, "b3".to_owned())]
    );
    // 26 Oct: the agent's intervals (offline in both maintenance windows and all of
    // Sunday 25 Oct, the day clocks go back) and three jobs.
    let reports = [
        online("o1", "2026-10-01T00:00:00Z", "2026-10-20T08:00:00Z"),
        online("o2", "2026-10-20T10:00:00Z", "2026-10-21T08:00:00Z"),
        online("o3", "2026-10-21T10:00:00Z", "2026-10-24T22:00:00Z"),
        online("o4", "2026-10-25T23:00:00Z", "2026-10-26T00:00:00Z"),
        job("j1", "2026-10-10T12:00:00Z", None),
        job("j2", "2026-10-11T12:00:00Z", Some("customer")),
        job("j3", "2026-10-12T12:00:00Z", Some("provider")),
    ];
    let report = import("2026-10-26T00:00:00Z", &reports);
    assert_eq!(statuses(&report), ["accepted"; 7], "{report}");
    // The same again: duplicates; other content under an id: a conflict; an unknown GPU.
    let report = import(
        "2026-10-26T00:00:00Z",
        &[
            reports[0].clone(),
            online("o1", "2026-10-01T00:00:00Z", "2026-10-20T09:00:00Z"),
            json!({"type": "gpu.online", "report_id": "o9", "gpu_id": "gpu-none", "started_at": "2026-10-01T00:00:00Z", "ended_at": "2026-10-02T00:00:00Z"}),
        ],
    );
    assert_eq!(
        statuses(&report),
        ["duplicate", "rejected conflict", "rejected unknown_gpu"],
        "{report}"
    );

    let (code, out, err) = run_cli(
        &db.url,
        &[
            "--config",
            config,
            "--now",
            "2026-10-26T00:00:00Z",
            "--format",
            "json",
            "reliability",
            "--provider",
            "prv_rel",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    let gpu = &r["gpus"][0];
    // Uptime. The window is 26 Sep–26 Oct; the GPU joined 1 Oct: 25 scheduled days of 9 h
    // each, 25 Oct included (09:00–18:00 is 9 h on the day clocks change) = 225 h, minus
    // the 2 h announced in time = 223 h scheduled. Offline inside it: 2 h (the late
    // maintenance) + 9 h (25 Oct) = 11 h, so 212 h online: 212/223 = 95.067 % → 9507.
    // Evidence 25 of 30 days = 8333; value (9507·8333 + 9000·1667)/10 000 = 9422.48 → 9422.
    assert_eq!(gpu["uptime"]["measured_bps"], 9507, "{gpu}");
    assert_eq!(gpu["uptime"]["evidence_bps"], 8333, "{gpu}");
    assert_eq!(gpu["uptime"]["value_bps"], 9422, "{gpu}");
    // Jobs: the customer's interruption does not count: 2 of 3 → 6667; evidence 3 of 10
    // jobs = 3000; value (6667·3000 + 9000·7000)/10 000 = 8300.1 → 8300.
    assert_eq!(gpu["jobs"]["measured_bps"], 6667, "{gpu}");
    assert_eq!(gpu["jobs"]["value_bps"], 8300, "{gpu}");
    // Benchmark: latest 960 against the first 1000 → 9600, full evidence.
    assert_eq!(gpu["benchmark"]["value_bps"], 9600, "{gpu}");
    // Combined: (5000·9422 + 3000·8300 + 2000·9600)/10 000 = 9121.
    assert_eq!(gpu["score_bps"], 9121, "{gpu}");
    assert_eq!(r["score_bps"], 9121, "one GPU: the provider's score is its");
    assert_eq!(r["trend"].as_array().unwrap().len(), 30, "{r}");
    let reasons: Vec<&str> = gpu["uptime"]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("25 Oct")),
        "what lowered it names the day: {reasons:?}"
    );
    // 26 Oct 01:00 in Berlin is outside 09:00–18:00: not listed now, and why.
    assert_eq!(gpu["listed"], false, "{gpu}");
    assert!(!gpu["not_listed"].as_array().unwrap().is_empty(), "{gpu}");

    let (code, table, _) = run_cli(
        &db.url,
        &[
            "--config",
            config,
            "--now",
            "2026-10-26T00:00:00Z",
            "reliability",
            "--provider",
            "prv_rel",
        ],
    );
    assert_eq!(code, 0);
    assert!(table.contains("91.21 %"), "{table}");
    let (code, out, _) = run_cli(&db.url, &["--format", "json", "verify"]);
    assert_eq!(code, 0, "{out}");
    super::common::assert_events_match_schemas(&db.store().await).await;

    // The same over HTTP, for the provider's own token only.
    let app = super::http_support::serve_db(
        db,
        "2026-10-26T00:00:00Z",
        settle::config::HttpConfig::default(),
    )
    .await;
    let token = app.token(Scope::Provider, Some("prv_rel")).await;
    let served = app
        .get_json(&token, "/v1/providers/prv_rel/reliability")
        .await;
    assert_eq!(served["score_bps"], 9121, "{served}");
    assert_eq!(
        served["gpus"][0]["uptime"]["measured_bps"], 9507,
        "{served}"
    );
    let r = app
        .get(Some(&token), "/v1/providers/someone-else/reliability")
        .await;
    assert_eq!(r.status(), 404);
}

/// The agent route: an `ingest` token reports its own provider's GPUs' online intervals and
/// nothing else; a `metering` token any GPU's; each interval answered on its own.
#[tokio::test]
async fn an_agent_reports_its_own_gpus_online_intervals_only() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("settle.toml");
    std::fs::write(&config, "").unwrap();
    let mut lines = Vec::new();
    for p in ["prv_a", "prv_b"] {
        lines.push(json!({"type": "provider.register", "provider_id": p, "name": "GPU Co", "email": "ops@gpu.test", "tier": "community", "schedule": "weekly"}));
        lines.push(json!({"type": "gpu.register", "gpu_id": format!("{p}-g"), "provider_id": p, "model": "H100-80GB"}));
    }
    let report = import(
        &db.url,
        config.to_str().unwrap(),
        "2026-11-01T00:00:00Z",
        &lines,
    );
    assert_eq!(statuses(&report), ["accepted"; 4], "{report}");
    let app = super::http_support::serve_db(
        db,
        "2026-11-02T00:00:00Z",
        settle::config::HttpConfig::default(),
    )
    .await;
    let agent = app.token(Scope::Ingest, Some("prv_a")).await;
    let metering = app.token(Scope::Metering, None).await;
    let interval = |id: &str, gpu: &str| json!({"report_id": id, "gpu_id": gpu, "started_at": "2026-11-01T10:00:00Z", "ended_at": "2026-11-01T10:05:00Z"});
    let post = |token: &str, body: Value| {
        let (app, token) = (&app, token.to_owned());
        async move {
            let r = app
                .post(Some(&token), "/v1/gpus/online", body.to_string())
                .await;
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let answer = post(
        &agent,
        json!({"intervals": [
            interval("o1", "prv_a-g"),
            interval("o2", "prv_b-g"),
            interval("o1", "prv_a-g"),
            {"report_id": "o3", "gpu_id": "prv_a-g"},
        ]}),
    )
    .await;
    let codes = status_codes(&answer);
    assert_eq!(
        codes,
        [
            ("accepted".to_owned(), Value::Null),
            ("rejected".to_owned(), json!("forbidden_gpu")),
            ("duplicate".to_owned(), Value::Null),
            ("rejected".to_owned(), json!("malformed_interval")),
        ],
        "{answer}"
    );
    // One batch, recorded together, still answered interval by interval: a repeat of an
    // interval of the same batch with other times is a conflict, an unknown GPU its own.
    let mut changed = interval("o2", "prv_b-g");
    changed["ended_at"] = json!("2026-11-01T10:06:00Z");
    let answer = post(
        &metering,
        json!({"intervals": [interval("o2", "prv_b-g"), changed, interval("o4", "gpu-nobody")]}),
    )
    .await;
    let codes = status_codes(&answer);
    assert_eq!(
        codes,
        [
            ("accepted".to_owned(), Value::Null),
            ("rejected".to_owned(), json!("conflict")),
            ("rejected".to_owned(), json!("unknown_gpu")),
        ],
        "{answer}"
    );
    assert_eq!(
        (
            &answer["accepted"],
            &answer["duplicate"],
            &answer["rejected"]
        ),
        (&json!(1), &json!(0), &json!(2)),
        "{answer}"
    );
}

/// Online intervals arriving out of order, overlapping and repeated, over several batches,
/// are kept as the spans of their union (what the score reads); the migration that made
/// the spans builds the same from the recorded intervals.
#[tokio::test]
async fn online_intervals_from_many_batches_are_read_as_their_union() {
    use settle::domain::event::{Schedule, Tier};
    use settle::domain::ids::{GpuId, GpuModel, ProviderId};
    use settle::ledger::registry::{RegisterGpu, RegisterProvider};
    use settle::ledger::{Actor, Applied};
    use settle::store::reliability::online_spans;

    let db = TestDb::new().await;
    let (ledger, _clock) = db.ledger_at("2026-11-02T00:00:00Z").await;
    let operator = Actor::operator("ops");
    ledger
        .register_provider(
            &RegisterProvider {
                provider_id: ProviderId::parse("prv_u").unwrap(),
                name: "Union GPU".into(),
                email: "ops@u.test".into(),
                tier: Tier::Community,
                schedule: Schedule::Weekly,
                payout_method: None,
            },
            &operator,
        )
        .await
        .unwrap();
    for g in ["gpu-u1", "gpu-u2"] {
        ledger
            .register_gpu(
                &RegisterGpu {
                    gpu_id: GpuId::parse(g).unwrap(),
                    provider_id: ProviderId::parse("prv_u").unwrap(),
                    model: GpuModel::parse("H100-80GB").unwrap(),
                },
                &operator,
            )
            .await
            .unwrap();
    }
    let report = |id: &str, gpu: &str, from: &str, to: &str| {
        settle::wire::reliability::parse(
            "gpu.online",
            json!({"type": "gpu.online", "report_id": id, "gpu_id": gpu,
                   "started_at": format!("2026-11-01T{from}:00Z"), "ended_at": format!("2026-11-01T{to}:00Z")}),
        )
        .unwrap()
    };
    let batches = [
        vec![
            report("a", "gpu-u1", "10:05", "10:10"),
            report("b", "gpu-u1", "10:20", "10:25"),
            report("x", "gpu-u2", "09:00", "09:30"),
        ],
        // Before, between (touching both sides), a repeat, an overlap, and a gap after.
        vec![
            report("c", "gpu-u1", "10:00", "10:05"),
            report("d", "gpu-u1", "10:10", "10:20"),
            report("a", "gpu-u1", "10:05", "10:10"),
        ],
        vec![
            report("e", "gpu-u1", "10:24", "10:40"),
            report("f", "gpu-u1", "11:00", "11:05"),
            report("y", "gpu-u2", "09:10", "09:20"),
        ],
    ];
    let mut statuses = Vec::new();
    for batch in &batches {
        for r in ledger
            .record_gpu_reports_for(batch, None, &operator)
            .await
            .unwrap()
        {
            statuses.push(r.unwrap());
        }
    }
    let accepted = statuses.iter().filter(|s| **s == Applied::Accepted).count();
    assert_eq!(
        (accepted, statuses.len()),
        (8, 9),
        "one repeat: {statuses:?}"
    );
    let ms =
        |t: &str| settle::domain::time::parse_rfc3339_ms(&format!("2026-11-01T{t}:00Z")).unwrap();
    let expected = (
        vec![(ms("10:00"), ms("10:40")), (ms("11:00"), ms("11:05"))],
        vec![(ms("09:00"), ms("09:30"))],
    );
    let store = &ledger.store;
    let spans = (
        online_spans(store, "gpu-u1", 0).await.unwrap(),
        online_spans(store, "gpu-u2", 0).await.unwrap(),
    );
    assert_eq!(spans, expected);
    // Only the spans ending after the instant asked for.
    assert_eq!(
        online_spans(store, "gpu-u1", ms("10:50")).await.unwrap(),
        vec![(ms("11:00"), ms("11:05"))]
    );
    // The migration builds the same spans from the intervals recorded.
    super::common::upgrade_through(&db, 15, &["DROP TABLE gpu_online_spans"]).await;
    let rebuilt = (
        online_spans(store, "gpu-u1", 0).await.unwrap(),
        online_spans(store, "gpu-u2", 0).await.unwrap(),
    );
    assert_eq!(rebuilt, expected);
}
