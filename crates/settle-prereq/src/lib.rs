//! What the test suite needs beyond the Rust toolchain, in one place (a dev-dependency of
//! the root package and of `settle-bank`; nothing ships it).
//!
//! `cargo test --workspace` passes on a fresh clone: a test that needs something the
//! machine lacks says so and skips, everything else runs. CI has everything, and there a
//! missing prerequisite fails the test instead.
//!
//! Each prerequisite is a probe returning `Result<T, Missing>`:
//!
//! | probe | what | how to get it |
//! | --- | --- | --- |
//! | [`pain001_xsd`] | the official ISO 20022 `pain.001.001.09.xsd` | `shared/` beside the clone, or `SETTLE_SHARED_DIR` |
//! | [`xmllint`] | `xmllint` on `PATH` | Debian/Ubuntu `libxml2-utils` |
//! | [`pain001_schema`] | both of the above: validates SEPA files | both of the above |
//! | [`root`] | effective uid 0 | run as root (CI does) |
//! | [`tmpfs`] | a tmpfs mounted for the test | root with `CAP_SYS_ADMIN` |
//! | [`browser`] | `chromium` and `chromedriver` | Debian/Ubuntu `chromium chromium-driver` |
//! | [`postgres_server`] | `initdb`, `pg_ctl`, `postgres` (and a user to run them as) | the `postgresql` package |
//!
//! A test hands the probe to [`require`] when the whole test needs it, or to
//! [`require_step`] when only one of its steps does (the rest of the test still runs).
//! Present: `Some(T)`. Missing, with `CI` set (to anything but empty, `0` or `false`): the
//! test panics with the reason and how to get it. Missing elsewhere: one line
//! `SKIPPED <test>: <reason>; <how to get it>` on stderr, once per test and reason, and
//! `None`. The line is written on the stderr handle, not with `eprintln!`, which libtest
//! captures and hides for passing tests. `<test>` is the name of the calling thread, which
//! libtest names after the test: call `require` from the test's own thread (under
//! `#[tokio::test]` the test body runs there, spawned tasks do not).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// A prerequisite the machine lacks: why it is missing and how to get it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    reason: String,
    how: String,
}

impl Missing {
    pub fn new(reason: impl Into<String>, how: impl Into<String>) -> Missing {
        Missing {
            reason: reason.into(),
            how: how.into(),
        }
    }

    pub fn reason(&self) -> &str {
        &self.reason
    }

    pub fn how(&self) -> &str {
        &self.how
    }

    /// Two prerequisites missing at once.
    pub fn and(self, other: Missing) -> Missing {
        Missing {
            reason: format!("{} and {}", self.reason, other.reason),
            how: format!("{}; {}", self.how, other.how),
        }
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.reason, self.how)
    }
}

/// The whole test needs what `probe` found: `Some` when present; when missing, fails the
/// test in CI and otherwise reports it skipped and returns `None` (the test returns).
///
/// ```no_run
/// let Some(schema) = settle_prereq::require(settle_prereq::pain001_schema()) else {
///     return;
/// };
/// schema.assert_valid(std::path::Path::new("payouts.xml"));
/// ```
#[track_caller]
pub fn require<T>(probe: Result<T, Missing>) -> Option<T> {
    settle(probe, None)
}

/// One step of the test (`step`, e.g. "XSD validation") needs what `probe` found: as
/// [`require`], but the report names the step and the caller carries on without it.
#[track_caller]
pub fn require_step<T>(step: &str, probe: Result<T, Missing>) -> Option<T> {
    settle(probe, Some(step))
}

/// Whether this is CI: `CI` is set to anything but empty, `0` or `false`.
pub fn in_ci() -> bool {
    ci_from(std::env::var_os("CI").as_deref())
}

fn ci_from(value: Option<&OsStr>) -> bool {
    let Some(value) = value else {
        return false;
    };
    let value = value.to_string_lossy();
    let value = value.trim();
    !(value.is_empty() || value == "0" || value.eq_ignore_ascii_case("false"))
}

/// What to do about a probe's result.
#[derive(Debug, PartialEq, Eq)]
enum Outcome<T> {
    Present(T),
    /// The line to report.
    Skip(String),
    /// The panic message.
    Fail(String),
}

