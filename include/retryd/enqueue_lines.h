/* enqueue_lines.h - single enqueues of one queue sent together
 * (docs/coalescing.md "Enqueues"): while an enqueue call for a queue is in
 * flight, the next single enqueues for that queue (from the HTTP API and
 * SendMessage alike) wait in its line, with copies of what they send; when
 * it returns, they go out in arrival order in one enqueue_many call (up to
 * RD_ENQUEUE_MANY_MAX of them and RD_ENQUEUE_MANY_BYTES of payloads and
 * attributes), and each gets its own item's result. One request alone is
 * sent at once, as a plain enqueue: only requests that would have queued
 * behind Redis wait, and they then share one function call's fixed cost.
 *
 * Each request's callback runs exactly once, with what rd_store_enqueue
 * would have answered it: its message (201, or the original of a
 * duplicate), its own refusal (NOT_FOUND, INVALID_STATE, TOO_LARGE), or the
 * shared call's failure (LOST: the outcome is unknown for each; UNAVAILABLE:
 * nothing was done). */
#ifndef RETRYD_ENQUEUE_LINES_H
#define RETRYD_ENQUEUE_LINES_H

#include "retryd/buf.h"
#include "retryd/store.h"

typedef struct rd_enqueue_lines rd_enqueue_lines_t;

/* Borrows store, which must outlive it. */
rd_enqueue_lines_t *rd_enqueue_lines_new(rd_store_t *store);

/* Frees el. Requests still waiting are dropped without their callbacks:
 * call only when nothing can be waiting (the HTTP servers have drained,
 * and a waiting request is one they wait for). NULL is a no-op. */
void rd_enqueue_lines_free(rd_enqueue_lines_t *el);

/* rd_store_enqueue through el: the same arguments, the same result. e's
 * strings are copied. Returns -1 when Redis is not ready (cb never runs);
 * else 0, and cb runs once (a call that then cannot be sent answers
 * UNAVAILABLE through it, possibly before this returns). */
int rd_enqueue_lines_enqueue(rd_enqueue_lines_t *el, rd_store_queue_t q, const rd_enqueue_t *e,
                             rd_store_messages_cb cb, void *arg);

/* Appends the counters in the Prometheus text format (/metrics). */
void rd_enqueue_lines_render_metrics(const rd_enqueue_lines_t *el, rd_buf_t *out);

#endif
