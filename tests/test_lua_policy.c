/* test_lua_policy.c - integration tests of the Redis Functions library (lua/) against
 * a real redis-server: queue policy and flow control (docs/reference.md
 * "Queue policy and flow control"): backoff, jitter, pause, max in flight,
 * rate limits, retention.
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_policy"
#include "lua_support.h"
#include "retryd/shards.h"

/* ------------------------------------------------------------------------ */
/* Queue policy and flow control (docs/reference.md "Queue policy and flow control", docs/flow-control.md)           */
/* ------------------------------------------------------------------------ */

/* claim with the lease source (ARGV[4]): returns how many messages it leased
 * (ids into out) and the retry_ms after the hint (ms until the next token).
 * A claim that leased nothing ends with two more: the policy's wait_ms and
 * whether the queue is known. */
static size_t claim_gated(const queue_t *q, const char *lease_ms, int count, const char *source,
                          long long *ids, long long *retry_ms)
{
    redisReply *r = fcall("claim", q, -1, lease_ms, num(count), "1", source, END);
    if (!has_code(r, "ok") || r->elements < 3)
        fail_msg("claim: %s", reply_desc(r));
    size_t n = 0;
    while (1 + n < r->elements && r->element[1 + n]->type == REDIS_REPLY_ARRAY) n++;
    assert_int_equal(r->elements, 1 + n + 2 + (n == 0 ? 2 : 0));
    assert_int_equal(r->element[1 + n + 1]->type, REDIS_REPLY_INTEGER);
    *retry_ms = r->element[1 + n + 1]->integer;
    for (size_t i = 0; i < n; i++) {
        msg_t m;
        msg_parse(r->element[1 + i], &m);
        if (ids) ids[i] = m.id;
    }
    freeReplyObject(r);
    return n;
}

/* The reference table holds with every default written out explicitly. */
static void test_policy_defaults_keep_reference_table(void **state)
{
    static const long long delays_ms[] = { 2000, 4000, 8000, 16000 };
    queue_t q;
    queue_init(&q, "poldefaults");
    policy_set(&q, "replace", "max_retries", "3", "backoff.base_seconds", "1",
               "backoff.max_seconds", "3600", "backoff.jitter", "none", "max_in_flight", "0");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    for (int n = 1; n <= 4; n++) {
        claim_one(&q, 30000, &m);
        fail_ok(&q, id, "e", "1", -1, &m);
        assert_string_equal(msg_str(&m, "status"), "pending");
        assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), delays_ms[n - 1]);
        make_due(&q, id);
    }
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
}

/* delay = min(base x 2^n, max) seconds; retry_after_seconds still wins. */
static void test_policy_backoff_base_and_max(void **state)
{
    queue_t q;
    queue_init(&q, "polbackoff");
    policy_set(&q, "replace", "backoff.base_seconds", "3", "backoff.max_seconds", "10");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 6000);
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 10000);
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "e", "1", 777, &m);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 777);
}

/* full: uniform in [0, delay]; equal: delay/2 + uniform in [0, delay/2]. The
 * draws differ from one failure to the next. */
static void test_policy_jitter(void **state)
{
    static const char *const kinds[] = { "full", "equal" };
    for (int k = 0; k < 2; k++) {
        long long lo = 10000, hi = 0;
        for (int i = 0; i < 20; i++) {
            /* A queue per draw: full jitter may make a retry due within
             * milliseconds, and a claim would then take it before the
             * fresh message (what CI once saw: id 4 claimed for id 19). */
            char name[32];
            snprintf(name, sizeof name, "%s-%d", kinds[k], i);
            queue_t q;
            queue_init(&q, name);
            policy_set(&q, "replace", "backoff.jitter", kinds[k], "backoff.base_seconds", "5");
            long long id = enqueue_ok(&q, "job", 5, 0);
            msg_t m;
            claim_one(&q, 30000, &m);
            assert_int_equal(m.id, id);
            fail_ok(&q, id, "e", "1", -1, &m);
            long long d = msg_int(&m, "retry_after") - msg_int(&m, "updated_at");
            assert_true(d >= (k == 0 ? 0 : 5000) && d <= 10000); /* delay 5 x 2^1 s */
            if (d < lo) lo = d;
            if (d > hi) hi = d;
        }
        assert_true(hi - lo > 100);  /* 20 draws of one value would be no jitter */
    }
}

static void test_policy_set_validation(void **state)
{
    queue_t q;
    queue_init(&q, "polvalid");
    policy_set(&q, "replace", "max_retries", "4");
    static const char *const bad[][2] = {
        { "max_retries", "0" },           { "max_retries", "1001" },
        { "max_retries", "2.5" },         { "backoff.base_seconds", "3601" },
        { "backoff.max_seconds", "0" },   { "backoff.jitter", "some" },
        { "lease_seconds", "43201" },     { "dead_ttl", "-1" },
        { "succeeded_ttl", "3x" },        { "max_in_flight", "1000001" },
        { "rate_limit.per_second", "0" }, { "rate_limit.per_second", "inf" },
        { "rate_limit.burst", "0" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redisReply *r = fcall("policy_set", &q, -1, "merge", bad[i][0], bad[i][1], END);
        if (!has_code(r, "invalid") || r->elements != 3 || strcmp(r->element[1]->str, bad[i][0]) != 0)
            fail_msg("%s=%s: %s", bad[i][0], bad[i][1], reply_desc(r));
        freeReplyObject(r);
    }
    redisReply *r = fcall("policy_set", &q, -1, "merge", "rate_limit.per_second", "5", END);
    assert_true(has_code(r, "invalid"));
    assert_string_equal(r->element[1]->str, "rate_limit");
    freeReplyObject(r);
    assert_string_equal(policy_field(&q, "max_retries"), "4");  /* nothing changed */
    expect_error(fcall("policy_set", &q, -1, "upsert", "max_retries", "3", END));
    expect_error(fcall("policy_set", &q, -1, "merge", "max_retries", END));
    /* Durations take a unit; merge keeps the others, "" clears one. */
    policy_set(&q, "merge", "dead_ttl", "2d", "rate_limit.per_second", "0.5",
               "rate_limit.burst", "3");
    assert_string_equal(policy_field(&q, "dead_ttl"), "172800");
    assert_string_equal(policy_field(&q, "max_retries"), "4");
    policy_set(&q, "merge", "max_retries", "");
    assert_string_equal(policy_field(&q, "max_retries"), "");
    assert_string_equal(policy_field(&q, "rate_limit.per_second"), "0.5");
    policy_set(&q, "replace", "lease_seconds", "9");
    assert_string_equal(policy_field(&q, "dead_ttl"), "");
    assert_int_equal(exists(qkey(&q, "bucket")), 0);
}

/* alert_url: policy_set takes an absolute http(s) URL of 1-2048 bytes of
 * UTF-8 without spaces or control characters, and refuses anything else with
 * field alert_url; alerts_take answers it as element 1 ("" when not set or
 * when a value written by hand is no URL), read in the same call. */
static void test_policy_alert_url(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "polurl");
    char long_url[2100];
    memset(long_url, 'a', sizeof long_url - 1);
    long_url[sizeof long_url - 1] = '\0';
    memcpy(long_url, "http://x/", 9);
    long_url[2049] = '\0';  /* 2049 bytes */
    static const char *const bad[] = {
        "ftp://h/x", "http://", "https:///path", "/relative", "example.com/x",
        "HTTP://h/", "http://h/a b", "http://h/\t", "http://h/\x7f", "http://h/\xc2\x85",
        "http://h/\xff", "http://h/\xed\xa0\x80", "javascript:alert(1)",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] + 1; i++) {
        const char *v = i < sizeof bad / sizeof bad[0] ? bad[i] : long_url;
        redisReply *r = fcall("policy_set", &q, -1, "merge", "alert_url", v, END);
        if (!has_code(r, "invalid") || r->elements != 3 ||
            strcmp(r->element[1]->str, "alert_url") != 0)
            fail_msg("alert_url=%s: %s", v, reply_desc(r));
        freeReplyObject(r);
    }
    assert_string_equal(policy_field(&q, "alert_url"), "");
    long_url[2048] = '\0';  /* 2048 bytes: the most */
    policy_set(&q, "merge", "alert_url", long_url);
    assert_int_equal(int_reply(rcmd("HSTRLEN", qkey(&q, "policy"), "alert_url", END)), 2048);
    policy_set(&q, "merge", "alert_url", "https://h\xc3\xa9.example:8443/hook?q=\xe2\x82\xac#f");
    assert_string_equal(policy_field(&q, "alert_url"),
                        "https://h\xc3\xa9.example:8443/hook?q=\xe2\x82\xac#f");

    /* alerts_take answers the URL with and without deaths. */
    redisReply *t = fcall("alerts_take", &q, -1, "c", "10", "5000", END);
    assert_int_equal(t->elements, 2);
    assert_string_equal(t->element[1]->str, "https://h\xc3\xa9.example:8443/hook?q=\xe2\x82\xac#f");
    freeReplyObject(t);
    make_dead(&q, "boom");
    policy_set(&q, "merge", "alert_url", "http://127.0.0.1:9/q");
    t = fcall("alerts_take", &q, -1, "c", "10", "5000", END);
    assert_int_equal(t->elements, 7);
    assert_string_equal(t->element[1]->str, "http://127.0.0.1:9/q");
    assert_string_equal(t->element[4]->str, "boom");
    freeReplyObject(t);
    /* "" clears it: the daemon's --alert-url applies. */
    policy_set(&q, "merge", "alert_url", "");
    assert_string_equal(policy_field(&q, "alert_url"), "");
    t = fcall("alerts_take", &q, -1, "c", "10", "5000", END);
    assert_string_equal(t->element[1]->str, "");
    freeReplyObject(t);
    /* A value written by hand that policy_set would refuse counts as not set. */
    redisReply *x = rcmd("HSET", qkey(&q, "policy"), "alert_url", "file:///etc/passwd", END);
    freeReplyObject(x);
    t = fcall("alerts_take", &q, -1, "c", "10", "5000", END);
    assert_string_equal(t->element[1]->str, "");
    freeReplyObject(t);
}

