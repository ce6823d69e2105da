/* http.c - the HTTP/1.1 server: libuv TCP, llhttp parsing, keep-alive, one exchange at a time per connection. */
#include "retryd/http_conn.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/log.h"

static const char *const header_names[RD_HDR_COUNT] = {
    "content-type", "authorization", "expect", "transfer-encoding", "host",
};

static void conn_feed(rd_http_conn_t *c, const char *data, size_t len);
static void conn_resume(rd_http_conn_t *c);
static void conn_close(rd_http_conn_t *c);

/* ------------------------------------------------------------------ */
/* Lists and the sweep timer                                          */
/* ------------------------------------------------------------------ */

static void list_remove(rd_http_conn_t *c)
{
    rd_http_conn_list_t *l = c->list;
    if (l == NULL) return;
    if (c->prev) c->prev->next = c->next;
    else l->head = c->next;
    if (c->next) c->next->prev = c->prev;
    else l->tail = c->prev;
    c->prev = c->next = NULL;
    c->list = NULL;
}

static void list_push(rd_http_conn_list_t *l, rd_http_conn_t *c)
{
    list_remove(c);
    c->since_ms = uv_now(c->server->loop);
    c->list = l;
    c->prev = l->tail;
    c->next = NULL;
    if (l->tail) l->tail->next = c;
    else l->head = c;
    l->tail = c;
}

static void expire(rd_http_conn_list_t *l, uint64_t now, uint64_t timeout_ms)
{
    while (l->head && now - l->head->since_ms >= timeout_ms) conn_close(l->head);
}

static void on_sweep(uv_timer_t *timer)
{
    rd_http_server_t *s = timer->data;
    uint64_t now = uv_now(s->loop);
    expire(&s->idle, now, s->idle_timeout_ms);
    expire(&s->linger, now, RD_HTTP_LINGER_MS);
}

/* ------------------------------------------------------------------ */
/* Server lifetime                                                    */
/* ------------------------------------------------------------------ */

static void on_sweep_close(uv_handle_t *handle);

static void handle_closed(rd_http_server_t *s)
{
    assert(s->handles > 0);
    s->handles--;
    if (!s->stopping) return;
    /* The sweep timer outlives the connections so stuck shutdowns still time out. */
    if (s->handles == 1 && !s->sweep_closing) {
        s->sweep_closing = true;
        uv_close((uv_handle_t *)&s->sweep, on_sweep_close);
        return;
    }
    if (s->handles > 0) return;
    void (*cb)(void *) = s->on_drained;
    void *arg = s->drained_arg;
    rd_free(s);
    if (cb) cb(arg);
}

static void on_sweep_close(uv_handle_t *handle)
{
    handle_closed(handle->data);
}

static void on_listener_close(uv_handle_t *handle)
{
    handle_closed(handle->data);
}

static void on_reject_close(uv_handle_t *handle)
{
    rd_http_server_t *s = handle->data;
    rd_free(handle);
    handle_closed(s);
}

/* ------------------------------------------------------------------ */
/* Connection shutdown                                                */
/* ------------------------------------------------------------------ */

static void free_buffers(rd_http_conn_t *c)
{
    rd_buf_free(&c->url);
    rd_buf_free(&c->body);
    rd_buf_free(&c->in);
    for (int i = 0; i < RD_HDR_COUNT; i++) rd_buf_free(&c->header[i]);
    rd_buf_free(&c->all_headers);
}

static void on_conn_close(uv_handle_t *handle)
{
    rd_http_conn_t *c = handle->data;
    rd_http_server_t *s = c->server;
    assert(!c->pending && c->list == NULL);
    assert(!c->out_counted && c->out_bytes == 0);
    rd_http_body_release(c);
    rd_free(c->refusal.answer.headers);  /* a refusal never sent (none today) */
    rd_free(c->refusal.answer.body);
    if (c->on_lost) c->on_lost(false, c->lost_arg);
    rd_http_settle_written(c, !c->peer_reset);
    free_buffers(c);
    rd_free(c);
    s->conn_count--;
    handle_closed(s);
}

static void stop_reading(rd_http_conn_t *c)
{
    if (!c->reading) return;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
}

/* Closes at once, dropping unsent output. With an exchange pending the socket
 * stays until rd_http_respond, which then finishes the job. */
static void conn_close(rd_http_conn_t *c)
{
    if (c->closing) return;
    list_remove(c);
    rd_http_out_release(c);
    if (c->pending) {
        c->client_gone = true;
        stop_reading(c);
        return;
    }
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, on_conn_close);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);
static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf);

