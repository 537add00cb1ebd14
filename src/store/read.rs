//! Read queries over the projections, shared by the CLI, the HTTP API and the jobs.
//! Reads never scan the ledger.

use sqlx::{AnyPool, Row};

use crate::domain::event::{accounts, provider_stream};

/// A provider's balances, in micro-USDC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Balances {
    pub provider_id: String,
    /// The payable account: earned minus everything paid out or on its way.
    pub payable_micro_usdc: i64,
    pub held_micro_usdc: i64,
    pub in_transit_micro_usdc: i64,
    /// Settled minus returned payouts, lifetime.
    pub paid_micro_usdc: i64,
}

/// Balances of one provider, or of every provider in id order.
pub async fn balances(
    pool: &AnyPool,
    provider_id: Option<&str>,
) -> Result<Vec<Balances>, sqlx::Error> {
    let ids: Vec<String> = match provider_id {
        Some(p) => sqlx::query("SELECT provider_id FROM providers WHERE provider_id = $1")
            .bind(p)
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?,
        None => sqlx::query("SELECT provider_id FROM providers ORDER BY provider_id")
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?,
    };
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(provider_balances(pool, &id).await?);
    }
    Ok(out)
}

/// Balances of one provider from the account projection of its stream.
pub async fn provider_balances(pool: &AnyPool, provider_id: &str) -> Result<Balances, sqlx::Error> {
    let rows =
        sqlx::query("SELECT account, balance_micro_usdc FROM account_balances WHERE owner = $1")
            .bind(provider_stream(provider_id))
            .fetch_all(pool)
            .await?;
    let mut b = Balances {
        provider_id: provider_id.to_owned(),
        ..Default::default()
    };
    let (payable, held, in_transit) = (
        accounts::payable(provider_id),
        accounts::held(provider_id),
        accounts::in_transit(provider_id),
    );
    for r in rows {
        let account: String = r.try_get(0)?;
        let balance: i64 = r.try_get(1)?;
        if account == payable {
            b.payable_micro_usdc = balance;
        } else if account == held {
            b.held_micro_usdc = balance;
        } else if account == in_transit {
            b.in_transit_micro_usdc = balance;
        } else if account == accounts::TREASURY_USDC || account == accounts::TREASURY_BANK {
            b.paid_micro_usdc += balance;
        }
    }
    Ok(b)
}
