//! Stored events by idempotency key: the look-ups behind every command's dedupe, and the
//! event a usage void names.

use std::collections::HashMap;

use super::on;
use super::{Conn, Dialect, Store, StoreError, json_rows_param};

/// The content hash stored with `key` (`Some(None)`: booked without one), on `stream` or,
/// without it, on any stream; `None` when the key is unused.
pub(crate) async fn stored_hash(
    conn: &mut Conn,
    key: &str,
    stream: Option<&str>,
) -> Result<Option<Option<Vec<u8>>>, StoreError> {
    let hash: Option<Option<Vec<u8>>> = match stream {
        Some(s) => on!(&mut *conn, |c| sqlx::query_scalar(
            "SELECT content_hash FROM events WHERE idem_key = $1 AND stream = $2",
        )
        .bind(key)
        .bind(s)
        .fetch_optional(c)
        .await)?,
        None => on!(&mut *conn, |c| sqlx::query_scalar(
            "SELECT content_hash FROM events WHERE idem_key = $1"
        )
        .bind(key)
        .fetch_optional(c)
        .await)?,
    };
    Ok(hash)
}

/// The `(stream, payload)` of every event booked under `key`, on whichever stream.
pub(crate) async fn payloads_by_key(
    store: &Store,
    key: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    let pool = store.db();
    let rows: Vec<StreamPayload> = on!(pool, |c| sqlx::query_as(
        "SELECT stream, payload FROM events WHERE idem_key = $1"
    )
    .bind(key)
    .fetch_all(c)
    .await)?;
    Ok(rows.into_iter().map(|r| (r.stream, r.payload)).collect())
}

#[derive(sqlx::FromRow)]
struct StreamPayload {
    stream: String,
    payload: String,
}

/// An idempotency key on the stream it is scoped to (SPEC §4: a key belongs to its
/// provider's stream, so the same `event_id` under two providers is two events).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StreamKey {
    pub stream: String,
    pub key: String,
}

impl StreamKey {
    pub fn new(stream: impl Into<String>, key: impl Into<String>) -> StreamKey {
        StreamKey {
            stream: stream.into(),
            key: key.into(),
        }
    }
}

/// Booked idempotency keys with their content hash (`None`: booked without one).
pub type KeyHashes = HashMap<StreamKey, Option<Vec<u8>>>;

/// An event's idempotency key on its stream, and its content hash.
#[derive(sqlx::FromRow)]
struct BookedKey {
    stream: String,
    idem_key: String,
    content_hash: Option<Vec<u8>>,
}

/// Of `keys`, the ones booked already, with their content hash: one statement for a whole
/// batch (a usage batch, a payout run's chunk of candidates).
pub(crate) async fn booked_keys(
    conn: &mut Conn,
    keys: &[StreamKey],
) -> Result<KeyHashes, StoreError> {
    let from = Dialect::of(conn).json_rows(1, keys.len());
    let sql = format!(
        "SELECT e.stream, e.idem_key, e.content_hash FROM {from} JOIN events AS e ON e.stream = j.value ->> 0 AND e.idem_key = j.value ->> 1"
    );
    let rows: Vec<(&str, &str)> = keys
        .iter()
        .map(|k| (k.stream.as_str(), k.key.as_str()))
        .collect();
    let found: Vec<BookedKey> = on!(conn, |c| sqlx::query_as(&sql)
        .bind(json_rows_param(&rows))
        .fetch_all(c)
        .await)?;
    Ok(found
        .into_iter()
        .map(|r| (StreamKey::new(r.stream, r.idem_key), r.content_hash))
        .collect())
}
