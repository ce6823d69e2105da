/* queue_clear.c - emptying a queue to the end: one bounded drop_queue or
 * purge_all at a time, queue_forget between a drop's data and its end.
 * A queue that has or had shards (docs/sharding.md "Every API over all
 * shards") is emptied shard by shard from the last it ever had (the
 * layout's hw: a lowered-away shard keeps its counters and policy copy)
 * down to shard 0, with the layout read from shard 0 first: a drop's first
 * call on a shard replaces that shard's policy copy by a pause, so from then
 * on it takes no placement, and shard 0, the queue's own, goes last. Only
 * shard 0 is registered: a shard above it ends without queue_forget. */
#include "retryd/queue_clear.h"

#include "retryd/alloc.h"
#include "retryd/log.h"
#include "retryd/shard_view.h"

typedef struct clear {
    rd_store_t *st;
    char *queue;
    size_t queue_len;
    rd_queue_clear_mode_t mode;
    bool unregistered;          /* drop: queue_forget ran since the last "unregister" */
    rd_shard_view_t view;       /* the layout as read at the start */
    int shard;                  /* the shard being emptied: view.hw - 1 down to 0 */
    long long deleted;          /* so far */
    bool (*go_on)(void *arg);
    rd_store_cleared_cb cb;
    void *arg;
} clear_t;

static void on_batch(const rd_store_cleared_t *res, void *arg);

static rd_store_queue_t queue_of(const clear_t *c)
{
    return (rd_store_queue_t){ .name = c->queue, .len = c->queue_len };
}

static int next_batch(clear_t *c)
{
    rd_store_queue_t q = rd_shard_view_at(c->view.hw > 1 ? &c->view : NULL, queue_of(c), c->shard);
    if (c->mode == RD_QUEUE_PURGE_ALL) return rd_store_purge_all(c->st, q, on_batch, c);
    /* A shard above 0 is in no registry: it is never forgotten. */
    return rd_store_drop_queue(c->st, q, c->unregistered || c->shard > 0, on_batch, c);
}

static void clear_end(clear_t *c, rd_store_cleared_t *res)
{
    res->deleted = c->deleted;
    c->cb(res, c->arg);
    rd_free(c->queue);
    rd_free(c);
}

/* The one place a failed start is answered: as the callback, with the status. */
static void go_on_or_end(clear_t *c, int rc)
{
    if (rc == 0) return;
    rd_store_cleared_t out = { .head.status = RD_STORE_UNAVAILABLE };
    clear_end(c, &out);
}

static void on_forgotten(const rd_store_count_t *res, void *arg)
{
    clear_t *c = arg;
    if (res->head.status != RD_STORE_OK) {
        rd_store_cleared_t out = { .head = res->head };
        clear_end(c, &out);
        return;
    }
    c->unregistered = true;
    go_on_or_end(c, next_batch(c));
}

/* One bounded call at a time, so other clients' commands interleave
 * between them. */
static void on_batch(const rd_store_cleared_t *res, void *arg)
{
    clear_t *c = arg;
    if (res->head.status != RD_STORE_OK) {
        if (c->deleted > 0) rd_warn("store: emptying a queue stopped after %lld deleted", c->deleted);
        rd_store_cleared_t out = *res;
        clear_end(c, &out);
        return;
    }
    c->deleted += res->deleted;
    if (res->state == RD_CLEAR_DONE && c->shard > 0) {   /* on to the next shard down */
        c->shard--;
        c->unregistered = false;
        go_on_or_end(c, next_batch(c));
        return;
    }
    if (res->state == RD_CLEAR_DONE) {
        rd_store_cleared_t out = { .head.status = RD_STORE_OK, .state = RD_CLEAR_DONE };
        clear_end(c, &out);
        return;
    }
    if (c->go_on && !c->go_on(c->arg)) {
        rd_info("store: emptying a queue stopped after %lld deleted: the client has gone",
                c->deleted);
        rd_store_cleared_t out = { .head.status = RD_STORE_UNAVAILABLE };
        clear_end(c, &out);
        return;
    }
    if (res->state == RD_CLEAR_UNREGISTER && c->shard == 0) {
        go_on_or_end(c, rd_store_queue_forget(c->st, queue_of(c), on_forgotten, c));
        return;
    }
    /* More data came after an "unregister" (an enqueue meanwhile): forget again. */
    c->unregistered = false;
    go_on_or_end(c, next_batch(c));
}

/* The layout is read: the walk starts at the last shard the queue had. */
static void on_layout_read(const rd_store_strings_t *res, void *arg)
{
    clear_t *c = arg;
    if (res->head.status != RD_STORE_OK) {
        rd_store_cleared_t out = { .head = res->head };
        clear_end(c, &out);
        return;
    }
    (void)rd_shard_layout_read(res->strings, res->count, &c->view);
    c->shard = c->view.hw - 1;
    go_on_or_end(c, next_batch(c));
}

int rd_queue_clear(rd_store_t *st, rd_store_queue_t q, rd_queue_clear_mode_t mode,
                   bool (*go_on)(void *arg), rd_store_cleared_cb cb, void *arg)
{
    clear_t *c = rd_calloc(1, sizeof *c);
    c->st = st;
    c->queue = rd_strndup(q.name, q.len);
    c->queue_len = q.len;
    c->mode = mode;
    c->go_on = go_on;
    c->cb = cb;
    c->arg = arg;
    int rc = rd_store_policy_pairs(st, queue_of(c), on_layout_read, c);
    if (rc != 0) {
        rd_free(c->queue);
        rd_free(c);
    }
    return rc;
}
