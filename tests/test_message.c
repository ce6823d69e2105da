/* test_message.c - unit tests for message.c: timestamps, statuses, hash
 * fields and the message's JSON form (docs/reference.md "Messages"). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/json.h"
#include "retryd/jsonw.h"
#include "retryd/message.h"

/* 2026-11-30T08:40:36.258Z (checked with `date -u -d @1796028036.258`). */
#define T_2026 1796028036258LL

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

static void assert_time(long long ms, const char *want)
{
    char out[32];
    memset(out, 'X', sizeof out);
    rd_format_time_ms(ms, out);
    assert_string_equal(out, want);
}

static void set(rd_message_t *m, const char *name, const char *value)
{
    rd_message_set_field(m, name, strlen(name), value, strlen(value));
}

/* rd_message_write_json's text (free with rd_free). */
static char *message_text(const rd_message_t *m, const char *queue, size_t queue_len,
                          bool with_token, size_t *len)
{
    rd_buf_t out = RD_BUF_INIT;
    rd_jsonw_t w;
    rd_jsonw_init(&w, &out);
    rd_message_write_json(&w, m, queue, queue_len, with_token);
    assert_int_equal(w.depth, 0);
    return rd_buf_take(&out, len);
}

/* rd_message_write_json's text parsed back: what a client would see. */
static rd_json_t *round_trip(const rd_message_t *m, const char *queue, size_t queue_len,
                             bool with_token, char **text_out)
{
    size_t len;
    char *text = message_text(m, queue, queue_len, with_token, &len);
    assert_int_equal(len, strlen(text));
    bool has_nul = false;
    rd_json_t *back = rd_json_parse(text, len, &has_nul);
    if (text_out) *text_out = text;
    else rd_free(text);
    assert_non_null(back);
    assert_true(rd_json_is_object(back));
    return back;
}

static void assert_json_string(const rd_json_t *obj, const char *name, const char *want)
{
    const rd_json_t *v = rd_json_get(obj, name);
    if (v == NULL) fail_msg("field %s missing", name);
    if (!rd_json_is_string(v)) fail_msg("field %s is not a string", name);
    assert_string_equal(rd_json_string(v), want);
}

static void assert_json_int(const rd_json_t *obj, const char *name, long long want)
{
    const rd_json_t *v = rd_json_get(obj, name);
    if (v == NULL) fail_msg("field %s missing", name);
    long long n;
    if (!rd_json_integer(v, &n)) fail_msg("field %s is not an integer", name);
    assert_int_equal(n, want);
}

static void assert_json_null(const rd_json_t *obj, const char *name)
{
    const rd_json_t *v = rd_json_get(obj, name);
    if (v == NULL) fail_msg("field %s missing", name);
    if (!rd_json_is_null(v)) fail_msg("field %s is not null", name);
}

/* A processing message as a claim leaves it. */
static void leased_message(rd_message_t *m)
{
    rd_message_init(m);
    m->id = 42;
    set(m, "payload", "hello {\"x\":1}");
    set(m, "status", "processing");
    set(m, "retry_count", "1");
    set(m, "max_retries", "5");
    set(m, "last_error", "timeout");
    set(m, "lease_expires_at", "1796028066258");
    set(m, "lease_token", "tok-abc");
    set(m, "created_at", "1796028000000");
    set(m, "updated_at", "1796028036258");
}

/* ---------------------------------------------------------------------------
 * rd_format_time_ms
 * ------------------------------------------------------------------------- */

static void test_format_time_epoch(void **state)
{
    assert_time(0, "1970-01-01T00:00:00.000Z");
    assert_time(1000, "1970-01-01T00:00:01.000Z");
    assert_time(86400000LL, "1970-01-02T00:00:00.000Z");
}

static void test_format_time_known_instant(void **state)
{
    assert_time(T_2026, "2026-11-30T08:40:36.258Z");
    char out[32];
    rd_format_time_ms(T_2026, out);
    assert_int_equal(strlen(out), 24);
}

static void test_format_time_leap_days(void **state)
{
    assert_time(1835440496007LL, "2028-02-29T12:34:56.007Z");
    assert_time(951868799999LL, "2000-02-29T23:59:59.999Z");
    assert_time(951868800000LL, "2000-03-01T00:00:00.000Z");
    assert_time(1835481599999LL, "2028-02-29T23:59:59.999Z");
    assert_time(1835481600000LL, "2028-03-01T00:00:00.000Z");
}

