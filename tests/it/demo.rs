//! `settle demo` as a new user runs it, checked against an independent recomputation from
//! the demo's generated input (earnings per GPU, payouts, bank file sums) and against the
//! token balances it read from the chain.

use crate::common;

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

const HOUR_MS: i128 = 3_600_000;
const DAY_MS: i64 = 86_400_000;

fn half_even(n: i128, d: i128) -> i128 {
    let (q, r) = (n.div_euclid(d), n.rem_euclid(d));
    if 2 * r > d || (2 * r == d && q % 2 == 1) {
        q + 1
    } else {
        q
    }
}

fn ms(text: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .timestamp_millis()
}

fn micros(text: &str) -> i64 {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let sign = if whole.starts_with('-') { -1 } else { 1 };
    let whole: i64 = whole.trim_start_matches('-').parse().unwrap();
    let frac: i64 = format!("{frac:0<6}")[..6].parse().unwrap();
    sign * (whole * 1_000_000 + frac)
}

fn cents(text: &str) -> i64 {
    let (whole, frac) = text.split_once('.').unwrap();
    whole.parse::<i64>().unwrap() * 100 + frac.parse::<i64>().unwrap()
}

/// Extracts the text of every `<tag>` in an XML document.
fn xml_values(xml: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i..];
        let start = after.find('>').unwrap() + 1;
        let end = after.find(&close).unwrap();
        out.push(after[start..end].to_owned());
        rest = &after[end..];
    }
    out
}

