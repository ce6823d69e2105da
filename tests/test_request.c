/* test_request.c - unit tests for request.c: body and query validation into
 * request structs, queue-name checks and query-string lookup (docs/reference.md "Validation"). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/policy.h"
#include "retryd/request.h"

#define DEFAULT_LEASE_MS 30000LL
#define MAX_RETRIES_MSG "max_retries must be between 1 and 10."

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

static size_t len_of(const char *s)
{
    return s ? strlen(s) : 0;
}

/* The single error in errs is (field, code). */
static void assert_one_error(const rd_field_errors_t *errs, const char *field, const char *code)
{
    if (errs->count != 1) {
        fail_msg("want 1 error (%s/%s), got %zu (first: %s)", field, code, errs->count,
                 errs->count ? errs->items[0].field : "-");
    }
    assert_string_equal(errs->items[0].field, field);
    assert_string_equal(errs->items[0].code, code);
    assert_non_null(errs->items[0].message);
    assert_true(strlen(errs->items[0].message) > 0);
}

static void assert_error_at(const rd_field_errors_t *errs, size_t i, const char *field,
                            const char *code)
{
    assert_true(i < errs->count);
    assert_string_equal(errs->items[i].field, field);
    assert_string_equal(errs->items[i].code, code);
}

/* Runs enqueue on body and expects RD_REQ_INVALID with exactly one error. */
static void assert_enqueue_invalid(const char *body, const char *field, const char *code,
                                   const char *message)
{
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_enqueue(body, len_of(body), &req, &errs);
    rd_request_free(req.doc);
    if (r != RD_REQ_INVALID) fail_msg("%s: result %d, want INVALID", body, (int)r);
    assert_null(req.doc);
    assert_one_error(&errs, field, code);
    if (message) assert_string_equal(errs.items[0].message, message);
}

static void assert_enqueue_malformed(const char *body, size_t len)
{
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_enqueue(body, len, &req, &errs);
    rd_request_free(req.doc);
    if (r != RD_REQ_MALFORMED) fail_msg("'%.*s': result %d, want MALFORMED", (int)len,
                                        body ? body : "", (int)r);
    assert_null(req.doc);
    assert_int_equal(errs.count, 0);
}

/* {"payload":"x","max_retries":<number>} and a policy with the number in a
 * nested object, in a static buffer each. */
static const char *body_with_number(const char *number)
{
    static char buf[128];
    snprintf(buf, sizeof buf, "{\"payload\":\"x\",\"max_retries\":%s}", number);
    return buf;
}

static const char *policy_with_number(const char *number)
{
    static char buf[128];
    snprintf(buf, sizeof buf, "{\"backoff\":{\"base_seconds\":%s}}", number);
    return buf;
}

/* ---------------------------------------------------------------------------
 * enqueue
 * ------------------------------------------------------------------------- */

