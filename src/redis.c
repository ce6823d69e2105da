/* redis.c - the Redis connection: state machine, handshake, library loading,
 * per-command deadlines, reconnect with backoff, pub/sub. The only file that
 * includes hiredis, and only for its reply reader and command formatter: the
 * bytes go through redis_transport.c (TCP, or TLS over TCP). */
#include "retryd/redis.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "redis_transport.h"
#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/log.h"

typedef enum conn_state { CLOSED, CONNECTING, LOADING, READY } conn_state_t;

static const char *const state_names[] = { "closed", "connecting", "loading", "ready" };

enum { BACKOFF_MIN_MS = 100, BACKOFF_MAX_MS = 5000 };

/* What a reply in the line answers. */
typedef enum expect {
    EXPECT_COMMAND,     /* a caller's command: cb gets the reply */
    EXPECT_HANDSHAKE,   /* AUTH, SELECT, or the last step ("READY") */
    EXPECT_RELOAD,      /* FUNCTION LOAD after "Function not found" */
} expect_t;

/* One reply expected, in send order; a command owns a copy of its arguments
 * so it can be resent. */
typedef struct pending {
    rd_redis_t *r;
    expect_t kind;
    const char *step;           /* EXPECT_HANDSHAKE: which one (static) */
    rd_redis_cb cb;
    void *arg;
    uint64_t sent_ms;
    uint64_t sent_ns;           /* for the round-trip histogram */
    bool is_fcall;
    bool resent;
    int argc;
    const char **argv;
    size_t *lens;
    struct pending *prev, *next;
} pending_t;

/* A channel of a notification link; Redis's pushes for it go to cb. */
typedef struct subscription {
    rd_pubsub_cb cb;
    void *arg;
    char *channel;
    size_t len;
    struct subscription *next;
} subscription_t;

struct rd_redis {
    uv_loop_t *loop;
    rd_transport_t *link;       /* NULL while CLOSED */
    redisReader *reader;        /* of the current link */
    rd_buf_t out;               /* formatted commands not yet written */
    unsigned link_gen;          /* counts links dropped: a callback may drop the one it read from */
    conn_state_t state;
    uint64_t state_since_ms;
    int backoff_ms;
    bool attempted;             /* a connect attempt has ended (READY or failed) */

    char *host, *username, *password;
    int port, db, timeout_ms;
    const char *library;
    const rd_redis_tls_t *tls;
    void (*on_ready)(void *arg);
    void *on_ready_arg;

    uv_timer_t reconnect_timer;
    uv_timer_t watchdog;
    uv_check_t flush;           /* writes queued commands at the end of each loop turn */
    uv_prepare_t flush_before_poll; /* and before the loop sleeps (flush_out) */
    bool write_pending;
    pending_t *head, *tail;     /* in send order: the head is the oldest */
    subscription_t *subs;
    rd_histogram_t rtt;

    bool closing;
    int open_handles;           /* the four above, and the transport while it closes */
    void (*on_closed)(void *arg);
    void *on_closed_arg;
};

static void connect_now(rd_redis_t *r);

static void on_reconnect_timer(uv_timer_t *t)
{
    connect_now(t->data);
}

/* ---------------------------------------------------------------- replies */

#define REPLY(r) ((const redisReply *)(const void *)(r))

rd_reply_type_t rd_reply_type(const rd_reply_t *r)
{
    if (r == NULL) return RD_REPLY_NIL;
    switch (REPLY(r)->type) {
    case REDIS_REPLY_STRING: return RD_REPLY_STRING;
    case REDIS_REPLY_ARRAY: return RD_REPLY_ARRAY;
    case REDIS_REPLY_INTEGER: return RD_REPLY_INTEGER;
    case REDIS_REPLY_STATUS: return RD_REPLY_STATUS;
    case REDIS_REPLY_ERROR: return RD_REPLY_ERROR;
    default: return RD_REPLY_NIL;
    }
}

