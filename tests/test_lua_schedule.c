/* test_lua_schedule.c - integration tests of the Redis Functions library (lua/) against
 * a real redis-server: timer hints, the registry and the timer schedule
 * (docs/design.md).
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_schedule"
#include "lua_support.h"

/* ------------------------------------------------------------------------ */
/* Timer hints, the registry and the timer schedule (docs/design.md)         */
/* ------------------------------------------------------------------------ */

/* The last element of an array reply (the timer hint); frees r. */
static long long hint_of(redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[r->elements - 1]->type != REDIS_REPLY_INTEGER) {
        const char *desc = reply_desc(r);
        freeReplyObject(r);
        fail_msg("expected a reply ending in a timer hint, got %s", desc);
    }
    long long v = r->element[r->elements - 1]->integer;
    freeReplyObject(r);
    return v;
}

/* The queue's timer promise (ms), -1 when none. */
static long long promise(const queue_t *q)
{
    redisReply *r = rcmd("GET", qkey(q, "timer"), END);
    long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return v;
}

/* settle_claim forwards the earliest work it creates as a timer hint when the
 * caller passes retention (dead_ttl_ms, succeeded_ttl_ms): a new lease on a
 * queue without a promise, a retry earlier than the promise; none without the
 * two values (the old reply shape). */
static void test_settle_claim_timer_hints(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "settlehints");
    enqueue_ok(&q, "a", 3, 0);
    enqueue_ok(&q, "b", 3, 0);
    assert_int_equal(promise(&q), -1);
    /* Nothing to settle, one claim: the lease's deadline is the hint. */
    redisReply *r = fcall("settle_claim", &q, -1, "20000", "1", "0", "0", "0", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 4);   /* ok, statuses, message, timer */
    assert_int_equal(r->element[3]->integer, 20000);
    msg_t m;
    msg_parse(r->element[2], &m);
    freeReplyObject(r);
    assert_int_equal(promise(&q), msg_int(&m, "lease_expires_at"));
    /* Fail it with a retry in 100 ms (earlier than the promise) and claim the
     * next: the retry's delay is the hint. */
    long long h = hint_of(fcall("settle_claim", &q, -1, "20000", "1", "1", num(m.id),
                                msg_str(&m, "lease_token"), "failed", "boom", "1", "100",
                                "0", "0", END));
    assert_in_range(h, 0, 100);
    /* Without the two values: no hint appended. */
    r = fcall("settle_claim", &q, -1, "20000", "0", "0", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);   /* ok, statuses */
    freeReplyObject(r);
}

static void test_timer_hints(void **state)
{
    queue_t q;
    queue_init(&q, "hints");
    /* A delayed enqueue on a queue with no promise answers its delay. */
    long long t0 = redis_now_ms();
    long long h = hint_of(fcall("enqueue", &q, -1, "a", "3", "5000", "", "1", END));
    assert_in_range(h, 4900, 5000);
    long long p = promise(&q);
    assert_in_range(p, t0 + 5000, redis_now_ms() + 5000);
    /* Later work needs nothing; earlier work lowers the promise. */
    assert_int_equal(hint_of(fcall("enqueue", &q, -1, "b", "3", "8000", "", "1", END)), -1);
    assert_int_equal(promise(&q), p);
    h = hint_of(fcall("enqueue", &q, -1, "c", "3", "3000", "", "1", END));
    assert_in_range(h, 2900, 3000);
    assert_true(promise(&q) < p);
    assert_int_equal(hint_of(fcall("enqueue", &q, -1, "d", "3", "0", "", "1", END)), -1);

    /* A claim's lease deadline is later than the promise: no hint. */
    assert_int_equal(hint_of(fcall("claim", &q, -1, "30000", "1", "1", END)), -1);
    /* On a queue without a promise the deadline is the hint. */
    queue_t w;
    queue_init(&w, "hintclaim");
    enqueue_ok(&w, "x", 3, 0);
    enqueue_ok(&w, "y", 3, 0);
    assert_int_equal(promise(&w), -1);
    msg_t m[2];
    redisReply *r = fcall("claim", &w, -1, "20000", "2", "1", END);
    assert_int_equal(r->elements, 4);
    assert_int_equal(r->element[3]->integer, 20000);
    msg_parse(r->element[1], &m[0]);
    msg_parse(r->element[2], &m[1]);
    freeReplyObject(r);
    assert_int_equal(promise(&w), msg_int(&m[0], "lease_expires_at"));
    /* A retry earlier than the lease: its delay. */
    h = hint_of(fcall("fail", &w, m[0].id, msg_str(&m[0], "lease_token"), "boom", "1", "100",
                      "0", END));
    assert_in_range(h, 0, 100);
    /* A succeed with the caller's retention later than the promise: none;
     * without a retention: none. */
    assert_int_equal(hint_of(fcall("succeed", &w, m[1].id, "", "60000", END)), -1);
    /* No hint when nothing was claimed. */
    assert_int_equal(hint_of(fcall("claim", &w, -1, "20000", "1", "1", END)), -1);

    /* Retention hints from succeed and succeed_many; a death (fail, kill) is
     * due now (death_hint: the tick reports it to alerting instances). */
    queue_t s;
    queue_init(&s, "hintret");
    for (int i = 0; i < 4; i++) enqueue_ok(&s, "x", 1, 0);
    msg_t c[4];
    assert_int_equal(expect_ok_msgs(fcall("claim", &s, -1, "600000", "4", END), c, 4), 4);
    h = hint_of(fcall("succeed", &s, c[0].id, "", "1000", END));
    assert_in_range(h, 900, 1000);
    assert_int_equal(hint_of(fcall("succeed_many", &s, -1, num(c[1].id), "", "2000", END)), -1);
    assert_int_equal(hint_of(fcall("fail", &s, c[2].id, "", "dead", "0", "-1", "500", END)), 0);
    assert_true(promise(&s) <= redis_now_ms());
    /* The queue is due now already: a second death needs nothing. */
    assert_int_equal(hint_of(fcall("kill", &s, c[3].id, "", "100", END)), -1);
    /* A kill on a queue without a promise is due now. */
    queue_t k;
    queue_init(&k, "hintkill");
    long long kid = enqueue_ok(&k, "x", 1, 0);
    assert_int_equal(promise(&k), -1);
    assert_int_equal(hint_of(fcall("kill", &k, kid, "", "100", END)), 0);
    expect_error(fcall("succeed", &s, c[0].id, "", "x", END));
    expect_error(fcall("fail", &s, c[2].id, "", "e", "1", "-1", "x", END));
    expect_error(fcall("kill", &s, c[3].id, "", "x", END));
}

