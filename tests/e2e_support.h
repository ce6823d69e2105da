/* e2e_support.h - helpers for the end-to-end tests: free ports, starting and
 * stopping build/retryd, a tiny blocking HTTP/1.1 client, and parsing of what
 * the daemon answers (JSON bodies, RFC 3339 timestamps).
 *
 * Every helper reports failure by its return value and never aborts, so the
 * test file decides what to assert (and helpers may run on worker threads,
 * where cmocka's asserts must not be used). Sockets have send and receive
 * timeouts: a daemon that hangs makes a call fail instead of blocking forever. */
#ifndef RETRYD_E2E_SUPPORT_H
#define RETRYD_E2E_SUPPORT_H

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "retryd/alloc.h"
#include "retryd/json.h"

enum {
    E2E_IO_TIMEOUT_MS = 10000,    /* any single send or receive */
    E2E_STOP_TIMEOUT_MS = 5000,   /* SIGTERM to exit */
};

/* ------------------------------------------------------------------------ */
/* Clocks and ports                                                         */
/* ------------------------------------------------------------------------ */

static inline long long e2e_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline long long e2e_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The pause between two polls of a condition (not a wait for a race). */
static inline void e2e_pause_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* A TCP port on 127.0.0.1 that was free a moment ago, or -1. */
static inline int e2e_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* A connected socket to 127.0.0.1:port with I/O timeouts, or -1 (errno set). */
static inline int e2e_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = { E2E_IO_TIMEOUT_MS / 1000, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* ------------------------------------------------------------------------ */
/* HTTP/1.1 client                                                          */
/* ------------------------------------------------------------------------ */

/* One keep-alive connection. Bytes read past the end of one response stay
 * in `in` for the next one (pipelining). */
typedef struct e2e_conn {
    int fd;                       /* -1 when closed */
    int port;
    char *in;
    size_t in_len, in_cap;
} e2e_conn_t;

typedef struct e2e_response {
    int status;
    char content_type[128];
    char location[1024];
    char allow[128];
    char retry_after[32];
    char connection[32];
    long long content_length;     /* -1 when the header was absent */
    char *body;                   /* NUL-terminated; body_len excludes the NUL */
    size_t body_len;
    rd_json_t *json;              /* parsed body when it is JSON, else NULL */
} e2e_response_t;

static inline int e2e_conn_open(e2e_conn_t *c, int port)
{
    memset(c, 0, sizeof *c);
    c->port = port;
    c->fd = e2e_connect(port);
    return c->fd < 0 ? -1 : 0;
}

static inline void e2e_conn_close(e2e_conn_t *c)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free(c->in);
    c->in = NULL;
    c->in_len = c->in_cap = 0;
}

static inline void e2e_response_free(e2e_response_t *r)
{
    free(r->body);
    rd_json_free(r->json);
    memset(r, 0, sizeof *r);
}

static inline int e2e_send_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The bytes of one request, malloc'd (caller frees); *len gets its size.
 * extra_headers is NULL or complete lines ending in "\r\n". A non-NULL body
 * (even empty) is sent with Content-Length and Content-Type: application/json;
 * a POST without a body says Content-Length: 0. */
static inline char *e2e_format_request(const char *method, const char *path,
                                       const char *extra_headers, const char *body,
                                       size_t body_len, size_t *len)
{
    bool has_body = body != NULL || strcmp(method, "POST") == 0;
    size_t cap = strlen(method) + strlen(path) + (extra_headers ? strlen(extra_headers) : 0) +
                 body_len + 256;
    char *out = malloc(cap);
    if (out == NULL) return NULL;
    int n = snprintf(out, cap, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s", method, path,
                     extra_headers ? extra_headers : "",
                     body ? "Content-Type: application/json\r\n" : "");
    if (has_body) n += snprintf(out + n, cap - (size_t)n, "Content-Length: %zu\r\n", body_len);
    n += snprintf(out + n, cap - (size_t)n, "\r\n");
    if (body_len) memcpy(out + n, body, body_len);
    *len = (size_t)n + body_len;
    return out;
}

static inline int e2e_send_request(e2e_conn_t *c, const char *method, const char *path,
                                   const char *extra_headers, const char *body, size_t body_len)
{
    size_t len;
    char *req = e2e_format_request(method, path, extra_headers, body, body_len, &len);
    if (req == NULL) return -1;
    int rc = e2e_send_all(c->fd, req, len);
    free(req);
    return rc;
}

/* Reads more input into c->in: 1 got bytes, 0 EOF, -1 error or timeout. */
static inline int e2e_fill(e2e_conn_t *c)
{
    if (c->in_cap - c->in_len < 16384) {
        size_t cap = c->in_cap ? c->in_cap * 2 : 65536;
        char *p = realloc(c->in, cap);
        if (p == NULL) return -1;
        c->in = p;
        c->in_cap = cap;
    }
    for (;;) {
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) return 0;
        c->in_len += (size_t)n;
        return 1;
    }
}

