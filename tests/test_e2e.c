/* test_e2e.c - end-to-end tests: the real build/retryd, forked on a free port
 * against a throwaway redis-server, spoken to over HTTP/1.1 sockets. Each
 * assertion is about what a client sees (status, Content-Type, headers, body
 * fields, docs/reference.md "Messages", "Leases", "Daemon", README.md "HTTP API"), plus what Redis holds where docs/design.md "Where the state lives" names a key.
 *
 * Needs RETRYD_TEST_REDIS_PORT and RETRYD_BIN (scripts/test.sh sets both).
 * The group starts one daemon with a prefix of its own ("e2e<pid>"); tests
 * that need another (a small --max-body, no Redis, a shutdown) start it
 * themselves and a per-test teardown kills it if the test failed halfway.
 * Every test uses queues of its own, so tests do not depend on each other. */

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
static int start_daemon(e2e_daemon_t *d, int redis_port, const char *prefix, bool want_ready,
                        ...)
{
    e2e_flags_t f;
    va_list ap;
    va_start(ap, want_ready);
    e2e_flags_v(&f, "--redis", e2e_redis_url(redis_port), prefix, TICK_MS, "warn", ap);
    va_end(ap);
    return e2e_daemon_start(d, g_bin, f.argv, true, want_ready, READY_TIMEOUT_MS, "test_e2e");
}

static int group_setup(void **state)
{
    (void)state;
    rd_alloc_init();
    if (e2e_suite_env("test_e2e", 10, &g_bin, &g_redis_port, &g_redis) != 0) return -1;
    g_conn.fd = -1;
    snprintf(g_prefix, sizeof g_prefix, "e2e%ld", (long)getpid());
    return start_daemon(&g_daemon, g_redis_port, g_prefix, true, NULL);
}

/* The group's daemon must stop cleanly on SIGTERM: exit 0 within 5 s.
 * cmocka 1.1 prints a failed group teardown but still exits 0 and counts no
 * failed test, so main turns g_stop_failed into the exit status. */
static int group_teardown(void **state)
{
    (void)state;
    e2e_conn_close(&g_conn);
    int status = e2e_daemon_stop(&g_daemon, SIGTERM, E2E_STOP_TIMEOUT_MS);
    if (g_redis) redisFree(g_redis);
    if (status != 0) {
        fprintf(stderr, "test_e2e: retryd after SIGTERM: %s %d\n",
                status < 0 ? "did not exit within 5 s, killed;" : "exit status", status);
        g_stop_failed = true;
        return -1;
    }
    return 0;
}

/* Each test starts on a fresh connection; a failed one leaves no daemon or
 * pause behind. */
static int test_setup(void **state)
{
    (void)state;
    e2e_conn_close(&g_conn);
    return 0;
}

static int test_teardown(void **state)
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
static void http_to(int port, e2e_response_t *r, const char *method, const char *path,
                    const char *body, size_t body_len)
{
    e2e_http_on(&g_conn, port, r, method, path, NULL, body, body_len);
}

static void http(e2e_response_t *r, const char *method, const char *path, const char *body)
{
    http_to(g_daemon.port, r, method, path, body, body ? strlen(body) : 0);
}

/* A 422 validation-failed with exactly n entries in errors. */
static rd_json_t *expect_invalid(const e2e_response_t *r, const char *instance, size_t n)
{
    rd_json_t *p = e2e_expect_problem(r, 422, "validation-failed", instance);
    rd_json_t *errors = e2e_jget(p, "errors");
    assert_true(rd_json_is_array(errors));
    if (rd_json_array_size(errors) != n)
        fail_msg("expected %zu errors, got %zu: %s", n, rd_json_array_size(errors), r->body);
    return errors;
}

/* The errors entry for field has code (and message, when not NULL). */
static void expect_field_error(const rd_json_t *errors, const char *field, const char *code,
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
static void expect_message(const rd_json_t *m, long long id, const char *queue,
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

static const char *messages_path(const char *q)
{
    return e2e_fmt("/queues/%s/messages", q);
}

static const char *message_path(const char *q, long long id, const char *verb)
{
    return verb ? e2e_fmt("/queues/%s/messages/%lld/%s", q, id, verb)
                : e2e_fmt("/queues/%s/messages/%lld", q, id);
}

/* Enqueues body (JSON) to q; asserts 201 and returns the id. */
static long long enqueue(const char *q, const char *body)
{
    e2e_response_t r = { 0 };
    http(&r, "POST", messages_path(q), body);
    long long id = e2e_jint(e2e_expect_json(&r, 201), "id");
    e2e_response_free(&r);
    return id;
}

/* Claims one message of q: returns its id and copies its token, or 0 on 204. */
static long long claim_one(const char *q, int lease_seconds, char *token, size_t cap)
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

/* ------------------------------------------------------------------------ */
/* Enqueue and validation                                                   */
/* ------------------------------------------------------------------------ */

static void test_enqueue_returns_message_and_location(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "enq");
    e2e_response_t r = { 0 };

    long long before = e2e_wall_ms();
    http(&r, "POST", messages_path(q), "{\"payload\":\"hello\"}");
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_string_equal(r.location, e2e_fmt("/queues/%s/messages/1", q));
    expect_message(m, 1, q, "pending", 0, 3);
    assert_string_equal(e2e_jstr(m, "payload"), "hello");
    e2e_jnull(m, "retry_after");
    e2e_jnull(m, "last_error");
    e2e_jnull(m, "lease_expires_at");
    long long created = e2e_jtime(m, "created_at");
    assert_int_equal(e2e_jtime(m, "updated_at"), created);
    /* Redis runs on this host, so its clock is ours (give or take 2 s). */
    assert_true(created >= before - 2000 && created <= e2e_wall_ms() + 2000);

    http(&r, "POST", messages_path(q), "{\"payload\":\"second\",\"max_retries\":5}");
    m = e2e_expect_json(&r, 201);
    assert_string_equal(r.location, e2e_fmt("/queues/%s/messages/2", q));
    expect_message(m, 2, q, "pending", 0, 5);

    /* null means "default". */
    http(&r, "POST", messages_path(q), "{\"payload\":\"third\",\"max_retries\":null}");
    expect_message(e2e_expect_json(&r, 201), 3, q, "pending", 0, 3);
    e2e_response_free(&r);
}

static void expect_payload_round_trip(const char *q, const char *payload)
{
    size_t len;
    char *body = e2e_json_with_string("payload", payload, &len);
    e2e_response_t r = { 0 };
    http_to(g_daemon.port, &r, "POST", messages_path(q), body, len);
    rd_free(body);
    rd_json_t *m = e2e_expect_json(&r, 201);
    long long id = e2e_jint(m, "id");
    const char *got = e2e_jstr(m, "payload");
    assert_int_equal(strlen(got), strlen(payload));
    assert_memory_equal(got, payload, strlen(payload));

    http(&r, "GET", message_path(q, id, NULL), NULL);
    got = e2e_jstr(e2e_expect_json(&r, 200), "payload");
    assert_int_equal(strlen(got), strlen(payload));
    assert_memory_equal(got, payload, strlen(payload));
    e2e_response_free(&r);
}

static void test_payload_is_returned_byte_for_byte(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "bytes");
    expect_payload_round_trip(q, "h\xC3\xA9llo w\xC3\xB6rld \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC "
                                 "\xF0\x9F\x8E\x89");
    expect_payload_round_trip(q, "say \"hi\" \\ back\\slash / 'single' \\u0041");
    expect_payload_round_trip(q, "line1\nline2\r\n\ttab\x01\x1f end");
    expect_payload_round_trip(q, "{\"looks\":[\"like\",\"json\"]}");
    expect_payload_round_trip(q, "");

    enum { BIG = 100 * 1024 };
    static const char pattern[] = "0123456789abcdef\"\\\n\t{}[]:, \xC3\xA9";
    char *big = malloc(BIG + 1);
    for (size_t i = 0; i < BIG; i++) big[i] = pattern[i % (sizeof pattern - 1)];
    big[BIG] = '\0';
    expect_payload_round_trip(q, big);
    free(big);

    /* U+0000 may be refused, but is never cut short (docs/reference.md "Text"). */
    e2e_response_t r = { 0 };
    http(&r, "POST", messages_path(q), "{\"payload\":\"a\\u0000b\"}");
    if (r.status == 201) assert_non_null(strstr(r.body, "\"payload\":\"a\\u0000b\""));
    else expect_field_error(expect_invalid(&r, NULL, 1), "payload", "invalid", NULL);
    e2e_response_free(&r);
}

static void test_enqueue_validation(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "valid");
    char path[128];
    snprintf(path, sizeof path, "%s", messages_path(q));
    const char *range = "max_retries must be between 1 and 10.";
    e2e_response_t r = { 0 };

    http(&r, "POST", path, "{\"max_retries\":3}");
    expect_field_error(expect_invalid(&r, path, 1), "payload", "required", NULL);

    http(&r, "POST", path, "{\"payload\":5}");
    expect_field_error(expect_invalid(&r, path, 1), "payload", "invalid", NULL);
    http(&r, "POST", path, "{\"payload\":{\"a\":1}}");
    expect_field_error(expect_invalid(&r, path, 1), "payload", "invalid", NULL);

    const char *bad_retries[] = { "0", "11", "\"3\"", "-1", "2.5", "true" };
    for (size_t i = 0; i < sizeof bad_retries / sizeof bad_retries[0]; i++) {
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"x\",\"max_retries\":%s}", bad_retries[i]));
        expect_field_error(expect_invalid(&r, path, 1), "max_retries", "invalid", range);
    }

    const char *bad_delays[] = { "-1", "2592001", "1.5", "\"10\"" };
    for (size_t i = 0; i < sizeof bad_delays / sizeof bad_delays[0]; i++) {
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"x\",\"delay_seconds\":%s}", bad_delays[i]));
        expect_field_error(expect_invalid(&r, path, 1), "delay_seconds", "invalid", NULL);
    }

    http(&r, "POST", path, "{\"payload\":7,\"max_retries\":0}");
    rd_json_t *errors = expect_invalid(&r, path, 2);
    expect_field_error(errors, "payload", "invalid", NULL);
    expect_field_error(errors, "max_retries", "invalid", range);

    /* Nothing above created a message: the first real one gets id 1. */
    assert_int_equal(enqueue(q, "{\"payload\":\"ok\",\"max_retries\":10}"), 1);
    assert_int_equal(enqueue(q, "{\"payload\":\"ok\",\"max_retries\":1}"), 2);
    e2e_response_free(&r);
}

static void test_malformed_bodies_are_400(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "malformed");
    char path[1024];
    SET(path, messages_path(q));
    const char *bodies[] = { "{\"payload\":", "[\"payload\"]", "", "\"payload\"", "42",
                             "{\"payload\":\"x\"} trailing", "{payload:\"x\"}" };
    e2e_response_t r = { 0 };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        http(&r, "POST", path, bodies[i]);
        e2e_expect_problem(&r, 400, "malformed-request", path);
    }
    /* A POST without any body at all is the same as an empty one. */
    http(&r, "POST", path, NULL);
    e2e_expect_problem(&r, 400, "malformed-request", path);
    assert_int_equal(enqueue(q, "{\"payload\":\"ok\"}"), 1);
    e2e_response_free(&r);
}

static void test_queue_name_rules(void **state)
{
    (void)state;
    e2e_response_t r = { 0 };
    char name[300];
    memset(name, 'n', 256);
    name[256] = '\0';
    char path[1024];
    SET(path, messages_path(name));
    http(&r, "POST", path, "{\"payload\":\"x\"}");
    char instance[257];   /* a problem's instance is the path's first 256 bytes */
    snprintf(instance, sizeof instance, "%.256s", path);
    expect_field_error(expect_invalid(&r, instance, 1), "queue", "invalid", NULL);

    /* 255 bytes is still a name (and it is free: its first id is 1). */
    char q[64];
    e2e_queue_name(q, sizeof q, "long");
    memset(name, 'n', 255);
    memcpy(name, q, strlen(q));
    name[255] = '\0';
    assert_int_equal(enqueue(name, "{\"payload\":\"x\"}"), 1);

    const char *bad[] = { "x%00y", "%1F", "a%0Ab", "%7F", "%C3%28", "%FF", "%ED%A0%80" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        SET(path, messages_path(bad[i]));
        http(&r, "POST", path, "{\"payload\":\"x\"}");
        expect_field_error(expect_invalid(&r, path, 1), "queue", "invalid", NULL);
        http(&r, "GET", message_path(bad[i], 1, NULL), NULL);
        expect_field_error(expect_invalid(&r, NULL, 1), "queue", "invalid", NULL);
    }
    e2e_response_free(&r);
}

static void test_odd_queue_names_are_distinct(void **state)
{
    (void)state;
    char plain[64], raw[160], decoded[160];
    e2e_queue_name(plain, sizeof plain, "a");
    /* Space, colon, braces, a percent sign and U+00E9 in one segment. */
    snprintf(raw, sizeof raw, "%s%%20:b{c}%%25%%C3%%A9", plain);
    snprintf(decoded, sizeof decoded, "%s :b{c}%%\xC3\xA9", plain);
    e2e_response_t r = { 0 };

    http(&r, "POST", messages_path(plain), "{\"payload\":\"plain\"}");
    expect_message(e2e_expect_json(&r, 201), 1, plain, "pending", 0, 3);
    http(&r, "POST", messages_path(raw), "{\"payload\":\"odd\"}");
    rd_json_t *m = e2e_expect_json(&r, 201);
    expect_message(m, 1, decoded, "pending", 0, 3);
    assert_string_equal(r.location, e2e_fmt("/queues/%s/messages/1", raw));

    http(&r, "GET", message_path(plain, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "plain");
    http(&r, "GET", message_path(raw, 1, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "payload"), "odd");
    assert_string_equal(e2e_jstr(m, "queue"), decoded);
    /* Each queue has its one message and no other. */
    http(&r, "GET", message_path(raw, 2, NULL), NULL);
    e2e_expect_problem(&r, 404, "not-found", NULL);

    /* "x:" and "x%3A" would share keys if '%' were not escaped too. */
    char colon[96], percent[96];
    snprintf(colon, sizeof colon, "%s%%3A", plain);      /* decodes to "<plain>:" */
    snprintf(percent, sizeof percent, "%s%%253A", plain); /* decodes to "<plain>%3A" */
    http(&r, "POST", messages_path(colon), "{\"payload\":\"colon\"}");
    expect_message(e2e_expect_json(&r, 201), 1, e2e_fmt("%s:", plain), "pending", 0, 3);
    http(&r, "POST", messages_path(percent), "{\"payload\":\"percent\"}");
    expect_message(e2e_expect_json(&r, 201), 1, e2e_fmt("%s%%3A", plain), "pending", 0, 3);
    http(&r, "GET", message_path(colon, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "colon");
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Reading, routing, limits                                                 */
/* ------------------------------------------------------------------------ */

static void test_get_and_not_found(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "get");
    e2e_response_t r = { 0 };
    http(&r, "POST", messages_path(q), "{\"payload\":\"p\",\"max_retries\":4}");
    char created[32];
    snprintf(created, sizeof created, "%s", e2e_jstr(e2e_expect_json(&r, 201), "created_at"));

    char path[1024];
    SET(path, message_path(q, 1, NULL));
    http(&r, "GET", path, NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "pending", 0, 4);
    assert_string_equal(e2e_jstr(m, "payload"), "p");
    assert_string_equal(e2e_jstr(m, "created_at"), created);

    SET(path, message_path(q, 999, NULL));
    http(&r, "GET", path, NULL);
    e2e_expect_problem(&r, 404, "not-found", path);
    SET(path, e2e_fmt("/queues/%s/messages/abc", q));
    http(&r, "GET", path, NULL);
    e2e_expect_problem(&r, 404, "not-found", path);
    SET(path, e2e_fmt("/queues/%s/messages/0", q));
    http(&r, "GET", path, NULL);
    e2e_expect_problem(&r, 404, "not-found", path);
    SET(path, message_path(q, 999, "succeed"));
    http(&r, "POST", path, "{}");
    e2e_expect_problem(&r, 404, "not-found", path);

    http(&r, "GET", "/nope", NULL);
    e2e_expect_problem(&r, 404, "not-found", "/nope");
    SET(path, e2e_fmt("/queues/%s/bogus", q));
    http(&r, "GET", path, NULL);
    e2e_expect_problem(&r, 404, "not-found", path);
    e2e_response_free(&r);
}

static void test_wrong_method_is_405_with_allow(void **state)
{
    (void)state;
    e2e_response_t r = { 0 };
    http(&r, "DELETE", "/queues/q/messages", NULL);
    e2e_expect_problem(&r, 405, "method-not-allowed", "/queues/q/messages");
    if (!e2e_list_has(r.allow, "GET") || !e2e_list_has(r.allow, "POST"))
        fail_msg("Allow \"%s\" must list GET and POST", r.allow);

    http(&r, "GET", "/queues/q/claim", NULL);
    e2e_expect_problem(&r, 405, "method-not-allowed", "/queues/q/claim");
    assert_true(e2e_list_has(r.allow, "POST"));
    e2e_response_free(&r);
}

/* The OpenAPI document of docs/ is what GET /openapi.json serves, byte for
 * byte, without a token when auth is on; and it has one operation for every
 * row of the route table and no other (a route added without its
 * description fails here). */
static const char *method_key(rd_http_method_t m)
{
    switch (m) {
    case RD_HTTP_GET: return "get";
    case RD_HTTP_POST: return "post";
    case RD_HTTP_PUT: return "put";
    case RD_HTTP_PATCH: return "patch";
    case RD_HTTP_DELETE: return "delete";
    default: return "other";
    }
}

static char *read_file_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *len = n;
    return buf;
}

static void test_openapi_document_is_served(void **state)
{
    (void)state;
    size_t file_len = 0;
    char *file = read_file_all("docs/openapi.json", &file_len);
    if (file == NULL) fail_msg("cannot read docs/openapi.json (run from the source tree)");

    char prefix[80], token_file[128];
    snprintf(prefix, sizeof prefix, "%s-oa", g_prefix);
    snprintf(token_file, sizeof token_file, "/tmp/retryd-e2e-token-%ld", (long)getpid());
    FILE *tf = fopen(token_file, "w");
    assert_non_null(tf);
    fputs("s3cret-openapi-token\n", tf);
    fclose(tf);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--auth-token-file",
                                  token_file, NULL), 0);
    unlink(token_file);
    e2e_response_t r = { 0 };
    http_to(g_side.port, &r, "GET", "/queues", NULL, 0);
    e2e_expect_problem(&r, 401, "unauthorized", "/queues");
    http_to(g_side.port, &r, "GET", "/openapi.json", NULL, 0);
    rd_json_t *doc = e2e_expect_json(&r, 200);
    assert_int_equal(r.body_len, file_len);
    assert_memory_equal(r.body, file, file_len);
    free(file);
    assert_string_equal(e2e_jstr(doc, "openapi"), "3.1.0");

    const rd_json_t *paths = e2e_jget(doc, "paths");
    size_t described = 0;
    for (size_t i = 0; i < rd_api_route_count; i++) {
        const rd_route_t *rt = &rd_api_routes[i];
        const char *key = method_key(rt->method);
        const rd_json_t *item = rd_json_get(paths, rt->pattern);
        if (item == NULL || rd_json_get(item, key) == NULL)
            fail_msg("route %s %s is not in docs/openapi.json", key, rt->pattern);
        described++;
        if (rt->flags & RD_ROUTE_PREFIX) {   /* "/ui": also "/ui/" and "/ui/{asset}" */
            const char *under[] = { e2e_fmt("%s/", rt->pattern), e2e_fmt("%s/{asset}", rt->pattern) };
            for (int u = 0; u < 2; u++) {
                item = rd_json_get(paths, under[u]);
                if (item == NULL || rd_json_get(item, key) == NULL)
                    fail_msg("route %s %s is not in docs/openapi.json", key, under[u]);
                described++;
            }
        }
        bool public_route = (rt->flags & RD_ROUTE_PUBLIC) != 0;
        const rd_json_t *security = rd_json_get(rd_json_get(item, key), "security");
        bool open = security != NULL && rd_json_array_size(security) == 0;
        if (public_route != open)
            fail_msg("%s %s: public in the route table: %d, in the document: %d", key,
                     rt->pattern, public_route, open);
    }
    /* and no operation the table does not have: every operation of the
     * document has an operationId. */
    size_t operations = 0;
    for (const char *p = r.body; (p = strstr(p, "\"operationId\":")) != NULL; p++) operations++;
    assert_int_equal(operations, described);
    e2e_response_free(&r);
}

