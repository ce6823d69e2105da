/* test_lua_settle.c - integration tests of the Redis Functions library (lua/) against
 * a real redis-server: settle_claim (docs/reference.md "Settle and claim"), snooze
 * (docs/reference.md "Snooze"), the wake channel, and release_lost.
 *
 * Shared helpers, setup and the environment the tests need: lua_support.h. */

#define LUA_SUITE "test_lua_settle"
#include "lua_support.h"

/* ------------------------------------------------------------------------ */
/* settle_claim (docs/reference.md "Settle and claim")                                                   */
/* ------------------------------------------------------------------------ */

/* Every outcome in one call, each exactly as succeed and fail leave it, and
 * the claim after them. */
static void test_settle_claim_mixed_outcomes(void **state)
{
    queue_t q;
    queue_init(&q, "settlemix");
    for (int i = 0; i < 6; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m[6];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "4", END), m, 6), 4);
    char t1[64], t2[64], t3[64], t4[64];
    token_of(&m[0], t1);
    token_of(&m[1], t2);
    token_of(&m[2], t3);
    token_of(&m[3], t4);

    settle_t items[] = {
        SUCCEEDED(1, t1),
        FAILED(2, t2, "smtp timeout", "1", -1),     /* retry in 2 s */
        FAILED(3, "", "poison", "0", -1),           /* dead now */
        FAILED(4, t4, "slow down", "1", 7000),      /* retry_after overrides the backoff */
        SUCCEEDED(999, ""),                         /* no such message */
        SUCCEEDED(5, ""),                           /* pending, not processing */
        SUCCEEDED(1, t1),                           /* settled a moment ago */
    };
    static const char *const want[] = { "succeeded", "pending", "dead", "pending", "not_found",
                                        "invalid_state", "invalid_state" };
    long long before = redis_now_ms();
    msg_t got[4];
    size_t n = expect_settled(settle_claim(&q, 45000, 3, 7, items), 7, want, got, 4);
    long long after = redis_now_ms();

    /* The claim ran after them: 5 and 6 are what is claimable (2 and 4 are
     * not due yet), with claim's lease. */
    assert_int_equal(n, 2);
    assert_int_equal(got[0].id, 5);
    assert_int_equal(got[1].id, 6);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(msg_str(&got[i], "status"), "processing");
        assert_string_equal(msg_str(&got[i], "payload"), "job");
        assert_int_equal(msg_int(&got[i], "lease_expires_at"), msg_int(&got[i], "updated_at") + 45000);
        assert_int_equal(zscore(qkey(&q, "3:processing"), got[i].id), msg_int(&got[i], "lease_expires_at"));
    }
    assert_string_not_equal(msg_str(&got[0], "lease_token"), msg_str(&got[1], "lease_token"));

    msg_t g;
    expect_ok_msg(fcall("get", &q, 1, END), &g);
    assert_string_equal(msg_str(&g, "status"), "succeeded");
    assert_no_field(&g, "lease_token");
    assert_no_field(&g, "lease_expires_at");
    assert_in_range(msg_int(&g, "updated_at"), before, after);
    assert_int_equal(zscore(qkey(&q, "3:succeeded"), 1), msg_int(&g, "updated_at"));
    assert_int_equal(zscore(qkey(&q, "3:processing"), 1), -1);

    expect_ok_msg(fcall("get", &q, 2, END), &g);
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_count"), 1);
    assert_string_equal(msg_str(&g, "last_error"), "smtp timeout");
    assert_int_equal(msg_int(&g, "retry_after") - msg_int(&g, "updated_at"), 2000);
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), 2), msg_int(&g, "retry_after"));
    assert_no_field(&g, "lease_token");

    expect_ok_msg(fcall("get", &q, 3, END), &g);
    assert_string_equal(msg_str(&g, "status"), "dead");
    assert_int_equal(msg_int(&g, "retry_count"), 1);
    assert_string_equal(msg_str(&g, "last_error"), "poison");
    assert_int_equal(zscore(qkey(&q, "3:dead"), 3), msg_int(&g, "updated_at"));
    assert_int_equal(zscore(qkey(&q, "3:processing"), 3), -1);
    /* The dead letter is counted in top_errors and in the events stream. */
    redisReply *r = rcmd("ZSCORE", qkey(&q, "errors"), "poison", END);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "1");
    freeReplyObject(r);
    r = rcmd("XREVRANGE", qkey(&q, "events"), "+", "-", "COUNT", "1", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    const redisReply *fields = r->element[0]->element[1];
    assert_string_equal(fields->element[1]->str, "dead");
    assert_string_equal(fields->element[3]->str, "3");
    assert_string_equal(fields->element[5]->str, "poison");
    freeReplyObject(r);

    expect_ok_msg(fcall("get", &q, 4, END), &g);
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_after") - msg_int(&g, "updated_at"), 7000);

    assert_int_equal(counter(&q, "succeeded"), 1);
    assert_int_equal(counter(&q, "failed"), 3);
    assert_int_equal(counter(&q, "retried"), 2);
    assert_int_equal(counter(&q, "dead"), 1);
    assert_int_equal(counter(&q, "delay_le_2"), 1);
    assert_int_equal(counter(&q, "delay_le_8"), 1);
    assert_int_equal(counter(&q, "claimed"), 6);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 2);
}

