/* test_e2e_settle.c - end-to-end tests of build/retryd over HTTP against a real
 * redis-server: settle and claim in one call (docs/reference.md "Settle
 * and claim"): limits, calls sent together, long polls, vanished clients;
 * snooze (docs/reference.md "Snooze"): the route, the settle and batch
 * acknowledgement outcome, and what it does not count.
 *
 * The group's daemon, setup, and the helpers the e2e suites share: e2e_common.h. */

#define E2E_SUITE "test_e2e_settle"
#include "e2e_common.h"

/* ------------------------------------------------------------------------ */
/* Settle and claim in one call (docs/reference.md "Settle and claim")                                   */
/* ------------------------------------------------------------------------ */

static void test_claim_with_settle(void **state)
{
    (void)state;
    char q[64], t1[160], t2[160];
    e2e_queue_name(q, sizeof q, "settle");
    for (int i = 0; i < 6; i++) enqueue(q, e2e_fmt("{\"payload\":\"m%d\"}", i + 1));
    char path[1024];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    assert_int_equal(claim_one(q, 30, t1, sizeof t1), 1);
    assert_int_equal(claim_one(q, 30, t2, sizeof t2), 2);
    e2e_response_t r = { 0 };

    /* Succeed 1 (with its token), fail 2, one unknown id: then claim the
     * next one, with its lease, in the answer. */
    http(&r, "POST", path,
         e2e_fmt("{\"lease_seconds\":7,\"settle\":[{\"id\":1,\"lease_token\":\"%s\","
                 "\"outcome\":\"succeeded\"},{\"id\":2,\"outcome\":\"failed\",\"error\":\"smtp "
                 "down\"},{\"id\":99,\"outcome\":\"succeeded\"}]}", t1));
    static const long long ids1[] = { 1, 2, 99 };
    static const char *const st1[] = { "succeeded", "pending", "not-found" };
    rd_json_t *list = expect_settled(&r, 3, ids1, st1);
    assert_int_equal(rd_json_array_size(list), 1);
    rd_json_t *m = rd_json_array_at(list, 0);
    expect_message(m, 3, q, "processing", 0, 3);
    assert_string_equal(e2e_jstr(m, "payload"), "m3");
    expect_lease(m, 7);
    char t3[160];
    SET(t3, e2e_jstr(m, "lease_token"));

    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "succeeded");
    http(&r, "GET", message_path(q, 2, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    expect_message(m, 2, q, "pending", 1, 3);
    assert_string_equal(e2e_jstr(m, "last_error"), "smtp down");
    assert_int_equal(e2e_jtime(m, "retry_after") - e2e_jtime(m, "updated_at"), 2000);

    /* Errors per item, and count: a wrong token, a settled one, a dead
     * letter with retryable false, then three claimed (4, 5, 6). */
    http(&r, "POST", path,
         e2e_fmt("{\"count\":3,\"settle\":[{\"id\":3,\"lease_token\":\"%s-not\","
                 "\"outcome\":\"succeeded\"},{\"id\":1,\"outcome\":\"succeeded\"},"
                 "{\"id\":3,\"lease_token\":\"%s\",\"outcome\":\"failed\",\"error\":\"poison\","
                 "\"retryable\":false}]}", t3, t3));
    static const long long ids2[] = { 3, 1, 3 };
    static const char *const st2[] = { "lease-mismatch", "invalid-state", "dead" };
    list = expect_settled(&r, 3, ids2, st2);
    assert_int_equal(rd_json_array_size(list), 3);
    for (size_t i = 0; i < 3; i++) {
        m = rd_json_array_at(list, i);
        expect_message(m, (long long)i + 4, q, "processing", 0, 3);
        expect_lease(m, DEFAULT_LEASE_S);
    }
    http(&r, "GET", message_path(q, 3, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    expect_message(m, 3, q, "dead", 1, 3);
    assert_string_equal(e2e_jstr(m, "last_error"), "poison");

    /* Settlements apply when nothing is claimable: 200 with no messages,
     * never 204. retry_after_seconds overrides the backoff. */
    http(&r, "POST", path,
         "{\"settle\":[{\"id\":4,\"outcome\":\"succeeded\"},{\"id\":5,\"outcome\":\"failed\","
         "\"error\":\"later\",\"retry_after_seconds\":60}]}");
    static const long long ids3[] = { 4, 5 };
    static const char *const st3[] = { "succeeded", "pending" };
    list = expect_settled(&r, 2, ids3, st3);
    assert_int_equal(rd_json_array_size(list), 0);
    http(&r, "GET", message_path(q, 5, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jtime(m, "retry_after") - e2e_jtime(m, "updated_at"), 60000);

    /* The stats count them as succeed and fail do. */
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *totals = e2e_jget(e2e_expect_json(&r, 200), "totals");
    assert_int_equal(e2e_jint(totals, "succeeded"), 2);
    assert_int_equal(e2e_jint(totals, "failed"), 3);
    assert_int_equal(e2e_jint(totals, "dead"), 1);
    assert_int_equal(e2e_jint(totals, "claimed"), 6);

    /* Without settle the route is as it was: 204 when nothing is due. */
    http(&r, "POST", path, "{}");
    e2e_expect_no_content(&r);
    e2e_response_free(&r);
}

/* A /metrics counter of the group's daemon. */
static long long daemon_counter(const char *name)
{
    e2e_response_t r = { 0 };
    http(&r, "GET", "/metrics", NULL);
    assert_int_equal(r.status, 200);
    const char *at = strstr(r.body, e2e_fmt("\n%s ", name));
    if (at == NULL) fail_msg("/metrics has no %s", name);
    long long v = strtoll(at + strlen(name) + 2, NULL, 10);
    e2e_response_free(&r);
    return v;
}

/* Asked on another connection after requests were sent to the group's
 * daemon, an answer it gives without Redis: by then it has read them all, so
 * they wait behind a call held in Redis rather than come after it. */
static void daemon_has_read_them(void)
{
    e2e_response_t r = { 0 };
    http(&r, "GET", "/healthz", NULL);
    assert_int_equal(r.status, 200);
    e2e_response_free(&r);
}

/* Redis holds write commands (the test's requests then meet in the daemon). */
static void hold_writes(void)
{
    freeReplyObject(e2e_rcmd(g_redis, "CLIENT PAUSE 5000 WRITE"));
    g_paused = true;
}

/* Once a call is held in Redis and the group's daemon has read what was
 * sent to it, Redis runs writes again. */
static void release_held_writes(void)
{
    long long deadline = e2e_mono_ms() + 3000;
    while (!redis_has_blocked_fcall(0)) {
        if (e2e_mono_ms() > deadline) fail_msg("no call reached Redis");
        e2e_pause_ms(10);
    }
    daemon_has_read_them();
    freeReplyObject(e2e_rcmd(g_redis, "CLIENT UNPAUSE"));
    g_paused = false;
}

/* The coalescer's counters of the group's daemon, to compare before and after. */
typedef struct sharing {
    long long requests, calls;
} sharing_t;

static sharing_t sharing_now(void)
{
    return (sharing_t){ daemon_counter("retryd_settle_claim_requests_total"),
                        daemon_counter("retryd_settle_claim_calls_total") };
}

/* n requests were sent since `before`, in fewer calls than requests.
 * Returns the calls. */
static long long expect_shared(sharing_t before, long long n)
{
    sharing_t now = sharing_now();
    assert_int_equal(now.requests - before.requests, n);
    long long calls = now.calls - before.calls;
    if (calls >= n) fail_msg("%lld requests took %lld calls: none were sent together", n, calls);
    return calls;
}

/* A settle-and-claim at the limits: 100 settlements (each a failure with
 * its error and retry_after, the longest argv a call has) and a count. The
 * call must fit the store's argument vector: with the claim's nonce it was
 * one argument past it, and the daemon aborted on an assertion. */
static void test_settle_claim_at_the_limits(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "settle100");
    for (int i = 0; i < 101; i++) enqueue(q, e2e_fmt("{\"payload\":\"m%d\"}", i + 1));
    char path[1024];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    e2e_response_t r = { 0 };
    http(&r, "POST", path, "{\"count\":100}");
    rd_json_t *doc = e2e_expect_json(&r, 200);
    assert_int_equal(rd_json_array_size(e2e_jget(doc, "messages")), 100);
    rd_buf_t body = RD_BUF_INIT;
    rd_buf_append(&body, "{\"count\":1,\"settle\":[", 21);
    for (int i = 1; i <= 100; i++) {
        const char *item = e2e_fmt("%s{\"id\":%d,\"outcome\":\"failed\",\"error\":\"e%d\","
                                   "\"retryable\":true,\"retry_after_seconds\":60}",
                                   i > 1 ? "," : "", i, i);
        rd_buf_append(&body, item, strlen(item));
    }
    rd_buf_append(&body, "]}", 3);
    http(&r, "POST", path, body.data);
    rd_buf_free(&body);
    static long long ids[100];
    static const char *st[100];
    for (int i = 0; i < 100; i++) { ids[i] = i + 1; st[i] = "pending"; }
    rd_json_t *list = expect_settled(&r, 100, ids, st);
    assert_int_equal(rd_json_array_size(list), 1);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "id"), 101);
    e2e_response_free(&r);
}

/* Settle-and-claim requests for one queue that come while a call for it is
 * in flight go together in one call (docs/coalescing.md), and each gets its
 * own answer: its settlements' outcomes, at most its count of messages, its
 * worker on its leases. Redis holds writes while eight requests arrive on
 * eight connections: one call goes out, the rest wait in the queue's line;
 * the one with another worker goes in a call of its own. */
static void test_settle_claims_sent_together(void **state)
{
    (void)state;
    enum { K = 8 };
    char q[64], tokens[K][160];
    e2e_queue_name(q, sizeof q, "together");
    for (int i = 0; i < 2 * K + 1; i++) enqueue(q, e2e_fmt("{\"payload\":\"t%d\"}", i + 1));
    for (int i = 0; i < K; i++) assert_int_equal(claim_one(q, 60, tokens[i], sizeof tokens[i]), i + 1);
    sharing_t before = sharing_now();

    hold_writes();
    e2e_conn_t c[K];
    const char *path = e2e_fmt("/queues/%s/claim", q);
    char path_copy[256];
    SET(path_copy, path);
    for (int i = 0; i < K; i++) {
        char body[512];
        if (i == 5)         /* another lease's token: nothing done to it */
            SET(body, e2e_fmt("{\"settle\":[{\"id\":%d,\"lease_token\":\"%s-not\","
                              "\"outcome\":\"succeeded\"}]}", i + 1, tokens[i]));
        else if (i == 6)    /* two messages */
            SET(body, e2e_fmt("{\"count\":2,\"settle\":[{\"id\":%d,\"lease_token\":\"%s\","
                              "\"outcome\":\"succeeded\"}]}", i + 1, tokens[i]));
        else if (i == 7)    /* its own worker: a call of its own */
            SET(body, e2e_fmt("{\"worker\":\"w-7\",\"settle\":[{\"id\":%d,\"lease_token\":"
                              "\"%s\",\"outcome\":\"succeeded\"}]}", i + 1, tokens[i]));
        else
            SET(body, e2e_fmt("{\"settle\":[{\"id\":%d,\"lease_token\":\"%s\","
                              "\"outcome\":\"succeeded\"}]}", i + 1, tokens[i]));
        assert_int_equal(e2e_conn_open(&c[i], g_daemon.port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", path_copy, NULL, body, strlen(body)), 0);
    }
    release_held_writes();

    bool seen[2 * K + 2] = { false };
    long long worker_msg = 0;
    for (int i = 0; i < K; i++) {
        e2e_response_t r = { 0 };
        assert_int_equal(e2e_read_response(&c[i], &r), 0);
        const long long id = i + 1;
        const char *status = i == 5 ? "lease-mismatch" : "succeeded";
        rd_json_t *messages = expect_settled(&r, 1, &id, &status);
        size_t want = i == 6 ? 2 : 1;
        if (rd_json_array_size(messages) != want)
            fail_msg("request %d got %zu messages: %s", i, rd_json_array_size(messages), r.body);
        for (size_t j = 0; j < want; j++) {
            rd_json_t *m = rd_json_array_at(messages, j);
            long long got = e2e_jint(m, "id");
            assert_in_range(got, K + 1, 2 * K + 1);
            assert_false(seen[got]);
            seen[got] = true;
            if (i == 7) {
                worker_msg = got;
                assert_string_equal(e2e_jstr(m, "worker"), "w-7");
            } else {
                e2e_jnull(m, "worker");
            }
        }
        e2e_response_free(&r);
        e2e_conn_close(&c[i]);
    }
    e2e_response_t r = { 0 };
    http(&r, "GET", message_path(q, worker_msg, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "worker"), "w-7");
    http(&r, "GET", message_path(q, 6, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "processing");
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *totals = e2e_jget(e2e_expect_json(&r, 200), "totals");
    assert_int_equal(e2e_jint(totals, "succeeded"), K - 1);
    assert_int_equal(e2e_jint(totals, "claimed"), K + K + 1);   /* all of them */
    e2e_response_free(&r);

    assert_true(expect_shared(before, K) >= 2);   /* w-7 cannot share a call */
}

/* A request sent together with others still gets a message when one is
 * claimable (docs/reference.md "Bounded work and replies": a batch claim is cut by bytes, "always at least one
 * message"): five requests of one message each share a call whose claim the
 * library cuts at 4 MiB of payloads, four messages of 1 MB; the fifth, which
 * got none of them, still gets the sixth message, as alone it would. */
static void test_settle_claims_together_each_get_one(void **state)
{
    (void)state;
    enum { K = 6, PAYLOAD = 1000000 };
    char q[64];
    e2e_queue_name(q, sizeof q, "together-big");
    char *body = malloc(PAYLOAD + 64);
    for (int i = 0; i < K; i++) {
        int at = snprintf(body, 64, "{\"payload\":\"%d", i);
        memset(body + at, 'x', PAYLOAD);
        strcpy(body + at + PAYLOAD, "\"}");
        enqueue(q, body);
    }
    free(body);
    sharing_t before = sharing_now();

    hold_writes();
    e2e_conn_t c[K];
    char path[256];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    for (int i = 0; i < K; i++) {
        char req[128];
        SET(req, e2e_fmt("{\"settle\":[{\"id\":%d,\"outcome\":\"succeeded\"}]}", 1000 + i));
        assert_int_equal(e2e_conn_open(&c[i], g_daemon.port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", path, NULL, req, strlen(req)), 0);
    }
    release_held_writes();

    bool seen[K + 1] = { false };
    for (int i = 0; i < K; i++) {
        e2e_response_t r = { 0 };
        assert_int_equal(e2e_read_response(&c[i], &r), 0);
        const long long id = 1000 + i;
        const char *status = "not-found";
        rd_json_t *messages = expect_settled(&r, 1, &id, &status);
        if (rd_json_array_size(messages) != 1)
            fail_msg("request %d got %zu messages while one was claimable", i,
                     rd_json_array_size(messages));
        long long got = e2e_jint(rd_json_array_at(messages, 0), "id");
        assert_in_range(got, 1, K);
        assert_false(seen[got]);
        seen[got] = true;
        e2e_response_free(&r);
        e2e_conn_close(&c[i]);
    }
    expect_shared(before, K);
}

/* Plain claims (no settle, no wait) take the same way: eight of them while
 * Redis holds writes, one asking for three; each gets its own messages,
 * none twice, in fewer calls than requests; the 204 of an empty queue too. */
static void test_claims_sent_together(void **state)
{
    (void)state;
    enum { K = 8 };
    char q[64];
    e2e_queue_name(q, sizeof q, "claimtogether");
    for (int i = 0; i < K + 2; i++) enqueue(q, e2e_fmt("{\"payload\":\"c%d\"}", i + 1));
    sharing_t before = sharing_now();

    hold_writes();
    e2e_conn_t c[K];
    char path[256];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    for (int i = 0; i < K; i++) {
        const char *body = i == 3 ? "{\"count\":3}" : "{}";
        assert_int_equal(e2e_conn_open(&c[i], g_daemon.port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", path, NULL, body, strlen(body)), 0);
    }
    release_held_writes();

    bool seen[K + 3] = { false };
    int claimed = 0;
    for (int i = 0; i < K; i++) {
        e2e_response_t r = { 0 };
        assert_int_equal(e2e_read_response(&c[i], &r), 0);
        if (r.status == 204) {
            e2e_response_free(&r);
            e2e_conn_close(&c[i]);
            continue;
        }
        rd_json_t *doc = e2e_expect_json(&r, 200);
        rd_json_t *list = i == 3 ? e2e_jget(doc, "messages") : NULL;
        size_t n = list ? rd_json_array_size(list) : 1;
        assert_in_range(n, 1, i == 3 ? 3 : 1);
        for (size_t j = 0; j < n; j++) {
            rd_json_t *m = list ? rd_json_array_at(list, j) : doc;
            assert_string_equal(e2e_jstr(m, "status"), "processing");
            long long id = e2e_jint(m, "id");
            assert_in_range(id, 1, K + 2);
            assert_false(seen[id]);
            seen[id] = true;
            claimed++;
        }
        e2e_response_free(&r);
        e2e_conn_close(&c[i]);
    }
    /* Ten messages for ten asked: every request got what it asked for. */
    assert_int_equal(claimed, K + 2);
    expect_shared(before, K);

    /* Nothing left: a claim alone is still answered 204. */
    e2e_response_t r = { 0 };
    http(&r, "POST", path, "{}");
    e2e_expect_no_content(&r);
    e2e_response_free(&r);
}

/* A client that vanishes (RST) while its settle-and-claim waits in the
 * queue's line loses nothing: its settlement still applies (it was sent),
 * the message the shared call leased for it goes back (release, no failure
 * counted) and the next claim gets it; the others get theirs. */
static void test_vanished_client_in_line_loses_nothing(void **state)
{
    (void)state;
    enum { K = 3 };
    char q[64], tokens[K][160];
    e2e_queue_name(q, sizeof q, "together-gone");
    for (int i = 0; i < 2 * K; i++) enqueue(q, e2e_fmt("{\"payload\":\"g%d\"}", i + 1));
    for (int i = 0; i < K; i++) assert_int_equal(claim_one(q, 60, tokens[i], sizeof tokens[i]), i + 1);

    hold_writes();
    e2e_conn_t c[K];
    char path[256];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    for (int i = 0; i < K; i++) {
        char body[512];
        SET(body, e2e_fmt("{\"settle\":[{\"id\":%d,\"lease_token\":\"%s\","
                          "\"outcome\":\"succeeded\"}]}", i + 1, tokens[i]));
        assert_int_equal(e2e_conn_open(&c[i], g_daemon.port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", path, NULL, body, strlen(body)), 0);
    }
    daemon_has_read_them();
    struct linger reset = { 1, 0 };
    assert_int_equal(setsockopt(c[1].fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset), 0);
    e2e_conn_close(&c[1]);   /* RST while its request waits */
    release_held_writes();

    bool seen[2 * K + 1] = { false };
    for (int i = 0; i < K; i += 2) {
        e2e_response_t r = { 0 };
        assert_int_equal(e2e_read_response(&c[i], &r), 0);
        const long long id = i + 1;
        const char *status = "succeeded";
        rd_json_t *messages = expect_settled(&r, 1, &id, &status);
        assert_int_equal(rd_json_array_size(messages), 1);
        long long got = e2e_jint(rd_json_array_at(messages, 0), "id");
        assert_in_range(got, K + 1, 2 * K);
        seen[got] = true;
        e2e_response_free(&r);
        e2e_conn_close(&c[i]);
    }
    /* The vanished client's settlement stands; its lease is handed back. */
    e2e_response_t r = { 0 };
    http(&r, "GET", message_path(q, 2, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "succeeded");
    long long deadline = e2e_mono_ms() + 5000;
    for (;;) {
        redisReply *x = e2e_rcmd(g_redis, "ZCARD %s:{%s}:3:processing", g_prefix, q);
        long long leased = x->integer;
        freeReplyObject(x);
        if (leased == 2) break;
        if (e2e_mono_ms() > deadline) fail_msg("%lld leases, want 2: the vanished one's was kept", leased);
        e2e_pause_ms(10);
    }
    long long left = 0;
    for (long long id = K + 1; id <= 2 * K; id++) if (!seen[id]) left = id;
    assert_int_equal(claim_one(q, 60, NULL, 0), left);
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *totals = e2e_jget(e2e_expect_json(&r, 200), "totals");
    assert_int_equal(e2e_jint(totals, "succeeded"), K);
    assert_int_equal(e2e_jint(totals, "failed"), 0);
    e2e_response_free(&r);
}

static void test_claim_settle_validation(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "settleval");
    enqueue(q, "{\"payload\":\"x\"}");
    enqueue(q, "{\"payload\":\"y\"}");
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    char path[128];
    snprintf(path, sizeof path, "/queues/%s/claim", q);
    e2e_response_t r = { 0 };
    const struct { const char *body, *field, *code, *message; } cases[] = {
        { "{\"settle\":[]}", "settle", "invalid", NULL },
        { "{\"settle\":{\"id\":1}}", "settle", "invalid", NULL },
        { "{\"settle\":\"1\"}", "settle", "invalid", NULL },
        { "{\"settle\":[1]}", "settle[0]", "invalid", NULL },
        { "{\"settle\":[{\"outcome\":\"succeeded\"}]}", "settle[0].id", "required", NULL },
        { "{\"settle\":[{\"id\":0,\"outcome\":\"succeeded\"}]}", "settle[0].id", "invalid", NULL },
        { "{\"settle\":[{\"id\":\"1\",\"outcome\":\"succeeded\"}]}", "settle[0].id", "invalid",
          NULL },
        { "{\"settle\":[{\"id\":1}]}", "settle[0].outcome", "required", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"done\"}]}", "settle[0].outcome", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":true}]}", "settle[0].outcome", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\"}]}", "settle[0].error", "required",
          "error is required." },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":42}]}", "settle[0].error",
          "invalid", "error must be a string." },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"\xff oops\"}]}",
          "settle[0].error", "invalid", "error must be valid UTF-8." },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"x\\udc00y\"}]}",
          "settle[0].error", "invalid", "error must be valid UTF-8." },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"a\\u0000b\"}]}",
          "settle[0].error", "invalid", "error must not contain U+0000." },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e\",\"retryable\":\"no\"}]}",
          "settle[0].retryable", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e\","
          "\"retry_after_seconds\":-1}]}", "settle[0].retry_after_seconds", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e\","
          "\"retry_after_seconds\":2592001}]}", "settle[0].retry_after_seconds", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"lease_token\":\"\",\"outcome\":\"succeeded\"}]}",
          "settle[0].lease_token", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"lease_token\":7,\"outcome\":\"succeeded\"}]}",
          "settle[0].lease_token", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"},{\"id\":2,\"outcome\":\"x\"}]}",
          "settle[1].outcome", "invalid", NULL },
        { "{\"count\":0,\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"}]}", "count", "invalid",
          NULL },
        { "{\"wait_seconds\":31,\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"}]}",
          "wait_seconds", "invalid", NULL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http(&r, "POST", path, cases[i].body);
        if (r.status != 422) fail_msg("case %zu: %d %s", i, r.status, r.body);
        expect_field_error(expect_invalid(&r, path, 1), cases[i].field, cases[i].code,
                           cases[i].message);
    }
    /* 101 items; and several bad fields, each named. */
    char big[8192] = "{\"settle\":[";
    for (int i = 0; i < 101; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s{\"id\":%d,\"outcome\":\"succeeded\"}",
                 i ? "," : "", i + 1);
    snprintf(big + strlen(big), sizeof big - strlen(big), "]}");
    http(&r, "POST", path, big);
    expect_field_error(expect_invalid(&r, path, 1), "settle", "invalid", NULL);
    http(&r, "POST", path,
         "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"retryable\":1},{\"id\":-2}]}");
    rd_json_t *errors = expect_invalid(&r, path, 4);
    expect_field_error(errors, "settle[0].error", "required", NULL);
    expect_field_error(errors, "settle[0].retryable", "invalid", NULL);
    expect_field_error(errors, "settle[1].id", "invalid", NULL);
    expect_field_error(errors, "settle[1].outcome", "required", NULL);
    http(&r, "POST", path, "{\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"}]");
    e2e_expect_problem(&r, 400, "malformed-request", path);

    /* Nothing was settled and nothing claimed by any of them. */
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "processing", 0, 3);
    char held[160];
    assert_string_equal(e2e_message_field(g_redis, e2e_fmt("%s:{%s}", g_prefix, q), 1,
                                          "lease_token", held, sizeof held), token);
    http(&r, "GET", message_path(q, 2, NULL), NULL);
    expect_message(e2e_expect_json(&r, 200), 2, q, "pending", 0, 3);
    /* A success takes no more fields than the succeed route: error and the
     * failure options are ignored there. */
    http(&r, "POST", path,
         "{\"settle\":[{\"id\":1,\"outcome\":\"succeeded\",\"error\":7,\"retryable\":\"x\"}]}");
    static const long long ids[] = { 1 };
    static const char *const st[] = { "succeeded" };
    assert_int_equal(rd_json_array_size(expect_settled(&r, 1, ids, st)), 1);
    e2e_response_free(&r);
}

