//! Which values of the ledger are personal (SPEC §11), sealed on their way into an event
//! and opened on their way out to a read, a bank file, the Solana payer or an approver.
//!
//! A provider's name and email, and in its payout method the wallet, IBAN, account holder,
//! ACH routing and account numbers. The method's kind, BIC, account type and entity stay
//! in clear: they name a bank or a category, not a person, and runs decide by the rail.
//! Every value is bound to its provider, the event type it was sealed in and its field
//! (`name`, `email`, `payout_method.iban`, …); a payout's method snapshot is the
//! provider's sealed method copied as it is, so it opens under the same fields.

use super::{Binding, DataKey, Opened, PrivacyError, open_field};
use crate::domain::event::{EventBody, PayoutMethod};
use crate::domain::provider::ProviderRecord;

/// The personal fields of a payout method, each with the field it is sealed for.
fn method_fields(method: &mut PayoutMethod) -> Vec<(&'static str, &mut String)> {
    match method {
        PayoutMethod::Solana { wallet } => vec![("payout_method.wallet", wallet)],
        PayoutMethod::Sepa { iban, holder, .. } => vec![
            ("payout_method.iban", iban),
            ("payout_method.holder", holder),
        ],
        PayoutMethod::Ach {
            routing,
            account,
            holder,
            ..
        } => vec![
            ("payout_method.routing", routing),
            ("payout_method.account", account),
            ("payout_method.holder", holder),
        ],
    }
}

/// The digest that stands for the account `method` pays to (SPEC §11: uniqueness checks
/// use a keyed hash): the wallet, the IBAN, or the ACH routing and account numbers.
pub(crate) fn method_digest(index: &super::BlindIndex, method: &PayoutMethod) -> String {
    match method {
        PayoutMethod::Solana { wallet } => index.digest("wallet", wallet),
        PayoutMethod::Sepa { iban, .. } => index.digest("iban", iban),
        PayoutMethod::Ach {
            routing, account, ..
        } => index.digest("ach", &format!("{routing}:{account}")),
    }
}

fn seal_in_place(key: &DataKey, binding: &Binding<'_>, value: &mut String) {
    *value = key.seal(binding, value);
}

/// Seals `method`'s personal fields for `provider_id` in an event of `event_type`.
pub(crate) fn seal_method(
    key: &DataKey,
    provider_id: &str,
    event_type: &str,
    method: &mut PayoutMethod,
) {
    for (field, value) in method_fields(method) {
        let binding = Binding {
            provider_id,
            event_type,
            field,
        };
        seal_in_place(key, &binding, value);
    }
}

/// Seals the personal fields of a provider's registry event (`provider.registered`,
/// `provider.updated`) with the provider's key; any other event is left as it is (a
/// payout's method is the provider's, sealed already).
pub(crate) fn seal_event(key: &DataKey, body: &mut EventBody) {
    let event_type = body.event_type();
    let (provider_id, name, email, method) = match body {
        EventBody::ProviderRegistered(p) => (
            p.provider_id.clone(),
            Some(&mut p.name),
            Some(&mut p.email),
            p.payout_method.as_mut(),
        ),
        EventBody::ProviderUpdated(u) => (
            u.provider_id.clone(),
            u.name.as_mut(),
            u.email.as_mut(),
            u.payout_method.as_mut(),
        ),
        _ => return,
    };
    for (field, value) in [("name", name), ("email", email)] {
        if let Some(value) = value {
            let binding = Binding {
                provider_id: &provider_id,
                event_type,
                field,
            };
            seal_in_place(key, &binding, value);
        }
    }
    if let Some(method) = method {
        seal_method(key, &provider_id, event_type, method);
    }
}

fn open_in_place(
    key: Option<&DataKey>,
    provider_id: &str,
    field: &str,
    value: &mut String,
) -> Result<bool, PrivacyError> {
    let opened = open_field(key, provider_id, field, value)?;
    let erased = opened == Opened::Erased;
    *value = opened.into_text();
    Ok(erased)
}