const char *rd_reply_str(const rd_reply_t *r, size_t *len)
{
    const redisReply *x = REPLY(r);
    if (x == NULL || (x->type != REDIS_REPLY_STRING && x->type != REDIS_REPLY_STATUS &&
                      x->type != REDIS_REPLY_ERROR)) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = x->len;
    return x->str;
}

size_t rd_reply_len(const rd_reply_t *r)
{
    return r != NULL && REPLY(r)->type == REDIS_REPLY_ARRAY ? REPLY(r)->elements : 0;
}

const rd_reply_t *rd_reply_at(const rd_reply_t *r, size_t i)
{
    if (i >= rd_reply_len(r)) return NULL;
    return (const rd_reply_t *)(const void *)REPLY(r)->element[i];
}

bool rd_reply_int(const rd_reply_t *r, long long *out)
{
    const redisReply *x = REPLY(r);
    if (x == NULL) return false;
    if (x->type == REDIS_REPLY_INTEGER) {
        *out = x->integer;
        return true;
    }
    if (x->type != REDIS_REPLY_STRING || x->len == 0 || x->len > 20) return false;
    char tmp[24], *end;
    memcpy(tmp, x->str, x->len);
    tmp[x->len] = '\0';
    long long v = strtoll(tmp, &end, 10);
    if (*end != '\0') return false;
    *out = v;
    return true;
}

bool rd_reply_is(const rd_reply_t *r, const char *s)
{
    size_t len;
    const char *str = rd_reply_str(r, &len);
    return str && rd_reply_type(r) != RD_REPLY_ERROR && len == strlen(s) &&
           memcmp(str, s, len) == 0;
}

/* ---------------------------------------------------------------- state */

static uint64_t now_ms(rd_redis_t *r)
{
    return uv_now(r->loop);
}

static void set_state(rd_redis_t *r, conn_state_t s)
{
    if (r->state != s) rd_debug("redis: %s -> %s", state_names[r->state], state_names[s]);
    r->state = s;
    r->state_since_ms = now_ms(r);
}

static void handle_closed(rd_redis_t *r)
{
    if (--r->open_handles > 0) return;
    void (*cb)(void *) = r->on_closed;
    void *arg = r->on_closed_arg;
    free(r->host);
    free(r->username);
    free(r->password);
    rd_buf_free(&r->out);
    rd_free(r);
    if (cb) cb(arg);
}

static void on_handle_closed(uv_handle_t *h)
{
    handle_closed(h->data);
}

static void on_transport_closed(void *arg)
{
    handle_closed(arg);
}

static void unlink_pending(rd_redis_t *r, pending_t *p)
{
    if (p->prev) p->prev->next = p->next;
    else r->head = p->next;
    if (p->next) p->next->prev = p->prev;
    else r->tail = p->prev;
    p->prev = p->next = NULL;
}

static void link_pending(rd_redis_t *r, pending_t *p)
{
    p->prev = r->tail;
    p->next = NULL;
    if (r->tail) r->tail->next = p;
    else r->head = p;
    r->tail = p;
    p->sent_ms = now_ms(r);
    p->sent_ns = uv_hrtime();
}

/* Formats argv into the output (written at the end of the loop turn). */
static void queue_command(rd_redis_t *r, int argc, const char **argv, const size_t *lens)
{
    char *cmd = NULL;
    int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (n < 0) abort();  /* only fails when out of memory */
    rd_buf_append(&r->out, cmd, (size_t)n);
    redisFreeCommand(cmd);
    r->write_pending = true;
}

/* Queues a command whose reply is expected as kind (no copy of argv). */
static void expect_reply(rd_redis_t *r, expect_t kind, const char *step, int argc,
                         const char **argv, const size_t *lens)
{
    pending_t *p = rd_calloc(1, sizeof *p);
    p->r = r;
    p->kind = kind;
    p->step = step;
    queue_command(r, argc, argv, lens);
    link_pending(r, p);
}

/* ---------------------------------------------------------------- link down */

