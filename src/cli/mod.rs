//! The `settle` command line (clap). Thin: parse arguments, call the ledger and the read
//! models, render the result.

pub mod anchor;
pub mod approvals;
pub mod bank;
pub mod bank_answers;
mod import_file;
mod integrity;
pub mod operator;
pub mod policy;
pub mod privacy;
pub mod provider;
pub mod reads;
pub mod runs;
pub mod serve;
pub mod solana;
pub mod statement;

use std::io::{BufRead, Write};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use serde_json::json;

use crate::config::Config;
use crate::control::Importer;
use crate::domain::time::{format_ms, parse_rfc3339_ms};
use crate::ledger::ingest::UsageInput;
use crate::ledger::{Actor, Clock, Ledger, ManualClock, SystemClock};
use crate::report::output::{Format, csv_line, table_head, table_line, table_widths};
use crate::store::{ClockMode, Store};
use crate::wire::import::{Command, LineResult, Totals, parse_line};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Sets up `tracing` on stderr: pretty in a terminal, JSON lines with `--log-format json`.
/// The level is `--log-level`, else `RUST_LOG`, else the command's own default
/// ([`Cmd::default_log_level`]: `warn` for the demo, whose terminal is its report, `info`
/// for the rest).
pub fn init_logging(cli: &Cli) {
    let directives = cli
        .log_level
        .clone()
        .or_else(|| {
            std::env::var("RUST_LOG")
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| cli.command.default_log_level().to_owned());
    let filter = tracing_subscriber::EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!("warning: log level {directives:?} is not understood ({e}); using info");
        tracing_subscriber::EnvFilter::new("info")
    });
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match cli.log_format {
        LogFormat::Pretty => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The embedded default database.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://settle.db";

#[derive(Parser, Debug)]
#[command(
    name = "settle",
    version,
    about = "Settlement and payout engine of a GPU compute marketplace"
)]
pub struct Cli {
    /// Database URL: sqlite://PATH (embedded default) or postgres://…
    #[arg(long, global = true, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL)]
    pub database: String,
    /// PostgreSQL: the connection of the role that owns the tables, for what only it may
    /// do: `settle migrate` and `settle rebuild` run with it; every other command runs as
    /// `--database` (the runtime role, which cannot change the schema). Unset: `--database`
    /// does all.
    #[arg(
        long,
        global = true,
        env = "SETTLE_DATABASE_OWNER_URL",
        hide_env_values = true
    )]
    pub owner_database: Option<String>,
    /// Run as if at this instant (RFC 3339). Never earlier than the latest booking.
    #[arg(long, global = true)]
    pub now: Option<String>,
    /// Output of read commands.
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Configuration file (TOML); `SETTLE_SECTION__KEY` variables override it.
    #[arg(long, global = true, env = "SETTLE_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    /// Log format: pretty for a terminal, json for collectors.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,
    /// The operator key file (solana-keygen JSON, mode 0600) that signs requests and
    /// decisions on a ledger with operators (`settle operator`).
    #[arg(long, global = true, env = "SETTLE_OPERATOR_KEY")]
    pub operator_key: Option<std::path::PathBuf>,
    /// Log level or filter (`warn`, `info`, `settle=debug,info`, as `RUST_LOG`); overrides
    /// `RUST_LOG`. Default: `warn` for `demo`, `info` otherwise.
    #[arg(long, global = true)]
    pub log_level: Option<String>,
    /// Who runs this command, recorded as `operator:NAME` on every event it causes
    /// (default: the OS user).
    #[arg(long, global = true, env = "SETTLE_ACTOR")]
    pub actor: Option<String>,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Create or upgrade the database schema. A new ledger is made a real-clock ledger (its
    /// clock mode and control policy booked on the chain) unless `--simulated-clock`.
    Migrate {
        /// Make this new ledger a simulated-clock ledger: any `--now` is accepted (replays,
        /// demos, tests). Never for production.
        #[arg(long)]
        simulated_clock: bool,
        /// Fix this ledger's clock to the real clock (what plain `migrate` does too).
        #[arg(long)]
        real_clock: bool,
        /// PostgreSQL: print (do not run) the statements that give ROLE (default
        /// `settle_runtime`) the rights the engine needs at run time and no more, to be run
        /// by the owner of the tables after every migration; migrates nothing.
        #[arg(long, value_name = "ROLE", num_args = 0..=1,
              default_missing_value = crate::store::roles::RUNTIME_ROLE)]
        print_grants: Option<String>,
        /// PostgreSQL: after migrating, run those statements for ROLE (as the owner: with
        /// `--owner-database`), so the runtime role can open the migrated schema.
        #[arg(long, value_name = "ROLE")]
        grant: Option<String>,
    },
    #[cfg(feature = "local-chain")]
    /// The whole job on a fresh machine: a SQLite file, sample providers, a generated week of
    /// usage, the Monday run paying USDC on a local chain, SEPA and NACHA files.
    Demo {
        /// Working directory (database, input, chain state, bank outbox).
        #[arg(long, default_value = "settle-demo")]
        dir: std::path::PathBuf,
    },
    /// The HTTP API, the payout-run scheduler and the rail workers in one process.
    Serve {
        /// Do not start the payout-run scheduler.
        #[arg(long)]
        no_scheduler: bool,
    },
    /// Apply an NDJSON file of commands (SPEC §8), reporting each line's result.
    Import { file: String },
    /// Book an NDJSON file of usage events (SPEC §4), reporting each line's result.
    Ingest { file: String },
    /// Check hash chains, balanced lines, and projections against a fresh fold.
    Verify {
        /// Check against an anchor log (SPEC §13): every chain, recomputed from the events'
        /// contents, must pass through its anchored heads; the log must hold every root the
        /// ledger recorded; the unanchored tail is reported. Without a value: `anchor.file`
        /// (default: beside the database). Without the flag: `anchor.file` when it is set.
        #[arg(long)]
        #[allow(clippy::option_option)]
        anchors: Option<Option<std::path::PathBuf>>,
    },
    /// Sign and append an anchor of the streams' heads to the anchor log (`--file`, or
    /// `anchor.file`); `settle anchor publish` also publishes the newest root on Solana.
    Anchor(anchor::AnchorArgs),
    /// Provider statements (SPEC §13): written from the ledger, or checked offline.
    #[command(subcommand)]
    Statement(statement::StatementCmd),
    /// Rebuild every projection from the events alone.
    Rebuild,
    /// Provider balances: available, held, in transit, lifetime paid.
    Balance {
        #[arg(long)]
        provider: Option<String>,
    },
    /// A provider's reliability score (SPEC §12): the combined score, its three parts with
    /// what lowered them, per GPU whether it is listed and why not; `--format json` adds
    /// the 30-day trend.
    Reliability {
        #[arg(long)]
        provider: String,
    },
    /// Payout runs: run weekly --date, run monthly --month, run show, run list.
    #[command(subcommand)]
    Run(runs::RunCmd),
    /// Held payouts: release, cancel; show a payout.
    #[command(subcommand)]
    Payout(runs::PayoutCmd),
    /// The payout run calendar.
    #[command(subcommand)]
    Calendar(runs::CalendarCmd),
    /// Earnings of a provider over [from, to) by business time, grouped.
    Earnings(reads::EarningsArgs),
    /// Payouts with rail details, newest first.
    Payouts(reads::PayoutsArgs),
    /// API tokens: create (printed once), revoke, list.
    #[command(subcommand)]
    Token(reads::TokenCmd),
    /// Bank transfer batches: generate, list, show, submitted, settled, return, regenerate.
    Bank(bank::BankArgs),
    /// Pay the outbox of a rail: `pay solana` (one pass of the USDC worker).
    #[command(subcommand)]
    Pay(solana::PayCmd),
    /// Compare a rail with the ledger: `reconcile solana`.
    #[command(subcommand)]
    Reconcile(solana::ReconcileCmd),
    /// Dual control: requests waiting for a second actor (list, show, approve, reject).
    #[command(subcommand)]
    Approvals(approvals::ApprovalsCmd),
    /// Operators, who request and approve what moves money: keygen, bootstrap, list.
    #[command(subcommand)]
    Operator(operator::OperatorCmd),
    /// The control policy on the ledger: `control policy` shows it, `control set-policy
    /// NAME=VALUE…` requests a change.
    #[command(subcommand)]
    Control(policy::ControlCmd),
    /// Personal data (SPEC §11): `privacy report` lists the providers whose personal data
    /// the chain holds in clear; `privacy keygen --out FILE` writes a master key (needs no
    /// database).
    #[command(subcommand)]
    Privacy(privacy::PrivacyCmd),
    /// A provider's registry record (`provider show ID`: its personal values opened, or
    /// `erased`) and its erasure (`provider erase ID`, gated: SPEC §11).
    #[command(subcommand)]
    Provider(provider::ProviderCmd),
    /// Development chains: `chain local` (needs no database).
    #[command(subcommand)]
    #[cfg(feature = "local-chain")]
    Chain(solana::ChainCmd),
}

