/* unit_support.h - helpers of the in-process suites (test_store, test_redis,
 * test_waiters, test_promoter, test_alerts_unit): they drive the real
 * modules on a real libuv loop, against the redis-server of scripts/test.sh
 * (RETRYD_TEST_REDIS_PORT), a private redis-server (faults_support.h) or a
 * fake RESP server on a thread of its own (below), for the replies and link
 * faults a real Redis never gives on cue.
 *
 * Waiting is always on a condition with a bounded deadline: ut_run_until
 * turns the loop until cond holds or timeout_ms passed, and never sleeps.
 * cond is evaluated once per turn (it may itself make a call and wait). */
#ifndef RETRYD_UNIT_SUPPORT_H
#define RETRYD_UNIT_SUPPORT_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "faults_support.h"
#include "retryd/backend.h"
#include "retryd/log.h"
#include "retryd/redis.h"
#include "retryd/store.h"

extern const char rd_lua_library[];

/* ------------------------------------------------------------------------ */
/* The loop                                                                 */
/* ------------------------------------------------------------------------ */

/* The condition is looked at after every loop turn; a 5 ms wake-up makes
 * sure a turn ends even when the condition changes outside the loop (the
 * fake server's thread, a redis-server process). */
static inline void ut_on_wake(uv_timer_t *t)
{
    (void)t;
}

static inline void ut_wake_closed(uv_handle_t *h)
{
    (void)h;
}

#define ut_run_until(loop, cond, timeout_ms)                                        \
    ({                                                                              \
        uv_timer_t ut_wake_;                                                        \
        uv_timer_init((loop), &ut_wake_);                                           \
        uv_timer_start(&ut_wake_, ut_on_wake, 5, 5);                                \
        long long ut_deadline_ = e2e_mono_ms() + (timeout_ms);                      \
        bool ut_held_;                                                              \
        while (!(ut_held_ = (cond)) && e2e_mono_ms() < ut_deadline_)                \
            uv_run((loop), UV_RUN_ONCE);                                            \
        uv_close((uv_handle_t *)&ut_wake_, ut_wake_closed);                         \
        uv_run((loop), UV_RUN_NOWAIT);                                              \
        ut_held_;                                                                   \
    })

/* Turns the loop for ms (a measurement window, not a wait for a condition). */
static inline void ut_run_for(uv_loop_t *loop, int ms)
{
    (void)ut_run_until(loop, false, ms);
}

/* Every handle closed: the loop closes (a leaked handle fails the test). */
static inline void ut_loop_close(uv_loop_t *loop)
{
    for (int i = 0; i < 100 && uv_loop_alive(loop); i++) uv_run(loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(loop), 0);
}

static inline int ut_test_redis_port(void)
{
    const char *p = getenv("RETRYD_TEST_REDIS_PORT");
    return p && *p ? atoi(p) : 0;
}

/* A store on its own backend link, the way server.c makes them. */
typedef struct ut_store {
    rd_backend_t *backend;
    rd_store_t *store;
    bool closed;
} ut_store_t;

static inline void ut_on_backend_closed(void *arg)
{
    ((ut_store_t *)arg)->closed = true;
}

static inline void ut_store_open(ut_store_t *s, uv_loop_t *loop, int port, int timeout_ms,
                                 const char *prefix)
{
    memset(s, 0, sizeof *s);
    rd_redis_options_t ro = {
        .host = "127.0.0.1", .port = port, .timeout_ms = timeout_ms, .library = rd_lua_library,
    };
    s->backend = rd_backend_start(loop, &ro, NULL);
    assert_non_null(s->backend);
    s->store = rd_store_new(loop, s->backend, prefix);
}

static inline void ut_store_close(ut_store_t *s, uv_loop_t *loop)
{
    rd_backend_close(s->backend, true, ut_on_backend_closed, s);
    assert_true(ut_run_until(loop, s->closed, 5000));
    rd_store_free(s->store);
}

/* A queue name of its own per test, so that suites never see each other's. */
static inline rd_store_queue_t ut_queue(char *buf, size_t cap, const char *tag)
{
    e2e_queue_name(buf, cap, tag);
    rd_store_queue_t q = { .name = buf, .len = strlen(buf) };
    return q;
}

/* ------------------------------------------------------------------------ */
/* A fake RESP server                                                       */
/* ------------------------------------------------------------------------ */

/* One listening loopback socket served by one thread, one connection at a
 * time. It reads whole RESP commands and answers each by g_fake's rules:
 * the handshake (FUNCTION LOAD answers "retryd", PING +PONG); every other
 * command (FCALL and the rest) as `mode` says. Only the thread writes its
 * counters; tests read them atomically. */
typedef enum {
    FAKE_ANSWER,          /* answer with `reply`, raw RESP bytes */
    FAKE_SILENT,          /* read it, never answer (the per-command deadline) */
    FAKE_DROP,            /* close the connection on it (the link drops mid-call) */
    FAKE_REFUSE,          /* close every connection at once, before the handshake */
} fake_mode_t;

