//! Background jobs: the cron scheduler of payout runs and the catch-up of missed runs.

pub mod scheduler;
