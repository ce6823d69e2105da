/* test_multi.c - end-to-end tests of several retryd instances sharing one
 * Redis (docs/reference.md "Scale"): long-poll wake-ups across instances, waiter order and
 * disconnects, batch claim and batch acknowledgement under concurrency,
 * idempotent enqueue from many clients at once, delayed delivery, idle
 * queues (2000 of them cost Redis nothing per tick; a due retry, an expired
 * lease, GET /queues paging, /metrics, leaving the registry, a failed
 * registration; docs/design.md "Timers and the registry"), shutdown with
 * a parked waiter (docs/long-poll.md), and fairness groups across instances
 * (per-group caps, strict order per group, wake-ups by a group's capacity
 * or token; docs/fairness.md).
 *
 * Needs RETRYD_TEST_REDIS_PORT and RETRYD_BIN (scripts/test.sh sets both).
 * The group forks two daemons, A and B, on free ports with the same prefix
 * ("multi<pid>") and --tick-ms 100; the last test starts a third, C. Each
 * test uses a queue of its own. Worker threads never call cmocka: they
 * record what they saw and the main thread asserts after joining them.
 * Latencies are printed on stdout ("test_multi: ...") for the record. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>

#include <hiredis/hiredis.h>

#include "e2e_support.h"
#include "retryd/metrics.h"
#include "retryd/promoter.h"

enum {
    READY_TIMEOUT_MS = 10000,
    TICK_MS = 100,
    LONG_POLL_IO_S = 30,          /* receive timeout for parked claims */
    WAKE_RUNS = 20,               /* long-poll repetitions per test */
    WAKE_LIMIT_MS = 500,          /* asserted bound on a wake-up */
};

static const char *g_bin;
static int g_redis_port;
static char g_prefix[64];
static e2e_daemon_t g_a, g_b;     /* the group's two instances */
static e2e_daemon_t g_c;          /* test 10's own instance */
static redisContext *g_redis;

/* Keep-alive connections of the main thread, one per port. */
static e2e_conn_t g_conns[3];

/* ------------------------------------------------------------------------ */
/* Small strings                                                            */
/* ------------------------------------------------------------------------ */

/* "<prefix>:{q}:<suffix>". The suite's queue names (e2e_queue_name) are only
 * letters, digits and '-', so their Redis keys need no escaping. */
static const char *qkey(const char *q, const char *suffix)
{
    return e2e_fmt("%s:{%s}:%s", g_prefix, q, suffix);
}

/* ------------------------------------------------------------------------ */
/* Daemons and Redis                                                        */
/* ------------------------------------------------------------------------ */

/* Starts retryd with the group's Redis and prefix, --tick-ms TICK_MS and log
 * level warn, and waits (bounded) for /readyz 200. */
static int start_daemon(e2e_daemon_t *d)
{
    e2e_flags_t f;
    e2e_flags(&f, "--redis", e2e_redis_url(g_redis_port), g_prefix, TICK_MS, "warn", NULL);
    return e2e_daemon_start(d, g_bin, f.argv, false, true, READY_TIMEOUT_MS, "test_multi");
}

static long long rint_cmd(const char *format, const char *key)
{
    redisReply *r = e2e_rcmd(g_redis, format, key);
    if (r->type != REDIS_REPLY_INTEGER) fail_msg("redis: %s %s: not an integer", format, key);
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* Prints a hash, or a reply of the library (FCALL_RO get ...), to stderr
 * (for failure reports). */
static void dump_reply(const char *label, const char *key, redisReply *x)
{
    fprintf(stderr, "test_multi: %s %s:", label, key);
    for (size_t i = 0; x && x->type == REDIS_REPLY_ARRAY && i < x->elements; i++)
        if (x->element[i]->type == REDIS_REPLY_ARRAY)
            dump_reply("", "", x->element[i]);
        else
            fprintf(stderr, "%s%s", i % 2 ? "=" : " ", x->element[i]->str);
    fprintf(stderr, "\n");
}

static void dump_hash(const char *label, const char *key)
{
    redisReply *x = redisCommand(g_redis, "HGETALL %s", key);
    dump_reply(label, key, x);
    if (x) freeReplyObject(x);
}

/* Message id of queue q as the library's get answers it. */
static void dump_message(const char *q, long long id)
{
    redisReply *x = redisCommand(g_redis, "FCALL_RO %s 2 %s:{%s} %s:{%s}:m:%lld %lld",
                                 RD_FUNCTION("get"), g_prefix, q, g_prefix, q, id, id);
    dump_reply("message", q, x);
    if (x) freeReplyObject(x);
}

/* The status of message id of queue q, as the library's get answers it. */
static const char *message_status(const char *q, long long id)
{
    static char status[32];
    return e2e_message_field(g_redis, e2e_fmt("%s:{%s}", g_prefix, q), id, "status", status,
                             sizeof status);
}

/* Reports (once) a group daemon that exited by itself, with its status. */
static void check_still_running(e2e_daemon_t *d, const char *name)
{
    int wstatus;
    if (!e2e_daemon_exited(d, &wstatus)) return;
    if (WIFEXITED(wstatus))
        fprintf(stderr, "test_multi: retryd %s exited by itself with status %d\n", name,
                WEXITSTATUS(wstatus));
    else
        fprintf(stderr, "test_multi: retryd %s was killed by signal %d\n", name,
                WTERMSIG(wstatus));
}

static int group_setup(void **state)
{
    (void)state;
    rd_alloc_init();
    if (e2e_suite_env("test_multi", 10, &g_bin, &g_redis_port, &g_redis) != 0) return -1;
    for (size_t i = 0; i < 3; i++) g_conns[i].fd = -1;
    snprintf(g_prefix, sizeof g_prefix, "multi%ld", (long)getpid());
    if (start_daemon(&g_a) != 0) return -1;
    if (start_daemon(&g_b) != 0) {
        e2e_daemon_stop(&g_a, SIGKILL, E2E_STOP_TIMEOUT_MS);
        return -1;
    }
    return 0;
}

static void close_conns(void)
{
    for (size_t i = 0; i < 3; i++) e2e_conn_close(&g_conns[i]);
}

/* Both instances must stop cleanly on SIGTERM: exit 0 within 5 s. */
static int group_teardown(void **state)
{
    (void)state;
    close_conns();
    int sa = e2e_daemon_stop(&g_a, SIGTERM, E2E_STOP_TIMEOUT_MS);
    int sb = e2e_daemon_stop(&g_b, SIGTERM, E2E_STOP_TIMEOUT_MS);
    if (g_redis) redisFree(g_redis);
    return e2e_pair_stopped("test_multi", sa, sb);
}

static int test_setup(void **state)
{
    (void)state;
    close_conns();
    check_still_running(&g_a, "A");
    check_still_running(&g_b, "B");
    return 0;
}

static int test_teardown(void **state)
{
    (void)state;
    close_conns();
    if (g_c.pid > 0) e2e_daemon_stop(&g_c, SIGKILL, E2E_STOP_TIMEOUT_MS);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Requests from the main thread                                            */
/* ------------------------------------------------------------------------ */

/* One request on the main thread's keep-alive connection to port; fails the
 * test unless a complete response came. */
static void http_to(int port, e2e_response_t *r, const char *method, const char *path,
                    const char *body)
{
    e2e_http_via(g_conns, 3, port, r, method, path, body);
}

/* A problem with this status and type whose status member agrees (title
 * and detail are not checked here). */
static rd_json_t *expect_problem(const e2e_response_t *r, int status, const char *slug)
{
    e2e_expect_problem_type(r, status, slug);
    assert_int_equal(e2e_jint(r->json, "status"), status);
    return r->json;
}

/* A 422 whose errors name field (when field is not NULL). */
static void expect_invalid_field(const e2e_response_t *r, const char *field)
{
    e2e_expect_errors_name(r, expect_problem(r, 422, "validation-failed"), field);
}

static void expect_no_content(const e2e_response_t *r)
{
    if (r->status != 204) fail_msg("expected 204, got %d: %s", r->status, r->body);
    assert_int_equal(r->body_len, 0);
}

/* Enqueues body to q through port; asserts 201 and returns the id. */
static long long enqueue_to(int port, const char *q, const char *body)
{
    e2e_response_t r = { 0 };
    http_to(port, &r, "POST", e2e_fmt("/queues/%s/messages", q), body);
    long long id = e2e_jint(e2e_expect_json(&r, 201), "id");
    e2e_response_free(&r);
    return id;
}

/* ------------------------------------------------------------------------ */
/* Requests from worker threads (no cmocka here)                            */
/* ------------------------------------------------------------------------ */

/* One claim on a connection of its own, made by a thread. */
typedef struct lp_call {
    int port;
    char path[256];
    char body[256];
    atomic_int sent;              /* 1 once the request is on the wire */
    int status;                   /* -1 when no complete response came */
    long long id;                 /* of the claimed message, or 0 */
    long long retry_count;
    long long sent_ms, done_ms;   /* monotonic */
    long long done_us;            /* monotonic, when the response was read */
    char error[160];
} lp_call_t;

static void lp_init(lp_call_t *c, int port, const char *q, const char *body)
{
    memset(c, 0, sizeof *c);
    c->port = port;
    snprintf(c->path, sizeof c->path, "/queues/%s/claim", q);
    snprintf(c->body, sizeof c->body, "%s", body);
    atomic_init(&c->sent, 0);
    c->status = -1;
}

static void *lp_thread(void *arg)
{
    lp_call_t *c = arg;
    e2e_conn_t conn;
    e2e_response_t r = { 0 };
    if (e2e_conn_open(&conn, c->port) != 0) {
        snprintf(c->error, sizeof c->error, "connect: %s", strerror(errno));
        atomic_store(&c->sent, 1);
        return NULL;
    }
    struct timeval tv = { LONG_POLL_IO_S, 0 };
    setsockopt(conn.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    c->sent_ms = e2e_mono_ms();
    int rc = e2e_send_request(&conn, "POST", c->path, NULL, c->body, strlen(c->body));
    atomic_store(&c->sent, 1);
    if (rc != 0 || e2e_read_response(&conn, &r) != 0) {
        c->done_ms = e2e_mono_ms();
        c->done_us = e2e_mono_us();
        snprintf(c->error, sizeof c->error, "no complete response");
        e2e_conn_close(&conn);
        return NULL;
    }
    c->done_us = e2e_mono_us();
    c->done_ms = e2e_mono_ms();
    c->status = r.status;
    if (r.status == 200 && r.json) {
        long long n;
        if (rd_json_integer(rd_json_get(r.json, "id"), &n)) c->id = n;
        if (rd_json_integer(rd_json_get(r.json, "retry_count"), &n)) c->retry_count = n;
    } else if (r.status != 204) {
        snprintf(c->error, sizeof c->error, "%d: %.120s", r.status, r.body ? r.body : "");
    }
    e2e_response_free(&r);
    e2e_conn_close(&conn);
    return NULL;
}

/* Waits (bounded) until the thread has sent its request. */
static void wait_sent(lp_call_t *c)
{
    long long deadline = e2e_mono_ms() + 5000;
    while (!atomic_load(&c->sent)) {
        if (e2e_mono_ms() > deadline) fail_msg("a claim thread did not send within 5 s");
        e2e_pause_ms(2);
    }
}

/* retryd_waiting_claims of the instance on port: the long-poll claims it
 * has parked (-1 when /metrics does not say). */
static long long waiting_claims(int port)
{
    e2e_response_t r = { 0 };
    http_to(port, &r, "GET", "/metrics", NULL);
    assert_int_equal(r.status, 200);
    const char *at = strstr(r.body, "\nretryd_waiting_claims ");
    long long n = at ? strtoll(at + strlen("\nretryd_waiting_claims "), NULL, 10) : -1;
    e2e_response_free(&r);
    return n;
}

/* Waits (bounded) until the instance on port has n claims parked: a claim
 * that was only sent may not have been read yet. */
static void wait_parked(int port, long long n)
{
    long long deadline = e2e_mono_ms() + 5000, have;
    while ((have = waiting_claims(port)) != n) {
        if (e2e_mono_ms() > deadline)
            fail_msg("%lld claims parked on port %d after 5 s, want %lld", have, port, n);
        e2e_pause_ms(5);
    }
}

/* ------------------------------------------------------------------------ */
/* 1, 2. Long-poll wake-up latency                                          */
/* ------------------------------------------------------------------------ */

/* WAKE_RUNS times: park a claim on A, enqueue through enqueue_port, and time
 * the claim's response from the enqueue's response (negative when the claim
 * was answered first) and from the enqueue's request. */
static void wake_latency_runs(const char *label, int enqueue_port)
{
    char q[64];
    e2e_queue_name(q, sizeof q, label);
    long long lat[WAKE_RUNS], from_send[WAKE_RUNS];
    for (int i = 0; i < WAKE_RUNS; i++) {
        lp_call_t c;
        lp_init(&c, g_a.port, q, "{\"wait_seconds\":10}");
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, lp_thread, &c), 0);
        wait_parked(g_a.port, 1);    /* a wake-up, not a claim that found the message */
        long long send_us = e2e_mono_us();
        long long id = enqueue_to(enqueue_port, q, e2e_fmt("{\"payload\":\"wake %d\"}", i));
        long long enq_us = e2e_mono_us();
        pthread_join(t, NULL);
        if (c.status != 200)
            fail_msg("run %d: claim answered %d %s after %lld ms", i, c.status, c.error,
                     c.done_ms - c.sent_ms);
        assert_int_equal(c.id, id);
        lat[i] = c.done_us - enq_us;
        from_send[i] = c.done_us - send_us;
        printf("test_multi: %s run %2d: claim answered %+.3f ms after the enqueue's response "
               "(%.3f ms after its request)\n", label, i, lat[i] / 1000.0, from_send[i] / 1000.0);
        if (lat[i] >= WAKE_LIMIT_MS * 1000LL)
            fail_msg("run %d: wake-up took %lld us", i, lat[i]);
    }
    qsort(lat, WAKE_RUNS, sizeof lat[0], e2e_cmp_ll);
    qsort(from_send, WAKE_RUNS, sizeof from_send[0], e2e_cmp_ll);
    printf("test_multi: %s: after the enqueue's response: median %+.3f ms, max %+.3f ms; "
           "after its request: median %.3f ms, max %.3f ms (%d runs, target 50 ms)\n", label,
           (lat[WAKE_RUNS / 2 - 1] + lat[WAKE_RUNS / 2]) / 2000.0, lat[WAKE_RUNS - 1] / 1000.0,
           (from_send[WAKE_RUNS / 2 - 1] + from_send[WAKE_RUNS / 2]) / 2000.0,
           from_send[WAKE_RUNS - 1] / 1000.0, WAKE_RUNS);
    fflush(stdout);
}

static void test_long_poll_woken_through_other_instance(void **state)
{
    (void)state;
    wake_latency_runs("wake-other", g_b.port);
}

static void test_long_poll_woken_through_same_instance(void **state)
{
    (void)state;
    wake_latency_runs("wake-same", g_a.port);
}

/* ------------------------------------------------------------------------ */
/* 3. Long-poll timeout                                                     */
/* ------------------------------------------------------------------------ */

static void test_long_poll_times_out_with_204(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "timeout");
    e2e_response_t r = { 0 };
    long long t0 = e2e_mono_ms();
    http_to(g_a.port, &r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"wait_seconds\":1}");
    long long took = e2e_mono_ms() - t0;
    expect_no_content(&r);
    printf("test_multi: wait_seconds=1 on an empty queue answered 204 after %lld ms\n", took);
    if (took < 1000 || took >= 2000) fail_msg("204 after %lld ms, want [1000, 2000)", took);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* 4. FIFO among waiters                                                    */
/* ------------------------------------------------------------------------ */

static void test_waiters_are_served_in_parking_order(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "fifo");
    lp_call_t c[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        lp_init(&c[i], g_a.port, q, "{\"wait_seconds\":10}");
        assert_int_equal(pthread_create(&t[i], NULL, lp_thread, &c[i]), 0);
        wait_parked(g_a.port, i + 1);   /* parked before the next one is sent */
    }
    long long ids[3];
    for (int i = 0; i < 3; i++)
        ids[i] = enqueue_to(g_b.port, q, e2e_fmt("{\"payload\":\"m%d\"}", i));
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) {
        if (c[i].status != 200) fail_msg("waiter %d: %d %s", i, c[i].status, c[i].error);
        if (c[i].id != ids[i])
            fail_msg("waiter %d (parked %s) got id %lld, want %lld; got %lld, %lld, %lld", i,
                     i == 0 ? "first" : i == 1 ? "second" : "third", c[i].id, ids[i], c[0].id,
                     c[1].id, c[2].id);
    }
}

