//! Pure construction of the bank files from payouts: no database, no clock, no I/O.
//!
//! A batch's bytes are a function of its payouts (as created: amount, EUR amount, method
//! snapshot, run), the originator and the batch's creation time recorded on the ledger, so
//! regenerating a batch gives the same bytes and the same SHA-256.

use chrono::{DateTime, NaiveDate, NaiveDateTime};
use settle_bank::{
    AbaRouting, AchAccountNumber, AchAccountType, AchEntity, AchIndividualId, Bic, HolderName,
    Iban, NachaEntry, NachaFile, SepaBatch, SepaId, SepaPayment, write_nacha, write_pain001,
};
use settle_calendar::Calendar;
use sha2::{Digest, Sha256};

use crate::config::BankConfig;
use crate::domain::DomainError;
use crate::domain::decision::MICRO_USDC_PER_CENT;
use crate::domain::event::{PayoutMethod, Rail};
use crate::ledger::payouts::PayoutRecord;

/// File id modifiers of NACHA files created on one day, in order.
const FILE_ID_MODIFIERS: &[u8; 36] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// The originator of the files, parsed from [`BankConfig`]: proof that the configuration
/// can be written into both formats.
#[derive(Clone, Debug)]
pub struct Originator {
    pub company_name: String,
    pub sepa_initiating_party: HolderName,
    pub sepa_debtor_name: HolderName,
    pub sepa_debtor_iban: Iban,
    pub sepa_debtor_bic: Option<Bic>,
    pub nacha_destination: AbaRouting,
    pub nacha_destination_name: String,
    pub nacha_origin: String,
    pub nacha_company_name: String,
    pub nacha_company_id: String,
    pub nacha_entry_description: String,
}

fn config_error(field: &str, e: impl std::fmt::Display) -> DomainError {
    DomainError::new("invalid_bank_config", format!("bank.{field}: {e}"))
}

impl Originator {
    /// Parses and checks the bank configuration (by writing a one-entry file of each kind).
    pub fn parse(config: &BankConfig) -> Result<Originator, DomainError> {
        let holder =
            |field: &str, text: &str| HolderName::parse(text).map_err(|e| config_error(field, e));
        let iban = Iban::parse(&config.sepa_debtor_iban)
            .map_err(|e| config_error("sepa_debtor_iban", e))?;
        if !iban.is_sepa() {
            return Err(config_error(
                "sepa_debtor_iban",
                format!("{} is not in the SEPA area", iban.country()),
            ));
        }
        let bic = match config.sepa_debtor_bic.trim() {
            "" => None,
            b => Some(Bic::parse(b).map_err(|e| config_error("sepa_debtor_bic", e))?),
        };
        let originator = Originator {
            company_name: config.company_name.clone(),
            sepa_initiating_party: holder(
                "sepa_initiating_party_name",
                &config.sepa_initiating_party_name,
            )?,
            sepa_debtor_name: holder("sepa_debtor_name", &config.sepa_debtor_name)?,
            sepa_debtor_iban: iban,
            sepa_debtor_bic: bic,
            nacha_destination: AbaRouting::parse(&config.nacha_immediate_destination)
                .map_err(|e| config_error("nacha_immediate_destination", e))?,
            nacha_destination_name: config.nacha_immediate_destination_name.clone(),
            nacha_origin: config.nacha_immediate_origin.clone(),
            nacha_company_name: config.nacha_company_name.clone(),
            nacha_company_id: config.nacha_company_id.clone(),
            nacha_entry_description: config.nacha_entry_description.clone(),
        };
        if config.batch_payouts_max == 0 {
            return Err(config_error("batch_payouts_max", "must be at least 1"));
        }
        // Let the writers judge the header fields they own.
        let probe_time = DateTime::from_timestamp(0, 0)
            .map(|t| t.naive_utc())
            .unwrap_or_default();
        let probe = NachaEntry {
            routing: originator.nacha_destination.clone(),
            account: AchAccountNumber::parse("1").map_err(|e| config_error("probe", e))?,
            account_type: AchAccountType::Checking,
            entity: AchEntity::Business,
            amount_usd_cents: 1,
            individual_id: AchIndividualId::from_payout_id("probe"),
            individual_name: holder("probe", "probe")?,
        };
        write_nacha(&originator.nacha_file(probe_time, 'A', probe_time.date(), vec![probe]))
            .map_err(|e| config_error("nacha", e))?;
        Ok(originator)
    }

