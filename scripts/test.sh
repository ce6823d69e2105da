#!/usr/bin/env bash
# test.sh - runs retryd's cmocka test binaries and prints one total.
#
#   BUILD=build scripts/test.sh UNIT... [-- INTEGRATION...]
#
# Each NAME runs $BUILD/tests/NAME (or, for NAME.sh, bash tests/NAME.sh)
# with its output shown as it runs. Names
# after "--" are integration suites: for them the script starts a throwaway
# redis-server on a free loopback port (no persistence, data in a temp dir),
# empties it before each suite, and exports
#   RETRYD_TEST_REDIS_PORT  the port
#   RETRYD_TEST_LUA         $BUILD/retryd.lua, the Functions library
#   RETRYD_BIN              $BUILD/retryd, the daemon
# Every suite also gets RETRYD_TEST_EXCHANGES (unless the caller set it): a
# file in the temp dir where the C suites log each HTTP response they read,
# which tests/openapi_check.sh (listed last) validates against
# docs/openapi.json.
# Every suite runs even when one fails. Totals come from cmocka's summary
# lines; a suite that crashes, times out, is missing, or exits non-zero
# without a FAILED line counts as at least one failure. The last line of
# output is always "N passed, M failed"; the exit status is non-zero when
# M > 0. The Redis server and temp dirs are removed on any exit.
#
# Environment: BUILD (default build), RETRYD_TEST_TIMEOUT seconds per suite
# (default 600; 0 disables).
set -u

BUILD=${BUILD:-build}
SUITE_TIMEOUT=${RETRYD_TEST_TIMEOUT:-600}
# Keep cmocka's plain-text summary lines whatever the caller's environment.
export CMOCKA_MESSAGE_OUTPUT=STDOUT
unset CMOCKA_XML_FILE

unit=()
integ=()
seen_sep=0
for arg in "$@"; do
    if [ "$arg" = "--" ] && [ "$seen_sep" -eq 0 ]; then
        seen_sep=1
    elif [ "$seen_sep" -eq 0 ]; then
        unit+=("$arg")
    else
        integ+=("$arg")
    fi
done

# ---------------------------------------------------------------------------
# Cleanup: runs on every exit and prints nothing, so the total stays last.
# ---------------------------------------------------------------------------
tmp_root=""
redis_pid=""
suite_pid=""
tail_pid=""

# stop_pid, free_port, redis_start (the helpers every script shares).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cleanup() {
    [ -n "$suite_pid" ] && stop_pid "$suite_pid"
    [ -n "$tail_pid" ] && stop_pid "$tail_pid"
    [ -n "$redis_pid" ] && stop_pid "$redis_pid"
    suite_pid="" tail_pid="" redis_pid=""
    if [ -n "$tmp_root" ]; then
        rm -rf "$tmp_root"
        tmp_root=""
    fi
}

# Interrupted: the running suite counts as failed, the total is still last.
on_signal() {
    cleanup
    echo "test.sh: interrupted"
    echo "$total_passed passed, $((total_failed + 1)) failed"
    exit "$1"
}

total_passed=0
total_failed=0
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

tmp_root=$(mktemp -d) || {
    echo "test.sh: cannot create a temp dir"
    echo "0 passed, 1 failed"
    exit 1
}
export RETRYD_TEST_EXCHANGES=${RETRYD_TEST_EXCHANGES:-$tmp_root/exchanges.jsonl}

# ---------------------------------------------------------------------------
# Redis
# ---------------------------------------------------------------------------
redis_port=""

# Starts redis-server on a free port (lib.sh's redis_start, in a dir of its
# own). Sets redis_pid and redis_port; returns 1 (after saying why) when it
# cannot.
start_redis() {
    if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
        echo "test.sh: redis-server or redis-cli not installed (run scripts/deps.sh)"
        return 1
    fi
    local port dir rc
    for _ in $(seq 0 29); do
        port=$(free_port) || break
        dir=$(mktemp -d -p "$tmp_root") || return 1
        rc=0
        redis_start "$port" "$dir" --save '' --appendonly no || rc=$?
        redis_pid=$REDIS_PID
        [ -n "$redis_pid" ] && disown "$redis_pid" 2>/dev/null
        case $rc in
            0) redis_port=$port; return 0 ;;
            2) continue ;; # taken meanwhile: another port
        esac
        echo "test.sh: redis-server on port $port did not start (in 10 s):"
        tail -n 20 "$REDIS_LOG"
        return 1
    done
    echo "test.sh: no free port found for redis-server"
    return 1
}