/* A request's value beats the policy's, which beats the caller's default. */
static void test_policy_precedence(void **state)
{
    queue_t q;
    queue_init(&q, "polprec");
    policy_set(&q, "replace", "max_retries", "7", "lease_seconds", "5");
    redisReply *r = fcall("enqueue", &q, -1, "a", "3", "0", "", "1", "default", END);
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->elements, 5);
    assert_int_equal(r->element[4]->integer, 7);
    long long a = r->element[1]->integer;
    freeReplyObject(r);
    msg_t got;
    expect_ok_msg(fcall("get", &q, a, END), &got);
    assert_int_equal(msg_int(&got, "max_retries"), 7);
    r = fcall("enqueue", &q, -1, "b", "2", "0", "", "1", "request", END);
    assert_int_equal(r->element[4]->integer, 2);
    freeReplyObject(r);
    /* Each lease is bracketed by Redis clock reads before and after its call. */
    long long t0 = redis_now_ms(), retry;
    long long ids[2];
    assert_int_equal(claim_gated(&q, "60000", 1, "default", ids, &retry), 1);
    long long t1 = redis_now_ms();
    long long deadline = zscore(qkey(&q, "3:processing"), ids[0]);
    assert_in_range(deadline, t0 + 5000, t1 + 5000);
    assert_int_equal(claim_gated(&q, "60000", 1, "request", ids, &retry), 1);
    assert_true(zscore(qkey(&q, "3:processing"), ids[0]) >= t0 + 60000);
    /* extend: the flag's default gives way to the policy too. */
    msg_t m;
    t0 = redis_now_ms();
    r = fcall("extend", &q, ids[0], "", "60000", "1", "default", END);
    t1 = redis_now_ms();
    assert_true(has_code(r, "ok") && r->elements == 3);
    msg_parse(r->element[1], &m);
    freeReplyObject(r);
    assert_in_range(msg_int(&m, "lease_expires_at"), t0 + 5000, t1 + 5000);
}

static void test_pause_resume(void **state)
{
    queue_t q;
    queue_init(&q, "polpause");
    enqueue_ok(&q, "a", 3, 0);
    assert_int_equal(int_reply(fcall("pause", &q, -1, "1", END)), 1);
    long long retry, ids[2];
    assert_int_equal(claim_gated(&q, "30000", 2, "default", ids, &retry), 0);
    assert_int_equal(retry, 0);
    assert_int_equal(counter(&q, "held_paused"), 1);
    /* Everything else goes on; a policy write keeps the pause. */
    enqueue_ok(&q, "b", 3, 0);
    policy_set(&q, "replace", "max_retries", "2");
    assert_string_equal(policy_field(&q, "paused"), "1");
    expect_nothing_to_claim(&q);
    assert_int_equal(int_reply(fcall("pause", &q, -1, "0", END)), 0);
    assert_int_equal(claim_gated(&q, "30000", 2, "default", ids, &retry), 2);
    expect_error(fcall("pause", &q, -1, "yes", END));
    /* An empty paused queue holds no claim back. */
    int_reply(fcall("pause", &q, -1, "1", END));
    expect_nothing_to_claim(&q);
    assert_int_equal(counter(&q, "held_paused"), 2);  /* the one above with b waiting */
}

static void test_max_in_flight(void **state)
{
    queue_t q;
    queue_init(&q, "polcap");
    for (int i = 0; i < 5; i++) enqueue_ok(&q, "job", 3, 0);
    policy_set(&q, "replace", "max_in_flight", "2");
    long long retry, ab[5], c[5];
    assert_int_equal(claim_gated(&q, "30000", 5, "default", ab, &retry), 2);
    assert_int_equal(claim_gated(&q, "30000", 1, "default", NULL, &retry), 0);
    assert_int_equal(retry, 0);
    assert_int_equal(counter(&q, "held_cap"), 2);
    msg_t m;
    expect_ok_msg(fcall("succeed", &q, ab[0], "", END), &m);
    assert_int_equal(claim_gated(&q, "30000", 5, "default", c, &retry), 1);
    /* A cap lowered below what is in flight: nothing until two have left. */
    policy_set(&q, "merge", "max_in_flight", "1");
    assert_int_equal(zcard(qkey(&q, "3:processing")), 2);
    fail_ok(&q, c[0], "e", "1", 0, &m);
    assert_int_equal(claim_gated(&q, "30000", 1, "default", NULL, &retry), 0);
    expect_ok_msg(fcall("succeed", &q, ab[1], "", END), &m);
    assert_int_equal(claim_gated(&q, "30000", 3, "default", c, &retry), 1);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 1);
}

/* The library keeps each queue's key names between calls, for at most 1000
 * queues at a time: 1,100 queues in turn (past the bound, so the kept names
 * are dropped and built again), each claim answers from its own queue, and a
 * pause read by one call is not seen by the next queue's call. */
static void test_many_queues_keep_their_own_keys(void **state)
{
    enum { QUEUES = 1100 };
    queue_t *qs = calloc(QUEUES, sizeof *qs);
    assert_non_null(qs);
    char payload[32];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < QUEUES; i++) {
            if (round == 0) {
                queue_t q;
                queue_init(&q, "kept");
                qs[i] = q;
            }
            snprintf(payload, sizeof payload, "p-%d-%d", i, round);
            enqueue_ok(&qs[i], payload, 3, 0);
        }
        int_reply(fcall("pause", &qs[0], -1, "1", END));
        expect_nothing_to_claim(&qs[0]);
        int_reply(fcall("pause", &qs[0], -1, "0", END));
        for (int i = 0; i < QUEUES; i++) {
            msg_t m;
            claim_one(&qs[i], 30000, &m);
            snprintf(payload, sizeof payload, "p-%d-%d", i, round);
            assert_string_equal(msg_str(&m, "payload"), payload);
            expect_ok_msg(fcall("succeed", &qs[i], m.id, "", END), &m);
        }
    }
    free(qs);
}

/* A bucket of burst 3 at 4/s: three at once, then one per 250 ms; a claim
 * held back says when the next token is due. (Each step must run within a
 * token's 250 ms of the one before it: 100 ms was close for a loaded host.) */
