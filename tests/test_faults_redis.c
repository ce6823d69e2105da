/* test_faults_redis.c - fault injection against the real build/retryd: a Redis that is paused (SIGSTOP, DEBUG SLEEP),
 * restarted, flushed, has its link or its pub/sub link killed, or is killed -9
 * under load with appendfsync always; the durability warnings at startup.
 *
 * The group setup, daemons and the helpers the fault suites share:
 * faults_common.h. */

#define FAULTS_SUITE "test_faults_redis"
#include "faults_common.h"

/* ========================================================================= */
/* 3. Redis faults                                                           */
/* ========================================================================= */

/* Enqueues payload on g_conn and records what came back: 201, or a 503 of
 * either kind (asserted), within bound_ms. Returns the outcome; *took_ms. */
static enum outcome enqueue_logged(int port, const char *q, const char *payload, sent_log_t *log,
                                   int bound_ms, long long *took_ms)
{
    sent_t *s = sent_add(log);
    SET(s->payload, payload);
    e2e_response_t r = { 0 };
    long long t0 = e2e_mono_ms();
    size_t len;
    char *body = e2e_json_with_string("payload", payload, &len);
    e2e_http_on(&g_conn, port, &r, "POST", e2e_fmt("/queues/%s/messages", q), NULL, body, len);
    rd_free(body);
    long long took = e2e_mono_ms() - t0;
    if (took_ms) *took_ms = took;
    if (took > bound_ms)
        fail_msg("enqueue \"%s\" took %lld ms (bound %d)", payload, took, bound_ms);
    if (r.status == 201) {
        s->outcome = OUT_CREATED;
        s->id = e2e_jint(e2e_expect_json(&r, 201), "id");
    } else {
        s->outcome = expect_503(&r) ? OUT_UNKNOWN : OUT_UNAVAILABLE;
    }
    e2e_response_free(&r);
    return s->outcome;
}

/* Enqueues until one is 201 (bounded); returns how long it took. */
static long long enqueue_until_created(int port, const char *q, const char *tag, sent_log_t *log,
                                       int bound_ms)
{
    long long t0 = e2e_mono_ms();
    for (int i = 1;; i++) {
        if (enqueue_logged(port, q, e2e_fmt("%s %d", tag, i), log, UNAVAILABLE_BOUND_MS, NULL) ==
            OUT_CREATED)
            return e2e_mono_ms() - t0;
        if (e2e_mono_ms() - t0 > bound_ms)
            fail_msg("%s: still 503 after %d ms", tag, bound_ms);
        e2e_pause_ms(25);
    }
}

/* A long-poll claim on another thread: its status and when it returned. */
typedef struct long_poll {
    pthread_t thread;
    int port;
    int wait_seconds;             /* 0: 5 */
    char path[128];
    int status;
    long long id;
    long long started_at, returned_at;
} long_poll_t;

static void *long_poll_main(void *arg)
{
    long_poll_t *lp = arg;
    e2e_conn_t c = { .fd = -1 };
    e2e_response_t r = { 0 };
    char body[96];
    snprintf(body, sizeof body, "{\"wait_seconds\":%d,\"lease_seconds\":30}",
             lp->wait_seconds ? lp->wait_seconds : 5);
    lp->status = e2e_try_request(&c, lp->port, &r, "POST", lp->path, body, strlen(body)) == 0
                     ? r.status : -1;
    if (r.json) rd_json_integer(rd_json_get(r.json, "id"), &lp->id);
    lp->returned_at = e2e_mono_ms();
    e2e_response_free(&r);
    e2e_conn_close(&c);
    return NULL;
}

/* SIGSTOP: the command in flight is answered outcome-unknown within the
 * timeout, later ones backend-unavailable at once; SIGCONT: served again;
 * no enqueue is duplicated, none that got 201 is lost. */
