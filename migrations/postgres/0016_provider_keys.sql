-- Each provider's data key (SPEC §11), wrapped by the master key, outside the chain: the key
-- that opens the provider's sealed personal values (`privacy::vault`). Erasing a provider
-- sets `erased_at_ms` (reads show `erased` from then on) and the time its key is destroyed;
-- destroying it empties `wrapped` for good and keeps the row as the record of when.
CREATE TABLE IF NOT EXISTS provider_keys (
    owner TEXT COLLATE "C" PRIMARY KEY,
    master_key_id TEXT NOT NULL,
    wrapped TEXT,
    created_at_ms BIGINT NOT NULL,
    erased_at_ms BIGINT,
    destroy_after_ms BIGINT,
    destroyed_at_ms BIGINT
);
-- Byte order for the identifier key, also where the table was made before (as 0009).
ALTER TABLE provider_keys ALTER COLUMN owner TYPE TEXT COLLATE "C";
CREATE INDEX IF NOT EXISTS provider_keys_destroy ON provider_keys (destroy_after_ms) WHERE wrapped IS NOT NULL;
