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

/// Rules of the payout runs (SPEC §5) and of EUR payouts (SPEC §6).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    /// Smallest payout of a weekly run (25 USDC).
    pub weekly_minimum_micro_usdc: i64,
    /// Smallest payout of a monthly run (1 USDC).
    pub monthly_minimum_micro_usdc: i64,
    /// Largest payout created without an admin release (100,000 USDC); above it, held.
    pub payout_limit_micro_usdc: i64,
    /// Takeover guard: a payout method set by `provider.update` less than this many hours
    /// before the run is not paid to (72 hours).
    pub cooling_off_hours: i64,
    /// An FX rate older than this many hours holds EUR payouts with `fx_stale` (48 hours).
    pub fx_stale_hours: i64,
}

impl RunConfig {
    pub const DEFAULT_WEEKLY_MINIMUM_MICRO_USDC: i64 = 25_000_000;
    pub const DEFAULT_MONTHLY_MINIMUM_MICRO_USDC: i64 = 1_000_000;
    pub const DEFAULT_PAYOUT_LIMIT_MICRO_USDC: i64 = 100_000_000_000;
    pub const DEFAULT_COOLING_OFF_HOURS: i64 = 72;
    pub const DEFAULT_FX_STALE_HOURS: i64 = 48;
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            weekly_minimum_micro_usdc: Self::DEFAULT_WEEKLY_MINIMUM_MICRO_USDC,
            monthly_minimum_micro_usdc: Self::DEFAULT_MONTHLY_MINIMUM_MICRO_USDC,
            payout_limit_micro_usdc: Self::DEFAULT_PAYOUT_LIMIT_MICRO_USDC,
            cooling_off_hours: Self::DEFAULT_COOLING_OFF_HOURS,
            fx_stale_hours: Self::DEFAULT_FX_STALE_HOURS,
        }
    }
}

/// The HTTP API (SPEC §7).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Address to listen on; port 0 picks a free port (tests).
    pub bind: String,
    /// Bytes per request body (the usage endpoint uses `ledger.batch_bytes_max`).
    pub body_bytes_max: usize,
    /// Largest `limit` of a list request.
    pub page_size_max: usize,
    /// `limit` of a list request that gives none.
    pub page_size_default: usize,
    /// Solana cluster of the explorer links: `mainnet-beta` (no `?cluster=`), `devnet`,
    /// `testnet`, or `custom`.
    pub explorer_cluster: String,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            bind: "127.0.0.1:8080".to_owned(),
            body_bytes_max: 1024 * 1024,
            page_size_max: 1000,
            page_size_default: 100,
            explorer_cluster: "mainnet-beta".to_owned(),
        }
    }
}
