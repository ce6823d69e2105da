/* faults_support.h - helpers for the fault-injection suites (test_faults_*.c):
 * private redis-server processes a test may stop, pause, kill and restart,
 * temp dirs, and a few reads of what Redis holds (build/retryd with its
 * stderr in a file is e2e_daemon_spawn_logged, in e2e_support.h).
 *
 * Like e2e_support.h, every helper reports failure by its return value and
 * never aborts (worker threads may call the read-only ones). Processes started
 * here die with the test process (PR_SET_PDEATHSIG); the test's teardown
 * still kills and reaps them and removes their dirs. Only pids started here
 * are ever signalled. */
#ifndef RETRYD_FAULTS_SUPPORT_H
#define RETRYD_FAULTS_SUPPORT_H

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sys/stat.h>

#include <hiredis/hiredis.h>

#include "e2e_support.h"

enum {
    FX_REDIS_READY_TIMEOUT_MS = 10000,   /* redis-server start to PONG */
    FX_REDIS_PORT_ATTEMPTS = 5,          /* fresh ports tried when one is taken */
    FX_MAX_EXTRA_ARGS = 16,
};

/* ------------------------------------------------------------------------ */
/* Temp dirs and files                                                      */
/* ------------------------------------------------------------------------ */

/* Creates a fresh directory under $TMPDIR (or /tmp) and writes its resolved
 * path (as CONFIG GET dir reports it) into out. Returns 0, -1. */
static inline int fx_mkdtemp(char *out, size_t cap, const char *tag)
{
    const char *base = getenv("TMPDIR");
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/retryd-%s.XXXXXX", base && *base ? base : "/tmp", tag);
    if (mkdtemp(tmpl) == NULL) return -1;
    char real[PATH_MAX];
    if (realpath(tmpl, real) == NULL) return -1;
    if (strlen(real) >= cap) return -1;
    snprintf(out, cap, "%s", real);
    return 0;
}

static inline int fx_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP) rmdir(path);
    else unlink(path);
    return 0;
}

