#!/usr/bin/env python3
"""The payout upsert of a weekly run, alone, in four shapes (ops/bench/runs.md, round 5).

Copies a runs-bench setup snapshot, then writes 100 transactions of 1,000 payout rows into
its `payouts` table the way the engine does (`INSERT … SELECT … FROM json_each(?) … ON
CONFLICT DO UPDATE`, WAL, synchronous FULL) and prints the seconds of the inserts and of
the whole, for one variant:

  json     the engine's statement, payout ids hashed as `ledger::runs::payout_id` makes them
  noidx    the same without the table's two secondary indexes
  ordered  the same with ids in insertion order
  binds    the rows bound one by one to a prepared statement (executemany)

    python3 ops/bench/payout_upsert.py /tmp/b100k.db.setup json
"""
import hashlib
import json
import shutil
import sqlite3
import sys
import time

snapshot, variant = sys.argv[1], sys.argv[2]
work = "/dev/shm/payout-upsert.db"
shutil.copy(snapshot, work)
db = sqlite3.connect(work, isolation_level=None)
for pragma in ("journal_mode=WAL", "synchronous=FULL", "cache_size=-16384", "wal_autocheckpoint=10000"):
    db.execute(f"PRAGMA {pragma}")
if variant == "noidx":
    db.execute("DROP INDEX payouts_by_provider")
    db.execute("DROP INDEX payouts_by_status_and_id")
cols = ("payout_id,provider_id,run_kind,run_key,rail,amount_micro_usdc,amount_eur_cents,eur_per_usd,"
        "method,status,hold_reason,failure_reason,reference,end_to_end_id,created_at_ms,updated_at_ms").split(",")
ints = {5, 6, 14, 15}
cells = ", ".join(f"CAST(j.value ->> {i} AS BIGINT)" if i in ints else f"j.value ->> {i}" for i in range(len(cols)))
update = ", ".join(f"{c} = excluded.{c}" for c in cols[1:])
upsert = f"ON CONFLICT (payout_id) DO UPDATE SET {update}"
from_json = f"INSERT INTO payouts ({','.join(cols)}) SELECT {cells} FROM json_each(?) AS j WHERE true {upsert}"
bound = f"INSERT INTO payouts ({','.join(cols)}) VALUES ({','.join('?' * len(cols))}) {upsert}"
method = json.dumps({"kind": "ach", "routing": "021000021", "account": "123456789",
                     "account_type": "checking", "holder": "Acme Compute LLC", "entity": "business"},
                    separators=(",", ":"))


def row(p):
    provider = f"prv_{p:06}"
    if variant == "ordered":
        payout = f"po-{p:024}"
    else:
        payout = "po-" + hashlib.sha256(f"weekly|2026-11-23|{provider}".encode()).hexdigest()[:24]
    return [payout, provider, "weekly", "2026-11-23", "ach", 32_000_000, None, None, method,
            "created", None, None, None, None, 1795392300000, 1795392300000]


started, inserting = time.time(), 0.0
for chunk in range(100):
    rows = [row(chunk * 1000 + i) for i in range(1000)]
    db.execute("BEGIN IMMEDIATE")
    t = time.time()
    if variant == "binds":
        db.executemany(bound, rows)
    else:
        db.execute(from_json, (json.dumps(rows),))
    inserting += time.time() - t
    db.execute("COMMIT")
print(f"{variant}: inserts {inserting:.2f} s, with commits {time.time() - started:.2f} s (SQLite {sqlite3.sqlite_version})")