impl Cli {
    /// The database the command's ledger is opened on: `--owner-database`, when given,
    /// for `migrate` (it changes the schema, and on a new ledger books its clock mode
    /// before the runtime role has its grants) and `rebuild` (it rewrites every projection
    /// under a lock only the owner may take); `--database` otherwise.
    pub(crate) fn ledger_url(&self) -> &str {
        match (&self.command, &self.owner_database) {
            (Cmd::Migrate { .. } | Cmd::Rebuild, Some(owner)) => owner,
            _ => &self.database,
        }
    }
}

impl Cmd {
    /// The log level when neither `--log-level` nor `RUST_LOG` says: the demo's terminal is
    /// its report, so it logs warnings only; every other command logs `info`.
    pub(crate) fn default_log_level(&self) -> &'static str {
        match self {
            #[cfg(feature = "local-chain")]
            Cmd::Demo { .. } => "warn",
            _ => "info",
        }
    }
}

/// The exit status of a command the ledger refused (its code and reason on stderr).
pub(crate) const EXIT_REJECTED: i32 = 2;

/// Prints a refusal on stderr and returns [`EXIT_REJECTED`]; other errors propagate.
pub(crate) fn rejected(err: crate::ledger::LedgerError) -> anyhow::Result<i32> {
    match err {
        crate::ledger::LedgerError::Rejected(e) => {
            eprintln!("rejected: {}: {}", e.code, e.message);
            Ok(EXIT_REJECTED)
        }
        other => Err(other.into()),
    }
}

