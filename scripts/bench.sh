#!/usr/bin/env bash
# bench.sh - what `make bench` runs (docs/benchmarks.md): measures retryd against its own
# redis-server and retryd, beside raw Redis commands, a minimal Lua claim and
# BullMQ on the same server, and prints one table per section
# (figure | retryd | reference | ratio) and a closing table of targets.
#
#   BUILD=build QUICK=0|1 scripts/bench.sh
#
# Needs $BUILD/retryd, $BUILD/retryd.lua and $BUILD/loadgen (make bench builds
# them), redis-server, redis-cli and redis-benchmark; node and npm for the
# BullMQ peer (bench/package.json, installed with `npm ci` when
# bench/node_modules is missing; without it the BullMQ figures read
# "unavailable (reason)" and everything else still runs); Debian's
# ruby-sidekiq for the Sidekiq peer and wrk for the enqueue check
# (scripts/deps.sh bench, which make bench runs, installs both; without
# them their cells read "unavailable" or "not installed").
#
# Sections: 1 Redis-native path (redis-benchmark, -P 1 and -P 16); 1h the
# history's cost on the claim+succeed path;
# 2 HTTP path (build/loadgen); 2s the SQS endpoint (JSON protocol, loadgen
# sqs-send / sqs-receive) against the native API on one retryd; 3 BullMQ peer; 3a the worker loop
# (W connections vs Worker concurrency W, both ways, and the same loops with a
# worker in node, bench/http_worker.mjs); 4 growth (1k vs 1M);
# 5 memory; 6 retry latency; 7 the same with appendonly everysec; 8 Redis
# Cluster; 9 idle queues (10,000 of them, three instances); 10 the time
# series' cost (--series on vs off); targets.
# 1d claim with a queue policy (none, a cap, a rate limit).
# 1g fairness groups: a claim with 100,000 active groups against one without.
# 1p priorities: Redis commands and instructions per claim of a queue that
# never used priorities and of one that did.
# 1t the worker loop over TLS to Redis against plain TCP, same redis-server.
# 1s one queue at 1 and at 3 shards on one redis-server (the cost of sharding).
# 3e enqueue, one message per HTTP request at 50 connections, against BullMQ's
# queue.add with 50 in flight, checked with wrk; 3b batch enqueue of 1000
# against BullMQ's addBulk and Sidekiq's push_bulk of 1000; 3k Sidekiq 6.4.1:
# the worker loop at W=1 and W=50 and the Redis CPU per lifecycle (issue 25;
# its targets close the targets table). BENCH_ONLY=3e, 3b, 3k or 3 (sections
# 2, 3, 3a and 5), or a comma-separated list of them, runs those alone.
# BENCH_ONLY=9 (or 10, or 1d, or 1g, or 1h, or 1p, or 1s, or 1t, or 2s) runs section 9 (or 10, or 1d,
# or 1g, or 1h: the history's cost on the happy path, or 1p, or 1t, or 2s: the SQS endpoint,
# with its targets) alone.
# QUICK=1 runs smaller counts, one repetition, and prints the 1M rows as
# "skipped (QUICK)". Otherwise every figure marked "median of 3" is the median
# of three repetitions. Progress goes to stderr, tables to stdout; the last
# line is "bench: N rows, M without a figure" and the exit status is non-zero
# when M > 0 or something could not be started. Every process it starts is
# stopped, and its temp dir removed, on any exit.
set -u

BUILD=${BUILD:-build}
QUICK=${QUICK:-0}
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
RETRYD_BIN="$ROOT/$BUILD/retryd"
LUA_LIB="$ROOT/$BUILD/retryd.lua"
# The library's name (its first line) carries its API version; every function
# of it is called as <library>_<name>: "${FN}claim".
FN="$(sed -n '1s/^#!lua name=//p' "$LUA_LIB" 2>/dev/null)_"
LOADGEN="$ROOT/$BUILD/loadgen"
PREFIX=bench

if [ "$QUICK" = 1 ]; then
    REPS=1
    N_RB=20000          # commands per redis-benchmark row
    N_HTTP=20000        # messages per HTTP run
    N_HTTP_W1=5000      # messages for the single worker
    N_NODE=5000         # messages per run of the node worker (bench/http_worker.mjs)
    N_BULL=20000        # BullMQ addBulk jobs (and the memory rows)
    N_RETRY=500         # messages failing once in the retry-latency run
    N_AOF=10000
    GROWTH_BIG=0
    IDLE_WINDOW_S=5     # idle Redis CPU windows (section 9)
    IDLE_RETRY=50
    N_SERIES=10000      # lifecycles per time-series run (section 10)
else
    REPS=3
    N_RB=50000
    N_HTTP=50000
    N_HTTP_W1=50000     # the worker-loop workload: 50,000 before every timed worker run
    N_NODE=20000       # the node worker rows: a sensitivity check, not the workload's rows
    N_BULL=50000
    N_RETRY=1000
    N_AOF=30000
    GROWTH_BIG=1000000
    IDLE_WINDOW_S=10
    IDLE_RETRY=200
    N_SERIES=50000
fi
IDLE_PIDS=
BURSTS=20               # growth: claim bursts of 1000
PAYLOAD=$(printf 'abcdefghijklmnopqrstuvwxyz0123456789%.0s' 1 2 3 | head -c 100)
CLK_TCK=$(getconf CLK_TCK)

say() { echo "bench: [${SECONDS}s] $*" >&2; }

# ---------------------------------------------------------------------------
# Processes and cleanup
# ---------------------------------------------------------------------------
tmp=$(mktemp -d) || exit 1
redis_pid="" retryd_pid="" bg_pid=""
RP="" HP=""
SERVER_PIDS=""          # every server ever started (stopped ones are no-ops)
declare -A PAIR         # saved redis-server + retryd pairs (section 7)

# stop_pid and free_port (the helpers every script shares).
source scripts/lib.sh
# shellcheck source=retryctl
source scripts/retryctl # rd_base: key names (main runs only when executed)

cleanup() {
    local pid
    stop_pid "$bg_pid"
    for pid in $SERVER_PIDS; do stop_pid "$pid"; done
    bg_pid="" retryd_pid="" redis_pid="" SERVER_PIDS=""
    rm -rf "$tmp"
}

# save_pair NAME / use_pair NAME: remember the current redis-server + retryd,
# or make a remembered pair the current one.
save_pair() {
    PAIR[$1]="$RP $HP $redis_pid $retryd_pid"
}
use_pair() {
    read -r RP HP redis_pid retryd_pid <<<"${PAIR[$1]}"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

die() {
    say "$*"
    exit 1
}

for f in "$RETRYD_BIN" "$LUA_LIB" "$LOADGEN"; do
    [ -e "$f" ] || die "$f is missing (run make bench)"
done
for t in redis-server redis-cli redis-benchmark; do
    command -v "$t" >/dev/null || die "$t is not installed (scripts/deps.sh installs it)"
done

rcli() { redis-cli -p "$RP" "$@"; }

# start_redis none|aof: a private redis-server in its own dir, libraries loaded.
start_redis() {
    local mode=$1 dir="$tmp/redis-$1" aof=no port i
    [ "$mode" = aof ] && aof=yes
    mkdir -p "$dir"
    for _ in 1 2 3; do
        port=$(free_port) || die "no free port"
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly "$aof" \
            --appendfsync everysec --dir "$dir" --daemonize no \
            --logfile "$dir/redis.log" >/dev/null 2>&1 &
        redis_pid=$!
        SERVER_PIDS="$SERVER_PIDS $redis_pid"
        for i in $(seq 1 100); do
            kill -0 "$redis_pid" 2>/dev/null || break
            if [ "$(redis-cli -p "$port" config get dir 2>/dev/null | tail -n 1)" = \
                 "$(cd "$dir" && pwd -P)" ]; then
                RP=$port
                rcli -x FUNCTION LOAD REPLACE <"$LUA_LIB" >/dev/null || die "cannot load $LUA_LIB"
                rcli -x FUNCTION LOAD REPLACE <bench/min_claim.lua >/dev/null ||
                    die "cannot load bench/min_claim.lua"
                rcli -x FUNCTION LOAD REPLACE <bench/claim_steps.lua >/dev/null ||
                    die "cannot load bench/claim_steps.lua"
                return 0
            fi
            sleep 0.1
        done
        stop_pid "$redis_pid"
        forget_pid "$redis_pid"
        redis_pid=""
    done
    die "redis-server did not start (see $dir/redis.log)"
}

# Forgets a stopped server, so that its pid, once reused, is never ours again.
forget_pid() {
    # shellcheck disable=SC2086 # one pid per word
    SERVER_PIDS=$(printf '%s\n' $SERVER_PIDS | grep -vx "$1" | tr '\n' ' ')
}

stop_redis() {
    stop_pid "$redis_pid"
    forget_pid "$redis_pid"
    redis_pid=""
}

start_retryd() {            # start_retryd [FLAG...]: later flags override these
    local port
    for _ in 1 2 3; do
        port=$(free_port) || die "no free port"
        "$RETRYD_BIN" --listen "127.0.0.1:$port" --redis "redis://127.0.0.1:$RP" \
            --prefix "$PREFIX" --tick-ms 250 --log-level warn --max-body 4194304 "$@" \
            >>"$tmp/retryd.log" 2>&1 &
        retryd_pid=$!
        SERVER_PIDS="$SERVER_PIDS $retryd_pid"
        if http_ready "$port" 100 "$retryd_pid"; then
            HP=$port
            return 0
        fi
        stop_pid "$retryd_pid"
        forget_pid "$retryd_pid"
        retryd_pid=""
    done
    tail -n 20 "$tmp/retryd.log" >&2
    die "retryd did not become ready"
}

stop_retryd() {
    stop_pid "$retryd_pid"
    forget_pid "$retryd_pid"
    retryd_pid=""
}

# ---------------------------------------------------------------------------
# Measurements: Redis CPU, per-command stats, memory, retryd CPU
# ---------------------------------------------------------------------------
# Redis CPU (user + sys) in microseconds.
redis_cpu_us() {
    rcli info cpu | tr -d '\r' | awk -F: '$1=="used_cpu_user"||$1=="used_cpu_sys"{s+=$2}
        END{printf "%.0f", s*1e6}'
}

# "calls usec" of one command (cmdstat_<name>), 0 0 before its first call.
cmdstat() {
    rcli info commandstats | tr -d '\r' | awk -v n="cmdstat_$1" -F'[:=,]' '
        $1==n { print $3, $5; found=1 } END { if (!found) print 0, 0 }'
}

used_memory() {
    rcli info memory | tr -d '\r' | awk -F: '$1=="used_memory"{print $2}'
}

# CPU time of a process (utime + stime) in microseconds.
proc_cpu_us() {
    awk -v t="$CLK_TCK" '{ sub(/^.*\) /, ""); printf "%.0f", ($12 + $13) * 1e6 / t }' \
        "/proc/$1/stat" 2>/dev/null || echo 0
}

# Busy CPU of the whole machine (user, nice, system, irq, softirq) and steal,
# in microseconds: "busy steal".
machine_cpu_us() {
    awk -v t="$CLK_TCK" '$1 == "cpu" { printf "%.0f %.0f", ($2 + $3 + $4 + $7 + $8) * 1e6 / t,
        $9 * 1e6 / t; exit }' /proc/stat
}

# Sets OUR_CPU_US: the CPU of everything this script started, reaped children
# (bash's times) plus the servers still running. Call it in this shell, not in
# $(...): a subshell's times knows none of our children.
our_cpu_now() {
    local live=0 pid
    times >"$tmp/times"
    for pid in $SERVER_PIDS $bg_pid; do live=$((live + $(proc_cpu_us "$pid"))); done
    OUR_CPU_US=$(tail -n 1 "$tmp/times" | awk -v live="$live" '{ t = 0
        for (i = 1; i <= 2; i++) { f = $i; sub(/s$/, "", f); split(f, a, "m"); t += a[1] * 60 + a[2] }
        printf "%.0f", t * 1e6 + live }')
}

# sec_begin NAME / sec_end: what the machine did during one section.
ENV_ROWS=()
sec_begin() {
    SEC_NAME=$1
    SEC_T0=$(date +%s.%N)
    SEC_M0=$(machine_cpu_us)
    SEC_LA0=$(cut -d' ' -f1 /proc/loadavg)
    our_cpu_now
    SEC_O0=$OUR_CPU_US
}
sec_end() {
    local t1 m1 o1
    t1=$(date +%s.%N)
    m1=$(machine_cpu_us)
    our_cpu_now
    o1=$OUR_CPU_US
    ENV_ROWS+=("$(awk -v n="$SEC_NAME" -v t0="$SEC_T0" -v t1="$t1" -v m0="$SEC_M0" -v m1="$m1" \
        -v o0="$SEC_O0" -v o1="$o1" -v la="$SEC_LA0 -> $(cut -d' ' -f1 /proc/loadavg)" 'BEGIN { split(m0, a, " "); split(m1, b, " "); w = t1 - t0
        ours = (o1 - o0) / 1e6 / w; others = (b[1] - a[1] - (o1 - o0)) / 1e6 / w
        if (others < 0) others = 0
        printf "%s (%.0f s; load average %s)|%.2f|%.2f|%.2f", n, w, la, ours, others,
            (b[2] - a[2]) / 1e6 / w }')")
}

environment() {
    local r
    table_start "0. The machine during each section (cores busy on average; 2 cores in all)" \
        "section (wall time)" "our processes" "other processes" "steal"
    for r in "${ENV_ROWS[@]}"; do
        IFS='|' read -r a b c d <<<"$r"
        row "$a" "$b" "$c" "$d"
    done
}

# Floating point in awk: calc 'expr' with $1.. as arguments.
calc() {
    local expr=$1
    shift
    awk "BEGIN { printf \"%s\", ($expr) }" 2>/dev/null
}
# Numbers with d decimals (fmt), with thousands separators (fmt_int), or as
# a ratio "1.23x" (fmtx); anything that is not a number passes through.
fmt() { awk -v x="$1" -v d="${2:-1}" 'BEGIN { if (x == "") print "n/a";
    else if (x !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) print x; else printf "%.*f", d, x }'; }
fmtx() { local v; v=$(fmt "$1" 2); case "$v" in n/a|*[!0-9.-]*) echo "$v" ;; *) echo "${v}x" ;; esac; }
fmt_int() { awk -v x="$1" 'BEGIN { if (x == "") { print "n/a"; exit }
    if (x !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) { print x; exit }
    s = sprintf("%.0f", x); o = ""; n = length(s)
    for (i = 1; i <= n; i++) { o = o substr(s, i, 1); if ((n - i) % 3 == 0 && i < n) o = o "," }
    print o }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { num = "^-?[0-9.]+([eE][-+]?[0-9]+)?$"
    if (a !~ num || b !~ num || b + 0 == 0) print "n/a"; else printf "%.2fx", a / b }'; }
median() { printf '%s\n' "$@" | grep -v '^n/a$' | grep -v '^$' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else print v[int((NR + 1) / 2)] }'; }
# Field k=v of a key=value line.
kv() { printf '%s\n' "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1==k{print $2; exit}'; }

# ---------------------------------------------------------------------------
# Result store and tables
# ---------------------------------------------------------------------------
declare -A V         # V[name.rep] = value; V[name] = median over reps
rows=0 missing=0

put() { V["$1"]=$2; }
get() { local v=${V["$1"]:-}; [ -n "$v" ] && echo "$v" || echo "n/a"; }
# Median over repetitions of name.1 .. name.REPS into name.
settle() {
    local name=$1 r vals=()
    for r in $(seq 1 "$REPS"); do vals+=("$(get "$name.$r")"); done
    V["$name"]=$(median "${vals[@]}")
}

table_start() {
    printf '\n### %s\n\n' "$1"
    printf '| %s | %s | %s | %s |\n|---|---:|---:|---:|\n' "${2:-figure}" "${3:-retryd}" \
        "${4:-reference}" "${5:-ratio}"
}
row() {
    rows=$((rows + 1))
    case "$2" in ''|n/a*) missing=$((missing + 1)) ;; esac
    printf '| %s | %s | %s | %s |\n' "$1" "${2:-n/a}" "${3:-}" "${4:-}"
}

# ---------------------------------------------------------------------------
# Runners
# ---------------------------------------------------------------------------
# rb NAME CMDSTAT N CLIENTS PIPELINE ARG...: one redis-benchmark run; stores
# NAME.rps, NAME.us (Redis usec per call, commandstats delta) and NAME.p50/p99 (ms).
rb() {
    local name=$1 stat=$2 n=$3 c=$4 p=$5
    shift 5
    local s0 s1 out
    s0=$(cmdstat "$stat")
    out=$(redis-benchmark -p "$RP" -n "$n" -c "$c" -P "$p" --csv "$@" 2>/dev/null | tail -n 1)
    s1=$(cmdstat "$stat")
    put "$name.rps" "$(printf '%s' "$out" | awk -F'","' '{print $2}')"
    put "$name.p50" "$(printf '%s' "$out" | awk -F'","' '{print $5}')"
    put "$name.p99" "$(printf '%s' "$out" | awk -F'","' '{print $7}')"
    put "$name.us" "$(awk -v a="$s0" -v b="$s1" 'BEGIN { split(a, x, " "); split(b, y, " ")
        if (y[1] > x[1]) printf "%.2f", (y[2] - x[2]) / (y[1] - x[1]); else print "n/a" }')"
}

# lg_resp NAME CMDSTAT N CLIENTS PIPELINE FIRST_ID ARG...: the same through
# loadgen's RESP mode (for commands that need a distinct id each time).
lg_resp() {
    local name=$1 stat=$2 n=$3 c=$4 p=$5 first=$6
    shift 6
    local s0 s1 out
    s0=$(cmdstat "$stat")
    out=$("$LOADGEN" resp --port "$RP" --conns "$c" --pipeline "$p" --requests "$n" \
          --first-id "$first" -- "$@" 2>>"$tmp/loadgen.err")
    s1=$(cmdstat "$stat")
    local head
    head=$(printf '%s\n' "$out" | grep '^mode=')
    put "$name.rps" "$(kv "$head" msgs_per_s)"
    put "$name.secs" "$(kv "$head" seconds)"
    put "$name.moved" "$(kv "$(printf '%s\n' "$out" | grep '^replies')" first_int_sum)"
    put "$name.us" "$(awk -v a="$s0" -v b="$s1" 'BEGIN { split(a, x, " "); split(b, y, " ")
        if (y[1] > x[1]) printf "%.2f", (y[2] - x[2]) / (y[1] - x[1]); else print "n/a" }')"
    put "$name.usec_total" "$(awk -v a="$s0" -v b="$s1" 'BEGIN { split(a, x, " ");
        split(b, y, " "); print y[2] - x[2] }')"
}

# lg_http NAME MODE QUEUE CONNS MESSAGES [ARG...]: one loadgen HTTP run (to
# 127.0.0.1:$HP, or $LG_PORT when set: the SQS modes' endpoint) with
# Redis and retryd CPU per message; stores NAME.rate, NAME.<route>.p50/p99 (ms),
# NAME.redis_us, NAME.retryd_us, NAME.retry_p50/p99 (ms). MODE node-work and
# node-settle run the same loops with bench/http_worker.mjs (node's http)
# instead of loadgen.
lg_http() {
    local name=$1 mode=$2 q=$3 conns=$4 n=$5
    shift 5
    local r0 d0 r1 d1 out line route
    local client=("$LOADGEN" "$mode")
    case $mode in node-*) client=(node bench/http_worker.mjs --mode "${mode#node-}") ;; esac
    r0=$(redis_cpu_us)
    d0=$(proc_cpu_us "$retryd_pid")
    out=$("${client[@]}" --port "${LG_PORT:-$HP}" --queue "$q" --conns "$conns" --messages "$n" "$@" \
          2>>"$tmp/loadgen.err")
    r1=$(redis_cpu_us)
    d1=$(proc_cpu_us "$retryd_pid")
    line=$(printf '%s\n' "$out" | grep '^mode=')
    if [ -z "$line" ]; then
        say "loadgen $mode failed: $(tail -n 1 "$tmp/loadgen.err")"
        return 1
    fi
    put "$name.rate" "$(kv "$line" msgs_per_s)"
    put "$name.client_us" "$(calc "$(kv "$line" cpu_us) / $n")"
    put "$name.redis_us" "$(calc "($r1 - $r0) / $n")"
    put "$name.retryd_us" "$(calc "($d1 - $d0) / $n")"
    while read -r line; do
        route=$(kv "$line" route)
        put "$name.$route.p50" "$(calc "$(kv "$line" p50_us) / 1000")"
        put "$name.$route.p99" "$(calc "$(kv "$line" p99_us) / 1000")"
    done < <(printf '%s\n' "$out" | grep '^route=')
    line=$(printf '%s\n' "$out" | grep '^retry_latency')
    if [ -n "$line" ]; then
        put "$name.retry_p50" "$(kv "$line" p50_ms)"
        put "$name.retry_p99" "$(kv "$line" p99_ms)"
        put "$name.retry_n" "$(kv "$line" n)"
    fi
}

