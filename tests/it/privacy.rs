//! Personal data on the chain (SPEC §11): what `settle privacy report` finds in clear.

use crate::common;
use crate::common::Tables;
use crate::runs_support::*;
use std::sync::Arc;

use settle::privacy::keys::{KeyWrap, MasterKey};
use settle::privacy::report::{ClearProvider, clear_text};
use settle::privacy::vault::Privacy;
use settle::privacy::vault::{Vault, VaultError};
use settle::privacy::{Binding, ERASED, open_field};

/// A ledger written before values were sealed holds its providers' personal data in clear:
/// the report names each provider, the fields, and the events that hold them (its
/// registration, an update, the payouts that copied its bank details), and no provider
/// without any.
#[tokio::test]
async fn the_report_names_each_provider_with_personal_data_in_clear() {
    let mut w = World::new("2026-11-16T00:00:00Z").await;
    // A ledger booked by a release that did not seal personal values.
    w.ledger.privacy = Privacy::Clear;
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
    assert_eq!(
        same.open("prv_1", "email", &sealed).unwrap(),
        "ops@prv1.test"
    );
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
    assert_eq!(
        key.open("prv_1", "email", &sealed).unwrap(),
        "ops@prv1.test"
    );
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
        open_field(key.as_ref(), "prv_1", "email", &sealed)
            .unwrap()
            .into_text(),
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

/// Every byte the database holds, as text: on PostgreSQL every row of every table, on
/// SQLite the database file and its WAL (what a stolen copy shows).
async fn raw_text(w: &crate::bank_support::World) -> String {
    let pool = w.ledger.store.pool();
    if w.db.is_postgres() {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public'",
        )
        .fetch_all(pool)
        .await
        .unwrap();
        let mut text = String::new();
        for t in tables {
            let rows: Vec<String> = sqlx::query_scalar(&format!("SELECT t::text FROM \"{t}\" t"))
                .fetch_all(pool)
                .await
                .unwrap();
            text.push_str(&rows.join("\n"));
        }
        text
    } else {
        // Read by another process: closing a descriptor of the database file in this one
        // would drop the POSIX locks SQLite holds on it here.
        let path = w.db.url.trim_start_matches("sqlite://");
        let out = std::process::Command::new("cat")
            .arg(path)
            .arg(format!("{path}-wal"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The personal values the scenario below registers.
const PERSONAL: [&str; 8] = [
    "Provider eu_de",
    "ops@eu_de.test",
    "DE89370400440532013000",
    "Bee GmbH",
    "Provider us_biz",
    "021000021",
    "123456789",
    "Acme Compute LLC",
];

/// A SEPA and an ACH provider registered, one updated, both paid by a monthly run whose
/// payouts copy their bank details.
async fn paid_world() -> crate::bank_support::World {
    use crate::bank_support::*;
    let w = World::new("2026-11-20T00:00:00Z").await;
    w.provider("eu_de", SEPA_DE).await;
    w.provider("us_biz", ACH_BUSINESS).await;
    w.import(&[
        r#"{"type":"provider.update","provider_id":"us_biz","email":"pay@acme.test","update_id":"u1"}"#
            .to_owned(),
    ])
    .await;
    w.earn("eu_de", 50 * USDC, "2026-11-10T01:00:00Z").await;
    w.earn("us_biz", 30 * USDC, "2026-11-10T01:00:00Z").await;
    w.at("2026-11-30T12:00:00Z");
    w.fx("0.915").await;
    w.at("2026-12-01T00:05:00Z");
    w.monthly("2026-12").await;
    w
}

/// The raw `events` and projection tables hold no personal value in clear (searched byte
/// for byte), every read that needs one opens it: the provider's record (library, CLI and
/// HTTP), the bank files.
#[tokio::test]
async fn personal_values_are_sealed_on_the_chain_and_in_the_projections() {
    let w = paid_world().await;
    let raw = raw_text(&w).await;
    for value in PERSONAL.iter().chain(&["pay@acme.test"]) {
        assert!(!raw.contains(value), "{value} in clear in the database");
    }
    assert!(
        raw.contains("pd1:provider.registered:"),
        "sealed values are stored"
    );

    let de = w.ledger.provider_record("eu_de").await.unwrap().unwrap();
    assert_eq!(
        (de.name.as_str(), de.email.as_str()),
        ("Provider eu_de", "ops@eu_de.test")
    );
    let us = w.ledger.provider_record("us_biz").await.unwrap().unwrap();
    assert_eq!(us.email, "pay@acme.test", "the update, opened");
    assert_eq!(
        serde_json::to_value(&us.payout_method).unwrap(),
        serde_json::from_str::<serde_json::Value>(crate::bank_support::ACH_BUSINESS).unwrap()
    );

    // The bank files carry the details in clear: that is where they are used.
    w.at("2026-12-01T06:30:00Z");
    let report = settle::rails::bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let mut files = String::new();
    for b in &report.batches {
        files.push_str(&std::fs::read_to_string(&b.path).unwrap());
    }
    for value in [
        "DE89370400440532013000",
        "Bee GmbH",
        "021000021",
        "123456789",
    ] {
        assert!(files.contains(value), "{value} in the bank files");
    }
    let sepa = report
        .batches
        .iter()
        .find(|b| b.batch.rail == settle::domain::event::Rail::Sepa)
        .unwrap();
    crate::bank_support::assert_valid_pain001(&sepa.path);

    // The CLI shows the record opened, as JSON.
    let (code, out, err) = common::run_cli(
        &w.db.url,
        &["--format", "json", "provider", "show", "eu_de"],
    );
    assert_eq!(code, 0, "{err}");
    let shown: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown[0]["name"], "Provider eu_de");
    assert_eq!(shown[0]["payout_method"]["iban"], "DE89370400440532013000");
    w.check().await;
}

/// Erasure (SPEC §11): refused while a payout is in flight; then every read shows
/// `erased`, the money and `verify`/`rebuild` stay as they were, a new payout method is
/// refused, a later payout of the provider is failed by the bank batch with the reason,
/// and the key is destroyed exactly when the retention ends (simulated clock).
#[tokio::test]
async fn an_erased_provider_reads_erased_and_keeps_its_money_history() {
    use crate::bank_support::*;
    let w = paid_world().await;
    w.at("2026-12-01T06:30:00Z");
    let report = settle::rails::bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    let actor = w.actor();
    let refused = w.ledger.erase_provider("eu_de", &actor).await.unwrap_err();
    assert_eq!(refused.code(), "payout_in_flight", "{refused}");
    assert!(
        w.ledger
            .provider_record("eu_de")
            .await
            .unwrap()
            .unwrap()
            .name
            != ERASED
    );

    w.at("2026-12-03T09:00:00Z");
    for b in &report.batches {
        settle::rails::bank::mark_submitted(&w.ledger, &b.batch.batch_id, &actor)
            .await
            .unwrap();
        settle::rails::bank::mark_settled(&w.ledger, &b.batch.batch_id, &actor)
            .await
            .unwrap();
    }
    let before = (
        w.payable("eu_de").await,
        w.balance("eu_de", "provider:eu_de:paid").await,
    );
    let payouts_before = w.payouts_of("eu_de").await.len();
    w.at("2026-12-04T10:00:00Z");
    let erased = w.ledger.erase_provider("eu_de", &actor).await.unwrap();
    assert_eq!(erased.applied, settle::ledger::Applied::Accepted);
    let ten_years = 3_650 * 86_400_000_i64;
    let last_payout = settle::domain::time::parse_rfc3339_ms("2026-12-03T09:00:00Z").unwrap();
    assert_eq!(
        erased.destroy_after_ms,
        w.ledger.now_ms().max(last_payout) + ten_years,
        "ten years after its last payout (or the erasure, if later)"
    );
    let again = w.ledger.erase_provider("eu_de", &actor).await.unwrap();
    assert_eq!(again.applied, settle::ledger::Applied::Duplicate);

    let record = w.ledger.provider_record("eu_de").await.unwrap().unwrap();
    assert_eq!(
        (record.name.as_str(), record.email.as_str()),
        (ERASED, ERASED)
    );
    assert_eq!(record.payout_method, None);
    let (code, out, err) = common::run_cli(
        &w.db.url,
        &["--format", "json", "provider", "show", "eu_de"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()[0]["email"],
        ERASED
    );
    // The other provider is untouched.
    assert_eq!(
        w.ledger
            .provider_record("us_biz")
            .await
            .unwrap()
            .unwrap()
            .email,
        "pay@acme.test"
    );

    // The money history stays; the chain and the projections still agree.
    assert_eq!(
        (
            w.payable("eu_de").await,
            w.balance("eu_de", "provider:eu_de:paid").await
        ),
        before
    );
    assert_eq!(w.payouts_of("eu_de").await.len(), payouts_before);
    w.check().await;
    let (code, _, err) = common::run_cli(
        &w.db.url,
        &["--owner-database", w.db.owner_url(), "rebuild"],
    );
    assert_eq!(code, 0, "{err}");
    w.check().await;

    // A new payout method only by registering anew.
    let err = settle::wire::import::apply(
        &w.ledger,
        &settle::wire::import::parse_line(&format!(
            r#"{{"type":"provider.update","provider_id":"eu_de","payout_method":{SEPA_DE_NEW}}}"#
        ))
        .unwrap(),
        &actor,
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "provider_erased");

    // Earned after the erasure: the run decides no payout (no method).
    w.at("2026-12-20T00:00:00Z");
    w.earn("eu_de", 20 * USDC, "2026-12-10T01:00:00Z").await;
    w.at("2027-01-04T00:05:00Z");
    let run = w.monthly("2027-01").await;
    assert!(
        run.candidates
            .iter()
            .any(|c| c.provider_id == "eu_de" && c.decision.as_str() == "no_method"),
        "{:?}",
        run.candidates
    );

    // The key: kept until the retention ends, destroyed then, by the scheduler's pass.
    let due = erased.destroy_after_ms;
    w.clock.set(due - 1);
    assert!(w.ledger.destroy_due_keys().await.unwrap().is_empty());
    w.clock.set(due);
    assert_eq!(w.ledger.destroy_due_keys().await.unwrap(), ["eu_de"]);
    let row = settle::store::privacy::key_row(&w.ledger.store, "eu_de")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((row.wrapped, row.destroyed_at_ms), (None, Some(due)));
    w.check().await;
}

/// A payout created before the erasure and not yet in a bank file: the batch skips it with
/// the reason and its amount is payable again; a retention of 0 destroys the key once no
/// payout is open.
#[tokio::test]
async fn a_bank_batch_after_an_erasure_skips_the_provider_with_the_reason() {
    let w = paid_world().await;
    let actor = w.actor();
    let payable_before = w.payable("eu_de").await;
    let erased = w.ledger.erase_provider("eu_de", &actor).await.unwrap();
    assert_eq!(erased.applied, settle::ledger::Applied::Accepted);
    w.at("2026-12-01T06:30:00Z");
    let report = settle::rails::bank::generate_batches(&w.ledger, &w.bank, &w.actor())
        .await
        .unwrap();
    assert_eq!(report.failed.len(), 1, "{:?}", report.failed);
    assert!(
        report.failed[0]
            .reason
            .starts_with("provider_erased: provider eu_de was erased"),
        "{}",
        report.failed[0].reason
    );
    let paid = w.payouts_of("eu_de").await;
    assert_eq!(paid[0].status.to_string(), "failed");
    assert!(
        w.payable("eu_de").await > payable_before,
        "the amount is payable again"
    );
    assert_eq!(report.batches.len(), 1, "the ACH provider is paid");
    w.check().await;
}

/// A master key rotation (`settle privacy rotate --from OLD`) keeps every provider
/// readable under the new key, and the old one opens nothing.
#[tokio::test]
async fn a_master_key_rotation_keeps_every_provider_readable() {
    let w = paid_world().await;
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.key");
    std::fs::write(&old, format!("{}\n", common::TEST_MASTER_KEY)).unwrap();
    std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let new = MasterKey::generate();
    let new_file = dir.path().join("new.key");
    new.write_file(&new_file).unwrap();
    let new_hex = std::fs::read_to_string(&new_file).unwrap();

    let rotate = common::settle_command()
        .env("SETTLE_PRIVACY_MASTER_KEY", new_hex.trim())
        .args([
            "--database",
            &w.db.url,
            "--format",
            "json",
            "privacy",
            "rotate",
            "--from",
        ])
        .arg(&old)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&rotate.stdout);
    assert!(
        rotate.status.success(),
        "{}",
        String::from_utf8_lossy(&rotate.stderr)
    );
    assert!(!out.contains(new_hex.trim()), "no key printed");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()[0]["rewrapped"],
        3,
        "two providers' keys and the blind index's"
    );

    let rotated =
        w.ledger
            .clone()
            .with_privacy(Privacy::Sealing(settle::privacy::vault::Vault::new(
                w.ledger.store.clone(),
                Arc::new(new),
            )));
    for (id, email) in [("eu_de", "ops@eu_de.test"), ("us_biz", "pay@acme.test")] {
        assert_eq!(
            rotated.provider_record(id).await.unwrap().unwrap().email,
            email
        );
    }
    let stale = w.ledger.provider_record("eu_de").await.unwrap_err();
    assert_eq!(
        stale.code(),
        "key_unwrap_failed",
        "the old master key opens nothing"
    );
}

/// A changed ciphertext is detected: on the chain by `verify` (the hash covers it), in a
/// projection by the read that opens it (never shown as erased).
#[tokio::test]
async fn a_changed_ciphertext_is_detected() {
    let w = paid_world().await;
    let pool = w.ledger.store.pool();
    let email: String =
        sqlx::query_scalar("SELECT email FROM providers WHERE provider_id = 'eu_de'")
            .fetch_one(pool)
            .await
            .unwrap();
    let mut changed = email.clone().into_bytes();
    let last = changed.len() - 2;
    changed[last] = if changed[last] == b'A' { b'B' } else { b'A' };
    let changed = String::from_utf8(changed).unwrap();
    sqlx::query("UPDATE providers SET email = $1 WHERE provider_id = 'eu_de'")
        .bind(&changed)
        .execute(pool)
        .await
        .unwrap();
    let err = w.ledger.provider_record("eu_de").await.unwrap_err();
    assert_eq!(err.code(), "sealed_text_unreadable", "{err}");

    // The same change in the event: the chain no longer verifies.
    let payload: String = sqlx::query_scalar(
        "SELECT payload FROM events WHERE stream = 'provider:eu_de' AND seq = 1",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(payload.contains(&email));
    // A writer behind the engine, with the owner's rights: the append-only guard dropped
    // first.
    let owner = w.db.owner_store().await;
    let pool = owner.pool();
    let guards: &[&str] = if w.db.is_postgres() {
        &["DROP TRIGGER events_refuse_update_delete ON events"]
    } else {
        &[
            "DROP TRIGGER events_refuse_update",
            "DROP TRIGGER events_refuse_delete",
        ]
    };
    for guard in guards {
        sqlx::query(guard).execute(pool).await.unwrap();
    }
    sqlx::query("UPDATE events SET payload = $1 WHERE stream = 'provider:eu_de' AND seq = 1")
        .bind(payload.replace(&email, &changed))
        .execute(pool)
        .await
        .unwrap();
    let report = settle::verify::verify(&w.ledger.store, &|_| {})
        .await
        .unwrap();
    assert!(!report.ok(), "verify detects the changed ciphertext");
}

/// A gated change of bank details (SPEC §9) holds its new details sealed in its request
/// (command and summary); the same command finds its request again; the approver reads it
/// opened (library and CLI), and approving it books the new details, sealed again.
#[tokio::test]
async fn a_gated_change_of_bank_details_is_sealed_in_its_request() {
    use crate::bank_support::*;
    use settle::control::Submitted;
    let w = World::new("2026-11-20T00:00:00Z").await;
    w.provider("eu_de", SEPA_DE).await;
    // Another provider already paid to the account the change names.
    w.provider("eu_two", SEPA_DE_NEW).await;
    let line = format!(
        r#"{{"type":"provider.update","provider_id":"eu_de","payout_method":{SEPA_DE_NEW}}}"#
    );
    let command = settle::wire::import::parse_line(&line).unwrap();
    let config = settle::config::ControlConfig::default();
    let alice = settle::ledger::Actor::operator("alice");
    let propose = || settle::control::propose(&w.ledger, &config, &command, &alice, None);
    let Submitted::Pending(row) = propose().await.unwrap() else {
        panic!("a proposal waits")
    };
    let Submitted::Pending(again) = propose().await.unwrap() else {
        panic!("a proposal waits")
    };
    assert_eq!(
        again.approval_id, row.approval_id,
        "the same command finds its request"
    );
    assert!(
        !row.summary.contains("DE02120300000000202051"),
        "{}",
        row.summary
    );
    assert!(!raw_text(&w).await.contains("DE02120300000000202051"));

    let mut rows = [w.ledger.approval(&row.approval_id).await.unwrap()];
    w.ledger.open_approvals(&mut rows).await.unwrap();
    assert!(
        rows[0].summary.contains("DE02120300000000202051"),
        "{}",
        rows[0].summary
    );
    assert!(
        rows[0].summary.contains("DE89370400440532013000"),
        "the details in force"
    );
    assert!(
        rows[0]
            .summary
            .ends_with("; the same account is the payout method of eu_two too"),
        "the approver is told (by keyed digest): {}",
        rows[0].summary
    );
    let (code, out, err) = common::run_cli(
        &w.db.url,
        &[
            "--now",
            "2026-11-20T00:00:00Z",
            "--format",
            "json",
            "approvals",
            "show",
            &row.approval_id,
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("DE02120300000000202051"), "{out}");

    let (_, applied) = settle::control::approve(
        &w.ledger,
        &w.runs,
        &row.approval_id,
        &settle::ledger::Actor::operator("bob"),
        None,
    )
    .await
    .unwrap();
    assert_eq!(applied, settle::ledger::Applied::Accepted);
    let record = w.ledger.provider_record("eu_de").await.unwrap().unwrap();
    assert_eq!(
        serde_json::to_value(&record.payout_method).unwrap(),
        serde_json::from_str::<serde_json::Value>(SEPA_DE_NEW).unwrap()
    );
    let raw = raw_text(&w).await;
    for value in [
        "DE02120300000000202051",
        "DE89370400440532013000",
        "Bee GmbH",
    ] {
        assert!(!raw.contains(value), "{value} in clear");
    }
    // Both are paid to one account now; erased, a provider's digest is gone with it.
    let new: settle::domain::event::PayoutMethod = serde_json::from_str(SEPA_DE_NEW).unwrap();
    assert_eq!(
        w.ledger.providers_paid_to("eu_de", &new).await.unwrap(),
        ["eu_two"]
    );
    assert_eq!(
        w.ledger.providers_paid_to("eu_two", &new).await.unwrap(),
        ["eu_de"]
    );
    w.ledger
        .erase_provider("eu_two", &settle::ledger::Actor::operator("carol"))
        .await
        .unwrap();
    assert!(
        w.ledger
            .providers_paid_to("eu_de", &new)
            .await
            .unwrap()
            .is_empty()
    );
    w.check().await;
}

/// Over HTTP: the provider reads its own record opened; an admin erases it
/// (`POST /v1/admin/providers/{id}/erase`), after which the record reads `erased`; another
/// provider's token is refused.
#[tokio::test]
async fn the_api_shows_a_providers_record_and_erases_it() {
    use crate::http_support::*;
    let app = spawn_app("2026-11-20T00:00:00Z").await;
    let own = app
        .token(settle::auth::Scope::Provider, Some("prv_a"))
        .await;
    let admin = app.token(settle::auth::Scope::Admin, None).await;
    let other = app
        .token(settle::auth::Scope::Provider, Some("prv_b"))
        .await;
    let record = app.get_json(&own, "/v1/providers/prv_a").await;
    assert_eq!(record["name"], "Acme GPU");
    assert_eq!(record["email"], "ops@acme.test");
    assert_eq!(record["erased"], false);
    assert_eq!(
        app.get(Some(&other), "/v1/providers/prv_a").await.status(),
        404,
        "another provider's record answers as an unknown one"
    );

    let r = app
        .post(Some(&own), "/v1/admin/providers/prv_a/erase", "")
        .await;
    assert_eq!(r.status(), 403, "a provider cannot erase");
    let r = app
        .post(Some(&admin), "/v1/admin/providers/prv_a/erase", "")
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let again = app
        .post(Some(&admin), "/v1/admin/providers/prv_a/erase", "")
        .await;
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!(again["status"], "duplicate");
    let record = app.get_json(&own, "/v1/providers/prv_a").await;
    assert_eq!(
        (&record["name"], &record["email"], &record["erased"]),
        (
            &serde_json::json!("erased"),
            &serde_json::json!("erased"),
            &serde_json::json!(true)
        )
    );
    assert_eq!(
        app.get_json(&admin, "/v1/providers/prv_b").await["name"],
        "Bravo GPU"
    );
    let r = app
        .post(Some(&admin), "/v1/admin/providers/prv_nope/erase", "")
        .await;
    assert_problem(r, 404, "unknown_provider").await;
}
