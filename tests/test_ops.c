/* test_ops.c - end-to-end tests of the operator routes: kill, delete, batch
 * replay (with the latency other queues see while 1500 letters are replayed),
 * stats, the queue list, /metrics, retention and the events stream. The real
 * build/retryd is forked on a free port against a throwaway redis-server and
 * spoken to over HTTP/1.1; what Redis holds is read back with hiredis.
 *
 * Needs RETRYD_TEST_REDIS_PORT and RETRYD_BIN (scripts/test.sh sets both).
 * The group's daemon uses a prefix of its own ("ops<pid>"); the retention
 * test starts a second daemon on another prefix. Every test uses queues of
 * its own; the last two tests look at all of them (GET /queues) and stop the
 * daemon (SIGTERM, exit 0). */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

#include <hiredis/hiredis.h>

#include "e2e_support.h"
#include "retryd/buf.h"
#include "retryd/keys.h"

enum {
    READY_TIMEOUT_MS = 10000,
    TICK_MS = 50,
    BULK_DEAD = 1500,
    MAX_QUEUES_USED = 64,
};

static const char *g_bin;
static int g_redis_port;
static char g_prefix[64];
static e2e_daemon_t g_daemon;     /* the group's daemon */
static e2e_daemon_t g_side;       /* the retention test's daemon */
static e2e_conn_t g_conn;         /* keep-alive connection to g_daemon */
static redisContext *g_redis;
static char g_used[MAX_QUEUES_USED][64];   /* queues the group's daemon has seen */
static size_t g_nused;

/* ------------------------------------------------------------------------ */
/* Small strings                                                            */
/* ------------------------------------------------------------------------ */

/* A queue name no other test uses, remembered for the GET /queues test. */
static void queue_name(char *out, size_t cap, const char *tag)
{
    e2e_queue_name(out, cap, tag);
    if (g_nused < MAX_QUEUES_USED) snprintf(g_used[g_nused++], sizeof g_used[0], "%s", out);
}

/* "<prefix>:{<escaped q>}<suffix>" for the group's prefix (or another). */
static const char *qkey_in(const char *prefix, const char *q, const char *suffix)
{
    static char ring[8][512];
    static unsigned next;
    char *out = ring[next++ % 8];
    rd_buf_t b = RD_BUF_INIT;
    rd_keys_queue_base(&b, prefix, q, strlen(q));
    snprintf(out, sizeof ring[0], "%s%s", b.data, suffix);
    rd_buf_free(&b);
    return out;
}

static const char *qkey(const char *q, const char *suffix)
{
    return qkey_in(g_prefix, q, suffix);
}

/* ------------------------------------------------------------------------ */
/* Daemons and Redis                                                        */
/* ------------------------------------------------------------------------ */

/* Starts retryd on prefix with the tick and log level of this suite, then
 * extra flags (NULL-terminated); waits (bounded) for /readyz 200. */
static int start_daemon(e2e_daemon_t *d, const char *prefix, ...)
{
    e2e_flags_t f;
    va_list ap;
    va_start(ap, prefix);
    e2e_flags_v(&f, "--redis", e2e_redis_url(g_redis_port), prefix, TICK_MS, "warn", ap);
    va_end(ap);
    return e2e_daemon_start(d, g_bin, f.argv, false, true, READY_TIMEOUT_MS, "test_ops");
}

/* A reply to a command on g_redis; fails the test when none came or it is an error. */
static redisReply *rcmd(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    redisReply *r = redisvCommand(g_redis, format, ap);
    va_end(ap);
    e2e_reply_or_fail(g_redis, r);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("redis error: %s", r->str);
    return r;
}

static long long rint_cmd(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    redisReply *r = redisvCommand(g_redis, format, ap);
    va_end(ap);
    e2e_reply_or_fail(g_redis, r);
    if (r->type != REDIS_REPLY_INTEGER) fail_msg("redis: expected an integer, got type %d", r->type);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* Dead letters in both generations of indexes: retryd_v2's ":dead" (which
 * seed_dead writes, in its layout) and the record's ":3:dead". */
/* Both dead indexes in one atomic read: a tick that lifts the retryd_v2
 * index into the current one between two ZCARDs would count the lifted
 * ids twice. */
static long long dead_total(const char *q)
{
    char old_key[512];
    snprintf(old_key, sizeof old_key, "%s", qkey(q, ":dead"));
    return rint_cmd("EVAL %s 2 %s %s",
                    "return redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2])", old_key,
                    qkey(q, ":3:dead"));
}

/* True when the reply of a command is nil. */
static bool rnil(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    redisReply *r = redisvCommand(g_redis, format, ap);
    va_end(ap);
    e2e_reply_or_fail(g_redis, r);
    bool nil = r->type == REDIS_REPLY_NIL;
    freeReplyObject(r);
    return nil;
}

/* A field of a hash as an integer (0 when absent). */
static long long hget_int(const char *key, const char *field)
{
    redisReply *r = rcmd("HGET %s %s", key, field);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    return v;
}

/* The id is in no index of q and its hash is gone. */
static void expect_no_trace(const char *q, long long id)
{
    char sid[24];
    snprintf(sid, sizeof sid, "%lld", id);
    if (rint_cmd("EXISTS %s", qkey(q, e2e_fmt(":m:%lld", id))) != 0)
        fail_msg("message hash of %lld still exists", id);
    static const char *const lists[] = { ":ready", ":due", ":3:ready", ":3:due" };
    for (size_t i = 0; i < 4; i++)
        if (!rnil("LPOS %s %s", qkey(q, lists[i]), sid))
            fail_msg("id %lld still in %s", id, lists[i]);
    static const char *const zsets[] = { ":scheduled", ":processing", ":dead", ":succeeded",
                                         ":3:scheduled", ":3:processing", ":3:dead",
                                         ":3:succeeded" };
    for (size_t i = 0; i < 8; i++)
        if (!rnil("ZSCORE %s %s", qkey(q, zsets[i]), sid))
            fail_msg("id %lld still in %s", id, zsets[i]);
}

static int group_setup(void **state)
{
    (void)state;
    rd_alloc_init();
    if (e2e_suite_env("test_ops", 10, &g_bin, &g_redis_port, &g_redis) != 0) return -1;
    g_conn.fd = -1;
    snprintf(g_prefix, sizeof g_prefix, "ops%ld", (long)getpid());
    return start_daemon(&g_daemon, g_prefix, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    e2e_conn_close(&g_conn);
    if (g_daemon.pid > 0) e2e_daemon_stop(&g_daemon, SIGKILL, E2E_STOP_TIMEOUT_MS);
    if (g_side.pid > 0) e2e_daemon_stop(&g_side, SIGKILL, E2E_STOP_TIMEOUT_MS);
    if (g_redis) redisFree(g_redis);
    return 0;
}

static int test_setup(void **state)
{
    (void)state;
    e2e_conn_close(&g_conn);
    return 0;
}

static void free_live(void);

static int test_teardown(void **state)
{
    (void)state;
    free_live();
    e2e_conn_close(&g_conn);
    if (g_side.pid > 0) e2e_daemon_stop(&g_side, SIGKILL, E2E_STOP_TIMEOUT_MS);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Requests and what they answer                                            */
/* ------------------------------------------------------------------------ */

/* Bodies of responses a test still holds: a failed assertion jumps out of
 * the test before it frees them, so the teardown does. */
static struct {
    char *body;
    rd_json_t *json;
} g_live[32];

static void track(const e2e_response_t *r)
{
    for (size_t i = 0; i < 32; i++)
        if (g_live[i].body == NULL && g_live[i].json == NULL) {
            g_live[i].body = r->body;
            g_live[i].json = r->json;
            return;
        }
}

static void resp_free(e2e_response_t *r)
{
    for (size_t i = 0; i < 32; i++)
        if ((r->body && g_live[i].body == r->body) || (r->json && g_live[i].json == r->json))
            g_live[i].body = NULL, g_live[i].json = NULL;
    e2e_response_free(r);
}

static void free_live(void)
{
    for (size_t i = 0; i < 32; i++) {
        free(g_live[i].body);
        rd_json_free(g_live[i].json);
        g_live[i].body = NULL;
        g_live[i].json = NULL;
    }
}

static void http_to(int port, e2e_response_t *r, const char *method, const char *path,
                    const char *body)
{
    resp_free(r);
    e2e_http_on(&g_conn, port, r, method, path, NULL, body, body ? strlen(body) : 0);
    track(r);
}

static void http(e2e_response_t *r, const char *method, const char *path, const char *body)
{
    http_to(g_daemon.port, r, method, path, body);
}

static const char *qpath(const char *q, const char *rest)
{
    return e2e_fmt("/queues/%s%s", e2e_url_encode(q), rest);
}

static const char *message_path(const char *q, long long id, const char *verb)
{
    return verb ? qpath(q, e2e_fmt("/messages/%lld/%s", id, verb))
                : qpath(q, e2e_fmt("/messages/%lld", id));
}

static long long enqueue_max(const char *q, int max_retries)
{
    e2e_response_t r = { 0 };
    http(&r, "POST", qpath(q, "/messages"),
         e2e_fmt("{\"payload\":\"p\",\"max_retries\":%d}", max_retries));
    long long id = e2e_jint(e2e_expect_json(&r, 201), "id");
    resp_free(&r);
    return id;
}

/* Claims one message of q (asserting which, when want > 0); copies its token. */
static long long claim_one(const char *q, long long want, char *token, size_t cap)
{
    e2e_response_t r = { 0 };
    http(&r, "POST", qpath(q, "/claim"), "{\"lease_seconds\":600}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    long long id = e2e_jint(m, "id");
    if (want > 0 && id != want) fail_msg("claimed %lld, expected %lld", id, want);
    assert_string_equal(e2e_jstr(m, "status"), "processing");
    if (token) snprintf(token, cap, "%s", e2e_jstr(m, "lease_token"));
    resp_free(&r);
    return id;
}

/* POSTs body to the message's verb and asserts 200 and the new status. */
static void settle(const char *q, long long id, const char *verb, const char *body,
                   const char *want_status)
{
    e2e_response_t r = { 0 };
    http(&r, "POST", message_path(q, id, verb), body);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), id);
    assert_string_equal(e2e_jstr(m, "status"), want_status);
    resp_free(&r);
}

/* A JSON string literal of s (quotes and backslashes escaped). */
static const char *jquote(const char *s)
{
    static char ring[4][512];
    static unsigned next;
    char *out = ring[next++ % 4];
    size_t n = 0;
    out[n++] = '"';
    for (; *s && n + 3 < sizeof ring[0]; s++) {
        if (*s == '"' || *s == '\\') out[n++] = '\\';
        out[n++] = *s;
    }
    out[n++] = '"';
    out[n] = '\0';
    return out;
}

/* Enqueues one message with max_retries 1 into an otherwise idle q, claims
 * it and fails it with err: it is dead. Returns its id. */
static long long make_dead(const char *q, const char *err)
{
    long long id = enqueue_max(q, 1);
    claim_one(q, id, NULL, 0);
    settle(q, id, "fail", e2e_fmt("{\"error\":%s}", jquote(err)), "dead");
    return id;
}

static long long make_succeeded(const char *q)
{
    long long id = enqueue_max(q, 3);
    claim_one(q, id, NULL, 0);
    settle(q, id, "succeed", NULL, "succeeded");
    return id;
}

/* GETs the message and asserts its status (NULL: asserts 404). */
static void expect_status(const char *q, long long id, const char *status)
{
    e2e_response_t r = { 0 };
    http(&r, "GET", message_path(q, id, NULL), NULL);
    if (status == NULL) {
        e2e_expect_problem(&r, 404, "not-found", NULL);
    } else {
        assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), status);
    }
    resp_free(&r);
}