static void start_reading(rd_http_conn_t *c)
{
    if (c->reading || c->closing) return;
    int r = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (r < 0) {
        rd_debug("http: read start failed: %s", uv_strerror(r));
        conn_close(c);
        return;
    }
    c->reading = true;
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    rd_http_conn_t *c = req->data;
    c->shutting = false;
    if (c->closing) return;
    if (status == 0 && c->linger_wanted && !c->server->stopping) {
        /* Closing with unread input makes the kernel send RST, which can destroy
         * the error response before the client reads it; drain the input first. */
        c->lingering = true;
        list_push(&c->server->linger, c);
        start_reading(c);
        return;
    }
    conn_close(c);
}

/* Ends the connection after the response just queued. linger: the client may
 * still be sending (error replies). */
static void conn_end(rd_http_conn_t *c, bool linger)
{
    if (c->closing || c->shutting || c->lingering) return;
    assert(!c->pending);
    c->linger_wanted = linger && !c->server->stopping;
    if (!c->linger_wanted) stop_reading(c);
    c->shutdown_req.data = c;
    int r = uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown);
    if (r < 0) {
        conn_close(c);
        return;
    }
    c->shutting = true;
    /* Bounds a shutdown that never completes because the client never reads. */
    list_push(&c->server->idle, c);
}

/* Answers a request the parser (or a head check) refused, then ends the
 * connection. extra_headers as in rd_http_respond, or NULL. */
static void conn_fail(rd_http_conn_t *c, rd_problem_t p, const char *detail,
                      const char *extra_headers)
{
    size_t url_len = c->path_len ? c->path_len : c->url.len;
    if (!c->path_len && c->url.data) {
        const char *q = memchr(c->url.data, '?', c->url.len);
        if (q) url_len = (size_t)(q - c->url.data);
    }

    size_t len;
    char *body = rd_problem_body(p, detail, c->url.data ? c->url.data : "", url_len, NULL, &len);
    rd_debug("http: %d %s", rd_problem_status(p), detail);
    int r = rd_http_conn_send(c, rd_problem_status(p), "application/problem+json", extra_headers, body,
                      len, false, false, NULL, NULL);
    rd_free(body);
    if (r == 0) conn_end(c, true);
}

static void fill_request_head(rd_http_conn_t *c);

/* Sends a listener's own answer to a refused request (and frees it), then
 * ends the connection as conn_fail does. */
static void send_own_answer(rd_http_conn_t *c, rd_http_answer_t *a)
{
    int r = rd_http_conn_send(c, a->status, a->content_type, a->headers, a->body ? a->body : "",
                              a->body_len, false, false, NULL, NULL);
    rd_free(a->headers);
    rd_free(a->body);
    *a = (rd_http_answer_t){ 0 };
    if (r == 0) conn_end(c, true);
}

/* The listener's own answer to a body over the limit, if it gives one. */
static bool too_large_own_answer(rd_http_conn_t *c)
{
    fill_request_head(c);
    c->req.body = NULL;
    c->req.body_len = 0;
    rd_http_answer_t a = { 0 };
    if (!c->server->on_too_large(&c->req, c->server->handler_ctx, &a)) return false;
    send_own_answer(c, &a);
    return true;
}

static void conn_fail_parse(rd_http_conn_t *c, llhttp_errno_t err)
{
    char detail[192];
    switch (c->fail_status) {
    case 413:
        if (c->server->on_too_large && too_large_own_answer(c)) return;
        snprintf(detail, sizeof detail, "request body exceeds %zu bytes",
                 c->server->max_body_bytes);
        conn_fail(c, RD_PROBLEM_PAYLOAD_TOO_LARGE, detail, NULL);
        return;
    case 431:
        snprintf(detail, sizeof detail, "request line and headers exceed %d bytes",
                 RD_HTTP_MAX_HEAD_BYTES);
        conn_fail(c, RD_PROBLEM_HEADERS_TOO_LARGE, detail, NULL);
        return;
    case 417:
        conn_fail(c, RD_PROBLEM_EXPECTATION_FAILED,
                  "only the 100-continue expectation is supported", NULL);
        return;
    case 501:
        conn_fail(c, RD_PROBLEM_NOT_IMPLEMENTED,
                  "only the chunked transfer coding is supported", NULL);
        return;
    case 503:
        snprintf(detail, sizeof detail,
                 "the request bodies being read already hold --max-pending-body-bytes "
                 "(%zu bytes); retry later", c->server->max_pending_body_bytes);
        conn_fail(c, RD_PROBLEM_BACKEND_UNAVAILABLE, detail, "Retry-After: 1\r\n");
        return;
    case RD_HTTP_FAIL_REFUSED:
        if (c->refusal.answer.status) send_own_answer(c, &c->refusal.answer);
        else conn_fail(c, c->refusal.problem, c->refusal.detail, c->refusal.extra_headers);
        return;
    case 400:
        conn_fail(c, RD_PROBLEM_MALFORMED_REQUEST,
                  "an HTTP/1.1 request needs exactly one Host header", NULL);
        return;
    default:
        break;
    }
    if (err == HPE_INVALID_TRANSFER_ENCODING) {
        conn_fail(c, RD_PROBLEM_NOT_IMPLEMENTED,
                  "only the chunked transfer coding is supported", NULL);
        return;
    }
    snprintf(detail, sizeof detail, "the request could not be parsed: %s",
             llhttp_get_error_reason(&c->parser));
    conn_fail(c, RD_PROBLEM_MALFORMED_REQUEST, detail, NULL);
}