    fn nacha_file(
        &self,
        created: NaiveDateTime,
        modifier: char,
        effective: NaiveDate,
        entries: Vec<NachaEntry>,
    ) -> NachaFile {
        NachaFile {
            immediate_destination: self.nacha_destination.clone(),
            immediate_origin: self.nacha_origin.clone(),
            destination_name: self.nacha_destination_name.clone(),
            origin_name: self.company_name.clone(),
            file_creation: created,
            file_id_modifier: modifier,
            company_name: self.nacha_company_name.clone(),
            company_id: self.nacha_company_id.clone(),
            company_entry_description: self.nacha_entry_description.clone(),
            effective_entry_date: effective,
            odfi_routing: self.nacha_destination.clone(),
            entries,
        }
    }
}

/// The deterministic id of the batch of `payout_ids` on `rail`: the rail and 24 hex digits
/// of SHA-256 over the sorted ids (28 characters, a valid SEPA message id).
pub fn batch_id(rail: Rail, payout_ids: &[String]) -> String {
    let mut ids: Vec<&str> = payout_ids.iter().map(String::as_str).collect();
    ids.sort_unstable();
    let mut hasher = Sha256::new();
    hasher.update(rail.as_str().as_bytes());
    for id in ids {
        hasher.update(b"\n");
        hasher.update(id.as_bytes());
    }
    format!(
        "{}-{}",
        rail.as_str(),
        &hex::encode(hasher.finalize())[..24]
    )
}

/// The file name of a batch: `{YYYYMMDD}-{batch_id}.xml` (SEPA) or
/// `{YYYYMMDD}-{batch_id}-{modifier}.ach` (NACHA, with its file id modifier).
pub fn file_name(rail: Rail, batch_id: &str, created: NaiveDateTime, modifier: char) -> String {
    let day = created.format("%Y%m%d");
    match rail {
        Rail::Ach => format!("{day}-{batch_id}-{modifier}.ach"),
        _ => format!("{day}-{batch_id}.xml"),
    }
}

/// The NACHA file id modifier recorded in an `.ach` file name.
pub(crate) fn modifier_of(file_name: &str) -> Option<char> {
    let stem = file_name.strip_suffix(".ach")?;
    let (_, m) = stem.rsplit_once('-')?;
    let mut chars = m.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii() && FILE_ID_MODIFIERS.contains(&(c as u8)) => Some(c),
        _ => None,
    }
}

/// The file id modifier of the `n`-th NACHA file of a day (0-based; wraps after 36).
pub(crate) fn modifier_for(n: usize) -> char {
    FILE_ID_MODIFIERS[n % FILE_ID_MODIFIERS.len()] as char
}

/// The end-to-end id a payout travels with (recorded on `payout.submitted`, so a return
/// can be matched by it). SEPA `EndToEndId`: the payout id with `_` (outside the SEPA
/// character set) written as `-`, e.g. `po-0123…`; payout ids use `[A-Za-z0-9._:-]`, the
/// rest of which SEPA allows. ACH: the entry's identification number (the payout id, or 15
/// hex digits of its SHA-256 when it does not fit).
pub fn end_to_end_id(rail: Rail, payout_id: &str) -> String {
    match rail {
        Rail::Ach => AchIndividualId::from_payout_id(payout_id)
            .as_str()
            .to_owned(),
        _ => payout_id.replace('_', "-"),
    }
}

/// USD cents of a bank payout (bank payouts are created floored to whole cents).
pub fn usd_cents(p: &PayoutRecord) -> i64 {
    p.amount_micro_usdc / MICRO_USDC_PER_CENT
}

