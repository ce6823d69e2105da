/* test_lua.c - integration tests of the Redis Functions library (lua/) against
 * a real redis-server: every function, called with FCALL exactly as the daemon
 * and retryctl call it.
 *
 * Needs RETRYD_TEST_REDIS_PORT (a throwaway server on 127.0.0.1) and
 * RETRYD_TEST_LUA (build/retryd.lua); scripts/test.sh sets both. Each test
 * works on a queue of its own, so tests do not depend on each other or on the
 * order they run in. Time never comes from this host: waits poll Redis TIME. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define END ((const char *)NULL)

/* tick replies {promoted, reclaimed, expired, next_in_ms, ready}. */
enum { TICK_N = 5 };

static redisContext *g_redis;

/* ------------------------------------------------------------------------ */
/* Queues and keys                                                          */
/* ------------------------------------------------------------------------ */

typedef struct {
    char name[96];
    char base[128]; /* "retryd:{<name>}": KEYS[1] of every function */
} queue_t;

/* A queue name no other test (or earlier run) uses. */
static void queue_init(queue_t *q, const char *tag)
{
    static unsigned serial;
    snprintf(q->name, sizeof q->name, "%s-%ld-%u", tag, (long)getpid(), ++serial);
    snprintf(q->base, sizeof q->base, "retryd:{%s}", q->name);
}

/* Small strings that live until 32 more are made: enough for one call. */
static char *scratch(void)
{
    static char ring[32][192];
    static unsigned next;
    return ring[next++ % 32];
}

/* "<base>:<suffix>", e.g. qkey(q, "ready"). */
static const char *qkey(const queue_t *q, const char *suffix)
{
    char *s = scratch();
    snprintf(s, 192, "%s:%s", q->base, suffix);
    return s;
}

static const char *mkey(const queue_t *q, long long id)
{
    char *s = scratch();
    snprintf(s, 192, "%s:m:%lld", q->base, id);
    return s;
}

/* An integer as a command argument. */
static const char *num(long long v)
{
    char *s = scratch();
    snprintf(s, 192, "%lld", v);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                 */
/* ------------------------------------------------------------------------ */

#define MAX_ARGV 32

static redisReply *command_argv(int argc, const char **argv, const size_t *lens)
{
    redisReply *r = redisCommandArgv(g_redis, argc, argv, lens);
    if (r == NULL)
        fail_msg("redis: %s", g_redis->errstr);
    return r;
}

/* Any command from NUL-terminated strings, END-terminated. Caller frees. */
static redisReply *rcmd(const char *first, ...)
{
    const char *argv[MAX_ARGV];
    size_t lens[MAX_ARGV];
    int argc = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a != NULL; a = va_arg(ap, const char *)) {
        assert_true(argc < MAX_ARGV);
        argv[argc] = a;
        lens[argc++] = strlen(a);
    }
    va_end(ap);
    return command_argv(argc, argv, lens);
}

/* FCALL fn with KEYS[1] = the queue's base and, when id >= 0, KEYS[2] = the
 * message key and ARGV[1] = id, then nargs more ARGV of lens[i] bytes each
 * (strlen when lens is NULL). Binary-safe. Caller frees the reply. */
static redisReply *fcall_bin(const char *fn, const queue_t *q, long long id, size_t nargs,
                             const char *const *args, const size_t *lens)
{
    size_t cap = nargs + 6, argc = 0;
    const char **argv = calloc(cap, sizeof *argv);
    size_t *argvlen = calloc(cap, sizeof *argvlen);
    assert_non_null(argv);
    assert_non_null(argvlen);
#define PUSH(s, n) do { argv[argc] = (s); argvlen[argc++] = (n); } while (0)
    PUSH("FCALL", 5);
    PUSH(fn, strlen(fn));
    PUSH(id >= 0 ? "2" : "1", 1);
    PUSH(q->base, strlen(q->base));
    if (id >= 0) {
        const char *k = mkey(q, id), *ids = num(id);
        PUSH(k, strlen(k));
        PUSH(ids, strlen(ids));
    }
    for (size_t i = 0; i < nargs; i++)
        PUSH(args[i], lens ? lens[i] : strlen(args[i]));
#undef PUSH
    redisReply *r = redisCommandArgv(g_redis, (int)argc, argv, argvlen);
    free(argv);
    free(argvlen);
    if (r == NULL)
        fail_msg("redis: %s", g_redis->errstr);
    return r;
}

/* fcall_bin with NUL-terminated ARGV, END-terminated. */
static redisReply *fcall(const char *fn, const queue_t *q, long long id, ...)
{
    const char *args[MAX_ARGV];
    size_t n = 0;
    va_list ap;
    va_start(ap, id);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL;) {
        assert_true(n < MAX_ARGV);
        args[n++] = a;
    }
    va_end(ap);
    return fcall_bin(fn, q, id, n, args, NULL);
}

/* ------------------------------------------------------------------------ */
/* Messages: a flat {"id", id, field, value, ...} array, copied             */
/* ------------------------------------------------------------------------ */

#define MAX_FIELDS 20
#define MAX_VALUE 256

typedef struct {
    char name[32];
    char value[MAX_VALUE]; /* NUL-terminated copy; may hold NULs inside */
    size_t len;
} field_t;

typedef struct {
    long long id;
    int nfields;
    field_t f[MAX_FIELDS];
} msg_t;

static long long parse_int(const char *s, size_t len, const char *what)
{
    char *end = NULL;
    if (len == 0)
        fail_msg("%s: empty, not an integer", what);
    long long v = strtoll(s, &end, 10);
    if (end != s + len)
        fail_msg("%s: \"%s\" is not an integer", what, s);
    return v;
}

static void msg_parse(const redisReply *r, msg_t *m)
{
    memset(m, 0, sizeof *m);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_true(r->elements >= 2 && r->elements % 2 == 0);
    assert_int_equal(r->element[0]->type, REDIS_REPLY_STRING);
    assert_string_equal(r->element[0]->str, "id");
    const redisReply *id = r->element[1];
    /* enqueue replies with the INCR result (integer), the others with the id
     * they were given or read (string): accept both. */
    if (id->type == REDIS_REPLY_INTEGER)
        m->id = id->integer;
    else if (id->type == REDIS_REPLY_STRING)
        m->id = parse_int(id->str, id->len, "id");
    else
        fail_msg("id has reply type %d", id->type);
    for (size_t i = 2; i < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        assert_int_equal(k->type, REDIS_REPLY_STRING);
        assert_int_equal(v->type, REDIS_REPLY_STRING);
        assert_true(m->nfields < MAX_FIELDS);
        assert_true(k->len < sizeof m->f[0].name);
        assert_true(v->len < MAX_VALUE);
        field_t *f = &m->f[m->nfields++];
        memcpy(f->name, k->str, k->len + 1);
        memcpy(f->value, v->str, v->len);
        f->value[v->len] = '\0';
        f->len = v->len;
    }
}

static const field_t *msg_field(const msg_t *m, const char *name)
{
    for (int i = 0; i < m->nfields; i++)
        if (strcmp(m->f[i].name, name) == 0)
            return &m->f[i];
    return NULL;
}

static const char *msg_str(const msg_t *m, const char *name)
{
    const field_t *f = msg_field(m, name);
    if (f == NULL)
        fail_msg("message %lld has no field %s", m->id, name);
    return f->value;
}

static long long msg_int(const msg_t *m, const char *name)
{
    const field_t *f = msg_field(m, name);
    if (f == NULL)
        fail_msg("message %lld has no field %s", m->id, name);
    return parse_int(f->value, f->len, name);
}

static void assert_no_field(const msg_t *m, const char *name)
{
    if (msg_field(m, name) != NULL)
        fail_msg("message %lld should have no %s, has \"%s\"", m->id, name,
                 msg_field(m, name)->value);
}

/* ------------------------------------------------------------------------ */
/* Reply shapes (each takes ownership of the reply and frees it). Each is a */
/* macro over an _at function so a failure names the test's line.           */
/* ------------------------------------------------------------------------ */

/* Fails the current test at file:line with a message. */
#define FAIL_AT(file, line, ...) do { \
        print_error("ERROR: " __VA_ARGS__); \
        print_error("\n"); \
        _fail(file, line); \
    } while (0)

static const char *reply_desc(const redisReply *r)
{
    static char buf[160];
    switch (r->type) {
    case REDIS_REPLY_ERROR: snprintf(buf, sizeof buf, "error \"%s\"", r->str); break;
    case REDIS_REPLY_STRING: snprintf(buf, sizeof buf, "string \"%.100s\"", r->str); break;
    case REDIS_REPLY_INTEGER: snprintf(buf, sizeof buf, "integer %lld", r->integer); break;
    case REDIS_REPLY_NIL: snprintf(buf, sizeof buf, "nil"); break;
    case REDIS_REPLY_ARRAY:
        if (r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING)
            snprintf(buf, sizeof buf, "array of %zu starting \"%.60s\"", r->elements, r->element[0]->str);
        else
            snprintf(buf, sizeof buf, "array of %zu", r->elements);
        break;
    default: snprintf(buf, sizeof buf, "reply type %d", r->type); break;
    }
    return buf;
}

static bool has_code(const redisReply *r, const char *code)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
           r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, code) == 0;
}

/* {code} or, with detail, {code, detail}. */
#define expect_code(r, code, detail) expect_code_at((r), (code), (detail), __FILE__, __LINE__)
static void expect_code_at(redisReply *r, const char *code, const char *detail,
                           const char *file, int line)
{
    bool good = has_code(r, code);
    if (good && detail != NULL)
        good = r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING &&
               strcmp(r->element[1]->str, detail) == 0;
    else if (good)
        good = r->elements == 1;
    const char *desc = reply_desc(r);
    freeReplyObject(r);
    if (!good)
        FAIL_AT(file, line, "expected {\"%s\"%s%s%s}, got %s", code, detail ? ", \"" : "",
                detail ? detail : "", detail ? "\"" : "", desc);
}

/* {code, message}; expect_ok_msg for code "ok". */
#define expect_msg(r, code, m) expect_msg_at((r), (code), (m), __FILE__, __LINE__)
#define expect_ok_msg(r, m) expect_msg_at((r), "ok", (m), __FILE__, __LINE__)
static void expect_msg_at(redisReply *r, const char *code, msg_t *m, const char *file, int line)
{
    if (!has_code(r, code) || r->elements != 2) {
        const char *desc = reply_desc(r);
        freeReplyObject(r);
        FAIL_AT(file, line, "expected {\"%s\", message}, got %s", code, desc);
    }
    msg_parse(r->element[1], m);
    freeReplyObject(r);
}

/* enqueue's {"ok", id, now_ms}; then the stored message is read with get
 * into m, so the tests below check what Redis holds. */
