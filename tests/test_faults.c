/* test_faults.c - fault injection against the real build/retryd (docs/reference.md "Errors"
 * and §7): HTTP limits and hostile clients (431, 501, 417, Expect,
 * slowloris, the connection cap, idle keep-alive), bearer-token auth and
 * Redis ACL users, a Redis that is paused (SIGSTOP, DEBUG SLEEP), restarted,
 * flushed, has its pub/sub link killed or is killed -9 in the middle of a
 * load, a retryd killed -9 while it holds leases, the durability warnings at
 * startup, and a valgrind run ending in a graceful shutdown. Every test
 * asserts what the client saw and what Redis holds afterwards.
 *
 * Needs RETRYD_TEST_REDIS_PORT and RETRYD_BIN (scripts/test.sh sets both).
 * Simple cases use the runner's Redis with a key prefix of their own; every
 * destructive case (SIGSTOP, kill -9, restart, ACL, DEBUG SLEEP) starts its
 * own redis-server on a free port in a temp dir. The per-test teardown kills
 * and reaps every process the test started (and only those), and removes the
 * temp dirs, whether the test passed or not. Lines starting with "# measured"
 * report timings. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>

#include "faults_support.h"
#include "retryd/keys.h"
#include "retryd/store.h"

enum {
    READY_TIMEOUT_MS = 10000,
    TICK_MS = 50,
    REDIS_TIMEOUT_MS = 1000,       /* --redis-timeout-ms of the Redis-fault daemons */
    UNAVAILABLE_BOUND_MS = REDIS_TIMEOUT_MS + 1000,   /* time to a 503 while Redis hangs */
    RECOVERY_BOUND_MS = 7000,      /* Redis back to 201 again */
    IDLE_TIMEOUT_MS = 2000,        /* --idle-timeout 2s */
    IDLE_CLOSE_BOUND_MS = IDLE_TIMEOUT_MS + 1500,
};

static const char *g_bin;
static int g_shared_port;
static char g_tmp[PATH_MAX];       /* the test's temp dir: logs, token files */
static fx_redis_t g_srv;           /* a test's private redis-server, if any */
static e2e_daemon_t g_dmn[4];      /* daemons a test started */
static e2e_conn_t g_conn = { .fd = -1 };
static redisContext *g_shared;     /* to the runner's Redis */
static redisContext *g_admin;      /* to the test's private Redis, if any */

/* ------------------------------------------------------------------------ */
/* Small strings                                                            */
/* ------------------------------------------------------------------------ */

#define SET(dst, src) snprintf((dst), sizeof(dst), "%s", (src))

/* A key prefix no other test (or suite run) uses, into out. */
#define PREFIX(out, tag) snprintf((out), sizeof(out), "flt%ld-%s", (long)getpid(), (tag))

static const char *tmp_path(const char *name)
{
    return e2e_fmt("%s/%s", g_tmp, name);
}

/* ------------------------------------------------------------------------ */
/* Setup and teardown                                                       */
/* ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    (void)state;
    rd_alloc_init();
    signal(SIGPIPE, SIG_IGN);
    return e2e_suite_env("test_faults", 5, &g_bin, &g_shared_port, &g_shared);
}

static int group_teardown(void **state)
{
    (void)state;
    if (g_shared) redisFree(g_shared);
    g_shared = NULL;
    return 0;
}

static int test_setup(void **state)
{
    (void)state;
    g_conn.fd = -1;
    if (fx_mkdtemp(g_tmp, sizeof g_tmp, "faults") != 0) {
        fprintf(stderr, "test_faults: cannot create a temp dir\n");
        return -1;
    }
    return 0;
}

/* Whatever the test left: daemons, the private Redis (woken first if it was
 * stopped), connections, temp files. */
static int test_teardown(void **state)
{
    (void)state;
    e2e_conn_close(&g_conn);
    for (size_t i = 0; i < sizeof g_dmn / sizeof g_dmn[0]; i++)
        if (g_dmn[i].pid > 0) e2e_daemon_stop(&g_dmn[i], SIGKILL, E2E_STOP_TIMEOUT_MS);
    if (g_admin) redisFree(g_admin);
    g_admin = NULL;
    fx_redis_destroy(&g_srv);
    fx_rm_rf(g_tmp);
    g_tmp[0] = '\0';
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Daemons                                                                  */
/* ------------------------------------------------------------------------ */

/* Starts retryd with its output in <tmp>/<log>: --redis url --prefix prefix
 * --tick-ms 50 --log-level info, then extra flags (NULL-terminated; later
 * flags override earlier ones). Waits for /healthz 200, and for /readyz 200
 * when want_ready. Returns 0, -1. */
static int start_retryd(e2e_daemon_t *d, const char *log, const char *url, const char *prefix,
                        bool want_ready, ...)
{
    e2e_flags_t f;
    va_list ap;
    va_start(ap, want_ready);
    e2e_flags_v(&f, "--redis", url, prefix, TICK_MS, "info", ap);
    va_end(ap);
    char log_s[PATH_MAX];
    SET(log_s, tmp_path(log));
    if (e2e_daemon_spawn_logged(d, NULL, g_bin, f.argv, log_s) != 0) return -1;
    if (e2e_daemon_wait_up(d, true, want_ready, READY_TIMEOUT_MS) != 0) {
        fprintf(stderr, "test_faults: retryd on port %d did not become ready; its log:\n",
                d->port);
        char *text = fx_read_file(log_s);
        fprintf(stderr, "%s\n", text ? text : "(none)");
        free(text);
        e2e_daemon_stop(d, SIGKILL, E2E_STOP_TIMEOUT_MS);
        return -1;
    }
    return 0;
}

/* SIGTERM and a clean exit within 5 s (docs/reference.md "Daemon"). */
static void stop_retryd(e2e_daemon_t *d)
{
    int status = e2e_daemon_stop(d, SIGTERM, E2E_STOP_TIMEOUT_MS);
    if (status != 0)
        fail_msg("retryd after SIGTERM: %s %d", status < 0 ? "killed," : "exit", status);
}

/* ------------------------------------------------------------------------ */
/* Requests and what they answer                                            */
/* ------------------------------------------------------------------------ */

/* e2e_request and e2e_read_response, freeing what *r held first. */
static int request_fresh(e2e_conn_t *c, const char *method, const char *path, const char *extra,
                         const char *body, size_t body_len, e2e_response_t *r)
{
    e2e_response_free(r);
    return e2e_request(c, method, path, extra, body, body_len, r);
}

static int read_fresh(e2e_conn_t *c, e2e_response_t *r)
{
    e2e_response_free(r);
    return e2e_read_response(c, r);
}

static void http(int port, e2e_response_t *r, const char *method, const char *path,
                 const char *body)
{
    e2e_http_on(&g_conn, port, r, method, path, NULL, body, body ? strlen(body) : 0);
}

/* A 503 of either kind (backend-unavailable: not sent; outcome-unknown: sent,
 * link lost) with a positive Retry-After. Returns true for outcome-unknown. */
static bool expect_503(const e2e_response_t *r)
{
    if (r->status != 503) fail_msg("expected 503, got %d: %s", r->status, r->body);
    bool unknown = r->body && strstr(r->body, "/problems/outcome-unknown") != NULL;
    e2e_expect_problem(r, 503, unknown ? "outcome-unknown" : "backend-unavailable", NULL);
    if (r->retry_after[0] == '\0' || atoi(r->retry_after) < 1)
        fail_msg("Retry-After \"%s\" is not a positive number of seconds", r->retry_after);
    return unknown;
}

/* The problem slug of a response ("" when it is not a problem). */
static void slug_of(const e2e_response_t *r, char *out, size_t cap)
{
    out[0] = '\0';
    const char *t = r->json ? rd_json_string(rd_json_get(r->json, "type")) : NULL;
    if (t && strncmp(t, "/problems/", 10) == 0) snprintf(out, cap, "%s", t + 10);
}

/* ------------------------------------------------------------------------ */
/* What Redis holds                                                         */
/* ------------------------------------------------------------------------ */

static long long rq_int(redisContext *c, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    redisReply *r = redisvCommand(c, format, ap);
    va_end(ap);
    e2e_reply_or_fail(c, r);
    long long v = -1;
    if (r->type == REDIS_REPLY_INTEGER) v = r->integer;
    else if (r->type == REDIS_REPLY_STRING) v = atoll(r->str);
    else if (r->type == REDIS_REPLY_NIL) v = 0;
    else fail_msg("redis: unexpected reply type %d (%s)", r->type,
                  r->type == REDIS_REPLY_ERROR ? r->str : "");
    freeReplyObject(r);
    return v;
}

/* One message hash as Redis holds it. */
typedef struct stored {
    long long id;
    char *payload;                /* malloc'd */
    char status[16];
    char last_error[64];
    long long retry_count;
} stored_t;

static void stored_free(stored_t *m, size_t n)
{
    for (size_t i = 0; i < n; i++) free(m[i].payload);
    free(m);
}

static int by_id(const void *a, const void *b)
{
    long long x = ((const stored_t *)a)->id, y = ((const stored_t *)b)->id;
    return x < y ? -1 : x > y;
}

/* Every message "<prefix>:{<q>}:m:*" (SCAN, then the library's get: the
 * record's layout is the library's, docs/storage.md), sorted by id. */
static stored_t *load_messages(redisContext *c, const char *prefix, const char *q, size_t *count)
{
    char pattern[512], cursor[32] = "0";
    snprintf(pattern, sizeof pattern, "%s:{%s}:m:*", prefix, q);
    size_t n = 0, cap = 64;
    stored_t *m = calloc(cap, sizeof *m);
    do {
        redisReply *r = e2e_rcmd(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) fail_msg("SCAN: bad reply");
        SET(cursor, r->element[0]->str);
        redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            const char *key = keys->element[i]->str;
            const char *tail = strrchr(key, ':');
            redisReply *g = e2e_rcmd(c, "FCALL_RO %s 2 %s:{%s} %s %s", RD_FUNCTION("get"), prefix,
                                     q, key, tail + 1);
            if (g->type != REDIS_REPLY_ARRAY || g->elements != 2 ||
                g->element[1]->type != REDIS_REPLY_ARRAY) {
                freeReplyObject(g);
                continue;   /* gone meanwhile */
            }
            const redisReply *h = g->element[1];
            if (n == cap) {
                cap *= 2;
                m = realloc(m, cap * sizeof *m);
            }
            stored_t *s = &m[n++];
            memset(s, 0, sizeof *s);
            s->id = atoll(tail + 1);
            for (size_t j = 2; j + 1 < h->elements; j += 2) {
                const char *f = h->element[j]->str;
                const redisReply *v = h->element[j + 1];
                if (strcmp(f, "payload") == 0) s->payload = strndup(v->str, v->len);
                else if (strcmp(f, "status") == 0) SET(s->status, v->str);
                else if (strcmp(f, "last_error") == 0) SET(s->last_error, v->str);
                else if (strcmp(f, "retry_count") == 0) s->retry_count = atoll(v->str);
            }
            if (s->payload == NULL) s->payload = strdup("");
            freeReplyObject(g);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    qsort(m, n, sizeof *m, by_id);
    /* SCAN may return a key twice. */
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (out > 0 && m[out - 1].id == m[i].id) {
            free(m[i].payload);
            continue;
        }
        m[out++] = m[i];
    }
    *count = out;
    return m;
}

static const stored_t *find_id(const stored_t *m, size_t n, long long id)
{
    stored_t key = { .id = id };
    return bsearch(&key, m, n, sizeof *m, by_id);
}

/* How many stored messages carry this payload. */
static size_t payload_count(const stored_t *m, size_t n, const char *payload)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += strcmp(m[i].payload, payload) == 0;
    return k;
}

static int by_payload(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* No payload appears twice among the stored messages. */
static void expect_unique_payloads(const stored_t *m, size_t n)
{
    char **p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = m[i].payload;
    qsort(p, n, sizeof *p, by_payload);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(p[i - 1], p[i]) == 0) {
            char dup[128];
            SET(dup, p[i]);
            free(p);
            fail_msg("payload \"%s\" is stored twice: a message was duplicated", dup);
        }
    }
    free(p);
}

static bool member_of_list(redisContext *c, const char *key, long long id)
{
    redisReply *r = e2e_rcmd(c, "LPOS %s %lld", key, id);
    bool in = r->type == REDIS_REPLY_INTEGER;
    freeReplyObject(r);
    return in;
}

static bool member_of_zset(redisContext *c, const char *key, long long id)
{
    redisReply *r = e2e_rcmd(c, "ZSCORE %s %lld", key, id);
    bool in = r->type == REDIS_REPLY_STRING;
    freeReplyObject(r);
    return in;
}

/* docs/design.md's invariant, read while no daemon runs: every message is in
 * exactly one index (ready, due, scheduled for pending; processing,
 * succeeded, dead) and it agrees with its status; and the indexes hold
 * nothing else (their sizes add up to the number of messages). */
static void expect_indexes_consistent(redisContext *c, const char *prefix, const char *q,
                                      const stored_t *m, size_t n)
{
    char base[256];  /* the record's generation of indexes (docs/storage.md) */
    snprintf(base, sizeof base, "%s:{%s}:3", prefix, q);
    static const char *const lists[] = { "ready", "due" };
    static const char *const zsets[] = { "scheduled", "processing", "succeeded", "dead" };
    for (size_t i = 0; i < n; i++) {
        const char *where = NULL;
        int found = 0;
        for (int k = 0; k < 2; k++)
            if (member_of_list(c, e2e_fmt("%s:%s", base, lists[k]), m[i].id)) {
                found++;
                where = lists[k];
            }
        for (int k = 0; k < 4; k++)
            if (member_of_zset(c, e2e_fmt("%s:%s", base, zsets[k]), m[i].id)) {
                found++;
                where = zsets[k];
            }
        if (found != 1)
            fail_msg("message %lld (status %s) is in %d indexes", m[i].id, m[i].status, found);
        bool agrees = strcmp(m[i].status, "pending") == 0
                          ? (strcmp(where, "ready") == 0 || strcmp(where, "due") == 0 ||
                             strcmp(where, "scheduled") == 0)
                          : strcmp(m[i].status, where) == 0;
        if (!agrees)
            fail_msg("message %lld has status %s but is in %s", m[i].id, m[i].status, where);
    }
    long long entries = rq_int(c, "LLEN %s:ready", base) + rq_int(c, "LLEN %s:due", base);
    for (int k = 0; k < 4; k++) entries += rq_int(c, "ZCARD %s:%s", base, zsets[k]);
    if (entries != (long long)n)
        fail_msg("the indexes hold %lld entries for %zu messages", entries, n);
}

/* ------------------------------------------------------------------------ */
/* Thread-safe client steps (no cmocka asserts)                             */
/* ------------------------------------------------------------------------ */

enum outcome { OUT_NONE, OUT_CREATED, OUT_UNKNOWN, OUT_UNAVAILABLE, OUT_OTHER };

/* Enqueues payload to q: OUT_CREATED (with *id), OUT_UNKNOWN (503
 * outcome-unknown), OUT_UNAVAILABLE (503 backend-unavailable), OUT_NONE (no
 * response) or OUT_OTHER (anything else; *status gets the status). */
static enum outcome try_enqueue(e2e_conn_t *c, int port, const char *q, const char *payload,
                                long long *id, int *status)
{
    char path[256];
    snprintf(path, sizeof path, "/queues/%s/messages", q);
    size_t len;
    char *body = e2e_json_with_string("payload", payload, &len);
    e2e_response_t r = { 0 };
    int rc = e2e_try_request(c, port, &r, "POST", path, body, len);
    rd_free(body);
    *status = rc == 0 ? r.status : -1;
    enum outcome out = OUT_OTHER;
    char slug[64];
    slug_of(&r, slug, sizeof slug);
    if (rc != 0) out = OUT_NONE;
    else if (r.status == 201 && r.json && rd_json_integer(rd_json_get(r.json, "id"), id))
        out = OUT_CREATED;
    else if (r.status == 503 && strcmp(slug, "outcome-unknown") == 0)
        out = OUT_UNKNOWN;
    else if (r.status == 503 && strcmp(slug, "backend-unavailable") == 0)
        out = OUT_UNAVAILABLE;
    e2e_response_free(&r);
    return out;
}

/* An enqueue sent through the daemon and what it answered. */
typedef struct sent {
    char payload[48];
    enum outcome outcome;
    long long id;                 /* OUT_CREATED */
} sent_t;

typedef struct sent_log {
    sent_t *items;
    size_t n, cap;
} sent_log_t;

static sent_t *sent_add(sent_log_t *l)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->items = realloc(l->items, l->cap * sizeof *l->items);
    }
    sent_t *s = &l->items[l->n++];
    memset(s, 0, sizeof *s);
    return s;
}

/* Against what Redis holds: every 201 is stored under its id with its
 * payload; a 503 outcome-unknown enqueue is stored at most once; a 503
 * backend-unavailable one not at all; no payload twice; no more messages
 * than enqueues sent. Prints the tally. */
static void expect_enqueues_accounted(const sent_log_t *log, const stored_t *m, size_t n,
                                      const char *what)
{
    size_t created = 0, unknown = 0, unknown_applied = 0, unavailable = 0;
    expect_unique_payloads(m, n);
    for (size_t i = 0; i < log->n; i++) {
        const sent_t *s = &log->items[i];
        size_t k = payload_count(m, n, s->payload);
        switch (s->outcome) {
        case OUT_CREATED: {
            created++;
            const stored_t *x = find_id(m, n, s->id);
            if (x == NULL) fail_msg("%s: message %lld (\"%s\") got 201 but is not in Redis", what,
                                    s->id, s->payload);
            if (strcmp(x->payload, s->payload) != 0)
                fail_msg("%s: message %lld holds \"%s\", its 201 said \"%s\"", what, s->id,
                         x->payload, s->payload);
            if (strcmp(x->status, "pending") != 0 && strcmp(x->status, "processing") != 0 &&
                strcmp(x->status, "succeeded") != 0 && strcmp(x->status, "dead") != 0)
                fail_msg("%s: message %lld has status \"%s\"", what, s->id, x->status);
            break;
        }
        case OUT_UNKNOWN:
            unknown++;
            unknown_applied += k;
            if (k > 1) fail_msg("%s: outcome-unknown enqueue \"%s\" is stored %zu times", what,
                                s->payload, k);
            break;
        case OUT_UNAVAILABLE:
            unavailable++;
            if (k != 0) fail_msg("%s: \"%s\" was answered backend-unavailable (nothing done) "
                                 "but is stored", what, s->payload);
            break;
        default:
            fail_msg("%s: enqueue \"%s\" had outcome %d", what, s->payload, (int)s->outcome);
        }
    }
    if (n > log->n) fail_msg("%s: %zu messages stored for %zu enqueues sent", what, n, log->n);
    printf("# measured %s: %zu enqueues: %zu x 201 (all stored), %zu x outcome-unknown "
           "(%zu applied, none twice), %zu x backend-unavailable (none stored); %zu messages "
           "in Redis\n", what, log->n, created, unknown, unknown_applied, unavailable, n);
}

/* ========================================================================= */
/* 1. HTTP limits                                                            */
/* ========================================================================= */

/* Sends raw bytes on a fresh connection and reads one response (head too). */
static void raw_exchange(int port, const char *bytes, size_t len, e2e_conn_t *c,
                         e2e_response_t *r, char *head, size_t head_cap)
{
    assert_int_equal(e2e_conn_open(c, port), 0);
    assert_int_equal(e2e_send_all(c->fd, bytes, len), 0);
    if (fx_read_response_head(c, r, head, head_cap) != 0)
        fail_msg("no complete response to %.60s...", bytes);
}

static void test_header_over_16k_is_431(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "431");
    assert_int_equal(start_retryd(&g_dmn[0], "431.log", e2e_redis_url(g_shared_port), prefix, true,
                                  NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    char head[4096];

    /* A 20 KB header on an enqueue. */
    size_t big = 20 * 1024;
    char *hdr = malloc(big + 32);
    int n = snprintf(hdr, 32, "X-Big: ");
    memset(hdr + n, 'a', big);
    memcpy(hdr + n + big, "\r\n", 3);
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/hdr/messages", hdr,
                                      "{\"payload\":\"big header\"}", 24), 0);
    int fd = dup(c.fd);   /* e2e closes its fd on "Connection: close"; watch this one */
    assert_int_equal(fx_read_response_head(&c, &r, head, sizeof head), 0);
    e2e_expect_problem(&r, 431, "request-header-too-large", NULL);
    assert_string_equal(r.connection, "close");
    e2e_conn_close(&c);
    /* retryd ends its side after the reply (it drains what the client sent). */
    assert_true(fx_wait_closed(fd, 3000) >= 0);
    close(fd);

    /* A 20 KB request line. */
    char *path = malloc(big + 64);
    n = snprintf(path, 64, "/queues/hdr/messages?pad=");
    memset(path + n, 'b', big);
    path[n + big] = '\0';
    assert_int_equal(e2e_conn_open(&c, port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", path, NULL, "{\"payload\":\"big line\"}", 22),
                     0);
    assert_int_equal(fx_read_response_head(&c, &r, head, sizeof head), 0);
    e2e_expect_problem(&r, 431, "request-header-too-large", NULL);
    e2e_conn_close(&c);
    free(path);

    /* 12 KB of header is within the 16 KiB limit. */
    memcpy(hdr, "X-Big: ", 7);
    memset(hdr + 7, 'c', 12 * 1024);
    memcpy(hdr + 7 + 12 * 1024, "\r\n", 3);
    e2e_http_on(&g_conn, port, &r, "POST", "/queues/hdr/messages", hdr,
                "{\"payload\":\"fits\"}", 18);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    free(hdr);

    /* Redis: only the request that fitted was applied. */
    assert_int_equal(rq_int(g_shared, "GET %s:{hdr}:seq", prefix), 1);
    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "hdr", &count);
    assert_int_equal(count, 1);
    assert_string_equal(m[0].payload, "fits");
    stored_free(m, count);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

