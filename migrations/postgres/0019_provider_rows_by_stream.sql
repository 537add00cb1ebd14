-- Every row one provider's events write carries that provider's stream (`provider:{id}`)
-- as the last column of its primary key: the column a distributed database (Citus) shards
-- these tables by, so that a provider's rows lie on the shard of its events (`store::citus`).
-- Each step can run again (an upgrade that re-runs earlier migrations).
DO $$
DECLARE
    t TEXT;
    key TEXT;
    pk TEXT;
BEGIN
    FOR t, key IN VALUES
        ('earnings_daily', 'provider_id, gpu_id, day'),
        ('usage_segments', 'gpu_id, started_at_ms'),
        ('payable_recorded', 'provider_id, day'),
        ('providers', 'provider_id'),
        ('provider_tiers', 'provider_id, from_ms, seq'),
        ('gpus', 'gpu_id'),
        ('rates', 'provider_id, model, effective_from_ms'),
        ('payouts', 'payout_id'),
        ('run_decisions', 'run_kind, run_key, provider_id')
    LOOP
        EXECUTE format('ALTER TABLE %I ADD COLUMN IF NOT EXISTS stream TEXT COLLATE "C"', t);
        EXECUTE format('UPDATE %I SET stream = ''provider:'' || provider_id WHERE stream IS NULL', t);
        EXECUTE format('ALTER TABLE %I ALTER COLUMN stream SET NOT NULL', t);
        EXECUTE format('ALTER TABLE %I ALTER COLUMN stream TYPE TEXT COLLATE "C"', t);
        SELECT conname INTO pk FROM pg_constraint WHERE conrelid = t::regclass AND contype = 'p';
        IF pk IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', t, pk);
        END IF;
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (%s, stream)', t, t || '_pkey', key);
    END LOOP;
END $$;
-- A payout and a GPU stay unique by their id alone on one database (a distributed one drops
-- these: there the stream, a function of the provider, is part of every unique key).
CREATE UNIQUE INDEX IF NOT EXISTS payouts_id_unique ON payouts (payout_id);
CREATE UNIQUE INDEX IF NOT EXISTS gpus_id_unique ON gpus (gpu_id);
-- The writers' lock of a stream on a distributed database, taken on the stream's shard
-- (`store::citus`): a transaction over streams on several nodes commits on them after the
-- coordinator (two-phase commit), so the coordinator's lock alone would let the next writer
-- read a head not yet committed there. Unused on one database.
CREATE TABLE IF NOT EXISTS stream_locks (stream TEXT COLLATE "C" PRIMARY KEY);
-- Byte order for the key column, also where the table was made before.
ALTER TABLE stream_locks ALTER COLUMN stream TYPE TEXT COLLATE "C";
