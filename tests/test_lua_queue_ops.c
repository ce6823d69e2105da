/* test_lua_queue_ops.c - the library's whole-queue operations (lua/46_drop.lua,
 * lua/66_tags.lua): drop_queue and queue_forget, purge_all, the tags, and
 * dlq_sources, by FCALL against a real redis-server. */
#define LUA_SUITE "test_lua_queue_ops"
#include "lua_support.h"

#include <sys/time.h>

static double wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* The keys of Redis whose names hold the queue's hash tag, "{<name>}". */
static size_t keys_of(const queue_t *q)
{
    char pattern[160];
    snprintf(pattern, sizeof pattern, "*{%s}*", q->name);
    size_t n = 0;
    char cursor[32] = "0";
    do {
        redisReply *r = rcmd("SCAN", cursor, "MATCH", pattern, "COUNT", "10000", END);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            if (n < 5) print_message("left: %s\n", r->element[1]->element[i]->str);
            n++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

/* {code, n}: fails the test on any other reply; returns n. */
static long long code_and_count(redisReply *r, const char *code)
{
    bool good = has_code(r, code) && r->elements == 2 &&
                r->element[1]->type == REDIS_REPLY_INTEGER;
    long long n = good ? r->element[1]->integer : -1;
    const char *desc = reply_desc(r);
    freeReplyObject(r);
    if (!good) fail_msg("expected {\"%s\", n}, got %s", code, desc);
    return n;
}

/* The registry's SET of this suite's prefix (queue_t's base is "retryd:{q}"). */
static const char REGISTRY[] = "retryd:queues";

static redisReply *fcall_registry(const char *fn, size_t n, const char *const *args)
{
    const char *argv[8];
    char name[64];
    snprintf(name, sizeof name, "%s%s", RD_FUNCTION(""), fn);
    argv[0] = "FCALL";
    argv[1] = name;
    argv[2] = "1";
    argv[3] = REGISTRY;
    assert_true(n <= 4);
    for (size_t i = 0; i < n; i++) argv[4 + i] = args[i];
    return command_argv((int)(4 + n), argv, NULL);
}

/* Fills q with `per` messages in every state: ready, the priority lane, a
 * fairness group, scheduled, processing, succeeded, dead; idempotency keys,
 * a policy and tags. Returns how many messages it made. */
static long long fill_every_state(const queue_t *q, int per)
{
    policy_set(q, "merge", "lease_seconds", "60", "dead_letter_queue", "");
    assert_int_equal(code_and_count(fcall("tags_set", q, -1, "team", "a", "env", "prod", END), "ok"), 2);
    long long made = 0;
    char idem[32], group[32];
    for (int i = 0; i < per; i++) {
        snprintf(idem, sizeof idem, "k%d", i);
        snprintf(group, sizeof group, "g%d", i % 7);
        /* ready (with an idempotency key), the lane, a group, scheduled */
        freeReplyObject(fcall("enqueue", q, -1, "r", "3", "0", idem, END));
        freeReplyObject(fcall("enqueue", q, -1, "p", "3", "0", "", "", "", "", "5", END));
        freeReplyObject(fcall("enqueue", q, -1, "g", "3", "0", "", "", "", "", "", group, END));
        freeReplyObject(fcall("enqueue", q, -1, "s", "3", "600000", "", END));
        made += 4;
    }
    /* processing, succeeded, dead: claimed from the ready ones made next. */
    for (int i = 0; i < 3 * per; i++)
        freeReplyObject(fcall("enqueue", q, -1, "c", "1", "0", "", END));
    made += 3 * per;
    for (int state = 0; state < 3; state++) {
        for (int i = 0; i < per; i++) {
            msg_t m;
            /* The lane and the groups go first: claim until a "c" comes. */
            do claim_one(q, 600000, &m); while (strcmp(msg_str(&m, "payload"), "c") != 0);
            if (state == 1) expect_ok_msg(fcall("succeed", q, m.id, "", END), &m);
            if (state == 2) fail_ok(q, m.id, "boom", "0", -1, &m);
        }
    }
    return made;
}

/* drop_queue with 10,000 messages in every state: each call bounded (the
 * slowest is printed), claims lease nothing and an enqueue with flag e
 * answers not_found while it runs, nothing of the queue left in Redis at
 * the end, the registry forgets it, and a plain enqueue then makes a new
 * queue. */
static void test_drop_queue_every_state(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "drop");
    long long made = fill_every_state(&q, 1430);   /* 10,010 messages */
    assert_true(made >= 10000);
    const char *reg[] = { q.name, "0" };
    assert_int_equal(int_reply(fcall_registry("register", 2, reg)), 1);
    const char *link[] = { q.name, "somewhere-else" };
    expect_code(fcall_registry("dlq_link", 2, link), "ok", NULL);

    long long deleted = 0;
    int calls = 0;
    double slowest = 0;
    bool unregistered = false;
    /* Redis's own time of each call: the slow log of every command (the
     * commands the calls run are logged too, hence its length). */
    redisReply *was = rcmd("CONFIG", "GET", "slowlog-log-slower-than", END);
    char threshold[32];
    snprintf(threshold, sizeof threshold, "%s", was->element[1]->str);
    freeReplyObject(was);
    freeReplyObject(rcmd("CONFIG", "SET", "slowlog-max-len", "200000", END));
    freeReplyObject(rcmd("CONFIG", "SET", "slowlog-log-slower-than", "0", END));
    freeReplyObject(rcmd("SLOWLOG", "RESET", END));
    for (;;) {
        double t0 = wall_ms();
        redisReply *r = fcall("drop_queue", &q, -1, unregistered ? "unregistered" : "", END);
        double ms = wall_ms() - t0;
        if (ms > slowest) slowest = ms;
        calls++;
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 2);
        deleted += r->element[1]->integer;
        const char *st = r->element[0]->str;
        bool done = strcmp(st, "done") == 0, forget = strcmp(st, "unregister") == 0;
        if (!done && !forget) assert_string_equal(st, "more");
        freeReplyObject(r);
        if (done) break;
        if (calls == 1) {
            /* Marked: nothing to claim, a must-exist enqueue is refused. */
            expect_nothing_to_claim(&q);
            expect_code(fcall("enqueue", &q, -1, "x", "3", "0", "", "1", "default", "", "", "",
                              "", "", "e", END), "not_found", NULL);
        }
        if (forget) {
            const char *name[] = { q.name };
            assert_int_equal(int_reply(fcall_registry("queue_forget", 1, name)), 1);
            unregistered = true;
        }
        assert_true(calls < 1000);
    }
    freeReplyObject(rcmd("CONFIG", "SET", "slowlog-log-slower-than", threshold, END));
    redisReply *log = rcmd("SLOWLOG", "GET", "200000", END);
    long long server_max_us = 0, server_sum_us = 0, server_calls = 0;
    for (size_t i = 0; i < log->elements; i++) {
        const redisReply *e = log->element[i];
        const redisReply *argv = e->element[3];
        if (argv->elements < 2 || strcmp(argv->element[1]->str, RD_FUNCTION("drop_queue")) != 0)
            continue;
        long long us = e->element[2]->integer;
        server_sum_us += us;
        server_calls++;
        if (us > server_max_us) server_max_us = us;
    }
    freeReplyObject(log);
    freeReplyObject(rcmd("SLOWLOG", "RESET", END));
    freeReplyObject(rcmd("CONFIG", "SET", "slowlog-max-len", "128", END));
    assert_int_equal(server_calls, calls);
    print_message("drop_queue: %lld records in %d calls; in Redis %.2f ms a call on average, "
                  "%.2f ms the slowest; %.2f ms the slowest with the round trip\n", deleted,
                  calls, server_sum_us / 1000.0 / (double)server_calls, server_max_us / 1000.0,
                  slowest);
    assert_true(server_max_us < 50000);   /* bounded: a few ms, far from the 50 ms here */
    assert_int_equal(deleted, made);
    assert_true(calls >= made / 500);
    assert_int_equal(keys_of(&q), 0);
    assert_int_equal(int_reply(rcmd("SISMEMBER", REGISTRY, q.name, END)), 0);
    redisReply *z = rcmd("ZSCORE", "{retryd:queues}:names", q.name, END);
    assert_int_equal(z->type, REDIS_REPLY_NIL);
    freeReplyObject(z);
    redisReply *d = rcmd("HGET", "{retryd:queues}:dlq", q.name, END);
    assert_int_equal(d->type, REDIS_REPLY_NIL);
    freeReplyObject(d);
    /* A plain enqueue after the drop makes a new queue. */
    assert_int_equal(enqueue_ok(&q, "new", 3, 0), 1);
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_string_equal(msg_str(&m, "payload"), "new");
}

