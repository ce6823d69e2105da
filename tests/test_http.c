/* test_http.c - the HTTP server against uv_tcp clients in the same loop. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

#include "retryd/alloc.h"
#include "retryd/buf.h"
#include "retryd/http.h"

#define MAX_BODY 1024
#define MAX_CLIENTS 8
#define WATCHDOG_MS 5000

typedef struct client {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    rd_buf_t rx;
    bool connected;
    int connect_status;
    bool eof;
    bool closed;
    int writes_done;
} client_t;

typedef struct response {
    int status;
    char head[4096];
    char body[4096];
    size_t body_len;
} response_t;

static struct {
    uv_loop_t loop;
    uv_timer_t watchdog;
    uv_timer_t release_timer;
    bool timed_out;
    rd_http_server_t *server;
    int port;
    int handler_calls;
    int drained_calls;
    rd_http_exchange_t *deferred;
    int deferred_responses;
    bool deferred_alive;
    bool want_delivery;           /* the deferred answer asks whether it was delivered */
    int delivery_calls;
    bool delivered;
    client_t *clients[MAX_CLIENTS];
} t;

/* ------------------------------------------------------------------ */
/* Server side                                                        */
/* ------------------------------------------------------------------ */


static void on_request(rd_http_exchange_t *ex, const rd_http_request_t *req, void *ctx)
{
    assert_ptr_equal(ctx, &t);
    t.handler_calls++;
    assert_int_equal(req->body[req->body_len], '\0');
    if (req->path_len == 6 && memcmp(req->path, "/defer", 6) == 0) {
        assert_null(t.deferred);
        t.deferred = ex;
        return;
    }
    if (req->path_len == 6 && memcmp(req->path, "/empty", 6) == 0) {
        rd_http_respond(ex, 204, NULL, NULL, NULL, 0);
        return;
    }
    if (req->path_len == 8 && memcmp(req->path, "/headers", 8) == 0) {
        /* keep_headers: every header as name=value|, then the lookups. */
        rd_buf_t h = RD_BUF_INIT;
        size_t pos = 0;
        const char *name, *value;
        while (rd_http_request_header_next(req, &pos, &name, &value))
            rd_buf_printf(&h, "%s=%s|", name, value);
        const char *target = rd_http_request_header(req, "x-amz-target");
        rd_buf_printf(&h, "count=%zu target=%s method=%s", req->header_count,
                      target ? target : "-", rd_http_method_name(req->method));
        rd_http_respond(ex, 200, "text/plain", NULL, h.data, h.len);
        rd_buf_free(&h);
        return;
    }
    rd_buf_t b = RD_BUF_INIT;
    rd_buf_printf(&b, "method=%s path=%.*s query=%s%.*s body=%zu:%s ct=%s auth=%s",
                  rd_http_method_name(req->method), (int)req->path_len, req->path,
                  req->query ? "" : "-", (int)req->query_len, req->query ? req->query : "",
                  req->body_len, req->body, req->content_type ? req->content_type : "-",
                  req->authorization ? req->authorization : "-");
    rd_http_respond(ex, 200, "text/plain", "X-Test: 1\r\n", b.data, b.len);
    rd_buf_free(&b);
}

static void on_delivery(bool delivered, void *arg)
{
    assert_ptr_equal(arg, &t);
    t.delivery_calls++;
    t.delivered = delivered;
}

static void on_release(uv_timer_t *timer)
{
    (void)timer;
    rd_http_exchange_t *ex = t.deferred;
    t.deferred = NULL;
    t.deferred_alive = rd_http_exchange_client_alive(ex);
    t.deferred_responses++;
    if (t.want_delivery) rd_http_on_delivery(ex, on_delivery, &t);
    rd_http_respond(ex, 200, "text/plain", NULL, "deferred", 8);
    /* The async rule: never from inside the call. */
    assert_int_equal(t.delivery_calls, 0);
}

/* Answers the deferred exchange from a timer, as a backend callback would. */
static void release_deferred(void)
{
    assert_non_null(t.deferred);
    uv_timer_start(&t.release_timer, on_release, 0, 0);
}

