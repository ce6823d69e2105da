/* alerts.h - the alert sender (docs/reference.md "Alerts"; docs/dead-letters.md "Alert
 * webhooks"): POSTs one JSON event per death to the alert URL, reading each
 * queue's events stream through the consumer group `retryd-alerts` with the
 * library's alerts_take, alerts_ack and alerts_touch. At least once across
 * instances (entries a dead instance left pending are claimed back), never
 * twice by two healthy ones (each keeps its entries fresh). It only visits
 * the queues the timer round reports with undelivered alerts, or that
 * timer_take hands over (rd_alerts_wake); without --alert-url, only queues
 * with their own alert_url, holds a bounded number of events, and posts a bounded
 * number at once with a timeout: a slow receiver never slows the engine. */
#ifndef RETRYD_ALERTS_H
#define RETRYD_ALERTS_H

#include <uv.h>

#include "retryd/buf.h"
#include "retryd/store.h"

typedef struct rd_alerts rd_alerts_t;

typedef struct rd_alerts_options {
    const char *url;            /* --alert-url, or NULL: only queues' own alert_url */
    long long claim_ms;         /* --alert-claim-ms: pending this long with a silent
                                   instance, an entry is claimed back */
    long long timeout_ms;       /* --alert-timeout-ms: one POST, connect included */
} rd_alerts_options_t;

enum {
    RD_ALERTS_IN_FLIGHT_MAX = 16,    /* POSTs at once */
    RD_ALERTS_HELD_MAX = 256,        /* events held (posting or waiting to retry) */
    RD_ALERTS_TAKE = 16,             /* entries per alerts_take */
    RD_ALERTS_BACKOFF_MAX_MS = 60000,
};

/* NULL when libcurl cannot be set up. Borrows st until stopped: every call
 * to Redis is one of the store's alerts operations. */
rd_alerts_t *rd_alerts_start(uv_loop_t *loop, rd_store_t *st,
                             const rd_alerts_options_t *opts);

/* The timer round found undelivered alerts in queue q. */
void rd_alerts_wake(rd_alerts_t *a, rd_store_queue_t q);

/* Appends the retryd_alert_* families (Prometheus text) to out. */
void rd_alerts_render_metrics(const rd_alerts_t *a, rd_buf_t *out);

/* Stops taking entries and drops the events waiting for a retry (they stay
 * pending: another instance claims them back); POSTs in flight finish and
 * are acknowledged, or are aborted after a grace of at most 4 s. on_stopped
 * runs once from the loop, then a is freed. */
void rd_alerts_stop(rd_alerts_t *a, void (*on_stopped)(void *arg), void *arg);

#endif
