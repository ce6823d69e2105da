/* test_alerts_unit.c - src/alerts.c in process (docs/dead-letters.md "Alert
 * webhooks"): the alert sender and the store on a real loop, against the
 * redis-server of scripts/test.sh and the HTTP receiver of
 * tests/alert_receiver.h. A death is POSTed once when the queue is woken
 * and acknowledged (a second wake sends nothing); a failed POST is retried
 * after its backoff until the receiver takes it. test_alerts.c is the
 * daemon-level suite. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "alert_receiver.h"
#include "unit_support.h"
#include "retryd/alerts.h"

typedef struct got {
    int calls;
    rd_store_status_t status;
    long long id;
    char token[64];
    rd_status_t mstatus;
} got_t;

static void on_messages(const rd_store_messages_t *res, void *arg)
{
    got_t *g = arg;
    g->calls++;
    g->status = res->head.status;
    if (res->count == 0) return;
    g->id = res->messages[0].id;
    g->mstatus = res->messages[0].status;
    snprintf(g->token, sizeof g->token, "%.*s", (int)res->messages[0].lease_token.len,
             res->messages[0].lease_token.ptr ? res->messages[0].lease_token.ptr : "");
}

typedef struct fixture {
    uv_loop_t loop;
    ut_store_t s;
    rd_alerts_t *alerts;
    bool stopped;
    char qbuf[64];
    rd_store_queue_t q;
    char url[64];
} fixture_t;

static fixture_t *fixture_open_with(long long timeout_ms)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    ut_store_open(&f->s, &f->loop, ut_test_redis_port(), 5000, "unit");
    f->q = ut_queue(f->qbuf, sizeof f->qbuf, "alert");
    snprintf(f->url, sizeof f->url, "http://127.0.0.1:%d/hook", g_recv.port);
    assert_true(ut_run_until(&f->loop, rd_store_ready(f->s.store), 10000));
    rd_alerts_options_t ao = { .url = f->url, .claim_ms = 30000, .timeout_ms = timeout_ms };
    f->alerts = rd_alerts_start(&f->loop, f->s.store, &ao);
    assert_non_null(f->alerts);
    return f;
}

static fixture_t *fixture_open(void)
{
    return fixture_open_with(2000);
}

static void on_stopped(void *arg)
{
    ((fixture_t *)arg)->stopped = true;
}

static void fixture_close(fixture_t *f)
{
    rd_alerts_stop(f->alerts, on_stopped, f);
    assert_true(ut_run_until(&f->loop, f->stopped, 8000));
    ut_store_close(&f->s, &f->loop);
    ut_loop_close(&f->loop);
    free(f);
}

/* Enqueued, claimed and failed for good: one death in the events stream. */
static long long kill_one(fixture_t *f, const char *error)
{
    got_t enq = { 0 }, claim = { 0 }, fail = { 0 };
    assert_int_equal(rd_store_enqueue(f->s.store, f->q,
            &(rd_enqueue_t){ .payload = "p", .len = 1, .max_retries = 1, .ttl_ms = -1 },
            on_messages, &enq), 0);
    assert_true(ut_run_until(&f->loop, enq.calls == 1, 5000));
    rd_lease_t lease = { 30000, true };
    assert_int_equal(rd_store_claim(f->s.store, f->q, lease, 1, NULL, on_messages, &claim), 0);
    assert_true(ut_run_until(&f->loop, claim.calls == 1, 5000));
    assert_int_equal(claim.id, enq.id);
    assert_int_equal(rd_store_fail(f->s.store, f->q, claim.id, claim.token, error, false, -1,
                                   on_messages, &fail), 0);
    assert_true(ut_run_until(&f->loop, fail.calls == 1, 5000));
    assert_int_equal(fail.status, RD_STORE_OK);
    assert_int_equal(fail.mstatus, RD_STATUS_DEAD);
    return enq.id;
}

/* The value of one metric line ("name value") in the sender's metrics. */
static long long metric(fixture_t *f, const char *name)
{
    rd_buf_t out = RD_BUF_INIT;
    rd_alerts_render_metrics(f->alerts, &out);
    rd_buf_putc(&out, '\0');
    char want[96];
    snprintf(want, sizeof want, "\n%s ", name);
    const char *at = strstr(out.data, want);
    long long v = at ? strtoll(at + strlen(want), NULL, 10) : -1;
    rd_buf_free(&out);
    return v;
}

