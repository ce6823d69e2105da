/* test_e2e_lifecycle.c - end-to-end tests of build/retryd over HTTP against a real
 * redis-server: claim, succeed, fail, replay, redrive, extend, delayed
 * retries, expired leases, and the history and worker of a message.
 *
 * The group's daemon, setup, and the helpers the e2e suites share: e2e_common.h. */

#define E2E_SUITE "test_e2e_lifecycle"
#include "e2e_common.h"

/* ------------------------------------------------------------------------ */
/* Claim                                                                    */
/* ------------------------------------------------------------------------ */

static void test_claim_nothing_due_is_204(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "empty");
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
    e2e_expect_no_content(&r);
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{}");
    e2e_expect_no_content(&r);
    /* A message that is not due yet is not claimable either. */
    enqueue(q, "{\"payload\":\"later\",\"delay_seconds\":60}");
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":5}");
    e2e_expect_no_content(&r);
    e2e_response_free(&r);
}

/* Keys in Redis whose name holds `needle` (SCAN, so a busy Redis is not held). */
static long long keys_matching(const char *needle)
{
    long long n = 0;
    char cursor[32] = "0";
    do {
        redisReply *x = e2e_rcmd(g_redis, "SCAN %s MATCH *%s* COUNT 1000", cursor, needle);
        assert_int_equal(x->type, REDIS_REPLY_ARRAY);
        SET(cursor, x->element[0]->str);
        n += (long long)x->element[1]->elements;
        freeReplyObject(x);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

/* 20,000 claims on names that never had a message left 20,000 permanent
 * stats keys, and the series nudge put the names in /queues, the console
 * and /metrics. A claim that finds nothing writes nothing, whichever way it
 * comes (a plain claim, a batch, a settle-and-claim whose settlements find
 * nothing, a long-poll that times out), and the registry never hears of the
 * name. A daemon with its own prefix (and --series on, the default, so every
 * name could be nudged) makes the claims, so its registry holds nothing else. */
static void test_claims_on_unknown_queues_write_nothing(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-ghost", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, "--series", "on", NULL), 0);
    redisReply *x;
    char stem[64];
    e2e_queue_name(stem, sizeof stem, "ghost");
    e2e_response_t r = { 0 };
    for (int i = 0; i < 1000; i++) {
        const char *path = e2e_fmt("/queues/%s-%d/claim", stem, i);
        const char *body;
        switch (i % 4) {
        case 0: body = "{}"; break;
        case 1: body = "{\"count\":10}"; break;
        case 2: body = "{\"count\":5,\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"},"
                       "{\"id\":2,\"outcome\":\"failed\",\"error\":\"x\"}]}"; break;
        default: body = "{\"lease_seconds\":5,\"worker\":\"w1\"}"; break;
        }
        http_to(g_side.port, &r, "POST", path, body, strlen(body));
        if (i % 4 == 2) {
            e2e_expect_json(&r, 200);   /* the settlements' outcomes, no message */
            assert_non_null(strstr(r.body, "not-found"));
        } else {
            e2e_expect_no_content(&r);
        }
    }
    e2e_response_free(&r);
    /* Long-polls that time out, several at once. */
    enum { POLLS = 8 };
    e2e_conn_t polls[POLLS];
    for (int i = 0; i < POLLS; i++) {
        assert_int_equal(e2e_conn_open(&polls[i], g_side.port), 0);
        const char *body = "{\"wait_seconds\":1}";
        assert_int_equal(e2e_send_request(&polls[i], "POST", e2e_fmt("/queues/%s-poll%d/claim",
                                          stem, i), NULL, body, strlen(body)), 0);
    }
    for (int i = 0; i < POLLS; i++) {
        assert_int_equal(e2e_read_response(&polls[i], &r), 0);
        e2e_expect_no_content(&r);
        e2e_response_free(&r);
        e2e_conn_close(&polls[i]);
    }
    /* Asked through the daemon (on its link, after every claim's command). */
    http_to(g_side.port, &r, "GET", "/queues?limit=1000", NULL, 0);
    e2e_expect_json(&r, 200);
    if (strstr(r.body, stem)) fail_msg("GET /queues lists a name only claimed: %.300s", r.body);
    http_to(g_side.port, &r, "GET", "/metrics", NULL, 0);
    assert_int_equal(r.status, 200);
    if (strstr(r.body, stem)) fail_msg("/metrics names a queue only claimed");
    assert_non_null(strstr(r.body, "retryd_registered_queues 0"));
    /* No key of any of the names, and no registry (its SET and the names
     * ZSET; the timer's own sweep bookkeeping exists for any daemon). */
    long long left = keys_matching(stem);
    if (left != 0) {
        redisReply *k = e2e_rcmd(g_redis, "SCAN 0 MATCH *%s* COUNT 1000", stem);
        fail_msg("%lld keys left by claims that found nothing, e.g. %s", left,
                 k->element[1]->elements ? k->element[1]->element[0]->str : "?");
    }
    x = e2e_rcmd(g_redis, "EXISTS %s:queues {%s:queues}:names {%s:queues}:timers", prefix,
                 prefix, prefix);
    assert_int_equal(x->integer, 0);
    freeReplyObject(x);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

static void test_claim_is_fifo(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "fifo");
    for (int i = 1; i <= 5; i++)
        assert_int_equal(enqueue(q, e2e_fmt("{\"payload\":\"m%d\"}", i)), i);
    for (int i = 1; i <= 5; i++) assert_int_equal(claim_one(q, 30, NULL, 0), i);
    assert_int_equal(claim_one(q, 30, NULL, 0), 0);
}

static void test_claim_sets_lease(void **state)
{
    (void)state;
    char q[64], token1[160];
    e2e_queue_name(q, sizeof q, "lease");
    for (int i = 0; i < 3; i++) enqueue(q, "{\"payload\":\"x\"}");
    char path[1024];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    e2e_response_t r = { 0 };

    http(&r, "POST", path, "{\"lease_seconds\":5}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "processing", 0, 3);
    expect_lease(m, 5);
    e2e_jnull(m, "retry_after");
    snprintf(token1, sizeof token1, "%s", e2e_jstr(m, "lease_token"));

    http(&r, "POST", e2e_fmt("/queues/%s/claim?lease_seconds=5", q), NULL);
    m = e2e_expect_json(&r, 200);
    expect_message(m, 2, q, "processing", 0, 3);
    expect_lease(m, 5);
    assert_string_not_equal(e2e_jstr(m, "lease_token"), token1);

    http(&r, "POST", path, NULL);
    m = e2e_expect_json(&r, 200);
    expect_lease(m, DEFAULT_LEASE_S);

    /* The lease shows on GET too. */
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "processing");
    e2e_jtime(m, "lease_expires_at");
    e2e_response_free(&r);
}

static void test_claim_count(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "count");
    for (int i = 0; i < 4; i++) enqueue(q, "{\"payload\":\"x\"}");
    char path[1024];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    e2e_response_t r = { 0 };

    http(&r, "POST", path, "{\"count\":3,\"lease_seconds\":5}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_true(rd_json_is_array(list));
    assert_int_equal(rd_json_array_size(list), 3);
    const char *tokens[3];
    for (size_t i = 0; i < 3; i++) {
        rd_json_t *m = rd_json_array_at(list, i);
        expect_message(m, (long long)i + 1, q, "processing", 0, 3);
        expect_lease(m, 5);
        tokens[i] = e2e_jstr(m, "lease_token");
        for (size_t j = 0; j < i; j++) assert_string_not_equal(tokens[i], tokens[j]);
    }

    http(&r, "POST", e2e_fmt("/queues/%s/claim?count=3", q), NULL);
    list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 1);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "id"), 4);

    http(&r, "POST", path, "{\"count\":3}");
    e2e_expect_no_content(&r);
    e2e_response_free(&r);
}

