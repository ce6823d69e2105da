/* e2e_common.h - what the test_e2e_*.c suites share: end-to-end tests of the
 * real build/retryd, forked on a free port against a throwaway redis-server,
 * spoken to over HTTP/1.1 sockets. Each assertion is about what a client sees
 * (status, Content-Type, headers, body fields, docs/reference.md "Messages",
 * "Leases", "Daemon", README.md "HTTP API"), plus what Redis holds where
 * docs/design.md "Where the state lives" names a key. Here: the group's
 * state, daemon start and the group and per-test setup, requests and what
 * they answer, and the helpers several suites use (the generic ones are in
 * e2e_support.h, shared with the other HTTP suites).
 *
 * Needs RETRYD_TEST_REDIS_PORT and RETRYD_BIN (scripts/test.sh sets both).
 * Each suite's group starts one daemon with a prefix of its own ("e2e<pid>");
 * tests that need another (a small --max-body, no Redis, a shutdown) start it
 * themselves and a per-test teardown kills it if the test failed halfway.
 * Every test uses queues of its own, so tests do not depend on each other.
 * A suite defines E2E_SUITE (its name, for messages) and includes this first:
 * it includes cmocka.h itself. */
#ifndef RETRYD_E2E_COMMON_H
#define RETRYD_E2E_COMMON_H

#ifndef E2E_SUITE
#error "a suite defines E2E_SUITE, its name, before it includes e2e_common.h"
#endif

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>

#include <hiredis/hiredis.h>

#include "e2e_support.h"
#include "retryd/api.h"
#include "retryd/keys.h"

enum {
    READY_TIMEOUT_MS = 10000,
    TICK_MS = 50,
    DEFAULT_LEASE_S = 30,
};

static const char *g_bin;
static int g_redis_port;
static char g_prefix[64];
static e2e_daemon_t g_daemon;     /* the group's daemon */
static e2e_daemon_t g_side;       /* a test's own daemon, if any */
static e2e_conn_t g_conn = { .fd = -1 };  /* keep-alive connection to g_daemon */
static redisContext *g_redis;
static bool g_paused;             /* CLIENT PAUSE in force */
static pid_t g_side_redis;        /* a redis-server a test started, if any */
static bool g_stop_failed;        /* the group's daemon did not exit 0 on SIGTERM */

/* ------------------------------------------------------------------------ */
/* Small strings                                                            */
/* ------------------------------------------------------------------------ */

/* Keeps a string past e2e_fmt's ring: SET(array, e2e_fmt(...)). */
#define SET(dst, src) snprintf((dst), sizeof(dst), "%s", (src))

/* ------------------------------------------------------------------------ */
/* Daemons                                                                  */
/* ------------------------------------------------------------------------ */

/* Starts retryd against redis_port with prefix, TICK_MS and log level warn,
 * then extra flags (NULL-terminated; later flags override earlier ones).
 * Waits for /healthz 200, and for /readyz 200 when want_ready. */
static inline int start_daemon(e2e_daemon_t *d, int redis_port, const char *prefix, bool want_ready,
                        ...)
{
    e2e_flags_t f;
    va_list ap;
    va_start(ap, want_ready);
    e2e_flags_v(&f, "--redis", e2e_redis_url(redis_port), prefix, TICK_MS, "warn", ap);
    va_end(ap);
    return e2e_daemon_start(d, g_bin, f.argv, true, want_ready, READY_TIMEOUT_MS, E2E_SUITE);
}

static inline int group_setup(void **state)
{
    (void)state;
    rd_alloc_init();
    if (e2e_suite_env(E2E_SUITE, 10, &g_bin, &g_redis_port, &g_redis) != 0) return -1;
    g_conn.fd = -1;
    snprintf(g_prefix, sizeof g_prefix, "e2e%ld", (long)getpid());
    return start_daemon(&g_daemon, g_redis_port, g_prefix, true, NULL);
}

/* The group's daemon must stop cleanly on SIGTERM: exit 0 within 5 s.
 * cmocka 1.1 prints a failed group teardown but still exits 0 and counts no
 * failed test, so main turns g_stop_failed into the exit status. */
