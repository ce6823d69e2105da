/* test_e2e_policy.c - end-to-end tests of build/retryd over HTTP against a real
 * redis-server: queue policy and flow control over HTTP (docs/reference.md
 * "Queue policy and flow control") and the time series (docs/series.md).
 *
 * The group's daemon, setup, and the helpers the e2e suites share: e2e_common.h. */

#define E2E_SUITE "test_e2e_policy"
#include "e2e_common.h"
#include "retryd/shards.h"
#include "e2e_shards.h"

/* ------------------------------------------------------------------------ */
/* Queue policy and flow control (docs/reference.md "Queue policy and flow control")                                 */
/* ------------------------------------------------------------------------ */

static const char *policy_path(const char *q)
{
    return e2e_fmt("/queues/%s/policy", q);
}

/* A counter of q's stats hash, 0 when never counted. */
static long long queue_counter(const char *q, const char *name)
{
    redisReply *x = e2e_rcmd(g_redis, "HGET %s:{%s}:stats %s", g_prefix, q, name);
    long long n = x->type == REDIS_REPLY_STRING ? atoll(x->str) : 0;
    freeReplyObject(x);
    return n;
}

/* GET on a queue without a policy answers the effective defaults; PUT takes
 * the whole object (absent fields back to their defaults) and answers it;
 * each bad field has its own 422 entry. */
static void test_policy_get_put(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "policy");
    e2e_response_t r = { 0 };
    http(&r, "GET", policy_path(q), NULL);
    rd_json_t *p = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(p, "queue"), q);
    assert_false(rd_json_bool(e2e_jget(p, "paused")));
    assert_int_equal(e2e_jint(p, "max_retries"), 3);
    rd_json_t *b = e2e_jget(p, "backoff");
    assert_int_equal(e2e_jint(b, "base_seconds"), 1);
    assert_int_equal(e2e_jint(b, "max_seconds"), 3600);
    assert_string_equal(e2e_jstr(b, "jitter"), "none");
    assert_int_equal(e2e_jint(p, "lease_seconds"), 30);        /* the daemon's */
    assert_int_equal(e2e_jint(p, "dead_ttl"), 30 * 86400);
    assert_int_equal(e2e_jint(p, "succeeded_ttl"), 3600);
    assert_int_equal(e2e_jint(p, "max_in_flight"), 0);
    e2e_jnull(p, "rate_limit");

    http(&r, "PUT", policy_path(q),
         "{\"max_retries\":6,\"backoff\":{\"base_seconds\":2,\"max_seconds\":60,"
         "\"jitter\":\"full\"},\"lease_seconds\":7,\"dead_ttl\":\"2d\",\"succeeded_ttl\":0,"
         "\"max_in_flight\":4,\"rate_limit\":{\"per_second\":2.5,\"burst\":3}}");
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "max_retries"), 6);
    assert_string_equal(e2e_jstr(e2e_jget(p, "backoff"), "jitter"), "full");
    assert_int_equal(e2e_jint(p, "dead_ttl"), 172800);
    assert_int_equal(e2e_jint(p, "succeeded_ttl"), 0);
    assert_int_equal(e2e_jint(e2e_jget(p, "rate_limit"), "burst"), 3);
    http(&r, "GET", policy_path(q), NULL);
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "lease_seconds"), 7);
    assert_int_equal(e2e_jint(p, "max_in_flight"), 4);
    assert_int_equal(e2e_jint(e2e_jget(p, "backoff"), "max_seconds"), 60);

    /* Precedence: the request's field over the policy over the flag. */
    long long id = enqueue(q, "{\"payload\":\"a\"}");
    http(&r, "GET", message_path(q, id, NULL), NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "max_retries"), 6);
    enqueue(q, "{\"payload\":\"b\",\"max_retries\":2}");
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
    expect_lease(e2e_expect_json(&r, 200), 7);
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":11}");
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "max_retries"), 2);
    expect_lease(p, 11);

    rd_json_t *errors;
    http(&r, "PUT", policy_path(q),
         "{\"max_retries\":1001,\"backoff\":{\"base_seconds\":0,\"jitter\":\"half\"},"
         "\"lease_seconds\":0,\"dead_ttl\":\"soon\",\"max_in_flight\":-1,"
         "\"rate_limit\":{\"per_second\":0}}");
    errors = expect_invalid(&r, policy_path(q), 8);
    expect_field_error(errors, "max_retries", "invalid", NULL);
    expect_field_error(errors, "backoff.base_seconds", "invalid", NULL);
    expect_field_error(errors, "backoff.jitter", "invalid", NULL);
    expect_field_error(errors, "lease_seconds", "invalid", NULL);
    expect_field_error(errors, "dead_ttl", "invalid", NULL);
    expect_field_error(errors, "max_in_flight", "invalid", NULL);
    expect_field_error(errors, "rate_limit.per_second", "invalid", NULL);
    expect_field_error(errors, "rate_limit.burst", "required", NULL);
    http(&r, "PUT", policy_path(q),
         "{\"dead_letter_rules\":[{\"error_contains\":\"429\",\"action\":\"retry\","
         "\"max_times\":0},{\"action\":\"dead\"}]}");
    errors = expect_invalid(&r, policy_path(q), 2);
    expect_field_error(errors, "dead_letter_rules[0].max_times", "invalid", NULL);
    expect_field_error(errors, "dead_letter_rules[1].error_contains", "required", NULL);
    http(&r, "PUT", policy_path(q), "{\"max_retires\":4}");
    expect_field_error(expect_invalid(&r, policy_path(q), 1), "max_retires", "invalid", NULL);
    http(&r, "PUT", policy_path(q), "[1]");
    e2e_expect_problem(&r, 400, "malformed-request", policy_path(q));

    /* {} is the whole policy: every field back to its default. */
    http(&r, "PUT", policy_path(q), "{}");
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "max_retries"), 3);
    assert_int_equal(e2e_jint(p, "lease_seconds"), 30);
    e2e_jnull(p, "rate_limit");
    e2e_response_free(&r);
}

/* The policy's backoff reaches a failure through HTTP: base 3 -> 6 s. */
/* shards (docs/reference.md "Shards"): 1 unless set; 1-64, anything else a
 * 422 on the field; this release takes only 1; a PUT or PATCH without it
 * keeps the count, here that of a queue raised to 3 through the library's
 * shards_set, which also shows the raise as unsettled. */
static void test_policy_shards_field(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "polshards");
    e2e_response_t r = { 0 };
    http(&r, "GET", policy_path(q), NULL);
    rd_json_t *p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "shards"), 1);
    assert_false(rd_json_bool(e2e_jget(p, "shards_settling")));
    static const char *const bad[] = { "0", "65", "-1", "2.5", "\"3\"", "null", "true" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "PUT", policy_path(q), e2e_fmt("{\"shards\":%s}", bad[i]));
        expect_field_error(expect_invalid(&r, policy_path(q), 1), "shards", "invalid", NULL);
    }
    http(&r, "PUT", policy_path(q), "{\"shards\":3}");
    expect_field_error(expect_invalid(&r, policy_path(q), 1), "shards", "invalid", NULL);
    http(&r, "PUT", policy_path(q), "{\"shards\":1,\"max_retries\":5}");
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "shards"), 1);
    assert_int_equal(e2e_jint(p, "max_retries"), 5);

    redisReply *x = e2e_rcmd(g_redis, "FCALL %s 1 %s:{%s} raise 3 0,0",
                             RD_FUNCTION("shards_set"), g_prefix, q);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_string_equal(x->element[0]->str, "ok");
    freeReplyObject(x);
    http(&r, "PUT", policy_path(q), "{\"max_retries\":7}");
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "shards"), 3);
    assert_true(rd_json_bool(e2e_jget(p, "shards_settling")));
    assert_int_equal(e2e_jint(p, "max_retries"), 7);
    http(&r, "PATCH", policy_path(q), "{\"lease_seconds\":9}");
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "shards"), 3);
    http(&r, "GET", policy_path(q), NULL);
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "shards"), 3);
    assert_int_equal(e2e_jint(p, "lease_seconds"), 9);
    e2e_response_free(&r);
}