static void test_claim_validation(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "claimval");
    enqueue(q, "{\"payload\":\"x\"}");
    char path[128];
    snprintf(path, sizeof path, "/queues/%s/claim", q);
    e2e_response_t r = { 0 };
    const struct { const char *query, *body, *field; } cases[] = {
        { "", "{\"lease_seconds\":0}", "lease_seconds" },
        { "", "{\"lease_seconds\":43201}", "lease_seconds" },
        { "", "{\"lease_seconds\":\"5\"}", "lease_seconds" },
        { "?lease_seconds=0", NULL, "lease_seconds" },
        { "?lease_seconds=43201", NULL, "lease_seconds" },
        { "", "{\"count\":101}", "count" },
        { "", "{\"count\":0}", "count" },
        { "?count=101", NULL, "count" },
        { "", "{\"wait_seconds\":31}", "wait_seconds" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http(&r, "POST", e2e_fmt("%s%s", path, cases[i].query), cases[i].body);
        expect_field_error(expect_invalid(&r, path, 1), cases[i].field, "invalid", NULL);
    }
    http(&r, "POST", path, "[1]");
    e2e_expect_problem(&r, 400, "malformed-request", path);
    /* None of them claimed anything; the limits themselves are accepted. */
    http(&r, "POST", path, "{\"lease_seconds\":43200,\"count\":100}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 1);
    expect_lease(rd_json_array_at(list, 0), 43200);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Settling: succeed, fail, replay, extend                                  */
/* ------------------------------------------------------------------------ */

static void test_succeed(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "succeed");
    enqueue(q, "{\"payload\":\"a\"}");
    enqueue(q, "{\"payload\":\"b\"}");
    enqueue(q, "{\"payload\":\"c\"}");
    e2e_response_t r = { 0 };
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);

    char path[1024];
    SET(path, message_path(q, 1, "succeed"));
    http(&r, "POST", path, "{\"lease_token\":\"not-the-token\"}");
    e2e_expect_problem(&r, 409, "lease-mismatch", path);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "processing");

    http(&r, "POST", path, e2e_fmt("{\"lease_token\":\"%s\"}", token));
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "succeeded", 0, 3);
    e2e_jnull(m, "lease_expires_at");
    assert_string_equal(e2e_jstr(m, "payload"), "a");

    http(&r, "POST", path, e2e_fmt("{\"lease_token\":\"%s\"}", token));
    assert_non_null(strstr(e2e_jstr(e2e_expect_problem(&r, 409, "invalid-state", path), "detail"),
                           "succeeded"));

    /* Without a token any current lease is accepted (reference behaviour). */
    assert_int_equal(claim_one(q, 30, NULL, 0), 2);
    http(&r, "POST", message_path(q, 2, "succeed"), NULL);
    expect_message(e2e_expect_json(&r, 200), 2, q, "succeeded", 0, 3);

    SET(path, message_path(q, 3, "succeed"));
    http(&r, "POST", path, "{}");
    assert_non_null(strstr(e2e_jstr(e2e_expect_problem(&r, 409, "invalid-state", path), "detail"),
                           "pending"));
    e2e_response_free(&r);
}

