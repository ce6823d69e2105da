/* alert_receiver.h - the webhook receiver of the alert tests (test_alerts,
 * test_cluster): an HTTP/1.1 server on a loopback port, one thread per
 * connection, that answers each POST as g_recv.mode says: 204 (RECV_OK),
 * 500 (RECV_FAIL), nothing at all (RECV_STALL: it reads the request and
 * waits until the sender gives up), or 204 after SLOW_MS (RECV_SLOW). It
 * records the bodies it answered 2xx, and which of its two listening ports
 * (port, 0; port2, 1: a second receiver, for per-queue alert URLs) each came
 * to. Its threads never call cmocka. */
#ifndef RETRYD_TEST_ALERT_RECEIVER_H
#define RETRYD_TEST_ALERT_RECEIVER_H

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "e2e_support.h"

enum { MAX_EVENTS = 512 };

/* ------------------------------------------------------------------------ */
/* The receiver                                                             */
/* ------------------------------------------------------------------------ */

/* RECV_SLOW: 2xx after SLOW_MS, so that deliveries overlap. */
typedef enum { RECV_OK, RECV_FAIL, RECV_STALL, RECV_SLOW } recv_mode_t;
enum { SLOW_MS = 200 };

static struct {
    int fd, port;
    int fd2, port2;               /* the second receiver */
    pthread_t thread;
    atomic_int mode;
    atomic_bool stop;
    atomic_int requests, failed, stalled;
    atomic_int conns;             /* connection threads still running */
    pthread_mutex_t lock;
    char *delivered[MAX_EVENTS];  /* bodies answered 2xx, in order */
    int at[MAX_EVENTS];           /* the receiver (0, 1) each came to */
    int ndelivered;
} g_recv;

static inline void recv_record(const char *body, size_t len, int which)
{
    pthread_mutex_lock(&g_recv.lock);
    if (g_recv.ndelivered < MAX_EVENTS) {
        char *copy = malloc(len + 1);
        memcpy(copy, body, len);
        copy[len] = '\0';
        g_recv.at[g_recv.ndelivered] = which;
        g_recv.delivered[g_recv.ndelivered++] = copy;
    }
    pthread_mutex_unlock(&g_recv.lock);
}

/* One connection: requests in turn (keep-alive), each answered as the mode
 * says when it has been read whole. */
static inline void *recv_conn(void *arg)
{
    int fd = (int)((intptr_t)arg >> 1), which = (int)((intptr_t)arg & 1);
    struct timeval tv = { 0, 200000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[65536];
    size_t have = 0;
    while (!atomic_load(&g_recv.stop)) {
        char *end = memmem(buf, have, "\r\n\r\n", 4);
        if (end == NULL) {
            if (have == sizeof buf) break;
            ssize_t n = read(fd, buf + have, sizeof buf - have);
            if (n == 0) break;
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
                break;
            }
            have += (size_t)n;
            continue;
        }
        size_t head = (size_t)(end - buf) + 4;
        const char *cl = strcasestr(buf, "content-length:");
        size_t body_len = cl && cl < end ? (size_t)strtoul(cl + 15, NULL, 10) : 0;
        if (head + body_len > sizeof buf) break;
        while (have < head + body_len && !atomic_load(&g_recv.stop)) {
            ssize_t n = read(fd, buf + have, sizeof buf - have);
            if (n == 0) goto out;
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
                goto out;
            }
            have += (size_t)n;
        }
        atomic_fetch_add(&g_recv.requests, 1);
        int mode = atomic_load(&g_recv.mode);
        if (mode == RECV_STALL) {
            atomic_fetch_add(&g_recv.stalled, 1);
            /* Never answered: the sender's timeout (or its death) ends it. */
            while (!atomic_load(&g_recv.stop) && read(fd, buf, sizeof buf) != 0) {
                if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
            }
            goto out;
        }
        const char *answer = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n";
        if (mode == RECV_SLOW) e2e_pause_ms(SLOW_MS);
        if (mode == RECV_OK || mode == RECV_SLOW) {
            recv_record(buf + head, body_len, which);
            answer = "HTTP/1.1 204 No Content\r\n\r\n";
        } else {
            atomic_fetch_add(&g_recv.failed, 1);
        }
        if (e2e_send_all(fd, answer, strlen(answer)) != 0) break;
        memmove(buf, buf + head + body_len, have - head - body_len);
        have -= head + body_len;
    }
