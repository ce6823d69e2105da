# lib.sh - the helpers retryd's bash scripts and shell suites share: stopping
# the processes they start, free loopback ports, a throwaway redis-server,
# deleting a run's keys, and cmocka-style result lines (what scripts/test.sh
# counts). Sourced, never run:
#
#   source "$ROOT/scripts/lib.sh"
#
# It only defines functions (no traps, no options); they work under
# set -euo pipefail. Each script keeps its own cleanup() and traps, built on
# stop_pid and redis_unlink_keys.

# stop_pid PID...: stops processes we started: TERM, up to STOP_TIMEOUT (5) s for them to exit, then KILL; reaps them.
stop_pid() {
    local pid i live=() still
    for pid in "$@"; do
        [ -n "$pid" ] || continue
        kill -TERM "$pid" 2>/dev/null && live+=("$pid")
    done
    for ((i = 0; i < ${STOP_TIMEOUT:-5} * 10 && ${#live[@]} > 0; i++)); do
        still=()
        for pid in "${live[@]}"; do
            kill -0 "$pid" 2>/dev/null && still+=("$pid")
        done
        live=(${still[@]+"${still[@]}"})
        [ "${#live[@]}" -gt 0 ] && sleep 0.1
    done
    for pid in ${live[@]+"${live[@]}"}; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    for pid in "$@"; do
        [ -n "$pid" ] || continue
        wait "$pid" 2>/dev/null || true # a child of this shell is reaped; any other pid is a no-op
    done
    return 0
}

# port_open PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port [LOW [SPAN]]: prints a port in LOW..LOW+SPAN-1 (20000..31999, below Linux's ephemeral ports) nothing listens on; 1 after 50 tries.
free_port() {
    local low=${1:-20000} span=${2:-12000} p i
    for ((i = 0; i < 50; i++)); do
        p=$((low + RANDOM % span))
        port_open "$p" || { echo "$p"; return 0; }
    done
    return 1
}

# redis_ping PORT: prints PONG when something that speaks Redis answers on 127.0.0.1:PORT.
redis_ping() { timeout 2 redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null || true; }

# redis_start PORT DIR [ARG...]: runs redis-server on 127.0.0.1:PORT (data and redis.log in DIR, ARG... added) until CONFIG GET dir shows it is ours; sets REDIS_PID and REDIS_LOG; returns 2 when the port is taken, 1 when it did not start within 10 s (it is stopped).
redis_start() {
    local port=$1 dir i
    dir=$(cd "$2" && pwd -P) || return 1 # as CONFIG GET dir reports it
    shift 2
    REDIS_PID="" REDIS_LOG="$dir/redis.log"
    port_open "$port" && return 2
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --daemonize no \
        --logfile "$REDIS_LOG" "$@" </dev/null >>"$REDIS_LOG" 2>&1 &
    REDIS_PID=$!
    for ((i = 0; i < 100; i++)); do
        kill -0 "$REDIS_PID" 2>/dev/null || break
        if [ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$port" config get dir 2>/dev/null | tail -n 1)" = "$dir" ]
        then
            return 0
        fi
        sleep 0.1
    done
    stop_pid "$REDIS_PID"
    REDIS_PID=""
    grep -q 'Address already in use' "$REDIS_LOG" 2>/dev/null && return 2
    return 1
}

# http_ready PORT [TRIES=100] [PID]: waits (0.1 s a try) until GET /readyz on 127.0.0.1:PORT answers 200; 1 when it did not, or when PID (a daemon we started) exited first.
http_ready() {
    local port=$1 tries=${2:-100} pid=${3:-} i
    for ((i = 0; i < tries; i++)); do
        [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || return 1
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ] && return 0
        sleep 0.1
    done
    return 1
}

# redis_unlink_keys PORT PATTERN: deletes the keys matching PATTERN (SCAN + UNLINK: the server may be shared).
redis_unlink_keys() {
    timeout 60 redis-cli -h 127.0.0.1 -p "$1" --scan --pattern "$2" 2>/dev/null \
        | xargs -r -d '\n' -n 500 timeout 30 redis-cli -h 127.0.0.1 -p "$1" UNLINK >/dev/null 2>&1 \
        || true
}

# suite_summary RUN PASSED [FAILED_NAME...]: prints cmocka's closing lines; returns 1 when a test failed.
suite_summary() {
    local run=$1 passed=$2 t
    shift 2
    echo "[==========] $run test(s) run."
    echo "[  PASSED  ] $passed test(s)."
    [ "$#" -eq 0 ] && return 0
    echo "[  FAILED  ] $# test(s), listed below:"
    for t in "$@"; do echo "[  FAILED  ] $t"; done
    echo
    echo " $# FAILED TEST(S)"
    return 1
}

# suite_run TEST...: runs each function TEST in a subshell with cmocka's RUN/OK/FAILED lines, then suite_summary; SUITE_FAILED lists the failed ones.
suite_run() {
    local t passed=0
    SUITE_FAILED=()
    echo "[==========] Running $# test(s)."
    for t in "$@"; do
        echo "[ RUN      ] $t"
        if ( "$t" ); then
            echo "[       OK ] $t"
            passed=$((passed + 1))
        else
            echo "[  FAILED  ] $t"
            SUITE_FAILED+=("$t")
        fi
    done
    suite_summary "$#" "$passed" ${SUITE_FAILED[@]+"${SUITE_FAILED[@]}"}
}

# suite_setup_failed NAME WHY...: prints WHY and a cmocka summary in which NAME failed, then exits 1 (test.sh counts one failure).
suite_setup_failed() {
    local name=$1
    shift
    echo "${0##*/}: $*"
    echo "[  FAILED  ] 1 test(s), listed below:"
    echo "[  FAILED  ] $name"
    exit 1
}