static void test_fail_schedules_retry_with_backoff(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "fail");
    enqueue(q, "{\"payload\":\"x\"}");
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    e2e_response_t r = { 0 };

    char path[1024];
    SET(path, message_path(q, 1, "fail"));
    http(&r, "POST", path, e2e_fmt("{\"error\":\"wrong token\",\"lease_token\":\"%s-x\"}", token));
    e2e_expect_problem(&r, 409, "lease-mismatch", path);

    http(&r, "POST", path, e2e_fmt("{\"error\":\"smtp said \\\"no\\\"\",\"lease_token\":\"%s\"}",
                               token));
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "pending", 1, 3);
    assert_string_equal(e2e_jstr(m, "last_error"), "smtp said \"no\"");
    e2e_jnull(m, "lease_expires_at");
    /* First failure: backoff 2^1 s from the failure. */
    assert_int_equal(e2e_jtime(m, "retry_after") - e2e_jtime(m, "updated_at"), 2000);

    http(&r, "GET", message_path(q, 1, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "pending");
    assert_string_equal(e2e_jstr(m, "last_error"), "smtp said \"no\"");
    assert_int_equal(claim_one(q, 30, NULL, 0), 0);

    /* Failing it again needs a claim first. */
    http(&r, "POST", path, "{\"error\":\"again\"}");
    assert_non_null(strstr(e2e_jstr(e2e_expect_problem(&r, 409, "invalid-state", path), "detail"),
                           "pending"));
    e2e_response_free(&r);
}

static void test_fail_to_dead(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "dead");
    enqueue(q, "{\"payload\":\"a\"}");
    enqueue(q, "{\"payload\":\"b\",\"max_retries\":1}");
    e2e_response_t r = { 0 };

    assert_int_equal(claim_one(q, 30, NULL, 0), 1);
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"bad input\",\"retryable\":false}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "dead", 1, 3);
    assert_string_equal(e2e_jstr(m, "last_error"), "bad input");
    e2e_jnull(m, "retry_after");
    e2e_jnull(m, "lease_expires_at");

    assert_int_equal(claim_one(q, 30, NULL, 0), 2);
    http(&r, "POST", message_path(q, 2, "fail"), "{\"error\":\"once\"}");
    m = e2e_expect_json(&r, 200);
    expect_message(m, 2, q, "dead", 1, 1);
    assert_string_equal(e2e_jstr(m, "last_error"), "once");
    e2e_jnull(m, "retry_after");

    assert_int_equal(claim_one(q, 30, NULL, 0), 0);
    e2e_response_free(&r);
}

static void test_fail_requires_error(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "failval");
    enqueue(q, "{\"payload\":\"x\"}");
    assert_int_equal(claim_one(q, 30, NULL, 0), 1);
    char path[1024];
    SET(path, message_path(q, 1, "fail"));
    e2e_response_t r = { 0 };

    http(&r, "POST", path, "{}");
    expect_field_error(expect_invalid(&r, path, 1), "error", "required", NULL);
    http(&r, "POST", path, "{\"retryable\":false}");
    expect_field_error(expect_invalid(&r, path, 1), "error", "required", NULL);
    http(&r, "POST", path, "{\"error\":42}");
    expect_field_error(expect_invalid(&r, path, 1), "error", "invalid", NULL);
    http(&r, "POST", path, "{\"error\":\"e\",\"retryable\":\"no\"}");
    expect_field_error(expect_invalid(&r, path, 1), "retryable", "invalid", NULL);
    http(&r, "POST", path, "");
    e2e_expect_problem(&r, 400, "malformed-request", path);

    http(&r, "GET", message_path(q, 1, NULL), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "processing", 0, 3);
    e2e_jnull(m, "last_error");
    e2e_response_free(&r);
}