/* ------------------------------------------------------------------ */
/* Parser callbacks                                                   */
/* ------------------------------------------------------------------ */

static int count_head(rd_http_conn_t *c, size_t n)
{
    c->head_bytes += n;
    if (c->head_bytes <= RD_HTTP_MAX_HEAD_BYTES) return 0;
    c->fail_status = 431;
    return HPE_USER;
}

static int on_message_begin(llhttp_t *p)
{
    rd_http_conn_t *c = p->data;
    rd_buf_reset(&c->url);
    rd_buf_reset(&c->body);
    rd_http_body_release(c);
    c->fail_status = 0;
    for (int i = 0; i < RD_HDR_COUNT; i++) rd_buf_reset(&c->header[i]);
    rd_buf_reset(&c->all_headers);
    c->all_headers_count = 0;
    c->in_value = false;
    c->header_seen = 0;
    c->te_headers = 0;
    c->host_headers = 0;
    c->field_len = 0;
    c->cur_header = RD_HDR_OTHER;
    c->head_bytes = 0;
    c->path_len = 0;
    c->has_query = false;
    c->headers_done = false;
    return 0;
}

static int on_method(llhttp_t *p, const char *at, size_t n)
{
    (void)at;
    return count_head(p->data, n + 1);
}

static int on_version(llhttp_t *p, const char *at, size_t n)
{
    (void)at;
    return count_head(p->data, n + 2);
}

static int on_url(llhttp_t *p, const char *at, size_t n)
{
    rd_http_conn_t *c = p->data;
    if (count_head(c, n + 1)) return HPE_USER;
    rd_buf_append(&c->url, at, n);
    return 0;
}

static int on_url_complete(llhttp_t *p)
{
    rd_http_conn_t *c = p->data;
    rd_buf_append(&c->url, "", 0);
    char *q = memchr(c->url.data, '?', c->url.len);
    c->has_query = q != NULL;
    c->path_len = q ? (size_t)(q - c->url.data) : c->url.len;
    return 0;
}

/* keep_headers: the name and value bytes go to c->all_headers as they come
 * (the head limit bounds them); each ends with a NUL at its *_complete. */
static void keep_header_bytes(rd_http_conn_t *c, const char *at, size_t n, bool lower)
{
    if (!c->server->keep_headers || c->headers_done) return;
    size_t start = c->all_headers.len;
    rd_buf_append(&c->all_headers, at, n);
    if (lower)
        for (size_t i = start; i < c->all_headers.len; i++)
            if (c->all_headers.data[i] >= 'A' && c->all_headers.data[i] <= 'Z')
                c->all_headers.data[i] = (char)(c->all_headers.data[i] + ('a' - 'A'));
}

static void keep_header_end(rd_http_conn_t *c, bool value)
{
    if (!c->server->keep_headers || c->headers_done) return;
    rd_buf_t *b = &c->all_headers;
    if (value) {
        while (b->len > 0 && b->data[b->len - 1] != '\0' &&
               (b->data[b->len - 1] == ' ' || b->data[b->len - 1] == '\t'))
            b->len--;
        c->all_headers_count++;
    }
    rd_buf_append(b, "", 1);
}

static int on_header_field(llhttp_t *p, const char *at, size_t n)
{
    rd_http_conn_t *c = p->data;
    if (count_head(c, n + 4)) return HPE_USER;
    keep_header_bytes(c, at, n, true);
    if (c->field_len + n < sizeof c->field) memcpy(c->field + c->field_len, at, n);
    c->field_len += n;
    return 0;
}

static int on_header_field_complete(llhttp_t *p)
{
    rd_http_conn_t *c = p->data;
    c->cur_header = RD_HDR_OTHER;
    keep_header_end(c, false);
    c->in_value = true;
    size_t n = c->field_len;
    c->field_len = 0;
    if (c->headers_done || n >= sizeof c->field) return 0;
    for (int i = 0; i < RD_HDR_COUNT; i++) {
        if (strlen(header_names[i]) == n && strncasecmp(c->field, header_names[i], n) == 0) {
            c->cur_header = (rd_http_header_id_t)i;
            /* A repeated header replaces the earlier value. */
            rd_buf_reset(&c->header[i]);
            rd_buf_append(&c->header[i], "", 0);
            c->header_seen |= 1u << i;
            if (i == RD_HDR_TRANSFER_ENCODING) c->te_headers++;
            if (i == RD_HDR_HOST) c->host_headers++;
            break;
        }
    }
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n)
{
    rd_http_conn_t *c = p->data;
    if (count_head(c, n)) return HPE_USER;
    keep_header_bytes(c, at, n, false);
    if (c->cur_header != RD_HDR_OTHER) rd_buf_append(&c->header[c->cur_header], at, n);
    return 0;
}