/* With --auth-token-file the public rows of the route table (/healthz,
 * /openapi.json, the console's files under /ui) answer without the token
 * and every other route is 401; README's flag row and --help name exactly
 * those public routes (they said "every route but /healthz"). */
static void test_public_routes_are_documented(void **state)
{
    (void)state;
    char prefix[80], token_file[128];
    snprintf(prefix, sizeof prefix, "%s-pub", g_prefix);
    snprintf(token_file, sizeof token_file, "/tmp/retryd-e2e-pub-token-%ld", (long)getpid());
    FILE *tf = fopen(token_file, "w");
    assert_non_null(tf);
    fputs("s3cret-public-token\n", tf);
    fclose(tf);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--auth-token-file",
                                  token_file, NULL), 0);
    unlink(token_file);

    size_t readme_len = 0;
    char *readme = read_file_all("README.md", &readme_len);
    if (readme == NULL) fail_msg("cannot read README.md (run from the source tree)");
    readme = realloc(readme, readme_len + 1);
    readme[readme_len] = '\0';
    char *row = strstr(readme, "| `--auth-token-file` |");
    assert_non_null(row);
    char *eol = strchr(row, '\n');
    if (eol) *eol = '\0';
    char help[16384];
    rd_config_t cfg;
    const char *argv[] = { "retryd", "--help", NULL };
    assert_int_equal(rd_config_load(&cfg, 2, (char **)argv, help, sizeof help), 1);
    char *flag = strstr(help, "--auth-token-file");
    assert_non_null(flag);
    char *next = strstr(flag + 2, "\n  --");
    if (next) *next = '\0';

    e2e_response_t r = { 0 };
    for (size_t i = 0; i < rd_api_route_count; i++) {
        const rd_route_t *rt = &rd_api_routes[i];
        char path[256];
        size_t n = 0;
        for (const char *p = rt->pattern; *p && n + 2 < sizeof path; p++) {
            if (*p == '{') {
                bool queue = p[1] == 'q';
                p = strchr(p, '}');
                n += (size_t)snprintf(path + n, sizeof path - n, "%s", queue ? "pubq" : "1");
            } else {
                path[n++] = *p;
            }
        }
        path[n] = '\0';
        const char *method = rt->method == RD_HTTP_GET ? "GET" : rt->method == RD_HTTP_POST
                                 ? "POST" : rt->method == RD_HTTP_PUT ? "PUT" : "DELETE";
        const char *body = rt->method == RD_HTTP_GET || rt->method == RD_HTTP_DELETE ? NULL : "{}";
        bool public_route = (rt->flags & RD_ROUTE_PUBLIC) != 0;
        const char *paths[2] = { path, rt->flags & RD_ROUTE_PREFIX ? e2e_fmt("%s/app.js", path) : NULL };
        for (int k = 0; k < 2 && paths[k]; k++) {
            http_to(g_side.port, &r, method, paths[k], body, body ? strlen(body) : 0);
            if (public_route && (r.status == 401 || r.status >= 500))
                fail_msg("%s %s is public in the route table, answered %d", method, paths[k],
                         r.status);
            if (!public_route && r.status != 401)
                fail_msg("%s %s without the token: %d, want 401", method, paths[k], r.status);
        }
        if (!public_route) continue;
        const char *named = rt->flags & RD_ROUTE_PREFIX ? e2e_fmt("`%s/*`", rt->pattern)
                                                        : e2e_fmt("`%s`", rt->pattern);
        if (strstr(row, named) == NULL)
            fail_msg("README's --auth-token-file row does not name the public route %s: %s", named,
                     row);
        const char *bare = rt->flags & RD_ROUTE_PREFIX ? e2e_fmt("%s/*", rt->pattern) : rt->pattern;
        if (strstr(flag, bare) == NULL)
            fail_msg("--help for --auth-token-file does not name the public route %s: %s", bare,
                     flag);
    }
    /* and no other route is called public there. */
    static const char *const private_routes[] = { "`/readyz`", "`/metrics`", "`/queues`" };
    for (size_t i = 0; i < 3; i++)
        if (strstr(row, private_routes[i])) fail_msg("README names %s as public", private_routes[i]);
    free(readme);
    e2e_response_free(&r);
}

static void test_body_over_max_body_is_413(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-max", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, "--max-body", "65536",
                                  NULL), 0);
    char q[64];
    e2e_queue_name(q, sizeof q, "big");
    char path[1024];
    SET(path, messages_path(q));
    enum { UNDER = 60000, OVER = 70000 };
    char *body = malloc(OVER + 1);
    e2e_response_t r = { 0 };

    /* {"payload":"aaa...a"} of exactly n bytes. */
    for (int n = UNDER; n <= OVER; n += OVER - UNDER) {
        memset(body, 'a', (size_t)n);
        memcpy(body, "{\"payload\":\"", 12);
        memcpy(body + n - 2, "\"}", 2);
        body[n] = '\0';
        http_to(g_side.port, &r, "POST", path, body, (size_t)n);
        if (n == UNDER) expect_message(e2e_expect_json(&r, 201), 1, q, "pending", 0, 3);
        else e2e_expect_problem(&r, 413, "payload-too-large", NULL);
    }
    free(body);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    /* SIGINT stops it as cleanly as SIGTERM (docs/reference.md "Daemon"). */
    assert_int_equal(e2e_daemon_stop(&g_side, SIGINT, E2E_STOP_TIMEOUT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* Claim                                                                    */
/* ------------------------------------------------------------------------ */

static void test_claim_nothing_due_is_204(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "empty");
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), NULL);
    e2e_expect_no_content(&r);
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{}");
    e2e_expect_no_content(&r);
    /* A message that is not due yet is not claimable either. */
    enqueue(q, "{\"payload\":\"later\",\"delay_seconds\":60}");
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":5}");
    e2e_expect_no_content(&r);
    e2e_response_free(&r);
}

/* Keys in Redis whose name holds `needle` (SCAN, so a busy Redis is not held). */
static long long keys_matching(const char *needle)
{
    long long n = 0;
    char cursor[32] = "0";
    do {
        redisReply *x = e2e_rcmd(g_redis, "SCAN %s MATCH *%s* COUNT 1000", cursor, needle);
        assert_int_equal(x->type, REDIS_REPLY_ARRAY);
        SET(cursor, x->element[0]->str);
        n += (long long)x->element[1]->elements;
        freeReplyObject(x);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

/* 20,000 claims on names that never had a message left 20,000 permanent
 * stats keys, and the series nudge put the names in /queues, the console
 * and /metrics. A claim that finds nothing writes nothing, whichever way it
 * comes (a plain claim, a batch, a settle-and-claim whose settlements find
 * nothing, a long-poll that times out), and the registry never hears of the
 * name. A daemon with its own prefix (and --series on, the default, so every
 * name could be nudged) makes the claims, so its registry holds nothing else. */
static void test_claims_on_unknown_queues_write_nothing(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-ghost", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, "--series", "on", NULL), 0);
    redisReply *x;
    char stem[64];
    e2e_queue_name(stem, sizeof stem, "ghost");
    e2e_response_t r = { 0 };
    for (int i = 0; i < 1000; i++) {
        const char *path = e2e_fmt("/queues/%s-%d/claim", stem, i);
        const char *body;
        switch (i % 4) {
        case 0: body = "{}"; break;
        case 1: body = "{\"count\":10}"; break;
        case 2: body = "{\"count\":5,\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"},"
                       "{\"id\":2,\"outcome\":\"failed\",\"error\":\"x\"}]}"; break;
        default: body = "{\"lease_seconds\":5,\"worker\":\"w1\"}"; break;
        }
        http_to(g_side.port, &r, "POST", path, body, strlen(body));
        if (i % 4 == 2) {
            e2e_expect_json(&r, 200);   /* the settlements' outcomes, no message */
            assert_non_null(strstr(r.body, "not-found"));
        } else {
            e2e_expect_no_content(&r);
        }
    }
    e2e_response_free(&r);
    /* Long-polls that time out, several at once. */
    enum { POLLS = 8 };
    e2e_conn_t polls[POLLS];
    for (int i = 0; i < POLLS; i++) {
        assert_int_equal(e2e_conn_open(&polls[i], g_side.port), 0);
        const char *body = "{\"wait_seconds\":1}";
        assert_int_equal(e2e_send_request(&polls[i], "POST", e2e_fmt("/queues/%s-poll%d/claim",
                                          stem, i), NULL, body, strlen(body)), 0);
    }
    for (int i = 0; i < POLLS; i++) {
        assert_int_equal(e2e_read_response(&polls[i], &r), 0);
        e2e_expect_no_content(&r);
        e2e_response_free(&r);
        e2e_conn_close(&polls[i]);
    }
    /* Asked through the daemon (on its link, after every claim's command). */
    http_to(g_side.port, &r, "GET", "/queues?limit=1000", NULL, 0);
    e2e_expect_json(&r, 200);
    if (strstr(r.body, stem)) fail_msg("GET /queues lists a name only claimed: %.300s", r.body);
    http_to(g_side.port, &r, "GET", "/metrics", NULL, 0);
    assert_int_equal(r.status, 200);
    if (strstr(r.body, stem)) fail_msg("/metrics names a queue only claimed");
    assert_non_null(strstr(r.body, "retryd_registered_queues 0"));
    /* No key of any of the names, and no registry (its SET and the names
     * ZSET; the timer's own sweep bookkeeping exists for any daemon). */
    long long left = keys_matching(stem);
    if (left != 0) {
        redisReply *k = e2e_rcmd(g_redis, "SCAN 0 MATCH *%s* COUNT 1000", stem);
        fail_msg("%lld keys left by claims that found nothing, e.g. %s", left,
                 k->element[1]->elements ? k->element[1]->element[0]->str : "?");
    }
    x = e2e_rcmd(g_redis, "EXISTS %s:queues {%s:queues}:names {%s:queues}:timers", prefix,
                 prefix, prefix);
    assert_int_equal(x->integer, 0);
    freeReplyObject(x);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

static void test_claim_is_fifo(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "fifo");
    for (int i = 1; i <= 5; i++)
        assert_int_equal(enqueue(q, e2e_fmt("{\"payload\":\"m%d\"}", i)), i);
    for (int i = 1; i <= 5; i++) assert_int_equal(claim_one(q, 30, NULL, 0), i);
    assert_int_equal(claim_one(q, 30, NULL, 0), 0);
}

/* lease_expires_at is the claim's own time (updated_at) + lease_seconds. */
static void expect_lease(const rd_json_t *m, long long lease_s)
{
    long long claimed_at = e2e_jtime(m, "updated_at");
    assert_int_equal(e2e_jtime(m, "lease_expires_at") - claimed_at, lease_s * 1000);
    long long now = e2e_wall_ms();
    assert_true(claimed_at > now - 5000 && claimed_at < now + 2000);
    assert_true(e2e_jstr(m, "lease_token")[0] != '\0');
}

static void test_claim_sets_lease(void **state)
{
    (void)state;
    char q[64], token1[160];
    e2e_queue_name(q, sizeof q, "lease");
    for (int i = 0; i < 3; i++) enqueue(q, "{\"payload\":\"x\"}");
    char path[1024];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    e2e_response_t r = { 0 };

    http(&r, "POST", path, "{\"lease_seconds\":5}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "processing", 0, 3);
    expect_lease(m, 5);
    e2e_jnull(m, "retry_after");
    snprintf(token1, sizeof token1, "%s", e2e_jstr(m, "lease_token"));

    http(&r, "POST", e2e_fmt("/queues/%s/claim?lease_seconds=5", q), NULL);
    m = e2e_expect_json(&r, 200);
    expect_message(m, 2, q, "processing", 0, 3);
    expect_lease(m, 5);
    assert_string_not_equal(e2e_jstr(m, "lease_token"), token1);

    http(&r, "POST", path, NULL);
    m = e2e_expect_json(&r, 200);
    expect_lease(m, DEFAULT_LEASE_S);

    /* The lease shows on GET too. */
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "processing");
    e2e_jtime(m, "lease_expires_at");
    e2e_response_free(&r);
}

static void test_claim_count(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "count");
    for (int i = 0; i < 4; i++) enqueue(q, "{\"payload\":\"x\"}");
    char path[1024];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    e2e_response_t r = { 0 };

    http(&r, "POST", path, "{\"count\":3,\"lease_seconds\":5}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_true(rd_json_is_array(list));
    assert_int_equal(rd_json_array_size(list), 3);
    const char *tokens[3];
    for (size_t i = 0; i < 3; i++) {
        rd_json_t *m = rd_json_array_at(list, i);
        expect_message(m, (long long)i + 1, q, "processing", 0, 3);
        expect_lease(m, 5);
        tokens[i] = e2e_jstr(m, "lease_token");
        for (size_t j = 0; j < i; j++) assert_string_not_equal(tokens[i], tokens[j]);
    }

    http(&r, "POST", e2e_fmt("/queues/%s/claim?count=3", q), NULL);
    list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 1);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "id"), 4);

    http(&r, "POST", path, "{\"count\":3}");
    e2e_expect_no_content(&r);
    e2e_response_free(&r);
}

static void test_claim_validation(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "claimval");
    enqueue(q, "{\"payload\":\"x\"}");
    char path[128];
    snprintf(path, sizeof path, "/queues/%s/claim", q);
    e2e_response_t r = { 0 };
    const struct { const char *query, *body, *field; } cases[] = {
        { "", "{\"lease_seconds\":0}", "lease_seconds" },
        { "", "{\"lease_seconds\":43201}", "lease_seconds" },
        { "", "{\"lease_seconds\":\"5\"}", "lease_seconds" },
        { "?lease_seconds=0", NULL, "lease_seconds" },
        { "?lease_seconds=43201", NULL, "lease_seconds" },
        { "", "{\"count\":101}", "count" },
        { "", "{\"count\":0}", "count" },
        { "?count=101", NULL, "count" },
        { "", "{\"wait_seconds\":31}", "wait_seconds" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http(&r, "POST", e2e_fmt("%s%s", path, cases[i].query), cases[i].body);
        expect_field_error(expect_invalid(&r, path, 1), cases[i].field, "invalid", NULL);
    }
    http(&r, "POST", path, "[1]");
    e2e_expect_problem(&r, 400, "malformed-request", path);
    /* None of them claimed anything; the limits themselves are accepted. */
    http(&r, "POST", path, "{\"lease_seconds\":43200,\"count\":100}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 1);
    expect_lease(rd_json_array_at(list, 0), 43200);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Settling: succeed, fail, replay, extend                                  */
/* ------------------------------------------------------------------------ */

static void test_succeed(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "succeed");
    enqueue(q, "{\"payload\":\"a\"}");
    enqueue(q, "{\"payload\":\"b\"}");
    enqueue(q, "{\"payload\":\"c\"}");
    e2e_response_t r = { 0 };
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);

    char path[1024];
    SET(path, message_path(q, 1, "succeed"));
    http(&r, "POST", path, "{\"lease_token\":\"not-the-token\"}");
    e2e_expect_problem(&r, 409, "lease-mismatch", path);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "processing");

    http(&r, "POST", path, e2e_fmt("{\"lease_token\":\"%s\"}", token));
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "succeeded", 0, 3);
    e2e_jnull(m, "lease_expires_at");
    assert_string_equal(e2e_jstr(m, "payload"), "a");

    http(&r, "POST", path, e2e_fmt("{\"lease_token\":\"%s\"}", token));
    assert_non_null(strstr(e2e_jstr(e2e_expect_problem(&r, 409, "invalid-state", path), "detail"),
                           "succeeded"));

    /* Without a token any current lease is accepted (reference behaviour). */
    assert_int_equal(claim_one(q, 30, NULL, 0), 2);
    http(&r, "POST", message_path(q, 2, "succeed"), NULL);
    expect_message(e2e_expect_json(&r, 200), 2, q, "succeeded", 0, 3);

    SET(path, message_path(q, 3, "succeed"));
    http(&r, "POST", path, "{}");
    assert_non_null(strstr(e2e_jstr(e2e_expect_problem(&r, 409, "invalid-state", path), "detail"),
                           "pending"));
    e2e_response_free(&r);
}

static void test_fail_schedules_retry_with_backoff(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "fail");
    enqueue(q, "{\"payload\":\"x\"}");
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    e2e_response_t r = { 0 };

    char path[1024];
    SET(path, message_path(q, 1, "fail"));
    http(&r, "POST", path, e2e_fmt("{\"error\":\"wrong token\",\"lease_token\":\"%s-x\"}", token));
    e2e_expect_problem(&r, 409, "lease-mismatch", path);

    http(&r, "POST", path, e2e_fmt("{\"error\":\"smtp said \\\"no\\\"\",\"lease_token\":\"%s\"}",
                               token));
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "pending", 1, 3);
    assert_string_equal(e2e_jstr(m, "last_error"), "smtp said \"no\"");
    e2e_jnull(m, "lease_expires_at");
    /* First failure: backoff 2^1 s from the failure. */
    assert_int_equal(e2e_jtime(m, "retry_after") - e2e_jtime(m, "updated_at"), 2000);

    http(&r, "GET", message_path(q, 1, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "pending");
    assert_string_equal(e2e_jstr(m, "last_error"), "smtp said \"no\"");
    assert_int_equal(claim_one(q, 30, NULL, 0), 0);

    /* Failing it again needs a claim first. */
    http(&r, "POST", path, "{\"error\":\"again\"}");
    assert_non_null(strstr(e2e_jstr(e2e_expect_problem(&r, 409, "invalid-state", path), "detail"),
                           "pending"));
    e2e_response_free(&r);
}

static void test_fail_to_dead(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "dead");
    enqueue(q, "{\"payload\":\"a\"}");
    enqueue(q, "{\"payload\":\"b\",\"max_retries\":1}");
    e2e_response_t r = { 0 };

    assert_int_equal(claim_one(q, 30, NULL, 0), 1);
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"bad input\",\"retryable\":false}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "dead", 1, 3);
    assert_string_equal(e2e_jstr(m, "last_error"), "bad input");
    e2e_jnull(m, "retry_after");
    e2e_jnull(m, "lease_expires_at");

    assert_int_equal(claim_one(q, 30, NULL, 0), 2);
    http(&r, "POST", message_path(q, 2, "fail"), "{\"error\":\"once\"}");
    m = e2e_expect_json(&r, 200);
    expect_message(m, 2, q, "dead", 1, 1);
    assert_string_equal(e2e_jstr(m, "last_error"), "once");
    e2e_jnull(m, "retry_after");

    assert_int_equal(claim_one(q, 30, NULL, 0), 0);
    e2e_response_free(&r);
}