#define expect_enqueued(q, r, m) expect_enqueued_at((q), (r), (m), __FILE__, __LINE__)
static void expect_enqueued_at(const queue_t *q, redisReply *r, msg_t *m, const char *file,
                               int line)
{
    if (!has_code(r, "ok") || r->elements != 3 || r->element[1]->type != REDIS_REPLY_INTEGER ||
        r->element[2]->type != REDIS_REPLY_INTEGER) {
        const char *desc = reply_desc(r);
        freeReplyObject(r);
        FAIL_AT(file, line, "expected {\"ok\", id, now_ms}, got %s", desc);
    }
    long long id = r->element[1]->integer, now = r->element[2]->integer;
    freeReplyObject(r);
    expect_msg_at(fcall("get", q, id, END), "ok", m, file, line);
    if (msg_int(m, "created_at") != now)
        FAIL_AT(file, line, "enqueue said now=%lld, the message was created at %lld", now,
                msg_int(m, "created_at"));
}

/* {"ok", message...}: returns how many (at most max). */
#define expect_ok_msgs(r, out, max) expect_ok_msgs_at((r), (out), (max), __FILE__, __LINE__)
static size_t expect_ok_msgs_at(redisReply *r, msg_t *out, size_t max, const char *file, int line)
{
    if (!has_code(r, "ok") || r->elements - 1 > max) {
        const char *desc = reply_desc(r);
        freeReplyObject(r);
        FAIL_AT(file, line, "expected {\"ok\", up to %zu messages}, got %s", max, desc);
    }
    size_t n = r->elements - 1;
    for (size_t i = 0; i < n; i++)
        msg_parse(r->element[i + 1], &out[i]);
    freeReplyObject(r);
    return n;
}

#define expect_error(r) expect_error_at((r), __FILE__, __LINE__)
static void expect_error_at(redisReply *r, const char *file, int line)
{
    const char *desc = reply_desc(r);
    bool good = r->type == REDIS_REPLY_ERROR;
    freeReplyObject(r);
    if (!good)
        FAIL_AT(file, line, "expected an error reply, got %s", desc);
}

/* An array of n integers. */
#define expect_ints(r, n, out) expect_ints_at((r), (n), (out), __FILE__, __LINE__)
static void expect_ints_at(redisReply *r, size_t n, long long *out, const char *file, int line)
{
    bool good = r->type == REDIS_REPLY_ARRAY && r->elements == n;
    for (size_t i = 0; good && i < n; i++) {
        good = r->element[i]->type == REDIS_REPLY_INTEGER;
        if (good)
            out[i] = r->element[i]->integer;
    }
    const char *desc = reply_desc(r);
    freeReplyObject(r);
    if (!good)
        FAIL_AT(file, line, "expected an array of %zu integers, got %s", n, desc);
}

/* An array of n strings, each as expected. */
#define expect_strings(r, n, want) expect_strings_at((r), (n), (want), __FILE__, __LINE__)
static void expect_strings_at(redisReply *r, size_t n, const char *const *want,
                              const char *file, int line)
{
    char desc[256];
    snprintf(desc, sizeof desc, "%s", reply_desc(r));
    bool good = r->type == REDIS_REPLY_ARRAY && r->elements == n;
    size_t bad_at = n;
    for (size_t i = 0; good && i < n; i++) {
        good = r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, want[i]) == 0;
        if (!good) {
            bad_at = i;
            snprintf(desc, sizeof desc, "%s at %zu", reply_desc(r->element[i]), i);
        }
    }
    freeReplyObject(r);
    if (!good)
        FAIL_AT(file, line, "expected %zu strings (\"%s\" at %zu), got %s", n,
                bad_at < n ? want[bad_at] : "", bad_at, desc);
}

/* ------------------------------------------------------------------------ */
/* Redis state                                                              */
/* ------------------------------------------------------------------------ */

static long long redis_now_ms(void)
{
    redisReply *r = rcmd("TIME", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* Waits (bounded) until Redis TIME has reached t_ms. */
static void wait_until_ms(long long t_ms)
{
    const struct timespec pause = { 0, 1000 * 1000 };
    for (int i = 0; i < 5000; i++) {
        if (redis_now_ms() >= t_ms)
            return;
        nanosleep(&pause, NULL);
    }
    fail_msg("Redis TIME did not reach %lld within 5 s", t_ms);
}

/* A ZSET member's score, -1 when absent. */
static long long zscore(const char *key, long long id)
{
    redisReply *r = rcmd("ZSCORE", key, num(id), END);
    long long v = -1;
    if (r->type == REDIS_REPLY_STRING)
        v = (long long)strtod(r->str, NULL);
    else
        assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    return v;
}

static long long int_reply(redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("redis error: %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static long long llen(const char *key) { return int_reply(rcmd("LLEN", key, END)); }
static long long zcard(const char *key) { return int_reply(rcmd("ZCARD", key, END)); }
static long long exists(const char *key) { return int_reply(rcmd("EXISTS", key, END)); }

/* A lifetime counter of the queue, 0 when never counted. */
static long long counter(const queue_t *q, const char *name)
{
    redisReply *r = rcmd("HGET", qkey(q, "stats"), name, END);
    long long v = 0;
    if (r->type == REDIS_REPLY_STRING)
        v = parse_int(r->str, r->len, name);
    else
        assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    return v;
}

static void hset(const queue_t *q, long long id, const char *field, const char *value)
{
    int_reply(rcmd("HSET", mkey(q, id), field, value, END));
}

/* Makes a scheduled id due now (as if its retry_after had passed). */
static void make_due(const queue_t *q, long long id)
{
    assert_int_equal(int_reply(rcmd("ZADD", qkey(q, "scheduled"), "XX", "CH", "0", num(id), END)), 1);
}

/* ------------------------------------------------------------------------ */
/* Function wrappers                                                        */
/* ------------------------------------------------------------------------ */

static long long enqueue_ok(const queue_t *q, const char *payload, int max_retries, long long delay_ms)
{
    msg_t m;
    expect_enqueued(q, fcall("enqueue", q, -1, payload, num(max_retries), num(delay_ms), END), &m);
    return m.id;
}

/* Claims exactly one message; fails the test when none comes back. */
#define claim_one(q, lease_ms, m) claim_one_at((q), (lease_ms), (m), __FILE__, __LINE__)
static void claim_one_at(const queue_t *q, long long lease_ms, msg_t *m, const char *file, int line)
{
    if (expect_ok_msgs_at(fcall("claim", q, -1, num(lease_ms), "1", END), m, 1, file, line) != 1)
        FAIL_AT(file, line, "claim returned no message");
}

#define expect_nothing_to_claim(q) expect_code_at(fcall("claim", (q), -1, "30000", "1", END), \
                                                  "ok", NULL, __FILE__, __LINE__)

static void fail_ok(const queue_t *q, long long id, const char *error, const char *retryable,
                    long long retry_after_ms, msg_t *m)
{
    expect_ok_msg(fcall("fail", q, id, "", error, retryable, num(retry_after_ms), END), m);
}

/* Enqueues one message with max_retries 1 and kills it by one failure. */
static long long make_dead(const queue_t *q, const char *error)
{
    msg_t m;
    long long id = enqueue_ok(q, "x", 1, 0);
    claim_one(q, 60000, &m);
    assert_int_equal(m.id, id);
    fail_ok(q, id, error, "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    return id;
}

/* One page of list: returns how many messages; ids, total and next cursor
 * (copied to next, "" at the end) out. */
static size_t list_page(const queue_t *q, const char *status, int limit, const char *cursor,
                        long long *ids, size_t max_ids, long long *total, char *next, size_t next_size)
{
    redisReply *r = fcall("list", q, -1, status, num(limit), cursor, END);
    if (!has_code(r, "ok"))
        fail_msg("list %s cursor \"%s\": %s", status, cursor, reply_desc(r));
    assert_true(r->elements >= 3);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_INTEGER);
    *total = r->element[1]->integer;
    assert_int_equal(r->element[2]->type, REDIS_REPLY_STRING);
    assert_true(r->element[2]->len < next_size);
    memcpy(next, r->element[2]->str, r->element[2]->len + 1);
    size_t n = r->elements - 3;
    assert_true(n <= max_ids);
    assert_true(n <= (size_t)limit);
    for (size_t i = 0; i < n; i++) {
        msg_t m;
        msg_parse(r->element[3 + i], &m);
        if (status[0] != '\0')
            assert_string_equal(msg_str(&m, "status"), status);
        ids[i] = m.id;
    }
    freeReplyObject(r);
    return n;
}

/* Walks a whole listing with pages of `limit`; returns how many ids. */
static size_t list_all(const queue_t *q, const char *status, int limit, long long *ids,
                       size_t max_ids, long long want_total)
{
    char cursor[128] = "", next[128];
    size_t n = 0;
    for (int page = 0; page < 1000; page++) {
        long long total;
        size_t got = list_page(q, status, limit, cursor, ids + n, max_ids - n, &total, next, sizeof next);
        assert_int_equal(total, want_total);
        n += got;
        if (next[0] == '\0')
            return n;
        assert_string_not_equal(next, cursor);
        strcpy(cursor, next);
    }
    fail_msg("listing of %s did not end", status);
    return 0;
}

#define assert_ids(got, n, want, want_n) assert_ids_at((got), (n), (want), (want_n), __FILE__, __LINE__)
static void assert_ids_at(const long long *got, size_t n, const long long *want, size_t want_n,
                          const char *file, int line)
{
    char a[256] = "", b[256] = "";
    for (size_t i = 0; i < n && strlen(a) < 200; i++)
        snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", i ? "," : "", got[i]);
    for (size_t i = 0; i < want_n && strlen(b) < 200; i++)
        snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", i ? "," : "", want[i]);
    if (strcmp(a, b) != 0)
        FAIL_AT(file, line, "ids [%s], expected [%s]", a, b);
}

/* ------------------------------------------------------------------------ */
/* enqueue                                                                  */
/* ------------------------------------------------------------------------ */

static void test_enqueue_ids_and_fields(void **state)
{
    queue_t q;
    queue_init(&q, "enqueue");
    long long t0 = redis_now_ms();
    for (long long i = 1; i <= 3; i++) {
        msg_t m;
        expect_enqueued(&q, fcall("enqueue", &q, -1, "job", "4", "0", END), &m);
        assert_int_equal(m.id, i);
        assert_string_equal(msg_str(&m, "payload"), "job");
        assert_string_equal(msg_str(&m, "status"), "pending");
        assert_int_equal(msg_int(&m, "retry_count"), 0);
        assert_int_equal(msg_int(&m, "max_retries"), 4);
        assert_int_equal(msg_int(&m, "created_at"), msg_int(&m, "updated_at"));
        assert_in_range(msg_int(&m, "created_at"), t0, redis_now_ms());
        assert_no_field(&m, "retry_after");
        assert_no_field(&m, "last_error");
        assert_no_field(&m, "lease_token");
        assert_no_field(&m, "lease_expires_at");
    }
    assert_int_equal(llen(qkey(&q, "ready")), 3);
    assert_int_equal(zcard(qkey(&q, "scheduled")), 0);
    assert_int_equal(counter(&q, "enqueued"), 3);

    /* Ids are per queue. */
    queue_t other;
    queue_init(&other, "enqueue-other");
    assert_int_equal(enqueue_ok(&other, "job", 3, 0), 1);
}

static void test_enqueue_payload_binary_safe(void **state)
{
    static const char payload[] = "a\0b\"c'\n\r\\{q}:%s\x01\xff\0end\"";
    const size_t n = sizeof payload - 1;
    const char *args[] = { payload, "3", "0" };
    const size_t lens[] = { n, 1, 1 };
    queue_t q;
    queue_init(&q, "binary");
    msg_t m;

    expect_enqueued(&q, fcall_bin("enqueue", &q, -1, 3, args, lens), &m);
    const field_t *f = msg_field(&m, "payload");
    assert_non_null(f);
    assert_int_equal(f->len, n);
    assert_memory_equal(f->value, payload, n);

    expect_ok_msg(fcall("get", &q, m.id, END), &m);
    f = msg_field(&m, "payload");
    assert_non_null(f);
    assert_int_equal(f->len, n);
    assert_memory_equal(f->value, payload, n);

    claim_one(&q, 30000, &m);
    f = msg_field(&m, "payload");
    assert_non_null(f);
    assert_int_equal(f->len, n);
    assert_memory_equal(f->value, payload, n);

    /* The empty payload is a payload too. */
    expect_enqueued(&q, fcall("enqueue", &q, -1, "", "3", "0", END), &m);
    assert_non_null(msg_field(&m, "payload"));
    assert_int_equal(msg_field(&m, "payload")->len, 0);
}

static void test_enqueue_delayed(void **state)
{
    queue_t q;
    queue_init(&q, "delayed");
    msg_t m;
    expect_enqueued(&q, fcall("enqueue", &q, -1, "later", "3", "60000", END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after"), msg_int(&m, "created_at") + 60000);
    assert_int_equal(zscore(qkey(&q, "scheduled"), m.id), msg_int(&m, "retry_after"));
    assert_int_equal(llen(qkey(&q, "ready")), 0);
    expect_nothing_to_claim(&q);

    long long r[2];
    expect_ints(fcall("promote", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 0);
    assert_in_range(r[1], 1, 60000);
    expect_nothing_to_claim(&q);

    /* Once due, it is claimable. */
    make_due(&q, m.id);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 1);
}

static void test_enqueue_bad_arguments(void **state)
{
    queue_t q;
    queue_init(&q, "badenq");
    static const char *const bad_max[] = { "0", "11", "x", "1.5", "", "-3" };
    for (size_t i = 0; i < sizeof bad_max / sizeof bad_max[0]; i++)
        expect_error(fcall("enqueue", &q, -1, "p", bad_max[i], "0", END));
    expect_error(fcall("enqueue", &q, -1, "p", "3", "-1", END));
    expect_error(fcall("enqueue", &q, -1, "p", "3", "soon", END));
    expect_error(fcall("enqueue", &q, -1, END));
    /* Nothing was created, not even an id. */
    assert_int_equal(exists(qkey(&q, "seq")), 0);
    assert_int_equal(counter(&q, "enqueued"), 0);

    /* Both ends of the range are fine. */
    assert_int_equal(enqueue_ok(&q, "p", 1, 0), 1);
    assert_int_equal(enqueue_ok(&q, "p", 10, 0), 2);
}

/* Numbers that parse but are not finite must not become timestamps. */
static void test_numeric_arguments_reject_infinity(void **state)
{
    queue_t q;
    queue_init(&q, "inf");
    expect_error(fcall("enqueue", &q, -1, "p", "3", "inf", END));
    enqueue_ok(&q, "p", 3, 0);
    expect_error(fcall("claim", &q, -1, "inf", "1", END));
    msg_t m;
    claim_one(&q, 30000, &m);
    expect_error(fcall("fail", &q, m.id, "", "e", "1", "inf", END));
    expect_error(fcall("extend", &q, m.id, "", "inf", END));
}

/* ------------------------------------------------------------------------ */
/* claim                                                                    */
/* ------------------------------------------------------------------------ */

static void test_claim_fifo_and_lease(void **state)
{
    queue_t q;
    queue_init(&q, "fifo");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    for (long long want = 1; want <= 3; want++) {
        msg_t m;
        long long before = redis_now_ms();
        claim_one(&q, 30000, &m);
        assert_int_equal(m.id, want);
        assert_string_equal(msg_str(&m, "status"), "processing");
        assert_true(msg_field(&m, "lease_token")->len > 0);
        assert_in_range(msg_int(&m, "updated_at"), before, redis_now_ms());
        assert_int_equal(msg_int(&m, "lease_expires_at"), msg_int(&m, "updated_at") + 30000);
        assert_int_equal(zscore(qkey(&q, "processing"), m.id), msg_int(&m, "lease_expires_at"));
    }
    expect_nothing_to_claim(&q);
    assert_int_equal(counter(&q, "claimed"), 3);
}

static void test_claim_count(void **state)
{
    queue_t q;
    queue_init(&q, "count");
    for (int i = 0; i < 5; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m[8];
    size_t n = expect_ok_msgs(fcall("claim", &q, -1, "45000", "3", END), m, 8);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(m[i].id, (long long)i + 1);
        assert_string_equal(msg_str(&m[i], "status"), "processing");
        assert_int_equal(msg_int(&m[i], "lease_expires_at"), msg_int(&m[i], "updated_at") + 45000);
        assert_int_equal(zscore(qkey(&q, "processing"), m[i].id), msg_int(&m[i], "lease_expires_at"));
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(msg_str(&m[i], "lease_token"), msg_str(&m[j], "lease_token"));
    }
    /* Fewer left than asked for: what is there. */
    n = expect_ok_msgs(fcall("claim", &q, -1, "45000", "100", END), m, 8);
    assert_int_equal(n, 2);
    assert_int_equal(m[0].id, 4);
    assert_int_equal(m[1].id, 5);
    assert_string_not_equal(msg_str(&m[0], "lease_token"), msg_str(&m[1], "lease_token"));
    expect_code(fcall("claim", &q, -1, "45000", "10", END), "ok", NULL);
    assert_int_equal(counter(&q, "claimed"), 5);
    assert_int_equal(zcard(qkey(&q, "processing")), 5);
}

static void test_claim_bad_arguments(void **state)
{
    queue_t q;
    queue_init(&q, "badclaim");
    enqueue_ok(&q, "job", 3, 0);
    expect_error(fcall("claim", &q, -1, "0", "1", END));
    expect_error(fcall("claim", &q, -1, "x", "1", END));
    expect_error(fcall("claim", &q, -1, "1000", "0", END));
    expect_error(fcall("claim", &q, -1, "1000", "101", END));
    expect_error(fcall("claim", &q, -1, END));
    assert_int_equal(llen(qkey(&q, "ready")), 1);
}

static void test_claim_due_retry_before_fresh(void **state)
{
    queue_t q;
    queue_init(&q, "dueretry");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 1);
    fail_ok(&q, 1, "flaky", "1", 0, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after"), msg_int(&m, "updated_at"));
    assert_int_equal(zscore(qkey(&q, "scheduled"), 1), msg_int(&m, "retry_after"));

    /* Id 1 is due: it goes before 2 and 3, which were enqueued later but never failed. */
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 1);
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_string_equal(msg_str(&m, "last_error"), "flaky");
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 2);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 3);
    expect_nothing_to_claim(&q);
}

static void test_claim_replayed_next(void **state)
{
    queue_t q;
    queue_init(&q, "replaynext");
    long long dead = make_dead(&q, "broken");
    enqueue_ok(&q, "job", 3, 0);
    enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    expect_ok_msg(fcall("replay", &q, dead, END), &m);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, dead);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 2);
}

