/* test_store.c - src/store.c in process: the store on a real backend link
 * and loop. Against the redis-server of scripts/test.sh, operations end to
 * end (enqueue, claim, settle_claim, get); against a fake RESP server
 * (unit_support.h), the parsers' refusal of replies of the wrong shape
 * (RD_STORE_ERROR, never a crash), an error reply, and a link that drops
 * or goes silent mid-call: a write is LOST (outcome unknown, and the write
 * hook hears so), a read UNAVAILABLE (README "Errors"; docs/durability.md). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "unit_support.h"

#include "retryd/enqueue_chunks.h"
#include "retryd/enqueue_lines.h"
#include "retryd/limits.h"
#include "retryd/queue_clear.h"
#include "retryd/registry.h"
#include "retryd/shard_admin.h"
#include "retryd/shards.h"

/* ------------------------------------------------------------------------ */
/* What a callback saw (copied: results live only inside the callback)     */
/* ------------------------------------------------------------------------ */

typedef struct got {
    int calls;
    rd_store_status_t status;
    char detail[256];
    char state[32];
    size_t count;
    long long id;
    rd_status_t mstatus;
    char payload[64];
    char token[64];
    int retry_count;
    size_t settled;
    char outcome[32];
    char attributes[64];
    size_t attributes_len;     /* SIZE_MAX: none (ptr NULL) */
    long long first_received_ms, updated_ms;
    long long n;               /* a count's, or a clear's deleted */
    rd_clear_state_t clear;
    char strings[8][64];       /* the first strings of a strings result */
    size_t strings_count;
} got_t;

static void copy_str(char *dst, size_t cap, rd_str_t s)
{
    snprintf(dst, cap, "%.*s", s.ptr ? (int)s.len : 0, s.ptr ? s.ptr : "");
}

static void copy_head(got_t *g, const rd_store_head_t *h)
{
    g->calls++;
    g->status = h->status;
    copy_str(g->detail, sizeof g->detail, h->detail);
    copy_str(g->state, sizeof g->state, h->state);
}

static void copy_message(got_t *g, const rd_message_t *m)
{
    g->id = m->id;
    g->mstatus = m->status;
    g->retry_count = m->retry_count;
    copy_str(g->payload, sizeof g->payload, m->payload);
    copy_str(g->token, sizeof g->token, m->lease_token);
    g->attributes_len = m->attributes.ptr ? m->attributes.len : SIZE_MAX;
    if (m->attributes.ptr && m->attributes.len <= sizeof g->attributes)
        memcpy(g->attributes, m->attributes.ptr, m->attributes.len);
    g->first_received_ms = m->first_received_at_ms;
    g->updated_ms = m->updated_at_ms;
}

static void on_count(const rd_store_count_t *res, void *arg)
{
    got_t *g = arg;
    copy_head(g, &res->head);
    g->n = res->n;
}

static void on_cleared(const rd_store_cleared_t *res, void *arg)
{
    got_t *g = arg;
    copy_head(g, &res->head);
    g->n = res->deleted;
    g->clear = res->state;
}

static void on_strings(const rd_store_strings_t *res, void *arg)
{
    got_t *g = arg;
    copy_head(g, &res->head);
    g->strings_count = res->count;
    for (size_t i = 0; i < res->count && i < 8; i++)
        copy_str(g->strings[i], sizeof g->strings[i], res->strings[i]);
}

static void on_messages(const rd_store_messages_t *res, void *arg)
{
    got_t *g = arg;
    copy_head(g, &res->head);
    g->count = res->count;
    if (res->count > 0) copy_message(g, &res->messages[0]);
}

static void on_settled(const rd_store_settled_t *res, void *arg)
{
    got_t *g = arg;
    copy_head(g, &res->head);
    g->settled = res->settled;
    g->count = res->count;
    if (res->settled > 0) copy_str(g->outcome, sizeof g->outcome, res->outcomes[0]);
    if (res->count > 0) copy_message(g, &res->messages[0]);
}

static void on_status(const rd_store_head_t *res, void *arg)
{
    copy_head(arg, res);
}

/* The rest answer only the head here. */
static void on_tick(const rd_store_tick_t *res, void *arg) { copy_head(arg, &res->head); }
static void on_taken(const rd_store_taken_t *res, void *arg) { copy_head(arg, &res->head); }
static void on_alerts(const rd_store_alerts_taken_t *res, void *arg) { copy_head(arg, &res->head); }
static void on_stats(const rd_store_stats_result_t *res, void *arg) { copy_head(arg, &res->head); }
static void on_list(const rd_store_list_t *res, void *arg) { copy_head(arg, &res->head); }
static void on_series(const rd_store_series_t *res, void *arg) { copy_head(arg, &res->head); }
static void on_policy(const rd_store_policy_t *res, void *arg) { copy_head(arg, &res->head); }

/* The write hook's calls. */
static struct {
    int calls;
    rd_store_written_t last;
} g_written;

static bool on_written(void *arg, rd_store_queue_t q, const rd_store_written_t *w,
                       void (*resume)(void *resume_arg), void *resume_arg)
{
    (void)arg;
    (void)q;
    (void)resume;
    (void)resume_arg;
    g_written.calls++;
    g_written.last = *w;
    return false;
}

typedef struct fixture {
    uv_loop_t loop;
    ut_store_t s;
    char qbuf[64];
    rd_store_queue_t q;
} fixture_t;

static fixture_t *fixture_open(int port, int timeout_ms)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    ut_store_open(&f->s, &f->loop, port, timeout_ms, "unit");
    f->q = ut_queue(f->qbuf, sizeof f->qbuf, "store");
    memset(&g_written, 0, sizeof g_written);
    rd_store_set_write_hooks(f->s.store, NULL, on_written, NULL);
    assert_true(ut_run_until(&f->loop, rd_store_ready(f->s.store), 10000));
    return f;
}

static void fixture_close(fixture_t *f)
{
    ut_store_close(&f->s, &f->loop);
    ut_loop_close(&f->loop);
    free(f);
}

static const rd_lease_t LEASE = { 30000, true };

/* ------------------------------------------------------------------------ */
/* End to end, against Redis                                                */
/* ------------------------------------------------------------------------ */