/* A change of shards through PUT (a daemon with --allow-shards yes):
 * a raise on a busy queue loses nothing and copies the policy to the new
 * shards; a second change waits for the first to settle; a lowering is
 * refused (409, naming the shard and what it holds, nothing changed) while
 * any shard holds a message in any state, and done once none does; a raise
 * is refused while an older retryd library is loaded; a pause reaches every
 * shard's copy. The id of a message on shard 2 is found by id. */
static void test_policy_shards_change(void **state)
{
    (void)state;
    start_sharding_daemon();
    char q[64];
    e2e_queue_name(q, sizeof q, "reshard");
    e2e_response_t r = { 0 };
    long long ids[3];
    for (int i = 0; i < 3; i++) ids[i] = enqueue(q, "{\"payload\":\"busy\"}");
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), ids[0]);
    long long hold = hold_raise(q, 1, 3);   /* a stray once raised: the raise stays unsettled */

    side(&r, "PUT", policy_path(q), "{\"shards\":3,\"max_retries\":5}");
    rd_json_t *p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "shards"), 3);
    assert_true(rd_json_bool(e2e_jget(p, "shards_settling")));
    assert_int_equal(e2e_jint(p, "max_retries"), 5);
    for (int k = 1; k < 3; k++) {
        assert_string_equal(shard_hget(q, k, "policy", "max_retries"), "5");
        assert_string_equal(shard_hget(q, k, "policy", "shards"), "3");
        assert_string_equal(shard_hget(q, k, "shard", "index"), e2e_fmt("%d", k));
    }
    /* Nothing lost: the leased one is still leased, the others claimable. */
    http(&r, "GET", message_path(q, ids[0], NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "processing");
    for (int i = 1; i < 3; i++) {
        http(&r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
        assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), ids[i]);
    }
    /* Not settled yet: another change waits. A policy PUT without shards
     * keeps them and reaches every shard's copy. */
    side(&r, "PUT", policy_path(q), "{\"shards\":4}");
    e2e_expect_problem(&r, 409, "invalid-state", policy_path(q));
    side(&r, "PUT", policy_path(q), "{\"max_retries\":6}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), 3);
    assert_string_equal(shard_hget(q, 2, "policy", "max_retries"), "6");
    /* The stray group empties: the timer's next round closes the raise. */
    http(&r, "DELETE", message_path(q, hold, NULL), NULL);
    assert_int_equal(r.status, 204);
    close_raise(q);
    /* Shard 0 holds three: refused, and nothing changed. */
    side(&r, "PUT", policy_path(q), "{\"shards\":1}");
    e2e_expect_problem(&r, 409, "invalid-state", policy_path(q));
    rd_json_t *doc = rd_json_parse(r.body, r.body_len, NULL);
    const char *detail = e2e_jstr(doc, "detail");
    assert_non_null(strstr(detail, "shard 0"));
    assert_non_null(strstr(detail, "processing 3"));
    rd_json_free(doc);
    assert_string_equal(shard_hget(q, 0, "policy", "shards"), "3");
    assert_string_equal(shard_hget(q, 1, "shard", "retired"), "");
    assert_string_equal(shard_hget(q, 2, "shard", "retired"), "");
    assert_string_equal(shard_hget(q, 0, "shard", "lowering"), "");

    /* A queue whose only message is on shard 2 (placed there directly, as
     * placement will): refused naming shard 2; the message is found, and
     * deleted, by its id alone; then the lowering goes through. */
    char q2[64];
    e2e_queue_name(q2, sizeof q2, "lower");
    side(&r, "PUT", policy_path(q2), "{\"shards\":3}");
    e2e_expect_json(&r, 200);
    close_raise(q2);
    redisReply *x = e2e_rcmd(g_redis, "FCALL %s 1 %s:{%s:2.0} on-shard-2 3 0",
                             RD_FUNCTION("enqueue"), g_prefix, q2);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    freeReplyObject(x);
    const long long on2 = 20000000000001LL;
    side(&r, "PUT", policy_path(q2), "{\"shards\":2}");
    e2e_expect_problem(&r, 409, "invalid-state", policy_path(q2));
    doc = rd_json_parse(r.body, r.body_len, NULL);
    assert_non_null(strstr(e2e_jstr(doc, "detail"), "shard 2"));
    assert_non_null(strstr(e2e_jstr(doc, "detail"), "ready 1"));
    rd_json_free(doc);
    assert_string_equal(shard_hget(q2, 2, "shard", "retired"), "");   /* undone */
    http(&r, "GET", message_path(q2, on2, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "on-shard-2");
    http(&r, "DELETE", message_path(q2, on2, NULL), NULL);
    assert_int_equal(r.status, 204);
    side(&r, "PUT", policy_path(q2), "{\"shards\":1}");
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "shards"), 1);
    assert_false(rd_json_bool(e2e_jget(p, "shards_settling")));
    assert_true(atoll(shard_hget(q2, 1, "shard", "retired")) > 0);
    assert_true(atoll(shard_hget(q2, 2, "shard", "retired")) > 0);
    /* Raised again: the shard comes back, its ids go on from its counter. */
    side(&r, "PUT", policy_path(q2), "{\"shards\":3}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), 3);
    assert_string_equal(shard_hget(q2, 2, "shard", "retired"), "");
    /* A pause reaches the copies. */
    side(&r, "POST", e2e_fmt("/queues/%s/pause", q2), NULL);
    assert_true(rd_json_bool(e2e_jget(e2e_expect_json(&r, 200), "paused")));
    assert_string_equal(shard_hget(q2, 2, "policy", "paused"), "1");
    side(&r, "POST", e2e_fmt("/queues/%s/resume", q2), NULL);
    e2e_expect_json(&r, 200);
    assert_string_equal(shard_hget(q2, 2, "policy", "paused"), "");

    /* An older library loaded: no change of shards. */
    size_t len = 0;
    char *code = NULL;
    FILE *f = fopen("tests/fixtures/retryd_v8.lua", "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    len = (size_t)ftell(f);
    rewind(f);
    code = malloc(len);
    assert_int_equal(fread(code, 1, len, f), len);
    fclose(f);
    x = redisCommand(g_redis, "FUNCTION LOAD REPLACE %b", code, len);
    free(code);
    assert_int_equal(x->type, REDIS_REPLY_STRING);
    freeReplyObject(x);
    char q3[64];
    e2e_queue_name(q3, sizeof q3, "gated");
    side(&r, "PUT", policy_path(q3), "{\"shards\":2}");
    e2e_expect_problem(&r, 409, "invalid-state", policy_path(q3));
    doc = rd_json_parse(r.body, r.body_len, NULL);
    assert_non_null(strstr(e2e_jstr(doc, "detail"), "retryd_v8"));
    rd_json_free(doc);
    assert_string_equal(shard_hget(q3, 0, "policy", "shards"), "");
    freeReplyObject(redisCommand(g_redis, "FUNCTION DELETE retryd_v8"));
    side(&r, "PUT", policy_path(q3), "{\"shards\":2}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), 2);

    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

static long long redis_time_ms(void);

/* A PUT refused on another field changes no shards (found in review): b's
 * dead_letter_queue is a, so a PUT on a naming b is a cycle: 422, and the
 * count stays. */
static void test_policy_refused_put_keeps_shards(void **state)
{
    (void)state;
    start_sharding_daemon();
    char a[64], b[64];
    e2e_queue_name(a, sizeof a, "cyca");
    e2e_queue_name(b, sizeof b, "cycb");
    e2e_response_t r = { 0 };
    side(&r, "PUT", policy_path(b), e2e_fmt("{\"dead_letter_queue\":\"%s\"}", a));
    e2e_expect_json(&r, 200);
    side(&r, "PUT", policy_path(a), e2e_fmt("{\"shards\":3,\"dead_letter_queue\":\"%s\"}", b));
    expect_field_error(expect_invalid(&r, policy_path(a), 1), "dead_letter_queue", "invalid", NULL);
    assert_string_equal(shard_hget(a, 0, "policy", "shards"), "");
    assert_string_equal(shard_hget(a, 1, "policy", "shards"), "");
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* A lowering whose daemon died after lower_begin and a first retire (found
 * in review: it held every later change back for good): once 10 s old by
 * Redis's clock (set here), the next change undoes it and goes through. */
static void test_policy_abandoned_lowering_is_undone(void **state)
{
    (void)state;
    start_sharding_daemon();
    char q[64];
    e2e_queue_name(q, sizeof q, "stuck");
    e2e_response_t r = { 0 };
    side(&r, "PUT", policy_path(q), "{\"shards\":3}");
    e2e_expect_json(&r, 200);
    close_raise(q);
    freeReplyObject(e2e_rcmd(g_redis, "FCALL %s 1 %s:{%s} lower_begin 2",
                             RD_FUNCTION("shards_set"), g_prefix, q));
    freeReplyObject(e2e_rcmd(g_redis, "FCALL %s 1 %s:{%s:2.0} retire %s",
                             RD_FUNCTION("shard_retire"), g_prefix, q,
                             shard_hget(q, 0, "shard", "rev")));
    assert_string_not_equal(shard_hget(q, 2, "shard", "retired"), "");
    /* Young: another change waits. */
    side(&r, "PUT", policy_path(q), "{\"shards\":1}");
    e2e_expect_problem(&r, 409, "invalid-state", policy_path(q));
    freeReplyObject(e2e_rcmd(g_redis, "HSET %s:{%s}:shard lowering_at %lld", g_prefix, q,
                             redis_time_ms() - 10001));
    side(&r, "PUT", policy_path(q), "{\"shards\":1}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), 1);
    assert_string_equal(shard_hget(q, 0, "shard", "lowering"), "");
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* The id counter of shard k of q ("" when the shard never handed one out). */
static long long shard_seq(const char *q, int k)
{
    redisReply *x = k == 0 ? e2e_rcmd(g_redis, "GET %s:{%s}:seq", g_prefix, q)
                           : e2e_rcmd(g_redis, "GET %s:{%s:%d.0}:seq", g_prefix, q, k);
    long long n = x->type == REDIS_REPLY_STRING ? atoll(x->str) : 0;
    freeReplyObject(x);
    return n;
}

/* An idempotency key that jump places on shard `want` of 3 (and on 0 of 1). */
static void key_on_shard(char *out, size_t cap, const char *stem, int want)
{
    for (int i = 0;; i++) {
        snprintf(out, cap, "%s-%d", stem, i);
        if (rd_shards_pick(out, strlen(out), 3) == want) return;
    }
}

/* Placement on a sharded queue (docs/sharding.md "Enqueue: which shard"),
 * through single HTTP enqueues of a daemon that learns the layout on its
 * first one: ungrouped messages round robin (10 on each of 3 shards), a
 * group on its shard by the hash, first tried with "only if present" on its
 * shard under the count before the raise (not settled); a key retried
 * after the raise finds the message it made before it, on shard 0; a new
 * key dedups on its own shard. Each message is found by its id alone. */
static void test_policy_shards_placement(void **state)
{
    (void)state;
    start_sharding_daemon();
    char q[64], key_before[64], key_after[64];
    e2e_queue_name(q, sizeof q, "placed");
    key_on_shard(key_before, sizeof key_before, "before", 2);
    key_on_shard(key_after, sizeof key_after, "after", 2);
    e2e_response_t r = { 0 };
    side(&r, "POST", messages_path(q),
         e2e_fmt("{\"payload\":\"k\",\"idempotency_key\":\"%s\"}", key_before));
    long long before_id = e2e_jint(e2e_expect_json(&r, 201), "id");
    assert_true(before_id < RD_SHARD_SPAN);
    side(&r, "PUT", policy_path(q), "{\"shards\":3}");
    e2e_expect_json(&r, 200);
    for (int i = 0; i < 30; i++) {
        side(&r, "POST", messages_path(q), "{\"payload\":\"spread\"}");
        e2e_expect_json(&r, 201);
    }
    assert_int_equal(shard_seq(q, 0), 1 + 10);
    assert_int_equal(shard_seq(q, 1), 10);
    assert_int_equal(shard_seq(q, 2), 10);

    /* fnv("tenant-42") jumps to 1 of 3 (tests/fixtures/shard_vectors.txt). */
    long long gid = 0;
    for (int i = 0; i < 5; i++) {
        side(&r, "POST", messages_path(q), "{\"payload\":\"g\",\"group\":\"tenant-42\"}");
        gid = e2e_jint(e2e_expect_json(&r, 201), "id");
        assert_int_equal(gid / RD_SHARD_SPAN, 1);
    }
    redisReply *x = e2e_rcmd(g_redis, "ZCARD %s:{%s:1.0}:3:gq:tenant-42", g_prefix, q);
    assert_int_equal(x->integer, 5);
    freeReplyObject(x);

    /* The key made before the raise, sent again: its message, from shard 0. */
    side(&r, "POST", messages_path(q),
         e2e_fmt("{\"payload\":\"k\",\"idempotency_key\":\"%s\"}", key_before));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), before_id);
    side(&r, "POST", messages_path(q),
         e2e_fmt("{\"payload\":\"k2\",\"idempotency_key\":\"%s\"}", key_after));
    long long after_id = e2e_jint(e2e_expect_json(&r, 201), "id");
    assert_int_equal(after_id / RD_SHARD_SPAN, 2);
    side(&r, "POST", messages_path(q),
         e2e_fmt("{\"payload\":\"k2\",\"idempotency_key\":\"%s\"}", key_after));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), after_id);

    /* By id, from the other daemon too (it has no view). */
    http(&r, "GET", message_path(q, gid, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "group"), "tenant-42");
    http(&r, "GET", message_path(q, after_id, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "k2");
    /* The other daemon's enqueue learns the layout too, and places by it. */
    http(&r, "POST", messages_path(q), "{\"payload\":\"g\",\"group\":\"tenant-42\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id") / RD_SHARD_SPAN, 1);

    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* A batch enqueue on a sharded queue: each call goes whole to one shard,
 * the runs of ungrouped items spread by the round robin, a grouped item
 * (which looks at its shard under the count before the raise first) alone
 * to its shard; every item 201, in order. */
static void test_policy_shards_batch(void **state)
{
    (void)state;
    start_sharding_daemon();
    char q[64];
    e2e_queue_name(q, sizeof q, "batched");
    e2e_response_t r = { 0 };
    long long hold = hold_raise(q, 1, 3);   /* unsettled: a grouped item looks at shard 0 first */
    assert_int_equal(hold, 1);
    side(&r, "PUT", policy_path(q), "{\"shards\":3}");
    e2e_expect_json(&r, 200);
    rd_buf_t body = RD_BUF_INIT;
    rd_buf_puts(&body, "{\"messages\":[");
    for (int i = 0; i < 250; i++)
        rd_buf_printf(&body, "%s{\"payload\":\"m%d\"%s}", i ? "," : "", i,
                      i == 100 ? ",\"group\":\"tenant-42\"" : "");
    rd_buf_puts(&body, "]}");
    http_to(g_side.port, &r, "POST", messages_path(q), body.data, body.len);
    rd_json_t *doc = e2e_expect_json(&r, 200);
    rd_json_t *results = e2e_jget(doc, "results");
    assert_int_equal(rd_json_array_size(results), 250);
    for (size_t i = 0; i < 250; i++) {
        const rd_json_t *it = rd_json_array_at(results, i);
        assert_int_equal(e2e_jint(it, "status"), 201);
        long long id = e2e_jint(e2e_jget(it, "message"), "id");
        int want = i < 100 ? 0 : i == 100 ? 1 : i <= 200 ? 1 : 2;
        assert_int_equal(id / RD_SHARD_SPAN, want);
    }
    assert_int_equal(shard_seq(q, 0), 1 + 100);
    assert_int_equal(shard_seq(q, 1), 101);
    assert_int_equal(shard_seq(q, 2), 49);
    rd_buf_free(&body);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

static void start_long_poll(e2e_conn_t *c, const char *q, int wait_s);
static void wait_subscribed(const char *q);

/* Claims on a sharded queue (docs/sharding.md "Claim: which shards"): a
 * worker loop of settle-and-claim through a daemon that has no view yet
 * drains 10 messages from each of 3 shards (it learns the layout from an
 * empty claim, then visits the shards in turn), each settled on its own
 * shard by id; a long-poll parked on that daemon gets a message sent to
 * any shard. */
static void test_policy_shards_claims(void **state)
{
    (void)state;
    start_sharding_daemon();
    char q[64];
    e2e_queue_name(q, sizeof q, "claimed");
    e2e_response_t r = { 0 };
    side(&r, "PUT", policy_path(q), "{\"shards\":3}");
    e2e_expect_json(&r, 200);
    for (int i = 0; i < 30; i++) {
        side(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"w%d\"}", i));
        e2e_expect_json(&r, 201);
    }
    /* Stats sum the shards, from a daemon without a view too. */
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *st = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(e2e_jget(st, "counts"), "pending"), 30);
    assert_int_equal(e2e_jint(e2e_jget(st, "totals"), "enqueued"), 30);
    int per_shard[3] = { 0 }, claimed = 0, settled = 0, empty = 0;
    long long prev = 0, ids[30];
    char token[128] = "";
    for (int turn = 0; turn < 100 && (claimed < 30 || prev); turn++) {
        if (prev)
            http(&r, "POST", e2e_fmt("/queues/%s/claim", q),
                 e2e_fmt("{\"settle\":[{\"id\":%lld,\"lease_token\":\"%s\","
                         "\"outcome\":\"succeeded\"}]}", prev, token));
        else
            http(&r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
        const rd_json_t *m = NULL;
        rd_json_t *doc = NULL;
        if (r.status == 204) {
            empty++;
        } else {
            doc = e2e_expect_json(&r, 200);
            rd_json_t *list = rd_json_get(doc, "messages");
            if (prev) {
                rd_json_t *one = rd_json_array_at(e2e_jget(doc, "settled"), 0);
                assert_int_equal(e2e_jint(one, "id"), prev);
                assert_string_equal(e2e_jstr(one, "status"), "succeeded");
                settled++;
            }
            m = list ? (rd_json_array_size(list) ? rd_json_array_at(list, 0) : NULL) : doc;
        }
        prev = 0;
        if (m) {
            prev = e2e_jint(m, "id");
            snprintf(token, sizeof token, "%s", e2e_jstr(m, "lease_token"));
            assert_true(claimed < 30);
            ids[claimed++] = prev;
            per_shard[prev / RD_SHARD_SPAN]++;
        }
    }
    assert_int_equal(claimed, 30);
    assert_int_equal(settled, 30);
    for (int k = 0; k < 3; k++) assert_int_equal(per_shard[k], 10);
    assert_true(empty <= 3);   /* the learning claim, at most */
    side(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    st = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(e2e_jget(st, "counts"), "pending"), 0);
    assert_int_equal(e2e_jint(e2e_jget(st, "counts"), "succeeded"), 30);
    assert_int_equal(e2e_jint(e2e_jget(st, "totals"), "succeeded"), 30);
    assert_int_equal(e2e_jint(e2e_jget(st, "totals"), "claimed"), 30);
    for (int i = 0; i < 30; i++) {
        for (int j = 0; j < i; j++) assert_true(ids[j] != ids[i]);
        http(&r, "GET", message_path(q, ids[i], NULL), NULL);
        assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "succeeded");
    }

    /* A long-poll parked here hears of a send to any shard. */
    for (int i = 0; i < 3; i++) {
        e2e_conn_t c = { .fd = -1 };
        start_long_poll(&c, q, 10);
        wait_subscribed(q);
        side(&r, "POST", messages_path(q), e2e_fmt("{\"payload\":\"late%d\"}", i));
        long long id = e2e_jint(e2e_expect_json(&r, 201), "id");
        e2e_response_t w = { 0 };
        assert_int_equal(e2e_read_response(&c, &w), 0);
        assert_int_equal(w.status, 200);
        rd_json_t *doc = rd_json_parse(w.body, w.body_len, NULL);
        assert_int_equal(e2e_jint(doc, "id"), id);
        rd_json_free(doc);
        e2e_response_free(&w);
        e2e_conn_close(&c);
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* The timer on a sharded queue: a retry scheduled on shard 2 is promoted,
 * and leases that ran out on shards 0 and 1 are reclaimed, by the ticks of
 * every shard; each message comes back to a claim. */
static void test_policy_shards_timer(void **state)
{
    (void)state;
    start_sharding_daemon();
    char q[64];
    e2e_queue_name(q, sizeof q, "ticked");
    e2e_response_t r = { 0 };
    side(&r, "PUT", policy_path(q), "{\"shards\":3}");
    e2e_expect_json(&r, 200);
    long long ids[3];
    for (int i = 0; i < 3; i++) {
        side(&r, "POST", messages_path(q), "{\"payload\":\"t\"}");
        ids[i] = e2e_jint(e2e_expect_json(&r, 201), "id");
    }
    long long on2 = 0;
    char token2[128] = "";
    int got = 0;
    for (int turn = 0; turn < 20 && got < 3; turn++) {
        side(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":1}");
        if (r.status == 204) continue;
        rd_json_t *m = e2e_expect_json(&r, 200);
        got++;
        if (e2e_jint(m, "id") / RD_SHARD_SPAN == 2) {
            on2 = e2e_jint(m, "id");
            snprintf(token2, sizeof token2, "%s", e2e_jstr(m, "lease_token"));
        }
    }
    assert_int_equal(got, 3);
    assert_true(on2 > 0);
    side(&r, "POST", message_path(q, on2, "fail"),
         e2e_fmt("{\"lease_token\":\"%s\",\"error\":\"later\",\"retry_after_seconds\":1}", token2));
    e2e_expect_json(&r, 200);
    /* The other two: their leases run out. All three come back. */
    bool back[3] = { false };
    int n = 0;
    for (long long t0 = e2e_mono_ms(); n < 3;) {
        if (e2e_mono_ms() - t0 > 15000) fail_msg("%d of 3 came back within 15 s", n);
        side(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":30}");
        if (r.status == 204) {
            e2e_pause_ms(50);
            continue;
        }
        rd_json_t *m = e2e_expect_json(&r, 200);
        long long id = e2e_jint(m, "id");
        assert_true(e2e_jint(m, "retry_count") >= 1);
        for (int i = 0; i < 3; i++)
            if (ids[i] == id && !back[i]) {
                back[i] = true;
                n++;
            }
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* Regression test (found in review of steps 7-8; the behaviour below is
 * what it caught, fixed since): the timer of a sharded queue whose view went idle.
 * A view unused for 10 s is dropped (shard_view.h), and the promoter takes
 * a queue it has no view of as one shard: it ticks shard 0 alone and
 * reports shard 0's next_in_ms as the whole queue's (on_ticked learns the
 * view only for the next round, which then comes when shard 0 says). Three
 * messages, one per shard, leased for 11 s; shard 0's settled at once;
 * nothing else is sent. When the leases run out, the round (of either
 * daemon: neither has a fresh view) ticks shard 0, finds nothing due there,
 * and the expired leases on shards 1 and 2 are not reclaimed: read from
 * Redis 3 s later they are still leased, and claims do not get them (the
 * registry's sweep, up to a minute away, is the only next tick). On a
 * queue of one shard, or with leases of 1 s (test_policy_shards_timer),
 * every expired lease is reclaimed at once. */
static void test_policy_shards_timer_after_idle_view(void **state)
{
    (void)state;
    assert_int_equal(start_daemon(&g_side, g_redis_port, g_prefix, true, "--allow-shards", "yes",
                                  NULL), 0);
    char q[64];
    e2e_queue_name(q, sizeof q, "idleview");
    e2e_response_t r = { 0 };
    side(&r, "PUT", policy_path(q), "{\"shards\":3}");
    e2e_expect_json(&r, 200);
    long long ids[3];
    int on[3] = { 0 };
    for (int i = 0; i < 3; i++) {
        side(&r, "POST", messages_path(q), "{\"payload\":\"t\"}");
        ids[i] = e2e_jint(e2e_expect_json(&r, 201), "id");
        on[ids[i] / RD_SHARD_SPAN]++;
    }
    for (int k = 0; k < 3; k++) assert_int_equal(on[k], 1);
    int got = 0;
    for (int turn = 0; turn < 20 && got < 3; turn++) {
        side(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":11}");
        if (r.status == 204) continue;
        rd_json_t *m = e2e_expect_json(&r, 200);
        got++;
        long long id = e2e_jint(m, "id");
        if (id / RD_SHARD_SPAN == 0) {
            side(&r, "POST", message_path(q, id, "succeed"), "{}");
            assert_int_equal(r.status, 200);
        }
    }
    assert_int_equal(got, 3);
    /* Nothing sent until the leases have run out and been ticked. */
    e2e_pause_ms(11000 + 3000);
    /* Read from Redis (no request to a daemon, which would refresh its
     * view): the leases on shards 1 and 2 ran out 3 s ago. */
    int stuck = 0;
    char which[64] = "";
    long long now_ms = redis_time_ms();
    for (int i = 0; i < 3; i++) {
        int k = (int)(ids[i] / RD_SHARD_SPAN);
        if (k == 0) continue;
        redisReply *x = e2e_rcmd(g_redis, "ZSCORE %s:{%s:%d.0}:3:processing %lld", g_prefix, q,
                                 k, ids[i]);
        if (x->type == REDIS_REPLY_STRING && atoll(x->str) < now_ms) {
            stuck++;
            snprintf(which + strlen(which), sizeof which - strlen(which),
                     " shard %d (ran out %lld ms ago)", k, now_ms - atoll(x->str));
        }
        freeReplyObject(x);
    }
    int n = 0;
    for (long long t0 = e2e_mono_ms(); n < 2 && e2e_mono_ms() - t0 < 5000;) {
        side(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":30}");
        if (r.status == 204) {
            e2e_pause_ms(100);
            continue;
        }
        e2e_expect_json(&r, 200);
        n++;
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    if (stuck > 0)
        fail_msg("3 s after their 11 s leases ran out, %d of 2 are still leased, not "
                 "reclaimed:%s; then %d of 2 came back in 5 s of claims", stuck, which, n);
    assert_int_equal(n, 2);
}

/* Regression test (found in review of steps 7-8; the behaviour below is
 * what it caught, fixed since): a daemon that only claims never sees a raise. Its
 * view is learned once (an empty claim says "sharded"), kept while in use,
 * and corrected only by an enqueue's RESHARD: claims, ticks and long-polls
 * carry no rev and learn nothing while a view exists. The group's daemon
 * (no enqueue here) drains a 2-shard queue, learning n = 2; the side daemon
 * raises it to 3 and sends 6 messages over shards 0, 1, 2; the group's
 * daemon, claiming every 50 ms, never reaches shard 2. */
static void test_policy_shards_claims_see_a_raise(void **state)
{
    (void)state;
    assert_int_equal(start_daemon(&g_side, g_redis_port, g_prefix, true, "--allow-shards", "yes",
                                  NULL), 0);
    char q[64];
    e2e_queue_name(q, sizeof q, "raisedunder");
    e2e_response_t r = { 0 };
    side(&r, "PUT", policy_path(q), "{\"shards\":2}");
    e2e_expect_json(&r, 200);
    close_raise(q);
    for (int i = 0; i < 4; i++) {
        side(&r, "POST", messages_path(q), "{\"payload\":\"before\"}");
        e2e_expect_json(&r, 201);
    }
    /* The consumer's daemon drains them and learns the 2 shards. */
    int drained = 0;
    for (int turn = 0; turn < 40 && drained < 4; turn++) {
        http(&r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
        if (r.status == 204) continue;
        long long id = e2e_jint(e2e_expect_json(&r, 200), "id");
        http(&r, "POST", message_path(q, id, "succeed"), "{}");
        assert_int_equal(r.status, 200);
        drained++;
    }
    assert_int_equal(drained, 4);
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);   /* empty: its view is 2 shards */
    assert_int_equal(r.status, 204);

    side(&r, "PUT", policy_path(q), "{\"shards\":3}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "shards"), 3);
    close_raise(q);
    int sent[3] = { 0 };
    for (int i = 0; i < 6; i++) {
        side(&r, "POST", messages_path(q), "{\"payload\":\"after\"}");
        /* A 503 here is the next test's finding (RESHARD, then COPY): sent again. */
        if (r.status == 503) side(&r, "POST", messages_path(q), "{\"payload\":\"after\"}");
        sent[e2e_jint(e2e_expect_json(&r, 201), "id") / RD_SHARD_SPAN]++;
    }
    assert_true(sent[2] > 0);
    int got[3] = { 0 }, n = 0;
    for (long long t0 = e2e_mono_ms(); n < 6 && e2e_mono_ms() - t0 < 5000;) {
        http(&r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
        if (r.status == 204) {
            e2e_pause_ms(50);
            continue;
        }
        long long id = e2e_jint(e2e_expect_json(&r, 200), "id");
        got[id / RD_SHARD_SPAN]++;
        n++;
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    if (n < 6)
        fail_msg("claimed %d of 6 in 5 s (shard 0: %d of %d, 1: %d of %d, 2: %d of %d)", n, got[0],
                 sent[0], got[1], sent[1], got[2], sent[2]);
}

/* Regression test (found in review of steps 7-8; the behaviour below is
 * what it caught, fixed since): a single enqueue is placed again only once in all
 * (enqueue_lines.c again_after), so one whose stale view is refused
 * (RESHARD) and which then lands on a shard whose copy lags (COPY: after
 * a close of a raise on shard 0 before its copies, or a daemon that died
 * between, docs/sharding.md section 7) is answered 503, though the copy it
 * needed is exactly what the next request does. Here: a view of 2 shards;
 * a raise to 3 (copied) and its close on shard 0 alone; the next enqueue
 * goes to shard 1 (RESHARD: older), learns the closed layout, goes to
 * shard 2 (COPY: its copy is older) and is answered 503. */
static void test_policy_shards_reshard_then_copy(void **state)
{
    (void)state;
    assert_int_equal(start_daemon(&g_side, g_redis_port, g_prefix, true, "--allow-shards", "yes",
                                  NULL), 0);
    char q[64];
    e2e_queue_name(q, sizeof q, "reshardcopy");
    e2e_response_t r = { 0 };
    side(&r, "PUT", policy_path(q), "{\"shards\":2}");
    e2e_expect_json(&r, 200);
    close_raise(q);
    side(&r, "POST", messages_path(q), "{\"payload\":\"first\"}");   /* learns 2 shards: on 0 */
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id") / RD_SHARD_SPAN, 0);
    side(&r, "PUT", policy_path(q), "{\"shards\":3}");
    e2e_expect_json(&r, 200);
    close_raise(q);
    /* Other daemons' changes meanwhile, as this daemon meets them: shard 1
     * holds a copy newer than its view, shard 0 a layout newer still, shard
     * 2 the older copy. */
    long long rev = atoll(shard_hget(q, 0, "shard", "rev"));
    freeReplyObject(e2e_rcmd(g_redis, "HSET %s:{%s:1.0}:shard rev %lld", g_prefix, q, rev + 1));
    freeReplyObject(e2e_rcmd(g_redis, "HSET %s:{%s}:shard rev %lld", g_prefix, q, rev + 2));
    side(&r, "POST", messages_path(q), "{\"payload\":\"second\"}");
    int status = r.status;
    char body[512];
    snprintf(body, sizeof body, "%.*s", r.body ? (int)r.body_len : 0, r.body ? r.body : "");
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    if (status != 201) fail_msg("the enqueue after the close answered %d: %s", status, body);
}

/* Regression test (found in review of steps 7-8; the behaviour below is
 * what it caught, fixed since): a long-poll on a sharded queue misses a send that
 * comes more than 10 s into its wait. The waiter's serving looks the view
 * up when the wake comes (waiters.c serve); a view unused for 10 s is
 * dropped there, and without one the serving claims shard 0 alone, so a
 * send to shard 1 wakes the waiter, the claim finds nothing and it waits
 * on to its deadline: 204 with a claimable message. The group's daemon
 * (the consumer) learns the layout from its first empty claim. (Within
 * 10 s of the poll the same send is served: test_policy_shards_claims.) */
static void test_policy_shards_long_poll_past_10s(void **state)
{
    (void)state;
    assert_int_equal(start_daemon(&g_side, g_redis_port, g_prefix, true, "--allow-shards", "yes",
                                  NULL), 0);
    char q[64];
    e2e_queue_name(q, sizeof q, "longview");
    e2e_response_t r = { 0 };
    side(&r, "PUT", policy_path(q), "{\"shards\":3}");
    e2e_expect_json(&r, 200);
    close_raise(q);
    side(&r, "POST", messages_path(q), "{\"payload\":\"first\"}");   /* on shard 0 */
    long long first = e2e_jint(e2e_expect_json(&r, 201), "id");
    assert_int_equal(first / RD_SHARD_SPAN, 0);
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), first);
    http(&r, "POST", message_path(q, first, "succeed"), "{}");
    assert_int_equal(r.status, 200);

    e2e_conn_t c = { .fd = -1 };
    start_long_poll(&c, q, 16);
    wait_subscribed(q);
    e2e_pause_ms(11500);
    /* A send to shard 1 (as a producer's placement puts it there; sent
     * straight to that shard, so that no daemon's view is touched). */
    redisReply *x = e2e_rcmd(g_redis, "FCALL %s 1 %s:{%s:1.0} late 3 0", RD_FUNCTION("enqueue"),
                             g_prefix, q);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    long long id = x->element[1]->integer;
    freeReplyObject(x);
    assert_int_equal(id / RD_SHARD_SPAN, 1);
    e2e_response_t w = { 0 };
    long long t0 = e2e_mono_ms();
    assert_int_equal(e2e_read_response(&c, &w), 0);
    int status = w.status;
    long long waited = e2e_mono_ms() - t0;
    e2e_response_free(&w);
    e2e_conn_close(&c);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    if (status != 200)
        fail_msg("the long-poll answered %d %lld ms after a send to shard %lld (11.5 s into its "
                 "16 s wait)", status, waited, id / RD_SHARD_SPAN);
}

static void test_policy_backoff_over_http(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "polbackoff");
    e2e_response_t r = { 0 };
    http(&r, "PUT", policy_path(q), "{\"backoff\":{\"base_seconds\":3}}");
    e2e_expect_json(&r, 200);
    long long id = enqueue(q, "{\"payload\":\"a\"}");
    assert_int_equal(claim_one(q, 30, NULL, 0), id);
    http(&r, "POST", message_path(q, id, "fail"), "{\"error\":\"e\"}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jtime(m, "retry_after") - e2e_jtime(m, "updated_at"), 6000);
    e2e_response_free(&r);
}

/* Seed 001's DLQ consumer as a policy (docs/dead-letters.md §2): a 429 or a
 * "rate limit" comes back after 300 s (even when the worker says it is
 * permanent), a 503 at once, anything else goes dead at its first failure
 * (max_retries 1). Shown by GET policy, counted in stats and /metrics. */
static void test_dead_letter_rules_seed_001(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "rules");
    e2e_response_t r = { 0 };
    http(&r, "PUT", policy_path(q),
         "{\"max_retries\":1,\"dead_letter_rules\":["
         "{\"error_contains\":\"429\",\"action\":\"retry\",\"delay_seconds\":300,\"max_times\":5},"
         "{\"error_contains\":\"rate limit\",\"action\":\"retry\",\"delay_seconds\":300,\"max_times\":5},"
         "{\"error_contains\":\"503\",\"action\":\"retry\",\"max_times\":3}]}");
    rd_json_t *p = e2e_expect_json(&r, 200);
    rd_json_t *rules = e2e_jget(p, "dead_letter_rules");
    assert_int_equal(rd_json_array_size(rules), 3);
    assert_string_equal(e2e_jstr(rd_json_array_at(rules, 0), "error_contains"), "429");
    assert_int_equal(e2e_jint(rd_json_array_at(rules, 1), "delay_seconds"), 300);
    assert_int_equal(e2e_jint(rd_json_array_at(rules, 2), "delay_seconds"), 0);
    http(&r, "GET", policy_path(q), NULL);
    p = e2e_expect_json(&r, 200);
    assert_int_equal(rd_json_array_size(e2e_jget(p, "dead_letter_rules")), 3);

    static const struct {
        const char *body;
        const char *status;
        long long delay_ms;   /* -1: no retry_after */
    } cases[] = {
        { "{\"error\":\"HTTP 429 Too Many Requests\",\"retryable\":false}", "pending", 300000 },
        { "{\"error\":\"upstream rate limit\",\"retry_after_seconds\":5}", "pending", 300000 },
        { "{\"error\":\"503 Service Unavailable\"}", "pending", 0 },
        { "{\"error\":\"400 bad request\"}", "dead", -1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long long id = enqueue(q, "{\"payload\":\"job\"}");
        assert_int_equal(claim_one(q, 30, NULL, 0), id);
        http(&r, "POST", message_path(q, id, "fail"), cases[i].body);
        rd_json_t *m = e2e_expect_json(&r, 200);
        assert_string_equal(e2e_jstr(m, "status"), cases[i].status);
        if (cases[i].delay_ms >= 0)
            assert_int_equal(e2e_jtime(m, "retry_after") - e2e_jtime(m, "updated_at"),
                             cases[i].delay_ms);
        else
            e2e_jnull(m, "retry_after");
        if (cases[i].delay_ms == 0) {
            /* Back at once: the next claim takes it. */
            assert_int_equal(claim_one(q, 30, NULL, 0), id);
        }
    }
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *st = e2e_expect_json(&r, 200);
    rules = e2e_jget(st, "dead_letter_rules");
    assert_int_equal(rd_json_array_size(rules), 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(e2e_jint(rd_json_array_at(rules, i), "rule"), (long long)i);
        assert_int_equal(e2e_jint(rd_json_array_at(rules, i), "retried"), 1);
        assert_int_equal(e2e_jint(rd_json_array_at(rules, i), "dead"), 0);
    }
    assert_int_equal(e2e_jint(e2e_jget(st, "totals"), "dead"), 1);
    metrics_with(&r, e2e_fmt("retryd_dead_letter_rule_total{queue=\"%s\",rule=\"2\","
                             "outcome=\"retried\"} 1\n", q));
    /* The 503 one fails again in a settle: the rule brings it back again. */
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q),
         e2e_fmt("{\"settle\":[{\"id\":%lld,\"outcome\":\"failed\","
                 "\"error\":\"503\"}]}", (long long)3));
    p = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(rd_json_array_at(e2e_jget(p, "settled"), 0), "status"), "pending");
    assert_int_equal(queue_counter(q, "rule_2_retried"), 2);
    e2e_response_free(&r);
}

/* A long-poll claim that started on its own connection. */
static void start_long_poll(e2e_conn_t *c, const char *q, int wait_s)
{
    assert_int_equal(e2e_conn_open(c, g_daemon.port), 0);
    const char *body = e2e_fmt("{\"wait_seconds\":%d}", wait_s);
    assert_int_equal(e2e_send_request(c, "POST", e2e_fmt("/queues/%s/claim", q), NULL, body,
                                      strlen(body)), 0);
}

/* Waits (bounded) until the daemon has parked a claim on q, seen as its
 * subscription to the queue's wake channel. */
static void wait_subscribed(const char *q)
{
    long long t0 = e2e_mono_ms();
    for (;;) {
        redisReply *x = e2e_rcmd(g_redis, "PUBSUB NUMSUB %s:{%s}:wake", g_prefix, q);
        bool on = x->elements == 2 && x->element[1]->integer > 0;
        freeReplyObject(x);
        if (on) return;
        if (e2e_mono_ms() - t0 > 5000) fail_msg("no subscription to %s's wake within 5 s", q);
        e2e_pause_ms(5);
    }
}

/* The SQS endpoint's policy fields over HTTP (docs/reference.md "Queue
 * policy and flow control"): shown by GET with their defaults, set by PUT and
 * PATCH, each checked; created_at and updated_at are the library's (a GET's
 * answer sent back is taken). The enqueue's default delay and size limit,
 * and a claim's default long poll, come from them. */
static void test_sqs_policy_fields(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "sqspolicy");
    e2e_response_t r = { 0 };
    http(&r, "GET", policy_path(q), NULL);
    rd_json_t *p = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(p, "lease_expiry"), "backoff");
    assert_int_equal(e2e_jint(p, "delay_seconds"), 0);
    e2e_jnull(p, "max_payload_bytes");
    assert_int_equal(e2e_jint(p, "wait_seconds"), 0);
    assert_false(rd_json_bool(e2e_jget(p, "sqs")));
    assert_false(rd_json_bool(e2e_jget(p, "content_based_dedup")));
    e2e_jnull(p, "created_at");
    e2e_jnull(p, "updated_at");

    long long before = e2e_wall_ms();
    http(&r, "PUT", policy_path(q),
         "{\"max_retries\":\"unlimited\",\"lease_expiry\":\"redeliver\",\"delay_seconds\":2,"
         "\"max_payload_bytes\":1024,\"wait_seconds\":1,\"sqs\":true,"
         "\"content_based_dedup\":true}");
    p = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(p, "max_retries"), "unlimited");
    assert_string_equal(e2e_jstr(p, "lease_expiry"), "redeliver");
    assert_int_equal(e2e_jint(p, "delay_seconds"), 2);
    assert_int_equal(e2e_jint(p, "max_payload_bytes"), 1024);
    assert_int_equal(e2e_jint(p, "wait_seconds"), 1);
    assert_true(rd_json_bool(e2e_jget(p, "sqs")));
    assert_true(rd_json_bool(e2e_jget(p, "content_based_dedup")));
    long long created = e2e_jint(p, "created_at");
    assert_true(created >= before - 1000 && created <= e2e_wall_ms() + 1000);
    assert_int_equal(e2e_jint(p, "updated_at"), created);
    /* The answer sent back as it is: the same policy, the stamps ignored. */
    char *back = strdup(r.body);
    http(&r, "PUT", policy_path(q), back);
    free(back);
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "created_at"), created);
    assert_string_equal(e2e_jstr(p, "lease_expiry"), "redeliver");

    /* No delay_seconds: the policy's; the message's max_retries -1 is unlimited. */
    http(&r, "POST", messages_path(q), "{\"payload\":\"later\"}");
    p = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(p, "max_retries"), -1);
    assert_int_equal(e2e_jtime(p, "retry_after") - e2e_jtime(p, "created_at"), 2000);
    /* A payload past max_payload_bytes: 413 on the field, naming the limit. */
    char body[1200];
    snprintf(body, sizeof body, "{\"payload\":\"%01025d\",\"delay_seconds\":0}", 0);
    http(&r, "POST", messages_path(q), body);
    p = e2e_expect_problem(&r, 413, "payload-too-large", messages_path(q));
    rd_json_t *errors = e2e_jget(p, "errors");
    assert_int_equal(rd_json_array_size(errors), 1);
    assert_string_equal(e2e_jstr(rd_json_array_at(errors, 0), "field"), "payload");
    assert_non_null(strstr(e2e_jstr(rd_json_array_at(errors, 0), "message"), "1024"));
    assert_int_equal(queue_counter(q, "enqueued"), 1);

    /* A claim without wait_seconds waits the policy's: parked until a send. */
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_daemon.port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", e2e_fmt("/queues/%s/claim", q), NULL, NULL, 0),
                     0);
    wait_subscribed(q);
    long long id = enqueue(q, "{\"payload\":\"now\",\"delay_seconds\":0}");
    e2e_response_t lp = { 0 };
    assert_int_equal(e2e_read_response(&c, &lp), 0);
    assert_int_equal(e2e_jint(e2e_expect_json(&lp, 200), "id"), id);
    e2e_response_free(&lp);
    e2e_conn_close(&c);
    /* wait_seconds 0 given: no wait. */
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"wait_seconds\":0}");
    assert_int_equal(r.status, 204);

    http(&r, "PUT", policy_path(q),
         "{\"lease_expiry\":\"never\",\"delay_seconds\":901,\"max_payload_bytes\":1023,"
         "\"wait_seconds\":21,\"sqs\":\"yes\",\"content_based_dedup\":1,"
         "\"max_retries\":\"forever\"}");
    errors = expect_invalid(&r, policy_path(q), 7);
    static const char *const fields[] = { "lease_expiry", "delay_seconds", "max_payload_bytes",
                                          "wait_seconds", "sqs", "content_based_dedup",
                                          "max_retries" };
    for (size_t i = 0; i < 7; i++) expect_field_error(errors, fields[i], "invalid", NULL);
    /* PATCH null puts one back to its default. */
    http(&r, "PATCH", policy_path(q), "{\"delay_seconds\":null,\"max_retries\":1000}");
    p = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(p, "delay_seconds"), 0);
    assert_int_equal(e2e_jint(p, "max_retries"), 1000);
    assert_int_equal(e2e_jint(p, "wait_seconds"), 1);
    e2e_response_free(&r);
}

