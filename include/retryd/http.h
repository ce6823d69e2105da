/* http.h - the HTTP/1.1 server: bytes in, one request at a time per
 * connection, keep-alive, responses out. Only http.c includes the parser.
 *
 * Lifetime: the server calls the handler once per complete request. The
 * handler (or a callback it starts) must call rd_http_respond exactly once for
 * that exchange; until then the exchange and the request it points to stay
 * valid, even if the client has gone away (the response is then dropped).
 * Requests pipelined on one connection are answered in order: the next one is
 * parsed only after the current one was answered. */
#ifndef RETRYD_HTTP_H
#define RETRYD_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

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
} rd_http_request_t;

typedef struct rd_http_exchange rd_http_exchange_t;
typedef struct rd_http_server rd_http_server_t;

typedef void (*rd_http_handler_fn)(rd_http_exchange_t *ex, const rd_http_request_t *req,
                                   void *ctx);

typedef struct rd_http_options {
    const char *host;          /* e.g. "127.0.0.1" */
    int port;                  /* 0 picks a free port (see rd_http_server_port) */
    size_t max_body_bytes;     /* larger bodies get 413 without reaching the handler */
    size_t max_connections;    /* 0: 4096; past it a new connection is closed at once */
    uint64_t idle_timeout_ms;  /* 0: 60 s; a connection without a complete request for
                                  this long is closed (idle keep-alive and slow senders) */
    rd_http_handler_fn handler;
    void *handler_ctx;
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

/* Sends the response and ends the exchange (ex is invalid afterwards).
 * extra_headers is NULL or complete header lines, each ending in "\r\n".
 * The body is copied. */
void rd_http_respond(rd_http_exchange_t *ex, int status, const char *content_type,
                     const char *extra_headers, const char *body, size_t body_len);

/* False once the client closed its side; the handler must still respond. */
bool rd_http_exchange_client_alive(const rd_http_exchange_t *ex);

/* The reason phrase for a status code ("Not Found"), "Unknown" otherwise. */
const char *rd_http_reason(int status);

#endif
