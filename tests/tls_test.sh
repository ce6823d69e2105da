#!/usr/bin/env bash
# tls_test.sh - retryd, retryctl and dead-letter-alert over TLS to Redis
# (docs/security.md "TLS to Redis"), against redis-servers of its own.
#
#   RETRYD_BIN=build/retryd RETRYD_TEST_LUA=$PWD/build/retryd.lua bash tests/tls_test.sh [TEST...]
#
# A throwaway CA and certificates are made with openssl(1) in a temp dir: a
# server certificate for 127.0.0.1 and localhost, a client certificate, an
# expired client certificate, a server certificate for another name, and a
# second CA nobody trusts. Then:
#   - one redis-server with both a plain and a TLS port (clients optional),
#   - one that requires a client certificate (tls-auth-clients yes),
#   - one whose certificate names another host,
#   - a 3-master TLS cluster (tls-cluster yes) with a replica each, for the
#     cluster tests only.
# Every check is against real HTTP answers, Redis's keys and retryd's log;
# waits poll a condition with a deadline, never a fixed sleep. Output is
# cmocka's plain-text format (scripts/test.sh counts it).
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/.." && pwd)
BIN=${RETRYD_BIN:-$ROOT/build/retryd}
LUA=${RETRYD_TEST_LUA:-$ROOT/build/retryd.lua}
RETRYCTL=$ROOT/scripts/retryctl
ALERT=$ROOT/scripts/dead-letter-alert
source "$ROOT/scripts/lib.sh" # stop_pid, free_port, redis_start, suite_run, suite_setup_failed

TMP=$(mktemp -d "${TMPDIR:-/tmp}/tls-test.XXXXXX") || exit 1
CERTS=$TMP/certs
bg_pids=()
cluster_dir=""
# Each test runs in a subshell (suite_run): what it starts is tracked in that
# subshell's bg_pids and cluster_dir and stopped by the subshell's own EXIT
# trap, which track() sets; a subshell does not run the suite's trap.
SUITE_PID=$BASHPID
stop_tracked() {
    stop_pid ${bg_pids[@]+"${bg_pids[@]}"}
    [ -z "$cluster_dir" ] || "$ROOT/scripts/cluster.sh" stop "$cluster_dir" >/dev/null 2>&1
}
cleanup() {
    stop_tracked
    rm -rf "$TMP"
}
trap cleanup EXIT
# track PID: stopped when the test (or, at the top level, the suite) ends.
track() {
    if [ "$BASHPID" != "$SUITE_PID" ] && [ -z "${TEST_TRACKING:-}" ]; then
        bg_pids=() cluster_dir="" TEST_TRACKING=1
        trap stop_tracked EXIT
    fi
    [ -z "${1:-}" ] || bg_pids+=("$1")
}

fail() {
    echo "FAIL: $*"
    exit 1
}

# ===========================================================================
# Certificates
# ===========================================================================

# sign NAME CN SAN [CA] [STARTDATE ENDDATE]: NAME.key and NAME.crt signed by CA (default ca).
sign() {
    local name=$1 cn=$2 san=$3 ca=${4:-ca} start=${5:-} end=${6:-}
    openssl req -newkey rsa:2048 -nodes -keyout "$CERTS/$name.key" -out "$CERTS/$name.csr" \
        -subj "/CN=$cn" 2>/dev/null || return 1
    if [ -n "$start" ]; then
        # openssl x509 cannot set a start date in the past; openssl ca can.
        mkdir -p "$CERTS/db-$name"
        : > "$CERTS/db-$name/index.txt"
        echo 01 > "$CERTS/db-$name/serial"
        cat > "$CERTS/$name.cnf" <<EOF
[ca]
default_ca = test
[test]
database = $CERTS/db-$name/index.txt
serial = $CERTS/db-$name/serial
new_certs_dir = $CERTS/db-$name
policy = anything
default_md = sha256
[anything]
commonName = supplied
EOF
        openssl ca -batch -config "$CERTS/$name.cnf" -cert "$CERTS/$ca.crt" \
            -keyfile "$CERTS/$ca.key" -in "$CERTS/$name.csr" -out "$CERTS/$name.crt" \
            -startdate "$start" -enddate "$end" -notext >/dev/null 2>&1 || return 1
    else
        printf 'subjectAltName=%s\n' "$san" > "$CERTS/$name.ext"
        openssl x509 -req -in "$CERTS/$name.csr" -CA "$CERTS/$ca.crt" -CAkey "$CERTS/$ca.key" \
            -CAcreateserial -out "$CERTS/$name.crt" -days 2 -extfile "$CERTS/$name.ext" \
            2>/dev/null || return 1
    fi
}

