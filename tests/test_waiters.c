/* test_waiters.c - src/waiters.c in process (docs/long-poll.md): parked
 * claims on a real loop and store, against the redis-server of
 * scripts/test.sh. A parked claim is served when Redis's pub/sub says its
 * queue was written to, when the process notifies it (rd_waiters_notify),
 * by the promoter's safety net while the notification link is down
 * (rd_waiters_poll_if_deaf), and answered "nothing" when its wait runs out
 * or the waiters stop. The HTTP exchange a waiter watches is the test's
 * (the Makefile wraps rd_http_exchange_client_alive). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "unit_support.h"
#include "retryd/waiters.h"
#include "retryd/keys.h"
#include "retryd/shard_admin.h"
#include "retryd/shard_view.h"

/* The stand-in for a client's exchange: alive while .alive. */
typedef struct fake_ex {
    bool alive;
} fake_ex_t;

bool __wrap_rd_http_exchange_client_alive(const rd_http_exchange_t *ex);
bool __wrap_rd_http_exchange_client_alive(const rd_http_exchange_t *ex)
{
    return ((const fake_ex_t *)(const void *)ex)->alive;
}

#define EX(f) ((rd_http_exchange_t *)(void *)(f))

typedef struct got {
    int calls;
    rd_store_status_t status;
    size_t count;
    long long id;
    long long at_ms;
} got_t;

static void on_messages(const rd_store_messages_t *res, void *arg)
{
    got_t *g = arg;
    g->calls++;
    g->status = res->head.status;
    g->count = res->count;
    g->id = res->count ? res->messages[0].id : 0;
    g->at_ms = e2e_mono_ms();
}

typedef struct fixture {
    uv_loop_t loop;
    ut_store_t s;
    rd_waiters_t *w;
    bool w_closed;
    char qbuf[64];
    rd_store_queue_t q;
    fake_ex_t ex;
} fixture_t;

static const rd_lease_t LEASE = { 30000, true };

/* notify_port: where the notification link connects (the test's Redis, or
 * a dead port to make it deaf). */
static fixture_t *fixture_open(int notify_port)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    ut_store_open(&f->s, &f->loop, ut_test_redis_port(), 5000, "unit");
    f->q = ut_queue(f->qbuf, sizeof f->qbuf, "wait");
    f->ex.alive = true;
    rd_redis_options_t link = { .host = "127.0.0.1", .port = notify_port, .timeout_ms = 1000 };
    f->w = rd_waiters_new(&f->loop, f->s.store, &link, "unit");
    assert_true(ut_run_until(&f->loop, rd_store_ready(f->s.store), 10000));
    return f;
}

static void on_w_closed(void *arg)
{
    ((fixture_t *)arg)->w_closed = true;
}

static void fixture_close(fixture_t *f)
{
    rd_waiters_close(f->w, on_w_closed, f);
    assert_true(ut_run_until(&f->loop, f->w_closed, 5000));
    ut_store_close(&f->s, &f->loop);
    ut_loop_close(&f->loop);
    free(f);
}

static uint64_t answered(fixture_t *f)
{
    return rd_store_rtt(f->s.store)->count;
}

static void enqueue(fixture_t *f, long long *id)
{
    got_t g = { 0 };
    assert_int_equal(rd_store_enqueue(f->s.store, f->q,
            &(rd_enqueue_t){ .payload = "p", .len = 1, .ttl_ms = -1 },
            on_messages, &g), 0);
    assert_true(ut_run_until(&f->loop, g.calls == 1, 5000));
    assert_int_equal(g.status, RD_STORE_OK);
    *id = g.id;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

/* Parked on an empty queue, the claim is served by the enqueue's PUBLISH:
 * nothing else tells this process of the write. */
static void test_parked_claim_woken_by_pubsub(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port());
    got_t g = { 0 };
    uint64_t before = answered(f);
    long long parked = e2e_mono_ms();
    rd_waiters_park(f->w, f->q, LEASE, 1, NULL, 10000, EX(&f->ex), on_messages, &g);
    assert_int_equal(rd_waiters_count(f->w), 1);
    /* Once subscribed it claims once (nothing yet) and stays parked. */
    assert_true(ut_run_until(&f->loop, answered(f) > before, 5000));
    assert_int_equal(g.calls, 0);
    assert_int_equal(rd_waiters_count(f->w), 1);

    long long id;
    enqueue(f, &id);
    assert_true(ut_run_until(&f->loop, g.calls == 1, 5000));
    assert_int_equal(g.status, RD_STORE_OK);
    assert_int_equal(g.count, 1);
    assert_int_equal(g.id, id);
    assert_true(g.at_ms - parked < 5000);   /* long before its 10 s wait */
    assert_int_equal(rd_waiters_count(f->w), 0);
    fixture_close(f);
}