out:
    close(fd);
    atomic_fetch_sub(&g_recv.conns, 1);
    return NULL;
}

static inline void *recv_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_recv.stop)) {
        struct pollfd p[2] = { { g_recv.fd, POLLIN, 0 }, { g_recv.fd2, POLLIN, 0 } };
        if (poll(p, 2, 100) <= 0) continue;
        for (int which = 0; which < 2; which++) {
            if (!(p[which].revents & POLLIN)) continue;
            int fd = accept(p[which].fd, NULL, NULL);
            if (fd < 0) continue;
            pthread_t t;
            atomic_fetch_add(&g_recv.conns, 1);
            if (pthread_create(&t, NULL, recv_conn, (void *)(((intptr_t)fd << 1) | which)) == 0) {
                pthread_detach(t);
            } else {
                atomic_fetch_sub(&g_recv.conns, 1);
                close(fd);
            }
        }
    }
    return NULL;
}

/* A listening socket on a free loopback port: its fd, the port in *port. */
static inline int recv_listen(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

static inline int recv_start(void)
{
    pthread_mutex_init(&g_recv.lock, NULL);
    g_recv.fd = recv_listen(&g_recv.port);
    g_recv.fd2 = recv_listen(&g_recv.port2);
    if (g_recv.fd < 0 || g_recv.fd2 < 0) return -1;
    return pthread_create(&g_recv.thread, NULL, recv_main, NULL);
}

static inline void recv_stop(void)
{
    atomic_store(&g_recv.stop, true);
    pthread_join(g_recv.thread, NULL);
    close(g_recv.fd);
    close(g_recv.fd2);
    /* Connection threads see the flag within their 200 ms read timeout (or
     * after a SLOW_MS answer); the bodies are freed once none is left. */
    long long deadline = e2e_mono_ms() + 5000;
    while (atomic_load(&g_recv.conns) > 0 && e2e_mono_ms() < deadline) e2e_pause_ms(10);
    if (atomic_load(&g_recv.conns) > 0) {
        fprintf(stderr, "alert receiver: %d connection threads still running after 5 s\n",
                atomic_load(&g_recv.conns));
        return;   /* they may still record: the bodies are left to the exit */
    }
    for (int i = 0; i < g_recv.ndelivered; i++) free(g_recv.delivered[i]);
}

static inline void recv_reset(recv_mode_t mode)
{
    pthread_mutex_lock(&g_recv.lock);
    for (int i = 0; i < g_recv.ndelivered; i++) free(g_recv.delivered[i]);
    g_recv.ndelivered = 0;
    pthread_mutex_unlock(&g_recv.lock);
    atomic_store(&g_recv.requests, 0);
    atomic_store(&g_recv.failed, 0);
    atomic_store(&g_recv.stalled, 0);
    atomic_store(&g_recv.mode, mode);
}

/* How many delivered bodies came to receiver which (0, 1; -1: either) and
 * name queue q (and, id > 0, message id). */
static inline int recv_count_at(int which, const char *q, long long id)
{
    size_t cap = strlen(q) + 16;
    char *want_q = malloc(cap), want_id[48];
    snprintf(want_q, cap, "\"queue\":\"%s\"", q);
    snprintf(want_id, sizeof want_id, "\"id\":%lld,", id);
    int n = 0;
    pthread_mutex_lock(&g_recv.lock);
    for (int i = 0; i < g_recv.ndelivered; i++)
        if ((which < 0 || g_recv.at[i] == which) && strstr(g_recv.delivered[i], want_q) &&
            (id <= 0 || strstr(g_recv.delivered[i], want_id)))
            n++;
    pthread_mutex_unlock(&g_recv.lock);
    free(want_q);
    return n;
}

static inline int recv_count(const char *q, long long id)
{
    return recv_count_at(-1, q, id);
}

/* Polls until cond() holds (bounded); fails the test with what when not. */
#define WAIT_FOR(cond, timeout_ms, ...)                                       \
    do {                                                                      \
        long long wait_deadline_ = e2e_mono_ms() + (timeout_ms);              \
        while (!(cond) && e2e_mono_ms() < wait_deadline_) e2e_pause_ms(20);   \
        if (!(cond)) fail_msg(__VA_ARGS__);                                   \
    } while (0)

#endif
