//! Configuration: every limit is named (`*_max`) and has a documented default.
//! Layering (TOML file, then `SETTLE_*` environment) lives in `Config::load`.

use serde::Deserialize;

/// Limits and rules of the ledger's commands (SPEC §4).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// Oldest accepted `started_at`, in days before now.
    pub lateness_days_max: i64,
    /// How far `ended_at` may lie in the future, in milliseconds.
    pub future_tolerance_ms: i64,
    /// Longest accepted usage interval, in milliseconds (7 days).
    pub interval_ms_max: i64,
    /// Events per ingest batch.
    pub batch_events_max: usize,
    /// Bytes per ingest request body.
    pub batch_bytes_max: usize,
    /// Retries of a write transaction that lost a race.
    pub write_retries_max: u32,
    /// Length of free-text fields (reasons, names, references).
    pub text_len_max: usize,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            lateness_days_max: 90,
            future_tolerance_ms: 5 * 60 * 1000,
            interval_ms_max: 7 * 24 * 3_600_000,
            batch_events_max: 1000,
            batch_bytes_max: 1024 * 1024,
            write_retries_max: 50,
            text_len_max: 500,
        }
    }
}
