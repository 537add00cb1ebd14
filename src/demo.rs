//! `settle demo`: the whole job on a fresh machine, built from the same services as
//! production. A SQLite file, sample providers (both tiers, weekly and monthly, Solana, SEPA
//! and ACH) with GPUs of the provider guide's models, a generated week of usage (with late
//! and duplicate events), the Monday run paying USDC on a local chain that executes the real
//! SPL Token program (through the production RpcClient adapter), a SEPA and a NACHA file
//! answered by the local bank simulator and imported (`answers`: one payout booked, one
//! returned), and a week of reliability reports scored (`reliability`).
//!
//! The generated input is written to `DIR/demo-input.ndjson` (`{"at": RFC3339, "line": …}`
//! per line, in arrival order) so that anyone can recompute what the demo prints.

mod answers;
mod reliability;
mod statement;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use chrono::{Datelike, Duration, NaiveDate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use settle_solana::Signer;

use crate::config::{BankConfig, LedgerConfig, RunConfig};
use crate::domain::money::{format_cents, format_micro_usdc};
use crate::domain::time::{date_start_ms, format_ms};
use crate::ledger::{Actor, Ledger, ManualClock};
use crate::report::shell::command_line;
use crate::store::read::{EarningsBy, PayoutFilter};
use crate::store::{ClockMode, Store, StoreOptions};

/// A sample provider: id, name, tier, schedule, payout method kind, GPU models.
pub struct DemoProvider {
    pub id: &'static str,
    pub name: &'static str,
    pub tier: &'static str,
    pub schedule: &'static str,
    pub rail: &'static str,
    pub gpus: &'static [&'static str],
    /// Hours rented per GPU and day, roughly.
    pub busy_hours: (u32, u32),
}

pub const PROVIDERS: &[DemoProvider] = &[
    DemoProvider {
        id: "prv_atlas",
        name: "Atlas Compute",
        tier: "enterprise",
        schedule: "weekly",
        rail: "solana",
        gpus: &["H100-80GB", "H100-80GB", "A100-80GB", "L40S-48GB"],
        busy_hours: (8, 20),
    },
    DemoProvider {
        id: "prv_borealis",
        name: "Borealis GPU Co-op",
        tier: "community",
        schedule: "weekly",
        rail: "solana",
        gpus: &["A100-40GB", "RTX4090-24GB", "RTX4090-24GB"],
        busy_hours: (4, 14),
    },
    DemoProvider {
        id: "prv_cumulus",
        name: "Cumulus Rechenzentrum GmbH",
        tier: "enterprise",
        schedule: "weekly",
        rail: "sepa",
        gpus: &["H100-80GB", "L40S-48GB"],
        busy_hours: (6, 18),
    },
    DemoProvider {
        id: "prv_delta",
        name: "Delta Render LLC",
        tier: "community",
        schedule: "weekly",
        rail: "ach",
        gpus: &["A100-80GB", "RTXA6000-48GB"],
        busy_hours: (5, 16),
    },
    DemoProvider {
        id: "prv_equinox",
        name: "Equinox Labs",
        tier: "community",
        schedule: "monthly",
        rail: "solana",
        gpus: &["L4-24GB", "RTX4090-24GB"],
        busy_hours: (3, 12),
    },
    DemoProvider {
        id: "prv_fjord",
        name: "Fjord Home Lab",
        tier: "community",
        schedule: "weekly",
        rail: "solana",
        gpus: &["L4-24GB"],
        busy_hours: (1, 4),
    },
];

/// The price book of the demo, USDC per GPU-hour.
pub(crate) fn demo_rate(model: &str) -> &'static str {
    match model {
        "H100-80GB" => "2.490000",
        "A100-80GB" => "1.790000",
        "A100-40GB" => "1.290000",
        "L40S-48GB" => "0.990000",
        "RTXA6000-48GB" => "0.790000",
        "RTX4090-24GB" => "0.690000",
        _ => "0.440000",
    }
}

/// One generated input line and the instant it reaches the engine.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub at_ms: i64,
    pub line: Value,
}

/// The Monday of the week before the one containing `today`: the demo's usage week.
pub(crate) fn demo_week(today: NaiveDate) -> NaiveDate {
    let monday = today - Duration::days(today.weekday().num_days_from_monday() as i64);
    monday - Duration::days(7)
}

