#!/usr/bin/env bash
# API fuzzing: schemathesis (PyPI) against the OpenAPI document that `settle serve` serves,
# with a valid admin token: no 5xx, every error a problem+json, responses match the schema.
#   ops/fuzz/schemathesis.sh [MAX_EXAMPLES]     (default 50 per operation; CI uses 20)
# Needs: pip install schemathesis; a built settle binary (SETTLE_BIN, default target/debug).
set -euo pipefail
cd "$(dirname "$0")/../.."
MAX_EXAMPLES="${1:-50}"
BIN="${SETTLE_BIN:-${CARGO_TARGET_DIR:-target}/debug/settle}"
if ! command -v st >/dev/null; then
    python3 -m pip install -q schemathesis
    hash -r
    command -v pyenv >/dev/null && pyenv rehash || true
    export PATH="$(python3 -m site --user-base)/bin:$(dirname "$(python3 -c 'import sys; print(sys.executable)')"):$PATH"
fi
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
db="sqlite://$work/fuzz.db"
cat > "$work/seed.ndjson" <<SEED
{"type":"provider.register","provider_id":"prv_fuzz","name":"Fuzz GPU","email":"ops@fuzz.test","tier":"community","schedule":"weekly","payout_method":{"kind":"solana","wallet":"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"}}
{"type":"gpu.register","gpu_id":"gpu_fuzz_0","provider_id":"prv_fuzz","model":"H100-80GB"}
{"type":"rate.set","provider_id":"prv_fuzz","model":"H100-80GB","rate_usdc_per_hour":"2.49","effective_from":"2020-01-01T00:00:00Z"}
SEED
# A real-clock ledger, so dual control is on while fuzzing: two operators (keys in $work),
# and the seed's gated lines (a payout method, the model's first rate, the admin token)
# requested by alice and approved by bob, as an operator team would.
"$BIN" --database "$db" migrate >/dev/null
for who in alice bob; do
    "$BIN" operator keygen --out "$work/$who.json" > "$work/$who.pub"
done
"$BIN" --database "$db" operator bootstrap --operator "alice=$(cat "$work/alice.pub")" \
    --operator "bob=$(cat "$work/bob.pub")" >/dev/null
as_alice() { "$BIN" --database "$db" --actor alice --operator-key "$work/alice.json" --format json "$@"; }
approve_pending() {
    python3 -c 'import json,sys; [print(l["approval_id"]) for l in json.load(sys.stdin).get("lines", []) if l.get("approval_id")]' |
    while read -r id; do
        "$BIN" --database "$db" --actor bob --operator-key "$work/bob.json" approvals approve "$id" >/dev/null
    done
}
head -n 1 "$work/seed.ndjson" > "$work/seed1.ndjson"
tail -n +2 "$work/seed.ndjson" > "$work/seed2.ndjson"
{ as_alice import "$work/seed1.ndjson" || true; } | approve_pending
{ as_alice import "$work/seed2.ndjson" || true; } | approve_pending
created=$(as_alice token create --scope admin --name schemathesis)
token=$(printf '%s' "$created" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
approval=$(printf '%s' "$created" | python3 -c 'import json,sys; print(json.load(sys.stdin)["approval_id"] or "")')
[ -z "$approval" ] || "$BIN" --database "$db" --actor bob --operator-key "$work/bob.json" approvals approve "$approval" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# A fuzzing server: the built-in example bank originator is allowed (serve refuses it otherwise).
SETTLE_BANK__ALLOW_EXAMPLE_ORIGINATOR=true SETTLE_BANK__OUTBOX_DIR="$work/outbox" \
SETTLE_HTTP__BIND="127.0.0.1:$port" SETTLE_HTTP__METRICS_BIND="127.0.0.1:0" SETTLE_HTTP__AUTH_FAILURES_MAX=1000000 RUST_LOG=warn \
    SETTLE_BANK__OUTBOX_DIR="$work/outbox" \
    "$BIN" --database "$db" serve --no-scheduler >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
# ops/fuzz/st_hooks.py: the NDJSON body of /v1/admin/import.
PYTHONPATH="$PWD/ops/fuzz${PYTHONPATH:+:$PYTHONPATH}" SCHEMATHESIS_HOOKS=st_hooks \
st run "http://127.0.0.1:$port/openapi.json" \
    -H "Authorization: Bearer $token" \
    --checks not_a_server_error,response_schema_conformance,content_type_conformance,status_code_conformance \
    --max-examples "$MAX_EXAMPLES" \
    --exclude-path '/v1/providers/{id}/stream' \
    --seed 20261130 \
    2>&1 | tee "$work/schemathesis.log"
status=${PIPESTATUS[0]}
if grep -qiE "panicked" "$work/serve.log"; then echo "the server panicked:" >&2; cat "$work/serve.log" >&2; exit 1; fi
exit "$status"
