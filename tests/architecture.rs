//! The layering invariants of ARCHITECTURE.md that a file scan can check: what each layer
//! of `src/` may name. A line that names a forbidden path fails the test with its place.

use std::path::{Path, PathBuf};

fn sources(dir: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut out);
    assert!(!out.is_empty(), "no sources under {dir}");
    out
}

/// Every line of the sources under `dir` that names one of `forbidden` (comments included:
/// a doc link to a layer is a dependency too).
fn naming(dir: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for file in sources(dir) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if let Some(f) = forbidden.iter().find(|f| line.contains(*f)) {
                found.push(format!(
                    "{}:{}: {f}: {}",
                    file.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    found
}

#[test]
fn the_pure_core_names_no_io_layer() {
    let found = naming(
        "src/domain",
        &[
            "sqlx::",
            "tokio::",
            "axum::",
            "solana_sdk",
            "solana_client",
            "settle_solana",
            "spl_token",
            "spl_associated",
            "crate::store",
            "crate::ledger",
            "crate::http",
            "crate::cli",
            "crate::rails",
            "std::fs",
            "std::net",
        ],
    );
    assert!(
        found.is_empty(),
        "domain names an I/O layer:\n{}",
        found.join("\n")
    );
}

#[test]
fn http_and_cli_share_report_instead_of_importing_each_other() {
    let found = naming("src/http", &["crate::cli"]);
    assert!(found.is_empty(), "http imports cli:\n{}", found.join("\n"));
    // The CLI starts the server (`settle serve`): that one module may name `http`.
    let found: Vec<String> = naming("src/cli", &["crate::http"])
        .into_iter()
        .filter(|l| !l.contains("src/cli/serve.rs"))
        .collect();
    assert!(found.is_empty(), "cli imports http:\n{}", found.join("\n"));
    let found = naming("src/report", &["crate::cli", "crate::http"]);
    assert!(
        found.is_empty(),
        "report imports a front end:\n{}",
        found.join("\n")
    );
}

#[test]
fn payout_statuses_are_spelled_in_the_state_machine_only() {
    // SQL literals and string comparisons of a payout status: the sets they select come
    // from `domain::payout` (`PayoutStatus::sql_list`, `is_pending`, `is_in_transit`, …).
    // (A Solana attempt's outcome and a pay pass's report have words of their own.)
    let statuses = [
        "created",
        "held",
        "submitted",
        "settled",
        "failed",
        "cancelled",
        "returned",
    ];
    let mut forbidden = Vec::new();
    for s in statuses {
        forbidden.push(format!("'{s}'"));
        forbidden.push(format!("status == \"{s}\""));
        forbidden.push(format!("status != \"{s}\""));
        forbidden.push(format!("status.as_str() == \"{s}\""));
    }
    let forbidden: Vec<&str> = forbidden.iter().map(String::as_str).collect();
    let found: Vec<String> = naming("src", &forbidden)
        .into_iter()
        .filter(|l| !l.contains("src/domain/payout.rs"))
        .collect();
    assert!(
        found.is_empty(),
        "a payout status spelled outside domain::payout:\n{}",
        found.join("\n")
    );
}