/* The failure path is fail's: the backoff table, then dead at max_retries,
 * and a failure due at once is claimed back in the same call, before fresh
 * messages (due retries first). */
static void test_settle_claim_backoff_then_dead(void **state)
{
    static const long long delays_ms[] = { 2000, 4000, 8000, 16000 };
    static const char *const pending[] = { "pending" }, *const dead[] = { "dead" };
    queue_t q;
    queue_init(&q, "settlebackoff");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m, got[2];
    char token[64];
    for (int n = 1; n <= 4; n++) {
        claim_one(&q, 30000, &m);
        assert_int_equal(m.id, id);
        token_of(&m, token);
        settle_t f = FAILED(id, token, "again", "1", -1);
        /* count 0: settle only. */
        assert_int_equal(expect_settled(settle_claim(&q, 30000, 0, 1, &f), 1, pending, got, 0), 0);
        expect_ok_msg(fcall("get", &q, id, END), &m);
        assert_int_equal(msg_int(&m, "retry_count"), n);
        assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), delays_ms[n - 1]);
        make_due(&q, id);
    }
    claim_one(&q, 30000, &m);
    token_of(&m, token);
    settle_t f = FAILED(id, token, "last", "1", -1);
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 1, 1, &f), 1, dead, got, 1), 0);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 5);
    assert_no_field(&m, "retry_after");
    assert_int_equal(zscore(qkey(&q, "3:dead"), id), msg_int(&m, "updated_at"));
    assert_int_equal(counter(&q, "failed"), 5);
    assert_int_equal(counter(&q, "retried"), 4);
    assert_int_equal(counter(&q, "dead"), 1);

    /* retry_after 0: due at once, so the claim in the same call takes it
     * back, before the fresh message enqueued after it. */
    long long a = enqueue_ok(&q, "again", 3, 0);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, a);
    long long fresh = enqueue_ok(&q, "fresh", 3, 0);
    token_of(&m, token);
    settle_t now = FAILED(a, token, "transient", "1", 0);
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 2, 1, &now), 1, pending, got, 2), 2);
    assert_int_equal(got[0].id, a);
    assert_int_equal(msg_int(&got[0], "retry_count"), 1);
    assert_string_equal(msg_str(&got[0], "last_error"), "transient");
    assert_string_not_equal(msg_str(&got[0], "lease_token"), token);
    assert_int_equal(got[1].id, fresh);
}

/* Settlements apply when nothing is claimable, and a claim of an empty
 * queue counts nothing. */
static void test_settle_claim_nothing_claimable(void **state)
{
    static const char *const want[] = { "succeeded", "succeeded" };
    queue_t q;
    queue_init(&q, "settleempty");
    enqueue_ok(&q, "job", 3, 0);
    enqueue_ok(&q, "job", 3, 0);
    msg_t m[2];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "2", END), m, 2), 2);
    settle_t items[] = { SUCCEEDED(1, ""), SUCCEEDED(2, "") };
    msg_t got[1];
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 100, 2, items), 2, want, got, 0), 0);
    assert_int_equal(zcard(qkey(&q, "3:succeeded")), 2);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 0);
    assert_int_equal(counter(&q, "succeeded"), 2);
    assert_int_equal(counter(&q, "claimed"), 2);

    /* No settlement at all is a plain claim. */
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 1, 0, NULL), 0, NULL, got, 0), 0);
}

/* A lease token that is not the current one changes nothing; "" accepts
 * whatever lease is current. */
static void test_settle_claim_lease_mismatch(void **state)
{
    static const char *const mismatch[] = { "lease_mismatch", "lease_mismatch" };
    static const char *const ok[] = { "succeeded", "pending" };
    queue_t q;
    queue_init(&q, "settlelease");
    enqueue_ok(&q, "job", 3, 0);
    enqueue_ok(&q, "job", 3, 0);
    msg_t m[2], got[1];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "2", END), m, 2), 2);
    settle_t wrong[] = { SUCCEEDED(1, "not-the-token"), FAILED(2, "1.1", "e", "1", -1) };
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 1, 2, wrong), 2, mismatch, got, 1), 0);
    for (int i = 0; i < 2; i++) {
        msg_t g;
        expect_ok_msg(fcall("get", &q, m[i].id, END), &g);
        assert_string_equal(msg_str(&g, "status"), "processing");
        assert_string_equal(msg_str(&g, "lease_token"), msg_str(&m[i], "lease_token"));
        assert_int_equal(zscore(qkey(&q, "3:processing"), m[i].id), msg_int(&m[i], "lease_expires_at"));
    }
    assert_int_equal(counter(&q, "failed"), 0);
    char t1[64];
    token_of(&m[0], t1);
    settle_t right[] = { SUCCEEDED(1, t1), FAILED(2, "", "e", "1", -1) };
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 1, 2, right), 2, ok, got, 1), 0);
}

/* Every argument is checked before anything is written: a bad item anywhere
 * leaves the good ones before it unapplied, and nothing is claimed. */
