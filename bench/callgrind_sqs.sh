#!/usr/bin/env bash
# callgrind_sqs.sh - the daemon's instructions per message on the SQS
# endpoint against the native HTTP API (docs/benchmarks.md "SQS endpoint"):
# a private redis-server, retryd with --sqs-listen under valgrind
# --tool=callgrind, and four counted phases, each its own dump:
#   enqueue   N native enqueues               (loadgen enqueue)
#   send      N SendMessage, JSON protocol    (loadgen sqs-send)
#   settle    settle-and-claim of 10 of those N enqueued   (loadgen settle --count 10)
#   receive   ReceiveMessage 10 + DeleteMessageBatch 10 of the N sent (loadgen sqs-receive --count 10)
# Not part of make bench (a few minutes under valgrind).
#
#   bench/callgrind_sqs.sh RETRYD LOADGEN LUA_LIB OUT_DIR [N=2000] [CONNS=10]
#
# Prints instructions per message of each phase, the SQS / native ratios,
# malloc & co. per message, and the top functions (inclusive) of the send
# and receive phases; OUT_DIR keeps callgrind.out.* and the logs.
set -euo pipefail
RETRYD=$1 LOADGEN=$2 LUA_LIB=$3 OUT=$4 N=${5:-2000} CONNS=${6:-10}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd -P)
here=$(cd "$(dirname "$0")" && pwd -P)
source "$here/../scripts/lib.sh"
RP=$(free_port)
HP=$(free_port)
SP=$(free_port)
pids=""
cleanup() { stop_pid $pids; }
trap cleanup EXIT
redis_start "$RP" "$OUT" --save '' --appendonly no || { echo "redis-server did not start" >&2; exit 1; }
pids="$pids $REDIS_PID"
redis-cli -p "$RP" -x FUNCTION LOAD REPLACE <"$LUA_LIB" >/dev/null
valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out.%p" \
    "$RETRYD" --listen "127.0.0.1:$HP" --sqs-listen "127.0.0.1:$SP" \
    --redis "redis://127.0.0.1:$RP" --prefix cg --tick-ms 250 --log-level warn \
    >"$OUT/retryd.log" 2>&1 &
vg=$!
pids="$vg $pids"
http_ready "$HP" 600 "$vg" || { echo "retryd under valgrind did not become ready" >&2; exit 1; }
curl -s -m 60 -H 'Content-Type: application/x-amz-json-1.0' -H 'X-Amz-Target: AmazonSQS.CreateQueue' \
    -d '{"QueueName":"cgsqs"}' "http://127.0.0.1:$SP/" | grep -q QueueUrl ||
    { echo "CreateQueue failed" >&2; exit 1; }

# phase NAME LOADGEN-ARGS...: zero the counters, run, dump as NAME.
phase() {
    local name=$1
    shift
    callgrind_control -z "$vg" >/dev/null 2>&1
    "$LOADGEN" "$@" --messages "$N" --timeout-s 1200 >"$OUT/$name.txt"
    callgrind_control -d "$name" "$vg" >/dev/null 2>&1
}
phase enqueue enqueue --port "$HP" --queue cgnative --conns "$CONNS"
phase send sqs-send --port "$SP" --queue cgsqs --conns "$CONNS"
phase settle settle --port "$HP" --queue cgnative --conns "$CONNS" --count 10
phase receive sqs-receive --port "$SP" --queue cgsqs --conns "$CONNS" --count 10
kill -TERM "$vg"
wait "$vg" 2>/dev/null || true
pids=${pids/$vg/}

set +o pipefail  # head ends the listings early
total() {
    callgrind_annotate "$1" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' |
        head -n 1 | tr -d ,
}
declare -A per dump=([enqueue]=1 [send]=2 [settle]=3 [receive]=4)   # the dumps, in phase order
for p in enqueue send settle receive; do
    f="$OUT/callgrind.out.$vg.${dump[$p]}"
    t=$(total "$f")
    per[$p]=$((t / N))
    calls=$("$here/callgrind_calls.py" "$f" malloc calloc realloc free)
    echo "$p: $(head -n 1 "$OUT/$p.txt" | sed 's/ cpu_us=.*//')"
    echo "  profile=$f instructions=$t per_message=${per[$p]}"
    echo "  per message:$(for kv in $calls; do printf ' %s=%.1f' "${kv%%=*}" \
        "$(echo "${kv#*=} / $N" | bc -l)"; done)"
done
echo "send / enqueue: $(echo "scale=2; ${per[send]} / ${per[enqueue]}" | bc -l)x;" \
     "receive+delete / settle-and-claim: $(echo "scale=2; ${per[receive]} / ${per[settle]}" | bc -l)x"
for p in send receive; do
    echo "-- $p, inclusive"
    callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$OUT/callgrind.out.$vg.${dump[$p]}" \
        2>/dev/null | sed -n '/file:function/,$p' | sed -n '3,60p'
done