static void test_enqueue_valid(void **state)
{
    const char *body = "{\"payload\":\"hello\",\"max_retries\":5,\"delay_seconds\":60}";
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_enqueue(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_int_equal(errs.count, 0);
    assert_non_null(req.doc);
    assert_string_equal(req.payload, "hello");
    assert_int_equal(req.payload_len, 5);
    assert_int_equal(req.max_retries, 5);
    assert_int_equal(req.delay_ms, 60000);
    rd_request_free(req.doc);
}

static void test_enqueue_defaults(void **state)
{
    const char *bodies[] = {
        "{\"payload\":\"x\"}",
        "{\"payload\":\"x\",\"max_retries\":null,\"delay_seconds\":null}",
        "  {\"payload\":\"x\", \"unknown\": [1, 2]}\r\n",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        rd_enqueue_req_t req;
        rd_field_errors_t errs = { .count = 0 };
        assert_int_equal(rd_request_enqueue(bodies[i], strlen(bodies[i]), &req, &errs),
                         RD_REQ_OK);
        assert_string_equal(req.payload, "x");
        assert_int_equal(req.payload_len, 1);
        assert_int_equal(req.max_retries, RD_MAX_RETRIES_DEFAULT);
        assert_int_equal(req.max_retries, 3);
        assert_int_equal(req.delay_ms, -1);   /* none given: the policy's delay_seconds */
        rd_request_free(req.doc);
    }
}

static void test_enqueue_payload_kept_exactly(void **state)
{
    const char *body = "{\"payload\":\"caf\\u00e9 \\\"q\\\" \\\\ {\\\"a\\\":1}\"}";
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_enqueue(body, strlen(body), &req, &errs), RD_REQ_OK);
    const char *want = "caf\xC3\xA9 \"q\" \\ {\"a\":1}";
    assert_string_equal(req.payload, want);
    assert_int_equal(req.payload_len, strlen(want));
    rd_request_free(req.doc);

    body = "{\"payload\":\"\"}";
    assert_int_equal(rd_request_enqueue(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_string_equal(req.payload, "");
    assert_int_equal(req.payload_len, 0);
    rd_request_free(req.doc);

    /* An escaped backslash followed by the text "u0000" is not a NUL. */
    body = "{\"payload\":\"a\\\\u0000b\"}";
    assert_int_equal(rd_request_enqueue(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_string_equal(req.payload, "a\\u0000b");
    assert_int_equal(req.payload_len, 8);
    rd_request_free(req.doc);
    assert_int_equal(errs.count, 0);
}

static void test_enqueue_payload_required(void **state)
{
    assert_enqueue_invalid("{}", "payload", "required", NULL);
    assert_enqueue_invalid("{\"max_retries\":3}", "payload", "required", NULL);
    assert_enqueue_invalid("{\"payload\":null}", "payload", "required", NULL);
    assert_enqueue_invalid("{\"Payload\":\"x\"}", "payload", "required", NULL);
}

static void test_enqueue_payload_not_string(void **state)
{
    assert_enqueue_invalid("{\"payload\":42}", "payload", "invalid", NULL);
    assert_enqueue_invalid("{\"payload\":1.5}", "payload", "invalid", NULL);
    assert_enqueue_invalid("{\"payload\":{\"a\":1}}", "payload", "invalid", NULL);
    assert_enqueue_invalid("{\"payload\":[\"a\"]}", "payload", "invalid", NULL);
    assert_enqueue_invalid("{\"payload\":true}", "payload", "invalid", NULL);
    assert_enqueue_invalid("{\"payload\":false}", "payload", "invalid", NULL);
}

static void test_enqueue_payload_nul_refused(void **state)
{
    assert_enqueue_invalid("{\"payload\":\"a\\u0000b\"}", "payload", "invalid", NULL);
    assert_enqueue_invalid("{\"payload\":\"\\u0000\"}", "payload", "invalid", NULL);
    assert_enqueue_invalid("{\"payload\":\"abc\\u0000\"}", "payload", "invalid", NULL);
}

/* A U+0000 in some other member is not the payload's fault: the payload is
 * still accepted (unknown members are ignored). */
static void test_enqueue_nul_elsewhere_not_blamed_on_payload(void **state)
{
    const char *body = "{\"payload\":\"ok\",\"note\":\"a\\u0000b\"}";
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_enqueue(body, strlen(body), &req, &errs);
    bool payload_ok = r == RD_REQ_OK && req.payload && strcmp(req.payload, "ok") == 0;
    rd_request_free(req.doc);
    if (!payload_ok)
        fail_msg("result %d, error %s: %s", (int)r, errs.count ? errs.items[0].field : "-",
                 errs.count ? errs.items[0].message : "-");
    assert_int_equal(errs.count, 0);
}

static void test_enqueue_max_retries(void **state)
{
    const struct { const char *body; int want; } ok[] = {
        { "{\"payload\":\"p\",\"max_retries\":1}", 1 },
        { "{\"payload\":\"p\",\"max_retries\":10}", 10 },
        { "{\"payload\":\"p\",\"max_retries\":7}", 7 },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        rd_enqueue_req_t req;
        rd_field_errors_t errs = { .count = 0 };
        assert_int_equal(rd_request_enqueue(ok[i].body, strlen(ok[i].body), &req, &errs),
                         RD_REQ_OK);
        assert_int_equal(req.max_retries, ok[i].want);
        rd_request_free(req.doc);
    }
    const char *bad[] = {
        "{\"payload\":\"p\",\"max_retries\":0}",
        "{\"payload\":\"p\",\"max_retries\":11}",
        "{\"payload\":\"p\",\"max_retries\":-1}",
        "{\"payload\":\"p\",\"max_retries\":3.5}",
        "{\"payload\":\"p\",\"max_retries\":\"3\"}",
        "{\"payload\":\"p\",\"max_retries\":true}",
        "{\"payload\":\"p\",\"max_retries\":[3]}",
        "{\"payload\":\"p\",\"max_retries\":{}}",
        "{\"payload\":\"p\",\"max_retries\":1e100}",
        "{\"payload\":\"p\",\"max_retries\":4294967299}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_enqueue_invalid(bad[i], "max_retries", "invalid", MAX_RETRIES_MSG);
}

static void test_enqueue_delay_seconds(void **state)
{
    const struct { const char *body; long long want_ms; } ok[] = {
        { "{\"payload\":\"p\",\"delay_seconds\":0}", 0 },
        { "{\"payload\":\"p\",\"delay_seconds\":1}", 1000 },
        { "{\"payload\":\"p\",\"delay_seconds\":2592000}", 2592000000LL },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        rd_enqueue_req_t req;
        rd_field_errors_t errs = { .count = 0 };
        assert_int_equal(rd_request_enqueue(ok[i].body, strlen(ok[i].body), &req, &errs),
                         RD_REQ_OK);
        assert_int_equal(req.delay_ms, ok[i].want_ms);
        rd_request_free(req.doc);
    }
    const char *bad[] = {
        "{\"payload\":\"p\",\"delay_seconds\":-1}",
        "{\"payload\":\"p\",\"delay_seconds\":2592001}",
        "{\"payload\":\"p\",\"delay_seconds\":1.5}",
        "{\"payload\":\"p\",\"delay_seconds\":\"10\"}",
        "{\"payload\":\"p\",\"delay_seconds\":false}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_enqueue_invalid(bad[i], "delay_seconds", "invalid", NULL);
}

/* priority 0-9 (default 0) and ttl_seconds 1-2592000 (default: none, -1),
 * docs/reference.md "Validation". */
static void test_enqueue_priority_and_ttl(void **state)
{
    const struct { const char *body; int priority; long long ttl_ms; } ok[] = {
        { "{\"payload\":\"p\"}", 0, -1 },
        { "{\"payload\":\"p\",\"priority\":null,\"ttl_seconds\":null}", 0, -1 },
        { "{\"payload\":\"p\",\"priority\":0,\"ttl_seconds\":1}", 0, 1000 },
        { "{\"payload\":\"p\",\"priority\":9,\"ttl_seconds\":2592000}", 9, 2592000000LL },
        { "{\"payload\":\"p\",\"priority\":3.0}", 3, -1 },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        rd_enqueue_req_t req;
        rd_field_errors_t errs = { .count = 0 };
        assert_int_equal(rd_request_enqueue(ok[i].body, strlen(ok[i].body), &req, &errs),
                         RD_REQ_OK);
        assert_int_equal(req.priority, ok[i].priority);
        assert_int_equal(req.ttl_ms, ok[i].ttl_ms);
        rd_request_free(req.doc);
    }
    const char *bad_priority[] = {
        "{\"payload\":\"p\",\"priority\":-1}",
        "{\"payload\":\"p\",\"priority\":10}",
        "{\"payload\":\"p\",\"priority\":\"3\"}",
        "{\"payload\":\"p\",\"priority\":3.5}",
        "{\"payload\":\"p\",\"priority\":true}",
    };
    for (size_t i = 0; i < sizeof bad_priority / sizeof bad_priority[0]; i++)
        assert_enqueue_invalid(bad_priority[i], "priority", "invalid",
                               "priority must be an integer between 0 and 9.");
    const char *bad_ttl[] = {
        "{\"payload\":\"p\",\"ttl_seconds\":0}",
        "{\"payload\":\"p\",\"ttl_seconds\":2592001}",
        "{\"payload\":\"p\",\"ttl_seconds\":-1}",
        "{\"payload\":\"p\",\"ttl_seconds\":1.5}",
        "{\"payload\":\"p\",\"ttl_seconds\":\"60\"}",
    };
    for (size_t i = 0; i < sizeof bad_ttl / sizeof bad_ttl[0]; i++)
        assert_enqueue_invalid(bad_ttl[i], "ttl_seconds", "invalid",
                               "ttl_seconds must be an integer between 1 and 2592000 (30 days).");
}

static void test_enqueue_several_errors(void **state)
{
    const char *body = "{\"payload\":1,\"max_retries\":0,\"delay_seconds\":-1}";
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_enqueue(body, strlen(body), &req, &errs), RD_REQ_INVALID);
    assert_null(req.doc);
    assert_int_equal(errs.count, 3);
    assert_error_at(&errs, 0, "payload", "invalid");
    assert_error_at(&errs, 1, "max_retries", "invalid");
    assert_string_equal(errs.items[1].message, MAX_RETRIES_MSG);
    assert_error_at(&errs, 2, "delay_seconds", "invalid");

    rd_field_errors_t errs2 = { .count = 0 };
    body = "{\"max_retries\":\"x\"}";
    assert_int_equal(rd_request_enqueue(body, strlen(body), &req, &errs2), RD_REQ_INVALID);
    assert_int_equal(errs2.count, 2);
    assert_error_at(&errs2, 0, "payload", "required");
    assert_error_at(&errs2, 1, "max_retries", "invalid");
}

static void test_enqueue_malformed(void **state)
{
    const char *bodies[] = {
        "[]", "[{\"payload\":\"x\"}]", "\"x\"", "3", "null", "true", "{", "}", "{\"payload\":}",
        "{'payload':'x'}", "{\"payload\":\"x\"} x", "{\"payload\":\"x\"}{}",
        "{\"payload\":\"x\"},", "", "   ", "\r\n\t", "payload=x",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        assert_enqueue_malformed(bodies[i], strlen(bodies[i]));
    assert_enqueue_malformed(NULL, 0);
}

/* Parses body with the parser of kind k (0 enqueue, 1 fail, 2 claim with
 * settle, 3 batch replay, 4 policy): its result. */
static rd_req_result_t parse_as(int k, const char *body, size_t len)
{
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = RD_REQ_MALFORMED;
    switch (k) {
    case 0: {
        rd_enqueue_req_t e;
        r = rd_request_enqueue(body, len, &e, &errs);
        if (r == RD_REQ_OK) rd_request_free(e.doc);
        break;
    }
    case 1: {
        rd_settle_req_t s;
        r = rd_request_fail(body, len, &s, &errs);
        if (r == RD_REQ_OK) rd_request_free(s.doc);
        break;
    }
    case 2: {
        rd_claim_req_t c;
        r = rd_request_claim(body, len, NULL, 0, DEFAULT_LEASE_MS, &c, &errs);
        if (r == RD_REQ_OK) rd_request_free(c.doc);
        break;
    }
    case 3: {
        rd_replay_req_t rp;
        r = rd_request_replay(body, len, &rp, &errs);
        if (r == RD_REQ_OK) rd_request_replay_free(&rp);
        break;
    }
    default: {
        rd_policy_t p;
        r = rd_request_policy(body, len, &p, &errs);
        if (r == RD_REQ_OK) rd_policy_free(&p);
        break;
    }
    }
    return r;
}

/* RFC 8259 allows no raw control byte (U+0000-U+001F) in a string; cJSON
 * takes them, and a raw NUL cut the string short there ("head\0tail" was
 * stored as "head", two idempotency keys differing after it were one).
 * Every such byte in every field is refused as invalid JSON, before any
 * field is looked at; the same text with the byte escaped is accepted. */
static void test_raw_control_bytes_in_strings_refused(void **state)
{
    /* Each template has one "@" where a byte goes into a string value. */
    static const struct {
        int kind;
        const char *body;
    } cases[] = {
        { 0, "{\"payload\":\"head@tail\"}" },
        { 0, "{\"payload\":\"x\",\"idempotency_key\":\"order@-42\"}" },
        { 1, "{\"error\":\"disk full@ on /dev/sda1\"}" },
        { 2, "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"disk@full\"}]}" },
        { 3, "{\"all\":true,\"to\":\"other@queue\"}" },
        { 3, "{\"error_contains\":\"smtp@timeout\"}" },
        { 4, "{\"dead_letter_rules\":[{\"error_contains\":\"42@9\",\"action\":\"dead\"}]}" },
        { 4, "{\"alert_url\":\"http://127.0.0.1:9/a@b\"}" },
        { 0, "{\"pay@load\":\"x\",\"payload\":\"x\"}" },   /* in a member name too */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[256];
        const char *at = strchr(cases[i].body, '@');
        size_t head = (size_t)(at - cases[i].body);
        /* Escaped, the text is fine. */
        snprintf(body, sizeof body, "%.*s\\u0001%s", (int)head, cases[i].body, at + 1);
        rd_req_result_t escaped = parse_as(cases[i].kind, body, strlen(body));
        if (escaped == RD_REQ_MALFORMED) fail_msg("%s: the escaped form is malformed", body);
        for (int b = 0; b < 0x20; b++) {
            memcpy(body, cases[i].body, head);
            body[head] = (char)b;
            size_t len = head + 1 + (size_t)snprintf(body + head + 1, sizeof body - head - 1,
                                                     "%s", at + 1);
            rd_req_result_t r = parse_as(cases[i].kind, body, len);
            if (r != RD_REQ_MALFORMED)
                fail_msg("%s with raw byte 0x%02x: result %d, want MALFORMED", cases[i].body, b,
                         (int)r);
        }
    }
    /* Outside strings only space, tab, CR and LF are whitespace. */
    static const char outside[][20] = { "{\x01\"payload\":\"x\"}", "{\"payload\":\"x\"}\x0b",
                                        "\x0c{\"payload\":\"x\"}", "{\"payload\":\x00\"x\"}" };
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++)
        assert_enqueue_malformed(outside[i], 17);
    /* ... nor after a backslash, as if escaped. */
    static const char escaped_raw[] = "{\"payload\":\"a\\\x01b\"}";
    assert_enqueue_malformed(escaped_raw, sizeof escaped_raw - 1);
    static const char ws[] = " \t\r\n{ \t\r\n\"payload\" \t\r\n: \t\r\n\"x\" \t\r\n} \t\r\n";
    assert_int_equal(parse_as(0, ws, strlen(ws)), RD_REQ_OK);
}

/* Numbers are strict JSON: no leading zeros ("010" was read as 10), no
 * "+", no bare "." or exponent. */
static void test_numbers_are_strict_json(void **state)
{
    static const char *const bad[] = { "010", "-01", "00", "-00", "01.5", "1.", ".5", "-.5",
                                       "1.e2", "1e", "1e+", "-", "+1", "0x10", "1.5.3", "--1",
                                       "1ee2", "1E+-2" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *body = body_with_number(bad[i]);
        rd_req_result_t r = parse_as(0, body, strlen(body));
        if (r != RD_REQ_MALFORMED) fail_msg("%s: result %d, want MALFORMED", body, (int)r);
        body = policy_with_number(bad[i]);
        r = parse_as(4, body, strlen(body));
        if (r != RD_REQ_MALFORMED) fail_msg("%s: result %d, want MALFORMED", body, (int)r);
    }
    /* Valid JSON numbers still parse (the field may then refuse the value). */
    static const char *const good[] = { "0", "-0", "3", "10", "0.5", "-0.5", "1e2", "1E+2",
                                        "1.5e-3", "0e0", "100" };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        const char *body = body_with_number(good[i]);
        if (parse_as(0, body, strlen(body)) == RD_REQ_MALFORMED) fail_msg("%s: malformed", body);
        body = policy_with_number(good[i]);
        if (parse_as(4, body, strlen(body)) == RD_REQ_MALFORMED) fail_msg("%s: malformed", body);
    }
    /* Digits inside strings are not numbers. */
    const char *s = "{\"payload\":\"007 -01 010\",\"idempotency_key\":\"00\"}";
    assert_int_equal(parse_as(0, s, strlen(s)), RD_REQ_OK);
}

static void test_enqueue_length_honoured(void **state)
{
    /* Bytes past len are not part of the body. */
    const char *body = "{\"payload\":\"a\"}garbage";
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_enqueue(body, 15, &req, &errs), RD_REQ_OK);
    assert_string_equal(req.payload, "a");
    rd_request_free(req.doc);
    assert_enqueue_malformed(body, 10);
}

/* ---------------------------------------------------------------------------
 * Text: every accepted JSON string is valid UTF-8 (docs/reference.md "Text")
 * ------------------------------------------------------------------------- */

/* Strings that are not valid UTF-8 once JSON escapes are undone: raw bytes
 * (invalid, overlong, surrogates, past U+10FFFF, cut short) and lone
 * surrogate escapes. Each is the inside of a JSON string literal. */
static const char *const bad_text[] = {
    "\xff\xfe", "ok\xff", "\x80", "\xC0\xAF", "\xE0\x80\xAF", "\xF0\x80\x80\xAF",
    "\xED\xA0\x80", "\xED\xBF\xBF", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xE6\x97",
    "end\xC3", "\xC3\x28",
    "\\ud800", "\\udfff", "a\\ud800b", "\\ud800\\u0041", "\\ud800\\ud800", "\\udc00\\ud800",
    "x\\ud83d", "\\\\\\ud800",
};

/* Runs one parse function on body and expects one "invalid" error on field. */
typedef rd_req_result_t (*parse_fn)(const char *body, rd_field_errors_t *errs);

static rd_req_result_t parse_enqueue(const char *body, rd_field_errors_t *errs)
{
    rd_enqueue_req_t req;
    rd_req_result_t r = rd_request_enqueue(body, strlen(body), &req, errs);
    rd_request_free(req.doc);
    return r;
}

static rd_req_result_t parse_fail(const char *body, rd_field_errors_t *errs)
{
    rd_settle_req_t req;
    rd_req_result_t r = rd_request_fail(body, strlen(body), &req, errs);
    rd_request_free(req.doc);
    return r;
}

static rd_req_result_t parse_succeed(const char *body, rd_field_errors_t *errs)
{
    rd_settle_req_t req;
    rd_req_result_t r = rd_request_succeed(body, strlen(body), &req, errs);
    rd_request_free(req.doc);
    return r;
}

static rd_req_result_t parse_extend(const char *body, rd_field_errors_t *errs)
{
    rd_settle_req_t req;
    rd_req_result_t r = rd_request_extend(body, strlen(body), DEFAULT_LEASE_MS, &req, errs);
    rd_request_free(req.doc);
    return r;
}

static rd_req_result_t parse_snooze(const char *body, rd_field_errors_t *errs)
{
    rd_settle_req_t req;
    rd_req_result_t r = rd_request_snooze(body, strlen(body), &req, errs);
    rd_request_free(req.doc);
    return r;
}

static rd_req_result_t parse_kill(const char *body, rd_field_errors_t *errs)
{
    rd_settle_req_t req;
    rd_req_result_t r = rd_request_kill(body, strlen(body), &req, errs);
    rd_request_free(req.doc);
    return r;
}

static rd_req_result_t parse_replay(const char *body, rd_field_errors_t *errs)
{
    rd_replay_req_t req;
    rd_req_result_t r = rd_request_replay(body, strlen(body), &req, errs);
    rd_request_replay_free(&req);
    return r;
}

static rd_req_result_t parse_ack(const char *body, rd_field_errors_t *errs)
{
    rd_ack_req_t req;
    rd_req_result_t r = rd_request_ack(body, strlen(body), &req, errs);
    rd_request_free(req.doc);
    return r;
}

static void test_text_fields_must_be_utf8(void **state)
{
    static const struct {
        parse_fn parse;
        const char *before, *after, *field;
    } cases[] = {
        { parse_enqueue, "{\"payload\":\"", "\"}", "payload" },
        { parse_enqueue, "{\"payload\":\"p\",\"idempotency_key\":\"", "\"}", "idempotency_key" },
        { parse_fail, "{\"error\":\"", "\"}", "error" },
        { parse_fail, "{\"error\":\"e\",\"lease_token\":\"", "\"}", "lease_token" },
        { parse_succeed, "{\"lease_token\":\"", "\"}", "lease_token" },
        { parse_extend, "{\"lease_token\":\"", "\"}", "lease_token" },
        { parse_snooze, "{\"delay_seconds\":1,\"lease_token\":\"", "\"}", "lease_token" },
        { parse_kill, "{\"reason\":\"", "\"}", "reason" },
        { parse_replay, "{\"error_contains\":\"", "\"}", "error_contains" },
        { parse_ack, "{\"messages\":[{\"id\":1,\"lease_token\":\"", "\"}]}",
          "messages[0].lease_token" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t i = 0; i < sizeof bad_text / sizeof bad_text[0]; i++) {
            char body[256];
            snprintf(body, sizeof body, "%s%s%s", cases[c].before, bad_text[i], cases[c].after);
            rd_field_errors_t errs = { .count = 0 };
            rd_req_result_t r = cases[c].parse(body, &errs);
            if (r != RD_REQ_INVALID || errs.count != 1 ||
                strcmp(errs.items[0].field, cases[c].field) != 0)
                fail_msg("%s: result %d, %zu error(s), first on %s; want 422 on %s", body,
                         (int)r, errs.count, errs.count ? errs.items[0].field : "-",
                         cases[c].field);
            assert_string_equal(errs.items[0].code, "invalid");
        }
    }
    assert_enqueue_invalid("{\"payload\":\"\xff\xfe\"}", "payload", "invalid",
                           "payload must be valid UTF-8.");
    assert_enqueue_invalid("{\"payload\":\"\\ud800\"}", "payload", "invalid",
                           "payload must be valid UTF-8.");
}

/* Valid text passes whole: escaped pairs, every length of sequence, the
 * largest code point, an escaped backslash before "ud800" (plain text), and
 * a lone surrogate in a member nobody reads. */
static void test_text_valid_utf8_accepted(void **state)
{
    static const struct { const char *json, *bytes; } ok[] = {
        { "\\ud83d\\ude00", "\xF0\x9F\x98\x80" },
        { "\\udbff\\udfff", "\xF4\x8F\xBF\xBF" },
        { "caf\xC3\xA9 \xE2\x98\x95 \xF0\x9F\x98\x80", "caf\xC3\xA9 \xE2\x98\x95 \xF0\x9F\x98\x80" },
        { "\xF4\x8F\xBF\xBF\xEF\xBF\xBF\xED\x9F\xBF\xEE\x80\x80",
          "\xF4\x8F\xBF\xBF\xEF\xBF\xBF\xED\x9F\xBF\xEE\x80\x80" },
        { "\\\\ud800", "\\ud800" },
        { "\\u00e9\\u20ac", "\xC3\xA9\xE2\x82\xAC" },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"payload\":\"%s\",\"idempotency_key\":\"%s\"}", ok[i].json,
                 ok[i].json);
        rd_enqueue_req_t req;
        rd_field_errors_t errs = { .count = 0 };
        rd_req_result_t r = rd_request_enqueue(body, strlen(body), &req, &errs);
        if (r != RD_REQ_OK)
            fail_msg("%s: result %d (%s)", body, (int)r, errs.count ? errs.items[0].message : "-");
        assert_int_equal(req.payload_len, strlen(ok[i].bytes));
        assert_memory_equal(req.payload, ok[i].bytes, req.payload_len);
        assert_string_equal(req.idempotency_key, ok[i].bytes);
        rd_request_free(req.doc);
    }
    const char *body = "{\"payload\":\"p\",\"note\":\"\\ud800\xff\"}";
    rd_enqueue_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_enqueue(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_string_equal(req.payload, "p");
    rd_request_free(req.doc);
    /* A high surrogate escape at the very end of a body is still not JSON. */
    assert_enqueue_malformed("{\"payload\":\"\\ud800", strlen("{\"payload\":\"\\ud800"));
}

/* ---------------------------------------------------------------------------
 * claim
 * ------------------------------------------------------------------------- */

typedef struct claim_result {
    rd_req_result_t r;
    long long lease_ms, wait_ms;
    int count;
    bool batch;
    rd_field_errors_t errs;
} claim_result_t;

static claim_result_t claim(const char *body, const char *query)
{
    claim_result_t c;
    memset(&c, 0, sizeof c);
    rd_claim_req_t req;
    c.r = rd_request_claim(body, len_of(body), query, len_of(query), DEFAULT_LEASE_MS, &req,
                           &c.errs);
    c.lease_ms = req.lease_ms;
    c.wait_ms = req.wait_ms;
    c.count = req.count;
    c.batch = req.batch;
    if (c.r != RD_REQ_OK) assert_null(req.doc);
    rd_request_free(req.doc);
    return c;
}

static void assert_claim_ok(const char *body, const char *query, long long lease_ms,
                            long long wait_ms, int count, bool batch)
{
    claim_result_t c = claim(body, query);
    if (c.r != RD_REQ_OK)
        fail_msg("body '%s' query '%s': result %d (%s)", body ? body : "(null)",
                 query ? query : "(null)", (int)c.r, c.errs.count ? c.errs.items[0].field : "");
    assert_int_equal(c.errs.count, 0);
    assert_int_equal(c.lease_ms, lease_ms);
    assert_int_equal(c.wait_ms, wait_ms);
    assert_int_equal(c.count, count);
    assert_int_equal(c.batch, batch);
}

static void assert_claim_invalid(const char *body, const char *query, const char *field)
{
    claim_result_t c = claim(body, query);
    if (c.r != RD_REQ_INVALID)
        fail_msg("body '%s' query '%s': result %d, want INVALID", body ? body : "(null)",
                 query ? query : "(null)", (int)c.r);
    assert_one_error(&c.errs, field, "invalid");
}

static void test_claim_defaults(void **state)
{
    assert_claim_ok(NULL, NULL, DEFAULT_LEASE_MS, -1, 1, false);
    assert_claim_ok("", NULL, DEFAULT_LEASE_MS, -1, 1, false);
    assert_claim_ok(" \r\n", "", DEFAULT_LEASE_MS, -1, 1, false);
    assert_claim_ok("{}", NULL, DEFAULT_LEASE_MS, -1, 1, false);
    assert_claim_ok("{\"lease_seconds\":null,\"wait_seconds\":null,\"count\":null}", NULL,
                    DEFAULT_LEASE_MS, -1, 1, false);
    assert_claim_ok(NULL, "other=1", DEFAULT_LEASE_MS, -1, 1, false);

    /* The default lease is the caller's, not a constant. */
    rd_claim_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_claim("", 0, NULL, 0, 12345, &req, &errs), RD_REQ_OK);
    assert_int_equal(req.lease_ms, 12345);
    rd_request_free(req.doc);
}

static void test_claim_body_fields(void **state)
{
    assert_claim_ok("{\"lease_seconds\":60,\"wait_seconds\":5,\"count\":10}", NULL, 60000, 5000,
                    10, true);
    assert_claim_ok("{\"lease_seconds\":1}", NULL, 1000, -1, 1, false);   /* -1: none given */
    assert_claim_ok("{\"lease_seconds\":43200}", NULL, 43200000LL, -1, 1, false);
    assert_claim_ok("{\"wait_seconds\":0}", NULL, DEFAULT_LEASE_MS, 0, 1, false);
    assert_claim_ok("{\"wait_seconds\":30}", NULL, DEFAULT_LEASE_MS, 30000, 1, false);
    assert_claim_ok("{\"count\":100}", NULL, DEFAULT_LEASE_MS, -1, 100, true);
    /* Batch form whenever count was given, even count 1. */
    assert_claim_ok("{\"count\":1}", NULL, DEFAULT_LEASE_MS, -1, 1, true);
}

static void test_claim_query_fields(void **state)
{
    assert_claim_ok(NULL, "lease_seconds=5&count=3", 5000, -1, 3, true);
    assert_claim_ok("", "wait_seconds=30", DEFAULT_LEASE_MS, 30000, 1, false);
    assert_claim_ok("{}", "count=1", DEFAULT_LEASE_MS, -1, 1, true);
    assert_claim_ok(NULL, "count=%31%30", DEFAULT_LEASE_MS, -1, 10, true);
    assert_claim_ok(NULL, "a=b&lease_seconds=43200&x", 43200000LL, -1, 1, false);
}

static void test_claim_body_wins_over_query(void **state)
{
    assert_claim_ok("{\"lease_seconds\":7}", "lease_seconds=5", 7000, -1, 1, false);
    assert_claim_ok("{\"count\":2}", "count=9", DEFAULT_LEASE_MS, -1, 2, true);
    assert_claim_ok("{\"wait_seconds\":1}", "wait_seconds=2&count=4", DEFAULT_LEASE_MS, 1000,
                    4, true);
    /* A null in the body leaves the query's value. */
    assert_claim_ok("{\"lease_seconds\":null}", "lease_seconds=5", 5000, -1, 1, false);
    /* A bad body value is reported even when the query has a good one. */
    assert_claim_invalid("{\"lease_seconds\":0}", "lease_seconds=5", "lease_seconds");
    /* A good body value hides a bad query value. */
    assert_claim_ok("{\"count\":5}", "count=1000", DEFAULT_LEASE_MS, -1, 5, true);
}

static void test_claim_out_of_range(void **state)
{
    assert_claim_invalid("{\"lease_seconds\":0}", NULL, "lease_seconds");
    assert_claim_invalid("{\"lease_seconds\":43201}", NULL, "lease_seconds");
    assert_claim_invalid("{\"lease_seconds\":-5}", NULL, "lease_seconds");
    assert_claim_invalid("{\"lease_seconds\":\"5\"}", NULL, "lease_seconds");
    assert_claim_invalid("{\"lease_seconds\":1.5}", NULL, "lease_seconds");
    assert_claim_invalid("{\"wait_seconds\":31}", NULL, "wait_seconds");
    assert_claim_invalid("{\"wait_seconds\":-1}", NULL, "wait_seconds");
    assert_claim_invalid("{\"count\":0}", NULL, "count");
    assert_claim_invalid("{\"count\":101}", NULL, "count");
    assert_claim_invalid("{\"count\":true}", NULL, "count");

    assert_claim_invalid(NULL, "lease_seconds=0", "lease_seconds");
    assert_claim_invalid(NULL, "lease_seconds=43201", "lease_seconds");
    assert_claim_invalid(NULL, "wait_seconds=31", "wait_seconds");
    assert_claim_invalid(NULL, "wait_seconds=-1", "wait_seconds");
    assert_claim_invalid(NULL, "count=0", "count");
    assert_claim_invalid(NULL, "count=101", "count");
    assert_claim_invalid(NULL, "count=", "count");
    assert_claim_invalid(NULL, "count", "count");
    assert_claim_invalid(NULL, "count=abc", "count");
    assert_claim_invalid(NULL, "count=3x", "count");
    assert_claim_invalid(NULL, "count=1.5", "count");
    assert_claim_invalid(NULL, "count=%G1", "count");
    assert_claim_invalid(NULL, "count=99999999999999999999999999999999999", "count");
}

static void test_claim_several_errors(void **state)
{
    claim_result_t c = claim("{\"lease_seconds\":0,\"wait_seconds\":31}", "count=0");
    assert_int_equal(c.r, RD_REQ_INVALID);
    assert_int_equal(c.errs.count, 3);
    assert_error_at(&c.errs, 0, "lease_seconds", "invalid");
    assert_error_at(&c.errs, 1, "wait_seconds", "invalid");
    assert_error_at(&c.errs, 2, "count", "invalid");
}

static void test_claim_malformed(void **state)
{
    const char *bodies[] = { "[]", "\"x\"", "3", "{", "{} x", "null" };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        claim_result_t c = claim(bodies[i], "count=2");
        if (c.r != RD_REQ_MALFORMED) fail_msg("%s: result %d", bodies[i], (int)c.r);
        assert_int_equal(c.errs.count, 0);
    }
}

static void test_claim_settle(void **state)
{
    const char *body =
        "{\"count\":2,\"settle\":[{\"id\":7,\"lease_token\":\"1a.2\",\"outcome\":\"succeeded\"},"
        "{\"id\":8,\"outcome\":\"failed\",\"error\":\"caf\\u00e9 down\",\"retryable\":false,"
        "\"retry_after_seconds\":5},{\"id\":9,\"outcome\":\"failed\",\"error\":\"\"},"
        "{\"id\":10,\"outcome\":\"succeeded\",\"error\":3,\"lease_token\":null}]}";
    rd_claim_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_claim(body, strlen(body), NULL, 0, DEFAULT_LEASE_MS, &req, &errs),
                     RD_REQ_OK);
    assert_int_equal(req.count, 2);
    assert_int_equal(req.nsettle, 4);
    assert_int_equal(req.settle[0].id, 7);
    assert_string_equal(req.settle[0].lease_token, "1a.2");
    assert_false(req.settle[0].failed);
    assert_int_equal(req.settle[1].id, 8);
    assert_null(req.settle[1].lease_token);
    assert_true(req.settle[1].failed);
    assert_string_equal(req.settle[1].error, "caf\xC3\xA9 down");
    assert_false(req.settle[1].retryable);
    assert_int_equal(req.settle[1].retry_after_ms, 5000);
    /* Defaults of a failure: retryable, the backoff table; "" is an error text. */
    assert_true(req.settle[2].failed);
    assert_string_equal(req.settle[2].error, "");
    assert_true(req.settle[2].retryable);
    assert_int_equal(req.settle[2].retry_after_ms, -1);
    /* A success ignores the failure's fields, as the succeed route does. */
    assert_false(req.settle[3].failed);
    assert_null(req.settle[3].lease_token);
    rd_request_free(req.doc);

    /* A snooze (docs/reference.md "Snooze") takes delay_seconds, required. */
    body = "{\"settle\":[{\"id\":5,\"outcome\":\"snoozed\",\"delay_seconds\":30,"
           "\"lease_token\":\"1a.3\"},{\"id\":6,\"outcome\":\"snoozed\",\"delay_seconds\":0}]}";
    assert_int_equal(rd_request_claim(body, strlen(body), NULL, 0, DEFAULT_LEASE_MS, &req, &errs),
                     RD_REQ_OK);
    assert_int_equal(req.nsettle, 2);
    assert_true(req.settle[0].snoozed);
    assert_false(req.settle[0].failed);
    assert_int_equal(req.settle[0].delay_ms, 30000);
    assert_string_equal(req.settle[0].lease_token, "1a.3");
    assert_true(req.settle[1].snoozed);
    assert_int_equal(req.settle[1].delay_ms, 0);
    rd_request_free(req.doc);
    assert_claim_invalid("{\"settle\":[{\"id\":1,\"outcome\":\"snoozed\",\"delay_seconds\":-1}]}",
                         NULL, "settle[0].delay_seconds");
    assert_claim_invalid("{\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"},{\"id\":2,"
                         "\"outcome\":\"snoozed\",\"delay_seconds\":2592001}]}",
                         NULL, "settle[1].delay_seconds");
    assert_claim_invalid("{\"settle\":[{\"id\":1,\"outcome\":\"snooze\"}]}", NULL,
                         "settle[0].outcome");
    {
        claim_result_t c = claim("{\"settle\":[{\"id\":1,\"outcome\":\"snoozed\"}]}", NULL);
        assert_int_equal(c.r, RD_REQ_INVALID);
        assert_one_error(&c.errs, "settle[0].delay_seconds", "required");
    }

    /* Absent or null: a plain claim. */
    assert_int_equal(rd_request_claim("{\"settle\":null}", 15, NULL, 0, DEFAULT_LEASE_MS, &req,
                                      &errs), RD_REQ_OK);
    assert_int_equal(req.nsettle, 0);
    rd_request_free(req.doc);
    assert_int_equal(rd_request_claim("", 0, NULL, 0, DEFAULT_LEASE_MS, &req, &errs), RD_REQ_OK);
    assert_int_equal(req.nsettle, 0);

    /* Errors name the item and the field; an error with U+0000 is refused. */
    assert_claim_invalid("{\"settle\":[]}", NULL, "settle");
    assert_claim_invalid("{\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"},{\"id\":2,"
                         "\"outcome\":\"failed\",\"error\":\"a\\u0000b\"}]}", NULL,
                         "settle[1].error");
    assert_claim_invalid("{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"\\udc00\"}]}",
                         NULL, "settle[0].error");
    claim_result_t c = claim("{\"settle\":[{\"id\":1}]}", NULL);
    assert_int_equal(c.r, RD_REQ_INVALID);
    assert_one_error(&c.errs, "settle[0].outcome", "required");
    /* Many bad items: at most RD_MAX_FIELD_ERRORS errors, each its own name. */
    char big[4096] = "{\"settle\":[";
    for (int i = 0; i < 20; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s{\"id\":0,\"outcome\":\"x\"}",
                 i ? "," : "");
    strcat(big, "]}");
    c = claim(big, NULL);
    assert_int_equal(c.r, RD_REQ_INVALID);
    assert_int_equal(c.errs.count, RD_MAX_FIELD_ERRORS);
    assert_string_equal(c.errs.items[0].field, "settle[0].id");
    assert_string_equal(c.errs.items[1].field, "settle[0].outcome");
    assert_string_equal(c.errs.items[7].field, "settle[3].outcome");
}

/* ---------------------------------------------------------------------------
 * succeed, fail, extend, empty
 * ------------------------------------------------------------------------- */

static void test_succeed(void **state)
{
    rd_settle_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_succeed("", 0, &req, &errs), RD_REQ_OK);
    assert_null(req.lease_token);
    rd_request_free(req.doc);
    assert_int_equal(rd_request_succeed(NULL, 0, &req, &errs), RD_REQ_OK);
    assert_null(req.lease_token);
    rd_request_free(req.doc);

    const char *body = "{}";
    assert_int_equal(rd_request_succeed(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_null(req.lease_token);
    rd_request_free(req.doc);

    body = "{\"lease_token\":null}";
    assert_int_equal(rd_request_succeed(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_null(req.lease_token);
    rd_request_free(req.doc);

    body = "{\"lease_token\":\"tok-123\"}";
    assert_int_equal(rd_request_succeed(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_string_equal(req.lease_token, "tok-123");
    rd_request_free(req.doc);
    assert_int_equal(errs.count, 0);
}

static void test_succeed_bad_token(void **state)
{
    const char *bodies[] = {
        "{\"lease_token\":5}", "{\"lease_token\":true}", "{\"lease_token\":{}}",
        "{\"lease_token\":[\"a\"]}",
        /* "" would mean "any lease" to the functions: never accepted from a client. */
        "{\"lease_token\":\"\"}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        rd_settle_req_t req;
        rd_field_errors_t errs = { .count = 0 };
        rd_req_result_t r = rd_request_succeed(bodies[i], strlen(bodies[i]), &req, &errs);
        rd_request_free(req.doc);
        if (r != RD_REQ_INVALID) fail_msg("%s: result %d", bodies[i], (int)r);
        assert_null(req.doc);
        assert_one_error(&errs, "lease_token", "invalid");
    }
    rd_settle_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_succeed("[]", 2, &req, &errs), RD_REQ_MALFORMED);
    assert_null(req.doc);
}

static void test_fail_valid(void **state)
{
    rd_settle_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    const char *body = "{\"error\":\"boom\"}";
    assert_int_equal(rd_request_fail(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_string_equal(req.error, "boom");
    assert_true(req.retryable);
    assert_int_equal(req.retry_after_ms, -1);
    assert_null(req.lease_token);
    rd_request_free(req.doc);

    body = "{\"error\":\"timeout \\\"x\\\"\",\"lease_token\":\"t1\",\"retryable\":false,"
           "\"retry_after_seconds\":0}";
    assert_int_equal(rd_request_fail(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_string_equal(req.error, "timeout \"x\"");
    assert_string_equal(req.lease_token, "t1");
    assert_false(req.retryable);
    assert_int_equal(req.retry_after_ms, 0);
    rd_request_free(req.doc);

    body = "{\"error\":\"e\",\"retryable\":true,\"retry_after_seconds\":2592000}";
    assert_int_equal(rd_request_fail(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_true(req.retryable);
    assert_int_equal(req.retry_after_ms, 2592000000LL);
    rd_request_free(req.doc);

    body = "{\"error\":\"e\",\"retryable\":null,\"retry_after_seconds\":null}";
    assert_int_equal(rd_request_fail(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_true(req.retryable);
    assert_int_equal(req.retry_after_ms, -1);
    rd_request_free(req.doc);
    assert_int_equal(errs.count, 0);
}

static void assert_fail_invalid(const char *body, const char *field, const char *code)
{
    rd_settle_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    rd_req_result_t r = rd_request_fail(body, strlen(body), &req, &errs);
    rd_request_free(req.doc);
    if (r != RD_REQ_INVALID) fail_msg("%s: result %d, want INVALID", body, (int)r);
    assert_null(req.doc);
    assert_one_error(&errs, field, code);
}

static void test_fail_invalid(void **state)
{
    assert_fail_invalid("{}", "error", "required");
    assert_fail_invalid("{\"error\":null}", "error", "required");
    assert_fail_invalid("{\"lease_token\":\"t\"}", "error", "required");
    assert_fail_invalid("{\"error\":5}", "error", "invalid");
    assert_fail_invalid("{\"error\":false}", "error", "invalid");
    assert_fail_invalid("{\"error\":{\"a\":1}}", "error", "invalid");
    assert_fail_invalid("{\"error\":\"a\\u0000b\"}", "error", "invalid");
    assert_fail_invalid("{\"error\":\"e\",\"retryable\":\"false\"}", "retryable", "invalid");
    assert_fail_invalid("{\"error\":\"e\",\"retryable\":0}", "retryable", "invalid");
    assert_fail_invalid("{\"error\":\"e\",\"retry_after_seconds\":-1}", "retry_after_seconds",
                        "invalid");
    assert_fail_invalid("{\"error\":\"e\",\"retry_after_seconds\":2592001}",
                        "retry_after_seconds", "invalid");
    assert_fail_invalid("{\"error\":\"e\",\"retry_after_seconds\":0.5}", "retry_after_seconds",
                        "invalid");
    assert_fail_invalid("{\"error\":\"e\",\"lease_token\":1}", "lease_token", "invalid");
}

static void test_fail_several_errors_and_malformed(void **state)
{
    const char *body = "{\"lease_token\":7,\"error\":1,\"retryable\":\"x\","
                       "\"retry_after_seconds\":-1}";
    rd_settle_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_fail(body, strlen(body), &req, &errs), RD_REQ_INVALID);
    assert_null(req.doc);
    assert_int_equal(errs.count, 4);
    assert_error_at(&errs, 0, "lease_token", "invalid");
    assert_error_at(&errs, 1, "error", "invalid");
    assert_error_at(&errs, 2, "retryable", "invalid");
    assert_error_at(&errs, 3, "retry_after_seconds", "invalid");

    rd_field_errors_t none = { .count = 0 };
    assert_int_equal(rd_request_fail("[]", 2, &req, &none), RD_REQ_MALFORMED);
    assert_int_equal(rd_request_fail("{", 1, &req, &none), RD_REQ_MALFORMED);
    assert_int_equal(rd_request_fail("", 0, &req, &none), RD_REQ_MALFORMED);
    assert_int_equal(none.count, 0);
}

static void test_extend(void **state)
{
    rd_settle_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_extend("", 0, 45000, &req, &errs), RD_REQ_OK);
    assert_int_equal(req.lease_ms, 45000);
    assert_null(req.lease_token);
    rd_request_free(req.doc);

    const char *body = "{\"lease_seconds\":120,\"lease_token\":\"abc\"}";
    assert_int_equal(rd_request_extend(body, strlen(body), 45000, &req, &errs), RD_REQ_OK);
    assert_int_equal(req.lease_ms, 120000);
    assert_string_equal(req.lease_token, "abc");
    rd_request_free(req.doc);

    body = "{\"lease_seconds\":43200}";
    assert_int_equal(rd_request_extend(body, strlen(body), 45000, &req, &errs), RD_REQ_OK);
    assert_int_equal(req.lease_ms, 43200000LL);
    rd_request_free(req.doc);
    assert_int_equal(errs.count, 0);

    const char *bad[] = { "{\"lease_seconds\":0}", "{\"lease_seconds\":43201}",
                          "{\"lease_seconds\":\"5\"}", "{\"lease_seconds\":2.5}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rd_field_errors_t e = { .count = 0 };
        rd_req_result_t r = rd_request_extend(bad[i], strlen(bad[i]), 45000, &req, &e);
        rd_request_free(req.doc);
        if (r != RD_REQ_INVALID) fail_msg("%s: result %d", bad[i], (int)r);
        assert_one_error(&e, "lease_seconds", "invalid");
    }
    rd_field_errors_t e = { .count = 0 };
    assert_int_equal(rd_request_extend("3", 1, 45000, &req, &e), RD_REQ_MALFORMED);
    assert_null(req.doc);
}

/* POST .../snooze (docs/reference.md "Snooze"): delay_seconds is required,
 * 0..2592000; an empty body is {} and so 422 on it. */
static void test_snooze(void **state)
{
    rd_settle_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    const char *body = "{\"delay_seconds\":0}";
    assert_int_equal(rd_request_snooze(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_int_equal(req.delay_ms, 0);
    assert_null(req.lease_token);
    rd_request_free(req.doc);
    body = "{\"delay_seconds\":2592000,\"lease_token\":\"1a.2\"}";
    assert_int_equal(rd_request_snooze(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_int_equal(req.delay_ms, 2592000000LL);
    assert_string_equal(req.lease_token, "1a.2");
    rd_request_free(req.doc);
    assert_int_equal(errs.count, 0);

    static const char *const missing[] = { "", "{}", "{\"delay_seconds\":null}" };
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        rd_field_errors_t e = { .count = 0 };
        rd_req_result_t r = rd_request_snooze(missing[i], strlen(missing[i]), &req, &e);
        rd_request_free(req.doc);
        if (r != RD_REQ_INVALID) fail_msg("'%s': result %d", missing[i], (int)r);
        assert_one_error(&e, "delay_seconds", "required");
    }
    static const char *const bad[] = { "{\"delay_seconds\":-1}", "{\"delay_seconds\":2592001}",
                                       "{\"delay_seconds\":\"5\"}", "{\"delay_seconds\":1.5}",
                                       "{\"delay_seconds\":true}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rd_field_errors_t e = { .count = 0 };
        rd_req_result_t r = rd_request_snooze(bad[i], strlen(bad[i]), &req, &e);
        rd_request_free(req.doc);
        if (r != RD_REQ_INVALID) fail_msg("%s: result %d", bad[i], (int)r);
        assert_one_error(&e, "delay_seconds", "invalid");
    }
    rd_field_errors_t e = { .count = 0 };
    body = "{\"delay_seconds\":1,\"lease_token\":7}";
    assert_int_equal(rd_request_snooze(body, strlen(body), &req, &e), RD_REQ_INVALID);
    assert_one_error(&e, "lease_token", "invalid");
    e.count = 0;
    assert_int_equal(rd_request_snooze("[]", 2, &req, &e), RD_REQ_MALFORMED);
    assert_int_equal(e.count, 0);
}

/* Batch acknowledgement items may be snoozed (docs/reference.md "Snooze"):
 * outcome "succeeded" (the default) or "snoozed" with delay_seconds. */
static void test_ack_snoozed_items(void **state)
{
    const char *body = "{\"messages\":[{\"id\":1},{\"id\":2,\"outcome\":\"snoozed\","
                       "\"delay_seconds\":60,\"lease_token\":\"1a.2\"},"
                       "{\"id\":3,\"outcome\":\"succeeded\",\"delay_seconds\":\"ignored\"},"
                       "{\"id\":4,\"outcome\":null}]}";
    rd_ack_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_ack(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_int_equal(req.count, 4);
    assert_true(req.any_snoozed);
    assert_false(req.snoozed[0]);
    assert_true(req.snoozed[1]);
    assert_int_equal(req.delay_ms[1], 60000);
    assert_string_equal(req.tokens[1], "1a.2");
    assert_false(req.snoozed[2]);
    assert_false(req.snoozed[3]);
    rd_request_free(req.doc);

    body = "{\"messages\":[{\"id\":1},{\"id\":2}]}";
    assert_int_equal(rd_request_ack(body, strlen(body), &req, &errs), RD_REQ_OK);
    assert_false(req.any_snoozed);
    rd_request_free(req.doc);

    static const struct {
        const char *body, *field, *code;
    } bad[] = {
        { "{\"messages\":[{\"id\":1},{\"id\":2,\"outcome\":\"snoozed\"}]}",
          "messages[1].delay_seconds", "required" },
        { "{\"messages\":[{\"id\":1,\"outcome\":\"snoozed\",\"delay_seconds\":-1}]}",
          "messages[0].delay_seconds", "invalid" },
        { "{\"messages\":[{\"id\":1,\"outcome\":\"snoozed\",\"delay_seconds\":2592001}]}",
          "messages[0].delay_seconds", "invalid" },
        { "{\"messages\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e\"}]}",
          "messages[0].outcome", "invalid" },
        { "{\"messages\":[{\"id\":1,\"outcome\":5}]}", "messages[0].outcome", "invalid" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rd_field_errors_t e = { .count = 0 };
        rd_req_result_t r = rd_request_ack(bad[i].body, strlen(bad[i].body), &req, &e);
        rd_request_free(req.doc);
        if (r != RD_REQ_INVALID) fail_msg("%s: result %d", bad[i].body, (int)r);
        assert_one_error(&e, bad[i].field, bad[i].code);
    }
}

static void test_empty_body(void **state)
{
    assert_int_equal(rd_request_empty(NULL, 0), RD_REQ_OK);
    assert_int_equal(rd_request_empty("", 0), RD_REQ_OK);
    assert_int_equal(rd_request_empty(" \n", 2), RD_REQ_OK);
    assert_int_equal(rd_request_empty("{}", 2), RD_REQ_OK);
    assert_int_equal(rd_request_empty("{\"x\":1}", 7), RD_REQ_OK);
    assert_int_equal(rd_request_empty("[]", 2), RD_REQ_MALFORMED);
    assert_int_equal(rd_request_empty("x", 1), RD_REQ_MALFORMED);
    assert_int_equal(rd_request_empty("{", 1), RD_REQ_MALFORMED);
}

/* ---------------------------------------------------------------------------
 * list
 * ------------------------------------------------------------------------- */

/* ?series=minute|hour, for GET /queues/{q}/stats (docs/series.md). */
static void test_series_query(void **state)
{
    const char *res;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_series(NULL, 0, &res, &errs), RD_REQ_OK);
    assert_null(res);
    assert_int_equal(rd_request_series("top=5", 5, &res, &errs), RD_REQ_OK);
    assert_null(res);
    assert_int_equal(rd_request_series("series=minute", 13, &res, &errs), RD_REQ_OK);
    assert_string_equal(res, "minute");
    assert_int_equal(rd_request_series("top=1&series=hour", 17, &res, &errs), RD_REQ_OK);
    assert_string_equal(res, "hour");
    const char *bad[] = { "series=", "series=day", "series=Hour", "series=minutes",
                          "series=minute%00", "series=%ZZ" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errs.count = 0;
        assert_int_equal(rd_request_series(bad[i], strlen(bad[i]), &res, &errs), RD_REQ_INVALID);
        assert_null(res);
        assert_int_equal(errs.count, 1);
        assert_string_equal(errs.items[0].field, "series");
        assert_string_equal(errs.items[0].code, "invalid");
    }
}

static void test_list_defaults(void **state)
{
    rd_list_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_list(NULL, 0, &req, &errs), RD_REQ_OK);
    assert_string_equal(req.status, "");
    assert_int_equal(req.limit, 100);
    assert_string_equal(req.cursor, "");
    assert_int_equal(rd_request_list("", 0, &req, &errs), RD_REQ_OK);
    assert_int_equal(req.limit, RD_LIST_LIMIT_DEFAULT);
    assert_int_equal(rd_request_list("foo=bar", 7, &req, &errs), RD_REQ_OK);
    assert_string_equal(req.status, "");
    assert_int_equal(errs.count, 0);
}

static void test_list_status(void **state)
{
    const char *ok[] = { "pending", "processing", "succeeded", "dead" };
    for (size_t i = 0; i < 4; i++) {
        char q[64];
        snprintf(q, sizeof q, "status=%s", ok[i]);
        rd_list_req_t req;
        rd_field_errors_t errs = { .count = 0 };
        assert_int_equal(rd_request_list(q, strlen(q), &req, &errs), RD_REQ_OK);
        assert_string_equal(req.status, ok[i]);
    }
    const char *bad[] = { "status=bogus", "status=", "status=PENDING", "status=dead ",
                          "status=processingprocessing", "status=dea", "status=%G0",
                          "status=dead%00" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rd_list_req_t req;
        rd_field_errors_t errs = { .count = 0 };
        rd_req_result_t r = rd_request_list(bad[i], strlen(bad[i]), &req, &errs);
        if (r != RD_REQ_INVALID) fail_msg("%s: result %d", bad[i], (int)r);
        assert_one_error(&errs, "status", "invalid");
        assert_string_equal(req.status, "");
    }
}

static void test_list_limit(void **state)
{
    const struct { const char *q; int want; } ok[] = {
        { "limit=1", 1 }, { "limit=1000", 1000 }, { "limit=50", 50 }, { "limit=%35", 5 },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        rd_list_req_t req;
        rd_field_errors_t errs = { .count = 0 };
        assert_int_equal(rd_request_list(ok[i].q, strlen(ok[i].q), &req, &errs), RD_REQ_OK);
        assert_int_equal(req.limit, ok[i].want);
    }
    const char *bad[] = { "limit=0", "limit=1001", "limit=-5", "limit=", "limit", "limit=abc",
                          "limit=10x", "limit=1.5", "limit=%G1",
                          "limit=123456789012345678901234567890123456789" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rd_list_req_t req;
        rd_field_errors_t errs = { .count = 0 };
        rd_req_result_t r = rd_request_list(bad[i], strlen(bad[i]), &req, &errs);
        if (r != RD_REQ_INVALID) fail_msg("%s: result %d", bad[i], (int)r);
        assert_one_error(&errs, "limit", "invalid");
        assert_int_equal(req.limit, 100);
    }
}

static void test_list_cursor(void **state)
{
    rd_list_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    const char *q = "cursor=abc123";
    assert_int_equal(rd_request_list(q, strlen(q), &req, &errs), RD_REQ_OK);
    assert_string_equal(req.cursor, "abc123");
    q = "cursor=a%2Bb+c%3D";
    assert_int_equal(rd_request_list(q, strlen(q), &req, &errs), RD_REQ_OK);
    assert_string_equal(req.cursor, "a+b c=");
    assert_int_equal(errs.count, 0);

    char longq[300], value[200];
    memset(value, 'c', 127);
    value[127] = '\0';
    snprintf(longq, sizeof longq, "cursor=%s", value);
    assert_int_equal(rd_request_list(longq, strlen(longq), &req, &errs), RD_REQ_OK);
    assert_string_equal(req.cursor, value);

    memset(value, 'c', 128);
    value[128] = '\0';
    snprintf(longq, sizeof longq, "cursor=%s", value);
    assert_int_equal(rd_request_list(longq, strlen(longq), &req, &errs), RD_REQ_INVALID);
    assert_one_error(&errs, "cursor", "invalid");
    assert_string_equal(req.cursor, "");
}

static void test_list_combined(void **state)
{
    rd_list_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    const char *q = "status=dea%64&limit=25&cursor=xyz";
    assert_int_equal(rd_request_list(q, strlen(q), &req, &errs), RD_REQ_OK);
    assert_string_equal(req.status, "dead");
    assert_int_equal(req.limit, 25);
    assert_string_equal(req.cursor, "xyz");

    q = "status=x&limit=0";
    assert_int_equal(rd_request_list(q, strlen(q), &req, &errs), RD_REQ_INVALID);
    assert_int_equal(errs.count, 2);
    assert_error_at(&errs, 0, "status", "invalid");
    assert_error_at(&errs, 1, "limit", "invalid");
}

/* ---------------------------------------------------------------------------
 * Queue names
 * ------------------------------------------------------------------------- */

static void assert_queue_ok(const char *name, size_t len)
{
    rd_field_errors_t errs = { .count = 0 };
    if (!rd_request_queue_name(name, len, &errs))
        fail_msg("queue name of %zu bytes refused: %s", len,
                 errs.count ? errs.items[0].message : "");
    assert_int_equal(errs.count, 0);
}

static void assert_queue_bad(const char *name, size_t len, const char *message)
{
    rd_field_errors_t errs = { .count = 0 };
    if (rd_request_queue_name(name, len, &errs))
        fail_msg("queue name of %zu bytes accepted: '%.*s'", len, (int)len, name ? name : "");
    assert_one_error(&errs, "queue", "invalid");
    if (message) assert_string_equal(errs.items[0].message, message);
}

#define QOK(lit) assert_queue_ok((lit), sizeof(lit) - 1)
#define QBAD(lit, msg) assert_queue_bad((lit), sizeof(lit) - 1, (msg))
#define UTF8_MSG "queue must be valid UTF-8."
#define CTRL_MSG "queue must not contain control characters."
#define LEN_MSG "queue must be 1 to 255 bytes."

static void test_queue_name_valid(void **state)
{
    QOK("q");
    QOK("emails");
    QOK("with space");
    QOK("a/b");
    QOK("{q}:%");
    QOK("~");
    QOK("caf\xC3\xA9");
    QOK("\xE6\x97\xA5\xE6\x9C\xAC");
    QOK("\xF0\x9F\x98\x80");
    QOK("\xF4\x8F\xBF\xBF");    /* U+10FFFF */
    QOK("\xC2\xA0");            /* U+00A0, just past the C1 controls */
    QOK("\xEE\x80\x80");        /* U+E000, just past the surrogates */
    QOK("\xED\x9F\xBF");        /* U+D7FF, just before them */
}

static void test_queue_name_length(void **state)
{
    char name[300];
    memset(name, 'a', sizeof name);
    assert_queue_ok(name, 255);
    assert_queue_ok(name, 1);
    assert_queue_bad(name, 256, LEN_MSG);
    assert_queue_bad(name, 299, LEN_MSG);
    assert_queue_bad("", 0, LEN_MSG);
    assert_queue_bad(NULL, 0, LEN_MSG);
    /* 253 ASCII + a 2-byte character: 255 bytes. */
    memcpy(name + 253, "\xC3\xA9", 2);
    assert_queue_ok(name, 255);
    /* A multi-byte character cut by len is invalid. */
    assert_queue_bad(name, 254, UTF8_MSG);
}

static void test_queue_name_bad_utf8(void **state)
{
    QBAD("\xC0\xAF", UTF8_MSG);          /* overlong '/' */
    QBAD("\xC1\xBF", UTF8_MSG);          /* overlong */
    QBAD("\xE0\x80\xAF", UTF8_MSG);      /* overlong, 3 bytes */
    QBAD("\xF0\x80\x80\xAF", UTF8_MSG);  /* overlong, 4 bytes */
    QBAD("\xED\xA0\x80", UTF8_MSG);      /* U+D800 */
    QBAD("\xED\xBF\xBF", UTF8_MSG);      /* U+DFFF */
    QBAD("\xF4\x90\x80\x80", UTF8_MSG);  /* U+110000 */
    QBAD("\xF5\x80\x80\x80", UTF8_MSG);
    QBAD("\xF8\x88\x80\x80\x80", UTF8_MSG);
    QBAD("\xFF", UTF8_MSG);
    QBAD("\xFE", UTF8_MSG);
    QBAD("\x80", UTF8_MSG);              /* lone continuation */
    QBAD("a\xBF", UTF8_MSG);
    QBAD("\xC3", UTF8_MSG);              /* truncated */
    QBAD("ab\xC3", UTF8_MSG);
    QBAD("\xE6\x97", UTF8_MSG);
    QBAD("\xF0\x9F\x98", UTF8_MSG);
    QBAD("\xC3\x28", UTF8_MSG);          /* bad continuation */
    QBAD("\xE6\x28\x97", UTF8_MSG);
    QBAD("ok\xC3\xA9\xC3", UTF8_MSG);
}

static void test_queue_name_control_characters(void **state)
{
    QBAD("\x01", CTRL_MSG);
    QBAD("a\x1f", CTRL_MSG);
    QBAD("\x7f", CTRL_MSG);
    QBAD("a\tb", CTRL_MSG);
    QBAD("line\n", CTRL_MSG);
    QBAD("\xC2\x85", CTRL_MSG);          /* U+0085 NEL */
    QBAD("\xC2\x80", CTRL_MSG);          /* U+0080 */
    QBAD("\xC2\x9F", CTRL_MSG);          /* U+009F */
    QBAD("a\0b", CTRL_MSG);              /* NUL inside the decoded name */
    QBAD("\0", CTRL_MSG);
}

/* "." and ".." are path steps to browsers and curl, which collapse them:
 * such a queue could not be reached again, so the names are refused. */
static void test_queue_name_dots(void **state)
{
    QBAD(".", "queue must not be \".\" or \"..\".");
    QBAD("..", "queue must not be \".\" or \"..\".");
    QOK("...");
    QOK(".a");
    QOK("a.");
    QOK("a..b");
    /* A redrive's "to" is a queue name too. */
    rd_replay_req_t r;
    rd_field_errors_t errs = { .count = 0 };
    const char *body = "{\"all\":true,\"to\":\"..\"}";
    assert_int_equal(rd_request_replay(body, strlen(body), &r, &errs), RD_REQ_INVALID);
    assert_one_error(&errs, "to", "invalid");
    errs.count = 0;
    body = "{\"all\":true,\"to\":\"...\"}";
    assert_int_equal(rd_request_replay(body, strlen(body), &r, &errs), RD_REQ_OK);
    rd_request_replay_free(&r);
}

/* A date that is not on the calendar is no time: timegm would have moved
 * 2026-02-31 to 2026-03-03. */
static void test_rfc3339_impossible_dates(void **state)
{
    static const char *const bad[] = { "2026-02-31T00:00:00Z", "2026-02-29T00:00:00Z",
                                       "2026-04-31T12:00:00Z", "2026-06-31T00:00:00Z",
                                       "2026-09-31T00:00:00Z", "2026-11-31T00:00:00Z",
                                       "2100-02-29T00:00:00Z", "2026-01-32T00:00:00Z",
                                       "2026-00-10T00:00:00Z", "2026-13-01T00:00:00Z" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (rd_parse_rfc3339_ms(bad[i]) != -1) fail_msg("%s was accepted", bad[i]);
    assert_true(rd_parse_rfc3339_ms("2028-02-29T00:00:00Z") > 0);   /* a leap year */
    assert_true(rd_parse_rfc3339_ms("2000-02-29T00:00:00Z") > 0);
    assert_true(rd_parse_rfc3339_ms("2026-02-28T23:59:59Z") > 0);
    assert_true(rd_parse_rfc3339_ms("2026-12-31T00:00:00Z") > 0);
    assert_int_equal(rd_parse_rfc3339_ms("2026-03-01T00:00:00Z") -
                         rd_parse_rfc3339_ms("2026-02-28T00:00:00Z"), 86400000LL);
    rd_list_req_t l;
    rd_field_errors_t errs = { .count = 0 };
    const char *q = "since=2026-02-31T00:00:00Z";
    assert_int_equal(rd_request_list(q, strlen(q), &l, &errs), RD_REQ_INVALID);
    assert_one_error(&errs, "since", "invalid");
}

/* ---------------------------------------------------------------------------
 * rd_query_get
 * ------------------------------------------------------------------------- */

static long qget(const char *query, const char *name, char *out, size_t cap)
{
    memset(out, 'X', cap);
    return rd_query_get(query, len_of(query), name, out, cap);
}

static void test_query_get(void **state)
{
    char out[32];
    assert_int_equal(qget(NULL, "a", out, sizeof out), -1);
    assert_int_equal(qget("", "a", out, sizeof out), -1);
    assert_int_equal(qget("a=1&b=2", "c", out, sizeof out), -1);
    assert_int_equal(qget("a=1&b=2", "b", out, sizeof out), 1);
    assert_string_equal(out, "2");
    assert_int_equal(qget("a=1&b=2", "a", out, sizeof out), 1);
    assert_string_equal(out, "1");
    assert_int_equal(qget("a=", "a", out, sizeof out), 0);
    assert_string_equal(out, "");
    assert_int_equal(qget("x=1&a", "a", out, sizeof out), 0);
    assert_string_equal(out, "");
    assert_int_equal(qget("ab=1", "a", out, sizeof out), -1);
    assert_int_equal(qget("a=1", "ab", out, sizeof out), -1);
    assert_int_equal(qget("b=a&ba=2", "a", out, sizeof out), -1);
    assert_int_equal(qget("a=1&a=2", "a", out, sizeof out), 1);
    assert_string_equal(out, "1");
    assert_int_equal(qget("&&a=v&", "a", out, sizeof out), 1);
    assert_string_equal(out, "v");
    assert_int_equal(qget("a=b=c", "a", out, sizeof out), 3);
    assert_string_equal(out, "b=c");
}

static void test_query_get_decoding(void **state)
{
    char out[32];
    assert_int_equal(qget("q=a+b", "q", out, sizeof out), 3);
    assert_string_equal(out, "a b");
    assert_int_equal(qget("q=%2B%20", "q", out, sizeof out), 2);
    assert_string_equal(out, "+ ");
    assert_int_equal(qget("q=caf%C3%A9", "q", out, sizeof out), 5);
    assert_string_equal(out, "caf\xC3\xA9");
    assert_int_equal(qget("q=%G1", "q", out, sizeof out), -2);
    assert_int_equal(qget("q=%4", "q", out, sizeof out), -2);
    assert_int_equal(qget("q=a%00b", "q", out, sizeof out), -2);
}

static void test_query_get_too_long(void **state)
{
    char out[4];
    assert_int_equal(qget("a=123", "a", out, sizeof out), 3);
    assert_string_equal(out, "123");
    assert_int_equal(qget("a=1234", "a", out, sizeof out), -2);
    assert_int_equal(qget("b=1234&a=1", "a", out, sizeof out), 1);
    assert_string_equal(out, "1");
}

/* The limit is on the decoded value: "%C3%A9" is 6 characters but 2 bytes,
 * and a value of cap - 1 bytes fits however it was encoded. */
static void test_query_get_limit_is_on_decoded_value(void **state)
{
    char out[8];
    assert_int_equal(qget("a=%C3%A9%C3%A9%C3%A9", "a", out, sizeof out), 6);
    assert_string_equal(out, "\xC3\xA9\xC3\xA9\xC3\xA9");
    assert_int_equal(qget("a=%41%42%43%44%45%46%47", "a", out, sizeof out), 7);
    assert_string_equal(out, "ABCDEFG");
    assert_int_equal(qget("a=%41%42%43%44%45%46%47%48", "a", out, sizeof out), -2);
    assert_int_equal(qget("a=+++++++", "a", out, sizeof out), 7);
    assert_string_equal(out, "       ");

    /* GET /queues/{q}/messages?error_contains=: 255 bytes, any encoding. */
    char query[1024], want[256];
    size_t n = 0, w = 0;
    n += (size_t)snprintf(query, sizeof query, "error_contains=");
    for (int i = 0; i < 43; i++) {   /* 43 x U+00E9 (86 bytes, 258 characters) */
        n += (size_t)snprintf(query + n, sizeof query - n, "%%C3%%A9");
        want[w++] = '\xC3';
        want[w++] = '\xA9';
    }
    want[w] = '\0';
    rd_list_req_t l;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_list(query, n, &l, &errs), RD_REQ_OK);
    assert_string_equal(l.error_contains, want);

    /* 192 bytes with punctuation, 272 characters encoded. */
    n = (size_t)snprintf(query, sizeof query, "error_contains=");
    w = 0;
    for (int i = 0; i < 20; i++) {   /* 40 bytes encoded */
        n += (size_t)snprintf(query + n, sizeof query - n, "a%%3A%%2F");
        memcpy(want + w, "a:/", 3);
        w += 3;
    }
    while (w < 192) {
        n += (size_t)snprintf(query + n, sizeof query - n, "b");
        want[w++] = 'b';
    }
    want[w] = '\0';
    assert_int_equal(n - strlen("error_contains="), 272);
    errs.count = 0;
    assert_int_equal(rd_request_list(query, n, &l, &errs), RD_REQ_OK);
    assert_string_equal(l.error_contains, want);

    /* 256 decoded bytes are still too many. */
    n = (size_t)snprintf(query, sizeof query, "error_contains=");
    for (int i = 0; i < 256; i++) query[n++] = 'x';
    errs.count = 0;
    assert_int_equal(rd_request_list(query, n, &l, &errs), RD_REQ_INVALID);
    assert_one_error(&errs, "error_contains", "invalid");

    /* GET /queues?cursor=: a 200-byte name of U+00E9 (600 characters). */
    rd_queues_req_t qr;
    n = (size_t)snprintf(query, sizeof query, "limit=1&cursor=");
    for (int i = 0; i < 100; i++) n += (size_t)snprintf(query + n, sizeof query - n, "%%C3%%A9");
    errs.count = 0;
    assert_int_equal(rd_request_queues(query, n, &qr, &errs), RD_REQ_OK);
    assert_int_equal(qr.cursor_len, 200);
    assert_memory_equal(qr.cursor, "\xC3\xA9\xC3\xA9", 4);
}

/* GET /queues/{q}/messages?error_contains= is text like every string the
 * API accepts (README "Text is UTF-8"): invalid UTF-8 once percent-decoded
 * (%FF, the overlong NUL %C0%80, a lone surrogate %ED%A0%80) is 422 on the
 * field, as the replay body's error_contains is, not a filter that quietly
 * matches nothing; and a value that cannot be decoded says why. */
static void test_list_error_contains_is_utf8_text(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "error_contains=%FF", "error_contains=%C0%80", "error_contains=%ED%A0%80",
        "error_contains=disk%E9full",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rd_list_req_t l;
        rd_field_errors_t errs = { .count = 0 };
        if (rd_request_list(bad[i], strlen(bad[i]), &l, &errs) != RD_REQ_INVALID)
            fail_msg("%s was taken", bad[i]);
        assert_one_error(&errs, "error_contains", "invalid");
        assert_non_null(strstr(errs.items[0].message, "UTF-8"));
        assert_string_equal(l.error_contains, "");
    }
    /* Not decodable: the message names the rule that was broken. */
    static const char *const undecodable[] = { "error_contains=%4", "error_contains=%zz",
                                               "error_contains=a%00b" };
    for (size_t i = 0; i < sizeof undecodable / sizeof undecodable[0]; i++) {
        rd_list_req_t l;
        rd_field_errors_t errs = { .count = 0 };
        assert_int_equal(rd_request_list(undecodable[i], strlen(undecodable[i]), &l, &errs),
                         RD_REQ_INVALID);
        assert_one_error(&errs, "error_contains", "invalid");
        assert_non_null(strstr(errs.items[0].message, "%XX"));
    }
    /* Valid UTF-8 still filters. */
    rd_list_req_t l;
    rd_field_errors_t errs = { .count = 0 };
    const char *good = "error_contains=disk%C3%A9";
    assert_int_equal(rd_request_list(good, strlen(good), &l, &errs), RD_REQ_OK);
    assert_string_equal(l.error_contains, "disk\xC3\xA9");
}

static void test_query_get_length_honoured(void **state)
{
    char out[16];
    const char *q = "a=1&b=2";
    assert_int_equal(rd_query_get(q, 3, "b", out, sizeof out), -1);
    assert_int_equal(rd_query_get(q, 3, "a", out, sizeof out), 1);
    assert_string_equal(out, "1");
    assert_int_equal(rd_query_get(q, 6, "b", out, sizeof out), 0);
    assert_string_equal(out, "");
}

/* ---------------------------------------------------------------------------
 * queue policy (docs/reference.md "Queue policy and flow control")
 * ------------------------------------------------------------------------- */

static void test_policy_valid(void **state)
{
    const char *body = "{\"max_retries\":4,\"backoff\":{\"base_seconds\":2,\"max_seconds\":90,"
                       "\"jitter\":\"equal\"},\"lease_seconds\":45,\"dead_ttl\":\"7d\","
                       "\"succeeded_ttl\":0,\"max_in_flight\":12,"
                       "\"rate_limit\":{\"per_second\":0.5,\"burst\":2},\"paused\":true}";
    rd_policy_t p;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_policy(body, strlen(body), &p, &errs), RD_REQ_OK);
    assert_int_equal(p.max_retries, 4);
    assert_int_equal(p.base_seconds, 2);
    assert_int_equal(p.max_seconds, 90);
    assert_string_equal(p.jitter, "equal");
    assert_int_equal(p.lease_seconds, 45);
    assert_int_equal(p.dead_ttl_s, 7 * 86400);
    assert_int_equal(p.succeeded_ttl_s, 0);
    assert_int_equal(p.max_in_flight, 12);
    assert_true(p.per_second == 0.5);
    assert_int_equal(p.burst, 2);
    assert_false(p.paused);  /* pause and resume change it, not PUT */
    /* The pairs policy_set stores, and back. */
    const char *args[RD_POLICY_ARGS_MAX];
    char values[RD_POLICY_ARGS_MAX / 2][32];
    size_t n = rd_policy_args(&p, args, values);
    assert_int_equal(n, 20);
    rd_str_t pairs[RD_POLICY_ARGS_MAX];
    for (size_t i = 0; i < n; i++) pairs[i] = (rd_str_t){ args[i], strlen(args[i]) };
    rd_policy_t back;
    assert_true(rd_policy_from_pairs(&back, pairs, n));
    assert_memory_equal(&back, &p, sizeof p);
}

static void test_policy_empty_is_all_defaults(void **state)
{
    const char *bodies[] = { "{}", "{\"rate_limit\":null,\"backoff\":null,\"max_retries\":null}" };
    for (size_t i = 0; i < 2; i++) {
        rd_policy_t p, d;
        rd_field_errors_t errs = { .count = 0 };
        assert_int_equal(rd_request_policy(bodies[i], strlen(bodies[i]), &p, &errs), RD_REQ_OK);
        rd_policy_init(&d);
        /* The nulls are kept apart, for a PATCH; nothing else is set. */
        assert_int_equal(p.nulls, i == 0 ? 0u : RD_POLICY_NULL(rate_limit) |
                                                RD_POLICY_NULL(backoff) |
                                                RD_POLICY_NULL(max_retries));
        p.nulls = 0;
        assert_memory_equal(&p, &d, sizeof p);
        const char *args[RD_POLICY_ARGS_MAX];
        char values[RD_POLICY_ARGS_MAX / 2][32];
        assert_int_equal(rd_policy_args(&p, args, values), 0);
    }
}

/* One body per bad field: exactly that field is named. */
static void test_policy_invalid_fields(void **state)
{
    static const char *const cases[][3] = {
        { "{\"max_retries\":0}", "max_retries", "invalid" },
        { "{\"max_retries\":\"3\"}", "max_retries", "invalid" },
        { "{\"backoff\":3}", "backoff", "invalid" },
        { "{\"backoff\":{\"base_seconds\":3601}}", "backoff.base_seconds", "invalid" },
        { "{\"backoff\":{\"max_seconds\":86401}}", "backoff.max_seconds", "invalid" },
        { "{\"backoff\":{\"jitter\":\"FULL\"}}", "backoff.jitter", "invalid" },
        { "{\"lease_seconds\":43201}", "lease_seconds", "invalid" },
        { "{\"dead_ttl\":-5}", "dead_ttl", "invalid" },
        { "{\"dead_ttl\":\"3651d\"}", "dead_ttl", "invalid" },
        { "{\"succeeded_ttl\":1.5}", "succeeded_ttl", "invalid" },
        { "{\"max_in_flight\":1000001}", "max_in_flight", "invalid" },
        { "{\"rate_limit\":true}", "rate_limit", "invalid" },
        { "{\"rate_limit\":{\"per_second\":100001,\"burst\":1}}", "rate_limit.per_second", "invalid" },
        { "{\"rate_limit\":{\"per_second\":0.0001,\"burst\":1}}", "rate_limit.per_second", "invalid" },
        { "{\"rate_limit\":{\"burst\":1}}", "rate_limit.per_second", "required" },
        { "{\"rate_limit\":{\"per_second\":1,\"burst\":0}}", "rate_limit.burst", "invalid" },
        { "{\"maxinflight\":3}", "maxinflight", "invalid" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rd_policy_t p;
        rd_field_errors_t errs = { .count = 0 };
        rd_req_result_t r = rd_request_policy(cases[i][0], strlen(cases[i][0]), &p, &errs);
        if (r != RD_REQ_INVALID) fail_msg("%s: result %d, want INVALID", cases[i][0], (int)r);
        assert_one_error(&errs, cases[i][1], cases[i][2]);
    }
    const char *malformed[] = { "", "[]", "{", "\"x\"" };
    for (size_t i = 0; i < 4; i++) {
        rd_policy_t p;
        rd_field_errors_t errs = { .count = 0 };
        assert_int_equal(rd_request_policy(malformed[i], strlen(malformed[i]), &p, &errs),
                         RD_REQ_MALFORMED);
    }
}

/* dead_letter_rules: stored canonical (one field order, a retry rule's
 * defaults filled in), passed beside the pairs, shown by the JSON. */
static void test_policy_rules_valid(void **state)
{
    const char *body = "{\"dead_letter_rules\":[{\"action\":\"retry\",\"error_contains\":\"429\","
                       "\"delay_seconds\":300,\"max_times\":5},"
                       "{\"error_prefix\":\"HTTP 503\",\"action\":\"retry\"},"
                       "{\"error_contains\":\"rate limit\",\"error_prefix\":\"E\",\"action\":\"dead\","
                       "\"delay_seconds\":null}]}";
    rd_policy_t p;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_policy(body, strlen(body), &p, &errs), RD_REQ_OK);
    assert_non_null(p.rules);
    assert_string_equal(p.rules,
                        "[{\"error_contains\":\"429\",\"action\":\"retry\",\"delay_seconds\":300,"
                        "\"max_times\":5},{\"error_prefix\":\"HTTP 503\",\"action\":\"retry\","
                        "\"delay_seconds\":0,\"max_times\":1},{\"error_contains\":\"rate limit\","
                        "\"error_prefix\":\"E\",\"action\":\"dead\"}]");
    const char *args[RD_POLICY_ARGS_MAX];
    char values[RD_POLICY_ARGS_MAX / 2][32];
    assert_int_equal(rd_policy_args(&p, args, values), 0);  /* the rules go beside */
    rd_str_t pairs[2] = { { "dead_letter_rules", 17 }, { p.rules, p.rules_len } };
    rd_policy_t back;
    assert_true(rd_policy_from_pairs(&back, pairs, 2));
    rd_buf_t out = RD_BUF_INIT;
    rd_jsonw_t w;
    rd_jsonw_init(&w, &out);
    rd_policy_defaults_t d = { 30000, 0, 0 };
    rd_policy_write_json(&w, &back, &d, "q", 1);
    rd_buf_putc(&out, '\0');
    assert_non_null(strstr(out.data, "\"dead_letter_rules\":[{\"error_contains\":\"429\""));
    assert_non_null(strstr(out.data, "\"action\":\"dead\"}],\"alert_url\":null,"));
    rd_buf_free(&out);
    rd_policy_free(&p);
    /* An empty list or null: no rules. */
    const char *empty[] = { "{\"dead_letter_rules\":[]}", "{\"dead_letter_rules\":null}" };
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(rd_request_policy(empty[i], strlen(empty[i]), &p, &errs), RD_REQ_OK);
        assert_null(p.rules);
    }
    /* No rules stored: the JSON shows an empty list. */
    rd_policy_init(&back);
    rd_jsonw_init(&w, &out);
    rd_policy_write_json(&w, &back, &d, "q", 1);
    rd_buf_putc(&out, '\0');
    assert_non_null(strstr(out.data, "\"dead_letter_rules\":[]"));
    rd_buf_free(&out);
}

/* alert_url: an absolute http(s) URL of 1-2048 bytes of UTF-8 without
 * spaces or control characters, passed beside the pairs and shown by the
 * JSON (null when not set); anything else is one error on field alert_url. */
static void test_policy_alert_url(void **state)
{
    const char *body = "{\"alert_url\":\"https://hooks.example:8443/q?\\u00e9=1#f\"}";
    rd_policy_t p;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_policy(body, strlen(body), &p, &errs), RD_REQ_OK);
    assert_non_null(p.alert_url);
    assert_string_equal(p.alert_url, "https://hooks.example:8443/q?\xc3\xa9=1#f");
    assert_int_equal(p.alert_url_len, strlen(p.alert_url));
    const char *args[RD_POLICY_ARGS_MAX];
    char values[RD_POLICY_ARGS_MAX / 2][32];
    assert_int_equal(rd_policy_args(&p, args, values), 0);  /* the URL goes beside */
    rd_str_t pairs[2] = { { "alert_url", 9 }, { p.alert_url, p.alert_url_len } };
    rd_policy_t back;
    assert_true(rd_policy_from_pairs(&back, pairs, 2));
    rd_buf_t out = RD_BUF_INIT;
    rd_jsonw_t w;
    rd_jsonw_init(&w, &out);
    rd_policy_defaults_t d = { 30000, 0, 0 };
    rd_policy_write_json(&w, &back, &d, "q", 1);
    rd_buf_putc(&out, '\0');
    assert_non_null(strstr(out.data, "\"alert_url\":\"https://hooks.example:8443/q?\xc3\xa9=1#f\","));
    rd_buf_free(&out);
    rd_policy_free(&p);
    assert_null(p.alert_url);
    /* null or absent: not set, shown as null. */
    const char *unset[] = { "{\"alert_url\":null}", "{}" };
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(rd_request_policy(unset[i], strlen(unset[i]), &p, &errs), RD_REQ_OK);
        assert_null(p.alert_url);
    }
    rd_policy_init(&back);
    rd_jsonw_init(&w, &out);
    rd_policy_write_json(&w, &back, &d, "q", 1);
    rd_buf_putc(&out, '\0');
    assert_non_null(strstr(out.data, "\"alert_url\":null,"));
    rd_buf_free(&out);
    /* A stored value no library writes is shown as not set. */
    rd_str_t odd[2] = { { "alert_url", 9 }, { "file:///x", 9 } };
    assert_true(rd_policy_from_pairs(&back, odd, 2));
    assert_null(back.alert_url);
    /* 2048 bytes is the most. */
    static char big[2100];
    snprintf(big, sizeof big, "{\"alert_url\":\"http://h/");
    size_t at = strlen(big);
    memset(big + at, 'a', 2048 - 9);
    snprintf(big + at + 2048 - 9, 3, "\"}");
    assert_int_equal(rd_request_policy(big, strlen(big), &p, &errs), RD_REQ_OK);
    assert_int_equal(p.alert_url_len, 2048);
    rd_policy_free(&p);
    memset(big + at, 'a', 2049 - 9);
    snprintf(big + at + 2049 - 9, 3, "\"}");
    errs.count = 0;
    assert_int_equal(rd_request_policy(big, strlen(big), &p, &errs), RD_REQ_INVALID);
    assert_one_error(&errs, "alert_url", "invalid");

    static const char *const bad[] = {
        "{\"alert_url\":\"\"}", "{\"alert_url\":3}", "{\"alert_url\":{}}",
        "{\"alert_url\":\"ftp://h/x\"}", "{\"alert_url\":\"http://\"}",
        "{\"alert_url\":\"https:///x\"}", "{\"alert_url\":\"/hook\"}",
        "{\"alert_url\":\"hooks.example/x\"}", "{\"alert_url\":\"HTTP://h/\"}",
        "{\"alert_url\":\"http://h/a b\"}", "{\"alert_url\":\"http://h/\\t\"}",
        "{\"alert_url\":\"http://h/\\u007f\"}", "{\"alert_url\":\"http://h/\\u0085\"}",
        "{\"alert_url\":\"http://h/\\u0000x\"}", "{\"alert_url\":\"http://h/\\ud800\"}",
        "{\"alert_url\":\"http://h/\xff\"}", "{\"alert_url\":\"javascript:x\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errs.count = 0;
        rd_req_result_t r = rd_request_policy(bad[i], strlen(bad[i]), &p, &errs);
        if (r != RD_REQ_INVALID) fail_msg("%s: result %d, want INVALID", bad[i], (int)r);
        assert_one_error(&errs, "alert_url", "invalid");
    }
}

/* One error per bad rule field, named dead_letter_rules[i].<name> (0-based). */
static void test_policy_rules_invalid(void **state)
{
    static const char *const cases[][3] = {
        { "{\"dead_letter_rules\":{}}", "dead_letter_rules", "invalid" },
        { "{\"dead_letter_rules\":\"429\"}", "dead_letter_rules", "invalid" },
        { "{\"dead_letter_rules\":[3]}", "dead_letter_rules[0]", "invalid" },
        { "{\"dead_letter_rules\":[{\"action\":\"dead\"}]}", "dead_letter_rules[0].error_contains",
          "required" },
        { "{\"dead_letter_rules\":[{\"error_contains\":\"\",\"action\":\"dead\"}]}",
          "dead_letter_rules[0].error_contains", "invalid" },
        { "{\"dead_letter_rules\":[{\"error_prefix\":5,\"action\":\"dead\"}]}",
          "dead_letter_rules[0].error_prefix", "invalid" },
        { "{\"dead_letter_rules\":[{\"error_contains\":\"\\udc00x\",\"action\":\"dead\"}]}",
          "dead_letter_rules[0].error_contains", "invalid" },
        { "{\"dead_letter_rules\":[{\"error_contains\":\"a\",\"action\":\"dead\"},"
          "{\"error_contains\":\"b\"}]}", "dead_letter_rules[1].action", "required" },
        { "{\"dead_letter_rules\":[{\"error_contains\":\"a\",\"action\":\"Retry\"}]}",
          "dead_letter_rules[0].action", "invalid" },
        { "{\"dead_letter_rules\":[{\"error_contains\":\"a\",\"action\":\"retry\","
          "\"delay_seconds\":86401}]}", "dead_letter_rules[0].delay_seconds", "invalid" },
        { "{\"dead_letter_rules\":[{\"error_contains\":\"a\",\"action\":\"retry\","
          "\"delay_seconds\":-1}]}", "dead_letter_rules[0].delay_seconds", "invalid" },
        { "{\"dead_letter_rules\":[{\"error_contains\":\"a\",\"action\":\"retry\","
          "\"max_times\":0}]}", "dead_letter_rules[0].max_times", "invalid" },
        { "{\"dead_letter_rules\":[{\"error_contains\":\"a\",\"action\":\"retry\","
          "\"max_times\":\"2\"}]}", "dead_letter_rules[0].max_times", "invalid" },
        { "{\"dead_letter_rules\":[{\"error_contains\":\"a\",\"action\":\"dead\","
          "\"max_times\":2}]}", "dead_letter_rules[0].max_times", "invalid" },
        { "{\"dead_letter_rules\":[{\"error_contains\":\"a\",\"action\":\"dead\",\"regex\":\".\"}]}",
          "dead_letter_rules[0]", "invalid" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rd_policy_t p;
        rd_field_errors_t errs = { .count = 0 };
        rd_req_result_t r = rd_request_policy(cases[i][0], strlen(cases[i][0]), &p, &errs);
        if (r != RD_REQ_INVALID) fail_msg("%s: result %d, want INVALID", cases[i][0], (int)r);
        assert_one_error(&errs, cases[i][1], cases[i][2]);
        assert_null(p.rules_owned);
    }
    /* 256 bytes of text and 21 rules are too many. */
    char body[4096];
    int n = snprintf(body, sizeof body, "{\"dead_letter_rules\":[{\"error_contains\":\"");
    for (int i = 0; i < 256; i++) body[n++] = 'x';
    snprintf(body + n, sizeof body - (size_t)n, "\",\"action\":\"dead\"}]}");
    rd_policy_t p;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_policy(body, strlen(body), &p, &errs), RD_REQ_INVALID);
    assert_one_error(&errs, "dead_letter_rules[0].error_contains", "invalid");
    n = snprintf(body, sizeof body, "{\"dead_letter_rules\":[");
    for (int i = 0; i < 21; i++)
        n += snprintf(body + n, sizeof body - (size_t)n, "%s{\"error_contains\":\"e\",\"action\":\"dead\"}",
                      i ? "," : "");
    snprintf(body + n, sizeof body - (size_t)n, "]}");
    errs.count = 0;
    assert_int_equal(rd_request_policy(body, strlen(body), &p, &errs), RD_REQ_INVALID);
    assert_one_error(&errs, "dead_letter_rules", "invalid");
    /* Errors in two rules: both named. */
    const char *two = "{\"dead_letter_rules\":[{\"error_contains\":\"a\",\"action\":\"x\"},"
                      "{\"error_contains\":\"b\",\"action\":\"retry\",\"max_times\":101}]}";
    errs.count = 0;
    assert_int_equal(rd_request_policy(two, strlen(two), &p, &errs), RD_REQ_INVALID);
    assert_int_equal(errs.count, 2);
    assert_string_equal(errs.items[0].field, "dead_letter_rules[0].action");
    assert_string_equal(errs.items[1].field, "dead_letter_rules[1].max_times");
}

/* Absent fields say "none given", so the queue's policy decides. */
static void test_given_flags(void **state)
{
    rd_enqueue_req_t e;
    rd_field_errors_t errs = { .count = 0 };
    const char *a = "{\"payload\":\"x\"}", *b = "{\"payload\":\"x\",\"max_retries\":3}";
    assert_int_equal(rd_request_enqueue(a, strlen(a), &e, &errs), RD_REQ_OK);
    assert_false(e.max_retries_given);
    rd_request_free(e.doc);
    assert_int_equal(rd_request_enqueue(b, strlen(b), &e, &errs), RD_REQ_OK);
    assert_true(e.max_retries_given);
    rd_request_free(e.doc);
    rd_claim_req_t c;
    assert_int_equal(rd_request_claim("{}", 2, NULL, 0, DEFAULT_LEASE_MS, &c, &errs), RD_REQ_OK);
    assert_false(c.lease_given);
    assert_int_equal(c.lease_ms, DEFAULT_LEASE_MS);
    rd_request_free(c.doc);
    assert_int_equal(rd_request_claim("{}", 2, "lease_seconds=30", 16, DEFAULT_LEASE_MS, &c, &errs),
                     RD_REQ_OK);
    assert_true(c.lease_given);
    rd_request_free(c.doc);
    rd_settle_req_t s;
    assert_int_equal(rd_request_extend("{\"lease_seconds\":5}", 19, DEFAULT_LEASE_MS, &s, &errs),
                     RD_REQ_OK);
    assert_true(s.lease_given);
    rd_request_free(s.doc);
}

/* worker (docs/reference.md "History"): 1-128 bytes of UTF-8 without U+0000, body only. */
static void test_claim_worker(void **state)
{
    char body[256];
    char name[130];
    memset(name, 'w', 128);
    name[128] = '\0';
    snprintf(body, sizeof body, "{\"worker\":\"%s\"}", name);
    rd_claim_req_t req;
    rd_field_errors_t errs = { .count = 0 };
    assert_int_equal(rd_request_claim(body, strlen(body), NULL, 0, DEFAULT_LEASE_MS, &req, &errs),
                     RD_REQ_OK);
    assert_string_equal(req.worker, name);
    rd_request_free(req.doc);
    const char *escaped = "{\"worker\":\"h\\u00e9/1\"}";
    assert_int_equal(rd_request_claim(escaped, strlen(escaped), NULL, 0, DEFAULT_LEASE_MS, &req,
                                      &errs), RD_REQ_OK);
    assert_string_equal(req.worker, "h\xc3\xa9/1");
    rd_request_free(req.doc);
    assert_int_equal(rd_request_claim("{}", 2, "worker=x", 8, DEFAULT_LEASE_MS, &req, &errs),
                     RD_REQ_OK);
    assert_null(req.worker);    /* the query string does not carry it */
    rd_request_free(req.doc);
    assert_claim_ok("{\"worker\":null}", NULL, DEFAULT_LEASE_MS, -1, 1, false);

    name[128] = 'w';
    name[129] = '\0';
    snprintf(body, sizeof body, "{\"worker\":\"%s\"}", name);
    assert_claim_invalid(body, NULL, "worker");
    assert_claim_invalid("{\"worker\":\"\"}", NULL, "worker");
    assert_claim_invalid("{\"worker\":7}", NULL, "worker");
    assert_claim_invalid("{\"worker\":[\"a\"]}", NULL, "worker");
    assert_claim_invalid("{\"worker\":\"a\\u0000b\"}", NULL, "worker");
    assert_claim_invalid("{\"worker\":\"\xff\"}", NULL, "worker");
    assert_claim_invalid("{\"worker\":\"\\ud800\"}", NULL, "worker");
}

int main(void)
{
    rd_alloc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enqueue_valid),
        cmocka_unit_test(test_policy_valid),
        cmocka_unit_test(test_policy_empty_is_all_defaults),
        cmocka_unit_test(test_policy_invalid_fields),
        cmocka_unit_test(test_policy_rules_valid),
        cmocka_unit_test(test_policy_rules_invalid),
        cmocka_unit_test(test_policy_alert_url),
        cmocka_unit_test(test_given_flags),
        cmocka_unit_test(test_enqueue_defaults),
        cmocka_unit_test(test_enqueue_payload_kept_exactly),
        cmocka_unit_test(test_enqueue_payload_required),
        cmocka_unit_test(test_enqueue_payload_not_string),
        cmocka_unit_test(test_enqueue_payload_nul_refused),
        cmocka_unit_test(test_enqueue_nul_elsewhere_not_blamed_on_payload),
        cmocka_unit_test(test_enqueue_max_retries),
        cmocka_unit_test(test_enqueue_delay_seconds),
        cmocka_unit_test(test_enqueue_priority_and_ttl),
        cmocka_unit_test(test_enqueue_several_errors),
        cmocka_unit_test(test_enqueue_malformed),
        cmocka_unit_test(test_raw_control_bytes_in_strings_refused),
        cmocka_unit_test(test_numbers_are_strict_json),
        cmocka_unit_test(test_enqueue_length_honoured),
        cmocka_unit_test(test_text_fields_must_be_utf8),
        cmocka_unit_test(test_text_valid_utf8_accepted),
        cmocka_unit_test(test_claim_defaults),
        cmocka_unit_test(test_claim_body_fields),
        cmocka_unit_test(test_claim_query_fields),
        cmocka_unit_test(test_claim_settle),
        cmocka_unit_test(test_claim_body_wins_over_query),
        cmocka_unit_test(test_claim_out_of_range),
        cmocka_unit_test(test_claim_several_errors),
        cmocka_unit_test(test_claim_malformed),
        cmocka_unit_test(test_claim_worker),
        cmocka_unit_test(test_succeed),
        cmocka_unit_test(test_succeed_bad_token),
        cmocka_unit_test(test_fail_valid),
        cmocka_unit_test(test_fail_invalid),
        cmocka_unit_test(test_fail_several_errors_and_malformed),
        cmocka_unit_test(test_extend),
        cmocka_unit_test(test_snooze),
        cmocka_unit_test(test_ack_snoozed_items),
        cmocka_unit_test(test_empty_body),
        cmocka_unit_test(test_list_defaults),
        cmocka_unit_test(test_list_status),
        cmocka_unit_test(test_list_limit),
        cmocka_unit_test(test_list_cursor),
        cmocka_unit_test(test_list_combined),
        cmocka_unit_test(test_queue_name_valid),
        cmocka_unit_test(test_queue_name_length),
        cmocka_unit_test(test_queue_name_bad_utf8),
        cmocka_unit_test(test_queue_name_control_characters),
        cmocka_unit_test(test_queue_name_dots),
        cmocka_unit_test(test_rfc3339_impossible_dates),
        cmocka_unit_test(test_query_get),
        cmocka_unit_test(test_query_get_decoding),
        cmocka_unit_test(test_query_get_too_long),
        cmocka_unit_test(test_query_get_length_honoured),
        cmocka_unit_test(test_query_get_limit_is_on_decoded_value),
        cmocka_unit_test(test_list_error_contains_is_utf8_text),
        cmocka_unit_test(test_series_query),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