/* With wait_seconds the settlements apply at once; then the claim waits as
 * a long-poll claim does, and answers with what arrived, or with none. */
static void test_claim_settle_long_poll(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "settlewait");
    enqueue(q, "{\"payload\":\"first\"}");
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    char path[128];
    snprintf(path, sizeof path, "/queues/%s/claim", q);
    static const long long ids[] = { 1 };
    static const char *const st[] = { "succeeded" };

    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_daemon.port), 0);
    const char *body = e2e_fmt("{\"wait_seconds\":10,\"lease_seconds\":9,\"settle\":[{\"id\":1,"
                               "\"lease_token\":\"%s\",\"outcome\":\"succeeded\"}]}", token);
    long long t0 = e2e_mono_ms();
    assert_int_equal(e2e_send_request(&c, "POST", path, NULL, body, strlen(body)), 0);
    /* Settled while the claim waits. */
    for (;;) {
        char status[32];
        bool done = strcmp(e2e_message_field(g_redis, e2e_fmt("%s:{%s}", g_prefix, q), 1,
                                             "status", status, sizeof status), "succeeded") == 0;
        if (done) break;
        if (e2e_mono_ms() - t0 > 5000) fail_msg("message 1 was not settled within 5 s");
        e2e_pause_ms(5);
    }
    enqueue(q, "{\"payload\":\"second\"}");
    e2e_response_t r = { 0 };
    assert_int_equal(e2e_read_response(&c, &r), 0);
    assert_true(e2e_mono_ms() - t0 < 5000);
    rd_json_t *list = expect_settled(&r, 1, ids, st);
    assert_int_equal(rd_json_array_size(list), 1);
    rd_json_t *m = rd_json_array_at(list, 0);
    expect_message(m, 2, q, "processing", 0, 3);
    expect_lease(m, 9);

    /* Nothing arrives: the answer comes when the wait is over, 200 with no
     * messages, and the settlement stands. */
    SET(token, e2e_jstr(m, "lease_token"));
    e2e_response_free(&r);
    body = e2e_fmt("{\"wait_seconds\":1,\"settle\":[{\"id\":2,\"lease_token\":\"%s\","
                   "\"outcome\":\"failed\",\"error\":\"e\",\"retry_after_seconds\":60}]}", token);
    t0 = e2e_mono_ms();
    assert_int_equal(e2e_request(&c, "POST", path, NULL, body, strlen(body), &r), 0);
    assert_true(e2e_mono_ms() - t0 >= 900);
    static const long long ids2[] = { 2 };
    static const char *const st2[] = { "pending" };
    assert_int_equal(rd_json_array_size(expect_settled(&r, 1, ids2, st2)), 0);
    e2e_response_free(&r);
    e2e_conn_close(&c);
}