/// Deterministic sample data for the week starting `week` (a Monday). `wallets` gives the
/// Solana wallet of each Solana provider, by provider id.
pub fn generate(week: NaiveDate, wallets: &dyn Fn(&str) -> String, seed: u64) -> Vec<Arrival> {
    let mut rng = StdRng::seed_from_u64(seed);
    let week_ms = date_start_ms(week);
    let hour = 3_600_000i64;
    let minute = 60_000i64;
    let mut out = Vec::new();
    let setup_at = week_ms - 8 * 24 * hour;
    for p in PROVIDERS {
        let method = match p.rail {
            "solana" => json!({"kind": "solana", "wallet": wallets(p.id)}),
            "sepa" => {
                json!({"kind": "sepa", "iban": "DE89370400440532013000", "bic": "COBADEFFXXX", "holder": p.name})
            }
            _ => {
                json!({"kind": "ach", "routing": "021000021", "account": "123456789", "account_type": "checking", "holder": p.name, "entity": "business"})
            }
        };
        out.push(Arrival {
            at_ms: setup_at,
            line: json!({"type": "provider.register", "provider_id": p.id, "name": p.name, "email": format!("payouts@{}.example", &p.id[4..]), "tier": p.tier, "schedule": p.schedule, "payout_method": method}),
        });
        let mut models: Vec<&str> = p.gpus.to_vec();
        models.dedup();
        for model in models {
            out.push(Arrival {
                at_ms: setup_at,
                line: json!({"type": "rate.set", "provider_id": p.id, "model": model, "rate_usdc_per_hour": demo_rate(model), "effective_from": format_ms(week_ms - 30 * 24 * hour)}),
            });
        }
        for (g, model) in p.gpus.iter().enumerate() {
            out.push(Arrival {
                at_ms: setup_at,
                line: json!({"type": "gpu.register", "gpu_id": format!("{}_gpu{g}", p.id), "provider_id": p.id, "model": model}),
            });
        }
    }
    // EUR per USD, fresh for the Monday run (SEPA payouts are paid in EUR).
    out.push(Arrival {
        at_ms: week_ms + 6 * 24 * hour + 12 * hour,
        line: json!({"type": "fx.rate_set", "eur_per_usd": "0.9214"}),
    });

    let mut sequence = 0u32;
    for p in PROVIDERS {
        for g in 0..p.gpus.len() {
            let gpu = format!("{}_gpu{g}", p.id);
            // Rentals one after another, with idle gaps, across the week (some cross midnight).
            let mut cursor = week_ms + rng.gen_range(0..6) * hour;
            let week_end = week_ms + 7 * 24 * hour;
            while cursor < week_end {
                let busy = rng.gen_range(p.busy_hours.0..=p.busy_hours.1) as i64;
                let length = (busy * hour / 2 + rng.gen_range(0..90) * minute).max(20 * minute);
                let end = (cursor + length).min(week_end - rng.gen_range(1..30) * minute);
                if end <= cursor {
                    break;
                }
                sequence += 1;
                let event_id = format!("agt-{}:{:06}", &gpu, sequence);
                let line = json!({"type": "usage", "event_id": event_id, "provider_id": p.id, "gpu_id": gpu, "rental_id": format!("rnt_{:05}", 10_000 + sequence), "started_at": format_ms(cursor), "ended_at": format_ms(end)});
                // Agents report a few minutes after the rental ends; one in 25 was offline for
                // a day; one in 20 reports twice (a duplicate after a retry).
                let mut at = end + rng.gen_range(1..10) * minute;
                if rng.gen_range(0..25) == 0 {
                    at += 24 * hour;
                }
                if at >= week_end {
                    // Reached the engine after Monday 00:00: booked, but paid the week after.
                    at = week_end + rng.gen_range(1..4) * minute;
                }
                out.push(Arrival {
                    at_ms: at,
                    line: line.clone(),
                });
                if rng.gen_range(0..20) == 0 {
                    out.push(Arrival {
                        at_ms: at + 30 * minute,
                        line,
                    });
                }
                cursor = end + rng.gen_range(30..(8 * 60)) * minute;
            }
        }
    }
    out.extend(reliability::week_reports(week));
    out.sort_by_key(|a| a.at_ms);
    out
}

/// The deterministic wallet of a demo provider (its keypair derives from the id).
pub fn demo_wallet(provider_id: &str) -> settle_solana::Keypair {
    use sha2::{Digest, Sha256};
    let seed: [u8; 32] =
        Sha256::digest(format!("settle-demo-wallet:{provider_id}").as_bytes()).into();
    settle_solana::Keypair::new_from_array(seed)
}

/// Everything the demo did, as it prints it.
#[derive(Debug, serde::Serialize)]
pub struct DemoReport {
    pub database: String,
    pub week_start: String,
    pub run_date: String,
    pub input_file: String,
    pub ingest: serde_json::Map<String, Value>,
    pub earnings_per_gpu: Vec<Value>,
    pub run: Value,
    pub payouts: Vec<Value>,
    pub chain: Value,
    pub bank_files: Vec<Value>,
    /// The bank's answers to those files, imported: one object per answer file.
    pub bank_answers: Vec<Value>,
    /// Each sample provider's reliability after the week (SPEC §12).
    pub reliability: Vec<Value>,
    /// The operators put in force and the request one made and the other approved.
    pub dual_control: Value,
    /// The ledger anchored and published on the local chain, and a provider's statement
    /// checked against it (SPEC §13).
    pub statement: Value,
    /// What to run next, printed under "Explore it".
    #[serde(flatten)]
    pub next: NextSteps,
}

