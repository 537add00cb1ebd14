//! Writing appended events: binary `COPY` on PostgreSQL, multi-row `VALUES` on SQLite.

use sqlx::postgres::PgConnection;

use sqlx::Arguments;

use super::{Conn, EVENT_COLUMNS, StoredEvent, values};

/// The number of columns in [`EVENT_COLUMNS`].
const EVENT_COLUMN_COUNT: usize = 12;

/// Inserts `events` (already chained) in the transaction on `conn`. A taken `(stream, seq)` or
/// idempotency key fails the whole insert with a unique violation.
pub(super) async fn insert_events(
    conn: &mut Conn,
    events: &[StoredEvent],
) -> Result<(), sqlx::Error> {
    match conn {
        Conn::Postgres(c) => copy_events(c, events).await,
        Conn::Sqlite(c) => {
            // Bound as the parameters of multi-row `VALUES` (`store::values`), blobs as blobs.
            // Per row, a prepared `INSERT` was measured slower: sqlx runs each statement on the
            // connection's worker thread, a round trip between threads per row (measured in
            // the ingestion benchmark, `ops/bench/ingest.md`).
            let head = format!("INSERT INTO events ({EVENT_COLUMNS})");
            values::write(c, &head, "", EVENT_COLUMN_COUNT, events, |args, e| {
                args.add(&e.stream)?;
                args.add(e.seq)?;
                args.add(&e.event_type)?;
                args.add(e.version)?;
                args.add(&e.idem_key)?;
                args.add(&e.content_hash)?;
                args.add(&e.actor)?;
                args.add(e.recorded_at_ms)?;
                args.add(&e.payload)?;
                args.add(&e.lines)?;
                args.add(&e.prev_hash)?;
                args.add(&e.hash)
            })
            .await?;
            Ok(())
        }
    }
}

/// PostgreSQL: the rows as one binary `COPY … FROM STDIN` (no statement to parse or plan, no
/// text to convert: a quarter of the time of the same rows as a JSON parameter; `ops/bench/ingest.md`).
async fn copy_events(conn: &mut PgConnection, events: &[StoredEvent]) -> Result<(), sqlx::Error> {
    let mut copy = conn
        .copy_in_raw(&format!(
            "COPY events ({EVENT_COLUMNS}) FROM STDIN WITH (FORMAT binary)"
        ))
        .await?;
    copy.send(copy_binary(events)).await?;
    let copied = copy.finish().await?;
    debug_assert_eq!(copied, events.len() as u64);
    Ok(())
}

/// `events` in PostgreSQL's binary `COPY` format, columns in [`EVENT_COLUMNS`] order: the
/// signature, flags and header extension; per row the field count and each field as its
/// length (-1 for NULL) and bytes (`bigint` big-endian, `text` UTF-8, `bytea` raw); the
/// trailer -1.
pub(super) fn copy_binary(events: &[StoredEvent]) -> Vec<u8> {
    const FIELDS: i16 = 12;
    let mut out = Vec::with_capacity(19 + events.len() * 1_024 + 2);
    out.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    let field = |out: &mut Vec<u8>, bytes: Option<&[u8]>| match bytes {
        Some(b) => {
            let len = i32::try_from(b.len()).expect("a field under 2 GiB");
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(b);
        }
        None => out.extend_from_slice(&(-1i32).to_be_bytes()),
    };
    for e in events {
        out.extend_from_slice(&FIELDS.to_be_bytes());
        field(&mut out, Some(e.stream.as_bytes()));
        field(&mut out, Some(&e.seq.to_be_bytes()));
        field(&mut out, Some(e.event_type.as_bytes()));
        field(&mut out, Some(&e.version.to_be_bytes()));
        field(&mut out, e.idem_key.as_deref().map(str::as_bytes));
        field(&mut out, e.content_hash.as_deref());
        field(&mut out, Some(e.actor.as_bytes()));
        field(&mut out, Some(&e.recorded_at_ms.to_be_bytes()));
        field(&mut out, Some(e.payload.as_bytes()));
        field(&mut out, Some(e.lines.as_bytes()));
        field(&mut out, Some(&e.prev_hash));
        field(&mut out, Some(&e.hash));
    }
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sqlite_insert_binds_every_event_column() {
        assert_eq!(EVENT_COLUMNS.split(',').count(), EVENT_COLUMN_COUNT);
    }

    fn event(idem_key: Option<&str>) -> StoredEvent {
        StoredEvent {
            stream: "provider:p-1".into(),
            seq: 7,
            event_type: "usage.recorded".into(),
            version: 1,
            idem_key: idem_key.map(str::to_owned),
            content_hash: idem_key.map(|_| vec![0xab; 2]),
            actor: "ingest".into(),
            recorded_at_ms: 1_700_000_000_000,
            payload: "{}".into(),
            lines: "[]".into(),
            prev_hash: vec![1, 2],
            hash: vec![3],
        }
    }

    /// The layout PostgreSQL documents for binary COPY, byte by byte, for one row with NULLs
    /// and one without.
    #[test]
    fn binary_copy_rows_follow_the_documented_layout() {
        let bytes = copy_binary(&[event(None), event(Some("k"))]);
        let mut want: Vec<u8> = b"PGCOPY\n\xff\r\n\0".to_vec();
        want.extend([0, 0, 0, 0, 0, 0, 0, 0]);
        for key in [None, Some("k")] {
            want.extend([0, 12]);
            let mut f = |b: Option<&[u8]>| match b {
                Some(b) => {
                    want.extend((b.len() as i32).to_be_bytes());
                    want.extend(b);
                }
                None => want.extend([0xff; 4]),
            };
            f(Some(b"provider:p-1"));
            f(Some(&[0, 0, 0, 0, 0, 0, 0, 7]));
            f(Some(b"usage.recorded"));
            f(Some(&[0, 0, 0, 0, 0, 0, 0, 1]));
            f(key.map(str::as_bytes));
            f(key.map(|_| &[0xab, 0xab][..]));
            f(Some(b"ingest"));
            f(Some(&1_700_000_000_000i64.to_be_bytes()));
            f(Some(b"{}"));
            f(Some(b"[]"));
            f(Some(&[1, 2]));
            f(Some(&[3]));
        }
        want.extend([0xff, 0xff]);
        assert_eq!(bytes, want);
    }
}
