/* test_shards.c - unit tests for shards.c and keys.c's shard bases: the
 * hash against tests/fixtures/shard_vectors.txt (tests/shard_vectors.py, an
 * implementation of its own) and docs/sharding.md's quoted values, the id
 * ranges at their 10^13 boundaries, shard bases beside names holding ':',
 * and the cursor prefix. */
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
#include "retryd/shards.h"

static const char VECTORS[] = "tests/fixtures/shard_vectors.txt";

/* The bytes of hex ("-": none) into out; their count. */
static size_t unhex(const char *hex, unsigned char *out, size_t cap)
{
    if (strcmp(hex, "-") == 0) return 0;
    size_t n = strlen(hex) / 2;
    assert_true(n <= cap);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (unsigned char)v;
    }
    return n;
}

/* Every line of the vectors file: fnv and jump for N = 1..64. */
static void test_vectors_file(void **state)
{
    (void)state;
    FILE *f = fopen(VECTORS, "r");
    assert_non_null(f);
    char line[4096];
    int names = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char *save = NULL, *tok = strtok_r(line, " \n", &save);
        unsigned char name[512];
        size_t len = unhex(tok, name, sizeof name);
        unsigned long want_fnv = strtoul(strtok_r(NULL, " \n", &save), NULL, 10);
        uint32_t h = rd_shards_fnv(name, len);
        assert_int_equal(h, want_fnv);
        for (int n = 1; n <= RD_SHARDS_MAX; n++) {
            tok = strtok_r(NULL, " \n", &save);
            assert_non_null(tok);
            assert_int_equal(rd_shards_jump(h, n), atoi(tok));
            assert_int_equal(rd_shards_pick(name, len, n), atoi(tok));
        }
        assert_null(strtok_r(NULL, " \n", &save));
        names++;
    }
    fclose(f);
    assert_true(names >= 60);
}

/* The values docs/sharding.md quotes. */
static void test_documented_vectors(void **state)
{
    (void)state;
    static const int ns[] = { 1, 2, 3, 4, 8, 64 };
    static const int tenant[] = { 0, 1, 1, 3, 4, 22 }, order[] = { 0, 0, 0, 0, 4, 51 };
    assert_int_equal(rd_shards_fnv("tenant-42", 9), 4157740482u);
    assert_int_equal(rd_shards_fnv("order:1001", 10), 344315465u);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(rd_shards_pick("tenant-42", 9, ns[i]), tenant[i]);
        assert_int_equal(rd_shards_pick("order:1001", 10, ns[i]), order[i]);
    }
}

/* Raising N to N+1 keeps every hash where it was or moves it to the new
 * shard N, never to another old one; about 1/(N+1) of them move. */
static void test_raise_moves_only_to_the_new_shard(void **state)
{
    (void)state;
    enum { NAMES = 20000 };
    for (int n = 1; n < RD_SHARDS_MAX; n++) {
        int moved = 0;
        for (int i = 0; i < NAMES; i++) {
            char name[32];
            int len = snprintf(name, sizeof name, "group-%d", i);
            int before = rd_shards_pick(name, (size_t)len, n);
            int after = rd_shards_pick(name, (size_t)len, n + 1);
            assert_true(before >= 0 && before < n);
            if (after != before) {
                assert_int_equal(after, n);
                moved++;
            }
        }
        double share = (double)moved / NAMES, expect = 1.0 / (n + 1);
        if (share < expect * 0.8 - 0.005 || share > expect * 1.2 + 0.005)
            fail_msg("%d -> %d shards moved %.4f of the names (expected about %.4f)", n, n + 1,
                     share, expect);
    }
}