/* While paused nothing is leased (a long-poll waits, enqueue goes on); a
 * resume wakes the long-poll at once. */
static void test_pause_and_resume(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "pause");
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/pause", q), NULL);
    rd_json_t *p = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(p, "queue"), q);
    assert_true(rd_json_bool(e2e_jget(p, "paused")));
    long long id = enqueue(q, "{\"payload\":\"a\"}");
    assert_int_equal(claim_one(q, 30, NULL, 0), 0);
    http(&r, "GET", policy_path(q), NULL);
    assert_true(rd_json_bool(e2e_jget(e2e_expect_json(&r, 200), "paused")));
    /* It shows in stats, GET /queues and /metrics, with the claim held back. */
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    p = e2e_expect_json(&r, 200);
    assert_true(rd_json_bool(e2e_jget(p, "paused")));
    assert_int_equal(e2e_jint(e2e_jget(p, "totals"), "held_paused"), 1);
    assert_int_equal(e2e_jint(e2e_jget(p, "totals"), "held_cap"), 0);
    assert_int_equal(e2e_jint(e2e_jget(p, "totals"), "held_rate"), 0);
    http(&r, "GET", "/queues?limit=1000", NULL);
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "queues");
    bool listed = false;
    for (size_t i = 0; i < rd_json_array_size(list); i++) {
        rd_json_t *e = rd_json_array_at(list, i);
        if (strcmp(e2e_jstr(e, "name"), q) != 0) continue;
        assert_true(rd_json_bool(e2e_jget(e, "paused")));
        listed = true;
    }
    assert_true(listed);
    metrics_with(&r, e2e_fmt("retryd_queue_paused{queue=\"%s\"} 1\n", q));
    assert_non_null(strstr(r.body, e2e_fmt("retryd_held_paused_total{queue=\"%s\"} 1\n", q)));

    e2e_conn_t c;
    start_long_poll(&c, q, 10);
    wait_subscribed(q);
    enqueue(q, "{\"payload\":\"b\"}");
    /* The enqueue's wake-up made the parked claim try again: held back too
     * (claim_one, the park's first try, this one). */
    for (long long t = e2e_mono_ms();;) {
        long long held = queue_counter(q, "held_paused");
        if (held >= 3) break;
        if (e2e_mono_ms() - t > 5000) fail_msg("held_paused is %lld, not 3, after 5 s", held);
        e2e_pause_ms(5);
    }
    redisReply *x = e2e_rcmd(g_redis, "ZCARD %s:{%s}:processing", g_prefix, q);
    assert_int_equal(x->integer, 0);
    freeReplyObject(x);
    long long t0 = e2e_mono_ms();
    http(&r, "POST", e2e_fmt("/queues/%s/resume", q), "");
    assert_false(rd_json_bool(e2e_jget(e2e_expect_json(&r, 200), "paused")));
    e2e_response_t w = { 0 };
    assert_int_equal(e2e_read_response(&c, &w), 0);
    assert_true(e2e_mono_ms() - t0 < 1000);
    assert_int_equal(e2e_jint(e2e_expect_json(&w, 200), "id"), id);
    e2e_response_free(&w);
    e2e_conn_close(&c);
    e2e_response_free(&r);
}

