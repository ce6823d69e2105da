/* test_lua_keys.c - integration tests of the Redis Functions library (lua/) against
 * a real redis-server: the keys each function declares and writes: its base and
 * what it derives from it, and nothing for an unknown queue.
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_keys"
#include "lua_support.h"

/* ------------------------------------------------------------------------ */
/* Dead-letter rules (docs/reference.md "Recovery rules", docs/dead-letters.md §2)                    */
/* ------------------------------------------------------------------------ */

/* A claim that finds nothing writes nothing: no stats hash (its serials were
 * reserved before looking) for a queue name that never had a message. */
static void test_claim_on_unknown_queue_writes_nothing(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "ghost");
    redisReply *r = fcall("claim", &q, -1, "30000", "10", "1", "default", "w", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    r = fcall("settle_claim", &q, -1, "30000", "5", "0", "0", "0", "default", END);
    freeReplyObject(r);
    r = fcall("settle_claim", &q, -1, "30000", "5", "1", "7", "", "failed", "x", "1", "-1", END);
    freeReplyObject(r);
    r = rcmd("KEYS", qkey(&q, "*"), END);
    if (r->elements != 0) fail_msg("%zu keys, e.g. %s", r->elements, r->element[0]->str);
    freeReplyObject(r);
    /* With messages the serials still count what was claimed. */
    enqueue_ok(&q, "a", 3, 0);
    msg_t m[2];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "10", END), m, 2), 1);
    assert_int_equal(counter(&q, "claimed"), 1);
}

/* ------------------------------------------------------------------------ */
/* Declared keys: each function's KEYS are its base and what it derives     */
/* ------------------------------------------------------------------------ */

/* Every key of the two queues, sorted, each name then its DUMP: equal
 * snapshots mean no key of either queue changed. Caller frees. */
static char *queues_snapshot(const queue_t *a, const queue_t *b, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    const queue_t *qs[2] = { a, b };
    for (int i = 0; i < 2; i++) {
        redisReply *names = rcmd("KEYS", qkey(qs[i], "*"), END);
        assert_int_equal(names->type, REDIS_REPLY_ARRAY);
        /* KEYS answers in no order: sort by name (insertion sort, few keys). */
        for (size_t x = 1; x < names->elements; x++)
            for (size_t y = x; y > 0 && strcmp(names->element[y - 1]->str, names->element[y]->str) > 0; y--) {
                redisReply *t = names->element[y];
                names->element[y] = names->element[y - 1];
                names->element[y - 1] = t;
            }
        for (size_t j = 0; j < names->elements; j++) {
            redisReply *d = rcmd("DUMP", names->element[j]->str, END);
            size_t need = names->element[j]->len + 1 + (d->type == REDIS_REPLY_STRING ? d->len : 0);
            while (n + need > cap) {
                cap *= 2;
                out = realloc(out, cap);
                assert_non_null(out);
            }
            memcpy(out + n, names->element[j]->str, names->element[j]->len + 1);
            n += names->element[j]->len + 1;
            if (d->type == REDIS_REPLY_STRING) {
                memcpy(out + n, d->str, d->len);
                n += d->len;
            }
            freeReplyObject(d);
        }
        freeReplyObject(names);
    }
    *len = n;
    return out;
}

/* FCALL fn with the given KEYS (nkeys of them, as the caller spells the
 * count) and ARGV, END-terminated after the ARGV. Caller frees. */
static redisReply *fcall_keys(const char *fn, const char *nkeys, int nk, const char *const *keys,
                              ...)
{
    const char *argv[MAX_ARGV];
    size_t lens[MAX_ARGV];
    int argc = 0;
    char name[64];
    snprintf(name, sizeof name, "%s%s", RD_FUNCTION(""), fn);
    argv[argc++] = "FCALL";
    argv[argc++] = name;
    argv[argc++] = nkeys;
    for (int i = 0; i < nk; i++)
        argv[argc++] = keys[i];
    va_list ap;
    va_start(ap, keys);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL;) {
        assert_true(argc < MAX_ARGV);
        argv[argc++] = a;
    }
    va_end(ap);
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    return command_argv(argc, argv, lens);
}

/* The reply is an error naming the keys, and neither queue changed. */
#define expect_keys_refused(a, b, r) expect_keys_refused_at((a), (b), (r), __FILE__, __LINE__)
static void expect_keys_refused_at(const queue_t *a, const queue_t *b, redisReply *r,
                                   const char *file, int line)
{
    static char *before;
    static size_t before_len;
    if (r == NULL) { /* take the snapshot the next check compares with */
        free(before);
        before = queues_snapshot(a, b, &before_len);
        return;
    }
    if (r->type != REDIS_REPLY_ERROR || strstr(r->str, "KEYS") == NULL)
        FAIL_AT(file, line, "expected an error naming KEYS, got %s", reply_desc(r));
    freeReplyObject(r);
    size_t after_len;
    char *after = queues_snapshot(a, b, &after_len);
    if (after_len != before_len || memcmp(after, before, after_len) != 0)
        FAIL_AT(file, line, "a refused call changed a queue's keys");
    free(after);
}

/* FCALL retryd_v8_succeed 2 'y:{qa}' 'y:{qb}:m:1' 1 '' marked qa's message 1
 * succeeded and answered with qb's message 1: every function that takes a
 * message key refuses one that is not its base's for the id, and every
 * function refuses a KEYS count other than its own, or a first key that is
 * not a queue base; nothing changes. */