static void test_claim_skips_deleted(void **state)
{
    queue_t q;
    queue_init(&q, "deleted");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    int_reply(rcmd("DEL", mkey(&q, 1), END));
    msg_t ms[4];
    size_t n = expect_ok_msgs(fcall("claim", &q, -1, "30000", "3", END), ms, 4);
    assert_int_equal(n, 2);
    assert_int_equal(ms[0].id, 2);
    assert_int_equal(ms[1].id, 3);
    assert_string_not_equal(msg_str(&ms[0], "lease_token"), msg_str(&ms[1], "lease_token"));
    assert_int_equal(exists(mkey(&q, 1)), 0); /* not brought back as a stub */
    assert_int_equal(zscore(qkey(&q, "processing"), 1), -1);
    assert_int_equal(llen(qkey(&q, "ready")), 0);
    assert_int_equal(counter(&q, "claimed"), 2);

    /* Lease tokens stay unique after the claimed counter was wound back. */
    enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 4);
    for (size_t i = 0; i < 2; i++)
        assert_string_not_equal(msg_str(&m, "lease_token"), msg_str(&ms[i], "lease_token"));
}

/* A deleted id at the head of ready must not hide the message behind it:
 * a claim of one returns the next live message, not nothing. */
static void test_claim_skips_deleted_head(void **state)
{
    queue_t q;
    queue_init(&q, "deletedhead");
    enqueue_ok(&q, "job", 3, 0);
    enqueue_ok(&q, "job", 3, 0);
    int_reply(rcmd("DEL", mkey(&q, 1), END));
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 2);
}

/* ------------------------------------------------------------------------ */
/* succeed, fail, extend: tokens and states                                 */
/* ------------------------------------------------------------------------ */

typedef redisReply *(*settle_fn)(const queue_t *q, long long id, const char *token);

static redisReply *do_succeed(const queue_t *q, long long id, const char *token)
{
    return fcall("succeed", q, id, token, END);
}

static redisReply *do_fail(const queue_t *q, long long id, const char *token)
{
    return fcall("fail", q, id, token, "boom", "1", "-1", END);
}

static redisReply *do_extend(const queue_t *q, long long id, const char *token)
{
    return fcall("extend", q, id, token, "30000", END);
}

static void check_settle(settle_fn op, const char *after)
{
    queue_t q;
    queue_init(&q, "settle");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m, got;

    expect_code(op(&q, 999, ""), "not_found", NULL);
    expect_code(op(&q, 1, ""), "invalid_state", "pending");

    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 1);
    expect_code(op(&q, 1, "not-the-token"), "lease_mismatch", NULL);
    expect_ok_msg(fcall("get", &q, 1, END), &got);
    assert_string_equal(msg_str(&got, "status"), "processing");
    assert_string_equal(msg_str(&got, "lease_token"), msg_str(&m, "lease_token"));

    expect_ok_msg(op(&q, 1, msg_str(&m, "lease_token")), &got);
    assert_int_equal(got.id, 1);
    assert_string_equal(msg_str(&got, "status"), after);

    /* "" accepts whatever lease is current. */
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, 2);
    expect_ok_msg(op(&q, 2, ""), &got);
    assert_string_equal(msg_str(&got, "status"), after);
}

static void test_succeed_tokens_and_states(void **state) { check_settle(do_succeed, "succeeded"); }
static void test_fail_tokens_and_states(void **state) { check_settle(do_fail, "pending"); }
static void test_extend_tokens_and_states(void **state) { check_settle(do_extend, "processing"); }

