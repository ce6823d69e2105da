#!/usr/bin/env bash
# ui_test.sh - browser test of the web console (/ui): Debian's chromium,
# headless, driven by playwright-core (tests/ui/, pinned in package-lock.json)
# against a build/retryd on a free loopback port.
#
#   RETRYD_TEST_REDIS_PORT=6394 RETRYD_BIN=$PWD/build/retryd bash tests/ui_test.sh [NAME...]
#
# RETRYD_TEST_REDIS_PORT is a redis-server on 127.0.0.1 the test may write to;
# every key it makes starts with a prefix unique to the run (it never flushes).
# The script:
#   - runs scripts/deps.sh test when chromium, node or npm is missing (it
#     installs Debian's chromium, nodejs and npm; root or sudo),
#   - runs `npm ci --prefix tests/ui` when playwright-core is not installed
#     (pinned to a version that runs on Node 18, bookworm's),
#   - starts retryd with --auth-token-file (a random token), --token-file
#     (a random reader token) and a unique
#     --prefix, and a second retryd whose Redis is a dead port (the
#     "Redis unavailable" banner),
#   - runs tests/ui/ui_test.mjs, which seeds queues through the HTTP API (and
#     100k dead letters through redis-cli for the large-queue check), drives
#     the console and prints cmocka-style lines:
#       [ RUN      ] name / [       OK ] name / [  FAILED  ] name
#       [  PASSED  ] N test(s).
#       [  FAILED  ] M test(s), listed below:   (then one line per failure)
#   - stops both daemons and deletes its keys and temp files on any exit.
# NAME... runs only those tests (setup ones they need still run).
#
# Environment: RETRYD_UI_SCREENSHOTS=DIR saves the screenshots there
# (docs/screenshots to refresh the README's); by default they go to the temp
# dir and are deleted. RETRYD_UI_LARGE=N sets the large queue's size
# (default 100000; 0 skips that test).
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/.." && pwd)
REDIS_PORT=${RETRYD_TEST_REDIS_PORT:-}
BIN=${RETRYD_BIN:-$ROOT/build/retryd}
CHROMIUM=/usr/bin/chromium
# stop_pid, port_open, redis_unlink_keys, suite_setup_failed.
source "$ROOT/scripts/lib.sh"

# A failure before the browser test runs still ends in cmocka's summary, so
# scripts/test.sh counts it.
setup_failed() { suite_setup_failed ui_setup "$@"; }

[ -n "$REDIS_PORT" ] || setup_failed "RETRYD_TEST_REDIS_PORT is not set (the port of a throwaway redis-server)"
[ -x "$BIN" ] || setup_failed "$BIN is missing: run make build/retryd"
command -v redis-cli >/dev/null || setup_failed "redis-cli is not installed"
timeout 5 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG \
    || setup_failed "no Redis answers on 127.0.0.1:$REDIS_PORT"

# --- chromium, node and playwright-core ---------------------------------------------
# scripts/deps.sh test installs what is missing (as `make test` does first):
# Debian's chromium, and Debian's nodejs and npm when there is no node.
if [ ! -x "$CHROMIUM" ] || ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "ui_test.sh: installing what is missing (scripts/deps.sh test)"
    "$ROOT/scripts/deps.sh" test >/dev/null 2>&1 || setup_failed "scripts/deps.sh test failed"
    [ -x "$CHROMIUM" ] || setup_failed "$CHROMIUM is still missing after scripts/deps.sh test"
    command -v node >/dev/null || setup_failed "node is still missing after scripts/deps.sh test"
fi
# Node 18 (Debian bookworm's) or later: tests/ui pins a playwright-core whose
# engines accept it.
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
[ "$node_major" -ge 18 ] 2>/dev/null || setup_failed "node $(node --version) is too old: Node 18 or later is needed"
# npm ci again when node_modules holds another version than the lockfile's.
pw_want=$(node -p 'require(process.argv[1]).packages["node_modules/playwright-core"].version' \
          "$here/ui/package-lock.json" 2>/dev/null)
pw_have=$(node -p 'require(process.argv[1]).version' \
          "$here/ui/node_modules/playwright-core/package.json" 2>/dev/null)
if [ -z "$pw_have" ] || [ "$pw_have" != "$pw_want" ]; then
    command -v npm >/dev/null || setup_failed "npm is not installed"
    echo "ui_test.sh: npm ci --prefix tests/ui"
    npm ci --prefix "$here/ui" --no-audit --no-fund --loglevel=error >/dev/null 2>&1 \
        || setup_failed "npm ci --prefix tests/ui failed"
