#!/usr/bin/env bash
# history_ab.sh - A/B of the claim+succeed happy path before and after the
# per-attempt history (docs/dead-letters.md §1): two Functions libraries in one
# redis-server, the "before" one renamed, and rounds of BATCH lifecycles that
# alternate between them, so that whatever else the machine does falls on both
# alike. Not part of `make bench` (its section 1h measures the branch alone).
#
#   bench/history_ab.sh BEFORE.lua AFTER.lua [ROUNDS=20] [BATCH=2000]
#
# BEFORE.lua and AFTER.lua are built libraries (build/retryd.lua of two
# trees; e.g. `git show main:lua/...` concatenated). Prints, per library, the
# median over rounds of Redis µs per claim+succeed (commandstats of FCALL:
# usec of that library's calls / lifecycles) and of Redis CPU µs (INFO cpu).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../scripts/lib.sh"   # free_port, redis_start, stop_pid

before=$1 after=$2 rounds=${3:-20} batch=${4:-2000}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/retryd-history-ab.XXXXXX") || exit 1
REDIS_PID=""
trap 'stop_pid "$REDIS_PID"; rm -rf "$tmp"' EXIT
port=$(free_port) || exit 1
redis_start "$port" "$tmp" --save '' --appendonly no || { echo "no redis-server" >&2; exit 1; }
rcli() { redis-cli -p "$port" "$@"; }

# The before library under the name retryd_ab (first line and LIBRARY).
lib_a=$(sed -n '1s/^#!lua name=//p' "$after")
lib_b=$(sed -n '1s/^#!lua name=//p' "$before")
sed -e "1s/.*/#!lua name=retryd_ab/" -e "s/^\( *\)local LIBRARY = '$lib_b'/\1local LIBRARY = 'retryd_ab'/" \
    "$before" >"$tmp/before.lua"
rcli -x FUNCTION LOAD REPLACE <"$tmp/before.lua" >/dev/null || exit 1
rcli -x FUNCTION LOAD REPLACE <"$after" >/dev/null || exit 1

payload=$(printf 'abcdefghijklmnopqrstuvwxyz0123456789%.0s' 1 2 3 | head -c 100)

# pipe FN KIND BASE FIRST N: N FCALLs (enqueue, claim, or succeed of ids
# FIRST..FIRST+N-1) as RESP through redis-cli --pipe.
pipe() {
    LC_ALL=C awk -v fn="$1_" -v kind="$2" -v b="$3" -v first="$4" -v n="$5" -v p="$payload" '
        function emit(k,  i) { printf "*%d\r\n", k
            for (i = 1; i <= k; i++) printf "$%d\r\n%s\r\n", length(a[i]), a[i] }
        BEGIN { for (id = first; id < first + n; id++) {
            a[1] = "FCALL"; a[2] = fn kind; a[3] = 1; a[4] = b
            if (kind == "enqueue") { a[5] = p; a[6] = 3; a[7] = 0; a[8] = ""; emit(8) }
            else if (kind == "claim") { a[5] = 30000; a[6] = 1; emit(6) }
            else { a[3] = 2; a[5] = b ":m:" id; a[6] = id; a[7] = ""; emit(7) }
        } }' | redis-cli -p "$port" --pipe >/dev/null 2>&1
}
usec() {   # total usec of FCALL so far
    rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '$1 == "cmdstat_fcall" { print $5; f = 1 }
        END { if (!f) print 0 }'
}
cpu() {
    rcli info cpu | tr -d '\r' | awk -F: '$1 == "used_cpu_user" || $1 == "used_cpu_sys" { s += $2 }
        END { printf "%.0f", s * 1e6 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: >"$tmp/before.us"; : >"$tmp/after.us"; : >"$tmp/before.cpu"; : >"$tmp/after.cpu"
# run SIDE R: one round's BATCH lifecycles on one library, in a queue of its own.
run() {
    local side=$1 r=$2 fn=retryd_ab base u0 u1 c0 c1
    [ "$side" = after ] && fn=$lib_a
    base="ab:{$side-$r}"
    pipe "$fn" enqueue "$base" 1 "$batch"
    u0=$(usec) c0=$(cpu)
    pipe "$fn" claim "$base" 1 "$batch"
    pipe "$fn" succeed "$base" 1 "$batch"
    u1=$(usec) c1=$(cpu)
    awk -v a="$u0" -v b="$u1" -v n="$batch" 'BEGIN { printf "%.2f\n", (b - a) / n }' >>"$tmp/$side.us"
    awk -v a="$c0" -v b="$c1" -v n="$batch" 'BEGIN { printf "%.2f\n", (b - a) / n }' >>"$tmp/$side.cpu"
    rcli eval "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('UNLINK', k) end" 0 \
        "ab:{$side-$r}*" >/dev/null
}
run before 0   # untimed warm-up of both (their figures are dropped below)
run after 0
: >"$tmp/before.us"; : >"$tmp/after.us"; : >"$tmp/before.cpu"; : >"$tmp/after.cpu"
for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then run before "$r"; run after "$r"; else run after "$r"; run before "$r"; fi
done
printf '| library | µs per claim+succeed (commandstats, median of %d) | Redis CPU µs (median) |\n' "$rounds"
printf '|---|---:|---:|\n'
for side in before after; do
    printf '| %s | %s | %s |\n' "$side" "$(median <"$tmp/$side.us")" "$(median <"$tmp/$side.cpu")"
done
