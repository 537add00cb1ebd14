//! The first ten minutes of a new user: `settle demo` run from a directory, its terminal
//! holding its report and no log noise, and every command it prints pasted into a shell
//! from that same directory: the `serve` line serves the dashboard, the printed provider
//! token signs in, the `curl` line reads the API, the admin `token create` line makes a
//! token the API accepts.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{free_port, settle_bin};
use serde_json::Value;

/// The demo's printed address (`http.bind`'s default).
const DEMO_ADDR: &str = "127.0.0.1:8080";
/// The default metrics listener `settle serve` opens beside it.
const DEMO_METRICS_ADDR: &str = "127.0.0.1:9090";

/// `settle demo` (table output, default `--dir`) run from `cwd`, with `PATH` as given and
/// no `RUST_LOG`, as a new user's shell would.
fn demo(cwd: &Path, path: &std::ffi::OsStr, extra: &[&str]) -> Output {
    Command::new(settle_bin())
        .args(extra)
        .arg("demo")
        .current_dir(cwd)
        .env("PATH", path)
        .env_remove("RUST_LOG")
        .output()
        .expect("run settle demo")
}

/// The command line printed under the step that starts with `step` ("1.", "2.", …).
fn printed_under<'a>(report: &'a str, step: &str) -> &'a str {
    printed_lines_under(report, step, 1)[0]
}

/// The `n` command lines printed under step `step`.
fn printed_lines_under<'a>(report: &'a str, step: &str, n: usize) -> Vec<&'a str> {
    let mut lines = report.lines();
    lines
        .find(|l| l.trim_start().starts_with(step))
        .unwrap_or_else(|| panic!("no step {step} in the report:\n{report}"));
    (0..n)
        .map(|_| lines.next().expect("a line under the step").trim())
        .collect()
}