static int on_header_value_complete(llhttp_t *p)
{
    rd_http_conn_t *c = p->data;
    if (c->in_value) keep_header_end(c, true);
    c->in_value = false;
    if (c->cur_header == RD_HDR_OTHER) return 0;
    rd_buf_t *b = &c->header[c->cur_header];
    rd_buf_append(b, "", 0);
    while (b->len > 0 && (b->data[b->len - 1] == ' ' || b->data[b->len - 1] == '\t')) b->len--;
    b->data[b->len] = '\0';
    c->cur_header = RD_HDR_OTHER;
    return 0;
}

static bool header_is(const rd_http_conn_t *c, rd_http_header_id_t id, const char *value)
{
    return (c->header_seen & (1u << id)) && strcasecmp(c->header[id].data, value) == 0;
}

static void send_continue(rd_http_conn_t *c)
{
    static const char msg[] = "HTTP/1.1 100 Continue\r\n\r\n";
    rd_http_write_t *w = rd_malloc(sizeof *w + sizeof msg - 1);
    w->on_delivery = NULL;
    w->delivery_arg = NULL;
    memcpy(w->data, msg, sizeof msg - 1);
    rd_http_conn_write(c, w, sizeof msg - 1);
}

static int on_headers_complete(llhttp_t *p)
{
    rd_http_conn_t *c = p->data;
    rd_http_server_t *s = c->server;
    c->headers_done = true;
    if (c->header_seen & (1u << RD_HDR_TRANSFER_ENCODING)) {
        /* llhttp accepts "gzip, chunked" and would hand us compressed bytes. */
        if (c->te_headers != 1 || !header_is(c, RD_HDR_TRANSFER_ENCODING, "chunked")) {
            c->fail_status = 501;
            return HPE_USER;
        }
    }
    bool has_length = (p->flags & F_CONTENT_LENGTH) != 0;
    if (has_length && p->content_length > s->max_body_bytes) {
        c->fail_status = 413;
        return HPE_USER;
    }
    /* RFC 9112 3.2: an HTTP/1.1 request has exactly one Host (1.0 may omit it). */
    bool http11 = p->http_major > 1 || (p->http_major == 1 && p->http_minor >= 1);
    if ((http11 && c->host_headers == 0) || c->host_headers > 1) {
        c->fail_status = 400;
        return HPE_USER;
    }
    bool expects_body = (has_length && p->content_length > 0) || (p->flags & F_CHUNKED);
    bool expect = (c->header_seen & (1u << RD_HDR_EXPECT)) &&
                  !(p->http_major == 1 && p->http_minor == 0);
    if (expect && !header_is(c, RD_HDR_EXPECT, "100-continue")) {
        c->fail_status = 417;
        return HPE_USER;
    }
    if (expects_body && s->on_head) {
        /* Before a byte of the body is read or 100 Continue invites it: a
         * request without the token never makes the daemon hold its body. */
        fill_request_head(c);
        c->req.body = NULL;
        c->req.body_len = 0;
        c->refusal = (rd_http_refusal_t){ 0 };
        if (!s->on_head(&c->req, s->handler_ctx, &c->refusal)) {
            s->refused_at_head++;
            c->fail_status = RD_HTTP_FAIL_REFUSED;
            return HPE_USER;
        }
    }
    if (has_length && p->content_length > 0 && !rd_http_body_count(c, (size_t)p->content_length)) {
        s->refused_body_budget++;
        c->fail_status = 503;
        return HPE_USER;
    }
    if (expect && expects_body) {
        send_continue(c);
        if (c->closing) return HPE_USER;  /* the write failed */
    }
    if (has_length && p->content_length > 0) rd_buf_reserve(&c->body, (size_t)p->content_length);
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
    rd_http_conn_t *c = p->data;
    if (c->body.len + n > c->server->max_body_bytes) {
        c->fail_status = 413;
        return HPE_USER;
    }
    /* A chunked body is counted as it comes (a Content-Length one was whole). */
    if (c->body.len + n > c->body_counted &&
        !rd_http_body_count(c, c->body.len + n - c->body_counted)) {
        c->server->refused_body_budget++;
        c->fail_status = 503;
        return HPE_USER;
    }
    rd_buf_append(&c->body, at, n);
    return 0;
}

