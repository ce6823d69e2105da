/* test_alerts.c - end-to-end tests of the alert webhooks (docs/reference.md "Alerts",
 * docs/dead-letters.md "Alert webhooks"): retryd instances started with
 * --alert-url against a receiver in this process that answers 2xx, fails
 * (500) or stalls (reads the request, never answers) on command.
 *
 *   1. a receiver that fails, then stalls, then recovers gets the event once
 *      it recovers, exactly once, and the failures are counted;
 *   2. two healthy instances, one slow receiver: every death is delivered
 *      exactly once;
 *   3. the instance holding an entry is SIGKILLed mid-POST: the other claims
 *      it back after --alert-claim-ms and delivers it;
 *   4. without --alert-url an instance delivers nothing and creates no group;
 *   5. a stalled receiver holds at most RD_ALERTS_IN_FLIGHT_MAX POSTs and
 *      claims go on meanwhile;
 *   6. SIGTERM mid-POST: the instance exits 0 within the drain, and the entry
 *      it left pending is delivered by another;
 *   7. a queue whose policy sets alert_url gets its deaths at that receiver,
 *      another queue at --alert-url's, and a cleared alert_url sends the
 *      queue's next death back to --alert-url;
 *   8. two instances with --alert-url and one without: deaths made through
 *      each reach the receiver within 2 s, whichever instance ticks them;
 *   9. deaths made through an instance without the flag while the only
 *      alerting one is down reach the receiver within 2 s of its restart;
 *  10. a policy alert_url alone (no instance has --alert-url) delivers;
 *  11. a fleet without alerts (test 4) runs no stream-group command at all
 *      (INFO commandstats) and writes no alert mark.
 *
 * Every test is a fleet of its own: a fresh --prefix (test_setup).
 *
 * Needs RETRYD_TEST_REDIS_PORT and RETRYD_BIN (scripts/test.sh sets both).
 * The receiver runs one thread per connection; the threads never call
 * cmocka, the main thread asserts on what they recorded. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>


#include <hiredis/hiredis.h>

#include "alert_receiver.h"
#include "e2e_support.h"
#include "retryd/alerts.h"

enum {
    READY_TIMEOUT_MS = 10000,
    TICK_MS = 100,
    FLEET_DELIVER_MS = 2000,      /* every death reaches an alerting instance within this */
    CLAIM_MS = 2000,              /* --alert-claim-ms of every instance */
    DELIVER_TIMEOUT_MS = 30000,   /* bound on waiting for a delivery */
};

static const char *g_bin;
static int g_redis_port;
static char g_prefix[64];
static redisContext *g_redis;
static e2e_conn_t g_conns[3];
static e2e_daemon_t g_a, g_b, g_c; /* each test's instances */

/* ------------------------------------------------------------------------ */
/* Daemons, Redis, HTTP                                                     */
/* ------------------------------------------------------------------------ */

static int start_daemon(e2e_daemon_t *d, bool alerts, const char *timeout_ms)
{
    e2e_flags_t f;
    char url[64], claim[16];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/hook", g_recv.port);
    snprintf(claim, sizeof claim, "%d", CLAIM_MS);
    if (alerts)
        e2e_flags(&f, "--redis", e2e_redis_url(g_redis_port), g_prefix, TICK_MS, "warn",
                  "--alert-url", url, "--alert-claim-ms", claim, "--alert-timeout-ms", timeout_ms,
                  NULL);
    else
        e2e_flags(&f, "--redis", e2e_redis_url(g_redis_port), g_prefix, TICK_MS, "warn", NULL);
    return e2e_daemon_start(d, g_bin, f.argv, false, true, READY_TIMEOUT_MS, "test_alerts");
}

static const char *qkey(const char *q, const char *suffix)
{
    return e2e_fmt("%s:{%s}:%s", g_prefix, q, suffix);
}

/* The queue's stats counter name (0 when absent). */
static long long stat_of(const char *q, const char *name)
{
    redisReply *r = e2e_rcmd(g_redis, "HGET %s %s", qkey(q, "stats"), name);
    long long n = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    return n;
}