/* The notification link is down (nothing listens where it connects): no
 * PUBLISH reaches it, so the claim waits until rd_waiters_notify, or
 * rd_waiters_poll_if_deaf, serves it. */
static void test_parked_claim_woken_by_notify_when_deaf(void **state)
{
    (void)state;
    fake_start(FAKE_REFUSE, NULL);
    fixture_t *f = fixture_open(g_fake.port);
    got_t g = { 0 }, h = { 0 };
    uint64_t before = answered(f);
    rd_waiters_park(f->w, f->q, LEASE, 1, NULL, 10000, EX(&f->ex), on_messages, &g);
    assert_true(ut_run_until(&f->loop, answered(f) > before, 5000));   /* claimed nothing */
    long long id;
    enqueue(f, &id);
    ut_run_for(&f->loop, 300);
    assert_int_equal(g.calls, 0);   /* deaf: the PUBLISH never came */
    rd_waiters_notify(f->w, f->q);
    assert_true(ut_run_until(&f->loop, g.calls == 1, 5000));
    assert_int_equal(g.count, 1);
    assert_int_equal(g.id, id);

    /* The promoter's safety net does the same while the link is down. */
    before = answered(f);
    rd_waiters_park(f->w, f->q, LEASE, 1, NULL, 10000, EX(&f->ex), on_messages, &h);
    assert_true(ut_run_until(&f->loop, answered(f) > before, 5000));
    enqueue(f, &id);
    assert_int_equal(h.calls, 0);
    rd_waiters_poll_if_deaf(f->w);
    assert_true(ut_run_until(&f->loop, h.calls == 1, 5000));
    assert_int_equal(h.count, 1);
    assert_int_equal(h.id, id);
    fixture_close(f);
    fake_stop();
}

/* Nothing arrives: answered "nothing claimed" when the wait runs out. */
static void test_wait_runs_out(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port());
    got_t g = { 0 };
    long long parked = e2e_mono_ms();
    rd_waiters_park(f->w, f->q, LEASE, 1, NULL, 300, EX(&f->ex), on_messages, &g);
    assert_true(ut_run_until(&f->loop, g.calls == 1, 5000));
    assert_int_equal(g.status, RD_STORE_OK);
    assert_int_equal(g.count, 0);
    assert_true(g.at_ms - parked >= 290);
    assert_true(g.at_ms - parked < 3000);
    assert_int_equal(rd_waiters_count(f->w), 0);
    ut_run_for(&f->loop, 50);
    assert_int_equal(g.calls, 1);
    fixture_close(f);
}

/* First come, first served: two waiters, one message, the first gets it;
 * stopping answers the other at once, and a park after that too. */
static void test_first_come_first_served_and_stop(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port());
    got_t a = { 0 }, b = { 0 }, c = { 0 };
    uint64_t before = answered(f);
    rd_waiters_park(f->w, f->q, LEASE, 1, NULL, 10000, EX(&f->ex), on_messages, &a);
    rd_waiters_park(f->w, f->q, LEASE, 1, NULL, 10000, EX(&f->ex), on_messages, &b);
    assert_true(ut_run_until(&f->loop, answered(f) > before, 5000));
    long long id;
    enqueue(f, &id);
    assert_true(ut_run_until(&f->loop, a.calls == 1, 5000));
    assert_int_equal(a.id, id);
    ut_run_for(&f->loop, 100);
    assert_int_equal(b.calls, 0);
    assert_int_equal(rd_waiters_count(f->w), 1);
    rd_waiters_stop(f->w);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.count, 0);
    rd_waiters_park(f->w, f->q, LEASE, 1, NULL, 10000, EX(&f->ex), on_messages, &c);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.count, 0);
    fixture_close(f);
}

/* The client left while it waited: the message its claim took goes back
 * (pending again, no failure counted) and the next claim gets it. */