static void on_drained(void *arg)
{
    assert_ptr_equal(arg, &t);
    t.drained_calls++;
}

/* ------------------------------------------------------------------ */
/* Running the loop                                                   */
/* ------------------------------------------------------------------ */

static void on_watchdog(uv_timer_t *timer)
{
    (void)timer;
    t.timed_out = true;
}

typedef bool (*pred_fn)(const void *arg);

static void run_until(pred_fn pred, const void *arg)
{
    uv_timer_start(&t.watchdog, on_watchdog, WATCHDOG_MS, 0);
    while (!pred(arg) && !t.timed_out) uv_run(&t.loop, UV_RUN_ONCE);
    uv_timer_stop(&t.watchdog);
    assert_false(t.timed_out);
}

static bool is_true(const void *arg)
{
    return *(const bool *)arg;
}

static bool have_deferred(const void *arg)
{
    (void)arg;
    return t.deferred != NULL;
}

static bool deferred_client_gone(const void *arg)
{
    (void)arg;
    return !rd_http_exchange_client_alive(t.deferred);
}

static bool deferred_done(const void *arg)
{
    return t.deferred_responses == *(const int *)arg && rd_http_server_in_flight(t.server) == 0;
}

static bool delivery_told(const void *arg)
{
    (void)arg;
    return t.delivery_calls > 0;
}

static bool drained(const void *arg)
{
    (void)arg;
    return t.drained_calls > 0;
}

/* ------------------------------------------------------------------ */
/* Client side                                                        */
/* ------------------------------------------------------------------ */

static void on_client_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    (void)handle;
    buf->base = rd_malloc(suggested);
    buf->len = suggested;
}

static void on_client_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    client_t *cl = stream->data;
    if (nread > 0) rd_buf_append(&cl->rx, buf->base, (size_t)nread);
    if (nread < 0) {
        cl->eof = true;
        uv_read_stop(stream);
    }
    rd_free(buf->base);
}

static void on_client_connect(uv_connect_t *req, int status)
{
    client_t *cl = req->data;
    cl->connected = true;
    cl->connect_status = status;
    if (status == 0) uv_read_start((uv_stream_t *)&cl->tcp, on_client_alloc, on_client_read);
}

static client_t *client_open(void)
{
    client_t *cl = rd_calloc(1, sizeof *cl);
    uv_tcp_init(&t.loop, &cl->tcp);
    cl->tcp.data = cl;
    cl->connect_req.data = cl;
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", t.port, &addr);
    assert_int_equal(uv_tcp_connect(&cl->connect_req, &cl->tcp, (const struct sockaddr *)&addr,
                                    on_client_connect), 0);
    for (int i = 0; i < MAX_CLIENTS; i++) {
        if (t.clients[i] == NULL) {
            t.clients[i] = cl;
            break;
        }
    }
    run_until(is_true, &cl->connected);
    assert_int_equal(cl->connect_status, 0);
    return cl;
}

static void on_client_close(uv_handle_t *handle)
{
    client_t *cl = handle->data;
    rd_buf_free(&cl->rx);
    rd_free(cl);
}

static void client_close(client_t *cl)
{
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (t.clients[i] == cl) t.clients[i] = NULL;
    uv_close((uv_handle_t *)&cl->tcp, on_client_close);
}

/* Closes with RST instead of FIN: the client is truly gone. */
static void client_reset(client_t *cl)
{
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (t.clients[i] == cl) t.clients[i] = NULL;
    assert_int_equal(uv_tcp_close_reset(&cl->tcp, on_client_close), 0);
}

static void on_client_shutdown(uv_shutdown_t *req, int status)
{
    assert_int_equal(status, 0);
    *(bool *)req->data = true;
}

/* shutdown(SHUT_WR): the client has sent everything but still reads. */
static void client_half_close(client_t *cl)
{
    uv_shutdown_t req;
    bool done = false;
    req.data = &done;
    assert_int_equal(uv_shutdown(&req, (uv_stream_t *)&cl->tcp, on_client_shutdown), 0);
    run_until(is_true, &done);
}

