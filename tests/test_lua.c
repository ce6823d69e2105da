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

#include "retryd/keys.h"

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

/* "<base>:<suffix>", e.g. qkey(q, "3:ready"). */
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

/* FCALL fn (by its versioned name, RD_FUNCTION(fn)) with KEYS[1] = the queue's
 * base and, when id >= 0, KEYS[2] = the message key and ARGV[1] = id, then
 * nargs more ARGV of lens[i] bytes each (strlen when lens is NULL).
 * Binary-safe. Caller frees the reply. */
static redisReply *fcall_lib(const char *prefix, const char *fn, const queue_t *q, long long id,
                             size_t nargs, const char *const *args, const size_t *lens)
{
    size_t cap = nargs + 6, argc = 0;
    const char **argv = calloc(cap, sizeof *argv);
    size_t *argvlen = calloc(cap, sizeof *argvlen);
    assert_non_null(argv);
    assert_non_null(argvlen);
#define PUSH(s, n) do { argv[argc] = (s); argvlen[argc++] = (n); } while (0)
    char name[64];
    snprintf(name, sizeof name, "%s%s", prefix, fn);
    PUSH("FCALL", 5);
    PUSH(name, strlen(name));
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

static redisReply *fcall_bin(const char *fn, const queue_t *q, long long id, size_t nargs,
                             const char *const *args, const size_t *lens)
{
    return fcall_lib(RD_FUNCTION(""), fn, q, id, nargs, args, lens);
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

/* fcall of the previous release's library, retryd_v2 (tests/fixtures/
 * retryd_v2.lua, loaded by load_v2): what a daemon of that release calls. */
static redisReply *fcall_v2(const char *fn, const queue_t *q, long long id, ...)
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
    return fcall_lib("retryd_v2_", fn, q, id, n, args, NULL);
}

/* ------------------------------------------------------------------------ */
/* Messages: a flat {"id", id, field, value, ...} array, copied             */
/* ------------------------------------------------------------------------ */

#define MAX_FIELDS 20
#define MAX_VALUE 1024

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

/* The history array (six strings per entry) as one text: per failure
 * "<attempt>/<lease_expired>/<worker>/<error>;", per replay mark "R;"; each
 * entry's time must be a positive integer. */
static void history_text(const redisReply *v, field_t *f)
{
    assert_int_equal(v->elements % 6, 0);
    f->value[0] = '\0';
    f->len = 0;
    for (size_t e = 0; e < v->elements; e += 6) {
        for (size_t j = 0; j < 6; j++) assert_int_equal(v->element[e + j]->type, REDIS_REPLY_STRING);
        assert_true(parse_int(v->element[e + 1]->str, v->element[e + 1]->len, "history at") > 0);
        char one[MAX_VALUE];
        if (strcmp(v->element[e]->str, "replayed") == 0)
            snprintf(one, sizeof one, "R;");
        else
            snprintf(one, sizeof one, "%s/%s/%s/%.40s;", v->element[e + 2]->str,
                     v->element[e + 3]->str, v->element[e + 4]->str, v->element[e + 5]->str);
        assert_true(f->len + strlen(one) < MAX_VALUE);
        memcpy(f->value + f->len, one, strlen(one) + 1);
        f->len += strlen(one);
    }
}

static void msg_add(msg_t *m, const char *name, const char *value, size_t len)
{
    assert_true(m->nfields < MAX_FIELDS);
    assert_true(strlen(name) < sizeof m->f[0].name);
    assert_true(len < MAX_VALUE);
    field_t *f = &m->f[m->nfields++];
    strcpy(f->name, name);
    memcpy(f->value, value, len);
    f->value[len] = '\0';
    f->len = len;
}

/* A value that is an integer reply or a decimal string: the id (enqueue
 * replies with INCR's integer, others with the id they were given or read). */
static long long int_or_text(const redisReply *v, const char *what)
{
    if (v->type == REDIS_REPLY_INTEGER) return v->integer;
    if (v->type != REDIS_REPLY_STRING) fail_msg("%s has reply type %d", what, v->type);
    return parse_int(v->str, v->len, what);
}

/* A message a claim leased, by position (leased_reply in lua/02_record.lua):
 * {id, payload, retry_count, max_retries, created_at, updated_at,
 * lease_expires_at, lease_token}, numbers as integer replies, then optional
 * name, value pairs. Read into the same fields as reply_message's form,
 * status "processing" added, so the assertions read either alike. */
static size_t msg_parse_leased(const redisReply *r, msg_t *m)
{
    static const char *const ints[] = { NULL, NULL, "retry_count", "max_retries", "created_at",
                                        "updated_at", "lease_expires_at" };
    assert_true(r->elements >= 8 && r->elements % 2 == 0);
    m->id = int_or_text(r->element[0], "id");
    assert_int_equal(r->element[1]->type, REDIS_REPLY_STRING);
    msg_add(m, "payload", r->element[1]->str, r->element[1]->len);
    msg_add(m, "status", "processing", strlen("processing"));
    for (size_t i = 2; i <= 6; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            fail_msg("leased %s is reply type %d, not an integer", ints[i], r->element[i]->type);
        char text[32];
        int n = snprintf(text, sizeof text, "%lld", r->element[i]->integer);
        msg_add(m, ints[i], text, (size_t)n);
    }
    assert_int_equal(r->element[7]->type, REDIS_REPLY_STRING);
    msg_add(m, "lease_token", r->element[7]->str, r->element[7]->len);
    return 8;
}

static void msg_parse(const redisReply *r, msg_t *m)
{
    memset(m, 0, sizeof *m);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_true(r->elements >= 2 && r->elements % 2 == 0);
    size_t first = 2;
    if (r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "id") == 0)
        m->id = int_or_text(r->element[1], "id");
    else
        first = msg_parse_leased(r, m);
    for (size_t i = first; i < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        assert_int_equal(k->type, REDIS_REPLY_STRING);
        if (v->type == REDIS_REPLY_ARRAY && strcmp(k->str, "history") == 0) {
            history_text(v, &m->f[m->nfields]);
            strcpy(m->f[m->nfields++].name, "history");
            continue;
        }
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

/* Sets retry_count or max_retries of message id (a byte each in the record's
 * header, docs/storage.md): test setup for counts the API cannot reach. */
static void hset(const queue_t *q, long long id, const char *field, const char *value)
{
    long long offset = strcmp(field, "retry_count") == 0 ? 1 : 2;
    assert_true(offset == 1 || strcmp(field, "max_retries") == 0);
    int_reply(rcmd("EVAL", "return redis.call('SETRANGE', KEYS[1], ARGV[1], "
                           "struct.pack('B', tonumber(ARGV[2])))",
                   "1", mkey(q, id), num(offset), value, END));
}

/* One field of message id as `get` answers it, "" when it has none. */
static void get_field(const queue_t *q, long long id, const char *field, char *out, size_t size)
{
    redisReply *r = fcall("get", q, id, END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_string_equal(r->element[0]->str, "ok");
    const redisReply *m = r->element[1];
    out[0] = '\0';
    for (size_t i = 2; i + 1 < m->elements; i += 2)
        if (strcmp(m->element[i]->str, field) == 0)
            snprintf(out, size, "%s", m->element[i + 1]->str);
    freeReplyObject(r);
}

/* Makes a scheduled id due now (as if its retry_after had passed). */
static void make_due(const queue_t *q, long long id)
{
    assert_int_equal(int_reply(rcmd("ZADD", qkey(q, "3:scheduled"), "XX", "CH", "0", num(id), END)), 1);
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
    assert_int_equal(llen(qkey(&q, "3:ready")), 3);
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 0);
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
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), m.id), msg_int(&m, "retry_after"));
    assert_int_equal(llen(qkey(&q, "3:ready")), 0);
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

/* Integers past int64 (to_int takes "1e19"): int_arg must not spell them as
 * "%d" does, wrapped to -2^63, which made a delay of 1e19 ms due at once. */
static void test_numeric_arguments_past_int64(void **state)
{
    queue_t q;
    queue_init(&q, "huge");
    msg_t m;
    expect_enqueued(&q, fcall("enqueue", &q, -1, "later", "3", "1e19", END), &m);
    redisReply *r = rcmd("ZSCORE", qkey(&q, "3:scheduled"), num(m.id), END);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    double score = strtod(r->str, NULL);
    freeReplyObject(r);
    if (score < 1e19) fail_msg("scheduled at %.17g, want 1e19 ms from now", score);
    expect_nothing_to_claim(&q);
    assert_int_equal(llen(qkey(&q, "3:due")), 0);
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
        assert_int_equal(zscore(qkey(&q, "3:processing"), m.id), msg_int(&m, "lease_expires_at"));
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
        assert_int_equal(zscore(qkey(&q, "3:processing"), m[i].id), msg_int(&m[i], "lease_expires_at"));
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
    assert_int_equal(zcard(qkey(&q, "3:processing")), 5);
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
    assert_int_equal(llen(qkey(&q, "3:ready")), 1);
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
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), 1), msg_int(&m, "retry_after"));

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
    assert_int_equal(zscore(qkey(&q, "3:processing"), 1), -1);
    assert_int_equal(llen(qkey(&q, "3:ready")), 0);
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
    assert_int_equal(zscore(qkey(&q, "3:processing"), id), -1);
    assert_int_equal(zscore(qkey(&q, "3:succeeded"), id), msg_int(&m, "updated_at"));
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
        assert_int_equal(zscore(qkey(&q, "3:scheduled"), id), msg_int(&m, "retry_after"));
        assert_int_equal(zscore(qkey(&q, "3:processing"), id), -1);
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
    assert_int_equal(zscore(qkey(&q, "3:dead"), id), msg_int(&m, "updated_at"));
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), id), -1);
    assert_int_equal(zscore(qkey(&q, "3:processing"), id), -1);
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
    assert_true(zscore(qkey(&q, "3:dead"), a) > 0);

    /* retryable "0": dead with retries left. */
    long long b = enqueue_ok(&q, "job", 5, 0);
    claim_one(&q, 30000, &m);
    fail_ok(&q, b, "poison", "0", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_string_equal(msg_str(&m, "last_error"), "poison");
    assert_true(zscore(qkey(&q, "3:dead"), b) > 0);
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 0);
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
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), id), msg_int(&m, "retry_after"));
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
    assert_int_equal(zscore(qkey(&q, "3:dead"), id), -1);
    assert_int_equal(llen(qkey(&q, "3:due")), 1);
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
    assert_int_equal(zscore(qkey(&q, "3:processing"), id), msg_int(&e, "lease_expires_at"));

    /* A lease can be shortened too: the deadline is now + lease_ms. */
    expect_ok_msg(fcall("extend", &q, id, "", "5000", END), &e);
    assert_int_equal(msg_int(&e, "lease_expires_at"), msg_int(&e, "updated_at") + 5000);
    assert_int_equal(zscore(qkey(&q, "3:processing"), id), msg_int(&e, "lease_expires_at"));

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
    assert_int_equal(zscore(qkey(&q, "3:processing"), short_id), -1);
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), short_id), msg_int(&m, "retry_after"));
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
    assert_true(zscore(qkey(&q, "3:dead"), id) > 0);
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
        int_reply(rcmd("ZADD", qkey(&q, "3:scheduled"), "XX", num(6 - id), num(id), END));
    expect_ints(fcall("promote", &q, -1, "3", END), 2, r);
    assert_int_equal(r[0], 3);
    assert_int_equal(r[1], 0); /* more are due already */
    assert_int_equal(llen(qkey(&q, "3:due")), 3);
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 2);

    /* Within one batch the earliest due sits at the claim end (the right). */
    redisReply *ready = rcmd("LRANGE", qkey(&q, "3:due"), "0", "-1", END);
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
        int_reply(rcmd("ZADD", qkey(&q, "3:scheduled"), "XX", num(id), num(id), END));
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
    long long dead_at = zscore(qkey(&q, "3:dead"), dead);
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
    assert_int_equal(zscore(qkey(&q, "3:dead"), dead), -1);
    assert_int_equal(counter(&q, "expired_dead"), 1);
    assert_int_equal(exists(mkey(&q, done)), 1); /* succeeded_ttl 0 keeps it */
    expect_ok_msg(fcall("get", &q, leased, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "last_error"), "lease expired");
    assert_int_equal(counter(&q, "lease_expired"), 1);
    assert_int_equal(llen(qkey(&q, "3:due")), 1);
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
    assert_int_equal(zscore(qkey(&q, "3:succeeded"), done), -1);
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
    wait_until_ms(zscore(qkey(&q, "3:dead"), dead) + 2);
    long long r[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", END), TICK_N, r);
    assert_int_equal(r[2], 0);
    assert_int_equal(exists(mkey(&q, dead)), 1);
    assert_true(zscore(qkey(&q, "3:dead"), dead) > 0);
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
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 3);
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
        { "", { 4, 5, 6, 3, 2, 1 }, 6 },   /* pending, processing, succeeded, dead */
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
    const long long want[] = { 1, 2, 3, 4, 5 };   /* pending in claim order */
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
/* export                                                                   */
/* ------------------------------------------------------------------------ */

/* CSV injection (OWASP): a cell that starts with = + - @ TAB or CR would be
 * run as a formula by a spreadsheet; export writes it quoted behind a single
 * quote. Other cells keep RFC 4180 quoting only (docs/reference.md "Operator CLI (retryctl)"). */
static void test_export_csv_neutralises_formulas(void **state)
{
    static const struct { const char *payload, *error, *tail; } rows[] = {
        /* each row ends with history_count: one failure each */
        { "=1+1", "=HYPERLINK(\"http://x\",\"y\")",
          ",\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",\"'=1+1\",1" },
        { "+SUM(A1)", "plain error", ",plain error,\"'+SUM(A1)\",1" },
        { "-2+3", "@cmd|' /C calc'!A0", ",\"'@cmd|' /C calc'!A0\",\"'-2+3\",1" },
        { "\tlead tab", "\rlead cr", ",\"'\rlead cr\",\"'\tlead tab\",1" },
        { "a=b, c", "x-y", ",x-y,\"a=b, c\",1" },
        { "'quoted", "", ",,'quoted,1" },
    };
    const size_t n = sizeof rows / sizeof rows[0];
    queue_t q;
    queue_init(&q, "export-csv");
    for (size_t i = 0; i < n; i++) {
        msg_t m;
        long long id = enqueue_ok(&q, rows[i].payload, 1, 0);
        claim_one(&q, 60000, &m);
        assert_int_equal(m.id, id);
        fail_ok(&q, id, rows[i].error, "1", -1, &m);
    }
    redisReply *r = fcall("export", &q, -1, "csv", "dead", "100", "", END);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != n + 1)
        fail_msg("export csv: %s", reply_desc(r));
    /* Dead letters come oldest death first: row i is message i + 1. */
    for (size_t i = 0; i < n; i++) {
        const redisReply *line = r->element[1 + i];
        assert_int_equal(line->type, REDIS_REPLY_STRING);
        size_t tail = strlen(rows[i].tail);
        if (line->len < tail || memcmp(line->str + line->len - tail, rows[i].tail, tail) != 0)
            fail_msg("row %zu is \"%s\", want it to end with \"%s\"", i + 1, line->str,
                     rows[i].tail);
        char head[32];
        snprintf(head, sizeof head, "%zu,dead,", i + 1);
        assert_memory_equal(line->str, head, strlen(head));
    }
    freeReplyObject(r);
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
    assert_int_equal(llen(qkey(&q, "3:ready")), 1);
    assert_int_equal(zcard(qkey(&q, "3:scheduled")), 0);
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
    assert_int_equal(zcard(qkey(&q, "3:processing")), 3);

    assert_int_equal(int_reply(fcall("release", &q, -1, "1", t1, "2", t2, END)), 2);
    msg_t g;
    expect_ok_msg(fcall("get", &q, 1, END), &g);
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_count"), 0);
    assert_no_field(&g, "lease_token");
    assert_no_field(&g, "lease_expires_at");
    assert_no_field(&g, "last_error");
    assert_int_equal(zscore(qkey(&q, "3:processing"), 1), -1);
    assert_int_equal(zscore(qkey(&q, "3:processing"), 2), -1);
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
        assert_int_equal(zscore(qkey(&q, "3:succeeded"), id), msg_int(&g, "updated_at"));
        assert_int_equal(zscore(qkey(&q, "3:processing"), id), -1);
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

/* ------------------------------------------------------------------------ */
/* settle_claim (docs/reference.md "Settle and claim")                                                   */
/* ------------------------------------------------------------------------ */

/* One settlement's six ARGV: id, token, outcome, error, retryable, retry_after_ms. */
typedef struct {
    long long id;
    const char *token, *outcome, *error, *retryable;
    long long retry_after_ms;
} settle_t;

#define SUCCEEDED(id, token) { (id), (token), "succeeded", "", "1", -1 }
#define FAILED(id, token, error, retryable, after) { (id), (token), "failed", (error), (retryable), (after) }

/* FCALL settle_claim lease_ms count n, then the n settlements. */
static redisReply *settle_claim(const queue_t *q, long long lease_ms, int count, size_t n,
                                const settle_t *items)
{
    size_t nargs = 3 + 6 * n;
    const char **args = calloc(nargs, sizeof *args);
    char (*nums)[24] = calloc(2 * n + 3, sizeof *nums);
    assert_non_null(args);
    assert_non_null(nums);
    snprintf(nums[0], 24, "%lld", lease_ms);
    snprintf(nums[1], 24, "%d", count);
    snprintf(nums[2], 24, "%zu", n);
    args[0] = nums[0];
    args[1] = nums[1];
    args[2] = nums[2];
    for (size_t i = 0; i < n; i++) {
        const char **a = args + 3 + 6 * i;
        snprintf(nums[3 + 2 * i], 24, "%lld", items[i].id);
        snprintf(nums[4 + 2 * i], 24, "%lld", items[i].retry_after_ms);
        a[0] = nums[3 + 2 * i];
        a[1] = items[i].token;
        a[2] = items[i].outcome;
        a[3] = items[i].error;
        a[4] = items[i].retryable;
        a[5] = nums[4 + 2 * i];
    }
    redisReply *r = fcall_bin("settle_claim", q, -1, nargs, args, NULL);
    free(args);
    free(nums);
    return r;
}

/* {"ok", {status...}, message...}: the n statuses must be want; returns how
 * many messages (at most max) were claimed, into out. */
#define expect_settled(r, n, want, out, max) \
    expect_settled_at((r), (n), (want), (out), (max), __FILE__, __LINE__)
static size_t expect_settled_at(redisReply *r, size_t n, const char *const *want, msg_t *out,
                                size_t max, const char *file, int line)
{
    char desc[256];
    snprintf(desc, sizeof desc, "%s", reply_desc(r));
    bool good = has_code(r, "ok") && r->elements >= 2 && r->elements - 2 <= max &&
                r->element[1]->type == REDIS_REPLY_ARRAY && r->element[1]->elements == n;
    for (size_t i = 0; good && i < n; i++) {
        const redisReply *st = r->element[1]->element[i];
        good = st->type == REDIS_REPLY_STRING && strcmp(st->str, want[i]) == 0;
        if (!good)
            snprintf(desc, sizeof desc, "status %zu %s, expected \"%s\"", i, reply_desc(st), want[i]);
    }
    if (!good) {
        freeReplyObject(r);
        FAIL_AT(file, line, "expected {\"ok\", %zu statuses, up to %zu messages}, got %s", n, max,
                desc);
    }
    size_t got = r->elements - 2;
    for (size_t i = 0; i < got; i++)
        msg_parse(r->element[i + 2], &out[i]);
    freeReplyObject(r);
    return got;
}

/* Copies a claimed message's lease token. */
static void token_of(const msg_t *m, char out[64])
{
    snprintf(out, 64, "%s", msg_str(m, "lease_token"));
}

/* Every outcome in one call, each exactly as succeed and fail leave it, and
 * the claim after them. */
static void test_settle_claim_mixed_outcomes(void **state)
{
    queue_t q;
    queue_init(&q, "settlemix");
    for (int i = 0; i < 6; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m[6];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "4", END), m, 6), 4);
    char t1[64], t2[64], t3[64], t4[64];
    token_of(&m[0], t1);
    token_of(&m[1], t2);
    token_of(&m[2], t3);
    token_of(&m[3], t4);

    settle_t items[] = {
        SUCCEEDED(1, t1),
        FAILED(2, t2, "smtp timeout", "1", -1),     /* retry in 2 s */
        FAILED(3, "", "poison", "0", -1),           /* dead now */
        FAILED(4, t4, "slow down", "1", 7000),      /* retry_after overrides the backoff */
        SUCCEEDED(999, ""),                         /* no such message */
        SUCCEEDED(5, ""),                           /* pending, not processing */
        SUCCEEDED(1, t1),                           /* settled a moment ago */
    };
    static const char *const want[] = { "succeeded", "pending", "dead", "pending", "not_found",
                                        "invalid_state", "invalid_state" };
    long long before = redis_now_ms();
    msg_t got[4];
    size_t n = expect_settled(settle_claim(&q, 45000, 3, 7, items), 7, want, got, 4);
    long long after = redis_now_ms();

    /* The claim ran after them: 5 and 6 are what is claimable (2 and 4 are
     * not due yet), with claim's lease. */
    assert_int_equal(n, 2);
    assert_int_equal(got[0].id, 5);
    assert_int_equal(got[1].id, 6);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(msg_str(&got[i], "status"), "processing");
        assert_string_equal(msg_str(&got[i], "payload"), "job");
        assert_int_equal(msg_int(&got[i], "lease_expires_at"), msg_int(&got[i], "updated_at") + 45000);
        assert_int_equal(zscore(qkey(&q, "3:processing"), got[i].id), msg_int(&got[i], "lease_expires_at"));
    }
    assert_string_not_equal(msg_str(&got[0], "lease_token"), msg_str(&got[1], "lease_token"));

    msg_t g;
    expect_ok_msg(fcall("get", &q, 1, END), &g);
    assert_string_equal(msg_str(&g, "status"), "succeeded");
    assert_no_field(&g, "lease_token");
    assert_no_field(&g, "lease_expires_at");
    assert_in_range(msg_int(&g, "updated_at"), before, after);
    assert_int_equal(zscore(qkey(&q, "3:succeeded"), 1), msg_int(&g, "updated_at"));
    assert_int_equal(zscore(qkey(&q, "3:processing"), 1), -1);

    expect_ok_msg(fcall("get", &q, 2, END), &g);
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_count"), 1);
    assert_string_equal(msg_str(&g, "last_error"), "smtp timeout");
    assert_int_equal(msg_int(&g, "retry_after") - msg_int(&g, "updated_at"), 2000);
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), 2), msg_int(&g, "retry_after"));
    assert_no_field(&g, "lease_token");

    expect_ok_msg(fcall("get", &q, 3, END), &g);
    assert_string_equal(msg_str(&g, "status"), "dead");
    assert_int_equal(msg_int(&g, "retry_count"), 1);
    assert_string_equal(msg_str(&g, "last_error"), "poison");
    assert_int_equal(zscore(qkey(&q, "3:dead"), 3), msg_int(&g, "updated_at"));
    assert_int_equal(zscore(qkey(&q, "3:processing"), 3), -1);
    /* The dead letter is counted in top_errors and in the events stream. */
    redisReply *r = rcmd("ZSCORE", qkey(&q, "errors"), "poison", END);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "1");
    freeReplyObject(r);
    r = rcmd("XREVRANGE", qkey(&q, "events"), "+", "-", "COUNT", "1", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    const redisReply *fields = r->element[0]->element[1];
    assert_string_equal(fields->element[1]->str, "dead");
    assert_string_equal(fields->element[3]->str, "3");
    assert_string_equal(fields->element[5]->str, "poison");
    freeReplyObject(r);

    expect_ok_msg(fcall("get", &q, 4, END), &g);
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_after") - msg_int(&g, "updated_at"), 7000);

    assert_int_equal(counter(&q, "succeeded"), 1);
    assert_int_equal(counter(&q, "failed"), 3);
    assert_int_equal(counter(&q, "retried"), 2);
    assert_int_equal(counter(&q, "dead"), 1);
    assert_int_equal(counter(&q, "delay_le_2"), 1);
    assert_int_equal(counter(&q, "delay_le_8"), 1);
    assert_int_equal(counter(&q, "claimed"), 6);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 2);
}

