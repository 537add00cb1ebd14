//! `settle demo`: the whole job on a fresh machine, built from the same services as
//! production. A SQLite file, sample providers (both tiers, weekly and monthly, Solana, SEPA
//! and ACH) with GPUs of the provider guide's models, a generated week of usage (with late
//! and duplicate events), the Monday run paying USDC on a local chain that executes the real
//! SPL Token program (through the production RpcClient adapter), a SEPA and a NACHA file.
//!
//! The generated input is written to `DIR/demo-input.ndjson` (`{"at": RFC3339, "line": …}`
//! per line, in arrival order) so that anyone can recompute what the demo prints.

use chrono::{Datelike, Duration, NaiveDate};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::domain::time::{date_start_ms, format_ms};

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
    DemoProvider { id: "prv_atlas", name: "Atlas Compute", tier: "enterprise", schedule: "weekly", rail: "solana", gpus: &["H100-80GB", "H100-80GB", "A100-80GB", "L40S-48GB"], busy_hours: (8, 20) },
    DemoProvider { id: "prv_borealis", name: "Borealis GPU Co-op", tier: "community", schedule: "weekly", rail: "solana", gpus: &["A100-40GB", "RTX4090-24GB", "RTX4090-24GB"], busy_hours: (4, 14) },
    DemoProvider { id: "prv_cumulus", name: "Cumulus Rechenzentrum GmbH", tier: "enterprise", schedule: "weekly", rail: "sepa", gpus: &["H100-80GB", "L40S-48GB"], busy_hours: (6, 18) },
    DemoProvider { id: "prv_delta", name: "Delta Render LLC", tier: "community", schedule: "weekly", rail: "ach", gpus: &["A100-80GB", "RTXA6000-48GB"], busy_hours: (5, 16) },
    DemoProvider { id: "prv_equinox", name: "Equinox Labs", tier: "community", schedule: "monthly", rail: "solana", gpus: &["L4-24GB", "RTX4090-24GB"], busy_hours: (3, 12) },
    DemoProvider { id: "prv_fjord", name: "Fjord Home Lab", tier: "community", schedule: "weekly", rail: "solana", gpus: &["L4-24GB"], busy_hours: (1, 4) },
];

/// The price book of the demo, USDC per GPU-hour.
pub fn demo_rate(model: &str) -> &'static str {
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
pub fn demo_week(today: NaiveDate) -> NaiveDate {
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
            "sepa" => json!({"kind": "sepa", "iban": "DE89370400440532013000", "bic": "COBADEFFXXX", "holder": p.name}),
            _ => json!({"kind": "ach", "routing": "021000021", "account": "123456789", "account_type": "checking", "holder": p.name, "entity": "business"}),
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
    out.push(Arrival { at_ms: week_ms + 6 * 24 * hour + 12 * hour, line: json!({"type": "fx.rate_set", "eur_per_usd": "0.9214"}) });

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
                out.push(Arrival { at_ms: at, line: line.clone() });
                if rng.gen_range(0..20) == 0 {
                    out.push(Arrival { at_ms: at + 30 * minute, line });
                }
                cursor = end + rng.gen_range(30..(8 * 60)) * minute;
            }
        }
    }
    out.sort_by_key(|a| a.at_ms);
    out
}

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
        assert!(a.iter().zip(&b).all(|(x, y)| x.at_ms == y.at_ms && x.line == y.line));
        for arrival in &a {
            crate::wire::import::parse_line(&arrival.line.to_string()).expect("every generated line parses");
        }
        assert!(a.iter().filter(|x| x.line["type"] == "usage").count() > 100);
    }
}