typedef struct client_write {
    uv_write_t req;
    client_t *cl;
    char data[];
} client_write_t;

static void on_client_write(uv_write_t *req, int status)
{
    client_write_t *w = (client_write_t *)req;
    assert_int_equal(status, 0);
    w->cl->writes_done++;
    rd_free(w);
}

static bool writes_done(const void *arg)
{
    const client_t *cl = arg;
    return cl->writes_done > 0;
}

static void client_send(client_t *cl, const char *data, size_t len)
{
    client_write_t *w = rd_malloc(sizeof *w + len);
    memcpy(w->data, data, len);
    w->cl = cl;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    cl->writes_done = 0;
    assert_int_equal(uv_write(&w->req, (uv_stream_t *)&cl->tcp, &b, 1, on_client_write), 0);
    run_until(writes_done, cl);
}

static void client_sends(client_t *cl, const char *s)
{
    client_send(cl, s, strlen(s));
}

/* The value of a header in a response head, or NULL. */
static const char *find_header(const char *head, const char *name, size_t *len)
{
    size_t n = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line; line = strstr(line, "\r\n")) {
        line += 2;
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ') v++;
            *len = (size_t)(strstr(v, "\r\n") - v);
            return v;
        }
    }
    return NULL;
}

static const char *header_value(const response_t *r, const char *name)
{
    static char value[512];
    size_t len;
    const char *v = find_header(r->head, name, &len);
    if (v == NULL) return NULL;
    snprintf(value, sizeof value, "%.*s", (int)len, v);
    return value;
}

/* Bytes of one complete response at the start of rx, or 0. */
static size_t response_size(const rd_buf_t *rx, bool head_only)
{
    if (rx->len == 0) return 0;
    const char *end = strstr(rx->data, "\r\n\r\n");
    if (end == NULL) return 0;
    size_t head_len = (size_t)(end - rx->data) + 4;
    char head[4096];
    assert_true(head_len < sizeof head);
    memcpy(head, rx->data, head_len);
    head[head_len] = '\0';
    size_t len;
    const char *cl = find_header(head, "Content-Length", &len);
    size_t body = cl && !head_only ? strtoul(cl, NULL, 10) : 0;
    return rx->len >= head_len + body ? head_len + body : 0;
}

typedef struct want_response {
    const client_t *cl;
    bool head_only;
} want_response_t;

static bool response_or_eof(const void *arg)
{
    const want_response_t *w = arg;
    return w->cl->eof || response_size(&w->cl->rx, w->head_only) > 0;
}

static void read_response_as(client_t *cl, bool head_only, response_t *r)
{
    want_response_t w = { cl, head_only };
    run_until(response_or_eof, &w);
    size_t n = response_size(&cl->rx, head_only);
    assert_true(n > 0);
    memset(r, 0, sizeof *r);
    const char *end = strstr(cl->rx.data, "\r\n\r\n");
    size_t head_len = (size_t)(end - cl->rx.data) + 4;
    memcpy(r->head, cl->rx.data, head_len);
    r->body_len = n - head_len;
    assert_true(r->body_len < sizeof r->body);
    memcpy(r->body, cl->rx.data + head_len, r->body_len);
    assert_int_equal(strncmp(r->head, "HTTP/1.1 ", 9), 0);
    r->status = atoi(r->head + 9);
    memmove(cl->rx.data, cl->rx.data + n, cl->rx.len - n);
    cl->rx.len -= n;
    cl->rx.data[cl->rx.len] = '\0';
}

static void read_response(client_t *cl, response_t *r)
{
    read_response_as(cl, false, r);
}

static bool client_eof(const void *arg)
{
    return ((const client_t *)arg)->eof;
}

/* The server closes after this response: EOF follows with nothing else. */
static void expect_closed(client_t *cl)
{
    run_until(client_eof, cl);
    assert_int_equal(cl->rx.len, 0);
}