/// The decision, given the value of `CI` and the test's name.
fn decide<T>(
    probe: Result<T, Missing>,
    ci: Option<&OsStr>,
    test: &str,
    step: Option<&str>,
) -> Outcome<T> {
    let missing = match probe {
        Ok(v) => return Outcome::Present(v),
        Err(m) => m,
    };
    let who = match step {
        Some(step) => format!("{test} ({step})"),
        None => test.to_owned(),
    };
    if ci_from(ci) {
        Outcome::Fail(format!(
            "{who}: missing prerequisite: {missing} (CI is set, so this fails instead of \
             being skipped)"
        ))
    } else {
        Outcome::Skip(format!("SKIPPED {who}: {missing}"))
    }
}

#[track_caller]
fn settle<T>(probe: Result<T, Missing>, step: Option<&str>) -> Option<T> {
    let thread = std::thread::current();
    let test = thread
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("<unnamed test>");
    match decide(probe, std::env::var_os("CI").as_deref(), test, step) {
        Outcome::Present(v) => Some(v),
        Outcome::Skip(line) => {
            report(&line);
            None
        }
        Outcome::Fail(message) => panic!("{message}"),
    }
}

/// Writes `line` to stderr once per process. Not `eprintln!`: libtest captures that and
/// shows it only for failing tests.
fn report(line: &str) {
    static REPORTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let first = REPORTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(line.to_owned());
    if first {
        let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
    }
}

// ---------------------------------------------------------------------------------------
// The probes.

/// Where the official XSD lies below the shared directory.
pub const PAIN001_XSD: &str = "schemas/iso20022/pain.001.001.09.xsd";

const XSD_HOW: &str = "put shared/ beside the clone (CI does) or point SETTLE_SHARED_DIR at a \
    directory with schemas/iso20022/pain.001.001.09.xsd (the ISO 20022 schema; a copy is in \
    github.com/php-sepa-xml/php-sepa-xml, doc/ISO20022/pain/001/001/)";

/// The official `pain.001.001.09` XSD: `$SETTLE_SHARED_DIR/schemas/iso20022/…` when the
/// variable is set, else the first `shared/schemas/iso20022/…` found walking up from this
/// crate's directory (`shared/` beside the clone).
pub fn pain001_xsd() -> Result<PathBuf, Missing> {
    if let Some(dir) = std::env::var_os("SETTLE_SHARED_DIR").filter(|d| !d.is_empty()) {
        let path = Path::new(&dir).join(PAIN001_XSD);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Missing::new(
                format!(
                    "no pain.001.001.09 XSD at {} (SETTLE_SHARED_DIR)",
                    path.display()
                ),
                XSD_HOW,
            ))
        };
    }
    let start = Path::new(env!("CARGO_MANIFEST_DIR"));
    start
        .ancestors()
        .map(|d| d.join("shared").join(PAIN001_XSD))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Missing::new(
                format!(
                    "no pain.001.001.09 XSD (SETTLE_SHARED_DIR is not set and no parent of {} \
                     has shared/{PAIN001_XSD})",
                    start.display()
                ),
                XSD_HOW,
            )
        })
}

/// `xmllint` on `PATH`.
pub fn xmllint() -> Result<PathBuf, Missing> {
    find_on_path("xmllint").ok_or_else(|| {
        Missing::new(
            "xmllint is not on PATH",
            "install it (Debian/Ubuntu: `apt-get install libxml2-utils`)",
        )
    })
}

/// A headless browser for the dashboard's browser test: Chromium and the ChromeDriver of the
/// same version.
#[derive(Clone, Debug)]
pub struct Browser {
    pub chromium: PathBuf,
    pub chromedriver: PathBuf,
}