enqueue_fcall() {   # enqueue_fcall BASE N [DELAY_MS]: untimed fill through redis-benchmark
    redis-benchmark -p "$RP" -n "$2" -c 8 -P 32 -q FCALL "${FN}enqueue" 1 "$1" "$PAYLOAD" 3 \
        "${3:-0}" >/dev/null 2>&1
}
# A queue's key base, "<prefix>:{<escaped name>}", as retryctl spells it
# (rd_base, the one shell copy of src/keys.c's escape).
base() {
    local RD_PREFIX=$PREFIX
    rd_base "$1"
    echo "$REPLY"
}

# fill_minclaim BASE N: N ready ids for min_claim, each with the message HASH
# retryd_v2's enqueue wrote (the layout min_claim's HSET was measured on in
# every earlier run; retryd's own records are STRINGs since retryd_v3).
fill_minclaim() {
    local i
    for ((i = 0; i < $2; i += 10000)); do
        rcli eval "for id = tonumber(ARGV[1]) + 1, tonumber(ARGV[2]) do
            redis.call('HSET', KEYS[1] .. ':m:' .. id, 'payload', ARGV[3], 'status', 'pending',
                       'retry_count', 0, 'max_retries', 3, 'created_at', ARGV[4],
                       'updated_at', ARGV[4])
            redis.call('LPUSH', KEYS[1] .. ':ready', id)
        end" 1 "$1" "$i" "$((i + 10000 < $2 ? i + 10000 : $2))" "$PAYLOAD" 1796000000000 >/dev/null
    done
}

# ---------------------------------------------------------------------------
# 1. Redis-native path
# ---------------------------------------------------------------------------
section1_rep() {
    local rep=$1 p q qm qf
    for p in 1 16; do
        q=$(base "s1-$p-$rep"); qm=$(base "s1m-$p-$rep"); qf=$(base "s1f-$p-$rep")
        rb "enqueue.p$p.$rep" fcall "$N_RB" 50 "$p" FCALL "${FN}enqueue" 1 "$q" "$PAYLOAD" 3 0
        fill_minclaim "$qm" "$N_RB"
        enqueue_fcall "$qf" "$N_RB"
        rb "claim.p$p.$rep" fcall "$N_RB" 50 "$p" FCALL "${FN}claim" 1 "$q" 30000 1
        rb "minclaim.p$p.$rep" fcall "$N_RB" 50 "$p" FCALL min_claim 1 "$qm" 9999999999999
        lg_resp "succeed.p$p.$rep" fcall "$N_RB" 50 "$p" 1 \
            FCALL "${FN}succeed" 2 "$q" "$q:m:{id}" "{id}" ""
        redis-benchmark -p "$RP" -n $((N_RB / 100)) -c 1 -q FCALL "${FN}claim" 1 "$qf" 30000 100 \
            >/dev/null 2>&1
        lg_resp "fail.p$p.$rep" fcall "$N_RB" 50 "$p" 1 \
            FCALL "${FN}fail" 2 "$qf" "$qf:m:{id}" "{id}" "" "bench failure" 1 0
        # Every failure is due now: promote moves them, 100 per call.
        local d0 d1
        d0=$(rcli llen "$qf:3:due")
        rb "promote.p$p.$rep" fcall $((N_RB / 100)) 4 "$p" FCALL "${FN}promote" 1 "$qf" 100
        d1=$(rcli llen "$qf:3:due")
        put "promote.p$p.$rep.moved" $((d1 - d0))
        put "promote.p$p.$rep.msgs" "$(calc "$(get "promote.p$p.$rep.rps") * ($d1 - $d0) / ($N_RB / 100)")"
        put "promote.p$p.$rep.usmsg" "$(calc "$(get "promote.p$p.$rep.us") * ($N_RB / 100) / ($d1 - $d0)")"
        rb "lpush.p$p.$rep" lpush "$N_RB" 50 "$p" LPUSH "$PREFIX:raw:$p:$rep" 1234567
        rb "rpop.p$p.$rep" rpop "$N_RB" 50 "$p" RPOP "$PREFIX:raw:$p:$rep"
        rb "zadd.p$p.$rep" zadd "$N_RB" 50 "$p" -r 100000000 \
            ZADD "$PREFIX:raw:z:$p:$rep" __rand_int__ __rand_int__
        rb "hset.p$p.$rep" hset "$N_RB" 50 "$p" -r 100000000 \
            HSET "$PREFIX:raw:h:__rand_int__" status processing
        # The two tools agree? enqueue through loadgen's RESP mode as well.
        lg_resp "lgenqueue.p$p.$rep" fcall "$N_RB" 50 "$p" 1 \
            FCALL "${FN}enqueue" 1 "$(base "s1x-$p-$rep")" "$PAYLOAD" 3 0
        rcli flushall >/dev/null  # functions stay; keeps memory flat between reps
    done
}

section1() {
    local rep p f
    for rep in $(seq 1 "$REPS"); do
        say "1. Redis-native path, repetition $rep of $REPS"
        section1_rep "$rep"
    done
    for p in 1 16; do
        for f in enqueue claim minclaim succeed fail promote lpush rpop zadd hset lgenqueue; do
            for m in rps us p50 p99 msgs usmsg; do
                local r vals=()
                for r in $(seq 1 "$REPS"); do vals+=("$(get "$f.p$p.$r.$m")"); done
                V["$f.p$p.$m"]=$(median "${vals[@]}")
            done
        done
    done
    local mc="median of $REPS"
    [ "$REPS" = 1 ] && mc="1 run"
    table_start "1. Redis-native path: FCALL through redis-benchmark -c 50 ($mc, $N_RB calls each)" \
        figure retryd reference ratio
    for p in 1 16; do
        row "enqueue -P $p (calls/s) vs raw LPUSH" "$(fmt_int "$(get enqueue.p$p.rps)")" \
            "$(fmt_int "$(get lpush.p$p.rps)")" "$(ratio "$(get enqueue.p$p.rps)" "$(get lpush.p$p.rps)")"
        row "claim -P $p (calls/s) vs minimal Lua claim (RPOP+HSET+ZADD)" \
            "$(fmt_int "$(get claim.p$p.rps)")" "$(fmt_int "$(get minclaim.p$p.rps)")" \
            "$(ratio "$(get claim.p$p.rps)" "$(get minclaim.p$p.rps)")"
        row "claim -P $p (calls/s) vs raw RPOP" "$(fmt_int "$(get claim.p$p.rps)")" \
            "$(fmt_int "$(get rpop.p$p.rps)")" "$(ratio "$(get claim.p$p.rps)" "$(get rpop.p$p.rps)")"
        row "succeed -P $p (calls/s, loadgen resp) vs raw ZADD" "$(fmt_int "$(get succeed.p$p.rps)")" \
            "$(fmt_int "$(get zadd.p$p.rps)")" "$(ratio "$(get succeed.p$p.rps)" "$(get zadd.p$p.rps)")"
        row "fail -P $p (calls/s, loadgen resp) vs raw HSET" "$(fmt_int "$(get fail.p$p.rps)")" \
            "$(fmt_int "$(get hset.p$p.rps)")" "$(ratio "$(get fail.p$p.rps)" "$(get hset.p$p.rps)")"
        row "promote -P $p, limit 100 (messages moved/s)" "$(fmt_int "$(get promote.p$p.msgs)")" \
            "" ""
        row "tool check: enqueue -P $p through loadgen resp vs redis-benchmark" \
            "$(fmt_int "$(get lgenqueue.p$p.rps)")" "$(fmt_int "$(get enqueue.p$p.rps)")" \
            "$(ratio "$(get lgenqueue.p$p.rps)" "$(get enqueue.p$p.rps)")"
    done
    table_start "1b. Redis CPU per call (INFO commandstats usec_per_call, -P 16 runs)" \
        figure "retryd (µs)" "reference (µs)" ratio
    row "enqueue vs LPUSH" "$(get enqueue.p16.us)" "$(get lpush.p16.us)" \
        "$(ratio "$(get enqueue.p16.us)" "$(get lpush.p16.us)")"
    row "claim vs minimal Lua claim" "$(get claim.p16.us)" "$(get minclaim.p16.us)" \
        "$(ratio "$(get claim.p16.us)" "$(get minclaim.p16.us)")"
    row "claim vs RPOP" "$(get claim.p16.us)" "$(get rpop.p16.us)" \
        "$(ratio "$(get claim.p16.us)" "$(get rpop.p16.us)")"
    row "succeed vs ZADD" "$(get succeed.p16.us)" "$(get zadd.p16.us)" \
        "$(ratio "$(get succeed.p16.us)" "$(get zadd.p16.us)")"
    row "fail vs HSET" "$(get fail.p16.us)" "$(get hset.p16.us)" \
        "$(ratio "$(get fail.p16.us)" "$(get hset.p16.us)")"
    row "promote, per message moved (limit 100)" "$(fmt "$(get promote.p16.usmsg)" 2)" "" ""
    row "lifecycle enqueue + claim + succeed" \
        "$(calc "$(get enqueue.p16.us) + $(get claim.p16.us) + $(get succeed.p16.us)")" \
        "$(calc "$(get lpush.p16.us) + $(get minclaim.p16.us) + $(get zadd.p16.us)")" \
        "$(ratio "$(calc "$(get enqueue.p16.us) + $(get claim.p16.us) + $(get succeed.p16.us)")" \
                 "$(calc "$(get lpush.p16.us) + $(get minclaim.p16.us) + $(get zadd.p16.us)")")"
}

# Where a claim's Redis time goes: bench/claim_steps.lua adds claim's pieces
# one at a time; each step runs N_RB calls at -P 16 on a fresh queue.
section1c() {
    say "1c. claim, step by step"
    local i q prev="" names=(
        "RPOP + SETRANGE of claim's 15 header bytes + ZADD, reply the id"
        "+ now from TIME"
        "+ queue_keys(): 11 key names per call"
        "+ promote_due(): ZRANGE of due scheduled ids"
        "+ RPOP of the due list first"
        "+ claimed serial (HGET, HINCRBY stats)"
        "+ GET of the record, header decoded"
        "+ the whole message in the reply")
    # Every step and the claim itself in turn, REPS times; medians.
    local rep n=$((N_RB / 2)) vals
    for rep in $(seq 1 "$REPS"); do
        for i in 0 1 2 3 4 5 6 7 claim; do
            q=$(base "steps-$i-$rep")
            enqueue_fcall "$q" "$n"
            if [ "$i" = claim ]; then
                rb "stepclaim.$rep" fcall "$n" 50 16 FCALL "${FN}claim" 1 "$q" 30000 1
            else
                rb "step$i.$rep" fcall "$n" 50 16 FCALL "claim_step$i" 1 "$q"
            fi
        done
        rcli flushall >/dev/null
    done
    for i in 0 1 2 3 4 5 6 7 claim; do
        vals=()
        for rep in $(seq 1 "$REPS"); do vals+=("$(get "step$i.$rep.us")"); done
        put "step$i.us" "$(median "${vals[@]}")"
    done
    local mc="median of $REPS"
    [ "$REPS" = 1 ] && mc="1 run"
    table_start "1c. Where a claim's Redis time goes (bench/claim_steps.lua, -P 16, $((N_RB / 2)) calls, $mc, commandstats)" \
        "step (cumulative)" "µs per call" "µs added" "share of claim"
    row "min_claim (RPOP + HSET of 2 fields + ZADD), from 1b" "$(get minclaim.p16.us)" "" \
        "$(ratio "$(get minclaim.p16.us)" "$(get stepclaim.us)")"
    for i in 0 1 2 3 4 5 6 7; do
        local added=""
        [ -n "$prev" ] && added=$(fmt "$(calc "$(get "step$i.us") - $prev")" 2)
        row "${names[$i]}" "$(get "step$i.us")" "$added" \
            "$(ratio "$(get "step$i.us")" "$(get stepclaim.us)")"
        prev=$(get "step$i.us")
    done
    row "retryd's claim (count 1)" "$(get stepclaim.us)" \
        "$(fmt "$(calc "$(get stepclaim.us) - $prev")" 2)" "1.00x"
}

# What a queue policy costs a claim (docs/flow-control.md): the same claim on
# a queue with no policy, with a max_in_flight that is never reached (the
# cap's ZCARD every call), and with a rate limit that always has tokens (the
# bucket's read and write every call). -P 16, N_RB/2 calls each, medians.
section1d() {
    say "1d. claim with a queue policy"
    local rep kind q n=$((N_RB / 2)) vals
    for rep in $(seq 1 "$REPS"); do
        for kind in none cap rate; do
            q=$(base "policy-$kind-$rep")
            enqueue_fcall "$q" "$n"
            case $kind in
            cap) rcli FCALL "${FN}policy_set" 1 "$q" replace max_in_flight 1000000 >/dev/null ;;
            rate) rcli FCALL "${FN}policy_set" 1 "$q" replace rate_limit.per_second 100000 \
                      rate_limit.burst 100000 >/dev/null ;;
            esac
            rb "pclaim.$kind.$rep" fcall "$n" 50 16 FCALL "${FN}claim" 1 "$q" 30000 1
        done
        rcli flushall >/dev/null
    done
    for kind in none cap rate; do
        vals=()
        for rep in $(seq 1 "$REPS"); do vals+=("$(get "pclaim.$kind.$rep.us")"); done
        put "pclaim.$kind.us" "$(median "${vals[@]}")"
    done
    local mc="median of $REPS"
    [ "$REPS" = 1 ] && mc="1 run"
    table_start "1d. claim with a queue policy (-P 16, $n calls, $mc, commandstats)" \
        figure "µs per call" "no policy (µs)" ratio
    row "claim, no policy" "$(get pclaim.none.us)" "" ""
    row "claim, max_in_flight 1000000 (never reached)" "$(get pclaim.cap.us)" \
        "$(get pclaim.none.us)" "$(ratio "$(get pclaim.cap.us)" "$(get pclaim.none.us)")"
    row "claim, rate_limit 100000/s burst 100000 (tokens left)" "$(get pclaim.rate.us)" \
        "$(get pclaim.none.us)" "$(ratio "$(get pclaim.rate.us)" "$(get pclaim.none.us)")"
}

# ---------------------------------------------------------------------------
# 1p. Priorities (docs/lifecycle.md "Priority: one more command, only where used")
# ---------------------------------------------------------------------------
# Redis commands per claim of count 1 (INFO commandstats: every command but
# FCALL, CONFIG and INFO, over N claims with timer hints) on three queues: one
# that never used priorities, one whose messages all have priority 5 (the
# lane's ZPOPMIN takes each), and one that used priorities but whose messages
# are priority 0 (each claim pops the empty lane, then the lists: the one
# command more); then redis-server's instructions per such claim under
# callgrind (bench/callgrind_claim.sh PRIORITY=, 2,000 claims: about 3 min,
# so only with BENCH_ONLY=1p or CALLGRIND=1, never in QUICK, and only where
# valgrind is installed; the full run keeps its 10 minutes).
section1p() {
    say "1p. priorities"
    local kind q n=$((N_RB / 4)) calls prio
    for kind in none lane lists; do
        q=$(base "prio-$kind")
        local fill=()
        case $kind in
        none) prio="" ;;
        lane) prio=5; fill=('' 1 default '' 5) ;;
        lists) prio=0
            rcli FCALL "${FN}enqueue" 1 "$q" marker 3 0 '' 1 default '' 1 >/dev/null
            rcli FCALL "${FN}claim" 1 "$q" 30000 1 1 >/dev/null ;;
        esac
        redis-benchmark -p "$RP" -n "$n" -c 8 -P 32 -q FCALL "${FN}enqueue" 1 "$q" "$PAYLOAD" 3 0 \
            "${fill[@]}" >/dev/null 2>&1
        rcli config resetstat >/dev/null
        redis-benchmark -p "$RP" -n "$n" -c 4 -P 16 -q FCALL "${FN}claim" 1 "$q" 30000 1 1 \
            >/dev/null 2>&1
        calls=$(rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '
            /^cmdstat_/ && $1 != "cmdstat_fcall" && $1 != "cmdstat_config" &&
            $1 != "cmdstat_info" { s += $3 } END { print s + 0 }')
        put "prio.$kind.cmds" "$(calc "$calls / $n")"
        if [ "$QUICK" = 1 ]; then
            put "prio.$kind.ir" "skipped (QUICK)"
        elif [ "${BENCH_ONLY:-}" != 1p ] && [ "${CALLGRIND:-0}" != 1 ]; then
            put "prio.$kind.ir" "skipped (BENCH_ONLY=1p runs it)"
        elif ! command -v valgrind >/dev/null; then
            put "prio.$kind.ir" "skipped (no valgrind)"
        else
            local out
            out=$(PRIORITY=$prio bench/callgrind_claim.sh "$LUA_LIB" claim 2000 1 2>&1)
            put "prio.$kind.ir" "$(printf '%s\n' "$out" | awk '/instructions per call/ { print $2; exit }')"
        fi
    done
    rcli flushall >/dev/null
    table_start "1p. claim with and without priorities (-P 16, $n claims of 1, commandstats; callgrind, 2,000 claims)" \
        queue "Redis commands per claim" "instructions per claim" "instructions vs never used"
    row "never used priorities" "$(fmt "$(get prio.none.cmds)" 2)" "$(get prio.none.ir)" ""
    row "every message priority 5 (the lane)" "$(fmt "$(get prio.lane.cmds)" 2)" \
        "$(get prio.lane.ir)" "$(ratio "$(get prio.lane.ir)" "$(get prio.none.ir)")"
    row "used priorities, every message priority 0 (empty lane, then the lists)" \
        "$(fmt "$(get prio.lists.cmds)" 2)" "$(get prio.lists.ir)" \
        "$(ratio "$(get prio.lists.ir)" "$(get prio.none.ir)")"
}

# ---------------------------------------------------------------------------
# 1h. The history's cost on the happy path (docs/reference.md "History", docs/dead-letters.md §1)
# ---------------------------------------------------------------------------
# hist_pipe KIND BASE N [WORKER]: N FCALLs of one kind (claim, succeed of ids
# 1..N, fail of ids 1..N) written as RESP and sent with redis-cli --pipe.
hist_pipe() {
    LC_ALL=C awk -v kind="$1" -v b="$2" -v n="$3" -v fn="$FN" -v w="${4:-}" '
        function emit(k,  i) { printf "*%d\r\n", k
            for (i = 1; i <= k; i++) printf "$%d\r\n%s\r\n", length(a[i]), a[i] }
        BEGIN { for (id = 1; id <= n; id++) {
            a[1] = "FCALL"; a[3] = 1; a[4] = b
            if (kind == "claim") { a[2] = fn "claim"; a[3] = 1; a[5] = 30000; a[6] = 1
                if (w == "") emit(6); else { a[7] = ""; a[8] = "request"; a[9] = w; emit(9) } }
            else { a[2] = fn kind; a[3] = 2; a[5] = b ":m:" id; a[6] = id; a[7] = ""
                if (kind == "succeed") emit(7); else { a[8] = "boom"; a[9] = 1; a[10] = 0; emit(10) } }
        } }' | redis-cli -p "$RP" --pipe >/dev/null 2>&1
}

