/* test_keys.c - unit tests for keys.c: the injective queue-name escape and the
 * key names built from it (docs/design.md "Where the state lives"). */
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
#include "retryd/buf.h"
#include "retryd/keys.h"

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

/* The escaped form of name[0..len) as a fresh NUL-terminated string (rd_free). */
static char *escape(const char *name, size_t len, size_t *out_len)
{
    rd_buf_t b = RD_BUF_INIT;
    rd_keys_escape_queue(&b, name, len);
    size_t n = 0;
    char *s = rd_buf_take(&b, &n);
    if (s == NULL) s = rd_strdup("");   /* nothing was appended */
    if (out_len) *out_len = n;
    rd_buf_free(&b);
    return s;
}

static void assert_escape(const char *name, size_t len, const char *want)
{
    size_t n;
    char *got = escape(name, len, &n);
    assert_string_equal(got, want);
    assert_int_equal(n, strlen(want));
    rd_free(got);
}

#define ESCAPE_LIT(lit, want) assert_escape((lit), sizeof(lit) - 1, (want))

/* Reverses the escape: "%XX" -> byte. Returns the decoded length. */
static size_t unescape(const char *s, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%') {
            unsigned v;
            char hex[3] = { s[i + 1], s[i + 2], '\0' };
            assert_int_equal(sscanf(hex, "%2X", &v), 1);
            out[n++] = (char)v;
            i += 2;
        } else {
            out[n++] = s[i];
        }
    }
    return n;
}

/* ---------------------------------------------------------------------------
 * The escape
 * ------------------------------------------------------------------------- */

static void test_escape_special_characters(void **state)
{
    ESCAPE_LIT("%", "%25");
    ESCAPE_LIT("{", "%7B");
    ESCAPE_LIT("}", "%7D");
    ESCAPE_LIT(":", "%3A");
    ESCAPE_LIT("\x7f", "%7F");
    ESCAPE_LIT("a:b", "a%3Ab");
    ESCAPE_LIT("a%3Ab", "a%253Ab");
    ESCAPE_LIT("a%b", "a%25b");
    ESCAPE_LIT("{q}", "%7Bq%7D");
    ESCAPE_LIT("x{y}:z%", "x%7By%7D%3Az%25");
}

static void test_escape_control_bytes_upper_hex(void **state)
{
    for (unsigned c = 0; c < 0x20; c++) {
        char in = (char)c;
        char want[4];
        snprintf(want, sizeof want, "%%%02X", c);
        assert_escape(&in, 1, want);
    }
    ESCAPE_LIT("\n", "%0A");
    ESCAPE_LIT("\x1f", "%1F");
    ESCAPE_LIT("a\tb", "a%09b");
}

static void test_escape_embedded_nul(void **state)
{
    const char in[] = { 'a', '\0', 'b' };
    assert_escape(in, sizeof in, "a%00b");
}