static void test_format_time_ms_padding(void **state)
{
    assert_time(5, "1970-01-01T00:00:00.005Z");
    assert_time(50, "1970-01-01T00:00:00.050Z");
    assert_time(999, "1970-01-01T00:00:00.999Z");
    assert_time(T_2026 - 258 + 9, "2026-11-30T08:40:36.009Z");
    assert_time(T_2026 - 258 + 90, "2026-11-30T08:40:36.090Z");
    assert_time(4102444799999LL, "2099-12-31T23:59:59.999Z");
}

static void test_format_time_before_epoch(void **state)
{
    assert_time(-1, "1969-12-31T23:59:59.999Z");
    assert_time(-1000, "1969-12-31T23:59:59.000Z");
}

/* ---------------------------------------------------------------------------
 * Statuses
 * ------------------------------------------------------------------------- */

static void test_status_round_trip(void **state)
{
    const char *names[] = { "pending", "processing", "succeeded", "dead" };
    const rd_status_t statuses[] = { RD_STATUS_PENDING, RD_STATUS_PROCESSING,
                                     RD_STATUS_SUCCEEDED, RD_STATUS_DEAD };
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(rd_status_name(statuses[i]), names[i]);
        assert_int_equal(rd_status_parse(names[i], strlen(names[i])), statuses[i]);
        const char *name = rd_status_name(statuses[i]);
        assert_int_equal(rd_status_parse(name, strlen(name)), statuses[i]);
    }
}

