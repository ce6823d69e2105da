#!/usr/bin/env bash
# callgrind_http.sh - the daemon's instructions per request on the lean HTTP
# path (docs/benchmarks.md "Lean HTTP path"): a private redis-server, retryd
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
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RP=$(free_port)
HP=$(free_port)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --dir "$OUT" \
    --logfile "$OUT/redis.log" >/dev/null 2>&1 &
pids="$pids $!"
for _ in $(seq 1 100); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$RP" -x FUNCTION LOAD REPLACE <"$LUA_LIB" >/dev/null
valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out.%p" \
    "$RETRYD" --listen "127.0.0.1:$HP" --redis "redis://127.0.0.1:$RP" --prefix cg \
    --tick-ms 250 --log-level warn >"$OUT/retryd.log" 2>&1 &
vg=$!
pids="$vg $pids"
for _ in $(seq 1 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HP/readyz")" = 200 ] && break
    sleep 0.2
done
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
