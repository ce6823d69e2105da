/* enqueue_chunks.c - a batch of enqueues as enqueue_many calls in order, one
 * at a time (include/retryd/enqueue_chunks.h). */
#include "retryd/enqueue_chunks.h"

#include <string.h>

#include "retryd/alloc.h"
#include "retryd/limits.h"

typedef struct chunks {
    rd_store_t *st;
    char *queue;                /* owned copy: the caller's may not outlive the first call */
    size_t queue_len;
    const rd_enqueue_t *items;  /* borrowed until on_done */
    size_t n, next, in_call;    /* the call in flight carries [next, next + in_call) */
    rd_enqueue_chunk_cb on_chunk;
    rd_enqueue_done_cb on_done;
    void *arg;
} chunks_t;

/* How many items from `from` on the next call takes: up to the count and
 * the bytes of one call, and at least one. */
static size_t chunk_size(const chunks_t *c, size_t from)
{
    size_t k = 0, bytes = 0;
    while (from + k < c->n && k < RD_ENQUEUE_MANY_MAX) {
        const rd_enqueue_t *it = &c->items[from + k];
        size_t b = it->len + (it->attributes ? it->attributes_len : 0);
        if (k > 0 && bytes + b > RD_ENQUEUE_MANY_BYTES) break;
        bytes += b;
        k++;
    }
    return k;
}

static void on_called(const rd_store_enqueued_many_t *res, void *arg);

static int send_next(chunks_t *c)
{
    c->in_call = chunk_size(c, c->next);
    rd_store_queue_t q = { .name = c->queue, .len = c->queue_len };
    return rd_store_enqueue_many(c->st, q, c->items + c->next, c->in_call, on_called, c);
}

static void finish(chunks_t *c, const rd_store_head_t *failure)
{
    c->on_done(c->next, failure, failure ? c->in_call : 0, c->arg);
    rd_free(c->queue);
    rd_free(c);
}

static void on_called(const rd_store_enqueued_many_t *res, void *arg)
{
    chunks_t *c = arg;
    if (res->head.status != RD_STORE_OK) {
        finish(c, &res->head);
        return;
    }
    if (res->count == 0) {   /* the parser takes none such; never loop on one */
        rd_store_head_t bad = { .status = RD_STORE_ERROR };
        finish(c, &bad);
        return;
    }
    c->on_chunk(c->next, res, c->arg);
    c->next += res->count;   /* a short answer: the rest goes again */
    if (c->next >= c->n) {
        finish(c, NULL);
        return;
    }
    if (send_next(c) != 0) {
        rd_store_head_t not_sent = { .status = RD_STORE_UNAVAILABLE };
        finish(c, &not_sent);
    }
}

int rd_enqueue_chunks(rd_store_t *st, rd_store_queue_t q, const rd_enqueue_t *items, size_t n,
                      rd_enqueue_chunk_cb on_chunk, rd_enqueue_done_cb on_done, void *arg)
{
    if (n == 0) return -1;
    chunks_t *c = rd_calloc(1, sizeof *c);
    *c = (chunks_t){ .st = st, .queue = rd_strndup(q.name, q.len), .queue_len = q.len,
                     .items = items, .n = n, .on_chunk = on_chunk, .on_done = on_done,
                     .arg = arg };
    if (send_next(c) != 0) {
        rd_free(c->queue);
        rd_free(c);
        return -1;
    }
    return 0;
}
