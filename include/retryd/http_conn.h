/* http_conn.h - what http.c (connections, parsing) and http_write.c (the
 * write queue and the byte budgets) share: the connection and server
 * structs and the calls of http.c into http_write.c. http_write.c sits
 * below: it reaches back only through the server's close_conn and
 * resume_conn. Internal to the HTTP server: only those two files include it
 * (and llhttp through it). */
#ifndef RETRYD_HTTP_CONN_H
#define RETRYD_HTTP_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <llhttp.h>

#include "retryd/buf.h"
#include "retryd/http.h"

#define RD_HTTP_MAX_HEAD_BYTES (16 * 1024)        /* request line + headers (and trailers) */
#define RD_HTTP_MAX_CONNS_DEFAULT 4096
#define RD_HTTP_IDLE_TIMEOUT_MS_DEFAULT 60000     /* without a complete request */
#define RD_HTTP_LINGER_MS 2000                    /* reading and discarding after an error reply */
#define RD_HTTP_SWEEP_MS 1000                     /* granularity of both timeouts above */
#define RD_HTTP_READ_BUF_BYTES (64 * 1024)
#define RD_HTTP_MAX_BUFFERED_BYTES (64 * 1024)    /* input held while an exchange is pending */
#define RD_HTTP_MAX_WRITE_QUEUE_BYTES (1024 * 1024)
#define RD_HTTP_KEEP_BUF_BYTES (64 * 1024)        /* larger per-request buffers are released */
#define RD_HTTP_MAX_PENDING_BODY_DEFAULT ((size_t)256 << 20)
#define RD_HTTP_MAX_PENDING_OUTPUT_DEFAULT ((size_t)256 << 20)
#define RD_HTTP_FAIL_REFUSED 1                    /* fail_status: the head check said no */
#define RD_HTTP_BACKLOG 511

/* The request headers we keep; every other header is only counted. */
typedef enum rd_http_header_id {
    RD_HDR_CONTENT_TYPE = 0,
    RD_HDR_AUTHORIZATION,
    RD_HDR_EXPECT,
    RD_HDR_TRANSFER_ENCODING,
    RD_HDR_HOST,
    RD_HDR_COUNT,
    RD_HDR_OTHER = RD_HDR_COUNT,
} rd_http_header_id_t;


typedef struct rd_http_conn rd_http_conn_t;

typedef struct rd_http_conn_list {
    rd_http_conn_t *head;
    rd_http_conn_t *tail;
} rd_http_conn_list_t;

struct rd_http_exchange {
    rd_http_conn_t *conn;
};

struct rd_http_conn {
    uv_tcp_t tcp;                 /* handle.data points back here */
    uv_shutdown_t shutdown_req;
    llhttp_t parser;
    rd_http_server_t *server;
    struct rd_http_exchange ex;
    rd_http_request_t req;

    rd_buf_t url;
    rd_buf_t body;
    rd_buf_t in;                  /* unparsed input kept while parsing is suspended */
    rd_buf_t header[RD_HDR_COUNT];
    unsigned header_seen;         /* bit per rd_http_header_id_t */
    unsigned te_headers;          /* Transfer-Encoding lines seen */
    unsigned host_headers;        /* Host lines seen */
    char field[24];               /* current header name, if short enough to matter */
    size_t field_len;
    rd_http_header_id_t cur_header;
    rd_buf_t all_headers;         /* server->keep_headers: "name\0value\0"... (names lowercased) */
    size_t all_headers_count;
    bool in_value;                /* all_headers: a value is being appended */
    size_t head_bytes;
    size_t path_len;              /* url split, set at on_url_complete */
    bool has_query;
    int fail_status;              /* set by a callback that returns HPE_USER */
    rd_http_refusal_t refusal;    /* fail_status RD_HTTP_FAIL_REFUSED: what to answer */
    size_t body_counted;          /* bytes of this body in server->pending_body_bytes */
    size_t out_bytes;             /* bytes of this connection's writes not yet done */
    bool out_counted;             /* out_bytes are in server->pending_output_bytes */
    bool out_listed;              /* on server->out */
    rd_http_conn_t *out_prev;     /* server->out: connections with output queued */
    rd_http_conn_t *out_next;

