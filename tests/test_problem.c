/* test_problem.c - unit tests for problem.c: the error table and the RFC 9457
 * problem+json bodies (docs/reference.md "Errors"). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/json.h"
#include "retryd/problem.h"

static const struct {
    rd_problem_t p;
    int status;
    const char *slug;
    const char *title;
} expected[] = {
    { RD_PROBLEM_MALFORMED_REQUEST, 400, "malformed-request", "Malformed Request" },
    { RD_PROBLEM_UNAUTHORIZED, 401, "unauthorized", "Unauthorized" },
    { RD_PROBLEM_FORBIDDEN, 403, "forbidden", "Forbidden" },
    { RD_PROBLEM_NOT_FOUND, 404, "not-found", "Not Found" },
    { RD_PROBLEM_METHOD_NOT_ALLOWED, 405, "method-not-allowed", "Method Not Allowed" },
    { RD_PROBLEM_INVALID_STATE, 409, "invalid-state", "Invalid State" },
    { RD_PROBLEM_LEASE_MISMATCH, 409, "lease-mismatch", "Lease Mismatch" },
    { RD_PROBLEM_PAYLOAD_TOO_LARGE, 413, "payload-too-large", "Payload Too Large" },
    { RD_PROBLEM_EXPECTATION_FAILED, 417, "expectation-failed", "Expectation Failed" },
    { RD_PROBLEM_HEADERS_TOO_LARGE, 431, "request-header-too-large",
      "Request Header Fields Too Large" },
    { RD_PROBLEM_VALIDATION_FAILED, 422, "validation-failed", "Validation Failed" },
    { RD_PROBLEM_INTERNAL, 500, "internal-error", "Internal Server Error" },
    { RD_PROBLEM_NOT_IMPLEMENTED, 501, "not-implemented", "Not Implemented" },
    { RD_PROBLEM_BACKEND_UNAVAILABLE, 503, "backend-unavailable", "Backend Unavailable" },
    { RD_PROBLEM_OUTCOME_UNKNOWN, 503, "outcome-unknown", "Outcome Unknown" },
};

#define N_EXPECTED (sizeof expected / sizeof expected[0])

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

/* The body of p, checked to be compact valid JSON without raw control bytes,
 * parsed back. */
static rd_json_t *body_of(rd_problem_t p, const char *detail, const char *instance,
                          size_t instance_len, const rd_field_errors_t *errs)
{
    size_t len = 0;
    char *text = rd_problem_body(p, detail, instance, instance_len, errs, &len);
    assert_non_null(text);
    bool raw_control = false;
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)text[i] < 0x20) raw_control = true;
    }
    bool len_ok = len == strlen(text);
    bool has_nul = false;
    rd_json_t *doc = rd_json_parse(text, len, &has_nul);
    rd_free(text);
    assert_true(len_ok);
    assert_false(raw_control);
    assert_non_null(doc);
    assert_true(rd_json_is_object(doc));
    return doc;
}

static const char *str_member(const rd_json_t *doc, const char *name)
{
    const rd_json_t *v = rd_json_get(doc, name);
    if (v == NULL) fail_msg("member %s missing", name);
    if (!rd_json_is_string(v)) fail_msg("member %s is not a string", name);
    return rd_json_string(v);
}

static long long int_member(const rd_json_t *doc, const char *name)
{
    long long n = 0;
    if (!rd_json_integer(rd_json_get(doc, name), &n)) fail_msg("member %s not an integer", name);
    return n;
}

/* ---------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------- */

static void test_table_complete(void **state)
{
    assert_int_equal(N_EXPECTED, RD_PROBLEM_COUNT);
    for (size_t i = 0; i < N_EXPECTED; i++) {
        assert_int_equal(expected[i].p, (rd_problem_t)i);
        assert_int_equal(rd_problem_status(expected[i].p), expected[i].status);
        assert_string_equal(rd_problem_slug(expected[i].p), expected[i].slug);
    }
}

/* ---------------------------------------------------------------------------
 * Bodies
 * ------------------------------------------------------------------------- */

