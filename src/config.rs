//! Configuration: every limit is named (`*_max`) and has a documented default.
//! Layering (TOML file, then `SETTLE_*` environment) lives in `Config::load`.

use chrono::NaiveTime;
use rust_decimal::Decimal;
use serde::Deserialize;
use settle_calendar::{DEFAULT_CATCH_UP_WINDOW_DAYS, Schedule};

use crate::domain::DomainError;
use crate::domain::bands::{FxBand, RateBand, WithoutPriceBook};

/// Limits and rules of the ledger's commands (SPEC §4).
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// Oldest accepted `started_at`, in days before now.
    pub lateness_days_max: i64,
    /// Oldest `started_at` an agent's (`ingest`) token may report, in days before now (at
    /// most `lateness_days_max`): an agent reports what its machine saw lately; older usage
    /// comes from the metering pipeline or an operator.
    pub agent_lateness_days_max: i64,
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
    /// Provider streams booked in one ingest transaction: a batch spanning more providers
    /// commits in several transactions (a bank batch's payouts are settled in as many). On PostgreSQL each stream is an advisory lock held
    /// to the commit; the server's lock table holds `max_locks_per_transaction ×
    /// max_connections` locks in all (see ops/deploy/postgresql.conf).
    pub ingest_streams_per_tx_max: usize,
    /// Group commit of `POST /v1/usage` (`ledger::group`): the most events one booking
    /// transaction takes from the batches waiting while others are booked (a group holds at
    /// least one batch, so a larger batch is booked alone; 0 books every batch alone). A
    /// group also spans at most `ingest_streams_per_tx_max` providers: one transaction.
    pub usage_group_events_max: usize,
    /// Group commit: bookers at once, each booking one group in its own transaction (on
    /// SQLite they queue for its one writer, and prepare the next group meanwhile), and only
    /// groups of different providers side by side.
    pub usage_group_bookers_max: usize,
    /// Backpressure (`Store::wait_for_projector`): a booker of `POST /v1/usage` batches
    /// waits before its next group while the aggregates booked by this process have waited
    /// longer than this for the projector (`settle_projection_lag_seconds`); 0 never waits.
    pub usage_projection_lag_max_ms: u64,
    /// The longest such a wait lasts; then the group is booked anyway.
    pub usage_projection_wait_max_ms: u64,
    /// On a real-clock ledger, how far `--now` may lie from the real clock (clocks of two
    /// machines differ a little); further is refused (`now_off_clock`), and `verify`
    /// reports events booked further ahead than this (`booked_ahead_of_clock`).
    pub clock_skew_ms: i64,
    /// Lowest `rate_usdc_per_hour` a usage event may carry, in percent of the provider's
    /// price-book rate for the GPU's model in force at its `started_at` (inclusive; at most
    /// 100); below it the event is rejected with `rate_out_of_band`.
    pub usage_rate_band_min_pct: u32,
    /// Highest such rate, in percent of the price-book rate (inclusive; at least 100); above
    /// it `rate_out_of_band`.
    pub usage_rate_band_max_pct: u32,
    /// A usage event's own rate when the price book has no rate for the GPU's model at its
    /// `started_at`: `reject` (`rate_without_price_book`: nothing bounds it) or `accept`
    /// (only the 10,000 USDC/h cap of every rate applies).
    pub usage_rate_without_price_book: WithoutPriceBook,
    /// A copy of the `[control]` section, set by [`Config::load`], for the ledger's commands
    /// (not a key of `[ledger]`).
    #[serde(skip)]
    pub control: ControlConfig,
    /// A copy of the `[reliability]` section, set by [`Config::load`] (not a key of
    /// `[ledger]`).
    #[serde(skip)]
    pub reliability: ReliabilityConfig,
    /// The approval the commands of this ledger handle run under: set by
    /// `control::approve` on its own copy of the ledger, never by configuration; the
    /// events a gated command books name it (`approval_id`), so `verify` can tie them to a
    /// signed approval.
    #[serde(skip)]
    pub approval_id: Option<String>,
}

impl LedgerConfig {
    pub const DEFAULT_USAGE_RATE_BAND_MIN_PCT: u32 = 50;
    pub const DEFAULT_USAGE_RATE_BAND_MAX_PCT: u32 = 200;

    /// Lifts the bands (usage rates against the price book, FX rates): for a replay on a
    /// simulated-clock ledger, and for a command a second actor approved.
    pub(crate) fn lift_bands(&mut self) {
        self.usage_rate_band_min_pct = 0;
        self.usage_rate_band_max_pct = u32::MAX;
        self.usage_rate_without_price_book = WithoutPriceBook::Accept;
        self.control.fx_eur_per_usd_min = Decimal::ZERO;
        self.control.fx_eur_per_usd_max = Decimal::MAX;
        self.control.fx_step_max_pct = u32::MAX;
    }

    /// The band of the rates sent with usage events.
    pub(crate) fn rate_band(&self) -> RateBand {
        RateBand {
            min_pct: self.usage_rate_band_min_pct,
            max_pct: self.usage_rate_band_max_pct,
            without_price_book: self.usage_rate_without_price_book,
        }
    }
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            lateness_days_max: 90,
            agent_lateness_days_max: 7,
            future_tolerance_ms: 5 * 60 * 1000,
            interval_ms_max: 7 * 24 * 3_600_000,
            batch_events_max: 1000,
            batch_bytes_max: 1024 * 1024,
            write_retries_max: 50,
            text_len_max: 500,
            ingest_streams_per_tx_max: 1000,
            usage_group_events_max: 2000,
            usage_group_bookers_max: 2,
            usage_projection_lag_max_ms: 500,
            usage_projection_wait_max_ms: 1000,
            clock_skew_ms: 5 * 60 * 1000,
            usage_rate_band_min_pct: Self::DEFAULT_USAGE_RATE_BAND_MIN_PCT,
            usage_rate_band_max_pct: Self::DEFAULT_USAGE_RATE_BAND_MAX_PCT,
            usage_rate_without_price_book: WithoutPriceBook::Reject,
            control: ControlConfig::default(),
            reliability: ReliabilityConfig::default(),
            approval_id: None,
        }
    }
}

/// Rules of the payout runs (SPEC §5) and of EUR payouts (SPEC §6).
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
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
    /// Transactions of candidates decided at once on PostgreSQL (4; keep it below the
    /// connection pool size). SQLite has one writer: their candidates go into one
    /// transaction instead (`candidates_in_flight × candidates_per_tx`, one commit).
    pub candidates_in_flight: usize,
    /// Candidates decided in one transaction (250; on SQLite see `candidates_in_flight`):
    /// their state is read with one statement each and their events commit together, each
    /// on its provider's stream with its own idempotency key. On PostgreSQL each holds a
    /// stream lock until the commit.
    pub candidates_per_tx: usize,
    /// Events per transaction when a chunk folds what its candidates' streams have not
    /// folded yet (a burst of usage just before the run), before it takes their locks
    /// (1,000): each transaction commits, so a long backlog is folded even when no
    /// transaction of its whole length would be (connections dropped every 150 ms in
    /// `tests/it/faults.rs`); under the locks only the rest is folded.
    pub catch_up_events_per_tx: usize,
    /// Set by the run itself, never by configuration: the providers whose balance an
    /// unproven gated event touches (`ledger::proof`), held with `control_unproven`.
    #[serde(skip)]
    pub control_unproven: std::collections::BTreeSet<crate::domain::ids::ProviderId>,
}