make_certs() {
    mkdir -p "$CERTS"
    local ca
    for ca in ca other-ca; do
        openssl req -x509 -newkey rsa:2048 -nodes -keyout "$CERTS/$ca.key" -out "$CERTS/$ca.crt" \
            -days 2 -subj "/CN=retryd test $ca" 2>/dev/null || return 1
    done
    sign server localhost "IP:127.0.0.1,DNS:localhost" &&
        sign client worker "DNS:worker" &&
        sign expired worker "" ca 20200101000000Z 20200102000000Z &&
        sign othername other.example "DNS:other.example" &&
        sign stranger worker "DNS:worker" other-ca
}

# ===========================================================================
# Servers
# ===========================================================================

# tls_redis DIR TLS_PORT PLAIN_PORT CERT AUTH_CLIENTS: a redis-server with a
# TLS port (and a plain one, 0 for none); REDIS_PID set.
tls_redis() {
    local dir=$1 tls_port=$2 plain=$3 cert=$4 auth=$5 i
    mkdir -p "$dir"
    redis-server --port "$plain" --tls-port "$tls_port" --bind 127.0.0.1 --dir "$dir" \
        --tls-cert-file "$CERTS/$cert.crt" --tls-key-file "$CERTS/$cert.key" \
        --tls-ca-cert-file "$CERTS/ca.crt" --tls-auth-clients "$auth" --save '' \
        --appendonly no --daemonize no --logfile "$dir/redis.log" </dev/null >/dev/null 2>&1 &
    REDIS_PID=$!
    track "$REDIS_PID"
    for ((i = 0; i < 100; i++)); do
        if timeout 2 redis-cli -p "$tls_port" --tls --cacert "$CERTS/ca.crt" \
            --cert "$CERTS/client.crt" --key "$CERTS/client.key" ping 2>/dev/null | grep -q PONG
        then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# retryd_start NAME ARGS...: a daemon on a free port, logging to $TMP/NAME.log;
# sets DPORT and DPID.
retryd_start() {
    local name=$1
    shift
    DPORT=$(free_port) || return 1
    "$BIN" --listen "127.0.0.1:$DPORT" --tick-ms 100 --prefix "tlstest-$$" "$@" \
        > "$TMP/$name.log" 2>&1 &
    DPID=$!
    track "$DPID"
    local i
    for ((i = 0; i < 100; i++)); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$DPORT/healthz")" = 200 ] && return 0
        kill -0 "$DPID" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

readyz() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz"; }

# wait_ready PORT [WANT=200] [TRIES=100]: /readyz answers WANT within TRIES x 0.1 s.
wait_ready() {
    local port=$1 want=${2:-200} tries=${3:-100} i
    for ((i = 0; i < tries; i++)); do
        [ "$(readyz "$port")" = "$want" ] && return 0
        sleep 0.1
    done
    return 1
}

# wait_log FILE PATTERN [COUNT=1]: FILE has at least COUNT lines matching PATTERN within 10 s.
wait_log() {
    local file=$1 pattern=$2 count=${3:-1} i
    for ((i = 0; i < 100; i++)); do
        (($(grep -cE -- "$pattern" "$file") >= count)) && return 0
        sleep 0.1
    done
    return 1
}

api() { # api PORT METHOD PATH [BODY]: prints "STATUS BODY"
    local out
    out=$(curl -s -w '\n%{http_code}' -X "$2" "http://127.0.0.1:$1$3" \
        -H 'Content-Type: application/json' ${4:+-d "$4"})
    printf '%s %s' "${out##*$'\n'}" "${out%$'\n'*}"
}

# expect_failure NAME CHECK ARGS...: retryd started with ARGS stays up,
# /readyz 503, and logs one line per attempt saying CHECK (at least two attempts).
expect_failure() {
    local name=$1 check=$2
    shift 2
    retryd_start "$name" --redis-timeout-ms 1000 "$@" || fail "$name: retryd did not start: $(cat "$TMP/$name.log")"
    wait_log "$TMP/$name.log" "$check" 2 || fail "$name: no two lines with '$check' in: $(cat "$TMP/$name.log")"
    kill -0 "$DPID" 2>/dev/null || fail "$name: retryd exited"
    [ "$(readyz "$DPORT")" = 503 ] || fail "$name: /readyz is not 503"
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$DPORT/healthz")" = 200 ] ||
        fail "$name: /healthz is not 200"
    # One line per attempt: every "cannot connect" line names the check,
    # counted once the daemon has stopped (it goes on logging until then).
    stop_pid "$DPID"
    local attempts named lines
    lines=$(grep 'redis: cannot connect to' "$TMP/$name.log")
    attempts=$(grep -c . <<<"$lines")
    named=$(grep -cE -- "$check" <<<"$lines")
    ((attempts == named)) ||
        fail "$name: $attempts attempts logged, $named name '$check': $lines"
    echo "# $name: $(grep -m1 -E -- "$check" "$TMP/$name.log" | sed 's/^[^ ]* //')"
}

