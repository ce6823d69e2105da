#!/usr/bin/env bash
# sqs_clients_test.sh - retryd's SQS endpoint (docs/sqs.md) driven by clients
# nobody here wrote, as their users run them, each against a real build/retryd
# with --sqs-listen on the shared redis-server:
#   - Debian's python3-boto3 1.26 (the query protocol): tests/sqs/boto3_flow.py
#     CASE (basic, batches, errors, list, redrive, fifo, tags_purge_delete);
#   - Debian's awscli 2.9 (/usr/bin/aws, the query protocol): the README's
#     walk-through;
#   - npm's @aws-sdk/client-sqs 3.723 (the JSON protocol, MD5 checks on) and
#     sqs-consumer 11.6, pinned in tests/sqs/package-lock.json:
#     tests/sqs/sdk_flow.mjs CASE (basic, consumer);
#   - a Celery 5.2 worker on kombu's sqs:// transport (python3-celery,
#     -kombu, -pycurl): tests/sqs/celery_flow.py;
#   - the same queue read back through the HTTP API;
#   - SigV4 with --sqs-credentials: signed clients pass, a wrong secret and
#     an unknown key get SQS's errors;
#   - a non-loopback --sqs-listen without credentials refuses to start.
#
#   RETRYD_TEST_REDIS_PORT=6397 RETRYD_BIN=$PWD/build/retryd bash tests/sqs_clients_test.sh [TEST...]
#
# Output is cmocka's plain-text format, which scripts/test.sh counts.
set -u

PORT=${RETRYD_TEST_REDIS_PORT:?RETRYD_TEST_REDIS_PORT: the port of a throwaway redis-server}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/.." && pwd)
BIN=${RETRYD_BIN:-$ROOT/build/retryd}
PREFIX="sqstest-$$-$RANDOM"
PY=/usr/bin/python3      # Debian's, with python3-boto3 and python3-celery
AWS=/usr/bin/aws         # Debian's awscli

source "$ROOT/scripts/lib.sh" # stop_pid, free_port, http_ready, suite_run

for need in "$PY" "$AWS"; do
    [ -x "$need" ] || "$ROOT/scripts/deps.sh" test >/dev/null 2>&1 ||
        suite_setup_failed sqs_clients_setup "scripts/deps.sh test failed"
done
"$PY" -c 'import boto3, celery, kombu, pycurl' 2>/dev/null ||
    suite_setup_failed sqs_clients_setup "python3-boto3, python3-celery or python3-pycurl is missing"
# npm ci again when node_modules holds another version than the lockfile's.
sdk_want=$(node -p 'require(process.argv[1]).packages["node_modules/@aws-sdk/client-sqs"].version' \
           "$here/sqs/package-lock.json" 2>/dev/null)
sdk_have=$(node -p 'require(process.argv[1]).version' \
           "$here/sqs/node_modules/@aws-sdk/client-sqs/package.json" 2>/dev/null)
if [ -z "$sdk_have" ] || [ "$sdk_have" != "$sdk_want" ]; then
    npm ci --prefix "$here/sqs" --no-audit --no-fund --loglevel=error >/dev/null 2>&1 ||
        suite_setup_failed sqs_clients_setup "npm ci --prefix tests/sqs failed"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/retryd-sqs-test.XXXXXX") || exit 1
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

# start_retryd NAME [ARG...]: a daemon with the HTTP API and the SQS endpoint
# on free ports; sets API, SQS (http://127.0.0.1:PORT) and SQS_HOSTPORT.
start_retryd() {
    local name=$1 port sport i
    shift
    for i in 1 2 3 4 5; do
        port=$(free_port) || fail "no free port"
        sport=$(free_port) || fail "no free port"
        [ "$port" != "$sport" ] || continue
        "$BIN" --listen "127.0.0.1:$port" --sqs-listen "127.0.0.1:$sport" \
            --redis "redis://127.0.0.1:$PORT" --prefix "$PREFIX-$name" --tick-ms 50 \
            --log-level warn "$@" >>"$TMP/$name.retryd.log" 2>&1 &
        PIDS+=($!)
        if http_ready "$port" 100 "$!"; then
            API="http://127.0.0.1:$port"
            SQS="http://127.0.0.1:$sport"
            SQS_HOSTPORT="127.0.0.1:$sport"
            return 0
        fi
    done
    cat "$TMP/$name.retryd.log"
    fail "retryd did not start"
}