/* Data that comes after "unregister" is deleted too before "done". */
static void test_drop_queue_enqueue_meanwhile(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "dropwhile");
    enqueue_ok(&q, "a", 3, 0);
    redisReply *r = fcall("drop_queue", &q, -1, "", END);
    assert_string_equal(r->element[0]->str, "unregister");
    freeReplyObject(r);
    enqueue_ok(&q, "late", 3, 0);
    r = fcall("drop_queue", &q, -1, "unregistered", END);
    assert_string_equal(r->element[0]->str, "unregister");
    assert_int_equal(r->element[1]->integer, 1);
    freeReplyObject(r);
    r = fcall("drop_queue", &q, -1, "unregistered", END);
    assert_string_equal(r->element[0]->str, "done");
    freeReplyObject(r);
    assert_int_equal(keys_of(&q), 0);
}

/* Large records: a drop call reads at most about REPLY_BYTES (4 MiB) of
 * them, so 40 of 256 KiB (10 MiB) take several calls, each leaving the
 * rest where it was. */
static void test_drop_queue_bounded_by_bytes(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "dropbig");
    size_t n = 256 * 1024;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, 'b', n);
    for (int i = 0; i < 40; i++) {
        const char *args[] = { big, "3", "0", "" };
        const size_t lens[] = { n, 1, 1, 0 };
        freeReplyObject(fcall_bin("enqueue", &q, -1, 4, args, lens));
        if (i % 2) freeReplyObject(fcall("enqueue", &q, -1, "s", "3", "600000", "", END));
    }
    free(big);
    int calls = 0;
    long long deleted = 0, first = -1;
    for (;;) {
        redisReply *r = fcall("drop_queue", &q, -1, "unregistered", END);
        long long d = r->element[1]->integer;
        bool done = strcmp(r->element[0]->str, "done") == 0;
        freeReplyObject(r);
        deleted += d;
        if (first < 0) first = d;
        calls++;
        if (done) break;
        assert_true(calls < 100);
    }
    assert_int_equal(deleted, 60);
    assert_int_equal(first, 16);   /* the ready list's first 16 records of 256 KiB: 4 MiB */
    assert_true(calls >= 3);
    assert_int_equal(keys_of(&q), 0);
}