static rd_http_method_t method_of(uint8_t m)
{
    switch (m) {
    case HTTP_GET: return RD_HTTP_GET;
    case HTTP_HEAD: return RD_HTTP_HEAD;
    case HTTP_POST: return RD_HTTP_POST;
    case HTTP_PUT: return RD_HTTP_PUT;
    case HTTP_PATCH: return RD_HTTP_PATCH;
    case HTTP_DELETE: return RD_HTTP_DELETE;
    case HTTP_OPTIONS: return RD_HTTP_OPTIONS;
    default: return RD_HTTP_OTHER;
    }
}

/* Strips the scheme and authority of an absolute-form target (RFC 9112 3.2.2). */
static size_t origin_offset(const char *url, size_t len)
{
    size_t skip;
    if (len >= 7 && strncasecmp(url, "http://", 7) == 0) skip = 7;
    else if (len >= 8 && strncasecmp(url, "https://", 8) == 0) skip = 8;
    else return 0;
    while (skip < len && url[skip] != '/' && url[skip] != '?') skip++;
    return skip;
}

/* Sets c->req's method, path, query and headers (not the body) from what
 * the parser has seen: once the headers are complete, and again at the end. */
static void fill_request_head(rd_http_conn_t *c)
{
    rd_http_request_t *r = &c->req;
    if (c->url.data == NULL) rd_buf_append(&c->url, "", 0);
    char *url = c->url.data;
    size_t start = origin_offset(url, c->path_len);
    if (c->has_query) url[c->path_len] = '\0';
    if (start == c->path_len) {
        /* "http://host" or "http://host?q": the path is "/". */
        static const char slash[] = "/";
        r->path = slash;
        r->path_len = 1;
    } else {
        r->path = url + start;
        r->path_len = c->path_len - start;
    }
    r->query = c->has_query ? url + c->path_len + 1 : NULL;
    r->query_len = c->has_query ? c->url.len - c->path_len - 1 : 0;
    r->content_type = (c->header_seen & (1u << RD_HDR_CONTENT_TYPE))
                          ? c->header[RD_HDR_CONTENT_TYPE].data : NULL;
    r->authorization = (c->header_seen & (1u << RD_HDR_AUTHORIZATION))
                           ? c->header[RD_HDR_AUTHORIZATION].data : NULL;
    r->method = method_of(c->parser.method);
    r->headers = c->server->keep_headers ? c->all_headers.data : NULL;
    r->header_count = c->server->keep_headers ? c->all_headers_count : 0;
    r->headers_len = c->server->keep_headers ? c->all_headers.len : 0;
}

static int on_message_complete(llhttp_t *p)
{
    rd_http_conn_t *c = p->data;
    rd_http_request_t *r = &c->req;
    if (c->body.data == NULL) rd_buf_append(&c->body, "", 0);
    fill_request_head(c);
    r->body = c->body.data;
    r->body_len = c->body.len;
    c->is_head = r->method == RD_HTTP_HEAD;
    c->http10 = p->http_major == 1 && p->http_minor == 0;
    /* Upgrade and CONNECT are not spoken here: answer, then close. */
    c->keep_alive = llhttp_should_keep_alive(p) && !p->upgrade;
    return HPE_PAUSED;
}