/* Entries of the alert group not yet acknowledged, or -1 without a group. */
static long long group_pending(const char *q)
{
    redisReply *r = e2e_rcmd(g_redis, "XPENDING %s retryd-alerts", qkey(q, "events"));
    long long n = r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                  r->element[0]->type == REDIS_REPLY_INTEGER ? r->element[0]->integer : -1;
    freeReplyObject(r);
    return n;
}

/* The queue's timer promise (epoch ms), 0 without one. */
static long long timer_promise(const char *q)
{
    redisReply *r = e2e_rcmd(g_redis, "GET %s", qkey(q, "timer"));
    long long n = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    return n;
}

/* The fleet's alert mark: until when an --alert-url instance counts as
 * running (timer_take writes it in the registry's sweep hash); 0 without. */
static long long alert_mark(void)
{
    redisReply *r = e2e_rcmd(g_redis, "HGET {%s:queues}:sweep alert_url_until", g_prefix);
    long long n = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    return n;
}

/* An alerting instance has taken a round: every instance's next round knows
 * the fleet has --alert-url. */
static void wait_alert_mark(void)
{
    WAIT_FOR(alert_mark() > e2e_wall_ms(), DELIVER_TIMEOUT_MS,
             "no alerting instance took a timer round");
}

static bool group_exists(const char *q)
{
    redisReply *r = e2e_rcmd(g_redis, "EXISTS %s", qkey(q, "events"));
    bool stream = r->integer == 1;
    freeReplyObject(r);
    if (!stream) return false;
    r = e2e_rcmd(g_redis, "XINFO GROUPS %s", qkey(q, "events"));
    bool found = r->type == REDIS_REPLY_ARRAY && r->elements > 0;
    freeReplyObject(r);
    return found;
}

/* Enqueues one message (max_retries 1) through port, claims it and fails it:
 * it dies. Returns its id. */
static long long make_death(int port, const char *q, const char *error)
{
    e2e_response_t r = { 0 };
    e2e_http_via(g_conns, 3, port, &r, "POST", e2e_fmt("/queues/%s/messages", q),
                 "{\"payload\":\"p\",\"max_retries\":1}");
    assert_int_equal(r.status, 201);
    long long id = e2e_jint(r.json, "id");
    e2e_http_via(g_conns, 3, port, &r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
    assert_int_equal(r.status, 200);
    assert_int_equal(e2e_jint(r.json, "id"), id);
    e2e_http_via(g_conns, 3, port, &r, "POST", e2e_fmt("/queues/%s/messages/%lld/fail", q, id),
                 e2e_fmt("{\"error\":\"%s\"}", error));
    assert_int_equal(r.status, 200);
    assert_string_equal(e2e_jstr(r.json, "status"), "dead");
    e2e_response_free(&r);
    return id;
}

/* A metric's value from port's /metrics (-1 when absent). */
static long long metric(int port, const char *name)
{
    e2e_response_t r = { 0 };
    e2e_http_via(g_conns, 3, port, &r, "GET", "/metrics", NULL);
    assert_int_equal(r.status, 200);
    long long v = -1;
    char want[128];
    snprintf(want, sizeof want, "\n%s ", name);
    const char *at = strstr(r.body, want);
    if (at) v = atoll(at + strlen(want));
    e2e_response_free(&r);
    return v;
}

static int group_setup(void **state)
{
    (void)state;
    if (e2e_suite_env("test_alerts", 5, &g_bin, &g_redis_port, &g_redis) != 0) return -1;
    snprintf(g_prefix, sizeof g_prefix, "alerts%d", (int)getpid());
    for (size_t i = 0; i < 3; i++) g_conns[i].fd = -1;
    return recv_start();
}

static int group_teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < 3; i++) e2e_conn_close(&g_conns[i]);
    recv_stop();
    redisFree(g_redis);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* 1. Fails, stalls, recovers: delivered once after it recovers             */
