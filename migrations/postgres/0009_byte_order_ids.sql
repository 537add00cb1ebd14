-- Identifiers compare as bytes (issue 13, the write path).
--
-- Every key of the ledger and its projections is an identifier (a stream name, an
-- idempotency key, a provider, GPU or payout id, a status). With the database's default
-- collation (a libc locale such as en_US.UTF-8 or C.UTF-8), every comparison inside their
-- B-tree indexes, for each row booked or folded and each key looked up, goes through the
-- locale's strcoll; with "C" it is a memcmp. Byte order is also the order SQLite (BINARY) and
-- the program (Rust's `str` ordering) use, so both databases list rows in one order.
-- Changing a column's collation rebuilds the indexes that hold it (the rows are not
-- rewritten), under each table's exclusive lock: on a large ledger `settle migrate` takes
-- about as long as building the events' two indexes, while the service is stopped
-- (`ops/deploy/settle.service` migrates before it starts).

ALTER TABLE events ALTER COLUMN stream TYPE TEXT COLLATE "C", ALTER COLUMN idem_key TYPE TEXT COLLATE "C";
ALTER TABLE projection_checkpoints ALTER COLUMN stream TYPE TEXT COLLATE "C";
ALTER TABLE account_balances ALTER COLUMN owner TYPE TEXT COLLATE "C", ALTER COLUMN account TYPE TEXT COLLATE "C";
ALTER TABLE earnings_daily ALTER COLUMN provider_id TYPE TEXT COLLATE "C", ALTER COLUMN gpu_id TYPE TEXT COLLATE "C";
ALTER TABLE usage_segments ALTER COLUMN gpu_id TYPE TEXT COLLATE "C", ALTER COLUMN provider_id TYPE TEXT COLLATE "C";
ALTER TABLE payable_recorded ALTER COLUMN provider_id TYPE TEXT COLLATE "C";
ALTER TABLE providers ALTER COLUMN provider_id TYPE TEXT COLLATE "C";
ALTER TABLE provider_tiers ALTER COLUMN provider_id TYPE TEXT COLLATE "C";
ALTER TABLE gpus ALTER COLUMN gpu_id TYPE TEXT COLLATE "C", ALTER COLUMN provider_id TYPE TEXT COLLATE "C";
ALTER TABLE rates ALTER COLUMN provider_id TYPE TEXT COLLATE "C", ALTER COLUMN model TYPE TEXT COLLATE "C";
ALTER TABLE fee_schedules ALTER COLUMN tier TYPE TEXT COLLATE "C";
ALTER TABLE payouts ALTER COLUMN payout_id TYPE TEXT COLLATE "C", ALTER COLUMN provider_id TYPE TEXT COLLATE "C", ALTER COLUMN status TYPE TEXT COLLATE "C", ALTER COLUMN rail TYPE TEXT COLLATE "C";
ALTER TABLE run_decisions ALTER COLUMN run_kind TYPE TEXT COLLATE "C", ALTER COLUMN run_key TYPE TEXT COLLATE "C", ALTER COLUMN provider_id TYPE TEXT COLLATE "C";
ALTER TABLE payout_runs ALTER COLUMN run_kind TYPE TEXT COLLATE "C", ALTER COLUMN run_key TYPE TEXT COLLATE "C";
ALTER TABLE bank_batches ALTER COLUMN batch_id TYPE TEXT COLLATE "C";
ALTER TABLE bank_batch_payouts ALTER COLUMN payout_id TYPE TEXT COLLATE "C", ALTER COLUMN batch_id TYPE TEXT COLLATE "C";
ALTER TABLE solana_attempts ALTER COLUMN attempt_id TYPE TEXT COLLATE "C";
ALTER TABLE solana_attempt_payouts ALTER COLUMN payout_id TYPE TEXT COLLATE "C", ALTER COLUMN attempt_id TYPE TEXT COLLATE "C";
ALTER TABLE api_tokens ALTER COLUMN token_id TYPE TEXT COLLATE "C", ALTER COLUMN name TYPE TEXT COLLATE "C";
ALTER TABLE api_token_revocations ALTER COLUMN token_id TYPE TEXT COLLATE "C";
ALTER TABLE ledger_settings ALTER COLUMN name TYPE TEXT COLLATE "C";
ALTER TABLE approvals ALTER COLUMN approval_id TYPE TEXT COLLATE "C", ALTER COLUMN status TYPE TEXT COLLATE "C";

-- The projector updates the rows of the additive aggregates and the checkpoints in place,
-- pass after pass. Room left free in each page lets PostgreSQL write the new version of a row
-- beside the old one without a new entry in every index (a heap-only tuple); it applies to
-- the pages written from now on.
ALTER TABLE account_balances SET (fillfactor = 70);
ALTER TABLE earnings_daily SET (fillfactor = 70);
ALTER TABLE payable_recorded SET (fillfactor = 70);
ALTER TABLE projection_checkpoints SET (fillfactor = 70);