static void test_fail_requires_error(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "failval");
    enqueue(q, "{\"payload\":\"x\"}");
    assert_int_equal(claim_one(q, 30, NULL, 0), 1);
    char path[1024];
    SET(path, message_path(q, 1, "fail"));
    e2e_response_t r = { 0 };

    http(&r, "POST", path, "{}");
    expect_field_error(expect_invalid(&r, path, 1), "error", "required", NULL);
    http(&r, "POST", path, "{\"retryable\":false}");
    expect_field_error(expect_invalid(&r, path, 1), "error", "required", NULL);
    http(&r, "POST", path, "{\"error\":42}");
    expect_field_error(expect_invalid(&r, path, 1), "error", "invalid", NULL);
    http(&r, "POST", path, "{\"error\":\"e\",\"retryable\":\"no\"}");
    expect_field_error(expect_invalid(&r, path, 1), "retryable", "invalid", NULL);
    http(&r, "POST", path, "");
    e2e_expect_problem(&r, 400, "malformed-request", path);

    http(&r, "GET", message_path(q, 1, NULL), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "processing", 0, 3);
    e2e_jnull(m, "last_error");
    e2e_response_free(&r);
}

static void test_replay(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "replay");
    e2e_response_t r = { 0 };
    assert_int_equal(enqueue(q, "{\"payload\":\"dead one\",\"max_retries\":1}"), 1);
    assert_int_equal(claim_one(q, 30, NULL, 0), 1);
    /* Fresh messages that wait longer than the replayed one will. */
    assert_int_equal(enqueue(q, "{\"payload\":\"fresh 2\"}"), 2);
    assert_int_equal(enqueue(q, "{\"payload\":\"fresh 3\"}"), 3);
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"boom\"}");
    expect_message(e2e_expect_json(&r, 200), 1, q, "dead", 1, 1);

    char path[1024];
    SET(path, message_path(q, 2, "replay"));
    http(&r, "POST", path, NULL);
    assert_non_null(strstr(e2e_jstr(e2e_expect_problem(&r, 409, "invalid-state", path), "detail"),
                           "pending"));

    http(&r, "POST", message_path(q, 1, "replay"), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "pending", 0, 1);
    e2e_jnull(m, "retry_after");
    e2e_jnull(m, "lease_expires_at");
    assert_string_equal(e2e_jstr(m, "payload"), "dead one");

    assert_int_equal(claim_one(q, 30, NULL, 0), 1);
    SET(path, message_path(q, 1, "replay"));
    http(&r, "POST", path, "{}");
    assert_non_null(strstr(e2e_jstr(e2e_expect_problem(&r, 409, "invalid-state", path), "detail"),
                           "processing"));
    assert_int_equal(claim_one(q, 30, NULL, 0), 2);
    assert_int_equal(claim_one(q, 30, NULL, 0), 3);

    SET(path, message_path(q, 77, "replay"));
    http(&r, "POST", path, NULL);
    e2e_expect_problem(&r, 404, "not-found", path);
    e2e_response_free(&r);
}


/* Kills a fresh message of q by one failure with error; returns its id. */
static long long make_dead(const char *q, const char *payload, const char *error)
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

/* POST /queues/{q}/replay with "to" (docs/reference.md "Redrive"): ids, error_contains, all;
 * each letter becomes a new pending message of the target with origin, and
 * leaves the source; a bad "to" is a 422 on field to. */
static void test_redrive_to_another_queue(void **state)
{
    (void)state;
    char q[64], to[64], path[1024];
    e2e_queue_name(q, sizeof q, "redrive-src");
    e2e_queue_name(to, sizeof to, "redrive-dst");
    long long a = make_dead(q, "pa", "timeout");
    long long b = make_dead(q, "pb", "refused");
    long long c = make_dead(q, "pc", "timeout 2");
    long long d = make_dead(q, "pd", "other");
    e2e_response_t r = { 0 };
    SET(path, e2e_fmt("/queues/%s/replay", q));

    http(&r, "POST", path, e2e_fmt("{\"ids\":[%lld, 999],\"to\":\"%s\"}", a, to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);
    http(&r, "POST", path, e2e_fmt("{\"error_contains\":\"timeout\",\"to\":\"%s\"}", to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);
    /* b stays dead in the source until "all". */
    http(&r, "GET", message_path(q, b, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "dead");
    http(&r, "POST", path, e2e_fmt("{\"all\":true,\"to\":\"%s\"}", to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 2);
    http(&r, "POST", path, e2e_fmt("{\"all\":true,\"to\":\"%s\"}", to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 0);

    /* The source has none of them left. */
    long long src_ids[] = { a, b, c, d };
    for (size_t i = 0; i < 4; i++) {
        char p[1024];
        SET(p, message_path(q, src_ids[i], NULL));
        http(&r, "GET", p, NULL);
        e2e_expect_problem(&r, 404, "not-found", p);
    }
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *st = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(e2e_jget(st, "counts"), "dead"), 0);
    assert_int_equal(e2e_jint(e2e_jget(st, "counts"), "redriving"), 0);
    assert_int_equal(e2e_jint(e2e_jget(st, "totals"), "redriven"), 4);

    /* The target has each once, in redrive order, pending with origin. */
    const char *payloads[] = { "pa", "pc", "pb", "pd" };
    long long origins[] = { a, c, b, d };
    http(&r, "GET", e2e_fmt("/queues/%s/messages?status=pending", to), NULL);
    rd_json_t *page = e2e_expect_json(&r, 200);
    rd_json_t *msgs = e2e_jget(page, "messages");
    assert_int_equal(rd_json_array_size(msgs), 4);
    for (size_t i = 0; i < 4; i++) {
        rd_json_t *m = rd_json_array_at(msgs, i);
        expect_message(m, (long long)i + 1, to, "pending", 0, 2);
        assert_string_equal(e2e_jstr(m, "payload"), payloads[i]);
        e2e_jnull(m, "last_error");
        assert_null(rd_json_get(m, "idempotency_key"));
        rd_json_t *o = e2e_jget(m, "origin");
        assert_string_equal(e2e_jstr(o, "queue"), q);
        assert_int_equal(e2e_jint(o, "id"), origins[i]);
    }
    http(&r, "GET", message_path(to, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_jget(e2e_expect_json(&r, 200), "origin"), "queue"), q);
    /* A claim of the target shows it too, and a fresh budget works. */
    assert_int_equal(claim_one(to, 30, NULL, 0), 1);

    /* Bad targets. */
    make_dead(q, "pe", "x");
    http(&r, "POST", path, e2e_fmt("{\"all\":true,\"to\":\"%s\"}", q));
    expect_field_error(expect_invalid(&r, path, 1), "to", "invalid", NULL);
    http(&r, "POST", path, "{\"all\":true,\"to\":\"\"}");
    expect_field_error(expect_invalid(&r, path, 1), "to", "invalid", NULL);
    http(&r, "POST", path, "{\"all\":true,\"to\":\"a\\u0001b\"}");
    expect_field_error(expect_invalid(&r, path, 1), "to", "invalid", NULL);
    http(&r, "POST", path, "{\"all\":true,\"to\":42}");
    expect_field_error(expect_invalid(&r, path, 1), "to", "invalid", NULL);
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    assert_int_equal(e2e_jint(e2e_jget(e2e_expect_json(&r, 200), "counts"), "dead"), 1);
    /* "to": null replays in place. */
    http(&r, "POST", path, "{\"all\":true,\"to\":null}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);
    e2e_response_free(&r);
}

/* A redrive by error text walks the whole dead index even when many pages
 * in a row match nothing (each take looks at 1000 letters): it is not
 * mistaken for a redrive that makes no progress. */
static void test_redrive_by_error_past_pages_without_a_match(void **state)
{
    (void)state;
    enum { N = 3500 };
    char q[64], to[64];
    e2e_queue_name(q, sizeof q, "redrive-sparse");
    e2e_queue_name(to, sizeof to, "redrive-sparse-to");
    for (int i = 1; i <= N + 1; i++) {
        redisAppendCommand(g_redis, "FCALL %s 1 %s:{%s} p%d 1 0 %s", RD_FUNCTION("enqueue"),
                           g_prefix, q, i, "");
        redisAppendCommand(g_redis, "FCALL %s 2 %s:{%s} %s:{%s}:m:%d %d %s", RD_FUNCTION("kill"),
                           g_prefix, q, g_prefix, q, i, i, i <= N ? "common" : "the rare one");
    }
    for (int i = 0; i < 2 * (N + 1); i++) {
        redisReply *rep = NULL;
        if (redisGetReply(g_redis, (void **)&rep) != REDIS_OK || rep == NULL)
            fail_msg("seeding failed at %d", i);
        freeReplyObject(rep);
    }
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/replay", q),
         e2e_fmt("{\"error_contains\":\"rare\",\"to\":\"%s\"}", to));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);
    http(&r, "GET", message_path(to, 1, NULL), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(e2e_jget(m, "origin"), "id"), N + 1);
    e2e_response_free(&r);
}

static void test_extend(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "extend");
    enqueue(q, "{\"payload\":\"x\"}");
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":5}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    long long first = e2e_jtime(m, "lease_expires_at");
    snprintf(token, sizeof token, "%s", e2e_jstr(m, "lease_token"));

    char path[1024];
    SET(path, message_path(q, 1, "extend"));
    http(&r, "POST", path, "{\"lease_seconds\":60,\"lease_token\":\"nope\"}");
    e2e_expect_problem(&r, 409, "lease-mismatch", path);

    http(&r, "POST", path, e2e_fmt("{\"lease_seconds\":60,\"lease_token\":\"%s\"}", token));
    m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "processing", 0, 3);
    long long second = e2e_jtime(m, "lease_expires_at");
    assert_true(second > first);
    assert_int_equal(second - e2e_jtime(m, "updated_at"), 60000);

    /* The token still holds after extend. */
    http(&r, "POST", message_path(q, 1, "succeed"), e2e_fmt("{\"lease_token\":\"%s\"}", token));
    expect_message(e2e_expect_json(&r, 200), 1, q, "succeeded", 0, 3);
    http(&r, "POST", path, "{}");
    e2e_expect_problem(&r, 409, "invalid-state", path);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Time: delayed retries and expired leases                                 */
/* ------------------------------------------------------------------------ */

static void test_delayed_retry_end_to_end(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "delayed");
    enqueue(q, "{\"payload\":\"retry me\"}");
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    e2e_response_t r = { 0 };
    http(&r, "POST", message_path(q, 1, "fail"),
         e2e_fmt("{\"error\":\"later\",\"retry_after_seconds\":1,\"lease_token\":\"%s\"}", token));
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "pending", 1, 3);
    long long retry_after = e2e_jtime(m, "retry_after");
    assert_int_equal(retry_after - e2e_jtime(m, "updated_at"), 1000);

    char path[1024];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    http(&r, "POST", path, NULL);
    e2e_expect_no_content(&r);

    long long deadline = e2e_mono_ms() + 3000;
    for (;;) {
        http(&r, "POST", path, NULL);
        if (r.status != 204) break;
        if (e2e_mono_ms() > deadline) fail_msg("not claimable 3 s after the failure");
        e2e_pause_ms(20);
    }
    m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "processing", 1, 3);
    assert_string_equal(e2e_jstr(m, "payload"), "retry me");
    /* updated_at is the claim's time, from the same clock as retry_after. */
    long long claimed_at = e2e_jtime(m, "updated_at");
    if (claimed_at < retry_after || claimed_at > retry_after + 1000)
        fail_msg("claimed %lld ms after retry_after", claimed_at - retry_after);
    e2e_response_free(&r);
}

static void test_expired_lease_is_a_failure(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "expiry");
    enqueue(q, "{\"payload\":\"x\"}");
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"lease_seconds\":1}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    long long lease_end = e2e_jtime(m, "lease_expires_at");
    snprintf(token, sizeof token, "%s", e2e_jstr(m, "lease_token"));

    char path[1024];
    SET(path, message_path(q, 1, NULL));
    long long deadline = e2e_mono_ms() + 3000;
    for (;;) {
        http(&r, "GET", path, NULL);
        m = e2e_expect_json(&r, 200);
        if (strcmp(e2e_jstr(m, "status"), "processing") != 0) break;
        if (e2e_mono_ms() > deadline) fail_msg("still processing 3 s after a 1 s lease");
        e2e_pause_ms(50);
    }
    expect_message(m, 1, q, "pending", 1, 3);
    assert_string_equal(e2e_jstr(m, "last_error"), "lease expired");
    e2e_jnull(m, "lease_expires_at");
    long long failed_at = e2e_jtime(m, "updated_at");
    assert_true(failed_at >= lease_end && failed_at <= lease_end + 1000);
    assert_int_equal(e2e_jtime(m, "retry_after") - failed_at, 2000);

    char succeed[1024];
    SET(succeed, message_path(q, 1, "succeed"));
    http(&r, "POST", succeed, e2e_fmt("{\"lease_token\":\"%s\"}", token));
    /* Either answer is right: the lease is gone, and so is "processing". */
    const char *type = r.json ? rd_json_string(rd_json_get(r.json, "type")) : NULL;
    if (type == NULL || (strcmp(type, "/problems/invalid-state") != 0 &&
                         strcmp(type, "/problems/lease-mismatch") != 0))
        fail_msg("expected 409 invalid-state or lease-mismatch, got %d: %s", r.status, r.body);
    e2e_expect_problem(&r, 409, type + strlen("/problems/"), succeed);

    /* Once someone else holds it, the old token is a lease mismatch. */
    char fresh[160];
    long long id = 0;
    deadline = e2e_mono_ms() + 4000;
    while ((id = claim_one(q, 30, fresh, sizeof fresh)) == 0) {
        if (e2e_mono_ms() > deadline) fail_msg("not claimable 4 s after the lease expired");
        e2e_pause_ms(20);
    }
    assert_int_equal(id, 1);
    assert_string_not_equal(fresh, token);
    http(&r, "POST", succeed, e2e_fmt("{\"lease_token\":\"%s\"}", token));
    e2e_expect_problem(&r, 409, "lease-mismatch", succeed);
    http(&r, "POST", succeed, e2e_fmt("{\"lease_token\":\"%s\"}", fresh));
    expect_message(e2e_expect_json(&r, 200), 1, q, "succeeded", 1, 3);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Listing                                                                  */
/* ------------------------------------------------------------------------ */

/* Follows next_cursor from the first page of query; marks each id seen and
 * returns how many messages came. Every page has `total` and at most limit. */
static size_t list_all(const char *q, const char *query, int limit, const char *status,
                       long long total, int *seen, size_t seen_cap)
{
    e2e_response_t r = { 0 };
    char cursor[512] = "";
    size_t count = 0;
    for (int page = 0; page < 50; page++) {
        const char *path = cursor[0]
            ? e2e_fmt("%s?%s&limit=%d&cursor=%s", messages_path(q), query, limit,
                      e2e_url_encode(cursor))
            : e2e_fmt("%s?%s&limit=%d", messages_path(q), query, limit);
        http(&r, "GET", path, NULL);
        rd_json_t *doc = e2e_expect_json(&r, 200);
        assert_int_equal(e2e_jint(doc, "total"), total);
        rd_json_t *list = e2e_jget(doc, "messages");
        assert_true(rd_json_is_array(list));
        assert_true(rd_json_array_size(list) <= (size_t)limit);
        for (size_t i = 0; i < rd_json_array_size(list); i++) {
            rd_json_t *m = rd_json_array_at(list, i);
            long long id = e2e_jint(m, "id");
            assert_true(id >= 1 && (size_t)id < seen_cap);
            seen[id]++;
            count++;
            if (status) assert_string_equal(e2e_jstr(m, "status"), status);
        }
        rd_json_t *next = e2e_jget(doc, "next_cursor");
        if (rd_json_is_null(next)) {
            e2e_response_free(&r);
            return count;
        }
        assert_true(rd_json_is_string(next));
        snprintf(cursor, sizeof cursor, "%s", rd_json_string(next));
    }
    fail_msg("next_cursor never became null");
    return count;
}

static void test_list_and_paging(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "list");
    for (int i = 1; i <= 7; i++) enqueue(q, e2e_fmt("{\"payload\":\"m%d\"}", i));
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"count\":3}");
    e2e_expect_json(&r, 200);
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"x\",\"retryable\":false}");
    e2e_expect_json(&r, 200);
    http(&r, "POST", message_path(q, 2, "fail"), "{\"error\":\"x\",\"retryable\":false}");
    e2e_expect_json(&r, 200);
    /* Pending but scheduled far ahead: still listed as pending. */
    http(&r, "POST", message_path(q, 3, "fail"), "{\"error\":\"x\",\"retry_after_seconds\":600}");
    e2e_expect_json(&r, 200);

    int seen[16] = { 0 };
    assert_int_equal(list_all(q, "status=dead", 100, "dead", 2, seen, 16), 2);
    assert_int_equal(seen[1], 1);
    assert_int_equal(seen[2], 1);

    /* Pending now spans a replayed id, fresh ids and a scheduled retry. */
    http(&r, "POST", message_path(q, 2, "replay"), NULL);
    e2e_expect_json(&r, 200);
    memset(seen, 0, sizeof seen);
    assert_int_equal(list_all(q, "status=pending", 2, "pending", 6, seen, 16), 6);
    for (int id = 2; id <= 7; id++) assert_int_equal(seen[id], 1);
    memset(seen, 0, sizeof seen);
    assert_int_equal(list_all(q, "status=dead", 1, "dead", 1, seen, 16), 1);
    assert_int_equal(seen[1], 1);

    memset(seen, 0, sizeof seen);
    assert_int_equal(list_all(q, "status=processing", 10, "processing", 0, seen, 16), 0);

    memset(seen, 0, sizeof seen);
    assert_int_equal(list_all(q, "x=1", 3, NULL, 7, seen, 16), 7);
    for (int id = 1; id <= 7; id++) assert_int_equal(seen[id], 1);

    /* Without limit, the first page holds them all. */
    http(&r, "GET", e2e_fmt("%s?status=pending", messages_path(q)), NULL);
    rd_json_t *doc = e2e_expect_json(&r, 200);
    assert_int_equal(rd_json_array_size(e2e_jget(doc, "messages")), 6);
    e2e_jnull(doc, "next_cursor");
    e2e_response_free(&r);
}

static void test_list_validation(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "listval");
    enqueue(q, "{\"payload\":\"x\"}");
    char path[128];
    snprintf(path, sizeof path, "%s", messages_path(q));
    const struct { const char *query, *field; } cases[] = {
        { "status=bogus", "status" },
        { "status=", "status" },
        { "limit=0", "limit" },
        { "limit=1001", "limit" },
        { "limit=abc", "limit" },
        { "cursor=garbage", "cursor" },
        { "status=pending&cursor=garbage", "cursor" },
        { "status=dead&cursor=garbage", "cursor" },
    };
    e2e_response_t r = { 0 };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http(&r, "GET", e2e_fmt("%s?%s", path, cases[i].query), NULL);
        expect_field_error(expect_invalid(&r, path, 1), cases[i].field, "invalid", NULL);
    }
    http(&r, "GET", e2e_fmt("%s?status=bogus&limit=0", path), NULL);
    rd_json_t *errors = expect_invalid(&r, path, 2);
    expect_field_error(errors, "status", "invalid", NULL);
    expect_field_error(errors, "limit", "invalid", NULL);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Strict input: raw control bytes, numbers, query values, odd names        */
/* ------------------------------------------------------------------------ */

/* body with its "@" replaced by the raw byte b, sent as is (length given,
 * so a NUL goes out too). */
static void http_with_byte(e2e_response_t *r, const char *method, const char *path,
                           const char *body, char b)
{
    char buf[512];
    size_t len = strlen(body);
    assert_true(len < sizeof buf);
    memcpy(buf, body, len);
    char *at = memchr(buf, '@', len);
    assert_non_null(at);
    *at = b;
    http_to(g_daemon.port, r, method, path, buf, len);
}

/* RFC 8259 allows no raw control byte in a string. cJSON took them, and a
 * raw NUL cut the string there: "head\0tail" was stored as "head", two
 * idempotency keys differing after one were "the same", and an error, a
 * redrive's "to", a rule's error_contains and alert_url were cut too. Each
 * is now 400 malformed-request and nothing is done. */