/// The operator this process acts for (`--actor`, else the OS user); set once by [`run`].
static OPERATOR: std::sync::OnceLock<Actor> = std::sync::OnceLock::new();

/// The longest operator name.
pub const ACTOR_LEN_MAX: usize = 64;

/// `operator:NAME` from `--actor` or the OS user (`USER`, `LOGNAME`, else `uid:N`). A name
/// holds letters, digits and `. _ - @` only, so it cannot forge another actor's prefix.
pub(crate) fn operator_from(flag: Option<&str>) -> anyhow::Result<Actor> {
    let name = match flag {
        Some(name) => name.to_owned(),
        None => std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .ok()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("uid.{}", nix_uid())),
    };
    let valid = !name.is_empty()
        && name.len() <= ACTOR_LEN_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'));
    if !valid {
        bail!(
            "invalid_actor: --actor must be 1 to {ACTOR_LEN_MAX} letters, digits or . _ - @, got {name:?}"
        );
    }
    Ok(Actor::operator(&name))
}

/// The process's user id (the owner of `/proc/self`), 0 when unknown.
fn nix_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}

/// The operator of this CLI process (see [`operator_from`]).
/// The operator key file of this process (`--operator-key`); set once by [`run`].
static OPERATOR_KEY: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();

/// The operator key of this process as `ledger`'s operator, when `--operator-key` names one.
pub(crate) async fn cli_signer(
    ledger: &Ledger,
) -> anyhow::Result<Option<crate::operator_key::OperatorSigner>> {
    match OPERATOR_KEY.get().and_then(|p| p.as_deref()) {
        Some(path) => Ok(Some(crate::operator_key::load_signer(ledger, path).await?)),
        None => Ok(None),
    }
}

pub(crate) fn cli_actor() -> Actor {
    OPERATOR
        .get()
        .cloned()
        .unwrap_or_else(|| Actor::operator("cli"))
}

/// Whether a command may book events: the first such command fixes an undecided ledger's
/// clock mode, and on a real-clock ledger it runs on the real clock.
fn may_book(cmd: &Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Serve { .. }
            | Cmd::Import { .. }
            | Cmd::Ingest { .. }
            | Cmd::Run(_)
            | Cmd::Payout(_)
            | Cmd::Bank(_)
            | Cmd::Pay(_)
            | Cmd::Approvals(_)
            | Cmd::Operator(_)
            | Cmd::Control(_)
            | Cmd::Token(_)
            | Cmd::Provider(provider::ProviderCmd::Erase { .. })
    )
}