/* ------------------------------------------------------------------------ */
/* 5. A client that leaves mid-wait takes nothing with it                   */
/* ------------------------------------------------------------------------ */

static void test_disconnect_mid_wait_loses_nothing(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "gone");
    e2e_conn_t raw;
    assert_int_equal(e2e_conn_open(&raw, g_a.port), 0);
    const char *body = "{\"wait_seconds\":10}";
    assert_int_equal(e2e_send_request(&raw, "POST", e2e_fmt("/queues/%s/claim", q), NULL, body,
                                      strlen(body)), 0);
    wait_parked(g_a.port, 1);
    e2e_conn_close(&raw);

    long long id = enqueue_to(g_b.port, q, "{\"payload\":\"orphan?\"}");
    long long t0 = e2e_mono_ms();
    e2e_response_t r = { 0 };
    for (;;) {
        http_to(g_b.port, &r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
        if (r.status == 200) break;
        expect_no_content(&r);
        if (e2e_mono_ms() - t0 > 1000) {
            dump_message(q, id);
            fail_msg("message %lld not claimable within 1 s of the enqueue", id);
        }
        e2e_pause_ms(20);
    }
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), id);
    assert_int_equal(e2e_jint(m, "retry_count"), 0);
    assert_string_equal(e2e_jstr(m, "status"), "processing");
    redisReply *x = e2e_rcmd(g_redis, "HGET %s released", qkey(q, "stats"));
    printf("test_multi: after a disconnected waiter, claimable %lld ms after the enqueue "
           "(released by the daemon: %s)\n", e2e_mono_ms() - t0,
           x->type == REDIS_REPLY_STRING ? x->str : "0");
    freeReplyObject(x);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* 6. Batch claim and batch succeed from 8 workers on 2 instances           */
/* ------------------------------------------------------------------------ */

enum { BATCH_MSGS = 500, BATCH_WORKERS = 8, BATCH_COUNT = 7 };

typedef struct batch_worker {
    int port;
    const char *q;
    long long ids[BATCH_MSGS + 1];
    size_t n_ids;
    size_t n_claims;
    char error[256];
} batch_worker_t;

static void *batch_thread(void *arg)
{
    batch_worker_t *w = arg;
    e2e_conn_t conn;
    e2e_response_t r = { 0 };
    char claim_path[256], succeed_path[256];
    snprintf(claim_path, sizeof claim_path, "/queues/%s/claim", w->q);
    snprintf(succeed_path, sizeof succeed_path, "/queues/%s/succeed", w->q);
    if (e2e_conn_open(&conn, w->port) != 0) {
        snprintf(w->error, sizeof w->error, "connect: %s", strerror(errno));
        return NULL;
    }
    const char *claim_body = "{\"count\":7,\"lease_seconds\":60}";
    for (;;) {
        if (conn.fd < 0 && e2e_conn_open(&conn, w->port) != 0) {
            snprintf(w->error, sizeof w->error, "reconnect: %s", strerror(errno));
            break;
        }
        e2e_response_free(&r);
        if (e2e_request(&conn, "POST", claim_path, NULL, claim_body, strlen(claim_body), &r)
            != 0) {
            snprintf(w->error, sizeof w->error, "claim: no complete response");
            break;
        }
        if (r.status == 204) break;
        rd_json_t *msgs = r.json ? rd_json_get(r.json, "messages") : NULL;
        size_t n = msgs ? rd_json_array_size(msgs) : 0;
        if (r.status != 200 || !rd_json_is_array(msgs) || n < 1 || n > BATCH_COUNT) {
            snprintf(w->error, sizeof w->error, "claim: %d %.200s", r.status, r.body);
            break;
        }
        w->n_claims++;
        long long got[BATCH_COUNT];
        rd_json_t *items = rd_json_new_array();
        for (size_t i = 0; i < n; i++) {
            rd_json_t *m = rd_json_array_at(msgs, i);
            const char *token = rd_json_string(rd_json_get(m, "lease_token"));
            if (!rd_json_integer(rd_json_get(m, "id"), &got[i]) || token == NULL) {
                snprintf(w->error, sizeof w->error, "claim: message without id or token");
                break;
            }
            if (w->n_ids <= BATCH_MSGS) w->ids[w->n_ids++] = got[i];
            rd_json_t *item = rd_json_new_object();
            rd_json_set_int(item, "id", got[i]);
            rd_json_set_string(item, "lease_token", token);
            rd_json_append(items, item);
        }
        rd_json_t *doc = rd_json_new_object();
        rd_json_set(doc, "messages", items);
        size_t len;
        char *body = rd_json_print(doc, &len);
        rd_json_free(doc);
        if (w->error[0]) {
            rd_free(body);
            break;
        }
        e2e_response_free(&r);
        int rc = e2e_request(&conn, "POST", succeed_path, NULL, body, len, &r);
        rd_free(body);
        if (rc != 0) {
            snprintf(w->error, sizeof w->error, "succeed: no complete response");
            break;
        }
        rd_json_t *results = r.json ? rd_json_get(r.json, "results") : NULL;
        if (r.status != 200 || rd_json_array_size(results) != n) {
            snprintf(w->error, sizeof w->error, "succeed: %d %.200s", r.status, r.body);
            break;
        }
        for (size_t i = 0; i < n; i++) {
            rd_json_t *res = rd_json_array_at(results, i);
            long long rid;
            const char *st = rd_json_string(rd_json_get(res, "status"));
            if (!rd_json_integer(rd_json_get(res, "id"), &rid) || rid != got[i] || st == NULL ||
                strcmp(st, "succeeded") != 0) {
                snprintf(w->error, sizeof w->error, "succeed item %zu: %.200s", i, r.body);
                break;
            }
        }
        if (w->error[0]) break;
    }
    e2e_response_free(&r);
    e2e_conn_close(&conn);
    return NULL;
}