static void test_ids_at_their_boundaries(void **state)
{
    (void)state;
    const long long span = RD_SHARD_SPAN, top = RD_SHARDS_MAX * RD_SHARD_SPAN;
    assert_int_equal(rd_shards_id(0, 1), 1);
    assert_int_equal(rd_shards_id(3, 1), 30000000000001LL);
    assert_int_equal(rd_shards_id(63, span - 1), top - 1);
    assert_int_equal(rd_shards_id(64, 1), -1);
    assert_int_equal(rd_shards_id(-1, 1), -1);
    assert_int_equal(rd_shards_id(0, 0), -1);
    assert_int_equal(rd_shards_id(0, span), -1);

    static const struct { long long id; int shard; long long local; } cases[] = {
        { 1, 0, 1 },
        { 9999999999999LL, 0, 9999999999999LL },
        { 10000000000000LL, -1, -1 },      /* n = 0: never handed out */
        { 10000000000001LL, 1, 1 },
        { 50000000000001LL, 5, 1 },
        { 639999999999999LL, 63, 9999999999999LL },
        { 640000000000000LL, -1, -1 },
        { 0, -1, -1 },
        { -7, -1, -1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(rd_shards_of_id(cases[i].id), cases[i].shard);
        assert_int_equal(rd_shards_local(cases[i].id), cases[i].local);
        assert_int_equal(rd_shards_id_valid(cases[i].id), cases[i].shard >= 0);
        if (cases[i].shard >= 0)
            assert_int_equal(rd_shards_id(cases[i].shard, cases[i].local), cases[i].id);
    }
    /* The largest id has 15 digits, under 2^53. */
    char text[32];
    assert_int_equal(snprintf(text, sizeof text, "%lld", top - 1), 15);
    assert_true(top - 1 < (1LL << 53));
}

static char *base_of(const char *queue, size_t len, int shard, int salt)
{
    rd_buf_t b = RD_BUF_INIT;
    rd_keys_shard_base(&b, "retryd", queue, len, shard, salt);
    size_t n;
    char *s = rd_buf_take(&b, &n);
    rd_buf_free(&b);
    return s;
}

/* Shard 0 is today's base; shard k carries ":<k>.<salt>" in the tag; a queue
 * whose name looks like a shard tag gets an escaped base of its own. */
static void test_shard_bases(void **state)
{
    (void)state;
    char *zero = base_of("orders", 6, 0, 0), *three = base_of("orders", 6, 3, 0);
    char *salted = base_of("orders", 6, 63, 65535), *spaced = base_of("a b{c}", 6, 2, 17);
    char *lookalike = base_of("orders:3.0", 10, 0, 0);
    rd_buf_t plain = RD_BUF_INIT;
    rd_keys_queue_base(&plain, "retryd", "orders", 6);
    assert_memory_equal(plain.data, zero, plain.len);
    assert_int_equal(strlen(zero), plain.len);
    assert_string_equal(zero, "retryd:{orders}");
    assert_string_equal(three, "retryd:{orders:3.0}");
    assert_string_equal(salted, "retryd:{orders:63.65535}");
    assert_string_equal(spaced, "retryd:{a b%7Bc%7D:2.17}");
    assert_string_equal(lookalike, "retryd:{orders%3A3.0}");
    assert_string_not_equal(lookalike, three);
    rd_buf_free(&plain);
    rd_free(zero);
    rd_free(three);
    rd_free(salted);
    rd_free(spaced);
    rd_free(lookalike);
}

static void expect_cursor(const char *cursor, int rc, int shard, const char *rest)
{
    int k = -2;
    const char *r = NULL;
    size_t rlen = 0;
    assert_int_equal(rd_shards_cursor_parse(cursor, strlen(cursor), &k, &r, &rlen), rc);
    if (rc != 0) return;
    assert_int_equal(k, shard);
    assert_int_equal(rlen, strlen(rest));
    assert_memory_equal(r, rest, rlen);
}

static void test_cursor_prefix(void **state)
{
    (void)state;
    for (int k = 0; k < RD_SHARDS_MAX; k++) {
        rd_buf_t b = RD_BUF_INIT;
        rd_shards_cursor_format(&b, k, "scheduled:17", 12);
        rd_buf_append(&b, "", 1);
        expect_cursor(b.data, 0, k, "scheduled:17");
        rd_buf_free(&b);
    }
    expect_cursor("s0.", 0, 0, "");
    expect_cursor("s63.s5.x", 0, 63, "s5.x");
    /* Without the prefix: shard 0's cursor, whole (one from before a raise). */
    expect_cursor("", 0, 0, "");
    expect_cursor("12", 0, 0, "12");
    expect_cursor("scheduled:5", 0, 0, "scheduled:5");
    expect_cursor("s", 0, 0, "s");
    expect_cursor("s5", 0, 0, "s5");
    expect_cursor("sx.1", 0, 0, "sx.1");
    /* A prefix naming no shard is refused, never read as shard 0's. */
    expect_cursor("s64.", -1, 0, "");
    expect_cursor("s07.", -1, 0, "");
    expect_cursor("s123.", -1, 0, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors_file),
        cmocka_unit_test(test_documented_vectors),
        cmocka_unit_test(test_raise_moves_only_to_the_new_shard),
        cmocka_unit_test(test_ids_at_their_boundaries),
        cmocka_unit_test(test_shard_bases),
        cmocka_unit_test(test_cursor_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
