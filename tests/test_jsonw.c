/* test_jsonw.c - unit tests for jsonw.c, the streaming JSON writer: its
 * structure and escapes, strings parsed back strictly, and the same bytes as
 * the cJSON documents it replaced on the response path. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/json.h"
#include "retryd/jsonw.h"
#include "retryd/message.h"

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

static void assert_text(const rd_buf_t *b, const char *want, size_t want_len)
{
    if (b->len != want_len || memcmp(b->data, want, want_len) != 0)
        fail_msg("wrote [%.*s] (%zu bytes), want [%.*s] (%zu bytes)", (int)b->len, b->data,
                 b->len, (int)want_len, want, want_len);
}

/* {"s": s[0..len)} written, parsed back strictly, and its string. */
static void assert_string_round_trip(const char *s, size_t len, const char *want_text,
                                     const char *want_value, size_t want_value_len)
{
    rd_buf_t out = RD_BUF_INIT;
    rd_jsonw_t w;
    rd_jsonw_init(&w, &out);
    rd_jsonw_stringn(&w, s, len);
    assert_text(&out, want_text, strlen(want_text));
    /* parsed back: cJSON cuts strings at NUL, so compare a NUL-free value */
    bool has_nul = false;
    rd_json_t *back = rd_json_parse(out.data, out.len, &has_nul);
    assert_non_null(back);
    assert_true(rd_json_is_string(back));
    if (memchr(want_value, '\0', want_value_len) == NULL) {
        assert_false(has_nul);
        assert_int_equal(strlen(rd_json_string(back)), want_value_len);
        assert_memory_equal(rd_json_string(back), want_value, want_value_len);
    } else {
        assert_true(has_nul);
    }
    rd_json_free(back);
    rd_buf_free(&out);
}

/* ---------------------------------------------------------------------------
 * Structure
 * ------------------------------------------------------------------------- */

static void test_nested_commas_and_colons(void **state)
{
    rd_buf_t out = RD_BUF_INIT;
    rd_jsonw_t w;
    rd_jsonw_init(&w, &out);
    rd_jsonw_object_open(&w);
    rd_jsonw_key(&w, "a");
    rd_jsonw_array_open(&w);
    rd_jsonw_int(&w, 1);
    rd_jsonw_object_open(&w);
    rd_jsonw_object_close(&w);
    rd_jsonw_array_open(&w);
    rd_jsonw_array_close(&w);
    rd_jsonw_null(&w);
    rd_jsonw_array_close(&w);
    rd_jsonw_key(&w, "b");
    rd_jsonw_bool(&w, true);
    rd_jsonw_key(&w, "c");
    rd_jsonw_bool(&w, false);
    rd_jsonw_key(&w, "t");
    rd_jsonw_plain_string(&w, "2026-11-30T08:40:36.258Z", 24);
    rd_jsonw_key(&w, "e");
    rd_jsonw_object_open(&w);
    rd_jsonw_key(&w, "x");
    rd_jsonw_string(&w, "y");
    rd_jsonw_object_close(&w);
    rd_jsonw_object_close(&w);
    assert_int_equal(w.depth, 0);
    const char *want =
        "{\"a\":[1,{},[],null],\"b\":true,\"c\":false,\"t\":\"2026-11-30T08:40:36.258Z\","
        "\"e\":{\"x\":\"y\"}}";
    assert_text(&out, want, strlen(want));
    rd_json_t *back = rd_json_parse(out.data, out.len, NULL);
    assert_non_null(back);
    rd_json_free(back);
    rd_buf_free(&out);
}

