#!/usr/bin/env bash
# examples_test.sh - the example workers of examples/ (worker.sh, worker.py,
# worker.mjs) against a real build/retryd, each the same way:
#   - a mix of jobs ({"work":"ok"|"slow"|"permanent"}, docs/reference.md "Settle and claim"
#     with long-poll): ok -> succeeded; permanent -> dead with its
#     error, not retried; slow (longer than its lease) -> succeeded after its
#     lease was extended (lease_expires_at seen moving, no lease expired, no
#     second claim);
#   - SIGTERM while it works on a message: it finishes and settles it, exits
#     0, nothing is left processing;
#   - Redis stopped under it: retryd answers 503, the worker backs off (says
#     so) and, once Redis is back, works again.
#
#   RETRYD_TEST_REDIS_PORT=6397 RETRYD_BIN=$PWD/build/retryd \
#       bash tests/examples_test.sh [TEST...]
#
# The shared redis-server (RETRYD_TEST_REDIS_PORT) serves the first two kinds
# under a key prefix of this run; the 503 tests start a redis-server of their
# own. Output is cmocka's plain-text format, which scripts/test.sh counts.
# Needs bash, curl, jq, python3, node (scripts/deps.sh test).
set -u

PORT=${RETRYD_TEST_REDIS_PORT:?RETRYD_TEST_REDIS_PORT: the port of a throwaway redis-server}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/.." && pwd)
BIN=${RETRYD_BIN:-$ROOT/build/retryd}
PREFIX="extest-$$-$RANDOM"
LEASE=3        # seconds: a "slow" job (SLOW s) outlives two leases
SLOW=7

source "$ROOT/scripts/lib.sh" # stop_pid, free_port, redis_start, http_ready, suite_run

TMP=$(mktemp -d "${TMPDIR:-/tmp}/retryd-examples-test.XXXXXX") || exit 1
cleanup() {
    redis_unlink_keys "$PORT" "$PREFIX*"
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
    printf '    FAIL: %s\n' "$*"
    exit 1
}

# Inside a test (a subshell): the daemons, redis-servers and workers it
# started, stopped when it ends however it ends.
PIDS=()
stop_all() { stop_pid ${PIDS[@]+"${PIDS[@]}"}; }

# start_retryd REDIS_PORT NAME: a daemon on a free port; sets API.
start_retryd() {
    local rport=$1 name=$2 port i
    for i in 1 2 3 4 5; do
        port=$(free_port) || fail "no free port"
        "$BIN" --listen "127.0.0.1:$port" --redis "redis://127.0.0.1:$rport" \
            --prefix "$PREFIX-$name" --tick-ms 50 --log-level warn >>"$TMP/$name.retryd.log" 2>&1 &
        PIDS+=($!)
        if http_ready "$port" 100 "$!"; then
            API="http://127.0.0.1:$port"
            return 0
        fi
    done
    cat "$TMP/$name.retryd.log"
    fail "retryd did not start"
}

# run_worker LANG QUEUE LOG: starts examples/worker.LANG in the background; sets WPID.
run_worker() {
    local lang=$1 queue=$2 log=$3
    local -a cmd
    case $lang in
        sh) cmd=(bash "$ROOT/examples/worker.sh") ;;
        py) cmd=(python3 "$ROOT/examples/worker.py") ;;
        mjs) cmd=(node "$ROOT/examples/worker.mjs") ;;
    esac
    RETRYD_URL=$API QUEUE=$queue WORKER="test-$lang" LEASE_SECONDS=$LEASE WAIT_SECONDS=1 \
        SLOW_SECONDS=$SLOW "${cmd[@]}" >"$log" 2>&1 </dev/null &
    WPID=$!
    PIDS+=("$WPID")
}

# enqueue QUEUE WORK: prints the new message's id.
enqueue() {
    curl -s -f -X POST -H 'Content-Type: application/json' \
        --data "$(jq -cn --arg w "$2" '{payload: ({work: $w} | tojson)}')" \
        "$API/queues/$1/messages" | jq -e .id || fail "enqueue $2 into $1 failed"
}

msg() { curl -s -f "$API/queues/$1/messages/$2"; }
stats() { curl -s -f "$API/queues/$1/stats"; }