/// Opens `method`'s personal fields of `provider_id` with its key; without one (erased)
/// they read `erased`. Whether any did.
///
/// # Errors
/// `sealed_text_unreadable` or `sealed_text_invalid`: a value that does not open (changed,
/// or moved from another provider or field), never passed off as erased.
pub(crate) fn open_method(
    key: Option<&DataKey>,
    provider_id: &str,
    method: &mut PayoutMethod,
) -> Result<bool, PrivacyError> {
    let mut erased = false;
    for (field, value) in method_fields(method) {
        erased |= open_in_place(key, provider_id, field, value)?;
    }
    Ok(erased)
}

/// Opens a provider record's personal fields (as [`open_method`]); whether any read
/// `erased`.
///
/// # Errors
/// As [`open_method`].
pub(crate) fn open_record(
    key: Option<&DataKey>,
    record: &mut ProviderRecord,
) -> Result<bool, PrivacyError> {
    let id = record.provider_id.clone();
    let mut erased = open_in_place(key, &id, "name", &mut record.name)?;
    erased |= open_in_place(key, &id, "email", &mut record.email)?;
    if let Some(method) = &mut record.payout_method {
        erased |= open_method(key, &id, method)?;
    }
    Ok(erased)
}

/// The event type an approval request's values are sealed in.
const REQUEST: &str = "approval.requested";