static const llhttp_settings_t parser_settings = {
    .on_message_begin = on_message_begin,
    .on_method = on_method,
    .on_version = on_version,
    .on_url = on_url,
    .on_url_complete = on_url_complete,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ------------------------------------------------------------------ */
/* Request flow                                                       */
/* ------------------------------------------------------------------ */

static bool suspended(const rd_http_conn_t *c)
{
    return c->pending || c->write_blocked;
}

static bool ending(const rd_http_conn_t *c)
{
    return c->closing || c->shutting || c->lingering || c->client_gone;
}

/* Keeps unparsed bytes for later; data may already point into c->in. */
static void conn_stash(rd_http_conn_t *c, const char *data, size_t len)
{
    if (c->feeding_in) {
        memmove(c->in.data, data, len);
        c->in.len = len;
        c->in.data[len] = '\0';
        return;
    }
    rd_buf_reset(&c->in);
    rd_buf_append(&c->in, data, len);
}

static void conn_dispatch(rd_http_conn_t *c)
{
    rd_http_server_t *s = c->server;
    list_remove(c);
    c->pending = true;
    s->in_flight++;
    c->in_dispatch = true;
    s->handler(&c->ex, &c->req, s->handler_ctx);
    c->in_dispatch = false;
}

static void conn_feed(rd_http_conn_t *c, const char *data, size_t len)
{
    while (len > 0) {
        llhttp_errno_t err = llhttp_execute(&c->parser, data, len);
        if (err == HPE_OK) return;
        if (err != HPE_PAUSED) {
            if (!ending(c)) conn_fail_parse(c, err);
            return;
        }
        size_t used = (size_t)(llhttp_get_error_pos(&c->parser) - data);
        data += used;
        len -= used;
        conn_dispatch(c);
        if (ending(c)) return;
        if (suspended(c)) {
            conn_stash(c, data, len);
            return;
        }
        llhttp_resume(&c->parser);
    }
}

/* Continues after the pending exchange was answered (and writes drained). */
static void conn_resume(rd_http_conn_t *c)
{
    llhttp_resume(&c->parser);
    size_t n = c->in.len;
    if (n > 0) {
        /* conn_feed either consumes everything or stashes the rest back in place. */
        c->in.len = 0;
        c->feeding_in = true;
        conn_feed(c, c->in.data, n);
        c->feeding_in = false;
    }
    if (ending(c) || suspended(c)) return;
    if (c->peer_eof) {
        /* Every request the client sent before its EOF is answered. */
        conn_end(c, false);
        return;
    }
    if (c->in.cap > RD_HTTP_KEEP_BUF_BYTES) rd_buf_free(&c->in);
    start_reading(c);
}

/* The client closed its sending side. HTTP/1.1 lets it do that after its
 * request and still read the answer (a half-close), and here a half-close
 * cannot be told from a close: what was received is carried out and
 * answered, then the connection ends. A reset or a failed write is what
 * says the client is truly gone. */
static void conn_peer_eof(rd_http_conn_t *c)
{
    rd_debug("http: client closed its sending side");
    c->peer_eof = true;
    stop_reading(c);
    if (suspended(c)) return;  /* rd_http_respond, or the drained write, goes on */
    /* Idle: any bytes received since the last request are no complete one. */
    if (c->writes_pending) conn_end(c, false);
    else conn_close(c);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    rd_http_conn_t *c = handle->data;
    buf->base = c->server->read_buf;
    buf->len = sizeof c->server->read_buf;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    rd_http_conn_t *c = stream->data;
    if (nread == 0 || c->closing) return;
    if (nread < 0) {
        if (nread != UV_EOF) {
            rd_debug("http: read failed: %s", uv_strerror((int)nread));
            c->peer_reset = true;
            rd_http_settle_written(c, false);
        }
        if (c->shutting) {
            /* Let the final response finish; on_shutdown closes. */
            c->linger_wanted = false;
            stop_reading(c);
            return;
        }
        if (nread == UV_EOF && !c->lingering) conn_peer_eof(c);
        else conn_close(c);
        return;
    }
    rd_http_settle_written(c, true);  /* it sends again: it read the answer */
    if (c->shutting || c->lingering) return;
    if (suspended(c)) {
        rd_buf_append(&c->in, buf->base, (size_t)nread);
        if (c->in.len >= RD_HTTP_MAX_BUFFERED_BYTES) stop_reading(c);
        return;
    }
    conn_feed(c, buf->base, (size_t)nread);
}

void rd_http_respond(rd_http_exchange_t *ex, int status, const char *content_type,
                     const char *extra_headers, const char *body, size_t body_len)
{
    rd_http_conn_t *c = ex->conn;
    rd_http_server_t *s = c->server;
    assert(c->pending && status >= 200 && status <= 999);
    c->pending = false;
    s->in_flight--;
    rd_http_body_release(c);  /* the handler is done with the request */
    rd_http_delivery_fn done = c->on_delivery;
    void *done_arg = c->delivery_arg;
    c->on_delivery = NULL;
    c->delivery_arg = NULL;
    if (c->client_gone) {
        c->on_lost = done;  /* told from the close, never from inside this call */
        c->lost_arg = done_arg;
        conn_close(c);
        return;
    }
    /* After the client's EOF only requests it already sent keep it open (while
     * those are being parsed their bytes are not counted in c->in, so keep it
     * then; conn_resume ends the connection once they are answered). */
    bool keep = c->keep_alive && !s->stopping &&
                !(c->peer_eof && c->in.len == 0 && !c->feeding_in);
    if (rd_http_conn_send(c, status, content_type, extra_headers, body, body_len, keep, c->is_head, done,
                  done_arg) < 0)
        return;
    if (!keep) {
        conn_end(c, false);
        return;
    }
    if (c->body.cap > RD_HTTP_KEEP_BUF_BYTES) rd_buf_free(&c->body);
    list_push(&s->idle, c);
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > RD_HTTP_MAX_WRITE_QUEUE_BYTES)
        c->write_blocked = true;
    if (!c->in_dispatch && !c->write_blocked) conn_resume(c);
}

void rd_http_respond_problem(rd_http_exchange_t *ex, rd_problem_t p, const char *detail,
                             const rd_field_errors_t *errs, const char *extra_headers)
{
    const rd_http_request_t *req = &ex->conn->req;
    size_t len;
    char *body = rd_problem_body(p, detail, req->path, req->path_len, errs, &len);
    rd_http_respond(ex, rd_problem_status(p), "application/problem+json", extra_headers, body,
                    len);
    rd_free(body);
}