# hist_run NAME MODE N: one lifecycle run. MODE plain: N fresh messages;
# history: N messages that failed once (claimed, failed with retry at once,
# promoted, all untimed); worker: fresh ones claimed with a worker. Timed: N
# claims then N succeeds; NAME.us = Redis µs per claim+succeed (commandstats
# of FCALL), NAME.cpu = Redis CPU µs per claim+succeed (INFO cpu, user + sys:
# less inflated than the former when other processes take the cores),
# NAME.bytes = STRLEN of message 1 before the claim.
hist_run() {
    local name=$1 mode=$2 n=$3 q s0 s1
    q=$(base "hist-$name")
    enqueue_fcall "$q" "$n"
    if [ "$mode" = history ]; then
        hist_pipe claim "$q" "$n"
        hist_pipe fail "$q" "$n"
        while [ "$(rcli FCALL "${FN}promote" 1 "$q" 1000 | head -n 1)" != 0 ]; do :; done
    fi
    put "$name.bytes" "$(rcli strlen "$q:m:1")"
    local c0 c1
    c0=$(redis_cpu_us)
    s0=$(cmdstat fcall)
    if [ "$mode" = worker ]; then hist_pipe claim "$q" "$n" "bench-host/12345"
    else hist_pipe claim "$q" "$n"; fi
    hist_pipe succeed "$q" "$n"
    s1=$(cmdstat fcall)
    c1=$(redis_cpu_us)
    put "$name.cpu" "$(awk -v a="$c0" -v b="$c1" -v n="$n" 'BEGIN { printf "%.2f", (b - a) / n }')"
    put "$name.us" "$(awk -v a="$s0" -v b="$s1" -v n="$n" 'BEGIN { split(a, x, " "); split(b, y, " ")
        if (y[1] - x[1] != 2 * n) print "n/a"; else printf "%.2f", (y[2] - x[2]) / n }')"
    rcli del "$q:3:succeeded" "$q:3:processing" >/dev/null
    rcli eval "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('UNLINK', k) end" 0 \
        "$q:*" >/dev/null
}

section1h() {
    say "1h. history: claim+succeed with and without a history"
    local rep n=$((N_RB / 2)) m order=(plain history worker)
    # One untimed run first (the keyspace grows and rehashes once), then the
    # three kinds in turn, REPS times, each repetition starting with the next
    # kind (so none is always first); medians.
    hist_run hwarm plain "$n"
    for rep in $(seq 1 "$REPS"); do
        for m in "${order[@]}"; do hist_run "h$m.$rep" "$m" "$n"; done
        order=("${order[@]:1}" "${order[0]}")
    done
    for m in plain history worker; do
        local vals=()
        for rep in $(seq 1 "$REPS"); do vals+=("$(get "h$m.$rep.us")"); done
        put "h$m.us" "$(median "${vals[@]}")"
        vals=()
        for rep in $(seq 1 "$REPS"); do vals+=("$(get "h$m.$rep.cpu")"); done
        put "h$m.cpu" "$(fmt "$(median "${vals[@]}")" 2)"
        put "h$m.bytes" "$(get "h$m.1.bytes")"
    done
    local mc="median of $REPS alternating runs"
    [ "$REPS" = 1 ] && mc="1 run"
    table_start "1h. History (docs/reference.md#history): Redis per claim+succeed lifecycle ($n each, pipelined, $mc)" \
        "messages (record bytes before the claim)" "µs (commandstats of FCALL)" "Redis CPU µs (INFO cpu)" \
        "commandstats vs never failed"
    row "never failed, claimed without a worker: the happy path ($(get hplain.bytes))" \
        "$(get hplain.us)" "$(get hplain.cpu)" "1.00x"
    row "failed once before: one history entry in the trailer ($(get hhistory.bytes))" \
        "$(get hhistory.us)" "$(get hhistory.cpu)" "$(ratio "$(get hhistory.us)" "$(get hplain.us)")"
    row "never failed, claimed with a 16-byte worker: the claim rewrites the record ($(get hworker.bytes))" \
        "$(get hworker.us)" "$(get hworker.cpu)" "$(ratio "$(get hworker.us)" "$(get hplain.us)")"
}

# ---------------------------------------------------------------------------
# 2. HTTP path (and retryd's side of 3)
# ---------------------------------------------------------------------------
# One repetition of section 2, with BullMQ's runs of section 3 between its
# parts: each worker loop of retryd is followed at once by the BullMQ Worker
# it is compared with, so that the two see the same machine (other load comes
# and goes; the workload is measured as "3 runs alternating the two systems"). Every
# timed worker run starts with its messages enqueued (untimed).
section23_rep() {
    local rep=$1 q
    # W=50, one message per request, both ways; then BullMQ c=50.
    q="h-enq-$rep"
    lg_http "http.enqueue.$rep" enqueue "$q" 50 "$N_HTTP"
    lg_http "http.w50c1.$rep" work "$q" 50 "$N_HTTP" --count 1
    q="h-settle-$rep"
    lg_http "http.enqueue_s.$rep" enqueue "$q" 50 "$N_HTTP"
    lg_http "http.s50c1.$rep" settle "$q" 50 "$N_HTTP" --count 1
    # The same two loops with a worker written in node (bench/http_worker.mjs).
    if [ "$NODE_OK" = 1 ]; then
        q="h-node-$rep"
        lg_http "http.enqueue_n.$rep" enqueue "$q" 50 "$N_NODE"
        lg_http "http.n50c1.$rep" node-work "$q" 50 "$N_NODE"
        q="h-nodes-$rep"
        lg_http "http.enqueue_ns.$rep" enqueue "$q" 50 "$N_NODE"
        lg_http "http.n50s1.$rep" node-settle "$q" 50 "$N_NODE"
    fi
    # The same settle-and-claim loop on a queue of 1,000 fairness groups
    # (docs/fairness.md), its messages enqueued round-robin over the groups.
    q="h-settleg-$rep"
    fill_groups "$(base "$q")" 1000 $((N_HTTP / 1000))
    lg_http "http.s50c1g.$rep" settle "$q" 50 "$N_HTTP" --count 1
    bull_run "$rep" 1000 50 "$N_HTTP"
    # W=1, both ways; then BullMQ c=1.
    q="h-w1-$rep"
    lg_http "http.enqueue_1.$rep" enqueue "$q" 50 "$N_HTTP_W1"
    lg_http "http.w1c1.$rep" work "$q" 1 "$N_HTTP_W1" --count 1
    q="h-settle1-$rep"
    lg_http "http.enqueue_s1.$rep" enqueue "$q" 50 "$N_HTTP_W1"
    lg_http "http.s1c1.$rep" settle "$q" 1 "$N_HTTP_W1" --count 1
    bull_run "$rep" 1000 1 "$N_HTTP_W1"
    # Ten messages per request, both ways; fail once; W=10; then BullMQ's
    # addBulk (N_BULL) and c=10.
    q="h-batch-$rep"
    lg_http "http.enqueue_b.$rep" enqueue "$q" 50 "$N_HTTP"
    lg_http "http.w50c10.$rep" work "$q" 50 "$N_HTTP" --count 10
    q="h-settle10-$rep"
    lg_http "http.enqueue_s10.$rep" enqueue "$q" 50 "$N_HTTP"
    lg_http "http.s50c10.$rep" settle "$q" 50 "$N_HTTP" --count 10
    q="h-fail-$rep"
    lg_http "http.enqueue_f.$rep" enqueue "$q" 50 "$N_HTTP"
    lg_http "http.failonce.$rep" failonce "$q" 50 "$N_HTTP" --retry-after-s 0
    q="h-w10-$rep"
    lg_http "http.enqueue_10.$rep" enqueue "$q" 50 "$N_HTTP"
    lg_http "http.w10c1.$rep" work "$q" 10 "$N_HTTP" --count 1
    bull_run "$rep" "$N_BULL" 10 "$N_HTTP" add
}

settle_http() {
    local k r vals
    for k in $(printf '%s\n' "${!V[@]}" | grep '^http\.' | sed 's/^\(http\.[a-z0-9_]*\)\.[0-9]*\./\1.REP./' |
               grep '\.REP\.' | sort -u); do
        vals=()
        for r in $(seq 1 "$REPS"); do vals+=("$(get "${k/.REP./.$r.}")"); done
        V["${k/.REP./.}"]=$(median "${vals[@]}")
    done
}

ms_pair() { echo "$(fmt "$(get "$1.p50")" 2) / $(fmt "$(get "$1.p99")" 2)"; }

# Sections 2 and 3 run interleaved (section23_rep), so that retryd and
# BullMQ see the same machine.
section23() {
    local rep
    command -v node >/dev/null && NODE_OK=1
    bull_setup
    for rep in $(seq 1 "$REPS"); do
        say "2+3. HTTP path and BullMQ, repetition $rep of $REPS"
        section23_rep "$rep"
    done
    settle_http
    section2_tables
    section3_tables
}

section2_tables() {
    local mc="median of $REPS"
    [ "$REPS" = 1 ] && mc="1 run"
    # The Redis-native reference of a lifecycle: enqueue, claim, succeed at -P 1.
    local native_cs
    native_cs=$(calc "1 / (1 / $(get claim.p1.rps) + 1 / $(get succeed.p1.rps))")
    [ -n "${V[claim.p1.rps]:-}" ] || native_cs="not run (section 1)"
    table_start "2. HTTP path: build/loadgen, keep-alive, $N_HTTP messages of 100 bytes ($mc)" \
        figure retryd reference ratio
    row "enqueue, 50 connections (msgs/s) vs FCALL enqueue -P 1" \
        "$(fmt_int "$(get http.enqueue.rate)")" "$(fmt_int "$(get enqueue.p1.rps)")" \
        "$(ratio "$(get http.enqueue.rate)" "$(get enqueue.p1.rps)")"
    row "enqueue p50 / p99 (ms)" "$(ms_pair http.enqueue.enqueue)" "" ""
    row "claim+succeed, 50 workers, count 1 (msgs/s) vs FCALL claim+succeed -P 1" \
        "$(fmt_int "$(get http.w50c1.rate)")" "$(fmt_int "$native_cs")" \
        "$(ratio "$(get http.w50c1.rate)" "$native_cs")"
    row "  claim p50 / p99 (ms)" "$(ms_pair http.w50c1.claim)" "" ""
    row "  succeed p50 / p99 (ms)" "$(ms_pair http.w50c1.succeed)" "" ""
    row "claim+succeed, 50 workers, count 10 + batch ack (msgs/s) vs count 1" \
        "$(fmt_int "$(get http.w50c10.rate)")" "$(fmt_int "$(get http.w50c1.rate)")" \
        "$(ratio "$(get http.w50c10.rate)" "$(get http.w50c1.rate)")"
    row "  claim (count 10) p50 / p99 (ms)" "$(ms_pair http.w50c10.claim)" "" ""
    row "  batch ack (10) p50 / p99 (ms)" "$(ms_pair http.w50c10.succeed_many)" "" ""
    row "fail once then succeed, 50 workers (msgs/s) vs claim+succeed" \
        "$(fmt_int "$(get http.failonce.rate)")" "$(fmt_int "$(get http.w50c1.rate)")" \
        "$(ratio "$(get http.failonce.rate)" "$(get http.w50c1.rate)")"
    row "  claim p50 / p99 (ms)" "$(ms_pair http.failonce.claim)" "" ""
    row "  fail p50 / p99 (ms)" "$(ms_pair http.failonce.fail)" "" ""
    row "  succeed p50 / p99 (ms)" "$(ms_pair http.failonce.succeed)" "" ""
    row "claim+succeed, 10 workers, count 1 (msgs/s)" "$(fmt_int "$(get http.w10c1.rate)")" "" ""
    row "claim+succeed, 1 worker, count 1 (msgs/s)" "$(fmt_int "$(get http.w1c1.rate)")" "" ""
    row "settle-and-claim, 50 workers, count 1 (msgs/s) vs claim+succeed" \
        "$(fmt_int "$(get http.s50c1.rate)")" "$(fmt_int "$(get http.w50c1.rate)")" \
        "$(ratio "$(get http.s50c1.rate)" "$(get http.w50c1.rate)")"
    row "  settle-and-claim p50 / p99 (ms)" "$(ms_pair http.s50c1.settle_claim)" "" ""
    row "settle-and-claim, 50 workers, count 10 (msgs/s) vs count 10 + batch ack" \
        "$(fmt_int "$(get http.s50c10.rate)")" "$(fmt_int "$(get http.w50c10.rate)")" \
        "$(ratio "$(get http.s50c10.rate)" "$(get http.w50c10.rate)")"
    row "settle-and-claim, 1 worker, count 1 (msgs/s) vs claim+succeed" \
        "$(fmt_int "$(get http.s1c1.rate)")" "$(fmt_int "$(get http.w1c1.rate)")" \
        "$(ratio "$(get http.s1c1.rate)" "$(get http.w1c1.rate)")"
    row "  settle-and-claim p50 / p99 (ms)" "$(ms_pair http.s1c1.settle_claim)" "" ""

    table_start "2b. CPU per message on the HTTP path (INFO cpu, /proc/<pid>/stat and getrusage deltas, $mc)" \
        figure "Redis (µs)" "retryd (µs)" "client (µs)"
    local r n
    for r in "enqueue:enqueue" "w50c1:claim+succeed, count 1" "w50c10:claim+succeed, count 10 + batch ack" \
             "s50c1:settle-and-claim, count 1" "s50c10:settle-and-claim, count 10" \
             "n50c1:claim+succeed, count 1, the worker in node's http module" \
             "n50s1:settle-and-claim, count 1, the worker in node's http module" \
             "failonce:fail once, then claim+succeed (per message)"; do
        n=${r%%:*}
        [ "$NODE_OK" = 1 ] || [ "${n#n50}" = "$n" ] || continue
        row "${r#*:}" "$(fmt "$(get "http.$n.redis_us")" 1)" "$(fmt "$(get "http.$n.retryd_us")" 1)" \
            "$(fmt "$(get "http.$n.client_us")" 1)"
    done
    local e enq work
    for e in "enqueue w50c1:claim + succeed, count 1" \
             "enqueue_b w50c10:claim + succeed, count 10 + batch ack" \
             "enqueue_s s50c1:settle-and-claim, count 1"; do
        read -r enq work <<<"${e%%:*}"
        row "lifecycle enqueue + ${e#*:}" \
            "$(fmt "$(calc "$(get "http.$enq.redis_us") + $(get "http.$work.redis_us")")" 1)" \
            "$(fmt "$(calc "$(get "http.$enq.retryd_us") + $(get "http.$work.retryd_us")")" 1)" \
            "$(fmt "$(calc "$(get "http.$enq.client_us") + $(get "http.$work.client_us")")" 1)"
    done
}

# ---------------------------------------------------------------------------
# 3. BullMQ on the same Redis
# ---------------------------------------------------------------------------
BULL_OK=0
BULL_WHY=""
NODE_OK=0               # node runs bench/http_worker.mjs (no npm packages needed)
bull_setup() {
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        BULL_WHY="node or npm not installed"
        return 1
    fi
    if [ ! -d bench/node_modules/bullmq ]; then
        say "3. installing BullMQ (npm ci --prefix bench)"
        if ! timeout "${BENCH_NPM_TIMEOUT:-180}" npm ci --prefix bench --no-audit --no-fund \
                >"$tmp/npm.log" 2>&1; then
            BULL_WHY="npm ci failed: $(grep -m1 -i 'err' "$tmp/npm.log" | cut -c1-80)"
            rm -rf bench/node_modules
            return 1
        fi
    fi
    BULL_OK=1
}

# bull_run REP JOBS CONCURRENCY WORKER_JOBS [add]: one bench/bullmq_bench.mjs
# run: addBulk of JOBS (recorded as bull.add* when "add" is given), then a
# Worker of CONCURRENCY completing WORKER_JOBS added just before it. Does
# nothing once BullMQ failed (BULL_OK=0, BULL_WHY says why).
bull_run() {
    local rep=$1 jobs=$2 c=$3 n=$4 add=${5:-} out line
    [ "$BULL_OK" = 1 ] || return 0
    say "3. BullMQ Worker concurrency $c, repetition $rep"
    out=$(timeout 300 node bench/bullmq_bench.mjs --port "$RP" --jobs "$jobs" \
          --payload-bytes 100 --concurrency "$c" --worker-jobs "$n" 2>>"$tmp/bullmq.err")
    line=$(printf '%s\n' "$out" | grep '^bullmq version=')
    [ -n "$line" ] && put bull.version "$(kv "$line" version)"
    line=$(printf '%s\n' "$out" | grep "^worker concurrency=$c ")
    if [ -z "$line" ]; then
        BULL_WHY="bench/bullmq_bench.mjs failed: $(tail -n 1 "$tmp/bullmq.err" | cut -c1-80)"
        BULL_OK=0
        return 1
    fi
    put "bull.c$c.$rep" "$(kv "$line" jobs_per_s)"
    put "bull.c${c}_us.$rep" "$(kv "$line" redis_cpu_us_per_job)"
    put "bull.c${c}_add_us.$rep" "$(kv "$line" add_redis_cpu_us_per_job)"
    put "bull.c${c}_node.$rep" "$(kv "$line" node_cpu_us_per_job)"
    [ -n "$add" ] || return 0
    line=$(printf '%s\n' "$out" | grep '^add ')
    put "bull.add.$rep" "$(kv "$line" jobs_per_s)"
    put "bull.add_us.$rep" "$(kv "$line" redis_cpu_us_per_job)"
    put "bull.bytes.$rep" "$(kv "$line" bytes_per_job)"
    put "bull.add_node.$rep" "$(kv "$line" node_cpu_us_per_job)"
}