static void test_transfer_encoding_and_expect(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "te");
    assert_int_equal(start_retryd(&g_dmn[0], "te.log", e2e_redis_url(g_shared_port), prefix, true,
                                  "--max-body", "1024", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    e2e_conn_t c;
    char head[4096];

    /* gzip is not spoken: 501, never a hang and never compressed bytes as JSON. */
    static const char gzip[] = "POST /queues/te/messages HTTP/1.1\r\nHost: x\r\n"
                               "Content-Type: application/json\r\nTransfer-Encoding: gzip\r\n\r\n"
                               "\x1f\x8b\x08\x00";
    raw_exchange(port, gzip, sizeof gzip - 1, &c, &r, head, sizeof head);
    e2e_expect_problem(&r, 501, "not-implemented", NULL);
    assert_string_equal(r.connection, "close");
    e2e_conn_close(&c);

    static const char gzip_chunked[] =
        "POST /queues/te/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n";
    raw_exchange(port, gzip_chunked, sizeof gzip_chunked - 1, &c, &r, head, sizeof head);
    e2e_expect_problem(&r, 501, "not-implemented", NULL);
    e2e_conn_close(&c);

    /* chunked is accepted end to end. */
    static const char chunked[] =
        "POST /queues/te/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
        "b\r\n{\"payload\":\r\n"
        "b\r\n\"in chunks\"\r\n"
        "1\r\n}\r\n0\r\n\r\n";
    raw_exchange(port, chunked, sizeof chunked - 1, &c, &r, head, sizeof head);
    rd_json_t *msg = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(msg, "id"), 1);
    assert_string_equal(e2e_jstr(msg, "payload"), "in chunks");
    e2e_conn_close(&c);

    /* Expect: 100-continue: the interim 100 comes before the body is sent. */
    static const char body[] = "{\"payload\":\"after continue\"}";
    assert_int_equal(e2e_conn_open(&c, port), 0);
    const char *h = e2e_fmt("POST /queues/te/messages HTTP/1.1\r\nHost: x\r\n"
                        "Content-Type: application/json\r\nExpect: 100-continue\r\n"
                        "Content-Length: %zu\r\n\r\n", sizeof body - 1);
    assert_int_equal(e2e_send_all(c.fd, h, strlen(h)), 0);
    assert_int_equal(read_fresh(&c, &r), 0);
    assert_int_equal(r.status, 100);
    e2e_response_free(&r);
    assert_int_equal(e2e_send_all(c.fd, body, sizeof body - 1), 0);
    assert_int_equal(read_fresh(&c, &r), 0);
    msg = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(msg, "id"), 2);
    assert_string_equal(e2e_jstr(msg, "payload"), "after continue");
    /* The connection stays usable. */
    e2e_response_free(&r);
    assert_int_equal(request_fresh(&c, "GET", "/queues/te/messages/2", NULL, NULL, 0, &r), 0);
    e2e_expect_json(&r, 200);
    e2e_conn_close(&c);

    /* An announced body over --max-body: 413 at once, no 100, no body needed. */
    assert_int_equal(e2e_conn_open(&c, port), 0);
    h = "POST /queues/te/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Expect: 100-continue\r\nContent-Length: 5000\r\n\r\n";
    assert_int_equal(e2e_send_all(c.fd, h, strlen(h)), 0);
    assert_int_equal(read_fresh(&c, &r), 0);
    e2e_expect_problem(&r, 413, "payload-too-large", NULL);
    e2e_conn_close(&c);

    /* Any other expectation: 417 problem. */
    static const char fancy[] =
        "POST /queues/te/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Expect: fancy-feature\r\nContent-Length: 17\r\n\r\n{\"payload\":\"no\"}";
    raw_exchange(port, fancy, sizeof fancy - 1, &c, &r, head, sizeof head);
    e2e_expect_problem(&r, 417, "expectation-failed", NULL);
    e2e_conn_close(&c);

    /* Redis: exactly the two accepted enqueues. */
    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "te", &count);
    assert_int_equal(count, 2);
    assert_string_equal(m[0].payload, "in chunks");
    assert_string_equal(m[1].payload, "after continue");
    stored_free(m, count);
    assert_int_equal(rq_int(g_shared, "GET %s:{te}:seq", prefix), 2);
    e2e_response_free(&r);
    stop_retryd(&g_dmn[0]);
}

/* Two slowloris clients (one trickling a body, one a header) are cut off
 * after --idle-timeout, while a normal client on another connection keeps
 * getting answers. */
static void test_slowloris_is_dropped_others_served(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "slow");
    assert_int_equal(start_retryd(&g_dmn[0], "slow.log", e2e_redis_url(g_shared_port), prefix, true,
                                  "--idle-timeout", "2s", NULL), 0);
    int port = g_dmn[0].port;
    static const char *const opening[2] = {
        "POST /queues/slow/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
        "POST /queues/slow/messages HTTP/1.1\r\nHost: x\r\nX-Slow: ",
    };
    int slow[2];
    long long opened[2], closed_after[2] = { -1, -1 };
    for (int i = 0; i < 2; i++) {
        slow[i] = e2e_connect(port);
        assert_true(slow[i] >= 0);
        opened[i] = e2e_mono_ms();
        assert_int_equal(e2e_send_all(slow[i], opening[i], strlen(opening[i])), 0);
    }

    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    e2e_response_t r = { 0 };
    long long start = e2e_mono_ms(), next_byte = start + 500, worst_ms = 0;
    int served = 0;
    while ((closed_after[0] < 0 || closed_after[1] < 0) && e2e_mono_ms() - start < 6000) {
        long long now = e2e_mono_ms();
        if (now >= next_byte) {
            for (int i = 0; i < 2; i++)
                if (closed_after[i] < 0) send(slow[i], "x", 1, MSG_NOSIGNAL);
            next_byte += 500;
        }
        for (int i = 0; i < 2; i++)
            if (closed_after[i] < 0 && fx_peer_closed(slow[i]))
                closed_after[i] = e2e_mono_ms() - opened[i];
        /* The normal client: one enqueue per turn, each answered promptly. */
        long long t0 = e2e_mono_ms();
        const char *body = e2e_fmt("{\"payload\":\"normal %d\"}", served + 1);
        if (request_fresh(&c, "POST", "/queues/normal/messages", NULL, body, strlen(body), &r) != 0)
            fail_msg("the normal client got no answer while slowloris clients were connected");
        assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), served + 1);
        e2e_response_free(&r);
        served++;
        if (e2e_mono_ms() - t0 > worst_ms) worst_ms = e2e_mono_ms() - t0;
        struct pollfd p[2] = { { .fd = slow[0], .events = POLLIN },
                               { .fd = slow[1], .events = POLLIN } };
        poll(p, 2, 50);
    }
    for (int i = 0; i < 2; i++) close(slow[i]);
    printf("# measured slowloris: body trickler closed after %lld ms, header trickler after %lld "
           "ms (--idle-timeout 2s); normal client: %d requests, slowest %lld ms\n",
           closed_after[0], closed_after[1], served, worst_ms);
    for (int i = 0; i < 2; i++) {
        if (closed_after[i] < 0) fail_msg("slowloris client %d still connected after 6 s", i);
        if (closed_after[i] > IDLE_CLOSE_BOUND_MS)
            fail_msg("slowloris client %d closed after %lld ms, bound %d", i, closed_after[i],
                     IDLE_CLOSE_BOUND_MS);
        if (closed_after[i] < IDLE_TIMEOUT_MS - 200)
            fail_msg("slowloris client %d closed after %lld ms, before the idle timeout", i,
                     closed_after[i]);
    }
    assert_true(served >= 10);
    assert_true(worst_ms < 1000);
    /* The normal connection was never closed under it. */
    assert_true(c.fd >= 0 && !fx_peer_closed(c.fd));
    e2e_conn_close(&c);

    /* Redis: nothing from the slow clients, every normal enqueue. */
    assert_int_equal(rq_int(g_shared, "EXISTS %s:{slow}:seq", prefix), 0);
    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "normal", &count);
    assert_int_equal(count, (size_t)served);
    for (int i = 0; i < served; i++)
        assert_string_equal(m[i].payload, e2e_fmt("normal %d", i + 1));
    stored_free(m, count);
    stop_retryd(&g_dmn[0]);
}

/* Opens n connections and gets /healthz 200 on each. True when all n were
 * served (they stay open); otherwise closes what it opened. */
static bool open_all_served(int port, e2e_conn_t *conns, int n)
{
    e2e_response_t r = { 0 };
    int i;
    for (i = 0; i < n; i++) {
        if (e2e_conn_open(&conns[i], port) != 0) break;
        if (request_fresh(&conns[i], "GET", "/healthz", NULL, NULL, 0, &r) != 0 ||
            r.status != 200) {
            e2e_conn_close(&conns[i]);
            break;
        }
    }
    e2e_response_free(&r);
    if (i == n) return true;
    for (int j = 0; j < i; j++) e2e_conn_close(&conns[j]);
    return false;
}

/* Polls open_all_served for up to bound_ms; returns how long it took or -1. */
static long long wait_all_served(int port, e2e_conn_t *conns, int n, int bound_ms)
{
    long long t0 = e2e_mono_ms();
    while (!open_all_served(port, conns, n)) {
        if (e2e_mono_ms() - t0 > bound_ms) return -1;
        e2e_pause_ms(50);
    }
    return e2e_mono_ms() - t0;
}

/* The cap on open connections: the 9th is closed at once, the first 8 keep
 * working, and the places come back however a connection ends (the client
 * closes, the idle timeout, the linger after an error reply). */
static void test_max_connections(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "maxconn");
    assert_int_equal(start_retryd(&g_dmn[0], "maxconn.log", e2e_redis_url(g_shared_port), prefix,
                                  true, "--max-connections", "8", "--idle-timeout", "2s",
                                  NULL), 0);
    int port = g_dmn[0].port;
    e2e_conn_t cs[8];
    e2e_response_t r = { 0 };
    /* Eight connections, each known to be accepted (it answered). */
    for (int i = 0; i < 8; i++) {
        assert_int_equal(e2e_conn_open(&cs[i], port), 0);
        assert_int_equal(request_fresh(&cs[i], "GET", "/healthz", NULL, NULL, 0, &r), 0);
        e2e_expect_json(&r, 200);
    }
    /* The ninth: the kernel completes the handshake, retryd closes it at once. */
    int ninth = e2e_connect(port);
    assert_true(ninth >= 0);
    long long closed_ms = fx_wait_closed(ninth, 3000);
    close(ninth);
    printf("# measured max-connections 8: the 9th connection closed after %lld ms\n", closed_ms);
    if (closed_ms < 0) fail_msg("the 9th connection was not closed within 3 s");
    assert_true(closed_ms <= 1000);

    /* The first eight still work. */
    for (int i = 0; i < 8; i++) {
        const char *body = e2e_fmt("{\"payload\":\"conn %d\"}", i);
        if (request_fresh(&cs[i], "POST", "/queues/mc/messages", NULL, body, strlen(body), &r) != 0)
            fail_msg("connection %d got no answer after the 9th was refused", i);
        assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), i + 1);
    }
    /* One leaves: a newcomer gets its place (once retryd saw the close). */
    e2e_conn_close(&cs[0]);
    long long deadline = e2e_mono_ms() + 3000;
    e2e_conn_t fresh = { .fd = -1 };
    for (;;) {
        if (e2e_conn_open(&fresh, port) == 0 &&
            request_fresh(&fresh, "POST", "/queues/mc/messages", NULL, "{\"payload\":\"newcomer\"}",
                          22, &r) == 0)
            break;
        e2e_conn_close(&fresh);
        if (e2e_mono_ms() > deadline) fail_msg("no connection accepted 3 s after one closed");
        e2e_pause_ms(20);
    }
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 9);
    for (int i = 1; i < 8; i++) {
        assert_int_equal(
            request_fresh(&cs[i], "GET", "/queues/mc/messages/9", NULL, NULL, 0, &r), 0);
        e2e_expect_json(&r, 200);
    }

    /* The eight go quiet without closing: the idle timeout frees their places. */
    e2e_conn_t next[8];
    long long idle_freed_ms = wait_all_served(port, next, 8, 5000);
    if (idle_freed_ms < 0) fail_msg("8 new connections not served 5 s after 8 went idle");
    for (int i = 1; i < 8; i++) e2e_conn_close(&cs[i]);
    e2e_conn_close(&fresh);

    /* Eight error replies (431) whose clients keep the socket open: the
     * linger after the reply ends, and frees the places too. */
    char *hdr = malloc(20 * 1024 + 16);
    memcpy(hdr, "X-Big: ", 7);
    memset(hdr + 7, 'h', 20 * 1024);
    memcpy(hdr + 7 + 20 * 1024, "\r\n", 3);
    int held[8];
    char head[1024];
    for (int i = 0; i < 8; i++) {
        held[i] = dup(next[i].fd);   /* keeps the socket open after e2e closes its fd */
        assert_int_equal(e2e_send_request(&next[i], "GET", "/healthz", hdr, NULL, 0), 0);
        assert_int_equal(fx_read_response_head(&next[i], &r, head, sizeof head), 0);
        e2e_expect_problem(&r, 431, "request-header-too-large", NULL);
        e2e_conn_close(&next[i]);
    }
    free(hdr);
    int extra = e2e_connect(port);
    assert_true(extra >= 0);
    long long extra_closed = fx_wait_closed(extra, 3000);
    close(extra);
    if (extra_closed < 0 || extra_closed > 1000)
        fail_msg("with 8 lingering connections a new one was not refused at once (%lld ms)",
                 extra_closed);
    long long linger_freed_ms = wait_all_served(port, next, 8, 5000);
    for (int i = 0; i < 8; i++) close(held[i]);
    if (linger_freed_ms < 0) fail_msg("8 new connections not served 5 s after 8 error replies");
    for (int i = 0; i < 8; i++) e2e_conn_close(&next[i]);
    printf("# measured max-connections 8: places freed by the idle timeout after %lld ms, by "
           "the linger after 431 replies after %lld ms\n", idle_freed_ms, linger_freed_ms);
    e2e_response_free(&r);

    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "mc", &count);
    assert_int_equal(count, 9);
    for (int i = 0; i < 8; i++) assert_string_equal(m[i].payload, e2e_fmt("conn %d", i));
    assert_string_equal(m[8].payload, "newcomer");
    stored_free(m, count);
    stop_retryd(&g_dmn[0]);
}

/* An idle keep-alive connection, and one that never sends a byte, are
 * closed after --idle-timeout; a connection in use every 400 ms is not,
 * however long it lives. */
static void test_idle_keep_alive_is_closed(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "idle");
    assert_int_equal(start_retryd(&g_dmn[0], "idle.log", e2e_redis_url(g_shared_port), prefix, true,
                                  "--idle-timeout", "2s", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    e2e_conn_t idle, busy;
    assert_int_equal(e2e_conn_open(&idle, port), 0);
    assert_int_equal(e2e_conn_open(&busy, port), 0);
    int silent = e2e_connect(port);
    assert_true(silent >= 0);
    long long silent_opened = e2e_mono_ms();
    /* A long-poll longer than the idle timeout is a request in progress,
     * not an idle connection: it gets its 204 after 3 s. */
    e2e_conn_t waiting;
    assert_int_equal(e2e_conn_open(&waiting, port), 0);
    assert_int_equal(e2e_send_request(&waiting, "POST", "/queues/idle-none/claim", NULL,
                                      "{\"wait_seconds\":3}", 18), 0);
    long long waiting_sent = e2e_mono_ms(), waiting_answered = -1;
    assert_int_equal(request_fresh(&idle, "POST", "/queues/idle/messages", NULL,
                                   "{\"payload\":\"then idle\"}", 23, &r), 0);
    e2e_expect_json(&r, 201);
    long long idle_since = e2e_mono_ms();
    int busy_fd = busy.fd, busy_requests = 0;
    long long idle_closed = -1, silent_closed = -1, next_busy = 0;
    while (e2e_mono_ms() - idle_since < 4500) {
        long long now = e2e_mono_ms();
        if (idle_closed < 0 && fx_peer_closed(idle.fd)) idle_closed = now - idle_since;
        if (silent_closed < 0 && fx_peer_closed(silent)) silent_closed = now - silent_opened;
        if (waiting_answered < 0) {
            struct pollfd pw = { .fd = waiting.fd, .events = POLLIN };
            if (poll(&pw, 1, 0) == 1) waiting_answered = now - waiting_sent;
        }
        if (now >= next_busy) {
            const char *body = e2e_fmt("{\"payload\":\"busy %d\"}", busy_requests + 1);
            if (request_fresh(&busy, "POST", "/queues/idle/messages", NULL, body, strlen(body),
                              &r) != 0)
                fail_msg("the busy connection failed after %lld ms", now - idle_since);
            e2e_expect_json(&r, 201);
            busy_requests++;
            next_busy = now + 400;
        }
        e2e_pause_ms(10);
    }
    printf("# measured idle-timeout 2s: idle keep-alive closed after %lld ms, silent connection "
           "after %lld ms; a connection used every 400 ms stayed open for 4.5 s\n", idle_closed,
           silent_closed);
    close(silent);
    if (read_fresh(&waiting, &r) != 0)
        fail_msg("the 3 s long-poll got no response under --idle-timeout 2s");
    assert_int_equal(r.status, 204);
    e2e_conn_close(&waiting);
    printf("# measured idle-timeout 2s: a long-poll with wait_seconds 3 answered 204 after %lld "
           "ms\n", waiting_answered);
    assert_true(waiting_answered >= 2900 && waiting_answered <= 4000);
    if (idle_closed < 0) fail_msg("the idle keep-alive connection is still open after 4.5 s");
    if (silent_closed < 0) fail_msg("the silent connection is still open after 4.5 s");
    assert_true(idle_closed >= IDLE_TIMEOUT_MS - 200 && idle_closed <= IDLE_CLOSE_BOUND_MS);
    assert_true(silent_closed >= IDLE_TIMEOUT_MS - 200 && silent_closed <= IDLE_CLOSE_BOUND_MS);
    assert_int_equal(busy.fd, busy_fd);
    assert_false(fx_peer_closed(busy.fd));
    e2e_conn_close(&busy);
    e2e_conn_close(&idle);
    e2e_response_free(&r);

    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "idle", &count);
    assert_int_equal(count, (size_t)busy_requests + 1);
    assert_string_equal(m[0].payload, "then idle");
    stored_free(m, count);
    stop_retryd(&g_dmn[0]);
}

/* ========================================================================= */
/* 2. Auth                                                                   */
/* ========================================================================= */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void base64(const char *in, char *out)
{
    size_t n = strlen(in), o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < n) v |= (unsigned char)in[i + 1] << 8;
        if (i + 2 < n) v |= (unsigned char)in[i + 2];
        out[o++] = b64[(v >> 18) & 63];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? b64[v & 63] : '=';
    }
    out[o] = '\0';
}

typedef struct route {
    const char *method, *path, *body;
} route_t;