static void expect_problem(const response_t *r, int status, const char *type)
{
    assert_int_equal(r->status, status);
    assert_string_equal(header_value(r, "Content-Type"), "application/problem+json");
    assert_string_equal(header_value(r, "Connection"), "close");
    char want[128];
    snprintf(want, sizeof want, "{\"type\":\"%s\"", type);
    assert_int_equal(strncmp(r->body, want, strlen(want)), 0);
    char status_field[32];
    snprintf(status_field, sizeof status_field, "\"status\":%d", status);
    assert_non_null(strstr(r->body, status_field));
}

/* ------------------------------------------------------------------ */
/* Fixture                                                            */
/* ------------------------------------------------------------------ */

static int setup(void **state)
{
    (void)state;
    memset(&t, 0, sizeof t);
    assert_int_equal(uv_loop_init(&t.loop), 0);
    uv_timer_init(&t.loop, &t.watchdog);
    uv_timer_init(&t.loop, &t.release_timer);
    rd_http_options_t opts = {
        .host = "127.0.0.1",
        .port = 0,
        .max_body_bytes = MAX_BODY,
        .handler = on_request,
        .handler_ctx = &t,
        .keep_headers = true,
    };
    assert_int_equal(rd_http_server_start(&t.loop, &opts, &t.server), 0);
    t.port = rd_http_server_port(t.server);
    assert_true(t.port > 0);
    return 0;
}

static void stop_server(void)
{
    rd_http_server_stop(t.server, on_drained, &t);
    t.server = NULL;
    run_until(drained, NULL);
    assert_int_equal(t.drained_calls, 1);
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (t.clients[i]) client_close(t.clients[i]);
    if (t.server) stop_server();
    uv_close((uv_handle_t *)&t.watchdog, NULL);
    uv_close((uv_handle_t *)&t.release_timer, NULL);
    uv_run(&t.loop, UV_RUN_DEFAULT);
    assert_int_equal(t.drained_calls, 1);
    assert_int_equal(uv_loop_close(&t.loop), 0);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Cases                                                              */
/* ------------------------------------------------------------------ */

static void test_get_and_post(void **state)
{
    (void)state;
    response_t r;
    client_t *cl = client_open();
    client_sends(cl, "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc \r\n\r\n");
    read_response(cl, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "method=GET path=/hello query=- body=0: ct=- auth=Bearer abc");
    assert_string_equal(header_value(&r, "Content-Length"), "59");
    assert_string_equal(header_value(&r, "Content-Type"), "text/plain");
    assert_string_equal(header_value(&r, "X-Test"), "1");
    assert_null(header_value(&r, "Connection"));

    client_sends(cl, "POST /items HTTP/1.1\r\nHost: x\r\ncontent-TYPE: application/json\r\n"
                     "Content-Length: 7\r\n\r\n{\"a\":1}");
    read_response(cl, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body,
                        "method=POST path=/items query=- body=7:{\"a\":1} ct=application/json auth=-");
    assert_int_equal(t.handler_calls, 2);
    assert_int_equal(rd_http_server_in_flight(t.server), 0);
}

static void test_keep_alive_and_close(void **state)
{
    (void)state;
    response_t r;
    client_t *cl = client_open();
    client_sends(cl, "GET /one HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/one "));
    client_sends(cl, "GET /two HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/two "));
    assert_string_equal(header_value(&r, "Connection"), "close");
    expect_closed(cl);

    /* HTTP/1.0 closes unless asked to keep the connection. */
    cl = client_open();
    client_sends(cl, "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    read_response(cl, &r);
    assert_string_equal(header_value(&r, "Connection"), "keep-alive");
    client_sends(cl, "GET /b HTTP/1.0\r\n\r\n");
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/b "));
    assert_string_equal(header_value(&r, "Connection"), "close");
    expect_closed(cl);
}

