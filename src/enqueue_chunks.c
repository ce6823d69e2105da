/* enqueue_chunks.c - a batch of enqueues as enqueue_many calls in order, one
 * at a time (include/retryd/enqueue_chunks.h).
 *
 * On a sharded queue (docs/sharding.md "Enqueue: which shard") each call
 * goes whole to one shard: a run of items that may all go there (ungrouped
 * and unkeyed ones anywhere, a grouped or keyed one only on its shard), the
 * runs of ungrouped items spread by the view's round robin. An item that
 * needs looks at older shards first ("only if present", during a raise)
 * goes alone, to each in turn. A call refused for the view (RESHARD: the
 * view is read again; COPY: the policy is copied) goes again once. */
#include "retryd/enqueue_chunks.h"

#include <string.h>

#include "retryd/alloc.h"
#include "retryd/limits.h"
#include "retryd/shard_admin.h"
#include "retryd/shard_view.h"

typedef struct chunks {
    rd_store_t *st;
    char *queue;                /* owned copy: the caller's may not outlive the first call */
    size_t queue_len;
    const rd_enqueue_t *items;  /* borrowed until on_done */
    size_t n, next, in_call;    /* the call in flight carries [next, next + in_call) */
    int shard;                  /* its shard */
    rd_shard_attempts_t attempts;   /* a lone item's shards, in turn (n > 1) */
    int attempt;
    rd_enqueue_t one;           /* that item, only_present set while it looks */
    bool resharded, copied;     /* the call was refused for the view (once each) */
    rd_enqueue_chunk_cb on_chunk;
    rd_enqueue_done_cb on_done;
    void *arg;
} chunks_t;

static bool placed_by_name(const rd_enqueue_t *e)
{
    return (e->group && e->group[0]) || (e->idempotency_key && e->idempotency_key[0]);
}

static size_t item_bytes(const rd_enqueue_t *it)
{
    return it->len + (it->attributes ? it->attributes_len : 0);
}

/* The next call: its shard and how many items from c->next it takes (up to
 * the count and the bytes of one call, and at least one). */
static void plan(chunks_t *c)
{
    rd_store_queue_t q = { .name = c->queue, .len = c->queue_len };
    uint64_t now = rd_store_now_ms(c->st);
    rd_shard_view_t *v = rd_store_view(c->st, q);
    const rd_enqueue_t *first = &c->items[c->next];
    c->attempts.n = 0;
    c->shard = 0;
    if (v) {
        rd_shard_view_attempts(v, first, now, &c->attempts);
        c->attempt = 0;
        c->shard = c->attempts.shard[0];
        if (c->attempts.n > 1) {   /* looks first: alone */
            c->in_call = 1;
            return;
        }
    }
    size_t k = 0, bytes = 0;
    while (c->next + k < c->n && k < RD_ENQUEUE_MANY_MAX) {
        const rd_enqueue_t *it = &c->items[c->next + k];
        if (k > 0 && bytes + item_bytes(it) > RD_ENQUEUE_MANY_BYTES) break;
        if (k > 0 && v && placed_by_name(it)) {
            rd_shard_attempts_t a;
            rd_shard_view_attempts(v, it, now, &a);
            if (a.n != 1 || a.shard[0] != c->shard) break;
        }
        bytes += item_bytes(it);
        k++;
    }
    c->in_call = k;
}

static void on_called(const rd_store_enqueued_many_t *res, void *arg);

static int send_planned(chunks_t *c)
{
    rd_store_queue_t q = { .name = c->queue, .len = c->queue_len };
    rd_shard_view_t *v = rd_store_view(c->st, q);
    if (v) q = rd_shard_view_at(v, q, c->shard);
    const rd_enqueue_t *items = c->items + c->next;
    if (c->attempts.n > 1) {
        c->one = c->items[c->next];
        c->one.only_present = c->attempt + 1 < c->attempts.n;
        items = &c->one;
    }
    return rd_store_enqueue_many(c->st, q, items, c->in_call, on_called, c);
}

static int send_next(chunks_t *c)
{
    plan(c);
    return send_planned(c);
}

static void finish(chunks_t *c, const rd_store_head_t *failure)
{
    c->on_done(c->next, failure, failure ? c->in_call : 0, c->arg);
    rd_free(c->queue);
    rd_free(c);
}

static void go_on(chunks_t *c)
{
    if (send_next(c) != 0) {
        rd_store_head_t not_sent = { .status = RD_STORE_UNAVAILABLE };
        finish(c, &not_sent);
    }
}

static void on_view_read(const rd_store_strings_t *res, void *arg)
{
    chunks_t *c = arg;
    rd_store_queue_t q = { .name = c->queue, .len = c->queue_len };
    if (res->head.status == RD_STORE_OK)
        rd_shard_views_learn(rd_store_views(c->st), q, res->strings, res->count,
                             rd_store_now_ms(c->st));
    go_on(c);
}

static void on_policy_copied(const rd_shard_admin_result_t *res, void *arg)
{
    (void)res;   /* a copy that failed: the call sent again answers it */
    go_on(arg);
}

static void on_called(const rd_store_enqueued_many_t *res, void *arg)
{
    chunks_t *c = arg;
    rd_store_status_t status = res->head.status;
    bool *once = status == RD_STORE_RESHARD ? &c->resharded
                 : status == RD_STORE_COPY ? &c->copied : NULL;
    if (once && !*once) {
        *once = true;
        rd_store_queue_t q = { .name = c->queue, .len = c->queue_len };
        int rc = status == RD_STORE_COPY
                     ? rd_shard_admin_copy(c->st, q, on_policy_copied, c)
                     : rd_store_policy_pairs(c->st, q, on_view_read, c);
        if (rc != 0) {
            rd_store_head_t not_sent = { .status = RD_STORE_UNAVAILABLE };
            finish(c, &not_sent);
        }
        return;
    }
    if (status != RD_STORE_OK) {
        finish(c, &res->head);
        return;
    }
    if (res->count == 0) {   /* the parser takes none such; never loop on one */
        rd_store_head_t bad = { .status = RD_STORE_ERROR };
        finish(c, &bad);
        return;
    }
    /* A lone item not on this shard: its next shard (nothing was written). */
    if (c->attempts.n > 1 && res->items[0].head.status == RD_STORE_MOVED &&
        c->attempt + 1 < c->attempts.n) {
        c->attempt++;
        c->shard = c->attempts.shard[c->attempt];
        if (send_planned(c) != 0) {
            rd_store_head_t not_sent = { .status = RD_STORE_UNAVAILABLE };
            finish(c, &not_sent);
        }
        return;
    }
    c->resharded = c->copied = false;
    c->on_chunk(c->next, res, c->arg);
    c->next += res->count;   /* a short answer: the rest goes again */
    if (c->next >= c->n) {
        finish(c, NULL);
        return;
    }
    go_on(c);
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