fi
echo "ui_test.sh: node $(node --version), playwright-core $pw_want, $("$CHROMIUM" --version 2>/dev/null | head -n 1)"

# --- temp dir, token, cleanup ------------------------------------------------------------
TMP=$(mktemp -d "${TMPDIR:-/tmp}/retryd-ui-test.XXXXXX") || setup_failed "cannot create a temp dir"
PREFIX="uitest-$$-$RANDOM"
daemon_pids=()
cleanup() {
    stop_pid ${daemon_pids[@]+"${daemon_pids[@]}"}
    redis_unlink_keys "$REDIS_PORT" "$PREFIX:*" # the run's keys only
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TOKEN="ui-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
printf '%s\n' "$TOKEN" > "$TMP/token"
chmod 600 "$TMP/token"
# A --token-file beside it: a reader token (the console's role gating).
READER_TOKEN="ui-reader-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
printf '# the console test\n%s reader\n' "$READER_TOKEN" > "$TMP/tokens"
chmod 600 "$TMP/tokens"

# start_daemon NAME REDIS_URL: starts retryd on the first free port from a
# random base; sets DAEMON_PORT. Returns 1 when it cannot.
start_daemon() {
    local name=$1 redis_url=$2 base=$((30000 + RANDOM % 20000)) attempt port pid i
    for attempt in $(seq 0 19); do
        port=$((base + attempt))
        port_open "$port" && continue
        "$BIN" --listen "127.0.0.1:$port" --redis "$redis_url" --prefix "$PREFIX" \
            --auth-token-file "$TMP/token" --token-file "$TMP/tokens" --log-level warn --tick-ms 100 \
            >"$TMP/$name.log" 2>&1 &
        pid=$!
        for i in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            if port_open "$port"; then
                daemon_pids+=("$pid")
                DAEMON_PORT=$port
                return 0
            fi
            sleep 0.05
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            echo "ui_test.sh: retryd ($name) did not listen on $port within 5 s:"
            tail -n 20 "$TMP/$name.log"
            return 1
        fi
        wait "$pid" 2>/dev/null
        grep -qi 'in use' "$TMP/$name.log" || {
            echo "ui_test.sh: retryd ($name) exited on start:"
            tail -n 20 "$TMP/$name.log"
            return 1
        }
    done
    echo "ui_test.sh: no free port for retryd ($name)"
    return 1
}

start_daemon main "redis://127.0.0.1:$REDIS_PORT" || setup_failed "cannot start retryd"
MAIN_PORT=$DAEMON_PORT

# A port nobody listens on stands in for a Redis that is down.
dead_port=""
dead_base=$((20000 + RANDOM % 20000))
for p in $(seq "$dead_base" $((dead_base + 50))); do
    port_open "$p" || { dead_port=$p; break; }
done
[ -n "$dead_port" ] || dead_port=1
start_daemon noredis "redis://127.0.0.1:$dead_port" || setup_failed "cannot start the second retryd"
NOREDIS_PORT=$DAEMON_PORT

shots=${RETRYD_UI_SCREENSHOTS:-$TMP/screenshots}
case "$shots" in /*) ;; *) shots="$ROOT/$shots" ;; esac
mkdir -p "$shots" || setup_failed "cannot create $shots"

RETRYD_UI_URL="http://127.0.0.1:$MAIN_PORT" \
RETRYD_UI_NOREDIS_URL="http://127.0.0.1:$NOREDIS_PORT" \
RETRYD_UI_TOKEN="$TOKEN" \
RETRYD_UI_READER_TOKEN="$READER_TOKEN" \
RETRYD_UI_PREFIX="$PREFIX" \
RETRYD_UI_LIBRARY="$(sed -n '1s/^#!lua name=//p' "$ROOT/lua/00_common.lua")" \
RETRYD_UI_REDIS_PORT="$REDIS_PORT" \
RETRYD_UI_SHOTS="$shots" \
RETRYD_UI_TMP="$TMP" \
RETRYD_UI_CHROMIUM="$CHROMIUM" \
    timeout -k 10 900 node "$here/ui/ui_test.mjs" "$@"
rc=$?
if [ "$rc" -ne 0 ]; then
    for f in "$TMP"/main.log "$TMP"/noredis.log; do
        [ -s "$f" ] && { echo "--- ${f##*/} (last lines)"; tail -n 15 "$f"; }
    done
fi
exit "$rc"