static void test_raw_control_bytes_are_400(void **state)
{
    (void)state;
    char q[64], path[1024];
    e2e_queue_name(q, sizeof q, "rawctl");
    SET(path, messages_path(q));
    e2e_response_t r = { 0 };
    static const char bytes[] = { '\0', '\x01', '\t', '\n', '\x1f' };
    for (size_t i = 0; i < sizeof bytes; i++) {
        http_with_byte(&r, "POST", path, "{\"payload\":\"head@tail\"}", bytes[i]);
        e2e_expect_problem(&r, 400, "malformed-request", path);
        http_with_byte(&r, "POST", path, "{\"payload\":\"x\",\"idempotency_key\":\"order@-41\"}",
                       bytes[i]);
        e2e_expect_problem(&r, 400, "malformed-request", path);
    }
    /* Nothing was enqueued: the first real message is id 1, and keys that
     * differ after the byte position are two messages. */
    http(&r, "POST", path, "{\"payload\":\"a\",\"idempotency_key\":\"order\\u0001-41\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    http(&r, "POST", path, "{\"payload\":\"b\",\"idempotency_key\":\"order\\u0001-42\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 2);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "a");

    /* fail's error and a settlement's error: the message stays processing. */
    char token[128], fpath[1024];
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    SET(fpath, message_path(q, 1, "fail"));
    http_with_byte(&r, "POST", fpath, "{\"error\":\"disk full@ on /dev/sda1\"}", '\0');
    e2e_expect_problem(&r, 400, "malformed-request", fpath);
    char cpath[1024];
    SET(cpath, e2e_fmt("/queues/%s/claim", q));
    http_with_byte(&r, "POST", cpath,
                   "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"disk@full\"}]}", '\0');
    e2e_expect_problem(&r, 400, "malformed-request", cpath);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "processing");
    e2e_jnull(m, "last_error");

    /* A redrive's "to" and a replay's error_contains: the letter stays dead. */
    char dq[64], rpath[1024];
    e2e_queue_name(dq, sizeof dq, "rawctl-dead");
    long long dead = make_dead(dq, "p", "smtp timeout");
    SET(rpath, e2e_fmt("/queues/%s/replay", dq));
    http_with_byte(&r, "POST", rpath, e2e_fmt("{\"all\":true,\"to\":\"%s@x\"}", dq), '\0');
    e2e_expect_problem(&r, 400, "malformed-request", rpath);
    http_with_byte(&r, "POST", rpath, "{\"error_contains\":\"smtp@\"}", '\0');
    e2e_expect_problem(&r, 400, "malformed-request", rpath);
    http(&r, "GET", message_path(dq, dead, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "dead");

    /* A rule's error_contains and alert_url: the policy is unchanged. */
    char ppath[1024];
    SET(ppath, e2e_fmt("/queues/%s/policy", dq));
    http_with_byte(&r, "PUT", ppath,
                   "{\"dead_letter_rules\":[{\"error_contains\":\"4@29\",\"action\":\"dead\"}]}",
                   '\0');
    e2e_expect_problem(&r, 400, "malformed-request", ppath);
    http_with_byte(&r, "PUT", ppath, "{\"alert_url\":\"http://127.0.0.1:9/a@b\"}", '\0');
    e2e_expect_problem(&r, 400, "malformed-request", ppath);
    http(&r, "GET", ppath, NULL);
    m = e2e_expect_json(&r, 200);
    assert_int_equal(rd_json_array_size(e2e_jget(m, "dead_letter_rules")), 0);
    e2e_jnull(m, "alert_url");
    e2e_response_free(&r);
}

/* Numbers are strict JSON: "010" was read as 10. */
static void test_leading_zeros_are_400(void **state)
{
    (void)state;
    char q[64], path[1024];
    e2e_queue_name(q, sizeof q, "zeros");
    SET(path, messages_path(q));
    e2e_response_t r = { 0 };
    static const char *const bad[] = { "010", "-01", "00", "01.5", "1.", ".5", "+3" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"x\",\"max_retries\":%s}", bad[i]));
        e2e_expect_problem(&r, 400, "malformed-request", path);
    }
    http(&r, "PUT", e2e_fmt("/queues/%s/policy", q), "{\"max_in_flight\":007}");
    e2e_expect_problem(&r, 400, "malformed-request", NULL);
    http(&r, "POST", path, "{\"payload\":\"x\",\"max_retries\":10,\"delay_seconds\":0}");
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_int_equal(e2e_jint(m, "max_retries"), 10);
    e2e_response_free(&r);
}

/* Query values are limited by their decoded length: a 192-byte
 * error_contains with punctuation (272 characters encoded) and 43 x U+00E9
 * (86 bytes, 258 characters) were 422; they filter as any other. */
static void test_query_limits_apply_to_decoded_values(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "decoded");
    char punct[200], accents[100];
    size_t n = 0;
    for (int i = 0; i < 20; i++) n += (size_t)snprintf(punct + n, sizeof punct - n, "a:/");
    while (n < 192) punct[n++] = 'b';
    punct[n] = '\0';
    n = 0;
    for (int i = 0; i < 43; i++) n += (size_t)snprintf(accents + n, sizeof accents - n, "\xC3\xA9");
    const char *errors[] = { punct, accents };
    long long ids[2];
    for (int i = 0; i < 2; i++) {
        size_t len;
        char *body = e2e_json_with_string("error", e2e_fmt("%s (x)", errors[i]), &len);
        ids[i] = enqueue(q, e2e_fmt("{\"payload\":\"p%d\",\"max_retries\":1}", i));
        assert_int_equal(claim_one(q, 30, NULL, 0), ids[i]);
        e2e_response_t f = { 0 };
        http_to(g_daemon.port, &f, "POST", message_path(q, ids[i], "fail"), body, len);
        assert_string_equal(e2e_jstr(e2e_expect_json(&f, 200), "status"), "dead");
        e2e_response_free(&f);
        rd_free(body);
    }
    /* punct encoded: "a%3A%2F" x 20 + "b" x 132 = 272 characters. */
    char enc[1024];
    n = 0;
    for (int i = 0; i < 20; i++) n += (size_t)snprintf(enc + n, sizeof enc - n, "a%%3A%%2F");
    for (int i = 0; i < 132; i++) enc[n++] = 'b';
    enc[n] = '\0';
    assert_int_equal(strlen(enc), 272);
    const char *queries[] = { enc, e2e_url_encode(accents) };
    e2e_response_t r = { 0 };
    for (int i = 0; i < 2; i++) {
        http(&r, "GET", e2e_fmt("%s?status=dead&error_contains=%s", messages_path(q), queries[i]),
             NULL);
        rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
        assert_int_equal(rd_json_array_size(list), 1);
        assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "id"), ids[i]);
    }
    /* 256 decoded bytes are still refused, on the field. */
    char big[300];
    memset(big, 'x', 256);
    big[256] = '\0';
    char path[1024];
    SET(path, messages_path(q));
    http(&r, "GET", e2e_fmt("%s?error_contains=%s", path, big), NULL);
    expect_field_error(expect_invalid(&r, path, 1), "error_contains", "invalid", NULL);
    e2e_response_free(&r);
}

/* GET /queues pages by name: a page that ends on a 200-byte name, or on a
 * name with non-ASCII letters, gave a next_cursor that the next request
 * refused (the encoded cursor was length-checked), so every later queue was
 * out of reach. Paging one queue a page goes through all of them. */
static void test_queues_cursor_on_long_and_non_ascii_names(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-qcur", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, NULL), 0);
    enum { NAMES = 4 };
    char names[NAMES][256];
    for (int i = 0; i < 200; i++) names[0][i] = "a :/"[i % 4];   /* 200 bytes, 500 encoded */
    names[0][200] = '\0';
    names[1][0] = '\0';                     /* 200 bytes of U+00E9, 600 encoded */
    for (int i = 0; i < 100; i++) strcat(names[1], "\xC3\xA9");
    snprintf(names[2], sizeof names[2], "b-caf\xC3\xA9-\xE6\x97\xA5\xE6\x9C\xAC");
    snprintf(names[3], sizeof names[3], "\xE6\x97\xA5-last");
    e2e_response_t r = { 0 };
    for (int i = 0; i < NAMES; i++) {
        http_to(g_side.port, &r, "POST", messages_path(e2e_url_encode(names[i])),
                "{\"payload\":\"x\"}", 15);
        e2e_expect_json(&r, 201);
    }
    char cursor[256] = "";
    int seen = 0;
    for (int page = 0;; page++) {
        if (page > NAMES) fail_msg("GET /queues does not end");
        const char *path = cursor[0] ? e2e_fmt("/queues?limit=1&cursor=%s", e2e_url_encode(cursor))
                                     : "/queues?limit=1";
        http_to(g_side.port, &r, "GET", path, NULL, 0);
        rd_json_t *doc = e2e_expect_json(&r, 200);
        rd_json_t *list = e2e_jget(doc, "queues");
        if (rd_json_array_size(list) == 1) {
            const char *name = e2e_jstr(rd_json_array_at(list, 0), "name");
            /* Name order is byte order: "a :/...", "b-caf...", U+00E9s, U+65E5. */
            static const int order[NAMES] = { 0, 2, 1, 3 };
            assert_true(seen < NAMES);
            assert_string_equal(name, names[order[seen]]);
            seen++;
        }
        rd_json_t *next = rd_json_get(doc, "next_cursor");
        assert_non_null(next);
        if (rd_json_is_null(next)) break;
        snprintf(cursor, sizeof cursor, "%s", rd_json_string(next));
    }
    assert_int_equal(seen, NAMES);
    e2e_response_free(&r);
}

/* "." and ".." as a queue: browsers and curl collapse such path steps, so
 * the console could not manage the queue. Refused, raw or encoded. */
static void test_dot_queue_names_refused(void **state)
{
    (void)state;
    static const char *const names[] = { ".", "..", "%2E", "%2e%2E", ".%2E" };
    e2e_response_t r = { 0 };
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        SET(path, messages_path(names[i]));
        http(&r, "POST", path, "{\"payload\":\"x\"}");
        expect_field_error(expect_invalid(&r, path, 1), "queue", "invalid",
                           "queue must not be \".\" or \"..\".");
        SET(path, e2e_fmt("/queues/%s/stats", names[i]));
        http(&r, "GET", path, NULL);
        expect_field_error(expect_invalid(&r, path, 1), "queue", "invalid", NULL);
    }
    /* ... nor a redrive's target; "..." is a name like any other. */
    char q[64];
    e2e_queue_name(q, sizeof q, "dots");
    long long dead = make_dead(q, "p", "boom");
    SET(path, e2e_fmt("/queues/%s/replay", q));
    http(&r, "POST", path, "{\"all\":true,\"to\":\"..\"}");
    expect_field_error(expect_invalid(&r, path, 1), "to", "invalid", NULL);
    http(&r, "GET", message_path(q, dead, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "dead");
    char three[80];
    snprintf(three, sizeof three, "...%s", q);
    assert_int_equal(enqueue(three, "{\"payload\":\"x\"}"), 1);
    e2e_response_free(&r);
}

/* since/until on a day the calendar has not (2026-02-31 was read as
 * 2026-03-03) are 422 on the field. */
static void test_impossible_dates_refused(void **state)
{
    (void)state;
    char q[64], path[256];
    e2e_queue_name(q, sizeof q, "dates");
    enqueue(q, "{\"payload\":\"x\"}");
    SET(path, messages_path(q));
    e2e_response_t r = { 0 };
    static const char *const bad[] = { "2026-02-31T00:00:00Z", "2026-02-29T10:00:00Z",
                                       "2026-04-31T00:00:00Z" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "GET", e2e_fmt("%s?since=%s", path, bad[i]), NULL);
        expect_field_error(expect_invalid(&r, path, 1), "since", "invalid", NULL);
        http(&r, "GET", e2e_fmt("%s?until=%s", path, bad[i]), NULL);
        expect_field_error(expect_invalid(&r, path, 1), "until", "invalid", NULL);
    }
    http(&r, "GET", e2e_fmt("%s?since=2028-02-29T00:00:00Z", path), NULL);
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
}

/* Each message has one path: /messages/001 was message 1. A non-canonical
 * id (leading zero, sign) is 404, on every message route. */
static void test_non_canonical_message_id_is_404(void **state)
{
    (void)state;
    char q[64], path[256];
    e2e_queue_name(q, sizeof q, "canon");
    assert_int_equal(enqueue(q, "{\"payload\":\"x\"}"), 1);
    e2e_response_t r = { 0 };
    static const char *const ids[] = { "001", "01", "+1", "-1", "1.0", "0x1" };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        SET(path, e2e_fmt("/queues/%s/messages/%s", q, ids[i]));
        http(&r, "GET", path, NULL);
        e2e_expect_problem(&r, 404, "not-found", path);
        SET(path, e2e_fmt("/queues/%s/messages/%s/kill", q, ids[i]));
        http(&r, "POST", path, "{}");
        e2e_expect_problem(&r, 404, "not-found", path);
    }
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "pending");
    e2e_response_free(&r);
}

/* A problem's instance is the request's path, cut to its first 256 bytes on
 * a character boundary: a 12 KB path was echoed whole. */
static void test_problem_instance_is_truncated(void **state)
{
    (void)state;
    enum { LONG = 12 * 1024 };
    char *path = malloc(LONG + 1);
    assert_non_null(path);
    memcpy(path, "/nope/", 6);
    /* U+00E9 percent-encoded is 6 bytes: byte 256 falls inside one. */
    for (size_t n = 6; n < LONG; n++) path[n] = "%C3%A9"[(n - 6) % 6];
    path[LONG] = '\0';
    e2e_response_t r = { 0 };
    http(&r, "GET", path, NULL);
    rd_json_t *p = e2e_expect_problem(&r, 404, "not-found", NULL);
    const char *instance = e2e_jstr(p, "instance");
    size_t n = strlen(instance);
    if (n > 256) fail_msg("instance is %zu bytes", n);
    assert_true(n >= 250);
    assert_memory_equal(instance, path, n);
    free(path);

    /* Multi-byte characters are not split: a queue of 200 x U+00E9. */
    char name[512] = "", raw[2048] = "";
    for (int i = 0; i < 200; i++) strcat(name, "\xC3\xA9");
    snprintf(raw, sizeof raw, "/queues/%s/bogus", name);
    http(&r, "GET", raw, NULL);
    p = e2e_expect_problem(&r, 404, "not-found", NULL);
    instance = e2e_jstr(p, "instance");
    n = strlen(instance);
    assert_true(n <= 256 && n >= 253);
    assert_memory_equal(instance, raw, n);
    assert_null(strstr(instance, "\xEF\xBF\xBD"));   /* no U+FFFD from a cut sequence */
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Text is UTF-8 (docs/reference.md "Text")                                           */
/* ------------------------------------------------------------------------ */

/* Strictly well-formed UTF-8 (Unicode's table 3-7, byte ranges spelled out
 * here rather than decoded, so it does not share retryd's logic). */
static bool strict_utf8(const char *text, size_t len)
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
static rd_json_t *expect_strict_json(const e2e_response_t *r)
{
    if (!strict_utf8(r->body, r->body_len))
        fail_msg("the answer is not valid UTF-8: %.300s", r->body);
    return e2e_expect_json(r, 200);
}

static void test_text_must_be_utf8(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "utf8");
    char path[128];
    snprintf(path, sizeof path, "%s", messages_path(q));
    e2e_response_t r = { 0 };

    /* Raw bytes that are not UTF-8, and a lone surrogate escape: 422 on the
     * field, and nothing is stored. */
    static const char *const bad[] = { "\xff\xfe", "\xC0\xAF", "\xED\xA0\x80", "ok\xF4\x90\x80\x80",
                                       "\\ud800", "x\\udc00y" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"%s\"}", bad[i]));
        expect_field_error(expect_invalid(&r, path, 1), "payload", "invalid",
                           "payload must be valid UTF-8.");
        http(&r, "POST", path, e2e_fmt("{\"payload\":\"p\",\"idempotency_key\":\"%s\"}", bad[i]));
        expect_field_error(expect_invalid(&r, path, 1), "idempotency_key", "invalid", NULL);
    }
    long long id = enqueue(q, "{\"payload\":\"caf\xC3\xA9 \\ud83d\\ude00\"}");
    assert_int_equal(id, 1);
    char token[160];
    assert_int_equal(claim_one(q, 60, token, sizeof token), 1);
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"\xff oops\"}");
    expect_field_error(expect_invalid(&r, message_path(q, 1, "fail"), 1), "error", "invalid",
                       "error must be valid UTF-8.");
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"x\",\"retryable\":false}");
    e2e_expect_json(&r, 200);
    http(&r, "POST", e2e_fmt("/queues/%s/replay", q), "{\"error_contains\":\"\\udfff\"}");
    expect_field_error(expect_invalid(&r, NULL, 1), "error_contains", "invalid", NULL);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(expect_strict_json(&r), "payload"),
                        "caf\xC3\xA9 \xF0\x9F\x98\x80");

    /* A message written without the API (retryctl, redis-cli, or before this
     * check existed) with raw bytes in payload and last_error: every answer
     * that holds it is still strict JSON, the bad bytes as U+FFFD. */
    const char *base = e2e_fmt("%s:{%s}", g_prefix, q);
    redisReply *x = e2e_rcmd(g_redis, "FCALL " RD_FUNCTION("enqueue") " 1 %s %b 1 0 %s", base,
                             "\xff\xfe", (size_t)2, "");
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    freeReplyObject(x);
    assert_int_equal(claim_one(q, 60, token, sizeof token), 2);
    x = e2e_rcmd(g_redis, "FCALL " RD_FUNCTION("fail") " 2 %s %s:m:2 2 %s %b 0 -1", base, base,
                 token,
                 "bad \xC3(", (size_t)6);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    freeReplyObject(x);
    static const char *const listings[] = { "", "?status=dead" };
    for (size_t i = 0; i < 2; i++) {
        http(&r, "GET", e2e_fmt("%s%s", path, listings[i]), NULL);
        rd_json_t *doc = expect_strict_json(&r);
        rd_json_t *list = e2e_jget(doc, "messages");
        assert_int_equal(rd_json_array_size(list), 2);
        bool seen = false;
        for (size_t k = 0; k < 2; k++) {
            rd_json_t *m = rd_json_array_at(list, k);
            if (e2e_jint(m, "id") != 2) continue;
            seen = true;
            assert_string_equal(e2e_jstr(m, "payload"), "\xEF\xBF\xBD\xEF\xBF\xBD");
            assert_string_equal(e2e_jstr(m, "last_error"), "bad \xEF\xBF\xBD(");
        }
        assert_true(seen);
    }
    http(&r, "GET", message_path(q, 2, NULL), NULL);
    expect_strict_json(&r);
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    expect_strict_json(&r);
    http(&r, "POST", message_path(q, 2, "replay"), NULL);
    expect_strict_json(&r);
    http(&r, "POST", e2e_fmt("/queues/%s/claim", q), "{\"count\":5}");
    expect_strict_json(&r);
    e2e_response_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Settle and claim in one call (docs/reference.md "Settle and claim")                                   */
/* ------------------------------------------------------------------------ */

/* The settled list of a 200 {settled, messages}: n items, item i with
 * ids[i] and statuses[i], in request order. Returns messages. */