static inline int group_teardown(void **state)
{
    (void)state;
    e2e_conn_close(&g_conn);
    int status = e2e_daemon_stop(&g_daemon, SIGTERM, E2E_STOP_TIMEOUT_MS);
    if (g_redis) redisFree(g_redis);
    if (status != 0) {
        fprintf(stderr, E2E_SUITE ": retryd after SIGTERM: %s %d\n",
                status < 0 ? "did not exit within 5 s, killed;" : "exit status", status);
        g_stop_failed = true;
        return -1;
    }
    return 0;
}

/* Each test starts on a fresh connection; a failed one leaves no daemon or
 * pause behind. */
static inline int test_setup(void **state)
{
    (void)state;
    e2e_conn_close(&g_conn);
    return 0;
}

static inline int test_teardown(void **state)
{
    (void)state;
    e2e_conn_close(&g_conn);
    if (g_paused) {
        freeReplyObject(redisCommand(g_redis, "CLIENT UNPAUSE"));
        g_paused = false;
    }
    if (g_side.pid > 0) e2e_daemon_stop(&g_side, SIGKILL, E2E_STOP_TIMEOUT_MS);
    if (g_side_redis > 0) {
        kill(g_side_redis, SIGKILL);
        waitpid(g_side_redis, NULL, 0);
        g_side_redis = 0;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Requests and what they answer                                            */
/* ------------------------------------------------------------------------ */

/* One request to port on the shared keep-alive connection (reopened after
 * the server closed it); fails the test unless a complete response came. */
static inline void http_to(int port, e2e_response_t *r, const char *method, const char *path,
                    const char *body, size_t body_len)
{
    e2e_http_on(&g_conn, port, r, method, path, NULL, body, body_len);
}

static inline void http(e2e_response_t *r, const char *method, const char *path, const char *body)
{
    http_to(g_daemon.port, r, method, path, body, body ? strlen(body) : 0);
}

/* A 422 validation-failed with exactly n entries in errors. */
static inline rd_json_t *expect_invalid(const e2e_response_t *r, const char *instance, size_t n)
{
    rd_json_t *p = e2e_expect_problem(r, 422, "validation-failed", instance);
    rd_json_t *errors = e2e_jget(p, "errors");
    assert_true(rd_json_is_array(errors));
    if (rd_json_array_size(errors) != n)
        fail_msg("expected %zu errors, got %zu: %s", n, rd_json_array_size(errors), r->body);
    return errors;
}

/* The errors entry for field has code (and message, when not NULL). */
static inline void expect_field_error(const rd_json_t *errors, const char *field, const char *code,
                               const char *message)
{
    for (size_t i = 0; i < rd_json_array_size(errors); i++) {
        rd_json_t *e = rd_json_array_at(errors, i);
        if (strcmp(e2e_jstr(e, "field"), field) != 0) continue;
        assert_string_equal(e2e_jstr(e, "code"), code);
        if (message) assert_string_equal(e2e_jstr(e, "message"), message);
        else assert_true(e2e_jstr(e, "message")[0] != '\0');
        return;
    }
    fail_msg("no error for field \"%s\"", field);
}

/* The fields every message has, with the values given (payload unchecked). */
static inline void expect_message(const rd_json_t *m, long long id, const char *queue,
                           const char *status, long long retry_count, long long max_retries)
{
    assert_int_equal(e2e_jint(m, "id"), id);
    assert_string_equal(e2e_jstr(m, "queue"), queue);
    e2e_jstr(m, "payload");
    assert_string_equal(e2e_jstr(m, "status"), status);
    assert_int_equal(e2e_jint(m, "retry_count"), retry_count);
    assert_int_equal(e2e_jint(m, "max_retries"), max_retries);
    e2e_jget(m, "retry_after");
    e2e_jget(m, "last_error");
    e2e_jget(m, "lease_expires_at");
    assert_true(e2e_jtime(m, "updated_at") >= e2e_jtime(m, "created_at"));
}

static inline const char *messages_path(const char *q)
{
    return e2e_fmt("/queues/%s/messages", q);
}

static inline const char *message_path(const char *q, long long id, const char *verb)
{
    return verb ? e2e_fmt("/queues/%s/messages/%lld/%s", q, id, verb)
                : e2e_fmt("/queues/%s/messages/%lld", q, id);
}

/* Enqueues body (JSON) to q; asserts 201 and returns the id. */
static inline long long enqueue(const char *q, const char *body)
{
    e2e_response_t r = { 0 };
    http(&r, "POST", messages_path(q), body);
    long long id = e2e_jint(e2e_expect_json(&r, 201), "id");
    e2e_response_free(&r);
    return id;
}

/* Claims one message of q: returns its id and copies its token, or 0 on 204. */
static inline long long claim_one(const char *q, int lease_seconds, char *token, size_t cap)
{
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q),
         e2e_fmt("{\"lease_seconds\":%d}", lease_seconds));
    if (r.status == 204) {
        e2e_response_free(&r);
        return 0;
    }
    rd_json_t *m = e2e_expect_json(&r, 200);
    long long id = e2e_jint(m, "id");
    assert_string_equal(e2e_jstr(m, "status"), "processing");
    if (token) snprintf(token, cap, "%s", e2e_jstr(m, "lease_token"));
    e2e_response_free(&r);
    return id;
}