static void test_enqueue_claim_settle_get(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port(), 5000);
    got_t enq = { 0 }, claim = { 0 }, settle = { 0 }, get = { 0 }, again = { 0 };

    assert_int_equal(rd_store_enqueue(f->s.store, f->q,
            &(rd_enqueue_t){ .payload = "hello", .len = 5, .ttl_ms = -1 },
            on_messages, &enq), 0);
    assert_true(ut_run_until(&f->loop, enq.calls == 1, 5000));
    assert_int_equal(enq.status, RD_STORE_OK);
    assert_int_equal(enq.count, 1);
    assert_true(enq.id >= 1);
    assert_int_equal(enq.mstatus, RD_STATUS_PENDING);
    assert_string_equal(enq.payload, "hello");
    /* The write hook heard of it before the callback. */
    assert_int_equal(g_written.calls, 1);
    assert_false(g_written.last.unknown);
    assert_true(g_written.last.changed);

    /* The same idempotency key twice: the original comes back. */
    got_t k1 = { 0 }, k2 = { 0 };
    assert_int_equal(rd_store_enqueue(f->s.store, f->q,
            &(rd_enqueue_t){ .payload = "k", .len = 1, .ttl_ms = -1, .idempotency_key = "key-1" },
            on_messages, &k1), 0);
    assert_int_equal(rd_store_enqueue(f->s.store, f->q,
            &(rd_enqueue_t){ .payload = "k", .len = 1, .ttl_ms = -1, .idempotency_key = "key-1" },
            on_messages, &k2), 0);
    assert_true(ut_run_until(&f->loop, k2.calls == 1, 5000));
    assert_int_equal(k1.status, RD_STORE_OK);
    assert_int_equal(k2.status, RD_STORE_DUPLICATE);
    assert_int_equal(k2.id, k1.id);

    assert_int_equal(rd_store_claim(f->s.store, f->q, LEASE, 1, "w1", on_messages, &claim), 0);
    assert_true(ut_run_until(&f->loop, claim.calls == 1, 5000));
    assert_int_equal(claim.status, RD_STORE_OK);
    assert_int_equal(claim.count, 1);
    assert_int_equal(claim.id, enq.id);
    assert_int_equal(claim.mstatus, RD_STATUS_PROCESSING);
    assert_true(strlen(claim.token) > 0);

    /* Settle it and claim the next (the keyed one) in one call. */
    rd_settlement_t item = { .id = claim.id, .lease_token = claim.token, .failed = false };
    assert_int_equal(rd_store_settle_claim(f->s.store, f->q, LEASE, 1, "w1", 1, &item,
                                           on_settled, &settle), 0);
    assert_true(ut_run_until(&f->loop, settle.calls == 1, 5000));
    assert_int_equal(settle.status, RD_STORE_OK);
    assert_int_equal(settle.settled, 1);
    assert_string_equal(settle.outcome, "succeeded");
    assert_int_equal(settle.count, 1);
    assert_int_equal(settle.id, k1.id);

    assert_int_equal(rd_store_get(f->s.store, f->q, enq.id, on_messages, &get), 0);
    assert_true(ut_run_until(&f->loop, get.calls == 1, 5000));
    assert_int_equal(get.status, RD_STORE_OK);
    assert_int_equal(get.mstatus, RD_STATUS_SUCCEEDED);
    assert_string_equal(get.payload, "hello");

    /* Settling it again: the lease is gone. */
    assert_int_equal(rd_store_settle_claim(f->s.store, f->q, LEASE, 0, NULL, 1, &item,
                                           on_settled, &again), 0);
    assert_true(ut_run_until(&f->loop, again.calls == 1, 5000));
    assert_int_equal(again.status, RD_STORE_OK);
    assert_string_not_equal(again.outcome, "succeeded");

    got_t missing = { 0 };
    assert_int_equal(rd_store_get(f->s.store, f->q, 999999, on_messages, &missing), 0);
    assert_true(ut_run_until(&f->loop, missing.calls == 1, 5000));
    assert_int_equal(missing.status, RD_STORE_NOT_FOUND);
    fixture_close(f);
}

/* A shard admin job's end: n is the count it saw, status its outcome. */
static void on_admin(const rd_shard_admin_result_t *res, void *arg)
{
    got_t *g = arg;
    g->calls++;
    g->status = res->status == RD_SHARD_ADMIN_OK ? RD_STORE_OK : RD_STORE_ERROR;
    g->n = res->shards;
}

/* How many keys of Redis match pattern. */
static long long keys_matching(redisContext *r, const char *pattern)
{
    redisReply *x = redisCommand(r, "KEYS %s", pattern);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    long long n = (long long)x->elements;
    freeReplyObject(x);
    return n;
}

/* A call goes to the queue's shard q.shard with its salt, and a call on one
 * message to its id's shard (docs/sharding.md "Ids"), whatever q.shard
 * says: shard 3's base, with salt 7, hands out ids from 3 * 10^13, its
 * message is not on shard 0, and get, succeed, kill and replay by id find it from
 * a queue value of shard 0 that carries the salts. */
static void test_calls_on_a_shard_base(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port(), 5000);
    redisContext *r = e2e_redis_connect("127.0.0.1", ut_test_redis_port(), 5);
    assert_non_null(r);
    static const uint16_t salts[] = { 0, 0, 7 };
    rd_store_queue_t q0 = ut_queue(f->qbuf, sizeof f->qbuf, "sharded");
    rd_store_queue_t q3 = q0;
    q3.shard = 3;
    q3.salts = salts;
    q3.nsalts = 3;
    rd_store_queue_t q0_salted = q3;
    q0_salted.shard = 0;
    /* The queue over 4 shards, shard 3's salt 7, its policy copied there:
     * shard 3 takes placements. */
    redisReply *x = redisCommand(r, "FCALL %s 1 unit:{%b} raise 4 0,0,7", RD_FUNCTION("shards_set"),
                                 q0.name, q0.len);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    freeReplyObject(x);
    got_t copied = { 0 };
    assert_int_equal(rd_shard_admin_copy(f->s.store, q0, on_admin, &copied), 0);
    assert_true(ut_run_until(&f->loop, copied.calls == 1, 5000));
    assert_int_equal(copied.n, 4);

    got_t enq = { 0 };
    assert_int_equal(rd_store_enqueue(f->s.store, q3,
            &(rd_enqueue_t){ .payload = "on3", .len = 3, .ttl_ms = -1 }, on_messages, &enq), 0);
    assert_true(ut_run_until(&f->loop, enq.calls == 1, 5000));
    assert_int_equal(enq.status, RD_STORE_OK);
    assert_int_equal(enq.id, 3 * RD_SHARD_SPAN + 1);

    /* Its record is in shard 3's base, salt 7. */
    rd_buf_t base = RD_BUF_INIT, mkey = RD_BUF_INIT, pattern = RD_BUF_INIT;
    rd_keys_shard_base(&base, "unit", q0.name, q0.len, 3, 7);
    rd_keys_message(&mkey, base.data, base.len, enq.id);
    x = redisCommand(r, "EXISTS %b", mkey.data, mkey.len);
    assert_non_null(x);
    assert_int_equal(x->integer, 1);
    freeReplyObject(x);

    /* Shard 0 has nothing to claim; shard 3 has it. */
    got_t none = { 0 }, claim = { 0 };
    assert_int_equal(rd_store_claim(f->s.store, q0, LEASE, 1, "w", on_messages, &none), 0);
    assert_true(ut_run_until(&f->loop, none.calls == 1, 5000));
    assert_int_equal(none.status, RD_STORE_OK);
    assert_int_equal(none.count, 0);
    assert_int_equal(rd_store_claim(f->s.store, q3, LEASE, 1, "w", on_messages, &claim), 0);
    assert_true(ut_run_until(&f->loop, claim.calls == 1, 5000));
    assert_int_equal(claim.count, 1);
    assert_int_equal(claim.id, enq.id);

    /* By id, from shard 0's queue value: the id's shard, with its salt. */
    got_t get = { 0 }, done = { 0 }, replayed = { 0 }, unsalted = { 0 };
    assert_int_equal(rd_store_get(f->s.store, q0_salted, enq.id, on_messages, &get), 0);
    assert_true(ut_run_until(&f->loop, get.calls == 1, 5000));
    assert_int_equal(get.status, RD_STORE_OK);
    assert_string_equal(get.payload, "on3");
    assert_int_equal(get.mstatus, RD_STATUS_PROCESSING);
    assert_int_equal(rd_store_succeed(f->s.store, q0_salted, enq.id, claim.token, on_messages, &done), 0);
    assert_true(ut_run_until(&f->loop, done.calls == 1, 5000));
    assert_int_equal(done.status, RD_STORE_OK);
    assert_int_equal(done.mstatus, RD_STATUS_SUCCEEDED);
    /* A second message there, killed and replayed by id. */
    got_t second = { 0 }, killed = { 0 };
    assert_int_equal(rd_store_enqueue(f->s.store, q3,
            &(rd_enqueue_t){ .payload = "two", .len = 3, .ttl_ms = -1 }, on_messages, &second), 0);
    assert_true(ut_run_until(&f->loop, second.calls == 1, 5000));
    assert_int_equal(second.id, 3 * RD_SHARD_SPAN + 2);
    assert_int_equal(rd_store_kill(f->s.store, q0_salted, second.id, "operator", on_messages, &killed), 0);
    assert_true(ut_run_until(&f->loop, killed.calls == 1, 5000));
    assert_int_equal(killed.status, RD_STORE_OK);
    assert_int_equal(killed.mstatus, RD_STATUS_DEAD);
    assert_int_equal(rd_store_replay(f->s.store, q0_salted, second.id, on_messages, &replayed), 0);
    assert_true(ut_run_until(&f->loop, replayed.calls == 1, 5000));
    assert_int_equal(replayed.status, RD_STORE_OK);
    assert_int_equal(replayed.mstatus, RD_STATUS_PENDING);
    /* Without the salts it looks in shard 3 of salt 0, where it is not. */
    assert_int_equal(rd_store_get(f->s.store, q0, enq.id, on_messages, &unsalted), 0);
    assert_true(ut_run_until(&f->loop, unsalted.calls == 1, 5000));
    assert_int_equal(unsalted.status, RD_STORE_NOT_FOUND);

    /* An id of a shard the queue never had, and one no shard hands out: not
     * found, and no key written for them. */
    got_t on5 = { 0 }, kill5 = { 0 }, past = { 0 };
    assert_int_equal(rd_store_get(f->s.store, q0, 5 * RD_SHARD_SPAN + 1, on_messages, &on5), 0);
    assert_int_equal(rd_store_kill(f->s.store, q0, 5 * RD_SHARD_SPAN + 1, "no", on_messages, &kill5), 0);
    assert_int_equal(rd_store_get(f->s.store, q0, 64 * RD_SHARD_SPAN, on_messages, &past), 0);
    assert_true(ut_run_until(&f->loop, on5.calls == 1 && kill5.calls == 1 && past.calls == 1, 5000));
    assert_int_equal(on5.status, RD_STORE_NOT_FOUND);
    assert_int_equal(kill5.status, RD_STORE_NOT_FOUND);
    assert_int_equal(past.status, RD_STORE_NOT_FOUND);
    rd_keys_shard_base(&pattern, "unit", q0.name, q0.len, 5, 0);
    rd_buf_puts(&pattern, "*");
    assert_int_equal(keys_matching(r, pattern.data), 0);

    rd_buf_free(&base);
    rd_buf_free(&mkey);
    rd_buf_free(&pattern);
    redisFree(r);
    fixture_close(f);
}

