-- The floor of the engine's events write on PostgreSQL, without any engine code:
-- 1,000 rows shaped like `usage.recorded` events (payload ~400 B, lines ~260 B, two
-- SHA-256 hashes, the three indexes of the events table), generated inside the server
-- into a table that already holds 200,000 of them, beside 1,000 bare (event_id, amount)
-- rows as in the raw phase of ops/bench/ingest.rs.
--   psql -h 127.0.0.1 -U postgres -d test -f ops/bench/ingest-floor.sql | grep -E '^Time'
-- Compare the INSERT times: rows into `floor_events` vs rows into `floor_raw`.
DROP TABLE IF EXISTS floor_events;
DROP TABLE IF EXISTS floor_raw;
CREATE TABLE floor_events (stream TEXT NOT NULL, seq BIGINT NOT NULL, event_type TEXT NOT NULL, version BIGINT NOT NULL, idem_key TEXT, content_hash BYTEA, actor TEXT NOT NULL, recorded_at_ms BIGINT NOT NULL, payload TEXT NOT NULL, lines TEXT NOT NULL, prev_hash BYTEA NOT NULL, hash BYTEA NOT NULL, PRIMARY KEY (stream, seq));
CREATE UNIQUE INDEX floor_events_idem_key ON floor_events (idem_key);
CREATE TABLE floor_raw (event_id TEXT PRIMARY KEY, net_micro_usdc BIGINT NOT NULL);
INSERT INTO floor_events SELECT 'provider:p' || (g % 1000), g / 1000, 'usage.recorded', 1, 'usage:e-' || md5(g::text), decode(md5(g::text), 'hex'), 'token:x', g, repeat(md5(g::text), 12), repeat(md5((g + 1)::text), 8), sha256(g::text::bytea), sha256((g + 7)::text::bytea) FROM generate_series(1, 200000) AS g;
INSERT INTO floor_raw SELECT 'usage:e-' || md5(g::text), g FROM generate_series(1, 200000) AS g;
VACUUM ANALYZE floor_events;
VACUUM ANALYZE floor_raw;
CHECKPOINT;
\timing on
BEGIN;
INSERT INTO floor_events SELECT 'provider:p' || (g % 1000), 1000 + g / 1000, 'usage.recorded', 1, 'usage:e-' || md5(g::text || 'a'), decode(md5(g::text), 'hex'), 'token:x', 300000, repeat(md5(g::text), 12), repeat(md5((g + 1)::text), 8), sha256(g::text::bytea), sha256((g + 7)::text::bytea) FROM generate_series(1, 1000) AS g;
COMMIT;
BEGIN;
INSERT INTO floor_raw SELECT 'usage:e-' || md5(g::text || 'a'), g FROM generate_series(1, 1000) AS g ON CONFLICT DO NOTHING;
COMMIT;
BEGIN;
INSERT INTO floor_events SELECT 'provider:p' || (g % 1000), 2000 + g / 1000, 'usage.recorded', 1, 'usage:e-' || md5(g::text || 'b'), decode(md5(g::text), 'hex'), 'token:x', 300001, repeat(md5(g::text), 12), repeat(md5((g + 1)::text), 8), sha256(g::text::bytea), sha256((g + 7)::text::bytea) FROM generate_series(1, 1000) AS g;
COMMIT;
BEGIN;
INSERT INTO floor_raw SELECT 'usage:e-' || md5(g::text || 'b'), g FROM generate_series(1, 1000) AS g ON CONFLICT DO NOTHING;
COMMIT;
BEGIN;
INSERT INTO floor_events SELECT 'provider:p' || (g % 1000), 3000 + g / 1000, 'usage.recorded', 1, 'usage:e-' || md5(g::text || 'c'), decode(md5(g::text), 'hex'), 'token:x', 300002, repeat(md5(g::text), 12), repeat(md5((g + 1)::text), 8), sha256(g::text::bytea), sha256((g + 7)::text::bytea) FROM generate_series(1, 1000) AS g;
COMMIT;
BEGIN;
INSERT INTO floor_raw SELECT 'usage:e-' || md5(g::text || 'c'), g FROM generate_series(1, 1000) AS g ON CONFLICT DO NOTHING;
COMMIT;
DROP TABLE floor_events;
DROP TABLE floor_raw;
