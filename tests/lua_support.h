/* lua_support.h - what the test_lua_*.c suites share: integration tests of
 * the Redis Functions library (lua/) against a real redis-server, every
 * function called with FCALL exactly as the daemon and retryctl call it.
 * Here: queues and keys, commands, message and reply shapes (the expect_*
 * helpers fail the running test), reads of Redis state, the function
 * wrappers, and the group setup that loads the library.
 *
 * Needs RETRYD_TEST_REDIS_PORT (a throwaway server on 127.0.0.1) and
 * RETRYD_TEST_LUA (build/retryd.lua); scripts/test.sh sets both. Each test
 * works on a queue of its own, so tests do not depend on each other or on the
 * order they run in. Time never comes from this host: waits poll Redis TIME.
 * A suite defines LUA_SUITE (its name, for messages) and includes this first:
 * it includes cmocka.h itself. */
#ifndef RETRYD_LUA_SUPPORT_H
#define RETRYD_LUA_SUPPORT_H

#ifndef LUA_SUITE
#error "a suite defines LUA_SUITE, its name, before it includes lua_support.h"
#endif

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

/* tick replies {promoted, reclaimed, expired, next_in_ms, ready}; a timer
 * round's tick (ARGV[4] "1") adds {empty, alerts (-1: not looked for), moving}. */
enum { TICK_N = 5, TICK_ROUND_N = 8 };

static redisContext *g_redis;

/* ------------------------------------------------------------------------ */
/* Queues and keys                                                          */
/* ------------------------------------------------------------------------ */

typedef struct {
    char name[96];
    char base[128]; /* "retryd:{<name>}": KEYS[1] of every function */
} queue_t;

/* A queue name no other test (or earlier run) uses. */
static inline void queue_init(queue_t *q, const char *tag)
{
    static unsigned serial;
    snprintf(q->name, sizeof q->name, "%s-%ld-%u", tag, (long)getpid(), ++serial);
    snprintf(q->base, sizeof q->base, "retryd:{%s}", q->name);
}

/* Small strings that live until 32 more are made: enough for one call. */
static inline char *scratch(void)
{
    static char ring[32][192];
    static unsigned next;
    return ring[next++ % 32];
}

/* "<base>:<suffix>", e.g. qkey(q, "3:ready"). */
static inline const char *qkey(const queue_t *q, const char *suffix)
{
    char *s = scratch();
    snprintf(s, 192, "%s:%s", q->base, suffix);
    return s;
}

static inline const char *mkey(const queue_t *q, long long id)
{
    char *s = scratch();
    snprintf(s, 192, "%s:m:%lld", q->base, id);
    return s;
}

