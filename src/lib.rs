//! settle: the settlement and payout engine of a GPU compute marketplace.
//!
//! See `ARCHITECTURE.md` for the code map and the invariants.

// No function over 80 lines of code (clippy.toml) without a reason in an `#[expect]`.
#![warn(clippy::too_many_lines)]

/// Every binary that links settle (the `settle` command, its tests and benchmarks) allocates
/// with mimalloc: faster booking under the allocator's contention, see `Cargo.toml` and
/// ops/bench/ingest.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod anchor;
pub mod auth;
pub mod cli;
pub mod config;
pub mod control;
#[cfg(feature = "local-chain")]
pub mod demo;
pub use settle_domain as domain;
pub mod failpoint;
pub mod http;
pub mod jobs;
pub mod ledger;
pub mod metrics;
pub mod operator_key;
pub mod privacy;
pub mod rails;
pub mod report;
pub mod statement;
pub mod store;
pub mod verify;
pub mod wire;
