/* faults_common.h - what the test_faults_*.c suites share: fault injection
 * against the real build/retryd (docs/reference.md "Errors"). Every test
 * asserts what the client saw and what Redis holds afterwards. Here: the
 * group's state and its group and per-test setup, daemon starts, requests and
 * what they answer, reads of what Redis holds, and the thread-safe client
 * steps (the cmocka-free helpers are in faults_support.h and e2e_support.h).
 *
 * Needs RETRYD_TEST_REDIS_PORT and RETRYD_BIN (scripts/test.sh sets both).
 * Simple cases use the runner's Redis with a key prefix of their own; every
 * destructive case (SIGSTOP, kill -9, restart, ACL, DEBUG SLEEP) starts its
 * own redis-server on a free port in a temp dir. The per-test teardown kills
 * and reaps every process the test started (and only those), and removes the
 * temp dirs, whether the test passed or not. Lines starting with "# measured"
 * report timings. A suite defines FAULTS_SUITE (its name, for messages) and
 * includes this first: it includes cmocka.h itself. */
#ifndef RETRYD_FAULTS_COMMON_H
#define RETRYD_FAULTS_COMMON_H

#ifndef FAULTS_SUITE
#error "a suite defines FAULTS_SUITE, its name, before it includes faults_common.h"
#endif

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

static inline const char *tmp_path(const char *name)
{
    return e2e_fmt("%s/%s", g_tmp, name);
}

/* ------------------------------------------------------------------------ */
/* Setup and teardown                                                       */
/* ------------------------------------------------------------------------ */

static inline int group_setup(void **state)
{
    (void)state;
    rd_alloc_init();
    signal(SIGPIPE, SIG_IGN);
    return e2e_suite_env(FAULTS_SUITE, 5, &g_bin, &g_shared_port, &g_shared);
}

static inline int group_teardown(void **state)
{
    (void)state;
    if (g_shared) redisFree(g_shared);
    g_shared = NULL;
    return 0;
}

static inline int test_setup(void **state)
{
    (void)state;
    g_conn.fd = -1;
    if (fx_mkdtemp(g_tmp, sizeof g_tmp, "faults") != 0) {
        fprintf(stderr, FAULTS_SUITE ": cannot create a temp dir\n");
        return -1;
    }
    return 0;
}

/* Whatever the test left: daemons, the private Redis (woken first if it was
 * stopped), connections, temp files. */