/// The commands the demo prints for the user to run next, each a command line as the
/// user's shell runs it (the program as [`crate::report::shell::program`] names it, every
/// word quoted).
#[derive(Debug, serde::Serialize)]
pub struct NextSteps {
    /// `settle serve` over the demo's data.
    pub serve: String,
    /// The dashboard of `settle serve` over the demo's data.
    pub dashboard_url: String,
    /// A provider token of `prv_atlas` (made by the demo, valid 7 days) to sign in with.
    pub dashboard_token: String,
    /// `curl` reading `prv_atlas`'s summary from the served API with `dashboard_token`.
    pub summary_curl: String,
    /// `settle token create` of an admin token for the demo's database, requested by the
    /// operator alice (signed with her key file): control is enforced on the demo's ledger,
    /// so the token waits for a second operator.
    pub admin_token_create: String,
    /// bob's approval of that request (its approval id is known before: a token's request
    /// is keyed by its name); the token works from then on.
    pub admin_token_approve: String,
}

impl NextSteps {
    /// The steps for the demo's database `url` served with the configuration `config`.
    fn new(
        program: &str,
        url: &str,
        config: &Path,
        keys: &Path,
        dashboard_token: String,
    ) -> NextSteps {
        let config = config.to_string_lossy();
        let api = format!("http://{}", crate::config::HttpConfig::default().bind);
        NextSteps {
            serve: command_line(program, &["--database", url, "--config", &config, "serve"]),
            dashboard_url: format!("{api}/dashboard"),
            summary_curl: command_line(
                "curl",
                &[
                    "-H",
                    &format!("Authorization: Bearer {dashboard_token}"),
                    &format!("{api}/v1/providers/prv_atlas/summary"),
                ],
            ),
            dashboard_token,
            admin_token_create: command_line(
                program,
                &[
                    "--database",
                    url,
                    "--actor",
                    "alice",
                    "--operator-key",
                    &keys.join("alice.json").to_string_lossy(),
                    "token",
                    "create",
                    "--scope",
                    "admin",
                    "--name",
                    ADMIN_TOKEN_NAME,
                ],
            ),
            admin_token_approve: command_line(
                program,
                &[
                    "--database",
                    url,
                    "--actor",
                    "bob",
                    "--operator-key",
                    &keys.join("bob.json").to_string_lossy(),
                    "approvals",
                    "approve",
                    &crate::control::token_request(ADMIN_TOKEN_NAME, crate::auth::Scope::Admin)
                        .approval_id(),
                ],
            ),
        }
    }
}