/// [`Browser`]: `chromium` (or `SETTLE_CHROMIUM`) and `chromedriver` (or
/// `SETTLE_CHROMEDRIVER`).
pub fn browser() -> Result<Browser, Missing> {
    let find = |env: &str, names: &[&str]| {
        std::env::var_os(env)
            .map(PathBuf::from)
            .filter(|p| p.is_file())
            .or_else(|| names.iter().find_map(|n| find_on_path(n)))
    };
    let how = "install Chromium and its driver (Debian/Ubuntu: `apt-get install chromium \
               chromium-driver`), or point SETTLE_CHROMIUM and SETTLE_CHROMEDRIVER at them";
    match (
        find(
            "SETTLE_CHROMIUM",
            &["chromium", "chromium-browser", "google-chrome"],
        ),
        find("SETTLE_CHROMEDRIVER", &["chromedriver"]),
    ) {
        (Some(chromium), Some(chromedriver)) => Ok(Browser {
            chromium,
            chromedriver,
        }),
        (None, _) => Err(Missing::new("Chromium is not on PATH", how)),
        (_, None) => Err(Missing::new("chromedriver is not on PATH", how)),
    }
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Validation of SEPA files against the official XSD with xmllint.
#[derive(Clone, Debug)]
pub struct Pain001Schema {
    pub xmllint: PathBuf,
    pub xsd: PathBuf,
}

/// [`xmllint`] and [`pain001_xsd`], both needed to validate a SEPA file.
pub fn pain001_schema() -> Result<Pain001Schema, Missing> {
    match (xmllint(), pain001_xsd()) {
        (Ok(xmllint), Ok(xsd)) => Ok(Pain001Schema { xmllint, xsd }),
        (Err(a), Err(b)) => Err(a.and(b)),
        (Err(m), Ok(_)) | (Ok(_), Err(m)) => Err(m),
    }
}

impl Pain001Schema {
    /// `xmllint --noout --schema XSD file`: `Ok` when valid, else what xmllint said.
    pub fn validate(&self, file: &Path) -> Result<(), String> {
        let out = Command::new(&self.xmllint)
            .arg("--noout")
            .arg("--schema")
            .arg(&self.xsd)
            .arg(file)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.xmllint.display()));
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "xmllint {}:\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Panics unless `file` is valid against the XSD.
    pub fn assert_valid(&self, file: &Path) {
        if let Err(e) = self.validate(file) {
            panic!(
                "{} is not valid against {}: {e}",
                file.display(),
                self.xsd.display()
            );
        }
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Running as root (effective uid 0).
pub fn root() -> Result<(), Missing> {
    match euid() {
        0 => Ok(()),
        uid => Err(Missing::new(
            format!("needs root, runs as uid {uid}"),
            "run it as root, as CI does (`bash .ci/run`)",
        )),
    }
}

/// A tmpfs mounted on an existing directory; unmounted when dropped.
#[derive(Debug)]
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

/// Mounts a tmpfs of `size` (`mount -o size=…`, e.g. `32m`) on the directory `dir`: needs
/// root, and the right to mount (`CAP_SYS_ADMIN`; an unprivileged container lacks it).
pub fn tmpfs(dir: &Path, size: &str) -> Result<Tmpfs, Missing> {
    root().map_err(|m| Missing::new(format!("mounting a tmpfs {}", m.reason()), m.how()))?;
    let how = "run it as root with the right to mount (CAP_SYS_ADMIN; a privileged \
               container), as CI does";
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .output()
        .map_err(|e| Missing::new(format!("cannot run mount: {e}"), how))?;
    if !out.status.success() {
        return Err(Missing::new(
            format!(
                "mount -t tmpfs on {} failed ({}): {}",
                dir.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            how,
        ));
    }
    Ok(Tmpfs {
        path: dir.to_path_buf(),
    })
}

/// PostgreSQL server binaries to run a private, throwaway cluster.
#[derive(Clone, Debug)]
pub struct PgServer {
    /// The directory of `initdb`, `pg_ctl` and `postgres`.
    pub bindir: PathBuf,
    /// Whom to run them as: `Some` when running as root (initdb refuses root).
    pub run_as: Option<PgUser>,
}

#[derive(Clone, Debug)]
pub struct PgUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

fn has_server_binaries(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"]
        .iter()
        .all(|b| dir.join(b).is_file())
}

/// The PostgreSQL server binaries: `$SETTLE_TEST_PG_BINDIR`, `pg_config --bindir` or the
/// newest `/usr/lib/postgresql/*/bin`; as root, also the `postgres` user to run them as.
pub fn postgres_server() -> Result<PgServer, Missing> {
    let how = "install the PostgreSQL server (Debian/Ubuntu: `apt-get install \
               postgresql`) or set SETTLE_TEST_PG_BINDIR to the directory of initdb, pg_ctl \
               and postgres";
    let mut tried = Vec::new();
    let mut found = None;
    if let Some(dir) = std::env::var_os("SETTLE_TEST_PG_BINDIR").filter(|d| !d.is_empty()) {
        tried.push(format!(
            "SETTLE_TEST_PG_BINDIR={}",
            Path::new(&dir).display()
        ));
        if has_server_binaries(Path::new(&dir)) {
            found = Some(PathBuf::from(dir));
        }
    }
    if found.is_none() {
        match Command::new("pg_config").arg("--bindir").output() {
            Ok(out) if out.status.success() => {
                let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
                tried.push(format!("pg_config --bindir ({})", dir.display()));
                if has_server_binaries(&dir) {
                    found = Some(dir);
                }
            }
            _ => tried.push("pg_config (not found)".to_owned()),
        }
    }
    if found.is_none() {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let v = e.file_name().to_str()?.parse().ok()?;
                        Some((v, e.path().join("bin")))
                    })
                    .collect()
            })
            .unwrap_or_default();
        versions.sort();
        tried.push("/usr/lib/postgresql/*/bin".to_owned());
        found = versions
            .into_iter()
            .rev()
            .map(|(_, d)| d)
            .find(|d| has_server_binaries(d));
    }
    let Some(bindir) = found else {
        return Err(Missing::new(
            format!(
                "no PostgreSQL server binaries (initdb, pg_ctl, postgres); tried {}",
                tried.join(", ")
            ),
            how,
        ));
    };
    if euid() != 0 {
        return Ok(PgServer {
            bindir,
            run_as: None,
        });
    }
    match (id_of("postgres", "-u"), id_of("postgres", "-g")) {
        (Some(uid), Some(gid)) => Ok(PgServer {
            bindir,
            run_as: Some(PgUser {
                name: "postgres".to_owned(),
                uid,
                gid,
            }),
        }),
        _ => Err(Missing::new(
            "runs as root, which initdb refuses, and there is no `postgres` user to run it as",
            "create one (`useradd --system postgres`; the Debian postgresql package does) or \
             run the test as another user",
        )),
    }
}