impl RunConfig {
    pub const DEFAULT_WEEKLY_MINIMUM_MICRO_USDC: i64 = 25_000_000;
    pub const DEFAULT_MONTHLY_MINIMUM_MICRO_USDC: i64 = 1_000_000;
    pub const DEFAULT_PAYOUT_LIMIT_MICRO_USDC: i64 = 100_000_000_000;
    pub const DEFAULT_COOLING_OFF_HOURS: i64 = 72;
    pub const DEFAULT_FX_STALE_HOURS: i64 = 48;
    pub const DEFAULT_CANDIDATES_IN_FLIGHT: usize = 4;
    pub const DEFAULT_CANDIDATES_PER_TX: usize = 250;
    pub const DEFAULT_CATCH_UP_EVENTS_PER_TX: usize = 1_000;
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            weekly_minimum_micro_usdc: Self::DEFAULT_WEEKLY_MINIMUM_MICRO_USDC,
            monthly_minimum_micro_usdc: Self::DEFAULT_MONTHLY_MINIMUM_MICRO_USDC,
            payout_limit_micro_usdc: Self::DEFAULT_PAYOUT_LIMIT_MICRO_USDC,
            cooling_off_hours: Self::DEFAULT_COOLING_OFF_HOURS,
            fx_stale_hours: Self::DEFAULT_FX_STALE_HOURS,
            candidates_in_flight: Self::DEFAULT_CANDIDATES_IN_FLIGHT,
            candidates_per_tx: Self::DEFAULT_CANDIDATES_PER_TX,
            catch_up_events_per_tx: Self::DEFAULT_CATCH_UP_EVENTS_PER_TX,
            control_unproven: std::collections::BTreeSet::new(),
        }
    }
}

/// The HTTP API (SPEC §7) and the server that holds it up: every connection, request and
/// shutdown is bounded in time and number (ops/RELIABILITY.md, "The server holds").
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
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
    /// Failed authentications allowed per client address and window; then 429 for every
    /// request of that address without a valid token (a valid token is never refused).
    pub auth_failures_max: u32,
    /// The window of `auth_failures_max`, in milliseconds.
    pub auth_failure_window_ms: u64,
    /// Peers whose `X-Forwarded-For` is believed (addresses or CIDR networks such as
    /// `10.0.0.0/8`): the client address of a request from one of them is the rightmost
    /// forwarded address that is not itself a trusted proxy. Empty: the peer address.
    pub trusted_proxies: Vec<IpNet>,
    /// How long a connection may take to send a request's headers (also how long an idle
    /// keep-alive connection stays open); then it is closed without an answer.
    pub header_read_timeout_ms: u64,
    /// How long a request may take, from its headers to its answer (reading the body,
    /// queueing and handling); then 503 `request_timeout`, and the handler is dropped:
    /// whatever it had not committed is rolled back.
    pub request_timeout_ms: u64,
    /// Requests handled at once (`/healthz` and `/readyz` not counted).
    pub concurrency_max: usize,
    /// Requests waiting for one of `concurrency_max`; past it, 503 `overloaded` with
    /// `Retry-After`.
    pub queue_max: usize,
    /// Open connections; past it the server stops accepting until one closes.
    pub connections_max: usize,
    /// After SIGTERM: how long requests in flight may take to finish; then the connections
    /// still open are dropped (their uncommitted work rolled back) and the process exits.
    pub shutdown_deadline_ms: u64,
    /// Listener of `GET /metrics` (`settle serve`), apart from the API. Empty: `/metrics` is
    /// served on the API listener, only to `metrics_token`.
    pub metrics_bind: String,
    /// Bearer token `/metrics` requires (at least 32 characters); empty: none on
    /// `metrics_bind`, and no `/metrics` at all when `metrics_bind` is empty.
    pub metrics_token: SecretString,
    /// Live streams (`GET /v1/providers/{id}/stream`) open at once; past it, 503
    /// `streams_exhausted` with `Retry-After`. A stream holds no request slot of
    /// `concurrency_max` once its headers are sent.
    pub streams_max: usize,
    /// How often an open stream looks for new ledger events of its provider, ms: an update
    /// reaches the client at most this long (plus the summary's reads) after its commit.
    pub stream_poll_interval_ms: u64,
    /// Pause between two heartbeats (SSE comments) of an idle stream, ms, so that proxies
    /// do not close it.
    pub stream_heartbeat_ms: u64,
    /// How often an open stream checks again that its token is still valid, ms (1 to
    /// 30,000): a revoked or expired token's stream ends within this long.
    pub stream_auth_recheck_ms: u64,
    /// Live streams one token may hold open at once (a dashboard tab or two per provider);
    /// past it, 429 `token_streams_exhausted`, so no token takes every slot of `streams_max`.
    pub streams_per_token_max: usize,
    /// How long the dashboard's sign-in cookie lives, seconds (the token itself is still
    /// checked on every request: revoking it signs the browser out).
    pub session_max_age_s: u64,
    /// The `Secure` attribute of the dashboard's cookies (sent over HTTPS only): `auto`
    /// (default: set unless `bind` is a loopback address, a local demo over plain HTTP),
    /// `always` or `never`.
    pub cookie_secure: CookieSecure,
}

/// When the dashboard's cookies carry `Secure`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CookieSecure {
    #[default]
    Auto,
    Always,
    Never,
}

impl HttpConfig {
    /// Whether the dashboard's cookies carry `Secure` (see `cookie_secure`).
    pub fn cookie_is_secure(&self) -> bool {
        let auto = || {
            let host = self
                .bind
                .rsplit_once(':')
                .map_or(self.bind.as_str(), |(h, _)| h)
                .trim_matches(|c| c == '[' || c == ']');
            !(host == "localhost"
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback()))
        };
        match self.cookie_secure {
            CookieSecure::Auto => auto(),
            CookieSecure::Always => true,
            CookieSecure::Never => false,
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            bind: "127.0.0.1:8080".to_owned(),
            body_bytes_max: 1024 * 1024,
            page_size_max: 1000,
            page_size_default: 100,
            explorer_cluster: "mainnet-beta".to_owned(),
            auth_failures_max: 20,
            auth_failure_window_ms: 60_000,
            trusted_proxies: Vec::new(),
            header_read_timeout_ms: 10_000,
            request_timeout_ms: 30_000,
            concurrency_max: 64,
            queue_max: 256,
            connections_max: 1_000,
            shutdown_deadline_ms: 20_000,
            metrics_bind: "127.0.0.1:9090".to_owned(),
            metrics_token: SecretString::default(),
            streams_max: 256,
            stream_poll_interval_ms: 250,
            stream_heartbeat_ms: 15_000,
            stream_auth_recheck_ms: 30_000,
            streams_per_token_max: 4,
            session_max_age_s: 8 * 3600,
            cookie_secure: CookieSecure::Auto,
        }
    }
}

/// An IP network: an address and a prefix length (`10.0.0.0/8`, `2001:db8::/32`), or one
/// address (`192.0.2.7`, the whole length). IPv4-mapped IPv6 addresses match as IPv4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet {
    addr: std::net::IpAddr,
    prefix_len: u8,
}