static void test_rate_limit_bucket(void **state)
{
    queue_t q;
    queue_init(&q, "polrate");
    for (int i = 0; i < 8; i++) enqueue_ok(&q, "job", 3, 0);
    policy_set(&q, "replace", "rate_limit.per_second", "4", "rate_limit.burst", "3");
    long long retry, ids[8];
    assert_int_equal(claim_gated(&q, "30000", 5, "default", ids, &retry), 3);
    assert_int_equal(claim_gated(&q, "30000", 1, "default", NULL, &retry), 0);
    /* retry counts from the held claim's clock, so the wait starts after it
     * (a clock read before the call can be earlier and wake too soon). */
    long long t0 = redis_now_ms();
    assert_true(retry > 0 && retry <= 250);
    assert_true(counter(&q, "held_rate") >= 1);
    wait_until_ms(t0 + retry);
    assert_int_equal(claim_gated(&q, "30000", 2, "default", ids, &retry), 1);
    /* The bucket expires when it would be full again: no key is left idle. */
    long long ttl = int_reply(rcmd("PTTL", qkey(&q, "bucket"), END));
    assert_true(ttl > 0 && ttl <= 750);
}

/* A rate changed mid-bucket keeps the tokens it had, up to the new burst;
 * removing the rate removes the bucket. */
static void test_rate_changed_mid_bucket(void **state)
{
    queue_t q;
    queue_init(&q, "polratechange");
    for (int i = 0; i < 10; i++) enqueue_ok(&q, "job", 3, 0);
    policy_set(&q, "replace", "rate_limit.per_second", "0.01", "rate_limit.burst", "5");
    long long retry;
    assert_int_equal(claim_gated(&q, "30000", 1, "default", NULL, &retry), 1); /* 4 left */
    policy_set(&q, "replace", "rate_limit.per_second", "0.02", "rate_limit.burst", "2");
    assert_int_equal(claim_gated(&q, "30000", 5, "default", NULL, &retry), 2);
    assert_int_equal(claim_gated(&q, "30000", 1, "default", NULL, &retry), 0);
    assert_true(retry > 40000 && retry <= 50000);   /* one token per 50 s */
    policy_set(&q, "replace", "rate_limit.per_second", "0.01", "rate_limit.burst", "9");
    assert_int_equal(claim_gated(&q, "30000", 1, "default", NULL, &retry), 0);
    policy_set(&q, "replace", "max_in_flight", "0");
    assert_int_equal(exists(qkey(&q, "bucket")), 0);
    assert_int_equal(claim_gated(&q, "30000", 5, "default", NULL, &retry), 5);
}

/* The policy's retention wins over tick's arguments (the daemon's flags), and
 * the timer hint of a finished message follows it. */
static void test_policy_retention(void **state)
{
    queue_t q;
    queue_init(&q, "polttl");
    policy_set(&q, "replace", "dead_ttl", "1", "succeeded_ttl", "0");
    long long dead = make_dead(&q, "gone soon");
    long long ok = enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    redisReply *r = fcall("succeed", &q, ok, "", "1", END);  /* daemon: 1 ms */
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    wait_until_ms(zscore(qkey(&q, "3:dead"), dead) + 1001);
    long long t[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "1", END), TICK_N, t);
    assert_int_equal(t[2], 1);
    assert_int_equal(exists(mkey(&q, dead)), 0);
    assert_int_equal(exists(mkey(&q, ok)), 1);  /* succeeded_ttl 0 keeps it */
    /* A queue with nothing but a policy stays registered. */
    int_reply(rcmd("DEL", qkey(&q, "3:succeeded"), mkey(&q, ok), qkey(&q, "stats"), qkey(&q, "seq"),
                   qkey(&q, "events"), qkey(&q, "errors"), END));
    long long e[TICK_ROUND_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_ROUND_N, e);
    assert_int_equal(e[5], 0);
}

/* ------------------------------------------------------------------------ */
/* The SQS endpoint's policy fields (docs/reference.md "Queue policy and    */
/* flow control", docs/sqs.md section 3)                                    */
/* ------------------------------------------------------------------------ */

/* Claims one message with a 1 ms lease and waits (on Redis's clock) until it
 * has run out. */
static void claim_and_let_lapse(const queue_t *q, long long id)
{
    msg_t m;
    claim_one(q, 1, &m);
    assert_int_equal(m.id, id);
    wait_until_ms(zscore(qkey(q, "3:processing"), id) + 1);
}

/* lease_expiry "redeliver": a lease that runs out counts the attempt (retry
 * count, the history's lease_expired, the death rule) but schedules no
 * backoff: the message is claimable at once, by reclaim and by the tick.
 * "backoff" (the default) schedules it by the table; an explicit fail keeps
 * the backoff on a redeliver queue too. */
static void test_lease_expiry_redeliver(void **state)
{
    queue_t q, b;
    queue_init(&q, "redeliver");
    queue_init(&b, "expirybackoff");
    policy_set(&q, "replace", "lease_expiry", "redeliver", "max_retries", "3");
    long long id = enqueue_ok(&q, "job", 3, 0);
    claim_and_let_lapse(&q, id);
    long long rc[2];
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, rc);
    assert_int_equal(rc[0], 1);
    msg_t m;
    claim_one(&q, 1, &m);   /* due at once: this claim promotes and takes it */
    assert_int_equal(m.id, id);
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_string_equal(msg_str(&m, "history"), "1/1//lease expired;");
    wait_until_ms(zscore(qkey(&q, "3:processing"), id) + 1);
    long long t[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, t);
    assert_int_equal(t[1], 1);   /* reclaimed */
    assert_int_equal(t[4], 1);   /* and claimable in the same tick */
    assert_int_equal(llen(qkey(&q, "3:due")), 1);
    claim_and_let_lapse(&q, id);
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, t);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");   /* the third attempt: budget spent */
    assert_int_equal(msg_int(&m, "retry_count"), 3);
    assert_int_equal(counter(&q, "lease_expired"), 3);

    /* An explicit failure keeps the backoff table on a redeliver queue. */
    id = enqueue_ok(&q, "job", 3, 0);
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 2000);

    /* The default: the lease expiry is scheduled by the backoff table. */
    id = enqueue_ok(&b, "job", 3, 0);
    claim_and_let_lapse(&b, id);
    expect_ints(fcall("reclaim", &b, -1, "100", END), 2, rc);
    expect_ok_msg(fcall("get", &b, id, END), &m);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 2000);
    assert_true(zscore(qkey(&b, "3:scheduled"), id) > 0);
}

/* Fails message id `times` times (retry_after 0: due at once), claiming it
 * before each. */
static void fail_times(const queue_t *q, long long id, int times, msg_t *m)
{
    for (int i = 0; i < times; i++) {
        claim_one(q, 30000, m);
        assert_int_equal(m->id, id);
        fail_ok(q, id, "again", "1", 0, m);
    }
}

/* max_retries up to 1000 and "unlimited" (-1 in the message): retry_count and
 * max_retries read back exactly past the header's byte, and a message with
 * max_retries M is delivered M times, the M-th failure kills it. */
static void test_wide_retry_counters(void **state)
{
    queue_t q, u;
    queue_init(&q, "wide");
    queue_init(&u, "unlimited");
    policy_set(&q, "replace", "max_retries", "300");
    policy_set(&u, "replace", "max_retries", "unlimited");
    msg_t m;
    redisReply *r = fcall("enqueue", &q, -1, "job", "3", "0", "", "", "default", END);
    assert_true(has_code(r, "ok"));
    long long id = r->element[1]->integer;
    freeReplyObject(r);
    fail_times(&q, id, 299, &m);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 299);
    assert_int_equal(msg_int(&m, "max_retries"), 300);
    claim_one(&q, 30000, &m);   /* the 300th delivery */
    assert_int_equal(msg_int(&m, "retry_count"), 299);
    fail_ok(&q, id, "last", "1", 0, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 300);

    r = fcall("enqueue", &u, -1, "job", "3", "0", "", "1", "default", END);
    assert_true(has_code(r, "ok") && r->elements == 5);
    assert_int_equal(r->element[4]->integer, -1);   /* the max_retries it got */
    id = r->element[1]->integer;
    freeReplyObject(r);
    fail_times(&u, id, 260, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    claim_one(&u, 30000, &m);   /* the leased reply reads it exactly too */
    assert_int_equal(msg_int(&m, "retry_count"), 260);
    assert_int_equal(msg_int(&m, "max_retries"), -1);
    /* A non-retryable failure still ends it. */
    fail_ok(&u, id, "fatal", "0", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 261);
    assert_int_equal(msg_int(&m, "max_retries"), -1);
}