/* The results the SQS endpoint reads (docs/sqs.md section 5): create-only
 * policy, the enqueue's size limit, and the empty claim's policy wait and
 * whether the queue is known. */
static struct {
    int calls;
    bool created;
    int sqs;
    long long wait_seconds;
    rd_store_status_t status;
} g_pol;

static void on_policy_made(const rd_store_policy_t *res, void *arg)
{
    (void)arg;
    g_pol.calls++;
    g_pol.status = res->head.status;
    g_pol.created = res->created;
    g_pol.sqs = res->policy.sqs;
    g_pol.wait_seconds = res->policy.wait_seconds;
}

static struct {
    int calls;
    rd_store_status_t status;
    long long payload_limit, policy_wait_ms;
    bool queue_known;
    size_t count;
} g_res;

static void on_result(const rd_store_messages_t *res, void *arg)
{
    (void)arg;
    g_res.calls++;
    g_res.status = res->head.status;
    g_res.payload_limit = res->payload_limit;
    g_res.policy_wait_ms = res->policy_wait_ms;
    g_res.queue_known = res->queue_known;
    g_res.count = res->count;
}

static void test_policy_create_and_sqs_results(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port(), 5000);
    memset(&g_res, 0, sizeof g_res);
    assert_int_equal(rd_store_claim(f->s.store, f->q, LEASE, 1, NULL, on_result, NULL), 0);
    assert_true(ut_run_until(&f->loop, g_res.calls == 1, 5000));
    assert_int_equal(g_res.count, 0);
    assert_false(g_res.queue_known);   /* never heard of */
    assert_int_equal(g_res.policy_wait_ms, -1);

    rd_policy_t p;
    rd_policy_init(&p);
    p.sqs = 1;
    p.wait_seconds = 4;
    p.max_payload_bytes = 1024;
    memset(&g_pol, 0, sizeof g_pol);
    assert_int_equal(rd_store_policy_create(f->s.store, f->q, &p, on_policy_made, NULL), 0);
    assert_true(ut_run_until(&f->loop, g_pol.calls == 1, 5000));
    assert_int_equal(g_pol.status, RD_STORE_OK);
    assert_true(g_pol.created);
    p.wait_seconds = 9;
    assert_int_equal(rd_store_policy_create(f->s.store, f->q, &p, on_policy_made, NULL), 0);
    assert_true(ut_run_until(&f->loop, g_pol.calls == 2, 5000));
    assert_false(g_pol.created);
    assert_int_equal(g_pol.wait_seconds, 4);   /* the stored one */
    assert_int_equal(g_pol.sqs, 1);

    assert_int_equal(rd_store_claim(f->s.store, f->q, LEASE, 1, NULL, on_result, NULL), 0);
    assert_true(ut_run_until(&f->loop, g_res.calls == 2, 5000));
    assert_true(g_res.queue_known);
    assert_int_equal(g_res.policy_wait_ms, 4000);

    static char big[1100];
    memset(big, 'x', sizeof big);
    rd_enqueue_t in = { .payload = big, .len = sizeof big, .delay_ms = -1, .ttl_ms = -1 };
    assert_int_equal(rd_store_enqueue(f->s.store, f->q, &in, on_result, NULL), 0);
    assert_true(ut_run_until(&f->loop, g_res.calls == 3, 5000));
    assert_int_equal(g_res.status, RD_STORE_TOO_LARGE);
    assert_int_equal(g_res.payload_limit, 1024);
    fixture_close(f);
}

/* rd_enqueue_t's SQS fields through the store: the attributes come back in
 * the enqueue's answer, a claim's and a get's; the first receive is kept;
 * must_exist on a queue that never existed is RD_STORE_NOT_FOUND. */
static void test_enqueue_attributes_first_receive_must_exist(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port(), 5000);
    static const char attrs[] = "a\0b";
    got_t enq = { 0 }, claim = { 0 }, get = { 0 }, missing = { 0 };
    rd_enqueue_t in = { .payload = "m", .len = 1, .ttl_ms = -1, .attributes = attrs,
                        .attributes_len = 3, .idempotency_key = "dedup",
                        .idempotency_window_ms = 300000, .record_first_receive = true };
    assert_int_equal(rd_store_enqueue(f->s.store, f->q, &in, on_messages, &enq), 0);
    assert_true(ut_run_until(&f->loop, enq.calls == 1, 5000));
    assert_int_equal(enq.status, RD_STORE_OK);
    assert_int_equal(enq.attributes_len, 3);
    assert_memory_equal(enq.attributes, attrs, 3);
    assert_int_equal(enq.first_received_ms, -1);

    assert_int_equal(rd_store_claim(f->s.store, f->q, LEASE, 1, NULL, on_messages, &claim), 0);
    assert_true(ut_run_until(&f->loop, claim.calls == 1, 5000));
    assert_int_equal(claim.id, enq.id);
    assert_int_equal(claim.attributes_len, 3);
    assert_memory_equal(claim.attributes, attrs, 3);
    assert_int_equal(claim.first_received_ms, claim.updated_ms);

    assert_int_equal(rd_store_get(f->s.store, f->q, enq.id, on_messages, &get), 0);
    assert_true(ut_run_until(&f->loop, get.calls == 1, 5000));
    assert_int_equal(get.first_received_ms, claim.updated_ms);
    assert_memory_equal(get.attributes, attrs, 3);

    char name[64];
    rd_store_queue_t none = ut_queue(name, sizeof name, "never");
    in = (rd_enqueue_t){ .payload = "x", .len = 1, .ttl_ms = -1, .must_exist = true };
    assert_int_equal(rd_store_enqueue(f->s.store, none, &in, on_messages, &missing), 0);
    assert_true(ut_run_until(&f->loop, missing.calls == 1, 5000));
    assert_int_equal(missing.status, RD_STORE_NOT_FOUND);
    assert_int_equal(missing.count, 0);
    fixture_close(f);
}