#[test]
fn the_demo_pays_what_an_independent_computation_says() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::settle_bin())
        .args(["--format", "json", "demo", "--dir"])
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    the_demo_shows_a_signed_request_and_its_approval(&report, dir.path());
    the_demo_proves_a_statement_and_runs_again(&report, dir.path());

    // Read the generated input the way a provider's accountant would.
    let input = std::fs::read_to_string(dir.path().join("demo-input.ndjson")).unwrap();
    let mut tiers = BTreeMap::new();
    let mut schedules = BTreeMap::new();
    let mut rails = BTreeMap::new();
    let mut rates = BTreeMap::new();
    let mut models = BTreeMap::new();
    let mut eur_per_usd = String::new();
    let mut usage: Vec<(i64, Value)> = Vec::new();
    let mut seen = HashSet::new();
    let mut reliability_lines = 0;
    for line in input.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let (at, l) = (ms(v["at"].as_str().unwrap()), &v["line"]);
        match l["type"].as_str().unwrap() {
            "provider.register" => {
                let id = l["provider_id"].as_str().unwrap().to_owned();
                tiers.insert(id.clone(), l["tier"].as_str().unwrap().to_owned());
                schedules.insert(id.clone(), l["schedule"].as_str().unwrap().to_owned());
                rails.insert(id, l["payout_method"]["kind"].as_str().unwrap().to_owned());
            }
            "rate.set" => {
                rates.insert(
                    (
                        l["provider_id"].as_str().unwrap().to_owned(),
                        l["model"].as_str().unwrap().to_owned(),
                    ),
                    micros(l["rate_usdc_per_hour"].as_str().unwrap()),
                );
            }
            "gpu.register" => {
                models.insert(
                    l["gpu_id"].as_str().unwrap().to_owned(),
                    l["model"].as_str().unwrap().to_owned(),
                );
            }
            "fx.rate_set" => eur_per_usd = l["eur_per_usd"].as_str().unwrap().to_owned(),
            "usage" => {
                if seen.insert(l["event_id"].as_str().unwrap().to_owned()) {
                    usage.push((at, l.clone()));
                }
            }
            "gpu.schedule" | "gpu.online" | "job.outcome" | "gpu.benchmark" => {
                reliability_lines += 1;
            }
            other => panic!("unexpected line type {other}"),
        }
    }
    assert!(
        input.lines().count() > usage.len(),
        "the input re-sends some events (duplicates)"
    );

    // Price every event: split at UTC midnights, round half to even per line.
    let week_start = ms(&format!(
        "{}T00:00:00Z",
        report["week_start"].as_str().unwrap()
    ));
    let cutoff = week_start + 7 * DAY_MS;
    let mut per_gpu: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    let mut earned_before_cutoff: BTreeMap<String, i64> = BTreeMap::new();
    let mut late = 0;
    for (at, l) in &usage {
        let provider = l["provider_id"].as_str().unwrap();
        let gpu = l["gpu_id"].as_str().unwrap();
        let rate = rates[&(provider.to_owned(), models[gpu].clone())] as i128;
        let fee_bps: i128 = if tiers[provider] == "enterprise" {
            1500
        } else {
            2000
        };
        let (mut t, end) = (
            ms(l["started_at"].as_str().unwrap()),
            ms(l["ended_at"].as_str().unwrap()),
        );
        let mut net_total = 0;
        while t < end {
            let e = ((t / DAY_MS) + 1) * DAY_MS;
            let e = e.min(end);
            let gross = half_even(rate * (e - t) as i128, HOUR_MS) as i64;
            let fee = half_even(gross as i128 * fee_bps, 10_000) as i64;
            let g = per_gpu.entry(gpu.to_owned()).or_default();
            g.0 += gross;
            g.1 += fee;
            g.2 += gross - fee;
            net_total += gross - fee;
            t = e;
        }
        if *at < cutoff {
            *earned_before_cutoff.entry(provider.to_owned()).or_default() += net_total;
        } else {
            late += 1;
        }
    }
    assert!(
        late > 0,
        "the demo includes events that arrive after the Monday cutoff"
    );

    // Earnings per GPU as printed.
    let printed: BTreeMap<String, &Value> = report["earnings_per_gpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["gpu_id"].as_str().unwrap().to_owned(), e))
        .collect();
    assert_eq!(printed.len(), per_gpu.len());
    for (gpu, (gross, fee, net)) in &per_gpu {
        let e = printed[gpu];
        assert_eq!(
            micros(e["gross_usdc"].as_str().unwrap()),
            *gross,
            "{gpu} gross"
        );
        assert_eq!(micros(e["fee_usdc"].as_str().unwrap()), *fee, "{gpu} fee");
        assert_eq!(micros(e["net_usdc"].as_str().unwrap()), *net, "{gpu} net");
    }

    // The Monday run: weekly providers with at least 25 USDC earned before the cutoff are
    // paid exactly that (bank rails: floored to cents); late events wait for next week.
    let payouts: BTreeMap<String, &Value> = report["payouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["provider_id"].as_str().unwrap().to_owned(), p))
        .collect();
    let mut expected_payouts = 0;
    for (provider, schedule) in &schedules {
        let earned = earned_before_cutoff.get(provider).copied().unwrap_or(0);
        let bank = rails[provider] != "solana";
        let amount = if bank {
            earned / 10_000 * 10_000
        } else {
            earned
        };
        if schedule == "weekly" && amount >= 25_000_000 {
            expected_payouts += 1;
            let p = payouts
                .get(provider)
                .unwrap_or_else(|| panic!("{provider} is paid"));
            assert_eq!(
                micros(p["amount_usdc"].as_str().unwrap()),
                amount,
                "{provider} payout"
            );
            // The simulated bank books the SEPA payout and returns the ACH one.
            let status = if rails[provider] == "ach" {
                "returned"
            } else {
                "settled"
            };
            assert_eq!(p["status"], status, "{provider}");
        } else {
            assert!(
                !payouts.contains_key(provider),
                "{provider} is not paid this Monday"
            );
        }
    }
    assert_eq!(payouts.len(), expected_payouts);
    the_bank_answers_and_the_week_of_reliability(&report, reliability_lines);

    // USDC on chain: each Solana provider's token balance equals its payout.
    for b in report["chain"]["balances"].as_array().unwrap() {
        let provider = b["provider_id"].as_str().unwrap();
        let paid = payouts
            .get(provider)
            .map(|p| micros(p["amount_usdc"].as_str().unwrap()))
            .unwrap_or(0);
        assert_eq!(
            micros(b["usdc"].as_str().unwrap()),
            paid,
            "{provider} on chain"
        );
    }

    // Bank files: SEPA CtrlSum = the EUR cents of its payouts = round_half_even(USD cents ×
    // rate); NACHA credit total = the USD cents of its payouts.
    let rate = rust_decimal::Decimal::from_str_exact(&eur_per_usd).unwrap();
    let files = report["bank_files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "one SEPA and one NACHA file");
    for f in files {
        let text = std::fs::read_to_string(f["path"].as_str().unwrap()).unwrap();
        let ids: Vec<String> = f["payouts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_owned())
            .collect();
        let usd_cents: Vec<i64> = ids
            .iter()
            .map(|id| {
                let p = payouts
                    .values()
                    .find(|p| p["payout_id"] == id.as_str())
                    .unwrap();
                micros(p["amount_usdc"].as_str().unwrap()) / 10_000
            })
            .collect();
        match f["rail"].as_str().unwrap() {
            "sepa" => {
                let expected: i64 = usd_cents
                    .iter()
                    .map(|c| {
                        let eur = rust_decimal::Decimal::from(*c) * rate;
                        i64::try_from(eur.round_dp_with_strategy(
                            0,
                            rust_decimal::RoundingStrategy::MidpointNearestEven,
                        ))
                        .unwrap()
                    })
                    .sum::<i64>();
                let ctrl = xml_values(&text, "CtrlSum");
                assert_eq!(cents(&ctrl[0]), expected, "SEPA CtrlSum");
                assert_eq!(cents(f["total"].as_str().unwrap()), expected);
            }
            "ach" => {
                let control = text.lines().find(|l| l.starts_with('9')).unwrap();
                let credits: i64 = control[43..55].parse().unwrap();
                assert_eq!(credits, usd_cents.iter().sum::<i64>(), "NACHA credit total");
            }
            other => panic!("unexpected rail {other}"),
        }
    }
}

/// The demo's anchor was published on its chain and `prv_atlas`'s statement checked against
/// it; the command it prints checks the statement again, offline, when pasted; and a second
/// demo in the same directory starts a new ledger and a new anchor log.
fn the_demo_proves_a_statement_and_runs_again(report: &Value, dir: &std::path::Path) {
    let s = &report["statement"];
    assert!(s["verified"].as_str().unwrap().starts_with("ok: "), "{s}");
    assert!(
        s["publication"].as_str().is_some_and(|p| p.len() > 40),
        "{s}"
    );
    let command = s["verify_command"].as_str().unwrap();
    let out = std::process::Command::new("sh")
        .args(["-c", command])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.starts_with("ok: "),
        "{command}: {text}"
    );
    let again = std::process::Command::new(common::settle_bin())
        .args(["--format", "json", "demo", "--dir"])
        .arg(dir)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "the demo again in its directory: {}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// The bank's answers the demo imported (the SEPA payout booked, the ACH payout returned
/// with its code), and the week's reliability: Borealis's outage and Fjord's failed
/// benchmark lower their scores and say so.
fn the_bank_answers_and_the_week_of_reliability(report: &Value, reliability_lines: usize) {
    let answers = report["bank_answers"].as_array().unwrap();
    let kinds: Vec<&str> = answers
        .iter()
        .map(|a| a["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["pain.002", "camt.054", "nacha_returns"],
        "{answers:?}"
    );
    let returned: Vec<&Value> = answers
        .iter()
        .flat_map(|a| a["entries"].as_array().unwrap())
        .filter(|e| e["outcome"] == "returned")
        .collect();
    assert_eq!(returned.len(), 1, "{answers:?}");
    assert!(
        ["R01", "R03"].contains(&returned[0]["code"].as_str().unwrap()),
        "{returned:?}"
    );

    assert!(
        reliability_lines > 100,
        "{reliability_lines} reliability lines"
    );
    let scores: BTreeMap<&str, &Value> = report["reliability"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["provider_id"].as_str().unwrap(), r))
        .collect();
    assert_eq!(scores.len(), 6);
    let bps = |p: &str| scores[p]["score_bps"].as_u64().unwrap();
    let reasons = |p: &str| scores[p]["lowered_by"].to_string();
    assert!(
        reasons("prv_borealis").contains("offline 3 h 10 min inside your schedule"),
        "{}",
        reasons("prv_borealis")
    );
    assert!(bps("prv_borealis") < bps("prv_atlas"), "{scores:?}");
    assert!(bps("prv_fjord") < bps("prv_equinox"), "{scores:?}");
    let fjord = scores["prv_fjord"]["not_listed"].to_string();
    assert!(
        fjord.contains("prv_fjord_gpu0") && fjord.contains("benchmark"),
        "{fjord}"
    );
}

/// The demo's dual control: two operators whose key files only their owner may read, a
/// payout method change that names the new wallet in full, requested by alice and approved
/// by bob, and a ledger whose signatures `settle verify` checks.
fn the_demo_shows_a_signed_request_and_its_approval(report: &Value, dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let c = &report["dual_control"];
    let operators = c["operators"].as_array().expect("operators");
    assert_eq!(operators.len(), 2, "{c}");
    for o in operators {
        let file = o["key_file"].as_str().unwrap();
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}");
    }
    assert_eq!(c["requester_operator"], "alice", "{c}");
    assert_eq!(c["decider_operator"], "bob", "{c}");
    assert_eq!(c["status"], "approved", "{c}");
    assert_eq!(c["result"], "accepted", "{c}");
    let wallet = c["summary"].as_str().unwrap();
    assert!(
        wallet.starts_with("change the payout method of prv_atlas to solana wallet ")
            && wallet.len() > 70,
        "the approver sees the new wallet in full: {wallet}"
    );
    let url = format!("sqlite://{}", dir.join("settle.db").display());
    let (code, out, err) = common::run_cli(&url, &["--format", "json", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = common::run_cli(&url, &["--format", "json", "operator", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("alice") && out.contains("bob"), "{out}");
}
