/* test_lua_expiry.c - integration tests of the Redis Functions library (lua/)
 * against a real redis-server: message expiry (docs/reference.md "Expiry",
 * docs/lifecycle.md "Expiry: the timer's schedule, never a scan") of ready,
 * scheduled, lane and processing messages at the edges of expires_at, the
 * policy's message_ttl and on_expiry, and the expiring index kept in step
 * with the pending states.
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_expiry"
#include "lua_support.h"

enum { TTL_MS = 300 };

static long long tick(const queue_t *q)
{
    long long r[TICK_N];
    expect_ints(fcall("tick", q, -1, "100", "0", "0", END), TICK_N, r);
    return r[2];   /* expired: retention's and expiry's */
}

static void get_msg(const queue_t *q, long long id, msg_t *m)
{
    expect_ok_msg(fcall("get", q, id, END), m);
}

static void expect_expired_dead(const queue_t *q, long long id, long long expires_at)
{
    msg_t m;
    get_msg(q, id, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_string_equal(msg_str(&m, "last_error"), "expired");
    assert_true(msg_int(&m, "updated_at") >= expires_at);
    assert_int_equal(msg_int(&m, "retry_count"), 0);
    assert_int_equal(zscore(qkey(q, "3:expiring"), id), -1);
    assert_true(zscore(qkey(q, "3:dead"), id) >= expires_at);
}

/* Due ids tick after tick: before expires_at nothing ends; the first tick at
 * or after it ends the message, whatever pending index holds it. */
static void test_pending_expire_at_the_edge(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "edge");
    long long at_ready, at_sched, at_lane;
    long long ready = enqueue_with(&q, "ready", 0, TTL_MS, 0, &at_ready);
    long long sched = enqueue_with(&q, "later", 60000, TTL_MS, 0, &at_sched);
    long long lane = enqueue_with(&q, "urgent", 0, TTL_MS, 5, &at_lane);
    assert_true(at_ready > 0 && at_sched > 0 && at_lane > 0);
    assert_int_equal(zcard(qkey(&q, "3:expiring")), 3);
    assert_int_equal(zscore(qkey(&q, "3:expiring"), ready), at_ready);
    /* Before: nothing ends (a tick right away is well before the 300 ms). */
    assert_true(redis_now_ms() < at_ready);
    assert_int_equal(tick(&q), 0);
    msg_t m;
    get_msg(&q, ready, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "expires_at"), at_ready);
    /* At the edge: once Redis's clock reaches the last expires_at. */
    long long last = at_ready > at_sched ? at_ready : at_sched;
    if (at_lane > last) last = at_lane;
    wait_until_ms(last);
    assert_int_equal(tick(&q), 3);
    expect_expired_dead(&q, ready, at_ready);
    expect_expired_dead(&q, sched, at_sched);
    expect_expired_dead(&q, lane, at_lane);
    assert_int_equal(llen(qkey(&q, "3:ready")), 0);
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 0);
    assert_int_equal(zcard(qkey(&q, "3:priority")), 0);
    assert_int_equal(counter(&q, "expired"), 3);
    assert_int_equal(counter(&q, "dead"), 3);
    /* A history entry, and a dead event per expiry. */
    get_msg(&q, ready, &m);
    assert_string_equal(msg_str(&m, "history"), "1/0//expired;");
    assert_int_equal(int_reply(rcmd("XLEN", qkey(&q, "events"), END)), 3);
    expect_nothing_to_claim(&q);
}

/* A claim that finds a message past its expiry before the tick does ends it
 * and does not deliver it; one that leases in time takes it out of the index. */
static void test_claim_never_delivers_an_expired_message(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "claimexp");
    long long at;
    long long id = enqueue_with(&q, "late", 0, TTL_MS, 0, &at);
    long long fresh = enqueue_with(&q, "fresh", 0, -1, 0, NULL);
    wait_until_ms(at);
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, fresh);
    expect_expired_dead(&q, id, at);
    assert_int_equal(counter(&q, "expired"), 1);

    /* Leased before its expiry: out of the index, never interrupted. */
    long long at2;
    long long kept = enqueue_with(&q, "kept", 0, TTL_MS, 0, &at2);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, kept);
    assert_int_equal(zscore(qkey(&q, "3:expiring"), kept), -1);
    wait_until_ms(at2);
    tick(&q);
    get_msg(&q, kept, &m);
    assert_string_equal(msg_str(&m, "status"), "processing");
    /* A success after its expiry is a success. */
    char token[64];
    token_of(&m, token);
    expect_ok_msg(fcall("succeed", &q, kept, token, END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    assert_int_equal(counter(&q, "expired"), 1);
}

/* A failure after the expiry ends the message with the failure's error
 * instead of scheduling a retry; one before it is a retry that goes back into
 * the expiring index. */
static void test_failure_after_expiry_ends_it(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "failexp");
    long long at;
    long long id = enqueue_with(&q, "x", 0, TTL_MS, 0, &at);
    msg_t m;
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "early", "1", 0, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(zscore(qkey(&q, "3:expiring"), id), at);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, id);
    wait_until_ms(at);
    fail_ok(&q, id, "too late", "1", 0, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_string_equal(msg_str(&m, "last_error"), "too late");
    assert_int_equal(msg_int(&m, "retry_count"), 2);
    assert_int_equal(counter(&q, "expired"), 1);
    assert_int_equal(counter(&q, "retried"), 1);
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), id), -1);
    assert_int_equal(zscore(qkey(&q, "3:expiring"), id), -1);
}

/* on_expiry "delete" deletes instead (counted expired, not dead); the
 * policy's message_ttl applies to an enqueue that gave none, 0 means none. */