boto3_case() {
    trap stop_all EXIT
    start_retryd "boto-$1"
    "$PY" "$here/sqs/boto3_flow.py" "$SQS" "$1" || { tail -5 "$TMP/boto-$1.retryd.log"; fail "boto3 $1"; }
}

test_boto3_basic() { boto3_case basic; }
test_boto3_batches() { boto3_case batches; }
test_boto3_errors() { boto3_case errors; }
test_boto3_list() { boto3_case list; }
test_boto3_redrive() { boto3_case redrive; }
test_boto3_fifo() { boto3_case fifo; }
test_boto3_tags_purge_delete() { boto3_case tags_purge_delete; }

# The README's walk-through, as a user types it.
test_awscli_walkthrough() {
    trap stop_all EXIT
    start_retryd aws
    export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 \
        AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
    local aws=("$AWS" --endpoint-url "$SQS" --output json sqs) url out handle
    url=$("${aws[@]}" create-queue --queue-name orders | jq -r .QueueUrl) || fail "create-queue"
    [ "$url" = "$SQS/000000000000/orders" ] || fail "queue url $url"
    "${aws[@]}" send-message --queue-url "$url" --message-body '{"order": 42}' \
        --message-attributes 'kind={DataType=String,StringValue=new}' >"$TMP/sent.json" ||
        fail "send-message"
    jq -e '.MessageId and .MD5OfMessageBody == "'"$(printf '%s' '{"order": 42}' | md5sum | cut -d' ' -f1)"'"' \
        "$TMP/sent.json" >/dev/null || fail "send-message answer: $(cat "$TMP/sent.json")"
    out=$("${aws[@]}" receive-message --queue-url "$url" --message-attribute-names All \
          --attribute-names All --wait-time-seconds 2) || fail "receive-message"
    [ "$(jq -r '.Messages[0].Body' <<<"$out")" = '{"order": 42}' ] || fail "body: $out"
    [ "$(jq -r '.Messages[0].MessageAttributes.kind.StringValue' <<<"$out")" = new ] || fail "attribute: $out"
    handle=$(jq -r '.Messages[0].ReceiptHandle' <<<"$out")
    # The same message on the HTTP API: processing, its payload the body.
    curl -s -f "$API/queues/orders/messages?status=processing" | jq -e \
        '.messages | length == 1 and .[0].payload == "{\"order\": 42}"' >/dev/null ||
        fail "the HTTP API does not show the message in flight"
    "${aws[@]}" delete-message --queue-url "$url" --receipt-handle "$handle" || fail "delete-message"
    curl -s -f "$API/queues/orders/stats" | jq -e '.counts.succeeded == 1 and .counts.processing == 0' >/dev/null ||
        fail "stats after the delete: $(curl -s "$API/queues/orders/stats")"
    # And through retryctl: the queue's policy is SQS's.
    out=$("$ROOT/scripts/retryctl" -u "redis://127.0.0.1:$PORT" --prefix "$PREFIX-aws" policy orders) ||
        fail "retryctl policy"
    grep -Eq '^sqs +true' <<<"$out" && grep -Eq '^lease_expiry +redeliver' <<<"$out" &&
        grep -Eq '^max_retries +unlimited' <<<"$out" || fail "retryctl policy: $out"
    "${aws[@]}" get-queue-attributes --queue-url "$url" --attribute-names All |
        jq -e '.Attributes.ApproximateNumberOfMessages == "0"' >/dev/null || fail "get-queue-attributes"
    "${aws[@]}" list-queues | jq -e --arg u "$url" '.QueueUrls | index($u) != null' >/dev/null ||
        fail "list-queues"
    # A queue made on the HTTP API is an SQS queue too.
    curl -s -f -X POST -H 'Content-Type: application/json' --data '{"payload":"from http"}' \
        "$API/queues/made-by-http/messages" >/dev/null || fail "HTTP enqueue"
    "${aws[@]}" get-queue-url --queue-name made-by-http | jq -e '.QueueUrl' >/dev/null ||
        fail "get-queue-url of an HTTP queue"
    out=$("${aws[@]}" receive-message --queue-url "$SQS/000000000000/made-by-http")
    [ "$(jq -r '.Messages[0].Body' <<<"$out")" = "from http" ] || fail "receive of an HTTP message: $out"
    # The endpoint counts its requests.
    curl -s -f "$API/metrics" | grep -q 'retryd_sqs_requests_total{action="SendMessage"} 1' ||
        fail "metrics: $(curl -s "$API/metrics" | grep retryd_sqs)"
}