static void test_settle_claim_atomic(void **state)
{
    queue_t q;
    queue_init(&q, "settleatomic");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m[2];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "2", END), m, 2), 2);
    const settle_t bad_last[][2] = {
        { SUCCEEDED(1, ""), { 2, "", "bogus", "", "1", -1 } },
        { SUCCEEDED(1, ""), FAILED(2, "", "e", "maybe", -1) },
        { SUCCEEDED(1, ""), { 0, "", "succeeded", "", "1", -1 } },
    };
    for (size_t i = 0; i < sizeof bad_last / sizeof bad_last[0]; i++)
        expect_error(settle_claim(&q, 30000, 1, 2, bad_last[i]));
    settle_t one = SUCCEEDED(1, "");
    expect_error(settle_claim(&q, 0, 1, 1, &one));
    expect_error(settle_claim(&q, 43200001, 1, 1, &one));
    expect_error(settle_claim(&q, 30000, 101, 1, &one));
    expect_error(settle_claim(&q, 30000, -1, 1, &one));
    expect_error(fcall("settle_claim", &q, -1, "30000", "1", "1", "1", "", "failed", "e", "1", "x", END));
    /* n must match the arguments that follow. */
    expect_error(fcall("settle_claim", &q, -1, "30000", "1", "2", "1", "", "succeeded", "", "1", "-1", END));
    expect_error(fcall("settle_claim", &q, -1, "30000", "1", "1", END));
    expect_error(fcall("settle_claim", &q, -1, "30000", "1", END));

    for (long long id = 1; id <= 2; id++) {
        msg_t g;
        expect_ok_msg(fcall("get", &q, id, END), &g);
        assert_string_equal(msg_str(&g, "status"), "processing");
    }
    assert_int_equal(llen(qkey(&q, "3:ready")), 1);
    assert_int_equal(counter(&q, "succeeded"), 0);
    assert_int_equal(counter(&q, "claimed"), 2);
}

/* At most 100 settlements and 100 claims in one call. */
static void test_settle_claim_bounds(void **state)
{
    queue_t q;
    queue_init(&q, "settlebounds");
    for (int i = 0; i < 201; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t *m = calloc(100, sizeof *m);
    assert_non_null(m);
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "100", END), m, 100), 100);
    settle_t items[101];
    const char *want[100];
    for (int i = 0; i < 101; i++) {
        settle_t s = SUCCEEDED(i + 1, "");
        items[i] = s;
        if (i < 100)
            want[i] = "succeeded";
    }
    expect_error(settle_claim(&q, 30000, 1, 101, items));
    assert_int_equal(counter(&q, "succeeded"), 0);
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 100, 100, items), 100, want, m, 100), 100);
    assert_int_equal(m[0].id, 101);
    assert_int_equal(m[99].id, 200);
    assert_int_equal(counter(&q, "succeeded"), 100);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 100);
    free(m);
}

/* ------------------------------------------------------------------------ */
/* snooze (docs/reference.md "Snooze")                                      */
/* ------------------------------------------------------------------------ */

#define SNOOZED(id, token, delay) { (id), (token), "snoozed", "", "1", (delay) }

/* snooze with the caller's hint flag: {"ok", message, timer}; the message
 * into m, the hint returned. */
static long long snooze_hinted(const queue_t *q, long long id, const char *token,
                               long long delay_ms, msg_t *m)
{
    redisReply *r = fcall("snooze", q, id, token, num(delay_ms), "1", END);
    if (!has_code(r, "ok") || r->elements != 3 || r->element[2]->type != REDIS_REPLY_INTEGER) {
        const char *desc = reply_desc(r);
        freeReplyObject(r);
        fail_msg("expected {\"ok\", message, timer}, got %s", desc);
    }
    msg_parse(r->element[1], m);
    long long hint = r->element[2]->integer;
    freeReplyObject(r);
    return hint;
}

/* A snooze puts the attempt off without counting it: retry_count and
 * last_error stay, the message waits in scheduled until now + delay with
 * retry_after saying so, the history gets a mark (not a failure), and it is
 * counted snoozed, nothing else. */
static void test_snooze_keeps_attempts(void **state)
{
    queue_t q;
    queue_init(&q, "snoozekeep");
    long long id = enqueue_ok(&q, "job", 3, 0);
    msg_t m, g;
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "e1", "1", 0, &m);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, id);
    char token[64];
    token_of(&m, token);

    long long before = redis_now_ms();
    long long hint = snooze_hinted(&q, id, token, 60000, &g);
    long long after = redis_now_ms();
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_count"), 1);
    assert_string_equal(msg_str(&g, "last_error"), "e1");
    assert_in_range(msg_int(&g, "updated_at"), before, after);
    assert_int_equal(msg_int(&g, "retry_after"), msg_int(&g, "updated_at") + 60000);
    assert_no_field(&g, "lease_token");
    assert_no_field(&g, "lease_expires_at");
    assert_string_equal(msg_str(&g, "history"), "1/0//e1;S60000;");
    /* The queue had no promise: the hint asks for a tick when it is due. */
    assert_int_equal(hint, 60000);

    /* What Redis holds says the same. */
    expect_ok_msg(fcall("get", &q, id, END), &g);
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_count"), 1);
    assert_string_equal(msg_str(&g, "last_error"), "e1");
    assert_string_equal(msg_str(&g, "history"), "1/0//e1;S60000;");
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), id), msg_int(&g, "retry_after"));
    assert_int_equal(zscore(qkey(&q, "3:processing"), id), -1);
    expect_nothing_to_claim(&q);

    assert_int_equal(counter(&q, "snoozed"), 1);
    assert_int_equal(counter(&q, "failed"), 1);
    assert_int_equal(counter(&q, "retried"), 1);
    assert_int_equal(counter(&q, "dead"), 0);
    assert_int_equal(counter(&q, "succeeded"), 0);

    /* Without the hint flag: {"ok", message}, as before any hint. */
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("snooze", &q, id, "", "1000", END), &g);
    assert_string_equal(msg_str(&g, "history"), "1/0//e1;S60000;S1000;");
    assert_int_equal(msg_int(&g, "retry_count"), 1);
    assert_int_equal(counter(&q, "snoozed"), 2);
}