static void test_replay(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "replay");
    e2e_response_t r = { 0 };
    assert_int_equal(enqueue(q, "{\"payload\":\"dead one\",\"max_retries\":1}"), 1);
    assert_int_equal(claim_one(q, 30, NULL, 0), 1);
    /* Fresh messages that wait longer than the replayed one will. */
    assert_int_equal(enqueue(q, "{\"payload\":\"fresh 2\"}"), 2);
    assert_int_equal(enqueue(q, "{\"payload\":\"fresh 3\"}"), 3);
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"boom\"}");
    expect_message(e2e_expect_json(&r, 200), 1, q, "dead", 1, 1);

    char path[1024];
    SET(path, message_path(q, 2, "replay"));
    http(&r, "POST", path, NULL);
    assert_non_null(strstr(e2e_jstr(e2e_expect_problem(&r, 409, "invalid-state", path), "detail"),
                           "pending"));

    http(&r, "POST", message_path(q, 1, "replay"), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "pending", 0, 1);
    e2e_jnull(m, "retry_after");
    e2e_jnull(m, "lease_expires_at");
    assert_string_equal(e2e_jstr(m, "payload"), "dead one");

    assert_int_equal(claim_one(q, 30, NULL, 0), 1);
    SET(path, message_path(q, 1, "replay"));
    http(&r, "POST", path, "{}");
    assert_non_null(strstr(e2e_jstr(e2e_expect_problem(&r, 409, "invalid-state", path), "detail"),
                           "processing"));
    assert_int_equal(claim_one(q, 30, NULL, 0), 2);
    assert_int_equal(claim_one(q, 30, NULL, 0), 3);

    SET(path, message_path(q, 77, "replay"));
    http(&r, "POST", path, NULL);
    e2e_expect_problem(&r, 404, "not-found", path);
    e2e_response_free(&r);
}

/* POST /queues/{q}/replay with "to" (docs/reference.md "Redrive"): ids, error_contains, all;
 * each letter becomes a new pending message of the target with origin, and
 * leaves the source; a bad "to" is a 422 on field to. */