/* Copies a header value (trimmed) into dst when the line's name is `name`. */
static inline void e2e_header_copy(const char *line, size_t len, const char *name, char *dst,
                                   size_t cap)
{
    size_t nlen = strlen(name);
    if (len <= nlen || line[nlen] != ':' || strncasecmp(line, name, nlen) != 0) return;
    const char *v = line + nlen + 1, *end = line + len;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t')) end--;
    size_t n = (size_t)(end - v) < cap - 1 ? (size_t)(end - v) : cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* Reads one complete response. Returns 0, or -1 when the connection closed,
 * timed out, or sent something that is not an HTTP/1.1 response. The body is
 * framed by Content-Length (absent: read until EOF); 1xx/204/304 have none.
 * A response with "Connection: close" closes c afterwards. */
static inline int e2e_read_response(e2e_conn_t *c, e2e_response_t *r)
{
    memset(r, 0, sizeof *r);
    r->content_length = -1;
    if (c->fd < 0) return -1;
    char *head_end;
    for (;;) {
        head_end = c->in_len ? memmem(c->in, c->in_len, "\r\n\r\n", 4) : NULL;
        if (head_end) break;
        if (e2e_fill(c) <= 0) return -1;
    }
    size_t head_len = (size_t)(head_end - c->in) + 4;
    char *line = c->in;
    char *eol = memmem(line, head_len, "\r\n", 2);
    if (eol - line < 12 || strncmp(line, "HTTP/1.1 ", 9) != 0) return -1;
    r->status = atoi(line + 9);
    bool chunked = false;
    for (line = eol + 2; line < head_end; line = eol + 2) {
        eol = memmem(line, (size_t)(head_end + 2 - line), "\r\n", 2);
        size_t len = (size_t)(eol - line);
        char cl[32] = "", te[32] = "";
        e2e_header_copy(line, len, "Content-Type", r->content_type, sizeof r->content_type);
        e2e_header_copy(line, len, "Location", r->location, sizeof r->location);
        e2e_header_copy(line, len, "Allow", r->allow, sizeof r->allow);
        e2e_header_copy(line, len, "Retry-After", r->retry_after, sizeof r->retry_after);
        e2e_header_copy(line, len, "Connection", r->connection, sizeof r->connection);
        e2e_header_copy(line, len, "Content-Length", cl, sizeof cl);
        e2e_header_copy(line, len, "Transfer-Encoding", te, sizeof te);
        if (cl[0]) r->content_length = strtoll(cl, NULL, 10);
        if (te[0]) chunked = true;
    }
    if (chunked) return -1;   /* retryd always frames by Content-Length */

    bool no_body = r->status < 200 || r->status == 204 || r->status == 304;
    size_t need = no_body ? 0 : (size_t)(r->content_length < 0 ? 0 : r->content_length);
    bool until_eof = !no_body && r->content_length < 0;
    for (;;) {
        if (!until_eof && c->in_len - head_len >= need) break;
        int got = e2e_fill(c);
        if (got < 0 || (got == 0 && !until_eof)) return -1;
        if (got == 0) {
            need = c->in_len - head_len;
            break;
        }
    }
    r->body = malloc(need + 1);
    if (r->body == NULL) return -1;
    memcpy(r->body, c->in + head_len, need);
    r->body[need] = '\0';
    r->body_len = need;
    memmove(c->in, c->in + head_len + need, c->in_len - head_len - need);
    c->in_len -= head_len + need;

    if (need > 0 && strstr(r->content_type, "json") != NULL) {
        bool has_nul;
        r->json = rd_json_parse(r->body, r->body_len, &has_nul);
    }
    if (until_eof || strcasecmp(r->connection, "close") == 0) {
        close(c->fd);
        c->fd = -1;
    }
    return 0;
}

/* send + read on one connection. */
static inline int e2e_request(e2e_conn_t *c, const char *method, const char *path,
                              const char *extra_headers, const char *body, size_t body_len,
                              e2e_response_t *r)
{
    if (c->fd < 0 || e2e_send_request(c, method, path, extra_headers, body, body_len) != 0) {
        memset(r, 0, sizeof *r);
        return -1;
    }
    return e2e_read_response(c, r);
}

/* One request on a connection of its own; the status, or -1. */
static inline int e2e_status_once(int port, const char *method, const char *path)
{
    e2e_conn_t c;
    e2e_response_t r;
    if (e2e_conn_open(&c, port) != 0) return -1;
    int status = e2e_request(&c, method, path, NULL, NULL, 0, &r) == 0 ? r.status : -1;
    e2e_response_free(&r);
    e2e_conn_close(&c);
    return status;
}

/* True when the media type of a Content-Type value is `want` (parameters
 * such as "; charset=utf-8" are ignored). */
static inline bool e2e_media_type_is(const char *content_type, const char *want)
{
    size_t n = strcspn(content_type, ";");
    while (n > 0 && content_type[n - 1] == ' ') n--;
    return n == strlen(want) && strncasecmp(content_type, want, n) == 0;
}

/* True when the comma-separated list (an Allow header) holds token. */
static inline bool e2e_list_has(const char *list, const char *token)
{
    size_t tlen = strlen(token);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t n = strcspn(p, ", ");
        if (n == tlen && strncmp(p, token, n) == 0) return true;
        p += n;
    }
    return false;
}

