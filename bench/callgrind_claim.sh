#!/usr/bin/env bash
# callgrind_claim.sh - redis-server's instructions per claim (docs/benchmarks.md
# "Instructions per call"; the claim step by step: docs/benchmarks-history.md
# "The claim in instructions"): a private redis-server under valgrind
# --tool=callgrind with retryd's library and bench/claim_steps.lua loaded,
# N 100-byte messages enqueued (not counted), the counters zeroed, then N
# calls of one function counted. Instructions do not depend on the machine's
# neighbours, so steps can be compared where µs cannot.
#
#   bench/callgrind_claim.sh LUA_LIB FUNCTION [N=10000] [COUNT=1]
#
# FUNCTION: "claim" (retryd's claim, count 1, with timer hints, as the daemon
# calls it), "settle_claim" (the worker loop's call as the daemon makes it:
# succeed message i, claim message i+1, count 1, with timer hints; ids are
# claimed FIFO, so call i settles id i), "enqueue" (as the daemon calls it,
# max_retries defaulted) or a function of bench/claim_steps.lua (claim_step0
# .. claim_step7) or of bench/lua_costs.lua (cost_nothing, cost_ten_calls,
# ...: the price of pieces of Lua). COUNT (claim and settle_claim): messages per call; the
# figure is then per call of COUNT messages (settle_claim settles the COUNT
# claimed by the call before). NONCE=1 (claim): each call carries a nonce, as
# the daemon's do, so it writes its lost-claim record (docs/durability.md).
# PRIORITY=P (1-9): every message is enqueued (and the enqueue measured) with
# priority P, so the queue uses the priority lane and claims pop it
# (docs/lifecycle.md "Priority"); PRIORITY=0: the queue used priorities (one
# message of priority 1, enqueued and claimed before the count) but every
# message is priority 0, so each claim pops the empty lane, then the lists;
# without it the queue never used priorities. SQS=1: the queue has the policy
# an SQS CreateQueue writes (max_retries unlimited, lease_expiry redeliver,
# message_ttl 345600 with on_expiry delete, lease_seconds 30, sqs true) and
# every message is enqueued with flag f, as SendMessage does (no attributes).
set -euo pipefail
LUA_LIB=$1 FN=$2 N=${3:-10000} COUNT=${4:-1}
# The library's name (its first line): its functions are called <name>_<function>.
LIB=$(sed -n '1s/^#!lua name=//p' "$LUA_LIB")
source "$(dirname "$0")/../scripts/lib.sh"
STEPS="$(dirname "$0")/claim_steps.lua"
COSTS="$(dirname "$0")/lua_costs.lua"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/retryd-cgclaim.XXXXXX")
P=$(free_port)
vg=""
cleanup() { [ -z "$vg" ] || stop_pid "$vg"; [ -n "${KEEP:-}" ] && cp "$OUT"/callgrind.out.* "$KEEP" 2>/dev/null; rm -rf "$OUT"; }
trap cleanup EXIT
valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out" \
    redis-server --port "$P" --bind 127.0.0.1 --save '' --appendonly no >"$OUT/redis.log" 2>&1 &
vg=$!
for _ in $(seq 150); do [ "$(redis_ping "$P")" = PONG ] && break; sleep 0.2; done
redis-cli -p "$P" -x FUNCTION LOAD REPLACE <"$LUA_LIB" >/dev/null
redis-cli -p "$P" -x FUNCTION LOAD REPLACE <"$STEPS" >/dev/null
redis-cli -p "$P" -x FUNCTION LOAD REPLACE <"$COSTS" >/dev/null
payload=$(head -c 100 /dev/zero | tr '\0' x)
PRIORITY=${PRIORITY:-}
fill=()   # the enqueue's ARGV[5..8] for a priority (none: the shortest form)
[ -z "$PRIORITY" ] || fill=('' 1 default '' "$PRIORITY")
sqs=()    # the enqueue's ARGV[9..12] of SendMessage: group, attributes, window, flags
if [ "${SQS:-0}" = 1 ]; then
    fill=('' 1 default '' "$PRIORITY")
    sqs=('' '' '' f)
    redis-cli -p "$P" FCALL ${LIB}_policy_set 1 'retryd:{b}' replace max_retries unlimited \
        lease_expiry redeliver message_ttl 345600 on_expiry delete lease_seconds 30 sqs true >/dev/null