/* Lease rules as succeed's: not_found, invalid_state with the state,
 * lease_mismatch for another lease's token; "" takes any current lease.
 * Bad arguments are refused before anything is done. */
static void test_snooze_lease_rules(void **state)
{
    queue_t q;
    queue_init(&q, "snoozelease");
    long long id = enqueue_ok(&q, "job", 3, 0);
    expect_code(fcall("snooze", &q, 999, "", "0", END), "not_found", NULL);
    expect_code(fcall("snooze", &q, id, "", "0", END), "invalid_state", "pending");
    msg_t m, g;
    claim_one(&q, 30000, &m);
    expect_code(fcall("snooze", &q, id, "1.1", "0", END), "lease_mismatch", NULL);
    static const char *const bad[] = { "-1", "2592000001", "x", "1.5", "" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_error(fcall("snooze", &q, id, "", bad[i], END));
    expect_ok_msg(fcall("get", &q, id, END), &g);
    assert_string_equal(msg_str(&g, "status"), "processing");
    assert_string_equal(msg_str(&g, "lease_token"), msg_str(&m, "lease_token"));
    assert_int_equal(counter(&q, "snoozed"), 0);

    expect_ok_msg(fcall("snooze", &q, id, msg_str(&m, "lease_token"), "2592000000", END), &g);
    assert_int_equal(msg_int(&g, "retry_after") - msg_int(&g, "updated_at"), 2592000000LL);
    /* The old lease's token no longer settles anything. */
    expect_code(fcall("succeed", &q, id, msg_str(&m, "lease_token"), END), "invalid_state",
                "pending");
    expect_code(fcall("snooze", &q, id, "", "0", END), "invalid_state", "pending");

    /* succeeded and dead messages are not processing either. */
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("succeed", &q, id, "", END), &g);
    expect_code(fcall("snooze", &q, id, "", "0", END), "invalid_state", "succeeded");
    long long dead = make_dead(&q, "boom");
    expect_code(fcall("snooze", &q, dead, "", "0", END), "invalid_state", "dead");
    assert_int_equal(counter(&q, "snoozed"), 1);
}

/* delay 0: due now, so the next claim takes it (its promotion), before
 * fresh messages, as a due retry. */
static void test_snooze_zero_claimable_at_once(void **state)
{
    queue_t q;
    queue_init(&q, "snoozezero");
    long long id = enqueue_ok(&q, "job", 3, 0);
    msg_t m, g;
    claim_one(&q, 30000, &m);
    long long fresh = enqueue_ok(&q, "fresh", 3, 0);
    expect_ok_msg(fcall("snooze", &q, id, msg_str(&m, "lease_token"), "0", END), &g);
    assert_int_equal(msg_int(&g, "retry_after"), msg_int(&g, "updated_at"));
    claim_one(&q, 30000, &g);
    assert_int_equal(g.id, id);
    assert_int_equal(msg_int(&g, "retry_count"), 0);
    assert_string_not_equal(msg_str(&g, "lease_token"), msg_str(&m, "lease_token"));
    claim_one(&q, 30000, &g);
    assert_int_equal(g.id, fresh);
    assert_int_equal(counter(&q, "claimed"), 3);
}

/* delay > 0: not claimable (nor promoted) before until, claimable once Redis
 * TIME passes it. Polls Redis TIME with a deadline; nothing sleeps past it. */
static void test_snooze_not_claimable_before_until(void **state)
{
    queue_t q;
    queue_init(&q, "snoozelater");
    long long id = enqueue_ok(&q, "job", 3, 0);
    msg_t m, g;
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("snooze", &q, id, "", "200", END), &g);
    long long until = msg_int(&g, "retry_after");
    assert_int_equal(until, msg_int(&g, "updated_at") + 200);

    long long promoted[2];
    expect_ints(fcall("promote", &q, -1, "100", END), 2, promoted);
    if (redis_now_ms() < until) {
        assert_int_equal(promoted[0], 0);
        assert_in_range(promoted[1], 0, 200);
    }
    const struct timespec pause = { 0, 5 * 1000 * 1000 };
    int empty = 0;
    for (;;) {
        long long t = redis_now_ms();
        if (t > until + 5000) fail_msg("not claimable 5 s after until");
        redisReply *r = fcall("claim", &q, -1, "30000", "1", END);
        assert_true(has_code(r, "ok"));
        size_t n = r->elements - 1;
        if (n == 1) msg_parse(r->element[1], &g);
        freeReplyObject(r);
        if (n == 1) break;
        empty++;
        nanosleep(&pause, NULL);
    }
    assert_int_equal(g.id, id);
    /* Leased at or after until, never before. */
    assert_true(msg_int(&g, "updated_at") >= until);
    assert_int_equal(msg_int(&g, "retry_count"), 0);
    printf(LUA_SUITE ": snoozed 200 ms: %d empty claims before it came back\n", empty);
}