impl IpNet {
    pub fn parse(text: &str) -> Result<IpNet, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: std::net::IpAddr = addr
            .parse()
            .map_err(|_| format!("{text:?} is not an IP address or network"))?;
        let addr = addr.to_canonical();
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len = match prefix {
            None => bits,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(|| format!("{text:?}: the prefix length must be 0..={bits}"))?,
        };
        Ok(IpNet { addr, prefix_len })
    }

    /// Whether `ip` lies in the network.
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix_len)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix_len)
            }
            _ => false,
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], prefix_len: u8) -> bool {
    let (whole, rest) = (usize::from(prefix_len / 8), prefix_len % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || (a[whole] ^ b[whole]) >> (8 - rest) == 0
}

impl std::fmt::Display for IpNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl<'de> Deserialize<'de> for IpNet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<IpNet, D::Error> {
        let text = String::deserialize(d)?;
        IpNet::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for IpNet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A secret from the configuration: never printed (`Debug` shows whether it is set).
#[derive(Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(secret: impl Into<String>) -> SecretString {
        SecretString(secret.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "SecretString(unset)"
        } else {
            "SecretString(***)"
        })
    }
}

/// Bank transfer batches (SPEC §6): the outbox directory and the originator written into
/// SEPA `pain.001.001.09` and NACHA files. The defaults are valid test data for the demo
/// (a test IBAN and a routing number with a correct check digit); production sets its own.
/// Numeric fields may be given as integers in the environment (`SETTLE_BANK__…`); routing
/// numbers and the immediate origin are zero-padded back to their fixed width.
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct BankConfig {
    /// Directory the bank files are written to (created when missing): `outbox/bank`.
    pub outbox_dir: String,
    /// Legal name of the originator (the marketplace operator), also the NACHA immediate
    /// origin name (at most 23 characters after transliteration).
    pub company_name: String,
    /// SEPA `InitgPty/Nm`: who initiates the transfers.
    pub sepa_initiating_party_name: String,
    /// SEPA `Dbtr/Nm`: the holder of the paying account.
    pub sepa_debtor_name: String,
    /// SEPA `DbtrAcct/Id/IBAN`: the paying account (must be a SEPA IBAN).
    pub sepa_debtor_iban: String,
    /// SEPA `DbtrAgt/FinInstnId/BICFI`; empty writes `NOTPROVIDED`.
    pub sepa_debtor_bic: String,
    /// NACHA immediate destination: the ODFI's 9-digit routing number (also the trace
    /// number prefix).
    #[serde(deserialize_with = "de_routing")]
    pub nacha_immediate_destination: String,
    /// NACHA immediate destination name (at most 23 characters).
    pub nacha_immediate_destination_name: String,
    /// NACHA immediate origin: exactly 10 characters as agreed with the bank (`1` + EIN).
    #[serde(deserialize_with = "de_origin")]
    pub nacha_immediate_origin: String,
    /// NACHA company name shown to receivers (1 to 16 characters).
    pub nacha_company_name: String,
    /// NACHA company identification (1 to 10 digits or upper-case letters).
    #[serde(deserialize_with = "de_text")]
    pub nacha_company_id: String,
    /// NACHA company entry description on the receiver's statement (1 to 10 characters).
    pub nacha_entry_description: String,
    /// Most payouts in one bank file; more make several files.
    pub batch_payouts_max: usize,
    /// Let `settle serve` start with the built-in example originator (the defaults above:
    /// a test IBAN and NACHA ids), for demos and tests only. Without it `serve` refuses to
    /// start (`example_originator`) while any of them is unchanged: its bank routes and
    /// bank worker would write files a bank could accept.
    pub allow_example_originator: bool,
    /// Folder `settle serve` watches for the bank's answer files (status reports,
    /// notifications, statements, NACHA returns): each new file is imported, then moved to
    /// `processed/` or `rejected/` beside it with its result. Empty: no watch.
    pub inbox_dir: String,
    /// How often `settle serve` looks into the inbox (milliseconds).
    pub inbox_interval_ms: u64,
    /// Largest answer file read (bytes), by the CLI, the API and the inbox.
    pub answer_file_bytes_max: usize,
    /// Payouts an answer's import settles in one transaction (one commit). On PostgreSQL
    /// no more than `ledger.ingest_streams_per_tx_max`: each payout's provider stream is an
    /// advisory lock held until the commit.
    pub answer_payouts_per_tx: usize,
    /// Business days (the rail's calendar: TARGET2 for SEPA, the Federal Reserve's for
    /// ACH) after a batch's generation by which the bank should have answered each of its
    /// payouts; `bank reconcile` reports those still open after it.
    pub answer_due_business_days: u32,
}

impl Default for BankConfig {
    fn default() -> Self {
        BankConfig {
            outbox_dir: "outbox/bank".to_owned(),
            company_name: "Settle Marketplace".to_owned(),
            sepa_initiating_party_name: "Settle Marketplace GmbH".to_owned(),
            sepa_debtor_name: "Settle Marketplace GmbH".to_owned(),
            sepa_debtor_iban: "DE02120300000000202051".to_owned(),
            sepa_debtor_bic: "BYLADEM1001".to_owned(),
            nacha_immediate_destination: "091000019".to_owned(),
            nacha_immediate_destination_name: "SETTLE ODFI BANK".to_owned(),
            nacha_immediate_origin: "1123456789".to_owned(),
            nacha_company_name: "SETTLE MARKET".to_owned(),
            nacha_company_id: "1123456789".to_owned(),
            nacha_entry_description: "PAYOUT".to_owned(),
            batch_payouts_max: 10_000,
            allow_example_originator: false,
            inbox_dir: "inbox/bank".to_owned(),
            inbox_interval_ms: 5_000,
            answer_file_bytes_max: 512 * 1024 * 1024,
            answer_payouts_per_tx: 5_000,
            answer_due_business_days: 3,
        }
    }
}

impl BankConfig {
    /// The keys that still hold the built-in example originator's account identifiers: the
    /// SEPA debtor IBAN, the NACHA immediate origin and company id (names and the ODFI's
    /// routing number are not accounts of the operator).
    pub(crate) fn example_originator_keys(&self) -> Vec<&'static str> {
        let example = BankConfig::default();
        let mut keys = Vec::new();
        if self.sepa_debtor_iban.replace(' ', "").to_ascii_uppercase() == example.sepa_debtor_iban {
            keys.push("bank.sepa_debtor_iban");
        }
        if self.nacha_immediate_origin.trim() == example.nacha_immediate_origin {
            keys.push("bank.nacha_immediate_origin");
        }
        if self.nacha_company_id.trim() == example.nacha_company_id {
            keys.push("bank.nacha_company_id");
        }
        keys
    }

    /// Refuses the built-in example originator unless `allow_example_originator` (stable
    /// code `example_originator`).
    pub(crate) fn check_not_example(&self) -> Result<(), crate::domain::DomainError> {
        let keys = self.example_originator_keys();
        if keys.is_empty() || self.allow_example_originator {
            return Ok(());
        }
        Err(crate::domain::DomainError::new(
            "example_originator",
            format!(
                "{} still hold the built-in example originator: bank files written with it name an account that is not yours; set your own in [bank], or bank.allow_example_originator = true for a demo or a test",
                keys.join(", ")
            ),
        ))
    }
}