/* Ends the current link (or connect attempt), why says how, and answers
 * everything in flight: commands LOST, subscriptions DROPPED. The state is
 * CLOSED before any callback runs, so none can send on the dead link. */
static void drop_link(rd_redis_t *r, const char *why)
{
    if (r->link == NULL) return;
    bool was_ready = r->state == READY;
    bool after_connect = r->state == LOADING;
    rd_transport_close(r->link);
    r->link = NULL;
    r->link_gen++;
    redisReaderFree(r->reader);
    r->reader = NULL;
    rd_buf_reset(&r->out);
    r->write_pending = false;
    pending_t *inflight = r->head;
    r->head = r->tail = NULL;
    subscription_t *subs = r->subs;
    r->subs = NULL;

    set_state(r, CLOSED);
    r->attempted = true;
    if (r->closing) {
        uv_close((uv_handle_t *)&r->reconnect_timer, on_handle_closed);
        uv_close((uv_handle_t *)&r->watchdog, on_handle_closed);
        uv_close((uv_handle_t *)&r->flush, on_handle_closed);
        uv_close((uv_handle_t *)&r->flush_before_poll, on_handle_closed);
    } else {
        /* One line per failure. A refused or lost connection is loud the first
         * time and quiet while retrying (Redis restarting); a failure once
         * connected (TLS, AUTH, the library) is a setting to fix: every time. */
        bool loud = r->backoff_ms == BACKOFF_MIN_MS || after_connect ||
                    (r->tls && strstr(why, "TLS") != NULL);
        /* A TLS port closes on the plain handshake it cannot read. */
        const char *hint = !r->tls && after_connect && strncmp(why, "read failed", 11) == 0
                               ? " (is it a TLS port? use rediss://)"
                               : "";
        rd_log(loud ? RD_LOG_WARN : RD_LOG_DEBUG, "redis: %s %s:%d: %s%s; reconnecting in %d ms",
               was_ready ? "link lost to" : "cannot connect to", r->host, r->port, why, hint,
               r->backoff_ms);
        uv_timer_start(&r->reconnect_timer, on_reconnect_timer, (uint64_t)r->backoff_ms, 0);
        r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff_ms * 2;
    }
    while (inflight) {
        pending_t *p = inflight;
        inflight = p->next;
        if (p->kind == EXPECT_COMMAND && p->cb) p->cb(NULL, RD_REDIS_LOST, p->arg);
        rd_free(p);
    }
    while (subs) {
        subscription_t *s = subs;
        subs = s->next;
        s->cb(RD_PUBSUB_DROPPED, s->arg);
        rd_free(s->channel);
        rd_free(s);
    }
}

/* ---------------------------------------------------------------- handshake */

static void send_library(rd_redis_t *r, expect_t kind, const char *step)
{
    const char *argv[] = { "FUNCTION", "LOAD", "REPLACE", r->library };
    size_t lens[] = { 8, 4, 7, strlen(r->library) };
    expect_reply(r, kind, step, 4, argv, lens);
}

/* The connection is up (TLS included): AUTH, SELECT, then the library (or a
 * PING on a notification link), whose reply makes the link READY. */
static void on_link_open(void *arg)
{
    rd_redis_t *r = arg;
    rd_debug("redis: connected to %s:%d%s", r->host, r->port, r->tls ? " (TLS)" : "");
    set_state(r, LOADING);
    if (r->password && r->password[0]) {
        if (r->username && r->username[0]) {
            const char *argv[] = { "AUTH", r->username, r->password };
            size_t lens[] = { 4, strlen(r->username), strlen(r->password) };
            expect_reply(r, EXPECT_HANDSHAKE, "AUTH", 3, argv, lens);
        } else {
            const char *argv[] = { "AUTH", r->password };
            size_t lens[] = { 4, strlen(r->password) };
            expect_reply(r, EXPECT_HANDSHAKE, "AUTH", 2, argv, lens);
        }
    }
    if (r->db != 0) {
        char db[16];
        int n = snprintf(db, sizeof db, "%d", r->db);
        const char *argv[] = { "SELECT", db };
        size_t lens[] = { 6, (size_t)n };
        expect_reply(r, EXPECT_HANDSHAKE, "SELECT", 2, argv, lens);
    }
    if (r->library) {
        send_library(r, EXPECT_HANDSHAKE, "READY");
    } else {
        const char *argv[] = { "PING" };
        size_t lens[] = { 4 };
        expect_reply(r, EXPECT_HANDSHAKE, "READY", 1, argv, lens);
    }
}

