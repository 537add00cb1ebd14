//! Hostile input and secrets: SQL is parameterised everywhere (injection strings through
//! every free-text field are stored verbatim and harm nothing), and the treasury key never
//! appears in what the engine prints, even at trace level.

mod common;

use common::{TestDb, run_cli};
use serde_json::{Value, json};
use sqlx::Row;

const INJECTIONS: &[&str] = &[
    "Robert'); DROP TABLE events;--",
    "x' OR '1'='1",
    "\"; DELETE FROM providers; --",
    "1; UPDATE account_balances SET balance_micro_usdc = 999999999",
    "$1 $2 ?1 :name @p",
    "\\'; TRUNCATE events; --",
];

#[tokio::test]
async fn injection_strings_in_every_text_field_are_data() {
    let db = TestDb::new().await;
    let mut lines = Vec::new();
    for (i, evil) in INJECTIONS.iter().enumerate() {
        let p = format!("inj_{i}");
        lines.push(json!({"type": "provider.register", "provider_id": p, "name": evil, "email": format!("a{i}@x.test"), "tier": "community", "schedule": "weekly",
            "payout_method": {"kind": "sepa", "iban": "DE89370400440532013000", "holder": format!("Holder {i} O'Brien")}}));
        lines.push(json!({"type": "gpu.register", "gpu_id": format!("{p}-g"), "provider_id": p, "model": "H100-80GB"}));
        lines.push(json!({"type": "rate.set", "provider_id": p, "model": "H100-80GB", "rate_usdc_per_hour": "2.49", "effective_from": "2026-01-01T00:00:00Z"}));
        lines.push(json!({"type": "usage", "event_id": format!("{p}-u"), "provider_id": p, "gpu_id": format!("{p}-g"), "started_at": "2026-11-23T10:00:00Z", "ended_at": "2026-11-23T11:00:00Z", "rate_usdc_per_hour": "2.49"}));
        lines.push(json!({"type": "usage.void", "event_id": format!("{p}-u"), "reason": evil}));
        lines.push(json!({"type": "adjustment", "adjustment_id": format!("adj-{i}"), "provider_id": p, "amount_usdc": "1.000000", "reason": evil, "reference": evil}));
        // Ids are grammar-checked: an injection string as an id is a clean rejection.
        lines.push(
            json!({"type": "gpu.register", "gpu_id": evil, "provider_id": p, "model": "H100-80GB"}),
        );
        lines.push(json!({"type": "provider.update", "provider_id": p, "name": format!("{evil} (renamed)")}));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("evil.ndjson");
    std::fs::write(
        &file,
        lines
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let (code, out, err) = run_cli(
        &db.url,
        &[
            "--now",
            "2026-11-24T00:00:00Z",
            "--format",
            "json",
            "import",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "the id lines are rejected: {err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["totals"]["rejected"], INJECTIONS.len(), "{out}");
    for l in report["lines"].as_array().unwrap() {
        if l["status"] == "rejected" {
            assert_eq!(l["code"], "invalid_gpu_id");
        }
    }

    let store = db.store().await;
    let pool = store.pool();
    for (i, evil) in INJECTIONS.iter().enumerate() {
        let name: String = sqlx::query("SELECT name FROM providers WHERE provider_id = $1")
            .bind(format!("inj_{i}"))
            .fetch_one(pool)
            .await
            .unwrap()
            .get(0);
        assert_eq!(name, format!("{evil} (renamed)"), "stored verbatim");
        let payload: String = sqlx::query("SELECT payload FROM events WHERE idem_key = $1")
            .bind(format!("adj:adj-{i}"))
            .fetch_one(pool)
            .await
            .unwrap()
            .get(0);
        let payload: Value = serde_json::from_str(&payload).unwrap();
        assert_eq!(payload["reason"], *evil);
        assert_eq!(payload["reference"], *evil);
    }
    let providers: i64 = sqlx::query("SELECT COUNT(*) FROM providers")
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        providers,
        INJECTIONS.len() as i64,
        "no table was dropped or emptied"
    );
    // Each provider: usage voided (net 0) plus a 1 USDC adjustment.
    for b in settle::store::read::balances(pool, None).await.unwrap() {
        assert_eq!(b.payable_micro_usdc, 1_000_000, "{}", b.provider_id);
    }
    let report = settle::verify::verify(&store, &|_| {}).await.unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[test]
fn the_treasury_key_never_appears_in_output_or_logs() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::settle_bin())
        .args(["--format", "json", "demo", "--dir"])
        .arg(dir.path())
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = [
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ]
    .concat();
    assert!(
        printed.len() > 10_000,
        "trace logging produced output to search"
    );
    let key_file = dir.path().join("chain").join("treasury.json");
    let bytes: Vec<u8> =
        serde_json::from_str(&std::fs::read_to_string(&key_file).unwrap()).unwrap();
    assert_eq!(bytes.len(), 64);
    let secret = &bytes[..32];
    let forms = [
        bs58::encode(&bytes).into_string(),
        bs58::encode(secret).into_string(),
        hex::encode(secret),
        serde_json::to_string(&bytes).unwrap(),
        serde_json::to_string(&secret.to_vec()).unwrap(),
        format!("{:?}", secret),
    ];
    for form in forms {
        assert!(
            !printed.contains(&form),
            "the treasury secret leaked in the form {form}"
        );
    }
    // The key file itself is private.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "treasury key file mode {mode:o}");
    }
}
