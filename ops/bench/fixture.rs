//! What several benchmarks set up the same way (included with `#[path]`, as `peak.rs`):
//! an API token, a provider's price.
#![allow(dead_code)]

use settle::auth::{NewToken, Scope, create_token};
use settle::domain::ids::{GpuModel, ProviderId};
use settle::domain::money::Rate;
use settle::ledger::registry::SetRate;
use settle::ledger::{Actor, Ledger};
use settle::store::Store;

/// A new API token of `scope` (a provider token for `provider`) named `name`, made by the
/// operator `bench` at `now_ms`: its secret.
pub async fn token(
    store: &Store,
    scope: Scope,
    provider: Option<&str>,
    name: &str,
    now_ms: i64,
) -> String {
    create_token(
        store,
        &NewToken {
            scope,
            provider_id: provider.map(|p| ProviderId::parse(p).expect("provider id")),
            name: name.into(),
            label: "bench".into(),
            expires_in_days: None,
            created_by: Actor::operator("bench"),
            needs_approval: false,
        },
        &settle::config::AuthConfig::default(),
        now_ms,
    )
    .await
    .expect("token")
    .token
}

/// Sets `provider`'s price of `model` to `rate` USDC an hour from `from_ms`, as `operator`.
pub async fn price(
    ledger: &Ledger,
    provider: &ProviderId,
    model: &str,
    rate: &str,
    from_ms: i64,
    operator: &Actor,
) {
    ledger
        .set_rate(
            &SetRate {
                provider_id: provider.clone(),
                model: GpuModel::parse(model).expect("model"),
                rate: Rate::parse(rate).expect("rate"),
                effective_from_ms: from_ms,
            },
            operator,
        )
        .await
        .expect("set rate");
}

/// The benchmarks' master key (fixed, so every phase of a benchmark, each its own process,
/// opens what another sealed).
const MASTER_KEY: &str = "be4c4be4c4be4c4be4c4be4c4be4c4be4c4be4c4be4c4be4c4be4c4be4c4be4c";

/// A ledger's sealing of personal values (SPEC §11) under [`MASTER_KEY`], as every `settle`
/// command seals them.
pub fn sealing(store: &Store) -> settle::privacy::vault::Privacy {
    let master = settle::privacy::keys::MasterKey::from_hex(MASTER_KEY, "the benchmarks' key")
        .expect("a master key");
    settle::privacy::vault::Privacy::Sealing(settle::privacy::vault::Vault::new(
        store.clone(),
        std::sync::Arc::new(master),
    ))
}
