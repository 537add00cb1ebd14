#!/usr/bin/env python3
"""The floor of the event row layouts under issue 13, without any engine code.

Each layout gets the same batches of 900 usage-shaped events over 900 provider streams
(rows generated once into a staging table, so generation is not timed), 111 batches loaded
first (about 100,000 events), then 30 batches timed one after the other, every layout in
turn, each batch its own transaction (`INSERT … ; COMMIT`):

- raw:    `(event_id TEXT PRIMARY KEY, net)`, as the raw phase of `ops/bench/ingest.rs`
- events: today's `events` table (`PRIMARY KEY (stream, seq)`, the idempotency-key index)
- events_without_rowid (SQLite): the same, `WITHOUT ROWID`
- keys + blocks: one row per partition of providers per batch (16 partitions) holding its
  events, and the idempotency keys alone in a table keyed by `(stream, key)`

    python3 ops/bench/ingest-layouts.py sqlite /tmp/layouts.db     # sqlite3 CLI, WAL, synchronous=FULL
    python3 ops/bench/ingest-layouts.py postgres "-h 127.0.0.1 -U postgres -d test"   # psql

Prints the median and mean milliseconds per batch of each layout.
"""

import re
import statistics
import subprocess
import sys
from collections import defaultdict

LOADED, TIMED, PARTITIONS = 111, 30, 16


def sqlite_rows(b):
    return f"""WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < 899)
SELECT 'provider:bp' || printf('%04d', (n*37 + {b}*131) % 1000), {b} + 1,
 'usage:agt-' || printf('%04d', (n*37 + {b}*131) % 1000) || '-' || (n % 8) || ':' || printf('%06d', {b}),
 hex(randomblob(200)), hex(randomblob(130)), randomblob(32), randomblob(32), randomblob(32) FROM g"""


def pg_rows(b):
    return f"""SELECT 'provider:bp' || lpad(((n*37 + {b}*131) % 1000)::text, 4, '0'), {b} + 1,
 'usage:agt-' || lpad(((n*37 + {b}*131) % 1000)::text, 4, '0') || '-' || (n % 8) || ':' || lpad({b}::text, 6, '0'),
 repeat(md5(n::text || {b}), 12), repeat(md5((n+1)::text || {b}), 8), sha256((n || 'a' || {b})::bytea),
 sha256((n || 'b' || {b})::bytea), sha256((n || 'c' || {b})::bytea) FROM generate_series(0, 899) AS n"""


EVENT_COLUMNS = (
    "stream TEXT NOT NULL, seq BIGINT NOT NULL, event_type TEXT NOT NULL, version BIGINT NOT NULL, "
    "idem_key TEXT, content_hash {blob}, actor TEXT NOT NULL, recorded_at_ms BIGINT NOT NULL, "
    "payload TEXT NOT NULL, lines TEXT NOT NULL, prev_hash {blob} NOT NULL, hash {blob} NOT NULL, "
    "PRIMARY KEY (stream, seq)"
)


