//! SQLite's WAL checkpointed beside the writers (`store.sqlite_checkpoint_interval_ms`).
//!
//! A commit that leaves `store.sqlite_wal_autocheckpoint_pages` or more pages in the WAL
//! checkpoints it before it returns: it copies every page not yet in the database file
//! and fsyncs that file, 54–112 ms where a commit takes 10–34 ms (measured in the payout
//! run benchmark, ops/bench/runs.md). This task copies the committed pages every interval with a PASSIVE
//! checkpoint on a connection of its own, so that commit finds little left to copy
//! (it still lets the WAL start over from its beginning, which only a writer can).
//!
//! PASSIVE takes no lock that a writer or a reader waits for: it copies only the pages no
//! open snapshot still needs from the WAL, and leaves the rest for the next round.
//! Durability does not depend on it: every commit is fsynced in the WAL first.

use std::time::Duration;

use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteSynchronous};

/// The background task of one store; stopped by [`Checkpointer::stop`] or when the store's
/// last handle is dropped.
pub(crate) struct Checkpointer(tokio::task::JoinHandle<()>);

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Checkpointer {
    /// Checkpoints the database of `options` every `interval`, on a connection of its own
    /// (opened at the first round; a pooled one would make a command open another).
    pub(crate) fn spawn(options: SqliteConnectOptions, interval: Duration) -> Checkpointer {
        // The copying needs no page cache; the database file is fsynced after it (FULL).
        let options = options
            .synchronous(SqliteSynchronous::Full)
            .pragma("cache_size", "-64")
            .create_if_missing(false);
        Checkpointer(tokio::spawn(checkpoint_every(options, interval)))
    }

    pub(crate) fn stop(&self) {
        self.0.abort();
    }
}

async fn checkpoint_every(options: SqliteConnectOptions, interval: Duration) {
    let mut conn: Option<SqliteConnection> = None;
    let mut failing = false;
    loop {
        tokio::time::sleep(interval).await;
        let done = match conn.as_mut() {
            Some(c) => checkpoint(c).await,
            None => match options.connect().await {
                Ok(c) => checkpoint(conn.insert(c)).await,
                Err(e) => Err(e),
            },
        };
        match done {
            Ok((wal_pages, copied_pages)) => {
                failing = false;
                tracing::trace!(wal_pages, copied_pages, "WAL checkpointed");
            }
            Err(error) => {
                if !failing {
                    tracing::warn!(%error, "background WAL checkpoint failed; commits past store.sqlite_wal_autocheckpoint_pages still checkpoint");
                }
                failing = true;
                conn = None;
            }
        }
    }
}

/// One PASSIVE checkpoint: the WAL's pages and how many of them are now in the database file.
async fn checkpoint(conn: &mut SqliteConnection) -> Result<(i64, i64), sqlx::Error> {
    let (_busy, wal_pages, copied_pages): (i64, i64, i64) =
        sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(conn)
            .await?;
    Ok((wal_pages, copied_pages))
}
