//! `settle approvals list | show ID | approve ID… | reject ID --reason R`: dual control
//! from the command line (src/control/). The deciding actor is `--actor` (default: the
//! OS user) and must differ from the requester.

use std::io::Write;
use std::path::Path;

use clap::Subcommand;
use serde_json::json;

use super::cli_actor;
use crate::domain::event::ApprovalStatus;
use crate::domain::money::format_micro_usdc;
use crate::domain::time::format_ms;
use crate::ledger::{Ledger, LedgerError};
use crate::report::output::{Format, Rows};
use crate::store::read::ApprovalRow;

use super::EXIT_REJECTED;

#[derive(Subcommand, Debug)]
pub enum ApprovalsCmd {
    /// Requests, oldest first (default: the pending ones).
    List {
        /// pending, approved, rejected or all.
        #[arg(long, default_value = "pending")]
        status: String,
    },
    /// One request, with the command it holds.
    Show { approval_id: String },
    /// Approve requests: each one's command runs now, then the approval is booked.
    Approve {
        #[arg(required = true)]
        approval_ids: Vec<String>,
    },
    /// Reject a request: nothing of its command happens.
    Reject {
        approval_id: String,
        #[arg(long)]
        reason: String,
    },
}

pub(crate) async fn approvals_cmd(
    ledger: &Ledger,
    cmd: &ApprovalsCmd,
    config_path: Option<&Path>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let config = super::config_of(config_path)?;
    let actor = cli_actor();
    let signer = super::cli_signer(ledger).await?;
    let signer = signer.as_ref().map(|s| s as &dyn crate::control::Sign);
    let mut shown: Vec<(ApprovalRow, String)> = Vec::new();
    let mut code = 0;
    match cmd {
        ApprovalsCmd::List { status } => {
            let filter = match (status.as_str(), ApprovalStatus::parse(status)) {
                ("all", _) => None,
                (_, Some(status)) => Some(status),
                (other, None) => {
                    eprintln!(
                        "rejected: invalid_status: --status is pending, approved, rejected or all, got {other:?}"
                    );
                    return Ok(EXIT_REJECTED);
                }
            };
            for row in crate::store::read::approvals(&ledger.store, filter, config.control.list_max)
                .await?
            {
                shown.push((row, String::new()));
            }
        }
        ApprovalsCmd::Show { approval_id } => match ledger.approval(approval_id).await {
            Ok(row) => shown.push((row, String::new())),
            Err(e) => return rejected(e),
        },
        ApprovalsCmd::Approve { approval_ids } => {
            for id in approval_ids {
                match crate::control::approve(ledger, &config.runs, id, &actor, signer).await {
                    Ok((row, applied)) => shown.push((row, applied.as_str().to_owned())),
                    Err(LedgerError::Rejected(e)) => {
                        eprintln!("rejected: {id}: {}: {}", e.code, e.message);
                        code = EXIT_REJECTED;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        ApprovalsCmd::Reject {
            approval_id,
            reason,
        } => {
            match crate::control::reject_request(ledger, approval_id, reason, &actor, signer).await
            {
                Ok(row) => shown.push((row, "rejected".to_owned())),
                Err(e) => return rejected(e),
            }
        }
    }
    // What the operator reads: the requests' personal values opened (SPEC §11).
    let (mut rows, notes): (Vec<ApprovalRow>, Vec<String>) = shown.into_iter().unzip();
    ledger.open_approvals(&mut rows).await?;
    let shown: Vec<(ApprovalRow, String)> = rows.into_iter().zip(notes).collect();
    render(&shown, format, out)?;
    Ok(code)
}

use super::rejected;

fn render(
    rows: &[(ApprovalRow, String)],
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        let list: Vec<_> = rows
            .iter()
            .map(|(r, result)| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["amount_usdc"] = json!(r.amount_micro_usdc.map(format_micro_usdc));
                v["requested_at"] = json!(format_ms(r.requested_at_ms));
                v["decided_at"] = json!(r.decided_at_ms.map(format_ms));
                if !result.is_empty() {
                    v["result"] = json!(result);
                }
                v
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
        return Ok(());
    }
    let mut table = Rows::new(vec![
        "approval_id",
        "kind",
        "status",
        "summary",
        "requested_by",
        "requested_at",
        "decided_by",
        "result",
    ]);
    for (r, result) in rows {
        table.push(vec![
            json!(r.approval_id),
            json!(r.kind),
            json!(r.status),
            json!(r.summary),
            json!(r.requested_by),
            json!(format_ms(r.requested_at_ms)),
            json!(r.decided_by),
            json!(result),
        ]);
    }
    write!(out, "{}", table.render(format))?;
    Ok(())
}
