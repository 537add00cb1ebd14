//! A statement checked against the public anchor: a root given by hand, or the
//! publication transaction read from a Solana node (with the payment's memo). No database.

use super::check::{self, Statement};

/// The public root a statement is checked against.
#[derive(Clone, Copy, Debug)]
pub enum Public<'a> {
    /// Given by hand (64 hex digits), as read from an explorer.
    Given(&'a str),
    /// Read from the publication transaction on the chain at this Solana RPC endpoint
    /// (and the payment's memo with it).
    Chain(&'a str),
}

/// Where the statement's final root was compared.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Compared {
    pub root: String,
    /// `given` (by hand) or the publication transaction read from the chain.
    pub source: String,
}

/// Checks `s` ([`check::check`]), then that it leads to the public root and, when `key` is
/// given, that the platform's anchor key signed it. `Err` names what does not hold.
pub async fn verify(
    s: &Statement,
    public: Public<'_>,
    key: Option<&str>,
) -> Result<(check::Checked, Compared), String> {
    let checked = check::check(s)?;
    if let Some(key) = key
        && key != checked.anchor_key
    {
        return Err(format!(
            "the anchor was signed by {}, not by the platform's key {key}",
            checked.anchor_key
        ));
    }
    let compared = match public {
        Public::Given(root) => {
            if !root.eq_ignore_ascii_case(&checked.final_root) {
                return Err(format!(
                    "the statement leads to root {}, not to the public root {root}",
                    checked.final_root
                ));
            }
            Compared {
                root: root.to_ascii_lowercase(),
                source: "given".into(),
            }
        }
        Public::Chain(rpc) => on_chain(s, &checked, rpc).await?,
    };
    Ok((checked, compared))
}

/// The final root against the publication on the chain, and a Solana payment's memo.
async fn on_chain(s: &Statement, checked: &check::Checked, rpc: &str) -> Result<Compared, String> {
    use crate::anchor::publish::read_published;
    let published = s.proof.published.as_ref().ok_or(
        "the statement's root is not published yet: download it again after the daily publication",
    )?;
    let onchain = read_published(rpc, &published.signature).await?;
    if onchain.key != checked.anchor_key {
        return Err(format!(
            "the publication was signed by {}, the anchor by {}",
            onchain.key, checked.anchor_key
        ));
    }
    if onchain.n != checked.final_n || hex::encode(onchain.root) != checked.final_root {
        return Err(format!(
            "the chain holds anchor {} root {} in {}, the statement leads to anchor {} root {}",
            onchain.n,
            hex::encode(onchain.root),
            published.signature,
            checked.final_n,
            checked.final_root
        ));
    }
    if let Some(payment) = s.payment.as_ref().filter(|p| p.rail == "solana") {
        let signature = payment.signature.as_deref().unwrap_or_default();
        let root = crate::anchor::publish::read_memo_statements_root(rpc, signature).await?;
        if payment.statements_root.as_deref() != Some(hex::encode(root).as_str()) {
            return Err(format!(
                "the payment transaction {signature} carries statement root {}, not the statement's",
                hex::encode(root)
            ));
        }
    }
    Ok(Compared {
        root: checked.final_root.clone(),
        source: format!("Solana transaction {} at {rpc}", published.signature),
    })
}

/// The one line that says what a check established.
pub fn summary(checked: &check::Checked, public: &Compared) -> String {
    format!(
        "ok: {} events of {} chain to seq {} anchored in anchor {} (signed by {}); totals \
         recomputed; leads to root {} = the public root ({}){}",
        checked.events,
        checked.provider_id,
        checked.head_seq,
        checked.anchor_n,
        checked.anchor_key,
        checked.final_root,
        public.source,
        checked
            .statement_hash
            .as_ref()
            .map_or(String::new(), |h| format!(
                "; the payment commits to statement {h}"
            ))
    )
}
