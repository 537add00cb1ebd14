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
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    if root.is_file() {
        out.push(root);
    } else {
        walk(&root, &mut out);
    }
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

/// The pure core is its own crate, `settle-domain`: the compiler refuses a `use` of the
/// store, the ledger or any I/O crate there, because the crate depends on none of them. This
/// test holds the dependency list itself (a new dependency on an I/O crate would undo that),
/// and what the compiler cannot see: the standard library's file and network I/O.
#[test]
fn the_pure_core_depends_on_no_io_layer() {
    let manifest = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/settle-domain/Cargo.toml"),
    )
    .unwrap();
    let table: toml::Table = manifest.parse().unwrap();
    let deps: Vec<&String> = table["dependencies"].as_table().unwrap().keys().collect();
    let allowed = [
        "serde",
        "serde_json",
        "chrono",
        "rust_decimal",
        "sha2",
        "hex",
        "bs58",
        "ed25519-dalek",
        "curve25519-dalek",
    ];
    let io: Vec<&&String> = deps
        .iter()
        .filter(|d| !allowed.contains(&d.as_str()))
        .collect();
    assert!(
        io.is_empty(),
        "settle-domain depends on {io:?}: the pure core takes no I/O, async or database crate \
         (add a pure one to this list)"
    );
    let found = naming(
        "crates/settle-domain/src",
        &[
            "std::fs",
            "std::net",
            "std::process",
            "std::env",
            "Instant::now",
            "Utc::now",
        ],
    );
    assert!(
        found.is_empty(),
        "the pure core does I/O or reads a clock:\n{}",
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
    let found: Vec<String> = naming("src", &forbidden).into_iter().collect();
    assert!(
        found.is_empty(),
        "a payout status spelled outside domain::payout:\n{}",
        found.join("\n")
    );
}

/// The top-level modules of `src/` and the ones each names (`crate::x`, in code or docs).
fn module_graph() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for file in sources("src") {
        let rel = file.strip_prefix(&root).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "main" || module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let names = graph.entry(module.clone()).or_default();
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let named = &rest[..end];
            if !named.is_empty() && named != module {
                names.insert(named.to_owned());
            }
        }
    }
    graph
}