/* A leased message as a claim answers it (m) is the message GET shows right
 * after: the same JSON, every field, but for the lease_token only a claim
 * shows (claim and settle_claim answer it by position, get by name;
 * leased_reply in lua/02_record.lua). */
static inline void expect_shown_as_get(const char *q, const rd_json_t *m)
{
    char *claimed = rd_json_print(m, NULL);
    char token[256];
    snprintf(token, sizeof token, "\"lease_token\":\"%s\",", e2e_jstr(m, "lease_token"));
    char *at = strstr(claimed, token);
    if (at == NULL) fail_msg("no %s in the claim's %s", token, claimed);
    memmove(at, at + strlen(token), strlen(at + strlen(token)) + 1);
    e2e_response_t r = { 0 };
    http(&r, "GET", message_path(q, e2e_jint(m, "id"), NULL), NULL);
    char *got = rd_json_print(e2e_expect_json(&r, 200), NULL);
    if (strcmp(claimed, got) != 0) fail_msg("claim answered\n%s\nGET answers\n%s", claimed, got);
    rd_free(claimed);
    rd_free(got);
    e2e_response_free(&r);
}

/* GET /metrics into r until its text has line: the per-queue series come
 * from a snapshot at most RD_METRICS_SNAPSHOT_MS old (docs/design.md "Listing"), so
 * a change shows within that (bounded: 2 s more, then the test fails). */
static inline void metrics_with(e2e_response_t *r, const char *line)
{
    char want[512];
    snprintf(want, sizeof want, "%s", line);
    long long t0 = e2e_mono_ms();
    for (;;) {
        http(r, "GET", "/metrics", NULL);
        assert_int_equal(r->status, 200);
        if (strstr(r->body, want)) return;
        if (e2e_mono_ms() - t0 > RD_METRICS_SNAPSHOT_MS + 2000)
            fail_msg("/metrics lacks \"%s\" after %d ms", want, RD_METRICS_SNAPSHOT_MS + 2000);
        e2e_pause_ms(50);
    }
}

/* ------------------------------------------------------------------------ */
/* Claim                                                                    */
/* ------------------------------------------------------------------------ */

/* lease_expires_at is the claim's own time (updated_at) + lease_seconds. */
static inline void expect_lease(const rd_json_t *m, long long lease_s)
{
    long long claimed_at = e2e_jtime(m, "updated_at");
    assert_int_equal(e2e_jtime(m, "lease_expires_at") - claimed_at, lease_s * 1000);
    long long now = e2e_wall_ms();
    assert_true(claimed_at > now - 5000 && claimed_at < now + 2000);
    assert_true(e2e_jstr(m, "lease_token")[0] != '\0');
}

/* ------------------------------------------------------------------------ */
/* Settling: succeed, fail, replay, extend                                  */
/* ------------------------------------------------------------------------ */

/* Kills a fresh message of q by one failure with error; returns its id. */
static inline long long make_dead(const char *q, const char *payload, const char *error)
{
    long long id = enqueue(q, e2e_fmt("{\"payload\":\"%s\",\"max_retries\":2}", payload));
    assert_int_equal(claim_one(q, 30, NULL, 0), id);
    e2e_response_t r = { 0 };
    http(&r, "POST", message_path(q, id, "fail"),
         e2e_fmt("{\"error\":\"%s\",\"retryable\":false}", error));
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    return id;
}