static void test_succeed_moves_to_succeeded(void **state)
{
    queue_t q;
    queue_init(&q, "succeed");
    long long id = enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("succeed", &q, id, msg_str(&m, "lease_token"), END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    assert_no_field(&m, "lease_token");
    assert_no_field(&m, "lease_expires_at");
    assert_int_equal(zscore(qkey(&q, "processing"), id), -1);
    assert_int_equal(zscore(qkey(&q, "succeeded"), id), msg_int(&m, "updated_at"));
    assert_int_equal(counter(&q, "succeeded"), 1);
    /* Settled once: no second time, with or without a token. */
    expect_code(fcall("succeed", &q, id, "", END), "invalid_state", "succeeded");
    expect_code(fcall("fail", &q, id, "", "late", "1", "-1", END), "invalid_state", "succeeded");
}

/* ------------------------------------------------------------------------ */
/* fail: backoff and dead letters                                           */
/* ------------------------------------------------------------------------ */

static void test_fail_backoff_then_dead(void **state)
{
    static const long long delays_ms[] = { 2000, 4000, 8000, 16000 };
    queue_t q;
    queue_init(&q, "backoff");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    char error[32];

    for (int n = 1; n <= 4; n++) {
        claim_one(&q, 30000, &m);
        assert_int_equal(m.id, id);
        snprintf(error, sizeof error, "error %d", n);
        fail_ok(&q, id, error, "1", -1, &m);
        assert_string_equal(msg_str(&m, "status"), "pending");
        assert_int_equal(msg_int(&m, "retry_count"), n);
        assert_string_equal(msg_str(&m, "last_error"), error);
        assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), delays_ms[n - 1]);
        assert_int_equal(zscore(qkey(&q, "scheduled"), id), msg_int(&m, "retry_after"));
        assert_int_equal(zscore(qkey(&q, "processing"), id), -1);
        assert_no_field(&m, "lease_token");
        assert_no_field(&m, "lease_expires_at");
        expect_nothing_to_claim(&q); /* not due yet */
        make_due(&q, id);
    }
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "error 5", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 5);
    assert_string_equal(msg_str(&m, "last_error"), "error 5");
    assert_no_field(&m, "retry_after");
    assert_int_equal(zscore(qkey(&q, "dead"), id), msg_int(&m, "updated_at"));
    assert_int_equal(zscore(qkey(&q, "scheduled"), id), -1);
    assert_int_equal(zscore(qkey(&q, "processing"), id), -1);
    expect_nothing_to_claim(&q);
    assert_int_equal(counter(&q, "failed"), 5);
    assert_int_equal(counter(&q, "retried"), 4);
    assert_int_equal(counter(&q, "dead"), 1);
}

static void test_fail_dead_at_once(void **state)
{
    queue_t q;
    queue_init(&q, "deadnow");
    msg_t m;

    /* max_retries 1: the first failure is the last. */
    long long a = enqueue_ok(&q, "job", 1, 0);
    claim_one(&q, 30000, &m);
    fail_ok(&q, a, "once", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_true(zscore(qkey(&q, "dead"), a) > 0);

    /* retryable "0": dead with retries left. */
    long long b = enqueue_ok(&q, "job", 5, 0);
    claim_one(&q, 30000, &m);
    fail_ok(&q, b, "poison", "0", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_string_equal(msg_str(&m, "last_error"), "poison");
    assert_true(zscore(qkey(&q, "dead"), b) > 0);
    assert_int_equal(zcard(qkey(&q, "scheduled")), 0);
}

static void test_fail_retry_after_override(void **state)
{
    queue_t q;
    queue_init(&q, "override");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "slow down", "1", 12345, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 12345);
    assert_int_equal(zscore(qkey(&q, "scheduled"), id), msg_int(&m, "retry_after"));
    expect_error(fcall("fail", &q, id, "", "e", "1", "x", END));
    expect_error(fcall("fail", &q, id, END));
}

static void test_fail_backoff_cap(void **state)
{
    queue_t q;
    queue_init(&q, "cap");
    long long id = enqueue_ok(&q, "job", 10, 0);
    msg_t m;

    /* The largest backoff reachable with max_retries 10: n = 9, 512 s. */
    claim_one(&q, 30000, &m);
    hset(&q, id, "retry_count", "8");
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_int_equal(msg_int(&m, "retry_count"), 9);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 512000);

    /* 2^12 s is past the cap: 3600 s. max_retries is raised by hand, since
     * 10 (the API's limit) dies before the cap is ever reached. */
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    hset(&q, id, "max_retries", "20");
    hset(&q, id, "retry_count", "11");
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 12);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 3600000);

    /* n = 10 with max_retries 10 is dead. */
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    hset(&q, id, "max_retries", "10");
    hset(&q, id, "retry_count", "9");
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 10);
}

/* ------------------------------------------------------------------------ */
/* replay, extend                                                           */
/* ------------------------------------------------------------------------ */

static void test_replay(void **state)
{
    queue_t q;
    queue_init(&q, "replay");
    long long id = enqueue_ok(&q, "job", 2, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "first", "1", -1, &m);
    expect_code(fcall("replay", &q, id, END), "invalid_state", "pending");
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    expect_code(fcall("replay", &q, id, END), "invalid_state", "processing");
    fail_ok(&q, id, "second", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 2);
    long long died_at = msg_int(&m, "updated_at");

    expect_ok_msg(fcall("replay", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 0);
    assert_int_equal(msg_int(&m, "max_retries"), 2);
    assert_string_equal(msg_str(&m, "payload"), "job");
    assert_true(msg_int(&m, "updated_at") >= died_at);
    assert_no_field(&m, "last_error");
    assert_no_field(&m, "retry_after");
    assert_no_field(&m, "dead_at");
    assert_no_field(&m, "lease_token");
    assert_int_equal(zscore(qkey(&q, "dead"), id), -1);
    assert_int_equal(llen(qkey(&q, "due")), 1);
    assert_int_equal(counter(&q, "replayed"), 1);

    expect_code(fcall("replay", &q, id, END), "invalid_state", "pending");
    expect_code(fcall("replay", &q, 999, END), "not_found", NULL);

    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("succeed", &q, id, "", END), &m);
    expect_code(fcall("replay", &q, id, END), "invalid_state", "succeeded");
    assert_int_equal(counter(&q, "replayed"), 1);
}

static void test_extend(void **state)
{
    queue_t q;
    queue_init(&q, "extend");
    long long id = enqueue_ok(&q, "job", 3, 0);
    msg_t m, e;
    claim_one(&q, 1000, &m);
    long long first = msg_int(&m, "lease_expires_at");

    expect_ok_msg(fcall("extend", &q, id, msg_str(&m, "lease_token"), "600000", END), &e);
    assert_string_equal(msg_str(&e, "status"), "processing");
    assert_string_equal(msg_str(&e, "lease_token"), msg_str(&m, "lease_token"));
    assert_int_equal(msg_int(&e, "lease_expires_at"), msg_int(&e, "updated_at") + 600000);
    assert_true(msg_int(&e, "lease_expires_at") > first);
    assert_int_equal(zscore(qkey(&q, "processing"), id), msg_int(&e, "lease_expires_at"));

    /* A lease can be shortened too: the deadline is now + lease_ms. */
    expect_ok_msg(fcall("extend", &q, id, "", "5000", END), &e);
    assert_int_equal(msg_int(&e, "lease_expires_at"), msg_int(&e, "updated_at") + 5000);
    assert_int_equal(zscore(qkey(&q, "processing"), id), msg_int(&e, "lease_expires_at"));

    expect_error(fcall("extend", &q, id, "", "0", END));
    expect_error(fcall("extend", &q, id, "", END));
}

/* ------------------------------------------------------------------------ */
/* reclaim, promote, tick                                                   */
/* ------------------------------------------------------------------------ */

static void test_reclaim_expired_lease(void **state)
{
    queue_t q;
    queue_init(&q, "reclaim");
    long long r[2];
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], -1);

    long long short_id = enqueue_ok(&q, "job", 3, 0);
    long long long_id = enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 1, &m);
    assert_int_equal(m.id, short_id);
    long long deadline = msg_int(&m, "lease_expires_at");
    claim_one(&q, 60000, &m);
    assert_int_equal(m.id, long_id);

    wait_until_ms(deadline);
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 1);
    assert_in_range(r[1], 1, 60000);

    expect_ok_msg(fcall("get", &q, short_id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "last_error"), "lease expired");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 2000);
    assert_no_field(&m, "lease_token");
    assert_no_field(&m, "lease_expires_at");
    assert_int_equal(zscore(qkey(&q, "processing"), short_id), -1);
    assert_int_equal(zscore(qkey(&q, "scheduled"), short_id), msg_int(&m, "retry_after"));
    assert_int_equal(counter(&q, "lease_expired"), 1);
    assert_int_equal(counter(&q, "failed"), 1);

    /* The old holder's token no longer settles it. */
    expect_code(fcall("succeed", &q, short_id, "", END), "invalid_state", "pending");

    /* The other lease is untouched. */
    expect_ok_msg(fcall("get", &q, long_id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "processing");

    /* Nothing more to do. */
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 0);

    expect_error(fcall("reclaim", &q, -1, "0", END));
    expect_error(fcall("reclaim", &q, -1, "1001", END));
}

static void test_reclaim_last_retry_is_dead(void **state)
{
    queue_t q;
    queue_init(&q, "reclaimdead");
    long long id = enqueue_ok(&q, "job", 1, 0);
    msg_t m;
    claim_one(&q, 1, &m);
    wait_until_ms(msg_int(&m, "lease_expires_at"));
    long long r[2];
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], -1);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_string_equal(msg_str(&m, "last_error"), "lease expired");
    assert_true(zscore(qkey(&q, "dead"), id) > 0);
}

static void test_promote(void **state)
{
    queue_t q;
    queue_init(&q, "promote");
    long long r[2];
    expect_ints(fcall("promote", &q, -1, "10", END), 2, r);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], -1);

    for (int i = 0; i < 5; i++)
        enqueue_ok(&q, "job", 3, 60000);
    expect_ints(fcall("promote", &q, -1, "10", END), 2, r);
    assert_int_equal(r[0], 0);
    assert_in_range(r[1], 1, 60000);

    /* All five due, id 5 earliest: due order is 5, 4, 3, 2, 1. */
    for (long long id = 1; id <= 5; id++)
        int_reply(rcmd("ZADD", qkey(&q, "scheduled"), "XX", num(6 - id), num(id), END));
    expect_ints(fcall("promote", &q, -1, "3", END), 2, r);
    assert_int_equal(r[0], 3);
    assert_int_equal(r[1], 0); /* more are due already */
    assert_int_equal(llen(qkey(&q, "due")), 3);
    assert_int_equal(zcard(qkey(&q, "scheduled")), 2);

    /* Within one batch the earliest due sits at the claim end (the right). */
    redisReply *ready = rcmd("LRANGE", qkey(&q, "due"), "0", "-1", END);
    assert_int_equal(ready->type, REDIS_REPLY_ARRAY);
    assert_int_equal(ready->elements, 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(ready->element[i]->str, num(3 + (long long)i));
    freeReplyObject(ready);

    expect_ints(fcall("promote", &q, -1, "3", END), 2, r);
    assert_int_equal(r[0], 2);
    assert_int_equal(r[1], -1);
    expect_ints(fcall("promote", &q, -1, "3", END), 2, r);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], -1);

    expect_error(fcall("promote", &q, -1, "0", END));
    expect_error(fcall("promote", &q, -1, "1001", END));
    expect_error(fcall("promote", &q, -1, END));
}