static void test_batch_claim_under_concurrency(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "batch");
    for (int i = 1; i <= BATCH_MSGS; i++) {
        long long id = enqueue_to(i % 2 ? g_a.port : g_b.port, q,
                                  e2e_fmt("{\"payload\":\"b%d\"}", i));
        assert_int_equal(id, i);
    }
    static batch_worker_t w[BATCH_WORKERS];
    pthread_t t[BATCH_WORKERS];
    for (int i = 0; i < BATCH_WORKERS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].port = i < BATCH_WORKERS / 2 ? g_a.port : g_b.port;
        w[i].q = q;
        assert_int_equal(pthread_create(&t[i], NULL, batch_thread, &w[i]), 0);
    }
    for (int i = 0; i < BATCH_WORKERS; i++) pthread_join(t[i], NULL);

    static int seen[BATCH_MSGS + 1];
    memset(seen, 0, sizeof seen);
    size_t claims = 0;
    for (int i = 0; i < BATCH_WORKERS; i++) {
        if (w[i].error[0]) fail_msg("worker %d (%s): %s", i, i < 4 ? "A" : "B", w[i].error);
        claims += w[i].n_claims;
        for (size_t j = 0; j < w[i].n_ids; j++) {
            long long id = w[i].ids[j];
            if (id < 1 || id > BATCH_MSGS) fail_msg("worker %d claimed id %lld", i, id);
            seen[id]++;
        }
    }
    for (int id = 1; id <= BATCH_MSGS; id++)
        if (seen[id] != 1) fail_msg("id %d claimed %d times", id, seen[id]);
    printf("test_multi: 500 messages claimed in %zu batch claims by 8 workers\n", claims);
    assert_int_equal(rint_cmd("ZCARD %s", qkey(q, "3:succeeded")), BATCH_MSGS);
    assert_int_equal(rint_cmd("ZCARD %s", qkey(q, "3:processing")), 0);
    assert_int_equal(rint_cmd("LLEN %s", qkey(q, "3:ready")), 0);
}

/* ------------------------------------------------------------------------ */
/* 7. Batch acknowledgement: per-item outcomes and bad bodies               */
/* ------------------------------------------------------------------------ */

/* Claims one message of q through port; returns its id, copies its token. */
static long long claim_one(int port, const char *q, char *token, size_t cap)
{
    e2e_response_t r = { 0 };
    http_to(port, &r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    long long id = e2e_jint(m, "id");
    snprintf(token, cap, "%s", e2e_jstr(m, "lease_token"));
    e2e_response_free(&r);
    return id;
}

static void test_batch_succeed_outcomes(void **state)
{
    (void)state;
    char q[64], tok1[128], tok2[128];
    e2e_queue_name(q, sizeof q, "ack");
    const char *path = e2e_fmt("/queues/%s/succeed", q);
    char path_buf[256];
    snprintf(path_buf, sizeof path_buf, "%s", path);
    long long a = enqueue_to(g_a.port, q, "{\"payload\":\"valid\"}");
    long long b = enqueue_to(g_a.port, q, "{\"payload\":\"stolen\"}");
    assert_int_equal(claim_one(g_a.port, q, tok1, sizeof tok1), a);
    assert_int_equal(claim_one(g_b.port, q, tok2, sizeof tok2), b);
    long long pending = enqueue_to(g_b.port, q, "{\"payload\":\"never claimed\"}");

    e2e_response_t r = { 0 };
    http_to(g_b.port, &r, "POST", path_buf,
            e2e_fmt("{\"messages\":[{\"id\":%lld,\"lease_token\":\"%s\"},{\"id\":99999},"
                "{\"id\":%lld},{\"id\":%lld,\"lease_token\":\"%s-wrong\"}]}",
                a, tok1, pending, b, tok2));
    rd_json_t *results = e2e_jget(e2e_expect_json(&r, 200), "results");
    assert_true(rd_json_is_array(results));
    assert_int_equal(rd_json_array_size(results), 4);
    const long long want_ids[4] = { a, 99999, pending, b };
    const char *want[4] = { "succeeded", "not-found", "invalid-state", "lease-mismatch" };
    for (size_t i = 0; i < 4; i++) {
        rd_json_t *item = rd_json_array_at(results, i);
        assert_int_equal(e2e_jint(item, "id"), want_ids[i]);
        if (strcmp(e2e_jstr(item, "status"), want[i]) != 0)
            fail_msg("item %zu: status \"%s\", want \"%s\"", i, e2e_jstr(item, "status"), want[i]);
    }
    assert_string_equal(message_status(q, a), "succeeded");
    redisReply *x = e2e_rcmd(g_redis, "ZSCORE %s %lld", qkey(q, "3:succeeded"), a);
    assert_int_equal(x->type, REDIS_REPLY_STRING);
    freeReplyObject(x);
    assert_string_equal(message_status(q, b), "processing");
    assert_string_equal(message_status(q, pending), "pending");

    /* Bad bodies. */
    http_to(g_a.port, &r, "POST", path_buf, "{\"messages\":[]}");
    expect_invalid_field(&r, NULL);
    size_t cap = 101 * 32 + 64, n = 0;
    char *big = malloc(cap);
    assert_non_null(big);
    n += (size_t)snprintf(big + n, cap - n, "{\"messages\":[");
    for (int i = 0; i < 101; i++)
        n += (size_t)snprintf(big + n, cap - n, "%s{\"id\":%d}", i ? "," : "", i + 1);
    snprintf(big + n, cap - n, "]}");
    http_to(g_a.port, &r, "POST", path_buf, big);
    free(big);
    expect_invalid_field(&r, NULL);
    http_to(g_a.port, &r, "POST", path_buf, "{\"messages\":[{\"lease_token\":\"x\"}]}");
    expect_invalid_field(&r, NULL);
    http_to(g_a.port, &r, "POST", path_buf, "[{\"id\":1}]");
    expect_problem(&r, 400, "malformed-request");
    http_to(g_a.port, &r, "POST", path_buf, "\"messages\"");
    expect_problem(&r, 400, "malformed-request");
    /* None of that touched the still-leased message. */
    assert_string_equal(message_status(q, b), "processing");
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* 8. Idempotent enqueue from 50 clients at once                            */
/* ------------------------------------------------------------------------ */

enum { IDEM_CLIENTS = 50 };

typedef struct idem_call {
    int port;
    const char *path;
    const char *body;
    pthread_barrier_t *barrier;
    int status;
    long long id;
    char payload[64];
    char error[160];
} idem_call_t;

static void *idem_thread(void *arg)
{
    idem_call_t *c = arg;
    e2e_conn_t conn;
    e2e_response_t r = { 0 };
    c->status = -1;
    int open_rc = e2e_conn_open(&conn, c->port);
    pthread_barrier_wait(c->barrier);
    if (open_rc != 0) {
        snprintf(c->error, sizeof c->error, "connect: %s", strerror(errno));
        return NULL;
    }
    if (e2e_request(&conn, "POST", c->path, NULL, c->body, strlen(c->body), &r) != 0) {
        snprintf(c->error, sizeof c->error, "no complete response");
    } else {
        c->status = r.status;
        long long n;
        if (r.json && rd_json_integer(rd_json_get(r.json, "id"), &n)) c->id = n;
        const char *p = r.json ? rd_json_string(rd_json_get(r.json, "payload")) : NULL;
        if (p) snprintf(c->payload, sizeof c->payload, "%s", p);
        if (r.status != 200 && r.status != 201)
            snprintf(c->error, sizeof c->error, "%.150s", r.body);
    }
    e2e_response_free(&r);
    e2e_conn_close(&conn);
    return NULL;
}

static void test_idempotent_enqueue_under_concurrency(void **state)
{
    (void)state;
    char q[64], path[256];
    e2e_queue_name(q, sizeof q, "idem");
    snprintf(path, sizeof path, "/queues/%s/messages", q);
    static idem_call_t c[IDEM_CLIENTS];
    static char bodies[IDEM_CLIENTS][128];
    pthread_t t[IDEM_CLIENTS];
    pthread_barrier_t barrier;
    assert_int_equal(pthread_barrier_init(&barrier, NULL, IDEM_CLIENTS), 0);
    for (int i = 0; i < IDEM_CLIENTS; i++) {
        memset(&c[i], 0, sizeof c[i]);
        snprintf(bodies[i], sizeof bodies[i],
                 "{\"payload\":\"from client %d\",\"idempotency_key\":\"order-42\"}", i);
        c[i].port = i % 2 ? g_b.port : g_a.port;
        c[i].path = path;
        c[i].body = bodies[i];
        c[i].barrier = &barrier;
        assert_int_equal(pthread_create(&t[i], NULL, idem_thread, &c[i]), 0);
    }
    for (int i = 0; i < IDEM_CLIENTS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&barrier);

    int created = 0, repeated = 0;
    const char *winner = NULL;
    for (int i = 0; i < IDEM_CLIENTS; i++) {
        if (c[i].status == 201) {
            created++;
            winner = c[i].payload;
        } else if (c[i].status == 200) {
            repeated++;
        } else {
            fail_msg("client %d: %d %s", i, c[i].status, c[i].error);
        }
        if (c[i].id != c[0].id) fail_msg("client %d got id %lld, client 0 %lld", i, c[i].id,
                                         c[0].id);
    }
    assert_int_equal(created, 1);
    assert_int_equal(repeated, IDEM_CLIENTS - 1);
    /* Every repeat carries the original message, not its own payload. */
    for (int i = 0; i < IDEM_CLIENTS; i++) assert_string_equal(c[i].payload, winner);
    assert_int_equal(rint_cmd("LLEN %s", qkey(q, "3:ready")), 1);

    long long other = enqueue_to(g_a.port, q,
                                 "{\"payload\":\"another\",\"idempotency_key\":\"order-43\"}");
    assert_true(other != c[0].id);
    assert_int_equal(rint_cmd("LLEN %s", qkey(q, "3:ready")), 2);

    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "POST", path, "{\"payload\":\"x\",\"idempotency_key\":\"\"}");
    expect_invalid_field(&r, "idempotency_key");
    char body[512];
    int n = snprintf(body, sizeof body, "{\"payload\":\"x\",\"idempotency_key\":\"");
    memset(body + n, 'k', 256);
    snprintf(body + n + 256, sizeof body - (size_t)n - 256, "\"}");
    http_to(g_b.port, &r, "POST", path, body);
    expect_invalid_field(&r, "idempotency_key");
    /* 255 bytes is still fine. */
    body[n + 255] = '"';
    body[n + 256] = '}';
    body[n + 257] = '\0';
    http_to(g_b.port, &r, "POST", path, body);
    e2e_expect_json(&r, 201);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* 9. Delayed enqueue                                                       */
/* ------------------------------------------------------------------------ */

/* Enqueues with delay_seconds=2 and checks the message; *retry_after_ms and
 * the id come back. */
static long long enqueue_delayed(const char *q, long long *retry_after_ms)
{
    e2e_response_t r = { 0 };
    http_to(g_b.port, &r, "POST", e2e_fmt("/queues/%s/messages", q),
            "{\"payload\":\"later\",\"delay_seconds\":2}");
    rd_json_t *m = e2e_expect_json(&r, 201);
    long long id = e2e_jint(m, "id");
    assert_string_equal(e2e_jstr(m, "status"), "pending");
    long long created = e2e_jtime(m, "created_at");
    *retry_after_ms = e2e_jtime(m, "retry_after");
    assert_int_equal(*retry_after_ms, created + 2000);
    e2e_response_free(&r);
    return id;
}

/* When Redis leased m, from its lease: lease_expires_at - lease_seconds. */
static long long claimed_at_ms(const rd_json_t *m, int lease_seconds)
{
    long long at = e2e_jtime(m, "lease_expires_at") - lease_seconds * 1000LL;
    assert_int_equal(e2e_jtime(m, "updated_at"), at);
    return at;
}

/* r is the 200 claim of message id (lease_seconds 30), leased no later than
 * TICK_MS + 50 ms after retry_after; prints how late ("how": the way it was
 * claimed) and frees r. */
static void expect_claimed_on_time(e2e_response_t *r, long long id, long long retry_after,
                                   const char *how)
{
    rd_json_t *m = e2e_expect_json(r, 200);
    assert_int_equal(e2e_jint(m, "id"), id);
    long long late = claimed_at_ms(m, 30) - retry_after;
    printf("test_multi: delayed message claimed (%s) %lld ms after retry_after\n", how, late);
    if (late < 0 || late > TICK_MS + 50) fail_msg("claimed %lld ms after retry_after", late);
    e2e_response_free(r);
}

static void test_delayed_enqueue_is_claimable_on_time(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "delay");
    long long retry_after;
    long long id = enqueue_delayed(q, &retry_after);
    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
    expect_no_content(&r);

    /* How soon this process polls is up to the host's scheduler, not
     * retryd: a poll that found nothing is late only when it was sent after
     * the bound (the wall clock read before sending is no later than Redis's
     * when the claim ran); one that found it must not be early. */
    long long deadline = e2e_mono_ms() + 4000;
    for (;;) {
        long long sent = e2e_wall_ms();
        http_to(g_a.port, &r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":30}");
        if (r.status == 200) break;
        expect_no_content(&r);
        if (sent - retry_after > TICK_MS + 50)
            fail_msg("not claimable %lld ms after retry_after", sent - retry_after);
        if (e2e_mono_ms() > deadline) fail_msg("not claimable within 4 s");
        e2e_pause_ms(20);
    }
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), id);
    long long late = claimed_at_ms(m, 30) - retry_after;
    printf("test_multi: delayed message claimed (polling) %lld ms after retry_after\n", late);
    if (late < 0) fail_msg("claimed %lld ms before retry_after", -late);
    e2e_response_free(&r);
}

