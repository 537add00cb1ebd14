//! Stored events by idempotency key: the look-ups behind every command's dedupe, and the
//! event a usage void names.

use std::collections::HashMap;

use sqlx::{AnyConnection, AnyPool, Row};

use super::{StoreError, WriteTx, json_rows_param};

/// The content hash stored with `key` (`Some(None)`: booked without one), on `stream` or,
/// without it, on any stream; `None` when the key is unused.
pub async fn stored_hash(
    conn: &mut AnyConnection,
    key: &str,
    stream: Option<&str>,
) -> Result<Option<Option<Vec<u8>>>, StoreError> {
    let row = match stream {
        Some(s) => {
            sqlx::query("SELECT content_hash FROM events WHERE idem_key = $1 AND stream = $2")
                .bind(key)
                .bind(s)
                .fetch_optional(&mut *conn)
                .await?
        }
        None => {
            sqlx::query("SELECT content_hash FROM events WHERE idem_key = $1")
                .bind(key)
                .fetch_optional(&mut *conn)
                .await?
        }
    };
    Ok(match row {
        Some(r) => Some(r.try_get::<Option<Vec<u8>>, _>(0)?),
        None => None,
    })
}

/// The `(stream, payload)` of every event booked under `key`, on whichever stream.
pub async fn payloads_by_key(
    pool: &AnyPool,
    key: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    let rows = sqlx::query("SELECT stream, payload FROM events WHERE idem_key = $1")
        .bind(key)
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// Of the `(idempotency key, stream)` pairs, the ones booked already, keyed `(stream, key)`,
/// with their content hash: one statement for a whole batch (a usage batch, a payout run's
/// chunk of candidates).
pub async fn booked_keys(
    tx: &mut WriteTx,
    keys: &[(String, String)],
) -> Result<HashMap<(String, String), Option<Vec<u8>>>, StoreError> {
    let from = tx.dialect().json_rows(1, keys.len());
    let sql = format!(
        "SELECT e.stream, e.idem_key, e.content_hash FROM {from} JOIN events AS e ON e.idem_key = j.value ->> 0 AND e.stream = j.value ->> 1"
    );
    let mut booked = HashMap::new();
    for r in sqlx::query(&sql)
        .bind(json_rows_param(keys))
        .fetch_all(tx.conn())
        .await?
    {
        booked.insert((r.try_get(0)?, r.try_get(1)?), r.try_get(2)?);
    }
    Ok(booked)
}