/// Runs the demo in `dir` (created; an earlier demo database there is replaced). The
/// commands it prints start with `program`: how the user's shell runs this binary.
pub async fn run(dir: &Path, program: &str) -> anyhow::Result<DemoReport> {
    let dir = prepare_dir(dir)?;
    let outbox = dir.join("outbox");
    let url = format!("sqlite://{}", dir.join("settle.db").display());
    let store = open_store(&url).await?;

    let week = paid_week();
    let monday = week + Duration::days(7);
    let arrivals = generate(week, &|id| demo_wallet(id).pubkey().to_string(), 20261123);
    let input_path = dir.join("demo-input.ndjson");
    write_input(&input_path, &arrivals)?;

    // Book the week as it arrives.
    let clock = Arc::new(ManualClock::new(
        arrivals.first().map(|a| a.at_ms).unwrap_or(0),
    ));
    let ledger = demo_ledger(&dir, &url, store, clock.clone()).await?;
    seed_policy(&ledger).await?;
    let counts = book_arrivals(&ledger, &clock, &arrivals).await?;

    // The Monday run at 00:05 UTC.
    clock.set(monday_run_ms(week));
    let report = weekly_run(&ledger, monday).await?;
    // The week's reliability, as the dashboard shows it at the run.
    let reliability = reliability::scores(&ledger).await?;

    // USDC on a local chain running the real SPL Token program, through the RpcClient adapter.
    let chain = crate::rails::solana::dev::start_local_chain(
        &dir.join("chain"),
        1_000_000 * 1_000_000,
        100 * crate::rails::solana::dev::LAMPORTS_PER_SOL,
    )
    .await?;
    let rail = crate::rails::solana::SolanaRail::connect(&chain.solana_config()).await?;
    clock.advance(60_000);
    let paid = rail.pay_pending(&ledger).await?;

    // Bank files for the SEPA and ACH providers.
    clock.advance(4 * 60_000);
    let bank_config = BankConfig {
        outbox_dir: outbox.display().to_string(),
        ..BankConfig::default()
    };
    let generated =
        crate::rails::bank::generate_batches(&ledger, &bank_config, &Actor::system("bank")).await?;

    // Dual control, provable: a payout method change requested by one operator, approved by
    // the other, both signatures on the chain.
    clock.advance(60_000);
    let dual_control = dual_control(&ledger, &dir).await?;

    // The bank answers on Tuesday morning: the SEPA payout booked, the ACH payout returned.
    clock.set(monday_run_ms(week) + 33 * 3_600_000);
    let bank_answers = answers::answer_batches(&ledger, &bank_config, &generated, &dir).await?;

    // What a provider's dashboard shows, and the books.
    let earnings_per_gpu = earnings_per_gpu(&ledger, week, monday).await?;
    let payouts = payout_rows(&ledger).await?;
    let balances = solana_balances(&chain);
    let bank_files = bank_file_rows(&ledger, &generated).await?;
    check_books(&ledger).await?;
    let dashboard_token = dashboard_token(&ledger).await?;
    // Anchored, published on the chain; a provider's statement proven against it.
    let statement = statement::prove(&ledger, &url, &dir, &chain, program).await?;
    let serve_config = write_serve_config(&dir, &bank_config)?;
    let demo = DemoReport {
        database: url.clone(),
        week_start: week.to_string(),
        run_date: monday.to_string(),
        input_file: input_path.display().to_string(),
        ingest: counts,
        earnings_per_gpu,
        run: serde_json::to_value(&report)?,
        payouts,
        chain: chain_summary(&chain, &paid, balances),
        bank_files,
        bank_answers,
        reliability,
        dual_control,
        statement,
        next: NextSteps::new(
            program,
            &url,
            &serve_config,
            &dir.join("operators"),
            dashboard_token,
        ),
    };
    ledger.store.close().await;
    drop(chain);
    Ok(demo)
}

/// The weekly run of `monday`, as the scheduler starts it.
async fn weekly_run(
    ledger: &Ledger,
    monday: NaiveDate,
) -> anyhow::Result<crate::ledger::runs::RunReport> {
    Ok(ledger
        .run_payouts(
            settle_calendar::RunKey::Weekly { monday },
            &settle_calendar::Calendar::platform_default(),
            &RunConfig::default(),
            &Actor::system("scheduler"),
        )
        .await?)
}

