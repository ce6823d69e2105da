/* test_keyed_hash.c - unit tests for keyed_hash.c (include/retryd/keyed_hash.h):
 * the long-poll table's hash. It must be a function of the name under one
 * key, and its key must be drawn per instance: names that collide in one
 * process's buckets are not known outside it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/hash.h"
#include "retryd/keyed_hash.h"

/* The same name hashes the same under one key, names (NUL bytes included)
 * are told apart, and the empty name is fine. */
static void test_one_key_is_a_function_of_the_name(void **state)
{
    (void)state;
    rd_keyed_hash_t *h = rd_keyed_hash_new();
    assert_non_null(h);
    assert_true(rd_keyed_hash(h, "orders", 6) == rd_keyed_hash(h, "orders", 6));
    assert_true(rd_keyed_hash(h, "orders", 6) != rd_keyed_hash(h, "orderz", 6));
    assert_true(rd_keyed_hash(h, "a\0b", 3) != rd_keyed_hash(h, "a\0c", 3));
    assert_true(rd_keyed_hash(h, "", 0) == rd_keyed_hash(h, "", 0));
    rd_keyed_hash_free(h);
}

/* Two instances draw two keys: of 64 names, the low 6 bits (a 64-bucket
 * table's index) agree between them for about one in 64, never for all;
 * with one fixed key, or FNV-1a, they would agree for every name. */
static void test_each_instance_draws_its_own_key(void **state)
{
    (void)state;
    rd_keyed_hash_t *a = rd_keyed_hash_new(), *b = rd_keyed_hash_new();
    assert_non_null(a);
    assert_non_null(b);
    int same_bucket = 0, same_hash = 0;
    for (int i = 0; i < 64; i++) {
        char name[32];
        int n = snprintf(name, sizeof name, "queue-%d", i);
        uint64_t x = rd_keyed_hash(a, name, (size_t)n), y = rd_keyed_hash(b, name, (size_t)n);
        same_bucket += (x & 63) == (y & 63);
        same_hash += x == y;
        assert_true(x != rd_hash(name, (size_t)n));
    }
    assert_int_equal(same_hash, 0);
    assert_true(same_bucket < 16);
    rd_keyed_hash_free(a);
    rd_keyed_hash_free(b);
    rd_keyed_hash_free(NULL);
}

int main(void)
{
    rd_alloc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_key_is_a_function_of_the_name),
        cmocka_unit_test(test_each_instance_draws_its_own_key),
    };
    return cmocka_run_group_tests_name("keyed_hash", tests, NULL, NULL);
}