/// The USDC payout rail on Solana (SPEC §6). The treasury keypair file is never logged and
/// is refused when group or others may read it.
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct SolanaConfig {
    /// JSON-RPC endpoint of the cluster.
    pub rpc_url: String,
    /// The cluster `rpc_url` belongs to: `mainnet-beta`, `devnet`, `testnet` or `localnet`.
    /// Checked at start against the node's genesis hash (`cluster_mismatch`); it decides
    /// which mints may be paid in (`mint_not_allowed`).
    pub cluster: String,
    /// Commitment of reads (`processed`, `confirmed`, `finalized`); payouts settle only at
    /// `finalized` regardless.
    pub commitment: String,
    /// The USDC mint. On `mainnet-beta` it must be `EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v`
    /// and on `devnet` `4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU` unless listed in
    /// `allowed_mints`; on `testnet` it must be listed; on `localnet` any mint. On every
    /// cluster it must exist on chain as an SPL Token mint of 6 decimals.
    pub mint: String,
    /// Mints allowed besides the cluster's built-in USDC mint (an explicit, reviewed
    /// exception: each entry is a base58 mint address).
    pub allowed_mints: Vec<String>,
    /// solana-keygen keypair file of the treasury (mode 0600). The key of the memo
    /// references is derived from it (no other secret to manage).
    pub treasury_keypair_path: String,
    /// Priority fee in micro-lamports per compute unit.
    pub priority_fee_micro_lamports: u64,
    /// Most transfers per transaction (the 1,232-byte limit usually binds first).
    pub transfers_per_tx_max: usize,
    /// Deprecated and ignored (a warning at start when set): the cluster is `cluster`, and
    /// the explorer links of the API use `http.explorer_cluster`. Still accepted so that
    /// older configuration files load.
    #[serde(skip_serializing)]
    pub explorer_cluster: String,
    /// Pause between two signature status polls.
    pub poll_interval_ms: u64,
    /// Pause between two broadcasts of the same unresolved transaction.
    pub rebroadcast_interval_ms: u64,
    /// How long one pass waits for outcomes before leaving attempts open for the next.
    pub wait_timeout_ms: u64,
    /// Consecutive RPC failures tolerated before a pass gives up (attempts stay open).
    pub rpc_retries_max: u32,
    /// Cap of the exponential backoff between RPC retries.
    pub rpc_backoff_ms_max: u64,
    /// Pack v0 transactions against the treasury's address lookup tables (about 45
    /// transfers per transaction instead of 18), creating and extending the tables as
    /// needed. Each table holds 256 accounts and its rent (about 0.058 SOL) stays the
    /// treasury's deposit.
    pub lookup_tables: bool,
    /// Fewest payouts in one pass for which tables are created or extended; existing
    /// tables are used by every pass.
    pub lookup_tables_min_payouts: usize,
    /// Rounds of table maintenance in one pass (a round creates up to 128 tables or extends
    /// existing ones, and waits until its transactions are final).
    pub lookup_table_rounds_max: u32,
    /// Signed transactions awaiting their outcome at once: the payer signs, journals and
    /// sends up to this many, and signs the next one as soon as one is resolved (a sliding
    /// window).
    pub transactions_in_flight_max: usize,
}

impl Default for SolanaConfig {
    fn default() -> Self {
        SolanaConfig {
            rpc_url: "https://api.mainnet-beta.solana.com".to_owned(),
            cluster: "mainnet-beta".to_owned(),
            commitment: "confirmed".to_owned(),
            mint: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v".to_owned(),
            allowed_mints: Vec::new(),
            treasury_keypair_path: String::new(),
            priority_fee_micro_lamports: 10_000,
            transfers_per_tx_max: 64,
            explorer_cluster: String::new(),
            poll_interval_ms: 500,
            rebroadcast_interval_ms: 2_000,
            wait_timeout_ms: 180_000,
            rpc_retries_max: 10,
            rpc_backoff_ms_max: 8_000,
            lookup_tables: true,
            lookup_tables_min_payouts: 64,
            lookup_table_rounds_max: 16,
            transactions_in_flight_max: 256,
        }
    }
}

impl SolanaConfig {
    #[cfg(feature = "local-chain")]
    /// A local chain (`cluster = localnet`, any mint) polled fast: the local chain produces
    /// a block per send and per status poll.
    pub(crate) fn local_fast() -> SolanaConfig {
        SolanaConfig {
            rpc_url: "http://127.0.0.1:8899".to_owned(),
            cluster: "localnet".to_owned(),
            priority_fee_micro_lamports: 1_000,
            poll_interval_ms: 2,
            rebroadcast_interval_ms: 20,
            wait_timeout_ms: 120_000,
            rpc_retries_max: 20,
            rpc_backoff_ms_max: 200,
            ..SolanaConfig::default()
        }
    }
}

/// A text field that the environment layer may have turned into an integer.
fn de_digits<'de, D: serde::Deserializer<'de>>(d: D, width: usize) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum TextOrInt {
        Text(String),
        Int(u64),
    }
    Ok(match TextOrInt::deserialize(d)? {
        TextOrInt::Text(t) => t,
        TextOrInt::Int(i) => format!("{i:0width$}"),
    })
}

fn de_routing<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    de_digits(d, 9)
}

fn de_origin<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    de_digits(d, 10)
}

fn de_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    de_digits(d, 0)
}

/// The whole configuration: a TOML file (every key optional, see
/// `ops/config.example.toml`), then `SETTLE_*` environment overrides where `__` separates
/// sections: `SETTLE_HTTP__BIND=0.0.0.0:8080`, `SETTLE_RUNS__COOLING_OFF_HOURS=24`.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub ledger: LedgerConfig,
    pub runs: RunConfig,
    pub http: HttpConfig,
    pub scheduler: SchedulerConfig,
    pub bank: BankConfig,
    pub solana: SolanaConfig,
    pub workers: WorkersConfig,
    pub control: ControlConfig,
    pub auth: AuthConfig,
    pub store: StoreConfig,
    pub reliability: ReliabilityConfig,
    pub privacy: PrivacyConfig,
    pub anchor: AnchorConfig,
}

/// The file `<database>.<suffix>` beside the database of a `sqlite://PATH` URL (none for
/// another database, or an in-memory one).
pub(crate) fn beside_sqlite_database(
    database_url: &str,
    suffix: &str,
) -> Option<std::path::PathBuf> {
    let path = database_url.strip_prefix("sqlite://")?;
    let path = path.split('?').next().unwrap_or(path);
    (!path.is_empty() && !path.starts_with(':'))
        .then(|| std::path::PathBuf::from(format!("{path}.{suffix}")))
}

/// `[anchor]`: the anchors of the chain heads (SPEC §13, `src/anchor/`).
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct AnchorConfig {
    /// Whether `settle serve` anchors (every `interval_s`) and publishes (every
    /// `publish_interval_s`).
    pub enabled: bool,
    /// The anchor log, to be kept where the database's writers cannot write. Empty: beside
    /// the database on SQLite (`settle.db.anchors`), `anchors` in the working directory on
    /// PostgreSQL.
    pub file: String,
    /// The anchor key (a solana-keypair file, mode 0600, made when missing). Empty: the log's
    /// path with `.key` appended.
    pub key_file: String,
    /// How often `settle serve` anchors the heads that moved: the window in which a
    /// rewrite with recomputed hashes goes unseen.
    pub interval_s: u64,
    /// How often `settle serve` publishes the newest root on Solana (a day); 0: never (only
    /// `settle anchor publish`).
    pub publish_interval_s: u64,
    /// The Solana JSON-RPC endpoint of the publications. Empty: `solana.rpc_url`.
    pub rpc_url: String,
    /// How long a publication waits for its transaction to be confirmed.
    pub publish_wait_ms: u64,
}