/* ------------------------------------------------------------------------ */
/* Alerts (lua/05_alerts.lua, docs/dead-letters.md)                         */
/* ------------------------------------------------------------------------ */

/* extend with the hint flag forwards a shortened lease's deadline as a timer
 * hint (and lowers the promise); a longer one needs none; without the flag
 * the reply is {"ok", message} and the promise is left alone. */
static void test_extend_timer_hint(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "extendhint");
    enqueue_ok(&q, "x", 3, 0);
    redisReply *r = fcall("claim", &q, -1, "3600000", "1", "1", END);
    assert_int_equal(r->elements, 3);   /* ok, message, timer */
    assert_int_equal(r->element[2]->integer, 3600000);
    msg_t m, e;
    msg_parse(r->element[1], &m);
    freeReplyObject(r);
    long long p = promise(&q);
    assert_int_equal(p, msg_int(&m, "lease_expires_at"));
    /* No flag: the old shape, the promise untouched. */
    expect_ok_msg(fcall("extend", &q, m.id, "", "60000", END), &e);
    assert_int_equal(promise(&q), p);
    /* With the flag, a shorter lease: its deadline is the hint. */
    r = fcall("extend", &q, m.id, msg_str(&m, "lease_token"), "1000", "1", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 3);   /* ok, message, timer */
    assert_int_equal(r->element[2]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->element[2]->integer, 1000);
    msg_parse(r->element[1], &e);
    freeReplyObject(r);
    assert_int_equal(promise(&q), msg_int(&e, "lease_expires_at"));
    /* A longer lease is later than the promise: no hint. */
    assert_int_equal(hint_of(fcall("extend", &q, m.id, "", "600000", "1", END)), -1);
    assert_int_equal(promise(&q), msg_int(&e, "lease_expires_at"));
}

/* tick keeps the promise and tells an empty queue. */
static void test_tick_promise_and_empty(void **state)
{
    queue_t q;
    queue_init(&q, "tickempty");
    long long r[TICK_ROUND_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_ROUND_N, r);
    assert_int_equal(r[3], -1);
    assert_int_equal(r[5], 1);           /* no key at all */
    assert_int_equal(exists(qkey(&q, "timer")), 0);

    enqueue_ok(&q, "x", 3, 7000);
    long long now = redis_now_ms();
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_ROUND_N, r);
    assert_in_range(r[3], 6000, 7000);
    assert_int_equal(r[5], 0);
    assert_in_range(promise(&q), now + r[3], redis_now_ms() + r[3]);

    /* A succeeded message: its retention is the next thing (ttl 60 s). */
    queue_t s;
    queue_init(&s, "tickret");
    enqueue_ok(&s, "x", 3, 0);
    msg_t m;
    claim_one(&s, 30000, &m);
    expect_ok_msg(fcall("succeed", &s, m.id, "", END), &m);
    expect_ints(fcall("tick", &s, -1, "100", "0", "60000", "1", END), TICK_ROUND_N, r);
    assert_in_range(r[3], 59000, 60000);
    /* Without retention the queue is idle: no promise, not empty (seq, stats). */
    expect_ints(fcall("tick", &s, -1, "100", "0", "0", "1", END), TICK_ROUND_N, r);
    assert_int_equal(r[3], -1);
    assert_int_equal(r[5], 0);
    assert_int_equal(exists(qkey(&s, "timer")), 0);
}