/* The failure path is fail's: the backoff table, then dead at max_retries,
 * and a failure due at once is claimed back in the same call, before fresh
 * messages (due retries first). */
static void test_settle_claim_backoff_then_dead(void **state)
{
    static const long long delays_ms[] = { 2000, 4000, 8000, 16000 };
    static const char *const pending[] = { "pending" }, *const dead[] = { "dead" };
    queue_t q;
    queue_init(&q, "settlebackoff");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m, got[2];
    char token[64];
    for (int n = 1; n <= 4; n++) {
        claim_one(&q, 30000, &m);
        assert_int_equal(m.id, id);
        token_of(&m, token);
        settle_t f = FAILED(id, token, "again", "1", -1);
        /* count 0: settle only. */
        assert_int_equal(expect_settled(settle_claim(&q, 30000, 0, 1, &f), 1, pending, got, 0), 0);
        expect_ok_msg(fcall("get", &q, id, END), &m);
        assert_int_equal(msg_int(&m, "retry_count"), n);
        assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), delays_ms[n - 1]);
        make_due(&q, id);
    }
    claim_one(&q, 30000, &m);
    token_of(&m, token);
    settle_t f = FAILED(id, token, "last", "1", -1);
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 1, 1, &f), 1, dead, got, 1), 0);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 5);
    assert_no_field(&m, "retry_after");
    assert_int_equal(zscore(qkey(&q, "3:dead"), id), msg_int(&m, "updated_at"));
    assert_int_equal(counter(&q, "failed"), 5);
    assert_int_equal(counter(&q, "retried"), 4);
    assert_int_equal(counter(&q, "dead"), 1);

    /* retry_after 0: due at once, so the claim in the same call takes it
     * back, before the fresh message enqueued after it. */
    long long a = enqueue_ok(&q, "again", 3, 0);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, a);
    long long fresh = enqueue_ok(&q, "fresh", 3, 0);
    token_of(&m, token);
    settle_t now = FAILED(a, token, "transient", "1", 0);
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 2, 1, &now), 1, pending, got, 2), 2);
    assert_int_equal(got[0].id, a);
    assert_int_equal(msg_int(&got[0], "retry_count"), 1);
    assert_string_equal(msg_str(&got[0], "last_error"), "transient");
    assert_string_not_equal(msg_str(&got[0], "lease_token"), token);
    assert_int_equal(got[1].id, fresh);
}

/* Settlements apply when nothing is claimable, and a claim of an empty
 * queue counts nothing. */
static void test_settle_claim_nothing_claimable(void **state)
{
    static const char *const want[] = { "succeeded", "succeeded" };
    queue_t q;
    queue_init(&q, "settleempty");
    enqueue_ok(&q, "job", 3, 0);
    enqueue_ok(&q, "job", 3, 0);
    msg_t m[2];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "2", END), m, 2), 2);
    settle_t items[] = { SUCCEEDED(1, ""), SUCCEEDED(2, "") };
    msg_t got[1];
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 100, 2, items), 2, want, got, 0), 0);
    assert_int_equal(zcard(qkey(&q, "3:succeeded")), 2);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 0);
    assert_int_equal(counter(&q, "succeeded"), 2);
    assert_int_equal(counter(&q, "claimed"), 2);

    /* No settlement at all is a plain claim. */
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 1, 0, NULL), 0, NULL, got, 0), 0);
}

/* A lease token that is not the current one changes nothing; "" accepts
 * whatever lease is current. */
static void test_settle_claim_lease_mismatch(void **state)
{
    static const char *const mismatch[] = { "lease_mismatch", "lease_mismatch" };
    static const char *const ok[] = { "succeeded", "pending" };
    queue_t q;
    queue_init(&q, "settlelease");
    enqueue_ok(&q, "job", 3, 0);
    enqueue_ok(&q, "job", 3, 0);
    msg_t m[2], got[1];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "2", END), m, 2), 2);
    settle_t wrong[] = { SUCCEEDED(1, "not-the-token"), FAILED(2, "1.1", "e", "1", -1) };
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 1, 2, wrong), 2, mismatch, got, 1), 0);
    for (int i = 0; i < 2; i++) {
        msg_t g;
        expect_ok_msg(fcall("get", &q, m[i].id, END), &g);
        assert_string_equal(msg_str(&g, "status"), "processing");
        assert_string_equal(msg_str(&g, "lease_token"), msg_str(&m[i], "lease_token"));
        assert_int_equal(zscore(qkey(&q, "3:processing"), m[i].id), msg_int(&m[i], "lease_expires_at"));
    }
    assert_int_equal(counter(&q, "failed"), 0);
    char t1[64];
    token_of(&m[0], t1);
    settle_t right[] = { SUCCEEDED(1, t1), FAILED(2, "", "e", "1", -1) };
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 1, 2, right), 2, ok, got, 1), 0);
}

/* Every argument is checked before anything is written: a bad item anywhere
 * leaves the good ones before it unapplied, and nothing is claimed. */
static void test_settle_claim_atomic(void **state)
{
    queue_t q;
    queue_init(&q, "settleatomic");
    for (int i = 0; i < 3; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t m[2];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "2", END), m, 2), 2);
    const settle_t bad_last[][2] = {
        { SUCCEEDED(1, ""), { 2, "", "bogus", "", "1", -1 } },
        { SUCCEEDED(1, ""), FAILED(2, "", "e", "maybe", -1) },
        { SUCCEEDED(1, ""), { 0, "", "succeeded", "", "1", -1 } },
    };
    for (size_t i = 0; i < sizeof bad_last / sizeof bad_last[0]; i++)
        expect_error(settle_claim(&q, 30000, 1, 2, bad_last[i]));
    settle_t one = SUCCEEDED(1, "");
    expect_error(settle_claim(&q, 0, 1, 1, &one));
    expect_error(settle_claim(&q, 43200001, 1, 1, &one));
    expect_error(settle_claim(&q, 30000, 101, 1, &one));
    expect_error(settle_claim(&q, 30000, -1, 1, &one));
    expect_error(fcall("settle_claim", &q, -1, "30000", "1", "1", "1", "", "failed", "e", "1", "x", END));
    /* n must match the arguments that follow. */
    expect_error(fcall("settle_claim", &q, -1, "30000", "1", "2", "1", "", "succeeded", "", "1", "-1", END));
    expect_error(fcall("settle_claim", &q, -1, "30000", "1", "1", END));
    expect_error(fcall("settle_claim", &q, -1, "30000", "1", END));

    for (long long id = 1; id <= 2; id++) {
        msg_t g;
        expect_ok_msg(fcall("get", &q, id, END), &g);
        assert_string_equal(msg_str(&g, "status"), "processing");
    }
    assert_int_equal(llen(qkey(&q, "3:ready")), 1);
    assert_int_equal(counter(&q, "succeeded"), 0);
    assert_int_equal(counter(&q, "claimed"), 2);
}

/* At most 100 settlements and 100 claims in one call. */
static void test_settle_claim_bounds(void **state)
{
    queue_t q;
    queue_init(&q, "settlebounds");
    for (int i = 0; i < 201; i++)
        enqueue_ok(&q, "job", 3, 0);
    msg_t *m = calloc(100, sizeof *m);
    assert_non_null(m);
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "100", END), m, 100), 100);
    settle_t items[101];
    const char *want[100];
    for (int i = 0; i < 101; i++) {
        settle_t s = SUCCEEDED(i + 1, "");
        items[i] = s;
        if (i < 100)
            want[i] = "succeeded";
    }
    expect_error(settle_claim(&q, 30000, 1, 101, items));
    assert_int_equal(counter(&q, "succeeded"), 0);
    assert_int_equal(expect_settled(settle_claim(&q, 30000, 100, 100, items), 100, want, m, 100), 100);
    assert_int_equal(m[0].id, 101);
    assert_int_equal(m[99].id, 200);
    assert_int_equal(counter(&q, "succeeded"), 100);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 100);
    free(m);
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

/* A claim promotes every due retry it finds (up to 100) but leases only
 * `count`: the ones it leaves in the due list are claimable now, and the
 * waiters of other instances hear of it, as they would from a tick. A claim
 * that leaves nothing behind wakes nobody. */
static void test_claim_that_promotes_more_than_it_takes_wakes(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "promowake");
    redisContext *sub = subscribe(qkey(&q, "wake"));
    long long a = enqueue_ok(&q, "job", 3, 60000);
    long long b = enqueue_ok(&q, "job", 3, 60000);
    assert_int_equal(wake_count(sub), 0);
    make_due(&q, a);
    make_due(&q, b);

    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, a);
    assert_int_equal(wake_count(sub), 1); /* b is due and nobody took it */
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, b);
    assert_int_equal(wake_count(sub), 0); /* nothing promoted, nothing left */

    long long c = enqueue_ok(&q, "job", 3, 60000);
    wake_count(sub);
    make_due(&q, c);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, c);
    assert_int_equal(wake_count(sub), 0); /* promoted one, took it */
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
    assert_int_equal(zcard(qkey(&q, "3:processing")), N);
    assert_int_equal(counter(&q, "claimed"), N);
}

/* ------------------------------------------------------------------------ */
/* Bounded work, orphans, walks under claims, reply bytes                   */
/* ------------------------------------------------------------------------ */

/* The byte budget of one reply (REPLY_BYTES in lua/00_common.lua). */
enum { REPLY_BYTES = 4 * 1024 * 1024 };

/* A listing page without copying the messages: ids, the bytes of every
 * message field (names and values), the next cursor. Returns how many. */
static size_t raw_page(redisReply *r, long long *ids, size_t max_ids, long long *bytes,
                       char *next, size_t next_size)
{
    if (!has_code(r, "ok"))
        fail_msg("list: %s", reply_desc(r));
    assert_true(r->elements >= 3);
    assert_int_equal(r->element[2]->type, REDIS_REPLY_STRING);
    assert_true(r->element[2]->len < next_size);
    memcpy(next, r->element[2]->str, r->element[2]->len + 1);
    size_t n = r->elements - 3;
    assert_true(n <= max_ids);
    *bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const redisReply *m = r->element[3 + i];
        assert_int_equal(m->type, REDIS_REPLY_ARRAY);
        assert_true(m->elements >= 2);
        const redisReply *id = m->element[1];
        ids[i] = id->type == REDIS_REPLY_INTEGER ? id->integer : parse_int(id->str, id->len, "id");
        for (size_t j = 2; j < m->elements; j++)
            *bytes += (long long)m->element[j]->len;
    }
    freeReplyObject(r);
    return n;
}

/* One export page: ids (first column of tsv/csv lines) and the line bytes. */
static size_t raw_export(redisReply *r, long long *ids, size_t max_ids, long long *bytes,
                         char *next, size_t next_size)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "bad_cursor") == 0)
        fail_msg("export: %s", reply_desc(r));
    assert_true(r->element[0]->len < next_size);
    memcpy(next, r->element[0]->str, r->element[0]->len + 1);
    size_t n = r->elements - 1;
    assert_true(n <= max_ids);
    *bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const redisReply *line = r->element[1 + i];
        assert_int_equal(line->type, REDIS_REPLY_STRING);
        const char *s = line->str;
        if (*s == '{') { /* jsonl: "id":N */
            const char *p = strstr(s, "\"id\":");
            assert_non_null(p);
            s = p + 5;
        }
        ids[i] = strtoll(s, NULL, 10);
        *bytes += (long long)line->len;
    }
    freeReplyObject(r);
    return n;
}

/* Every list and export call on a queue whose seq is 5,000,000 with a few
 * messages stays far below 10 ms (SLOWLOG), and a walk ends in few pages:
 * gaps in ids cost nothing. */
static void test_list_bounded_work(void **state)
{
    queue_t q;
    queue_init(&q, "bounded");
    freeReplyObject(rcmd("SET", qkey(&q, "seq"), "5000000", END));
    long long dead = make_dead(&q, "bang");              /* 5000001 */
    long long pending = enqueue_ok(&q, "only", 3, 0);    /* 5000002 */
    assert_int_equal(pending, 5000002);
    enqueue_ok(&q, "later", 3, 600000);                 /* 5000003, scheduled */

    redisReply *old = rcmd("CONFIG", "GET", "slowlog-log-slower-than", END);
    assert_int_equal(old->type, REDIS_REPLY_ARRAY);
    assert_int_equal(old->elements, 2);
    char was[32];
    snprintf(was, sizeof was, "%s", old->element[1]->str);
    freeReplyObject(old);
    freeReplyObject(rcmd("CONFIG", "SET", "slowlog-log-slower-than", "10000", END));
    freeReplyObject(rcmd("SLOWLOG", "RESET", END));

    static const char *const statuses[] = { "", "pending", "dead", "succeeded", "processing" };
    static const char *const needles[] = { "", "zzz", "ang" };
    for (size_t s = 0; s < sizeof statuses / sizeof statuses[0]; s++) {
        for (size_t n = 0; n < sizeof needles / sizeof needles[0]; n++) {
            for (int bounds = 0; bounds < 2; bounds++) {
                char cursor[256] = "", next[256];
                int pages = 0;
                bool seen_pending = false, seen_dead = false;
                do {
                    redisReply *r = fcall("list", &q, -1, statuses[s], "1000", cursor, needles[n],
                                          bounds ? "0" : "", bounds ? "99999999999999" : "", END);
                    long long ids[1000], bytes;
                    size_t got = raw_page(r, ids, 1000, &bytes, next, sizeof next);
                    for (size_t i = 0; i < got; i++) {
                        seen_pending |= ids[i] == pending;
                        seen_dead |= ids[i] == dead;
                    }
                    snprintf(cursor, sizeof cursor, "%s", next);
                } while (cursor[0] != '\0' && ++pages < 5);
                if (cursor[0] != '\0')
                    fail_msg("list status \"%s\" error_contains \"%s\": not at the end after 5 "
                             "pages of 1000 (cursor %s)", statuses[s], needles[n], cursor);
                bool all = statuses[s][0] == '\0';
                if ((all || strcmp(statuses[s], "pending") == 0) && needles[n][0] == '\0')
                    assert_true(seen_pending);
                if ((all || strcmp(statuses[s], "dead") == 0) && strcmp(needles[n], "zzz") != 0)
                    assert_true(seen_dead);
            }
        }
        char cursor[256] = "", next[256];
        int pages = 0;
        do {
            redisReply *r = fcall("export", &q, -1, "jsonl", statuses[s], "1000", cursor, END);
            long long ids[1000], bytes;
            raw_export(r, ids, 1000, &bytes, next, sizeof next);
            snprintf(cursor, sizeof cursor, "%s", next);
        } while (cursor[0] != '\0' && ++pages < 5);
        assert_string_equal(cursor, "");
    }

    redisReply *slow = rcmd("SLOWLOG", "GET", "10", END);
    freeReplyObject(rcmd("CONFIG", "SET", "slowlog-log-slower-than", was, END));
    assert_int_equal(slow->type, REDIS_REPLY_ARRAY);
    if (slow->elements > 0) {
        const redisReply *e = slow->element[0];
        long long us = e->element[2]->integer;
        const redisReply *args = e->element[3];
        char what[256] = "";
        for (size_t i = 0; i < args->elements && strlen(what) < 200; i++)
            snprintf(what + strlen(what), sizeof what - strlen(what), " \"%s\"", args->element[i]->str);
        size_t n = slow->elements;
        freeReplyObject(slow);
        fail_msg("%zu slow calls; e.g. %lld us:%s", n, us, what);
    }
    freeReplyObject(slow);
}

/* Orphans in the dead index (ids whose hash is gone: eviction, manual DEL):
 * replay_many removes and counts them and always makes progress. */
/* ------------------------------------------------------------------------ */
/* The record layout and the upgrade from retryd_v2's HASH (docs/storage.md) */
/* ------------------------------------------------------------------------ */

static const char *key_type(const char *key)
{
    static char type[16];
    redisReply *r = rcmd("TYPE", key, END);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    snprintf(type, sizeof type, "%s", r->str);
    freeReplyObject(r);
    return type;
}

/* A pending 100-byte message is one STRING of 24 + 100 bytes; claim and
 * succeed change header bytes only (the length stays), and the key takes
 * well under half of the 624 bytes the HASH of retryd_v2 did. */
static void test_record_is_compact(void **state)
{
    queue_t q;
    queue_init(&q, "compact");
    char payload[101];
    memset(payload, 'p', 100);
    payload[100] = '\0';
    long long id = enqueue_ok(&q, payload, 3, 0);
    assert_string_equal(key_type(mkey(&q, id)), "string");
    assert_int_equal(int_reply(rcmd("STRLEN", mkey(&q, id), END)), 124);
    long long usage = int_reply(rcmd("MEMORY", "USAGE", mkey(&q, id), END));
    if (usage > 250)
        fail_msg("MEMORY USAGE of a pending 100-byte message: %lld bytes", usage);
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_int_equal(int_reply(rcmd("STRLEN", mkey(&q, id), END)), 124);
    expect_ok_msg(fcall("succeed", &q, id, msg_str(&m, "lease_token"), END), &m);
    assert_int_equal(int_reply(rcmd("STRLEN", mkey(&q, id), END)), 124);
    assert_string_equal(msg_str(&m, "payload"), payload);
}

static void assert_generations_apart(const queue_t *q);

/* Messages written by retryd_v2 (HASHes, status and all, in its indexes), in
 * every state, are read as they are by get, list and export, and each is
 * lifted into the new indexes, its record rewritten, by its next write
 * (succeed, fail, replay, claim, kill, delete), keeping its fields and lease. */