static void on_handshake_reply(rd_redis_t *r, const pending_t *p, const redisReply *x)
{
    if (x->type == REDIS_REPLY_ERROR) {
        char why[300];
        snprintf(why, sizeof why, "%s failed: %.*s", p->step, (int)x->len, x->str);
        rd_error("redis: %s", why);
        drop_link(r, why);
        return;
    }
    if (strcmp(p->step, "READY") != 0 || r->closing) return;
    r->backoff_ms = BACKOFF_MIN_MS;
    set_state(r, READY);
    r->attempted = true;
    /* FUNCTION LOAD answers the library's name, which carries its version. */
    if (r->library && x->type == REDIS_REPLY_STRING)
        rd_info("redis: link ready at %s:%d%s (library %.*s loaded)", r->host, r->port,
                r->tls ? " over TLS" : "", (int)x->len, x->str);
    else
        rd_info("redis: link ready at %s:%d%s", r->host, r->port, r->tls ? " over TLS" : "");
    if (r->on_ready) r->on_ready(r->on_ready_arg);
}

static void on_link_fail(void *arg, const char *why)
{
    drop_link(arg, why);
}

static void on_link_data(void *arg, const char *data, size_t len);

static const rd_transport_events_t link_events = {
    .on_open = on_link_open, .on_data = on_link_data, .on_fail = on_link_fail,
    .on_closed = on_transport_closed,
};

static void connect_now(rd_redis_t *r)
{
    char err[256];
    set_state(r, CONNECTING);
    r->link = rd_transport_open(r->loop, r->host, r->port, r->tls, &link_events, r, err,
                                sizeof err);
    if (r->link == NULL) {
        rd_warn("redis: cannot connect to %s:%d: %s", r->host, r->port, err);
        set_state(r, CLOSED);
        r->attempted = true;
        uv_timer_start(&r->reconnect_timer, on_reconnect_timer, (uint64_t)r->backoff_ms, 0);
        r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff_ms * 2;
        return;
    }
    r->open_handles++;
    r->reader = redisReaderCreate();
}

rd_reply_t *rd_reply_copy(const rd_reply_t *r)
{
    const redisReply *x = REPLY(r);
    if (x == NULL) return NULL;
    redisReply *c = rd_malloc(sizeof *c);
    *c = *x;
    if (x->str) {
        c->str = rd_malloc(x->len + 1);
        memcpy(c->str, x->str, x->len);
        c->str[x->len] = '\0';
    }
    if (x->element) {
        c->element = rd_calloc(x->elements ? x->elements : 1, sizeof *c->element);
        for (size_t i = 0; i < x->elements; i++)
            c->element[i] = (redisReply *)(void *)rd_reply_copy((const rd_reply_t *)(const void *)x->element[i]);
    }
    return (rd_reply_t *)(void *)c;
}

void rd_reply_free(rd_reply_t *r)
{
    redisReply *x = (redisReply *)(void *)r;
    if (x == NULL) return;
    if (x->element) {
        for (size_t i = 0; i < x->elements; i++) rd_reply_free((rd_reply_t *)(void *)x->element[i]);
        rd_free(x->element);
    }
    rd_free(x->str);
    rd_free(x);
}

/* ---------------------------------------------------------------- commands */