/* ------------------------------------------------------------------------ */
/* Snooze (docs/reference.md "Snooze")                                      */
/* ------------------------------------------------------------------------ */

/* The snooze mark at history[i]: {snoozed_at, until} and nothing else;
 * returns until (ms). */
static long long expect_snooze_mark(const rd_json_t *m, size_t i, long long delay_ms)
{
    rd_json_t *h = e2e_jget(m, "history");
    if (rd_json_array_size(h) <= i) fail_msg("history has no entry %zu", i);
    rd_json_t *mark = rd_json_array_at(h, i);
    long long at = e2e_jtime(mark, "snoozed_at"), until = e2e_jtime(mark, "until");
    assert_int_equal(until - at, delay_ms);
    assert_null(rd_json_get(mark, "attempt"));
    assert_null(rd_json_get(mark, "error"));
    return until;
}

/* A /metrics sample of one queue, -1 when absent. */
static long long queue_metric(const char *family, const char *q)
{
    e2e_response_t r = { 0 };
    http(&r, "GET", "/metrics", NULL);
    assert_int_equal(r.status, 200);
    const char *at = strstr(r.body, e2e_fmt("\n%s{queue=\"%s\"} ", family, q));
    long long v = at ? strtoll(strchr(at, '}') + 2, NULL, 10) : -1;
    e2e_response_free(&r);
    return v;
}