/* An integer as a command argument. */
static inline const char *num(long long v)
{
    char *s = scratch();
    snprintf(s, 192, "%lld", v);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                 */
/* ------------------------------------------------------------------------ */

#define MAX_ARGV 32

static inline redisReply *command_argv(int argc, const char **argv, const size_t *lens)
{
    redisReply *r = redisCommandArgv(g_redis, argc, argv, lens);
    if (r == NULL)
        fail_msg("redis: %s", g_redis->errstr);
    return r;
}

/* Any command from NUL-terminated strings, END-terminated. Caller frees. */
static inline redisReply *rcmd(const char *first, ...)
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
static inline redisReply *fcall_lib(const char *prefix, const char *fn, const queue_t *q, long long id,
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

static inline redisReply *fcall_bin(const char *fn, const queue_t *q, long long id, size_t nargs,
                             const char *const *args, const size_t *lens)
{
    return fcall_lib(RD_FUNCTION(""), fn, q, id, nargs, args, lens);
}

/* fcall_bin with NUL-terminated ARGV, END-terminated. */
static inline redisReply *fcall(const char *fn, const queue_t *q, long long id, ...)
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
static inline redisReply *fcall_v2(const char *fn, const queue_t *q, long long id, ...)
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

static inline long long parse_int(const char *s, size_t len, const char *what)
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
 * "<attempt>/<lease_expired>/<worker>/<error>;", per replay mark "R;", per
 * snooze mark "S<until - at, ms>;" (its other values empty); each entry's
 * time must be a positive integer. */
static inline void history_text(const redisReply *v, field_t *f)
{
    assert_int_equal(v->elements % 6, 0);
    f->value[0] = '\0';
    f->len = 0;
    for (size_t e = 0; e < v->elements; e += 6) {
        for (size_t j = 0; j < 6; j++) assert_int_equal(v->element[e + j]->type, REDIS_REPLY_STRING);
        assert_true(parse_int(v->element[e + 1]->str, v->element[e + 1]->len, "history at") > 0);
        char one[MAX_VALUE];
        if (strcmp(v->element[e]->str, "replayed") == 0) {
            snprintf(one, sizeof one, "R;");
        } else if (strcmp(v->element[e]->str, "snoozed") == 0) {
            for (size_t j = 3; j < 6; j++) assert_int_equal(v->element[e + j]->len, 0);
            long long at = parse_int(v->element[e + 1]->str, v->element[e + 1]->len, "history at");
            long long until = parse_int(v->element[e + 2]->str, v->element[e + 2]->len,
                                        "history until");
            snprintf(one, sizeof one, "S%lld;", until - at);
        } else
            snprintf(one, sizeof one, "%s/%s/%s/%.40s;", v->element[e + 2]->str,
                     v->element[e + 3]->str, v->element[e + 4]->str, v->element[e + 5]->str);
        assert_true(f->len + strlen(one) < MAX_VALUE);
        memcpy(f->value + f->len, one, strlen(one) + 1);
        f->len += strlen(one);
    }
}

static inline void msg_add(msg_t *m, const char *name, const char *value, size_t len)
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
static inline long long int_or_text(const redisReply *v, const char *what)
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
static inline size_t msg_parse_leased(const redisReply *r, msg_t *m)
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

static inline void msg_parse(const redisReply *r, msg_t *m)
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

static inline const field_t *msg_field(const msg_t *m, const char *name)
{
    for (int i = 0; i < m->nfields; i++)
        if (strcmp(m->f[i].name, name) == 0)
            return &m->f[i];
    return NULL;
}

static inline const char *msg_str(const msg_t *m, const char *name)
{
    const field_t *f = msg_field(m, name);
    if (f == NULL)
        fail_msg("message %lld has no field %s", m->id, name);
    return f->value;
}

static inline long long msg_int(const msg_t *m, const char *name)
{
    const field_t *f = msg_field(m, name);
    if (f == NULL)
        fail_msg("message %lld has no field %s", m->id, name);
    return parse_int(f->value, f->len, name);
}

static inline void assert_no_field(const msg_t *m, const char *name)
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

static inline const char *reply_desc(const redisReply *r)
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

static inline bool has_code(const redisReply *r, const char *code)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
           r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, code) == 0;
}