/// Opens the store and builds the ledger with the clock the ledger's clock mode allows.
///
/// - A **simulated-clock** ledger (`settle migrate --simulated-clock`, or whose first
///   booking command ran with `--now`) runs at `--now` when given: replays, demos, tests.
/// - A **real-clock** ledger books on the real clock only: `--now` further than
///   `ledger.clock_skew_ms` ahead of it is refused (`now_off_clock`), and so is any `--now`
///   off the clock for a command that may book.
/// - An undecided ledger (new, or created before clock modes) is fixed by `settle migrate`
///   (real unless `--simulated-clock`) or by its first command that may book: with `--now`
///   simulated (a replay starts on an empty ledger), without real.
///
/// The ledger's control policy (`control.policy_set`) then replaces the policy values of
/// `config`: this process's configuration seeds a ledger that has none, and nothing more
/// (a difference is warned about once).
pub(crate) async fn open_ledger(cli: &Cli, config: &mut Config) -> anyhow::Result<Ledger> {
    let url = cli.ledger_url();
    let store = Store::open(url, &config.store)
        .await
        .with_context(|| format!("opening database {}", redact(url)))?;
    store.migrate().await.context("migrating the database")?;
    let now = match &cli.now {
        Some(text) => Some(parse_rfc3339_ms(text).map_err(|e| anyhow::anyhow!("--now: {e}"))?),
        None => None,
    };
    let real_now = SystemClock.now_ms();
    let mode = decide_clock_mode(&store, &cli.command, now, real_now).await?;
    let clock: Arc<dyn Clock> = match (mode, now) {
        (_, None) => Arc::new(SystemClock),
        (Some(ClockMode::Simulated) | None, Some(now)) => manual_clock(&store, now).await?,
        (Some(ClockMode::Real), Some(now)) => {
            let skew = config.ledger.clock_skew_ms;
            let ahead = now - real_now > skew;
            if ahead || (may_book(&cli.command) && (now - real_now).abs() > skew) {
                bail!(
                    "now_off_clock: --now {} is {} the real clock ({}) by more than ledger.clock_skew_ms ({skew} ms) on a real-clock ledger: {}",
                    format_ms(now),
                    if ahead { "ahead of" } else { "behind" },
                    format_ms(real_now),
                    if ahead {
                        "a booking must never carry a time that has not come"
                    } else {
                        "bookings carry their real booking time; run the command without --now"
                    }
                );
            }
            if may_book(&cli.command) {
                // Within the skew: bookings still carry the real clock.
                Arc::new(SystemClock)
            } else {
                manual_clock(&store, now).await?
            }
        }
    };
    let sealing =
        crate::privacy::vault::privacy_of(&config.privacy, url, &store, may_book(&cli.command))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut ledger = Ledger::new(store, clock, config.ledger.clone()).with_privacy(sealing);
    if mode.is_some() || matches!(cli.command, Cmd::Migrate { .. }) {
        let seed = config.seed_policy();
        let at_ms = match mode {
            Some(ClockMode::Simulated) => simulated_setting_at(&ledger.store).await?,
            _ => ledger.now_ms(),
        };
        let in_force = ledger.policy_or_seed(&seed, at_ms).await?;
        let differs = in_force.policy.differences(&seed);
        if !differs.is_empty() {
            tracing::warn!(
                values = %differs.join(","),
                version = in_force.version,
                "this process's configuration differs from the ledger's control policy: the ledger's is used (`settle control policy`)"
            );
        }
        config.apply_policy(&in_force.policy);
        let _ = LEDGER_POLICY.set(in_force.policy);
    }
    let mut ledger_config = config.ledger.clone();
    if mode != Some(ClockMode::Real) && config.control.enforce == crate::config::Enforce::RealClock
    {
        // A replay (simulated clock) books history as it was: with control.enforce =
        // "real_clock" the bands hold on real-clock ledgers only ("always" and "never"
        // keep them everywhere).
        ledger_config.lift_bands();
    }
    ledger.config = ledger_config;
    Ok(ledger)
}

/// The policy of the ledger this process opened, once read (`open_ledger`).
static LEDGER_POLICY: std::sync::OnceLock<crate::domain::policy::Policy> =
    std::sync::OnceLock::new();