/* Tags, dlq_sources, and rd_queue_clear (src/queue_clear.c) through the
 * store: purge_all keeps the queue and its tags, drop removes everything. */
static void test_tags_clear_and_dlq_sources(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port(), 5000);
    got_t set = { 0 }, tags = { 0 }, rm = { 0 };
    rd_str_t pairs[] = { { "team", 4 }, { "a", 1 }, { "env", 3 }, { "", 0 } };
    assert_int_equal(rd_store_tags_set(f->s.store, f->q, 2, pairs, on_count, &set), 0);
    assert_true(ut_run_until(&f->loop, set.calls == 1, 5000));
    assert_int_equal(set.status, RD_STORE_OK);
    assert_int_equal(set.n, 2);
    assert_int_equal(rd_store_tags_remove(f->s.store, f->q, 1, &pairs[2], on_count, &rm), 0);
    assert_true(ut_run_until(&f->loop, rm.calls == 1, 5000));
    assert_int_equal(rm.n, 1);
    assert_int_equal(rd_store_tags_set(f->s.store, f->q, RD_TAGS_MAX + 1, pairs, on_count, &set),
                     -1);

    for (int i = 0; i < 1200; i++) {
        got_t e = { 0 };
        assert_int_equal(rd_store_enqueue(f->s.store, f->q,
                &(rd_enqueue_t){ .payload = "p", .len = 1, .ttl_ms = -1 }, on_messages, &e), 0);
        assert_true(ut_run_until(&f->loop, e.calls == 1, 5000));
    }
    got_t purged = { 0 };
    assert_int_equal(rd_queue_clear(f->s.store, f->q, RD_QUEUE_PURGE_ALL, NULL, on_cleared,
                                    &purged), 0);
    assert_true(ut_run_until(&f->loop, purged.calls == 1, 10000));
    assert_int_equal(purged.status, RD_STORE_OK);
    assert_int_equal(purged.clear, RD_CLEAR_DONE);
    assert_int_equal(purged.n, 1200);
    assert_int_equal(rd_store_tags_get(f->s.store, f->q, on_strings, &tags), 0);
    assert_true(ut_run_until(&f->loop, tags.calls == 1, 5000));
    assert_int_equal(tags.strings_count, 2);
    assert_string_equal(tags.strings[0], "team");

    /* q's dead-letter queue is "dlq-of-store": it is that one's source. */
    char dlq_name[64];
    rd_store_queue_t dlq = ut_queue(dlq_name, sizeof dlq_name, "dlq-of-store");
    got_t linked = { 0 }, sources = { 0 };
    assert_int_equal(rd_store_dlq_link(f->s.store, f->q, dlq, on_strings, &linked), 0);
    assert_true(ut_run_until(&f->loop, linked.calls == 1, 5000));
    assert_string_equal(linked.strings[0], "ok");
    assert_int_equal(rd_store_dlq_sources(f->s.store, dlq, NULL, 1000, on_strings, &sources), 0);
    assert_true(ut_run_until(&f->loop, sources.calls == 1, 5000));
    assert_int_equal(sources.status, RD_STORE_OK);
    assert_string_equal(sources.strings[0], "0");
    bool found = false;
    for (size_t i = 1; i < sources.strings_count && i < 8; i++)
        found = found || (strlen(sources.strings[i]) == f->q.len &&
                          memcmp(sources.strings[i], f->q.name, f->q.len) == 0);
    assert_true(found);

    got_t dropped = { 0 }, after = { 0 }, gone = { 0 };
    assert_int_equal(rd_queue_clear(f->s.store, f->q, RD_QUEUE_DROP, NULL, on_cleared, &dropped),
                     0);
    assert_true(ut_run_until(&f->loop, dropped.calls == 1, 10000));
    assert_int_equal(dropped.status, RD_STORE_OK);
    assert_int_equal(dropped.clear, RD_CLEAR_DONE);
    assert_int_equal(rd_store_tags_get(f->s.store, f->q, on_strings, &after), 0);
    assert_true(ut_run_until(&f->loop, after.calls == 1, 5000));
    assert_int_equal(after.strings_count, 0);
    assert_int_equal(rd_store_dlq_sources(f->s.store, dlq, "0", 1000, on_strings, &gone), 0);
    assert_true(ut_run_until(&f->loop, gone.calls == 1, 5000));
    for (size_t i = 1; i < gone.strings_count && i < 8; i++)
        assert_false(strlen(gone.strings[i]) == f->q.len &&
                     memcmp(gone.strings[i], f->q.name, f->q.len) == 0);
    fixture_close(f);
}

/* The message move tasks' rows (lua/67_moves.lua) through the store: every
 * reply strings, a task read back with rd_store_move_task_at. */
static rd_store_move_task_t g_task;
static char g_task_status[16], g_task_dest[64];
static int g_tasks_seen;

static void on_task_list(const rd_store_strings_t *res, void *arg)
{
    got_t *g = arg;
    copy_head(g, &res->head);
    g_tasks_seen = (int)(res->count / RD_STORE_MOVE_TASK_FIELDS);
    if (rd_store_move_task_at(res, 0, &g_task)) {
        copy_str(g_task_status, sizeof g_task_status, g_task.status);
        copy_str(g_task_dest, sizeof g_task_dest, g_task.destination);
    }
}