/// The demo's ledger on `store` (at `url`, in `dir`) at `clock`, with the demo's benchmark
/// minimums, sealing personal values under a master key beside its database (made here: a
/// sample, like its operators' keys, so no warning is printed).
async fn demo_ledger(
    dir: &Path,
    url: &str,
    store: Store,
    clock: Arc<ManualClock>,
) -> anyhow::Result<Ledger> {
    let master_key = dir.join("settle.db.master-key");
    if !master_key.exists() {
        crate::privacy::keys::MasterKey::generate().write_file(&master_key)?;
    }
    let sealing = crate::privacy::vault::privacy_of(
        &crate::config::PrivacyConfig::default(),
        url,
        &store,
        true,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let config = LedgerConfig {
        reliability: reliability::minimums(),
        ..LedgerConfig::default()
    };
    Ok(Ledger::new(store, clock, config).with_privacy(sealing))
}

/// Two operators with Ed25519 keys (files in `DIR/operators/`, derived from fixed seeds: a
/// demo's keys are samples, never for a real ledger) put in force; then, with control
/// enforced on this simulated ledger, alice requests a new wallet for prv_atlas (after the
/// week's run, so the run is unchanged) and bob approves it.
async fn dual_control(ledger: &Ledger, dir: &Path) -> anyhow::Result<Value> {
    use crate::operator_key::{load_signer, write_key_file};
    use sha2::{Digest, Sha256};
    let keys_dir = dir.join("operators");
    std::fs::create_dir_all(&keys_dir)?;
    let mut first = Vec::new();
    let mut files = Vec::new();
    for name in ["alice", "bob"] {
        let seed: [u8; 32] = Sha256::digest(format!("settle-demo-operator:{name}")).into();
        let path = keys_dir.join(format!("{name}.json"));
        let public = write_key_file(&path, &ed25519_dalek::SigningKey::from_bytes(&seed))?;
        first.push((crate::domain::operator::OperatorName::parse(name)?, public));
        files.push(path);
    }
    // From here on control is enforced on this ledger too (its policy says so, on the
    // chain): every gated command needs two operators.
    let mut policy = crate::config::Config::default().seed_policy();
    policy.enforce = crate::config::Enforce::Always;
    ledger.set_policy(&policy, &Actor::operator("demo")).await?;
    ledger
        .bootstrap_operators(&first, &Actor::operator("demo"))
        .await?;
    let config = crate::config::ControlConfig::default();
    let wallet = demo_wallet("prv_atlas:2").pubkey().to_string();
    let line = json!({"type": "provider.update", "provider_id": "prv_atlas",
                      "payout_method": {"kind": "solana", "wallet": wallet}});
    let command =
        crate::wire::import::parse_line(&line.to_string()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let alice = load_signer(ledger, &files[0]).await?;
    let submitted = crate::control::submit(
        ledger,
        &config,
        &command,
        &Actor::operator("alice"),
        Some(&alice),
    )
    .await?;
    let crate::control::Submitted::Pending(request) = submitted else {
        anyhow::bail!("the demo's payout method change did not wait for a second operator");
    };
    let bob = load_signer(ledger, &files[1]).await?;
    let (decided, applied) = crate::control::approve(
        ledger,
        &RunConfig::default(),
        &request.approval_id,
        &Actor::operator("bob"),
        Some(&bob),
    )
    .await?;
    // What bob read before approving: the request's new wallet opened.
    let mut read = [decided];
    ledger.open_approvals(&mut read).await?;
    let [decided] = read;
    Ok(json!({
        "operators": first.iter().zip(&files).map(|((name, key), file)| json!({
            "operator": name.as_str(), "public_key": key.to_base58(), "key_file": file.display().to_string(),
        })).collect::<Vec<_>>(),
        "approval_id": request.approval_id,
        "summary": decided.summary,
        "requester_operator": decided.requester_operator,
        "decider_operator": decided.decider_operator,
        "status": decided.status,
        "result": applied.as_str(),
    }))
}

/// Creates `dir` and removes an earlier demo's database and outbox from it; returns its
/// canonical path.
fn prepare_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    for f in [
        "settle.db",
        "settle.db-wal",
        "settle.db-shm",
        "settle.db.master-key",
        "settle.db.anchors",
        "settle.db.anchors.key",
    ] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    let _ = std::fs::remove_dir_all(dir.join("outbox"));
    let _ = std::fs::remove_dir_all(dir.join("operators"));
    Ok(dir)
}

/// The demo's ledger verifies, its control included, or the demo fails.
async fn check_books(ledger: &Ledger) -> anyhow::Result<()> {
    let mut verify = crate::verify::verify(&ledger.store, &|_| {}).await?;
    verify.check_control(&ledger.store).await?;
    anyhow::ensure!(
        verify.ok(),
        "the demo ledger does not verify: {:?}",
        verify.problems
    );
    Ok(())
}

/// Books the control policy on the demo's ledger like on any other: seeded with the
/// defaults (a simulated-clock ledger replays its history without approvals).
async fn seed_policy(ledger: &Ledger) -> anyhow::Result<()> {
    ledger
        .policy_or_seed(&crate::config::Config::default().seed_policy(), 0)
        .await?;
    Ok(())
}

/// Opens and migrates the demo database, fixed to the simulated clock.
async fn open_store(url: &str) -> anyhow::Result<Store> {
    let store = Store::open(url, &StoreOptions::default()).await?;
    store.migrate().await?;
    // The demo replays a week as it arrives, at the instants it happened.
    crate::ledger::policy::fix_clock_mode(&store, ClockMode::Simulated, 0).await?;
    Ok(store)
}

/// The instant of the Monday run (00:05 UTC) that pays the week starting on `week`.
fn monday_run_ms(week: NaiveDate) -> i64 {
    date_start_ms(week + Duration::days(7)) + 5 * 60_000
}

/// The week: the last full week whose Monday run (00:05 UTC) is already past.
fn paid_week() -> NaiveDate {
    let real_now = chrono::Utc::now().timestamp_millis();
    let mut week = demo_week(chrono::Utc::now().date_naive());
    if monday_run_ms(week) + 10 * 60_000 > real_now {
        week -= Duration::days(7);
    }
    week
}

/// Writes the generated arrivals to `path`, one `{"at", "line"}` object per line.
fn write_input(path: &Path, arrivals: &[Arrival]) -> anyhow::Result<()> {
    let mut input = String::new();
    for a in arrivals {
        input.push_str(&json!({"at": format_ms(a.at_ms), "line": a.line}).to_string());
        input.push('\n');
    }
    std::fs::write(path, input)?;
    Ok(())
}

/// Books every arrival at its instant; returns how many lines had each outcome.
async fn book_arrivals(
    ledger: &Ledger,
    clock: &ManualClock,
    arrivals: &[Arrival],
) -> anyhow::Result<serde_json::Map<String, Value>> {
    let actor = Actor::system("demo");
    let mut counts = serde_json::Map::new();
    for a in arrivals {
        clock.set(a.at_ms);
        let command = crate::wire::import::parse_line(&a.line.to_string())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let status = match crate::wire::import::apply(ledger, &command, &actor).await {
            Ok(applied) => applied.as_str().to_owned(),
            Err(crate::ledger::LedgerError::Rejected(e)) => format!("rejected:{}", e.code),
            Err(e) => return Err(e.into()),
        };
        let kind = a.line["type"].as_str().unwrap_or("?");
        let key = if kind == "usage" {
            format!("usage_{status}")
        } else {
            status
        };
        let n = counts.get(&key).and_then(Value::as_i64).unwrap_or(0);
        counts.insert(key, json!(n + 1));
    }
    Ok(counts)
}

/// The week's earnings of every GPU of every sample provider, as a dashboard shows them.
async fn earnings_per_gpu(
    ledger: &Ledger,
    week: NaiveDate,
    monday: NaiveDate,
) -> anyhow::Result<Vec<Value>> {
    let mut earnings_per_gpu = Vec::new();
    for p in PROVIDERS {
        let r = crate::store::read::earnings(
            &ledger.store,
            p.id,
            date_start_ms(week),
            date_start_ms(monday),
            EarningsBy::Gpu,
        )
        .await?;
        for g in r.groups {
            earnings_per_gpu.push(json!({
                "provider_id": p.id, "gpu_id": g.key, "model": g.model, "gpu_hours": g.totals.gpu_hours(),
                "gross_usdc": format_micro_usdc(g.totals.gross_micro_usdc), "fee_usdc": format_micro_usdc(g.totals.fee_micro_usdc),
                "net_usdc": format_micro_usdc(g.totals.net_micro_usdc),
            }));
        }
    }
    Ok(earnings_per_gpu)
}

/// Every payout of the ledger (up to 1000), as the report lists them.
async fn payout_rows(ledger: &Ledger) -> anyhow::Result<Vec<Value>> {
    let store = &ledger.store;
    Ok(crate::store::read::payouts(store, None, PayoutFilter::All, None, 1000)
        .await?
        .into_iter()
        .map(|p| json!({
            "payout_id": p.payout_id, "provider_id": p.provider_id, "rail": p.rail, "status": p.status,
            "amount_usdc": format_micro_usdc(p.amount_micro_usdc), "amount_eur": p.amount_eur_cents.map(format_cents),
            "reference": p.reference, "end_to_end_id": p.end_to_end_id,
        }))
        .collect())
}

/// The USDC balance of every Solana sample provider's wallet on the local chain.
fn solana_balances(chain: &crate::rails::solana::dev::DevChain) -> Vec<Value> {
    let mut balances = Vec::new();
    for p in PROVIDERS.iter().filter(|p| p.rail == "solana") {
        let wallet = demo_wallet(p.id).pubkey();
        balances.push(json!({"provider_id": p.id, "wallet": wallet.to_string(), "usdc": format_micro_usdc(chain.usdc_of(&wallet) as i64)}));
    }
    balances
}

/// The local chain after the run: its addresses, what the rail landed, the balances.
fn chain_summary(
    chain: &crate::rails::solana::dev::DevChain,
    paid: &crate::rails::solana::PayPendingReport,
    balances: Vec<Value>,
) -> Value {
    json!({
        "rpc_url": chain.url, "mint": chain.mint.to_string(), "treasury": chain.treasury.to_string(),
        "treasury_usdc": format_micro_usdc(chain.treasury_usdc() as i64),
        "transactions_landed": paid.transactions_landed, "settled": paid.settled, "failed": paid.failed,
        "balances": balances,
    })
}

/// The bank files written, one object per batch, with their payouts.
async fn bank_file_rows(
    ledger: &Ledger,
    generated: &crate::rails::bank::GenerateReport,
) -> anyhow::Result<Vec<Value>> {
    let mut rows = Vec::new();
    for b in &generated.batches {
        let batch = crate::rails::bank::known_batch(&ledger.store, &b.batch.batch_id).await?;
        rows.push(json!({
            "rail": b.batch.rail.as_str(), "batch_id": b.batch.batch_id, "path": b.path.display().to_string(), "sha256": b.batch.sha256,
            "currency": b.batch.currency, "total": format_cents(b.batch.total_cents), "payouts": batch.payout_ids,
        }));
    }
    Ok(rows)
}

/// Creates a provider token of `prv_atlas` (valid 7 days) to sign in to the dashboard with.
async fn dashboard_token(ledger: &Ledger) -> anyhow::Result<String> {
    Ok(crate::auth::create_token(
        &ledger.store,
        &crate::auth::NewToken {
            scope: crate::auth::Scope::Provider,
            provider_id: Some(crate::domain::ids::ProviderId::parse("prv_atlas")?),
            name: "demo-dashboard".into(),
            label: "settle demo: the dashboard of prv_atlas".into(),
            expires_in_days: Some(7),
            created_by: crate::ledger::Actor::operator("demo"),
            needs_approval: false,
        },
        &crate::config::AuthConfig::default(),
        chrono::Utc::now().timestamp_millis(),
    )
    .await?
    .token)
}

/// Writes `DIR/settle.toml` for `settle serve` over the demo's data: its bank outbox, and
/// the built-in example originator allowed (`settle serve` refuses it otherwise: a demo's
/// bank files are samples, never for a bank).
fn write_serve_config(dir: &Path, bank: &BankConfig) -> anyhow::Result<PathBuf> {
    let mut section = toml::Table::new();
    section.insert("outbox_dir".into(), bank.outbox_dir.clone().into());
    section.insert("allow_example_originator".into(), true.into());
    let mut root = toml::Table::new();
    root.insert("bank".into(), section.into());
    // The demo's benchmark minimums, so that the served dashboard lists what the demo printed.
    root.insert(
        "reliability".into(),
        toml::Table::try_from(reliability::minimums())?.into(),
    );
    let path = dir.join("settle.toml");
    let text = format!(
        "# settle serve over the demo's data (settle demo writes this file).\n{}",
        toml::to_string(&root)?
    );
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Renders the report for a terminal.
pub(crate) fn render_table(d: &DemoReport) -> String {
    let mut out = String::new();
    render_booking(&mut out, d);
    render_run(&mut out, d);
    render_payments(&mut out, d);
    answers::render(&mut out, &d.bank_answers);
    reliability::render(&mut out, &d.reliability);
    render_dual_control(&mut out, d);
    render_statement(&mut out, d);
    render_next_steps(&mut out, d);
    out
}

/// The header, what was booked, and the week's earnings per GPU.
fn render_booking(out: &mut String, d: &DemoReport) {
    use crate::report::output::Rows;
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "settle demo: the week of {} (Mon) paid on {}\n",
        d.week_start, d.run_date
    );
    let _ = writeln!(out, "Database      {}", d.database);
    let _ = writeln!(
        out,
        "Input         {} (one line per arrival, with its time)",
        d.input_file
    );
    let ingest: Vec<String> = d.ingest.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(out, "Booked        {}\n", ingest.join(", "));
    let _ = writeln!(
        out,
        "Earnings per GPU, week of {} (business time):",
        d.week_start
    );
    let mut rows = Rows::new(vec![
        "provider_id",
        "gpu_id",
        "model",
        "gpu_hours",
        "gross_usdc",
        "fee_usdc",
        "net_usdc",
    ]);
    for e in &d.earnings_per_gpu {
        rows.push(rows.columns.iter().map(|c| e[*c].clone()).collect());
    }
    out.push_str(&rows.render(crate::report::output::Format::Table));
}

/// The weekly run's decision per provider.
fn render_run(out: &mut String, d: &DemoReport) {
    use crate::report::output::Rows;
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "\nWeekly run {} (cutoff {}):",
        d.run["run_key"].as_str().unwrap_or(""),
        format_ms(d.run["cutoff_ms"].as_i64().unwrap_or(0))
    );
    let mut rows = Rows::new(vec![
        "provider_id",
        "decision",
        "available_usdc",
        "amount_usdc",
        "payout_id",
    ]);
    for c in d.run["candidates"].as_array().into_iter().flatten() {
        rows.push(vec![
            c["provider_id"].clone(),
            c["decision"].clone(),
            json!(format_micro_usdc(
                c["available_micro_usdc"].as_i64().unwrap_or(0)
            )),
            json!(format_micro_usdc(
                c["amount_micro_usdc"].as_i64().unwrap_or(0)
            )),
            c["payout_id"].clone(),
        ]);
    }
    out.push_str(&rows.render(crate::report::output::Format::Table));
}