/* The same through a long-poll: here the timer's promotion has to wake it. */
static void test_delayed_enqueue_wakes_long_poll(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "delay-lp");
    long long retry_after;
    long long id = enqueue_delayed(q, &retry_after);
    e2e_response_t r = { 0 };
    long long t0 = e2e_wall_ms();
    http_to(g_a.port, &r, "POST", e2e_fmt("/queues/%s/claim", q),
            "{\"wait_seconds\":5,\"lease_seconds\":30}");
    if (r.status != 200) {
        fprintf(stderr, "test_multi: claim sent %lld ms before retry_after, answered %d "
                "%lld ms after it was sent\n", retry_after - t0, r.status, e2e_wall_ms() - t0);
        dump_message(q, id);
        dump_hash("stats", qkey(q, "stats"));
    }
    expect_claimed_on_time(&r, id, retry_after, "long-poll");
}

/* ------------------------------------------------------------------------ */
/* 11. Idle queues cost nothing; the registry (docs/reference.md "Cost follows work")  */
/* ------------------------------------------------------------------------ */

enum {
    IDLE_QUEUES = 2000,           /* registered queues with one ready message each */
    IDLE_WINDOW_MS = 2000,        /* FCALLs are counted over this long */
    PAGE_LIMIT = 300,             /* GET /queues page size in the paging test */
};

static bool g_idle_made;

static void idle_name(char *out, size_t cap, int i)
{
    snprintf(out, cap, "idle-%05d", i);
}

/* IDLE_QUEUES queues, each with one ready message (nothing scheduled, leased
 * or expiring: idle in the sense of docs/reference.md "Cost follows work"), enqueued through A once per group. */
static void ensure_idle_queues(void)
{
    if (g_idle_made) return;
    long long t0 = e2e_mono_ms();
    for (int i = 0; i < IDLE_QUEUES; i++) {
        char q[32];
        idle_name(q, sizeof q, i);
        enqueue_to(g_a.port, q, "{\"payload\":\"idle\"}");
    }
    g_idle_made = true;
    printf("test_multi: %d idle queues enqueued in %lld ms\n", IDLE_QUEUES, e2e_mono_ms() - t0);
}

/* calls= of cmdstat_<name> in INFO commandstats (0 before the first call). */
static long long cmd_calls(const char *name)
{
    redisReply *r = e2e_rcmd(g_redis, "INFO commandstats");
    char needle[64];
    snprintf(needle, sizeof needle, "cmdstat_%s:calls=", name);
    const char *at = r->type == REDIS_REPLY_STRING ? strstr(r->str, needle) : NULL;
    long long n = at ? strtoll(at + strlen(needle), NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

static bool in_registry(const char *q)
{
    redisReply *r = e2e_rcmd(g_redis, "SISMEMBER %s:queues %s", g_prefix, q);
    bool yes = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return yes;
}

/* With IDLE_QUEUES idle queues and two instances, Redis sees a bounded number
 * of FCALLs per second that does not depend on the number of queues: each
 * instance's round (a take, and a report when it took anything) per tick,
 * and the registry sweep (at most RD_SWEEP_BATCH queues per second in all).
 * Before: one tick FCALL per registered queue per round per instance. */
static void test_idle_queues_cost_nothing_per_tick(void **state)
{
    (void)state;
    ensure_idle_queues();
    e2e_pause_ms(500);
    long long c0 = cmd_calls("fcall"), t0 = e2e_mono_ms();
    e2e_pause_ms(IDLE_WINDOW_MS);
    long long c1 = cmd_calls("fcall"), t1 = e2e_mono_ms();
    double per_s = (double)(c1 - c0) * 1000.0 / (double)(t1 - t0);
    double bound = 2 * 2 * (1000.0 / TICK_MS) +
                   RD_SWEEP_BATCH * 1000.0 / RD_SWEEP_EVERY_MS + 50;
    printf("test_multi: %d idle queues, 2 instances, tick %d ms: %.0f FCALL/s (bound %.0f)\n",
           IDLE_QUEUES, TICK_MS, per_s, bound);
    if (per_s > bound)
        fail_msg("%.0f FCALL/s with %d idle queues; at most %.0f expected (nothing per queue "
                 "per tick)", per_s, IDLE_QUEUES, bound);
}

/* A retry due on one of the idle queues wakes a long-poll within one tick. */
static void test_due_retry_on_idle_queue_within_one_tick(void **state)
{
    (void)state;
    ensure_idle_queues();
    char q[32];
    idle_name(q, sizeof q, IDLE_QUEUES / 2);
    /* The queue's ready message first, so only the delayed one is left. */
    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
    e2e_expect_json(&r, 200);
    long long retry_after;
    long long id = enqueue_delayed(q, &retry_after);
    http_to(g_a.port, &r, "POST", e2e_fmt("/queues/%s/claim", q),
            "{\"wait_seconds\":5,\"lease_seconds\":30}");
    expect_claimed_on_time(&r, id, retry_after, "long-poll, among idle queues");
}

/* An expired lease on one of the idle queues is reclaimed within one tick of
 * its deadline (Redis clock at both ends: lease_expires_at and the
 * reclaimed message's updated_at). */
static void test_expired_lease_on_idle_queue_reclaimed(void **state)
{
    (void)state;
    ensure_idle_queues();
    char q[32];
    idle_name(q, sizeof q, IDLE_QUEUES / 3);
    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":1}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    long long id = e2e_jint(m, "id");
    long long deadline = e2e_jtime(m, "lease_expires_at");
    long long until = e2e_mono_ms() + 5000;
    for (;;) {
        http_to(g_b.port, &r, "GET", e2e_fmt("/queues/%s/messages/%lld", q, id), NULL);
        m = e2e_expect_json(&r, 200);
        if (strcmp(e2e_jstr(m, "status"), "processing") != 0) break;
        if (e2e_mono_ms() > until) fail_msg("the lease of %s/%lld was not reclaimed in 5 s", q, id);
        e2e_pause_ms(20);
    }
    assert_string_equal(e2e_jstr(m, "status"), "pending");
    assert_string_equal(e2e_jstr(m, "last_error"), "lease expired");
    assert_int_equal(e2e_jint(m, "retry_count"), 1);
    long long late = e2e_jtime(m, "updated_at") - deadline;
    printf("test_multi: lease on an idle queue reclaimed %lld ms after its deadline\n", late);
    if (late < 0 || late > TICK_MS + 50) fail_msg("reclaimed %lld ms after the deadline", late);
    e2e_response_free(&r);
}

/* A lease shortened with extend on an idle queue is reclaimed within a tick
 * of its new deadline: the claim's 1 h lease set the queue's timer promise
 * and schedule entry to an hour from now; extend's hint brings them down.
 * Before: the reclaim waited for the registry sweep. */
static void test_shortened_lease_on_idle_queue_reclaimed(void **state)
{
    (void)state;
    ensure_idle_queues();
    char q[32];
    idle_name(q, sizeof q, IDLE_QUEUES / 5);
    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":3600}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    long long id = e2e_jint(m, "id");
    http_to(g_a.port, &r, "POST", e2e_fmt("/queues/%s/messages/%lld/extend", q, id),
            "{\"lease_seconds\":1}");
    m = e2e_expect_json(&r, 200);
    long long deadline = e2e_jtime(m, "lease_expires_at");
    long long until = e2e_mono_ms() + 5000;
    for (;;) {
        http_to(g_b.port, &r, "GET", e2e_fmt("/queues/%s/messages/%lld", q, id), NULL);
        m = e2e_expect_json(&r, 200);
        if (strcmp(e2e_jstr(m, "status"), "processing") != 0) break;
        if (e2e_mono_ms() > until)
            fail_msg("the shortened lease of %s/%lld was not reclaimed in 5 s", q, id);
        e2e_pause_ms(20);
    }
    assert_string_equal(e2e_jstr(m, "status"), "pending");
    assert_string_equal(e2e_jstr(m, "last_error"), "lease expired");
    long long late = e2e_jtime(m, "updated_at") - deadline;
    printf("test_multi: shortened lease on an idle queue reclaimed %lld ms after its deadline\n",
           late);
    if (late < 0 || late > TICK_MS + 50) fail_msg("reclaimed %lld ms after the deadline", late);
    e2e_response_free(&r);
}

/* GET /queues pages: at most limit per page, every registered queue exactly
 * once across the pages, in name order; bad limits are 422. */
static void test_queues_paging_lists_each_once(void **state)
{
    (void)state;
    ensure_idle_queues();
    size_t cap = IDLE_QUEUES + 512, n = 0, pages = 0;
    char (*names)[64] = calloc(cap, sizeof *names);
    assert_non_null(names);
    char cursor[256] = "";
    bool more = true;
    e2e_response_t r = { 0 };
    while (more) {
        const char *path = cursor[0] ? e2e_fmt("/queues?limit=%d&cursor=%s", PAGE_LIMIT,
                                               e2e_url_encode(cursor))
                                     : e2e_fmt("/queues?limit=%d", PAGE_LIMIT);
        http_to(pages % 2 ? g_b.port : g_a.port, &r, "GET", path, NULL);
        rd_json_t *doc = e2e_expect_json(&r, 200);
        rd_json_t *list = e2e_jget(doc, "queues");
        size_t len = rd_json_array_size(list);
        if (len > PAGE_LIMIT) fail_msg("page %zu has %zu queues; limit %d", pages, len, PAGE_LIMIT);
        for (size_t i = 0; i < len; i++) {
            if (n == cap) fail_msg("more than %zu queues listed", cap);
            snprintf(names[n++], sizeof names[0], "%s", e2e_jstr(rd_json_array_at(list, i), "name"));
        }
        rd_json_t *next = rd_json_get(doc, "next_cursor");
        assert_non_null(next);
        more = !rd_json_is_null(next);
        if (more) snprintf(cursor, sizeof cursor, "%s", e2e_jstr(doc, "next_cursor"));
        pages++;
        if (pages > cap) fail_msg("GET /queues does not end");
    }
    e2e_response_free(&r);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) >= 0)
            fail_msg("not in name order or repeated: \"%s\" then \"%s\"", names[i - 1], names[i]);
    for (int i = 0; i < IDLE_QUEUES; i++) {
        char q[32];
        idle_name(q, sizeof q, i);
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (strcmp(names[mid], q) < 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo == n || strcmp(names[lo], q) != 0) fail_msg("GET /queues never listed %s", q);
    }
    printf("test_multi: GET /queues listed %zu queues in %zu pages of at most %d\n", n, pages,
           PAGE_LIMIT);
    free(names);

    http_to(g_a.port, &r, "GET", "/queues?limit=0", NULL);
    expect_invalid_field(&r, "limit");
    http_to(g_a.port, &r, "GET", "/queues?limit=1001", NULL);
    expect_invalid_field(&r, "limit");
    e2e_response_free(&r);
}