static void test_redrive_to_another_queue(void **state)
{
    (void)state;
    char q[64], to[64], path[1024];
    e2e_queue_name(q, sizeof q, "redrive-src");
    e2e_queue_name(to, sizeof to, "redrive-dst");
    long long a = make_dead(q, "pa", "timeout");
    long long b = make_dead(q, "pb", "refused");
    long long c = make_dead(q, "pc", "timeout 2");
    long long d = make_dead(q, "pd", "other");
    e2e_response_t r = { 0 };
    SET(path, e2e_fmt("/queues/%s/replay", q));

    http(&r, "POST", path, e2e_fmt("{\"ids\":[%lld, 999],\"to\":\"%s\"}", a, to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);
    http(&r, "POST", path, e2e_fmt("{\"error_contains\":\"timeout\",\"to\":\"%s\"}", to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);
    /* b stays dead in the source until "all". */
    http(&r, "GET", message_path(q, b, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "dead");
    http(&r, "POST", path, e2e_fmt("{\"all\":true,\"to\":\"%s\"}", to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 2);
    http(&r, "POST", path, e2e_fmt("{\"all\":true,\"to\":\"%s\"}", to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 0);

    /* The source has none of them left. */
    long long src_ids[] = { a, b, c, d };
    for (size_t i = 0; i < 4; i++) {
        char p[1024];
        SET(p, message_path(q, src_ids[i], NULL));
        http(&r, "GET", p, NULL);
        e2e_expect_problem(&r, 404, "not-found", p);
    }
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *st = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(e2e_jget(st, "counts"), "dead"), 0);
    assert_int_equal(e2e_jint(e2e_jget(st, "counts"), "redriving"), 0);
    assert_int_equal(e2e_jint(e2e_jget(st, "totals"), "redriven"), 4);

    /* The target has each once, in redrive order, pending with origin. */
    const char *payloads[] = { "pa", "pc", "pb", "pd" };
    long long origins[] = { a, c, b, d };
    http(&r, "GET", e2e_fmt("/queues/%s/messages?status=pending", to), NULL);
    rd_json_t *page = e2e_expect_json(&r, 200);
    rd_json_t *msgs = e2e_jget(page, "messages");
    assert_int_equal(rd_json_array_size(msgs), 4);
    for (size_t i = 0; i < 4; i++) {
        rd_json_t *m = rd_json_array_at(msgs, i);
        expect_message(m, (long long)i + 1, to, "pending", 0, 2);
        assert_string_equal(e2e_jstr(m, "payload"), payloads[i]);
        e2e_jnull(m, "last_error");
        assert_null(rd_json_get(m, "idempotency_key"));
        rd_json_t *o = e2e_jget(m, "origin");
        assert_string_equal(e2e_jstr(o, "queue"), q);
        assert_int_equal(e2e_jint(o, "id"), origins[i]);
    }
    http(&r, "GET", message_path(to, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_jget(e2e_expect_json(&r, 200), "origin"), "queue"), q);
    /* A claim of the target shows it too, and a fresh budget works. */
    assert_int_equal(claim_one(to, 30, NULL, 0), 1);

    /* Bad targets. */
    make_dead(q, "pe", "x");
    http(&r, "POST", path, e2e_fmt("{\"all\":true,\"to\":\"%s\"}", q));
    expect_field_error(expect_invalid(&r, path, 1), "to", "invalid", NULL);
    http(&r, "POST", path, "{\"all\":true,\"to\":\"\"}");
    expect_field_error(expect_invalid(&r, path, 1), "to", "invalid", NULL);
    http(&r, "POST", path, "{\"all\":true,\"to\":\"a\\u0001b\"}");
    expect_field_error(expect_invalid(&r, path, 1), "to", "invalid", NULL);
    http(&r, "POST", path, "{\"all\":true,\"to\":42}");
    expect_field_error(expect_invalid(&r, path, 1), "to", "invalid", NULL);
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    assert_int_equal(e2e_jint(e2e_jget(e2e_expect_json(&r, 200), "counts"), "dead"), 1);
    /* "to": null replays in place. */
    http(&r, "POST", path, "{\"all\":true,\"to\":null}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);
    e2e_response_free(&r);
}

/* A redrive by error text walks the whole dead index even when many pages
 * in a row match nothing (each take looks at 1000 letters): it is not
 * mistaken for a redrive that makes no progress. */
static void test_redrive_by_error_past_pages_without_a_match(void **state)
{
    (void)state;
    enum { N = 3500 };
    char q[64], to[64];
    e2e_queue_name(q, sizeof q, "redrive-sparse");
    e2e_queue_name(to, sizeof to, "redrive-sparse-to");
    for (int i = 1; i <= N + 1; i++) {
        redisAppendCommand(g_redis, "FCALL %s 1 %s:{%s} p%d 1 0 %s", RD_FUNCTION("enqueue"),
                           g_prefix, q, i, "");
        redisAppendCommand(g_redis, "FCALL %s 2 %s:{%s} %s:{%s}:m:%d %d %s", RD_FUNCTION("kill"),
                           g_prefix, q, g_prefix, q, i, i, i <= N ? "common" : "the rare one");
    }
    for (int i = 0; i < 2 * (N + 1); i++) {
        redisReply *rep = NULL;
        if (redisGetReply(g_redis, (void **)&rep) != REDIS_OK || rep == NULL)
            fail_msg("seeding failed at %d", i);
        freeReplyObject(rep);
    }
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/replay", q),
         e2e_fmt("{\"error_contains\":\"rare\",\"to\":\"%s\"}", to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);
    http(&r, "GET", message_path(to, 1, NULL), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(e2e_jget(m, "origin"), "id"), N + 1);
    e2e_response_free(&r);
}

static void test_extend(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "extend");
    enqueue(q, "{\"payload\":\"x\"}");
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":5}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    long long first = e2e_jtime(m, "lease_expires_at");
    snprintf(token, sizeof token, "%s", e2e_jstr(m, "lease_token"));

    char path[1024];
    SET(path, message_path(q, 1, "extend"));
    http(&r, "POST", path, "{\"lease_seconds\":60,\"lease_token\":\"nope\"}");
    e2e_expect_problem(&r, 409, "lease-mismatch", path);

    http(&r, "POST", path, e2e_fmt("{\"lease_seconds\":60,\"lease_token\":\"%s\"}", token));
    m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "processing", 0, 3);
    long long second = e2e_jtime(m, "lease_expires_at");
    assert_true(second > first);
    assert_int_equal(second - e2e_jtime(m, "updated_at"), 60000);

    /* The token still holds after extend. */
    http(&r, "POST", message_path(q, 1, "succeed"), e2e_fmt("{\"lease_token\":\"%s\"}", token));
    expect_message(e2e_expect_json(&r, 200), 1, q, "succeeded", 0, 3);
    http(&r, "POST", path, "{}");
    e2e_expect_problem(&r, 409, "invalid-state", path);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Time: delayed retries and expired leases                                 */
/* ------------------------------------------------------------------------ */

static void test_delayed_retry_end_to_end(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "delayed");
    enqueue(q, "{\"payload\":\"retry me\"}");
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    e2e_response_t r = { 0 };
    http(&r, "POST", message_path(q, 1, "fail"),
         e2e_fmt("{\"error\":\"later\",\"retry_after_seconds\":1,\"lease_token\":\"%s\"}", token));
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "pending", 1, 3);
    long long retry_after = e2e_jtime(m, "retry_after");
    assert_int_equal(retry_after - e2e_jtime(m, "updated_at"), 1000);

    char path[1024];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    http(&r, "POST", path, NULL);
    e2e_expect_no_content(&r);

    long long deadline = e2e_mono_ms() + 3000;
    for (;;) {
        http(&r, "POST", path, NULL);
        if (r.status != 204) break;
        if (e2e_mono_ms() > deadline) fail_msg("not claimable 3 s after the failure");
        e2e_pause_ms(20);
    }
    m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "processing", 1, 3);
    assert_string_equal(e2e_jstr(m, "payload"), "retry me");
    /* updated_at is the claim's time, from the same clock as retry_after. */
    long long claimed_at = e2e_jtime(m, "updated_at");
    if (claimed_at < retry_after || claimed_at > retry_after + 1000)
        fail_msg("claimed %lld ms after retry_after", claimed_at - retry_after);
    e2e_response_free(&r);
}

static void test_expired_lease_is_a_failure(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "expiry");
    enqueue(q, "{\"payload\":\"x\"}");
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":1}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    long long lease_end = e2e_jtime(m, "lease_expires_at");
    snprintf(token, sizeof token, "%s", e2e_jstr(m, "lease_token"));

    char path[1024];
    SET(path, message_path(q, 1, NULL));
    long long deadline = e2e_mono_ms() + 3000;
    for (;;) {
        http(&r, "GET", path, NULL);
        m = e2e_expect_json(&r, 200);
        if (strcmp(e2e_jstr(m, "status"), "processing") != 0) break;
        if (e2e_mono_ms() > deadline) fail_msg("still processing 3 s after a 1 s lease");
        e2e_pause_ms(50);
    }
    expect_message(m, 1, q, "pending", 1, 3);
    assert_string_equal(e2e_jstr(m, "last_error"), "lease expired");
    e2e_jnull(m, "lease_expires_at");
    long long failed_at = e2e_jtime(m, "updated_at");
    assert_true(failed_at >= lease_end && failed_at <= lease_end + 1000);
    assert_int_equal(e2e_jtime(m, "retry_after") - failed_at, 2000);

    char succeed[1024];
    SET(succeed, message_path(q, 1, "succeed"));
    http(&r, "POST", succeed, e2e_fmt("{\"lease_token\":\"%s\"}", token));
    /* Either answer is right: the lease is gone, and so is "processing". */
    const char *type = r.json ? rd_json_string(rd_json_get(r.json, "type")) : NULL;
    if (type == NULL || (strcmp(type, "/problems/invalid-state") != 0 &&
                         strcmp(type, "/problems/lease-mismatch") != 0))
        fail_msg("expected 409 invalid-state or lease-mismatch, got %d: %s", r.status, r.body);
    e2e_expect_problem(&r, 409, type + strlen("/problems/"), succeed);

    /* Once someone else holds it, the old token is a lease mismatch. */
    char fresh[160];
    long long id = 0;
    deadline = e2e_mono_ms() + 4000;
    while ((id = claim_one(q, 30, fresh, sizeof fresh)) == 0) {
        if (e2e_mono_ms() > deadline) fail_msg("not claimable 4 s after the lease expired");
        e2e_pause_ms(20);
    }
    assert_int_equal(id, 1);
    assert_string_not_equal(fresh, token);
    http(&r, "POST", succeed, e2e_fmt("{\"lease_token\":\"%s\"}", token));
    e2e_expect_problem(&r, 409, "lease-mismatch", succeed);
    http(&r, "POST", succeed, e2e_fmt("{\"lease_token\":\"%s\"}", fresh));
    expect_message(e2e_expect_json(&r, 200), 1, q, "succeeded", 1, 3);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* History and worker (docs/reference.md "History")                                            */
/* ------------------------------------------------------------------------ */

/* Entry i of m's history: a failure with these fields (worker NULL: null). */
static void expect_failure_entry(const rd_json_t *m, size_t i, long long attempt,
                                 const char *error, bool lease_expired, const char *worker)
{
    rd_json_t *h = e2e_jget(m, "history");
    assert_true(rd_json_is_array(h));
    assert_true(i < rd_json_array_size(h));
    rd_json_t *e = rd_json_array_at(h, i);
    assert_int_equal(e2e_jint(e, "attempt"), attempt);
    assert_string_equal(e2e_jstr(e, "error"), error);
    assert_true(e2e_jtime(e, "at") >= e2e_jtime(m, "created_at"));
    assert_true(rd_json_is_bool(e2e_jget(e, "lease_expired")));
    assert_int_equal(rd_json_bool(e2e_jget(e, "lease_expired")), lease_expired);
    if (worker) assert_string_equal(e2e_jstr(e, "worker"), worker);
    else e2e_jnull(e, "worker");
}

static size_t history_len(const rd_json_t *m)
{
    rd_json_t *h = e2e_jget(m, "history");
    assert_true(rd_json_is_array(h));
    return rd_json_array_size(h);
}

/* GET shows the history after a lease expiry, a worker's failure, a failed
 * settlement and a replay; the worker while processing and in each entry. */
static void test_history_and_worker(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "history");
    enqueue(q, "{\"payload\":\"x\",\"max_retries\":5}");
    char claim[128], get[1024];
    SET(claim, e2e_fmt("/queues/%s/claim", q));
    SET(get, message_path(q, 1, NULL));
    e2e_response_t r = { 0 };
    http(&r, "POST", claim, "{\"lease_seconds\":1,\"worker\":\"host-a/1\"}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "worker"), "host-a/1");
    assert_int_equal(history_len(m), 0);
    assert_int_equal(e2e_jint(m, "history_dropped"), 0);
    http(&r, "GET", get, NULL);
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "processing");
    assert_string_equal(e2e_jstr(m, "worker"), "host-a/1");

    /* The lease expires: an entry with the claim's worker. */
    long long deadline = e2e_mono_ms() + 3000;
    for (;;) {
        http(&r, "GET", get, NULL);
        m = e2e_expect_json(&r, 200);
        if (strcmp(e2e_jstr(m, "status"), "processing") != 0) break;
        if (e2e_mono_ms() > deadline) fail_msg("still processing 3 s after a 1 s lease");
        e2e_pause_ms(50);
    }
    e2e_jnull(m, "worker");
    assert_int_equal(history_len(m), 1);
    expect_failure_entry(m, 0, 1, "lease expired", true, "host-a/1");

    /* A worker's failure. */
    deadline = e2e_mono_ms() + 4000;
    for (;;) {
        http(&r, "POST", claim, "{\"worker\":\"w2\"}");
        if (r.status == 200) break;
        assert_int_equal(r.status, 204);
        if (e2e_mono_ms() > deadline) fail_msg("not claimable 4 s after the lease expired");
        e2e_pause_ms(50);
    }
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "worker"), "w2");
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"boom\",\"retry_after_seconds\":0}");
    m = e2e_expect_json(&r, 200);
    e2e_jnull(m, "worker");
    expect_failure_entry(m, 1, 2, "boom", false, "w2");

    /* Settle-and-claim: the failed settlement's entry has the worker of the
     * lease it ends; the claim's own worker is the next lease's. */
    http(&r, "POST", claim, "{\"worker\":\"w3\"}");
    e2e_expect_json(&r, 200);
    http(&r, "POST", claim,
         "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e3\",\"retryable\":false}],"
         "\"worker\":\"w4\"}");
    e2e_expect_json(&r, 200);
    http(&r, "GET", get, NULL);
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "dead");
    assert_int_equal(history_len(m), 3);
    expect_failure_entry(m, 0, 1, "lease expired", true, "host-a/1");
    expect_failure_entry(m, 1, 2, "boom", false, "w2");
    expect_failure_entry(m, 2, 3, "e3", false, "w3");

    /* A replay: a mark; last_error goes, the history stays. */
    http(&r, "POST", message_path(q, 1, "replay"), NULL);
    m = e2e_expect_json(&r, 200);
    e2e_jnull(m, "last_error");
    assert_int_equal(history_len(m), 4);
    rd_json_t *mark = rd_json_array_at(e2e_jget(m, "history"), 3);
    assert_true(e2e_jtime(mark, "replayed_at") >= e2e_jtime(m, "created_at"));
    assert_int_equal(e2e_jint(m, "history_dropped"), 0);

    /* A listing page shows it too. */
    http(&r, "GET", e2e_fmt("%s?status=pending", messages_path(q)), NULL);
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 1);
    assert_int_equal(history_len(rd_json_array_at(list, 0)), 4);
    e2e_response_free(&r);
}