static void test_status_unknown(void **state)
{
    const char *bad[] = { "", "Pending", "PENDING", "pend", "pendingx", "unknown", "dead ",
                          " dead", "deleted", "failed" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(rd_status_parse(bad[i], strlen(bad[i])), RD_STATUS_UNKNOWN);
    assert_string_equal(rd_status_name(RD_STATUS_UNKNOWN), "unknown");
    /* len bounds the name. */
    assert_int_equal(rd_status_parse("deadbeef", 4), RD_STATUS_DEAD);
    assert_int_equal(rd_status_parse("dea", 3), RD_STATUS_UNKNOWN);
    assert_int_equal(rd_status_parse("dead\0", 5), RD_STATUS_UNKNOWN);
}

/* ---------------------------------------------------------------------------
 * Fields
 * ------------------------------------------------------------------------- */

static void test_message_init(void **state)
{
    rd_message_t m;
    memset(&m, 0x5a, sizeof m);
    rd_message_init(&m);
    assert_int_equal(m.id, 0);
    assert_int_equal(m.status, RD_STATUS_UNKNOWN);
    assert_null(m.payload.ptr);
    assert_int_equal(m.payload.len, 0);
    assert_int_equal(m.retry_count, 0);
    assert_int_equal(m.max_retries, 0);
    assert_int_equal(m.retry_after_ms, -1);
    assert_null(m.last_error.ptr);
    assert_int_equal(m.lease_expires_at_ms, -1);
    assert_null(m.lease_token.ptr);
    assert_int_equal(m.created_at_ms, 0);
    assert_int_equal(m.updated_at_ms, 0);
    assert_int_equal(m.priority, 0);
    assert_int_equal(m.expires_at_ms, -1);
}

static void test_set_every_field(void **state)
{
    rd_message_t m;
    rd_message_init(&m);
    set(&m, "status", "dead");
    assert_int_equal(m.status, RD_STATUS_DEAD);
    set(&m, "status", "pending");
    assert_int_equal(m.status, RD_STATUS_PENDING);
    set(&m, "retry_count", "4");
    assert_int_equal(m.retry_count, 4);
    set(&m, "max_retries", "10");
    assert_int_equal(m.max_retries, 10);
    set(&m, "retry_after", "1796028038258");
    assert_int_equal(m.retry_after_ms, 1796028038258LL);
    set(&m, "lease_expires_at", "1796028066258");
    assert_int_equal(m.lease_expires_at_ms, 1796028066258LL);
    set(&m, "created_at", "1796028000000");
    assert_int_equal(m.created_at_ms, 1796028000000LL);
    set(&m, "updated_at", "1796028036258");
    assert_int_equal(m.updated_at_ms, 1796028036258LL);
    set(&m, "priority", "7");
    assert_int_equal(m.priority, 7);
    set(&m, "expires_at", "1796028096258");
    assert_int_equal(m.expires_at_ms, 1796028096258LL);

    const char *err = "connection refused";
    set(&m, "last_error", err);
    assert_ptr_equal(m.last_error.ptr, err);
    assert_int_equal(m.last_error.len, strlen(err));
    const char *tok = "0123456789abcdef";
    set(&m, "lease_token", tok);
    assert_ptr_equal(m.lease_token.ptr, tok);
    assert_int_equal(m.lease_token.len, 16);
    set(&m, "payload", "p");
    assert_int_equal(m.payload.len, 1);
    assert_memory_equal(m.payload.ptr, "p", 1);
}

static void test_set_binary_payload(void **state)
{
    rd_message_t m;
    rd_message_init(&m);
    const char payload[] = { 'a', '\0', 'b', '\xff', '\0' };
    rd_message_set_field(&m, "payload", 7, payload, sizeof payload);
    assert_ptr_equal(m.payload.ptr, payload);
    assert_int_equal(m.payload.len, 5);
    assert_memory_equal(m.payload.ptr, payload, 5);

    rd_message_set_field(&m, "payload", 7, "", 0);
    assert_non_null(m.payload.ptr);
    assert_int_equal(m.payload.len, 0);
}

static void test_set_field_name_is_exact(void **state)
{
    rd_message_t m, before;
    rd_message_init(&m);
    set(&m, "status", "pending");
    memcpy(&before, &m, sizeof m);
    /* Unknown or near-miss names change nothing. */
    set(&m, "dead_at", "1796028036258");
    set(&m, "Status", "dead");
    set(&m, "statu", "dead");
    set(&m, "statuss", "dead");
    set(&m, "retry", "7");
    set(&m, "", "x");
    rd_message_set_field(&m, "status", 5, "dead", 4);
    assert_memory_equal(&m, &before, sizeof m);
    /* name_len bounds the name. */
    rd_message_set_field(&m, "statusXYZ", 6, "dead", 4);
    assert_int_equal(m.status, RD_STATUS_DEAD);
    rd_message_set_field(&m, "retry_countdown", 11, "9", 1);
    assert_int_equal(m.retry_count, 9);
}

static void test_set_field_bad_numbers(void **state)
{
    rd_message_t m;
    rd_message_init(&m);
    set(&m, "retry_after", "1796028038258");
    set(&m, "retry_after", "");
    assert_int_equal(m.retry_after_ms, -1);
    set(&m, "lease_expires_at", "12x");
    assert_int_equal(m.lease_expires_at_ms, -1);
    set(&m, "lease_expires_at", "abc");
    assert_int_equal(m.lease_expires_at_ms, -1);
    set(&m, "status", "bogus");
    assert_int_equal(m.status, RD_STATUS_UNKNOWN);
    /* value_len bounds the value. */
    rd_message_set_field(&m, "retry_after", 11, "123456", 3);
    assert_int_equal(m.retry_after_ms, 123);
    rd_message_set_field(&m, "status", 6, "deadly", 4);
    assert_int_equal(m.status, RD_STATUS_DEAD);
}

/* ---------------------------------------------------------------------------
 * JSON form
 * ------------------------------------------------------------------------- */

static void test_json_leased_message_with_token(void **state)
{
    rd_message_t m;
    leased_message(&m);
    rd_json_t *j = round_trip(&m, "emails", 6, true, NULL);
    assert_json_int(j, "id", 42);
    assert_json_string(j, "queue", "emails");
    assert_json_string(j, "payload", "hello {\"x\":1}");
    assert_json_string(j, "status", "processing");
    assert_json_int(j, "retry_count", 1);
    assert_json_int(j, "max_retries", 5);
    assert_json_null(j, "retry_after");
    assert_json_string(j, "last_error", "timeout");
    assert_json_string(j, "lease_expires_at", "2026-11-30T08:41:06.258Z");
    assert_json_string(j, "lease_token", "tok-abc");
    assert_json_string(j, "created_at", "2026-11-30T08:40:00.000Z");
    assert_json_string(j, "updated_at", "2026-11-30T08:40:36.258Z");
    rd_json_free(j);
}

static void test_json_without_token(void **state)
{
    rd_message_t m;
    leased_message(&m);
    rd_json_t *j = round_trip(&m, "emails", 6, false, NULL);
    bool has_token = rd_json_get(j, "lease_token") != NULL;
    assert_json_string(j, "status", "processing");
    assert_json_string(j, "lease_expires_at", "2026-11-30T08:41:06.258Z");
    rd_json_free(j);
    assert_false(has_token);
}

static void test_json_pending_message(void **state)
{
    rd_message_t m;
    rd_message_init(&m);
    m.id = 1;
    set(&m, "payload", "");
    set(&m, "status", "pending");
    set(&m, "retry_count", "0");
    set(&m, "max_retries", "3");
    set(&m, "created_at", "0");
    set(&m, "updated_at", "0");
    rd_json_t *j = round_trip(&m, "q", 1, false, NULL);
    assert_json_int(j, "id", 1);
    assert_json_string(j, "queue", "q");
    assert_json_string(j, "payload", "");
    assert_json_string(j, "status", "pending");
    assert_json_int(j, "retry_count", 0);
    assert_json_int(j, "max_retries", 3);
    assert_json_null(j, "retry_after");
    assert_json_null(j, "last_error");
    assert_json_null(j, "lease_expires_at");
    assert_json_string(j, "created_at", "1970-01-01T00:00:00.000Z");
    assert_json_string(j, "updated_at", "1970-01-01T00:00:00.000Z");
    assert_null(rd_json_get(j, "lease_token"));
    /* Always shown: priority 0 and no expiry by default (docs/reference.md "Messages"). */
    assert_json_int(j, "priority", 0);
    assert_json_null(j, "expires_at");
    rd_json_free(j);
}

/* A message's priority and expires_at (set from the library's optional
 * fields) are in its JSON, expires_at as the other times are. */
static void test_json_priority_and_expiry(void **state)
{
    rd_message_t m;
    leased_message(&m);
    set(&m, "priority", "9");
    set(&m, "expires_at", "1796028096258");
    rd_json_t *j = round_trip(&m, "emails", 6, true, NULL);
    assert_json_int(j, "priority", 9);
    assert_json_string(j, "expires_at", "2026-11-30T08:41:36.258Z");
    rd_json_free(j);
}

static void test_json_retrying_message(void **state)
{
    rd_message_t m;
    rd_message_init(&m);
    m.id = 999999999999999LL;
    set(&m, "payload", "p");
    set(&m, "status", "pending");
    set(&m, "retry_count", "2");
    set(&m, "max_retries", "5");
    set(&m, "retry_after", "1835440496007");
    set(&m, "last_error", "HTTP 500: \"oops\"\n\tat line 3");
    set(&m, "created_at", "1835440400000");
    set(&m, "updated_at", "1835440492007");
    rd_json_t *j = round_trip(&m, "caf\xC3\xA9/x", 7, false, NULL);
    assert_json_int(j, "id", 999999999999999LL);
    assert_json_string(j, "queue", "caf\xC3\xA9/x");
    assert_json_string(j, "retry_after", "2028-02-29T12:34:56.007Z");
    assert_json_string(j, "last_error", "HTTP 500: \"oops\"\n\tat line 3");
    assert_json_int(j, "retry_count", 2);
    rd_json_free(j);
}

static void test_json_dead_and_succeeded(void **state)
{
    rd_message_t m;
    rd_message_init(&m);
    m.id = 7;
    set(&m, "payload", "x");
    set(&m, "status", "dead");
    set(&m, "retry_count", "3");
    set(&m, "max_retries", "3");
    set(&m, "last_error", "lease expired");
    set(&m, "created_at", "1000");
    set(&m, "updated_at", "2000");
    rd_json_t *j = round_trip(&m, "q", 1, false, NULL);
    assert_json_string(j, "status", "dead");
    assert_json_string(j, "last_error", "lease expired");
    assert_json_null(j, "retry_after");
    assert_json_null(j, "lease_expires_at");
    rd_json_free(j);

    set(&m, "status", "succeeded");
    j = round_trip(&m, "q", 1, false, NULL);
    assert_json_string(j, "status", "succeeded");
    rd_json_free(j);
}

/* with_token on a message that has none: the field is there, null. */
static void test_json_token_absent(void **state)
{
    rd_message_t m;
    rd_message_init(&m);
    m.id = 3;
    set(&m, "status", "pending");
    rd_json_t *j = round_trip(&m, "q", 1, true, NULL);
    assert_json_null(j, "lease_token");
    assert_json_string(j, "payload", "");
    rd_json_free(j);
}

/* queue_len and payload len bound the strings. */
static void test_json_lengths_honoured(void **state)
{
    rd_message_t m;
    rd_message_init(&m);
    m.id = 5;
    rd_message_set_field(&m, "payload", 7, "abcdef", 3);
    set(&m, "status", "pending");
    rd_json_t *j = round_trip(&m, "queue-and-more", 5, false, NULL);
    assert_json_string(j, "queue", "queue");
    assert_json_string(j, "payload", "abc");
    rd_json_free(j);
}

/* docs/reference.md "Messages": the payload is returned byte-for-byte. A payload with an embedded
 * NUL (possible through FCALL/redis-cli) must come out as "\u0000", not cut. */
static void test_json_payload_with_nul_not_truncated(void **state)
{
    rd_message_t m;
    rd_message_init(&m);
    m.id = 6;
    const char payload[] = { 'a', '\0', 'b' };
    rd_message_set_field(&m, "payload", 7, payload, sizeof payload);
    set(&m, "status", "pending");
    char *text = message_text(&m, "q", 1, false, NULL);
    bool whole = strstr(text, "\"payload\":\"a\\u0000b\"") != NULL;
    char shown[256];
    strncpy(shown, text, sizeof shown - 1);
    shown[sizeof shown - 1] = '\0';
    rd_free(text);
    if (!whole) fail_msg("payload cut at the NUL: %s", shown);
}

/* Nothing retryd answers is invalid JSON (docs/reference.md "Text"): text stored
 * before the API checked UTF-8, or written through FCALL/redis-cli, comes out
 * with each byte that does not start a valid sequence as U+FFFD; valid text
 * around it (and a NUL) is kept. */
static void test_json_invalid_utf8_written_as_replacement(void **state)
{
    static const struct { const char *in; size_t len; const char *out; } cases[] = {
        { "\xff\xfe", 2, "\"payload\":\"\xEF\xBF\xBD\xEF\xBF\xBD\"" },
        { "ok\xC3", 3, "\"payload\":\"ok\xEF\xBF\xBD\"" },
        { "\xED\xA0\x80!", 4, "\"payload\":\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD!\"" },
        { "\xC0\xAF\xC3\xA9", 4, "\"payload\":\"\xEF\xBF\xBD\xEF\xBF\xBD\xC3\xA9\"" },
        { "\xF4\x90\x80\x80", 4,
          "\"payload\":\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"" },
        { "a\0\xff", 3, "\"payload\":\"a\\u0000\xEF\xBF\xBD\"" },
        { "caf\xC3\xA9 \xF0\x9F\x98\x80", 10, "\"payload\":\"caf\xC3\xA9 \xF0\x9F\x98\x80\"" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rd_message_t m;
        rd_message_init(&m);
        m.id = 7;
        rd_message_set_field(&m, "payload", 7, cases[i].in, cases[i].len);
        rd_message_set_field(&m, "last_error", 10, "\xfe" "err", 4);
        set(&m, "status", "dead");
        size_t len;
        char *text = message_text(&m, "q\xff", 2, false, &len);
        bool good = strstr(text, cases[i].out) != NULL &&
                    strstr(text, "\"last_error\":\"\xEF\xBF\xBD" "err\"") != NULL &&
                    strstr(text, "\"queue\":\"q\xEF\xBF\xBD\"") != NULL;
        /* The whole document is UTF-8 and parses back. */
        for (size_t j = 0; good && j < len;) {
            const unsigned char *u = (const unsigned char *)text + j;
            size_t n = u[0] < 0x80 ? 1 : (u[0] & 0xE0) == 0xC0 ? 2 : (u[0] & 0xF0) == 0xE0 ? 3
                     : (u[0] & 0xF8) == 0xF0 ? 4 : 0;
            if (n == 0 || j + n > len) good = false;
            for (size_t k = 1; good && k < n; k++) good = (u[k] & 0xC0) == 0x80;
            j += n ? n : 1;
        }
        rd_json_t *back = rd_json_parse(text, len, NULL);
        good = good && back != NULL;
        rd_json_free(back);
        if (!good) fail_msg("case %zu: %s", i, text);
        rd_free(text);
    }
}

int main(void)
{
    rd_alloc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_time_epoch),
        cmocka_unit_test(test_format_time_known_instant),
        cmocka_unit_test(test_format_time_leap_days),
        cmocka_unit_test(test_format_time_ms_padding),
        cmocka_unit_test(test_format_time_before_epoch),
        cmocka_unit_test(test_status_round_trip),
        cmocka_unit_test(test_status_unknown),
        cmocka_unit_test(test_message_init),
        cmocka_unit_test(test_set_every_field),
        cmocka_unit_test(test_set_binary_payload),
        cmocka_unit_test(test_set_field_name_is_exact),
        cmocka_unit_test(test_set_field_bad_numbers),
        cmocka_unit_test(test_json_leased_message_with_token),
        cmocka_unit_test(test_json_without_token),
        cmocka_unit_test(test_json_pending_message),
        cmocka_unit_test(test_json_priority_and_expiry),
        cmocka_unit_test(test_json_retrying_message),
        cmocka_unit_test(test_json_dead_and_succeeded),
        cmocka_unit_test(test_json_token_absent),
        cmocka_unit_test(test_json_lengths_honoured),
        cmocka_unit_test(test_json_payload_with_nul_not_truncated),
        cmocka_unit_test(test_json_invalid_utf8_written_as_replacement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
