//! Reads of streams and events: heads, events by stream and type, the ledger's clock mode.

use super::*;

/// Where a ledger's booking time comes from, fixed once per ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockMode {
    /// Production: bookings carry the real clock; `--now` off the clock is refused.
    Real,
    /// Replays, demos, tests: any `--now` (never earlier than the latest booking).
    Simulated,
}

/// The idempotency key of the ledger's `ledger.clock_set` event on the platform stream.
pub const CLOCK_KEY: &str = "ledger:clock";

/// The mode a booked `ledger.clock_set` payload names.
pub(super) fn clock_of_payload(payload: &str) -> Result<ClockMode, StoreError> {
    match EventBody::from_json("ledger.clock_set", 1, payload) {
        Ok(EventBody::ClockSet(c)) => ClockMode::parse(&c.mode),
        _ => None,
    }
    .ok_or_else(|| StoreError::Corrupt("ledger.clock_set names no clock mode".into()))
}

impl ClockMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ClockMode::Real => "real",
            ClockMode::Simulated => "simulated",
        }
    }
    pub fn parse(text: &str) -> Option<ClockMode> {
        match text {
            "real" => Some(ClockMode::Real),
            "simulated" => Some(ClockMode::Simulated),
            _ => None,
        }
    }
}

impl Store {
    /// The latest `recorded_at` on the ledger: booking time never moves backwards past it.
    /// A stream's `recorded_at` never decreases, so this is the maximum over the streams'
    /// last events, found stream by stream through the primary key (a skip scan: one index
    /// probe per stream, no index on `recorded_at`).
    pub async fn max_recorded_at_ms(&self) -> Result<Option<i64>, StoreError> {
        // On Citus each shard reads its own maximum (a recursive scan does not distribute).
        let sql = if self.is_citus() {
            "SELECT MAX(recorded_at_ms) FROM events".to_owned()
        } else {
            format!(
                "{STREAMS_SKIP_SCAN} \
             SELECT MAX((SELECT h.recorded_at_ms FROM events AS h WHERE h.stream = s.stream ORDER BY h.seq DESC LIMIT 1)) \
             FROM s WHERE s.stream IS NOT NULL"
            )
        };
        Ok(on!(&self.db, |c| sqlx::query_scalar(&sql)
            .fetch_one(c)
            .await)?)
    }

    /// All streams, in name order.
    pub async fn streams(&self) -> Result<Vec<String>, StoreError> {
        Ok(on!(&self.db, |c| sqlx::query_scalar(
            "SELECT DISTINCT stream FROM events ORDER BY stream"
        )
        .fetch_all(c)
        .await)?)
    }

    /// The head `(seq, hash)` of every stream, as stored, in one statement (one snapshot).
    pub(crate) async fn stream_heads(
        &self,
    ) -> Result<std::collections::BTreeMap<String, (i64, Vec<u8>)>, StoreError> {
        let rows: Vec<HashedHead> = on!(&self.db, |c| sqlx::query_as(
            "SELECT e.stream, e.seq, e.hash FROM events e \
             JOIN (SELECT stream, MAX(seq) AS seq FROM events GROUP BY stream) m \
             ON m.stream = e.stream AND m.seq = e.seq",
        )
        .fetch_all(c)
        .await)?;
        Ok(rows
            .into_iter()
            .map(|h| (h.at.stream, (h.at.seq, h.hash)))
            .collect())
    }

    /// The database answers (readiness).
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        on!(&self.db, |c| sqlx::query("SELECT 1")
            .execute(c)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// The `seq` of a stream's last event (0 for a stream without events): one probe of the
    /// primary key.
    pub async fn stream_head(&self, stream: &str) -> Result<i64, StoreError> {
        let head: Option<i64> = on!(&self.db, |c| sqlx::query_scalar(
            "SELECT MAX(seq) FROM events WHERE stream = $1"
        )
        .bind(stream)
        .fetch_one(c)
        .await)?;
        Ok(head.unwrap_or(0))
    }

    /// Events of one stream with `seq > after`, in order, at most `limit`.
    pub async fn stream_events(
        &self,
        stream: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        Ok(on!(&self.db, |c| {
            sqlx::query_as(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE stream = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        ))
        .bind(stream)
        .bind(after)
        .bind(limit)
        .fetch_all(c)
        .await
        })?)
    }

