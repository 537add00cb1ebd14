//! Personal data (SPEC §11): the events of the kinds that carry personal fields, a page at a
//! time in stream order (`settle privacy report`), and the providers' wrapped data keys
//! (`provider_keys`, outside the chain).

use super::on;
use super::{Store, StoreError};

/// One event's identity, type and payload.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct TypedPayloadRow {
    pub stream: String,
    pub seq: i64,
    pub event_type: String,
    pub payload: String,
}

/// Up to `limit` events whose type is one of `event_types`, after `after` (a stream and a
/// sequence) in the order of (stream, sequence): the primary key's order, so the pages of
/// a ledger that grows meanwhile still cover every event once.
pub(crate) async fn events_of_types(
    store: &Store,
    event_types: &[&str],
    after: Option<&(String, i64)>,
    limit: i64,
) -> Result<Vec<TypedPayloadRow>, StoreError> {
    let types: Vec<String> = (0..event_types.len())
        .map(|i| format!("${}", i + 4))
        .collect();
    let sql = format!(
        "SELECT stream, seq, event_type, payload FROM events \
         WHERE (stream > $1 OR (stream = $1 AND seq > $2)) AND event_type IN ({}) \
         ORDER BY stream, seq LIMIT $3",
        types.join(", ")
    );
    let (stream, seq) = after.map_or(("", -1), |(s, q)| (s.as_str(), *q));
    Ok(on!(store.db(), |c| {
        let mut query = sqlx::query_as(&sql).bind(stream).bind(seq).bind(limit);
        for t in event_types {
            query = query.bind(*t);
        }
        query.fetch_all(c).await
    })?)
}

/// A data key's row (`provider_keys`).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct KeyRow {
    pub owner: String,
    pub master_key_id: String,
    /// Hex of the wrapped key; `None` once destroyed (or for an owner erased before it had
    /// a key).
    pub wrapped: Option<String>,
    pub created_at_ms: i64,
    pub erased_at_ms: Option<i64>,
    pub destroy_after_ms: Option<i64>,
    pub destroyed_at_ms: Option<i64>,
}

const KEY_COLUMNS: &str =
    "owner, master_key_id, wrapped, created_at_ms, erased_at_ms, destroy_after_ms, destroyed_at_ms";

/// The key row of `owner`.
pub async fn key_row(store: &Store, owner: &str) -> Result<Option<KeyRow>, StoreError> {
    let sql = format!("SELECT {KEY_COLUMNS} FROM provider_keys WHERE owner = $1");
    Ok(on!(store.db(), |c| sqlx::query_as(&sql)
        .bind(owner)
        .fetch_optional(c)
        .await)?)
}

/// Stores `owner`'s new wrapped key unless it has a row already (a concurrent first use
/// made one: the caller reads that one back).
pub(crate) async fn insert_key(
    store: &Store,
    owner: &str,
    master_key_id: &str,
    wrapped: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    on!(store.db(), |c| {
        sqlx::query(
        "INSERT INTO provider_keys (owner, master_key_id, wrapped, created_at_ms) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (owner) DO NOTHING"
    )
    .bind(owner)
    .bind(master_key_id)
    .bind(wrapped)
    .bind(now_ms)
    .execute(c)
    .await
    .map(|r| r.rows_affected())
    })?;
    Ok(())
}

/// Marks `owner` erased at `now_ms` (kept if it was erased before) with its key destroyed
/// from `destroy_after_ms` on; an owner without a key gets a row without one.
pub(crate) async fn mark_erased(
    store: &Store,
    owner: &str,
    now_ms: i64,
    destroy_after_ms: i64,
) -> Result<(), StoreError> {
    let mut conn = store.acquire().await?;
    mark_erased_on(&mut conn, owner, now_ms, destroy_after_ms).await
}

/// Up to `limit` keys still wrapped under another master key than `master_key_id`.
pub(crate) async fn keys_not_under(
    store: &Store,
    master_key_id: &str,
    limit: i64,
) -> Result<Vec<KeyRow>, StoreError> {
    let sql = format!(
        "SELECT {KEY_COLUMNS} FROM provider_keys WHERE wrapped IS NOT NULL AND master_key_id <> $1 ORDER BY owner LIMIT $2"
    );
    Ok(on!(store.db(), |c| sqlx::query_as(&sql)
        .bind(master_key_id)
        .bind(limit)
        .fetch_all(c)
        .await)?)
}

/// Replaces `owner`'s wrapped key `from` by `to` under `master_key_id`, unless it changed
/// meanwhile (destroyed, or re-wrapped by another rotation): whether it was replaced.
pub(crate) async fn rewrap_key(
    store: &Store,
    owner: &str,
    from: &str,
    master_key_id: &str,
    to: &str,
) -> Result<bool, StoreError> {
    let done = on!(store.db(), |c| {
        sqlx::query(
        "UPDATE provider_keys SET wrapped = $3, master_key_id = $4 WHERE owner = $1 AND wrapped = $2"
    )
    .bind(owner)
    .bind(from)
    .bind(to)
    .bind(master_key_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected())
    })?;
    Ok(done == 1)
}

/// The key rows of `owners` (those that have one), read a page of owners per statement.
pub(crate) async fn key_rows(store: &Store, owners: &[&str]) -> Result<Vec<KeyRow>, StoreError> {
    let mut rows = Vec::with_capacity(owners.len());
    for page in owners.chunks(KEYS_PER_READ) {
        let sql = format!(
            "SELECT {KEY_COLUMNS} FROM provider_keys WHERE owner IN ({})",
            store.dialect().placeholders(0, page.len())
        );
        let found: Vec<KeyRow> = on!(store.db(), |c| {
            let mut query = sqlx::query_as(&sql);
            for owner in page {
                query = query.bind(*owner);
            }
            query.fetch_all(c).await
        })?;
        rows.extend(found);
    }
    Ok(rows)
}