/// The personal fields of an import line (a provider's registration or update), each with
/// the field it is sealed for.
fn line_fields(line: &mut serde_json::Value) -> Vec<(String, &mut String)> {
    let mut out = Vec::new();
    let Some(object) = line.as_object_mut() else {
        return out;
    };
    for (name, value) in object.iter_mut() {
        match (name.as_str(), value) {
            ("name" | "email", serde_json::Value::String(text)) => out.push((name.clone(), text)),
            ("payout_method", serde_json::Value::Object(method)) => {
                for (field, value) in method.iter_mut() {
                    if let (
                        "wallet" | "iban" | "holder" | "routing" | "account",
                        serde_json::Value::String(text),
                    ) = (field.as_str(), value)
                    {
                        out.push((format!("payout_method.{field}"), text));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether an import line sets a personal value (a name, an email, a payout method).
pub(crate) fn line_sets_personal_values(command: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(command)
        .is_ok_and(|mut line| !line_fields(&mut line).is_empty())
}

/// An approval request's command (an import line) and summary with `provider_id`'s
/// personal values sealed by [`DataKey::seal_fixed`]: the same command gives the same
/// text, so it finds its request again and the digest an operator signs stays the same.
pub(crate) fn seal_request(
    key: &DataKey,
    provider_id: &str,
    command: &str,
    summary: &str,
) -> (String, String) {
    let summary = key.seal_fixed(
        &Binding {
            provider_id,
            event_type: REQUEST,
            field: "summary",
        },
        summary,
    );
    let Ok(mut line) = serde_json::from_str::<serde_json::Value>(command) else {
        return (command.to_owned(), summary);
    };
    for (field, value) in line_fields(&mut line) {
        let binding = Binding {
            provider_id,
            event_type: REQUEST,
            field: &field,
        };
        *value = key.seal_fixed(&binding, value);
    }
    (line.to_string(), summary)
}

/// What [`seal_request`] sealed, opened with `key` (`erased` without one); clear text of
/// an older ledger as it is.
///
/// # Errors
/// As [`open_method`].
pub(crate) fn open_request(
    key: Option<&DataKey>,
    provider_id: &str,
    command: &str,
    summary: &str,
) -> Result<(String, String), PrivacyError> {
    let summary = open_field(key, provider_id, "summary", summary)?.into_text();
    let Ok(mut line) = serde_json::from_str::<serde_json::Value>(command) else {
        return Ok((command.to_owned(), summary));
    };
    if !line_fields(&mut line)
        .iter()
        .any(|(_, v)| super::is_sealed(v))
    {
        return Ok((command.to_owned(), summary));
    }
    for (field, value) in line_fields(&mut line) {
        open_in_place(key, provider_id, &field, value)?;
    }
    Ok((line.to_string(), summary))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::{ProviderRegistered, ProviderStatus, Schedule, Tier};

    fn registered() -> EventBody {
        EventBody::ProviderRegistered(ProviderRegistered {
            provider_id: "prv_1".parse().unwrap(),
            name: "Bee GmbH".into(),
            email: "ops@bee.test".into(),
            tier: Tier::Community,
            schedule: Schedule::Weekly,
            status: ProviderStatus::Active,
            payout_method: Some(PayoutMethod::Sepa {
                iban: "DE89370400440532013000".into(),
                bic: Some("COBADEFFXXX".into()),
                holder: "Bee GmbH".into(),
            }),
        })
    }

    #[test]
    fn an_event_is_sealed_field_by_field_and_its_record_opens_again() {
        let key = DataKey::generate();
        let mut body = registered();
        let clear_fields = |b: &EventBody| {
            let payload = serde_json::from_str(&b.to_json()).unwrap();
            super::super::report::clear_fields(b.event_type(), &payload)
        };
        assert!(clear_fields(&body).is_some());
        seal_event(&key, &mut body);
        assert_eq!(
            clear_fields(&body),
            None,
            "the report finds nothing in clear"
        );
        let json = body.to_json();
        for clear in ["Bee GmbH", "ops@bee.test", "DE89370400440532013000"] {
            assert!(!json.contains(clear), "{clear} in {json}");
        }
        assert!(json.contains("COBADEFFXXX"), "a BIC names a bank: {json}");
        let EventBody::ProviderRegistered(p) = &body else {
            unreachable!()
        };
        let mut record = ProviderRecord::registered(p, 0);
        let mut erased = record.clone();
        assert!(!open_record(Some(&key), &mut record).unwrap());
        let EventBody::ProviderRegistered(clear) = registered() else {
            unreachable!()
        };
        assert_eq!(record, ProviderRecord::registered(&clear, 0));

        assert!(open_record(None, &mut erased).unwrap());
        assert_eq!(
            (erased.name.as_str(), erased.email.as_str()),
            ("erased", "erased")
        );
        assert_eq!(
            erased.payout_method,
            Some(PayoutMethod::Sepa {
                iban: "erased".into(),
                bic: Some("COBADEFFXXX".into()),
                holder: "erased".into()
            })
        );
    }

    #[test]
    fn a_request_is_sealed_the_same_way_twice_and_opens_again() {
        let key = DataKey::generate();
        let line = r#"{"type":"provider.update","provider_id":"prv_1","email":"a@b.test","payout_method":{"kind":"sepa","iban":"DE89370400440532013000","bic":"COBADEFFXXX","holder":"Bee GmbH"}}"#;
        let summary = "change the payout method of prv_1 to sepa IBAN DE89370400440532013000";
        let (command, sealed_summary) = seal_request(&key, "prv_1", line, summary);
        assert_eq!(
            seal_request(&key, "prv_1", line, summary),
            (command.clone(), sealed_summary.clone())
        );
        for clear in ["a@b.test", "DE89370400440532013000", "Bee GmbH"] {
            assert!(
                !command.contains(clear) && !sealed_summary.contains(clear),
                "{clear}"
            );
        }
        assert!(command.contains("COBADEFFXXX") && command.contains("provider.update"));
        let (opened, opened_summary) =
            open_request(Some(&key), "prv_1", &command, &sealed_summary).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&opened).unwrap(),
            serde_json::from_str::<serde_json::Value>(line).unwrap()
        );
        assert_eq!(opened_summary, summary);
        let (erased, erased_summary) =
            open_request(None, "prv_1", &command, &sealed_summary).unwrap();
        assert!(erased.contains(r#""iban":"erased""#), "{erased}");
        assert_eq!(erased_summary, "erased");
        assert!(line_sets_personal_values(line));
        assert!(!line_sets_personal_values(
            r#"{"type":"provider.update","provider_id":"p","tier":"enterprise"}"#
        ));
    }

    #[test]
    fn a_value_moved_to_another_field_does_not_open() {
        let key = DataKey::generate();
        let mut body = registered();
        seal_event(&key, &mut body);
        let EventBody::ProviderRegistered(p) = &body else {
            unreachable!()
        };
        let mut record = ProviderRecord::registered(p, 0);
        record.email = record.name.clone();
        assert_eq!(
            open_record(Some(&key), &mut record).unwrap_err().code,
            "sealed_text_unreadable"
        );
    }
}