fn unusable(p: &PayoutRecord, why: impl std::fmt::Display) -> DomainError {
    DomainError::new(
        "payout_not_bankable",
        format!("payout {} cannot go into a bank file: {why}", p.payout_id),
    )
}

/// The SEPA credit transfer of a payout.
pub(crate) fn sepa_payment(
    p: &PayoutRecord,
    execution: NaiveDate,
    statement: Option<&[u8; 32]>,
) -> Result<SepaPayment, DomainError> {
    let PayoutMethod::Sepa { iban, bic, holder } = &p.method else {
        return Err(unusable(p, "its method is not SEPA"));
    };
    let Some(amount_eur_cents) = p.amount_eur_cents else {
        return Err(unusable(p, "it has no EUR amount"));
    };
    if amount_eur_cents <= 0 {
        return Err(unusable(p, "its EUR amount is not positive"));
    }
    let iban = Iban::parse(iban).map_err(|e| unusable(p, e))?;
    if !iban.is_sepa() {
        return Err(unusable(p, "its IBAN is outside SEPA"));
    }
    Ok(SepaPayment {
        requested_execution_date: execution,
        end_to_end_id: SepaId::parse(&end_to_end_id(Rail::Sepa, &p.payout_id))
            .map_err(|e| unusable(p, e))?,
        amount_eur_cents,
        creditor_name: HolderName::parse(holder).map_err(|e| unusable(p, e))?,
        creditor_iban: iban,
        creditor_bic: bic
            .as_deref()
            .map(Bic::parse)
            .transpose()
            .map_err(|e| unusable(p, e))?,
        remittance_info: p.remittance(statement),
    })
}

/// The ACH credit of a payout.
pub(crate) fn nacha_entry(p: &PayoutRecord) -> Result<NachaEntry, DomainError> {
    let PayoutMethod::Ach {
        routing,
        account,
        account_type,
        holder,
        entity,
    } = &p.method
    else {
        return Err(unusable(p, "its method is not ACH"));
    };
    let amount_usd_cents = usd_cents(p);
    if amount_usd_cents <= 0 || p.amount_micro_usdc % MICRO_USDC_PER_CENT != 0 {
        return Err(unusable(p, "its amount is not a positive number of cents"));
    }
    Ok(NachaEntry {
        routing: AbaRouting::parse(routing).map_err(|e| unusable(p, e))?,
        account: AchAccountNumber::parse(account).map_err(|e| unusable(p, e))?,
        account_type: match account_type.as_str() {
            "checking" => AchAccountType::Checking,
            "savings" => AchAccountType::Savings,
            other => return Err(unusable(p, format!("account type {other:?}"))),
        },
        entity: match entity.as_str() {
            "business" => AchEntity::Business,
            "individual" => AchEntity::Individual,
            other => return Err(unusable(p, format!("entity {other:?}"))),
        },
        amount_usd_cents,
        individual_id: AchIndividualId::from_payout_id(&p.payout_id),
        individual_name: HolderName::parse(holder).map_err(|e| unusable(p, e))?,
    })
}

/// Checks that a payout can be written into a file of its rail.
pub(crate) fn check_bankable(p: &PayoutRecord) -> Result<(), DomainError> {
    match p.rail {
        Rail::Sepa => sepa_payment(p, NaiveDate::MIN, None).map(|_| ()),
        Rail::Ach => nacha_entry(p).map(|_| ()),
        Rail::Solana => Err(unusable(p, "it is a Solana payout")),
    }
}

fn calendar_error(e: settle_calendar::CalendarError) -> DomainError {
    DomainError::new(e.code(), e.to_string())
}

/// SEPA requested execution date: the first TARGET2 business day on or after `today`.
pub(crate) fn sepa_execution_date(today: NaiveDate) -> Result<NaiveDate, DomainError> {
    Calendar::target2()
        .next_business_day_on_or_after(today)
        .map_err(calendar_error)
}