/* Ids promoted by one call and not claimed yet must still go before ids that
 * fell due later and were promoted by a later call: due order across calls,
 * as the spec orders retries (oldest first), not the reverse. */
static void test_promoted_batches_keep_due_order(void **state)
{
    queue_t q;
    queue_init(&q, "promoteorder");
    for (int i = 0; i < 4; i++)
        enqueue_ok(&q, "job", 3, 60000);
    /* Due order 1, 2, 3, 4; the timer promotes two per call. */
    for (long long id = 1; id <= 4; id++)
        int_reply(rcmd("ZADD", qkey(&q, "scheduled"), "XX", num(id), num(id), END));
    long long r[2];
    expect_ints(fcall("promote", &q, -1, "2", END), 2, r);
    assert_int_equal(r[0], 2);
    expect_ints(fcall("promote", &q, -1, "2", END), 2, r);
    assert_int_equal(r[0], 2);
    msg_t m[4];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "4", END), m, 4), 4);
    long long got[4];
    for (int i = 0; i < 4; i++)
        got[i] = m[i].id;
    const long long want[] = { 1, 2, 3, 4 };
    assert_ids(got, 4, want, 4);
}

static void test_tick(void **state)
{
    queue_t q;
    queue_init(&q, "tick");
    long long r[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "1", "1", END), TICK_N, r);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], 0);
    assert_int_equal(r[2], 0);
    assert_int_equal(r[3], -1);
    assert_int_equal(r[4], 0);

    msg_t m;
    long long dead = make_dead(&q, "gone");
    long long dead_at = zscore(qkey(&q, "dead"), dead);
    long long done = enqueue_ok(&q, "job", 3, 0);
    claim_one(&q, 60000, &m);
    expect_ok_msg(fcall("succeed", &q, done, "", END), &m);
    long long done_at = msg_int(&m, "updated_at");
    long long leased = enqueue_ok(&q, "job", 3, 0);
    claim_one(&q, 1, &m);
    assert_int_equal(m.id, leased);
    long long deadline = msg_int(&m, "lease_expires_at");
    long long due = enqueue_ok(&q, "job", 3, 60000);
    make_due(&q, due);

    wait_until_ms(deadline > dead_at + 1 ? deadline : dead_at + 1);
    expect_ints(fcall("tick", &q, -1, "100", "1", "0", END), TICK_N, r);
    assert_int_equal(r[0], 1);    /* promoted: due */
    assert_int_equal(r[1], 1);    /* reclaimed: leased */
    assert_int_equal(r[2], 1);    /* expired: dead */
    assert_int_equal(r[3], 2000); /* leased's first backoff, now the only schedule */
    assert_int_equal(r[4], 1);    /* ready: due */

    assert_int_equal(exists(mkey(&q, dead)), 0);
    assert_int_equal(zscore(qkey(&q, "dead"), dead), -1);
    assert_int_equal(counter(&q, "expired_dead"), 1);
    assert_int_equal(exists(mkey(&q, done)), 1); /* succeeded_ttl 0 keeps it */
    expect_ok_msg(fcall("get", &q, leased, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "last_error"), "lease expired");
    assert_int_equal(counter(&q, "lease_expired"), 1);
    assert_int_equal(llen(qkey(&q, "due")), 1);
    claim_one(&q, 60000, &m);
    assert_int_equal(m.id, due);

    /* next_in_ms is the nearer of the next schedule and the next deadline. */
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(r[0] + r[1] + r[2], 0);
    assert_in_range(r[3], 0, 2000);
    assert_int_equal(r[4], 0);

    /* Succeeded messages expire by their own ttl. */
    wait_until_ms(done_at + 1);
    expect_ints(fcall("tick", &q, -1, "100", "0", "1", END), TICK_N, r);
    assert_int_equal(r[2], 1);
    assert_int_equal(exists(mkey(&q, done)), 0);
    assert_int_equal(zscore(qkey(&q, "succeeded"), done), -1);
    assert_int_equal(counter(&q, "expired_succeeded"), 1);

    expect_error(fcall("tick", &q, -1, "0", "0", "0", END));
    expect_error(fcall("tick", &q, -1, "100", "x", "0", END));
    expect_error(fcall("tick", &q, -1, "100", "0", END));
}

static void test_tick_next_in_ms_from_lease(void **state)
{
    queue_t q;
    queue_init(&q, "ticklease");
    enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 5000, &m);
    enqueue_ok(&q, "job", 3, 60000);
    long long r[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(r[0] + r[1] + r[2], 0);
    assert_in_range(r[3], 1, 5000);
}

static void test_tick_dead_ttl_zero_keeps(void **state)
{
    queue_t q;
    queue_init(&q, "keep");
    long long dead = make_dead(&q, "kept");
    wait_until_ms(zscore(qkey(&q, "dead"), dead) + 2);
    long long r[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(r[2], 0);
    assert_int_equal(exists(mkey(&q, dead)), 1);
    assert_true(zscore(qkey(&q, "dead"), dead) > 0);
    assert_int_equal(counter(&q, "expired_dead"), 0);
}

static void test_tick_limit(void **state)
{
    queue_t q;
    queue_init(&q, "ticklimit");
    for (int i = 0; i < 5; i++)
        enqueue_ok(&q, "job", 3, 60000);
    for (long long id = 1; id <= 5; id++)
        make_due(&q, id);
    long long r[TICK_N];
    expect_ints(fcall("tick", &q, -1, "2", "0", "0", END), TICK_N, r);
    assert_int_equal(r[0], 2);
    assert_int_equal(r[3], 0);
    assert_int_equal(r[4], 2);
    assert_int_equal(zcard(qkey(&q, "scheduled")), 3);
}

/* ------------------------------------------------------------------------ */
/* get, list                                                                */
/* ------------------------------------------------------------------------ */

static void test_get(void **state)
{
    queue_t q;
    queue_init(&q, "get");
    long long id = enqueue_ok(&q, "hello", 7, 0);
    msg_t m;
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_int_equal(m.id, id);
    assert_string_equal(msg_str(&m, "payload"), "hello");
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "max_retries"), 7);
    expect_code(fcall("get", &q, 999, END), "not_found", NULL);
}

/* Ids 1 dead, 2 succeeded, 3 processing, 4 and 5 ready, 6 scheduled. */
static void make_one_of_each(const queue_t *q)
{
    msg_t m;
    for (int i = 0; i < 5; i++)
        enqueue_ok(q, "job", 1, 0);
    enqueue_ok(q, "job", 1, 60000);
    claim_one(q, 60000, &m);
    fail_ok(q, 1, "bad", "1", -1, &m);
    claim_one(q, 60000, &m);
    expect_ok_msg(fcall("succeed", q, 2, "", END), &m);
    claim_one(q, 60000, &m);
}

static void test_list_by_status(void **state)
{
    queue_t q;
    queue_init(&q, "liststatus");
    make_one_of_each(&q);
    struct { const char *status; long long ids[6]; size_t n; } cases[] = {
        { "pending", { 4, 5, 6 }, 3 },
        { "processing", { 3 }, 1 },
        { "succeeded", { 2 }, 1 },
        { "dead", { 1 }, 1 },
        { "", { 6, 5, 4, 3, 2, 1 }, 6 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        long long ids[16], total;
        char next[128];
        size_t n = list_page(&q, cases[c].status, 100, "", ids, 16, &total, next, sizeof next);
        assert_int_equal(total, cases[c].n);
        assert_string_equal(next, "");
        assert_ids(ids, n, cases[c].ids, cases[c].n);
    }

    /* An empty queue lists nothing. */
    queue_t empty;
    queue_init(&empty, "listempty");
    long long ids[4], total;
    char next[128];
    assert_int_equal(list_page(&empty, "", 10, "", ids, 4, &total, next, sizeof next), 0);
    assert_int_equal(total, 0);
    assert_string_equal(next, "");
    assert_int_equal(list_page(&empty, "dead", 10, "", ids, 4, &total, next, sizeof next), 0);
    assert_int_equal(list_page(&empty, "pending", 10, "", ids, 4, &total, next, sizeof next), 0);
}

static void test_list_pages_dead(void **state)
{
    queue_t q;
    queue_init(&q, "listdead");
    for (int i = 0; i < 5; i++)
        make_dead(&q, "bad");
    long long ids[16];
    const long long want[] = { 1, 2, 3, 4, 5 };
    assert_ids(ids, list_all(&q, "dead", 2, ids, 16, 5), want, 5);
}

static void test_list_pages_pending(void **state)
{
    queue_t q;
    queue_init(&q, "listpending");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    enqueue_ok(&q, "job", 3, 50000);
    enqueue_ok(&q, "job", 3, 40000);
    long long ids[16];
    const long long want[] = { 1, 2, 3, 5, 4 }; /* ready in claim order, then by due time */
    assert_ids(ids, list_all(&q, "pending", 2, ids, 16, 5), want, 5);
    /* A page boundary exactly at the end of ready. */
    assert_ids(ids, list_all(&q, "pending", 3, ids, 16, 5), want, 5);
    assert_ids(ids, list_all(&q, "pending", 1, ids, 16, 5), want, 5);
}

static void test_list_pages_all(void **state)
{
    queue_t q;
    queue_init(&q, "listall");
    for (int i = 0; i < 5; i++)
        enqueue_ok(&q, "job", 3, 0);
    long long ids[16];
    const long long want[] = { 5, 4, 3, 2, 1 };
    assert_ids(ids, list_all(&q, "", 2, ids, 16, 5), want, 5);

    long long total;
    char next[128];
    size_t n = list_page(&q, "", 2, "", ids, 16, &total, next, sizeof next);
    assert_int_equal(n, 2);
    assert_string_not_equal(next, "");
}

/* The message a cursor points at leaves the index between two pages. */
static void test_list_cursor_member_removed(void **state)
{
    queue_t q;
    queue_init(&q, "listremoved");
    for (int i = 0; i < 5; i++)
        make_dead(&q, "bad");
    long long ids[16], total;
    char next[128];
    size_t n = list_page(&q, "dead", 2, "", ids, 16, &total, next, sizeof next);
    assert_int_equal(n, 2);
    msg_t m;
    expect_ok_msg(fcall("replay", &q, ids[1], END), &m);
    n = list_page(&q, "dead", 2, next, ids, 16, &total, next, sizeof next);
    const long long want[] = { 3, 4 };
    assert_ids(ids, n, want, 2);
    assert_int_equal(total, 4);
}

/* Many dead letters share one score when one reclaim kills them all. A
 * cursor whose member left the index must still lead to the rest. */
static void test_list_cursor_member_removed_in_large_tie(void **state)
{
    enum { N = 100 };
    queue_t q;
    queue_init(&q, "listtie");
    for (int i = 0; i < N; i++)
        enqueue_ok(&q, "job", 1, 0);
    msg_t *m = calloc(N, sizeof *m);
    assert_non_null(m);
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "1", num(N), END), m, N), N);
    wait_until_ms(msg_int(&m[0], "lease_expires_at"));
    free(m);
    long long r[2];
    expect_ints(fcall("reclaim", &q, -1, "1000", END), 2, r);
    assert_int_equal(r[0], N);

    long long ids[N + 1], total;
    bool seen[N + 1] = { false };
    char cursor[128] = "", next[128];
    size_t listed = 0;
    for (int page = 0; page < 8; page++) {
        size_t n = list_page(&q, "dead", 10, cursor, ids, N, &total, next, sizeof next);
        assert_int_equal(n, 10);
        for (size_t i = 0; i < n; i++) {
            assert_false(seen[ids[i]]);
            seen[ids[i]] = true;
            listed++;
        }
        strcpy(cursor, next);
    }
    msg_t replayed;
    expect_ok_msg(fcall("replay", &q, ids[9], END), &replayed);
    for (int page = 0; page < 100 && cursor[0] != '\0'; page++) {
        size_t n = list_page(&q, "dead", 10, cursor, ids, N, &total, next, sizeof next);
        for (size_t i = 0; i < n; i++) {
            assert_false(seen[ids[i]]);
            seen[ids[i]] = true;
            listed++;
        }
        strcpy(cursor, next);
    }
    if (listed != N)
        fail_msg("the listing reached %zu of %d dead letters: the page after the removed "
                 "cursor member came back short with next_cursor \"\"", listed, N);
}

