-- Rule fixes (issue 20).
--
-- 1. Idempotency keys are unique per stream, not globally: SPEC §4 scopes a usage
--    event_id to its provider (the same id under two providers is two events), and the
--    key lives on the provider's shard. The key comes first in the index, so a look-up
--    by key alone (a void names only the event_id) still uses it.
DROP INDEX events_idem_key;
CREATE UNIQUE INDEX events_idem_key ON events (idem_key, stream);

-- 2. The whole tier history, even within one millisecond: a tier change booked in the
--    same millisecond as the registration no longer replaces the registration's entry.
--    `seq` is the event's position in the provider's stream; existing rows take the seq
--    of the latest tier-setting event booked at that instant (the one whose tier they
--    hold). Entries already lost by the old key are restored by `settle rebuild`, and
--    `settle verify` reports them until then.
CREATE TABLE provider_tiers_v3 (provider_id TEXT NOT NULL, from_ms BIGINT NOT NULL, seq BIGINT NOT NULL, tier TEXT NOT NULL, PRIMARY KEY (provider_id, from_ms, seq));
INSERT INTO provider_tiers_v3 (provider_id, from_ms, seq, tier)
SELECT t.provider_id, t.from_ms,
       COALESCE((SELECT MAX(e.seq) FROM events AS e
                 WHERE e.stream = 'provider:' || t.provider_id
                   AND e.recorded_at_ms = t.from_ms
                   AND (e.event_type = 'provider.registered'
                        OR (e.event_type = 'provider.updated' AND e.payload LIKE '%"tier":%'))), 0),
       t.tier
FROM provider_tiers AS t;
DROP TABLE provider_tiers;
ALTER TABLE provider_tiers_v3 RENAME TO provider_tiers;
