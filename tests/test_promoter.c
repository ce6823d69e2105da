/* test_promoter.c - src/promoter.c in process (docs/design.md "Timers and
 * the registry"): the promoter, the registry and the store on a real loop,
 * against the redis-server of scripts/test.sh. A delayed message is promoted
 * by a tick once due (not before), an expired lease is reclaimed (failed
 * with "lease expired", pending again); against a fake RESP server that
 * answers every call with garbage, the rounds fail, are retried on the next
 * tick, and the promoter still stops cleanly. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "unit_support.h"
#include "retryd/promoter.h"
#include "retryd/registry.h"

typedef struct got {
    int calls;
    rd_store_status_t status;
    size_t count;
    long long id;
    rd_status_t mstatus;
    int retry_count;
    char last_error[64];
    long long at_ms;
} got_t;

static void on_messages(const rd_store_messages_t *res, void *arg)
{
    got_t *g = arg;
    g->calls++;
    g->status = res->head.status;
    g->count = res->count;
    g->at_ms = e2e_mono_ms();
    if (res->count == 0) return;
    const rd_message_t *m = &res->messages[0];
    g->id = m->id;
    g->mstatus = m->status;
    g->retry_count = m->retry_count;
    snprintf(g->last_error, sizeof g->last_error, "%.*s",
             m->last_error.ptr ? (int)m->last_error.len : 0,
             m->last_error.ptr ? m->last_error.ptr : "");
}

typedef struct fixture {
    uv_loop_t loop;
    ut_store_t s;
    rd_registry_t *registry;
    rd_promoter_t *promoter;
    bool stopped;
    int rounds;
    int claimable;                /* on_claimable calls for q */
    long long claimable_at_ms;    /* the first of them */
    char qbuf[64];
    rd_store_queue_t q;
} fixture_t;

static void on_claimable(rd_store_queue_t queue, void *arg)
{
    fixture_t *f = arg;
    if (queue.len != f->q.len || memcmp(queue.name, f->q.name, queue.len) != 0) return;
    if (f->claimable++ == 0) f->claimable_at_ms = e2e_mono_ms();
}

static void on_round(void *arg)
{
    fixture_t *f = arg;
    f->rounds++;
    rd_registry_flush_owed(f->registry);
}

static fixture_t *fixture_open(int port)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    ut_store_open(&f->s, &f->loop, port, 2000, "unit");
    f->registry = rd_registry_new(&f->loop, f->s.store, false);
    f->q = ut_queue(f->qbuf, sizeof f->qbuf, "prom");
    assert_true(ut_run_until(&f->loop, rd_store_ready(f->s.store), 10000));
    return f;
}

static void promoter_start(fixture_t *f)
{
    rd_promoter_options_t po = {
        .tick_ms = 100, .batch = 100, .on_claimable = on_claimable, .on_claimable_arg = f,
        .on_round = on_round, .on_round_arg = f,
    };
    f->promoter = rd_promoter_start(&f->loop, f->s.store, &po);
}

static void on_stopped(void *arg)
{
    ((fixture_t *)arg)->stopped = true;
}

static void fixture_close(fixture_t *f)
{
    rd_promoter_stop(f->promoter, on_stopped, f);
    assert_true(ut_run_until(&f->loop, f->stopped, 5000));
    /* As server.c does: the link first, then what sits above the store. */
    rd_backend_close(f->s.backend, true, ut_on_backend_closed, &f->s);
    assert_true(ut_run_until(&f->loop, f->s.closed, 5000));
    rd_registry_free(f->registry);
    rd_store_free(f->s.store);
    ut_loop_close(&f->loop);
    free(f);
}

static got_t call_get(fixture_t *f, long long id)
{
    got_t g = { 0 };
    assert_int_equal(rd_store_get(f->s.store, f->q, id, on_messages, &g), 0);
    assert_true(ut_run_until(&f->loop, g.calls == 1, 5000));
    assert_int_equal(g.status, RD_STORE_OK);
    return g;
}

static got_t call_claim(fixture_t *f, rd_lease_t lease)
{
    got_t g = { 0 };
    assert_int_equal(rd_store_claim(f->s.store, f->q, lease, 1, NULL, on_messages, &g), 0);
    assert_true(ut_run_until(&f->loop, g.calls == 1, 5000));
    assert_int_equal(g.status, RD_STORE_OK);
    return g;
}