static rd_json_t *expect_settled(const e2e_response_t *r, size_t n, const long long *ids,
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

static void test_claim_with_settle(void **state)
{
    (void)state;
    char q[64], t1[160], t2[160];
    e2e_queue_name(q, sizeof q, "settle");
    for (int i = 0; i < 6; i++) enqueue(q, e2e_fmt("{\"payload\":\"m%d\"}", i + 1));
    char path[1024];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    assert_int_equal(claim_one(q, 30, t1, sizeof t1), 1);
    assert_int_equal(claim_one(q, 30, t2, sizeof t2), 2);
    e2e_response_t r = { 0 };

    /* Succeed 1 (with its token), fail 2, one unknown id: then claim the
     * next one, with its lease, in the answer. */
    http(&r, "POST", path,
         e2e_fmt("{\"lease_seconds\":7,\"settle\":[{\"id\":1,\"lease_token\":\"%s\","
                 "\"outcome\":\"succeeded\"},{\"id\":2,\"outcome\":\"failed\",\"error\":\"smtp "
                 "down\"},{\"id\":99,\"outcome\":\"succeeded\"}]}", t1));
    static const long long ids1[] = { 1, 2, 99 };
    static const char *const st1[] = { "succeeded", "pending", "not-found" };
    rd_json_t *list = expect_settled(&r, 3, ids1, st1);
    assert_int_equal(rd_json_array_size(list), 1);
    rd_json_t *m = rd_json_array_at(list, 0);
    expect_message(m, 3, q, "processing", 0, 3);
    assert_string_equal(e2e_jstr(m, "payload"), "m3");
    expect_lease(m, 7);
    char t3[160];
    SET(t3, e2e_jstr(m, "lease_token"));

    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "succeeded");
    http(&r, "GET", message_path(q, 2, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    expect_message(m, 2, q, "pending", 1, 3);
    assert_string_equal(e2e_jstr(m, "last_error"), "smtp down");
    assert_int_equal(e2e_jtime(m, "retry_after") - e2e_jtime(m, "updated_at"), 2000);

    /* Errors per item, and count: a wrong token, a settled one, a dead
     * letter with retryable false, then three claimed (4, 5, 6). */
    http(&r, "POST", path,
         e2e_fmt("{\"count\":3,\"settle\":[{\"id\":3,\"lease_token\":\"%s-not\","
                 "\"outcome\":\"succeeded\"},{\"id\":1,\"outcome\":\"succeeded\"},"
                 "{\"id\":3,\"lease_token\":\"%s\",\"outcome\":\"failed\",\"error\":\"poison\","
                 "\"retryable\":false}]}", t3, t3));
    static const long long ids2[] = { 3, 1, 3 };
    static const char *const st2[] = { "lease-mismatch", "invalid-state", "dead" };
    list = expect_settled(&r, 3, ids2, st2);
    assert_int_equal(rd_json_array_size(list), 3);
    for (size_t i = 0; i < 3; i++) {
        m = rd_json_array_at(list, i);
        expect_message(m, (long long)i + 4, q, "processing", 0, 3);
        expect_lease(m, DEFAULT_LEASE_S);
    }
    http(&r, "GET", message_path(q, 3, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    expect_message(m, 3, q, "dead", 1, 3);
    assert_string_equal(e2e_jstr(m, "last_error"), "poison");

    /* Settlements apply when nothing is claimable: 200 with no messages,
     * never 204. retry_after_seconds overrides the backoff. */
    http(&r, "POST", path,
         "{\"settle\":[{\"id\":4,\"outcome\":\"succeeded\"},{\"id\":5,\"outcome\":\"failed\","
         "\"error\":\"later\",\"retry_after_seconds\":60}]}");
    static const long long ids3[] = { 4, 5 };
    static const char *const st3[] = { "succeeded", "pending" };
    list = expect_settled(&r, 2, ids3, st3);
    assert_int_equal(rd_json_array_size(list), 0);
    http(&r, "GET", message_path(q, 5, NULL), NULL);
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jtime(m, "retry_after") - e2e_jtime(m, "updated_at"), 60000);

    /* The stats count them as succeed and fail do. */
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *totals = e2e_jget(e2e_expect_json(&r, 200), "totals");
    assert_int_equal(e2e_jint(totals, "succeeded"), 2);
    assert_int_equal(e2e_jint(totals, "failed"), 3);
    assert_int_equal(e2e_jint(totals, "dead"), 1);
    assert_int_equal(e2e_jint(totals, "claimed"), 6);

    /* Without settle the route is as it was: 204 when nothing is due. */
    http(&r, "POST", path, "{}");
    e2e_expect_no_content(&r);
    e2e_response_free(&r);
}

static bool redis_has_blocked_fcall(long long after_id);

/* A /metrics counter of the group's daemon. */
static long long daemon_counter(const char *name)
{
    e2e_response_t r = { 0 };
    http(&r, "GET", "/metrics", NULL);
    assert_int_equal(r.status, 200);
    const char *at = strstr(r.body, e2e_fmt("\n%s ", name));
    if (at == NULL) fail_msg("/metrics has no %s", name);
    long long v = strtoll(at + strlen(name) + 2, NULL, 10);
    e2e_response_free(&r);
    return v;
}

/* Asked on another connection after requests were sent to the group's
 * daemon, an answer it gives without Redis: by then it has read them all, so
 * they wait behind a call held in Redis rather than come after it. */
static void daemon_has_read_them(void)
{
    e2e_response_t r = { 0 };
    http(&r, "GET", "/healthz", NULL);
    assert_int_equal(r.status, 200);
    e2e_response_free(&r);
}

/* Redis holds write commands (the test's requests then meet in the daemon). */
static void hold_writes(void)
{
    freeReplyObject(e2e_rcmd(g_redis, "CLIENT PAUSE 5000 WRITE"));
    g_paused = true;
}

/* Once a call is held in Redis and the group's daemon has read what was
 * sent to it, Redis runs writes again. */
static void release_held_writes(void)
{
    long long deadline = e2e_mono_ms() + 3000;
    while (!redis_has_blocked_fcall(0)) {
        if (e2e_mono_ms() > deadline) fail_msg("no call reached Redis");
        e2e_pause_ms(10);
    }
    daemon_has_read_them();
    freeReplyObject(e2e_rcmd(g_redis, "CLIENT UNPAUSE"));
    g_paused = false;
}

/* The coalescer's counters of the group's daemon, to compare before and after. */
typedef struct sharing {
    long long requests, calls;
} sharing_t;

static sharing_t sharing_now(void)
{
    return (sharing_t){ daemon_counter("retryd_settle_claim_requests_total"),
                        daemon_counter("retryd_settle_claim_calls_total") };
}

/* n requests were sent since `before`, in fewer calls than requests.
 * Returns the calls. */
static long long expect_shared(sharing_t before, long long n)
{
    sharing_t now = sharing_now();
    assert_int_equal(now.requests - before.requests, n);
    long long calls = now.calls - before.calls;
    if (calls >= n) fail_msg("%lld requests took %lld calls: none were sent together", n, calls);
    return calls;
}

/* A settle-and-claim at the limits: 100 settlements (each a failure with
 * its error and retry_after, the longest argv a call has) and a count. The
 * call must fit the store's argument vector: with the claim's nonce it was
 * one argument past it, and the daemon aborted on an assertion. */
static void test_settle_claim_at_the_limits(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "settle100");
    for (int i = 0; i < 101; i++) enqueue(q, e2e_fmt("{\"payload\":\"m%d\"}", i + 1));
    char path[1024];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    e2e_response_t r = { 0 };
    http(&r, "POST", path, "{\"count\":100}");
    rd_json_t *doc = e2e_expect_json(&r, 200);
    assert_int_equal(rd_json_array_size(e2e_jget(doc, "messages")), 100);
    rd_buf_t body = RD_BUF_INIT;
    rd_buf_append(&body, "{\"count\":1,\"settle\":[", 21);
    for (int i = 1; i <= 100; i++) {
        const char *item = e2e_fmt("%s{\"id\":%d,\"outcome\":\"failed\",\"error\":\"e%d\","
                                   "\"retryable\":true,\"retry_after_seconds\":60}",
                                   i > 1 ? "," : "", i, i);
        rd_buf_append(&body, item, strlen(item));
    }
    rd_buf_append(&body, "]}", 3);
    http(&r, "POST", path, body.data);
    rd_buf_free(&body);
    static long long ids[100];
    static const char *st[100];
    for (int i = 0; i < 100; i++) { ids[i] = i + 1; st[i] = "pending"; }
    rd_json_t *list = expect_settled(&r, 100, ids, st);
    assert_int_equal(rd_json_array_size(list), 1);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "id"), 101);
    e2e_response_free(&r);
}

/* Settle-and-claim requests for one queue that come while a call for it is
 * in flight go together in one call (docs/coalescing.md), and each gets its
 * own answer: its settlements' outcomes, at most its count of messages, its
 * worker on its leases. Redis holds writes while eight requests arrive on
 * eight connections: one call goes out, the rest wait in the queue's line;
 * the one with another worker goes in a call of its own. */
static void test_settle_claims_sent_together(void **state)
{
    (void)state;
    enum { K = 8 };
    char q[64], tokens[K][160];
    e2e_queue_name(q, sizeof q, "together");
    for (int i = 0; i < 2 * K + 1; i++) enqueue(q, e2e_fmt("{\"payload\":\"t%d\"}", i + 1));
    for (int i = 0; i < K; i++) assert_int_equal(claim_one(q, 60, tokens[i], sizeof tokens[i]), i + 1);
    sharing_t before = sharing_now();

    hold_writes();
    e2e_conn_t c[K];
    const char *path = e2e_fmt("/queues/%s/claim", q);
    char path_copy[256];
    SET(path_copy, path);
    for (int i = 0; i < K; i++) {
        char body[512];
        if (i == 5)         /* another lease's token: nothing done to it */
            SET(body, e2e_fmt("{\"settle\":[{\"id\":%d,\"lease_token\":\"%s-not\","
                              "\"outcome\":\"succeeded\"}]}", i + 1, tokens[i]));
        else if (i == 6)    /* two messages */
            SET(body, e2e_fmt("{\"count\":2,\"settle\":[{\"id\":%d,\"lease_token\":\"%s\","
                              "\"outcome\":\"succeeded\"}]}", i + 1, tokens[i]));
        else if (i == 7)    /* its own worker: a call of its own */
            SET(body, e2e_fmt("{\"worker\":\"w-7\",\"settle\":[{\"id\":%d,\"lease_token\":"
                              "\"%s\",\"outcome\":\"succeeded\"}]}", i + 1, tokens[i]));
        else
            SET(body, e2e_fmt("{\"settle\":[{\"id\":%d,\"lease_token\":\"%s\","
                              "\"outcome\":\"succeeded\"}]}", i + 1, tokens[i]));
        assert_int_equal(e2e_conn_open(&c[i], g_daemon.port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", path_copy, NULL, body, strlen(body)), 0);
    }
    release_held_writes();

    bool seen[2 * K + 2] = { false };
    long long worker_msg = 0;
    for (int i = 0; i < K; i++) {
        e2e_response_t r = { 0 };
        assert_int_equal(e2e_read_response(&c[i], &r), 0);
        const long long id = i + 1;
        const char *status = i == 5 ? "lease-mismatch" : "succeeded";
        rd_json_t *messages = expect_settled(&r, 1, &id, &status);
        size_t want = i == 6 ? 2 : 1;
        if (rd_json_array_size(messages) != want)
            fail_msg("request %d got %zu messages: %s", i, rd_json_array_size(messages), r.body);
        for (size_t j = 0; j < want; j++) {
            rd_json_t *m = rd_json_array_at(messages, j);
            long long got = e2e_jint(m, "id");
            assert_in_range(got, K + 1, 2 * K + 1);
            assert_false(seen[got]);
            seen[got] = true;
            if (i == 7) {
                worker_msg = got;
                assert_string_equal(e2e_jstr(m, "worker"), "w-7");
            } else {
                e2e_jnull(m, "worker");
            }
        }
        e2e_response_free(&r);
        e2e_conn_close(&c[i]);
    }
    e2e_response_t r = { 0 };
    http(&r, "GET", message_path(q, worker_msg, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "worker"), "w-7");
    http(&r, "GET", message_path(q, 6, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "processing");
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *totals = e2e_jget(e2e_expect_json(&r, 200), "totals");
    assert_int_equal(e2e_jint(totals, "succeeded"), K - 1);
    assert_int_equal(e2e_jint(totals, "claimed"), K + K + 1);   /* all of them */
    e2e_response_free(&r);

    assert_true(expect_shared(before, K) >= 2);   /* w-7 cannot share a call */
}

/* A request sent together with others still gets a message when one is
 * claimable (docs/reference.md "Bounded work and replies": a batch claim is cut by bytes, "always at least one
 * message"): five requests of one message each share a call whose claim the
 * library cuts at 4 MiB of payloads, four messages of 1 MB; the fifth, which
 * got none of them, still gets the sixth message, as alone it would. */
static void test_settle_claims_together_each_get_one(void **state)
{
    (void)state;
    enum { K = 6, PAYLOAD = 1000000 };
    char q[64];
    e2e_queue_name(q, sizeof q, "together-big");
    char *body = malloc(PAYLOAD + 64);
    for (int i = 0; i < K; i++) {
        int at = snprintf(body, 64, "{\"payload\":\"%d", i);
        memset(body + at, 'x', PAYLOAD);
        strcpy(body + at + PAYLOAD, "\"}");
        enqueue(q, body);
    }
    free(body);
    sharing_t before = sharing_now();

    hold_writes();
    e2e_conn_t c[K];
    char path[256];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    for (int i = 0; i < K; i++) {
        char req[128];
        SET(req, e2e_fmt("{\"settle\":[{\"id\":%d,\"outcome\":\"succeeded\"}]}", 1000 + i));
        assert_int_equal(e2e_conn_open(&c[i], g_daemon.port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", path, NULL, req, strlen(req)), 0);
    }
    release_held_writes();

    bool seen[K + 1] = { false };
    for (int i = 0; i < K; i++) {
        e2e_response_t r = { 0 };
        assert_int_equal(e2e_read_response(&c[i], &r), 0);
        const long long id = 1000 + i;
        const char *status = "not-found";
        rd_json_t *messages = expect_settled(&r, 1, &id, &status);
        if (rd_json_array_size(messages) != 1)
            fail_msg("request %d got %zu messages while one was claimable", i,
                     rd_json_array_size(messages));
        long long got = e2e_jint(rd_json_array_at(messages, 0), "id");
        assert_in_range(got, 1, K);
        assert_false(seen[got]);
        seen[got] = true;
        e2e_response_free(&r);
        e2e_conn_close(&c[i]);
    }
    expect_shared(before, K);
}

/* Plain claims (no settle, no wait) take the same way: eight of them while
 * Redis holds writes, one asking for three; each gets its own messages,
 * none twice, in fewer calls than requests; the 204 of an empty queue too. */
static void test_claims_sent_together(void **state)
{
    (void)state;
    enum { K = 8 };
    char q[64];
    e2e_queue_name(q, sizeof q, "claimtogether");
    for (int i = 0; i < K + 2; i++) enqueue(q, e2e_fmt("{\"payload\":\"c%d\"}", i + 1));
    sharing_t before = sharing_now();

    hold_writes();
    e2e_conn_t c[K];
    char path[256];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    for (int i = 0; i < K; i++) {
        const char *body = i == 3 ? "{\"count\":3}" : "{}";
        assert_int_equal(e2e_conn_open(&c[i], g_daemon.port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", path, NULL, body, strlen(body)), 0);
    }
    release_held_writes();

    bool seen[K + 3] = { false };
    int claimed = 0;
    for (int i = 0; i < K; i++) {
        e2e_response_t r = { 0 };
        assert_int_equal(e2e_read_response(&c[i], &r), 0);
        if (r.status == 204) {
            e2e_response_free(&r);
            e2e_conn_close(&c[i]);
            continue;
        }
        rd_json_t *doc = e2e_expect_json(&r, 200);
        rd_json_t *list = i == 3 ? e2e_jget(doc, "messages") : NULL;
        size_t n = list ? rd_json_array_size(list) : 1;
        assert_in_range(n, 1, i == 3 ? 3 : 1);
        for (size_t j = 0; j < n; j++) {
            rd_json_t *m = list ? rd_json_array_at(list, j) : doc;
            assert_string_equal(e2e_jstr(m, "status"), "processing");
            long long id = e2e_jint(m, "id");
            assert_in_range(id, 1, K + 2);
            assert_false(seen[id]);
            seen[id] = true;
            claimed++;
        }
        e2e_response_free(&r);
        e2e_conn_close(&c[i]);
    }
    /* Ten messages for ten asked: every request got what it asked for. */
    assert_int_equal(claimed, K + 2);
    expect_shared(before, K);

    /* Nothing left: a claim alone is still answered 204. */
    e2e_response_t r = { 0 };
    http(&r, "POST", path, "{}");
    e2e_expect_no_content(&r);
    e2e_response_free(&r);
}

/* A client that vanishes (RST) while its settle-and-claim waits in the
 * queue's line loses nothing: its settlement still applies (it was sent),
 * the message the shared call leased for it goes back (release, no failure
 * counted) and the next claim gets it; the others get theirs. */
static void test_vanished_client_in_line_loses_nothing(void **state)
{
    (void)state;
    enum { K = 3 };
    char q[64], tokens[K][160];
    e2e_queue_name(q, sizeof q, "together-gone");
    for (int i = 0; i < 2 * K; i++) enqueue(q, e2e_fmt("{\"payload\":\"g%d\"}", i + 1));
    for (int i = 0; i < K; i++) assert_int_equal(claim_one(q, 60, tokens[i], sizeof tokens[i]), i + 1);

    hold_writes();
    e2e_conn_t c[K];
    char path[256];
    SET(path, e2e_fmt("/queues/%s/claim", q));
    for (int i = 0; i < K; i++) {
        char body[512];
        SET(body, e2e_fmt("{\"settle\":[{\"id\":%d,\"lease_token\":\"%s\","
                          "\"outcome\":\"succeeded\"}]}", i + 1, tokens[i]));
        assert_int_equal(e2e_conn_open(&c[i], g_daemon.port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", path, NULL, body, strlen(body)), 0);
    }
    daemon_has_read_them();
    struct linger reset = { 1, 0 };
    assert_int_equal(setsockopt(c[1].fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset), 0);
    e2e_conn_close(&c[1]);   /* RST while its request waits */
    release_held_writes();

    bool seen[2 * K + 1] = { false };
    for (int i = 0; i < K; i += 2) {
        e2e_response_t r = { 0 };
        assert_int_equal(e2e_read_response(&c[i], &r), 0);
        const long long id = i + 1;
        const char *status = "succeeded";
        rd_json_t *messages = expect_settled(&r, 1, &id, &status);
        assert_int_equal(rd_json_array_size(messages), 1);
        long long got = e2e_jint(rd_json_array_at(messages, 0), "id");
        assert_in_range(got, K + 1, 2 * K);
        seen[got] = true;
        e2e_response_free(&r);
        e2e_conn_close(&c[i]);
    }
    /* The vanished client's settlement stands; its lease is handed back. */
    e2e_response_t r = { 0 };
    http(&r, "GET", message_path(q, 2, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "succeeded");
    long long deadline = e2e_mono_ms() + 5000;
    for (;;) {
        redisReply *x = e2e_rcmd(g_redis, "ZCARD %s:{%s}:3:processing", g_prefix, q);
        long long leased = x->integer;
        freeReplyObject(x);
        if (leased == 2) break;
        if (e2e_mono_ms() > deadline) fail_msg("%lld leases, want 2: the vanished one's was kept", leased);
        e2e_pause_ms(10);
    }
    long long left = 0;
    for (long long id = K + 1; id <= 2 * K; id++) if (!seen[id]) left = id;
    assert_int_equal(claim_one(q, 60, NULL, 0), left);
    http(&r, "GET", e2e_fmt("/queues/%s/stats", q), NULL);
    rd_json_t *totals = e2e_jget(e2e_expect_json(&r, 200), "totals");
    assert_int_equal(e2e_jint(totals, "succeeded"), K);
    assert_int_equal(e2e_jint(totals, "failed"), 0);
    e2e_response_free(&r);
}

static void test_claim_settle_validation(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "settleval");
    enqueue(q, "{\"payload\":\"x\"}");
    enqueue(q, "{\"payload\":\"y\"}");
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    char path[128];
    snprintf(path, sizeof path, "/queues/%s/claim", q);
    e2e_response_t r = { 0 };
    const struct { const char *body, *field, *code, *message; } cases[] = {
        { "{\"settle\":[]}", "settle", "invalid", NULL },
        { "{\"settle\":{\"id\":1}}", "settle", "invalid", NULL },
        { "{\"settle\":\"1\"}", "settle", "invalid", NULL },
        { "{\"settle\":[1]}", "settle[0]", "invalid", NULL },
        { "{\"settle\":[{\"outcome\":\"succeeded\"}]}", "settle[0].id", "required", NULL },
        { "{\"settle\":[{\"id\":0,\"outcome\":\"succeeded\"}]}", "settle[0].id", "invalid", NULL },
        { "{\"settle\":[{\"id\":\"1\",\"outcome\":\"succeeded\"}]}", "settle[0].id", "invalid",
          NULL },
        { "{\"settle\":[{\"id\":1}]}", "settle[0].outcome", "required", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"done\"}]}", "settle[0].outcome", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":true}]}", "settle[0].outcome", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\"}]}", "settle[0].error", "required",
          "error is required." },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":42}]}", "settle[0].error",
          "invalid", "error must be a string." },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"\xff oops\"}]}",
          "settle[0].error", "invalid", "error must be valid UTF-8." },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"x\\udc00y\"}]}",
          "settle[0].error", "invalid", "error must be valid UTF-8." },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"a\\u0000b\"}]}",
          "settle[0].error", "invalid", "error must not contain U+0000." },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e\",\"retryable\":\"no\"}]}",
          "settle[0].retryable", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e\","
          "\"retry_after_seconds\":-1}]}", "settle[0].retry_after_seconds", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e\","
          "\"retry_after_seconds\":2592001}]}", "settle[0].retry_after_seconds", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"lease_token\":\"\",\"outcome\":\"succeeded\"}]}",
          "settle[0].lease_token", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"lease_token\":7,\"outcome\":\"succeeded\"}]}",
          "settle[0].lease_token", "invalid", NULL },
        { "{\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"},{\"id\":2,\"outcome\":\"x\"}]}",
          "settle[1].outcome", "invalid", NULL },
        { "{\"count\":0,\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"}]}", "count", "invalid",
          NULL },
        { "{\"wait_seconds\":31,\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"}]}",
          "wait_seconds", "invalid", NULL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http(&r, "POST", path, cases[i].body);
        if (r.status != 422) fail_msg("case %zu: %d %s", i, r.status, r.body);
        expect_field_error(expect_invalid(&r, path, 1), cases[i].field, cases[i].code,
                           cases[i].message);
    }
    /* 101 items; and several bad fields, each named. */
    char big[8192] = "{\"settle\":[";
    for (int i = 0; i < 101; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s{\"id\":%d,\"outcome\":\"succeeded\"}",
                 i ? "," : "", i + 1);
    snprintf(big + strlen(big), sizeof big - strlen(big), "]}");
    http(&r, "POST", path, big);
    expect_field_error(expect_invalid(&r, path, 1), "settle", "invalid", NULL);
    http(&r, "POST", path,
         "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"retryable\":1},{\"id\":-2}]}");
    rd_json_t *errors = expect_invalid(&r, path, 4);
    expect_field_error(errors, "settle[0].error", "required", NULL);
    expect_field_error(errors, "settle[0].retryable", "invalid", NULL);
    expect_field_error(errors, "settle[1].id", "invalid", NULL);
    expect_field_error(errors, "settle[1].outcome", "required", NULL);
    http(&r, "POST", path, "{\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"}]");
    e2e_expect_problem(&r, 400, "malformed-request", path);

    /* Nothing was settled and nothing claimed by any of them. */
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    expect_message(m, 1, q, "processing", 0, 3);
    char held[160];
    assert_string_equal(e2e_message_field(g_redis, e2e_fmt("%s:{%s}", g_prefix, q), 1,
                                          "lease_token", held, sizeof held), token);
    http(&r, "GET", message_path(q, 2, NULL), NULL);
    expect_message(e2e_expect_json(&r, 200), 2, q, "pending", 0, 3);
    /* A success takes no more fields than the succeed route: error and the
     * failure options are ignored there. */
    http(&r, "POST", path,
         "{\"settle\":[{\"id\":1,\"outcome\":\"succeeded\",\"error\":7,\"retryable\":\"x\"}]}");
    static const long long ids[] = { 1 };
    static const char *const st[] = { "succeeded" };
    assert_int_equal(rd_json_array_size(expect_settled(&r, 1, ids, st)), 1);
    e2e_response_free(&r);
}