/* The fields' ranges, and the stamps, which only the library writes. */
static void test_policy_new_fields_validation(void **state)
{
    queue_t q;
    queue_init(&q, "polnew");
    static const char *const bad[][2] = {
        { "lease_expiry", "later" },        { "delay_seconds", "901" },
        { "delay_seconds", "-1" },          { "max_payload_bytes", "1023" },
        { "max_payload_bytes", "1048577" }, { "wait_seconds", "21" },
        { "sqs", "yes" },                   { "content_based_dedup", "1" },
        { "max_retries", "Unlimited" },     { "created_at", "5" },
        { "updated_at", "5" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redisReply *r = fcall("policy_set", &q, -1, "merge", bad[i][0], bad[i][1], END);
        if (!has_code(r, "invalid") || r->elements != 3 || strcmp(r->element[1]->str, bad[i][0]) != 0)
            fail_msg("%s=%s: %s", bad[i][0], bad[i][1], reply_desc(r));
        freeReplyObject(r);
    }
    assert_int_equal(exists(qkey(&q, "policy")), 0);
    policy_set(&q, "replace", "lease_expiry", "redeliver", "delay_seconds", "900",
               "max_payload_bytes", "1048576", "wait_seconds", "20", "sqs", "true",
               "content_based_dedup", "false", "max_retries", "1000");
    policy_set(&q, "merge", "delay_seconds", "0", "wait_seconds", "0", "max_payload_bytes", "1024",
               "max_retries", "unlimited");
    redisReply *r = rcmd("HGET", qkey(&q, "policy"), "max_retries", END);
    assert_string_equal(r->str, "unlimited");
    freeReplyObject(r);
}

static long long policy_stamp(const queue_t *q, const char *name)
{
    redisReply *r = rcmd("HGET", qkey(q, "policy"), name, END);
    long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return v;
}

/* created_at at the first set, updated_at at each set that changes a field;
 * a policy set back to nothing is gone, stamps and all. */
static void test_policy_stamps(void **state)
{
    queue_t q;
    queue_init(&q, "polstamps");
    long long before = redis_now_ms();
    policy_set(&q, "replace", "delay_seconds", "5");
    long long created = policy_stamp(&q, "created_at");
    assert_true(created >= before && created <= redis_now_ms());
    assert_int_equal(policy_stamp(&q, "updated_at"), created);
    wait_until_ms(created + 2);
    policy_set(&q, "merge", "delay_seconds", "5");   /* no change */
    assert_int_equal(policy_stamp(&q, "updated_at"), created);
    policy_set(&q, "merge", "wait_seconds", "3");
    assert_int_equal(policy_stamp(&q, "created_at"), created);
    assert_true(policy_stamp(&q, "updated_at") >= created + 2);
    freeReplyObject(fcall("pause", &q, -1, "1", END));
    freeReplyObject(fcall("pause", &q, -1, "0", END));
    assert_int_equal(policy_stamp(&q, "created_at"), created);
    redisReply *r = fcall("policy_set", &q, -1, "replace", END);
    assert_true(has_code(r, "ok") && r->elements == 1);
    freeReplyObject(r);
    assert_int_equal(exists(qkey(&q, "policy")), 0);
}

/* Mode "create" writes the policy only when the queue has none, and answers
 * the stored one either way. */
static void test_policy_create(void **state)
{
    queue_t q;
    queue_init(&q, "polcreate");
    redisReply *r = fcall("policy_set", &q, -1, "create", "sqs", "true", "lease_expiry",
                          "redeliver", END);
    assert_true(has_code(r, "created"));
    assert_int_equal(r->elements, 1 + 2 * 4);   /* the two fields and the two stamps */
    freeReplyObject(r);
    r = fcall("policy_set", &q, -1, "create", "sqs", "false", END);
    assert_true(has_code(r, "exists"));
    assert_int_equal(r->elements, 1 + 2 * 4);
    bool redeliver = false;
    for (size_t i = 1; i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, "lease_expiry") == 0)
            redeliver = strcmp(r->element[i + 1]->str, "redeliver") == 0;
    assert_true(redeliver);
    freeReplyObject(r);
    r = rcmd("HGET", qkey(&q, "policy"), "sqs", END);
    assert_string_equal(r->str, "true");   /* unchanged */
    freeReplyObject(r);
    r = fcall("policy_set", &q, -1, "create", "wait_seconds", "99", END);
    assert_true(has_code(r, "invalid"));
    freeReplyObject(r);
    r = fcall("policy_set", &q, -1, "merge", "sqs", "false", END);
    assert_true(has_code(r, "ok"));   /* the other modes answer "ok" as before */
    freeReplyObject(r);
}

/* delay_seconds: the delay of an enqueue whose ARGV[3] is "" (none given). */
static void test_policy_delay_default(void **state)
{
    queue_t q;
    queue_init(&q, "poldelay");
    redisReply *r = fcall("enqueue", &q, -1, "now", "3", "", END);   /* no policy: 0 */
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    assert_int_equal(llen(qkey(&q, "3:ready")), 1);
    policy_set(&q, "replace", "delay_seconds", "5");
    msg_t m;
    expect_enqueued(&q, fcall("enqueue", &q, -1, "later", "3", "", END), &m);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "created_at"), 5000);
    assert_true(zscore(qkey(&q, "3:scheduled"), m.id) > 0);
    expect_enqueued(&q, fcall("enqueue", &q, -1, "given", "3", "0", END), &m);
    assert_no_field(&m, "retry_after");   /* a delay given wins, 0 too */
    expect_enqueued(&q, fcall("enqueue", &q, -1, "given", "3", "1000", END), &m);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "created_at"), 1000);
}

/* max_payload_bytes: a longer payload is refused in the enqueue, nothing
 * created; without it any payload is taken. */
static void test_policy_max_payload_bytes(void **state)
{
    queue_t q;
    queue_init(&q, "polsize");
    static char big[2049];
    memset(big, 'x', sizeof big - 1);
    redisReply *r = fcall("enqueue", &q, -1, big, "3", "0", END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    policy_set(&q, "replace", "max_payload_bytes", "1024");
    big[1025] = '\0';
    r = fcall("enqueue", &q, -1, big, "3", "0", END);
    if (!has_code(r, "too_large") || r->elements != 2 || r->element[1]->integer != 1024)
        fail_msg("enqueue of 1025 bytes past 1024: %s", reply_desc(r));
    freeReplyObject(r);
    assert_int_equal(counter(&q, "enqueued"), 1);
    big[1024] = '\0';
    r = fcall("enqueue", &q, -1, big, "3", "0", END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    assert_int_equal(counter(&q, "enqueued"), 2);
}

/* A claim that leases nothing answers the policy's wait (ms, -1 when not set)
 * and whether the queue is known (a policy, or it had messages). */
static void expect_empty_claim(const queue_t *q, long long wait_ms, long long known)
{
    redisReply *r = fcall("claim", q, -1, "30000", "1", "1", "default", END);
    if (!has_code(r, "ok") || r->elements != 5)
        fail_msg("empty claim: %s", reply_desc(r));
    assert_int_equal(r->element[3]->integer, wait_ms);
    assert_int_equal(r->element[4]->integer, known);
    freeReplyObject(r);
}

static void test_empty_claim_answers_wait_and_known(void **state)
{
    queue_t q, p;
    queue_init(&q, "emptyclaim");
    queue_init(&p, "emptywait");
    expect_empty_claim(&q, -1, 0);
    assert_int_equal(exists(qkey(&q, "stats")), 0);   /* it wrote nothing */
    long long id = enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, id);
    expect_empty_claim(&q, -1, 1);
    policy_set(&p, "replace", "wait_seconds", "7");
    expect_empty_claim(&p, 7000, 1);
    /* A claim that leases answers as before: hint and retry_ms after it. */
    enqueue_ok(&p, "job", 3, 0);
    redisReply *r = fcall("claim", &p, -1, "30000", "1", "1", "default", END);
    assert_int_equal(r->elements, 4);
    freeReplyObject(r);
}

/* ------------------------------------------------------------------------ */
/* shards: shards_set and policy_copy (docs/sharding.md "Where each key     */
/* goes", "Changing shards on a live queue")                                */
/* ------------------------------------------------------------------------ */

#define SHARD_SPAN 10000000000000LL /* 10^13: shard k's ids are k * 10^13 + n */

/* Shard k's queue value: the same name, base "retryd:{<name>:<k>.<salt>}". */
static void shard_of(const queue_t *q0, int k, int salt, queue_t *out)
{
    *out = *q0;
    snprintf(out->base, sizeof out->base, "retryd:{%.80s:%d.%d}", q0->name, k, salt);
}

/* The value of field in a flat field, value array from index `from`, or NULL. */
static const char *pair_value(const redisReply *r, size_t from, const char *field)
{
    for (size_t i = from; i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, field) == 0) return r->element[i + 1]->str;
    return NULL;
}

