#!/usr/bin/env bash
# ab_worker.sh - the worker loop of two retryd builds, A and B, in turns on one
# redis-server: for a change that claims to make the loop faster, the figure
# before and after on the same machine at the same hour (docs/benchmarks.md).
#
#   [MODE=settle|work] [COUNT=1] bench/ab_worker.sh BUILD_A BUILD_B [REPS=3] [N=50000] [W=50]
#
# BUILD_x is a build directory holding retryd and loadgen (e.g. the build/ of
# a worktree at the older commit). Each turn: FLUSHALL, start that build's
# retryd (it loads its own Functions library), enqueue N 100-byte messages
# through HTTP (untimed), then `loadgen settle` (settle-and-claim, one request
# per message; MODE=work: claim then succeed, a batch ack when COUNT > 1)
# with W connections, COUNT messages per claim; prints processed msgs/s and Redis CPU per
# message (INFO cpu) per turn, then the medians and B / A.
set -euo pipefail
A=$1 B=$2 REPS=${3:-3} N=${4:-50000} W=${5:-50} MODE=${MODE:-settle} COUNT=${COUNT:-1}
cd "$(dirname "$0")/.."
source scripts/lib.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/retryd-ab.XXXXXX")
RP=$(free_port)
redis_pid="" retryd_pid=""
cleanup() {
    [ -z "$retryd_pid" ] || stop_pid "$retryd_pid"
    [ -z "$redis_pid" ] || stop_pid "$redis_pid"
    rm -rf "$tmp"
}
trap cleanup EXIT
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
    >"$tmp/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 100); do [ "$(redis_ping "$RP")" = PONG ] && break; sleep 0.1; done

redis_cpu_us() {
    redis-cli -p "$RP" INFO cpu | tr -d '\r' |
        awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%d", s * 1000000 }'
}

turn() {   # turn BUILD: one run; prints "rate redis_us_per_msg"
    local build=$1 hp out r0 r1
    redis-cli -p "$RP" FLUSHALL >/dev/null
    hp=$(free_port)
    "$build/retryd" --listen "127.0.0.1:$hp" --redis "redis://127.0.0.1:$RP" --prefix ab \
        >"$tmp/retryd.log" 2>&1 &
    retryd_pid=$!
    for _ in $(seq 100); do http_ready "$hp" && break; sleep 0.1; done
    "$build/loadgen" enqueue --port "$hp" --queue ab --conns 50 --messages "$N" >/dev/null
    r0=$(redis_cpu_us)
    out=$("$build/loadgen" "$MODE" --port "$hp" --queue ab --conns "$W" --messages "$N" \
          --count "$COUNT")
    r1=$(redis_cpu_us)
    stop_pid "$retryd_pid"
    retryd_pid=""
    printf '%s %s\n' "$(printf '%s\n' "$out" | grep '^mode=' | tr ' ' '\n' |
                        awk -F= '$1 == "msgs_per_s" { print $2 }')" \
        "$(awk -v a="$r0" -v b="$r1" -v n="$N" 'BEGIN { printf "%.1f", (b - a) / n }')"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >"$tmp/a" ; : >"$tmp/b"
for i in $(seq "$REPS"); do
    turn "$A" | tee -a "$tmp/a" | sed "s/^/A turn $i: msgs\/s, Redis us\/msg: /"
    turn "$B" | tee -a "$tmp/b" | sed "s/^/B turn $i: msgs\/s, Redis us\/msg: /"
done
ra=$(cut -d' ' -f1 "$tmp/a" | median) rb=$(cut -d' ' -f1 "$tmp/b" | median)
ca=$(cut -d' ' -f2 "$tmp/a" | median) cb=$(cut -d' ' -f2 "$tmp/b" | median)
echo "loadgen $MODE, count $COUNT, W=$W, N=$N, median of $REPS:"
echo "  A: $ra msgs/s, $ca us Redis CPU per message"
echo "  B: $rb msgs/s, $cb us Redis CPU per message"
awk -v ra="$ra" -v rb="$rb" -v ca="$ca" -v cb="$cb" \
    'BEGIN { printf "  B / A: %.3fx msgs/s, %.3fx Redis CPU per message\n", rb / ra, cb / ca }'