fi
if [ "$PRIORITY" = 0 ]; then
    redis-cli -p "$P" FCALL ${LIB}_enqueue 1 'retryd:{b}' marker 3 0 '' 1 default '' 1 >/dev/null
    redis-cli -p "$P" FCALL ${LIB}_claim 1 'retryd:{b}' 30000 1 1 >/dev/null
fi
redis-benchmark -p "$P" -n $(((N + N / 5) * COUNT)) -P 16 -c 4 -q \
    FCALL ${LIB}_enqueue 1 'retryd:{b}' "$payload" 3 0 "${fill[@]}" "${sqs[@]}" >/dev/null
[ "$FN" != settle_claim ] ||
    redis-cli -p "$P" FCALL ${LIB}_claim 1 'retryd:{b}' 30000 "$COUNT" 1 >/dev/null
callgrind_control -z "$vg" >/dev/null 2>&1
if [ "$FN" = claim ]; then
    if [ "${NONCE:-0}" = 1 ]; then  # as the daemon calls it: no worker, a nonce per call
        redis-benchmark -p "$P" -n "$N" -P 16 -c 4 -q -r 1000000000 \
            FCALL ${LIB}_claim 1 'retryd:{b}' 30000 "$COUNT" 1 default '' "n.__rand_int__" >/dev/null
    else
        redis-benchmark -p "$P" -n "$N" -P 16 -c 4 -q FCALL ${LIB}_claim 1 'retryd:{b}' 30000 "$COUNT" 1 >/dev/null
    fi
elif [ "$FN" = enqueue ]; then
    # As the daemon calls it: hints, max_retries defaulted, ttl_ms and priority ("" none).
    redis-benchmark -p "$P" -n "$N" -P 16 -c 4 -q \
        FCALL ${LIB}_enqueue 1 'retryd:{b}' "$payload" 3 0 '' 1 default '' "${PRIORITY:-}" "${sqs[@]}" >/dev/null
elif [ "$FN" = settle_claim ]; then
    # Message 1 is claimed before the counters are zeroed (below, uncounted).
    # In the protocol's own framing (as a client library sends it).
    seq "$N" | awk -v c="$COUNT" -v lib="$LIB" '{
        s = ""
        for (j = 0; j < c; j++) s = s " " (($1 - 1) * c + j + 1) " - succeeded - 1 -1"
        n = split("FCALL " lib "_settle_claim 1 retryd:{b} 30000 " c " " c s " 2592000000 3600000 default", a, " ")
        printf "*%d\r\n", n
        for (i = 1; i <= n; i++) { v = (a[i] == "-") ? "" : a[i]; printf "$%d\r\n%s\r\n", length(v), v }
    }' | redis-cli -p "$P" --pipe >/dev/null
    settled=$(redis-cli -p "$P" HGET 'retryd:{b}:stats' succeeded)
    [ "$settled" = $((N * COUNT)) ] || { echo "settle_claim: $settled of $((N * COUNT)) settled" >&2; exit 1; }
else
    redis-benchmark -p "$P" -n "$N" -P 16 -c 4 -q FCALL "$FN" 1 'retryd:{b}' >/dev/null
fi
callgrind_control -d "$vg" >/dev/null 2>&1
redis-cli -p "$P" shutdown nosave >/dev/null 2>&1 || true
wait "$vg" 2>/dev/null || true
vg=""
total=$(callgrind_annotate "$OUT/callgrind.out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
how="redis-benchmark -P 16 -c 4"
[ "$FN" != settle_claim ] || how="redis-cli --pipe, one connection, in order"
[ "${SQS:-0}" != 1 ] || how="$how, an SQS queue's policy and flag f"
echo "$FN: $((total / N)) instructions per call of $COUNT ($N calls, $how${PRIORITY:+, priority $PRIORITY})"