/* POST /queues/q/replay with body: returns "replayed". */
static long long replay_many(const char *q, const char *body)
{
    e2e_response_t r = { 0 };
    http(&r, "POST", qpath(q, "/replay"), body);
    rd_json_t *o = e2e_expect_json(&r, 200);
    long long n = e2e_jint(o, "replayed");
    resp_free(&r);
    return n;
}

/* ------------------------------------------------------------------------ */
/* Kill                                                                     */
/* ------------------------------------------------------------------------ */

static void test_kill(void **state)
{
    (void)state;
    char q[64];
    queue_name(q, sizeof q, "kill");
    e2e_response_t r = { 0 };

    /* pending (ready) -> dead, default reason */
    long long a = enqueue_max(q, 3);
    http(&r, "POST", message_path(q, a, "kill"), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), a);
    assert_string_equal(e2e_jstr(m, "status"), "dead");
    assert_string_equal(e2e_jstr(m, "last_error"), "killed by operator");
    assert_int_equal(e2e_jint(m, "retry_count"), 0);
    e2e_jnull(m, "retry_after");
    e2e_jnull(m, "lease_expires_at");
    assert_false(rnil("ZSCORE %s %lld", qkey(q, ":3:dead"), a));
    assert_true(rnil("LPOS %s %lld", qkey(q, ":3:ready"), a));
    expect_status(q, a, "dead");

    /* with a reason */
    long long b = enqueue_max(q, 3);
    http(&r, "POST", message_path(q, b, "kill"), "{\"reason\":\"poison\"}");
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "dead");
    assert_string_equal(e2e_jstr(m, "last_error"), "poison");

    /* pending, waiting for its retry (scheduled) -> dead */
    long long c = enqueue_max(q, 3);
    claim_one(q, c, NULL, 0);
    settle(q, c, "fail", "{\"error\":\"flaky\",\"retry_after_seconds\":600}", "pending");
    http(&r, "POST", message_path(q, c, "kill"), "{}");
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "dead");
    assert_string_equal(e2e_jstr(m, "last_error"), "killed by operator");
    assert_int_equal(e2e_jint(m, "retry_count"), 1);
    e2e_jnull(m, "retry_after");
    assert_true(rnil("ZSCORE %s %lld", qkey(q, ":3:scheduled"), c));

    /* pending in the due list (a replayed letter) -> dead */
    settle(q, c, "replay", NULL, "pending");
    assert_false(rnil("LPOS %s %lld", qkey(q, ":3:due"), c));
    settle(q, c, "kill", "{\"reason\":\"again\"}", "dead");
    assert_true(rnil("LPOS %s %lld", qkey(q, ":3:due"), c));
    assert_int_equal(rint_cmd("LLEN %s", qkey(q, ":3:due")), 0);

    /* processing -> dead; the old lease is gone */
    char token[160];
    long long d = enqueue_max(q, 3);
    claim_one(q, d, token, sizeof token);
    http(&r, "POST", message_path(q, d, "kill"), "{\"reason\":null}");
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "dead");
    assert_string_equal(e2e_jstr(m, "last_error"), "killed by operator");
    e2e_jnull(m, "lease_expires_at");
    assert_null(rd_json_get(m, "lease_token"));
    assert_true(rnil("ZSCORE %s %lld", qkey(q, ":3:processing"), d));
    http(&r, "POST", message_path(q, d, "succeed"), e2e_fmt("{\"lease_token\":\"%s\"}", token));
    e2e_expect_problem(&r, 409, "invalid-state", NULL);

    /* succeeded -> 409 naming the state; dead -> 409 too */
    long long e = make_succeeded(q);
    http(&r, "POST", message_path(q, e, "kill"), NULL);
    e2e_expect_problem(&r, 409, "invalid-state", message_path(q, e, "kill"));
    assert_non_null(strstr(e2e_jstr(r.json, "detail"), "succeeded"));
    expect_status(q, e, "succeeded");
    http(&r, "POST", message_path(q, a, "kill"), NULL);
    e2e_expect_problem(&r, 409, "invalid-state", NULL);
    assert_non_null(strstr(e2e_jstr(r.json, "detail"), "dead"));

    /* unknown -> 404 */
    http(&r, "POST", message_path(q, 999999, "kill"), NULL);
    e2e_expect_problem(&r, 404, "not-found", message_path(q, 999999, "kill"));

    /* bad bodies */
    http(&r, "POST", message_path(q, b, "kill"), "{\"reason\":42}");
    e2e_expect_invalid_field(&r, "reason");
    http(&r, "POST", message_path(q, b, "kill"), "{\"reason\":");
    e2e_expect_problem(&r, 400, "malformed-request", NULL);

    /* a kill is a death, not a failure */
    assert_int_equal(hget_int(qkey(q, ":stats"), "dead"), 5);
    assert_int_equal(hget_int(qkey(q, ":stats"), "failed"), 1);
    assert_int_equal(dead_total(q), 4);
    assert_false(rnil("ZSCORE %s again", qkey(q, ":errors")));
    assert_false(rnil("ZSCORE %s %s", qkey(q, ":errors"), "killed by operator"));
    resp_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Delete                                                                   */
/* ------------------------------------------------------------------------ */

static void delete_ok(const char *q, long long id)
{
    e2e_response_t r = { 0 };
    http(&r, "DELETE", message_path(q, id, NULL), NULL);
    e2e_expect_no_content(&r);
    resp_free(&r);
    expect_status(q, id, NULL);
    expect_no_trace(q, id);
}

static void test_delete(void **state)
{
    (void)state;
    char q[64];
    queue_name(q, sizeof q, "delete");
    e2e_response_t r = { 0 };

    long long ready = enqueue_max(q, 3);
    delete_ok(q, ready);

    long long scheduled = enqueue_max(q, 3);
    claim_one(q, scheduled, NULL, 0);
    settle(q, scheduled, "fail", "{\"error\":\"later\",\"retry_after_seconds\":600}", "pending");
    delete_ok(q, scheduled);

    long long replayed = make_dead(q, "will replay");
    settle(q, replayed, "replay", NULL, "pending");     /* now in the due list */
    assert_false(rnil("LPOS %s %lld", qkey(q, ":3:due"), replayed));
    delete_ok(q, replayed);

    long long dead = make_dead(q, "smtp 554 delete me");
    assert_false(rnil("ZSCORE %s %s", qkey(q, ":errors"), "smtp 554 delete me"));
    delete_ok(q, dead);
    /* top_errors no longer counts it */
    assert_true(rnil("ZSCORE %s %s", qkey(q, ":errors"), "smtp 554 delete me"));

    long long succeeded = make_succeeded(q);
    delete_ok(q, succeeded);

    long long processing = enqueue_max(q, 3);
    claim_one(q, processing, NULL, 0);
    http(&r, "DELETE", message_path(q, processing, NULL), NULL);
    e2e_expect_problem(&r, 409, "invalid-state", message_path(q, processing, NULL));
    assert_non_null(strstr(e2e_jstr(r.json, "detail"), "processing"));
    expect_status(q, processing, "processing");
    assert_false(rnil("ZSCORE %s %lld", qkey(q, ":3:processing"), processing));

    http(&r, "DELETE", message_path(q, 999999, NULL), NULL);
    e2e_expect_problem(&r, 404, "not-found", NULL);
    http(&r, "DELETE", message_path(q, dead, NULL), NULL);   /* twice */
    e2e_expect_problem(&r, 404, "not-found", NULL);

    /* the queue holds exactly the processing one */
    http(&r, "GET", qpath(q, "/stats"), NULL);
    rd_json_t *counts = e2e_jget(e2e_expect_json(&r, 200), "counts");
    assert_int_equal(e2e_jint(counts, "pending"), 0);
    assert_int_equal(e2e_jint(counts, "processing"), 1);
    assert_int_equal(e2e_jint(counts, "succeeded"), 0);
    assert_int_equal(e2e_jint(counts, "dead"), 0);
    assert_int_equal(rint_cmd("ZCARD %s", qkey(q, ":errors")), 0);
    resp_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Batch replay                                                             */
/* ------------------------------------------------------------------------ */

static void test_replay_batch(void **state)
{
    (void)state;
    char q[64];
    queue_name(q, sizeof q, "replay");
    e2e_response_t r = { 0 };

    long long d1 = make_dead(q, "smtp: 421 try later");
    long long d2 = make_dead(q, "dns: no such host");
    long long d3 = make_dead(q, "SMTP upper case");          /* plain, case-sensitive */
    long long d4 = make_dead(q, "relay said smtp 550");
    long long d5 = make_dead(q, "timeout");
    long long d6 = make_dead(q, "dns: servfail");
    long long done = make_succeeded(q);
    long long pending = enqueue_max(q, 3);

    /* ids: only the dead ones among them */
    assert_int_equal(replay_many(q, e2e_fmt("{\"ids\":[%lld,%lld,%lld,%lld,999999,%lld]}", d2,
                                        pending, done, d5, d2)),
                     2);
    expect_status(q, d2, "pending");
    expect_status(q, d5, "pending");
    expect_status(q, done, "succeeded");
    expect_status(q, pending, "pending");
    expect_status(q, d1, "dead");
    http(&r, "GET", message_path(q, d2, NULL), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "retry_count"), 0);
    e2e_jnull(m, "last_error");
    e2e_jnull(m, "retry_after");

    /* error_contains: a plain, case-sensitive substring of last_error */
    assert_int_equal(replay_many(q, "{\"error_contains\":\"smtp\"}"), 2);
    expect_status(q, d1, "pending");
    expect_status(q, d4, "pending");
    expect_status(q, d3, "dead");
    expect_status(q, d6, "dead");
    assert_int_equal(replay_many(q, "{\"error_contains\":\"smtp\"}"), 0);
    assert_int_equal(replay_many(q, "{\"error_contains\":\"%\"}"), 0);   /* not a pattern */

    /* all */
    assert_int_equal(replay_many(q, "{\"all\":true}"), 2);
    expect_status(q, d3, "pending");
    expect_status(q, d6, "pending");
    assert_int_equal(dead_total(q), 0);
    assert_int_equal(rint_cmd("ZCARD %s", qkey(q, ":errors")), 0);
    assert_int_equal(replay_many(q, "{\"all\":true}"), 0);
    assert_int_equal(hget_int(qkey(q, ":stats"), "replayed"), 6);

    /* replayed letters are claimed before the fresh one */
    char ids_seen[8] = { 0 };
    for (int i = 0; i < 6; i++) {
        long long id = claim_one(q, 0, NULL, 0);
        if (id == pending) fail_msg("fresh message %lld claimed before a replayed one", id);
        assert_true(id >= d1 && id <= d6);
        ids_seen[id - d1]++;
    }
    for (int i = 0; i < 6; i++) assert_int_equal(ids_seen[i], 1);
    claim_one(q, pending, NULL, 0);

    /* bad bodies */
    static const struct {
        const char *body;
        const char *field;
    } bad[] = {
        { "{}", NULL },
        { "{\"ids\":[1],\"all\":true}", NULL },
        { "{\"all\":true,\"error_contains\":\"x\"}", NULL },
        { "{\"ids\":[]}", "ids" },
        { "{\"ids\":[0]}", "ids" },
        { "{\"ids\":[-3]}", "ids" },
        { "{\"ids\":[\"1\"]}", "ids" },
        { "{\"ids\":1}", "ids" },
        { "{\"all\":false}", "all" },
        { "{\"all\":1}", "all" },
        { "{\"error_contains\":\"\"}", "error_contains" },
        { "{\"error_contains\":7}", "error_contains" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "POST", qpath(q, "/replay"), bad[i].body);
        if (r.status != 422) fail_msg("body %s: expected 422, got %d %s", bad[i].body, r.status, r.body);
        e2e_expect_invalid_field(&r, bad[i].field);
    }
    static const char *const malformed[] = { "{\"all\":tru", "[1]", "\"all\"", "" };
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        http(&r, "POST", qpath(q, "/replay"), malformed[i]);
        if (r.status != 400) fail_msg("body '%s': expected 400, got %d %s", malformed[i], r.status, r.body);
        e2e_expect_problem(&r, 400, "malformed-request", qpath(q, "/replay"));
    }
    resp_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Batch replay over orphans, a client that leaves, replies bounded in bytes */