/* ------------------------------------------------------------------------ */
/* Text is UTF-8 (docs/reference.md "Text")                                           */
/* ------------------------------------------------------------------------ */

/* Strictly well-formed UTF-8 (Unicode's table 3-7, byte ranges spelled out
 * here rather than decoded, so it does not share retryd's logic). */
static inline bool strict_utf8(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        unsigned char b = s[i];
        size_t n;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b <= 0x7F) { i++; continue; }
        else if (b >= 0xC2 && b <= 0xDF) n = 2;
        else if (b == 0xE0) { n = 3; lo = 0xA0; }
        else if (b == 0xED) { n = 3; hi = 0x9F; }
        else if (b >= 0xE1 && b <= 0xEF) n = 3;
        else if (b == 0xF0) { n = 4; lo = 0x90; }
        else if (b == 0xF4) { n = 4; hi = 0x8F; }
        else if (b >= 0xF1 && b <= 0xF3) n = 4;
        else return false;
        if (i + n > len || s[i + 1] < lo || s[i + 1] > hi) return false;
        for (size_t k = 2; k < n; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return false;
        i += n;
    }
    return true;
}

/* A 200 whose body is strict UTF-8 JSON; returns the parsed document. */
static inline rd_json_t *expect_strict_json(const e2e_response_t *r)
{
    if (!strict_utf8(r->body, r->body_len))
        fail_msg("the answer is not valid UTF-8: %.300s", r->body);
    return e2e_expect_json(r, 200);
}

/* ------------------------------------------------------------------------ */
/* Settle and claim in one call (docs/reference.md "Settle and claim")                                   */
/* ------------------------------------------------------------------------ */

/* The settled list of a 200 {settled, messages}: n items, item i with
 * ids[i] and statuses[i], in request order. Returns messages. */
static inline rd_json_t *expect_settled(const e2e_response_t *r, size_t n, const long long *ids,
                                 const char *const *statuses)
{
    rd_json_t *doc = expect_strict_json(r);
    assert_true(e2e_media_type_is(r->content_type, "application/json"));
    rd_json_t *settled = e2e_jget(doc, "settled");
    assert_true(rd_json_is_array(settled));
    if (rd_json_array_size(settled) != n)
        fail_msg("expected %zu settled, got %s", n, r->body);
    for (size_t i = 0; i < n; i++) {
        rd_json_t *item = rd_json_array_at(settled, i);
        assert_int_equal(e2e_jint(item, "id"), ids[i]);
        assert_string_equal(e2e_jstr(item, "status"), statuses[i]);
    }
    rd_json_t *messages = e2e_jget(doc, "messages");
    assert_true(rd_json_is_array(messages));
    return messages;
}

static inline bool redis_has_blocked_fcall(long long after_id);

/* ------------------------------------------------------------------------ */
/* Concurrency                                                              */
/* ------------------------------------------------------------------------ */

typedef struct worker {
    pthread_t thread;
    const char *queue;
    atomic_int *claims;           /* per id, shared */
    int done;                     /* messages this worker settled */
    char error[256];              /* first problem seen, "" when none */
} worker_t;

/* ------------------------------------------------------------------------ */
/* Redis faults                                                             */
/* ------------------------------------------------------------------------ */

/* True when a client newer than after_id is blocked in an FCALL. */
static inline bool redis_has_blocked_fcall(long long after_id)
{
    redisReply *x = e2e_rcmd(g_redis, "CLIENT LIST");
    bool found = false;
    for (char *line = x->str; line && *line && !found;) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = '\0';
        long long id = strtoll(line + 3, NULL, 10);
        const char *flags = strstr(line, " flags=");
        if (id > after_id && flags && strchr(flags + 7, 'b') &&
            strchr(flags + 7, 'b') < strchr(flags + 7, ' ') && strstr(line, " cmd=fcall "))
            found = true;
        line = eol ? eol + 1 : NULL;
    }
    freeReplyObject(x);
    return found;
}

/* ------------------------------------------------------------------------ */
/* Memory a client can pin (issue 19 items 2 and 3)                         */
/* ------------------------------------------------------------------------ */

#define T(fn) cmocka_unit_test_setup_teardown(fn, test_setup, test_teardown)

#endif