/* A queue dropped after it used groups and priorities: the new queue of the
 * same name starts afresh, its claims spend nothing on either (this Lua
 * state's knowledge of the old one went with the drop). */
static void test_drop_forgets_what_the_queue_used(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "dropknown");
    freeReplyObject(fcall("enqueue", &q, -1, "g", "3", "0", "", "", "", "", "4", "grp", END));
    msg_t m;
    claim_one(&q, 30000, &m);
    for (;;) {
        redisReply *r = fcall("drop_queue", &q, -1, "unregistered", END);
        bool done = strcmp(r->element[0]->str, "done") == 0;
        freeReplyObject(r);
        if (done) break;
    }
    assert_int_equal(enqueue_ok(&q, "plain", 3, 0), 1);
    claim_one(&q, 30000, &m);
    assert_string_equal(msg_str(&m, "payload"), "plain");
    assert_int_equal(exists(qkey(&q, "3:rotation")), 0);
    assert_int_equal(exists(qkey(&q, "3:rotating")), 0);
    assert_int_equal(counter(&q, "priorities"), 0);
}

/* purge_all: every message in every state goes, in bounded calls; the
 * queue's policy, tags and counters stay, the counts end at 0, and a
 * settlement of a purged leased message answers not_found. */
static void test_purge_all_every_state(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "purgeall");
    long long made = fill_every_state(&q, 150);
    msg_t leased;
    freeReplyObject(fcall("enqueue", &q, -1, "last", "3", "0", "", END));
    made++;
    do claim_one(&q, 600000, &leased); while (strcmp(msg_str(&leased, "payload"), "last") != 0);
    long long deleted = 0;
    int calls = 0;
    for (;;) {
        redisReply *r = fcall("purge_all", &q, -1, END);
        assert_int_equal(r->elements, 2);
        deleted += r->element[1]->integer;
        bool done = strcmp(r->element[0]->str, "done") == 0;
        if (!done) assert_string_equal(r->element[0]->str, "more");
        freeReplyObject(r);
        calls++;
        if (done) break;
        assert_true(calls < 100);
    }
    assert_int_equal(deleted, made);
    assert_true(calls >= 3);
    expect_code(fcall("succeed", &q, leased.id, "", END), "not_found", NULL);
    redisReply *s = fcall("stats", &q, -1, "0", END);
    assert_int_equal(s->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i + 1 < s->elements; i += 2) {
        const char *name = s->element[i]->str;
        const redisReply *v = s->element[i + 1];
        if (v->type == REDIS_REPLY_INTEGER &&
            (strcmp(name, "pending") == 0 || strcmp(name, "processing") == 0 ||
             strcmp(name, "scheduled") == 0 || strcmp(name, "dead") == 0 ||
             strcmp(name, "succeeded") == 0 || strcmp(name, "ready") == 0))
            assert_int_equal(v->integer, 0);
    }
    freeReplyObject(s);
    assert_int_equal(counter(&q, "purged"), made);
    assert_string_equal(policy_field(&q, "lease_seconds"), "60");
    redisReply *t = fcall("tags_get", &q, -1, END);
    assert_int_equal(t->elements, 4);
    freeReplyObject(t);
    const char *indexes[] = { "3:ready", "3:due", "3:priority", "3:scheduled", "3:processing",
                              "3:succeeded", "3:dead", "3:grouped", "3:groups", "3:expiring",
                              "errors" };
    for (size_t i = 0; i < sizeof indexes / sizeof indexes[0]; i++)
        assert_int_equal(exists(qkey(&q, indexes[i])), 0);
    /* The queue goes on: ids keep growing. */
    assert_int_equal(enqueue_ok(&q, "after", 3, 0), made + 1);
}