/* ------------------------------------------------------------------------ */

/* Writes n dead letters with ids from..from+n-1 and time of death at_ms
 * straight into q's keys in one EVAL (test setup), as retryd_v2 stored them
 * (a HASH each, in its ":dead" index); with_hash false leaves
 * only the dead index entries, as eviction or a manual DEL would. */
static void seed_dead(const char *q, long long from, long long n, long long at_ms, bool with_hash)
{
    static const char script[] =
        "local base, from, n, at = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] "
        "for id = from, from + n - 1 do "
        "  if ARGV[4] == '1' then "
        "    redis.call('HSET', base .. ':m:' .. id, 'payload', 'p', 'status', 'dead', "
        "               'retry_count', 1, 'max_retries', 1, 'created_at', at, 'updated_at', at, "
        "               'last_error', 'boom', 'dead_at', at) "
        "  end "
        "  redis.call('ZADD', base .. ':dead', at, id) "
        "end "
        "if ARGV[4] == '1' then redis.call('ZINCRBY', base .. ':errors', n, 'boom') end "
        "redis.call('SET', base .. ':seq', from + n - 1) "
        "return n";
    char base[512];
    snprintf(base, sizeof base, "%s", qkey(q, ""));
    assert_int_equal(rint_cmd("EVAL %s 1 %s %lld %lld %lld %s", script, base, from, n, at_ms,
                              with_hash ? "1" : "0"),
                     n);
    freeReplyObject(rcmd("FCALL " RD_FUNCTION("register") " 1 %s:queues %s -1", g_prefix, q));
}

/* The dead index starts with 250 ids whose message is gone (more than one
 * batch of 50): replay all answers, replays the real ones, and the stats
 * count the orphans it dropped. It used to call replay_many forever. */
static void test_replay_all_with_orphans(void **state)
{
    (void)state;
    char q[64];
    queue_name(q, sizeof q, "replay-orphans");
    /* Dead a minute ago: older than the real ones (the walk meets them
     * first) and well inside the retention, so a tick that visits the queue
     * meanwhile (the sweep can) does not expire them before the walk drops
     * them (dead at 1000 ms past the epoch, a tick expired 100 of them and
     * orphans_removed came out short). */
    long long at = e2e_wall_ms() - 60000;
    seed_dead(q, 1, 250, at, false);
    long long a = make_dead(q, "real one");
    long long b = make_dead(q, "real two");
    assert_int_equal(a, 251);
    assert_int_equal(dead_total(q), 252);

    assert_int_equal(replay_many(q, "{\"all\":true}"), 2);
    expect_status(q, a, "pending");
    expect_status(q, b, "pending");
    assert_int_equal(dead_total(q), 0);

    e2e_response_t r = { 0 };
    http(&r, "GET", qpath(q, "/stats"), NULL);
    rd_json_t *totals = e2e_jget(e2e_expect_json(&r, 200), "totals");
    assert_int_equal(e2e_jint(totals, "orphans_removed"), 250);
    resp_free(&r);

    /* By error text too: orphans are passed over and dropped. */
    char q2[64];
    queue_name(q2, sizeof q2, "replay-orphans-text");
    seed_dead(q2, 1, 300, at + 1000, false);
    long long c = make_dead(q2, "smtp down");
    assert_int_equal(replay_many(q2, "{\"error_contains\":\"smtp\"}"), 1);
    expect_status(q2, c, "pending");
    assert_int_equal(dead_total(q2), 0);
    assert_int_equal(hget_int(qkey(q2, ":stats"), "orphans_removed"), 300);
}

/* A client that leaves (connection reset) in the middle of a long batch
 * replay stops the loop of replay_many calls: far fewer than all the
 * letters are replayed, and the count stops growing. */
static void test_replay_stops_when_client_leaves(void **state)
{
    (void)state;
    enum { N = 40000 };
    char q[64];
    queue_name(q, sizeof q, "replay-gone");
    seed_dead(q, 1, N, e2e_wall_ms() - 1000, true);

    int fd = e2e_connect(g_daemon.port);
    assert_true(fd >= 0);
    size_t len = 0;
    char *req = e2e_format_request("POST", qpath(q, "/replay"), NULL, "{\"all\":true}", 12, &len);
    assert_non_null(req);
    assert_int_equal(e2e_send_all(fd, req, len), 0);
    free(req);
    long long deadline = e2e_mono_ms() + 5000;
    while (hget_int(qkey(q, ":stats"), "replayed") == 0) {
        if (e2e_mono_ms() > deadline) fail_msg("the batch replay did not start");
        e2e_pause_ms(1);
    }
    struct linger reset = { 1, 0 };
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    close(fd);   /* RST: the client is gone */

    /* Polls until the count has not moved for 300 ms. */
    long long last = -1, now = 0;
    int still = 0;
    deadline = e2e_mono_ms() + 15000;
    while (still < 6) {
        e2e_pause_ms(50);
        now = hget_int(qkey(q, ":stats"), "replayed");
        still = now == last ? still + 1 : 0;
        last = now;
        if (e2e_mono_ms() > deadline) fail_msg("replayed still grows: %lld", now);
    }
    printf("test_ops: client left mid-replay: %lld of %d replayed before the loop stopped\n", now,
           N);
    if (now >= N / 2)
        fail_msg("the batch replay went on after its client left: %lld of %d replayed", now, N);
    assert_int_equal(dead_total(q), N - now);
    /* The daemon is fine and the rest can still be replayed. */
    assert_int_equal(replay_many(q, "{\"all\":true}"), N - now);
}

/* A client that half-closes its side after the request (shutdown(SHUT_WR),
 * which HTTP/1.1 allows) still reads the answer, so a batch replay over
 * many batches runs to the end and answers the whole count. It used to stop
 * after the first batch and answer 503 "nothing was done". */
static void test_replay_all_half_closed_client(void **state)
{
    (void)state;
    enum { N = 1000 };
    char q[64];
    queue_name(q, sizeof q, "replay-halfclose");
    seed_dead(q, 1, N, e2e_wall_ms() - 1000, true);

    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_daemon.port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", qpath(q, "/replay"), NULL, "{\"all\":true}", 12),
                     0);
    assert_int_equal(shutdown(c.fd, SHUT_WR), 0);
    e2e_response_t r = { 0 };
    int rc = e2e_read_response(&c, &r);
    e2e_conn_close(&c);
    track(&r);
    if (rc != 0) fail_msg("replay all then SHUT_WR: no complete response");
    if (r.status != 200) fail_msg("replay all then SHUT_WR: %d %s", r.status, r.body);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), N);
    resp_free(&r);
    assert_int_equal(dead_total(q), 0);
    assert_int_equal(hget_int(qkey(q, ":stats"), "replayed"), N);
}

/* Payloads at the --max-body size: a listing page and a batch claim stop at
 * about 4 MiB (at least one message) instead of carrying them all. */
static void test_replies_bounded_in_bytes(void **state)
{
    (void)state;
    enum { N = 6, PAYLOAD = 1024 * 1024 - 64 };
    char q[64];
    queue_name(q, sizeof q, "big");
    char *body = malloc(PAYLOAD + 32);
    assert_non_null(body);
    int n = snprintf(body, 32, "{\"payload\":\"");
    memset(body + n, 'x', PAYLOAD);
    memcpy(body + n + PAYLOAD, "\"}", 3);
    e2e_response_t r = { 0 };
    for (int i = 0; i < N; i++) {
        http(&r, "POST", qpath(q, "/messages"), body);
        e2e_expect_json(&r, 201);
    }
    free(body);

    char cursor[512] = "";
    int listed = 0, pages = 0;
    do {
        http(&r, "GET", cursor[0] ? qpath(q, e2e_fmt("/messages?limit=1000&cursor=%s",
                                                      e2e_url_encode(cursor)))
                                  : qpath(q, "/messages?limit=1000"), NULL);
        rd_json_t *doc = e2e_expect_json(&r, 200);
        assert_int_equal(e2e_jint(doc, "total"), N);
        size_t got = rd_json_array_size(e2e_jget(doc, "messages"));
        if (got < 1 || got > 4 || r.body_len > 5 * 1024 * 1024)
            fail_msg("a page of %zu messages, %zu bytes", got, r.body_len);
        listed += (int)got;
        rd_json_t *next = e2e_jget(doc, "next_cursor");
        cursor[0] = '\0';
        if (!rd_json_is_null(next)) snprintf(cursor, sizeof cursor, "%s", rd_json_string(next));
    } while (cursor[0] && ++pages < 10);
    assert_int_equal(listed, N);
    assert_true(pages >= 1);

    http(&r, "POST", qpath(q, "/claim"), "{\"count\":100,\"lease_seconds\":600}");
    size_t claimed = rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages"));
    if (claimed < 1 || claimed >= N || r.body_len > 5 * 1024 * 1024)
        fail_msg("a batch claim of 100 returned %zu messages, %zu bytes", claimed, r.body_len);
    http(&r, "GET", qpath(q, "/stats"), NULL);
    rd_json_t *counts = e2e_jget(e2e_expect_json(&r, 200), "counts");
    assert_int_equal(e2e_jint(counts, "pending"), N - (long long)claimed);
    assert_int_equal(e2e_jint(counts, "processing"), (long long)claimed);
    resp_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Bulk replay, and the latency another queue sees meanwhile                */
/* ------------------------------------------------------------------------ */

/* Sends every queued pipeline command's reply through check; fails on error. */
static void drain_pipeline(size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        redisReply *reply;
        if (redisGetReply(g_redis, (void **)&reply) != REDIS_OK) fail_msg("%s: %s", what, g_redis->errstr);
        if (reply->type == REDIS_REPLY_ERROR) fail_msg("%s: %s", what, reply->str);
        freeReplyObject(reply);
    }
}

/* n messages in q through the same Lua function the daemon calls, pipelined;
 * the queue is registered the way the daemon does it. */
static void fcall_enqueue(const char *q, size_t n, int max_retries)
{
    const char *base = qkey(q, "");
    char b[512];
    snprintf(b, sizeof b, "%s", base);
    for (size_t i = 0; i < n; i++)
        redisAppendCommand(g_redis, "FCALL " RD_FUNCTION("enqueue") " 1 %s %s %d 0", b, "bulk",
                           max_retries);
    drain_pipeline(n, "FCALL enqueue");
    freeReplyObject(rcmd("FCALL " RD_FUNCTION("register") " 1 %s:queues %s -1", g_prefix, q));
}