/* {code} or, with detail, {code, detail}. */
#define expect_code(r, code, detail) expect_code_at((r), (code), (detail), __FILE__, __LINE__)
static inline void expect_code_at(redisReply *r, const char *code, const char *detail,
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
static inline void expect_msg_at(redisReply *r, const char *code, msg_t *m, const char *file, int line)
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
static inline void expect_enqueued_at(const queue_t *q, redisReply *r, msg_t *m, const char *file,
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
static inline size_t expect_ok_msgs_at(redisReply *r, msg_t *out, size_t max, const char *file, int line)
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
static inline void expect_error_at(redisReply *r, const char *file, int line)
{
    const char *desc = reply_desc(r);
    bool good = r->type == REDIS_REPLY_ERROR;
    freeReplyObject(r);
    if (!good)
        FAIL_AT(file, line, "expected an error reply, got %s", desc);
}

/* An array of n integers. */
#define expect_ints(r, n, out) expect_ints_at((r), (n), (out), __FILE__, __LINE__)
static inline void expect_ints_at(redisReply *r, size_t n, long long *out, const char *file, int line)
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

/* ------------------------------------------------------------------------ */
/* Redis state                                                              */
/* ------------------------------------------------------------------------ */

static inline long long redis_now_ms(void)
{
    redisReply *r = rcmd("TIME", END);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* Waits (bounded) until Redis TIME has reached t_ms. */
static inline void wait_until_ms(long long t_ms)
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
static inline long long zscore(const char *key, long long id)
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

static inline long long int_reply(redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("redis error: %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static inline long long llen(const char *key) { return int_reply(rcmd("LLEN", key, END)); }
static inline long long zcard(const char *key) { return int_reply(rcmd("ZCARD", key, END)); }
static inline long long exists(const char *key) { return int_reply(rcmd("EXISTS", key, END)); }

/* calls= of cmdstat_<name> in INFO commandstats since the last CONFIG
 * RESETSTAT (0 when never called). */
static inline long long command_calls(const char *name)
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

/* A lifetime counter of the queue, 0 when never counted. */
static inline long long counter(const queue_t *q, const char *name)
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

/* Makes a scheduled id due now (as if its retry_after had passed). */
static inline void make_due(const queue_t *q, long long id)
{
    assert_int_equal(int_reply(rcmd("ZADD", qkey(q, "3:scheduled"), "XX", "CH", "0", num(id), END)), 1);
}

/* ------------------------------------------------------------------------ */
/* Function wrappers                                                        */
/* ------------------------------------------------------------------------ */

static inline long long enqueue_ok(const queue_t *q, const char *payload, int max_retries, long long delay_ms)
{
    msg_t m;
    expect_enqueued(q, fcall("enqueue", q, -1, payload, num(max_retries), num(delay_ms), END), &m);
    return m.id;
}

/* enqueue with ARGV[7] and ARGV[8] as the daemon sends them (no timer hints):
 * ttl_ms (-1: "", none given) and priority; the reply is then always
 * {"ok", id, now_ms, timer, max_retries, expires_at or -1}. Returns the id;
 * *expires_at (when not NULL) gets the reply's expiry. */
static inline long long enqueue_with(const queue_t *q, const char *payload, long long delay_ms,
                                     long long ttl_ms, int priority, long long *expires_at)
{
    redisReply *r = fcall("enqueue", q, -1, payload, "3", num(delay_ms), "", "", "",
                          ttl_ms < 0 ? "" : num(ttl_ms), num(priority), END);
    if (!has_code(r, "ok") || r->elements != 6)
        fail_msg("enqueue with ttl and priority: %s", reply_desc(r));
    for (size_t i = 1; i < 6; i++)
        assert_int_equal(r->element[i]->type, REDIS_REPLY_INTEGER);
    long long id = r->element[1]->integer;
    if (expires_at)
        *expires_at = r->element[5]->integer;
    freeReplyObject(r);
    return id;
}

/* Claims exactly one message; fails the test when none comes back. */
#define claim_one(q, lease_ms, m) claim_one_at((q), (lease_ms), (m), __FILE__, __LINE__)
static inline void claim_one_at(const queue_t *q, long long lease_ms, msg_t *m, const char *file, int line)
{
    if (expect_ok_msgs_at(fcall("claim", q, -1, num(lease_ms), "1", END), m, 1, file, line) != 1)
        FAIL_AT(file, line, "claim returned no message");
}

#define expect_nothing_to_claim(q) expect_code_at(fcall("claim", (q), -1, "30000", "1", END), \
                                                  "ok", NULL, __FILE__, __LINE__)

static inline void fail_ok(const queue_t *q, long long id, const char *error, const char *retryable,
                    long long retry_after_ms, msg_t *m)
{
    expect_ok_msg(fcall("fail", q, id, "", error, retryable, num(retry_after_ms), END), m);
}

/* Enqueues one message with max_retries 1 and kills it by one failure. */
static inline long long make_dead(const queue_t *q, const char *error)
{
    msg_t m;
    long long id = enqueue_ok(q, "x", 1, 0);
    claim_one(q, 60000, &m);
    assert_int_equal(m.id, id);
    fail_ok(q, id, error, "1", -1, &m);
    assert_string_equal(msg_str(&m, "status"), "dead");
    return id;
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
static inline redisReply *settle_claim(const queue_t *q, long long lease_ms, int count, size_t n,
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
static inline size_t expect_settled_at(redisReply *r, size_t n, const char *const *want, msg_t *out,
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
static inline void token_of(const msg_t *m, char out[64])
{
    snprintf(out, 64, "%.63s", msg_str(m, "lease_token"));
}

/* ------------------------------------------------------------------------ */
/* Bounded work, orphans, walks under claims, reply bytes                   */
/* ------------------------------------------------------------------------ */

/* A listing page without copying the messages: ids, the bytes of every
 * message field (names and values), the next cursor. Returns how many. */
static inline size_t raw_page(redisReply *r, long long *ids, size_t max_ids, long long *bytes,
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
static inline size_t raw_export(redisReply *r, long long *ids, size_t max_ids, long long *bytes,
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

/* Orphans in the dead index (ids whose hash is gone: eviction, manual DEL):
 * replay_many removes and counts them and always makes progress. */
/* ------------------------------------------------------------------------ */
/* The record layout and the upgrade from retryd_v2's HASH (docs/storage.md) */
/* ------------------------------------------------------------------------ */

static inline const char *key_type(const char *key)
{
    static char type[16];
    redisReply *r = rcmd("TYPE", key, END);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    snprintf(type, sizeof type, "%s", r->str);
    freeReplyObject(r);
    return type;
}

static inline void assert_generations_apart(const queue_t *q);

/* ------------------------------------------------------------------------ */
/* Setup                                                                    */
/* ------------------------------------------------------------------------ */

static inline char *read_file(const char *path, size_t *len)
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

static inline int group_setup(void **state)
{
    const char *port = getenv("RETRYD_TEST_REDIS_PORT");
    const char *lua = getenv("RETRYD_TEST_LUA");
    if (port == NULL || lua == NULL) {
        print_error(LUA_SUITE ": RETRYD_TEST_REDIS_PORT and RETRYD_TEST_LUA must be set "
                    "(run it through scripts/test.sh)\n");
        return -1;
    }
    struct timeval tv = { 5, 0 };
    g_redis = redisConnectWithTimeout("127.0.0.1", atoi(port), tv);
    if (g_redis == NULL || g_redis->err) {
        print_error(LUA_SUITE ": cannot connect to 127.0.0.1:%s: %s\n", port,
                    g_redis ? g_redis->errstr : "out of memory");
        return -1;
    }
    struct timeval cmd_tv = { 10, 0 };
    redisSetTimeout(g_redis, cmd_tv);

    size_t len = 0;
    char *code = read_file(lua, &len);
    if (code == NULL) {
        print_error(LUA_SUITE ": cannot read %s\n", lua);
        return -1;
    }
    const char *argv[] = { "FUNCTION", "LOAD", "REPLACE", code };
    const size_t lens[] = { 8, 4, 7, len };
    redisReply *r = redisCommandArgv(g_redis, 4, argv, lens);
    free(code);
    if (r == NULL || r->type != REDIS_REPLY_STRING || strcmp(r->str, RD_LIBRARY_NAME) != 0) {
        print_error(LUA_SUITE ": FUNCTION LOAD %s failed: %s\n", lua,
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
static inline void load_library(const char *code, size_t len, bool replace, const char *want_name)
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

/* ------------------------------------------------------------------------ */
/* Rolling upgrade from retryd_v2 (docs/storage.md "Two generations of      */
/* indexes"): the previous release's library, main's lua/ before the record, */
/* loaded beside this one in the same Redis.                                 */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* A sharded queue (docs/sharding.md): shards 1..n-1 of a queue whose shard */
/* 0 is retryd:{name}, each "retryd:{name:<k>.<salt>}", with policy and    */
/* layout copied to them, so that each takes placements.                    */
/* ------------------------------------------------------------------------ */

/* Raises shard 0 of name to n shards with salts ("s1,...", n-1 of them) and
 * copies the policy and layout to every shard. */
static inline void make_sharded(const char *name, int n, const char *salts)
{
    queue_t q0;
    snprintf(q0.name, sizeof q0.name, "%s", name);
    snprintf(q0.base, sizeof q0.base, "retryd:{%s}", name);
    redisReply *r = fcall("shards_set", &q0, -1, "raise", num(n), salts, END);
    if (!has_code(r, "ok")) fail_msg("shards_set raise: %s", reply_desc(r));
    freeReplyObject(r);
    redisReply *g = fcall("policy_get", &q0, -1, END);
    assert_int_equal(g->type, REDIS_REPLY_ARRAY);
    const char *args[64];
    size_t na = 1;
    for (size_t i = 0; i + 1 < g->elements && na + 2 <= 64; i += 2) {
        if (strcmp(g->element[i]->str, "layout.rev") == 0) args[0] = g->element[i + 1]->str;
        args[na++] = g->element[i]->str;
        args[na++] = g->element[i + 1]->str;
    }
    const char *p = salts;
    for (int k = 1; k < n; k++) {
        queue_t qk = q0;
        snprintf(qk.base, sizeof qk.base, "retryd:{%s:%d.%ld}", name, k, strtol(p, NULL, 10));
        const char *comma = strchr(p, ',');
        p = comma ? comma + 1 : p + strlen(p);
        r = fcall_bin("policy_copy", &qk, -1, na, args, NULL);
        if (!has_code(r, "ok")) fail_msg("policy_copy to shard %d: %s", k, reply_desc(r));
        freeReplyObject(r);
    }
    freeReplyObject(g);
}

#define V2_FIXTURE "tests/fixtures/retryd_v2.lua"

static inline void load_v2(void)
{
    size_t n = 0;
    char *code = read_file(V2_FIXTURE, &n);
    if (code == NULL)
        fail_msg("cannot read %s (run from the source tree)", V2_FIXTURE);
    load_library(code, n, true, "retryd_v2");
    free(code);
}

/* The library before this one (tests/fixtures/retryd_v8.lua), loaded
 * beside it: what a daemon of that release calls (fcall_lib "retryd_v8_"). */
static inline void load_v8(void)
{
    size_t len = 0;
    char *code = read_file("tests/fixtures/retryd_v8.lua", &len);
    if (code == NULL) fail_msg("cannot read tests/fixtures/retryd_v8.lua (run from the source tree)");
    load_library(code, len, true, "retryd_v8");
    free(code);
}

/* The type of the record of every id in the queue's indexes of one
 * generation ("" retryd_v2's, "3:" the record's) must not be `wrong`. */
static inline void assert_generation_types(const queue_t *q, const char *gen, const char *wrong)
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
static inline void assert_generations_apart(const queue_t *q)
{
    assert_generation_types(q, "", "string");
    assert_generation_types(q, "3:", "hash");
}

/* Enqueues through retryd_v2; returns the id. */
static inline long long v2_enqueue(const queue_t *q, const char *payload, const char *max_retries,
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
static inline void v2_claim(const queue_t *q, const char *lease_ms, long long want, msg_t *m)
{
    redisReply *r = fcall_v2("claim", q, -1, lease_ms, "1", END);
    if (!has_code(r, "ok") || r->elements != 2)
        fail_msg("retryd_v2_claim: %s", reply_desc(r));
    msg_parse(r->element[1], m);
    freeReplyObject(r);
    assert_int_equal(m->id, want);
}

static inline int group_teardown(void **state)
{
    if (g_redis)
        redisFree(g_redis);
    g_redis = NULL;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Queue policy and flow control (docs/reference.md "Queue policy and flow control", docs/flow-control.md)           */
/* ------------------------------------------------------------------------ */

/* policy_set in mode ("replace" | "merge") with field, value pairs; expects "ok". */
#define policy_set(q, mode, ...) \
    policy_set_at(fcall("policy_set", (q), -1, (mode), __VA_ARGS__, END), __FILE__, __LINE__)
static inline void policy_set_at(redisReply *r, const char *file, int line)
{
    if (!has_code(r, "ok")) FAIL_AT(file, line, "policy_set: %s", reply_desc(r));
    freeReplyObject(r);
}

/* The policy's stored value of field, "" when absent. */
static inline const char *policy_field(const queue_t *q, const char *field)
{
    redisReply *r = rcmd("HGET", qkey(q, "policy"), field, END);
    char *out = scratch();
    out[0] = '\0';
    if (r->type == REDIS_REPLY_STRING) snprintf(out, 192, "%s", r->str);
    freeReplyObject(r);
    return out;
}

#endif
