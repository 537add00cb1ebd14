//! Payout rails: where money leaves the platform, driven by the outbox of created payouts.
//!
//! Invariant: money leaves only through here, never inside an HTTP request.

pub mod bank;
pub mod solana;
