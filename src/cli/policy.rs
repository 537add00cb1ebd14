//! `settle control policy | set-policy` (SPEC §9): the control policy booked on the ledger,
//! shown, and changed by an approved request.

use std::io::Write;

use clap::Subcommand;
use serde_json::json;

use crate::control::Sign;
use crate::ledger::Ledger;
use crate::report::output::{Format, Rows};

#[derive(Subcommand, Debug)]
pub enum ControlCmd {
    /// The control policy in force on this ledger, with its version.
    Policy,
    /// Request a new policy: the one in force with `NAME=VALUE` changed (signed with your
    /// `--operator-key`; a different operator approves it with `approvals approve`).
    SetPolicy {
        /// NAME=VALUE, once per value to change (names as `control policy` lists them).
        #[arg(required = true)]
        values: Vec<String>,
    },
}

pub(crate) async fn control_cmd(
    ledger: &Ledger,
    cmd: &ControlCmd,
    config_path: Option<&std::path::Path>,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let Some(in_force) = ledger.policy().await? else {
        eprintln!(
            "rejected: no_policy: this ledger has no control policy yet: `settle migrate` books it"
        );
        return Ok(2);
    };
    match cmd {
        ControlCmd::Policy => {
            let mut rows = Rows::new(vec!["name", "value"]);
            rows.push(vec![json!("version"), json!(in_force.version.to_string())]);
            for (name, value) in in_force.policy.values() {
                rows.push(vec![json!(name), json!(value)]);
            }
            write!(out, "{}", rows.render(format))?;
            Ok(0)
        }
        ControlCmd::SetPolicy { values } => {
            let mut policy = in_force.policy.clone();
            for pair in values {
                let Some((name, value)) = pair.split_once('=') else {
                    eprintln!("rejected: invalid_arguments: {pair}: NAME=VALUE");
                    return Ok(2);
                };
                policy = match policy.with(name.trim(), value.trim()) {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("rejected: {}: {}", e.code, e.message);
                        return Ok(2);
                    }
                };
            }
            let config = super::config_of(config_path)?;
            let signer = super::cli_signer(ledger).await?;
            let submitted = crate::control::submit_policy(
                ledger,
                &config.control,
                &policy,
                &super::cli_actor(),
                signer.as_ref().map(|s| s as &dyn Sign),
            )
            .await;
            super::operator::print_submitted(submitted, out)
        }
    }
}
