#!/usr/bin/env bash
# callgrind_sqs.sh - instructions per message of the daemon and of
# redis-server on the SQS endpoint against the native HTTP API
# (docs/benchmarks.md "SQS endpoint"): redis-server and retryd (with
# --sqs-listen) both under valgrind --tool=callgrind, and counted phases,
# each its own dump of both, N messages each:
#   enqueue.Q   native enqueues into queue Q        (loadgen enqueue)
#   settle.Q    settle-and-claim of 10 of them       (loadgen settle --count 10)
#   send        SendMessage, JSON protocol           (loadgen sqs-send)
#   receive     ReceiveMessage 10 + DeleteMessageBatch 10 of those (loadgen sqs-receive)
# Q is "none" (no policy) and "sqs" (an SQS queue's policy: max_retries
# unlimited, lease_expiry redeliver, message_ttl 345600 with on_expiry
# delete, lease_seconds 30), and with POLICY_SPLIT=1 also "lease"
# (lease_seconds 30 alone), "unlimited" (+ max_retries unlimited and
# lease_expiry redeliver) and "ttl" (lease_seconds + message_ttl): so the SQS
# figures split into what the endpoint costs (send vs enqueue.sqs) and what
# an SQS queue's semantics cost Redis (enqueue.sqs vs enqueue.none, piece by
# piece). Not part of make bench (a minute or two under valgrind).
#
#   bench/callgrind_sqs.sh RETRYD LOADGEN LUA_LIB OUT_DIR [N=2000] [CONNS=10]
#
# Prints, per phase, the daemon's and Redis's instructions per message and the
# daemon's malloc & co. per message, then the top functions (inclusive) of the
# daemon in the send and receive phases; OUT_DIR keeps callgrind.out.* and the logs.
set -euo pipefail
RETRYD=$1 LOADGEN=$2 LUA_LIB=$3 OUT=$4 N=${5:-2000} CONNS=${6:-10}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd -P)
here=$(cd "$(dirname "$0")" && pwd -P)
source "$here/../scripts/lib.sh"
LIB=$(sed -n '1s/^#!lua name=//p' "$LUA_LIB")
RP=$(free_port)
HP=$(free_port)
SP=$(free_port)
pids=""
cleanup() { stop_pid $pids; }
trap cleanup EXIT
valgrind --tool=callgrind --callgrind-out-file="$OUT/redis.callgrind.out" \
    redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --dir "$OUT" \
    >"$OUT/redis.log" 2>&1 &
rvg=$!
pids="$rvg"
for _ in $(seq 150); do [ "$(redis_ping "$RP")" = PONG ] && break; sleep 0.2; done
redis-cli -p "$RP" -x FUNCTION LOAD REPLACE <"$LUA_LIB" >/dev/null
queues=(none sqs)
[ "${POLICY_SPLIT:-0}" = 1 ] && queues+=(lease unlimited ttl)
policy_of() {
    case $1 in
    sqs) echo max_retries unlimited lease_expiry redeliver message_ttl 345600 on_expiry delete \
              lease_seconds 30 ;;
    lease) echo lease_seconds 30 ;;
    unlimited) echo lease_seconds 30 max_retries unlimited lease_expiry redeliver ;;
    ttl) echo lease_seconds 30 message_ttl 345600 on_expiry delete ;;
    esac
}
for q in "${queues[@]}"; do
    [ "$q" = none ] && continue
    # shellcheck disable=SC2046 # the policy's fields, one word each
    redis-cli -p "$RP" FCALL "${LIB}_policy_set" 1 "cg:{$q}" replace $(policy_of "$q") >/dev/null
done
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

phases=()
# phase NAME LOADGEN-ARGS...: zero both counters, run, dump both (dump k of
# both processes is phases[k-1]).
phase() {
    local name=$1
    shift
    callgrind_control -z "$vg" >/dev/null 2>&1
    callgrind_control -z "$rvg" >/dev/null 2>&1
    "$LOADGEN" "$@" --messages "$N" --timeout-s 1200 >"$OUT/$name.txt"
    callgrind_control -d "$name" "$vg" >/dev/null 2>&1
    callgrind_control -d "$name" "$rvg" >/dev/null 2>&1
    phases+=("$name")
}
for q in "${queues[@]}"; do
    phase "enqueue.$q" enqueue --port "$HP" --queue "$q" --conns "$CONNS"
    phase "settle.$q" settle --port "$HP" --queue "$q" --conns "$CONNS" --count 10
done
phase send sqs-send --port "$SP" --queue cgsqs --conns "$CONNS"
phase receive sqs-receive --port "$SP" --queue cgsqs --conns "$CONNS" --count 10
kill -TERM "$vg"
wait "$vg" 2>/dev/null || true
redis-cli -p "$RP" shutdown nosave >/dev/null 2>&1 || true
wait "$rvg" 2>/dev/null || true
pids=""

set +o pipefail  # head ends the listings early
total() {
    callgrind_annotate "$1" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' |
        head -n 1 | tr -d ,
}
declare -A d r dump
i=0
printf '%-16s %12s %12s   %s\n' phase "daemon/msg" "redis/msg" "daemon malloc calloc realloc free per msg"
for p in "${phases[@]}"; do
    i=$((i + 1))
    dump[$p]=$i
    f="$OUT/callgrind.out.$vg.$i"
    d[$p]=$(( $(total "$f") / N ))
    r[$p]=$(( $(total "$OUT/redis.callgrind.out.$i") / N ))
    calls=$("$here/callgrind_calls.py" "$f" malloc calloc realloc free)
    printf '%-16s %12s %12s  %s\n' "$p" "${d[$p]}" "${r[$p]}" "$(for kv in $calls; do
        printf ' %.1f' "$(echo "${kv#*=} / $N" | bc -l)"; done)"
    echo "    $(head -n 1 "$OUT/$p.txt" | sed 's/ cpu_us=.*//')"
done
x() { echo "scale=2; $1 / $2" | bc -l; }
echo "daemon: send / enqueue $(x "${d[send]}" "${d[enqueue.none]}")x," \
     "receive+delete / settle-and-claim $(x "${d[receive]}" "${d[settle.none]}")x"
echo "redis:  send / enqueue $(x "${r[send]}" "${r[enqueue.none]}")x (the SQS policy alone:" \
     "$(x "${r[enqueue.sqs]}" "${r[enqueue.none]}")x); receive+delete / settle-and-claim" \
     "$(x "${r[receive]}" "${r[settle.none]}")x (the SQS policy alone: $(x "${r[settle.sqs]}" "${r[settle.none]}")x)"
for p in send receive; do
    echo "-- the daemon in $p, inclusive"
    callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$OUT/callgrind.out.$vg.${dump[$p]}" \
        2>/dev/null | sed -n '/file:function/,$p' | sed -n '3,60p'
done