static bool is_missing_function(const redisReply *x)
{
    return x->type == REDIS_REPLY_ERROR && x->str &&
           strcasestr(x->str, "Function not found") != NULL;
}

static void on_reload_reply(const redisReply *x)
{
    if (x->type == REDIS_REPLY_ERROR)
        rd_error("redis: reloading the library failed: %.*s", (int)x->len, x->str);
    else
        rd_warn("redis: the retryd library was missing; loaded it again");
}

static void on_command_reply(rd_redis_t *r, pending_t *p, const redisReply *x)
{
    if (p->is_fcall && !p->resent && is_missing_function(x) && !r->closing) {
        /* It never ran: load the library and send it again, once. */
        p->resent = true;
        send_library(r, EXPECT_RELOAD, NULL);
        queue_command(r, p->argc, p->argv, p->lens);
        link_pending(r, p);
        return;
    }
    rd_histogram_observe(&r->rtt, (double)(uv_hrtime() - p->sent_ns) / 1e9);
    if (p->cb) p->cb((const rd_reply_t *)(const void *)x, RD_REDIS_OK, p->arg);
    rd_free(p);
}

int rd_redis_command(rd_redis_t *r, int argc, const char **argv, const size_t *lens,
                     rd_redis_cb cb, void *arg)
{
    if (r->state != READY || r->closing || r->link == NULL || argc < 1) return -1;
    size_t bytes = 0;
    for (int i = 0; i < argc; i++) bytes += lens[i];
    /* One block: the struct, the pointer and length arrays, then the bytes. */
    size_t head = sizeof(pending_t) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    pending_t *p = rd_malloc(head + bytes);
    memset(p, 0, sizeof *p);
    p->r = r;
    p->kind = EXPECT_COMMAND;
    p->cb = cb;
    p->arg = arg;
    p->argc = argc;
    p->argv = (const char **)(void *)(p + 1);
    p->lens = (size_t *)(void *)(p->argv + argc);
    char *data = (char *)(p->lens + argc);
    for (int i = 0; i < argc; i++) {
        memcpy(data, argv[i], lens[i]);
        p->argv[i] = data;
        p->lens[i] = lens[i];
        data += lens[i];
    }
    p->is_fcall = lens[0] >= 5 && strncasecmp(argv[0], "FCALL", 5) == 0;
    queue_command(r, argc, p->argv, p->lens);
    link_pending(r, p);
    return 0;
}

/* ---------------------------------------------------------------- pub/sub */

static subscription_t **find_sub(rd_redis_t *r, const char *channel, size_t len)
{
    for (subscription_t **s = &r->subs; *s; s = &(*s)->next)
        if ((*s)->len == len && memcmp((*s)->channel, channel, len) == 0) return s;
    return NULL;
}

/* A push of a subscribed link: ["subscribe"|"message"|"unsubscribe", channel, ...].
 * Returns false when x is not one (then it answers the oldest request). */
static bool on_push(rd_redis_t *r, const redisReply *x)
{
    if (r->library || x->type != REDIS_REPLY_ARRAY || x->elements < 2 ||
        x->element[0]->type != REDIS_REPLY_STRING || x->element[1]->type != REDIS_REPLY_STRING)
        return false;
    const char *kind = x->element[0]->str;
    rd_pubsub_event_t event;
    if (strcmp(kind, "message") == 0) event = RD_PUBSUB_MESSAGE;
    else if (strcmp(kind, "subscribe") == 0) event = RD_PUBSUB_SUBSCRIBED;
    else if (strcmp(kind, "unsubscribe") == 0) event = RD_PUBSUB_UNSUBSCRIBED;
    else return false;
    subscription_t **at = find_sub(r, x->element[1]->str, x->element[1]->len);
    if (at == NULL) return true;  /* e.g. UNSUBSCRIBE of a channel never subscribed */
    subscription_t *s = *at;
    if (event == RD_PUBSUB_UNSUBSCRIBED) {
        *at = s->next;
        s->cb(event, s->arg);
        rd_free(s->channel);
        rd_free(s);
    } else {
        s->cb(event, s->arg);
    }
    return true;
}

