//! `settle operator keygen | bootstrap | list | add | rotate-key | remove` (SPEC §9); the
//! key files themselves are `crate::operator_key`'s.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::bail;
use clap::Subcommand;
use serde_json::json;

use crate::control::Sign;
use crate::domain::operator::{OperatorKey, OperatorName};
use crate::domain::time::format_ms;
use crate::ledger::Ledger;
use crate::ledger::operators::OperatorChange;
use crate::report::output::{Format, Rows};

#[derive(Subcommand, Debug)]
pub enum OperatorCmd {
    /// Write a new operator key file (mode 0600) and print its public key, to be put in
    /// force by `operator bootstrap` (or, later, an approved request).
    Keygen {
        /// Where to write the key; an existing file is never overwritten.
        #[arg(long)]
        out: PathBuf,
    },
    /// Put the first operators in force on a ledger that has none (at least two):
    /// `--operator alice=PUBKEY --operator bob=PUBKEY`.
    Bootstrap {
        /// NAME=PUBLIC_KEY (base58), once per operator.
        #[arg(long = "operator", required = true)]
        operators: Vec<String>,
    },
    /// The operators in force.
    List,
    /// Request a new operator (signed with your `--operator-key`; a different operator
    /// approves it with `approvals approve`).
    Add {
        #[arg(long)]
        name: String,
        /// Its Ed25519 public key, base58 (`operator keygen` prints it).
        #[arg(long)]
        public_key: String,
    },
    /// Request the replacement of an operator's key (a lost or leaked key).
    RotateKey {
        #[arg(long)]
        name: String,
        #[arg(long)]
        public_key: String,
    },
    /// Request the removal of an operator (at least two stay).
    Remove {
        #[arg(long)]
        name: String,
    },
}

pub(crate) async fn operator_cmd(
    ledger: &Ledger,
    cmd: &OperatorCmd,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    match cmd {
        OperatorCmd::Keygen { .. } => unreachable!("handled before opening the database"),
        OperatorCmd::Bootstrap { operators } => {
            let mut first = Vec::new();
            for text in operators {
                let Some((name, key)) = text.split_once('=') else {
                    bail!("invalid_arguments: --operator is NAME=PUBLIC_KEY, got {text:?}");
                };
                first.push((OperatorName::parse(name)?, OperatorKey::parse(key)?));
            }
            match ledger
                .bootstrap_operators(&first, &super::cli_actor())
                .await
            {
                Ok(_) => list(ledger, format, out).await,
                Err(crate::ledger::LedgerError::Rejected(e)) => {
                    eprintln!("rejected: {}: {}", e.code, e.message);
                    Ok(2)
                }
                Err(e) => Err(e.into()),
            }
        }
        OperatorCmd::List => list(ledger, format, out).await,
        OperatorCmd::Add { name, public_key } => {
            let change = OperatorChange::Add {
                name: OperatorName::parse(name)?,
                key: OperatorKey::parse(public_key)?,
            };
            request_change(ledger, &change, out).await
        }
        OperatorCmd::RotateKey { name, public_key } => {
            let change = OperatorChange::RotateKey {
                name: OperatorName::parse(name)?,
                key: OperatorKey::parse(public_key)?,
            };
            request_change(ledger, &change, out).await
        }
        OperatorCmd::Remove { name } => {
            let change = OperatorChange::Remove {
                name: OperatorName::parse(name)?,
            };
            request_change(ledger, &change, out).await
        }
    }
}

/// Books the request of an operator change as this process's operator; prints
/// `pending_approval ID` (exit 0) or the refusal (exit 2).
async fn request_change(
    ledger: &Ledger,
    change: &OperatorChange,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let signer = super::cli_signer(ledger).await?;
    let submitted = crate::control::submit_operator_change(
        ledger,
        change,
        &super::cli_actor(),
        signer.as_ref().map(|s| s as &dyn Sign),
    )
    .await;
    print_submitted(submitted, out)
}

/// Prints what became of a gated command: `pending_approval ID` or its result (exit 0), or
/// the refusal on stderr (exit 2).
pub(super) fn print_submitted(
    submitted: Result<crate::control::Submitted, crate::ledger::LedgerError>,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    match submitted {
        Ok(crate::control::Submitted::Pending(row)) => {
            writeln!(out, "pending_approval {}", row.approval_id)?;
            Ok(0)
        }
        Ok(crate::control::Submitted::Applied(applied)) => {
            writeln!(out, "{}", applied.as_str())?;
            Ok(0)
        }
        Err(crate::ledger::LedgerError::Rejected(e)) => {
            eprintln!("rejected: {}: {}", e.code, e.message);
            Ok(2)
        }
        Err(e) => Err(e.into()),
    }
}

async fn list(ledger: &Ledger, format: Format, out: &mut impl Write) -> anyhow::Result<i32> {
    let mut rows = Rows::new(vec!["operator", "public_key", "added_at"]);
    for o in ledger.operators().await?.iter() {
        rows.push(vec![
            json!(o.name.as_str()),
            json!(o.key.to_base58()),
            json!(format_ms(o.added_at_ms)),
        ]);
    }
    write!(out, "{}", rows.render(format))?;
    Ok(0)
}

/// `settle operator keygen --out FILE`: needs no database.
pub fn keygen(path: &Path, out: &mut impl Write) -> anyhow::Result<i32> {
    let key = crate::operator_key::random_key();
    writeln!(
        out,
        "{}",
        crate::operator_key::write_key_file(path, &key)?.to_base58()
    )?;
    Ok(0)
}