/* A PATCH of max_in_flight 0 removes the cap (it was dropped before it
 * reached Redis, so the cap stayed), and GET answers 0. */
static void test_patch_max_in_flight_zero_removes_cap(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "capzero");
    e2e_response_t r = { 0 };
    http(&r, "PUT", policy_path(q), "{\"max_in_flight\":1}");
    e2e_expect_json(&r, 200);
    long long first = enqueue(q, "{\"payload\":\"a\"}");
    long long second = enqueue(q, "{\"payload\":\"b\"}");
    assert_int_equal(claim_one(q, 30, NULL, 0), first);
    assert_int_equal(claim_one(q, 30, NULL, 0), 0);   /* at the cap */
    http(&r, "PATCH", policy_path(q), "{\"max_in_flight\":0}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "max_in_flight"), 0);
    http(&r, "GET", policy_path(q), NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "max_in_flight"), 0);
    assert_int_equal(claim_one(q, 30, NULL, 0), second);
    e2e_response_free(&r);
}

/* A long-poll held back by the rate limit sleeps until the next token is due
 * and then claims: a handful of calls, not a busy loop. */
static void test_rate_limited_long_poll_sleeps(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "ratewait");
    e2e_response_t r = { 0 };
    http(&r, "PUT", policy_path(q), "{\"rate_limit\":{\"per_second\":0.8,\"burst\":1}}");
    e2e_expect_json(&r, 200);
    enqueue(q, "{\"payload\":\"a\"}");
    long long second = enqueue(q, "{\"payload\":\"b\"}");
    /* The next token is due 1.25 s after the claim that takes this one:
     * no sooner than 1.25 s after a clock read before that claim, no later
     * than 1.25 s after one read after it. */
    long long before_token = e2e_mono_ms();
    assert_true(claim_one(q, 30, NULL, 0) > 0);  /* takes the only token */
    long long held = queue_counter(q, "held_rate");
    long long t0 = e2e_mono_ms();
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"wait_seconds\":5}");
    long long end = e2e_mono_ms(), took = end - t0;
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), second);
    if (end - before_token < 900 || took >= 2500)   /* a token per 1.25 s */
        fail_msg("claimed %lld ms after the token was taken (%lld ms after the long-poll was "
                 "sent), want at least 900 (and under 2500 after it was sent)",
                 end - before_token, took);
    /* Every claim the rate limit held back counts in held_rate: a busy loop
     * would count hundreds. */
    long long tries = queue_counter(q, "held_rate") - held;
    if (tries > 2) fail_msg("the rate-limited long-poll claimed %lld times in %lld ms", tries, took);
    e2e_response_free(&r);
}