/* A registry of its own per test: "<tag>-<pid>-<n>:queues". */
static const char *registry_of(const char *tag)
{
    static unsigned serial;
    char *s = scratch();
    snprintf(s, 192, "%s-%ld-%u:queues", tag, (long)getpid(), ++serial);
    return s;
}

static const char *companion(const char *reg, const char *suffix)
{
    char *s = scratch();
    if (strlen(reg) + strlen(suffix) + 4 > 192) fail_msg("registry key too long: %s", reg);
    strcpy(s, "{");
    strcat(s, reg);
    strcat(s, "}:");
    strcat(s, suffix);
    return s;
}

static long long score_of(const char *key, const char *member)
{
    redisReply *r = rcmd("ZSCORE", key, member, END);
    long long v = r->type == REDIS_REPLY_STRING ? (long long)strtod(r->str, NULL) : -1;
    freeReplyObject(r);
    return v;
}

static bool is_member(const char *set, const char *member)
{
    return int_reply(rcmd("SISMEMBER", set, member, END)) == 1;
}

/* timer_take's {token, next_in_ms, name...}: returns the token, names into out. */
static long long take(const char *reg, const char *lease, const char *sweep, size_t *n,
                      char out[][32])
{
    redisReply *r = rcmd("FCALL", RD_FUNCTION("timer_take"), "1", reg, "10", lease, sweep, "1000", "60000", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_true(r->elements >= 2);
    long long token = r->element[0]->integer;
    *n = r->elements - 2;
    for (size_t i = 0; i < *n; i++) snprintf(out[i], 32, "%s", r->element[i + 2]->str);
    freeReplyObject(r);
    return token;
}

static void test_registry_take_done(void **state)
{
    const char *reg = registry_of("sched");
    char regc[192];
    snprintf(regc, sizeof regc, "%s", reg);
    const char *timers = companion(regc, "timers"), *names = companion(regc, "names");
    char tk[192], nk[192], takenk[192];
    snprintf(tk, sizeof tk, "%s", timers);
    snprintf(nk, sizeof nk, "%s", names);
    snprintf(takenk, sizeof takenk, "%s", companion(regc, "taken"));

    /* Registration alone: SET and names index, no schedule entry. */
    assert_int_equal(int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "idle", "-1", END)), 1);
    assert_true(is_member(regc, "idle"));
    assert_int_equal(score_of(nk, "idle"), 0);
    assert_int_equal(score_of(tk, "idle"), -1);
    expect_error(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "", "0", END));
    expect_error(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "q", "x", END));

    /* Due now: taken with a lease; the report sets the next time. */
    long long now = redis_now_ms();
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "a", "0", END));
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "b", "0", END));
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "c", "0", END));
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "d", "600000", END));
    /* Later hints never raise an entry. */
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "a", "900000", END));
    assert_true(score_of(tk, "a") <= redis_now_ms());
    size_t n;
    char got[10][32];
    long long token = take(regc, "5000", "0", &n, got);
    assert_true(token > 0);
    assert_int_equal(n, 3);
    assert_in_range(score_of(tk, "a"), now + 5000, redis_now_ms() + 5000);
    redisReply *x = rcmd("HGET", takenk, "a", END);
    assert_int_equal(atoll(x->str), token);
    freeReplyObject(x);
    /* Nothing else is due: token 0. */
    size_t n2;
    char got2[10][32];
    assert_int_equal(take(regc, "5000", "0", &n2, got2), 0);
    assert_int_equal(n2, 0);

    /* b is registered again while taken (an enqueue after its tick): the
     * report may neither remove it nor raise its entry. */
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "b", "-1", END));
    long long b_before = score_of(tk, "b");
    long long removed = int_reply(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, num(token),
                                       "a", "2000", "0", "b", "-1", "1", "c", "-1", "1", END));
    assert_int_equal(removed, 1);               /* c only */
    now = redis_now_ms();
    assert_in_range(score_of(tk, "a"), now + 1900, now + 2000);
    assert_int_equal(score_of(tk, "b"), b_before);
    assert_true(is_member(regc, "b"));
    assert_false(is_member(regc, "c"));
    assert_int_equal(score_of(nk, "c"), -1);
    assert_int_equal(score_of(tk, "c"), -1);
    assert_int_equal(exists(takenk), 0);
    /* A stale report only lowers. */
    int_reply(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, num(token), "d", "1000", "0", END));
    assert_true(score_of(tk, "d") <= redis_now_ms() + 1000);
    int_reply(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, num(token), "d", "900000", "0", END));
    assert_true(score_of(tk, "d") <= redis_now_ms() + 1000);
    /* An idle report removes the entry, not the registration. */
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "a", "0", END));
    token = take(regc, "5000", "0", &n, got);
    assert_int_equal(n, 1);
    int_reply(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, num(token), "a", "-1", "0", END));
    assert_int_equal(score_of(tk, "a"), -1);
    assert_true(is_member(regc, "a"));

    expect_error(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, "1", "a", "x", "0", END));
    expect_error(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, "1", "a", "1", END));
    expect_error(rcmd("FCALL", RD_FUNCTION("timer_take"), "1", regc, "0", "5000", "0", "1000", "0", END));
}