/* /metrics reads at most RD_METRICS_MAX_QUEUES queues' stats and says how
 * many it left out. */
static void test_metrics_bounded_with_many_queues(void **state)
{
    (void)state;
    ensure_idle_queues();
    e2e_response_t r = { 0 };
    long long calls, registered, omitted, t0 = e2e_mono_ms();
    size_t series;
    /* The per-queue series come from a snapshot at most 5 s old (docs/design.md
     * "Listing"): one taken before the idle queues existed may answer first. */
    for (;;) {
        long long c0 = cmd_calls("fcall_ro");
        http_to(g_a.port, &r, "GET", "/metrics", NULL);
        calls = cmd_calls("fcall_ro") - c0;
        assert_int_equal(r.status, 200);
        series = 0;
        for (const char *p = r.body; (p = strstr(p, "\nretryd_enqueued_total{queue=\"")) != NULL;
             p++)
            series++;
        registered = omitted = -1;
        const char *at = strstr(r.body, "\nretryd_registered_queues ");
        if (at) registered = strtoll(at + strlen("\nretryd_registered_queues "), NULL, 10);
        at = strstr(r.body, "\nretryd_queue_series_omitted ");
        if (at) omitted = strtoll(at + strlen("\nretryd_queue_series_omitted "), NULL, 10);
        if (registered >= IDLE_QUEUES || e2e_mono_ms() - t0 > RD_METRICS_SNAPSHOT_MS + 2000)
            break;
        e2e_response_free(&r);
        e2e_pause_ms(100);
    }
    printf("test_multi: /metrics: %zu queues' series, %lld registered, %lld omitted, %lld "
           "FCALL_RO\n", series, registered, omitted, calls);
    if (series > RD_METRICS_MAX_QUEUES) fail_msg("/metrics exports %zu queues' series", series);
    if (registered < IDLE_QUEUES) fail_msg("retryd_registered_queues %lld", registered);
    assert_int_equal(omitted, registered - (long long)series);
    if (calls > RD_METRICS_MAX_QUEUES + 10) fail_msg("/metrics sent %lld stats calls", calls);
    e2e_response_free(&r);
}

/* A queue whose keys were all deleted leaves the registry: GET /queues
 * notices it has no key and has the timer look at it at once. */
static void test_queue_without_keys_leaves_registry(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "gone");
    enqueue_to(g_a.port, q, "{\"payload\":\"x\"}");
    assert_true(in_registry(q));
    char cursor[32] = "0";
    do {
        redisReply *s = e2e_rcmd(g_redis, "SCAN %s MATCH %s COUNT 1000", cursor,
                                 e2e_fmt("%s:{%s}*", g_prefix, q));
        snprintf(cursor, sizeof cursor, "%s", s->element[0]->str);
        for (size_t i = 0; i < s->element[1]->elements; i++)
            freeReplyObject(e2e_rcmd(g_redis, "DEL %s", s->element[1]->element[i]->str));
        freeReplyObject(s);
    } while (strcmp(cursor, "0") != 0);

    e2e_response_t r = { 0 };
    char next[256] = "";
    do {   /* the whole listing, so the page with q is read */
        http_to(g_b.port, &r, "GET", next[0] ? e2e_fmt("/queues?limit=1000&cursor=%s",
                                                        e2e_url_encode(next))
                                             : "/queues?limit=1000", NULL);
        rd_json_t *doc = e2e_expect_json(&r, 200);
        rd_json_t *nc = rd_json_get(doc, "next_cursor");
        if (nc == NULL || rd_json_is_null(nc)) next[0] = '\0';
        else snprintf(next, sizeof next, "%s", e2e_jstr(doc, "next_cursor"));
    } while (next[0]);
    long long t0 = e2e_mono_ms();
    while (in_registry(q)) {
        if (e2e_mono_ms() - t0 > 3000) fail_msg("%s has no key left but is still registered", q);
        e2e_pause_ms(20);
    }
    printf("test_multi: a queue without keys left the registry %lld ms after GET /queues\n",
           e2e_mono_ms() - t0);
    http_to(g_a.port, &r, "GET", "/queues?limit=1000", NULL);
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "queues");
    for (size_t i = 0; i < rd_json_array_size(list); i++)
        assert_string_not_equal(e2e_jstr(rd_json_array_at(list, i), "name"), q);
    e2e_response_free(&r);
}

/* The registration of a queue whose only enqueue fell in a window where
 * registering failed (here: an ACL that denies the registry's keys) is sent
 * again until it succeeds; before, the name was marked registered as soon as
 * its SADD was sent, and the queue stayed unregistered. */
static void test_failed_registration_is_retried(void **state)
{
    (void)state;
    char user[64], q[64];
    snprintf(user, sizeof user, "idle%ld", (long)getpid());
    e2e_queue_name(q, sizeof q, "acl");
    const char *keys = e2e_fmt("~%s:{*", g_prefix);
    freeReplyObject(e2e_rcmd(g_redis, "ACL SETUSER %s reset on >pw %s &* +@all", user, keys));
    e2e_flags_t f;
    e2e_flags(&f, "--redis", e2e_fmt("redis://%s:pw@127.0.0.1:%d", user, g_redis_port), g_prefix,
              TICK_MS, "error", NULL);
    if (e2e_daemon_start(&g_c, g_bin, f.argv, false, true, READY_TIMEOUT_MS, "test_multi") != 0)
        fail_msg("retryd with the ACL user did not start");
    enqueue_to(g_c.port, q, "{\"payload\":\"x\"}");
    e2e_pause_ms(5 * TICK_MS);
    bool early = in_registry(q);
    freeReplyObject(e2e_rcmd(g_redis, "ACL SETUSER %s allkeys", user));
    long long t0 = e2e_mono_ms();
    while (!in_registry(q) && e2e_mono_ms() - t0 < 3000) e2e_pause_ms(20);
    bool late = in_registry(q);
    e2e_daemon_stop(&g_c, SIGTERM, E2E_STOP_TIMEOUT_MS);
    freeReplyObject(e2e_rcmd(g_redis, "ACL DELUSER %s", user));
    if (early) fail_msg("registered while the ACL denied the registry: the test proves nothing");
    if (!late) fail_msg("%s is not registered 3 s after registering became possible again", q);
    printf("test_multi: failed registration sent again; registered %lld ms after the ACL allowed "
           "it\n", e2e_mono_ms() - t0);
}

/* ------------------------------------------------------------------------ */
/* 5b. Subscriptions follow waiters (docs/long-poll.md)                     */
/* ------------------------------------------------------------------------ */

enum { RELEASE_NAMES = 300, RELEASE_LIMIT_MS = 5000 };

/* Subscribers of the wake channels of qs[0..n) on the test Redis, summed
 * (one PUBSUB NUMSUB for all). */
static long long wake_subscribers(char (*qs)[64], size_t n)
{
    const char **argv = calloc(n + 2, sizeof *argv);
    char **owned = calloc(n, sizeof *owned);
    argv[0] = "PUBSUB";
    argv[1] = "NUMSUB";
    for (size_t i = 0; i < n; i++) {
        owned[i] = strdup(qkey(qs[i], "wake"));
        argv[i + 2] = owned[i];
    }
    redisReply *x = e2e_reply_or_fail(g_redis, redisCommandArgv(g_redis, (int)n + 2, argv, NULL));
    long long sum = 0;
    for (size_t i = 1; i < x->elements; i += 2) sum += x->element[i]->integer;
    freeReplyObject(x);
    for (size_t i = 0; i < n; i++) free(owned[i]);
    free(owned);
    free(argv);
    return sum;
}

/* Waits (bounded) until the wake channels of qs[0..n) have want subscribers
 * in all; returns how long that took. */
static long long wait_wake_subscribers(char (*qs)[64], size_t n, long long want)
{
    long long t0 = e2e_mono_ms(), have;
    while ((have = wake_subscribers(qs, n)) != want) {
        if (e2e_mono_ms() - t0 > RELEASE_LIMIT_MS)
            fail_msg("%lld subscribers on %zu wake channels after %d ms, want %lld", have, n,
                     RELEASE_LIMIT_MS, want);
        e2e_pause_ms(20);
    }
    return e2e_mono_ms() - t0;
}

/* One long-poll on A for q, woken by an enqueue through enqueue_port:
 * answered 200 with that message, within WAKE_LIMIT_MS. */
static void expect_woken(const char *q, int enqueue_port)
{
    lp_call_t c;
    lp_init(&c, g_a.port, q, "{\"wait_seconds\":10}");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, lp_thread, &c), 0);
    wait_parked(g_a.port, 1);
    long long t0 = e2e_mono_ms();
    long long id = enqueue_to(enqueue_port, q, "{\"payload\":\"again\"}");
    pthread_join(t, NULL);
    if (c.status != 200) fail_msg("%s: claim answered %d %s", q, c.status, c.error);
    assert_int_equal(c.id, id);
    if (c.done_ms - t0 >= WAKE_LIMIT_MS) fail_msg("%s: woken after %lld ms", q, c.done_ms - t0);
}

/* Long-polls on many distinct names subscribe to each name's wake channel;
 * once they are answered the subscriptions go within a few seconds (not 30 s
 * later), and a name released that way and asked again is still woken, by
 * an enqueue through the other instance and through its own. */