/* POST .../snooze: the message goes back to pending until now +
 * delay_seconds, its attempts and last error as they were; lease rules
 * (404, 409) as succeed's; 422 on delay_seconds; counted in stats and
 * /metrics. */
static void test_snooze_route(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "snooze");
    long long id = enqueue(q, "{\"payload\":\"later\"}");
    e2e_response_t r = { 0 };
    const char *path = message_path(q, id, "snooze");
    char spath[256];
    SET(spath, path);

    http(&r, "POST", spath, "{\"delay_seconds\":60}");
    rd_json_t *p = e2e_expect_problem(&r, 409, "invalid-state", spath);
    assert_non_null(strstr(e2e_jstr(p, "detail"), "is pending; snooze needs a processing message"));
    http(&r, "POST", message_path(q, 999, "snooze"), "{\"delay_seconds\":60}");
    e2e_expect_problem(&r, 404, "not-found", NULL);

    assert_int_equal(claim_one(q, 30, token, sizeof token), id);
    http(&r, "POST", spath, e2e_fmt("{\"delay_seconds\":60,\"lease_token\":\"%s-not\"}", token));
    e2e_expect_problem(&r, 409, "lease-mismatch", spath);
    const struct { const char *body, *field, *code; } bad[] = {
        { "", "delay_seconds", "required" },
        { "{}", "delay_seconds", "required" },
        { "{\"delay_seconds\":null}", "delay_seconds", "required" },
        { "{\"delay_seconds\":-1}", "delay_seconds", "invalid" },
        { "{\"delay_seconds\":2592001}", "delay_seconds", "invalid" },
        { "{\"delay_seconds\":\"60\"}", "delay_seconds", "invalid" },
        { "{\"delay_seconds\":1.5}", "delay_seconds", "invalid" },
        { "{\"delay_seconds\":1,\"lease_token\":7}", "lease_token", "invalid" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "POST", spath, bad[i].body);
        if (r.status != 422) fail_msg("case %zu: %d %s", i, r.status, r.body);
        expect_field_error(expect_invalid(&r, spath, 1), bad[i].field, bad[i].code, NULL);
    }
    http(&r, "POST", spath, "[60]");
    e2e_expect_problem(&r, 400, "malformed-request", spath);

    /* Still processing under its lease after all that. */
    http(&r, "GET", message_path(q, id, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "processing");

    http(&r, "POST", spath, e2e_fmt("{\"delay_seconds\":60,\"lease_token\":\"%s\"}", token));
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, id, q, "pending", 0, 3);
    e2e_jnull(m, "last_error");
    e2e_jnull(m, "lease_expires_at");
    assert_null(rd_json_get(m, "lease_token"));
    assert_int_equal(e2e_jtime(m, "retry_after") - e2e_jtime(m, "updated_at"), 60000);
    assert_int_equal(expect_snooze_mark(m, 0, 60000), e2e_jtime(m, "retry_after"));
    assert_int_equal(e2e_jtime(rd_json_array_at(e2e_jget(m, "history"), 0), "snoozed_at"),
                     e2e_jtime(m, "updated_at"));
    assert_int_equal(e2e_jint(m, "history_dropped"), 0);
    /* GET shows the same; it is not claimable before its time. */
    http(&r, "GET", message_path(q, id, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "pending");
    expect_snooze_mark(m, 0, 60000);
    assert_int_equal(claim_one(q, 30, NULL, 0), 0);
    http(&r, "POST", spath, "{\"delay_seconds\":0}");
    e2e_expect_problem(&r, 409, "invalid-state", spath);

    /* delay 0: the next claim takes it. */
    long long fresh = enqueue(q, "{\"payload\":\"fresh\"}");
    freeReplyObject(e2e_rcmd(g_redis, e2e_fmt("ZADD %s:{%s}:3:scheduled XX 0 %lld", g_prefix, q,
                                              id)));
    assert_int_equal(claim_one(q, 30, NULL, 0), id);
    http(&r, "POST", spath, "{\"delay_seconds\":0}");
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jtime(m, "retry_after"), e2e_jtime(m, "updated_at"));
    expect_snooze_mark(m, 1, 0);
    assert_int_equal(claim_one(q, 30, NULL, 0), id);
    assert_int_equal(claim_one(q, 30, NULL, 0), fresh);

    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *totals = e2e_jget(e2e_expect_json(&r, 200), "totals");
    assert_int_equal(e2e_jint(totals, "snoozed"), 2);
    assert_int_equal(e2e_jint(totals, "failed"), 0);
    assert_int_equal(e2e_jint(totals, "claimed"), 4);
    e2e_response_free(&r);
    /* /metrics reads a snapshot at most 5 s old: poll until it shows them. */
    long long deadline = e2e_mono_ms() + 8000;
    while (queue_metric("retryd_snoozed_total", q) != 2) {
        if (e2e_mono_ms() > deadline)
            fail_msg("/metrics: retryd_snoozed_total{queue=\"%s\"} is %lld, not 2", q,
                     queue_metric("retryd_snoozed_total", q));
        e2e_pause_ms(100);
    }
}