/* With wait_seconds the settlements apply at once; then the claim waits as
 * a long-poll claim does, and answers with what arrived, or with none. */
static void test_claim_settle_long_poll(void **state)
{
    (void)state;
    char q[64], token[160];
    e2e_queue_name(q, sizeof q, "settlewait");
    enqueue(q, "{\"payload\":\"first\"}");
    assert_int_equal(claim_one(q, 30, token, sizeof token), 1);
    char path[128];
    snprintf(path, sizeof path, "/queues/%s/claim", q);
    static const long long ids[] = { 1 };
    static const char *const st[] = { "succeeded" };

    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_daemon.port), 0);
    const char *body = e2e_fmt("{\"wait_seconds\":10,\"lease_seconds\":9,\"settle\":[{\"id\":1,"
                               "\"lease_token\":\"%s\",\"outcome\":\"succeeded\"}]}", token);
    long long t0 = e2e_mono_ms();
    assert_int_equal(e2e_send_request(&c, "POST", path, NULL, body, strlen(body)), 0);
    /* Settled while the claim waits. */
    for (;;) {
        char status[32];
        bool done = strcmp(e2e_message_field(g_redis, e2e_fmt("%s:{%s}", g_prefix, q), 1,
                                             "status", status, sizeof status), "succeeded") == 0;
        if (done) break;
        if (e2e_mono_ms() - t0 > 5000) fail_msg("message 1 was not settled within 5 s");
        e2e_pause_ms(5);
    }
    enqueue(q, "{\"payload\":\"second\"}");
    e2e_response_t r = { 0 };
    assert_int_equal(e2e_read_response(&c, &r), 0);
    assert_true(e2e_mono_ms() - t0 < 5000);
    rd_json_t *list = expect_settled(&r, 1, ids, st);
    assert_int_equal(rd_json_array_size(list), 1);
    rd_json_t *m = rd_json_array_at(list, 0);
    expect_message(m, 2, q, "processing", 0, 3);
    expect_lease(m, 9);

    /* Nothing arrives: the answer comes when the wait is over, 200 with no
     * messages, and the settlement stands. */
    SET(token, e2e_jstr(m, "lease_token"));
    e2e_response_free(&r);
    body = e2e_fmt("{\"wait_seconds\":1,\"settle\":[{\"id\":2,\"lease_token\":\"%s\","
                   "\"outcome\":\"failed\",\"error\":\"e\",\"retry_after_seconds\":60}]}", token);
    t0 = e2e_mono_ms();
    assert_int_equal(e2e_request(&c, "POST", path, NULL, body, strlen(body), &r), 0);
    assert_true(e2e_mono_ms() - t0 >= 900);
    static const long long ids2[] = { 2 };
    static const char *const st2[] = { "pending" };
    assert_int_equal(rd_json_array_size(expect_settled(&r, 1, ids2, st2)), 0);
    e2e_response_free(&r);
    e2e_conn_close(&c);
}

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
         "{\"max_retries\":11,\"backoff\":{\"base_seconds\":0,\"jitter\":\"half\"},"
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

/* GET /metrics into r until its text has line: the per-queue series come
 * from a snapshot at most RD_METRICS_SNAPSHOT_MS old (docs/design.md "Listing"), so
 * a change shows within that (bounded: 2 s more, then the test fails). */
static void metrics_with(e2e_response_t *r, const char *line)
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
/* Connections                                                              */
/* ------------------------------------------------------------------------ */

static void test_keep_alive_50_requests(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "keepalive");
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_daemon.port), 0);
    int fd = c.fd;
    e2e_response_t r = { 0 };
    for (int i = 0; i < 50; i++) {
        char body[1024];
        SET(body, e2e_fmt("{\"payload\":\"k%d\"}", i));
        int rc = i % 2 == 0
            ? e2e_request(&c, "POST", messages_path(q), NULL, body, strlen(body), &r)
            : e2e_request(&c, "GET", message_path(q, i / 2 + 1, NULL), NULL, NULL, 0, &r);
        if (rc != 0) fail_msg("request %d on the kept-alive connection failed", i);
        rd_json_t *m = e2e_expect_json(&r, i % 2 == 0 ? 201 : 200);
        assert_int_equal(e2e_jint(m, "id"), i / 2 + 1);
        assert_string_equal(e2e_jstr(m, "payload"), e2e_fmt("k%d", i - i % 2));
        assert_true(strcasecmp(r.connection, "close") != 0);
        assert_int_equal(c.fd, fd);
        e2e_response_free(&r);
    }
    e2e_conn_close(&c);
}

static void test_pipelined_requests_answered_in_order(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "pipeline");
    size_t len1 = 0, len2 = 0, len3 = 0;
    char *a = e2e_format_request("POST", messages_path(q), NULL, "{\"payload\":\"first\"}", 19,
                                 &len1);
    char *b = e2e_format_request("POST", messages_path(q), NULL, "{\"payload\":\"second\"}", 20,
                                 &len2);
    char *g = e2e_format_request("GET", message_path(q, 1, NULL), NULL, NULL, 0, &len3);
    char *all = malloc(len1 + len2 + len3);
    memcpy(all, a, len1);
    memcpy(all + len1, b, len2);
    memcpy(all + len1 + len2, g, len3);

    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_daemon.port), 0);
    assert_int_equal(e2e_send_all(c.fd, all, len1 + len2 + len3), 0);
    free(a);
    free(b);
    free(g);
    free(all);

    e2e_response_t r = { 0 };
    assert_int_equal(e2e_read_response(&c, &r), 0);
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_string_equal(e2e_jstr(m, "payload"), "first");
    e2e_response_free(&r);
    assert_int_equal(e2e_read_response(&c, &r), 0);
    m = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(m, "id"), 2);
    assert_string_equal(e2e_jstr(m, "payload"), "second");
    e2e_response_free(&r);
    assert_int_equal(e2e_read_response(&c, &r), 0);
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_string_equal(e2e_jstr(m, "payload"), "first");
    assert_int_equal(c.in_len, 0);
    e2e_response_free(&r);
    e2e_conn_close(&c);
}

/* ------------------------------------------------------------------------ */
/* Concurrency                                                              */
/* ------------------------------------------------------------------------ */

enum { WORKERS = 8, MESSAGES = 400 };

typedef struct worker {
    pthread_t thread;
    const char *queue;
    atomic_int *claims;           /* per id, shared */
    int done;                     /* messages this worker settled */
    char error[256];              /* first problem seen, "" when none */
} worker_t;

/* Claims and succeeds until the queue answers 204. No cmocka asserts here:
 * problems go to w->error for the main thread to report. */
static void *worker_main(void *arg)
{
    worker_t *w = arg;
    e2e_conn_t c;
    e2e_response_t r = { 0 };
    char claim[128], token[160];
    snprintf(claim, sizeof claim, "/queues/%s/claim", w->queue);
    const char *lease = "{\"lease_seconds\":60}";
    if (e2e_conn_open(&c, g_daemon.port) != 0) {
        snprintf(w->error, sizeof w->error, "connect: %s", strerror(errno));
        return NULL;
    }
    for (;;) {
        /* A server may close after any response; that is not this test's concern. */
        if (c.fd < 0 && e2e_conn_open(&c, g_daemon.port) != 0) {
            snprintf(w->error, sizeof w->error, "reconnect: %s", strerror(errno));
            break;
        }
        if (e2e_request(&c, "POST", claim, NULL, lease, strlen(lease), &r) != 0) {
            snprintf(w->error, sizeof w->error, "claim: no response");
            break;
        }
        if (r.status == 204) break;
        long long id = 0;
        const char *tok = r.json ? rd_json_string(rd_json_get(r.json, "lease_token")) : NULL;
        if (r.status != 200 || tok == NULL || !rd_json_integer(rd_json_get(r.json, "id"), &id) ||
            id < 1 || id > MESSAGES) {
            snprintf(w->error, sizeof w->error, "claim: %d %.200s", r.status, r.body);
            break;
        }
        atomic_fetch_add(&w->claims[id], 1);
        snprintf(token, sizeof token, "{\"lease_token\":\"%s\"}", tok);
        e2e_response_free(&r);
        char succeed[160];
        snprintf(succeed, sizeof succeed, "/queues/%s/messages/%lld/succeed", w->queue, id);
        const char *status = NULL;
        if (c.fd < 0) e2e_conn_open(&c, g_daemon.port);
        if (e2e_request(&c, "POST", succeed, NULL, token, strlen(token), &r) == 0 && r.json)
            status = rd_json_string(rd_json_get(r.json, "status"));
        if (r.status != 200 || status == NULL || strcmp(status, "succeeded") != 0) {
            snprintf(w->error, sizeof w->error, "succeed %lld: %d %.200s", id, r.status,
                     r.body ? r.body : "");
            break;
        }
        e2e_response_free(&r);
        w->done++;
    }
    e2e_response_free(&r);
    e2e_conn_close(&c);
    return NULL;
}

static void test_concurrent_claims_claim_each_message_once(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "concurrent");
    for (int i = 1; i <= MESSAGES; i++)
        assert_int_equal(enqueue(q, e2e_fmt("{\"payload\":\"job %d\"}", i)), i);

    static atomic_int claims[MESSAGES + 1];
    for (int i = 0; i <= MESSAGES; i++) atomic_init(&claims[i], 0);
    worker_t workers[WORKERS];
    memset(workers, 0, sizeof workers);
    for (int i = 0; i < WORKERS; i++) {
        workers[i].queue = q;
        workers[i].claims = claims;
        assert_int_equal(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]), 0);
    }
    /* Join them all before asserting: a failed test must leave no thread. */
    for (int i = 0; i < WORKERS; i++) pthread_join(workers[i].thread, NULL);
    int done = 0;
    for (int i = 0; i < WORKERS; i++) {
        if (workers[i].error[0]) fail_msg("worker %d: %s", i, workers[i].error);
        done += workers[i].done;
    }
    assert_int_equal(done, MESSAGES);
    for (int id = 1; id <= MESSAGES; id++) {
        if (atomic_load(&claims[id]) != 1)
            fail_msg("message %d was claimed %d times", id, atomic_load(&claims[id]));
    }
    redisReply *z = e2e_rcmd(g_redis, "ZCARD %s:{%s}:3:succeeded", g_prefix, q);
    assert_int_equal(z->type, REDIS_REPLY_INTEGER);
    assert_int_equal(z->integer, MESSAGES);
    freeReplyObject(z);
    z = e2e_rcmd(g_redis, "LLEN %s:{%s}:3:ready", g_prefix, q);
    assert_int_equal(z->integer, 0);
    freeReplyObject(z);
}

/* ------------------------------------------------------------------------ */
/* Redis faults                                                             */
/* ------------------------------------------------------------------------ */

static void test_function_flush_is_recovered(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "flush");
    assert_int_equal(enqueue(q, "{\"payload\":\"before\"}"), 1);
    redisReply *x = e2e_rcmd(g_redis, "FUNCTION FLUSH SYNC");
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);

    e2e_response_t r = { 0 };
    http(&r, "POST", messages_path(q), "{\"payload\":\"after\"}");
    expect_message(e2e_expect_json(&r, 201), 2, q, "pending", 0, 3);
    http(&r, "GET", message_path(q, 1, NULL), NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "before");

    x = e2e_rcmd(g_redis, "FUNCTION LIST LIBRARYNAME " RD_LIBRARY_NAME);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_int_equal(x->elements, 1);
    freeReplyObject(x);
    e2e_response_free(&r);
}

static void test_client_kill_is_recovered(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "kill");
    assert_int_equal(enqueue(q, "{\"payload\":\"before\"}"), 1);
    redisReply *x = e2e_rcmd(g_redis, "CLIENT KILL TYPE normal");
    assert_int_equal(x->type, REDIS_REPLY_INTEGER);
    assert_true(x->integer >= 1);   /* at least the daemon's link */
    freeReplyObject(x);

    /* Meanwhile every answer is 503 (before the send, or unknown outcome). */
    e2e_response_t r = { 0 };
    long long deadline = e2e_mono_ms() + 10000;
    for (;;) {
        http(&r, "POST", messages_path(q), "{\"payload\":\"after\"}");
        if (r.status == 201) break;
        if (r.status != 503) fail_msg("expected 201 or 503, got %d: %s", r.status, r.body);
        if (strstr(r.body, "backend-unavailable"))
            e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
        else e2e_expect_problem(&r, 503, "outcome-unknown", NULL);
        assert_true(r.retry_after[0] != '\0');
        if (e2e_mono_ms() > deadline) fail_msg("still 503 10 s after CLIENT KILL");
        e2e_pause_ms(20);
    }
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_true(e2e_jint(m, "id") >= 2);
    assert_int_equal(e2e_status_once(g_daemon.port, "GET", "/readyz"), 200);
    e2e_response_free(&r);
}

static void test_no_redis_is_503_and_keeps_running(void **state)
{
    (void)state;
    char prefix[80], url[64];
    snprintf(prefix, sizeof prefix, "%s-down", g_prefix);
    int dead_port = e2e_free_port();
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", dead_port);
    /* start_daemon's --redis is overridden by the later flag. */
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--redis", url, NULL), 0);
    e2e_response_t r = { 0 };

    char path[1024];
    SET(path, messages_path("down"));
    http_to(g_side.port, &r, "POST", path, "{\"payload\":\"x\"}", 15);
    e2e_expect_problem(&r, 503, "backend-unavailable", path);
    if (r.retry_after[0] == '\0' || atoi(r.retry_after) < 1)
        fail_msg("Retry-After \"%s\" is not a positive number of seconds", r.retry_after);

    http_to(g_side.port, &r, "POST", "/queues/down/claim", NULL, 0);
    e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
    http_to(g_side.port, &r, "GET", "/queues/down/messages/1", NULL, 0);
    e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
    http_to(g_side.port, &r, "GET", "/readyz", NULL, 0);
    assert_int_equal(r.status, 503);
    http_to(g_side.port, &r, "GET", "/healthz", NULL, 0);
    e2e_expect_json(&r, 200);
    /* Validation needs no Redis. */
    http_to(g_side.port, &r, "POST", path, "{}", 2);
    expect_invalid(&r, path, 1);

    assert_true(e2e_daemon_alive(&g_side));
    http_to(g_side.port, &r, "GET", "/healthz", NULL, 0);
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* Starts a private redis-server on port (no persistence) and waits until it
 * answers PING. Returns its pid, or -1. */
static pid_t start_redis(int port)
{
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        freopen("/dev/null", "w", stdout);
        execlp("redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--dir", "/tmp", (char *)NULL);
        _exit(127);
    }
    long long deadline = e2e_mono_ms() + READY_TIMEOUT_MS;
    while (e2e_mono_ms() < deadline) {
        if (e2e_redis_pong(port, 1000)) return pid;
        if (waitpid(pid, NULL, WNOHANG) == pid) return -1;
        e2e_pause_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* Redis that was not there at start-up is picked up once it is (docs/reference.md "Daemon":
 * reconnect with backoff, 503 meanwhile). */
static void test_redis_started_later_is_picked_up(void **state)
{
    (void)state;
    char prefix[80], url[64];
    snprintf(prefix, sizeof prefix, "%s-late", g_prefix);
    int redis_port = e2e_free_port();
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", redis_port);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--redis", url, NULL), 0);
    e2e_response_t r = { 0 };
    http_to(g_side.port, &r, "POST", "/queues/late/messages", "{\"payload\":\"x\"}", 15);
    e2e_expect_problem(&r, 503, "backend-unavailable", NULL);

    g_side_redis = start_redis(redis_port);
    assert_true(g_side_redis > 0);
    long long started = e2e_mono_ms();
    for (;;) {
        http_to(g_side.port, &r, "POST", "/queues/late/messages", "{\"payload\":\"x\"}", 15);
        if (r.status == 201) break;
        e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
        if (e2e_mono_ms() - started > 10000) fail_msg("still 503 10 s after Redis came up");
        e2e_pause_ms(50);
    }
    expect_message(e2e_expect_json(&r, 201), 1, "late", "pending", 0, 3);
    http_to(g_side.port, &r, "GET", "/readyz", NULL, 0);
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
    kill(g_side_redis, SIGTERM);
    waitpid(g_side_redis, NULL, 0);
    g_side_redis = 0;
}