/* The history's bound and drop counting hold for snooze marks too, and
 * last_error survives its failure's entry being dropped. */
static void test_snooze_history_bound(void **state)
{
    queue_t q;
    queue_init(&q, "snoozebound");
    long long id = enqueue_ok(&q, "job", 3, 0);
    msg_t m, g;
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "the one failure", "1", 0, &m);
    for (int i = 0; i < 20; i++) {
        claim_one(&q, 30000, &m);
        assert_int_equal(m.id, id);
        expect_ok_msg(fcall("snooze", &q, id, "", "0", END), &g);
    }
    expect_ok_msg(fcall("get", &q, id, END), &g);
    assert_int_equal(msg_int(&g, "history_dropped"), 1);
    char want[MAX_VALUE] = "";
    for (int i = 0; i < 20; i++) strcat(want, "S0;");
    assert_string_equal(msg_str(&g, "history"), want);
    assert_string_equal(msg_str(&g, "last_error"), "the one failure");
    assert_int_equal(msg_int(&g, "retry_count"), 1);
    assert_int_equal(counter(&q, "snoozed"), 20);

    /* An empty error text stays one after a snooze mark (whose error slot is
     * empty too). */
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "", "1", 0, &m);
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("snooze", &q, id, "", "0", END), &g);
    assert_string_equal(msg_str(&g, "last_error"), "");
    expect_ok_msg(fcall("get", &q, id, END), &g);
    assert_string_equal(msg_str(&g, "last_error"), "");
    assert_int_equal(msg_int(&g, "retry_count"), 2);
    assert_int_equal(msg_int(&g, "history_dropped"), 3);
}

/* settle_claim's "snoozed": the delay in the retry_after_ms slot, status
 * pending, applied in order among successes and failures; a snooze due now
 * is claimed back in the same call, before fresh messages. */
static void test_settle_claim_snoozed(void **state)
{
    queue_t q;
    queue_init(&q, "settlesnooze");
    for (int i = 0; i < 6; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m[6];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "4", END), m, 6), 4);
    char t1[64], t2[64], t3[64];
    token_of(&m[0], t1);
    token_of(&m[1], t2);
    token_of(&m[2], t3);
    settle_t items[] = {
        SUCCEEDED(1, t1),
        FAILED(2, t2, "smtp timeout", "1", -1),
        SNOOZED(3, t3, 60000),
        SNOOZED(4, "", 0),
        SNOOZED(999, "", 0),
        SNOOZED(5, "", 0),          /* pending, not processing */
        SNOOZED(3, t3, 0),          /* snoozed a moment ago */
        SNOOZED(1, "1.1", 0),
    };
    static const char *const want[] = { "succeeded", "pending", "pending", "pending", "not_found",
                                        "invalid_state", "invalid_state", "invalid_state" };
    msg_t got[2];
    size_t n = expect_settled(settle_claim(&q, 30000, 2, 8, items), 8, want, got, 2);
    assert_int_equal(n, 2);
    assert_int_equal(got[0].id, 4);    /* due now: first */
    assert_int_equal(msg_int(&got[0], "retry_count"), 0);
    assert_int_equal(got[1].id, 5);

    msg_t g;
    expect_ok_msg(fcall("get", &q, 3, END), &g);
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_count"), 0);
    assert_no_field(&g, "last_error");
    assert_string_equal(msg_str(&g, "history"), "S60000;");
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), 3), msg_int(&g, "updated_at") + 60000);
    expect_ok_msg(fcall("get", &q, 2, END), &g);
    assert_int_equal(msg_int(&g, "retry_count"), 1);
    assert_string_equal(msg_str(&g, "history"), "1/0//smtp timeout;");

    assert_int_equal(counter(&q, "snoozed"), 2);
    assert_int_equal(counter(&q, "succeeded"), 1);
    assert_int_equal(counter(&q, "failed"), 1);
    assert_int_equal(counter(&q, "retried"), 1);

    /* A bad delay anywhere refuses the whole call. */
    static const long long bad[] = { -1, 2592000001LL };
    for (size_t i = 0; i < 2; i++) {
        settle_t two[] = { SUCCEEDED(4, ""), SNOOZED(5, "", bad[i]) };
        expect_error(settle_claim(&q, 30000, 1, 2, two));
    }
    expect_error(fcall("settle_claim", &q, -1, "30000", "0", "1", "4", "", "snoozed", "", "1", "x",
                       END));
    expect_ok_msg(fcall("get", &q, 4, END), &g);
    assert_string_equal(msg_str(&g, "status"), "processing");
    assert_int_equal(counter(&q, "succeeded"), 1);
    assert_int_equal(counter(&q, "snoozed"), 2);

    /* With the caller's retention values: the hint covers the snooze's due time. */
    token_of(&got[0], t1);
    redisReply *r = fcall("settle_claim", &q, -1, "30000", "0", "1", "4", t1, "snoozed", "", "1",
                          "700", "0", "0", END);
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->elements, 3);   /* ok, statuses, the hint */
    assert_string_equal(r->element[1]->element[0]->str, "pending");
    assert_int_equal(r->element[2]->type, REDIS_REPLY_INTEGER);
    /* Nothing here asked for a tick before: the promise is the snooze's. */
    assert_int_equal(r->element[2]->integer, 700);
    freeReplyObject(r);
}