/* tags_set, tags_remove, tags_get: SQS's limits, a set past 50 refused as
 * a whole. */
static void test_tags(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "tags");
    assert_int_equal(code_and_count(fcall("tags_set", &q, -1, "a", "1", "b", "", END), "ok"), 2);
    /* a changed, c new: 3 */
    assert_int_equal(code_and_count(fcall("tags_set", &q, -1, "a", "2", "c", "3", END), "ok"), 3);
    redisReply *r = fcall("tags_get", &q, -1, END);
    assert_int_equal(r->elements, 6);
    for (size_t i = 0; i < 6; i += 2)
        if (strcmp(r->element[i]->str, "a") == 0) assert_string_equal(r->element[i + 1]->str, "2");
    freeReplyObject(r);

    /* 47 more fit (50), one more does not: nothing of that call is kept. */
    const char *args[2 * 50];
    char names[50][16];
    for (int i = 0; i < 48; i++) {
        snprintf(names[i], sizeof names[i], "t%02d", i);
        args[2 * i] = names[i];
        args[2 * i + 1] = "v";
    }
    assert_int_equal(code_and_count(fcall_bin("tags_set", &q, -1, 2 * 47, args, NULL), "ok"), 50);
    assert_int_equal(code_and_count(fcall_bin("tags_set", &q, -1, 2 * 48, args, NULL),
                                    "too_many"), 50);
    assert_int_equal(int_reply(rcmd("HEXISTS", qkey(&q, "tags"), "t47", END)), 0);
    /* Changing existing ones at 50 is fine. */
    assert_int_equal(code_and_count(fcall("tags_set", &q, -1, "a", "9", END), "ok"), 50);

    /* Bounds: key 1..128 bytes, value 0..256. */
    char key129[130], value257[258];
    memset(key129, 'k', 129);
    key129[129] = '\0';
    memset(value257, 'v', 257);
    value257[257] = '\0';
    expect_error(fcall("tags_set", &q, -1, key129, "v", END));
    expect_error(fcall("tags_set", &q, -1, "", "v", END));
    expect_error(fcall("tags_set", &q, -1, "a", value257, END));
    expect_error(fcall("tags_set", &q, -1, "odd", END));
    key129[128] = '\0';
    value257[256] = '\0';
    assert_int_equal(code_and_count(fcall("tags_set", &q, -1, key129, value257, END), "too_many"),
                     50);   /* the 51st */
    assert_int_equal(code_and_count(fcall("tags_remove", &q, -1, "t00", "nope", END), "ok"), 49);
    assert_int_equal(code_and_count(fcall("tags_set", &q, -1, key129, value257, END), "ok"), 50);

    const char *keys[46];
    for (int i = 0; i < 46; i++) keys[i] = names[i + 1];   /* t01..t46 */
    assert_int_equal(code_and_count(fcall_bin("tags_remove", &q, -1, 46, keys, NULL), "ok"), 4);
    expect_error(fcall("tags_remove", &q, -1, END));
}