impl Default for AnchorConfig {
    fn default() -> Self {
        AnchorConfig {
            enabled: true,
            file: String::new(),
            key_file: String::new(),
            interval_s: 60,
            publish_interval_s: 86_400,
            rpc_url: String::new(),
            publish_wait_ms: 60_000,
        }
    }
}

impl AnchorConfig {
    /// The anchor log of the ledger at `database_url`.
    pub(crate) fn log_path(&self, database_url: &str) -> std::path::PathBuf {
        if !self.file.is_empty() {
            return self.file.clone().into();
        }
        beside_sqlite_database(database_url, "anchors").unwrap_or_else(|| "anchors".into())
    }

    /// The anchor key of the log at `log`.
    pub(crate) fn key_path(&self, log: &std::path::Path) -> std::path::PathBuf {
        if self.key_file.is_empty() {
            format!("{}.key", log.display()).into()
        } else {
            self.key_file.clone().into()
        }
    }

    /// The publications' RPC endpoint.
    pub fn rpc<'a>(&'a self, solana: &'a SolanaConfig) -> &'a str {
        if self.rpc_url.is_empty() {
            &solana.rpc_url
        } else {
            &self.rpc_url
        }
    }
}

/// `[privacy]`: the master key that wraps each provider's data key (SPEC §11,
/// `src/privacy/`).
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct PrivacyConfig {
    /// File holding the master key (64 hexadecimal digits), which group and others must not
    /// be able to read (`insecure_master_key` otherwise). Empty: on SQLite the file beside
    /// the database (`settle.db.master-key`), made on first use by a ledger that has no data
    /// keys yet; on PostgreSQL none (then `master_key_env` must hold it).
    pub master_key_file: String,
    /// Environment variable holding the master key instead; read first when it is set and
    /// not empty. Empty: no variable is read.
    pub master_key_env: String,
    /// Days an erased provider's data key is kept after its last payout (the retention of
    /// payment records), then destroyed by the scheduler; 0 destroys it at the erasure.
    pub retention_days: i64,
}

impl Default for PrivacyConfig {
    fn default() -> Self {
        PrivacyConfig {
            master_key_file: String::new(),
            master_key_env: "SETTLE_PRIVACY_MASTER_KEY".to_owned(),
            retention_days: 3_650,
        }
    }
}

/// The reliability score and listing (SPEC §12; the formula is `settle_reliability`'s).
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ReliabilityConfig {
    /// Per GPU model, the benchmark minimums under which a GPU is delisted until a
    /// benchmark passes: `[reliability.benchmark_minimums."H100-80GB"]` with any of
    /// `fp16_tflops`, `fp32_tflops`, `tensor_tflops` (decimal strings), `memory_gb_s`,
    /// `network_mbit_s`, `storage_mb_s`. A model without minimums needs only a benchmark.
    pub benchmark_minimums: std::collections::BTreeMap<String, BenchmarkMinimums>,
}

/// One model's benchmark minimums (absent: no minimum for that metric).
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct BenchmarkMinimums {
    pub fp16_tflops: Option<String>,
    pub fp32_tflops: Option<String>,
    pub tensor_tflops: Option<String>,
    pub memory_gb_s: Option<u64>,
    pub network_mbit_s: Option<u64>,
    pub storage_mb_s: Option<u64>,
}

/// Where the production guards apply (`control.enforce`): dual control, and the bands of
/// usage rates and FX rates (`LedgerConfig::lift_bands`). Part of the ledger's policy.
pub use crate::domain::policy::Enforce;

/// Dual control (src/control/): which commands wait for a second actor.
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ControlConfig {
    pub enforce: Enforce,
    /// Adjustments whose absolute amount is at or above this wait for approval.
    pub adjustment_approval_micro_usdc: i64,
    /// Releases of held payouts at or above this wait for approval (0: every release).
    pub release_approval_micro_usdc: i64,
    /// FX rates (EUR per USD) outside `min..=max` wait for approval (decimal strings).
    #[serde(deserialize_with = "de_decimal")]
    pub fx_eur_per_usd_min: rust_decimal::Decimal,
    #[serde(deserialize_with = "de_decimal")]
    pub fx_eur_per_usd_max: rust_decimal::Decimal,
    /// FX rates moving more than this percentage from the latest rate wait for approval
    /// (inclusive; the first rate is checked against the bounds only).
    pub fx_step_max_pct: u32,
    /// Requests listed at most by one `approvals list`.
    pub list_max: i64,
    /// A request not decided within this many hours expires: it can no longer be decided
    /// (`approval_expired`), and the same command sent again opens a new request.
    pub approval_expiry_hours: i64,
    /// A provider's adjustments within this many hours are added up (absolute amounts):
    /// one that brings the sum to `adjustment_approval_micro_usdc` waits for approval.
    pub adjustment_window_hours: i64,
    /// A void of a usage event whose amount is at or above this waits for approval.
    pub void_approval_micro_usdc: i64,
    /// An FX rate moving more than this percentage from the rate in force 7 days earlier
    /// waits for approval (a walk in small steps adds up).
    pub fx_week_step_max_pct: u32,
    /// A `rate.set` outside this band, in percent of the price book, waits for approval.
    pub rate_set_band_min_pct: u32,
    pub rate_set_band_max_pct: u32,
}

impl ControlConfig {
    /// The band of the EUR per USD rate.
    pub(crate) fn fx_band(&self) -> FxBand {
        FxBand {
            min: self.fx_eur_per_usd_min,
            max: self.fx_eur_per_usd_max,
            step_max_pct: self.fx_step_max_pct,
        }
    }
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            enforce: Enforce::RealClock,
            adjustment_approval_micro_usdc: 1_000 * 1_000_000,
            release_approval_micro_usdc: 0,
            fx_eur_per_usd_min: rust_decimal::Decimal::new(5, 1),
            fx_eur_per_usd_max: rust_decimal::Decimal::new(20, 1),
            fx_step_max_pct: 10,
            list_max: 1_000,
            approval_expiry_hours: 72,
            adjustment_window_hours: 24,
            void_approval_micro_usdc: 1_000 * 1_000_000,
            fx_week_step_max_pct: 10,
            rate_set_band_min_pct: 50,
            rate_set_band_max_pct: 200,
        }
    }
}