static void test_declared_keys_match_the_base(void **state)
{
    (void)state;
    queue_t qa, qb;
    queue_init(&qa, "keys-a");
    queue_init(&qb, "keys-b");
    /* Each queue: 1 processing, 2 dead, 3 pending. */
    for (int i = 0; i < 2; i++) {
        const queue_t *q = i ? &qb : &qa;
        msg_t m;
        assert_int_equal(enqueue_ok(q, "one", 1, 0), 1);
        assert_int_equal(enqueue_ok(q, "two", 1, 0), 2);
        assert_int_equal(enqueue_ok(q, "three", 1, 0), 3);
        msg_t two[2];
        assert_int_equal(expect_ok_msgs(fcall("claim", q, -1, "30000", "2", END), two, 2), 2);
        fail_ok(q, 2, "boom", "0", -1, &m);
        assert_string_equal(msg_str(&m, "status"), "dead");
    }
    char b_m1[192], b_m2[192], b_m3[192], a_m1x[192], a_m01[192];
    snprintf(b_m1, sizeof b_m1, "%s", mkey(&qb, 1));
    snprintf(b_m2, sizeof b_m2, "%s", mkey(&qb, 2));
    snprintf(b_m3, sizeof b_m3, "%s", mkey(&qb, 3));
    snprintf(a_m1x, sizeof a_m1x, "%s", mkey(&qa, 12));
    snprintf(a_m01, sizeof a_m01, "%s", mkey(&qa, 3));
    const char *ab1[] = { qa.base, b_m1 }, *ab2[] = { qa.base, b_m2 }, *ab3[] = { qa.base, b_m3 };
    const char *a12[] = { qa.base, a_m1x }, *a3[] = { qa.base, a_m01 };

    expect_keys_refused(&qa, &qb, NULL);
    /* Another queue's message key. */
    expect_keys_refused(&qa, &qb, fcall_keys("succeed", "2", 2, ab1, "1", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("fail", "2", 2, ab1, "1", "", "x", "1", "-1", END));
    expect_keys_refused(&qa, &qb, fcall_keys("extend", "2", 2, ab1, "1", "", "60000", END));
    expect_keys_refused(&qa, &qb, fcall_keys("snooze", "2", 2, ab1, "1", "", "0", END));
    expect_keys_refused(&qa, &qb, fcall_keys("replay", "2", 2, ab2, "2", END));
    expect_keys_refused(&qa, &qb, fcall_keys("kill", "2", 2, ab3, "3", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("delete", "2", 2, ab3, "3", END));
    expect_keys_refused(&qa, &qb, fcall_keys("get", "2", 2, ab1, "1", END));
    expect_keys_refused(&qa, &qb, fcall_keys("redrive_payload", "2", 2, ab2, "2", END));
    /* Its own queue's key of another id (12 for 1), or no id at all. */
    expect_keys_refused(&qa, &qb, fcall_keys("succeed", "2", 2, a12, "1", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("kill", "2", 2, a3, "1", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("snooze", "2", 2, a12, "1", "", "0", END));
    expect_keys_refused(&qa, &qb, fcall_keys("delete", "2", 2, a3, END));
    /* The message key missing, or one too many. */
    expect_keys_refused(&qa, &qb, fcall_keys("succeed", "1", 1, ab1, "1", "", END));
    const char *three[] = { qa.base, mkey(&qa, 1), b_m1 };
    expect_keys_refused(&qa, &qb, fcall_keys("succeed", "3", 3, three, "1", "", END));
    /* The functions that derive their message keys from the base take it alone. */
    expect_keys_refused(&qa, &qb, fcall_keys("settle_claim", "2", 2, ab1, "30000", "1", "1",
                                             "1", "", "succeeded", "", "1", "-1", END));
    expect_keys_refused(&qa, &qb, fcall_keys("succeed_many", "2", 2, ab1, "1", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("release", "2", 2, ab1, "1", "x", END));
    expect_keys_refused(&qa, &qb, fcall_keys("claim", "2", 2, ab1, "30000", "1", END));
    expect_keys_refused(&qa, &qb, fcall_keys("replay_many", "2", 2, ab2, "ids", "2", END));
    /* A first key that is not a queue base (a message key in its place). */
    const char *as_base[] = { b_m1, b_m1 };
    expect_keys_refused(&qa, &qb, fcall_keys("succeed", "2", 2, as_base, "1", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("claim", "1", 1, as_base, "30000", "1", END));
    expect_keys_refused(&qa, &qb, fcall_keys("enqueue", "1", 1, as_base, "x", "3", "0", END));
    /* A base without a hash tag of its own ("x}", "p:q}"): in a cluster its
     * keys would spread over slots. */
    const char *no_tag[] = { "x}" }, *no_tag2[] = { "retryd-test:keys-a}" };
    expect_keys_refused(&qa, &qb, fcall_keys("enqueue", "1", 1, no_tag, "x", "3", "0", END));
    expect_keys_refused(&qa, &qb, fcall_keys("claim", "1", 1, no_tag2, "30000", "1", END));
    /* A registry function given a queue base instead of "<prefix>:queues". */
    const char *a_base[] = { qa.base };
    expect_keys_refused(&qa, &qb, fcall_keys("register", "1", 1, a_base, "keys-b", "0", END));
    expect_keys_refused(&qa, &qb, fcall_keys("queues_page", "1", 1, a_base, "", "10", END));

    /* The right keys still work. */
    msg_t m;
    expect_ok_msg(fcall("succeed", &qa, 1, "", END), &m);
    assert_string_equal(msg_str(&m, "payload"), "one");
    expect_ok_msg(fcall("get", &qb, 1, END), &m);
    assert_string_equal(msg_str(&m, "status"), "processing");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declared_keys_match_the_base),
        cmocka_unit_test(test_claim_on_unknown_queue_writes_nothing),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