static const rd_lease_t LEASE = { 30000, true };

/* Polls (the promoter runs meanwhile): the loop turns for 50 ms between
 * calls, so waiting costs a few calls, not thousands. */
static got_t paced_get(fixture_t *f, long long id)
{
    ut_run_for(&f->loop, 50);
    return call_get(f, id);
}

static got_t paced_claim(fixture_t *f, rd_lease_t lease)
{
    ut_run_for(&f->loop, 50);
    return call_claim(f, lease);
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

/* Enqueued with a delay, the message is not claimable until a tick promotes
 * it; the tick that does says the queue is claimable. */
static void test_due_message_promoted_by_a_tick(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port());
    promoter_start(f);
    got_t enq = { 0 };
    long long enqueued = e2e_mono_ms();
    assert_int_equal(rd_store_enqueue(f->s.store, f->q,
            &(rd_enqueue_t){ .payload = "later", .len = 5, .delay_ms = 500, .ttl_ms = -1 },
            on_messages, &enq), 0);
    assert_true(ut_run_until(&f->loop, enq.calls == 1, 5000));
    assert_int_equal(enq.status, RD_STORE_OK);
    assert_int_equal(call_claim(f, LEASE).count, 0);   /* not due yet */

    assert_true(ut_run_until(&f->loop, f->claimable > 0, 5000));
    assert_true(f->claimable_at_ms - enqueued >= 480);
    assert_true(f->claimable_at_ms - enqueued < 3000);
    got_t c = call_claim(f, LEASE);
    assert_int_equal(c.count, 1);
    assert_int_equal(c.id, enq.id);
    assert_true(f->rounds >= 1);
    fixture_close(f);
}

/* A lease nobody settles: once it expires a tick fails it with "lease
 * expired" and it is pending again, claimable by the next worker. */
static void test_expired_lease_is_reclaimed(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port());
    got_t enq = { 0 };
    assert_int_equal(rd_store_enqueue(f->s.store, f->q,
            &(rd_enqueue_t){ .payload = "x", .len = 1, .max_retries = 5, .ttl_ms = -1 },
            on_messages, &enq), 0);
    assert_true(ut_run_until(&f->loop, enq.calls == 1, 5000));
    rd_lease_t short_lease = { 300, true };
    long long claimed = e2e_mono_ms();
    got_t c = call_claim(f, short_lease);
    assert_int_equal(c.count, 1);
    promoter_start(f);

    got_t g = { 0 };
    assert_true(ut_run_until(&f->loop, (g = paced_get(f, enq.id)).mstatus != RD_STATUS_PROCESSING,
                             5000));
    assert_true(e2e_mono_ms() - claimed >= 290);
    assert_int_equal(g.mstatus, RD_STATUS_PENDING);
    assert_int_equal(g.retry_count, 1);
    assert_string_equal(g.last_error, "lease expired");
    /* Its retry is scheduled with backoff: a later tick makes it claimable. */
    got_t again = { 0 };
    assert_true(ut_run_until(&f->loop, (again = paced_claim(f, LEASE)).count == 1, 10000));
    assert_int_equal(again.id, enq.id);
    fixture_close(f);
}

/* Every call answered with garbage: each round fails and the next tick
 * tries again; nothing crashes and the promoter stops. */
static void test_rounds_retried_after_errors(void **state)
{
    (void)state;
    fake_start(FAKE_ANSWER, ":7\r\n");
    fixture_t *f = fixture_open(g_fake.port);
    promoter_start(f);
    assert_true(ut_run_until(&f->loop, f->rounds >= 4 && atomic_load(&g_fake.commands) >= 4,
                             5000));
    assert_int_equal(f->claimable, 0);
    assert_true(rd_store_ready(f->s.store));
    fixture_close(f);
    fake_stop();
}

int main(void)
{
    rd_log_set_level(RD_LOG_ERROR + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_due_message_promoted_by_a_tick),
        cmocka_unit_test(test_expired_lease_is_reclaimed),
        cmocka_unit_test(test_rounds_retried_after_errors),
    };
    if (ut_test_redis_port() == 0) {
        fprintf(stderr, "test_promoter: RETRYD_TEST_REDIS_PORT is not set (run it through scripts/test.sh)\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
