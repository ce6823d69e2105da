/* e2e_support.h - helpers for the end-to-end tests: free ports, starting and
 * stopping build/retryd, a tiny blocking HTTP/1.1 client, parsing of what
 * the daemon answers (JSON bodies, RFC 3339 timestamps), and reads of Redis.
 *
 * Every helper above the "Assertions" section reports failure by its return
 * value and never aborts, so the test file decides what to assert, and those
 * helpers may run on worker threads, where cmocka's asserts must not be used
 * (except the "Small strings" ones: their static buffers and counters are for
 * the main thread only). The "Assertions" section, compiled only when
 * cmocka.h was included first, holds the main-thread helpers the suites
 * share: they fail the running test with a message. Sockets have send and
 * receive timeouts: a daemon that hangs makes a call fail instead of blocking
 * forever. */
#ifndef RETRYD_E2E_SUPPORT_H
#define RETRYD_E2E_SUPPORT_H

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "retryd/alloc.h"
#include "retryd/json.h"
#include "retryd/keys.h"

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

/* Monotonic microseconds (wake-ups and round trips are well under a ms locally). */
static inline long long e2e_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
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

/* qsort comparator for long long values, ascending. */
static inline int e2e_cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
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
/* Small strings (main thread only: rotating static buffers)                */
/* ------------------------------------------------------------------------ */

/* printf into one of 16 rotating buffers: valid for the next 15 calls, so a
 * string kept across a loop of calls is copied into a local array. */
static inline const char *e2e_fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static inline const char *e2e_fmt(const char *f, ...)
{
    static char ring[16][2048];
    static unsigned next;
    char *s = ring[next++ % 16];
    va_list ap;
    va_start(ap, f);
    vsnprintf(s, sizeof ring[0], f, ap);
    va_end(ap);
    return s;
}

/* s with every byte but unreserved ones percent-encoded (a path segment or
 * a query value), in one of 4 rotating buffers. */
static inline const char *e2e_url_encode(const char *s)
{
    static char ring[4][1024];
    static unsigned next;
    char *out = ring[next++ % 4];
    size_t n = 0;
    for (; *s && n + 4 < sizeof ring[0]; s++) {
        unsigned char c = (unsigned char)*s;
        if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') out[n++] = (char)c;
        else n += (size_t)snprintf(out + n, 4, "%%%02X", c);
    }
    out[n] = '\0';
    return out;
}

/* "<tag>-<n>" into out: a queue name no other test of the suite uses (the
 * suite's key prefix is already per run). */
static inline void e2e_queue_name(char *out, size_t cap, const char *tag)
{
    static unsigned serial;
    snprintf(out, cap, "%s-%u", tag, ++serial);
}

/* "redis://127.0.0.1:<port>" (an e2e_fmt buffer). */
static inline const char *e2e_redis_url(int port)
{
    return e2e_fmt("redis://127.0.0.1:%d", port);
}

/* ------------------------------------------------------------------------ */
/* HTTP/1.1 client                                                          */
/* ------------------------------------------------------------------------ */

enum { E2E_SENT_MAX = 4, E2E_SENT_BYTES = 320 };

/* One keep-alive connection. Bytes read past the end of one response stay
 * in `in` for the next one (pipelining). `sent` holds "METHOD path" of the
 * requests e2e_send_request sent whose response is not read yet, oldest
 * first (for the exchange log, below; "" when the line did not fit). */
typedef struct e2e_conn {
    int fd;                       /* -1 when closed */
    int port;
    char *in;
    size_t in_len, in_cap;
    char sent[E2E_SENT_MAX][E2E_SENT_BYTES];
    unsigned sent_first, sent_count;
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
    c->sent_first = c->sent_count = 0;
}

/* ------------------------------------------------------------------------ */
/* Exchange log: when RETRYD_TEST_EXCHANGES names a file, every response    */
/* read for a request sent by e2e_send_request is appended to it as one     */
/* JSON line {suite, method, path, status, content_type, body} (body only   */
/* for JSON media types), which tests/openapi_check.sh validates against    */
/* docs/openapi.json after the suites. Requests written with e2e_send_all   */
/* (the raw protocol tests) are not logged.                                 */
/* ------------------------------------------------------------------------ */