static void test_auth_bearer_token(void **state)
{
    (void)state;
    char prefix[128];
    PREFIX(prefix, "auth");
    char token[65], file[PATH_MAX], log[PATH_MAX];
    assert_int_equal(fx_random_hex(token, 48), 0);
    SET(file, tmp_path("token"));
    SET(log, tmp_path("auth.log"));
    assert_int_equal(fx_write_file(file, e2e_fmt("%s\n", token)), 0);
    assert_int_equal(start_retryd(&g_dmn[0], "auth.log", e2e_redis_url(g_shared_port), prefix,
                                  false, "--auth-token-file", file, "--log-level", "debug",
                                  NULL), 0);
    int port = g_dmn[0].port;

    static const route_t routes[] = {
        { "POST", "/queues/a/messages", "{\"payload\":\"denied\"}" },
        { "GET", "/queues/a/messages", NULL },
        { "GET", "/queues/a/messages/1", NULL },
        { "POST", "/queues/a/claim", NULL },
        { "POST", "/queues/a/messages/1/succeed", NULL },
        { "POST", "/queues/a/succeed", "{\"messages\":[{\"id\":1}]}" },
        { "POST", "/queues/a/messages/1/fail", "{\"error\":\"x\"}" },
        { "POST", "/queues/a/messages/1/extend", NULL },
        { "POST", "/queues/a/messages/1/replay", NULL },
        { "POST", "/queues/a/messages/1/kill", NULL },
        { "POST", "/queues/a/replay", "{\"all\":true}" },
        { "DELETE", "/queues/a/messages/1", NULL },
        { "GET", "/queues", NULL },
        { "GET", "/queues/a/stats", NULL },
        { "GET", "/metrics", NULL },
        { "GET", "/readyz", NULL },
        { "POST", "/queues/a/messages", "{}" },          /* 401 before 422 */
        { "POST", "/queues/a/messages", "{not json" },   /* 401 before 400 */
    };
    char basic_cred[160], basic[256], prefix_tok[80], plus_one[80];
    base64(e2e_fmt("retryd:%s", token), basic_cred);
    snprintf(basic, sizeof basic, "Authorization: Basic %s\r\n", basic_cred);
    snprintf(prefix_tok, sizeof prefix_tok, "%.*s", (int)strlen(token) - 1, token);
    snprintf(plus_one, sizeof plus_one, "%sx", token);
    char variants[8][256];
    const char *names[8] = { "missing", "wrong", "prefix", "token+1", "Basic", "empty Bearer",
                             "no scheme", "other scheme" };
    variants[0][0] = '\0';
    SET(variants[1], "Authorization: Bearer 0123456789abcdef\r\n");
    SET(variants[2], e2e_fmt("Authorization: Bearer %s\r\n", prefix_tok));
    SET(variants[3], e2e_fmt("Authorization: Bearer %s\r\n", plus_one));
    SET(variants[4], basic);
    SET(variants[5], "Authorization: Bearer\r\n");
    SET(variants[6], e2e_fmt("Authorization: %s\r\n", token));
    SET(variants[7], e2e_fmt("Authorization: Token %s\r\n", token));

    e2e_conn_t c = { .fd = -1 };
    e2e_response_t r = { 0 };
    char head[4096], www[256];
    int denied = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        for (int v = 0; v < 8; v++) {
            if (c.fd < 0) {
                e2e_conn_close(&c);  /* what the closed one had read */
                assert_int_equal(e2e_conn_open(&c, port), 0);
            }
            const route_t *rt = &routes[i];
            assert_int_equal(e2e_send_request(&c, rt->method, rt->path,
                                              variants[v][0] ? variants[v] : NULL, rt->body,
                                              rt->body ? strlen(rt->body) : 0), 0);
            if (fx_read_response_head(&c, &r, head, sizeof head) != 0)
                fail_msg("%s %s (%s): no response", rt->method, rt->path, names[v]);
            if (r.status != 401)
                fail_msg("%s %s with the token %s: %d, expected 401: %s", rt->method, rt->path,
                         names[v], r.status, r.body);
            e2e_expect_problem(&r, 401, "unauthorized", NULL);
            if (!fx_head_header(head, "WWW-Authenticate", www, sizeof www) ||
                strncmp(www, "Bearer", 6) != 0)
                fail_msg("%s %s (%s): no WWW-Authenticate: Bearer header", rt->method, rt->path,
                         names[v]);
            e2e_response_free(&r);
            denied++;
        }
    }
    /* /healthz and /openapi.json are open with or without a token. (A
     * refused request with a body closed its connection: a 401 at its
     * headers, the body unread.) */
    static const char *const open_paths[] = { "/healthz", "/openapi.json" };
    if (c.fd < 0) {
        e2e_conn_close(&c);
        assert_int_equal(e2e_conn_open(&c, port), 0);
    }
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(request_fresh(&c, "GET", open_paths[i], NULL, NULL, 0, &r), 0);
        e2e_expect_json(&r, 200);
        assert_int_equal(request_fresh(&c, "GET", open_paths[i], variants[1], NULL, 0, &r), 0);
        e2e_expect_json(&r, 200);
    }
    e2e_conn_close(&c);

    /* The right token: normal answers on every route. */
    char ok[160];
    SET(ok, e2e_fmt("Authorization: Bearer %s\r\n", token));
    struct step {
        const char *method, *path, *body;
        int status;
    } steps[] = {
        { "GET", "/readyz", NULL, 200 },
        { "POST", "/queues/a/messages", "{\"payload\":\"allowed\"}", 201 },
        { "GET", "/queues/a/messages/1", NULL, 200 },
        { "GET", "/queues/a/messages", NULL, 200 },
        { "POST", "/queues/a/claim", "{\"lease_seconds\":30}", 200 },
        { "POST", "/queues/a/messages/1/extend", "{\"lease_seconds\":60}", 200 },
        { "POST", "/queues/a/messages/1/fail", "{\"error\":\"boom\",\"retryable\":false}", 200 },
        { "POST", "/queues/a/messages/1/replay", NULL, 200 },
        { "POST", "/queues/a/replay", "{\"all\":true}", 200 },
        { "POST", "/queues/a/claim", NULL, 200 },
        { "POST", "/queues/a/messages/1/succeed", NULL, 200 },
        { "POST", "/queues/a/succeed", "{\"messages\":[{\"id\":1}]}", 200 },
        { "POST", "/queues/a/messages", "{\"payload\":\"doomed\"}", 201 },
        { "POST", "/queues/a/messages/2/kill", NULL, 200 },
        { "DELETE", "/queues/a/messages/2", NULL, 204 },
        { "GET", "/queues", NULL, 200 },
        { "GET", "/queues/a/stats", NULL, 200 },
        { "GET", "/metrics", NULL, 200 },
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        e2e_http_on(&g_conn, port, &r, steps[i].method, steps[i].path, ok, steps[i].body,
                    steps[i].body ? strlen(steps[i].body) : 0);
        if (r.status != steps[i].status)
            fail_msg("%s %s with the right token: %d, expected %d: %s", steps[i].method,
                     steps[i].path, r.status, steps[i].status, r.body);
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    /* Redis: the denied enqueues created nothing. */
    assert_int_equal(rq_int(g_shared, "GET %s:{a}:seq", prefix), 2);
    size_t count;
    stored_t *m = load_messages(g_shared, prefix, "a", &count);
    assert_int_equal(count, 1);
    assert_int_equal(m[0].id, 1);
    assert_string_equal(m[0].payload, "allowed");
    assert_string_equal(m[0].status, "succeeded");
    stored_free(m, count);

    /* The token never reaches the log, even at debug level. */
    stop_retryd(&g_dmn[0]);
    char *text = fx_read_file(log);
    assert_non_null(text);
    bool debug_seen = strstr(text, " debug ") != NULL;
    bool leaked = strstr(text, prefix_tok) != NULL ||
                  strstr(text, e2e_fmt("%.16s", token)) != NULL ||
                  strstr(text, basic_cred) != NULL;
    size_t log_len = strlen(text);
    free(text);
    printf("# measured auth: %d denied requests (18 requests x 8 bad credentials), log %zu bytes\n",
           denied, log_len);
    assert_true(debug_seen);
    if (leaked) fail_msg("the bearer token (or a part of it) appears in retryd's log %s", log);
}

static void test_default_bind_is_loopback(void **state)
{
    (void)state;
    char out[PATH_MAX];
    SET(out, tmp_path("help.txt"));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        unsetenv("RETRYD_LISTEN");
        execl(g_bin, g_bin, "--help", (char *)NULL);
        _exit(127);
    }
    int wstatus;
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    char *text = fx_read_file(out);
    assert_non_null(text);
    bool listen_default = strstr(text, "--listen") && strstr(text, "127.0.0.1:8080");
    bool any_host = strstr(text, "0.0.0.0") != NULL;
    free(text);
    assert_true(listen_default);
    assert_false(any_host);
}

/* Redis ACL: a user with a password from the URL; a wrong password is a 503
 * daemon that keeps running; passwords never reach the log. */