/* The sweep puts names only in the SET (an older retryd, retryctl) in the
 * index and makes them due; it runs at most every sweep_every_ms. */
static void test_registry_sweep(void **state)
{
    const char *reg = registry_of("sweep");
    char regc[192];
    snprintf(regc, sizeof regc, "%s", reg);
    int_reply(rcmd("SADD", regc, "s1", "s2", "s3", END));
    size_t n;
    char got[10][32];
    long long token = take(regc, "5000", "100", &n, got);
    assert_true(token > 0);
    assert_int_equal(n, 3);
    assert_int_equal(score_of(companion(regc, "names"), "s2"), 0);
    int_reply(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, num(token), "s1", "-1", "0", "s2", "-1",
                   "0", "s3", "-1", "0", END));
    /* The pass ended; the next starts no sooner than sweep_cycle_ms. */
    assert_int_equal(take(regc, "5000", "100", &n, got), 0);
    assert_int_equal(n, 0);
}

static void test_queues_page(void **state)
{
    const char *reg = registry_of("page");
    char regc[192];
    snprintf(regc, sizeof regc, "%s", reg);
    static const char *const names[] = { "d", "a", "c", "b", "a b", "\xc3\xa9" };
    for (size_t i = 0; i < 6; i++)
        int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, names[i], "-1", END));
    static const char *const order[] = { "a", "a b", "b", "c", "d", "\xc3\xa9" };
    char cursor[32] = "";
    size_t seen = 0;
    for (int page = 0; page < 10; page++) {
        redisReply *r = rcmd("FCALL_RO", RD_FUNCTION("queues_page"), "1", regc, cursor, "4", END);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->element[0]->integer, 6);
        for (size_t i = 2; i < r->elements; i++) {
            assert_true(seen < 6);
            assert_string_equal(r->element[i]->str, order[seen++]);
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[1]->str);
        freeReplyObject(r);
        if (cursor[0] == '\0') break;
    }
    assert_int_equal(seen, 6);
    expect_error(rcmd("FCALL_RO", RD_FUNCTION("queues_page"), "1", regc, "", "0", END));
    expect_error(rcmd("FCALL_RO", RD_FUNCTION("queues_page"), "1", regc, "", "1001", END));
}

/* A registry key with a hash tag keeps it: the companions append to it. */
static void test_registry_tagged_prefix(void **state)
{
    char reg[64];
    snprintf(reg, sizeof reg, "t{%ld}:queues", (long)getpid());
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", reg, "q", "0", END));
    char timers[96];
    snprintf(timers, sizeof timers, "%s:timers", reg);
    assert_true(score_of(timers, "q") > 0);
}

/* Callers that do not forward hints (redis-cli, retryctl's other commands)
 * get the replies they always got, and the promise is left alone. */
static void test_no_hint_without_the_flag(void **state)
{
    queue_t q;
    queue_init(&q, "nohint");
    msg_t m;
    expect_enqueued(&q, fcall("enqueue", &q, -1, "a", "3", "5000", "", END), &m);
    enqueue_ok(&q, "b", 3, 0);
    claim_one(&q, 30000, &m);
    assert_int_equal(promise(&q), -1);
    expect_ok_msg(fcall("succeed", &q, m.id, "", END), &m);
    long long r[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(promise(&q), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timer_hints),
        cmocka_unit_test(test_settle_claim_timer_hints),
        cmocka_unit_test(test_extend_timer_hint),
        cmocka_unit_test(test_tick_promise_and_empty),
        cmocka_unit_test(test_registry_take_done),
        cmocka_unit_test(test_registry_sweep),
        cmocka_unit_test(test_queues_page),
        cmocka_unit_test(test_registry_tagged_prefix),
        cmocka_unit_test(test_no_hint_without_the_flag),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
