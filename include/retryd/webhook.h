/* webhook.h - HTTP POSTs of small JSON bodies without blocking the loop:
 * libcurl's multi-socket interface driven by libuv (a uv_poll_t per socket
 * libcurl opens, one uv_timer_t for its timeouts). Used by the alert sender
 * (alerts.h); knows nothing of alerts.
 *
 * Same async rule as the rest of retryd: rd_webhook_post either returns -1
 * and its callback never runs, or returns 0 and its callback runs exactly
 * once, from the loop, unless rd_webhook_close aborts the transfer first. */
#ifndef RETRYD_WEBHOOK_H
#define RETRYD_WEBHOOK_H

#include <stddef.h>
#include <uv.h>

typedef struct rd_webhook rd_webhook_t;

typedef struct rd_webhook_result {
    long status;                /* the HTTP status, 0 when no answer came */
    const char *error;          /* why no answer came (libcurl's text), else NULL */
} rd_webhook_result_t;

typedef void (*rd_webhook_cb)(const rd_webhook_result_t *res, void *arg);

/* NULL when libcurl cannot be set up. */
rd_webhook_t *rd_webhook_new(uv_loop_t *loop);

/* POSTs body (copied) to url with Content-Type: application/json; the whole
 * exchange, connect included, is bounded by timeout_ms. Redirects are not
 * followed; only http and https are allowed. */
int rd_webhook_post(rd_webhook_t *w, const char *url, const char *body, size_t len,
                    long timeout_ms, rd_webhook_cb cb, void *arg);

/* Aborts every transfer in flight; their callbacks do not run. */
void rd_webhook_abort(rd_webhook_t *w);

/* Aborts every transfer in flight (their callbacks do not run), closes the
 * handles; on_closed (may be NULL) runs once from the loop, then w is freed. */
void rd_webhook_close(rd_webhook_t *w, void (*on_closed)(void *arg), void *arg);

#endif