void rd_http_on_delivery(rd_http_exchange_t *ex, rd_http_delivery_fn cb, void *arg)
{
    rd_http_conn_t *c = ex->conn;
    assert(c->pending && c->on_delivery == NULL);
    c->on_delivery = cb;
    c->delivery_arg = arg;
}

bool rd_http_exchange_client_alive(const rd_http_exchange_t *ex)
{
    return !ex->conn->client_gone && !ex->conn->peer_eof;
}

bool rd_http_exchange_client_gone(const rd_http_exchange_t *ex)
{
    return ex->conn->client_gone;
}

/* ------------------------------------------------------------------ */
/* Accepting                                                          */
/* ------------------------------------------------------------------ */

static void reject(rd_http_server_t *s)
{
    uv_tcp_t *t = rd_malloc(sizeof *t);
    uv_tcp_init(s->loop, t);
    t->data = s;
    s->handles++;
    if (uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)t) == 0)
        rd_warn("http: %zu connections open, refusing another", s->max_connections);
    uv_close((uv_handle_t *)t, on_reject_close);
}

/* Sets up a connection around an initialised c->tcp (accepted or adopted). */
static void conn_start(rd_http_conn_t *c)
{
    uv_tcp_nodelay(&c->tcp, 1);
    llhttp_init(&c->parser, HTTP_REQUEST, &parser_settings);
    c->parser.data = c;
    list_push(&c->server->idle, c);
    start_reading(c);
}

static rd_http_conn_t *conn_new(rd_http_server_t *s)
{
    rd_http_conn_t *c = rd_calloc(1, sizeof *c);
    c->server = s;
    c->ex.conn = c;
    c->cur_header = RD_HDR_OTHER;
    c->out_counted = true;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    s->conn_count++;
    s->handles++;
    return c;
}

static void on_connection(uv_stream_t *listener, int status)
{
    rd_http_server_t *s = listener->data;
    if (status < 0) {
        rd_warn("http: accept failed: %s", uv_strerror(status));
        return;
    }
    if (s->conn_count >= s->max_connections) {
        reject(s);
        return;
    }
    rd_http_conn_t *c = conn_new(s);
    int r = uv_accept(listener, (uv_stream_t *)&c->tcp);
    if (r < 0) {
        rd_warn("http: accept failed: %s", uv_strerror(r));
        conn_close(c);
        return;
    }
    conn_start(c);
}

int rd_http_server_adopt(rd_http_server_t *s, uv_os_sock_t sock)
{
    rd_http_conn_t *c = conn_new(s);
    int r = uv_tcp_open(&c->tcp, sock);
    if (r < 0) {
        conn_close(c);
        return r;
    }
    conn_start(c);
    return 0;
}

int rd_http_server_start(uv_loop_t *loop, const rd_http_options_t *opts,
                         rd_http_server_t **out)
{
    assert(opts->handler != NULL);
    struct sockaddr_storage addr;
    const char *host = opts->host ? opts->host : "127.0.0.1";
    int r = strchr(host, ':') ? uv_ip6_addr(host, opts->port, (struct sockaddr_in6 *)&addr)
                              : uv_ip4_addr(host, opts->port, (struct sockaddr_in *)&addr);
    if (r < 0) return r;

    rd_http_server_t *s = rd_calloc(1, sizeof *s);
    s->loop = loop;
    s->close_conn = conn_close;
    s->resume_conn = conn_resume;
    s->handler = opts->handler;
    s->on_head = opts->on_head;
    s->on_too_large = opts->on_too_large;
    s->keep_headers = opts->keep_headers;
    s->handler_ctx = opts->handler_ctx;
    s->max_pending_body_bytes = opts->max_pending_body_bytes ? opts->max_pending_body_bytes
                                                             : RD_HTTP_MAX_PENDING_BODY_DEFAULT;
    s->max_pending_output_bytes = opts->max_pending_output_bytes
                                      ? opts->max_pending_output_bytes
                                      : RD_HTTP_MAX_PENDING_OUTPUT_DEFAULT;
    s->max_body_bytes = opts->max_body_bytes;
    s->max_connections = opts->max_connections ? opts->max_connections : RD_HTTP_MAX_CONNS_DEFAULT;
    s->idle_timeout_ms = opts->idle_timeout_ms ? opts->idle_timeout_ms
                                               : RD_HTTP_IDLE_TIMEOUT_MS_DEFAULT;
    uv_timer_init(loop, &s->sweep);
    s->sweep.data = s;
    uv_unref((uv_handle_t *)&s->sweep);
    s->handles++;
    r = uv_tcp_init(loop, &s->listener);
    if (r < 0) goto fail_timer;
    s->listener.data = s;
    s->handles++;
    r = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    if (r < 0) goto fail_listener;
    r = uv_listen((uv_stream_t *)&s->listener, RD_HTTP_BACKLOG, on_connection);
    if (r < 0) goto fail_listener;
    uv_timer_start(&s->sweep, on_sweep, RD_HTTP_SWEEP_MS, RD_HTTP_SWEEP_MS);
    *out = s;
    return 0;

fail_listener:
    /* The handles are freed from their close callbacks, on the next loop turn. */
    s->stopping = true;
    uv_close((uv_handle_t *)&s->listener, on_listener_close);
    return r;
fail_timer:
    s->stopping = true;
    s->sweep_closing = true;
    uv_close((uv_handle_t *)&s->sweep, on_sweep_close);
    return r;
}