static void test_integers(void **state)
{
    static const struct { long long v; const char *text; } cases[] = {
        { 0, "0" }, { 7, "7" }, { -1, "-1" }, { 1796028036258LL, "1796028036258" },
        { LLONG_MAX, "9223372036854775807" }, { LLONG_MIN, "-9223372036854775808" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rd_buf_t out = RD_BUF_INIT;
        rd_jsonw_t w;
        rd_jsonw_init(&w, &out);
        rd_jsonw_int(&w, cases[i].v);
        assert_text(&out, cases[i].text, strlen(cases[i].text));
        rd_buf_free(&out);
    }
}

/* A buffer that already holds text (the writer appends, never resets). */
static void test_appends_to_existing_text(void **state)
{
    rd_buf_t out = RD_BUF_INIT;
    rd_buf_puts(&out, "x=");
    rd_jsonw_t w;
    rd_jsonw_init(&w, &out);
    rd_jsonw_array_open(&w);
    rd_jsonw_string(&w, "a");
    rd_jsonw_string(&w, "b");
    rd_jsonw_array_close(&w);
    assert_text(&out, "x=[\"a\",\"b\"]", 11);
    rd_buf_free(&out);
}

/* ---------------------------------------------------------------------------
 * Strings
 * ------------------------------------------------------------------------- */

static void test_escapes(void **state)
{
    assert_string_round_trip("plain /text~", 12, "\"plain /text~\"", "plain /text~", 12);
    assert_string_round_trip("q\"b\\", 4, "\"q\\\"b\\\\\"", "q\"b\\", 4);
    assert_string_round_trip("\b\f\n\r\t", 5, "\"\\b\\f\\n\\r\\t\"", "\b\f\n\r\t", 5);
    assert_string_round_trip("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\x7f\"", "\x01\x1f\x7f", 3);
    assert_string_round_trip("", 0, "\"\"", "", 0);
}

/* Binary-safe: NUL is \u0000 and the bytes after it are kept. */
static void test_nul_written_as_escape(void **state)
{
    assert_string_round_trip("a\0b", 3, "\"a\\u0000b\"", "a\0b", 3);
    assert_string_round_trip("\0", 1, "\"\\u0000\"", "\0", 1);
}

/* Each byte that does not start a valid sequence becomes U+FFFD, as
 * rd_json_set_stringn writes it; valid multi-byte text is kept. */
static void test_invalid_utf8_as_replacement(void **state)
{
    assert_string_round_trip("\xff\xfe", 2, "\"\xEF\xBF\xBD\xEF\xBF\xBD\"",
                             "\xEF\xBF\xBD\xEF\xBF\xBD", 6);
    assert_string_round_trip("ok\xC3", 3, "\"ok\xEF\xBF\xBD\"", "ok\xEF\xBF\xBD", 5);
    assert_string_round_trip("\xED\xA0\x80!", 4, "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD!\"",
                             "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD!", 10);
    assert_string_round_trip("caf\xC3\xA9 \xF0\x9F\x98\x80", 10,
                             "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"", "caf\xC3\xA9 \xF0\x9F\x98\x80", 10);
    assert_string_round_trip("\"\xC0\xAF\n", 4, "\"\\\"\xEF\xBF\xBD\xEF\xBF\xBD\\n\"",
                             "\"\xEF\xBF\xBD\xEF\xBF\xBD\n", 8);
}

/* ---------------------------------------------------------------------------
 * The same bytes as the cJSON documents
 * ------------------------------------------------------------------------- */

/* Every string as rd_json_set_stringn writes it, through cJSON. */
static char *cjson_string_text(const char *s, size_t len)
{
    rd_json_t *o = rd_json_new_object();
    rd_json_set_stringn(o, "s", s, len);
    char *text = rd_json_print(o, NULL);
    rd_json_free(o);
    return text;
}

static void test_strings_match_cjson(void **state)
{
    /* every byte value alone, then runs mixing the awkward ones */
    char one[1];
    for (int b = 0; b < 256; b++) {
        one[0] = (char)b;
        char *want = cjson_string_text(one, 1);
        rd_buf_t out = RD_BUF_INIT;
        rd_jsonw_t w;
        rd_jsonw_init(&w, &out);
        rd_jsonw_object_open(&w);
        rd_jsonw_key(&w, "s");
        rd_jsonw_stringn(&w, one, 1);
        rd_jsonw_object_close(&w);
        if (strcmp(out.data, want) != 0) fail_msg("byte 0x%02x: %s vs cJSON %s", b, out.data, want);
        rd_free(want);
        rd_buf_free(&out);
    }
    static const struct { const char *s; size_t len; } runs[] = {
#define RUN(lit) { lit, sizeof lit - 1 }
        RUN("a\0\"\\\x01\xff\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x90\x80\x80z"),
        RUN("\xE2\x82"), RUN("line1\r\nline2\ttab"), RUN("{\"json\":[1,2]}"),
#undef RUN
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char *want = cjson_string_text(runs[i].s, runs[i].len);
        rd_buf_t out = RD_BUF_INIT;
        rd_jsonw_t w;
        rd_jsonw_init(&w, &out);
        rd_jsonw_object_open(&w);
        rd_jsonw_key(&w, "s");
        rd_jsonw_stringn(&w, runs[i].s, runs[i].len);
        rd_jsonw_object_close(&w);
        if (strcmp(out.data, want) != 0) fail_msg("run %zu: %s vs cJSON %s", i, out.data, want);
        rd_free(want);
        rd_buf_free(&out);
    }
}

/* A message as the cJSON document the response path built before the writer
 * (the same fields, in the same order, through rd_json_set_*). */
static void cjson_time(rd_json_t *o, const char *name, long long ms)
{
    if (ms < 0) {
        rd_json_set_null(o, name);
        return;
    }
    char ts[32];
    rd_format_time_ms(ms, ts);
    rd_json_set_string(o, name, ts);
}

static void cjson_optional(rd_json_t *o, const char *name, rd_str_t s)
{
    if (s.ptr) rd_json_set_stringn(o, name, s.ptr, s.len);
    else rd_json_set_null(o, name);
}

static char *cjson_message_text(const rd_message_t *m, const char *queue, size_t queue_len,
                                bool with_token)
{
    rd_json_t *o = rd_json_new_object();
    rd_json_set_int(o, "id", m->id);
    rd_json_set_stringn(o, "queue", queue, queue_len);
    rd_json_set_stringn(o, "payload", m->payload.ptr ? m->payload.ptr : "", m->payload.len);
    rd_json_set_string(o, "status", rd_status_name(m->status));
    rd_json_set_int(o, "retry_count", m->retry_count);
    rd_json_set_int(o, "max_retries", m->max_retries);
    rd_json_set_int(o, "priority", m->priority);
    cjson_optional(o, "group", m->group);
    cjson_time(o, "retry_after", m->retry_after_ms);
    cjson_optional(o, "last_error", m->last_error);
    cjson_time(o, "lease_expires_at", m->lease_expires_at_ms);
    if (with_token) cjson_optional(o, "lease_token", m->lease_token);
    if (m->idempotency_key.ptr) cjson_optional(o, "idempotency_key", m->idempotency_key);
    cjson_time(o, "created_at", m->created_at_ms);
    cjson_time(o, "updated_at", m->updated_at_ms);
    cjson_time(o, "expires_at", m->expires_at_ms);
    cjson_optional(o, "worker", m->worker);
    rd_json_set(o, "history", rd_json_new_array());   /* no history reply here */
    rd_json_set_int(o, "history_dropped", m->history_dropped);
    char *text = rd_json_print(o, NULL);
    rd_json_free(o);
    return text;
}

static void set(rd_message_t *m, const char *name, const char *value, size_t len)
{
    rd_message_set_field(m, name, strlen(name), value, len);
}

static void test_messages_match_cjson(void **state)
{
    rd_message_t full, bare;
    rd_message_init(&full);
    full.id = 42;
    set(&full, "payload", "{\"k\":\"v\\n\"}\0\xff", 14);
    set(&full, "status", "processing", 10);
    set(&full, "retry_count", "2", 1);
    set(&full, "max_retries", "5", 1);
    set(&full, "retry_after", "1796028036258", 13);
    set(&full, "last_error", "boom\t\x01", 6);
    set(&full, "lease_expires_at", "1796028066258", 13);
    set(&full, "lease_token", "tok-1", 5);
    set(&full, "idempotency_key", "k\xC3", 2);
    set(&full, "created_at", "1796028000000", 13);
    set(&full, "updated_at", "1796028036259", 13);
    set(&full, "priority", "7", 1);
    set(&full, "group", "tenant-7", 8);
    set(&full, "expires_at", "1796028096259", 13);
    set(&full, "worker", "host-1/7", 8);
    set(&full, "history_dropped", "3", 1);
    rd_message_init(&bare);
    bare.id = 1;
    set(&bare, "status", "pending", 7);
    const struct { const rd_message_t *m; const char *queue; size_t queue_len; } cases[] = {
        { &full, "orders", 6 }, { &full, "q\xff", 2 }, { &bare, "q", 1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int tok = 0; tok < 2; tok++) {
            char *want = cjson_message_text(cases[i].m, cases[i].queue, cases[i].queue_len, tok);
            rd_buf_t out = RD_BUF_INIT;
            rd_jsonw_t w;
            rd_jsonw_init(&w, &out);
            rd_message_write_json(&w, cases[i].m, cases[i].queue, cases[i].queue_len, tok);
            if (strcmp(out.data, want) != 0)
                fail_msg("case %zu token %d:\n%s\nvs cJSON\n%s", i, tok, out.data, want);
            rd_json_t *back = rd_json_parse(out.data, out.len, NULL);
            assert_non_null(back);
            rd_json_free(back);
            rd_free(want);
            rd_buf_free(&out);
        }
    }
}

/* A long string of bytes that each grow (\u0001, U+FFFD, \n) makes the
 * writer grow its buffer in the middle of the string, many times over. */
static void test_escapes_grow_the_buffer(void **state)
{
    char in[3000];
    for (size_t i = 0; i < sizeof in; i++) in[i] = "\x01\xff\na"[i % 4];
    char *want = cjson_string_text(in, sizeof in);
    rd_buf_t out = RD_BUF_INIT;
    rd_jsonw_t w;
    rd_jsonw_init(&w, &out);
    rd_jsonw_object_open(&w);
    rd_jsonw_key(&w, "s");
    rd_jsonw_stringn(&w, in, sizeof in);
    rd_jsonw_object_close(&w);
    assert_int_equal(out.len, strlen(want));
    assert_string_equal(out.data, want);
    rd_free(want);
    rd_buf_free(&out);
}

int main(void)
{
    rd_alloc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nested_commas_and_colons),
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_appends_to_existing_text),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_nul_written_as_escape),
        cmocka_unit_test(test_invalid_utf8_as_replacement),
        cmocka_unit_test(test_strings_match_cjson),
        cmocka_unit_test(test_messages_match_cjson),
        cmocka_unit_test(test_escapes_grow_the_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
