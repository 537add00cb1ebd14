//! `settle privacy`: the personal data on the ledger (SPEC §11).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::ledger::Ledger;
use crate::privacy::keys::{KeyWrap, MasterKey};
use crate::privacy::report::clear_text;
use crate::privacy::vault::Privacy;
use crate::report::output::{Format, Rows};

#[derive(Subcommand, Debug)]
pub enum PrivacyCmd {
    /// The providers whose personal data the chain holds in clear (events booked before
    /// values were sealed): the fields, and how many events hold them.
    Report,
    /// Write a new master key (64 hexadecimal digits, mode 0600) for
    /// `privacy.master_key_file`; an existing file is never overwritten. Prints the key's
    /// id, never the key.
    Keygen {
        #[arg(long)]
        out: PathBuf,
    },
    /// Re-wrap every provider's data key under the master key now configured, after the
    /// previous one in `--from` opens it (a master key rotation; run again after an
    /// interruption, it goes on). Prints how many keys were re-wrapped.
    Rotate {
        #[arg(long)]
        from: PathBuf,
    },
    /// Destroy the data keys of erased providers whose retention ended (what `serve`'s
    /// scheduler does every `scheduler.tick_secs`); prints their providers.
    DestroyDue,
}

/// `settle privacy keygen --out FILE` (needs no database).
pub fn keygen(path: &Path, out: &mut impl Write) -> anyhow::Result<i32> {
    let key = MasterKey::generate();
    key.write_file(path).map_err(|e| {
        anyhow::anyhow!(
            "creating {} (an existing key is never overwritten): {e}",
            path.display()
        )
    })?;
    writeln!(out, "{}", key.key_id())?;
    Ok(0)
}

/// `settle privacy …` on an open ledger.
pub(crate) async fn privacy_cmd(
    ledger: &Ledger,
    cmd: &PrivacyCmd,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    match cmd {
        PrivacyCmd::Report => report(ledger, format, out).await,
        PrivacyCmd::Keygen { out: path } => keygen(path, out),
        PrivacyCmd::Rotate { from } => {
            let vault = match &ledger.privacy {
                Privacy::Sealing(vault) => vault,
                Privacy::Missing(e) => anyhow::bail!("{e}"),
                Privacy::Clear => anyhow::bail!("no_master_key: this ledger seals nothing"),
            };
            let previous = MasterKey::read_file(from).map_err(|e| anyhow::anyhow!("{e}"))?;
            let done = vault
                .rotate_from(&previous)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut rows = Rows::new(vec!["rewrapped", "master_key_id"]);
            rows.push(vec![done.into(), vault.master_key_id().into()]);
            write!(out, "{}", rows.render(format))?;
            Ok(0)
        }
        PrivacyCmd::DestroyDue => {
            let destroyed = ledger.destroy_due_keys().await?;
            let mut rows = Rows::new(vec!["provider_id"]);
            for p in destroyed {
                rows.push(vec![p.into()]);
            }
            write!(out, "{}", rows.render(format))?;
            Ok(0)
        }
    }
}

/// `settle privacy report`.
pub async fn report(ledger: &Ledger, format: Format, out: &mut impl Write) -> anyhow::Result<i32> {
    let found = clear_text(&ledger.store).await?;
    let mut rows = Rows::new(vec!["provider_id", "events", "fields"]);
    for p in &found {
        rows.push(vec![
            p.provider_id.clone().into(),
            p.events.into(),
            p.fields.join(" ").into(),
        ]);
    }
    write!(out, "{}", rows.render(format))?;
    Ok(0)
}
