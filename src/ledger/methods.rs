//! Validation of payout methods on entry (SPEC §6): a Solana wallet on the ed25519 curve,
//! an IBAN with its country length and mod 97, a BIC, an ABA routing number with its
//! check digit, holder names that survive SEPA transliteration.

use settle_bank::{AbaRouting, AchAccountNumber, Bic, HolderName, Iban};

use crate::domain::DomainError;
use crate::domain::event::PayoutMethod;

fn bank<E: std::fmt::Display>(code: &'static str) -> impl Fn(E) -> DomainError {
    move |e| DomainError::new(code, e.to_string())
}

/// Validates and normalises a payout method.
pub fn validate(method: &PayoutMethod) -> Result<PayoutMethod, DomainError> {
    match method {
        PayoutMethod::Solana { wallet } => {
            crate::domain::wallet::validate_wallet(wallet)?;
            Ok(method.clone())
        }
        PayoutMethod::Sepa { iban, bic, holder } => {
            let iban = Iban::parse(iban).map_err(|e| DomainError::new(e.code(), e.to_string()))?;
            if !iban.is_sepa() {
                return Err(DomainError::new(
                    "non_sepa_iban",
                    format!("{} is not in the SEPA area", iban.country()),
                ));
            }
            let bic = bic
                .as_deref()
                .map(|b| Bic::parse(b).map_err(|e| DomainError::new(e.code(), e.to_string())))
                .transpose()?;
            let holder = HolderName::parse(holder).map_err(bank("invalid_holder_name"))?;
            Ok(PayoutMethod::Sepa {
                iban: iban.as_str().to_owned(),
                bic: bic.map(|b| b.as_str().to_owned()),
                holder: holder.as_str().to_owned(),
            })
        }
        PayoutMethod::Ach {
            routing,
            account,
            account_type,
            holder,
            entity,
        } => {
            let routing = AbaRouting::parse(routing)
                .map_err(|e| DomainError::new(e.code(), e.to_string()))?;
            let account = AchAccountNumber::parse(account)
                .map_err(|e| DomainError::new(e.code(), e.to_string()))?;
            if !matches!(account_type.as_str(), "checking" | "savings") {
                return Err(DomainError::new(
                    "invalid_account_type",
                    "account_type must be checking or savings",
                ));
            }
            if !matches!(entity.as_str(), "business" | "individual") {
                return Err(DomainError::new(
                    "invalid_entity",
                    "entity must be business or individual",
                ));
            }
            let holder = HolderName::parse(holder).map_err(bank("invalid_holder_name"))?;
            Ok(PayoutMethod::Ach {
                routing: routing.as_str().to_owned(),
                account: account.as_str().to_owned(),
                account_type: account_type.clone(),
                holder: holder.as_str().to_owned(),
                entity: entity.clone(),
            })
        }
    }
}