/* Every optional field a leased message can carry reaches the claim's JSON
 * as GET shows it: origin_queue and origin_id (redriven), retry_after and
 * last_error (failed), history with history_dropped > 0, worker,
 * idempotency_key; through a claim of one, of 10, a settle-and-claim and a
 * long-poll that waited for a retry. */
static void test_claimed_message_is_shown_as_get(void **state)
{
    (void)state;
    char src[64], q[64], path[128];
    e2e_queue_name(src, sizeof src, "asget-src");
    e2e_queue_name(q, sizeof q, "asget");
    snprintf(path, sizeof path, "/queues/%s/claim", q);
    long long dead = make_dead(src, "redriven", "gone");
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/replay", src),
         e2e_fmt("{\"ids\":[%lld],\"to\":\"%s\"}", dead, q));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);

    /* Message 1 (max_retries 2, from the source): past 20 history entries,
     * each failure under a worker; replayed whenever it dies (every second
     * failure), the last failure a retry due at once. */
    for (int i = 0; i < 23; i++) {
        http(&r, "POST", path, "{\"worker\":\"w0\"}");
        rd_json_t *m = e2e_expect_json(&r, 200);
        assert_int_equal(e2e_jint(m, "id"), 1);
        expect_shown_as_get(q, m);
        http(&r, "POST", message_path(q, 1, "fail"),
             e2e_fmt("{\"error\":\"e%d\",\"retry_after_seconds\":0}", i));
        m = e2e_expect_json(&r, 200);
        if (strcmp(e2e_jstr(m, "status"), "dead") == 0) {
            http(&r, "POST", message_path(q, 1, "replay"), NULL);
            e2e_expect_json(&r, 200);
        }
    }
    enqueue(q, "{\"payload\":\"keyed\",\"idempotency_key\":\"k-1\"}");

    /* A claim of 10: the retry (due first), then the keyed one. */
    http(&r, "POST", path, "{\"count\":10,\"worker\":\"w1\"}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 2);
    rd_json_t *m = rd_json_array_at(list, 0);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_true(e2e_jint(m, "history_dropped") > 0);
    assert_string_equal(e2e_jstr(e2e_jget(m, "origin"), "queue"), src);
    e2e_jtime(m, "retry_after");
    e2e_jstr(m, "last_error");
    expect_shown_as_get(q, m);
    m = rd_json_array_at(list, 1);
    assert_string_equal(e2e_jstr(m, "idempotency_key"), "k-1");
    expect_shown_as_get(q, m);

    /* Settle-and-claim: 1 fails its last retry (dead), 2 succeeds; 1 is
     * replayed; a settlement of 2 again (invalid-state) and 1 comes back. */
    http(&r, "POST", path,
         "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e-s\"},"
         "{\"id\":2,\"outcome\":\"succeeded\"}]}");
    assert_int_equal(rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages")), 0);
    http(&r, "POST", message_path(q, 1, "replay"), NULL);
    e2e_expect_json(&r, 200);
    http(&r, "POST", path,
         "{\"worker\":\"w2\",\"settle\":[{\"id\":2,\"outcome\":\"succeeded\"}]}");
    list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 1);
    m = rd_json_array_at(list, 0);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_string_equal(e2e_jstr(m, "worker"), "w2");
    expect_shown_as_get(q, m);

    /* A long-poll that waits for the retry due in 1 s (without a worker). */
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"e-w\",\"retry_after_seconds\":1}");
    e2e_expect_json(&r, 200);
    http(&r, "POST", path, "{\"wait_seconds\":5}");
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_string_equal(e2e_jstr(m, "last_error"), "e-w");
    e2e_jnull(m, "worker");
    expect_shown_as_get(q, m);
    e2e_response_free(&r);
}