/// The payouts, the Solana balances after the chain run, and the bank files.
fn render_payments(out: &mut String, d: &DemoReport) {
    use crate::report::output::Rows;
    use std::fmt::Write;
    let _ = writeln!(out, "\nPayouts:");
    let mut rows = Rows::new(vec![
        "payout_id",
        "provider_id",
        "rail",
        "status",
        "amount_usdc",
        "amount_eur",
        "reference",
    ]);
    for p in &d.payouts {
        rows.push(rows.columns.iter().map(|c| p[*c].clone()).collect());
    }
    out.push_str(&rows.render(crate::report::output::Format::Table));
    let _ = writeln!(
        out,
        "\nSolana (local chain {}, real SPL Token program): {} transactions landed; treasury now {} USDC",
        d.chain["rpc_url"].as_str().unwrap_or(""),
        d.chain["transactions_landed"],
        d.chain["treasury_usdc"].as_str().unwrap_or("")
    );
    let mut rows = Rows::new(vec!["provider_id", "wallet", "usdc"]);
    for b in d.chain["balances"].as_array().into_iter().flatten() {
        rows.push(rows.columns.iter().map(|c| b[*c].clone()).collect());
    }
    out.push_str(&rows.render(crate::report::output::Format::Table));
    let _ = writeln!(out, "\nBank files:");
    for f in &d.bank_files {
        let _ = writeln!(
            out,
            "  {}  {} {} for {} payouts, sha256 {}",
            f["path"].as_str().unwrap_or(""),
            f["total"].as_str().unwrap_or(""),
            f["currency"].as_str().unwrap_or(""),
            f["payouts"].as_array().map(|a| a.len()).unwrap_or(0),
            f["sha256"].as_str().unwrap_or("")
        );
    }
}

