//! What a provider statement reads (SPEC §13, `src/statement/`): the `payout.created` events
//! of providers' streams, a stream's events between two positions, the positions booked in
//! a time window, and one event's hash.

use super::{EVENT_COLUMNS, Store, StoreError, StoredEvent, numbered, on};

/// The event type that ends a payout statement.
const PAYOUT_CREATED: &str = "payout.created";
/// Streams per statement of [`payouts_created`].
const STREAMS_PER_READ: usize = 500;

/// The `payout.created` events of `streams`, by stream and sequence. Reads the index of
/// the ledger's rare kinds (`events_control_types`), never a stream's usage.
pub(crate) async fn payouts_created(
    store: &Store,
    streams: &[String],
) -> Result<Vec<StoredEvent>, StoreError> {
    let mut out = Vec::new();
    for chunk in streams.chunks(STREAMS_PER_READ) {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE event_type = $1 \
             AND event_type <> 'usage.recorded' AND stream IN ({}) ORDER BY stream, seq",
            numbered(2, chunk.len())
        );
        let rows: Vec<StoredEvent> = on!(store.db(), |c| {
            chunk
                .iter()
                .fold(sqlx::query_as(&sql).bind(PAYOUT_CREATED), |q, s| q.bind(s))
                .fetch_all(c)
                .await
        })?;
        out.extend(rows);
    }
    Ok(out)
}

/// The events of `stream` from `first` to `last` (inclusive), in order.
pub async fn stream_range(
    store: &Store,
    stream: &str,
    first: i64,
    last: i64,
) -> Result<Vec<StoredEvent>, StoreError> {
    Ok(on!(store.db(), |c| {
        sqlx::query_as(&format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE stream = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq"
    ))
    .bind(stream)
    .bind(first)
    .bind(last)
    .fetch_all(c)
    .await
    })?)
}

/// The first and last position of `stream` booked in `[from_ms, to_ms)`, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct SeqWindow {
    pub first: Option<i64>,
    pub last: Option<i64>,
}

/// See [`SeqWindow`].
pub(crate) async fn booked_between(
    store: &Store,
    stream: &str,
    from_ms: i64,
    to_ms: i64,
) -> Result<SeqWindow, StoreError> {
    Ok(on!(store.db(), |c| sqlx::query_as(
        "SELECT MIN(seq) AS first, MAX(seq) AS last FROM events \
         WHERE stream = $1 AND recorded_at_ms >= $2 AND recorded_at_ms < $3"
    )
    .bind(stream)
    .bind(from_ms)
    .bind(to_ms)
    .fetch_one(c)
    .await)?)
}