static void test_old_layout_is_read_and_converted(void **state)
{
    queue_t q;
    queue_init(&q, "legacy");
    const char *t = "1796000000000", *far = "4102444800000"; /* 2100-01-01 */
    /* 1 ready (with an idempotency key), 2 scheduled after a failure, 3 and 6
     * processing (6 with a token retryd never made), 4 succeeded, 5 dead,
     * 7 ready after its retry was promoted. */
    int_reply(rcmd("HSET", mkey(&q, 1), "payload", "one", "status", "pending", "retry_count", "0",
                   "max_retries", "3", "created_at", t, "updated_at", t, "idempotency_key", "k1",
                   END));
    int_reply(rcmd("HSET", mkey(&q, 2), "payload", "two", "status", "pending", "retry_count", "1",
                   "max_retries", "3", "created_at", t, "updated_at", t, "last_error", "e2",
                   "retry_after", far, END));
    int_reply(rcmd("HSET", mkey(&q, 3), "payload", "three", "status", "processing",
                   "retry_count", "0", "max_retries", "3", "created_at", t, "updated_at", t,
                   "lease_token", "1a22f8c2400.7", "lease_expires_at", far, END));
    int_reply(rcmd("HSET", mkey(&q, 4), "payload", "four", "status", "succeeded",
                   "retry_count", "0", "max_retries", "3", "created_at", t, "updated_at", t, END));
    int_reply(rcmd("HSET", mkey(&q, 5), "payload", "five", "status", "dead", "retry_count", "3",
                   "max_retries", "3", "created_at", t, "updated_at", t, "last_error", "boom",
                   "dead_at", t, END));
    int_reply(rcmd("HSET", mkey(&q, 6), "payload", "six", "status", "processing",
                   "retry_count", "2", "max_retries", "5", "created_at", t, "updated_at", t,
                   "last_error", "e6", "retry_after", t, "lease_token", "tok-6",
                   "lease_expires_at", far, END));
    int_reply(rcmd("HSET", mkey(&q, 7), "payload", "seven", "status", "pending", "retry_count", "1",
                   "max_retries", "3", "created_at", t, "updated_at", t, "last_error", "e7",
                   "retry_after", t, END));
    int_reply(rcmd("LPUSH", qkey(&q, "ready"), "1", END));
    int_reply(rcmd("ZADD", qkey(&q, "scheduled"), far, "2", END));
    int_reply(rcmd("ZADD", qkey(&q, "processing"), far, "3", far, "6", END));
    int_reply(rcmd("ZADD", qkey(&q, "succeeded"), t, "4", END));
    int_reply(rcmd("ZADD", qkey(&q, "dead"), t, "5", END));
    int_reply(rcmd("LPUSH", qkey(&q, "due"), "7", END));
    freeReplyObject(rcmd("ZINCRBY", qkey(&q, "errors"), "1", "boom", END));
    freeReplyObject(rcmd("SET", qkey(&q, "seq"), "7", END));

    /* Reads: every field as retryd_v2 showed it; the hashes stay hashes. */
    static const char *const status[] = { "", "pending", "pending", "processing", "succeeded",
                                          "dead", "processing", "pending" };
    static const char *const payload[] = { "", "one", "two", "three", "four", "five", "six",
                                           "seven" };
    msg_t m;
    for (long long id = 1; id <= 7; id++) {
        expect_ok_msg(fcall("get", &q, id, END), &m);
        assert_string_equal(msg_str(&m, "status"), status[id]);
        assert_string_equal(msg_str(&m, "payload"), payload[id]);
        assert_string_equal(msg_str(&m, "created_at"), t);
        assert_string_equal(msg_str(&m, "updated_at"), t);
        assert_string_equal(key_type(mkey(&q, id)), "hash");
    }
    expect_ok_msg(fcall("get", &q, 1, END), &m);
    assert_string_equal(msg_str(&m, "idempotency_key"), "k1");
    assert_no_field(&m, "last_error");
    expect_ok_msg(fcall("get", &q, 2, END), &m);
    assert_string_equal(msg_str(&m, "last_error"), "e2");
    assert_string_equal(msg_str(&m, "retry_after"), far);
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    expect_ok_msg(fcall("get", &q, 3, END), &m);
    assert_string_equal(msg_str(&m, "lease_token"), "1a22f8c2400.7");
    assert_string_equal(msg_str(&m, "lease_expires_at"), far);
    expect_ok_msg(fcall("get", &q, 5, END), &m);
    assert_string_equal(msg_str(&m, "dead_at"), t);
    assert_string_equal(msg_str(&m, "last_error"), "boom");
    expect_ok_msg(fcall("get", &q, 6, END), &m);
    assert_string_equal(msg_str(&m, "lease_token"), "tok-6");
    assert_int_equal(msg_int(&m, "max_retries"), 5);

    long long ids[16], bytes;
    char next[256];
    size_t n = raw_page(fcall("list", &q, -1, "", "100", "", END), ids, 16, &bytes, next,
                        sizeof next);
    assert_int_equal(n, 7);
    assert_string_equal(next, "");
    n = raw_export(fcall("export", &q, -1, "csv", "", "100", "", END), ids, 16, &bytes, next,
                   sizeof next);
    assert_int_equal(n, 7);
    redisReply *r = fcall("export", &q, -1, "csv", "dead", "100", "", END);
    assert_int_equal(r->elements, 2);
    assert_non_null(strstr(r->element[1]->str, "5,dead,3,3,"));
    assert_non_null(strstr(r->element[1]->str, ",boom,five"));
    freeReplyObject(r);
    for (long long id = 1; id <= 7; id++)
        assert_string_equal(key_type(mkey(&q, id)), "hash");

    /* The old lease token still settles; a wrong one is refused. */
    expect_code(fcall("succeed", &q, 3, "1a22f8c2400.8", END), "lease_mismatch", NULL);
    assert_string_equal(key_type(mkey(&q, 3)), "hash");
    expect_ok_msg(fcall("succeed", &q, 3, "1a22f8c2400.7", END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    assert_string_equal(msg_str(&m, "payload"), "three");
    assert_no_field(&m, "lease_token");
    assert_string_equal(key_type(mkey(&q, 3)), "string");
    expect_ok_msg(fcall("get", &q, 3, END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    assert_string_equal(msg_str(&m, "created_at"), t);

    /* A token retryd never made is kept verbatim, and fails it. */
    expect_ok_msg(fcall("fail", &q, 6, "tok-6", "e6 again", "1", "0", END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 3);
    assert_string_equal(msg_str(&m, "last_error"), "e6 again");
    assert_string_equal(msg_str(&m, "payload"), "six");
    assert_string_equal(key_type(mkey(&q, 6)), "string");

    /* replay of the old dead letter: fresh budget, no error, top_errors updated. */
    expect_ok_msg(fcall("replay", &q, 5, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 0);
    assert_no_field(&m, "last_error");
    assert_no_field(&m, "dead_at");
    assert_string_equal(key_type(mkey(&q, 5)), "string");
    assert_int_equal(zcard(qkey(&q, "errors")), 0);

    /* claim: the new due list first (5 replayed, 6 due now), then
     * retryd_v2's due (7) and ready (1). */
    msg_t c[8];
    n = expect_ok_msgs(fcall("claim", &q, -1, "30000", "8", END), c, 8);
    assert_int_equal(n, 4);
    static const long long order[] = { 5, 6, 7, 1 };
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(c[i].id, order[i]);
        assert_string_equal(msg_str(&c[i], "payload"), payload[order[i]]);
        assert_string_equal(msg_str(&c[i], "status"), "processing");
        assert_string_equal(key_type(mkey(&q, order[i])), "string");
        expect_ok_msg(fcall("get", &q, order[i], END), &m);
        assert_string_equal(msg_str(&m, "lease_token"), msg_str(&c[i], "lease_token"));
    }
    assert_string_equal(msg_str(&c[3], "idempotency_key"), "k1");
    assert_string_equal(msg_str(&c[2], "last_error"), "e7");
    assert_string_equal(msg_str(&c[2], "retry_after"), t);
    assert_string_not_equal(msg_str(&c[1], "lease_token"), "tok-6");
    expect_ok_msg(fcall("succeed", &q, 1, msg_str(&c[3], "lease_token"), END), &m);

    /* kill of the old scheduled one, delete of the old succeeded one. */
    expect_ok_msg(fcall("kill", &q, 2, "by hand", END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_string_equal(msg_str(&m, "payload"), "two");
    assert_no_field(&m, "retry_after");
    assert_string_equal(key_type(mkey(&q, 2)), "string");
    expect_code(fcall("delete", &q, 4, END), "ok", NULL);
    assert_int_equal(exists(mkey(&q, 4)), 0);
    assert_int_equal(zcard(qkey(&q, "3:succeeded")), 2);
    assert_int_equal(zcard(qkey(&q, "succeeded")), 0);
    assert_generations_apart(&q);
}

static void test_replay_many_orphans(void **state)
{
    queue_t q;
    queue_init(&q, "orphans");
    long long ids[8];
    for (int i = 0; i < 8; i++)
        ids[i] = make_dead(&q, i % 2 ? "boom" : "bang");
    for (int i = 0; i < 5; i++)     /* the five oldest lose their hash */
        int_reply(rcmd("DEL", mkey(&q, ids[i]), END));

    for (int mode = 0; mode < 2; mode++) {
        char cursor[128] = "";
        long long replayed = 0;
        int calls = 0;
        for (;;) {
            redisReply *r = mode == 0 ? fcall("replay_many", &q, -1, "error", "2", cursor, "boom", END)
                                      : fcall("replay_many", &q, -1, "all", "2", cursor, END);
            if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
                r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING)
                fail_msg("replay_many: %s", reply_desc(r));
            long long n = r->element[0]->integer;
            char next[128];
            snprintf(next, sizeof next, "%s", r->element[1]->str);
            freeReplyObject(r);
            replayed += n;
            calls++;
            if (next[0] == '\0')
                break;
            if (n == 0 && strcmp(next, cursor) == 0)
                fail_msg("replay_many %s made no progress at cursor %s after %d calls",
                         mode ? "all" : "error", next, calls);
            if (calls > 20)
                fail_msg("replay_many %s did not end", mode ? "all" : "error");
            snprintf(cursor, sizeof cursor, "%s", next);
        }
        /* error "boom": odd ones that still have a hash (5, 7); all: the rest (6). */
        assert_int_equal(replayed, mode == 0 ? 2 : 1);
    }
    assert_int_equal(zcard(qkey(&q, "3:dead")), 0);
    assert_int_equal(counter(&q, "orphans_removed"), 5);
    assert_int_equal(counter(&q, "replayed"), 3);
    assert_int_equal(llen(qkey(&q, "3:due")), 3);

    /* purge and replay by ids pass orphans over the same way. */
    long long more = enqueue_ok(&q, "x", 3, 0);
    msg_t m;
    expect_ok_msg(fcall("kill", &q, more, "x", END), &m);
    int_reply(rcmd("ZADD", qkey(&q, "3:dead"), "1", "424242", END));
    long long pr[2];
    expect_ints(fcall("purge", &q, -1, "0", "10", END), 2, pr);
    assert_int_equal(pr[0], 1);
    assert_int_equal(zcard(qkey(&q, "3:dead")), 0);
    assert_int_equal(counter(&q, "purged"), 1);
    assert_int_equal(counter(&q, "orphans_removed"), 6);
    int_reply(rcmd("ZADD", qkey(&q, "3:dead"), "1", "434343", END));
    redisReply *r = fcall("replay_many", &q, -1, "ids", "434343", num(more), END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[0]->integer, 0);
    freeReplyObject(r);
    assert_int_equal(zcard(qkey(&q, "3:dead")), 0);
    assert_int_equal(counter(&q, "orphans_removed"), 7);
}

/* Walks a pending (or complete) listing, or its export, with pages of 4
 * while workers claim 3 between pages (and dead letters are replayed and a
 * claim is released): every message that stayed pending during the whole
 * walk is listed. */
static void walk_under_claims(bool export, const char *status)
{
    enum { DEAD = 16, FRESH = 40, SCHEDULED = 3, MAX_ID = 64 };
    queue_t q;
    queue_init(&q, export ? "walkexport" : "walklist");
    long long dead[DEAD];
    for (int i = 0; i < DEAD; i++)
        dead[i] = make_dead(&q, "e");
    msg_t m;
    for (int i = 0; i < DEAD / 2; i++)     /* three in due */
        expect_ok_msg(fcall("replay", &q, dead[i], END), &m);
    for (int i = 0; i < FRESH; i++)
        enqueue_ok(&q, "job", 3, 0);
    for (int i = 0; i < SCHEDULED; i++)
        enqueue_ok(&q, "later", 3, 600000 + i);
    long long max_id = DEAD + FRESH + SCHEDULED;

    bool was_pending[MAX_ID] = { false }, claimed[MAX_ID] = { false };
    int seen[MAX_ID] = { 0 };
    for (int i = DEAD + 1; i <= max_id; i++)
        was_pending[i] = true;
    for (int i = 0; i < DEAD / 2; i++)
        was_pending[dead[i]] = true;

    char cursor[256] = "", next[256];
    for (int page = 0; page < 200; page++) {
        long long ids[4], bytes;
        size_t n = export ? raw_export(fcall("export", &q, -1, "tsv", status, "4", cursor, END),
                                       ids, 4, &bytes, next, sizeof next)
                          : raw_page(fcall("list", &q, -1, status, "4", cursor, END), ids, 4,
                                     &bytes, next, sizeof next);
        for (size_t i = 0; i < n; i++) {
            assert_in_range(ids[i], 1, MAX_ID - 1);
            seen[ids[i]]++;
        }
        if (next[0] == '\0')
            break;
        snprintf(cursor, sizeof cursor, "%s", next);
        /* Workers take three (due first, then ready). */
        msg_t c[3];
        size_t got = expect_ok_msgs(fcall("claim", &q, -1, "600000", "3", END), c, 3);
        for (size_t i = 0; i < got; i++)
            claimed[c[i].id] = true;
        if (page == 1) {     /* more arrive in due: replays push on the far side */
            for (int i = DEAD / 2; i < DEAD; i++)
                expect_ok_msg(fcall("replay", &q, dead[i], END), &m);
        }
        if (page == 2 && got > 0) { /* a claim handed back: it lands at the claim end */
            char t[64];
            snprintf(t, sizeof t, "%s", msg_str(&c[0], "lease_token"));
            assert_int_equal(int_reply(fcall("release", &q, -1, num(c[0].id), t, END)), 1);
        }
    }
    assert_string_equal(next, "");
    for (int id = 1; id <= max_id; id++) {
        if (was_pending[id] && !claimed[id] && seen[id] == 0)
            fail_msg("%s %s: message %d stayed pending during the walk but was not listed",
                     export ? "export" : "list", status[0] ? status : "(all)", id);
    }
}

static void test_pending_walk_under_claims(void **state)
{
    walk_under_claims(false, "pending");
    walk_under_claims(false, "");
    walk_under_claims(true, "pending");
    walk_under_claims(true, "");
}

/* The same property under a random mix of claims, releases, replays,
 * promotions, deletes and enqueues between pages, for several seeds. */
static void test_pending_walk_random_interleaving(void **state)
{
    enum { MAX_ID = 400 };
    for (unsigned seed = 1; seed <= 24; seed++) {
        srand(seed);
        const char *status = seed % 3 == 0 ? "" : "pending";
        bool export = seed % 2 == 0;
        int limit = 1 + (int)(seed % 5);
        queue_t q;
        queue_init(&q, "walkrandom");
        long long dead[40];
        int ndead = 0;
        for (int i = 0; i < 30; i++)
            dead[ndead++] = make_dead(&q, "e");
        msg_t m;
        for (int i = 0; i < 12; i++)
            expect_ok_msg(fcall("replay", &q, dead[i], END), &m);
        for (int i = 0; i < 60; i++)
            enqueue_ok(&q, "job", 3, i % 7 == 0 ? 600000 : 0);
        long long max_id = 90;
        bool stayed[MAX_ID] = { false };
        int seen[MAX_ID] = { 0 };
        for (long long id = 31; id <= max_id; id++)
            stayed[id] = true;
        for (int i = 0; i < 12; i++)
            stayed[dead[i]] = true;
        long long held[100];
        char tokens[100][64];
        int nheld = 0, next_dead = 12;

        char cursor[256] = "", next[256];
        int page;
        for (page = 0; page < 1000; page++) {
            long long ids[8], bytes;
            redisReply *page_reply = export
                ? fcall("export", &q, -1, "tsv", status, num(limit), cursor, END)
                : fcall("list", &q, -1, status, num(limit), cursor, END);
            size_t n = export ? raw_export(page_reply, ids, 8, &bytes, next, sizeof next)
                              : raw_page(page_reply, ids, 8, &bytes, next, sizeof next);
            for (size_t i = 0; i < n; i++) {
                assert_in_range(ids[i], 1, MAX_ID - 1);
                seen[ids[i]]++;
            }
            if (next[0] == '\0')
                break;
            snprintf(cursor, sizeof cursor, "%s", next);
            int ops = rand() % 4;
            for (int o = 0; o < ops; o++) {
                int what = rand() % 7;
                if (what <= 1) {          /* claim 1..3 */
                    msg_t c[3];
                    redisReply *r = fcall("claim", &q, -1, "600000", num(1 + rand() % 3), END);
                    size_t got = expect_ok_msgs(r, c, 3);
                    for (size_t i = 0; i < got; i++) {
                        stayed[c[i].id] = false;
                        if (nheld < 100) {
                            held[nheld] = c[i].id;
                            snprintf(tokens[nheld++], 64, "%s", msg_str(&c[i], "lease_token"));
                        }
                    }
                } else if (what == 2 && nheld > 0) {   /* release one */
                    nheld--;
                    int_reply(fcall("release", &q, -1, num(held[nheld]), tokens[nheld], END));
                } else if (what == 3 && next_dead < ndead) {   /* replay: far end of due */
                    freeReplyObject(fcall("replay", &q, dead[next_dead++], END)); /* maybe deleted */
                } else if (what == 4 && max_id + 1 < MAX_ID) {  /* enqueue */
                    max_id = enqueue_ok(&q, "job", 3, rand() % 2 ? 0 : 600000);
                } else if (what == 5) {   /* delete a random pending one (LREM) */
                    long long id = 1 + rand() % max_id;
                    redisReply *r = fcall("delete", &q, id, END);
                    if (has_code(r, "ok"))
                        stayed[id] = false;
                    freeReplyObject(r);
                } else if (what == 6) {   /* scheduled ones become due and are promoted */
                    redisReply *r = rcmd("ZRANGE", qkey(&q, "3:scheduled"), "0", "1", END);
                    for (size_t i = 0; i < r->elements; i++)
                        int_reply(rcmd("ZADD", qkey(&q, "3:scheduled"), "XX", "0",
                                       r->element[i]->str, END));
                    freeReplyObject(r);
                    long long pr[2];
                    expect_ints(fcall("promote", &q, -1, "100", END), 2, pr);
                }
            }
        }
        assert_true(page < 1000);
        for (long long id = 1; id <= max_id; id++)
            if (stayed[id] && seen[id] == 0)
                fail_msg("seed %u (%s %s, limit %d): message %lld stayed pending but was not listed",
                         seed, export ? "export" : "list", status[0] ? status : "(all)", limit, id);
    }
}

/* Listing pages, export chunks and batch claims stop at REPLY_BYTES of
 * messages (always at least one); what a claim does not return stays
 * pending, untouched. */
static void test_reply_bytes_bounded(void **state)
{
    enum { N = 10, MIB = 1024 * 1024 };
    queue_t q;
    queue_init(&q, "bigpayload");
    char *payload = malloc(5 * MIB);
    assert_non_null(payload);
    memset(payload, 'x', 5 * MIB);
    for (int i = 0; i < N; i++) {
        const char *args[] = { payload, "3", "0" };
        const size_t lens[] = { MIB, 1, 1 };
        redisReply *r = fcall_bin("enqueue", &q, -1, 3, args, lens);
        assert_true(has_code(r, "ok"));
        freeReplyObject(r);
    }

    static const char *const statuses[] = { "", "pending" };
    for (size_t s = 0; s < 2; s++) {
        char cursor[256] = "", next[256];
        int listed = 0, pages = 0;
        do {
            long long ids[1000], bytes;
            size_t n = raw_page(fcall("list", &q, -1, statuses[s], "1000", cursor, END), ids,
                                1000, &bytes, next, sizeof next);
            assert_true(n >= 1);
            if (n > 1 && bytes > REPLY_BYTES)
                fail_msg("a list page of %zu messages holds %lld bytes", n, bytes);
            listed += (int)n;
            snprintf(cursor, sizeof cursor, "%s", next);
        } while (cursor[0] != '\0' && ++pages < 20);
        assert_int_equal(listed, N);
        assert_true(pages >= 2);

        listed = pages = 0;
        cursor[0] = '\0';
        do {
            long long ids[1000], bytes;
            size_t n = raw_export(fcall("export", &q, -1, "jsonl", statuses[s], "1000", cursor, END),
                                  ids, 1000, &bytes, next, sizeof next);
            assert_true(n >= 1);
            if (n > 1 && bytes > REPLY_BYTES)
                fail_msg("an export chunk of %zu lines holds %lld bytes", n, bytes);
            listed += (int)n;
            snprintf(cursor, sizeof cursor, "%s", next);
        } while (cursor[0] != '\0' && ++pages < 20);
        assert_int_equal(listed, N);
    }

    /* A batch claim of all ten returns fewer; the rest stay pending as they were. */
    redisReply *r = fcall("claim", &q, -1, "600000", "10", END);
    assert_true(has_code(r, "ok"));
    size_t got = r->elements - 1;
    long long bytes = 0;
    for (size_t i = 1; i < r->elements; i++)
        for (size_t j = 2; j < r->element[i]->elements; j++)
            bytes += (long long)r->element[i]->element[j]->len;
    freeReplyObject(r);
    if (got < 1 || got >= N || (got > 1 && bytes > REPLY_BYTES))
        fail_msg("claim of 10 returned %zu messages, %lld bytes", got, bytes);
    assert_int_equal(counter(&q, "claimed"), (long long)got);
    assert_int_equal(zcard(qkey(&q, "3:processing")), (long long)got);
    assert_int_equal(llen(qkey(&q, "3:ready")), N - (long long)got);
    for (long long id = (long long)got + 1; id <= N; id++) {
        char status[32], token[64];
        get_field(&q, id, "status", status, sizeof status);
        get_field(&q, id, "lease_token", token, sizeof token);
        assert_string_equal(status, "pending");
        assert_string_equal(token, "");
    }
    /* Claim order is kept: the next claim takes the next id. */
    r = fcall("claim", &q, -1, "600000", "1", END);
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->elements, 2);
    assert_int_equal(parse_int(r->element[1]->element[0]->str, r->element[1]->element[0]->len, "id"),
                     (long long)got + 1);
    freeReplyObject(r);

    /* One message above the budget still comes, alone. */
    queue_t big;
    queue_init(&big, "hugepayload");
    for (int i = 0; i < 2; i++) {
        const char *args[] = { payload, "3", "0" };
        const size_t lens[] = { 5 * MIB, 1, 1 };
        redisReply *e = fcall_bin("enqueue", &big, -1, 3, args, lens);
        assert_true(has_code(e, "ok"));
        freeReplyObject(e);
    }
    free(payload);
    long long ids[4];
    char next[256];
    assert_int_equal(raw_page(fcall("list", &big, -1, "", "1000", "", END), ids, 4, &bytes, next,
                              sizeof next), 1);
    assert_string_not_equal(next, "");
    r = fcall("claim", &big, -1, "600000", "2", END);
    assert_int_equal(r->elements, 2);
    freeReplyObject(r);
}

/* settle_claim's claim is claim's: bounded by REPLY_BYTES of messages too,
 * the rest left pending in place. */
static void test_settle_claim_reply_bytes_bounded(void **state)
{
    enum { N = 6, MIB = 1024 * 1024 };
    queue_t q;
    queue_init(&q, "settlebig");
    char *payload = malloc(MIB);
    assert_non_null(payload);
    memset(payload, 'y', MIB);
    for (int i = 0; i < N; i++) {
        const char *args[] = { payload, "3", "0" };
        const size_t lens[] = { MIB, 1, 1 };
        redisReply *r = fcall_bin("enqueue", &q, -1, 3, args, lens);
        assert_true(has_code(r, "ok"));
        freeReplyObject(r);
    }
    free(payload);
    redisReply *c = fcall("claim", &q, -1, "60000", "1", END);
    assert_int_equal(c->elements, 2);
    freeReplyObject(c);
    settle_t done = SUCCEEDED(1, "");
    redisReply *r = settle_claim(&q, 60000, N, 1, &done);
    assert_true(has_code(r, "ok"));
    assert_string_equal(r->element[1]->element[0]->str, "succeeded");
    size_t got = r->elements - 2;
    long long bytes = 0;
    for (size_t i = 2; i < r->elements; i++)
        for (size_t k = 2; k < r->element[i]->elements; k++)
            bytes += (long long)r->element[i]->element[k]->len;
    freeReplyObject(r);
    if (got < 1 || got >= N - 1 || (got > 1 && bytes > REPLY_BYTES))
        fail_msg("settle_claim of %d returned %zu messages, %lld bytes", N, got, bytes);
    assert_int_equal(zcard(qkey(&q, "3:processing")), (long long)got);
    assert_int_equal(llen(qkey(&q, "3:ready")), N - 1 - (long long)got);
    assert_int_equal(counter(&q, "claimed"), 1 + (long long)got);
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
    if (r == NULL || r->type != REDIS_REPLY_STRING || strcmp(r->str, RD_LIBRARY_NAME) != 0) {
        print_error("test_lua: FUNCTION LOAD %s failed: %s\n", lua,
                    r == NULL ? g_redis->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        if (r)
            freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Versions side by side (rolling upgrade, docs/reference.md "Rolling upgrade")                         */
/* ------------------------------------------------------------------------ */

/* FUNCTION LOAD [REPLACE] code; fails the test unless Redis names the library. */
static void load_library(const char *code, size_t len, bool replace, const char *want_name)
{
    const char *argv[] = { "FUNCTION", "LOAD", "REPLACE", code };
    const size_t lens[] = { 8, 4, 7, len };
    redisReply *r = replace ? command_argv(4, argv, lens)
                            : command_argv(3, (const char *[]){ "FUNCTION", "LOAD", code },
                                           (const size_t[]){ 8, 4, len });
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, want_name) != 0)
        fail_msg("FUNCTION LOAD of %s: %s", want_name, reply_desc(r));
    freeReplyObject(r);
}

/* The names of the functions of library lib (FUNCTION LIST), comma-joined. */
static void library_functions(const char *lib, char *out, size_t cap, size_t *count)
{
    redisReply *r = rcmd("FUNCTION", "LIST", "LIBRARYNAME", lib, END);
    out[0] = '\0';
    *count = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *l = r->element[i];
        bool this_lib = false;
        const redisReply *fns = NULL;
        for (size_t j = 0; j + 1 < l->elements; j += 2) {
            if (strcmp(l->element[j]->str, "library_name") == 0)
                this_lib = strcmp(l->element[j + 1]->str, lib) == 0;
            if (strcmp(l->element[j]->str, "functions") == 0) fns = l->element[j + 1];
        }
        if (!this_lib || fns == NULL) continue;
        for (size_t k = 0; k < fns->elements; k++) {
            const redisReply *f = fns->element[k];
            for (size_t j = 0; j + 1 < f->elements; j += 2) {
                if (strcmp(f->element[j]->str, "name") != 0) continue;
                snprintf(out + strlen(out), cap - strlen(out), "%s%s", *count ? "," : "",
                         f->element[j + 1]->str);
                (*count)++;
            }
        }
    }
    freeReplyObject(r);
}

/* The library as RETRYD_TEST_LUA holds it, with its version renamed: what a
 * release with another API version loads. */
static char *library_as(const char *version_name, size_t *len)
{
    size_t n;
    char *code = read_file(getenv("RETRYD_TEST_LUA"), &n);
    assert_non_null(code);
    code = realloc(code, n + 1);
    assert_non_null(code);
    code[n] = '\0';
    size_t from_len = strlen(RD_LIBRARY_NAME), to_len = strlen(version_name);
    assert_int_equal(from_len, to_len);  /* renamed in place */
    int renamed = 0;
    for (char *p = code; (p = strstr(p, RD_LIBRARY_NAME)) != NULL; p += from_len) {
        memcpy(p, version_name, to_len);
        renamed++;
    }
    assert_true(renamed >= 2);  /* the first line and LIBRARY (and comments) */
    *len = n;
    return code;
}

static void test_library_versions_side_by_side(void **state)
{
    /* Every function of the library carries its version. */
    char names[2048];
    size_t count;
    library_functions(RD_LIBRARY_NAME, names, sizeof names, &count);
    assert_true(count >= 15);
    for (char *p = names; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, RD_FUNCTION(""), strlen(RD_FUNCTION(""))) != 0)
            fail_msg("function %.40s is not versioned (%s)", p, names);
    assert_non_null(strstr(names, RD_FUNCTION("claim")));

    /* Another version loads beside it (its names do not collide), and both
     * answer on the same queue: enqueue through one, claim and succeed
     * through the other, as two daemons of two versions would. */
    size_t len;
    char *other = library_as("retryd_v9", &len);
    load_library(other, len, false, "retryd_v9");
    queue_t q;
    queue_init(&q, "versions");
    redisReply *r = rcmd("FCALL", "retryd_v9_enqueue", "1", q.base, "from v9", "3", "0", END);
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_string_equal(msg_str(&m, "payload"), "from v9");
    r = rcmd("FCALL", "retryd_v9_succeed", "2", q.base, mkey(&q, m.id), num(m.id),
             msg_str(&m, "lease_token"), END);
    expect_ok_msg(r, &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");

    /* A new daemon's FUNCTION LOAD REPLACE of its version leaves the other. */
    size_t n;
    char *mine = read_file(getenv("RETRYD_TEST_LUA"), &n);
    load_library(mine, n, true, RD_LIBRARY_NAME);
    free(mine);
    library_functions("retryd_v9", names, sizeof names, &count);
    assert_true(count >= 15);
    r = rcmd("FCALL_RO", "retryd_v9_get", "2", q.base, mkey(&q, m.id), num(m.id), END);
    expect_ok_msg(r, &m);

    /* The unversioned library of older releases ("retryd", functions named
     * "claim", ...) coexists too; FUNCTION DELETE ends an old version. */
    const char *old = "#!lua name=retryd\n"
                      "redis.register_function('claim', function() return { 'old' } end)\n";
    load_library(old, strlen(old), true, "retryd");
    load_library(other, len, true, "retryd_v9");
    r = rcmd("FCALL", "claim", "1", q.base, END);
    expect_code(r, "old", NULL);
    expect_nothing_to_claim(&q);  /* the current version's claim is its own */
    r = rcmd("FUNCTION", "DELETE", "retryd_v9", END);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = rcmd("FUNCTION", "DELETE", "retryd", END);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = rcmd("FCALL", "retryd_v9_claim", "1", q.base, "30000", "1", END);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    expect_nothing_to_claim(&q);
    free(other);
}

/* Room to grow (docs/design.md "The Functions library"): Lua 5.1 refuses a
 * chunk with more than 200 active locals, and the library is one chunk. With
 * 100 more top-level locals after its "#!lua" line it still loads (it held
 * 193 of them before it was split into modules); then the real library is
 * loaded again, so the tests after this one are unaffected. */
static void test_library_has_room_for_100_locals(void **state)
{
    enum { EXTRA = 100 };
    size_t n;
    char *code = read_file(getenv("RETRYD_TEST_LUA"), &n);
    assert_non_null(code);
    const char *eol = memchr(code, '\n', n);
    assert_non_null(eol);
    size_t head = (size_t)(eol - code) + 1;
    size_t cap = n + EXTRA * 40 + 1, len = head;
    char *grown = malloc(cap);
    assert_non_null(grown);
    memcpy(grown, code, head);
    for (int i = 0; i < EXTRA; i++)
        len += (size_t)snprintf(grown + len, cap - len, "local room_test_%d = %d\n", i, i);
    memcpy(grown + len, code + head, n - head);
    len += n - head;
    const char *argv[] = { "FUNCTION", "LOAD", "REPLACE", grown };
    const size_t lens[] = { 8, 4, 7, len };
    redisReply *r = command_argv(4, argv, lens);
    bool loaded = r->type == REDIS_REPLY_STRING && strcmp(r->str, RD_LIBRARY_NAME) == 0;
    char why[256];
    snprintf(why, sizeof why, "%s", reply_desc(r));
    freeReplyObject(r);
    free(grown);
    load_library(code, n, true, RD_LIBRARY_NAME);
    free(code);
    if (!loaded) fail_msg("the library with %d more top-level locals: %s", EXTRA, why);
    queue_t q;
    queue_init(&q, "room");
    msg_t m;
    enqueue_ok(&q, "after the reload", 3, 0);
    claim_one(&q, 30000, &m);
    assert_string_equal(msg_str(&m, "payload"), "after the reload");
}

/* ------------------------------------------------------------------------ */
/* Rolling upgrade from retryd_v2 (docs/storage.md "Two generations of      */
/* indexes"): the previous release's library, main's lua/ before the record, */
/* loaded beside this one in the same Redis.                                 */
/* ------------------------------------------------------------------------ */

#define V2_FIXTURE "tests/fixtures/retryd_v2.lua"

static void load_v2(void)
{
    size_t n;
    char *code = read_file(V2_FIXTURE, &n);
    if (code == NULL)
        fail_msg("cannot read %s (run from the source tree)", V2_FIXTURE);
    load_library(code, n, true, "retryd_v2");
    free(code);
}

/* The type of the record of every id in the queue's indexes of one
 * generation ("" retryd_v2's, "3:" the record's) must not be `wrong`. */
static void assert_generation_types(const queue_t *q, const char *gen, const char *wrong)
{
    static const char *const lists[] = { "ready", "due" };
    static const char *const zsets[] = { "scheduled", "processing", "succeeded", "dead" };
    char name[64];
    for (size_t i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "%s%s", gen, i < 2 ? lists[i] : zsets[i - 2]);
        redisReply *r = i < 2 ? rcmd("LRANGE", qkey(q, name), "0", "-1", END)
                              : rcmd("ZRANGE", qkey(q, name), "0", "-1", END);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        for (size_t j = 0; j < r->elements; j++) {
            const char *t = key_type(mkey(q, atoll(r->element[j]->str)));
            if (strcmp(t, wrong) == 0)
                fail_msg("id %s in %s names a %s record", r->element[j]->str, name, t);
        }
        freeReplyObject(r);
    }
}

/* The invariant: retryd_v2's indexes never name a STRING record (its
 * functions would fail on it, claim after popping the id), the record's
 * indexes never a HASH. */
static void assert_generations_apart(const queue_t *q)
{
    assert_generation_types(q, "", "string");
    assert_generation_types(q, "3:", "hash");
}

/* Enqueues through retryd_v2; returns the id. */
static long long v2_enqueue(const queue_t *q, const char *payload, const char *max_retries,
                            const char *delay_ms, const char *idem)
{
    redisReply *r = fcall_v2("enqueue", q, -1, payload, max_retries, delay_ms, idem, END);
    if (!has_code(r, "ok") || r->elements < 2 || r->element[1]->type != REDIS_REPLY_INTEGER)
        fail_msg("retryd_v2_enqueue: %s", reply_desc(r));
    long long id = r->element[1]->integer;
    freeReplyObject(r);
    return id;
}

/* Claims one message through retryd_v2; it must be `want`. */
static void v2_claim(const queue_t *q, const char *lease_ms, long long want, msg_t *m)
{
    redisReply *r = fcall_v2("claim", q, -1, lease_ms, "1", END);
    if (!has_code(r, "ok") || r->elements != 2)
        fail_msg("retryd_v2_claim: %s", reply_desc(r));
    msg_parse(r->element[1], m);
    freeReplyObject(r);
    assert_int_equal(m->id, want);
}

/* The message as `get` of one library answers it. */
static void get_with(bool v2, const queue_t *q, long long id, msg_t *m)
{
    redisReply *r = v2 ? fcall_v2("get", q, id, END) : fcall("get", q, id, END);
    expect_ok_msg(r, m);
}

/* Both messages hold the same fields with the same values. */
static void assert_same_fields(const msg_t *want, const msg_t *got)
{
    assert_int_equal(want->id, got->id);
    for (int i = 0; i < want->nfields; i++) {
        const field_t *f = msg_field(got, want->f[i].name);
        if (f == NULL)
            fail_msg("message %lld: %s missing (retryd_v2 showed \"%s\")", want->id,
                     want->f[i].name, want->f[i].value);
        if (f->len != want->f[i].len || memcmp(f->value, want->f[i].value, f->len) != 0)
            fail_msg("message %lld: %s is \"%s\", retryd_v2 showed \"%s\"", want->id,
                     want->f[i].name, f->value, want->f[i].value);
    }
    if (got->nfields != want->nfields)
        fail_msg("message %lld: %d fields, retryd_v2 showed %d", want->id, got->nfields,
                 want->nfields);
}

/* The loss of a mixed deployment: a retryd_v2 claim that met a record popped
 * its id from the shared ready list, failed with WRONGTYPE after the pop (no
 * rollback), and the message was in no index any more. Now retryd_v2 sees
 * none of the record's ids: it claims nothing, the message stays whole, and
 * retryd_v3 claims it. retryd_v2's by-id calls on a record answer an error
 * and write nothing. */
static void test_v2_claim_never_meets_a_record(void **state)
{
    load_v2();
    queue_t q;
    queue_init(&q, "v2claim");
    long long id = enqueue_ok(&q, "written by v3", 3, 0);
    redisReply *r = fcall_v2("claim", &q, -1, "30000", "10", END);
    if (!has_code(r, "ok") || r->elements != 1)
        fail_msg("retryd_v2_claim on a queue of records: %s", reply_desc(r));
    freeReplyObject(r);
    msg_t m;
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "payload"), "written by v3");
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, id);

    redisReply *before = rcmd("GET", mkey(&q, id), END);
    r = fcall_v2("succeed", &q, id, msg_str(&m, "lease_token"), END);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = fcall_v2("fail", &q, id, msg_str(&m, "lease_token"), "e", "1", "0", END);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    redisReply *after = rcmd("GET", mkey(&q, id), END);
    assert_int_equal(before->len, after->len);
    assert_memory_equal(before->str, after->str, before->len);
    freeReplyObject(before);
    freeReplyObject(after);
    expect_ok_msg(fcall("succeed", &q, id, msg_str(&m, "lease_token"), END), &m);
    assert_generations_apart(&q);
}

/* Messages retryd_v2 wrote in every state are shown by retryd_v3 with every
 * field retryd_v2 shows, claimed, settled with retryd_v2's lease tokens,
 * replayed, and ticked (promotion, an expired lease, retention); each moves
 * into the new indexes with its record rewritten in the same call. */
static void test_v2_messages_served_by_v3(void **state)
{
    load_v2();
    queue_t q;
    queue_init(&q, "v2mixed");
    msg_t m, c_lease, f_lease;
    long long c = v2_enqueue(&q, "c lease", "3", "0", "");
    v2_claim(&q, "600000", c, &c_lease);
    long long d = v2_enqueue(&q, "d done", "3", "0", "");
    v2_claim(&q, "600000", d, &m);
    expect_ok_msg(fcall_v2("succeed", &q, d, msg_str(&m, "lease_token"), END), &m);
    long long e = v2_enqueue(&q, "e dead", "1", "0", "");
    v2_claim(&q, "600000", e, &m);
    expect_ok_msg(fcall_v2("fail", &q, e, msg_str(&m, "lease_token"), "boom", "0", "-1", END), &m);
    long long f = v2_enqueue(&q, "f fails", "3", "0", "");
    v2_claim(&q, "600000", f, &f_lease);
    long long g = v2_enqueue(&q, "g expires", "3", "0", "");
    v2_claim(&q, "1", g, &m);
    long long h = v2_enqueue(&q, "h released", "3", "0", "");
    msg_t h_lease;
    v2_claim(&q, "600000", h, &h_lease);
    long long a = v2_enqueue(&q, "a now", "3", "0", "key-a");
    long long b = v2_enqueue(&q, "b later", "3", "3600000", "");
    const long long all[] = { a, b, c, d, e, f, g, h };
    static const char *const status[] = { "pending", "pending", "processing", "succeeded",
                                          "dead", "processing", "processing", "processing" };

    /* get: every field retryd_v2 shows, as it shows it; list and export: each
     * once, in its state. Reads change nothing. */
    for (size_t i = 0; i < 8; i++) {
        msg_t old;
        get_with(true, &q, all[i], &old);
        get_with(false, &q, all[i], &m);
        assert_same_fields(&old, &m);
        assert_string_equal(msg_str(&m, "status"), status[i]);
        assert_string_equal(key_type(mkey(&q, all[i])), "hash");
    }
    expect_ok_msg(fcall("get", &q, a, END), &m);
    assert_string_equal(msg_str(&m, "idempotency_key"), "key-a");
    expect_ok_msg(fcall("get", &q, c, END), &m);
    assert_string_equal(msg_str(&m, "lease_token"), msg_str(&c_lease, "lease_token"));
    long long ids[16], bytes;
    char next[256];
    size_t n = raw_page(fcall("list", &q, -1, "", "100", "", END), ids, 16, &bytes, next,
                        sizeof next);
    assert_int_equal(n, 8);
    assert_string_equal(next, "");
    for (size_t i = 0; i < 8; i++) {
        size_t seen = 0;
        for (size_t j = 0; j < n; j++) seen += ids[j] == all[i];
        assert_int_equal(seen, 1);
    }
    static const char *const states[] = { "pending", "processing", "succeeded", "dead" };
    static const size_t in_state[] = { 2, 4, 1, 1 };
    for (size_t s = 0; s < 4; s++) {
        n = raw_page(fcall("list", &q, -1, states[s], "100", "", END), ids, 16, &bytes, next,
                     sizeof next);
        assert_int_equal(n, in_state[s]);
    }
    n = raw_export(fcall("export", &q, -1, "csv", "", "100", "", END), ids, 16, &bytes, next,
                   sizeof next);
    assert_int_equal(n, 8);
    redisReply *r = fcall("export", &q, -1, "csv", "dead", "100", "", END);
    assert_int_equal(r->elements, 2);
    char line[64];
    snprintf(line, sizeof line, "%lld,dead,1,1,", e);
    assert_non_null(strstr(r->element[1]->str, line));
    assert_non_null(strstr(r->element[1]->str, ",boom,e dead"));
    freeReplyObject(r);
    r = fcall("stats", &q, -1, "10", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    static const char *const counts[] = { "pending", "processing", "succeeded", "dead" };
    for (size_t s = 0; s < 4; s++)
        for (size_t i = 0; i + 1 < r->elements; i += 2)
            if (strcmp(r->element[i]->str, counts[s]) == 0)
                assert_int_equal(r->element[i + 1]->integer, (long long)in_state[s]);
    freeReplyObject(r);
    for (size_t i = 0; i < 8; i++)
        assert_string_equal(key_type(mkey(&q, all[i])), "hash");

    /* enqueue with a's idempotency key: the original, as retryd_v2 has it. */
    r = fcall("enqueue", &q, -1, "again", "3", "0", "key-a", END);
    assert_true(has_code(r, "duplicate"));
    msg_parse(r->element[1], &m);
    freeReplyObject(r);
    assert_int_equal(m.id, a);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "payload"), "a now");

    /* release of a retryd_v2 lease through retryd_v3 (a long-poll client of a
     * v3 instance cannot hold one, but the function takes any): h is lifted
     * under its lease, then handed back to the front of the new due list. */
    r = fcall("release", &q, -1, num(h), "1.1", END);
    assert_int_equal(int_reply(r), 0);
    assert_string_equal(key_type(mkey(&q, h)), "hash");
    r = fcall("release", &q, -1, num(h), msg_str(&h_lease, "lease_token"), END);
    assert_int_equal(int_reply(r), 1);
    assert_string_equal(key_type(mkey(&q, h)), "string");
    expect_ok_msg(fcall("get", &q, h, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "payload"), "h released");
    claim_one(&q, 600000, &m);
    assert_int_equal(m.id, h);
    expect_ok_msg(fcall("succeed", &q, h, msg_str(&m, "lease_token"), END), &m);

    /* claim: the pending one (b is scheduled an hour away), a record now. */
    msg_t got[4];
    n = expect_ok_msgs(fcall("claim", &q, -1, "600000", "4", END), got, 4);
    assert_int_equal(n, 1);
    assert_int_equal(got[0].id, a);
    assert_string_equal(msg_str(&got[0], "payload"), "a now");
    assert_string_equal(msg_str(&got[0], "idempotency_key"), "key-a");
    assert_string_equal(key_type(mkey(&q, a)), "string");
    assert_generations_apart(&q);

    /* retryd_v2's lease tokens settle through retryd_v3. */
    expect_code(fcall("succeed", &q, c, "1.1", END), "lease_mismatch", NULL);
    expect_ok_msg(fcall("succeed", &q, c, msg_str(&c_lease, "lease_token"), END), &m);
    assert_string_equal(msg_str(&m, "status"), "succeeded");
    assert_string_equal(msg_str(&m, "payload"), "c lease");
    assert_string_equal(key_type(mkey(&q, c)), "string");
    expect_ok_msg(fcall("fail", &q, f, msg_str(&f_lease, "lease_token"), "oops", "1", "0", END),
                  &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_string_equal(msg_str(&m, "last_error"), "oops");
    /* ... and retryd_v2 now answers an error for them, before any write. */
    r = fcall_v2("get", &q, c, END);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);

    /* replay of retryd_v2's dead letter. */
    expect_ok_msg(fcall("replay", &q, e, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 0);
    assert_no_field(&m, "last_error");
    assert_string_equal(key_type(mkey(&q, e)), "string");
    assert_generations_apart(&q);

    /* tick: b made due by hand (test setup), g's 1 ms lease expires, d is past
     * a 1 ms retention. Ticks until all three are done (bounded). */
    assert_int_equal(int_reply(rcmd("ZADD", qkey(&q, "scheduled"), "XX", "CH", "0", num(b), END)), 1);
    long long promoted = 0, reclaimed = 0, expired = 0;
    for (int round = 0; round < 2000 && (promoted < 1 || reclaimed < 1 || expired < 1); round++) {
        long long t[5];
        expect_ints(fcall("tick", &q, -1, "100", "0", "1", END), 5, t);
        promoted += t[0], reclaimed += t[1], expired += t[2];
    }
    assert_true(promoted >= 1 && reclaimed == 1 && expired >= 1);  /* c's 1 ms too */
    expect_code(fcall("get", &q, d, END), "not_found", NULL);
    expect_ok_msg(fcall("get", &q, g, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "last_error"), "lease expired");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_string_equal(key_type(mkey(&q, g)), "string");
    expect_ok_msg(fcall("get", &q, b, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "payload"), "b later");

    /* Claimable now: e (replayed), f (retry due at once), b (promoted). */
    msg_t more[8];
    n = expect_ok_msgs(fcall("claim", &q, -1, "600000", "8", END), more, 8);
    assert_int_equal(n, 3);
    bool saw_b = false;
    for (size_t i = 0; i < n; i++) {
        saw_b |= more[i].id == b;
        assert_string_equal(key_type(mkey(&q, more[i].id)), "string");
    }
    assert_true(saw_b);
    /* Nothing is left in retryd_v2's indexes but g... which is in the new
     * schedule now: all of them are empty. */
    static const char *const old[] = { "ready", "due", "scheduled", "processing", "succeeded",
                                       "dead" };
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(exists(qkey(&q, old[i])), 0);
    assert_generations_apart(&q);
}

/* A retryd_v2 instance keeps enqueuing while retryd_v3 has a backlog of its
 * own: the timer's tick lifts the old ids onto the claim end, so they are
 * claimed next, not after the backlog; while retryd_v2's indexes exist the
 * queue stays on the timer's schedule (at most OLD_REVISIT_MS away), and
 * the tick empties them, finished messages included. */
static void test_v2_enqueues_not_starved(void **state)
{
    load_v2();
    queue_t q;
    queue_init(&q, "v2starve");
    for (int i = 0; i < 300; i++)
        enqueue_ok(&q, "backlog", 3, 0);
    long long v2ids[5];
    for (int i = 0; i < 5; i++)
        v2ids[i] = v2_enqueue(&q, "from v2", "3", "0", "");
    msg_t m;
    claim_one(&q, 30000, &m);
    assert_string_equal(msg_str(&m, "payload"), "backlog");

    long long t[6];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), 6, t);
    assert_int_equal(t[0], 5);                 /* lifted */
    assert_true(t[3] >= 0 && t[3] <= 1000);    /* comes back soon */
    assert_int_equal(t[5], 0);                 /* not empty */
    msg_t got[5];
    size_t n = expect_ok_msgs(fcall("claim", &q, -1, "30000", "5", END), got, 5);
    assert_int_equal(n, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(got[i].id, v2ids[i]);  /* oldest first */
        assert_string_equal(msg_str(&got[i], "payload"), "from v2");
    }

    /* More from retryd_v2 later: bounded ticks bring it in too. */
    long long late = v2_enqueue(&q, "late v2", "3", "0", "");
    int ticks = 0;
    do {
        expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), 6, t);
        ticks++;
    } while (t[0] == 0 && ticks < 3);
    assert_int_equal(t[0], 1);
    claim_one(&q, 30000, &m);
    assert_int_equal(m.id, late);

    /* A queue that holds only retryd_v2's messages stays on the schedule
     * (a v2 instance may keep enqueuing without any hint). */
    queue_t only;
    queue_init(&only, "v2only");
    long long z = v2_enqueue(&only, "z", "1", "0", "");
    v2_claim(&only, "30000", z, &m);
    expect_ok_msg(fcall_v2("fail", &only, z, msg_str(&m, "lease_token"), "gone", "0", "-1", END),
                  &m);
    msg_t dead_before;
    get_with(true, &only, z, &dead_before);
    v2_enqueue(&only, "x", "3", "0", "");
    v2_enqueue(&only, "y", "3", "0", "");
    assert_generations_apart(&only);
    expect_ints(fcall("tick", &only, -1, "100", "0", "0", "1", END), 6, t);
    assert_int_equal(t[0], 2);
    assert_true(t[3] >= 0 && t[3] <= 1000);
    assert_int_equal(t[5], 0);
    /* Everything was lifted, the dead letter kept forever too (dead_ttl 0),
     * with its time of death: retryd_v2's indexes are gone, and the queue
     * is back to ticks only when it has timer work. */
    static const char *const old[] = { "ready", "due", "scheduled", "processing", "succeeded",
                                       "dead" };
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(exists(qkey(&only, old[i])), 0);
    get_with(false, &only, z, &m);
    assert_same_fields(&dead_before, &m);
    assert_string_equal(key_type(mkey(&only, z)), "string");
    expect_ints(fcall("tick", &only, -1, "100", "0", "0", "1", END), 6, t);
    assert_int_equal(t[3], -1);
    assert_int_equal(t[4], 2);
    assert_generations_apart(&q);
    assert_generations_apart(&only);
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