/// The configuration of `path` and the environment, with the opened ledger's control
/// policy in place of its own policy values: what every command of this process decides by.
pub(crate) fn config_of(path: Option<&std::path::Path>) -> anyhow::Result<Config> {
    let mut config = Config::load(path, std::env::vars())?;
    if let Some(policy) = LEDGER_POLICY.get() {
        config.apply_policy(policy);
    }
    Ok(config)
}

/// The ledger's clock mode, fixed now when `command` decides it: `settle migrate
/// --simulated-clock | --real-clock`, or the first command that may book (simulated with
/// `--now`, `now_given`, real without).
async fn decide_clock_mode(
    store: &Store,
    command: &Cmd,
    now_given: Option<i64>,
    real_now: i64,
) -> anyhow::Result<Option<ClockMode>> {
    let mut mode = store.clock_mode().await?;
    if let Cmd::Migrate {
        simulated_clock,
        real_clock,
        ..
    } = command
    {
        let wanted = match (simulated_clock, real_clock) {
            (true, true) => bail!("invalid_arguments: --simulated-clock or --real-clock, not both"),
            (true, false) => Some(ClockMode::Simulated),
            (false, true) => Some(ClockMode::Real),
            // Plain `migrate` makes a new ledger a real-clock one: a simulated clock is
            // asked for by name, never fallen into.
            (false, false) => match mode {
                None => Some(ClockMode::Real),
                // A ledger of an earlier release: book the mode it kept.
                Some(kept) if !store.clock_mode_booked().await? => Some(kept),
                Some(_) => None,
            },
        };
        if let Some(wanted) = wanted {
            if mode.is_none() && wanted == ClockMode::Simulated && store.event_count().await? > 0 {
                bail!(
                    "ledger_not_empty: only a new ledger can be made a simulated-clock ledger; this one holds events"
                );
            }
            let at = if wanted == ClockMode::Simulated {
                0
            } else {
                real_now
            };
            let fixed = crate::ledger::policy::fix_clock_mode(store, wanted, at).await?;
            if fixed != wanted {
                bail!(
                    "clock_mode_fixed: this ledger's clock is {} and stays so",
                    fixed.as_str()
                );
            }
            mode = Some(fixed);
        }
    } else if let Some(kept) = mode
        && may_book(command)
        && !store.clock_mode_booked().await?
    {
        // A ledger of an earlier release: its mode is booked on the chain as it kept it.
        let at = match kept {
            ClockMode::Simulated => simulated_setting_at(store).await?,
            ClockMode::Real => real_now,
        };
        crate::ledger::policy::fix_clock_mode(store, kept, at).await?;
    } else if mode.is_none() && may_book(command) {
        mode = Some(match now_given {
            Some(_) => {
                let at = simulated_setting_at(store).await?;
                crate::ledger::policy::fix_clock_mode(store, ClockMode::Simulated, at).await?
            }
            None => crate::ledger::policy::fix_clock_mode(store, ClockMode::Real, real_now).await?,
        });
    }
    Ok(mode)
}

/// When a simulated-clock ledger's settings (its clock mode, its seeded policy) are booked:
/// at its latest booking (0 on an empty one), so booking them moves its replay's time
/// nowhere: a later `--now` may still be any instant from there.
async fn simulated_setting_at(store: &Store) -> anyhow::Result<i64> {
    Ok(store.max_recorded_at_ms().await?.unwrap_or(0))
}

/// A clock standing at `--now`, refused when it is earlier than the latest booking.
async fn manual_clock(store: &Store, now: i64) -> anyhow::Result<Arc<dyn Clock>> {
    if let Some(latest) = store.max_recorded_at_ms().await?
        && now < latest
    {
        bail!(
            "--now {} is earlier than the latest booking on the ledger ({}): booking time only moves forward",
            format_ms(now),
            format_ms(latest)
        );
    }
    Ok(Arc::new(ManualClock::new(now)))
}

/// Hides a password in a database URL.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The commands that need no database, run; `None` for the others.
async fn without_database(cli: &Cli) -> Option<anyhow::Result<i32>> {
    match &cli.command {
        Cmd::Operator(operator::OperatorCmd::Keygen { out }) => {
            Some(operator::keygen(out, &mut std::io::stdout().lock()))
        }
        Cmd::Privacy(privacy::PrivacyCmd::Keygen { out }) => {
            Some(privacy::keygen(out, &mut std::io::stdout().lock()))
        }
        #[cfg(feature = "local-chain")]
        Cmd::Demo { dir } => Some(demo_cmd(dir, cli.format).await),
        #[cfg(feature = "local-chain")]
        Cmd::Chain(cmd) => Some(solana::chain_cmd(cmd, cli.format).await),
        Cmd::Statement(statement::StatementCmd::Verify {
            file,
            root,
            rpc,
            key,
        }) => Some(
            statement::verify(
                file,
                root.as_deref(),
                rpc.as_deref(),
                key.as_deref(),
                cli.format,
                &mut std::io::stdout().lock(),
            )
            .await,
        ),
        _ => None,
    }
}

pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    let _ = OPERATOR.set(operator_from(cli.actor.as_deref())?);
    let _ = OPERATOR_KEY.set(cli.operator_key.clone());
    if let Some(code) = without_database(&cli).await {
        return code;
    }
    // One loaded configuration for the ledger and the server (the other sections are read
    // by the commands that use them, from the same file and environment).
    let mut config = Config::load(cli.config.as_deref(), std::env::vars())?;
    if let Some(code) = grants_first(&cli, &config).await {
        return code;
    }
    let ledger = open_ledger(&cli, &mut config).await?;
    let mut stdout = std::io::stdout().lock();
    let code = match &cli.command {
        #[cfg(feature = "local-chain")]
        Cmd::Demo { .. } => unreachable!("handled before opening the database"),
        Cmd::Serve { no_scheduler } => {
            let config = anchor::resolved(&cli, config);
            serve::serve(ledger.clone(), config, !no_scheduler).await?;
            0
        }
        Cmd::Migrate { .. } => migrate_cmd(&ledger, &cli, &mut stdout).await?,
        Cmd::Import { file } => {
            import_file::import(&ledger, &cli, file, false, &mut stdout).await?
        }
        Cmd::Ingest { file } => import_file::import(&ledger, &cli, file, true, &mut stdout).await?,
        Cmd::Approvals(_) | Cmd::Operator(_) | Cmd::Control(_) => {
            control_cmds(&ledger, &cli, &mut stdout).await?
        }
        Cmd::Verify { .. } | Cmd::Anchor(_) | Cmd::Statement(_) | Cmd::Rebuild => {
            integrity::integrity_cmds(&ledger, &cli, &config, &mut stdout).await?
        }
        Cmd::Run(cmd) => {
            runs::run_cmd(&ledger, cmd, cli.config.as_deref(), cli.format, &mut stdout).await?
        }
        Cmd::Payout(cmd) => {
            runs::payout_cmd(&ledger, cmd, cli.config.as_deref(), cli.format, &mut stdout).await?
        }
        Cmd::Calendar(cmd) => runs::calendar_cmd(&ledger, cmd, cli.format, &mut stdout).await?,
        Cmd::Balance { provider } => {
            reads::balance(&ledger, provider.as_deref(), cli.format, &mut stdout).await?
        }
        Cmd::Reliability { provider } => {
            reads::reliability(&ledger, provider, cli.format, &mut stdout).await?
        }
        Cmd::Earnings(args) => reads::earnings(&ledger, args, cli.format, &mut stdout).await?,
        Cmd::Payouts(args) => reads::payouts(&ledger, args, cli.format, &mut stdout).await?,
        Cmd::Token(cmd) => {
            reads::token(&ledger, cmd, cli.config.as_deref(), cli.format, &mut stdout).await?
        }
        Cmd::Bank(args) => {
            bank::bank_cmd(
                &ledger,
                args,
                cli.config.as_deref(),
                cli.format,
                &mut stdout,
            )
            .await?
        }
        Cmd::Pay(cmd) => {
            solana::pay_cmd(&ledger, cmd, cli.config.as_deref(), cli.format, &mut stdout).await?
        }
        Cmd::Reconcile(cmd) => {
            solana::reconcile_cmd(&ledger, cmd, cli.config.as_deref(), cli.format, &mut stdout)
                .await?
        }
        Cmd::Privacy(cmd) => privacy::privacy_cmd(&ledger, cmd, cli.format, &mut stdout).await?,
        Cmd::Provider(cmd) => {
            provider::provider_cmd(&ledger, cmd, cli.config.as_deref(), cli.format, &mut stdout)
                .await?
        }
        // Handled above, before a database is opened.
        #[cfg(feature = "local-chain")]
        Cmd::Chain(cmd) => solana::chain_cmd(cmd, cli.format).await?,
    };
    ledger.store.close().await;
    Ok(code)
}