static void test_pipelined(void **state)
{
    (void)state;
    response_t r;
    client_t *cl = client_open();
    client_sends(cl, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
                     "POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                     "GET /3 HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/1 "));
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/2 query=- body=3:abc"));
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/3 "));

    /* The second request waits for the first, deferred, one. */
    t.handler_calls = 0;
    client_sends(cl, "GET /defer HTTP/1.1\r\nHost: x\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n");
    run_until(have_deferred, NULL);
    assert_int_equal(t.handler_calls, 1);
    assert_int_equal(rd_http_server_in_flight(t.server), 1);
    assert_int_equal(cl->rx.len, 0);
    release_deferred();
    read_response(cl, &r);
    assert_string_equal(r.body, "deferred");
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/after "));
    assert_int_equal(t.handler_calls, 2);
    assert_true(t.deferred_alive);
    assert_int_equal(rd_http_server_in_flight(t.server), 0);
}

static void test_chunked_body(void **state)
{
    (void)state;
    response_t r;
    client_t *cl = client_open();
    client_sends(cl, "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     "Content-Type: text/plain\r\n\r\n5\r\nhello\r\n");
    client_sends(cl, "6\r\n world\r\n0\r\n\r\n");
    read_response(cl, &r);
    assert_string_equal(r.body, "method=POST path=/c query=- body=11:hello world ct=text/plain auth=-");
}

static void test_body_too_large(void **state)
{
    (void)state;
    response_t r;
    client_t *cl = client_open();
    client_sends(cl, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n");
    read_response(cl, &r);
    expect_problem(&r, 413, "/problems/payload-too-large");
    assert_string_equal(r.body, "{\"type\":\"/problems/payload-too-large\",\"title\":\"Payload Too "
                                "Large\",\"status\":413,\"detail\":\"request body exceeds 1024 "
                                "bytes\",\"instance\":\"/upload\"}");
    expect_closed(cl);

    /* Without a Content-Length the bytes are counted. */
    cl = client_open();
    char chunk[700];
    memset(chunk, 'x', sizeof chunk);
    rd_buf_t req = RD_BUF_INIT;
    rd_buf_puts(&req, "POST /upload?x=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 2; i++) {
        rd_buf_printf(&req, "%zx\r\n", sizeof chunk);
        rd_buf_append(&req, chunk, sizeof chunk);
        rd_buf_puts(&req, "\r\n");
    }
    rd_buf_puts(&req, "0\r\n\r\n");
    client_send(cl, req.data, req.len);
    rd_buf_free(&req);
    read_response(cl, &r);
    expect_problem(&r, 413, "/problems/payload-too-large");
    assert_non_null(strstr(r.body, "\"instance\":\"/upload\""));
    expect_closed(cl);
    assert_int_equal(t.handler_calls, 0);
}

static void test_malformed(void **state)
{
    (void)state;
    response_t r;
    client_t *cl = client_open();
    client_sends(cl, "GET /x HTTP/1.1\r\nBad Header\r\n\r\n");
    read_response(cl, &r);
    expect_problem(&r, 400, "/problems/malformed-request");
    assert_non_null(strstr(r.body, "\"title\":\"Malformed Request\""));
    expect_closed(cl);

    cl = client_open();
    client_sends(cl, "POST /x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n");
    read_response(cl, &r);
    expect_problem(&r, 501, "/problems/not-implemented");
    expect_closed(cl);

    cl = client_open();
    client_sends(cl, "POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nabc");
    read_response(cl, &r);
    expect_problem(&r, 501, "/problems/not-implemented");
    expect_closed(cl);
    assert_int_equal(t.handler_calls, 0);
}

/* RFC 9112 3.2: an HTTP/1.1 request without Host, or with two, is 400
 * and never reaches the handler; HTTP/1.0 may omit it. */
static void test_host_required_in_http11(void **state)
{
    (void)state;
    response_t r;
    static const char *const bad[] = {
        "GET /x HTTP/1.1\r\n\r\n",
        "POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        "GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET /x HTTP/1.1\r\nX-Host: a\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        client_t *cl = client_open();
        client_sends(cl, bad[i]);
        read_response(cl, &r);
        expect_problem(&r, 400, "/problems/malformed-request");
        assert_non_null(strstr(r.body, "Host"));
        expect_closed(cl);
    }
    assert_int_equal(t.handler_calls, 0);

    client_t *cl = client_open();
    client_sends(cl, "GET /ten HTTP/1.0\r\n\r\n");
    read_response(cl, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "path=/ten "));
    expect_closed(cl);
    cl = client_open();
    client_sends(cl, "GET /lower HTTP/1.1\r\nhOsT: x\r\n\r\n");
    read_response(cl, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(t.handler_calls, 2);
}

static void test_huge_header(void **state)
{
    (void)state;
    response_t r;
    client_t *cl = client_open();
    rd_buf_t req = RD_BUF_INIT;
    rd_buf_puts(&req, "GET /big HTTP/1.1\r\nHost: x\r\nX-Big: ");
    for (int i = 0; i < 20 * 1024; i++) rd_buf_append(&req, "a", 1);
    rd_buf_puts(&req, "\r\n\r\n");
    client_send(cl, req.data, req.len);
    rd_buf_free(&req);
    read_response(cl, &r);
    expect_problem(&r, 431, "/problems/request-header-too-large");
    assert_non_null(strstr(r.body, "\"instance\":\"/big\""));
    expect_closed(cl);
    assert_int_equal(t.handler_calls, 0);
}

static void test_query_string(void **state)
{
    (void)state;
    response_t r;
    client_t *cl = client_open();
    client_sends(cl, "GET /search?q=a%20b&x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/search query=q=a%20b&x=1 body"));
    client_sends(cl, "GET /empty-query? HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/empty-query query= body"));
    client_sends(cl, "GET http://example.com/abs?z HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/abs query=z body"));
}