/* settle_claim forwards the earliest work it creates as a timer hint when the
 * caller passes retention (dead_ttl_ms, succeeded_ttl_ms): a new lease on a
 * queue without a promise, a retry earlier than the promise; none without the
 * two values (the old reply shape). */
static void test_settle_claim_timer_hints(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "settlehints");
    enqueue_ok(&q, "a", 3, 0);
    enqueue_ok(&q, "b", 3, 0);
    assert_int_equal(promise(&q), -1);
    /* Nothing to settle, one claim: the lease's deadline is the hint. */
    redisReply *r = fcall("settle_claim", &q, -1, "20000", "1", "0", "0", "0", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 4);   /* ok, statuses, message, timer */
    assert_int_equal(r->element[3]->integer, 20000);
    msg_t m;
    msg_parse(r->element[2], &m);
    freeReplyObject(r);
    assert_int_equal(promise(&q), msg_int(&m, "lease_expires_at"));
    /* Fail it with a retry in 100 ms (earlier than the promise) and claim the
     * next: the retry's delay is the hint. */
    long long h = hint_of(fcall("settle_claim", &q, -1, "20000", "1", "1", num(m.id),
                                msg_str(&m, "lease_token"), "failed", "boom", "1", "100",
                                "0", "0", END));
    assert_in_range(h, 0, 100);
    /* Without the two values: no hint appended. */
    r = fcall("settle_claim", &q, -1, "20000", "0", "0", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);   /* ok, statuses */
    freeReplyObject(r);
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

    /* Retention hints from succeed and succeed_many; a death (fail, kill) is
     * due now (death_hint: the tick reports it to alerting instances). */
    queue_t s;
    queue_init(&s, "hintret");
    for (int i = 0; i < 4; i++) enqueue_ok(&s, "x", 1, 0);
    msg_t c[4];
    assert_int_equal(expect_ok_msgs(fcall("claim", &s, -1, "600000", "4", END), c, 4), 4);
    h = hint_of(fcall("succeed", &s, c[0].id, "", "1000", END));
    assert_in_range(h, 900, 1000);
    assert_int_equal(hint_of(fcall("succeed_many", &s, -1, num(c[1].id), "", "2000", END)), -1);
    assert_int_equal(hint_of(fcall("fail", &s, c[2].id, "", "dead", "0", "-1", "500", END)), 0);
    assert_true(promise(&s) <= redis_now_ms());
    /* The queue is due now already: a second death needs nothing. */
    assert_int_equal(hint_of(fcall("kill", &s, c[3].id, "", "100", END)), -1);
    /* A kill on a queue without a promise is due now. */
    queue_t k;
    queue_init(&k, "hintkill");
    long long kid = enqueue_ok(&k, "x", 1, 0);
    assert_int_equal(promise(&k), -1);
    assert_int_equal(hint_of(fcall("kill", &k, kid, "", "100", END)), 0);
    expect_error(fcall("succeed", &s, c[0].id, "", "x", END));
    expect_error(fcall("fail", &s, c[2].id, "", "e", "1", "-1", "x", END));
    expect_error(fcall("kill", &s, c[3].id, "", "x", END));
}