static void test_move_task_rows(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port(), 5000);
    got_t e = { 0 };
    assert_int_equal(rd_store_enqueue(f->s.store, f->q,
            &(rd_enqueue_t){ .payload = "p", .len = 1, .ttl_ms = -1 }, on_messages, &e), 0);
    assert_true(ut_run_until(&f->loop, e.calls == 1, 5000));
    char dest_name[64];
    rd_store_queue_t dest = ut_queue(dest_name, sizeof dest_name, "move-dest");
    got_t watched = { 0 }, started = { 0 }, again = { 0 }, busy = { 0 }, listed = { 0 };
    assert_int_equal(rd_store_move_watch(f->s.store, f->q, 0, -1, on_strings, &watched), 0);
    assert_true(ut_run_until(&f->loop, watched.calls == 1, 5000));
    assert_string_equal(watched.strings[0], "1");
    assert_int_equal(rd_store_move_start(f->s.store, f->q, dest, 7, "runner-a", 10000, on_strings,
                                         &started), 0);
    assert_true(ut_run_until(&f->loop, started.calls == 1, 5000));
    assert_int_equal(started.status, RD_STORE_OK);
    assert_string_equal(started.strings[0], "ok");
    assert_string_equal(started.strings[3], "1");   /* to_move */
    long long id = atoll(started.strings[1]);
    assert_int_equal(rd_store_move_start(f->s.store, f->q, dest, 0, "runner-b", 10000, on_strings,
                                         &again), 0);
    assert_true(ut_run_until(&f->loop, again.calls == 1, 5000));
    assert_string_equal(again.strings[0], "running");
    assert_int_equal(rd_store_move_claim(f->s.store, f->q, "runner-b", 10000, on_strings, &busy), 0);
    assert_true(ut_run_until(&f->loop, busy.calls == 1, 5000));
    assert_string_equal(busy.strings[0], "busy");
    assert_int_equal(rd_store_move_list(f->s.store, f->q, 10, on_task_list, &listed), 0);
    assert_true(ut_run_until(&f->loop, listed.calls == 1, 5000));
    assert_int_equal(g_tasks_seen, 1);
    assert_int_equal(g_task.id, id);
    assert_string_equal(g_task_status, "RUNNING");
    assert_int_equal(strlen(g_task_dest), dest.len);
    assert_int_equal(g_task.rate, 7);
    assert_int_equal(g_task.to_move, 1);
    assert_true(g_task.started_ms > 0);

    got_t reported = { 0 }, lost = { 0 }, cancel = { 0 }, due = { 0 };
    assert_int_equal(rd_store_move_report(f->s.store, f->q, id, "runner-b", 1, 10000, NULL, NULL,
                                          on_strings, &lost), 0);
    assert_true(ut_run_until(&f->loop, lost.calls == 1, 5000));
    assert_string_equal(lost.strings[0], "lost");
    assert_int_equal(rd_store_move_report(f->s.store, f->q, id, "runner-a", 1, 10000, "COMPLETED",
                                          NULL, on_strings, &reported), 0);
    assert_true(ut_run_until(&f->loop, reported.calls == 1, 5000));
    assert_string_equal(reported.strings[1], "COMPLETED");
    assert_int_equal(rd_store_move_cancel(f->s.store, f->q, id, on_strings, &cancel), 0);
    assert_true(ut_run_until(&f->loop, cancel.calls == 1, 5000));
    assert_string_equal(cancel.strings[0], "invalid_state");
    assert_int_equal(rd_store_move_due(f->s.store, 1000, on_strings, &due), 0);
    assert_true(ut_run_until(&f->loop, due.calls == 1, 5000));
    assert_int_equal(due.status, RD_STORE_OK);
    assert_true(due.strings_count >= 2 && due.strings_count % 2 == 0);
    got_t dropped = { 0 };
    assert_int_equal(rd_store_move_watch(f->s.store, f->q, -1, 0, on_strings, &dropped), 0);
    assert_true(ut_run_until(&f->loop, dropped.calls == 1, 5000));
    assert_string_equal(dropped.strings[0], "1");
    fixture_close(f);
}

/* What an enqueue_many's callback saw: each item's outcome and message. */
typedef struct got_many {
    int calls;
    rd_store_status_t status;
    size_t count;
    rd_store_status_t item[8];
    long long id[8];
    long long retry_after[8];
    char payload[8][16];
    char group[8][16];
} got_many_t;

static void on_many(const rd_store_enqueued_many_t *res, void *arg)
{
    got_many_t *g = arg;
    g->calls++;
    g->status = res->head.status;
    g->count = res->count;
    for (size_t i = 0; i < res->count && i < 8; i++) {
        g->item[i] = res->items[i].head.status;
        if (res->items[i].count == 0) continue;
        const rd_message_t *m = &res->items[i].messages[0];
        g->id[i] = m->id;
        g->retry_after[i] = m->retry_after_ms;
        copy_str(g->payload[i], sizeof g->payload[i], m->payload);
        copy_str(g->group[i], sizeof g->group[i], m->group);
    }
}

/* enqueue_many end to end: each item's result in order, as rd_store_enqueue
 * gives it (a key repeated in the call answers the first item's message),
 * the call's timer hint and first id to the write hook; calls past the
 * bounds are refused before anything is sent. */
static void test_enqueue_many_results(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port(), 5000);
    rd_enqueue_t items[4] = {
        { .payload = "a", .len = 1, .delay_ms = -1, .ttl_ms = -1 },
        { .payload = "b", .len = 1, .delay_ms = -1, .ttl_ms = -1, .idempotency_key = "mk" },
        { .payload = "c", .len = 1, .delay_ms = -1, .ttl_ms = -1, .idempotency_key = "mk" },
        { .payload = "d", .len = 1, .delay_ms = 60000, .ttl_ms = -1, .group = "g1" },
    };
    got_many_t g = { 0 };
    assert_int_equal(rd_store_enqueue_many(f->s.store, f->q, items, 4, on_many, &g), 0);
    assert_true(ut_run_until(&f->loop, g.calls == 1, 5000));
    assert_int_equal(g.status, RD_STORE_OK);
    assert_int_equal(g.count, 4);
    assert_int_equal(g.item[0], RD_STORE_OK);
    assert_int_equal(g.id[0], 1);
    assert_string_equal(g.payload[0], "a");
    assert_int_equal(g.item[1], RD_STORE_OK);
    assert_int_equal(g.id[1], 2);
    assert_int_equal(g.item[2], RD_STORE_DUPLICATE);
    assert_int_equal(g.id[2], 2);
    assert_string_equal(g.payload[2], "b");   /* the original's, not the repeat's */
    assert_int_equal(g.item[3], RD_STORE_OK);
    assert_int_equal(g.id[3], 3);
    assert_string_equal(g.group[3], "g1");
    assert_true(g.retry_after[3] > 0);
    /* One write for the call: id 1 was made, and the delayed one wants a tick. */
    assert_int_equal(g_written.calls, 1);
    assert_true(g_written.last.first);
    assert_true(g_written.last.hint_ms > 0 && g_written.last.hint_ms <= 60000);

    /* The bounds: -1 at once, nothing sent, the callback never runs. */
    got_many_t none = { 0 };
    assert_int_equal(rd_store_enqueue_many(f->s.store, f->q, items, 0, on_many, &none), -1);
    rd_enqueue_t *lots = calloc(RD_ENQUEUE_MANY_MAX + 1, sizeof *lots);
    for (size_t i = 0; i <= RD_ENQUEUE_MANY_MAX; i++)
        lots[i] = (rd_enqueue_t){ .payload = "x", .len = 1, .delay_ms = -1, .ttl_ms = -1 };
    assert_int_equal(rd_store_enqueue_many(f->s.store, f->q, lots, RD_ENQUEUE_MANY_MAX + 1,
                                           on_many, &none), -1);
    size_t half = RD_ENQUEUE_MANY_BYTES / 2 + 1;
    char *big = malloc(half);
    memset(big, 'b', half);
    rd_enqueue_t two[2] = { { .payload = big, .len = half, .delay_ms = -1, .ttl_ms = -1 },
                            { .payload = big, .len = half, .delay_ms = -1, .ttl_ms = -1 } };
    assert_int_equal(rd_store_enqueue_many(f->s.store, f->q, two, 2, on_many, &none), -1);
    /* One item alone may be larger (every call makes progress). */
    got_many_t one = { 0 };
    assert_int_equal(rd_store_enqueue_many(f->s.store, f->q, two, 1, on_many, &one), 0);
    assert_true(ut_run_until(&f->loop, one.calls == 1, 5000));
    assert_int_equal(one.item[0], RD_STORE_OK);
    assert_int_equal(one.id[0], 4);
    ut_run_for(&f->loop, 20);
    assert_int_equal(none.calls, 0);
    free(big);
    free(lots);
    fixture_close(f);
}

/* Redis not ready: -1 at once, the callback never runs. */
/* A write's registration is applied before its callback runs. The race it
 * closes: SendMessage on one instance (the queue's first message, so the
 * registry hook registers it after the write), DeleteQueue on another as
 * soon as the answer is in, then GetQueueUrl. The registration used to wait
 * in the link's buffer while the answer went out, landed after the other
 * instance's queue_forget, and brought the deleted queue back into the
 * names index (sqs_faults_test.sh test_delete_recreate, now and then under
 * load). Here the other instance is a blocking link that forgets the queue
 * from inside the enqueue's callback, before this link is flushed again. */