# wait_for SECONDS JQ_FILTER CMD...: polls CMD's JSON output every 0.1 s
# until JQ_FILTER is true; 1 when it never was.
wait_for() {
    local secs=$1 filter=$2 i
    shift 2
    for ((i = 0; i < secs * 10; i++)); do
        "$@" 2>/dev/null | jq -e "$filter" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

# wait_exit PID SECONDS: the exit status of a worker we started, or 124.
wait_exit() {
    local pid=$1 secs=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid"; return $?; }
        sleep 0.1
    done
    return 124
}

expect_jq() { # JSON FILTER WHY
    jq -e "$2" <<<"$1" >/dev/null || fail "$3: $(jq -c . <<<"$1")"
}

check_mix() {
    local lang=$1 q="mix-$1" log="$TMP/mix-$1.log" ok1 ok2 ok3 perm slow leases
    trap stop_all EXIT
    start_retryd "$PORT" "mix-$lang"
    ok1=$(enqueue "$q" ok) && perm=$(enqueue "$q" permanent) && slow=$(enqueue "$q" slow) &&
        ok2=$(enqueue "$q" ok) && ok3=$(enqueue "$q" ok) || exit 1
    run_worker "$lang" "$q" "$log"
    # While the slow job works, its lease_expires_at must move (extend).
    leases=""
    for ((i = 0; i < (SLOW + 10) * 10; i++)); do
        m=$(msg "$q" "$slow") || true
        [ "$(jq -r .status <<<"$m")" = processing ] && leases+=$(jq -r .lease_expires_at <<<"$m")$'\n'
        [ "$(jq -r .status <<<"$m")" = succeeded ] && break
        sleep 0.2
    done
    wait_for 20 '.counts.succeeded == 4 and .counts.dead == 1' stats "$q" ||
        { cat "$log"; fail "the jobs did not end: $(stats "$q")"; }
    for id in "$ok1" "$ok2" "$ok3"; do
        expect_jq "$(msg "$q" "$id")" '.status == "succeeded" and .retry_count == 0' "ok job $id"
    done
    expect_jq "$(msg "$q" "$perm")" \
        '.status == "dead" and .retry_count == 1 and .retry_count < .max_retries and (.last_error | startswith("permanent"))' \
        "the permanent job must be dead at once, not retried"
    expect_jq "$(msg "$q" "$slow")" '.status == "succeeded" and .retry_count == 0 and .last_error == null' \
        "the slow job must succeed on its first lease"
    expect_jq "$(stats "$q")" '.totals.claimed == 5 and .totals.lease_expired == 0 and .totals.retried == 0' \
        "no lease may expire, nothing may be claimed twice"
    [ "$(sort -u <<<"$leases" | grep -c .)" -ge 2 ] ||
        { cat "$log"; fail "the slow job's lease_expires_at never moved: $leases"; }
    echo "    slow job: $(sort -u <<<"$leases" | grep -c .) distinct lease_expires_at while it ran ${SLOW}s on ${LEASE}s leases"
    kill -TERM "$WPID"
    wait_exit "$WPID" 10 || { cat "$log"; fail "the idle worker did not exit 0 on SIGTERM"; }
}

check_sigterm() {
    local lang=$1 q="term-$1" log="$TMP/term-$1.log" id rc
    trap stop_all EXIT
    start_retryd "$PORT" "term-$lang"
    id=$(enqueue "$q" slow) || exit 1
    run_worker "$lang" "$q" "$log"
    wait_for 10 '.status == "processing"' msg "$q" "$id" || { cat "$log"; fail "never claimed"; }
    kill -TERM "$WPID"
    wait_exit "$WPID" $((SLOW + 15))
    rc=$?
    [ "$rc" -eq 0 ] || { cat "$log"; fail "the worker exited $rc after SIGTERM, expected 0"; }
    expect_jq "$(msg "$q" "$id")" '.status == "succeeded" and .retry_count == 0' \
        "the message it held must be settled"
    expect_jq "$(stats "$q")" '.counts.processing == 0' "nothing may be left processing"
}

check_503() {
    local lang=$1 q="down-$1" log="$TMP/down-$1.log" rport rdir id
    trap stop_all EXIT
    rport=$(free_port) || fail "no free port"
    rdir=$(mktemp -d -p "$TMP") || exit 1
    redis_start "$rport" "$rdir" --save '' --appendonly no || fail "redis-server did not start"
    local redis_pid=$REDIS_PID
    PIDS+=("$redis_pid")
    start_retryd "$rport" "down-$lang"
    run_worker "$lang" "$q" "$log"
    id=$(enqueue "$q" ok) || exit 1
    wait_for 10 '.status == "succeeded"' msg "$q" "$id" || { cat "$log"; fail "the first job was not done"; }
    stop_pid "$redis_pid"
    for ((i = 0; i < 100; i++)); do
        grep -q 'backing off' "$log" && break
        sleep 0.1
    done
    grep -q 'backing off' "$log" || { cat "$log"; fail "the worker did not back off on 503"; }
    grep 'backing off' "$log" | head -n 1 | sed 's/^/    /'
    kill -0 "$WPID" 2>/dev/null || { cat "$log"; fail "the worker died while retryd answered 503"; }
    redis_start "$rport" "$rdir" --save '' --appendonly no || fail "redis-server did not restart"
    PIDS+=("$REDIS_PID")
    wait_for 15 '.status == "ready"' curl -s "$API/readyz" || fail "retryd did not reconnect"
    id=$(enqueue "$q" ok) || exit 1
    wait_for 20 '.status == "succeeded"' msg "$q" "$id" ||
        { cat "$log"; fail "the worker did not recover after Redis came back"; }
    kill -TERM "$WPID"
    wait_exit "$WPID" 10 || { cat "$log"; fail "the worker did not exit 0 on SIGTERM"; }
}

test_worker_sh_mix() { check_mix sh; }
test_worker_sh_sigterm() { check_sigterm sh; }
test_worker_sh_503() { check_503 sh; }
test_worker_py_mix() { check_mix py; }
test_worker_py_sigterm() { check_sigterm py; }
test_worker_py_503() { check_503 py; }
test_worker_mjs_mix() { check_mix mjs; }
test_worker_mjs_sigterm() { check_sigterm mjs; }
test_worker_mjs_503() { check_503 mjs; }

all_tests=(
    test_worker_sh_mix test_worker_sh_sigterm test_worker_sh_503
    test_worker_py_mix test_worker_py_sigterm test_worker_py_503
    test_worker_mjs_mix test_worker_mjs_sigterm test_worker_mjs_503
)
if (($#)); then all_tests=("$@"); fi

suite_run "${all_tests[@]}"
