#!/usr/bin/env bash
# Walks through ops/deploy/TLS.md on this machine: the Caddyfile of the compose example,
# run by a local caddy (`apt-get install caddy`) in front of a local `settle serve`, with a
# self-signed certificate from Caddy's internal CA for localhost. Checks: the API answers
# over TLS, with HSTS; a bearer token works through the proxy; plain HTTP on the TLS port
# is refused; settle itself is reachable only on loopback.
#   ops/deploy/tls-check.sh      (SETTLE_BIN: the settle binary, default target/debug/settle)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${SETTLE_BIN:-${CARGO_TARGET_DIR:-target}/debug/settle}"
command -v caddy >/dev/null || { echo "needs caddy (apt-get install caddy)" >&2; exit 2; }
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fail() { echo "FAILED: $*" >&2; for f in "$work"/*.log; do echo "== $f" >&2; tail -20 "$f" >&2; done; exit 1; }

db="sqlite://$work/settle.db"
"$BIN" --database "$db" migrate >/dev/null
token=$("$BIN" --database "$db" --format json token create --scope admin --name tls-check |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')

api=$(free_port)
tls=$(free_port)
SETTLE_HTTP__BIND="127.0.0.1:$api" SETTLE_HTTP__METRICS_BIND="127.0.0.1:0" \
    SETTLE_HTTP__TRUSTED_PROXIES='["127.0.0.1"]' RUST_LOG=warn \
    "$BIN" --database "$db" serve --no-scheduler >"$work/settle.log" 2>&1 &
pids+=($!)
# Caddy's state (its internal CA) in the work directory, not in the user's home.
XDG_DATA_HOME="$work/data" XDG_CONFIG_HOME="$work/config" \
    SETTLE_DOMAIN="localhost:$tls" SETTLE_UPSTREAM="127.0.0.1:$api" \
    caddy run --config ops/deploy/Caddyfile --adapter caddyfile >"$work/caddy.log" 2>&1 &
pids+=($!)

root="$work/data/caddy/pki/authorities/local/root.crt"
for _ in $(seq 1 150); do
    [ -s "$root" ] && curl -fs --cacert "$root" "https://localhost:$tls/healthz" >/dev/null && break
    sleep 0.1
done
[ -s "$root" ] || fail "caddy made no internal CA"

headers=$(curl -fsS --cacert "$root" -D - -o "$work/health.json" "https://localhost:$tls/healthz") ||
    fail "GET /healthz over TLS"
grep -q '"status":"ok"' "$work/health.json" || fail "healthz body: $(cat "$work/health.json")"
grep -qi '^strict-transport-security: max-age=31536000' <<<"$headers" || fail "no HSTS header"
code=$(curl -sS --cacert "$root" -o /dev/null -w '%{http_code}' \
    -H "Authorization: Bearer $token" "https://localhost:$tls/v1/admin/bank/batches")
[ "$code" = 200 ] || fail "an admin token through the proxy: $code"
code=$(curl -sS --cacert "$root" -o /dev/null -w '%{http_code}' "https://localhost:$tls/v1/admin/bank/batches")
[ "$code" = 401 ] || fail "no token through the proxy: $code"
# Plain HTTP to the TLS port is not served.
code=$(curl -sS -o /dev/null -w '%{http_code}' "http://localhost:$tls/healthz" || true)
[ "$code" != 200 ] || fail "plain HTTP answered 200 on the TLS port"
# Without the CA, the certificate is not trusted (self-signed).
if curl -fs "https://localhost:$tls/healthz" >/dev/null 2>&1; then fail "a self-signed certificate was trusted"; fi
echo "ok: TLS by caddy (internal CA) in front of settle; HSTS; bearer tokens pass; plain HTTP refused"