/* worker must be 1-128 bytes of UTF-8: 422 with field worker otherwise, on
 * a plain claim, a long-poll and a settle-and-claim, and nothing is claimed. */
static void test_claim_worker_validation(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "workerval");
    enqueue(q, "{\"payload\":\"x\"}");
    char path[128];
    snprintf(path, sizeof path, "/queues/%s/claim", q);
    char long_worker[160];
    snprintf(long_worker, sizeof long_worker, "{\"worker\":\"%0129d\"}", 0);
    const char *bodies[] = {
        "{\"worker\":\"\"}",
        long_worker,
        "{\"worker\":\"\xff\xfe\"}",
        "{\"worker\":\"a\\ud800b\"}",
        "{\"worker\":17}",
        "{\"worker\":\"ok\",\"wait_seconds\":\"x\",\"count\":0}",
        "{\"worker\":\"\",\"wait_seconds\":5}",
        "{\"worker\":\"\",\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"}]}",
    };
    const size_t errors[] = { 1, 1, 1, 1, 1, 2, 1, 1 };
    e2e_response_t r = { 0 };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        http(&r, "POST", path, bodies[i]);
        rd_json_t *errs = expect_invalid(&r, path, errors[i]);
        if (i != 5) expect_field_error(errs, "worker", "invalid", NULL);
    }
    /* 128 bytes is the limit, and the message was never claimed before. */
    char max_worker[160];
    snprintf(max_worker, sizeof max_worker, "{\"worker\":\"%0128d\"}", 0);
    http(&r, "POST", path, max_worker);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "retry_count"), 0);
    assert_int_equal(strlen(e2e_jstr(m, "worker")), 128);
    e2e_response_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_claim_nothing_due_is_204),
        T(test_claims_on_unknown_queues_write_nothing),
        T(test_claim_is_fifo),
        T(test_claim_sets_lease),
        T(test_claim_count),
        T(test_claim_validation),
        T(test_succeed),
        T(test_fail_schedules_retry_with_backoff),
        T(test_fail_to_dead),
        T(test_fail_requires_error),
        T(test_replay),
        T(test_redrive_to_another_queue),
        T(test_redrive_by_error_past_pages_without_a_match),
        T(test_extend),
        T(test_delayed_retry_end_to_end),
        T(test_expired_lease_is_a_failure),
        T(test_history_and_worker),
        T(test_claimed_message_is_shown_as_get),
        T(test_claim_worker_validation),
    };
    int failed = cmocka_run_group_tests_name("e2e_lifecycle", tests, group_setup, group_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL " E2E_SUITE ": retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