static void test_policy_ttl_and_delete(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "deleteexp");
    redisReply *r = fcall("policy_set", &q, -1, "replace", "message_ttl", "1", "on_expiry",
                          "delete", END);
    if (!has_code(r, "ok")) fail_msg("policy_set: %s", reply_desc(r));
    freeReplyObject(r);
    long long at;
    long long id = enqueue_with(&q, "gone", 0, -1, 0, &at);
    long long now = redis_now_ms();
    assert_true(at > now + 500 && at <= now + 1000);
    long long own = enqueue_with(&q, "own", 0, 60000, 0, &at);
    (void)own;
    wait_until_ms(at - 59000);
    long long deadline = redis_now_ms() + 2000;
    while (exists(mkey(&q, id)) && redis_now_ms() < deadline) tick(&q);
    assert_int_equal(exists(mkey(&q, id)), 0);
    expect_code(fcall("get", &q, id, END), "not_found", NULL);
    assert_int_equal(counter(&q, "expired"), 1);
    assert_int_equal(counter(&q, "dead"), 0);
    assert_int_equal(llen(qkey(&q, "3:ready")), 1);   /* its own ttl: a minute */

    r = fcall("policy_set", &q, -1, "replace", "message_ttl", "0", END);
    if (!has_code(r, "ok")) fail_msg("policy_set: %s", reply_desc(r));
    freeReplyObject(r);
    long long none;
    enqueue_with(&q, "forever", 0, -1, 0, &none);
    assert_int_equal(none, -1);
}

/* A released lease and a snooze put the message back into the expiring
 * index; a replay of an expired dead letter clears its expiry. */
static void test_back_to_pending_keeps_the_expiry(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "backexp");
    long long at;
    long long id = enqueue_with(&q, "x", 0, 60000, 0, &at);
    msg_t m;
    claim_one(&q, 30000, &m);
    char token[64];
    token_of(&m, token);
    assert_int_equal(int_reply(fcall("release", &q, -1, num(id), token, END)), 1);
    assert_int_equal(zscore(qkey(&q, "3:expiring"), id), at);
    claim_one(&q, 30000, &m);
    token_of(&m, token);
    expect_ok_msg(fcall("snooze", &q, id, token, "60000", END), &m);
    assert_int_equal(zscore(qkey(&q, "3:expiring"), id), at);

    long long at2;
    long long dead = enqueue_with(&q, "y", 0, TTL_MS, 0, &at2);
    wait_until_ms(at2);
    tick(&q);
    expect_expired_dead(&q, dead, at2);
    expect_ok_msg(fcall("replay", &q, dead, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_no_field(&m, "expires_at");
    assert_int_equal(zscore(qkey(&q, "3:expiring"), dead), -1);
    /* Deleting a pending message takes it out of the index too. */
    expect_code(fcall("delete", &q, id, END), "ok", NULL);
    assert_int_equal(zcard(qkey(&q, "3:expiring")), 0);
}

/* The enqueue's timer hint covers the expiry: the timer visits the queue
 * when the first message expires, without scanning. */
static void test_enqueue_hints_the_expiry(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "hintexp");
    redisReply *r = fcall("enqueue", &q, -1, "x", "3", "0", "", "1", "default", "5000", "0", END);
    if (!has_code(r, "ok") || r->elements != 6) fail_msg("enqueue: %s", reply_desc(r));
    long long timer = r->element[3]->integer, expires_at = r->element[5]->integer;
    freeReplyObject(r);
    assert_in_range(timer, 4000, 5000);
    redisReply *t = rcmd("GET", qkey(&q, "timer"), END);
    assert_int_equal(t->type, REDIS_REPLY_STRING);
    assert_int_equal(atoll(t->str), expires_at);
    freeReplyObject(t);
    /* A delay past the expiry: the expiry is still the first thing due. */
    r = fcall("enqueue", &q, -1, "y", "3", "60000", "", "1", "default", "1000", "0", END);
    long long t2 = r->element[3]->integer;
    freeReplyObject(r);
    assert_in_range(t2, 0, 1000);
}

/* Gaps in the data: an expiring entry whose record is gone (evicted, deleted
 * by hand) or whose message is not pending (processing, dead) is dropped by
 * the tick, which ends nothing and counts nothing for it. */
static void test_stale_entries_are_dropped(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "staleexp");
    long long at;
    long long gone = enqueue_with(&q, "gone", 0, 60000, 0, &at);
    int_reply(rcmd("DEL", mkey(&q, gone), END));
    long long busy = enqueue_with(&q, "busy", 0, 60000, 0, NULL);
    msg_t m;
    claim_one(&q, 30000, &m);
    long long past = redis_now_ms() - 1;
    int_reply(rcmd("ZADD", qkey(&q, "3:expiring"), num(past), num(gone), END));
    int_reply(rcmd("ZADD", qkey(&q, "3:expiring"), num(past), num(busy), END));
    tick(&q);
    assert_int_equal(zcard(qkey(&q, "3:expiring")), 0);
    assert_int_equal(counter(&q, "expired"), 0);
    get_msg(&q, busy, &m);
    assert_string_equal(msg_str(&m, "status"), "processing");
    (void)at;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pending_expire_at_the_edge),
        cmocka_unit_test(test_claim_never_delivers_an_expired_message),
        cmocka_unit_test(test_failure_after_expiry_ends_it),
        cmocka_unit_test(test_policy_ttl_and_delete),
        cmocka_unit_test(test_back_to_pending_keeps_the_expiry),
        cmocka_unit_test(test_enqueue_hints_the_expiry),
        cmocka_unit_test(test_stale_entries_are_dropped),
    };
    return cmocka_run_group_tests_name(LUA_SUITE, tests, group_setup, NULL);
}