static void test_list_bad_arguments(void **state)
{
    queue_t q;
    queue_init(&q, "listbad");
    make_one_of_each(&q);
    static const struct { const char *status, *cursor; } bad[] = {
        { "dead", "abc" }, { "dead", "12" }, { "processing", "1:x" },
        { "pending", "x:1" }, { "pending", "r:-1" }, { "pending", "r:x" },
        { "pending", "s:nope" }, { "pending", "nonsense" },
        { "", "abc" }, { "", "-5" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_code(fcall("list", &q, -1, bad[i].status, "10", bad[i].cursor, END), "bad_cursor", NULL);
    expect_error(fcall("list", &q, -1, "bogus", "10", "", END));
    expect_error(fcall("list", &q, -1, "dead", "0", "", END));
    expect_error(fcall("list", &q, -1, "dead", "1001", "", END));
    expect_error(fcall("list", &q, -1, END));
}

/* ------------------------------------------------------------------------ */
/* Idempotency, release, succeed_many, the wake channel                     */
/* ------------------------------------------------------------------------ */

static void test_enqueue_idempotency_key(void **state)
{
    queue_t q;
    queue_init(&q, "idem");
    msg_t m, d;
    expect_enqueued(&q, fcall("enqueue", &q, -1, "first", "3", "0", "order-17", END), &m);
    assert_int_equal(m.id, 1);
    assert_string_equal(msg_str(&m, "idempotency_key"), "order-17");

    /* The same key again: the original message, nothing created. */
    expect_msg(fcall("enqueue", &q, -1, "second", "5", "60000", "order-17", END), "duplicate", &d);
    assert_int_equal(d.id, 1);
    assert_string_equal(msg_str(&d, "payload"), "first");
    assert_int_equal(msg_int(&d, "max_retries"), 3);
    assert_no_field(&d, "retry_after");
    assert_int_equal(llen(qkey(&q, "ready")), 1);
    assert_int_equal(zcard(qkey(&q, "scheduled")), 0);
    assert_int_equal(counter(&q, "enqueued"), 1);
    long long ttl = int_reply(rcmd("PTTL", qkey(&q, "idem:order-17"), END));
    assert_in_range(ttl, 1, 24LL * 3600 * 1000);

    /* Still the original after it changed state. */
    claim_one(&q, 30000, &m);
    expect_msg(fcall("enqueue", &q, -1, "third", "3", "0", "order-17", END), "duplicate", &d);
    assert_int_equal(d.id, 1);
    assert_string_equal(msg_str(&d, "status"), "processing");

    /* Other keys, no key, and other queues are independent. */
    assert_int_equal(enqueue_ok(&q, "x", 3, 0), 2);
    expect_enqueued(&q, fcall("enqueue", &q, -1, "y", "3", "0", "order-18", END), &m);
    assert_int_equal(m.id, 3);
    expect_enqueued(&q, fcall("enqueue", &q, -1, "z", "3", "0", "", END), &m);
    assert_int_equal(m.id, 4);
    assert_no_field(&m, "idempotency_key");
    expect_enqueued(&q, fcall("enqueue", &q, -1, "z", "3", "0", "", END), &m);
    assert_int_equal(m.id, 5);
    queue_t other;
    queue_init(&other, "idem-other");
    expect_enqueued(&other, fcall("enqueue", &other, -1, "first", "3", "0", "order-17", END), &m);
    assert_int_equal(m.id, 1);

    /* The original is gone (retention): only its id comes back. */
    int_reply(rcmd("DEL", mkey(&q, 1), END));
    expect_msg(fcall("enqueue", &q, -1, "again", "3", "0", "order-17", END), "duplicate", &d);
    assert_int_equal(d.id, 1);
    assert_int_equal(d.nfields, 0);

    /* 1..255 bytes. */
    char key[257];
    memset(key, 'k', 256);
    key[256] = '\0';
    expect_error(fcall("enqueue", &q, -1, "p", "3", "0", key, END));
    key[255] = '\0';
    expect_enqueued(&q, fcall("enqueue", &q, -1, "p", "3", "0", key, END), &m);
    assert_int_equal(m.id, 6);
}

static void test_release(void **state)
{
    queue_t q;
    queue_init(&q, "release");
    for (int i = 0; i < 4; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m[4];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "3", END), m, 4), 3);
    char t1[64], t2[64];
    snprintf(t1, sizeof t1, "%s", msg_str(&m[0], "lease_token"));
    snprintf(t2, sizeof t2, "%s", msg_str(&m[1], "lease_token"));

    /* Only an exact current lease is released. */
    assert_int_equal(int_reply(fcall("release", &q, -1, "1", "nope", "2", "", "4", "", "999", "x", END)), 0);
    assert_int_equal(int_reply(fcall("release", &q, -1, END)), 0);
    assert_int_equal(zcard(qkey(&q, "processing")), 3);

    assert_int_equal(int_reply(fcall("release", &q, -1, "1", t1, "2", t2, END)), 2);
    msg_t g;
    expect_ok_msg(fcall("get", &q, 1, END), &g);
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_count"), 0);
    assert_no_field(&g, "lease_token");
    assert_no_field(&g, "lease_expires_at");
    assert_no_field(&g, "last_error");
    assert_int_equal(zscore(qkey(&q, "processing"), 1), -1);
    assert_int_equal(zscore(qkey(&q, "processing"), 2), -1);
    assert_int_equal(counter(&q, "released"), 2);
    assert_int_equal(counter(&q, "failed"), 0);
    /* Released twice is released once. */
    assert_int_equal(int_reply(fcall("release", &q, -1, "1", t1, END)), 0);

    /* Back at the claim end, in their claim order, before fresh id 4. */
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "4", END), m, 4), 3);
    assert_int_equal(m[0].id, 1);
    assert_int_equal(m[1].id, 2);
    assert_int_equal(m[2].id, 4);

    expect_error(fcall("release", &q, -1, "1", END));
    const char *args[202];
    for (size_t i = 0; i < 202; i++)
        args[i] = (i % 2) ? "t" : "1";
    expect_error(fcall_bin("release", &q, -1, 202, args, NULL));
}

static void test_succeed_many(void **state)
{
    queue_t q;
    queue_init(&q, "succeedmany");
    for (int i = 0; i < 5; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m[3];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "3", END), m, 3), 3);
    static const char *const want[] = { "succeeded", "succeeded", "lease_mismatch",
                                        "invalid_state", "not_found" };
    expect_strings(fcall("succeed_many", &q, -1, "1", msg_str(&m[0], "lease_token"), "2", "",
                         "3", "wrong", "4", "", "999", "", END), 5, want);
    msg_t g;
    for (long long id = 1; id <= 2; id++) {
        expect_ok_msg(fcall("get", &q, id, END), &g);
        assert_string_equal(msg_str(&g, "status"), "succeeded");
        assert_no_field(&g, "lease_token");
        assert_int_equal(zscore(qkey(&q, "succeeded"), id), msg_int(&g, "updated_at"));
        assert_int_equal(zscore(qkey(&q, "processing"), id), -1);
    }
    expect_ok_msg(fcall("get", &q, 3, END), &g);
    assert_string_equal(msg_str(&g, "status"), "processing");
    assert_int_equal(counter(&q, "succeeded"), 2);

    /* The same id twice in one batch settles once. */
    static const char *const twice[] = { "succeeded", "invalid_state" };
    expect_strings(fcall("succeed_many", &q, -1, "3", msg_str(&m[2], "lease_token"),
                         "3", msg_str(&m[2], "lease_token"), END), 2, twice);
    assert_int_equal(counter(&q, "succeeded"), 3);

    expect_error(fcall("succeed_many", &q, -1, END));
    expect_error(fcall("succeed_many", &q, -1, "1", END));
    const char *args[202];
    for (size_t i = 0; i < 202; i++)
        args[i] = (i % 2) ? "" : "5";
    expect_error(fcall_bin("succeed_many", &q, -1, 202, args, NULL));
}

/* A second connection subscribed to one channel. */
static redisContext *subscribe(const char *channel)
{
    struct timeval tv = { 5, 0 };
    redisContext *sub = redisConnectWithTimeout("127.0.0.1", atoi(getenv("RETRYD_TEST_REDIS_PORT")), tv);
    assert_non_null(sub);
    assert_int_equal(sub->err, 0);
    redisSetTimeout(sub, tv);
    redisReply *r = redisCommand(sub, "SUBSCRIBE %s", channel);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    return sub;
}

/* How many wake messages arrived since the last call. Everything the main
 * connection did has been answered, so its publishes reach sub before the
 * reply to this PING. */
static int wake_count(redisContext *sub)
{
    assert_int_equal(redisAppendCommand(sub, "PING"), REDIS_OK);
    for (int n = 0;;) {
        void *v = NULL;
        if (redisGetReply(sub, &v) != REDIS_OK)
            fail_msg("subscriber: %s", sub->errstr);
        redisReply *r = v;
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_true(r->elements >= 1);
        bool pong = strcmp(r->element[0]->str, "pong") == 0;
        if (!pong) {
            assert_string_equal(r->element[0]->str, "message");
            n++;
        }
        freeReplyObject(r);
        if (pong)
            return n;
    }
}