static void test_subscriptions_released_when_waiters_leave(void **state)
{
    (void)state;
    static char qs[RELEASE_NAMES][64];
    static e2e_conn_t conns[RELEASE_NAMES];
    char base[48];
    e2e_queue_name(base, sizeof base, "release");
    const char *body = "{\"wait_seconds\":1}";
    for (size_t i = 0; i < RELEASE_NAMES; i++) {
        snprintf(qs[i], sizeof qs[i], "%s-%zu", base, i);
        assert_int_equal(e2e_conn_open(&conns[i], g_a.port), 0);
        assert_int_equal(e2e_send_request(&conns[i], "POST", e2e_fmt("/queues/%s/claim", qs[i]),
                                          NULL, body, strlen(body)), 0);
    }
    wait_wake_subscribers(qs, RELEASE_NAMES, RELEASE_NAMES);
    for (size_t i = 0; i < RELEASE_NAMES; i++) {
        e2e_response_t r = { 0 };
        assert_int_equal(e2e_read_response(&conns[i], &r), 0);
        expect_no_content(&r);
        e2e_response_free(&r);
        e2e_conn_close(&conns[i]);
    }
    long long took = wait_wake_subscribers(qs, RELEASE_NAMES, 0);
    printf("test_multi: %d wake subscriptions released %lld ms after their long-polls were "
           "answered\n", RELEASE_NAMES, took);
    expect_woken(qs[0], g_b.port);
    expect_woken(qs[1], g_a.port);
    wait_wake_subscribers(qs, 2, 0);
}

/* ------------------------------------------------------------------------ */
/* 10. Shutdown answers a parked waiter                                     */
/* ------------------------------------------------------------------------ */

static void test_sigterm_answers_parked_waiter(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "stop");
    assert_int_equal(start_daemon(&g_c), 0);
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_c.port), 0);
    struct timeval tv = { LONG_POLL_IO_S, 0 };
    setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const char *body = "{\"wait_seconds\":20}";
    assert_int_equal(e2e_send_request(&c, "POST", e2e_fmt("/queues/%s/claim", q), NULL, body,
                                      strlen(body)), 0);
    wait_parked(g_c.port, 1);
    long long t0 = e2e_mono_ms();
    assert_int_equal(kill(g_c.pid, SIGTERM), 0);
    e2e_response_t r = { 0 };
    int rc = e2e_read_response(&c, &r);
    long long took = e2e_mono_ms() - t0;
    e2e_conn_close(&c);
    if (rc != 0) fail_msg("the parked claim got no complete response (%lld ms)", took);
    printf("test_multi: parked claim answered %d %lld ms after SIGTERM\n", r.status, took);
    expect_no_content(&r);
    if (took > 6000) fail_msg("answered %lld ms after SIGTERM", took);
    e2e_response_free(&r);
    int status = e2e_daemon_stop(&g_c, 0, 6000 - (int)took);
    if (status != 0) fail_msg("C after SIGTERM: %d (want exit 0; -1 = did not exit)", status);
}

/* ------------------------------------------------------------------------ */
/* Rolling upgrade from retryd_v2 (docs/storage.md "Two generations of      */
/* indexes")                                                                */
/* ------------------------------------------------------------------------ */

/* Loads tests/fixtures/<name>.lua, a previous release's library, as one of
 * its instances would on connect. */
static void load_fixture_library(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "tests/fixtures/%s.lua", name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) fail_msg("cannot read %s (run from the source tree)", path);
    static char code[256 * 1024];
    size_t n = fread(code, 1, sizeof code, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof code);
    redisReply *r = redisCommand(g_redis, "FUNCTION LOAD REPLACE %b", code, n);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_STRING) fail_msg("FUNCTION LOAD of %s: %s", name, r->str);
    freeReplyObject(r);
}

/* A retryd_v2 instance on the same Redis keeps enqueuing (its library,
 * tests/fixtures/retryd_v2.lua, called as its daemon would) while the
 * retryd_v3 instances have a backlog of their own. Their timer lifts the v2
 * messages to the front of the new due list: workers get them within a few
 * ticks, long before the backlog is through; and retryd_v2's indexes never
 * name a new record. */
static void test_v2_instance_enqueuing_beside_v3(void **state)
{
    (void)state;
    load_fixture_library("retryd_v2");
    redisReply *r;

    char q[32];
    e2e_queue_name(q, sizeof q, "v2beside");
    enum { BACKLOG = 300, FROM_V2 = 3, MAX_CLAIMS = 150 };
    for (int i = 0; i < BACKLOG; i++) enqueue_to(g_a.port, q, "{\"payload\":\"backlog\"}");
    long long v2ids[FROM_V2];
    char base[128];
    snprintf(base, sizeof base, "%s:{%s}", g_prefix, q);
    for (int i = 0; i < FROM_V2; i++) {
        r = redisCommand(g_redis, "FCALL retryd_v2_enqueue 1 %s %s 3 0", base, "from v2");
        assert_non_null(r);
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) fail_msg("retryd_v2_enqueue failed");
        v2ids[i] = r->element[1]->integer;
        freeReplyObject(r);
    }

    /* Workers claim with 1 s leases and never settle: the leases bring the
     * timer to the queue, which lifts the v2 messages. */
    int got = 0, claims = 0;
    long long start = e2e_mono_ms();
    while (got < FROM_V2) {
        if (claims >= MAX_CLAIMS || e2e_mono_ms() - start > 8000)
            fail_msg("%d of %d v2 messages claimed after %d claims, %lld ms", got, FROM_V2, claims,
                     e2e_mono_ms() - start);
        e2e_response_t resp = { 0 };
        http_to(g_b.port, &resp, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":1}");
        rd_json_t *m = e2e_expect_json(&resp, 200);
        long long id = e2e_jint(m, "id");
        for (int i = 0; i < FROM_V2; i++)
            if (id == v2ids[i]) {
                assert_string_equal(e2e_jstr(m, "payload"), "from v2");
                got++;
            }
        e2e_response_free(&resp);
        claims++;
        e2e_pause_ms(40);
    }
    printf("test_multi: %d v2 messages claimed after %d claims (%lld ms), with a backlog of %d\n",
           FROM_V2, claims, e2e_mono_ms() - start, BACKLOG);

    /* retryd_v2's indexes name no record of the new layout. */
    static const char *const lists[] = { "ready", "due" };
    static const char *const zsets[] = { "scheduled", "processing", "succeeded", "dead" };
    for (size_t i = 0; i < 6; i++) {
        r = i < 2 ? redisCommand(g_redis, "LRANGE %s 0 -1", qkey(q, lists[i]))
                  : redisCommand(g_redis, "ZRANGE %s 0 -1", qkey(q, zsets[i - 2]));
        assert_non_null(r);
        for (size_t j = 0; j < r->elements; j++) {
            redisReply *t = redisCommand(g_redis, "TYPE %s:m:%s", base, r->element[j]->str);
            if (strcmp(t->str, "string") == 0)
                fail_msg("id %s in v2's index names a record", r->element[j]->str);
            freeReplyObject(t);
        }
        freeReplyObject(r);
    }
}

/* The previous release's library (tests/fixtures/retryd_v5.lua, main as it
 * landed on 2026-12-02) loaded by one of its instances on the same Redis:
 * every instance loads its own library on connect with FUNCTION LOAD
 * REPLACE. This release's claim, settle-and-claim and timer take arguments
 * and give replies the previous one does not, so the two must not share a
 * library name: under one name, the old instance's load replaced this
 * release's functions, its settle-and-claim answered 500 and its timer did
 * nothing. Both keep working on the same keys: a message the old library
 * enqueued is claimed here, and this instance's timer still ends a lease. */
static void test_previous_release_library_beside(void **state)
{
    (void)state;
    load_fixture_library("retryd_v5");
    redisReply *r;

    char q[32], base[128];
    e2e_queue_name(q, sizeof q, "prevrel");
    snprintf(base, sizeof base, "%s:{%s}", g_prefix, q);
    r = redisCommand(g_redis, "FCALL retryd_v5_enqueue 1 %s %s 3 0", base, "from the old one");
    assert_non_null(r);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) fail_msg("retryd_v5_enqueue failed");
    long long old_id = r->element[1]->integer;
    freeReplyObject(r);

    /* A settle-and-claim (the call whose arguments changed) takes it. */
    e2e_response_t resp = { 0 };
    http_to(g_a.port, &resp, "POST", e2e_fmt("/queues/%s/claim", q),
            "{\"count\":1,\"lease_seconds\":1,\"settle\":[{\"id\":999,\"outcome\":\"succeeded\"}]}");
    rd_json_t *doc = e2e_expect_json(&resp, 200);
    rd_json_t *msgs = e2e_jget(doc, "messages");
    assert_int_equal(rd_json_array_size(msgs), 1);
    assert_int_equal(e2e_jint(rd_json_array_at(msgs, 0), "id"), old_id);
    assert_string_equal(e2e_jstr(rd_json_array_at(msgs, 0), "payload"), "from the old one");
    e2e_response_free(&resp);

    /* This release's timer ends the 1 s lease (only the timer does). */
    const char *path = e2e_fmt("/queues/%s/messages/%lld", q, old_id);
    char mpath[256];
    snprintf(mpath, sizeof mpath, "%s", path);
    long long t0 = e2e_mono_ms();
    const char *status = "";
    char last[64] = "";
    while (e2e_mono_ms() - t0 < 8000) {
        http_to(g_b.port, &resp, "GET", mpath, NULL);
        rd_json_t *m = e2e_expect_json(&resp, 200);
        status = e2e_jstr(m, "status");
        if (status == NULL) status = "(none)";
        snprintf(last, sizeof last, "%s", status);
        bool back = strcmp(status, "pending") == 0 && e2e_jint(m, "retry_count") == 1;
        e2e_response_free(&resp);
        if (back) break;
        e2e_pause_ms(100);
    }
    /* A record with a priority (format byte 1 + 2p) and an expiry (trailer
     * key x) is read by the old library as it is (docs/lifecycle.md "What is
     * stored"): it looks only at the trailer bit. */
    http_to(g_a.port, &resp, "POST", e2e_fmt("/queues/%s/messages", q),
            "{\"payload\":\"urgent\",\"priority\":5,\"ttl_seconds\":600}");
    long long prio_id = e2e_jint(e2e_expect_json(&resp, 201), "id");
    e2e_response_free(&resp);
    r = redisCommand(g_redis, "FCALL retryd_v5_get 2 %s %s:m:%lld %lld", base, base, prio_id, prio_id);
    bool read_old = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                    r->element[1]->type == REDIS_REPLY_ARRAY && r->element[1]->elements >= 4 &&
                    strcmp(r->element[1]->element[3]->str, "urgent") == 0;
    if (r) freeReplyObject(r);

    r = redisCommand(g_redis, "FUNCTION DELETE retryd_v5");
    if (r) freeReplyObject(r);
    if (strcmp(last, "pending") != 0)
        fail_msg("the lease did not end in 8 s beside the old library (status %s)", last);
    if (!read_old) fail_msg("retryd_v5_get did not read a record with a priority and an expiry");
}

/* ------------------------------------------------------------------------ */
/* max_in_flight across instances (docs/reference.md "Pause, caps and rate limits")                                */
/* ------------------------------------------------------------------------ */

enum { CAP = 4, CAP_WORKERS = 20, CAP_MSGS = 80 };

typedef struct cap_shared {
    const char *q;
    atomic_int held;              /* leases the workers hold right now */
    atomic_int max_held;
    atomic_int done;              /* messages succeeded */
    atomic_int finished;          /* workers that have returned */
} cap_shared_t;

typedef struct cap_worker {
    cap_shared_t *s;
    int port;
    char error[200];
} cap_worker_t;

/* Long-polls for one message at a time, holds it a few ms, succeeds it; until
 * every message is done. */