int rd_redis_subscribe(rd_redis_t *r, const char *channel, size_t len, rd_pubsub_cb cb,
                       void *arg)
{
    if (r->state != READY || r->closing || r->link == NULL || r->library) return -1;
    subscription_t **old = find_sub(r, channel, len);
    subscription_t *s = old ? *old : rd_calloc(1, sizeof *s);
    s->cb = cb;  /* subscribing again replaces the callback, as hiredis did */
    s->arg = arg;
    if (old == NULL) {
        s->channel = rd_strndup(channel, len);
        s->len = len;
        s->next = r->subs;
        r->subs = s;
    }
    const char *argv[] = { "SUBSCRIBE", channel };
    size_t lens[] = { 9, len };
    queue_command(r, 2, argv, lens);
    return 0;
}

int rd_redis_unsubscribe(rd_redis_t *r, const char *channel, size_t len)
{
    if (r->state != READY || r->closing || r->link == NULL || r->library) return -1;
    const char *argv[] = { "UNSUBSCRIBE", channel };
    size_t lens[] = { 11, len };
    queue_command(r, 2, argv, lens);
    return 0;
}

/* ---------------------------------------------------------------- replies in */

static void on_reply(rd_redis_t *r, const redisReply *x)
{
    if (on_push(r, x)) return;
    pending_t *p = r->head;
    if (p == NULL) {
        drop_link(r, "Redis sent a reply nobody asked for");
        return;
    }
    unlink_pending(r, p);
    switch (p->kind) {
    case EXPECT_COMMAND:
        on_command_reply(r, p, x);
        return;  /* p is freed or sent again */
    case EXPECT_HANDSHAKE:
        on_handshake_reply(r, p, x);
        break;
    case EXPECT_RELOAD:
        on_reload_reply(x);
        break;
    }
    rd_free(p);
}

static void on_link_data(void *arg, const char *data, size_t len)
{
    rd_redis_t *r = arg;
    unsigned gen = r->link_gen;
    if (redisReaderFeed(r->reader, data, len) != REDIS_OK) {
        drop_link(r, "out of memory reading a reply");
        return;
    }
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(r->reader, &reply) != REDIS_OK) {
            char why[160];
            snprintf(why, sizeof why, "protocol error: %s", r->reader->errstr);
            drop_link(r, why);
            return;
        }
        if (reply == NULL) break;
        on_reply(r, reply);
        freeReplyObject(reply);
        if (r->link_gen != gen) return;  /* a callback dropped or closed the link */
        if (r->closing && r->head == NULL) {
            drop_link(r, "closed");  /* a graceful close: every reply is in */
            return;
        }
    }
}

const rd_histogram_t *rd_redis_rtt(const rd_redis_t *r)
{
    return &r->rtt;
}

bool rd_redis_ready(const rd_redis_t *r)
{
    return r->state == READY && !r->closing;
}

bool rd_redis_connecting(const rd_redis_t *r)
{
    return (r->state == CONNECTING || r->state == LOADING) && !r->closing;
}

bool rd_redis_attempted(const rd_redis_t *r)
{
    return r->attempted;
}

/* ---------------------------------------------------------------- flushing */

/* Writing at the end of every loop turn sends all the commands that turn
 * produced in one write (one TLS record batch), right away. The check phase
 * runs after the poll, so it sends what I/O callbacks queued; commands queued
 * by a timer callback (the promoter's rounds, a waiter's deadline) come before
 * the poll and would sit until something else woke the loop (up to the
 * watchdog's 250 ms), so the prepare phase, just before the loop sleeps,
 * sends those. */
static void flush_out(rd_redis_t *r)
{
    if (!r->write_pending) return;
    r->write_pending = false;
    if (r->link && r->out.len) rd_transport_write(r->link, r->out.data, r->out.len);
    rd_buf_reset(&r->out);
}

