#!/usr/bin/env bash
# sqs_faults_test.sh - retryd's SQS endpoint (docs/sqs.md) against a careless
# or hostile client: malformed and oversized requests, wrong types, clients
# that vanish mid-poll or half-close, SIGTERM mid-request, two instances on
# one Redis. Each test runs its own retryd (RETRYD_BIN, e.g. build/san/retryd
# for ASan/UBSan) on the shared redis-server, and fails when the daemon died
# or its log holds a sanitizer report.
#
#   RETRYD_TEST_REDIS_PORT=6397 RETRYD_BIN=$PWD/build/retryd bash tests/sqs_faults_test.sh [TEST...]
#
# Output is cmocka's plain-text format, which scripts/test.sh counts.
set -u

PORT=${RETRYD_TEST_REDIS_PORT:?RETRYD_TEST_REDIS_PORT: the port of a throwaway redis-server}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/.." && pwd)
BIN=${RETRYD_BIN:-$ROOT/build/retryd}
PREFIX="sqsfault-$$-$RANDOM"
PY=/usr/bin/python3

source "$ROOT/scripts/lib.sh" # stop_pid, free_port, http_ready, suite_run

TMP=$(mktemp -d "${TMPDIR:-/tmp}/retryd-sqs-faults.XXXXXX") || exit 1
cleanup() {
    redis_unlink_keys "$PORT" "$PREFIX*"
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
    printf '    FAIL: %s\n' "$*"
    exit 1
}

PIDS=()
stop_all() { stop_pid ${PIDS[@]+"${PIDS[@]}"}; }

# start_retryd NAME [ARG...]: sets API, SQS and PID for a daemon on free ports
# (NAME names its log; two daemons of one test share the prefix "$PREFIX-$TEST").
start_retryd() {
    local name=$1 port sport i
    shift
    for i in 1 2 3 4 5; do
        port=$(free_port) || fail "no free port"
        sport=$(free_port) || fail "no free port"
        [ "$port" != "$sport" ] || continue
        "$BIN" --listen "127.0.0.1:$port" --sqs-listen "127.0.0.1:$sport" \
            --redis "redis://127.0.0.1:$PORT" --prefix "$PREFIX-${GROUP:-$name}" --tick-ms 50 \
            --log-level warn "$@" >>"$TMP/$name.retryd.log" 2>&1 &
        PID=$!
        PIDS+=($PID)
        if http_ready "$port" 100 "$PID"; then
            API="http://127.0.0.1:$port"
            SQS="http://127.0.0.1:$sport"
            return 0
        fi
    done
    cat "$TMP/$name.retryd.log"
    fail "retryd did not start"
}

# healthy NAME PID: the daemon still runs and its log has no sanitizer report.
healthy() {
    kill -0 "$2" 2>/dev/null || { tail -30 "$TMP/$1.retryd.log"; fail "retryd $1 died"; }
    if grep -qE 'runtime error|ERROR: AddressSanitizer|ERROR: LeakSanitizer' "$TMP/$1.retryd.log"; then
        grep -A12 -E 'runtime error|ERROR: (Address|Leak)Sanitizer' "$TMP/$1.retryd.log" | head -40
        fail "sanitizer report in $1's log"
    fi
}

# stopped NAME PID: SIGTERM ends the daemon cleanly (exit 0), without a leak
# report (ASan's comes at exit).
stopped() {
    kill -TERM "$2" 2>/dev/null
    local rc=0
    wait "$2" || rc=$?
    [ "$rc" = 0 ] || { tail -30 "$TMP/$1.retryd.log"; fail "retryd $1 exited $rc after SIGTERM"; }
    if grep -qE 'ERROR: (Address|Leak)Sanitizer' "$TMP/$1.retryd.log"; then
        grep -A20 -E 'ERROR: (Address|Leak)Sanitizer' "$TMP/$1.retryd.log" | head -40
        fail "sanitizer report in $1's log at exit"
    fi
}

# faults_case CASE: one case of tests/sqs/faults.py against a fresh daemon.
faults_case() {
    trap stop_all EXIT
    start_retryd "$1"
    local pid=$PID
    "$PY" "$here/sqs/faults.py" "$SQS" "$API" "$1" || { healthy "$1" "$pid"; tail -5 "$TMP/$1.retryd.log"; fail "$1"; }
    healthy "$1" "$pid"
    stopped "$1" "$pid"
}

test_json_shapes() { faults_case json_shapes; }
test_oversize_bodies() { faults_case oversize_bodies; }
test_http_payloads() { faults_case http_payloads; }
test_foreign_handles() { faults_case foreign_handles; }
test_fifo_dedup() { faults_case fifo_dedup; }
test_sqs_rules() { faults_case sqs_rules; }
test_vanishing_pollers() { faults_case vanishing_pollers; }
test_half_close() { faults_case half_close; }
test_list_10000() { faults_case list_10000; }

# A send on one instance wakes a long poll on the other (one Redis, one prefix).
test_wake_across_instances() {
    trap stop_all EXIT
    GROUP=wake
    start_retryd wake-a
    local pid_a=$PID sqs_a=$SQS
    start_retryd wake-b
    local pid_b=$PID
    SQS2=$sqs_a "$PY" "$here/sqs/faults.py" "$SQS" "$API" wake_across_instances || fail wake_across_instances
    healthy wake-a "$pid_a"
    healthy wake-b "$pid_b"
    stopped wake-a "$pid_a"
    stopped wake-b "$pid_b"
}

# SIGTERM mid-request: the daemon drains both servers and exits 0 in time.
test_sigterm_mid_poll() {
    trap stop_all EXIT
    start_retryd term
    local pid=$PID t0 rc=0
    RETRYD_PID=$pid "$PY" "$here/sqs/faults.py" "$SQS" "$API" sigterm_mid_poll || fail sigterm_mid_poll
    t0=$(date +%s)
    wait "$pid" || rc=$?
    [ "$rc" = 0 ] || { tail -20 "$TMP/term.retryd.log"; fail "exit status $rc after SIGTERM"; }
    [ $(($(date +%s) - t0)) -le 5 ] || fail "retryd took more than 5 s to exit"
    if grep -qE 'runtime error|ERROR: (Address|Leak)Sanitizer' "$TMP/term.retryd.log"; then
        grep -A20 -E 'runtime error|ERROR: (Address|Leak)Sanitizer' "$TMP/term.retryd.log" | head -40
        fail "sanitizer report in the log"
    fi
}

# Two instances on one Redis: B registered the queue, A drops it, B makes it again.
test_delete_recreate() {
    trap stop_all EXIT
    GROUP=dr
    start_retryd dr-a
    local pid_a=$PID sqs_a=$SQS api_a=$API
    start_retryd dr-b
    local pid_b=$PID
    SQS2=$sqs_a "$PY" "$here/sqs/faults.py" "$SQS" "$API" delete_recreate ||
        { healthy dr-a "$pid_a"; healthy dr-b "$pid_b"; fail delete_recreate; }
    "$PY" "$here/sqs/faults.py" "$sqs_a" "$api_a" delete_recreate || fail "delete_recreate on one instance"
    healthy dr-a "$pid_a"
    healthy dr-b "$pid_b"
    stopped dr-a "$pid_a"
    stopped dr-b "$pid_b"
}

tests=("$@")
[ "${#tests[@]}" -gt 0 ] || tests=(test_json_shapes test_oversize_bodies test_http_payloads test_foreign_handles
    test_delete_recreate test_fifo_dedup test_sqs_rules test_vanishing_pollers test_half_close test_list_10000
    test_wake_across_instances test_sigterm_mid_poll)
suite_run "${tests[@]}"
