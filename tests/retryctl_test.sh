#!/usr/bin/env bash
# retryctl_test.sh - end-to-end tests of scripts/retryctl and
# scripts/dead-letter-alert against a throwaway redis-server.
#
#   RETRYD_TEST_REDIS_PORT=6397 RETRYD_TEST_LUA=$PWD/build/retryd.lua \
#       bash tests/retryctl_test.sh [TEST...]
#
# RETRYD_TEST_REDIS_PORT is a redis-server on 127.0.0.1 that the tests may
# write to (they never FLUSHALL: every key they make starts with a prefix of
# their own, unique per run, and the library is (re)loaded from
# RETRYD_TEST_LUA). Messages are driven through the same FCALLs the daemon
# sends; expectations are checked against the keys themselves (LLEN, ZCARD,
# HGET, a message's record decoded by RECORD_FIELD) and against oracles independent of the code under test (date(1) for
# timestamps, Redis's own cjson for JSON, a CSV writer below).
#
# Output follows cmocka's plain-text format, which scripts/test.sh counts:
# "[ RUN      ] name", "[       OK ] name" or "[  FAILED  ] name", then
# "[  PASSED  ] N test(s)." and, after failures,
# "[  FAILED  ] M test(s), listed below:" and their names. Exit status 1 when
# any test failed. Needs bash, redis-cli, coreutils and awk.
set -u

PORT=${RETRYD_TEST_REDIS_PORT:?RETRYD_TEST_REDIS_PORT: the port of a throwaway redis-server}
LUA=${RETRYD_TEST_LUA:?RETRYD_TEST_LUA: the path of build/retryd.lua}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/.." && pwd)
RETRYCTL=$ROOT/scripts/retryctl
ALERT=$ROOT/scripts/dead-letter-alert

export REDIS_URL="redis://127.0.0.1:$PORT"
export RETRYD_PREFIX="rctest-$$-$RANDOM"
export RETRYD_LUA=$LUA
PREFIX=$RETRYD_PREFIX
# The library's name (its first line) carries its version; every function is
# called as <library>_<name>, here through $FN.
LIB=$(sed -n '1s/^#!lua name=//p' "$LUA")
FN=${LIB}_

# stop_pid, redis_unlink_keys, suite_run, suite_setup_failed.
source "$ROOT/scripts/lib.sh"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/retryctl-test.XXXXXX") || exit 1
bg_pids=()
cleanup() {
    stop_pid ${bg_pids[@]+"${bg_pids[@]}"}
    rm -rf "$TMP"
}
trap cleanup EXIT

# ===========================================================================
# Helpers. Inside a test, a failed check prints why and exits the test's
# subshell with 1; the next test still runs.
# ===========================================================================

rcli() { timeout 30 redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }

# rget ARGS...: the exact string reply of one command (--raw ends it with a
# newline, and the "." keeps command substitution from eating others).
# A message's field, read from its record as docs/storage.md lays it out
# (header with struct, trailer with cmsgpack, the state from the indexes),
# independently of the library: "HGET <base>:m:<id> <field>" and HEXISTS
# in rget below.
RECORD_FIELD='
local base, id = string.match(KEYS[1], "^(.*):m:(%d+)$")
local state, score = "pending", false
for _, s in ipairs({ "processing", "succeeded", "dead" }) do
  local sc = redis.call("ZSCORE", base .. ":3:" .. s, id)
  if sc then state, score = s, sc; break end