/* A grouped message's record is read by the previous release's library
 * (its group is one more key of the trailer, which retryd_v5 skips): during
 * a rolling upgrade a retryd_v5 instance gets it, and its claim, which
 * serves the lists only, leaves it for this release
 * (docs/operators.md "From retryd_v5 to retryd_v6"). */
static void test_group_record_read_by_retryd_v5(void **state)
{
    (void)state;
    size_t len = 0;
    char *code = read_file("tests/fixtures/retryd_v5.lua", &len);
    if (code == NULL) fail_msg("cannot read tests/fixtures/retryd_v5.lua (run from the source tree)");
    load_library(code, len, true, "retryd_v5");
    free(code);

    queue_t q;
    queue_init(&q, "groupv5");
    msg_t g;
    redisReply *e = fcall("enqueue", &q, -1, "job", "3", "0", "", "1", "default", "", "",
                          "tenant-7", END);
    if (!has_code(e, "ok") || e->elements < 2) fail_msg("enqueue with a group: %s", reply_desc(e));
    long long id = e->element[1]->integer;
    freeReplyObject(e);

    redisReply *r = fcall_lib("retryd_v5_", "get", &q, id, 0, NULL, NULL);
    bool got = has_code(r, "ok") && r->elements == 2;
    if (got) msg_parse(r->element[1], &g);
    const char *desc = reply_desc(r);
    if (!got) fail_msg("retryd_v5_get of a grouped message: %s", desc);
    freeReplyObject(r);
    assert_string_equal(msg_str(&g, "payload"), "job");
    /* The old library claims from the lists only: it leaves the group's
     * message where it is, and answers without an error. */
    const char *claim_args[] = { "30000", "1" };
    r = fcall_lib("retryd_v5_", "claim", &q, -1, 2, claim_args, NULL);
    got = has_code(r, "ok");
    desc = reply_desc(r);
    if (!got) fail_msg("retryd_v5_claim beside a grouped message: %s", desc);
    freeReplyObject(r);
    /* This release exports it (its listings walk the groups' ids) and
     * claims it, with its group. */
    r = fcall("export", &q, -1, "jsonl", "", "10", "", END);
    got = r->type == REDIS_REPLY_ARRAY && r->elements == 2;
    desc = reply_desc(r);
    freeReplyObject(r);
    if (!got) fail_msg("export of a grouped message: %s", desc);
    claim_one(&q, 30000, &g);
    assert_int_equal(g.id, id);
    assert_string_equal(msg_str(&g, "group"), "tenant-7");
    freeReplyObject(rcmd("FUNCTION", "DELETE", "retryd_v5", END));
}

/* A record whose retry_count and max_retries are past the header's byte
 * (max_retries unlimited, 256 failures) is read by the previous release's
 * library without an error: retryd_v6 reads the header bytes alone and
 * sees 255 for both (docs/storage.md); this release reads them exactly. */
static void test_wide_counters_read_by_retryd_v6(void **state)
{
    (void)state;
    size_t len = 0;
    char *code = read_file("tests/fixtures/retryd_v6.lua", &len);
    if (code == NULL) fail_msg("cannot read tests/fixtures/retryd_v6.lua (run from the source tree)");
    load_library(code, len, true, "retryd_v6");
    free(code);

    queue_t q;
    queue_init(&q, "widev6");
    policy_set(&q, "replace", "max_retries", "unlimited");
    redisReply *e = fcall("enqueue", &q, -1, "job", "3", "0", "", "", "default", END);
    if (!has_code(e, "ok") || e->elements < 2) fail_msg("enqueue: %s", reply_desc(e));
    long long id = e->element[1]->integer;
    freeReplyObject(e);
    msg_t m;
    for (int i = 0; i < 256; i++) {
        claim_one(&q, 30000, &m);
        fail_ok(&q, id, "again", "1", 0, &m);
    }
    make_due(&q, id);

    redisReply *r = fcall_lib("retryd_v6_", "get", &q, id, 0, NULL, NULL);
    bool got = has_code(r, "ok") && r->elements == 2;
    if (got) msg_parse(r->element[1], &m);
    const char *desc = reply_desc(r);
    if (!got) fail_msg("retryd_v6_get of a wide record: %s", desc);
    freeReplyObject(r);
    assert_int_equal(msg_int(&m, "retry_count"), 255);
    assert_int_equal(msg_int(&m, "max_retries"), 255);
    assert_string_equal(msg_str(&m, "payload"), "job");
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(msg_int(&m, "retry_count"), 256);
    assert_int_equal(msg_int(&m, "max_retries"), -1);
    /* Its claim leases it, as any message. */
    const char *claim_args[] = { "30000", "1" };
    r = fcall_lib("retryd_v6_", "claim", &q, -1, 2, claim_args, NULL);
    got = has_code(r, "ok") && r->elements >= 2 && r->element[1]->type == REDIS_REPLY_ARRAY;
    desc = reply_desc(r);
    freeReplyObject(r);
    if (!got) fail_msg("retryd_v6_claim of a wide record: %s", desc);
    freeReplyObject(rcmd("FUNCTION", "DELETE", "retryd_v6", END));
}

