-- Each provider's data key (SPEC §11), wrapped by the master key, outside the chain: the key
-- that opens the provider's sealed personal values (`privacy::vault`). Erasing a provider
-- sets `erased_at_ms` (reads show `erased` from then on) and the time its key is destroyed;
-- destroying it empties `wrapped` for good and keeps the row as the record of when.
CREATE TABLE provider_keys (
    owner TEXT PRIMARY KEY,
    master_key_id TEXT NOT NULL,
    wrapped TEXT,
    created_at_ms BIGINT NOT NULL,
    erased_at_ms BIGINT,
    destroy_after_ms BIGINT,
    destroyed_at_ms BIGINT
);
CREATE INDEX provider_keys_destroy ON provider_keys (destroy_after_ms) WHERE wrapped IS NOT NULL;
