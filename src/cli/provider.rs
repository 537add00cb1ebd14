//! `settle provider`: a provider's registry record with its personal values opened, and
//! its erasure (SPEC §11).

use std::io::Write;

use clap::Subcommand;

use crate::control::Submitted;
use crate::domain::ids::ProviderId;
use crate::ledger::{Ledger, LedgerError};
use crate::report::output::{Format, Rows};
use crate::wire::import::Command;

use super::{EXIT_REJECTED, rejected};

#[derive(Subcommand, Debug)]
pub enum ProviderCmd {
    /// The provider's record: name, email, tier, schedule, status and payout method, its
    /// personal values opened with its data key (`erased` once it is erased).
    Show { provider_id: String },
    /// Erase the provider's personal data (gated: a second operator approves it on a
    /// real-clock ledger). Every read shows `erased` at once; its data key is destroyed when
    /// `privacy.retention_days` after its last payout have passed. Refused with
    /// `payout_in_flight` while a payout was sent and not answered.
    Erase { provider_id: String },
}

/// `settle provider …`.
pub(crate) async fn provider_cmd(
    ledger: &Ledger,
    cmd: &ProviderCmd,
    config_path: Option<&std::path::Path>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let provider_id = match cmd {
        ProviderCmd::Show { provider_id } => provider_id,
        ProviderCmd::Erase { provider_id } => {
            let id = match ProviderId::parse(provider_id) {
                Ok(id) => id,
                Err(e) => return rejected(LedgerError::Rejected(e)),
            };
            let config = super::config_of(config_path)?;
            let signer = super::cli_signer(ledger).await?;
            let submitted = crate::control::submit(
                ledger,
                &config.control,
                &Command::EraseProvider { provider_id: id },
                &super::cli_actor(),
                signer.as_ref().map(|s| s as &dyn crate::control::Sign),
            )
            .await;
            match submitted {
                Ok(Submitted::Pending(r)) => {
                    writeln!(out, "pending_approval {}", r.approval_id)?;
                    return Ok(0);
                }
                Ok(Submitted::Applied(a)) => eprintln!("{}", a.as_str()),
                Err(e) => return rejected(e),
            }
            provider_id
        }
    };
    let record = match ledger.provider_record(provider_id).await {
        Ok(Some(record)) => record,
        Ok(None) => {
            eprintln!("rejected: unknown_provider: no provider {provider_id}");
            return Ok(EXIT_REJECTED);
        }
        Err(e) => return rejected(e),
    };
    let mut rows = Rows::new(vec![
        "provider_id",
        "name",
        "email",
        "tier",
        "schedule",
        "status",
        "payout_method",
    ]);
    rows.push(vec![
        record.provider_id.to_string().into(),
        record.name.clone().into(),
        record.email.clone().into(),
        record.tier.as_str().into(),
        record.schedule.as_str().into(),
        record.status.as_str().into(),
        record
            .payout_method
            .as_ref()
            .map_or(serde_json::Value::Null, |m| serde_json::json!(m)),
    ]);
    write!(out, "{}", rows.render(format))?;
    Ok(0)
}