/* The highest client id Redis has handed out so far. */
static long long redis_last_client_id(void)
{
    redisReply *x = e2e_rcmd(g_redis, "CLIENT ID");
    long long id = x->integer;
    freeReplyObject(x);
    return id;
}

/* True when a client newer than after_id is blocked in an FCALL. */
static bool redis_has_blocked_fcall(long long after_id)
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

/* SIGTERM to the test's own daemon; returns once its listener is closed
 * (then the signal has been handled). */
static void sigterm_side_daemon(void)
{
    assert_int_equal(kill(g_side.pid, SIGTERM), 0);
    long long deadline = e2e_mono_ms() + 3000;
    for (;;) {
        int fd = e2e_connect(g_side.port);
        if (fd < 0) break;
        close(fd);
        if (e2e_mono_ms() > deadline) fail_msg("still accepting 3 s after SIGTERM");
        e2e_pause_ms(10);
    }
}

static void test_shutdown_answers_in_flight_request(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-stop", g_prefix);
    long long last_client = redis_last_client_id();
    /* A long tick keeps this daemon's timer out of Redis during the test. */
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, "--tick-ms", "60000",
                                  NULL), 0);
    e2e_response_t r = { 0 };
    http_to(g_side.port, &r, "POST", "/queues/stop/messages", "{\"payload\":\"last\"}", 18);
    e2e_expect_json(&r, 201);

    /* Hold write commands in Redis so the claim is provably in flight. */
    redisReply *x = e2e_rcmd(g_redis, "CLIENT PAUSE 5000 WRITE");
    freeReplyObject(x);
    g_paused = true;
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_side.port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/stop/claim", NULL,
                                      "{\"lease_seconds\":5}", 19), 0);
    long long deadline = e2e_mono_ms() + 3000;
    while (!redis_has_blocked_fcall(last_client)) {
        if (e2e_mono_ms() > deadline) fail_msg("the claim never reached Redis");
        e2e_pause_ms(10);
    }

    sigterm_side_daemon();
    x = e2e_rcmd(g_redis, "CLIENT UNPAUSE");
    freeReplyObject(x);
    g_paused = false;

    e2e_response_t claimed = { 0 };
    if (e2e_read_response(&c, &claimed) != 0) fail_msg("the in-flight claim got no response");
    rd_json_t *m = e2e_expect_json(&claimed, 200);
    expect_message(m, 1, "stop", "processing", 0, 3);
    assert_string_equal(e2e_jstr(m, "payload"), "last");
    expect_lease(m, 5);
    e2e_response_free(&claimed);
    e2e_response_free(&r);
    e2e_conn_close(&c);
    e2e_conn_close(&g_conn);
    /* SIGTERM was sent above: only wait (the 5 s count from here is generous). */
    assert_int_equal(e2e_daemon_stop(&g_side, 0, E2E_STOP_TIMEOUT_MS), 0);
}

/* SIGTERM while settle-and-claim requests wait in their queue's line behind
 * a call in flight (docs/coalescing.md): every one is still carried out and
 * answered, then the daemon exits 0. */
static void test_shutdown_answers_settle_claims_in_line(void **state)
{
    (void)state;
    enum { K = 4 };
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-stopline", g_prefix);
    long long last_client = redis_last_client_id();
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true, "--tick-ms", "60000",
                                  NULL), 0);
    e2e_response_t r = { 0 };
    for (int i = 0; i < K; i++) {
        http_to(g_side.port, &r, "POST", "/queues/line/messages", "{\"payload\":\"p\"}", 15);
        e2e_expect_json(&r, 201);
    }
    e2e_response_free(&r);

    freeReplyObject(e2e_rcmd(g_redis, "CLIENT PAUSE 5000 WRITE"));
    g_paused = true;
    e2e_conn_t c[K];
    for (int i = 0; i < K; i++) {
        char body[128];
        SET(body, e2e_fmt("{\"settle\":[{\"id\":%d,\"outcome\":\"succeeded\"}]}", 100 + i));
        assert_int_equal(e2e_conn_open(&c[i], g_side.port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", "/queues/line/claim", NULL, body,
                                          strlen(body)), 0);
    }
    long long deadline = e2e_mono_ms() + 3000;
    while (!redis_has_blocked_fcall(last_client)) {
        if (e2e_mono_ms() > deadline) fail_msg("no call reached Redis");
        e2e_pause_ms(10);
    }
    /* An answer the daemon gives without Redis, asked after the requests
     * were sent: it has read them all by then. */
    http_to(g_side.port, &r, "GET", "/healthz", NULL, 0);
    assert_int_equal(r.status, 200);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    sigterm_side_daemon();
    freeReplyObject(e2e_rcmd(g_redis, "CLIENT UNPAUSE"));
    g_paused = false;

    bool seen[K + 1] = { false };
    for (int i = 0; i < K; i++) {
        e2e_response_t a = { 0 };
        if (e2e_read_response(&c[i], &a) != 0) fail_msg("request %d got no response", i);
        const long long id = 100 + i;
        const char *status = "not-found";
        rd_json_t *messages = expect_settled(&a, 1, &id, &status);
        assert_int_equal(rd_json_array_size(messages), 1);
        long long got = e2e_jint(rd_json_array_at(messages, 0), "id");
        assert_in_range(got, 1, K);
        assert_false(seen[got]);
        seen[got] = true;
        e2e_response_free(&a);
        e2e_conn_close(&c[i]);
    }
    assert_int_equal(e2e_daemon_stop(&g_side, 0, E2E_STOP_TIMEOUT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* History and worker (docs/reference.md "History")                                            */
/* ------------------------------------------------------------------------ */

/* Entry i of m's history: a failure with these fields (worker NULL: null). */
static void expect_failure_entry(const rd_json_t *m, size_t i, long long attempt,
                                 const char *error, bool lease_expired, const char *worker)
{
    rd_json_t *h = e2e_jget(m, "history");
    assert_true(rd_json_is_array(h));
    assert_true(i < rd_json_array_size(h));
    rd_json_t *e = rd_json_array_at(h, i);
    assert_int_equal(e2e_jint(e, "attempt"), attempt);
    assert_string_equal(e2e_jstr(e, "error"), error);
    assert_true(e2e_jtime(e, "at") >= e2e_jtime(m, "created_at"));
    assert_true(rd_json_is_bool(e2e_jget(e, "lease_expired")));
    assert_int_equal(rd_json_bool(e2e_jget(e, "lease_expired")), lease_expired);
    if (worker) assert_string_equal(e2e_jstr(e, "worker"), worker);
    else e2e_jnull(e, "worker");
}

static size_t history_len(const rd_json_t *m)
{
    rd_json_t *h = e2e_jget(m, "history");
    assert_true(rd_json_is_array(h));
    return rd_json_array_size(h);
}

/* GET shows the history after a lease expiry, a worker's failure, a failed
 * settlement and a replay; the worker while processing and in each entry. */
static void test_history_and_worker(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "history");
    enqueue(q, "{\"payload\":\"x\",\"max_retries\":5}");
    char claim[128], get[1024];
    SET(claim, e2e_fmt("/queues/%s/claim", q));
    SET(get, message_path(q, 1, NULL));
    e2e_response_t r = { 0 };
    http(&r, "POST", claim, "{\"lease_seconds\":1,\"worker\":\"host-a/1\"}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "worker"), "host-a/1");
    assert_int_equal(history_len(m), 0);
    assert_int_equal(e2e_jint(m, "history_dropped"), 0);
    http(&r, "GET", get, NULL);
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "processing");
    assert_string_equal(e2e_jstr(m, "worker"), "host-a/1");

    /* The lease expires: an entry with the claim's worker. */
    long long deadline = e2e_mono_ms() + 3000;
    for (;;) {
        http(&r, "GET", get, NULL);
        m = e2e_expect_json(&r, 200);
        if (strcmp(e2e_jstr(m, "status"), "processing") != 0) break;
        if (e2e_mono_ms() > deadline) fail_msg("still processing 3 s after a 1 s lease");
        e2e_pause_ms(50);
    }
    e2e_jnull(m, "worker");
    assert_int_equal(history_len(m), 1);
    expect_failure_entry(m, 0, 1, "lease expired", true, "host-a/1");

    /* A worker's failure. */
    deadline = e2e_mono_ms() + 4000;
    for (;;) {
        http(&r, "POST", claim, "{\"worker\":\"w2\"}");
        if (r.status == 200) break;
        assert_int_equal(r.status, 204);
        if (e2e_mono_ms() > deadline) fail_msg("not claimable 4 s after the lease expired");
        e2e_pause_ms(50);
    }
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "worker"), "w2");
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"boom\",\"retry_after_seconds\":0}");
    m = e2e_expect_json(&r, 200);
    e2e_jnull(m, "worker");
    expect_failure_entry(m, 1, 2, "boom", false, "w2");

    /* Settle-and-claim: the failed settlement's entry has the worker of the
     * lease it ends; the claim's own worker is the next lease's. */
    http(&r, "POST", claim, "{\"worker\":\"w3\"}");
    e2e_expect_json(&r, 200);
    http(&r, "POST", claim,
         "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e3\",\"retryable\":false}],"
         "\"worker\":\"w4\"}");
    e2e_expect_json(&r, 200);
    http(&r, "GET", get, NULL);
    m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "dead");
    assert_int_equal(history_len(m), 3);
    expect_failure_entry(m, 0, 1, "lease expired", true, "host-a/1");
    expect_failure_entry(m, 1, 2, "boom", false, "w2");
    expect_failure_entry(m, 2, 3, "e3", false, "w3");

    /* A replay: a mark; last_error goes, the history stays. */
    http(&r, "POST", message_path(q, 1, "replay"), NULL);
    m = e2e_expect_json(&r, 200);
    e2e_jnull(m, "last_error");
    assert_int_equal(history_len(m), 4);
    rd_json_t *mark = rd_json_array_at(e2e_jget(m, "history"), 3);
    assert_true(e2e_jtime(mark, "replayed_at") >= e2e_jtime(m, "created_at"));
    assert_int_equal(e2e_jint(m, "history_dropped"), 0);

    /* A listing page shows it too. */
    http(&r, "GET", e2e_fmt("%s?status=pending", messages_path(q)), NULL);
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 1);
    assert_int_equal(history_len(rd_json_array_at(list, 0)), 4);
    e2e_response_free(&r);
}

/* A leased message as a claim answers it (m) is the message GET shows right
 * after: the same JSON, every field, but for the lease_token only a claim
 * shows (claim and settle_claim answer it by position, get by name;
 * leased_reply in lua/02_record.lua). */
static void expect_shown_as_get(const char *q, const rd_json_t *m)
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

/* Every optional field a leased message can carry reaches the claim's JSON
 * as GET shows it: origin_queue and origin_id (redriven), retry_after and
 * last_error (failed), history with history_dropped > 0, worker,
 * idempotency_key; through a claim of one, of 10, a settle-and-claim and a
 * long-poll that waited for a retry. */
static void test_claimed_message_is_shown_as_get(void **state)
{
    (void)state;
    char src[64], q[64], path[128];
    e2e_queue_name(src, sizeof src, "asget-src");
    e2e_queue_name(q, sizeof q, "asget");
    snprintf(path, sizeof path, "/queues/%s/claim", q);
    long long dead = make_dead(src, "redriven", "gone");
    e2e_response_t r = { 0 };
    http(&r, "POST", e2e_fmt("/queues/%s/replay", src),
         e2e_fmt("{\"ids\":[%lld],\"to\":\"%s\"}", dead, q));
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "replayed"), 1);

    /* Message 1 (max_retries 2, from the source): past 20 history entries,
     * each failure under a worker; replayed whenever it dies (every second
     * failure), the last failure a retry due at once. */
    for (int i = 0; i < 23; i++) {
        http(&r, "POST", path, "{\"worker\":\"w0\"}");
        rd_json_t *m = e2e_expect_json(&r, 200);
        assert_int_equal(e2e_jint(m, "id"), 1);
        expect_shown_as_get(q, m);
        http(&r, "POST", message_path(q, 1, "fail"),
             e2e_fmt("{\"error\":\"e%d\",\"retry_after_seconds\":0}", i));
        m = e2e_expect_json(&r, 200);
        if (strcmp(e2e_jstr(m, "status"), "dead") == 0) {
            http(&r, "POST", message_path(q, 1, "replay"), NULL);
            e2e_expect_json(&r, 200);
        }
    }
    enqueue(q, "{\"payload\":\"keyed\",\"idempotency_key\":\"k-1\"}");

    /* A claim of 10: the retry (due first), then the keyed one. */
    http(&r, "POST", path, "{\"count\":10,\"worker\":\"w1\"}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 2);
    rd_json_t *m = rd_json_array_at(list, 0);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_true(e2e_jint(m, "history_dropped") > 0);
    assert_string_equal(e2e_jstr(e2e_jget(m, "origin"), "queue"), src);
    e2e_jtime(m, "retry_after");
    e2e_jstr(m, "last_error");
    expect_shown_as_get(q, m);
    m = rd_json_array_at(list, 1);
    assert_string_equal(e2e_jstr(m, "idempotency_key"), "k-1");
    expect_shown_as_get(q, m);

    /* Settle-and-claim: 1 fails its last retry (dead), 2 succeeds; 1 is
     * replayed; a settlement of 2 again (invalid-state) and 1 comes back. */
    http(&r, "POST", path,
         "{\"settle\":[{\"id\":1,\"outcome\":\"failed\",\"error\":\"e-s\"},"
         "{\"id\":2,\"outcome\":\"succeeded\"}]}");
    assert_int_equal(rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages")), 0);
    http(&r, "POST", message_path(q, 1, "replay"), NULL);
    e2e_expect_json(&r, 200);
    http(&r, "POST", path,
         "{\"worker\":\"w2\",\"settle\":[{\"id\":2,\"outcome\":\"succeeded\"}]}");
    list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 1);
    m = rd_json_array_at(list, 0);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_string_equal(e2e_jstr(m, "worker"), "w2");
    expect_shown_as_get(q, m);

    /* A long-poll that waits for the retry due in 1 s (without a worker). */
    http(&r, "POST", message_path(q, 1, "fail"), "{\"error\":\"e-w\",\"retry_after_seconds\":1}");
    e2e_expect_json(&r, 200);
    http(&r, "POST", path, "{\"wait_seconds\":5}");
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_string_equal(e2e_jstr(m, "last_error"), "e-w");
    e2e_jnull(m, "worker");
    expect_shown_as_get(q, m);
    e2e_response_free(&r);
}

/* worker must be 1-128 bytes of UTF-8: 422 with field worker otherwise, on
 * a plain claim, a long-poll and a settle-and-claim, and nothing is claimed. */
static void test_claim_worker_validation(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "workerval");
    enqueue(q, "{\"payload\":\"x\"}");
    char path[128];
    snprintf(path, sizeof path, "/queues/%s/claim", q);
    char long_worker[160];
    snprintf(long_worker, sizeof long_worker, "{\"worker\":\"%0129d\"}", 0);
    const char *bodies[] = {
        "{\"worker\":\"\"}",
        long_worker,
        "{\"worker\":\"\xff\xfe\"}",
        "{\"worker\":\"a\\ud800b\"}",
        "{\"worker\":17}",
        "{\"worker\":\"ok\",\"wait_seconds\":\"x\",\"count\":0}",
        "{\"worker\":\"\",\"wait_seconds\":5}",
        "{\"worker\":\"\",\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"}]}",
    };
    const size_t errors[] = { 1, 1, 1, 1, 1, 2, 1, 1 };
    e2e_response_t r = { 0 };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        http(&r, "POST", path, bodies[i]);
        rd_json_t *errs = expect_invalid(&r, path, errors[i]);
        if (i != 5) expect_field_error(errs, "worker", "invalid", NULL);
    }
    /* 128 bytes is the limit, and the message was never claimed before. */
    char max_worker[160];
    snprintf(max_worker, sizeof max_worker, "{\"worker\":\"%0128d\"}", 0);
    http(&r, "POST", path, max_worker);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "retry_count"), 0);
    assert_int_equal(strlen(e2e_jstr(m, "worker")), 128);
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

/* ------------------------------------------------------------------------ */
/* Memory a client can pin (issue 19 items 2 and 3)                         */
/* ------------------------------------------------------------------------ */

/* A raw connection whose receive timeout is ms (bounds every wait below). */
static int raw_connect(int port, int ms, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    /* Before connect, so the window the client offers stays that small. */
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Reads one response head and its Content-Length body from fd into buf
 * (NUL-terminated); returns its status, or -1 when none came in time. */
static int raw_response(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    char *end = NULL;
    while (end == NULL) {
        if (len + 1 >= cap) return -1;
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0) return -1;
        len += (size_t)n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    const char *cl = strcasestr(buf, "\r\nContent-Length: ");
    size_t want = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 18, NULL, 10) : 0);
    while (len < want && len + 1 < cap) {
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0) return -1;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return strncmp(buf, "HTTP/1.1 ", 9) == 0 ? atoi(buf + 9) : -1;
}