static void *cap_thread(void *arg)
{
    cap_worker_t *w = arg;
    cap_shared_t *s = w->s;
    e2e_conn_t conn = { .fd = -1 };
    e2e_response_t r = { 0 };
    char claim_path[256];
    snprintf(claim_path, sizeof claim_path, "/queues/%s/claim", s->q);
    const char *claim_body = "{\"wait_seconds\":1,\"lease_seconds\":60}";
    long long deadline = e2e_mono_ms() + 30000;
    while (atomic_load(&s->done) < CAP_MSGS && e2e_mono_ms() < deadline) {
        if (conn.fd < 0 && e2e_conn_open(&conn, w->port) != 0) {
            snprintf(w->error, sizeof w->error, "connect: %s", strerror(errno));
            break;
        }
        e2e_response_free(&r);
        if (e2e_request(&conn, "POST", claim_path, NULL, claim_body, strlen(claim_body), &r)
            != 0) {
            snprintf(w->error, sizeof w->error, "claim: no complete response");
            break;
        }
        if (r.status == 204) continue;
        long long id;
        const char *token = r.json ? rd_json_string(rd_json_get(r.json, "lease_token")) : NULL;
        if (r.status != 200 || token == NULL || !rd_json_integer(rd_json_get(r.json, "id"), &id)) {
            snprintf(w->error, sizeof w->error, "claim: %d %.150s", r.status, r.body);
            break;
        }
        int now = atomic_fetch_add(&s->held, 1) + 1;
        for (int m = atomic_load(&s->max_held); now > m;)
            if (atomic_compare_exchange_weak(&s->max_held, &m, now)) break;
        e2e_pause_ms(3);  /* the work */
        char path[300], body[200];
        snprintf(path, sizeof path, "/queues/%s/messages/%lld/succeed", s->q, id);
        snprintf(body, sizeof body, "{\"lease_token\":\"%s\"}", token);
        atomic_fetch_sub(&s->held, 1);  /* before the settle is sent: never counts late */
        e2e_response_free(&r);
        if (e2e_request(&conn, "POST", path, NULL, body, strlen(body), &r) != 0 || r.status != 200) {
            snprintf(w->error, sizeof w->error, "succeed: %d %.150s", r.status, r.body);
            break;
        }
        atomic_fetch_add(&s->done, 1);
    }
    e2e_response_free(&r);
    e2e_conn_close(&conn);
    atomic_fetch_add(&s->finished, 1);
    return NULL;
}

/* A field of a hash as an integer, 0 when absent. */
static long long hget_int(const char *key, const char *field)
{
    redisReply *x = e2e_rcmd(g_redis, "HGET %s %s", key, field);
    long long n = x->type == REDIS_REPLY_STRING ? atoll(x->str) : 0;
    freeReplyObject(x);
    return n;
}

/* 20 claimers, 10 on each instance, never hold more than the cap between
 * them, and every message is done (settlements wake the waiters). */
static void test_max_in_flight_across_instances(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "cap");
    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "PUT", e2e_fmt("/queues/%s/policy", q),
            e2e_fmt("{\"max_in_flight\":%d}", CAP));
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    for (int i = 0; i < CAP_MSGS; i++) enqueue_to(i % 2 ? g_a.port : g_b.port, q, "{\"payload\":\"w\"}");
    cap_shared_t s = { .q = q };
    atomic_init(&s.held, 0);
    atomic_init(&s.max_held, 0);
    atomic_init(&s.done, 0);
    atomic_init(&s.finished, 0);
    cap_worker_t w[CAP_WORKERS];
    pthread_t t[CAP_WORKERS];
    for (int i = 0; i < CAP_WORKERS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].s = &s;
        w[i].port = i % 2 ? g_a.port : g_b.port;
        assert_int_equal(pthread_create(&t[i], NULL, cap_thread, &w[i]), 0);
    }
    /* Redis's own count, sampled while they work. */
    long long max_processing = 0;
    while (atomic_load(&s.done) < CAP_MSGS) {
        long long n = rint_cmd("ZCARD %s", qkey(q, "processing"));
        if (n > max_processing) max_processing = n;
        if (atomic_load(&s.finished) == CAP_WORKERS) break;
        e2e_pause_ms(1);
    }
    for (int i = 0; i < CAP_WORKERS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < CAP_WORKERS; i++)
        if (w[i].error[0]) fail_msg("worker %d: %s", i, w[i].error);
    printf("test_multi: cap %d, 20 claimers on 2 instances: %d done, at most %d held by the "
           "workers, at most %lld processing in Redis\n", CAP, atomic_load(&s.done),
           atomic_load(&s.max_held), max_processing);
    assert_int_equal(atomic_load(&s.done), CAP_MSGS);
    assert_true(atomic_load(&s.max_held) <= CAP);
    assert_true(max_processing <= CAP);
    assert_true(hget_int(qkey(q, "stats"), "held_cap") > 0);
}

/* With a cap of one reached (policy: the PUT body; both messages enqueued
 * with body), a long-poll parked on B, held back once (the stats counter
 * held), is woken by a settlement of the first message made through A,
 * within a second; it gets the second. Prints what woke it. */
static void expect_settle_on_a_wakes_b(const char *tag, const char *policy, const char *body_1,
                                       const char *body_2, const char *held, const char *what)
{
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, tag);
    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "PUT", e2e_fmt("/queues/%s/policy", q), policy);
    e2e_expect_json(&r, 200);
    long long first = enqueue_to(g_a.port, q, body_1);
    long long second = enqueue_to(g_a.port, q, body_2);
    assert_int_equal(claim_one(g_a.port, q, token, sizeof token), first);

    lp_call_t c;
    lp_init(&c, g_b.port, q, "{\"wait_seconds\":10}");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, lp_thread, &c), 0);
    wait_sent(&c);
    /* B has tried once and was held back: it is parked. */
    long long deadline = e2e_mono_ms() + 5000;
    while (hget_int(qkey(q, "stats"), held) < 1) {
        if (e2e_mono_ms() > deadline) fail_msg("B's claim was not held back within 5 s (%s)", held);
        e2e_pause_ms(2);
    }
    long long t0 = e2e_mono_us();
    http_to(g_a.port, &r, "POST", e2e_fmt("/queues/%s/messages/%lld/succeed", q, first),
            e2e_fmt("{\"lease_token\":\"%s\"}", token));
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    pthread_join(t, NULL);
    if (c.status != 200) fail_msg("B's long-poll answered %d %s", c.status, c.error);
    assert_int_equal(c.id, second);
    long long us = c.done_us - t0;
    printf("test_multi: a settlement on A woke the %s long-poll on B in %.3f ms\n", what,
           us / 1000.0);
    assert_true(us < 1000000);
}

/* With the cap reached, a long-poll parked on B is woken by a settlement made
 * through A, within a second. */
static void test_settle_on_a_wakes_long_poll_on_b(void **state)
{
    (void)state;
    expect_settle_on_a_wakes_b("capwake", "{\"max_in_flight\":1}", "{\"payload\":\"1\"}",
                               "{\"payload\":\"2\"}", "held_cap", "capped");
}

/* With the cap reached, a lease that expires (reclaimed by a timer) wakes a
 * long-poll parked on the other instance. */
static void test_lease_expiry_wakes_capped_long_poll(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "capexpire");
    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"max_in_flight\":1}");
    e2e_expect_json(&r, 200);
    enqueue_to(g_a.port, q, "{\"payload\":\"1\"}");
    long long second = enqueue_to(g_a.port, q, "{\"payload\":\"2\"}");
    http_to(g_a.port, &r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":1}");
    long long deadline_ms = e2e_jtime(e2e_expect_json(&r, 200), "lease_expires_at");
    e2e_response_free(&r);

    lp_call_t c;
    lp_init(&c, g_b.port, q, "{\"wait_seconds\":10}");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, lp_thread, &c), 0);
    pthread_join(t, NULL);
    if (c.status != 200) fail_msg("B's long-poll answered %d %s", c.status, c.error);
    assert_int_equal(c.id, second);
    /* Answered after the lease ended, within a second and a tick of it. */
    long long late = e2e_wall_ms() - deadline_ms;
    printf("test_multi: a lease expiry woke the capped long-poll on B %lld ms after the deadline\n",
           late);
    assert_true(late >= 0 && late < 1500);
}

/* ------------------------------------------------------------------------ */
/* Fairness groups across instances (docs/reference.md "Fairness groups")   */
/* ------------------------------------------------------------------------ */

enum {
    G_GROUPS = 4,                 /* groups per test */
    G_CAP = 2,                    /* group_max_in_flight */
    G_CAP_WORKERS = 20,
    G_CAP_PER_GROUP = 20,
    G_FIFO_WORKERS = 8,
    G_FIFO_PER_GROUP = 20,
};

typedef struct group_shared {
    const char *q;
    bool fifo;                    /* the strict-order test: check the order too */
    int total;                    /* messages to finish */
    atomic_int held[G_GROUPS];    /* leases the workers hold now, per group */
    atomic_int max_held[G_GROUPS];
    atomic_int next[G_GROUPS];    /* fifo: the sequence number due next */
    atomic_int done;
    atomic_int finished;
    atomic_int fails;             /* failures the fifo workers injected */
    char violation[200];          /* the first broken rule a worker saw */
    pthread_mutex_t lock;
} group_shared_t;

typedef struct group_worker {
    group_shared_t *s;
    int port;
    char error[200];
} group_worker_t;

