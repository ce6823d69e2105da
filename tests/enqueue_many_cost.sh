#!/usr/bin/env bash
# enqueue_many_cost.sh - what one enqueue_many call costs Redis
# (docs/benchmarks.md "Batch enqueue"): instructions per call and per message
# under valgrind --tool=callgrind, as bench/callgrind_claim.sh counts a
# single enqueue (the same server flags, payloads and counting: the counters
# are zeroed after the library is loaded and read when the calls are done),
# and the microseconds per call Redis itself reports (INFO commandstats) on
# a plain redis-server. Each item is sent as the HTTP API sends it: a width
# of 9 (enqueue's ARGV[1..9]), hints on, max_retries defaulted.
#
#   tests/enqueue_many_cost.sh LUA_LIB [CALLS=200] [ITEMS=100] [PAYLOAD_BYTES=100]
#
# Prints two lines: "callgrind: ..." and "commandstats: ...".
set -euo pipefail
LUA_LIB=$1 CALLS=${2:-200} ITEMS=${3:-100} BYTES=${4:-100}
LIB=$(sed -n '1s/^#!lua name=//p' "$LUA_LIB")
source "$(dirname "$0")/../scripts/lib.sh"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/retryd-many-cost.XXXXXX")
vg="" rs=""
cleanup() { stop_pid $vg $rs; rm -rf "$OUT"; }
trap cleanup EXIT

# CALLS enqueue_many calls in RESP (as a client library frames them), for
# redis-cli --pipe: one connection, in order.
payload=$(head -c "$BYTES" /dev/zero | tr '\0' x)
awk -v calls="$CALLS" -v n="$ITEMS" -v lib="$LIB" -v p="$payload" 'BEGIN {
    args = 6 + 9 * n
    for (c = 0; c < calls; c++) {
        printf "*%d\r\n$5\r\nFCALL\r\n$%d\r\n%s_enqueue_many\r\n$1\r\n1\r\n$10\r\nretryd:{b}\r\n",
               args, length(lib) + 13, lib
        printf "$%d\r\n%d\r\n$1\r\n9\r\n", length(n ""), n
        for (i = 0; i < n; i++) {
            printf "$%d\r\n%s\r\n$1\r\n3\r\n$0\r\n\r\n$0\r\n\r\n$1\r\n1\r\n$7\r\ndefault\r\n", length(p), p
            printf "$0\r\n\r\n$0\r\n\r\n$0\r\n\r\n"
        }
    }
}' > "$OUT/calls.resp"

# 1. Instructions, under callgrind.
P=$(free_port)
valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out" \
    redis-server --port "$P" --bind 127.0.0.1 --save '' --appendonly no >"$OUT/vg.log" 2>&1 &
vg=$!
for _ in $(seq 150); do [ "$(redis_ping "$P")" = PONG ] && break; sleep 0.2; done
redis-cli -p "$P" -x FUNCTION LOAD REPLACE <"$LUA_LIB" >/dev/null
callgrind_control -z "$vg" >/dev/null 2>&1
redis-cli -p "$P" --pipe <"$OUT/calls.resp" >/dev/null
made=$(redis-cli -p "$P" HGET 'retryd:{b}:stats' enqueued)
[ "$made" = $((CALLS * ITEMS)) ] || { echo "enqueue_many: $made of $((CALLS * ITEMS)) enqueued" >&2; exit 1; }
callgrind_control -d "$vg" >/dev/null 2>&1
redis-cli -p "$P" shutdown nosave >/dev/null 2>&1 || true
wait "$vg" 2>/dev/null || true
vg=""
total=$(callgrind_annotate "$OUT/callgrind.out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
echo "callgrind: enqueue_many of $ITEMS x $BYTES bytes: $((total / CALLS)) instructions per call," \
     "$((total / CALLS / ITEMS)) per message ($CALLS calls, redis-cli --pipe)"

# 2. Microseconds, as Redis counts them (INFO commandstats usec_per_call).
P=$(free_port)
redis-server --port "$P" --bind 127.0.0.1 --save '' --appendonly no >"$OUT/rs.log" 2>&1 &
rs=$!
for _ in $(seq 100); do [ "$(redis_ping "$P")" = PONG ] && break; sleep 0.1; done
redis-cli -p "$P" -x FUNCTION LOAD REPLACE <"$LUA_LIB" >/dev/null
redis-cli -p "$P" CONFIG RESETSTAT >/dev/null
redis-cli -p "$P" --pipe <"$OUT/calls.resp" >/dev/null
stat=$(redis-cli -p "$P" INFO commandstats | tr -d '\r' | grep '^cmdstat_fcall:')
usec=$(printf '%s' "$stat" | sed -n 's/.*usec_per_call=\([0-9.]*\).*/\1/p')
echo "commandstats: enqueue_many of $ITEMS x $BYTES bytes: $usec us per call ($CALLS calls)"