# ===========================================================================
# Tests
# ===========================================================================

CA=(--redis-tls-ca "$CERTS/ca.crt")

# enqueue, claim, fail (retry at once), claim again, succeed, over rediss://;
# then a long-poll on A woken by an enqueue through B (the wake-up comes over
# A's TLS pub/sub link).
test_lifecycle_standalone() {
    retryd_start a --redis "rediss://127.0.0.1:$TLS1" "${CA[@]}" || fail "a did not start"
    local a=$DPORT
    wait_ready "$a" || fail "a not ready: $(cat "$TMP/a.log")"
    grep -q "link ready at 127.0.0.1:$TLS1 over TLS" "$TMP/a.log" || fail "no TLS link line"
    local q=life$RANDOM r id token
    r=$(api "$a" POST "/queues/$q/messages" '{"payload":"hello"}')
    [ "${r%% *}" = 201 ] || fail "enqueue: $r"
    id=$(jq .id <<< "${r#* }")
    r=$(api "$a" POST "/queues/$q/claim" '{}')
    [ "${r%% *}" = 200 ] || fail "claim: $r"
    token=$(jq -r .lease_token <<< "${r#* }")
    r=$(api "$a" POST "/queues/$q/messages/$id/fail" "{\"lease_token\":\"$token\",\"error\":\"boom\",\"retry_after_seconds\":0}")
    [ "${r%% *}" = 200 ] || fail "fail: $r"
    [ "$(jq -r .status <<< "${r#* }")" = pending ] || fail "not pending after fail: $r"
    r=$(api "$a" POST "/queues/$q/claim" '{}')
    [ "${r%% *}" = 200 ] || fail "claim again: $r"
    [ "$(jq .retry_count <<< "${r#* }")" = 1 ] || fail "retry_count: $r"
    token=$(jq -r .lease_token <<< "${r#* }")
    r=$(api "$a" POST "/queues/$q/messages/$id/succeed" "{\"lease_token\":\"$token\"}")
    [ "${r%% *}" = 200 ] && [ "$(jq -r .status <<< "${r#* }")" = succeeded ] || fail "succeed: $r"
    # The same message, read over the plain port of the same server.
    [ "$(redis-cli -p "$PLAIN1" exists "tlstest-$$:{$q}:m:$id")" = 1 ] || fail "no record over the plain port"

    retryd_start b --redis "rediss://localhost:$TLS1" "${CA[@]}" || fail "b did not start"
    local b=$DPORT
    wait_ready "$b" || fail "b not ready"
    local out=$TMP/poll.out t0 t1
    t0=$(date +%s%3N)
    curl -s -o "$out" -w '%{http_code}' -X POST "http://127.0.0.1:$a/queues/$q/claim" \
        -H 'Content-Type: application/json' -d '{"wait_seconds":20}' > "$out.code" &
    local poll=$!
    # Enqueue once A's waiter is parked (its subscription confirmed): the
    # notification channel shows a subscriber.
    local i
    for ((i = 0; i < 100; i++)); do
        redis-cli -p "$PLAIN1" pubsub channels '*' | grep -q "$q" && break
        sleep 0.05
    done
    r=$(api "$b" POST "/queues/$q/messages" '{"payload":"wake"}')
    [ "${r%% *}" = 201 ] || fail "enqueue on b: $r"
    wait "$poll"
    t1=$(date +%s%3N)
    [ "$(cat "$out.code")" = 200 ] || fail "long-poll answered $(cat "$out.code")"
    [ "$(jq -r .payload < "$out")" = wake ] || fail "long-poll got $(cat "$out")"
    echo "# long-poll on A answered $((t1 - t0)) ms after it started (enqueue through B, wake-up over TLS pub/sub)"
    ((t1 - t0 < 5000)) || fail "long-poll took $((t1 - t0)) ms"
}

# Mutual TLS: the server requires a client certificate; ours is accepted.
test_mutual_tls() {
    retryd_start m --redis "rediss://127.0.0.1:$TLS2" "${CA[@]}" \
        --redis-tls-cert "$CERTS/client.crt" --redis-tls-key "$CERTS/client.key" || fail "no start"
    wait_ready "$DPORT" || fail "not ready with a client certificate: $(cat "$TMP/m.log")"
    local r
    r=$(api "$DPORT" POST "/queues/mtls/messages" '{"payload":"x"}')
    [ "${r%% *}" = 201 ] || fail "enqueue: $r"
}

test_fails_untrusted_ca() {
    expect_failure untrusted "did not verify: (self-signed certificate in certificate chain|unable to get local issuer certificate)" \
        --redis "rediss://127.0.0.1:$TLS1" --redis-tls-ca "$CERTS/other-ca.crt"
}

test_fails_system_store() {
    # Without --redis-tls-ca the system store is used, which knows no test CA.
    expect_failure system "did not verify: (self-signed certificate in certificate chain|unable to get local issuer certificate)" \
        --redis "rediss://127.0.0.1:$TLS1"
}

test_fails_name_mismatch() {
    expect_failure mismatch "did not verify: hostname mismatch" \
        --redis "rediss://127.0.0.1:$TLS1" "${CA[@]}" --redis-tls-server-name redis.example
}

test_fails_other_name_cert() {
    expect_failure othername "did not verify: IP address mismatch" \
        --redis "rediss://127.0.0.1:$TLS3" "${CA[@]}"
}

test_server_name_matches() {
    # The certificate names localhost: checked against that name, not the IP.
    retryd_start sni --redis "rediss://127.0.0.1:$TLS1" "${CA[@]}" --redis-tls-server-name localhost ||
        fail "no start"
    wait_ready "$DPORT" || fail "not ready: $(cat "$TMP/sni.log")"
}

test_fails_plain_to_tls_port() {
    expect_failure plain-to-tls "is it a TLS port\? use rediss://" --redis "redis://127.0.0.1:$TLS1"
}

test_fails_tls_to_plain_port() {
    expect_failure tls-to-plain "no answer to the TLS handshake within 1000 ms \(is the port plain TCP" --redis "rediss://127.0.0.1:$PLAIN1" "${CA[@]}"
}

test_fails_no_client_cert() {
    expect_failure no-client-cert "certificate required" --redis "rediss://127.0.0.1:$TLS2" "${CA[@]}"
}

test_fails_expired_client_cert() {
    expect_failure expired-client "certificate expired" --redis "rediss://127.0.0.1:$TLS2" "${CA[@]}" \
        --redis-tls-cert "$CERTS/expired.crt" --redis-tls-key "$CERTS/expired.key"
}

test_fails_untrusted_client_cert() {
    expect_failure stranger "unknown ca" --redis "rediss://127.0.0.1:$TLS2" "${CA[@]}" \
        --redis-tls-cert "$CERTS/stranger.crt" --redis-tls-key "$CERTS/stranger.key"
}

test_insecure_warns_once_and_connects() {
    retryd_start insecure --redis "rediss://127.0.0.1:$TLS1" --redis-tls-ca "$CERTS/other-ca.crt" \
        --redis-tls-insecure yes || fail "no start"
    wait_ready "$DPORT" || fail "not ready: $(cat "$TMP/insecure.log")"
    [ "$(grep -c 'NOT verified' "$TMP/insecure.log")" = 1 ] || fail "the warning is not there once"
}

test_startup_refuses_bad_settings() {
    local out
    out=$("$BIN" --redis "rediss://127.0.0.1:$TLS1" --redis-tls-ca "$TMP/none.pem" 2>&1)
    [ $? = 2 ] || fail "a missing CA file did not exit 2"
    grep -q "cannot load the CA file" <<< "$out" || fail "says: $out"
    out=$("$BIN" --redis "redis://127.0.0.1:$TLS1" --redis-tls-ca "$CERTS/ca.crt" 2>&1)
    [ $? = 2 ] || fail "TLS options on redis:// did not exit 2"
    out=$("$BIN" --redis "rediss://127.0.0.1:$TLS1" --redis-tls-cert "$CERTS/client.crt" \
        --redis-tls-key "$CERTS/expired.key" 2>&1)
    [ $? = 2 ] && grep -q "cannot load the client key .*key values mismatch" <<< "$out" ||
        fail "a key of another certificate: $out"
}

# retryctl and dead-letter-alert with rediss:// and the TLS options.
test_retryctl_over_tls() {
    export RETRYD_LUA=$LUA
    local p="tlsctl-$$" out
    local -a tls=(-u "rediss://127.0.0.1:$TLS2" --prefix "$p" --redis-tls-ca "$CERTS/ca.crt"
                  --redis-tls-cert "$CERTS/client.crt" --redis-tls-key "$CERTS/client.key")
    "$RETRYCTL" "${tls[@]}" load > /dev/null || fail "load over TLS"
    out=$("$RETRYCTL" "${tls[@]}" enqueue jobs '{"n":1}') || fail "enqueue over TLS: $out"
    out=$("$RETRYCTL" "${tls[@]}" stats jobs) || fail "stats over TLS"
    grep -q 'pending *1' <<< "$out" || grep -q '"pending": *1' <<< "$out" || fail "stats: $out"
    # Without the client certificate the server refuses: exit 1, nothing done.
    "$RETRYCTL" -u "rediss://127.0.0.1:$TLS2" --prefix "$p" --redis-tls-ca "$CERTS/ca.crt" \
        stats jobs > /dev/null 2>&1 && fail "stats without a client certificate succeeded"
    # TLS options without rediss:// are a usage error.
    "$RETRYCTL" -u "redis://127.0.0.1:$PLAIN1" --redis-tls-ca "$CERTS/ca.crt" stats jobs \
        > /dev/null 2>&1
    [ $? = 2 ] || fail "TLS options with redis:// are not a usage error"
    # The same settings from the environment, with --redis-tls-server-name.
    out=$(RETRYD_REDIS_TLS_CA=$CERTS/ca.crt "$RETRYCTL" -u "rediss://127.0.0.1:$TLS1" --prefix "$p" \
        --redis-tls-server-name localhost load) || fail "load with RETRYD_REDIS_TLS_CA: $out"

    # dead-letter-alert follows the events stream over TLS.
    "$ALERT" "${tls[@]}" jobs > "$TMP/alert.out" 2> "$TMP/alert.err" &
    local alert=$!
    track "$alert"
    local i
    for ((i = 0; i < 100; i++)); do
        # It is following once its first XREAD blocks (a client blocked on the stream).
        [ "$(redis-cli -p "$PLAIN2" info clients 2>/dev/null | grep -c 'blocked_clients:1')" = 1 ] && break
        sleep 0.1
    done
    out=$("$RETRYCTL" "${tls[@]}" kill jobs 1 2>&1) || fail "kill over TLS: $out"
    for ((i = 0; i < 100; i++)); do
        grep -q 'queue=jobs id=1' "$TMP/alert.out" && break
        sleep 0.1
    done
    grep -q 'queue=jobs id=1' "$TMP/alert.out" ||
        fail "dead-letter-alert saw no death: $(cat "$TMP/alert.out" "$TMP/alert.err")"
    stop_pid "$alert"
}

# The cluster: rediss:// seeds, every master link over TLS, a full lifecycle,
# then a failover (CLUSTER FAILOVER on a replica) and the lifecycle again.
cluster_up() {
    [ -n "$cluster_dir" ] && return 0
    track
    cluster_dir=$TMP/cluster
    SEEDS=$(CLUSTER_TLS_DIR=$CERTS "$ROOT/scripts/cluster.sh" start "$cluster_dir" 3 1) ||
        { cluster_dir=""; return 1; }
}

cluster_lifecycle() { # PORT TAG
    local port=$1 n=$2 q r id token i
    for ((i = 0; i < 12; i++)); do # queues spread over the slots, so every master serves some
        q=c$n-$i
        r=$(api "$port" POST "/queues/$q/messages" '{"payload":"c"}')
        [ "${r%% *}" = 201 ] || fail "enqueue $q: $r"
        id=$(jq .id <<< "${r#* }")
        r=$(api "$port" POST "/queues/$q/claim" '{}')
        [ "${r%% *}" = 200 ] || fail "claim $q: $r"
        token=$(jq -r .lease_token <<< "${r#* }")
        r=$(api "$port" POST "/queues/$q/messages/$id/fail" "{\"lease_token\":\"$token\",\"error\":\"e\",\"retry_after_seconds\":0}")
        [ "${r%% *}" = 200 ] || fail "fail $q: $r"
        r=$(api "$port" POST "/queues/$q/claim" '{}')
        [ "${r%% *}" = 200 ] || fail "claim again $q: $r"
        token=$(jq -r .lease_token <<< "${r#* }")
        r=$(api "$port" POST "/queues/$q/messages/$id/succeed" "{\"lease_token\":\"$token\"}")
        [ "${r%% *}" = 200 ] || fail "succeed $q: $r"
    done
}

test_cluster_lifecycle_and_failover() {
    cluster_up || fail "the TLS cluster did not start"
    retryd_start cl --redis "rediss://127.0.0.1:1" --redis-cluster "$SEEDS" "${CA[@]}" || fail "no start"
    local port=$DPORT
    wait_ready "$port" 200 200 || fail "not ready on the TLS cluster: $(cat "$TMP/cl.log")"
    local masters
    masters=$(grep -c "link ready at .* over TLS (library" "$TMP/cl.log")
    ((masters >= 3)) || fail "$masters master links over TLS"
    cluster_lifecycle "$port" 1
    # Fail over: promote the replica of the master owning slot 0.
    local plain replica=""
    read -r -a plain < "$cluster_dir/plain_ports"
    local n role
    for n in "${plain[@]}"; do
        role=$(redis-cli -p "${n##*:}" role | head -1)
        [ "$role" = slave ] && { replica=${n##*:}; break; }
    done
    [ -n "$replica" ] || fail "no replica found"
    redis-cli -p "$replica" cluster failover > /dev/null || fail "CLUSTER FAILOVER"
    local i
    for ((i = 0; i < 100; i++)); do
        [ "$(redis-cli -p "$replica" role | head -1)" = master ] && break
        sleep 0.1
    done
    [ "$(redis-cli -p "$replica" role | head -1)" = master ] || fail "the replica was not promoted"
    # The promoted node is reached through its TLS port (the slot map's).
    cluster_lifecycle "$port" 2
    echo "# TLS cluster: $masters master links over TLS; lifecycle on 12 queues before and after a failover"
}

test_cluster_plain_seeds_refused_by_tls_ports() {
    cluster_up || fail "the TLS cluster did not start"
    # rediss:// given on the seeds alone turns TLS on as well.
    retryd_start cl2 --redis-cluster "rediss://$SEEDS" "${CA[@]}" || fail "no start"
    wait_ready "$DPORT" 200 200 || fail "rediss:// seeds: not ready: $(cat "$TMP/cl2.log")"
    stop_pid "$DPID"
    expect_failure cl-plain "is it a TLS port\? use rediss://" --redis-cluster "$SEEDS"
}

# ===========================================================================

command -v openssl >/dev/null || suite_setup_failed tls_setup "openssl not installed"
[ -x "$BIN" ] || suite_setup_failed tls_setup "$BIN is missing: make"
[ -f "$LUA" ] || suite_setup_failed tls_setup "$LUA is missing: make build/retryd.lua"
make_certs || suite_setup_failed tls_setup "openssl could not make the test certificates"
chmod 644 "$CERTS"/*.key
TLS1=$(free_port) PLAIN1=$(free_port)
tls_redis "$TMP/r1" "$TLS1" "$PLAIN1" server optional ||
    suite_setup_failed tls_setup "redis-server --tls-port did not start: $(cat "$TMP/r1/redis.log")"
TLS2=$(free_port) PLAIN2=$(free_port)
tls_redis "$TMP/r2" "$TLS2" "$PLAIN2" server yes || suite_setup_failed tls_setup "mTLS redis-server did not start"
TLS3=$(free_port)
tls_redis "$TMP/r3" "$TLS3" 0 othername no || suite_setup_failed tls_setup "third redis-server did not start"

if (($#)); then
    suite_run "$@"
else
    suite_run test_lifecycle_standalone test_mutual_tls test_fails_untrusted_ca \
        test_fails_system_store test_fails_name_mismatch test_fails_other_name_cert \
        test_server_name_matches test_fails_plain_to_tls_port test_fails_tls_to_plain_port \
        test_fails_no_client_cert test_fails_expired_client_cert test_fails_untrusted_client_cert \
        test_insecure_warns_once_and_connects test_startup_refuses_bad_settings \
        test_retryctl_over_tls test_cluster_lifecycle_and_failover \
        test_cluster_plain_seeds_refused_by_tls_ports
fi
