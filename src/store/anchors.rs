//! Anchors of the chain heads (SPEC §13, `src/anchor/`): the roots the anchor log holds and
//! their publications on Solana, recorded in the database too (append-only), so that a log
//! cut short, or rewritten, disagrees with the ledger.

use super::on;
use super::{Store, StoreError};

/// An anchor's root as the database recorded it.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct AnchorRow {
    pub n: i64,
    /// Hex.
    pub root: String,
    pub at_ms: i64,
}

/// A root published on Solana: the memo transaction that carries it.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct PublicationRow {
    pub signature: String,
    pub n: i64,
    /// Hex.
    pub root: String,
    pub at_ms: i64,
}

/// Records anchor `n` (a second record of the same `n` is refused by the key).
pub(crate) async fn record_anchor(store: &Store, row: &AnchorRow) -> Result<(), StoreError> {
    on!(store.db(), |c| sqlx::query(
        "INSERT INTO anchors (n, root, at_ms) VALUES ($1, $2, $3)"
    )
    .bind(row.n)
    .bind(&row.root)
    .bind(row.at_ms)
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(())
}

/// Every recorded anchor, in order.
pub async fn anchors(store: &Store) -> Result<Vec<AnchorRow>, StoreError> {
    Ok(on!(store.db(), |c| sqlx::query_as(
        "SELECT n, root, at_ms FROM anchors ORDER BY n"
    )
    .fetch_all(c)
    .await)?)
}

/// Records a publication.
pub(crate) async fn record_publication(
    store: &Store,
    row: &PublicationRow,
) -> Result<(), StoreError> {
    on!(store.db(), |c| sqlx::query(
        "INSERT INTO anchor_publications (signature, n, root, at_ms) VALUES ($1, $2, $3, $4)"
    )
    .bind(&row.signature)
    .bind(row.n)
    .bind(&row.root)
    .bind(row.at_ms)
    .execute(c)
    .await
    .map(|_| ()))?;
    Ok(())
}

/// Every publication, oldest first.
pub(crate) async fn publications(store: &Store) -> Result<Vec<PublicationRow>, StoreError> {
    Ok(on!(store.db(), |c| sqlx::query_as(
        "SELECT signature, n, root, at_ms FROM anchor_publications ORDER BY n, at_ms"
    )
    .fetch_all(c)
    .await)?)
}