static inline void e2e_sent_push(e2e_conn_t *c, const char *method, const char *path)
{
    if (c->sent_count == E2E_SENT_MAX) {  /* a response never read: forget the oldest */
        c->sent_first = (c->sent_first + 1) % E2E_SENT_MAX;
        c->sent_count--;
    }
    char *slot = c->sent[(c->sent_first + c->sent_count) % E2E_SENT_MAX];
    int n = snprintf(slot, E2E_SENT_BYTES, "%s %s", method, path);
    if (n < 0 || n >= E2E_SENT_BYTES) slot[0] = '\0';
    c->sent_count++;
}

/* Appends s[0..len) as a JSON string to out (bytes >= 0x80 as they are). */
static inline size_t e2e_json_escape(char *out, const char *s, size_t len)
{
    size_t n = 0;
    out[n++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            out[n++] = '\\';
            out[n++] = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            n += (size_t)sprintf(out + n, "\\u%04x", ch);
        } else {
            out[n++] = (char)ch;
        }
    }
    out[n++] = '"';
    return n;
}

static inline void e2e_log_exchange(const char *sent, int status, const char *content_type,
                                    const char *body, size_t body_len)
{
    const char *file = getenv("RETRYD_TEST_EXCHANGES");
    if (file == NULL || file[0] == '\0' || sent[0] == '\0') return;
    const char *space = strchr(sent, ' ');
    if (space == NULL) return;
    bool json = strstr(content_type, "json") != NULL;
    size_t cap = 6 * (strlen(sent) + strlen(content_type) + (json ? body_len : 0)) + 256;
    char *line = malloc(cap);
    if (line == NULL) return;
    extern char *program_invocation_short_name;
    size_t n = (size_t)snprintf(line, cap, "{\"suite\":\"%s\",\"method\":",
                                program_invocation_short_name);
    n += e2e_json_escape(line + n, sent, (size_t)(space - sent));
    n += (size_t)snprintf(line + n, cap - n, ",\"path\":");
    n += e2e_json_escape(line + n, space + 1, strlen(space + 1));
    n += (size_t)snprintf(line + n, cap - n, ",\"status\":%d,\"content_type\":", status);
    n += e2e_json_escape(line + n, content_type, strlen(content_type));
    if (json) {
        n += (size_t)snprintf(line + n, cap - n, ",\"body\":");
        n += e2e_json_escape(line + n, body ? body : "", body ? body_len : 0);
    }
    n += (size_t)snprintf(line + n, cap - n, "}\n");
    int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        /* one write per line: O_APPEND keeps lines of concurrent writers whole */
        ssize_t w = write(fd, line, n);
        (void)w;
        close(fd);
    }
    free(line);
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
    if (rc == 0) e2e_sent_push(c, method, path);
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
    if (r->status >= 200 && c->sent_count > 0) {
        e2e_log_exchange(c->sent[c->sent_first], r->status, r->content_type, r->body,
                         r->body_len);
        c->sent_first = (c->sent_first + 1) % E2E_SENT_MAX;
        c->sent_count--;
    }

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

/* One request on *c (freeing what *r held first: it must be zeroed or a
 * response), reopening c to port when the server had closed it; closes c
 * when no complete response came. Returns 0, or -1 when none came. */