static void test_wake_channel(void **state)
{
    queue_t q;
    queue_init(&q, "wake");
    redisContext *sub = subscribe(qkey(&q, "wake"));
    assert_int_equal(wake_count(sub), 0);

    long long a = enqueue_ok(&q, "job", 1, 0);
    assert_int_equal(wake_count(sub), 1); /* ready now */
    long long b = enqueue_ok(&q, "job", 3, 60000);
    assert_int_equal(wake_count(sub), 0); /* not before it is due */

    msg_t m;
    claim_one(&q, 30000, &m);
    fail_ok(&q, a, "bad", "1", -1, &m);
    wake_count(sub);
    expect_ok_msg(fcall("replay", &q, a, END), &m);
    assert_int_equal(wake_count(sub), 1);

    long long r[TICK_N];
    expect_ints(fcall("promote", &q, -1, "10", END), 2, r);
    assert_int_equal(wake_count(sub), 0); /* nothing moved */
    make_due(&q, b);
    expect_ints(fcall("promote", &q, -1, "10", END), 2, r);
    assert_int_equal(r[0], 1);
    assert_int_equal(wake_count(sub), 1);

    claim_one(&q, 30000, &m);
    char token[64];
    snprintf(token, sizeof token, "%s", msg_str(&m, "lease_token"));
    wake_count(sub);
    assert_int_equal(int_reply(fcall("release", &q, -1, num(m.id), token, END)), 1);
    assert_int_equal(wake_count(sub), 1);

    long long c = enqueue_ok(&q, "job", 3, 60000);
    wake_count(sub);
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(wake_count(sub), 0);
    make_due(&q, c);
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(r[0], 1);
    assert_int_equal(wake_count(sub), 1);
    redisFree(sub);
}

/* ------------------------------------------------------------------------ */
/* Many claims                                                              */
/* ------------------------------------------------------------------------ */

static void test_claim_every_id_once(void **state)
{
    enum { N = 200, BATCH = 7 };
    queue_t q;
    queue_init(&q, "many");
    for (int i = 0; i < N; i++)
        enqueue_ok(&q, "job", 3, 0);
    int seen[N + 1] = { 0 };
    size_t claimed = 0;
    msg_t m[BATCH];
    for (int round = 0; round < N; round++) {
        size_t n = expect_ok_msgs(fcall("claim", &q, -1, "30000", num(BATCH), END), m, BATCH);
        if (n == 0)
            break;
        assert_true(n == BATCH || claimed + n == N);
        for (size_t i = 0; i < n; i++) {
            assert_in_range(m[i].id, 1, N);
            seen[m[i].id]++;
        }
        claimed += n;
    }
    assert_int_equal(claimed, N);
    for (int id = 1; id <= N; id++)
        if (seen[id] != 1)
            fail_msg("id %d claimed %d times", id, seen[id]);
    assert_int_equal(zcard(qkey(&q, "processing")), N);
    assert_int_equal(counter(&q, "claimed"), N);
}