/* ------------------------------------------------------------------------ */
/* Alerts (lua/05_alerts.lua, docs/dead-letters.md)                         */
/* ------------------------------------------------------------------------ */

/* The stream id of element i of an alerts_take reply (2 + 5i; element 1 is the
 * queue's alert_url). */
static const char *take_sid(const redisReply *r, size_t i)
{
    assert_true(r->elements > 2 + 5 * i);
    char *s = scratch();
    snprintf(s, 192, "%s", r->element[2 + 5 * i]->str);
    return s;
}

static long long group_pending(const queue_t *q)
{
    redisReply *r = rcmd("XPENDING", qkey(q, "events"), "retryd-alerts", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long n = r->element[0]->integer;
    freeReplyObject(r);
    return n;
}

/* tick with an alert recheck answers `alerts` (and creates the group); take
 * hands each entry to one consumer and skips replays; touch keeps only a
 * consumer's own entries; take claims back idle ones; ack counts. */
static void test_alert_group_protocol(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "alerts");
    long long r[TICK_N + 2];
    /* No stream yet: no alerts, no group, and the old reply without the flag. */
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "5000", END), TICK_N + 2, r);
    assert_int_equal(r[6], 0);
    long long id1 = make_dead(&q, "boom");
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_N + 1, r);
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "5000", END), TICK_N + 2, r);
    assert_int_equal(r[6], 1);
    assert_in_range(r[3], 0, 5000);     /* due again within the recheck */
    assert_int_equal(group_pending(&q), 0);

    redisReply *t = fcall("alerts_take", &q, -1, "c1", "10", "5000", END);
    assert_int_equal(t->type, REDIS_REPLY_ARRAY);
    assert_int_equal(t->elements, 7);
    assert_int_equal(t->element[0]->integer, 0);
    const char *sid1 = take_sid(t, 0);
    assert_int_equal(parse_int(t->element[3]->str, t->element[3]->len, "id"), id1);
    assert_string_equal(t->element[4]->str, "boom");
    assert_string_equal(t->element[5]->str, "1");
    freeReplyObject(t);
    /* Nothing new for c2, and c1's entry is not idle. */
    t = fcall("alerts_take", &q, -1, "c2", "10", "5000", END);
    assert_int_equal(t->elements, 2);
    freeReplyObject(t);
    /* Pending with c1: the tick still reports it. */
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "5000", END), TICK_N + 2, r);
    assert_int_equal(r[6], 1);

    /* A replay and a second death: c2 gets the death only; the replay is
     * acknowledged at once. */
    msg_t m;
    expect_ok_msg(fcall("replay", &q, id1, END), &m);
    claim_one(&q, 60000, &m);
    assert_int_equal(m.id, id1);
    fail_ok(&q, id1, "second", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    t = fcall("alerts_take", &q, -1, "c2", "10", "5000", END);
    assert_int_equal(t->elements, 7);
    assert_int_equal(parse_int(t->element[3]->str, t->element[3]->len, "id"), id1);
    assert_string_equal(t->element[4]->str, "second");
    const char *sid2 = take_sid(t, 0);
    freeReplyObject(t);
    assert_int_equal(group_pending(&q), 2);

    /* touch: c2 keeps its own entry only, and counts its failures. */
    t = fcall("alerts_touch", &q, -1, "c2", "3", sid1, sid2, END);
    assert_int_equal(t->elements, 1);
    assert_string_equal(t->element[0]->str, sid2);
    freeReplyObject(t);
    assert_int_equal(counter(&q, "alerts_failed"), 3);

    /* c1 went silent: with min_idle 0, c2 claims its entry back. */
    t = fcall("alerts_take", &q, -1, "c2", "10", "0", END);
    assert_true(t->elements >= 7);
    bool got1 = false;
    for (size_t i = 0; i < (t->elements - 2) / 5; i++) got1 |= strcmp(take_sid(t, i), sid1) == 0;
    assert_true(got1);
    freeReplyObject(t);
    assert_true(counter(&q, "alerts_claimed") >= 1);
    /* c1 no longer holds it. */
    t = fcall("alerts_touch", &q, -1, "c1", "0", sid1, END);
    assert_int_equal(t->elements, 0);
    freeReplyObject(t);

    assert_int_equal(int_reply(fcall("alerts_ack", &q, -1, sid1, sid2, END)), 2);
    assert_int_equal(int_reply(fcall("alerts_ack", &q, -1, sid1, END)), 0);
    assert_int_equal(counter(&q, "alerts_delivered"), 2);
    assert_int_equal(group_pending(&q), 0);
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "5000", END), TICK_N + 2, r);
    assert_int_equal(r[6], 0);

    /* touch keeps every one of several entries (each must stay fresh, or
     * another instance claims it back while it is being posted). */
    for (int i = 0; i < 3; i++) make_dead(&q, "more");
    t = fcall("alerts_take", &q, -1, "c3", "10", "5000", END);
    assert_int_equal(t->elements, 17);
    const char *s3[3] = { take_sid(t, 0), take_sid(t, 1), take_sid(t, 2) };
    freeReplyObject(t);
    t = fcall("alerts_touch", &q, -1, "c3", "0", s3[0], s3[1], s3[2], END);
    assert_int_equal(t->elements, 3);
    freeReplyObject(t);
    assert_int_equal(int_reply(fcall("alerts_ack", &q, -1, s3[0], s3[1], s3[2], END)), 3);

    expect_error(fcall("alerts_take", &q, -1, "", "10", "0", END));
    expect_error(fcall("alerts_take", &q, -1, "c", "0", "0", END));
    expect_error(fcall("alerts_take", &q, -1, "c", "101", "0", END));
    expect_error(fcall("alerts_take", &q, -1, "c", "1", "-1", END));
    expect_error(fcall("alerts_touch", &q, -1, "c", "x", END));
    expect_error(fcall("alerts_ack", &q, -1, END));
    expect_error(fcall("tick", &q, -1, "100", "0", "0", "1", "-1", END));
}

/* Once the alert group exists, the events stream is trimmed exactly and a
 * death trimmed before delivery is counted (alerts_dropped): by emit when it
 * was never delivered, by alerts_take when it was pending with a consumer. */
static void test_alert_trim_counts_undelivered(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "alerttrim");
    const char *events = qkey(&q, "events");
    for (int i = 0; i < 10000; i++) {
        redisReply *x = rcmd("XADD", events, "*", "event", "dead", "id", "0", "error", "e",
                             "retry_count", "1", "at", "0", END);
        assert_int_equal(x->type, REDIS_REPLY_STRING);
        freeReplyObject(x);
    }
    long long r[TICK_N + 2];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "5000", END), TICK_N + 2, r);
    assert_int_equal(r[6], 1);
    /* The oldest is delivered and acknowledged: trimming it counts nothing. */
    redisReply *t = fcall("alerts_take", &q, -1, "c", "1", "5000", END);
    assert_int_equal(int_reply(fcall("alerts_ack", &q, -1, take_sid(t, 0), END)), 1);
    freeReplyObject(t);
    make_dead(&q, "one");
    assert_int_equal(int_reply(rcmd("XLEN", events, END)), 10000);
    assert_int_equal(counter(&q, "alerts_dropped"), 0);
    /* The next oldest was never delivered. */
    make_dead(&q, "two");
    assert_int_equal(int_reply(rcmd("XLEN", events, END)), 10000);
    assert_int_equal(counter(&q, "alerts_dropped"), 1);
    /* Delivered to c, not acknowledged, then trimmed: counted when claimed. */
    t = fcall("alerts_take", &q, -1, "c", "1", "5000", END);
    freeReplyObject(t);
    make_dead(&q, "three");
    assert_int_equal(counter(&q, "alerts_dropped"), 1);
    t = fcall("alerts_take", &q, -1, "c2", "1", "0", END);
    freeReplyObject(t);
    assert_int_equal(counter(&q, "alerts_dropped"), 2);
}

/* extend with the hint flag forwards a shortened lease's deadline as a timer
 * hint (and lowers the promise); a longer one needs none; without the flag
 * the reply is {"ok", message} and the promise is left alone. */
static void test_extend_timer_hint(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "extendhint");
    enqueue_ok(&q, "x", 3, 0);
    redisReply *r = fcall("claim", &q, -1, "3600000", "1", "1", END);
    assert_int_equal(r->elements, 3);   /* ok, message, timer */
    assert_int_equal(r->element[2]->integer, 3600000);
    msg_t m, e;
    msg_parse(r->element[1], &m);
    freeReplyObject(r);
    long long p = promise(&q);
    assert_int_equal(p, msg_int(&m, "lease_expires_at"));
    /* No flag: the old shape, the promise untouched. */
    expect_ok_msg(fcall("extend", &q, m.id, "", "60000", END), &e);
    assert_int_equal(promise(&q), p);
    /* With the flag, a shorter lease: its deadline is the hint. */
    r = fcall("extend", &q, m.id, msg_str(&m, "lease_token"), "1000", "1", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 3);   /* ok, message, timer */
    assert_int_equal(r->element[2]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->element[2]->integer, 1000);
    msg_parse(r->element[1], &e);
    freeReplyObject(r);
    assert_int_equal(promise(&q), msg_int(&e, "lease_expires_at"));
    /* A longer lease is later than the promise: no hint. */
    assert_int_equal(hint_of(fcall("extend", &q, m.id, "", "600000", "1", END)), -1);
    assert_int_equal(promise(&q), msg_int(&e, "lease_expires_at"));
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
    redisReply *r = rcmd("FCALL", RD_FUNCTION("timer_take"), "1", reg, "10", lease, sweep, "1000", "60000", END);
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
    assert_int_equal(int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "idle", "-1", END)), 1);
    assert_true(is_member(regc, "idle"));
    assert_int_equal(score_of(nk, "idle"), 0);
    assert_int_equal(score_of(tk, "idle"), -1);
    expect_error(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "", "0", END));
    expect_error(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "q", "x", END));

    /* Due now: taken with a lease; the report sets the next time. */
    long long now = redis_now_ms();
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "a", "0", END));
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "b", "0", END));
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "c", "0", END));
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "d", "600000", END));
    /* Later hints never raise an entry. */
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "a", "900000", END));
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
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "b", "-1", END));
    long long b_before = score_of(tk, "b");
    long long removed = int_reply(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, num(token),
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
    int_reply(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, num(token), "d", "1000", "0", END));
    assert_true(score_of(tk, "d") <= redis_now_ms() + 1000);
    int_reply(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, num(token), "d", "900000", "0", END));
    assert_true(score_of(tk, "d") <= redis_now_ms() + 1000);
    /* An idle report removes the entry, not the registration. */
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, "a", "0", END));
    token = take(regc, "5000", "0", &n, got);
    assert_int_equal(n, 1);
    int_reply(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, num(token), "a", "-1", "0", END));
    assert_int_equal(score_of(tk, "a"), -1);
    assert_true(is_member(regc, "a"));

    expect_error(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, "1", "a", "x", "0", END));
    expect_error(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, "1", "a", "1", END));
    expect_error(rcmd("FCALL", RD_FUNCTION("timer_take"), "1", regc, "0", "5000", "0", "1000", "0", END));
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
    int_reply(rcmd("FCALL", RD_FUNCTION("timer_done"), "1", regc, num(token), "s1", "-1", "0", "s2", "-1",
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
        int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", regc, names[i], "-1", END));
    static const char *const order[] = { "a", "a b", "b", "c", "d", "\xc3\xa9" };
    char cursor[32] = "";
    size_t seen = 0;
    for (int page = 0; page < 10; page++) {
        redisReply *r = rcmd("FCALL_RO", RD_FUNCTION("queues_page"), "1", regc, cursor, "4", END);
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
    expect_error(rcmd("FCALL_RO", RD_FUNCTION("queues_page"), "1", regc, "", "0", END));
    expect_error(rcmd("FCALL_RO", RD_FUNCTION("queues_page"), "1", regc, "", "1001", END));
}

/* A registry key with a hash tag keeps it: the companions append to it. */
static void test_registry_tagged_prefix(void **state)
{
    char reg[64];
    snprintf(reg, sizeof reg, "t{%ld}:queues", (long)getpid());
    int_reply(rcmd("FCALL", RD_FUNCTION("register"), "1", reg, "q", "0", END));
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
/* ------------------------------------------------------------------------ */
/* Queue policy and flow control (docs/reference.md "Queue policy and flow control", docs/flow-control.md)           */
/* ------------------------------------------------------------------------ */

/* policy_set in mode ("replace" | "merge") with field, value pairs; expects "ok". */
#define policy_set(q, mode, ...) \
    policy_set_at(fcall("policy_set", (q), -1, (mode), __VA_ARGS__, END), __FILE__, __LINE__)
static void policy_set_at(redisReply *r, const char *file, int line)
{
    if (!has_code(r, "ok")) FAIL_AT(file, line, "policy_set: %s", reply_desc(r));
    freeReplyObject(r);
}

/* The policy's stored value of field, "" when absent. */
static const char *policy_field(const queue_t *q, const char *field)
{
    redisReply *r = rcmd("HGET", qkey(q, "policy"), field, END);
    char *out = scratch();
    out[0] = '\0';
    if (r->type == REDIS_REPLY_STRING) snprintf(out, 192, "%s", r->str);
    freeReplyObject(r);
    return out;
}

/* claim with the lease source (ARGV[4]): returns how many messages it leased
 * (ids into out) and the trailing retry_ms (ms until the next token). */
static size_t claim_gated(const queue_t *q, const char *lease_ms, int count, const char *source,
                          long long *ids, long long *retry_ms)
{
    redisReply *r = fcall("claim", q, -1, lease_ms, num(count), "1", source, END);
    if (!has_code(r, "ok") || r->elements < 3)
        fail_msg("claim: %s", reply_desc(r));
    size_t n = r->elements - 3;
    assert_int_equal(r->element[r->elements - 1]->type, REDIS_REPLY_INTEGER);
    *retry_ms = r->element[r->elements - 1]->integer;
    for (size_t i = 0; i < n; i++) {
        msg_t m;
        msg_parse(r->element[1 + i], &m);
        if (ids) ids[i] = m.id;
    }
    freeReplyObject(r);
    return n;
}

/* The reference table holds with every default written out explicitly. */
static void test_policy_defaults_keep_reference_table(void **state)
{
    static const long long delays_ms[] = { 2000, 4000, 8000, 16000 };
    queue_t q;
    queue_init(&q, "poldefaults");
    policy_set(&q, "replace", "max_retries", "3", "backoff.base_seconds", "1",
               "backoff.max_seconds", "3600", "backoff.jitter", "none", "max_in_flight", "0");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    for (int n = 1; n <= 4; n++) {
        claim_one(&q, 30000, &m);
        fail_ok(&q, id, "e", "1", -1, &m);
        assert_string_equal(msg_str(&m, "status"), "pending");
        assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), delays_ms[n - 1]);
        make_due(&q, id);
    }
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
}

/* delay = min(base x 2^n, max) seconds; retry_after_seconds still wins. */
static void test_policy_backoff_base_and_max(void **state)
{
    queue_t q;
    queue_init(&q, "polbackoff");
    policy_set(&q, "replace", "backoff.base_seconds", "3", "backoff.max_seconds", "10");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 6000);
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "e", "1", -1, &m);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 10000);
    make_due(&q, id);
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "e", "1", 777, &m);
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 777);
}

/* full: uniform in [0, delay]; equal: delay/2 + uniform in [0, delay/2]. The
 * draws differ from one failure to the next. */
static void test_policy_jitter(void **state)
{
    static const char *const kinds[] = { "full", "equal" };
    for (int k = 0; k < 2; k++) {
        queue_t q;
        queue_init(&q, kinds[k]);
        policy_set(&q, "replace", "backoff.jitter", kinds[k], "backoff.base_seconds", "5");
        long long lo = 10000, hi = 0;
        for (int i = 0; i < 20; i++) {
            long long id = enqueue_ok(&q, "job", 5, 0);
            msg_t m;
            claim_one(&q, 30000, &m);
            assert_int_equal(m.id, id);
            fail_ok(&q, id, "e", "1", -1, &m);
            long long d = msg_int(&m, "retry_after") - msg_int(&m, "updated_at");
            assert_true(d >= (k == 0 ? 0 : 5000) && d <= 10000); /* delay 5 x 2^1 s */
            if (d < lo) lo = d;
            if (d > hi) hi = d;
        }
        assert_true(hi - lo > 100);  /* 20 draws of one value would be no jitter */
    }
}

static void test_policy_set_validation(void **state)
{
    queue_t q;
    queue_init(&q, "polvalid");
    policy_set(&q, "replace", "max_retries", "4");
    static const char *const bad[][2] = {
        { "max_retries", "0" },           { "max_retries", "11" },
        { "max_retries", "2.5" },         { "backoff.base_seconds", "3601" },
        { "backoff.max_seconds", "0" },   { "backoff.jitter", "some" },
        { "lease_seconds", "43201" },     { "dead_ttl", "-1" },
        { "succeeded_ttl", "3x" },        { "max_in_flight", "1000001" },
        { "rate_limit.per_second", "0" }, { "rate_limit.per_second", "inf" },
        { "rate_limit.burst", "0" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redisReply *r = fcall("policy_set", &q, -1, "merge", bad[i][0], bad[i][1], END);
        if (!has_code(r, "invalid") || r->elements != 3 || strcmp(r->element[1]->str, bad[i][0]) != 0)
            fail_msg("%s=%s: %s", bad[i][0], bad[i][1], reply_desc(r));
        freeReplyObject(r);
    }
    redisReply *r = fcall("policy_set", &q, -1, "merge", "rate_limit.per_second", "5", END);
    assert_true(has_code(r, "invalid"));
    assert_string_equal(r->element[1]->str, "rate_limit");
    freeReplyObject(r);
    assert_string_equal(policy_field(&q, "max_retries"), "4");  /* nothing changed */
    expect_error(fcall("policy_set", &q, -1, "upsert", "max_retries", "3", END));
    expect_error(fcall("policy_set", &q, -1, "merge", "max_retries", END));
    /* Durations take a unit; merge keeps the others, "" clears one. */
    policy_set(&q, "merge", "dead_ttl", "2d", "rate_limit.per_second", "0.5",
               "rate_limit.burst", "3");
    assert_string_equal(policy_field(&q, "dead_ttl"), "172800");
    assert_string_equal(policy_field(&q, "max_retries"), "4");
    policy_set(&q, "merge", "max_retries", "");
    assert_string_equal(policy_field(&q, "max_retries"), "");
    assert_string_equal(policy_field(&q, "rate_limit.per_second"), "0.5");
    policy_set(&q, "replace", "lease_seconds", "9");
    assert_string_equal(policy_field(&q, "dead_ttl"), "");
    assert_int_equal(exists(qkey(&q, "bucket")), 0);
}

/* alert_url: policy_set takes an absolute http(s) URL of 1-2048 bytes of
 * UTF-8 without spaces or control characters, and refuses anything else with
 * field alert_url; alerts_take answers it as element 1 ("" when not set or
 * when a value written by hand is no URL), read in the same call. */
static void test_policy_alert_url(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "polurl");
    char long_url[2100];
    memset(long_url, 'a', sizeof long_url - 1);
    long_url[sizeof long_url - 1] = '\0';
    memcpy(long_url, "http://x/", 9);
    long_url[2049] = '\0';  /* 2049 bytes */
    static const char *const bad[] = {
        "ftp://h/x", "http://", "https:///path", "/relative", "example.com/x",
        "HTTP://h/", "http://h/a b", "http://h/\t", "http://h/\x7f", "http://h/\xc2\x85",
        "http://h/\xff", "http://h/\xed\xa0\x80", "javascript:alert(1)",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] + 1; i++) {
        const char *v = i < sizeof bad / sizeof bad[0] ? bad[i] : long_url;
        redisReply *r = fcall("policy_set", &q, -1, "merge", "alert_url", v, END);
        if (!has_code(r, "invalid") || r->elements != 3 ||
            strcmp(r->element[1]->str, "alert_url") != 0)
            fail_msg("alert_url=%s: %s", v, reply_desc(r));
        freeReplyObject(r);
    }
    assert_string_equal(policy_field(&q, "alert_url"), "");
    long_url[2048] = '\0';  /* 2048 bytes: the most */
    policy_set(&q, "merge", "alert_url", long_url);
    assert_int_equal(int_reply(rcmd("HSTRLEN", qkey(&q, "policy"), "alert_url", END)), 2048);
    policy_set(&q, "merge", "alert_url", "https://h\xc3\xa9.example:8443/hook?q=\xe2\x82\xac#f");
    assert_string_equal(policy_field(&q, "alert_url"),
                        "https://h\xc3\xa9.example:8443/hook?q=\xe2\x82\xac#f");

    /* alerts_take answers the URL with and without deaths. */
    redisReply *t = fcall("alerts_take", &q, -1, "c", "10", "5000", END);
    assert_int_equal(t->elements, 2);
    assert_string_equal(t->element[1]->str, "https://h\xc3\xa9.example:8443/hook?q=\xe2\x82\xac#f");
    freeReplyObject(t);
    make_dead(&q, "boom");
    policy_set(&q, "merge", "alert_url", "http://127.0.0.1:9/q");
    t = fcall("alerts_take", &q, -1, "c", "10", "5000", END);
    assert_int_equal(t->elements, 7);
    assert_string_equal(t->element[1]->str, "http://127.0.0.1:9/q");
    assert_string_equal(t->element[4]->str, "boom");
    freeReplyObject(t);
    /* "" clears it: the daemon's --alert-url applies. */
    policy_set(&q, "merge", "alert_url", "");
    assert_string_equal(policy_field(&q, "alert_url"), "");
    t = fcall("alerts_take", &q, -1, "c", "10", "5000", END);
    assert_string_equal(t->element[1]->str, "");
    freeReplyObject(t);
    /* A value written by hand that policy_set would refuse counts as not set. */
    redisReply *x = rcmd("HSET", qkey(&q, "policy"), "alert_url", "file:///etc/passwd", END);
    freeReplyObject(x);
    t = fcall("alerts_take", &q, -1, "c", "10", "5000", END);
    assert_string_equal(t->element[1]->str, "");
    freeReplyObject(t);
}

