//! Personal data on the chain (SPEC §11): what `settle privacy report` finds in clear.

use crate::common;
use crate::runs_support::*;
use std::sync::Arc;

use settle::privacy::keys::{KeyWrap, MasterKey};
use settle::privacy::report::{ClearProvider, clear_text};
use settle::privacy::vault::{Vault, VaultError};
use settle::privacy::{Binding, ERASED, open_field};

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

fn code(e: VaultError) -> &'static str {
    match e {
        VaultError::Privacy(p) => p.code,
        VaultError::Store(s) => panic!("storage: {s}"),
    }
}

const AT: Binding<'static> = Binding {
    provider_id: "prv_1",
    event_type: "provider.registered",
    field: "email",
};

/// A provider's data key is made once and found again by any process with the master key;
/// a master key rotation re-wraps it, after which the old master key opens nothing and the
/// values sealed before still open.
#[tokio::test]
async fn data_keys_are_kept_wrapped_and_survive_a_master_key_rotation() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    let store = w.ledger.store.clone();
    let old: Arc<dyn KeyWrap> = Arc::new(MasterKey::generate());
    let vault = Vault::new(store.clone(), old.clone());
    let key = vault.key("prv_1", 1).await.unwrap().expect("a key");
    let sealed = key.seal(&AT, "ops@prv1.test");
    let again = Vault::new(store.clone(), old.clone());
    let same = again.key("prv_1", 2).await.unwrap().expect("the same key");
    assert_eq!(same.open(&AT, &sealed).unwrap(), "ops@prv1.test");
    vault
        .key("prv_2", 3)
        .await
        .unwrap()
        .expect("another provider's key");

    let stranger = Vault::new(store.clone(), Arc::new(MasterKey::generate()));
    assert_eq!(
        code(stranger.key("prv_1", 4).await.err().unwrap()),
        "key_unwrap_failed",
        "never a new key in place of one it cannot open"
    );

    let new: Arc<dyn KeyWrap> = Arc::new(MasterKey::generate());
    let rotated = Vault::new(store.clone(), new.clone());
    assert_eq!(rotated.rotate_from(old.as_ref()).await.unwrap(), 2);
    assert_eq!(
        rotated.rotate_from(old.as_ref()).await.unwrap(),
        0,
        "done once"
    );
    let key = rotated.key("prv_1", 5).await.unwrap().unwrap();
    assert_eq!(key.open(&AT, &sealed).unwrap(), "ops@prv1.test");
    assert_eq!(
        code(Vault::new(store, old).key("prv_1", 6).await.err().unwrap()),
        "key_unwrap_failed",
        "the old master key opens nothing any more"
    );
}

/// Erasing a provider hides its values at once and destroys its key exactly when due;
/// after that no process can open them, while clear text of an older ledger is untouched.
#[tokio::test]
async fn an_erased_providers_values_read_erased_and_its_key_is_destroyed_when_due() {
    let w = World::new("2026-11-16T00:00:00Z").await;
    let store = w.ledger.store.clone();
    let master: Arc<dyn KeyWrap> = Arc::new(MasterKey::generate());
    let vault = Vault::new(store.clone(), master.clone());
    let sealed = vault
        .key("prv_1", 0)
        .await
        .unwrap()
        .unwrap()
        .seal(&AT, "ops@prv1.test");
    vault.key("prv_2", 0).await.unwrap().unwrap();

    let (now, due) = (1_000, 1_000 + 3_650 * 86_400_000_i64);
    vault.erase("prv_1", now, due).await.unwrap();
    let key = vault.key("prv_1", now).await.unwrap();
    assert!(key.is_none(), "erased at once");
    assert_eq!(
        open_field(key.as_ref(), &AT, &sealed).unwrap().into_text(),
        ERASED
    );
    assert_eq!(
        vault.destroy_due(due - 1).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(vault.destroy_due(due).await.unwrap(), ["prv_1"]);
    assert_eq!(
        vault.destroy_due(due + 1).await.unwrap(),
        Vec::<String>::new()
    );
    let row = settle::store::privacy::key_row(&store, "prv_1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (row.wrapped, row.erased_at_ms, row.destroyed_at_ms),
        (None, Some(now), Some(due))
    );
    assert!(
        vault.key("prv_2", due).await.unwrap().is_some(),
        "another provider keeps its key"
    );

    // Erased with a retention of 0: destroyed by the next pass.
    vault.erase("prv_2", due, due).await.unwrap();
    assert_eq!(vault.destroy_due(due).await.unwrap(), ["prv_2"]);
    // A provider erased before it had a key (an older ledger's) gets a row without one.
    vault.erase("prv_old", due, due).await.unwrap();
    assert!(vault.key("prv_old", due).await.unwrap().is_none());
}