/* Over 3 s at 20/s with burst 5, a worker that long-polls in a loop leases
 * 5 + 20 x 3 messages, within 15 %. */
static void test_rate_limit_over_three_seconds(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "rate3s");
    e2e_response_t r = { 0 };
    for (int i = 0; i < 120; i++) enqueue(q, "{\"payload\":\"x\"}");
    http(&r, "PUT", policy_path(q), "{\"rate_limit\":{\"per_second\":20,\"burst\":5}}");
    e2e_expect_json(&r, 200);
    long long t0 = e2e_mono_ms(), leased = 0;
    while (e2e_mono_ms() - t0 < 3000) {
        http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"wait_seconds\":1}");
        if (r.status == 200 && e2e_mono_ms() - t0 <= 3000) leased++;
        else if (r.status != 200) e2e_expect_no_content(&r);
    }
    if (leased < 55 || leased > 75) fail_msg("leased %lld in 3 s, want 65 +- 15%%", leased);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Time series (docs/reference.md "Time series", docs/series.md)                                   */
/* ------------------------------------------------------------------------ */

static long long redis_time_ms(void)
{
    redisReply *t = redisCommand(g_redis, "TIME");
    assert_non_null(t);
    assert_int_equal(t->type, REDIS_REPLY_ARRAY);
    long long ms = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    freeReplyObject(t);
    return ms;
}