impl Config {
    /// The control policy a new ledger is seeded with: this configuration's values
    /// (`control.policy_set` version 1). Afterwards the ledger's policy decides.
    pub fn seed_policy(&self) -> crate::domain::policy::Policy {
        let c = &self.control;
        crate::domain::policy::Policy {
            enforce: c.enforce,
            adjustment_approval_micro_usdc: c.adjustment_approval_micro_usdc,
            adjustment_window_hours: c.adjustment_window_hours,
            void_approval_micro_usdc: c.void_approval_micro_usdc,
            release_approval_micro_usdc: c.release_approval_micro_usdc,
            fx_eur_per_usd_min: c.fx_eur_per_usd_min,
            fx_eur_per_usd_max: c.fx_eur_per_usd_max,
            fx_step_max_pct: c.fx_step_max_pct,
            fx_week_step_max_pct: c.fx_week_step_max_pct,
            rate_set_band_min_pct: c.rate_set_band_min_pct,
            rate_set_band_max_pct: c.rate_set_band_max_pct,
            usage_rate_band_min_pct: self.ledger.usage_rate_band_min_pct,
            usage_rate_band_max_pct: self.ledger.usage_rate_band_max_pct,
            approval_expiry_hours: c.approval_expiry_hours,
            payout_limit_micro_usdc: self.runs.payout_limit_micro_usdc,
            cooling_off_hours: self.runs.cooling_off_hours,
        }
    }

    /// Puts the ledger's policy in place of this configuration's values.
    pub(crate) fn apply_policy(&mut self, p: &crate::domain::policy::Policy) {
        self.control.apply_policy(p);
        self.ledger.usage_rate_band_min_pct = p.usage_rate_band_min_pct;
        self.ledger.usage_rate_band_max_pct = p.usage_rate_band_max_pct;
        self.runs.payout_limit_micro_usdc = p.payout_limit_micro_usdc;
        self.runs.cooling_off_hours = p.cooling_off_hours;
        self.ledger.control = self.control.clone();
    }
}

impl ControlConfig {
    /// Puts the ledger's policy in place of this section's policy values.
    pub(crate) fn apply_policy(&mut self, p: &crate::domain::policy::Policy) {
        let c = self;
        c.enforce = p.enforce;
        c.adjustment_approval_micro_usdc = p.adjustment_approval_micro_usdc;
        c.adjustment_window_hours = p.adjustment_window_hours;
        c.void_approval_micro_usdc = p.void_approval_micro_usdc;
        c.release_approval_micro_usdc = p.release_approval_micro_usdc;
        c.fx_eur_per_usd_min = p.fx_eur_per_usd_min;
        c.fx_eur_per_usd_max = p.fx_eur_per_usd_max;
        c.fx_step_max_pct = p.fx_step_max_pct;
        c.fx_week_step_max_pct = p.fx_week_step_max_pct;
        c.rate_set_band_min_pct = p.rate_set_band_min_pct;
        c.rate_set_band_max_pct = p.rate_set_band_max_pct;
        c.approval_expiry_hours = p.approval_expiry_hours;
    }
}

/// A decimal written as a string (`"0.92"`) or an integer, never a float: a TOML float is
/// binary and would not be the number the operator wrote.
fn de_decimal<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum TextOrInt {
        Text(String),
        Int(i64),
    }
    match TextOrInt::deserialize(d).map_err(|_| {
        serde::de::Error::custom("a decimal must be written as a string, e.g. \"0.5\"")
    })? {
        TextOrInt::Text(t) => t
            .trim()
            .parse::<Decimal>()
            .map_err(|_| serde::de::Error::custom(format!("not a decimal: {t:?}"))),
        TextOrInt::Int(i) => Ok(Decimal::from(i)),
    }
}

/// API tokens (`settle token create`): the lifetime a token gets when `--expires-in-days`
/// is not given, per scope, in days. Provider and ingest tokens always expire (1 to
/// 3650 days); admin and metering tokens take 0 for "no expiry".
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// A provider's dashboard token (90 days).
    pub provider_token_days_default: i64,
    /// An agent's ingest token (365 days).
    pub ingest_token_days_default: i64,
    /// An operator's admin token (365 days; 0: no expiry).
    pub admin_token_days_default: i64,
    /// The metering pipeline's token (365 days; 0: no expiry).
    pub metering_token_days_default: i64,
}

impl AuthConfig {
    pub const DEFAULT_PROVIDER_TOKEN_DAYS: i64 = 90;
    pub const DEFAULT_INGEST_TOKEN_DAYS: i64 = 365;
    pub const DEFAULT_ADMIN_TOKEN_DAYS: i64 = 365;
    pub const DEFAULT_METERING_TOKEN_DAYS: i64 = 365;
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            provider_token_days_default: Self::DEFAULT_PROVIDER_TOKEN_DAYS,
            ingest_token_days_default: Self::DEFAULT_INGEST_TOKEN_DAYS,
            admin_token_days_default: Self::DEFAULT_ADMIN_TOKEN_DAYS,
            metering_token_days_default: Self::DEFAULT_METERING_TOKEN_DAYS,
        }
    }
}

/// The rail workers of `settle serve`: the outbox of created payouts is drained by a Solana
/// pass and a bank-batch generation at these intervals (each off unless enabled).
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkersConfig {
    /// Pay `created` Solana payouts (needs `[solana]` with a treasury keypair).
    pub solana_enabled: bool,
    /// Pause between two Solana passes.
    pub solana_interval_ms: u64,
    /// Write `created` SEPA/ACH payouts into bank files in `bank.outbox_dir`.
    pub bank_enabled: bool,
    /// Pause between two bank-batch generations.
    pub bank_interval_ms: u64,
    /// Pause between two passes of the projector, which folds the aggregates (balances,
    /// earnings by day, payable by day) of the usage `settle serve` booked.
    pub projector_interval_ms: u64,
    /// Pause between two sweeps of the projector over every stream (it then also folds
    /// what other processes booked, e.g. `settle ingest FILE`).
    pub projector_sweep_interval_ms: u64,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig {
            solana_enabled: false,
            solana_interval_ms: 30_000,
            bank_enabled: false,
            bank_interval_ms: 3_600_000,
            projector_interval_ms: 50,
            projector_sweep_interval_ms: 60_000,
        }
    }
}

