//! Failpoints: named places where a test makes the process abort, as a crash would, to
//! prove that what was committed before is whole and what was not is absent. A leaf:
//! every layer may call [`failpoint`], and it names no other module.

/// Whether this build aborts at armed failpoints: debug builds (the tests) and release
/// builds with the `failpoints` feature. A test that needs a failpoint skips, saying so,
/// when they are compiled out.
pub const COMPILED_IN: bool = cfg!(any(debug_assertions, feature = "failpoints"));

/// The environment variable naming a failpoint: `SETTLE_FAILPOINT=<name>` aborts the
/// process the first time `<name>` is reached, `SETTLE_FAILPOINT=<name>:<n>` the n-th time.
pub const FAILPOINT_ENV: &str = "SETTLE_FAILPOINT";

/// Aborts the process (as a crash would: no destructor, no rollback message) when the
/// failpoint `name` is armed by [`FAILPOINT_ENV`] and reached for the armed time.
///
/// Compiled into debug builds (the tests) and into release builds only with the
/// `failpoints` feature: a production binary cannot be made to abort by its environment.
#[cfg(not(any(debug_assertions, feature = "failpoints")))]
#[inline(always)]
pub fn failpoint(_name: &str) {}

/// See the release version above.
#[cfg(any(debug_assertions, feature = "failpoints"))]
pub fn failpoint(name: &str) {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    let armed = ARMED.get_or_init(|| {
        let spec = std::env::var(FAILPOINT_ENV).ok()?;
        let spec = spec.trim();
        if spec.is_empty() {
            return None;
        }
        Some(match spec.rsplit_once(':') {
            Some((n, count)) if count.parse::<u64>().is_ok() => {
                (n.to_owned(), count.parse::<u64>().unwrap_or(1).max(1))
            }
            _ => (spec.to_owned(), 1),
        })
    });
    if let Some((armed_name, at)) = armed
        && armed_name == name
        && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *at
    {
        eprintln!("failpoint {name} reached: aborting");
        std::process::abort();
    }
}