static void test_escape_plain_names_unchanged(void **state)
{
    const char *plain[] = {
        "emails", "a", "orders-v2_backup.1", "with space", "path/to/q",
        "caf\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC", "\xF0\x9F\x98\x80", "~!@#$^&*()[]<>?=+,;'\"\\|`",
        "\x80\xFF\xFE",  /* high bytes, even invalid UTF-8, are kept */
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        assert_escape(plain[i], strlen(plain[i]), plain[i]);
}

static void test_escape_every_byte(void **state)
{
    for (unsigned c = 0; c < 256; c++) {
        char in = (char)c;
        size_t n;
        char *got = escape(&in, 1, &n);
        bool special = c < 0x20 || c == 0x7f || c == '%' || c == '{' || c == '}' || c == ':';
        if (special) {
            char want[4];
            snprintf(want, sizeof want, "%%%02X", c);
            assert_string_equal(got, want);
        } else {
            assert_int_equal(n, 1);
            assert_int_equal((unsigned char)got[0], c);
        }
        rd_free(got);
    }
}

/* buf.h promises a NUL-terminated buffer: escaping "" into a fresh buffer must
 * leave it NULL (nothing allocated) or "" - never unterminated bytes. */
static void test_escape_empty(void **state)
{
    rd_buf_t b = RD_BUF_INIT;
    rd_keys_escape_queue(&b, "", 0);
    size_t len = b.len;
    unsigned char first = b.data ? (unsigned char)b.data[0] : 0;
    rd_buf_free(&b);
    assert_int_equal(len, 0);
    assert_int_equal(first, 0);

    rd_buf_puts(&b, "x");
    rd_keys_escape_queue(&b, "", 0);
    assert_string_equal(b.data, "x");
    rd_buf_free(&b);
}

static void test_escape_appends(void **state)
{
    rd_buf_t b = RD_BUF_INIT;
    rd_buf_puts(&b, "pre:");
    rd_keys_escape_queue(&b, "a:b", 3);
    assert_string_equal(b.data, "pre:a%3Ab");
    assert_int_equal(b.len, 9);
    rd_buf_free(&b);
}

static void test_escape_tricky_names_distinct(void **state)
{
    const char *names[] = { "a:b", "a%3Ab", "a%b", "a%25b", "a%253Ab", "a", "a:", "a%",
                            "a%3A", "{a}", "%7Ba%7D", "a}", "a%7D", ":", "%3A", "%",
                            "%25", "" };
    size_t count = sizeof names / sizeof names[0];
    char *esc[sizeof names / sizeof names[0]];
    for (size_t i = 0; i < count; i++) esc[i] = escape(names[i], strlen(names[i]), NULL);
    for (size_t i = 0; i < count; i++) {
        for (size_t j = i + 1; j < count; j++) {
            if (strcmp(esc[i], esc[j]) == 0)
                fail_msg("\"%s\" and \"%s\" both escape to \"%s\"", names[i], names[j], esc[i]);
        }
    }
    for (size_t i = 0; i < count; i++) rd_free(esc[i]);
}

#define RANDOM_NAMES 400

static void test_escape_random_injective_and_reversible(void **state)
{
    static char in[RANDOM_NAMES][12];
    static size_t in_len[RANDOM_NAMES];
    static char *out[RANDOM_NAMES];
    static size_t out_len[RANDOM_NAMES];
    /* A tiny alphabet heavy in special bytes makes near-collisions likely. */
    static const char alphabet[] = { '%', '{', '}', ':', '3', 'A', '2', '5', 'a', '\0', '\n',
                                     '\x7f', '\x80', '\xff', '7', 'B', 'D' };
    srand(12345);
    for (size_t i = 0; i < RANDOM_NAMES; i++) {
        in_len[i] = (size_t)(rand() % 12);
        for (size_t k = 0; k < in_len[i]; k++) {
            in[i][k] = (i % 2 == 0) ? alphabet[rand() % (int)sizeof alphabet]
                                    : (char)(rand() % 256);
        }
        out[i] = escape(in[i], in_len[i], &out_len[i]);

        /* Never a brace, so the hash tag is exactly the escaped name. */
        assert_null(memchr(out[i], '{', out_len[i]));
        assert_null(memchr(out[i], '}', out_len[i]));
        assert_null(memchr(out[i], ':', out_len[i]));
        for (size_t k = 0; k < out_len[i]; k++) {
            unsigned char c = (unsigned char)out[i][k];
            assert_true(c >= 0x20 && c != 0x7f);
        }
        /* Reversible, hence injective. */
        char back[12];
        size_t back_len = unescape(out[i], out_len[i], back);
        assert_int_equal(back_len, in_len[i]);
        assert_memory_equal(back, in[i], in_len[i]);
    }
    size_t distinct_pairs = 0;
    for (size_t i = 0; i < RANDOM_NAMES; i++) {
        for (size_t j = i + 1; j < RANDOM_NAMES; j++) {
            bool same_in = in_len[i] == in_len[j] && memcmp(in[i], in[j], in_len[i]) == 0;
            bool same_out = out_len[i] == out_len[j] && memcmp(out[i], out[j], out_len[i]) == 0;
            assert_int_equal(same_in, same_out);
            if (!same_in) distinct_pairs++;
        }
    }
    assert_true(distinct_pairs > 1000);
    for (size_t i = 0; i < RANDOM_NAMES; i++) rd_free(out[i]);
}

/* ---------------------------------------------------------------------------
 * Key names
 * ------------------------------------------------------------------------- */

static void test_queue_base(void **state)
{
    rd_buf_t b = RD_BUF_INIT;
    rd_keys_queue_base(&b, "retryd", "q", 1);
    assert_string_equal(b.data, "retryd:{q}");
    assert_int_equal(b.len, strlen("retryd:{q}"));
    rd_buf_free(&b);

    rd_keys_queue_base(&b, "retryd", "emails", 6);
    assert_string_equal(b.data, "retryd:{emails}");
    rd_buf_free(&b);

    rd_keys_queue_base(&b, "myapp", "a:{b}%", 6);
    assert_string_equal(b.data, "myapp:{a%3A%7Bb%7D%25}");
    rd_buf_free(&b);
}

static void test_wake_channel(void **state)
{
    rd_buf_t b = RD_BUF_INIT;
    rd_keys_wake(&b, "retryd", "a:b", 3);
    assert_string_equal(b.data, "retryd:{a%3Ab}:wake");
    rd_buf_free(&b);
}

static void test_queue_base_hash_tag_is_escaped_name(void **state)
{
    const char *names[] = { "q", "a}b", "{", "}{", "x:y", "caf\xC3\xA9" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        rd_buf_t b = RD_BUF_INIT;
        rd_keys_queue_base(&b, "retryd", names[i], strlen(names[i]));
        char *esc = escape(names[i], strlen(names[i]), NULL);
        /* Redis Cluster hashes the bytes between the first '{' and the next '}'. */
        const char *open = strchr(b.data, '{');
        assert_non_null(open);
        const char *close = strchr(open + 1, '}');
        assert_non_null(close);
        assert_int_equal((size_t)(close - open - 1), strlen(esc));
        assert_memory_equal(open + 1, esc, strlen(esc));
        assert_int_equal(close[1], '\0');
        rd_free(esc);
        rd_buf_free(&b);
    }
}

static void test_queue_base_binary_name(void **state)
{
    const char name[] = { 'a', '\0', 'b' };
    rd_buf_t b = RD_BUF_INIT;
    rd_keys_queue_base(&b, "retryd", name, sizeof name);
    assert_string_equal(b.data, "retryd:{a%00b}");
    rd_buf_free(&b);
}

static void test_message_key(void **state)
{
    rd_buf_t base = RD_BUF_INIT, key = RD_BUF_INIT;
    rd_keys_queue_base(&base, "retryd", "q", 1);
    rd_keys_message(&key, base.data, base.len, 42);
    assert_string_equal(key.data, "retryd:{q}:m:42");
    assert_int_equal(key.len, strlen("retryd:{q}:m:42"));
    rd_buf_reset(&key);
    rd_keys_message(&key, base.data, base.len, 1);
    assert_string_equal(key.data, "retryd:{q}:m:1");
    rd_buf_reset(&key);
    rd_keys_message(&key, base.data, base.len, 999999999999999LL);
    assert_string_equal(key.data, "retryd:{q}:m:999999999999999");
    rd_buf_reset(&key);
    /* base_len is honoured: only the first 10 bytes are the base. */
    rd_keys_message(&key, "retryd:{q}garbage", 10, 7);
    assert_string_equal(key.data, "retryd:{q}:m:7");
    rd_buf_free(&key);
    rd_buf_free(&base);
}

static void test_registry(void **state)
{
    rd_buf_t b = RD_BUF_INIT;
    rd_keys_registry(&b, "retryd");
    assert_string_equal(b.data, "retryd:queues");
    assert_int_equal(b.len, 13);
    rd_buf_free(&b);
    rd_keys_registry(&b, "other");
    assert_string_equal(b.data, "other:queues");
    rd_buf_free(&b);
}

/* The library the daemon loads names itself RD_LIBRARY_NAME, and registers
 * its functions under RD_FUNCTION(name): versioned functions for rolling
 * upgrades (docs/reference.md "Rolling upgrade"). */
extern const char rd_lua_library[];

static void test_library_name_matches_lua(void **state)
{
    const char *first = "#!lua name=" RD_LIBRARY_NAME "\n";
    assert_memory_equal(rd_lua_library, first, strlen(first));
    assert_non_null(strstr(rd_lua_library, "\n  local LIBRARY = '" RD_LIBRARY_NAME "'\n"));
    assert_string_equal(RD_FUNCTION("claim"), RD_LIBRARY_NAME "_claim");
    /* Every function goes through the versioning helper. */
    assert_null(strstr(rd_lua_library, "\nredis.register_function"));
}

int main(void)
{
    rd_alloc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape_special_characters),
        cmocka_unit_test(test_escape_control_bytes_upper_hex),
        cmocka_unit_test(test_escape_embedded_nul),
        cmocka_unit_test(test_escape_plain_names_unchanged),
        cmocka_unit_test(test_escape_every_byte),
        cmocka_unit_test(test_escape_empty),
        cmocka_unit_test(test_escape_appends),
        cmocka_unit_test(test_escape_tricky_names_distinct),
        cmocka_unit_test(test_escape_random_injective_and_reversible),
        cmocka_unit_test(test_queue_base),
        cmocka_unit_test(test_wake_channel),
        cmocka_unit_test(test_queue_base_hash_tag_is_escaped_name),
        cmocka_unit_test(test_queue_base_binary_name),
        cmocka_unit_test(test_message_key),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_library_name_matches_lua),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
