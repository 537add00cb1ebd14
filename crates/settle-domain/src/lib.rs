//! The pure core of settle: money, identifiers, time, pricing, events, postings, the
//! aggregates with their pure decisions, the payout state machine and the fold of events
//! into projections. No I/O, no clock, no database, no async.
//!
//! The application re-exports this crate as `settle::domain` (`src/lib.rs`), so its modules
//! name these items by the paths they had when this was its `src/domain/` module.
//!
//! Invariant: nothing in here imports sqlx, tokio, axum, the Solana crates or the
//! application. The crate's `Cargo.toml` depends on none of them, so a use of the store or
//! the ledger from here does not compile.

pub mod bands;
pub mod batch;
pub mod decision;
pub mod event;
pub mod gated;
pub mod ids;
pub mod money;
pub mod operator;
pub mod payout;
pub mod platform;
pub mod policy;
pub mod pricing;
pub mod projection;
pub mod provider;
pub mod time;
pub mod usage;
pub mod wallet;

use std::fmt;

/// A rejection by the domain, with a stable machine-readable code (`unknown_gpu`,
/// `interval_too_long`, …) and a human message. The code is part of the API contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainError {
    pub code: &'static str,
    pub message: String,
}

impl DomainError {
    pub fn new(code: &'static str, message: impl Into<String>) -> DomainError {
        DomainError {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for DomainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for DomainError {}
