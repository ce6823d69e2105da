/* redis.c - the Redis connection: state machine, handshake, library loading,
 * per-command deadlines, reconnect with backoff. The only file that includes
 * hiredis. */
#include "retryd/redis.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "retryd/alloc.h"
#include "retryd/log.h"

typedef enum conn_state { CLOSED, CONNECTING, LOADING, READY } conn_state_t;

static const char *const state_names[] = { "closed", "connecting", "loading", "ready" };

enum { BACKOFF_MIN_MS = 100, BACKOFF_MAX_MS = 5000 };

/* One command in flight; owns a copy of its arguments so it can be resent. */
typedef struct pending {
    rd_redis_t *r;
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

struct rd_redis {
    uv_loop_t *loop;
    redisAsyncContext *ac;
    conn_state_t state;
    uint64_t state_since_ms;
    int backoff_ms;
    bool attempted;             /* a connect attempt has ended (READY or failed) */

    char *host, *username, *password;
    int port, db, timeout_ms;
    const char *library;
    void (*on_ready)(void *arg);
    void *on_ready_arg;

    uv_timer_t reconnect_timer;
    uv_timer_t watchdog;
    uv_check_t flush;           /* writes queued commands at the end of each loop turn */
    bool write_pending;
    pending_t *head, *tail;     /* in send order: the head is the oldest */
    rd_histogram_t rtt;

    bool closing;
    int open_handles;
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

static void on_handle_closed(uv_handle_t *h)
{
    rd_redis_t *r = h->data;
    if (--r->open_handles > 0) return;
    void (*cb)(void *) = r->on_closed;
    void *arg = r->on_closed_arg;
    free(r->host);
    free(r->username);
    free(r->password);
    rd_free(r);
    if (cb) cb(arg);
}

/* Called once the hiredis context is gone, by whichever path it went. */
static void after_link_down(rd_redis_t *r)
{
    r->ac = NULL;
    set_state(r, CLOSED);
    r->attempted = true;
    if (r->closing) {
        uv_close((uv_handle_t *)&r->reconnect_timer, on_handle_closed);
        uv_close((uv_handle_t *)&r->watchdog, on_handle_closed);
        uv_close((uv_handle_t *)&r->flush, on_handle_closed);
        return;
    }
    /* Loud on the first failure, quiet while retrying. */
    rd_log(r->backoff_ms == BACKOFF_MIN_MS ? RD_LOG_WARN : RD_LOG_DEBUG,
           "redis: link to %s:%d down, reconnecting in %d ms", r->host, r->port, r->backoff_ms);
    uv_timer_start(&r->reconnect_timer, on_reconnect_timer, (uint64_t)r->backoff_ms, 0);
    r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff_ms * 2;
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

/* ---------------------------------------------------------------- event loop glue */

/* hiredis 0.14's adapters/libuv.h drops poll errors (a refused connect then
 * never completes and only the handshake deadline ends it), so retryd attaches
 * hiredis to libuv itself: on an error the pending events are handed to
 * hiredis, which reads the socket error and reports it at once. */
typedef struct uv_glue {
    redisAsyncContext *ac;      /* NULL once hiredis cleaned up */
    uv_poll_t poll;
    int events;
} uv_glue_t;

static void on_poll(uv_poll_t *h, int status, int events)
{
    uv_glue_t *g = h->data;
    int ev = status < 0 ? g->events : events;
    if (g->ac && (ev & UV_READABLE)) redisAsyncHandleRead(g->ac);
    if (g->ac && (ev & UV_WRITABLE)) redisAsyncHandleWrite(g->ac);
}

static void glue_update(uv_glue_t *g, int events)
{
    g->events = events;
    if (events) uv_poll_start(&g->poll, events, on_poll);
    else uv_poll_stop(&g->poll);
}

static void glue_add_read(void *arg) { uv_glue_t *g = arg; glue_update(g, g->events | UV_READABLE); }
static void glue_del_read(void *arg) { uv_glue_t *g = arg; glue_update(g, g->events & ~UV_READABLE); }
static void glue_add_write(void *arg) { uv_glue_t *g = arg; glue_update(g, g->events | UV_WRITABLE); }
static void glue_del_write(void *arg) { uv_glue_t *g = arg; glue_update(g, g->events & ~UV_WRITABLE); }

static void on_glue_closed(uv_handle_t *h)
{
    rd_free(h->data);
}

static void glue_cleanup(void *arg)
{
    uv_glue_t *g = arg;
    g->ac = NULL;
    uv_close((uv_handle_t *)&g->poll, on_glue_closed);
}

static int glue_attach(redisAsyncContext *ac, uv_loop_t *loop)
{
    uv_glue_t *g = rd_calloc(1, sizeof *g);
    if (uv_poll_init_socket(loop, &g->poll, ac->c.fd) != 0) {
        rd_free(g);
        return -1;
    }
    g->ac = ac;
    g->poll.data = g;
    ac->ev.data = g;
    ac->ev.addRead = glue_add_read;
    ac->ev.delRead = glue_del_read;
    ac->ev.addWrite = glue_add_write;
    ac->ev.delWrite = glue_del_write;
    ac->ev.cleanup = glue_cleanup;
    return 0;
}

/* ---------------------------------------------------------------- handshake */

static void on_handshake_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    rd_redis_t *r = ac->data;
    const char *step = privdata;
    redisReply *x = reply;
    if (x == NULL || r == NULL || r->closing) return;  /* the link is going away */
    if (x->type == REDIS_REPLY_ERROR) {
        rd_error("redis: %s failed: %.*s", step, (int)x->len, x->str);
        redisAsyncDisconnect(ac);
        return;
    }
    if (strcmp(step, "READY") == 0) {
        r->backoff_ms = BACKOFF_MIN_MS;
        set_state(r, READY);
        r->attempted = true;
        /* FUNCTION LOAD answers the library's name, which carries its version. */
        if (r->library && x->type == REDIS_REPLY_STRING)
            rd_info("redis: link ready at %s:%d (library %.*s loaded)", r->host, r->port,
                    (int)x->len, x->str);
        else
            rd_info("redis: link ready at %s:%d", r->host, r->port);
        if (r->on_ready) r->on_ready(r->on_ready_arg);
    }
}

static void send_library(redisAsyncContext *ac, redisCallbackFn *fn, void *privdata)
{
    rd_redis_t *r = ac->data;
    const char *argv[] = { "FUNCTION", "LOAD", "REPLACE", r->library };
    size_t lens[] = { 8, 4, 7, strlen(r->library) };
    redisAsyncCommandArgv(ac, fn, privdata, 4, argv, lens);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    rd_redis_t *r = ac->data;
    if (status != REDIS_OK) {
        rd_log(r->backoff_ms == BACKOFF_MIN_MS ? RD_LOG_WARN : RD_LOG_DEBUG,
               "redis: cannot connect to %s:%d: %s", r->host, r->port, ac->errstr);
        after_link_down(r);  /* hiredis frees the context after this callback */
        return;
    }
    rd_debug("redis: connected to %s:%d", r->host, r->port);
    set_state(r, LOADING);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    rd_redis_t *r = ac->data;
    if (status != REDIS_OK) rd_warn("redis: disconnected: %s", ac->errstr);
    after_link_down(r);
}

static void connect_now(rd_redis_t *r)
{
    redisAsyncContext *ac = redisAsyncConnect(r->host, r->port);
    if (ac == NULL || ac->err) {
        rd_warn("redis: cannot connect to %s:%d: %s", r->host, r->port,
                ac ? ac->errstr : "out of memory");
        if (ac) redisAsyncFree(ac);
        set_state(r, CONNECTING);
        after_link_down(r);
        return;
    }
    if (glue_attach(ac, r->loop) != 0) {
        rd_warn("redis: cannot watch the socket to %s:%d", r->host, r->port);
        redisAsyncFree(ac);
        set_state(r, CONNECTING);
        after_link_down(r);
        return;
    }
    ac->data = r;
    r->ac = ac;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    set_state(r, CONNECTING);
    /* hiredis buffers these until the socket is connected. */
    if (r->password && r->password[0]) {
        if (r->username && r->username[0]) {
            const char *argv[] = { "AUTH", r->username, r->password };
            size_t lens[] = { 4, strlen(r->username), strlen(r->password) };
            redisAsyncCommandArgv(ac, on_handshake_reply, "AUTH", 3, argv, lens);
        } else {
            const char *argv[] = { "AUTH", r->password };
            size_t lens[] = { 4, strlen(r->password) };
            redisAsyncCommandArgv(ac, on_handshake_reply, "AUTH", 2, argv, lens);
        }
    }
    if (r->db != 0) {
        char db[16];
        int n = snprintf(db, sizeof db, "%d", r->db);
        const char *argv[] = { "SELECT", db };
        size_t lens[] = { 6, (size_t)n };
        redisAsyncCommandArgv(ac, on_handshake_reply, "SELECT", 2, argv, lens);
    }
    /* The last step's reply makes the link READY. */
    if (r->library) {
        send_library(ac, on_handshake_reply, "READY");
    } else {
        const char *argv[] = { "PING" };
        size_t lens[] = { 4 };
        redisAsyncCommandArgv(ac, on_handshake_reply, "READY", 1, argv, lens);
    }
}

/* ---------------------------------------------------------------- commands */

static bool is_missing_function(const redisReply *x)
{
    return x->type == REDIS_REPLY_ERROR && x->str &&
           strcasestr(x->str, "Function not found") != NULL;
}

static void on_reload_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    (void)privdata;
    redisReply *x = reply;
    if (x && x->type == REDIS_REPLY_ERROR)
        rd_error("redis: reloading the library failed: %.*s", (int)x->len, x->str);
    else if (x)
        rd_warn("redis: the retryd library was missing; loaded it again");
}

static void on_command_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    pending_t *p = privdata;
    rd_redis_t *r = p->r;
    redisReply *x = reply;
    if (x && p->is_fcall && !p->resent && is_missing_function(x) && !r->closing) {
        p->resent = true;
        unlink_pending(r, p);
        send_library(ac, on_reload_reply, NULL);
        if (redisAsyncCommandArgv(ac, on_command_reply, p, p->argc, p->argv, p->lens) ==
            REDIS_OK) {
            link_pending(r, p);
            return;
        }
        x = NULL;
    } else {
        unlink_pending(r, p);
    }
    if (x) rd_histogram_observe(&r->rtt, (double)(uv_hrtime() - p->sent_ns) / 1e9);
    if (p->cb) p->cb((const rd_reply_t *)(const void *)x, x ? RD_REDIS_OK : RD_REDIS_LOST, p->arg);
    rd_free(p);
}