/* Claims up to 100 of q with FCALL claim; writes the ids; returns how many. */
static size_t fcall_claim(const char *q, long long *ids)
{
    redisReply *reply = rcmd("FCALL " RD_FUNCTION("claim") " 1 %s 600000 100", qkey(q, ""));
    assert_int_equal(reply->type, REDIS_REPLY_ARRAY);
    assert_string_equal(reply->element[0]->str, "ok");
    size_t n = 0;
    for (size_t i = 1; i < reply->elements; i++) {
        /* A leased message: {id, payload, ...} by position (leased_reply). */
        redisReply *msg = reply->element[i];
        assert_true(msg->elements >= 8);
        ids[n++] = msg->element[0]->type == REDIS_REPLY_INTEGER ? msg->element[0]->integer
                                                                : strtoll(msg->element[0]->str, NULL, 10);
    }
    freeReplyObject(reply);
    return n;
}

typedef struct prober {
    int port;
    char path[512];
    atomic_bool stop;
    long long *start_us, *end_us;   /* one pair per claim */
    size_t n, cap;
    int bad;                        /* claims that did not answer 200 */
} prober_t;

/* Worker thread: claims one message at a time on its own connection until
 * told to stop, timing each round trip. No cmocka calls here. */
static void *prober_main(void *arg)
{
    prober_t *p = arg;
    e2e_conn_t c;
    if (e2e_conn_open(&c, p->port) != 0) {
        p->bad++;
        return NULL;
    }
    static const char body[] = "{\"lease_seconds\":600}";
    while (!atomic_load(&p->stop) && p->n < p->cap) {
        e2e_response_t r;
        long long t0 = e2e_mono_us();
        int rc = e2e_request(&c, "POST", p->path, NULL, body, strlen(body), &r);
        long long t1 = e2e_mono_us();
        if (rc != 0 || r.status != 200) p->bad++;
        e2e_response_free(&r);
        if (rc != 0) break;
        p->start_us[p->n] = t0;
        p->end_us[p->n] = t1;
        p->n++;
    }
    e2e_conn_close(&c);
    return NULL;
}

/* Claims every claimable message of q (FCALL claim, 100 at a time; ids has
 * room for cap) and fails each (max_retries 1: dead) with an smtp error, or,
 * when alternate, dns for even ids. Returns how many. */
static size_t fcall_kill_all(const char *q, long long *ids, size_t cap, bool alternate)
{
    size_t nids = 0;
    for (;;) {
        if (nids + 100 > cap) fail_msg("more than %zu claimable in %s", cap - 100, q);
        size_t got = fcall_claim(q, ids + nids);
        if (got == 0) break;
        nids += got;
    }
    for (size_t i = 0; i < nids; i++) {
        char mkey[512];
        snprintf(mkey, sizeof mkey, "%s", qkey(q, e2e_fmt(":m:%lld", ids[i])));
        const char *err = !alternate || ids[i] % 2 ? "smtp: 421 too many connections"
                                                   : "dns: no such host";
        redisAppendCommand(g_redis, "FCALL " RD_FUNCTION("fail") " 2 %s %s %lld %s %s 1 -1",
                           qkey(q, ""), mkey,
                           ids[i], "", err);
    }
    drain_pipeline(nids, "FCALL fail");
    return nids;
}

typedef struct latency {
    long long replayed;
    double took_ms, med_ms, p99_ms, max_ms, base_med_ms, base_max_ms;
    size_t n, base_n;
    int bad;
} latency_t;

/* POSTs body to q's batch replay while a second thread claims on `other`
 * one message at a time; the claims whose round trip overlapped the replay
 * are summarized (and a baseline taken just before it). */
static latency_t replay_under_probe(const char *q, const char *other, const char *body,
                                    const char *label)
{
    prober_t p = { .port = g_daemon.port, .cap = 20000 };
    snprintf(p.path, sizeof p.path, "%s", qpath(other, "/claim"));
    p.start_us = calloc(p.cap, sizeof *p.start_us);
    p.end_us = calloc(p.cap, sizeof *p.end_us);
    atomic_init(&p.stop, false);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, prober_main, &p), 0);
    e2e_pause_ms(200);   /* a baseline before the replay */

    e2e_response_t r = { 0 };
    long long t0 = e2e_mono_us();
    http(&r, "POST", qpath(q, "/replay"), body);
    long long t1 = e2e_mono_us();
    e2e_pause_ms(50);
    atomic_store(&p.stop, true);
    pthread_join(th, NULL);
    latency_t l = { .bad = p.bad, .took_ms = (t1 - t0) / 1000.0 };
    if (r.status == 200 && r.json) rd_json_integer(rd_json_get(r.json, "replayed"), &l.replayed);
    else l.replayed = -r.status;
    resp_free(&r);

    long long *during = calloc(p.n + 1, sizeof *during), *before = calloc(p.n + 1, sizeof *before);
    for (size_t i = 0; i < p.n; i++) {
        long long us = p.end_us[i] - p.start_us[i];
        if (p.end_us[i] >= t0 && p.start_us[i] <= t1) during[l.n++] = us;
        else if (p.end_us[i] < t0) before[l.base_n++] = us;
    }
    qsort(during, l.n, sizeof *during, e2e_cmp_ll);
    qsort(before, l.base_n, sizeof *before, e2e_cmp_ll);
    if (l.n) {
        l.med_ms = during[l.n / 2] / 1000.0;
        l.p99_ms = during[(l.n * 99) / 100] / 1000.0;
        l.max_ms = during[l.n - 1] / 1000.0;
    }
    if (l.base_n) {
        l.base_med_ms = before[l.base_n / 2] / 1000.0;
        l.base_max_ms = before[l.base_n - 1] / 1000.0;
    }
    printf("test_ops: %s: replayed %lld in %.1f ms; claims on another queue meanwhile: n=%zu "
           "median=%.3f ms p99=%.3f ms max=%.3f ms (baseline n=%zu median=%.3f ms max=%.3f ms)%s\n",
           label, l.replayed, l.took_ms, l.n, l.med_ms, l.p99_ms, l.max_ms, l.base_n,
           l.base_med_ms, l.base_max_ms, l.bad ? " SOME CLAIMS FAILED" : "");
    fflush(stdout);
    free(p.start_us);
    free(p.end_us);
    free(during);
    free(before);
    return l;
}

/* Claims on another queue kept running during the replay (the wall-clock
 * figures are printed, not asserted: this host is shared). */
static void expect_claims_ran(const latency_t *l, const char *label)
{
    assert_int_equal(l->bad, 0);
    if (l->n < 1) fail_msg("%s: no claim on another queue ran during the replay", label);
}

/* How long Redis's main thread has waited for a CPU, in us (run_delay of
 * /proc/PID/schedstat, PID from INFO server); -1 when this host does not say
 * (e.g. Redis runs elsewhere). Printed with a slow round, to tell why. */
static long long redis_run_delay_us(void)
{
    redisReply *info = rcmd("INFO server");
    const char *at = info->type == REDIS_REPLY_STRING ? strstr(info->str, "process_id:") : NULL;
    long pid = at ? strtol(at + strlen("process_id:"), NULL, 10) : 0;
    freeReplyObject(info);
    long long run_ns = -1, delay_ns = -1;
    FILE *f = pid > 0 ? fopen(e2e_fmt("/proc/%ld/schedstat", pid), "r") : NULL;
    if (f == NULL) return -1;
    int got = fscanf(f, "%lld %lld", &run_ns, &delay_ns);
    fclose(f);
    return got == 2 && run_ns > 0 ? delay_ns / 1000 : -1;
}

/* SLOWLOG entries from here on are the calls being measured; returns
 * redis_run_delay_us() now. */
static long long slow_round_begin(void)
{
    freeReplyObject(rcmd("SLOWLOG RESET"));
    return redis_run_delay_us();
}

enum { SLOW_ROUNDS = 5 };

/* "A few milliseconds per call at most", measured where Redis measures it:
 * SLOWLOG (10 ms) since slow_round_begin, calls of the batch replay and of
 * the claims beside it (function names matched whole; the setup's calls came
 * before). SLOWLOG times a call by the wall clock, which on a loaded host
 * includes the time Redis waited for a CPU while it ran, so a round with a
 * slow call is measured again (true: the caller runs another round); a call
 * slow by its own work is slow in every round, and the test fails when all
 * SLOW_ROUNDS rounds had one. */
static bool slow_round_of(const char *label, int round, long long delay0,
                          const char *const *fns, size_t nfns, long long own_cpu_us)
{
    long long now = delay0 >= 0 ? redis_run_delay_us() : -1;
    redisReply *slow = rcmd("SLOWLOG GET 128");
    assert_int_equal(slow->type, REDIS_REPLY_ARRAY);
    long long worst = 0;
    const char *worst_fn = NULL;
    for (size_t i = 0; i < slow->elements; i++) {
        const redisReply *e = slow->element[i];
        const redisReply *args = e->element[3];
        if (args->elements < 2) continue;
        for (size_t f = 0; f < nfns; f++)
            if (strcmp(args->element[1]->str, fns[f]) == 0 && e->element[2]->integer > worst) {
                worst = e->element[2]->integer;
                worst_fn = fns[f];
            }
    }
    freeReplyObject(slow);
    if (worst_fn == NULL) return false;
    /* own_cpu_us >= 0: the most CPU Redis's main thread used for one of the
     * calls. A call slow by the wall clock whose own work was small found no
     * CPU on a loaded host: not slow by its work. */
    if (own_cpu_us >= 0 && own_cpu_us < 10000) {
        printf("test_ops: %s, round %d: a %s call took %lld us by the wall clock but used "
               "%lld us of CPU: not slow by its own work\n", label, round, worst_fn, worst,
               own_cpu_us);
        return false;
    }
    printf("test_ops: %s, round %d: a %s call took %lld us by the wall clock (Redis waited %lld "
           "us for a CPU in the round)%s\n", label, round, worst_fn, worst,
           now >= 0 ? now - delay0 : -1LL, round < SLOW_ROUNDS ? ": measured again" : "");
    fflush(stdout);
    if (round >= SLOW_ROUNDS)
        fail_msg("%s: a call held Redis for 10 ms or more in each of %d rounds, the last a %s "
                 "call for %lld us (SLOWLOG; want under 10 ms)", label, SLOW_ROUNDS, worst_fn,
                 worst);
    return true;
}

static bool slow_round(const char *label, int round, long long delay0)
{
    static const char *const fns[] = { RD_FUNCTION("replay_many"), RD_FUNCTION("claim") };
    return slow_round_of(label, round, delay0, fns, sizeof fns / sizeof fns[0], -1);
}

enum { RULE_ERROR_BYTES = 1024 * 1024, RULE_FAILS = 10 };

static const char *entry_field(const redisReply *entry, const char *field);

/* CPU time Redis's main thread has used, in us (INFO cpu); it moves only
 * while Redis works, not while it waits for a CPU. */
static long long redis_main_cpu_us(void)
{
    redisReply *info = rcmd("INFO cpu");
    double sys = -1, user = -1;
    const char *at = strstr(info->str, "used_cpu_sys_main_thread:");
    if (at) sys = strtod(at + strlen("used_cpu_sys_main_thread:"), NULL);
    at = strstr(info->str, "used_cpu_user_main_thread:");
    if (at) user = strtod(at + strlen("used_cpu_user_main_thread:"), NULL);
    freeReplyObject(info);
    if (sys < 0 || user < 0) fail_msg("INFO cpu has no used_cpu_*_main_thread");
    return (long long)((sys + user) * 1e6);
}