/// The operators and the request one made and the other approved.
fn render_dual_control(out: &mut String, d: &DemoReport) {
    use std::fmt::Write;
    let c = &d.dual_control;
    let _ = writeln!(
        out,
        "\nDual control (control enforced; every request and decision signed by an operator's Ed25519 key):"
    );
    for o in c["operators"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  operator {:<6} key {}  ({})",
            o["operator"].as_str().unwrap_or(""),
            o["public_key"].as_str().unwrap_or(""),
            o["key_file"].as_str().unwrap_or("")
        );
    }
    let _ = writeln!(
        out,
        "  {} requested: {} ({})\n  {} approved it: {}",
        c["requester_operator"].as_str().unwrap_or(""),
        c["summary"].as_str().unwrap_or(""),
        c["approval_id"].as_str().unwrap_or(""),
        c["decider_operator"].as_str().unwrap_or(""),
        c["result"].as_str().unwrap_or("")
    );
}

/// The anchor published on the local chain and the provider statement checked against it.
fn render_statement(out: &mut String, d: &DemoReport) {
    use std::fmt::Write;
    let s = &d.statement;
    let text = |k: &str| s[k].as_str().unwrap_or("").to_owned();
    let _ = writeln!(
        out,
        "\nAnchored and published (SPEC §13): anchor {} root {}\n  signed by the anchor key {}, \
         published on the local chain in transaction {}",
        s["anchor_n"],
        text("root"),
        text("anchor_key"),
        text("publication")
    );
    let _ = writeln!(
        out,
        "  {}'s statement of its payout: {} ({} events, statement hash {})\n  checked against \
         the chain: {}\n  the provider checks it again, with nothing but the file and the published root:\n     {}",
        text("provider_id"),
        text("statement_file"),
        s["events"],
        text("statement_hash"),
        text("verified"),
        text("verify_command")
    );
}

