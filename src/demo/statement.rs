//! The demo's provable statement (SPEC §13): the ledger anchored beside its database and
//! the anchor published on the local chain by the anchor key; `prv_atlas`'s statement of
//! its payout written and checked as the provider would, against the chain alone.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::anchor::key::AnchorKey;
use crate::ledger::Ledger;
use crate::rails::solana::dev::{DevChain, LAMPORTS_PER_SOL};
use crate::report::shell::command_line;
use crate::statement::public::{Public, summary, verify};
use crate::statement::{Subject, build};

/// The provider whose statement the demo proves.
const PROVIDER: &str = "prv_atlas";

/// Anchors, publishes, writes `prv_atlas`'s payout statement to `DIR/statement-prv_atlas.json`
/// (and `.html`) and checks it against the chain; answers what it did and the command that
/// checks it again later, offline.
pub async fn prove(
    ledger: &Ledger,
    url: &str,
    dir: &Path,
    chain: &DevChain,
    program: &str,
) -> anyhow::Result<Value> {
    let config = crate::config::AnchorConfig::default();
    let log = config.log_path(url);
    let key = AnchorKey::load_or_create(&config.key_path(&log))?;
    let payer: settle_solana::Pubkey = key.public().parse()?;
    chain.chain.airdrop_sol(&payer, LAMPORTS_PER_SOL);
    let failed = |e: crate::anchor::AnchorError| anyhow::anyhow!("{}: {e}", e.code());
    crate::anchor::write(&ledger.store, &log, &key, ledger.now_ms())
        .await
        .map_err(failed)?;
    let published = crate::anchor::publish::publish(
        &ledger.store,
        &crate::anchor::read(&log).map_err(failed)?,
        &key,
        &chain.url,
        Duration::from_secs(30),
        ledger.now_ms(),
    )
    .await
    .map_err(failed)?;
    let payout = crate::ledger::payouts::provider_payouts(&ledger.store, PROVIDER)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("{PROVIDER} has no payout"))?;
    let statement = build(
        &ledger.store,
        &log,
        PROVIDER,
        &Subject::Payout(payout.payout_id.into()),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{}: {e}", e.code()))?;
    let file = dir.join(format!("statement-{PROVIDER}.json"));
    std::fs::write(&file, serde_json::to_string_pretty(&statement)?)?;
    std::fs::write(
        file.with_extension("html"),
        crate::report::statement::page(&statement, "statement.json", &chain.url),
    )?;
    let (checked, compared) = verify(&statement, Public::Chain(&chain.url), None)
        .await
        .map_err(|reason| anyhow::anyhow!("statement_invalid: {reason}"))?;
    let file = file.to_string_lossy();
    Ok(json!({
        "anchor_log": log.display().to_string(),
        "anchor_key": published.key,
        "anchor_n": published.n,
        "root": published.root,
        "publication": published.signature,
        "provider_id": PROVIDER,
        "statement_file": file,
        "events": checked.events,
        "statement_hash": checked.statement_hash,
        "verified": summary(&checked, &compared),
        "verify_command": command_line(program, &["statement", "verify", &file, "--root", &published.root]),
    }))
}