/* Claim's settle items and the batch acknowledgement's items take
 * "outcome": "snoozed" with delay_seconds (422 on the item's field), status
 * pending; a snooze due now comes back in the same answer's messages. */
static void test_snoozed_settle_and_ack_items(void **state)
{
    (void)state;
    char q[64], t1[160];
    e2e_queue_name(q, sizeof q, "snoozeitems");
    for (int i = 0; i < 5; i++) enqueue(q, e2e_fmt("{\"payload\":\"m%d\"}", i + 1));
    assert_int_equal(claim_one(q, 30, t1, sizeof t1), 1);
    assert_int_equal(claim_one(q, 30, NULL, 0), 2);
    assert_int_equal(claim_one(q, 30, NULL, 0), 3);
    char path[256], ack[256];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    SET(ack, e2e_fmt("/queues/%s/succeed", q));
    e2e_response_t r = { 0 };

    const struct { const char *where, *body, *field, *code; } bad[] = {
        { path, "{\"settle\":[{\"id\":1,\"outcome\":\"snoozed\"}]}", "settle[0].delay_seconds",
          "required" },
        { path, "{\"settle\":[{\"id\":2,\"outcome\":\"succeeded\"},{\"id\":1,\"outcome\":\"snoozed\","
                "\"delay_seconds\":2592001}]}", "settle[1].delay_seconds", "invalid" },
        { path, "{\"settle\":[{\"id\":1,\"outcome\":\"snoozed\",\"delay_seconds\":-5}]}",
          "settle[0].delay_seconds", "invalid" },
        { ack, "{\"messages\":[{\"id\":1,\"outcome\":\"snoozed\"}]}", "messages[0].delay_seconds",
          "required" },
        { ack, "{\"messages\":[{\"id\":2},{\"id\":1,\"outcome\":\"snoozed\",\"delay_seconds\":\"1\"}]}",
          "messages[1].delay_seconds", "invalid" },
        { ack, "{\"messages\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e\"}]}",
          "messages[0].outcome", "invalid" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "POST", bad[i].where, bad[i].body);
        if (r.status != 422) fail_msg("case %zu: %d %s", i, r.status, r.body);
        expect_field_error(expect_invalid(&r, bad[i].where, 1), bad[i].field, bad[i].code, NULL);
    }
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    assert_int_equal(e2e_jint(e2e_jget(e2e_expect_json(&r, 200), "totals"), "snoozed"), 0);

    /* Settle: succeed 2, snooze 1 (its token) for a minute, snooze 3 for
     * now, fail an unknown one; claim 2: 3 first (due now), then 4. */
    http(&r, "POST", path,
         e2e_fmt("{\"count\":2,\"settle\":[{\"id\":2,\"outcome\":\"succeeded\"},{\"id\":1,"
                 "\"lease_token\":\"%s\",\"outcome\":\"snoozed\",\"delay_seconds\":60},"
                 "{\"id\":3,\"outcome\":\"snoozed\",\"delay_seconds\":0},"
                 "{\"id\":99,\"outcome\":\"snoozed\",\"delay_seconds\":0}]}", t1));
    static const long long ids[] = { 2, 1, 3, 99 };
    static const char *const st[] = { "succeeded", "pending", "pending", "not-found" };
    rd_json_t *list = expect_settled(&r, 4, ids, st);
    assert_int_equal(rd_json_array_size(list), 2);
    rd_json_t *m = rd_json_array_at(list, 0);
    expect_message(m, 3, q, "processing", 0, 3);
    expect_snooze_mark(m, 0, 0);
    expect_message(rd_json_array_at(list, 1), 4, q, "processing", 0, 3);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "pending", 0, 3);
    assert_int_equal(e2e_jtime(m, "retry_after") - e2e_jtime(m, "updated_at"), 60000);
    expect_snooze_mark(m, 0, 60000);

    /* Batch acknowledgement: succeed 4, snooze 3 for 30 s; the settled
     * message 2 and the pending message 1 answer as before. */
    http(&r, "POST", ack,
         "{\"messages\":[{\"id\":4},{\"id\":3,\"outcome\":\"snoozed\",\"delay_seconds\":30},"
         "{\"id\":2,\"outcome\":\"snoozed\",\"delay_seconds\":30},{\"id\":1,\"outcome\":"
         "\"succeeded\"}]}");
    rd_json_t *results = e2e_jget(e2e_expect_json(&r, 200), "results");
    static const char *const want[] = { "succeeded", "pending", "invalid-state", "invalid-state" };
    static const long long want_ids[] = { 4, 3, 2, 1 };
    assert_int_equal(rd_json_array_size(results), 4);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(e2e_jint(rd_json_array_at(results, i), "id"), want_ids[i]);
        assert_string_equal(e2e_jstr(rd_json_array_at(results, i), "status"), want[i]);
    }
    http(&r, "GET", message_path(q, 3, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    expect_message(m, 3, q, "pending", 0, 3);
    assert_int_equal(e2e_jtime(m, "retry_after") - e2e_jtime(m, "updated_at"), 30000);
    expect_snooze_mark(m, 1, 30000);
    http(&r, "GET", message_path(q, 4, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "succeeded");

    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *totals = e2e_jget(e2e_expect_json(&r, 200), "totals");
    assert_int_equal(e2e_jint(totals, "snoozed"), 3);
    assert_int_equal(e2e_jint(totals, "succeeded"), 2);
    assert_int_equal(e2e_jint(totals, "failed"), 0);
    e2e_response_free(&r);
}

/* Snooze does not count an attempt (issue 21 "Tests"): a message with
 * max_retries 1 snoozed three times (by the route, a settle item and a
 * batch acknowledgement) is dead only after the one failure that follows,
 * with retry_count 1, and its history shows the three marks and that failure. */
static void test_snooze_does_not_count_an_attempt(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "snoozecount");
    long long id = enqueue(q, "{\"payload\":\"once\",\"max_retries\":1}");
    e2e_response_t r = { 0 };

    /* 1: the route. */
    assert_int_equal(claim_one(q, 30, token, sizeof token), id);
    http(&r, "POST", message_path(q, id, "snooze"),
         e2e_fmt("{\"delay_seconds\":0,\"lease_token\":\"%s\"}", token));
    expect_message(e2e_expect_json(&r, 200), id, q, "pending", 0, 1);

    /* 2: a settle item; due now, it is claimed back in the same answer. */
    assert_int_equal(claim_one(q, 30, token, sizeof token), id);
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q),
         e2e_fmt("{\"settle\":[{\"id\":%lld,\"lease_token\":\"%s\",\"outcome\":\"snoozed\","
                 "\"delay_seconds\":0}]}", id, token));
    const long long settle_ids[] = { id };
    static const char *const st[] = { "pending" };
    rd_json_t *list = expect_settled(&r, 1, settle_ids, st);
    assert_int_equal(rd_json_array_size(list), 1);
    expect_message(rd_json_array_at(list, 0), id, q, "processing", 0, 1);
    SET(token, e2e_jstr(rd_json_array_at(list, 0), "lease_token"));

    /* 3: a batch acknowledgement item. */
    http(&r, "POST", e2e_fmt("/queues/%s/succeed", q),
         e2e_fmt("{\"messages\":[{\"id\":%lld,\"lease_token\":\"%s\",\"outcome\":\"snoozed\","
                 "\"delay_seconds\":0}]}", id, token));
    rd_json_t *res = rd_json_array_at(e2e_jget(e2e_expect_json(&r, 200), "results"), 0);
    assert_string_equal(e2e_jstr(res, "status"), "pending");
    http(&r, "GET", message_path(q, id, NULL), NULL);
    expect_message(e2e_expect_json(&r, 200), id, q, "pending", 0, 1);

    /* The one failure ends it: max_retries 1 was never spent by the snoozes. */
    assert_int_equal(claim_one(q, 30, token, sizeof token), id);
    http(&r, "POST", message_path(q, id, "fail"),
         e2e_fmt("{\"error\":\"the one failure\",\"lease_token\":\"%s\"}", token));
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, id, q, "dead", 1, 1);
    assert_string_equal(e2e_jstr(m, "last_error"), "the one failure");
    rd_json_t *h = e2e_jget(m, "history");
    assert_int_equal(rd_json_array_size(h), 4);
    for (size_t i = 0; i < 3; i++) expect_snooze_mark(m, i, 0);
    rd_json_t *f = rd_json_array_at(h, 3);
    assert_int_equal(e2e_jint(f, "attempt"), 1);
    assert_string_equal(e2e_jstr(f, "error"), "the one failure");

    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *totals = e2e_jget(e2e_expect_json(&r, 200), "totals");
    assert_int_equal(e2e_jint(totals, "snoozed"), 3);
    assert_int_equal(e2e_jint(totals, "failed"), 1);
    assert_int_equal(e2e_jint(totals, "retried"), 0);
    assert_int_equal(e2e_jint(totals, "dead"), 1);
    e2e_response_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_claim_with_settle),
        T(test_settle_claim_at_the_limits),
        T(test_settle_claims_sent_together),
        T(test_settle_claims_together_each_get_one),
        T(test_claims_sent_together),
        T(test_vanished_client_in_line_loses_nothing),
        T(test_claim_settle_validation),
        T(test_claim_settle_long_poll),
        T(test_snooze_route),
        T(test_snoozed_settle_and_ack_items),
        T(test_snooze_does_not_count_an_attempt),
    };
    int failed = cmocka_run_group_tests_name("e2e_settle", tests, group_setup, group_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL " E2E_SUITE ": retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