static struct {
    int calls;
    rd_store_status_t status;
    long long id;
    redisContext *other;
    const char *registry;
    rd_store_queue_t q;
    long long forgot;          /* queue_forget's answer: 1, it was registered */
} g_forget;

static void on_enqueued_then_forget(const rd_store_messages_t *res, void *arg)
{
    (void)arg;
    g_forget.calls++;
    g_forget.status = res->head.status;
    g_forget.id = res->count ? res->messages[0].id : 0;
    redisReply *x = redisCommand(g_forget.other, "FCALL %s 1 %s %b", RD_FUNCTION("queue_forget"),
                                 g_forget.registry, g_forget.q.name, g_forget.q.len);
    assert_non_null(x);
    g_forget.forgot = x->type == REDIS_REPLY_INTEGER ? x->integer : -1;
    freeReplyObject(x);
}

static void test_registration_lands_before_the_answer(void **state)
{
    (void)state;
    fixture_t *f = fixture_open(ut_test_redis_port(), 5000);
    rd_registry_t *reg = rd_registry_new(&f->loop, f->s.store, false);
    redisContext *other = redisConnect("127.0.0.1", ut_test_redis_port());
    assert_true(other != NULL && other->err == 0);
    rd_buf_t registry = { 0 };
    rd_keys_registry(&registry, "unit");
    char names[128];
    snprintf(names, sizeof names, "{%s}:names", registry.data);
    memset(&g_forget, 0, sizeof g_forget);
    g_forget.other = other;
    g_forget.registry = registry.data;
    g_forget.q = ut_queue(f->qbuf, sizeof f->qbuf, "forgotten");

    assert_int_equal(rd_store_enqueue(f->s.store, g_forget.q,
            &(rd_enqueue_t){ .payload = "m", .len = 1, .ttl_ms = -1 },
            on_enqueued_then_forget, NULL), 0);
    assert_true(ut_run_until(&f->loop, g_forget.calls == 1, 5000));
    assert_int_equal(g_forget.status, RD_STORE_OK);
    assert_int_equal(g_forget.id, 1);
    assert_int_equal(g_forget.forgot, 1);
    /* Whatever this link had sent before the ping has been applied by its
     * answer. */
    got_t ping = { 0 };
    assert_int_equal(rd_store_ping(f->s.store, on_status, &ping), 0);
    assert_true(ut_run_until(&f->loop, ping.calls == 1, 5000));
    redisReply *x = redisCommand(other, "ZSCORE %s %b", names, g_forget.q.name, g_forget.q.len);
    assert_non_null(x);
    assert_int_equal(x->type, REDIS_REPLY_NIL);  /* not brought back */
    freeReplyObject(x);
    x = redisCommand(other, "SISMEMBER %s %b", g_forget.registry, g_forget.q.name, g_forget.q.len);
    assert_non_null(x);
    assert_int_equal(x->integer, 0);
    freeReplyObject(x);

    rd_registry_free(reg);
    redisFree(other);
    rd_buf_free(&registry);
    fixture_close(f);
}

static void test_not_ready_fails_at_once(void **state)
{
    (void)state;
    fake_start(FAKE_REFUSE, NULL);
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    ut_store_t s;
    ut_store_open(&s, &loop, g_fake.port, 1000, "unit");
    char qb[64];
    rd_store_queue_t q = ut_queue(qb, sizeof qb, "nr");
    got_t g = { 0 };
    assert_int_equal(rd_store_enqueue(s.store, q,
            &(rd_enqueue_t){ .payload = "x", .len = 1, .ttl_ms = -1 },
            on_messages, &g), -1);
    assert_true(ut_run_until(&loop, atomic_load(&g_fake.accepts) >= 1, 5000));
    assert_int_equal(rd_store_get(s.store, q, 1, on_messages, &g), -1);
    assert_int_equal(rd_store_ping(s.store, on_status, &g), -1);
    ut_run_for(&loop, 50);
    assert_int_equal(g.calls, 0);
    ut_store_close(&s, &loop);
    ut_loop_close(&loop);
    fake_stop();
}

/* ------------------------------------------------------------------------ */
/* Against the fake server                                                  */
/* ------------------------------------------------------------------------ */

/* Each reply of the wrong shape is RD_STORE_ERROR naming the call, and the
 * store goes on working. */
static void test_wrong_reply_shape_is_an_error(void **state)
{
    (void)state;
    fake_start(FAKE_ANSWER, "+OK\r\n");
    fixture_t *f = fixture_open(g_fake.port, 2000);
    static const char *const shapes[] = {
        ":42\r\n",                                  /* an integer */
        "$5\r\nhello\r\n",                          /* a string */
        "*1\r\n$3\r\nfoo\r\n",                      /* an array of the wrong length */
        "*-1\r\n",                                  /* a nil array */
        "*2\r\n*1\r\n:1\r\n*1\r\n*0\r\n",           /* nested arrays */
        "*3\r\n$2\r\nok\r\n:1\r\n*2\r\n:5\r\n$1\r\nx\r\n",
        /* Near misses: "ok" with a message of the wrong inside. A leased
         * message whose history is not an array; a message with two
         * histories; outcomes that are not strings; an unknown code. */
        "*3\r\n$2\r\nok\r\n*10\r\n:1\r\n$1\r\np\r\n:0\r\n:3\r\n:1\r\n:1\r\n:1\r\n"
        "$1\r\nt\r\n$7\r\nhistory\r\n:5\r\n:-1\r\n",
        "*2\r\n$2\r\nok\r\n*6\r\n$2\r\nid\r\n:1\r\n$7\r\nhistory\r\n*1\r\n$1\r\na\r\n"
        "$7\r\nhistory\r\n*0\r\n",
        "*3\r\n$2\r\nok\r\n*2\r\n$9\r\nsucceeded\r\n:5\r\n:0\r\n",
        "*2\r\n$7\r\nunknown\r\n$1\r\nx\r\n",
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        fake_answer(shapes[i]);
        got_t enq = { 0 }, claim = { 0 }, get = { 0 }, settle = { 0 };
        int writes = g_written.calls;
        assert_int_equal(rd_store_enqueue(f->s.store, f->q,
                &(rd_enqueue_t){ .payload = "x", .len = 1, .ttl_ms = -1 },
                on_messages, &enq), 0);
        got_many_t many = { 0 };
        assert_int_equal(rd_store_enqueue_many(f->s.store, f->q,
                &(rd_enqueue_t){ .payload = "x", .len = 1, .ttl_ms = -1 }, 1, on_many, &many), 0);
        assert_int_equal(rd_store_claim(f->s.store, f->q, LEASE, 5, NULL, on_messages, &claim), 0);
        assert_int_equal(rd_store_get(f->s.store, f->q, 1, on_messages, &get), 0);
        rd_settlement_t item = { .id = 1, .failed = true, .error = "e", .retryable = true,
                                 .retry_after_ms = -1 };
        assert_int_equal(rd_store_settle_claim(f->s.store, f->q, LEASE, 2, NULL, 1, &item,
                                               on_settled, &settle), 0);
        got_t more[7];
        memset(more, 0, sizeof more);
        assert_int_equal(rd_store_tick(f->s.store, f->q, 100, 0, 0, on_tick, &more[0]), 0);
        assert_int_equal(rd_store_timer_take(f->s.store, 10, 1000, 0, 1000, 60000, on_taken,
                                             &more[1]), 0);
        assert_int_equal(rd_store_alerts_take(f->s.store, f->q, "c", 4, 1000, true, on_alerts,
                                              &more[2]), 0);
        assert_int_equal(rd_store_stats(f->s.store, f->q, 3, on_stats, &more[3]), 0);
        assert_int_equal(rd_store_list(f->s.store, f->q, NULL, 10, NULL, NULL, -1, -1, on_list,
                                       &more[4]), 0);
        assert_int_equal(rd_store_series(f->s.store, f->q, "minute", on_series, &more[5]), 0);
        assert_int_equal(rd_store_policy_get(f->s.store, f->q, on_policy, &more[6]), 0);
        assert_true(ut_run_until(&f->loop, settle.calls == 1 && more[6].calls == 1, 5000));
        got_t *all[] = { &enq, &claim, &get, &settle, &more[0], &more[1], &more[2], &more[3],
                         &more[4], &more[5], &more[6] };
        for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) {
            if (all[j]->calls != 1 || all[j]->status != RD_STORE_ERROR)
                fail_msg("shape %zu, call %zu: %d calls, status %d", i, j, all[j]->calls,
                         (int)all[j]->status);
            assert_non_null(strstr(all[j]->detail, "unexpected reply to"));
            assert_int_equal(all[j]->count, 0);
        }
        if (many.calls != 1 || many.status != RD_STORE_ERROR || many.count != 0)
            fail_msg("shape %zu, enqueue_many: %d calls, status %d", i, many.calls,
                     (int)many.status);
        /* The writes' hint is not known: the schedule hears so. */
        assert_true(g_written.calls > writes);
        assert_true(g_written.last.unknown);
        assert_true(rd_store_ready(f->s.store));
    }
    /* enqueue_many's own near misses: an item's reply of the wrong shape,
     * more replies than items, a timer that is not a number. */
    static const char *const many_shapes[] = {
        "*2\r\n:-1\r\n*1\r\n$3\r\nfoo\r\n",
        "*3\r\n:-1\r\n*4\r\n$2\r\nok\r\n:1\r\n:1\r\n:-1\r\n"
        "*4\r\n$2\r\nok\r\n:2\r\n:1\r\n:-1\r\n",
        "*2\r\n$2\r\nok\r\n*4\r\n$2\r\nok\r\n:1\r\n:1\r\n:-1\r\n",
    };
    for (size_t i = 0; i < sizeof many_shapes / sizeof many_shapes[0]; i++) {
        fake_answer(many_shapes[i]);
        got_many_t many = { 0 };
        assert_int_equal(rd_store_enqueue_many(f->s.store, f->q,
                &(rd_enqueue_t){ .payload = "x", .len = 1, .ttl_ms = -1 }, 1, on_many, &many), 0);
        assert_true(ut_run_until(&f->loop, many.calls == 1, 5000));
        if (many.status != RD_STORE_ERROR || many.count != 0)
            fail_msg("enqueue_many shape %zu: status %d, %zu items", i, (int)many.status,
                     many.count);
        assert_true(g_written.last.unknown);
    }
    /* An error reply is RD_STORE_ERROR with Redis's text. */
    fake_answer("-ERR something broke\r\n");
    got_t err = { 0 };
    assert_int_equal(rd_store_get(f->s.store, f->q, 1, on_messages, &err), 0);
    assert_true(ut_run_until(&f->loop, err.calls == 1, 5000));
    assert_int_equal(err.status, RD_STORE_ERROR);
    assert_string_equal(err.detail, "ERR something broke");
    fixture_close(f);
    fake_stop();
}

