#!/usr/bin/env bash
# batch_http_bench.sh - the batch enqueue against single enqueues over HTTP
# (docs/benchmarks.md "Batch enqueue"), measured with wrk (a client nobody
# here wrote): a private redis-server and build/retryd on free ports, then
# RUNS alternating rounds of
#   single   POST /queues/q/messages {"payload": <100 bytes>}, 50 connections
#   single1  the same on 1 connection
#   batch    POST /queues/q/messages {"messages": [1000 x the same]}, 1 connection
#   batch4   the same on 4 connections
# each SECONDS long, the queue emptied (FLUSHALL) before each; prints
# messages per second per round and the median of each kind.
#
#   tests/batch_http_bench.sh [RUNS=3] [SECONDS=5]
set -euo pipefail
RUNS=${1:-3} SECS=${2:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lib.sh"
BIN=${RETRYD_BIN:-$ROOT/build/retryd}
command -v wrk >/dev/null || { echo "batch_http_bench: wrk is not installed (apt-get install wrk)"; exit 1; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/retryd-batch-bench.XXXXXX")
rs="" rd=""
cleanup() { stop_pid $rd $rs; rm -rf "$OUT"; }
trap cleanup EXIT

RP=$(free_port)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no >"$OUT/redis.log" 2>&1 &
rs=$!
for _ in $(seq 100); do [ "$(redis_ping "$RP")" = PONG ] && break; sleep 0.1; done
HP=$(free_port)
"$BIN" --listen "127.0.0.1:$HP" --redis "redis://127.0.0.1:$RP" --log-level error \
    --max-body 4194304 >"$OUT/retryd.log" 2>&1 &
rd=$!
http_ready "$HP" 100 "$rd" || { echo "batch_http_bench: retryd did not get ready"; cat "$OUT/retryd.log"; exit 1; }

cat >"$OUT/single.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"payload":"' .. string.rep("x", 100) .. '"}'
EOF
cat >"$OUT/batch.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local item = '{"payload":"' .. string.rep("x", 100) .. '"}'
local items = {}
for i = 1, 1000 do items[i] = item end
wrk.body = '{"messages":[' .. table.concat(items, ",") .. ']}'
EOF

# round KIND CONNECTIONS SCRIPT PER_REQUEST: prints messages per second.
round() {
    redis-cli -p "$RP" FLUSHALL >/dev/null
    local out rps
    out=$(wrk -t "$(($2 < 2 ? 1 : 2))" -c "$2" -d "${SECS}s" -s "$3" \
        "http://127.0.0.1:$HP/queues/q/messages")
    if grep -q "Non-2xx" <<<"$out"; then echo "batch_http_bench: $1: errors" >&2; echo "$out" >&2; exit 1; fi
    rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    awk -v r="$rps" -v k="$4" 'BEGIN { printf "%d\n", r * k }'
}

declare -A all
kinds=(single single1 batch batch4)
for ((i = 1; i <= RUNS; i++)); do
    for kind in "${kinds[@]}"; do
        case $kind in
        single) v=$(round single 50 "$OUT/single.lua" 1) ;;
        single1) v=$(round single1 1 "$OUT/single.lua" 1) ;;
        batch) v=$(round batch 1 "$OUT/batch.lua" 1000) ;;
        batch4) v=$(round batch4 4 "$OUT/batch.lua" 1000) ;;
        esac
        all[$kind]+="$v "
        printf 'run %d %-8s %8d msgs/s\n' "$i" "$kind" "$v"
    done
done
for kind in "${kinds[@]}"; do
    # shellcheck disable=SC2086 # one number per word
    m=$(printf '%s\n' ${all[$kind]} | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    printf 'median %-8s %8d msgs/s\n' "$kind" "$m"
done