static void test_body_every_problem(void **state)
{
    const char *instance = "/queues/emails/messages/42";
    for (size_t i = 0; i < N_EXPECTED; i++) {
        char detail[64];
        snprintf(detail, sizeof detail, "detail number %zu.", i);
        rd_json_t *doc = body_of(expected[i].p, detail, instance, strlen(instance), NULL);
        char type[64];
        snprintf(type, sizeof type, "/problems/%s", expected[i].slug);
        assert_string_equal(str_member(doc, "type"), type);
        assert_string_equal(str_member(doc, "title"), expected[i].title);
        assert_int_equal(int_member(doc, "status"), expected[i].status);
        assert_int_equal(int_member(doc, "status"), rd_problem_status(expected[i].p));
        assert_string_equal(str_member(doc, "detail"), detail);
        assert_string_equal(str_member(doc, "instance"), instance);
        assert_null(rd_json_get(doc, "errors"));
        rd_json_free(doc);
    }
}

static void test_body_without_detail_or_instance(void **state)
{
    rd_json_t *doc = body_of(RD_PROBLEM_NOT_FOUND, NULL, NULL, 0, NULL);
    assert_string_equal(str_member(doc, "type"), "/problems/not-found");
    assert_int_equal(int_member(doc, "status"), 404);
    /* detail is optional in RFC 9457; when present it is a non-empty string. */
    const rd_json_t *detail = rd_json_get(doc, "detail");
    if (detail) assert_true(strlen(str_member(doc, "detail")) > 0);
    const rd_json_t *instance = rd_json_get(doc, "instance");
    if (instance) assert_string_equal(str_member(doc, "instance"), "");
    rd_json_free(doc);
}

static void test_body_instance_length_honoured(void **state)
{
    const char *path = "/queues/q/messagesGARBAGE";
    rd_json_t *doc = body_of(RD_PROBLEM_METHOD_NOT_ALLOWED, "d", path, 18, NULL);
    assert_string_equal(str_member(doc, "instance"), "/queues/q/messages");
    rd_json_free(doc);
}

/* A path of up to 16 KiB was echoed whole: instance keeps its first 256
 * bytes, cut before a character that would be split (no U+FFFD). */
static void test_body_instance_truncated(void **state)
{
    enum { LONG = 16 * 1024 };
    char *path = malloc(LONG);
    assert_non_null(path);
    memset(path, 'a', LONG);
    rd_json_t *doc = body_of(RD_PROBLEM_NOT_FOUND, NULL, path, LONG, NULL);
    const char *instance = str_member(doc, "instance");
    assert_int_equal(strlen(instance), 256);
    assert_memory_equal(instance, path, 256);
    rd_json_free(doc);

    /* 255 ASCII bytes, then U+00E9 across bytes 255-256: cut before it. */
    memcpy(path + 255, "\xC3\xA9", 2);
    doc = body_of(RD_PROBLEM_NOT_FOUND, NULL, path, LONG, NULL);
    instance = str_member(doc, "instance");
    assert_int_equal(strlen(instance), 255);
    rd_json_free(doc);
    /* U+65E5 (3 bytes) at 254-256, and a 4-byte emoji at 253-256. */
    memset(path, 'a', LONG);
    memcpy(path + 254, "\xE6\x97\xA5", 3);
    doc = body_of(RD_PROBLEM_NOT_FOUND, NULL, path, LONG, NULL);
    assert_int_equal(strlen(str_member(doc, "instance")), 254);
    rd_json_free(doc);
    memset(path, 'a', LONG);
    memcpy(path + 253, "\xF0\x9F\x8E\x89", 4);
    doc = body_of(RD_PROBLEM_NOT_FOUND, NULL, path, LONG, NULL);
    assert_int_equal(strlen(str_member(doc, "instance")), 253);
    rd_json_free(doc);
    /* A character that ends at byte 256 stays whole. */
    memset(path, 'a', LONG);
    memcpy(path + 254, "\xC3\xA9", 2);
    doc = body_of(RD_PROBLEM_NOT_FOUND, NULL, path, LONG, NULL);
    instance = str_member(doc, "instance");
    assert_int_equal(strlen(instance), 256);
    assert_memory_equal(instance + 254, "\xC3\xA9", 2);
    rd_json_free(doc);
    /* 256 bytes exactly: all of it. */
    doc = body_of(RD_PROBLEM_NOT_FOUND, NULL, path, 256, NULL);
    assert_int_equal(strlen(str_member(doc, "instance")), 256);
    rd_json_free(doc);
    free(path);
}