int rd_http_server_port(const rd_http_server_t *server)
{
    struct sockaddr_storage addr;
    int len = sizeof addr;
    int r = uv_tcp_getsockname(&server->listener, (struct sockaddr *)&addr, &len);
    if (r < 0) return r;
    if (addr.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
    return ntohs(((struct sockaddr_in *)&addr)->sin_port);
}

size_t rd_http_server_in_flight(const rd_http_server_t *server)
{
    return server->in_flight;
}

void rd_http_server_render_metrics(const rd_http_server_t *s, rd_buf_t *out)
{
    rd_buf_printf(out,
                  "# HELP retryd_http_refused_total Requests answered at their headers, body "
                  "unread: unauthorized (no or a wrong token), body_budget "
                  "(--max-pending-body-bytes).\n"
                  "# TYPE retryd_http_refused_total counter\n"
                  "retryd_http_refused_total{reason=\"unauthorized\"} %llu\n"
                  "retryd_http_refused_total{reason=\"body_budget\"} %llu\n"
                  "# HELP retryd_http_pending_body_bytes Request bodies being read or held by "
                  "requests not yet answered.\n"
                  "# TYPE retryd_http_pending_body_bytes gauge\n"
                  "retryd_http_pending_body_bytes %zu\n"
                  "# HELP retryd_http_pending_output_bytes Answers written and not yet taken "
                  "by their sockets.\n"
                  "# TYPE retryd_http_pending_output_bytes gauge\n"
                  "retryd_http_pending_output_bytes %zu\n"
                  "# HELP retryd_http_slow_readers_closed_total Connections closed because "
                  "the output queued on all connections passed --max-pending-output-bytes.\n"
                  "# TYPE retryd_http_slow_readers_closed_total counter\n"
                  "retryd_http_slow_readers_closed_total %llu\n",
                  s->refused_at_head, s->refused_body_budget, s->pending_body_bytes,
                  s->pending_output_bytes, s->slow_readers_closed);
}

static void stop_list(rd_http_conn_list_t *l)
{
    rd_http_conn_t *next;
    for (rd_http_conn_t *c = l->head; c; c = next) {
        next = c->next;
        if (c->shutting) continue;
        /* A connection whose last response is still being written finishes it. */
        if (c->writes_pending && !c->lingering) conn_end(c, false);
        else conn_close(c);
    }
}

void rd_http_server_stop(rd_http_server_t *server, void (*on_drained)(void *arg), void *arg)
{
    assert(!server->stopping);
    server->stopping = true;
    server->on_drained = on_drained;
    server->drained_arg = arg;
    uv_close((uv_handle_t *)&server->listener, on_listener_close);
    stop_list(&server->linger);
    stop_list(&server->idle);
    /* Pending exchanges close their connection in rd_http_respond. */
}


bool rd_http_request_header_next(const rd_http_request_t *req, size_t *pos, const char **name,
                                 const char **value)
{
    if (req->headers == NULL || *pos >= req->headers_len) return false;
    *name = req->headers + *pos;
    *value = *name + strlen(*name) + 1;
    *pos = (size_t)(*value + strlen(*value) + 1 - req->headers);
    return true;
}

const char *rd_http_request_header(const rd_http_request_t *req, const char *lname)
{
    if (req->headers == NULL) return NULL;
    const char *p = req->headers;
    for (size_t i = 0; i < req->header_count; i++) {
        const char *v = p + strlen(p) + 1;
        if (strcmp(p, lname) == 0) return v;
        p = v + strlen(v) + 1;
    }
    return NULL;
}

const char *rd_http_method_name(rd_http_method_t m)
{
    switch (m) {
    case RD_HTTP_GET: return "GET";
    case RD_HTTP_HEAD: return "HEAD";
    case RD_HTTP_POST: return "POST";
    case RD_HTTP_PUT: return "PUT";
    case RD_HTTP_PATCH: return "PATCH";
    case RD_HTTP_DELETE: return "DELETE";
    case RD_HTTP_OPTIONS: return "OPTIONS";
    default: return "OTHER";
    }
}