static void test_departed_client_hands_messages_back(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port());
    fake_ex_t gone = { true };
    got_t g = { 0 };
    uint64_t before = answered(f);
    rd_waiters_park(f->w, f->q, LEASE, 1, NULL, 10000, EX(&gone), on_messages, &g);
    assert_true(ut_run_until(&f->loop, answered(f) > before, 5000));
    gone.alive = false;
    long long id;
    enqueue(f, &id);
    assert_true(ut_run_until(&f->loop, g.calls == 1, 5000));
    assert_int_equal(g.count, 0);
    /* The release was sent before the answer, on the same link: a claim
     * sent now runs after it. */
    got_t get = { 0 };
    assert_int_equal(rd_store_claim(f->s.store, f->q, LEASE, 1, NULL, on_messages, &get), 0);
    assert_true(ut_run_until(&f->loop, get.calls == 1, 5000));
    assert_int_equal(get.count, 1);
    assert_int_equal(get.id, id);
    fixture_close(f);
}

/* Redis stops answering while a claim waits: the claim in flight is lost
 * with the link, and the waiter hears so (not "nothing due"). */
/* Thousands of queues with a waiter each (issue 19 item 6: every local
 * enqueue used to walk a list of them): each enqueue wakes its own queue's
 * waiter and no other, through the table's growth past 64 buckets and its
 * shrinking back, and once the waits run out every queue's subscription is
 * released (before, 26,000 SUBSCRIBEs stayed live). */
static void test_many_queues_woken_alone_and_released(void **state)
{
    (void)state;
    enum { N = 3000, EVERY = 10, WAIT_MS = 5000 };
    fixture_t *f = fixture_open(ut_test_redis_port());
    redisContext *admin = redisConnect("127.0.0.1", ut_test_redis_port());
    assert_true(admin != NULL && admin->err == 0);
    static char names[N][48];
    static got_t got[N];
    memset(got, 0, sizeof got);
    char pattern[80];
    snprintf(pattern, sizeof pattern, "unit:{many%ld-*}:wake", (long)getpid());
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "many%ld-%d", (long)getpid(), i);
        rd_store_queue_t q = { .name = names[i], .len = strlen(names[i]) };
        rd_waiters_park(f->w, q, LEASE, 1, NULL, WAIT_MS, EX(&f->ex), on_messages, &got[i]);
    }
    assert_int_equal(rd_waiters_count(f->w), N);
    /* Every queue subscribed (and its first claim found nothing). */
    long long deadline = e2e_mono_ms() + 10000;
    for (;;) {
        redisReply *x = redisCommand(admin, "PUBSUB CHANNELS %s", pattern);
        assert_non_null(x);
        size_t n = x->elements;
        freeReplyObject(x);
        if (n == N) break;
        if (e2e_mono_ms() > deadline) fail_msg("%zu of %d queues subscribed", n, N);
        ut_run_for(&f->loop, 20);
    }
    /* An enqueue into every tenth queue wakes its waiter, and only it. */
    long long ids[N / EVERY];
    for (int i = 0; i < N; i += EVERY) {
        got_t e = { 0 };
        rd_store_queue_t q = { .name = names[i], .len = strlen(names[i]) };
        assert_int_equal(rd_store_enqueue(f->s.store, q,
                &(rd_enqueue_t){ .payload = "p", .len = 1, .ttl_ms = -1 }, on_messages, &e), 0);
        assert_true(ut_run_until(&f->loop, e.calls == 1, 5000));
        assert_int_equal(e.status, RD_STORE_OK);
        ids[i / EVERY] = e.id;
    }
    for (int i = 0; i < N; i += EVERY) {
        assert_true(ut_run_until(&f->loop, got[i].calls == 1, 5000));
        assert_int_equal(got[i].status, RD_STORE_OK);
        assert_int_equal(got[i].count, 1);
        assert_int_equal(got[i].id, ids[i / EVERY]);
    }
    for (int i = 0; i < N; i++)
        if (i % EVERY != 0 && got[i].calls != 0) fail_msg("queue %d woken by another's enqueue", i);
    assert_int_equal(rd_waiters_count(f->w), N - N / EVERY);
    /* The others' waits run out; then every subscription goes. */
    assert_true(ut_run_until(&f->loop, rd_waiters_count(f->w) == 0, WAIT_MS + 10000));
    for (int i = 0; i < N; i++) assert_int_equal(got[i].calls, 1);
    deadline = e2e_mono_ms() + 10000;
    for (;;) {
        redisReply *x = redisCommand(admin, "PUBSUB CHANNELS %s", pattern);
        assert_non_null(x);
        size_t n = x->elements;
        freeReplyObject(x);
        if (n == 0) break;
        if (e2e_mono_ms() > deadline) fail_msg("%zu subscriptions left after the waits", n);
        ut_run_for(&f->loop, 50);
    }
    redisFree(admin);
    fixture_close(f);
}

