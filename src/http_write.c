/* http_write.c - the HTTP server's output: responses written to the
 * socket, the write queue's delivery reports, and the byte budgets of what
 * connections hold (bodies being read, answers not yet taken by their
 * sockets), with the closing of slow readers past the output bound. */
#include "retryd/http_conn.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"
#include "retryd/log.h"

/* ------------------------------------------------------------------ */
/* What connections hold: bodies being read, answers not yet sent    */
/* ------------------------------------------------------------------ */

void rd_http_body_release(rd_http_conn_t *c)
{
    assert(c->server->pending_body_bytes >= c->body_counted);
    c->server->pending_body_bytes -= c->body_counted;
    c->body_counted = 0;
}

/* Counts n more bytes of c's body; false when that would pass the budget. */
bool rd_http_body_count(rd_http_conn_t *c, size_t n)
{
    rd_http_server_t *s = c->server;
    if (n > s->max_pending_body_bytes - s->pending_body_bytes) return false;
    s->pending_body_bytes += n;
    c->body_counted += n;
    return true;
}

static void out_unlist(rd_http_conn_t *c)
{
    if (!c->out_listed) return;
    if (c->out_prev) c->out_prev->out_next = c->out_next;
    else c->server->out = c->out_next;
    if (c->out_next) c->out_next->out_prev = c->out_prev;
    c->out_prev = c->out_next = NULL;
    c->out_listed = false;
}

/* A closed connection's output is dropped with it (its writes are cancelled,
 * or, while its exchange is pending, freed when it is answered): no longer
 * counted against the budget. */
void rd_http_out_release(rd_http_conn_t *c)
{
    if (!c->out_counted) return;
    assert(c->server->pending_output_bytes >= c->out_bytes);
    c->server->pending_output_bytes -= c->out_bytes;
    c->out_counted = false;
    out_unlist(c);
}

/* Past max_pending_output_bytes, closes the connections with the most bytes
 * their client has not taken, largest first, until the total fits: a client
 * that does not read cannot make the daemon hold its answers without bound.
 * Their answers count as not delivered (claims hand their messages back). */
static void shed_slow_readers(rd_http_server_t *s)
{
    while (s->pending_output_bytes > s->max_pending_output_bytes) {
        rd_http_conn_t *worst = NULL;
        size_t worst_unsent = 0;
        for (rd_http_conn_t *x = s->out; x; x = x->out_next) {
            size_t unsent = uv_stream_get_write_queue_size((uv_stream_t *)&x->tcp);
            if (unsent > worst_unsent) {
                worst = x;
                worst_unsent = unsent;
            }
        }
        if (worst == NULL) return;  /* what is left is in the sockets, freed next turn */
        rd_warn("http: closing a connection that does not read its answers: %zu bytes unsent, "
                "%zu queued on all connections (--max-pending-output-bytes %zu)",
                worst_unsent, s->pending_output_bytes, s->max_pending_output_bytes);
        s->slow_readers_closed++;
        s->close_conn(worst);
    }
}

/* ------------------------------------------------------------------ */
/* Writing                                                            */
/* ------------------------------------------------------------------ */

static const char *http_date(rd_http_server_t *s)
{
    time_t now = time(NULL);
    if (now != s->date_sec) {
        static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
        static const char months[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
        struct tm tm;
        gmtime_r(&now, &tm);
        snprintf(s->date, sizeof s->date, "%s, %02d %s %04d %02d:%02d:%02d GMT",
                 days[tm.tm_wday % 7], tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900,
                 tm.tm_hour, tm.tm_min, tm.tm_sec);
        s->date_sec = now;
    }
    return s->date;
}

static void on_write(uv_write_t *req, int status)
{
    rd_http_write_t *w = (rd_http_write_t *)req;
    rd_http_conn_t *c = w->conn;
    rd_http_delivery_fn done = w->on_delivery;
    void *done_arg = w->delivery_arg;
    size_t len = w->len;
    rd_free(w);
    assert(c->writes_pending > 0);
    c->writes_pending--;
    assert(c->out_bytes >= len);
    c->out_bytes -= len;
    if (c->out_counted) {
        c->server->pending_output_bytes -= len;
        if (c->out_bytes == 0) out_unlist(c);
    }
    if (status < 0 && status != UV_ECANCELED) {
        c->peer_reset = true;
        rd_http_settle_written(c, false);
    }
    if (status == 0 && done && !c->peer_reset) {
        /* Taken by the socket is not yet read by the client: one that closes
         * with the answer unread (which sends a reset, not a FIN) never got
         * it. Its next move decides. An earlier answer still waiting counts
         * as delivered: the client kept the connection for more. */
        rd_http_settle_written(c, true);
        c->on_written = done;
        c->written_arg = done_arg;
    } else if (done) {
        /* Cancelled by a close (UV_ECANCELED), failed, or written just
         * before a reset: not delivered. */
        done(false, done_arg);
    }
    if (c->closing) return;
    if (status < 0) {
        rd_debug("http: write failed: %s", uv_strerror(status));
        c->server->close_conn(c);
        return;
    }
    if (c->write_blocked && !c->shutting &&
        uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) <= RD_HTTP_MAX_WRITE_QUEUE_BYTES) {
        c->write_blocked = false;
        if (!c->pending) c->server->resume_conn(c);
    }
}