/* dlq_sources pages the registry's dlq HASH for the queues whose
 * dead_letter_queue is the one asked about: each exactly once. */
static void test_dlq_sources(void **state)
{
    (void)state;
    char target[64], other[64], names[40][64];
    snprintf(target, sizeof target, "dlq-target-%ld", (long)getpid());
    snprintf(other, sizeof other, "dlq-other-%ld", (long)getpid());
    bool want[40];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "dlq-src-%ld-%d", (long)getpid(), i);
        want[i] = i % 3 != 0;
        const char *link[] = { names[i], want[i] ? target : other };
        expect_code(fcall_registry("dlq_link", 2, link), "ok", NULL);
    }
    /* Many more links: a HASH too large for a listpack is paged by HSCAN. */
    for (int i = 0; i < 200; i++) {
        char filler[64];
        snprintf(filler, sizeof filler, "dlq-filler-%ld-%d", (long)getpid(), i);
        const char *link[] = { filler, other };
        expect_code(fcall_registry("dlq_link", 2, link), "ok", NULL);
    }
    int seen[40] = { 0 };
    char cursor[32] = "0";
    int pages = 0;
    do {
        const char *args[] = { target, cursor, "10" };
        redisReply *r = command_argv(7, (const char *[]){ "FCALL_RO", RD_FUNCTION("dlq_sources"),
                                                          "1", REGISTRY, args[0], args[1],
                                                          args[2] }, NULL);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_true(r->elements >= 1);
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 1; i < r->elements; i++) {
            int found = -1;
            for (int j = 0; j < 40; j++)
                if (strcmp(r->element[i]->str, names[j]) == 0) found = j;
            assert_true(found >= 0);
            seen[found]++;
        }
        freeReplyObject(r);
        pages++;
        assert_true(pages < 1000);
    } while (strcmp(cursor, "0") != 0);
    redisReply *enc = rcmd("OBJECT", "ENCODING", "{retryd:queues}:dlq", END);
    if (strcmp(enc->str, "hashtable") == 0) assert_true(pages > 1);
    freeReplyObject(enc);
    for (int i = 0; i < 40; i++) assert_int_equal(seen[i], want[i] ? 1 : 0);
    const char *bad[] = { target, "x", "10" };
    expect_error(fcall_registry("dlq_sources", 3, bad));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drop_queue_every_state),
        cmocka_unit_test(test_drop_queue_enqueue_meanwhile),
        cmocka_unit_test(test_drop_forgets_what_the_queue_used),
        cmocka_unit_test(test_drop_queue_bounded_by_bytes),
        cmocka_unit_test(test_purge_all_every_state),
        cmocka_unit_test(test_tags),
        cmocka_unit_test(test_dlq_sources),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