def script(db):
    sqlite = db == "sqlite"
    blob = "BLOB" if sqlite else "BYTEA"
    out = []
    w = out.append
    if sqlite:
        w("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
    else:
        w("DROP TABLE IF EXISTS lay_raw, lay_events, lay_keys, lay_blocks, lay_gen;")
    w("CREATE TABLE lay_raw (event_id TEXT PRIMARY KEY, net BIGINT NOT NULL);")
    w(f"CREATE TABLE lay_events ({EVENT_COLUMNS.format(blob=blob)});")
    w("CREATE UNIQUE INDEX lay_events_idem ON lay_events (idem_key, stream);")
    layouts = ["raw", "events"]
    if sqlite:
        w(f"CREATE TABLE lay_events_wr ({EVENT_COLUMNS.format(blob=blob)}) WITHOUT ROWID;")
        w("CREATE UNIQUE INDEX lay_events_wr_idem ON lay_events_wr (idem_key, stream);")
        layouts.append("events_without_rowid")
    w(
        "CREATE TABLE lay_keys (stream TEXT NOT NULL, k TEXT NOT NULL, PRIMARY KEY (stream, k))"
        + (" WITHOUT ROWID;" if sqlite else ";")
    )
    w(
        f"CREATE TABLE lay_blocks (part INTEGER NOT NULL, bseq BIGINT NOT NULL, body {blob} NOT NULL, "
        f"prev_hash {blob} NOT NULL, hash {blob} NOT NULL, PRIMARY KEY (part, bseq));"
    )
    layouts.append("keys_and_blocks")
    w(
        ("CREATE TABLE" if sqlite else "CREATE UNLOGGED TABLE")
        + f" lay_gen (b INTEGER, stream TEXT, seq BIGINT, k TEXT, payload TEXT, lines TEXT, h1 {blob}, h2 {blob}, h3 {blob});"
    )
    rows = sqlite_rows if sqlite else pg_rows
    for b in range(LOADED + TIMED):
        w(f"INSERT INTO lay_gen SELECT {b}, * FROM ({rows(b)}) AS r;")
    w("CREATE INDEX lay_gen_b ON lay_gen (b);")

    def src(b):
        return f"(SELECT * FROM lay_gen WHERE b = {b}) AS g"

    body = (
        "group_concat(payload || lines || hex(h2), '')"
        if sqlite
        else "string_agg(convert_to(payload || lines, 'UTF8') || h2, ''::bytea)"
    )
    part = (
        f"(abs(substr(stream, 12)) % {PARTITIONS})"
        if sqlite
        else f"(substr(stream, 12)::int % {PARTITIONS})"
    )
    digest = "randomblob(32)" if sqlite else "sha256(''::bytea)"

    def write(layout, b):
        if layout == "raw":
            return f"INSERT INTO lay_raw SELECT k, 1 FROM {src(b)} WHERE true ON CONFLICT DO NOTHING;"
        if layout.startswith("events"):
            table = "lay_events_wr" if layout == "events_without_rowid" else "lay_events"
            return (
                f"INSERT INTO {table} SELECT stream, seq, 'usage.recorded', 1, k, h1, 'token:metering', "
                f"1795000000000 + {b}, payload, lines, h2, h3 FROM {src(b)};"
            )
        return (
            f"INSERT INTO lay_keys SELECT stream, k FROM {src(b)}; "
            f"INSERT INTO lay_blocks SELECT {part}, {b}, {body}, {digest}, {digest} FROM {src(b)} GROUP BY 1;"
        )

    for b in range(LOADED):
        for layout in layouts:
            w(f"BEGIN; {write(layout, b)} COMMIT;")
    if sqlite:
        w("PRAGMA wal_checkpoint(TRUNCATE);")
        w(".timer on")
    else:
        w("VACUUM ANALYZE; CHECKPOINT;")
        w("\\timing on")
    for b in range(LOADED, LOADED + TIMED):
        for layout in layouts:
            w(f"SELECT 'layout {layout}';" if sqlite else f"\\echo layout {layout}")
            w("BEGIN;")
            w(write(layout, b))
            w("COMMIT;")
    if not sqlite:
        w("DROP TABLE lay_raw, lay_events, lay_keys, lay_blocks, lay_gen;")
    return "\n".join(out)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("sqlite", "postgres"):
        sys.exit(__doc__)
    db, target = sys.argv[1], sys.argv[2]
    sql = script(db)
    if db == "sqlite":
        cmd = ["sqlite3", target]
    else:
        cmd = ["psql", "-q", *target.split(), "-v", "ON_ERROR_STOP=1"]
    out = subprocess.run(cmd, input=sql, capture_output=True, text=True, check=True).stdout
    times = defaultdict(list)
    layout, ms = None, 0.0
    for line in out.splitlines() + ["layout end"]:
        m = re.match(r"^layout (\w+)$", line.strip())
        if m:
            if layout:
                times[layout].append(ms)
            layout, ms = m.group(1), 0.0
            continue
        m = re.match(r"^Run Time: real ([\d.]+)", line) or re.match(r"^Time: ([\d.]+) ms", line)
        if m and layout:
            ms += float(m.group(1)) * (1000.0 if line.startswith("Run Time") else 1.0)
    raw = statistics.median(times["raw"])
    print(f"{db}: ms per batch of 900 events, {TIMED} batches each, after {LOADED} loaded")
    for name, t in times.items():
        med = statistics.median(t)
        print(f"  {name:22} median {med:7.1f}  mean {statistics.mean(t):7.1f}  raw/layout {raw / med:5.2f}")


if __name__ == "__main__":
    main()