static void test_redis_paused_sigstop(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "paused";
    assert_int_equal(start_retryd(&g_dmn[0], "paused.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    sent_log_t log = { 0 };
    e2e_response_t r = { 0 };
    for (int i = 1; i <= 3; i++)
        assert_int_equal(enqueue_logged(port, "p", e2e_fmt("before %d", i), &log, 1000, NULL),
                         OUT_CREATED);
    http(port, &r, "POST", "/queues/p/claim", "{\"lease_seconds\":60}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), 1);

    /* A long-poll claim parked when Redis stops must still be answered. lp
     * is static: if the test fails before the join, the thread outlives the
     * frame. */
    static long_poll_t lp;
    memset(&lp, 0, sizeof lp);
    lp.port = port;
    lp.wait_seconds = 2;
    snprintf(lp.path, sizeof lp.path, "/queues/p-idle/claim");
    lp.started_at = e2e_mono_ms();
    assert_int_equal(pthread_create(&lp.thread, NULL, long_poll_main, &lp), 0);
    long long deadline = e2e_mono_ms() + 3000;
    while (!wake_subscribed(g_admin, prefix, "p-idle")) {
        if (e2e_mono_ms() > deadline) {
            pthread_join(lp.thread, NULL);
            fail_msg("the long-poll never parked");
        }
        e2e_pause_ms(20);
    }

    assert_int_equal(fx_redis_pause(&g_srv), 0);
    long long paused_at = e2e_mono_ms(), first_ms, claim_ms, worst_ms = 0;
    /* Sent to a hanging Redis: the link is dropped at the timeout. */
    enum outcome first = enqueue_logged(port, "p", "paused 0", &log, UNAVAILABLE_BOUND_MS,
                                        &first_ms);
    if (first != OUT_UNKNOWN)
        fail_msg("the enqueue in flight when Redis hung: outcome %d, expected outcome-unknown",
                 (int)first);
    long long t0 = e2e_mono_ms();
    http(port, &r, "POST", "/queues/p/claim", NULL);
    claim_ms = e2e_mono_ms() - t0;
    expect_503(&r);
    assert_true(claim_ms <= UNAVAILABLE_BOUND_MS);
    /* Pipelined while the link is down: answered, in order. */
    {
        e2e_conn_t pc;
        size_t l1, l2, l3;
        static const char pbody[] = "{\"payload\":\"pipelined\"}";
        char *a = e2e_format_request("POST", "/queues/p/messages", NULL, pbody,
                                     sizeof pbody - 1, &l1);
        char *b = e2e_format_request("GET", "/healthz", NULL, NULL, 0, &l2);
        char *c3 = e2e_format_request("POST", "/queues/p/claim", NULL, NULL, 0, &l3);
        char all[4096];
        memcpy(all, a, l1);
        memcpy(all + l1, b, l2);
        memcpy(all + l1 + l2, c3, l3);
        free(a);
        free(b);
        free(c3);
        assert_int_equal(e2e_conn_open(&pc, port), 0);
        assert_int_equal(e2e_send_all(pc.fd, all, l1 + l2 + l3), 0);
        sent_t *s = sent_add(&log);
        SET(s->payload, "pipelined");
        assert_int_equal(read_fresh(&pc, &r), 0);
        s->outcome = expect_503(&r) ? OUT_UNKNOWN : OUT_UNAVAILABLE;
        assert_int_equal(read_fresh(&pc, &r), 0);
        e2e_expect_json(&r, 200);
        assert_int_equal(read_fresh(&pc, &r), 0);
        expect_503(&r);
        e2e_conn_close(&pc);
    }
    /* Keep asking while Redis stays stopped (reconnects hang too). */
    for (int i = 1; e2e_mono_ms() - paused_at < 3500; i++) {
        long long took;
        enqueue_logged(port, "p", e2e_fmt("paused %d", i), &log, UNAVAILABLE_BOUND_MS, &took);
        if (took > worst_ms) worst_ms = took;
        http(port, &r, "GET", "/readyz", NULL);
        assert_int_equal(r.status, 503);
        e2e_pause_ms(100);
    }
    assert_true(e2e_daemon_alive(&g_dmn[0]));

    /* The parked claim was answered 503 (Redis is away at its deadline), not
     * left hanging and not told "nothing due". */
    pthread_join(lp.thread, NULL);
    long long lp_ms = lp.returned_at - lp.started_at;
    if (lp.status != 503)
        fail_msg("the long-poll parked when Redis stopped answered %d", lp.status);
    if (lp_ms > 2000 + UNAVAILABLE_BOUND_MS)
        fail_msg("the long-poll (wait_seconds 2) took %lld ms", lp_ms);

    assert_int_equal(fx_redis_resume(&g_srv), 0);
    long long recovered_ms = enqueue_until_created(port, "p", "resumed", &log, RECOVERY_BOUND_MS);
    http(port, &r, "GET", "/readyz", NULL);
    e2e_expect_json(&r, 200);
    printf("# measured SIGSTOP (--redis-timeout-ms 1000): in-flight enqueue -> 503 "
           "outcome-unknown after %lld ms; claim -> 503 after %lld ms; later requests 503 within "
           "%lld ms; a parked long-poll (wait 2 s) answered %d after %lld ms; after SIGCONT 201 "
           "again after %lld ms\n", first_ms, claim_ms, worst_ms, lp.status, lp_ms,
           recovered_ms);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);

    size_t count;
    stored_t *m = load_messages(g_admin, prefix, "p", &count);
    expect_enqueues_accounted(&log, m, count, "SIGSTOP");
    const stored_t *claimed = find_id(m, count, 1);
    assert_non_null(claimed);
    assert_string_equal(claimed->status, "processing");
    expect_indexes_consistent(g_admin, prefix, "p", m, count);
    stored_free(m, count);
    free(log.items);
}

/* Settle-and-claim requests of one queue wait in its line behind a call in
 * flight when Redis stops (docs/coalescing.md): the held call is answered
 * outcome-unknown when the link drops at the timeout, every request waiting
 * behind it 503 too, none left hanging; after SIGCONT the queue's line works
 * again (it was not left behind half-used). */
static void test_settle_claim_line_when_link_drops(void **state)
{
    (void)state;
    enum { K = 5 };
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    assert_int_equal(start_retryd(&g_dmn[0], "lostline.log", e2e_redis_url(g_srv.port),
                                  "lostline", true, "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    /* Two: the call that was out may yet run when Redis goes on. */
    for (int i = 0; i < 2; i++) {
        http(port, &r, "POST", "/queues/ll/messages", "{\"payload\":\"m\"}");
        e2e_expect_json(&r, 201);
    }

    assert_int_equal(fx_redis_pause(&g_srv), 0);
    e2e_conn_t c[K];
    static const char body[] = "{\"settle\":[{\"id\":99,\"outcome\":\"succeeded\"}]}";
    for (int i = 0; i < K; i++) {
        assert_int_equal(e2e_conn_open(&c[i], port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", "/queues/ll/claim", NULL, body,
                                          sizeof body - 1), 0);
    }
    long long t0 = e2e_mono_ms();
    int unknown = 0;
    for (int i = 0; i < K; i++) {
        e2e_response_t a = { 0 };
        if (e2e_read_response(&c[i], &a) != 0) fail_msg("request %d got no response", i);
        unknown += expect_503(&a);
        e2e_response_free(&a);
        e2e_conn_close(&c[i]);
    }
    long long took = e2e_mono_ms() - t0;
    if (took > UNAVAILABLE_BOUND_MS) fail_msg("the line took %lld ms to be answered", took);
    assert_int_equal(unknown, 1);   /* the call that was out */

    assert_int_equal(fx_redis_resume(&g_srv), 0);
    long long deadline = e2e_mono_ms() + RECOVERY_BOUND_MS;
    for (;;) {
        http(port, &r, "POST", "/queues/ll/claim", body);
        if (r.status == 200) break;
        expect_503(&r);
        if (e2e_mono_ms() > deadline) fail_msg("no settle-and-claim served after SIGCONT");
        e2e_pause_ms(50);
    }
    rd_json_t *m = e2e_jget(r.json, "messages");
    assert_int_equal(rd_json_array_size(m), 1);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* The command of each request below is in flight when Redis stops (SIGSTOP
 * for longer than --redis-timeout-ms): a read has no outcome to be unsure
 * of, so GET, a listing and stats answer backend-unavailable; a write keeps
 * outcome-unknown. Both with Retry-After. */
static void test_read_in_flight_when_link_drops(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    const char *prefix = "lostread";
    assert_int_equal(start_retryd(&g_dmn[0], "lostread.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    http(port, &r, "POST", "/queues/lr/messages", "{\"payload\":\"read me\"}");
    e2e_expect_json(&r, 201);
    struct step {
        const char *method, *path, *body, *slug;
    } steps[] = {
        { "GET", "/queues/lr/messages/1", NULL, "backend-unavailable" },
        { "GET", "/queues/lr/messages?limit=10", NULL, "backend-unavailable" },
        { "GET", "/queues/lr/stats", NULL, "backend-unavailable" },
        { "POST", "/queues/lr/messages", "{\"payload\":\"write me\"}", "outcome-unknown" },
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        /* The link is up, so the command is sent, and then Redis hangs. */
        if (e2e_daemon_wait_status(&g_dmn[0], "/readyz", 200, RECOVERY_BOUND_MS) != 0)
            fail_msg("%s %s: the link did not come back", steps[i].method, steps[i].path);
        e2e_conn_close(&g_conn);
        assert_int_equal(fx_redis_pause(&g_srv), 0);
        long long t0 = e2e_mono_ms();
        http(port, &r, steps[i].method, steps[i].path, steps[i].body);
        long long took = e2e_mono_ms() - t0;
        assert_int_equal(fx_redis_resume(&g_srv), 0);
        char slug[64];
        slug_of(&r, slug, sizeof slug);
        printf("# measured %s %s in flight when the link dropped: %d %s after %lld ms\n",
               steps[i].method, steps[i].path, r.status, slug, took);
        /* It was sent: the answer came when the watchdog dropped the link. */
        if (took < REDIS_TIMEOUT_MS * 9 / 10)
            fail_msg("%s %s answered after %lld ms: it was not in flight", steps[i].method,
                     steps[i].path, took);
        bool unknown = expect_503(&r);
        if (unknown != (strcmp(steps[i].slug, "outcome-unknown") == 0))
            fail_msg("%s %s in flight when the link dropped: %s, expected %s", steps[i].method,
                     steps[i].path, slug, steps[i].slug);
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* A claim in flight when Redis stops is answered outcome-unknown, and Redis
 * does run it once it continues: the message is leased, and nobody holds
 * the lease. The timer learns of a lease only from the claim's reply (its
 * hint), so the daemon owes the queue a timer visit instead: the lease
 * expires on time rather than after the registry sweep's next full cycle
 * (RD_SWEEP_CYCLE_MS, 60 s). */
static void test_lost_claim_lease_still_expires(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "losthint";
    /* --series off: the series' nudge (a tick within a minute of any write,
     * docs/series.md) would bring the timer here without any hint. */
    assert_int_equal(start_retryd(&g_dmn[0], "losthint.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "1000", "--series", "off", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    http(port, &r, "POST", "/queues/lh/messages", "{\"payload\":\"lease me\"}");
    e2e_expect_json(&r, 201);
    e2e_conn_close(&g_conn);
    /* Wait until the sweep has passed over lh and its next pass is far off,
     * and lh has no timer entry: from then on only a hint brings the timer. */
    long long deadline = e2e_mono_ms() + RECOVERY_BOUND_MS;
    while (rq_int(g_admin, "ZSCORE {%s:queues}:timers lh", prefix) != 0 ||
           rq_int(g_admin, "HGET {%s:queues}:sweep next_at", prefix) - e2e_wall_ms() < 30000) {
        if (e2e_mono_ms() > deadline) fail_msg("the sweep did not pass over the queue");
        e2e_pause_ms(50);
    }

    assert_int_equal(fx_redis_pause(&g_srv), 0);
    http(port, &r, "POST", "/queues/lh/claim", "{\"lease_seconds\":1}");
    assert_int_equal(fx_redis_resume(&g_srv), 0);
    if (!expect_503(&r)) fail_msg("the claim in flight was not answered outcome-unknown");
    e2e_conn_close(&g_conn);

    /* Redis ran the claim when it continued (the daemon may hand the message
     * back at once since test_lost_claims_are_handed_back; either way it
     * must be pending again in time). */
    deadline = e2e_mono_ms() + RECOVERY_BOUND_MS;
    while (rq_int(g_admin, "HGET %s:{lh}:stats claimed", prefix) != 1) {
        if (e2e_mono_ms() > deadline) fail_msg("Redis did not run the claim that was in flight");
        e2e_pause_ms(20);
    }
    long long leased_at = e2e_mono_ms();
    /* The 1 s lease runs out and the timer puts the message back. */
    if (e2e_daemon_wait_status(&g_dmn[0], "/readyz", 200, RECOVERY_BOUND_MS) != 0)
        fail_msg("the link did not come back");
    deadline = leased_at + 8000;
    for (;;) {
        http(port, &r, "GET", "/queues/lh/messages/1", NULL);
        const char *status = e2e_jstr(e2e_expect_json(&r, 200), "status");
        if (strcmp(status, "pending") == 0) break;
        if (e2e_mono_ms() > deadline)
            fail_msg("the lease of the lost claim did not expire within 8 s: still %s", status);
        e2e_pause_ms(100);
    }
    printf("# measured a lease made by a claim whose reply was lost: back pending %lld ms "
           "after Redis ran it (lease 1000 ms)\n", e2e_mono_ms() - leased_at);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* Sends one request with Redis stopped (SIGSTOP): the call it makes is in
 * flight when the link's timeout drops the link, so it is answered 503
 * outcome-unknown; then SIGCONT, and Redis runs the call it had read. Waits
 * until the daemon's link is ready again. */
static void request_answer_lost(int port, const char *path, const char *body)
{
    e2e_response_t r = { 0 };
    assert_int_equal(fx_redis_pause(&g_srv), 0);
    http(port, &r, "POST", path, body);
    bool unknown = expect_503(&r);
    assert_int_equal(fx_redis_resume(&g_srv), 0);
    if (!unknown) fail_msg("%s %s: the call in flight was not answered outcome-unknown: %s", path, body, r.body);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    if (e2e_daemon_wait_status(&g_dmn[0], "/readyz", 200, RECOVERY_BOUND_MS) != 0)
        fail_msg("the link did not come back");
}

/* Waits (10 s at most) until the queue's stats count `released` messages;
 * returns how long it took. */
static long long wait_released(const char *prefix, const char *q, long long released)
{
    long long t0 = e2e_mono_ms();
    for (;;) {
        long long now = rq_int(g_admin, "HGET %s:{%s}:stats released", prefix, q);
        if (now == released) return e2e_mono_ms() - t0;
        if (now > released) fail_msg("%lld released, expected %lld", now, released);
        if (e2e_mono_ms() - t0 > 10000)
            fail_msg("10 s after Redis continued, %lld messages released, expected %lld "
                     "(processing: %lld)", now, released,
                     rq_int(g_admin, "ZCARD %s:{%s}:3:processing", prefix, q));
        e2e_pause_ms(20);
    }
}

/* A claim whose answer is lost (Redis stopped past --redis-timeout-ms, the
 * client answered 503 outcome-unknown) used to strand its messages:
 * processing under a lease nobody holds, a failure at its expiry, dead
 * without ever reaching a worker with max_retries 1. Now the daemon tags
 * each claim with a nonce and, once Redis answers again, hands back what
 * that claim leased: pending, counted released, not failed. A plain claim,
 * a batch, a settle-and-claim (its settlement stands) and a long-poll. */
static void test_lost_claims_are_handed_back(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "lostc";
    assert_int_equal(start_retryd(&g_dmn[0], "lostc.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    for (int i = 1; i <= 5; i++) {
        http(port, &r, "POST", "/queues/lc/messages", "{\"payload\":\"job\",\"max_retries\":1}");
        assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), i);
    }
    e2e_conn_close(&g_conn);

    /* A plain claim: message 1 (a 3 s lease, which would kill it at expiry). */
    request_answer_lost(port, "/queues/lc/claim", "{\"lease_seconds\":3}");
    long long back_ms = wait_released(prefix, "lc", 1);
    expect_untouched_pending(port, "lc", 1);
    /* It reaches a worker: claimed next, with its whole retry budget. */
    http(port, &r, "POST", "/queues/lc/claim", "{\"lease_seconds\":30}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_int_equal(e2e_jint(m, "retry_count"), 0);
    http(port, &r, "POST", "/queues/lc/messages/1/succeed",
         e2e_fmt("{\"lease_token\":\"%s\"}", e2e_jstr(m, "lease_token")));
    e2e_expect_json(&r, 200);
    e2e_conn_close(&g_conn);

    /* A batch: messages 2 and 3. */
    request_answer_lost(port, "/queues/lc/claim", "{\"count\":2,\"lease_seconds\":3}");
    wait_released(prefix, "lc", 3);
    expect_untouched_pending(port, "lc", 2);
    expect_untouched_pending(port, "lc", 3);

    /* A settle-and-claim: the settlement of 2 stands (Redis ran it), the 3 it
     * leased comes back. */
    http(port, &r, "POST", "/queues/lc/claim", "{\"lease_seconds\":30}");
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 2);
    char body[256];
    snprintf(body, sizeof body, "{\"lease_seconds\":3,\"settle\":[{\"id\":2,\"lease_token\":\"%s\","
             "\"outcome\":\"succeeded\"}]}", e2e_jstr(m, "lease_token"));
    e2e_conn_close(&g_conn);
    request_answer_lost(port, "/queues/lc/claim", body);
    wait_released(prefix, "lc", 4);
    char status[32];
    assert_string_equal(e2e_message_field(g_admin, "lostc:{lc}", 2, "status", status,
                                          sizeof status), "succeeded");
    expect_untouched_pending(port, "lc", 3);

    /* A long-poll whose first claim finds message 4. A long-poll subscribes
     * to the queue's wake channel before it claims, so one served before
     * Redis stops (it takes 3, then settled) leaves the subscription up. */
    http(port, &r, "POST", "/queues/lc/claim", "{\"wait_seconds\":1,\"lease_seconds\":30}");
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 3);
    http(port, &r, "POST", "/queues/lc/messages/3/succeed",
         e2e_fmt("{\"lease_token\":\"%s\"}", e2e_jstr(m, "lease_token")));
    e2e_expect_json(&r, 200);
    e2e_conn_close(&g_conn);
    request_answer_lost(port, "/queues/lc/claim", "{\"wait_seconds\":5,\"lease_seconds\":3}");
    wait_released(prefix, "lc", 5);
    expect_untouched_pending(port, "lc", 4);

    /* Past every lost lease's deadline: nothing failed, nothing dead, and a
     * worker gets 4 and 5 with their whole budget. */
    long long past = e2e_mono_ms() + 3500;
    while (e2e_mono_ms() < past) {
        assert_int_equal(rq_int(g_admin, "ZCARD lostc:{lc}:3:processing"), 0);
        e2e_pause_ms(100);
    }
    assert_int_equal(rq_int(g_admin, "HGET lostc:{lc}:stats failed"), 0);
    assert_int_equal(rq_int(g_admin, "HGET lostc:{lc}:stats dead"), 0);
    http(port, &r, "POST", "/queues/lc/claim", "{\"count\":10}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 2);
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(e2e_jint(rd_json_array_at(list, i), "retry_count"), 0);
    printf("# measured a lost claim's message back pending %lld ms after the link was ready again "
           "(--redis-timeout-ms 1000)\n", back_ms);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* DEBUG SLEEP 3: the same bounded 503 as a stopped process. The runner's
 * Redis refuses DEBUG (enable-debug-command defaults to no since Redis 7),
 * so this runs on a private one that allows it. */
static void test_redis_debug_sleep(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", "--enable-debug-command", "local",
                                         NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "sleepy";
    assert_int_equal(start_retryd(&g_dmn[0], "sleep.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    sent_log_t log = { 0 };
    assert_int_equal(enqueue_logged(port, "s", "awake", &log, 1000, NULL), OUT_CREATED);

    /* Send DEBUG SLEEP without waiting for its reply, then make sure Redis
     * is asleep: a PING on another connection gets no answer in 300 ms. */
    redisContext *sleeper = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(sleeper);
    assert_int_equal(redisAppendCommand(sleeper, "DEBUG SLEEP 3"), REDIS_OK);
    int done = 0;
    while (!done) assert_int_equal(redisBufferWrite(sleeper, &done), REDIS_OK);
    long long deadline = e2e_mono_ms() + 2000;
    while (e2e_redis_pong(g_srv.port, 300)) {
        if (e2e_mono_ms() > deadline) fail_msg("Redis still answers PING after DEBUG SLEEP 3");
    }

    long long first_ms, claim_ms;
    enum outcome first = enqueue_logged(port, "s", "asleep 0", &log, UNAVAILABLE_BOUND_MS,
                                        &first_ms);
    assert_int_equal(first, OUT_UNKNOWN);
    e2e_response_t r = { 0 };
    long long t0 = e2e_mono_ms();
    http(port, &r, "POST", "/queues/s/claim", NULL);
    claim_ms = e2e_mono_ms() - t0;
    expect_503(&r);
    assert_true(claim_ms <= UNAVAILABLE_BOUND_MS);
    enqueue_logged(port, "s", "asleep 1", &log, UNAVAILABLE_BOUND_MS, NULL);

    /* The sleep ends; DEBUG SLEEP answers OK; retryd serves again. */
    redisReply *x = NULL;
    assert_int_equal(redisGetReply(sleeper, (void **)&x), REDIS_OK);
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    redisFree(sleeper);
    long long recovered_ms = enqueue_until_created(port, "s", "woken", &log, RECOVERY_BOUND_MS);
    printf("# measured DEBUG SLEEP 3 (--redis-timeout-ms 1000): in-flight enqueue -> 503 "
           "outcome-unknown after %lld ms; claim -> 503 after %lld ms; 201 again %lld ms after "
           "the sleep ended\n", first_ms, claim_ms, recovered_ms);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);

    size_t count;
    stored_t *m = load_messages(g_admin, prefix, "s", &count);
    expect_enqueues_accounted(&log, m, count, "DEBUG SLEEP");
    expect_indexes_consistent(g_admin, prefix, "s", m, count);
    stored_free(m, count);
    free(log.items);
}

/* Redis stopped and started again without persistence, then FLUSHALL. */
static void test_redis_restarted_and_flushed(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    const char *prefix = "restart";
    assert_int_equal(start_retryd(&g_dmn[0], "restart.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    http(port, &r, "POST", "/queues/r/messages", "{\"payload\":\"before\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);

    assert_int_equal(fx_redis_stop(&g_srv, SIGTERM, 5000), 0);
    long long down_at = e2e_mono_ms(), unavailable_ms = -1;
    while (unavailable_ms < 0) {
        http(port, &r, "POST", "/queues/r/messages", "{\"payload\":\"while down\"}");
        if (!expect_503(&r)) unavailable_ms = e2e_mono_ms() - down_at;
        else if (e2e_mono_ms() - down_at > 1000)
            fail_msg("no 503 backend-unavailable within 1 s of Redis going away");
    }
    assert_true(unavailable_ms <= 1000);
    /* Stay down for 3 s (the reconnect backoff grows meanwhile): every
     * answer is a prompt 503 and the process lives. */
    while (e2e_mono_ms() - down_at < 3000) {
        long long t0 = e2e_mono_ms();
        http(port, &r, "POST", "/queues/r/messages", "{\"payload\":\"while down\"}");
        e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
        assert_true(e2e_mono_ms() - t0 < 500);
        http(port, &r, "GET", "/readyz", NULL);
        assert_int_equal(r.status, 503);
        e2e_pause_ms(100);
    }
    assert_true(e2e_daemon_alive(&g_dmn[0]));

    assert_int_equal(fx_redis_restart(&g_srv), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    long long up_at = e2e_mono_ms(), recovered_ms = -1;
    for (;;) {
        http(port, &r, "POST", "/queues/r/messages", "{\"payload\":\"after restart\"}");
        if (r.status == 201) break;
        expect_503(&r);
        if (e2e_mono_ms() - up_at > RECOVERY_BOUND_MS)
            fail_msg("still 503 %d ms after Redis came back", RECOVERY_BOUND_MS);
        e2e_pause_ms(25);
    }
    recovered_ms = e2e_mono_ms() - up_at;
    /* A fresh Redis without persistence: the data is gone, ids start at 1,
     * the library was loaded again without a restart of retryd. */
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    redisReply *x = e2e_rcmd(g_admin, "FUNCTION LIST LIBRARYNAME " RD_LIBRARY_NAME);
    assert_int_equal(x->elements, 1);
    freeReplyObject(x);
    char field[64];
    assert_string_equal(e2e_message_field(g_admin, e2e_fmt("%s:{r}", prefix), 1, "payload", field,
                                          sizeof field), "after restart");

    /* The notification link came back too: a long-poll waiter subscribes
     * and is woken by an enqueue. */
    static long_poll_t lp;   /* outlives the frame if the test fails before the join */
    memset(&lp, 0, sizeof lp);
    lp.port = port;
    snprintf(lp.path, sizeof lp.path, "/queues/lp/claim");
    assert_int_equal(pthread_create(&lp.thread, NULL, long_poll_main, &lp), 0);
    long long deadline = e2e_mono_ms() + 3000;
    while (!wake_subscribed(g_admin, prefix, "lp")) {
        if (e2e_mono_ms() > deadline) {
            pthread_join(lp.thread, NULL);
            fail_msg("no subscription to the wake channel 3 s after the restart");
        }
        e2e_pause_ms(20);
    }
    long long sent_at = e2e_mono_ms();
    http(port, &r, "POST", "/queues/lp/messages", "{\"payload\":\"wake up\"}");
    e2e_expect_json(&r, 201);
    pthread_join(lp.thread, NULL);
    assert_int_equal(lp.status, 200);
    assert_int_equal(lp.id, 1);
    assert_true(lp.returned_at - sent_at < 1000);

    /* FLUSHALL on the live server: the next enqueue still works. Its id is 1
     * again: the per-queue sequence went with the data, which is what
     * FLUSHALL means (ids are unique only while the data lives). */
    x = e2e_rcmd(g_admin, "FLUSHALL");
    freeReplyObject(x);
    http(port, &r, "POST", "/queues/r/messages", "{\"payload\":\"after flushall\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    assert_string_equal(e2e_message_field(g_admin, e2e_fmt("%s:{r}", prefix), 1, "payload", field,
                                          sizeof field), "after flushall");
    http(port, &r, "POST", "/queues/r/claim", NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "after flushall");
    printf("# measured Redis restart: 503 backend-unavailable %lld ms after it went away; down "
           "3 s; 201 again %lld ms after it was back (library reloaded)\n", unavailable_ms,
           recovered_ms);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* CLIENT KILL of the notification link (the pub/sub connection) while a
 * long-poll is parked: the waiter still gets the message enqueued right
 * after (the timer's safety net), and the link comes back and subscribes. */
static void test_notification_link_killed(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "notify";
    /* The waiter parks on A; messages come in through B, so only Redis
     * (the wake channel, or A's timer) can tell A about them. */
    assert_int_equal(start_retryd(&g_dmn[0], "notify-a.log", e2e_redis_url(g_srv.port), prefix,
                                  true, NULL), 0);
    assert_int_equal(start_retryd(&g_dmn[1], "notify-b.log", e2e_redis_url(g_srv.port), prefix,
                                  true, NULL), 0);
    int port = g_dmn[0].port, port_b = g_dmn[1].port;
    e2e_response_t r = { 0 };
    long long woken_ms[2];
    for (int round = 0; round < 2; round++) {
        static long_poll_t lp;   /* outlives the frame if the test fails before the join */
        memset(&lp, 0, sizeof lp);
        lp.port = port;
        lp.wait_seconds = 5;
        snprintf(lp.path, sizeof lp.path, "/queues/nq/claim");
        lp.started_at = e2e_mono_ms();
        assert_int_equal(pthread_create(&lp.thread, NULL, long_poll_main, &lp), 0);
        long long deadline = e2e_mono_ms() + 3000;
        while (!wake_subscribed(g_admin, prefix, "nq")) {
            if (e2e_mono_ms() > deadline) {
                pthread_join(lp.thread, NULL);
                fail_msg("round %d: the long-poll never subscribed", round);
            }
            e2e_pause_ms(20);
        }
        if (round == 0) {
            redisReply *x = e2e_rcmd(g_admin, "CLIENT KILL TYPE pubsub");
            long long killed = x->type == REDIS_REPLY_INTEGER ? x->integer : 0;
            freeReplyObject(x);
            if (killed < 1) {
                pthread_join(lp.thread, NULL);
                fail_msg("no pub/sub client to kill");
            }
        }
        long long sent_at = e2e_mono_ms();
        http(port_b, &r, "POST", "/queues/nq/messages",
             e2e_fmt("{\"payload\":\"round %d\"}", round));
        long long id = e2e_jint(e2e_expect_json(&r, 201), "id");
        pthread_join(lp.thread, NULL);
        woken_ms[round] = lp.returned_at - sent_at;
        if (lp.status != 200 || lp.id != id)
            fail_msg("round %d: the parked claim answered %d (id %lld), expected 200 with %lld",
                     round, lp.status, lp.id, id);
        if (woken_ms[round] > 1000)
            fail_msg("round %d: the parked claim got its message %lld ms after the enqueue",
                     round, woken_ms[round]);
    }
    printf("# measured pub/sub link killed: parked claim on A got the message enqueued through "
           "B %lld ms after the enqueue; after the link came back, %lld ms\n", woken_ms[0],
           woken_ms[1]);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
    stop_retryd(&g_dmn[1]);
    size_t count;
    stored_t *m = load_messages(g_admin, prefix, "nq", &count);
    assert_int_equal(count, 2);
    assert_string_equal(m[0].status, "processing");
    assert_string_equal(m[1].status, "processing");
    expect_indexes_consistent(g_admin, prefix, "nq", m, count);
    stored_free(m, count);
}

/* ========================================================================= */
/* 4. Durability: kill -9 Redis under load, appendfsync always               */
/* ========================================================================= */

static int sum_503(loader_t *w)
{
    int n = 0;
    for (int i = 0; i < LOADERS; i++) n += atomic_load(&w[i].failed503);
    return n;
}

static void test_kill9_redis_under_load_loses_nothing(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "yes", "--appendfsync", "always", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    const char *prefix = "durable";
    assert_int_equal(start_retryd(&g_dmn[0], "kill9.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;

    static atomic_bool stop;
    atomic_store(&stop, false);
    loader_t w[LOADERS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < LOADERS; i++) {
        w[i].idx = i;
        w[i].port = port;
        w[i].q = "load";
        w[i].stop = &stop;
        atomic_init(&w[i].created, 0);
        atomic_init(&w[i].failed503, 0);
        assert_int_equal(pthread_create(&w[i].thread, NULL, loader_main, &w[i]), 0);
    }
    /* From here on a failure must first stop and join the loaders. */
    const char *problem = NULL;
    long long t_start = e2e_mono_ms(), killed_at = 0, recovered_ms = -1;
    int created_before = 0, created_at_restart = 0;
    while (e2e_mono_ms() - t_start < 1000 && problem == NULL) e2e_pause_ms(10);
    created_before = sum_created(w);
    if (created_before < 20) problem = "fewer than 20 enqueues in the first second of load";

    if (problem == NULL) {
        if (fx_redis_stop(&g_srv, SIGKILL, 5000) != 0) problem = "kill -9 of redis-server failed";
        killed_at = e2e_mono_ms();
    }
    /* The load goes on against no Redis: 503s. */
    int seen503 = sum_503(w);
    while (problem == NULL && sum_503(w) < seen503 + 20) {
        if (e2e_mono_ms() - killed_at > 3000) problem = "no 503s within 3 s of the kill";
        e2e_pause_ms(10);
    }
    if (problem == NULL && fx_redis_restart(&g_srv) != 0)
        problem = "redis-server did not come back on its AOF";
    long long restarted_at = e2e_mono_ms();
    created_at_restart = sum_created(w);
    while (problem == NULL) {
        bool all = true;
        for (int i = 0; i < LOADERS; i++)
            if (atomic_load(&w[i].created) == 0) all = false;
        if (all && sum_created(w) >= created_at_restart + 4 * LOADERS) break;
        if (e2e_mono_ms() - restarted_at > 10000) problem = "no 201s within 10 s of the restart";
        e2e_pause_ms(10);
    }
    if (problem == NULL) recovered_ms = e2e_mono_ms() - restarted_at;
    /* A little more load on the recovered Redis. */
    long long more = e2e_mono_ms();
    while (problem == NULL && e2e_mono_ms() - more < 300) e2e_pause_ms(10);
    atomic_store(&stop, true);
    for (int i = 0; i < LOADERS; i++) pthread_join(w[i].thread, NULL);

    sent_log_t all = { 0 };
    size_t acked = 0;
    for (int i = 0; i < LOADERS; i++) {
        for (size_t j = 0; j < w[i].log.n; j++) *sent_add(&all) = w[i].log.items[j];
        acked += w[i].nacked;
    }
    char errors[1024] = "";
    for (int i = 0; i < LOADERS; i++)
        if (w[i].error[0])
            snprintf(errors + strlen(errors), sizeof errors - strlen(errors), " [%d] %s", i,
                     w[i].error);
    if (problem) fail_msg("%s (loader errors:%s)", problem, errors[0] ? errors : " none");
    if (errors[0]) fail_msg("loader errors:%s", errors);
    stop_retryd(&g_dmn[0]);

    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    size_t count;
    stored_t *m = load_messages(g_admin, prefix, "load", &count);
    expect_enqueues_accounted(&all, m, count, "kill -9 redis (appendfsync always)");
    /* An acknowledged success is durable too. */
    for (int i = 0; i < LOADERS; i++)
        for (size_t j = 0; j < w[i].nacked; j++) {
            const stored_t *x = find_id(m, count, w[i].acked[j]);
            if (x == NULL || strcmp(x->status, "succeeded") != 0)
                fail_msg("message %lld got 200 on succeed but Redis has it %s", w[i].acked[j],
                         x ? x->status : "missing");
        }
    expect_indexes_consistent(g_admin, prefix, "load", m, count);
    printf("# measured kill -9 redis: %d x 201 before the kill, %zu successes acknowledged "
           "and found succeeded; 201 again %lld ms after redis-server answered PING again\n",
           created_before, acked, recovered_ms);
    stored_free(m, count);
    free(all.items);
    for (int i = 0; i < LOADERS; i++) {
        free(w[i].log.items);
        free(w[i].acked);
    }
}

/* ========================================================================= */
/* Durability settings checked at startup                                    */
/* ========================================================================= */

/* Starts retryd against the private Redis with its log in <tmp>/<log>, makes
 * one enqueue (its reply comes after the CONFIG replies on the same link),
 * stops it and returns the log (caller frees). */
static char *startup_log(const char *log)
{
    e2e_response_t r = { 0 };
    if (start_retryd(&g_dmn[0], log, e2e_redis_url(g_srv.port), "dur", true, NULL) != 0)
        fail_msg("retryd did not start");
    http(g_dmn[0].port, &r, "POST", "/queues/d/messages", "{\"payload\":\"x\"}");
    e2e_expect_json(&r, 201);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
    char *text = fx_read_file(tmp_path(log));
    if (text == NULL) fail_msg("no log");
    return text;
}

static void config_set(const char *name, const char *value)
{
    redisReply *x = e2e_rcmd(g_admin, "CONFIG SET %s %s", name, value);
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
}

static void test_durability_warnings_at_startup(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);

    char *text = startup_log("no-aof.log");
    bool warned = strstr(text, "durability:") && strstr(text, "appendonly");
    free(text);
    if (!warned) fail_msg("no durability warning about appendonly no");

    config_set("appendonly", "yes");
    config_set("appendfsync", "everysec");
    config_set("maxmemory-policy", "noeviction");
    text = startup_log("aof.log");
    char *line = strstr(text, "durability:");
    char found[256] = "";
    if (line) snprintf(found, sizeof found, "%.*s", (int)strcspn(line, "\n"), line);
    free(text);
    if (found[0]) fail_msg("warning with appendonly yes + noeviction: %s", found);

    config_set("maxmemory-policy", "allkeys-lru");
    text = startup_log("lru.log");
    warned = strstr(text, "durability: maxmemory-policy is allkeys-lru") != NULL;
    bool aof_warned = strstr(text, "appendonly no") != NULL;
    free(text);
    assert_true(warned);
    assert_false(aof_warned);

    config_set("maxmemory-policy", "noeviction");
    config_set("appendfsync", "no");
    text = startup_log("fsync-no.log");
    warned = strstr(text, "durability: appendfsync no") != NULL;
    free(text);
    assert_true(warned);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_redis_paused_sigstop),
        T(test_read_in_flight_when_link_drops),
        T(test_settle_claim_line_when_link_drops),
    T(test_lost_claim_lease_still_expires),
        T(test_lost_claims_are_handed_back),
        T(test_redis_debug_sleep),
        T(test_redis_restarted_and_flushed),
        T(test_notification_link_killed),
        T(test_kill9_redis_under_load_loses_nothing),
        T(test_durability_warnings_at_startup),
    };
    return cmocka_run_group_tests_name("faults_redis", tests, group_setup, group_teardown);
}