/// Runs `line` as a shell would from `cwd` (`exec`, so the process is the command itself).
fn shell(cwd: &Path, line: &str, path: &std::ffi::OsStr, env: &[(&str, String)]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("exec {line}"))
        .current_dir(cwd)
        .env("PATH", path)
        .env_remove("RUST_LOG")
        .env_remove("DATABASE_URL")
        .env_remove("SETTLE_CONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// The address the pasted `serve` line will listen on: the printed one, unless this
/// machine already uses that port (then `SETTLE_HTTP__BIND` moves it, and the test reads
/// the printed URLs at the new port). Likewise for the metrics listener.
fn listen_addresses() -> (String, Vec<(&'static str, String)>) {
    let mut env = Vec::new();
    let mut addr = DEMO_ADDR.to_owned();
    if std::net::TcpListener::bind(DEMO_ADDR).is_err() {
        addr = format!("127.0.0.1:{}", free_port());
        eprintln!("note: {DEMO_ADDR} is in use here; serving the demo on {addr}");
        env.push(("SETTLE_HTTP__BIND", addr.clone()));
    }
    if std::net::TcpListener::bind(DEMO_METRICS_ADDR).is_err() {
        env.push(("SETTLE_HTTP__METRICS_BIND", "127.0.0.1:0".to_owned()));
    }
    (addr, env)
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_healthy(client: &reqwest::Client, base: &str, server: &mut Server) {
    for _ in 0..400 {
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            return;
        }
        if let Some(status) = server.0.try_wait().unwrap() {
            panic!("the pasted serve line exited with {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the pasted serve line did not answer /healthz");
}

/// Signs in on the dashboard with `token` as the browser's form does; the session cookie.
async fn sign_in(client: &reqwest::Client, base: &str, token: &str) -> String {
    let r = client
        .post(format!("{base}/dashboard/login"))
        .header("origin", base)
        .form(&[("token", token), ("lang", "en")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303, "sign-in with the printed token");
    crate::dashboard_page::session_cookie(&r).0
}

/// What a pasted command printed; panics with its stderr when it failed.
fn pasted(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_demo_prints_works_when_pasted() {
    let home = tempfile::tempdir().unwrap();
    // A shell without this build on its PATH: the demo must name the binary by its path.
    let path = std::ffi::OsString::from("/usr/local/bin:/usr/bin:/bin");
    let out = demo(home.path(), &path, &[]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let logs = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "demo failed:\n{report}\n{logs}");
    assert!(report.contains("Earnings per GPU"), "{report}");
    // The terminal shows the report: a normal run logs nothing (warnings only, and none).
    assert!(
        logs.trim().is_empty(),
        "the demo printed log lines:\n{logs}"
    );

    let serve = printed_under(&report, "1.");
    let token = printed_under(&report, "2.");
    let curl = printed_under(&report, "3.");
    let admin_lines = printed_lines_under(&report, "4.", 2);
    let (admin, approve) = (admin_lines[0], admin_lines[1]);
    let program = settle_bin().canonicalize().unwrap();
    assert!(
        serve.starts_with(&format!("{} --database ", program.display())),
        "the serve line names this binary by its path: {serve}"
    );
    assert!(admin.starts_with(&program.display().to_string()), "{admin}");

    let (addr, env) = listen_addresses();
    let base = format!("http://{addr}");
    let mut server = Server(
        shell(home.path(), serve, &path, &env)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run the pasted serve line"),
    );
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    wait_healthy(&client, &base, &mut server).await;

    // The dashboard answers, and the printed token signs in as prv_atlas.
    let r = client
        .get(format!("{base}/dashboard"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.text().await.unwrap().contains("/dashboard/login"));
    let cookie = sign_in(&client, &base, token).await;
    let r = client
        .get(format!("{base}/dashboard"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let page = r.text().await.unwrap();
    assert!(
        page.contains("prv_atlas"),
        "the signed-in dashboard of prv_atlas"
    );
    assert!(!page.contains(token), "the page never shows the token");

    // The printed curl line reads prv_atlas's summary.
    let curl = curl.replace(DEMO_ADDR, &addr);
    let summary: Value = serde_json::from_str(&pasted(
        &shell(home.path(), &curl, &path, &[]).output().unwrap(),
        "curl",
    ))
    .expect("the summary as JSON");
    assert_eq!(summary["provider_id"], "prv_atlas", "{summary}");

    // The printed admin token line makes a token the admin API accepts.
    let created = pasted(
        &shell(home.path(), admin, &path, &[]).output().unwrap(),
        "token create",
    );
    let admin_token = created
        .split_whitespace()
        .find(|w| w.starts_with("stl_"))
        .unwrap_or_else(|| panic!("no token in {created}"));
    // Control is enforced on the demo's ledger: the token waits for the second operator.
    assert!(created.contains("pending_approval apr_"), "{created}");
    let r = client
        .get(format!("{base}/v1/admin/approvals"))
        .bearer_auth(admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401, "a token waiting for its approval");
    let approved = pasted(
        &shell(home.path(), approve, &path, &[]).output().unwrap(),
        "approvals approve",
    );
    assert!(approved.contains("approved"), "{approved}");
    let r = client
        .get(format!("{base}/v1/admin/approvals"))
        .bearer_auth(admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "the printed admin token works");
}

#[test]
fn the_demo_logs_when_asked_and_names_an_installed_settle() {
    let home = tempfile::tempdir().unwrap();
    // `settle` installed on the PATH (as the README's install step does): the demo prints
    // `settle …`, and that runs this very binary.
    let bin = home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(settle_bin(), bin.join("settle")).unwrap();
    let path =
        std::env::join_paths([bin.as_path(), Path::new("/usr/bin"), Path::new("/bin")]).unwrap();
    let out = demo(home.path(), &path, &["--log-level", "info"]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let logs = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "demo failed:\n{report}\n{logs}");
    let serve = printed_under(&report, "1.");
    assert!(serve.starts_with("settle --database "), "{serve}");
    let version = shell(home.path(), "settle --version", &path, &[])
        .output()
        .unwrap();
    assert_eq!(
        pasted(&version, "settle --version").trim(),
        format!("settle {}", env!("CARGO_PKG_VERSION"))
    );

    // Asked for, the logs come, and every field is a field: no `Debug` dump of a struct
    // (`Name { field: … }`) in any line.
    assert!(logs.contains("INFO"), "--log-level info logs: {logs}");
    let dumps: Vec<&str> = logs.lines().filter(|l| is_debug_struct(l)).collect();
    assert!(
        dumps.is_empty(),
        "log lines with a Debug struct:\n{}",
        dumps.join("\n")
    );
}

/// Whether `line` holds a Rust `Debug` rendering of a struct: an upper-case identifier, a
/// space, `{ `, an identifier and `: `.
fn is_debug_struct(line: &str) -> bool {
    line.match_indices(" { ").any(|(i, _)| {
        let before = &line[..i];
        let name: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let after = &line[i + 3..];
        let field: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // `name` is read backwards: its last character is the identifier's first.
        name.chars().last().is_some_and(|c| c.is_ascii_uppercase())
            && !field.is_empty()
            && after[field.len()..].starts_with(": ")
    })
}
