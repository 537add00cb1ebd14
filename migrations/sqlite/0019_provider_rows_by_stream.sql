-- Every row one provider's events write carries that provider's stream (`provider:{id}`), the
-- column a distributed PostgreSQL shards these tables by. SQLite keeps the tables' primary
-- keys: the stream is a function of their other key columns.
ALTER TABLE earnings_daily ADD COLUMN stream TEXT NOT NULL DEFAULT '';
UPDATE earnings_daily SET stream = 'provider:' || provider_id;
ALTER TABLE usage_segments ADD COLUMN stream TEXT NOT NULL DEFAULT '';
UPDATE usage_segments SET stream = 'provider:' || provider_id;
ALTER TABLE payable_recorded ADD COLUMN stream TEXT NOT NULL DEFAULT '';
UPDATE payable_recorded SET stream = 'provider:' || provider_id;
ALTER TABLE providers ADD COLUMN stream TEXT NOT NULL DEFAULT '';
UPDATE providers SET stream = 'provider:' || provider_id;
ALTER TABLE provider_tiers ADD COLUMN stream TEXT NOT NULL DEFAULT '';
UPDATE provider_tiers SET stream = 'provider:' || provider_id;
ALTER TABLE gpus ADD COLUMN stream TEXT NOT NULL DEFAULT '';
UPDATE gpus SET stream = 'provider:' || provider_id;
ALTER TABLE rates ADD COLUMN stream TEXT NOT NULL DEFAULT '';
UPDATE rates SET stream = 'provider:' || provider_id;
ALTER TABLE payouts ADD COLUMN stream TEXT NOT NULL DEFAULT '';
UPDATE payouts SET stream = 'provider:' || provider_id;
ALTER TABLE run_decisions ADD COLUMN stream TEXT NOT NULL DEFAULT '';
UPDATE run_decisions SET stream = 'provider:' || provider_id;
-- The writers' lock of a stream on a distributed PostgreSQL; unused on SQLite (one writer).
CREATE TABLE IF NOT EXISTS stream_locks (stream TEXT PRIMARY KEY);