static long long series_total(const rd_json_t *series, const char *name, size_t len)
{
    rd_json_t *a = e2e_jget(series, name);
    assert_true(rd_json_is_array(a));
    assert_int_equal(rd_json_array_size(a), len);
    long long n = 0, v;
    for (size_t i = 0; i < len; i++) {
        assert_true(rd_json_integer(rd_json_array_at(a, i), &v));
        assert_true(v >= 0);
        n += v;
    }
    return n;
}

static void test_stats_series(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "series");
    for (int i = 0; i < 3; i++) enqueue(q, "{\"payload\":\"x\"}");
    e2e_response_t r = { 0 };
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    http(&r, "POST", message_path(q, 1, "succeed"), "{}");
    e2e_expect_json(&r, 200);
    assert_int_equal(claim_one(q, 30, token, sizeof token), 2);
    http(&r, "POST", message_path(q, 2, "fail"), "{\"error\":\"boom\",\"retryable\":false}");
    e2e_expect_json(&r, 200);
    http(&r, "POST", message_path(q, 2, "replay"), NULL);
    e2e_expect_json(&r, 200);

    static const struct { const char *name; long long step_s; size_t len; } res[] = {
        { "minute", 60, 120 }, { "hour", 3600, 192 },
    };
    static const char *const names[] = { "enqueued", "succeeded", "failed", "dead", "replayed" };
    static const long long want[] = { 3, 1, 1, 1, 1 };
    for (size_t k = 0; k < 2; k++) {
        http(&r, "GET", e2e_fmt("/queues/%s/stats?series=%s", q, res[k].name), NULL);
        long long now = redis_time_ms();
        rd_json_t *doc = e2e_expect_json(&r, 200);
        assert_int_equal(e2e_jint(e2e_jget(doc, "totals"), "enqueued"), 3);
        rd_json_t *series = e2e_jget(doc, "series");
        assert_string_equal(e2e_jstr(series, "resolution"), res[k].name);
        assert_int_equal(e2e_jint(series, "step_seconds"), res[k].step_s);
        long long start = e2e_jint(series, "start"), step = res[k].step_s * 1000;
        assert_int_equal(start % step, 0);
        /* The last bucket is the current one. */
        assert_true(start + (long long)(res[k].len - 1) * step <= now);
        assert_true(now < start + (long long)(res[k].len + 1) * step);
        for (size_t i = 0; i < 5; i++)
            assert_int_equal(series_total(series, names[i], res[k].len), want[i]);
    }

    /* Without the parameter, no series; with a bad one, 422 on it. */
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    assert_null(rd_json_get(e2e_expect_json(&r, 200), "series"));
    const char *bad[] = { "day", "", "MINUTE", "minute%00" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *path = e2e_fmt("/queues/%s/stats?series=%s", q, bad[i]);
        http(&r, "GET", path, NULL);
        rd_json_t *errors = expect_invalid(&r, e2e_fmt("/queues/%s/stats", q), 1);
        expect_field_error(errors, "series", "invalid", "series must be minute or hour.");
    }
    e2e_response_free(&r);
}