/* Removes dir and everything under it (no-op for "" or a missing dir). */
static inline void fx_rm_rf(const char *dir)
{
    if (dir == NULL || dir[0] == '\0') return;
    nftw(dir, fx_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The whole file, NUL-terminated, malloc'd (caller frees); NULL when it
 * cannot be read. */
static inline char *fx_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (cap - len < 2048) {
            char *p = realloc(buf, cap * 2);
            if (p == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = p;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

static inline int fx_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) return -1;
    size_t n = fwrite(text, 1, strlen(text), f);
    return (fclose(f) == 0 && n == strlen(text)) ? 0 : -1;
}

/* n random lowercase hex characters from /dev/urandom into out (n + 1 bytes). */
static inline int fx_random_hex(char *out, size_t n)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    unsigned char b;
    for (size_t i = 0; i < n; i++) {
        if (read(fd, &b, 1) != 1) {
            close(fd);
            return -1;
        }
        out[i] = "0123456789abcdef"[b & 15];
    }
    out[n] = '\0';
    close(fd);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Talking to Redis                                                         */
/* ------------------------------------------------------------------------ */

/* A blocking connection with 5 s timeouts, authenticated when pass is not
 * NULL (user may be NULL: the default user). NULL on any failure. */
static inline redisContext *fx_redis_connect(int port, const char *user, const char *pass)
{
    redisContext *c = e2e_redis_connect("127.0.0.1", port, 5);
    if (c == NULL) return NULL;
    if (pass) {
        redisReply *r = user ? redisCommand(c, "AUTH %s %s", user, pass)
                             : redisCommand(c, "AUTH %s", pass);
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

/* ------------------------------------------------------------------------ */
/* Private redis-server processes                                           */
/* ------------------------------------------------------------------------ */

typedef struct fx_redis {
    pid_t pid;                    /* 0 when not running */
    int port;
    bool stopped;                 /* SIGSTOP in force */
    char dir[PATH_MAX];           /* its --dir, "" before the first start */
    const char *extra[FX_MAX_EXTRA_ARGS + 1];   /* extra flags, NULL-terminated */
} fx_redis_t;

/* Forks redis-server on s->port with s->dir and s->extra; its output goes
 * to <dir>/redis.log. Waits for PONG from that very server (CONFIG GET dir).
 * Returns 0; -1 when it exited (e.g. the port was taken) or never answered,
 * in which case nothing is left running. */
static inline int fx_redis_exec(fx_redis_t *s)
{
    char port_s[16], log[PATH_MAX + 16];
    snprintf(port_s, sizeof port_s, "%d", s->port);
    snprintf(log, sizeof log, "%s/redis.log", s->dir);
    const char *argv[12 + FX_MAX_EXTRA_ARGS];
    int argc = 0;
    argv[argc++] = "redis-server";
    argv[argc++] = "--port";
    argv[argc++] = port_s;
    argv[argc++] = "--bind";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = "--dir";
    argv[argc++] = s->dir;
    argv[argc++] = "--save";
    argv[argc++] = "";
    argv[argc++] = "--daemonize";
    argv[argc++] = "no";
    for (int i = 0; s->extra[i] && i < FX_MAX_EXTRA_ARGS; i++) argv[argc++] = s->extra[i];
    argv[argc] = NULL;

    pid_t pid = e2e_spawn(argv, log, 0644);
    if (pid < 0) return -1;
    s->pid = pid;
    s->stopped = false;
    long long deadline = e2e_mono_ms() + FX_REDIS_READY_TIMEOUT_MS;
    while (e2e_mono_ms() < deadline) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            s->pid = 0;
            return -1;
        }
        if (e2e_redis_pong(s->port, 1000)) {
            /* Make sure the server answering is ours, not a stranger's. */
            bool ours = false;
            redisContext *c = fx_redis_connect(s->port, NULL, NULL);
            redisReply *r = c ? redisCommand(c, "CONFIG GET dir") : NULL;
            if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                r->element[1]->type == REDIS_REPLY_STRING)
                ours = strcmp(r->element[1]->str, s->dir) == 0;
            if (r) freeReplyObject(r);
            if (c) redisFree(c);
            if (ours) return 0;
            break;
        }
        e2e_pause_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    s->pid = 0;
    return -1;
}

/* Starts a new private server: a fresh dir, a free port (another is tried
 * when it turns out to be taken) and the extra flags (NULL-terminated, the
 * strings must outlive s). Returns 0, -1. */
static inline int fx_redis_start(fx_redis_t *s, const char *const *extra)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; extra && extra[i] && i < FX_MAX_EXTRA_ARGS; i++) s->extra[i] = extra[i];
    if (fx_mkdtemp(s->dir, sizeof s->dir, "redis") != 0) {
        s->dir[0] = '\0';
        return -1;
    }
    for (int attempt = 0; attempt < FX_REDIS_PORT_ATTEMPTS; attempt++) {
        s->port = e2e_free_port();
        if (s->port > 0 && fx_redis_exec(s) == 0) return 0;
    }
    return -1;
}

/* Starts the server again on the same port and dir, with the same flags
 * (after fx_redis_stop). Returns 0, -1. */
static inline int fx_redis_restart(fx_redis_t *s)
{
    if (s->pid > 0 || s->dir[0] == '\0') return -1;
    return fx_redis_exec(s);
}

/* Sends sig and reaps the server within timeout_ms (then SIGKILL). Returns
 * 0 when it exited in time, -1 when it had to be killed or was not running. */