/* ------------------------------------------------------------------------ */

static void test_fail_stall_recover_delivers_once(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "recover");
    recv_reset(RECV_FAIL);
    e2e_daemon_t *a = &g_a;
    assert_int_equal(start_daemon(a, true, "500"), 0);
    long long id = make_death(a->port, q, "smtp timeout");
    WAIT_FOR(atomic_load(&g_recv.failed) >= 2, DELIVER_TIMEOUT_MS,
             "the event was not tried twice against a failing receiver (%d tries)",
             atomic_load(&g_recv.requests));
    atomic_store(&g_recv.mode, RECV_STALL);
    WAIT_FOR(atomic_load(&g_recv.stalled) >= 1, DELIVER_TIMEOUT_MS,
             "the event was not tried against the stalled receiver");
    assert_int_equal(recv_count(q, 0), 0);
    assert_int_equal(group_pending(q), 1);
    atomic_store(&g_recv.mode, RECV_OK);
    WAIT_FOR(recv_count(q, id) == 1, DELIVER_TIMEOUT_MS, "the event was not delivered");
    WAIT_FOR(group_pending(q) == 0, DELIVER_TIMEOUT_MS, "the delivered event stays pending");
    /* Acknowledged: nothing sends it again. A second death shows the sender
     * is still going, and is delivered once too. */
    long long id2 = make_death(a->port, q, "second");
    WAIT_FOR(recv_count(q, id2) == 1, DELIVER_TIMEOUT_MS, "the second event was not delivered");
    WAIT_FOR(stat_of(q, "alerts_delivered") == 2, DELIVER_TIMEOUT_MS, "alerts_delivered is not 2");
    assert_int_equal(recv_count(q, 0), 2);
    assert_int_equal(recv_count(q, id), 1);
    pthread_mutex_lock(&g_recv.lock);
    const char *body = g_recv.delivered[0];
    assert_non_null(strstr(body, "\"event\":\"dead\""));
    assert_non_null(strstr(body, "\"error\":\"smtp timeout\""));
    assert_non_null(strstr(body, "\"retry_count\":1"));
    assert_non_null(strstr(body, "\"event_id\":\""));
    pthread_mutex_unlock(&g_recv.lock);
    long long failures = metric(a->port, "retryd_alert_failures_total");
    printf("test_alerts: %lld failed POSTs before the receiver recovered\n", failures);
    assert_true(failures >= 3);
    WAIT_FOR(stat_of(q, "alerts_failed") == failures, DELIVER_TIMEOUT_MS,
             "alerts_failed in the stats is not %lld", failures);
    assert_int_equal(metric(a->port, "retryd_alert_deliveries_total"), 2);
    assert_int_equal(e2e_daemon_stop(a, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* 2. Two healthy instances: each death delivered exactly once              */
/* ------------------------------------------------------------------------ */

static void test_two_instances_deliver_each_death_once(void **state)
{
    (void)state;
    enum { QUEUES = 4, PER_QUEUE = 10 };
    recv_reset(RECV_SLOW);
    e2e_daemon_t *a = &g_a, *b = &g_b;
    assert_int_equal(start_daemon(a, true, "2000"), 0);
    assert_int_equal(start_daemon(b, true, "2000"), 0);
    char qs[QUEUES][64];
    for (int i = 0; i < QUEUES; i++) e2e_queue_name(qs[i], sizeof qs[i], "pair");
    for (int n = 0; n < PER_QUEUE; n++)
        for (int i = 0; i < QUEUES; i++) make_death(n % 2 ? a->port : b->port, qs[i], "boom");
    for (int i = 0; i < QUEUES; i++) {
        WAIT_FOR(recv_count(qs[i], 0) >= PER_QUEUE, DELIVER_TIMEOUT_MS,
                 "queue %s: %d of %d deaths delivered", qs[i], recv_count(qs[i], 0), PER_QUEUE);
        WAIT_FOR(group_pending(qs[i]) == 0, DELIVER_TIMEOUT_MS, "queue %s: entries pending",
                 qs[i]);
    }
    for (int i = 0; i < QUEUES; i++) {
        for (long long id = 1; id <= PER_QUEUE; id++)
            if (recv_count(qs[i], id) != 1)
                fail_msg("queue %s id %lld delivered %d times", qs[i], id, recv_count(qs[i], id));
        assert_int_equal(stat_of(qs[i], "alerts_delivered"), PER_QUEUE);
        assert_int_equal(stat_of(qs[i], "alerts_claimed"), 0);
    }
    long long da = metric(a->port, "retryd_alert_deliveries_total");
    long long db = metric(b->port, "retryd_alert_deliveries_total");
    printf("test_alerts: instance A delivered %lld, B %lld\n", da, db);
    assert_int_equal(da + db, QUEUES * PER_QUEUE);
    assert_int_equal(e2e_daemon_stop(a, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    assert_int_equal(e2e_daemon_stop(b, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* 3. SIGKILL mid-delivery: the other instance claims it back               */
/* ------------------------------------------------------------------------ */

static void test_crash_mid_delivery_is_claimed_back(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "crash");
    recv_reset(RECV_STALL);
    e2e_daemon_t *a = &g_a, *b = &g_b;
    assert_int_equal(start_daemon(a, true, "20000"), 0);
    long long id = make_death(a->port, q, "disk full");
    WAIT_FOR(atomic_load(&g_recv.stalled) >= 1, DELIVER_TIMEOUT_MS,
             "A did not start posting the event");
    assert_int_equal(group_pending(q), 1);
    long long t0 = e2e_mono_ms();
    assert_int_equal(e2e_daemon_stop(a, SIGKILL, E2E_STOP_TIMEOUT_MS), 256 + SIGKILL);
    atomic_store(&g_recv.mode, RECV_OK);
    assert_int_equal(start_daemon(b, true, "2000"), 0);
    WAIT_FOR(recv_count(q, id) == 1, DELIVER_TIMEOUT_MS,
             "B did not deliver the event A held when it died");
    printf("test_alerts: claimed back and delivered %lld ms after the crash\n",
           e2e_mono_ms() - t0);
    WAIT_FOR(group_pending(q) == 0, DELIVER_TIMEOUT_MS, "the event stays pending");
    assert_int_equal(stat_of(q, "alerts_claimed"), 1);
    assert_int_equal(stat_of(q, "alerts_delivered"), 1);
    assert_int_equal(recv_count(q, 0), 1);
    assert_int_equal(e2e_daemon_stop(b, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* 4. Without --alert-url: nothing is read or sent                          */
/* ------------------------------------------------------------------------ */

/* Calls of cmd in INFO commandstats since the last CONFIG RESETSTAT (those
 * inside functions included). */
static long long command_calls(const char *cmd)
{
    redisReply *r = e2e_rcmd(g_redis, "INFO commandstats");
    char want[64];
    snprintf(want, sizeof want, "cmdstat_%s:calls=", cmd);
    const char *at = r->type == REDIS_REPLY_STRING ? strstr(r->str, want) : NULL;
    long long n = at ? atoll(at + strlen(want)) : 0;
    freeReplyObject(r);
    return n;
}

static void test_without_alert_url_nothing_is_sent(void **state)
{
    (void)state;
    static const char *const group_cmds[] = { "xinfo", "xgroup", "xreadgroup", "xautoclaim",
                                              "xclaim", "xpending", "xack" };
    char q[64];
    e2e_queue_name(q, sizeof q, "quiet");
    recv_reset(RECV_OK);
    e2e_daemon_t *a = &g_a;
    assert_int_equal(start_daemon(a, false, NULL), 0);
    freeReplyObject(e2e_rcmd(g_redis, "CONFIG RESETSTAT"));
    make_death(a->port, q, "boom");
    /* The death made the queue due at once; its tick then promises the next
     * one later (the series' next sample, within a minute, or the dead
     * letter's retention, 30 days): wait for that. */
    WAIT_FOR(timer_promise(q) > e2e_wall_ms() + 30000LL, DELIVER_TIMEOUT_MS,
             "the death's tick did not run");
    /* A fleet without alerts pays nothing: no stream-group command ran
     * (ticks, timer_take and timer_done included), no mark, no hand-over. */
    for (size_t i = 0; i < sizeof group_cmds / sizeof group_cmds[0]; i++)
        if (command_calls(group_cmds[i]) != 0)
            fail_msg("%s ran %lld times in a fleet without alerts", group_cmds[i],
                     command_calls(group_cmds[i]));
    printf("test_alerts: fleet without alerts: %lld FCALLs, no stream-group command\n",
           command_calls("fcall"));
    assert_true(command_calls("fcall") > 0);
    assert_int_equal(alert_mark(), 0);
    redisReply *r = e2e_rcmd(g_redis, "EXISTS {%s:queues}:alerts", g_prefix);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    assert_false(group_exists(q));
    assert_int_equal(atomic_load(&g_recv.requests), 0);
    assert_int_equal(metric(a->port, "retryd_alert_deliveries_total"), -1);
    assert_int_equal(e2e_daemon_stop(a, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* 5. A stalled receiver: bounded POSTs, claims go on                       */
/* ------------------------------------------------------------------------ */

static void test_stalled_receiver_never_slows_claims(void **state)
{
    (void)state;
    enum { DEATHS = RD_ALERTS_IN_FLIGHT_MAX + 8 };
    char q[64], w[64];
    e2e_queue_name(q, sizeof q, "stalled");
    e2e_queue_name(w, sizeof w, "work");
    recv_reset(RECV_STALL);
    e2e_daemon_t *a = &g_a;
    assert_int_equal(start_daemon(a, true, "20000"), 0);
    for (int i = 0; i < DEATHS; i++) make_death(a->port, q, "boom");
    WAIT_FOR(atomic_load(&g_recv.stalled) >= RD_ALERTS_IN_FLIGHT_MAX, DELIVER_TIMEOUT_MS,
             "only %d POSTs started", atomic_load(&g_recv.stalled));
    assert_int_equal(metric(a->port, "retryd_alert_in_flight"), RD_ALERTS_IN_FLIGHT_MAX);
    assert_int_equal(metric(a->port, "retryd_alert_held"), DEATHS);
    /* Every POST is stuck: enqueue and claim still answer at once. */
    long long worst = 0;
    e2e_response_t r = { 0 };
    for (int i = 0; i < 20; i++) {
        long long t0 = e2e_mono_ms();
        e2e_http_via(g_conns, 3, a->port, &r, "POST", e2e_fmt("/queues/%s/messages", w),
                     "{\"payload\":\"p\"}");
        assert_int_equal(r.status, 201);
        e2e_http_via(g_conns, 3, a->port, &r, "POST", e2e_fmt("/queues/%s/claim", w), NULL);
        assert_int_equal(r.status, 200);
        long long took = e2e_mono_ms() - t0;
        if (took > worst) worst = took;
    }
    e2e_response_free(&r);
    printf("test_alerts: enqueue+claim took at most %lld ms with %d POSTs stalled\n", worst,
           RD_ALERTS_IN_FLIGHT_MAX);
    assert_true(worst < 1000);
    assert_int_equal(atomic_load(&g_recv.stalled), RD_ALERTS_IN_FLIGHT_MAX);
    e2e_daemon_stop(a, SIGKILL, E2E_STOP_TIMEOUT_MS);
}

/* ------------------------------------------------------------------------ */
/* 6. SIGTERM mid-POST: exits in time, the entry is delivered by another    */
/* ------------------------------------------------------------------------ */

static void test_sigterm_mid_post_leaves_entry_for_another(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "term");
    recv_reset(RECV_STALL);
    e2e_daemon_t *a = &g_a, *b = &g_b;
    assert_int_equal(start_daemon(a, true, "20000"), 0);
    long long id = make_death(a->port, q, "boom");
    WAIT_FOR(atomic_load(&g_recv.stalled) >= 1, DELIVER_TIMEOUT_MS,
             "A did not start posting the event");
    long long t0 = e2e_mono_ms();
    int status = e2e_daemon_stop(a, SIGTERM, 8000);
    long long took = e2e_mono_ms() - t0;
    printf("test_alerts: SIGTERM with a stalled POST: exit %d after %lld ms\n", status, took);
    assert_int_equal(status, 0);
    assert_true(took < 6000);
    assert_int_equal(group_pending(q), 1);
    atomic_store(&g_recv.mode, RECV_OK);
    assert_int_equal(start_daemon(b, true, "2000"), 0);
    WAIT_FOR(recv_count(q, id) == 1, DELIVER_TIMEOUT_MS,
             "B did not deliver the event A left pending");
    WAIT_FOR(group_pending(q) == 0, DELIVER_TIMEOUT_MS, "the event stays pending");
    assert_int_equal(recv_count(q, 0), 1);
    assert_int_equal(e2e_daemon_stop(b, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* A test that failed half-way leaves no instance running into the next. */
static int test_teardown(void **state)
{
    (void)state;
    if (g_a.pid > 0) e2e_daemon_stop(&g_a, SIGKILL, E2E_STOP_TIMEOUT_MS);
    if (g_b.pid > 0) e2e_daemon_stop(&g_b, SIGKILL, E2E_STOP_TIMEOUT_MS);
    if (g_c.pid > 0) e2e_daemon_stop(&g_c, SIGKILL, E2E_STOP_TIMEOUT_MS);
    return 0;
}

/* Each test is a fleet of its own: what an earlier test's instances wrote
 * (the alert mark of --alert-url instances) is under another prefix. */
static int test_setup(void **state)
{
    (void)state;
    static int serial;
    snprintf(g_prefix, sizeof g_prefix, "alerts%d-%d", (int)getpid(), ++serial);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* 7. A queue's policy alert_url overrides --alert-url for that queue       */
/* ------------------------------------------------------------------------ */

static void test_policy_alert_url_routes_a_queue(void **state)
{
    (void)state;
    char qa[64], qb[64];
    e2e_queue_name(qa, sizeof qa, "ownurl");
    e2e_queue_name(qb, sizeof qb, "flagurl");
    recv_reset(RECV_OK);
    e2e_daemon_t *a = &g_a;
    assert_int_equal(start_daemon(a, true, "2000"), 0);
    char own[64];
    snprintf(own, sizeof own, "http://127.0.0.1:%d/own", g_recv.port2);
    e2e_response_t r = { 0 };
    e2e_http_via(g_conns, 3, a->port, &r, "PUT", e2e_fmt("/queues/%s/policy", qa),
                 e2e_fmt("{\"alert_url\":\"%s\"}", own));
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, own));
    /* Refused with the field named: nothing changed. */
    e2e_http_via(g_conns, 3, a->port, &r, "PUT", e2e_fmt("/queues/%s/policy", qa),
                 "{\"alert_url\":\"ftp://127.0.0.1/x\"}");
    e2e_expect_invalid_field(&r, "alert_url");
    e2e_http_via(g_conns, 3, a->port, &r, "GET", e2e_fmt("/queues/%s/policy", qa), NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, own));
    e2e_http_via(g_conns, 3, a->port, &r, "GET", e2e_fmt("/queues/%s/policy", qb), NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"alert_url\":null"));
    e2e_response_free(&r);
    long long ida = make_death(a->port, qa, "to its own receiver");
    long long idb = make_death(a->port, qb, "to the flag's receiver");
    WAIT_FOR(recv_count_at(1, qa, ida) == 1, DELIVER_TIMEOUT_MS,
             "queue %s's death did not reach its alert_url", qa);
    WAIT_FOR(recv_count_at(0, qb, idb) == 1, DELIVER_TIMEOUT_MS,
             "queue %s's death did not reach --alert-url", qb);
    WAIT_FOR(group_pending(qa) == 0 && group_pending(qb) == 0, DELIVER_TIMEOUT_MS,
             "entries pending");
    assert_int_equal(recv_count_at(0, qa, 0), 0);
    assert_int_equal(recv_count_at(1, qb, 0), 0);
    /* Cleared: the queue's next death goes to --alert-url (nothing cached). */
    e2e_http_via(g_conns, 3, a->port, &r, "PUT", e2e_fmt("/queues/%s/policy", qa), "{}");
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"alert_url\":null"));
    e2e_response_free(&r);
    long long ida2 = make_death(a->port, qa, "back to the flag's");
    WAIT_FOR(recv_count_at(0, qa, ida2) == 1, DELIVER_TIMEOUT_MS,
             "queue %s's death after the clear did not reach --alert-url", qa);
    assert_int_equal(recv_count_at(1, qa, 0), 1);
    assert_int_equal(e2e_daemon_stop(a, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* 8. A mixed fleet: every death reaches an alerting instance within 2 s    */
/* ------------------------------------------------------------------------ */

static void test_mixed_fleet_delivers_every_death(void **state)
{
    (void)state;
    enum { DEATHS = 5 };
    recv_reset(RECV_OK);
    e2e_daemon_t *a = &g_a, *b = &g_b, *c = &g_c;
    assert_int_equal(start_daemon(a, true, "2000"), 0);
    assert_int_equal(start_daemon(b, true, "2000"), 0);
    assert_int_equal(start_daemon(c, false, NULL), 0);
    wait_alert_mark();
    e2e_daemon_t *via[DEATHS] = { c, a, c, b, c };
    char qs[DEATHS][64];
    long long ids[DEATHS];
    /* One death at a time, each ticked before the next: five deaths made at
     * once would all be ticked by the same round, of one instance. Every
     * one must arrive within 2 s of the first. */
    long long t0 = e2e_mono_ms();
    for (int i = 0; i < DEATHS; i++) {
        e2e_queue_name(qs[i], sizeof qs[i], "mixed");
        ids[i] = make_death(via[i]->port, qs[i], "boom");
        WAIT_FOR(timer_promise(qs[i]) > e2e_wall_ms() + 500, DELIVER_TIMEOUT_MS,
                 "queue %s: the death's tick did not run", qs[i]);
    }
    int got = 0;
    for (long long deadline = t0 + FLEET_DELIVER_MS; e2e_mono_ms() < deadline;) {
        got = 0;
        for (int i = 0; i < DEATHS; i++) got += recv_count(qs[i], ids[i]) == 1;
        if (got == DEATHS) break;
        e2e_pause_ms(20);
    }
    printf("test_alerts: mixed fleet: %d of %d deaths delivered after %lld ms\n", got, DEATHS,
           e2e_mono_ms() - t0);
    if (got != DEATHS)
        fail_msg("%d of %d deaths reached the receiver within %d ms", got, DEATHS,
                 FLEET_DELIVER_MS);
    for (int i = 0; i < DEATHS; i++)
        WAIT_FOR(group_pending(qs[i]) == 0, DELIVER_TIMEOUT_MS, "queue %s: entries pending",
                 qs[i]);
    int total = 0;
    for (int i = 0; i < DEATHS; i++) total += recv_count(qs[i], 0);
    assert_int_equal(total, DEATHS);
    assert_int_equal(metric(c->port, "retryd_alert_deliveries_total"), -1);
    assert_int_equal(e2e_daemon_stop(a, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    assert_int_equal(e2e_daemon_stop(b, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    assert_int_equal(e2e_daemon_stop(c, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* 9. Deaths while the alerting instance is down: delivered after restart   */
/* ------------------------------------------------------------------------ */

static void test_deaths_while_alerting_down_after_restart(void **state)
{
    (void)state;
    enum { DEATHS = 3 };
    recv_reset(RECV_OK);
    e2e_daemon_t *a = &g_a, *c = &g_c;
    assert_int_equal(start_daemon(a, true, "2000"), 0);
    assert_int_equal(start_daemon(c, false, NULL), 0);
    wait_alert_mark();
    assert_int_equal(e2e_daemon_stop(a, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    char qs[DEATHS][64];
    long long ids[DEATHS];
    for (int i = 0; i < DEATHS; i++) {
        e2e_queue_name(qs[i], sizeof qs[i], "down");
        ids[i] = make_death(c->port, qs[i], "while down");
    }
    /* C ticked every one (its promise moved past the death's "now"). */
    for (int i = 0; i < DEATHS; i++)
        WAIT_FOR(timer_promise(qs[i]) > e2e_wall_ms() + 500, DELIVER_TIMEOUT_MS,
                 "queue %s: the death's tick did not run", qs[i]);
    assert_int_equal(atomic_load(&g_recv.requests), 0);
    assert_int_equal(start_daemon(a, true, "2000"), 0);
    long long t0 = e2e_mono_ms();
    int got = 0;
    for (long long deadline = t0 + FLEET_DELIVER_MS; e2e_mono_ms() < deadline;) {
        got = 0;
        for (int i = 0; i < DEATHS; i++) got += recv_count(qs[i], ids[i]) == 1;
        if (got == DEATHS) break;
        e2e_pause_ms(20);
    }
    printf("test_alerts: after the restart: %d of %d deaths delivered in %lld ms\n", got,
           DEATHS, e2e_mono_ms() - t0);
    if (got != DEATHS)
        fail_msg("%d of %d deaths made while the alerting instance was down were delivered "
                 "within %d ms of its restart", got, DEATHS, FLEET_DELIVER_MS);
    assert_int_equal(e2e_daemon_stop(a, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    assert_int_equal(e2e_daemon_stop(c, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* 10. A policy alert_url alone makes alerts flow                           */
/* ------------------------------------------------------------------------ */

static void test_policy_alert_url_without_flag(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "policyonly");
    recv_reset(RECV_OK);
    e2e_daemon_t *c = &g_c;
    assert_int_equal(start_daemon(c, false, NULL), 0);
    char own[64];
    snprintf(own, sizeof own, "http://127.0.0.1:%d/own", g_recv.port2);
    e2e_response_t r = { 0 };
    e2e_http_via(g_conns, 3, c->port, &r, "PUT", e2e_fmt("/queues/%s/policy", q),
                 e2e_fmt("{\"alert_url\":\"%s\"}", own));
    assert_int_equal(r.status, 200);
    e2e_response_free(&r);
    long long id = make_death(c->port, q, "policy only");
    long long t0 = e2e_mono_ms();
    WAIT_FOR(recv_count_at(1, q, id) == 1, FLEET_DELIVER_MS,
             "queue %s's death did not reach its alert_url within %d ms (no --alert-url)", q,
             FLEET_DELIVER_MS);
    printf("test_alerts: policy alert_url alone: delivered after %lld ms\n", e2e_mono_ms() - t0);
    WAIT_FOR(group_pending(q) == 0, DELIVER_TIMEOUT_MS, "the event stays pending");
    assert_int_equal(recv_count_at(0, q, 0), 0);
    assert_int_equal(metric(c->port, "retryd_alert_deliveries_total"), 1);
    assert_int_equal(e2e_daemon_stop(c, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, test_setup, test_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_fail_stall_recover_delivers_once),
        T(test_two_instances_deliver_each_death_once),
        T(test_crash_mid_delivery_is_claimed_back),
        T(test_without_alert_url_nothing_is_sent),
        T(test_stalled_receiver_never_slows_claims),
        T(test_sigterm_mid_post_leaves_entry_for_another),
        T(test_policy_alert_url_routes_a_queue),
        T(test_mixed_fleet_delivers_every_death),
        T(test_deaths_while_alerting_down_after_restart),
        T(test_policy_alert_url_without_flag),
    };
    return cmocka_run_group_tests_name("alerts", tests, group_setup, group_teardown);
}