/* enqueue_chunks.c over the fake: a short answer (the library stopped at
 * its reply bytes) is followed by a call from the first item it left; a
 * call whose link drops ends the batch with LOST, naming the items it
 * carried; the items before it were answered. */
typedef struct chunked {
    int chunks, done_calls;
    size_t firsts[4], counts[4];
    long long ids[8];
    size_t done;
    rd_store_status_t failure;   /* RD_STORE_OK: none */
    size_t in_call;
    const char *next_reply;      /* what the fake answers after the first chunk; NULL: drop */
} chunked_t;

static void on_chunked(size_t first, const rd_store_enqueued_many_t *res, void *arg)
{
    chunked_t *c = arg;
    if (c->chunks < 4) {
        c->firsts[c->chunks] = first;
        c->counts[c->chunks] = res->count;
    }
    for (size_t i = 0; i < res->count && first + i < 8; i++)
        c->ids[first + i] = res->items[i].messages[0].id;
    /* Before the next call is sent: what the fake does with it. */
    if (c->chunks++ == 0) {
        if (c->next_reply) fake_answer(c->next_reply);
        else atomic_store(&g_fake.mode, FAKE_DROP);
    }
}

static void on_chunks_done(size_t done, const rd_store_head_t *failure, size_t in_call, void *arg)
{
    chunked_t *c = arg;
    c->done_calls++;
    c->done = done;
    c->failure = failure ? failure->status : RD_STORE_OK;
    c->in_call = in_call;
}

#define ENQUEUED(id) "*6\r\n$2\r\nok\r\n:" #id "\r\n:1000\r\n:-1\r\n:3\r\n:-1\r\n"

static void test_enqueue_chunks_short_and_lost(void **state)
{
    (void)state;
    rd_enqueue_t items[3] = {
        { .payload = "a", .len = 1, .delay_ms = -1, .ttl_ms = -1 },
        { .payload = "b", .len = 1, .delay_ms = -1, .ttl_ms = -1 },
        { .payload = "c", .len = 1, .delay_ms = -1, .ttl_ms = -1 },
    };
    /* A short answer (1 of 3), then the other two. */
    fake_start(FAKE_ANSWER, "*2\r\n:-1\r\n" ENQUEUED(1));
    fixture_t *f = fixture_open(g_fake.port, 2000);
    chunked_t c = { .next_reply = "*3\r\n:-1\r\n" ENQUEUED(2) ENQUEUED(3) };
    assert_int_equal(rd_enqueue_chunks(f->s.store, f->q, items, 3, on_chunked, on_chunks_done, &c), 0);
    assert_true(ut_run_until(&f->loop, c.done_calls == 1, 5000));
    assert_int_equal(c.chunks, 2);
    assert_int_equal(c.firsts[0], 0);
    assert_int_equal(c.counts[0], 1);
    assert_int_equal(c.firsts[1], 1);
    assert_int_equal(c.counts[1], 2);
    assert_int_equal(c.ids[0], 1);
    assert_int_equal(c.ids[2], 3);
    assert_int_equal(c.done, 3);
    assert_int_equal(c.failure, RD_STORE_OK);
    assert_int_equal(atomic_load(&g_fake.commands), 2);
    fixture_close(f);
    fake_stop();

    /* A short answer, then the link drops under the second call. */
    fake_start(FAKE_ANSWER, "*2\r\n:-1\r\n" ENQUEUED(1));
    f = fixture_open(g_fake.port, 2000);
    c = (chunked_t){ .next_reply = NULL };
    assert_int_equal(rd_enqueue_chunks(f->s.store, f->q, items, 3, on_chunked, on_chunks_done, &c), 0);
    assert_true(ut_run_until(&f->loop, c.done_calls == 1, 5000));
    assert_int_equal(c.chunks, 1);
    assert_int_equal(c.done, 1);
    assert_int_equal(c.failure, RD_STORE_LOST);
    assert_int_equal(c.in_call, 2);
    fixture_close(f);
    fake_stop();

    /* Not ready: -1 at once, no callback. */
    fake_start(FAKE_REFUSE, NULL);
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    ut_store_t st;
    ut_store_open(&st, &loop, g_fake.port, 1000, "unit");
    char qb[64];
    c = (chunked_t){ 0 };
    assert_int_equal(rd_enqueue_chunks(st.store, ut_queue(qb, sizeof qb, "nr"), items, 3, on_chunked,
                                       on_chunks_done, &c), -1);
    ut_run_for(&loop, 50);
    assert_int_equal(c.done_calls + c.chunks, 0);
    ut_store_close(&st, &loop);
    ut_loop_close(&loop);
    fake_stop();
}