/* A second connection subscribed to one channel. */
static redisContext *subscribe(const char *channel)
{
    struct timeval tv = { 5, 0 };
    redisContext *sub = redisConnectWithTimeout("127.0.0.1", atoi(getenv("RETRYD_TEST_REDIS_PORT")), tv);
    assert_non_null(sub);
    assert_int_equal(sub->err, 0);
    redisSetTimeout(sub, tv);
    redisReply *r = redisCommand(sub, "SUBSCRIBE %s", channel);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    return sub;
}

/* How many wake messages arrived since the last call. Everything the main
 * connection did has been answered, so its publishes reach sub before the
 * reply to this PING. */
static int wake_count(redisContext *sub)
{
    assert_int_equal(redisAppendCommand(sub, "PING"), REDIS_OK);
    for (int n = 0;;) {
        void *v = NULL;
        if (redisGetReply(sub, &v) != REDIS_OK)
            fail_msg("subscriber: %s", sub->errstr);
        redisReply *r = v;
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_true(r->elements >= 1);
        bool pong = strcmp(r->element[0]->str, "pong") == 0;
        if (!pong) {
            assert_string_equal(r->element[0]->str, "message");
            n++;
        }
        freeReplyObject(r);
        if (pong)
            return n;
    }
}

static void test_wake_channel(void **state)
{
    queue_t q;
    queue_init(&q, "wake");
    redisContext *sub = subscribe(qkey(&q, "wake"));
    assert_int_equal(wake_count(sub), 0);

    long long a = enqueue_ok(&q, "job", 1, 0);
    assert_int_equal(wake_count(sub), 1); /* ready now */
    long long b = enqueue_ok(&q, "job", 3, 60000);
    assert_int_equal(wake_count(sub), 0); /* not before it is due */

    msg_t m;
    claim_one(&q, 30000, &m);
    fail_ok(&q, a, "bad", "1", -1, &m);
    wake_count(sub);
    expect_ok_msg(fcall("replay", &q, a, END), &m);
    assert_int_equal(wake_count(sub), 1);

    long long r[TICK_N];
    expect_ints(fcall("promote", &q, -1, "10", END), 2, r);
    assert_int_equal(wake_count(sub), 0); /* nothing moved */
    make_due(&q, b);
    expect_ints(fcall("promote", &q, -1, "10", END), 2, r);
    assert_int_equal(r[0], 1);
    assert_int_equal(wake_count(sub), 1);

    claim_one(&q, 30000, &m);
    char token[64];
    snprintf(token, sizeof token, "%.63s", msg_str(&m, "lease_token"));
    wake_count(sub);
    assert_int_equal(int_reply(fcall("release", &q, -1, num(m.id), token, END)), 1);
    assert_int_equal(wake_count(sub), 1);

    long long c = enqueue_ok(&q, "job", 3, 60000);
    wake_count(sub);
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(wake_count(sub), 0);
    make_due(&q, c);
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(r[0], 1);
    assert_int_equal(wake_count(sub), 1);
    redisFree(sub);
}

/* A claim promotes every due retry it finds (up to 100) but leases only
 * `count`: the ones it leaves in the due list are claimable now, and the
 * waiters of other instances hear of it, as they would from a tick. A claim
 * that leaves nothing behind wakes nobody. */
static void test_claim_that_promotes_more_than_it_takes_wakes(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "promowake");
    redisContext *sub = subscribe(qkey(&q, "wake"));
    long long a = enqueue_ok(&q, "job", 3, 60000);
    long long b = enqueue_ok(&q, "job", 3, 60000);
    assert_int_equal(wake_count(sub), 0);
    make_due(&q, a);
    make_due(&q, b);

    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, a);
    assert_int_equal(wake_count(sub), 1); /* b is due and nobody took it */
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, b);
    assert_int_equal(wake_count(sub), 0); /* nothing promoted, nothing left */

    long long c = enqueue_ok(&q, "job", 3, 60000);
    wake_count(sub);
    make_due(&q, c);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, c);
    assert_int_equal(wake_count(sub), 0); /* promoted one, took it */
    redisFree(sub);
}

/* ------------------------------------------------------------------------ */
/* Dead-letter rules (docs/reference.md "Recovery rules", docs/dead-letters.md §2)                    */
/* ------------------------------------------------------------------------ */

#define expect_nothing_claimed(r) expect_code_at((r), "ok", NULL, __FILE__, __LINE__)

/* release_lost hands back what a claim tagged with a nonce leased (counted
 * released, retry_count untouched), once; a nonce given up before its claim
 * ran makes that claim hand everything back itself. */
