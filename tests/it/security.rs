//! Hostile input and secrets: SQL is parameterised everywhere (injection strings through
//! every free-text field are stored verbatim and harm nothing), and the treasury key never
//! appears in what the engine prints, even at trace level.

use crate::common;
use crate::common::Tables;

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
    let (ledger, _) = db.ledger_at("2026-11-24T00:00:00Z").await;
    for (i, evil) in INJECTIONS.iter().enumerate() {
        // Sealed as data, opened as it was written.
        let name = ledger
            .provider_record(&format!("inj_{i}"))
            .await
            .unwrap()
            .unwrap()
            .name;
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
    for b in settle::store::read::balances(&store, None).await.unwrap() {
        assert_eq!(b.payable_micro_usdc, 1_000_000, "{}", b.provider_id);
    }
    let report = settle::verify::verify(&store, &|_| {}).await.unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[test]
fn the_treasury_key_never_appears_in_output_or_logs() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::settle_command()
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

/// The operator documents a configuration key can be read from: the runbooks, the deployment
/// files and the README.
fn operator_documents() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for dir in ["ops/runbooks", "ops/deploy"] {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        entries.sort();
        files.extend(entries);
    }
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            (p.strip_prefix(root).unwrap().display().to_string(), text)
        })
        .collect()
}

/// Every configuration key the runbooks, the deployment files and the README name, as
/// `section.key` or `SETTLE_SECTION__KEY`, exists (the key-rotation runbook once named
/// `solana.treasury_keypair`, which does not).
#[test]
fn documents_name_only_configuration_keys_that_exist() {
    let defaults = toml::Table::try_from(settle::config::Config::default()).unwrap();
    let exists = |section: &str, key: &str| {
        defaults
            .get(section)
            .and_then(|s| s.as_table())
            .is_some_and(|s| s.contains_key(key))
    };
    let mut named = 0;
    let mut unknown = Vec::new();
    for (file, text) in operator_documents() {
        let words = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')));
        for word in words {
            let word = word.trim_end_matches('.');
            // An event type (`control.policy_set`) is written like a key; it is none.
            if settle::domain::event::EVENT_TYPES
                .iter()
                .any(|(event_type, _)| *event_type == word)
            {
                continue;
            }
            let (section, key) = if let Some(rest) = word.strip_prefix("SETTLE_") {
                match rest.split_once("__") {
                    Some((s, k)) if s != "SECTION" => {
                        (s.to_ascii_lowercase(), k.to_ascii_lowercase())
                    }
                    _ => continue,
                }
            } else {
                match word.split_once('.') {
                    Some((s, k))
                        if defaults.contains_key(s)
                            && !k.is_empty()
                            && k.chars().all(|c| {
                                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
                            }) =>
                    {
                        (s.to_owned(), k.to_owned())
                    }
                    _ => continue,
                }
            };
            named += 1;
            if !exists(&section, &key) {
                unknown.push(format!("{file}: {word}"));
            }
        }
    }
    assert!(unknown.is_empty(), "no such configuration key: {unknown:?}");
    assert!(named >= 10, "the scan found only {named} keys");
}

/// No deployment file hard-codes a password, secret or token: compose takes each from a
/// required variable (`${POSTGRES_PASSWORD:?…}`), a database URL's password is such a
/// reference too, and a script computes its own.
#[test]
fn deployment_files_hold_no_secrets() {
    let mut checked = 0;
    for (file, text) in operator_documents() {
        if !file.starts_with("ops/deploy/") || file.ends_with(".md") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.starts_with('#') {
                continue;
            }
            // KEY: value / KEY=value whose key names a password or secret.
            if let Some((key, value)) = line.split_once([':', '=']) {
                let key = key.trim().trim_start_matches("- ").to_ascii_uppercase();
                let value = value.trim().trim_matches(['"', '\'']);
                if (key.ends_with("PASSWORD") || key.ends_with("SECRET") || key.ends_with("TOKEN"))
                    && !value.is_empty()
                {
                    checked += 1;
                    // Compose: a required variable. A script may compute it (`$(…)`).
                    let from_outside = if file.ends_with(".yaml") {
                        value.starts_with("${") && value.contains(":?")
                    } else {
                        value.starts_with('$')
                    };
                    assert!(
                        from_outside,
                        "{file}:{}: {key} is hard-coded; take it from a required variable (${{{key}:?…}})",
                        n + 1
                    );
                }
            }
            // scheme://user:password@host
            if let Some(at) = line.find("://").map(|i| &line[i + 3..])
                && let Some((creds, _)) = at.split_once('@')
                && let Some((_, password)) = creds.split_once(':')
            {
                checked += 1;
                assert!(
                    password.starts_with("${") && password.contains(":?"),
                    "{file}:{}: a URL carries the password {password:?}",
                    n + 1
                );
            }
        }
    }
    assert!(checked >= 2, "found only {checked} secrets to check");
}
