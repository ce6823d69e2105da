/* enqueue_chunks.h - more enqueues than one enqueue_many call takes: sent
 * as calls of at most RD_ENQUEUE_MANY_MAX items and RD_ENQUEUE_MANY_BYTES
 * bytes of payloads and attributes, one after the other (the next once the
 * one before has answered), so their ids follow the items' order and no
 * call holds Redis for long. A call that answers short (the originals of
 * its duplicates filled its reply, store.h) is followed by one from the
 * first item it left. The HTTP batch enqueue and SQS's SendMessageBatch
 * use it (docs/reference.md "Batch enqueue"). */
#ifndef RETRYD_ENQUEUE_CHUNKS_H
#define RETRYD_ENQUEUE_CHUNKS_H

#include <stddef.h>

#include "retryd/store.h"

/* One call's answer: items [first, first + res->count) of the caller's
 * array, res->items[i] for item first + i (valid only inside the callback,
 * as every store result). */
typedef void (*rd_enqueue_chunk_cb)(size_t first, const rd_store_enqueued_many_t *res, void *arg);

/* The end, after every chunk's callback. done: items [0, done) were
 * answered. failure NULL when done is n; else the head of the call that
 * failed (LOST: the link dropped after it was sent, its items' outcome is
 * unknown; UNAVAILABLE: not sent; ERROR: Redis's error), which carried
 * items [done, done + in_call); the items after those were never sent. */
typedef void (*rd_enqueue_done_cb)(size_t done, const rd_store_head_t *failure, size_t in_call,
                                   void *arg);

/* Sends items[0..n) (n >= 1; borrowed until on_done) to q. -1 when the
 * first call could not start (nothing sent; no callback runs); else 0, and
 * on_chunk runs once per call answered, then on_done once, from the loop. */
int rd_enqueue_chunks(rd_store_t *st, rd_store_queue_t q, const rd_enqueue_t *items, size_t n,
                      rd_enqueue_chunk_cb on_chunk, rd_enqueue_done_cb on_done, void *arg);

#endif