    /// Every event of one of `event_types` (never `usage.recorded`), on any stream, by
    /// stream and sequence: the index `events_control_types` leaves usage out, so this
    /// reads the ledger's rare kinds without a scan of its usage.
    pub(crate) async fn events_of_types(
        &self,
        event_types: &[&str],
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE event_type <> 'usage.recorded' AND event_type IN ({}) ORDER BY stream, seq",
            numbered(1, event_types.len())
        );
        Ok(on!(&self.db, |c| {
            event_types
                .iter()
                .fold(sqlx::query_as(&sql), |q, t| q.bind(*t))
                .fetch_all(c)
                .await
        })?)
    }

    /// The payloads of `stream`'s events of `event_type` booked after `after_ms` (a
    /// provider's adjustments within the control window).
    pub(crate) async fn payloads_since(
        &self,
        stream: &str,
        event_type: &str,
        after_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        Ok(on!(&self.db, |c| {
            sqlx::query_scalar(
            "SELECT payload FROM events WHERE event_type <> 'usage.recorded' AND event_type = $2 AND stream = $1 AND recorded_at_ms > $3 ORDER BY seq"
        )
        .bind(stream)
        .bind(event_type)
        .bind(after_ms)
        .fetch_all(c)
        .await
        })?)
    }

    /// The payload of the latest event of `event_type` on `stream` (the policy in force).
    pub(crate) async fn latest_payload_of_type(
        &self,
        stream: &str,
        event_type: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(on!(&self.db, |c| {
            sqlx::query_scalar(
            "SELECT payload FROM events WHERE stream = $1 AND event_type = $2 ORDER BY seq DESC LIMIT 1"
        )
        .bind(stream)
        .bind(event_type)
        .fetch_optional(c)
        .await
        })?)
    }

    /// The events of `stream` whose type is one of `event_types`, in stream order (one scan
    /// of the stream: for the platform stream's rare kinds, such as `operator.added`).
    pub async fn stream_events_of_types(
        &self,
        stream: &str,
        event_types: &[&str],
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE stream = $1 AND event_type IN ({}) ORDER BY seq",
            numbered(2, event_types.len())
        );
        Ok(on!(&self.db, |c| {
            event_types
                .iter()
                .fold(sqlx::query_as(&sql).bind(stream), |q, t| q.bind(*t))
                .fetch_all(c)
                .await
        })?)
    }

    /// The ledger's clock mode, as booked on the chain (`ledger.clock_set`, idempotency key
    /// [`CLOCK_KEY`] on the platform stream); `None` until fixed. A ledger created before
    /// the mode was booked keeps it in `ledger_settings` until `ledger::policy::fix_clock_mode`
    /// books it: a row changed by SQL after that changes nothing.
    ///
    /// The event is read with its neighbour and must hash to its stored hash, and the next
    /// platform event must chain from it: a mode rewritten by SQL (even with its hash
    /// recomputed) fails closed (`Corrupt`) instead of turning a real-clock ledger into a
    /// simulated one.
    pub async fn clock_mode(&self) -> Result<Option<ClockMode>, StoreError> {
        let platform = crate::domain::event::PLATFORM_STREAM;
        let booked: Option<StoredEvent> = on!(&self.db, |c| sqlx::query_as(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE idem_key = $1 AND stream = $2"
        ))
        .bind(CLOCK_KEY)
        .bind(platform)
        .fetch_optional(c)
        .await)?;
        let Some(e) = booked else {
            return self.legacy_clock_mode().await;
        };
        let next: Option<Vec<u8>> = on!(&self.db, |c| sqlx::query_scalar(
            "SELECT prev_hash FROM events WHERE stream = $1 AND seq = $2"
        )
        .bind(platform)
        .bind(e.seq + 1)
        .fetch_optional(c)
        .await)?;
        let hashes = event_hash(&e.prev_hash, &canonical_bytes(&e)).as_slice() == e.hash;
        if !hashes || next.is_some_and(|prev| prev != e.hash) {
            return Err(StoreError::Corrupt(format!(
                "the ledger's clock mode (platform event {}) does not verify against its chain: \
                 it was changed behind the engine",
                e.seq
            )));
        }
        clock_of_payload(&e.payload).map(Some)
    }

    /// The mode a ledger of an earlier release kept in `ledger_settings`.
    pub(super) async fn legacy_clock_mode(&self) -> Result<Option<ClockMode>, StoreError> {
        let value: Option<String> = on!(&self.db, |c| sqlx::query_scalar(
            "SELECT value FROM ledger_settings WHERE name = 'clock'"
        )
        .fetch_optional(c)
        .await)?;
        Ok(match value {
            Some(value) => Some(ClockMode::parse(&value).ok_or_else(|| {
                StoreError::Corrupt("ledger_settings.clock is neither real nor simulated".into())
            })?),
            None => None,
        })
    }

    /// The mode of the booked `ledger.clock_set` event, read in the transaction `tx`
    /// (which holds the platform stream's lock).
    pub(crate) async fn booked_clock_mode_in(
        tx: &mut WriteTx,
    ) -> Result<Option<ClockMode>, StoreError> {
        let booked: Option<String> = on!(tx.conn(), |c| sqlx::query_scalar(
            "SELECT payload FROM events WHERE idem_key = $1 AND stream = $2"
        )
        .bind(CLOCK_KEY)
        .bind(crate::domain::event::PLATFORM_STREAM)
        .fetch_optional(c)
        .await)?;
        booked.as_deref().map(clock_of_payload).transpose()
    }

    /// The mode a ledger of an earlier release kept in `ledger_settings`, if any.
    pub(crate) async fn kept_clock_mode(&self) -> Result<Option<ClockMode>, StoreError> {
        self.legacy_clock_mode().await
    }

    /// Whether the clock mode is booked on the chain (a ledger of an earlier release keeps
    /// it in `ledger_settings` until `settle migrate` or its next booking books it).
    pub async fn clock_mode_booked(&self) -> Result<bool, StoreError> {
        row_exists(
            &self.db,
            "SELECT 1 FROM events WHERE idem_key = $1 AND stream = 'platform'",
            CLOCK_KEY,
        )
        .await
        .map_err(StoreError::from)
    }

    /// Events booked after `after_ms` (`recorded_at`): how many, and the first few by
    /// stream and sequence (for `verify` on a real-clock ledger).
    pub(crate) async fn booked_after(
        &self,
        after_ms: i64,
        listed_max: i64,
    ) -> Result<(i64, Vec<(String, i64, i64)>), StoreError> {
        let count: i64 = on!(&self.db, |c| sqlx::query_scalar(
            "SELECT COUNT(*) FROM events WHERE recorded_at_ms > $1"
        )
        .bind(after_ms)
        .fetch_one(c)
        .await)?;
        let rows: Vec<BookedAt> = on!(&self.db, |c| {
            sqlx::query_as(
            "SELECT stream, seq, recorded_at_ms FROM events WHERE recorded_at_ms > $1 ORDER BY stream, seq LIMIT $2",
        )
        .bind(after_ms)
        .bind(listed_max)
        .fetch_all(c)
        .await
        })?;
        let listed = rows
            .into_iter()
            .map(|r| (r.stream, r.seq, r.recorded_at_ms))
            .collect();
        Ok((count, listed))
    }

    /// Total number of events.
    pub async fn event_count(&self) -> Result<i64, StoreError> {
        Ok(on!(&self.db, |c| sqlx::query_scalar(
            "SELECT COUNT(*) FROM events"
        )
        .fetch_one(c)
        .await)?)
    }

    /// Reads every row of a projection table into memory (for `verify`).
    pub async fn load_projection(
        &self,
        table: &'static crate::domain::projection::TableSpec,
    ) -> Result<
        std::collections::BTreeMap<
            Vec<crate::domain::projection::Val>,
            Vec<crate::domain::projection::Val>,
        >,
        StoreError,
    > {
        let mut conn = self.db.acquire().await?;
        project::load_table(&mut conn, table).await
    }
}