/* {"invalid", field, why}: frees r. */
static void expect_invalid(redisReply *r, const char *field)
{
    assert_true(has_code(r, "invalid"));
    assert_int_equal(r->elements, 3);
    assert_string_equal(r->element[1]->str, field);
    freeReplyObject(r);
}

static const char *layout_field(const queue_t *q, const char *field)
{
    redisReply *r = rcmd("HGET", qkey(q, "shard"), field, END);
    char *out = scratch();
    out[0] = '\0';
    if (r->type == REDIS_REPLY_STRING) snprintf(out, 192, "%s", r->str);
    freeReplyObject(r);
    return out;
}

/* policy_copy of shard 0's policy_get, as the daemon sends it. */
static redisReply *copy_to(const queue_t *q0, const queue_t *qk)
{
    redisReply *g = fcall("policy_get", q0, -1, END);
    assert_int_equal(g->type, REDIS_REPLY_ARRAY);
    const char *rev = pair_value(g, 0, "layout.rev");
    assert_non_null(rev);
    const char *args[64];
    size_t n = 0;
    args[n++] = rev;
    for (size_t i = 0; i < g->elements && n < 64; i++) args[n++] = g->element[i]->str;
    redisReply *r = fcall_bin("policy_copy", qk, -1, n, args, NULL);
    freeReplyObject(g);
    return r;
}

/* A raise writes `shards` and the layout on shard 0; policy_set never
 * changes `shards` and a replace keeps it; the copies carry policy and
 * layout to shards 1..M-1 only, newest rev wins; close ends the raise. */
static void test_shards_raise_copy_close(void **state)
{
    (void)state;
    queue_t q, q1, q2, q3;
    queue_init(&q, "shraise");
    shard_of(&q, 1, 0, &q1);
    shard_of(&q, 2, 0, &q2);
    shard_of(&q, 3, 0, &q3);
    policy_set(&q, "replace", "max_retries", "4");
    long long before = redis_now_ms();
    redisReply *r = fcall("shards_set", &q, -1, "raise", "3", "0,0", END);
    assert_true(has_code(r, "ok"));
    long long rev = atoll(pair_value(r, 1, "rev"));
    assert_true(rev >= before);
    assert_string_equal(pair_value(r, 1, "from"), "1");
    assert_string_equal(pair_value(r, 1, "hw"), "3");
    assert_string_equal(pair_value(r, 1, "salts"), "0,0");
    freeReplyObject(r);
    assert_string_equal(policy_field(&q, "shards"), "3");
    assert_string_equal(policy_field(&q, "max_retries"), "4");
    const char *keys = layout_field(&q, "keys");
    assert_true(strncmp(keys, "1@", 2) == 0);
    assert_true(atoll(keys + 2) >= before + 86400000);

    /* policy_set never writes shards; a replace keeps it. */
    r = fcall("policy_set", &q, -1, "merge", "shards", "5", END);
    expect_invalid(r, "shards");
    policy_set(&q, "replace", "max_retries", "5");
    assert_string_equal(policy_field(&q, "shards"), "3");
    /* A second raise waits for this one to settle. */
    r = fcall("shards_set", &q, -1, "raise", "4", "0,0,0", END);
    assert_true(has_code(r, "settling"));
    freeReplyObject(r);

    /* The copies: shards 1 and 2 get the policy and the layout. */
    r = copy_to(&q, &q2);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    r = copy_to(&q, &q1);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    assert_string_equal(policy_field(&q2, "max_retries"), "5");
    assert_string_equal(policy_field(&q2, "shards"), "3");
    assert_string_equal(layout_field(&q2, "index"), "2");
    assert_int_equal(atoll(layout_field(&q2, "rev")), rev);
    assert_string_equal(layout_field(&q2, "salts"), "0,0");
    assert_string_equal(layout_field(&q2, "from"), "1");
    char digest[64];
    snprintf(digest, sizeof digest, "%s", layout_field(&q2, "digest"));
    assert_int_equal(strlen(digest), 40);
    assert_string_equal(layout_field(&q1, "digest"), digest);   /* the same policy */
    /* Shard 3 is not one of 3 shards: nothing written. */
    r = copy_to(&q, &q3);
    assert_true(has_code(r, "outside"));
    assert_string_equal(r->element[1]->str, "3");
    freeReplyObject(r);
    assert_int_equal(exists(qkey(&q3, "policy")), 0);
    assert_int_equal(exists(qkey(&q3, "shard")), 0);
    /* A copy to shard 0 is refused. */
    r = copy_to(&q, &q);
    expect_error(r);

    /* Close: only for the rev it saw. */
    r = fcall("shards_set", &q, -1, "close", num(rev - 1), END);
    assert_true(has_code(r, "stale"));
    freeReplyObject(r);
    r = fcall("shards_set", &q, -1, "close", num(rev), END);
    assert_true(has_code(r, "ok"));
    assert_null(pair_value(r, 1, "from"));
    long long closed = atoll(pair_value(r, 1, "rev"));
    assert_true(closed > rev);
    freeReplyObject(r);
    /* A policy change reaches shard 2 with the new rev; its digest moves. */
    policy_set(&q, "merge", "lease_seconds", "60");
    r = copy_to(&q, &q2);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    assert_string_equal(policy_field(&q2, "lease_seconds"), "60");
    assert_string_equal(layout_field(&q2, "from"), "");
    assert_int_equal(atoll(layout_field(&q2, "rev")), closed);
    assert_string_not_equal(layout_field(&q2, "digest"), digest);
    /* An older copy (shard 1 still holds the raise's rev) cannot overwrite a
     * newer one: shard 2 refuses the copy of rev. */
    r = fcall("policy_copy", &q2, -1, num(rev), "shards", "3", "layout.rev", num(rev), END);
    assert_true(has_code(r, "stale"));
    assert_int_equal(atoll(r->element[1]->str), closed);
    freeReplyObject(r);
    assert_string_equal(policy_field(&q2, "lease_seconds"), "60");
}