sdk_case() {
    trap stop_all EXIT
    start_retryd "sdk-$1"
    node "$here/sqs/sdk_flow.mjs" "$SQS" "$1" || { tail -5 "$TMP/sdk-$1.retryd.log"; fail "@aws-sdk $1"; }
}

test_node_sdk_basic() { sdk_case basic; }
test_sqs_consumer_dead_letters() { sdk_case consumer; }
test_node_sdk_message_moves() { sdk_case moves; }

# Two daemons on one prefix: the first dies in the middle of a task, the
# second takes it over once the first's lease runs out.
test_node_sdk_message_move_takeover() {
    trap stop_all EXIT
    start_retryd takeover
    local first_pid=${PIDS[-1]} first=$SQS
    start_retryd takeover
    TAKEOVER_PID=$first_pid TAKEOVER_ENDPOINT=$SQS node "$here/sqs/sdk_flow.mjs" "$first" takeover ||
        { tail -5 "$TMP/takeover.retryd.log"; fail "@aws-sdk takeover"; }
}

test_celery_worker() {
    trap stop_all EXIT
    start_retryd celery
    mkdir -p "$TMP/celery"
    "$PY" "$here/sqs/celery_flow.py" "$SQS_HOSTPORT" "$TMP/celery" ||
        { tail -30 "$TMP/celery/worker.log"; fail "celery"; }
}

# --sqs-credentials: SigV4 by a listed key; the others get SQS's errors.
test_signature_v4() {
    trap stop_all EXIT
    printf '# key secret [queues]\nAKIDRETRYDTEST001 s3cr3t-one\nAKIDRETRYDTEST002 s3cr3t-two only-*\n' \
        >"$TMP/creds"
    start_retryd sig --sqs-credentials "$TMP/creds"
    "$PY" "$here/sqs/boto3_flow.py" "$SQS" basic AKIDRETRYDTEST001 s3cr3t-one || fail "a signed boto3"
    node "$here/sqs/sdk_flow.mjs" "$SQS" basic AKIDRETRYDTEST001 s3cr3t-one || fail "a signed @aws-sdk"
    "$PY" - "$SQS" <<'EOF' || fail "signature refusals"
import sys, boto3, botocore.exceptions
ep = sys.argv[1]
def code(key, secret, **kw):
    c = boto3.client("sqs", endpoint_url=ep, region_name="us-east-1", aws_access_key_id=key,
                     aws_secret_access_key=secret)
    try:
        c.create_queue(QueueName=kw.get("q", "sigq"))
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    return "ok", 200
assert code("AKIDRETRYDTEST001", "wrong") == ("SignatureDoesNotMatch", 403), code("AKIDRETRYDTEST001", "wrong")
assert code("AKIDUNKNOWN", "x") == ("InvalidClientTokenId", 403), code("AKIDUNKNOWN", "x")
assert code("AKIDRETRYDTEST002", "s3cr3t-two", q="other")[0] == "AccessDenied"
assert code("AKIDRETRYDTEST002", "s3cr3t-two", q="only-mine") == ("ok", 200)
EOF
    # Unsigned: refused.
    local status
    status=$(curl -s -o /dev/null -w '%{http_code}' -d 'Action=ListQueues' "$SQS/")
    [ "$status" = 403 ] || fail "an unsigned request got $status"
    grep -q 's3cr3t' "$TMP/sig.retryd.log" && fail "a secret reached the log"
    return 0
}

test_non_loopback_needs_credentials() {
    local port rc=0
    port=$(free_port) || fail "no free port"
    "$BIN" --listen "127.0.0.1:$port" --sqs-listen "0.0.0.0:$(free_port)" \
        --redis "redis://127.0.0.1:$PORT" --prefix "$PREFIX-nl" >"$TMP/nl.log" 2>&1 || rc=$?
    [ "$rc" = 2 ] || fail "exit status $rc, want 2"
    grep -q 'not a loopback address' "$TMP/nl.log" || fail "no reason given: $(cat "$TMP/nl.log")"
}

tests=("$@")
[ "${#tests[@]}" -gt 0 ] || tests=(test_boto3_basic test_boto3_batches test_boto3_errors test_boto3_list
    test_boto3_redrive test_boto3_fifo test_boto3_tags_purge_delete test_awscli_walkthrough
    test_node_sdk_basic test_sqs_consumer_dead_letters test_node_sdk_message_moves test_node_sdk_message_move_takeover
    test_celery_worker
    test_signature_v4
    test_non_loopback_needs_credentials)
suite_run "${tests[@]}"
