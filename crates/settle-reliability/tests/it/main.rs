//! The integration tests of settle-reliability, one binary with a module per capability.
//! Every expected value is worked out by hand in the test, with the arithmetic in comments.

mod benchmark;
mod errors;
mod jobs;
mod listing;
mod prior;
mod provider;
mod scale;
mod schedule;
mod support;
mod trend;
mod uptime;