int rd_redis_command(rd_redis_t *r, int argc, const char **argv, const size_t *lens,
                     rd_redis_cb cb, void *arg)
{
    if (r->state != READY || r->closing || r->ac == NULL) return -1;
    size_t bytes = 0;
    for (int i = 0; i < argc; i++) bytes += lens[i];
    /* One block: the struct, the pointer and length arrays, then the bytes. */
    size_t head = sizeof(pending_t) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    pending_t *p = rd_malloc(head + bytes);
    memset(p, 0, sizeof *p);
    p->r = r;
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
    if (redisAsyncCommandArgv(r->ac, on_command_reply, p, argc, p->argv, p->lens) != REDIS_OK) {
        rd_free(p);
        return -1;
    }
    link_pending(r, p);
    r->write_pending = true;
    return 0;
}

/* ---------------------------------------------------------------- pub/sub */

typedef struct subscription {
    rd_pubsub_cb cb;
    void *arg;
} subscription_t;

/* hiredis calls this for the confirmation, every message, the unsubscribe
 * confirmation, and with NULL when the context goes away. */
static void on_pubsub_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    subscription_t *sub = privdata;
    redisReply *x = reply;
    if (x == NULL) {
        sub->cb(RD_PUBSUB_DROPPED, sub->arg);
        rd_free(sub);
        return;
    }
    if (x->type != REDIS_REPLY_ARRAY || x->elements < 1 ||
        x->element[0]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = x->element[0]->str;
    if (strcmp(kind, "message") == 0) {
        sub->cb(RD_PUBSUB_MESSAGE, sub->arg);
    } else if (strcmp(kind, "subscribe") == 0) {
        sub->cb(RD_PUBSUB_SUBSCRIBED, sub->arg);
    } else if (strcmp(kind, "unsubscribe") == 0) {
        sub->cb(RD_PUBSUB_UNSUBSCRIBED, sub->arg);
        rd_free(sub);
    }
}

