//! The integration tests, one binary (one link of the program): a module per capability,
//! the shared harnesses beside them (`common`: a database per test; `*_support`: worlds of
//! runs, rails and the HTTP API). `cargo test --test it <module>::` runs one capability.

mod bank_support;
mod common;
mod http_support;
mod runs_support;
mod solana_support;

mod architecture;
mod auth_http;
mod auth_limit;
mod bands;
mod bank;
mod bank_answers;
mod bank_http;
mod bank_inbox;
mod control;
mod control_gates;
mod core_dump;
mod crash_runs;
mod crash_solana;
mod dashboard_browser;
mod dashboard_page;
mod dashboard_stream;
mod demo;
mod faults;
mod first_minutes;
mod fuzz_parsers;
mod http_earnings;
mod http_server;
mod http_usage;
mod ingest;
mod ledger;
mod payouts;
mod pg_restart;
mod pricing;
mod privacy;
mod projector;
mod reliability;
mod roles;
mod route_tokens;
mod rule_defects;
mod runs;
mod scheduler;
mod security;
mod serve;
mod simulation;
mod solana_cli;
mod solana_rail;
mod solana_trust;
mod sqlite_wal;
mod statements;
mod tamper;
mod usage_groups;
mod usage_keys;
mod usage_views;