# ---------------------------------------------------------------------------
# Suites
# ---------------------------------------------------------------------------
any_crashed=0

# Runs one suite binary: shows its output and adds its counts to the totals.
run_suite() {
    local name=$1 bin="$BUILD/tests/$1" log="$tmp_root/$1.log"
    local rc passed failed has_summary has_failed_line
    # Shell suites (tests/NAME.sh) run from the source tree with bash.
    local -a run=("$bin")
    case "$name" in
        *.sh) bin="tests/$name"; run=(bash "$bin") ;;
    esac
    echo "=== $name"
    if [ ! -f "$bin" ] || { [ "${run[0]}" = "$bin" ] && [ ! -x "$bin" ]; }; then
        echo "FAIL $name: $bin is missing or not executable"
        total_failed=$((total_failed + 1))
        any_crashed=1
        return
    fi
    # The suite runs in the background so that a signal to this script is
    # handled at once (bash runs traps only between foreground commands);
    # tail shows its output as it comes.
    : >"$log" # before tail opens it
    if [ "$SUITE_TIMEOUT" -gt 0 ] 2>/dev/null; then
        timeout -k 10 "$SUITE_TIMEOUT" "${run[@]}" >"$log" 2>&1 </dev/null &
    else
        "${run[@]}" >"$log" 2>&1 </dev/null &
    fi
    suite_pid=$!
    tail -s 0.2 -n +1 -f --pid="$suite_pid" "$log" &
    tail_pid=$!
    wait "$suite_pid" 2>/dev/null
    rc=$?
    suite_pid=""
    wait "$tail_pid"
    tail_pid=""
    [ -n "$(tail -c 1 "$log")" ] && echo # output without a final newline

    # A binary may run several groups: add up every summary line.
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test(s)\.$/\1/p' "$log" \
             | awk '{ s += $1 } END { print s + 0 }')
    failed=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test(s), listed below:$/\1/p' "$log" \
             | awk '{ s += $1 } END { print s + 0 }')
    has_summary=0
    grep -qE '^\[  (PASSED|FAILED)  \] [0-9]+ test\(s\)' "$log" && has_summary=1
    has_failed_line=0
    grep -qE '^\[  FAILED  \] [0-9]+ test\(s\), listed below:$' "$log" && has_failed_line=1

    if [ "$rc" -eq 124 ] && [ "$SUITE_TIMEOUT" -gt 0 ] 2>/dev/null; then
        echo "FAIL $name: timed out after ${SUITE_TIMEOUT}s (exit $rc)"
        [ "$failed" -lt 1 ] && failed=1
        any_crashed=1
    elif [ "$rc" -gt 128 ]; then
        echo "FAIL $name: crashed (signal $((rc - 128)))"
        [ "$failed" -lt 1 ] && failed=1
        any_crashed=1
    elif [ "$rc" -ne 0 ] && [ "$has_failed_line" -eq 0 ]; then
        echo "FAIL $name: exit status $rc without a cmocka FAILED line"
        [ "$failed" -lt 1 ] && failed=1
        any_crashed=1
    elif [ "$rc" -eq 0 ] && [ "$has_summary" -eq 0 ]; then
        echo "FAIL $name: no cmocka summary in its output"
        failed=1
        any_crashed=1
    fi
    echo "--- $name: $passed passed, $failed failed"
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
}

for name in ${unit[@]+"${unit[@]}"}; do
    run_suite "$name"
done

if [ "${#integ[@]}" -gt 0 ]; then
    if start_redis; then
        echo "test.sh: redis-server pid $redis_pid on 127.0.0.1:$redis_port"
        export RETRYD_TEST_REDIS_PORT=$redis_port
        # Absolute, so a suite may change directory.
        build_abs=$(cd "$BUILD" 2>/dev/null && pwd) || build_abs=$BUILD
        export RETRYD_TEST_LUA="$build_abs/retryd.lua"
        export RETRYD_BIN="$build_abs/retryd"
        for name in "${integ[@]}"; do
            # Each suite starts from an empty keyspace (functions stay loaded).
            timeout 5 redis-cli -h 127.0.0.1 -p "$redis_port" flushall >/dev/null 2>&1
            run_suite "$name"
        done
    else
        for name in "${integ[@]}"; do
            echo "FAIL $name: not run, no Redis server"
            total_failed=$((total_failed + 1))
        done
        any_crashed=1
    fi
fi

echo "$total_passed passed, $total_failed failed"
if [ "$total_failed" -gt 0 ] || [ "$any_crashed" -ne 0 ]; then
    exit 1
fi
exit 0