/// How to explore the demo's ledger: every command as the user's shell runs it.
fn render_next_steps(out: &mut String, d: &DemoReport) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "\nThe ledger verifies (hash chains, balanced lines, projections). Explore it:"
    );
    let _ = writeln!(
        out,
        "  1. Serve the same data (it keeps running; stop it with Ctrl-C):\n     {}",
        d.next.serve
    );
    let _ = writeln!(
        out,
        "  2. Open {} and sign in as prv_atlas with this provider token (valid 7 days):\n     {}",
        d.next.dashboard_url, d.next.dashboard_token
    );
    let _ = writeln!(
        out,
        "  3. Read the same figures from the API, in another terminal:\n     {}",
        d.next.summary_curl
    );
    let _ = writeln!(
        out,
        "  4. Create an admin token for the admin API: alice requests it (the token is printed \
         once and works after approval), bob approves it:\n     {}\n     {}",
        d.next.admin_token_create, d.next.admin_token_approve
    );
}

/// The name of the admin token the demo's last step creates.
const ADMIN_TOKEN_NAME: &str = "demo-admin";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_week_is_deterministic_and_well_formed() {
        let week = demo_week(NaiveDate::from_ymd_opt(2026, 11, 30).unwrap());
        assert_eq!(week, NaiveDate::from_ymd_opt(2026, 11, 23).unwrap());
        let wallets = |_: &str| "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".to_owned();
        let a = generate(week, &wallets, 7);
        let b = generate(week, &wallets, 7);
        assert_eq!(a.len(), b.len());
        assert!(
            a.iter()
                .zip(&b)
                .all(|(x, y)| x.at_ms == y.at_ms && x.line == y.line)
        );
        for arrival in &a {
            crate::wire::import::parse_line(&arrival.line.to_string())
                .expect("every generated line parses");
        }
        assert!(a.iter().filter(|x| x.line["type"] == "usage").count() > 100);
    }
}
