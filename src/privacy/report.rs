//! Which providers still have personal data in clear on the chain (`settle privacy
//! report`). A ledger written before values were sealed keeps its clear text: the chain
//! cannot change without breaking. The report names, per provider, the fields it holds in
//! clear and how many events hold them, so an operator knows what an erasure request
//! cannot reach (README: starting a new ledger from a verified export).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::is_sealed;
use crate::store::{Store, StoreError, privacy as rows};

/// The event types whose payloads carry personal fields.
pub const PERSONAL_EVENT_TYPES: &[&str] = &[
    "provider.registered",
    "provider.updated",
    "payout.created",
    "approval.requested",
];

/// The fields of a payout method that are personal (SPEC §11: account holders, IBANs,
/// account and routing numbers, the wallet a person is paid to). A BIC, an account type
/// and an entity kind name no one.
const METHOD_FIELDS: &[&str] = &["wallet", "iban", "holder", "routing", "account"];

/// Events read per statement.
const EVENTS_PER_PAGE: i64 = 1_000;

/// One provider's personal data in clear on the chain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClearProvider {
    pub provider_id: String,
    /// Events holding at least one of its personal values in clear.
    pub events: u64,
    /// The fields, as paths in those events (`email`, `payout_method.iban`,
    /// `method.holder`, `command.payout_method.iban`), sorted.
    pub fields: Vec<String>,
}

/// The personal fields `payload` (an event of `event_type`) holds in clear, with the
/// provider they belong to; `None` when it holds none.
pub(crate) fn clear_fields(
    event_type: &str,
    payload: &Value,
) -> Option<(String, BTreeSet<String>)> {
    let mut fields = BTreeSet::new();
    let provider = match event_type {
        "provider.registered" | "provider.updated" => {
            personal(payload, "", &mut fields);
            payload.get("provider_id")
        }
        "payout.created" => {
            method(payload.get("method"), "method", &mut fields);
            payload.get("provider_id")
        }
        "approval.requested" => {
            // The command a second operator approves, as an import line: a provider's
            // registration or update carries the same fields.
            let command = payload
                .get("command")
                .and_then(Value::as_str)
                .and_then(|c| serde_json::from_str::<Value>(c).ok())?;
            personal(&command, "command.", &mut fields);
            // Its summary shows the same values beside those in force.
            if !fields.is_empty() && in_clear(payload.get("summary")) {
                fields.insert("summary".to_owned());
            }
            let provider = payload
                .get("provider_id")
                .filter(|p| p.is_string())
                .or_else(|| command.get("provider_id"));
            return Some((provider?.as_str()?.to_owned(), fields)).filter(|(_, f)| !f.is_empty());
        }
        _ => None,
    }?;
    Some((provider.as_str()?.to_owned(), fields)).filter(|(_, f)| !f.is_empty())
}

/// A registry entry's personal fields: name, email, the payout method's.
fn personal(entry: &Value, prefix: &str, fields: &mut BTreeSet<String>) {
    for field in ["name", "email"] {
        if in_clear(entry.get(field)) {
            fields.insert(format!("{prefix}{field}"));
        }
    }
    method(
        entry.get("payout_method"),
        &format!("{prefix}payout_method"),
        fields,
    );
}

fn method(method: Option<&Value>, at: &str, fields: &mut BTreeSet<String>) {
    let Some(method) = method.filter(|m| m.is_object()) else {
        return;
    };
    for field in METHOD_FIELDS {
        if in_clear(method.get(*field)) {
            fields.insert(format!("{at}.{field}"));
        }
    }
}

/// A non-empty string that is not a sealed value.
fn in_clear(value: Option<&Value>) -> bool {
    value
        .and_then(Value::as_str)
        .is_some_and(|text| !text.trim().is_empty() && !is_sealed(text))
}

/// Every provider with personal data in clear on the chain, by provider id: the events of
/// [`PERSONAL_EVENT_TYPES`] read a page at a time.
///
/// # Errors
/// The store's.
pub async fn clear_text(store: &Store) -> Result<Vec<ClearProvider>, StoreError> {
    let mut found: BTreeMap<String, (u64, BTreeSet<String>)> = BTreeMap::new();
    let mut after: Option<(String, i64)> = None;
    loop {
        let page =
            rows::events_of_types(store, PERSONAL_EVENT_TYPES, after.as_ref(), EVENTS_PER_PAGE)
                .await?;
        let Some(last) = page.last() else { break };
        after = Some((last.stream.clone(), last.seq));
        for event in &page {
            let Ok(payload) = serde_json::from_str::<Value>(&event.payload) else {
                continue;
            };
            if let Some((provider, fields)) = clear_fields(&event.event_type, &payload) {
                let entry = found.entry(provider).or_default();
                entry.0 += 1;
                entry.1.extend(fields);
            }
        }
    }
    Ok(found
        .into_iter()
        .map(|(provider_id, (events, fields))| ClearProvider {
            provider_id,
            events,
            fields: fields.into_iter().collect(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(event_type: &str, payload: Value) -> Option<(String, Vec<String>)> {
        clear_fields(event_type, &payload).map(|(p, f)| (p, f.into_iter().collect()))
    }

    #[test]
    fn personal_fields_in_clear_are_named_and_sealed_ones_are_not() {
        let registered = json!({"provider_id": "prv_1", "name": "Jürgen", "email": "j@example.com",
            "tier": "community", "schedule": "weekly", "status": "active",
            "payout_method": {"kind": "sepa", "iban": "DE89370400440532013000", "bic": "COBADEFFXXX", "holder": "Jürgen"}});
        assert_eq!(
            fields("provider.registered", registered),
            Some((
                "prv_1".into(),
                vec![
                    "email".into(),
                    "name".into(),
                    "payout_method.holder".into(),
                    "payout_method.iban".into()
                ]
            ))
        );
        let sealed = json!({"provider_id": "prv_1", "name": "pd1:AAAA", "email": "pd1:BBBB",
            "payout_method": {"kind": "solana", "wallet": "pd1:CCCC"}});
        assert_eq!(fields("provider.updated", sealed), None);
        let tier_only = json!({"provider_id": "prv_1", "tier": "enterprise"});
        assert_eq!(fields("provider.updated", tier_only), None);
        let payout = json!({"payout_id": "po_1", "provider_id": "prv_2",
            "method": {"kind": "ach", "routing": "091000019", "account": "12345", "account_type": "checking", "holder": "A", "entity": "individual"}});
        assert_eq!(
            fields("payout.created", payout),
            Some((
                "prv_2".into(),
                vec![
                    "method.account".into(),
                    "method.holder".into(),
                    "method.routing".into()
                ]
            ))
        );
        let command = json!({"type": "provider.update", "provider_id": "prv_3",
            "payout_method": {"kind": "solana", "wallet": "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}}).to_string();
        let approval = json!({"approval_id": "apr_1", "kind": "payout_method", "command": command,
            "summary": "…", "provider_id": "prv_3"});
        assert_eq!(
            fields("approval.requested", approval),
            Some((
                "prv_3".into(),
                vec!["command.payout_method.wallet".into(), "summary".into()]
            )),
            "the summary shows the values it sets"
        );
        let fee = json!({"approval_id": "apr_2", "kind": "fee_schedule",
            "command": json!({"type": "fee_schedule.set", "tier": "community"}).to_string(), "provider_id": null});
        assert_eq!(fields("approval.requested", fee), None);
        assert_eq!(
            fields("usage.recorded", json!({"provider_id": "p", "name": "x"})),
            None
        );
    }
}