/* ------------------------------------------------------------------------ */
/* The daemon                                                               */
/* ------------------------------------------------------------------------ */

typedef struct e2e_daemon {
    pid_t pid;                    /* 0 when not running */
    int port;
} e2e_daemon_t;

/* Forks and execs bin with --listen 127.0.0.1:<free port> followed by args
 * (NULL-terminated). The child dies with the test process. Returns 0, -1. */
static inline int e2e_daemon_spawn(e2e_daemon_t *d, const char *bin, const char *const *args)
{
    char listen[64];
    d->pid = 0;
    d->port = e2e_free_port();
    if (d->port < 0) return -1;
    snprintf(listen, sizeof listen, "127.0.0.1:%d", d->port);
    const char *argv[32];
    int argc = 0;
    argv[argc++] = bin;
    argv[argc++] = "--listen";
    argv[argc++] = listen;
    for (size_t i = 0; args[i] && argc < 31; i++) argv[argc++] = args[i];
    argv[argc] = NULL;

    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    d->pid = pid;
    return 0;
}

/* Polls until path answers `want` (bounded by timeout_ms). Returns 0, or -1
 * when time ran out or the daemon exited. */
static inline int e2e_daemon_wait_status(e2e_daemon_t *d, const char *path, int want,
                                         int timeout_ms)
{
    long long deadline = e2e_mono_ms() + timeout_ms;
    while (e2e_mono_ms() < deadline) {
        int wstatus;
        if (waitpid(d->pid, &wstatus, WNOHANG) == d->pid) {
            d->pid = 0;
            return -1;
        }
        if (e2e_status_once(d->port, "GET", path) == want) return 0;
        e2e_pause_ms(20);
    }
    return -1;
}

/* Sends sig (0: none, only wait) and reaps the daemon within timeout_ms.
 * Returns its exit status (0..255), 256 + signal when a signal ended it, or
 * -1 when it had to be killed with SIGKILL because it did not exit in time. */
static inline int e2e_daemon_stop(e2e_daemon_t *d, int sig, int timeout_ms)
{
    if (d->pid <= 0) return -1;
    if (sig) kill(d->pid, sig);
    long long deadline = e2e_mono_ms() + timeout_ms;
    int wstatus;
    for (;;) {
        pid_t got = waitpid(d->pid, &wstatus, WNOHANG);
        if (got == d->pid) break;
        if (got < 0 && errno != EINTR) {
            d->pid = 0;
            return -1;
        }
        if (e2e_mono_ms() >= deadline) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &wstatus, 0);
            d->pid = 0;
            return -1;
        }
        e2e_pause_ms(10);
    }
    d->pid = 0;
    if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
    return 256 + WTERMSIG(wstatus);
}

/* True while the daemon process has not exited. */
static inline bool e2e_daemon_alive(e2e_daemon_t *d)
{
    int wstatus;
    if (d->pid <= 0) return false;
    if (waitpid(d->pid, &wstatus, WNOHANG) == d->pid) {
        d->pid = 0;
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* What the daemon answers                                                  */
/* ------------------------------------------------------------------------ */

/* Parses "YYYY-MM-DDTHH:MM:SS.mmmZ" (exactly that shape, SPEC §3) into Unix
 * milliseconds. Returns 0, or -1 when s has any other shape. */
static inline int e2e_parse_time(const char *s, long long *ms)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
    if (s == NULL || strlen(s) != sizeof shape - 1) return -1;
    for (size_t i = 0; shape[i]; i++) {
        if (shape[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != shape[i]) return -1;
    }
    struct tm tm = { 0 };
    tm.tm_year = atoi(s) - 1900;
    tm.tm_mon = atoi(s + 5) - 1;
    tm.tm_mday = atoi(s + 8);
    tm.tm_hour = atoi(s + 11);
    tm.tm_min = atoi(s + 14);
    tm.tm_sec = atoi(s + 17);
    if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
        tm.tm_min > 59 || tm.tm_sec > 60)
        return -1;
    *ms = (long long)timegm(&tm) * 1000 + atoi(s + 20);
    return 0;
}

/* The JSON text of an object with one string member (escaped by the
 * project's own JSON writer), malloc'd via rd_malloc: free with rd_free. */
static inline char *e2e_json_with_string(const char *name, const char *value, size_t *len)
{
    rd_json_t *o = rd_json_new_object();
    rd_json_set_string(o, name, value);
    char *text = rd_json_print(o, len);
    rd_json_free(o);
    return text;
}

#endif
