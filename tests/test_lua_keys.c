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

/* FCALL retryd_v9_succeed 2 'y:{qa}' 'y:{qb}:m:1' 1 '' marked qa's message 1
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

/* ------------------------------------------------------------------------ */
/* A shard's base (docs/sharding.md "Where each key goes", "Ids")           */
/* ------------------------------------------------------------------------ */

#define SHARD_SPAN 10000000000000LL /* 10^13: shard k's ids are k * 10^13 + n */

/* Shard 63 of a queue, "retryd:{<q>:63.7}": its ids are 63 * 10^13 + n (15
 * digits, exact in its keys and replies), its priority lane orders fresh ids
 * by their local part n, it publishes "s63" on the queue's own wake channel
 * (shard 0's), and it serves the whole lifecycle on those ids: claim, settle,
 * death, replay, listing, export, a move task's take and a redrive into
 * another queue's shard 5. */
/* Shard 0's layout key of queue name. */
static const char *layout_key_of(const char *name)
{
    char *s = scratch();
    snprintf(s, 192, "retryd:{%s}:shard", name);
    return s;
}

static void test_shard_base_serves_the_lifecycle(void **state)
{
    (void)state;
    queue_t q, t;
    queue_init(&q, "shard63");
    char wake[160];
    snprintf(wake, sizeof wake, "%s:wake", q.base);
    snprintf(q.base, sizeof q.base, "retryd:{%.64s:63.7}", q.name);
    queue_init(&t, "shard5");
    snprintf(t.base, sizeof t.base, "retryd:{%.64s:5.0}", t.name);
    const long long first = 63 * SHARD_SPAN + 1;
    /* Both queues sharded, so that these shards take placements. */
    char salts[256];
    size_t used = 0;
    for (int k = 1; k < 63; k++) used += (size_t)snprintf(salts + used, sizeof salts - used, "0,");
    snprintf(salts + used, sizeof salts - used, "7");
    make_sharded(q.name, 64, salts);
    make_sharded(t.name, 6, "0,0,0,0,0");

    redisContext *sub = redisConnect("127.0.0.1", atoi(getenv("RETRYD_TEST_REDIS_PORT")));
    assert_true(sub != NULL && sub->err == 0);
    redisReply *r = redisCommand(sub, "SUBSCRIBE %s", wake);
    assert_non_null(r);
    freeReplyObject(r);

    long long a = enqueue_ok(&q, "a", 3, 0);
    assert_int_equal(a, first);
    char want[192];
    snprintf(want, sizeof want, "retryd:{%.64s:63.7}:m:630000000000001", q.name);
    assert_int_equal(exists(want), 1);
    void *got = NULL;
    assert_int_equal(redisGetReply(sub, &got), REDIS_OK);
    r = got;
    assert_true(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    assert_string_equal(r->element[1]->str, wake);
    assert_string_equal(r->element[2]->str, "s63");
    freeReplyObject(r);
    redisFree(sub);

    /* A fresh id of priority 9 is scored by its local part (2), in its band. */
    long long b = enqueue_with(&q, "b", 0, -1, 9, NULL);
    assert_int_equal(b, first + 1);
    assert_int_equal(zscore(qkey(&q, "3:priority"), b), (1LL << 44) + 2);

    /* So is a grouped one, in its group's set, on another shard. */
    queue_t g;
    queue_init(&g, "shard2");
    snprintf(g.base, sizeof g.base, "retryd:{%.64s:2.0}", g.name);
    msg_t m;
    make_sharded(g.name, 3, "0,0");
    r = rcmd("HGET", layout_key_of(g.name), "rev", END);
    char rev[32];
    snprintf(rev, sizeof rev, "%s", r->str);
    freeReplyObject(r);
    /* A grouped placement comes with the caller's view of the layout. */
    r = fcall("enqueue", &g, -1, "g", "3", "0", "", "", "", "", "0", "g1", "", "", "", rev, END);
    assert_true(has_code(r, "ok") && r->element[1]->type == REDIS_REPLY_INTEGER);
    assert_int_equal(r->element[1]->integer, 2 * SHARD_SPAN + 1);
    freeReplyObject(r);
    assert_int_equal(zscore(qkey(&g, "3:gq:g1"), 2 * SHARD_SPAN + 1), 19 * (1LL << 44) + 1);

    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, b);
    expect_ok_msg(fcall("succeed", &q, b, msg_str(&m, "lease_token"), END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, a);
    expect_ok_msg(fcall("succeed", &q, a, msg_str(&m, "lease_token"), END), &m);

    long long d = make_dead(&q, "boom");
    assert_int_equal(d, first + 2);
    expect_ok_msg(fcall("replay", &q, d, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    expect_ok_msg(fcall("get", &q, d, END), &m);
    assert_int_equal(m.id, d);

    long long ids[8], bytes = 0;
    char next[128];
    size_t n = raw_page(fcall("list", &q, -1, "", "100", "", END), ids, 8, &bytes, next, sizeof next);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        assert_true(ids[i] >= first && ids[i] <= first + 2);
    n = raw_export(fcall("export", &q, -1, "csv", "", "100", "", END), ids, 8, &bytes, next, sizeof next);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        assert_true(ids[i] >= first && ids[i] <= first + 2);

    /* A move task takes the pending ids up to the shard's last id (its
     * cursor holds that id: 63 * 10^13 + 3, not the local 3). */
    r = fcall("redrive_take", &q, -1, t.name, "move", "10", "", END);
    assert_true(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    assert_int_equal(r->element[0]->integer, 0);
    assert_int_equal(r->element[2]->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[2]->element[0]->integer, d);
    freeReplyObject(r);

    /* Into shard 5 of another queue: its id is 5 * 10^13 + 1, kept as text. */
    r = fcall("redrive_in", &t, -1, q.name, num(d), "0", "0", "", "moved", END);
    assert_true(r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    assert_int_equal(r->element[0]->integer, 5 * SHARD_SPAN + 1);
    freeReplyObject(r);
    char key[320];
    snprintf(key, sizeof key, "%s:redrive:%s:%lld", t.base, q.name, d);
    r = rcmd("GET", key, END);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "50000000000001");
    freeReplyObject(r);
    expect_ok_msg(fcall("get", &t, 5 * SHARD_SPAN + 1, END), &m);
    assert_string_equal(msg_str(&m, "payload"), "moved");
}

/* A tag that only looks like a shard's is the base of a queue of its own: a
 * shard index outside 1-63, a leading zero or a salt past 65535 (what a queue
 * name can never produce, since its ':' is escaped) keeps ids from 1. */
static void test_malformed_shard_tags_are_plain_bases(void **state)
{
    (void)state;
    const char *suffixes[] = { ":64.0", ":01.0", ":1.65536", ":1.01", ":0.0", ":1." };
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        queue_t q;
        queue_init(&q, "notashard");
        snprintf(q.base, sizeof q.base, "retryd:{%.64s%s}", q.name, suffixes[i]);
        assert_int_equal(enqueue_ok(&q, "x", 3, 0), 1);
    }
}

/* The library's hash (placement.fnv and placement.jump, through
 * shard_pick) equals C's and Python's: every name of
 * tests/fixtures/shard_vectors.txt, its fnv and its shard for N = 1..64. */
static void test_shard_hash_matches_the_vectors(void **state)
{
    (void)state;
    FILE *f = fopen("tests/fixtures/shard_vectors.txt", "r");
    if (f == NULL) fail_msg("cannot read tests/fixtures/shard_vectors.txt (run from the source tree)");
    queue_t q;
    queue_init(&q, "vectors");
    char line[4096];
    int names = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char hex[512];
        unsigned long long fnv;
        int used = 0;
        if (sscanf(line, "%511s %llu%n", hex, &fnv, &used) != 2) continue;
        char name[256];
        size_t len = 0;
        if (strcmp(hex, "-") != 0)
            for (size_t i = 0; hex[2 * i] && hex[2 * i + 1] && len < sizeof name; i++) {
                unsigned v;
                sscanf(hex + 2 * i, "%2x", &v);
                name[len++] = (char)v;
            }
        size_t lens[] = { len, 2 };
        const char *args[] = { name, "64" };
        redisReply *r = fcall_bin("shard_pick", &q, -1, 2, args, lens);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 65);
        assert_int_equal((unsigned long long)r->element[0]->integer, fnv);
        const char *p = line + used;
        for (int n = 1; n <= 64; n++) {
            char *end;
            long want = strtol(p, &end, 10);
            assert_true(end != p);
            p = end;
            if (r->element[n]->integer != want)
                fail_msg("%s, N %d: library %lld, vectors %ld", hex, n, r->element[n]->integer, want);
        }
        freeReplyObject(r);
        names++;
    }
    fclose(f);
    assert_int_equal(names, 67);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declared_keys_match_the_base),
        cmocka_unit_test(test_claim_on_unknown_queue_writes_nothing),
        cmocka_unit_test(test_shard_base_serves_the_lifecycle),
        cmocka_unit_test(test_shard_hash_matches_the_vectors),
        cmocka_unit_test(test_malformed_shard_tags_are_plain_bases),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