/// NACHA effective entry date: the first Federal Reserve business day after `today`.
pub(crate) fn ach_effective_date(today: NaiveDate) -> Result<NaiveDate, DomainError> {
    Calendar::us_federal_reserve()
        .next_business_day_after(today)
        .map_err(calendar_error)
}

/// A written file: its bytes, its total in cents of its currency and the currency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BankFile {
    pub contents: String,
    pub total_cents: i64,
    pub currency: &'static str,
}

/// Writes the file of a batch: `payouts` in batch order (sorted by payout id), created at
/// `created` (the batch's `recorded_at` on the ledger, UTC); a SEPA transfer's remittance
/// carries its payout's hash in `statements` (SPEC §13), when there is one.
pub fn write_file(
    originator: &Originator,
    rail: Rail,
    batch_id: &str,
    (created, modifier): (NaiveDateTime, char),
    payouts: &[PayoutRecord],
    statements: &std::collections::HashMap<String, [u8; 32]>,
) -> Result<BankFile, DomainError> {
    let today = created.date();
    match rail {
        Rail::Sepa => {
            let execution = sepa_execution_date(today)?;
            let payments = payouts
                .iter()
                .map(|p| sepa_payment(p, execution, statements.get(p.payout_id.as_str())))
                .collect::<Result<Vec<_>, _>>()?;
            let total_cents = payments.iter().map(|p| p.amount_eur_cents).sum();
            let batch = SepaBatch {
                msg_id: SepaId::parse(batch_id).map_err(|e| unusable_batch(batch_id, e))?,
                created_at: created,
                initiating_party_name: originator.sepa_initiating_party.clone(),
                debtor_name: originator.sepa_debtor_name.clone(),
                debtor_iban: originator.sepa_debtor_iban.clone(),
                debtor_bic: originator.sepa_debtor_bic.clone(),
                payments,
            };
            let contents = write_pain001(&batch).map_err(|e| unusable_batch(batch_id, e))?;
            Ok(BankFile {
                contents,
                total_cents,
                currency: "EUR",
            })
        }
        Rail::Ach => {
            let effective = ach_effective_date(today)?;
            let entries = payouts
                .iter()
                .map(nacha_entry)
                .collect::<Result<Vec<_>, _>>()?;
            let total_cents = entries.iter().map(|e| e.amount_usd_cents).sum();
            let file = originator.nacha_file(created, modifier, effective, entries);
            let contents = write_nacha(&file).map_err(|e| unusable_batch(batch_id, e))?;
            Ok(BankFile {
                contents,
                total_cents,
                currency: "USD",
            })
        }
        Rail::Solana => Err(DomainError::new(
            "invalid_rail",
            "Solana payouts go to no bank file",
        )),
    }
}

fn unusable_batch(batch_id: &str, e: impl std::fmt::Display) -> DomainError {
    DomainError::new(
        "bank_file_invalid",
        format!("batch {batch_id} cannot be written: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_is_valid() {
        Originator::parse(&BankConfig::default()).expect("default bank config");
    }

    #[test]
    fn batch_ids_depend_on_the_set_of_payouts_only() {
        let a = batch_id(Rail::Sepa, &["po_b".into(), "po_a".into()]);
        let b = batch_id(Rail::Sepa, &["po_a".into(), "po_b".into()]);
        assert_eq!(a, b);
        assert_ne!(a, batch_id(Rail::Ach, &["po_a".into(), "po_b".into()]));
        assert_ne!(a, batch_id(Rail::Sepa, &["po_a".into()]));
        assert!(a.len() <= 35 && SepaId::parse(&a).is_ok());
    }

    #[test]
    fn modifiers_round_trip_through_file_names() {
        let t = DateTime::from_timestamp(1_764_547_200, 0)
            .unwrap()
            .naive_utc();
        for n in [0, 1, 25, 26, 35, 36] {
            let name = file_name(Rail::Ach, "ach-0123", t, modifier_for(n));
            assert_eq!(modifier_of(&name), Some(modifier_for(n)), "{name}");
        }
        assert_eq!(modifier_for(36), 'A');
        assert_eq!(modifier_of("20261201-sepa-01.xml"), None);
    }
}