static struct {
    int fd, port;
    pthread_t thread;
    atomic_bool stop;
    atomic_int mode;
    char reply[1024];             /* FAKE_ANSWER's bytes; set before the command is sent */
    atomic_int accepts;           /* connections accepted */
    atomic_int commands;          /* commands seen past the handshake */
    long long accept_ms[64];      /* e2e_mono_ms of each accept (the first 64) */
    char last[64];                /* the first arguments of the last command, space-separated */
    pthread_mutex_t lock;
} g_fake;

/* Reads one RESP array of bulk strings from fd into buf/have; returns the
 * number of arguments (their first two joined into out), 0 when the bytes
 * are not whole yet, -1 on a malformed command. */
static inline int fake_parse(char *buf, size_t *have, char *out, size_t out_cap)
{
    char *end = buf + *have, *p = buf;
    if (*have == 0) return 0;
    if (*p != '*') return -1;
    char *nl = memmem(p, (size_t)(end - p), "\r\n", 2);
    if (nl == NULL) return 0;
    long n = strtol(p + 1, NULL, 10);
    p = nl + 2;
    out[0] = '\0';
    for (long i = 0; i < n; i++) {
        if (p >= end) return 0;
        if (*p != '$') return -1;
        nl = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (nl == NULL) return 0;
        long len = strtol(p + 1, NULL, 10);
        p = nl + 2;
        if (end - p < len + 2) return 0;
        if (i < 2) {
            size_t used = strlen(out);
            snprintf(out + used, out_cap - used, "%s%.*s", i ? " " : "",
                     (int)(len > 40 ? 40 : len), p);
        }
        p += len + 2;
    }
    size_t consumed = (size_t)(p - buf);
    memmove(buf, p, *have - consumed);
    *have -= consumed;
    return (int)n;
}

static inline void *fake_main(void *arg)
{
    (void)arg;
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    while (!atomic_load(&g_fake.stop)) {
        struct pollfd lp = { g_fake.fd, POLLIN, 0 };
        if (poll(&lp, 1, 20) <= 0) continue;
        int c = accept(g_fake.fd, NULL, NULL);
        if (c < 0) continue;
        int k = atomic_fetch_add(&g_fake.accepts, 1);
        if (k < 64) g_fake.accept_ms[k] = e2e_mono_ms();
        if (atomic_load(&g_fake.mode) == FAKE_REFUSE) {
            close(c);
            continue;
        }
        size_t have = 0;
        bool open_ = true;
        while (open_ && !atomic_load(&g_fake.stop)) {
            char first[64], reply[sizeof g_fake.reply];
            int n;
            while ((n = fake_parse(buf, &have, first, sizeof first)) > 0) {
                const char *answer = NULL;
                if (strncasecmp(first, "FUNCTION", 8) == 0) {
                    answer = "$6\r\nretryd\r\n";
                } else if (strcasecmp(first, "PING") == 0) {
                    answer = "+PONG\r\n";
                } else {
                    pthread_mutex_lock(&g_fake.lock);
                    snprintf(g_fake.last, sizeof g_fake.last, "%s", first);
                    memcpy(reply, g_fake.reply, sizeof reply);
                    pthread_mutex_unlock(&g_fake.lock);
                    atomic_fetch_add(&g_fake.commands, 1);
                    int mode = atomic_load(&g_fake.mode);
                    if (mode == FAKE_ANSWER) answer = reply;
                    else if (mode == FAKE_DROP || mode == FAKE_REFUSE) open_ = false;
                }
                if (!open_) break;
                if (answer && e2e_send_all(c, answer, strlen(answer)) != 0) open_ = false;
            }
            if (n < 0 || !open_) break;
            struct pollfd cp = { c, POLLIN, 0 };
            if (poll(&cp, 1, 20) <= 0) continue;
            if (have == cap) break;
            ssize_t got = read(c, buf + have, cap - have);
            if (got <= 0) break;
            have += (size_t)got;
        }
        close(c);
    }
    free(buf);
    return NULL;
}

static inline void fake_start(fake_mode_t mode, const char *reply)
{
    memset(&g_fake, 0, sizeof g_fake);
    pthread_mutex_init(&g_fake.lock, NULL);
    atomic_store(&g_fake.mode, mode);
    snprintf(g_fake.reply, sizeof g_fake.reply, "%s", reply ? reply : "");
    g_fake.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(g_fake.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    assert_int_equal(bind(g_fake.fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(g_fake.fd, 16), 0);
    assert_int_equal(getsockname(g_fake.fd, (struct sockaddr *)&a, &len), 0);
    g_fake.port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&g_fake.thread, NULL, fake_main, NULL), 0);
}

/* The reply to the next commands (raw RESP); only between commands. */
static inline void fake_answer(const char *reply)
{
    pthread_mutex_lock(&g_fake.lock);
    snprintf(g_fake.reply, sizeof g_fake.reply, "%s", reply);
    pthread_mutex_unlock(&g_fake.lock);
    atomic_store(&g_fake.mode, FAKE_ANSWER);
}

static inline void fake_stop(void)
{
    atomic_store(&g_fake.stop, true);
    pthread_join(g_fake.thread, NULL);
    close(g_fake.fd);
    pthread_mutex_destroy(&g_fake.lock);
}

#endif