/* 20 recovery rules, each an error_contains of 255 bytes that shares its
 * first 254 with the error (the worst case of a plain substring search: every
 * position matches for 254 bytes), and a 1 MiB error that none matches: a
 * fail must hold Redis under 10 ms (rules look at the error's first 4 KiB,
 * docs/dead-letters.md §2), measured by SLOWLOG as slow_round does; a call
 * slow by the wall clock counts only if the calls also used 10 ms of Redis's
 * CPU each (INFO cpu around the round's calls), so a loaded host that keeps Redis waiting for
 * a CPU does not fail it, while 300 ms of substring search does. last_error
 * keeps the first 64 KiB, a rule that matches inside the first 4 KiB still
 * decides, and the death's event keeps the first 4 KiB. */
static void test_fail_with_many_rules_and_huge_error(void **state)
{
    (void)state;
    char q[64], edge[64];
    queue_name(q, sizeof q, "rules-cost");
    queue_name(edge, sizeof edge, "rules-edge");
    char needle[256];
    rd_buf_t body = RD_BUF_INIT;
    rd_buf_puts(&body, "{\"dead_letter_rules\":[");
    for (int i = 0; i < 20; i++) {
        memset(needle, 'a', 254);
        needle[254] = "0123456789ABCDEFGHIJ"[i];
        needle[255] = '\0';
        rd_buf_printf(&body, "%s{\"error_contains\":\"%s\",\"action\":\"dead\"}", i ? "," : "",
                      needle);
    }
    rd_buf_puts(&body, "]}");
    e2e_response_t r = { 0 };
    for (int i = 0; i < 2; i++) {
        http(&r, "PUT", qpath(i ? edge : q, "/policy"), body.data);
        if (r.status != 200) fail_msg("PUT policy: %d %s", r.status, r.body);
    }
    resp_free(&r);
    rd_buf_free(&body);

    static char err[RULE_ERROR_BYTES + 1];   /* static: a failed assert leaks nothing */
    memset(err, 'a', RULE_ERROR_BYTES);
    err[RULE_ERROR_BYTES] = '\0';
    char was[32];
    redisReply *old = rcmd("CONFIG GET slowlog-log-slower-than");
    snprintf(was, sizeof was, "%s", old->element[1]->str);
    freeReplyObject(old);
    freeReplyObject(rcmd("CONFIG SET slowlog-log-slower-than 10000"));
    static const char *const fns[] = { RD_FUNCTION("fail") };
    long long ids[100];
    for (int round = 1;; round++) {
        fcall_enqueue(q, RULE_FAILS, 10);
        long long delay0 = slow_round_begin();
        size_t n = fcall_claim(q, ids);   /* retries due again may come first */
        assert_true(n >= 1);
        long long cpu0 = redis_main_cpu_us();
        for (size_t i = 0; i < n; i++) {
            redisReply *x = rcmd("FCALL " RD_FUNCTION("fail") " 2 %s %s %lld %s %b 1 -1",
                                 qkey(q, ""), qkey(q, e2e_fmt(":m:%lld", ids[i])), ids[i], "",
                                 err, (size_t)RULE_ERROR_BYTES);
            if (x->type == REDIS_REPLY_ERROR) fail_msg("FCALL fail: %s", x->str);
            freeReplyObject(x);
        }
        /* Averaged over the round's calls: the kernel counts CPU time in ticks. */
        long long own = (redis_main_cpu_us() - cpu0) / (long long)n;
        printf("test_ops: fail, 20 rules, 1 MiB error, round %d: %zu calls, %lld us of Redis CPU "
               "each\n", round, n, own);
        if (!slow_round_of("fail, 20 rules, 1 MiB error", round, delay0, fns, 1, own)) break;
    }
    freeReplyObject(rcmd("CONFIG SET slowlog-log-slower-than %s", was));
    /* None matched: each failure was scheduled again, its error kept up to 64 KiB. */
    assert_int_equal(hget_int(qkey(q, ":stats"), "rule_0_dead"), 0);
    http(&r, "GET", message_path(q, ids[0], NULL), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "pending");
    assert_int_equal(strlen(e2e_jstr(m, "last_error")), 65536);   /* README: at most 64 KiB */
    resp_free(&r);
    /* Rule 0's needle ending at byte 4096 matches; ending at byte 4097 it is
     * past what rules look at. */
    for (int past = 0; past <= 1; past++) {
        memset(err, 'a', RULE_ERROR_BYTES);
        err[4095 + past] = '0';
        fcall_enqueue(edge, 1, 10);
        assert_int_equal(fcall_claim(edge, ids), 1);
        freeReplyObject(rcmd("FCALL " RD_FUNCTION("fail") " 2 %s %s %lld %s %b 1 -1",
                             qkey(edge, ""), qkey(edge, e2e_fmt(":m:%lld", ids[0])), ids[0], "",
                             err, (size_t)RULE_ERROR_BYTES));
        expect_status(edge, ids[0], past ? "pending" : "dead");
        assert_int_equal(hget_int(qkey(edge, ":stats"), "rule_0_dead"), 1);
    }
    /* The death's event keeps the error's first 4 KiB, as much as an alert
     * carries (the message keeps all of it). */
    redisReply *ev = rcmd("XREVRANGE %s + - COUNT 1", qkey(edge, ":events"));
    assert_int_equal(ev->elements, 1);
    assert_string_equal(entry_field(ev->element[0], "event"), "dead");
    assert_int_equal(strlen(entry_field(ev->element[0], "error")), 4096);
    freeReplyObject(ev);
}

/* Bytes Redis has read from its clients (INFO stats). */
static long long redis_net_input_bytes(void)
{
    redisReply *info = rcmd("INFO stats");
    const char *at = strstr(info->str, "total_net_input_bytes:");
    long long n = at ? strtoll(at + strlen("total_net_input_bytes:"), NULL, 10) : -1;
    freeReplyObject(info);
    if (n < 0) fail_msg("INFO stats has no total_net_input_bytes");
    return n;
}

/* A fail's error past 64 KiB is cut (README "A message"): before a
 * UTF-8 sequence, and by the daemon before it is sent, so Redis never reads
 * the rest of a 1 MB error. */
static void test_long_error_kept_to_64_kib(void **state)
{
    (void)state;
    enum { ERR = 1000000, KEEP = 65536 };
    char q[64];
    queue_name(q, sizeof q, "long-error");
    static char body[ERR + 64];
    int n = snprintf(body, sizeof body, "{\"error\":\"");
    memset(body + n, 'a', KEEP - 1);               /* bytes 0..65534 */
    memcpy(body + n + KEEP - 1, "\xc3\xa9", 2);    /* "é" across byte 65536 */
    memset(body + n + KEEP + 1, 'b', ERR - KEEP - 1);
    snprintf(body + n + ERR, sizeof body - n - ERR, "\"}");
    long long id = enqueue_max(q, 3);
    claim_one(q, id, NULL, 0);
    long long in0 = redis_net_input_bytes();
    settle(q, id, "fail", body, "pending");
    long long read = redis_net_input_bytes() - in0;
    printf("test_ops: a fail with a %d-byte error made Redis read %lld bytes\n", ERR, read);
    if (read > 4 * KEEP) fail_msg("Redis read %lld bytes for the fail, want at most %d", read,
                                  4 * KEEP);
    e2e_response_t r = { 0 };
    http(&r, "GET", message_path(q, id, NULL), NULL);
    const char *e = e2e_jstr(e2e_expect_json(&r, 200), "last_error");
    assert_int_equal(strlen(e), KEEP - 1);
    assert_int_equal(strspn(e, "a"), KEEP - 1);
    resp_free(&r);
}

static void test_bulk_replay_and_claim_latency(void **state)
{
    (void)state;
    char q[64], other[64];
    queue_name(q, sizeof q, "bulk");
    queue_name(other, sizeof other, "bulk-other");
    static long long ids[BULK_DEAD + 200];

    /* 1500 dead letters: enqueue, claim 100 at a time, fail each. */
    fcall_enqueue(q, BULK_DEAD, 1);
    fcall_enqueue(other, 60000, 3);   /* work for the prober */
    char was[32];
    redisReply *old = rcmd("CONFIG GET slowlog-log-slower-than");
    snprintf(was, sizeof was, "%s", old->element[1]->str);
    freeReplyObject(old);
    freeReplyObject(rcmd("CONFIG SET slowlog-log-slower-than 10000"));

    assert_int_equal(fcall_kill_all(q, ids, BULK_DEAD + 100, false), BULK_DEAD);
    long long replayed_total = 0;
    latency_t all;
    for (int round = 1;; round++) {
        if (round > 1)   /* the 1500 are due again: dead again */
            assert_int_equal(fcall_kill_all(q, ids, BULK_DEAD + 100, false), BULK_DEAD);
        assert_int_equal(dead_total(q), BULK_DEAD);
        long long delay0 = slow_round_begin();
        all = replay_under_probe(q, other, "{\"all\":true}", "all 1500");
        replayed_total += all.replayed;
        assert_int_equal(all.replayed, BULK_DEAD);
        assert_int_equal(dead_total(q), 0);
        assert_int_equal(rint_cmd("ZCARD %s", qkey(q, ":errors")), 0);
        assert_int_equal(rint_cmd("LLEN %s", qkey(q, ":3:due")), BULK_DEAD);
        assert_int_equal(hget_int(qkey(q, ":stats"), "replayed"), replayed_total);
        if (!slow_round("all 1500", round, delay0)) break;
    }

    /* Again, half smtp and half dns (many with the same time of death, so
     * the cursor walks ties): error_contains replays exactly the smtp half. */
    assert_int_equal(fcall_kill_all(q, ids, BULK_DEAD + 100, true), BULK_DEAD);
    latency_t err;
    for (int round = 1;; round++) {
        if (round > 1)   /* the smtp half is due again: dead again, of smtp */
            assert_int_equal(fcall_kill_all(q, ids, BULK_DEAD + 100, true), BULK_DEAD / 2);
        assert_int_equal(dead_total(q), BULK_DEAD);
        long long delay0 = slow_round_begin();
        err = replay_under_probe(q, other, "{\"error_contains\":\"smtp\"}",
                                 "error_contains over 1500");
        replayed_total += err.replayed;
        assert_int_equal(err.replayed, BULK_DEAD / 2);
        assert_int_equal(dead_total(q), BULK_DEAD / 2);
        assert_false(rnil("ZSCORE %s %s", qkey(q, ":errors"), "dns: no such host"));
        assert_true(rnil("ZSCORE %s %s", qkey(q, ":errors"), "smtp: 421 too many connections"));
        if (!slow_round("error_contains over 1500", round, delay0)) break;
    }
    freeReplyObject(rcmd("CONFIG SET slowlog-log-slower-than %s", was));

    /* ids: the 750 dns ones and 250 that are not dead, 1000 in one body. */
    rd_buf_t body = RD_BUF_INIT;
    rd_buf_puts(&body, "{\"ids\":[");
    size_t listed = 0;
    for (long long id = 2; id <= BULK_DEAD; id += 2)   /* evens died of dns */
        rd_buf_printf(&body, "%s%lld", listed++ ? "," : "", id);
    for (long long id = 1; listed < 1000; id += 2)      /* odds are pending again */
        rd_buf_printf(&body, ",%lld", (listed++, id));
    rd_buf_puts(&body, "]}");
    assert_int_equal(listed, 1000);
    latency_t by_ids = replay_under_probe(q, other, body.data, "ids x1000");
    rd_buf_free(&body);
    assert_int_equal(by_ids.replayed, BULK_DEAD / 2);
    assert_int_equal(dead_total(q), 0);
    assert_int_equal(hget_int(qkey(q, ":stats"), "replayed"), replayed_total + BULK_DEAD / 2);

    expect_claims_ran(&all, "all");
    expect_claims_ran(&err, "error_contains");
    /* ids is one call of up to 1000 (not batched by 50 like the others):
     * its stall is printed above, not asserted. */
    assert_int_equal(by_ids.bad, 0);
}