static void test_body_errors_array(void **state)
{
    rd_field_errors_t errs = { .count = 0 };
    rd_field_errors_add(&errs, "payload", "required", "payload is required.");
    rd_field_errors_add(&errs, "max_retries", "invalid", "max_retries must be between 1 and 10.");
    rd_json_t *doc = body_of(RD_PROBLEM_VALIDATION_FAILED, "The request is invalid.",
                             "/queues/q/messages", 18, &errs);
    assert_string_equal(str_member(doc, "type"), "/problems/validation-failed");
    assert_int_equal(int_member(doc, "status"), 422);
    const rd_json_t *list = rd_json_get(doc, "errors");
    assert_true(rd_json_is_array(list));
    assert_int_equal(rd_json_array_size(list), 2);
    const rd_json_t *e0 = rd_json_array_at(list, 0), *e1 = rd_json_array_at(list, 1);
    assert_true(rd_json_is_object(e0));
    assert_string_equal(str_member(e0, "field"), "payload");
    assert_string_equal(str_member(e0, "code"), "required");
    assert_string_equal(str_member(e0, "message"), "payload is required.");
    assert_string_equal(str_member(e1, "field"), "max_retries");
    assert_string_equal(str_member(e1, "code"), "invalid");
    assert_string_equal(str_member(e1, "message"), "max_retries must be between 1 and 10.");
    rd_json_free(doc);
}

static void test_body_no_errors_when_empty(void **state)
{
    rd_field_errors_t errs = { .count = 0 };
    rd_json_t *doc = body_of(RD_PROBLEM_VALIDATION_FAILED, "x", "/", 1, &errs);
    assert_null(rd_json_get(doc, "errors"));
    rd_json_free(doc);
}

static void test_body_escaping(void **state)
{
    const char *detail = "say \"hi\" \\ back\\slash\n\ttab \x01\x1f\x7f caf\xC3\xA9 </script>";
    const char *instance = "/queues/a\"b\\c\n/messages";
    rd_json_t *doc = body_of(RD_PROBLEM_INVALID_STATE, detail, instance, strlen(instance),
                             NULL);
    assert_string_equal(str_member(doc, "detail"), detail);
    assert_string_equal(str_member(doc, "instance"), instance);
    assert_string_equal(str_member(doc, "type"), "/problems/invalid-state");
    rd_json_free(doc);

    rd_field_errors_t errs = { .count = 0 };
    rd_field_errors_add(&errs, "q\"ueue", "invalid", "bad \\ \"name\"\n");
    doc = body_of(RD_PROBLEM_VALIDATION_FAILED, NULL, "/", 1, &errs);
    const rd_json_t *e = rd_json_array_at(rd_json_get(doc, "errors"), 0);
    assert_string_equal(str_member(e, "field"), "q\"ueue");
    assert_string_equal(str_member(e, "message"), "bad \\ \"name\"\n");
    rd_json_free(doc);
}

static void test_field_errors_capped(void **state)
{
    rd_field_errors_t errs = { .count = 0 };
    for (int i = 0; i < RD_MAX_FIELD_ERRORS + 3; i++)
        rd_field_errors_add(&errs, "f", "invalid", "m");
    assert_int_equal(errs.count, RD_MAX_FIELD_ERRORS);
    rd_json_t *doc = body_of(RD_PROBLEM_VALIDATION_FAILED, "d", "/", 1, &errs);
    assert_int_equal(rd_json_array_size(rd_json_get(doc, "errors")), RD_MAX_FIELD_ERRORS);
    rd_json_free(doc);
}

int main(void)
{
    rd_alloc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_complete),
        cmocka_unit_test(test_body_every_problem),
        cmocka_unit_test(test_body_without_detail_or_instance),
        cmocka_unit_test(test_body_instance_length_honoured),
        cmocka_unit_test(test_body_instance_truncated),
        cmocka_unit_test(test_body_errors_array),
        cmocka_unit_test(test_body_no_errors_when_empty),
        cmocka_unit_test(test_body_escaping),
        cmocka_unit_test(test_field_errors_capped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