static void group_violation(group_shared_t *s, const char *fmt, ...)
{
    pthread_mutex_lock(&s->lock);
    if (!s->violation[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->violation, sizeof s->violation, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&s->lock);
}

/* Long-polls for one message at a time, holds it a few ms and succeeds it,
 * until every message is done. Payloads are "<group index>:<sequence>" and
 * the group is "g<index>". In the fifo test a message whose sequence is 3
 * mod 7 fails once (retry_after_seconds 0) and must come back before its
 * group's later ones; the worker checks each delivery against the next
 * sequence its group owes. */
static void *group_thread(void *arg)
{
    group_worker_t *w = arg;
    group_shared_t *s = w->s;
    e2e_conn_t conn = { .fd = -1 };
    e2e_response_t r = { 0 };
    char claim_path[256];
    snprintf(claim_path, sizeof claim_path, "/queues/%s/claim", s->q);
    const char *claim_body = "{\"wait_seconds\":1,\"lease_seconds\":60}";
    long long deadline = e2e_mono_ms() + 40000;
    while (atomic_load(&s->done) < s->total && e2e_mono_ms() < deadline) {
        if (conn.fd < 0 && e2e_conn_open(&conn, w->port) != 0) {
            snprintf(w->error, sizeof w->error, "connect: %s", strerror(errno));
            break;
        }
        e2e_response_free(&r);
        if (e2e_request(&conn, "POST", claim_path, NULL, claim_body, strlen(claim_body), &r)
            != 0) {
            snprintf(w->error, sizeof w->error, "claim: no complete response");
            break;
        }
        if (r.status == 204) continue;
        long long id, retries = 0;
        const char *token = r.json ? rd_json_string(rd_json_get(r.json, "lease_token")) : NULL;
        const char *payload = r.json ? rd_json_string(rd_json_get(r.json, "payload")) : NULL;
        const char *group = r.json ? rd_json_string(rd_json_get(r.json, "group")) : NULL;
        int gi = -1, seq = -1;
        if (r.status != 200 || token == NULL || payload == NULL ||
            !rd_json_integer(rd_json_get(r.json, "id"), &id) ||
            sscanf(payload, "%d:%d", &gi, &seq) != 2 || gi < 0 || gi >= G_GROUPS) {
            snprintf(w->error, sizeof w->error, "claim: %d %.150s", r.status, r.body);
            break;
        }
        rd_json_integer(rd_json_get(r.json, "retry_count"), &retries);
        char want_group[16];
        snprintf(want_group, sizeof want_group, "g%d", gi);
        if (group == NULL || strcmp(group, want_group) != 0)
            group_violation(s, "message %lld of %s came with group %s", id, want_group,
                            group ? group : "null");
        int now = atomic_fetch_add(&s->held[gi], 1) + 1;
        for (int m = atomic_load(&s->max_held[gi]); now > m;)
            if (atomic_compare_exchange_weak(&s->max_held[gi], &m, now)) break;
        if (s->fifo && atomic_load(&s->next[gi]) != seq)
            group_violation(s, "group g%d delivered %d while %d was due", gi, seq,
                            atomic_load(&s->next[gi]));
        e2e_pause_ms(2);  /* the work */
        bool failing = s->fifo && seq % 7 == 3 && retries == 0;
        char path[300], body[200];
        snprintf(path, sizeof path, "/queues/%s/messages/%lld/%s", s->q, id,
                 failing ? "fail" : "succeed");
        if (failing)
            snprintf(body, sizeof body, "{\"lease_token\":\"%s\",\"error\":\"once\","
                     "\"retry_after_seconds\":0}", token);
        else
            snprintf(body, sizeof body, "{\"lease_token\":\"%s\"}", token);
        if (!failing && s->fifo) atomic_store(&s->next[gi], seq + 1);
        atomic_fetch_sub(&s->held[gi], 1);  /* before the settle is sent: never counts late */
        e2e_response_free(&r);
        if (e2e_request(&conn, "POST", path, NULL, body, strlen(body), &r) != 0 || r.status != 200) {
            snprintf(w->error, sizeof w->error, "settle: %d %.150s", r.status, r.body);
            break;
        }
        if (failing) atomic_fetch_add(&s->fails, 1);
        else atomic_fetch_add(&s->done, 1);
    }
    e2e_response_free(&r);
    e2e_conn_close(&conn);
    atomic_fetch_add(&s->finished, 1);
    return NULL;
}

/* Runs `workers` group_threads, alternating between A and B, until s->total
 * messages are done; while they work, samples Redis's own processing count
 * of each group (the gcount hash) into max_redis. */
static void run_group_workers(group_shared_t *s, int workers, long long *max_redis)
{
    group_worker_t w[G_CAP_WORKERS];
    pthread_t t[G_CAP_WORKERS];
    assert_true(workers <= G_CAP_WORKERS);
    for (int i = 0; i < workers; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].s = s;
        w[i].port = i % 2 ? g_a.port : g_b.port;
        assert_int_equal(pthread_create(&t[i], NULL, group_thread, &w[i]), 0);
    }
    *max_redis = 0;
    while (atomic_load(&s->done) < s->total && atomic_load(&s->finished) < workers) {
        for (int g = 0; g < G_GROUPS; g++) {
            long long n = hget_int(qkey(s->q, "3:gcount"), e2e_fmt("ig%d", g));
            if (n > *max_redis) *max_redis = n;
        }
        e2e_pause_ms(1);
    }
    for (int i = 0; i < workers; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < workers; i++)
        if (w[i].error[0]) fail_msg("worker %d: %s", i, w[i].error);
    if (s->violation[0]) fail_msg("%s", s->violation);
}

static void group_shared_init(group_shared_t *s, const char *q, bool fifo, int total)
{
    memset(s, 0, sizeof *s);
    s->q = q;
    s->fifo = fifo;
    s->total = total;
    for (int g = 0; g < G_GROUPS; g++) {
        atomic_init(&s->held[g], 0);
        atomic_init(&s->max_held[g], 0);
        atomic_init(&s->next[g], 0);
    }
    atomic_init(&s->done, 0);
    atomic_init(&s->finished, 0);
    atomic_init(&s->fails, 0);
    pthread_mutex_init(&s->lock, NULL);
}

/* Enqueues per_group messages to each of the G_GROUPS groups, sequence by
 * sequence (so the groups interleave), alternating between A and B. */
static void enqueue_groups(const char *q, int per_group)
{
    for (int seq = 0; seq < per_group; seq++)
        for (int g = 0; g < G_GROUPS; g++)
            enqueue_to((seq + g) % 2 ? g_a.port : g_b.port, q,
                       e2e_fmt("{\"payload\":\"%d:%d\",\"group\":\"g%d\"}", g, seq, g));
}

/* 20 claimers, 10 on each instance, never hold more than group_max_in_flight
 * of one group between them (nor does Redis count more), and every message
 * is done: a settlement puts a capped group back and wakes the waiters. */
static void test_group_caps_across_instances(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "gcap");
    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "PUT", e2e_fmt("/queues/%s/policy", q),
            e2e_fmt("{\"group_max_in_flight\":%d}", G_CAP));
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    enqueue_groups(q, G_CAP_PER_GROUP);
    group_shared_t s;
    group_shared_init(&s, q, false, G_GROUPS * G_CAP_PER_GROUP);
    long long max_redis;
    run_group_workers(&s, G_CAP_WORKERS, &max_redis);
    int max_held = 0;
    for (int g = 0; g < G_GROUPS; g++)
        if (atomic_load(&s.max_held[g]) > max_held) max_held = atomic_load(&s.max_held[g]);
    printf("test_multi: group cap %d, 20 claimers on 2 instances: %d done, at most %d of one "
           "group held by the workers, at most %lld processing in Redis\n", G_CAP,
           atomic_load(&s.done), max_held, max_redis);
    assert_int_equal(atomic_load(&s.done), G_GROUPS * G_CAP_PER_GROUP);
    assert_true(max_held <= G_CAP);
    assert_true(max_redis <= G_CAP);
    assert_true(hget_int(qkey(q, "stats"), "held_group_cap") > 0);
    /* Every group empty: no key or field of them is left. */
    assert_int_equal(rint_cmd("EXISTS %s", qkey(q, "3:gcount")), 0);
    assert_int_equal(rint_cmd("EXISTS %s", qkey(q, "3:groups")), 0);
    assert_int_equal(rint_cmd("EXISTS %s", qkey(q, "3:grouped")), 0);
}

/* fifo_groups with 8 claimers on 2 instances: each group's messages are
 * finished in exactly their enqueue order, a failed one is delivered again
 * before its group's later ones, and never two of a group are in flight. */
static void test_fifo_groups_across_instances(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "gfifo");
    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"fifo_groups\":true}");
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    enqueue_groups(q, G_FIFO_PER_GROUP);
    group_shared_t s;
    group_shared_init(&s, q, true, G_GROUPS * G_FIFO_PER_GROUP);
    long long max_redis;
    run_group_workers(&s, G_FIFO_WORKERS, &max_redis);
    int max_held = 0;
    for (int g = 0; g < G_GROUPS; g++)
        if (atomic_load(&s.max_held[g]) > max_held) max_held = atomic_load(&s.max_held[g]);
    printf("test_multi: fifo_groups, 8 claimers on 2 instances: %d done in order, %d failed "
           "once and came back first, at most %d of one group in flight\n",
           atomic_load(&s.done), atomic_load(&s.fails), max_held);
    assert_int_equal(atomic_load(&s.done), G_GROUPS * G_FIFO_PER_GROUP);
    for (int g = 0; g < G_GROUPS; g++) assert_int_equal(atomic_load(&s.next[g]), G_FIFO_PER_GROUP);
    assert_true(atomic_load(&s.fails) >= G_GROUPS * 2);
    assert_int_equal(max_held, 1);
    assert_true(max_redis <= 1);
}

/* A long-poll on B held back by a group's cap (the only claimable message
 * is of a group at its cap) is woken by a settlement of that group on A. */
static void test_group_capacity_wakes_long_poll_on_b(void **state)
{
    (void)state;
    expect_settle_on_a_wakes_b("gwake", "{\"group_max_in_flight\":1}",
                               "{\"payload\":\"1\",\"group\":\"t\"}",
                               "{\"payload\":\"2\",\"group\":\"t\"}", "held_group_cap",
                               "group-capped");
}

/* A long-poll on B held back by a group's rate limit (no token left) is
 * answered when the next token is due, not at the end of its wait. */
static void test_group_token_wakes_long_poll_on_b(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "gtoken");
    e2e_response_t r = { 0 };
    http_to(g_a.port, &r, "PUT", e2e_fmt("/queues/%s/policy", q),
            "{\"group_rate_limit\":{\"per_second\":2,\"burst\":1}}");
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    enqueue_to(g_a.port, q, "{\"payload\":\"1\",\"group\":\"t\"}");
    long long second = enqueue_to(g_a.port, q, "{\"payload\":\"2\",\"group\":\"t\"}");
    claim_one(g_a.port, q, token, sizeof token);   /* the burst's one token */
    long long t0 = e2e_mono_ms();
    lp_call_t c;
    lp_init(&c, g_b.port, q, "{\"wait_seconds\":10}");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, lp_thread, &c), 0);
    pthread_join(t, NULL);
    if (c.status != 200) fail_msg("B's long-poll answered %d %s", c.status, c.error);
    assert_int_equal(c.id, second);
    long long waited = c.done_ms - t0;
    printf("test_multi: a group-rate-limited long-poll on B was answered after %lld ms "
           "(one token per 500 ms)\n", waited);
    assert_true(waited < 2000);
    assert_true(hget_int(qkey(q, "stats"), "held_group_rate") >= 1);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, test_setup, test_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_long_poll_woken_through_other_instance),
        T(test_long_poll_woken_through_same_instance),
        T(test_long_poll_times_out_with_204),
        T(test_waiters_are_served_in_parking_order),
        T(test_disconnect_mid_wait_loses_nothing),
        T(test_subscriptions_released_when_waiters_leave),
        T(test_batch_claim_under_concurrency),
        T(test_batch_succeed_outcomes),
        T(test_idempotent_enqueue_under_concurrency),
        T(test_delayed_enqueue_is_claimable_on_time),
        T(test_delayed_enqueue_wakes_long_poll),
        T(test_idle_queues_cost_nothing_per_tick),
        T(test_due_retry_on_idle_queue_within_one_tick),
        T(test_expired_lease_on_idle_queue_reclaimed),
        T(test_shortened_lease_on_idle_queue_reclaimed),
        T(test_queues_paging_lists_each_once),
        T(test_metrics_bounded_with_many_queues),
        T(test_queue_without_keys_leaves_registry),
        T(test_failed_registration_is_retried),
        T(test_max_in_flight_across_instances),
        T(test_settle_on_a_wakes_long_poll_on_b),
        T(test_lease_expiry_wakes_capped_long_poll),
        T(test_group_caps_across_instances),
        T(test_fifo_groups_across_instances),
        T(test_group_capacity_wakes_long_poll_on_b),
        T(test_group_token_wakes_long_poll_on_b),
        T(test_sigterm_answers_parked_waiter),
        T(test_v2_instance_enqueuing_beside_v3),
        T(test_previous_release_library_beside),
    };
    return cmocka_run_group_tests_name("multi", tests, group_setup, group_teardown);
}