/// The database connections (`[store]`): the pool and SQLite's tuning, each a named limit.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Connections in the pool (readers and writers share it; SQLite still has one writer).
    pub connections_max: u32,
    /// How long a command waits for a free connection before failing.
    pub acquire_timeout_ms: u64,
    /// SQLite: how long a writer waits for another process's write lock.
    pub sqlite_busy_timeout_ms: u64,
    /// SQLite: page cache per connection, in KiB (SQLite's default is 2,000). A usage batch
    /// touches a few pages of each of several indexes per provider and GPU; with the
    /// default cache they are read again for every batch.
    pub sqlite_cache_kib: u64,
    /// SQLite: WAL pages after which a commit checkpoints them into the database file
    /// (SQLite's default is 1,000). A metering batch dirties pages all over the event,
    /// idempotency and segment indexes; checkpointing less often writes a page that
    /// several batches touched once instead of once per batch. Durability is unchanged
    /// (every commit is fsynced in the WAL); the WAL file grows up to about this many
    /// pages between checkpoints.
    pub sqlite_wal_autocheckpoint_pages: u64,
    /// SQLite: how often a connection of its own checkpoints the WAL into the database file
    /// (`PRAGMA wal_checkpoint(PASSIVE)`, which never blocks a writer or a reader), so the
    /// copying and the database file's fsync happen beside the writers instead of inside
    /// the commit that crosses `sqlite_wal_autocheckpoint_pages`. That commit still
    /// checkpoints what is left, which is then little, and lets the WAL start over. 0: no
    /// background checkpoints (every checkpoint runs in a commit).
    pub sqlite_checkpoint_interval_ms: u64,
    /// Streams this process remembers by name as waiting for the projector. Past it, the
    /// process only remembers that some stream waits, and the projector's next step folds
    /// every stream behind its head (one probe per stream) instead: the memory of a
    /// process that books a million streams stays bounded, a command without a projector
    /// included.
    pub projector_dirty_streams_max: usize,
    /// Providers' streams whose booking view (their GPUs, each GPU's latest booked end, their
    /// tier and rate history) this process keeps between usage batches. A view is used only
    /// at the stream head it was read at, so an event of the stream booked by any process
    /// (a rate, a GPU, a void) makes the next batch read it again; `settle rebuild` drops
    /// them all. Past the limit the views are dropped and read again. 0: every batch reads
    /// them.
    pub usage_views_streams_max: usize,
    /// Segments of usage booked since their stream was last folded that the kept views hold
    /// in all (each about 40 bytes): with them a late event (one starting before its GPU's
    /// latest booked end) is checked for overlap against them and the tables, without
    /// folding its provider's stream inside the booking. Past the limit the kept views
    /// forget theirs, and each one's next late event folds its stream first. 0: every late
    /// event folds.
    pub usage_views_segments_max: usize,
    /// Idempotency keys of usage events this process remembers as booked, with their
    /// content hash (two generations; the older is forgotten when the newer holds half).
    /// A batch finds its re-sends among them and assumes the keys it does not find are new,
    /// without reading them; the database's unique index checks the assumption, and an
    /// attempt that assumed wrong is retried reading its keys. 0: every batch reads its
    /// keys.
    pub usage_recent_keys_max: usize,
    /// Streams `settle verify` reads and folds at a time. Each page's fold goes into
    /// temporary copies of the projection tables inside verify's snapshot, where SQL
    /// compares them with the tables: its memory is one page, whatever the ledger's size.
    pub verify_streams_per_page: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            connections_max: 8,
            acquire_timeout_ms: 30_000,
            sqlite_busy_timeout_ms: 10_000,
            sqlite_cache_kib: 16_384,
            sqlite_wal_autocheckpoint_pages: 10_000,
            sqlite_checkpoint_interval_ms: 250,
            projector_dirty_streams_max: 10_000,
            usage_views_streams_max: 10_000,
            usage_views_segments_max: 200_000,
            usage_recent_keys_max: 100_000,
            verify_streams_per_page: 1_000,
        }
    }
}

/// A configuration problem, naming the file or variable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {message}")]
    Read { path: String, message: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Loads the file (when given) and applies the `SETTLE_*` variables of `env`.
    pub fn load(
        path: Option<&std::path::Path>,
        env: impl Iterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut root = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| ConfigError::Read {
                    path: p.display().to_string(),
                    message: e.to_string(),
                })?;
                text.parse::<toml::Table>()
                    .map_err(|e| ConfigError::Invalid(format!("{}: {e}", p.display())))?
            }
            None => toml::Table::new(),
        };
        for (key, value) in env {
            let Some(rest) = key.strip_prefix("SETTLE_") else {
                continue;
            };
            let path: Vec<String> = rest.split("__").map(|s| s.to_ascii_lowercase()).collect();
            if path.len() < 2 || path.iter().any(|s| s.is_empty()) {
                continue; // not a config key (e.g. SETTLE_TEST_PG_URL, SETTLE_FAILPOINT)
            }
            let mut table = &mut root;
            for section in &path[..path.len() - 1] {
                let entry = table
                    .entry(section.clone())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                table = entry.as_table_mut().ok_or_else(|| {
                    ConfigError::Invalid(format!("{key}: {section} is not a section"))
                })?;
            }
            table.insert(path[path.len() - 1].clone(), env_value(&value));
        }
        let mut config: Config = toml::Value::Table(root)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid(e.to_string()))?;
        config.check()?;
        config.ledger.control = config.control.clone();
        config.ledger.reliability = config.reliability.clone();
        Ok(config)
    }

    /// Rules between keys that serde cannot state.
    fn check(&self) -> Result<(), ConfigError> {
        let l = &self.ledger;
        if l.usage_rate_band_min_pct > 100 || l.usage_rate_band_max_pct < 100 {
            return Err(ConfigError::Invalid(format!(
                "ledger.usage_rate_band_min_pct ({}) must be at most 100 and ledger.usage_rate_band_max_pct ({}) at least 100: the price-book rate itself is in the band",
                l.usage_rate_band_min_pct, l.usage_rate_band_max_pct
            )));
        }
        if self.store.connections_max < 2 {
            return Err(ConfigError::Invalid(format!(
                "store.connections_max ({}) must be at least 2: a command may read while it holds a write transaction",
                self.store.connections_max
            )));
        }
        let h = &self.http;
        if !(1..=30_000).contains(&h.stream_auth_recheck_ms) || h.streams_per_token_max == 0 {
            return Err(ConfigError::Invalid(format!(
                "http.stream_auth_recheck_ms ({}) must be 1 to 30000 and http.streams_per_token_max ({}) at least 1: a revoked token's stream ends within 30 s",
                h.stream_auth_recheck_ms, h.streams_per_token_max
            )));
        }
        let c = &self.control;
        if c.fx_eur_per_usd_min <= Decimal::ZERO || c.fx_eur_per_usd_min > c.fx_eur_per_usd_max {
            return Err(ConfigError::Invalid(format!(
                "control.fx_eur_per_usd_min ({}) must be positive and at most control.fx_eur_per_usd_max ({})",
                c.fx_eur_per_usd_min, c.fx_eur_per_usd_max
            )));
        }
        Ok(())
    }
}

/// An environment value as TOML: integers and booleans as such, lists in `[…]`, else text.
fn env_value(text: &str) -> toml::Value {
    if let Ok(i) = text.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    match text {
        "true" => return toml::Value::Boolean(true),
        "false" => return toml::Value::Boolean(false),
        _ => {}
    }
    if text.starts_with('[')
        && let Ok(v) = format!("v = {text}").parse::<toml::Table>()
        && let Some(v) = v.get("v")
    {
        return v.clone();
    }
    toml::Value::String(text.to_owned())
}

/// When the scheduler fires and when its catch-up is worth a warning.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Time of day (UTC) of the daily check, `HH:MM` or `HH:MM:SS` (default `00:05`).
    pub fire_time: String,
    /// Every missed run is caught up; when the catch-up reaches back more than this many
    /// days (default 35), it is logged at error level and exported as
    /// `settle_scheduler_catch_up_days`. (`catch_up_window_days`, its old name, is read
    /// too.)
    #[serde(alias = "catch_up_window_days")]
    pub catch_up_warn_days: u32,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            fire_time: "00:05".to_owned(),
            catch_up_warn_days: DEFAULT_CATCH_UP_WINDOW_DAYS,
        }
    }
}