section3_tables() {
    local k
    if [ "$BULL_OK" = 1 ]; then
        for k in add add_us add_node bytes c1 c1_us c1_add_us c1_node c10 c10_us c10_add_us c10_node \
                 c50 c50_us c50_add_us c50_node; do
            settle "bull.$k"
        done
    fi
    local mc="median of $REPS"
    [ "$REPS" = 1 ] && mc="1 run"
    local un="BullMQ: unavailable ($BULL_WHY)"
    b() { if [ "$BULL_OK" = 1 ]; then "$@"; else echo "$un"; fi; }
    table_start "3. BullMQ $(get bull.version) on the same redis-server ($mc; addBulk of $N_BULL jobs; worker runs of $N_HTTP jobs, $N_HTTP_W1 at concurrency 1)" \
        figure retryd BullMQ "retryd / BullMQ"
    row "enqueue: HTTP, 50 connections (msgs/s) vs addBulk (jobs/s)" \
        "$(fmt_int "$(get http.enqueue.rate)")" "$(b fmt_int "$(get bull.add)")" \
        "$(ratio "$(get http.enqueue.rate)" "$(get bull.add)")"
    local fcall16
    fcall16=$(fmt_int "$(get enqueue.p16.rps)")
    [ -n "${V[enqueue.p16.rps]:-}" ] || fcall16="not run (section 1)"
    row "enqueue: FCALL -P 16 (msgs/s) vs addBulk (jobs/s)" \
        "$fcall16" "$(b fmt_int "$(get bull.add)")" \
        "$(ratio "$(get enqueue.p16.rps)" "$(get bull.add)")"
    row "claim+succeed, 1 worker vs Worker concurrency 1 (msgs/s)" \
        "$(fmt_int "$(get http.w1c1.rate)")" "$(b fmt_int "$(get bull.c1)")" \
        "$(ratio "$(get http.w1c1.rate)" "$(get bull.c1)")"
    row "claim+succeed, 10 workers vs Worker concurrency 10 (msgs/s)" \
        "$(fmt_int "$(get http.w10c1.rate)")" "$(b fmt_int "$(get bull.c10)")" \
        "$(ratio "$(get http.w10c1.rate)" "$(get bull.c10)")"
    row "claim+succeed, 50 workers, count 1 vs Worker concurrency 50 (msgs/s)" \
        "$(fmt_int "$(get http.w50c1.rate)")" "$(b fmt_int "$(get bull.c50)")" \
        "$(ratio "$(get http.w50c1.rate)" "$(get bull.c50)")"
    row "claim+succeed, 50 workers, count 10 + batch ack vs Worker concurrency 50 (msgs/s)" \
        "$(fmt_int "$(get http.w50c10.rate)")" "$(b fmt_int "$(get bull.c50)")" \
        "$(ratio "$(get http.w50c10.rate)" "$(get bull.c50)")"
    row "Redis CPU per enqueue vs per add (µs)" "$(fmt "$(get http.enqueue.redis_us)" 1)" \
        "$(b fmt "$(get bull.add_us)" 1)" "$(ratio "$(get http.enqueue.redis_us)" "$(get bull.add_us)")"
    row "Redis CPU per claim+succeed vs per processed job, c=50 (µs)" \
        "$(fmt "$(get http.w50c1.redis_us)" 1)" "$(b fmt "$(get bull.c50_us)" 1)" \
        "$(ratio "$(get http.w50c1.redis_us)" "$(get bull.c50_us)")"
    put life.retryd "$(calc "$(get http.enqueue.redis_us) + $(get http.w50c1.redis_us)")"
    put life.retryd10 "$(calc "$(get http.enqueue_b.redis_us) + $(get http.w50c10.redis_us)")"
    put life.bull "$(calc "$(get bull.c50_add_us) + $(get bull.c50_us)")"
    row "Redis CPU per lifecycle: enqueue+claim+succeed (count 1) vs add+process (c=50) (µs)" \
        "$(fmt "$(get life.retryd)" 1)" "$(b fmt "$(get life.bull)" 1)" \
        "$(ratio "$(get life.retryd)" "$(get life.bull)")"
    row "Redis CPU per lifecycle: with count 10 + batch ack vs add+process (c=50) (µs)" \
        "$(fmt "$(get life.retryd10)" 1)" "$(b fmt "$(get life.bull)" 1)" \
        "$(ratio "$(get life.retryd10)" "$(get life.bull)")"
    put all.retryd "$(calc "$(get life.retryd) + $(get http.enqueue.retryd_us) + $(get http.w50c1.retryd_us) + $(get http.enqueue.client_us) + $(get http.w50c1.client_us)")"
    put all.bull "$(calc "$(get life.bull) + $(get bull.add_node) + $(get bull.c50_node)")"
    row "all CPU per lifecycle, count 1: Redis + retryd + loadgen vs Redis + node (µs)" \
        "$(fmt "$(get all.retryd)" 1)" "$(b fmt "$(get all.bull)" 1)" \
        "$(ratio "$(get all.retryd)" "$(get all.bull)")"
    row "  client CPU per lifecycle: loadgen vs node (BullMQ + ioredis + processor) (µs)" \
        "$(fmt "$(calc "$(get http.enqueue.client_us) + $(get http.w50c1.client_us)")" 1)" \
        "$(b fmt "$(calc "$(get bull.add_node) + $(get bull.c50_node)")" 1)" \
        "$(ratio "$(calc "$(get http.enqueue.client_us) + $(get http.w50c1.client_us)")" "$(calc "$(get bull.add_node) + $(get bull.c50_node)")")"

    # The worker-loop workload, row for row: W keep-alive connections loop claim ->
    # succeed (two requests per message) or settle-and-claim (one), against a
    # BullMQ Worker of concurrency W with a no-op processor that keeps its
    # completed jobs; every timed run starts with its messages enqueued.
    put life.settle "$(calc "$(get http.enqueue_s.redis_us) + $(get http.s50c1.redis_us)")"
    table_start "3a. The worker loop: W connections vs BullMQ Worker concurrency W ($mc; each retryd run followed at once by its BullMQ run; $N_HTTP messages (W=1: $N_HTTP_W1) enqueued before each timed run, 100-byte payloads)" \
        figure retryd BullMQ "retryd / BullMQ"
    local w way
    for w in "50:$N_HTTP" "1:$N_HTTP_W1"; do
        for way in "w${w%%:*}c1:claim -> succeed, two requests per message" \
                   "s${w%%:*}c1:settle-and-claim, one request per message"; do
            row "processed msgs/s, W=${w%%:*}, ${way#*:}" "$(fmt_int "$(get "http.${way%%:*}.rate")")" \
                "$(b fmt_int "$(get "bull.c${w%%:*}")")" \
                "$(ratio "$(get "http.${way%%:*}.rate")" "$(get "bull.c${w%%:*}")")"
        done
    done
    row "processed msgs/s, W=50, settle-and-claim, 1,000 fairness groups" \
        "$(fmt_int "$(get http.s50c1g.rate)")" "$(b fmt_int "$(get bull.c50)")" \
        "$(ratio "$(get http.s50c1g.rate)" "$(get bull.c50)")"
    local nu="node: not installed"
    for way in "n50c1:claim -> succeed" "n50s1:settle-and-claim"; do
        row "processed msgs/s, W=50, ${way#*:}, the worker in node's http module ($N_NODE messages)" \
            "$( [ "$NODE_OK" = 1 ] && fmt_int "$(get "http.${way%%:*}.rate")" || echo "$nu")" \
            "$(b fmt_int "$(get bull.c50)")" "$(ratio "$(get "http.${way%%:*}.rate")" "$(get bull.c50)")"
    done
    row "processed msgs/s, W=50, count 10 + batch ack (two requests per 10)" \
        "$(fmt_int "$(get http.w50c10.rate)")" "$(b fmt_int "$(get bull.c50)")" \
        "$(ratio "$(get http.w50c10.rate)" "$(get bull.c50)")"
    row "processed msgs/s, W=50, settle-and-claim count 10 (one request per 10)" \
        "$(fmt_int "$(get http.s50c10.rate)")" "$(b fmt_int "$(get bull.c50)")" \
        "$(ratio "$(get http.s50c10.rate)" "$(get bull.c50)")"
    row "Redis CPU per lifecycle: enqueue + settle-and-claim (W=50) vs add + process (c=50) (µs)" \
        "$(fmt "$(get life.settle)" 1)" "$(b fmt "$(get life.bull)" 1)" \
        "$(ratio "$(get life.settle)" "$(get life.bull)")"
    row "daemon CPU per lifecycle, W=50: retryd (enqueue + settle-and-claim) vs node (add + process) (µs)" \
        "$(fmt "$(calc "$(get http.enqueue_s.retryd_us) + $(get http.s50c1.retryd_us)")" 1)" \
        "$(b fmt "$(calc "$(get bull.add_node) + $(get bull.c50_node)")" 1)" \
        "$(ratio "$(calc "$(get http.enqueue_s.retryd_us) + $(get http.s50c1.retryd_us)")" "$(calc "$(get bull.add_node) + $(get bull.c50_node)")")"
    [ "$BULL_OK" = 1 ] || say "BullMQ: unavailable ($BULL_WHY)"
}

# ---------------------------------------------------------------------------
# 3e, 3b, 3k. Issue 25's peers: enqueue one message per request, batch
# enqueue of 1000, and Sidekiq 6.4.1 (docs/benchmarks.md "How each figure is
# taken", 3e/3b/3k). Each repetition runs every system once, the order
# rotating, on this redis-server; medians of REPS.
# ---------------------------------------------------------------------------
if [ "$QUICK" = 1 ]; then
    N_ENQ=10000         # 3e: messages per enqueue run
    WRK_S=1             # 3e: seconds of the wrk run
    N_BATCH=10000       # 3b: messages per batch-enqueue run
    N_SK=5000           # 3k: messages per worker and lifecycle run
else
    N_ENQ=50000
    WRK_S=3
    N_BATCH=50000
    N_SK=20000
fi
BATCH=1000              # 3b: messages per batch request / addBulk / push_bulk call
SK_OK=0
SK_WHY=""
WRK_OK=0
BATCH_OK=0
BATCH_WHY=""

# order REP A B [C]: the systems of one repetition, rotated by REP so that
# each goes first in turn.
order() {
    local rep=$1
    shift
    local list=("$@") i n=$#
    for ((i = 0; i < n; i++)); do printf '%s ' "${list[$(((i + rep - 1) % n))]}"; done
}

# peer_setup: BullMQ (npm, bull_setup), Sidekiq and wrk (Debian's
# ruby-sidekiq and wrk: scripts/deps.sh bench installs them).
peer_setup() {
    [ "$BULL_OK" = 1 ] || [ -n "$BULL_WHY" ] || bull_setup
    if ! command -v ruby >/dev/null || ! command -v sidekiq >/dev/null; then
        SK_WHY="ruby-sidekiq not installed (scripts/deps.sh bench)"
    elif ! ruby -e 'require "sidekiq"' >/dev/null 2>&1; then
        SK_WHY="ruby cannot load sidekiq"
    else
        SK_OK=1
    fi
    command -v wrk >/dev/null && WRK_OK=1
}

# bull_add_one NAME N: BullMQ queue.add of N jobs with 50 calls in flight.
bull_add_one() {
    local out line
    [ "$BULL_OK" = 1 ] || return 0
    out=$(timeout 300 node bench/bullmq_bench.mjs --port "$RP" --jobs "$2" --payload-bytes 100 \
          --add-inflight 50 2>>"$tmp/bullmq.err")
    line=$(printf '%s\n' "$out" | grep '^bullmq version=')
    [ -n "$line" ] && put bull.version "$(kv "$line" version)"
    line=$(printf '%s\n' "$out" | grep '^add_one ')
    [ -n "$line" ] || { say "bullmq add_one failed: $(tail -n 1 "$tmp/bullmq.err")"; return 1; }
    put "$1.rate" "$(kv "$line" jobs_per_s)"
    put "$1.redis_us" "$(kv "$line" redis_cpu_us_per_job)"
    put "$1.client_us" "$(kv "$line" node_cpu_us_per_job)"
}

# bull_bulk NAME N: BullMQ addBulk of N jobs, 1000 a call, one call in flight.
bull_bulk() {
    local out line
    [ "$BULL_OK" = 1 ] || return 0
    out=$(timeout 300 node bench/bullmq_bench.mjs --port "$RP" --jobs "$2" --payload-bytes 100 \
          --concurrency none 2>>"$tmp/bullmq.err")
    line=$(printf '%s\n' "$out" | grep '^bullmq version=')
    [ -n "$line" ] && put bull.version "$(kv "$line" version)"
    line=$(printf '%s\n' "$out" | grep '^add ')
    [ -n "$line" ] || { say "bullmq addBulk failed: $(tail -n 1 "$tmp/bullmq.err")"; return 1; }
    put "$1.rate" "$(kv "$line" jobs_per_s)"
    put "$1.redis_us" "$(kv "$line" redis_cpu_us_per_job)"
    put "$1.client_us" "$(kv "$line" node_cpu_us_per_job)"
    put "$1.bytes" "$(kv "$line" bytes_per_job)"
}

# sk_run NAME MODE N [ARG...]: one bench/sidekiq_bench.rb run (push_bulk,
# push or work); stores NAME.rate, NAME.redis_us, NAME.client_us (the
# pushing ruby's or the sidekiq process's CPU per job) and NAME.bytes.
sk_run() {
    local name=$1 mode=$2 n=$3 out line
    shift 3
    [ "$SK_OK" = 1 ] || return 0
    say "3k. Sidekiq $mode $*"
    out=$(timeout 300 ruby bench/sidekiq_bench.rb --port "$RP" --mode "$mode" --jobs "$n" \
          --payload-bytes 100 --log "$tmp/sidekiq.log" "$@" 2>>"$tmp/sidekiq.err")
    line=$(printf '%s\n' "$out" | grep "^$mode ")
    [ -n "$line" ] && put sk.version "$(kv "$(printf '%s\n' "$out" | grep '^sidekiq ')" version)"
    if [ -z "$line" ]; then
        SK_WHY="bench/sidekiq_bench.rb failed: $(tail -n 1 "$tmp/sidekiq.err" | cut -c1-80)"
        SK_OK=0
        return 1
    fi
    put "$name.rate" "$(kv "$line" jobs_per_s)"
    put "$name.redis_us" "$(kv "$line" redis_cpu_us_per_job)"
    put "$name.client_us" "$(kv "$line" ruby_cpu_us_per_job)"
    [ "$mode" = work ] && put "$name.client_us" "$(kv "$line" sidekiq_cpu_us_per_job)"
    put "$name.bytes" "$(kv "$line" bytes_per_job)"
}

# wrk_enqueue NAME QUEUE: wrk (bench/wrk_enqueue.lua: the same body as
# loadgen's) POSTs one message per request over 50 connections for WRK_S
# seconds; NAME.rate is wrk's completed requests per second, NAME.redis_us
# and NAME.retryd_us the CPU per message the queue holds at the end (every
# request wrk sent, answered or still in flight when it stopped).
wrk_enqueue() {
    local name=$1 q=$2 r0 d0 r1 d1 out line n
    [ "$WRK_OK" = 1 ] || return 0
    r0=$(redis_cpu_us)
    d0=$(proc_cpu_us "$retryd_pid")
    out=$(timeout $((WRK_S + 30)) wrk -t1 -c50 -d"${WRK_S}s" -s bench/wrk_enqueue.lua \
          "http://127.0.0.1:$HP/queues/$q/messages" -- 100 2>>"$tmp/wrk.err")
    line=$(printf '%s\n' "$out" | grep '^wrk requests=')
    sleep 0.2   # the requests wrk left in flight are answered
    r1=$(redis_cpu_us)
    d1=$(proc_cpu_us "$retryd_pid")
    n=$(curl -s "http://127.0.0.1:$HP/queues/$q/stats" | grep -o '"enqueued":[0-9]*' | cut -d: -f2)
    if [ -z "$line" ] || [ "$(kv "$line" non2xx)" != 0 ] || [ "$(kv "$line" socket_errors)" != 0 ] ||
       [ -z "$n" ] || [ "$n" -lt "$(kv "$line" requests)" ]; then
        say "wrk failed: ${line:-$(tail -n 1 "$tmp/wrk.err")}; queue holds ${n:-?}"
        return 1
    fi
    put "$name.rate" "$(calc "$(kv "$line" requests) / ($(kv "$line" duration_us) / 1e6)")"
    put "$name.redis_us" "$(calc "($r1 - $r0) / $n")"
    put "$name.retryd_us" "$(calc "($d1 - $d0) / $n")"
    put "$name.enqueue.p50" "$(calc "$(kv "$line" p50_us) / 1000")"
    put "$name.enqueue.p99" "$(calc "$(kv "$line" p99_us) / 1000")"
}

# run_said NAME: one run's figures on stderr (the repetitions behind a median).
run_said() { say "  $1: $(fmt_int "$(get "$1.rate")") msgs/s, Redis $(fmt "$(get "$1.redis_us")" 2) µs/msg"; }

# settle_prefix PREFIX: medians over repetitions of every PREFIX.<rep>.<field>.
settle_prefix() {
    local k r vals
    for k in $(printf '%s\n' "${!V[@]}" | grep "^$1\.[0-9]*\." | sed "s/^\($1\.\)[0-9]*\./\1REP./" | sort -u); do
        vals=()
        for r in $(seq 1 "$REPS"); do vals+=("$(get "${k/.REP./.$r.}")"); done
        V["${k/.REP./.}"]=$(median "${vals[@]}")
    done
}

# peer_cell SYSTEM_OK WHY VALUE: VALUE, or why the peer has none.
peer_cell() { if [ "$1" = 1 ]; then echo "$3"; else echo "unavailable ($2)"; fi; }

# 3e. One message per HTTP request over 50 keep-alive connections (loadgen),
# against BullMQ's queue.add with 50 calls in flight on one Queue, and the
# same enqueue driven by wrk (an HTTP client nobody here wrote).
section3e() {
    local rep s q
    peer_setup
    for rep in $(seq 1 "$REPS"); do
        say "3e. enqueue, one message per request, repetition $rep of $REPS"
        for s in $(order "$rep" retryd bullmq wrk); do
            q="e3-$s-$rep"
            case $s in
            retryd) lg_http "e3.lg.$rep" enqueue "$q" 50 "$N_ENQ" ;;
            bullmq) bull_add_one "e3.bull.$rep" "$N_ENQ" ;;
            wrk) wrk_enqueue "e3.wrk.$rep" "$q" ;;
            esac
            case $s in retryd) run_said "e3.lg.$rep" ;; bullmq) run_said "e3.bull.$rep" ;;
                       wrk) run_said "e3.wrk.$rep" ;; esac
        done
    done
    settle_prefix e3.lg; settle_prefix e3.bull; settle_prefix e3.wrk
    local mc="median of $REPS"
    [ "$REPS" = 1 ] && mc="1 run"
    b3() { peer_cell "$BULL_OK" "$BULL_WHY" "$1"; }
    table_start "3e. Enqueue, one message per HTTP request, 50 connections, vs BullMQ $(get bull.version) queue.add with 50 in flight ($mc; $N_ENQ messages; wrk: ${WRK_S} s)" \
        figure retryd BullMQ "retryd / BullMQ"
    row "enqueue (msgs/s): loadgen, 50 connections vs queue.add, 50 in flight" \
        "$(fmt_int "$(get e3.lg.rate)")" "$(b3 "$(fmt_int "$(get e3.bull.rate)")")" \
        "$(ratio "$(get e3.lg.rate)" "$(get e3.bull.rate)")"
    row "Redis CPU per message (µs, INFO cpu)" "$(fmt "$(get e3.lg.redis_us)" 1)" \
        "$(b3 "$(fmt "$(get e3.bull.redis_us)" 1)")" \
        "$(ratio "$(get e3.lg.redis_us)" "$(get e3.bull.redis_us)")"
    row "daemon + client CPU per message: retryd + loadgen vs node (µs)" \
        "$(fmt "$(calc "$(get e3.lg.retryd_us) + $(get e3.lg.client_us)")" 1)" \
        "$(b3 "$(fmt "$(get e3.bull.client_us)" 1)")" \
        "$(ratio "$(calc "$(get e3.lg.retryd_us) + $(get e3.lg.client_us)")" "$(get e3.bull.client_us)")"
    row "  enqueue p50 / p99 (ms), loadgen" "$(ms_pair e3.lg.enqueue)" "" ""
    local wu="wrk: not installed (scripts/deps.sh bench)"
    w3() { if [ "$WRK_OK" = 1 ]; then echo "$1"; else echo "$wu"; fi; }
    row "tool check: enqueue (msgs/s) through wrk vs loadgen" "$(w3 "$(fmt_int "$(get e3.wrk.rate)")")" \
        "$(fmt_int "$(get e3.lg.rate)")" "$(ratio "$(get e3.wrk.rate)" "$(get e3.lg.rate)")"
    row "  Redis CPU per message (µs), wrk vs loadgen" "$(w3 "$(fmt "$(get e3.wrk.redis_us)" 1)")" \
        "$(fmt "$(get e3.lg.redis_us)" 1)" "$(ratio "$(get e3.wrk.redis_us)" "$(get e3.lg.redis_us)")"
    row "  enqueue p50 / p99 (ms), wrk" "$(w3 "$(ms_pair e3.wrk.enqueue)")" "" ""
    row "  the same through wrk vs BullMQ queue.add (msgs/s)" "$(w3 "$(fmt_int "$(get e3.wrk.rate)")")" \
        "$(b3 "$(fmt_int "$(get e3.bull.rate)")")" "$(ratio "$(get e3.wrk.rate)" "$(get e3.bull.rate)")"
    echo
    echo "retryd vs bullmq: $(ratio "$(get e3.lg.rate)" "$(get e3.bull.rate)") (enqueue msgs/s, loadgen; wrk: $(ratio "$(get e3.wrk.rate)" "$(get e3.bull.rate)"))"
}

# batch_probe: does this retryd take a batch enqueue? A body of two items
# answered 200 says yes; 400 or 422 (the single form's validation: no
# "payload") says it has none.
batch_probe() {
    local code
    code=$(curl -s -o "$tmp/batch_probe.out" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
           -d '{"messages":[{"payload":"probe"},{"payload":"probe"}]}' \
           "http://127.0.0.1:$HP/queues/b3-probe/messages")
    case $code in
    200) BATCH_OK=1 ;;
    400|422) BATCH_WHY="no batch enqueue" ;;
    *) BATCH_WHY="the batch probe answered $code" ;;
    esac
}