static bool delivered_has(const char *needle)
{
    bool found = false;
    pthread_mutex_lock(&g_recv.lock);
    for (int i = 0; i < g_recv.ndelivered; i++)
        if (strstr(g_recv.delivered[i], needle)) found = true;
    pthread_mutex_unlock(&g_recv.lock);
    return found;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void test_death_delivered_once(void **state)
{
    (void)state;
    recv_reset(RECV_OK);
    fixture_t *f = fixture_open();
    long long id = kill_one(f, "boom: disk full");
    rd_alerts_wake(f->alerts, f->q);
    assert_true(ut_run_until(&f->loop, recv_count(f->qbuf, id) == 1, 10000));
    assert_true(delivered_has("boom: disk full"));
    /* Acknowledged: nothing held, one delivery counted. */
    assert_true(ut_run_until(&f->loop, metric(f, "retryd_alert_held") == 0, 5000));
    assert_int_equal(metric(f, "retryd_alert_deliveries_total"), 1);
    assert_int_equal(metric(f, "retryd_alert_failures_total"), 0);

    /* Woken again: the entry was acknowledged, nothing is sent twice. */
    rd_alerts_wake(f->alerts, f->q);
    ut_run_for(&f->loop, 500);
    assert_int_equal(recv_count(f->qbuf, id), 1);
    assert_int_equal(atomic_load(&g_recv.requests), 1);
    fixture_close(f);
}

static void test_failed_post_is_retried(void **state)
{
    (void)state;
    recv_reset(RECV_FAIL);
    fixture_t *f = fixture_open();
    long long id = kill_one(f, "retry me");
    rd_alerts_wake(f->alerts, f->q);
    assert_true(ut_run_until(&f->loop, atomic_load(&g_recv.failed) >= 1, 10000));
    long long failed_at = e2e_mono_ms();
    assert_int_equal(recv_count(f->qbuf, id), 0);
    assert_true(ut_run_until(&f->loop, metric(f, "retryd_alert_failures_total") >= 1, 5000));
    assert_int_equal(metric(f, "retryd_alert_held"), 1);   /* kept for the retry */

    atomic_store(&g_recv.mode, RECV_OK);
    assert_true(ut_run_until(&f->loop, recv_count(f->qbuf, id) == 1, 15000));
    /* Not at once: after the backoff (1 s for the first failure). */
    assert_true(e2e_mono_ms() - failed_at >= 500);
    assert_true(ut_run_until(&f->loop, metric(f, "retryd_alert_held") == 0, 5000));
    assert_int_equal(metric(f, "retryd_alert_deliveries_total"), 1);
    fixture_close(f);
}

/* A receiver that never answers: the POST times out (--alert-timeout-ms),
 * counts as a failure, and the event is sent again; the engine's calls go
 * on meanwhile. */
static void test_stalled_receiver_times_out_and_is_retried(void **state)
{
    (void)state;
    recv_reset(RECV_STALL);
    fixture_t *f = fixture_open_with(400);
    long long id = kill_one(f, "stall");
    rd_alerts_wake(f->alerts, f->q);
    assert_true(ut_run_until(&f->loop, atomic_load(&g_recv.stalled) >= 1, 10000));
    long long stalled_at = e2e_mono_ms();
    assert_true(ut_run_until(&f->loop, metric(f, "retryd_alert_failures_total") >= 1, 5000));
    assert_true(e2e_mono_ms() - stalled_at >= 300);
    got_t get = { 0 };
    assert_int_equal(rd_store_get(f->s.store, f->q, id, on_messages, &get), 0);
    assert_true(ut_run_until(&f->loop, get.calls == 1, 2000));
    assert_int_equal(get.mstatus, RD_STATUS_DEAD);
    atomic_store(&g_recv.mode, RECV_OK);
    assert_true(ut_run_until(&f->loop, recv_count(f->qbuf, id) == 1, 15000));
    assert_true(ut_run_until(&f->loop, metric(f, "retryd_alert_held") == 0, 5000));
    fixture_close(f);
}

static int group_setup(void **state)
{
    (void)state;
    return recv_start();
}

static int group_teardown(void **state)
{
    (void)state;
    recv_stop();
    return 0;
}

int main(void)
{
    rd_log_set_level(RD_LOG_ERROR + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_death_delivered_once),
        cmocka_unit_test(test_failed_post_is_retried),
        cmocka_unit_test(test_stalled_receiver_times_out_and_is_retried),
    };
    if (ut_test_redis_port() == 0) {
        fprintf(stderr, "test_alerts_unit: RETRYD_TEST_REDIS_PORT is not set (run it through scripts/test.sh)\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
