/* http.h - the HTTP/1.1 server: bytes in, one request at a time per
 * connection, keep-alive, responses out. Only http.c includes the parser.
 *
 * Lifetime: the server calls the handler once per complete request. The
 * handler (or a callback it starts) must call rd_http_respond exactly once for
 * that exchange; until then the exchange and the request it points to stay
 * valid, even if the client has gone away (the response is then dropped).
 * Requests pipelined on one connection are answered in order: the next one is
 * parsed only after the current one was answered.
 *
 * A client may half-close (shutdown(SHUT_WR)) after its requests, as HTTP/1.1
 * allows: every request received before its EOF is carried out and answered,
 * then the connection ends. Only a reset or a failed write means the client
 * is truly gone; rd_http_on_delivery tells a handler which it was. */
#ifndef RETRYD_HTTP_H
#define RETRYD_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "retryd/problem.h"

typedef enum rd_http_method {
    RD_HTTP_OTHER = 0,
    RD_HTTP_GET,
    RD_HTTP_HEAD,
    RD_HTTP_POST,
    RD_HTTP_PUT,
    RD_HTTP_PATCH,
    RD_HTTP_DELETE,
    RD_HTTP_OPTIONS,
} rd_http_method_t;

typedef struct rd_http_request {
    rd_http_method_t method;
    const char *path;          /* raw (still percent-encoded) path, no query */
    size_t path_len;
    const char *query;         /* raw query string without '?', or NULL */
    size_t query_len;
    const char *body;          /* request body (de-chunked), NUL-terminated */
    size_t body_len;
    const char *content_type;  /* header value or NULL */
    const char *authorization; /* header value or NULL */
    /* With rd_http_options_t.keep_headers: every header line, as header_count
     * pairs "name\0value\0" packed in headers (names lowercased, values with
     * their surrounding blanks removed, repeated names kept in order); else
     * NULL and 0. Read them with rd_http_request_header(_next). */
    const char *headers;
    size_t header_count;
    size_t headers_len;        /* bytes of headers */
} rd_http_request_t;

/* The value of the first header named lname (lowercase), or NULL (needs
 * keep_headers). */
const char *rd_http_request_header(const rd_http_request_t *req, const char *lname);
/* Iterates the headers: *pos 0 starts (a byte offset); returns false at the end. */
bool rd_http_request_header_next(const rd_http_request_t *req, size_t *pos, const char **name,
                                 const char **value);
/* "GET", "POST", ... ("OTHER" for RD_HTTP_OTHER). */
const char *rd_http_method_name(rd_http_method_t m);

typedef struct rd_http_exchange rd_http_exchange_t;
typedef struct rd_http_server rd_http_server_t;

typedef void (*rd_http_handler_fn)(rd_http_exchange_t *ex, const rd_http_request_t *req,
                                   void *ctx);

/* An answer a listener writes in its own format for a request the server
 * refuses before the handler (rd_http_head_fn, rd_http_too_large_fn).
 * headers (complete header lines, or NULL) and body are rd_malloc'd and the
 * server frees them; content_type is static. */
typedef struct rd_http_answer {
    int status;
    const char *content_type;
    char *headers;
    char *body;
    size_t body_len;
} rd_http_answer_t;

/* How a head check refuses a request (rd_http_head_fn): answer, when its
 * status is set, in the listener's own format; else problem+json of
 * problem, with detail and extra_headers (complete header lines, or NULL)
 * static strings. */
typedef struct rd_http_refusal {
    rd_problem_t problem;
    const char *detail;
    const char *extra_headers;
    rd_http_answer_t answer;
} rd_http_refusal_t;

/* Called when a request that has a body has its headers complete, before any
 * of the body is read and before 100 Continue is sent. head has method,
 * path, query, content_type and authorization (body NULL, body_len 0), valid
 * only during the call. Returns true to read the body and call the handler
 * as usual; false to refuse: the server answers *refusal at once, shuts its
 * sending side, reads and drops what the client still sends for at most
 * 2 s, and closes. Bodiless requests always go to the handler. */
typedef bool (*rd_http_head_fn)(const rd_http_request_t *head, void *ctx,
                                rd_http_refusal_t *refusal);

/* Called when a request's body is over max_body_bytes (its Content-Length
 * said so, or its chunks grew past it), before the server answers 413 and
 * closes. head as for rd_http_head_fn, with the headers kept when
 * keep_headers. Returns true with *out filled to answer that instead of the
 * problem+json 413; false to leave the 413. */
typedef bool (*rd_http_too_large_fn)(const rd_http_request_t *head, void *ctx,
                                     rd_http_answer_t *out);