static void on_flush(uv_check_t *h)
{
    flush_out(h->data);
}

static void on_flush_before_poll(uv_prepare_t *h)
{
    flush_out(h->data);
}

/* ---------------------------------------------------------------- watchdog */

static void on_watchdog(uv_timer_t *t)
{
    rd_redis_t *r = t->data;
    if (r->link == NULL) return;
    uint64_t now = now_ms(r);
    char why[200];
    if (r->state != READY && now - r->state_since_ms > (uint64_t)r->timeout_ms) {
        const char *stage = r->state == CONNECTING ? rd_transport_stage(r->link) : "handshake";
        /* A plain port waits for the rest of what it takes for a command. */
        snprintf(why, sizeof why, "no answer to the %s within %d ms%s", stage, r->timeout_ms,
                 strcmp(stage, "TLS handshake") == 0 ? " (is the port plain TCP? use redis://)"
                                                     : "");
        drop_link(r, why);
    } else if (r->head && now - r->head->sent_ms > (uint64_t)r->timeout_ms) {
        snprintf(why, sizeof why,
                 "a command got no answer within %d ms (%s commands in flight have an "
                 "unknown outcome)", r->timeout_ms, r->head->next ? "all" : "the");
        drop_link(r, why);
    }
}

/* ---------------------------------------------------------------- life cycle */

rd_redis_t *rd_redis_start(uv_loop_t *loop, const rd_redis_options_t *opts)
{
    rd_redis_t *r = rd_calloc(1, sizeof *r);
    r->loop = loop;
    r->host = rd_strdup(opts->host);
    r->port = opts->port;
    r->username = opts->username ? rd_strdup(opts->username) : NULL;
    r->password = opts->password ? rd_strdup(opts->password) : NULL;
    r->db = opts->db;
    r->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 5000;
    r->library = opts->library;
    r->tls = opts->tls;
    r->on_ready = opts->on_ready;
    r->on_ready_arg = opts->on_ready_arg;
    r->backoff_ms = BACKOFF_MIN_MS;
    r->state = CLOSED;
    static const double rtt_bounds[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                         0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5 };
    rd_histogram_init(&r->rtt, rtt_bounds, sizeof rtt_bounds / sizeof rtt_bounds[0]);
    uv_timer_init(loop, &r->reconnect_timer);
    uv_timer_init(loop, &r->watchdog);
    uv_check_init(loop, &r->flush);
    r->flush.data = r;
    uv_check_start(&r->flush, on_flush);
    uv_prepare_init(loop, &r->flush_before_poll);
    r->flush_before_poll.data = r;
    uv_prepare_start(&r->flush_before_poll, on_flush_before_poll);
    r->reconnect_timer.data = r->watchdog.data = r;
    r->open_handles = 4;
    uint64_t every = (uint64_t)(r->timeout_ms / 4 < 250 ? r->timeout_ms / 4 : 250);
    uv_timer_start(&r->watchdog, on_watchdog, every, every);
    connect_now(r);
    return r;
}

void rd_redis_close(rd_redis_t *r, bool force, void (*on_closed)(void *arg), void *arg)
{
    if (!r->closing) {
        r->closing = true;
        r->on_closed = on_closed;
        r->on_closed_arg = arg;
        uv_timer_stop(&r->reconnect_timer);
        if (r->link == NULL) {
            uv_close((uv_handle_t *)&r->reconnect_timer, on_handle_closed);
            uv_close((uv_handle_t *)&r->watchdog, on_handle_closed);
            uv_close((uv_handle_t *)&r->flush, on_handle_closed);
            uv_close((uv_handle_t *)&r->flush_before_poll, on_handle_closed);
            return;
        }
    }
    if (r->link == NULL) return;  /* already on its way down */
    /* Gracefully: the replies still due come in first (the watchdog bounds
     * the wait), as long as the link was up to send them. */
    if (force || r->state != READY || r->head == NULL) drop_link(r, "closed");
}