static void test_redis_gone_while_parked(void **state)
{
    (void)state;
    fake_start(FAKE_ANSWER, "*2\r\n$2\r\nok\r\n:-1\r\n");   /* a claim that found nothing */
    fixture_t *f = calloc(1, sizeof *f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    ut_store_open(&f->s, &f->loop, g_fake.port, 300, "unit");
    f->q = ut_queue(f->qbuf, sizeof f->qbuf, "gone");
    f->ex.alive = true;
    /* The store talks to the fake, the notification link to the real one. */
    rd_redis_options_t link = { .host = "127.0.0.1", .port = ut_test_redis_port(),
                                .timeout_ms = 1000 };
    f->w = rd_waiters_new(&f->loop, f->s.store, &link, "unit");
    assert_true(ut_run_until(&f->loop, rd_store_ready(f->s.store), 5000));
    got_t g = { 0 };
    uint64_t before = answered(f);
    rd_waiters_park(f->w, f->q, LEASE, 1, NULL, 2000, EX(&f->ex), on_messages, &g);
    /* Subscribed, it claimed: nothing. Once at the subscription, and once
     * more at the park when the notification link was not up yet (under
     * load it may come up after the store's). */
    redisContext *admin = redisConnect("127.0.0.1", ut_test_redis_port());
    assert_true(admin != NULL && admin->err == 0);
    long long deadline = e2e_mono_ms() + 5000;
    for (;;) {
        redisReply *x = redisCommand(admin, "PUBSUB NUMSUB unit:{%s}:wake", f->qbuf);
        assert_non_null(x);
        bool subscribed = x->elements == 2 && x->element[1]->integer == 1;
        freeReplyObject(x);
        int sent = atomic_load(&g_fake.commands);
        if (subscribed && sent >= 1 && answered(f) - before == (uint64_t)sent) break;
        if (e2e_mono_ms() > deadline) fail_msg("not subscribed, or a claim not answered");
        ut_run_for(&f->loop, 10);
    }
    redisFree(admin);
    assert_true(atomic_load(&g_fake.commands) <= 2);
    assert_int_equal(g.calls, 0);
    /* The next claim (a notify) gets no answer: lost after the deadline. */
    atomic_store(&g_fake.mode, FAKE_SILENT);
    rd_waiters_notify(f->w, f->q);
    long long sent = e2e_mono_ms();
    assert_true(ut_run_until(&f->loop, g.calls == 1, 5000));
    assert_int_equal(g.status, RD_STORE_LOST);
    assert_true(g.at_ms - sent < 1500);   /* the link's deadline, before the wait's */
    assert_int_equal(rd_waiters_count(f->w), 0);
    fixture_close(f);
    fake_stop();
}

static void on_copied(const rd_shard_admin_result_t *res, void *arg)
{
    (void)res;
    ++*(int *)arg;
}

/* Regression test (found in review of steps 7-8; the behaviour below is
 * what it caught, fixed since): a long-poll on a sharded queue visits the shards in
 * turn (docs/sharding.md section 4). A send that lands on the shard being
 * visited right behind that visit's claim wakes the queue while the claim
 * is in flight; on a queue of one shard that wake claims again (q->again),
 * but here the visits' own "next shard" consumes it, the last shard finds
 * nothing and the waiter stays parked with a claimable message: it is
 * answered only when its wait runs out. The same sequence on a queue of
 * one shard is served at once (the control below). */
static void test_sharded_wake_during_visits_is_not_lost(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port());
    redisContext *r = redisConnect("127.0.0.1", ut_test_redis_port());
    assert_true(r != NULL && r->err == 0);
    redisReply *x = redisCommand(r, "FCALL %s 1 unit:{%b} raise 3 0,0", RD_FUNCTION("shards_set"),
                                 f->q.name, f->q.len);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    freeReplyObject(x);
    redisFree(r);
    int copied = 0;
    assert_int_equal(rd_shard_admin_copy(f->s.store, f->q, on_copied, &copied), 0);
    assert_true(ut_run_until(&f->loop, copied == 1, 5000));
    rd_shard_views_t *views = rd_store_views(f->s.store);
    rd_store_learn_view(f->s.store, f->q);
    assert_true(ut_run_until(&f->loop,
                             rd_shard_views_find(views, f->q, rd_store_now_ms(f->s.store)) != NULL,
                             5000));

    /* Parked: once subscribed, the first serving visits the 3 shards. */
    got_t g = { 0 };
    uint64_t before = answered(f);
    rd_waiters_park(f->w, f->q, LEASE, 1, NULL, 8000, EX(&f->ex), on_messages, &g);
    assert_true(ut_run_until(&f->loop, answered(f) >= before + 3, 5000));
    ut_run_for(&f->loop, 100);
    assert_int_equal(g.calls, 0);

    /* A wake starts a serving; its first claim goes to shard s, and a send
     * to shard s goes on the link right behind it (as any send that comes
     * while that claim is in flight). Its PUBLISH wakes the queue while the
     * visits go on. */
    rd_shard_view_t *v = rd_shard_views_find(views, f->q, rd_store_now_ms(f->s.store));
    assert_non_null(v);
    int s = (int)(v->next % (unsigned)v->n);
    rd_waiters_notify(f->w, f->q);
    got_t e = { 0 };
    assert_int_equal(rd_store_enqueue(f->s.store, rd_shard_view_at(v, f->q, s),
            &(rd_enqueue_t){ .payload = "p", .len = 1, .ttl_ms = -1 }, on_messages, &e), 0);
    assert_true(ut_run_until(&f->loop, e.calls == 1, 5000));
    assert_int_equal(e.status, RD_STORE_OK);
    assert_int_equal(e.id / RD_SHARD_SPAN, s);
    /* Served long before its 8 s wait runs out. */
    bool served = ut_run_until(&f->loop, g.calls == 1, 3000);
    if (!served) fail_msg("the send to shard %d was not claimed for the parked waiter within 3 s", s);
    assert_int_equal(g.count, 1);
    assert_int_equal(g.id, e.id);
    fixture_close(f);
}