impl SchedulerConfig {
    /// The calendar crate's schedule of this configuration.
    pub fn schedule(&self) -> Result<Schedule, DomainError> {
        NaiveTime::parse_from_str(&self.fire_time, "%H:%M:%S")
            .or_else(|_| NaiveTime::parse_from_str(&self.fire_time, "%H:%M"))
            .map(Schedule::new)
            .map_err(|_| {
                DomainError::new(
                    "invalid_fire_time",
                    format!(
                        "fire_time must be HH:MM or HH:MM:SS, got {:?}",
                        self.fire_time
                    ),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_then_environment() {
        let dir = tempfile_dir();
        let path = dir.join("settle.toml");
        std::fs::write(
            &path,
            "[http]\nbind = \"127.0.0.1:9000\"\n[runs]\ncooling_off_hours = 48\n",
        )
        .unwrap();
        let env = vec![
            ("SETTLE_RUNS__COOLING_OFF_HOURS".to_owned(), "24".to_owned()),
            ("SETTLE_TEST_PG_URL".to_owned(), "ignored".to_owned()),
            ("SETTLE_SCHEDULER__FIRE_TIME".to_owned(), "01:30".to_owned()),
        ];
        let c = Config::load(Some(&path), env.into_iter()).unwrap();
        assert_eq!(c.http.bind, "127.0.0.1:9000");
        assert_eq!(c.runs.cooling_off_hours, 24);
        assert_eq!(c.scheduler.fire_time, "01:30");
        assert_eq!(c.ledger.batch_events_max, 1000);
        let bad = vec![("SETTLE_RUNS__NO_SUCH_KEY".to_owned(), "1".to_owned())];
        assert!(
            Config::load(None, bad.into_iter()).is_err(),
            "unknown keys are refused"
        );
    }

    #[test]
    fn trusted_proxy_networks() {
        let net = IpNet::parse("10.1.0.0/16").unwrap();
        assert!(net.contains("10.1.255.3".parse().unwrap()));
        assert!(
            net.contains("::ffff:10.1.0.9".parse().unwrap()),
            "IPv4-mapped"
        );
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(!net.contains("::1".parse().unwrap()));
        let one = IpNet::parse("192.0.2.7").unwrap();
        assert!(one.contains("192.0.2.7".parse().unwrap()));
        assert!(!one.contains("192.0.2.6".parse().unwrap()));
        let odd = IpNet::parse("192.0.2.64/27").unwrap();
        assert!(odd.contains("192.0.2.95".parse().unwrap()));
        assert!(!odd.contains("192.0.2.96".parse().unwrap()));
        let v6 = IpNet::parse("2001:db8::/32").unwrap();
        assert!(v6.contains("2001:db8:1::5".parse().unwrap()));
        assert!(!v6.contains("2001:db9::5".parse().unwrap()));
        assert!(
            IpNet::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        for bad in ["10.0.0.0/33", "10.0.0/8", "proxy", "::/129", "10.0.0.0/"] {
            assert!(IpNet::parse(bad).is_err(), "{bad}");
        }
        let env = vec![(
            "SETTLE_HTTP__TRUSTED_PROXIES".to_owned(),
            r#"["10.0.0.0/8","192.0.2.7"]"#.to_owned(),
        )];
        let c = Config::load(None, env.into_iter()).unwrap();
        assert_eq!(c.http.trusted_proxies.len(), 2);
        let bad = vec![(
            "SETTLE_HTTP__TRUSTED_PROXIES".to_owned(),
            r#"["10.0.0.0/40"]"#.to_owned(),
        )];
        assert!(Config::load(None, bad.into_iter()).is_err());
    }

    #[test]
    fn bands_load_checked_and_reach_the_ledger_config() {
        let load = |text: &str| {
            let dir = tempfile_dir();
            let path = dir.join("settle.toml");
            std::fs::write(&path, text).unwrap();
            Config::load(Some(&path), std::iter::empty())
        };
        let c = load(
            "[ledger]\nusage_rate_band_max_pct = 150\nusage_rate_without_price_book = \"accept\"\n[control]\nfx_eur_per_usd_min = \"0.8\"\nfx_step_max_pct = 5\n",
        )
        .unwrap();
        assert_eq!(c.ledger.usage_rate_band_max_pct, 150);
        assert_eq!(
            c.ledger.rate_band().without_price_book,
            WithoutPriceBook::Accept
        );
        assert_eq!(c.ledger.control, c.control, "[control] reaches the ledger");
        assert_eq!(
            c.ledger.control.fx_band().min,
            Decimal::new(8, 1),
            "exact decimal"
        );
        assert_eq!(c.ledger.control.fx_band().step_max_pct, 5);
        for bad in [
            "[ledger]\nusage_rate_band_min_pct = 101\n",
            "[ledger]\nusage_rate_band_max_pct = 99\n",
            "[ledger]\nusage_rate_without_price_book = \"maybe\"\n",
            "[control]\nfx_eur_per_usd_min = 0.5\n",
            "[control]\nfx_eur_per_usd_min = \"0\"\n",
            "[control]\nfx_eur_per_usd_min = \"3\"\n",
            "[control]\nfx_eur_per_usd_max = \"two\"\n",
            "[ledger]\ncontrol = 1\n",
        ] {
            assert!(
                matches!(load(bad), Err(ConfigError::Invalid(_))),
                "{bad} is refused"
            );
        }
    }

    #[test]
    fn the_example_originator_is_recognised() {
        let example = BankConfig::default();
        assert_eq!(
            example.example_originator_keys(),
            [
                "bank.sepa_debtor_iban",
                "bank.nacha_immediate_origin",
                "bank.nacha_company_id"
            ]
        );
        assert_eq!(
            example.check_not_example().unwrap_err().code,
            "example_originator"
        );
        let spaced = BankConfig {
            sepa_debtor_iban: "de02 1203 0000 0000 2020 51".into(),
            nacha_immediate_origin: "1987654320".into(),
            nacha_company_id: "1987654320".into(),
            ..BankConfig::default()
        };
        assert_eq!(spaced.example_originator_keys(), ["bank.sepa_debtor_iban"]);
        let own = BankConfig {
            sepa_debtor_iban: "NL91ABNA0417164300".into(),
            ..spaced.clone()
        };
        assert!(own.check_not_example().is_ok());
        let allowed = BankConfig {
            allow_example_originator: true,
            ..BankConfig::default()
        };
        assert!(allowed.check_not_example().is_ok());
    }

    #[test]
    fn secrets_never_print() {
        let c = HttpConfig {
            metrics_token: SecretString::new("s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t"),
            ..HttpConfig::default()
        };
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "settle-config-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}

#[cfg(test)]
mod example_tests {
    use super::*;

    /// `ops/config.example.toml` documents every key, with its default, and nothing else.
    #[test]
    fn the_example_lists_every_key_with_its_default() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/ops/config.example.toml");
        let text = std::fs::read_to_string(path).expect("ops/config.example.toml exists");
        let example: toml::Table = text.parse().expect("the example is TOML");
        let parsed = Config::load(Some(std::path::Path::new(path)), std::iter::empty())
            .expect("the example loads");
        let defaults = toml::Table::try_from(Config::default()).expect("serializes");
        let loaded = toml::Table::try_from(parsed).expect("serializes");
        assert_eq!(loaded, defaults, "the example states the defaults");
        for (section, keys) in &defaults {
            let listed = example
                .get(section)
                .and_then(|s| s.as_table())
                .unwrap_or_else(|| panic!("section [{section}] missing"));
            for key in keys.as_table().expect("a section").keys() {
                assert!(
                    listed.contains_key(key),
                    "[{section}] {key} is not documented"
                );
            }
        }
    }
}
