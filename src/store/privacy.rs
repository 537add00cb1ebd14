//! The reads of personal data on the chain (`settle privacy report`): the events of the
//! kinds that carry personal fields, a page at a time in stream order.

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
pub async fn events_of_types(
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
