/* coalesce.h - settle-and-claim requests of one queue sent together
 * (docs/coalescing.md): while a settle_claim call for a queue is in flight,
 * the next requests for that queue wait in its line; when it returns, they
 * all go out, those in a row that share a lease and a worker in one call,
 * and each answer is split among its requests in their order. One request alone is
 * sent at once, as before; only requests that would have queued behind
 * Redis wait, and they then share one function call's fixed cost.
 *
 * Each request's callback runs exactly once, with its own settlements'
 * outcomes and at most its count of the claimed messages, or with the
 * combined call's failure. */
#ifndef RETRYD_COALESCE_H
#define RETRYD_COALESCE_H

#include <stddef.h>

#include "retryd/buf.h"
#include "retryd/message.h"
#include "retryd/store.h"

typedef struct rd_coalescer rd_coalescer_t;

/* Borrows store, which must outlive it. */
rd_coalescer_t *rd_coalescer_new(rd_store_t *store);

/* Frees co. Requests still waiting in a line are dropped without their
 * callbacks (call only when nothing can be waiting: the HTTP server has
 * drained). NULL is a no-op. */
void rd_coalescer_free(rd_coalescer_t *co);

/* rd_store_settle_claim through co: the same arguments, the same result.
 * items and worker are copied when the request has to wait. Returns -1 when
 * the request is refused (bad sizes) or, sent at once, could not be sent
 * (then cb is not called); else 0. */
int rd_coalescer_settle_claim(rd_coalescer_t *co, rd_store_queue_t q, rd_lease_t lease,
                              int count, const char *worker, size_t n,
                              const rd_settlement_t *items, rd_store_settled_cb cb, void *arg);

/* Appends the two counters in the Prometheus text format (/metrics). */
void rd_coalescer_render_metrics(const rd_coalescer_t *co, rd_buf_t *out);

#endif