/* The control: the same sequence on a queue of one shard (passes). */
static void test_one_shard_wake_during_claim_is_not_lost(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port());
    got_t g = { 0 };
    uint64_t before = answered(f);
    rd_waiters_park(f->w, f->q, LEASE, 1, NULL, 8000, EX(&f->ex), on_messages, &g);
    assert_true(ut_run_until(&f->loop, answered(f) >= before + 1, 5000));
    ut_run_for(&f->loop, 100);
    assert_int_equal(g.calls, 0);
    rd_waiters_notify(f->w, f->q);
    got_t e = { 0 };
    assert_int_equal(rd_store_enqueue(f->s.store, f->q,
            &(rd_enqueue_t){ .payload = "p", .len = 1, .ttl_ms = -1 }, on_messages, &e), 0);
    assert_true(ut_run_until(&f->loop, e.calls == 1, 5000));
    assert_true(ut_run_until(&f->loop, g.calls == 1, 3000));
    assert_int_equal(g.count, 1);
    assert_int_equal(g.id, e.id);
    fixture_close(f);
}

int main(void)
{
    rd_log_set_level(RD_LOG_ERROR + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parked_claim_woken_by_pubsub),
        cmocka_unit_test(test_parked_claim_woken_by_notify_when_deaf),
        cmocka_unit_test(test_wait_runs_out),
        cmocka_unit_test(test_first_come_first_served_and_stop),
        cmocka_unit_test(test_departed_client_hands_messages_back),
        cmocka_unit_test(test_many_queues_woken_alone_and_released),
        cmocka_unit_test(test_redis_gone_while_parked),
        cmocka_unit_test(test_one_shard_wake_during_claim_is_not_lost),
        cmocka_unit_test(test_sharded_wake_during_visits_is_not_lost),
    };
    if (ut_test_redis_port() == 0) {
        fprintf(stderr, "test_waiters: RETRYD_TEST_REDIS_PORT is not set (run it through scripts/test.sh)\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