end
local rec = redis.call("GET", KEYS[1])
if not rec then return ARGV[2] and 0 or false end
local fmt, rc, mr, created, du, dl, serial = struct.unpack(">BBBI6i5i5I5", rec)
local t, stop = {}, #rec
if fmt >= 128 then
  local n = struct.unpack(">I4", rec, #rec - 3)
  t = cmsgpack.unpack(string.sub(rec, #rec - 3 - n, #rec - 4))
  stop = #rec - 4 - n
end
local leased = state == "processing"
local v = ({ payload = string.sub(rec, 25, stop), status = state, retry_count = rc,
             max_retries = mr, created_at = created, updated_at = created + du,
             last_error = t.e == true and t.h[#t.h][4] or t.e, retry_after = t.r,
             idempotency_key = t.i, history_count = #(t.h or {}) + (t.d or 0),
             priority = (fmt % 128 - 1) / 2, expires_at = t.x,
             lease_token = leased and (t.t or string.format("%x.%x", created + dl, serial)),
             lease_expires_at = leased and score, dead_at = state == "dead" and score })[ARGV[1]]
if ARGV[2] then return v and 1 or 0 end
if type(v) == "number" then return string.format("%d", v) end
return v or false
'

rget() {
    local v
    if [ "$1" = HGET ] && [[ "$2" =~ :m:[0-9]+$ ]]; then
        set -- EVAL "$RECORD_FIELD" 1 "$2" "$3"
    elif [ "$1" = HEXISTS ] && [[ "$2" =~ :m:[0-9]+$ ]]; then
        set -- EVAL "$RECORD_FIELD" 1 "$2" "$3" exists
    fi
    v=$(rcli --raw "$@"; echo .)
    v=${v%.}
    printf '%s' "${v%$'\n'}"
}

fail() {
    printf '    FAIL: %s\n' "$*"
    exit 1
}

# run CMD...: runs a command with a 60 s bound; OUT, ERR hold its stdout and
# stderr (exact bytes in $TMP/out and $TMP/err), RC its status.
run() {
    timeout 60 "$@" >"$TMP/out" 2>"$TMP/err"
    RC=$?
    OUT=$(cat "$TMP/out"; echo .); OUT=${OUT%.}
    ERR=$(cat "$TMP/err"; echo .); ERR=${ERR%.}
}

ctl() { run "$RETRYCTL" "$@"; }

show_run() {
    printf '    exit %s\n    stdout: %s\n    stderr: %s\n' "$RC" "$OUT" "$ERR"
}

expect_rc() {              # expect_rc N WHAT
    if [ "$RC" != "$1" ]; then
        show_run
        fail "$2: exit $RC, expected $1"
    fi
}

expect_eq() {              # expect_eq ACTUAL EXPECTED WHAT
    if [ "$1" != "$2" ]; then
        printf '    actual:   %q\n    expected: %q\n' "$1" "$2"
        fail "$3"
    fi
}

expect_match() {           # expect_match TEXT ERE WHAT
    if ! [[ $1 =~ $2 ]]; then
        printf '    text:  %q\n    regex: %s\n' "$1" "$2"
        fail "$3"
    fi
}

base() { printf '%s:{%s}' "$PREFIX" "$1"; }   # plain queue names only

# FCALL wrappers: the state changes the daemon makes.
fc_enqueue() {             # fc_enqueue Q PAYLOAD [MAX]: prints the id
    local out
    out=$(rcli --raw FCALL "${FN}enqueue" 1 "$(base "$1")" "$2" "${3:-3}" 0 "") || return 1
    rcli SADD "$PREFIX:queues" "$1" >/dev/null
    printf '%s\n' "$out" | sed -n 2p     # {"ok", id, now_ms}
}
fc_claim() {               # fc_claim Q COUNT
    rcli FCALL "${FN}claim" 1 "$(base "$1")" 60000 "$2" >/dev/null
}
fc_fail() {                # fc_fail Q ID ERROR RETRYABLE(1|0)
    local b
    b=$(base "$1")
    local st
    st=$(rcli --raw FCALL "${FN}fail" 2 "$b" "$b:m:$2" "$2" "" "$3" "$4" -1 | head -n 1)
    [ "$st" = ok ] || fail "fail $1 $2 answered '$st'"
}
fc_succeed() {             # fc_succeed Q ID
    local b st
    b=$(base "$1")
    st=$(rcli --raw FCALL "${FN}succeed" 2 "$b" "$b:m:$2" "$2" "" | head -n 1)
    [ "$st" = ok ] || fail "succeed $1 $2 answered '$st'"
}
# Kills message ID through claim + a non-retryable fail (it must be next).
fc_die() {                 # fc_die Q ID ERROR
    fc_claim "$1" 1
    [ "$(rget HGET "$(base "$1"):m:$2" status)" = processing ] || fail "message $2 was not claimed"
    fc_fail "$1" "$2" "$3" 0
}

iso() {                    # iso MS: RFC 3339 UTC with milliseconds, by date(1)
    [ -z "$1" ] && return 0
    printf '%s.%03dZ' "$(date -u -d "@$(($1 / 1000))" +%Y-%m-%dT%H:%M:%S)" $(($1 % 1000))
}

csv() {                    # csv FIELD: RFC 4180 quoting, written independently
    case $1 in                 # (a formula-like cell: OWASP's ' and quotes)
    [=+@$'\t\r'-]*) local s=${1//\"/\"\"}; printf '"\x27%s"' "$s" ;;
    *[,\"$'\r\n']*) local s=${1//\"/\"\"}; printf '"%s"' "$s" ;;
    *) printf '%s' "$1" ;;
    esac
}

# The CSV row retryctl must write for message ID of queue Q (its key base B).
csv_row() {                # csv_row B ID
    local k="$1:m:$2"
    printf '%s,%s,%s,%s,%s,%s,%s,' "$2" "$(rget HGET "$k" status)" \
        "$(rget HGET "$k" retry_count)" "$(rget HGET "$k" max_retries)" \
        "$(iso "$(rget HGET "$k" created_at)")" "$(iso "$(rget HGET "$k" updated_at)")" \
        "$(iso "$(rget HGET "$k" retry_after)")"
    csv "$(rget HGET "$k" last_error)"
    printf ','
    csv "$(rget HGET "$k" payload)"
    printf ',%s\n' "$(rget HGET "$k" history_count)"
}

stat_of() {                # stat_of NAME: the value of a line "NAME value" in OUT
    printf '%s\n' "$OUT" | awk -v n="$1" '$1 == n { print $2; exit }'
}

server_now_ms() {
    local s us
    { read -r s; read -r us; } < <(rcli --raw TIME)
    printf '%s' $((s * 1000 + us / 1000))
}

# ===========================================================================
# Tests
# ===========================================================================

test_help_and_usage() {
    ctl help
    expect_rc 0 "help"
    expect_match "$OUT" "Exit status:" "help names the exit statuses"
    expect_match "$OUT" "Redis failed" "help says a Redis failure exits 1"
    local c
    for c in load queues stats list show enqueue replay kill snooze delete purge export groups; do
        ctl "$c" --help
        expect_rc 0 "$c --help"
        expect_match "$OUT" "^Usage: retryctl $c" "$c --help prints its usage"
        ctl help "$c"
        expect_rc 0 "help $c"
    done
    ctl
    expect_rc 2 "no command"
    ctl frobnicate
    expect_rc 2 "unknown command"
    expect_match "$ERR" "unknown command 'frobnicate'" "unknown command is named"
    ctl --bogus queues
    expect_rc 2 "unknown global option"
    ctl list
    expect_rc 2 "list without a queue"
    ctl list q --limit abc
    expect_rc 2 "list --limit abc"
    ctl list q --limit 0
    expect_rc 2 "list --limit 0"
    ctl list q finished
    expect_rc 2 "list with an unknown status"
    ctl show q
    expect_rc 2 "show without an id"
    ctl show q abc
    expect_rc 2 "show with a non-numeric id"
    ctl enqueue q
    expect_rc 2 "enqueue without a payload"
    ctl enqueue q x --max-retries 11
    expect_rc 2 "enqueue --max-retries 11"
    expect_match "$ERR" "max_retries must be between 1 and 10" "max_retries message"
    ctl enqueue q x --max-retries 0
    expect_rc 2 "enqueue --max-retries 0"
    ctl enqueue q x --delay -5
    expect_rc 2 "enqueue --delay -5"
    ctl enqueue q x --delay 31d
    expect_rc 2 "enqueue --delay 31d"
    ctl enqueue q x --frob
    expect_rc 2 "enqueue with an unknown option"
    for bad in 10 -1 x 3.5 ""; do
        ctl enqueue q x --priority "$bad"
        expect_rc 2 "enqueue --priority '$bad'"
    done
    expect_match "$ERR" "priority must be an integer between 0 and 9" "priority message"
    for bad in 0 31d -5 1.5; do
        ctl enqueue q x --ttl "$bad"
        expect_rc 2 "enqueue --ttl '$bad'"
    done
    ctl replay q
    expect_rc 2 "replay without ids or mode"
    ctl replay q 1 --all
    expect_rc 2 "replay ids and --all"
    ctl replay q --error-contains ""
    expect_rc 2 "replay --error-contains ''"
    ctl replay q x1
    expect_rc 2 "replay a non-numeric id"
    ctl kill q
    expect_rc 2 "kill without an id"
    ctl snooze q
    expect_rc 2 "snooze without an id"
    ctl snooze q 1 --delay 31d
    expect_rc 2 "snooze --delay 31d"
    ctl snooze q 1 --delay -1
    expect_rc 2 "snooze --delay -1"
    ctl snooze q 1 --frob
    expect_rc 2 "snooze with an unknown option"
    ctl delete q 1 2
    expect_rc 2 "delete with two ids"
    ctl purge q dead
    expect_rc 2 "purge without --older-than"
    ctl purge q pending --older-than 1d
    expect_rc 2 "purge of pending"
    ctl purge q dead --older-than 3w
    expect_rc 2 "purge --older-than 3w"
    ctl export q --format xml
    expect_rc 2 "export --format xml"
    ctl stats q --top 101
    expect_rc 2 "stats --top 101"
    ctl queues extra
    expect_rc 2 "queues with an argument"
    # Nothing of that reached Redis.
    expect_eq "$(rget EXISTS "$(base q):seq")" 0 "usage errors create nothing"
}

test_redis_unreachable_exits_1() {
    run env REDIS_URL=redis://127.0.0.1:1 "$RETRYCTL" stats q
    expect_rc 1 "stats with Redis unreachable"
    expect_eq "$OUT" "" "nothing on stdout when Redis is unreachable"
    expect_match "$ERR" "redis-cli failed" "the failure is explained on stderr"
    run env REDIS_URL= "$RETRYCTL" -u redis://127.0.0.1:1 enqueue q x
    expect_rc 1 "enqueue with -u to a closed port"
    run env REDIS_URL=redis://127.0.0.1:1 "$ALERT" q
    expect_rc 1 "dead-letter-alert with Redis unreachable"
    # -u wins over REDIS_URL.
    run env REDIS_URL=redis://127.0.0.1:1 "$RETRYCTL" -u "redis://127.0.0.1:$PORT" queues
    expect_rc 0 "-u overrides REDIS_URL"
}

test_load() {
    ctl load
    expect_rc 0 "load from RETRYD_LUA"
    expect_match "$OUT" "^loaded library $LIB from $LUA" "load says what it loaded"
    expect_match "$(rcli --raw FUNCTION LIST LIBRARYNAME "$LIB")" "${FN}enqueue" "the library is loaded"

    run env RETRYD_LUA=/nonexistent/retryd.lua "$RETRYCTL" load
    expect_rc 1 "load from a missing RETRYD_LUA"

    # Without RETRYD_LUA and without ../build/retryd.lua: ../lua/*.lua.
    mkdir -p "$TMP/tree/scripts" "$TMP/tree/lua"
    cp "$RETRYCTL" "$TMP/tree/scripts/"
    cp "$ROOT"/lua/*.lua "$TMP/tree/lua/"
    run env -u RETRYD_LUA "$TMP/tree/scripts/retryctl" load
    expect_rc 0 "load from ../lua/*.lua"
    expect_match "$OUT" "lua/\*\.lua" "load names the lua/ files"
    expect_match "$(rcli --raw FCALL_RO "${FN}stats" 1 "$(base loadq)" 0 | head -n 1)" pending \
        "the concatenated library answers"
    rm -rf "$TMP/tree/lua"
    run env -u RETRYD_LUA "$TMP/tree/scripts/retryctl" load
    expect_rc 1 "load with no library anywhere"

    # Without the library, a command says how to fix it.
    rcli FUNCTION DELETE "$LIB" >/dev/null
    ctl stats q
    expect_rc 1 "stats without the library"
    expect_match "$ERR" "retryctl load" "the error suggests 'retryctl load'"
    ctl load
    expect_rc 0 "reload"

    # Rolling upgrade: a library of another version (the unversioned "retryd"
    # of older releases) stays beside this one and still answers...
    printf '#!lua name=retryd\nredis.register_function("claim", function() return "old" end)\n' |
        rcli -x FUNCTION LOAD REPLACE >/dev/null
    ctl load
    expect_rc 0 "load beside an older version"
    expect_eq "$(rcli --raw FCALL claim 0)" old "the older version still answers"
    rcli FUNCTION DELETE retryd >/dev/null
    # ...and retryctl refuses to load a library of a version it does not call.
    sed -e "1s/.*/#!lua name=retryd_v0/" -e "s/^\( *\)local LIBRARY = '$LIB'/\1local LIBRARY = 'retryd_v0'/" \
        "$LUA" >"$TMP/v0.lua"
    run env RETRYD_LUA="$TMP/v0.lua" "$RETRYCTL" load
    expect_rc 1 "load of another version"
    expect_match "$ERR" "calls $LIB" "it says which version it calls"
    rcli FUNCTION DELETE retryd_v0 >/dev/null
}

test_enqueue_then_show() {
    local q=shown payload=$'{"to": "a@example.com",\n "n": 1}\ttab'
    ctl enqueue "$q" "$payload" --max-retries 5
    expect_rc 0 "enqueue"
    expect_eq "$OUT" $'1\n' "enqueue prints the new id"
    expect_eq "$(rget HGET "$(base "$q"):m:1" payload)" "$payload" "the payload is stored as given"
    expect_eq "$(rget LRANGE "$(base "$q"):3:ready" 0 -1)" 1 "the id is ready"
    expect_eq "$(rget SISMEMBER "$PREFIX:queues" "$q")" 1 "the queue is registered"

    ctl show "$q" 1
    expect_rc 0 "show"
    local created
    created=$(iso "$(rget HGET "$(base "$q"):m:1" created_at)")
    expect_match "$OUT" $'(^|\n)id: +1\n' "show: id"
    expect_match "$OUT" $'\nstatus: +pending\n' "show: status"
    expect_match "$OUT" $'\nmax_retries: +5\n' "show: max_retries"
    expect_match "$OUT" $'\nretry_count: +0\n' "show: retry_count"
    expect_match "$OUT" $'\ncreated_at: +'"$created"$'\n' "show: created_at in RFC 3339"
    expect_match "$created" '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$' "RFC 3339 shape"
    expect_match "$OUT" $'\npayload: +\\{"to": "a@example.com",\\\\n "n": 1\\}\\\\ttab\n' \
        "show: payload with \\n and \\t visible"

    ctl show "$q" 1 --field payload
    expect_rc 0 "show --field payload"
    expect_eq "$OUT" "$payload" "--field payload is byte for byte"

    ctl enqueue "$q" later --delay 2m
    expect_rc 0 "enqueue --delay"
    expect_eq "$OUT" $'2\n' "second id"
    local ra
    ra=$(rget HGET "$(base "$q"):m:2" retry_after)
    expect_eq "$(rget ZSCORE "$(base "$q"):3:scheduled" 2)" "$ra" "a delayed message is scheduled"
    ctl show "$q" 2
    expect_match "$OUT" $'\nretry_after: +'"$(iso "$ra")"$'\n' "show: retry_after"

    ctl enqueue "$q" once --idempotency-key k1
    expect_eq "$OUT" $'3\n' "idempotent enqueue, first"
    ctl enqueue "$q" once --idempotency-key k1
    expect_rc 0 "idempotent enqueue, again"
    expect_eq "$OUT" $'3\n' "the duplicate names the original"
    expect_match "$ERR" duplicate "the duplicate is reported"
    expect_eq "$(rget GET "$(base "$q"):seq")" 3 "no message was created for the duplicate"

    ctl enqueue "$q" -- --dashes
    expect_rc 0 "enqueue -- PAYLOAD"
    expect_eq "$(rget HGET "$(base "$q"):m:4" payload)" "--dashes" "a payload after --"
}

# Every command from now on is logged; slowlog_stop keeps the log in
# $TMP/slowlog and puts Redis's defaults back; slowlog_calls FUNCTION counts
# the calls of one library function in it.
slowlog_start() {
    rcli CONFIG SET slowlog-log-slower-than 0 slowlog-max-len 10000 >/dev/null
    rcli SLOWLOG RESET >/dev/null
}
slowlog_stop() {
    rcli --raw SLOWLOG GET 10000 > "$TMP/slowlog"
    rcli CONFIG SET slowlog-log-slower-than 10000 slowlog-max-len 128 >/dev/null
}
slowlog_calls() { grep -acx "${FN}$1" "$TMP/slowlog"; }

# enqueue --file (docs/operators.md "Enqueue from a file"): one message per
# line, in order, ids printed one per line; the lines' bytes stored as they
# are (quotes, backslashes, control bytes, a byte that is not UTF-8, an empty
# line, a last line without a newline); more than 100 lines take several
# enqueue_many calls, in order; options apply to every line; a line over
# the policy's max_payload_bytes fails alone ("line N: ..." and exit 1).
test_enqueue_file() {
    local q=fromfile b
    b=$(base "$q")
    printf 'one\ntwo "quoted" \\back\n\n\001ctl\tTab\377\nlast' > "$TMP/lines"
    ctl enqueue "$q" --file "$TMP/lines"
    expect_rc 0 "enqueue --file"
    expect_eq "$OUT" $'1\n2\n3\n4\n5\n' "one id per line, in order"
    expect_eq "$(rget HGET "$b:m:1" payload)" "one" "line 1"
    expect_eq "$(rget HGET "$b:m:2" payload)" 'two "quoted" \back' "quotes and a backslash"
    expect_eq "$(rget HGET "$b:m:3" payload)" "" "an empty line is an empty payload"
    expect_eq "$(rget HGET "$b:m:4" payload | od -An -tx1 | tr -d ' \n')" \
        "0163746c09546162ff" "control bytes and a byte that is not UTF-8, as they are"
    expect_eq "$(rget HGET "$b:m:5" payload)" "last" "a last line without a newline"
    expect_eq "$(rget SISMEMBER "$PREFIX:queues" "$q")" 1 "the queue is registered"

    # 250 lines from stdin: three calls (100, 100, 50), ids in the file's order.
    seq 1 250 | awk '{ print "n" $1 }' > "$TMP/many"
    slowlog_start
    run "$RETRYCTL" enqueue "$q" --file - --priority 2 --max-retries 4 < "$TMP/many"
    expect_rc 0 "enqueue --file -"
    expect_eq "$(printf '%s' "$OUT" | wc -l)" 250 "250 ids"
    expect_eq "$(printf '%s' "$OUT" | head -n 1)" 6 "the first id follows"
    expect_eq "$(printf '%s' "$OUT" | tail -n 1)" 255 "the last id"
    expect_eq "$(rget HGET "$b:m:6" payload)" n1 "line 1 is the first id"
    expect_eq "$(rget HGET "$b:m:255" payload)" n250 "line 250 is the last id"
    expect_eq "$(rget HGET "$b:m:100" priority)" 2 "--priority on every line"
    expect_eq "$(rget HGET "$b:m:200" max_retries)" 4 "--max-retries on every line"
    slowlog_stop
    expect_eq "$(slowlog_calls enqueue_many)" 3 "250 lines in three enqueue_many calls"
    expect_eq "$(slowlog_calls enqueue)" 0 "and no single enqueue"

    # A delay on every line: scheduled, and the timer schedule knows the queue.
    printf 'later1\nlater2\n' | run "$RETRYCTL" enqueue "$q" --file - --delay 10m
    expect_rc 0 "enqueue --file --delay"
    expect_eq "$(rget ZCARD "$b:3:scheduled")" 2 "both scheduled"
    [ -n "$(rget ZSCORE "{$PREFIX:queues}:timers" "$q")" ] || fail "the timer schedule has the queue"

    # Too large for the policy: that line alone fails.
    rcli FCALL "${FN}policy_set" 1 "$b" replace max_payload_bytes 1024 >/dev/null
    { echo small; head -c 2000 /dev/zero | tr '\0' z; echo; echo after; } > "$TMP/mixed"
    ctl enqueue "$q" --file "$TMP/mixed"
    expect_rc 1 "a line too large"
    expect_eq "$OUT" $'258\n259\n' "the other lines' ids"
    expect_match "$ERR" "line 2: the payload is longer than the queue policy's max_payload_bytes \\(1024\\)" \
        "the line that failed, and why"
    expect_eq "$(rget GET "$b:seq")" 259 "nothing made for it"

    # Usage: no payload beside --file, no idempotency key, a file that is there.
    ctl enqueue "$q" x --file "$TMP/lines"
    expect_rc 2 "a payload and --file"
    ctl enqueue "$q" --file "$TMP/lines" --idempotency-key k
    expect_rc 2 "--idempotency-key with --file"
    ctl enqueue "$q" --file "$TMP/no-such-file"
    expect_rc 2 "a file that is not there"
}

# Lines of more than 1 MiB together go in calls of at most 1 MiB each (a
# longer line alone in its call).
test_enqueue_file_bytes_bound() {
    local q=bigfile b i
    b=$(base "$q")
    : > "$TMP/big"
    for i in 1 2 3 4 5 6; do head -c 400000 /dev/zero | tr '\0' "$i" >> "$TMP/big"; echo >> "$TMP/big"; done
    head -c 1100000 /dev/zero | tr '\0' 7 >> "$TMP/big"; echo >> "$TMP/big"
    slowlog_start
    ctl enqueue "$q" --file "$TMP/big"
    slowlog_stop
    expect_rc 0 "six lines of 400 kB and one of 1.1 MB"
    expect_eq "$OUT" $'1\n2\n3\n4\n5\n6\n7\n' "seven ids"
    expect_eq "$(slowlog_calls enqueue_many)" 4 "calls of two lines (800 kB), then the long line alone"
    expect_eq "$(rget HGET "$b:m:6" payload | head -c 3)" 666 "the sixth line"
    expect_eq "$(rget HGET "$b:m:7" payload | head -c 3)" 777 "the long line"
    expect_eq "$(rget STRLEN "$b:m:6")" "$(( $(rget STRLEN "$b:m:1") ))" "whole lines"
}

# --priority and --ttl (docs/reference.md "Priority"): show prints both, the
# claim takes the higher priority first.
test_enqueue_priority_and_ttl() {
    local q=prio
    ctl enqueue "$q" low
    expect_rc 0 "enqueue without a priority"
    ctl enqueue "$q" high --priority 7 --ttl 1h
    expect_rc 0 "enqueue --priority 7 --ttl 1h"
    expect_eq "$OUT" $'2\n' "second id"
    local created
    created=$(rget HGET "$(base "$q"):m:2" created_at)
    expect_eq "$(rget HGET "$(base "$q"):m:2" expires_at)" $((created + 3600000)) "expires_at = now + ttl"
    expect_eq "$(rget ZCARD "$(base "$q"):3:priority")" 1 "the id is in the priority lane"
    ctl show "$q" 2
    expect_rc 0 "show"
    expect_match "$OUT" $'\npriority: +7\n' "show: priority"
    expect_match "$OUT" $'\nexpires_at: +'"$(iso $((created + 3600000)))"$'\n' "show: expires_at in RFC 3339"
    ctl show "$q" 1
    [[ $OUT == *priority:* || $OUT == *expires_at:* ]] && fail "a priority-0 message shows neither"
    ctl enqueue "$q" soon --ttl 90
    expect_eq "$(rget HGET "$(base "$q"):m:3" expires_at)" \
        $(($(rget HGET "$(base "$q"):m:3" created_at) + 90000)) "--ttl in seconds"
    local first
    first=$(rcli --raw FCALL "${FN}claim" 1 "$(base "$q")" 60000 1 | sed -n 2p)
    expect_eq "$first" 2 "the claim takes priority 7 first"
}

# The history (docs/reference.md "History"): show prints one line per record, oldest first,
# with the worker of each failed lease; export has it (JSONL in full, CSV a
# count).
test_show_history() {
    local q=histq b
    b=$(base "$q")
    fc_enqueue "$q" job 3 >/dev/null
    rcli FCALL "${FN}claim" 1 "$b" 60000 1 "" "" "host-a/7" >/dev/null
    ctl show "$q" 1
    expect_match "$OUT" $'\nworker: +host-a/7\n' "show: worker while processing"
    fc_fail "$q" 1 "first error" 1
    rcli ZADD "$b:3:scheduled" XX 0 1 >/dev/null
    fc_claim "$q" 1
    rcli FCALL "${FN}kill" 2 "$b" "$b:m:1" 1 "" >/dev/null
    ctl replay "$q" 1
    expect_rc 0 "replay"
    ctl show "$q" 1
    expect_rc 0 "show"
    [[ $OUT == *$'\nworker:'* ]] && fail "show: no worker once the lease is over"
    expect_match "$OUT" $'\nhistory_dropped: +0\nhistory:\n' "show: history after the fields"
    expect_match "$OUT" \
        $'\n  [0-9T:.-]+Z  attempt 1 failed  worker: host-a/7  error: first error\n  [0-9T:.-]+Z  attempt 2 failed  error: killed by operator\n  [0-9T:.-]+Z  replayed\n$' \
        "show: the three records in order"
    ctl export "$q" --format jsonl
    expect_match "$OUT" '"history":\[\{' "jsonl: the history array"
    expect_match "$OUT" '"worker":"host-a\\/7"' "jsonl: the worker of the failed lease (cjson writes / as \\/)"
    expect_match "$OUT" '"replayed_at":"' "jsonl: the replay mark"
    ctl export "$q" --format csv
    expect_match "$OUT" $',job,3\n$' "csv: history_count"
    fc_enqueue "$q" fresh >/dev/null
    ctl export "$q" --format jsonl
    expect_match "$OUT" '"history":\[\][,}]' "jsonl: an empty history is []"
}

test_show_missing_exits_1() {
    ctl show nothere 7
    expect_rc 1 "show of a missing message"
    expect_match "$ERR" "message 7 not found" "the message is named"
    expect_eq "$OUT" "" "nothing on stdout"
    fc_enqueue showq one >/dev/null
    ctl show showq 1 --field nosuchfield
    expect_rc 1 "show --field of a missing field"
}

test_export_csv_escapes() {
    local q=csvq b
    b=$(base "$q")
    local -a payloads=('plain' 'a,b,c' 'say "hi"' $'line1\nline2' $'cr\r\nlf' 'café ☕' '' '"",,""')
    local -a errors=('simple error' 'bad, comma' 'quote "x" here' $'two\nlines' 'no' $'tab\there' 'x' ',')
    local i id
    for i in "${!payloads[@]}"; do
        fc_enqueue "$q" "${payloads[i]}" >/dev/null
    done
    # Deaths in id order, so the dead listing's order is known; one left pending.
    for ((i = 0; i < ${#payloads[@]} - 1; i++)); do
        fc_die "$q" $((i + 1)) "${errors[i]}"
    done
    {
        printf 'id,status,retry_count,max_retries,created_at,updated_at,retry_after,last_error,payload,history_count\n'
        for ((id = 1; id < ${#payloads[@]}; id++)); do
            csv_row "$b" "$id"
        done
    } >"$TMP/expected.csv"
    ctl export "$q" dead --format csv
    expect_rc 0 "export csv"
    cp "$TMP/out" "$TMP/actual.csv"
    if ! cmp -s "$TMP/expected.csv" "$TMP/actual.csv"; then
        diff <(od -c "$TMP/expected.csv") <(od -c "$TMP/actual.csv") | head -n 20
        fail "export csv differs from the expected bytes"
    fi
    # Without a status: every state in turn, the pending one first, then
    # the dead letters in the order they died.
    {
        printf 'id,status,retry_count,max_retries,created_at,updated_at,retry_after,last_error,payload,history_count\n'
        csv_row "$b" "${#payloads[@]}"
        for ((id = 1; id < ${#payloads[@]}; id++)); do
            csv_row "$b" "$id"
        done
    } >"$TMP/expected-all.csv"
    ctl export "$q"
    expect_rc 0 "export (csv by default)"
    cmp -s "$TMP/expected-all.csv" "$TMP/out" || fail "export of every status differs"
}

# CSV injection (docs/reference.md "Operator CLI (retryctl)"): cells a spreadsheet would run as a
# formula come out behind a single quote, quoted; the bytes are spelled out
# here rather than computed by csv().
test_export_csv_formulas_neutralised() {
    local q=csvformula
    fc_enqueue "$q" '=HYPERLINK("http://evil.example","click")' >/dev/null
    fc_enqueue "$q" '+1+1' >/dev/null
    fc_enqueue "$q" '-2' >/dev/null
    fc_enqueue "$q" '@SUM(A1)' >/dev/null
    fc_enqueue "$q" $'\tcmd' >/dev/null
    fc_enqueue "$q" $'\rcmd' >/dev/null
    fc_enqueue "$q" 'a-b' >/dev/null
    fc_die "$q" 1 '=cmd|'"'"' /C calc'"'"'!A0'
    fc_die "$q" 2 'plain'
    fc_die "$q" 3 '-x'
    fc_die "$q" 4 '@x'
    fc_die "$q" 5 $'\tx'
    fc_die "$q" 6 $'\rx'
    fc_die "$q" 7 'x=1'
    ctl export "$q" dead --format csv
    expect_rc 0 "export csv"
    local -a want=(
        'id,status,retry_count,max_retries,created_at,updated_at,retry_after,last_error,payload,history_count'
        ",\"'=cmd|' /C calc'!A0\",\"'=HYPERLINK(\"\"http://evil.example\"\",\"\"click\"\")\""
        ",plain,\"'+1+1\""
        ",\"'-x\",\"'-2\""
        ",\"'@x\",\"'@SUM(A1)\""
        $',"\'\tx","\'\tcmd"'
        $',"\'\rx","\'\rcmd"'
        ',x=1,a-b'
    )
    local -a got
    mapfile -t got <"$TMP/out"
    expect_eq "${#got[@]}" "${#want[@]}" "header and seven rows"
    expect_eq "${got[0]}" "${want[0]}" "header"
    local i
    for ((i = 1; i < ${#want[@]}; i++)); do
        [[ ${got[i]} == "$i,dead,"*"${want[i]},1" ]] ||
            fail "row $i is '${got[i]}', want it to end with '${want[i]},1' (one failure)'"
    done
    # jsonl is data, not a spreadsheet: the payload comes back unchanged.
    ctl export "$q" dead --format jsonl
    expect_rc 0 "export jsonl"
    expect_match "$(head -n 1 "$TMP/out")" '"payload":"=HYPERLINK' "jsonl keeps the payload as is"
}

test_export_jsonl_round_trip() {
    local q=jsonq b
    b=$(base "$q")
    local -a payloads=('{"a":1}' $'multi\nline "quoted" \\ back' 'tab\tand\ttabs' 'ünï ✓' $'ctl\x01\x1f')
    local i
    for i in "${!payloads[@]}"; do
        fc_enqueue "$q" "${payloads[i]}" >/dev/null
    done
    fc_die "$q" 1 $'boom\n"why"'
    ctl export "$q" --format jsonl
    expect_rc 0 "export jsonl"
    local -a lines
    mapfile -t lines <"$TMP/out"
    expect_eq "${#lines[@]}" "${#payloads[@]}" "one line per message"
    # Decode every line with Redis's cjson (not ours) and compare each field
    # with the stored hash; then enqueue the decoded payloads into a second
    # queue and export that: the payloads must come back identical.
    local decode='local o = cjson.decode(ARGV[1]); local v = o[ARGV[2]]
        if v == cjson.null then return "<null>" end; return tostring(v)'
    local line id field want got
    for line in "${lines[@]}"; do
        id=$(rget EVAL "$decode" 0 "$line" id)
        [[ $id =~ ^[0-9]+$ ]] || fail "line without a numeric id: $line"
        for field in status retry_count max_retries payload last_error; do
            got=$(rget EVAL "$decode" 0 "$line" "$field")
            want=$(rget HGET "$b:m:$id" "$field")
            if [ "$field" = last_error ] && [ "$(rget HEXISTS "$b:m:$id" last_error)" = 0 ]; then
                want="<null>"
            fi
            expect_eq "$got" "$want" "jsonl $field of message $id"
        done
        got=$(rget EVAL "$decode" 0 "$line" created_at)
        expect_eq "$got" "$(iso "$(rget HGET "$b:m:$id" created_at)")" "jsonl created_at of $id"
        got=$(rget EVAL "$decode" 0 "$line" payload)
        ctl enqueue jsonq2 "$got"
        expect_rc 0 "re-enqueue of payload $id"
    done
    ctl export jsonq2 --format jsonl
    local -a again
    mapfile -t again <"$TMP/out"
    expect_eq "${#again[@]}" "${#payloads[@]}" "round trip: same count"
    for ((i = 0; i < ${#again[@]}; i++)); do
        got=$(rget EVAL "$decode" 0 "${again[i]}" payload)
        # jsonq was exported pending (2..5) then dead (1); jsonq2 was filled
        # in that order, and its pending messages export in claim order.
        expect_eq "$got" "${payloads[(i + 1) % ${#payloads[@]}]}" "round trip payload $((i + 1))"
    done
}

test_purge_keeps_younger() {
    local q=purgeq b i now old
    b=$(base "$q")
    for i in 1 2 3 4 5; do fc_enqueue "$q" "p$i" >/dev/null; done
    for i in 1 2 3 4; do fc_die "$q" "$i" "err $i"; done
    # Test setup, not a state change path: age letters 1 and 2 by rewriting
    # their death time (the :dead score, which dead_at shows) 40 days into
    # the past, as if they had died then. Nothing in retryd changes a death time.
    now=$(server_now_ms)
    old=$((now - 40 * 86400000))
    for i in 1 2; do
        rcli ZADD "$b:3:dead" "$old" "$i" >/dev/null
    done
    ctl purge "$q" dead --older-than 30d
    expect_rc 0 "purge --older-than 30d"
    expect_eq "$OUT" $'purged 2\n' "purge reports the count"
    expect_eq "$(rget ZCARD "$b:3:dead")" 2 "the younger letters stay dead"
    expect_eq "$(rget EXISTS "$b:m:1" "$b:m:2")" 0 "the old letters are gone"
    expect_eq "$(rget EXISTS "$b:m:3" "$b:m:4" "$b:m:5")" 3 "the others are kept"
    expect_eq "$(rget HGET "$b:m:5" status)" pending "a pending message is never purged"
    expect_eq "$(rget HGET "$b:stats" purged)" 2 "the purged counter"
    ctl stats "$q"
    expect_eq "$(stat_of dead)" 2 "stats after purge"
    ctl purge "$q" dead --older-than 10s
    expect_eq "$OUT" $'purged 0\n' "nothing older than 10 s"
    ctl purge "$q" dead --older-than 0
    expect_eq "$OUT" $'purged 2\n' "--older-than 0 purges every dead letter"
    expect_eq "$(rget ZCARD "$b:3:dead")" 0 "no dead letter left"
    expect_eq "$(rget ZCARD "$b:errors")" 0 "top errors follow the purge"
}

test_replay_error_contains() {
    local q=replayerr b
    b=$(base "$q")
    local -a errs=('timeout connecting' 'bad payload' 'read timeout' 'TIMEOUT upper' 'other')
    local i
    for i in 1 2 3 4 5; do fc_enqueue "$q" "m$i" >/dev/null; done
    for i in 1 2 3 4 5; do fc_die "$q" "$i" "${errs[i - 1]}"; done
    ctl replay "$q" --error-contains timeout
    expect_rc 0 "replay --error-contains"
    expect_eq "$OUT" $'replayed 2\n' "two letters match (case-sensitive)"
    for i in 1 3; do
        expect_eq "$(rget HGET "$b:m:$i" status)" pending "matching letter $i is pending"
        expect_eq "$(rget HGET "$b:m:$i" retry_count)" 0 "letter $i has a fresh budget"
        expect_eq "$(rget HEXISTS "$b:m:$i" last_error)" 0 "letter $i has no last_error"
    done
    for i in 2 4 5; do
        expect_eq "$(rget HGET "$b:m:$i" status)" dead "letter $i is still dead"
        expect_eq "$(rget HGET "$b:m:$i" last_error)" "${errs[i - 1]}" "letter $i keeps its error"
    done
    expect_eq "$(rget ZCARD "$b:3:dead")" 3 "three letters stay dead"
    expect_eq "$(rget LRANGE "$b:3:due" 0 -1 | tr '\n' ' ')" "3 1" "replayed ids are claimed next"
    ctl replay "$q" --error-contains 'no such text'
    expect_eq "$OUT" $'replayed 0\n' "no match, nothing replayed"
}

test_replay_all() {
    local q=replayall b i
    b=$(base "$q")
    for i in 1 2 3 4; do fc_enqueue "$q" "m$i" >/dev/null; done
    for i in 1 2 3; do fc_die "$q" "$i" "e$i"; done
    ctl replay "$q" --all
    expect_rc 0 "replay --all"
    expect_eq "$OUT" $'replayed 3\n' "every dead letter"
    expect_eq "$(rget ZCARD "$b:3:dead")" 0 "none left dead"
    expect_eq "$(rget LLEN "$b:3:due")" 3 "three due"
    expect_eq "$(rget HGET "$b:stats" replayed)" 3 "replayed counter"
    ctl replay "$q" --all
    expect_eq "$OUT" $'replayed 0\n' "again: nothing to replay"
}

test_replay_ids_and_wrong_state() {
    local q=replayids b i
    b=$(base "$q")
    for i in 1 2 3; do fc_enqueue "$q" "m$i" >/dev/null; done
    fc_die "$q" 1 "gone"
    ctl replay "$q" 3
    expect_rc 1 "replay of a pending message"
    expect_eq "$ERR" $'retryctl: message 3 is pending, not dead\n' "the state is named on stderr"
    expect_eq "$OUT" $'replayed 0\n' "nothing replayed"
    expect_eq "$(rget HGET "$b:m:3" status)" pending "message 3 untouched"
    ctl replay "$q" 1 99
    expect_rc 1 "replay of a dead and a missing id"
    expect_eq "$OUT" $'replayed 1\n' "the dead one is replayed"
    expect_match "$ERR" "message 99 not found" "the missing one is named"
    expect_eq "$(rget HGET "$b:m:1" status)" pending "message 1 replayed"
    fc_die "$q" 1 "gone again"
    ctl replay "$q" 1
    expect_rc 0 "replay of one dead letter"
    expect_eq "$OUT" $'replayed 1\n' "replayed 1"
}

test_replay_to_another_queue() {
    local q=redrivesrc t=redrivedst b tb odd
    b=$(base "$q")
    tb=$(base "$t")
    odd=$'tab\there\nline "quoted" \\ back é'
    fc_enqueue "$q" "$odd" >/dev/null
    fc_enqueue "$q" "m2" >/dev/null
    fc_enqueue "$q" "m3" >/dev/null
    fc_die "$q" 1 "e1"
    fc_die "$q" 2 "timeout a"
    fc_die "$q" 3 "e3"
    # A redrive cut after its first step: letter 1 is left redriving.
    rcli FCALL "${FN}redrive_take" 1 "$b" "$t" ids 1 >/dev/null
    expect_eq "$(rget ZCARD "$b:3:redriving")" 1 "letter 1 left redriving"
    ctl show "$q" 1 --field redriving_to
    expect_eq "$OUT" "$t" "show names the target of a redrive in progress"
    ctl replay "$q" 1
    expect_rc 1 "replay of a redriving letter"
    ctl replay "$q" --error-contains timeout --to "$t"
    expect_rc 0 "replay --error-contains --to"
    expect_eq "$OUT" $'redriven 2\n' "the left letter first, then the selected one"
    expect_eq "$(rget LLEN "$tb:3:ready")" 2 "two pending in the target"
    expect_eq "$(rget SISMEMBER "$PREFIX:queues" "$t")" 1 "the target is registered"
    ctl show "$t" 1 --field payload
    expect_eq "$OUT" "$odd" "the payload arrives byte for byte"
    ctl show "$t" 1 --field origin_queue
    expect_eq "$OUT" "$q" "origin queue"
    ctl show "$t" 2 --field origin_id
    expect_eq "$OUT" 2 "origin id"
    ctl replay "$q" --all --to "$q"
    expect_rc 2 "--to the same queue"
    ctl replay "$q" 3 --to "$t"
    expect_rc 0 "replay ID --to"
    expect_eq "$OUT" $'redriven 1\n' "letter 3"
    ctl replay "$q" --all --to "$t"
    expect_eq "$OUT" $'redriven 0\n' "nothing left"
    expect_eq "$(rget ZCARD "$b:3:dead")" 0 "no dead letter left in the source"
    expect_eq "$(rget ZCARD "$b:3:redriving")" 0 "none redriving"
    expect_eq "$(rget LLEN "$tb:3:ready")" 3 "each letter once in the target"
    expect_eq "$(rget HGET "$b:stats" redriven)" 3 "redriven counter"
}

test_kill_and_delete() {
    local q=killq b
    b=$(base "$q")
    fc_enqueue "$q" one >/dev/null
    fc_enqueue "$q" two >/dev/null
    fc_enqueue "$q" three >/dev/null
    ctl kill "$q" 1 --reason "poison message"
    expect_rc 0 "kill a pending message"
    expect_eq "$(rget HGET "$b:m:1" status)" dead "killed message is dead"
    expect_eq "$(rget HGET "$b:m:1" last_error)" "poison message" "the reason is last_error"
    expect_eq "$(rget ZSCORE "$b:3:dead" 1)" "$(rget HGET "$b:m:1" dead_at)" "in the dead set"
    expect_eq "$(rget LRANGE "$b:3:ready" 0 -1 | tr '\n' ' ')" "3 2" "out of the ready list"
    ctl kill "$q" 1
    expect_rc 1 "kill a dead message"
    expect_match "$ERR" "message 1 is dead" "the state is named"
    ctl kill "$q" 42
    expect_rc 1 "kill a missing message"
    fc_claim "$q" 1
    expect_eq "$(rget HGET "$b:m:2" status)" processing "message 2 is leased"
    ctl delete "$q" 2
    expect_rc 1 "delete a leased message"
    expect_match "$ERR" "message 2 is processing" "the state is named"
    ctl kill "$q" 2
    expect_rc 0 "kill a leased message"
    expect_eq "$(rget HGET "$b:m:2" last_error)" "killed by operator" "default reason"
    expect_eq "$(rget ZCARD "$b:3:processing")" 0 "the lease is gone"
    ctl delete "$q" 2
    expect_rc 0 "delete a dead message"
    expect_eq "$OUT" $'deleted 2\n' "delete says so"
    expect_eq "$(rget EXISTS "$b:m:2")" 0 "the hash is gone"
    expect_eq "$(rget ZSCORE "$b:3:dead" 2)" "" "out of the dead set"
    ctl delete "$q" 3
    expect_rc 0 "delete a pending message"
    expect_eq "$(rget LLEN "$b:3:ready")" 0 "out of the ready list"
    ctl delete "$q" 3
    expect_rc 1 "delete it again"
    expect_match "$ERR" "message 3 not found" "missing is named"
    ctl stats "$q"
    expect_eq "$(stat_of dead)" 1 "one dead letter left"
}

# snooze (docs/reference.md "Snooze"): a processing message back to pending
# until now + --delay, retry_count and last_error kept, a history mark,
# counted; the timer hint is forwarded; lease rules as succeed's.
test_snooze() {
    local q=snoozeq b
    b=$(base "$q")
    fc_enqueue "$q" one >/dev/null
    ctl snooze "$q" 1
    expect_rc 1 "snooze a pending message"
    expect_match "$ERR" "message 1 is pending, not processing" "the state is named"
    ctl snooze "$q" 42
    expect_rc 1 "snooze a missing message"
    expect_match "$ERR" "message 42 not found" "missing is named"
    fc_claim "$q" 1
    fc_fail "$q" 1 "first error" 1
    rcli ZADD "$b:3:scheduled" XX 0 1 >/dev/null
    fc_claim "$q" 1
    expect_eq "$(rget HGET "$b:m:1" status)" processing "message 1 is leased again"
    local token
    token=$(rget HGET "$b:m:1" lease_token)
    ctl snooze "$q" 1 --lease-token "$token-not" --delay 60
    expect_rc 1 "snooze under another lease"
    expect_match "$ERR" "not its current lease" "the lease mismatch is named"
    expect_eq "$(rget HGET "$b:m:1" status)" processing "still leased"
    ctl snooze "$q" 1 --lease-token "$token" --delay 1m
    expect_rc 0 "snooze with its lease token"
    local until updated
    until=$(rget HGET "$b:m:1" retry_after)
    updated=$(rget HGET "$b:m:1" updated_at)
    expect_eq "$OUT" "snoozed 1 until $(iso "$until")"$'\n' "snooze says until when"
    expect_eq "$((until - updated))" 60000 "due a minute after the snooze"
    expect_eq "$(rget HGET "$b:m:1" status)" pending "pending again"
    expect_eq "$(rget HGET "$b:m:1" retry_count)" 1 "retry_count kept"
    expect_eq "$(rget HGET "$b:m:1" last_error)" "first error" "last_error kept"
    expect_eq "$(rget ZSCORE "$b:3:scheduled" 1)" "$until" "scheduled until then"
    expect_eq "$(rget ZCARD "$b:3:processing")" 0 "the lease is gone"
    expect_match "$(rget ZSCORE "{$PREFIX:queues}:timers" "$q")" '^[0-9]+$' "the timer hint went to the schedule"
    ctl show "$q" 1
    expect_match "$OUT" $'\n  [0-9T:.-]+Z  attempt 1 failed  error: first error\n  [0-9T:.-]+Z  snoozed until '"$(iso "$until")"$'\n$' \
        "show lists the snooze mark"
    ctl stats "$q"
    expect_eq "$(stat_of snoozed)" 1 "stats counts it"
    expect_eq "$(stat_of failed)" 1 "and no failure"
    rcli ZADD "$b:3:scheduled" XX 0 1 >/dev/null
    fc_claim "$q" 1
    ctl snooze "$q" 1
    expect_rc 0 "snooze without a token or delay"
    expect_eq "$(rget HGET "$b:m:1" retry_after)" "$(rget HGET "$b:m:1" updated_at)" "delay 0: due now"
    fc_claim "$q" 1
    expect_eq "$(rget HGET "$b:m:1" status)" processing "the next claim takes it"
    expect_eq "$(rget HGET "$b:stats" snoozed)" 2 "counted twice"
}

# Settle and claim in one call, driven from redis-cli exactly as the README
# and docs/design.md show it: succeed one, fail one, claim the next.
test_settle_claim_from_redis_cli() {
    local q=settleq b
    b=$(base "$q")
    fc_enqueue "$q" one >/dev/null
    fc_enqueue "$q" two >/dev/null
    fc_enqueue "$q" three >/dev/null
    fc_claim "$q" 2
    local token
    token=$(rget HGET "$b:m:1" lease_token)
    run redis-cli -h 127.0.0.1 -p "$PORT" --raw FCALL "${FN}settle_claim" 1 "$b" 30000 1 2 \
        1 "$token" succeeded '' 1 -1   2 '' failed 'smtp timeout' 1 -1
    expect_rc 0 "redis-cli FCALL settle_claim"
    # The claimed message by position: id, payload, retry_count, max_retries, ...
    expect_eq "$(printf '%s' "$OUT" | head -n 7 | tr '\n' ' ')" "ok succeeded pending 3 three 0 3 " \
        "ok, a status per settlement, then the claimed message"
    expect_eq "$(rget HGET "$b:m:1" status)" succeeded "1 succeeded"
    expect_eq "$(rget HGET "$b:m:2" status)" pending "2 waits for its retry"
    expect_eq "$(rget HGET "$b:m:2" last_error)" "smtp timeout" "with its error"
    expect_eq "$(rget HGET "$b:m:3" status)" processing "3 is claimed"
    expect_eq "$(rget ZCARD "$b:3:processing")" 1 "one lease left"
    run redis-cli -h 127.0.0.1 -p "$PORT" --raw FCALL "${FN}settle_claim" 1 "$b" 30000 1 1 \
        3 '' bogus '' 1 -1
    expect_match "$OUT$ERR" "bad argument outcome" "a bad outcome is refused"
    expect_eq "$(rget HGET "$b:m:3" status)" processing "and nothing was done"
}

test_list_limit() {
    local q=listq i
    for i in 1 2 3 4 5; do fc_enqueue "$q" "payload number $i" >/dev/null; done
    fc_die "$q" 1 $'err\twith tab'
    ctl list "$q" --limit 3
    expect_rc 0 "list --limit 3"
    local -a rows
    mapfile -t rows <<<"${OUT%$'\n'}"
    expect_eq "${#rows[@]}" 4 "a header and three rows"
    expect_match "${rows[0]}" "^ID +STATUS +RETRIES +UPDATED +LAST_ERROR +PAYLOAD" "header"
    expect_match "${rows[1]}" "^2 +pending +0/3 +[0-9T:.-]+Z +payload number 2" "pending first, in claim order"
    expect_match "${rows[3]}" "^4 " "third row"
    expect_match "$ERR" "more messages" "the truncation is noted on stderr"
    ctl list "$q" dead
    mapfile -t rows <<<"${OUT%$'\n'}"
    expect_eq "${#rows[@]}" 2 "one dead letter"
    expect_match "${rows[1]}" '^1 +dead +1/3 .*err\\twith tab +payload number 1$' "dead row, tab shown as \\t"
    ctl list "$q" pending --limit 10
    mapfile -t rows <<<"${OUT%$'\n'}"
    expect_eq "${#rows[@]}" 5 "four pending"
    expect_match "${rows[1]}" "^2 " "pending in claim order"
    expect_eq "$ERR" "" "no note when everything fits"
    ctl list emptyq
    expect_rc 0 "list of an empty queue"
    expect_eq "$(printf '%s' "$OUT" | wc -l)" 1 "only the header"
}

test_paging_beyond_one_call() {
    # More messages than one Lua call returns (1000): retryctl must follow
    # the cursor. Filled through one redis-cli pipe for speed.
    local q=bigq b i
    b=$(base "$q")
    for ((i = 1; i <= 1205; i++)); do
        printf 'FCALL %senqueue 1 "%s" "big %d" 3 0 ""\n' "$FN" "$b" "$i"
    done | rcli >/dev/null
    rcli SADD "$PREFIX:queues" "$q" >/dev/null
    expect_eq "$(rget LLEN "$b:3:ready")" 1205 "setup"
    ctl list "$q" --limit 1100
    expect_rc 0 "list --limit 1100"
    expect_eq "$(printf '%s' "$OUT" | wc -l)" 1101 "1100 rows over two calls"
    ctl export "$q" pending --format jsonl
    expect_rc 0 "export of 1205"
    expect_eq "$(printf '%s' "$OUT" | wc -l)" 1205 "every message exported"
    expect_eq "$(printf '%s' "$OUT" | grep -c '"payload":"big ')" 1205 "each line a message"
    expect_eq "$(printf '%s\n' "$OUT" | sed -n '1p;1205p' | grep -o '"id":[0-9]*' | tr '\n' ' ')" \
        '"id":1 "id":1205 ' "claim order, first and last"
    ctl kill "$q" 7
    for ((i = 1; i <= 1205; i++)); do
        [ "$i" = 7 ] && continue
        printf 'FCALL %skill 2 "%s" "%s:m:%d" %d "bulk"\n' "$FN" "$b" "$b" "$i" "$i"
    done | rcli >/dev/null
    expect_eq "$(rget ZCARD "$b:3:dead")" 1205 "all dead"
    ctl replay "$q" --error-contains bulk
    expect_eq "$OUT" $'replayed 1204\n' "replay by error over two calls"
    expect_eq "$(rget ZCARD "$b:3:dead")" 1 "the killed-by-hand letter stays"
}

# Counts in "retryctl stats" must equal the sizes of the keys after a mixed
# workload driven through FCALL.
test_stats_match_keys() {
    local q=statsq b i
    b=$(base "$q")
    for i in $(seq 1 10); do fc_enqueue "$q" "s$i" 2 >/dev/null; done
    fc_claim "$q" 6                          # 1..6 processing
    fc_fail "$q" 1 "transient" 1              # retry: scheduled
    fc_fail "$q" 2 "transient" 1
    fc_fail "$q" 3 "fatal, no retry" 0        # dead
    fc_succeed "$q" 4
    fc_succeed "$q" 5                         # 6 stays leased
    "$RETRYCTL" kill "$q" 7 --reason "operator" >/dev/null || fail "kill 7"
    ctl stats "$q"
    expect_rc 0 "stats"
    local ready scheduled processing succeeded dead
    ready=$(($(rget LLEN "$b:3:ready") + $(rget LLEN "$b:3:due")))
    scheduled=$(rget ZCARD "$b:3:scheduled")
    processing=$(rget ZCARD "$b:3:processing")
    succeeded=$(rget ZCARD "$b:3:succeeded")
    dead=$(rget ZCARD "$b:3:dead")
    expect_eq "$ready/$scheduled/$processing/$succeeded/$dead" "3/2/1/2/2" "the workload's shape"
    expect_eq "$(stat_of pending)" $((ready + scheduled)) "pending"
    expect_eq "$(stat_of ready)" "$ready" "ready"
    expect_eq "$(stat_of scheduled)" "$scheduled" "scheduled"
    expect_eq "$(stat_of processing)" "$processing" "processing"
    expect_eq "$(stat_of succeeded)" "$succeeded" "succeeded"
    expect_eq "$(stat_of dead)" "$dead" "dead"
    expect_eq "$(stat_of dead_last_24h)" "$dead" "dead_last_24h"
    expect_eq "$(stat_of enqueued)" 10 "total enqueued"
    expect_eq "$(stat_of claimed)" 6 "total claimed"
    expect_eq "$(stat_of failed)" 3 "total failed"
    expect_eq "$(stat_of retried)" 2 "total retried"
    expect_match "$OUT" $'\n +1  fatal, no retry\n' "top error 1"
    expect_match "$OUT" $'\n +1  operator\n' "top error 2"
    ctl queues
    expect_match "$OUT" $'\nstatsq +5 +1 +2 +2 +2\n' "queues agrees (pending processing succeeded dead dead_24h)"
}

# stats --series: the series function's buckets as a table; the counts of
# a small workload, in the current minute (or two, across a boundary).
test_stats_series() {
    local q=seriesq i res sums
    for i in 1 2 3; do fc_enqueue "$q" "s$i" >/dev/null; done
    fc_claim "$q" 2
    fc_succeed "$q" 1
    fc_fail "$q" 2 "fatal" 0
    "$RETRYCTL" replay "$q" 2 >/dev/null || fail "replay 2"
    for res in minute hour; do
        ctl stats "$q" --series "$res"
        expect_rc 0 "stats --series $res"
        expect_match "$OUT" $'\nseries per '"$res"', [0-9]+ buckets from [0-9-]+T[0-9:]+Z \(UTC\)' "$res header"
        expect_match "$OUT" $'\n  TIME +ENQUEUED +SUCCEEDED +FAILED +DEAD +REPLAYED\n' "$res columns"
        sums=$(printf '%s\n' "$OUT" | awk '/^  TIME/ { t = 1; next }
            t && /^  [0-9]/ { rows++; for (i = 2; i <= 6; i++) s[i] += $i }
            END { printf "%d: %d %d %d %d %d", rows, s[2], s[3], s[4], s[5], s[6] }')
        expect_match "$sums" '^[12]: 3 1 1 1 1$' "$res counts (rows: enqueued succeeded failed dead replayed)"
    done
    expect_match "$OUT" $'\nseries per hour, 192 buckets' "8 days of hours"
    ctl stats "$q" --series day
    expect_rc 2 "stats --series day"
    expect_match "$ERR" 'series must be minute or hour' "why"
    ctl stats "$q" --series
    expect_rc 2 "stats --series without a value"
    ctl stats --help
    expect_match "$OUT" '--series minute\|hour' "help names --series"
}

test_queues_lists_every_queue() {
    fc_enqueue qa x >/dev/null
    fc_enqueue qb x >/dev/null
    fc_enqueue qb y >/dev/null
    "$RETRYCTL" enqueue 'q c' z >/dev/null || fail "enqueue 'q c'"
    fc_die qb 1 err
    ctl queues
    expect_rc 0 "queues"
    expect_match "$OUT" "^QUEUE +PENDING +PROCESSING +SUCCEEDED +DEAD +DEAD_24H" "header"
    local names
    names=$(rget SMEMBERS "$PREFIX:queues" | sort)
    local n
    while IFS= read -r n; do
        grep -q "^$n  " <<<"$OUT" || fail "queue '$n' is missing from: $OUT"
    done <<<"$names"
    expect_match "$OUT" $'\nqa +1 +0 +0 +0 +0\n' "qa counts"
    expect_match "$OUT" $'\nqb +1 +0 +0 +1 +1\n' "qb counts"
    expect_match "$OUT" $'\nq c +1 +0 +0 +0 +0\n' "'q c' counts"
    expect_eq "$(($(printf '%s' "$OUT" | wc -l) - 1))" "$(rget SCARD "$PREFIX:queues")" "one row per queue"
    run env RETRYD_PREFIX="$PREFIX-empty" "$RETRYCTL" queues
    expect_rc 0 "queues with none"
    expect_eq "$(printf '%s' "$OUT" | wc -l)" 1 "only the header"
}

test_odd_queue_name() {
    local q='a:b {c} %d e' b
    # The escape of src/keys.c, spelled out: ':' '{' '}' '%' as %XX, the space kept.
    b="$PREFIX:{a%3Ab %7Bc%7D %25d e}"
    ctl enqueue "$q" "odd payload"
    expect_rc 0 "enqueue into an odd name"
    expect_eq "$OUT" $'1\n' "id 1"
    expect_eq "$(rget HGET "$b:m:1" payload)" "odd payload" "the escaped keys"
    expect_eq "$(rget SISMEMBER "$PREFIX:queues" "$q")" 1 "registered with its raw name"
    ctl show "$q" 1
    expect_rc 0 "show"
    expect_match "$OUT" "^queue: +a:b \\{c\\} %d e"$'\n' "show names the queue"
    ctl list "$q"
    expect_match "$OUT" $'\n1 +pending' "list"
    ctl kill "$q" 1 --reason "odd death"
    expect_rc 0 "kill"
    ctl export "$q" dead --format csv
    expect_match "$OUT" ',odd death,odd payload' "export"
    ctl stats "$q"
    expect_eq "$(stat_of dead)" 1 "stats"
    ctl queues
    expect_match "$OUT" $'\na:b \\{c\\} %d e +0 +0 +0 +1 +1\n' "queues"
    ctl replay "$q" --all
    expect_eq "$OUT" $'replayed 1\n' "replay"
    ctl delete "$q" 1
    expect_rc 0 "delete"
    expect_eq "$(rget EXISTS "$b:m:1")" 0 "deleted"
    # A control byte (no HTTP name can hold one, but the escape covers it):
    # a message made through FCALL under "%0A" is found by the raw name.
    local cb="$PREFIX:{nl%0Aname%7F}"
    rcli FCALL "${FN}enqueue" 1 "$cb" "ctl" 3 0 "" >/dev/null
    ctl show $'nl\nname\x7f' 1
    expect_rc 0 "show in a queue named with control bytes"
    expect_match "$OUT" $'\npayload: +ctl\n' "found through the escape"
    # Non-ASCII bytes are kept as they are.
    ctl enqueue 'été' x
    expect_eq "$(rget EXISTS "$PREFIX:{été}:m:1")" 1 "UTF-8 kept in the key"
}

# Waits up to 10 s for a file to hold a line matching an ERE.
wait_for_line() {          # wait_for_line FILE ERE
    local i
    for i in $(seq 1 100); do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# Waits up to 10 s for N clients blocked in XREAD.
wait_for_xread() {
    local i
    for i in $(seq 1 100); do
        [ "$(rcli CLIENT LIST | grep -c 'cmd=xread')" -ge "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

test_dead_letter_alert() {
    local q=alertq other=alert2 out="$TMP/alert.out" ex="$TMP/alert.exec" p1 p2 i rc
    for i in 1 2 3; do fc_enqueue "$q" "a$i" 1 >/dev/null; done
    fc_enqueue "$other" "o1" >/dev/null
    fc_die "$q" 1 "died before the follower"
    local before
    before=$(rcli CLIENT LIST | grep -c 'cmd=xread')
    "$ALERT" "$q" "$other" >"$out" 2>"$out.err" &
    p1=$!
    bg_pids+=("$p1")
    "$ALERT" --from-start --exec "cat >>'$ex'; echo \"\$RETRYD_QUEUE#\$RETRYD_ID#\$RETRYD_ERROR\" >>'$ex'" "$q" >/dev/null 2>"$ex.err" &
    p2=$!
    bg_pids+=("$p2")
    wait_for_xread $((before + 2)) || fail "the followers never blocked in XREAD"

    fc_die "$q" 2 $'timeout\ntalking to smtp'
    "$RETRYCTL" kill "$other" 1 --reason "by hand" >/dev/null || fail "kill"
    "$RETRYCTL" replay "$q" 2 >/dev/null || fail "replay"   # not a death: no line
    local re_time='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z'
    wait_for_line "$out" "queue=$other id=1" || { cat "$out" "$out.err"; fail "no line for the kill"; }
    wait_for_line "$ex" "^$q#2#" || { cat "$ex" "$ex.err"; fail "--exec got nothing"; }

    kill -TERM "$p1"
    wait "$p1"
    rc=$?
    expect_eq "$rc" 0 "SIGTERM ends the follower with 0"
    kill -TERM "$p2"
    wait "$p2"
    expect_eq "$?" 0 "SIGTERM ends the --exec follower with 0"

    local -a lines
    mapfile -t lines <"$out"
    expect_eq "${#lines[@]}" 2 "two deaths while following, the earlier one skipped"
    expect_match "${lines[0]}" "^$re_time queue=$q id=2 retry_count=1 error=timeout\\\\ntalking to smtp\$" "line of a death"
    expect_match "${lines[1]}" "^$re_time queue=$other id=1 retry_count=0 error=by hand\$" "line of a kill"
    expect_eq "$(cat "$out.err")" "" "nothing on stderr"

    # --from-start also reported the letter that died before it started.
    mapfile -t lines <"$ex"
    expect_match "${lines[0]}" "^$re_time queue=$q id=1 retry_count=1 error=died before the follower\$" "--from-start line"
    expect_eq "${lines[1]}" "$q#1#died before the follower" "--exec environment"
    expect_match "${lines[2]}" "queue=$q id=2 " "--exec second line"
    expect_eq "${lines[3]}" "$q#2#timeout" "--exec gets the raw error..."
    expect_eq "${lines[4]}" "talking to smtp" "...newline included"
}

# The queue's policy (docs/reference.md "Queue policy and flow control"): shown with its defaults, changed field by
# field in one call, a bad value refused with exit 2 and nothing changed.
test_policy_show_and_set() {
    local q=policyq b
    b=$(base "$q")
    ctl policy "$q"
    expect_rc 0 "policy of a queue without one"
    expect_eq "$(stat_of max_retries)" 3 "default max_retries"
    expect_eq "$(stat_of paused)" false "not paused"
    expect_match "$OUT" "lease_seconds +\\(daemon's flag\\)" "the daemon's flag applies"
    ctl policy "$q" --set max_in_flight=5 --set backoff.jitter=equal --set dead_ttl=2d \
        --set rate_limit.per_second=2.5 --set rate_limit.burst=4
    expect_rc 0 "set several fields"
    expect_eq "$(stat_of max_in_flight)" 5 "max_in_flight shown"
    expect_eq "$(rget HGET "$b:policy" dead_ttl)" 172800 "dead_ttl stored in seconds"
    expect_eq "$(rget HGET "$b:policy" backoff.jitter)" equal "jitter stored"
    expect_eq "$(rget SISMEMBER "$PREFIX:queues" "$q")" 1 "the queue is registered"
    ctl policy "$q" --set max_retries=4
    expect_rc 0 "set one more"
    expect_eq "$(stat_of max_in_flight)" 5 "the others stay"
    expect_eq "$(stat_of max_retries)" 4 "max_retries set"
    ctl policy "$q" --set max_retries=1001
    expect_rc 2 "max_retries out of range"
    expect_match "$ERR" "max_retries: must be an integer between 1 and 1000 or unlimited" "field and why"
    ctl policy "$q" --set backoff.jitter=some
    expect_rc 2 "bad jitter"
    ctl policy "$q" --set nosuch=1
    expect_rc 2 "unknown field"
    ctl policy "$q" --set max_retries
    expect_rc 2 "no value"
    ctl policy "$q" --set rate_limit=5
    expect_rc 2 "rate_limit takes only null"
    ctl policy "$q" --set rate_limit.burst=
    expect_rc 2 "half a rate limit"
    expect_eq "$(rget HGET "$b:policy" max_retries)" 4 "nothing changed by the refusals"
    ctl policy "$q" --set rate_limit=null --set max_in_flight=
    expect_rc 0 "back to defaults"
    expect_eq "$(rget HEXISTS "$b:policy" rate_limit.per_second)" 0 "no rate limit"
    expect_eq "$(stat_of max_in_flight)" 0 "max_in_flight default"
    ctl enqueue "$q" hello
    expect_rc 0 "enqueue without --max-retries"
    expect_eq "$(rget HGET "$b:m:1" max_retries)" 4 "takes the policy's max_retries"
    ctl enqueue "$q" hello --max-retries 2
    expect_eq "$(rget HGET "$b:m:2" max_retries)" 2 "the given one wins"
    ctl policy
    expect_rc 2 "missing queue"
}

# dead_letter_rules (docs/reference.md "Recovery rules"): set as JSON through --set, shown, refused
# with the rule's field named, applied by the failing call, counted in stats.
test_policy_rules() {
    local q=rulesq b id
    b=$(base "$q")
    ctl policy "$q"
    expect_match "$OUT" "dead_letter_rules +\\[\\] \\(default\\)" "no rules by default"
    ctl policy "$q" --set max_retries=1 \
        --set 'dead_letter_rules=[{"error_contains":"429","action":"retry","delay_seconds":300,"max_times":2},{"error_prefix":"fatal","action":"dead"}]'
    expect_rc 0 "set the rules"
    expect_match "$OUT" 'dead_letter_rules +\[\{.*"error_contains":"429"' "rules shown"
    ctl policy "$q" --set 'dead_letter_rules=[{"error_contains":"x","action":"retry","max_times":0}]'
    expect_rc 2 "a bad rule"
    expect_match "$ERR" "dead_letter_rules\\[0\\]\\.max_times: must be an integer between 1 and 100" "rule field and why"
    ctl policy "$q" --set 'dead_letter_rules={'
    expect_rc 2 "not JSON"
    expect_match "$(rget HGET "$b:policy" dead_letter_rules)" '"delay_seconds":300' "nothing changed by the refusals"
    id=$(fc_enqueue "$q" job 1)
    fc_claim "$q" 1
    fc_fail "$q" "$id" "HTTP 429" 1
    expect_eq "$(rget ZCARD "$b:3:scheduled")" 1 "a 429 is scheduled again by the rule"
    ctl stats "$q"
    expect_eq "$(stat_of rule_0_retried)" 1 "counted for rule 0"
    ctl policy "$q" --set dead_letter_rules=
    expect_rc 0 "rules removed"
    expect_eq "$(rget HEXISTS "$b:policy" dead_letter_rules)" 0 "no rules stored"
    expect_eq "$(rget HGET "$b:policy" max_retries)" 1 "the other fields stay"
}

# alert_url (docs/dead-letters.md §3): set through --set, shown, refused with
# the field named (the library's check), cleared with an empty value.
test_policy_alert_url() {
    local q=alerturlq b
    b=$(base "$q")
    ctl policy "$q"
    expect_match "$OUT" "alert_url +\\(daemon's flag\\)" "no alert_url by default"
    ctl policy "$q" --set alert_url=https://hooks.example/q?a=1
    expect_rc 0 "set the alert_url"
    expect_match "$OUT" 'alert_url +https://hooks\.example/q\?a=1' "alert_url shown"
    expect_eq "$(rget HGET "$b:policy" alert_url)" "https://hooks.example/q?a=1" "alert_url stored"
    ctl policy "$q" --set alert_url=ftp://hooks.example/q
    expect_rc 2 "not http(s)"
    expect_match "$ERR" "alert_url: must be an absolute http:// or https:// URL" "field and why"
    ctl policy "$q" --set 'alert_url=http://h/a b'
    expect_rc 2 "a space"
    expect_eq "$(rget HGET "$b:policy" alert_url)" "https://hooks.example/q?a=1" "nothing changed by the refusals"
    ctl policy "$q" --set alert_url=
    expect_rc 0 "alert_url cleared"
    expect_eq "$(rget HEXISTS "$b:policy" alert_url)" 0 "no alert_url stored"
}

test_policy_dead_letter_queue() {
    local a=dlqa b=dlqb c=dlqc ba
    ba=$(base "$a")
    ctl policy "$a"
    expect_match "$OUT" "dead_letter_queue +none \\(default\\)" "no dead_letter_queue by default"
    ctl policy "$a" --set dead_letter_queue="$b"
    expect_rc 0 "a -> b"
    expect_match "$OUT" "dead_letter_queue +$b" "dead_letter_queue shown"
    expect_eq "$(rget HGET "$ba:policy" dead_letter_queue)" "$b" "dead_letter_queue stored"
    ctl policy "$b" --set dead_letter_queue="$c"
    expect_rc 0 "b -> c"
    ctl policy "$c" --set dead_letter_queue="$a"
    expect_rc 2 "c -> a closes a cycle"
    expect_match "$ERR" "dead_letter_queue: $a leads back to $c" "the cycle is named"
    expect_eq "$(rget HEXISTS "$(base "$c"):policy" dead_letter_queue)" 0 "nothing stored for c"
    ctl policy "$a" --set dead_letter_queue="$a"
    expect_rc 2 "itself"
    ctl policy "$b" --set dead_letter_queue=
    expect_rc 0 "b's cleared"
    ctl policy "$c" --set dead_letter_queue="$a"
    expect_rc 0 "c -> a once b leads nowhere"
    ctl policy "$a" --set message_ttl=1h --set on_expiry=delete
    expect_rc 0 "message_ttl and on_expiry"
    expect_eq "$(rget HGET "$ba:policy" message_ttl)" 3600 "message_ttl stored in seconds"
    expect_match "$OUT" "on_expiry +delete" "on_expiry shown"
    ctl policy "$a" --set on_expiry=later
    expect_rc 2 "a bad on_expiry"
    expect_match "$ERR" "on_expiry: must be dead or delete" "field and why"
}

test_pause_resume() {
    local q=pauseq b
    b=$(base "$q")
    fc_enqueue "$q" one >/dev/null
    ctl pause "$q"
    expect_rc 0 "pause"
    expect_eq "$OUT" $'queue pauseq paused\n' "pause says so"
    fc_claim "$q" 1
    expect_eq "$(rget ZCARD "$b:3:processing")" 0 "a paused queue leases nothing"
    ctl stats "$q"
    expect_eq "$(stat_of paused)" 1 "stats shows the pause"
    expect_eq "$(stat_of held_paused)" 1 "and the claim it held back"
    ctl resume "$q"
    expect_rc 0 "resume"
    expect_eq "$OUT" $'queue pauseq resumed\n' "resume says so"
    fc_claim "$q" 1
    expect_eq "$(rget ZCARD "$b:3:processing")" 1 "leased after the resume"
    ctl pause
    expect_rc 2 "pause without a queue"
    ctl resume a b
    expect_rc 2 "resume with two"
}

# Fairness groups (docs/reference.md "Fairness groups"): enqueue --group
# (checked as the daemon checks it), the groups table paged by its cursor,
# stats' groups count, and the policy's three fields.
test_groups() {
    local q=groupsq b i out page cursor="" seen=""
    b=$(base "$q")
    for i in 3 1 2 5 4; do
        ctl enqueue "$q" "m$i" --group "g$i"
        expect_rc 0 "enqueue to group g$i"
    done
    ctl enqueue "$q" again --group=g2
    expect_rc 0 "a second message of g2"
    ctl enqueue "$q" plain
    expect_rc 0 "an ungrouped message"
    ctl enqueue "$q" wide --group $'t\xc3\xa9nant'
    expect_rc 0 "a group of UTF-8 text"
    expect_eq "$(rget ZCARD "$b:3:groups")" 6 "six groups hold messages"
    ctl groups "$q"
    expect_rc 0 "groups"
    expect_match "$OUT" $'^GROUP +PENDING +PROCESSING\n' "a header"
    expect_match "$OUT" $'\ng2 +2 +0\n' "g2 has two pending"
    expect_match "$OUT" $'\nt\xc3\xa9nant +1 +0\n' "the UTF-8 group as it is"
    expect_match "$OUT" $'next cursor: none\n$' "one page holds them"
    # Two a page: every group once, in name order, then "none".
    for page in 1 2 3 4; do
        if [ -n "$cursor" ]; then ctl groups "$q" --limit 2 --cursor "$cursor"
        else ctl groups "$q" --limit 2; fi
        expect_rc 0 "page $page"
        seen+="$(awk 'NR > 1 && !/^next cursor:/ { print $1 }' <<< "$OUT") "
        cursor=$(sed -n 's/^next cursor: //p' <<< "$OUT")
        [ "$cursor" = none ] && break
        expect_match "$cursor" '^[0-9a-f]+$' "the cursor is hex"
    done
    expect_eq "$(printf '%s' "$seen" | tr '\n' ' ')" $'g1 g2 g3 g4 g5 t\xc3\xa9nant ' "every group once, in name order"
    expect_eq "$page" 3 "three pages of two"
    ctl stats "$q"
    expect_eq "$(stat_of groups)" 6 "stats counts the groups"
    fc_claim "$q" 7
    ctl groups "$q"
    expect_match "$OUT" $'\ng2 +1 +1\n' "a claim moved one of g2 to processing"
    # What the daemon refuses, retryctl refuses (exit 2, nothing enqueued).
    ctl enqueue "$q" x --group ''
    expect_rc 2 "an empty group"
    ctl enqueue "$q" x --group "$(printf 'g%.0s' {1..129})"
    expect_rc 2 "a group of 129 bytes"
    ctl enqueue "$q" x --group "$(printf 'g%.0s' {1..128})"
    expect_rc 0 "a group of 128 bytes"
    ctl enqueue "$q" x --group $'a\tb'
    expect_rc 2 "a control character"
    ctl enqueue "$q" x --group $'a\x80'
    expect_rc 2 "invalid UTF-8"
    ctl groups "$q" --limit 0
    expect_rc 2 "limit 0"
    ctl groups "$q" --limit 1001
    expect_rc 2 "limit 1001"
    ctl groups "$q" --cursor g1
    expect_rc 2 "a cursor that is no hex"
    ctl groups
    expect_rc 2 "groups without a queue"
    # The policy's fields.
    ctl policy "$q"
    expect_match "$OUT" $'\nfifo_groups +false \\(default\\)\n' "fifo_groups default"
    expect_match "$OUT" $'\ngroup_max_in_flight +0 \\(default\\)\n' "group_max_in_flight default"
    ctl policy "$q" --set fifo_groups=true --set group_max_in_flight=2 \
        --set group_rate_limit.per_second=1.5 --set group_rate_limit.burst=3
    expect_rc 0 "set the group fields"
    expect_eq "$(rget HGET "$b:policy" fifo_groups)" true "fifo_groups stored"
    expect_eq "$(stat_of group_rate_limit.burst)" 3 "burst shown"
    ctl policy "$q" --set fifo_groups=yes
    expect_rc 2 "fifo_groups takes true or false"
    ctl policy "$q" --set group_rate_limit=5
    expect_rc 2 "group_rate_limit takes only null"
    ctl policy "$q" --set group_rate_limit=null --set fifo_groups=
    expect_rc 0 "back to defaults"
    expect_eq "$(rget HEXISTS "$b:policy" group_rate_limit.per_second)" 0 "no group rate"
    expect_eq "$(rget HEXISTS "$b:policy" fifo_groups)" 0 "no fifo_groups"
    expect_eq "$(stat_of group_max_in_flight)" 2 "the cap stays"
}

# ===========================================================================
# Runner
# ===========================================================================

all_tests=(
    test_help_and_usage
    test_redis_unreachable_exits_1
    test_load
    test_enqueue_then_show
    test_enqueue_priority_and_ttl
    test_enqueue_file
    test_enqueue_file_bytes_bound
    test_show_missing_exits_1
    test_show_history
    test_export_csv_escapes
    test_export_csv_formulas_neutralised
    test_export_jsonl_round_trip
    test_purge_keeps_younger
    test_replay_error_contains
    test_replay_all
    test_replay_ids_and_wrong_state
    test_replay_to_another_queue
    test_kill_and_delete
    test_snooze
    test_settle_claim_from_redis_cli
    test_list_limit
    test_paging_beyond_one_call
    test_stats_match_keys
    test_stats_series
    test_queues_lists_every_queue
    test_odd_queue_name
    test_dead_letter_alert
    test_policy_show_and_set
    test_policy_rules
    test_policy_alert_url
    test_policy_dead_letter_queue
    test_pause_resume
    test_groups
)
if (($#)); then all_tests=("$@"); fi

[ "$(rcli PING 2>&1)" = PONG ] || suite_setup_failed redis_reachable "no Redis answers on 127.0.0.1:$PORT"
# The library every test uses.
"$RETRYCTL" load >/dev/null || { echo "retryctl_test: retryctl load failed"; exit 1; }

suite_run "${all_tests[@]}"
rc=$?
# Keys of this run are left for inspection only if something failed.
[ "$rc" -eq 0 ] && redis_unlink_keys "$PORT" "$PREFIX*"
exit "$rc"