/* A request's value beats the policy's, which beats the caller's default. */
static void test_policy_precedence(void **state)
{
    queue_t q;
    queue_init(&q, "polprec");
    policy_set(&q, "replace", "max_retries", "7", "lease_seconds", "5");
    redisReply *r = fcall("enqueue", &q, -1, "a", "3", "0", "", "1", "default", END);
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->elements, 5);
    assert_int_equal(r->element[4]->integer, 7);
    long long a = r->element[1]->integer;
    freeReplyObject(r);
    msg_t got;
    expect_ok_msg(fcall("get", &q, a, END), &got);
    assert_int_equal(msg_int(&got, "max_retries"), 7);
    r = fcall("enqueue", &q, -1, "b", "2", "0", "", "1", "request", END);
    assert_int_equal(r->element[4]->integer, 2);
    freeReplyObject(r);
    /* Each lease is bracketed by Redis clock reads before and after its call. */
    long long t0 = redis_now_ms(), retry;
    long long ids[2];
    assert_int_equal(claim_gated(&q, "60000", 1, "flag", ids, &retry), 1);
    long long t1 = redis_now_ms();
    long long deadline = zscore(qkey(&q, "3:processing"), ids[0]);
    assert_in_range(deadline, t0 + 5000, t1 + 5000);
    assert_int_equal(claim_gated(&q, "60000", 1, "request", ids, &retry), 1);
    assert_true(zscore(qkey(&q, "3:processing"), ids[0]) >= t0 + 60000);
    /* extend: the flag's default gives way to the policy too. */
    msg_t m;
    t0 = redis_now_ms();
    r = fcall("extend", &q, ids[0], "", "60000", "1", "flag", END);
    t1 = redis_now_ms();
    assert_true(has_code(r, "ok") && r->elements == 3);
    msg_parse(r->element[1], &m);
    freeReplyObject(r);
    assert_in_range(msg_int(&m, "lease_expires_at"), t0 + 5000, t1 + 5000);
}

static void test_pause_resume(void **state)
{
    queue_t q;
    queue_init(&q, "polpause");
    enqueue_ok(&q, "a", 3, 0);
    assert_int_equal(int_reply(fcall("pause", &q, -1, "1", END)), 1);
    long long retry, ids[2];
    assert_int_equal(claim_gated(&q, "30000", 2, "flag", ids, &retry), 0);
    assert_int_equal(retry, 0);
    assert_int_equal(counter(&q, "held_paused"), 1);
    /* Everything else goes on; a policy write keeps the pause. */
    enqueue_ok(&q, "b", 3, 0);
    policy_set(&q, "replace", "max_retries", "2");
    assert_string_equal(policy_field(&q, "paused"), "1");
    expect_nothing_to_claim(&q);
    assert_int_equal(int_reply(fcall("pause", &q, -1, "0", END)), 0);
    assert_int_equal(claim_gated(&q, "30000", 2, "flag", ids, &retry), 2);
    expect_error(fcall("pause", &q, -1, "yes", END));
    /* An empty paused queue holds no claim back. */
    int_reply(fcall("pause", &q, -1, "1", END));
    expect_nothing_to_claim(&q);
    assert_int_equal(counter(&q, "held_paused"), 2);  /* the one above with b waiting */
}

static void test_max_in_flight(void **state)
{
    queue_t q;
    queue_init(&q, "polcap");
    for (int i = 0; i < 5; i++) enqueue_ok(&q, "job", 3, 0);
    policy_set(&q, "replace", "max_in_flight", "2");
    long long retry, ab[5], c[5];
    assert_int_equal(claim_gated(&q, "30000", 5, "flag", ab, &retry), 2);
    assert_int_equal(claim_gated(&q, "30000", 1, "flag", NULL, &retry), 0);
    assert_int_equal(retry, 0);
    assert_int_equal(counter(&q, "held_cap"), 2);
    msg_t m;
    expect_ok_msg(fcall("succeed", &q, ab[0], "", END), &m);
    assert_int_equal(claim_gated(&q, "30000", 5, "flag", c, &retry), 1);
    /* A cap lowered below what is in flight: nothing until two have left. */
    policy_set(&q, "merge", "max_in_flight", "1");
    assert_int_equal(zcard(qkey(&q, "3:processing")), 2);
    fail_ok(&q, c[0], "e", "1", 0, &m);
    assert_int_equal(claim_gated(&q, "30000", 1, "flag", NULL, &retry), 0);
    expect_ok_msg(fcall("succeed", &q, ab[1], "", END), &m);
    assert_int_equal(claim_gated(&q, "30000", 3, "flag", c, &retry), 1);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 1);
}

/* The library keeps each queue's key names between calls, for at most 1000
 * queues at a time: 1,100 queues in turn (past the bound, so the kept names
 * are dropped and built again), each claim answers from its own queue, and a
 * pause read by one call is not seen by the next queue's call. */
static void test_many_queues_keep_their_own_keys(void **state)
{
    enum { QUEUES = 1100 };
    queue_t *qs = calloc(QUEUES, sizeof *qs);
    assert_non_null(qs);
    char payload[32];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < QUEUES; i++) {
            if (round == 0) {
                queue_t q;
                queue_init(&q, "kept");
                qs[i] = q;
            }
            snprintf(payload, sizeof payload, "p-%d-%d", i, round);
            enqueue_ok(&qs[i], payload, 3, 0);
        }
        int_reply(fcall("pause", &qs[0], -1, "1", END));
        expect_nothing_to_claim(&qs[0]);
        int_reply(fcall("pause", &qs[0], -1, "0", END));
        for (int i = 0; i < QUEUES; i++) {
            msg_t m;
            claim_one(&qs[i], 30000, &m);
            snprintf(payload, sizeof payload, "p-%d-%d", i, round);
            assert_string_equal(msg_str(&m, "payload"), payload);
            expect_ok_msg(fcall("succeed", &qs[i], m.id, "", END), &m);
        }
    }
    free(qs);
}

/* A bucket of burst 3 at 4/s: three at once, then one per 250 ms; a claim
 * held back says when the next token is due. (Each step must run within a
 * token's 250 ms of the one before it: 100 ms was close for a loaded host.) */
static void test_rate_limit_bucket(void **state)
{
    queue_t q;
    queue_init(&q, "polrate");
    for (int i = 0; i < 8; i++) enqueue_ok(&q, "job", 3, 0);
    policy_set(&q, "replace", "rate_limit.per_second", "4", "rate_limit.burst", "3");
    long long retry, ids[8];
    assert_int_equal(claim_gated(&q, "30000", 5, "flag", ids, &retry), 3);
    assert_int_equal(claim_gated(&q, "30000", 1, "flag", NULL, &retry), 0);
    /* retry counts from the held claim's clock, so the wait starts after it
     * (a clock read before the call can be earlier and wake too soon). */
    long long t0 = redis_now_ms();
    assert_true(retry > 0 && retry <= 250);
    assert_true(counter(&q, "held_rate") >= 1);
    wait_until_ms(t0 + retry);
    assert_int_equal(claim_gated(&q, "30000", 2, "flag", ids, &retry), 1);
    /* The bucket expires when it would be full again: no key is left idle. */
    long long ttl = int_reply(rcmd("PTTL", qkey(&q, "bucket"), END));
    assert_true(ttl > 0 && ttl <= 750);
}

/* A rate changed mid-bucket keeps the tokens it had, up to the new burst;
 * removing the rate removes the bucket. */
static void test_rate_changed_mid_bucket(void **state)
{
    queue_t q;
    queue_init(&q, "polratechange");
    for (int i = 0; i < 10; i++) enqueue_ok(&q, "job", 3, 0);
    policy_set(&q, "replace", "rate_limit.per_second", "0.01", "rate_limit.burst", "5");
    long long retry;
    assert_int_equal(claim_gated(&q, "30000", 1, "flag", NULL, &retry), 1); /* 4 left */
    policy_set(&q, "replace", "rate_limit.per_second", "0.02", "rate_limit.burst", "2");
    assert_int_equal(claim_gated(&q, "30000", 5, "flag", NULL, &retry), 2);
    assert_int_equal(claim_gated(&q, "30000", 1, "flag", NULL, &retry), 0);
    assert_true(retry > 40000 && retry <= 50000);   /* one token per 50 s */
    policy_set(&q, "replace", "rate_limit.per_second", "0.01", "rate_limit.burst", "9");
    assert_int_equal(claim_gated(&q, "30000", 1, "flag", NULL, &retry), 0);
    policy_set(&q, "replace", "max_in_flight", "0");
    assert_int_equal(exists(qkey(&q, "bucket")), 0);
    assert_int_equal(claim_gated(&q, "30000", 5, "flag", NULL, &retry), 5);
}

/* The policy's retention wins over tick's arguments (the daemon's flags), and
 * the timer hint of a finished message follows it. */
static void test_policy_retention(void **state)
{
    queue_t q;
    queue_init(&q, "polttl");
    policy_set(&q, "replace", "dead_ttl", "1", "succeeded_ttl", "0");
    long long dead = make_dead(&q, "gone soon");
    long long ok = enqueue_ok(&q, "job", 3, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    redisReply *r = fcall("succeed", &q, ok, "", "1", END);  /* daemon: 1 ms */
    assert_true(has_code(r, "ok"));
    freeReplyObject(r);
    wait_until_ms(zscore(qkey(&q, "3:dead"), dead) + 1001);
    long long t[TICK_N];
    expect_ints(fcall("tick", &q, -1, "100", "0", "1", END), TICK_N, t);
    assert_int_equal(t[2], 1);
    assert_int_equal(exists(mkey(&q, dead)), 0);
    assert_int_equal(exists(mkey(&q, ok)), 1);  /* succeeded_ttl 0 keeps it */
    /* A queue with nothing but a policy stays registered. */
    int_reply(rcmd("DEL", qkey(&q, "3:succeeded"), mkey(&q, ok), qkey(&q, "stats"), qkey(&q, "seq"),
                   qkey(&q, "events"), qkey(&q, "errors"), END));
    long long e[6];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), 6, e);
    assert_int_equal(e[5], 0);
}

/* ------------------------------------------------------------------------ */
/* Time series (lua/05_series.lua, docs/series.md)                          */
/* ------------------------------------------------------------------------ */

enum { SERIES_MINUTES = 120, SERIES_HOURS = 192, SERIES_HEADER = 48, SERIES_BUCKET = 20 };

/* One resolution of the series: start, step and the five series. */
typedef struct {
    long long start, step;
    size_t len;
    long long v[5][SERIES_HOURS];   /* enqueued, succeeded, failed, dead, replayed */
} series_t;

static void series_read(const queue_t *q, const char *resolution, series_t *s)
{
    redisReply *r = fcall("series", q, -1, resolution, END);
    if (r->type == REDIS_REPLY_ERROR) fail_msg("series: %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 7);
    s->start = r->element[0]->integer;
    s->step = r->element[1]->integer;
    s->len = r->element[2]->elements;
    assert_true(s->len <= SERIES_HOURS);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(r->element[2 + i]->elements, s->len);
        for (size_t j = 0; j < s->len; j++) s->v[i][j] = r->element[2 + i]->element[j]->integer;
    }
    freeReplyObject(r);
}

/* ------------------------------------------------------------------------ */
/* Redrive to another queue (lua/65_redrive.lua, docs/dead-letters.md §4)   */
/* ------------------------------------------------------------------------ */

typedef struct {
    bool resumed;
    char next[64];
    size_t count;
    long long ids[8];
    char targets[8][96];
} taken_t;

/* redrive_take's {resumed, next, {id, target, max_retries, payload}...}. */
#define expect_taken(r, out) expect_taken_at((r), (out), __FILE__, __LINE__)
static void expect_taken_at(redisReply *r, taken_t *out, const char *file, int line)
{
    memset(out, 0, sizeof *out);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING)
        FAIL_AT(file, line, "redrive_take: %s", reply_desc(r));
    out->resumed = r->element[0]->integer == 1;
    snprintf(out->next, sizeof out->next, "%s", r->element[1]->str);
    out->count = r->elements - 2;
    if (out->count > 8) FAIL_AT(file, line, "redrive_take: %zu letters", out->count);
    for (size_t i = 0; i < out->count; i++) {
        const redisReply *l = r->element[2 + i];
        if (l->type != REDIS_REPLY_ARRAY || l->elements != 4)
            FAIL_AT(file, line, "redrive_take letter %zu malformed", i);
        out->ids[i] = l->element[0]->integer;
        snprintf(out->targets[i], sizeof out->targets[i], "%s", l->element[1]->str);
    }
    freeReplyObject(r);
}

static long long series_sum(const series_t *s, int i)
{
    long long n = 0;
    for (size_t j = 0; j < s->len; j++) n += s->v[i][j];
    return n;
}

/* Writes the series header: last sample at `at`, with these counters. */
static void series_header(const queue_t *q, long long at, const double c[5])
{
    unsigned char h[SERIES_HEADER];
    double d[6] = { (double)at, c[0], c[1], c[2], c[3], c[4] };
    memcpy(h, d, sizeof h);     /* '<d': the test host is little-endian like Redis' */
    const char *argv[] = { "SETRANGE", qkey(q, "series"), "0", (const char *)h };
    size_t lens[] = { 8, strlen(argv[1]), 1, sizeof h };
    freeReplyObject(command_argv(4, argv, lens));
}

static void test_series_counts_the_lifecycle(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "series");
    long long t0 = redis_now_ms();
    msg_t m;
    long long dead = make_dead(&q, "boom");     /* enqueued, failed, dead */
    expect_ok_msg(fcall("replay", &q, dead, END), &m);
    for (int i = 0; i < 3; i++) enqueue_ok(&q, "x", 3, 0);
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("succeed", &q, m.id, "", END), &m);

    series_t s;
    series_read(&q, "minute", &s);
    long long t1 = redis_now_ms();
    assert_int_equal(s.len, SERIES_MINUTES);
    assert_int_equal(s.step, 60000);
    assert_int_equal(s.start, (t1 / 60000 - SERIES_MINUTES + 1) * 60000);
    long long want[5] = { 4, 1, 1, 1, 1 };
    for (int i = 0; i < 5; i++) {
        assert_int_equal(series_sum(&s, i), want[i]);
        /* All in the current minute, or the one before if one began meanwhile. */
        long long recent = s.v[i][SERIES_MINUTES - 1];
        if (t0 / 60000 != t1 / 60000) recent += s.v[i][SERIES_MINUTES - 2];
        assert_int_equal(recent, want[i]);
    }
    series_read(&q, "hour", &s);
    assert_int_equal(s.len, SERIES_HOURS);
    assert_int_equal(s.step, 3600000);
    for (int i = 0; i < 5; i++) assert_int_equal(series_sum(&s, i), want[i]);

    /* Read again: nothing counted twice. */
    series_read(&q, "minute", &s);
    for (int i = 0; i < 5; i++) assert_int_equal(series_sum(&s, i), want[i]);

    /* A queue that does not exist: zeros, and no key made for it. */
    queue_t none;
    queue_init(&none, "seriesnone");
    series_read(&none, "hour", &s);
    for (int i = 0; i < 5; i++) assert_int_equal(series_sum(&s, i), 0);
    assert_int_equal(exists(qkey(&none, "series")), 0);

    expect_error(fcall("series", &q, -1, "day", END));
    expect_error(fcall("series", &q, -1, END));
    /* Bounded: one key of fixed size, with a TTL. */
    assert_int_equal(int_reply(rcmd("STRLEN", qkey(&q, "series"), END)),
                     SERIES_HEADER + (SERIES_MINUTES + SERIES_HOURS) * SERIES_BUCKET);
    assert_true(int_reply(rcmd("PTTL", qkey(&q, "series"), END)) > 192LL * 3600000);
}

/* A sample 5 minutes after the last: the 4 slots it moves past held data
 * of 2 hours ago (the ring wrapped): they read 0, the older ones keep
 * theirs. Deltas over 150 minutes spread evenly; those before the window
 * are not shown. The clock is faked by writing the last sample's header. */
static void test_series_ring_wrap_and_spread(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "serieswrap");
    enqueue_ok(&q, "x", 3, 0);
    series_t s;
    series_read(&q, "minute", &s);    /* sampled: the header holds enqueued = 1 */
    /* Every bucket of both rings holds 0x01010101 of every series. */
    char fill[(SERIES_MINUTES + SERIES_HOURS) * SERIES_BUCKET];
    memset(fill, 1, sizeof fill);
    const char *argv[] = { "SETRANGE", qkey(&q, "series"), "48", fill };
    size_t lens[] = { 8, strlen(argv[1]), 2, sizeof fill };
    freeReplyObject(command_argv(4, argv, lens));
    const long long old = 0x01010101;

    long long now = redis_now_ms();
    double c[5] = { 1, 0, 0, 0, 0 };
    series_header(&q, now - 5 * 60000, c);
    series_read(&q, "minute", &s);
    long long t = redis_now_ms();
    /* The buckets after the last sample's read 0; it and the older keep theirs. */
    long long moved = t / 60000 - (now - 5 * 60000) / 60000;
    assert_in_range(moved, 5, 6);
    for (size_t j = 0; j < SERIES_MINUTES; j++) {
        long long want = j >= SERIES_MINUTES - (size_t)moved ? 0 : old;
        for (int i = 0; i < 5; i++) assert_int_equal(s.v[i][j], want);
    }

    /* 300 enqueued over the last 150 minutes: 2 a minute in every full
     * minute of the window; the 30 minutes before it are not shown. */
    int_reply(rcmd("HSET", qkey(&q, "stats"), "enqueued", "301", END));
    now = redis_now_ms();
    series_header(&q, now - 150 * 60000, c);
    series_read(&q, "minute", &s);
    long long shown = series_sum(&s, 0);
    for (size_t j = 0; j + 1 < SERIES_MINUTES; j++) assert_in_range(s.v[0][j], 1, 3);
    assert_in_range(shown, 236, 242);     /* about 300 * 120 / 150 */
    for (int i = 1; i < 5; i++) assert_int_equal(series_sum(&s, i), 0);
    /* The hour ring has all 300 (150 minutes is 3 or 4 hours of it), and its
     * older buckets kept their old counts. */
    series_read(&q, "hour", &s);
    long long fresh = 0;
    for (size_t j = SERIES_HOURS - 4; j < SERIES_HOURS; j++)
        if (s.v[0][j] < old) fresh += s.v[0][j];
        else fresh += s.v[0][j] - old;
    assert_int_equal(fresh, 300);
    assert_int_equal(s.v[0][0], old);

    /* A counter that went down (the stats hash deleted) counts nothing. */
    int_reply(rcmd("HSET", qkey(&q, "stats"), "enqueued", "7", END));
    series_t before;
    series_read(&q, "hour", &before);
    assert_memory_equal(before.v, s.v, sizeof s.v);
}

/* tick samples; a tick that saw activity asks for the next within a minute,
 * the next that saw none asks for nothing (docs/reference.md "Cost follows work": idle costs nothing);
 * ARGV[5] "0" samples nothing. */
static void test_series_tick_samples_then_idle(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "seriestick");
    enqueue_ok(&q, "x", 3, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("succeed", &q, m.id, "", END), &m);
    long long r[TICK_N + 1];
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_N + 1, r);
    assert_in_range(r[3], 0, 60000);    /* activity: sample again within a minute */
    redisReply *h = rcmd("GETRANGE", qkey(&q, "series"), "0", "47", END);
    assert_int_equal(h->len, SERIES_HEADER);
    double hdr[6];
    memcpy(hdr, h->str, sizeof hdr);
    freeReplyObject(h);
    assert_true(hdr[1] == 1 && hdr[2] == 1);    /* enqueued 1, succeeded 1 sampled */
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", END), TICK_N + 1, r);
    assert_int_equal(r[3], -1);         /* idle: no more timer visits */
    assert_int_equal(exists(qkey(&q, "timer")), 0);

    /* Without sampling, a tick leaves the series alone. */
    enqueue_ok(&q, "y", 3, 0);
    expect_ints(fcall("tick", &q, -1, "100", "0", "0", "1", "0", "0", END), TICK_N + 1, r);
    assert_int_equal(r[3], -1);
    h = rcmd("GETRANGE", qkey(&q, "series"), "0", "47", END);
    memcpy(hdr, h->str, sizeof hdr);
    freeReplyObject(h);
    assert_true(hdr[1] == 1);
    series_t s;
    series_read(&q, "minute", &s);
    assert_int_equal(series_sum(&s, 0), 2);
}

/* ------------------------------------------------------------------------ */
/* History of attempts and the claim's worker (docs/reference.md "History")                    */
/* ------------------------------------------------------------------------ */

/* The message's history as history_text writes it ("" when it has none). */
static const char *history_of(const queue_t *q, long long id, msg_t *m)
{
    expect_ok_msg(fcall("get", q, id, END), m);
    const field_t *f = msg_field(m, "history");
    return f ? f->value : "";
}

/* {"ok", {status?}, message, timer} of a settle_claim that asked for hints,
 * with zero settlements (status NULL) or one: the claimed message into m. */
static void expect_settled_one(redisReply *r, const char *status, msg_t *m)
{
    assert_true(has_code(r, "ok"));
    assert_int_equal(r->elements, 4);
    assert_int_equal(r->element[1]->elements, status ? 1 : 0);
    if (status) assert_string_equal(r->element[1]->element[0]->str, status);
    msg_parse(r->element[2], m);
    freeReplyObject(r);
}

/* Every kind of failure appends {attempt, error, at, lease_expired, worker}
 * and every replay a mark; the worker is shown while processing only. */