static inline int fx_redis_stop(fx_redis_t *s, int sig, int timeout_ms)
{
    if (s->pid <= 0) return -1;
    /* The signal first: a stopped server given SIGCONT first could run for
     * a moment and answer what waits in its sockets (a test that stopped it
     * to keep a command in flight then sees an answer, not a dropped link).
     * SIGKILL ends a stopped process; others are taken as it continues. */
    kill(s->pid, sig);
    if (s->stopped) kill(s->pid, SIGCONT);
    s->stopped = false;
    long long deadline = e2e_mono_ms() + timeout_ms;
    for (;;) {
        pid_t got = waitpid(s->pid, NULL, WNOHANG);
        if (got == s->pid) break;
        if (got < 0 && errno != EINTR) break;
        if (e2e_mono_ms() >= deadline) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, NULL, 0);
            s->pid = 0;
            return -1;
        }
        e2e_pause_ms(5);
    }
    s->pid = 0;
    return 0;
}

/* SIGSTOP / SIGCONT. */
static inline int fx_redis_pause(fx_redis_t *s)
{
    if (s->pid <= 0 || kill(s->pid, SIGSTOP) != 0) return -1;
    s->stopped = true;
    return 0;
}

static inline int fx_redis_resume(fx_redis_t *s)
{
    if (s->pid <= 0 || kill(s->pid, SIGCONT) != 0) return -1;
    s->stopped = false;
    return 0;
}

/* Kills and reaps the server if it runs, and removes its dir. Safe to call
 * twice and on a zeroed struct. */
static inline void fx_redis_destroy(fx_redis_t *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        if (s->stopped) kill(s->pid, SIGCONT);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    s->stopped = false;
    fx_rm_rf(s->dir);
    s->dir[0] = '\0';
}

/* ------------------------------------------------------------------------ */
/* HTTP odds and ends                                                       */
/* ------------------------------------------------------------------------ */

/* Reads one response like e2e_read_response (freeing what *r held first: it
 * must be zeroed or a response), and also copies its raw head (status line
 * and headers) into head (NUL-terminated, cut at cap - 1). */
static inline int fx_read_response_head(e2e_conn_t *c, e2e_response_t *r, char *head, size_t cap)
{
    head[0] = '\0';
    e2e_response_free(r);
    if (c->fd < 0) return -1;
    for (;;) {
        char *end = c->in_len ? memmem(c->in, c->in_len, "\r\n\r\n", 4) : NULL;
        if (end) {
            size_t n = (size_t)(end - c->in) + 4;
            if (n > cap - 1) n = cap - 1;
            memcpy(head, c->in, n);
            head[n] = '\0';
            break;
        }
        if (e2e_fill(c) <= 0) return -1;
    }
    return e2e_read_response(c, r);
}

/* The trimmed value of header name in a raw head, into out; false when absent. */
static inline bool fx_head_header(const char *head, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line && line[2] != '\r' && line[2];
         line = strstr(line + 2, "\r\n")) {
        const char *l = line + 2;
        if (strncasecmp(l, name, nlen) == 0 && l[nlen] == ':') {
            const char *v = l + nlen + 1;
            while (*v == ' ' || *v == '\t') v++;
            size_t n = strcspn(v, "\r");
            while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
            if (n > cap - 1) n = cap - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return true;
        }
    }
    return false;
}

/* Waits up to timeout_ms for the peer to close fd (EOF or reset), reading
 * and discarding whatever comes first. Returns the milliseconds it took, or
 * -1 when the connection was still open at the deadline. */
static inline long long fx_wait_closed(int fd, int timeout_ms)
{
    long long start = e2e_mono_ms(), deadline = start + timeout_ms;
    char buf[4096];
    for (;;) {
        long long left = deadline - e2e_mono_ms();
        if (left <= 0) return -1;
        struct timeval tv = { left / 1000, (left % 1000) * 1000 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK))
            return e2e_mono_ms() - start;
    }
}

/* Non-blocking: 1 when the peer has closed fd (EOF or reset), 0 when it is
 * open (any bytes waiting are read and dropped). */
static inline int fx_peer_closed(int fd)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) continue;
        if (n == 0) return 1;
        if (errno == EINTR) continue;
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : 1;
    }
}

#endif