/* keep_headers: every header line reaches the handler, names lowercased,
 * values trimmed, repeats kept in order, long names whole (the SQS endpoint
 * signs and reads headers the API never looks at). */
static void test_all_headers_kept(void **state)
{
    (void)state;
    response_t r;
    client_t *cl = client_open();
    client_sends(cl, "POST /headers HTTP/1.1\r\nHost: h:1\r\nX-Amz-Target:  AmazonSQS.SendMessage \r\n"
                     "X-Amz-A-Rather-Long-Header-Name-Past-24-Bytes: v1\r\nX-Dup: a\r\nx-dup: b\r\n"
                     "X-Empty:\r\nContent-Length: 2\r\n\r\n{}");
    read_response(cl, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "host=h:1|x-amz-target=AmazonSQS.SendMessage|"
                                "x-amz-a-rather-long-header-name-past-24-bytes=v1|x-dup=a|x-dup=b|"
                                "x-empty=|content-length=2|count=7 target=AmazonSQS.SendMessage "
                                "method=POST");
    /* The next request on the connection starts afresh. */
    client_sends(cl, "GET /headers HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(cl, &r);
    assert_string_equal(r.body, "host=x|count=1 target=- method=GET");
}

static void test_head_and_204(void **state)
{
    (void)state;
    response_t r;
    client_t *cl = client_open();
    client_sends(cl, "HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response_as(cl, true, &r);
    assert_int_equal(r.status, 200);
    const char *expected = "method=HEAD path=/h query=- body=0: ct=- auth=-";
    char len[16];
    snprintf(len, sizeof len, "%zu", strlen(expected));
    assert_string_equal(header_value(&r, "Content-Length"), len);
    assert_int_equal(r.body_len, 0);

    /* No stray body bytes precede the next response. */
    client_sends(cl, "GET /empty HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(cl, &r);
    assert_int_equal(r.status, 204);
    assert_null(header_value(&r, "Content-Length"));
    client_sends(cl, "GET /h HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(cl, &r);
    assert_int_equal(strncmp(r.head, "HTTP/1.1 200 OK\r\n", 17), 0);
    assert_string_equal(r.body, "method=GET path=/h query=- body=0: ct=- auth=-");
}

static void test_expect_continue(void **state)
{
    (void)state;
    response_t r;
    client_t *cl = client_open();
    client_sends(cl, "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    read_response(cl, &r);
    assert_int_equal(r.status, 100);
    assert_int_equal(t.handler_calls, 0);
    client_sends(cl, "12345");
    read_response(cl, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "body=5:12345"));

    client_sends(cl, "POST /e HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Length: 5\r\n\r\n");
    read_response(cl, &r);
    expect_problem(&r, 417, "/problems/expectation-failed");
    expect_closed(cl);
}

static void test_disconnect_while_pending(void **state)
{
    (void)state;
    client_t *cl = client_open();
    client_sends(cl, "GET /defer HTTP/1.1\r\nHost: x\r\n\r\n");
    run_until(have_deferred, NULL);
    assert_int_equal(rd_http_server_in_flight(t.server), 1);
    assert_true(rd_http_exchange_client_alive(t.deferred));
    client_close(cl);
    run_until(deferred_client_gone, NULL);
    assert_int_equal(rd_http_server_in_flight(t.server), 1);
    release_deferred();
    int want = 1;
    run_until(deferred_done, &want);
    assert_false(t.deferred_alive);

    /* The server still serves others. */
    response_t r;
    cl = client_open();
    client_sends(cl, "GET /still HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(cl, &r);
    assert_int_equal(r.status, 200);
}

/* HTTP/1.1 lets a client half-close after its request: what it sent is
 * answered in full, then the connection ends. */
static void test_half_close_gets_response(void **state)
{
    (void)state;
    response_t r;
    /* Answered at once. */
    client_t *cl = client_open();
    client_sends(cl, "GET /now HTTP/1.1\r\nHost: x\r\n\r\n");
    client_half_close(cl);
    read_response(cl, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "path=/now "));
    expect_closed(cl);
    client_close(cl);

    /* Pipelined, then half-closed: every request is answered, in order. */
    cl = client_open();
    client_sends(cl, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
                     "POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
    client_half_close(cl);
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/1 "));
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/2 query=- body=3:abc"));
    expect_closed(cl);
    client_close(cl);

    /* The first of three pipelined requests is answered later: all three
     * are answered after the half-close, in order. */
    cl = client_open();
    client_sends(cl, "GET /defer HTTP/1.1\r\nHost: x\r\n\r\n"
                     "GET /2 HTTP/1.1\r\nHost: x\r\n\r\n"
                     "GET /3 HTTP/1.1\r\nHost: x\r\n\r\n");
    run_until(have_deferred, NULL);
    client_half_close(cl);
    run_until(deferred_client_gone, NULL);
    release_deferred();
    read_response(cl, &r);
    assert_string_equal(r.body, "deferred");
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/2 "));
    read_response(cl, &r);
    assert_non_null(strstr(r.body, "path=/3 "));
    expect_closed(cl);
    client_close(cl);

    /* Answered later (a backend callback): the half-close is seen first,
     * the response still arrives and counts as delivered. */
    cl = client_open();
    client_sends(cl, "GET /defer HTTP/1.1\r\nHost: x\r\n\r\n");
    run_until(have_deferred, NULL);
    client_half_close(cl);
    run_until(deferred_client_gone, NULL);
    t.want_delivery = true;
    release_deferred();
    read_response(cl, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "deferred");
    assert_string_equal(header_value(&r, "Connection"), "close");
    expect_closed(cl);
    run_until(delivery_told, NULL);
    assert_int_equal(t.delivery_calls, 1);
    assert_true(t.delivered);
    assert_int_equal(rd_http_server_in_flight(t.server), 0);
}

/* Answers /defer on a new connection and reads the response, leaving it
 * open. */
static client_t *deferred_answer_read(void)
{
    response_t r;
    client_t *cl = client_open();
    client_sends(cl, "GET /defer HTTP/1.1\r\nHost: x\r\n\r\n");
    run_until(have_deferred, NULL);
    release_deferred();
    read_response(cl, &r);
    assert_string_equal(r.body, "deferred");
    return cl;
}

/* rd_http_on_delivery says whether the response reached the client: yes
 * once the client sends again or closes, no for one that reset the
 * connection, before the answer was written or after (a close with the
 * answer unread sends a reset, not a FIN). */
static void test_delivery_is_reported(void **state)
{
    (void)state;
    response_t r;
    t.want_delivery = true;
    client_t *cl = deferred_answer_read();
    /* In the client's socket, it says nothing yet; the next request does. */
    client_sends(cl, "GET /defer HTTP/1.1\r\nHost: x\r\n\r\n");
    run_until(have_deferred, NULL);
    run_until(delivery_told, NULL);
    assert_int_equal(t.delivery_calls, 1);
    assert_true(t.delivered);

    /* The client resets while its request is pending. */
    t.delivery_calls = 0;
    t.delivered = true;
    client_reset(cl);
    run_until(deferred_client_gone, NULL);
    release_deferred();
    run_until(delivery_told, NULL);
    assert_int_equal(t.delivery_calls, 1);
    assert_false(t.delivered);
    int want = 2;
    run_until(deferred_done, &want);

    /* Written, then the client closes (FIN): delivered. */
    t.delivery_calls = 0;
    t.delivered = false;
    cl = deferred_answer_read();
    client_close(cl);
    run_until(delivery_told, NULL);
    assert_int_equal(t.delivery_calls, 1);
    assert_true(t.delivered);

    /* Written, then the client resets: not delivered. */
    t.delivery_calls = 0;
    t.delivered = true;
    cl = deferred_answer_read();
    client_reset(cl);
    run_until(delivery_told, NULL);
    assert_int_equal(t.delivery_calls, 1);
    assert_false(t.delivered);

    /* The server still serves others. */
    cl = client_open();
    client_sends(cl, "GET /still HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(cl, &r);
    assert_int_equal(r.status, 200);
}

static void test_stop_drains(void **state)
{
    (void)state;
    response_t r;
    client_t *busy = client_open();
    client_t *idle = client_open();
    client_sends(idle, "GET /i HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(idle, &r);
    client_sends(busy, "GET /defer HTTP/1.1\r\nHost: x\r\n\r\n");
    run_until(have_deferred, NULL);

    rd_http_server_t *server = t.server;
    rd_http_server_stop(server, on_drained, &t);
    t.server = NULL;
    expect_closed(idle);
    assert_int_equal(t.drained_calls, 0);
    assert_int_equal(rd_http_server_in_flight(server), 1);

    release_deferred();
    read_response(busy, &r);
    assert_string_equal(r.body, "deferred");
    assert_string_equal(header_value(&r, "Connection"), "close");
    expect_closed(busy);
    run_until(drained, NULL);
    assert_int_equal(t.drained_calls, 1);
}

static void test_start_failure(void **state)
{
    (void)state;
    rd_http_options_t opts = {
        .host = "127.0.0.1",
        .port = t.port,
        .max_body_bytes = MAX_BODY,
        .handler = on_request,
    };
    rd_http_server_t *other = (rd_http_server_t *)&t;
    assert_int_equal(rd_http_server_start(&t.loop, &opts, &other), UV_EADDRINUSE);
    assert_ptr_equal(other, (rd_http_server_t *)&t);
    opts.host = "not-an-address";
    assert_int_equal(rd_http_server_start(&t.loop, &opts, &other), UV_EINVAL);
}

int main(void)
{
    /* As in the daemon: a write to a reset peer must be an error, not a signal. */
    signal(SIGPIPE, SIG_IGN);
    rd_alloc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_get_and_post, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_alive_and_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunked_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_too_large, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_required_in_http11, setup, teardown),
        cmocka_unit_test_setup_teardown(test_huge_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_string, setup, teardown),
        cmocka_unit_test_setup_teardown(test_all_headers_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_head_and_204, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expect_continue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disconnect_while_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_close_gets_response, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delivery_is_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_drains, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_failure, setup, teardown),
    };
    return cmocka_run_group_tests_name("http", tests, NULL, NULL);
}