static void test_history_every_failure_kind(void **state)
{
    queue_t q;
    queue_init(&q, "history");
    long long id = enqueue_ok(&q, "job", 10, 0);
    msg_t m;
    /* A worker's failure, by the worker that claimed it. */
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "1", "", "", "w-1", END), &m, 1), 1);
    assert_string_equal(msg_str(&m, "worker"), "w-1");
    assert_no_field(&m, "history");
    assert_string_equal(history_of(&q, id, &m), "");
    assert_string_equal(msg_str(&m, "worker"), "w-1");
    fail_ok(&q, id, "e1", "1", 0, &m);
    assert_no_field(&m, "worker");
    assert_string_equal(msg_str(&m, "history_dropped"), "0");
    assert_string_equal(history_of(&q, id, &m), "1/0/w-1/e1;");
    assert_string_equal(msg_str(&m, "last_error"), "e1");
    /* A lease expiry, claimed without a worker. */
    claim_one(&q, 1, &m);
    assert_no_field(&m, "worker");
    wait_until_ms(msg_int(&m, "lease_expires_at"));
    long long r[2];
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    assert_int_equal(r[0], 1);
    assert_string_equal(history_of(&q, id, &m), "1/0/w-1/e1;2/1//lease expired;");
    assert_string_equal(msg_str(&m, "last_error"), "lease expired");
    /* settle_claim claims with a worker, then fails it (retry at once) and
     * claims it back for another worker in the same call. */
    make_due(&q, id);
    expect_settled_one(fcall("settle_claim", &q, -1, "30000", "1", "0", "0", "0", "", "w-3", END),
                       NULL, &m);
    assert_string_equal(msg_str(&m, "worker"), "w-3");
    expect_settled_one(fcall("settle_claim", &q, -1, "30000", "1", "1", num(id), "", "failed",
                             "e3", "1", "0", "0", "0", "", "w-4", END), "pending", &m);
    assert_int_equal(m.id, id);
    assert_string_equal(msg_str(&m, "worker"), "w-4");
    assert_string_equal(msg_str(&m, "history"), "1/0/w-1/e1;2/1//lease expired;3/0/w-3/e3;");
    /* A kill of the lease: its worker goes into the entry. */
    expect_ok_msg(fcall("kill", &q, id, "", END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_no_field(&m, "worker");
    /* A replay appends a mark; last_error goes, the history stays. */
    expect_ok_msg(fcall("replay", &q, id, END), &m);
    assert_no_field(&m, "last_error");
    assert_string_equal(history_of(&q, id, &m),
                        "1/0/w-1/e1;2/1//lease expired;3/0/w-3/e3;4/0/w-4/killed by operator;R;");
    /* A lease handed back keeps no worker: neither a later claim without one
     * nor a kill of the pending message shows it. */
    char token[64];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "1", "", "", "w-5", END), &m, 1), 1);
    token_of(&m, token);
    assert_int_equal(int_reply(fcall("release", &q, -1, num(id), token, END)), 1);
    claim_one(&q, 30000, &m);
    assert_no_field(&m, "worker");
    token_of(&m, token);
    assert_int_equal(int_reply(fcall("release", &q, -1, num(id), token, END)), 1);
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "1", "", "", "w-6", END), &m, 1), 1);
    token_of(&m, token);
    assert_int_equal(int_reply(fcall("release", &q, -1, num(id), token, END)), 1);
    expect_ok_msg(fcall("kill", &q, id, "gone", END), &m);
    /* replay_many marks too. */
    long long rm[1];
    redisReply *rr = fcall("replay_many", &q, -1, "ids", num(id), END);
    assert_int_equal(rr->type, REDIS_REPLY_ARRAY);
    rm[0] = rr->element[0]->integer;
    freeReplyObject(rr);
    assert_int_equal(rm[0], 1);
    assert_string_equal(history_of(&q, id, &m),
                        "1/0/w-1/e1;2/1//lease expired;3/0/w-3/e3;4/0/w-4/killed by operator;R;"
                        "1/0//gone;R;");
    assert_string_equal(msg_str(&m, "history_dropped"), "0");
    /* export: JSONL has the whole array, CSV the count. */
    redisReply *ex = fcall("export", &q, -1, "jsonl", "", "100", "", END);
    assert_int_equal(ex->elements, 2);
    assert_non_null(strstr(ex->element[1]->str, "\"attempt\":4"));
    assert_non_null(strstr(ex->element[1]->str, "\"history_dropped\":0"));
    assert_non_null(strstr(ex->element[1]->str, "\"worker\":\"w-4\""));
    assert_non_null(strstr(ex->element[1]->str, "\"lease_expired\":true"));
    assert_non_null(strstr(ex->element[1]->str, "{\"replayed_at\":\""));
    freeReplyObject(ex);
    ex = fcall("export", &q, -1, "csv", "", "100", "", END);
    assert_int_equal(ex->elements, 2);
    assert_int_equal(strcmp(ex->element[1]->str + ex->element[1]->len - 6, ",job,7"), 0);
    freeReplyObject(ex);
    /* Bad workers are refused before anything is written. */
    char big[130];
    memset(big, 'w', 129);
    big[129] = '\0';
    expect_error(fcall("claim", &q, -1, "30000", "1", "", "", big, END));
    expect_error(fcall("settle_claim", &q, -1, "30000", "1", "0", "0", "0", "", big, END));
    assert_int_equal(llen(qkey(&q, "3:due")), 1);
}

/* The last 20 entries are kept, older ones counted; an entry keeps at most
 * 1 KiB of its error, cut between characters, and last_error all of it. */
static void test_history_keeps_twenty(void **state)
{
    queue_t q;
    queue_init(&q, "historycap");
    long long id = enqueue_ok(&q, "job", 10, 0);
    msg_t m;
    for (int round = 1; round <= 2; round++) {
        for (int i = 1; i <= 10; i++) {
            char err[32];
            snprintf(err, sizeof err, "r%d-e%d", round, i);
            claim_one(&q, 30000, &m);
            fail_ok(&q, id, err, "1", 0, &m);
        }
        assert_string_equal(msg_str(&m, "status"), "dead");
        expect_ok_msg(fcall("replay", &q, id, END), &m);
    }
    const char *h = history_of(&q, id, &m);
    assert_string_equal(msg_str(&m, "history_dropped"), "2");
    assert_int_equal(strncmp(h, "3/0//r1-e3;", 11), 0);
    int entries = 0;
    for (const char *p = h; *p; p++) entries += *p == ';';
    assert_int_equal(entries, 20);
    assert_true(strstr(h, "10/0//r2-e10;R;") != NULL);

    /* "a" then 1000 "é" (2 bytes each): byte 1024 starts a character. */
    char err[2002];
    err[0] = 'a';
    for (int i = 0; i < 1000; i++) memcpy(err + 1 + 2 * i, "\xc3\xa9", 2);
    err[2001] = '\0';
    claim_one(&q, 30000, &m);
    freeReplyObject(fcall("fail", &q, id, "", err, "1", "0", END));
    redisReply *r = fcall("get", &q, id, END);
    const redisReply *msg = r->element[1], *hist = NULL;
    for (size_t i = 2; i + 1 < msg->elements; i += 2) {
        if (strcmp(msg->element[i]->str, "history") == 0) hist = msg->element[i + 1];
        if (strcmp(msg->element[i]->str, "last_error") == 0)
            assert_int_equal(msg->element[i + 1]->len, 2001);
        if (strcmp(msg->element[i]->str, "history_dropped") == 0)
            assert_string_equal(msg->element[i + 1]->str, "3");
    }
    assert_non_null(hist);
    assert_int_equal(hist->elements, 20 * 6);
    const redisReply *cut = hist->element[hist->elements - 1];
    assert_int_equal(cut->len, 1023);
    assert_memory_equal(cut->str, err, 1023);
    freeReplyObject(r);
}

/* calls= of cmdstat_<name> in INFO commandstats (0 when never called). */
static long long command_calls(const char *name)
{
    redisReply *r = rcmd("INFO", "commandstats", END);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char needle[64];
    snprintf(needle, sizeof needle, "cmdstat_%s:calls=", name);
    const char *p = strstr(r->str, needle);
    long long n = p ? strtoll(p + strlen(needle), NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

/* The happy path pays nothing for the history: a claim and a succeed of a
 * message that never failed, claimed without a worker, write header bytes
 * with SETRANGE only and leave no trailer. A claim with a worker rewrites
 * the record once (SET) to keep it. */
static void test_history_happy_path_writes_no_trailer(void **state)
{
    queue_t q;
    queue_init(&q, "historyhappy");
    char payload[101];
    memset(payload, 'p', 100);
    payload[100] = '\0';
    long long id = enqueue_ok(&q, payload, 3, 0);
    redisReply *before = rcmd("GET", mkey(&q, id), END);
    assert_int_equal(before->len, 124);
    freeReplyObject(rcmd("CONFIG", "RESETSTAT", END));
    msg_t m;
    claim_one(&q, 30000, &m);
    expect_ok_msg(fcall("succeed", &q, id, msg_str(&m, "lease_token"), END), &m);
    assert_int_equal(command_calls("set"), 0);
    assert_int_equal(command_calls("setrange"), 2);
    redisReply *after = rcmd("GET", mkey(&q, id), END);
    assert_int_equal(after->len, 124);
    assert_int_equal((unsigned char)after->str[0], 0x01);     /* no trailer */
    assert_memory_equal(after->str, before->str, 9);           /* format .. created_at */
    assert_memory_equal(after->str + 24, payload, 100);
    freeReplyObject(before);
    freeReplyObject(after);
    assert_no_field(&m, "history");
    assert_no_field(&m, "worker");

    id = enqueue_ok(&q, payload, 3, 0);
    freeReplyObject(rcmd("CONFIG", "RESETSTAT", END));
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "1", "", "", "host-1/42", END), &m, 1), 1);
    assert_int_equal(command_calls("set"), 1);
    assert_int_equal(command_calls("setrange"), 0);
    expect_ok_msg(fcall("succeed", &q, id, msg_str(&m, "lease_token"), END), &m);
    assert_int_equal(command_calls("set"), 1);
    assert_no_field(&m, "worker");
    assert_no_field(&m, "history");
}

/* A message retryd_v2 wrote (a HASH, no history) starts with an empty
 * history when retryd_v3 lifts it: its old failure is its last_error only. */
static void test_history_of_a_lifted_v2_message(void **state)
{
    load_v2();
    queue_t q;
    queue_init(&q, "historyv2");
    msg_t m;
    long long dead = v2_enqueue(&q, "old dead", "1", "0", "");
    v2_claim(&q, "600000", dead, &m);
    expect_ok_msg(fcall_v2("fail", &q, dead, msg_str(&m, "lease_token"), "old boom", "0", "-1", END), &m);
    long long leased = v2_enqueue(&q, "old lease", "3", "0", "");
    v2_claim(&q, "600000", leased, &m);
    assert_string_equal(history_of(&q, dead, &m), "");
    assert_string_equal(msg_str(&m, "last_error"), "old boom");
    expect_ok_msg(fcall("replay", &q, dead, END), &m);
    assert_string_equal(key_type(mkey(&q, dead)), "string");
    assert_string_equal(history_of(&q, dead, &m), "R;");
    fail_ok(&q, leased, "new boom", "1", -1, &m);
    assert_string_equal(key_type(mkey(&q, leased)), "string");
    assert_string_equal(history_of(&q, leased, &m), "1/0//new boom;");
}

/* redrive_in of one letter (max_retries 1, payload "x"): the new id. */
static long long redrive_in_one(const queue_t *to, const queue_t *from, long long src_id)
{
    long long id;
    expect_ints(fcall("redrive_in", to, -1, from->name, num(src_id), "1", "x", END), 1, &id);
    return id;
}

/* The three steps one by one: a taken letter is in no index a state change
 * reads, shows dead with redriving_to, and every other operation refuses it;
 * step 2 repeated answers the same id and creates nothing; step 3 removes
 * the letter and its record once. */
static void test_redrive_steps(void **state)
{
    (void)state;
    queue_t src, dst;
    queue_init(&src, "rd-src");
    queue_init(&dst, "rd-dst");
    long long a = make_dead(&src, "boom a");
    long long b = make_dead(&src, "boom b");
    taken_t t;
    expect_taken(fcall("redrive_take", &src, -1, dst.name, "ids", num(a), END), &t);
    assert_false(t.resumed);
    assert_string_equal(t.next, "");
    assert_int_equal(t.count, 1);
    assert_int_equal(t.ids[0], a);
    assert_string_equal(t.targets[0], dst.name);
    assert_int_equal(zscore(qkey(&src, "3:dead"), a), -1);
    assert_true(zscore(qkey(&src, "3:redriving"), a) > 0);
    msg_t m;
    expect_ok_msg(fcall("get", &src, a, END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_string_equal(msg_str(&m, "redriving_to"), dst.name);
    /* No other operation touches it: the hole of the first design. */
    expect_code(fcall("replay", &src, a, END), "invalid_state", "redriving");
    expect_code(fcall("kill", &src, a, "", END), "invalid_state", "redriving");
    expect_code(fcall("delete", &src, a, END), "invalid_state", "redriving");
    long long r2[2];
    redisReply *rm = fcall("replay_many", &src, -1, "ids", num(a), END);
    assert_int_equal(rm->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rm->element[0]->integer, 0);
    freeReplyObject(rm);
    expect_ints(fcall("purge", &src, -1, "0", "10", END), 2, r2);
    assert_int_equal(r2[0], 1);   /* b only */
    assert_int_equal(exists(mkey(&src, b)), 0);
    assert_int_equal(exists(mkey(&src, a)), 1);
    long long tick[TICK_N];
    expect_ints(fcall("tick", &src, -1, "100", "1", "0", END), TICK_N, tick);
    assert_int_equal(exists(mkey(&src, a)), 1);
    /* Step 2, twice: one message. */
    long long n1 = redrive_in_one(&dst, &src, a);
    long long n2 = redrive_in_one(&dst, &src, a);
    assert_int_equal(n1, n2);
    assert_int_equal(llen(qkey(&dst, "3:ready")), 1);
    expect_ok_msg(fcall("get", &dst, n1, END), &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_string_equal(msg_str(&m, "origin_queue"), src.name);
    assert_int_equal(msg_int(&m, "origin_id"), a);
    assert_int_equal(msg_int(&m, "retry_count"), 0);
    assert_int_equal(msg_int(&m, "max_retries"), 1);
    assert_string_equal(msg_str(&m, "payload"), "x");
    assert_no_field(&m, "idempotency_key");
    assert_int_equal(counter(&dst, "redriven_in"), 1);
    /* Step 3, twice: the letter leaves once. */
    long long done;
    done = int_reply(fcall("redrive_done", &src, -1, num(a), num(n1), END));
    assert_int_equal(done, 1);
    done = int_reply(fcall("redrive_done", &src, -1, num(a), num(n1), END));
    assert_int_equal(done, 0);
    assert_int_equal(exists(mkey(&src, a)), 0);
    assert_int_equal(zcard(qkey(&src, "3:redriving")), 0);
    assert_int_equal(exists(qkey(&src, "3:redrive_to")), 0);
    assert_int_equal(counter(&src, "redriven"), 1);
    expect_code(fcall("get", &src, a, END), "not_found", NULL);
    /* Step 4: the key expires a day later. */
    done = int_reply(fcall("redrive_forget", &dst, -1, src.name, num(a), END));
    assert_int_equal(done, 1);
    char key[256];
    snprintf(key, sizeof key, "%s:redrive:%s:%lld", dst.base, src.name, a);
    long long ttl = int_reply(rcmd("PTTL", key, END));
    assert_true(ttl > 0 && ttl <= 24LL * 3600 * 1000);
}

/* A letter replayed or deleted before the take is not taken (so never
 * copied), and one taken cannot be replayed or deleted before it lands. */
static void test_redrive_cannot_copy_a_replayed_letter(void **state)
{
    (void)state;
    queue_t src, dst;
    queue_init(&src, "rd-race");
    queue_init(&dst, "rd-race-dst");
    long long a = make_dead(&src, "e");
    long long b = make_dead(&src, "e");
    long long c = make_dead(&src, "e");
    msg_t m;
    expect_ok_msg(fcall("replay", &src, a, END), &m);
    expect_code(fcall("delete", &src, b, END), "ok", NULL);
    taken_t t;
    expect_taken(fcall("redrive_take", &src, -1, dst.name, "ids", num(a), num(b), num(c), END),
                 &t);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.ids[0], c);
    expect_code(fcall("replay", &src, c, END), "invalid_state", "redriving");
    long long n = redrive_in_one(&dst, &src, c);
    assert_int_equal(int_reply(fcall("redrive_done", &src, -1, num(c), num(n), END)), 1);
    assert_int_equal(llen(qkey(&dst, "3:ready")), 1);
    assert_int_equal(llen(qkey(&src, "3:due")), 1);   /* a, replayed in place */
    assert_int_equal(zcard(qkey(&src, "3:dead")), 0);
}

/* A take cut after step 1 or 2 leaves letters in redriving: the next take,
 * whatever its target and selection, answers them first with their recorded
 * target and selects nothing new; once they are done, it selects. */
static void test_redrive_resumes_left_letters(void **state)
{
    (void)state;
    queue_t src, dst, other;
    queue_init(&src, "rd-resume");
    queue_init(&dst, "rd-resume-dst");
    queue_init(&other, "rd-resume-other");
    long long a = make_dead(&src, "timeout");
    long long b = make_dead(&src, "refused");
    long long c = make_dead(&src, "timeout again");
    taken_t t;
    expect_taken(fcall("redrive_take", &src, -1, dst.name, "ids", num(a), END), &t);
    long long n1 = redrive_in_one(&dst, &src, a);   /* then the call was cut */
    expect_taken(fcall("redrive_take", &src, -1, other.name, "error", "1000", "", "timeout", END),
                 &t);
    assert_true(t.resumed);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.ids[0], a);
    assert_string_equal(t.targets[0], dst.name);
    assert_int_equal(redrive_in_one(&dst, &src, a), n1);
    long long done;
    done = int_reply(fcall("redrive_done", &src, -1, num(a), num(n1), END));
    assert_int_equal(done, 1);
    /* Now the selection: only the letters whose error matches. */
    expect_taken(fcall("redrive_take", &src, -1, other.name, "error", "1000", "", "timeout", END),
                 &t);
    assert_false(t.resumed);
    assert_string_equal(t.next, "");
    assert_int_equal(t.count, 1);
    assert_int_equal(t.ids[0], c);
    assert_string_equal(t.targets[0], other.name);
    assert_true(zscore(qkey(&src, "3:dead"), b) > 0);
    assert_int_equal(llen(qkey(&dst, "3:ready")), 1);
    /* all takes what is dead (b); c is still redriving, answered first. */
    expect_taken(fcall("redrive_take", &src, -1, other.name, "all", "1000", "", END), &t);
    assert_true(t.resumed);
    assert_int_equal(t.ids[0], c);
    done = int_reply(fcall("redrive_done", &src, -1, num(c), num(redrive_in_one(&other, &src, c)), END));
    expect_taken(fcall("redrive_take", &src, -1, other.name, "all", "1000", "", END), &t);
    assert_false(t.resumed);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.ids[0], b);
    /* Stats count the letters in redriving. */
    redisReply *r = fcall("stats", &src, -1, "0", END);
    bool seen = false;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, "redriving") == 0) {
            assert_int_equal(r->element[i + 1]->integer, 1);
            seen = true;
        }
    freeReplyObject(r);
    assert_true(seen);
}

/* ------------------------------------------------------------------------ */
/* Dead-letter rules (docs/reference.md "Recovery rules", docs/dead-letters.md §2)                    */
/* ------------------------------------------------------------------------ */

/* Claims the message (it must be id) and fails it; m is its new state. */
static void claim_fail(const queue_t *q, long long id, const char *error, const char *retryable,
                       long long retry_after_ms, msg_t *m)
{
    claim_one(q, 30000, m);
    assert_int_equal(m->id, id);
    fail_ok(q, id, error, retryable, retry_after_ms, m);
}

/* The first rule whose text is in the error decides; a retry rule that is
 * first to match a failure with retries left leaves the normal backoff (and
 * is not counted), even when a later dead rule would match too. */