fn id_of(user: &str, flag: &str) -> Option<u32> {
    let out = Command::new("id").args([flag, user]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing() -> Result<u8, Missing> {
        Err(Missing::new(
            "xmllint is not on PATH",
            "install libxml2-utils",
        ))
    }

    #[test]
    fn ci_is_any_value_but_empty_zero_or_false() {
        for v in ["true", "1", "yes", "TRUE", "github-actions"] {
            assert!(ci_from(Some(OsStr::new(v))), "CI={v}");
        }
        for v in ["", "0", "false", "False", " false "] {
            assert!(!ci_from(Some(OsStr::new(v))), "CI={v:?}");
        }
        assert!(!ci_from(None), "CI unset");
    }

    #[test]
    fn missing_outside_ci_is_skipped_with_reason_and_how() {
        for ci in [None, Some(OsStr::new("")), Some(OsStr::new("false"))] {
            assert_eq!(
                decide(missing(), ci, "sepa::xsd", None),
                Outcome::Skip(
                    "SKIPPED sepa::xsd: xmllint is not on PATH; install libxml2-utils".to_owned()
                ),
                "CI={ci:?}"
            );
        }
        assert_eq!(
            decide(missing(), None, "bank::run", Some("XSD validation")),
            Outcome::Skip(
                "SKIPPED bank::run (XSD validation): xmllint is not on PATH; install \
                 libxml2-utils"
                    .to_owned()
            )
        );
    }

    #[test]
    fn missing_in_ci_fails_with_reason_and_how() {
        for ci in ["true", "1"] {
            match decide(missing(), Some(OsStr::new(ci)), "sepa::xsd", None) {
                Outcome::Fail(msg) => {
                    assert!(msg.starts_with("sepa::xsd: missing prerequisite"), "{msg}");
                    assert!(
                        msg.contains("xmllint is not on PATH; install libxml2-utils"),
                        "{msg}"
                    );
                }
                other => panic!("CI={ci}: {other:?}"),
            }
        }
    }

    #[test]
    fn present_is_used_in_and_out_of_ci() {
        for ci in [None, Some(OsStr::new("true"))] {
            assert_eq!(decide(Ok(7u8), ci, "t", None), Outcome::Present(7));
        }
        assert_eq!(require(Ok(7u8)), Some(7));
        assert_eq!(require_step("step", Ok(7u8)), Some(7));
    }

    #[test]
    fn two_missing_prerequisites_are_both_named() {
        let both = Missing::new("a is missing", "get a").and(Missing::new("b is missing", "get b"));
        assert_eq!(
            both.to_string(),
            "a is missing and b is missing; get a; get b"
        );
    }

    #[test]
    fn programs_are_found_on_path_only_when_executable() {
        // `sh` is on every PATH this suite runs with; a name nobody has is not.
        assert!(find_on_path("sh").is_some());
        assert!(find_on_path("settle-prereq-no-such-program").is_none());
    }
}