static inline int e2e_try_request(e2e_conn_t *c, int port, e2e_response_t *r, const char *method,
                                  const char *path, const char *body, size_t body_len)
{
    e2e_response_free(r);
    if (c->fd < 0 && e2e_conn_open(c, port) != 0) return -1;
    if (e2e_request(c, method, path, NULL, body, body_len, r) != 0) {
        e2e_conn_close(c);
        return -1;
    }
    return 0;
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

/* Forks and execs argv[0] (searched in PATH when it has no '/') with argv.
 * The child dies with the test process. With a log_path, its stdout and
 * stderr are appended to that file (created with mode) and its stdin is
 * /dev/null; without, it shares the test's. Returns the pid, or -1. */
static inline pid_t e2e_spawn(const char *const *argv, const char *log_path, mode_t mode)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (log_path) {
            int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, mode);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
            int in = open("/dev/null", O_RDONLY);
            if (in >= 0) dup2(in, 0);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Forks and execs bin with --listen 127.0.0.1:<free port> followed by args
 * (NULL-terminated); wrapper (NULL, or a NULL-terminated argv such as
 * {"valgrind", ..., NULL}) runs in front of bin, and log_path (NULL: none)
 * gets its stdout and stderr (see e2e_spawn). Returns 0, -1. */
static inline int e2e_daemon_spawn_logged(e2e_daemon_t *d, const char *const *wrapper,
                                          const char *bin, const char *const *args,
                                          const char *log_path)
{
    char listen[64];
    d->pid = 0;
    d->port = e2e_free_port();
    if (d->port < 0) return -1;
    snprintf(listen, sizeof listen, "127.0.0.1:%d", d->port);
    const char *argv[64];
    int argc = 0;
    for (size_t i = 0; wrapper && wrapper[i] && argc < 30; i++) argv[argc++] = wrapper[i];
    argv[argc++] = bin;
    argv[argc++] = "--listen";
    argv[argc++] = listen;
    for (size_t i = 0; args[i] && argc < 63; i++) argv[argc++] = args[i];
    argv[argc] = NULL;
    pid_t pid = e2e_spawn(argv, log_path, 0600);
    if (pid < 0) return -1;
    d->pid = pid;
    return 0;
}

/* e2e_daemon_spawn_logged without wrapper or log: the child shares the
 * test's stdout and stderr. Returns 0, -1. */
static inline int e2e_daemon_spawn(e2e_daemon_t *d, const char *bin, const char *const *args)
{
    return e2e_daemon_spawn_logged(d, NULL, bin, args, NULL);
}

/* True when the daemon has exited: reaps it (pid becomes 0) and stores its
 * wait status in *wstatus. False while it runs, or when none was started. */
static inline bool e2e_daemon_exited(e2e_daemon_t *d, int *wstatus)
{
    if (d->pid <= 0) return false;
    if (waitpid(d->pid, wstatus, WNOHANG) != d->pid) return false;
    d->pid = 0;
    return true;
}

/* Polls until path answers `want` (bounded by timeout_ms). Returns 0, or -1
 * when time ran out or the daemon exited. */
static inline int e2e_daemon_wait_status(e2e_daemon_t *d, const char *path, int want,
                                         int timeout_ms)
{
    long long deadline = e2e_mono_ms() + timeout_ms;
    while (e2e_mono_ms() < deadline) {
        int wstatus;
        if (e2e_daemon_exited(d, &wstatus)) return -1;
        if (e2e_status_once(d->port, "GET", path) == want) return 0;
        e2e_pause_ms(20);
    }
    return -1;
}

/* Waits for /healthz 200 when want_health, then for /readyz 200 when
 * want_ready, each bounded by timeout_ms. Returns 0, or -1 (see
 * e2e_daemon_wait_status). */
static inline int e2e_daemon_wait_up(e2e_daemon_t *d, bool want_health, bool want_ready,
                                     int timeout_ms)
{
    if (want_health && e2e_daemon_wait_status(d, "/healthz", 200, timeout_ms) != 0) return -1;
    if (want_ready && e2e_daemon_wait_status(d, "/readyz", 200, timeout_ms) != 0) return -1;
    return 0;
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

/* A group teardown's verdict on the e2e_daemon_stop results of its two
 * daemons A and B after SIGTERM: 0 when both exited 0; else prints
 * "<suite>: after SIGTERM: A <sa>, B <sb> (...)" to stderr and returns -1. */
static inline int e2e_pair_stopped(const char *suite, int sa, int sb)
{
    if (sa != 0 || sb != 0) {
        fprintf(stderr, "%s: after SIGTERM: A %d, B %d (want 0 and 0; -1 = killed)\n", suite,
                sa, sb);
        return -1;
    }
    return 0;
}

/* True while the daemon process has not exited. */
static inline bool e2e_daemon_alive(e2e_daemon_t *d)
{
    int wstatus;
    if (d->pid <= 0) return false;
    return !e2e_daemon_exited(d, &wstatus);
}

/* Spawns bin with args (e2e_daemon_spawn) and waits for it (e2e_daemon_wait_up).
 * When it does not come up, prints "<suite>: retryd on port N did not become
 * ready" to stderr and kills it. Returns 0, -1. */
static inline int e2e_daemon_start(e2e_daemon_t *d, const char *bin, const char *const *args,
                                   bool want_health, bool want_ready, int timeout_ms,
                                   const char *suite)
{
    if (e2e_daemon_spawn(d, bin, args) != 0) return -1;
    if (e2e_daemon_wait_up(d, want_health, want_ready, timeout_ms) != 0) {
        fprintf(stderr, "%s: retryd on port %d did not become ready\n", suite, d->port);
        e2e_daemon_stop(d, SIGKILL, E2E_STOP_TIMEOUT_MS);
        return -1;
    }
    return 0;
}

/* The flags the suites start retryd with; argv points into the struct. */
typedef struct e2e_flags {
    char redis[1024], prefix[128], tick[16];
    const char *argv[40];
} e2e_flags_t;

/* Fills f: <redis_flag> <redis> --prefix <prefix> --tick-ms <tick_ms>
 * --log-level <level>, then the NULL-terminated extra flags in ap (later
 * flags override earlier ones). Copies the strings it is given; returns
 * f->argv (NULL-terminated). */
static inline const char *const *e2e_flags_v(e2e_flags_t *f, const char *redis_flag,
                                             const char *redis, const char *prefix, int tick_ms,
                                             const char *level, va_list ap)
{
    snprintf(f->redis, sizeof f->redis, "%s", redis);
    snprintf(f->prefix, sizeof f->prefix, "%s", prefix);
    snprintf(f->tick, sizeof f->tick, "%d", tick_ms);
    const char *fixed[] = { redis_flag, f->redis, "--prefix", f->prefix, "--tick-ms", f->tick,
                            "--log-level", level };
    size_t n = 0;
    for (; n < sizeof fixed / sizeof fixed[0]; n++) f->argv[n] = fixed[n];
    for (const char *a = va_arg(ap, const char *); a && n < 39; a = va_arg(ap, const char *))
        f->argv[n++] = a;
    f->argv[n] = NULL;
    return f->argv;
}

/* e2e_flags_v with the extra flags as arguments (NULL-terminated). */
static inline const char *const *e2e_flags(e2e_flags_t *f, const char *redis_flag,
                                           const char *redis, const char *prefix, int tick_ms,
                                           const char *level, ...)
{
    va_list ap;
    va_start(ap, level);
    e2e_flags_v(f, redis_flag, redis, prefix, tick_ms, level, ap);
    va_end(ap);
    return f->argv;
}

/* ------------------------------------------------------------------------ */
/* What the daemon answers                                                  */
/* ------------------------------------------------------------------------ */

/* Parses "YYYY-MM-DDTHH:MM:SS.mmmZ" (exactly that shape, docs/reference.md "Messages") into Unix
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

/* ------------------------------------------------------------------------ */
/* Redis                                                                    */
/* ------------------------------------------------------------------------ */

/* A blocking connection to host:port with timeout_s for connecting and for
 * every command, or NULL when it cannot be made. */
static inline redisContext *e2e_redis_connect(const char *host, int port, int timeout_s)
{
    struct timeval tv = { timeout_s, 0 };
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (c == NULL) return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* True when a server on 127.0.0.1:port answers PING with PONG within
 * timeout_ms (a server that is loading its AOF answers -LOADING: not yet). */
static inline bool e2e_redis_pong(int port, int timeout_ms)
{
    struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL) return false;
    bool up = false;
    if (!c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        up = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
        if (r) freeReplyObject(r);
    }
    redisFree(c);
    return up;
}

/* For a suite's group setup: RETRYD_BIN into *bin, RETRYD_TEST_REDIS_PORT
 * into *redis_port and a connection to that Redis (timeout_s, see
 * e2e_redis_connect) into *redis. When one is missing it prints why to
 * stderr ("<suite>: ...") and returns -1; else 0. */
static inline int e2e_suite_env(const char *suite, int timeout_s, const char **bin,
                                int *redis_port, redisContext **redis)
{
    const char *port = getenv("RETRYD_TEST_REDIS_PORT");
    *bin = getenv("RETRYD_BIN");
    if (port == NULL || *bin == NULL) {
        fprintf(stderr, "%s: RETRYD_TEST_REDIS_PORT and RETRYD_BIN must be set\n", suite);
        return -1;
    }
    *redis_port = atoi(port);
    *redis = e2e_redis_connect("127.0.0.1", *redis_port, timeout_s);
    if (*redis == NULL) {
        fprintf(stderr, "%s: cannot connect to Redis on port %d\n", suite, *redis_port);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Assertions (cmocka, main thread only)                                    */
/* ------------------------------------------------------------------------ */

#ifdef fail_msg

/* The member name of object o; fails the test when it is missing. */
static inline rd_json_t *e2e_jget(const rd_json_t *o, const char *name)
{
    rd_json_t *v = rd_json_get(o, name);
    if (v == NULL) fail_msg("member \"%s\" is missing", name);
    return v;
}

/* The string member name of o; fails the test when it is not a string. */
static inline const char *e2e_jstr(const rd_json_t *o, const char *name)
{
    const char *s = rd_json_string(e2e_jget(o, name));
    if (s == NULL) fail_msg("member \"%s\" is not a string", name);
    return s;
}

/* The integer member name of o; fails the test when it is not an integer. */
static inline long long e2e_jint(const rd_json_t *o, const char *name)
{
    long long n;
    if (!rd_json_integer(e2e_jget(o, name), &n)) fail_msg("member \"%s\" is not an integer", name);
    return n;
}

/* Fails the test unless member name of o is null. */
static inline void e2e_jnull(const rd_json_t *o, const char *name)
{
    if (!rd_json_is_null(e2e_jget(o, name))) fail_msg("member \"%s\" is not null", name);
}

/* A timestamp member in the shape of docs/reference.md "Messages", as Unix milliseconds. */
static inline long long e2e_jtime(const rd_json_t *o, const char *name)
{
    long long ms = 0;
    const char *s = e2e_jstr(o, name);
    if (e2e_parse_time(s, &ms) != 0) fail_msg("%s \"%s\" is not YYYY-MM-DDTHH:MM:SS.mmmZ", name, s);
    return ms;
}

/* Asserts status and application/json; returns the body object. */
static inline rd_json_t *e2e_expect_json(const e2e_response_t *r, int status)
{
    if (r->status != status) fail_msg("expected %d, got %d: %s", status, r->status, r->body);
    if (!e2e_media_type_is(r->content_type, "application/json"))
        fail_msg("Content-Type \"%s\", expected application/json", r->content_type);
    if (r->json == NULL || !rd_json_is_object(r->json)) fail_msg("body is not a JSON object");
    return r->json;
}

/* Asserts an RFC 9457 problem's status, media type and type slug (only
 * those); returns the problem object. */
static inline rd_json_t *e2e_expect_problem_type(const e2e_response_t *r, int status,
                                                 const char *slug)
{
    if (r->status != status)
        fail_msg("expected %d %s, got %d: %s", status, slug, r->status, r->body);
    if (!e2e_media_type_is(r->content_type, "application/problem+json"))
        fail_msg("Content-Type \"%s\", expected application/problem+json", r->content_type);
    if (r->json == NULL || !rd_json_is_object(r->json)) fail_msg("problem is not a JSON object");
    assert_string_equal(e2e_jstr(r->json, "type"), e2e_fmt("/problems/%s", slug));
    return r->json;
}

/* Asserts an RFC 9457 problem: status, media type, type, title, detail and
 * instance (the request path without its query, unless instance is NULL). */
static inline rd_json_t *e2e_expect_problem(const e2e_response_t *r, int status, const char *slug,
                                            const char *instance)
{
    e2e_expect_problem_type(r, status, slug);
    assert_true(e2e_jstr(r->json, "title")[0] != '\0');
    assert_int_equal(e2e_jint(r->json, "status"), status);
    assert_true(e2e_jstr(r->json, "detail")[0] != '\0');
    if (instance) assert_string_equal(e2e_jstr(r->json, "instance"), instance);
    return r->json;
}

/* The errors of problem p (from r) are an array of at least one entry, one
 * of which names field (any will do when field is NULL). */
static inline void e2e_expect_errors_name(const e2e_response_t *r, const rd_json_t *p,
                                          const char *field)
{
    rd_json_t *errors = e2e_jget(p, "errors");
    assert_true(rd_json_is_array(errors));
    assert_true(rd_json_array_size(errors) >= 1);
    if (field == NULL) return;
    for (size_t i = 0; i < rd_json_array_size(errors); i++)
        if (strcmp(e2e_jstr(rd_json_array_at(errors, i), "field"), field) == 0) return;
    fail_msg("no error for field \"%s\": %s", field, r->body);
}

/* A 422 validation-failed problem whose errors name field (when not NULL). */
static inline void e2e_expect_invalid_field(const e2e_response_t *r, const char *field)
{
    e2e_expect_errors_name(r, e2e_expect_problem(r, 422, "validation-failed", NULL), field);
}

/* Asserts a 204 with no body. */
static inline void e2e_expect_no_content(const e2e_response_t *r)
{
    if (r->status != 204) fail_msg("expected 204, got %d: %s", r->status, r->body);
    assert_int_equal(r->body_len, 0);
    assert_true(r->content_length <= 0);
}

/* One request on *c (reopened to port after the server closed it, or when
 * it is open to another port); fails the test unless a complete response
 * came. extra: NULL or header lines; *r is freed first. */
static inline void e2e_http_on(e2e_conn_t *c, int port, e2e_response_t *r, const char *method,
                               const char *path, const char *extra, const char *body,
                               size_t body_len)
{
    e2e_response_free(r);
    if (c->port != port || c->fd < 0) e2e_conn_close(c);  /* frees what a closed one read */
    if (c->fd < 0 && e2e_conn_open(c, port) != 0)
        fail_msg("connect to 127.0.0.1:%d: %s", port, strerror(errno));
    if (e2e_request(c, method, path, extra, body, body_len, r) != 0) {
        e2e_conn_close(c);
        fail_msg("%s %s: no complete response", method, path);
    }
}

/* The open connection to port among pool[0..n), else a closed one (or
 * pool[0], closed first) opened to it; fails the test when it cannot connect. */
static inline e2e_conn_t *e2e_conn_for(e2e_conn_t *pool, size_t n, int port)
{
    e2e_conn_t *spare = NULL;
    for (size_t i = 0; i < n; i++) {
        if (pool[i].fd >= 0 && pool[i].port == port) return &pool[i];
        if (pool[i].fd < 0 && spare == NULL) spare = &pool[i];
    }
    if (spare == NULL) {
        spare = &pool[0];
        e2e_conn_close(spare);
    }
    if (e2e_conn_open(spare, port) != 0)
        fail_msg("connect to 127.0.0.1:%d: %s", port, strerror(errno));
    return spare;
}

/* One request to port on pool's keep-alive connection to it (e2e_conn_for);
 * fails the test unless a complete response came. *r is freed first. */
static inline void e2e_http_via(e2e_conn_t *pool, size_t n, int port, e2e_response_t *r,
                                const char *method, const char *path, const char *body)
{
    e2e_response_free(r);
    e2e_conn_t *c = e2e_conn_for(pool, n, port);
    if (e2e_request(c, method, path, NULL, body, body ? strlen(body) : 0, r) != 0) {
        e2e_conn_close(c);
        fail_msg("%s %s to :%d: no complete response", method, path, port);
    }
}

/* r, a reply that came from c; fails the test when there is none (the link
 * failed or timed out). */
static inline redisReply *e2e_reply_or_fail(redisContext *c, redisReply *r)
{
    if (r == NULL) fail_msg("redis: %s", c->errstr);
    return r;
}

/* redisCommand on c; fails the test when no reply came (error replies are
 * returned). The caller frees the reply. */
static inline redisReply *e2e_rcmd(redisContext *c, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    redisReply *r = redisvCommand(c, format, ap);
    va_end(ap);
    return e2e_reply_or_fail(c, r);
}

/* One field of message id in the queue with key base `base` ("<prefix>:{q}"),
 * as the library's `get` answers it (the record's layout is the library's
 * business: docs/storage.md); "" when the message or the field is missing.
 * Returns out. */
static inline const char *e2e_message_field(redisContext *c, const char *base, long long id,
                                            const char *field, char *out, size_t size)
{
    redisReply *r = e2e_rcmd(c, "FCALL_RO %s 2 %s %s:m:%lld %lld", RD_FUNCTION("get"), base,
                             base, id, id);
    out[0] = '\0';
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_ARRAY) {
        const redisReply *m = r->element[1];
        for (size_t i = 2; i + 1 < m->elements; i += 2)
            if (strcmp(m->element[i]->str, field) == 0)
                snprintf(out, size, "%s", m->element[i + 1]->str);
    }
    freeReplyObject(r);
    return out;
}

#endif /* fail_msg */

#endif