/// Owners whose key rows one statement reads.
const KEYS_PER_READ: usize = 500;

/// Whether any provider has a data key row: a ledger whose personal data a master key
/// already wraps (then a missing master key is never replaced by a new one).
pub(crate) async fn any_key(store: &Store) -> Result<bool, StoreError> {
    let found: Option<String> = on!(store.db(), |c| sqlx::query_scalar(
        "SELECT owner FROM provider_keys LIMIT 1"
    )
    .fetch_optional(c)
    .await)?;
    Ok(found.is_some())
}

/// The erased owners whose key is due for destruction at `now_ms` and still held, sorted.
pub(crate) async fn keys_due(store: &Store, now_ms: i64) -> Result<Vec<String>, StoreError> {
    Ok(on!(store.db(), |c| sqlx::query_scalar(
        "SELECT owner FROM provider_keys \
         WHERE wrapped IS NOT NULL AND erased_at_ms IS NOT NULL AND destroy_after_ms <= $1 \
         ORDER BY owner"
    )
    .bind(now_ms)
    .fetch_all(c)
    .await)?)
}

/// Destroys `owner`'s key if it is erased and due at `now_ms`: whether it was.
pub(crate) async fn destroy_key(
    store: &Store,
    owner: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let done = on!(store.db(), |c| {
        sqlx::query(
        "UPDATE provider_keys SET wrapped = NULL, destroyed_at_ms = $2 \
         WHERE owner = $1 AND wrapped IS NOT NULL AND erased_at_ms IS NOT NULL AND destroy_after_ms <= $2"
    )
    .bind(owner)
    .bind(now_ms)
    .execute(c)
    .await
    .map(|r| r.rows_affected())
    })?;
    Ok(done == 1)
}

/// A provider's payouts as erasure and key destruction weigh them.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct PayoutSpan {
    /// Payouts sent by their rail and not answered yet (`submitted`).
    pub submitted: i64,
    /// Payouts not final yet (`created`, `held`, `submitted`).
    pub open: i64,
    /// When a payout of the provider last changed.
    pub last_payout_at_ms: Option<i64>,
}

/// `provider_id`'s [`PayoutSpan`] (inside a write transaction, or on any connection).
pub(crate) async fn payout_span(
    conn: &mut super::Conn,
    provider_id: &str,
) -> Result<PayoutSpan, StoreError> {
    use crate::domain::payout::PayoutStatus;
    Ok(on!(&mut *conn, |c| sqlx::query_as(
        "SELECT COUNT(CASE WHEN status = $2 THEN 1 END) AS submitted, \
         COUNT(CASE WHEN status IN ($3, $4, $2) THEN 1 END) AS open, \
         MAX(updated_at_ms) AS last_payout_at_ms FROM payouts WHERE provider_id = $1"
    )
    .bind(provider_id)
    .bind(PayoutStatus::Submitted.as_str())
    .bind(PayoutStatus::Created.as_str())
    .bind(PayoutStatus::Held.as_str())
    .fetch_one(c)
    .await)?)
}

/// [`mark_erased`] inside a write transaction: the erasure's event and its key's row commit
/// together.
pub(crate) async fn mark_erased_on(
    conn: &mut super::Conn,
    owner: &str,
    now_ms: i64,
    destroy_after_ms: i64,
) -> Result<(), StoreError> {
    on!(&mut *conn, |c| {
        sqlx::query(
            "INSERT INTO provider_keys (owner, master_key_id, wrapped, created_at_ms, erased_at_ms, destroy_after_ms) \
             VALUES ($1, '', NULL, $2, $2, $3) \
             ON CONFLICT (owner) DO UPDATE SET erased_at_ms = COALESCE(provider_keys.erased_at_ms, excluded.erased_at_ms), \
             destroy_after_ms = excluded.destroy_after_ms",
        )
        .bind(owner)
        .bind(now_ms)
        .bind(destroy_after_ms)
        .execute(c)
        .await
        .map(|r| r.rows_affected())
    })?;
    Ok(())
}

/// Replaces `provider_id`'s payout method digest with `digest` (none: deleted), in the
/// transaction that books the method or the erasure.
pub(crate) async fn replace_method_digest(
    conn: &mut super::Conn,
    provider_id: &str,
    digest: Option<&str>,
) -> Result<(), StoreError> {
    on!(&mut *conn, |c| sqlx::query(
        "DELETE FROM payout_method_digests WHERE provider_id = $1"
    )
    .bind(provider_id)
    .execute(c)
    .await
    .map(|r| r.rows_affected()))?;
    if let Some(digest) = digest {
        on!(&mut *conn, |c| sqlx::query(
            "INSERT INTO payout_method_digests (digest, provider_id) VALUES ($1, $2) \
             ON CONFLICT DO NOTHING"
        )
        .bind(digest)
        .bind(provider_id)
        .execute(c)
        .await
        .map(|r| r.rows_affected()))?;
    }
    Ok(())
}

/// The providers whose payout method has `digest`, sorted.
pub(crate) async fn providers_with_digest(
    store: &Store,
    digest: &str,
) -> Result<Vec<String>, StoreError> {
    Ok(on!(store.db(), |c| sqlx::query_scalar(
        "SELECT provider_id FROM payout_method_digests WHERE digest = $1 ORDER BY provider_id"
    )
    .bind(digest)
    .fetch_all(c)
    .await)?)
}