/* The score of q in the timer schedule of prefix, -1 when absent. */
static long long schedule_score(const char *prefix, const char *q)
{
    redisReply *z = redisCommand(g_redis, "ZSCORE {%s:queues}:timers %s", prefix, q);
    assert_non_null(z);
    long long v = z->type == REDIS_REPLY_STRING ? atoll(z->str) : -1;
    freeReplyObject(z);
    return v;
}

/* A write to a queue nudges the schedule so its series is sampled within a
 * minute; with --series off nothing does (an enqueue of a message ready now
 * has no timer work of its own). */
static void test_series_nudges_the_timer(void **state)
{
    (void)state;
    char q[64];
    e2e_response_t r = { 0 };
    e2e_queue_name(q, sizeof q, "nudge");
    long long before = redis_time_ms();
    enqueue(q, "{\"payload\":\"x\"}");
    /* The nudge went out on the daemon's link before this read's command. */
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    e2e_expect_json(&r, 200);
    long long at = schedule_score(g_prefix, q);
    assert_true(at >= before + 60000 && at <= redis_time_ms() + 60000);

    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-noseries", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, "--series", "off", NULL), 0);
    http_to(g_side.port, &r, "POST", messages_path(q), "{\"payload\":\"x\"}", 15);
    e2e_expect_json(&r, 201);
    http_to(g_side.port, &r, "GET", message_path(q, 1, NULL), NULL, 0);
    e2e_expect_json(&r, 200);
    assert_int_equal(schedule_score(prefix, q), -1);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_stats_series),
        T(test_series_nudges_the_timer),
        T(test_policy_get_put),
        T(test_policy_shards_field),
        T(test_policy_shards_change),
        T(test_policy_refused_put_keeps_shards),
        T(test_policy_abandoned_lowering_is_undone),
        T(test_policy_shards_placement),
        T(test_policy_shards_batch),
        T(test_policy_shards_claims),
        T(test_policy_shards_timer),
        T(test_policy_shards_timer_after_idle_view),
        T(test_policy_shards_claims_see_a_raise),
        T(test_policy_shards_reshard_then_copy),
        T(test_policy_shards_long_poll_past_10s),
        T(test_policy_backoff_over_http),
        T(test_dead_letter_rules_seed_001),
        T(test_pause_and_resume),
        T(test_sqs_policy_fields),
        T(test_patch_max_in_flight_zero_removes_cap),
        T(test_rate_limited_long_poll_sleeps),
        T(test_rate_limit_over_three_seconds),
    };
    int failed = cmocka_run_group_tests_name("e2e_policy", tests, group_setup, group_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL " E2E_SUITE ": retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
