//! Failed authentications per client address, counted per server ([`AuthFailures`], one
//! table for the API and its `/metrics` guard): after `auth_failures_max` failures within
//! `auth_failure_window_ms`, a request of that address that does not carry a valid token gets
//! 429 until the window ends. A valid token is never refused, so one client (or everyone
//! behind one proxy) failing cannot lock out another. The table is bounded
//! (`CLIENTS_TRACKED_MAX`): when full, expired entries are dropped, then the oldest.
//!
//! The client address is the peer's, unless the peer is one of `http.trusted_proxies`: then
//! it is the rightmost `X-Forwarded-For` address that is not itself a trusted proxy
//! ([`client_addr`]). A header from any other peer is ignored, so it cannot choose its key.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::{Extensions, HeaderMap};

use crate::config::{HttpConfig, IpNet};

/// Client addresses tracked at once.
pub const CLIENTS_TRACKED_MAX: usize = 100_000;

/// `X-Forwarded-For` hops looked at, from the right.
pub const FORWARDED_HOPS_MAX: usize = 16;

struct Window {
    started: Instant,
    failures: u32,
}

/// The failed authentications of one server's clients, by address.
#[derive(Default)]
pub struct AuthFailures {
    table: Mutex<HashMap<IpAddr, Window>>,
}

fn window(config: &HttpConfig) -> Duration {
    Duration::from_millis(config.auth_failure_window_ms.max(1))
}

/// The client address of a request: see the module documentation. `None` when the
/// connection's address is unknown (a router served without [`ConnectInfo`]).
pub(crate) fn client_of(
    extensions: &Extensions,
    headers: &HeaderMap,
    config: &HttpConfig,
) -> Option<IpAddr> {
    let peer = extensions.get::<ConnectInfo<SocketAddr>>()?.0.ip();
    Some(client_addr(peer, headers, &config.trusted_proxies))
}

/// The peer, or behind trusted proxies the first forwarded address, from the right, that is
/// not a trusted proxy (the one the nearest untrusted party connected from). An entry that
/// does not parse ends the walk at the last trusted hop.
pub(crate) fn client_addr(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|net| net.contains(ip));
    let mut client = peer.to_canonical();
    if !is_trusted(client) {
        return client;
    }
    // Several header lines are one list, in order (RFC 9110 §5.3).
    let lines: Vec<&axum::http::HeaderValue> = headers.get_all("x-forwarded-for").iter().collect();
    let mut hops = 0;
    for line in lines.iter().rev() {
        let Ok(text) = line.to_str() else {
            return client;
        };
        for entry in text.rsplit(',') {
            hops += 1;
            let Some(ip) = parse_forwarded(entry) else {
                return client;
            };
            client = ip;
            if !is_trusted(ip) || hops >= FORWARDED_HOPS_MAX {
                return client;
            }
        }
    }
    client
}

/// One `X-Forwarded-For` entry: `192.0.2.7`, `2001:db8::1`, `[2001:db8::1]`, or with a port.
fn parse_forwarded(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    let ip = entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            entry
                .strip_prefix('[')
                .and_then(|e| e.strip_suffix(']'))
                .and_then(|e| e.parse::<IpAddr>().ok())
        })?;
    Some(ip.to_canonical())
}

impl AuthFailures {
    /// Seconds until `ip` may fail to authenticate again, when it is blocked.
    pub fn blocked(&self, ip: IpAddr, config: &HttpConfig) -> Option<u64> {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let w = table.get(&ip)?;
        let elapsed = w.started.elapsed();
        if w.failures >= config.auth_failures_max && elapsed < window(config) {
            Some((window(config) - elapsed).as_secs().max(1))
        } else {
            None
        }
    }

    /// Counts a failed authentication of `ip`.
    pub fn failed(&self, ip: IpAddr, config: &HttpConfig) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append("x-forwarded-for", l.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarded_addresses_are_believed_only_from_trusted_proxies() {
        let trusted = vec![
            IpNet::parse("10.0.0.0/8").unwrap(),
            IpNet::parse("192.0.2.1").unwrap(),
        ];
        let xff = headers(&["198.51.100.7"]);
        // An untrusted peer: its header is ignored.
        assert_eq!(
            client_addr(ip("203.0.113.5"), &xff, &trusted),
            ip("203.0.113.5")
        );
        assert_eq!(client_addr(ip("203.0.113.5"), &xff, &[]), ip("203.0.113.5"));
        // A trusted peer: the forwarded client.
        assert_eq!(
            client_addr(ip("10.1.2.3"), &xff, &trusted),
            ip("198.51.100.7")
        );
        assert_eq!(
            client_addr(ip("::ffff:10.1.2.3"), &xff, &trusted),
            ip("198.51.100.7"),
            "an IPv4-mapped peer"
        );
        // Two trusted hops, and a value the client made up on the left: the rightmost
        // untrusted entry is the client.
        let chain = headers(&["1.2.3.4, 198.51.100.7", "192.0.2.1"]);
        assert_eq!(
            client_addr(ip("10.0.0.9"), &chain, &trusted),
            ip("198.51.100.7")
        );
        // Ports and brackets.
        let ported = headers(&["[2001:db8::7]:443"]);
        assert_eq!(
            client_addr(ip("10.0.0.9"), &ported, &trusted),
            ip("2001:db8::7")
        );
        let ported = headers(&["198.51.100.8:5000"]);
        assert_eq!(
            client_addr(ip("10.0.0.9"), &ported, &trusted),
            ip("198.51.100.8")
        );
        // Garbage ends the walk at the last trusted hop; no header: the proxy itself.
        let junk = headers(&["198.51.100.7, not-an-ip"]);
        assert_eq!(client_addr(ip("10.0.0.9"), &junk, &trusted), ip("10.0.0.9"));
        assert_eq!(
            client_addr(ip("10.0.0.9"), &HeaderMap::new(), &trusted),
            ip("10.0.0.9")
        );
        // Only trusted hops: the leftmost.
        let all = headers(&["10.0.0.1, 10.0.0.2"]);
        assert_eq!(client_addr(ip("10.0.0.9"), &all, &trusted), ip("10.0.0.1"));
    }
}