# 3b. Batch enqueue: POST /queues/{q}/messages {"messages": [1000 items]},
# one request in flight, against BullMQ's addBulk and Sidekiq's push_bulk of
# 1000, one call in flight, the same 100-byte payloads.
section3b() {
    local rep s
    peer_setup
    batch_probe
    for rep in $(seq 1 "$REPS"); do
        say "3b. batch enqueue of $BATCH, repetition $rep of $REPS"
        for s in $(order "$rep" retryd bullmq sidekiq); do
            case $s in
            retryd) [ "$BATCH_OK" = 1 ] &&
                lg_http "b3.lg.$rep" enqueue "b3-$rep" 1 "$N_BATCH" --batch "$BATCH" ;;
            bullmq) bull_bulk "b3.bull.$rep" "$N_BATCH" ;;
            sidekiq) sk_run "b3.sk.$rep" push_bulk "$N_BATCH" --batch "$BATCH" ;;
            esac
            case $s in retryd) run_said "b3.lg.$rep" ;; bullmq) run_said "b3.bull.$rep" ;;
                       sidekiq) run_said "b3.sk.$rep" ;; esac
        done
    done
    settle_prefix b3.lg; settle_prefix b3.bull; settle_prefix b3.sk
    [ -n "${V[mem.default]:-}" ] || mem_retryd default
    local mc="median of $REPS" skip="skipped: $BATCH_WHY"
    [ "$REPS" = 1 ] && mc="1 run"
    r3() { if [ "$BATCH_OK" = 1 ]; then echo "$1"; else echo "$skip"; fi; }
    b3() { peer_cell "$BULL_OK" "$BULL_WHY" "$1"; }
    k3() { peer_cell "$SK_OK" "$SK_WHY" "$1"; }
    table_start "3b. Batch enqueue of $BATCH (one request or call in flight) vs BullMQ $(get bull.version) addBulk and Sidekiq $(get sk.version) push_bulk of $BATCH ($mc; $N_BATCH messages)" \
        figure retryd peer "retryd / peer"
    row "msgs/s, vs BullMQ addBulk" "$(r3 "$(fmt_int "$(get b3.lg.rate)")")" \
        "$(b3 "$(fmt_int "$(get b3.bull.rate)")")" "$(ratio "$(get b3.lg.rate)" "$(get b3.bull.rate)")"
    row "msgs/s, vs Sidekiq push_bulk" "$(r3 "$(fmt_int "$(get b3.lg.rate)")")" \
        "$(k3 "$(fmt_int "$(get b3.sk.rate)")")" "$(ratio "$(get b3.lg.rate)" "$(get b3.sk.rate)")"
    row "Redis CPU per message (µs), vs BullMQ" "$(r3 "$(fmt "$(get b3.lg.redis_us)" 2)")" \
        "$(b3 "$(fmt "$(get b3.bull.redis_us)" 2)")" "$(ratio "$(get b3.lg.redis_us)" "$(get b3.bull.redis_us)")"
    row "Redis CPU per message (µs), vs Sidekiq" "$(r3 "$(fmt "$(get b3.lg.redis_us)" 2)")" \
        "$(k3 "$(fmt "$(get b3.sk.redis_us)" 2)")" "$(ratio "$(get b3.lg.redis_us)" "$(get b3.sk.redis_us)")"
    row "daemon + client CPU per message: retryd + loadgen vs node (µs)" \
        "$(r3 "$(fmt "$(calc "$(get b3.lg.retryd_us) + $(get b3.lg.client_us)")" 1)")" \
        "$(b3 "$(fmt "$(get b3.bull.client_us)" 1)")" \
        "$(ratio "$(calc "$(get b3.lg.retryd_us) + $(get b3.lg.client_us)")" "$(get b3.bull.client_us)")"
    row "daemon + client CPU per message: retryd + loadgen vs ruby (µs)" \
        "$(r3 "$(fmt "$(calc "$(get b3.lg.retryd_us) + $(get b3.lg.client_us)")" 1)")" \
        "$(k3 "$(fmt "$(get b3.sk.client_us)" 1)")" \
        "$(ratio "$(calc "$(get b3.lg.retryd_us) + $(get b3.lg.client_us)")" "$(get b3.sk.client_us)")"
    row "  batch request p50 / p99 (ms)" "$(r3 "$(ms_pair b3.lg.enqueue_batch)")" "" ""
    row "bytes per pending message (INFO used_memory; retryd's from section 5's FCALL enqueues) vs Sidekiq" \
        "$(fmt_int "$(get mem.default)")" "$(k3 "$(fmt_int "$(get b3.sk.bytes)")")" \
        "$(ratio "$(get mem.default)" "$(get b3.sk.bytes)")"
    echo
    echo "retryd vs bullmq: $(r3 "$(ratio "$(get b3.lg.rate)" "$(get b3.bull.rate)")") (batch enqueue of $BATCH vs addBulk, msgs/s)"
    echo "retryd vs sidekiq: $(r3 "$(ratio "$(get b3.lg.rate)" "$(get b3.sk.rate)")") (batch enqueue of $BATCH vs push_bulk, msgs/s)"
}

# 3k. Sidekiq on the same redis-server: the worker loop at W=1 (retryd's
# settle-and-claim over one connection against one sidekiq process of
# concurrency 1) and at W=50, and the Redis CPU of a whole lifecycle: one
# message per enqueue (retryd's HTTP enqueue over 50 connections; Sidekiq's
# push from 50 threads) plus the worker loop at W=50 (settle-and-claim;
# sidekiq -c 50). Sidekiq's fetch is a bare BRPOP (no lease, nothing kept
# while a job runs: docs/benchmarks.md).
section3k() {
    local rep s q k
    peer_setup
    for rep in $(seq 1 "$REPS"); do
        say "3k. Sidekiq, repetition $rep of $REPS"
        for s in $(order "$rep" retryd sidekiq); do
            if [ "$s" = retryd ]; then
                q="k3-w1-$rep"
                lg_http "k3.enq1.$rep" enqueue "$q" 50 "$N_SK"
                lg_http "k3.w1.$rep" settle "$q" 1 "$N_SK" --count 1
                q="k3-w50-$rep"
                lg_http "k3.enq.$rep" enqueue "$q" 50 "$N_SK"
                lg_http "k3.w50.$rep" settle "$q" 50 "$N_SK" --count 1
                for k in enq1 w1 enq w50; do run_said "k3.$k.$rep"; done
            else
                sk_run "k3.sk1.$rep" work "$N_SK" --concurrency 1
                sk_run "k3.skpush.$rep" push "$N_SK" --threads 50
                sk_run "k3.sk50.$rep" work "$N_SK" --concurrency 50
                for k in sk1 skpush sk50; do run_said "k3.$k.$rep"; done
            fi
        done
    done
    for k in enq1 w1 enq w50 sk1 skpush sk50; do settle_prefix "k3.$k"; done
    put k3.life "$(calc "$(get k3.enq.redis_us) + $(get k3.w50.redis_us)")"
    put k3.sklife "$(calc "$(get k3.skpush.redis_us) + $(get k3.sk50.redis_us)")"
    local mc="median of $REPS"
    [ "$REPS" = 1 ] && mc="1 run"
    k3() { peer_cell "$SK_OK" "$SK_WHY" "$1"; }
    table_start "3k. Sidekiq $(get sk.version) (one sidekiq process, a no-op job) on the same redis-server ($mc; $N_SK messages per run)" \
        figure retryd Sidekiq "retryd / Sidekiq"
    row "worker loop W=1 (msgs/s): settle-and-claim, 1 connection vs sidekiq -c 1" \
        "$(fmt_int "$(get k3.w1.rate)")" "$(k3 "$(fmt_int "$(get k3.sk1.rate)")")" \
        "$(ratio "$(get k3.w1.rate)" "$(get k3.sk1.rate)")"
    row "  Redis CPU per message, W=1 (µs)" "$(fmt "$(get k3.w1.redis_us)" 1)" \
        "$(k3 "$(fmt "$(get k3.sk1.redis_us)" 1)")" "$(ratio "$(get k3.w1.redis_us)" "$(get k3.sk1.redis_us)")"
    row "worker loop W=50 (msgs/s): settle-and-claim, 50 connections vs sidekiq -c 50" \
        "$(fmt_int "$(get k3.w50.rate)")" "$(k3 "$(fmt_int "$(get k3.sk50.rate)")")" \
        "$(ratio "$(get k3.w50.rate)" "$(get k3.sk50.rate)")"
    row "enqueue, one message a call (msgs/s): HTTP, 50 connections vs push, 50 threads" \
        "$(fmt_int "$(get k3.enq.rate)")" "$(k3 "$(fmt_int "$(get k3.skpush.rate)")")" \
        "$(ratio "$(get k3.enq.rate)" "$(get k3.skpush.rate)")"
    row "Redis CPU per enqueue vs per push (µs)" "$(fmt "$(get k3.enq.redis_us)" 1)" \
        "$(k3 "$(fmt "$(get k3.skpush.redis_us)" 1)")" "$(ratio "$(get k3.enq.redis_us)" "$(get k3.skpush.redis_us)")"
    row "Redis CPU per settle-and-claim (W=50) vs per job fetched (BRPOP, -c 50) (µs)" \
        "$(fmt "$(get k3.w50.redis_us)" 1)" "$(k3 "$(fmt "$(get k3.sk50.redis_us)" 1)")" \
        "$(ratio "$(get k3.w50.redis_us)" "$(get k3.sk50.redis_us)")"
    row "Redis CPU per lifecycle: enqueue + settle-and-claim (W=50), with a lease, vs push + BRPOP (-c 50), without (µs)" \
        "$(fmt "$(get k3.life)" 1)" "$(k3 "$(fmt "$(get k3.sklife)" 1)")" \
        "$(ratio "$(get k3.life)" "$(get k3.sklife)")"
    row "daemon CPU per lifecycle: retryd (enqueue + settle-and-claim) vs the sidekiq process (job) + the pushing ruby (µs)" \
        "$(fmt "$(calc "$(get k3.enq.retryd_us) + $(get k3.w50.retryd_us)")" 1)" \
        "$(k3 "$(fmt "$(calc "$(get k3.sk50.client_us) + $(get k3.skpush.client_us)")" 1)")" \
        "$(ratio "$(calc "$(get k3.enq.retryd_us) + $(get k3.w50.retryd_us)")" "$(calc "$(get k3.sk50.client_us) + $(get k3.skpush.client_us)")")"
    echo
    echo "retryd vs sidekiq: $(ratio "$(get k3.w1.rate)" "$(get k3.sk1.rate)") (worker loop W=1, msgs/s); $(ratio "$(get k3.life)" "$(get k3.sklife)") (Redis CPU per lifecycle, W=50)"
}

# ---------------------------------------------------------------------------
# 4. Growth
# ---------------------------------------------------------------------------
# dead_page NAME BASE: one page of 100 dead letters from the middle of the
# dead set (a cursor at rank N/2), repeated through redis-benchmark.
dead_page() {
    local name=$1 q=$2 n mid cursor
    n=$(rcli zcard "$q:3:dead")
    mid=$(rcli zrange "$q:3:dead" $((n / 2)) $((n / 2)) withscores | tr '\n' ' ')
    cursor="$(echo "$mid" | awk '{print $2 ":" $1}')"
    rb "$name" fcall_ro 2000 4 1 FCALL_RO "${FN}list" 1 "$q" dead 100 "$cursor"
}

# promote_cost NAME BASE CALLS: promote, 100 per call, through loadgen resp.
promote_cost() {
    lg_resp "$1" fcall "$3" 1 1 1 FCALL "${FN}promote" 1 "$2" 100
    put "$1.usmsg" "$(calc "$(get "$1.usec_total") / $(get "$1.moved")")"
    put "$1.msgs" "$(calc "$(get "$1.moved") / $(get "$1.secs")")"
}

section4() {
    local q i small
    say "4. growth: populating the 1,000 cases"
    enqueue_fcall "$(base g-claim-1k)" 1000
    rcli eval "$(cat bench/populate_dead.lua)" 1 "$(base g-dead-1k)" 1000 "$PAYLOAD" \
        "bench failure" >/dev/null
    if [ "$GROWTH_BIG" -gt 0 ]; then
        say "4. growth: 1,000,000 pending (enqueue through FCALL)"
        enqueue_fcall "$(base g-claim-1m)" $((GROWTH_BIG + BURSTS * 1000))
        say "4. growth: 1,000,000 dead (bench/populate_dead.lua)"
        for i in $(seq 1 $((GROWTH_BIG / 100000))); do
            rcli eval "$(cat bench/populate_dead.lua)" 1 "$(base g-dead-1m)" 100000 "$PAYLOAD" \
                "bench failure" >/dev/null
        done
        say "4. growth: 1,000,000 scheduled (enqueue with delay_ms 1)"
        enqueue_fcall "$(base g-prom-1m)" "$GROWTH_BIG" 1
    fi
    # Measured in turns, small then big, so both see the same server (the
    # keyspace holds every queue) and the same machine; only the depth of
    # the queue under test differs.
    say "4. growth: measuring, 1,000 and 1,000,000 in turns"
    local sum_s=0 sum_u=0 sum_bs=0 sum_bu=0
    for i in $(seq 1 "$BURSTS"); do
        q=$(base g-claim-1k)
        enqueue_fcall "$q" 1000     # back to 1,000 + 1,000 pending
        lg_resp g.cs fcall 1000 4 16 1 FCALL "${FN}claim" 1 "$q" 30000 1
        sum_s=$(calc "$sum_s + $(get g.cs.secs)"); sum_u=$(calc "$sum_u + $(get g.cs.usec_total)")
        if [ "$GROWTH_BIG" -gt 0 ]; then
            lg_resp g.cb fcall 1000 4 16 1 FCALL "${FN}claim" 1 "$(base g-claim-1m)" 30000 1
            sum_bs=$(calc "$sum_bs + $(get g.cb.secs)"); sum_bu=$(calc "$sum_bu + $(get g.cb.usec_total)")
        fi
    done
    put g.claim.small.rate "$(calc "$BURSTS * 1000 / $sum_s")"
    put g.claim.small.us "$(calc "$sum_u / ($BURSTS * 1000)")"
    if [ "$GROWTH_BIG" -gt 0 ]; then
        put g.claim.big.rate "$(calc "$BURSTS * 1000 / $sum_bs")"
        put g.claim.big.us "$(calc "$sum_bu / ($BURSTS * 1000)")"
    fi
    local ps=() pu=() pbs=() pbu=()
    for i in 1 2 3; do
        dead_page g.page.s "$(base g-dead-1k)"
        ps+=("$(get g.page.s.rps)"); pu+=("$(get g.page.s.us)")
        if [ "$GROWTH_BIG" -gt 0 ]; then
            dead_page g.page.b "$(base g-dead-1m)"
            pbs+=("$(get g.page.b.rps)"); pbu+=("$(get g.page.b.us)")
        fi
    done
    put g.page.small.rps "$(median "${ps[@]}")"; put g.page.small.us "$(median "${pu[@]}")"
    if [ "$GROWTH_BIG" -gt 0 ]; then
        put g.page.big.rps "$(median "${pbs[@]}")"; put g.page.big.us "$(median "${pbu[@]}")"
    fi
    # Promotion: ten rounds of 1,000 scheduled (due 1 ms later) promoted 100
    # per call; the 1,000,000 queue gives up as many per round.
    local secs=0 usec=0 moved=0 bsecs=0 busec=0 bmoved=0
    small=$(base g-prom-1k)
    for i in $(seq 1 10); do
        enqueue_fcall "$small" 1000 1
        sleep 0.01
        promote_cost g.ps "$small" 10
        secs=$(calc "$secs + $(get g.ps.secs)"); usec=$(calc "$usec + $(get g.ps.usec_total)")
        moved=$(calc "$moved + $(get g.ps.moved)")
        if [ "$GROWTH_BIG" -gt 0 ]; then
            promote_cost g.pb "$(base g-prom-1m)" 10
            bsecs=$(calc "$bsecs + $(get g.pb.secs)"); busec=$(calc "$busec + $(get g.pb.usec_total)")
            bmoved=$(calc "$bmoved + $(get g.pb.moved)")
        fi
    done
    put g.prom.small.usmsg "$(calc "$usec / $moved")"
    put g.prom.small.msgs "$(calc "$moved / $secs")"
    if [ "$GROWTH_BIG" -gt 0 ]; then
        put g.prom.big.usmsg "$(calc "$busec / $bmoved")"
        put g.prom.big.msgs "$(calc "$bmoved / $bsecs")"
    fi
    local skip="skipped (QUICK)"
    big() { if [ "$GROWTH_BIG" -gt 0 ]; then "$@"; else echo "$skip"; fi; }
    table_start "4. Growth: 1,000,000 vs 1,000, measured in turns on the same server" figure \
        "at 1,000,000" "at 1,000" "ratio"
    row "claim throughput, $BURSTS bursts of 1000 FCALL claim each (-c 4 -P 16, calls/s)" \
        "$(big fmt_int "$(get g.claim.big.rate)")" "$(fmt_int "$(get g.claim.small.rate)")" \
        "$(ratio "$(get g.claim.big.rate)" "$(get g.claim.small.rate)")"
    row "  Redis µs per claim (commandstats)" "$(big fmt "$(get g.claim.big.us)" 2)" \
        "$(fmt "$(get g.claim.small.us)" 2)" "$(ratio "$(get g.claim.big.us)" "$(get g.claim.small.us)")"
    row "one page of 100 dead letters at the middle cursor (pages/s, median of 3 runs of 2000)" \
        "$(big fmt_int "$(get g.page.big.rps)")" "$(fmt_int "$(get g.page.small.rps)")" \
        "$(ratio "$(get g.page.big.rps)" "$(get g.page.small.rps)")"
    row "  Redis µs per page (commandstats)" "$(big fmt "$(get g.page.big.us)" 1)" \
        "$(fmt "$(get g.page.small.us)" 1)" "$(ratio "$(get g.page.big.us)" "$(get g.page.small.us)")"
    row "promotion: Redis µs per message moved (limit 100)" "$(big fmt "$(get g.prom.big.usmsg)" 2)" \
        "$(fmt "$(get g.prom.small.usmsg)" 2)" \
        "$(ratio "$(get g.prom.big.usmsg)" "$(get g.prom.small.usmsg)")"
    row "  promotion: messages moved/s (one connection)" "$(big fmt_int "$(get g.prom.big.msgs)")" \
        "$(fmt_int "$(get g.prom.small.msgs)")" \
        "$(ratio "$(get g.prom.big.msgs)" "$(get g.prom.small.msgs)")"
}

# ---------------------------------------------------------------------------
# 2s. The SQS endpoint (docs/sqs.md) against the native HTTP API (issue 23)
# ---------------------------------------------------------------------------
# A retryd of its own with --sqs-listen on this redis-server; every run goes
# to it, the native ones through its HTTP API, the SQS ones through its SQS
# endpoint in the JSON protocol (loadgen sqs-send / sqs-receive: raw HTTP,
# application/x-amz-json-1.0, no SDK, no signature). Per repetition: 50
# connections enqueue N (native) and SendMessage N (SQS), in turns; then 50
# workers drain each queue: native settle-and-claim of 10 (one request per
# 10), SQS ReceiveMessage 10 + DeleteMessageBatch 10 (two requests per 10),
# and native claim 10 + batch acknowledgement (the SQS loop's shape on the
# native API). The same two SQS loops signed with SigV4 (loadgen --sigv4) go
# to a second retryd on the same Redis started with --sqs-credentials (its
# queues are made through the first). The order rotates every repetition;
# medians of REPS. Redis CPU is INFO cpu, the daemon's /proc/<pid>/stat (of
# the retryd that served the run), the client's getrusage, each per message.
SP="" SP_SIG="" SIG_PID="" SIGV4_KEY=""
sqs_create() {   # sqs_create NAME: CreateQueue through the JSON protocol
    curl -s -m 5 -H 'Content-Type: application/x-amz-json-1.0' \
        -H 'X-Amz-Target: AmazonSQS.CreateQueue' -d "{\"QueueName\":\"$1\"}" \
        "http://127.0.0.1:$SP/" 2>>"$tmp/loadgen.err" | grep -q '"QueueUrl"'
}

section2s_rep() {
    local rep=$1 k q
    shift
    for k in "$@"; do
        case $k in
        native) lg_http "sq.enq.$rep" enqueue "s2n-$rep" 50 "$N_HTTP"
                lg_http "sq.enqb.$rep" enqueue "s2b-$rep" 50 "$N_HTTP" ;;
        sqs) q="s2s-$rep"
             sqs_create "$q" || { say "2s: CreateQueue $q failed"; continue; }
             LG_PORT=$SP lg_http "sq.send.$rep" sqs-send "$q" 50 "$N_HTTP" ;;
        sigv4) q="s2g-$rep"
             sqs_create "$q" || { say "2s: CreateQueue $q failed"; continue; }
             retryd_pid=$SIG_PID LG_PORT=$SP_SIG lg_http "sq.ssig.$rep" sqs-send "$q" 50 "$N_HTTP" \
                 --sigv4 "$SIGV4_KEY" ;;
        esac
    done
    for k in "$@"; do
        case $k in
        native) lg_http "sq.settle.$rep" settle "s2n-$rep" 50 "$N_HTTP" --count 10
                lg_http "sq.work.$rep" work "s2b-$rep" 50 "$N_HTTP" --count 10 ;;
        sqs) LG_PORT=$SP lg_http "sq.recv.$rep" sqs-receive "s2s-$rep" 50 "$N_HTTP" --count 10 ;;
        sigv4) retryd_pid=$SIG_PID LG_PORT=$SP_SIG lg_http "sq.rsig.$rep" sqs-receive "s2g-$rep" 50 \
                   "$N_HTTP" --count 10 --sigv4 "$SIGV4_KEY" ;;
        esac
    done
}

