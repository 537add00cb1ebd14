#!/usr/bin/env bash
# The Citus cluster the tests and benchmarks run on, on this machine:
#   ops/citus/cluster.sh [DIR]        build Citus when missing, start the cluster
#   ops/citus/cluster.sh [DIR] stop   stop it
# A coordinator on :9700 and workers on :9701 and :9702 (the vendored `cluster.sh`, data
# under DIR, default /tmp/citus), tuned for the suite: connections and background workers
# for many small databases. A spare node on :9703 runs
# outside the cluster: the rebalance test adds it to its own database. Needs root (it runs
# the servers as the `postgres` user). Prints the URLs the suite reads.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
vendor=${SETTLE_CITUS_VENDOR:-${SETTLE_SHARED_DIR:-$here/../../../shared}/vendor/citus}
root=${1:-/tmp/citus}
bin=/usr/lib/postgresql/15/bin
if [ "${2:-}" = stop ]; then
  "$vendor/cluster.sh" "$root" stop
  su postgres -c "$bin/pg_ctl -D $root/n9703 -m fast stop" >/dev/null 2>&1 || true
  exit 0
fi
running() { pg_isready -q -h 127.0.0.1 -p "$1" 2>/dev/null; }
"$vendor/build.sh" >&2
running 9700 || "$vendor/cluster.sh" "$root" >/dev/null
tune() {
  local conf=$1/postgresql.conf
  grep -q '^# settle suite' "$conf" && return 1
  printf '# settle suite\nmax_connections = 400\nmax_worker_processes = 64\n' >> "$conf"
}
restart=0
for p in 9700 9701 9702; do tune "$root/n$p" && restart=1 || true; done
if [ $restart = 1 ]; then
  "$vendor/cluster.sh" "$root" stop
  "$vendor/cluster.sh" "$root" >/dev/null
fi
spare=$root/n9703
if [ ! -d "$spare" ]; then
  su postgres -c "$bin/initdb -D $spare -A trust -U postgres" >/dev/null
  printf "shared_preload_libraries = 'citus'\nport = 9703\nunix_socket_directories = '$root'\n" >> "$spare/postgresql.conf"
  tune "$spare" || true
fi
running 9703 || su postgres -c "$bin/pg_ctl -D $spare -l $spare/log -w start" >/dev/null
psql -h 127.0.0.1 -p 9703 -U postgres -qc "create extension if not exists citus" postgres
echo "SETTLE_TEST_CITUS_URL=postgres://postgres@127.0.0.1:9700/postgres"
echo "SETTLE_TEST_CITUS_SPARE_URL=postgres://postgres@127.0.0.1:9703/postgres"