static void test_release_lost(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "lost");
    for (int i = 0; i < 4; i++)
        enqueue_ok(&q, "job", 1, 0);
    msg_t m[4];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "2", "", "request", "",
                                          "inst.1", END), m, 4), 2);
    assert_int_equal(exists(qkey(&q, "claim:inst.1")), 1);
    assert_int_equal(int_reply(fcall("release_lost", &q, -1, "inst.1", END)), 2);
    assert_int_equal(exists(qkey(&q, "claim:inst.1")), 0);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 0);
    assert_int_equal(counter(&q, "released"), 2);
    assert_int_equal(counter(&q, "failed"), 0);
    msg_t g;
    expect_ok_msg(fcall("get", &q, 1, END), &g);
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_count"), 0);
    /* Once only. */
    assert_int_equal(int_reply(fcall("release_lost", &q, -1, "inst.1", END)), 0);

    /* A settle-and-claim's lease, and one since settled: only the one still
     * under that lease goes back. */
    redisReply *r = fcall("settle_claim", &q, -1, "30000", "2", "0", "0", "0", "request", "",
                          "inst.2", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 5);   /* ok, {}, two messages, the hint */
    assert_string_equal(r->element[2]->element[0]->str, "1");
    freeReplyObject(r);
    expect_ok_msg(fcall("succeed", &q, 1, "", END), &g);
    assert_int_equal(int_reply(fcall("release_lost", &q, -1, "inst.2", END)), 1);
    assert_int_equal(counter(&q, "released"), 3);

    /* Given up before the claim ran: the claim answers nothing and leaves
     * everything pending. */
    assert_int_equal(int_reply(fcall("release_lost", &q, -1, "inst.3", END)), 0);
    expect_nothing_claimed(fcall("claim", &q, -1, "30000", "3", "", "request", "", "inst.3", END));
    assert_int_equal(zcard(qkey(&q, "3:processing")), 0);
    assert_int_equal(counter(&q, "released"), 6);
    assert_int_equal(counter(&q, "failed"), 0);
    /* In their order: 2, 3, 4. */
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "3", END), m, 4), 3);
    assert_int_equal(m[0].id, 2);
    assert_int_equal(m[1].id, 3);
    assert_int_equal(m[2].id, 4);

    expect_error(fcall("release_lost", &q, -1, END));
    const char *many[11];
    for (int i = 0; i < 11; i++) many[i] = "n";
    expect_error(fcall_bin("release_lost", &q, -1, 11, many, NULL));
    char big[80];
    memset(big, 'n', 65);
    big[65] = '\0';
    expect_error(fcall("claim", &q, -1, "30000", "1", "", "request", "", big, END));
}

/* A success reads a record's header alone, trailer or not (an SQS queue's
 * message has one: its expiry): settle_claim's success of such a message
 * sends no GET (before, a GETRANGE then a GET of the whole record). A wrong
 * token is still a lease_mismatch and changes nothing; the message with the
 * right one ends succeeded with its fields intact. */
static void test_success_reads_header_alone(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "succhdr");
    policy_set(&q, "replace", "message_ttl", "3600");
    long long id = enqueue_ok(&q, "job", 3, 0);
    redisReply *b = rcmd("GETRANGE", mkey(&q, id), "0", "0", END);
    assert_true((unsigned char)b->str[0] >= 0x80);   /* a trailer: expires_at */
    freeReplyObject(b);
    msg_t m;
    claim_one(&q, 30000, &m);
    char token[64];
    token_of(&m, token);

    settle_t wrong = SUCCEEDED(id, "1.1");
    static const char *const mismatch[] = { "lease_mismatch" };
    msg_t got[1];
    expect_settled(settle_claim(&q, 30000, 0, 1, &wrong), 1, mismatch, got, 0);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "processing");

    long long gets = command_calls("get");
    settle_t right = SUCCEEDED(id, token);
    static const char *const ok[] = { "succeeded" };
    expect_settled(settle_claim(&q, 30000, 0, 1, &right), 1, ok, got, 0);
    assert_int_equal(command_calls("get"), gets);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    assert_string_equal(msg_str(&m, "payload"), "job");
    assert_int_equal(msg_int(&m, "max_retries"), 3);
    assert_true(msg_int(&m, "expires_at") > msg_int(&m, "created_at"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_settle_claim_mixed_outcomes),
        cmocka_unit_test(test_settle_claim_backoff_then_dead),
        cmocka_unit_test(test_settle_claim_nothing_claimable),
        cmocka_unit_test(test_settle_claim_lease_mismatch),
        cmocka_unit_test(test_settle_claim_atomic),
        cmocka_unit_test(test_settle_claim_bounds),
        cmocka_unit_test(test_snooze_keeps_attempts),
        cmocka_unit_test(test_snooze_lease_rules),
        cmocka_unit_test(test_snooze_zero_claimable_at_once),
        cmocka_unit_test(test_snooze_not_claimable_before_until),
        cmocka_unit_test(test_snooze_history_bound),
        cmocka_unit_test(test_settle_claim_snoozed),
        cmocka_unit_test(test_group_record_read_by_retryd_v5),
        cmocka_unit_test(test_wide_counters_read_by_retryd_v6),
        cmocka_unit_test(test_success_reads_header_alone),
        cmocka_unit_test(test_wake_channel),
        cmocka_unit_test(test_claim_that_promotes_more_than_it_takes_wakes),
        cmocka_unit_test(test_release_lost),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
