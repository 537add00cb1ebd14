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
- projection: the rows the projector writes for the batch's usage, as the engine's tables
  key them: one `usage_segments` row per event (`(gpu_id, started_at_ms)`), and upserts of
  `earnings_daily` (provider, GPU, day), `payable_recorded` (provider, day), two
  `account_balances` rows per provider and the stream's `projection_checkpoints` row (every
  event of a batch is its own provider's and GPU's here, as in the metering mix, where a GPU
  appears about once in nine batches); fillfactor 70 and byte-order keys as on PostgreSQL.
  The projector aggregates many batches per pass: with `LAYOUT_PASS=N` the segments are
  written batch by batch and the aggregates of N batches once, on every N-th batch (compare
  the means then, a pass's cost falls on one batch in N)

The line `events + projection` adds the two: the floor of a batch booked and folded one after
the other, with no engine code in between.

    python3 ops/bench/ingest-layouts.py sqlite /tmp/layouts.db     # sqlite3 CLI, WAL, synchronous=FULL
    python3 ops/bench/ingest-layouts.py postgres "-h 127.0.0.1 -U postgres -d test"   # psql
    LAYOUT_PASS=10 python3 ops/bench/ingest-layouts.py postgres "-h 127.0.0.1 -U postgres -d test"
    LAYOUT_PASS=10 LAYOUT_PARALLEL=60 python3 ops/bench/ingest-layouts.py postgres "-h 127.0.0.1 -U postgres -d test"

Prints the median and mean milliseconds per batch of each layout, the ratio of the means, and
the CPU time per batch of the process doing the database's work (the PostgreSQL backend, or
the sqlite3 CLI, from /proc) with its ratio.
"""

import os
import re
import statistics
import time
import subprocess
import sys
from collections import defaultdict

LOADED, TIMED, PARTITIONS = 111, 30, 16
# batches per projector pass (`LAYOUT_PASS`, default 1): the aggregates are written once a pass
PASS = int(os.environ.get("LAYOUT_PASS", "1"))
# PostgreSQL: then as many batches booked and folded at once, on two connections (`LAYOUT_PARALLEL`)
PARALLEL = int(os.environ.get("LAYOUT_PARALLEL", "0"))
PROJECTION = ("lay_segments", "lay_earnings", "lay_payable", "lay_balances", "lay_checkpoints")


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
    "stream {key} NOT NULL, seq BIGINT NOT NULL, event_type TEXT NOT NULL, version BIGINT NOT NULL, "
    "idem_key {key}, content_hash {blob}, actor TEXT NOT NULL, recorded_at_ms BIGINT NOT NULL, "
    "payload TEXT NOT NULL, lines TEXT NOT NULL, prev_hash {blob} NOT NULL, hash {blob} NOT NULL, "
    "PRIMARY KEY (stream, seq)"
)


def script(db):
    sqlite = db == "sqlite"
    blob = "BLOB" if sqlite else "BYTEA"
    key = "TEXT" if sqlite else 'TEXT COLLATE "C"'
    out = []
    w = out.append
    if sqlite:
        w("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
    else:
        w("DROP TABLE IF EXISTS lay_raw, lay_events, lay_keys, lay_blocks, lay_gen, " + ", ".join(PROJECTION) + ";")
    w("CREATE TABLE lay_raw (event_id TEXT PRIMARY KEY, net BIGINT NOT NULL);")
    w(f"CREATE TABLE lay_events ({EVENT_COLUMNS.format(blob=blob, key=key)});")
    w("CREATE UNIQUE INDEX lay_events_idem ON lay_events (idem_key, stream);")
    layouts = ["raw", "events"]
    if sqlite:
        w(f"CREATE TABLE lay_events_wr ({EVENT_COLUMNS.format(blob=blob, key=key)}) WITHOUT ROWID;")
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
    ff = "" if sqlite else " WITH (fillfactor = 70)"
    w(
        f"CREATE TABLE lay_segments (gpu_id {key} NOT NULL, started_at_ms BIGINT NOT NULL, ended_at_ms BIGINT NOT NULL, "
        f"event_id TEXT NOT NULL, provider_id {key} NOT NULL, model TEXT NOT NULL, gross_micro_usdc BIGINT NOT NULL, "
        "fee_micro_usdc BIGINT NOT NULL, net_micro_usdc BIGINT NOT NULL, PRIMARY KEY (gpu_id, started_at_ms));"
    )
    w(
        f"CREATE TABLE lay_earnings (provider_id {key} NOT NULL, gpu_id {key} NOT NULL, day BIGINT NOT NULL, model TEXT NOT NULL, "
        "gross_micro_usdc BIGINT NOT NULL, fee_micro_usdc BIGINT NOT NULL, net_micro_usdc BIGINT NOT NULL, "
        f"duration_ms BIGINT NOT NULL, PRIMARY KEY (provider_id, gpu_id, day)){ff};"
    )
    w(
        f"CREATE TABLE lay_payable (provider_id {key} NOT NULL, day BIGINT NOT NULL, amount_micro_usdc BIGINT NOT NULL, "
        f"PRIMARY KEY (provider_id, day)){ff};"
    )
    w(
        f"CREATE TABLE lay_balances (owner {key} NOT NULL, account {key} NOT NULL, balance_micro_usdc BIGINT NOT NULL, "
        f"PRIMARY KEY (owner, account)){ff};"
    )
    w(f"CREATE TABLE lay_checkpoints (stream {key} PRIMARY KEY, seq BIGINT NOT NULL){ff};")
    layouts.append("projection")
    w(
        ("CREATE TABLE" if sqlite else "CREATE UNLOGGED TABLE")
        + f" lay_gen (b INTEGER, stream TEXT, seq BIGINT, k TEXT, payload TEXT, lines TEXT, h1 {blob}, h2 {blob}, h3 {blob});"
    )
    rows = sqlite_rows if sqlite else pg_rows
    for b in range(LOADED + TIMED + PARALLEL):
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

    gpu = "substr(k, 11, 6)"
    day = 20775

    def project(b):
        """A batch's segments; every `PASS`-th batch, the aggregates of the pass's batches."""
        started = "(1795000000000 + b * 600000)"
        out = (
            f"INSERT INTO lay_segments SELECT {gpu}, {started}, {started} + 600000, k, stream, 'H100-80GB', "
            f"415000, 62250, 352750 FROM {src(b)};"
        )
        if (b + 1) % PASS:
            return out
        rows = f"(SELECT * FROM lay_gen WHERE b BETWEEN {b + 1 - PASS} AND {b}) AS g"
        return out + (
            f" INSERT INTO lay_earnings SELECT stream, {gpu}, {day}, 'H100-80GB', count(*) * 415000, "
            f"count(*) * 62250, count(*) * 352750, count(*) * 600000 FROM {rows} GROUP BY 1, 2 "
            "ON CONFLICT (provider_id, gpu_id, day) DO UPDATE SET "
            "gross_micro_usdc = lay_earnings.gross_micro_usdc + excluded.gross_micro_usdc, "
            "fee_micro_usdc = lay_earnings.fee_micro_usdc + excluded.fee_micro_usdc, "
            "net_micro_usdc = lay_earnings.net_micro_usdc + excluded.net_micro_usdc, "
            "duration_ms = lay_earnings.duration_ms + excluded.duration_ms;"
            f" INSERT INTO lay_payable SELECT stream, {day}, count(*) * 352750 FROM {rows} GROUP BY 1 "
            "ON CONFLICT (provider_id, day) DO UPDATE SET "
            "amount_micro_usdc = lay_payable.amount_micro_usdc + excluded.amount_micro_usdc;"
            f" INSERT INTO lay_balances SELECT stream, a.account, count(*) * 352750 FROM {rows} "
            "CROSS JOIN (SELECT 'payable' AS account UNION ALL SELECT 'earned') AS a GROUP BY 1, 2 "
            "ON CONFLICT (owner, account) DO UPDATE SET "
            "balance_micro_usdc = lay_balances.balance_micro_usdc + excluded.balance_micro_usdc;"
            f" INSERT INTO lay_checkpoints SELECT stream, max(seq) FROM {rows} GROUP BY 1 "
            "ON CONFLICT (stream) DO UPDATE SET seq = excluded.seq;"
        )

    def write(layout, b):
        if layout == "projection":
            return project(b)
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
        probe = ".shell set -- $(cat /proc/$PPID/stat); echo layoutcpu ${14} ${15}"
    else:
        w("VACUUM ANALYZE; CHECKPOINT;")
        w("\\timing on")
        w("SELECT pg_backend_pid() AS pid \\gset")
        w("\\setenv BACKEND_PID :pid")
        probe = "\\! echo layoutcpu $(cut -d' ' -f14,15 /proc/$BACKEND_PID/stat)"
    for b in range(LOADED, LOADED + TIMED):
        for layout in layouts:
            w(f"SELECT 'layout {layout}';" if sqlite else f"\\echo layout {layout}")
            w(probe)
            w("BEGIN;")
            w(write(layout, b))
            w("COMMIT;")
            w(probe)
    return "\n".join(out), write


def drop_tables():
    return "DROP TABLE lay_raw, lay_events, lay_keys, lay_blocks, lay_gen, " + ", ".join(PROJECTION) + ";"


def parallel(psql, write):
    """Wall milliseconds per batch: raw alone, then the events and the projection of the same
    batches on two connections at once (each a psql process, its batches one after the other)."""

    def run(layouts):
        batches = range(LOADED + TIMED, LOADED + TIMED + PARALLEL)
        started = time.monotonic()
        procs = [
            subprocess.Popen(psql, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
            for _ in layouts
        ]
        for proc, layout in zip(procs, layouts):
            proc.stdin.write("\n".join(f"BEGIN; {write(layout, b)} COMMIT;" for b in batches))
            proc.stdin.close()
        if any(proc.wait() for proc in procs):
            sys.exit("psql failed")
        return (time.monotonic() - started) * 1000.0 / PARALLEL

    raw = run(["raw"])
    both = run(["events", "projection"])
    print(f"postgres: {PARALLEL} batches, wall ms per batch (psql's start included)")
    print(f"  raw                    {raw:7.1f}")
    print(f"  events ‖ projection    {both:7.1f}  raw/layout {raw / both:5.2f}")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("sqlite", "postgres"):
        sys.exit(__doc__)
    db, target = sys.argv[1], sys.argv[2]
    sql, write = script(db)
    if db == "sqlite":
        cmd = ["sqlite3", target]
    else:
        cmd = ["psql", "-q", *target.split(), "-v", "ON_ERROR_STOP=1"]
    out = subprocess.run(cmd, input=sql, capture_output=True, text=True, check=True).stdout
    times, cpu = defaultdict(list), defaultdict(int)
    layout, ms, ticks = None, 0.0, []
    for line in out.splitlines() + ["layout end"]:
        m = re.match(r"^layout (\w+)$", line.strip())
        if m:
            if layout:
                times[layout].append(ms)
                cpu[layout] += ticks[-1] - ticks[0]
            layout, ms, ticks = m.group(1), 0.0, []
            continue
        m = re.match(r"^layoutcpu (\d+) (\d+)$", line.strip())
        if m:
            ticks.append(int(m.group(1)) + int(m.group(2)))
            continue
        m = re.match(r"^Run Time: real ([\d.]+)", line) or re.match(r"^Time: ([\d.]+) ms", line)
        if m and layout:
            ms += float(m.group(1)) * (1000.0 if line.startswith("Run Time") else 1.0)
    tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
    cpu["events + projection"] = cpu["events"] + cpu["projection"]
    times["events + projection"] = [e + p for e, p in zip(times["events"], times["projection"])]
    raw, raw_cpu = statistics.mean(times["raw"]), cpu["raw"]
    print(
        f"{db}: ms per batch of 900 events, {TIMED} batches each, after {LOADED} loaded, "
        f"projector passes of {PASS} batches; cpu: the {'sqlite3' if db == 'sqlite' else 'backend'} "
        "process's user + system time"
    )
    for name, t in times.items():
        mean, used = statistics.mean(t), cpu[name] * tick_ms / TIMED
        print(
            f"  {name:22} median {statistics.median(t):7.1f}  mean {mean:7.1f}  raw/layout {raw / mean:5.2f}"
            f"  cpu {used:6.1f}  raw/layout {raw_cpu / max(cpu[name], 1):5.2f}"
        )
    if db == "postgres":
        if PARALLEL:
            parallel(cmd, write)
        subprocess.run(cmd, input=drop_tables(), capture_output=True, text=True, check=True)


if __name__ == "__main__":
    main()