#[test]
fn the_top_level_modules_name_each_other_without_a_cycle() {
    let graph = module_graph();
    assert!(graph.len() > 10, "modules found: {:?}", graph.keys());
    // Depth-first search from every module; a module met again on the current path
    // closes a cycle, reported as that path.
    fn visit(
        graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        module: &str,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<String> {
        if let Some(start) = path.iter().position(|m| m == module) {
            let mut cycle = path[start..].to_vec();
            cycle.push(module.to_owned());
            return Some(cycle.join(" -> "));
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = Default::default();
    for module in graph.keys() {
        if let Some(cycle) = visit(&graph, module, &mut Vec::new(), &mut done) {
            panic!("an import cycle between top-level modules: {cycle}\n{graph:#?}");
        }
    }
    // The direction the layers keep (ARCHITECTURE.md): the pure core and the leaves name
    // nothing above them, and nothing below the front ends names them.
    for leaf in ["failpoint", "config", "metrics"] {
        let above: Vec<&String> = graph[leaf]
            .iter()
            .filter(|m| *m != "domain" && *m != "failpoint")
            .collect();
        assert!(above.is_empty(), "{leaf} names {above:?}");
    }
    for lower in ["store", "ledger", "rails", "wire", "control", "report"] {
        for front in ["cli", "http", "jobs", "demo"] {
            assert!(
                !graph[lower].contains(front),
                "{lower} names the front end {front}"
            );
        }
    }
}

/// The ledger's write transaction (`write_stream!`) is private to it: the program exports
/// no macro, so nothing outside `src/ledger/` (tests included) can name it.
#[test]
fn the_write_transaction_macro_is_private_to_the_ledger() {
    let exported = naming("src", &["#[macro_export]"]);
    assert!(
        exported.is_empty(),
        "exported macros:\n{}",
        exported.join("\n")
    );
    let users: Vec<String> = naming("src", &["write_stream!"])
        .into_iter()
        .filter(|hit| !hit.contains("/src/ledger/"))
        .collect();
    assert!(
        users.is_empty(),
        "write_stream! outside the ledger:\n{}",
        users.join("\n")
    );
}

/// Only `ledger` appends: no other layer of `src/` opens a write transaction on the store
/// or appends an event (the rails call the ledger's commands, `ledger::rails`).
#[test]
fn only_the_ledger_appends() {
    let writes = [
        "write_stream!",
        ".append(NewEvent",
        "tx.append(",
        ".begin_streams(",
        "store.begin(",
    ];
    let found: Vec<String> = ["rails", "http", "cli", "jobs", "control", "verify.rs"]
        .into_iter()
        .flat_map(|dir| naming(&format!("src/{dir}"), &writes))
        .collect();
    assert!(
        found.is_empty(),
        "appends outside the ledger:\n{}",
        found.join("\n")
    );
}

/// Every SQL statement of the program lives in `src/store/`; the layers above call its
/// typed functions (the rails, the ledger, auth and the metrics included).
#[test]
fn every_sql_statement_lives_in_the_store() {
    let sql = [
        "sqlx::query",
        "fetch_one(",
        "fetch_all(",
        "fetch_optional(",
        ".execute(",
        "try_get(",
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in sources("src") {
        if file.starts_with(root.join("store")) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if let Some(f) = sql.iter().find(|f| line.contains(*f)) {
                found.push(format!(
                    "{}:{}: {f}: {}",
                    file.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "SQL outside src/store:\n{}",
        found.join("\n")
    );
}

/// Only the store names the database driver: the layers above hold a `store::Conn` or a
/// `&Store` and hand it to the store's functions, never a sqlx pool, connection or driver
/// type of their own, and never the store's pool. Which driver serves a dialect (sqlx `Any`,
/// or a native one) is then the store's decision alone, changed without touching them.
/// `sqlx::Error` may pass through: it names no driver.
#[test]
fn only_the_store_names_the_database_driver() {
    let driver = [
        "sqlx::any",
        "sqlx::Any",
        "AnyPool",
        "AnyConnection",
        "sqlx::Pool",
        "sqlx::pool",
        "PoolConnection",
        "sqlx::Sqlite",
        "sqlx::sqlite",
        "sqlx::Postgres",
        "sqlx::postgres",
        "PgPool",
        "SqlitePool",
        "use sqlx::{",
        ".pool()",
    ];
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    assert_none_named(
        "the database driver named outside src/store",
        naming("src", &driver),
        |file| file.starts_with(&store),
    );
}

/// The store runs every statement on the native driver of its dialect (sqlx `Sqlite`,
/// `Postgres`) through `on!`, and holds no pool of sqlx's `Any` driver: the pool that tests
/// and benchmarks use to look at the tables from outside is theirs (`common::tables`), made
/// from the store's URL.
#[test]
fn the_store_runs_on_the_native_drivers() {
    let any = [
        "sqlx::any",
        "sqlx::Any",
        "AnyPool",
        "AnyConnection",
        "AnyRow",
        ".pool()",
    ];
    assert_none_named(
        "the Any driver used by the store",
        naming("src", &any),
        |_| false,
    );
}

/// Fails with `what` and the places of `found` ([`naming`]) in files not `allowed`.
fn assert_none_named(what: &str, found: Vec<String>, allowed: impl Fn(&Path) -> bool) {
    let found: Vec<String> = found
        .into_iter()
        .filter(|place| !allowed(Path::new(place.split(':').next().unwrap())))
        .collect();
    assert!(found.is_empty(), "{what}:\n{}", found.join("\n"));
}

/// The store reads rows by column name into typed structs (`sqlx::FromRow`,
/// `query_scalar` for one column), never by position: a column added to or moved in a
/// `SELECT` cannot shift what the code reads. A `try_get` names its column (a string, or
/// in `project::row_vals` the table's declared column), and no row is a positional tuple.
#[test]
fn the_store_reads_columns_by_name() {
    let mut found = Vec::new();
    for file in sources("src") {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let place = || format!("{}:{}: {}", file.display(), n + 1, line.trim());
            let mut rest = line;
            while let Some(at) = rest.find("try_get") {
                rest = &rest[at + "try_get".len()..];
                // Past a turbofish (it holds no parenthesis) to the argument.
                let Some(open) = rest.find('(') else { break };
                let argument = rest[open + 1..].trim_start();
                let by_name = argument.starts_with('"')
                    || (file.ends_with("store/project.rs") && argument.starts_with("*c)"));
                if !by_name {
                    found.push(place());
                }
            }
            let tuple_type = line.contains("<(") || line.contains(": (");
            if line.contains("query_as") && tuple_type {
                found.push(place());
            }
        }
    }
    assert!(
        found.is_empty(),
        "rows read by position:\n{}",
        found.join("\n")
    );
}