/* ------------------------------------------------------------------------ */
/* Stats                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct key_counts {
    long long ready, due, scheduled, processing, succeeded, dead;
} key_counts_t;

static key_counts_t read_key_counts(const char *q)
{
    key_counts_t k;
    k.ready = rint_cmd("LLEN %s", qkey(q, ":3:ready"));
    k.due = rint_cmd("LLEN %s", qkey(q, ":3:due"));
    k.scheduled = rint_cmd("ZCARD %s", qkey(q, ":3:scheduled"));
    k.processing = rint_cmd("ZCARD %s", qkey(q, ":3:processing"));
    k.succeeded = rint_cmd("ZCARD %s", qkey(q, ":3:succeeded"));
    k.dead = dead_total(q);
    return k;
}

static void test_stats_after_mixed_workload(void **state)
{
    (void)state;
    char q[64];
    queue_name(q, sizeof q, "stats");
    e2e_response_t r = { 0 };
    const char *smtp = "smtp: 550 mailbox \"full\"";

    /* A: succeeds */
    make_succeeded(q);
    /* B: fails with a retry left (scheduled far away) */
    long long b = enqueue_max(q, 3);
    claim_one(q, b, NULL, 0);
    settle(q, b, "fail", "{\"error\":\"timeout\",\"retry_after_seconds\":600}", "pending");
    /* C1, C2, D: die of the same error; E: not retryable; F: killed */
    make_dead(q, smtp);
    make_dead(q, smtp);
    long long d = make_dead(q, smtp);
    long long e = enqueue_max(q, 3);
    claim_one(q, e, NULL, 0);
    settle(q, e, "fail", "{\"error\":\"dns lookup failed\",\"retryable\":false}", "dead");
    long long f = enqueue_max(q, 3);
    settle(q, f, "kill", "{\"reason\":\"poison\"}", "dead");
    /* D: replayed, then claimed again; then I; G and H stay ready */
    settle(q, d, "replay", NULL, "pending");
    claim_one(q, d, NULL, 0);
    /* I: a lease that expires (a failure with a 2 s backoff); nothing is
     * claimed after it, so its retry falling due changes no claim. */
    long long i_id = enqueue_max(q, 3);
    http(&r, "POST", qpath(q, "/claim"), "{\"lease_seconds\":1}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), i_id);
    long long deadline = e2e_mono_ms() + 5000;
    for (;;) {
        http(&r, "GET", message_path(q, i_id, NULL), NULL);
        rd_json_t *m = e2e_expect_json(&r, 200);
        if (strcmp(e2e_jstr(m, "status"), "pending") == 0) {
            assert_string_equal(e2e_jstr(m, "last_error"), "lease expired");
            assert_int_equal(e2e_jint(m, "retry_count"), 1);
            break;
        }
        if (e2e_mono_ms() > deadline) fail_msg("lease of %lld did not expire within 5 s", i_id);
        e2e_pause_ms(50);
    }
    long long g = enqueue_max(q, 3);
    enqueue_max(q, 3);
    expect_status(q, g, "pending");

    /* Counts against the keys: re-read until nothing moved in between (the
     * timer may promote I's retry meanwhile). */
    rd_json_t *st = NULL, *counts = NULL;
    key_counts_t k0, k1;
    for (int attempt = 0;; attempt++) {
        k0 = read_key_counts(q);
        http(&r, "GET", qpath(q, "/stats"), NULL);
        k1 = read_key_counts(q);
        if (memcmp(&k0, &k1, sizeof k0) == 0) break;
        if (attempt == 5) fail_msg("keys kept changing");
    }
    st = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(st, "queue"), q);
    counts = e2e_jget(st, "counts");
    assert_int_equal(e2e_jint(counts, "pending"), k0.ready + k0.due + k0.scheduled);
    assert_int_equal(e2e_jint(counts, "ready"), k0.ready + k0.due);
    assert_int_equal(e2e_jint(counts, "scheduled"), k0.scheduled);
    assert_int_equal(e2e_jint(counts, "processing"), k0.processing);
    assert_int_equal(e2e_jint(counts, "succeeded"), k0.succeeded);
    assert_int_equal(e2e_jint(counts, "dead"), k0.dead);
    /* and against what the test did: I, B, G, H pending; D processing */
    assert_int_equal(e2e_jint(counts, "pending"), 4);
    assert_int_equal(e2e_jint(counts, "processing"), 1);
    assert_int_equal(e2e_jint(counts, "succeeded"), 1);
    assert_int_equal(e2e_jint(counts, "dead"), 4);

    rd_json_t *t = e2e_jget(st, "totals");
    assert_int_equal(e2e_jint(t, "enqueued"), 10);
    assert_int_equal(e2e_jint(t, "claimed"), 8);        /* A B C1 C2 D E D I */
    assert_int_equal(e2e_jint(t, "succeeded"), 1);
    assert_int_equal(e2e_jint(t, "failed"), 6);         /* I B C1 C2 D E */
    assert_int_equal(e2e_jint(t, "retried"), 2);        /* I B */
    assert_int_equal(e2e_jint(t, "dead"), 5);           /* C1 C2 D E F */
    assert_int_equal(e2e_jint(t, "replayed"), 1);
    assert_int_equal(e2e_jint(t, "lease_expired"), 1);
    assert_int_equal(e2e_jint(st, "dead_last_24h"), 4);

    rd_json_t *top = e2e_jget(st, "top_errors");
    assert_true(rd_json_is_array(top));
    assert_int_equal(rd_json_array_size(top), 3);
    assert_string_equal(e2e_jstr(rd_json_array_at(top, 0), "error"), smtp);
    assert_int_equal(e2e_jint(rd_json_array_at(top, 0), "count"), 2);
    bool dns = false, poison = false;
    for (size_t i = 1; i < 3; i++) {
        rd_json_t *x = rd_json_array_at(top, i);
        assert_int_equal(e2e_jint(x, "count"), 1);
        if (strcmp(e2e_jstr(x, "error"), "dns lookup failed") == 0) dns = true;
        if (strcmp(e2e_jstr(x, "error"), "poison") == 0) poison = true;
    }
    assert_true(dns && poison);

    http(&r, "GET", qpath(q, "/stats?top=1"), NULL);
    top = e2e_jget(e2e_expect_json(&r, 200), "top_errors");
    assert_int_equal(rd_json_array_size(top), 1);
    assert_string_equal(e2e_jstr(rd_json_array_at(top, 0), "error"), smtp);
    http(&r, "GET", qpath(q, "/stats?top=100"), NULL);
    assert_int_equal(rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "top_errors")), 3);

    static const char *const bad_top[] = { "0", "101", "-1", "abc", "" };
    for (size_t i = 0; i < sizeof bad_top / sizeof bad_top[0]; i++) {
        http(&r, "GET", qpath(q, e2e_fmt("/stats?top=%s", bad_top[i])), NULL);
        if (r.status != 422) fail_msg("?top=%s: expected 422, got %d", bad_top[i], r.status);
        e2e_expect_invalid_field(&r, "top");
    }

    /* an unknown queue has zero everything */
    char empty[64];
    queue_name(empty, sizeof empty, "stats-empty");
    http(&r, "GET", qpath(empty, "/stats"), NULL);
    st = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(e2e_jget(st, "counts"), "pending"), 0);
    assert_int_equal(e2e_jint(e2e_jget(st, "totals"), "enqueued"), 0);
    assert_int_equal(rd_json_array_size(e2e_jget(st, "top_errors")), 0);
    g_nused--;   /* never enqueued to: not expected in GET /queues */
    resp_free(&r);
}