static void test_redis_acl_user(void **state)
{
    (void)state;
    assert_int_equal(fx_redis_start(&g_srv, NULL), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    redisReply *x = e2e_rcmd(g_admin, "ACL SETUSER retryd on >s3cret ~* &* +@all");
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    x = e2e_rcmd(g_admin, "CONFIG SET requirepass d3fault-pw");
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    x = e2e_rcmd(g_admin, "AUTH d3fault-pw");
    freeReplyObject(x);
    /* Anonymous clients are refused now. */
    redisContext *anon = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(anon);
    x = e2e_rcmd(anon, "GET x");
    assert_int_equal(x->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(x->str, "NOAUTH"));
    freeReplyObject(x);
    redisFree(anon);

    char good[128], wrong[128], dflt[128];
    SET(good, e2e_fmt("redis://retryd:s3cret@127.0.0.1:%d", g_srv.port));
    SET(wrong, e2e_fmt("redis://retryd:Wr0ngPassw0rd@127.0.0.1:%d", g_srv.port));
    SET(dflt, e2e_fmt("redis://:d3fault-pw@127.0.0.1:%d", g_srv.port));
    e2e_response_t r = { 0 };

    /* The ACL user: ready, 201, and the message is in Redis. */
    assert_int_equal(start_retryd(&g_dmn[0], "acl-good.log", good, "aclok", true, "--log-level",
                                  "debug", NULL), 0);
    http(g_dmn[0].port, &r, "POST", "/queues/acl/messages", "{\"payload\":\"via acl user\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    char field[64];
    assert_string_equal(e2e_message_field(g_admin, "aclok:{acl}", 1, "payload", field, sizeof field),
                        "via acl user");
    x = e2e_rcmd(g_admin, "CLIENT LIST");
    int as_retryd = 0;
    for (const char *p = x->str; (p = strstr(p, " user=retryd ")) != NULL; p++) as_retryd++;
    freeReplyObject(x);
    assert_true(as_retryd >= 2);   /* the command link and the notification link */

    /* A wrong password: /readyz and every Redis route 503, the process lives. */
    assert_int_equal(start_retryd(&g_dmn[1], "acl-wrong.log", wrong, "aclbad", false,
                                  "--log-level", "debug", NULL), 0);
    long long deadline = e2e_mono_ms() + 5000;
    for (;;) {   /* until the refusal was seen (and logged) */
        char *text = fx_read_file(tmp_path("acl-wrong.log"));
        bool refused = text && strstr(text, "AUTH failed");
        free(text);
        if (refused) break;
        if (e2e_mono_ms() > deadline) fail_msg("retryd never logged the failed AUTH");
        e2e_pause_ms(20);
    }
    for (int i = 0; i < 3; i++) {
        http(g_dmn[1].port, &r, "GET", "/readyz", NULL);
        assert_int_equal(r.status, 503);
        http(g_dmn[1].port, &r, "POST", "/queues/acl/messages", "{\"payload\":\"refused\"}");
        e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
        assert_true(r.retry_after[0] != '\0');
    }
    assert_true(e2e_daemon_alive(&g_dmn[1]));
    x = e2e_rcmd(g_admin, "KEYS aclbad*");
    assert_int_equal(x->elements, 0);
    freeReplyObject(x);

    /* redis://:password@ (docs/reference.md "Daemon"): the default user. */
    assert_int_equal(start_retryd(&g_dmn[2], "acl-default.log", dflt, "acldef", true, NULL), 0);
    http(g_dmn[2].port, &r, "POST", "/queues/acl/messages", "{\"payload\":\"via default\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    assert_string_equal(e2e_message_field(g_admin, "acldef:{acl}", 1, "payload", field,
                                          sizeof field), "via default");
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    /* A user that may not FUNCTION LOAD: never ready, 503, never a crash. */
    x = e2e_rcmd(g_admin, "ACL SETUSER nofn on >n0fn-pw ~* &* +@all -function");
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    assert_int_equal(start_retryd(&g_dmn[3], "acl-nofn.log",
                                  e2e_fmt("redis://nofn:n0fn-pw@127.0.0.1:%d", g_srv.port),
                                  "aclnofn", false, NULL), 0);
    deadline = e2e_mono_ms() + 5000;
    for (;;) {
        char *text = fx_read_file(tmp_path("acl-nofn.log"));
        bool refused = text && strstr(text, "NOPERM");
        free(text);
        if (refused) break;
        if (e2e_mono_ms() > deadline) fail_msg("retryd never logged the refused FUNCTION LOAD");
        e2e_pause_ms(20);
    }
    http(g_dmn[3].port, &r, "POST", "/queues/acl/messages", "{\"payload\":\"no function\"}");
    e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
    http(g_dmn[3].port, &r, "GET", "/readyz", NULL);
    assert_int_equal(r.status, 503);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    const char *logs[4] = { "acl-good.log", "acl-wrong.log", "acl-default.log", "acl-nofn.log" };
    for (int i = 0; i < 4; i++) stop_retryd(&g_dmn[i]);
    for (int i = 0; i < 4; i++) {
        char *text = fx_read_file(tmp_path(logs[i]));
        assert_non_null(text);
        bool leaked = strstr(text, "s3cret") || strstr(text, "Wr0ngPassw0rd") ||
                      strstr(text, "d3fault-pw") || strstr(text, "n0fn-pw");
        free(text);
        if (leaked) fail_msg("a Redis password appears in %s", logs[i]);
    }
}


/* Waits (bounded) for d to exit; returns its exit status, -1 when it did not. */
static int wait_exit(e2e_daemon_t *d, int bound_ms)
{
    long long deadline = e2e_mono_ms() + bound_ms;
    int wstatus;
    while (!e2e_daemon_exited(d, &wstatus)) {
        if (e2e_mono_ms() > deadline) return -1;
        e2e_pause_ms(10);
    }
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
}

/* A bad --redis URL (or RETRYD_REDIS, or --redis-cluster) is refused with
 * exit 2 and named on stderr with its password masked (docs/reference.md "Daemon"). */
static void test_bad_redis_url_password_not_echoed(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        { "--redis", "redis://:Pa55-secret@127.0.0.1:notaport" },
        { "--redis", "redis://alice:Pa55-secret@127.0.0.1:70000" },
        { "--redis-cluster", "redis://:Pa55-secret@127.0.0.1:1,nohostport" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char log[PATH_MAX];
        SET(log, tmp_path(e2e_fmt("badurl-%zu.log", i)));
        const char *args[] = { bad[i][0], bad[i][1], NULL };
        assert_int_equal(e2e_daemon_spawn_logged(&g_dmn[0], NULL, g_bin, args, log), 0);
        assert_int_equal(wait_exit(&g_dmn[0], 5000), 2);
        char *text = fx_read_file(log);
        assert_non_null(text);
        bool leaked = strstr(text, "Pa55-secret") != NULL;
        bool masked = strstr(text, ":***@127.0.0.1") != NULL;
        if (leaked || !masked) fail_msg("stderr for %s %s:\n%s", bad[i][0], bad[i][1], text);
        free(text);
    }
}

/* A Functions library that answers every call with a reply of the wrong
 * shape: a bare integer, a string, nil, an empty array, arrays too short or
 * with the wrong types (what another version of the library may answer).
 * Registered under the names this retryd calls. */
static const char *fake_library(void)
{
#define FN(name) "'" RD_FUNCTION(name) "'"
    return "#!lua name=retryd_fake_shapes\n"
           "local function reg(n, f, ro)\n"
           "  redis.register_function{ function_name = n, callback = f,\n"
           "                           flags = ro and { 'no-writes' } or nil }\n"
           "end\n"
           "reg(" FN("enqueue") ", function() return { 'ok' } end)\n"
           /* claim by count: {} or leased messages (by position) cut short,
            * with an odd tail, a history that is not an array, an integer
            * payload, a message that is not an array. */
           "local leased = { ['2'] = { 1, 'p', 0, 3, 1, 2, 3 },\n"
           "  ['3'] = { 1, 'p', 0, 3, 1, 2, 3, 'tok', 'worker' },\n"
           "  ['4'] = { 1, 'p', 0, 3, 1, 2, 3, 'tok', 'history', 'x' },\n"
           "  ['5'] = { 1, 7, 0, 3, 1, 2, 3, 'tok' }, ['6'] = 'x' }\n"
           "reg(" FN("claim") ", function(k, a)\n"
           "  if leased[a[2]] then return { 'ok', leased[a[2]], -1 } end\n"
           "  return {}\n"
           "end)\n"
           "reg(" FN("settle_claim") ", function()\n"
           "  return { 'ok', { 'succeeded' }, leased['3'], -1 }\n"
           "end)\n"
           "reg(" FN("succeed") ", function() return nil end)\n"
           "reg(" FN("fail") ", function() return { 'ok', 'not a message' } end)\n"
           "reg(" FN("extend") ", function() return { 'ok', { 'id' } } end)\n"
           "reg(" FN("replay") ", function() return { 'invalid_state' } end)\n"
           "reg(" FN("get") ", function() return 'just a string' end, true)\n"
           "reg(" FN("list") ", function() return 7 end, true)\n"
           "reg(" FN("stats") ", function() return { 1, 2, 3 } end, true)\n"
           "reg(" FN("export") ", function() return 1 end, true)\n"
           "reg(" FN("replay_many") ", function() return 5 end)\n"
           "reg(" FN("succeed_many") ", function() return 3 end)\n"
           "reg(" FN("release") ", function() return 'x' end)\n"
           "reg(" FN("delete") ", function() return { {} } end)\n"
           "reg(" FN("kill") ", function() return { 'ok', 5 } end)\n"
           "reg(" FN("purge") ", function() return 'x' end)\n"
           "reg(" FN("promote") ", function() return 'x' end)\n"
           "reg(" FN("reclaim") ", function() return 'x' end)\n"
           "reg(" FN("tick") ", function() return { 'a', 'b' } end)\n";
#undef FN
}

/* Every reply of an unexpected shape is an error answer (500, or 503), never
 * a crash; the daemon logs what it got and stops cleanly (docs/reference.md "Rolling upgrade"). */
static void test_unexpected_reply_shapes(void **state)
{
    (void)state;
    assert_int_equal(fx_redis_start(&g_srv, NULL), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    assert_int_equal(start_retryd(&g_dmn[0], "shapes.log",
                                  e2e_fmt("redis://127.0.0.1:%d", g_srv.port), "shapes", true,
                                  NULL), 0);
    e2e_response_t r = { 0 };
    http(g_dmn[0].port, &r, "POST", "/queues/q/messages", "{\"payload\":\"real\"}");
    e2e_expect_json(&r, 201);

    redisReply *x = e2e_rcmd(g_admin, "FUNCTION DELETE %s", RD_LIBRARY_NAME);
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    x = e2e_rcmd(g_admin, "FUNCTION LOAD %s", fake_library());
    if (x->type != REDIS_REPLY_STRING) fail_msg("loading the fake library: %s", x->str);
    freeReplyObject(x);

    static const struct { const char *method, *path, *body; } calls[] = {
        /* The list reply's bad_cursor check once indexed a bare integer. */
        { "POST", "/queues/q/replay", "{\"all\":true}" },
        { "POST", "/queues/q/replay", "{\"error_contains\":\"x\"}" },
        { "POST", "/queues/q/replay", "{\"ids\":[1,2]}" },
        { "POST", "/queues/q/messages", "{\"payload\":\"p\"}" },
        { "POST", "/queues/q/messages", "{\"payload\":\"p\",\"idempotency_key\":\"k\"}" },
        { "POST", "/queues/q/claim", NULL },
        { "POST", "/queues/q/claim", "{\"count\":2}" },
        { "POST", "/queues/q/claim", "{\"count\":3}" },
        { "POST", "/queues/q/claim", "{\"count\":4}" },
        { "POST", "/queues/q/claim", "{\"count\":5}" },
        { "POST", "/queues/q/claim", "{\"count\":6}" },
        { "POST", "/queues/q/claim", "{\"settle\":[{\"id\":1,\"outcome\":\"succeeded\"}]}" },
        { "POST", "/queues/q/messages/1/succeed", NULL },
        { "POST", "/queues/q/messages/1/fail", "{\"error\":\"e\"}" },
        { "POST", "/queues/q/messages/1/extend", NULL },
        { "POST", "/queues/q/messages/1/replay", NULL },
        { "POST", "/queues/q/messages/1/kill", NULL },
        { "DELETE", "/queues/q/messages/1", NULL },
        { "GET", "/queues/q/messages/1", NULL },
        { "GET", "/queues/q/messages", NULL },
        { "GET", "/queues/q/messages?status=dead", NULL },
        { "GET", "/queues/q/stats", NULL },
        { "GET", "/queues", NULL },
        { "GET", "/metrics", NULL },
        { "POST", "/queues/q/succeed", "{\"messages\":[{\"id\":1}]}" },
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        const char *body = calls[i].body;
        e2e_conn_close(&g_conn);
        e2e_response_free(&r);
        int rc = e2e_try_request(&g_conn, g_dmn[0].port, &r, calls[i].method, calls[i].path,
                                 body, body ? strlen(body) : 0);
        if (rc != 0) {
            e2e_pause_ms(100);  /* a crash may take a moment to be reaped */
            fail_msg("%s %s: no answer, retryd %s", calls[i].method, calls[i].path,
                     e2e_daemon_alive(&g_dmn[0]) ? "alive" : "died");
        }
        /* The fan-outs (/queues, /metrics) leave out a queue whose stats failed. */
        if ((strcmp(calls[i].path, "/metrics") == 0 || strcmp(calls[i].path, "/queues") == 0) &&
            r.status == 200)
            continue;
        if (r.status == 500) e2e_expect_problem_type(&r, 500, "internal-error");
        else if (r.status != 503 || !e2e_media_type_is(r.content_type, "application/problem+json"))
            fail_msg("%s %s answered %d: %s", calls[i].method, calls[i].path, r.status, r.body);
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    /* A few ticks of the promoter against the same library. */
    e2e_pause_ms(5 * TICK_MS);
    assert_true(e2e_daemon_alive(&g_dmn[0]));
    stop_retryd(&g_dmn[0]);
    char *text = fx_read_file(tmp_path("shapes.log"));
    assert_non_null(text);
    bool logged = strstr(text, "unexpected reply") != NULL;
    free(text);
    if (!logged) fail_msg("retryd did not log the unexpected replies");
}

/* ========================================================================= */
/* 3. Redis faults                                                           */
/* ========================================================================= */

/* Enqueues payload on g_conn and records what came back: 201, or a 503 of
 * either kind (asserted), within bound_ms. Returns the outcome; *took_ms. */
static enum outcome enqueue_logged(int port, const char *q, const char *payload, sent_log_t *log,
                                   int bound_ms, long long *took_ms)
{
    sent_t *s = sent_add(log);
    SET(s->payload, payload);
    e2e_response_t r = { 0 };
    long long t0 = e2e_mono_ms();
    size_t len;
    char *body = e2e_json_with_string("payload", payload, &len);
    e2e_http_on(&g_conn, port, &r, "POST", e2e_fmt("/queues/%s/messages", q), NULL, body, len);
    rd_free(body);
    long long took = e2e_mono_ms() - t0;
    if (took_ms) *took_ms = took;
    if (took > bound_ms)
        fail_msg("enqueue \"%s\" took %lld ms (bound %d)", payload, took, bound_ms);
    if (r.status == 201) {
        s->outcome = OUT_CREATED;
        s->id = e2e_jint(e2e_expect_json(&r, 201), "id");
    } else {
        s->outcome = expect_503(&r) ? OUT_UNKNOWN : OUT_UNAVAILABLE;
    }
    e2e_response_free(&r);
    return s->outcome;
}

/* Enqueues until one is 201 (bounded); returns how long it took. */
static long long enqueue_until_created(int port, const char *q, const char *tag, sent_log_t *log,
                                       int bound_ms)
{
    long long t0 = e2e_mono_ms();
    for (int i = 1;; i++) {
        if (enqueue_logged(port, q, e2e_fmt("%s %d", tag, i), log, UNAVAILABLE_BOUND_MS, NULL) ==
            OUT_CREATED)
            return e2e_mono_ms() - t0;
        if (e2e_mono_ms() - t0 > bound_ms)
            fail_msg("%s: still 503 after %d ms", tag, bound_ms);
        e2e_pause_ms(25);
    }
}

/* A long-poll claim on another thread: its status and when it returned. */
typedef struct long_poll {
    pthread_t thread;
    int port;
    int wait_seconds;             /* 0: 5 */
    char path[128];
    int status;
    long long id;
    long long started_at, returned_at;
} long_poll_t;

static void *long_poll_main(void *arg)
{
    long_poll_t *lp = arg;
    e2e_conn_t c = { .fd = -1 };
    e2e_response_t r = { 0 };
    char body[96];
    snprintf(body, sizeof body, "{\"wait_seconds\":%d,\"lease_seconds\":30}",
             lp->wait_seconds ? lp->wait_seconds : 5);
    lp->status = e2e_try_request(&c, lp->port, &r, "POST", lp->path, body, strlen(body)) == 0
                     ? r.status : -1;
    if (r.json) rd_json_integer(rd_json_get(r.json, "id"), &lp->id);
    lp->returned_at = e2e_mono_ms();
    e2e_response_free(&r);
    e2e_conn_close(&c);
    return NULL;
}

/* True when someone (a parked long-poll) listens on q's wake channel. */
static bool wake_subscribed(redisContext *c, const char *prefix, const char *q)
{
    redisReply *x = e2e_rcmd(c, "PUBSUB NUMSUB %s:{%s}:wake", prefix, q);
    long long subs = x->elements == 2 ? x->element[1]->integer : 0;
    freeReplyObject(x);
    return subs >= 1;
}

/* SIGSTOP: the command in flight is answered outcome-unknown within the
 * timeout, later ones backend-unavailable at once; SIGCONT: served again;
 * no enqueue is duplicated, none that got 201 is lost. */
static void test_redis_paused_sigstop(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "paused";
    assert_int_equal(start_retryd(&g_dmn[0], "paused.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    sent_log_t log = { 0 };
    e2e_response_t r = { 0 };
    for (int i = 1; i <= 3; i++)
        assert_int_equal(enqueue_logged(port, "p", e2e_fmt("before %d", i), &log, 1000, NULL),
                         OUT_CREATED);
    http(port, &r, "POST", "/queues/p/claim", "{\"lease_seconds\":60}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), 1);

    /* A long-poll claim parked when Redis stops must still be answered. lp
     * is static: if the test fails before the join, the thread outlives the
     * frame. */
    static long_poll_t lp;
    memset(&lp, 0, sizeof lp);
    lp.port = port;
    lp.wait_seconds = 2;
    snprintf(lp.path, sizeof lp.path, "/queues/p-idle/claim");
    lp.started_at = e2e_mono_ms();
    assert_int_equal(pthread_create(&lp.thread, NULL, long_poll_main, &lp), 0);
    long long deadline = e2e_mono_ms() + 3000;
    while (!wake_subscribed(g_admin, prefix, "p-idle")) {
        if (e2e_mono_ms() > deadline) {
            pthread_join(lp.thread, NULL);
            fail_msg("the long-poll never parked");
        }
        e2e_pause_ms(20);
    }

    assert_int_equal(fx_redis_pause(&g_srv), 0);
    long long paused_at = e2e_mono_ms(), first_ms, claim_ms, worst_ms = 0;
    /* Sent to a hanging Redis: the link is dropped at the timeout. */
    enum outcome first = enqueue_logged(port, "p", "paused 0", &log, UNAVAILABLE_BOUND_MS,
                                        &first_ms);
    if (first != OUT_UNKNOWN)
        fail_msg("the enqueue in flight when Redis hung: outcome %d, expected outcome-unknown",
                 (int)first);
    long long t0 = e2e_mono_ms();
    http(port, &r, "POST", "/queues/p/claim", NULL);
    claim_ms = e2e_mono_ms() - t0;
    expect_503(&r);
    assert_true(claim_ms <= UNAVAILABLE_BOUND_MS);
    /* Pipelined while the link is down: answered, in order. */
    {
        e2e_conn_t pc;
        size_t l1, l2, l3;
        static const char pbody[] = "{\"payload\":\"pipelined\"}";
        char *a = e2e_format_request("POST", "/queues/p/messages", NULL, pbody,
                                     sizeof pbody - 1, &l1);
        char *b = e2e_format_request("GET", "/healthz", NULL, NULL, 0, &l2);
        char *c3 = e2e_format_request("POST", "/queues/p/claim", NULL, NULL, 0, &l3);
        char all[4096];
        memcpy(all, a, l1);
        memcpy(all + l1, b, l2);
        memcpy(all + l1 + l2, c3, l3);
        free(a);
        free(b);
        free(c3);
        assert_int_equal(e2e_conn_open(&pc, port), 0);
        assert_int_equal(e2e_send_all(pc.fd, all, l1 + l2 + l3), 0);
        sent_t *s = sent_add(&log);
        SET(s->payload, "pipelined");
        assert_int_equal(read_fresh(&pc, &r), 0);
        s->outcome = expect_503(&r) ? OUT_UNKNOWN : OUT_UNAVAILABLE;
        assert_int_equal(read_fresh(&pc, &r), 0);
        e2e_expect_json(&r, 200);
        assert_int_equal(read_fresh(&pc, &r), 0);
        expect_503(&r);
        e2e_conn_close(&pc);
    }
    /* Keep asking while Redis stays stopped (reconnects hang too). */
    for (int i = 1; e2e_mono_ms() - paused_at < 3500; i++) {
        long long took;
        enqueue_logged(port, "p", e2e_fmt("paused %d", i), &log, UNAVAILABLE_BOUND_MS, &took);
        if (took > worst_ms) worst_ms = took;
        http(port, &r, "GET", "/readyz", NULL);
        assert_int_equal(r.status, 503);
        e2e_pause_ms(100);
    }
    assert_true(e2e_daemon_alive(&g_dmn[0]));

    /* The parked claim was answered 503 (Redis is away at its deadline), not
     * left hanging and not told "nothing due". */
    pthread_join(lp.thread, NULL);
    long long lp_ms = lp.returned_at - lp.started_at;
    if (lp.status != 503)
        fail_msg("the long-poll parked when Redis stopped answered %d", lp.status);
    if (lp_ms > 2000 + UNAVAILABLE_BOUND_MS)
        fail_msg("the long-poll (wait_seconds 2) took %lld ms", lp_ms);

    assert_int_equal(fx_redis_resume(&g_srv), 0);
    long long recovered_ms = enqueue_until_created(port, "p", "resumed", &log, RECOVERY_BOUND_MS);
    http(port, &r, "GET", "/readyz", NULL);
    e2e_expect_json(&r, 200);
    printf("# measured SIGSTOP (--redis-timeout-ms 1000): in-flight enqueue -> 503 "
           "outcome-unknown after %lld ms; claim -> 503 after %lld ms; later requests 503 within "
           "%lld ms; a parked long-poll (wait 2 s) answered %d after %lld ms; after SIGCONT 201 "
           "again after %lld ms\n", first_ms, claim_ms, worst_ms, lp.status, lp_ms,
           recovered_ms);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);

    size_t count;
    stored_t *m = load_messages(g_admin, prefix, "p", &count);
    expect_enqueues_accounted(&log, m, count, "SIGSTOP");
    const stored_t *claimed = find_id(m, count, 1);
    assert_non_null(claimed);
    assert_string_equal(claimed->status, "processing");
    expect_indexes_consistent(g_admin, prefix, "p", m, count);
    stored_free(m, count);
    free(log.items);
}

/* Settle-and-claim requests of one queue wait in its line behind a call in
 * flight when Redis stops (docs/coalescing.md): the held call is answered
 * outcome-unknown when the link drops at the timeout, every request waiting
 * behind it 503 too, none left hanging; after SIGCONT the queue's line works
 * again (it was not left behind half-used). */
static void test_settle_claim_line_when_link_drops(void **state)
{
    (void)state;
    enum { K = 5 };
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    assert_int_equal(start_retryd(&g_dmn[0], "lostline.log", e2e_redis_url(g_srv.port),
                                  "lostline", true, "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    /* Two: the call that was out may yet run when Redis goes on. */
    for (int i = 0; i < 2; i++) {
        http(port, &r, "POST", "/queues/ll/messages", "{\"payload\":\"m\"}");
        e2e_expect_json(&r, 201);
    }

    assert_int_equal(fx_redis_pause(&g_srv), 0);
    e2e_conn_t c[K];
    static const char body[] = "{\"settle\":[{\"id\":99,\"outcome\":\"succeeded\"}]}";
    for (int i = 0; i < K; i++) {
        assert_int_equal(e2e_conn_open(&c[i], port), 0);
        assert_int_equal(e2e_send_request(&c[i], "POST", "/queues/ll/claim", NULL, body,
                                          sizeof body - 1), 0);
    }
    long long t0 = e2e_mono_ms();
    int unknown = 0;
    for (int i = 0; i < K; i++) {
        e2e_response_t a = { 0 };
        if (e2e_read_response(&c[i], &a) != 0) fail_msg("request %d got no response", i);
        unknown += expect_503(&a);
        e2e_response_free(&a);
        e2e_conn_close(&c[i]);
    }
    long long took = e2e_mono_ms() - t0;
    if (took > UNAVAILABLE_BOUND_MS) fail_msg("the line took %lld ms to be answered", took);
    assert_int_equal(unknown, 1);   /* the call that was out */

    assert_int_equal(fx_redis_resume(&g_srv), 0);
    long long deadline = e2e_mono_ms() + RECOVERY_BOUND_MS;
    for (;;) {
        http(port, &r, "POST", "/queues/ll/claim", body);
        if (r.status == 200) break;
        expect_503(&r);
        if (e2e_mono_ms() > deadline) fail_msg("no settle-and-claim served after SIGCONT");
        e2e_pause_ms(50);
    }
    rd_json_t *m = e2e_jget(r.json, "messages");
    assert_int_equal(rd_json_array_size(m), 1);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* The command of each request below is in flight when Redis stops (SIGSTOP
 * for longer than --redis-timeout-ms): a read has no outcome to be unsure
 * of, so GET, a listing and stats answer backend-unavailable; a write keeps
 * outcome-unknown. Both with Retry-After. */
static void test_read_in_flight_when_link_drops(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    const char *prefix = "lostread";
    assert_int_equal(start_retryd(&g_dmn[0], "lostread.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    http(port, &r, "POST", "/queues/lr/messages", "{\"payload\":\"read me\"}");
    e2e_expect_json(&r, 201);
    struct step {
        const char *method, *path, *body, *slug;
    } steps[] = {
        { "GET", "/queues/lr/messages/1", NULL, "backend-unavailable" },
        { "GET", "/queues/lr/messages?limit=10", NULL, "backend-unavailable" },
        { "GET", "/queues/lr/stats", NULL, "backend-unavailable" },
        { "POST", "/queues/lr/messages", "{\"payload\":\"write me\"}", "outcome-unknown" },
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        /* The link is up, so the command is sent, and then Redis hangs. */
        if (e2e_daemon_wait_status(&g_dmn[0], "/readyz", 200, RECOVERY_BOUND_MS) != 0)
            fail_msg("%s %s: the link did not come back", steps[i].method, steps[i].path);
        e2e_conn_close(&g_conn);
        assert_int_equal(fx_redis_pause(&g_srv), 0);
        long long t0 = e2e_mono_ms();
        http(port, &r, steps[i].method, steps[i].path, steps[i].body);
        long long took = e2e_mono_ms() - t0;
        assert_int_equal(fx_redis_resume(&g_srv), 0);
        char slug[64];
        slug_of(&r, slug, sizeof slug);
        printf("# measured %s %s in flight when the link dropped: %d %s after %lld ms\n",
               steps[i].method, steps[i].path, r.status, slug, took);
        /* It was sent: the answer came when the watchdog dropped the link. */
        if (took < REDIS_TIMEOUT_MS * 9 / 10)
            fail_msg("%s %s answered after %lld ms: it was not in flight", steps[i].method,
                     steps[i].path, took);
        bool unknown = expect_503(&r);
        if (unknown != (strcmp(steps[i].slug, "outcome-unknown") == 0))
            fail_msg("%s %s in flight when the link dropped: %s, expected %s", steps[i].method,
                     steps[i].path, slug, steps[i].slug);
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* A claim in flight when Redis stops is answered outcome-unknown, and Redis
 * does run it once it continues: the message is leased, and nobody holds
 * the lease. The timer learns of a lease only from the claim's reply (its
 * hint), so the daemon owes the queue a timer visit instead: the lease
 * expires on time rather than after the registry sweep's next full cycle
 * (RD_SWEEP_CYCLE_MS, 60 s). */
static void test_lost_claim_lease_still_expires(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "losthint";
    /* --series off: the series' nudge (a tick within a minute of any write,
     * docs/series.md) would bring the timer here without any hint. */
    assert_int_equal(start_retryd(&g_dmn[0], "losthint.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "1000", "--series", "off", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    http(port, &r, "POST", "/queues/lh/messages", "{\"payload\":\"lease me\"}");
    e2e_expect_json(&r, 201);
    e2e_conn_close(&g_conn);
    /* Wait until the sweep has passed over lh and its next pass is far off,
     * and lh has no timer entry: from then on only a hint brings the timer. */
    long long deadline = e2e_mono_ms() + RECOVERY_BOUND_MS;
    while (rq_int(g_admin, "ZSCORE {%s:queues}:timers lh", prefix) != 0 ||
           rq_int(g_admin, "HGET {%s:queues}:sweep next_at", prefix) - e2e_wall_ms() < 30000) {
        if (e2e_mono_ms() > deadline) fail_msg("the sweep did not pass over the queue");
        e2e_pause_ms(50);
    }

    assert_int_equal(fx_redis_pause(&g_srv), 0);
    http(port, &r, "POST", "/queues/lh/claim", "{\"lease_seconds\":1}");
    assert_int_equal(fx_redis_resume(&g_srv), 0);
    if (!expect_503(&r)) fail_msg("the claim in flight was not answered outcome-unknown");
    e2e_conn_close(&g_conn);

    /* Redis ran the claim when it continued (the daemon may hand the message
     * back at once since test_lost_claims_are_handed_back; either way it
     * must be pending again in time). */
    deadline = e2e_mono_ms() + RECOVERY_BOUND_MS;
    while (rq_int(g_admin, "HGET %s:{lh}:stats claimed", prefix) != 1) {
        if (e2e_mono_ms() > deadline) fail_msg("Redis did not run the claim that was in flight");
        e2e_pause_ms(20);
    }
    long long leased_at = e2e_mono_ms();
    /* The 1 s lease runs out and the timer puts the message back. */
    if (e2e_daemon_wait_status(&g_dmn[0], "/readyz", 200, RECOVERY_BOUND_MS) != 0)
        fail_msg("the link did not come back");
    deadline = leased_at + 8000;
    for (;;) {
        http(port, &r, "GET", "/queues/lh/messages/1", NULL);
        const char *status = e2e_jstr(e2e_expect_json(&r, 200), "status");
        if (strcmp(status, "pending") == 0) break;
        if (e2e_mono_ms() > deadline)
            fail_msg("the lease of the lost claim did not expire within 8 s: still %s", status);
        e2e_pause_ms(100);
    }
    printf("# measured a lease made by a claim whose reply was lost: back pending %lld ms "
           "after Redis ran it (lease 1000 ms)\n", e2e_mono_ms() - leased_at);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* Sends one request with Redis stopped (SIGSTOP): the call it makes is in
 * flight when the link's timeout drops the link, so it is answered 503
 * outcome-unknown; then SIGCONT, and Redis runs the call it had read. Waits
 * until the daemon's link is ready again. */
static void request_answer_lost(int port, const char *path, const char *body)
{
    e2e_response_t r = { 0 };
    assert_int_equal(fx_redis_pause(&g_srv), 0);
    http(port, &r, "POST", path, body);
    bool unknown = expect_503(&r);
    assert_int_equal(fx_redis_resume(&g_srv), 0);
    if (!unknown) fail_msg("%s %s: the call in flight was not answered outcome-unknown: %s", path, body, r.body);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    if (e2e_daemon_wait_status(&g_dmn[0], "/readyz", 200, RECOVERY_BOUND_MS) != 0)
        fail_msg("the link did not come back");
}

/* Waits (10 s at most) until the queue's stats count `released` messages;
 * returns how long it took. */
static long long wait_released(const char *prefix, const char *q, long long released)
{
    long long t0 = e2e_mono_ms();
    for (;;) {
        long long now = rq_int(g_admin, "HGET %s:{%s}:stats released", prefix, q);
        if (now == released) return e2e_mono_ms() - t0;
        if (now > released) fail_msg("%lld released, expected %lld", now, released);
        if (e2e_mono_ms() - t0 > 10000)
            fail_msg("10 s after Redis continued, %lld messages released, expected %lld "
                     "(processing: %lld)", now, released,
                     rq_int(g_admin, "ZCARD %s:{%s}:3:processing", prefix, q));
        e2e_pause_ms(20);
    }
}

/* Message id is pending with no failure: retry_count 0, no history. */
static void expect_untouched_pending(int port, const char *q, long long id)
{
    e2e_response_t r = { 0 };
    http(port, &r, "GET", e2e_fmt("/queues/%s/messages/%lld", q, id), NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_string_equal(e2e_jstr(m, "status"), "pending");
    assert_int_equal(e2e_jint(m, "retry_count"), 0);
    rd_json_t *h = e2e_jget(m, "history");
    assert_true(h == NULL || rd_json_array_size(h) == 0);
    e2e_response_free(&r);
}

/* A claim whose answer is lost (Redis stopped past --redis-timeout-ms, the
 * client answered 503 outcome-unknown) used to strand its messages:
 * processing under a lease nobody holds, a failure at its expiry, dead
 * without ever reaching a worker with max_retries 1. Now the daemon tags
 * each claim with a nonce and, once Redis answers again, hands back what
 * that claim leased: pending, counted released, not failed. A plain claim,
 * a batch, a settle-and-claim (its settlement stands) and a long-poll. */
static void test_lost_claims_are_handed_back(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "lostc";
    assert_int_equal(start_retryd(&g_dmn[0], "lostc.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    for (int i = 1; i <= 5; i++) {
        http(port, &r, "POST", "/queues/lc/messages", "{\"payload\":\"job\",\"max_retries\":1}");
        assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), i);
    }
    e2e_conn_close(&g_conn);

    /* A plain claim: message 1 (a 3 s lease, which would kill it at expiry). */
    request_answer_lost(port, "/queues/lc/claim", "{\"lease_seconds\":3}");
    long long back_ms = wait_released(prefix, "lc", 1);
    expect_untouched_pending(port, "lc", 1);
    /* It reaches a worker: claimed next, with its whole retry budget. */
    http(port, &r, "POST", "/queues/lc/claim", "{\"lease_seconds\":30}");
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_int_equal(e2e_jint(m, "retry_count"), 0);
    http(port, &r, "POST", "/queues/lc/messages/1/succeed",
         e2e_fmt("{\"lease_token\":\"%s\"}", e2e_jstr(m, "lease_token")));
    e2e_expect_json(&r, 200);
    e2e_conn_close(&g_conn);

    /* A batch: messages 2 and 3. */
    request_answer_lost(port, "/queues/lc/claim", "{\"count\":2,\"lease_seconds\":3}");
    wait_released(prefix, "lc", 3);
    expect_untouched_pending(port, "lc", 2);
    expect_untouched_pending(port, "lc", 3);

    /* A settle-and-claim: the settlement of 2 stands (Redis ran it), the 3 it
     * leased comes back. */
    http(port, &r, "POST", "/queues/lc/claim", "{\"lease_seconds\":30}");
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 2);
    char body[256];
    snprintf(body, sizeof body, "{\"lease_seconds\":3,\"settle\":[{\"id\":2,\"lease_token\":\"%s\","
             "\"outcome\":\"succeeded\"}]}", e2e_jstr(m, "lease_token"));
    e2e_conn_close(&g_conn);
    request_answer_lost(port, "/queues/lc/claim", body);
    wait_released(prefix, "lc", 4);
    char status[32];
    assert_string_equal(e2e_message_field(g_admin, "lostc:{lc}", 2, "status", status,
                                          sizeof status), "succeeded");
    expect_untouched_pending(port, "lc", 3);

    /* A long-poll whose first claim finds message 4. A long-poll subscribes
     * to the queue's wake channel before it claims, so one served before
     * Redis stops (it takes 3, then settled) leaves the subscription up. */
    http(port, &r, "POST", "/queues/lc/claim", "{\"wait_seconds\":1,\"lease_seconds\":30}");
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 3);
    http(port, &r, "POST", "/queues/lc/messages/3/succeed",
         e2e_fmt("{\"lease_token\":\"%s\"}", e2e_jstr(m, "lease_token")));
    e2e_expect_json(&r, 200);
    e2e_conn_close(&g_conn);
    request_answer_lost(port, "/queues/lc/claim", "{\"wait_seconds\":5,\"lease_seconds\":3}");
    wait_released(prefix, "lc", 5);
    expect_untouched_pending(port, "lc", 4);

    /* Past every lost lease's deadline: nothing failed, nothing dead, and a
     * worker gets 4 and 5 with their whole budget. */
    long long past = e2e_mono_ms() + 3500;
    while (e2e_mono_ms() < past) {
        assert_int_equal(rq_int(g_admin, "ZCARD lostc:{lc}:3:processing"), 0);
        e2e_pause_ms(100);
    }
    assert_int_equal(rq_int(g_admin, "HGET lostc:{lc}:stats failed"), 0);
    assert_int_equal(rq_int(g_admin, "HGET lostc:{lc}:stats dead"), 0);
    http(port, &r, "POST", "/queues/lc/claim", "{\"count\":10}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 2);
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(e2e_jint(rd_json_array_at(list, i), "retry_count"), 0);
    printf("# measured a lost claim's message back pending %lld ms after the link was ready again "
           "(--redis-timeout-ms 1000)\n", back_ms);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* DEBUG SLEEP 3: the same bounded 503 as a stopped process. The runner's
 * Redis refuses DEBUG (enable-debug-command defaults to no since Redis 7),
 * so this runs on a private one that allows it. */
static void test_redis_debug_sleep(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", "--enable-debug-command", "local",
                                         NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "sleepy";
    assert_int_equal(start_retryd(&g_dmn[0], "sleep.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    sent_log_t log = { 0 };
    assert_int_equal(enqueue_logged(port, "s", "awake", &log, 1000, NULL), OUT_CREATED);

    /* Send DEBUG SLEEP without waiting for its reply, then make sure Redis
     * is asleep: a PING on another connection gets no answer in 300 ms. */
    redisContext *sleeper = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(sleeper);
    assert_int_equal(redisAppendCommand(sleeper, "DEBUG SLEEP 3"), REDIS_OK);
    int done = 0;
    while (!done) assert_int_equal(redisBufferWrite(sleeper, &done), REDIS_OK);
    long long deadline = e2e_mono_ms() + 2000;
    while (e2e_redis_pong(g_srv.port, 300)) {
        if (e2e_mono_ms() > deadline) fail_msg("Redis still answers PING after DEBUG SLEEP 3");
    }

    long long first_ms, claim_ms;
    enum outcome first = enqueue_logged(port, "s", "asleep 0", &log, UNAVAILABLE_BOUND_MS,
                                        &first_ms);
    assert_int_equal(first, OUT_UNKNOWN);
    e2e_response_t r = { 0 };
    long long t0 = e2e_mono_ms();
    http(port, &r, "POST", "/queues/s/claim", NULL);
    claim_ms = e2e_mono_ms() - t0;
    expect_503(&r);
    assert_true(claim_ms <= UNAVAILABLE_BOUND_MS);
    enqueue_logged(port, "s", "asleep 1", &log, UNAVAILABLE_BOUND_MS, NULL);

    /* The sleep ends; DEBUG SLEEP answers OK; retryd serves again. */
    redisReply *x = NULL;
    assert_int_equal(redisGetReply(sleeper, (void **)&x), REDIS_OK);
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
    redisFree(sleeper);
    long long recovered_ms = enqueue_until_created(port, "s", "woken", &log, RECOVERY_BOUND_MS);
    printf("# measured DEBUG SLEEP 3 (--redis-timeout-ms 1000): in-flight enqueue -> 503 "
           "outcome-unknown after %lld ms; claim -> 503 after %lld ms; 201 again %lld ms after "
           "the sleep ended\n", first_ms, claim_ms, recovered_ms);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);

    size_t count;
    stored_t *m = load_messages(g_admin, prefix, "s", &count);
    expect_enqueues_accounted(&log, m, count, "DEBUG SLEEP");
    expect_indexes_consistent(g_admin, prefix, "s", m, count);
    stored_free(m, count);
    free(log.items);
}

/* Redis stopped and started again without persistence, then FLUSHALL. */
static void test_redis_restarted_and_flushed(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    const char *prefix = "restart";
    assert_int_equal(start_retryd(&g_dmn[0], "restart.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    http(port, &r, "POST", "/queues/r/messages", "{\"payload\":\"before\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);

    assert_int_equal(fx_redis_stop(&g_srv, SIGTERM, 5000), 0);
    long long down_at = e2e_mono_ms(), unavailable_ms = -1;
    while (unavailable_ms < 0) {
        http(port, &r, "POST", "/queues/r/messages", "{\"payload\":\"while down\"}");
        if (!expect_503(&r)) unavailable_ms = e2e_mono_ms() - down_at;
        else if (e2e_mono_ms() - down_at > 1000)
            fail_msg("no 503 backend-unavailable within 1 s of Redis going away");
    }
    assert_true(unavailable_ms <= 1000);
    /* Stay down for 3 s (the reconnect backoff grows meanwhile): every
     * answer is a prompt 503 and the process lives. */
    while (e2e_mono_ms() - down_at < 3000) {
        long long t0 = e2e_mono_ms();
        http(port, &r, "POST", "/queues/r/messages", "{\"payload\":\"while down\"}");
        e2e_expect_problem(&r, 503, "backend-unavailable", NULL);
        assert_true(e2e_mono_ms() - t0 < 500);
        http(port, &r, "GET", "/readyz", NULL);
        assert_int_equal(r.status, 503);
        e2e_pause_ms(100);
    }
    assert_true(e2e_daemon_alive(&g_dmn[0]));

    assert_int_equal(fx_redis_restart(&g_srv), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    long long up_at = e2e_mono_ms(), recovered_ms = -1;
    for (;;) {
        http(port, &r, "POST", "/queues/r/messages", "{\"payload\":\"after restart\"}");
        if (r.status == 201) break;
        expect_503(&r);
        if (e2e_mono_ms() - up_at > RECOVERY_BOUND_MS)
            fail_msg("still 503 %d ms after Redis came back", RECOVERY_BOUND_MS);
        e2e_pause_ms(25);
    }
    recovered_ms = e2e_mono_ms() - up_at;
    /* A fresh Redis without persistence: the data is gone, ids start at 1,
     * the library was loaded again without a restart of retryd. */
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    redisReply *x = e2e_rcmd(g_admin, "FUNCTION LIST LIBRARYNAME " RD_LIBRARY_NAME);
    assert_int_equal(x->elements, 1);
    freeReplyObject(x);
    char field[64];
    assert_string_equal(e2e_message_field(g_admin, e2e_fmt("%s:{r}", prefix), 1, "payload", field,
                                          sizeof field), "after restart");

    /* The notification link came back too: a long-poll waiter subscribes
     * and is woken by an enqueue. */
    static long_poll_t lp;   /* outlives the frame if the test fails before the join */
    memset(&lp, 0, sizeof lp);
    lp.port = port;
    snprintf(lp.path, sizeof lp.path, "/queues/lp/claim");
    assert_int_equal(pthread_create(&lp.thread, NULL, long_poll_main, &lp), 0);
    long long deadline = e2e_mono_ms() + 3000;
    while (!wake_subscribed(g_admin, prefix, "lp")) {
        if (e2e_mono_ms() > deadline) {
            pthread_join(lp.thread, NULL);
            fail_msg("no subscription to the wake channel 3 s after the restart");
        }
        e2e_pause_ms(20);
    }
    long long sent_at = e2e_mono_ms();
    http(port, &r, "POST", "/queues/lp/messages", "{\"payload\":\"wake up\"}");
    e2e_expect_json(&r, 201);
    pthread_join(lp.thread, NULL);
    assert_int_equal(lp.status, 200);
    assert_int_equal(lp.id, 1);
    assert_true(lp.returned_at - sent_at < 1000);

    /* FLUSHALL on the live server: the next enqueue still works. Its id is 1
     * again: the per-queue sequence went with the data, which is what
     * FLUSHALL means (ids are unique only while the data lives). */
    x = e2e_rcmd(g_admin, "FLUSHALL");
    freeReplyObject(x);
    http(port, &r, "POST", "/queues/r/messages", "{\"payload\":\"after flushall\"}");
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), 1);
    assert_string_equal(e2e_message_field(g_admin, e2e_fmt("%s:{r}", prefix), 1, "payload", field,
                                          sizeof field), "after flushall");
    http(port, &r, "POST", "/queues/r/claim", NULL);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "payload"), "after flushall");
    printf("# measured Redis restart: 503 backend-unavailable %lld ms after it went away; down "
           "3 s; 201 again %lld ms after it was back (library reloaded)\n", unavailable_ms,
           recovered_ms);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* CLIENT KILL of the notification link (the pub/sub connection) while a
 * long-poll is parked: the waiter still gets the message enqueued right
 * after (the timer's safety net), and the link comes back and subscribes. */
static void test_notification_link_killed(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "notify";
    /* The waiter parks on A; messages come in through B, so only Redis
     * (the wake channel, or A's timer) can tell A about them. */
    assert_int_equal(start_retryd(&g_dmn[0], "notify-a.log", e2e_redis_url(g_srv.port), prefix,
                                  true, NULL), 0);
    assert_int_equal(start_retryd(&g_dmn[1], "notify-b.log", e2e_redis_url(g_srv.port), prefix,
                                  true, NULL), 0);
    int port = g_dmn[0].port, port_b = g_dmn[1].port;
    e2e_response_t r = { 0 };
    long long woken_ms[2];
    for (int round = 0; round < 2; round++) {
        static long_poll_t lp;   /* outlives the frame if the test fails before the join */
        memset(&lp, 0, sizeof lp);
        lp.port = port;
        lp.wait_seconds = 5;
        snprintf(lp.path, sizeof lp.path, "/queues/nq/claim");
        lp.started_at = e2e_mono_ms();
        assert_int_equal(pthread_create(&lp.thread, NULL, long_poll_main, &lp), 0);
        long long deadline = e2e_mono_ms() + 3000;
        while (!wake_subscribed(g_admin, prefix, "nq")) {
            if (e2e_mono_ms() > deadline) {
                pthread_join(lp.thread, NULL);
                fail_msg("round %d: the long-poll never subscribed", round);
            }
            e2e_pause_ms(20);
        }
        if (round == 0) {
            redisReply *x = e2e_rcmd(g_admin, "CLIENT KILL TYPE pubsub");
            long long killed = x->type == REDIS_REPLY_INTEGER ? x->integer : 0;
            freeReplyObject(x);
            if (killed < 1) {
                pthread_join(lp.thread, NULL);
                fail_msg("no pub/sub client to kill");
            }
        }
        long long sent_at = e2e_mono_ms();
        http(port_b, &r, "POST", "/queues/nq/messages",
             e2e_fmt("{\"payload\":\"round %d\"}", round));
        long long id = e2e_jint(e2e_expect_json(&r, 201), "id");
        pthread_join(lp.thread, NULL);
        woken_ms[round] = lp.returned_at - sent_at;
        if (lp.status != 200 || lp.id != id)
            fail_msg("round %d: the parked claim answered %d (id %lld), expected 200 with %lld",
                     round, lp.status, lp.id, id);
        if (woken_ms[round] > 1000)
            fail_msg("round %d: the parked claim got its message %lld ms after the enqueue",
                     round, woken_ms[round]);
    }
    printf("# measured pub/sub link killed: parked claim on A got the message enqueued through "
           "B %lld ms after the enqueue; after the link came back, %lld ms\n", woken_ms[0],
           woken_ms[1]);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
    stop_retryd(&g_dmn[1]);
    size_t count;
    stored_t *m = load_messages(g_admin, prefix, "nq", &count);
    assert_int_equal(count, 2);
    assert_string_equal(m[0].status, "processing");
    assert_string_equal(m[1].status, "processing");
    expect_indexes_consistent(g_admin, prefix, "nq", m, count);
    stored_free(m, count);
}

/* ========================================================================= */
/* 4. Durability: kill -9 Redis under load, appendfsync always               */
/* ========================================================================= */

typedef struct loader {
    pthread_t thread;
    int idx, port;
    const char *q;
    atomic_bool *stop;
    sent_log_t log;               /* this thread's enqueues */
    long long *acked;             /* ids whose succeed got 200 */
    size_t nacked, acked_cap;
    atomic_int created, failed503;
    int lease_seconds;            /* of its claims; 0: 30 */
    int leave_every;              /* every n-th claimed message is left leased (0: none) */
    bool until_gone;              /* the daemon will be killed: a missing response
                                     ends the thread (an enqueue then counts as
                                     outcome unknown) instead of being an error */
    atomic_bool gone;             /* ended that way */
    char error[256];
} loader_t;

static void *loader_main(void *arg)
{
    loader_t *w = arg;
    e2e_conn_t c = { .fd = -1 };
    e2e_response_t r = { 0 };
    char claim[128], path[160], body[256], lease[64];
    snprintf(claim, sizeof claim, "/queues/%s/claim", w->q);
    snprintf(lease, sizeof lease, "{\"lease_seconds\":%d}",
             w->lease_seconds ? w->lease_seconds : 30);
    for (int n = 1; !atomic_load(w->stop); n++) {
        sent_t *s = sent_add(&w->log);
        snprintf(s->payload, sizeof s->payload, "w%d-%d", w->idx, n);
        int status;
        s->outcome = try_enqueue(&c, w->port, w->q, s->payload, &s->id, &status);
        if (s->outcome == OUT_NONE && w->until_gone) {
            s->outcome = OUT_UNKNOWN;
            atomic_store(&w->gone, true);
            break;
        }
        if (s->outcome == OUT_NONE || s->outcome == OUT_OTHER) {
            snprintf(w->error, sizeof w->error, "enqueue %s: %d", s->payload, status);
            break;
        }
        if (s->outcome == OUT_CREATED) atomic_fetch_add(&w->created, 1);
        else atomic_fetch_add(&w->failed503, 1);

        if (e2e_try_request(&c, w->port, &r, "POST", claim, lease, strlen(lease)) != 0) {
            if (w->until_gone) atomic_store(&w->gone, true);
            else snprintf(w->error, sizeof w->error, "claim: no response");
            break;
        }
        long long id = 0;
        const char *tok = r.json ? rd_json_string(rd_json_get(r.json, "lease_token")) : NULL;
        if (r.status == 200 && tok && rd_json_integer(rd_json_get(r.json, "id"), &id) &&
            w->leave_every && n % w->leave_every == 0) {
            /* A slow worker: keeps the lease. */
        } else if (r.status == 200 && tok && rd_json_integer(rd_json_get(r.json, "id"), &id)) {
            bool succeed = n % 2 == 0;
            snprintf(path, sizeof path, "/queues/%s/messages/%lld/%s", w->q, id,
                     succeed ? "succeed" : "fail");
            snprintf(body, sizeof body, succeed ? "{\"lease_token\":\"%s\"}"
                                                : "{\"lease_token\":\"%s\",\"error\":\"flaky\"}",
                     tok);
            if (e2e_try_request(&c, w->port, &r, "POST", path, body, strlen(body)) != 0) {
                if (w->until_gone) atomic_store(&w->gone, true);
                else snprintf(w->error, sizeof w->error, "settle %lld: no response", id);
                break;
            }
            if (r.status == 200 && succeed) {
                if (w->nacked == w->acked_cap) {
                    w->acked_cap = w->acked_cap ? w->acked_cap * 2 : 256;
                    w->acked = realloc(w->acked, w->acked_cap * sizeof *w->acked);
                }
                w->acked[w->nacked++] = id;
            } else if (r.status != 200 && r.status != 503) {
                snprintf(w->error, sizeof w->error, "settle %lld: %d %.150s", id, r.status,
                         r.body ? r.body : "");
                break;
            }
        } else if (r.status != 204 && r.status != 503) {
            snprintf(w->error, sizeof w->error, "claim: %d %.150s", r.status, r.body ? r.body : "");
            break;
        }
        /* Do not spin on a Redis that is down. */
        if (s->outcome != OUT_CREATED) e2e_pause_ms(10);
    }
    e2e_response_free(&r);
    e2e_conn_close(&c);
    return NULL;
}

enum { LOADERS = 4 };

static int sum_created(loader_t *w)
{
    int n = 0;
    for (int i = 0; i < LOADERS; i++) n += atomic_load(&w[i].created);
    return n;
}

static int sum_503(loader_t *w)
{
    int n = 0;
    for (int i = 0; i < LOADERS; i++) n += atomic_load(&w[i].failed503);
    return n;
}

static void test_kill9_redis_under_load_loses_nothing(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "yes", "--appendfsync", "always", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    const char *prefix = "durable";
    assert_int_equal(start_retryd(&g_dmn[0], "kill9.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;

    static atomic_bool stop;
    atomic_store(&stop, false);
    loader_t w[LOADERS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < LOADERS; i++) {
        w[i].idx = i;
        w[i].port = port;
        w[i].q = "load";
        w[i].stop = &stop;
        atomic_init(&w[i].created, 0);
        atomic_init(&w[i].failed503, 0);
        assert_int_equal(pthread_create(&w[i].thread, NULL, loader_main, &w[i]), 0);
    }
    /* From here on a failure must first stop and join the loaders. */
    const char *problem = NULL;
    long long t_start = e2e_mono_ms(), killed_at = 0, recovered_ms = -1;
    int created_before = 0, created_at_restart = 0;
    while (e2e_mono_ms() - t_start < 1000 && problem == NULL) e2e_pause_ms(10);
    created_before = sum_created(w);
    if (created_before < 20) problem = "fewer than 20 enqueues in the first second of load";

    if (problem == NULL) {
        if (fx_redis_stop(&g_srv, SIGKILL, 5000) != 0) problem = "kill -9 of redis-server failed";
        killed_at = e2e_mono_ms();
    }
    /* The load goes on against no Redis: 503s. */
    int seen503 = sum_503(w);
    while (problem == NULL && sum_503(w) < seen503 + 20) {
        if (e2e_mono_ms() - killed_at > 3000) problem = "no 503s within 3 s of the kill";
        e2e_pause_ms(10);
    }
    if (problem == NULL && fx_redis_restart(&g_srv) != 0)
        problem = "redis-server did not come back on its AOF";
    long long restarted_at = e2e_mono_ms();
    created_at_restart = sum_created(w);
    while (problem == NULL) {
        bool all = true;
        for (int i = 0; i < LOADERS; i++)
            if (atomic_load(&w[i].created) == 0) all = false;
        if (all && sum_created(w) >= created_at_restart + 4 * LOADERS) break;
        if (e2e_mono_ms() - restarted_at > 10000) problem = "no 201s within 10 s of the restart";
        e2e_pause_ms(10);
    }
    if (problem == NULL) recovered_ms = e2e_mono_ms() - restarted_at;
    /* A little more load on the recovered Redis. */
    long long more = e2e_mono_ms();
    while (problem == NULL && e2e_mono_ms() - more < 300) e2e_pause_ms(10);
    atomic_store(&stop, true);
    for (int i = 0; i < LOADERS; i++) pthread_join(w[i].thread, NULL);

    sent_log_t all = { 0 };
    size_t acked = 0;
    for (int i = 0; i < LOADERS; i++) {
        for (size_t j = 0; j < w[i].log.n; j++) *sent_add(&all) = w[i].log.items[j];
        acked += w[i].nacked;
    }
    char errors[1024] = "";
    for (int i = 0; i < LOADERS; i++)
        if (w[i].error[0])
            snprintf(errors + strlen(errors), sizeof errors - strlen(errors), " [%d] %s", i,
                     w[i].error);
    if (problem) fail_msg("%s (loader errors:%s)", problem, errors[0] ? errors : " none");
    if (errors[0]) fail_msg("loader errors:%s", errors);
    stop_retryd(&g_dmn[0]);

    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    size_t count;
    stored_t *m = load_messages(g_admin, prefix, "load", &count);
    expect_enqueues_accounted(&all, m, count, "kill -9 redis (appendfsync always)");
    /* An acknowledged success is durable too. */
    for (int i = 0; i < LOADERS; i++)
        for (size_t j = 0; j < w[i].nacked; j++) {
            const stored_t *x = find_id(m, count, w[i].acked[j]);
            if (x == NULL || strcmp(x->status, "succeeded") != 0)
                fail_msg("message %lld got 200 on succeed but Redis has it %s", w[i].acked[j],
                         x ? x->status : "missing");
        }
    expect_indexes_consistent(g_admin, prefix, "load", m, count);
    printf("# measured kill -9 redis: %d x 201 before the kill, %zu successes acknowledged "
           "and found succeeded; 201 again %lld ms after redis-server answered PING again\n",
           created_before, acked, recovered_ms);
    stored_free(m, count);
    free(all.items);
    for (int i = 0; i < LOADERS; i++) {
        free(w[i].log.items);
        free(w[i].acked);
    }
}

/* ========================================================================= */
/* 5. Crash of retryd                                                        */
/* ========================================================================= */

static void test_kill9_retryd_leases_come_back(void **state)
{
    (void)state;
    enum { N = 20 };
    char prefix[128];
    PREFIX(prefix, "crash");
    char pfx[128];
    SET(pfx, prefix);
    assert_int_equal(start_retryd(&g_dmn[0], "crash-a.log", e2e_redis_url(g_shared_port), pfx, true,
                                  "--lease-seconds", "2", NULL), 0);
    int port_a = g_dmn[0].port;
    e2e_response_t r = { 0 };
    for (int i = 1; i <= N; i++) {
        http(port_a, &r, "POST", "/queues/c/messages", e2e_fmt("{\"payload\":\"job %d\"}", i));
        assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), i);
    }
    char tokens[N + 1][96];
    for (int i = 1; i <= N; i++) {
        http(port_a, &r, "POST", "/queues/c/claim", NULL);
        rd_json_t *msg = e2e_expect_json(&r, 200);
        assert_int_equal(e2e_jint(msg, "id"), i);
        SET(tokens[i], e2e_jstr(msg, "lease_token"));
    }
    long long last_claim = e2e_mono_ms();
    /* A worker long-polling on A when it dies sees its connection end. */
    e2e_conn_t waiting;
    assert_int_equal(e2e_conn_open(&waiting, port_a), 0);
    assert_int_equal(e2e_send_request(&waiting, "POST", "/queues/c-idle/claim", NULL,
                                      "{\"wait_seconds\":10}", 19), 0);
    assert_int_equal(rq_int(g_shared, "ZCARD %s:{c}:3:processing", pfx), N);
    e2e_conn_close(&g_conn);

    assert_int_equal(e2e_daemon_stop(&g_dmn[0], SIGKILL, E2E_STOP_TIMEOUT_MS), 256 + SIGKILL);
    long long killed_at = e2e_mono_ms();
    assert_true(fx_wait_closed(waiting.fd, 2000) >= 0);
    e2e_conn_close(&waiting);
    assert_int_equal(start_retryd(&g_dmn[1], "crash-b.log", e2e_redis_url(g_shared_port), pfx, true,
                                  NULL), 0);
    int port_b = g_dmn[1].port;

    /* The leases expire and B's timer gives the messages back. */
    long long back_ms = -1;
    while (back_ms < 0) {
        size_t count;
        stored_t *m = load_messages(g_shared, pfx, "c", &count);
        int pending = 0;
        for (size_t i = 0; i < count; i++)
            pending += strcmp(m[i].status, "pending") == 0 &&
                       strcmp(m[i].last_error, "lease expired") == 0 && m[i].retry_count == 1;
        stored_free(m, count);
        assert_int_equal(count, N);
        if (pending == N) back_ms = e2e_mono_ms() - last_claim;
        else if (e2e_mono_ms() - last_claim > 2000 + TICK_MS + 2000)
            fail_msg("%d of %d leased messages pending again 4 s after their 2 s leases", pending,
                     N);
        else e2e_pause_ms(20);
    }
    assert_int_equal(rq_int(g_shared, "ZCARD %s:{c}:3:processing", pfx), 0);
    /* A zombie worker of A cannot settle what came back. */
    http(port_b, &r, "POST", "/queues/c/messages/1/succeed",
         e2e_fmt("{\"lease_token\":\"%s\"}", tokens[1]));
    assert_int_equal(r.status, 409);

    /* B hands every one of them out again (after the 2 s retry backoff). */
    bool got[N + 1] = { false };
    int claimed = 0;
    long long deadline = e2e_mono_ms() + 6000;
    while (claimed < N) {
        http(port_b, &r, "POST", "/queues/c/claim", "{\"lease_seconds\":60}");
        if (r.status == 204) {
            if (e2e_mono_ms() > deadline) fail_msg("B claimed only %d of %d in time", claimed, N);
            e2e_pause_ms(50);
            continue;
        }
        rd_json_t *msg = e2e_expect_json(&r, 200);
        long long id = e2e_jint(msg, "id");
        assert_true(id >= 1 && id <= N && !got[id]);
        assert_int_equal(e2e_jint(msg, "retry_count"), 1);
        got[id] = true;
        claimed++;
        http(port_b, &r, "POST", e2e_fmt("/queues/c/messages/%lld/succeed", id), NULL);
        e2e_expect_json(&r, 200);
    }
    printf("# measured kill -9 retryd: %d leased messages pending again %lld ms after the last "
           "claim (lease 2 s), all claimed again through a new retryd %lld ms after the kill\n",
           N, back_ms, e2e_mono_ms() - killed_at);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[1]);

    /* Nothing lost, nothing extra. */
    size_t count;
    stored_t *m = load_messages(g_shared, pfx, "c", &count);
    assert_int_equal(count, N);
    for (size_t i = 0; i < count; i++) {
        assert_int_equal(m[i].id, (long long)i + 1);
        assert_string_equal(m[i].status, "succeeded");
        assert_string_equal(m[i].payload, e2e_fmt("job %zu", i + 1));
    }
    assert_int_equal(rq_int(g_shared, "GET %s:{c}:seq", pfx), N);
    expect_indexes_consistent(g_shared, pfx, "c", m, count);
    stored_free(m, count);
}

/* kill -9 retryd in the middle of a mixed load: every 201 survives, the
 * leases it held come back, a new retryd carries on. */
static void test_kill9_retryd_under_load(void **state)
{
    (void)state;
    char pfx[128];
    PREFIX(pfx, "crashload");
    assert_int_equal(start_retryd(&g_dmn[0], "crashload-a.log", e2e_redis_url(g_shared_port), pfx,
                                  true, NULL), 0);
    static atomic_bool stop;
    atomic_store(&stop, false);
    loader_t w[LOADERS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < LOADERS; i++) {
        w[i].idx = i;
        w[i].port = g_dmn[0].port;
        w[i].q = "cl";
        w[i].stop = &stop;
        w[i].lease_seconds = 2;
        w[i].leave_every = 4;
        w[i].until_gone = true;
        atomic_init(&w[i].created, 0);
        atomic_init(&w[i].failed503, 0);
        atomic_init(&w[i].gone, false);
        assert_int_equal(pthread_create(&w[i].thread, NULL, loader_main, &w[i]), 0);
    }
    long long t0 = e2e_mono_ms();
    while (e2e_mono_ms() - t0 < 700 && sum_created(w) < 100000) e2e_pause_ms(10);
    int status = e2e_daemon_stop(&g_dmn[0], SIGKILL, E2E_STOP_TIMEOUT_MS);
    long long killed_at = e2e_mono_ms();
    /* Every loader notices (its connection ends) within a bound. */
    bool all_gone = false;
    while (!all_gone && e2e_mono_ms() - killed_at < 5000) {
        all_gone = true;
        for (int i = 0; i < LOADERS; i++) all_gone = all_gone && atomic_load(&w[i].gone);
        if (!all_gone) e2e_pause_ms(10);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < LOADERS; i++) pthread_join(w[i].thread, NULL);
    for (int i = 0; i < LOADERS; i++) if (w[i].error[0]) fail_msg("loader %d: %s", i, w[i].error);
    assert_int_equal(status, 256 + SIGKILL);
    assert_true(all_gone);
    int created = sum_created(w);
    assert_true(created >= 20);

    /* What A had leased when it died. */
    redisReply *x = e2e_rcmd(g_shared, "ZRANGE %s:{cl}:3:processing 0 -1", pfx);
    size_t leased = x->elements;
    long long *ids = calloc(leased ? leased : 1, sizeof *ids);
    for (size_t i = 0; i < leased; i++) ids[i] = atoll(x->element[i]->str);
    freeReplyObject(x);

    assert_int_equal(start_retryd(&g_dmn[1], "crashload-b.log", e2e_redis_url(g_shared_port), pfx,
                                  true, NULL), 0);
    /* Within the 2 s lease (+ a tick, + margin) B's timer gives them back. */
    long long back_ms = -1;
    while (back_ms < 0) {
        if (rq_int(g_shared, "ZCARD %s:{cl}:3:processing", pfx) == 0)
            back_ms = e2e_mono_ms() - killed_at;
        else if (e2e_mono_ms() - killed_at > 2000 + TICK_MS + 2000)
            fail_msg("leases of the killed retryd still held 4 s after the kill");
        else e2e_pause_ms(20);
    }
    for (size_t i = 0; i < leased; i++) {
        char cur[32], error[64];
        const char *base = e2e_fmt("%s:{cl}", pfx);
        e2e_message_field(g_shared, base, ids[i], "status", cur, sizeof cur);
        e2e_message_field(g_shared, base, ids[i], "last_error", error, sizeof error);
        bool back = (strcmp(cur, "pending") == 0 || strcmp(cur, "dead") == 0) &&
                    strcmp(error, "lease expired") == 0;
        if (!back) fail_msg("message %lld, leased by the killed retryd, did not come back", ids[i]);
    }
    free(ids);
    assert_true(leased >= 1);
    /* B carries on. */
    e2e_response_t r = { 0 };
    http(g_dmn[1].port, &r, "POST", "/queues/cl/messages", "{\"payload\":\"after the crash\"}");
    long long after_id = e2e_jint(e2e_expect_json(&r, 201), "id");
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[1]);

    sent_log_t all = { 0 };
    for (int i = 0; i < LOADERS; i++)
        for (size_t j = 0; j < w[i].log.n; j++) *sent_add(&all) = w[i].log.items[j];
    sent_t *last = sent_add(&all);
    SET(last->payload, "after the crash");
    last->outcome = OUT_CREATED;
    last->id = after_id;
    size_t count;
    stored_t *m = load_messages(g_shared, pfx, "cl", &count);
    expect_enqueues_accounted(&all, m, count, "kill -9 retryd under load");
    expect_indexes_consistent(g_shared, pfx, "cl", m, count);
    printf("# measured kill -9 retryd under load: %d x 201 through the killed retryd, %zu "
           "leases held by it, all given back %lld ms after the kill (lease 2 s)\n", created,
           leased, back_ms);
    stored_free(m, count);
    free(all.items);
    for (int i = 0; i < LOADERS; i++) {
        free(w[i].log.items);
        free(w[i].acked);
    }
}

/* ========================================================================= */
/* 5. Shutdown with requests in flight; half-closed and reset clients        */
/* ========================================================================= */

/* Bytes the kernel holds unread on the daemon's end of the connection from
 * client_port (/proc/net/tcp rx_queue), or -1 when there is no such socket. */
static long server_unread_bytes(int daemon_port, int client_port)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == NULL) return -1;
    char line[512], local[32], remote[32];
    snprintf(local, sizeof local, "0100007F:%04X", daemon_port);
    snprintf(remote, sizeof remote, "0100007F:%04X", client_port);
    long unread = -1;
    while (fgets(line, sizeof line, f)) {
        char l[64], r[64];
        unsigned long tx, rx;
        if (sscanf(line, " %*d: %63s %63s %*x %lx:%lx", l, r, &tx, &rx) != 4) continue;
        if (strcmp(l, local) == 0 && strcmp(r, remote) == 0) {
            unread = (long)rx;
            break;
        }
    }
    fclose(f);
    return unread;
}

/* The local port of a connected socket, or -1. */
static int local_port_of(int fd)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0) return -1;
    return ntohs(a.sin_port);
}

enum inflight_kind { IF_LONG_POLL, IF_ENQUEUE, IF_LIST, IF_GET, IF_CLAIM, IF_KINDS };

static const char *const inflight_names[IF_KINDS] = { "long-poll", "enqueue", "list", "get",
                                                      "claim" };

/* One client of the shutdown test: one request on a connection of its own. */
typedef struct inflight {
    pthread_t thread;
    enum inflight_kind kind;
    int port;
    const char *method;
    char path[160];
    char *body;                   /* rd_malloc'd or NULL */
    size_t body_len;
    atomic_int client_port;       /* 0 until the request is sent; -1 when that failed */
    atomic_bool done;             /* the response (or the lack of one) is in */
    int rc;                       /* 0: a complete response came */
    e2e_response_t r;
} inflight_t;

static void *inflight_main(void *arg)
{
    inflight_t *f = arg;
    e2e_conn_t c;
    f->rc = -1;
    if (e2e_conn_open(&c, f->port) != 0 ||
        e2e_send_request(&c, f->method, f->path, NULL, f->body, f->body_len) != 0) {
        atomic_store(&f->client_port, -1);
        e2e_conn_close(&c);
        return NULL;
    }
    atomic_store(&f->client_port, local_port_of(c.fd));
    f->rc = e2e_read_response(&c, &f->r);
    e2e_conn_close(&c);
    atomic_store(&f->done, true);
    return NULL;
}

/* ~20 clients of every kind have requests in flight (the writes provably
 * held in Redis) when SIGTERM comes: retryd exits 0, every client gets a
 * complete response (or a complete 503 problem), and Redis agrees with what
 * the clients were told: nothing is left processing that no client got. */
static void test_sigterm_with_requests_in_flight(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "term";
    /* The pause below must not look like a hung Redis. */
    assert_int_equal(start_retryd(&g_dmn[0], "term.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "20000", NULL), 0);
    int port = g_dmn[0].port;
    enum { SEEDED = 150, PAYLOAD_BYTES = 2048, PER_KIND = 4, CLIENTS = PER_KIND * IF_KINDS };
    char *payload = malloc(PAYLOAD_BYTES + 1);
    e2e_response_t r = { 0 };
    for (int i = 1; i <= SEEDED; i++) {
        char tag[32];
        int n = snprintf(tag, sizeof tag, "seed %d ", i);
        memset(payload, 'a' + i % 26, PAYLOAD_BYTES);
        memcpy(payload, tag, (size_t)n);
        payload[PAYLOAD_BYTES] = '\0';
        size_t len;
        char *body = e2e_json_with_string("payload", payload, &len);
        e2e_http_on(&g_conn, port, &r, "POST", "/queues/work/messages", NULL, body, len);
        rd_free(body);
        assert_int_equal(e2e_jint(e2e_expect_json(&r, 201), "id"), i);
    }
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    static inflight_t f[CLIENTS];
    memset(f, 0, sizeof f);
    for (int i = 0; i < CLIENTS; i++) {
        inflight_t *x = &f[i];
        x->kind = (enum inflight_kind)(i / PER_KIND);
        x->port = port;
        atomic_init(&x->client_port, 0);
        atomic_init(&x->done, false);
        switch (x->kind) {
        case IF_LONG_POLL:
            x->method = "POST";
            snprintf(x->path, sizeof x->path, "/queues/idle%d/claim", i);
            x->body = rd_strdup("{\"wait_seconds\":10}");
            break;
        case IF_ENQUEUE:
            x->method = "POST";
            snprintf(x->path, sizeof x->path, "/queues/work/messages");
            char tag[32];
            int n = snprintf(tag, sizeof tag, "late %d ", i);
            memset(payload, 'z', PAYLOAD_BYTES);
            memcpy(payload, tag, (size_t)n);
            payload[PAYLOAD_BYTES] = '\0';
            x->body = e2e_json_with_string("payload", payload, &x->body_len);
            break;
        case IF_LIST:
            x->method = "GET";
            snprintf(x->path, sizeof x->path, "/queues/work/messages?limit=100");
            break;
        case IF_GET:
            x->method = "GET";
            snprintf(x->path, sizeof x->path, "/queues/work/messages/%d", i);
            break;
        default:
            x->method = "POST";
            snprintf(x->path, sizeof x->path, "/queues/work/claim");
            x->body = rd_strdup("{\"count\":3,\"lease_seconds\":60}");
            break;
        }
        if (x->body && x->body_len == 0) x->body_len = strlen(x->body);
    }
    free(payload);

    /* The long-polls park first (each on a queue of its own). */
    for (int i = 0; i < PER_KIND; i++)
        assert_int_equal(pthread_create(&f[i].thread, NULL, inflight_main, &f[i]), 0);
    long long deadline = e2e_mono_ms() + 5000;
    for (int i = 0; i < PER_KIND; i++) {
        while (!wake_subscribed(g_admin, prefix, e2e_fmt("idle%d", i))) {
            if (e2e_mono_ms() > deadline) fail_msg("long-poll %d never parked", i);
            e2e_pause_ms(10);
        }
    }
    /* Writes are held in Redis from here on, and everything the daemon sends
     * after the first held write waits behind it on the same link. */
    redisReply *x = e2e_rcmd(g_admin, "CLIENT PAUSE 20000 WRITE");
    freeReplyObject(x);
    for (int i = PER_KIND; i < CLIENTS; i++)
        assert_int_equal(pthread_create(&f[i].thread, NULL, inflight_main, &f[i]), 0);
    /* Every request has reached the daemon (nothing unread on its end) and
     * at least one write is held in Redis. */
    deadline = e2e_mono_ms() + 5000;
    for (int i = 0; i < CLIENTS; i++) {
        for (;;) {
            int cp = atomic_load(&f[i].client_port);
            if (cp < 0) fail_msg("client %d (%s) could not send", i, inflight_names[f[i].kind]);
            if (atomic_load(&f[i].done) || (cp > 0 && server_unread_bytes(port, cp) == 0))
                break;
            if (e2e_mono_ms() > deadline)
                fail_msg("client %d (%s): its request was not read by the daemon", i,
                         inflight_names[f[i].kind]);
            e2e_pause_ms(5);
        }
    }
    for (;;) {
        x = e2e_rcmd(g_admin, "INFO clients");
        bool held = strstr(x->str, "blocked_clients:0\r") == NULL;
        freeReplyObject(x);
        if (held) break;
        if (e2e_mono_ms() > deadline) fail_msg("no write of the daemon is held in Redis");
        e2e_pause_ms(5);
    }

    assert_int_equal(kill(g_dmn[0].pid, SIGTERM), 0);
    /* Once the listener is closed the signal has been handled. */
    deadline = e2e_mono_ms() + 3000;
    for (;;) {
        int fd = e2e_connect(port);
        if (fd < 0) break;
        close(fd);
        if (e2e_mono_ms() > deadline) fail_msg("still accepting 3 s after SIGTERM");
        e2e_pause_ms(5);
    }
    x = e2e_rcmd(g_admin, "CLIENT UNPAUSE");
    freeReplyObject(x);
    for (int i = 0; i < CLIENTS; i++) pthread_join(f[i].thread, NULL);
    int status = e2e_daemon_stop(&g_dmn[0], 0, E2E_STOP_TIMEOUT_MS);

    /* What the clients were told. */
    long long *claimed = calloc(CLIENTS * 3, sizeof *claimed);
    size_t nclaimed = 0;
    int tally[IF_KINDS][3] = { { 0 } };   /* success, 503, none */
    for (int i = 0; i < CLIENTS; i++) {
        inflight_t *c = &f[i];
        const char *kind = inflight_names[c->kind];
        if (c->rc != 0) {
            tally[c->kind][2]++;
            continue;
        }
        if (c->r.status == 503) {
            expect_503(&c->r);
            tally[c->kind][1]++;
            continue;
        }
        tally[c->kind][0]++;
        switch (c->kind) {
        case IF_LONG_POLL:
            if (c->r.status != 204) fail_msg("%s %d: %d %s", kind, i, c->r.status, c->r.body);
            break;
        case IF_ENQUEUE:
            e2e_jint(e2e_expect_json(&c->r, 201), "id");
            break;
        case IF_LIST: {
            rd_json_t *list = e2e_jget(e2e_expect_json(&c->r, 200), "messages");
            assert_int_equal(rd_json_array_size(list), 100);
            break;
        }
        case IF_GET:
            assert_int_equal(e2e_jint(e2e_expect_json(&c->r, 200), "id"), i);
            break;
        default: {
            rd_json_t *list = e2e_jget(e2e_expect_json(&c->r, 200), "messages");
            for (size_t j = 0; j < rd_json_array_size(list); j++)
                claimed[nclaimed++] = e2e_jint(rd_json_array_at(list, j), "id");
            break;
        }
        }
    }
    printf("# measured SIGTERM with %d requests in flight: exit status %d; answered "
           "(ok/503/none): long-poll %d/%d/%d, enqueue %d/%d/%d, list %d/%d/%d, get %d/%d/%d, "
           "claim %d/%d/%d; %zu messages claimed\n", CLIENTS, status,
           tally[0][0], tally[0][1], tally[0][2], tally[1][0], tally[1][1], tally[1][2],
           tally[2][0], tally[2][1], tally[2][2], tally[3][0], tally[3][1], tally[3][2],
           tally[4][0], tally[4][1], tally[4][2], nclaimed);
    if (status != 0)
        fail_msg("retryd after SIGTERM with requests in flight: %s %d",
                 status < 0 ? "killed," : status > 255 ? "signal" : "exit",
                 status > 255 ? status - 256 : status);
    for (int k = 0; k < IF_KINDS; k++)
        if (tally[k][2] > 0)
            fail_msg("%d %s client(s) got no complete response", tally[k][2], inflight_names[k]);

    /* What Redis holds agrees: a message is processing iff a client got it. */
    size_t count;
    stored_t *m = load_messages(g_admin, prefix, "work", &count);
    for (size_t i = 0; i < count; i++) {
        bool given = false;
        for (size_t j = 0; j < nclaimed; j++) given = given || claimed[j] == m[i].id;
        if (strcmp(m[i].status, "processing") == 0 && !given)
            fail_msg("message %lld is processing but no client received it", m[i].id);
        if (given && strcmp(m[i].status, "processing") != 0)
            fail_msg("message %lld was handed to a client but is %s", m[i].id, m[i].status);
    }
    for (int i = 0; i < CLIENTS; i++) {
        if (f[i].kind != IF_ENQUEUE || f[i].rc != 0 || f[i].r.status != 201) continue;
        long long id = e2e_jint(f[i].r.json, "id");
        const stored_t *s = find_id(m, count, id);
        if (s == NULL) fail_msg("enqueue %d got 201 (id %lld) but is not in Redis", i, id);
    }
    expect_indexes_consistent(g_admin, prefix, "work", m, count);
    stored_free(m, count);
    free(claimed);
    for (int i = 0; i < CLIENTS; i++) {
        e2e_response_free(&f[i].r);
        rd_free(f[i].body);
    }
}

/* Sends one request on a fresh connection, then shutdown(SHUT_WR) as HTTP/1.1
 * allows, and reads the answer. */
static void half_closed_request(int port, const char *method, const char *path, const char *body,
                                e2e_response_t *r)
{
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    assert_int_equal(e2e_send_request(&c, method, path, NULL, body, body ? strlen(body) : 0), 0);
    assert_int_equal(shutdown(c.fd, SHUT_WR), 0);
    e2e_response_free(r);
    if (e2e_read_response(&c, r) != 0)
        fail_msg("%s %s then SHUT_WR: no complete response", method, path);
    /* Then the server ends the connection. */
    if (c.fd >= 0 && fx_wait_closed(c.fd, 3000) < 0)
        fail_msg("%s %s then SHUT_WR: still open 3 s after the answer", method, path);
    e2e_conn_close(&c);
}

/* A client that half-closes after its request gets the answer: the enqueue
 * its 201 (no duplicate when it would have retried), the claim its message
 * (not left processing until the lease runs out). */
static void test_half_closed_clients_get_their_answers(void **state)
{
    (void)state;
    char pfx[128];
    PREFIX(pfx, "halfclose");
    assert_int_equal(start_retryd(&g_dmn[0], "halfclose.log", e2e_redis_url(g_shared_port), pfx,
                                  true, NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    half_closed_request(port, "POST", "/queues/hc/messages",
                        "{\"payload\":\"sent once\",\"max_retries\":1}", &r);
    rd_json_t *m = e2e_expect_json(&r, 201);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_string_equal(e2e_jstr(m, "payload"), "sent once");

    half_closed_request(port, "POST", "/queues/hc/claim", "{\"lease_seconds\":30}", &r);
    m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    const char *token = e2e_jstr(m, "lease_token");
    char field[160];
    const char *base = e2e_fmt("%s:{hc}", pfx);
    assert_string_equal(e2e_message_field(g_shared, base, 1, "status", field, sizeof field),
                        "processing");
    assert_string_equal(e2e_message_field(g_shared, base, 1, "lease_token", field, sizeof field),
                        token);

    /* The worker that got it can settle it. */
    half_closed_request(port, "POST", "/queues/hc/messages/1/succeed",
                        e2e_fmt("{\"lease_token\":\"%s\"}", token), &r);
    assert_string_equal(e2e_jstr(e2e_expect_json(&r, 200), "status"), "succeeded");
    e2e_response_free(&r);
    stop_retryd(&g_dmn[0]);
    assert_int_equal(rq_int(g_shared, "GET %s:{hc}:seq", pfx), 1);
}

/* Client X pipelines two long-poll claims and half-closes; client Y then
 * long-polls the same queue. Answering X's first waiter (its client has
 * closed its side) runs X's second request at once, which parks and serves
 * the queue from inside the first serve: the claim for Y must be sent once.
 * Before the fix it went out twice and the second answer found no waiter
 * (NULL dereference: the daemon crashed). */
static void test_pipelined_long_polls_after_half_close(void **state)
{
    (void)state;
    char pfx[128];
    PREFIX(pfx, "pipehalf");
    assert_int_equal(start_retryd(&g_dmn[0], "pipehalf.log", e2e_redis_url(g_shared_port), pfx,
                                  true, "--log-level", "debug", NULL), 0);
    int port = g_dmn[0].port;
    const char *body = "{\"wait_seconds\":2}";

    e2e_conn_t x;
    assert_int_equal(e2e_conn_open(&x, port), 0);
    assert_int_equal(e2e_send_request(&x, "POST", "/queues/ph/claim", NULL, body, strlen(body)), 0);
    assert_int_equal(e2e_send_request(&x, "POST", "/queues/ph/claim", NULL, body, strlen(body)), 0);
    assert_int_equal(shutdown(x.fd, SHUT_WR), 0);
    char log[PATH_MAX];
    SET(log, tmp_path("pipehalf.log"));
    long long deadline = e2e_mono_ms() + 5000;
    for (;;) {
        char *text = fx_read_file(log);
        bool seen = text && strstr(text, "http: client closed its sending side") != NULL;
        free(text);
        if (seen) break;
        if (e2e_mono_ms() > deadline) fail_msg("the daemon never saw the half-close");
        e2e_pause_ms(5);
    }

    e2e_conn_t y;
    assert_int_equal(e2e_conn_open(&y, port), 0);
    assert_int_equal(e2e_send_request(&y, "POST", "/queues/ph/claim", NULL, body, strlen(body)), 0);

    /* X gets both answers (nothing was claimable), then the connection ends. */
    e2e_response_t r = { 0 };
    for (int i = 0; i < 2; i++) {
        if (e2e_read_response(&x, &r) != 0) fail_msg("X: answer %d missing", i + 1);
        assert_int_equal(r.status, 204);
        e2e_response_free(&r);
    }
    e2e_conn_close(&x);
    /* Y's long-poll ends at its deadline with 204, and the daemon is alive. */
    if (e2e_read_response(&y, &r) != 0) fail_msg("Y: no answer");
    assert_int_equal(r.status, 204);
    e2e_response_free(&r);
    e2e_conn_close(&y);
    assert_true(e2e_daemon_alive(&g_dmn[0]));
    half_closed_request(port, "GET", "/healthz", NULL, &r);
    assert_int_equal(r.status, 200);
    e2e_response_free(&r);
    stop_retryd(&g_dmn[0]);
}

/* Sends body to path on a connection of its own while Redis holds writes
 * (CLIENT PAUSE), so the claim is in Redis when its client resets (RST);
 * returns once the daemon saw the reset, with Redis running again. */
static void reset_during_claim(int port, const char *path, const char *body, const char *log_name)
{
    redisReply *x = e2e_rcmd(g_admin, "CLIENT PAUSE 20000 WRITE");
    freeReplyObject(x);
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", path, NULL, body, strlen(body)), 0);
    int client_port = local_port_of(c.fd);
    long long deadline = e2e_mono_ms() + 5000;
    while (server_unread_bytes(port, client_port) != 0) {
        if (e2e_mono_ms() > deadline) fail_msg("the daemon never read the claim");
        e2e_pause_ms(5);
    }
    struct linger lg = { 1, 0 };
    assert_int_equal(setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    e2e_conn_close(&c);   /* RST */
    char log[PATH_MAX];
    SET(log, tmp_path(log_name));
    for (;;) {
        char *text = fx_read_file(log);
        bool seen = text && strstr(text, "http: read failed") != NULL;
        free(text);
        if (seen) break;
        if (e2e_mono_ms() > deadline) fail_msg("the daemon never saw the reset");
        e2e_pause_ms(5);
    }
    x = e2e_rcmd(g_admin, "CLIENT UNPAUSE");
    freeReplyObject(x);
}

/* Waits (3 s at most) until message id of queue q is pending again with
 * retry_count 0: handed back, not failed. Returns how long it took (ms). */
static long long wait_handed_back(const char *prefix, const char *q, int id)
{
    long long unpaused = e2e_mono_ms();
    for (;;) {
        char status[32], count[32];
        const char *base = e2e_fmt("%s:{%s}", prefix, q);
        e2e_message_field(g_admin, base, id, "status", status, sizeof status);
        e2e_message_field(g_admin, base, id, "retry_count", count, sizeof count);
        bool back = strcmp(status, "pending") == 0;
        if (status[0] == '\0') SET(status, "?");
        long long retries = count[0] ? atoll(count) : -1;
        if (back) {
            assert_int_equal(retries, 0);
            return e2e_mono_ms() - unpaused;
        }
        if (e2e_mono_ms() - unpaused > 3000)
            fail_msg("3 s after its client reset, the claimed message is %s, not pending",
                     status);
        e2e_pause_ms(10);
    }
}

/* A claim whose client resets before the answer: the message goes straight
 * back (pending, retry_count 0, no failure counted), as a departed long-poll's
 * does, instead of staying processing until its lease expires. */
static void test_claim_whose_client_resets_is_handed_back(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "reset";
    assert_int_equal(start_retryd(&g_dmn[0], "reset.log", e2e_redis_url(g_srv.port), prefix, true,
                                  "--redis-timeout-ms", "20000", "--log-level", "debug", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    http(port, &r, "POST", "/queues/rs/messages", "{\"payload\":\"keep me\",\"max_retries\":1}");
    e2e_expect_json(&r, 201);
    e2e_conn_close(&g_conn);

    /* The claim is held in Redis while its client resets. */
    reset_during_claim(port, "/queues/rs/claim", "{\"lease_seconds\":60}", "reset.log");

    /* Back at once: long before the 60 s lease, and not as a failure. */
    printf("# measured a claim whose client reset: handed back %lld ms after Redis answered\n",
           wait_handed_back(prefix, "rs", 1));
    assert_int_equal(rq_int(g_admin, "HGET %s:{rs}:stats released", prefix), 1);
    assert_int_equal(rq_int(g_admin, "HGET %s:{rs}:stats failed", prefix), 0);
    /* And the next worker gets it. */
    http(port, &r, "POST", "/queues/rs/claim", NULL);
    assert_int_equal(e2e_jint(e2e_expect_json(&r, 200), "id"), 1);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* Whether every byte to and from the Redis at redis_port (loopback) has been
 * read: no socket of Redis's has anything unread, and no socket to it has
 * anything left to send. */
static bool redis_sockets_drained(int redis_port)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == NULL) return false;
    char line[512], port_hex[16];
    snprintf(port_hex, sizeof port_hex, ":%04X", redis_port);
    bool drained = true;
    while (fgets(line, sizeof line, f)) {
        char l[64], r[64];
        unsigned long tx, rx;
        if (sscanf(line, " %*d: %63s %63s %*x %lx:%lx", l, r, &tx, &rx) != 4) continue;
        size_t ll = strlen(l), rl = strlen(r);
        bool ours = ll > 5 && strcmp(l + ll - 5, port_hex) == 0;
        bool to_us = rl > 5 && strcmp(r + rl - 5, port_hex) == 0;
        if ((ours && rx != 0) || (to_us && tx != 0)) drained = false;
    }
    fclose(f);
    return drained;
}

/* A claim whose client reset is handed back with `release`. When that call's
 * answer was lost too (Redis held it past --redis-timeout-ms and the link
 * dropped), the message stayed processing under a lease nobody holds: a
 * failure at its expiry, dead with max_retries 1, never seen by a worker.
 * The hand-back is sent again once the link is back (release only takes a
 * message still under the lease it names, so a second one changes nothing
 * after a first that ran). */
static void test_lost_hand_back_is_sent_again(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    redisContext *second = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(second);
    assert_int_equal(redisSetTimeout(second, (struct timeval){ 20, 0 }), REDIS_OK);
    const char *prefix = "lostback";
    assert_int_equal(start_retryd(&g_dmn[0], "lostback.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "3000", "--log-level", "debug", NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    http(port, &r, "POST", "/queues/lb/messages", "{\"payload\":\"keep me\",\"max_retries\":1}");
    e2e_expect_json(&r, 201);
    e2e_conn_close(&g_conn);

    /* Redis holds every command for FIRST_PAUSE_MS (CLIENT PAUSE ALL); meanwhile the
     * claim reaches it and its client resets. */
    enum { FIRST_PAUSE_MS = 1500, SECOND_PAUSE_MS = 6000 };
    redisReply *x = e2e_rcmd(g_admin, "CLIENT PAUSE %d ALL", FIRST_PAUSE_MS);
    long long paused_at = e2e_mono_ms();
    freeReplyObject(x);
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    const char *body = "{\"lease_seconds\":60}";
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/lb/claim", NULL, body, strlen(body)), 0);
    int client_port = local_port_of(c.fd);
    long long deadline = paused_at + FIRST_PAUSE_MS;
    while (server_unread_bytes(port, client_port) != 0) {
        if (e2e_mono_ms() > deadline) fail_msg("the daemon never read the claim");
        e2e_pause_ms(5);
    }
    struct linger lg = { 1, 0 };
    assert_int_equal(setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    e2e_conn_close(&c);   /* RST */
    char log[PATH_MAX];
    SET(log, tmp_path("lostback.log"));
    for (;;) {
        char *text = fx_read_file(log);
        bool seen = text && strstr(text, "http: read failed") != NULL;
        free(text);
        if (seen) break;
        if (e2e_mono_ms() > deadline) fail_msg("the daemon never saw the reset");
        e2e_pause_ms(5);
    }
    /* Redis has read the claim: a second pause sent now is held behind it
     * and starts right after the claim runs, so the release that hands the
     * message back waits SECOND_PAUSE_MS, past the daemon's timeout. */
    while (!redis_sockets_drained(g_srv.port)) {
        if (e2e_mono_ms() > deadline) fail_msg("Redis did not read the claim");
        e2e_pause_ms(5);
    }
    assert_int_equal(redisAppendCommand(second, "CLIENT PAUSE %d ALL", SECOND_PAUSE_MS), REDIS_OK);
    int done = 0;
    while (!done) assert_int_equal(redisBufferWrite(second, &done), REDIS_OK);
    if (e2e_mono_ms() >= deadline) fail_msg("the second pause was sent after the first ended");
    void *reply = NULL;
    assert_int_equal(redisGetReply(second, &reply), REDIS_OK);   /* the claim has run */
    freeReplyObject(reply);
    /* Every client waits out the second pause; this PING is answered when it
     * ends (the daemon's link dropped meanwhile). */
    reply = redisCommand(second, "PING");
    assert_non_null(reply);
    freeReplyObject(reply);
    redisFree(second);
    assert_int_equal(rq_int(g_admin, "HGET %s:{lb}:stats claimed", prefix), 1);

    /* Once the link is back the message is pending again: released, not
     * failed, long before its 60 s lease. */
    deadline = e2e_mono_ms() + RECOVERY_BOUND_MS;
    while (rq_int(g_admin, "HGET %s:{lb}:stats released", prefix) != 1) {
        if (e2e_mono_ms() > deadline)
            fail_msg("the message leased for a client that reset, whose hand-back was lost, is "
                     "not handed back (processing: %lld)",
                     rq_int(g_admin, "ZCARD %s:{lb}:3:processing", prefix));
        e2e_pause_ms(20);
    }
    char *text = fx_read_file(log);
    bool dropped = text && strstr(text, "down, reconnecting") != NULL;
    free(text);
    if (!dropped) fail_msg("the link never dropped: the hand-back was not lost");
    assert_int_equal(rq_int(g_admin, "HGET %s:{lb}:stats failed", prefix), 0);
    expect_untouched_pending(port, "lb", 1);
    http(port, &r, "POST", "/queues/lb/claim", NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    assert_int_equal(e2e_jint(m, "retry_count"), 0);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* A batch replay whose Redis hangs part way (the call in flight is dropped
 * at --redis-timeout-ms) answers a 503 whose detail says how many dead
 * letters it did replay, never "nothing was done" or no count at all. */
static void test_replay_all_stopped_part_way_says_how_many(void **state)
{
    (void)state;
    enum { N = 100000 };
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "replaystop";
    static const char seed[] =
        "local base, n, at = KEYS[1], tonumber(ARGV[1]), ARGV[2] "
        "for id = 1, n do "
        "  redis.call('HSET', base .. ':m:' .. id, 'payload', 'p', 'status', 'dead', "
        "             'retry_count', 1, 'max_retries', 1, 'created_at', at, 'updated_at', at, "
        "             'last_error', 'boom', 'dead_at', at) "
        "  redis.call('ZADD', base .. ':dead', at, id) "
        "end "
        "redis.call('ZINCRBY', base .. ':errors', n, 'boom') "
        "redis.call('SET', base .. ':seq', n) "
        "return n";
    assert_int_equal(rq_int(g_admin, "EVAL %s 1 %s:{rp} %d %lld", seed, prefix, (int)N,
                            e2e_wall_ms() - 1000), N);
    /* Started after the seed, which holds Redis for about a second: a link
     * with a 1 s timeout that met it would be reconnecting when the replay
     * comes. */
    assert_int_equal(start_retryd(&g_dmn[0], "replaystop.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "1000", NULL), 0);
    int port = g_dmn[0].port;

    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/rp/replay", NULL, "{\"all\":true}",
                                      12), 0);
    /* Paused once a second call has replayed: retryd sends its next call
     * only when it has read the answer to the one before, so it has then
     * counted at least one batch. (After the first call alone, its answer
     * may still be on the way when Redis stops: "stopped after 0".) */
    long long deadline = e2e_mono_ms() + 5000;
    while (rq_int(g_admin, "HGET %s:{rp}:stats replayed", prefix) <= RD_STORE_REPLAY_IDS_MAX) {
        if (e2e_mono_ms() > deadline) fail_msg("the batch replay did not start");
        e2e_pause_ms(1);
    }
    assert_int_equal(fx_redis_pause(&g_srv), 0);
    e2e_response_t r = { 0 };
    int rc = e2e_read_response(&c, &r);
    assert_int_equal(fx_redis_resume(&g_srv), 0);
    e2e_conn_close(&c);
    if (rc != 0) fail_msg("the batch replay stopped by a hanging Redis: no complete response");
    printf("# measured a batch replay whose Redis hung: %d %s\n", r.status, r.body);
    expect_503(&r);
    const char *detail = rd_json_string(rd_json_get(r.json, "detail"));
    long long said = -1;
    if (!detail || sscanf(detail, "The batch replay stopped after %lld", &said) != 1)
        fail_msg("the detail does not say how many were replayed: %s", detail ? detail : "none");
    long long replayed = rq_int(g_admin, "HGET %s:{rp}:stats replayed", prefix);
    /* The call in flight may or may not have replayed its batch too. */
    if (said <= 0 || said > replayed || replayed - said > 200)
        fail_msg("the detail says %lld replayed; Redis counts %lld", said, replayed);
    if (replayed >= N) fail_msg("the replay ended before Redis hung: make N larger");
    e2e_response_free(&r);
    stop_retryd(&g_dmn[0]);
}


/* Enqueues n dead letters into q (payload "p<i>", 300 bytes), pipelined:
 * enqueue then kill. */
static void seed_dead(redisContext *c, const char *prefix, const char *q, int n)
{
    char pad[300];
    memset(pad, 'z', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    for (int i = 1; i <= n; i++) {
        redisAppendCommand(c, "FCALL %s 1 %s:{%s} p%d%s 1 0 %s", RD_FUNCTION("enqueue"), prefix,
                           q, i, pad, "");
        redisAppendCommand(c, "FCALL %s 2 %s:{%s} %s:{%s}:m:%d %d cut", RD_FUNCTION("kill"),
                           prefix, q, prefix, q, i, i);
    }
    for (int i = 0; i < 2 * n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || r == NULL || r->type != REDIS_REPLY_ARRAY)
            fail_msg("seeding dead letters failed at reply %d", i);
        freeReplyObject(r);
    }
}

/* Every letter of 1..n is in `to` exactly once (origin {from, i}, payload
 * "p<i>..."), and `from` holds none of them, in no state. */
static void expect_redriven_once(redisContext *c, const char *prefix, const char *from,
                                 const char *to, int n)
{
    int *seen = calloc((size_t)n + 1, sizeof *seen);
    assert_non_null(seen);
    char cursor[256] = "";
    long long listed = 0;
    do {
        redisReply *r = e2e_rcmd(c, "FCALL_RO %s 1 %s:{%s} pending 1000 %s", RD_FUNCTION("list"),
                                 prefix, to, cursor);
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
            strcmp(r->element[0]->str, "ok") != 0)
            fail_msg("list of the target failed");
        snprintf(cursor, sizeof cursor, "%s", r->element[2]->str);
        for (size_t i = 3; i < r->elements; i++) {
            const redisReply *m = r->element[i];
            long long origin = -1;
            const char *oq = NULL, *payload = NULL;
            for (size_t f = 2; f + 1 < m->elements; f += 2) {
                const char *name = m->element[f]->str;
                if (strcmp(name, "origin_id") == 0) origin = atoll(m->element[f + 1]->str);
                else if (strcmp(name, "origin_queue") == 0) oq = m->element[f + 1]->str;
                else if (strcmp(name, "payload") == 0) payload = m->element[f + 1]->str;
            }
            if (origin < 1 || origin > n || !oq || strcmp(oq, from) != 0 || !payload)
                fail_msg("a target message without a good origin (%lld)", origin);
            char want[32];
            snprintf(want, sizeof want, "p%lldz", origin);
            if (strncmp(payload, want, strlen(want)) != 0)
                fail_msg("letter %lld arrived with payload %.20s", origin, payload);
            if (seen[origin]++) fail_msg("letter %lld is in the target twice", origin);
            listed++;
        }
        freeReplyObject(r);
    } while (cursor[0]);
    for (int i = 1; i <= n; i++)
        if (!seen[i]) fail_msg("letter %d never reached the target", i);
    free(seen);
    assert_int_equal(listed, n);
    assert_int_equal(rq_int(c, "ZCARD %s:{%s}:3:dead", prefix, from), 0);
    assert_int_equal(rq_int(c, "ZCARD %s:{%s}:3:redriving", prefix, from), 0);
    assert_int_equal(rq_int(c, "EXISTS %s:{%s}:3:redrive_to", prefix, from), 0);
    redisReply *k = e2e_rcmd(c, "SCAN 0 MATCH %s:{%s}:m:* COUNT 100000", prefix, from);
    if (k->element[1]->elements != 0) fail_msg("records are left in the source");
    freeReplyObject(k);
    assert_int_equal(rq_int(c, "HGET %s:{%s}:stats redriven", prefix, from), n);
}

/* A redrive cut mid-way, twice (Redis hangs past --redis-timeout-ms: 503;
 * then retryd is SIGKILLed while Redis is stopped), then repeated by a new
 * retryd: every letter lands in the target once and leaves the source. */
static void test_redrive_cut_and_repeated_moves_each_letter_once(void **state)
{
    (void)state;
    enum { N = 20000 };
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "redrivecut";
    assert_int_equal(start_retryd(&g_dmn[0], "redrivecut.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "1000", NULL), 0);
    seed_dead(g_admin, prefix, "rs", N);
    static const char body[] = "{\"all\":true,\"to\":\"rt\"}";

    /* 1. Redis hangs part way: the call in flight is dropped, 503. */
    e2e_conn_t c;
    assert_int_equal(e2e_conn_open(&c, g_dmn[0].port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/rs/replay", NULL, body,
                                      strlen(body)), 0);
    long long deadline = e2e_mono_ms() + 10000;
    while (rq_int(g_admin, "HGET %s:{rt}:stats redriven_in", prefix) == 0) {
        if (e2e_mono_ms() > deadline) fail_msg("the redrive did not start");
        e2e_pause_ms(1);
    }
    assert_int_equal(fx_redis_pause(&g_srv), 0);
    e2e_response_t r = { 0 };
    int rc = e2e_read_response(&c, &r);
    assert_int_equal(fx_redis_resume(&g_srv), 0);
    e2e_conn_close(&c);
    if (rc != 0) fail_msg("the redrive stopped by a hanging Redis: no complete response");
    printf("# redrive cut by a hanging Redis: %d %s\n", r.status, r.body);
    expect_503(&r);
    long long moved1 = rq_int(g_admin, "HGET %s:{rs}:stats redriven", prefix);
    if (moved1 >= N) fail_msg("the redrive ended before Redis hung: make N larger");

    /* 2. Repeated (once the link is back), and retryd killed while Redis
     * is stopped. */
    assert_int_equal(e2e_daemon_wait_up(&g_dmn[0], true, true, READY_TIMEOUT_MS), 0);
    long long in_before = rq_int(g_admin, "HGET %s:{rt}:stats redriven_in", prefix);
    assert_int_equal(e2e_conn_open(&c, g_dmn[0].port), 0);
    assert_int_equal(e2e_send_request(&c, "POST", "/queues/rs/replay", NULL, body,
                                      strlen(body)), 0);
    deadline = e2e_mono_ms() + 10000;
    while (rq_int(g_admin, "HGET %s:{rt}:stats redriven_in", prefix) <= in_before + 300) {
        if (e2e_mono_ms() > deadline) {
            e2e_response_t late = { 0 };
            e2e_read_response(&c, &late);
            fail_msg("the repeated redrive did not go on: %d %s", late.status,
                     late.body ? late.body : "");
        }
        e2e_pause_ms(1);
    }
    assert_int_equal(fx_redis_pause(&g_srv), 0);
    e2e_daemon_stop(&g_dmn[0], SIGKILL, E2E_STOP_TIMEOUT_MS);
    assert_int_equal(fx_redis_resume(&g_srv), 0);
    e2e_conn_close(&c);
    long long moved2 = rq_int(g_admin, "HGET %s:{rs}:stats redriven", prefix);
    long long left = rq_int(g_admin, "ZCARD %s:{rs}:3:redriving", prefix);
    printf("# redrive: %lld moved before the 503, %lld before SIGKILL, %lld left redriving\n",
           moved1, moved2, left);
    if (moved2 >= N) fail_msg("the redrive ended before retryd was killed: make N larger");

    /* 3. A new retryd, the same call: it completes the rest. */
    assert_int_equal(start_retryd(&g_dmn[1], "redrivecut2.log", e2e_redis_url(g_srv.port), prefix,
                                  true, NULL), 0);
    http(g_dmn[1].port, &r, "POST", "/queues/rs/replay", body);
    long long replayed = e2e_jint(e2e_expect_json(&r, 200), "replayed");
    assert_true(replayed >= N - moved2 - left);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    expect_redriven_once(g_admin, prefix, "rs", "rt", N);
    assert_int_equal(rq_int(g_admin, "HGET %s:{rt}:stats redriven_in", prefix), N);
    stop_retryd(&g_dmn[1]);
}

/* The same for a claim with settle (docs/reference.md "Settle and claim"): the messages it claimed go
 * straight back, and its settlements stay applied. */
static void test_settle_claim_whose_client_resets_is_handed_back(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);
    const char *prefix = "sreset";
    assert_int_equal(start_retryd(&g_dmn[0], "sreset.log", e2e_redis_url(g_srv.port), prefix,
                                  true, "--redis-timeout-ms", "20000", "--log-level", "debug",
                                  NULL), 0);
    int port = g_dmn[0].port;
    e2e_response_t r = { 0 };
    for (int i = 0; i < 3; i++) {
        http(port, &r, "POST", "/queues/ss/messages", "{\"payload\":\"job\"}");
        e2e_expect_json(&r, 201);
    }
    http(port, &r, "POST", "/queues/ss/claim", NULL);
    rd_json_t *m = e2e_expect_json(&r, 200);
    assert_int_equal(e2e_jint(m, "id"), 1);
    char body[512];
    snprintf(body, sizeof body,
             "{\"count\":2,\"settle\":[{\"id\":1,\"lease_token\":\"%s\",\"outcome\":\"succeeded\"}]}",
             e2e_jstr(m, "lease_token"));
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    reset_during_claim(port, "/queues/ss/claim", body, "sreset.log");
    wait_handed_back(prefix, "ss", 2);
    wait_handed_back(prefix, "ss", 3);
    assert_int_equal(rq_int(g_admin, "HGET %s:{ss}:stats released", prefix), 2);
    assert_int_equal(rq_int(g_admin, "HGET %s:{ss}:stats failed", prefix), 0);
    assert_int_equal(rq_int(g_admin, "HGET %s:{ss}:stats succeeded", prefix), 1);
    char status[32];
    assert_string_equal(e2e_message_field(g_admin, e2e_fmt("%s:{ss}", prefix), 1, "status", status,
                                          sizeof status), "succeeded");
    /* The next worker gets them, in their claim order. */
    http(port, &r, "POST", "/queues/ss/claim", "{\"count\":5}");
    rd_json_t *list = e2e_jget(e2e_expect_json(&r, 200), "messages");
    assert_int_equal(rd_json_array_size(list), 2);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 0), "id"), 2);
    assert_int_equal(e2e_jint(rd_json_array_at(list, 1), "id"), 3);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
}

/* ========================================================================= */
/* Durability settings checked at startup                                    */
/* ========================================================================= */

/* Starts retryd against the private Redis with its log in <tmp>/<log>, makes
 * one enqueue (its reply comes after the CONFIG replies on the same link),
 * stops it and returns the log (caller frees). */
static char *startup_log(const char *log)
{
    e2e_response_t r = { 0 };
    if (start_retryd(&g_dmn[0], log, e2e_redis_url(g_srv.port), "dur", true, NULL) != 0)
        fail_msg("retryd did not start");
    http(g_dmn[0].port, &r, "POST", "/queues/d/messages", "{\"payload\":\"x\"}");
    e2e_expect_json(&r, 201);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);
    stop_retryd(&g_dmn[0]);
    char *text = fx_read_file(tmp_path(log));
    if (text == NULL) fail_msg("no log");
    return text;
}

static void config_set(const char *name, const char *value)
{
    redisReply *x = e2e_rcmd(g_admin, "CONFIG SET %s %s", name, value);
    assert_int_equal(x->type, REDIS_REPLY_STATUS);
    freeReplyObject(x);
}

static void test_durability_warnings_at_startup(void **state)
{
    (void)state;
    static const char *const extra[] = { "--appendonly", "no", NULL };
    assert_int_equal(fx_redis_start(&g_srv, extra), 0);
    g_admin = fx_redis_connect(g_srv.port, NULL, NULL);
    assert_non_null(g_admin);

    char *text = startup_log("no-aof.log");
    bool warned = strstr(text, "durability:") && strstr(text, "appendonly");
    free(text);
    if (!warned) fail_msg("no durability warning about appendonly no");

    config_set("appendonly", "yes");
    config_set("appendfsync", "everysec");
    config_set("maxmemory-policy", "noeviction");
    text = startup_log("aof.log");
    char *line = strstr(text, "durability:");
    char found[256] = "";
    if (line) snprintf(found, sizeof found, "%.*s", (int)strcspn(line, "\n"), line);
    free(text);
    if (found[0]) fail_msg("warning with appendonly yes + noeviction: %s", found);

    config_set("maxmemory-policy", "allkeys-lru");
    text = startup_log("lru.log");
    warned = strstr(text, "durability: maxmemory-policy is allkeys-lru") != NULL;
    bool aof_warned = strstr(text, "appendonly no") != NULL;
    free(text);
    assert_true(warned);
    assert_false(aof_warned);

    config_set("maxmemory-policy", "noeviction");
    config_set("appendfsync", "no");
    text = startup_log("fsync-no.log");
    warned = strstr(text, "durability: appendfsync no") != NULL;
    free(text);
    assert_true(warned);
}

/* ========================================================================= */
/* 7. valgrind: no leak after a graceful shutdown                            */
/* ========================================================================= */

static bool on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (path == NULL) return false;
    char dir[PATH_MAX];
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(dir, sizeof dir, "%.*s/%s", (int)n, p, prog);
        if (access(dir, X_OK) == 0) return true;
        p += n;
        if (*p == ':') p++;
    }
    return false;
}

/* True when the binary was built with AddressSanitizer (valgrind cannot run it). */
static bool is_asan_build(const char *bin)
{
    FILE *f = fopen(bin, "rb");
    if (f == NULL) return false;
    static const char needle[] = "__asan_init";
    enum { OVERLAP = sizeof needle - 1 };
    static char buf[1 << 16];
    size_t have = 0;
    bool found = false;
    for (;;) {
        size_t n = fread(buf + have, 1, sizeof buf - have, f);
        if (n == 0) break;
        have += n;
        if (memmem(buf, have, needle, OVERLAP)) {
            found = true;
            break;
        }
        /* Keep the tail: the needle may straddle two reads. */
        memmove(buf, buf + have - OVERLAP, OVERLAP);
        have = OVERLAP;
    }
    fclose(f);
    return found;
}

static void test_valgrind_clean_shutdown(void **state)
{
    (void)state;
    if (!on_path("valgrind")) {
        printf("# valgrind is not installed: test_valgrind_clean_shutdown skipped\n");
        skip();
    }
    if (is_asan_build(g_bin)) {
        printf("# %s is an ASan build, which valgrind cannot run: "
               "test_valgrind_clean_shutdown skipped\n", g_bin);
        skip();
    }
    char prefix[128];
    PREFIX(prefix, "vg");
    char url[64], pfx[128], log[PATH_MAX];
    SET(url, e2e_redis_url(g_shared_port));
    SET(pfx, prefix);
    SET(log, tmp_path("valgrind.log"));
    static const char *const wrapper[] = { "valgrind", "--leak-check=full",
                                           "--errors-for-leak-kinds=definite,indirect",
                                           "--error-exitcode=99", NULL };
    const char *args[] = { "--redis", url, "--prefix", pfx, "--tick-ms", "100", "--log-level",
                           "info", "--max-body", "4096", NULL };
    e2e_daemon_t *d = &g_dmn[0];
    assert_int_equal(e2e_daemon_spawn_logged(d, wrapper, g_bin, args, log), 0);
    long long started = e2e_mono_ms();
    if (e2e_daemon_wait_status(d, "/readyz", 200, 30000) != 0)
        fail_msg("retryd under valgrind not ready within 30 s");
    printf("# measured valgrind: ready after %lld ms\n", e2e_mono_ms() - started);
    int port = d->port;
    e2e_response_t r = { 0 };
    struct step {
        const char *method, *path, *body;
        int status;
    } steps[] = {
        { "POST", "/queues/v/messages", "{\"payload\":\"one\"}", 201 },
        { "POST", "/queues/v/messages", "{\"payload\":\"two\",\"max_retries\":1}", 201 },
        { "POST", "/queues/v/messages", "{\"payload\":\"three\",\"idempotency_key\":\"k\"}", 201 },
        { "POST", "/queues/v/messages", "{\"payload\":\"three\",\"idempotency_key\":\"k\"}", 200 },
        { "POST", "/queues/v/messages", "{\"payload\":\"later\",\"delay_seconds\":60}", 201 },
        { "GET", "/queues/v/messages/1", NULL, 200 },
        { "GET", "/queues/v/messages?limit=2", NULL, 200 },
        { "GET", "/queues/v/messages?status=pending", NULL, 200 },
        { "POST", "/queues/v/claim", "{\"lease_seconds\":30}", 200 },          /* 1 */
        { "POST", "/queues/v/messages/1/extend", "{\"lease_seconds\":40}", 200 },
        { "POST", "/queues/v/messages/1/succeed", NULL, 200 },
        { "POST", "/queues/v/claim", NULL, 200 },                               /* 2 */
        { "POST", "/queues/v/messages/2/fail", "{\"error\":\"bad\"}", 200 },   /* dead */
        { "POST", "/queues/v/messages/2/replay", NULL, 200 },
        { "POST", "/queues/v/claim", "{\"count\":5}", 200 },                    /* 2, 3 */
        { "POST", "/queues/v/messages/2/fail", "{\"error\":\"worse\",\"retryable\":false}", 200 },
        { "POST", "/queues/v/replay", "{\"all\":true}", 200 },
        { "POST", "/queues/v/replay", "{\"ids\":[1,2,3]}", 200 },
        { "POST", "/queues/v/succeed", "{\"messages\":[{\"id\":3},{\"id\":99}]}", 200 },
        { "POST", "/queues/v/messages/4/kill", "{\"reason\":\"manual\"}", 200 },
        { "DELETE", "/queues/v/messages/4", NULL, 204 },
        { "POST", "/queues/empty/claim", "{\"wait_seconds\":1}", 204 },         /* long-poll */
        { "GET", "/queues/v/stats", NULL, 200 },
        { "GET", "/queues", NULL, 200 },
        { "GET", "/metrics", NULL, 200 },
        { "GET", "/readyz", NULL, 200 },
        { "GET", "/healthz", NULL, 200 },
        { "GET", "/nowhere", NULL, 404 },
        { "PUT", "/queues/v/messages", NULL, 405 },
        { "POST", "/queues/v/messages", "{}", 422 },
        { "POST", "/queues/v/messages", "{not json", 400 },
        { "GET", "/queues/v/messages/77", NULL, 404 },
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        http(port, &r, steps[i].method, steps[i].path, steps[i].body);
        if (r.status != steps[i].status)
            fail_msg("%s %s under valgrind: %d, expected %d: %s", steps[i].method, steps[i].path,
                     r.status, steps[i].status, r.body);
    }
    /* Error paths that close the connection: 413, 431. */
    char big[5001];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    http(port, &r, "POST", "/queues/v/messages", big);
    e2e_expect_problem(&r, 413, "payload-too-large", NULL);
    e2e_conn_close(&g_conn);
    char *hdr = malloc(20 * 1024 + 16);
    memcpy(hdr, "X-Big: ", 7);
    memset(hdr + 7, 'h', 20 * 1024);
    memcpy(hdr + 7 + 20 * 1024, "\r\n", 3);
    e2e_http_on(&g_conn, port, &r, "GET", "/healthz", hdr, NULL, 0);
    free(hdr);
    assert_int_equal(r.status, 431);
    e2e_conn_close(&g_conn);
    /* A long-poll whose client leaves, and a request cut in the middle. */
    e2e_conn_t gone;
    assert_int_equal(e2e_conn_open(&gone, port), 0);
    assert_int_equal(e2e_send_request(&gone, "POST", "/queues/gone/claim", NULL,
                                      "{\"wait_seconds\":2}", 18), 0);
    long long deadline = e2e_mono_ms() + 10000;
    while (!wake_subscribed(g_shared, pfx, "gone")) {   /* parked */
        if (e2e_mono_ms() > deadline) fail_msg("the long-poll never parked");
        e2e_pause_ms(20);
    }
    e2e_conn_close(&gone);
    int cut = e2e_connect(port);
    assert_true(cut >= 0);
    static const char partial[] =
        "POST /queues/v/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"pay";
    assert_int_equal(e2e_send_all(cut, partial, sizeof partial - 1), 0);
    close(cut);
    /* The server is still fine. */
    http(port, &r, "GET", "/healthz", NULL);
    e2e_expect_json(&r, 200);
    e2e_response_free(&r);
    e2e_conn_close(&g_conn);

    long long stop_at = e2e_mono_ms();
    int status = e2e_daemon_stop(d, SIGTERM, 60000);
    long long stop_ms = e2e_mono_ms() - stop_at;
    printf("# measured valgrind: SIGTERM to exit %lld ms, exit status %d\n", stop_ms, status);
    if (status != 0) {
        char *text = fx_read_file(log);
        printf("%s\n", text ? text : "(no log)");
        free(text);
        fail_msg("retryd under valgrind: %s %d (99: valgrind found errors or leaks; log above)",
                 status < 0 ? "did not exit within 60 s," : "exit status", status);
    }
    /* It really ran under valgrind, and valgrind found nothing. */
    char *text = fx_read_file(log);
    assert_non_null(text);
    bool memcheck = strstr(text, "Memcheck") != NULL;
    bool clean = strstr(text, "ERROR SUMMARY: 0 errors") != NULL;
    free(text);
    assert_true(memcheck);
    assert_true(clean);
    /* Redis holds what the requests did. */
    char cur[32];
    assert_string_equal(e2e_message_field(g_shared, e2e_fmt("%s:{v}", pfx), 1, "status", cur,
                                          sizeof cur), "succeeded");
    assert_int_equal(rq_int(g_shared, "EXISTS %s:{v}:m:4", pfx), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, test_setup, test_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_header_over_16k_is_431),
        T(test_transfer_encoding_and_expect),
        T(test_slowloris_is_dropped_others_served),
        T(test_max_connections),
        T(test_idle_keep_alive_is_closed),
        T(test_auth_bearer_token),
        T(test_default_bind_is_loopback),
        T(test_redis_acl_user),
        T(test_bad_redis_url_password_not_echoed),
        T(test_unexpected_reply_shapes),
        T(test_redis_paused_sigstop),
        T(test_read_in_flight_when_link_drops),
        T(test_settle_claim_line_when_link_drops),
    T(test_lost_claim_lease_still_expires),
        T(test_lost_claims_are_handed_back),
        T(test_redis_debug_sleep),
        T(test_redis_restarted_and_flushed),
        T(test_notification_link_killed),
        T(test_kill9_redis_under_load_loses_nothing),
        T(test_kill9_retryd_leases_come_back),
        T(test_kill9_retryd_under_load),
        T(test_sigterm_with_requests_in_flight),
        T(test_half_closed_clients_get_their_answers),
        T(test_pipelined_long_polls_after_half_close),
        T(test_claim_whose_client_resets_is_handed_back),
        T(test_lost_hand_back_is_sent_again),
        T(test_settle_claim_whose_client_resets_is_handed_back),
        T(test_replay_all_stopped_part_way_says_how_many),
        T(test_redrive_cut_and_repeated_moves_each_letter_once),
        T(test_durability_warnings_at_startup),
        T(test_valgrind_clean_shutdown),
    };
    return cmocka_run_group_tests_name("faults", tests, group_setup, group_teardown);
}
