#!/usr/bin/env bash
# openapi_check.sh - docs/openapi.json stays true: every response the HTTP
# suites received matches it, status by status.
#
# scripts/test.sh exports RETRYD_TEST_EXCHANGES (a file in its temp dir) to
# every suite; tests/e2e_support.h appends each response a C suite reads to
# it (one JSON line: method, path, status, content type, body), and
# tests/ui/ui_test.mjs each response the console's pages get. This suite
# runs after them (last in the Makefile's list) and validates that file with
# tests/openapi_check.py (Debian's python3-jsonschema, draft 2020-12). The
# other tests feed the checker made-up exchanges and show that it passes
# documented ones and fails on a drift: a field of the wrong type, an unknown
# field, an undocumented status, a wrong problem type, an unlisted
# Content-Type. Runs no server. Output is cmocka's plain-text format, which
# scripts/test.sh counts.
#
#   bash tests/openapi_check.sh [TEST...]
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/.." && pwd)
DOC=$ROOT/docs/openapi.json
source "$ROOT/scripts/lib.sh" # suite_run

# Debian's interpreter, whose python3-jsonschema scripts/deps.sh installs
# (a python3 earlier on PATH may lack it).
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

TMP=$(mktemp -d "${TMPDIR:-/tmp}/retryd-openapi-check.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

fail() {
    printf '    FAIL: %s\n' "$*"
    exit 1
}

check() { "$PY" "$here/openapi_check.py" "$DOC" "$@" 2>&1; }

MSG='{"id":7,"queue":"q","payload":"p","status":"pending","retry_count":0,"max_retries":3,"priority":0,"group":null,"retry_after":null,"last_error":null,"lease_expires_at":null,"created_at":"2026-12-01T10:00:00.000Z","updated_at":"2026-12-01T10:00:00.000Z","expires_at":null,"worker":null,"history":[{"attempt":1,"error":"e","at":"2026-12-01T10:00:00.000Z","lease_expired":true,"worker":"w"},{"replayed_at":"2026-12-01T10:00:00.000Z"}],"history_dropped":0}'

# exchange METHOD PATH STATUS CONTENT_TYPE [BODY]: one line of the log.
exchange() {
    "$PY" -c 'import json, sys
m, p, s, t = sys.argv[1:5]
e = {"suite": "openapi_check", "method": m, "path": p, "status": int(s), "content_type": t}
if len(sys.argv) > 5: e["body"] = sys.argv[5]
print(json.dumps(e))' "$@"
}

# expect_drift NAME WANT LINE: the checker must fail on LINE, saying WANT.
expect_drift() {
    local name=$1 want=$2 out rc=0
    printf '%s\n' "$3" >"$TMP/$name.jsonl"
    out=$(check "$TMP/$name.jsonl") && rc=0 || rc=$?
    printf '%s\n' "$out" | sed 's/^/    /'
    [ "$rc" -eq 1 ] || fail "the checker exited $rc on a drift ($name), expected 1"
    [[ $out == *"$want"* ]] || fail "the checker did not say \"$want\""
}

test_checker_has_jsonschema() {
    "$PY" -c 'import jsonschema, jsonschema.validators as v; v.Draft202012Validator' 2>&1 \
        || fail "$PY has no jsonschema with draft 2020-12 (scripts/deps.sh test installs python3-jsonschema)"
}

test_document_is_valid() {
    local out
    out=$(check) || fail "the document does not pass its own check: $out"
    printf '%s\n' "$out" | sed 's/^/    /'
    "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["openapi"].startswith("3.1"), d["openapi"]' "$DOC" \
        || fail "docs/openapi.json is not an OpenAPI 3.1 document"
}

test_documented_responses_pass() {
    {
        exchange GET /queues/q/messages/7 200 application/json "$MSG"
        exchange POST '/queues/q/claim?wait_seconds=1' 204 ''
        exchange GET /healthz 200 application/json '{"status":"ok"}'
        exchange GET /nope 404 application/problem+json \
            '{"type":"/problems/not-found","title":"Not Found","status":404,"detail":"No route matches this path.","instance":"/nope"}'
        exchange POST /queues/q/messages 422 application/problem+json \
            '{"type":"/problems/validation-failed","title":"Validation Failed","status":422,"detail":"x","instance":"/queues/q/messages","errors":[{"field":"payload","code":"required","message":"payload is required."}]}'
        exchange GET /metrics 200 'text/plain; version=0.0.4; charset=utf-8'
    } >"$TMP/good.jsonl"
    local out
    out=$(check "$TMP/good.jsonl") || fail "documented responses were refused: $out"
    printf '%s\n' "$out" | sed 's/^/    /'
}

test_drift_wrong_field_type_fails() {
    expect_drift type "at /retry_count" \
        "$(exchange GET /queues/q/messages/7 200 application/json "${MSG/\"retry_count\":0/\"retry_count\":\"0\"}")"
}

test_drift_unknown_field_fails() {
    expect_drift field "surprise" \
        "$(exchange GET /queues/q/messages/7 200 application/json "${MSG%\}},\"surprise\":1}")"
}

test_drift_undocumented_status_fails() {
    expect_drift status "status 418 is not documented" \
        "$(exchange GET /queues/q/messages/7 418 application/json "$MSG")"
}

test_drift_wrong_problem_type_fails() {
    expect_drift problem "at /type" \
        "$(exchange GET /queues/q/messages/7 404 application/problem+json \
            '{"type":"/problems/invalid-state","title":"Not Found","status":404,"detail":"x","instance":"/queues/q/messages/7"}')"
}

test_drift_unlisted_field_name_fails() {
    expect_drift fieldname "at /errors/0/field" \
        "$(exchange POST /queues/q/messages 422 application/problem+json \
            '{"type":"/problems/validation-failed","title":"Validation Failed","status":422,"detail":"x","instance":"/queues/q/messages","errors":[{"field":"lease_seconds","code":"invalid","message":"m"}]}')"
}

test_drift_unlisted_content_type_fails() {
    expect_drift ctype "Content-Type 'text/html' is not documented" \
        "$(exchange GET /queues/q/messages/7 200 text/html '<p>hi</p>')"
}

# What the suites before this one received (scripts/test.sh runs it last).
test_recorded_responses_match_the_document() {
    local log=${RETRYD_TEST_EXCHANGES:-} out
    [ -n "$log" ] || fail "RETRYD_TEST_EXCHANGES is not set (run through scripts/test.sh)"
    [ -s "$log" ] || fail "no responses recorded in $log: run this suite after the HTTP suites (make test)"
    out=$(check "$log")
    local rc=$?
    printf '%s\n' "$out" | sed 's/^/    /'
    [ "$rc" -eq 0 ] || fail "recorded responses do not match docs/openapi.json"
}

all_tests=(
    test_checker_has_jsonschema
    test_document_is_valid
    test_documented_responses_pass
    test_drift_wrong_field_type_fails
    test_drift_unknown_field_fails
    test_drift_undocumented_status_fails
    test_drift_wrong_problem_type_fails
    test_drift_unlisted_field_name_fails
    test_drift_unlisted_content_type_fails
    test_recorded_responses_match_the_document
)
if (($#)); then all_tests=("$@"); fi

suite_run "${all_tests[@]}"