static inline int test_teardown(void **state)
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
static inline int start_retryd(e2e_daemon_t *d, const char *log, const char *url, const char *prefix,
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
        fprintf(stderr, FAULTS_SUITE ": retryd on port %d did not become ready; its log:\n",
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
static inline void stop_retryd(e2e_daemon_t *d)
{
    int status = e2e_daemon_stop(d, SIGTERM, E2E_STOP_TIMEOUT_MS);
    if (status != 0)
        fail_msg("retryd after SIGTERM: %s %d", status < 0 ? "killed," : "exit", status);
}

/* ------------------------------------------------------------------------ */
/* Requests and what they answer                                            */
/* ------------------------------------------------------------------------ */

static inline int read_fresh(e2e_conn_t *c, e2e_response_t *r)
{
    e2e_response_free(r);
    return e2e_read_response(c, r);
}

static inline void http(int port, e2e_response_t *r, const char *method, const char *path,
                 const char *body)
{
    e2e_http_on(&g_conn, port, r, method, path, NULL, body, body ? strlen(body) : 0);
}

/* A 503 of either kind (backend-unavailable: not sent; outcome-unknown: sent,
 * link lost) with a positive Retry-After. Returns true for outcome-unknown. */
static inline bool expect_503(const e2e_response_t *r)
{
    if (r->status != 503) fail_msg("expected 503, got %d: %s", r->status, r->body);
    bool unknown = r->body && strstr(r->body, "/problems/outcome-unknown") != NULL;
    e2e_expect_problem(r, 503, unknown ? "outcome-unknown" : "backend-unavailable", NULL);
    if (r->retry_after[0] == '\0' || atoi(r->retry_after) < 1)
        fail_msg("Retry-After \"%s\" is not a positive number of seconds", r->retry_after);
    return unknown;
}

/* The problem slug of a response ("" when it is not a problem). */
static inline void slug_of(const e2e_response_t *r, char *out, size_t cap)
{
    out[0] = '\0';
    const char *t = r->json ? rd_json_string(rd_json_get(r->json, "type")) : NULL;
    if (t && strncmp(t, "/problems/", 10) == 0) snprintf(out, cap, "%s", t + 10);
}

/* ------------------------------------------------------------------------ */
/* What Redis holds                                                         */
/* ------------------------------------------------------------------------ */

static inline long long rq_int(redisContext *c, const char *format, ...)
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

/* Waits (up to 10 s) until c is the only client of its Redis: a killed
 * daemon's connections are gone, and so are the commands it had sent, which
 * Redis runs from its socket buffer before it sees the close. Reading the
 * data before then races with them. */
static inline void rq_wait_sole_client(redisContext *c)
{
    long long deadline = e2e_mono_ms() + 10000;
    for (;;) {
        redisReply *r = redisCommand(c, "CLIENT LIST");
        e2e_reply_or_fail(c, r);
        int lines = 0;
        for (const char *p = r->str; p && *p; p++) lines += *p == '\n';
        freeReplyObject(r);
        if (lines <= 1) return;
        if (e2e_mono_ms() > deadline) fail_msg("redis: %d clients are still connected", lines);
        e2e_pause_ms(5);
    }
}

/* One message hash as Redis holds it. */
typedef struct stored {
    long long id;
    char *payload;                /* malloc'd */
    char status[16];
    char last_error[64];
    long long retry_count;
} stored_t;

static inline void stored_free(stored_t *m, size_t n)
{
    for (size_t i = 0; i < n; i++) free(m[i].payload);
    free(m);
}

static inline int by_id(const void *a, const void *b)
{
    long long x = ((const stored_t *)a)->id, y = ((const stored_t *)b)->id;
    return x < y ? -1 : x > y;
}

/* Every message "<prefix>:{<q>}:m:*" (SCAN, then the library's get: the
 * record's layout is the library's, docs/storage.md), sorted by id. */
static inline stored_t *load_messages(redisContext *c, const char *prefix, const char *q, size_t *count)
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

static inline const stored_t *find_id(const stored_t *m, size_t n, long long id)
{
    stored_t key = { .id = id };
    return bsearch(&key, m, n, sizeof *m, by_id);
}

/* How many stored messages carry this payload. */
static inline size_t payload_count(const stored_t *m, size_t n, const char *payload)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += strcmp(m[i].payload, payload) == 0;
    return k;
}

static inline int by_payload(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* No payload appears twice among the stored messages. */
static inline void expect_unique_payloads(const stored_t *m, size_t n)
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

static inline bool member_of_list(redisContext *c, const char *key, long long id)
{
    redisReply *r = e2e_rcmd(c, "LPOS %s %lld", key, id);
    bool in = r->type == REDIS_REPLY_INTEGER;
    freeReplyObject(r);
    return in;
}

static inline bool member_of_zset(redisContext *c, const char *key, long long id)
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
static inline void expect_indexes_consistent(redisContext *c, const char *prefix, const char *q,
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
static inline enum outcome try_enqueue(e2e_conn_t *c, int port, const char *q, const char *payload,
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

static inline sent_t *sent_add(sent_log_t *l)
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
static inline void expect_enqueues_accounted(const sent_log_t *log, const stored_t *m, size_t n,
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
/* 3. Redis faults                                                           */
/* ========================================================================= */

/* True when someone (a parked long-poll) listens on q's wake channel. */
static inline bool wake_subscribed(redisContext *c, const char *prefix, const char *q)
{
    redisReply *x = e2e_rcmd(c, "PUBSUB NUMSUB %s:{%s}:wake", prefix, q);
    long long subs = x->elements == 2 ? x->element[1]->integer : 0;
    freeReplyObject(x);
    return subs >= 1;
}

/* Message id is pending with no failure: retry_count 0, no history. */
static inline void expect_untouched_pending(int port, const char *q, long long id)
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

static inline void *loader_main(void *arg)
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

static inline int sum_created(loader_t *w)
{
    int n = 0;
    for (int i = 0; i < LOADERS; i++) n += atomic_load(&w[i].created);
    return n;
}

/* ========================================================================= */
/* 7. valgrind: no leak after a graceful shutdown                            */
/* ========================================================================= */

#define T(fn) cmocka_unit_test_setup_teardown(fn, test_setup, test_teardown)

#endif