section2s() {
    local rep order=(native sqs sigv4) saved_hp=$HP saved_pid=$retryd_pid i plain_hp plain_pid
    SP=$(free_port) || die "no free port"
    start_retryd --sqs-listen "127.0.0.1:$SP"
    plain_hp=$HP plain_pid=$retryd_pid
    SIGV4_KEY="AKIDBENCH2S:bench-secret-$RANDOM$RANDOM"
    echo "${SIGV4_KEY%%:*} ${SIGV4_KEY#*:}" >"$tmp/sqs-credentials"
    SP_SIG=$(free_port) || die "no free port"
    start_retryd --sqs-listen "127.0.0.1:$SP_SIG" --sqs-credentials "$tmp/sqs-credentials"
    SIG_PID=$retryd_pid
    HP=$plain_hp retryd_pid=$plain_pid
    for ((i = 0; i < 50; i++)); do port_open "$SP" && port_open "$SP_SIG" && break; sleep 0.1; done
    say "2s. SQS endpoint: retryd pid $retryd_pid (HTTP 127.0.0.1:$HP, SQS 127.0.0.1:$SP), with SigV4 pid $SIG_PID (SQS 127.0.0.1:$SP_SIG)"
    for rep in $(seq 1 "$REPS"); do
        say "2s. SQS endpoint vs native, repetition $rep of $REPS (${order[*]})"
        section2s_rep "$rep" "${order[@]}"
        say "2s. msgs/s: enqueue $(fmt_int "$(get "sq.enq.$rep.rate")"), send $(fmt_int "$(get "sq.send.$rep.rate")"), signed $(fmt_int "$(get "sq.ssig.$rep.rate")"); settle-and-claim 10 $(fmt_int "$(get "sq.settle.$rep.rate")"), claim 10 + ack $(fmt_int "$(get "sq.work.$rep.rate")"), receive + delete $(fmt_int "$(get "sq.recv.$rep.rate")"), signed $(fmt_int "$(get "sq.rsig.$rep.rate")")"
        order=("${order[@]:1}" "${order[0]}")
    done
    stop_retryd
    retryd_pid=$SIG_PID
    stop_retryd
    HP=$saved_hp retryd_pid=$saved_pid
    local k r m vals
    for k in enq enqb send settle work recv ssig rsig; do
        for m in rate redis_us retryd_us client_us; do
            vals=()
            for r in $(seq 1 "$REPS"); do vals+=("$(get "sq.$k.$r.$m")"); done
            put "sq.$k.$m" "$(median "${vals[@]}")"
        done
    done
    for k in "enq:enqueue" "send:sqs_send" "settle:settle_claim" "recv:sqs_receive" \
             "recv:sqs_delete_batch" "work:claim" "work:succeed_many"; do
        for m in p50 p99; do
            vals=()
            for r in $(seq 1 "$REPS"); do vals+=("$(get "sq.${k%%:*}.$r.${k#*:}.$m")"); done
            put "sq.${k%%:*}.${k#*:}.$m" "$(median "${vals[@]}")"
        done
    done
    local mc="median of $REPS alternating runs"
    [ "$REPS" = 1 ] && mc="1 run"
    table_start "2s. SQS endpoint (JSON protocol; SigV4 in the last four rows only) vs the native HTTP API on the same retryd, 50 connections, $N_HTTP messages of 100 bytes ($mc)" \
        figure "SQS" "native" "SQS / native"
    row "SendMessage vs enqueue (msgs/s)" "$(fmt_int "$(get sq.send.rate)")" \
        "$(fmt_int "$(get sq.enq.rate)")" "$(ratio "$(get sq.send.rate)" "$(get sq.enq.rate)")"
    row "  p50 / p99 (ms)" "$(ms_pair sq.send.sqs_send)" "$(ms_pair sq.enq.enqueue)" ""
    row "  Redis CPU per message (µs)" "$(fmt "$(get sq.send.redis_us)" 1)" \
        "$(fmt "$(get sq.enq.redis_us)" 1)" "$(ratio "$(get sq.send.redis_us)" "$(get sq.enq.redis_us)")"
    row "  daemon CPU per message (µs)" "$(fmt "$(get sq.send.retryd_us)" 1)" \
        "$(fmt "$(get sq.enq.retryd_us)" 1)" \
        "$(ratio "$(get sq.send.retryd_us)" "$(get sq.enq.retryd_us)")"
    row "  client CPU per message (µs)" "$(fmt "$(get sq.send.client_us)" 1)" \
        "$(fmt "$(get sq.enq.client_us)" 1)" ""
    row "ReceiveMessage 10 + DeleteMessageBatch 10 vs settle-and-claim of 10, 50 workers (msgs/s)" \
        "$(fmt_int "$(get sq.recv.rate)")" "$(fmt_int "$(get sq.settle.rate)")" \
        "$(ratio "$(get sq.recv.rate)" "$(get sq.settle.rate)")"
    row "  receive / delete batch p50 / p99 (ms) vs settle-and-claim" \
        "$(ms_pair sq.recv.sqs_receive) ; $(ms_pair sq.recv.sqs_delete_batch)" \
        "$(ms_pair sq.settle.settle_claim)" ""
    row "  Redis CPU per message (µs)" "$(fmt "$(get sq.recv.redis_us)" 1)" \
        "$(fmt "$(get sq.settle.redis_us)" 1)" \
        "$(ratio "$(get sq.recv.redis_us)" "$(get sq.settle.redis_us)")"
    row "  daemon CPU per message (µs)" "$(fmt "$(get sq.recv.retryd_us)" 1)" \
        "$(fmt "$(get sq.settle.retryd_us)" 1)" \
        "$(ratio "$(get sq.recv.retryd_us)" "$(get sq.settle.retryd_us)")"
    row "  client CPU per message (µs)" "$(fmt "$(get sq.recv.client_us)" 1)" \
        "$(fmt "$(get sq.settle.client_us)" 1)" ""
    row "ReceiveMessage 10 + DeleteMessageBatch 10 vs claim 10 + batch ack (the same two requests per 10) (msgs/s)" \
        "$(fmt_int "$(get sq.recv.rate)")" "$(fmt_int "$(get sq.work.rate)")" \
        "$(ratio "$(get sq.recv.rate)" "$(get sq.work.rate)")"
    row "  Redis / daemon CPU per message (µs)" \
        "$(fmt "$(get sq.recv.redis_us)" 1) / $(fmt "$(get sq.recv.retryd_us)" 1)" \
        "$(fmt "$(get sq.work.redis_us)" 1) / $(fmt "$(get sq.work.retryd_us)" 1)" \
        "$(ratio "$(get sq.recv.redis_us)" "$(get sq.work.redis_us)") / $(ratio "$(get sq.recv.retryd_us)" "$(get sq.work.retryd_us)")"
    local sl nl
    sl=$(calc "$(get sq.send.retryd_us) + $(get sq.recv.retryd_us)")
    nl=$(calc "$(get sq.enq.retryd_us) + $(get sq.settle.retryd_us)")
    row "daemon CPU per lifecycle: send + receive + delete vs enqueue + settle-and-claim of 10 (µs)" \
        "$(fmt "$sl" 1)" "$(fmt "$nl" 1)" "$(ratio "$sl" "$nl")"
    row "SendMessage signed with SigV4 vs unsigned (msgs/s; the SQS column is signed, the native one unsigned SQS)" \
        "$(fmt_int "$(get sq.ssig.rate)")" "$(fmt_int "$(get sq.send.rate)")" \
        "$(ratio "$(get sq.ssig.rate)" "$(get sq.send.rate)")"
    row "  daemon CPU per message, signed vs unsigned (µs)" "$(fmt "$(get sq.ssig.retryd_us)" 1)" \
        "$(fmt "$(get sq.send.retryd_us)" 1)" \
        "$(ratio "$(get sq.ssig.retryd_us)" "$(get sq.send.retryd_us)")"
    row "receive 10 + delete batch 10 signed with SigV4 vs unsigned (msgs/s)" \
        "$(fmt_int "$(get sq.rsig.rate)")" "$(fmt_int "$(get sq.recv.rate)")" \
        "$(ratio "$(get sq.rsig.rate)" "$(get sq.recv.rate)")"
    row "  daemon CPU per message, signed vs unsigned (µs)" "$(fmt "$(get sq.rsig.retryd_us)" 1)" \
        "$(fmt "$(get sq.recv.retryd_us)" 1)" \
        "$(ratio "$(get sq.rsig.retryd_us)" "$(get sq.recv.retryd_us)")"
}

# The issue 23 rows of the targets table (section 2s).
targets_sqs() {
    local r d
    r=$(calc "$(get sq.recv.rate) / $(get sq.settle.rate)")
    row "SQS receive 10 + delete batch 10 vs native settle-and-claim of 10, W=50 (msgs/s; section 2s)" \
        "$(fmtx "$r")" "≥ 0.7x" "$(verdict "$r" ">=" 0.7)"
    r=$(calc "$(get sq.recv.redis_us) / $(get sq.settle.redis_us)")
    d=$(calc "($r > 1) ? $r - 1 : 1 - $r")
    row "  its Redis CPU per message vs the native loop's" "$(fmtx "$r")" "1.00x ± 10%" \
        "$(verdict "$d" "<=" 0.1)"
    r=$(calc "$(get sq.send.rate) / $(get sq.enq.rate)")
    row "SQS SendMessage vs native enqueue, 50 connections (msgs/s)" "$(fmtx "$r")" "≥ 0.8x" \
        "$(verdict "$r" ">=" 0.8)"
    r=$(calc "$(get sq.send.retryd_us) / $(get sq.enq.retryd_us)")
    row "SQS daemon CPU per message vs native: SendMessage vs enqueue" "$(fmtx "$r")" "≤ 1.5x" \
        "$(verdict "$r" "<=" 1.5)"
    r=$(calc "$(get sq.recv.retryd_us) / $(get sq.settle.retryd_us)")
    row "SQS daemon CPU per message vs native: receive + delete batch vs settle-and-claim of 10" \
        "$(fmtx "$r")" "≤ 1.5x" "$(verdict "$r" "<=" 1.5)"
}

# ---------------------------------------------------------------------------
# 5. Memory
# ---------------------------------------------------------------------------
# mem_retryd NAME: bytes per pending message, N_BULL enqueues into an empty queue.
mem_retryd() {
    local m0 m1 q
    q=$(base "mem-$1")
    m0=$(used_memory)
    enqueue_fcall "$q" "$N_BULL"
    m1=$(used_memory)
    put "mem.$1" "$(calc "($m1 - $m0) / $N_BULL")"
    rcli del "$q:3:ready" "$q:3:due_pushed" >/dev/null
    rcli eval "for i = 1, tonumber(ARGV[1]) do redis.call('UNLINK', KEYS[1] .. ':m:' .. i) end" \
        1 "$q" "$N_BULL" >/dev/null
}

mem_bull() {
    local out line
    [ "$BULL_OK" = 1 ] || return 0
    out=$(timeout 120 node bench/bullmq_bench.mjs --port "$RP" --jobs "$N_BULL" --payload-bytes 100 \
          --concurrency none 2>>"$tmp/bullmq.err")
    line=$(printf '%s\n' "$out" | grep '^add ')
    put "mem.bull.$1" "$(kv "$line" bytes_per_job)"
}

section5() {
    say "5. memory"
    local lv
    lv=$(rcli config get hash-max-listpack-value | tail -n 1)
    mem_retryd default
    put mem.bull.default "$(get bull.bytes)"
    rcli config set hash-max-listpack-value 256 >/dev/null
    mem_retryd lp256
    mem_bull lp256
    rcli config set hash-max-listpack-value "$lv" >/dev/null
    local un="BullMQ: unavailable ($BULL_WHY)"
    b() { if [ "$BULL_OK" = 1 ]; then "$@"; else echo "$un"; fi; }
    table_start "5. Memory: Redis bytes per pending message, 100-byte payload (INFO used_memory delta / $N_BULL)" \
        figure retryd BullMQ "retryd / BullMQ"
    row "default config (hash-max-listpack-value $lv)" "$(fmt_int "$(get mem.default)")" \
        "$(b fmt_int "$(get mem.bull.default)")" "$(ratio "$(get mem.default)" "$(get mem.bull.default)")"
    row "with hash-max-listpack-value 256" "$(fmt_int "$(get mem.lp256)")" \
        "$(b fmt_int "$(get mem.bull.lp256)")" "$(ratio "$(get mem.lp256)" "$(get mem.bull.lp256)")"
}

# ---------------------------------------------------------------------------
# 6. Retry latency
# ---------------------------------------------------------------------------
section6() {
    say "6. retry latency under load"
    local load=$((N_HTTP * 2)) ql="r-load" qr="r-retry"
    lg_http r.fill enqueue "$ql" 50 "$load"
    lg_http r.fill2 enqueue "$qr" 8 "$N_RETRY"
    # Background: 48 workers claim+succeed on another queue for the whole run.
    "$LOADGEN" work --port "$HP" --queue "$ql" --conns 48 --messages "$load" \
        >"$tmp/bg.out" 2>>"$tmp/loadgen.err" &
    bg_pid=$!
    sleep 0.2
    lg_http r.retry failonce "$qr" 8 "$N_RETRY" --retry-after-s 1
    put r.bg_running "$(kill -0 "$bg_pid" 2>/dev/null && echo yes || echo no)"
    wait "$bg_pid" 2>/dev/null
    bg_pid=""
    put r.bg_rate "$(kv "$(grep '^mode=' "$tmp/bg.out")" msgs_per_s)"
    table_start "6. Retry latency: from retry_after to claimed (Redis clock at both ends, ms)" \
        figure "p50 / p99" "one tick" "p99 / tick"
    row "retry_after 1 s, 8 workers idle in long-poll, 48 busy workers on another queue ($N_RETRY msgs)" \
        "$(get r.retry.retry_p50) / $(get r.retry.retry_p99)" "250" \
        "$(ratio "$(get r.retry.retry_p99)" 250)"
    row "retry_after 0, every message failing once at full load (section 2, queueing included)" \
        "$(get http.failonce.retry_p50) / $(get http.failonce.retry_p99)" "250" \
        "$(ratio "$(get http.failonce.retry_p99)" 250)"
    row "  background load during the measured run (msgs/s; still running at its end)" \
        "$(fmt_int "$(get r.bg_rate)")" "$(get r.bg_running)" ""
}

# ---------------------------------------------------------------------------
# 7. appendonly everysec
# ---------------------------------------------------------------------------
# A fresh pair with no persistence and a fresh pair with appendonly everysec,
# side by side (the big dataset of section 4 is gone first); every figure
# runs on one pair and then at once on the other.
section7() {
    say "7. appendonly everysec beside no persistence"
    stop_retryd
    stop_redis
    start_redis none; start_retryd; save_pair none
    start_redis aof; start_retryd; save_pair aof
    local t rep k
    for rep in $(seq 1 "$REPS"); do
        say "7. repetition $rep of $REPS"
        for t in none aof; do use_pair $t
            rb "s7.$t.enqueue.$rep" fcall "$N_AOF" 50 16 FCALL "${FN}enqueue" 1 "$(base "a-s1-$rep")" \
                "$PAYLOAD" 3 0; done
        for t in none aof; do use_pair $t
            rb "s7.$t.claim.$rep" fcall "$N_AOF" 50 16 FCALL "${FN}claim" 1 "$(base "a-s1-$rep")" 30000 1
        done
        for t in none aof; do use_pair $t; lg_http "s7.$t.henq.$rep" enqueue "a-h-$rep" 50 "$N_AOF"; done
        for t in none aof; do use_pair $t
            lg_http "s7.$t.w1.$rep" work "a-h-$rep" 50 "$N_AOF" --count 1; done
        for t in none aof; do use_pair $t; lg_http "s7.$t.henq_b.$rep" enqueue "a-b-$rep" 50 "$N_AOF"; done
        for t in none aof; do use_pair $t
            lg_http "s7.$t.w10.$rep" work "a-b-$rep" 50 "$N_AOF" --count 10; done
    done
    for t in none aof; do
        for k in enqueue.rps claim.rps henq.rate henq.redis_us w1.rate w1.redis_us w10.rate; do
            local vals=()
            for rep in $(seq 1 "$REPS"); do vals+=("$(get "s7.$t.${k%%.*}.$rep.${k#*.}")"); done
            put "s7.$t.$k" "$(median "${vals[@]}")"
        done
        put "s7.$t.life" "$(calc "$(get "s7.$t.henq.redis_us") + $(get "s7.$t.w1.redis_us")")"
    done
    local mc="median of $REPS"
    [ "$REPS" = 1 ] && mc="1 run"
    table_start "7. appendonly everysec beside no persistence (two fresh pairs, runs in turns, $N_AOF messages, $mc)" \
        figure "appendonly everysec" "no persistence" ratio
    local f
    for f in "enqueue.rps:FCALL enqueue -P 16 (calls/s)" "claim.rps:FCALL claim -P 16 (calls/s)" \
             "henq.rate:HTTP enqueue (msgs/s)" "w1.rate:HTTP claim+succeed, count 1 (msgs/s)" \
             "w10.rate:HTTP claim+succeed, count 10 + batch ack (msgs/s)"; do
        row "${f#*:}" "$(fmt_int "$(get "s7.aof.${f%%:*}")")" "$(fmt_int "$(get "s7.none.${f%%:*}")")" \
            "$(ratio "$(get "s7.aof.${f%%:*}")" "$(get "s7.none.${f%%:*}")")"
    done
    row "Redis CPU per lifecycle, count 1 (µs)" "$(fmt "$(get s7.aof.life)" 1)" \
        "$(fmt "$(get s7.none.life)" 1)" "$(ratio "$(get s7.aof.life)" "$(get s7.none.life)")"
}

# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------
# verdict VALUE OP LIMIT: met / missed / n/a.
verdict() {
    awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN {
        if (v == "" || v == "n/a" || v ~ /skipped|unavailable|not run|nan/) { print "n/a"; exit }
        ok = (op == "<=") ? (v + 0 <= l + 0) : (v + 0 >= l + 0)
        print ok ? "met" : "missed" }'
}

targets() {
    local r skip="skipped (QUICK)"
    table_start "Targets" target measured goal verdict
    row "time series: Redis work per lifecycle, --series on vs off (% of commands run; section 10)" \
        "$(fmt "$(get series.cmdpct)" 3)" "≤ +3" "$(verdict "$(get series.cmdpct)" "<=" 3)"
    r=$(calc "$(get life.retryd) / $(get life.bull)")
    [ "$BULL_OK" = 1 ] || r="BullMQ: unavailable"
    row "Redis CPU per lifecycle ≤ 1/3 of BullMQ's (retryd / BullMQ)" "$(fmt "$r" 2)" "≤ 0.33" \
        "$(verdict "$r" "<=" 0.3334)"
    r=$(calc "$(get http.w50c1.rate) / $(get bull.c50)")
    [ "$BULL_OK" = 1 ] || r="BullMQ: unavailable"
    row "HTTP claim+succeed, count 1, vs BullMQ Worker c=50" "$(fmtx "$r")" "≥ 1.2x" \
        "$(verdict "$r" ">=" 1.2)"
    r=$(calc "$(get http.w50c10.rate) / $(get bull.c50)")
    [ "$BULL_OK" = 1 ] || r="BullMQ: unavailable"
    row "HTTP claim+succeed, count 10 + batch ack, vs BullMQ Worker c=50" "$(fmtx "$r")" "≥ 3x" \
        "$(verdict "$r" ">=" 3)"
    r=$(calc "$(get http.s50c1.rate) / $(get bull.c50)")
    [ "$BULL_OK" = 1 ] || r="BullMQ: unavailable"
    row "worker loop W=50, settle-and-claim (one request per message), vs BullMQ c=50" \
        "$(fmtx "$r")" "≥ 1.5x" "$(verdict "$r" ">=" 1.5)"
    r=$(calc "$(get http.s50c1g.rate) / $(get bull.c50)")
    [ "$BULL_OK" = 1 ] || r="BullMQ: unavailable"
    row "worker loop W=50 with 1,000 fairness groups, vs BullMQ c=50" \
        "$(fmtx "$r")" "≥ 1.5x" "$(verdict "$r" ">=" 1.5)"
    r=$(calc "$(get gclaim.groups.us) / $(get gclaim.none.us)")
    row "claim with 100,000 active groups vs without groups (Redis µs per call)" \
        "$(fmtx "$r")" "≤ 1.3x" "$(verdict "$r" "<=" 1.3)"
    r=$(calc "$(get http.s1c1.rate) / $(get bull.c1)")
    [ "$BULL_OK" = 1 ] || r="BullMQ: unavailable"
    row "worker loop W=1, settle-and-claim, vs BullMQ c=1" "$(fmtx "$r")" "≥ 1.2x" \
        "$(verdict "$r" ">=" 1.2)"
    r=$(calc "$(get life.settle) / $(get life.bull)")
    [ "$BULL_OK" = 1 ] || r="BullMQ: unavailable"
    row "Redis CPU per lifecycle, enqueue + settle-and-claim (W=50) vs add + process" \
        "$(fmt "$r" 2)" "≤ 0.34" "$(verdict "$r" "<=" 0.34)"
    r=$(calc "$(get claim.p16.rps) / $(get minclaim.p16.rps)")
    row "claim vs minimal Lua claim, -P 16 (calls/s ratio)" "$(fmtx "$r")" "≥ 0.8x" \
        "$(verdict "$r" ">=" 0.8)"
    r=$(calc "$(get claim.p1.rps) / $(get minclaim.p1.rps)")
    row "claim vs minimal Lua claim, -P 1 (calls/s ratio)" "$(fmtx "$r")" "≥ 0.8x" \
        "$(verdict "$r" ">=" 0.8)"
    if [ "$GROWTH_BIG" -gt 0 ]; then
        r=$(calc "$(get g.claim.big.rate) / $(get g.claim.small.rate)")
        row "claim throughput at 1M pending vs 1k" "$(fmtx "$r")" "≥ 0.90x" "$(verdict "$r" ">=" 0.9)"
        r=$(calc "$(get g.page.big.rps) / $(get g.page.small.rps)")
        row "dead-letter page at 1M dead vs 1k" "$(fmtx "$r")" "≥ 0.80x" "$(verdict "$r" ">=" 0.8)"
    else
        row "claim throughput at 1M pending vs 1k" "$skip" "≥ 0.90x" "n/a"
        row "dead-letter page at 1M dead vs 1k" "$skip" "≥ 0.80x" "n/a"
    fi
    r=$(calc "$(get mem.default) / $(get mem.bull.default)")
    [ "$BULL_OK" = 1 ] || r="BullMQ: unavailable"
    row "bytes per pending message ≤ 1/3 of BullMQ's (retryd / BullMQ)" "$(fmt "$r" 2)" "≤ 0.33" \
        "$(verdict "$r" "<=" 0.3334)"
    r=$(get r.retry.retry_p99)
    row "due-to-claimable p99 (ms), idle long-poll workers, under load" "$r" "≤ 250" \
        "$(verdict "$r" "<=" 250)"
    r=$(get idle.sweep.cpu_pct)
    row "Redis CPU with 10,000 idle queues and 3 instances, worst window (% of one core)" \
        "$(fmt "$r" 2)" "≤ 2" "$(verdict "$r" "<=" 2)"
    r=$(get idle.retry.retry_p99)
    row "due-to-claimable p99 (ms) on one of 10,000 idle queues" "$r" "≤ 250" \
        "$(verdict "$r" "<=" 250)"
    targets_sqs
    targets_i25
}

# The targets of issue 25 (docs/benchmarks.md "Issue 25"): against BullMQ
# 6.7.0 and Sidekiq 6.4.1 on the same redis-server, medians of alternating
# runs. A figure of a section that did not run reads "not run".
targets_i25() {
    local r nr="not run (BENCH_ONLY)"
    t25() {   # t25 LABEL SECTION_RAN VALUE FORMAT GOAL OP LIMIT
        local v=$3
        [ "$2" = 1 ] || v=$nr
        if [ "$4" = x ]; then row "$1" "$(fmtx "$v")" "$5" "$(verdict "$v" "$6" "$7")"
        else row "$1" "$(fmt "$v" 2)" "$5" "$(verdict "$v" "$6" "$7")"; fi
    }
    local s23=0 s3e=0 s3b=0 s3k=0 s5=0
    [ -n "${V[http.s50c1.rate]:-}" ] && s23=1
    [ -n "${V[e3.lg.rate]:-}${V[e3.bull.rate]:-}" ] && s3e=1
    [ -n "${V[b3.bull.rate]:-}${V[b3.sk.rate]:-}${V[b3.lg.rate]:-}" ] && s3b=1
    [ -n "${V[k3.w1.rate]:-}" ] && s3k=1
    [ -n "${V[mem.bull.default]:-}" ] && s5=1
    table_start "Targets of issue 25 (retryd vs BullMQ $(get bull.version) and Sidekiq $(get sk.version), same redis-server)" \
        target measured goal verdict
    t25 "worker loop W=50, settle-and-claim, 1 message per request, vs BullMQ c=50 (3a)" "$s23" \
        "$(calc "$(get http.s50c1.rate) / $(get bull.c50)")" x "≥ 2.5x" ">=" 2.5
    t25 "worker loop W=1, settle-and-claim, vs BullMQ c=1 (3a)" "$s23" \
        "$(calc "$(get http.s1c1.rate) / $(get bull.c1)")" x "≥ 1.5x" ">=" 1.5
    t25 "worker loop W=50, count 10 + batch ack, vs BullMQ c=50 (3a)" "$s23" \
        "$(calc "$(get http.w50c10.rate) / $(get bull.c50)")" x "≥ 4x" ">=" 4
    t25 "  the same with settle-and-claim of 10 (3a)" "$s23" \
        "$(calc "$(get http.s50c10.rate) / $(get bull.c50)")" x "≥ 4x" ">=" 4
    t25 "Redis CPU per lifecycle, enqueue + settle-and-claim (W=50) vs add + process (3a)" "$s23" \
        "$(calc "$(get life.settle) / $(get life.bull)")" n "≤ 0.34" "<=" 0.34
    t25 "enqueue, one message per HTTP request, 50 connections, vs queue.add, 50 in flight (3e)" "$s3e" \
        "$(calc "$(get e3.lg.rate) / $(get e3.bull.rate)")" x "≥ 2x" ">=" 2
    r=$(calc "$(get b3.lg.rate) / $(get b3.bull.rate)")
    [ "$BATCH_OK" = 1 ] || r="skipped: $BATCH_WHY"
    t25 "batch enqueue of 1000 vs addBulk of 1000 (3b)" "$s3b" "$r" x "≥ 3x" ">=" 3
    t25 "bytes per pending message vs BullMQ (5)" "$s5" \
        "$(calc "$(get mem.default) / $(get mem.bull.default)")" n "≤ 0.30" "<=" 0.30
    r=$(calc "$(get b3.lg.rate) / $(get b3.sk.rate)")
    [ "$BATCH_OK" = 1 ] || r="skipped: $BATCH_WHY"
    t25 "Sidekiq: batch enqueue of 1000 vs push_bulk of 1000 (3b)" "$s3b" "$r" x "≥ 1x" ">=" 1
    t25 "Sidekiq: worker loop W=1, settle-and-claim vs sidekiq -c 1 (3k)" "$s3k" \
        "$(calc "$(get k3.w1.rate) / $(get k3.sk1.rate)")" x "≥ 1x" ">=" 1
    t25 "Sidekiq: Redis CPU per lifecycle, with leases, vs Sidekiq's lease-free BRPOP (3k)" "$s3k" \
        "$(calc "$(get k3.life) / $(get k3.sklife)")" n "≤ 1.00" "<=" 1
}

# ---------------------------------------------------------------------------
# 8. Redis Cluster: claim+succeed over 3 masters against 1 master (docs/cluster.md)
# ---------------------------------------------------------------------------
# Six queues (their hash tags spread them over the masters), one loadgen per
# queue running at once, the same total connections, through a retryd on a
# three-master cluster (scripts/cluster.sh, no replicas) and through the
# single-Redis retryd of section 2. On 2 cores every process shares them, so
# the gain is bounded by the machine, not by Redis.

CL_QUEUES="cl0 cl1 cl2 cl3 cl4 cl5"

# cl_run NAME PORT N: enqueue N per queue, then claim+succeed them all with
# 6 loadgens at once (8 connections each); stores NAME.rate (msgs/s).
cl_run() {
    local name=$1 port=$2 n=$3 q pids=() t0 t1
    for q in $CL_QUEUES; do
        "$LOADGEN" enqueue --port "$port" --queue "$name-$q" --conns 8 --messages "$n"             >/dev/null 2>>"$tmp/loadgen.err" || return 1
    done
    t0=$(date +%s%N)
    for q in $CL_QUEUES; do
        "$LOADGEN" work --port "$port" --queue "$name-$q" --conns 8 --messages "$n"             >"$tmp/cl-$name-$q.out" 2>>"$tmp/loadgen.err" &
        pids+=($!)
    done
    wait "${pids[@]}" || return 1
    t1=$(date +%s%N)
    put "$name.rate" "$(calc "6 * $n * 1000000000 / ($t1 - $t0)")"
}

# Redis CPU (user + sys, microseconds) of the node on port $1.
node_cpu_us() {
    redis-cli -p "$1" info cpu | tr -d '\r' | awk -F: '$1=="used_cpu_user"||$1=="used_cpu_sys"{s+=$2}
        END{printf "%.0f", s*1e6}'
}

section8() {
    local n=$((N_HTTP / 6)) seeds cport cpid="" p masters=() c0=() c1=() i total=0 share
    table_start "8. Redis Cluster: claim+succeed, 6 queues at once, 48 connections, $n messages each" \
        "figure" "3 masters" "1 master" "ratio"
    if ! seeds=$("$ROOT/scripts/cluster.sh" start "$tmp/cluster" 3 0 2>>"$tmp/cluster.err"); then
        say "8. cluster did not start: $(tail -n 1 "$tmp/cluster.err")"
        row "claim+succeed, total (msgs/s)" "n/a (cluster did not start)" "" ""
        row "Redis CPU per message, summed over the masters (µs)" "n/a" "" ""
        row "share of the messages' Redis CPU on each master" "n/a" "" ""
        return
    fi
    IFS=, read -r -a masters <<<"$seeds"
    cport=$(free_port) || die "no free port"
    "$RETRYD_BIN" --listen "127.0.0.1:$cport" --redis-cluster "$seeds" --prefix "$PREFIX" \
        --tick-ms 250 --log-level warn >>"$tmp/retryd-cluster.log" 2>&1 &
    cpid=$!
    SERVER_PIDS="$SERVER_PIDS $cpid"
    http_ready "$cport" 100 || true
    for p in "${masters[@]}"; do c0+=("$(node_cpu_us "${p##*:}")"); done
    cl_run cluster "$cport" "$n" || say "8. cluster run failed"
    for p in "${masters[@]}"; do c1+=("$(node_cpu_us "${p##*:}")"); done
    local r0 r1
    r0=$(redis_cpu_us)
    cl_run single "$HP" "$n" || say "8. single run failed"
    r1=$(redis_cpu_us)
    for i in "${!masters[@]}"; do total=$((total + c1[i] - c0[i])); done
    share=""
    for i in "${!masters[@]}"; do
        share="$share$( [ -n "$share" ] && echo " / ")$(fmt "$(calc "100 * (${c1[i]} - ${c0[i]}) / ($total + 1)")" 0)%"
    done
    row "claim+succeed, total (msgs/s)" "$(fmt_int "$(get cluster.rate)")" \
        "$(fmt_int "$(get single.rate)")" "$(fmtx "$(ratio "$(get cluster.rate)" "$(get single.rate)")")"
    row "Redis CPU per message, summed over the masters (µs; includes the enqueue)" \
        "$(fmt "$(calc "$total / (6 * $n)")")" "$(fmt "$(calc "($r1 - $r0) / (6 * $n)")")" \
        "$(fmtx "$(ratio "$(calc "$total / (6 * $n)")" "$(calc "($r1 - $r0) / (6 * $n)")")")"
    row "share of the messages' Redis CPU on each master" "$share" "100%" ""
    stop_pid "$cpid"
    forget_pid "$cpid"
    "$ROOT/scripts/cluster.sh" stop "$tmp/cluster"
}


# ---------------------------------------------------------------------------
# 9. Idle queues: what 10,000 of them cost Redis (docs/reference.md "Cost follows work")
# ---------------------------------------------------------------------------
# A fresh redis-server and three retryd (--tick-ms 250) sharing it; 10,000
# queues get one ready message each through HTTP (so each retryd registers
# them its own way) and then nothing happens. Redis CPU (INFO CPU
# used_cpu_sys + used_cpu_user) and FCALLs are measured over IDLE_WINDOW_S
# with the registry sweep running (a pass is made to start at the window's
# beginning): with 10,000 queues a pass takes 100 s and the next starts as it
# ends, so that is the steady state (docs/design.md "Timers and the
# registry"). The same with the sweep held off shows the fixed part. Then a
# queue among them gets IDLE_RETRY messages that fail once with retry_after
# 1 s, and loadgen reports how late each retry was claimed (long-poll
# workers, Redis clock at both ends).
IDLE_QUEUES=10000

# idle_fill PORT N: POST one message to each of idle-00000 .. idle-(N-1),
# one curl process on one keep-alive connection.
idle_fill() {
    local port=$1 n=$2 i cfg="$tmp/idle-fill.cfg"
    {
        echo 'silent'
        echo 'request = "POST"'
        echo 'header = "Content-Type: application/json"'
        echo 'data = "{\"payload\":\"idle\"}"'
        for ((i = 0; i < n; i++)); do
            printf 'url = "http://127.0.0.1:%d/queues/idle-%05d/messages"\n' "$port" "$i"
        done
    } >"$cfg"
    curl -K "$cfg" >/dev/null 2>>"$tmp/idle-fill.err"
}

# idle_window NAME: Redis CPU (% of one core) and FCALL+FCALL_RO per second
# over IDLE_WINDOW_S.
idle_window() {
    local c0 c1 f0 f1 t0 t1
    c0=$(redis_cpu_us); f0=$(( $(cmdstat fcall | cut -d' ' -f1) + $(cmdstat fcall_ro | cut -d' ' -f1) ))
    t0=$(date +%s%N)
    sleep "$IDLE_WINDOW_S"
    c1=$(redis_cpu_us); f1=$(( $(cmdstat fcall | cut -d' ' -f1) + $(cmdstat fcall_ro | cut -d' ' -f1) ))
    t1=$(date +%s%N)
    put "$1.cpu_pct" "$(calc "100 * ($c1 - $c0) * 1000 / ($t1 - $t0)")"
    put "$1.fcall_s" "$(calc "($f1 - $f0) * 1000000000 / ($t1 - $t0)")"
}

section9() {
    say "9. idle queues: $IDLE_QUEUES queues, 3 instances"
    local ports=() i port pid n
    save_pair main
    start_redis none
    for i in 1 2 3; do
        port=$(free_port) || die "no free port"
        "$RETRYD_BIN" --listen "127.0.0.1:$port" --redis "redis://127.0.0.1:$RP" \
            --prefix "$PREFIX-idle" --tick-ms 250 --log-level warn >>"$tmp/retryd-idle.log" 2>&1 &
        pid=$!
        SERVER_PIDS="$SERVER_PIDS $pid"
        IDLE_PIDS="$IDLE_PIDS $pid"
        http_ready "$port" 100 || true
        ports+=("$port")
    done
    idle_fill "${ports[0]}" "$IDLE_QUEUES"
    n=$(rcli scard "$PREFIX-idle:queues")
    put idle.registered "$n"
    sleep 2
    # The sweep's state (docs/design.md): a new pass starts now...
    rcli del "{$PREFIX-idle:queues}:sweep" >/dev/null
    idle_window idle.sweep
    # ... and then none for a while: only the timer's rounds are left.
    rcli hset "{$PREFIX-idle:queues}:sweep" cursor 0 next_at 99999999999999 >/dev/null
    idle_window idle.nosweep
    local q
    q=$(printf 'idle-%05d' $((IDLE_QUEUES / 2)))
    HP=${ports[0]} lg_http idle.fill enqueue "$q" 8 "$IDLE_RETRY" >/dev/null
    HP=${ports[1]} lg_http idle.retry failonce "$q" 8 "$IDLE_RETRY" --retry-after-s 1
    for pid in $IDLE_PIDS; do stop_pid "$pid"; forget_pid "$pid"; done
    IDLE_PIDS=""
    stop_redis
    use_pair main
    table_start "9. Idle queues: $(fmt_int "$(get idle.registered)") registered queues with nothing due, 3 retryd (--tick-ms 250) on one Redis, ${IDLE_WINDOW_S} s windows" \
        figure measured goal ""
    row "Redis CPU, idle, the registry sweep running (% of one core; the steady state)" \
        "$(fmt "$(get idle.sweep.cpu_pct)" 2)" "≤ 2" ""
    row "  FCALL + FCALL_RO per second" "$(fmt "$(get idle.sweep.fcall_s)" 1)" "" ""
    row "Redis CPU, idle, the sweep held off (% of one core; the timer's rounds alone)" \
        "$(fmt "$(get idle.nosweep.cpu_pct)" 2)" "" ""
    row "  FCALL + FCALL_RO per second" "$(fmt "$(get idle.nosweep.fcall_s)" 1)" "" ""
    row "due-to-claimable on one of them, retry_after 1 s, $IDLE_RETRY msgs, long-poll workers (p50 / p99 ms)" \
        "$(get idle.retry.retry_p50) / $(get idle.retry.retry_p99)" "≤ 250" ""
}

# ---------------------------------------------------------------------------
# 10. Time series (docs/series.md): what sampling costs the happy path
# ---------------------------------------------------------------------------
# "calls usec cmds": calls and usec of FCALL and FCALL_RO together
# (everything retryd sends is one of them; the commands a function runs are
# counted again in their own lines, so their usec is left out), and cmds, how
# many commands ran inside them (every other line but INFO's and CONFIG's).
fcall_stat() {
    rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '
        $1 == "cmdstat_fcall" || $1 == "cmdstat_fcall_ro" { c += $3; u += $5; next }
        $1 ~ /^cmdstat_/ && $1 != "cmdstat_info" && $1 !~ /^cmdstat_config/ { k += $3 }
        END { printf "%.0f %.0f %.0f", c, u, k }'
}

# series_run NAME on|off: N_SERIES lifecycles over HTTP (enqueue with 50
# connections, then 50 workers claim + succeed, count 1) against a retryd of
# its own started with --series on|off; NAME.us = commandstats µs of every
# FCALL (the lifecycle's, the timer's rounds and ticks, the nudges) per
# lifecycle, NAME.calls = FCALLs per 1000 lifecycles.
series_run() {
    local name=$1 mode=$2 q="series-$1" s0 s1
    start_retryd --prefix "$PREFIX-series" --series "$mode"
    s0=$(fcall_stat)
    lg_http "$name.enq" enqueue "$q" 50 "$N_SERIES" &&
        lg_http "$name.work" work "$q" 50 "$N_SERIES" --count 1
    s1=$(fcall_stat)
    put "$name.us" "$(awk -v a="$s0" -v b="$s1" -v n="$N_SERIES" 'BEGIN { split(a, x, " ")
        split(b, y, " "); printf "%.3f", (y[2] - x[2]) / n }')"
    put "$name.calls" "$(awk -v a="$s0" -v b="$s1" -v n="$N_SERIES" 'BEGIN { split(a, x, " ")
        split(b, y, " "); printf "%.2f", (y[1] - x[1]) * 1000 / n }')"
    put "$name.cmds" "$(awk -v a="$s0" -v b="$s1" -v n="$N_SERIES" 'BEGIN { split(a, x, " ")
        split(b, y, " "); printf "%.3f", (y[3] - x[3]) / n }')"
    stop_retryd
}

section10() {
    local rep mode r vals
    save_pair main
    start_redis none
    for rep in $(seq 1 "$REPS"); do
        for mode in on off; do
            say "10. time series, --series $mode, repetition $rep of $REPS"
            series_run "series.$mode.$rep" "$mode"
        done
    done
    local m
    for mode in on off; do
        for m in us calls cmds; do
            vals=()
            for r in $(seq 1 "$REPS"); do vals+=("$(get "series.$mode.$r.$m")"); done
            put "series.$mode.$m" "$(median "${vals[@]}")"
        done
    done
    put series.pct "$(calc "100 * ($(get series.on.us) - $(get series.off.us)) / $(get series.off.us)")"
    put series.cmdpct "$(calc "100 * ($(get series.on.cmds) - $(get series.off.cmds)) / $(get series.off.cmds)")"
    local RD_PREFIX="$PREFIX-series"
    rd_base "series-series.on.1"
    put series.bytes "$(rcli memory usage "$REPLY:series")"
    put series.strlen "$(rcli strlen "$REPLY:series")"
    rb series.read fcall 2000 4 1 FCALL "${FN}series" 1 "$REPLY" minute
    # What the series add per active queue and minute: one nudge (register
    # q 60000) and the sample in one tick (here with nothing new to count).
    rb series.tick1 fcall 5000 4 1 FCALL "${FN}tick" 1 "$REPLY" 100 0 0 1 1
    rb series.tick0 fcall 5000 4 1 FCALL "${FN}tick" 1 "$REPLY" 100 0 0 1 0
    rb series.nudge fcall 5000 4 1 FCALL "${FN}register" 1 "$PREFIX-series:queues" \
        series-series.on.1 60000
    put series.minute "$(calc "$(get series.nudge.us) + $(get series.tick1.us) - $(get series.tick0.us)")"
    stop_redis
    use_pair main
    local mc="median of $REPS alternating runs"
    [ "$REPS" = 1 ] && mc="1 run each"
    table_start "10. Time series (docs/series.md): Redis CPU per lifecycle with and without sampling ($mc, $N_SERIES messages each)" \
        figure "--series on" "--series off" ratio
    row "Redis CPU per lifecycle, enqueue + claim + succeed over HTTP, 50 workers (µs of FCALL and FCALL_RO in INFO commandstats: the lifecycle, the timer, the nudges)" \
        "$(fmt "$(get series.on.us)" 2)" "$(fmt "$(get series.off.us)" 2)" \
        "$(ratio "$(get series.on.us)" "$(get series.off.us)")"
    row "  their difference (%; on a shared machine mostly run-to-run noise, see the next rows)" \
        "$(fmt "$(get series.pct)" 2)" "" ""
    row "Redis commands run per lifecycle, inside the functions (the work itself, free of noise)" \
        "$(get series.on.cmds)" "$(get series.off.cmds)" \
        "$(ratio "$(get series.on.cmds)" "$(get series.off.cmds)")"
    row "cost of the series per lifecycle in commands run (%, goal ≤ +3)" \
        "$(fmt "$(get series.cmdpct)" 3)" "" ""
    row "FCALLs per 1000 lifecycles (the lifecycle's 3000, timer rounds, ticks, nudges)" \
        "$(get series.on.calls)" "$(get series.off.calls)" \
        "$(ratio "$(get series.on.calls)" "$(get series.off.calls)")"
    row "memory per queue: MEMORY USAGE of <base>:series (bytes; string of $(get series.strlen))" \
        "$(fmt_int "$(get series.bytes)")" "" ""
    row "a series read: sample + 120 minutes (µs per call, commandstats)" "$(get series.read.us)" "" ""
    row "a tick of an idle-since-sampled queue, sampling vs not (µs per call)" "$(get series.tick1.us)" \
        "$(get series.tick0.us)" "$(ratio "$(get series.tick1.us)" "$(get series.tick0.us)")"
    row "series work per active queue and minute: a nudge + a tick's sample (µs; it does not grow with traffic)" \
        "$(fmt "$(get series.minute)" 1)" "" ""
}

# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------
t_start=$(date +%s)
echo "## retryd benchmark ($( [ "$QUICK" = 1 ] && echo QUICK || echo full ))"
echo
echo "- machine: $(nproc) cores, $(lscpu 2>/dev/null | awk -F: '/Model name/{gsub(/^ +/, "", $2); print $2; exit}'), $(uname -srm)"
echo "- $(redis-server --version | cut -d' ' -f1-3); node $(node --version 2>/dev/null || echo none); retryd $(git describe --always --dirty 2>/dev/null || echo "?")"
echo "- redis-server, retryd (--tick-ms 250), loadgen, redis-benchmark and node share the machine;"
echo "  load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---------------------------------------------------------------------------
# 1g. Fairness groups (docs/fairness.md "How a claim finds the next group")
# ---------------------------------------------------------------------------
# Redis's µs per claim of count 1 (commandstats, -P 16) on a queue without
# groups and on one with GROUPS_ACTIVE active groups (two messages each, all
# enqueued first through redis-cli --pipe, untimed), so every claim goes
# through the rotation with that many groups in it; alternating, medians.
# The target is at most 1.3x. Also the Redis commands per claim of each.
GROUPS_ACTIVE=${GROUPS_ACTIVE:-100000}
fill_groups() {   # fill_groups BASE GROUPS [ROUNDS=2]: ROUNDS messages per group g0..g<GROUPS-1>, as RESP
    awk -v q="$1" -v n="$2" -v rounds="${3:-2}" -v fn="${FN}enqueue" -v p="$PAYLOAD" 'BEGIN {
        split(fn " 1 " q " " p " 3 0 - 1 default - -", a, " ")
        for (r = 0; r < rounds; r++) for (i = 0; i < n; i++) {
            a[12] = "g" i
            printf "*13\r\n$5\r\nFCALL\r\n"
            for (j = 1; j <= 12; j++) { v = (a[j] == "-") ? "" : a[j]; printf "$%d\r\n%s\r\n", length(v), v }
        } }' | redis-cli -p "$RP" --pipe >/dev/null
}
section1g() {
    say "1g. fairness groups"
    local rep kind q n=$((N_RB / 2)) vals groups=$GROUPS_ACTIVE
    [ "$QUICK" = 1 ] && groups=$((GROUPS_ACTIVE / 10))
    for rep in $(seq 1 "$REPS"); do
        for kind in none groups; do
            q=$(base "groups-$kind-$rep")
            if [ "$kind" = none ]; then enqueue_fcall "$q" $((groups * 2)); else fill_groups "$q" "$groups"; fi
            rcli config resetstat >/dev/null
            rb "gclaim.$kind.$rep" fcall "$n" 50 16 FCALL "${FN}claim" 1 "$q" 30000 1 1
            put "gclaim.$kind.$rep.cmds" "$(rcli info commandstats | tr -d '\r' | awk -F'[:=,]' -v n="$n" '
                /^cmdstat_/ && $1 != "cmdstat_fcall" && $1 != "cmdstat_config" &&
                $1 != "cmdstat_info" { s += $3 } END { printf "%.2f", (s + 0) / n }')"
            [ "$kind" = groups ] && put "gclaim.active.$rep" "$(rcli llen "$q:3:rotation")"
            rcli flushall >/dev/null
        done
    done
    for kind in none groups; do
        vals=()
        for rep in $(seq 1 "$REPS"); do vals+=("$(get "gclaim.$kind.$rep.us")"); done
        put "gclaim.$kind.us" "$(median "${vals[@]}")"
    done
    local mc="median of $REPS"
    [ "$REPS" = 1 ] && mc="1 run"
    table_start "1g. claim with $groups active groups (-P 16, $n claims of 1, $mc, commandstats)" \
        figure "µs per call" "no groups (µs)" ratio
    row "claim, no groups ($(get gclaim.none.1.cmds) Redis commands per claim)" \
        "$(get gclaim.none.us)" "" ""
    row "claim, $groups groups, $(get gclaim.active.1) in the rotation at the end ($(get gclaim.groups.1.cmds) commands per claim)" \
        "$(get gclaim.groups.us)" "$(get gclaim.none.us)" \
        "$(ratio "$(get gclaim.groups.us)" "$(get gclaim.none.us)")"
}

# ---------------------------------------------------------------------------
# 1t. TLS to Redis: the worker loop over rediss:// against redis:// on the
# same redis-server (both ports open), same run, alternating plain and TLS
# in each repetition (docs/security.md "TLS to Redis"). Target: TLS at
# least 0.85x the plain rate. Daemon CPU per message from /proc.
# ---------------------------------------------------------------------------
section1t() {
    local d="$tmp/tls" tp pp rdir="$tmp/redis-tls" i rep mode q
    mkdir -p "$d" "$rdir"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 2 \
        -subj "/CN=bench ca" 2>/dev/null &&
        openssl req -newkey rsa:2048 -nodes -keyout "$d/server.key" -out "$d/server.csr" \
            -subj "/CN=localhost" 2>/dev/null &&
        printf 'subjectAltName=IP:127.0.0.1\n' > "$d/ext" &&
        openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
            -out "$d/server.crt" -days 2 -extfile "$d/ext" 2>/dev/null ||
        { say "1t: openssl could not make certificates"; return 1; }
    pp=$(free_port) && tp=$(free_port) || return 1
    redis-server --port "$pp" --tls-port "$tp" --bind 127.0.0.1 --save '' --appendonly no \
        --tls-cert-file "$d/server.crt" --tls-key-file "$d/server.key" \
        --tls-ca-cert-file "$d/ca.crt" --tls-auth-clients no --dir "$rdir" --daemonize no \
        --logfile "$rdir/redis.log" >/dev/null 2>&1 &
    local tls_redis=$!
    SERVER_PIDS="$SERVER_PIDS $tls_redis"
    for i in $(seq 1 100); do
        redis-cli -p "$pp" ping 2>/dev/null | grep -q PONG && break
        sleep 0.1
    done
    # Two daemons, one per port; lg_http measures whichever HP/retryd_pid name.
    local saved_hp=$HP saved_pid=$retryd_pid plain_hp plain_pid tls_hp tls_pid
    start_retryd --redis "redis://127.0.0.1:$pp"
    plain_hp=$HP plain_pid=$retryd_pid
    start_retryd --redis "rediss://127.0.0.1:$tp" --redis-tls-ca "$d/ca.crt"
    tls_hp=$HP tls_pid=$retryd_pid
    for rep in $(seq 1 "$REPS"); do
        say "1t. TLS vs plain, repetition $rep of $REPS"
        for mode in plain tls; do
            if [ "$mode" = plain ]; then HP=$plain_hp retryd_pid=$plain_pid
            else HP=$tls_hp retryd_pid=$tls_pid; fi
            q="t-$mode-$rep"
            lg_http "tls.enq_$mode.$rep" enqueue "$q" 50 "$N_HTTP"
            lg_http "tls.$mode.$rep" settle "$q" 50 "$N_HTTP" --count 1
        done
    done
    for mode in plain tls; do
        for i in rate retryd_us; do
            local vals=()
            for rep in $(seq 1 "$REPS"); do vals+=("$(get "tls.$mode.$rep.$i")"); done
            put "tls.$mode.$i" "$(median "${vals[@]}")"
        done
    done
    HP=$plain_hp retryd_pid=$plain_pid
    stop_retryd
    HP=$tls_hp retryd_pid=$tls_pid
    stop_retryd
    HP=$saved_hp retryd_pid=$saved_pid
    stop_pid "$tls_redis"
    forget_pid "$tls_redis"
    local r
    r=$(ratio "$(get tls.tls.rate)" "$(get tls.plain.rate)")
    table_start "1t. Worker loop over TLS vs plain TCP, one redis-server, W=50 settle-and-claim (median of $REPS)" \
        figure TLS plain ratio
    row "messages/s (target: TLS >= 0.85x plain)" "$(fmt_int "$(get tls.tls.rate)")" \
        "$(fmt_int "$(get tls.plain.rate)")" "$r"
    row "retryd CPU per message, us" "$(fmt "$(get tls.tls.retryd_us)")" \
        "$(fmt "$(get tls.plain.retryd_us)")" \
        "$(ratio "$(get tls.tls.retryd_us)" "$(get tls.plain.retryd_us)")"
}

start_redis none
say "redis-server pid $redis_pid on 127.0.0.1:$RP"
# ---------------------------------------------------------------------------
# 1s. One queue at 1 and at 3 shards, one redis-server (docs/sharding.md)
# ---------------------------------------------------------------------------
# The same worker loop (enqueue N at 50 connections, then W=50
# settle-and-claim of count 1) on a queue of one shard and on one of three,
# alternating, on one daemon started with the hidden --allow-shards yes.
# One redis-server is one core whatever the shards, so this shows what the
# sharding costs, not what it gains: the gain needs a master per shard
# (step 12, docs/benchmarks.md "One queue across shards").
section1s() {
    local saved_hp=$HP saved_pid=$retryd_pid rep n q i
    start_retryd --allow-shards yes
    for rep in $(seq 1 "$REPS"); do
        say "1s. 1 vs 3 shards, repetition $rep of $REPS"
        for n in 1 3; do
            q="s$n-$rep"
            if [ "$n" -gt 1 ]; then
                curl -s -o /dev/null -w '%{http_code}' -X PUT "http://127.0.0.1:$HP/queues/$q/policy" \
                    -d "{\"shards\":$n}" | grep -q 200 || { say "1s: the raise of $q failed"; return 1; }
            fi
            lg_http "sh.enq$n.$rep" enqueue "$q" 50 "$N_HTTP"
            lg_http "sh.loop$n.$rep" settle "$q" 50 "$N_HTTP" --count 1
        done
    done
    for n in 1 3; do
        for i in enq$n.rate enq$n.redis_us loop$n.rate loop$n.redis_us loop$n.retryd_us; do
            local vals=()
            for rep in $(seq 1 "$REPS"); do vals+=("$(get "sh.${i%%.*}.$rep.${i#*.}")"); done
            put "sh.$i" "$(median "${vals[@]}")"
        done
    done
    stop_retryd
    HP=$saved_hp retryd_pid=$saved_pid
    table_start "1s. One queue at 3 shards vs 1, one redis-server (median of $REPS; the cost of sharding, not its gain)" \
        figure "3 shards" "1 shard" "3 / 1"
    row "enqueue, 50 connections (msgs/s)" "$(fmt_int "$(get sh.enq3.rate)")" \
        "$(fmt_int "$(get sh.enq1.rate)")" "$(ratio "$(get sh.enq3.rate)" "$(get sh.enq1.rate)")"
    row "  Redis CPU per enqueue (µs)" "$(fmt "$(get sh.enq3.redis_us)")" \
        "$(fmt "$(get sh.enq1.redis_us)")" "$(ratio "$(get sh.enq3.redis_us)" "$(get sh.enq1.redis_us)")"
    row "worker loop W=50, settle-and-claim count 1 (msgs/s)" "$(fmt_int "$(get sh.loop3.rate)")" \
        "$(fmt_int "$(get sh.loop1.rate)")" "$(ratio "$(get sh.loop3.rate)" "$(get sh.loop1.rate)")"
    row "  Redis CPU per lifecycle (µs)" "$(fmt "$(get sh.loop3.redis_us)")" \
        "$(fmt "$(get sh.loop1.redis_us)")" "$(ratio "$(get sh.loop3.redis_us)" "$(get sh.loop1.redis_us)")"
    row "  retryd CPU per lifecycle (µs)" "$(fmt "$(get sh.loop3.retryd_us)")" \
        "$(fmt "$(get sh.loop1.retryd_us)")" "$(ratio "$(get sh.loop3.retryd_us)" "$(get sh.loop1.retryd_us)")"
}

# BENCH_ONLY=3e, 3b, 3k or 3 (sections 2, 3, 3a and 5: the worker loops and
# bytes against BullMQ), or a comma-separated list of them (3,3e,3b,3k is
# every figure of issue 25), runs those sections alone, with their rows of
# issue 25's targets table.
case ",${BENCH_ONLY:-}," in
*,3,*|*,3e,*|*,3b,*|*,3k,*)
    start_retryd
    say "retryd pid $retryd_pid on 127.0.0.1:$HP"
    case ",$BENCH_ONLY," in *,3,*)
        sec_begin "2+3. HTTP and BullMQ, interleaved"; section23; sec_end
        sec_begin "5. memory"; section5; sec_end ;;
    esac
    case ",$BENCH_ONLY," in *,3e,*) sec_begin "3e. enqueue vs BullMQ"; section3e; sec_end ;; esac
    case ",$BENCH_ONLY," in *,3b,*) sec_begin "3b. batch enqueue"; section3b; sec_end ;; esac
    case ",$BENCH_ONLY," in *,3k,*) sec_begin "3k. Sidekiq"; section3k; sec_end ;; esac
    environment
    targets_i25
    echo
    echo "wall time: $(( $(date +%s) - t_start )) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "bench: $rows rows, $missing without a figure"
    [ "$missing" -eq 0 ]
    exit
    ;;
esac
if [ "${BENCH_ONLY:-}" = 1s ]; then
    sec_begin "1s. one queue at 1 and 3 shards"; section1s; sec_end
    echo
    echo "bench: $rows rows, $missing without a figure"
    [ "$missing" -eq 0 ]
    exit
fi
if [ "${BENCH_ONLY:-}" = 1t ]; then
    start_retryd
    sec_begin "1t. TLS to Redis"; section1t; sec_end
    stop_retryd
    echo
    echo "bench: $rows rows, $missing without a figure"
    [ "$missing" -eq 0 ]
    exit
fi
if [ "${BENCH_ONLY:-}" = 1h ]; then
    sec_begin "1h. history"; section1h; sec_end
    echo
    echo "bench: $rows rows, $missing without a figure"
    [ "$missing" -eq 0 ]
    exit
fi
if [ "${BENCH_ONLY:-}" = 2s ]; then
    # Section 2s alone (the SQS endpoint against the native API) and its targets.
    sec_begin "2s. SQS endpoint"; section2s; sec_end
    environment
    table_start "Targets" target measured goal verdict
    targets_sqs
    echo
    echo "bench: $rows rows, $missing without a figure"
    [ "$missing" -eq 0 ]
    exit
fi
if [ "${BENCH_ONLY:-}" = 1g ]; then
    sec_begin "1g. fairness groups"; section1g; sec_end
    echo
    echo "bench: $rows rows, $missing without a figure"
    [ "$missing" -eq 0 ]
    exit
fi
if [ "${BENCH_ONLY:-}" = 1p ]; then
    sec_begin "1p. priorities"; section1p; sec_end
    echo
    echo "bench: $rows rows, $missing without a figure"
    [ "$missing" -eq 0 ]
    exit
fi
if [ "${BENCH_ONLY:-}" = 1d ]; then
    # Section 1d alone: what a queue policy costs a claim.
    sec_begin "1d. claim with a policy"; section1d; sec_end
    echo
    echo "bench: $rows rows, $missing without a figure"
    [ "$missing" -eq 0 ]
    exit
fi
if [ "${BENCH_ONLY:-}" = 9 ]; then
    # Section 9 alone (its before/after figures in docs/benchmarks.md).
    sec_begin "9. idle queues"; section9; sec_end
    echo
    echo "bench: $rows rows, $missing without a figure"
    [ "$missing" -eq 0 ]
    exit
fi
if [ "${BENCH_ONLY:-}" = 10 ]; then
    # Section 10 alone (the time series' cost, docs/series.md).
    sec_begin "10. time series"; section10; sec_end
    echo
    echo "bench: $rows rows, $missing without a figure"
    [ "$missing" -eq 0 ]
    exit
fi
sec_begin "1. Redis-native"; section1; sec_end
sec_begin "1c. claim steps"; section1c; sec_end
sec_begin "1d. claim with a policy"; section1d; sec_end
sec_begin "1p. priorities"; section1p; sec_end
sec_begin "1g. fairness groups"; section1g; sec_end
sec_begin "1h. history"; section1h; sec_end
start_retryd
say "retryd pid $retryd_pid on 127.0.0.1:$HP"
sec_begin "2+3. HTTP and BullMQ, interleaved"; section23; sec_end
sec_begin "3e. enqueue vs BullMQ"; section3e; sec_end
sec_begin "3b. batch enqueue"; section3b; sec_end
sec_begin "3k. Sidekiq"; section3k; sec_end
sec_begin "1t. TLS to Redis"; section1t; sec_end
sec_begin "1s. one queue at 1 and 3 shards"; section1s; sec_end
sec_begin "2s. SQS endpoint"; section2s; sec_end
sec_begin "5. memory"; section5; sec_end
sec_begin "6. retry latency"; section6; sec_end
sec_begin "4. growth"; section4; sec_end
sec_begin "7. appendonly everysec / none"; section7; sec_end
use_pair none 2>/dev/null || true
sec_begin "8. Redis Cluster"; section8; sec_end
sec_begin "9. idle queues"; section9; sec_end
sec_begin "10. time series"; section10; sec_end
environment
targets
echo
echo "wall time: $(( $(date +%s) - t_start )) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bench: $rows rows, $missing without a figure"
[ "$missing" -eq 0 ]
