//! Failed authentications per client address: after `auth_failures_max` failures within
//! `auth_failure_window_ms`, the address gets 429 until the window ends. The table is
//! bounded (`CLIENTS_TRACKED_MAX`): when full, expired entries are dropped, then the oldest.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::config::HttpConfig;

/// Client addresses tracked at once.
pub const CLIENTS_TRACKED_MAX: usize = 100_000;

struct Window {
    started: Instant,
    failures: u32,
}

fn table() -> &'static Mutex<HashMap<IpAddr, Window>> {
    static TABLE: OnceLock<Mutex<HashMap<IpAddr, Window>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn window(config: &HttpConfig) -> Duration {
    Duration::from_millis(config.auth_failure_window_ms.max(1))
}

/// Seconds until `ip` may authenticate again, when it is blocked.
pub fn blocked(ip: IpAddr, config: &HttpConfig) -> Option<u64> {
    let table = table().lock().unwrap_or_else(|e| e.into_inner());
    let w = table.get(&ip)?;
    let elapsed = w.started.elapsed();
    if w.failures >= config.auth_failures_max && elapsed < window(config) {
        Some((window(config) - elapsed).as_secs().max(1))
    } else {
        None
    }
}

/// Counts a failed authentication of `ip`.
pub fn failed(ip: IpAddr, config: &HttpConfig) {
    let mut table = table().lock().unwrap_or_else(|e| e.into_inner());
    let span = window(config);
    if table.len() >= CLIENTS_TRACKED_MAX && !table.contains_key(&ip) {
        table.retain(|_, w| w.started.elapsed() < span);
        if table.len() >= CLIENTS_TRACKED_MAX
            && let Some(oldest) = table.iter().min_by_key(|(_, w)| w.started).map(|(k, _)| *k)
        {
            table.remove(&oldest);
        }
    }
    let w = table.entry(ip).or_insert(Window {
        started: Instant::now(),
        failures: 0,
    });
    if w.started.elapsed() >= span {
        *w = Window {
            started: Instant::now(),
            failures: 0,
        };
    }
    w.failures = w.failures.saturating_add(1);
    crate::metrics::global().count(
        "settle_auth_failures_total",
        "Failed authentications.",
        &[],
        1,
    );
}