/* The raise's refusals, none of which writes anything. */
static void test_shards_raise_refusals(void **state)
{
    (void)state;
    queue_t q, q1;
    queue_init(&q, "shrefuse");
    shard_of(&q, 1, 0, &q1);
    static const char *const bad[][2] = {
        { "1", "" }, { "65", "" }, { "x", "" }, { "3", "0" }, { "3", "0,0,0" },
        { "3", "0,65536" }, { "3", "0,-1" }, { "3", "0,07" }, { "3", "0,a" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redisReply *r = fcall("shards_set", &q, -1, "raise", bad[i][0], bad[i][1], END);
        assert_true(has_code(r, "invalid"));
        freeReplyObject(r);
    }
    assert_int_equal(exists(qkey(&q, "shard")), 0);
    assert_int_equal(exists(qkey(&q, "policy")), 0);
    expect_error(fcall("shards_set", &q1, -1, "raise", "3", "0,0", END));   /* not shard 0 */
    expect_error(fcall("shards_set", &q, -1, "lift", "3", "0,0", END));

    /* A shard keeps its salt; each raise keeps the count before it in `keys`
     * for 24 h, and a fourth live entry is refused. */
    const char *raises[][2] = { { "2", "7" }, { "3", "7,1" }, { "4", "7,1,2" } };
    for (size_t i = 0; i < 3; i++) {
        redisReply *r = fcall("shards_set", &q, -1, "raise", raises[i][0], raises[i][1], END);
        assert_true(has_code(r, "ok"));
        char rev[32];
        snprintf(rev, sizeof rev, "%s", pair_value(r, 1, "rev"));
        freeReplyObject(r);
        if (i == 0) {
            r = fcall("shards_set", &q, -1, "close", rev, END);
            freeReplyObject(r);
            r = fcall("shards_set", &q, -1, "raise", "3", "8,1", END);
            expect_invalid(r, "salts");
            continue;
        }
        r = fcall("shards_set", &q, -1, "close", rev, END);
        assert_true(has_code(r, "ok"));
        freeReplyObject(r);
    }
    const char *keys = layout_field(&q, "keys");
    assert_true(strncmp(keys, "3@", 2) == 0 && strstr(keys, ",2@") && strstr(keys, ",1@"));
    redisReply *r = fcall("shards_set", &q, -1, "raise", "5", "7,1,2,0", END);
    assert_true(has_code(r, "settling"));
    freeReplyObject(r);
    assert_string_equal(policy_field(&q, "shards"), "4");
    assert_string_equal(layout_field(&q, "salts"), "7,1,2");
}

/* A STRING key's value, "" when absent. */
static const char *rcmd_str(const char *cmd, const char *key)
{
    redisReply *r = rcmd(cmd, key, END);
    char *out = scratch();
    out[0] = '\0';
    if (r->type == REDIS_REPLY_STRING) snprintf(out, 192, "%s", r->str);
    freeReplyObject(r);
    return out;
}

/* enqueue with every ARGV: key, group, flags and rev (ARGV[13]). */
static redisReply *enqueue_placed(const queue_t *q, const char *payload, const char *key,
                                  const char *group, const char *flags, const char *rev)
{
    return fcall("enqueue", q, -1, payload, "3", "", key, "1", "default", "", "", group, "", "",
                 flags, rev, END);
}

static void expect_placed_code(redisReply *r, const char *code)
{
    if (!has_code(r, code)) fail_msg("expected {\"%s\"...}, got %s", code, reply_desc(r));
    freeReplyObject(r);
}

/* Enqueues payload on shard qk of q0 with the rev shard 0's layout has now
 * (a copy made first); returns the id. */
static long long placed_id(const queue_t *q0, const queue_t *qk, const char *payload)
{
    freeReplyObject(copy_to(q0, qk));
    redisReply *r = enqueue_placed(qk, payload, "", "", "", layout_field(q0, "rev"));
    if (!has_code(r, "ok")) fail_msg("enqueue on a shard: %s", reply_desc(r));
    long long id = r->element[1]->integer;
    freeReplyObject(r);
    return id;
}

/* A lowering: begin marks it, shard_retire checks a shard and fences it in
 * one call (refused while the shard holds a message in any state: pending,
 * processing, dead, succeeded), abort takes the mark back, commit sets the
 * count; a copy to a retired shard within the new count takes the mark off. */
static void test_shards_lower_and_retire(void **state)
{
    (void)state;
    queue_t q, q1, q2;
    queue_init(&q, "shlower");
    shard_of(&q, 1, 0, &q1);
    shard_of(&q, 2, 0, &q2);
    redisReply *r = fcall("shards_set", &q, -1, "raise", "3", "0,0", END);
    char rev[32];
    snprintf(rev, sizeof rev, "%s", pair_value(r, 1, "rev"));
    freeReplyObject(r);
    r = fcall("shards_set", &q, -1, "lower_begin", "2", END);
    assert_true(has_code(r, "settling"));        /* the raise has not settled */
    freeReplyObject(r);
    freeReplyObject(fcall("shards_set", &q, -1, "close", rev, END));
    r = fcall("shards_set", &q, -1, "lower_begin", "3", END);
    expect_invalid(r, "shards");
    r = fcall("shards_set", &q, -1, "lower_begin", "0", END);
    expect_invalid(r, "shards");

    /* A message on shard 2, in each state in turn, refuses its retirement. */
    long long id = placed_id(&q, &q2, "m");
    assert_int_equal(id, 2 * SHARD_SPAN + 1);
    r = fcall("shards_set", &q, -1, "lower_begin", "1", END);
    assert_true(has_code(r, "ok"));
    assert_string_equal(pair_value(r, 1, "lowering"), "1");
    freeReplyObject(r);
    r = fcall("shard_retire", &q2, -1, "retire", layout_field(&q, "rev"), END);
    assert_true(has_code(r, "not_empty"));
    assert_string_equal(r->element[1]->str, "ready");
    assert_string_equal(r->element[2]->str, "1");
    freeReplyObject(r);
    assert_string_equal(layout_field(&q2, "retired"), "");
    msg_t m;
    claim_one(&q2, 30000, &m);
    r = fcall("shard_retire", &q2, -1, "check", END);
    assert_true(has_code(r, "not_empty"));
    assert_string_equal(r->element[1]->str, "processing");
    freeReplyObject(r);
    r = fcall("fail", &q2, id, msg_str(&m, "lease_token"), "boom", "0", END);
    freeReplyObject(r);
    r = fcall("shard_retire", &q2, -1, "retire", layout_field(&q, "rev"), END);
    assert_true(has_code(r, "not_empty"));
    assert_string_equal(r->element[1]->str, "dead");
    freeReplyObject(r);
    r = fcall("delete", &q2, id, END);
    freeReplyObject(r);
    /* Empty now: fenced. Shard 1 was never used: fenced too. */
    r = fcall("shard_retire", &q2, -1, "retire", layout_field(&q, "rev"), END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    assert_true(atoll(layout_field(&q2, "retired")) > 0);
    r = fcall("shard_retire", &q1, -1, "retire", layout_field(&q, "rev"), END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    expect_error(fcall("shard_retire", &q, -1, "retire", layout_field(&q, "rev"), END));   /* shard 0 never */
    r = fcall("shard_retire", &q, -1, "check", END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);

    /* Abort: the mark goes; then a commit to 1 finds no lowering. */
    r = fcall("shards_set", &q, -1, "lower_abort", END);
    assert_true(has_code(r, "ok"));
    assert_null(pair_value(r, 1, "lowering"));
    freeReplyObject(r);
    r = fcall("shards_set", &q, -1, "lower_commit", "1", END);
    assert_true(has_code(r, "stale"));
    freeReplyObject(r);
    assert_string_equal(policy_field(&q, "shards"), "3");
    /* Begin again and commit: shards back to 1 (the field gone), the count
     * before kept in keys. */
    freeReplyObject(fcall("shards_set", &q, -1, "lower_begin", "1", END));
    r = fcall("shards_set", &q, -1, "lower_commit", "1", END);
    assert_true(has_code(r, "ok"));
    assert_null(pair_value(r, 1, "lowering"));
    assert_true(strncmp(pair_value(r, 1, "keys"), "3@", 2) == 0);
    freeReplyObject(r);
    assert_string_equal(policy_field(&q, "shards"), "");
    assert_string_equal(layout_field(&q, "hw"), "3");
    /* A raise again; the copy to shard 2 takes its retirement off, and its
     * ids go on from its counter. */
    r = fcall("shards_set", &q, -1, "raise", "3", "0,0", END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    r = copy_to(&q, &q2);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    assert_string_equal(layout_field(&q2, "retired"), "");
    assert_int_equal(placed_id(&q, &q2, "again"), 2 * SHARD_SPAN + 2);
    r = fcall("shard_retire", &q2, -1, "unretire", END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
}

/* Placement on a sharded queue (docs/sharding.md "Where shards is read",
 * "Enqueue: which shard"): a shard takes an enqueue only from a caller whose
 * view has its layout's rev; an older view is told to reshard, a newer one
 * to copy; a retired shard or one outside the count refuses; shard 0 takes
 * an ungrouped, unkeyed enqueue from a caller without a view (today's
 * call), not a grouped or keyed one; flag "o" places only where the group
 * or key already is. Nothing is written by a refusal. */
static void test_shards_placement(void **state)
{
    (void)state;
    queue_t q, q1, q2, q3;
    queue_init(&q, "shplace");
    shard_of(&q, 1, 0, &q1);
    shard_of(&q, 2, 0, &q2);
    shard_of(&q, 3, 0, &q3);
    redisReply *r = fcall("shards_set", &q, -1, "raise", "3", "0,0", END);
    char rev[32], older[32], newer[32];
    snprintf(rev, sizeof rev, "%s", pair_value(r, 1, "rev"));
    snprintf(older, sizeof older, "%lld", atoll(rev) - 1);
    snprintf(newer, sizeof newer, "%lld", atoll(rev) + 1);
    freeReplyObject(r);
    freeReplyObject(copy_to(&q, &q1));
    freeReplyObject(copy_to(&q, &q2));

    expect_placed_code(enqueue_placed(&q2, "a", "", "", "", rev), "ok");
    expect_placed_code(enqueue_placed(&q2, "b", "", "", "", older), "reshard");
    expect_placed_code(enqueue_placed(&q2, "c", "", "", "", newer), "copy");
    expect_placed_code(enqueue_placed(&q2, "d", "", "", "", ""), "ok");   /* a script's */
    expect_placed_code(enqueue_placed(&q2, "d", "", "tenant", "", ""), "reshard");
    expect_placed_code(enqueue_placed(&q3, "e", "", "", "", rev), "reshard");   /* outside */
    assert_string_equal(rcmd_str("GET", qkey(&q2, "seq")), "2");
    assert_int_equal(exists(qkey(&q3, "seq")), 0);
    expect_error(enqueue_placed(&q2, "f", "", "", "", "x"));
    /* Shard 0 of a sharded queue: a caller without a view learns the
     * layout first, whatever it places. */
    expect_placed_code(enqueue_placed(&q, "g", "", "", "", ""), "reshard");
    expect_placed_code(enqueue_placed(&q, "g", "", "", "", rev), "ok");
    /* The same for today's shortest call, which the check meets only once
     * it read the policy for its defaults. */
    expect_placed_code(fcall("enqueue", &q, -1, "g", "3", "", "", "1", "default", END), "reshard");
    expect_placed_code(enqueue_placed(&q, "h", "", "tenant", "", ""), "reshard");
    expect_placed_code(enqueue_placed(&q, "i", "key-1", "", "", ""), "reshard");
    expect_placed_code(enqueue_placed(&q, "j", "key-1", "", "", older), "reshard");
    expect_placed_code(enqueue_placed(&q, "k", "key-1", "", "", rev), "ok");

    /* Only if present. */
    expect_placed_code(enqueue_placed(&q1, "l", "", "tenant", "o", rev), "moved");
    expect_placed_code(enqueue_placed(&q1, "m", "", "tenant", "", rev), "ok");
    expect_placed_code(enqueue_placed(&q1, "n", "", "tenant", "o", rev), "ok");
    expect_placed_code(enqueue_placed(&q1, "o", "key-2", "", "o", rev), "moved");
    expect_placed_code(enqueue_placed(&q1, "p", "key-2", "", "", rev), "ok");
    expect_placed_code(enqueue_placed(&q1, "q", "key-2", "", "o", rev), "duplicate");
    assert_string_equal(rcmd_str("GET", qkey(&q1, "seq")), "3");

    /* enqueue_many: the rev after the items; a refusal writes nothing. */
    const char *item[] = { "x", "3", "", "", "1", "default", "", "", "" };
    const char *args[16];
    size_t n = 0;
    args[n++] = "1";
    args[n++] = "9";
    for (size_t i = 0; i < 9; i++) args[n++] = item[i];
    args[n++] = older;
    r = fcall_bin("enqueue_many", &q2, -1, n, args, NULL);
    expect_placed_code(r, "reshard");
    args[n - 1] = rev;
    r = fcall_bin("enqueue_many", &q2, -1, n, args, NULL);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_string_equal(r->element[1]->element[0]->str, "ok");
    assert_int_equal(r->element[1]->element[1]->integer, 2 * SHARD_SPAN + 3);
    freeReplyObject(r);

    /* A retired shard refuses whatever the rev. */
    r = fcall("shard_retire", &q1, -1, "retire", layout_field(&q, "rev"), END);
    assert_true(has_code(r, "not_empty"));   /* it holds l..q */
    freeReplyObject(r);
    queue_t q4;
    r = fcall("shards_set", &q, -1, "close", rev, END);
    freeReplyObject(r);
    r = fcall("shards_set", &q, -1, "raise", "5", "0,0,0,0", END);
    snprintf(rev, sizeof rev, "%s", pair_value(r, 1, "rev"));
    freeReplyObject(r);
    shard_of(&q, 4, 0, &q4);
    freeReplyObject(copy_to(&q, &q4));
    expect_placed_code(enqueue_placed(&q4, "r", "", "", "", rev), "ok");
    freeReplyObject(fcall("delete", &q4, 4 * SHARD_SPAN + 1, END));
    r = fcall("shard_retire", &q4, -1, "retire", layout_field(&q, "rev"), END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    expect_placed_code(enqueue_placed(&q4, "s", "", "", "", rev), "reshard");
}

/* policy_copy of the pairs g (a policy_get read earlier) to qk. */
static redisReply *copy_pairs(const queue_t *qk, const redisReply *g)
{
    const char *args[80];
    size_t n = 0;
    args[n++] = pair_value(g, 0, "layout.rev");
    for (size_t i = 0; i < g->elements && n < 80; i++) args[n++] = g->element[i]->str;
    return fcall_bin("policy_copy", qk, -1, n, args, NULL);
}

/* A copy cannot open a shard a lowering fenced (found in review): (a) one
 * sent while the lowering runs (another request's policy write or pause:
 * shards 3, lowering 1) after shard 2's retire; (b) one read before
 * lower_begin that arrives after the commit. Either way shard 2 stays
 * retired. */
static void copies_against_a_fence(const char *name, bool during)
{
    queue_t q, q1, q2;
    queue_init(&q, name);
    shard_of(&q, 1, 0, &q1);
    shard_of(&q, 2, 0, &q2);
    redisReply *r = fcall("shards_set", &q, -1, "raise", "3", "0,0", END);
    char rev[32];
    snprintf(rev, sizeof rev, "%s", pair_value(r, 1, "rev"));
    freeReplyObject(r);
    freeReplyObject(fcall("shards_set", &q, -1, "close", rev, END));
    freeReplyObject(copy_to(&q, &q1));
    freeReplyObject(copy_to(&q, &q2));
    redisReply *before = fcall("policy_get", &q, -1, END);
    freeReplyObject(fcall("shards_set", &q, -1, "lower_begin", "1", END));
    r = fcall("shard_retire", &q2, -1, "retire", layout_field(&q, "rev"), END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    if (during) {
        r = copy_to(&q, &q2);
        assert_false(has_code(r, "ok"));
        freeReplyObject(r);
    } else {
        freeReplyObject(fcall("shard_retire", &q1, -1, "retire", layout_field(&q, "rev"), END));
        r = fcall("shards_set", &q, -1, "lower_commit", "1", END);
        assert_true(has_code(r, "ok"));
        freeReplyObject(r);
        r = copy_pairs(&q2, before);
        assert_true(has_code(r, "stale"));
        freeReplyObject(r);
        assert_string_equal(policy_field(&q2, "shards"), "3");   /* the copy it had */
    }
    freeReplyObject(before);
    assert_string_not_equal(layout_field(&q2, "retired"), "");
}

/* A listing's page of a sharded queue (list, groups) is refused to a
 * caller without the queue's view on shard 0, and to an older view, so a
 * daemon never pages it as one shard; a script naming a shard above 0
 * needs no rev; a lagging copy does not matter to a read. list with limit 0
 * answers the total alone. Nothing is refused on a queue of one shard. */
static void test_shards_listing_needs_the_view(void **state)
{
    (void)state;
    queue_t one, q, q1;
    queue_init(&one, "shlistone");
    freeReplyObject(fcall("enqueue", &one, -1, "a", "3", "", "", "1", "default", END));
    redisReply *r = fcall("list", &one, -1, "", "0", "", "", "", "", END);
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->element[1]->integer, 1);
    assert_int_equal(r->elements, 3);
    freeReplyObject(r);
    expect_placed_code(fcall("groups", &one, -1, "", "10", END), "ok");

    queue_init(&q, "shlist");
    shard_of(&q, 1, 0, &q1);
    r = fcall("shards_set", &q, -1, "raise", "2", "0", END);
    char rev[32], older[32], newer[32];
    snprintf(rev, sizeof rev, "%s", pair_value(r, 1, "rev"));
    snprintf(older, sizeof older, "%lld", atoll(rev) - 1);
    snprintf(newer, sizeof newer, "%lld", atoll(rev) + 1);
    freeReplyObject(r);
    expect_placed_code(fcall("list", &q, -1, "", "10", "", "", "", "", END), "reshard");
    expect_placed_code(fcall("list", &q, -1, "", "10", "", "", "", "", older, END), "reshard");
    expect_placed_code(fcall("list", &q, -1, "", "10", "", "", "", "", rev, END), "ok");
    expect_placed_code(fcall("groups", &q, -1, "", "10", END), "reshard");
    expect_placed_code(fcall("groups", &q, -1, "", "10", rev, END), "ok");
    /* Shard 1 before its copy is outside the count; after it, a newer view
     * (the copy lags) reads it all the same. */
    expect_placed_code(fcall("list", &q1, -1, "", "10", "", "", "", "", rev, END), "reshard");
    freeReplyObject(copy_to(&q, &q1));
    expect_placed_code(fcall("list", &q1, -1, "", "10", "", "", "", "", rev, END), "ok");
    expect_placed_code(fcall("list", &q1, -1, "", "10", "", "", "", "", newer, END), "ok");
    expect_placed_code(fcall("list", &q1, -1, "", "10", "", "", "", "", END), "ok");
    expect_error(fcall("list", &q, -1, "", "-1", "", "", "", "", rev, END));
}

/* shard_scan walks an old shard's groups after a raise, 100 names a call:
 * every group whose shard under the new count is another becomes a stray;
 * the walk's end is kept (done again at once); an older rev is stale; a
 * shard at or above the raise's `from` has nothing to walk. */
static void test_shards_scan_finds_strays(void **state)
{
    (void)state;
    queue_t q, q1;
    queue_init(&q, "shscan");
    shard_of(&q, 1, 0, &q1);
    long long want = 0;
    for (int i = 0; i < 150; i++) {
        char g[16];
        snprintf(g, sizeof g, "g%03d", i);
        expect_placed_code(enqueue_placed(&q, "x", "", g, "", ""), "ok");
        want += rd_shards_pick(g, strlen(g), 3) != 0;
    }
    redisReply *r = fcall("shards_set", &q, -1, "raise", "3", "0,0", END);
    char rev[32];
    snprintf(rev, sizeof rev, "%s", pair_value(r, 1, "rev"));
    freeReplyObject(r);
    freeReplyObject(copy_to(&q, &q1));
    r = fcall("shard_scan", &q, -1, rev, END);
    assert_true(has_code(r, "more"));
    long long first = atoll(r->element[1]->str);
    assert_true(first > 0 && first < want);
    freeReplyObject(r);
    r = fcall("shard_scan", &q, -1, rev, END);
    assert_true(has_code(r, "done"));
    assert_int_equal(atoll(r->element[1]->str), want);
    freeReplyObject(r);
    r = fcall("shard_scan", &q, -1, rev, END);   /* the end is kept */
    assert_true(has_code(r, "done"));
    assert_int_equal(atoll(r->element[1]->str), want);
    freeReplyObject(r);
    assert_int_equal(int_reply(rcmd("SCARD", qkey(&q, "3:strays"), END)), want);
    /* A stray whose group is gone behind gone_if_empty's back is dropped by
     * the next step (a purge cut short, a stale cache). */
    freeReplyObject(rcmd("SADD", qkey(&q, "3:strays"), "gone-group", END));
    r = fcall("shard_scan", &q, -1, rev, END);
    assert_true(has_code(r, "done"));
    assert_int_equal(atoll(r->element[1]->str), want);
    freeReplyObject(r);
    expect_placed_code(fcall("shard_scan", &q, -1, "1", END), "stale");
    r = fcall("shard_scan", &q1, -1, rev, END);   /* a new shard */
    assert_true(has_code(r, "done"));
    assert_string_equal(r->element[1]->str, "0");
    freeReplyObject(r);
}

/* A rev that is no rev ("abc", "0", "-3") is a bad argument to list and
 * groups, as to every placement (placement.refusal): it must not pass as "no
 * view" or, worse, as the right one on a sharded queue's shard 0. */
static void test_shards_listing_rejects_a_bad_rev(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "shlistbadrev");
    freeReplyObject(fcall("shards_set", &q, -1, "raise", "2", "0", END));
    static const char *const bad[] = { "abc", "0", "-3" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        redisReply *r = fcall("list", &q, -1, "", "10", "", "", "", "", bad[i], END);
        if (r->type != REDIS_REPLY_ERROR)
            fail_msg("list with rev '%s' on a sharded queue's shard 0: %s", bad[i], reply_desc(r));
        freeReplyObject(r);
        r = fcall("groups", &q, -1, "", "10", bad[i], END);
        if (r->type != REDIS_REPLY_ERROR)
            fail_msg("groups with rev '%s' on a sharded queue's shard 0: %s", bad[i], reply_desc(r));
        freeReplyObject(r);
    }
}

static void test_shards_copy_during_lowering_keeps_fence(void **state)
{
    (void)state;
    copies_against_a_fence("fence_a", true);
}

static void test_shards_old_copy_after_commit_keeps_fence(void **state)
{
    (void)state;
    copies_against_a_fence("fence_b", false);
}

/* lower_stale: a lowering begun 10 s ago (Redis's clock) is abandoned. */
static void test_shards_abandoned_lowering(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "abandon");
    redisReply *r = fcall("shards_set", &q, -1, "lower_stale", END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    r = fcall("shards_set", &q, -1, "raise", "3", "0,0", END);
    char rev[32];
    snprintf(rev, sizeof rev, "%s", pair_value(r, 1, "rev"));
    freeReplyObject(r);
    freeReplyObject(fcall("shards_set", &q, -1, "close", rev, END));
    freeReplyObject(fcall("shards_set", &q, -1, "lower_begin", "2", END));
    r = fcall("shards_set", &q, -1, "lower_stale", END);
    assert_true(has_code(r, "settling"));
    freeReplyObject(r);
    freeReplyObject(rcmd("HSET", qkey(&q, "shard"), "lowering_at", num(redis_now_ms() - 10001),
                         END));
    r = fcall("shards_set", &q, -1, "lower_stale", END);
    assert_true(has_code(r, "abandoned"));
    assert_string_equal(r->element[1]->str, "2");
    freeReplyObject(r);
}

/* A policy write of the library before (retryd_v8 replaces the whole policy
 * HASH) drops `shards` but cannot touch the layout: the salts and hw stay
 * for the repair (docs/sharding.md "Two versions on one Redis"). */
static void test_shards_layout_survives_an_older_replace(void **state)
{
    (void)state;
    load_v8();
    queue_t q;
    queue_init(&q, "sholder");
    redisReply *r = fcall("shards_set", &q, -1, "raise", "3", "4,5", END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    char rev[32];
    snprintf(rev, sizeof rev, "%s", layout_field(&q, "rev"));
    r = fcall_lib("retryd_v8_", "policy_set", &q, -1, 3,
                  (const char *[]){ "replace", "max_retries", "2" }, NULL);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    assert_string_equal(policy_field(&q, "shards"), "");
    assert_string_equal(policy_field(&q, "max_retries"), "2");
    assert_string_equal(layout_field(&q, "rev"), rev);
    assert_string_equal(layout_field(&q, "salts"), "4,5");
    assert_string_equal(layout_field(&q, "hw"), "3");
    freeReplyObject(rcmd("FUNCTION", "DELETE", "retryd_v8", END));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_defaults_keep_reference_table),
        cmocka_unit_test(test_policy_backoff_base_and_max),
        cmocka_unit_test(test_policy_jitter),
        cmocka_unit_test(test_policy_set_validation),
        cmocka_unit_test(test_policy_alert_url),
        cmocka_unit_test(test_policy_precedence),
        cmocka_unit_test(test_pause_resume),
        cmocka_unit_test(test_max_in_flight),
        cmocka_unit_test(test_many_queues_keep_their_own_keys),
        cmocka_unit_test(test_rate_limit_bucket),
        cmocka_unit_test(test_rate_changed_mid_bucket),
        cmocka_unit_test(test_policy_retention),
        cmocka_unit_test(test_lease_expiry_redeliver),
        cmocka_unit_test(test_wide_retry_counters),
        cmocka_unit_test(test_policy_new_fields_validation),
        cmocka_unit_test(test_policy_stamps),
        cmocka_unit_test(test_policy_create),
        cmocka_unit_test(test_policy_delay_default),
        cmocka_unit_test(test_policy_max_payload_bytes),
        cmocka_unit_test(test_empty_claim_answers_wait_and_known),
        cmocka_unit_test(test_shards_raise_copy_close),
        cmocka_unit_test(test_shards_raise_refusals),
        cmocka_unit_test(test_shards_lower_and_retire),
        cmocka_unit_test(test_shards_placement),
        cmocka_unit_test(test_shards_listing_needs_the_view),
        cmocka_unit_test(test_shards_scan_finds_strays),
        cmocka_unit_test(test_shards_listing_rejects_a_bad_rev),
        cmocka_unit_test(test_shards_copy_during_lowering_keeps_fence),
        cmocka_unit_test(test_shards_old_copy_after_commit_keeps_fence),
        cmocka_unit_test(test_shards_abandoned_lowering),
        cmocka_unit_test(test_shards_layout_survives_an_older_replace),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