int rd_redis_subscribe(rd_redis_t *r, const char *channel, size_t len, rd_pubsub_cb cb,
                       void *arg)
{
    if (r->state != READY || r->closing || r->ac == NULL || r->library) return -1;
    subscription_t *sub = rd_malloc(sizeof *sub);
    sub->cb = cb;
    sub->arg = arg;
    const char *argv[] = { "SUBSCRIBE", channel };
    size_t lens[] = { 9, len };
    if (redisAsyncCommandArgv(r->ac, on_pubsub_reply, sub, 2, argv, lens) != REDIS_OK) {
        rd_free(sub);
        return -1;
    }
    return 0;
}

int rd_redis_unsubscribe(rd_redis_t *r, const char *channel, size_t len)
{
    if (r->state != READY || r->closing || r->ac == NULL || r->library) return -1;
    const char *argv[] = { "UNSUBSCRIBE", channel };
    size_t lens[] = { 11, len };
    return redisAsyncCommandArgv(r->ac, NULL, NULL, 2, argv, lens) == REDIS_OK ? 0 : -1;
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

/* hiredis only buffers a command and waits for the socket to poll writable,
 * which costs a loop turn per round trip: Redis and retryd then take turns
 * instead of working at once. Writing at the end of every loop turn sends all
 * the commands that turn produced in one write, right away. */
static void on_flush(uv_check_t *h)
{
    rd_redis_t *r = h->data;
    if (!r->write_pending) return;
    r->write_pending = false;
    if (r->ac && (r->ac->c.flags & REDIS_CONNECTED)) redisAsyncHandleWrite(r->ac);
}

/* ---------------------------------------------------------------- watchdog */

/* Frees the context now: every pending callback runs with NULL (LOST). hiredis
 * reports the end through on_disconnect only for a link that had connected. */
static void drop_link(rd_redis_t *r)
{
    bool was_connected = (r->ac->c.flags & REDIS_CONNECTED) != 0;
    redisAsyncFree(r->ac);
    if (!was_connected) after_link_down(r);
}

static void on_watchdog(uv_timer_t *t)
{
    rd_redis_t *r = t->data;
    if (r->ac == NULL) return;
    uint64_t now = now_ms(r);
    bool late = false;
    if (r->state != READY && now - r->state_since_ms > (uint64_t)r->timeout_ms) {
        rd_warn("redis: no answer to the handshake within %d ms", r->timeout_ms);
        late = true;
    } else if (r->head && now - r->head->sent_ms > (uint64_t)r->timeout_ms) {
        rd_warn("redis: a command got no answer within %d ms; dropping the link "
                "(%s commands in flight have an unknown outcome)",
                r->timeout_ms, r->head->next ? "all" : "the");
        late = true;
    }
    if (late) drop_link(r);
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
    r->reconnect_timer.data = r->watchdog.data = r;
    r->open_handles = 3;
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
        if (r->ac == NULL) {
            after_link_down(r);
            return;
        }
    }
    if (r->ac == NULL) return;  /* already on its way down */
    if (force || !(r->ac->c.flags & REDIS_CONNECTED)) drop_link(r);
    else redisAsyncDisconnect(r->ac);
}
