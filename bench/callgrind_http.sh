#!/usr/bin/env bash
# callgrind_http.sh - the daemon's instructions per request on the lean HTTP
# path (docs/benchmarks-history.md "Lean HTTP path"): a private redis-server, retryd
# under valgrind --tool=callgrind, N messages enqueued (not counted), then the
# counters zeroed and N settle-and-claim requests of one worker counted.
#
#   bench/callgrind_http.sh RETRYD LOADGEN LUA_LIB OUT_DIR [N=2000] [PAYLOAD=100]
#
# Prints the instructions per settle-and-claim request and the top functions
# (inclusive and exclusive) and the calls of malloc & co.; OUT_DIR keeps callgrind.out.* and the logs.
set -euo pipefail
RETRYD=$1 LOADGEN=$2 LUA_LIB=$3 OUT=$4 N=${5:-2000} PAYLOAD=${6:-100}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd -P)
source "$(dirname "$0")/../scripts/lib.sh"
RP=$(free_port)
HP=$(free_port)
pids=""
cleanup() { stop_pid $pids; }
trap cleanup EXIT
redis_start "$RP" "$OUT" --save '' --appendonly no || { echo "redis-server did not start" >&2; exit 1; }
pids="$pids $REDIS_PID"
redis-cli -p "$RP" -x FUNCTION LOAD REPLACE <"$LUA_LIB" >/dev/null
valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out.%p" \
    "$RETRYD" --listen "127.0.0.1:$HP" --redis "redis://127.0.0.1:$RP" --prefix cg \
    --tick-ms 250 --log-level warn >"$OUT/retryd.log" 2>&1 &
vg=$!
pids="$vg $pids"
http_ready "$HP" 600 "$vg" || { echo "retryd under valgrind did not become ready" >&2; exit 1; }
"$LOADGEN" enqueue --port "$HP" --queue cg --conns 1 --messages "$N" --payload-bytes "$PAYLOAD" \
    >"$OUT/enqueue.txt"
callgrind_control -z "$vg" >/dev/null
"$LOADGEN" settle --port "$HP" --queue cg --conns 1 --messages "$N" >"$OUT/settle.txt"
callgrind_control -d settle "$vg" >/dev/null
kill -TERM "$vg"
wait "$vg" 2>/dev/null || true
pids=${pids/$vg/}
cat "$OUT/settle.txt"
f="$OUT/callgrind.out.$vg.1"     # the dump: the settle-and-claim requests only
reqs=$(sed -n 's/.* requests=\([0-9]*\).*/\1/p' "$OUT/settle.txt")
total=$(callgrind_annotate "$f" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | head -n 1 | tr -d ,)
echo "profile=$f requests=$reqs instructions=$total per_request=$((total / reqs))"
calls=$("$(dirname "$0")/callgrind_calls.py" "$f" malloc calloc realloc free)
echo "calls: $calls (per request:$(for kv in $calls; do printf ' %s=%.1f' "${kv%%=*}" \
    "$(echo "${kv#*=} / $reqs" | bc -l)"; done))"
set +o pipefail  # head ends the listings early
echo "-- exclusive"
callgrind_annotate --inclusive=no --threshold=100 --auto=no "$f" 2>/dev/null |
    sed -n '/file:function/,$p' | sed -n '3,$p' | grep -v '(100.0%)' | head -n 16
echo "-- inclusive"
callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$f" 2>/dev/null |
    sed -n '/file:function/,$p' | sed -n '3,40p'