/* ------------------------------------------------------------------------ */
/* Setup                                                                    */
/* ------------------------------------------------------------------------ */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            char *grown = realloc(buf, cap);
            if (grown == NULL) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int group_setup(void **state)
{
    const char *port = getenv("RETRYD_TEST_REDIS_PORT");
    const char *lua = getenv("RETRYD_TEST_LUA");
    if (port == NULL || lua == NULL) {
        print_error("test_lua: RETRYD_TEST_REDIS_PORT and RETRYD_TEST_LUA must be set "
                    "(run it through scripts/test.sh)\n");
        return -1;
    }
    struct timeval tv = { 5, 0 };
    g_redis = redisConnectWithTimeout("127.0.0.1", atoi(port), tv);
    if (g_redis == NULL || g_redis->err) {
        print_error("test_lua: cannot connect to 127.0.0.1:%s: %s\n", port,
                    g_redis ? g_redis->errstr : "out of memory");
        return -1;
    }
    struct timeval cmd_tv = { 10, 0 };
    redisSetTimeout(g_redis, cmd_tv);

    size_t len = 0;
    char *code = read_file(lua, &len);
    if (code == NULL) {
        print_error("test_lua: cannot read %s\n", lua);
        return -1;
    }
    const char *argv[] = { "FUNCTION", "LOAD", "REPLACE", code };
    const size_t lens[] = { 8, 4, 7, len };
    redisReply *r = redisCommandArgv(g_redis, 4, argv, lens);
    free(code);
    if (r == NULL || r->type != REDIS_REPLY_STRING || strcmp(r->str, "retryd") != 0) {
        print_error("test_lua: FUNCTION LOAD %s failed: %s\n", lua,
                    r == NULL ? g_redis->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        if (r)
            freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

static int group_teardown(void **state)
{
    if (g_redis)
        redisFree(g_redis);
    g_redis = NULL;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Timer hints, the registry and the timer schedule (docs/design.md)         */
/* ------------------------------------------------------------------------ */

/* The last element of an array reply (the timer hint); frees r. */
static long long hint_of(redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[r->elements - 1]->type != REDIS_REPLY_INTEGER) {
        const char *desc = reply_desc(r);
        freeReplyObject(r);
        fail_msg("expected a reply ending in a timer hint, got %s", desc);
    }
    long long v = r->element[r->elements - 1]->integer;
    freeReplyObject(r);
    return v;
}

/* The queue's timer promise (ms), -1 when none. */
static long long promise(const queue_t *q)
{
    redisReply *r = rcmd("GET", qkey(q, "timer"), END);
    long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return v;
}

static void test_timer_hints(void **state)
{
    queue_t q;
    queue_init(&q, "hints");
    /* A delayed enqueue on a queue with no promise answers its delay. */
    long long t0 = redis_now_ms();
    long long h = hint_of(fcall("enqueue", &q, -1, "a", "3", "5000", "", "1", END));
    assert_in_range(h, 4900, 5000);
    long long p = promise(&q);
    assert_in_range(p, t0 + 5000, redis_now_ms() + 5000);
    /* Later work needs nothing; earlier work lowers the promise. */
    assert_int_equal(hint_of(fcall("enqueue", &q, -1, "b", "3", "8000", "", "1", END)), -1);
    assert_int_equal(promise(&q), p);
    h = hint_of(fcall("enqueue", &q, -1, "c", "3", "3000", "", "1", END));
    assert_in_range(h, 2900, 3000);
    assert_true(promise(&q) < p);
    assert_int_equal(hint_of(fcall("enqueue", &q, -1, "d", "3", "0", "", "1", END)), -1);

    /* A claim's lease deadline is later than the promise: no hint. */
    assert_int_equal(hint_of(fcall("claim", &q, -1, "30000", "1", "1", END)), -1);
    /* On a queue without a promise the deadline is the hint. */
    queue_t w;
    queue_init(&w, "hintclaim");
    enqueue_ok(&w, "x", 3, 0);
    enqueue_ok(&w, "y", 3, 0);
    assert_int_equal(promise(&w), -1);
    msg_t m[2];
    redisReply *r = fcall("claim", &w, -1, "20000", "2", "1", END);
    assert_int_equal(r->elements, 4);
    assert_int_equal(r->element[3]->integer, 20000);
    msg_parse(r->element[1], &m[0]);
    msg_parse(r->element[2], &m[1]);
    freeReplyObject(r);
    assert_int_equal(promise(&w), msg_int(&m[0], "lease_expires_at"));
    /* A retry earlier than the lease: its delay. */
    h = hint_of(fcall("fail", &w, m[0].id, msg_str(&m[0], "lease_token"), "boom", "1", "100",
                      "0", END));
    assert_in_range(h, 0, 100);
    /* A succeed with the caller's retention later than the promise: none;
     * without a retention: none. */
    assert_int_equal(hint_of(fcall("succeed", &w, m[1].id, "", "60000", END)), -1);
    /* No hint when nothing was claimed. */
    assert_int_equal(hint_of(fcall("claim", &w, -1, "20000", "1", "1", END)), -1);

    /* Retention hints from succeed, succeed_many, fail (dead) and kill. */
    queue_t s;
    queue_init(&s, "hintret");
    for (int i = 0; i < 4; i++) enqueue_ok(&s, "x", 1, 0);
    msg_t c[4];
    assert_int_equal(expect_ok_msgs(fcall("claim", &s, -1, "600000", "4", END), c, 4), 4);
    h = hint_of(fcall("succeed", &s, c[0].id, "", "1000", END));
    assert_in_range(h, 900, 1000);
    assert_int_equal(hint_of(fcall("succeed_many", &s, -1, num(c[1].id), "", "2000", END)), -1);
    h = hint_of(fcall("fail", &s, c[2].id, "", "dead", "0", "-1", "500", END));
    assert_in_range(h, 400, 500);
    h = hint_of(fcall("kill", &s, c[3].id, "", "100", END));
    assert_in_range(h, 0, 100);
    expect_error(fcall("succeed", &s, c[0].id, "", "x", END));
    expect_error(fcall("fail", &s, c[2].id, "", "e", "1", "-1", "x", END));
    expect_error(fcall("kill", &s, c[3].id, "", "x", END));
}

/* tick keeps the promise and tells an empty queue. */
static void test_tick_promise_and_empty(void **state)
{
    queue_t q;
    queue_init(&q, "tickempty");
    long long r[TICK_N + 1];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_N + 1, r);
    assert_int_equal(r[3], -1);
    assert_int_equal(r[5], 1);           /* no key at all */
    assert_int_equal(exists(qkey(&q, "timer")), 0);

    enqueue_ok(&q, "x", 3, 7000);
    long long now = redis_now_ms();
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_N + 1, r);
    assert_in_range(r[3], 6000, 7000);
    assert_int_equal(r[5], 0);
    assert_in_range(promise(&q), now + r[3], redis_now_ms() + r[3]);

    /* A succeeded message: its retention is the next thing (ttl 60 s). */
    queue_t s;
    queue_init(&s, "tickret");
    enqueue_ok(&s, "x", 3, 0);
    msg_t m;
    claim_one(&s, 30000, &m);
    expect_ok_msg(fcall("succeed", &s, m.id, "", END), &m);
    expect_ints(fcall("tick", &s, -1, "100", "0", "60000", "1", END), TICK_N + 1, r);
    assert_in_range(r[3], 59000, 60000);
    /* Without retention the queue is idle: no promise, not empty (seq, stats). */
    expect_ints(fcall("tick", &s, -1, "100", "0", "0", "1", END), TICK_N + 1, r);
    assert_int_equal(r[3], -1);
    assert_int_equal(r[5], 0);
    assert_int_equal(exists(qkey(&s, "timer")), 0);
}

/* A registry of its own per test: "<tag>-<pid>-<n>:queues". */
static const char *registry_of(const char *tag)
{
    static unsigned serial;
    char *s = scratch();
    snprintf(s, 192, "%s-%ld-%u:queues", tag, (long)getpid(), ++serial);
    return s;
}

static const char *companion(const char *reg, const char *suffix)
{
    char *s = scratch();
    if (strlen(reg) + strlen(suffix) + 4 > 192) fail_msg("registry key too long: %s", reg);
    strcpy(s, "{");
    strcat(s, reg);
    strcat(s, "}:");
    strcat(s, suffix);
    return s;
}

static long long score_of(const char *key, const char *member)
{
    redisReply *r = rcmd("ZSCORE", key, member, END);
    long long v = r->type == REDIS_REPLY_STRING ? (long long)strtod(r->str, NULL) : -1;
    freeReplyObject(r);
    return v;
}

static bool is_member(const char *set, const char *member)
{
    return int_reply(rcmd("SISMEMBER", set, member, END)) == 1;
}

/* timer_take's {token, next_in_ms, name...}: returns the token, names into out. */
static long long take(const char *reg, const char *lease, const char *sweep, size_t *n,
                      char out[][32])
{
    redisReply *r = rcmd("FCALL", "timer_take", "1", reg, "10", lease, sweep, "1000", "60000", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_true(r->elements >= 2);
    long long token = r->element[0]->integer;
    *n = r->elements - 2;
    for (size_t i = 0; i < *n; i++) snprintf(out[i], 32, "%s", r->element[i + 2]->str);
    freeReplyObject(r);
    return token;
}

static void test_registry_take_done(void **state)
{
    const char *reg = registry_of("sched");
    char regc[192];
    snprintf(regc, sizeof regc, "%s", reg);
    const char *timers = companion(regc, "timers"), *names = companion(regc, "names");
    char tk[192], nk[192], takenk[192];
    snprintf(tk, sizeof tk, "%s", timers);
    snprintf(nk, sizeof nk, "%s", names);
    snprintf(takenk, sizeof takenk, "%s", companion(regc, "taken"));

    /* Registration alone: SET and names index, no schedule entry. */
    assert_int_equal(int_reply(rcmd("FCALL", "register", "1", regc, "idle", "-1", END)), 1);
    assert_true(is_member(regc, "idle"));
    assert_int_equal(score_of(nk, "idle"), 0);
    assert_int_equal(score_of(tk, "idle"), -1);
    expect_error(rcmd("FCALL", "register", "1", regc, "", "0", END));
    expect_error(rcmd("FCALL", "register", "1", regc, "q", "x", END));

    /* Due now: taken with a lease; the report sets the next time. */
    long long now = redis_now_ms();
    int_reply(rcmd("FCALL", "register", "1", regc, "a", "0", END));
    int_reply(rcmd("FCALL", "register", "1", regc, "b", "0", END));
    int_reply(rcmd("FCALL", "register", "1", regc, "c", "0", END));
    int_reply(rcmd("FCALL", "register", "1", regc, "d", "600000", END));
    /* Later hints never raise an entry. */
    int_reply(rcmd("FCALL", "register", "1", regc, "a", "900000", END));
    assert_true(score_of(tk, "a") <= redis_now_ms());
    size_t n;
    char got[10][32];
    long long token = take(regc, "5000", "0", &n, got);
    assert_true(token > 0);
    assert_int_equal(n, 3);
    assert_in_range(score_of(tk, "a"), now + 5000, redis_now_ms() + 5000);
    redisReply *x = rcmd("HGET", takenk, "a", END);
    assert_int_equal(atoll(x->str), token);
    freeReplyObject(x);
    /* Nothing else is due: token 0. */
    size_t n2;
    char got2[10][32];
    assert_int_equal(take(regc, "5000", "0", &n2, got2), 0);
    assert_int_equal(n2, 0);

    /* b is registered again while taken (an enqueue after its tick): the
     * report may neither remove it nor raise its entry. */
    int_reply(rcmd("FCALL", "register", "1", regc, "b", "-1", END));
    long long b_before = score_of(tk, "b");
    long long removed = int_reply(rcmd("FCALL", "timer_done", "1", regc, num(token),
                                       "a", "2000", "0", "b", "-1", "1", "c", "-1", "1", END));
    assert_int_equal(removed, 1);               /* c only */
    now = redis_now_ms();
    assert_in_range(score_of(tk, "a"), now + 1900, now + 2000);
    assert_int_equal(score_of(tk, "b"), b_before);
    assert_true(is_member(regc, "b"));
    assert_false(is_member(regc, "c"));
    assert_int_equal(score_of(nk, "c"), -1);
    assert_int_equal(score_of(tk, "c"), -1);
    assert_int_equal(exists(takenk), 0);
    /* A stale report only lowers. */
    int_reply(rcmd("FCALL", "timer_done", "1", regc, num(token), "d", "1000", "0", END));
    assert_true(score_of(tk, "d") <= redis_now_ms() + 1000);
    int_reply(rcmd("FCALL", "timer_done", "1", regc, num(token), "d", "900000", "0", END));
    assert_true(score_of(tk, "d") <= redis_now_ms() + 1000);
    /* An idle report removes the entry, not the registration. */
    int_reply(rcmd("FCALL", "register", "1", regc, "a", "0", END));
    token = take(regc, "5000", "0", &n, got);
    assert_int_equal(n, 1);
    int_reply(rcmd("FCALL", "timer_done", "1", regc, num(token), "a", "-1", "0", END));
    assert_int_equal(score_of(tk, "a"), -1);
    assert_true(is_member(regc, "a"));

    expect_error(rcmd("FCALL", "timer_done", "1", regc, "1", "a", "x", "0", END));
    expect_error(rcmd("FCALL", "timer_done", "1", regc, "1", "a", "1", END));
    expect_error(rcmd("FCALL", "timer_take", "1", regc, "0", "5000", "0", "1000", "0", END));
}

/* The sweep puts names only in the SET (an older retryd, retryctl) in the
 * index and makes them due; it runs at most every sweep_every_ms. */
static void test_registry_sweep(void **state)
{
    const char *reg = registry_of("sweep");
    char regc[192];
    snprintf(regc, sizeof regc, "%s", reg);
    int_reply(rcmd("SADD", regc, "s1", "s2", "s3", END));
    size_t n;
    char got[10][32];
    long long token = take(regc, "5000", "100", &n, got);
    assert_true(token > 0);
    assert_int_equal(n, 3);
    assert_int_equal(score_of(companion(regc, "names"), "s2"), 0);
    int_reply(rcmd("FCALL", "timer_done", "1", regc, num(token), "s1", "-1", "0", "s2", "-1",
                   "0", "s3", "-1", "0", END));
    /* The pass ended; the next starts no sooner than sweep_cycle_ms. */
    assert_int_equal(take(regc, "5000", "100", &n, got), 0);
    assert_int_equal(n, 0);
}

static void test_queues_page(void **state)
{
    const char *reg = registry_of("page");
    char regc[192];
    snprintf(regc, sizeof regc, "%s", reg);
    static const char *const names[] = { "d", "a", "c", "b", "a b", "\xc3\xa9" };
    for (size_t i = 0; i < 6; i++)
        int_reply(rcmd("FCALL", "register", "1", regc, names[i], "-1", END));
    static const char *const order[] = { "a", "a b", "b", "c", "d", "\xc3\xa9" };
    char cursor[32] = "";
    size_t seen = 0;
    for (int page = 0; page < 10; page++) {
        redisReply *r = rcmd("FCALL_RO", "queues_page", "1", regc, cursor, "4", END);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->element[0]->integer, 6);
        for (size_t i = 2; i < r->elements; i++) {
            assert_true(seen < 6);
            assert_string_equal(r->element[i]->str, order[seen++]);
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[1]->str);
        freeReplyObject(r);
        if (cursor[0] == '\0') break;
    }
    assert_int_equal(seen, 6);
    expect_error(rcmd("FCALL_RO", "queues_page", "1", regc, "", "0", END));
    expect_error(rcmd("FCALL_RO", "queues_page", "1", regc, "", "1001", END));
}

/* A registry key with a hash tag keeps it: the companions append to it. */
static void test_registry_tagged_prefix(void **state)
{
    char reg[64];
    snprintf(reg, sizeof reg, "t{%ld}:queues", (long)getpid());
    int_reply(rcmd("FCALL", "register", "1", reg, "q", "0", END));
    char timers[96];
    snprintf(timers, sizeof timers, "%s:timers", reg);
    assert_true(score_of(timers, "q") > 0);
}


/* Callers that do not forward hints (redis-cli, retryctl's other commands)
 * get the replies they always got, and the promise is left alone. */
static void test_no_hint_without_the_flag(void **state)
{
    queue_t q;
    queue_init(&q, "nohint");
    msg_t m;
    expect_enqueued(&q, fcall("enqueue", &q, -1, "a", "3", "5000", "", END), &m);
    enqueue_ok(&q, "b", 3, 0);
    claim_one(&q, 30000, &m);
    assert_int_equal(promise(&q), -1);
    expect_ok_msg(fcall("succeed", &q, m.id, "", END), &m);
    long long r[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(promise(&q), -1);
}
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enqueue_ids_and_fields),
        cmocka_unit_test(test_enqueue_payload_binary_safe),
        cmocka_unit_test(test_enqueue_delayed),
        cmocka_unit_test(test_enqueue_bad_arguments),
        cmocka_unit_test(test_numeric_arguments_reject_infinity),
        cmocka_unit_test(test_claim_fifo_and_lease),
        cmocka_unit_test(test_claim_count),
        cmocka_unit_test(test_claim_bad_arguments),
        cmocka_unit_test(test_claim_due_retry_before_fresh),
        cmocka_unit_test(test_claim_replayed_next),
        cmocka_unit_test(test_claim_skips_deleted),
        cmocka_unit_test(test_claim_skips_deleted_head),
        cmocka_unit_test(test_succeed_tokens_and_states),
        cmocka_unit_test(test_fail_tokens_and_states),
        cmocka_unit_test(test_extend_tokens_and_states),
        cmocka_unit_test(test_succeed_moves_to_succeeded),
        cmocka_unit_test(test_fail_backoff_then_dead),
        cmocka_unit_test(test_fail_dead_at_once),
        cmocka_unit_test(test_fail_retry_after_override),
        cmocka_unit_test(test_fail_backoff_cap),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_extend),
        cmocka_unit_test(test_reclaim_expired_lease),
        cmocka_unit_test(test_reclaim_last_retry_is_dead),
        cmocka_unit_test(test_promote),
        cmocka_unit_test(test_promoted_batches_keep_due_order),
        cmocka_unit_test(test_tick),
        cmocka_unit_test(test_tick_next_in_ms_from_lease),
        cmocka_unit_test(test_tick_dead_ttl_zero_keeps),
        cmocka_unit_test(test_tick_limit),
        cmocka_unit_test(test_get),
        cmocka_unit_test(test_list_by_status),
        cmocka_unit_test(test_list_pages_dead),
        cmocka_unit_test(test_list_pages_pending),
        cmocka_unit_test(test_list_pages_all),
        cmocka_unit_test(test_list_cursor_member_removed),
        cmocka_unit_test(test_list_cursor_member_removed_in_large_tie),
        cmocka_unit_test(test_list_bad_arguments),
        cmocka_unit_test(test_claim_every_id_once),
        cmocka_unit_test(test_enqueue_idempotency_key),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_succeed_many),
        cmocka_unit_test(test_wake_channel),
        cmocka_unit_test(test_timer_hints),
        cmocka_unit_test(test_tick_promise_and_empty),
        cmocka_unit_test(test_registry_take_done),
        cmocka_unit_test(test_registry_sweep),
        cmocka_unit_test(test_queues_page),
        cmocka_unit_test(test_registry_tagged_prefix),
        cmocka_unit_test(test_no_hint_without_the_flag),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