/// The commands of dual control (SPEC §9): `approvals`, `operator`, `control`.
async fn control_cmds(ledger: &Ledger, cli: &Cli, out: &mut impl Write) -> anyhow::Result<i32> {
    let config = cli.config.as_deref();
    match &cli.command {
        Cmd::Approvals(cmd) => approvals::approvals_cmd(ledger, cmd, config, cli.format, out).await,
        Cmd::Operator(cmd) => operator::operator_cmd(ledger, cmd, cli.format, out).await,
        Cmd::Control(cmd) => policy::control_cmd(ledger, cmd, config, cli.format, out).await,
        _ => unreachable!("called for the control commands only"),
    }
}

#[cfg(feature = "local-chain")]
/// `settle demo`: runs the demo in `dir` and prints its report.
async fn demo_cmd(dir: &std::path::Path, format: Format) -> anyhow::Result<i32> {
    let report = crate::demo::run(dir, &crate::report::shell::program()).await?;
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        _ => print!("{}", crate::demo::render_table(&report)),
    }
    Ok(0)
}

/// `settle migrate --print-grants ROLE`, run instead of opening the ledger; `--grant ROLE`
/// refused on SQLite before it migrates anything. `None`: open the ledger.
async fn grants_first(cli: &Cli, config: &Config) -> Option<anyhow::Result<i32>> {
    let Cmd::Migrate {
        print_grants,
        grant,
        ..
    } = &cli.command
    else {
        return None;
    };
    if let Some(role) = print_grants {
        return Some(print_grants_cmd(cli, config, role, &mut std::io::stdout().lock()).await);
    }
    if grant.is_some() && cli.ledger_url().starts_with("sqlite:") {
        return Some(Err(anyhow::anyhow!(
            "{}",
            crate::store::StoreError::GrantsNeedPostgres
        )));
    }
    None
}

/// `settle migrate --print-grants ROLE`: prints the statements that give the runtime role
/// its rights, read from the ledger's database (`--owner-database` when given, else
/// `--database`); runs none.
async fn print_grants_cmd(
    cli: &Cli,
    config: &Config,
    role: &str,
    out: &mut impl Write,
) -> anyhow::Result<i32> {
    let url = cli.owner_database.as_deref().unwrap_or(&cli.database);
    if url.starts_with("sqlite:") {
        bail!("{}", crate::store::StoreError::GrantsNeedPostgres);
    }
    let store = Store::open(url, &config.store)
        .await
        .with_context(|| format!("opening database {}", redact(url)))?;
    let statements = store.runtime_grants(role).await;
    store.close().await;
    let statements = statements.map_err(|e| anyhow::anyhow!("{e}"))?;
    writeln!(
        out,
        "-- The runtime role {role}: reads, books, rewrites the projections; never updates, deletes\n\
         -- or truncates an append-only table ({}), never changes the schema.\n\
         -- Create it once (a superuser or a role with CREATEROLE), its password set apart:\n\
         --   CREATE ROLE {role} LOGIN;\n\
         -- Run these as the owner of the tables, again after every `settle migrate`:\n\
         -- tables a later migration adds get SELECT and INSERT only until then.",
        crate::store::roles::APPEND_ONLY_TABLES.join(", ")
    )?;
    for statement in statements {
        writeln!(out, "{statement};")?;
    }
    Ok(0)
}

/// `settle migrate` (already done by opening the ledger): says so, with the clock mode.
/// With `--grant ROLE`, then gives the runtime role its grants (`--print-grants`).
async fn migrate_cmd(ledger: &Ledger, cli: &Cli, out: &mut impl Write) -> anyhow::Result<i32> {
    writeln!(out, "database {} is up to date", redact(cli.ledger_url()))?;
    if let Cmd::Migrate {
        grant: Some(role), ..
    } = &cli.command
    {
        ledger
            .store
            .grant_runtime(role)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        writeln!(out, "granted the runtime role {role} its rights")?;
    }
    if let Some(mode) = ledger.store.clock_mode().await? {
        writeln!(out, "clock: {}", mode.as_str())?;
    }
    if let Some(d) = ledger.store.distribute().await? {
        writeln!(
            out,
            "citus: {} tables distributed by stream and {} reference tables across {} workers",
            d.by_stream, d.reference, d.workers
        )?;
    }
    Ok(0)
}