void rd_http_settle_written(rd_http_conn_t *c, bool delivered)
{
    rd_http_delivery_fn done = c->on_written;
    if (done == NULL) return;
    c->on_written = NULL;
    done(delivered, c->written_arg);
}

/* Queues bytes on the socket; the write request owns a copy. On failure the
 * connection is closed (its delivery callback, if any, is told so at the
 * close) and -1 returned; also when these bytes took the output queued on
 * all connections past its bound and this connection was the one closed
 * (its write is then cancelled: not delivered). */
int rd_http_conn_write(rd_http_conn_t *c, rd_http_write_t *w, size_t len)
{
    rd_http_server_t *s = c->server;
    w->conn = c;
    w->len = len;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    int r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (r < 0) {
        if (w->on_delivery) {
            c->on_lost = w->on_delivery;
            c->lost_arg = w->delivery_arg;
        }
        rd_free(w);
        rd_debug("http: write failed: %s", uv_strerror(r));
        c->peer_reset = true;
        rd_http_settle_written(c, false);
        c->server->close_conn(c);
        return -1;
    }
    c->writes_pending++;
    c->out_bytes += len;
    if (!c->out_counted) return 0;
    s->pending_output_bytes += len;
    if (!c->out_listed) {
        c->out_listed = true;
        c->out_prev = NULL;
        c->out_next = s->out;
        if (s->out) s->out->out_prev = c;
        s->out = c;
    }
    if (s->pending_output_bytes > s->max_pending_output_bytes) {
        shed_slow_readers(s);
        if (c->closing || c->client_gone) return -1;
    }
    return 0;
}

static char *put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

int rd_http_conn_send(rd_http_conn_t *c, int status, const char *content_type,
                      const char *extra_headers, const char *body, size_t body_len,
                      bool keep_alive, bool head_only, rd_http_delivery_fn on_delivery,
                      void *delivery_arg)
{
    /* RFC 9110 8.6: no Content-Length (and no body) on 204 and 304. HEAD gets
     * the length the body would have had. */
    bool no_length = status == 204 || status == 304;
    size_t send_body = (no_length || head_only) ? 0 : body_len;

    char line[128];
    int line_len = snprintf(line, sizeof line, "HTTP/1.1 %d %s\r\nDate: %s\r\n", status,
                            rd_http_reason(status), http_date(c->server));
    assert(line_len > 0 && (size_t)line_len < sizeof line);
    char length[48];
    int length_len = no_length ? 0
                               : snprintf(length, sizeof length, "Content-Length: %zu\r\n",
                                          body_len);
    const char *conn_hdr = "";
    if (!keep_alive) conn_hdr = "Connection: close\r\n";
    else if (c->http10) conn_hdr = "Connection: keep-alive\r\n";
    size_t ct_len = content_type ? strlen(content_type) : 0;
    size_t extra_len = extra_headers ? strlen(extra_headers) : 0;
    size_t conn_len = strlen(conn_hdr);

    size_t total = (size_t)line_len + (size_t)length_len + conn_len + extra_len + 2 + send_body +
                   (content_type ? ct_len + sizeof "Content-Type: \r\n" - 1 : 0);
    rd_http_write_t *w = rd_malloc(sizeof *w + total);
    w->on_delivery = on_delivery;
    w->delivery_arg = delivery_arg;
    char *p = w->data;
    p = put(p, line, (size_t)line_len);
    p = put(p, length, (size_t)length_len);
    if (content_type) {
        p = put(p, "Content-Type: ", 14);
        p = put(p, content_type, ct_len);
        p = put(p, "\r\n", 2);
    }
    p = put(p, conn_hdr, conn_len);
    p = put(p, extra_headers ? extra_headers : "", extra_len);
    p = put(p, "\r\n", 2);
    if (send_body) p = put(p, body, send_body);
    assert((size_t)(p - w->data) == total);
    return rd_http_conn_write(c, w, total);
}

const char *rd_http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
    }
}