/* The link drops with calls in flight: the write's outcome is unknown
 * (LOST, and the write hook hears so), the read was simply not done. */
static void test_link_drop_mid_call(void **state)
{
    (void)state;
    fake_start(FAKE_DROP, NULL);
    fixture_t *f = fixture_open(g_fake.port, 5000);
    got_t enq = { 0 }, get = { 0 };
    got_many_t many = { 0 };
    long long sent = e2e_mono_ms();
    assert_int_equal(rd_store_enqueue(f->s.store, f->q,
            &(rd_enqueue_t){ .payload = "x", .len = 1, .ttl_ms = -1 },
            on_messages, &enq), 0);
    assert_int_equal(rd_store_enqueue_many(f->s.store, f->q,
            &(rd_enqueue_t){ .payload = "x", .len = 1, .ttl_ms = -1 }, 1, on_many, &many), 0);
    assert_int_equal(rd_store_get(f->s.store, f->q, 1, on_messages, &get), 0);
    assert_true(ut_run_until(&f->loop, enq.calls == 1 && get.calls == 1 && many.calls == 1,
                             5000));
    assert_int_equal(enq.status, RD_STORE_LOST);
    assert_int_equal(many.status, RD_STORE_LOST);
    assert_int_equal(many.count, 0);
    assert_int_equal(get.status, RD_STORE_UNAVAILABLE);
    assert_true(e2e_mono_ms() - sent < 2000);   /* the drop, not the deadline */
    assert_int_equal(g_written.calls, 2);
    assert_true(g_written.last.unknown);
    assert_true(atomic_load(&g_fake.commands) >= 1);
    fixture_close(f);
    fake_stop();
}

/* Single enqueues sent together (src/enqueue_lines.c) when their calls
 * fail: each request is answered once, as its own call would have been.
 * The first, sent alone, gets Redis's error; the three that waited behind it
 * share an enqueue_many that the link drops under (LOST: outcome unknown for
 * each). Then, with the link down, a lone request is refused at once (-1,
 * no callback); and behind one that the link drops, the waiting ones cannot
 * be sent (UNAVAILABLE, nothing done). */
static void on_first_then_drop(const rd_store_messages_t *res, void *arg)
{
    on_messages(res, arg);
    atomic_store(&g_fake.mode, FAKE_DROP);  /* the shared call that follows is cut */
}

static void test_enqueue_lines_failures(void **state)
{
    (void)state;
    fake_start(FAKE_ANSWER, "-ERR boom\r\n");
    fixture_t *f = fixture_open(g_fake.port, 5000);
    rd_enqueue_lines_t *el = rd_enqueue_lines_new(f->s.store);
    const rd_enqueue_t e = { .payload = "x", .len = 1, .ttl_ms = -1 };
    got_t first = { 0 }, rest[3] = { { 0 } };
    assert_int_equal(rd_enqueue_lines_enqueue(el, f->q, &e, on_first_then_drop, &first), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(rd_enqueue_lines_enqueue(el, f->q, &e, on_messages, &rest[i]), 0);
    assert_true(ut_run_until(&f->loop, rest[0].calls + rest[1].calls + rest[2].calls == 3, 5000));
    assert_int_equal(first.calls, 1);
    assert_int_equal(first.status, RD_STORE_ERROR);
    assert_string_equal(first.detail, "ERR boom");
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rest[i].calls, 1);
        assert_int_equal(rest[i].status, RD_STORE_LOST);
        assert_int_equal(rest[i].count, 0);
    }
    rd_buf_t m = RD_BUF_INIT;
    rd_enqueue_lines_render_metrics(el, &m);
    assert_non_null(strstr(m.data, "\nretryd_enqueue_requests_total 4\n"));
    assert_non_null(strstr(m.data, "\nretryd_enqueue_waited_total 3\n"));
    assert_non_null(strstr(m.data, "\nretryd_enqueue_calls_total 2\n"));
    rd_buf_free(&m);

    /* The link is down now: a lone request cannot be sent. */
    got_t refused = { 0 };
    assert_false(rd_store_ready(f->s.store));
    assert_int_equal(rd_enqueue_lines_enqueue(el, f->q, &e, on_messages, &refused), -1);
    /* Back up (every command is dropped): one sent, two behind it. */
    assert_true(ut_run_until(&f->loop, rd_store_ready(f->s.store), 5000));
    got_t sent = { 0 }, behind[2] = { { 0 } };
    assert_int_equal(rd_enqueue_lines_enqueue(el, f->q, &e, on_messages, &sent), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(rd_enqueue_lines_enqueue(el, f->q, &e, on_messages, &behind[i]), 0);
    assert_true(ut_run_until(&f->loop, behind[0].calls + behind[1].calls == 2, 5000));
    assert_int_equal(sent.calls, 1);
    assert_int_equal(sent.status, RD_STORE_LOST);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(behind[i].calls, 1);
        assert_int_equal(behind[i].status, RD_STORE_UNAVAILABLE);
    }
    ut_run_for(&f->loop, 20);
    assert_int_equal(refused.calls, 0);
    assert_int_equal(first.calls + rest[0].calls + sent.calls + behind[1].calls, 4);
    rd_enqueue_lines_free(el);
    fixture_close(f);
    fake_stop();
}

/* A call Redis never answers: LOST after the deadline, then the store is
 * READY again after the reconnect. */
static void test_silent_redis_times_out(void **state)
{
    (void)state;
    fake_start(FAKE_SILENT, NULL);
    fixture_t *f = fixture_open(g_fake.port, 300);
    got_t claim = { 0 }, ping = { 0 };
    long long sent = e2e_mono_ms();
    assert_int_equal(rd_store_claim(f->s.store, f->q, LEASE, 1, NULL, on_messages, &claim), 0);
    assert_true(ut_run_until(&f->loop, claim.calls == 1, 5000));
    assert_int_equal(claim.status, RD_STORE_LOST);
    assert_true(e2e_mono_ms() - sent >= 290);
    assert_true(ut_run_until(&f->loop, rd_store_ready(f->s.store), 5000));
    assert_int_equal(rd_store_ping(f->s.store, on_status, &ping), 0);
    assert_true(ut_run_until(&f->loop, ping.calls == 1, 5000));
    assert_int_equal(ping.status, RD_STORE_OK);
    fixture_close(f);
    fake_stop();
}

int main(void)
{
    rd_log_set_level(RD_LOG_ERROR + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enqueue_claim_settle_get),
        cmocka_unit_test(test_enqueue_many_results),
        cmocka_unit_test(test_calls_on_a_shard_base),
        cmocka_unit_test(test_policy_create_and_sqs_results),
        cmocka_unit_test(test_enqueue_attributes_first_receive_must_exist),
        cmocka_unit_test(test_tags_clear_and_dlq_sources),
        cmocka_unit_test(test_move_task_rows),
        cmocka_unit_test(test_registration_lands_before_the_answer),
        cmocka_unit_test(test_not_ready_fails_at_once),
        cmocka_unit_test(test_wrong_reply_shape_is_an_error),
        cmocka_unit_test(test_enqueue_chunks_short_and_lost),
        cmocka_unit_test(test_link_drop_mid_call),
        cmocka_unit_test(test_enqueue_lines_failures),
        cmocka_unit_test(test_silent_redis_times_out),
    };
    if (ut_test_redis_port() == 0) {
        fprintf(stderr, "test_store: RETRYD_TEST_REDIS_PORT is not set (run it through scripts/test.sh)\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