typedef struct rd_http_options {
    const char *host;          /* e.g. "127.0.0.1" */
    int port;                  /* 0 picks a free port (see rd_http_server_port) */
    size_t max_body_bytes;     /* larger bodies get 413 without reaching the handler */
    size_t max_connections;    /* 0: 4096; past it a new connection is closed at once */
    uint64_t idle_timeout_ms;  /* 0: 60 s; a connection without a complete request for
                                  this long is closed (idle keep-alive and slow senders) */
    size_t max_pending_body_bytes;   /* 0: 256 MiB; the bodies being read (or held by a
                                        request not yet answered) on all connections at
                                        most: a body that would pass it gets 503 before it
                                        is read (its Content-Length counts from the headers) */
    size_t max_pending_output_bytes; /* 0: 256 MiB; answers written and not yet taken by
                                        their sockets, on all connections at most: past it
                                        the connections with the most unsent bytes are
                                        closed (their answers count as not delivered) */
    rd_http_head_fn on_head;   /* NULL: every request goes to the handler */
    rd_http_too_large_fn on_too_large; /* NULL: a body over the limit gets problem+json 413 */
    bool keep_headers;         /* keep every header (rd_http_request_t.headers) */
    rd_http_handler_fn handler;
    void *handler_ctx;         /* given to on_head and handler */
} rd_http_options_t;

/* Binds and starts listening. Returns 0, or a negative libuv error code (then
 * *out is untouched and nothing needs closing). */
int rd_http_server_start(uv_loop_t *loop, const rd_http_options_t *opts,
                         rd_http_server_t **out);

/* Serves an already connected stream socket as if it had been accepted
 * (tests, the fuzzer); the server owns it from then on. Returns 0, or a
 * negative libuv error and the caller keeps the socket. */
int rd_http_server_adopt(rd_http_server_t *server, uv_os_sock_t sock);

/* The bound port (useful after port 0). */
int rd_http_server_port(const rd_http_server_t *server);

/* Stops accepting, closes idle connections, lets in-flight exchanges finish
 * (each connection closes after its response). on_drained runs once, from the
 * loop, when no connection is left; then the server is freed. */
void rd_http_server_stop(rd_http_server_t *server, void (*on_drained)(void *arg), void *arg);

/* Number of exchanges waiting for rd_http_respond. */
size_t rd_http_server_in_flight(const rd_http_server_t *server);

/* Appends the server's Prometheus samples to out (buf.h): requests refused
 * at their headers, bodies being read, answers queued, slow readers closed. */
struct rd_buf;
void rd_http_server_render_metrics(const rd_http_server_t *server, struct rd_buf *out);

/* Sends the response and ends the exchange (ex is invalid afterwards).
 * extra_headers is NULL or complete header lines, each ending in "\r\n".
 * The body is copied. */
void rd_http_respond(rd_http_exchange_t *ex, int status, const char *content_type,
                     const char *extra_headers, const char *body, size_t body_len);

/* Responds with the problem+json document of p (rd_problem_body, its
 * instance the request's path) and ends the exchange: the one way every error
 * response leaves. detail and errs may be NULL; extra_headers as in
 * rd_http_respond (Allow, Retry-After, WWW-Authenticate). */
void rd_http_respond_problem(rd_http_exchange_t *ex, rd_problem_t p, const char *detail,
                             const rd_field_errors_t *errs, const char *extra_headers);

/* Whether a response reached the client: false when it could not be written
 * (the connection was reset, a write failed, or the connection was closed
 * first) or the client reset the connection after it was written but before
 * it sent more (a close with the answer unread sends a reset, not a FIN);
 * true once all of it was written and the client sent more on the
 * connection, or the connection closed without a reset. */
typedef void (*rd_http_delivery_fn)(bool delivered, void *arg);

/* Asks to be told whether the response of ex (the coming rd_http_respond)
 * is delivered: after rd_http_respond, cb runs exactly once, from the loop
 * (never from inside rd_http_respond), at the latest when the connection
 * closes. At most once per exchange, before
 * rd_http_respond. */
void rd_http_on_delivery(rd_http_exchange_t *ex, rd_http_delivery_fn cb, void *arg);

/* False once the client closed its side (EOF: a half-close or a close, which
 * cannot be told apart) or reset the connection; the handler must still
 * respond, and the response is still written unless the connection was
 * reset. Long-poll claims use it to stop waiting for a client that left. */
bool rd_http_exchange_client_alive(const rd_http_exchange_t *ex);

/* True only once the connection was reset or a write failed: no response can
 * reach the client (a half-close alone does not count; its answer is owed). */
bool rd_http_exchange_client_gone(const rd_http_exchange_t *ex);

/* The reason phrase for a status code ("Not Found"), "Unknown" otherwise. */
const char *rd_http_reason(int status);

#endif