    bool headers_done;            /* further header callbacks are trailers */
    bool pending;                 /* handler called, rd_http_respond not yet */
    bool in_dispatch;             /* inside the handler call */
    bool feeding_in;              /* conn_feed is parsing from c->in */
    bool keep_alive;              /* of the current request */
    bool http10;
    bool is_head;
    bool client_gone;             /* reset or failed: nothing more reaches the client */
    bool peer_eof;                /* the client closed its sending side (perhaps only that) */
    bool write_blocked;           /* parsing suspended until writes drain */
    bool reading;
    bool shutting;                /* uv_shutdown issued: final response on its way */
    bool linger_wanted;
    bool lingering;               /* write side closed, discarding input until EOF */
    bool closing;                 /* uv_close issued */
    unsigned writes_pending;
    rd_http_delivery_fn on_delivery;  /* for the pending exchange's response, or NULL */
    void *delivery_arg;
    rd_http_delivery_fn on_lost;  /* a response that never got to a write: told at close */
    void *lost_arg;
    /* A watched response written to the socket, not yet shown read: the
     * client's next bytes or a close without a reset say it was; a reset
     * first says it was not (rd_http_settle_written). */
    rd_http_delivery_fn on_written;
    void *written_arg;
    bool peer_reset;              /* a read or write failed: the client reset */

    rd_http_conn_list_t *list;    /* idle or linger list, or NULL */
    rd_http_conn_t *prev;
    rd_http_conn_t *next;
    uint64_t since_ms;            /* loop time of entering the list */
};

struct rd_http_server {
    uv_loop_t *loop;
    /* http.c's, for http_write.c: close a connection (idempotent; a pending
     * exchange's answer is dropped when it comes), and go on parsing what a
     * connection holds once its writes have drained. */
    void (*close_conn)(rd_http_conn_t *c);
    void (*resume_conn)(rd_http_conn_t *c);
    uv_tcp_t listener;
    uv_timer_t sweep;
    rd_http_handler_fn handler;
    rd_http_head_fn on_head;
    rd_http_too_large_fn on_too_large;
    void *handler_ctx;
    bool keep_headers;            /* rd_http_options_t.keep_headers */
    size_t max_body_bytes;
    size_t max_pending_body_bytes;
    size_t pending_body_bytes;    /* bodies being read or held by a pending exchange */
    size_t max_pending_output_bytes;
    size_t pending_output_bytes;  /* writes not yet done, of connections not closed */
    rd_http_conn_t *out;          /* connections with pending output, any order */
    unsigned long long refused_at_head;      /* the head check said no (a wrong token) */
    unsigned long long refused_body_budget;  /* past max_pending_body_bytes */
    unsigned long long slow_readers_closed;  /* past max_pending_output_bytes */
    size_t max_connections;
    uint64_t idle_timeout_ms;
    size_t conn_count;            /* accepted connections, not counting rejected ones */
    size_t handles;               /* open handles of ours: listener, timer, sockets */
    size_t in_flight;
    bool stopping;
    bool sweep_closing;
    void (*on_drained)(void *arg);
    void *drained_arg;
    rd_http_conn_list_t idle;     /* oldest first: no pending exchange */
    rd_http_conn_list_t linger;
    time_t date_sec;
    char date[40];
    /* One read buffer for all connections: libuv hands it to read_cb before the
     * next alloc_cb, and whatever must outlive read_cb is copied into conn->in. */
    char read_buf[RD_HTTP_READ_BUF_BYTES];
};

typedef struct rd_http_write {
    uv_write_t req;
    rd_http_conn_t *conn;
    rd_http_delivery_fn on_delivery;  /* told whether these bytes reached the socket */
    void *delivery_arg;
    size_t len;
    char data[];
} rd_http_write_t;

/* ---- http_write.c: what connections hold ---- */

/* The request body of c no longer counts against --max-pending-body-bytes. */
void rd_http_body_release(rd_http_conn_t *c);
/* Counts n more bytes of c's body; false when that would pass the budget. */
bool rd_http_body_count(rd_http_conn_t *c, size_t n);
/* A closed connection's output no longer counts against the output budget. */
void rd_http_out_release(rd_http_conn_t *c);

/* ---- http_write.c: writing ---- */

/* Tells the written response's watcher (if any) delivered, once c's client
 * sent again or c closes without a reset; not delivered, once it reset. */
void rd_http_settle_written(rd_http_conn_t *c, bool delivered);
/* Queues w (len bytes of w->data, w owned from here) on c's socket; -1 when c
 * was closed for it (its delivery callback is told at the close). */
int rd_http_conn_write(rd_http_conn_t *c, rd_http_write_t *w, size_t len);
/* Writes one response (status line, Date, Content-Length, Content-Type,
 * Connection, extra_headers, body; no body for HEAD, 204 and 304); as
 * rd_http_conn_write. */
int rd_http_conn_send(rd_http_conn_t *c, int status, const char *content_type,
                      const char *extra_headers, const char *body, size_t body_len,
                      bool keep_alive, bool head_only, rd_http_delivery_fn on_delivery,
                      void *delivery_arg);

#endif