static bool valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n) return false;
        for (size_t j = 1; j < len; j++)
            if ((s[i + j] & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

/* top_errors groups errors by their first 200 bytes (cut at a character
 * boundary) and marks a cut with "...": bounded memory per distinct error. */
static void test_top_errors_exact_long_string(void **state)
{
    (void)state;
    char q[64];
    queue_name(q, sizeof q, "toperr-long");
    char longer[320];
    memset(longer, 'x', 300);
    snprintf(longer + 300, sizeof longer - 300, " end");
    make_dead(q, longer);
    make_dead(q, longer);
    make_dead(q, "short");

    e2e_response_t r = { 0 };
    http(&r, "GET", qpath(q, "/stats"), NULL);
    rd_json_t *top = e2e_jget(e2e_expect_json(&r, 200), "top_errors");
    assert_int_equal(rd_json_array_size(top), 2);
    const char *first = e2e_jstr(rd_json_array_at(top, 0), "error");
    assert_int_equal(e2e_jint(rd_json_array_at(top, 0), "count"), 2);
    char want[210];
    memset(want, 'x', 200);
    snprintf(want + 200, sizeof want - 200, "...");
    assert_string_equal(first, want);
    assert_string_equal(e2e_jstr(rd_json_array_at(top, 1), "error"), "short");
    resp_free(&r);
}

/* An error whose 200th byte is inside a multi-byte character still comes
 * back as valid UTF-8 (JSON text must be UTF-8, RFC 8259 §8.1). */
static void test_top_errors_valid_utf8(void **state)
{
    (void)state;
    char q[64];
    queue_name(q, sizeof q, "toperr-utf8");
    char utf8[220];
    memset(utf8, 'a', 199);
    snprintf(utf8 + 199, sizeof utf8 - 199, "\xc3\xa9tail");   /* 'é' is bytes 200-201 */
    make_dead(q, utf8);

    e2e_response_t r = { 0 };
    http(&r, "GET", qpath(q, "/stats"), NULL);
    e2e_expect_json(&r, 200);
    if (!valid_utf8((const unsigned char *)r.body, r.body_len)) {
        const char *at = strstr(r.body, "aaaa\xc3\"");
        fail_msg("GET /stats answered invalid UTF-8: top_errors[0].error ends in byte 0xC3 "
                 "without its continuation byte (%s)", at ? "cut after 200 bytes" : "elsewhere");
    }
    resp_free(&r);
}

/* ------------------------------------------------------------------------ */
/* /metrics                                                                 */
/* ------------------------------------------------------------------------ */

/* The value of the sample `name` whose labels are exactly the given pairs
 * (NULL-terminated name, value list; values unescaped). Returns false when
 * there is none. A minimal reader of the text format: enough for our lines. */
static bool metric(const char *text, double *out, const char *name, ...)
{
    const char *want[8][2];
    size_t nwant = 0;
    va_list ap;
    va_start(ap, name);
    for (const char *k = va_arg(ap, const char *); k && nwant < 8; k = va_arg(ap, const char *)) {
        want[nwant][0] = k;
        want[nwant][1] = va_arg(ap, const char *);
        nwant++;
    }
    va_end(ap);
    size_t nlen = strlen(name);
    for (const char *line = text; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "") {
        if (*line == '#' || strncmp(line, name, nlen) != 0) continue;
        const char *p = line + nlen;
        if (*p != '{' && *p != ' ') continue;
        char keys[8][64], vals[8][512];
        size_t n = 0;
        if (*p == '{') {
            p++;
            while (*p && *p != '}' && n < 8) {
                size_t kl = strcspn(p, "=");
                snprintf(keys[n], sizeof keys[n], "%.*s", (int)kl, p);
                p += kl + 2;   /* =" */
                size_t vl = 0;
                while (*p && *p != '"' && vl + 1 < sizeof vals[n]) {
                    char c = *p++;
                    if (c == '\\') {
                        c = *p++;
                        if (c == 'n') c = '\n';
                    }
                    vals[n][vl++] = c;
                }
                vals[n][vl] = '\0';
                p++;   /* closing quote */
                n++;
                if (*p == ',') p++;
            }
            p++;
        }
        if (n != nwant) continue;
        bool match = true;
        for (size_t i = 0; i < nwant && match; i++) {
            bool found = false;
            for (size_t j = 0; j < n; j++)
                if (strcmp(keys[j], want[i][0]) == 0 && strcmp(vals[j], want[i][1]) == 0) found = true;
            match = found;
        }
        if (!match) continue;
        *out = strtod(p, NULL);
        return true;
    }
    return false;
}

static double metric_or_fail(const char *text, const char *name, const char *q,
                             const char *k2, const char *v2)
{
    double v;
    bool ok;
    if (q && k2) ok = metric(text, &v, name, "queue", q, k2, v2, NULL);
    else if (q) ok = metric(text, &v, name, "queue", q, NULL);
    else if (k2) ok = metric(text, &v, name, k2, v2, NULL);
    else ok = metric(text, &v, name, NULL);
    if (!ok) fail_msg("no sample %s{queue=\"%s\"%s%s}", name, q ? q : "", k2 ? "," : "", k2 ? v2 : "");
    return v;
}

static void test_metrics_endpoint(void **state)
{
    (void)state;
    char q[64];
    queue_name(q, sizeof q, "met\"ri\\cs");
    e2e_response_t r = { 0 };

    /* one first failure with the default backoff (2 s), one dead, one success */
    make_dead(q, "boom");
    make_succeeded(q);
    long long a = enqueue_max(q, 3);
    claim_one(q, a, NULL, 0);
    settle(q, a, "fail", "{\"error\":\"first\"}", "pending");
    long long p = enqueue_max(q, 3);
    claim_one(q, p, NULL, 0);
    enqueue_max(q, 3);

    http(&r, "GET", qpath(q, "/stats"), NULL);
    rd_json_t *st = e2e_expect_json(&r, 200);
    rd_json_t *t = e2e_jget(st, "totals"), *c = e2e_jget(st, "counts");
    static const char *const names[] = { "enqueued", "claimed", "succeeded", "failed",
                                         "retried", "dead", "replayed", "lease_expired" };
    long long totals[8];
    for (size_t i = 0; i < 8; i++) totals[i] = e2e_jint(t, names[i]);
    long long ready = e2e_jint(c, "ready"), scheduled = e2e_jint(c, "scheduled");
    long long processing = e2e_jint(c, "processing"), succeeded = e2e_jint(c, "succeeded");
    long long dead = e2e_jint(c, "dead"), dead24 = e2e_jint(st, "dead_last_24h");

    http(&r, "GET", "/metrics", NULL);
    if (r.status != 200) fail_msg("GET /metrics: %d", r.status);
    if (!e2e_media_type_is(r.content_type, "text/plain") ||
        strstr(r.content_type, "version=0.0.4") == NULL)
        fail_msg("Content-Type \"%s\", expected text/plain; version=0.0.4", r.content_type);
    const char *text = r.body;
    for (size_t i = 0; i < 8; i++)
        assert_int_equal(
            (long long)metric_or_fail(text, e2e_fmt("retryd_%s_total", names[i]), q, NULL, NULL),
            totals[i]);
    assert_int_equal(totals[0], 5);
    assert_int_equal(totals[3], 2);
    assert_int_equal((long long)metric_or_fail(text, "retryd_queue_messages", q, "state", "ready"), ready);
    assert_int_equal((long long)metric_or_fail(text, "retryd_queue_messages", q, "state", "scheduled"),
                     scheduled);
    assert_int_equal((long long)metric_or_fail(text, "retryd_queue_messages", q, "state", "processing"),
                     processing);
    assert_int_equal((long long)metric_or_fail(text, "retryd_queue_messages", q, "state", "succeeded"),
                     succeeded);
    assert_int_equal((long long)metric_or_fail(text, "retryd_queue_messages", q, "state", "dead"), dead);
    assert_int_equal((long long)metric_or_fail(text, "retryd_dead_last_24h", q, NULL, NULL), dead24);

    /* the first failure's 2 s backoff: in le="2", not in le="1" */
    assert_int_equal((long long)metric_or_fail(text, "retryd_retry_delay_seconds_bucket", q, "le", "1"), 0);
    assert_int_equal((long long)metric_or_fail(text, "retryd_retry_delay_seconds_bucket", q, "le", "2"), 1);
    assert_int_equal((long long)metric_or_fail(text, "retryd_retry_delay_seconds_bucket", q, "le", "+Inf"), 1);
    assert_int_equal((long long)metric_or_fail(text, "retryd_retry_delay_seconds_count", q, NULL, NULL), 1);
    assert_true(fabs(metric_or_fail(text, "retryd_retry_delay_seconds_sum", q, NULL, NULL) - 2.0) < 1e-9);

    assert_true(metric_or_fail(text, "retryd_redis_rtt_seconds_count", NULL, NULL, NULL) > 0);
    assert_true(metric_or_fail(text, "retryd_redis_rtt_seconds_bucket", NULL, "le", "+Inf") > 0);
    /* the raw label is escaped as 0.0.4 wants */
    assert_non_null(strstr(text, "{queue=\"met\\\"ri\\\\cs-"));
    resp_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

/* The value of field in one XRANGE entry's field list, or NULL. */
enum { SNAP_QUEUES = 20, SNAP_SCRAPES = 8, SNAP_MAX_AGE_MS = 5000 };

/* The stats calls Redis ran for queues of prefix since the SLOWLOG was reset
 * with slowlog-log-slower-than 0 (every command logged). */
static long long stats_calls_logged(const char *prefix)
{
    redisReply *slow = rcmd("SLOWLOG GET -1");
    const char *want = e2e_fmt("%s:{", prefix);
    long long n = 0;
    for (size_t i = 0; i < slow->elements; i++) {
        const redisReply *args = slow->element[i]->element[3];
        if (args->elements >= 4 && strcmp(args->element[1]->str, RD_FUNCTION("stats")) == 0 &&
            strncmp(args->element[3]->str, want, strlen(want)) == 0)
            n++;
    }
    freeReplyObject(slow);
    return n;
}

/* The ready count of queue q and the snapshot's age in one /metrics text. */
static long long scraped_ready(const char *text, const char *q, double *age_s)
{
    *age_s = metric_or_fail(text, "retryd_queue_metrics_age_seconds", NULL, NULL, NULL);
    if (*age_s < 0 || *age_s > SNAP_MAX_AGE_MS / 1000.0 + 0.5)
        fail_msg("retryd_queue_metrics_age_seconds is %g, want 0-5", *age_s);
    return (long long)metric_or_fail(text, "retryd_queue_messages", q, "state", "ready");
}

/* /metrics serves the per-queue series from one snapshot shared by every
 * scrape (docs/design.md "Listing"): SNAP_SCRAPES scrapes sent at once, and more
 * after them, cost one fan-out (one stats call per queue), not one each;
 * the snapshot is at most 5 s old, so a change shows within about 5 s. */
static void test_metrics_scrapes_share_one_snapshot(void **state)
{
    (void)state;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "opssnap%ld", (long)getpid());
    if (start_daemon(&g_side, prefix, NULL) != 0) fail_msg("snapshot daemon did not start");
    e2e_response_t r = { 0 };
    for (int i = 0; i < SNAP_QUEUES; i++) {
        http_to(g_side.port, &r, "POST", e2e_fmt("/queues/snap-%d/messages", i),
                "{\"payload\":\"x\"}");
        assert_int_equal(r.status, 201);
    }
    char was_slower[32], was_len[32];
    redisReply *old = rcmd("CONFIG GET slowlog-log-slower-than");
    snprintf(was_slower, sizeof was_slower, "%s", old->element[1]->str);
    freeReplyObject(old);
    old = rcmd("CONFIG GET slowlog-max-len");
    snprintf(was_len, sizeof was_len, "%s", old->element[1]->str);
    freeReplyObject(old);
    freeReplyObject(rcmd("CONFIG SET slowlog-max-len 100000"));
    freeReplyObject(rcmd("CONFIG SET slowlog-log-slower-than 0"));
    freeReplyObject(rcmd("SLOWLOG RESET"));

    long long t0 = e2e_mono_ms();
    static e2e_conn_t conns[SNAP_SCRAPES];
    for (int i = 0; i < SNAP_SCRAPES; i++) {
        assert_int_equal(e2e_conn_open(&conns[i], g_side.port), 0);
        assert_int_equal(e2e_send_request(&conns[i], "GET", "/metrics", NULL, NULL, 0), 0);
    }
    double age;
    for (int i = 0; i < SNAP_SCRAPES; i++) {
        e2e_response_t m = { 0 };
        assert_int_equal(e2e_read_response(&conns[i], &m), 0);
        assert_int_equal(m.status, 200);
        for (int q = 0; q < SNAP_QUEUES; q++)
            assert_int_equal(scraped_ready(m.body, e2e_fmt("snap-%d", q), &age), 1);
        e2e_response_free(&m);
        e2e_conn_close(&conns[i]);
    }
    int more = 0;
    while (more < 4 && e2e_mono_ms() - t0 < SNAP_MAX_AGE_MS - 1000) {
        http_to(g_side.port, &r, "GET", "/metrics", NULL);
        assert_int_equal(r.status, 200);
        assert_int_equal(scraped_ready(r.body, "snap-0", &age), 1);
        more++;
    }
    long long calls = stats_calls_logged(prefix);
    bool in_time = e2e_mono_ms() - t0 < SNAP_MAX_AGE_MS;
    freeReplyObject(rcmd("CONFIG SET slowlog-log-slower-than %s", was_slower));
    freeReplyObject(rcmd("CONFIG SET slowlog-max-len %s", was_len));
    freeReplyObject(rcmd("SLOWLOG RESET"));
    printf("test_ops: %d concurrent and %d later /metrics scrapes of %d queues made %lld stats "
           "calls\n", SNAP_SCRAPES, more, SNAP_QUEUES, calls);
    if (in_time && calls != SNAP_QUEUES)
        fail_msg("%d + %d scrapes within 5 s made %lld stats calls, want %d (one fan-out)",
                 SNAP_SCRAPES, more, calls, SNAP_QUEUES);

    /* A change shows once the snapshot is read again: within 5 s (and a
     * scrape's time). */
    http_to(g_side.port, &r, "POST", "/queues/snap-0/messages", "{\"payload\":\"y\"}");
    assert_int_equal(r.status, 201);
    long long t1 = e2e_mono_ms(), seen;
    for (;;) {
        http_to(g_side.port, &r, "GET", "/metrics", NULL);
        assert_int_equal(r.status, 200);
        seen = scraped_ready(r.body, "snap-0", &age);
        if (seen == 2) break;
        if (e2e_mono_ms() - t1 > SNAP_MAX_AGE_MS + 2000)
            fail_msg("/metrics still shows %lld ready in snap-0 %d ms after the enqueue", seen,
                     SNAP_MAX_AGE_MS + 2000);
        e2e_pause_ms(100);
    }
    printf("test_ops: an enqueue showed in /metrics %lld ms later (snapshot at most 5 s old)\n",
           e2e_mono_ms() - t1);
    resp_free(&r);
    e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS);
}

static const char *entry_field(const redisReply *entry, const char *field)
{
    const redisReply *fields = entry->element[1];
    for (size_t i = 0; i + 1 < fields->elements; i += 2)
        if (strcmp(fields->element[i]->str, field) == 0) return fields->element[i + 1]->str;
    return NULL;
}

static void test_events_dead_then_replayed(void **state)
{
    (void)state;
    char q[64];
    queue_name(q, sizeof q, "events");
    make_succeeded(q);   /* no event for a success */
    long long id = make_dead(q, "boom: 42");
    settle(q, id, "replay", NULL, "pending");
    long long k = enqueue_max(q, 3);
    settle(q, k, "kill", NULL, "dead");
    assert_int_equal(replay_many(q, e2e_fmt("{\"ids\":[%lld]}", k)), 1);

    redisReply *x = rcmd("XRANGE %s - +", qkey(q, ":events"));
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    if (x->elements != 4) fail_msg("expected 4 events, got %zu", x->elements);
    static const struct {
        const char *event;
        int which;   /* 0: id, 1: k */
        const char *error;
        const char *retry_count;
    } want[] = {
        { "dead", 0, "boom: 42", "1" },
        { "replayed", 0, "boom: 42", "0" },
        { "dead", 1, "killed by operator", "0" },
        { "replayed", 1, "killed by operator", "0" },
    };
    for (size_t i = 0; i < 4; i++) {
        const redisReply *e = x->element[i];
        const char *ev = entry_field(e, "event"), *eid = entry_field(e, "id");
        const char *err = entry_field(e, "error"), *rc = entry_field(e, "retry_count");
        if (ev == NULL || eid == NULL || err == NULL || rc == NULL)
            fail_msg("event %zu lacks event/id/error/retry_count", i);
        assert_string_equal(ev, want[i].event);
        assert_int_equal(strtoll(eid, NULL, 10), want[i].which ? k : id);
        assert_string_equal(err, want[i].error);
        assert_string_equal(rc, want[i].retry_count);
        assert_non_null(entry_field(e, "at"));
    }
    freeReplyObject(x);
}

/* ------------------------------------------------------------------------ */
/* Retention                                                                */
/* ------------------------------------------------------------------------ */

static void test_retention(void **state)
{
    (void)state;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "opsret%ld", (long)getpid());
    if (start_daemon(&g_side, prefix, "--dead-ttl", "1s", "--succeeded-ttl", "1s", NULL) != 0)
        fail_msg("retention daemon did not start");
    const char *q = "ret";
    e2e_response_t r = { 0 };

    http_to(g_side.port, &r, "POST", qpath(q, "/messages"), "{\"payload\":\"d\",\"max_retries\":1}");
    long long dead = e2e_jint(e2e_expect_json(&r, 201), "id");
    http_to(g_side.port, &r, "POST", qpath(q, "/claim"), NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), dead);
    http_to(g_side.port, &r, "POST", message_path(q, dead, "fail"), "{\"error\":\"expire me\"}");
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "dead");

    http_to(g_side.port, &r, "POST", qpath(q, "/messages"), "{\"payload\":\"s\"}");
    long long ok = e2e_jint(e2e_expect_json(&r, 201), "id");
    http_to(g_side.port, &r, "POST", qpath(q, "/claim"), NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), ok);
    http_to(g_side.port, &r, "POST", message_path(q, ok, "succeed"), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "succeeded");

    const char *dkey = qkey_in(prefix, q, e2e_fmt(":m:%lld", dead));
    const char *skey = qkey_in(prefix, q, e2e_fmt(":m:%lld", ok));
    char dk[256], sk[256];
    snprintf(dk, sizeof dk, "%s", dkey);
    snprintf(sk, sizeof sk, "%s", skey);
    long long deadline = e2e_mono_ms() + 5000;
    while (rint_cmd("EXISTS %s %s", dk, sk) > 0) {
        if (e2e_mono_ms() > deadline) fail_msg("retention did not remove both within 5 s");
        e2e_pause_ms(50);
    }
    http_to(g_side.port, &r, "GET", message_path(q, dead, NULL), NULL);
    e2e_expect_problem(&r, 404, "not-found", NULL);
    http_to(g_side.port, &r, "GET", message_path(q, ok, NULL), NULL);
    e2e_expect_problem(&r, 404, "not-found", NULL);

    /* No orphan: only the registry, :seq, :stats, :events and :errors may
     * remain, and :errors must not count the deleted letter any more. */
    char base[256];
    snprintf(base, sizeof base, "%s", qkey_in(prefix, q, ""));
    char cursor[32] = "0";
    size_t nkeys = 0;
    do {
        redisReply *s = rcmd("SCAN %s MATCH %s:* COUNT 1000", cursor, prefix);
        snprintf(cursor, sizeof cursor, "%s", s->element[0]->str);
        for (size_t i = 0; i < s->element[1]->elements; i++) {
            const char *key = s->element[1]->element[i]->str;
            nkeys++;
            if (strcmp(key, e2e_fmt("%s:queues", prefix)) == 0) continue;
            size_t bl = strlen(base);
            if (strncmp(key, base, bl) == 0) {
                const char *suffix = key + bl;
                if (strcmp(suffix, ":seq") == 0 || strcmp(suffix, ":stats") == 0 ||
                    strcmp(suffix, ":series") == 0 ||
                    strcmp(suffix, ":events") == 0)
                    continue;
                if (strcmp(suffix, ":errors") == 0) {
                    if (!rnil("ZSCORE %s %s", key, "expire me"))
                        fail_msg(":errors still counts the expired letter");
                    continue;
                }
                /* A claim's record, for a lost answer (docs/durability.md):
                 * it expires by itself within 15 s. */
                if (strncmp(suffix, ":claim:", 7) == 0) {
                    long long ttl = rint_cmd("PTTL %s", key);
                    if (ttl <= 0 || ttl > 15000)
                        fail_msg("claim record %s: PTTL %lld, expected 1..15000", key, ttl);
                    continue;
                }
            }
            fail_msg("orphan key left after retention: %s", key);
        }
        freeReplyObject(s);
    } while (strcmp(cursor, "0") != 0);
    assert_true(nkeys >= 2);

    char stats_key[300];
    snprintf(stats_key, sizeof stats_key, "%s", qkey_in(prefix, q, ":stats"));
    assert_int_equal(hget_int(stats_key, "expired_dead"), 1);
    assert_int_equal(hget_int(stats_key, "expired_succeeded"), 1);

    http_to(g_side.port, &r, "GET", qpath(q, "/stats"), NULL);
    rd_json_t *st = e2e_expect_json(&r, 200);
    rd_json_t *c = e2e_jget(st, "counts");
    assert_int_equal(e2e_jint(c, "dead") + e2e_jint(c, "succeeded") + e2e_jint(c, "pending") +
                         e2e_jint(c, "processing"),
                     0);
    assert_int_equal(e2e_jint(st, "dead_last_24h"), 0);
    assert_int_equal(rd_json_array_size(e2e_jget(st, "top_errors")), 0);
    resp_free(&r);
    e2e_conn_close(&g_conn);

    int status = e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS);
    assert_int_equal(status, 0);
}

