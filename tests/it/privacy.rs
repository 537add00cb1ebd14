//! Personal data on the chain (SPEC §11): what `settle privacy report` finds in clear.

use crate::common;
use crate::runs_support::*;
use settle::privacy::report::{ClearProvider, clear_text};

/// A ledger written before values were sealed holds its providers' personal data in clear:
/// the report names each provider, the fields, and the events that hold them (its
/// registration, an update, the payouts that copied its bank details), and no provider
/// without any.
#[tokio::test]
async fn the_report_names_each_provider_with_personal_data_in_clear() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    w.provider("e", "weekly", Some(SEPA)).await;
    w.provider("u", "weekly", Some(ACH)).await;
    w.at("2026-11-18T00:00:00Z");
    w.update("u", r#""email":"new@u.test""#).await;
    w.earn("e", 50_000_000, "2026-11-17T01:00:00Z").await;
    w.at("2026-11-22T12:00:00Z");
    w.fx("0.9").await;
    w.at("2026-11-23T00:05:00Z");
    w.weekly("2026-11-23").await;

    let found = clear_text(&w.ledger.store).await.unwrap();
    let of = |id: &str| -> &ClearProvider {
        found
            .iter()
            .find(|p| p.provider_id == id)
            .unwrap_or_else(|| panic!("{id} in {found:?}"))
    };
    let e = of("e");
    assert_eq!(
        e.fields,
        [
            "email",
            "method.holder",
            "method.iban",
            "name",
            "payout_method.holder",
            "payout_method.iban"
        ],
        "registered, then copied into its payout"
    );
    assert_eq!(e.events, 2, "provider.registered and payout.created");
    let u = of("u");
    assert_eq!(
        u.fields,
        [
            "email",
            "name",
            "payout_method.account",
            "payout_method.holder",
            "payout_method.routing"
        ]
    );
    assert_eq!(u.events, 2, "provider.registered and provider.updated");
    assert_eq!(found.len(), 2, "{found:?}");

    // The command prints the same, as JSON for scripts; no value, only field names.
    let (code, out, err) = common::run_cli(&w.db.url, &["--format", "json", "privacy", "report"]);
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        rows[0],
        serde_json::json!({"provider_id": "e", "events": 2,
            "fields": "email method.holder method.iban name payout_method.holder payout_method.iban"})
    );
    assert_eq!(rows.as_array().map(Vec::len), Some(2));
    for value in [
        "DE89370400440532013000",
        "Bee GmbH",
        "ops@e.test",
        "123456789",
    ] {
        assert!(!out.contains(value), "{value} printed");
    }
}

/// `settle privacy keygen` writes a master key only its owner can read, prints its id and
/// never the key, and never overwrites a key.
#[test]
fn keygen_writes_a_private_master_key_once() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("master.key");
    let file = path.to_str().unwrap();
    let (code, out, err) =
        common::run_cli("sqlite::memory:", &["privacy", "keygen", "--out", file]);
    assert_eq!(code, 0, "{err}");
    let key = std::fs::read_to_string(&path).unwrap();
    assert_eq!(key.trim().len(), 64);
    assert!(!out.contains(key.trim()), "the key is not printed");
    assert_eq!(out.trim().len(), 16, "the key id: {out}");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let (again, _, err) = common::run_cli("sqlite::memory:", &["privacy", "keygen", "--out", file]);
    assert_ne!(again, 0);
    assert!(err.contains("never overwritten"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), key);
}