static void test_rules_first_match_wins(void **state)
{
    queue_t q;
    queue_init(&q, "rulesfirst");
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"rate\",\"action\":\"dead\"},"
               "{\"error_contains\":\"rate limit\",\"action\":\"retry\",\"delay_seconds\":300}]");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    claim_fail(&q, id, "429 rate limit", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(counter(&q, "rule_0_dead"), 1);
    assert_int_equal(counter(&q, "rule_1_retried"), 0);

    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"rate limit\",\"action\":\"retry\",\"delay_seconds\":300},"
               "{\"error_contains\":\"rate\",\"action\":\"dead\"}]");
    /* Counters count by position: a new list starts them again. */
    assert_int_equal(counter(&q, "rule_0_dead"), 0);
    id = enqueue_ok(&q, "job", 5, 0);
    claim_fail(&q, id, "429 rate limit", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 2000);
    assert_int_equal(counter(&q, "rule_0_retried"), 0);
    assert_int_equal(counter(&q, "rule_1_dead"), 0);
    /* error_prefix: the error must start with it; with error_contains both hold. */
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_prefix\":\"HTTP 4\",\"error_contains\":\"bad\",\"action\":\"dead\"}]");
    make_due(&q, id);
    claim_fail(&q, id, "bad HTTP 400", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    make_due(&q, id);
    claim_fail(&q, id, "HTTP 400 bad request", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(counter(&q, "rule_0_dead"), 1);
    /* A list written by hand that policy_set would refuse is no rules: the
     * failure still applies (the backoff), it does not fail the call. */
    static const char *const garbage[] = { "not json", "[{\"error_contains\":7}]",
                                           "[{\"error_contains\":\"x\",\"action\":\"dead\",\"max_times\":\"a\"}]" };
    for (size_t i = 0; i < 3; i++) {
        int_reply(rcmd("HSET", qkey(&q, "policy"), "dead_letter_rules", garbage[i], END));
        id = enqueue_ok(&q, "job", 5, 0);
        claim_fail(&q, id, "x 7", "1", -1, &m);
        assert_string_equal(msg_str(&m, "status"), "pending");
    }
}

/* retry: when the message would go dead (budget spent, or retryable false),
 * it is scheduled after delay_seconds instead, at most max_times per
 * message, then dead; its delay replaces retry_after_seconds. */
static void test_rules_retry_then_dead(void **state)
{
    queue_t q;
    queue_init(&q, "rulesretry");
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"429\",\"action\":\"retry\",\"delay_seconds\":300,\"max_times\":2}]");
    long long id = enqueue_ok(&q, "job", 1, 0);
    msg_t m;
    claim_fail(&q, id, "upstream 429", "1", 777, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), 300000);
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_int_equal(zscore(qkey(&q, "3:scheduled"), id), msg_int(&m, "retry_after"));
    assert_int_equal(counter(&q, "rule_0_retried"), 1);
    assert_int_equal(counter(&q, "retried"), 1);
    make_due(&q, id);
    /* retryable false: the rule still brings it back (the worker's
     * "permanent" gives way to the operator's rule). */
    claim_fail(&q, id, "upstream 429", "0", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_count"), 2);
    assert_int_equal(counter(&q, "rule_0_retried"), 2);
    make_due(&q, id);
    claim_fail(&q, id, "upstream 429", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 3);
    assert_int_equal(counter(&q, "rule_0_retried"), 2);
    assert_int_equal(counter(&q, "rule_0_dead"), 1);
    /* A replay gives the rule its max_times again. */
    expect_ok_msg(fcall("replay", &q, id, END), &m);
    claim_fail(&q, id, "upstream 429", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(counter(&q, "rule_0_retried"), 3);
    /* max_times is per message: another one gets its own. */
    long long other = enqueue_ok(&q, "job", 1, 0);
    claim_fail(&q, other, "429", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    /* A delay of 0 brings it back at once. */
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"503\",\"action\":\"retry\"}]");
    long long now_id = enqueue_ok(&q, "job", 1, 0);
    int_reply(rcmd("DEL", qkey(&q, "3:scheduled"), END));
    claim_fail(&q, now_id, "503", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "pending");
    assert_int_equal(msg_int(&m, "retry_after"), msg_int(&m, "updated_at"));
    claim_fail(&q, now_id, "503", "1", -1, &m);  /* max_times defaults to 1 */
    assert_string_equal(msg_str(&m, "status"), "dead");
}

/* dead: dead at once, even with retries left, on every path that fails a
 * message (fail, settle_claim, lease expiry); never on a kill. */
static void test_rules_dead_at_once(void **state)
{
    static const char *const dead[] = { "dead" };
    queue_t q;
    queue_init(&q, "rulesdead");
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"invalid\",\"action\":\"dead\"},"
               "{\"error_contains\":\"lease expired\",\"action\":\"dead\"}]");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m, got[1];
    claim_fail(&q, id, "invalid address", "1", 5000, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(msg_int(&m, "retry_count"), 1);
    assert_int_equal(counter(&q, "rule_0_dead"), 1);
    assert_int_equal(counter(&q, "dead"), 1);

    id = enqueue_ok(&q, "job", 5, 0);
    claim_one(&q, 30000, &m);
    char token[64];
    token_of(&m, token);
    settle_t f = FAILED(id, token, "invalid input", "1", -1);
    expect_settled(settle_claim(&q, 30000, 0, 1, &f), 1, dead, got, 0);
    assert_int_equal(counter(&q, "rule_0_dead"), 2);

    id = enqueue_ok(&q, "job", 5, 0);
    claim_one(&q, 1, &m);
    wait_until_ms(msg_int(&m, "lease_expires_at"));
    long long r[2];
    expect_ints(fcall("reclaim", &q, -1, "100", END), 2, r);
    expect_ok_msg(fcall("get", &q, id, END), &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(counter(&q, "rule_1_dead"), 1);

    /* A kill is an operator's decision, not a failure: no rule looks at it. */
    id = enqueue_ok(&q, "job", 5, 0);
    expect_ok_msg(fcall("kill", &q, id, "invalid", END), &m);
    assert_int_equal(counter(&q, "rule_0_dead"), 2);
}

/* An error no rule matches: the rules play no part (the reference table). */
static void test_rules_no_match_keeps_backoff(void **state)
{
    static const long long delays_ms[] = { 2000, 4000, 8000, 16000 };
    queue_t q;
    queue_init(&q, "rulesnomatch");
    policy_set(&q, "replace", "dead_letter_rules",
               "[{\"error_contains\":\"429\",\"action\":\"retry\",\"delay_seconds\":300},"
               "{\"error_prefix\":\"fatal\",\"action\":\"dead\"}]");
    long long id = enqueue_ok(&q, "job", 5, 0);
    msg_t m;
    for (int n = 1; n <= 4; n++) {
        claim_fail(&q, id, "smtp timeout, not fatal", "1", -1, &m);
        assert_string_equal(msg_str(&m, "status"), "pending");
        assert_int_equal(msg_int(&m, "retry_after") - msg_int(&m, "updated_at"), delays_ms[n - 1]);
        make_due(&q, id);
    }
    claim_fail(&q, id, "smtp timeout, not fatal", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    id = enqueue_ok(&q, "job", 5, 0);
    claim_fail(&q, id, "other", "0", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    assert_int_equal(counter(&q, "rule_0_retried") + counter(&q, "rule_0_dead") +
                     counter(&q, "rule_1_dead"), 0);
}

/* policy_set checks every rule and names the field at fault (0-based). */
static void test_rules_validation(void **state)
{
    queue_t q;
    queue_init(&q, "rulesvalid");
    static const char *const bad[][2] = {
        { "{", "dead_letter_rules" },
        { "{\"a\":1}", "dead_letter_rules" },
        { "3", "dead_letter_rules" },
        { "[1]", "dead_letter_rules[0]" },
        { "[{\"action\":\"dead\"}]", "dead_letter_rules[0].error_contains" },
        { "[{\"error_contains\":\"\",\"action\":\"dead\"}]", "dead_letter_rules[0].error_contains" },
        { "[{\"error_prefix\":7,\"action\":\"dead\"}]", "dead_letter_rules[0].error_prefix" },
        { "[{\"error_contains\":\"x\"}]", "dead_letter_rules[0].action" },
        { "[{\"error_contains\":\"x\",\"action\":\"skip\"}]", "dead_letter_rules[0].action" },
        { "[{\"error_contains\":\"x\",\"action\":\"dead\",\"delay_seconds\":1}]",
          "dead_letter_rules[0].delay_seconds" },
        { "[{\"error_contains\":\"x\",\"action\":\"dead\"},"
          "{\"error_contains\":\"y\",\"action\":\"retry\",\"max_times\":0}]",
          "dead_letter_rules[1].max_times" },
        { "[{\"error_contains\":\"x\",\"action\":\"retry\",\"max_times\":101}]",
          "dead_letter_rules[0].max_times" },
        { "[{\"error_contains\":\"x\",\"action\":\"retry\",\"delay_seconds\":86401}]",
          "dead_letter_rules[0].delay_seconds" },
        { "[{\"error_contains\":\"x\",\"action\":\"retry\",\"delay_seconds\":1.5}]",
          "dead_letter_rules[0].delay_seconds" },
        { "[{\"error_contains\":\"x\",\"action\":\"dead\",\"when\":1}]", "dead_letter_rules[0]" },
        { "[{\"error_contains\":\"\xff\",\"action\":\"dead\"}]", "dead_letter_rules[0].error_contains" },
    };
    policy_set(&q, "replace", "max_retries", "4");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redisReply *r = fcall("policy_set", &q, -1, "merge", "dead_letter_rules", bad[i][0], END);
        if (!has_code(r, "invalid") || r->elements != 3 || strcmp(r->element[1]->str, bad[i][1]) != 0)
            fail_msg("%s: %s", bad[i][0], reply_desc(r));
        freeReplyObject(r);
    }
    /* 21 rules are too many; 20 are fine. */
    char list[2048] = "[";
    for (int i = 0; i < 21; i++) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s{\"error_contains\":\"e%d\",\"action\":\"dead\"}",
                 i ? "," : "", i);
        if (i == 19) {
            char twenty[sizeof list + 1];
            memcpy(twenty, list, sizeof list);
            strcat(twenty, "]");
            policy_set(&q, "merge", "dead_letter_rules", twenty);
        }
    }
    strcat(list, "]");
    redisReply *r = fcall("policy_set", &q, -1, "merge", "dead_letter_rules", list, END);
    assert_true(has_code(r, "invalid"));
    assert_string_equal(r->element[1]->str, "dead_letter_rules");
    freeReplyObject(r);
    /* Stored canonical: defaults filled in; "" and [] take the rules away. */
    policy_set(&q, "merge", "dead_letter_rules",
               "[{\"error_contains\":\"x\",\"action\":\"retry\"}]");
    const char *stored = policy_field(&q, "dead_letter_rules");
    assert_non_null(strstr(stored, "\"max_times\":1"));
    assert_non_null(strstr(stored, "\"delay_seconds\":0"));
    assert_string_equal(policy_field(&q, "max_retries"), "4");
    /* Text beyond ASCII is fine when it is UTF-8, and matched as bytes. */
    policy_set(&q, "merge", "dead_letter_rules",
               "[{\"error_contains\":\"\xc3\xa9" "chec\",\"action\":\"dead\"}]");
    long long id = enqueue_ok(&q, "job", 4, 0);
    msg_t m;
    claim_one(&q, 30000, &m);
    fail_ok(&q, id, "\xc3\xa9" "chec d'envoi", "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    policy_set(&q, "merge", "dead_letter_rules", "[]");
    assert_string_equal(policy_field(&q, "dead_letter_rules"), "");
    policy_set(&q, "merge", "dead_letter_rules", "[{\"error_contains\":\"x\",\"action\":\"dead\"}]");
    policy_set(&q, "merge", "dead_letter_rules", "");
    assert_string_equal(policy_field(&q, "dead_letter_rules"), "");
}

/* A claim that finds nothing writes nothing: no stats hash (its serials were
 * reserved before looking) for a queue name that never had a message. */
static void test_claim_on_unknown_queue_writes_nothing(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "ghost");
    redisReply *r = fcall("claim", &q, -1, "30000", "10", "1", "flag", "w", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    r = fcall("settle_claim", &q, -1, "30000", "5", "0", "0", "0", "flag", END);
    freeReplyObject(r);
    r = fcall("settle_claim", &q, -1, "30000", "5", "1", "7", "", "failed", "x", "1", "-1", END);
    freeReplyObject(r);
    r = rcmd("KEYS", qkey(&q, "*"), END);
    if (r->elements != 0) fail_msg("%zu keys, e.g. %s", r->elements, r->element[0]->str);
    freeReplyObject(r);
    /* With messages the serials still count what was claimed. */
    enqueue_ok(&q, "a", 3, 0);
    msg_t m[2];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "10", END), m, 2), 1);
    assert_int_equal(counter(&q, "claimed"), 1);
}

#define expect_nothing_claimed(r) expect_code_at((r), "ok", NULL, __FILE__, __LINE__)

/* release_lost hands back what a claim tagged with a nonce leased (counted
 * released, retry_count untouched), once; a nonce given up before its claim
 * ran makes that claim hand everything back itself. */
static void test_release_lost(void **state)
{
    (void)state;
    queue_t q;
    queue_init(&q, "lost");
    for (int i = 0; i < 4; i++)
        enqueue_ok(&q, "job", 1, 0);
    msg_t m[4];
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "2", "", "request", "",
                                          "inst.1", END), m, 4), 2);
    assert_int_equal(exists(qkey(&q, "claim:inst.1")), 1);
    assert_int_equal(int_reply(fcall("release_lost", &q, -1, "inst.1", END)), 2);
    assert_int_equal(exists(qkey(&q, "claim:inst.1")), 0);
    assert_int_equal(zcard(qkey(&q, "3:processing")), 0);
    assert_int_equal(counter(&q, "released"), 2);
    assert_int_equal(counter(&q, "failed"), 0);
    msg_t g;
    expect_ok_msg(fcall("get", &q, 1, END), &g);
    assert_string_equal(msg_str(&g, "status"), "pending");
    assert_int_equal(msg_int(&g, "retry_count"), 0);
    /* Once only. */
    assert_int_equal(int_reply(fcall("release_lost", &q, -1, "inst.1", END)), 0);

    /* A settle-and-claim's lease, and one since settled: only the one still
     * under that lease goes back. */
    redisReply *r = fcall("settle_claim", &q, -1, "30000", "2", "0", "0", "0", "request", "",
                          "inst.2", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 5);   /* ok, {}, two messages, the hint */
    assert_string_equal(r->element[2]->element[0]->str, "1");
    freeReplyObject(r);
    expect_ok_msg(fcall("succeed", &q, 1, "", END), &g);
    assert_int_equal(int_reply(fcall("release_lost", &q, -1, "inst.2", END)), 1);
    assert_int_equal(counter(&q, "released"), 3);

    /* Given up before the claim ran: the claim answers nothing and leaves
     * everything pending. */
    assert_int_equal(int_reply(fcall("release_lost", &q, -1, "inst.3", END)), 0);
    expect_nothing_claimed(fcall("claim", &q, -1, "30000", "3", "", "request", "", "inst.3", END));
    assert_int_equal(zcard(qkey(&q, "3:processing")), 0);
    assert_int_equal(counter(&q, "released"), 6);
    assert_int_equal(counter(&q, "failed"), 0);
    /* In their order: 2, 3, 4. */
    assert_int_equal(expect_ok_msgs(fcall("claim", &q, -1, "30000", "3", END), m, 4), 3);
    assert_int_equal(m[0].id, 2);
    assert_int_equal(m[1].id, 3);
    assert_int_equal(m[2].id, 4);

    expect_error(fcall("release_lost", &q, -1, END));
    const char *many[11];
    for (int i = 0; i < 11; i++) many[i] = "n";
    expect_error(fcall_bin("release_lost", &q, -1, 11, many, NULL));
    char big[80];
    memset(big, 'n', 65);
    big[65] = '\0';
    expect_error(fcall("claim", &q, -1, "30000", "1", "", "request", "", big, END));
}

/* ------------------------------------------------------------------------ */
/* Declared keys: each function's KEYS are its base and what it derives     */
/* ------------------------------------------------------------------------ */

/* Every key of the two queues, sorted, each name then its DUMP: equal
 * snapshots mean no key of either queue changed. Caller frees. */
static char *queues_snapshot(const queue_t *a, const queue_t *b, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    const queue_t *qs[2] = { a, b };
    for (int i = 0; i < 2; i++) {
        redisReply *names = rcmd("KEYS", qkey(qs[i], "*"), END);
        assert_int_equal(names->type, REDIS_REPLY_ARRAY);
        /* KEYS answers in no order: sort by name (insertion sort, few keys). */
        for (size_t x = 1; x < names->elements; x++)
            for (size_t y = x; y > 0 && strcmp(names->element[y - 1]->str, names->element[y]->str) > 0; y--) {
                redisReply *t = names->element[y];
                names->element[y] = names->element[y - 1];
                names->element[y - 1] = t;
            }
        for (size_t j = 0; j < names->elements; j++) {
            redisReply *d = rcmd("DUMP", names->element[j]->str, END);
            size_t need = names->element[j]->len + 1 + (d->type == REDIS_REPLY_STRING ? d->len : 0);
            while (n + need > cap) {
                cap *= 2;
                out = realloc(out, cap);
                assert_non_null(out);
            }
            memcpy(out + n, names->element[j]->str, names->element[j]->len + 1);
            n += names->element[j]->len + 1;
            if (d->type == REDIS_REPLY_STRING) {
                memcpy(out + n, d->str, d->len);
                n += d->len;
            }
            freeReplyObject(d);
        }
        freeReplyObject(names);
    }
    *len = n;
    return out;
}

/* FCALL fn with the given KEYS (nkeys of them, as the caller spells the
 * count) and ARGV, END-terminated after the ARGV. Caller frees. */
static redisReply *fcall_keys(const char *fn, const char *nkeys, int nk, const char *const *keys,
                              ...)
{
    const char *argv[MAX_ARGV];
    size_t lens[MAX_ARGV];
    int argc = 0;
    char name[64];
    snprintf(name, sizeof name, "%s%s", RD_FUNCTION(""), fn);
    argv[argc++] = "FCALL";
    argv[argc++] = name;
    argv[argc++] = nkeys;
    for (int i = 0; i < nk; i++)
        argv[argc++] = keys[i];
    va_list ap;
    va_start(ap, keys);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL;) {
        assert_true(argc < MAX_ARGV);
        argv[argc++] = a;
    }
    va_end(ap);
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    return command_argv(argc, argv, lens);
}

/* The reply is an error naming the keys, and neither queue changed. */
#define expect_keys_refused(a, b, r) expect_keys_refused_at((a), (b), (r), __FILE__, __LINE__)
static void expect_keys_refused_at(const queue_t *a, const queue_t *b, redisReply *r,
                                   const char *file, int line)
{
    static char *before;
    static size_t before_len;
    if (r == NULL) { /* take the snapshot the next check compares with */
        free(before);
        before = queues_snapshot(a, b, &before_len);
        return;
    }
    if (r->type != REDIS_REPLY_ERROR || strstr(r->str, "KEYS") == NULL)
        FAIL_AT(file, line, "expected an error naming KEYS, got %s", reply_desc(r));
    freeReplyObject(r);
    size_t after_len;
    char *after = queues_snapshot(a, b, &after_len);
    if (after_len != before_len || memcmp(after, before, after_len) != 0)
        FAIL_AT(file, line, "a refused call changed a queue's keys");
    free(after);
}

/* FCALL retryd_v4_succeed 2 'y:{qa}' 'y:{qb}:m:1' 1 '' marked qa's message 1
 * succeeded and answered with qb's message 1: every function that takes a
 * message key refuses one that is not its base's for the id, and every
 * function refuses a KEYS count other than its own, or a first key that is
 * not a queue base; nothing changes. */
static void test_declared_keys_match_the_base(void **state)
{
    (void)state;
    queue_t qa, qb;
    queue_init(&qa, "keys-a");
    queue_init(&qb, "keys-b");
    /* Each queue: 1 processing, 2 dead, 3 pending. */
    for (int i = 0; i < 2; i++) {
        const queue_t *q = i ? &qb : &qa;
        msg_t m;
        assert_int_equal(enqueue_ok(q, "one", 1, 0), 1);
        assert_int_equal(enqueue_ok(q, "two", 1, 0), 2);
        assert_int_equal(enqueue_ok(q, "three", 1, 0), 3);
        msg_t two[2];
        assert_int_equal(expect_ok_msgs(fcall("claim", q, -1, "30000", "2", END), two, 2), 2);
        fail_ok(q, 2, "boom", "0", -1, &m);
        assert_string_equal(msg_str(&m, "status"), "dead");
    }
    char b_m1[192], b_m2[192], b_m3[192], a_m1x[192], a_m01[192];
    snprintf(b_m1, sizeof b_m1, "%s", mkey(&qb, 1));
    snprintf(b_m2, sizeof b_m2, "%s", mkey(&qb, 2));
    snprintf(b_m3, sizeof b_m3, "%s", mkey(&qb, 3));
    snprintf(a_m1x, sizeof a_m1x, "%s", mkey(&qa, 12));
    snprintf(a_m01, sizeof a_m01, "%s", mkey(&qa, 3));
    const char *ab1[] = { qa.base, b_m1 }, *ab2[] = { qa.base, b_m2 }, *ab3[] = { qa.base, b_m3 };
    const char *a12[] = { qa.base, a_m1x }, *a3[] = { qa.base, a_m01 };

    expect_keys_refused(&qa, &qb, NULL);
    /* Another queue's message key. */
    expect_keys_refused(&qa, &qb, fcall_keys("succeed", "2", 2, ab1, "1", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("fail", "2", 2, ab1, "1", "", "x", "1", "-1", END));
    expect_keys_refused(&qa, &qb, fcall_keys("extend", "2", 2, ab1, "1", "", "60000", END));
    expect_keys_refused(&qa, &qb, fcall_keys("replay", "2", 2, ab2, "2", END));
    expect_keys_refused(&qa, &qb, fcall_keys("kill", "2", 2, ab3, "3", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("delete", "2", 2, ab3, "3", END));
    expect_keys_refused(&qa, &qb, fcall_keys("get", "2", 2, ab1, "1", END));
    expect_keys_refused(&qa, &qb, fcall_keys("redrive_payload", "2", 2, ab2, "2", END));
    /* Its own queue's key of another id (12 for 1), or no id at all. */
    expect_keys_refused(&qa, &qb, fcall_keys("succeed", "2", 2, a12, "1", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("kill", "2", 2, a3, "1", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("delete", "2", 2, a3, END));
    /* The message key missing, or one too many. */
    expect_keys_refused(&qa, &qb, fcall_keys("succeed", "1", 1, ab1, "1", "", END));
    const char *three[] = { qa.base, mkey(&qa, 1), b_m1 };
    expect_keys_refused(&qa, &qb, fcall_keys("succeed", "3", 3, three, "1", "", END));
    /* The functions that derive their message keys from the base take it alone. */
    expect_keys_refused(&qa, &qb, fcall_keys("settle_claim", "2", 2, ab1, "30000", "1", "1",
                                             "1", "", "succeeded", "", "1", "-1", END));
    expect_keys_refused(&qa, &qb, fcall_keys("succeed_many", "2", 2, ab1, "1", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("release", "2", 2, ab1, "1", "x", END));
    expect_keys_refused(&qa, &qb, fcall_keys("claim", "2", 2, ab1, "30000", "1", END));
    expect_keys_refused(&qa, &qb, fcall_keys("replay_many", "2", 2, ab2, "ids", "2", END));
    /* A first key that is not a queue base (a message key in its place). */
    const char *as_base[] = { b_m1, b_m1 };
    expect_keys_refused(&qa, &qb, fcall_keys("succeed", "2", 2, as_base, "1", "", END));
    expect_keys_refused(&qa, &qb, fcall_keys("claim", "1", 1, as_base, "30000", "1", END));
    expect_keys_refused(&qa, &qb, fcall_keys("enqueue", "1", 1, as_base, "x", "3", "0", END));
    /* A base without a hash tag of its own ("x}", "p:q}"): in a cluster its
     * keys would spread over slots. */
    const char *no_tag[] = { "x}" }, *no_tag2[] = { "retryd-test:keys-a}" };
    expect_keys_refused(&qa, &qb, fcall_keys("enqueue", "1", 1, no_tag, "x", "3", "0", END));
    expect_keys_refused(&qa, &qb, fcall_keys("claim", "1", 1, no_tag2, "30000", "1", END));
    /* A registry function given a queue base instead of "<prefix>:queues". */
    const char *a_base[] = { qa.base };
    expect_keys_refused(&qa, &qb, fcall_keys("register", "1", 1, a_base, "keys-b", "0", END));
    expect_keys_refused(&qa, &qb, fcall_keys("queues_page", "1", 1, a_base, "", "10", END));

    /* The right keys still work. */
    msg_t m;
    expect_ok_msg(fcall("succeed", &qa, 1, "", END), &m);
    assert_string_equal(msg_str(&m, "payload"), "one");
    expect_ok_msg(fcall("get", &qb, 1, END), &m);
    assert_string_equal(msg_str(&m, "status"), "processing");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_history_every_failure_kind),
        cmocka_unit_test(test_history_keeps_twenty),
        cmocka_unit_test(test_history_happy_path_writes_no_trailer),
        cmocka_unit_test(test_history_of_a_lifted_v2_message),
        cmocka_unit_test(test_enqueue_ids_and_fields),
        cmocka_unit_test(test_enqueue_payload_binary_safe),
        cmocka_unit_test(test_enqueue_delayed),
        cmocka_unit_test(test_enqueue_bad_arguments),
        cmocka_unit_test(test_numeric_arguments_reject_infinity),
        cmocka_unit_test(test_numeric_arguments_past_int64),
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
        cmocka_unit_test(test_settle_claim_mixed_outcomes),
        cmocka_unit_test(test_settle_claim_backoff_then_dead),
        cmocka_unit_test(test_settle_claim_nothing_claimable),
        cmocka_unit_test(test_settle_claim_lease_mismatch),
        cmocka_unit_test(test_settle_claim_atomic),
        cmocka_unit_test(test_settle_claim_bounds),
        cmocka_unit_test(test_wake_channel),
        cmocka_unit_test(test_claim_that_promotes_more_than_it_takes_wakes),
        cmocka_unit_test(test_timer_hints),
        cmocka_unit_test(test_alert_group_protocol),
        cmocka_unit_test(test_alert_trim_counts_undelivered),
        cmocka_unit_test(test_settle_claim_timer_hints),
        cmocka_unit_test(test_extend_timer_hint),
        cmocka_unit_test(test_tick_promise_and_empty),
        cmocka_unit_test(test_registry_take_done),
        cmocka_unit_test(test_registry_sweep),
        cmocka_unit_test(test_queues_page),
        cmocka_unit_test(test_registry_tagged_prefix),
        cmocka_unit_test(test_no_hint_without_the_flag),
        cmocka_unit_test(test_export_csv_neutralises_formulas),
        cmocka_unit_test(test_library_versions_side_by_side),
        cmocka_unit_test(test_library_has_room_for_100_locals),
        cmocka_unit_test(test_v2_claim_never_meets_a_record),
        cmocka_unit_test(test_v2_messages_served_by_v3),
        cmocka_unit_test(test_v2_enqueues_not_starved),
        cmocka_unit_test(test_list_bounded_work),
        cmocka_unit_test(test_replay_many_orphans),
        cmocka_unit_test(test_old_layout_is_read_and_converted),
        cmocka_unit_test(test_record_is_compact),
        cmocka_unit_test(test_pending_walk_under_claims),
        cmocka_unit_test(test_pending_walk_random_interleaving),
        cmocka_unit_test(test_reply_bytes_bounded),
        cmocka_unit_test(test_settle_claim_reply_bytes_bounded),
        cmocka_unit_test(test_policy_defaults_keep_reference_table),
        cmocka_unit_test(test_policy_backoff_base_and_max),
        cmocka_unit_test(test_policy_jitter),
        cmocka_unit_test(test_policy_set_validation),
        cmocka_unit_test(test_policy_alert_url),
        cmocka_unit_test(test_policy_precedence),
        cmocka_unit_test(test_pause_resume),
        cmocka_unit_test(test_max_in_flight),
        cmocka_unit_test(test_many_queues_keep_their_own_keys),
        cmocka_unit_test(test_rate_limit_bucket),
        cmocka_unit_test(test_rate_changed_mid_bucket),
        cmocka_unit_test(test_policy_retention),
        cmocka_unit_test(test_series_counts_the_lifecycle),
        cmocka_unit_test(test_series_ring_wrap_and_spread),
        cmocka_unit_test(test_series_tick_samples_then_idle),
        cmocka_unit_test(test_redrive_steps),
        cmocka_unit_test(test_redrive_cannot_copy_a_replayed_letter),
        cmocka_unit_test(test_redrive_resumes_left_letters),
        cmocka_unit_test(test_rules_first_match_wins),
        cmocka_unit_test(test_rules_retry_then_dead),
        cmocka_unit_test(test_rules_dead_at_once),
        cmocka_unit_test(test_rules_no_match_keeps_backoff),
        cmocka_unit_test(test_rules_validation),
        cmocka_unit_test(test_declared_keys_match_the_base),
        cmocka_unit_test(test_claim_on_unknown_queue_writes_nothing),
        cmocka_unit_test(test_release_lost),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