/* ------------------------------------------------------------------------ */
/* GET /queues and shutdown                                                 */
/* ------------------------------------------------------------------------ */

static void test_queues_lists_every_queue(void **state)
{
    (void)state;
    char q[64];
    queue_name(q, sizeof q, "list");
    make_dead(q, "x");
    make_succeeded(q);
    enqueue_max(q, 3);
    enqueue_max(q, 3);
    claim_one(q, 0, NULL, 0);

    e2e_response_t r = { 0 };
    http(&r, "GET", "/queues", NULL);
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "queues");
    assert_true(rd_json_is_array(list));
    for (size_t u = 0; u < g_nused; u++) {
        rd_json_t *found = NULL;
        for (size_t i = 0; i < rd_json_array_size(list); i++)
            if (strcmp(e2e_jstr(rd_json_array_at(list, i), "name"), g_used[u]) == 0)
                found = rd_json_array_at(list, i);
        if (found == NULL) fail_msg("GET /queues does not list \"%s\": %s", g_used[u], r.body);
        rd_json_t *counts = e2e_jget(found, "counts");
        /* the same numbers as the queue's stats */
        e2e_response_t tmp = { 0 };
        e2e_conn_t c2;
        if (e2e_conn_open(&c2, g_daemon.port) != 0) fail_msg("connect");
        int rc = e2e_request(&c2, "GET", qpath(g_used[u], "/stats"), NULL, NULL, 0, &tmp);
        e2e_conn_close(&c2);
        if (rc != 0) fail_msg("stats of %s", g_used[u]);
        track(&tmp);
        rd_json_t *sc = e2e_jget(e2e_expect_json(&tmp, 200), "counts");
        static const char *const states[] = { "pending", "processing", "succeeded", "dead" };
        for (size_t k = 0; k < 4; k++)
            if (e2e_jint(counts, states[k]) != e2e_jint(sc, states[k]))
                fail_msg("%s: /queues %s=%lld, stats %lld", g_used[u], states[k],
                         e2e_jint(counts, states[k]), e2e_jint(sc, states[k]));
        resp_free(&tmp);
        if (strcmp(g_used[u], q) == 0) {
            assert_int_equal(e2e_jint(counts, "pending"), 1);
            assert_int_equal(e2e_jint(counts, "processing"), 1);
            assert_int_equal(e2e_jint(counts, "succeeded"), 1);
            assert_int_equal(e2e_jint(counts, "dead"), 1);
        }
    }
    /* no queue of the retention daemon's prefix */
    for (size_t i = 0; i < rd_json_array_size(list); i++)
        assert_string_not_equal(e2e_jstr(rd_json_array_at(list, i), "name"), "ret");
    resp_free(&r);
}

static void test_sigterm_exits_0(void **state)
{
    (void)state;
    e2e_conn_close(&g_conn);
    int status = e2e_daemon_stop(&g_daemon, SIGTERM, E2E_STOP_TIMEOUT_MS);
    if (status != 0)
        fail_msg("retryd after SIGTERM: %s %d", status < 0 ? "did not exit in 5 s;" : "exit status",
                 status);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, test_setup, test_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_kill),
        T(test_delete),
        T(test_replay_batch),
        T(test_bulk_replay_and_claim_latency),
        T(test_replay_all_with_orphans),
        T(test_replay_stops_when_client_leaves),
        T(test_replay_all_half_closed_client),
        T(test_replies_bounded_in_bytes),
        T(test_stats_after_mixed_workload),
        T(test_top_errors_exact_long_string),
        T(test_top_errors_valid_utf8),
        T(test_fail_with_many_rules_and_huge_error),
        T(test_long_error_kept_to_64_kib),
        T(test_metrics_endpoint),
        T(test_metrics_scrapes_share_one_snapshot),
        T(test_events_dead_then_replayed),
        T(test_retention),
        T(test_queues_lists_every_queue),
        T(test_sigterm_exits_0),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