/* The server ended the connection: EOF (or a reset) before the timeout. */
static void expect_closed(int fd)
{
    char b[256];
    ssize_t n = recv(fd, b, sizeof b, 0);
    if (n > 0) fail_msg("more bytes after the refusal: %.*s", (int)n, b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        fail_msg("the connection was left open after the refusal");
}

/* A /metrics sample of port's daemon (the whole line's name, labels
 * included), asked with token when it is not NULL. */
static long long metric_as(int port, const char *token, const char *name)
{
    e2e_response_t r = { 0 };
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    assert_int_equal(e2e_request(&c, "GET", "/metrics",
                                 token ? e2e_fmt("Authorization: Bearer %s\r\n", token) : NULL,
                                 NULL, 0, &r), 0);
    e2e_conn_close(&c);
    assert_int_equal(r.status, 200);
    const char *at = strstr(r.body, e2e_fmt("\n%s ", name));
    if (at == NULL) fail_msg("/metrics has no %s", name);
    long long v = strtoll(at + strlen(name) + 2, NULL, 10);
    e2e_response_free(&r);
    return v;
}

static long long metric_on(int port, const char *name)
{
    return metric_as(port, NULL, name);
}

static const char *write_token_file(const char *token)
{
    static char path[128];
    snprintf(path, sizeof path, "/tmp/retryd-e2e-token-%ld", (long)getpid());
    FILE *tf = fopen(path, "w");
    assert_non_null(tf);
    fprintf(tf, "%s\n", token);
    fclose(tf);
    return path;
}

/* With --auth-token-file, a request without the right token is answered 401
 * as soon as its headers are in: its body is never read (nor waited for),
 * 100-continue is not sent, and the connection is shut once the 401 is out.
 * An authorised request still gets 100 Continue and its 201. */
static void test_unauthorized_body_is_refused_unread(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-early", g_prefix);
    const char *file = write_token_file("s3cret-early-token");
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--auth-token-file", file,
                                  NULL), 0);
    unlink(file);
    char q[64];
    e2e_queue_name(q, sizeof q, "early");
    enum { N = 8 };
    int fds[N];
    static char buf[65536];
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect(g_side.port, 3000, 0);
        /* Half ask for 100-continue; a quarter give a wrong token. */
        const char *head = e2e_fmt("POST /queues/%s/messages HTTP/1.1\r\nHost: t\r\n"
                                   "Content-Type: application/json\r\n"
                                   "Content-Length: 1048575\r\n%s%s\r\n",
                                   q, i % 2 ? "Expect: 100-continue\r\n" : "",
                                   i % 4 >= 2 ? "Authorization: Bearer wrong\r\n" : "");
        assert_int_equal(e2e_send_all(fds[i], head, strlen(head)), 0);
        /* One of them starts its body before the answer. */
        if (i == 0) {
            memset(buf, 'a', 4096);
            assert_int_equal(e2e_send_all(fds[i], buf, 4096), 0);
        }
    }
    for (int i = 0; i < N; i++) {
        int status = raw_response(fds[i], buf, sizeof buf);
        if (status != 401)
            fail_msg("connection %d: expected 401 before the body, got %d: %.200s", i, status,
                     status < 0 ? "(nothing in 3 s)" : buf);
        assert_non_null(strcasestr(buf, "\r\nConnection: close\r\n"));
        assert_non_null(strcasestr(buf, "\r\nWWW-Authenticate: Bearer realm=\"retryd\"\r\n"));
        assert_non_null(strstr(buf, "/problems/unauthorized"));
        expect_closed(fds[i]);
        close(fds[i]);
    }
    assert_true(metric_as(g_side.port, "s3cret-early-token",
                          "retryd_http_refused_total{reason=\"unauthorized\"}") >= N);

    /* The right token: 100 Continue, then the body is read and enqueued. */
    int fd = raw_connect(g_side.port, 3000, 0);
    const char *body = "{\"payload\":\"x\"}";
    const char *head = e2e_fmt("POST /queues/%s/messages HTTP/1.1\r\nHost: t\r\n"
                               "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                               "Expect: 100-continue\r\n"
                               "Authorization: Bearer s3cret-early-token\r\n\r\n",
                               q, strlen(body));
    assert_int_equal(e2e_send_all(fd, head, strlen(head)), 0);
    assert_int_equal(raw_response(fd, buf, sizeof buf), 100);
    assert_int_equal(e2e_send_all(fd, body, strlen(body)), 0);
    assert_int_equal(raw_response(fd, buf, sizeof buf), 201);
    close(fd);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* The public routes (/healthz, /openapi.json, /ui) take no body: without
 * the token a request with one is refused at its headers like any other, so
 * that GETs of /healthz with 1 MiB bodies cannot fill
 * --max-pending-body-bytes and make every authorised body get 503. */
static void test_public_route_body_needs_token(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-pubbody", g_prefix);
    const char *file = write_token_file("s3cret-pubbody-token");
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, false, "--auth-token-file", file,
                                  "--max-pending-body-bytes", "3000000", NULL), 0);
    unlink(file);
    static const char *paths[] = { "/healthz", "/openapi.json", "/ui/", "/healthz" };
    enum { N = 4 };
    int fds[N];
    static char buf[65536];
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect(g_side.port, 3000, 0);
        const char *head = e2e_fmt("GET %s HTTP/1.1\r\nHost: t\r\nContent-Length: 1048576\r\n%s\r\n",
                                   paths[i], i == 3 ? "Expect: 100-continue\r\n" : "");
        assert_int_equal(e2e_send_all(fds[i], head, strlen(head)), 0);
        memset(buf, 'a', 4096);
        if (i != 3) assert_int_equal(e2e_send_all(fds[i], buf, 4096), 0);
    }
    for (int i = 0; i < N; i++) {
        int status = raw_response(fds[i], buf, sizeof buf);
        if (status != 401)
            fail_msg("GET %s with a body and no token: expected 401 at the headers, got %d: %.200s",
                     paths[i], status, status < 0 ? "(nothing in 3 s)" : buf);
        assert_non_null(strstr(buf, "/problems/unauthorized"));
        expect_closed(fds[i]);
        close(fds[i]);
    }
    const char *tok = "s3cret-pubbody-token";
    assert_int_equal(metric_as(g_side.port, tok, "retryd_http_pending_body_bytes"), 0);
    /* Bodiless, they stay public; with the token a body is still read. */
    int fd = raw_connect(g_side.port, 3000, 0);
    const char *get = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_int_equal(e2e_send_all(fd, get, strlen(get)), 0);
    assert_int_equal(raw_response(fd, buf, sizeof buf), 200);
    const char *with = e2e_fmt("GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
                               "Authorization: Bearer %s\r\n\r\nab", tok);
    assert_int_equal(e2e_send_all(fd, with, strlen(with)), 0);
    assert_int_equal(raw_response(fd, buf, sizeof buf), 200);
    close(fd);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* --max-pending-body-bytes bounds the bodies being read at once: a body
 * that would pass it gets 503 (Retry-After) before it is read; once the
 * first body is in and answered, the next one is taken. */
static void test_pending_body_budget_is_503(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-bodies", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true,
                                  "--max-pending-body-bytes", "200000", NULL), 0);
    char q[64];
    e2e_queue_name(q, sizeof q, "bodies");
    enum { BIG = 150000 };
    static char body[BIG + 1];
    memset(body, 'b', BIG);
    memcpy(body, "{\"payload\":\"", 12);
    memcpy(body + BIG - 2, "\"}", 2);
    static char buf[65536];

    int a = raw_connect(g_side.port, 3000, 0);
    const char *head = e2e_fmt("POST /queues/%s/messages HTTP/1.1\r\nHost: t\r\n"
                               "Content-Length: %d\r\n\r\n", q, BIG);
    assert_int_equal(e2e_send_all(a, head, strlen(head)), 0);
    assert_int_equal(e2e_send_all(a, body, 1000), 0);
    long long deadline = e2e_mono_ms() + 3000;
    while (metric_on(g_side.port, "retryd_http_pending_body_bytes") < BIG) {
        if (e2e_mono_ms() > deadline) fail_msg("the first body was never counted");
        e2e_pause_ms(10);
    }

    int b = raw_connect(g_side.port, 3000, 0);
    const char *head_b = e2e_fmt("POST /queues/%s/messages HTTP/1.1\r\nHost: t\r\n"
                                 "Content-Length: 100000\r\nExpect: 100-continue\r\n\r\n", q);
    assert_int_equal(e2e_send_all(b, head_b, strlen(head_b)), 0);
    int status = raw_response(b, buf, sizeof buf);
    if (status != 503) fail_msg("expected 503 past the budget, got %d: %.200s", status, buf);
    assert_non_null(strcasestr(buf, "\r\nRetry-After: 1\r\n"));
    assert_non_null(strstr(buf, "max-pending-body-bytes"));
    expect_closed(b);
    close(b);
    assert_int_equal(metric_on(g_side.port, "retryd_http_refused_total{reason=\"body_budget\"}"),
                     1);

    /* The first body goes on and is enqueued; its bytes are released. */
    assert_int_equal(e2e_send_all(a, body + 1000, BIG - 1000), 0);
    assert_int_equal(raw_response(a, buf, sizeof buf), 201);
    close(a);
    assert_int_equal(metric_on(g_side.port, "retryd_http_pending_body_bytes"), 0);
    e2e_response_t r = { 0 };
    http_to(g_side.port, &r, "POST", messages_path(q), body, BIG);
    e2e_expect_json(&r, 201);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

/* Enqueues n messages to q of prefix whose payload is len bytes of 0x01,
 * each written by JSON as "\u0001" (6 bytes), straight through the
 * library (the API takes at most --max-body of escaped JSON). */
static void enqueue_escaped(const char *prefix, const char *q, int n, size_t len)
{
    char *payload = malloc(len);
    assert_non_null(payload);
    memset(payload, 0x01, len);
    const char *base = e2e_fmt("%s:{%s}", prefix, q);
    for (int i = 0; i < n; i++) {
        redisReply *x = e2e_rcmd(g_redis, "FCALL " RD_FUNCTION("enqueue") " 1 %s %b 3 0 %s",
                                 base, payload, len, "");
        assert_int_equal(x->type, REDIS_REPLY_ARRAY);
        freeReplyObject(x);
    }
    free(payload);
}

/* Enqueues n messages to q of prefix whose payload is len bytes of unit
 * repeated (cut at len). */
static void enqueue_text(const char *prefix, const char *q, int n, const char *unit, size_t len)
{
    char *payload = malloc(len);
    assert_non_null(payload);
    size_t u = strlen(unit);
    for (size_t i = 0; i < len; i++) payload[i] = unit[i % u];
    const char *base = e2e_fmt("%s:{%s}", prefix, q);
    for (int i = 0; i < n; i++) {
        redisReply *x = e2e_rcmd(g_redis, "FCALL " RD_FUNCTION("enqueue") " 1 %s %b 3 0 %s",
                                 base, payload, len, "");
        assert_int_equal(x->type, REDIS_REPLY_ARRAY);
        freeReplyObject(x);
    }
    free(payload);
}

#define WIRE_BUDGET (4 * 1024 * 1024)
#define WIRE_SLACK (64 * 1024)     /* the answer's own framing and fixed fields */

/* The 4 MiB reply budget counts bytes as JSON writes them: a page or a batch
 * claim of payloads that escape six-fold stays under about 4 MiB, and always
 * carries one message, even one alone past it. */
static void test_reply_budget_counts_escaped_bytes(void **state)
{
    (void)state;
    char q[64];
    e2e_queue_name(q, sizeof q, "escaped");
    enum { N_MSG = 12, PAYLOAD = 400 * 1024 };   /* 2.4 MiB each on the wire */
    enqueue_escaped(g_prefix, q, N_MSG, PAYLOAD);
    e2e_response_t r = { 0 };

    size_t seen = 0;
    char cursor[256] = "";
    for (int page = 0; page < 3 * N_MSG; page++) {
        http(&r, "GET", e2e_fmt("%s?limit=100%s%s", messages_path(q), cursor[0] ? "&cursor=" : "",
                                e2e_url_encode(cursor)), NULL);
        rd_json_t *doc = e2e_expect_json(&r, 200);
        size_t got = rd_json_array_size(e2e_jget(doc, "messages"));
        if (r.body_len > WIRE_BUDGET + WIRE_SLACK)
            fail_msg("a page of %zu messages is %zu bytes", got, r.body_len);
        assert_true(got >= 1 || rd_json_is_null(e2e_jget(doc, "next_cursor")));
        seen += got;
        rd_json_t *next = e2e_jget(doc, "next_cursor");
        if (rd_json_is_null(next)) break;
        SET(cursor, rd_json_string(next));
    }
    assert_int_equal(seen, N_MSG);

    http(&r, "POST", e2e_fmt("/queues/%s/claim?count=100", q), NULL);
    rd_json_t *doc = e2e_expect_json(&r, 200);
    size_t got = rd_json_array_size(e2e_jget(doc, "messages"));
    if (r.body_len > WIRE_BUDGET + WIRE_SLACK)
        fail_msg("a claim of %zu messages is %zu bytes", got, r.body_len);
    assert_int_equal(got, 1);

    /* The budget is no tighter than the wire: 100 payloads of 40000 bytes of
     * plain text all fit one page; of JSON text (4 of its
     * 10 bytes quotes, written \") only as many as 4 MiB of output holds. */
    char plain[64], quoted[64];
    e2e_queue_name(plain, sizeof plain, "escaped-plain");
    e2e_queue_name(quoted, sizeof quoted, "escaped-quoted");
    enqueue_text(g_prefix, plain, 100, "plain text, ", 40000);
    enqueue_text(g_prefix, quoted, 100, "{\"a\":\"b\"},", 40000);
    http(&r, "GET", e2e_fmt("%s?limit=100", messages_path(plain)), NULL);
    assert_int_equal(rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages")), 100);
    http(&r, "GET", e2e_fmt("%s?limit=100", messages_path(quoted)), NULL);
    got = rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages"));
    if (r.body_len > WIRE_BUDGET + WIRE_SLACK || got < 60)
        fail_msg("a page of %zu quoted messages is %zu bytes", got, r.body_len);

    /* One message alone over the budget still comes, one per claim. */
    char big[64];
    e2e_queue_name(big, sizeof big, "escaped-big");
    enqueue_escaped(g_prefix, big, 2, 1024 * 1024);
    http(&r, "POST", e2e_fmt("/queues/%s/claim?count=100", big), NULL);
    assert_int_equal(rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages")), 1);
    e2e_response_free(&r);
}

/* A counter of q's stats hash under prefix, 0 when never counted. */
static long long queue_counter_of(const char *prefix, const char *q, const char *name)
{
    redisReply *x = e2e_rcmd(g_redis, "HGET %s:{%s}:stats %s", prefix, q, name);
    long long n = x->type == REDIS_REPLY_STRING ? atoll(x->str) : 0;
    freeReplyObject(x);
    return n;
}

/* Whole messages of q a reading client claims until none is left. */
static size_t claim_all(int port, const char *q)
{
    size_t n = 0;
    e2e_response_t r = { 0 };
    for (;;) {
        http_to(port, &r, "POST", e2e_fmt("/queues/%s/claim?count=100", q), NULL, 0);
        if (r.status == 204) break;
        n += rd_json_array_size(e2e_jget(e2e_expect_json(&r, 200), "messages"));
    }
    e2e_response_free(&r);
    return n;
}

/* Clients that claim and never read: past --max-pending-output-bytes of
 * answers queued in the daemon, the ones with the most unread are closed
 * (counted in /metrics), and their claims are handed back, released rather
 * than failed, and claimed again by a client that reads. */
static void test_slow_readers_closed_and_claims_handed_back(void **state)
{
    (void)state;
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s-slow", g_prefix);
    assert_int_equal(start_daemon(&g_side, g_redis_port, prefix, true,
                                  "--max-pending-output-bytes", "16777216", NULL), 0);
    char q[64];
    e2e_queue_name(q, sizeof q, "slow");
    /* One message per claim, 6 MiB on the wire: more than the kernel's
     * socket buffers take (tcp_wmem's 4 MiB at most), so most of each
     * answer waits in the daemon for a reader that never comes. */
    enum { N_MSG = 8, READERS = 6, PAYLOAD = 1024 * 1024 };
    enqueue_escaped(prefix, q, N_MSG, PAYLOAD);

    int fds[READERS];
    const char *req = e2e_fmt("POST /queues/%s/claim?count=100 HTTP/1.1\r\nHost: t\r\n"
                              "Content-Length: 0\r\n\r\n", q);
    for (int i = 0; i < READERS; i++) {
        fds[i] = raw_connect(g_side.port, 3000, 4096);
        assert_int_equal(e2e_send_all(fds[i], req, strlen(req)), 0);
    }
    long long deadline = e2e_mono_ms() + 5000;
    while (queue_counter_of(prefix, q, "claimed") < READERS) {
        if (e2e_mono_ms() > deadline) fail_msg("the readers' claims did not all run");
        e2e_pause_ms(20);
    }
    /* /metrics asks Redis on the link the claims' answers came back on, so
     * it is answered after every claim was: the count is final. */
    long long closed = metric_on(g_side.port, "retryd_http_slow_readers_closed_total");
    assert_true(closed >= 1);
    /* Every closed reader's message comes back: released, never failed. */
    while (queue_counter_of(prefix, q, "released") < closed) {
        if (e2e_mono_ms() > deadline) fail_msg("the closed readers' claims were not handed back");
        e2e_pause_ms(20);
    }
    assert_int_equal(queue_counter_of(prefix, q, "released"), closed);
    assert_int_equal(queue_counter_of(prefix, q, "failed"), 0);
    assert_true(closed < READERS);   /* the rest fit under the bound */
    assert_true(metric_on(g_side.port, "retryd_http_pending_output_bytes") <= 16777216);
    /* A reader's answers count too: while it claims the rest, one more of
     * the readers that never read may be closed, and its message claimed. */
    size_t again = claim_all(g_side.port, q);
    closed = metric_on(g_side.port, "retryd_http_slow_readers_closed_total");
    assert_int_equal(again, N_MSG - READERS + (size_t)closed);
    assert_int_equal(queue_counter_of(prefix, q, "released"), closed);
    assert_int_equal(queue_counter_of(prefix, q, "failed"), 0);
    for (int i = 0; i < READERS; i++) close(fds[i]);
    e2e_conn_close(&g_conn);
    assert_int_equal(e2e_daemon_stop(&g_side, SIGTERM, E2E_STOP_TIMEOUT_MS), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, test_setup, test_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_enqueue_returns_message_and_location),
        T(test_stats_series),
        T(test_series_nudges_the_timer),
        T(test_payload_is_returned_byte_for_byte),
        T(test_enqueue_validation),
        T(test_malformed_bodies_are_400),
        T(test_queue_name_rules),
        T(test_odd_queue_names_are_distinct),
        T(test_get_and_not_found),
        T(test_wrong_method_is_405_with_allow),
        T(test_openapi_document_is_served),
        T(test_public_routes_are_documented),
        T(test_body_over_max_body_is_413),
        T(test_claim_nothing_due_is_204),
        T(test_claims_on_unknown_queues_write_nothing),
        T(test_claim_is_fifo),
        T(test_claim_sets_lease),
        T(test_claim_count),
        T(test_claim_validation),
        T(test_succeed),
        T(test_fail_schedules_retry_with_backoff),
        T(test_fail_to_dead),
        T(test_fail_requires_error),
        T(test_replay),
        T(test_redrive_to_another_queue),
        T(test_redrive_by_error_past_pages_without_a_match),
        T(test_extend),
        T(test_delayed_retry_end_to_end),
        T(test_expired_lease_is_a_failure),
        T(test_history_and_worker),
        T(test_claimed_message_is_shown_as_get),
        T(test_claim_worker_validation),
        T(test_list_and_paging),
        T(test_list_validation),
        T(test_raw_control_bytes_are_400),
        T(test_leading_zeros_are_400),
        T(test_query_limits_apply_to_decoded_values),
        T(test_queues_cursor_on_long_and_non_ascii_names),
        T(test_dot_queue_names_refused),
        T(test_impossible_dates_refused),
        T(test_non_canonical_message_id_is_404),
        T(test_problem_instance_is_truncated),
        T(test_text_must_be_utf8),
        T(test_claim_with_settle),
        T(test_settle_claim_at_the_limits),
        T(test_settle_claims_sent_together),
        T(test_settle_claims_together_each_get_one),
        T(test_claims_sent_together),
        T(test_vanished_client_in_line_loses_nothing),
        T(test_claim_settle_validation),
        T(test_claim_settle_long_poll),
        T(test_policy_get_put),
        T(test_policy_backoff_over_http),
        T(test_dead_letter_rules_seed_001),
        T(test_pause_and_resume),
        T(test_rate_limited_long_poll_sleeps),
        T(test_rate_limit_over_three_seconds),
        T(test_keep_alive_50_requests),
        T(test_pipelined_requests_answered_in_order),
        T(test_concurrent_claims_claim_each_message_once),
        T(test_function_flush_is_recovered),
        T(test_client_kill_is_recovered),
        T(test_no_redis_is_503_and_keeps_running),
        T(test_redis_started_later_is_picked_up),
        T(test_shutdown_answers_in_flight_request),
        T(test_shutdown_answers_settle_claims_in_line),
        T(test_unauthorized_body_is_refused_unread),
        T(test_public_route_body_needs_token),
        T(test_pending_body_budget_is_503),
        T(test_reply_budget_counts_escaped_bytes),
        T(test_slow_readers_closed_and_claims_handed_back),
    };
    int failed = cmocka_run_group_tests_name("e2e", tests, group_setup, group_teardown);
    if (failed == 0 && g_stop_failed) {
        printf("FAIL test_e2e: retryd did not exit 0 within 5 s of SIGTERM\n");
        return 1;
    }
    return failed;
}
